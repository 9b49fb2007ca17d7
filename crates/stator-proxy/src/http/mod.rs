//! The HTTP/1.1 reverse proxy: an engine of its own, driving [`crate::h1`] over the sockets.
//!
//! One task per client connection, one exchange at a time, every buffer the connection's own
//! and reused from one request to the next: the request head is parsed where it was read
//! ([`RequestHead`]), checked by [`crate::rules`] and written for the upstream with the
//! proxy's edits ([`forward::request`]); the response head likewise ([`forward::response`]);
//! bodies are streamed as they arrive — a `Content-Length` body straight from the buffer it
//! was read into, a `chunked` one decoded and re-framed ([`Chunked`]), never buffered whole.
//! Small responses leave in one write (head and body together).
//!
//! Per request: a head that fails the rules gets 400, 405 or 501 and the connection closes;
//! hop-by-hop headers are removed both ways (RFC 9110 §7.6.1, plus those `Connection` names);
//! every `X-Forwarded-For` / `Forwarded` line the client sent is kept only when it is a
//! trusted proxy (`http.trusted_proxies`), its address appended or put in their place. An
//! upstream is picked (session or scheduler); a failure to connect — or a kept-alive
//! connection found closed before the request went out — moves on to the next upstream, up to
//! `retries` more, never one already tried; an idempotent request without a body
//! (`http.retry_methods`) is also sent again after a failure before the response head.
//! Answers of our own: `503` when no upstream is usable, `502` when every one tried failed,
//! `504` when the response head is later than `timeouts.response` or the upstream stops
//! reading the request for `timeouts.upstream_write`, `408` when the client stops sending the
//! request body for `timeouts.client_read`.
//!
//! Every wait is bounded (HAProxy's model for the head, nginx's inactivity timers for the
//! rest): a request head must arrive within `timeouts.header_read` — from accept for the
//! first, from its first byte for later ones — or gets `408`; a kept-alive connection with no
//! new request for `timeouts.idle` is closed quietly; inside an exchange a read or a write
//! that makes no progress for its limit (`client_read`, `client_write`, `upstream_read`,
//! `upstream_write`) ends it. One timer per connection, re-armed only when a socket would
//! block: a read or write that goes through at once reads no clock.

mod respond;

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::access::{Kind, Record};
use crate::h1::body::{self, CHUNK_END, Chunked, Decoded, Framing, LAST_CHUNK};
use crate::h1::forward::{self, CONTINUE, RequestPlan, ResponsePlan};
use crate::h1::head::{HeadError, Line, Parse, RequestHead, ResponseHead};
use crate::io::{Due, READ_SIZE, Timer, Wait, read, write};
use crate::limits::Descriptors;
use crate::retry::{Again, Retries};
use crate::shared::ListenerShared;
use crate::stats::{ClientErrorKind, ErrorKind, Gauge32, GaugeField, UpstreamStats, add};
use crate::tcp::connect;
use crate::worker::WorkerCtx;

/// Output to a client is gathered up to this before it is written (a response head and a
/// small body leave together); larger body pieces are written from where they were read.
const COALESCE: usize = 16 * 1024;

/// Largest response head accepted from an upstream (`502` above it).
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// The answer to a client whose request head is too slow.
const REQUEST_TIMEOUT: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/// Spare buffer sets a worker keeps for connections that wake up (at most; more are freed).
const MAX_SPARE: usize = 64;

/// A connection's buffers, kept by the worker while the connection is idle
/// ([`WorkerCtx::spare`]): empty, their capacity kept.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    inb: Vec<u8>,
    out: Vec<u8>,
    upb: Vec<u8>,
    up_head: Vec<u8>,
    scratch: Vec<u8>,
    lines: Vec<Line>,
    resp_lines: Vec<Line>,
}

/// A connection to an upstream, kept per worker between requests (`http.keepalive_pool`); it
/// holds its descriptor from the budget and its place in the upstream's `open` gauge for as
/// long as it lives.
#[derive(Debug)]
pub(crate) struct Upstream {
    stream: TcpStream,
    _held: Descriptors,
    _open: Gauge32,
}

