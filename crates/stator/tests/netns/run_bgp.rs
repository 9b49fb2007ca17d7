//! `stator run` end to end with real BIRD (needs root and BIRD 2): a router namespace running
//! BIRD with `merge paths on` peers with two node namespaces, each running BIRD and
//! `stator run` (XDP attached to its uplink, pins on a bpffs the test mounts). The router's
//! kernel table must gain the VIP with both next hops; lose node 1's when node 1's forwarder
//! is detached behind Stator's back, and regain it when the watchdog re-attaches; lose it
//! when node 1's last backend fails its health check, and regain it on recovery; lose it when
//! node 1 gets SIGTERM — withdrawn by Stator while node 1's BGP session is still up — before
//! the process exits 0 with its pins removed.
//!
//! Node 1 and node 0 have different backends (10.S.0.51 and .50) so that one node's backend
//! can fail alone. Timings are printed (`--nocapture`); bounds are functional.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stator_lab::bird::{Bird, wait_next_hops};
use stator_lab::lan::{EcmpLan, RouterBgp, node_bird_config};
use stator_lab::netns::{Netns, is_root, veth};
use stator_lab::stator::{BpfFs, StatorRun};

const SUBNET: u8 = 78;
const VIP: &str = "192.0.2.10/32";
const SOON: Duration = Duration::from_secs(15);
const SESSIONS: Duration = Duration::from_secs(30);

/// A TCP listener in a namespace (a backend's health endpoint) that can be closed and
/// reopened.
struct Endpoint {
    ns: Netns,
    addr: SocketAddr,
    stop: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
}

impl Endpoint {
    fn open(ns: &Netns, addr: SocketAddr) -> Self {
        let mut e = Self {
            ns: ns.clone(),
            addr,
            stop: None,
        };
        e.reopen();
        e
    }

    fn reopen(&mut self) {
        let addr = self.addr;
        let listener = self
            .ns
            .run_in(move || TcpListener::bind(addr).unwrap())
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(mut c) = conn {
                    let _ = c.read(&mut [0u8; 16]);
                }
            }
        });
        self.stop = Some((stop, thread));
    }

    fn close(&mut self) {
        if let Some((stop, thread)) = self.stop.take() {
            stop.store(true, Ordering::SeqCst);
            let addr = self.addr;
            let _ = self.ns.run_in(move || TcpStream::connect(addr));
            thread.join().unwrap();
        }
    }
}

fn node_config(lan: &EcmpLan, i: usize, dir: &Path, pins: &Path, backend: IpAddr) -> String {
    let (v4, _) = lan.node_addresses(i);
    format!(
        r#"
[node]
name = "n{i}"
address_v4 = "{v4}"

[dataplane]
interfaces = ["eth0"]
pin_path = "{pins}"
conntrack = "shared"
conntrack_entries = 4096
slots_per_generation = 65536

[api]
socket = "{dir}/n{i}.sock"
[bgp]
bird_socket = "{dir}/n{i}.ctl"
bird_config = "{dir}/n{i}-stator.conf"
local_as = 65010

[[bgp.neighbor]]
name = "tor"
address = "{router}"
remote_as = 65000
hold_time = "3s"
keepalive = "1s"
connect_retry = "1s"
error_wait = "1s"

[log]
format = "json"

[[pool]]
name = "web"
[pool.health]
interval = "200ms"
timeout = "100ms"
rise = 2
fall = 2

[[pool.backend]]
address = "{backend}"
port = 8080

[[vip]]
name = "www"
address = "192.0.2.10"
port = 80
protocol = "tcp"
pools = ["web"]
table_size = 251
"#,
        dir = dir.display(),
        pins = pins.display(),
        router = lan.router_v4,
    )
}

fn hops(lan: &EcmpLan, nodes: &[usize]) -> Vec<IpAddr> {
    nodes.iter().map(|&i| lan.node_addresses(i).0).collect()
}

