//! The proxy's flood bounds on loopback, each refusal under its reason: UDP sessions per
//! source (and per prefix) and in rate; a spent descriptor budget that refuses new sessions,
//! reclaims an unreplied one once it has waited a second and never an answered one; TCP
//! connections per source and by the budget, the budget given back as connections close;
//! an HTTP request whose new upstream connection has no descriptor gets 503. Unprivileged
//! (127.0.0.0/8 gives the sources); the floods themselves, against a `stator run` under a
//! descriptor limit, are `crates/stator/tests/flood_udp.rs` and `flood_tcp.rs`.

mod common;
mod udp_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use stator_proxy::{
    ClientErrorKind, DescriptorBudget, ListenerSpec, ListenerStats, Protocol, Proxy,
    SourcePrefixes, UdpDrop, UpstreamSpec,
};
use udp_common::{Echo, ask, eventually};

const WAIT: Duration = Duration::from_secs(5);
/// How long a client waits for an answer that should not come.
const SHORT: Duration = Duration::from_millis(300);

/// A proxy with one listener drawing from `budget`: it, the listener's address and counters.
fn start(
    spec: ListenerSpec,
    budget: &Arc<DescriptorBudget>,
) -> (Proxy, SocketAddr, Arc<ListenerStats>) {
    let name = spec.name.clone();
    let mut p = Proxy::new("test", None).with_budget(Arc::clone(budget));
    p.apply(vec![spec]).unwrap();
    let addr = p.local_addr(&name).unwrap();
    let stats = Arc::clone(&p.listeners()[0].stats);
    (p, addr, stats)
}

fn udp_spec(name: &str, upstream: UpstreamSpec) -> ListenerSpec {
    let mut s = ListenerSpec::new(
        name,
        "127.0.0.1:0".parse().unwrap(),
        Protocol::Udp,
        vec![upstream],
    );
    s.workers = 1;
    s
}

fn client(ip: &str) -> UdpSocket {
    UdpSocket::bind(format!("{ip}:0")).unwrap()
}

#[test]
fn udp_sessions_are_bounded_per_source_and_prefix() {
    let echo = Echo::start("e", "127.0.0.1:0");
    let mut s = udp_spec("per-source", echo.upstream());
    s.udp.max_sessions_per_source = 3;
    let budget = Arc::default();
    let (_p, addr, stats) = start(s, &budget);
    // one address, five ports: three sessions, two refused
    let socks: Vec<UdpSocket> = (0..5).map(|_| client("127.0.2.1")).collect();
    let answered: Vec<bool> = socks
        .iter()
        .map(|c| ask(c, addr, b"hi", SHORT).is_some())
        .collect();
    assert_eq!(answered, [true, true, true, false, false]);
    assert_eq!(stats.udp.drops(UdpDrop::SourceLimit), 2);
    // another source is not affected, and the first one's sessions go on
    assert!(ask(&client("127.0.2.2"), addr, b"hi", WAIT).is_some());
    assert!(ask(&socks[0], addr, b"again", WAIT).is_some());
    assert_eq!(stats.udp.drops(UdpDrop::SourceLimit), 2);

    // a /24 is one source: two addresses of it share the limit
    let mut s = udp_spec("per-prefix", echo.upstream());
    s.udp.max_sessions_per_source = 2;
    s.source_prefixes = SourcePrefixes { v4: 24, v6: 64 };
    let (_p, addr, stats) = start(s, &budget);
    assert!(ask(&client("127.0.3.1"), addr, b"a", WAIT).is_some());
    assert!(ask(&client("127.0.3.2"), addr, b"b", WAIT).is_some());
    assert!(ask(&client("127.0.3.3"), addr, b"c", SHORT).is_none());
    assert!(ask(&client("127.0.4.1"), addr, b"d", WAIT).is_some());
    assert_eq!(stats.udp.drops(UdpDrop::SourceLimit), 1);
}

#[test]
fn new_udp_sessions_are_bounded_in_rate_and_existing_ones_go_on() {
    let echo = Echo::start("e", "127.0.0.1:0");
    let mut s = udp_spec("rate", echo.upstream());
    s.udp.session_rate = 1;
    s.udp.session_burst = 3;
    let (_p, addr, stats) = start(s, &Arc::default());
    // six new clients at once: the burst of three gets sessions
    let socks: Vec<UdpSocket> = (1..=6).map(|i| client(&format!("127.0.5.{i}"))).collect();
    for c in &socks {
        c.send_to(b"hi", addr).unwrap();
    }
    let answered = socks
        .iter()
        .filter(|c| {
            c.set_read_timeout(Some(SHORT)).unwrap();
            c.recv(&mut [0u8; 64]).is_ok()
        })
        .count();
    assert_eq!(answered, 3);
    assert_eq!(stats.udp.drops(UdpDrop::SessionRate), 3);
    assert_eq!(stats.connections.load(Relaxed), 3);
    // the sessions opened are answered however fast they talk
    let first = &socks[0];
    let mut buf = [0u8; 64];
    for i in 0..20 {
        first.send_to(format!("{i}").as_bytes(), addr).unwrap();
        first.set_read_timeout(Some(WAIT)).unwrap();
        let (n, _) = first.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], format!("e|{i}").as_bytes());
    }
}

