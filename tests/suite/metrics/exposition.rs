//! A strict reader of the OpenMetrics text format, as far as agentry's metrics
//! use it: every sample under the `# TYPE` of its family with a suffix its type
//! allows, labels quoted and escaped, counters ending `_total`, histograms
//! with cumulative buckets whose `+Inf` equals `_count`, a `# UNIT` the family
//! name ends with, and `# EOF` last. (The one Prometheus text parser crate
//! reads the older 0.0.4 format, and splits labels on `,` and `=` inside
//! quoted values; the OpenMetrics one is LGPL.)

use std::collections::BTreeMap;

use agentry_test_support::TestError;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// One metric family: its `# TYPE` and its samples.
#[derive(Debug, Clone)]
pub struct Family {
    pub name: String,
    pub kind: String,
    pub samples: Vec<Sample>,
}

/// A parsed exposition.
#[derive(Debug, Clone)]
pub struct Exposition {
    pub families: Vec<Family>,
}

impl Exposition {
    /// Parses `text`; any line out of the format is an error naming it.
    pub fn parse(text: &str) -> Result<Exposition, TestError> {
        let mut families: Vec<Family> = Vec::new();
        let mut eof = false;
        for (n, line) in text.lines().enumerate() {
            let at = |what: &str| format!("line {}: {what}: {line:?}", n + 1);
            if eof {
                return Err(at("after # EOF").into());
            }
            if line == "# EOF" {
                eof = true;
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').ok_or_else(|| at("bad TYPE"))?;
                if !["counter", "gauge", "histogram"].contains(&kind) {
                    return Err(at("unexpected type").into());
                }
                if families.iter().any(|f| f.name == name) {
                    return Err(at("family declared twice").into());
                }
                families.push(Family {
                    name: name.to_string(),
                    kind: kind.to_string(),
                    samples: Vec::new(),
                });
            } else if let Some(rest) = line.strip_prefix("# UNIT ") {
                let (name, unit) = rest.split_once(' ').ok_or_else(|| at("bad UNIT"))?;
                if !name.ends_with(&format!("_{unit}")) {
                    return Err(at("the family name does not end with its unit").into());
                }
            } else if line.starts_with("# HELP ") {
            } else if line.starts_with('#') || line.is_empty() {
                return Err(at("unexpected line").into());
            } else {
                let sample = parse_sample(line).map_err(|e| at(&e))?;
                let family = families
                    .last_mut()
                    .ok_or_else(|| at("sample before any TYPE"))?;
                let suffix = sample
                    .name
                    .strip_prefix(&family.name)
                    .ok_or_else(|| at("sample outside its family"))?;
                let allowed: &[&str] = match family.kind.as_str() {
                    "counter" => &["_total", "_created"],
                    "gauge" => &[""],
                    _ => &["_bucket", "_sum", "_count", "_created"],
                };
                if !allowed.contains(&suffix) {
                    return Err(at("suffix not allowed for its type").into());
                }
                family.samples.push(sample);
            }
        }
        if !eof {
            return Err("no # EOF at the end".into());
        }
        let exposition = Exposition { families };
        for family in &exposition.families {
            if family.kind == "histogram" {
                check_histogram(family)?;
            }
        }
        Ok(exposition)
    }

    /// The value of the sample `name` whose labels are exactly `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    /// [`Exposition::value`], 0 when the series is absent (a counter not
    /// incremented yet).
    pub fn count(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels).unwrap_or(0.0)
    }

    /// Every sample.
    pub fn samples(&self) -> impl Iterator<Item = &Sample> {
        self.families.iter().flat_map(|f| f.samples.iter())
    }
}

