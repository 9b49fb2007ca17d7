//! End-to-end tests on a whole deployment (`stator_lab::deploy`): a client with 64 addresses,
//! a BIRD router doing ECMP over three Stator nodes (`stator run`, XDP on the uplink, BGP with
//! a 3 s hold time), four backends (`stator decap`, VIP on `lo`, HTTP / TCP echo / UDP echo
//! servers) answering straight to the client. Needs root, BIRD 2 and XDP.
//!
//! 1. distribution: 10,000 short TCP connections; each backend's share within ±5 points of
//!    its weight share, every node receives traffic (ECMP);
//! 2. node failure: 360 long-lived TCP connections survive, on their backends, an abrupt node
//!    failure detected by BFD (l0's sessions run it), another detected by the BGP hold time
//!    alone (l2's do not) — the traffic stall of each is printed side by side — and a graceful
//!    stop (SIGTERM withdraws first);
//! 7. UDP: request/response through the same path, the same distribution check;
//! 8. IPv6: the distribution check over the IPv6 VIP;
//!
//! and the tools: `stator lab up|status|down` across processes, and the reload handle.
//!
//! The tests run one at a time (a mutex): each builds a deployment of its own (own prefix and
//! state directory) and checks that nothing is left behind. Figures are printed
//! (`--nocapture`).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use crate::common::peer_xdp;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stator_lab::deploy::{self, DeploySpec, Deployment, ECHO_PORT, HTTP_PORT, UDP_PORT};
use stator_lab::netns::Netns;
use stator_lab::traffic::{LongLived, Round, Tally, http_batch, udp_batch};

/// One deployment at a time: they compete for two cores and the failure timings matter.
static SERIAL: Mutex<()> = Mutex::new(());

/// Every backend's share must be within this many points of its weight share.
const SHARE_TOLERANCE: f64 = 0.05;

use stator_lab::netns::require_root;

/// A deployment with its own prefix and state directory; `check_gone` after dropping it.
fn deployment(test: &str, weights: &[u16]) -> (Deployment, String, PathBuf) {
    deployment_with(test, weights, &[], 0)
}

/// [`deployment`] with BFD on the sessions of `bfd_nodes` and its last `afxdp_nodes` nodes on
/// the AF_XDP data plane.
fn deployment_with(
    test: &str,
    weights: &[u16],
    bfd_nodes: &[usize],
    afxdp_nodes: usize,
) -> (Deployment, String, PathBuf) {
    require_root();
    let prefix = format!("le{test}-{}-", std::process::id() % 100_000);
    let dir =
        PathBuf::from("/run/stator-lab").join(format!("test-{}", prefix.trim_end_matches('-')));
    let mut spec = DeploySpec::new(&prefix, 60, &dir, Path::new(env!("CARGO_BIN_EXE_stator")));
    spec.weights = weights.to_vec();
    spec.bfd_nodes = bfd_nodes.to_vec();
    spec.afxdp_nodes = afxdp_nodes;
    let t = Instant::now();
    let d = Deployment::up(&spec, &peer_xdp).unwrap_or_else(|e| panic!("lab up: {e}"));
    println!(
        "[{test}] deployment up in {:.1}s: 3 nodes, 4 backends (weights {weights:?}), routed over all nodes",
        t.elapsed().as_secs_f64()
    );
    (d, prefix, dir)
}

/// Nothing of the deployment is left: namespaces, state directory, bpffs mount, processes.
fn check_gone(prefix: &str, dir: &Path) {
    assert!(
        stator_lab::netns::list(prefix).unwrap().is_empty(),
        "namespaces left behind"
    );
    assert!(!dir.exists(), "{} left behind", dir.display());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(
        !mounts.contains(&dir.display().to_string()),
        "the lab's bpffs is still mounted"
    );
    let needle = dir.display().to_string();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&cmd).contains(&needle),
            "a process of the lab is still running: {}",
            String::from_utf8_lossy(&cmd).replace('\0', " ")
        );
    }
    let again = deploy::down(prefix, dir).unwrap();
    assert!(again.is_empty(), "down after teardown found {again:?}");
}

fn json(d: &Deployment, j: usize, path: &str) -> serde_json::Value {
    let a = d.api(j, "GET", path).unwrap();
    assert_eq!(a.status, 200, "{path} on n{j}: {}", a.body);
    serde_json::from_str(&a.body).unwrap()
}

