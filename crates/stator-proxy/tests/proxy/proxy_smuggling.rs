//! The HTTP listener against request smuggling and malformed requests: a table of rows, each
//! sent as raw bytes over a new TCP connection to a real listener in front of a raw backend
//! that records every byte it receives and parses them as a backend would (heads, then bodies
//! framed by `Content-Length` or `chunked`). For each row: what the client gets (statuses in
//! order, and whether the connection closes) and what the backend saw — never a request the
//! row smuggled in, and never a head framed two ways. The expectations, with nginx's and
//! HAProxy's answers beside them, are the table in docs/proxy.md. Also: forwarding headers a
//! client wrote reach the backend only from a trusted proxy. Unprivileged.

#[allow(unused_imports)]
use crate::common;

use std::io::{ErrorKind as IoErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{proxy, spec};
use stator_proxy::{
    ClientErrorKind, ForwardedMode, ListenerSpec, Prefix, Protocol, Proxy, UpstreamSpec,
};

/// The bound on every wait.
const WAIT: Duration = Duration::from_secs(10);

/// One request as the backend parsed it.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: Vec<u8>,
    /// The body arrived whole (else the connection ended inside it).
    complete: bool,
}

impl Seen {
    fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or_default()
    }

    /// The values of header `name`, one per line.
    fn header(&self, name: &str) -> Vec<String> {
        self.head
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .filter(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
            .collect()
    }
}

/// A raw HTTP/1.1 backend on loopback: records every byte, parses requests strictly by their
/// framing, answers each `200` with a 3-byte body. Stopped on drop.
struct Recorder {
    addr: SocketAddr,
    bytes: Arc<Mutex<Vec<u8>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Recorder {
    fn start() -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let r = Self {
            addr: l.local_addr().unwrap(),
            bytes: Arc::default(),
            seen: Arc::default(),
            stop: Arc::default(),
        };
        let (bytes, seen, stop) = (
            Arc::clone(&r.bytes),
            Arc::clone(&r.seen),
            Arc::clone(&r.stop),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((s, _)) => {
                        s.set_nonblocking(false).unwrap();
                        let (bytes, seen) = (Arc::clone(&bytes), Arc::clone(&seen));
                        std::thread::spawn(move || serve(s, &bytes, &seen));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        r
    }

    fn upstream(&self) -> UpstreamSpec {
        UpstreamSpec {
            name: "raw".into(),
            addr: self.addr,
            weight: 1,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads more of `s` into `buf` (and the record); false at the end of the connection.
fn fill(s: &mut TcpStream, buf: &mut Vec<u8>, record: &Mutex<Vec<u8>>) -> bool {
    let mut chunk = [0u8; 16384];
    match s.read(&mut chunk) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            record.lock().unwrap().extend_from_slice(&chunk[..n]);
            true
        }
    }
}

fn find(buf: &[u8], pat: &[u8]) -> Option<usize> {
    buf.windows(pat.len()).position(|w| w == pat)
}

/// Takes one CRLF-terminated line off `buf`, reading more as needed.
fn line(s: &mut TcpStream, buf: &mut Vec<u8>, record: &Mutex<Vec<u8>>) -> Option<String> {
    loop {
        if let Some(i) = find(buf, b"\r\n") {
            let l = String::from_utf8_lossy(&buf[..i]).to_string();
            buf.drain(..i + 2);
            return Some(l);
        }
        if !fill(s, buf, record) {
            return None;
        }
    }
}

/// Takes `n` bytes off `buf`, reading more as needed.
fn take(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    n: usize,
    record: &Mutex<Vec<u8>>,
) -> Option<Vec<u8>> {
    while buf.len() < n {
        if !fill(s, buf, record) {
            return None;
        }
    }
    Some(buf.drain(..n).collect())
}

fn serve(mut s: TcpStream, record: &Mutex<Vec<u8>>, seen: &Mutex<Vec<Seen>>) {
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            if !fill(&mut s, &mut buf, record) {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end);
        let i = {
            let mut seen = seen.lock().unwrap();
            seen.push(Seen {
                head: head.clone(),
                body: Vec::new(),
                complete: false,
            });
            seen.len() - 1
        };
        let req = Seen {
            head,
            body: Vec::new(),
            complete: false,
        };
        let chunked = req
            .header("transfer-encoding")
            .iter()
            .any(|v| v.eq_ignore_ascii_case("chunked"));
        let body = if chunked {
            let mut body = Vec::new();
            loop {
                let Some(size) = line(&mut s, &mut buf, record) else {
                    return;
                };
                let hex = size.split(';').next().unwrap_or_default().trim();
                let Ok(n) = usize::from_str_radix(hex, 16) else {
                    return;
                };
                if n == 0 {
                    // trailers, then the blank line
                    while let Some(l) = line(&mut s, &mut buf, record) {
                        if l.is_empty() {
                            break;
                        }
                    }
                    break body;
                }
                let Some(data) = take(&mut s, &mut buf, n + 2, record) else {
                    return;
                };
                body.extend_from_slice(&data[..n]);
            }
        } else {
            let n = req
                .header("content-length")
                .first()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let Some(b) = take(&mut s, &mut buf, n, record) else {
                return;
            };
            b
        };
        {
            let mut seen = seen.lock().unwrap();
            seen[i].body = body;
            seen[i].complete = true;
        }
        if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
            .is_err()
        {
            return;
        }
    }
}

/// A response as the client read it.
#[derive(Debug)]
struct Answer {
    status: u16,
}

/// Reads one response (head and `Content-Length` body) from `c`, `None` at the end of the
/// connection.
fn read_answer(c: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Answer> {
    let mut chunk = [0u8; 16384];
    loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i + 4]).to_string();
            let len: usize = head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= i + 4 + len {
                buf.drain(..i + 4 + len);
                let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
                return Some(Answer { status });
            }
        }
        match c.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == IoErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// Whether `c` is closed by its peer with nothing more to read (within [`WAIT`]).
fn closes_with_nothing_more(c: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 4096];
    loop {
        match c.read(&mut chunk) {
            Ok(0) => return buf.is_empty(),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == IoErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), IoErrorKind::WouldBlock | IoErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return buf.is_empty(), // reset
        }
    }
}

