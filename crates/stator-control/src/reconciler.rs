//! The reconciler: the one owner of a node's state.
//!
//! Inputs arrive as messages — a reload ([`Request::Apply`]), a drain or undrain, a health
//! [`Transition`], a [`ForwarderEvent`], a drain timeout, a retry after a failed commit — and
//! each is handled to the end before the next: plan (pure), build a complete snapshot (pure,
//! on a blocking thread), commit it to the data plane (blocking), then tell the announcer
//! and publish a new [`View`]. Because one task does all of this, concurrent reloads are
//! serialized: `If-Match` compares with the generation of the config that is running when
//! the request is handled, so exactly one of several requests naming the same generation
//! wins.
//!
//! A failed reload changes nothing (the config, ids, health checks, generation stay); a
//! failed commit after a health change keeps the old snapshot, is reported, and is retried
//! every second until one succeeds.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use stator_bird::{Announcer, AnnouncerThread, DesiredRoutes};
use stator_config::{BackendId, Config, HealthPlan, OnExit};
use stator_core::{RealId, Snapshot, Traffic, VipId};
use tokio::sync::{mpsc, oneshot, watch};

use crate::dataplane::{DataPlane, PlaneReader};
use crate::error::ControlError;
use crate::health::{CheckKey, Runner, Transition};
use crate::host;
use crate::ids::{Assignment, Ids, Reuse};
use crate::plan::{self, BackendState, Built, Drain, Health};
use crate::view::{BackendView, DrainView, ForwarderView, LastError, Phase, Stats, View};

/// The data plane's writer, shared by the reconciler and the forwarder-health loop.
pub type SharedPlane = Arc<Mutex<Box<dyn DataPlane>>>;

/// The announcer, shared with the API (for its status).
pub type SharedAnnouncer = Arc<Mutex<Option<AnnouncerThread>>>;

/// How long shutdown waits for BIRD to confirm the withdrawal.
pub const WITHDRAW_TIMEOUT: Duration = Duration::from_secs(5);

/// Delay before retrying a failed commit.
const RETRY: Duration = Duration::from_secs(1);

/// Longest wait for the first health results before the first commit.
const STARTUP_HEALTH_CAP: Duration = Duration::from_secs(30);

/// A request to the reconciler.
#[derive(Debug)]
pub enum Request {
    /// Apply a configuration (TOML text).
    Apply {
        /// The text.
        text: String,
        /// Where it came from (for messages and status).
        source: String,
        /// Apply only if the running config has this generation.
        if_match: Option<u64>,
        /// The answer.
        reply: oneshot::Sender<Result<ApplyReport, ControlError>>,
    },
    /// Drain a backend (by stable name) for `timeout` (the config's default if `None`).
    Drain {
        /// The backend's stable name.
        backend: String,
        /// How long existing connections are kept.
        timeout: Option<Duration>,
        /// The answer.
        reply: oneshot::Sender<Result<(), ControlError>>,
    },
    /// End a drain.
    Undrain {
        /// The backend's stable name.
        backend: String,
        /// The answer.
        reply: oneshot::Sender<Result<(), ControlError>>,
    },
    /// Withdraw everything, stop the checks, detach or keep the data plane, and stop.
    Shutdown {
        /// Answered when done, with the withdrawal's error if it failed.
        reply: oneshot::Sender<Result<(), ControlError>>,
    },
}

/// What a successful reload did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApplyReport {
    /// The generation of the config now running.
    pub config_generation: u64,
    /// The generation of the snapshot now forwarding.
    pub generation: u64,
    /// Time to build the snapshot (Maglev tables included), seconds.
    pub build_seconds: f64,
    /// Time to commit it to the data plane, seconds.
    pub commit_seconds: f64,
    /// Request to commit done, seconds.
    pub reload_seconds: f64,
    /// Maglev tables built (the others were unchanged and reused).
    pub tables_rebuilt: usize,
    /// VIPs.
    pub vips: usize,
    /// Reals in the snapshot.
    pub reals: usize,
    /// Warnings about the configuration (valid, probably not meant).
    pub warnings: Vec<String>,
}

