//! `stator bench hashing --quick` through the built binary: the paper's qualitative results must
//! hold, and every output format must be produced. Timings are printed, never asserted.
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    // the name last: it carries the extension the output format is chosen by
    stator_testkit::scratch::unique_path("stator-bench-hashing", &format!("-{name}"))
}

fn rows<'a>(objects: &'a [Value], figure: &str) -> &'a Vec<Value> {
    objects
        .iter()
        .find(|o| o["figure"] == figure)
        .unwrap_or_else(|| panic!("no figure {figure} in the JSON output"))["rows"]
        .as_array()
        .expect("rows is an array")
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[test]
fn quick_evaluation_reproduces_the_papers_findings() {
    let csv = scratch("figures.csv");
    let png = scratch("figures.png");
    let output = Command::new(env!("CARGO_BIN_EXE_stator"))
        .args([
            "bench", "hashing", "--quick", "--json", "--seed", "7", "--csv",
        ])
        .arg(&csv)
        .arg("--plot")
        .arg(&png)
        .output()
        .expect("run stator");
    assert!(
        output.status.success(),
        "stator bench hashing failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("UTF-8 output");
    let objects: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("each stdout line is a JSON object"))
        .collect();
    assert_eq!(objects.len(), 3, "one object per figure");

    // Figure 11: Maglev balances almost perfectly, and better than both other methods.
    let balance = rows(&objects, "11");
    assert_eq!(balance.len(), 6);
    let spread = |method: &str, size: u64| {
        let r = balance
            .iter()
            .find(|r| r["method"] == method && r["table_size"] == size)
            .unwrap_or_else(|| panic!("no {method} row for M={size}"));
        num(r, "max_percent") - num(r, "min_percent")
    };
    for size in [65_537, 655_373] {
        let maglev = spread("maglev", size);
        assert!(
            maglev < spread("karger", size),
            "M={size}: Maglev vs Karger"
        );
        assert!(
            maglev < spread("rendezvous", size),
            "M={size}: Maglev vs rendezvous"
        );
    }
    for r in balance.iter().filter(|r| r["method"] == "maglev") {
        let (min, max) = (num(r, "min_entries"), num(r, "max_entries"));
        assert!(
            max - min <= 1.0,
            "Maglev entries differ by more than one: {r}"
        );
    }
    // Larger tables balance Karger and rendezvous better (the paper's 29.7% -> 10.3%, 49.5% ->
    // 12.3%).
    assert!(spread("karger", 655_373) < spread("karger", 65_537));
    assert!(spread("rendezvous", 655_373) < spread("rendezvous", 65_537));

    // Figure 12: nothing changes without failures; changes grow with k and include at least
    // the failed backends' own entries; the larger table is more resilient.
    let resilience = rows(&objects, "12");
    for size in [65_537u64, 655_373] {
        let mut series: Vec<&Value> = resilience
            .iter()
            .filter(|r| r["table_size"] == size)
            .collect();
        series.sort_by_key(|r| r["failures"].as_u64());
        assert!(series.len() >= 3, "too few failure counts for M={size}");
        assert_eq!(series[0]["failures"], 0);
        assert_eq!(num(series[0], "changed_percent_mean"), 0.0);
        for pair in series.windows(2) {
            assert!(
                num(pair[1], "changed_percent_mean") > num(pair[0], "changed_percent_mean"),
                "M={size}: changed entries do not grow with failures: {} then {}",
                pair[0],
                pair[1]
            );
        }
        for r in &series {
            assert!(num(r, "changed_percent_mean") + 1e-9 >= num(r, "failed_entries_percent_mean"));
        }
    }
    let at = |size: u64| {
        let r = resilience
            .iter()
            .filter(|r| r["table_size"] == size)
            .max_by_key(|r| r["failures"].as_u64())
            .expect("rows");
        num(r, "changed_percent_mean")
    };
    assert!(
        at(655_373) < at(65_537),
        "the larger table should change fewer entries"
    );

    // Build time: reported for both sizes beside the paper's figures (never asserted).
    let builds = rows(&objects, "build_time");
    assert_eq!(builds.len(), 2);
    for r in builds {
        assert!(num(r, "median_ms") > 0.0);
        assert!(r["paper_ms"].is_number());
    }

    // CSV and PNG.
    let csv_text = std::fs::read_to_string(&csv).expect("CSV written");
    assert!(csv_text.starts_with("figure,method,table_size,failures,metric,value\n"));
    assert!(csv_text.lines().count() > 50);
    let png_bytes = std::fs::read(&png).expect("PNG written");
    assert!(png_bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(png_bytes.len() > 10_000, "suspiciously small PNG");
    let _ = std::fs::remove_file(&csv);
    let _ = std::fs::remove_file(&png);
}

#[test]
fn text_output_names_the_figures() {
    let output = Command::new(env!("CARGO_BIN_EXE_stator"))
        .args(["bench", "hashing", "--quick"])
        .output()
        .expect("run stator");
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    for needle in ["Figure 11", "Figure 12", "build time", "29.7%", "1.8"] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}