/// Packets node `j` counted for the VIP named `vip`.
fn vip_packets(d: &Deployment, j: usize, vip: &str) -> u64 {
    let v = json(d, j, "/v1/vips");
    v["vips"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == vip)
        .and_then(|x| x["traffic"]["packets"].as_u64())
        .unwrap_or(0)
}

/// Connection-table entries on node `j` for the VIP named `vip`.
fn vip_conns(d: &Deployment, j: usize, vip: &str) -> u64 {
    let v = json(d, j, "/v1/backends");
    v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| b["vips"].as_array().unwrap().iter())
        .filter(|x| x["vip"] == vip)
        .map(|x| x["connections"].as_u64().unwrap_or(0))
        .sum()
}

/// Asserts every backend's share against its weight share and every node's share of the
/// packets; prints the figures.
fn check_distribution(test: &str, d: &Deployment, tally: &Tally, sent: usize, packets: &[u64]) {
    println!(
        "[{test}] {sent} requests in {:.1}s: {} answered, {} failed{}",
        tally.took.as_secs_f64(),
        tally.answered(),
        tally.failed,
        tally
            .first_error
            .as_ref()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
    assert_eq!(tally.failed, 0, "every request is answered");
    assert_eq!(tally.answered(), sent);
    let total_weight: u32 = d.backends.iter().map(|b| u32::from(b.weight)).sum();
    for (k, b) in d.backends.iter().enumerate() {
        let want = f64::from(b.weight) / f64::from(total_weight);
        let got = tally.share(&format!("b{k}"));
        println!(
            "[{test}]   b{k}: weight {} -> share {:.2}%, got {:.2}% ({} answers; {:+.2} points, {:+.1}% relative)",
            b.weight,
            want * 100.0,
            got * 100.0,
            tally
                .per_backend
                .get(&format!("b{k}"))
                .copied()
                .unwrap_or(0),
            (got - want) * 100.0,
            (got / want - 1.0) * 100.0
        );
        assert!(
            (got - want).abs() <= SHARE_TOLERANCE,
            "b{k}: share {got:.4}, weight share {want:.4}"
        );
    }
    let all: u64 = packets.iter().sum();
    for (j, &p) in packets.iter().enumerate() {
        println!(
            "[{test}]   node l{j}: {p} packets ({:.1}%)",
            p as f64 * 100.0 / all.max(1) as f64
        );
        // ECMP over three nodes by 5-tuple: about a third each; a node without traffic, or
        // with a tenth, means the router did not spread
        assert!(
            p * 10 >= all,
            "node l{j} received {p} of {all} packets: ECMP does not spread"
        );
    }
}

fn packets_since(d: &Deployment, vip: &str, before: &[u64]) -> Vec<u64> {
    (0..3).map(|j| vip_packets(d, j, vip) - before[j]).collect()
}

/// `http_batch` or `udp_batch`.
type Batch = fn(
    &Netns,
    &[std::net::IpAddr],
    SocketAddr,
    usize,
    usize,
    Duration,
) -> stator_lab::netns::Result<Tally>;

/// 10,000 requests of `send` from the client's addresses of one family to `vip` (`port`) of a
/// fresh deployment with weights 1, 1, 2, 2, then [`check_distribution`] on what arrived.
fn distribution_case(test: &str, vip: &str, v6: bool, port: u16, send: Batch, limit: Duration) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (d, prefix, dir) = deployment(test, &[1, 1, 2, 2]);
    const N: usize = 10_000;
    let before: Vec<u64> = (0..3).map(|j| vip_packets(&d, j, vip)).collect();
    let tally = send(
        &d.client().ns,
        &d.client().addrs(v6),
        SocketAddr::new(Deployment::vip(v6), port),
        N,
        8,
        limit,
    )
    .unwrap();
    let packets = packets_since(&d, vip, &before);
    check_distribution(test, &d, &tally, N, &packets);
    drop(d);
    check_gone(&prefix, &dir);
}

#[test]
fn e2e_1_distribution_over_backends_and_nodes() {
    distribution_case(
        "1",
        "http4",
        false,
        HTTP_PORT,
        http_batch,
        Duration::from_secs(240),
    );
}

