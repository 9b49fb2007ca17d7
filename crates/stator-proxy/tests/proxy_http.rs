//! The HTTP/1.1 proxy end to end on loopback: real backends (hyper), real client connections,
//! the proxy's own workers. Unprivileged.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Backend, Client, chunked_body, pattern_fnv, proxy, raw, refused_addr, spec};
use stator_proxy::{ClientErrorKind, ErrorKind, Protocol, UpstreamSpec, UpstreamState};

#[test]
fn keep_alive_reuses_upstream_connections_and_adds_forwarded_headers() {
    let (a, b) = (Backend::start("a"), Backend::start("b"));
    let mut s = spec("ka", Protocol::Http, vec![a.upstream(), b.upstream()]);
    s.http.forwarded = stator_proxy::ForwardedMode::Append;
    s.http.served_by = true;
    let (p, addr) = proxy(s);
    let mut c = Client::connect(addr);
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..100 {
        let (status, h, body) = c.get("/");
        assert_eq!(status, 200);
        let name = h["x-backend"].to_str().unwrap().to_string();
        assert_eq!(body, format!("{name}\n").as_bytes());
        assert_eq!(h["x-seen-xff"], "127.0.0.1");
        assert_eq!(h["x-seen-forwarded"], "for=127.0.0.1;proto=http");
        assert_eq!(h["x-served-by"], "test/ka/0");
        *seen.entry(name).or_insert(0) += 1;
    }
    // VNSWRR with equal weights alternates: 50 each.
    assert_eq!(seen["a"], 50);
    assert_eq!(seen["b"], 50);
    let conns = a.connections.load(Ordering::SeqCst) + b.connections.load(Ordering::SeqCst);
    let v = &p.listeners()[0];
    let reused: u64 = v
        .upstreams
        .iter()
        .map(|u| u.stats.reused.load(Ordering::Relaxed))
        .sum();
    println!(
        "100 requests over one client connection: {conns} upstream connections, {reused} reuses"
    );
    assert_eq!(conns, 2, "one kept-alive upstream connection per backend");
    assert_eq!(reused, 98);
    assert_eq!(v.stats.requests.load(Ordering::Relaxed), 100);
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn ten_megabytes_chunked_both_ways() {
    let a = Backend::start("a");
    let (p, addr) = proxy(spec("big", Protocol::Http, vec![a.upstream()]));
    let mut c = Client::connect(addr);
    const N: u64 = 10 * 1024 * 1024;
    let (status, h, body) = c.get(&format!("/bytes/{N}"));
    assert_eq!(status, 200);
    assert!(
        h.get("content-length").is_none(),
        "streamed, not buffered: {h:?}"
    );
    assert_eq!(body.len() as u64, N);
    let mut f = common::Fnv::default();
    f.update(&body);
    assert_eq!(f.0, pattern_fnv(N), "download checksum");
    let (status, _, body) = c.request("POST", "/upload", chunked_body(N));
    assert_eq!(status, 200);
    assert_eq!(
        String::from_utf8(body).unwrap(),
        format!("{N} {:016x}", pattern_fnv(N)),
        "upload length and checksum at the backend"
    );
    let v = &p.listeners()[0];
    assert!(v.stats.bytes_in.load(Ordering::Relaxed) > N);
    assert!(v.stats.bytes_out.load(Ordering::Relaxed) > N);
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn a_refusing_upstream_is_retried_elsewhere_and_all_refusing_is_502() {
    let a = Backend::start("a");
    let dead = UpstreamSpec {
        name: "dead".into(),
        addr: refused_addr(),
        weight: 5,
    };
    let (p, addr) = proxy(spec(
        "retry",
        Protocol::Http,
        vec![dead.clone(), a.upstream()],
    ));
    let mut c = Client::connect(addr);
    for _ in 0..20 {
        let (status, h, _) = c.get("/");
        assert_eq!(status, 200);
        assert_eq!(h["x-backend"], "a");
    }
    let v = &p.listeners()[0];
    let refused = v.upstreams[0].stats.errors(ErrorKind::ConnectRefused);
    println!(
        "20 requests, upstream `dead` (weight 5) refused {refused} connects, all answered by `a`"
    );
    assert!(refused > 0);
    assert_eq!(v.stats.retries.load(Ordering::Relaxed), refused);
    p.shutdown(Duration::from_secs(2));

    let dead2 = UpstreamSpec {
        name: "dead2".into(),
        addr: refused_addr(),
        weight: 1,
    };
    let (p, addr) = proxy(spec("down", Protocol::Http, vec![dead, dead2]));
    let mut c = Client::connect(addr);
    let (status, _, body) = c.get("/");
    assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));
    let v = &p.listeners()[0];
    assert_eq!(v.stats.client_errors(ClientErrorKind::UpstreamFailed), 1);
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn no_usable_upstream_is_503_and_health_changes_apply_at_once() {
    let (a, b) = (Backend::start("a"), Backend::start("b"));
    let (p, addr) = proxy(spec(
        "health",
        Protocol::Http,
        vec![a.upstream(), b.upstream()],
    ));
    let mut c = Client::connect(addr);
    p.set_states("health", &[UpstreamState::Absent, UpstreamState::Usable])
        .unwrap();
    for _ in 0..10 {
        assert_eq!(c.get("/").1["x-backend"], "b");
    }
    p.set_states("health", &[UpstreamState::Absent, UpstreamState::Draining])
        .unwrap();
    let (status, h, _) = c.get("/");
    assert_eq!(status, 503);
    assert_eq!(h["retry-after"], "1");
    p.set_states("health", &[UpstreamState::Usable, UpstreamState::Usable])
        .unwrap();
    assert_eq!(c.get("/").0, 200);
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn slow_heads_get_408_and_garbage_gets_400() {
    let a = Backend::start("a");
    let mut s = spec("bad", Protocol::Http, vec![a.upstream()]);
    s.timeouts.header_read = Duration::from_millis(300);
    let (p, addr) = proxy(s);
    let started = std::time::Instant::now();
    let out = raw(addr, b"GET / HTTP/1.1\r\nHost: x\r\n", Duration::ZERO);
    let text = String::from_utf8_lossy(&out);
    println!("slow head answered after {:?}", started.elapsed());
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?}");
    let out = raw(addr, b"\x16\x03\x01garbage\r\n\r\n", Duration::ZERO);
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 400"), "{text:?}");
    // A complete request after all this is still served.
    assert_eq!(Client::connect(addr).get("/").0, 200);
    let v = &p.listeners()[0];
    assert_eq!(v.stats.client_errors(ClientErrorKind::HeaderTimeout), 1);
    assert_eq!(v.stats.client_errors(ClientErrorKind::BadRequest), 1);
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn a_slow_upstream_response_is_504() {
    let a = Backend::start("a");
    let mut s = spec("slow", Protocol::Http, vec![a.upstream()]);
    s.timeouts.response = Duration::from_millis(200);
    let (p, addr) = proxy(s);
    let mut c = Client::connect(addr);
    assert_eq!(c.get("/slow/2000").0, 504);
    assert_eq!(c.get("/slow/10").0, 200);
    assert_eq!(
        p.listeners()[0].upstreams[0]
            .stats
            .errors(ErrorKind::Timeout),
        1
    );
    p.shutdown(Duration::from_secs(2));
}

/// Reads one whole response with a `content-length` from `s`.
fn read_response(s: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&out).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_owned)
                })
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if out.len() >= end + 4 + len {
                return text;
            }
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&out).to_string(),
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

