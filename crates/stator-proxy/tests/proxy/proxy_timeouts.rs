//! Every wait of an exchange has an inactivity timeout: a client that stops reading
//! (`client_write`), a request body that stops arriving (`client_read`), a response body that
//! stops arriving (`upstream_read`), an upstream that stops reading (`upstream_write`) — for
//! HTTP and, where they apply, TCP listeners. Real sockets on loopback, raw peers that stall
//! on purpose, 300 ms limits; each test asserts what happened (the answer, the connection
//! closed on both sides, the counter), every wait bounded. Unprivileged.

#[allow(unused_imports)]
use crate::common;

use std::io::{ErrorKind as IoErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use crate::common::{Backend, proxy, read_head, spec};
use stator_proxy::{ClientErrorKind, ErrorKind, Protocol, UpstreamSpec};

/// The limit under test.
const LIMIT: Duration = Duration::from_millis(300);
/// The bound on every wait of a test (far above `LIMIT`: a loaded machine is slow, not
/// wrong).
const WAIT: Duration = Duration::from_secs(10);
/// A body far larger than every socket buffer between the two ends.
const HUGE: u64 = 256 * 1024 * 1024;

/// Polls `cond` every 10 ms for up to [`WAIT`]; whether it became true.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if cond() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads until the peer closes (end of stream or reset) or [`WAIT`] passes: the bytes, and
/// whether it closed.
fn read_to_close(s: &mut TcpStream) -> (Vec<u8>, bool) {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), IoErrorKind::WouldBlock | IoErrorKind::TimedOut) => {
                return (out, false);
            }
            Err(e) if e.kind() == IoErrorKind::Interrupted => {}
            Err(_) => return (out, true), // reset
        }
    }
}

/// A client socket with a tiny receive buffer, so that a client that does not read stops
/// the flow after a few kilobytes.
fn small_window_client(to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.connect(&to.into()).unwrap();
    s.into()
}

/// A listener on loopback whose accepted sockets have a tiny receive buffer.
fn small_window_listener() -> TcpListener {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    s.listen(16).unwrap();
    s.into()
}

/// A raw upstream: accepts one connection and runs `behave` on it in its own thread; the
/// test hears from it on the returned channel.
fn raw_upstream(
    listener: TcpListener,
    behave: impl FnOnce(TcpStream, mpsc::Sender<String>) + Send + 'static,
) -> (UpstreamSpec, mpsc::Receiver<String>) {
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if let Ok((s, _)) = listener.accept() {
            behave(s, tx);
        }
    });
    let up = UpstreamSpec {
        name: "raw".into(),
        addr,
        weight: 1,
    };
    (up, rx)
}

/// An upstream that reads a request head (`http`) or nothing, then stops reading — until the
/// test, having seen the timeout, says `go`: then it drains its socket to learn whether the
/// proxy closed the connection.
fn deaf_upstream(http: bool) -> (UpstreamSpec, mpsc::Receiver<String>, mpsc::Sender<()>) {
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (up, heard) = raw_upstream(small_window_listener(), move |mut s, tx| {
        if http {
            read_head(&mut s);
        }
        let _ = go_rx.recv_timeout(WAIT);
        let closed = peer_closed(&mut s);
        let _ = tx.send(format!("closed={closed}"));
    });
    (up, heard, go_tx)
}

/// Waits (bounded) until `s`'s peer has closed: reads until end of stream or an error.
fn peer_closed(s: &mut TcpStream) -> bool {
    read_to_close(s).1
}