impl Upstream {
    /// Whether a kept connection still looks usable: not closed by the upstream, and nothing
    /// unasked-for waiting on it (what the reactor knows; a close that crosses the next
    /// request is handled where it is found).
    pub fn alive(&self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.stream.try_read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// How long a kept-alive connection waits for its next request inside its serving task; past
/// it, the task ends and the connection waits in a small one ([`Parked`], [`watch`]): a busy
/// connection keeps its task (nothing allocated per request), an idle one holds a few hundred
/// bytes instead of the serving task's state. 50 ms: at 500 ms each serving task of
/// `stator bench proxy`'s idle run (connections opened one after another) outlived its request
/// ten times as long, and with the sweep's heap trim the run measured 1,556–1,726 bytes per
/// idle connection at 500 ms against 1,434–1,453 at 50 ms; a client that pauses between 50 and
/// 500 ms now costs one task (one allocation) per request.
const PARK_AFTER: Duration = Duration::from_millis(50);

/// Where a connection's serving task begins.
pub(crate) enum Start {
    /// A connection just accepted.
    New(TcpStream, SocketAddr),
    /// A parked connection whose next request is arriving.
    Resume(Parked),
}

/// A kept-alive connection waiting for its next request outside a serving task: what is left
/// of it when its buffers and timer are gone.
#[derive(Debug)]
pub(crate) struct Parked {
    client: TcpStream,
    peer: SocketAddr,
    trusted: bool,
    served_by: Option<Vec<u8>>,
    connected: Instant,
    requests: u64,
    /// When its idle timeout (`timeouts.idle`) closes it.
    idle_until: tokio::time::Instant,
}

/// Serves a client connection until it closes (`None`) or has been idle for [`PARK_AFTER`]
/// (`Some`: the caller [`watch`]es it and serves it again when bytes arrive).
pub(crate) async fn serve(ctx: &Rc<WorkerCtx>, start: Start) -> Option<Parked> {
    let mut c = match start {
        Start::New(stream, peer) => {
            let shared = ctx.shared();
            Conn::new(
                ctx,
                Parked {
                    client: stream,
                    peer,
                    trusted: shared.spec.http.trusts(peer.ip()),
                    served_by: shared.spec.http.served_by.then(|| {
                        format!("{}/{}/{}", ctx.node, shared.spec.name, ctx.id).into_bytes()
                    }),
                    connected: Instant::now(),
                    requests: 0,
                    idle_until: tokio::time::Instant::now(),
                },
            )
        }
        Start::Resume(p) => {
            let idle_until = p.idle_until;
            let mut c = Conn::new(ctx, p);
            c.idle_until = Some(idle_until);
            c
        }
    };
    while c.exchange().await {}
    // the next connection takes them
    c.park();
    let until = c.parked_until.take()?;
    Some(Parked {
        client: c.client,
        peer: c.peer,
        trusted: c.trusted,
        served_by: c.served_by,
        connected: c.connected,
        requests: c.requests,
        idle_until: until,
    })
}

/// Waits until a parked connection's next bytes arrive (`true`), or it is closed: its idle
/// timeout passed (counted) or the worker stops.
pub(crate) async fn watch(ctx: &WorkerCtx, p: &Parked) -> bool {
    let mut stop = ctx.stop.clone();
    tokio::select! {
        biased;
        r = p.client.readable() => r.is_ok(),
        () = tokio::time::sleep_until(p.idle_until) => {
            ctx.stats.client_error(ClientErrorKind::IdleTimeout);
            false
        }
        () = crate::worker::stopped(&mut stop) => last_call(&p.client, p.idle_until).await,
    }
}

/// How long an idle kept-alive connection of a stopping worker is still given for its next
/// request (at most its idle timeout): a request already on its way is served, with
/// `Connection: close`, instead of meeting a closed connection.
pub const STOPPING_IDLE_GRACE: Duration = Duration::from_secs(1);

/// A stopping worker's idle connection: `true` when its next request arrives within
/// [`STOPPING_IDLE_GRACE`] (and before `idle_until`), `false` to close it. Closing an idle
/// connection at once races with the request its client may be sending that very moment
/// (the client sees a reset and a failed request — what an upgrade must not cause); after
/// the grace it is as idle as any connection a server closes.
async fn last_call(client: &TcpStream, idle_until: tokio::time::Instant) -> bool {
    let until = idle_until.min(tokio::time::Instant::now() + STOPPING_IDLE_GRACE);
    tokio::select! {
        biased;
        r = client.readable() => r.is_ok(),
        () = tokio::time::sleep_until(until) => false,
    }
}

/// One client connection and its buffers.
struct Conn<'a> {
    ctx: &'a Rc<WorkerCtx>,
    client: TcpStream,
    peer: SocketAddr,
    /// The client is a proxy whose forwarding headers are believed.
    trusted: bool,
    /// `X-Served-By`'s value, when the listener adds it.
    served_by: Option<Vec<u8>>,
    connected: Instant,
    requests: u64,
    /// The current request's body has been read to its end (and forwarded).
    body_sent: bool,
    /// Bytes from the client; `used` of them are consumed.
    inb: Vec<u8>,
    used: usize,
    head: RequestHead,
    resp: ResponseHead,
    /// The response head's length in `upb`.
    resp_len: usize,
    /// The forwarding lines' values.
    scratch: Vec<u8>,
    /// The request head for the upstream.
    up_head: Vec<u8>,
    /// Output to the client not yet written.
    out: Vec<u8>,
    /// Bytes from the upstream.
    upb: Vec<u8>,
    timer: Timer,
    stop: watch::Receiver<bool>,
    /// A resumed connection's idle deadline (its first wait's).
    idle_until: Option<tokio::time::Instant>,
    /// Set when the connection leaves its serving task to wait parked, until then.
    parked_until: Option<tokio::time::Instant>,
}

/// How an exchange that got no response from an upstream ends: an answer of the proxy's own.
struct Failure {
    status: u16,
    text: &'static str,
    /// The client-side error to count (`None`: counted where it happened).
    count: Option<ClientErrorKind>,
    /// Close the client connection after the answer (a request body may be left unread).
    close: bool,
}

impl Failure {
    fn upstream(status: u16, text: &'static str) -> Self {
        Self {
            status,
            text,
            count: Some(if status == 503 {
                ClientErrorKind::NoUpstream
            } else {
                ClientErrorKind::UpstreamFailed
            }),
            close: false,
        }
    }
}

/// Why a request did not get a response head from one upstream.
enum Unsent {
    /// It was not sent (connecting failed, or a new connection closed before it went out).
    Back(ErrorKind),
    /// It was (at least partly) sent and failed before a response head; `reused`: on a
    /// kept-alive connection (whose reset may be the upstream closing it as idle just then).
    Lost(ErrorKind, bool),
    /// Its body stopped arriving from the client (`client_read`).
    ClientRead,
    /// Reading its body from the client failed: malformed (a bad chunk), or the client left.
    ClientBody { malformed: bool },
    /// No kept-alive connection, and the node's descriptor budget has none for a new one.
    Descriptors,
}

/// What one exchange's access-log line needs (when the log is on).
#[derive(Default)]
struct Facts {
    method: String,
    target: String,
    status: u16,
    upstream: Option<SocketAddr>,
    bytes_in: u64,
    bytes_out: u64,
    cut: bool,
}

impl<'a> Conn<'a> {
    fn new(ctx: &'a Rc<WorkerCtx>, p: Parked) -> Self {
        Conn {
            ctx,
            client: p.client,
            peer: p.peer,
            trusted: p.trusted,
            served_by: p.served_by,
            connected: p.connected,
            requests: p.requests,
            body_sent: false,
            inb: Vec::new(),
            used: 0,
            head: RequestHead::default(),
            resp: ResponseHead::default(),
            resp_len: 0,
            scratch: Vec::new(),
            up_head: Vec::new(),
            out: Vec::new(),
            upb: Vec::new(),
            timer: Timer(Box::pin(tokio::time::sleep(Duration::ZERO))),
            stop: ctx.stop.clone(),
            idle_until: None,
            parked_until: None,
        }
    }

