//! `stator bench veth --quick` runs end to end and produces numbers (a smoke test: it asserts
//! nothing about the figures — benchmarks never fail on a timing). Needs root.

use std::process::Command;

#[test]
fn bench_veth_quick_produces_numbers_and_cleans_up() {
    assert!(
        stator_xdp::is_root(),
        "this test creates network namespaces and loads XDP programs: run as root"
    );
    let out = std::env::temp_dir().join(format!("stator-bench-veth-{}.json", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_stator"))
        .args(["bench", "veth", "--quick", "--flows", "1000", "--out"])
        .arg(&out)
        .spawn()
        .expect("run stator bench veth --quick");
    let prefix = format!("sbv{}-", child.id());
    let status = child.wait().unwrap();
    assert!(status.success(), "stator bench veth --quick failed");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("the JSON report")).unwrap();
    let _ = std::fs::remove_file(&out);
    let results = report["results"].as_array().expect("results");
    assert_eq!(results.len(), 8, "4 programs × 2 flow counts");
    for r in results {
        let pps = r["pps"].as_f64().unwrap_or(-1.0);
        assert!(
            pps > 0.0 && pps.is_finite(),
            "{}: pps = {pps}",
            r["variant"]
        );
        if r["variant"]
            .as_str()
            .is_some_and(|v| v.starts_with("stator"))
        {
            let (t, d) = (r["tunnelled"].as_u64(), r["delivered"].as_u64());
            assert!(t.unwrap() + 10 >= d.unwrap(), "the sink got GRE: {r}");
        }
    }
    // nothing left behind: the benchmark's namespaces and pins carry its pid
    let netns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&netns.stdout).contains(&prefix),
        "namespaces left behind"
    );
    let pins: Vec<_> = std::fs::read_dir("/sys/fs/bpf")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(pins.is_empty(), "pins left behind: {pins:?}");
}
