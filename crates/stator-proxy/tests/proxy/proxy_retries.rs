//! A backend that goes away costs no request that could have been retried: an idempotent
//! request whose upstream failed before the response head is sent again to another upstream
//! (never twice to one), a request with a body never is, and an upstream that failed is left
//! out of picks for `fail_timeout` (passive health) — checked with a real backend stopped and
//! restarted on the same port under kept-alive load, and with raw upstreams that close
//! connections under requests. Real sockets on loopback, every wait bounded. Unprivileged.

#[allow(unused_imports)]
use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::{Backend, Client, proxy, read_head, refused_addr, spec};
use hyper_util::rt::TokioIo;
use stator_proxy::{ErrorKind, ListenerView, PassiveSpec, Protocol, Proxy, UpstreamSpec};

/// The bound on every wait of a test.
const WAIT: Duration = Duration::from_secs(20);

/// Polls `cond` every 5 ms for up to [`WAIT`]; whether it became true.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WAIT;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn view(p: &Proxy, name: &str) -> ListenerView {
    p.listeners()
        .into_iter()
        .find(|v| v.spec.name == name)
        .unwrap()
}

/// An HTTP backend that can be stopped — its listening socket and every connection closed at
/// once, as when its process exits — and started again on the same address. Armed, it holds
/// the next request it gets without answering, until it is stopped: the test knows a request
/// was in flight when the backend went away.
struct Restartable {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    held: Arc<AtomicU64>,
    armed: Arc<AtomicBool>,
    running: Option<(tokio::sync::oneshot::Sender<()>, JoinHandle<()>)>,
}

impl Restartable {
    fn new() -> Self {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut b = Self {
            addr,
            requests: Arc::new(AtomicU64::new(0)),
            held: Arc::new(AtomicU64::new(0)),
            armed: Arc::new(AtomicBool::new(false)),
            running: None,
        };
        b.start();
        b
    }

    fn upstream(&self) -> UpstreamSpec {
        UpstreamSpec {
            name: "restarting".into(),
            addr: self.addr,
            weight: 1,
        }
    }

    fn start(&mut self) {
        assert!(self.running.is_none());
        // std sets SO_REUSEADDR: the port binds again while old connections sit in TIME_WAIT
        let deadline = Instant::now() + WAIT;
        let std = loop {
            match TcpListener::bind(self.addr) {
                Ok(l) => break l,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("rebinding {}: {e}", self.addr);
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("rebinding {}: {e}", self.addr),
            }
        };
        std.set_nonblocking(true).unwrap();
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let (requests, held, armed) = (
            Arc::clone(&self.requests),
            Arc::clone(&self.held),
            Arc::clone(&self.armed),
        );
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move {
                let listener = tokio::net::TcpListener::from_std(std).unwrap();
                loop {
                    let stream = tokio::select! {
                        _ = &mut rx => return,
                        a = listener.accept() => match a {
                            Ok((s, _)) => s,
                            Err(_) => continue,
                        },
                    };
                    let (requests, held, armed) =
                        (Arc::clone(&requests), Arc::clone(&held), Arc::clone(&armed));
                    tokio::task::spawn_local(async move {
                        let svc = hyper::service::service_fn(move |_req| {
                            requests.fetch_add(1, Ordering::SeqCst);
                            let hold = armed.swap(false, Ordering::SeqCst);
                            let held = Arc::clone(&held);
                            async move {
                                if hold {
                                    held.fetch_add(1, Ordering::SeqCst);
                                    std::future::pending::<()>().await;
                                }
                                tokio::time::sleep(Duration::from_millis(2)).await;
                                Ok::<_, std::convert::Infallible>(http::Response::new(
                                    http_body_util::Full::new(bytes::Bytes::from_static(
                                        b"restarting\n",
                                    )),
                                ))
                            }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
            });
            // the LocalSet and the runtime go here: every connection closes with them
        });
        self.running = Some((tx, thread));
    }

    fn stop(&mut self) {
        let (tx, thread) = self.running.take().expect("running");
        let _ = tx.send(());
        thread.join().unwrap();
    }
}

impl Drop for Restartable {
    fn drop(&mut self) {
        if self.running.is_some() {
            self.stop();
        }
    }
}

/// Kept-alive clients sending `GET`s in a loop (bounded in count and time) until told to
/// stop: how many they sent, and every failure (a status other than 200, or the proxy closing
/// the connection).
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    threads: Vec<JoinHandle<Vec<String>>>,
}

impl Load {
    fn start(addr: SocketAddr, clients: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let threads = (0..clients)
            .map(|c| {
                let (stop, sent) = (Arc::clone(&stop), Arc::clone(&sent));
                std::thread::spawn(move || {
                    let deadline = Instant::now() + Duration::from_secs(60);
                    let mut client = Client::connect(addr);
                    let mut failures = Vec::new();
                    for n in 0..200_000u64 {
                        if stop.load(Ordering::SeqCst) || Instant::now() >= deadline {
                            break;
                        }
                        sent.fetch_add(1, Ordering::SeqCst);
                        match client.try_get(&format!("/c{c}/{n}")) {
                            Some(200) => {}
                            Some(s) => failures.push(format!("client {c} request {n}: {s}")),
                            None => {
                                failures.push(format!("client {c} request {n}: closed"));
                                client = Client::connect(addr);
                            }
                        }
                    }
                    failures
                })
            })
            .collect();
        Self {
            stop,
            sent,
            threads,
        }
    }

