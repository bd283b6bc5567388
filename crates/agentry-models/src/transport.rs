//! HTTP status classification, the retry loop, and the stall-aware SSE reader
//! shared by both providers.

use std::pin::Pin;
use std::time::Duration;

use agentry_protocol::decision::Decision;
use eventsource_stream::{Event, Eventsource};
use futures::{Stream, StreamExt};

use crate::{ModelError, RetryConfig};

/// Why one attempt at a model turn failed.
#[derive(Debug)]
pub(crate) enum AttemptError {
    /// Transient (429, 5xx, connection lost, stalled): worth another attempt.
    Retryable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// The credentials are refused (401/403), or the server's certificate does
    /// not verify: the run must stop.
    Fatal(String),
    /// Not transient, not fatal (400, malformed stream): this turn fails and the
    /// model sees the failure as an observation.
    GiveUp(String),
}

impl AttemptError {
    pub(crate) fn retry(message: impl Into<String>) -> Self {
        AttemptError::Retryable {
            message: message.into(),
            retry_after: None,
        }
    }
}

/// How a model turn failed once its retries were over. The fallback chain
/// reads the kind: only [`TurnFailure::Exhausted`] passes the turn to the next
/// model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TurnFailure {
    /// Transient failures (connection refused, 429, 5xx, a stall, a `Retry-After`
    /// over the limit) outlasted the retry budget: the server is unavailable now.
    Exhausted(String),
    /// The credentials are refused (401/403): the run must stop.
    Refused(String),
    /// The request or the reply is wrong (400, a malformed stream): the model
    /// sees the failure as an observation.
    Invalid(String),
}

impl TurnFailure {
    /// The decision the turn ends with.
    pub(crate) fn into_decision(self) -> Decision {
        match self {
            TurnFailure::Refused(message) => Decision::Failed {
                message,
                fatal: true,
            },
            TurnFailure::Exhausted(message) | TurnFailure::Invalid(message) => Decision::Failed {
                message,
                fatal: false,
            },
        }
    }
}

/// Runs `attempt` until it succeeds or the retry budget is spent.
pub(crate) async fn with_retries<T, F, Fut>(
    retry: &RetryConfig,
    mut attempt: F,
) -> Result<T, TurnFailure>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, AttemptError>>,
{
    let mut retries = 0u32;
    loop {
        let (message, retry_after) = match attempt().await {
            Ok(t) => return Ok(t),
            Err(AttemptError::Fatal(message)) => return Err(TurnFailure::Refused(message)),
            Err(AttemptError::GiveUp(message)) => return Err(TurnFailure::Invalid(message)),
            Err(AttemptError::Retryable {
                message,
                retry_after,
            }) => (message, retry_after),
        };
        if retries >= retry.max_retries {
            return Err(TurnFailure::Exhausted(format!(
                "{message} (gave up after {} attempts)",
                retries + 1
            )));
        }
        let delay = match retry_after {
            Some(d) if d > retry.max_delay => {
                return Err(TurnFailure::Exhausted(format!(
                    "{message}; the server asked to retry after {}s, over the {}s limit",
                    d.as_secs(),
                    retry.max_delay.as_secs()
                )));
            }
            Some(d) => d,
            None => backoff(retry, retries),
        };
        tracing::warn!(%message, retry = retries + 1, delay_ms = delay.as_millis() as u64, "model request failed; retrying");
        tokio::time::sleep(delay).await;
        retries += 1;
    }
}

/// Exponential backoff with full jitter: uniform in `[0, min(max, base·2^n)]`, so
/// many clients hitting one rate limit spread out instead of retrying in lockstep.
fn backoff(retry: &RetryConfig, n: u32) -> Duration {
    let cap = retry
        .base_delay
        .saturating_mul(2u32.saturating_pow(n))
        .min(retry.max_delay);
    let millis = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(fastrand::u64(0..=millis))
}

