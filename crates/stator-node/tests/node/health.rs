//! Health checks against real servers on loopback, on tokio's paused clock: up, refusing,
//! flapping (rise and fall honoured at exactly the probes they name), hanging (the timeout),
//! HTTP statuses, UDP replies, deduplication (one probe stream for two pools, counted at the
//! server), and a new check inheriting the state of one with other timings.
//!
//! Time is the test's: a [`Hold`] keeps the clock still while real I/O happens, and each
//! step advances it by exactly one schedule step after the probes already started have
//! finished. So a count is exact ("the third probe after the stop"), never a count within a
//! wall-clock window. Neighbour nudges need namespaces: `node_netns/health_netns.rs` (root).

#[allow(unused_imports)]
use crate::common;

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::sim::{self, Hold, backend, settle};
use crate::common::{HANG, HttpServer, TcpServer, UdpServer};
use stator_config::{
    BackendId, CheckId, HealthCheck, HealthPlan, HttpProbe, Probe, StatusRange, Timing, UdpProbe,
};
use stator_health::{CheckKey, CheckStatus, Runner, Transition};
use tokio::sync::mpsc;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn timing(interval: u64, timeout: u64, rise: u32, fall: u32) -> Timing {
    Timing {
        interval: ms(interval),
        timeout: ms(timeout),
        rise,
        fall,
        jitter: Duration::ZERO,
    }
}

fn check(addr: SocketAddr, probe: Probe, timing: Timing) -> HealthCheck {
    HealthCheck {
        address: addr.ip(),
        port: addr.port(),
        probe,
        timing,
        backends: Vec::new(),
    }
}

/// A plan in which check i decides backend i.
fn plan(checks: Vec<HealthCheck>) -> HealthPlan {
    let by_backend = (0..checks.len()).map(|i| vec![CheckId(i)]).collect();
    let checks = checks
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            c.backends = vec![BackendId(i)];
            c
        })
        .collect();
    HealthPlan { checks, by_backend }
}

fn http(path: &str, first: u16, last: u16) -> Probe {
    Probe::Http(HttpProbe {
        path: path.into(),
        expect_status: StatusRange { first, last },
        host: None,
    })
}

/// A loopback port where nothing listens (TCP): connections are refused.
fn refused_tcp() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A loopback port where nothing listens (UDP): datagrams get ICMP port unreachable.
fn refused_udp() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A runner and its transitions.
struct Checks {
    runner: Runner,
    rx: mpsc::UnboundedReceiver<Transition>,
    seen: Vec<Transition>,
}

impl Checks {
    fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            runner: Runner::new(tx),
            rx,
            seen: Vec::new(),
        }
    }

    fn status(&self, port: u16) -> CheckStatus {
        self.runner
            .board()
            .statuses()
            .into_iter()
            .find(|(k, _)| k.port == port)
            .map(|(_, s)| s)
            .unwrap_or_else(|| panic!("no check of port {port}"))
    }

    fn probes(&self, port: u16) -> u64 {
        let s = self.status(port);
        s.probes_ok + s.probes_failed
    }

    fn total(&self) -> u64 {
        self.runner
            .board()
            .statuses()
            .iter()
            .map(|(_, s)| s.probes_ok + s.probes_failed)
            .sum()
    }

    /// Waits (real time, clock still) until `n` probes in all have finished, then takes the
    /// transitions they caused.
    async fn finished(&mut self, n: u64) -> Vec<Transition> {
        settle(&format!("{n} probes finished"), || self.total() >= n).await;
        assert_eq!(self.total(), n, "no probe beyond the ones the clock allows");
        sim::idle().await;
        let mut new = Vec::new();
        while let Ok(t) = self.rx.try_recv() {
            new.push(t);
        }
        self.seen.extend(new.iter().cloned());
        new
    }
}

/// Advances the paused clock by `d`.
async fn advance(d: Duration) {
    tokio::time::advance(d).await;
}

