//! The actor floor: W1's step in agentry's fixed shape on bare ractor actors.
//!
//! agentry's shape is fixed: per run a conductor plus four ractor actors (budget
//! supervisor, policy, tool executor, state keeper), and per step the messages
//! agentry sends: the conductor's spend-and-decide request to the budget
//! supervisor, which answers the grant and hands the request on to the policy,
//! whose decision goes back to the conductor; a request/reply round trip to the
//! executor; and one cast (the state keeper's update). This module does exactly
//! those messages with nothing behind them: the budget counts steps against a limit,
//! the policy is the same script with the same feedback check, the executor
//! parses the arguments string and adds, the state keeper appends to an ordered
//! message list. No validation, grants, idempotency table, fingerprint, events
//! or stop conditions. What it costs is what the shape costs on this tokio
//! runtime before agentry does any of its own work; measured in the same
//! process as the figure it is set against.

use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::Value;

use crate::harness::BenchResult;
use crate::procfs::cpu_time;

/// What the policy proposes.
#[derive(Debug)]
enum Turn {
    Call { id: String, arguments: String },
    Final(String),
}

/// A message of the conversation state.
#[derive(Debug, Clone, PartialEq)]
enum Message {
    Call { id: String, arguments: String },
    Result { id: String, content: String },
    Final(String),
}

struct Budget;

enum BudgetMsg {
    /// Spend a step; if granted, ask the policy (its answer goes to `decided`).
    SpendAndDecide {
        last: Option<String>,
        policy: ActorRef<PolicyMsg>,
        granted: RpcReplyPort<bool>,
        decided: RpcReplyPort<Turn>,
    },
}

impl Actor for Budget {
    type Msg = BudgetMsg;
    type State = (u64, u64);
    type Arguments = u64;

    async fn pre_start(
        &self,
        _: ActorRef<BudgetMsg>,
        max: u64,
    ) -> Result<(u64, u64), ActorProcessingErr> {
        Ok((0, max))
    }

    async fn handle(
        &self,
        _: ActorRef<BudgetMsg>,
        msg: BudgetMsg,
        (spent, max): &mut (u64, u64),
    ) -> Result<(), ActorProcessingErr> {
        let BudgetMsg::SpendAndDecide {
            last,
            policy,
            granted,
            decided,
        } = msg;
        let ok = *spent < *max;
        let _ = granted.send(ok);
        if ok {
            *spent += 1;
            let _ = policy.cast(PolicyMsg::Decide(last, decided));
        }
        Ok(())
    }
}

struct Policy;

enum PolicyMsg {
    /// The results the conductor saw since the last turn, newest last.
    Decide(Option<String>, RpcReplyPort<Turn>),
}

/// The policy's per-agent state: M, the turn counter, the first failed check.
struct PolicyState {
    m: u64,
    turn: u64,
    failure: Option<String>,
}

impl Actor for Policy {
    type Msg = PolicyMsg;
    type State = PolicyState;
    type Arguments = u64;

    async fn pre_start(
        &self,
        _: ActorRef<PolicyMsg>,
        m: u64,
    ) -> Result<PolicyState, ActorProcessingErr> {
        Ok(PolicyState {
            m,
            turn: 0,
            failure: None,
        })
    }

    async fn handle(
        &self,
        _: ActorRef<PolicyMsg>,
        msg: PolicyMsg,
        st: &mut PolicyState,
    ) -> Result<(), ActorProcessingErr> {
        let PolicyMsg::Decide(last, reply) = msg;
        st.turn += 1;
        let turn = st.turn;
        if turn > 1
            && last.as_deref() != Some((turn - 1).to_string().as_str())
            && st.failure.is_none()
        {
            st.failure = Some(format!("turn {turn}: last result is {last:?}"));
        }
        let next = if turn < st.m {
            Turn::Call {
                id: format!("call_{turn}"),
                arguments: format!("{{\"a\": {}, \"b\": 1}}", turn - 1),
            }
        } else {
            match &st.failure {
                Some(f) => Turn::Final(format!("[CHECK FAILED] {f}")),
                None => Turn::Final(format!("done:{}", st.m - 1)),
            }
        };
        let _ = reply.send(next);
        Ok(())
    }
}

struct Executor;

enum ExecutorMsg {
    Execute(String, RpcReplyPort<String>),
}

impl Actor for Executor {
    type Msg = ExecutorMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<ExecutorMsg>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _: ActorRef<ExecutorMsg>,
        msg: ExecutorMsg,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        let ExecutorMsg::Execute(arguments, reply) = msg;
        let content = match serde_json::from_str::<Value>(&arguments) {
            Ok(v) => match (v["a"].as_i64(), v["b"].as_i64()) {
                (Some(a), Some(b)) => a.wrapping_add(b).to_string(),
                _ => "EINVAL".to_string(),
            },
            Err(_) => "EINVAL".to_string(),
        };
        let _ = reply.send(content);
        Ok(())
    }
}

