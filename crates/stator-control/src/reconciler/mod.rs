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
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use stator_bird::AnnouncerThread;
use stator_config::{Config, HealthPlan};
use stator_core::{RealId, Snapshot, Traffic, VipId};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::error::ControlError;
use crate::events::{Event, EventKind, EventLog};
use crate::ids::{Assignment, Ids};
use crate::plan::{Built, Drain, Health};
use crate::view::{ForwarderView, LastError, Phase, Stats, View};
use stator_health::{ProbeRoutes, Runner, Tls, Transition};
use stator_plane::{DataPlane, PlaneReader};

mod apply;
mod state;

pub use state::backend_states;
use state::{far_future, startup_wait, unchecked_addresses};

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
        /// Who sent it: the API may not name new files.
        origin: Origin,
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
    /// Take no more changes while a successor process starts (an upgrade): commit nothing,
    /// change no announcement, let the watchdog repair nothing; the data plane forwards what
    /// was last committed. Ended by [`Request::Resume`] or [`Request::HandOver`].
    Pause {
        /// Answered when paused.
        reply: oneshot::Sender<Result<(), ControlError>>,
    },
    /// The successor failed: attach our program again where it replaced it, commit a new
    /// snapshot (a generation above any the successor committed) and run on.
    Resume {
        /// Answered when running again.
        reply: oneshot::Sender<Result<(), ControlError>>,
    },
    /// The successor serves: stop without withdrawing anything or detaching the data plane
    /// (both are the successor's now), stop the checks.
    HandOver {
        /// Answered when done.
        reply: oneshot::Sender<Result<(), ControlError>>,
    },
    /// Withdraw everything, stop the checks, detach or keep the data plane, and stop.
    Shutdown {
        /// Answered when done, with the withdrawal's error if it failed.
        reply: oneshot::Sender<Result<(), ControlError>>,
    },
}

