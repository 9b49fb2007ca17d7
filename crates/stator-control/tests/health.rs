//! Health checks against real servers started by each test in its own network namespace:
//! up, refusing, flapping (rise and fall honoured exactly), slow (timeout), HTTP statuses, UDP
//! replies, deduplication (one probe stream for two pools, counted at the server), and
//! neighbour nudges for unchecked backends. Needs root. Timings are printed (--nocapture);
//! the bounds asserted are functional (generous multiples of the configured intervals).
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

mod common;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{HttpServer, Lab, TcpServer, UdpServer, runtime};
use stator_config::{
    BackendId, CheckId, HealthCheck, HealthPlan, HttpProbe, Probe, StatusRange, Timing, UdpProbe,
};
use stator_control::health::{CheckKey, Runner, Transition};
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

fn check(addr: &str, port: u16, probe: Probe, timing: Timing) -> HealthCheck {
    HealthCheck {
        address: addr.parse().unwrap(),
        port,
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

/// Receives transitions until `n` arrived or `timeout` passed; each with the time since
/// `start`.
async fn collect(
    rx: &mut mpsc::UnboundedReceiver<Transition>,
    n: usize,
    start: Instant,
    timeout: Duration,
) -> Vec<(Transition, Duration)> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::from_std(start + timeout);
    while out.len() < n {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(t)) => out.push((t, start.elapsed())),
            _ => break,
        }
    }
    out
}

fn of(ts: &[(Transition, Duration)], port: u16) -> Vec<&(Transition, Duration)> {
    ts.iter().filter(|(t, _)| t.key.port == port).collect()
}

#[test]
fn tcp_up_refused_down_and_a_server_that_stops() {
    let lab = Lab::new("tcp", 211);
    let (a, b) = (lab.addr(2), lab.addr(3));
    lab.run(move || {
        let mut server = TcpServer::start(&format!("{a}:7001"));
        let rt = runtime();
        rt.block_on(async {
            let (tx, mut rx) = mpsc::unbounded_channel();
            let mut runner = Runner::new(tx);
            let t = timing(100, 50, 2, 3);
            let start = Instant::now();
            runner.apply(
                &plan(vec![
                    check(&a, 7001, Probe::Tcp, t),
                    check(&b, 7002, Probe::Tcp, t),
                ]),
                vec![],
            );
            let first = collect(&mut rx, 2, start, Duration::from_secs(3)).await;
            let up = of(&first, 7001);
            let down = of(&first, 7002);
            assert!(up[0].0.up && up[0].0.probe == 1, "{first:?}");
            assert!(!down[0].0.up && down[0].0.probe == 1, "{first:?}");
            assert_eq!(down[0].0.reason, "connection refused");
            println!(
                "first results: up after {:?}, refused after {:?}",
                up[0].1, down[0].1
            );
            assert!(
                up[0].1 < ms(500) && down[0].1 < ms(500),
                "first results within the stagger window"
            );

            let stopped = Instant::now();
            tokio::task::block_in_place(|| server.stop());
            let after = collect(&mut rx, 1, stopped, Duration::from_secs(3)).await;
            let (t, took) = &after[0];
            assert!(!t.up && t.key.port == 7001, "{after:?}");
            assert_eq!(t.reason, "connection refused");
            println!("stopped server detected down after {took:?} (fall 3 x interval 100ms)");
            // Three failed probes: at least two intervals after the stop, at most four.
            assert!(*took >= ms(200) && *took < ms(1000), "{took:?}");
            let statuses = runner.board().statuses();
            let s = &statuses.iter().find(|(k, _)| k.port == 7001).unwrap().1;
            assert_eq!(
                (s.state, s.transitions_up, s.transitions_down),
                ("down", 1, 1)
            );
        });
    });
}

#[test]
fn flapping_backend_changes_state_exactly_after_rise_and_fall() {
    let lab = Lab::new("flap", 212);
    let a = lab.addr(2);
    lab.run(move || {
        // Probe n gets script[n-1]: + is 200, - is 500; after the script, 200.
        let script = "+--+---++-+++";
        let server = HttpServer::start(
            &format!("{a}:7003"),
            Arc::new(move |n, _| {
                let ok = script.as_bytes().get(n - 1).is_none_or(|c| *c == b'+');
                (if ok { 200 } else { 500 }, Duration::ZERO)
            }),
        );
        let rt = runtime();
        rt.block_on(async {
            let (tx, mut rx) = mpsc::unbounded_channel();
            let mut runner = Runner::new(tx);
            runner.apply(
                &plan(vec![check(
                    &a,
                    7003,
                    http("/", 200, 299),
                    timing(100, 80, 3, 2),
                )]),
                vec![],
            );
            let start = Instant::now();
            let got = collect(&mut rx, 3, start, Duration::from_secs(5)).await;
            let seen: Vec<(u64, bool)> = got.iter().map(|(t, _)| (t.probe, t.up)).collect();
            // By hand, rise 3 / fall 2: the first result decides (up at 1); two failures
            // (2, 3) make it down; then +, ---, ++, -, +++: only probes 11-13 are three
            // consecutive successes.
            assert_eq!(seen, vec![(1, true), (3, false), (13, true)]);
            assert_eq!(got[1].0.reason, "status 500, expected 200-299");
            tokio::time::sleep(ms(350)).await;
            let more = collect(&mut rx, 1, Instant::now(), ms(300)).await;
            assert!(more.is_empty(), "no change while it stays up: {more:?}");
            println!(
                "flapping: transitions at probes {seen:?}, server saw {} requests",
                server.requests.load(std::sync::atomic::Ordering::SeqCst)
            );
        });
    });
}

