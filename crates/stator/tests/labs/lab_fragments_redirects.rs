//! Maglev §4.2–4.4 end to end, on whole deployments (`stator_lab::deploy`): a client with 64
//! addresses, a BIRD router doing ECMP over Stator nodes (`stator run`, XDP), backends behind
//! `stator decap`. Needs root, BIRD 2 and XDP.
//!
//! - **fragments** (§4.3): UDP datagrams of 3,000–8,000 bytes that the client's kernel cuts
//!   into fragments, and small datagrams of the same flows, from 64 addresses; and datagrams
//!   whose fragments a raw socket sends in reverse order. Every datagram must come back whole
//!   (the backends reassemble and echo it), each from the backend the flow's unfragmented
//!   datagrams reach; no fragment is redirected twice. Prints how many were redirected and
//!   held.
//! - **two clusters** (§4.2, Figure 6): cluster A's and B's nodes and backends; a group VIP
//!   matched by suffix in a cluster nobody configured is served; with every backend of A down,
//!   A's clients are served by B's backends through the failover redirect, and by A's again
//!   when they recover.
//! - **the packet tracer** (§4.4): `stator trace --send` through the router reports the node
//!   ECMP chose (its connection table holds the flow afterwards) and the backend a real
//!   connection from the same 5-tuple reaches; a traced fragment reports both hops.
//!
//! The fragment and tracer tests run twice: on XDP nodes, and on nodes all running the AF_XDP
//! plane (`*_afxdp_nodes`), whose packet threads hold fragments and report in process.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;

use crate::common::peer_xdp;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use stator_lab::deploy::{
    DeploySpec, Deployment, HTTP_PORT, UDP_PORT, UNTOLD_CLUSTER, cluster_vip,
};

/// One deployment at a time (they also take a machine-wide lock).
static SERIAL: Mutex<()> = Mutex::new(());

use stator_lab::netns::require_root;

fn deployment(test: &str, f: impl FnOnce(&mut DeploySpec)) -> (Deployment, String, PathBuf) {
    require_root();
    let prefix = format!("l4{test}-{}-", std::process::id() % 100_000);
    let dir =
        PathBuf::from("/run/stator-lab").join(format!("test-{}", prefix.trim_end_matches('-')));
    let mut spec = DeploySpec::new(&prefix, 61, &dir, Path::new(env!("CARGO_BIN_EXE_stator")));
    spec.table_size = 251;
    f(&mut spec);
    let t = Instant::now();
    let d = Deployment::up(&spec, &peer_xdp).unwrap_or_else(|e| panic!("lab up: {e}"));
    println!(
        "[{test}] deployment up in {:.1}s: {} nodes, {} backends, {} cluster(s)",
        t.elapsed().as_secs_f64(),
        spec.nodes,
        spec.backends,
        spec.clusters
    );
    (d, prefix, dir)
}

fn check_gone(prefix: &str, dir: &Path) {
    assert!(
        stator_lab::netns::list(prefix).unwrap().is_empty(),
        "namespaces left behind"
    );
    assert!(!dir.exists(), "{} left behind", dir.display());
}

