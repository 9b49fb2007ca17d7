//! Test infrastructure. Every test file uses a part:
//! - here: real TCP, HTTP and UDP servers (threads, one per connection) and a bounded wait;
//! - [`sim`]: a node over the core plane (no root), its backends routed to servers on
//!   loopback, and the paused-clock helpers;
//! - [`netns`]: a network namespace, pins on a private bpffs, a node over the real XDP
//!   forwarder (root);
//! - [`prom`]: a strict checker of `/metrics`.
#![allow(dead_code)] // each test file uses a different part

pub mod netns;
pub mod prom;
pub mod sim;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use stator_api::client::ApiClient;

/// A multi-thread runtime (two workers) for tests on real time; its threads are created by the
/// calling thread, so they share its network namespace.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A path for a test node's API socket that no other test (of this binary or another) uses,
/// in the temporary directory (sticky, so no other user can take the name over). The node
/// removes the socket when it shuts down.
pub fn api_socket_path() -> std::path::PathBuf {
    stator_testkit::scratch::unique_path("stator-api", ".sock")
}

/// A node started from `toml` as `stator run` would (its own plane, whatever the config's
/// `dataplane.mode` says), its API on a private Unix socket, and a client of that API.
pub fn start_node(rt: &tokio::runtime::Runtime, toml: String) -> (stator_node::Node, ApiClient) {
    let node = rt
        .block_on(stator_node::Node::start(
            toml,
            "t.toml".into(),
            stator_node::NodeOptions {
                socket: Some(api_socket_path()),
                ..stator_node::NodeOptions::default()
            },
        ))
        .unwrap();
    let api = ApiClient::unix(node.api_socket());
    (node, api)
}

/// The listener named `name` in a `GET /v1/listeners` answer.
pub fn listener<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("no listener {name} in {v}"))
}

/// A loopback TCP port for a listener the node will bind, held until the test process exits:
/// a socket bound to it with `SO_REUSEPORT` and `SO_REUSEADDR` and never listening. The node's
/// own socket (both options, same user) binds beside it, while nothing else can take the port
/// in between — not another test's `bind(0)`, not an outgoing connection's ephemeral port
/// (connect skips explicitly bound ports). A port only picked free and released raced the
/// node's bind in CI ("Address already in use"). A socket that never listens receives no
/// connections.
pub fn free_tcp_port() -> u16 {
    static HELD: std::sync::Mutex<Vec<socket2::Socket>> = std::sync::Mutex::new(Vec::new());
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_reuse_address(true).unwrap();
    s.set_reuse_port(true).unwrap();
    s.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let port = s.local_addr().unwrap().as_socket().unwrap().port();
    HELD.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(s);
    port
}

/// A loopback UDP port nothing is bound to (it was free a moment ago).
pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `f` every 10 ms until it is true; panics with `what` after `timeout`. Returns the
/// time it took.
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

/// A TCP server that accepts and counts connections until stopped (then the port refuses).
#[derive(Debug)]
pub struct TcpServer {
    pub addr: SocketAddr,
    pub accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TcpServer {
    /// Binds `addr` (call inside the namespace).
    pub fn start(addr: &str) -> Self {
        let listener = TcpListener::bind(addr).unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s) = (Arc::clone(&accepted), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                if conn.is_ok() {
                    a.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        Self {
            addr,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    /// Closes the listener: further connections are refused. Call inside the namespace.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// What an HTTP test server answers to its n-th request (from 1) for a path: status, and a
/// delay before answering ([`HANG`]: never answer; the connection stays open until the
/// client closes it).
pub type Responder = dyn Fn(usize, &str) -> (u16, Duration) + Send + Sync;

/// A [`Responder`] delay meaning "never answer".
pub const HANG: Duration = Duration::MAX;

/// A tiny HTTP/1.1 server: one thread per connection, answers per a [`Responder`].
#[derive(Debug)]
pub struct HttpServer {
    pub addr: SocketAddr,
    pub requests: Arc<AtomicUsize>,
}

impl HttpServer {
    /// Binds `addr` (call inside the namespace).
    pub fn start(addr: &str, respond: Arc<Responder>) -> Self {
        let listener = TcpListener::bind(addr).unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&requests);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let respond = Arc::clone(&respond);
                let count = Arc::clone(&count);
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&buf);
                    let path = text.split(' ').nth(1).unwrap_or("/").to_owned();
                    let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                    let (status, delay) = respond(n, &path);
                    if delay == HANG {
                        while matches!(conn.read(&mut chunk), Ok(n) if n > 0) {}
                        return;
                    }
                    std::thread::sleep(delay);
                    let body = format!("{status}\n");
                    let _ = write!(
                        conn,
                        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Self { addr, requests }
    }
}

/// A UDP server that answers each datagram with `reply(datagram)` (or not at all).
#[derive(Debug)]
pub struct UdpServer {
    pub addr: SocketAddr,
    pub received: Arc<AtomicUsize>,
}

impl UdpServer {
    /// Binds `addr` (call inside the namespace).
    pub fn start(addr: &str, reply: impl Fn(&[u8]) -> Option<Vec<u8>> + Send + 'static) -> Self {
        let socket = UdpSocket::bind(addr).unwrap();
        let addr = socket.local_addr().unwrap();
        let received = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&received);
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                count.fetch_add(1, Ordering::SeqCst);
                if let Some(r) = reply(&buf[..n]) {
                    let _ = socket.send_to(&r, from);
                }
            }
        });
        Self { addr, received }
    }
}
