//! The HTTP/1.1 proxy end to end on loopback: real backends (hyper), real client connections,
//! the proxy's own workers. Unprivileged.

#[allow(unused_imports)]
use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::{Backend, Client, chunked_body, pattern_fnv, proxy, raw, refused_addr, spec};
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

/// A raw backend on loopback: for each request (a head, and a `content-length` body) on any
/// connection it writes `answer(request)`, and closes the connection after it when the
/// answer has neither `content-length` nor `transfer-encoding` (its end is the close).
fn scripted_backend(answer: fn(&str) -> Vec<u8>) -> UpstreamSpec {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = Vec::new();
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        let mut b = [0u8; 4096];
                        match s.read(&mut b) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&b[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end + 4]).to_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    while buf.len() < end + 4 + len {
                        let mut b = [0u8; 4096];
                        match s.read(&mut b) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&b[..n]),
                        }
                    }
                    let request = String::from_utf8_lossy(&buf[..end + 4 + len]).into_owned();
                    buf.drain(..end + 4 + len);
                    let out = answer(&request);
                    let text = String::from_utf8_lossy(&out).to_lowercase();
                    if s.write_all(&out).is_err() {
                        return;
                    }
                    if !text.contains("content-length") && !text.contains("transfer-encoding") {
                        return;
                    }
                }
            });
        }
    });
    UpstreamSpec {
        name: "scripted".into(),
        addr,
        weight: 1,
    }
}

