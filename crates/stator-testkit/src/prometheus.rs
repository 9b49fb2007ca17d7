//! The monitoring examples as tests read them: `examples/` (alerting rules, scrape config,
//! Grafana dashboard), the PromQL expressions in them, the `stator_*` names those mention, and
//! `promtool`. Shared by stator-control's `tests/node/monitoring_examples.rs` (what a node declares)
//! and stator's `tests/labs/lab_prometheus.rs` (what a real Prometheus evaluates on the lab), so the
//! two check the same expressions.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// The repository's `examples/` directory.
pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// Runs `promtool args…` in [`examples_dir`], with `stdin` on its standard input (closed when
/// `None`): whether it succeeded, and its standard output and error. Panics when `promtool`
/// cannot be started (Debian's `prometheus` package; `make test-deps` installs it).
pub fn promtool(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(examples_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; `make test-deps` installs it)");
    let mut input = child.stdin.take().expect("promtool's stdin is piped");
    if let Some(text) = stdin {
        input
            .write_all(text.as_bytes())
            .expect("writing promtool's stdin");
    }
    drop(input);
    let out = child.wait_with_output().expect("waiting for promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The PromQL expressions of alerting rules (`expr:` lines of the YAML).
pub fn alert_exprs(yaml: &str) -> Vec<String> {
    yaml.lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .map(|e| e.trim().to_owned())
        .collect()
}

/// Where a dashboard expression sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExprSource {
    /// A panel's target; the panel's title.
    Panel(String),
    /// An annotation.
    Annotation,
    /// A template variable's query (Grafana's `label_values(…)`, not plain PromQL).
    Variable,
}

/// Every PromQL expression of a Grafana dashboard, with where it sits: panel targets,
/// annotations, then variable queries. Panics on a dashboard without `panels`,
/// `annotations.list` or `templating.list`, or a target without an `expr`.
pub fn dashboard_exprs(d: &Value) -> Vec<(ExprSource, String)> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("the dashboard's panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or_default().to_owned();
            let expr = t["expr"].as_str().expect("a target's expr");
            out.push((ExprSource::Panel(title), expr.to_owned()));
        }
    }
    for a in d["annotations"]["list"]
        .as_array()
        .expect("the dashboard's annotations")
    {
        if let Some(e) = a["expr"].as_str() {
            out.push((ExprSource::Annotation, e.to_owned()));
        }
    }
    for v in d["templating"]["list"]
        .as_array()
        .expect("the dashboard's variables")
    {
        if let Some(q) = v["query"]["query"].as_str() {
            out.push((ExprSource::Variable, q.to_owned()));
        }
    }
    out
}

/// The `stator_*` names an expression mentions.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("stator_") {
        let start = i + at;
        let before_ok =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        if before_ok {
            names.insert(expr[start..end].to_owned());
        }
        i = end;
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_are_whole_words_starting_with_stator() {
        let names = metric_names(
            "sum(rate(stator_packets_total{vip=~\"$vip\"}[1m])) / my_stator_x + stator_up",
        );
        let want: BTreeSet<String> = ["stator_packets_total", "stator_up"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(names, want);
    }

    #[test]
    fn dashboard_exprs_name_their_source() {
        let d: Value = serde_json::from_str(
            r#"{"panels":[{"title":"A","targets":[{"expr":"stator_a"}]},{"title":"row"}],
                "annotations":{"list":[{"expr":"stator_b"},{"name":"none"}]},
                "templating":{"list":[{"query":{"query":"label_values(stator_c, node)"}}]}}"#,
        )
        .unwrap();
        assert_eq!(
            dashboard_exprs(&d),
            vec![
                (ExprSource::Panel("A".into()), "stator_a".into()),
                (ExprSource::Annotation, "stator_b".into()),
                (ExprSource::Variable, "label_values(stator_c, node)".into()),
            ]
        );
    }
}
