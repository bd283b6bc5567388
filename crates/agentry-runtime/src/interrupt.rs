//! The step's cancellation a user's interrupt fires: a child of the run's
//! token, shared by the conductor (whose steps run under it) and every handle
//! on the run (which cut it).
//!
//! Every cut comes with an input ([`RunInput::Interrupt`]) posted to the
//! conductor *before* the cut, under one lock; the conductor arms a fresh token
//! when it has applied as many interrupt inputs as there were cuts. So a cut
//! token always means an interrupt input is still in the conductor's mailbox:
//! a step that finds its token cut at its start is not taken (the input goes
//! first), and no cut is lost to a step that started just after it.
//!
//! Each cut is numbered; the count of interrupt inputs the conductor has
//! applied is published ([`StepCut::watch_applied`]), so a front end can wait
//! until its cut is applied — the cut step recorded, the input in the session
//! and the trace, the run paused — before it asks the user anything
//! (`agentry run`'s prompt: a ctrl-c there must find the interrupt applied).
//!
//! [`RunInput::Interrupt`]: agentry_protocol::trace::RunInput::Interrupt

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// One run's interrupt switch. Cloneable; every clone is the same switch.
#[derive(Debug, Clone)]
pub(crate) struct StepCut {
    run: CancellationToken,
    shared: Arc<CutShared>,
}

/// One allocation per run: a hibernated run keeps it.
#[derive(Debug)]
struct CutShared {
    armed: Mutex<Armed>,
    /// How many interrupt inputs the conductor has applied, published once
    /// someone watches (most runs are never interrupted).
    applied: std::sync::OnceLock<watch::Sender<u64>>,
}

#[derive(Debug)]
struct Armed {
    /// The step's token; made when a step first asks for it (a hibernated
    /// run holds none).
    token: Option<CancellationToken>,
    /// Cuts made, and interrupt inputs the conductor applied.
    cuts: u64,
    applied: u64,
}

impl StepCut {
    pub(crate) fn new(run: &CancellationToken) -> Self {
        StepCut {
            run: run.clone(),
            shared: Arc::new(CutShared {
                armed: Mutex::new(Armed {
                    token: None,
                    cuts: 0,
                    applied: 0,
                }),
                applied: std::sync::OnceLock::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Armed> {
        // Nothing panics while holding it; a poisoned lock still holds a token.
        self.shared
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The token the next step runs under (cancelled with the run too).
    pub(crate) fn token(&self) -> CancellationToken {
        self.lock()
            .token
            .get_or_insert_with(|| self.run.child_token())
            .clone()
    }

    /// Posts the interrupt's input with `post` and, if it was posted, cuts the
    /// step in progress — one act, as the conductor sees it. Returns the cut's
    /// number: it is applied once [`StepCut::watch_applied`] reaches it.
    pub(crate) fn cut_with<E>(&self, post: impl FnOnce() -> Result<(), E>) -> Result<u64, E> {
        let mut armed = self.lock();
        post()?;
        armed.cuts += 1;
        armed
            .token
            .get_or_insert_with(|| self.run.child_token())
            .cancel();
        Ok(armed.cuts)
    }

    /// The conductor applied an interrupt input (the last thing it does with
    /// it): once every cut's input is applied, steps run under a fresh token
    /// again.
    pub(crate) fn applied(&self) {
        let mut armed = self.lock();
        armed.applied += 1;
        if armed.applied >= armed.cuts
            && armed
                .token
                .as_ref()
                .is_some_and(CancellationToken::is_cancelled)
            && !self.run.is_cancelled()
        {
            armed.token = Some(self.run.child_token());
        }
        // Inputs are applied in the order they were cut (one mailbox).
        if let Some(tx) = self.shared.applied.get() {
            tx.send_replace(armed.applied);
        }
    }

    /// The run hibernates: no step runs until it wakes, so it keeps no step
    /// token (a cut one stays: its input is still to be applied).
    pub(crate) fn shed(&self) {
        let mut armed = self.lock();
        if armed.token.as_ref().is_some_and(|t| !t.is_cancelled()) {
            armed.token = None;
        }
    }

    /// How many interrupt inputs the conductor has applied, as it changes.
    pub(crate) fn watch_applied(&self) -> watch::Receiver<u64> {
        // Made under the lock: no application falls between the first value
        // and the first publication.
        let armed = self.lock();
        self.shared
            .applied
            .get_or_init(|| watch::channel(armed.applied).0)
            .subscribe()
    }
}

/// Whether `step` (a step's token) was cut by an interrupt rather than by the
/// run's own cancellation (deadline, abort, shutdown).
#[inline]
pub(crate) fn is_cut(step: &CancellationToken, run: &CancellationToken) -> bool {
    step.is_cancelled() && !run.is_cancelled()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_holds_until_its_input_is_applied_then_a_fresh_token_is_armed() {
        let run = CancellationToken::new();
        let cut = StepCut::new(&run);
        let first = cut.token();
        let applied = cut.watch_applied();
        assert_eq!(cut.cut_with(|| Ok::<(), ()>(())), Ok(1));
        assert!(first.is_cancelled() && is_cut(&first, &run));
        assert_eq!(*applied.borrow(), 0);
        assert!(
            cut.token().is_cancelled(),
            "still cut: its input is pending"
        );
        cut.applied();
        assert_eq!(*applied.borrow(), 1, "published once applied");
        assert!(!cut.token().is_cancelled());
        assert!(!run.is_cancelled());
    }

    #[test]
    fn two_cuts_need_both_inputs_applied() {
        let run = CancellationToken::new();
        let cut = StepCut::new(&run);
        cut.cut_with(|| Ok::<(), ()>(())).unwrap();
        cut.cut_with(|| Ok::<(), ()>(())).unwrap();
        cut.applied();
        assert!(cut.token().is_cancelled());
        cut.applied();
        assert!(!cut.token().is_cancelled());
    }

    #[test]
    fn an_input_not_posted_cuts_nothing_and_the_run_token_reaches_the_step() {
        let run = CancellationToken::new();
        let cut = StepCut::new(&run);
        assert_eq!(cut.cut_with(|| Err::<(), _>("gone")), Err("gone"));
        let step = cut.token();
        assert!(!step.is_cancelled());
        run.cancel();
        assert!(step.is_cancelled() && !is_cut(&step, &run));
        cut.applied();
        assert!(
            cut.token().is_cancelled(),
            "a cancelled run arms nothing new"
        );
    }
}
