//! The steering tests' lab: a server namespace and a client namespace joined by a veth pair,
//! the client with 64 IPv4 and 64 IPv6 addresses; reuseport workers (TCP and UDP) that answer
//! with their worker id; clients that record which worker answered each connection.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use stator_lab::netns::{self, Netns};
use stator_steer::{ReuseportSteering, SteeringTable};

/// Clients (source addresses) per family.
pub const CLIENTS: usize = 64;
/// The servers' port.
pub const PORT: u16 = 8080;

pub use stator_lab::netns::require_root;

/// TCP or UDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

/// IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

/// Two namespaces joined by veth; removed when dropped (also on failure).
pub struct Lab {
    pub server: Netns,
    pub client: Netns,
}

impl Lab {
    /// Creates `sts<pid><tag>` and `stc<pid><tag>`; the server has 10.77.0.1/16 and fd77::1/64,
    /// the client 10.77.1.1–64 and fd77::1:1–64.
    pub fn new(tag: &str) -> Self {
        require_root();
        let pid = std::process::id();
        let (server, client) = netns::pair(
            &format!("sts{pid}{tag}"),
            "vs",
            &format!("stc{pid}{tag}"),
            "vc",
        )
        .expect("server and client namespaces joined by veth");
        let lab = Self { server, client };
        lab.server
            .addr_add("vs", "10.77.0.1/16")
            .expect("server v4");
        lab.server.addr_add("vs", "fd77::1/64").expect("server v6");
        let mut batch = String::new();
        for i in 1..=CLIENTS {
            batch += &format!("addr add 10.77.1.{i}/16 dev vc\n");
            batch += &format!("addr add fd77::1:{i:x}/64 dev vc nodad\n");
        }
        lab.client.ip_batch(&batch).expect("client addresses");
        lab
    }

    /// The server's address of a family.
    pub fn server_addr(family: Family) -> SocketAddr {
        match family {
            Family::V4 => SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1)), PORT),
            Family::V6 => SocketAddr::new(IpAddr::V6("fd77::1".parse().expect("v6")), PORT),
        }
    }

    /// The client addresses of a family.
    pub fn client_ips(family: Family) -> Vec<IpAddr> {
        (1..=CLIENTS as u16)
            .map(|i| match family {
                Family::V4 => IpAddr::V4(Ipv4Addr::new(10, 77, 1, i as u8)),
                Family::V6 => IpAddr::V6(Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 1, i)),
            })
            .collect()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.server.clone().delete();
        let _ = self.client.clone().delete();
    }
}

/// A `SO_REUSEPORT` socket bound to `addr` (listening, for TCP), created in `ns`.
pub fn reuseport_socket(ns: &Netns, proto: Proto, addr: SocketAddr) -> Socket {
    ns.run_in(move || {
        let (ty, p) = match proto {
            Proto::Tcp => (Type::STREAM, Protocol::TCP),
            Proto::Udp => (Type::DGRAM, Protocol::UDP),
        };
        let s = Socket::new(Domain::for_address(addr), ty, Some(p)).expect("socket");
        s.set_reuse_port(true).expect("SO_REUSEPORT");
        s.set_reuse_address(true).expect("SO_REUSEADDR");
        if addr.is_ipv6() {
            s.set_only_v6(true).expect("IPV6_V6ONLY");
        }
        s.bind(&SockAddr::from(addr)).expect("bind");
        if proto == Proto::Tcp {
            s.listen(4096).expect("listen");
        }
        s.set_read_timeout(Some(Duration::from_millis(50)))
            .expect("SO_RCVTIMEO");
        s
    })
    .expect("enter the server namespace")
}

/// N workers, each serving its own socket on a thread: TCP workers accept and write their id
/// (one byte) then close; UDP workers answer every datagram with their id. `accepting` gates
/// TCP accepts (to let requests pile up in accept queues).
pub struct Workers {
    pub sockets: Vec<Option<Arc<Socket>>>,
    stop: Arc<AtomicBool>,
    pub accepting: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    proto: Proto,
}

impl Workers {
    pub fn start(ns: &Netns, proto: Proto, addr: SocketAddr, n: u32) -> Self {
        Self::start_gated(ns, proto, addr, n, true)
    }

    /// Like [`Workers::start`]; TCP workers accept only once `accepting` is set.
    pub fn start_gated(
        ns: &Netns,
        proto: Proto,
        addr: SocketAddr,
        n: u32,
        accepting: bool,
    ) -> Self {
        let mut w = Self {
            sockets: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            accepting: Arc::new(AtomicBool::new(accepting)),
            threads: Vec::new(),
            proto,
        };
        for id in 0..n {
            let s = Arc::new(reuseport_socket(ns, proto, addr));
            w.spawn(id, s.clone());
            w.sockets.push(Some(s));
        }
        w
    }

