//! `stator bench proxy --steering-only --quick` as root: the 2014 paper's experiment — new
//! connections from 256 client addresses with persistence on, `steering = "kernel"` and
//! `"source"`, pinned and unpinned, and unpinned `"cpu"` (receive steering in generic XDP on
//! `lo`, the workers pinned one per CPU) — runs end to end and reports every row with its
//! counters; under `"cpu"` every selection ran on its worker's CPU (`cpu_local`, none
//! `cpu_remote`). Asserts the rows and
//! what steering by source must give (every connection after a client's first on its worker is
//! decided by persistence, so with 256 clients the share is high; under kernel steering a
//! client's connections are spread over both workers, and each worker's first sight of a
//! client misses), never the rates (benchmarks do not pass or fail on timing). Root: the
//! steering program is BPF.

#[allow(unused_imports)]
use crate::common;

#[test]
fn bench_proxy_steering_reports_kernel_and_source() {
    assert!(
        stator_xdp::is_root(),
        "stator bench proxy --steering-only attaches a BPF steering program: run as root"
    );
    let (v, stdout) = common::bench_stdout_json(&[
        "proxy",
        "--quick",
        "--seconds",
        "1",
        "--steering-only",
        "--json",
    ]);
    assert!(
        v["runs"].as_array().is_none_or(Vec::is_empty),
        "--steering-only: {stdout}"
    );
    let rows = v["steering"].as_array().unwrap();
    assert!(
        stator_sys::cpu::allowed_cpus().unwrap().len() >= 2,
        "steering = \"cpu\" needs two CPUs"
    );
    assert_eq!(
        rows.len(),
        5,
        "pinned kernel and source, unpinned kernel, source and cpu, one round: {stdout}"
    );
    for (pinning, steering) in [
        ("pinned", "kernel"),
        ("pinned", "source"),
        ("unpinned", "kernel"),
        ("unpinned", "source"),
        ("unpinned", "cpu"),
    ] {
        let r = rows
            .iter()
            .find(|r| r["steering"] == steering && r["pinning"] == pinning)
            .unwrap_or_else(|| panic!("no {pinning} {steering} row: {stdout}"));
        let load = &r["load"];
        let done = load["connections"].as_u64().unwrap();
        assert!(done > 0, "{r}");
        assert!(
            load["connections_per_second"].as_f64().unwrap() > 0.0,
            "{r}"
        );
        // the node counted at least the connections the load completed
        let total = r["connections_total"].as_u64().unwrap();
        assert!(total >= done, "{r}");
        let hits = r["session_hits"].as_u64().unwrap();
        assert!(hits <= total, "{r}");
        // the misses: each client's first connection on each worker it reaches — one worker
        // under source steering, at most both under the kernel's — and the benchmark's own
        // probe that the listener is up (from 127.0.0.1)
        let workers = if steering == "kernel" { 2 } else { 1 };
        let (local, remote) = (
            r["cpu_local"].as_u64().unwrap(),
            r["cpu_remote"].as_u64().unwrap(),
        );
        if steering == "cpu" {
            // every SYN went through receive steering on lo: selected on its worker's CPU
            assert!(local >= done && remote == 0, "{r}");
        } else {
            assert_eq!((local, remote), (0, 0), "{r}");
        }
        assert!(
            hits + 256 * workers + 1 >= total,
            "{steering} steering: {r}"
        );
    }
    // the node removed receive steering from lo when it exited
    let link = std::process::Command::new("ip")
        .args(["link", "show", "dev", "lo"])
        .output()
        .expect("ip link show dev lo");
    let link = String::from_utf8_lossy(&link.stdout);
    assert!(!link.contains("xdp"), "an XDP program left on lo: {link}");
}