    /// Serves one exchange; `false` when the connection is to close.
    async fn exchange(&mut self) -> bool {
        let n = match self.read_head().await {
            Some(n) => n,
            None => return false,
        };
        let started = Instant::now();
        self.requests += 1;
        add(&self.ctx.stats.requests, 1);
        let shared = self.ctx.shared();
        let mut facts = self.ctx.access.on().then(|| Facts {
            method: self.head.method.str(&self.inb).to_owned(),
            target: self.head.target.str(&self.inb).to_owned(),
            ..Facts::default()
        });
        let planned = forward::request(
            &self.inb,
            &self.head,
            self.peer.ip(),
            self.trusted,
            &shared.spec.http,
            &mut self.scratch,
            &mut self.up_head,
        );
        let idempotent = shared
            .spec
            .http
            .retry_methods
            .contains_name(self.head.method.str(&self.inb));
        self.used = n;
        self.body_sent = false;
        let keep = match planned {
            Err(r) => {
                self.ctx.stats.client_error(if r.is_unsupported() {
                    ClientErrorKind::Unsupported
                } else {
                    ClientErrorKind::BadRequest
                });
                self.local(r.status, r.reason, true, facts.as_mut()).await;
                false
            }
            Ok(plan) => {
                let replay = idempotent && plan.framing == Framing::None;
                match self.forward(&shared, &plan, replay, facts.as_mut()).await {
                    Ok(keep) => keep,
                    Err(f) => {
                        if let Some(kind) = f.count {
                            self.ctx.stats.client_error(kind);
                        }
                        // a body left unread (in part) cannot be told from the next request
                        let close = f.close
                            || !plan.keep_alive
                            || (plan.framing != Framing::None && !self.body_sent);
                        self.local(f.status, f.text, close, facts.as_mut()).await && !close
                    }
                }
            }
        };
        let took = started.elapsed();
        self.ctx.stats.duration.observe(took);
        if let Some(f) = facts {
            self.log(&f, took);
        }
        // what is left is the next request's (pipelined)
        self.inb.drain(..self.used.min(self.inb.len()));
        self.used = 0;
        // What the response said, even if the worker stopped since: a connection it kept
        // alive waits for its next request (`last_call`) rather than closing under a client
        // that may be sending one.
        keep
    }

