//! `stator bench afxdp --quick` runs every row of Figures 8 and 9 and produces numbers (a
//! smoke test: nothing is asserted about the figures themselves — benchmarks never fail on a
//! timing). Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

#[test]
fn bench_afxdp_quick_produces_every_row() {
    let report = common::bench_report(&["afxdp", "--quick", "--flows", "2000"]);
    let rows = report["results"].as_array().expect("results");
    let mut seen = Vec::new();
    for r in rows {
        let pps = r["pps"].as_f64().unwrap_or(-1.0);
        assert!(pps > 0.0 && pps.is_finite(), "{r}: pps = {pps}");
        seen.push(format!(
            "{} {}",
            r["lb"].as_str().unwrap(),
            r["traffic"].as_str().unwrap()
        ));
        if r["lb"].as_str().unwrap().starts_with("afxdp") {
            let ns = r["user_ns_per_packet"].as_f64().unwrap_or(-1.0);
            assert!(ns > 0.0, "{r}: user-space cost measured");
        }
    }
    for want in [
        "xdp non-syn",
        "afxdp-1 non-syn",
        "afxdp-2 non-syn",
        "af_packet non-syn",
        "afxdp-1 syn",
        "afxdp-2 syn",
        "afxdp-1 constant-5-tuple",
        "afxdp-2 constant-5-tuple",
    ] {
        assert!(
            seen.iter().any(|s| s == want),
            "row {want} missing: {seen:?}"
        );
    }
}
