//! `stator bench udp --quick` runs every step of the ladder and reports figures for each (a
//! smoke test: it asserts that the figures exist and that datagrams flowed, never their size —
//! benchmarks never fail on a timing). Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

#[test]
fn bench_udp_quick_reports_every_step() {
    let report = common::bench_report(&["udp", "--quick"]);
    let steps = report["steps"].as_array().expect("steps");
    let numbers: Vec<u64> = steps.iter().map(|s| s["step"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5, 6], "every step of the ladder");
    for s in steps {
        let name = s["name"].as_str().unwrap_or("?");
        for k in [
            "pps",
            "offered_pps",
            "cpu_ns_per_datagram",
            "ratio_to_step1",
            "receivers_cpu_percent",
        ] {
            let v = s[k].as_f64().unwrap_or(-1.0);
            assert!(v.is_finite() && v >= 0.0, "step {name}: {k} = {v}");
        }
        assert!(
            s["offered"].as_u64().unwrap() > 0,
            "step {name}: nothing offered"
        );
        assert!(
            s["received"].as_u64().unwrap() > 0,
            "step {name}: nothing received"
        );
        assert!(
            !s["lines"].as_array().unwrap().is_empty(),
            "step {name}: no line"
        );
        let threads = s["threads"].as_array().unwrap();
        let expected = match s["step"].as_u64().unwrap() {
            1..=3 => Some(1),
            4 => Some(2),
            _ => None,
        };
        if let Some(n) = expected {
            assert_eq!(threads.len(), n, "step {name}: threads");
        }
        let split: f64 = s["split_percent"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_f64().unwrap())
            .sum();
        assert!(
            (split - 100.0).abs() < 0.5,
            "step {name}: split sums to {split}"
        );
        for k in ["veth_ring", "rcvbuf_errors", "in_errors"] {
            assert!(s["drops"][k].is_u64(), "step {name}: drops.{k}");
        }
    }
    assert!(
        report["goal"]["verdict"]
            .as_array()
            .is_some_and(|v| !v.is_empty())
    );
}

/// `--offered auto` with two generators: the calibration runs, every step is offered the one
/// rate it chose (the generators pace themselves: no step is offered much more than it), each
/// generator sends its share, and the verdict speaks of the fixed rate.
#[test]
fn bench_udp_fixed_rate_with_two_generators() {
    let report = common::bench_report(&[
        "udp",
        "--quick",
        "--offered",
        "auto",
        "--generators",
        "2",
        "--steps",
        "1,5",
    ]);
    let meta = &report["meta"];
    assert_eq!(meta["generators"], 2, "{meta}");
    assert_eq!(meta["offered_mode"], "auto");
    let rate = meta["offered_rate_pps"].as_f64().expect("a fixed rate");
    let cal = &meta["calibration"];
    let (cal_offered, cal_received) = (
        cal["offered_pps"].as_f64().unwrap(),
        cal["received_pps"].as_f64().unwrap(),
    );
    assert!(
        cal_received > 0.0,
        "the calibration received nothing: {cal}"
    );
    assert!(
        rate <= 1.5 * cal_received * 1.001 && rate <= 0.95 * cal_offered * 1.001,
        "rate {rate} above 1.5× step 1 or what the generators could offer: {cal}"
    );
    let steps = report["steps"].as_array().expect("steps");
    let numbers: Vec<u64> = steps.iter().map(|s| s["step"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [1, 5]);
    for s in steps {
        let offered = s["offered_pps"].as_f64().unwrap();
        assert!(
            offered <= 1.25 * rate,
            "step {}: offered {offered} pps at a fixed {rate}",
            s["step"]
        );
        let each = s["offered_per_generator"].as_array().unwrap();
        assert_eq!(each.len(), 2);
        assert!(
            each.iter().all(|n| n.as_u64().unwrap() > 0),
            "step {}: a generator sent nothing: {each:?}",
            s["step"]
        );
        assert!(s["received"].as_u64().unwrap() > 0);
        let lost = s["lost_percent"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&lost), "lost {lost}");
    }
    let verdict = report["goal"]["verdict"].as_array().unwrap();
    assert!(
        verdict[0].as_str().unwrap().contains("fixed"),
        "{verdict:?}"
    );
}