/// The forwarder's health changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwarderEvent {
    /// Healthy now.
    pub healthy: bool,
    /// Why not, when not.
    pub reason: Option<String>,
}

/// Everything the reconciler is started with.
#[derive(Debug)]
pub struct Parts {
    /// The data plane's writer.
    pub plane: SharedPlane,
    /// A reader of the data plane (for counter baselines).
    pub reader: Arc<dyn PlaneReader>,
    /// The first configuration and its text.
    pub config: Arc<Config>,
    /// Its text.
    pub text: String,
    /// Where it came from.
    pub source: String,
    /// The data plane's active snapshot at start (ids and generation are seeded from it).
    pub active: Option<Snapshot>,
    /// Interfaces attached.
    pub interfaces: Vec<String>,
    /// The announcer slot, shared with the API.
    pub announcer: SharedAnnouncer,
    /// The API token, shared with the API.
    pub token: Arc<RwLock<Option<String>>>,
    /// Set when shutting down (the forwarder-health loop stops repairing).
    pub stopping: Arc<AtomicBool>,
}

/// The reconciler's inputs besides requests.
#[derive(Debug)]
pub struct Inputs {
    /// Requests (API, signals).
    pub requests: mpsc::Receiver<Request>,
    /// Health transitions from the runner.
    pub transitions: mpsc::UnboundedReceiver<Transition>,
    /// The forwarder-health loop's changes.
    pub forwarder: mpsc::UnboundedReceiver<ForwarderEvent>,
}

/// The reconciler's state. Construct with [`Reconciler::new`], run with [`Reconciler::run`].
#[derive(Debug)]
pub struct Reconciler {
    plane: SharedPlane,
    reader: Arc<dyn PlaneReader>,
    runner: Runner,
    announcer: SharedAnnouncer,
    token: Arc<RwLock<Option<String>>>,
    stopping: Arc<AtomicBool>,
    view_tx: watch::Sender<Arc<View>>,
    phase: Phase,
    config: Arc<Config>,
    text: Arc<str>,
    source: String,
    config_generation: u64,
    applied_at: SystemTime,
    plan: HealthPlan,
    ids: Ids,
    assignment: Assignment,
    drains: BTreeMap<String, Drain>,
    built: Option<Arc<Built>>,
    generation: u64,
    committed_at: Option<SystemTime>,
    forwarder: ForwarderView,
    health_seen: BTreeMap<String, Health>,
    transitions: BTreeMap<String, (u64, u64)>,
    vip_baselines: Arc<BTreeMap<VipId, Traffic>>,
    real_baselines: Arc<BTreeMap<RealId, Traffic>>,
    stats: Stats,
    last_error: Option<LastError>,
    retry_at: Option<Instant>,
    interfaces: Vec<String>,
    plane_kind: &'static str,
}

/// The longest connection-table idle timeout: how long a freed id stays in quarantine.
pub fn quarantine(config: &Config) -> Duration {
    config
        .dataplane
        .tcp_timeout
        .max(config.dataplane.udp_timeout)
}

fn lock_plane(plane: &SharedPlane) -> std::sync::MutexGuard<'_, Box<dyn DataPlane>> {
    // A panicked holder cannot leave the data plane half-committed (commits are atomic in
    // the plane), so the lock stays usable.
    plane.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `f` with the data plane's writer on a blocking thread.
pub async fn with_plane<T: Send + 'static>(
    plane: &SharedPlane,
    f: impl FnOnce(&mut dyn DataPlane) -> T + Send + 'static,
) -> Result<T, ControlError> {
    let plane = Arc::clone(plane);
    tokio::task::spawn_blocking(move || f(lock_plane(&plane).as_mut()))
        .await
        .map_err(|e| ControlError::io("data plane task", std::io::Error::other(e.to_string())))
}