/// One row of the table.
struct Row {
    name: &'static str,
    request: Vec<u8>,
    /// The statuses the client reads, in order.
    statuses: &'static [u16],
    /// Whether the listener closes the connection after them.
    closes: bool,
    /// Request heads the backend parses from what the proxy sent (`usize::MAX`: at most one,
    /// as the bytes happen to arrive).
    forwarded: usize,
}

fn row(
    name: &'static str,
    request: &[u8],
    statuses: &'static [u16],
    closes: bool,
    forwarded: usize,
) -> Row {
    Row {
        name,
        request: request.to_vec(),
        statuses,
        closes,
        forwarded,
    }
}

/// The smuggled request most rows carry after their first one.
const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";

fn rows() -> Vec<Row> {
    let s = SMUGGLED;
    let mut rows = vec![
        row(
            "cl_te",
            format!(
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG{s}"
            )
            .as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "te_cl",
            format!(
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n{s}"
            )
            .as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "duplicate_equal_cl",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
            &[200],
            false,
            1,
        ),
        row(
            "differing_cl",
            format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 41\r\n\r\nhello{s}")
                .as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "te_space_before_colon",
            format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n{s}")
                .as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "te_xchunked",
            format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n{s}").as_bytes(),
            &[501],
            true,
            0,
        ),
        row(
            "te_chunked_identity",
            format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{s}")
                .as_bytes(),
            &[501],
            true,
            0,
        ),
        row(
            "te_tab_before_value",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            &[200],
            false,
            1,
        ),
        row(
            "te_two_lines",
            format!(
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{s}"
            )
            .as_bytes(),
            &[501],
            true,
            0,
        ),
        row(
            "te_gzip_chunked",
            format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n{s}")
                .as_bytes(),
            &[501],
            true,
            0,
        ),
        row(
            "te_in_http10",
            format!("POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{s}").as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "obs_fold",
            format!("GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\n\r\n{s}").as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "space_before_colon",
            format!("GET / HTTP/1.1\r\nHost : a\r\n\r\n{s}").as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "bare_lf",
            b"GET /lf HTTP/1.1\nHost: a\n\n",
            &[200],
            false,
            1,
        ),
        row(
            "nul_in_header",
            format!("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\0b\r\n\r\n{s}").as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "http09",
            format!("GET /\r\n\r\n{s}").as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "connect",
            format!("CONNECT a.example:22 HTTP/1.1\r\nHost: a.example:22\r\n\r\nSSH-2.0-x\r\n{s}").as_bytes(),
            &[405],
            true,
            0,
        ),
        row(
            "negative_cl",
            format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n{s}").as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "overflowing_cl",
            format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n{s}")
                .as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "cl_comma_list",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello",
            &[400],
            true,
            0,
        ),
        row(
            "duplicate_host",
            format!("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n{s}").as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "missing_host",
            format!("GET / HTTP/1.1\r\nX-A: 1\r\n\r\n{s}").as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "absolute_form_other_host",
            b"GET http://a.example/p?q HTTP/1.1\r\nHost: evil.example\r\n\r\n",
            &[200],
            false,
            1,
        ),
        row(
            "authority_form_without_connect",
            format!("GET a.example:80 HTTP/1.1\r\nHost: a.example\r\n\r\n{s}").as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "pipelined_after_an_error",
            format!("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n{s}{s}").as_bytes(),
            &[400],
            true,
            0,
        ),
        row(
            "pipelined_valid",
            b"GET /one HTTP/1.1\r\nHost: a\r\n\r\nGET /two HTTP/1.1\r\nHost: a\r\n\r\n",
            &[200, 200],
            false,
            2,
        ),
    ];
    // A chunk size of 2^72 - 1: the body fails as it is read (after the head went upstream,
    // or before, as it happens to arrive): 400, and nothing after it is read.
    rows.push(row(
        "chunk_size_overflow",
        format!(
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nx\r\n0\r\n\r\n{s}"
        )
        .as_bytes(),
        &[400],
        true,
        usize::MAX,
    ));
    let big = "a".repeat(40 * 1024);
    rows.push(row(
        "oversized_head",
        format!("GET / HTTP/1.1\r\nHost: a\r\nX-Big: {big}\r\n\r\n").as_bytes(),
        &[431],
        true,
        0,
    ));
    let many: String = (0..150).map(|i| format!("X-H{i}: v\r\n")).collect();
    rows.push(row(
        "too_many_headers",
        format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n").as_bytes(),
        &[431],
        true,
        0,
    ));
    rows
}