/// `name{label="value",...} value`.
fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(['{', ' '])
        .ok_or("no value after the sample name")?;
    let name = &line[..name_end];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return Err(format!("bad sample name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = parse_labels(inner, &mut labels)?;
    }
    let value = rest.strip_prefix(' ').ok_or("no space before the value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
    };
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Reads `label="value"` pairs up to the closing brace; returns what follows.
fn parse_labels<'a>(
    mut s: &'a str,
    labels: &mut BTreeMap<String, String>,
) -> Result<&'a str, String> {
    loop {
        if let Some(after) = s.strip_prefix('}') {
            return Ok(after);
        }
        let (key, after) = s.split_once("=\"").ok_or("a label without =\"")?;
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("bad label name {key:?}"));
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().ok_or("an unterminated label value")? {
                (i, '"') => break i,
                (_, '\\') => match chars.next().ok_or("a dangling escape")?.1 {
                    'n' => value.push('\n'),
                    c @ ('\\' | '"') => value.push(c),
                    c => return Err(format!("bad escape \\{c}")),
                },
                (_, c) => value.push(c),
            }
        };
        if labels.insert(key.to_string(), value).is_some() {
            return Err(format!("label {key} twice"));
        }
        s = &after[end + 1..];
        s = s.strip_prefix(',').unwrap_or(s);
    }
}

/// One histogram bucket: its upper bound and its cumulative count.
struct Bucket {
    le: f64,
    count: f64,
}

/// Buckets cumulative and ascending, `+Inf` equal to `_count`, per series.
fn check_histogram(family: &Family) -> Result<(), TestError> {
    let mut series: BTreeMap<BTreeMap<String, String>, Vec<Bucket>> = BTreeMap::new();
    for s in &family.samples {
        if s.name.ends_with("_bucket") {
            let le = s.labels.get("le").ok_or("a bucket without le")?;
            let le: f64 = match le.as_str() {
                "+Inf" => f64::INFINITY,
                v => v.parse()?,
            };
            let bucket = Bucket { le, count: s.value };
            series
                .entry(without_le(&s.labels))
                .or_default()
                .push(bucket);
        }
    }
    for (key, buckets) in series {
        let ordered = buckets
            .windows(2)
            .all(|w| w[0].le < w[1].le && w[0].count <= w[1].count);
        if !ordered {
            return Err(format!("{} {key:?}: buckets not cumulative", family.name).into());
        }
        let inf = buckets
            .last()
            .filter(|b| b.le.is_infinite())
            .map(|b| b.count);
        let count = family
            .samples
            .iter()
            .find(|s| s.name.ends_with("_count") && without_le(&s.labels) == key)
            .map(|s| s.value);
        if inf.is_none() || inf != count {
            return Err(format!("{} {key:?}: +Inf {inf:?} != count {count:?}", family.name).into());
        }
    }
    Ok(())
}

fn without_le(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut labels = labels.clone();
    labels.remove("le");
    labels
}

/// The reader refuses what the format does not allow, so a scrape it reads is
/// well-formed.
#[test]
fn the_reader_refuses_malformed_expositions() -> Result<(), TestError> {
    let good = "# TYPE a counter\na_total{x=\"q\\\"uo,te=\"} 1\n# TYPE h histogram\nh_sum 2.0\nh_count 2\nh_bucket{le=\"1.0\"} 1\nh_bucket{le=\"+Inf\"} 2\n# EOF\n";
    let parsed = Exposition::parse(good)?;
    assert_eq!(parsed.value("a_total", &[("x", "q\"uo,te=")]), Some(1.0));
    for bad in [
        "# TYPE a counter\na_total 1\n",
        "# TYPE a counter\na 1\n# EOF\n",
        "# TYPE a gauge\nb 1\n# EOF\n",
        "a 1\n# EOF\n",
        "# TYPE a gauge\na{x=\"1} 1\n# EOF\n",
        "# TYPE h histogram\nh_count 2\nh_bucket{le=\"1.0\"} 3\nh_bucket{le=\"+Inf\"} 2\n# EOF\n",
        "# TYPE h histogram\nh_count 3\nh_bucket{le=\"+Inf\"} 2\n# EOF\n",
        "# TYPE a_seconds gauge\n# UNIT a_seconds bytes\na_seconds 1\n# EOF\n",
        "# TYPE a gauge\na 1\n# EOF\na 2\n",
    ] {
        assert!(Exposition::parse(bad).is_err(), "{bad}");
    }
    Ok(())
}