#[test]
fn kept_alive_connections_time_out_idle_and_on_late_or_trickled_heads() {
    use std::io::{Read, Write};
    let a = Backend::start("a");
    let mut s = spec("timers", Protocol::Http, vec![a.upstream()]);
    s.timeouts.header_read = Duration::from_millis(300);
    s.timeouts.idle = Duration::from_millis(400);
    let (p, addr) = proxy(s);
    let req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

    // Idle: after a request, nothing more → closed quietly (no 408) after `idle`.
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for _ in 0..3 {
        c.write_all(req).unwrap();
        assert!(read_response(&mut c).starts_with("HTTP/1.1 200"));
    }
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "idle close says nothing: {rest:?}");

    // A later request's head, begun and not finished: 408 `header_read` after its first byte.
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(req).unwrap();
    assert!(read_response(&mut c).starts_with("HTTP/1.1 200"));
    std::thread::sleep(Duration::from_millis(200)); // idle, but less than `idle`
    c.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    let text = String::from_utf8_lossy(&rest);
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?}");

    // A head trickled in a byte at a time never completes in time: 408 all the same.
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answered = Vec::new();
    for b in b"GET / HTTP/1.1\r\nHost: a-long-host-name.example\r\n" {
        if c.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(40));
        c.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 256];
        if let Ok(n) = c.read(&mut buf) {
            answered.extend_from_slice(&buf[..n]);
            if n == 0 || !answered.is_empty() {
                break;
            }
        }
        c.set_nonblocking(false).unwrap();
    }
    let text = String::from_utf8_lossy(&answered);
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?}");

    let v = &p.listeners()[0];
    assert_eq!(v.stats.client_errors(ClientErrorKind::IdleTimeout), 1);
    assert_eq!(v.stats.client_errors(ClientErrorKind::HeaderTimeout), 2);
    p.shutdown(Duration::from_secs(2));
}
