//! The `tracing` layer: a span's fields are kept in its extensions as they
//! are recorded and counted when it closes; status events move runs between
//! the gauges.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::families::{
    Families, ModelLabels, ModelStatusLabels, ModelTokenLabels, ParkedLabels, RunTokenLabels,
    StopLabels, ToolCodeLabels, ToolLabels, ToolOutcomeLabels,
};
use crate::record::{
    ChatFields, Class, Op, RetryEvent, RunFields, STATUS_TARGET, StatusEvent, Timed, ToolFields,
};

/// Counts agentry's spans and run-status events into the metrics that made
/// it (`Metrics::layer`, which adds its filter).
pub struct MetricsLayer {
    families: Arc<Families>,
}

impl MetricsLayer {
    pub(crate) fn new(families: Arc<Families>) -> MetricsLayer {
        MetricsLayer { families }
    }
}

impl std::fmt::Debug for MetricsLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsLayer").finish_non_exhaustive()
    }
}

impl<S> Layer<S> for MetricsLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let meta = attrs.metadata();
        if meta.target() != agentry_telemetry::TARGET {
            return;
        }
        let Some(mut op) = Op::for_span(meta.name()) else {
            return;
        };
        attrs.record(&mut op);
        let Some(span) = ctx.span(id) else {
            return;
        };
        if let Op::Run(run) = &op {
            self.families.live.inc();
            self.run_known(run);
        }
        span.extensions_mut().insert(Timed {
            started: Instant::now(),
            op,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut ext = span.extensions_mut();
        let Some(timed) = ext.get_mut::<Timed>() else {
            return;
        };
        values.record(&mut timed.op);
        if let Op::Run(run) = &timed.op {
            self.run_known(run);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let target = event.metadata().target();
        if target == STATUS_TARGET {
            let mut status = StatusEvent::default();
            event.record(&mut status);
            if let (Some(run_id), Some(class)) = (status.run_id, status.status) {
                self.moved(&run_id, class);
            }
        } else if target == agentry_telemetry::TARGET {
            let mut retry = RetryEvent::default();
            event.record(&mut retry);
            if retry.is_retry {
                self.retried(event, &ctx, retry.code);
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(timed) = span.extensions_mut().remove::<Timed>() else {
            return;
        };
        let took = timed.started.elapsed();
        match timed.op {
            Op::Run(run) => self.run_closed(run, took),
            Op::Chat(chat) => self.chat_closed(chat, took),
            Op::Tool(tool) => self.tool_closed(tool, took),
        }
    }
}

impl MetricsLayer {
    /// A run whose id is known is tracked for the gauges (once).
    fn run_known(&self, run: &RunFields) {
        if let Some(run_id) = &run.run_id {
            let mut statuses = self.families.statuses.lock();
            if !statuses.contains_key(run_id) {
                statuses.insert(run_id.clone(), Class::Active);
            }
        }
    }

    /// A live run's status changed; an unknown run (its span disabled or
    /// closed) is not counted.
    fn moved(&self, run_id: &str, class: Class) {
        let mut statuses = self.families.statuses.lock();
        let Some(was) = statuses.get_mut(run_id) else {
            return;
        };
        if *was != class {
            self.gauge(*was, -1);
            self.gauge(class, 1);
            *was = class;
        }
    }

    /// Adds `by` to the gauge of `class`.
    fn gauge(&self, class: Class, by: i64) {
        let f = &self.families;
        let gauge = match class {
            Class::Active => return,
            Class::Approval => f.parked.get_or_create(&ParkedLabels {
                awaiting: "approval",
            }),
            Class::Decision => f.parked.get_or_create(&ParkedLabels {
                awaiting: "decision",
            }),
            Class::Sleeping => {
                f.sleeping.inc_by(by);
                return;
            }
            Class::Paused => {
                f.paused.inc_by(by);
                return;
            }
        };
        gauge.inc_by(by);
    }

    /// A retried attempt, on the tool call's span.
    fn retried<S>(&self, event: &Event<'_>, ctx: &Context<'_, S>, code: String)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let ext = span.extensions();
        if let Some(Timed {
            op: Op::Tool(tool), ..
        }) = ext.get::<Timed>()
        {
            let labels = ToolCodeLabels {
                tool: tool.tool.clone(),
                code,
            };
            self.families.tool_retries.get_or_create(&labels).inc();
        }
    }

    fn run_closed(&self, run: RunFields, took: Duration) {
        let f = &self.families;
        f.live.dec();
        if let Some(run_id) = &run.run_id
            && let Some(class) = f.statuses.lock().remove(run_id)
        {
            self.gauge(class, -1);
        }
        // A run left unfinished (to be resumed) counts in no stop reason.
        let Some(stop_reason) = run.stop_reason else {
            return;
        };
        let labels = StopLabels { stop_reason };
        f.runs.get_or_create(&labels).inc();
        f.run_steps.get_or_create(&labels).observe(run.steps as f64);
        f.run_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        f.run_cost.get_or_create(&labels).inc_by(run.cost_micros);
        for (kind, n) in run.tokens.by_type() {
            let labels = RunTokenLabels {
                stop_reason: labels.stop_reason.clone(),
                r#type: kind,
            };
            f.run_tokens.get_or_create(&labels).inc_by(n);
        }
    }

    fn chat_closed(&self, chat: ChatFields, took: Duration) {
        let f = &self.families;
        let model = ModelLabels {
            provider: chat.provider,
            model: chat.model,
        };
        let status = ModelStatusLabels {
            provider: model.provider.clone(),
            model: model.model.clone(),
            status: chat.error.unwrap_or_else(|| "ok".to_string()),
        };
        f.model_requests.get_or_create(&status).inc();
        f.model_duration
            .get_or_create(&model)
            .observe(took.as_secs_f64());
        if let Some(ms) = chat.first_chunk_ms {
            f.model_ttft
                .get_or_create(&model)
                .observe(ms as f64 / 1000.0);
        }
        for (kind, n) in chat.tokens.by_type() {
            let labels = ModelTokenLabels {
                provider: model.provider.clone(),
                model: model.model.clone(),
                r#type: kind,
            };
            f.model_tokens.get_or_create(&labels).inc_by(n);
        }
    }

    fn tool_closed(&self, tool: ToolFields, took: Duration) {
        let f = &self.families;
        // A call refused before it ran has no outcome field: its error code
        // (if any) says why, else it was not recorded and is not counted.
        let outcome = match (tool.outcome.as_deref(), tool.error) {
            (Some("ok"), _) => "ok".to_string(),
            (_, Some(code)) => code,
            (Some(other), None) => other.to_string(),
            (None, None) => return,
        };
        let labels = ToolOutcomeLabels {
            tool: tool.tool.clone(),
            outcome,
        };
        f.tool_calls.get_or_create(&labels).inc();
        let by_tool = ToolLabels { tool: tool.tool };
        let wait = Duration::from_millis(tool.approval_wait_ms.unwrap_or(0));
        if tool.approval_wait_ms.is_some() {
            f.tool_approval_wait
                .get_or_create(&by_tool)
                .observe(wait.as_secs_f64());
        }
        f.tool_duration
            .get_or_create(&by_tool)
            .observe(took.saturating_sub(wait).as_secs_f64());
    }
}
