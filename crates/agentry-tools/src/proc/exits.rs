//! [`ChildExits`]: a wake-up on the next exit of a child of this process, shared
//! by the group's member loop and the stray sweep.

use std::time::Duration;

/// Wakes the member loops when a child of this process exits (SIGCHLD: members
/// re-parented to us as subreaper), instead of polling on the timer, whose 1 ms
/// ticks would add up to 2 ms to every cancellation. The timer stays as a
/// fallback: members re-parented elsewhere send us nothing.
pub(super) struct ChildExits(Option<tokio::signal::unix::Signal>);

impl ChildExits {
    pub(super) fn listen() -> Self {
        ChildExits(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok())
    }

    /// Returns after the next child exit, or 1 ms at most.
    pub(super) async fn next(&mut self) {
        let tick = tokio::time::sleep(Duration::from_millis(1));
        match &mut self.0 {
            Some(signal) => {
                tokio::select! {
                    _ = signal.recv() => {}
                    () = tick => {}
                }
            }
            None => tick.await,
        }
    }
}
