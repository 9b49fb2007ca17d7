//! UDP listeners: a session per client address and port, one connected upstream socket per
//! session, datagrams both ways in batches.
//!
//! A UDP worker (one thread, one current-thread runtime, one `SO_REUSEPORT` socket, as every
//! worker) runs three kinds of task:
//! - the **client loop** reads the listening socket with quinn-udp (`recvmmsg`, 32 buffers a
//!   call, each holding up to 64 datagrams of one flow when the kernel coalesced them with
//!   GRO), finds or opens each client's session ([`crate::table::SessionTable`], bounded, LRU, idle
//!   timeout) and sends the datagrams on the session's connected socket — a GRO buffer leaves
//!   as one GSO send, segment boundaries kept;
//! - one **session task** per session reads its upstream socket the same way and queues the
//!   replies, addressed to the client, in the worker's outbox; a GSO buffer of several replies
//!   goes straight to the client as one GSO send;
//! - the **flusher** empties the outbox with `sendmmsg` ([`outbox::Outbox`]) once the tasks
//!   that were ready have run, so the replies of many sessions leave in one system call; and a
//!   sweeper ends idle sessions.
//!
//! Which worker sees a client is the kernel's choice (`steering = "kernel"`: a hash of the
//! 4-tuple, so one client address and port always reaches the same socket) or the reuseport
//! program's (`"source"`: a hash of the client's address), so the worker holding a session
//! keeps receiving its datagrams. An upstream that is down gets no new session, and a session
//! whose upstream went down is opened again on another; a draining one keeps its sessions.
//! Every datagram dropped is counted under its reason ([`crate::UdpDrop`]).
//!
//! **Floods.** A new session is admitted only within three bounds, cheapest first: its
//! source's sessions (`udp.max_sessions_per_source`, the whole listener's, by address
//! prefix), the worker's rate of new sessions (`udp.session_rate`, a token bucket with
//! `udp.session_burst`), and a descriptor from the node's budget ([`crate::DescriptorBudget`]:
//! the descriptor limit less what health checks, the API and the process keep). A session is
//! *unreplied* until its upstream answers, and lives `udp.unreplied_timeout` (30 s, as
//! conntrack's UDP entries) instead of `timeouts.idle` until then; a full table evicts an
//! unreplied session first, and a spent budget takes the descriptor of the worker's least
//! recently used unreplied session once it has waited a second for its answer (`reclaimed`;
//! the descriptor comes back when the socket closes, for the next new session) — a flood
//! that nobody answers churns among itself while answered clients keep their sessions.
//!
//! With `proxy_protocol` the PROXY v2 header fails closed: a session forwards nothing without
//! the header before a datagram has gone with it (a failed send leaves it pending and the next
//! datagram carries it), and a client datagram that itself begins with the header's
//! signature is dropped (`client_proxy_header`) — the upstream can only learn the address
//! this listener saw.

pub mod outbox;
pub mod ppv2;

use std::cell::{Cell, RefCell};
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd as _;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn_udp::{BATCH_SIZE, RecvMeta, Transmit, UdpSocketState};
use stator_sched::Tried;
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{Notify, watch};

use crate::access::{Kind, Record};
use crate::limits::{Descriptors, SourceGuard, TokenBucket};
use crate::shared::ListenerShared;
use crate::spec::{UdpSpec, UpstreamState};
use crate::stats::{ErrorKind, Gauge32, GaugeField, UdpDrop, UpstreamStats, add};
use crate::worker::WorkerCtx;

use self::outbox::Outbox;
use crate::table::{Class, SessionTable};

/// Bytes of one receive buffer: the largest UDP payload.
const SLOT: usize = 65_536;
/// Replies queued for one flush, at most (datagrams, bytes).
const OUTBOX_MSGS: usize = 4096;
const OUTBOX_BYTES: usize = 4 << 20;
/// Receive batches handled before the client loop lets the other tasks run.
const TURN: usize = 8;
/// Expired sessions removed per sweep, at most.
const SWEEP_MAX: usize = 4096;
/// How long an unreplied session must have been unused before a new session may take its
/// descriptor when the budget is spent. A session younger than this may still get its
/// answer (a DNS resolver waits about a second before it retries), and closing it to open
/// another costs two sockets' set-up and tear-down for nothing: under a flood that the
/// backend answers, reclaiming young sessions only churns.
const RECLAIM_AFTER: Duration = Duration::from_secs(1);

