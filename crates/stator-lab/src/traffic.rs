//! Client-side load for a [`crate::deploy::Deployment`]: short HTTP connections, UDP
//! requests and long-lived TCP echo connections, from the client's many source addresses.
//!
//! Every load is bounded twice: a count and a deadline. Sockets are created on threads that
//! entered the client's namespace; a connected socket keeps working from any thread.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::netns::{Netns, Result};
use crate::serve::{http_get, tcp_connect, udp_request};

/// What a batch of requests got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Answers per backend name.
    pub per_backend: BTreeMap<String, usize>,
    /// Requests that failed (no answer, a wrong answer, or not sent before the deadline).
    pub failed: usize,
    /// The first failure, for messages.
    pub first_error: Option<String>,
    /// How long the batch took.
    pub took: Duration,
}

impl Tally {
    /// Answers in all.
    pub fn answered(&self) -> usize {
        self.per_backend.values().sum()
    }

    /// Each backend's share of the answers (0 for a backend that never answered).
    pub fn share(&self, backend: &str) -> f64 {
        let all = self.answered();
        if all == 0 {
            return 0.0;
        }
        self.per_backend.get(backend).copied().unwrap_or(0) as f64 / all as f64
    }

    fn merge(&mut self, other: Self) {
        for (b, n) in other.per_backend {
            *self.per_backend.entry(b).or_insert(0) += n;
        }
        self.failed += other.failed;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// Runs `n` requests over `threads` threads in `client`, request `i` from `srcs[i % len]`,
/// stopping at `deadline`; `one(src, i)` returns the backend that answered.
fn batch(
    client: &Netns,
    srcs: &[IpAddr],
    n: usize,
    threads: usize,
    deadline: Duration,
    one: impl Fn(IpAddr, usize) -> io::Result<String> + Send + Sync + 'static,
) -> Result<Tally> {
    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let one = Arc::new(one);
    let srcs: Arc<Vec<IpAddr>> = Arc::new(srcs.to_vec());
    let mut handles = Vec::new();
    for _ in 0..threads.max(1) {
        let (next, one, srcs) = (Arc::clone(&next), Arc::clone(&one), Arc::clone(&srcs));
        handles.push(client.spawn_thread(move || {
            let mut t = Tally::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                if start.elapsed() > deadline {
                    t.failed += 1;
                    t.first_error
                        .get_or_insert_with(|| format!("deadline of {deadline:?} passed"));
                    continue;
                }
                let src = srcs[i % srcs.len()];
                match one(src, i) {
                    Ok(b) => *t.per_backend.entry(b).or_insert(0) += 1,
                    Err(e) => {
                        t.failed += 1;
                        t.first_error
                            .get_or_insert_with(|| format!("request {i} from {src}: {e}"));
                    }
                }
            }
            t
        })?);
    }
    let mut all = Tally::default();
    for h in handles {
        if let Ok(t) = h.join() {
            all.merge(t);
        }
    }
    all.took = start.elapsed();
    Ok(all)
}

/// `n` short HTTP connections to `vip:port` (one `GET` each); the backend is the answer's
/// `X-Backend`.
pub fn http_batch(
    client: &Netns,
    srcs: &[IpAddr],
    vip: SocketAddr,
    n: usize,
    threads: usize,
    deadline: Duration,
) -> Result<Tally> {
    batch(
        client,
        srcs,
        n,
        threads,
        deadline,
        move |src, _| match http_get(Some(src), vip, "/", Duration::from_secs(5))? {
            (200, Some(b)) => Ok(b),
            other => Err(io::Error::other(format!("answer {other:?}"))),
        },
    )
}

/// `n` UDP requests to `vip:port`, each from a new socket (a new source port); the backend is
/// the first word of the answer, which must echo the request.
pub fn udp_batch(
    client: &Netns,
    srcs: &[IpAddr],
    vip: SocketAddr,
    n: usize,
    threads: usize,
    deadline: Duration,
) -> Result<Tally> {
    batch(client, srcs, n, threads, deadline, move |src, i| {
        let payload = format!("request {i}");
        let reply = udp_request(Some(src), vip, payload.as_bytes(), Duration::from_secs(2))?;
        let reply = String::from_utf8_lossy(&reply);
        match reply.split_once(' ') {
            Some((b, echoed)) if echoed == payload => Ok(b.to_owned()),
            _ => Err(io::Error::other(format!("answer {reply:?}"))),
        }
    })
}

/// One long-lived connection to the TCP echo service.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    /// The client's end.
    pub local: SocketAddr,
    /// The backend that answered the first line.
    pub backend: String,
    /// False once an exchange failed (the connection is not used again).
    pub alive: bool,
    pending: Vec<u8>,
}