impl Reconciler {
    /// A reconciler for `parts`, sending health transitions from its runner to
    /// `transitions`. Must be called inside a tokio runtime (it starts the first
    /// configuration's health checks). Subscribe to its views with [`Reconciler::subscribe`].
    pub fn new(parts: Parts, transitions: mpsc::UnboundedSender<Transition>) -> Self {
        let now = Instant::now();
        let config = parts.config;
        let q = quarantine(&config);
        let ids = match &parts.active {
            Some(active) => Ids::seeded(active, &config, now, q),
            None => Ids::new(),
        };
        let generation = parts.active.as_ref().map_or(0, |s| s.generation);
        let plan = config.health_plan();
        let mut runner = Runner::new(transitions);
        runner.apply(&plan, unchecked_addresses(&config, &plan));
        let plane_kind = lock_plane(&parts.plane).kind();
        let text: Arc<str> = Arc::from(parts.text);
        let (view_tx, _) = watch::channel(Arc::new(View::starting(
            Arc::clone(&config),
            Arc::clone(&text),
            parts.source.clone(),
            plane_kind,
        )));
        Self {
            plane: parts.plane,
            reader: parts.reader,
            runner,
            announcer: parts.announcer,
            token: parts.token,
            stopping: parts.stopping,
            view_tx,
            phase: Phase::Starting,
            text,
            source: parts.source,
            config_generation: 0,
            applied_at: SystemTime::now(),
            plan,
            ids,
            assignment: Assignment::default(),
            drains: BTreeMap::new(),
            built: None,
            generation,
            committed_at: None,
            forwarder: ForwarderView {
                healthy: false,
                reason: Some("not checked yet".into()),
                since: SystemTime::now(),
                failures: 0,
            },
            health_seen: BTreeMap::new(),
            transitions: BTreeMap::new(),
            vip_baselines: Arc::default(),
            real_baselines: Arc::default(),
            stats: Stats::default(),
            last_error: None,
            retry_at: None,
            interfaces: parts.interfaces,
            plane_kind,
            config,
        }
    }