/// Where a configuration to apply comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The configuration file (SIGHUP), or the node's own process: trusted with file paths.
    File,
    /// A caller of the admin API: may not name files the running configuration does not
    /// ([`crate::host::api_files_unchanged`]).
    Api,
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
    /// The API's tokens, shared with the API.
    pub tokens: Arc<RwLock<crate::tokens::Tokens>>,
    /// The tracer's keys, read from `tracer.key_file` (re-read on every reload).
    pub trace_keys: stator_abi::TraceKeys,
    /// Set when shutting down (the forwarder-health loop stops repairing).
    pub stopping: Arc<AtomicBool>,
    /// Where health probes connect (none but in tests: [`ProbeRoutes`]).
    pub probe_routes: ProbeRoutes,
    /// The TLS stack of HTTPS checks (`stator_tls::Rustls` in the node), also used to check
    /// their `ca_file`s on reload.
    pub tls: Arc<dyn Tls>,
    /// Where events are recorded for the API.
    pub events: EventLog,
    /// Check the host (forwarding sysctls) on reloads too; off for a data plane that does not
    /// forward through the kernel and for nodes started without preflight (tests that bring
    /// their own data plane).
    pub host_checks: bool,
    /// The proxy tier: a reload binds its new listeners before it commits (a port taken
    /// refuses the reload) and starts them after.
    pub listeners: crate::listeners::ProxyTier,
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
    tls: Arc<dyn Tls>,
    announcer: SharedAnnouncer,
    tokens: Arc<RwLock<crate::tokens::Tokens>>,
    trace_keys: stator_abi::TraceKeys,
    stopping: Arc<AtomicBool>,
    events: EventLog,
    host_checks: bool,
    listeners: crate::listeners::ProxyTier,
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
    /// The data plane's active snapshot as a build, for the first build only
    /// ([`Built::seeded`]).
    seed: Option<Arc<Built>>,
    generation: u64,
    committed_at: Option<SystemTime>,
    forwarder: ForwarderView,
    /// The forwarder's first check is in (until then the announcer is undecided).
    forwarder_checked: bool,
    health_seen: BTreeMap<String, Health>,
    /// Whether each VIP (by name) was to be announced at the last look, for logging changes.
    announce_seen: BTreeMap<String, bool>,
    transitions: BTreeMap<String, (u64, u64)>,
    vip_baselines: Arc<BTreeMap<VipId, Traffic>>,
    real_baselines: Arc<BTreeMap<RealId, Traffic>>,
    stats: Stats,
    last_error: Option<LastError>,
    retry_at: Option<Instant>,
    interfaces: Vec<String>,
    plane_kind: &'static str,
    /// Beats each time round the loop, at least every [`crate::supervise::BEAT_INTERVAL`].
    heartbeat: crate::supervise::Heartbeat,
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
        // second chance across a restart: the tables that were forwarding
        let seed = parts
            .active
            .as_ref()
            .and_then(|a| Built::seeded(a, now, config.second_chance_grace()))
            .map(Arc::new);
        let plan = config.health_plan();
        let mut runner =
            Runner::with_routes(transitions, parts.probe_routes).with_tls(Arc::clone(&parts.tls));
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
            tls: parts.tls,
            announcer: parts.announcer,
            tokens: parts.tokens,
            trace_keys: parts.trace_keys,
            stopping: parts.stopping,
            events: parts.events,
            host_checks: parts.host_checks,
            listeners: parts.listeners,
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
            seed,
            generation,
            committed_at: None,
            forwarder: ForwarderView {
                healthy: false,
                reason: Some("not checked yet".into()),
                since: SystemTime::now(),
                failures: 0,
            },
            forwarder_checked: false,
            health_seen: BTreeMap::new(),
            announce_seen: BTreeMap::new(),
            transitions: BTreeMap::new(),
            vip_baselines: Arc::default(),
            real_baselines: Arc::default(),
            stats: Stats::default(),
            last_error: None,
            retry_at: None,
            interfaces: parts.interfaces,
            plane_kind,
            config,
            heartbeat: crate::supervise::Heartbeat::new(),
        }
    }

    /// The reconciler's heartbeat (systemd's watchdog pings only while it beats).
    pub fn heartbeat(&self) -> crate::supervise::Heartbeat {
        self.heartbeat.clone()
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
        self.events.push(
            Event::new(
                EventKind::Start,
                format!(
                    "node running: snapshot generation {}, {} VIPs, {} backends, from {}",
                    self.generation,
                    config.vips.len(),
                    config.backends.len(),
                    self.source
                ),
            )
            .generation(self.config_generation),
        );
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
        let mut beat = tokio::time::interval(crate::supervise::BEAT_INTERVAL);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.heartbeat.beat();
            let deadline = self
                .next_deadline()
                .filter(|_| self.phase != Phase::Upgrading);
            let sleep = tokio::time::sleep_until(deadline.unwrap_or_else(far_future));
            tokio::select! {
                _ = beat.tick() => {}
                req = inputs.requests.recv() => match req {
                    None => return,
                    Some(Request::Shutdown { reply }) => {
                        let result = self.shutdown().await;
                        let _ = reply.send(result);
                        return;
                    }
                    Some(Request::HandOver { reply }) => {
                        self.hand_over();
                        let _ = reply.send(Ok(()));
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
                    if self.phase == Phase::Upgrading {
                        // the successor may have replaced our program: not our forwarder's
                        // health until we resume (which attaches ours again)
                        continue;
                    }
                    self.forwarder_changed(f);
                    self.announce();
                    self.publish();
                }
                () = sleep => {
                    self.expire_drains();
                    self.retry_at = None;
                    self.rebuild_logged("drain timeout, retry or second-chance grace").await;
                }
            }
        }
    }

    async fn handle(&mut self, req: Request) {
        match req {
            Request::Apply {
                text,
                source,
                origin,
                if_match,
                reply,
            } => {
                let from = source.clone();
                let result = self.apply(text, source, origin, if_match).await;
                if let Err(e) = &result {
                    self.stats.reloads_failed += 1;
                    self.events.push(
                        Event::new(
                            EventKind::ReloadFailed,
                            format!("configuration from {from} refused: {e}"),
                        )
                        .generation(self.config_generation),
                    );
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
            Request::Pause { reply } => {
                let _ = reply.send(self.pause());
            }
            Request::Resume { reply } => {
                let result = self.resume().await;
                let _ = reply.send(result);
            }
            // Invariant: `run` takes Shutdown and HandOver itself and never passes them here.
            Request::Shutdown { .. } | Request::HandOver { .. } => {
                unreachable!("handled by run")
            }
        }
    }
}