/// Sends a request and classifies the status. `provider` names the server in
/// messages; `key_var` is named when credentials are refused.
pub(crate) async fn send(
    request: reqwest::RequestBuilder,
    provider: &str,
    key_var: &str,
    traceparent: Option<&str>,
) -> Result<reqwest::Response, AttemptError> {
    // W3C trace context: the request's span (or the run) is the server's parent.
    let request = match traceparent {
        Some(tp) => request.header("traceparent", tp),
        None => request,
    };
    let response = request
        .send()
        .await
        .map_err(|e| send_failure(&e, provider))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    // The error body usually says what is wrong; read a bounded amount of it.
    let body = tokio::time::timeout(Duration::from_secs(5), response.text())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let body: String = body.chars().take(500).collect();
    let message = format!("{provider}: HTTP {status}: {body}");
    Err(match status.as_u16() {
        401 | 403 => AttemptError::Fatal(format!(
            "{message} (the server refused the credentials; check {key_var})"
        )),
        408 | 409 | 429 | 500..=599 => AttemptError::Retryable {
            message,
            retry_after,
        },
        _ => AttemptError::GiveUp(message),
    })
}

/// A request that got no response. A TLS failure is fatal: a certificate that
/// does not verify will not verify on the next attempt either, and as a
/// non-fatal failure every later turn would fail the same way until the
/// budget runs out. Anything else (refused, reset, timed out) is retried.
fn send_failure(error: &reqwest::Error, provider: &str) -> AttemptError {
    let url = error.url().map(|u| u.as_str()).unwrap_or_default();
    match crate::tls::tls_failure(error) {
        Some(reason) => AttemptError::Fatal(format!(
            "{provider}: TLS failed with {}: {reason}; the run stops (a certificate that does not verify is not retried)",
            crate::tls::host_of(url)
        )),
        None => AttemptError::retry(format!(
            "{provider}: request failed: {}",
            crate::error::chain(error)
        )),
    }
}

/// Why the byte stream under the SSE parser ended early.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamFail {
    #[error("{0}")]
    Http(reqwest::Error),
    #[error("stream stalled: no bytes for {0:?}")]
    Stalled(Duration),
}

type EventStream = Pin<
    Box<dyn Stream<Item = Result<Event, eventsource_stream::EventStreamError<StreamFail>>> + Send>,
>;

/// SSE events of a response, abandoned when no bytes arrive for `stall`.
pub(crate) struct SseReader {
    events: EventStream,
    /// When the request was sent, until its first event arrives (only while
    /// a span records it; see [`request_clock`]).
    sent: Option<std::time::Instant>,
}

/// The time a request is sent, when its `chat` span records the time to the
/// first chunk (nothing is read from the clock otherwise).
pub(crate) fn request_clock() -> Option<std::time::Instant> {
    (!tracing::Span::current().is_disabled()).then(std::time::Instant::now)
}

impl SseReader {
    pub(crate) fn new(
        response: reqwest::Response,
        stall: Duration,
        sent: Option<std::time::Instant>,
    ) -> Self {
        let mut reader = Self::of_bytes(response.bytes_stream(), stall);
        reader.sent = sent;
        reader
    }

    /// Events of any byte stream cut anywhere (a response's, or a test's).
    pub(crate) fn of_bytes<S, B>(bytes: S, stall: Duration) -> Self
    where
        S: Stream<Item = Result<B, reqwest::Error>> + Send + Unpin + 'static,
        B: AsRef<[u8]> + Send + 'static,
    {
        // The stall clock restarts on every chunk of bytes, so keep-alive comments
        // count as liveness even though the SSE parser drops them.
        let bytes = futures::stream::unfold(Some(bytes), move |state| async move {
            let mut inner = state?;
            match tokio::time::timeout(stall, inner.next()).await {
                Ok(Some(Ok(b))) => Some((Ok(b), Some(inner))),
                Ok(Some(Err(e))) => Some((Err(StreamFail::Http(e)), None)),
                Ok(None) => None,
                Err(_) => Some((Err(StreamFail::Stalled(stall)), None)),
            }
        });
        SseReader {
            events: Box::pin(without_bom(Box::pin(bytes)).eventsource()),
            sent: None,
        }
    }

