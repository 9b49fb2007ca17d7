//! Backend servers and their clients, for end-to-end tests: small, real socket servers that say
//! which backend answered.
//!
//! - [`Server::tcp_identify`]: reads one line, answers `"<name> <line>\n"` and closes;
//! - [`Server::http`]: answers any HTTP/1.x request with `200 OK`, an `X-Backend: <name>`
//!   header and `<name>\n` as the body, then closes;
//! - [`Server::udp_echo`]: answers each datagram with `"<name> "` + the datagram;
//! - [`Server::tcp_echo`]: a long-lived connection: answers every line with `"<name> <line>\n"`
//!   until the client closes or stays silent for [`ECHO_IDLE`].
//!
//! A server's socket is bound inside a namespace (by a thread that entered it), on any address
//! the namespace has — in a DSR lab, the VIP on `lo`. Each connection gets its own thread; every
//! read has a timeout, so a stuck client cannot hold a server. The server stops (and its thread
//! is joined) when the [`Server`] is dropped. The client functions bind an explicit source
//! address when asked (socket2), so a test can vary it.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::netns::{Netns, NetnsError, Result};

/// How long a server waits for a client's bytes.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a server's loop looks at its stop flag.
const POLL: Duration = Duration::from_millis(2);
/// The longest request a server reads.
const MAX_REQUEST: usize = 8192;
/// How long a [`Server::tcp_echo`] connection may stay silent before the server closes it.
pub const ECHO_IDLE: Duration = Duration::from_secs(300);

/// What a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Identify,
    Http,
    Echo,
}

/// A server running on a thread inside a namespace; stopped and joined on drop.
#[derive(Debug)]
pub struct Server {
    name: String,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// A TCP server on `addr` in `ns` that answers one line with `"<name> <line>\n"`.
    pub fn tcp_identify(ns: &Netns, addr: SocketAddr, name: &str) -> Result<Self> {
        Self::tcp(ns, addr, name, Kind::Identify)
    }

    /// An HTTP/1.x server on `addr` in `ns`: `200 OK`, header `X-Backend: <name>`, body
    /// `<name>\n`, for every request.
    pub fn http(ns: &Netns, addr: SocketAddr, name: &str) -> Result<Self> {
        Self::tcp(ns, addr, name, Kind::Http)
    }

    /// A TCP server on `addr` in `ns` for long-lived connections: every line gets
    /// `"<name> <line>\n"`; counts answers (lines), not connections.
    pub fn tcp_echo(ns: &Netns, addr: SocketAddr, name: &str) -> Result<Self> {
        Self::tcp(ns, addr, name, Kind::Echo)
    }

    /// A UDP server on `addr` in `ns` that answers every datagram with `"<name> "` + it.
    pub fn udp_echo(ns: &Netns, addr: SocketAddr, name: &str) -> Result<Self> {
        let (stop, served) = (Arc::<AtomicBool>::default(), Arc::<AtomicU64>::default());
        let (st, sv, tag) = (Arc::clone(&stop), Arc::clone(&served), name.to_string());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = ns.spawn_thread(move || {
            let sock = match UdpSocket::bind(addr).and_then(|s| {
                s.set_read_timeout(Some(POLL * 10))?;
                Ok(s)
            }) {
                Ok(s) => {
                    let _ = tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let mut buf = vec![0u8; 65536];
            while !st.load(Ordering::Relaxed) {
                let Ok((n, peer)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let mut reply = format!("{tag} ").into_bytes();
                reply.extend_from_slice(&buf[..n]);
                if sock.send_to(&reply, peer).is_ok() {
                    sv.fetch_add(1, Ordering::Relaxed);
                }
            }
        })?;
        Self::started(name, addr, stop, served, thread, &rx)
    }

    fn tcp(ns: &Netns, addr: SocketAddr, name: &str, kind: Kind) -> Result<Self> {
        let (stop, served) = (Arc::<AtomicBool>::default(), Arc::<AtomicU64>::default());
        let (st, sv, tag) = (Arc::clone(&stop), Arc::clone(&served), name.to_string());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = ns.spawn_thread(move || {
            let listener = match TcpListener::bind(addr).and_then(|l| {
                l.set_nonblocking(true)?;
                Ok(l)
            }) {
                Ok(l) => {
                    let _ = tx.send(Ok(()));
                    l
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let mut handlers: Vec<JoinHandle<()>> = Vec::new();
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (tag, sv, st) = (tag.clone(), Arc::clone(&sv), Arc::clone(&st));
                        handlers.push(std::thread::spawn(move || {
                            if kind == Kind::Echo {
                                let _ = echo(conn, &tag, &sv, &st);
                            } else if answer(conn, &tag, kind).is_ok() {
                                sv.fetch_add(1, Ordering::Relaxed);
                            }
                        }));
                        handlers.retain(|h| !h.is_finished());
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
                    Err(_) => std::thread::sleep(POLL),
                }
            }
            for h in handlers {
                let _ = h.join();
            }
        })?;
        Self::started(name, addr, stop, served, thread, &rx)
    }

    fn started(
        name: &str,
        addr: SocketAddr,
        stop: Arc<AtomicBool>,
        served: Arc<AtomicU64>,
        thread: JoinHandle<()>,
        bound: &std::sync::mpsc::Receiver<io::Result<()>>,
    ) -> Result<Self> {
        let fail = |source: io::Error| NetnsError::Spawn {
            cmd: format!("server {name} on {addr}"),
            source,
        };
        match bound.recv() {
            Ok(Ok(())) => Ok(Self {
                name: name.to_string(),
                addr,
                stop,
                served,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(fail(e))
            }
            Err(_) => Err(fail(io::Error::other("server thread died"))),
        }
    }

    /// The server's name (what it answers with).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests answered so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads what the client sends until `done` says the request is complete (or EOF).
fn read_request(conn: &mut TcpStream, done: impl Fn(&[u8]) -> bool) -> io::Result<Vec<u8>> {
    conn.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while !done(&req) && req.len() < MAX_REQUEST {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        req.extend_from_slice(&buf[..n]);
    }
    Ok(req)
}

/// Answers line after line until EOF, [`ECHO_IDLE`] of silence, or `stop`.
fn echo(mut conn: TcpStream, name: &str, served: &AtomicU64, stop: &AtomicBool) -> io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    conn.set_read_timeout(Some(POLL * 100))?;
    let mut pending = Vec::new();
    let mut buf = [0u8; 1024];
    let mut last = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) && last.elapsed() < ECHO_IDLE {
        let n = match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        last = std::time::Instant::now();
        pending.extend_from_slice(&buf[..n]);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]);
            conn.write_all(format!("{name} {}\n", line.trim_end_matches('\r')).as_bytes())?;
            served.fetch_add(1, Ordering::Relaxed);
        }
        if pending.len() > MAX_REQUEST {
            break;
        }
    }
    conn.shutdown(std::net::Shutdown::Both)
}

