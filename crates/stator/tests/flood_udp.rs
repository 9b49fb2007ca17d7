//! A one-second UDP flood does not take the node down (the trust issue's measurement, made a
//! test): a `stator run` process with its descriptor limit at 4,096 (`prlimit`), a UDP
//! listener with 2 workers and every other setting at its default, in front of a real echo
//! backend health-checked by UDP every 200 ms; one 64-byte datagram from each of 50,000
//! loopback addresses (127.10.0.0 onwards) in under 2 s, while a client that was talking
//! before keeps asking. Before the budget, the process ran out of descriptors, the health
//! check failed with "Too many open files" and the backend was marked down.
//!
//! Asserted throughout and after: the backend is never anything but up (every answer of
//! `/v1/backends`, and no `down` transition in `/metrics`); the admin API answers every
//! request (each latency measured; the distribution printed, the bound asserted is what this
//! 2-core machine reliably does while flooding itself); the talking client gets ≥ 99% of its
//! answers; the process's open descriptors stay under its limit, and what the proxy tier
//! holds under its budget; the flood is accounted for — every datagram opened a session, was
//! refused under a reason, or was dropped by the kernel at the listening socket — and the
//! refusals are there under their reasons.
//!
//! Also: `stator check` under the same limit warns, naming `listener[0].udp.max_sessions`.
//!
//! tier: root (50,000 loopback sources and a process under prlimit; scripts/test-tier.sh)
//! lane: alone (scripts/test-tier.sh: its premise is a node with the CPU to itself)

mod flood;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use flood::{LIMIT, Monitor, Node, free_port, metric};

/// Sources in the flood.
const SOURCES: u32 = 50_000;

/// A UDP echo server on 127.0.0.1 (a thread; stops with the flag, or after 2 minutes).
fn echo_backend(stop: Arc<AtomicBool>) -> u16 {
    let s = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .unwrap();
    let _ = s.set_recv_buffer_size(8 << 20);
    s.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
        .unwrap();
    let sock: UdpSocket = s.into();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let port = sock.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(120);
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                let _ = sock.send_to(&buf[..n], from);
            }
        }
    });
    port
}

fn config(backend: u16, listener: u16) -> String {
    format!(
        r#"
[node]
name = "flood"
[dataplane]
mode = "none"
[api]
socket = "{{dir}}/api.sock"
[[pool]]
name = "echo"
[pool.health]
method = "udp"
payload = "health"
interval = "200ms"
timeout = "150ms"
[[pool.backend]]
address = "127.0.0.1"
port = {backend}
id = "echo"
[[listener]]
name = "udp"
address = "127.0.0.1:{listener}"
protocol = "udp"
pool = "echo"
workers = 2
"#
    )
}

/// A client that asks and waits for each answer (300 ms at most), until stopped: (asked,
/// answered).
fn talking_client(listener: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u64, u64)> {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(("127.0.0.1", listener)).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    std::thread::spawn(move || {
        let (mut asked, mut answered) = (0u64, 0u64);
        let mut buf = [0u8; 64];
        let deadline = Instant::now() + Duration::from_secs(60);
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            asked += 1;
            let q = format!("talk {asked}");
            if sock.send(q.as_bytes()).is_ok() {
                let until = Instant::now() + Duration::from_millis(300);
                while Instant::now() < until {
                    match sock.recv(&mut buf) {
                        Ok(n) if &buf[..n] == q.as_bytes() => {
                            answered += 1;
                            break;
                        }
                        Ok(_) => {} // a late answer to an earlier question
                        Err(_) => break,
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        (asked, answered)
    })
}

/// One datagram from each of `n` loopback addresses from 127.10.0.0 up, on two threads.
fn flood(listener: u16, n: u32) -> Duration {
    let started = Instant::now();
    let to: socket2::SockAddr = SocketAddr::from((Ipv4Addr::LOCALHOST, listener)).into();
    std::thread::scope(|s| {
        for half in 0..2u32 {
            let to = to.clone();
            s.spawn(move || {
                let payload = [0x5au8; 64];
                for i in (half..n).step_by(2) {
                    let src = Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 10, 0, 0)) + i);
                    let sock = socket2::Socket::new(
                        socket2::Domain::IPV4,
                        socket2::Type::DGRAM,
                        Some(socket2::Protocol::UDP),
                    )
                    .unwrap();
                    sock.bind(&SocketAddr::from((src, 0)).into()).unwrap();
                    let _ = sock.send_to(&payload, &to);
                }
            });
        }
    });
    started.elapsed()
}

