//! What the lab's end-to-end test files and the benchmark smoke tests share.
#![allow(dead_code)] // each test file uses a different part

pub mod upgrade;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use stator_lab::netns::Netns;
use stator_lab::serve::Server;
use stator_lab::topo::{DsrLab, DsrSpec};
use stator_xdp::AttachMode;

/// A DSR lab (`stator_lab::topo`) serving one echo service: on every backend the VIP on `lo`,
/// an echo server (`Server::tcp_echo`: every line answered with the backend's name) on
/// `vip:80` and on the backend's own address (the TCP health check's endpoint), and `stator
/// decap` attached through the CLI; the router's ports with the pass-through XDP program and
/// the VIP routed to the first LB node. Pins live under `bpffs`.
pub struct EchoLab {
    pub lab: DsrLab,
    servers: Vec<Server>,
    decap_pins: Vec<PathBuf>,
    peer_pin: PathBuf,
}

impl EchoLab {
    pub fn create(spec: &DsrSpec, vip: IpAddr, bpffs: &Path) -> Self {
        let peer_pin = bpffs.join("peer");
        // XDP_TX from an LB node reaches the router only through an XDP program on its port
        let lab = DsrLab::create_with(spec, |router, port| peer_xdp(router, port, &peer_pin))
            .expect("build the DSR lab");
        let mut servers = Vec::new();
        let mut decap_pins = Vec::new();
        for (k, b) in lab.backends.iter().enumerate() {
            lab.add_vip_to_backend(k, vip).unwrap();
            servers.push(Server::tcp_echo(&b.ns, SocketAddr::new(vip, 80), &b.name).unwrap());
            let own = SocketAddr::new(b.addr(false), 80);
            servers.push(Server::tcp_echo(&b.ns, own, &b.name).unwrap());
            let pins = bpffs.join(&b.name);
            decap_attach(&b.ns, &[b.addr(false)], &pins);
            decap_pins.push(pins);
        }
        lab.route_vip(vip, &[0]).unwrap();
        Self {
            lab,
            servers,
            decap_pins,
            peer_pin,
        }
    }

    /// Leaves nothing behind: the servers, the decap pins (asserting they are gone), the
    /// router's program, the namespaces.
    pub fn finish(self) {
        drop(self.servers);
        for (k, p) in self.decap_pins.iter().enumerate() {
            decap_detach(&self.lab.backends[k].ns, p);
            assert!(!p.exists(), "{} removed", p.display());
        }
        let _ = stator_xdp::detach_all(&self.peer_pin);
        let _ = stator_xdp::purge(&self.peer_pin);
        let _ = std::fs::remove_dir_all(&self.peer_pin);
        drop(self.lab);
    }
}

/// `stator <args>` in a namespace (`nsenter --net`, which keeps the lab's bpffs visible).
pub fn stator_in(ns: &Netns, args: &[&str]) -> Output {
    Command::new("nsenter")
        .arg(format!("--net={}", ns.path().display()))
        .arg(env!("CARGO_BIN_EXE_stator"))
        .args(args)
        .output()
        .expect("run stator under nsenter")
}

/// A command's stdout and stderr, as one text.
pub fn output_text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// [`stator_in`], asserting that it succeeded; its standard output.
pub fn stator_ok(ns: &Netns, args: &[&str]) -> String {
    let out = stator_in(ns, args);
    assert!(
        out.status.success(),
        "stator {args:?} failed: {}",
        output_text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A backend's side through the CLI, as an operator runs it: `stator decap attach` on its
/// `eth0` for `addrs`, pinned under `pins`; its standard output.
pub fn decap_attach(ns: &Netns, addrs: &[IpAddr], pins: &Path) -> String {
    let addrs: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    let mut args = vec!["decap", "attach", "--iface", "eth0"];
    for a in &addrs {
        args.extend(["--addr", a.as_str()]);
    }
    args.extend(["--pin-path", pins.to_str().expect("a UTF-8 pin path")]);
    stator_ok(ns, &args)
}

/// `stator decap detach --all --purge` of the pins under `pins`; its standard output.
pub fn decap_detach(ns: &Netns, pins: &Path) -> String {
    stator_ok(
        ns,
        &[
            "decap",
            "detach",
            "--all",
            "--purge",
            "--pin-path",
            pins.to_str().expect("a UTF-8 pin path"),
        ],
    )
}

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
