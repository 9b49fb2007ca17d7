//! A proxy-only node (`dataplane.mode = "none"`) over real sockets on loopback: listeners
//! started by `Node::start`, upstream states from the node's own health checks, `GET
//! /v1/listeners`, the proxy's families in `/metrics` through the strict format checker, a
//! dead backend taken out by its health check, a reload that adds a listener and keeps the
//! first one. Unprivileged: a proxy-only node needs no root.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::prom;
use serde_json::Value;
use stator_control::client::ApiClient;
use stator_control::{Node, NodeOptions};

/// A loopback HTTP server answering every request with its name, until stopped.
struct Named {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Named {
    fn start(name: &'static str) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let Ok((mut c, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                std::thread::spawn(move || {
                    c.set_nonblocking(false).unwrap();
                    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                    let mut buf = [0u8; 4096];
                    let mut head = Vec::new();
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match c.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let body = format!("{name}\n");
                    let _ = write!(
                        c,
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-backend: {name}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Self { addr, stop }
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn get(addr: SocketAddr) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let backend = out
        .lines()
        .find_map(|l| l.strip_prefix("x-backend: "))
        .unwrap_or("")
        .to_string();
    (status, backend)
}

fn config(a: SocketAddr, b: SocketAddr, web: u16, extra: Option<u16>) -> String {
    let mut t = format!(
        "[node]\nname = \"p1\"\n[dataplane]\nmode = \"none\"\n\
         [[pool]]\nname = \"app\"\n[pool.health]\ninterval = \"100ms\"\ntimeout = \"50ms\"\n\
         rise = 1\nfall = 2\njitter = \"0s\"\n\
         [[pool.backend]]\naddress = \"127.0.0.1\"\nport = {}\nid = \"a\"\n\
         [[pool.backend]]\naddress = \"127.0.0.1\"\nport = {}\nid = \"b\"\n\
         [[listener]]\nname = \"web\"\naddress = \"127.0.0.1:{web}\"\nprotocol = \"http\"\n\
         pool = \"app\"\nworkers = 2\n",
        a.port(),
        b.port()
    );
    if let Some(p) = extra {
        t += &format!(
            "[[listener]]\nname = \"raw\"\naddress = \"127.0.0.1:{p}\"\nprotocol = \"tcp\"\n\
             pool = \"app\"\nscheduler = \"least_conn\"\n"
        );
    }
    t
}

fn listener<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("no listener {name} in {v}"))
}

#[test]
fn a_proxy_only_node_serves_reports_heals_and_reloads() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (a, b) = (Named::start("a"), Named::start("b"));
    let web = free_port();
    let text = config(a.addr, b.addr, web, None);
    let node = rt
        .block_on(Node::start(
            text,
            "t.toml".into(),
            NodeOptions {
                listen: Some("127.0.0.1:0".parse().unwrap()),
                ..NodeOptions::default()
            },
        ))
        .unwrap();
    let api = ApiClient::new(&node.api_addr().to_string(), None).unwrap();
    let web_addr: SocketAddr = format!("127.0.0.1:{web}").parse().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let (status, backend) = get(web_addr);
        assert_eq!(status, 200);
        seen.insert(backend);
    }
    assert_eq!(seen.len(), 2, "both backends serve: {seen:?}");

    let v = api.get_json("/v1/listeners").unwrap();
    let l = listener(&v, "web");
    assert_eq!(l["protocol"], "http");
    assert_eq!(l["workers"], 2);
    assert_eq!(l["scheduler"], "vnswrr");
    assert_eq!(l["steering"], "kernel");
    assert_eq!(l["requests"], 20);
    let backends = l["backends"].as_array().unwrap();
    assert_eq!(backends.len(), 2);
    assert!(backends.iter().all(|b| b["state"] == "usable"), "{l}");
    let served: u64 = backends
        .iter()
        .map(|b| b["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(served, 20);

    let metrics = api.request("GET", "/metrics", &[], &[]).unwrap();
    let text = String::from_utf8(metrics.body).unwrap();
    let samples = prom::check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        prom::value(
            &samples,
            "stator_proxy_requests_total",
            &[("listener", "web")]
        ),
        Some(20.0)
    );
    assert_eq!(
        prom::value(
            &samples,
            "stator_proxy_request_duration_seconds_count",
            &[("listener", "web")]
        ),
        Some(20.0)
    );
    assert_eq!(
        prom::value(
            &samples,
            "stator_proxy_responses_total",
            &[("listener", "web"), ("code", "2xx")]
        ),
        Some(20.0)
    );

    // Backend b dies: its health check (fall 2 × 100 ms) takes it out of the listener.
    let b_addr = b.addr;
    let died = Instant::now();
    drop(b);
    let bound = Duration::from_millis(2 * 100) + Duration::from_secs(1);
    let mut removed = None;
    while died.elapsed() < bound + Duration::from_secs(2) {
        let v = api.get_json("/v1/listeners").unwrap();
        let state = listener(&v, "web")["backends"][1]["state"].clone();
        if state == "absent" {
            removed = Some(died.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let removed = removed.expect("the dead backend left the listener");
    println!(
        "dead backend out of the listener after {removed:?} (fall x interval + 1 s = {bound:?})"
    );
    for _ in 0..10 {
        assert_eq!(get(web_addr), (200, "a".to_string()));
    }

    // A reload adds a TCP listener; the HTTP one keeps its socket and counters.
    let raw = free_port();
    let report = rt
        .block_on(node.apply(
            config(a.addr, b_addr, web, Some(raw)),
            "t.toml".into(),
            None,
        ))
        .unwrap();
    assert_eq!(report.config_generation, 2);
    let raw_addr: SocketAddr = format!("127.0.0.1:{raw}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(raw_addr).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, backend) = get(raw_addr);
    assert_eq!(
        (status, backend.as_str()),
        (200, "a"),
        "HTTP bytes through the TCP listener"
    );
    let v = api.get_json("/v1/listeners").unwrap();
    assert_eq!(listener(&v, "raw")["scheduler"], "least_conn");
    assert!(listener(&v, "web")["requests"].as_u64().unwrap() >= 30);
    rt.block_on(node.shutdown()).unwrap();
    assert!(
        TcpStream::connect(web_addr).is_err(),
        "listeners closed at shutdown"
    );
}
