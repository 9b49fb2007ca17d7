//! `stator bench udp --proxy --quick` runs end to end — Stator's UDP listener and nginx's
//! `stream` UDP proxy on loopback, request/response and one-way — and reports every row.
//! Asserts the rows and that datagrams went through each proxy, never how many a second
//! (benchmarks do not pass or fail on timing). Unprivileged; needs the packages `make test-deps`
//! installs (nginx-light, libnginx-mod-stream).

#[allow(unused_imports)]
use crate::common;

#[test]
fn bench_udp_proxy_quick_reports_every_row() {
    let (v, stdout) = common::bench_stdout_json(&["udp", "--proxy", "--quick", "--json"]);
    let runs = v["runs"].as_array().unwrap();
    for case in ["request/response", "one-way"] {
        for proxy in ["stator", "nginx"] {
            let r = runs
                .iter()
                .find(|r| r["case"] == case && r["proxy"] == proxy)
                .unwrap_or_else(|| panic!("no row {case} / {proxy}: {stdout}"));
            assert!(r["sent"].as_u64().unwrap() > 0, "{r}");
            assert!(r["delivered"].as_u64().unwrap() > 0, "{r}");
            let loss = r["loss"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&loss), "{r}");
        }
    }
    assert_eq!(v["ratios"].as_array().unwrap().len(), 2);
}
