//! The one JSON line a benchmark run prints, and the small statistics it needs.
//!
//! The line keeps WORKLOAD.md's key order (`peer`, `workload`, `params`,
//! `metrics`, `ok`, `notes`), so it is built by hand rather than through a
//! `serde_json::Map`, which sorts its keys.

use std::time::Duration;

use serde_json::Value;

use crate::alloc_count::AllocCounts;

/// What [`Report::many_figures`] reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ManyFigures {
    /// Agents started.
    pub agents: usize,
    /// Steps per agent.
    pub m: u64,
    /// From before the first start to the last outcome.
    pub wall: Duration,
    /// Until the last start returned.
    pub start: Duration,
    /// Process CPU over the same region.
    pub cpu: Duration,
    /// VmHWM at the end.
    pub peak_rss_mib: f64,
    /// RSS just before the timed region.
    pub rss_before_mib: f64,
}

/// One benchmark result, printed as one JSON line.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Workload name (`w1`, `w2`, ..., `floor`, `cancel`, `parallel`).
    pub workload: String,
    /// Parameters, in print order.
    pub params: Vec<(String, Value)>,
    /// Measured figures, in print order.
    pub metrics: Vec<(String, Value)>,
    /// False when a check failed; `notes` then says which.
    pub ok: bool,
    /// Check failures and remarks, `"; "`-separated.
    pub notes: String,
}

impl Report {
    /// An empty, passing report for `workload`.
    pub fn new(workload: &str) -> Self {
        Report {
            workload: workload.to_string(),
            params: Vec::new(),
            metrics: Vec::new(),
            ok: true,
            notes: String::new(),
        }
    }

    /// Adds a parameter.
    pub fn param(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.params.push((key.to_string(), value.into()));
        self
    }

    /// Adds a metric.
    pub fn metric(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.metrics.push((key.to_string(), value.into()));
        self
    }

    /// Adds a float metric rounded to `digits` decimals.
    pub fn metric_f(&mut self, key: &str, value: f64, digits: i32) -> &mut Self {
        self.metric(key, round(value, digits))
    }

    /// One agent's M steps: `wall_s`, `steps_per_s`, `us_per_step`,
    /// `cpu_us_per_step` (process CPU over the same region).
    pub fn step_figures(&mut self, m: u64, wall: Duration, cpu: Duration) -> &mut Self {
        let (wall, per) = (wall.as_secs_f64(), 1e6 / m.max(1) as f64);
        self.metric_f("wall_s", wall, 6)
            .metric_f("steps_per_s", m as f64 / wall, 0)
            .metric_f("us_per_step", wall * per, 3)
            .metric_f("cpu_us_per_step", cpu.as_secs_f64() * per, 3)
    }

    /// N agents × M steps at once, as W2 reports them: `wall_s`, `steps_per_s`,
    /// `start_s`, `cpu_s`, `peak_rss_mib`, `rss_before_mib`, `kib_per_agent`.
    pub fn many_figures(&mut self, f: &ManyFigures) -> &mut Self {
        let wall = f.wall.as_secs_f64();
        self.metric_f("wall_s", wall, 6)
            .metric_f("steps_per_s", (f.agents as u64 * f.m) as f64 / wall, 0)
            .metric_f("start_s", f.start.as_secs_f64(), 6)
            .metric_f("cpu_s", f.cpu.as_secs_f64(), 6)
            .metric_f("peak_rss_mib", f.peak_rss_mib, 1)
            .metric_f("rss_before_mib", f.rss_before_mib, 1)
            .metric_f(
                "kib_per_agent",
                (f.peak_rss_mib - f.rss_before_mib) * 1024.0 / f.agents.max(1) as f64,
                2,
            )
    }

    /// What a `count-alloc` build counted over W2's timed region `before` →
    /// `after`, per agent: `alloc_bytes_per_agent`, `allocs_per_agent`,
    /// `live_peak_kib_per_agent` (the peak of live bytes above those live at
    /// the start), `live_done_kib_per_agent` (live at the end, every run
    /// stopped and its handle still held).
    pub fn alloc_figures(
        &mut self,
        agents: usize,
        before: AllocCounts,
        after: AllocCounts,
    ) -> &mut Self {
        let per = |n: u64| n as f64 / agents.max(1) as f64;
        self.metric_f(
            "alloc_bytes_per_agent",
            per(after.allocated - before.allocated),
            0,
        )
        .metric_f("allocs_per_agent", per(after.blocks - before.blocks), 1)
        .metric_f(
            "live_peak_kib_per_agent",
            per(after.peak.saturating_sub(before.live)) / 1024.0,
            2,
        )
        .metric_f(
            "live_done_kib_per_agent",
            per(after.live.saturating_sub(before.live)) / 1024.0,
            2,
        )
    }

    /// Records a failed check: `ok` becomes false and the note is prefixed
    /// `[CHECK FAILED]`, as WORKLOAD.md asks.
    pub fn fail(&mut self, what: impl AsRef<str>) -> &mut Self {
        self.ok = false;
        self.note(format!("[CHECK FAILED] {}", what.as_ref()))
    }

    /// Adds a remark that does not fail the run.
    pub fn note(&mut self, text: impl AsRef<str>) -> &mut Self {
        if !self.notes.is_empty() {
            self.notes.push_str("; ");
        }
        self.notes.push_str(text.as_ref());
        self
    }

    /// The JSON line, without a trailing newline.
    pub fn to_line(&self) -> String {
        format!(
            "{{\"peer\": \"agentry\", \"workload\": {}, \"params\": {}, \"metrics\": {}, \"ok\": {}, \"notes\": {}}}",
            Value::String(self.workload.clone()),
            object(&self.params),
            object(&self.metrics),
            self.ok,
            Value::String(self.notes.clone()),
        )
    }
}

fn object(pairs: &[(String, Value)]) -> String {
    let fields: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}: {v}", Value::String(k.clone())))
        .collect();
    format!("{{{}}}", fields.join(", "))
}

/// `value` rounded to `digits` decimals; non-finite values become `null`.
pub fn round(value: f64, digits: i32) -> Value {
    let scale = 10f64.powi(digits);
    let rounded = (value * scale).round() / scale;
    serde_json::Number::from_f64(rounded).map_or(Value::Null, Value::Number)
}

/// The `q`-quantile (0..=1) of `samples` by the nearest-rank method; 0 when empty.
pub fn quantile(samples: &[f64], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_keeps_the_workload_key_order() {
        let mut r = Report::new("w1");
        r.param("m", 10).metric_f("wall_s", 0.123456789, 6);
        let line = r.to_line();
        assert_eq!(
            line,
            r#"{"peer": "agentry", "workload": "w1", "params": {"m": 10}, "metrics": {"wall_s": 0.123457}, "ok": true, "notes": ""}"#
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["metrics"]["wall_s"], 0.123457);
    }

    #[test]
    fn fail_sets_ok_false_and_marks_the_note() {
        let mut r = Report::new("w3");
        r.note("x").fail("order");
        assert!(!r.ok);
        assert_eq!(r.notes, "x; [CHECK FAILED] order");
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&s, 0.5), 50.0);
        assert_eq!(quantile(&s, 0.99), 99.0);
        assert_eq!(quantile(&s, 1.0), 100.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