#[test]
fn http_client_that_stops_reading_is_closed_after_client_write() {
    let a = Backend::start("a");
    let mut s = spec("cw", Protocol::Http, vec![a.upstream()]);
    s.timeouts.client_write = LIMIT;
    let (p, addr) = proxy(s);
    let mut c = small_window_client(addr);
    c.write_all(format!("GET /bytes/{HUGE} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    // The client reads nothing: the response stops at the window, then the proxy gives up.
    let v = &p.listeners()[0];
    assert!(
        eventually(|| v.stats.client_errors(ClientErrorKind::WriteTimeout) == 1),
        "client_write fired"
    );
    let (got, closed) = read_to_close(&mut c);
    assert!(closed, "the client connection was closed");
    assert!(got.starts_with(b"HTTP/1.1 200"), "the response had begun");
    assert!(
        (got.len() as u64) < HUGE,
        "and was cut: {} bytes",
        got.len()
    );
    // The upstream connection that was feeding it is released too.
    assert!(
        eventually(|| v.upstreams[0].stats.open.load(Ordering::Relaxed) == 0),
        "the upstream connection closed"
    );
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn http_request_body_that_stalls_gets_408_after_client_read() {
    let a = Backend::start("a");
    let mut s = spec("cr", Protocol::Http, vec![a.upstream()]);
    s.timeouts.client_read = LIMIT;
    let (p, addr) = proxy(s);
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
        .unwrap();
    c.write_all(&[7u8; 1000]).unwrap();
    // ... and then nothing more, the connection kept open.
    let (got, closed) = read_to_close(&mut c);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text:?}"
    );
    assert!(closed, "closed after the 408");
    let v = &p.listeners()[0];
    assert_eq!(v.stats.client_errors(ClientErrorKind::ReadTimeout), 1);
    assert_eq!(
        v.stats.client_errors(ClientErrorKind::UpstreamFailed),
        0,
        "the upstream is not to blame"
    );
    assert_eq!(
        a.requests.load(Ordering::SeqCst),
        1,
        "the request had gone out"
    );
    for k in ErrorKind::ALL {
        assert_eq!(v.upstreams[0].stats.errors(k), 0, "{}", k.label());
    }
    // The listener still serves.
    assert_eq!(common::Client::connect(addr).get("/").0, 200);
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn http_response_body_that_stalls_is_cut_after_upstream_read() {
    let (up, heard) = raw_upstream(TcpListener::bind("127.0.0.1:0").unwrap(), |mut s, tx| {
        read_head(&mut s);
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            .unwrap();
        s.write_all(&[b'x'; 50_000]).unwrap();
        // Half the body, then silence — until the proxy lets go.
        let closed = peer_closed(&mut s);
        let _ = tx.send(format!("closed={closed}"));
    });
    let mut s = spec("ur", Protocol::Http, vec![up]);
    s.timeouts.upstream_read = LIMIT;
    let (p, addr) = proxy(s);
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (got, closed) = read_to_close(&mut c);
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{:?}",
        &text[..text.len().min(80)]
    );
    let head_end = text.find("\r\n\r\n").unwrap() + 4;
    assert_eq!(
        got.len() - head_end,
        50_000,
        "the half that came, and no more"
    );
    assert!(closed, "the client connection was cut");
    assert_eq!(
        heard.recv_timeout(WAIT).unwrap(),
        "closed=true",
        "the upstream connection was closed"
    );
    let v = &p.listeners()[0];
    assert_eq!(v.upstreams[0].stats.errors(ErrorKind::ReadTimeout), 1);
    p.shutdown(Duration::from_secs(2));
}

/// A body that streams reaches the client piece by piece: the upstream sends the head and the
/// first piece, then waits until the client has that piece before it sends the rest. A proxy
/// that gathers small pieces for one write and waits for the next before writing holds the
/// first one back, and the client's wait runs out (caught once by a test run beside others:
/// the last 848 bytes of a stalled body never came).
#[test]
fn http_body_that_streams_reaches_the_client_piece_by_piece() {
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (up, heard) = raw_upstream(
        TcpListener::bind("127.0.0.1:0").unwrap(),
        move |mut s, tx| {
            read_head(&mut s);
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
                .unwrap();
            let asked = go_rx.recv_timeout(WAIT).is_ok();
            if asked {
                s.write_all(b"world").unwrap();
            }
            let _ = tx.send(format!("asked={asked}"));
        },
    );
    let (p, addr) = proxy(spec("st", Protocol::Http, vec![up]));
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"hello") {
        match c.read(&mut buf) {
            Ok(0) => panic!("closed early: {:?}", String::from_utf8_lossy(&got)),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!(
                "the first piece did not come ({e}): {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    go_tx.send(()).unwrap();
    while !got.ends_with(b"helloworld") {
        match c.read(&mut buf) {
            Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
            r => panic!("{r:?}: {:?}", String::from_utf8_lossy(&got)),
        }
    }
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
    assert_eq!(heard.recv_timeout(WAIT).unwrap(), "asked=true");
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn http_upstream_that_stops_reading_gets_504_after_upstream_write() {
    // Reads the head, nothing of the body, answers nothing.
    let (up, heard, go) = deaf_upstream(true);
    let mut s = spec("uw", Protocol::Http, vec![up]);
    s.timeouts.upstream_write = LIMIT;
    let (p, addr) = proxy(s);
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {HUGE}\r\n\r\n").as_bytes())
        .unwrap();
    let mut w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.set_write_timeout(Some(WAIT)).unwrap();
        let chunk = vec![1u8; 1 << 16];
        let mut sent = 0u64;
        while sent < HUGE && w.write_all(&chunk).is_ok() {
            sent += chunk.len() as u64;
        }
        sent
    });
    let (got, closed) = read_to_close(&mut c);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 504"), "{text:?}");
    assert!(closed, "closed after the 504");
    let sent = writer.join().unwrap();
    assert!(sent < HUGE, "the client could not send it all: {sent}");
    let v = &p.listeners()[0];
    assert_eq!(v.upstreams[0].stats.errors(ErrorKind::WriteTimeout), 1);
    go.send(()).unwrap();
    assert_eq!(
        heard.recv_timeout(WAIT).unwrap(),
        "closed=true",
        "upstream closed"
    );
    assert_eq!(v.stats.client_errors(ClientErrorKind::UpstreamFailed), 1);
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn tcp_client_that_stops_reading_is_closed_after_client_write_not_idle() {
    let (up, heard) = raw_upstream(TcpListener::bind("127.0.0.1:0").unwrap(), |mut s, tx| {
        // The other side has data, and more: it writes until the proxy lets go.
        s.set_write_timeout(Some(WAIT)).unwrap();
        let chunk = vec![9u8; 1 << 16];
        let mut sent = 0u64;
        let closed = loop {
            match s.write(&chunk) {
                Ok(n) => sent += n as u64,
                Err(e) => {
                    break !matches!(e.kind(), IoErrorKind::WouldBlock | IoErrorKind::TimedOut);
                }
            }
            if sent >= HUGE {
                break false;
            }
        };
        let _ = tx.send(format!("closed={closed}"));
    });
    let mut s = spec("tcw", Protocol::Tcp, vec![up]);
    s.timeouts.client_write = LIMIT;
    s.timeouts.idle = Duration::from_secs(3600); // not the timer that ends it
    let (p, addr) = proxy(s);
    let mut c = small_window_client(addr);
    let v = &p.listeners()[0];
    assert!(
        eventually(|| v.stats.client_errors(ClientErrorKind::WriteTimeout) == 1),
        "client_write fired"
    );
    assert_eq!(
        heard.recv_timeout(WAIT).unwrap(),
        "closed=true",
        "upstream closed"
    );
    let (got, closed) = read_to_close(&mut c);
    assert!(closed, "the client connection was closed");
    assert!((got.len() as u64) < HUGE);
    assert_eq!(v.stats.client_errors(ClientErrorKind::IdleTimeout), 0);
    p.shutdown(Duration::from_secs(2));
}

#[test]
fn tcp_upstream_that_stops_reading_is_closed_after_upstream_write_not_idle() {
    let (up, heard, go) = deaf_upstream(false);
    let mut s = spec("tuw", Protocol::Tcp, vec![up]);
    s.timeouts.upstream_write = LIMIT;
    s.timeouts.idle = Duration::from_secs(3600);
    let (p, addr) = proxy(s);
    let mut c = TcpStream::connect(addr).unwrap();
    let mut w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.set_write_timeout(Some(WAIT)).unwrap();
        let chunk = vec![1u8; 1 << 16];
        let mut sent = 0u64;
        while sent < HUGE && w.write_all(&chunk).is_ok() {
            sent += chunk.len() as u64;
        }
        sent
    });
    let v = &p.listeners()[0];
    assert!(
        eventually(|| v.upstreams[0].stats.errors(ErrorKind::WriteTimeout) == 1),
        "upstream_write fired"
    );
    let (_, closed) = read_to_close(&mut c);
    assert!(closed, "the client connection was closed");
    assert!(writer.join().unwrap() < HUGE);
    go.send(()).unwrap();
    assert_eq!(
        heard.recv_timeout(WAIT).unwrap(),
        "closed=true",
        "upstream closed"
    );
    assert_eq!(v.stats.client_errors(ClientErrorKind::IdleTimeout), 0);
    p.shutdown(Duration::from_secs(2));
}
