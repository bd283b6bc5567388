//! Ctrl-c: the first stops the run gracefully, a second exits at once.

use agentry::Runtime;
use tokio::task::JoinHandle;

/// Listens for ctrl-c now, and stops `runtime`'s runs on the first one. Abort
/// the returned task once the run is over.
pub(crate) fn stop_on_interrupt(runtime: &Runtime) -> std::io::Result<JoinHandle<()>> {
    let signals = Interrupts::listen()?;
    Ok(tokio::spawn(shutdown_on_interrupt(
        runtime.clone(),
        signals,
    )))
}

/// The first ctrl-c stops the run gracefully (in-flight tools cancelled, `user_abort`,
/// trace flushed); a second one exits at once.
async fn shutdown_on_interrupt(runtime: Runtime, mut signals: Interrupts) {
    if !signals.next().await {
        return;
    }
    eprintln!("agentry: interrupted, stopping the run (press ctrl-c again to exit at once)");
    runtime.shutdown();
    if signals.next().await {
        std::process::exit(130);
    }
}

/// Ctrl-c notifications. On unix the handler is installed by [`Interrupts::listen`]
/// itself (tokio's portable `ctrl_c()` installs it only when first polled), so once
/// `listen` returns, SIGINT can no longer kill the process before the run records
/// its stop.
struct Interrupts {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupts {
    fn listen() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
            Ok(Interrupts { signal })
        }
        #[cfg(not(unix))]
        {
            Ok(Interrupts {})
        }
    }

    /// Waits for the next ctrl-c; false when no more can arrive.
    async fn next(&mut self) -> bool {
        #[cfg(unix)]
        {
            self.signal.recv().await.is_some()
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await.is_ok()
        }
    }
}