/// The value of `name{labels}` in node `j`'s `/metrics` (0 when absent).
fn metric(d: &Deployment, j: usize, name_and_labels: &str) -> u64 {
    let body = d.api(j, "GET", "/metrics").unwrap().body;
    body.lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Sums a metric over the nodes.
fn total(d: &Deployment, name_and_labels: &str) -> u64 {
    (0..d.nodes.len())
        .map(|j| metric(d, j, name_and_labels))
        .sum()
}

/// The datagram's echo from `sock`, and which backend sent it; `None` on a timeout or a
/// reply that is not the request echoed whole.
fn echo(sock: &UdpSocket, to: SocketAddr, payload: &[u8]) -> Option<String> {
    sock.send_to(payload, to).ok()?;
    let mut buf = vec![0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let Ok((n, _)) = sock.recv_from(&mut buf) else {
            continue;
        };
        let reply = &buf[..n];
        let sp = reply.iter().position(|&b| b == b' ')?;
        if &reply[sp + 1..] == payload {
            return Some(String::from_utf8_lossy(&reply[..sp]).into_owned());
        }
    }
    None
}

/// The IPv4 fragments (in reverse order) of a UDP datagram from `src:sport` to `dst:dport`.
fn reverse_fragments(
    src: Ipv4Addr,
    sport: u16,
    dst: Ipv4Addr,
    dport: u16,
    payload: &[u8],
) -> Vec<Vec<u8>> {
    let mut l4 = Vec::with_capacity(8 + payload.len());
    l4.extend_from_slice(&sport.to_be_bytes());
    l4.extend_from_slice(&dport.to_be_bytes());
    l4.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    l4.extend_from_slice(&[0, 0]);
    l4.extend_from_slice(payload);
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&[0, 17]);
    add(&((l4.len()) as u16).to_be_bytes());
    add(&l4);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = !(sum as u16);
    l4[6..8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    let id: u16 = rand::random();
    let mut out = Vec::new();
    let mut off = 0;
    while off < l4.len() {
        let end = (off + 1200).min(l4.len());
        let more = end < l4.len();
        let mut h = vec![0x45, 0];
        h.extend_from_slice(&((20 + end - off) as u16).to_be_bytes());
        h.extend_from_slice(&id.to_be_bytes());
        let frag = ((off / 8) as u16) | if more { 0x2000 } else { 0 };
        h.extend_from_slice(&frag.to_be_bytes());
        h.extend_from_slice(&[64, 17, 0, 0]);
        h.extend_from_slice(&src.octets());
        h.extend_from_slice(&dst.octets());
        let mut s: u32 = h
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        h[10..12].copy_from_slice(&(!(s as u16)).to_be_bytes());
        h.extend_from_slice(&l4[off..end]);
        out.push(h);
        off = end;
    }
    out.reverse();
    out
}

#[test]
fn fragmented_datagrams_reach_their_flows_backend_whole() {
    fragments_case("frag", false);
}

/// The same on nodes running the AF_XDP plane: the packet threads hold early fragments in
/// process (docs/afxdp.md "§4").
#[test]
fn fragmented_datagrams_reach_their_flows_backend_whole_on_afxdp_nodes() {
    fragments_case("afrag", true);
}

/// Every node on AF_XDP (`dataplane.mode = "afxdp"`) when `afxdp`.
fn on_planes(s: &mut DeploySpec, afxdp: bool) {
    s.fragments = true;
    if afxdp {
        s.afxdp_nodes = s.nodes;
    }
}

fn fragments_case(tag: &str, afxdp: bool) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (d, prefix, dir) = deployment(tag, |s| on_planes(s, afxdp));
    let client = d.client().clone();
    let srcs: Vec<IpAddr> = client.addrs(false);
    let vip = SocketAddr::new(cluster_vip(0, false), UDP_PORT);
    let (flows, big, mismatched, lost, reversed) = client
        .ns
        .run_in(move || {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(13);
            let (mut flows, mut big, mut mismatched, mut lost, mut reversed) = (0, 0, 0, 0, 0);
            for src in &srcs {
                let sock = UdpSocket::bind(SocketAddr::new(*src, 0)).unwrap();
                sock.set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                let Some(home) = echo(&sock, vip, format!("small {src}").as_bytes()) else {
                    lost += 1;
                    continue;
                };
                flows += 1;
                for _ in 0..2 {
                    let n = rng.random_range(3000..=8000);
                    let payload: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
                    big += 1;
                    match echo(&sock, vip, &payload) {
                        None => lost += 1,
                        Some(b) if b != home => mismatched += 1,
                        Some(_) => {}
                    }
                }
                // and the same flow's next datagram in fragments sent last-first
                let IpAddr::V4(s4) = src else { continue };
                let sport = sock.local_addr().unwrap().port();
                let IpAddr::V4(v4) = vip.ip() else { continue };
                let payload: Vec<u8> = (0..3000).map(|i| (i % 7) as u8).collect();
                let raw = socket2::Socket::new(
                    socket2::Domain::IPV4,
                    socket2::Type::RAW,
                    Some(socket2::Protocol::from(libc::IPPROTO_RAW)),
                )
                .unwrap();
                for f in reverse_fragments(*s4, sport, v4, UDP_PORT, &payload) {
                    raw.send_to(&f, &socket2::SockAddr::from(SocketAddr::new(vip.ip(), 0)))
                        .unwrap();
                }
                big += 1;
                reversed += 1;
                let mut buf = vec![0u8; 65536];
                let deadline = Instant::now() + Duration::from_secs(3);
                let mut got = None;
                while Instant::now() < deadline && got.is_none() {
                    if let Ok((n, _)) = sock.recv_from(&mut buf) {
                        let r = &buf[..n];
                        if let Some(sp) = r.iter().position(|&b| b == b' ')
                            && r[sp + 1..] == payload[..]
                        {
                            got = Some(String::from_utf8_lossy(&r[..sp]).into_owned());
                        }
                    }
                }
                match got {
                    None => lost += 1,
                    Some(b) if b != home => mismatched += 1,
                    Some(_) => {}
                }
            }
            (flows, big, mismatched, lost, reversed)
        })
        .unwrap();
    let redirected = total(&d, "stator_fragments_total{event=\"redirected\"}");
    let received = total(&d, "stator_redirects_total{event=\"received\"}");
    let again = total(&d, "stator_redirects_total{event=\"again\"}");
    let recorded = total(&d, "stator_fragments_total{event=\"recorded\"}");
    let followed = total(&d, "stator_fragments_total{event=\"followed\"}");
    let held = total(&d, "stator_hold_frames_total{event=\"held\"}");
    let released = total(&d, "stator_hold_frames_total{event=\"released\"}");
    let expired = total(&d, "stator_hold_frames_total{event=\"expired\"}");
    println!(
        "[{tag}] {flows} flows from 64 addresses; {big} fragmented datagrams ({reversed} sent \
         last-fragment-first by a raw socket): {} delivered whole to their flow's backend, \
         {mismatched} to another backend, {lost} lost",
        big - mismatched - lost
    );
    println!(
        "[{tag}] fragments redirected to their owner {redirected} (received as redirects \
         {received}, would have been redirected twice {again}); first fragments recorded \
         {recorded}, later ones forwarded by the record {followed}; held {held}, released \
         {released}, expired {expired}"
    );
    drop(d);
    check_gone(&prefix, &dir);
    assert_eq!(flows, 64, "every flow's small datagram was answered");
    assert_eq!(
        (mismatched, lost),
        (0, 0),
        "every datagram delivered whole to its flow's backend"
    );
    assert_eq!(again, 0, "no fragment was redirected twice");
    // a held fragment that came in a redirect is decided (and counted received) again when
    // the holder sends it on
    assert!(
        (redirected..=redirected + released).contains(&received),
        "every redirected fragment arrived at its owner: {received} received, {redirected} \
         redirected, {released} held and sent on"
    );
    assert!(
        redirected > 0,
        "with three nodes most datagrams have another owner"
    );
    assert!(
        held > 0 && released > 0,
        "fragments sent last-first were held, then released"
    );
}

