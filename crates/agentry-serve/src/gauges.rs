//! The service's own gauges in `GET /metrics`, beside agentry's families
//! (`agentry::metrics`): runs holding a slot and waiting for one, each named
//! model's requests in flight and held back by its limits, and per tenant
//! the same counts and its spend of the UTC day. A tenant is a label only
//! when the operator configured it (a tokens-file tenant or a
//! `[tenants.NAME]`), never a token or a name a client chose; a model only
//! by its serve.toml name.
//!
//! | name | type | labels |
//! |---|---|---|
//! | `agentry_serve_runs_running` | gauge | |
//! | `agentry_serve_runs_queued` | gauge | |
//! | `agentry_serve_model_requests_in_flight` | gauge | `model` |
//! | `agentry_serve_model_requests_throttled` | gauge | `model` |
//! | `agentry_serve_tenant_runs_running` | gauge | `tenant` |
//! | `agentry_serve_tenant_runs_queued` | gauge | `tenant` |
//! | `agentry_serve_tenant_cost_today_micros` | gauge | `tenant` |

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::admission::Admission;
use super::agents::Agents;

/// agentry's metrics and the service's gauges, in one registry.
pub(super) fn registry(
    metrics: &agentry::metrics::Metrics,
    admission: &Arc<Admission>,
    agents: Option<Arc<dyn Agents>>,
) -> Arc<Registry> {
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    registry.register_collector(Box::new(ServeGauges {
        admission: Arc::clone(admission),
        agents,
    }));
    Arc::new(registry)
}

/// The registry in the OpenMetrics text format (ends `# EOF`).
pub(super) fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail; an encoder error would leave what was
    // written so far.
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    text
}

/// Reads the counts at each scrape.
#[derive(Debug)]
struct ServeGauges {
    admission: Arc<Admission>,
    agents: Option<Arc<dyn Agents>>,
}

/// One gauge family: its rows as (label value, value); no label when
/// `label` is `None` (one row).
fn family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: Option<&'static str>,
    rows: &[(String, i64)],
) -> Result<(), std::fmt::Error> {
    let gauge = ConstGauge::new(0i64);
    let mut family = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
    let Some(key) = label else {
        let value = rows.first().map_or(0, |(_, count)| *count);
        return ConstGauge::new(value).encode(family);
    };
    for (value, count) in rows {
        let labels = [(key, value.as_str())];
        ConstGauge::new(*count).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Collector for ServeGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counts = self.admission.counts();
        let one = |n: usize| vec![(String::new(), count(n))];
        family(
            &mut encoder,
            "agentry_serve_runs_running",
            "Runs holding a slot of [serve] max_running (started, not stopped).",
            None,
            &one(counts.running),
        )?;
        family(
            &mut encoder,
            "agentry_serve_runs_queued",
            "Runs waiting for a slot.",
            None,
            &one(counts.queued),
        )?;
        let loads = self
            .agents
            .as_ref()
            .map(|a| a.model_loads())
            .unwrap_or_default();
        let by_model = |f: fn(&super::agents::ModelLoad) -> usize| {
            loads
                .iter()
                .map(|l| (l.model.clone(), count(f(l))))
                .collect::<Vec<_>>()
        };
        family(
            &mut encoder,
            "agentry_serve_model_requests_in_flight",
            "Requests in flight to a named model, over every run on it.",
            Some("model"),
            &by_model(|l| l.in_flight),
        )?;
        family(
            &mut encoder,
            "agentry_serve_model_requests_throttled",
            "Requests held back by a named model's limits (max_concurrent, per-minute budgets, a provider's Retry-After).",
            Some("model"),
            &by_model(|l| l.throttled),
        )?;
        let by_tenant = |f: fn(&super::limits::TenantCounts) -> i64| {
            counts
                .tenants
                .iter()
                .map(|(name, c)| (name.clone(), f(c)))
                .collect::<Vec<_>>()
        };
        family(
            &mut encoder,
            "agentry_serve_tenant_runs_running",
            "A configured tenant's runs holding a slot.",
            Some("tenant"),
            &by_tenant(|c| count(c.running)),
        )?;
        family(
            &mut encoder,
            "agentry_serve_tenant_runs_queued",
            "A configured tenant's runs waiting for a slot.",
            Some("tenant"),
            &by_tenant(|c| count(c.queued)),
        )?;
        family(
            &mut encoder,
            "agentry_serve_tenant_cost_today_micros",
            "What a configured tenant's runs spent this UTC day, in millionths of the budget's money.",
            Some("tenant"),
            &by_tenant(|c| i64::try_from(c.spent_today_micros).unwrap_or(i64::MAX)),
        )?;
        Ok(())
    }
}
