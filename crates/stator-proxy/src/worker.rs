//! A worker: one thread, one current-thread tokio runtime, one listening socket of its own
//! (`SO_REUSEPORT`), and everything it decides with kept to itself — its scheduler state, its
//! session table, its upstream connection pool. Nothing on the request path is shared with
//! another worker except relaxed counters (like nginx's worker processes).
//!
//! Stopping a worker (a reload that removes it, its listener, or the node's shutdown) closes
//! its listening socket at once; its connections go on (HTTP ones close after their current
//! exchange) until they end or [`DRAIN_LIMIT`] passes, then the thread exits.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use stator_sched::{Request, Tried, client_key};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

use crate::access::{AccessLog, LogBuf};
use crate::http::{Buffers, Upstream};
use crate::limits::{DescriptorBudget, SourceGuard};
use crate::session::{Inserted, Sessions};
use crate::shared::ListenerShared;
use crate::spec::{PersistenceSpec, Protocol};
use crate::stats::{ClientErrorKind, ListenerStats, add};

/// The longest a stopped worker waits for its connections to end.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// What a worker's tasks share (one thread: `Rc`, `RefCell`).
/// One upstream's idle connections: the address they are for, and each with the time it
/// went idle.
type PoolSlot = (SocketAddr, VecDeque<(Upstream, Instant)>);

#[derive(Debug)]
pub(crate) struct WorkerCtx {
    pub id: usize,
    pub node: Arc<str>,
    pub listener: Arc<ArcSwap<ListenerShared>>,
    pub stats: Arc<ListenerStats>,
    /// The node's descriptors for the proxy tier (client and upstream connections, UDP
    /// session sockets).
    pub budget: Arc<DescriptorBudget>,
    sched: RefCell<stator_sched::Picker>,
    sessions: RefCell<Option<(PersistenceSpec, Sessions)>>,
    /// Idle upstream connections by upstream index, each slot with the address it is for
    /// (a reload may give the index another upstream: the slot is emptied then).
    pool: RefCell<Vec<PoolSlot>>,
    /// Buffers of idle HTTP connections, for the next that wakes up.
    pub spare: RefCell<Vec<Buffers>>,
    /// Pipes lent to TCP connections while their bytes move (`copy`).
    pub pipes: crate::copy::Pipes,
    active: Cell<usize>,
    /// Serving tasks ended by parking their connection since the last heap trim (`sweep`).
    parked: Cell<u32>,
    pub stop: watch::Receiver<bool>,
    drained: Notify,
    /// Its side of the node's access log.
    pub access: LogBuf,
}

impl WorkerCtx {
    /// The listener's state now (a reload may have swapped it).
    pub fn shared(&self) -> Arc<ListenerShared> {
        self.listener.load_full()
    }

    /// Picks an upstream for `client`: its session's upstream when it has a usable one not yet
    /// tried, else the scheduler's pick. `None`: no usable upstream left.
    pub fn pick(&self, shared: &ListenerShared, client: IpAddr, tried: &Tried) -> Option<usize> {
        if let Some(p) = shared.spec.persistence {
            let mut sessions = self.sessions.borrow_mut();
            let table = match sessions.as_mut() {
                Some((spec, table)) if *spec == p => table,
                _ => {
                    let fresh = Sessions::new(p.max_entries, p.timeout);
                    &mut sessions.insert((p, fresh)).1
                }
            };
            if let Some(addr) = table.get(client, Instant::now())
                && let Some(&i) = shared.by_addr.get(&addr)
                && shared.usable_now(i)
                && !tried.contains(i)
            {
                add(&self.stats.session_hits, 1);
                return Some(i);
            }
        }
        let mut sched = self.sched.borrow_mut();
        sched.sync(&shared.scheduler);
        let key = client_key(client);
        let view = shared.view(true);
        let picked = sched
            .pick(&Request::new(&view).with_tried(tried).with_key(key))
            .ok();
        if picked.is_some() || !shared.passive.any(shared.spec.upstreams.len()) {
            return picked;
        }
        // every usable upstream left is excluded after failures: try them anyway (nginx does)
        let view = shared.view(false);
        sched
            .pick(&Request::new(&view).with_tried(tried).with_key(key))
            .ok()
    }

