//! The metric families, their labels and buckets.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// A histogram family, each histogram made with its family's buckets.
pub(crate) type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// A run's stop reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StopLabels {
    pub(crate) stop_reason: String,
}

/// A run's tokens by stop reason and kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RunTokenLabels {
    pub(crate) stop_reason: String,
    pub(crate) r#type: &'static str,
}

/// Who is awaited.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ParkedLabels {
    pub(crate) awaiting: &'static str,
}

/// A tool.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ToolLabels {
    pub(crate) tool: String,
}

/// A tool call's outcome: `ok` or its error code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ToolOutcomeLabels {
    pub(crate) tool: String,
    pub(crate) outcome: String,
}

/// A failed attempt's error code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ToolCodeLabels {
    pub(crate) tool: String,
    pub(crate) code: String,
}

/// A model.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ModelLabels {
    pub(crate) provider: String,
    pub(crate) model: String,
}

/// A model request's status: `ok` or its failure's class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ModelStatusLabels {
    pub(crate) provider: String,
    pub(crate) model: String,
    pub(crate) status: String,
}

/// A model's tokens by kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ModelTokenLabels {
    pub(crate) provider: String,
    pub(crate) model: String,
    pub(crate) r#type: &'static str,
}

/// Every family (clones of a family share its values).
pub(crate) struct Families {
    pub(crate) runs: Family<StopLabels, Counter>,
    pub(crate) run_steps: Histograms<StopLabels>,
    pub(crate) run_duration: Histograms<StopLabels>,
    pub(crate) run_tokens: Family<RunTokenLabels, Counter>,
    pub(crate) run_cost: Family<StopLabels, Counter>,
    pub(crate) live: Gauge,
    pub(crate) parked: Family<ParkedLabels, Gauge>,
    pub(crate) sleeping: Gauge,
    pub(crate) paused: Gauge,
    pub(crate) tool_calls: Family<ToolOutcomeLabels, Counter>,
    pub(crate) tool_retries: Family<ToolCodeLabels, Counter>,
    pub(crate) tool_duration: Histograms<ToolLabels>,
    pub(crate) tool_approval_wait: Histograms<ToolLabels>,
    pub(crate) model_requests: Family<ModelStatusLabels, Counter>,
    pub(crate) model_duration: Histograms<ModelLabels>,
    pub(crate) model_ttft: Histograms<ModelLabels>,
    pub(crate) model_tokens: Family<ModelTokenLabels, Counter>,
    /// Live runs' statuses, for the gauges.
    pub(crate) statuses: crate::record::Statuses,
}

impl Default for Families {
    fn default() -> Families {
        let parked = Family::<ParkedLabels, Gauge>::default();
        // Both series from the start: a dashboard sees 0, not "no data".
        for awaiting in ["approval", "decision"] {
            let _ = parked.get_or_create(&ParkedLabels { awaiting });
        }
        Families {
            runs: Family::default(),
            run_steps: Family::new_with_constructor(steps_histogram),
            run_duration: Family::new_with_constructor(run_histogram),
            run_tokens: Family::default(),
            run_cost: Family::default(),
            live: Gauge::default(),
            parked,
            sleeping: Gauge::default(),
            paused: Gauge::default(),
            tool_calls: Family::default(),
            tool_retries: Family::default(),
            tool_duration: Family::new_with_constructor(tool_histogram),
            tool_approval_wait: Family::new_with_constructor(wait_histogram),
            model_requests: Family::default(),
            model_duration: Family::new_with_constructor(model_histogram),
            model_ttft: Family::new_with_constructor(ttft_histogram),
            model_tokens: Family::default(),
            statuses: crate::record::Statuses::default(),
        }
    }
}

impl Families {
    /// Adds every family to `r` (a clone each: they count together).
    pub(crate) fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("agentry");
        r.register("runs", "Runs stopped, by stop reason", self.runs.clone());
        r.register(
            "run_steps",
            "Steps per stopped run, by stop reason",
            self.run_steps.clone(),
        );
        r.register_with_unit(
            "run_duration",
            "Wall time of stopped runs (in this process), by stop reason",
            Unit::Seconds,
            self.run_duration.clone(),
        );
        r.register(
            "run_tokens",
            "Tokens spent by stopped runs, by stop reason and type",
            self.run_tokens.clone(),
        );
        r.register(
            "run_cost_micros",
            "Money spent by stopped runs, in micro-units, by stop reason",
            self.run_cost.clone(),
        );
        r.register(
            "runs_live",
            "Runs started and not stopped",
            self.live.clone(),
        );
        r.register(
            "runs_parked",
            "Runs waiting for a human: an approval or a decision on an interrupted call",
            self.parked.clone(),
        );
        r.register(
            "runs_sleeping",
            "Event- and time-driven runs waiting for their next event or tick",
            self.sleeping.clone(),
        );
        r.register(
            "runs_paused",
            "Runs paused by the user",
            self.paused.clone(),
        );
        self.register_tools(r);
        self.register_models(r);
    }

    fn register_tools(&self, r: &mut Registry) {
        r.register(
            "tool_calls",
            "Tool calls, by tool and outcome (ok or the error code)",
            self.tool_calls.clone(),
        );
        r.register(
            "tool_retries",
            "Failed tool attempts tried again, by tool and error code",
            self.tool_retries.clone(),
        );
        r.register_with_unit(
            "tool_duration",
            "Tool call latency (every attempt, less the wait for approval), by tool",
            Unit::Seconds,
            self.tool_duration.clone(),
        );
        r.register_with_unit(
            "tool_approval_wait",
            "Time tool calls waited for a human's approval, by tool",
            Unit::Seconds,
            self.tool_approval_wait.clone(),
        );
    }

    fn register_models(&self, r: &mut Registry) {
        r.register(
            "model_requests",
            "Model requests, by provider, model and status (ok or the failure's class)",
            self.model_requests.clone(),
        );
        r.register_with_unit(
            "model_request_duration",
            "Model request latency (with its retries), by provider and model",
            Unit::Seconds,
            self.model_duration.clone(),
        );
        r.register_with_unit(
            "model_time_to_first_token",
            "Time to a streamed reply's first chunk, by provider and model",
            Unit::Seconds,
            self.model_ttft.clone(),
        );
        r.register(
            "model_tokens",
            "Tokens of model replies, by provider, model and type",
            self.model_tokens.clone(),
        );
    }
}

fn steps_histogram() -> Histogram {
    Histogram::new([
        1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0, 55.0, 89.0, 144.0, 233.0, 377.0, 610.0, 987.0,
    ])
}

fn run_histogram() -> Histogram {
    Histogram::new([
        0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
    ])
}

fn tool_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

fn wait_histogram() -> Histogram {
    Histogram::new([1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0])
}

fn model_histogram() -> Histogram {
    Histogram::new([
        0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0,
    ])
}

fn ttft_histogram() -> Histogram {
    Histogram::new([0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0])
}