    /// Serves `socket` as worker `id` (a worker restarted with a new socket).
    pub fn spawn(&mut self, id: u32, socket: Arc<Socket>) {
        let stop = self.stop.clone();
        let accepting = self.accepting.clone();
        let proto = self.proto;
        let handle = std::thread::Builder::new()
            .name(format!("worker-{id}"))
            .spawn(move || serve(id, &socket, proto, &stop, &accepting))
            .expect("spawn worker");
        self.threads.push(handle);
    }

    /// Puts every worker's socket into the steering group and attaches the program.
    pub fn steer(&self, steering: &mut ReuseportSteering) {
        for (id, s) in self.sockets.iter().enumerate() {
            if let Some(s) = s {
                steering
                    .set_socket(id as u32, s.as_fd())
                    .expect("set_socket");
            }
        }
        let first = self.sockets.iter().flatten().next().expect("a socket");
        steering.attach(first.as_fd()).expect("attach");
    }

    /// Closes worker `id`'s socket (its thread stops using it; the fd closes when the thread
    /// lets go of it).
    pub fn close(&mut self, id: u32) -> Arc<Socket> {
        let s = self.sockets[id as usize]
            .take()
            .expect("worker has a socket");
        // shutdown unhashes the listener now, whatever else still holds the Arc
        let _ = s.shutdown(std::net::Shutdown::Both);
        s
    }