fn listener(backend: &Recorder) -> (Proxy, SocketAddr) {
    let mut s: ListenerSpec = spec("smuggle", Protocol::Http, vec![backend.upstream()]);
    s.timeouts.header_read = Duration::from_secs(5);
    proxy(s)
}

/// Runs one row; what went wrong, if anything.
fn run(r: &Row) -> Result<(), String> {
    let backend = Recorder::start();
    let (p, addr) = listener(&backend);
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    // The listener may close before it has read everything (an oversized head): a failed
    // write is part of the answer, not of the test.
    let _ = c.write_all(&r.request);
    let mut buf = Vec::new();
    let mut statuses = Vec::new();
    for _ in r.statuses {
        match read_answer(&mut c, &mut buf) {
            Some(a) => statuses.push(a.status),
            None => break,
        }
    }
    if statuses != r.statuses {
        return Err(format!("statuses {statuses:?}, expected {:?}", r.statuses));
    }
    let sentinel_sent = if r.closes {
        if !closes_with_nothing_more(&mut c, &mut buf) {
            return Err(format!(
                "the connection stayed open or said more: {:?}",
                String::from_utf8_lossy(&buf)
            ));
        }
        false
    } else {
        // HTTP/1.1 is one exchange at a time: a request smuggled in would be forwarded before
        // this one.
        c.write_all(b"GET /sentinel HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        match read_answer(&mut c, &mut buf) {
            Some(a) if a.status == 200 => {}
            other => return Err(format!("the sentinel got {other:?}")),
        }
        true
    };
    drop(c);
    let v = &p.listeners()[0];
    let deadline = std::time::Instant::now() + WAIT;
    while v.stats.active.load(Ordering::Relaxed) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut seen = backend.seen();
    if sentinel_sent {
        match seen.pop() {
            Some(last) if last.request_line() == "GET /sentinel HTTP/1.1" => {}
            other => {
                return Err(format!(
                    "the backend's last request is not the sentinel: {other:?}"
                ));
            }
        }
    }
    let forwarded_ok = if r.forwarded == usize::MAX {
        seen.len() <= 1
    } else {
        seen.len() == r.forwarded
    };
    if !forwarded_ok {
        return Err(format!(
            "the backend parsed {} requests, expected {}: {:?}",
            seen.len(),
            r.forwarded,
            seen.iter().map(Seen::request_line).collect::<Vec<_>>()
        ));
    }
    for s in &seen {
        if s.request_line().contains("smuggled") {
            return Err(format!("smuggled: {}", s.request_line()));
        }
        let te = s.header("transfer-encoding");
        let cl = s.header("content-length");
        if !te.is_empty() && (!cl.is_empty() || te != ["chunked"]) {
            return Err(format!("forwarded framed two ways: {:?}", s.head));
        }
    }
    let raw = backend.bytes.lock().unwrap().clone();
    if find(&raw, b"smuggled").is_some() && r.name != "chunk_size_overflow" {
        return Err("the smuggled request's bytes reached the backend".into());
    }
    p.shutdown(Duration::from_secs(2));
    check_details(r, &seen)
}