/// A session's upstream socket with the descriptor it took from the budget. The descriptor
/// goes back when the socket closes — when its last holder lets it go (the session, and its
/// task, which an abort drops only when the runtime next gets to it) — never before: a flood
/// that churns sessions never holds more sockets than the budget gave.
#[derive(Debug)]
struct SessionSocket {
    sock: UdpSocket,
    _held: Descriptors,
}

impl std::ops::Deref for SessionSocket {
    type Target = UdpSocket;

    fn deref(&self) -> &UdpSocket {
        &self.sock
    }
}

/// One client's session.
#[derive(Debug)]
struct Session {
    id: u64,
    upstream: SocketAddr,
    sock: Rc<SessionSocket>,
    state: Rc<UdpSocketState>,
    task: Option<tokio::task::JoinHandle<()>>,
    stats: Arc<UpstreamStats>,
    /// Client datagrams sent upstream, and replies received (for `udp.responses`).
    requests: u64,
    replies: u64,
    /// `proxy_protocol`: no datagram has gone upstream with the header yet.
    header_pending: bool,
    _active: Gauge32,
    open: Rc<Cell<u64>>,
    listener_active: Arc<crate::ListenerStats>,
    /// The session's count for its source.
    _source: Option<SourceGuard>,
    /// Its access-log line (when the log is on).
    log: Option<Box<SessionLog>>,
}

/// What the access log says of a session.
#[derive(Debug)]
struct SessionLog {
    ctx: Rc<WorkerCtx>,
    client: SocketAddr,
    started: Instant,
    /// Payload bytes from the client and to it.
    bytes_in: u64,
    bytes_out: u64,
    /// How it ended; `closed` unless said otherwise before it is dropped.
    outcome: &'static str,
}

