//! `stator bench tcp --quick` runs end to end — Stator's TCP listener, HAProxy `mode tcp` and
//! nginx `stream` under wrk on loopback, bulk and short connections, and wrk against the backend
//! alone — and reports every row with positive figures and the ratios. Asserts the rows, never
//! their size (benchmarks do not pass or fail on timing). Unprivileged; needs the packages
//! `make test-deps` installs (wrk, nginx-light, libnginx-mod-stream, haproxy).

#[allow(unused_imports)]
use crate::common;

#[test]
fn bench_tcp_quick_reports_every_row() {
    let (v, stdout) = common::bench_stdout_json(&[
        "tcp",
        "--quick",
        "--seconds",
        "1",
        "--only",
        "pinned",
        "--body",
        "65536",
        "--json",
    ]);
    let runs = v["runs"].as_array().unwrap();
    for case in ["bulk", "short connections"] {
        for proxy in ["stator", "nginx", "haproxy", "direct"] {
            let r = runs
                .iter()
                .find(|r| r["case"] == case && r["proxy"] == proxy && r["pinning"] == "pinned")
                .unwrap_or_else(|| panic!("no row {case} / {proxy}: {stdout}"));
            assert!(r["requests_per_second"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["bytes_per_second"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["p99_ms"].as_f64().unwrap() > 0.0, "{r}");
            assert_eq!(r["round"], 1, "the median of one round: {r}");
        }
    }
    assert_eq!(
        v["rounds"].as_array().unwrap().len(),
        8,
        "2 cases × 4 rows: {stdout}"
    );
    let ratios = v["ratios"].as_array().unwrap();
    assert_eq!(ratios.len(), 2, "2 cases: {stdout}");
    for r in ratios {
        for k in [
            "stator_over_nginx",
            "stator_over_haproxy",
            "stator_over_direct",
        ] {
            assert!(r[k].as_f64().unwrap() > 0.0, "{k}: {r}");
        }
    }
    // the bulk answers went through whole: a run's bytes are at least its answers' bodies
    let bulk = runs
        .iter()
        .find(|r| r["case"] == "bulk" && r["proxy"] == "stator")
        .unwrap();
    assert!(
        bulk["bytes_per_second"].as_f64().unwrap()
            >= bulk["requests_per_second"].as_f64().unwrap() * 65536.0 * 0.99,
        "{bulk}"
    );
}