#[test]
fn slow_http_times_out_and_statuses_outside_the_range_fail() {
    let lab = Lab::new("slow", 213);
    let a = lab.addr(2);
    lab.run(move || {
        let _server = HttpServer::start(
            &format!("{a}:7004"),
            Arc::new(|_, path| match path {
                "/slow" => (200, ms(600)),
                "/bit-slow" => (200, ms(40)),
                "/503" => (503, Duration::ZERO),
                _ => (200, Duration::ZERO),
            }),
        );
        let rt = runtime();
        rt.block_on(async {
            let (tx, mut rx) = mpsc::unbounded_channel();
            let mut runner = Runner::new(tx);
            let t = timing(400, 150, 2, 2);
            // Four checks of one server that differ by path and expected statuses.
            let checks = vec![
                check(&a, 7004, http("/slow", 200, 399), t),
                check(&a, 7004, http("/bit-slow", 200, 399), t),
                check(&a, 7004, http("/503", 200, 399), t),
                check(&a, 7004, http("/503", 500, 503), t),
            ];
            let start = Instant::now();
            runner.apply(&plan(checks), vec![]);
            let got = collect(&mut rx, 4, start, Duration::from_secs(3)).await;
            let by_path = |p: &str, first: u16| {
                got.iter()
                    .find(|(t, _)| matches!(&t.key.probe, Probe::Http(h) if h.path == p && h.expect_status.first == first))
                    .unwrap_or_else(|| panic!("no transition for {p}: {got:?}"))
            };
            let (slow, slow_at) = by_path("/slow", 200);
            assert!(!slow.up);
            assert_eq!(slow.reason, "timed out after 150ms");
            let (bit, _) = by_path("/bit-slow", 200);
            assert!(bit.up, "40 ms is within the 150 ms timeout");
            let (bad, _) = by_path("/503", 200);
            assert!(!bad.up);
            assert_eq!(bad.reason, "status 503, expected 200-399");
            let (ranged, _) = by_path("/503", 500);
            assert!(ranged.up, "503 is within 500-503");
            // The slow check's first probe starts within the stagger window (at most 3/4 of
            // the 400 ms interval for the first of four) and fails at its timeout.
            println!("slow check failed after {slow_at:?} (timeout 150ms)");
            assert!(*slow_at >= ms(150) && *slow_at < ms(1000), "{slow_at:?}");
        });
    });
}

#[test]
fn udp_replies_decide() {
    let lab = Lab::new("udp", 214);
    let a = lab.addr(2);
    lab.run(move || {
        let _pong = UdpServer::start(&format!("{a}:7005"), |d| {
            let mut r = b"pong:".to_vec();
            r.extend_from_slice(d);
            Some(r)
        });
        let _nope = UdpServer::start(&format!("{a}:7006"), |_| Some(b"nope".to_vec()));
        let _silent = UdpServer::start(&format!("{a}:7008"), |_| None);
        let rt = runtime();
        rt.block_on(async {
            let (tx, mut rx) = mpsc::unbounded_channel();
            let mut runner = Runner::new(tx);
            let udp = |expect: Option<&[u8]>| {
                Probe::Udp(UdpProbe {
                    payload: b"ping".to_vec(),
                    expect: expect.map(<[u8]>::to_vec),
                })
            };
            let t = timing(300, 150, 1, 1);
            let start = Instant::now();
            runner.apply(
                &plan(vec![
                    check(&a, 7005, udp(Some(b"pong:ping")), t),
                    check(&a, 7006, udp(Some(b"pong")), t),
                    check(&a, 7007, udp(None), t), // nothing listens: ICMP port unreachable
                    check(&a, 7008, udp(None), t), // listens, never answers
                ]),
                vec![],
            );
            let got = collect(&mut rx, 4, start, Duration::from_secs(3)).await;
            let on = |port| &of(&got, port)[0].0;
            assert!(on(7005).up, "{got:?}");
            assert!(!on(7006).up);
            assert!(
                on(7006).reason.starts_with("unexpected reply"),
                "{}",
                on(7006).reason
            );
            assert!(!on(7007).up);
            assert_eq!(on(7007).reason, "port unreachable");
            assert!(!on(7008).up);
            assert_eq!(on(7008).reason, "timed out after 150ms");
            // The same "nope" server is fine for a check that takes any reply.
            runner.apply(
                &plan(vec![check(&a, 7006, udp(None), timing(300, 150, 1, 2))]),
                vec![],
            );
            let any = collect(&mut rx, 1, Instant::now(), Duration::from_secs(2)).await;
            assert!(any[0].0.up, "{any:?}");
        });
    });
}