/// Reads one response from `r` (head, then a `content-length` or `chunked` body); the head
/// and the body decoded. What follows stays in `r` (pipelined answers arrive together).
fn response(r: &mut std::io::BufReader<std::net::TcpStream>) -> (String, Vec<u8>) {
    use std::io::{BufRead, Read};
    let mut head = String::new();
    loop {
        let mut line = String::new();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "closed in a head: {head:?}"
        );
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let lower = head.to_lowercase();
    let mut body = Vec::new();
    if let Some(n) = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
    {
        body.resize(n.trim().parse().unwrap(), 0);
        r.read_exact(&mut body).unwrap();
    } else if lower.contains("transfer-encoding: chunked") {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    (head, body)
}

fn connect(addr: std::net::SocketAddr) -> std::net::TcpStream {
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// A client connection: writes go to the socket, answers are read through one buffer.
fn client(addr: std::net::SocketAddr) -> std::io::BufReader<std::net::TcpStream> {
    std::io::BufReader::new(connect(addr))
}

#[test]
fn pipelined_requests_expect_continue_interim_answers_and_close_delimited_bodies() {
    use std::io::{Read, Write};
    let b = scripted_backend(|req| {
        let target = req.split(' ').nth(1).unwrap_or("");
        match target {
            // an HTTP/1.0-style answer: its end is the close
            "/close" => b"HTTP/1.0 200 OK\r\nx-kind: close\r\n\r\nuntil the end".to_vec(),
            // an interim answer before the final one
            "/early" => b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n\
                          HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfinal"
                .to_vec(),
            t => format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{t}",
                t.len() + req.len() - req.find("\r\n\r\n").unwrap() - 4
            )
            .into_bytes()
            .into_iter()
            .chain(req[req.find("\r\n\r\n").unwrap() + 4..].bytes())
            .collect(),
        }
    });
    let (p, addr) = proxy(spec("engine", Protocol::Http, vec![b]));

    // two requests in one write: two answers, in order, on one connection
    let mut s = client(addr);
    s.get_mut().write_all(b"GET /one HTTP/1.1\r\nHost: a\r\n\r\nPOST /two HTTP/1.1\r\nHost: a\r\ncontent-length: 3\r\n\r\nxyz")
        .unwrap();
    assert_eq!(response(&mut s).1, b"/one");
    assert_eq!(response(&mut s).1, b"/twoxyz");

    // Expect: 100-continue: the proxy says 100 before the client sends its body
    s.get_mut()
        .write_all(
            b"PUT /put HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\ncontent-length: 4\r\n\r\n",
        )
        .unwrap();
    let (head, _) = response(&mut s);
    assert!(head.starts_with("HTTP/1.1 100 Continue\r\n"), "{head}");
    s.get_mut().write_all(b"body").unwrap();
    let (head, body) = response(&mut s);
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert_eq!(body, b"/putbody");

    // an interim 103 is not forwarded: the client sees the final answer only
    s.get_mut()
        .write_all(b"GET /early HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let (head, body) = response(&mut s);
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert_eq!(body, b"final");

    // a body delimited by the upstream's close goes chunked to an HTTP/1.1 client, which
    // keeps its connection ...
    s.get_mut()
        .write_all(b"GET /close HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let (head, body) = response(&mut s);
    assert!(
        head.to_lowercase().contains("transfer-encoding: chunked"),
        "{head}"
    );
    assert_eq!(body, b"until the end");
    s.get_mut()
        .write_all(b"GET /after HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (head, body) = response(&mut s);
    assert!(head.to_lowercase().contains("connection: close"), "{head}");
    assert_eq!(body, b"/after");
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "closed after the answer it asked to close: {rest:?}"
    );

    // ... and until the close to an HTTP/1.0 client
    let out = raw(addr, b"GET /close HTTP/1.0\r\n\r\n", Duration::ZERO);
    let text = String::from_utf8_lossy(&out);
    assert!(text.ends_with("\r\n\r\nuntil the end"), "{text:?}");
    assert!(
        text.to_lowercase().contains("connection: close"),
        "{text:?}"
    );
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn a_request_body_left_unread_after_a_failure_closes_the_connection() {
    use std::io::{Read, Write};
    let dead = UpstreamSpec {
        name: "dead".into(),
        addr: refused_addr(),
        weight: 1,
    };
    let mut s = spec("unread", Protocol::Http, vec![dead]);
    s.retries = 0;
    let (p, addr) = proxy(s);
    let mut c = connect(addr);
    // the body looks like a request: it must never be read as one
    let smuggled = b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    c.write_all(
        format!(
            "POST / HTTP/1.1\r\nHost: a\r\ncontent-length: {}\r\n\r\n",
            smuggled.len()
        )
        .as_bytes(),
    )
    .unwrap();
    c.write_all(smuggled).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 502 "), "{text:?}");
    assert_eq!(
        text.matches("HTTP/1.1").count(),
        1,
        "one answer, then the close: {text:?}"
    );
    assert!(
        text.to_lowercase().contains("connection: close"),
        "{text:?}"
    );
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn a_connection_idle_past_its_serving_task_is_served_again_and_still_times_out() {
    use std::io::{Read, Write};
    let a = Backend::start("a");
    let mut s = spec("parked", Protocol::Http, vec![a.upstream()]);
    // longer than the half second after which an idle connection leaves its serving task
    s.timeouts.idle = Duration::from_millis(1500);
    let (p, addr) = proxy(s);
    let req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(req).unwrap();
    assert!(read_response(&mut c).starts_with("HTTP/1.1 200"));
    // parked, then woken by the next request: served on the same connection
    std::thread::sleep(Duration::from_millis(900));
    c.write_all(req).unwrap();
    assert!(read_response(&mut c).starts_with("HTTP/1.1 200"));
    // parked again: the idle timeout still closes it, quietly, and counts it
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "idle close says nothing: {rest:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(1200),
        "closed by the idle timeout, not before: {:?}",
        started.elapsed()
    );
    let v = &p.listeners()[0];
    assert_eq!(v.stats.client_errors(ClientErrorKind::IdleTimeout), 1);
    // the socket closes a moment before the connection's count drops
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while v.stats.active.load(Ordering::Relaxed) != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        v.stats.active.load(Ordering::Relaxed),
        0,
        "the connection ended"
    );
    p.shutdown(Duration::from_secs(2));
}