#[test]
fn e2e_7_udp_distribution() {
    distribution_case(
        "7",
        "udp4",
        false,
        UDP_PORT,
        udp_batch,
        Duration::from_secs(180),
    );
}

#[test]
fn e2e_8_ipv6_distribution() {
    distribution_case(
        "8",
        "http6",
        true,
        HTTP_PORT,
        http_batch,
        Duration::from_secs(180),
    );
}

/// Long-lived connections through one failure: rounds of exchanges run back to back from
/// just before the failure until a second after the router routes over the remaining nodes
/// (so packets meet the failure and the failover), then one more round.
struct Survival {
    total: usize,
    rounds: Vec<Round>,
    /// From the failure until the router routed over the remaining nodes.
    withdrawn: Duration,
}

impl Survival {
    /// The traffic stall: the slowest round of exchanges (every connection sends a line and
    /// waits for its echo); a round that met the failure waits for TCP to retransmit after the
    /// router stopped sending to the dead node.
    fn stall(&self) -> Duration {
        self.rounds.iter().map(|r| r.took).max().unwrap_or_default()
    }

    fn survived(&self, ll: &LongLived) -> usize {
        ll.conns.iter().filter(|c| c.alive).count().min(self.total)
    }

    fn check(&self, what: &str, ll: &LongLived) {
        let exchanges: usize = self.rounds.iter().map(|r| r.same_backend).sum();
        let other: usize = self.rounds.iter().map(|r| r.other_backend).sum();
        let failed: usize = self.rounds.iter().map(|r| r.failed).sum();
        let slowest = self.rounds.iter().map(|r| r.took).max().unwrap_or_default();
        let first = self.rounds.iter().find_map(|r| r.first_error.clone());
        println!(
            "[2/9]   {what}: {} rounds, {exchanges} exchanges on the same backend, {other} on another, \
             {failed} failed; slowest round {:.2}s{}",
            self.rounds.len(),
            slowest.as_secs_f64(),
            first.map(|e| format!(" (first: {e})")).unwrap_or_default()
        );
        let survived = self.survived(ll);
        println!(
            "[2] {what}: {survived}/{} connections survived on their backend ({:.1}%)",
            self.total,
            survived as f64 * 100.0 / self.total as f64
        );
        assert!(self.rounds.len() >= 2, "{what}: rounds ran");
        for r in &self.rounds {
            assert_eq!(r.failed, 0, "{what}: {:?}", r.first_error);
            assert_eq!(r.other_backend, 0, "{what}: {:?}", r.first_error);
            assert_eq!(r.same_backend, self.total, "{what}");
        }
        assert_eq!(survived, self.total, "{what}");
    }
}