#[test]
fn a_udp_flood_of_50000_sources_does_not_take_the_node_down() {
    assert!(
        stator_lab::netns::is_root(),
        "needs root (run with scripts/test-tier.sh root)"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let backend = echo_backend(Arc::clone(&stop));
    let listener = free_port(true);
    let mut node = Node::start(&config(backend, listener), "echo");
    let client = talking_client(listener, Arc::clone(&stop));
    // the client is talking before the flood
    std::thread::sleep(Duration::from_millis(500));
    let monitor = Monitor::start(&node, "echo");
    std::thread::sleep(Duration::from_millis(200));
    let took = flood(listener, SOURCES);
    // the sessions stay (60 s idle): watch the node hold them for a while
    std::thread::sleep(Duration::from_millis(1500));
    let seen = monitor.finish();
    stop.store(true, Ordering::Relaxed);
    let (asked, answered) = client.join().unwrap();
    let metrics = node.metrics();
    let listeners = node.api.get_json("/v1/listeners").unwrap();
    let log = node.log();
    node.stop();

    let m = |name: &str, labels: &[(&str, &str)]| metric(&metrics, name, labels);
    let drop_of = |reason: &str| {
        m(
            "stator_proxy_udp_drops_total",
            &[("listener", "udp"), ("reason", reason)],
        )
    };
    let opened = m("stator_proxy_connections_total", &[("listener", "udp")]);
    let refused: Vec<(&str, f64)> = [
        "source_limit",
        "session_rate",
        "descriptors",
        "session_socket",
        "no_upstream",
    ]
    .into_iter()
    .map(|r| (r, drop_of(r)))
    .collect();
    let refused_total: f64 = refused.iter().map(|(_, n)| n).sum();
    let overflow = drop_of("socket_overflow");
    let budget = m("stator_proxy_descriptors", &[("kind", "budget")]);
    let peak = m("stator_proxy_descriptors", &[("kind", "peak")]);
    let reserved = m("stator_descriptors", &[("kind", "reserved")]);
    let reclaimed = m(
        "stator_proxy_udp_sessions_ended_total",
        &[("listener", "udp"), ("reason", "reclaimed")],
    );
    let evicted = m(
        "stator_proxy_session_evictions_total",
        &[("listener", "udp")],
    );
    let downs = m(
        "stator_backend_transitions_total",
        &[("backend", "echo"), ("to", "down")],
    );
    let ratio = answered as f64 / asked.max(1) as f64;
    println!(
        "flood: {SOURCES} sources in {:.2} s; sessions opened {opened}; refused {refused:?}; \
         kernel drops at the socket {overflow}; reclaimed {reclaimed}; evicted {evicted}",
        took.as_secs_f64()
    );
    println!(
        "descriptors: limit {LIMIT}, reserved {reserved}, budget {budget}, proxy peak {peak}; \
         process peak {} ({} looks at /proc/PID/fd)",
        seen.peak_fds, seen.fd_looks
    );
    println!("admin API during the flood: {}", seen.distribution());
    println!(
        "talking client: {answered} of {asked} answered ({:.2}%)",
        ratio * 100.0
    );
    println!("descriptors in /v1/listeners: {}", listeners["descriptors"]);
    println!("udp in /v1/listeners: {}", listeners["listeners"][0]["udp"]);

    assert!(
        took < Duration::from_secs(2),
        "the flood took {took:?}: this machine is too slow for the test's premise"
    );
    flood::assert_the_node_held(&seen, &log, downs, (answered, asked), budget, peak);
    // every flood datagram opened a session, was refused under a reason, or was dropped by
    // the kernel (the talking client's own session is among those opened)
    let accounted = opened + refused_total + overflow;
    assert!(
        accounted >= f64::from(SOURCES) && accounted <= f64::from(SOURCES) + asked as f64,
        "{accounted} accounted for, {SOURCES} sent"
    );
    assert!(
        drop_of("descriptors") > 0.0,
        "the budget refused nothing: {refused:?}"
    );
    assert_eq!(
        listeners["listeners"][0]["udp"]["drops"]["descriptors"].as_f64(),
        Some(drop_of("descriptors")),
        "/v1/listeners and /metrics agree"
    );
}

#[test]
fn stator_check_names_the_setting_that_does_not_fit() {
    let dir = stator_testkit::scratch::TempDir::new("stator-flood-check");
    let path = dir.join("stator.toml");
    std::fs::write(&path, config(7, 7007).replace("{dir}", "/run/stator")).unwrap();
    let out = std::process::Command::new("prlimit")
        .arg(format!("--nofile={LIMIT}:{LIMIT}"))
        .arg(env!("CARGO_BIN_EXE_stator"))
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(
            "warning: listener[0].udp.max_sessions: the worst case needs 33169 descriptors, \
             more than the limit here (4096"
        ),
        "{text}"
    );
    assert!(
        text.contains("api.max_connections: (256 + 1) × 1 endpoint = 257"),
        "{text}"
    );
}
