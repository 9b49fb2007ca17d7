//! [`Proxy`]: the listeners of a node, started, changed and stopped as a whole.
//!
//! [`Proxy::apply`] makes the running listeners those of a list of specs, in two phases: first
//! everything that can fail (schedulers built, sockets bound, steering set up) — on an error
//! nothing running has changed; then the commit: shared state swapped (`ArcSwap`), workers
//! started, removed workers and listeners stopped. A listener whose address, protocol,
//! steering or pinning changed gets new sockets and workers (the old ones drain); any other
//! change, including the upstreams and their weights, is swapped under running workers
//! without closing a socket or a connection. [`Proxy::set_states`] flips upstreams usable or
//! not in place (health checks, drains): no rebuild, no allocation.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use socket2::{Domain, Protocol as SockProtocol, Socket, Type};

use crate::access::AccessLog;
use crate::error::ProxyError;
use crate::limits::DescriptorBudget;
use crate::shared::ListenerShared;
use crate::spec::Protocol;
use crate::spec::{ListenerSpec, Steering, UpstreamSpec, UpstreamState};
use crate::stats::{ListenerStats, UpstreamStats};
use crate::worker::{self, ListenSocket, WorkerHandle, WorkerSetup};

/// Listen backlog of every worker socket.
const BACKLOG: i32 = 4096;

/// The kernel side of `steering = "source"` and `"cpu"`, supplied by whoever can load BPF
/// programs (the node: `stator-steer`'s reuseport program, and for `"cpu"` its receive
/// steering). One group per listener.
pub trait SourceSteering: Send + Sync + std::fmt::Debug {
    /// Steering for listener `spec` (its `steering`, protocol and address) of `workers`
    /// sockets.
    fn group(&self, spec: &ListenerSpec, workers: usize) -> Result<Box<dyn SteeringGroup>, String>;
}