    /// The next event; `None` at the end of the stream.
    pub(crate) async fn next(&mut self, provider: &str) -> Result<Option<Event>, AttemptError> {
        match self.events.next().await {
            None => Ok(None),
            Some(Ok(event)) => {
                if let Some(sent) = self.sent.take() {
                    // On the request's `chat` span (a no-op on any other).
                    tracing::Span::current().record(
                        "agentry.time_to_first_chunk_ms",
                        agentry_telemetry::int(sent.elapsed().as_millis() as u64),
                    );
                }
                Ok(Some(event))
            }
            Some(Err(e)) => Err(AttemptError::retry(format!("{provider}: {e}"))),
        }
    }
}

/// A piece of the body on its way to the SSE parser: the leading comment,
/// the bytes held while looking for a byte-order mark, or a chunk as it came.
enum Piece<B> {
    Lead,
    Held(Vec<u8>),
    Chunk(B),
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Piece<B> {
    fn as_ref(&self) -> &[u8] {
        match self {
            Piece::Lead => b":\n",
            Piece::Held(bytes) => bytes,
            Piece::Chunk(b) => b.as_ref(),
        }
    }
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Where [`without_bom`] is in the body.
struct BomState<S> {
    /// Fused: the end may be looked at twice (once to let the head go).
    inner: futures::stream::Fuse<S>,
    /// The body's first bytes, until they show whether a mark leads it.
    head: Vec<u8>,
    /// The lead went out; past the head, chunks pass as they come.
    lead_sent: bool,
    past_head: bool,
}

/// The body with one leading byte-order mark dropped (as SSE says), behind a
/// comment line. eventsource-stream 0.2.3 drops a leading mark itself by
/// slicing off one *byte* of a three-byte character, a panic on any body that
/// starts with one; a comment first never starts with a mark, so its check
/// never fires, and the comment is ignored as SSE says.
fn without_bom<S, B, E>(inner: S) -> impl Stream<Item = Result<Piece<B>, E>>
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
{
    let state = BomState {
        inner: inner.fuse(),
        head: Vec::new(),
        lead_sent: false,
        past_head: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        if !st.lead_sent {
            st.lead_sent = true;
            return Some((Ok(Piece::Lead), st));
        }
        loop {
            let next = st.inner.next().await;
            if st.past_head {
                return next.map(|item| (item.map(Piece::Chunk), st));
            }
            match next {
                Some(Ok(chunk)) => {
                    st.head.extend_from_slice(chunk.as_ref());
                    if st.head.len() < BOM.len() && BOM.starts_with(&st.head) {
                        continue;
                    }
                }
                Some(Err(e)) => return Some((Err(e), st)),
                None => {}
            }
            st.past_head = true;
            let mut head = std::mem::take(&mut st.head);
            if head.starts_with(BOM) {
                head.drain(..BOM.len());
            }
            return Some((Ok(Piece::Held(head)), st));
        }
    })
}

/// Checks that something answers HTTP at `url` (any status will do), over a
/// TLS connection that verifies when the URL is `https://`.
pub(crate) async fn probe(client: &reqwest::Client, url: &str) -> Result<(), ModelError> {
    match client.get(url).timeout(Duration::from_secs(5)).send().await {
        Ok(_) => Ok(()),
        Err(e) => Err(match crate::tls::tls_failure(&e) {
            Some(reason) => ModelError::Tls {
                host: crate::tls::host_of(url),
                url: url.to_string(),
                reason,
            },
            None => ModelError::Unreachable {
                url: url.to_string(),
                reason: crate::error::chain(&e),
            },
        }),
    }
}

/// Hex sha256 of the exact request body, for the trace.
pub(crate) fn prompt_hash(body: &[u8]) -> String {
    agentry_protocol::fingerprint::sha256_hex(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_jittered_under_an_exponential_cap() {
        let retry = RetryConfig {
            max_retries: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(350),
        };
        let ms = |n: u32| -> Vec<u64> {
            (0..2_000)
                .map(|_| backoff(&retry, n).as_millis() as u64)
                .collect()
        };
        let (first, second, late) = (ms(0), ms(1), ms(10));
        let max = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
        let min = |v: &[u64]| v.iter().copied().min().unwrap_or(u64::MAX);
        let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len() as f64;
        // Under the cap: base·2^n, at most max_delay.
        assert!(max(&first) <= 100 && max(&second) <= 200 && max(&late) <= 350);
        // Exponential: each cap is reached for (2,000 uniform draws land in the
        // top tenth of their range with probability 1 − 0.9^2000).
        assert!(max(&first) >= 90, "{}", max(&first));
        assert!(max(&second) >= 180, "{}", max(&second));
        assert!(max(&late) >= 315, "{}", max(&late));
        assert!(mean(&first) < mean(&second) && mean(&second) < mean(&late));
        // Full jitter: spread over the whole range, down to (near) zero.
        for draws in [&first, &second, &late] {
            assert!(min(draws) <= 10, "{}", min(draws));
            let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
            assert!(distinct.len() >= 50, "{} distinct values", distinct.len());
        }
    }

    /// Every event of `body` cut at `cuts`, or the reader's error.
    async fn events_of(body: &[u8], cuts: &[usize]) -> Result<Vec<String>, String> {
        let chunks = crate::stream_props::cut(body, cuts);
        let mut reader = crate::stream_props::reader(chunks);
        let mut data = Vec::new();
        while let Some(event) = reader.next("test").await.map_err(|e| format!("{e:?}"))? {
            data.push(event.data);
        }
        Ok(data)
    }

    /// Found by `openai::props::any_bytes_cut_anywhere_never_panic`: a body
    /// starting with a byte-order mark panicked eventsource-stream ("byte
    /// index 1 is not a char boundary"). One mark is dropped, as SSE says,
    /// however the body is cut; a second is part of the first line's field
    /// name (an unknown field, so no event).
    #[tokio::test]
    async fn a_leading_byte_order_mark_is_dropped_not_a_panic() {
        let one = "\u{feff}data: x\n\n".as_bytes();
        for cuts in [&[][..], &[1], &[2], &[1, 2, 3], &[3, 4]] {
            assert_eq!(
                events_of(one, cuts).await,
                Ok(vec!["x".to_string()]),
                "{cuts:?}"
            );
        }
        let two = "\u{feff}\u{feff}data: x\n\ndata: y\n\n".as_bytes();
        assert_eq!(events_of(two, &[]).await, Ok(vec!["y".to_string()]));
        // Only a mark's first bytes, then the end: an error, not a panic.
        assert!(events_of(b"\xEF\xBB", &[1]).await.is_err());
        assert_eq!(events_of(b"", &[]).await, Ok(vec![]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_over_the_limit_fails_at_once() {
        let retry = RetryConfig::default();
        let mut calls = 0;
        let result: Result<(), TurnFailure> = with_retries(&retry, || {
            calls += 1;
            async {
                Err(AttemptError::Retryable {
                    message: "429".into(),
                    retry_after: Some(Duration::from_secs(3600)),
                })
            }
        })
        .await;
        assert_eq!(calls, 1);
        // Over the limit counts as exhausted: a fallback model may take the turn.
        match result {
            Err(TurnFailure::Exhausted(message)) => assert!(message.contains("3600s"), "{message}"),
            other => panic!("{other:?}"),
        }
    }
}