struct StateKeeper;

enum StateMsg {
    /// One step's messages, applied in order (a cast, as agentry's update).
    Append(Vec<Message>),
    /// Hands the final state back.
    Take(RpcReplyPort<Vec<Message>>),
}

impl Actor for StateKeeper {
    type Msg = StateMsg;
    type State = Vec<Message>;
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ActorRef<StateMsg>,
        _: (),
    ) -> Result<Vec<Message>, ActorProcessingErr> {
        Ok(Vec::new())
    }

    async fn handle(
        &self,
        _: ActorRef<StateMsg>,
        msg: StateMsg,
        messages: &mut Vec<Message>,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            StateMsg::Append(step) => messages.extend(step),
            StateMsg::Take(reply) => {
                let _ = reply.send(std::mem::take(messages));
            }
        }
        Ok(())
    }
}

/// The conductor: spawns the four actors linked to itself and, on `Run`, drives
/// the steps from inside its handler, as agentry's conductor does.
struct Conductor;

enum ConductorMsg {
    Run(RpcReplyPort<Result<Vec<Message>, String>>),
}

struct Children {
    budget: ActorRef<BudgetMsg>,
    policy: ActorRef<PolicyMsg>,
    executor: ActorRef<ExecutorMsg>,
    state: ActorRef<StateMsg>,
}

impl Conductor {
    async fn drive(c: &Children) -> Result<Vec<Message>, String> {
        let mut last = None;
        loop {
            let (granted_tx, granted_rx) = tokio::sync::oneshot::channel();
            let (decided_tx, decided_rx) = tokio::sync::oneshot::channel();
            c.budget
                .cast(BudgetMsg::SpendAndDecide {
                    last: last.take(),
                    policy: c.policy.clone(),
                    granted: granted_tx.into(),
                    decided: decided_tx.into(),
                })
                .map_err(|e| e.to_string())?;
            let decided = decided_rx.await;
            if granted_rx.await != Ok(true) {
                return Err("the budget refused a step".into());
            }
            let Ok(turn) = decided else {
                return Err("the policy did not answer".into());
            };
            match turn {
                Turn::Call { id, arguments } => {
                    let content = match c
                        .executor
                        .call(|r| ExecutorMsg::Execute(arguments.clone(), r), None)
                        .await
                    {
                        Ok(ractor::rpc::CallResult::Success(s)) => s,
                        _ => return Err("the executor did not answer".into()),
                    };
                    last = Some(content.clone());
                    let step = vec![
                        Message::Call {
                            id: id.clone(),
                            arguments,
                        },
                        Message::Result { id, content },
                    ];
                    c.state
                        .cast(StateMsg::Append(step))
                        .map_err(|e| e.to_string())?;
                }
                Turn::Final(text) => {
                    c.state
                        .cast(StateMsg::Append(vec![Message::Final(text)]))
                        .map_err(|e| e.to_string())?;
                    return match c.state.call(StateMsg::Take, None).await {
                        Ok(ractor::rpc::CallResult::Success(m)) => Ok(m),
                        _ => Err("the state keeper did not answer".into()),
                    };
                }
            }
        }
    }
}

impl Actor for Conductor {
    type Msg = ConductorMsg;
    type State = Children;
    type Arguments = u64;

    async fn pre_start(
        &self,
        me: ActorRef<ConductorMsg>,
        m: u64,
    ) -> Result<Children, ActorProcessingErr> {
        let cell = me.get_cell();
        let (budget, _) = Actor::spawn_linked(None, Budget, m, cell.clone()).await?;
        let (policy, _) = Actor::spawn_linked(None, Policy, m, cell.clone()).await?;
        let (executor, _) = Actor::spawn_linked(None, Executor, (), cell.clone()).await?;
        let (state, _) = Actor::spawn_linked(None, StateKeeper, (), cell).await?;
        Ok(Children {
            budget,
            policy,
            executor,
            state,
        })
    }

    async fn handle(
        &self,
        _: ActorRef<ConductorMsg>,
        msg: ConductorMsg,
        children: &mut Children,
    ) -> Result<(), ActorProcessingErr> {
        let ConductorMsg::Run(reply) = msg;
        // Boxed, as agentry's handlers are: the step loop's future is large.
        let result = Box::pin(Self::drive(children)).await;
        let _ = reply.send(result);
        Ok(())
    }

    async fn post_stop(
        &self,
        _: ActorRef<ConductorMsg>,
        c: &mut Children,
    ) -> Result<(), ActorProcessingErr> {
        c.budget.stop(None);
        c.policy.stop(None);
        c.executor.stop(None);
        c.state.stop(None);
        Ok(())
    }
}