impl Session {
    /// Says how it ended (for the access log), then lets it go.
    fn end(mut self, outcome: &'static str) {
        if let Some(l) = &mut self.log {
            l.outcome = outcome;
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        if let Some(l) = self.log.take() {
            l.ctx.log(Record {
                upstream: Some(self.upstream),
                outcome: l.outcome,
                bytes_in: l.bytes_in,
                bytes_out: l.bytes_out,
                datagrams: Some((self.requests, self.replies)),
                duration: l.started.elapsed(),
                ..Record::new(Kind::Udp, l.client)
            });
        }
        self.open.set(self.open.get().saturating_sub(1));
        self.listener_active
            .active
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One UDP worker thread's listener: its socket, sessions, outbox and limits.
struct UdpWorker {
    ctx: Rc<WorkerCtx>,
    listen: UdpSocket,
    state: UdpSocketState,
    local: SocketAddr,
    table: RefCell<SessionTable<SocketAddr, Session>>,
    outbox: RefCell<Outbox>,
    flush: Notify,
    /// Receive buffers shared by the session tasks (borrowed only between two awaits).
    rx: RefCell<Vec<u8>>,
    next_id: Cell<u64>,
    open: Rc<Cell<u64>>,
    /// New sessions per second (`udp.session_rate`, `udp.session_burst`).
    bucket: RefCell<TokenBucket>,
    /// The listening socket's kernel drop count at the last look.
    overflow_seen: Cell<u32>,
}

impl std::fmt::Debug for UdpWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpWorker")
            .field("local", &self.local)
            .field("sessions", &self.table.borrow().len())
            .finish_non_exhaustive()
    }
}

/// `now` as the session table sees it (tokio's clock, so a paused test clock applies).
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Serves `socket` (bound, non-blocking, `SO_REUSEPORT`) until `stop`.
pub(crate) async fn serve(
    ctx: Rc<WorkerCtx>,
    socket: std::net::UdpSocket,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()> {
    let listen = UdpSocket::from_std(socket)?;
    let state = UdpSocketState::new((&listen).into())?;
    let spec = ctx.shared().spec.udp;
    if !spec.gro {
        outbox::set_gro(listen.as_fd(), false)?;
    }
    let local = listen.local_addr()?;
    let timeout = ctx.shared().spec.timeouts.idle;
    let mut table = SessionTable::new(spec.max_sessions, timeout);
    table.set_unreplied_timeout(spec.unreplied_timeout);
    let w = Rc::new(UdpWorker {
        table: RefCell::new(table),
        bucket: RefCell::new(TokenBucket::new(spec.session_rate, spec.session_burst)),
        outbox: RefCell::new(Outbox::new(OUTBOX_MSGS, OUTBOX_BYTES)),
        flush: Notify::new(),
        rx: RefCell::new(vec![0u8; SLOT * BATCH_SIZE]),
        next_id: Cell::new(0),
        open: Rc::new(Cell::new(0)),
        overflow_seen: Cell::new(0),
        listen,
        state,
        local,
        ctx,
    });
    let flusher = tokio::task::spawn_local(flusher(Rc::clone(&w)));
    let sweeper = tokio::task::spawn_local(sweeper(Rc::clone(&w)));
    let result = tokio::select! {
        () = crate::worker::stopped(&mut stop) => Ok(()),
        r = client_loop(&w) => r,
    };
    flusher.abort();
    sweeper.abort();
    count_overflow(&w);
    // Sessions end with the worker (their tasks hold the worker: abort them first).
    let sessions = w.table.borrow_mut().drain();
    drop(sessions);
    result
}

/// Reads client datagrams and sends them upstream, for ever.
async fn client_loop(w: &Rc<UdpWorker>) -> io::Result<()> {
    let mut bufs = vec![0u8; SLOT * BATCH_SIZE];
    let mut meta = [RecvMeta::default(); BATCH_SIZE];
    loop {
        w.listen.readable().await?;
        for _ in 0..TURN {
            let mut slices: Vec<IoSliceMut<'_>> =
                bufs.chunks_mut(SLOT).map(IoSliceMut::new).collect();
            let r = w.listen.try_io(Interest::READABLE, || {
                w.state.recv((&w.listen).into(), &mut slices, &mut meta)
            });
            drop(slices);
            let n = match r {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error for an earlier reply, or the like: nothing to do but go on.
                Err(_) => continue,
            };
            add(&w.ctx.stats.udp.recv_calls, 1);
            let now = now();
            for (m, buf) in meta[..n].iter().zip(bufs.chunks(SLOT)) {
                let len = m.len.min(SLOT);
                let stride = if m.stride == 0 { len } else { m.stride };
                from_client(w, m.addr, m.dst_ip, &buf[..len], stride, now);
            }
        }
        // let the session tasks and the flusher run
        tokio::task::yield_now().await;
    }
}

/// One receive buffer from `client`: one datagram, or several of `stride` bytes (GRO).
fn from_client(
    w: &Rc<UdpWorker>,
    client: SocketAddr,
    dst_ip: Option<IpAddr>,
    data: &[u8],
    stride: usize,
    now: Instant,
) {
    let stats = &w.ctx.stats;
    let stride = stride.max(1);
    let count = data.len().div_ceil(stride).max(1) as u64;
    add(&stats.udp.datagrams_in, count);
    add(&stats.bytes_in, data.len() as u64);
    let shared = w.ctx.shared();
    if shared.spec.udp.proxy_protocol
        && data.chunks(stride).any(|d| d.starts_with(&ppv2::SIGNATURE))
    {
        // A client that writes a PROXY header of its own would name the address of its
        // choice to an upstream that reads ours: such datagrams are dropped, the others go
        // one by one.
        for d in data.chunks(stride) {
            if d.starts_with(&ppv2::SIGNATURE) {
                stats.udp.count_drop(UdpDrop::ClientProxyHeader, 1);
            } else {
                forward(w, &shared, client, dst_ip, d, d.len().max(1), now);
            }
        }
        return;
    }
    forward(w, &shared, client, dst_ip, data, stride, now);
}

/// Sends datagrams of `stride` bytes from `client` upstream on its session. With
/// `proxy_protocol`, nothing goes without the header before the header has gone: each
/// datagram is sent with it until one is (a failed send is counted, and the next datagram,
/// of this buffer or a later one, tries again), then the rest without it.
fn forward(
    w: &Rc<UdpWorker>,
    shared: &ListenerShared,
    client: SocketAddr,
    dst_ip: Option<IpAddr>,
    data: &[u8],
    stride: usize,
    now: Instant,
) {
    let stats = &w.ctx.stats;
    let spec = shared.spec.udp;
    let count = data.len().div_ceil(stride).max(1) as u64;
    let Some((sock, state, upstream, ustats, header_pending)) = session_for(w, shared, client, now)
    else {
        return;
    };
    let mut rest = data;
    let mut sent = 0u64;
    if header_pending && spec.proxy_protocol {
        let dst = SocketAddr::new(dst_ip.unwrap_or(w.local.ip()), w.local.port());
        let mut head = [0u8; ppv2::MAX_LEN];
        let n = ppv2::encode(client, dst, &mut head);
        let mut dgram = Vec::with_capacity(n + stride.min(rest.len()));
        loop {
            let one = stride.min(rest.len());
            dgram.clear();
            dgram.extend_from_slice(&head[..n]);
            dgram.extend_from_slice(&rest[..one]);
            rest = &rest[one..];
            if send_upstream(w, &sock, &state, upstream, &dgram, dgram.len(), &spec) {
                sent += 1;
                add(&ustats.bytes_out, dgram.len() as u64);
                if let Some(s) = w.table.borrow_mut().peek_mut(client) {
                    s.header_pending = false;
                }
                break;
            }
            if rest.is_empty() {
                break;
            }
        }
    }
    if !rest.is_empty() && send_upstream(w, &sock, &state, upstream, rest, stride, &spec) {
        sent += rest.len().div_ceil(stride) as u64;
        add(&ustats.bytes_out, rest.len() as u64);
    }
    add(&stats.udp.upstream_datagrams_out, sent);
    if sent < count {
        stats.udp.count_drop(UdpDrop::UpstreamSend, count - sent);
    }
    if let Some(s) = w.table.borrow_mut().peek_mut(client) {
        s.requests += count;
        if let Some(l) = &mut s.log {
            l.bytes_in += data.len() as u64;
        }
    }
}

/// Sends `data` (datagrams of `stride` bytes) on a session's socket: one GSO send when there
/// are several and the listener allows it, else one send each. Whether all of it left.
fn send_upstream(
    w: &UdpWorker,
    sock: &UdpSocket,
    state: &UdpSocketState,
    upstream: SocketAddr,
    data: &[u8],
    stride: usize,
    spec: &UdpSpec,
) -> bool {
    if data.len() > stride && spec.gso && state.max_gso_segments() > 1 {
        let t = Transmit {
            destination: upstream,
            ecn: None,
            contents: data,
            segment_size: Some(stride),
            src_ip: None,
        };
        let segments = data.len().div_ceil(stride);
        // Writes go straight to the (non-blocking) socket: tokio's write readiness is not
        // known for a socket that has never waited, and a full UDP send buffer is a drop.
        if segments <= state.max_gso_segments() && state.try_send(sock.into(), &t).is_ok() {
            add(&w.ctx.stats.udp.gso_sends, 1);
            return true;
        }
    }
    let raw = socket2::SockRef::from(sock);
    data.chunks(stride.max(1))
        .all(|d| raw.send(d).is_ok_and(|n| n == d.len()))
}

/// A session's socket, upstream, counters, and whether its PROXY header is still to be sent.
type SessionRef = (
    Rc<SessionSocket>,
    Rc<UdpSocketState>,
    SocketAddr,
    Arc<UpstreamStats>,
    bool,
);

/// The client's session — refreshed, or opened on an upstream the scheduler picks (a session
/// whose upstream is now down or gone is closed and opened again). `None`: the datagram is
/// dropped (counted).
fn session_for(
    w: &Rc<UdpWorker>,
    shared: &ListenerShared,
    client: SocketAddr,
    now: Instant,
) -> Option<SessionRef> {
    let stats = &w.ctx.stats;
    {
        let mut table = w.table.borrow_mut();
        // a reload that lowered max_sessions evicts down to it here, each eviction counted
        let evicted = table.reconfigure(shared.spec.udp.max_sessions, shared.spec.timeouts.idle);
        if !evicted.is_empty() {
            add(&stats.session_evictions, evicted.len() as u64);
        }
        for (_, s) in evicted {
            s.end("evicted");
        }
        table.set_unreplied_timeout(shared.spec.udp.unreplied_timeout);
        let class = table.class(client);
        let found = table.touch(client, now);
        match found {
            Ok(Some(s)) => {
                let alive = shared
                    .by_addr
                    .get(&s.upstream)
                    .is_some_and(|&i| shared.state(i) != UpstreamState::Absent);
                if alive {
                    return Some((
                        Rc::clone(&s.sock),
                        Rc::clone(&s.state),
                        s.upstream,
                        Arc::clone(&s.stats),
                        s.header_pending,
                    ));
                }
                // its upstream is down or gone: a new session elsewhere
                let old = table.remove(client);
                drop(table);
                if let Some(s) = old {
                    s.end("upstream_gone");
                }
            }
            Err(expired) => {
                let class = class.unwrap_or(Class::Replied);
                count_expired(&stats.udp, class);
                drop(table);
                expired.end(expired_outcome(class));
            }
            Ok(None) => {}
        }
    }
    let (source, descriptor) = admit(w, shared, client, now)?;
    let Some(i) = w.ctx.pick(shared, client.ip(), &Tried::default()) else {
        stats.udp.count_drop(UdpDrop::NoUpstream, 1);
        return None;
    };
    let upstream = shared.spec.upstreams[i].addr;
    let (sock, state) = match connect(upstream, shared.spec.udp.gro) {
        Ok(s) => s,
        Err(_) => {
            stats.udp.count_drop(UdpDrop::SessionSocket, 1);
            shared.stats[i].error(ErrorKind::ConnectOther);
            return None;
        }
    };
    w.ctx.remember(shared, client.ip(), i);
    let ustats = Arc::clone(&shared.stats[i]);
    add(&ustats.connects, 1);
    add(&ustats.requests, 1);
    add(&stats.connections, 1);
    let id = w.next_id.get();
    w.next_id.set(id + 1);
    w.open.set(w.open.get() + 1);
    let sock = Rc::new(SessionSocket {
        sock,
        _held: descriptor,
    });
    let state = Rc::new(state);
    let task = tokio::task::spawn_local(session_task(
        Rc::clone(w),
        client,
        id,
        Rc::clone(&sock),
        Rc::clone(&state),
    ));
    let session = Session {
        id,
        upstream,
        sock: Rc::clone(&sock),
        state: Rc::clone(&state),
        task: Some(task),
        stats: Arc::clone(&ustats),
        requests: 0,
        replies: 0,
        header_pending: shared.spec.udp.proxy_protocol,
        _active: Gauge32::new(Arc::clone(&ustats), GaugeField::Active),
        open: Rc::clone(&w.open),
        listener_active: Arc::clone(&w.ctx.stats),
        _source: source,
        log: w.ctx.access.on().then(|| {
            Box::new(SessionLog {
                ctx: Rc::clone(&w.ctx),
                client,
                started: now,
                bytes_in: 0,
                bytes_out: 0,
                outcome: "closed",
            })
        }),
    };
    let inserted = w
        .table
        .borrow_mut()
        .insert_as(client, session, now, Class::Unreplied);
    if let Some((_, old)) = inserted.evicted {
        add(&stats.session_evictions, 1);
        // the evicted session's gauge goes down before the new one's goes up
        old.end("evicted");
    }
    drop(inserted.replaced);
    add(&stats.active, 1);
    Some((
        sock,
        state,
        upstream,
        ustats,
        shared.spec.udp.proxy_protocol,
    ))
}

/// Whether `client` may open a new session now, checked cheapest first — its source's count
/// (`udp.max_sessions_per_source`), the worker's rate (`udp.session_rate`), a descriptor from
/// the node's budget — with what the session will hold; `None`: refused and counted. When
/// the budget is spent, the worker's least recently used unreplied session, if it has been
/// unused for [`RECLAIM_AFTER`], gives its descriptor up for the next new session
/// (conntrack's early drop): a flood that is never answered churns among itself, and
/// answered sessions stay.
fn admit(
    w: &UdpWorker,
    shared: &ListenerShared,
    client: SocketAddr,
    now: Instant,
) -> Option<(Option<SourceGuard>, Descriptors)> {
    let stats = &w.ctx.stats;
    let udp = &shared.spec.udp;
    let source = shared.spec.source_prefixes.source(client.ip());
    let Ok(source) = SourceGuard::add(stats, source, udp.max_sessions_per_source) else {
        stats.udp.count_drop(UdpDrop::SourceLimit, 1);
        return None;
    };
    {
        let mut bucket = w.bucket.borrow_mut();
        bucket.reconfigure(udp.session_rate, udp.session_burst);
        if !bucket.take(now) {
            stats.udp.count_drop(UdpDrop::SessionRate, 1);
            return None;
        }
    }
    if let Some(descriptor) = w.ctx.budget.take(1) {
        return Some((source, descriptor));
    }
    // Spent: end the least recently used unreplied session that has waited long enough. Its
    // socket — and so its descriptor — goes when its aborted task is dropped, at this
    // worker's next turn, not now: this datagram is refused, a later one gets the
    // descriptor (the budget is never overdrawn, not even for a moment).
    let reclaimed = w.table.borrow_mut().evict_unreplied(now, RECLAIM_AFTER);
    if let Some((_, old)) = reclaimed {
        add(&stats.udp.sessions_reclaimed, 1);
        old.end("reclaimed");
    }
    stats.udp.count_drop(UdpDrop::Descriptors, 1);
    None
}

/// The access log's outcome of a session ended by its timeout.
fn expired_outcome(class: Class) -> &'static str {
    match class {
        Class::Replied => "idle",
        Class::Unreplied => "unreplied",
    }
}

/// Counts a session ended by its timeout: the idle one, or the unreplied one.
fn count_expired(udp: &crate::UdpStats, class: Class) {
    match class {
        Class::Replied => add(&udp.sessions_expired, 1),
        Class::Unreplied => add(&udp.sessions_unreplied, 1),
    }
}

/// A socket connected to `upstream`, from an ephemeral port.
fn connect(upstream: SocketAddr, gro: bool) -> io::Result<(UdpSocket, UdpSocketState)> {
    let any: SocketAddr = if upstream.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let std = std::net::UdpSocket::bind(any)?;
    std.connect(upstream)?;
    std.set_nonblocking(true)?;
    let sock = UdpSocket::from_std(std)?;
    let state = UdpSocketState::new((&sock).into())?;
    if !gro {
        outbox::set_gro(sock.as_fd(), false)?;
    }
    Ok((sock, state))
}

/// Reads one session's upstream socket and queues the replies for its client; ends the session
/// when every expected reply has arrived (`udp.responses`).
async fn session_task(
    w: Rc<UdpWorker>,
    client: SocketAddr,
    id: u64,
    sock: Rc<SessionSocket>,
    state: Rc<UdpSocketState>,
) {
    let mut meta = [RecvMeta::default(); BATCH_SIZE];
    loop {
        if sock.readable().await.is_err() {
            return;
        }
        let (mut got, mut bytes) = (0u64, 0u64);
        let mut queued_any = false;
        loop {
            let mut rx = w.rx.borrow_mut();
            let mut slices: Vec<IoSliceMut<'_>> =
                rx.chunks_mut(SLOT).map(IoSliceMut::new).collect();
            let r = sock.try_io(Interest::READABLE, || {
                state.recv((&**sock).into(), &mut slices, &mut meta)
            });
            drop(slices);
            let n = match r {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // ICMP port unreachable and the like, reported on the connected socket
                    if let Some(s) = w.table.borrow_mut().peek_mut(client)
                        && s.id == id
                    {
                        let kind = if e.kind() == io::ErrorKind::ConnectionRefused {
                            ErrorKind::ConnectRefused
                        } else {
                            ErrorKind::ConnectOther
                        };
                        s.stats.error(kind);
                    }
                    continue;
                }
            };
            for (m, buf) in meta[..n].iter().zip(rx.chunks(SLOT)) {
                let len = m.len.min(SLOT);
                let stride = if m.stride == 0 { len } else { m.stride };
                let (k, queued) = to_client(&w, client, &buf[..len], stride);
                got += k;
                bytes += len as u64;
                queued_any |= queued;
            }
        }
        if queued_any {
            w.flush.notify_one();
        }
        if got == 0 {
            continue;
        }
        // count the replies; the `responses` hint may end the session
        let shared = w.ctx.shared();
        let done = {
            let mut table = w.table.borrow_mut();
            match table.touch_replied(client, now()) {
                Ok(Some(s)) if s.id == id => {
                    s.replies += got;
                    add(&s.stats.bytes_in, bytes);
                    if let Some(l) = &mut s.log {
                        l.bytes_out += bytes;
                    }
                    shared
                        .spec
                        .udp
                        .responses
                        .is_some_and(|r| s.replies >= s.requests.saturating_mul(u64::from(r)))
                }
                _ => false,
            }
        };
        if done {
            add(&w.ctx.stats.udp.sessions_completed, 1);
            let s = w.table.borrow_mut().remove(client);
            // dropping the session aborts this task: it ends at its next await
            if let Some(s) = s {
                s.end("responses");
            }
            return;
        }
    }
}

