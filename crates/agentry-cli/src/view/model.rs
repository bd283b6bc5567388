//! The page's data: a lane per agent, children after their parent.
//!
//! A run's lines carry its `run_id` (and a child's its `parent_id`). The CLI's
//! tree writes only the root's trace: a child's lane is then drawn from the
//! parent's `agent.spawn` result (its budget, when) and the first `agent.wait`
//! or `agent.cancel` result holding its outcome (stop reason, steps, spend).

use std::collections::HashMap;

use agentry::protocol::budget::{BudgetLimits, BudgetSnapshot};
use agentry::protocol::envelope::ResultEnvelope;
use agentry::protocol::stop::StopReason;
use agentry::protocol::trace::{RunInput, TraceEnd, TraceInput, TraceLine, TraceStep};
use serde::Serialize;
use serde_json::Value;

use super::read::TraceFile;
use super::step::{Leaves, StepView};

/// Everything the page draws.
#[derive(Debug, Serialize)]
pub(super) struct Page {
    /// The document's title.
    pub(super) title: String,
    files: Vec<String>,
    lanes: Vec<Lane>,
}

/// One agent.
#[derive(Debug, Default, Serialize)]
struct Lane {
    id: String,
    task: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
    depth: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    goal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    /// Unix ms at which the run started (its first step's time less its elapsed).
    #[serde(skip_serializing_if = "Option::is_none")]
    start: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<BudgetLimits>,
    /// Whether the trace holds this run's own lines.
    traced: bool,
    steps: usize,
    rows: Vec<Row>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop: Option<StopView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spawn: Option<Seen>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<Seen>,
    #[serde(skip)]
    leaves: Leaves,
}

/// A row of a lane's step list.
#[derive(Debug, Serialize)]
#[serde(tag = "k", rename_all = "snake_case")]
enum Row {
    Step(Box<StepView>),
    Input(InputView),
}

#[derive(Debug, Serialize)]
struct InputView {
    seq: u64,
    version: u64,
    at: u64,
    input: RunInput,
}

#[derive(Debug, Serialize)]
struct StopView {
    reason: StopReason,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    answer: Option<String>,
    steps: u64,
    tool_calls: u64,
    budget: BudgetSnapshot,
    at: u64,
    world_refs: usize,
}

/// What a parent's `agent.*` result said about a child, and when.
#[derive(Debug, Serialize)]
struct Seen {
    at: u64,
    /// The parent's step that saw it.
    step: u64,
    data: Value,
}

impl Page {
    /// Folds the files' records into lanes.
    pub(super) fn build(files: &[TraceFile]) -> Page {
        let mut lanes = Lanes::default();
        for file in files {
            for line in &file.lines {
                lanes.add(line);
            }
        }
        let lanes = lanes.finish();
        let title = match lanes.first() {
            Some(root) => match &root.stop {
                Some(stop) => format!("{}: {} (agentry trace)", root.task, stop.reason.as_str()),
                None => format!("{} (agentry trace)", root.task),
            },
            None => "agentry trace".to_string(),
        };
        Page {
            title,
            files: files.iter().map(|f| f.name.clone()).collect(),
            lanes,
        }
    }
}

/// Lanes by run id, in order of first appearance.
#[derive(Default)]
struct Lanes {
    lanes: Vec<Lane>,
    index: HashMap<String, usize>,
}

impl Lanes {
    fn lane(&mut self, id: &str) -> &mut Lane {
        let i = match self.index.get(id) {
            Some(&i) => i,
            None => {
                self.lanes.push(Lane {
                    id: id.to_string(),
                    ..Lane::default()
                });
                self.index.insert(id.to_string(), self.lanes.len() - 1);
                self.lanes.len() - 1
            }
        };
        &mut self.lanes[i]
    }

    fn add(&mut self, line: &TraceLine) {
        match line {
            TraceLine::Step(step) => self.step(step),
            TraceLine::Input(input) => self.input(input),
            TraceLine::Stop(end) => self.stop(end),
        }
    }

    fn step(&mut self, step: &TraceStep) {
        let lane = self.lane(&step.run_id);
        lane.traced = true;
        lane.task = step.task_id.to_string();
        if let Some(parent) = &step.parent_id {
            lane.parent = Some(parent.to_string());
        }
        lane.goal
            .get_or_insert_with(|| step.state.task.goal.clone());
        let model = lane
            .model
            .get_or_insert_with(|| step.model.to_string())
            .clone();
        let limits = *lane.limits.get_or_insert(step.budget_after.limits);
        lane.start
            .get_or_insert(step.at.saturating_sub(step.budget_after.elapsed_ms));
        let view = StepView::build(step, &model, &limits, &mut lane.leaves);
        lane.steps += 1;
        lane.rows.push(Row::Step(Box::new(view)));
        let parent = step.run_id.to_string();
        for result in &step.results {
            self.children_in(&parent, step, result);
        }
    }

