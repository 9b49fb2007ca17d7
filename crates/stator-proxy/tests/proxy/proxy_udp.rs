//! The UDP listener on loopback (127.0.0.0/8 gives many client addresses without a
//! namespace): replies reach the client that asked, sessions expire and end on the
//! `responses` hint, a backend that goes down gets no new session, a flood of source ports is
//! bounded and counted, PROXY v2 names the client and fails closed (no datagram without the
//! header before it went, no header of the client's own). Unprivileged.

#[allow(unused_imports)]
use crate::udp_common;

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::udp_common::{Echo, ask, eventually};
use stator_proxy::{ListenerSpec, ListenerStats, Protocol, Proxy, UdpDrop, UpstreamState};

fn udp_proxy(spec: ListenerSpec) -> (Proxy, SocketAddr, Arc<ListenerStats>) {
    let name = spec.name.clone();
    let mut p = Proxy::new("test", None);
    p.apply(vec![spec]).unwrap();
    let addr = p.local_addr(&name).unwrap();
    let stats = Arc::clone(&p.listeners()[0].stats);
    (p, addr, stats)
}

fn spec(name: &str, echoes: &[&Echo]) -> ListenerSpec {
    ListenerSpec::new(
        name,
        "127.0.0.1:0".parse().unwrap(),
        Protocol::Udp,
        echoes.iter().map(|e| e.upstream()).collect(),
    )
}

fn client(ip: &str) -> UdpSocket {
    UdpSocket::bind(format!("{ip}:0")).unwrap()
}

const WAIT: Duration = Duration::from_secs(5);

#[test]
fn every_reply_reaches_the_client_that_asked() {
    let echoes: Vec<Echo> = (0..3)
        .map(|i| Echo::start(&format!("e{i}"), "127.0.0.1:0"))
        .collect();
    let mut s = spec("rr", &echoes.iter().collect::<Vec<_>>());
    s.workers = 2;
    let (_p, addr, stats) = udp_proxy(s);
    let threads: Vec<_> = (1..=64u8)
        .map(|c| {
            std::thread::spawn(move || {
                let sock = client(&format!("127.0.1.{c}"));
                let (mut mismatched, mut backends) = (0, BTreeMap::new());
                for seq in 0..20 {
                    let msg = format!("c{c}-{seq}");
                    let reply = ask(&sock, addr, msg.as_bytes(), WAIT).expect("a reply");
                    let text = String::from_utf8(reply).unwrap();
                    match text.split_once('|') {
                        Some((b, m)) if m == msg => {
                            *backends.entry(b.to_string()).or_insert(0) += 1
                        }
                        _ => mismatched += 1,
                    }
                }
                (mismatched, backends.len())
            })
        })
        .collect();
    for t in threads {
        let (mismatched, backends) = t.join().unwrap();
        assert_eq!(mismatched, 0);
        assert_eq!(
            backends, 1,
            "one client address and port, one session, one backend"
        );
    }
    // The worker counts a reply after its send returns, which may be after the client has
    // read it: wait for the count, then check it exactly.
    eventually(WAIT, || stats.udp.datagrams_out.load(Relaxed) >= 64 * 20);
    assert_eq!(stats.udp.datagrams_in.load(Relaxed), 64 * 20);
    assert_eq!(stats.udp.datagrams_out.load(Relaxed), 64 * 20);
    assert_eq!(stats.connections.load(Relaxed), 64, "a session per client");
    for why in UdpDrop::ALL {
        assert_eq!(stats.udp.drops(why), 0, "{}", why.label());
    }
}

#[test]
fn sessions_expire_after_the_idle_timeout() {
    let e = Echo::start("e", "127.0.0.1:0");
    let mut s = spec("idle", &[&e]);
    s.timeouts.idle = Duration::from_millis(200);
    let (_p, addr, stats) = udp_proxy(s);
    let c = client("127.0.0.1");
    assert!(ask(&c, addr, b"one", WAIT).is_some());
    assert_eq!(stats.active.load(Relaxed), 1);
    assert!(
        eventually(WAIT, || stats.active.load(Relaxed) == 0),
        "the idle session ends"
    );
    assert_eq!(stats.udp.sessions_expired.load(Relaxed), 1);
    // the same client again: a new session, from a new upstream port
    assert!(ask(&c, addr, b"two", WAIT).is_some());
    assert_eq!(stats.connections.load(Relaxed), 2);
    assert_eq!(e.peers.lock().unwrap().len(), 2);
}