impl Conn {
    /// Sends `line` and reads the answer; returns the backend that answered.
    fn exchange(&mut self, line: &str) -> io::Result<String> {
        self.stream.write_all(format!("{line}\n").as_bytes())?;
        let mut buf = [0u8; 512];
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let answer: Vec<u8> = self.pending.drain(..=end).collect();
                let answer = String::from_utf8_lossy(&answer[..end]).into_owned();
                return match answer.split_once(' ') {
                    Some((b, echoed)) if echoed == line => Ok(b.to_owned()),
                    _ => Err(io::Error::other(format!("answer {answer:?} to {line:?}"))),
                };
            }
            let n = self.stream.read(&mut buf)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed by the peer",
                ));
            }
            self.pending.extend_from_slice(&buf[..n]);
        }
    }
}

/// What one round over long-lived connections found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    /// Connections that were alive before the round.
    pub tried: usize,
    /// Those answered by the backend that answered their first line.
    pub same_backend: usize,
    /// Those answered by another backend.
    pub other_backend: usize,
    /// Those that failed (reset, closed, timed out).
    pub failed: usize,
    /// The first problem, for messages.
    pub first_error: Option<String>,
    /// How long the round took.
    pub took: Duration,
}

/// Long-lived TCP echo connections.
#[derive(Debug, Default)]
pub struct LongLived {
    /// The connections.
    pub conns: Vec<Conn>,
}

impl LongLived {
    /// Opens `n` connections to `vip:port` from `srcs` in turn (each says hello once, to learn
    /// its backend), `threads` at a time; a connection that fails is an error.
    pub fn open(
        client: &Netns,
        srcs: &[IpAddr],
        vip: SocketAddr,
        n: usize,
        threads: usize,
        timeout: Duration,
    ) -> Result<std::result::Result<Self, String>> {
        let mut handles = Vec::new();
        let threads = threads.max(1);
        for t in 0..threads {
            let srcs = srcs.to_vec();
            handles.push(client.spawn_thread(move || {
                let mut conns = Vec::new();
                for i in (t..n).step_by(threads) {
                    let src = srcs[i % srcs.len()];
                    let stream = tcp_connect(Some(src), vip, timeout)
                        .map_err(|e| format!("connection {i} from {src}: {e}"))?;
                    let local = stream.local_addr().map_err(|e| e.to_string())?;
                    let mut c = Conn {
                        stream,
                        local,
                        backend: String::new(),
                        alive: true,
                        pending: Vec::new(),
                    };
                    c.backend = c
                        .exchange(&format!("hello {i}"))
                        .map_err(|e| format!("connection {i} from {local}: {e}"))?;
                    conns.push(c);
                }
                Ok::<_, String>(conns)
            })?);
        }
        let mut all = Vec::new();
        for h in handles {
            match h.join() {
                Ok(Ok(c)) => all.extend(c),
                Ok(Err(e)) => return Ok(Err(e)),
                Err(_) => return Ok(Err("a client thread panicked".into())),
            }
        }
        Ok(Ok(Self { conns: all }))
    }

    /// Connections per backend (alive ones).
    pub fn per_backend(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for c in self.conns.iter().filter(|c| c.alive) {
            *m.entry(c.backend.clone()).or_insert(0) += 1;
        }
        m
    }

    /// Alive connections.
    pub fn alive(&self) -> usize {
        self.conns.iter().filter(|c| c.alive).count()
    }

    /// Sends one line on every alive connection and checks who answers, `threads` at a time,
    /// each read waiting up to `timeout` (long enough for TCP to retransmit through a
    /// failover). A failed connection is marked dead.
    pub fn round(&mut self, tag: &str, threads: usize, timeout: Duration) -> Round {
        let start = Instant::now();
        let conns = std::mem::take(&mut self.conns);
        let threads = threads.max(1);
        let mut chunks: Vec<Vec<Conn>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, c) in conns.into_iter().enumerate() {
            chunks[i % threads].push(c);
        }
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let tag = tag.to_owned();
                std::thread::spawn(move || {
                    let mut r = Round::default();
                    let mut chunk = chunk;
                    for c in chunk.iter_mut().filter(|c| c.alive) {
                        r.tried += 1;
                        let _ = c.stream.set_read_timeout(Some(timeout));
                        let line = format!("{tag} {}", c.local);
                        match c.exchange(&line) {
                            Ok(b) if b == c.backend => r.same_backend += 1,
                            Ok(b) => {
                                r.other_backend += 1;
                                r.first_error.get_or_insert_with(|| {
                                    format!("{} moved from {} to {b}", c.local, c.backend)
                                });
                            }
                            Err(e) => {
                                c.alive = false;
                                r.failed += 1;
                                r.first_error
                                    .get_or_insert_with(|| format!("{}: {e}", c.local));
                            }
                        }
                    }
                    (r, chunk)
                })
            })
            .collect();
        let mut all = Round::default();
        for h in handles {
            if let Ok((r, chunk)) = h.join() {
                all.tried += r.tried;
                all.same_backend += r.same_backend;
                all.other_backend += r.other_backend;
                all.failed += r.failed;
                if all.first_error.is_none() {
                    all.first_error = r.first_error;
                }
                self.conns.extend(chunk);
            }
        }
        all.took = start.elapsed();
        all
    }
}
