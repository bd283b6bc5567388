//! Whether the conductor may start a step: running, held (paused by the user,
//! waiting for its executor's restart, or both), or stopped.
//!
//! A step wanted while the run is held is remembered (`step_due`) and taken
//! once nothing holds it any more; a stopped run takes none and ignores every
//! later message.
//!
//! ```text
//! Running          ── pause ──────────► Paused
//! Paused           ── resume ─────────► Running           (a due step is taken)
//! Running          ── executor lost ──► Restarting
//! Restarting       ── restarted ──────► Running           (a due step is taken)
//! Restarting       ── pause ──────────► PausedRestarting
//! Paused           ── executor lost ──► PausedRestarting
//! PausedRestarting ── resume ─────────► Restarting
//! PausedRestarting ── restarted ──────► Paused
//! any              ── stop ───────────► Stopped
//! any but Stopped  ── drain ──────────► Drained           (between steps)
//! ```
//!
//! `Drained` is the service's, not the user's: it is never recorded, so the
//! run resumes in a later process as it was before (see `RunHandle::drain`).

/// The conductor's phase. `step_due`: a step was wanted while held, to be
/// taken when the last hold goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Steps start as they are wanted.
    Running,
    /// Paused by the user: no step starts until `resume`.
    Paused { step_due: bool },
    /// The executor died under a step and is not restarted yet. Its reply
    /// port closes before ractor tells its supervisor (this conductor), so a
    /// step waits for the supervision event and the restart instead of
    /// sending its calls to the dead executor.
    Restarting { step_due: bool },
    /// Both: paused, and the executor not restarted yet.
    PausedRestarting { step_due: bool },
    /// The run finished: every later message is ignored.
    Stopped,
    /// Its process is going away: no step starts again here, and only an
    /// abort (or its token) still ends the run.
    Drained,
}

impl Phase {
    /// A fresh run's phase, or a resumed one's (paused when it was stored
    /// paused).
    pub(super) fn starting(paused: bool) -> Phase {
        if paused {
            Phase::Paused { step_due: false }
        } else {
            Phase::Running
        }
    }

    /// Whether a step may start now.
    pub(super) fn is_running(self) -> bool {
        self == Phase::Running
    }

    /// Whether the user paused the run.
    pub(super) fn is_paused(self) -> bool {
        matches!(self, Phase::Paused { .. } | Phase::PausedRestarting { .. })
    }

    /// Whether the run finished.
    pub(super) fn is_stopped(self) -> bool {
        self == Phase::Stopped
    }

    /// Whether the run was drained (see [`Phase::Drained`]).
    pub(super) fn is_drained(self) -> bool {
        self == Phase::Drained
    }

    /// The process is going away: no step starts again (a stopped run stays stopped).
    pub(super) fn drain(&mut self) {
        if *self != Phase::Stopped {
            *self = Phase::Drained;
        }
    }

    /// A step is wanted: true when it may start now; held, it is remembered
    /// for when the last hold goes.
    pub(super) fn take_step(&mut self) -> bool {
        match self {
            Phase::Running => true,
            Phase::Paused { step_due }
            | Phase::Restarting { step_due }
            | Phase::PausedRestarting { step_due } => {
                *step_due = true;
                false
            }
            Phase::Stopped | Phase::Drained => false,
        }
    }

    /// The user pauses the run; false if it was paused already (or stopped).
    pub(super) fn pause(&mut self) -> bool {
        *self = match *self {
            Phase::Running => Phase::Paused { step_due: false },
            Phase::Restarting { step_due } => Phase::PausedRestarting { step_due },
            Phase::Paused { .. }
            | Phase::PausedRestarting { .. }
            | Phase::Stopped
            | Phase::Drained => return false,
        };
        true
    }

    /// The user resumes the run: `None` if it was not paused, else whether a
    /// step is due now.
    pub(super) fn resume(&mut self) -> Option<bool> {
        let (next, due_now) = match *self {
            Phase::Paused { step_due } => (Phase::Running, step_due),
            Phase::PausedRestarting { step_due } => (Phase::Restarting { step_due }, false),
            Phase::Running | Phase::Restarting { .. } | Phase::Stopped | Phase::Drained => {
                return None;
            }
        };
        *self = next;
        Some(due_now)
    }

    /// The executor died under the step in progress.
    pub(super) fn executor_lost(&mut self) {
        *self = match *self {
            Phase::Running => Phase::Restarting { step_due: false },
            Phase::Paused { step_due } => Phase::PausedRestarting { step_due },
            held @ (Phase::Restarting { .. }
            | Phase::PausedRestarting { .. }
            | Phase::Stopped
            | Phase::Drained) => held,
        };
    }

    /// The executor was restarted: whether a step is due now.
    pub(super) fn executor_restarted(&mut self) -> bool {
        let (next, due_now) = match *self {
            Phase::Restarting { step_due } => (Phase::Running, step_due),
            Phase::PausedRestarting { step_due } => (Phase::Paused { step_due }, false),
            other @ (Phase::Running | Phase::Paused { .. } | Phase::Stopped | Phase::Drained) => {
                (other, false)
            }
        };
        *self = next;
        due_now
    }

    /// The run finished.
    pub(super) fn stop(&mut self) {
        *self = Phase::Stopped;
    }
}

#[cfg(test)]
mod tests {
    use super::Phase;

    /// A step wanted while paused and while the executor is down is taken
    /// once, when the last hold goes, whichever goes first.
    #[test]
    fn a_step_wanted_while_held_is_taken_once_the_last_hold_goes() {
        for resume_first in [true, false] {
            let mut phase = Phase::Running;
            phase.executor_lost();
            assert!(!phase.take_step());
            assert!(phase.pause());
            assert!(!phase.pause(), "paused twice");
            assert!(!phase.take_step());
            let due = if resume_first {
                assert_eq!(phase.resume(), Some(false));
                phase.executor_restarted()
            } else {
                assert!(!phase.executor_restarted());
                phase.resume() == Some(true)
            };
            assert!(due, "resume first: {resume_first}");
            assert_eq!(phase, Phase::Running);
            assert!(phase.take_step());
        }
    }

    #[test]
    fn without_a_wanted_step_nothing_is_due_and_a_stopped_run_takes_none() {
        let mut phase = Phase::starting(true);
        assert!(phase.is_paused());
        assert_eq!(phase.resume(), Some(false));
        assert_eq!(phase.resume(), None, "resumed twice");
        phase.executor_lost();
        assert!(!phase.executor_restarted());
        assert!(phase.is_running());
        phase.stop();
        assert!(phase.is_stopped());
        assert!(!phase.take_step());
        assert!(!phase.pause());
        assert_eq!(phase.resume(), None);
    }

    #[test]
    fn a_drained_run_takes_no_step_whatever_it_is_sent_and_a_stopped_one_stays_stopped() {
        let mut phase = Phase::Paused { step_due: true };
        phase.drain();
        assert!(phase.is_drained());
        assert!(!phase.take_step());
        assert_eq!(phase.resume(), None);
        assert!(!phase.pause());
        phase.executor_lost();
        assert!(!phase.executor_restarted());
        assert!(phase.is_drained());
        let mut stopped = Phase::Stopped;
        stopped.drain();
        assert!(stopped.is_stopped());
    }
}