/// Sends or queues `data` (replies of `stride` bytes) to `client`: several replies in one GSO
/// send, one through the outbox. Returns the replies handled and whether any was queued.
fn to_client(w: &UdpWorker, client: SocketAddr, data: &[u8], stride: usize) -> (u64, bool) {
    let stats = &w.ctx.stats;
    let count = data.len().div_ceil(stride.max(1)).max(1) as u64;
    add(&stats.udp.upstream_datagrams_in, count);
    let spec = w.ctx.shared().spec.udp;
    if count > 1 && spec.gso && w.state.max_gso_segments() as u64 >= count {
        let t = Transmit {
            destination: client,
            ecn: None,
            contents: data,
            segment_size: Some(stride),
            src_ip: None,
        };
        if w.state.try_send((&w.listen).into(), &t).is_ok() {
            add(&stats.udp.gso_sends, 1);
            add(&stats.udp.datagrams_out, count);
            add(&stats.bytes_out, data.len() as u64);
            return (count, false);
        }
    }
    let mut outbox = w.outbox.borrow_mut();
    let mut queued = false;
    for d in data.chunks(stride.max(1)) {
        if outbox.push(client, d) {
            queued = true;
        } else {
            stats.udp.count_drop(UdpDrop::ReplyQueueFull, 1);
        }
    }
    (count, queued)
}