#[test]
fn the_responses_hint_ends_each_session_at_its_reply() {
    let e = Echo::start("e", "127.0.0.1:0");
    let mut s = spec("dns", &[&e]);
    s.udp.responses = Some(1);
    let (_p, addr, stats) = udp_proxy(s);
    let c = client("127.0.0.1");
    for i in 0..50 {
        let reply = ask(&c, addr, format!("q{i}").as_bytes(), WAIT).expect("a reply");
        assert_eq!(reply, format!("e|q{i}").into_bytes());
        assert!(eventually(WAIT, || stats.active.load(Relaxed) == 0));
    }
    assert_eq!(stats.connections.load(Relaxed), 50, "one session per query");
    assert_eq!(stats.udp.sessions_completed.load(Relaxed), 50);
}

#[test]
fn a_backend_that_goes_down_gets_no_new_session() {
    let (a, b) = (
        Echo::start("a", "127.0.0.1:0"),
        Echo::start("b", "127.0.0.1:0"),
    );
    let (p, addr, stats) = udp_proxy(spec("down", &[&a, &b]));
    // sessions on both
    let before: Vec<UdpSocket> = (1..=20u8)
        .map(|i| client(&format!("127.0.2.{i}")))
        .collect();
    for c in &before {
        assert!(ask(c, addr, b"x", WAIT).is_some());
    }
    assert!(
        a.count() > 0 && b.count() > 0,
        "both served: {} {}",
        a.count(),
        b.count()
    );
    p.set_states("down", &[UpstreamState::Absent, UpstreamState::Usable])
        .unwrap();
    let a_before = a.count();
    for i in 1..=50u8 {
        let c = client(&format!("127.0.3.{i}"));
        assert_eq!(ask(&c, addr, b"y", WAIT).unwrap(), b"b|y");
    }
    // old sessions on the down backend move on their next datagram
    for c in &before {
        assert_eq!(ask(c, addr, b"z", WAIT).unwrap(), b"b|z");
    }
    assert_eq!(a.count(), a_before, "the down backend got nothing more");
    assert_eq!(stats.udp.drops(UdpDrop::NoUpstream), 0);
    // and with no usable backend at all, datagrams are dropped and counted
    p.set_states("down", &[UpstreamState::Absent, UpstreamState::Absent])
        .unwrap();
    let c = client("127.0.4.1");
    assert!(ask(&c, addr, b"w", Duration::from_millis(300)).is_none());
    assert!(eventually(WAIT, || stats.udp.drops(UdpDrop::NoUpstream) == 1));
}

#[test]
fn a_flood_of_source_ports_is_bounded_and_counted() {
    let e = Echo::start("e", "127.0.0.1:0");
    let mut s = spec("flood", &[&e]);
    s.udp.max_sessions = 64;
    let (_p, addr, stats) = udp_proxy(s);
    let mut max_active = 0;
    for round in 0..20 {
        // 100 new clients, one datagram each, no waiting (an address of their own, so that a
        // port the kernel hands out again cannot meet an earlier client's session)
        let socks: Vec<UdpSocket> = (0..100)
            .map(|i| client(&format!("127.6.{round}.{}", i + 1)))
            .collect();
        for (i, c) in socks.iter().enumerate() {
            c.send_to(format!("f{round}-{i}").as_bytes(), addr).unwrap();
        }
        max_active = max_active.max(stats.active.load(Relaxed));
        assert!(stats.active.load(Relaxed) <= 64, "bounded");
    }
    // every datagram is either read or counted as dropped where it was dropped
    let overflow = || stats.udp.drops(UdpDrop::SocketOverflow);
    assert!(
        eventually(WAIT, || stats.udp.datagrams_in.load(Relaxed) + overflow()
            == 2000),
        "read {} + dropped by the kernel {} = 2000",
        stats.udp.datagrams_in.load(Relaxed),
        overflow()
    );
    let read = stats.udp.datagrams_in.load(Relaxed);
    assert!(stats.active.load(Relaxed) <= 64);
    assert_eq!(
        stats.connections.load(Relaxed),
        read,
        "a session per source port read"
    );
    assert_eq!(
        stats.session_evictions.load(Relaxed),
        read.saturating_sub(64)
    );
    println!(
        "flood: 2000 source ports, a table of 64: {read} read ({} sessions evicted, at most \
         {max_active} open), {} dropped by the kernel at the listening socket",
        stats.session_evictions.load(Relaxed),
        overflow()
    );
    // still serving
    let c = client("127.0.0.1");
    assert_eq!(ask(&c, addr, b"ok", WAIT).unwrap(), b"e|ok");
}