/// Runs `fail` while rounds run back to back, waits until the router routes over
/// `remaining`, lets the rounds go on for a second, then runs a last one.
fn through_failure(
    d: &mut Deployment,
    ll: &mut LongLived,
    what: &str,
    remaining: &[usize],
    fail: impl FnOnce(&mut Deployment),
) -> Survival {
    let total = ll.alive();
    let stop = Arc::new(AtomicBool::new(false));
    let mut moving = std::mem::take(ll);
    let (flag, tag) = (Arc::clone(&stop), what.to_owned());
    let during = std::thread::spawn(move || {
        let start = Instant::now();
        let mut rounds = Vec::new();
        // bounded: a stop flag, a minute, 600 rounds
        while !flag.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(60) {
            rounds.push(moving.round(
                &format!("{tag}-{}", rounds.len()),
                16,
                Duration::from_secs(30),
            ));
            if rounds.len() >= 600 {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        (moving, rounds)
    });
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    fail(d);
    let routed = d.wait_routed(false, remaining, Duration::from_secs(30));
    let withdrawn = t.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let (back, mut rounds) = during.join().unwrap();
    *ll = back;
    routed.unwrap_or_else(|e| panic!("{what}: {e}"));
    println!(
        "[2] {what}: the router routes over {remaining:?} {:.1}s after the failure",
        withdrawn.as_secs_f64()
    );
    rounds.push(ll.round(&format!("{what}-last"), 16, Duration::from_secs(30)));
    Survival {
        total,
        rounds,
        withdrawn,
    }
}

fn echo_conns(d: &Deployment) -> Vec<u64> {
    (0..3).map(|j| vip_conns(d, j, "echo4")).collect()
}

#[test]
fn e2e_2_connections_survive_node_failures() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // l0's sessions with the router run BFD (100 ms x 3); l2's rely on the 3 s hold time.
    let (mut d, prefix, dir) = deployment_with("2", &[1, 1, 1, 1], &[0], 0);
    const CONNS: usize = 360;
    let mut ll = LongLived::open(
        &d.client().ns,
        &d.client().addrs(false),
        SocketAddr::new(Deployment::vip(false), ECHO_PORT),
        CONNS,
        8,
        Duration::from_secs(5),
    )
    .unwrap()
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ll.alive(), CONNS);
    let per_backend: BTreeMap<String, usize> = ll.per_backend();
    let per_node = echo_conns(&d);
    println!(
        "[2] {CONNS} long-lived connections: per backend {per_backend:?}, connection-table entries per node {per_node:?}"
    );
    assert_eq!(per_backend.len(), 4, "every backend has connections");
    assert!(
        per_node.iter().all(|&n| n * 10 >= CONNS as u64),
        "every node carries connections (ECMP): {per_node:?}"
    );

    // A. Node l0 dies: its uplink is cut; the router notices when BFD does.
    let a = through_failure(&mut d, &mut ll, "l0 uplink cut (BFD)", &[1, 2], |d| {
        d.cut(0).unwrap()
    });
    let after = echo_conns(&d);
    println!(
        "[2]   connection-table entries per node before {per_node:?}, after {after:?} (l0 keeps its stale entries)"
    );
    a.check("abrupt failure of l0", &ll);
    // l0's flows arrived on l1 and l2 mid-connection: they now hold more entries than before
    assert!(
        after[1] + after[2] >= per_node[1] + per_node[2] + per_node[0] / 2,
        "l0's flows moved to l1 and l2: {per_node:?} -> {after:?}"
    );
    d.restore(0).unwrap();
    let took = d
        .wait_routed(false, &[0, 1, 2], Duration::from_secs(30))
        .unwrap();
    println!(
        "[2]   l0's uplink restored: routed again after {:.1}s",
        took.as_secs_f64()
    );
    let r = ll.round("l0 back", 16, Duration::from_secs(30));
    assert_eq!(
        (r.same_backend, r.failed),
        (CONNS, 0),
        "{:?}",
        r.first_error
    );

    // A2. Node l2 dies the same way; without BFD the router notices when the hold time expires.
    let a2 = through_failure(
        &mut d,
        &mut ll,
        "l2 uplink cut (hold timer)",
        &[0, 1],
        |d| d.cut(2).unwrap(),
    );
    a2.check("abrupt failure of l2", &ll);
    d.restore(2).unwrap();
    d.wait_routed(false, &[0, 1, 2], Duration::from_secs(30))
        .unwrap();
    let r = ll.round("l2 back", 16, Duration::from_secs(30));
    assert_eq!(
        (r.same_backend, r.failed),
        (CONNS, 0),
        "{:?}",
        r.first_error
    );
    println!(
        "[2] node failure, traffic stall (slowest round of exchanges): with BFD {:.2}s (router \
         withdrew the node after {:.2}s); with the hold timer only {:.2}s (withdrawn after {:.2}s)",
        a.stall().as_secs_f64(),
        a.withdrawn.as_secs_f64(),
        a2.stall().as_secs_f64(),
        a2.withdrawn.as_secs_f64(),
    );
    // Not a tight bound (timings are printed): BFD must at least beat the hold timer.
    assert!(
        a.withdrawn < a2.withdrawn,
        "BFD {:?} vs hold timer {:?}",
        a.withdrawn,
        a2.withdrawn
    );

    // B. Node l1 stops gracefully: SIGTERM withdraws its VIPs, then it exits.
    let before = echo_conns(&d);
    let mut status = None;
    let b = through_failure(&mut d, &mut ll, "l1 stopped", &[0, 2], |d| {
        status = Some(d.node_stop(1, Duration::from_secs(20)).unwrap());
    });
    let status = status.unwrap();
    assert!(
        status.success(),
        "stator run exits 0 after SIGTERM: {status}"
    );
    let after = [vip_conns(&d, 0, "echo4"), vip_conns(&d, 2, "echo4")];
    println!(
        "[2]   connection-table entries per node before {before:?}, after on l0 and l2 {after:?}"
    );
    b.check("graceful stop of l1", &ll);
    let took = d.node_start(1).unwrap();
    d.wait_routed(false, &[0, 1, 2], Duration::from_secs(30))
        .unwrap();
    println!(
        "[2]   l1 started again: running after {:.1}s, routed again",
        took.as_secs_f64()
    );
    let r = ll.round("l1 back", 16, Duration::from_secs(30));
    assert_eq!(
        (r.same_backend, r.failed),
        (CONNS, 0),
        "{:?}",
        r.first_error
    );
    println!(
        "[2] summary: abrupt {}/{CONNS}, graceful {}/{CONNS} connections survived on their backend",
        a.survived(&ll),
        b.survived(&ll)
    );
    drop(ll);
    drop(d);
    check_gone(&prefix, &dir);
}