    /// Remembers that `client` was served by upstream `i` (when persistence is on).
    pub fn remember(&self, shared: &ListenerShared, client: IpAddr, i: usize) {
        if shared.spec.persistence.is_none() {
            return;
        }
        if let Some((_, table)) = self.sessions.borrow_mut().as_mut()
            && let Some(u) = shared.spec.upstreams.get(i)
            && table.insert(client, u.addr, Instant::now()) == Inserted::Evicted
        {
            add(&self.stats.session_evictions, 1);
        }
    }

    /// A kept-alive connection to upstream `i` at `addr`, if one is idle and still open (the
    /// newest first: the likeliest to be open; the oldest are left to time out).
    pub fn checkout(&self, i: usize, addr: SocketAddr, keepalive: Duration) -> Option<Upstream> {
        let mut pool = self.pool.borrow_mut();
        let (at, idle) = pool.get_mut(i)?;
        if *at != addr {
            idle.clear();
            return None;
        }
        while let Some((up, since)) = idle.pop_back() {
            if since.elapsed() <= keepalive && up.alive() {
                return Some(up);
            }
        }
        None
    }

    /// Gives a connection to upstream `i` at `addr` back to the pool of at most `cap` per
    /// upstream (the oldest is dropped — closed — when it is full).
    pub fn checkin(&self, i: usize, addr: SocketAddr, up: Upstream, cap: usize) {
        if cap == 0 {
            return;
        }
        let mut pool = self.pool.borrow_mut();
        if pool.len() <= i {
            pool.resize_with(i + 1, || (addr, VecDeque::new()));
        }
        let (at, idle) = &mut pool[i];
        if *at != addr {
            idle.clear();
            *at = addr;
        }
        if idle.len() >= cap {
            idle.pop_front();
        }
        idle.push_back((up, Instant::now()));
    }

    /// Closes idle upstream connections older than `keepalive`, closed by their upstream, or
    /// to upstreams gone.
    pub fn sweep_pool(&self, shared: &ListenerShared) {
        let keepalive = shared.spec.http.keepalive_timeout;
        let mut pool = self.pool.borrow_mut();
        for (i, (addr, idle)) in pool.iter_mut().enumerate() {
            if shared.spec.upstreams.get(i).map(|u| u.addr) != Some(*addr) {
                idle.clear();
            }
            idle.retain(|(up, since)| since.elapsed() <= keepalive && up.alive());
        }
        pool.truncate(shared.spec.upstreams.len());
    }

    fn connection_ended(&self) {
        self.active.set(self.active.get().saturating_sub(1));
        if self.active.get() == 0 {
            self.drained.notify_one();
        }
    }
}

/// Waits until `stop` says the worker stops. Use this, never `stop.wait_for` in a `select!`
/// arm: the guard `wait_for` returns holds the channel's read lock for as long as the arm's
/// body runs, and the next `send` — whose write lock waits for it — blocks every other
/// `borrow` of the channel, on this same thread: a worker whose arm awaits (a stopping
/// connection's last call) and another of its connections reading the flag deadlocked.
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// A running worker, seen from the listener that owns it.
#[derive(Debug)]
pub(crate) struct WorkerHandle {
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    /// Closes its listening socket; its connections drain, then the thread exits.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits (up to `limit`) for the thread to exit; whether it did.
    pub fn join(mut self, limit: Duration) -> bool {
        self.stop();
        let Some(t) = self.thread.take() else {
            return true;
        };
        let deadline = Instant::now() + limit;
        while !t.is_finished() {
            if Instant::now() >= deadline {
                return false; // left running: it exits by itself within DRAIN_LIMIT
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = t.join();
        true
    }

    /// Whether its thread has exited.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

/// A worker's own socket: listening (TCP, HTTP) or bound (UDP), with `SO_REUSEPORT`.
#[derive(Debug)]
pub(crate) enum ListenSocket {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

impl std::os::fd::AsFd for ListenSocket {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Self::Tcp(s) => s.as_fd(),
            Self::Udp(s) => s.as_fd(),
        }
    }
}

impl ListenSocket {
    /// The address it is bound to.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            Self::Tcp(s) => s.local_addr(),
            Self::Udp(s) => s.local_addr(),
        }
    }
}

