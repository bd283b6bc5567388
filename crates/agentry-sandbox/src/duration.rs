//! Durations as task.toml writes them (`"10m"`, `"30s"`, `"1h 30m"`).
//!
//! Written here rather than taken from a crate: the spec is part of
//! `RunConfig`, which the facade without default features carries, and that
//! build takes no task-file parsers (`.ci/run`'s light-crates check). The
//! grammar is small: whole numbers, each with a unit (`ms`, `s`, `m`, `h`,
//! `d`), optionally separated by spaces.

use std::time::Duration;

use crate::error::SandboxError;

const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// Parses a duration the way task.toml writes it (`"10m"`, `"30s"`, `"1h 30m"`).
pub fn parse_duration(text: &str) -> Result<Duration, SandboxError> {
    let invalid = |why: &str| SandboxError::InvalidSetting {
        key: "cpu_time",
        value: text.to_owned(),
        reason: format!("{why} (expected a duration such as \"10m\", \"30s\" or \"1h 30m\")"),
    };
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(invalid("empty"));
    }
    let mut millis: u64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid("a number must come first"));
        }
        let number: u64 = rest[..digits].parse().map_err(|_| invalid("too large"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let Some((_, scale)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(invalid(&format!("unknown unit {unit:?}")));
        };
        millis = number
            .checked_mul(*scale)
            .and_then(|m| millis.checked_add(m))
            .ok_or_else(|| invalid("too large"))?;
        rest = rest[unit_len..].trim_start();
    }
    Ok(Duration::from_millis(millis))
}

/// Writes a duration in the same form, largest units first (`"1h 30m"`).
pub(crate) fn format_duration(duration: Duration) -> String {
    let mut left = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if left == 0 {
        return "0s".to_owned();
    }
    let mut parts = Vec::new();
    for (name, scale) in UNITS {
        if left >= scale {
            parts.push(format!("{}{name}", left / scale));
            left %= scale;
        }
    }
    parts.join(" ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_print_both_ways() {
        for (text, secs) in [("10m", 600), ("30s", 30), ("1h 30m", 5400), ("2d", 172_800)] {
            let parsed = parse_duration(text).unwrap();
            assert_eq!(parsed, Duration::from_secs(secs), "{text}");
            assert_eq!(format_duration(parsed), text);
        }
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        for bad in ["", "10", "m", "10 minutes", "-1s", "99999999999999999999s"] {
            let error = parse_duration(bad).unwrap_err().to_string();
            assert!(error.contains("cpu_time"), "{bad}: {error}");
        }
    }
}