fn answer(mut conn: TcpStream, name: &str, kind: Kind) -> io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    match kind {
        // (echo connections are served by `echo`; answering one line is its first step)
        Kind::Identify | Kind::Echo => {
            let req = read_request(&mut conn, |r| r.contains(&b'\n'))?;
            let line = String::from_utf8_lossy(&req);
            let line = line.lines().next().unwrap_or("");
            conn.write_all(format!("{name} {line}\n").as_bytes())?;
        }
        Kind::Http => {
            read_request(&mut conn, |r| r.windows(4).any(|w| w == b"\r\n\r\n"))?;
            let body = format!("{name}\n");
            conn.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                     X-Backend: {name}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )?;
        }
    }
    conn.shutdown(std::net::Shutdown::Write)
}

/// A connected TCP stream from `src` (port chosen by the kernel) to `dst`, or from the
/// kernel's choice of source when `src` is `None`.
pub fn tcp_connect(
    src: Option<IpAddr>,
    dst: SocketAddr,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let sock = Socket::new(Domain::for_address(dst), Type::STREAM, Some(Protocol::TCP))?;
    if let Some(src) = src {
        sock.bind(&SockAddr::from(SocketAddr::new(src, 0)))?;
    }
    sock.connect_timeout(&SockAddr::from(dst), timeout)?;
    let stream: TcpStream = sock.into();
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(stream)
}

/// One exchange with a [`Server::tcp_identify`]: sends `line`, returns the answer (without the
/// newline) and the local address the connection used.
pub fn tcp_identify(
    src: Option<IpAddr>,
    dst: SocketAddr,
    line: &str,
    timeout: Duration,
) -> io::Result<(String, SocketAddr)> {
    let mut s = tcp_connect(src, dst, timeout)?;
    let local = s.local_addr()?;
    s.write_all(format!("{line}\n").as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok((out.trim_end().to_string(), local))
}

/// `GET <path>` against a [`Server::http`] (directly, or through a proxy that may rewrite
/// header names' case): returns the status code and the `X-Backend` header.
pub fn http_get(
    src: Option<IpAddr>,
    dst: SocketAddr,
    path: &str,
    timeout: Duration,
) -> io::Result<(u16, Option<String>)> {
    let mut s = tcp_connect(src, dst, timeout)?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {dst}\r\nConnection: close\r\n\r\n").as_bytes(),
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| io::Error::other(format!("not an HTTP response: {out:?}")))?;
    // Header names are case-insensitive (RFC 9110 §5.1); the head ends at the first empty line.
    let backend = out.lines().take_while(|l| !l.is_empty()).find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("x-backend")
            .then(|| value.trim().to_string())
    });
    Ok((status, backend))
}

/// One datagram to a [`Server::udp_echo`]; returns the answer.
pub fn udp_request(
    src: Option<IpAddr>,
    dst: SocketAddr,
    payload: &[u8],
    timeout: Duration,
) -> io::Result<Vec<u8>> {
    let bind = src.unwrap_or(if dst.is_ipv6() {
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
    });
    let sock = UdpSocket::bind(SocketAddr::new(bind, 0))?;
    sock.set_read_timeout(Some(timeout))?;
    sock.send_to(payload, dst)?;
    let mut buf = vec![0u8; 65536];
    let (n, _) = sock.recv_from(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}
