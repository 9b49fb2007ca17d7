//! A proxy-only node serving a `protocol = "udp"` listener over real sockets on loopback:
//! datagrams both ways through `Node::start`'s listener, the UDP figures in `GET
//! /v1/listeners` and the `stator_proxy_udp_*` families in `/metrics` (strict format checker),
//! a backend found dead by the node's own UDP health check given no new session, and a reload
//! that changes `[listener.udp]` while the listener keeps its socket. Unprivileged.

#[allow(unused_imports)]
use crate::common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::{free_udp_port, listener, prom, runtime, start_node};

/// A loopback UDP echo answering `"<name>|<payload>"`, until dropped.
struct Echo {
    addr: SocketAddr,
    seen: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Echo {
    fn start(name: &'static str) -> Self {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicU64::new(0));
        let (s, n) = (Arc::clone(&stop), Arc::clone(&seen));
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !s.load(Ordering::SeqCst) {
                let Ok((len, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                n.fetch_add(1, Ordering::SeqCst);
                let mut reply = format!("{name}|").into_bytes();
                reply.extend_from_slice(&buf[..len]);
                let _ = sock.send_to(&reply, from);
            }
        });
        Self { addr, seen, stop }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn config(a: SocketAddr, b: SocketAddr, port: u16, responses: Option<u32>) -> String {
    let mut t = format!(
        "[node]\nname = \"u1\"\n[dataplane]\nmode = \"none\"\n\
         [[pool]]\nname = \"dns\"\n[pool.health]\nmethod = \"udp\"\npayload = \"ping\"\n\
         interval = \"100ms\"\ntimeout = \"50ms\"\nrise = 1\nfall = 2\njitter = \"0s\"\n\
         [[pool.backend]]\naddress = \"127.0.0.1\"\nport = {}\nid = \"a\"\n\
         [[pool.backend]]\naddress = \"127.0.0.1\"\nport = {}\nid = \"b\"\n\
         [[listener]]\nname = \"dns\"\naddress = \"127.0.0.1:{port}\"\nprotocol = \"udp\"\n\
         pool = \"dns\"\nworkers = 2\n",
        a.port(),
        b.port()
    );
    if let Some(r) = responses {
        t += &format!("[listener.udp]\nresponses = {r}\n");
    }
    t
}

/// One request from a new client address: the reply's backend name.
fn ask(client_ip: &str, to: SocketAddr, msg: &str) -> Option<String> {
    let c = UdpSocket::bind(format!("{client_ip}:0")).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    c.send_to(msg.as_bytes(), to).unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) = c.recv_from(&mut buf).ok()?;
    let text = String::from_utf8(buf[..n].to_vec()).ok()?;
    let (backend, echoed) = text.split_once('|')?;
    (echoed == msg).then(|| backend.to_string())
}

#[test]
fn a_node_serves_reports_heals_and_reloads_a_udp_listener() {
    let rt = runtime();
    let (a, b) = (Echo::start("a"), Echo::start("b"));
    let port = free_udp_port();
    let (node, api) = start_node(&rt, config(a.addr, b.addr, port, None));
    let to: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // the health checks make both usable first
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = api.get_json("/v1/listeners").unwrap();
        let l = listener(&v, "dns");
        if l["backends"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["state"] == "usable")
        {
            break;
        }
        assert!(Instant::now() < deadline, "backends never usable: {l}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut seen = std::collections::BTreeSet::new();
    for i in 1..=40u8 {
        let backend = ask(&format!("127.0.7.{i}"), to, &format!("q{i}")).expect("a reply");
        seen.insert(backend);
    }
    assert_eq!(seen.len(), 2, "both backends serve: {seen:?}");

    let v = api.get_json("/v1/listeners").unwrap();
    let l = listener(&v, "dns");
    assert_eq!(l["protocol"], "udp");
    assert_eq!(l["workers"], 2);
    assert_eq!(l["connections"]["total"], 40, "a session per client");
    assert_eq!(l["udp"]["datagrams"]["client_in"], 40);
    assert_eq!(l["udp"]["datagrams"]["client_out"], 40);
    assert_eq!(l["udp"]["datagrams"]["upstream_out"], 40);
    assert_eq!(l["udp"]["drops"]["no_upstream"], 0);

    let metrics = api.request("GET", "/metrics", &[], &[]).unwrap();
    let text = String::from_utf8(metrics.body).unwrap();
    let samples = prom::check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let udp = |peer: &str, direction: &str| {
        prom::value(
            &samples,
            "stator_proxy_udp_datagrams_total",
            &[
                ("listener", "dns"),
                ("peer", peer),
                ("direction", direction),
            ],
        )
    };
    assert_eq!(udp("client", "in"), Some(40.0));
    assert_eq!(udp("upstream", "in"), Some(40.0));
    assert_eq!(
        prom::value(
            &samples,
            "stator_proxy_udp_drops_total",
            &[("listener", "dns"), ("reason", "socket_overflow")]
        ),
        Some(0.0)
    );
    assert_eq!(
        prom::value(
            &samples,
            "stator_proxy_udp_drops_total",
            &[("listener", "dns"), ("reason", "client_proxy_header")]
        ),
        Some(0.0)
    );

    // Backend b dies: its UDP health check takes it out, and new clients all reach a.
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = api.get_json("/v1/listeners").unwrap();
        if listener(&v, "dns")["backends"][1]["state"] == "absent" {
            break;
        }
        assert!(Instant::now() < deadline, "b never left the listener");
        std::thread::sleep(Duration::from_millis(20));
    }
    let a_before = a.seen.load(Ordering::SeqCst);
    for i in 1..=20u8 {
        assert_eq!(
            ask(&format!("127.0.8.{i}"), to, "after").as_deref(),
            Some("a")
        );
    }
    assert!(a.seen.load(Ordering::SeqCst) >= a_before + 20);

    // A reload sets responses = 1: the same socket keeps serving, and each reply now ends
    // its session.
    let report = rt
        .block_on(node.apply(
            config(a.addr, "127.0.0.1:9".parse().unwrap(), port, Some(1)),
            "t.toml".into(),
            None,
        ))
        .unwrap();
    assert_eq!(report.config_generation, 2);
    let ended_before = listener(&api.get_json("/v1/listeners").unwrap(), "dns")["udp"]
        ["sessions_ended"]["responses"]
        .as_u64()
        .unwrap();
    assert_eq!(ended_before, 0);
    for i in 1..=10u8 {
        assert_eq!(
            ask(&format!("127.0.9.{i}"), to, "dns").as_deref(),
            Some("a")
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = api.get_json("/v1/listeners").unwrap();
        let l = listener(&v, "dns");
        if l["udp"]["sessions_ended"]["responses"] == 10 {
            assert_eq!(l["udp"]["responses"], 1);
            // the counters of before the reload are kept: the listener was not restarted
            assert!(l["udp"]["datagrams"]["client_in"].as_u64().unwrap() >= 70);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sessions not ended by replies: {l}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    rt.block_on(node.shutdown()).unwrap();
}
