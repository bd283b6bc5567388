//! The floor: W1's step with bare tokio channels and no runtime.
//!
//! Three tasks in a ring — policy → executor → state → policy — over unbounded
//! `mpsc` channels (ractor's mailboxes are unbounded too; a bounded channel of
//! capacity 1 costs ~1 µs more per step here), with a `oneshot` back to the
//! caller at the end. The policy
//! is the same script (call id `call_<i>`, arguments a JSON *string*, feedback
//! check on the last result), the executor does the same JSON parse of the
//! arguments string and the same add, the state task appends the model message
//! and the result to an ordered message list and hands the last message back.
//! No validation, budget, trace or fingerprint: this is what one step costs
//! when nothing but the loop itself runs, on the same tokio runtime.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::harness::BenchResult;
use crate::procfs::cpu_time;

/// A message of the floor's conversation state.
#[derive(Debug, Clone, PartialEq)]
enum Message {
    User(String),
    Call { id: String, arguments: String },
    Result { id: String, content: String },
    Final(String),
}

/// What travels policy → executor → state.
#[derive(Debug)]
enum Turn {
    Call {
        id: String,
        arguments: String,
    },
    Result {
        id: String,
        arguments: String,
        content: String,
    },
    Final(String),
}

/// The floor's final state, summarized.
#[derive(Debug, Clone, PartialEq)]
pub struct FloorRun {
    /// Timed wall clock (tasks already spawned, first message to final answer).
    pub wall: Duration,
    /// CPU time of the process over the same region.
    pub cpu: Duration,
    /// Tool results in the final state.
    pub results: u64,
    /// The last tool result.
    pub last_result: Option<String>,
    /// The final text.
    pub final_text: Option<String>,
    /// A failed feedback check, if any.
    pub failure: Option<String>,
}

impl FloorRun {
    /// Checks the final state as WORKLOAD.md does; the error says what is wrong.
    pub fn check(&self, m: u64) -> Result<(), String> {
        if let Some(f) = &self.failure {
            return Err(format!("floor: {f}"));
        }
        let want_last = (m > 1).then(|| (m - 1).to_string());
        let want_final = format!("done:{}", m - 1);
        if self.results != m - 1
            || self.last_result != want_last
            || self.final_text.as_deref() != Some(want_final.as_str())
        {
            return Err(format!(
                "floor: final state has {} results, last {:?}, final {:?}",
                self.results, self.last_result, self.final_text
            ));
        }
        Ok(())
    }
}

async fn policy(
    m: u64,
    mut feedback: mpsc::UnboundedReceiver<Option<Message>>,
    executor: mpsc::UnboundedSender<Turn>,
    failure: oneshot::Sender<String>,
) {
    let mut failure = Some(failure);
    let mut turn = 0u64;
    while let Some(last) = feedback.recv().await {
        turn += 1;
        if turn > 1 {
            let want = (turn - 1).to_string();
            let ok = matches!(&last, Some(Message::Result { content, .. }) if *content == want);
            if !ok && let Some(tx) = failure.take() {
                let _ = tx.send(format!("turn {turn}: last message is {last:?}"));
            }
        }
        let next = if turn < m {
            Turn::Call {
                id: format!("call_{turn}"),
                arguments: format!("{{\"a\": {}, \"b\": 1}}", turn - 1),
            }
        } else {
            Turn::Final(format!("done:{}", m - 1))
        };
        if executor.send(next).is_err() {
            return;
        }
    }
}

async fn executor(mut calls: mpsc::UnboundedReceiver<Turn>, state: mpsc::UnboundedSender<Turn>) {
    while let Some(turn) = calls.recv().await {
        let out = match turn {
            Turn::Call { id, arguments } => {
                let content = match serde_json::from_str::<Value>(&arguments) {
                    Ok(v) => match (v["a"].as_i64(), v["b"].as_i64()) {
                        (Some(a), Some(b)) => a.wrapping_add(b).to_string(),
                        _ => "EINVAL".to_string(),
                    },
                    Err(_) => "EINVAL".to_string(),
                };
                Turn::Result {
                    id,
                    arguments,
                    content,
                }
            }
            other @ (Turn::Result { .. } | Turn::Final(_)) => other,
        };
        if state.send(out).is_err() {
            return;
        }
    }
}

