//! Ctrl-c. At a terminal (stdin and stderr both one), once the run has
//! started, ctrl-c interrupts the step in progress and, once the run has
//! applied the interrupt (the cut step recorded, the run paused), asks the
//! user what to tell the agent; a ctrl-c at that prompt stops the run
//! gracefully, and one more exits at once. Without a terminal (or before the
//! run started), the first ctrl-c stops the run gracefully and a second exits
//! at once.

use std::io::IsTerminal;
use std::sync::{Arc, OnceLock};

use agentry::{RunHandle, Runtime, RuntimeError};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Listens for ctrl-c from [`CtrlC::listen`] until dropped.
pub(crate) struct CtrlC {
    task: JoinHandle<()>,
    /// The run ctrl-c interrupts, once it has started.
    run: Arc<OnceLock<RunHandle>>,
}

impl CtrlC {
    /// Listens for ctrl-c now: until [`CtrlC::attach`], the first one stops
    /// `runtime`'s runs.
    pub(crate) fn listen(runtime: &Runtime) -> std::io::Result<CtrlC> {
        let signals = Interrupts::listen()?;
        let run = Arc::new(OnceLock::new());
        let ask = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
        let task = tokio::spawn(on_ctrl_c(runtime.clone(), signals, Arc::clone(&run), ask));
        Ok(CtrlC { task, run })
    }

    /// The run has started: at a terminal, ctrl-c now interrupts it.
    pub(crate) fn attach(&self, handle: &RunHandle) {
        // Only one run per command; a second attach would change nothing.
        if self.run.set(handle.clone()).is_err() {
            tracing::debug!("ctrl-c is already attached to a run");
        }
    }
}

impl Drop for CtrlC {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Interrupts the run and asks the user, as often as they press ctrl-c (at a
/// terminal, once the run started); then stops the run.
async fn on_ctrl_c(
    runtime: Runtime,
    mut signals: Interrupts,
    run: Arc<OnceLock<RunHandle>>,
    ask: bool,
) {
    loop {
        if !signals.next().await {
            return;
        }
        let Some(handle) = run.get().filter(|_| ask) else {
            break;
        };
        match interrupt_and_ask(handle, &mut signals).await {
            Ok(Answer::Say(_) | Answer::GoOn) => {}
            Ok(Answer::Abort) => break,
            // Stopped: nothing to interrupt; the command is ending anyway.
            Err(e) => {
                tracing::debug!(error = %e, "the run could not be interrupted");
                break;
            }
        }
    }
    stop(&runtime, &mut signals).await;
}

/// The first ctrl-c stops the run gracefully (in-flight tools cancelled,
/// `user_abort`, trace flushed); a second one exits at once.
async fn stop(runtime: &Runtime, signals: &mut Interrupts) {
    eprintln!("agentry: interrupted, stopping the run (press ctrl-c again to exit at once)");
    runtime.shutdown();
    if signals.next().await {
        std::process::exit(130);
    }
}

/// What the user answered at the prompt.
#[derive(Debug)]
enum Answer {
    /// A message for the agent: sent, and the run resumed.
    Say(String),
    /// An empty line (or end of input): the run resumed as it was.
    GoOn,
    /// Ctrl-c again: stop the run.
    Abort,
}

/// Cuts the step in progress (the run pauses after it), asks the user on
/// stderr once the run has applied the cut, and sends their line before
/// resuming the run. Asked earlier, a ctrl-c at the prompt would race the
/// interrupt: the run could stop before the interrupt reached its trace.
async fn interrupt_and_ask(
    handle: &RunHandle,
    signals: &mut Interrupts,
) -> Result<Answer, RuntimeError> {
    let interrupted = handle.interrupt_and_pause()?;
    tokio::select! {
        applied = interrupted.applied() => applied?,
        true = signals.next() => return Ok(Answer::Abort),
    }
    eprintln!(
        "agentry: interrupted — type a message for the agent and press Enter (empty line: go on; ctrl-c again: abort)"
    );
    let answer = tokio::select! {
        line = read_line() => line,
        true = signals.next() => Answer::Abort,
    };
    match &answer {
        Answer::Say(text) => {
            handle.send_message(text.clone())?;
            handle.resume()?;
            eprintln!("agentry: message sent, the run goes on");
        }
        Answer::GoOn => {
            handle.resume()?;
            eprintln!("agentry: the run goes on");
        }
        Answer::Abort => {}
    }
    Ok(answer)
}

/// One line from stdin, read on a thread of its own: a blocking read must not
/// hold a runtime worker, and the runtime must not wait for it when the
/// command ends (a read abandoned by ctrl-c never returns).
async fn read_line() -> Answer {
    let (tx, rx) = oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("agentry-prompt".into())
        .spawn(move || {
            let mut line = String::new();
            let read = std::io::stdin().read_line(&mut line).map(|_| line);
            // The receiver is gone only if the prompt was abandoned.
            let _ = tx.send(read);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot read the terminal; the run goes on");
        return Answer::GoOn;
    }
    match rx.await {
        Ok(Ok(line)) => {
            let text = line.trim_end_matches(['\n', '\r']);
            if text.trim().is_empty() {
                Answer::GoOn
            } else {
                Answer::Say(text.to_string())
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot read the terminal; the run goes on");
            Answer::GoOn
        }
        Err(_) => Answer::GoOn,
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