/// Sends the queued replies, once the tasks that were ready have queued theirs.
async fn flusher(w: Rc<UdpWorker>) {
    loop {
        w.flush.notified().await;
        // let the other ready session tasks queue theirs first
        tokio::task::yield_now().await;
        let f = w.outbox.borrow_mut().flush(w.listen.as_fd());
        let stats = &w.ctx.stats;
        add(&stats.udp.datagrams_out, f.sent);
        add(&stats.bytes_out, f.bytes);
        add(&stats.udp.sendmmsg_calls, f.calls);
        if f.dropped > 0 {
            stats.udp.count_drop(UdpDrop::ClientSend, f.dropped);
        }
    }
}

/// Ends idle sessions, a few times per timeout, and counts what the kernel dropped at the
/// listening socket since the last look.
async fn sweeper(w: Rc<UdpWorker>) {
    loop {
        let timeout = w.table.borrow().unreplied_timeout();
        let every = (timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        tokio::time::sleep(every).await;
        let gone = w.table.borrow_mut().expire(now(), SWEEP_MAX);
        for (_, s, class) in gone {
            count_expired(&w.ctx.stats.udp, class);
            s.end(expired_outcome(class));
        }
        w.ctx.access.flush();
        count_overflow(&w);
    }
}

/// Adds the listening socket's new kernel drops to the listener's count.
fn count_overflow(w: &UdpWorker) {
    if let Ok(total) = outbox::socket_drops(w.listen.as_fd()) {
        let new = total.wrapping_sub(w.overflow_seen.get());
        w.overflow_seen.set(total);
        if new > 0 {
            w.ctx
                .stats
                .udp
                .count_drop(UdpDrop::SocketOverflow, u64::from(new));
        }
    }
}
