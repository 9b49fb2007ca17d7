//! `stator bench xdp --quick` runs and produces numbers (a smoke test: it asserts nothing
//! about the figures themselves — benchmarks never fail on a timing). Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

use std::process::Command;

#[test]
fn bench_xdp_quick_produces_numbers() {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    assert!(
        root,
        "this test loads BPF programs and creates a network namespace: run as root"
    );
    let out = std::env::temp_dir().join(format!("stator-bench-xdp-{}.json", std::process::id()));
    let status = Command::new(env!("CARGO_BIN_EXE_stator"))
        .args(["bench", "xdp", "--quick", "--out"])
        .arg(&out)
        .status()
        .expect("run stator bench xdp --quick");
    assert!(status.success(), "stator bench xdp --quick failed");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("the JSON report")).unwrap();
    let _ = std::fs::remove_file(&out);
    let classes = report["classes"].as_array().expect("classes");
    assert!(classes.len() >= 12, "{} classes", classes.len());
    for c in classes
        .iter()
        .chain(report["baselines"].as_array().unwrap())
    {
        for k in ["per_call_ns", "repeat_ns"] {
            let v = c[k].as_f64().unwrap_or(-1.0);
            assert!(v > 0.0 && v.is_finite(), "{}: {k} = {v}", c["name"]);
        }
    }
    let hit = classes
        .iter()
        .find(|c| c["name"] == "tcp4_hit" && c["flows"] == 1 && c["fib"] == "per_packet")
        .expect("tcp4_hit row");
    assert_eq!(
        hit["ct"]["hit"], hit["ct"]["packets"],
        "a single hot flow always hits"
    );
}