    /// Gives the connection's buffers to the worker's spares (emptied: this connection is
    /// idle between requests, or closing).
    fn park(&mut self) {
        self.inb.clear();
        self.out.clear();
        self.upb.clear();
        self.up_head.clear();
        self.scratch.clear();
        self.head.lines.clear();
        self.resp.lines.clear();
        let b = Buffers {
            inb: std::mem::take(&mut self.inb),
            out: std::mem::take(&mut self.out),
            upb: std::mem::take(&mut self.upb),
            up_head: std::mem::take(&mut self.up_head),
            scratch: std::mem::take(&mut self.scratch),
            lines: std::mem::take(&mut self.head.lines),
            resp_lines: std::mem::take(&mut self.resp.lines),
        };
        let mut spare = self.ctx.spare.borrow_mut();
        // a set that grew for a rare large head is not kept
        if spare.len() < MAX_SPARE && b.inb.capacity() <= 4 * READ_SIZE && b.inb.capacity() > 0 {
            spare.push(b);
        }
    }

    /// Takes a set of buffers from the worker's spares, when it has none (else they grow on
    /// first use).
    fn unpark(&mut self) {
        if self.inb.capacity() != 0 {
            return;
        }
        let Some(b) = self.ctx.spare.borrow_mut().pop() else {
            return;
        };
        self.inb = b.inb;
        self.out = b.out;
        self.upb = b.upb;
        self.up_head = b.up_head;
        self.scratch = b.scratch;
        self.head.lines = b.lines;
        self.resp.lines = b.resp_lines;
    }