/// What a new worker needs.
#[derive(Debug)]
pub(crate) struct WorkerSetup {
    pub id: usize,
    pub node: Arc<str>,
    pub name: String,
    pub socket: ListenSocket,
    pub listener: Arc<ArcSwap<ListenerShared>>,
    pub stats: Arc<ListenerStats>,
    pub budget: Arc<DescriptorBudget>,
    /// The CPU to pin the worker's thread to.
    pub cpu: Option<usize>,
    pub seed: u64,
    pub access: Option<Arc<AccessLog>>,
}

/// Starts a worker thread serving `setup.socket`.
pub(crate) fn spawn(setup: WorkerSetup) -> std::io::Result<WorkerHandle> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let id = setup.id;
    let thread = std::thread::Builder::new()
        .name(format!("stator-w{id}"))
        .spawn(move || run(setup, stop_rx))?;
    Ok(WorkerHandle {
        stop: stop_tx,
        thread: Some(thread),
    })
}

fn run(setup: WorkerSetup, stop: watch::Receiver<bool>) {
    if let Some(cpu) = setup.cpu
        && let Err(e) = stator_sys::cpu::pin_to_cpu(cpu)
    {
        tracing::warn!(listener = %setup.name, worker = setup.id, cpu, error = %e,
                       "cannot pin worker");
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(listener = %setup.name, worker = setup.id, error = %e, "worker runtime");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, serve(setup, stop));
}

async fn serve(setup: WorkerSetup, stop: watch::Receiver<bool>) {
    let (name, id) = (setup.name.clone(), setup.id);
    let listener = match setup.socket {
        ListenSocket::Tcp(s) => match TcpListener::from_std(s) {
            Ok(l) => Ok(l),
            Err(e) => {
                tracing::error!(listener = %name, worker = id, error = %e, "worker socket");
                return;
            }
        },
        ListenSocket::Udp(s) => Err(s),
    };
    let shared = setup.listener.load_full();
    let ctx = Rc::new(WorkerCtx {
        id: setup.id,
        node: setup.node,
        sched: RefCell::new(stator_sched::Picker::new(
            Arc::clone(&shared.scheduler),
            setup.seed,
        )),
        listener: setup.listener,
        stats: setup.stats,
        pipes: crate::copy::Pipes::new(Arc::clone(&setup.budget)),
        budget: setup.budget,
        sessions: RefCell::new(None),
        pool: RefCell::new(Vec::new()),
        spare: RefCell::new(Vec::new()),
        active: Cell::new(0),
        parked: Cell::new(0),
        stop: stop.clone(),
        drained: Notify::new(),
        access: LogBuf::new(setup.access, setup.seed),
    });
    drop(shared);
    let listener = match listener {
        Err(udp) => {
            if let Err(e) = crate::udp::serve(Rc::clone(&ctx), udp, stop).await {
                tracing::error!(listener = %name, worker = id, error = %e, "udp worker");
            }
            return;
        }
        Ok(l) => l,
    };
    let sweeper = tokio::task::spawn_local(sweep(Rc::clone(&ctx)));
    accept_loop(&ctx, listener, stop).await;
    // Stopped: the socket is closed; connections finish (bounded).
    let _ = tokio::time::timeout(DRAIN_LIMIT, async {
        while ctx.active.get() > 0 {
            ctx.drained.notified().await;
        }
    })
    .await;
    sweeper.abort();
}