/// What some rows must look like at the backend.
fn check_details(r: &Row, seen: &[Seen]) -> Result<(), String> {
    let first = seen.first();
    match r.name {
        "absolute_form_other_host" => {
            let s = first.ok_or("nothing forwarded")?;
            if s.request_line() != "GET /p?q HTTP/1.1" || s.header("host") != ["a.example"] {
                return Err(format!(
                    "not origin form with the target's host: {:?}",
                    s.head
                ));
            }
        }
        "duplicate_equal_cl" | "te_tab_before_value" => {
            let s = first.ok_or("nothing forwarded")?;
            if s.body != b"hello" || !s.complete {
                return Err(format!("body {:?}", String::from_utf8_lossy(&s.body)));
            }
        }
        "bare_lf" => {
            let s = first.ok_or("nothing forwarded")?;
            if s.request_line() != "GET /lf HTTP/1.1" || s.header("host") != ["a"] {
                return Err(format!("{:?}", s.head));
            }
        }
        "chunk_size_overflow" if first.is_some_and(|s| s.complete) => {
            return Err("the body was forwarded whole".into());
        }
        _ => {}
    }
    Ok(())
}

#[test]
fn smuggling_and_malformed_request_table() {
    let mut failed = Vec::new();
    for r in rows() {
        let outcome = run(&r);
        println!(
            "{:32} {:?} closes={} forwarded={}: {}",
            r.name,
            r.statuses,
            r.closes,
            if r.forwarded == usize::MAX {
                "at most 1".to_string()
            } else {
                r.forwarded.to_string()
            },
            match &outcome {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("FAILED: {e}"),
            }
        );
        if let Err(e) = outcome {
            failed.push(format!("{}: {e}", r.name));
        }
    }
    assert!(
        failed.is_empty(),
        "rows that failed:\n{}",
        failed.join("\n")
    );
}

