//! A proxy-only node (`dataplane.mode = "none"`) over real sockets on loopback: listeners
//! started by `Node::start`, upstream states from the node's own health checks, `GET
//! /v1/listeners`, the proxy's families in `/metrics` through the strict format checker, a
//! dead backend taken out by its health check, a reload that adds a listener and keeps the
//! first one; a reload whose listener cannot bind (port taken) refused with the field path
//! while the old configuration keeps serving; a backend whose HTTP check turns sick under load
//! leaves the listener's usable set and gets no request after the transition, then comes back.
//! Unprivileged: a proxy-only node needs no root.

#[allow(unused_imports)]
use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{free_tcp_port, listener, prom, runtime, start_node};

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

/// A loopback HTTP server that counts the requests it serves and answers `GET /health` with
/// 200, or 503 while `sick` is set (the proxied paths keep working: only the health check
/// says it is unwell, so any request the proxy still sent it would be seen).
struct Sickly {
    addr: SocketAddr,
    sick: Arc<AtomicBool>,
    served: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Sickly {
    fn start(name: &'static str) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let sick = Arc::new(AtomicBool::new(false));
        let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (st, si, se) = (Arc::clone(&stop), Arc::clone(&sick), Arc::clone(&served));
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let Ok((mut c, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                let (si, se) = (Arc::clone(&si), Arc::clone(&se));
                std::thread::spawn(move || {
                    c.set_nonblocking(false).unwrap();
                    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                    let mut buf = [0u8; 4096];
                    loop {
                        let mut head = Vec::new();
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                            match c.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => head.extend_from_slice(&buf[..n]),
                            }
                        }
                        let status = if head.starts_with(b"GET /health ") {
                            if si.load(Ordering::SeqCst) { 503 } else { 200 }
                        } else {
                            se.fetch_add(1, Ordering::SeqCst);
                            200
                        };
                        let body = format!("{name}\n");
                        if write!(
                            c,
                            "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nx-backend: {name}\r\n\r\n{body}",
                            body.len()
                        )
                        .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        Self {
            addr,
            sick,
            served,
            stop,
        }
    }
}

impl Drop for Sickly {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
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

#[test]
fn a_proxy_only_node_serves_reports_heals_and_reloads() {
    let rt = runtime();
    let (a, b) = (Named::start("a"), Named::start("b"));
    let web = free_tcp_port();
    let text = config(a.addr, b.addr, web, None);
    let (node, api) = start_node(&rt, text);
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
    // Every reason of the trust work has its series, at 0 here.
    for kind in ["unsupported", "read_timeout", "write_timeout"] {
        assert_eq!(
            prom::value(
                &samples,
                "stator_proxy_client_errors_total",
                &[("listener", "web"), ("kind", kind)]
            ),
            Some(0.0),
            "{kind}"
        );
    }
    for kind in ["read_timeout", "write_timeout"] {
        assert!(
            samples
                .iter()
                .any(|s| s.name == "stator_proxy_backend_errors_total"
                    && s.labels.get("kind").is_some_and(|v| v == kind)),
            "{kind}"
        );
    }

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
    let raw = free_tcp_port();
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

#[test]
fn a_backend_that_refuses_is_left_out_at_once_whatever_its_health_check_says() {
    let rt = runtime();
    let (a, b) = (Named::start("a"), Named::start("b"));
    let web = free_tcp_port();
    // health checks far slower than the test: only passive health can take b out
    let text = config(a.addr, b.addr, web, None)
        .replace("interval = \"100ms\"", "interval = \"30s\"")
        .replace(
            "workers = 2\n",
            "workers = 2\nmax_fails = 1\nfail_timeout = \"1m\"\n",
        );
    let (node, api) = start_node(&rt, text);
    let web_addr: SocketAddr = format!("127.0.0.1:{web}").parse().unwrap();
    for _ in 0..4 {
        assert_eq!(get(web_addr).0, 200);
    }
    drop(b);
    // b refuses now: each request still gets 200 (from a), and b is tried at most once
    for n in 0..20 {
        assert_eq!(get(web_addr), (200, "a".to_string()), "request {n}");
    }
    let v = api.get_json("/v1/listeners").unwrap();
    let l = listener(&v, "web");
    assert_eq!(l["passive"]["max_fails"], 1, "{l}");
    assert_eq!(l["passive"]["fail_timeout_seconds"], 60.0, "{l}");
    let gone = &l["backends"][1];
    assert_eq!(
        gone["state"], "usable",
        "its health check has not run again: {gone}"
    );
    assert_eq!(gone["passive"]["excluded"], true, "{gone}");
    assert!(
        gone["passive"]["excluded_for_seconds"].as_f64().unwrap() > 30.0,
        "{gone}"
    );
    // refused, or — while the backend's thread was still closing its socket — accepted and
    // reset under the request: one failure excluded it, and none came after. (A kept-alive
    // connection's reset does not count towards the exclusion, so one may come first.)
    let failures = gone["errors"]["connect_refused"].as_u64().unwrap()
        + gone["errors"]["reset"].as_u64().unwrap();
    assert!((1..=2).contains(&failures), "{gone}");
    assert_eq!(l["backends"][0]["passive"]["excluded"], false, "{l}");
    let id = gone["id"].as_str().unwrap().to_owned();
    let metrics = api.request("GET", "/metrics", &[], &[]).unwrap();
    let text = String::from_utf8(metrics.body).unwrap();
    let samples = prom::check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let at = [("listener", "web"), ("backend", id.as_str())];
    assert_eq!(
        prom::value(&samples, "stator_proxy_backend_excluded", &at),
        Some(1.0)
    );
    assert_eq!(
        prom::value(&samples, "stator_proxy_backend_exclusions_total", &at),
        Some(1.0)
    );
    let retried: f64 = ["connect", "resent"]
        .iter()
        .filter_map(|r| {
            prom::value(
                &samples,
                "stator_proxy_retries_total",
                &[("listener", "web"), ("reason", r)],
            )
        })
        .sum();
    assert_eq!(
        retried, failures as f64,
        "each request b failed went on to a"
    );
    rt.block_on(node.shutdown()).unwrap();
}

#[test]
fn a_reload_whose_listener_cannot_bind_is_refused_and_the_old_config_keeps_serving() {
    let rt = runtime();
    let (a, b) = (Named::start("a"), Named::start("b"));
    let web = free_tcp_port();
    let (node, api) = start_node(&rt, config(a.addr, b.addr, web, None));
    let web_addr: SocketAddr = format!("127.0.0.1:{web}").parse().unwrap();
    assert_eq!(get(web_addr).0, 200);

    // Another program holds a port (no SO_REUSEPORT): a reload adding a listener there, or
    // moving the running one there, is refused with the listener's field path.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let err = rt
        .block_on(node.apply(
            config(a.addr, b.addr, web, Some(taken_port)),
            "t.toml".into(),
            None,
        ))
        .expect_err("a listener on a taken port refuses the reload");
    println!("refused: {err}");
    assert_eq!(err.field().as_deref(), Some("listener[1].address"));
    assert_eq!(err.http_status(), 422);
    assert!(
        err.to_string().starts_with("listener[1].address: ") && err.to_string().contains("in use"),
        "{err}"
    );
    let err = rt
        .block_on(node.apply(
            config(a.addr, b.addr, taken_port, None),
            "t.toml".into(),
            None,
        ))
        .expect_err("moving a listener to a taken port refuses the reload");
    assert_eq!(err.field().as_deref(), Some("listener[0].address"));

    // Nothing changed: the running config's generation, its one listener, still serving on
    // its address, and the API answers a PUT with the same reason.
    assert_eq!(node.view().config.listeners.len(), 1);
    let v = api.get_json("/v1/listeners").unwrap();
    assert_eq!(v["listeners"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(listener(&v, "web")["address"], format!("127.0.0.1:{web}"));
    for _ in 0..10 {
        assert_eq!(get(web_addr).0, 200);
    }
    let put = api
        .request(
            "PUT",
            "/v1/config",
            &[("Content-Type", "application/toml")],
            config(a.addr, b.addr, web, Some(taken_port)).as_bytes(),
        )
        .unwrap();
    let body = String::from_utf8_lossy(&put.body).to_string();
    assert_eq!(put.status, 422, "{body}");
    assert!(body.contains("listener[1].address"), "{body}");

    // The port freed, the same reload applies.
    drop(taken);
    let report = rt
        .block_on(node.apply(
            config(a.addr, b.addr, web, Some(taken_port)),
            "t.toml".into(),
            None,
        ))
        .unwrap();
    assert_eq!(report.config_generation, 2);
    let raw_addr: SocketAddr = format!("127.0.0.1:{taken_port}").parse().unwrap();
    assert_eq!(get(raw_addr).0, 200);
    assert_eq!(get(web_addr).0, 200);
    rt.block_on(node.shutdown()).unwrap();
}

#[test]
fn health_takes_a_sick_backend_out_and_no_request_reaches_it_after() {
    let rt = runtime();
    let (a, b) = (Sickly::start("a"), Sickly::start("b"));
    let web = free_tcp_port();
    let text = config(a.addr, b.addr, web, None).replace(
        "[pool.health]\n",
        "[pool.health]\nmethod = \"http\"\npath = \"/health\"\n",
    );
    let (node, api) = start_node(&rt, text);
    let web_addr: SocketAddr = format!("127.0.0.1:{web}").parse().unwrap();
    let state_of_b =
        || listener(&api.get_json("/v1/listeners").unwrap(), "web")["backends"][1]["state"].clone();
    assert_eq!(state_of_b(), "usable");

    // Steady load (sequential requests on fresh connections) while b turns sick.
    let stop = Arc::new(AtomicBool::new(false));
    let log: Arc<std::sync::Mutex<Vec<(Instant, String)>>> = Arc::default();
    let load = {
        let (stop, log) = (Arc::clone(&stop), Arc::clone(&log));
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(20);
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                let sent = Instant::now();
                let (status, backend) = get(web_addr);
                assert_eq!(status, 200);
                log.lock().unwrap().push((sent, backend));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let fall_at = Instant::now();
    b.sick.store(true, Ordering::SeqCst);
    // fall = 2 probes, 100 ms apart: out of the listener within fall x interval + 1 s (the
    // loop allows 2 s more before it fails, for a loaded machine; the figure is printed).
    let bound = Duration::from_millis(2 * 100) + Duration::from_secs(1);
    let mut removed = None;
    while fall_at.elapsed() < bound + Duration::from_secs(2) {
        if state_of_b() == "absent" {
            removed = Some(Instant::now());
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let removed = removed.expect("the sick backend left the listener's usable set");
    let served_at_removal = b.served.load(Ordering::SeqCst);
    // At least 200 more requests after the transition was seen.
    let counted = log.lock().unwrap().len();
    let deadline = Instant::now() + Duration::from_secs(10);
    while log.lock().unwrap().len() < counted + 200 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::SeqCst);
    load.join().unwrap();
    let log = log.lock().unwrap();
    let after: Vec<&String> = log
        .iter()
        .filter(|(sent, _)| *sent > removed)
        .map(|(_, b)| b)
        .collect();
    let before_b = log
        .iter()
        .filter(|(sent, b)| *sent < fall_at && b == "b")
        .count();
    println!(
        "sick backend out of the listener {:?} after its checks began failing (fall x interval \
         + 1 s = {bound:?}); {} requests sent after that, none to it ({before_b} reached it before)",
        removed - fall_at,
        after.len()
    );
    assert!(before_b > 0, "b served before it turned sick");
    assert!(
        after.len() >= 200,
        "{} requests after the transition",
        after.len()
    );
    assert!(
        after.iter().all(|b| *b == "a"),
        "a request reached the sick backend"
    );
    assert_eq!(
        b.served.load(Ordering::SeqCst),
        served_at_removal,
        "the sick backend served nothing after the transition"
    );
    let v = api.get_json("/v1/listeners").unwrap();
    assert_eq!(listener(&v, "web")["backends"][0]["state"], "usable", "{v}");

    // Well again (rise 1): back in the usable set, and it serves again.
    b.sick.store(false, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    while state_of_b() != "usable" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(state_of_b(), "usable");
    let again = b.served.load(Ordering::SeqCst);
    for _ in 0..10 {
        assert_eq!(get(web_addr).0, 200);
    }
    assert!(
        b.served.load(Ordering::SeqCst) > again,
        "b serves again once healthy"
    );
    drop(a);
    rt.block_on(node.shutdown()).unwrap();
}