/// `stator trace --send …` in the client's namespace; the reports' JSON.
fn trace_send(d: &Deployment, args: &[String]) -> Vec<serde_json::Value> {
    let out = Command::new("nsenter")
        .arg(format!("--net={}", d.client().ns.path().display()))
        .arg(env!("CARGO_BIN_EXE_stator"))
        .args([
            "trace",
            "--send",
            "--json",
            "--wait-ms",
            "1500",
            "--key-file",
        ])
        .arg(d.spec().dir.join(stator_lab::deploy::TRACE_KEY_FILE))
        .args(args)
        .output()
        .expect("run stator trace --send");
    assert!(
        out.status.success(),
        "stator trace --send {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON report"))
        .collect()
}

/// The node index of a report's `node` (`n0`, `n1`, …).
fn node_of(r: &serde_json::Value) -> usize {
    r["node"].as_str().unwrap()[1..].parse().unwrap()
}

#[test]
fn traced_packets_report_their_path() {
    trace_case("trace", false);
}

/// The same through nodes running the AF_XDP plane: their packet threads' reports reach the
/// node's reporter (docs/afxdp.md "§4").
#[test]
fn traced_packets_report_their_path_through_afxdp_nodes() {
    trace_case("atrac", true);
}

fn trace_case(tag: &str, afxdp: bool) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (d, prefix, dir) = deployment(tag, |s| on_planes(s, afxdp));
    let vip = cluster_vip(0, false);
    let srcs = d.client().addrs(false);
    // a SYN from ten sources: one report each, from the node ECMP chose (its connection table
    // holds the flow now), naming the backend a real connection of the same 5-tuple reaches
    let mut checked = 0;
    for (i, src) in srcs.iter().take(10).enumerate() {
        let sport = 45_000 + i as u16;
        let reports = trace_send(
            &d,
            &[
                "--vip".into(),
                vip.to_string(),
                "--dport".into(),
                HTTP_PORT.to_string(),
                "--src".into(),
                src.to_string(),
                "--sport".into(),
                sport.to_string(),
            ],
        );
        assert_eq!(reports.len(), 1, "one node on the path: {reports:?}");
        let r = &reports[0];
        assert_eq!(
            (r["hop"].as_u64(), r["kind"].as_str()),
            (Some(1), Some("forward"))
        );
        assert_eq!(r["cause"].as_str(), Some("syn"));
        let x = node_of(r);
        let q = format!("/v1/trace?vip={vip}&src={src}&sport={sport}&dport={HTTP_PORT}&proto=tcp");
        let on_x: serde_json::Value =
            serde_json::from_str(&d.api(x, "GET", &q).unwrap().body).unwrap();
        assert_eq!(
            on_x["decision"].as_str(),
            Some("conntrack"),
            "node n{x} holds the traced flow: {on_x}"
        );
        // a real connection from the same address and port
        let (src, dst) = (*src, SocketAddr::new(vip, HTTP_PORT));
        let real = d
            .client()
            .ns
            .run_in(move || {
                let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
                s.set_reuse_address(true)?;
                s.bind(&SocketAddr::new(src, sport).into())?;
                s.connect_timeout(&dst.into(), Duration::from_secs(5))?;
                let mut s: std::net::TcpStream = s.into();
                use std::io::{Read, Write};
                s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
                let mut out = String::new();
                s.read_to_string(&mut out)?;
                Ok::<_, std::io::Error>(
                    out.lines()
                        .find_map(|l| l.strip_prefix("X-Backend: "))
                        .map(str::to_owned),
                )
            })
            .unwrap()
            .expect("the real connection is answered");
        let traced = r["backend"].as_str().unwrap();
        assert_eq!(
            real.as_deref(),
            traced.split('-').next(),
            "the trace names the backend the real connection reaches"
        );
        println!("[{tag}] {src}:{sport} → n{x} → {traced}; the real connection: {real:?}");
        checked += 1;
    }
    // a traced UDP datagram in two fragments: the node the router chose sends it to the
    // fragments' owner (hop 1), which decides it (hop 2) — from some source, the first node is
    // not the owner
    let mut two_hops = None;
    for src in srcs.iter().skip(10).take(16) {
        let reports = trace_send(
            &d,
            &[
                "--vip".into(),
                vip.to_string(),
                "--proto".into(),
                "udp".into(),
                "--dport".into(),
                UDP_PORT.to_string(),
                "--fragment".into(),
                "--src".into(),
                src.to_string(),
            ],
        );
        assert!(
            !reports.is_empty(),
            "no report for the traced fragment from {src}"
        );
        if reports.len() == 2 {
            two_hops = Some(reports);
            break;
        }
        assert_eq!(reports[0]["kind"].as_str(), Some("forward"), "{reports:?}");
    }
    let r = two_hops.expect("a traced fragment crossed two nodes");
    assert_eq!(
        (r[0]["hop"].as_u64(), r[0]["kind"].as_str()),
        (Some(1), Some("frag_redirect"))
    );
    assert_eq!(
        (r[1]["hop"].as_u64(), r[1]["kind"].as_str()),
        (Some(2), Some("forward"))
    );
    assert_eq!(r[1]["fragment"].as_bool(), Some(true));
    let owner = node_of(&r[1]);
    assert_eq!(
        r[0]["target"].as_str().map(str::to_owned),
        Some(d.nodes[owner].host.addr(false).to_string()),
        "hop 1 sent it to the node that reported hop 2"
    );
    println!(
        "[{tag}] a traced fragment: n{} → (redirect) → n{owner} → {}",
        node_of(&r[0]),
        r[1]["backend"]
    );
    outsiders_get_no_report(&d, tag);
    drop(d);
    check_gone(&prefix, &dir);
    assert_eq!(checked, 10);
}