    /// Which workers have an open socket.
    pub fn live(&self) -> Vec<u32> {
        (0..self.sockets.len() as u32)
            .filter(|&i| self.sockets[i as usize].is_some())
            .collect()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn serve(id: u32, socket: &Socket, proto: Proto, stop: &AtomicBool, accepting: &AtomicBool) {
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 64];
    while !stop.load(Ordering::SeqCst) {
        match proto {
            Proto::Tcp => {
                if !accepting.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                match socket.accept() {
                    Ok((conn, _)) => {
                        // clients send nothing, so closing right away sends a FIN after the id
                        let mut conn: std::net::TcpStream = conn.into();
                        let _ = conn.write_all(&[id as u8]);
                    }
                    Err(e) if is_timeout(&e) => {}
                    Err(_) => return, // the socket was shut down
                }
            }
            Proto::Udp => match socket.recv_from(&mut buf) {
                Ok((_, from)) => {
                    let _ = socket.send_to(&[id as u8], &from);
                }
                Err(e) if is_timeout(&e) => {}
                Err(_) => return,
            },
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// One answered connection or datagram: the client's address and port, and the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub client: SocketAddr,
    pub worker: u32,
}

/// What a round of traffic gave.
#[derive(Debug, Default)]
pub struct Round {
    pub answers: Vec<Answer>,
    /// Connections or datagrams that got no answer (counted, with the last error).
    pub failed: usize,
    pub last_error: Option<String>,
    /// Datagrams sent (UDP: with retries); connections attempted (TCP).
    pub sent: usize,
}

impl Round {
    /// Client address → the set of workers that answered it.
    pub fn workers_by_client(&self) -> BTreeMap<IpAddr, BTreeSet<u32>> {
        let mut m: BTreeMap<IpAddr, BTreeSet<u32>> = BTreeMap::new();
        for a in &self.answers {
            m.entry(a.client.ip()).or_default().insert(a.worker);
        }
        m
    }

    /// Clients answered by more than one worker.
    pub fn split_clients(&self) -> usize {
        self.workers_by_client()
            .values()
            .filter(|w| w.len() > 1)
            .count()
    }

    /// Answers per worker (index = worker id).
    pub fn per_worker(&self, workers: u32) -> Vec<usize> {
        let mut v = vec![0; workers as usize];
        for a in &self.answers {
            if let Some(n) = v.get_mut(a.worker as usize) {
                *n += 1;
            }
        }
        v
    }

    /// Answers that reached a worker other than their client's most frequent one: the
    /// connections a per-worker session table would not recognise.
    pub fn off_majority(&self) -> usize {
        let mut per: BTreeMap<IpAddr, BTreeMap<u32, usize>> = BTreeMap::new();
        for a in &self.answers {
            *per.entry(a.client.ip())
                .or_default()
                .entry(a.worker)
                .or_default() += 1;
        }
        per.values()
            .map(|w| w.values().sum::<usize>() - w.values().max().copied().unwrap_or(0))
            .sum()
    }

    /// Answers whose worker differs from `predict(client)` (`None`: the kernel's hash decides,
    /// any worker is right).
    pub fn mispredicted(&self, predict: impl Fn(SocketAddr) -> Option<u32>) -> Vec<Answer> {
        self.answers
            .iter()
            .copied()
            .filter(|a| predict(a.client).is_some_and(|w| w != a.worker))
            .collect()
    }
}

/// `per_client` connections (TCP) or datagrams (UDP) from each client address to `server`,
/// from `threads` concurrent client threads in `ns`, each connection from a fresh source port.
pub fn drive(
    ns: &Netns,
    proto: Proto,
    server: SocketAddr,
    clients: &[IpAddr],
    per_client: usize,
    threads: usize,
) -> Round {
    let work: Vec<IpAddr> = (0..per_client)
        .flat_map(|_| clients.iter().copied())
        .collect();
    let chunks: Vec<Vec<IpAddr>> = (0..threads)
        .map(|t| work.iter().copied().skip(t).step_by(threads).collect())
        .collect();
    let handles: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            ns.spawn_thread(move || {
                let mut round = Round::default();
                for ip in chunk {
                    let r = match proto {
                        Proto::Tcp => tcp_once(ip, server),
                        Proto::Udp => udp_once(ip, server, &mut round.sent),
                    };
                    match r {
                        Ok(a) => round.answers.push(a),
                        Err(e) => {
                            round.failed += 1;
                            round.last_error = Some(e.to_string());
                        }
                    }
                    if proto == Proto::Tcp {
                        round.sent += 1;
                    }
                }
                round
            })
            .expect("client thread")
        })
        .collect();
    let mut total = Round::default();
    for h in handles {
        let r = h.join().expect("client thread panicked");
        total.answers.extend(r.answers);
        total.failed += r.failed;
        total.sent += r.sent;
        if r.last_error.is_some() {
            total.last_error = r.last_error;
        }
    }
    total
}

/// A TCP connection from `ip` (any port) to `server`, with its local address.
pub fn tcp_connect(
    ip: IpAddr,
    server: SocketAddr,
) -> std::io::Result<(std::net::TcpStream, SocketAddr)> {
    let s = Socket::new(
        Domain::for_address(server),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    s.bind(&SockAddr::from(SocketAddr::new(ip, 0)))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.connect_timeout(&SockAddr::from(server), Duration::from_secs(5))?;
    let client = s
        .local_addr()?
        .as_socket()
        .ok_or_else(|| std::io::Error::other("no local address"))?;
    Ok((s.into(), client))
}

/// One TCP connection from `ip`: the worker id the server wrote.
pub fn tcp_once(ip: IpAddr, server: SocketAddr) -> std::io::Result<Answer> {
    let (mut stream, client) = tcp_connect(ip, server)?;
    let mut id = [0u8; 1];
    stream.read_exact(&mut id)?;
    Ok(Answer {
        client,
        worker: u32::from(id[0]),
    })
}

/// One datagram exchange from `ip` (retried twice on a lost answer; every send counted).
fn udp_once(ip: IpAddr, server: SocketAddr, sent: &mut usize) -> std::io::Result<Answer> {
    let s = Socket::new(
        Domain::for_address(server),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    s.bind(&SockAddr::from(SocketAddr::new(ip, 0)))?;
    s.connect(&SockAddr::from(server))?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    let client = s
        .local_addr()?
        .as_socket()
        .ok_or_else(|| std::io::Error::other("no local address"))?;
    let udp: std::net::UdpSocket = s.into();
    let mut last = None;
    for _ in 0..3 {
        *sent += 1;
        udp.send(b"which worker?")?;
        let mut id = [0u8; 8];
        match udp.recv(&mut id) {
            Ok(n) if n >= 1 => {
                return Ok(Answer {
                    client,
                    worker: u32::from(id[0]),
                });
            }
            Ok(_) => last = Some(std::io::Error::other("empty answer")),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no answer")))
}

/// The worker the program picks for `client` given the workers with a socket.
pub fn predict(table: &SteeringTable, live: &[u32], client: SocketAddr) -> Option<u32> {
    table.pick(client, |w| live.contains(&w)).worker()
}

/// Checks that the program decided every one of `sent` connections or datagrams: it ran at
/// least once for each. The kernel may look a listener up twice for one connection (CI saw
/// 1,281 runs for 1,280 TCP connections once; a SYN-cookie ACK or a SYN meeting a TIME_WAIT
/// socket looks the listener up again), so a few extra runs are allowed, never a systematic
/// second run. Returns the extra runs.
pub fn assert_every_one_decided(
    counted: &stator_steer::SteerCounters,
    sent: usize,
    what: &str,
) -> u64 {
    let (runs, sent) = (counted.runs(), sent as u64);
    assert!(
        runs >= sent && runs <= sent + sent / 100 + 1,
        "{what}: the program ran {runs} times for {sent} ({counted})"
    );
    runs - sent
}
