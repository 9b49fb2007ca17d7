//! A strict checker of the Prometheus text exposition format (0.0.4) and of Stator's naming
//! rules, so that `/metrics` cannot silently break a scraper: every family has one `# HELP`
//! and one `# TYPE` before its samples, samples of a family are contiguous, names and labels
//! are valid and escaped, no series appears twice, counters end in `_total` and are finite
//! and non-negative, summaries have only `_sum` and `_count`, units are base units.

use std::collections::{BTreeMap, BTreeSet};

/// One sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

fn valid_metric_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

fn valid_label_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
        && !s.starts_with("__")
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "NaN" => Ok(f64::NAN),
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => s.parse::<f64>().map_err(|_| format!("bad value {s:?}")),
    }
}

/// Parses `{a="x",b="y"}` starting at `s` (just after the name); returns labels and the rest.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let Some(mut rest) = s.strip_prefix('{') else {
        return Ok((labels, s));
    };
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let name = &rest[..eq];
        if !valid_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((_, '\n')) => return Err("raw newline in a label value".into()),
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(name.to_owned(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        rest = &rest[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return Err("expected , or } after a label".into());
        }
    }
}

/// Checks `text`; returns every sample, or the first problem with its line number.
pub fn check(text: &str) -> Result<Vec<Sample>, String> {
    if !text.ends_with('\n') {
        return Err("the exposition must end with a newline".into());
    }
    let mut samples = Vec::new();
    let mut families: BTreeMap<String, String> = BTreeMap::new(); // name -> type
    let mut closed: BTreeSet<String> = BTreeSet::new();
    let mut current: Option<(String, String)> = None; // (family, type)
    let mut pending_help: Option<String> = None;
    let mut series = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let fail = |m: String| format!("line {n}: {m}: {line:?}");
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, _) = rest
                .split_once(' ')
                .ok_or_else(|| fail("HELP without text".into()))?;
            if families.contains_key(name) || pending_help.is_some() {
                return Err(fail(format!("HELP for {name} out of place or repeated")));
            }
            if let Some((f, _)) = current.take() {
                closed.insert(f);
            }
            pending_help = Some(name.to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| fail("TYPE without type".into()))?;
            if pending_help.as_deref() != Some(name) {
                return Err(fail("TYPE not right after its HELP".into()));
            }
            pending_help = None;
            if !valid_metric_name(name) || !name.starts_with("stator_") {
                return Err(fail(format!("bad family name {name:?}")));
            }
            for bad in [
                "_milliseconds",
                "_ms",
                "_microseconds",
                "_kilobytes",
                "_kb",
                "_minutes",
            ] {
                if name.contains(bad) {
                    return Err(fail(format!("{name} is not in base units")));
                }
            }
            match kind {
                "counter" if !name.ends_with("_total") => {
                    return Err(fail(format!("counter {name} does not end in _total")));
                }
                "gauge" | "summary" | "histogram" if name.ends_with("_total") => {
                    return Err(fail(format!("{kind} {name} ends in _total")));
                }
                "counter" | "gauge" | "summary" | "histogram" => {}
                other => return Err(fail(format!("unexpected type {other}"))),
            }
            families.insert(name.to_owned(), kind.to_owned());
            current = Some((name.to_owned(), kind.to_owned()));
        } else if line.starts_with('#') || line.is_empty() {
            return Err(fail("unexpected comment or empty line".into()));
        } else {
            let (family, kind) = current
                .as_ref()
                .ok_or_else(|| fail("sample before any TYPE".into()))?;
            let name_end = line
                .find(['{', ' '])
                .ok_or_else(|| fail("no value".into()))?;
            let name = &line[..name_end];
            let suffix = name
                .strip_prefix(family.as_str())
                .ok_or_else(|| fail(format!("sample {name} outside its family {family}")))?;
            let ok_suffix = match kind.as_str() {
                "summary" => matches!(suffix, "_sum" | "_count"),
                "histogram" => matches!(suffix, "_bucket" | "_sum" | "_count"),
                _ => suffix.is_empty(),
            };
            if !ok_suffix || closed.contains(name) {
                return Err(fail(format!(
                    "sample name {name} not allowed in {kind} {family}"
                )));
            }
            let (labels, rest) = parse_labels(&line[name_end..]).map_err(&fail)?;
            if suffix == "_bucket" {
                let le = labels
                    .get("le")
                    .ok_or_else(|| fail("a bucket without le".into()))?;
                parse_value(le).map_err(&fail)?;
            }
            let value_text = rest
                .strip_prefix(' ')
                .ok_or_else(|| fail("no space before the value".into()))?;
            let mut parts = value_text.split(' ');
            let value = parse_value(parts.next().unwrap_or("")).map_err(&fail)?;
            if let Some(ts) = parts.next() {
                ts.parse::<i64>()
                    .map_err(|_| fail("bad timestamp".into()))?;
            }
            if parts.next().is_some() {
                return Err(fail("trailing text".into()));
            }
            if kind == "counter" && !(value.is_finite() && value >= 0.0) {
                return Err(fail("a counter must be finite and non-negative".into()));
            }
            if kind == "histogram" && suffix != "_sum" && value.fract() != 0.0 {
                return Err(fail("histogram counts must be integers".into()));
            }
            if suffix == "_count" && (value < 0.0 || value.fract() != 0.0) {
                return Err(fail("a _count must be a non-negative integer".into()));
            }
            let key = format!("{name}{labels:?}");
            if !series.insert(key) {
                return Err(fail("the same series twice".into()));
            }
            samples.push(Sample {
                name: name.to_owned(),
                labels,
                value,
            });
        }
    }
    if pending_help.is_some() {
        return Err("HELP without TYPE at the end".into());
    }
    Ok(samples)
}

/// The value of the one sample named `name` whose labels include `labels`.
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    match found.as_slice() {
        [one] => Some(one.value),
        _ => None,
    }
}

#[test]
fn the_checker_rejects_what_scrapers_reject() {
    let ok =
        "# HELP stator_x_total X.\n# TYPE stator_x_total counter\nstator_x_total{a=\"q\\\"\"} 1\n";
    assert_eq!(check(ok).unwrap()[0].labels["a"], "q\"");
    for bad in [
        "# TYPE stator_x_total counter\nstator_x_total 1\n",
        "# HELP stator_x X.\n# TYPE stator_x counter\nstator_x 1\n",
        "# HELP stator_x_total X.\n# TYPE stator_x_total counter\nstator_x_total -1\n",
        "# HELP stator_x_total X.\n# TYPE stator_x_total counter\nstator_x_total 1\nstator_x_total 2\n",
        "# HELP stator_x_total X.\n# TYPE stator_x_total counter\nstator_x_total{a=\"b} 1\n",
        "# HELP stator_x_ms X.\n# TYPE stator_x_ms gauge\nstator_x_ms 1\n",
        "# HELP stator_x X.\n# TYPE stator_x gauge\nstator_y 1\n",
        "# HELP stator_x X.\n# TYPE stator_x gauge\nstator_x 1",
        "# HELP stator_s X.\n# TYPE stator_s summary\nstator_s_bucket 1\n",
        "# HELP stator_h X.\n# TYPE stator_h histogram\nstator_h_bucket 1\n",
        "# HELP stator_h X.\n# TYPE stator_h histogram\nstator_h_total 1\n",
    ] {
        assert!(check(bad).is_err(), "accepted: {bad:?}");
    }
}