#[test]
fn two_pools_one_probe_stream() {
    let lab = Lab::new("dedup", 215);
    let (node, backend) = (lab.addr(1), lab.addr(5));
    lab.run(move || {
        let server = TcpServer::start(&format!("{backend}:7010"));
        // The same backend in two pools with the same check, behind two VIPs; one more
        // backend only in the second pool.
        let toml = format!(
            r#"
[node]
name = "t"
address_v4 = "{node}"
[dataplane]
interfaces = ["d0"]
[[pool]]
name = "a"
[pool.health]
interval = "100ms"
timeout = "50ms"
jitter = 0.0
[[pool.backend]]
address = "{backend}"
port = 7010
[[pool]]
name = "b"
[pool.health]
interval = "100ms"
timeout = "50ms"
jitter = 0.0
[[pool.backend]]
address = "{backend}"
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
"#
        );
        let config = stator_config::from_toml_str("t.toml", &toml).unwrap();
        let plan = config.health_plan();
        assert_eq!(plan.checks.len(), 1, "deduplicated across the two pools");
        let rt = runtime();
        rt.block_on(async {
            let (tx, _rx) = mpsc::unbounded_channel();
            let mut runner = Runner::new(tx);
            runner.apply(&plan, vec![]);
            tokio::time::sleep(ms(1050)).await;
            let probes = server.accepted.load(std::sync::atomic::Ordering::SeqCst);
            println!(
                "one backend in two pools, interval 100ms, 1.05s: {probes} probes at the server"
            );
            assert!(
                (8..=12).contains(&probes),
                "one stream of ~10 probes, got {probes}"
            );
            let statuses = runner.board().statuses();
            assert_eq!(statuses.len(), 1);
            assert_eq!(statuses[0].1.probes_ok as usize, probes);
        });
    });
}

#[test]
fn unchecked_backends_get_their_neighbour_resolved() {
    let lab = Lab::new("neigh", 216);
    let peer = stator_lab::netns::Netns::create(&format!("{}p", lab.ns.name())).unwrap();
    stator_lab::netns::veth(&lab.ns, "v0", &peer, "v1").unwrap();
    lab.ns.addr_add("v0", "10.217.0.1/24").unwrap();
    peer.addr_add("v1", "10.217.0.2/24").unwrap();
    let backend: IpAddr = "10.217.0.2".parse().unwrap();
    let ns = lab.ns.clone();
    let neigh = move || {
        ns.ip(["neigh", "show", "10.217.0.2", "dev", "v0"])
            .unwrap_or_default()
    };
    assert!(!neigh().contains("lladdr"), "no entry before: {}", neigh());
    let took = lab.run(move || {
        let rt = runtime();
        rt.block_on(async move {
            let (tx, _rx) = mpsc::unbounded_channel();
            let mut runner = Runner::new(tx);
            let start = Instant::now();
            runner.apply(&HealthPlan::default(), vec![backend]);
            tokio::time::sleep(ms(300)).await;
            start.elapsed()
        })
    });
    let entry = neigh();
    println!(
        "neighbour of an unchecked backend after {took:?}: {}",
        entry.trim()
    );
    assert!(entry.contains("lladdr"), "the nudge resolved it: {entry:?}");
    let _ = peer.delete();
}

#[test]
fn a_new_check_with_other_timings_inherits_the_state() {
    let lab = Lab::new("inherit", 218);
    let a = lab.addr(2);
    lab.run(move || {
        let _server = TcpServer::start(&format!("{a}:7011"));
        let rt = runtime();
        rt.block_on(async {
            let (tx, mut rx) = mpsc::unbounded_channel();
            let mut runner = Runner::new(tx);
            runner.apply(
                &plan(vec![check(&a, 7011, Probe::Tcp, timing(100, 50, 2, 2))]),
                vec![],
            );
            let first = collect(&mut rx, 1, Instant::now(), Duration::from_secs(2)).await;
            assert!(first[0].0.up);
            let slower = check(&a, 7011, Probe::Tcp, timing(300, 50, 2, 2));
            let key = CheckKey::of(&slower);
            assert_eq!(
                runner.prospective(&key),
                Some(true),
                "same target and method"
            );
            runner.apply(&plan(vec![slower]), vec![]);
            assert_eq!(
                runner.state(&key),
                Some(true),
                "up from the start, no unknown phase"
            );
            let none = collect(&mut rx, 1, Instant::now(), ms(500)).await;
            assert!(none.is_empty(), "no transition: {none:?}");
        });
    });
}