#[test]
fn refusals_are_counted_by_kind() {
    let backend = Recorder::start();
    let (p, addr) = listener(&backend);
    for (request, _) in [
        (&b"CONNECT a:22 HTTP/1.1\r\nHost: a:22\r\n\r\n"[..], 405),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            501,
        ),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    ] {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(WAIT)).unwrap();
        c.write_all(request).unwrap();
        let mut buf = Vec::new();
        assert!(read_answer(&mut c, &mut buf).is_some());
    }
    let v = &p.listeners()[0];
    assert_eq!(v.stats.client_errors(ClientErrorKind::Unsupported), 2);
    assert_eq!(v.stats.client_errors(ClientErrorKind::BadRequest), 1);
    assert!(backend.seen().is_empty());
    p.shutdown(Duration::from_secs(2));
}

/// What the backend sees of `X-Forwarded-For` and `Forwarded` for a request whose client
/// wrote two lines of each, under a listener configured by `set`.
fn forwarding_seen(set: impl FnOnce(&mut ListenerSpec)) -> (Vec<String>, Vec<String>) {
    let backend = Recorder::start();
    let mut s = spec("fwd", Protocol::Http, vec![backend.upstream()]);
    set(&mut s);
    let (p, addr) = proxy(s);
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 10.9.9.9\r\nForwarded: for=10.9.9.9\r\n\
          X-Forwarded-For: 10.8.8.8, 10.7.7.7\r\nForwarded: for=10.8.8.8\r\n\r\n",
    )
    .unwrap();
    let mut buf = Vec::new();
    assert_eq!(read_answer(&mut c, &mut buf).map(|a| a.status), Some(200));
    let seen = backend.seen();
    p.shutdown(Duration::from_secs(2));
    assert_eq!(seen.len(), 1);
    (
        seen[0].header("x-forwarded-for"),
        seen[0].header("forwarded"),
    )
}

#[test]
fn forwarding_headers_a_client_wrote_reach_the_backend_only_from_a_trusted_proxy() {
    let loopback = Prefix::new("127.0.0.0".parse().unwrap(), 8).unwrap();
    // The defaults: X-Forwarded-For appended to a trusted proxy's only, Forwarded off. Here no
    // client is trusted: both lines of each are gone.
    let (xff, fwd) = forwarding_seen(|_| {});
    assert_eq!(
        xff,
        ["127.0.0.1"],
        "every forged line replaced, not only the first"
    );
    assert!(
        fwd.is_empty(),
        "an untrusted client's Forwarded removed: {fwd:?}"
    );
    // A trusted proxy in front: its lines, merged in order, then its address.
    let (xff, fwd) = forwarding_seen(|s| {
        s.http.trusted_proxies = vec![loopback];
        s.http.forwarded = ForwardedMode::Append;
    });
    assert_eq!(xff, ["10.9.9.9, 10.8.8.8, 10.7.7.7, 127.0.0.1"]);
    assert_eq!(
        fwd,
        ["for=10.9.9.9, for=10.8.8.8, for=127.0.0.1;proto=http"]
    );
    // replace: the edge of the network, trusted or not.
    let (xff, _) = forwarding_seen(|s| {
        s.http.trusted_proxies = vec![loopback];
        s.http.forwarded_for = ForwardedMode::Replace;
    });
    assert_eq!(xff, ["127.0.0.1"]);
    // off: nothing added; an untrusted client's lines removed, a trusted one's passed on.
    let (xff, _) = forwarding_seen(|s| s.http.forwarded_for = ForwardedMode::Off);
    assert!(xff.is_empty(), "{xff:?}");
    let (xff, _) = forwarding_seen(|s| {
        s.http.forwarded_for = ForwardedMode::Off;
        s.http.trusted_proxies = vec![loopback];
    });
    assert_eq!(xff, ["10.9.9.9", "10.8.8.8, 10.7.7.7"]);
}
