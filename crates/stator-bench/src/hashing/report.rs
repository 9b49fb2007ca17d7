//! Presenting an [`Evaluation`]: readable tables, CSV rows and JSON objects.

use super::eval::{BalanceRow, Evaluation, ResilienceRow};
use crate::error::{Context, Result};
use serde_json::json;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

/// The over-provisioning the paper quotes for Karger and rendezvous (§5.3), by table size.
fn paper_overprovision(method: &str, size: u32) -> Option<f64> {
    match (method, size) {
        ("karger", 65_537) => Some(29.7),
        ("rendezvous", 65_537) => Some(49.5),
        ("karger", 655_373) => Some(10.3),
        ("rendezvous", 655_373) => Some(12.3),
        _ => None,
    }
}

/// The human-readable report.
pub fn text(eval: &Evaluation) -> String {
    let c = &eval.config;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Maglev paper §5.3, reproduced: {} backends, Karger with {} views, seed {}\n",
        c.backends, c.karger_views, c.seed
    );
    let _ = writeln!(
        out,
        "Figure 11: percent of table entries per backend (perfect balance: {:.4}%)",
        100.0 / c.backends as f64
    );
    let _ = writeln!(
        out,
        "  {:<11} {:>8} {:>9} {:>9} {:>9} {:>9} {:>15} {:>7}",
        "method", "M", "min", "max", "min %", "max %", "over-provision", "paper"
    );
    for row in &eval.balance {
        let paper = paper_overprovision(row.method, row.table_size)
            .map_or_else(|| "-".to_owned(), |p| format!("{p:.1}%"));
        let _ = writeln!(
            out,
            "  {:<11} {:>8} {:>9} {:>9} {:>9.4} {:>9.4} {:>14.1}% {:>7}",
            row.method,
            row.table_size,
            row.min_entries,
            row.max_entries,
            row.min_percent,
            row.max_percent,
            row.overprovision_percent,
            paper
        );
    }
    let _ = writeln!(
        out,
        "  (over-provision = how far the busiest backend is above its fair share, max/(M/N) - 1)\n"
    );
    let _ = writeln!(
        out,
        "Figure 12: percent of Maglev table entries changed by k concurrent backend failures \
         ({} repetitions)",
        c.repetitions
    );
    let sizes: Vec<u32> = c.sizes.clone();
    let mut header = format!("  {:>4} {:>6}", "k", "k %");
    for size in &sizes {
        let _ = write!(
            header,
            " {:>14} {:>14}",
            format!("M={size}"),
            "(failed own)"
        );
    }
    let _ = writeln!(out, "{header}");
    for &k in c
        .failures
        .iter()
        .filter(|&&k| shown_in_text(k, &c.failures))
    {
        let mut line = format!("  {:>4} {:>5.1}%", k, 100.0 * k as f64 / c.backends as f64);
        for &size in &sizes {
            if let Some(r) = find_resilience(&eval.resilience, size, k) {
                let _ = write!(
                    line,
                    " {:>13.3}% {:>13.3}%",
                    r.changed_percent_mean, r.failed_entries_percent_mean
                );
            }
        }
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(
        out,
        "  (failed own = entries that belonged to the failed backends: what any method must move,\n   \
         and all that Karger and rendezvous move)\n"
    );
    let _ = writeln!(out, "Table build time, {} backends, one core", c.backends);
    let _ = writeln!(
        out,
        "  {:>8} {:>11} {:>9} {:>9} {:>9}  (median of {} builds)",
        "M", "median ms", "min ms", "paper ms", "goal ms", c.build_runs
    );
    for row in &eval.build_times {
        let opt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
        let _ = writeln!(
            out,
            "  {:>8} {:>11.3} {:>9.3} {:>9} {:>9}",
            row.table_size,
            row.median_ms,
            row.min_ms,
            opt(row.paper_ms),
            opt(row.goal_ms)
        );
    }
    out
}

/// The full run has 101 failure counts; the text table shows a readable subset (CSV and JSON
/// have all).
fn shown_in_text(k: usize, all: &[usize]) -> bool {
    all.len() <= 12 || k.is_multiple_of(10) || [1, 2, 5].contains(&k)
}

fn find_resilience(rows: &[ResilienceRow], size: u32, k: usize) -> Option<&ResilienceRow> {
    rows.iter()
        .find(|r| r.table_size == size && r.failures == k)
}

/// One JSON object per figure, one per line.
pub fn json_lines(eval: &Evaluation) -> Result<String> {
    let c = &eval.config;
    let balance: Vec<serde_json::Value> = eval
        .balance
        .iter()
        .map(|r: &BalanceRow| {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            v["paper_overprovision_percent"] = json!(paper_overprovision(r.method, r.table_size));
            v
        })
        .collect();
    let objects = [
        json!({
            "figure": "11",
            "title": "load balancing efficiency: percent of table entries per backend",
            "backends": c.backends,
            "karger_views": c.karger_views,
            "seed": c.seed,
            "rows": balance,
        }),
        json!({
            "figure": "12",
            "title": "resilience: percent of Maglev table entries changed by k concurrent failures",
            "backends": c.backends,
            "repetitions": c.repetitions,
            "seed": c.seed,
            "rows": eval.resilience,
        }),
        json!({
            "figure": "build_time",
            "title": "Maglev table build time, one core",
            "backends": c.backends,
            "runs": c.build_runs,
            "rows": eval.build_times,
        }),
    ];
    let mut out = String::new();
    for object in objects {
        out.push_str(&serde_json::to_string(&object).context("serialise JSON")?);
        out.push('\n');
    }
    Ok(out)
}

/// Every measured value as a CSV row: `figure,method,table_size,failures,metric,value`.
pub fn write_csv(eval: &Evaluation, path: &Path) -> Result<()> {
    let mut out = String::from("figure,method,table_size,failures,metric,value\n");
    for r in &eval.balance {
        for (metric, value) in [
            ("min_entries", f64::from(r.min_entries)),
            ("max_entries", f64::from(r.max_entries)),
            ("min_percent", r.min_percent),
            ("max_percent", r.max_percent),
            ("overprovision_percent", r.overprovision_percent),
        ] {
            let _ = writeln!(out, "11,{},{},,{metric},{value}", r.method, r.table_size);
        }
    }
    for r in &eval.resilience {
        for (metric, value) in [
            ("changed_percent_mean", r.changed_percent_mean),
            ("changed_percent_min", r.changed_percent_min),
            ("changed_percent_max", r.changed_percent_max),
            ("failed_entries_percent_mean", r.failed_entries_percent_mean),
        ] {
            let _ = writeln!(
                out,
                "12,maglev,{},{},{metric},{value}",
                r.table_size, r.failures
            );
        }
    }
    for r in &eval.build_times {
        let _ = writeln!(
            out,
            "build_time,maglev,{},,median_ms,{}",
            r.table_size, r.median_ms
        );
        let _ = writeln!(
            out,
            "build_time,maglev,{},,min_ms,{}",
            r.table_size, r.min_ms
        );
    }
    let mut file = std::fs::File::create(path)
        .with_context(|| format!("cannot create CSV file {}", path.display()))?;
    file.write_all(out.as_bytes())
        .with_context(|| format!("cannot write CSV file {}", path.display()))
}
