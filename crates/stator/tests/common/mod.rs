//! What the lab's end-to-end test files and the benchmark smoke tests share.
#![allow(dead_code)] // each test file uses a different part

use std::path::Path;

use stator_lab::netns::Netns;
use stator_xdp::AttachMode;

/// The pass-through XDP program on a router port facing a node (veth delivers a node's XDP_TX
/// frames only to a peer with an XDP program; docs/xdp.md) — the deployment's `peer_xdp` hook.
pub fn peer_xdp(router: &Netns, port: &str, pin: &Path) -> Result<(), String> {
    let (pin, port) = (pin.to_owned(), port.to_owned());
    router
        .run_in(move || stator_xdp::attach_pass(&pin, &port, AttachMode::Native))
        .map_err(|e| e.to_string())?
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Runs `stator bench <args> --out <a temporary file>` and returns its JSON report, after
/// asserting that the command succeeded. The benchmarks load BPF programs and create network
/// namespaces: the test fails when not run as root.
pub fn bench_report(args: &[&str]) -> serde_json::Value {
    assert!(
        stator_xdp::is_root(),
        "stator bench {} loads BPF programs and creates network namespaces: run as root",
        args.join(" ")
    );
    let out = stator_testkit::scratch::unique_path(&format!("stator-bench-{}", args[0]), ".json");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_stator"))
        .arg("bench")
        .args(args)
        .arg("--out")
        .arg(&out)
        .status()
        .expect("run stator bench");
    assert!(status.success(), "stator bench {} failed", args.join(" "));
    let text = std::fs::read_to_string(&out).expect("the JSON report");
    let _ = std::fs::remove_file(&out);
    serde_json::from_str(&text).expect("a JSON report")
}

/// Runs `stator bench <args>` unprivileged (the proxy benchmarks need no root) and returns its
/// stdout parsed as JSON, with the text for messages, after asserting that it succeeded; `args`
/// include `--json`.
pub fn bench_stdout_json(args: &[&str]) -> (serde_json::Value, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stator"))
        .arg("bench")
        .args(args)
        .output()
        .expect("run stator bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    (v, stdout)
}
