//! A future polled inside a span.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tracing::Span;

pin_project_lite::pin_project! {
    /// `inner`, entered into `span` on every poll. Unlike
    /// `tracing::Instrument`, dropping it does not enter the span again:
    /// nothing of ours makes spans while a future is dropped, and each entry
    /// is a trip through every layer of the subscriber (agentry polls one such
    /// future per decision and one per tool call).
    /// The span is borrowed: a `Span` clone and its drop are two more trips.
    #[must_use = "futures do nothing unless polled"]
    pub struct InSpan<'s, F> {
        #[pin]
        inner: F,
        span: &'s Span,
    }
}

/// Polls `inner` inside `span` (a disabled span costs a check per poll).
pub fn in_span<F: Future>(inner: F, span: &Span) -> InSpan<'_, F> {
    InSpan { inner, span }
}

impl<F: Future> Future for InSpan<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        this.inner.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_future_runs_inside_the_span() {
        tracing::subscriber::with_default(tracing_subscriber::registry(), || {
            let span = tracing::info_span!(target: "agentry::gen_ai", "outer");
            let id = span.id();
            let seen = poll_once(in_span(async { Span::current().id() }, &span));
            assert_eq!(seen, id);
        });
    }

    /// A single poll suffices: the future is ready at once.
    fn poll_once<F: Future>(f: F) -> F::Output {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("the test future is always ready"),
        }
    }
}