    fn input(&mut self, input: &TraceInput) {
        let lane = self.lane(&input.run_id);
        lane.traced = true;
        lane.rows.push(Row::Input(InputView {
            seq: input.seq,
            version: input.state_version,
            at: input.at,
            input: input.input.clone(),
        }));
    }

    fn stop(&mut self, end: &TraceEnd) {
        let lane = self.lane(&end.run_id);
        lane.traced = true;
        lane.task = end.task_id.clone();
        if end.parent_id.is_some() {
            lane.parent = end.parent_id.clone();
        }
        lane.limits.get_or_insert(end.budget.limits);
        lane.start
            .get_or_insert(end.at.saturating_sub(end.budget.elapsed_ms));
        lane.stop = Some(StopView {
            reason: end.stop_reason,
            detail: end.detail.clone(),
            answer: end.answer.clone(),
            steps: end.steps,
            tool_calls: end.tool_calls,
            budget: end.budget,
            at: end.at,
            world_refs: end.world.refs.len(),
        });
        for child in &end.children {
            let lane = self.lane(child);
            lane.parent.get_or_insert_with(|| end.run_id.clone());
        }
    }

    /// A child started, or ended, as a parent's `agent.*` result says.
    fn children_in(&mut self, parent: &str, step: &TraceStep, result: &ResultEnvelope) {
        if !result.ok || !result.tool.starts_with("agent.") {
            return;
        }
        let Some(data) = &result.data else { return };
        let seen = |data: &Value| Seen {
            at: result.observed_at,
            step: step.step,
            data: data.clone(),
        };
        if result.tool == "agent.spawn" {
            let Some(id) = data.get("child_id").and_then(Value::as_str) else {
                return;
            };
            let call = SpawnCall::of(step, &result.tool_call_id);
            let lane = self.lane(id);
            lane.parent.get_or_insert_with(|| parent.to_string());
            if lane.task.is_empty() {
                lane.task = call.name.unwrap_or_else(|| id.to_string());
            }
            lane.goal = lane.goal.take().or(call.goal);
            lane.start.get_or_insert(result.observed_at);
            lane.limits = lane
                .limits
                .or_else(|| serde_json::from_value(data["budget"].clone()).ok());
            lane.spawn.get_or_insert_with(|| seen(data));
            return;
        }
        let mut outcomes = Vec::new();
        child_outcomes(data, &mut outcomes);
        for outcome in outcomes {
            let Some(id) = outcome.get("child_id").and_then(Value::as_str) else {
                continue;
            };
            let lane = self.lane(id);
            lane.parent.get_or_insert_with(|| parent.to_string());
            lane.outcome.get_or_insert_with(|| seen(outcome));
        }
    }

    /// The lanes, each parent followed by its children (depth-first, in order
    /// of appearance); lanes whose parent is not in the trace are roots.
    fn finish(self) -> Vec<Lane> {
        let mut kids: HashMap<String, Vec<usize>> = HashMap::new();
        let mut roots = Vec::new();
        for (i, lane) in self.lanes.iter().enumerate() {
            match lane.parent.as_ref().filter(|p| self.index.contains_key(*p)) {
                Some(p) => kids.entry(p.clone()).or_default().push(i),
                None => roots.push(i),
            }
        }
        let mut order = Vec::with_capacity(self.lanes.len());
        let mut stack: Vec<(usize, usize)> = roots.into_iter().rev().map(|i| (i, 0)).collect();
        while let Some((i, depth)) = stack.pop() {
            order.push((i, depth));
            if let Some(children) = kids.get(&self.lanes[i].id) {
                stack.extend(children.iter().rev().map(|&c| (c, depth + 1)));
            }
        }
        let mut slots: Vec<Option<Lane>> = self.lanes.into_iter().map(Some).collect();
        order
            .into_iter()
            .filter_map(|(i, depth)| {
                let mut lane = slots[i].take()?;
                lane.depth = depth;
                Some(lane)
            })
            .collect()
    }
}

/// The `name` and `goal` a spawn call gave its child.
#[derive(Default)]
struct SpawnCall {
    name: Option<String>,
    goal: Option<String>,
}

impl SpawnCall {
    fn of(step: &TraceStep, call_id: &str) -> SpawnCall {
        let agentry::protocol::decision::Decision::ToolCalls { calls } = &*step.decision else {
            return SpawnCall::default();
        };
        let Some(args) = calls
            .iter()
            .find(|c| c.id == call_id)
            .and_then(|c| c.arguments.to_value().ok())
        else {
            return SpawnCall::default();
        };
        let pick = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_string);
        SpawnCall {
            name: pick("name"),
            goal: pick("goal"),
        }
    }
}

/// Every object in `data` that reports a child's end (`child_id` and
/// `stop_reason`): `agent.wait` nests them under `outcomes` or `outcome`.
fn child_outcomes<'a>(data: &'a Value, out: &mut Vec<&'a Value>) {
    match data {
        Value::Object(map) => {
            if map.contains_key("child_id") && map.contains_key("stop_reason") {
                out.push(data);
                return;
            }
            map.values().for_each(|v| child_outcomes(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| child_outcomes(v, out)),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}