/// The proof that both data planes decide alike: with node l2 on AF_XDP beside two XDP nodes,
/// long-lived connections that ECMP moves from an XDP node to the others — some onto the
/// AF_XDP node — and then from the AF_XDP node to the XDP nodes all keep their backend.
#[test]
fn e2e_9_mixed_planes_keep_connections_when_ecmp_moves_them() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut d, prefix, dir) = deployment_with("9", &[1, 1, 1, 1], &[], 1);
    let kinds: Vec<String> = (0..3)
        .map(|j| {
            json(&d, j, "/v1/status")["forwarder"]["kind"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    println!("[9] data planes of l0, l1, l2: {kinds:?}");
    assert_eq!(kinds, ["xdp", "xdp", "afxdp"]);
    let metrics = d.api(2, "GET", "/metrics").expect("l2's /metrics").body;
    for family in [
        "stator_afxdp_xsk_total",
        "stator_afxdp_io_total",
        "stator_afxdp_thread_total",
    ] {
        assert!(metrics.contains(family), "l2 exports {family}");
    }
    const CONNS: usize = 240;
    let mut ll = LongLived::open(
        &d.client().ns,
        &d.client().addrs(false),
        SocketAddr::new(Deployment::vip(false), ECHO_PORT),
        CONNS,
        8,
        Duration::from_secs(5),
    )
    .unwrap()
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ll.alive(), CONNS);
    let per_node = echo_conns(&d);
    println!("[9] {CONNS} long-lived connections; connection-table entries per node {per_node:?}");
    assert!(
        per_node.iter().all(|&n| n > 0),
        "every node, the AF_XDP one too, carries connections: {per_node:?}"
    );

    // A. XDP node l0 fails: its flows move to l1 (XDP) and l2 (AF_XDP)
    let a = through_failure(&mut d, &mut ll, "l0 (XDP) uplink cut", &[1, 2], |d| {
        d.cut(0).unwrap()
    });
    let after = echo_conns(&d);
    println!("[9]   entries per node before {per_node:?}, after {after:?}");
    a.check("XDP node l0 failed, flows onto XDP and AF_XDP", &ll);
    assert!(
        after[2] > per_node[2],
        "some of l0's flows arrived on the AF_XDP node: {after:?}"
    );
    d.restore(0).unwrap();
    d.wait_routed(false, &[0, 1, 2], Duration::from_secs(30))
        .unwrap();
    let r = ll.round("l0 back", 16, Duration::from_secs(30));
    assert_eq!(
        (r.same_backend, r.failed),
        (CONNS, 0),
        "{:?}",
        r.first_error
    );

    // B. The AF_XDP node l2 fails: its flows move to the XDP nodes
    let before = echo_conns(&d);
    let b = through_failure(&mut d, &mut ll, "l2 (AF_XDP) uplink cut", &[0, 1], |d| {
        d.cut(2).unwrap()
    });
    let after = echo_conns(&d);
    println!("[9]   entries per node before {before:?}, after {after:?}");
    b.check("AF_XDP node l2 failed, flows onto the XDP nodes", &ll);
    d.restore(2).unwrap();
    d.wait_routed(false, &[0, 1, 2], Duration::from_secs(30))
        .unwrap();
    println!(
        "[9] summary: XDP→mixed {}/{CONNS}, AF_XDP→XDP {}/{CONNS} connections kept their backend",
        a.survived(&ll),
        b.survived(&ll)
    );
    drop(ll);
    drop(d);
    check_gone(&prefix, &dir);
}

/// `stator lab up` leaves a lab running after it exits (its processes have no parent in the
/// test), `status` reads it, `down` removes all of it — as after a crash — and a second
/// `down` finds nothing.
#[test]
fn lab_cli_up_status_down() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    require_root();
    let prefix = format!("lecli-{}-", std::process::id() % 100_000);
    let dir =
        PathBuf::from("/run/stator-lab").join(format!("test-{}", prefix.trim_end_matches('-')));
    let lab = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_stator"))
            .arg("lab")
            .args(args)
            .args(["--prefix", &prefix, "--dir", dir.to_str().unwrap()])
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "stator lab {args:?}: {text}");
        text
    };
    let t = Instant::now();
    let up = lab(&["up", "--subnet", "61", "--nodes", "2", "--backends", "2"]);
    println!(
        "[cli] stator lab up returned after {:.1}s:\n{up}",
        t.elapsed().as_secs_f64()
    );
    assert!(up.contains("lab up in"), "{up}");
    let status = lab(&["status"]);
    println!("[cli] stator lab status:\n{status}");
    for row in ["l0", "l1"] {
        let line = status
            .lines()
            .find(|l| l.trim_start().starts_with(row))
            .unwrap_or_else(|| panic!("no row {row}: {status}"));
        assert!(
            line.contains("yes/yes") && line.contains("running"),
            "{line}"
        );
    }
    for row in ["b0", "b1"] {
        let line = status
            .lines()
            .find(|l| l.trim_start().starts_with(row))
            .unwrap_or_else(|| panic!("no row {row}: {status}"));
        assert!(line.contains(" up "), "{line}");
    }
    // traffic through the lab another process built
    let client = Netns::existing(&format!("{prefix}c0"));
    let tally = http_batch(
        &client,
        &[
            "10.61.100.2".parse().unwrap(),
            "10.61.100.3".parse().unwrap(),
        ],
        SocketAddr::new(Deployment::vip(false), HTTP_PORT),
        100,
        4,
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(tally.answered(), 100, "{:?}", tally.first_error);
    let down = lab(&["down"]);
    println!("[cli] stator lab down: {down}");
    assert!(down.contains("namespaces removed"), "{down}");
    check_gone(&prefix, &dir);
    let again = lab(&["down"]);
    assert!(again.contains("no lab"), "{again}");
}