#[test]
fn a_spent_budget_refuses_then_reclaims_an_unreplied_session_never_an_answered_one() {
    // a backend that never answers: every session to it stays unreplied
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let upstream = UpstreamSpec {
        name: "silent".into(),
        addr: silent.local_addr().unwrap(),
        weight: 1,
    };
    let budget = Arc::new(DescriptorBudget::new(1));
    let (_p, addr, stats) = start(udp_spec("silent", upstream), &budget);
    let (a, b) = (client("127.0.6.1"), client("127.0.6.2"));
    a.send_to(b"a", addr).unwrap();
    assert!(eventually(WAIT, || budget.used() == 1));
    // too young to give up: refused
    b.send_to(b"b1", addr).unwrap();
    assert!(eventually(WAIT, || stats.udp.drops(UdpDrop::Descriptors) == 1));
    assert_eq!(stats.udp.sessions_reclaimed.load(Relaxed), 0);
    // a second later it has waited long enough for an answer: it is ended, and once its
    // socket has closed its descriptor goes to b's next datagram (b, like any UDP client,
    // asks again)
    std::thread::sleep(Duration::from_millis(1100));
    let mut i = 0;
    assert!(eventually(WAIT, || {
        i += 1;
        b.send_to(format!("b{i}").as_bytes(), addr).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        stats.connections.load(Relaxed) == 2
    }));
    assert_eq!(stats.udp.sessions_reclaimed.load(Relaxed), 1);
    let mut got = Vec::new();
    silent.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = [0u8; 64];
    while got.len() < 2 {
        let (n, from) = silent.recv_from(&mut buf).unwrap();
        got.push((from, String::from_utf8_lossy(&buf[..n]).into_owned()));
    }
    assert_eq!(got[0].1, "a");
    assert!(got[1].1.starts_with('b') && got[1].0 != got[0].0, "{got:?}");
    assert_eq!(budget.used(), 1);
    assert!(budget.peak() <= 1);

    // an answered session keeps its descriptor however long the others wait
    let echo = Echo::start("e", "127.0.0.1:0");
    let budget = Arc::new(DescriptorBudget::new(1));
    let (_p, addr, stats) = start(udp_spec("answered", echo.upstream()), &budget);
    let (a, b) = (client("127.0.7.1"), client("127.0.7.2"));
    assert!(ask(&a, addr, b"a", WAIT).is_some());
    std::thread::sleep(Duration::from_millis(1100));
    assert!(ask(&b, addr, b"b", SHORT).is_none());
    assert_eq!(stats.udp.drops(UdpDrop::Descriptors), 1);
    assert_eq!(stats.udp.sessions_reclaimed.load(Relaxed), 0);
    assert!(ask(&a, addr, b"a again", WAIT).is_some());
}

/// A TCP echo server on 127.0.0.1: a thread per connection (a few here).
fn tcp_echo() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().take(64) {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// A connection from `ip` to `addr`, and whether it is served: an echo comes back (`true`)
/// or the proxy closes it (`false`).
fn tcp_client(ip: &str, addr: SocketAddr) -> (TcpStream, bool) {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::new(ip.parse().unwrap(), 0).into())
        .unwrap();
    s.connect(&addr.into()).unwrap();
    let mut s: TcpStream = s.into();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let served = s.write_all(b"ping").is_ok() && {
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).is_ok() && &buf == b"ping"
    };
    (s, served)
}

#[test]
fn tcp_connections_are_bounded_per_source_and_by_the_budget() {
    let echo = tcp_echo();
    let upstream = UpstreamSpec {
        name: "echo".into(),
        addr: echo,
        weight: 1,
    };
    let mut s = ListenerSpec::new(
        "tcp",
        "127.0.0.1:0".parse().unwrap(),
        Protocol::Tcp,
        vec![upstream],
    );
    s.max_connections_per_source = 2;
    // three connections' worth: two descriptors each
    let budget = Arc::new(DescriptorBudget::new(6));
    let (_p, addr, stats) = start(s, &budget);
    let (a1, ok1) = tcp_client("127.0.8.1", addr);
    let (_a2, ok2) = tcp_client("127.0.8.1", addr);
    let (_a3, ok3) = tcp_client("127.0.8.1", addr);
    assert_eq!((ok1, ok2, ok3), (true, true, false));
    assert_eq!(stats.client_errors(ClientErrorKind::SourceLimit), 1);
    let (_b, ok) = tcp_client("127.0.8.2", addr);
    assert!(ok);
    assert_eq!(budget.used(), 6);
    let (_c, ok) = tcp_client("127.0.8.3", addr);
    assert!(!ok, "the budget is spent");
    assert_eq!(stats.client_errors(ClientErrorKind::Descriptors), 1);
    // a connection that ends gives its two back
    drop(a1);
    assert!(eventually(WAIT, || budget.used() == 4));
    let (_d, ok) = tcp_client("127.0.8.3", addr);
    assert!(ok);
    assert_eq!(budget.peak(), 6);
}

#[test]
fn an_http_request_without_a_descriptor_for_its_upstream_gets_503() {
    let backend = common::Backend::start("b");
    let spec = ListenerSpec::new(
        "http",
        "127.0.0.1:0".parse().unwrap(),
        Protocol::Http,
        vec![backend.upstream()],
    );
    // the client's connection takes the only descriptor
    let budget = Arc::new(DescriptorBudget::new(1));
    let (_p, addr, stats) = start(spec, &budget);
    let mut c = common::Client::connect(addr);
    let (status, _, _) = c.get("/");
    assert_eq!(status, 503);
    assert_eq!(stats.client_errors(ClientErrorKind::Descriptors), 1);
    // one more: the upstream connection opens, and stays in the pool with its descriptor
    budget.set_capacity(2);
    let (status, _, body) = c.get("/");
    assert_eq!((status, body.as_slice()), (200, b"b\n".as_slice()));
    assert_eq!(budget.used(), 2);
}