    /// A receiver of the views this reconciler publishes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<View>> {
        self.view_tx.subscribe()
    }

    /// The health-check runner (its statuses are shown by the API).
    pub fn runner(&self) -> &Runner {
        &self.runner
    }

    /// Waits for the first health results (bounded), then assigns ids and commits the first
    /// snapshot. On error nothing was committed (the data plane keeps what it had).
    pub async fn start(&mut self, inputs: &mut Inputs) -> Result<ApplyReport, ControlError> {
        let started = Instant::now();
        let wait = startup_wait(&self.plan);
        let deadline = tokio::time::Instant::now() + wait;
        while !self.runner.all_known() {
            tokio::select! {
                t = inputs.transitions.recv() => { if t.is_none() { break; } }
                f = inputs.forwarder.recv() => { if let Some(f) = f { self.forwarder_changed(f); } }
                () = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(waited = ?wait, "some health checks have no result yet; \
                                   their backends start unused");
                    break;
                }
            }
        }
        let config = Arc::clone(&self.config);
        let (ids, assignment) = self
            .ids
            .assign(&config, Instant::now(), quarantine(&config))?;
        self.note_new_ids(&assignment);
        self.ids = ids;
        self.assignment = assignment;
        let report = self.rebuild(true).await?;
        self.config_generation = self.generation;
        self.phase = Phase::Running;
        self.spawn_announcer();
        self.announce();
        self.publish();
        tracing::info!(
            generation = self.generation,
            vips = config.vips.len(),
            took = ?started.elapsed(),
            "first snapshot committed; node running"
        );
        Ok(ApplyReport {
            config_generation: self.config_generation,
            reload_seconds: started.elapsed().as_secs_f64(),
            ..report
        })
    }

    /// Handles inputs until a [`Request::Shutdown`] (or every sender is gone).
    pub async fn run(mut self, mut inputs: Inputs) {
        loop {
            let deadline = self.next_deadline();
            let sleep = tokio::time::sleep_until(
                deadline.map_or_else(far_future, tokio::time::Instant::from_std),
            );
            tokio::select! {
                req = inputs.requests.recv() => match req {
                    None => return,
                    Some(Request::Shutdown { reply }) => {
                        let result = self.shutdown().await;
                        let _ = reply.send(result);
                        return;
                    }
                    Some(req) => self.handle(req).await,
                },
                Some(t) = inputs.transitions.recv() => {
                    tracing::debug!(check = %t.key.url(), up = t.up, "transition");
                    // Take every transition already queued: one rebuild for a rack that fails.
                    while inputs.transitions.try_recv().is_ok() {}
                    self.rebuild_logged("health change").await;
                }
                Some(f) = inputs.forwarder.recv() => {
                    self.forwarder_changed(f);
                    self.announce();
                    self.publish();
                }
                () = sleep => {
                    self.expire_drains();
                    self.retry_at = None;
                    self.rebuild_logged("drain timeout or retry").await;
                }
            }
        }
    }

    async fn handle(&mut self, req: Request) {
        match req {
            Request::Apply {
                text,
                source,
                if_match,
                reply,
            } => {
                let result = self.apply(text, source, if_match).await;
                if let Err(e) = &result {
                    self.stats.reloads_failed += 1;
                    self.record_error(format!("reload refused: {e}"));
                    tracing::warn!(error = %e, "reload refused; the running config stays");
                    self.publish();
                }
                let _ = reply.send(result);
            }
            Request::Drain {
                backend,
                timeout,
                reply,
            } => {
                let result = self.drain(backend, timeout).await;
                let _ = reply.send(result);
            }
            Request::Undrain { backend, reply } => {
                let result = self.undrain(backend).await;
                let _ = reply.send(result);
            }
            Request::Shutdown { .. } => unreachable!("handled by run"),
        }
    }

    async fn apply(
        &mut self,
        text: String,
        source: String,
        if_match: Option<u64>,
    ) -> Result<ApplyReport, ControlError> {
        let started = Instant::now();
        if self.phase == Phase::Stopping {
            return Err(ControlError::ShuttingDown);
        }
        if let Some(expected) = if_match
            && expected != self.config_generation
        {
            return Err(ControlError::GenerationMismatch {
                expected,
                current: self.config_generation,
            });
        }
        let config =
            Arc::new(stator_config::from_toml_str(&source, &text).map_err(ControlError::Config)?);
        host::reloadable(&self.config, &config)?;
        host::forwarding_enabled(&config)?;
        let token = host::resolve_token(&config)?;
        let plan = config.health_plan();
        let (ids, assignment) = self
            .ids
            .assign(&config, Instant::now(), quarantine(&config))?;
        let drains: BTreeMap<String, Drain> = self
            .drains
            .iter()
            .filter(|(name, _)| config.backends.iter().any(|b| &b.name == *name))
            .map(|(n, d)| (n.clone(), *d))
            .collect();
        let states = backend_states(&config, &plan, &drains, Instant::now(), |k| {
            self.runner.prospective(k)
        });
        let next = self.generation + 1;
        let (built, build_time) =
            build_blocking(&config, &assignment, states, next, self.built.clone()).await?;
        let commit_time = self.commit(&built).await?;
        // Committed: the new config is the running one from here on.
        self.note_new_ids(&assignment);
        let old_bgp = self.config.bgp.clone();
        self.config = Arc::clone(&config);
        self.text = Arc::from(text);
        self.source = source;
        self.config_generation = next;
        self.applied_at = SystemTime::now();
        self.ids = ids;
        self.assignment = assignment;
        self.drains = drains;
        self.runner
            .apply(&plan, unchecked_addresses(&config, &plan));
        self.plan = plan;
        *self.token.write().unwrap_or_else(PoisonError::into_inner) = token;
        self.accept(built, build_time, commit_time);
        if old_bgp != config.bgp {
            self.reconfigure_announcer().await;
        }
        self.announce();
        self.stats.reloads_ok += 1;
        let took = started.elapsed();
        self.stats.reload.observe(took);
        self.publish();
        let b = self.built.as_deref().map_or(0, Built::tables_rebuilt);
        tracing::info!(
            config_generation = self.config_generation,
            source = %self.source,
            took = ?took,
            tables_rebuilt = b,
            "configuration applied"
        );
        Ok(ApplyReport {
            config_generation: self.config_generation,
            generation: self.generation,
            build_seconds: build_time.as_secs_f64(),
            commit_seconds: commit_time.as_secs_f64(),
            reload_seconds: took.as_secs_f64(),
            tables_rebuilt: b,
            vips: config.vips.len(),
            reals: self.built.as_ref().map_or(0, |b| b.snapshot.reals.len()),
            warnings: config.warnings().iter().map(ToString::to_string).collect(),
        })
    }

    async fn drain(
        &mut self,
        backend: String,
        timeout: Option<Duration>,
    ) -> Result<(), ControlError> {
        if self.phase == Phase::Stopping {
            return Err(ControlError::ShuttingDown);
        }
        if !self.config.backends.iter().any(|b| b.name == backend) {
            return Err(ControlError::UnknownBackend { id: backend });
        }
        let timeout = timeout.unwrap_or(self.config.api.drain_timeout);
        let drain = if timeout.is_zero() {
            Drain::TimedOut
        } else {
            Drain::Until(Instant::now() + timeout)
        };
        tracing::info!(backend = %backend, timeout = ?timeout, "backend drained");
        let previous = self.drains.insert(backend.clone(), drain);
        if let Err(e) = self.rebuild(false).await {
            match previous {
                Some(d) => self.drains.insert(backend, d),
                None => self.drains.remove(&backend),
            };
            return Err(e);
        }
        Ok(())
    }

    async fn undrain(&mut self, backend: String) -> Result<(), ControlError> {
        if self.phase == Phase::Stopping {
            return Err(ControlError::ShuttingDown);
        }
        if !self.config.backends.iter().any(|b| b.name == backend) {
            return Err(ControlError::UnknownBackend { id: backend });
        }
        let Some(previous) = self.drains.remove(&backend) else {
            return Ok(());
        };
        tracing::info!(backend = %backend, "backend undrained");
        if let Err(e) = self.rebuild(false).await {
            self.drains.insert(backend, previous);
            return Err(e);
        }
        Ok(())
    }

    /// Builds a snapshot of the running config in the current states and commits it unless
    /// it equals the one forwarding (`force` commits anyway).
    async fn rebuild(&mut self, force: bool) -> Result<ApplyReport, ControlError> {
        let states = backend_states(
            &self.config,
            &self.plan,
            &self.drains,
            Instant::now(),
            |k| self.runner.state(k),
        );
        let next = self.generation + 1;
        let (built, build_time) = build_blocking(
            &self.config,
            &self.assignment,
            states,
            next,
            self.built.clone(),
        )
        .await?;
        let same = self.built.as_ref().is_some_and(|old| {
            old.snapshot.vips == built.snapshot.vips
                && old.snapshot.reals == built.snapshot.reals
                && old.snapshot.node == built.snapshot.node
        });
        let unchanged = self
            .built
            .as_ref()
            .filter(|_| same && !force)
            .map(|old| Arc::clone(&old.snapshot));
        let commit_time = if let Some(snapshot) = unchanged {
            // Nothing the data plane sees changed (e.g. a backend already down by another
            // check): keep the snapshot, update what the API shows.
            self.built = Some(Arc::new(Built {
                snapshot,
                vips: built.vips,
            }));
            self.note_health();
            self.announce();
            self.publish();
            Duration::ZERO
        } else {
            let t = self.commit(&built).await?;
            self.accept(built, build_time, t);
            self.announce();
            self.publish();
            t
        };
        Ok(ApplyReport {
            config_generation: self.config_generation,
            generation: self.generation,
            build_seconds: build_time.as_secs_f64(),
            commit_seconds: commit_time.as_secs_f64(),
            reload_seconds: 0.0,
            tables_rebuilt: self.built.as_deref().map_or(0, Built::tables_rebuilt),
            vips: self.config.vips.len(),
            reals: self.built.as_ref().map_or(0, |b| b.snapshot.reals.len()),
            warnings: Vec::new(),
        })
    }

    async fn rebuild_logged(&mut self, why: &str) {
        if self.phase != Phase::Running {
            return;
        }
        if let Err(e) = self.rebuild(false).await {
            tracing::error!(error = %e, cause = why, "commit failed; the previous snapshot stays, retrying in 1s");
            self.record_error(format!("commit after {why} failed: {e}"));
            self.retry_at = Some(Instant::now() + RETRY);
            self.publish();
        }
    }

    async fn commit(&mut self, built: &Built) -> Result<Duration, ControlError> {
        let snap = Arc::clone(&built.snapshot);
        let result = with_plane(&self.plane, move |p| p.commit(&snap)).await?;
        match result {
            Ok(info) => {
                self.stats.commits_ok += 1;
                self.stats.commit.observe(info.total());
                Ok(info.total())
            }
            Err(e) => {
                self.stats.commits_failed += 1;
                Err(e)
            }
        }
    }

    fn accept(&mut self, built: Built, build_time: Duration, _commit: Duration) {
        self.stats.build.observe(build_time);
        self.generation = built.snapshot.generation;
        self.committed_at = Some(SystemTime::now());
        self.built = Some(Arc::new(built));
        self.retry_at = None;
        self.note_health();
    }

    /// Logs and counts backend health changes since the last look.
    fn note_health(&mut self) {
        let states = backend_states(
            &self.config,
            &self.plan,
            &self.drains,
            Instant::now(),
            |k| self.runner.state(k),
        );
        for (b, s) in self.config.backends.iter().zip(&states) {
            let before = self.health_seen.insert(b.name.clone(), s.health);
            if before == Some(s.health) || s.health == Health::Unknown {
                continue;
            }
            let entry = self.transitions.entry(b.name.clone()).or_default();
            match s.health {
                Health::Up => {
                    entry.0 += 1;
                    tracing::info!(backend = %b.name, address = %b.address, "backend up");
                }
                Health::Down => {
                    entry.1 += 1;
                    tracing::warn!(backend = %b.name, address = %b.address, "backend down: out of every Maglev table");
                }
                Health::Unknown => {}
            }
        }
        self.health_seen
            .retain(|name, _| self.config.backends.iter().any(|b| &b.name == name));
    }

    /// Reads the counters of ids given to new VIPs and pairs: a recycled id's counters start
    /// where its last owner left them.
    fn note_new_ids(&mut self, a: &Assignment) {
        let mut reals = (*self.real_baselines).clone();
        for (id, how) in &a.new_reals {
            match self.reader.real_traffic(*id) {
                Ok(t) if t != Traffic::default() => {
                    reals.insert(*id, t);
                }
                _ => {
                    reals.remove(id);
                }
            }
            if *how == Reuse::Early {
                tracing::warn!(
                    real = id.0,
                    "real id reused before its quarantine ended: idle connections of a \
                     removed backend may move"
                );
            }
        }
        let mut vips = (*self.vip_baselines).clone();
        for (id, _) in &a.new_vips {
            match self.reader.vip_traffic(*id) {
                Ok(t) if t != Traffic::default() => {
                    vips.insert(*id, t);
                }
                _ => {
                    vips.remove(id);
                }
            }
        }
        self.real_baselines = Arc::new(reals);
        self.vip_baselines = Arc::new(vips);
    }

    fn forwarder_changed(&mut self, f: ForwarderEvent) {
        if f.healthy == self.forwarder.healthy && f.reason == self.forwarder.reason {
            return;
        }
        if f.healthy {
            tracing::info!("forwarder healthy: announcing VIPs with usable backends");
        } else {
            self.forwarder.failures += 1;
            tracing::error!(
                reason = f.reason.as_deref().unwrap_or(""),
                "forwarder unhealthy: withdrawing every VIP"
            );
        }
        self.forwarder.healthy = f.healthy;
        self.forwarder.reason = f.reason;
        self.forwarder.since = SystemTime::now();
    }

    fn expire_drains(&mut self) {
        let now = Instant::now();
        for (name, d) in &mut self.drains {
            if let Drain::Until(t) = *d
                && t <= now
            {
                tracing::info!(backend = %name, "drain timeout: backend removed, its remaining connections move");
                *d = Drain::TimedOut;
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let drains = self.drains.values().filter_map(|d| match d {
            Drain::Until(t) => Some(*t),
            _ => None,
        });
        drains.chain(self.retry_at).min()
    }

    fn record_error(&mut self, message: String) {
        self.last_error = Some(LastError {
            at_unix_seconds: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            message,
        });
    }

    /// Whether each VIP should be announced now.
    fn announce_states(&self) -> Vec<bool> {
        let ok = self.phase == Phase::Running && self.forwarder.healthy;
        self.config
            .vips
            .iter()
            .map(|v| {
                ok && self
                    .built
                    .as_ref()
                    .and_then(|b| b.vip(&v.key))
                    .is_some_and(|b| b.usable() > 0)
            })
            .collect()
    }

    fn announce(&self) {
        let states = self.announce_states();
        let desired = DesiredRoutes::from_vips(
            self.config
                .vips
                .iter()
                .zip(&states)
                .map(|(v, s)| (v.key.addr, *s)),
        );
        if let Some(a) = lock_announcer(&self.announcer).as_ref() {
            a.set_desired(desired);
        }
    }

    fn spawn_announcer(&self) {
        let Some(bgp) = self.config.bgp.clone() else {
            return;
        };
        match AnnouncerThread::spawn(Announcer::new(bgp)) {
            Ok(t) => *lock_announcer(&self.announcer) = Some(t),
            Err(e) => tracing::error!(error = %e, "cannot start the BGP announcer"),
        }
    }

    async fn reconfigure_announcer(&mut self) {
        let bgp = self.config.bgp.clone();
        let existing = lock_announcer(&self.announcer).take();
        match (existing, bgp) {
            (Some(t), Some(bgp)) => {
                t.set_bgp(bgp);
                *lock_announcer(&self.announcer) = Some(t);
            }
            (Some(t), None) => {
                tracing::info!("BGP disabled: withdrawing every VIP");
                let _ = tokio::task::spawn_blocking(move || t.shutdown(WITHDRAW_TIMEOUT)).await;
            }
            (None, Some(_)) => self.spawn_announcer(),
            (None, None) => {}
        }
    }

    async fn shutdown(&mut self) -> Result<(), ControlError> {
        self.phase = Phase::Stopping;
        self.stopping.store(true, Ordering::SeqCst);
        self.publish();
        let started = Instant::now();
        let mut result = Ok(());
        let announcer = lock_announcer(&self.announcer).take();
        if let Some(t) = announcer {
            tracing::info!("withdrawing every VIP");
            let withdrawn = tokio::task::spawn_blocking(move || t.shutdown(WITHDRAW_TIMEOUT)).await;
            match withdrawn {
                Ok(Ok(())) => {
                    tracing::info!(took = ?started.elapsed(), "BIRD confirmed: every VIP withdrawn")
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "withdrawal not confirmed");
                    result = Err(ControlError::data_plane("withdraw", e));
                }
                Err(e) => tracing::error!(error = %e, "announcer task failed"),
            }
        }
        self.runner.stop();
        match self.config.dataplane.on_exit {
            OnExit::Detach => {
                let detached = with_plane(&self.plane, |p| p.detach(true)).await;
                match detached {
                    Ok(Ok(())) => tracing::info!("data plane detached and its pins removed"),
                    Ok(Err(e)) | Err(e) => {
                        tracing::error!(error = %e, "detaching the data plane failed")
                    }
                }
            }
            OnExit::Keep => tracing::info!("data plane left attached (on_exit = \"keep\")"),
        }
        result
    }

    fn publish(&self) {
        let now = Instant::now();
        let states = backend_states(&self.config, &self.plan, &self.drains, now, |k| {
            self.runner.state(k)
        });
        let backends = self
            .config
            .backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let (up, down) = self.transitions.get(&b.name).copied().unwrap_or_default();
                BackendView {
                    health: states[i].health,
                    drain: match self.drains.get(&b.name) {
                        None | Some(Drain::No) => DrainView::None,
                        Some(Drain::Until(t)) if *t <= now => DrainView::Drained,
                        Some(Drain::Until(t)) => DrainView::Draining {
                            remaining_seconds: t.saturating_duration_since(now).as_secs_f64(),
                        },
                        Some(Drain::TimedOut) => DrainView::Drained,
                    },
                    checks: self
                        .plan
                        .checks_of(BackendId(i))
                        .iter()
                        .map(|c| CheckKey::of(&self.plan.checks[c.0]))
                        .collect(),
                    transitions_up: up,
                    transitions_down: down,
                }
            })
            .collect();
        let view = View {
            phase: self.phase,
            config: Arc::clone(&self.config),
            config_text: Arc::clone(&self.text),
            config_source: self.source.clone(),
            config_generation: self.config_generation,
            config_applied_at: self.applied_at,
            generation: self.generation,
            committed_at: self.committed_at,
            built: self.built.clone(),
            backends,
            forwarder: self.forwarder.clone(),
            announce: self.announce_states(),
            vip_baselines: Arc::clone(&self.vip_baselines),
            real_baselines: Arc::clone(&self.real_baselines),
            stats: self.stats,
            last_error: self.last_error.clone(),
            interfaces: self.interfaces.clone(),
            plane: self.plane_kind,
        };
        self.view_tx.send_replace(Arc::new(view));
    }
}