/// The reload handle the scenario tests build on: weight 0 (draining) for b3 on every node,
/// reloaded with SIGHUP; new connections avoid b3; weight 1 again and b3 is back.
#[test]
fn deployment_reload_changes_every_node() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut d, prefix, dir) = deployment("r", &[1, 1, 1, 1]);
    let http = |d: &Deployment| {
        http_batch(
            &d.client().ns,
            &d.client().addrs(false),
            SocketAddr::new(Deployment::vip(false), HTTP_PORT),
            1_000,
            8,
            Duration::from_secs(60),
        )
        .unwrap()
    };
    let generations: Vec<_> = (0..3).map(|j| d.config_generation(j)).collect();
    d.set_weight(3, 0);
    let took = d.reload_all().unwrap();
    let after: Vec<_> = (0..3).map(|j| d.config_generation(j)).collect();
    println!(
        "[r] b3 drained on every node in {:.2}s (config generations {generations:?} -> {after:?})",
        took.as_secs_f64()
    );
    let t = http(&d);
    println!("[r] 1000 connections with b3 draining: {:?}", t.per_backend);
    assert_eq!(t.failed, 0, "{:?}", t.first_error);
    assert_eq!(
        t.per_backend.get("b3"),
        None,
        "no new connection goes to b3"
    );
    let unchanged: Vec<_> = (0..3).map(|j| d.config_generation(j)).collect();
    let took = d.reload_all().unwrap();
    println!("[r] a reload that changes nothing: {took:?}");
    assert_eq!(
        (0..3).map(|j| d.config_generation(j)).collect::<Vec<_>>(),
        unchanged,
        "nothing changed: no node reloaded"
    );
    d.set_weight(3, 1);
    d.reload_all().unwrap();
    let t = http(&d);
    println!("[r] 1000 connections with b3 back: {:?}", t.per_backend);
    assert!(
        t.per_backend.get("b3").copied().unwrap_or(0) > 100,
        "{:?}",
        t.per_backend
    );
    drop(d);
    check_gone(&prefix, &dir);
}