    /// Reads the next request head; its length, or `None` when the connection ends (closed,
    /// idle, stopped, or answered 400, 408 or 431).
    async fn read_head(&mut self) -> Option<usize> {
        let shared = self.ctx.shared();
        let max = shared.spec.http.max_header_size;
        let t = shared.spec.timeouts;
        drop(shared);
        // the first request's head is due `header_read` after accept; a later one's after its
        // first byte (until then the connection is idle)
        let mut head_due = (self.requests == 0)
            .then(|| tokio::time::Instant::from_std(self.connected + t.header_read));
        let mut idle_at = None;
        self.unpark();
        loop {
            if !self.inb.is_empty() {
                if head_due.is_none() {
                    head_due = Some(tokio::time::Instant::now() + t.header_read);
                }
                match self.head.parse(&self.inb, max) {
                    Ok(Parse::Complete(n)) => return Some(n),
                    Ok(Parse::Partial) => {}
                    Err(e) => {
                        let (status, kind, text, outcome) = match e {
                            HeadError::TooLarge => (
                                431,
                                ClientErrorKind::HeaderTooLarge,
                                "request header fields too large\n",
                                "header_too_large",
                            ),
                            HeadError::Malformed => (
                                400,
                                ClientErrorKind::BadRequest,
                                "malformed request\n",
                                "bad_request",
                            ),
                        };
                        self.ctx.stats.client_error(kind);
                        self.local(status, text, true, None).await;
                        self.ctx.log(Record {
                            status: Some(status),
                            outcome,
                            duration: self.connected.elapsed(),
                            ..Record::new(Kind::Http, self.peer)
                        });
                        return None;
                    }
                }
            }
            let idle = head_due.is_none();
            let got = if idle {
                // An idle kept-alive connection holds no buffer: they go back to the worker
                // until the next request's bytes arrive (nginx frees them likewise).
                // Past PARK_AFTER it leaves this task (see `Parked`).
                let (at, park_at) = *idle_at.get_or_insert_with(|| {
                    let now = tokio::time::Instant::now();
                    let at = self.idle_until.take().unwrap_or(now + t.idle);
                    (at, (now + PARK_AFTER).min(at))
                });
                self.park();
                self.timer.arm(Due::At(park_at));
                let mut stop = self.stop.clone();
                let woke = tokio::select! {
                    biased;
                    r = self.client.readable() => r.map_err(|_| Wait::Failed),
                    () = self.timer.0.as_mut() => Err(Wait::Timeout),
                    () = crate::worker::stopped(&mut stop) => {
                        if last_call(&self.client, at).await { Ok(()) } else { return None }
                    }
                };
                if woke == Err(Wait::Timeout) && park_at < at {
                    self.parked_until = Some(at);
                    return None;
                }
                self.unpark();
                match woke {
                    Ok(()) => read(&self.client, &mut self.inb, &mut self.timer, Due::At(at)).await,
                    Err(w) => Err(w),
                }
            } else {
                let due = head_due.map_or(Due::After(t.header_read), Due::At);
                read(&self.client, &mut self.inb, &mut self.timer, due).await
            };
            match got {
                Ok(n) => add(&self.ctx.stats.bytes_in, n as u64),
                Err(Wait::Timeout) if idle => {
                    self.ctx.stats.client_error(ClientErrorKind::IdleTimeout);
                    return None;
                }
                Err(Wait::Timeout) => {
                    // nothing was written on this exchange: the answer fits the socket buffer
                    // (if it does not, the client sees the close)
                    let _ = self.client.try_write(REQUEST_TIMEOUT);
                    self.ctx.stats.client_error(ClientErrorKind::HeaderTimeout);
                    self.ctx.stats.response(408);
                    self.ctx.log(Record {
                        status: Some(408),
                        outcome: "header_timeout",
                        duration: self.connected.elapsed(),
                        ..Record::new(Kind::Http, self.peer)
                    });
                    return None;
                }
                Err(Wait::Closed | Wait::Failed) => return None,
            }
        }
    }

    /// Sends the request to upstreams until one answers; `Ok(keep)` once its response went
    /// to the client (`keep`: the client connection stays open).
    async fn forward(
        &mut self,
        shared: &Arc<ListenerShared>,
        plan: &RequestPlan,
        replay: bool,
        mut facts: Option<&mut Facts>,
    ) -> Result<bool, Failure> {
        let client = self.peer.ip();
        let mut retries = Retries::new(shared.spec.retries, replay);
        loop {
            let Some(i) = self.ctx.pick(shared, client, retries.tried()) else {
                let (status, text) = retries.exhausted();
                return Err(Failure::upstream(status, text));
            };
            // a retry counts when it goes out, not when there was no upstream left for it
            match retries.picked(i) {
                Some(Again::Connect) => add(&self.ctx.stats.retries, 1),
                Some(Again::Resent) => add(&self.ctx.stats.retries_resent, 1),
                None => {}
            }
            let ustats = Arc::clone(&shared.stats[i]);
            let active = Gauge32::new(Arc::clone(&ustats), GaugeField::Active);
            match self.send(shared, i, plan, facts.as_deref_mut()).await {
                Ok(up) => {
                    add(&ustats.requests, 1);
                    if self.resp.status >= 500 {
                        ustats.error(ErrorKind::Http5xx);
                    }
                    self.ctx.remember(shared, client, i);
                    let keep = self
                        .respond(shared, i, up, plan, &ustats, facts.as_deref_mut())
                        .await;
                    drop(active);
                    return keep;
                }
                Err(Unsent::Back(kind)) => {
                    ustats.error(kind);
                    shared.failed(i);
                    if !retries.not_sent().next {
                        return Err(Failure::upstream(502, "every upstream tried failed\n"));
                    }
                }
                Err(Unsent::Lost(kind, reused)) => {
                    add(&ustats.requests, 1);
                    ustats.error(kind);
                    let v = retries.lost(kind, reused);
                    if v.blame {
                        shared.failed(i);
                    }
                    if v.next {
                        continue;
                    }
                    let mut f = Failure::upstream(v.status, "the upstream failed\n");
                    // the request body may be left half read
                    f.close = kind == ErrorKind::WriteTimeout;
                    return Err(f);
                }
                Err(Unsent::Descriptors) => {
                    return Err(Failure {
                        status: 503,
                        text: "the proxy is out of connections\n",
                        count: Some(ClientErrorKind::Descriptors),
                        close: false,
                    });
                }
                Err(Unsent::ClientRead) => {
                    // counted when it stalled
                    add(&ustats.requests, 1);
                    return Err(Failure {
                        status: 408,
                        text: "the request body stopped arriving\n",
                        count: None,
                        close: true,
                    });
                }
                Err(Unsent::ClientBody { malformed }) => {
                    // The client's fault, not the upstream's: a malformed body is a bad
                    // request; a client gone mid-body gets an answer nobody reads, no count.
                    add(&ustats.requests, 1);
                    return Err(Failure {
                        status: 400,
                        text: "malformed request body\n",
                        count: malformed.then_some(ClientErrorKind::BadRequest),
                        close: true,
                    });
                }
            }
        }
    }