/// The trust issue's measurement (docs/forwarding.md §11): a client sends 200 UDP datagrams
/// to the VIP whose payload is a trace mark naming another address (a victim, here another
/// client address with a socket listening) — with no MAC, with a key of its own, and a genuine
/// mark (sealed with the cluster's key for another flow) replayed with the victim as its
/// receiver. The victim gets no report; every mark is counted (unauthenticated, or beyond the
/// node's window).
fn outsiders_get_no_report(d: &Deployment, tag: &str) {
    use stator_abi::{STATOR_TRACE_MAGIC, TraceMark};
    let vip = cluster_vip(0, false);
    let srcs = d.client().addrs(false);
    let (attacker, victim) = (srcs[30], srcs[31]);
    let key_text =
        std::fs::read_to_string(d.spec().dir.join(stator_lab::deploy::TRACE_KEY_FILE)).unwrap();
    let key = stator_control::host::parse_trace_keys(&key_text).unwrap()[0];
    let counted = |d: &Deployment| -> u64 {
        (0..d.nodes.len())
            .map(|j| {
                let m = d.api(j, "GET", "/metrics").unwrap().body;
                ["unauthenticated", "limited"]
                    .iter()
                    .map(|r| {
                        let label = format!("stator_trace_reports_total{{result=\"{r}\"}} ");
                        m.lines()
                            .find_map(|l| l.strip_prefix(&label))
                            .and_then(|v| v.trim().parse::<f64>().ok())
                            .unwrap_or(0.0) as u64
                    })
                    .sum::<u64>()
            })
            .sum()
    };
    let before = counted(d);
    let (sent, got) = d
        .client()
        .ns
        .run_in(move || {
            let rx = std::net::UdpSocket::bind(SocketAddr::new(victim, 0)).unwrap();
            rx.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let port = rx.local_addr().unwrap().port();
            let tx = std::net::UdpSocket::bind(SocketAddr::new(attacker, 0)).unwrap();
            let sport = tx.local_addr().unwrap().port();
            let mut sent = 0;
            for i in 0..200u32 {
                let mut m = TraceMark {
                    magic: STATOR_TRACE_MAGIC,
                    receiver_family: 4,
                    receiver_port: port.to_be_bytes(),
                    trace_id: i,
                    ..TraceMark::default()
                };
                let std::net::IpAddr::V4(v) = victim else {
                    unreachable!()
                };
                m.receiver[..4].copy_from_slice(&v.octets());
                m.mac = match i % 3 {
                    0 => 0,
                    1 => stator_core::trace_seal(
                        &m,
                        b"an-outsiders-key",
                        attacker,
                        vip,
                        sport,
                        UDP_PORT,
                        17,
                    ),
                    // the cluster's key, but sealed for another receiver (the attacker)
                    _ => {
                        let mut genuine = m;
                        genuine.receiver[..4].copy_from_slice(&[10, 255, 255, 1]);
                        stator_core::trace_seal(&genuine, &key, attacker, vip, sport, UDP_PORT, 17)
                    }
                };
                let mut payload = m.to_bytes().to_vec();
                payload.resize(60, 0);
                sent += tx
                    .send_to(&payload, SocketAddr::new(vip, UDP_PORT))
                    .map_or(0, |_| 1);
            }
            let mut got = 0usize;
            let until = Instant::now() + Duration::from_secs(2);
            let mut buf = [0u8; 4096];
            while Instant::now() < until {
                if let Ok((n, _)) = rx.recv_from(&mut buf) {
                    // the UDP echo service answers the attacker, never the victim
                    if serde_json::from_slice::<serde_json::Value>(&buf[..n]).is_ok() {
                        got += 1;
                    }
                }
            }
            (sent, got)
        })
        .unwrap();
    let after = counted(d);
    println!(
        "[{tag}] an outsider's 200 marks naming a victim: {got} report(s) to the victim, {} marks \
         counted (unauthenticated or beyond the window)",
        after - before
    );
    assert_eq!(sent, 200);
    assert_eq!(got, 0, "no report reaches the victim");
    assert_eq!(after - before, 200, "every mark is counted");
}