#[test]
fn proxy_protocol_v2_names_the_client_on_the_first_datagram() {
    let e = Echo::start("e", "127.0.0.1:0");
    let mut s = spec("ppv2", &[&e]);
    s.udp.proxy_protocol = true;
    let (_p, addr, _stats) = udp_proxy(s);
    let c = client("127.0.5.9");
    let me = c.local_addr().unwrap();
    let first = String::from_utf8(ask(&c, addr, b"hello", WAIT).unwrap()).unwrap();
    assert_eq!(first, format!("e|{me}|hello"));
    let second = String::from_utf8(ask(&c, addr, b"again", WAIT).unwrap()).unwrap();
    assert_eq!(
        second, "e|again",
        "only the first datagram of a session has the header"
    );
}

#[test]
fn proxy_protocol_v2_waits_for_a_header_that_could_not_be_sent() {
    let e = Echo::start("e", "127.0.0.1:0");
    let mut s = spec("ppv2-first", &[&e]);
    s.udp.proxy_protocol = true;
    let (_p, addr, stats) = udp_proxy(s);
    let c = client("127.0.5.10");
    let me = c.local_addr().unwrap();
    // The largest IPv4 UDP payload is 65,507 bytes: with the 28-byte header in front, this
    // first datagram cannot be sent upstream.
    c.send_to(&vec![b'x'; 65_490], addr).unwrap();
    assert!(eventually(WAIT, || stats.udp.drops(UdpDrop::UpstreamSend) == 1));
    assert_eq!(e.count(), 0);
    // The session's next datagram carries the header in its place — never goes bare.
    let next = String::from_utf8(ask(&c, addr, b"small", WAIT).unwrap()).unwrap();
    assert_eq!(next, format!("e|{me}|small"));
    let then = String::from_utf8(ask(&c, addr, b"then", WAIT).unwrap()).unwrap();
    assert_eq!(then, "e|then", "once sent, the header is not repeated");
    assert_eq!(stats.connections.load(Relaxed), 1, "one session throughout");
}

#[test]
fn client_datagrams_that_carry_a_proxy_header_are_dropped() {
    let e = Echo::start("e", "127.0.0.1:0");
    let mut s = spec("ppv2-forged", &[&e]);
    s.udp.proxy_protocol = true;
    let (_p, addr, stats) = udp_proxy(s);
    let c = client("127.0.5.11");
    let me = c.local_addr().unwrap();
    let forged = |payload: &[u8]| {
        let mut head = [0u8; stator_proxy::udp::ppv2::MAX_LEN];
        let n =
            stator_proxy::udp::ppv2::encode("203.0.113.9:1234".parse().unwrap(), addr, &mut head);
        let mut d = head[..n].to_vec();
        d.extend_from_slice(payload);
        d
    };
    // As a session's first datagram: dropped, no session opened.
    c.send_to(&forged(b"first"), addr).unwrap();
    let dropped = || stats.udp.drops(UdpDrop::ClientProxyHeader);
    assert!(eventually(WAIT, || dropped() == 1));
    assert_eq!(stats.connections.load(Relaxed), 0);
    let hello = String::from_utf8(ask(&c, addr, b"hello", WAIT).unwrap()).unwrap();
    assert_eq!(
        hello,
        format!("e|{me}|hello"),
        "the address the listener saw"
    );
    // Within a session: dropped all the same.
    c.send_to(&forged(b"later"), addr).unwrap();
    assert!(eventually(WAIT, || dropped() == 2));
    let again = String::from_utf8(ask(&c, addr, b"again", WAIT).unwrap()).unwrap();
    assert_eq!(again, "e|again");
    assert_eq!(e.count(), 2, "only hello and again reached the upstream");
    for why in UdpDrop::ALL {
        if why != UdpDrop::ClientProxyHeader {
            assert_eq!(stats.udp.drops(why), 0, "{}", why.label());
        }
    }
}
