//! The one JSON line a benchmark run prints, and the small statistics it needs.
//!
//! The line keeps WORKLOAD.md's key order (`peer`, `workload`, `params`,
//! `metrics`, `ok`, `notes`), so it is built by hand rather than through a
//! `serde_json::Map`, which sorts its keys.

use serde_json::Value;

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