/// Steering of one listener's reuseport group.
pub trait SteeringGroup: Send + std::fmt::Debug {
    /// Worker `worker`'s socket.
    fn set_socket(&mut self, worker: usize, fd: BorrowedFd<'_>) -> Result<(), String>;
    /// Attaches the program to the group (through one of its sockets).
    fn attach(&mut self, fd: BorrowedFd<'_>) -> Result<(), String>;
    /// The workers that take new connections; a worker leaving moves only its own clients.
    fn set_workers(&mut self, live: &[u32]) -> Result<(), String>;
    /// Empties worker `worker`'s slot (its socket may join another process's group map: a
    /// socket is in one at most).
    fn clear_socket(&mut self, worker: usize) -> Result<(), String>;
    /// The program's hash key, for a process that replaces this one to steer every client to
    /// the same worker index ([`Proxy::steering_keys`]); none by default.
    fn key(&self) -> Option<Vec<u8>> {
        None
    }
    /// The program's counters by label (for metrics); none by default.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

#[derive(Debug)]
struct Running {
    shared: Arc<ArcSwap<ListenerShared>>,
    stats: Arc<ListenerStats>,
    address: SocketAddr,
    workers: Vec<WorkerHandle>,
    group: Option<Box<dyn SteeringGroup>>,
    /// A copy of each worker's socket, in worker order, for the process that replaces this
    /// one ([`Proxy::handover`]): the workers own theirs.
    copies: Vec<OwnedFd>,
}

/// A listening (or bound, for UDP) socket handed over by the process this one replaces, for
/// the listener of the same name, protocol and address ([`Proxy::inherit`]).
#[derive(Debug)]
pub struct InheritedSocket {
    /// The listener that had it.
    pub listener: String,
    /// The address it is bound to.
    pub address: SocketAddr,
    /// A UDP socket (else TCP, listening).
    pub udp: bool,
    /// The socket.
    pub fd: OwnedFd,
}

/// A running listener's socket as [`Proxy::handover`] lists it.
#[derive(Debug)]
pub struct HandoverSocket<'a> {
    /// The listener.
    pub listener: &'a str,
    /// The address it is bound to.
    pub address: SocketAddr,
    /// A UDP socket (else TCP, listening).
    pub udp: bool,
    /// The socket.
    pub fd: BorrowedFd<'a>,
}

/// The proxy tier of a node.
#[derive(Debug)]
pub struct Proxy {
    node: Arc<str>,
    steering: Option<Arc<dyn SourceSteering>>,
    listeners: BTreeMap<String, Running>,
    stats: BTreeMap<String, Arc<ListenerStats>>,
    retiring: Vec<WorkerHandle>,
    budget: Arc<DescriptorBudget>,
    access: Option<Arc<AccessLog>>,
    /// Sockets handed over by the process this one replaces, not yet taken by a listener.
    inherited: Mutex<Vec<InheritedSocket>>,
}

/// One upstream as [`Proxy::listeners`] shows it.
#[derive(Debug, Clone)]
pub struct UpstreamView {
    /// What it is.
    pub spec: UpstreamSpec,
    /// Its state.
    pub state: UpstreamState,
    /// How long it stays out of picks after failures (passive health), if it is out.
    pub excluded_for: Option<std::time::Duration>,
    /// Failures counted towards `max_fails` in its current window.
    pub recent_failures: u32,
    /// Its counters.
    pub stats: Arc<UpstreamStats>,
}

/// One listener as [`Proxy::listeners`] shows it.
#[derive(Debug, Clone)]
pub struct ListenerView {
    /// What it runs.
    pub spec: ListenerSpec,
    /// The address bound (the spec's, with the port the kernel chose for port 0).
    pub address: SocketAddr,
    /// Workers running.
    pub workers: usize,
    /// Its counters.
    pub stats: Arc<ListenerStats>,
    /// Its upstreams, in the spec's order.
    pub upstreams: Vec<UpstreamView>,
    /// Its steering program's counters, by label (empty for `steering = "kernel"`).
    pub steering: Vec<(&'static str, u64)>,
}

/// A change to the listeners, prepared by [`Proxy::prepare`] (sockets bound, schedulers
/// built) and not yet running: [`Proxy::commit`] runs it, dropping it releases its sockets.
#[derive(Debug)]
pub struct Prepared {
    plans: Vec<(Plan, Arc<ListenerStats>)>,
}

/// What a commit needs for one listener.
#[derive(Debug)]
enum Plan {
    Keep {
        shared: ListenerShared,
        add: Vec<(usize, ListenSocket)>,
        remove: usize,
    },
    Start {
        shared: ListenerShared,
        sockets: Vec<ListenSocket>,
        address: SocketAddr,
        group: Option<Box<dyn SteeringGroup>>,
    },
}

/// A copy of `socket`'s descriptor (the worker gets the socket, the proxy keeps the copy).
fn copy(listener: &str, socket: &ListenSocket) -> Result<OwnedFd, ProxyError> {
    socket
        .as_fd()
        .try_clone_to_owned()
        .map_err(|source| ProxyError::Bind {
            listener: listener.to_owned(),
            address: socket
                .local_addr()
                .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
            source,
        })
}

impl Proxy {
    /// A proxy with no listener; `node` names it in `X-Served-By`; `steering` serves
    /// listeners with `steering = "source"` (without it they are refused).
    pub fn new(node: &str, steering: Option<Arc<dyn SourceSteering>>) -> Self {
        Self {
            node: Arc::from(node),
            steering,
            listeners: BTreeMap::new(),
            stats: BTreeMap::new(),
            retiring: Vec::new(),
            budget: Arc::default(),
            access: None,
            inherited: Mutex::new(Vec::new()),
        }
    }

    /// Sockets handed over by the process this one replaces: the next [`Proxy::prepare`]
    /// gives a new listener those of its name, protocol and address (port 0 matches any
    /// port) instead of binding its own, in order, and binds more if it has more workers.
    pub fn inherit(&self, sockets: Vec<InheritedSocket>) {
        self.inherited
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(sockets);
    }

    /// Closes the handed-over sockets no listener took (a listener removed or changed by the
    /// upgrade, or one with fewer workers), and says which. A connection waiting in such a
    /// socket's accept queue is reset unless `net.ipv4.tcp_migrate_req` is on.
    pub fn close_inherited(&self) -> Vec<(String, SocketAddr)> {
        std::mem::take(
            &mut *self
                .inherited
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
        .into_iter()
        .map(|s| (s.listener, s.address))
        .collect()
    }

    /// Lets go of every listener's sockets in its steering program's map, so that a process
    /// this one hands them to can put them in its own (a socket is in one map at most); until
    /// that process attaches its program, the kernel picks the worker for new connections (its
    /// own hash over the group). Errors are logged.
    pub fn release_steering(&mut self) {
        for (name, r) in &mut self.listeners {
            let Some(g) = r.group.as_mut() else { continue };
            for i in 0..r.copies.len() {
                if let Err(e) = g.clear_socket(i) {
                    tracing::warn!(listener = %name, worker = i, error = %e, "steering: releasing a socket");
                }
            }
        }
    }

    /// Takes the sockets back after [`Proxy::release_steering`] (the process they were handed
    /// to did not start): attaches this process's program to each group again (replacing any
    /// other) and puts the sockets back, retrying while the kernel still holds them in the
    /// other process's map (freed after its program is replaced). Errors are logged.
    pub fn reclaim_steering(&mut self) {
        for (name, r) in &mut self.listeners {
            let Some(g) = r.group.as_mut() else { continue };
            if let Some(first) = r.copies.first()
                && let Err(e) = g.attach(first.as_fd())
            {
                tracing::warn!(listener = %name, error = %e, "steering: attaching again");
            }
            for (i, fd) in r.copies.iter().enumerate() {
                let mut tries = 0;
                while let Err(e) = g.set_socket(i, fd.as_fd()) {
                    tries += 1;
                    if tries >= 50 {
                        tracing::warn!(listener = %name, worker = i, error = %e, "steering: taking a socket back");
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            let live: Vec<u32> = (0..r.workers.len() as u32).collect();
            if let Err(e) = g.set_workers(&live) {
                tracing::warn!(listener = %name, error = %e, "steering: set_workers");
            }
        }
    }

    /// Each steered listener's program key, by listener name: what a process that replaces
    /// this one needs to send each client to the same worker index as here.
    pub fn steering_keys(&self) -> Vec<(String, Vec<u8>)> {
        self.listeners
            .iter()
            .filter_map(|(name, r)| Some((name.clone(), r.group.as_ref()?.key()?)))
            .collect()
    }

    /// Every running listener's sockets, in worker order: what a process that replaces this
    /// one needs to serve the same listeners without closing them.
    pub fn handover(&self) -> Vec<HandoverSocket<'_>> {
        self.listeners
            .iter()
            .flat_map(|(name, r)| {
                let udp = r.shared.load().spec.protocol == Protocol::Udp;
                r.copies.iter().map(move |fd| HandoverSocket {
                    listener: name,
                    address: r.address,
                    udp,
                    fd: fd.as_fd(),
                })
            })
            .collect()
    }

    /// The same proxy drawing its descriptors from `budget` (without one: an unlimited
    /// budget). Every worker started after this uses it.
    #[must_use]
    pub fn with_budget(mut self, budget: Arc<DescriptorBudget>) -> Self {
        self.budget = budget;
        self
    }

    /// The same proxy writing its access log to `log` (see [`crate::access`]); every worker
    /// started after this writes there, whenever `log` is configured on.
    #[must_use]
    pub fn with_access_log(mut self, log: Arc<AccessLog>) -> Self {
        self.access = Some(log);
        self
    }

    /// Its access log, if it was given one.
    pub fn access_log(&self) -> Option<&Arc<AccessLog>> {
        self.access.as_ref()
    }

    /// The descriptor budget its workers draw from.
    pub fn budget(&self) -> &Arc<DescriptorBudget> {
        &self.budget
    }

    fn common(&self) -> Common {
        Common {
            node: Arc::clone(&self.node),
            budget: Arc::clone(&self.budget),
            access: self.access.clone(),
        }
    }

    /// Makes the running listeners exactly `specs` (see the module documentation): the two
    /// phases of [`Proxy::prepare`] and [`Proxy::commit`] at once. On error nothing changed.
    pub fn apply(&mut self, specs: Vec<ListenerSpec>) -> Result<(), ProxyError> {
        let prepared = self.prepare(specs)?;
        self.commit(prepared)
    }

    /// The first phase of a change to `specs`: everything that can fail — schedulers built,
    /// new and changed listeners' sockets bound (a port taken fails here), steering set up —
    /// without touching what runs. Dropping the result releases its sockets; committing it
    /// ([`Proxy::commit`]) makes it run. A node calls this before it commits a reloaded
    /// configuration, so a listener that cannot start refuses the reload.
    pub fn prepare(&self, specs: Vec<ListenerSpec>) -> Result<Prepared, ProxyError> {
        let mut plans = Vec::with_capacity(specs.len());
        for spec in specs {
            let stats = self.stats.get(&spec.name).cloned().unwrap_or_default();
            let plan = match self.listeners.get(&spec.name) {
                Some(r) if !r.shared.load().spec.needs_rebind(&spec) => {
                    let current = r.workers.len();
                    let add = (current..spec.workers)
                        .map(|i| bind(&spec, r.address).map(|s| (i, s)))
                        .collect::<Result<Vec<_>, _>>()?;
                    let remove = current.saturating_sub(spec.workers);
                    let shared = ListenerShared::build(spec, &stats, Some(&r.shared.load()))?;
                    Plan::Keep {
                        shared,
                        add,
                        remove,
                    }
                }
                previous => {
                    let prev = previous.map(|r| r.shared.load_full());
                    let (sockets, address) = bind_all(&spec, &self.inherited)?;
                    let group = self.steer(&spec, &sockets)?;
                    let shared = ListenerShared::build(spec, &stats, prev.as_deref())?;
                    Plan::Start {
                        shared,
                        sockets,
                        address,
                        group,
                    }
                }
            };
            plans.push((plan, stats));
        }
        Ok(Prepared { plans })
    }

    /// The second phase: makes what [`Proxy::prepare`] built run. Nothing here fails but
    /// starting threads (which leaves what started running and reports the error). Meant for
    /// the result of the latest `prepare` on this proxy: a listener it keeps that has been
    /// removed since is skipped.
    pub fn commit(&mut self, prepared: Prepared) -> Result<(), ProxyError> {
        let plans = prepared.plans;
        let names: Vec<String> = plans
            .iter()
            .map(|(p, _)| match p {
                Plan::Keep { shared, .. } | Plan::Start { shared, .. } => shared.spec.name.clone(),
            })
            .collect();
        let removed: Vec<String> = self
            .listeners
            .keys()
            .filter(|n| !names.contains(n))
            .cloned()
            .collect();
        for name in removed {
            if let Some(r) = self.listeners.remove(&name) {
                tracing::info!(listener = %name, "listener removed: its socket closes, its connections drain");
                self.retire(r);
            }
            self.stats.remove(&name);
        }
        let mut first_error = None;
        for (plan, stats) in plans {
            let name = match &plan {
                Plan::Keep { shared, .. } | Plan::Start { shared, .. } => shared.spec.name.clone(),
            };
            self.stats.insert(name, Arc::clone(&stats));
            if let Err(e) = self.commit_one(plan, stats) {
                first_error.get_or_insert(e);
            }
        }
        self.retiring.retain(|w| !w.is_finished());
        first_error.map_or(Ok(()), Err)
    }

    fn commit_one(&mut self, plan: Plan, stats: Arc<ListenerStats>) -> Result<(), ProxyError> {
        let common = self.common();
        match plan {
            Plan::Keep {
                shared,
                add,
                remove,
            } => {
                let name = shared.spec.name.clone();
                let keep: Vec<&str> = shared
                    .spec
                    .upstreams
                    .iter()
                    .map(|u| u.name.as_str())
                    .collect();
                stats.retain_upstreams(&keep);
                let Some(r) = self.listeners.get_mut(&name) else {
                    return Ok(());
                };
                r.shared.store(Arc::new(shared));
                for _ in 0..remove {
                    r.copies.pop();
                    if let Some(w) = r.workers.pop() {
                        let live: Vec<u32> = (0..r.workers.len() as u32).collect();
                        if let Some(g) = r.group.as_mut()
                            && let Err(e) = g.set_workers(&live)
                        {
                            tracing::warn!(listener = %name, error = %e, "steering: set_workers");
                        }
                        w.stop();
                        self.retiring.push(w);
                    }
                }
                for (i, socket) in add {
                    r.copies.push(copy(&name, &socket)?);
                    if let Some(g) = r.group.as_mut() {
                        let _ = g.set_socket(i, socket.as_fd());
                    }
                    let w = start_worker(&common, &name, i, socket, r)?;
                    r.workers.push(w);
                }
                if let Some(g) = r.group.as_mut() {
                    let live: Vec<u32> = (0..r.workers.len() as u32).collect();
                    let _ = g.set_workers(&live);
                }
                Ok(())
            }
            Plan::Start {
                shared,
                sockets,
                address,
                group,
            } => {
                let name = shared.spec.name.clone();
                tracing::info!(listener = %name, %address, workers = sockets.len(),
                               protocol = shared.spec.protocol.as_str(), "listener started");
                let copies = sockets
                    .iter()
                    .map(|s| copy(&name, s))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut r = Running {
                    shared: Arc::new(ArcSwap::from_pointee(shared)),
                    stats,
                    address,
                    workers: Vec::new(),
                    group,
                    copies,
                };
                let mut result = Ok(());
                for (i, socket) in sockets.into_iter().enumerate() {
                    match start_worker(&common, &name, i, socket, &r) {
                        Ok(w) => r.workers.push(w),
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
                if let Some(old) = self.listeners.insert(name, r) {
                    self.retire(old);
                }
                result
            }
        }
    }

    fn steer(
        &self,
        spec: &ListenerSpec,
        sockets: &[ListenSocket],
    ) -> Result<Option<Box<dyn SteeringGroup>>, ProxyError> {
        if spec.steering == Steering::Kernel {
            return Ok(None);
        }
        let fail = |reason: String| ProxyError::Steering {
            listener: spec.name.clone(),
            steering: spec.steering.as_str(),
            reason,
        };
        let Some(factory) = &self.steering else {
            return Err(fail("this node has no reuseport steering program".into()));
        };
        let mut group = factory.group(spec, sockets.len()).map_err(fail)?;
        for (i, s) in sockets.iter().enumerate() {
            group.set_socket(i, s.as_fd()).map_err(fail)?;
        }
        if let Some(first) = sockets.first() {
            group.attach(first.as_fd()).map_err(fail)?;
        }
        let live: Vec<u32> = (0..sockets.len() as u32).collect();
        group.set_workers(&live).map_err(fail)?;
        Ok(Some(group))
    }

    fn retire(&mut self, r: Running) {
        for w in r.workers {
            w.stop();
            self.retiring.push(w);
        }
    }

    /// Sets the states of a listener's upstreams, by index in its spec (extra entries are
    /// ignored, missing ones keep their state).
    pub fn set_states(&self, listener: &str, states: &[UpstreamState]) -> Result<(), ProxyError> {
        let r = self
            .listeners
            .get(listener)
            .ok_or_else(|| ProxyError::UnknownListener(listener.to_owned()))?;
        let shared = r.shared.load();
        for (i, s) in states.iter().enumerate() {
            shared.set_state(i, *s);
        }
        Ok(())
    }

    /// The address a listener is bound to.
    pub fn local_addr(&self, listener: &str) -> Option<SocketAddr> {
        self.listeners.get(listener).map(|r| r.address)
    }

    /// Every listener with its counters, by name.
    pub fn listeners(&self) -> Vec<ListenerView> {
        self.listeners
            .values()
            .map(|r| {
                let shared = r.shared.load();
                ListenerView {
                    spec: shared.spec.clone(),
                    address: r.address,
                    workers: r.workers.len(),
                    stats: Arc::clone(&r.stats),
                    steering: r.group.as_ref().map(|g| g.counters()).unwrap_or_default(),
                    upstreams: shared
                        .spec
                        .upstreams
                        .iter()
                        .enumerate()
                        .map(|(i, u)| UpstreamView {
                            spec: u.clone(),
                            state: shared.state(i),
                            excluded_for: shared.passive.excluded_for(i, crate::passive::now_ns()),
                            recent_failures: shared.passive.failures(i),
                            stats: Arc::clone(&shared.stats[i]),
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// Stops every listener: sockets closed at once, connections given up to `limit` to end.
    pub fn shutdown(mut self, limit: Duration) {
        let all: Vec<String> = self.listeners.keys().cloned().collect();
        for name in all {
            if let Some(r) = self.listeners.remove(&name) {
                self.retire(r);
            }
        }
        let deadline = std::time::Instant::now() + limit;
        for w in self.retiring.drain(..) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            w.join(left);
        }
    }
}

/// What every worker of the proxy gets.
struct Common {
    node: Arc<str>,
    budget: Arc<DescriptorBudget>,
    access: Option<Arc<AccessLog>>,
}

fn start_worker(
    common: &Common,
    name: &str,
    i: usize,
    socket: ListenSocket,
    r: &Running,
) -> Result<WorkerHandle, ProxyError> {
    let cpu = r.shared.load().spec.worker_cpu(i);
    worker::spawn(WorkerSetup {
        id: i,
        node: Arc::clone(&common.node),
        name: name.to_owned(),
        socket,
        listener: Arc::clone(&r.shared),
        stats: Arc::clone(&r.stats),
        budget: Arc::clone(&common.budget),
        access: common.access.clone(),
        cpu,
        seed: rand::random(),
    })
    .map_err(|source| ProxyError::Worker {
        listener: name.to_owned(),
        worker: i,
        source,
    })
}

/// One socket per worker, all on the spec's address (the first decides the port when it is
/// 0): handed-over ones of the same listener first ([`Proxy::inherit`]).
fn bind_all(
    spec: &ListenerSpec,
    inherited: &Mutex<Vec<InheritedSocket>>,
) -> Result<(Vec<ListenSocket>, SocketAddr), ProxyError> {
    let udp = spec.protocol == Protocol::Udp;
    let mut taken: Vec<ListenSocket> = {
        let mut pool = inherited.lock().unwrap_or_else(PoisonError::into_inner);
        let fits = |s: &InheritedSocket| {
            s.listener == spec.name
                && s.udp == udp
                && (s.address == spec.address
                    || (spec.address.port() == 0 && s.address.ip() == spec.address.ip()))
        };
        let Some(port) = pool.iter().find(|s| fits(s)).map(|s| s.address.port()) else {
            return bind_fresh(spec);
        };
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut *pool)
            .into_iter()
            .partition(|s| fits(s) && s.address.port() == port);
        *pool = rest;
        mine.into_iter()
            .map(|s| {
                if udp {
                    ListenSocket::Udp(s.fd.into())
                } else {
                    ListenSocket::Tcp(s.fd.into())
                }
            })
            .collect()
    };
    let want = spec.workers.max(1);
    taken.truncate(want);
    let address = taken[0].local_addr().map_err(|source| ProxyError::Bind {
        listener: spec.name.clone(),
        address: spec.address,
        source,
    })?;
    tracing::info!(listener = %spec.name, %address, inherited = taken.len(),
                   "listener takes the sockets handed over");
    while taken.len() < want {
        taken.push(bind(spec, address)?);
    }
    Ok((taken, address))
}

/// [`bind_all`] with no socket handed over.
fn bind_fresh(spec: &ListenerSpec) -> Result<(Vec<ListenSocket>, SocketAddr), ProxyError> {
    let first = bind(spec, spec.address)?;
    let address = first.local_addr().map_err(|source| ProxyError::Bind {
        listener: spec.name.clone(),
        address: spec.address,
        source,
    })?;
    let mut sockets = vec![first];
    for _ in 1..spec.workers.max(1) {
        sockets.push(bind(spec, address)?);
    }
    Ok((sockets, address))
}

/// A non-blocking socket on `address` with `SO_REUSEPORT`: listening (TCP, HTTP) or bound
/// (UDP).
fn bind(spec: &ListenerSpec, address: SocketAddr) -> Result<ListenSocket, ProxyError> {
    let fail = |source| ProxyError::Bind {
        listener: spec.name.clone(),
        address,
        source,
    };
    let udp = spec.protocol == Protocol::Udp;
    let socket = if udp {
        Socket::new(
            Domain::for_address(address),
            Type::DGRAM,
            Some(SockProtocol::UDP),
        )
    } else {
        Socket::new(
            Domain::for_address(address),
            Type::STREAM,
            Some(SockProtocol::TCP),
        )
    }
    .map_err(fail)?;
    socket.set_reuse_address(true).map_err(fail)?;
    socket.set_reuse_port(true).map_err(fail)?;
    socket.set_nonblocking(true).map_err(fail)?;
    socket.bind(&address.into()).map_err(fail)?;
    if udp {
        return Ok(ListenSocket::Udp(socket.into()));
    }
    socket.listen(BACKLOG).map_err(fail)?;
    Ok(ListenSocket::Tcp(socket.into()))
}