#[test]
fn two_clusters_serve_each_other() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (d, prefix, dir) = deployment("clus", |s| {
        s.clusters = 2;
        s.nodes = 4;
        s.backends = 4;
    });
    let mut d = d;
    let srcs = d.client().addrs(false);
    let batch = |d: &Deployment, vip: IpAddr, n: usize| {
        stator_lab::traffic::http_batch(
            &d.client().ns,
            &srcs,
            SocketAddr::new(vip, HTTP_PORT),
            n,
            4,
            Duration::from_secs(60),
        )
        .unwrap()
    };
    let a = ["b0".to_owned(), "b1".to_owned()];
    let b = ["b2".to_owned(), "b3".to_owned()];
    let served_by = |t: &stator_lab::traffic::Tally, set: &[String]| {
        t.per_backend.keys().all(|k| set.contains(k))
    };
    // each cluster's VIP over its own backends
    let t = batch(&d, cluster_vip(0, false), 100);
    assert_eq!(t.failed, 0, "{:?}", t.first_error);
    assert!(
        served_by(&t, &a),
        "cluster A by its own backends: {:?}",
        t.per_backend
    );
    let t = batch(&d, cluster_vip(1, false), 100);
    assert!(t.failed == 0 && served_by(&t, &b), "cluster B: {t:?}");
    // an address of a cluster no node was told about (192.0.2.42: same 4-bit suffix), routed
    // to cluster A's first node, is served by its group VIP
    let untold = cluster_vip(UNTOLD_CLUSTER, false);
    let via = d.nodes[0].host.addr(false).to_string();
    d.router()
        .ip(["route", "replace", &format!("{untold}/32"), "via", &via])
        .unwrap();
    let t = batch(&d, untold, 100);
    assert_eq!(
        t.failed, 0,
        "the untold cluster's address: {:?}",
        t.first_error
    );
    assert!(served_by(&t, &a), "{:?}", t.per_backend);
    let groups = metric(&d, 0, "stator_group_matches_total");
    println!(
        "[clusters] {untold} (never configured) served by {:?}; group matches on n0: {groups}",
        t.per_backend
    );
    assert!(groups > 0);
    // every backend of A down: A's VIP stays announced (it has a failover), and its clients
    // are served by B's backends through the redirect
    d.backend_stop(0);
    d.backend_stop(1);
    let t0 = Instant::now();
    let mut converged = None;
    while t0.elapsed() < Duration::from_secs(30) {
        let t = batch(&d, cluster_vip(0, false), 20);
        if t.failed == 0 && served_by(&t, &b) {
            converged = Some(t0.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let took = converged.expect("cluster A's clients served by cluster B");
    let t = batch(&d, cluster_vip(0, false), 200);
    let failover = metric(&d, 0, "stator_redirects_total{event=\"failover\"}")
        + metric(&d, 1, "stator_redirects_total{event=\"failover\"}");
    let received = metric(&d, 2, "stator_redirects_total{event=\"received\"}")
        + metric(&d, 3, "stator_redirects_total{event=\"received\"}");
    println!(
        "[clusters] A's backends down: A's clients served by {:?} through failover after \
         {:.1}s; {failover} packets redirected by A's nodes, {received} decided by B's",
        t.per_backend,
        took.as_secs_f64()
    );
    assert_eq!(t.failed, 0, "{:?}", t.first_error);
    assert!(served_by(&t, &b), "{:?}", t.per_backend);
    assert!(failover > 0 && received > 0);
    assert_eq!(
        d.next_hops_vip(cluster_vip(0, false)).unwrap().len(),
        2,
        "A's VIP stays announced by A's nodes"
    );
    // A's backends back: A's own again
    d.backend_start(0).unwrap();
    d.backend_start(1).unwrap();
    let t0 = Instant::now();
    let mut back = None;
    while t0.elapsed() < Duration::from_secs(30) {
        let t = batch(&d, cluster_vip(0, false), 20);
        if t.failed == 0 && served_by(&t, &a) {
            back = Some(t0.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let took = back.expect("cluster A's clients back on A's backends");
    println!(
        "[clusters] A's backends back: served by them again after {:.1}s",
        took.as_secs_f64()
    );
    drop(d);
    check_gone(&prefix, &dir);
}
