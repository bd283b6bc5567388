//! `[redact]` and `[trace]`: what a run keeps out of what it writes, and how
//! much of itself it writes → [`ObserveConfig`].

use agentry_redact::{RedactError, Redactor};
use agentry_runtime::ObserveConfig;
use toml::Value;

use crate::raw::{RawRedact, RawTrace};
use crate::values::{FieldError, describe, field_error, section};

/// `[redact]` and `[trace]` together; each absent table keeps the defaults.
pub(crate) fn observe_tables(
    redact: Option<Value>,
    trace: Option<Value>,
) -> Result<ObserveConfig, FieldError> {
    let mut observe = ObserveConfig::default();
    if let Some(v) = redact {
        let raw = section::<RawRedact>("redact", v)?;
        if let Some(p) = raw.patterns {
            observe.redact_patterns = redact_patterns(p)?;
        }
    }
    if let Some(v) = trace {
        let raw = section::<RawTrace>("trace", v)?;
        if let Some(s) = raw.sample {
            observe.sample = sample(&s)?;
        }
        if let Some(c) = raw.content {
            let Value::Boolean(b) = c else {
                return Err(field_error!(
                    "trace.content: expected true or false, found {}",
                    describe(&c)
                ));
            };
            observe.content = b;
        }
    }
    Ok(observe)
}

/// `[redact] patterns`: regexes, each compiled now exactly as the run's
/// redactor will compile them, so a bad one is named here and not at start.
fn redact_patterns(v: Value) -> Result<Vec<String>, FieldError> {
    let at = "redact.patterns";
    let Value::Array(items) = v else {
        return Err(field_error!(
            "{at}: expected an array of regular expressions, found {}",
            describe(&v)
        ));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        match item.as_str() {
            // An empty pattern matches nothing worth hiding: surely a slip.
            Some(p) if !p.is_empty() => out.push(p.to_string()),
            Some(_) | None => {
                return Err(field_error!(
                    "{at}[{i}]: expected a non-empty regular expression, found {}",
                    describe(&item)
                ));
            }
        }
    }
    // No environment: only the patterns are being checked.
    let built = Redactor::builder()
        .patterns(out.iter().cloned())
        .env(std::iter::empty::<(String, String)>())
        .build();
    match built {
        Ok(_) => Ok(out),
        Err(RedactError::BadPattern {
            index,
            pattern,
            source,
        }) => Err(field_error!(
            "{at}[{index}]: {pattern:?} is not a valid regular expression: {}",
            one_line(&source.to_string())
        )),
        Err(
            e
            @ (RedactError::PatternsTooLarge(_) | RedactError::Literals(_) | RedactError::Json(_)),
        ) => Err(field_error!("{at}: {}", one_line(&e.to_string()))),
    }
}

/// The regex crate's messages span lines (the pattern, a caret, the reason);
/// an error line stays one line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `[trace] sample`: a share of runs, 0 to 1.
fn sample(v: &Value) -> Result<f64, FieldError> {
    let share = match v {
        Value::Float(f) => *f,
        Value::Integer(i) => *i as f64,
        other @ (Value::String(_)
        | Value::Boolean(_)
        | Value::Datetime(_)
        | Value::Array(_)
        | Value::Table(_)) => {
            return Err(field_error!(
                "trace.sample: expected a share of runs from 0.0 to 1.0, found {}",
                describe(other)
            ));
        }
    };
    if !(0.0..=1.0).contains(&share) {
        return Err(field_error!(
            "trace.sample: must be from 0.0 to 1.0, found {}",
            describe(v)
        ));
    }
    Ok(share)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::{TaskError, TaskSpec};

    fn parse(tail: &str) -> Result<TaskSpec, TaskError> {
        TaskSpec::parse(&format!("goal = \"g\"\n{tail}"), Path::new("/nowhere/obs"))
    }

    #[test]
    fn redact_and_trace_reach_the_run_config() {
        let spec = parse(
            "[redact]\npatterns = [\"\\\\b4[0-9]{15}\\\\b\", \"card-[a-z]+\"]\n\
             [trace]\nsample = 0.1\ncontent = true\n",
        )
        .unwrap();
        let want = ObserveConfig {
            sample: 0.1,
            content: true,
            redact_patterns: vec![r"\b4[0-9]{15}\b".into(), "card-[a-z]+".into()],
        };
        assert_eq!(spec.observe, want);
        assert_eq!(spec.run_config("/tmp".into()).observe, want);
        // Integers are shares too; absent tables keep the defaults.
        assert_eq!(parse("[trace]\nsample = 0").unwrap().observe.sample, 0.0);
        assert_eq!(parse("[trace]\nsample = 1").unwrap().observe.sample, 1.0);
        assert_eq!(parse("").unwrap().observe, ObserveConfig::default());
        assert_eq!(
            parse("[redact]\n[trace]\n").unwrap().observe,
            ObserveConfig::default()
        );
    }

    #[test]
    fn bad_redact_and_trace_fields_are_named() {
        let cases = [
            (
                "[redact]\npatterns = [\"ok\", \"(unclosed\"]",
                "redact.patterns[1]: \"(unclosed\" is not a valid regular expression: ",
            ),
            (
                "[redact]\npatterns = \"card\"",
                "redact.patterns: expected an array of regular expressions, found \"card\"",
            ),
            (
                "[redact]\npatterns = [\"\"]",
                "redact.patterns[0]: expected a non-empty regular expression",
            ),
            (
                "[redact]\npatterns = [3]",
                "redact.patterns[0]: expected a non-empty regular expression, found 3",
            ),
            ("[redact]\npattern = []", "redact: unknown field `pattern`"),
            (
                "[trace]\nsample = 1.5",
                "trace.sample: must be from 0.0 to 1.0, found 1.5",
            ),
            (
                "[trace]\nsample = -0.1",
                "trace.sample: must be from 0.0 to 1.0, found -0.1",
            ),
            (
                "[trace]\nsample = nan",
                "trace.sample: must be from 0.0 to 1.0",
            ),
            (
                "[trace]\nsample = \"10%\"",
                "trace.sample: expected a share of runs from 0.0 to 1.0, found \"10%\"",
            ),
            (
                "[trace]\ncontent = \"yes\"",
                "trace.content: expected true or false, found \"yes\"",
            ),
            ("[trace]\nsampling = 1", "trace: unknown field `sampling`"),
            ("redact = 3", "redact: expected a table"),
        ];
        for (tail, want) in cases {
            match parse(tail) {
                Err(TaskError::Invalid { file, message }) => {
                    assert_eq!(file, Path::new("/nowhere/obs/task.toml"));
                    assert!(message.starts_with(want), "{tail:?}: {message:?}");
                    assert!(!message.contains('\n'), "one line: {message:?}");
                }
                other => panic!("{tail:?}: expected Invalid, got {other:?}"),
            }
        }
    }
}