async fn state(
    mut updates: mpsc::UnboundedReceiver<Turn>,
    policy: mpsc::UnboundedSender<Option<Message>>,
    done: oneshot::Sender<Vec<Message>>,
) {
    let mut messages = vec![Message::User("go".to_string())];
    while let Some(turn) = updates.recv().await {
        match turn {
            Turn::Result {
                id,
                arguments,
                content,
            } => {
                messages.push(Message::Call {
                    id: id.clone(),
                    arguments,
                });
                messages.push(Message::Result { id, content });
                if policy.send(messages.last().cloned()).is_err() {
                    return;
                }
            }
            Turn::Final(text) => {
                messages.push(Message::Final(text));
                let _ = done.send(messages);
                return;
            }
            // The executor turns every call into a result.
            Turn::Call { id, arguments } => messages.push(Message::Call { id, arguments }),
        }
    }
}

/// One floor agent: its three tasks spawned, waiting for the first message.
struct Episode {
    feedback: mpsc::UnboundedSender<Option<Message>>,
    done: oneshot::Receiver<Vec<Message>>,
    failure: oneshot::Receiver<String>,
    tasks: [tokio::task::JoinHandle<()>; 3],
}

impl Episode {
    fn spawn(m: u64) -> Episode {
        let (feedback_tx, feedback_rx) = mpsc::unbounded_channel();
        let (exec_tx, exec_rx) = mpsc::unbounded_channel();
        let (state_tx, state_rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = oneshot::channel();
        let (fail_tx, fail_rx) = oneshot::channel();
        let tasks = [
            tokio::spawn(policy(m, feedback_rx, exec_tx, fail_tx)),
            tokio::spawn(executor(exec_rx, state_tx)),
            tokio::spawn(state(state_rx, feedback_tx.clone(), done_tx)),
        ];
        Episode {
            feedback: feedback_tx,
            done: done_rx,
            failure: fail_rx,
            tasks,
        }
    }

    /// The first message to the policy.
    fn go(&self) -> BenchResult<()> {
        self.feedback.send(None)?;
        Ok(())
    }

    /// Waits for the final state (the clock stops there, as it stops at
    /// agentry's outcome).
    async fn final_state(&mut self) -> BenchResult<Vec<Message>> {
        Ok((&mut self.done).await?)
    }

    /// Ends the episode: the tasks are awaited and the final state summarized
    /// (`wall` and `cpu` are left for the caller).
    async fn close(self, messages: Vec<Message>) -> BenchResult<FloorRun> {
        let Episode {
            feedback,
            mut failure,
            tasks,
            ..
        } = self;
        drop(feedback);
        for task in tasks {
            task.await?;
        }
        let mut results = 0;
        let mut last_result = None;
        let mut final_text = None;
        for msg in messages {
            match msg {
                Message::Result { content, .. } => {
                    results += 1;
                    last_result = Some(content);
                }
                Message::Final(text) => final_text = Some(text),
                Message::User(_) | Message::Call { .. } => {}
            }
        }
        Ok(FloorRun {
            wall: Duration::ZERO,
            cpu: Duration::ZERO,
            results,
            last_result,
            final_text,
            failure: failure.try_recv().ok(),
        })
    }
}

/// Runs one M-step floor episode and returns its timing and final state.
pub async fn run(m: u64) -> BenchResult<FloorRun> {
    let mut episode = Episode::spawn(m.max(1));
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    episode.go()?;
    let messages = episode.final_state().await?;
    let wall = t0.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);
    let mut run = episode.close(messages).await?;
    run.wall = wall;
    run.cpu = cpu;
    Ok(run)
}

/// W2's floor: N episodes of M steps, all spawned and started (timed, as W2's
/// starts are), then all awaited. Returns the wall and CPU time and the first
/// failed check.
pub async fn run_many(n: usize, m: u64) -> BenchResult<(Duration, Duration, Result<(), String>)> {
    let m = m.max(1);
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let mut episodes = Vec::with_capacity(n);
    for _ in 0..n {
        let episode = Episode::spawn(m);
        episode.go()?;
        episodes.push(episode);
    }
    let mut checked = Ok(());
    for mut episode in episodes {
        let messages = episode.final_state().await?;
        let run = episode.close(messages).await?;
        if let Err(e) = run.check(m)
            && checked.is_ok()
        {
            checked = Err(e);
        }
    }
    Ok((t0.elapsed(), cpu_time().saturating_sub(cpu0), checked))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn floor_episode_passes_its_checks() {
        let r = run(50).await.unwrap();
        r.check(50).unwrap();
        assert_eq!(r.results, 49);
        let one = run(1).await.unwrap();
        one.check(1).unwrap();
        let (_, _, many) = run_many(20, 10).await.unwrap();
        many.unwrap();
    }
}
