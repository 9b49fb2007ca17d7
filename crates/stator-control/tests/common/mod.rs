//! Test infrastructure: a network namespace per test with addresses on a dummy interface, real
//! TCP/HTTP/UDP servers inside it, pin directories on bpffs, a runtime whose threads live in
//! the namespace, and a node started over the real XDP forwarder.
#![allow(dead_code)] // each test file uses a different part

pub mod prom;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use stator_control::xdp::XdpPlane;
use stator_control::{Node, NodeOptions};
use stator_lab::netns::{Netns, is_root};
use stator_xdp::{ConntrackMode, XdpOptions};

/// Fails the test with a clear message unless it runs as root.
pub fn require_root() {
    assert!(
        is_root(),
        "this test creates network namespaces and loads BPF programs: run it as root \
         (cargo test -p stator-control --release as root)"
    );
}

/// A network namespace `sct-<tag>-<pid>` with an interface `d0` (one end of a veth pair
/// whose other end, `d1`, is in the same namespace: this kernel has no dummy driver) holding
/// `10.<net>.0.1` to `10.<net>.0.20` (/24), forwarding on. Removed when dropped.
#[derive(Debug)]
pub struct Lab {
    pub ns: Netns,
    pub net: u8,
}

impl Lab {
    pub fn new(tag: &str, net: u8) -> Self {
        require_root();
        let name = format!("sct-{tag}-{}", std::process::id() % 100_000);
        let ns = Netns::create(&name).unwrap();
        ns.ip(["link", "add", "d0", "type", "veth", "peer", "name", "d1"])
            .unwrap();
        ns.ip(["link", "set", "d1", "up"]).unwrap();
        for host in 1..=20 {
            ns.ip(["addr", "add", &format!("10.{net}.0.{host}/24"), "dev", "d0"])
                .unwrap();
        }
        ns.ip(["link", "set", "d0", "up"]).unwrap();
        ns.sysctl("net.ipv4.conf.all.forwarding", "1").unwrap();
        ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        Self { ns, net }
    }

    /// `10.<net>.0.<host>`.
    pub fn addr(&self, host: u8) -> String {
        format!("10.{}.0.{host}", self.net)
    }

    /// Runs `f` on a thread inside the namespace (threads and sockets it creates stay there).
    pub fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        self.ns.run_in(f).unwrap()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.ns.clone().delete();
    }
}

/// A multi-thread runtime whose threads are created by the calling thread (so they share its
/// network namespace).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A pin directory on the host's bpffs, purged when dropped.
#[derive(Debug)]
pub struct Pins {
    pub path: PathBuf,
}

impl Pins {
    pub fn new(tag: &str) -> Self {
        let path = PathBuf::from(format!(
            "/sys/fs/bpf/stator-ctl-{tag}-{}",
            std::process::id() % 100_000
        ));
        let _ = stator_xdp::detach_all(&path);
        let _ = stator_xdp::purge(&path);
        Self { path }
    }

    /// Loader options: shared connection table, small maps.
    pub fn options(&self, slots_per_gen: u32) -> XdpOptions {
        xdp_options(&self.path, slots_per_gen)
    }
}

/// Loader options for pins at `path`: shared connection table, small maps.
pub fn xdp_options(path: &Path, slots_per_gen: u32) -> XdpOptions {
    XdpOptions {
        pin_path: path.to_path_buf(),
        conntrack: ConntrackMode::Shared,
        ct_entries: 4096,
        slots_per_gen,
        ..XdpOptions::default()
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        let _ = stator_xdp::detach_all(&self.path);
        let _ = stator_xdp::purge(&self.path);
    }
}

/// The `[node]` and `[dataplane]` of a test node in `lab` (pins, shared table).
pub fn node_toml(lab: &Lab, pins: &Pins, slots: u32) -> String {
    format!(
        "[node]\nname = \"t\"\naddress_v4 = \"{}\"\n[dataplane]\ninterfaces = [\"d0\"]\n\
         pin_path = \"{}\"\nconntrack = \"shared\"\nconntrack_entries = 4096\n\
         slots_per_generation = {slots}\n",
        lab.addr(1),
        pins.path.display()
    )
}

/// Starts a node over the real XDP forwarder (loaded with `opts`, not attached), its API on
/// an ephemeral port. Call inside the lab's thread, with the lab's runtime.
pub fn start_node(rt: &tokio::runtime::Runtime, toml: &str, opts: &XdpOptions) -> Node {
    let plane = XdpPlane::load(opts).unwrap();
    rt.block_on(Node::start(
        toml.to_owned(),
        "test.toml".into(),
        NodeOptions {
            plane: Some(Box::new(plane)),
            no_attach: true,
            no_preflight: true,
            listen: Some("127.0.0.1:0".parse().unwrap()),
            ..NodeOptions::default()
        },
    ))
    .unwrap()
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
/// delay before answering.
pub type Responder = dyn Fn(usize, &str) -> (u16, Duration) + Send + Sync;

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

/// Reads the active snapshot back from the pinned maps (what packets see).
pub fn active_snapshot(pins: &Path) -> stator_core::Snapshot {
    stator_xdp::Maps::open(pins)
        .unwrap()
        .active_snapshot()
        .unwrap()
        .expect("a snapshot is committed")
}