/// One agent of the actor floor: five actors, started and waiting for `run`.
pub struct ActorAgent {
    conductor: ActorRef<ConductorMsg>,
    handle: tokio::task::JoinHandle<()>,
}

impl ActorAgent {
    /// Spawns the conductor and its four actors for an M-step episode.
    pub async fn start(m: u64) -> BenchResult<ActorAgent> {
        let (conductor, handle) = Actor::spawn(None, Conductor, m.max(1)).await?;
        Ok(ActorAgent { conductor, handle })
    }

    /// Runs the episode and checks its final state as WORKLOAD.md does.
    pub async fn run(&self, m: u64) -> BenchResult<Result<(), String>> {
        let out = match self.conductor.call(ConductorMsg::Run, None).await? {
            ractor::rpc::CallResult::Success(out) => out,
            ractor::rpc::CallResult::Timeout | ractor::rpc::CallResult::SenderError => {
                return Ok(Err("the conductor did not answer".into()));
            }
        };
        Ok(out.and_then(|messages| check(&messages, m.max(1))))
    }

    /// Stops all five actors and waits for them.
    pub async fn stop(self) -> BenchResult<()> {
        self.conductor.stop(None);
        self.handle.await?;
        Ok(())
    }
}

fn check(messages: &[Message], m: u64) -> Result<(), String> {
    let results: Vec<&str> = messages
        .iter()
        .filter_map(|msg| match msg {
            Message::Result { content, .. } => Some(content.as_str()),
            Message::Call { .. } | Message::Final(_) => None,
        })
        .collect();
    let want_final = format!("done:{}", m - 1);
    let want_last = (m - 1).to_string();
    let last_ok = m == 1 || results.last() == Some(&want_last.as_str());
    match messages.last() {
        Some(Message::Final(text))
            if *text == want_final && results.len() as u64 == m - 1 && last_ok =>
        {
            Ok(())
        }
        other => Err(format!(
            "actor floor: final state has {} results, last message {other:?}",
            results.len()
        )),
    }
}

/// Timing of one actor-floor episode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ActorFloorRun {
    /// Timed wall clock: the first message to the conductor to the final state.
    pub wall: Duration,
    /// CPU time of the process over the same region.
    pub cpu: Duration,
}

/// Runs one M-step episode (actors started before the clock starts) and checks it.
pub async fn run(m: u64) -> BenchResult<(ActorFloorRun, Result<(), String>)> {
    let agent = ActorAgent::start(m).await?;
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let checked = agent.run(m).await?;
    let wall = t0.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);
    agent.stop().await?;
    Ok((ActorFloorRun { wall, cpu }, checked))
}

/// N agents of M steps: all started (timed, as W2's starts are), every episode
/// run at once, then all awaited. Returns the wall and CPU time, the time until
/// the last start returned, and the first failed check.
pub async fn run_many(n: usize, m: u64) -> BenchResult<ManyRun> {
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let mut agents = Vec::with_capacity(n);
    let mut runs = tokio::task::JoinSet::new();
    for _ in 0..n {
        let agent = std::sync::Arc::new(ActorAgent::start(m).await?);
        let a = std::sync::Arc::clone(&agent);
        runs.spawn(async move { a.run(m).await.map_err(|e| e.to_string()) });
        agents.push(agent);
    }
    let start = t0.elapsed();
    let mut checked = Ok(());
    while let Some(done) = runs.join_next().await {
        if let Err(e) = done?.and_then(|c| c)
            && checked.is_ok()
        {
            checked = Err(e);
        }
    }
    let wall = t0.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);
    for agent in agents {
        if let Ok(agent) = std::sync::Arc::try_unwrap(agent) {
            agent.stop().await?;
        }
    }
    Ok(ManyRun {
        wall,
        cpu,
        start,
        checked,
    })
}

/// What [`run_many`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct ManyRun {
    /// From before the first start to the last final state.
    pub wall: Duration,
    /// CPU time of the process over the same region.
    pub cpu: Duration,
    /// Until the last start returned.
    pub start: Duration,
    /// The first failed check, if any.
    pub checked: Result<(), String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn actor_floor_episode_passes_its_checks() {
        let (_, checked) = run(50).await.unwrap();
        checked.unwrap();
        let (_, one) = run(1).await.unwrap();
        one.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_actor_floor_agents_pass_their_checks() {
        let many = run_many(20, 10).await.unwrap();
        many.checked.unwrap();
        assert!(many.start <= many.wall);
    }

    #[test]
    fn a_wrong_state_fails_the_check() {
        let msgs = vec![
            Message::Call {
                id: "call_1".into(),
                arguments: "{}".into(),
            },
            Message::Result {
                id: "call_1".into(),
                content: "7".into(),
            },
            Message::Final("done:2".into()),
        ];
        assert!(check(&msgs, 3).is_err());
    }
}