async fn accept_loop(ctx: &Rc<WorkerCtx>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            () = stopped(&mut stop) => return,
            r = listener.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors or memory: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let shared = ctx.shared();
        add(&ctx.stats.connections, 1);
        // Refused connections are accepted and closed at once (counted): the client learns at
        // once, and the accept queue never holds them behind good ones.
        if ctx.active.get() >= shared.spec.max_connections {
            ctx.stats.client_error(ClientErrorKind::Rejected);
            drop(stream);
            continue;
        }
        let source = shared.spec.source_prefixes.source(peer.ip());
        let Ok(source) =
            SourceGuard::add(&ctx.stats, source, shared.spec.max_connections_per_source)
        else {
            ctx.stats.client_error(ClientErrorKind::SourceLimit);
            drop(stream);
            continue;
        };
        // TCP: this connection and its upstream one; HTTP: this one (each upstream connection
        // takes its own, and idle kept-alive ones keep theirs).
        let need = if shared.spec.protocol == Protocol::Tcp {
            2
        } else {
            1
        };
        let Some(descriptors) = ctx.budget.take(need) else {
            ctx.stats.client_error(ClientErrorKind::Descriptors);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        ctx.active.set(ctx.active.get() + 1);
        add(&ctx.stats.active, 1);
        let conn_ctx = Rc::clone(ctx);
        let protocol = shared.spec.protocol;
        let live = Live {
            ctx: conn_ctx,
            _held: (source, descriptors),
        };
        // one task shape per protocol: a task is as large as its largest state, and an HTTP
        // connection's waits between requests should not carry the TCP proxy's
        match protocol {
            Protocol::Tcp => {
                tokio::task::spawn_local(async move {
                    crate::tcp::serve(&live.ctx, stream, peer).await;
                });
            }
            Protocol::Http => {
                tokio::task::spawn_local(http_connection(live, stream, peer));
            }
            Protocol::Udp => {} // served by crate::udp, never accepted here
        }
    }
}

/// An accepted connection, counted as active (and holding its descriptors and its place in
/// the per-source count) until this is dropped.
struct Live {
    ctx: Rc<WorkerCtx>,
    _held: (Option<SourceGuard>, crate::limits::Descriptors),
}

impl Drop for Live {
    fn drop(&mut self) {
        self.ctx
            .stats
            .active
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        self.ctx.connection_ended();
    }
}

/// An HTTP connection for its whole life: served in a task of its own while it has requests
/// (`crate::http::serve`), waited on here, small, while it is idle between them.
async fn http_connection(live: Live, stream: tokio::net::TcpStream, peer: SocketAddr) {
    let mut start = crate::http::Start::New(stream, peer);
    loop {
        let served = spawn_serve(Rc::clone(&live.ctx), start);
        let Ok(Some(parked)) = served.await else {
            return;
        };
        live.ctx.parked.set(live.ctx.parked.get().saturating_add(1));
        if !crate::http::watch(&live.ctx, &parked).await {
            return;
        }
        start = crate::http::Start::Resume(parked);
    }
}

/// Spawns the task that serves a connection's requests. Not written inline in
/// [`http_connection`]: there the serving future, though moved into the task at once, would
/// still be laid out in `http_connection`'s own state (rustc keeps room for a moved-from local),
/// and every idle connection would carry its size — 2.5 KB of the 3.3 KB measured.
fn spawn_serve(
    ctx: Rc<WorkerCtx>,
    start: crate::http::Start,
) -> tokio::task::JoinHandle<Option<crate::http::Parked>> {
    tokio::task::spawn_local(async move { crate::http::serve(&ctx, start).await })
}

/// Serving tasks parked since the last trim that make the next sweep give the heap's free
/// pages back to the kernel.
const TRIM_AFTER_PARKED: u32 = 256;

/// Closes idle upstream connections past their keep-alive time, once a second. And after a
/// burst of connections has gone
/// idle — their serving tasks (heads, state) freed, the allocator still holding the pages —
/// gives those pages back (`trim_heap`), so the node's resident memory follows its idle
/// connections down instead of staying at the burst's peak.
async fn sweep(ctx: Rc<WorkerCtx>) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let shared = ctx.shared();
        ctx.sweep_pool(&shared);
        ctx.access.flush();
        if ctx.parked.get() >= TRIM_AFTER_PARKED {
            ctx.parked.set(0);
            stator_sys::process::trim_heap();
        }
    }
}