    /// Sends the request (head and body) on a kept-alive connection to upstream `i` or a new
    /// one, and reads the response head into `self.resp` / `self.upb`.
    async fn send(
        &mut self,
        shared: &ListenerShared,
        i: usize,
        plan: &RequestPlan,
        facts: Option<&mut Facts>,
    ) -> Result<Upstream, Unsent> {
        let spec = &shared.spec;
        let t = spec.timeouts;
        let addr = spec.upstreams[i].addr;
        let ustats = &shared.stats[i];
        let up = loop {
            let (up, reused) = match self.ctx.checkout(i, addr, spec.http.keepalive_timeout) {
                Some(u) => (u, true),
                None => {
                    let Some(held) = self.ctx.budget.take(1) else {
                        return Err(Unsent::Descriptors);
                    };
                    (open(shared, i, held).await.map_err(Unsent::Back)?, false)
                }
            };
            if reused {
                add(&ustats.reused, 1);
            }
            match write(
                &up.stream,
                &self.up_head,
                &mut self.timer,
                Due::After(t.upstream_write),
            )
            .await
            {
                Ok(()) => add(&ustats.bytes_out, self.up_head.len() as u64),
                // Closed before the request went out: a kept-alive connection the upstream
                // closed meanwhile — try another one (not a retry of the request).
                Err(Wait::Failed | Wait::Closed) if reused => continue,
                Err(Wait::Failed | Wait::Closed) => return Err(Unsent::Back(ErrorKind::Reset)),
                Err(Wait::Timeout) => return Err(Unsent::Lost(ErrorKind::WriteTimeout, reused)),
            }
            break (up, reused);
        };
        let (up, reused) = up;
        if plan.framing != Framing::None {
            if plan.expect_continue {
                let _ = write(
                    &self.client,
                    CONTINUE,
                    &mut self.timer,
                    Due::After(t.client_write),
                )
                .await;
            }
            self.send_body(&up, plan.framing, ustats, facts).await?;
        }
        self.read_response_head(&up, t.response, reused, ustats)
            .await?;
        Ok(up)
    }