#[test]
fn stator_run_announces_withdraws_and_recovers_through_bird() {
    assert!(
        is_root(),
        "this test runs BIRD and stator run in network namespaces: run it as root"
    );
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_stator"));
    let tag = std::process::id() % 100_000;
    let dir = std::env::temp_dir().join(format!("stator-run-bgp-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = format!("srb{tag}-");
    let lan = EcmpLan::create(&prefix, SUBNET, 2).unwrap();
    let bpffs = BpfFs::mount(&dir.join("bpffs")).unwrap();

    // Backends on the LAN: .50 serves node 0, .51 node 1.
    let backends = Netns::create(&format!("{prefix}b")).unwrap();
    veth(&lan.router, "pb", &backends, "eth0").unwrap();
    lan.router
        .ip(["link", "set", "pb", "master", "br0"])
        .unwrap();
    let b0: IpAddr = format!("10.{SUBNET}.0.50").parse().unwrap();
    let b1: IpAddr = format!("10.{SUBNET}.0.51").parse().unwrap();
    backends.addr_add("eth0", &format!("{b0}/24")).unwrap();
    backends.addr_add("eth0", &format!("{b1}/24")).unwrap();
    let _e0 = Endpoint::open(&backends, SocketAddr::new(b0, 8080));
    let mut e1 = Endpoint::open(&backends, SocketAddr::new(b1, 8080));

    let router_conf = lan.router_bird_config(
        &RouterBgp {
            local_as: 65000,
            node_as: 65010,
            hold_time: 3,
            keepalive: 1,
            bfd_nodes: vec![],
            accept_v4: vec!["192.0.2.0/24".into()],
            accept_v6: vec![],
        },
        &dir.join("router.log"),
    );
    let router = Bird::start(&lan.router, &dir, "router", &router_conf).unwrap();
    let mut birds = Vec::new();
    let mut nodes = Vec::new();
    let started = Instant::now();
    for (i, backend) in [(0, b0), (1, b1)] {
        let n = &lan.nodes[i];
        n.ns.sysctl("net.ipv4.conf.eth0.forwarding", "1").unwrap();
        let include = dir.join(format!("n{i}-stator.conf"));
        let conf = node_bird_config(n.v4, &include, &dir.join(format!("n{i}.log")));
        birds.push(Bird::start(&n.ns, &dir, &format!("n{i}"), &conf).unwrap());
        let pins = bpffs.path().join(format!("n{i}"));
        let config = node_config(&lan, i, &dir, &pins, backend);
        nodes.push(
            StatorRun::start(
                &n.ns,
                &binary,
                &dir,
                &format!("stator-n{i}"),
                &config,
                &dir.join(format!("n{i}.sock")),
            )
            .unwrap(),
        );
    }
    for n in &mut nodes {
        let took = n.wait_ready(SOON).unwrap();
        println!("{}: running after {took:?}", n.name());
    }
    let ready = started.elapsed();
    let both = hops(&lan, &[0, 1]);
    let took = wait_next_hops(&lan.router, VIP, &both, SESSIONS).unwrap();
    println!(
        "router has {VIP} via both nodes {took:?} after both nodes run ({ready:?} after start; \
         BGP sessions come up in that time)"
    );

    // 1. Node 1's forwarder detached behind Stator's back: the watchdog withdraws, repairs,
    //    and announces again after two good checks.
    let pins1 = bpffs.path().join("n1");
    let t0 = Instant::now();
    let out = std::process::Command::new("nsenter")
        .arg(format!("--net={}", lan.nodes[1].ns.path().display()))
        .arg(&binary)
        .args(["xdp", "detach", "--iface", "eth0", "--pin-path"])
        .arg(&pins1)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lost = wait_next_hops(&lan.router, VIP, &hops(&lan, &[0]), SOON)
        .unwrap_or_else(|e| panic!("{e}\n{}", nodes[1].log_tail(20)));
    wait_next_hops(&lan.router, VIP, &both, SOON).unwrap();
    println!(
        "forwarder detached on n1: router lost n1 after {lost:?}; watchdog re-attached, router \
         regained n1 after {:?} in all",
        t0.elapsed()
    );
    let status = nodes[1].api("GET", "/v1/status").unwrap();
    assert!(status.body.contains("\"healthy\":true"), "{}", status.body);
    let metrics = nodes[1].api("GET", "/metrics").unwrap().body;
    assert!(
        metrics.contains("stator_forwarder_failures_total{plane=\"xdp\"} 1"),
        "{metrics}"
    );

    // 2. Node 1's last backend fails its health check (fall 2 x 200 ms), then recovers.
    e1.close();
    let lost = wait_next_hops(&lan.router, VIP, &hops(&lan, &[0]), SOON).unwrap();
    let vips = nodes[1].api("GET", "/v1/vips").unwrap().body;
    assert!(vips.contains("\"usable\":0"), "{vips}");
    e1.reopen();
    let back = wait_next_hops(&lan.router, VIP, &both, SOON).unwrap();
    println!(
        "n1's backend down: router lost n1 after {lost:?} (from the listener closing); \
         backend back: router regained n1 after {back:?} (rise 2 x 200 ms)"
    );

    // 3. SIGTERM on node 1: withdrawn by Stator (its BGP session stays up), then exit 0,
    //    pins removed (on_exit = "detach").
    let t0 = Instant::now();
    let status = nodes[1].terminate(SOON).unwrap();
    let exited = t0.elapsed();
    assert!(
        status.success(),
        "exit status {status}: {}",
        nodes[1].log_tail(20)
    );
    let hops_at_exit = stator_lab::bird::kernel_next_hops(&lan.router, VIP).unwrap();
    assert!(
        birds[1].is_established("tor").unwrap(),
        "node 1's BGP session is still up: the route was withdrawn, not lost with the session"
    );
    // Withdrawn, not lost with the session (asserted above); how soon is printed.
    let lost = wait_next_hops(&lan.router, VIP, &hops(&lan, &[0]), SOON)
        .unwrap_or_else(|e| panic!("not withdrawn after the exit: {e}"));
    println!(
        "SIGTERM on n1: exited 0 after {exited:?}; router next hops at exit {hops_at_exit:?}, \
         n1 gone {lost:?} after the exit"
    );
    assert!(!pins1.join("stator_ctl").exists(), "pins removed on exit");
    let log = nodes[1].log_tail(10);
    let withdrawn = log
        .find("every VIP withdrawn")
        .expect("the withdrawal is logged");
    let detached = log
        .find("data plane detached")
        .expect("the detach is logged");
    assert!(withdrawn < detached, "withdraw first, then detach:\n{log}");

    let status = nodes[0].terminate(SOON).unwrap();
    assert!(status.success());
    wait_next_hops(&lan.router, VIP, &[], SOON).unwrap();
    drop(router);
    drop(birds);
    drop(bpffs);
    let _ = backends.delete();
    drop(lan);
    let _ = std::fs::remove_dir_all(&dir);
}
