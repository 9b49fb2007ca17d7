//! `stator bench sched --quick` through the built binary: every scheduler at every pool size is
//! measured and reported with positive figures, in JSON and as a table. Timings are printed by
//! the benchmark, never asserted here.
use std::process::Command;

use serde_json::Value;

const ALGORITHMS: [&str; 5] = ["vnswrr", "swrr", "least_conn", "p2c", "source_hash"];
const BACKENDS: [u64; 5] = [10, 100, 500, 1000, 2000];

fn run(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_stator"))
        .args(["bench", "sched", "--quick"])
        .args(args)
        .output()
        .expect("run stator");
    assert!(
        output.status.success(),
        "stator bench sched failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

fn positive(v: &Value, key: &str) -> f64 {
    let x = v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"));
    assert!(x > 0.0 && x.is_finite(), "{key} = {x} in {v}");
    x
}

#[test]
fn quick_run_reports_every_case() {
    let out = stator_testkit::scratch::unique_path("stator-bench-sched", ".json");
    let stdout = run(&["--json", "--out", out.to_str().expect("UTF-8 temp path")]);
    let report: Value = serde_json::from_str(&stdout).expect("stdout is one JSON document");
    let written: Value =
        serde_json::from_slice(&std::fs::read(&out).expect("--out file written")).expect("JSON");
    std::fs::remove_file(&out).expect("remove the report");
    assert_eq!(report["rows"], written["rows"]);

    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), ALGORITHMS.len() * BACKENDS.len());
    for algorithm in ALGORITHMS {
        for backends in BACKENDS {
            let row = rows
                .iter()
                .find(|r| r["algorithm"] == algorithm && r["backends"] == backends)
                .unwrap_or_else(|| panic!("no row for {algorithm} at {backends} backends"));
            positive(row, "best_ns");
            positive(row, "median_ns");
            positive(row, "picks");
            assert!(positive(row, "ring_nodes") >= backends as f64);
            assert_eq!(row["ns_per_pick"].as_array().map(Vec::len), Some(5));
        }
    }
    positive(&report["ratios"], "vnswrr_largest_over_smallest");
    positive(&report["ratios"], "swrr_over_vnswrr_at_largest");

    for figure in ["burst", "fleet"] {
        let b = &report[figure];
        let steady = positive(b, "steady_share");
        assert!(
            (steady - 2.0 / 101.0).abs() < 1e-12,
            "{figure}: weight 2 of 101"
        );
        for algorithm in ["vnswrr", "swrr"] {
            let f = &b[algorithm];
            assert_eq!(f["picks"], 1000, "{figure} {algorithm}");
            assert!(f["hits"].as_u64().expect("hits") <= 1000);
            assert!(f["share"].as_f64().is_some());
        }
    }
}

#[test]
fn quick_run_prints_a_table_row_per_pool_size() {
    let stdout = run(&[]);
    for backends in BACKENDS {
        let row = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&backends.to_string()))
            .unwrap_or_else(|| panic!("no table row for {backends} backends:\n{stdout}"));
        // backends, then best / median for each algorithm, then the ratio, ring nodes, build.
        let numbers: Vec<f64> = row
            .split_whitespace()
            .filter_map(|w| w.trim_end_matches(['x', '*']).parse().ok())
            .collect();
        assert_eq!(numbers.len(), 1 + 2 * ALGORITHMS.len() + 3, "{row}");
        assert!(numbers.iter().all(|&x| x > 0.0), "{row}");
    }
    for line in [
        "VNSWRR 2000 ÷ 10 backends",
        "SWRR ÷ VNSWRR at 2000",
        "vnswrr:",
        "swrr:",
        "fleet",
    ] {
        assert!(stdout.contains(line), "missing {line:?}:\n{stdout}");
    }
}