    /// Streams the request body to the upstream.
    async fn send_body(
        &mut self,
        up: &Upstream,
        framing: Framing,
        ustats: &UpstreamStats,
        mut facts: Option<&mut Facts>,
    ) -> Result<(), Unsent> {
        let t = self.ctx.shared().spec.timeouts;
        let up_due = Due::After(t.upstream_write);
        let lost = |w: Wait| match w {
            Wait::Timeout => Unsent::Lost(ErrorKind::WriteTimeout, false),
            _ => Unsent::Lost(ErrorKind::Reset, false),
        };
        let mut left = match framing {
            Framing::Length(n) => n,
            _ => 0,
        };
        let mut chunked = Chunked::default();
        loop {
            // what is in the buffer first
            if self.used < self.inb.len() {
                match framing {
                    Framing::Length(_) => {
                        let take = (self.inb.len() - self.used).min(left as usize);
                        let data = &self.inb[self.used..self.used + take];
                        write(&up.stream, data, &mut self.timer, up_due)
                            .await
                            .map_err(lost)?;
                        add(&ustats.bytes_out, take as u64);
                        if let Some(f) = facts.as_deref_mut() {
                            f.bytes_in += take as u64;
                        }
                        self.used += take;
                        left -= take as u64;
                    }
                    _ => loop {
                        let mut pos = self.used;
                        let step = chunked.next(&self.inb, &mut pos);
                        self.used = pos;
                        match step {
                            Err(_) => return Err(Unsent::ClientBody { malformed: true }),
                            Ok(Decoded::Need) => break,
                            Ok(Decoded::End) => {
                                write(&up.stream, LAST_CHUNK, &mut self.timer, up_due)
                                    .await
                                    .map_err(lost)?;
                                add(&ustats.bytes_out, LAST_CHUNK.len() as u64);
                                self.body_sent = true;
                                return Ok(());
                            }
                            Ok(Decoded::Data(s, e)) => {
                                self.scratch.clear();
                                body::chunk_head(&mut self.scratch, e - s);
                                let n = self.scratch.len() + (e - s) + CHUNK_END.len();
                                self.scratch.extend_from_slice(&self.inb[s..e]);
                                self.scratch.extend_from_slice(CHUNK_END);
                                write(&up.stream, &self.scratch, &mut self.timer, up_due)
                                    .await
                                    .map_err(lost)?;
                                add(&ustats.bytes_out, n as u64);
                                if let Some(f) = facts.as_deref_mut() {
                                    f.bytes_in += (e - s) as u64;
                                }
                            }
                        }
                    },
                }
            }
            if framing != Framing::Chunked && left == 0 {
                self.body_sent = true;
                return Ok(());
            }
            // everything read was sent: read more of the body into the emptied buffer
            self.inb.clear();
            self.used = 0;
            match read(
                &self.client,
                &mut self.inb,
                &mut self.timer,
                Due::After(t.client_read),
            )
            .await
            {
                Ok(n) => add(&self.ctx.stats.bytes_in, n as u64),
                Err(Wait::Timeout) => {
                    self.ctx.stats.client_error(ClientErrorKind::ReadTimeout);
                    return Err(Unsent::ClientRead);
                }
                Err(Wait::Closed | Wait::Failed) => {
                    return Err(Unsent::ClientBody { malformed: false });
                }
            }
        }
    }

    /// Reads the response head (interim `1xx` ones skipped) within `limit`.
    async fn read_response_head(
        &mut self,
        up: &Upstream,
        limit: Duration,
        reused: bool,
        ustats: &UpstreamStats,
    ) -> Result<(), Unsent> {
        let due = Due::At(tokio::time::Instant::now() + limit);
        self.upb.clear();
        loop {
            if !self.upb.is_empty() {
                match self.resp.parse(&self.upb, MAX_RESPONSE_HEAD) {
                    Ok(Parse::Complete(n))
                        if (100..200).contains(&self.resp.status) && self.resp.status != 101 =>
                    {
                        // an interim answer (103 Early Hints, a stray 100): not forwarded
                        self.upb.drain(..n);
                        continue;
                    }
                    Ok(Parse::Complete(n)) => {
                        // the body starts after the head
                        self.resp_len = n;
                        return Ok(());
                    }
                    Ok(Parse::Partial) => {}
                    Err(_) => return Err(Unsent::Lost(ErrorKind::Protocol, reused)),
                }
            }
            match read(&up.stream, &mut self.upb, &mut self.timer, due).await {
                Ok(n) => add(&ustats.bytes_in, n as u64),
                Err(Wait::Timeout) => return Err(Unsent::Lost(ErrorKind::Timeout, reused)),
                Err(Wait::Closed | Wait::Failed) => {
                    return Err(Unsent::Lost(ErrorKind::Reset, reused));
                }
            }
        }
    }
}

/// A new connection to upstream `i`, holding `held` from the descriptor budget.
async fn open(shared: &ListenerShared, i: usize, held: Descriptors) -> Result<Upstream, ErrorKind> {
    let addr = shared.spec.upstreams[i].addr;
    let stream = connect(addr, shared.spec.timeouts.connect).await?;
    let ustats = Arc::clone(&shared.stats[i]);
    add(&ustats.connects, 1);
    Ok(Upstream {
        stream,
        _held: held,
        _open: Gauge32::new(ustats, GaugeField::Open),
    })
}
