//! `stator bench proxy --quick` runs end to end — Stator (access log off and on), nginx and
//! HAProxy under wrk on loopback, pinned and unpinned, Tengine's 20 vs 2,000 backends, then
//! each proxy holding idle connections — and reports every row. Asserts the rows and that the
//! figures are positive, never their size (benchmarks do not pass or fail on timing). The
//! pinned half (with the idle run) and the unpinned half (with the scale run) are two tests, so that
//! they run side by side: one run of both took 37 s of `make check`'s ~70. Unprivileged;
//! needs the packages `make test-deps` installs (wrk, nginx-light, haproxy). The steering
//! experiment needs root: its smoke test is in the root tier (`netns::bench_proxy_steering`).

#[allow(unused_imports)]
use crate::common;

/// Every (case, proxy) row of `pinning` is there with positive figures, and the ratios of
/// each case.
fn assert_rows(v: &serde_json::Value, stdout: &str, pinning: &str) {
    let runs = v["runs"].as_array().unwrap();
    for case in ["keep-alive", "new connection per request"] {
        for proxy in ["stator", "stator, access log", "nginx", "haproxy"] {
            let r = runs
                .iter()
                .find(|r| r["case"] == case && r["proxy"] == proxy && r["pinning"] == pinning)
                .unwrap_or_else(|| panic!("no row {pinning} / {case} / {proxy}: {stdout}"));
            assert!(r["requests_per_second"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["p99_ms"].as_f64().unwrap() > 0.0, "{r}");
            assert_eq!(r["round"], 1, "the median of one round: {r}");
        }
    }
    assert_eq!(
        v["rounds"].as_array().unwrap().len(),
        8,
        "2 cases × 4 proxies: {stdout}"
    );
    let ratios = v["ratios"].as_array().unwrap();
    assert_eq!(ratios.len(), 2, "2 cases");
    for r in ratios {
        assert!(r["access_log_on_over_off"].as_f64().unwrap() > 0.0, "{r}");
    }
}

#[test]
fn bench_proxy_quick_reports_every_pinned_and_idle_row() {
    let (v, stdout) = common::bench_stdout_json(&[
        "proxy",
        "--quick",
        "--seconds",
        "1",
        "--only",
        "pinned",
        "--no-scale",
        "--idle",
        "300",
        "--no-steering",
        "--json",
    ]);
    assert_rows(&v, &stdout, "pinned");
    assert!(
        v["scale"].as_array().is_none_or(Vec::is_empty),
        "--no-scale: {stdout}"
    );
    // the idle-memory run: each proxy held its idle connections and its resident memory was
    // read before and after
    let idle = v["idle_memory"].as_array().unwrap();
    for proxy in ["stator", "nginx", "haproxy"] {
        let r = idle
            .iter()
            .find(|r| r["proxy"] == proxy)
            .unwrap_or_else(|| panic!("no idle-memory row for {proxy}: {stdout}"));
        assert_eq!(r["connections"], 300, "{r}");
        assert!(r["rss_before_kib"].as_u64().unwrap() > 0, "{r}");
        assert!(r["rss_after_kib"].as_u64().unwrap() > 0, "{r}");
    }
}

#[test]
fn bench_proxy_quick_reports_every_unpinned_and_scale_row() {
    let (v, stdout) = common::bench_stdout_json(&[
        "proxy",
        "--quick",
        "--seconds",
        "1",
        "--only",
        "unpinned",
        "--idle",
        "0",
        "--no-steering",
        "--json",
    ]);
    assert_rows(&v, &stdout, "unpinned");
    assert!(
        v["idle_memory"].as_array().is_none_or(Vec::is_empty),
        "--idle 0: {stdout}"
    );
    let scale = v["scale"].as_array().unwrap();
    for proxy in ["stator vnswrr", "stator swrr"] {
        for n in [20, 2000] {
            for phase in ["cold", "warm"] {
                let case = format!("{n} backends, {phase}");
                assert!(
                    scale
                        .iter()
                        .any(|r| r["proxy"] == proxy && r["case"] == case.as_str()),
                    "no row {proxy} / {case}: {stdout}"
                );
            }
        }
    }
}