    fn finish(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let failures = self
            .threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        (self.sent.load(Ordering::SeqCst), failures)
    }
}

#[test]
fn a_backend_restarted_under_load_fails_no_idempotent_request() {
    const CYCLES: u64 = 4;
    let mut a = Restartable::new();
    let b = Backend::start("steady");
    let mut s = spec("restart", Protocol::Http, vec![a.upstream(), b.upstream()]);
    s.passive = PassiveSpec {
        max_fails: 1,
        fail_timeout: Duration::from_millis(300),
    };
    let (p, addr) = proxy(s);
    let load = Load::start(addr, 4);
    for cycle in 0..CYCLES {
        // A is in the rotation again (its exclusion over) and serving
        let seen = a.requests.load(Ordering::SeqCst);
        assert!(
            eventually(|| a.requests.load(Ordering::SeqCst) >= seen + 20),
            "cycle {cycle}: the restarted backend got no requests"
        );
        // a request is in flight to A when it goes away
        let held = a.held.load(Ordering::SeqCst);
        a.armed.store(true, Ordering::SeqCst);
        assert!(
            eventually(|| a.held.load(Ordering::SeqCst) > held),
            "cycle {cycle}: no request reached the backend while armed"
        );
        a.stop();
        std::thread::sleep(Duration::from_millis(400));
        a.start();
    }
    let (sent, failures) = load.finish();
    let v = view(&p, "restart");
    let resent = v.stats.retries_resent.load(Ordering::Relaxed);
    let connect_retries = v.stats.retries.load(Ordering::Relaxed);
    let excluded = v.upstreams[0]
        .stats
        .passive_excluded
        .load(Ordering::Relaxed);
    eprintln!(
        "{sent} requests over {CYCLES} restarts: {} failed, {resent} sent again after a \
         failure, {connect_retries} after a refused connect, the backend excluded {excluded} \
         times",
        failures.len()
    );
    assert!(failures.is_empty(), "failed requests: {failures:?}");
    assert!(
        resent >= CYCLES,
        "each restart cut a request in flight, each sent again: {resent} < {CYCLES}"
    );
    assert!(excluded >= 1, "the stopped backend was never excluded");
    assert_eq!(
        v.upstreams[1]
            .stats
            .passive_excluded
            .load(Ordering::Relaxed),
        0,
        "the steady backend was excluded"
    );
    drop(p);
}

/// A raw upstream that, on each connection, reads a request head, counts it, and closes the
/// connection without answering (its unread body, if any, makes the close a reset).
struct Dying {
    addr: SocketAddr,
    heads: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Dying {
    fn start() -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
        let h = Arc::clone(&heads);
        // the thread ends with the test process: accept blocks
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                s.set_read_timeout(Some(WAIT)).unwrap();
                let head = String::from_utf8_lossy(&read_head(&mut s)).into_owned();
                if let Some(line) = head.lines().next() {
                    h.lock().unwrap().push(line.to_string());
                }
                drop(s);
            }
        });
        Self { addr, heads }
    }

    fn upstream(&self, name: &str) -> UpstreamSpec {
        UpstreamSpec {
            name: name.into(),
            addr: self.addr,
            weight: 1,
        }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

/// One request on a new connection: the status line's code (0 when none came).
fn status_of(addr: SocketAddr, request: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !out.windows(2).any(|w| w == b"\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out)
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_request_with_a_body_is_never_sent_twice_and_an_idempotent_one_never_twice_to_one_upstream() {
    let (d1, d2) = (Dying::start(), Dying::start());
    let mut s = spec(
        "dying",
        Protocol::Http,
        vec![d1.upstream("d1"), d2.upstream("d2")],
    );
    s.passive.max_fails = 0; // every pick sees both
    let (p, addr) = proxy(s);
    let both = || {
        let mut h = d1.heads();
        h.extend(d2.heads());
        h
    };

    // a POST whose upstream died under it: 502, and no other upstream ever sees it
    let body = "x".repeat(100_000);
    let post = format!(
        "POST /order HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(status_of(addr, post.as_bytes()), 502);
    std::thread::sleep(Duration::from_millis(200));
    let heads = both();
    assert_eq!(heads, vec!["POST /order HTTP/1.1".to_string()], "{heads:?}");

    // so with a PUT, idempotent but with a body the proxy streamed and did not keep
    let put = "PUT /doc HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello";
    assert_eq!(status_of(addr, put.as_bytes()), 502);
    std::thread::sleep(Duration::from_millis(200));
    let puts = both().iter().filter(|h| h.starts_with("PUT")).count();
    assert_eq!(puts, 1, "{:?}", both());

    // a GET is sent again — to the other upstream, never twice to one — then answered 502
    assert_eq!(
        status_of(addr, b"GET /page HTTP/1.1\r\nHost: t\r\n\r\n"),
        502
    );
    assert!(eventually(|| both().len() == 4), "{:?}", both());
    let gets = |d: &Dying| d.heads().iter().filter(|h| h.starts_with("GET")).count();
    assert_eq!((gets(&d1), gets(&d2)), (1, 1), "{:?}", both());

    let v = view(&p, "dying");
    assert_eq!(v.stats.retries_resent.load(Ordering::Relaxed), 1);
    // a POST is not idempotent unless the operator says so
    drop(p);
    let mut s = spec(
        "dying-post",
        Protocol::Http,
        vec![d1.upstream("d1"), d2.upstream("d2")],
    );
    s.passive.max_fails = 0;
    s.http.retry_methods = stator_proxy::Methods::parse(["GET", "POST"]).unwrap();
    let (p, addr) = proxy(s);
    let before = both().len();
    assert_eq!(
        status_of(
            addr,
            b"POST /poll HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"
        ),
        502
    );
    assert!(eventually(|| both().len() == before + 2), "{:?}", both());
    drop(p);
}

#[test]
fn a_refused_upstream_is_left_out_for_fail_timeout_then_tried_again() {
    let b = Backend::start("b");
    let refused = UpstreamSpec {
        name: "gone".into(),
        addr: refused_addr(),
        weight: 1,
    };
    let mut s = spec(
        "passive",
        Protocol::Http,
        vec![refused.clone(), b.upstream()],
    );
    s.passive = PassiveSpec {
        max_fails: 1,
        fail_timeout: Duration::from_secs(60),
    };
    let (p, addr) = proxy(s);
    let mut c = Client::connect(addr);
    for n in 0..20 {
        assert_eq!(c.try_get(&format!("/{n}")), Some(200), "request {n}");
    }
    let v = view(&p, "passive");
    let gone = &v.upstreams[0];
    // one refused connect excluded it: no second attempt while excluded
    assert_eq!(gone.stats.errors(ErrorKind::ConnectRefused), 1);
    assert_eq!(gone.stats.passive_excluded.load(Ordering::Relaxed), 1);
    assert!(
        gone.excluded_for
            .is_some_and(|d| d > Duration::from_secs(50))
    );
    assert_eq!(v.upstreams[1].excluded_for, None);
    drop(p);

    // passive health off: every pick of it is a refused connect (and a retry)
    let mut s = spec("active-only", Protocol::Http, vec![refused, b.upstream()]);
    s.passive.max_fails = 0;
    let (p, addr) = proxy(s);
    let mut c = Client::connect(addr);
    for n in 0..20 {
        assert_eq!(c.try_get(&format!("/{n}")), Some(200), "request {n}");
    }
    let v = view(&p, "active-only");
    assert!(v.upstreams[0].stats.errors(ErrorKind::ConnectRefused) > 1);
    assert_eq!(v.upstreams[0].excluded_for, None);
    drop(p);
}

#[test]
fn when_every_upstream_is_excluded_they_are_tried_anyway() {
    let refused = UpstreamSpec {
        name: "gone".into(),
        addr: refused_addr(),
        weight: 1,
    };
    let mut s = spec("alone", Protocol::Http, vec![refused]);
    s.passive = PassiveSpec {
        max_fails: 1,
        fail_timeout: Duration::from_secs(60),
    };
    let (p, addr) = proxy(s);
    let get = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n";
    assert_eq!(status_of(addr, get), 502);
    // excluded now, and the only one: tried again rather than a 503 "no usable upstream"
    assert_eq!(status_of(addr, get), 502);
    let v = view(&p, "alone");
    assert!(v.upstreams[0].excluded_for.is_some());
    assert_eq!(v.upstreams[0].stats.errors(ErrorKind::ConnectRefused), 2);
    drop(p);
}