fn lock_announcer(a: &SharedAnnouncer) -> std::sync::MutexGuard<'_, Option<AnnouncerThread>> {
    // An Option of a handle: valid whatever a panicked holder was doing.
    a.lock().unwrap_or_else(PoisonError::into_inner)
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)
}

/// How long start waits for every check's first result: each starts within
/// `min(interval, 2 s)` and answers within its timeout.
fn startup_wait(plan: &HealthPlan) -> Duration {
    let longest = plan
        .checks
        .iter()
        .map(|c| c.timing.interval.min(Duration::from_secs(2)) + c.timing.timeout)
        .max()
        .unwrap_or_default();
    (longest + Duration::from_millis(250)).min(STARTUP_HEALTH_CAP)
}

/// Addresses of backends no check applies to (they get neighbour nudges).
fn unchecked_addresses(config: &Config, plan: &HealthPlan) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = config
        .backends
        .iter()
        .enumerate()
        .filter(|(i, _)| plan.checks_of(BackendId(*i)).is_empty())
        .map(|(_, b)| b.address)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Each backend's state: health from its checks (`check` gives a check's state), drain from
/// `drains` (a drain past its deadline counts as timed out).
pub fn backend_states(
    config: &Config,
    plan: &HealthPlan,
    drains: &BTreeMap<String, Drain>,
    now: Instant,
    check: impl Fn(&CheckKey) -> Option<bool>,
) -> Vec<BackendState> {
    config
        .backends
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut health = Health::Up;
            for c in plan.checks_of(BackendId(i)) {
                match check(&CheckKey::of(&plan.checks[c.0])) {
                    Some(false) => health = Health::Down,
                    None if health == Health::Up => health = Health::Unknown,
                    _ => {}
                }
            }
            let drain = match drains.get(&b.name) {
                Some(Drain::Until(t)) if *t <= now => Drain::TimedOut,
                Some(d) => *d,
                None => Drain::No,
            };
            BackendState { health, drain }
        })
        .collect()
}

async fn build_blocking(
    config: &Arc<Config>,
    assignment: &Assignment,
    states: Vec<BackendState>,
    generation: u64,
    previous: Option<Arc<Built>>,
) -> Result<(Built, Duration), ControlError> {
    let config = Arc::clone(config);
    let assignment = assignment.clone();
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let built = plan::build(
            &config,
            &assignment,
            &states,
            generation,
            previous.as_deref(),
        )?;
        Ok((built, started.elapsed()))
    })
    .await
    .map_err(|e| ControlError::io("snapshot build task", std::io::Error::other(e.to_string())))?
}