#[tokio::test(start_paused = true)]
async fn tcp_up_refused_down_and_a_server_that_stops() {
    let _hold = Hold::new();
    let mut server = TcpServer::start("127.0.0.1:0");
    let (up, no) = (server.addr, refused_tcp());
    let mut c = Checks::new();
    let t = timing(100, 50, 2, 3);
    // Two checks: staggered over the interval, one starts at 0 ms, the other at 50 ms.
    c.runner.apply(
        &plan(vec![check(up, Probe::Tcp, t), check(no, Probe::Tcp, t)]),
        vec![],
    );
    c.finished(1).await;
    advance(ms(50)).await;
    c.finished(2).await;
    let first = c.seen.clone();
    assert_eq!(first.len(), 2, "{first:?}");
    let of = |port: u16| first.iter().find(|t| t.key.port == port).unwrap();
    assert!(of(up.port()).up && of(up.port()).probe == 1, "{first:?}");
    assert!(!of(no.port()).up && of(no.port()).probe == 1, "{first:?}");
    assert_eq!(of(no.port()).reason, "connection refused");

    // The server stops; each 50 ms step is one probe of one of the two checks.
    server.stop();
    let ok_before = c.status(up.port()).probes_ok;
    let mut down_at = None;
    for n in 3..=8 {
        advance(ms(50)).await;
        for t in c.finished(n).await {
            assert_eq!(
                t.key.port,
                up.port(),
                "the refusing check stays down: {t:?}"
            );
            assert!(!t.up);
            assert_eq!(t.reason, "connection refused");
            down_at = Some(t.probe);
        }
        if down_at.is_some() {
            break;
        }
    }
    // fall = 3: down at exactly the third failed probe after the last success.
    assert_eq!(down_at, Some(ok_before + 3), "{:?}", c.seen);
    assert_eq!(c.probes(up.port()), ok_before + 3);
    let s = c.status(up.port());
    assert_eq!(
        (s.state, s.transitions_up, s.transitions_down),
        ("down", 1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn flapping_backend_changes_state_exactly_after_rise_and_fall() {
    let _hold = Hold::new();
    // Probe n gets script[n-1]: + is 200, - is 500; after the script, 200.
    let script = "+--+---++-+++";
    let server = HttpServer::start(
        "127.0.0.1:0",
        Arc::new(move |n, _| {
            let ok = script.as_bytes().get(n - 1).is_none_or(|c| *c == b'+');
            (if ok { 200 } else { 500 }, Duration::ZERO)
        }),
    );
    let mut c = Checks::new();
    c.runner.apply(
        &plan(vec![check(
            server.addr,
            http("/", 200, 299),
            timing(100, 80, 3, 2),
        )]),
        vec![],
    );
    for n in 1..=17 {
        if n > 1 {
            advance(ms(100)).await;
        }
        c.finished(n).await;
    }
    let seen: Vec<(u64, bool)> = c.seen.iter().map(|t| (t.probe, t.up)).collect();
    // By hand, rise 3 / fall 2: the first result decides (up at 1); two failures (2, 3) make
    // it down; then +, ---, ++, -, +++: only probes 11-13 are three consecutive successes;
    // 14-17 change nothing.
    assert_eq!(seen, vec![(1, true), (3, false), (13, true)]);
    assert_eq!(c.seen[1].reason, "status 500, expected 200-299");
    assert_eq!(server.requests.load(Ordering::SeqCst), 17);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_http_server_times_out_and_statuses_outside_the_range_fail() {
    let _hold = Hold::new();
    let server = HttpServer::start(
        "127.0.0.1:0",
        Arc::new(|_, path| match path {
            "/hang" => (200, HANG),
            "/slow" => (200, ms(40)),
            "/503" => (503, Duration::ZERO),
            _ => (200, Duration::ZERO),
        }),
    );
    let t = timing(400, 150, 2, 2);
    // Four checks of one server that differ by path and expected statuses, each in a runner
    // of its own so that all four start at 0 ms.
    let probes = [
        http("/hang", 200, 399),
        http("/slow", 200, 399),
        http("/503", 200, 399),
        http("/503", 500, 503),
    ];
    let mut runners: Vec<Checks> = probes
        .into_iter()
        .map(|p| {
            let mut c = Checks::new();
            c.runner
                .apply(&plan(vec![check(server.addr, p, t)]), vec![]);
            c
        })
        .collect();
    // The three that answer are decided on their first probe, at 0 ms of the test's clock
    // (the slow one's 40 ms are real time, within the 150 ms timeout).
    for c in &mut runners[1..] {
        c.finished(1).await;
    }
    let only = |c: &Checks| {
        assert_eq!(c.seen.len(), 1, "{:?}", c.seen);
        c.seen[0].clone()
    };
    assert!(only(&runners[1]).up, "an answer within the timeout");
    let bad = only(&runners[2]);
    assert!(!bad.up);
    assert_eq!(bad.reason, "status 503, expected 200-399");
    assert!(only(&runners[3]).up, "503 is within 500-503");
    // The hanging one has no result until its timeout.
    assert_eq!(runners[0].total(), 0);
    advance(ms(149)).await;
    sim::idle().await;
    assert_eq!(runners[0].total(), 0, "still waiting at 149 ms");
    advance(ms(1)).await;
    runners[0].finished(1).await;
    let hang = only(&runners[0]);
    assert!(!hang.up);
    assert_eq!(hang.reason, "timed out after 150ms");
    let s = runners[0].status(server.addr.port());
    assert_eq!(s.last_duration_seconds, Some(0.15), "exactly the timeout");
}

#[tokio::test(start_paused = true)]
async fn udp_replies_decide() {
    let _hold = Hold::new();
    let pong = UdpServer::start("127.0.0.1:0", |d| {
        let mut r = b"pong:".to_vec();
        r.extend_from_slice(d);
        Some(r)
    });
    let nope = UdpServer::start("127.0.0.1:0", |_| Some(b"nope".to_vec()));
    let silent = UdpServer::start("127.0.0.1:0", |_| None);
    let unreachable = refused_udp();
    let udp = |expect: Option<&[u8]>| {
        Probe::Udp(UdpProbe {
            payload: b"ping".to_vec(),
            expect: expect.map(<[u8]>::to_vec),
        })
    };
    let t = timing(300, 150, 1, 1);
    let checks = [
        check(pong.addr, udp(Some(b"pong:ping")), t),
        check(nope.addr, udp(Some(b"pong")), t),
        check(unreachable, udp(None), t), // nothing listens: ICMP port unreachable
        check(silent.addr, udp(None), t), // listens, never answers
    ];
    let mut runners: Vec<Checks> = checks
        .into_iter()
        .map(|ch| {
            let mut c = Checks::new();
            c.runner.apply(&plan(vec![ch]), vec![]);
            c
        })
        .collect();
    for c in &mut runners[..3] {
        c.finished(1).await;
    }
    assert!(runners[0].seen[0].up, "{:?}", runners[0].seen);
    assert!(!runners[1].seen[0].up);
    assert!(
        runners[1].seen[0].reason.starts_with("unexpected reply"),
        "{}",
        runners[1].seen[0].reason
    );
    assert!(!runners[2].seen[0].up);
    assert_eq!(runners[2].seen[0].reason, "port unreachable");
    assert_eq!(
        runners[3].total(),
        0,
        "the silent one waits for its timeout"
    );
    advance(ms(150)).await;
    runners[3].finished(1).await;
    assert!(!runners[3].seen[0].up);
    assert_eq!(runners[3].seen[0].reason, "timed out after 150ms");
    settle("the silent server got the probe", || {
        silent.received.load(Ordering::SeqCst) == 1
    })
    .await;
    // The same "nope" server is fine for a check that takes any reply.
    let c = &mut runners[1];
    c.runner.apply(
        &plan(vec![check(nope.addr, udp(None), timing(300, 150, 1, 2))]),
        vec![],
    );
    let any = c.finished(1).await;
    assert!(any.len() == 1 && any[0].up, "{any:?}");
}

#[tokio::test(start_paused = true)]
async fn two_pools_one_probe_stream() {
    let _hold = Hold::new();
    let server = TcpServer::start("127.0.0.1:0");
    let b = backend(5);
    // The same backend in two pools with the same check, behind two VIPs.
    let toml = format!(
        r#"
[node]
name = "t"
address_v4 = "{node}"
[dataplane]
interfaces = ["sim0"]
[[pool]]
name = "a"
[pool.health]
interval = "100ms"
timeout = "50ms"
jitter = 0.0
[[pool.backend]]
address = "{b}"
port = 7010
[[pool]]
name = "b"
[pool.health]
interval = "100ms"
timeout = "50ms"
jitter = 0.0
[[pool.backend]]
address = "{b}"
port = 7010
[[vip]]
address = "192.0.2.1"
port = 7010
protocol = "tcp"
pools = ["a"]
[[vip]]
address = "192.0.2.2"
port = 7010
protocol = "tcp"
pools = ["b"]
"#,
        node = sim::NODE
    );
    let config = stator_config::from_toml_str("t.toml", &toml).unwrap();
    let plan = config.health_plan();
    assert_eq!(plan.checks.len(), 1, "deduplicated across the two pools");
    let (tx, _rx) = mpsc::unbounded_channel();
    let routes = sim::routes(&[(b, 7010, server.addr)]);
    let mut runner = Runner::with_routes(tx, routes);
    runner.apply(&plan, vec![]);
    let total = |r: &Runner| -> u64 {
        r.board()
            .statuses()
            .iter()
            .map(|(_, s)| s.probes_ok + s.probes_failed)
            .sum()
    };
    // One second of the test's clock: probes at 0, 100, ..., 1000 ms.
    for n in 1..=11u64 {
        if n > 1 {
            advance(ms(100)).await;
        }
        settle("the next probe", || total(&runner) >= n).await;
    }
    let statuses = runner.board().statuses();
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0].1.probes_ok, 11, "{:?}", statuses[0].1);
    settle("the server to accept them", || {
        server.accepted.load(Ordering::SeqCst) >= 11
    })
    .await;
    sim::idle().await;
    let at_server = server.accepted.load(Ordering::SeqCst);
    println!(
        "one backend in two pools, interval 100ms, 1 s of test time: {at_server} probes at the server"
    );
    assert_eq!(at_server, 11, "one stream, not two");
}

#[tokio::test(start_paused = true)]
async fn a_new_check_with_other_timings_inherits_the_state() {
    let _hold = Hold::new();
    let server = TcpServer::start("127.0.0.1:0");
    let mut c = Checks::new();
    c.runner.apply(
        &plan(vec![check(server.addr, Probe::Tcp, timing(100, 50, 2, 2))]),
        vec![],
    );
    let first = c.finished(1).await;
    assert!(first[0].up);
    let slower = check(server.addr, Probe::Tcp, timing(300, 50, 2, 2));
    let key = CheckKey::of(&slower);
    assert_eq!(
        c.runner.prospective(&key),
        Some(true),
        "same target and method"
    );
    c.runner.apply(&plan(vec![slower]), vec![]);
    assert_eq!(
        c.runner.state(&key),
        Some(true),
        "up from the start, no unknown phase"
    );
    // The new check's first three probes (0, 300, 600 ms): no transition.
    for n in 1..=3 {
        if n > 1 {
            advance(ms(300)).await;
        }
        let t = c.finished(n).await;
        assert!(t.is_empty(), "no transition: {t:?}");
    }
    assert_eq!(c.status(server.addr.port()).probes_ok, 3);
}
