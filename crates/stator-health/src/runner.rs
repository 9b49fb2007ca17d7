//! The checks of a [`HealthPlan`], one tokio task each.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::Rng as _;
use serde::Serialize;
use stator_config::HealthPlan;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::machine::Machine;
use super::tls::Tls;
use super::{CheckKey, ProbeRoutes, probe};

/// New checks start spread over this long at most (or their interval, if shorter).
const STAGGER_MAX: Duration = Duration::from_secs(2);

/// How often backends without a check are sent a neighbour nudge.
pub const NUDGE_INTERVAL: Duration = Duration::from_secs(5);

/// A check's state changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The check.
    pub key: CheckKey,
    /// Its new state.
    pub up: bool,
    /// The last probe's result (`ok` or why it failed).
    pub reason: String,
    /// Which probe of the check caused it (1 = the first).
    pub probe: u64,
}

/// What the API shows about one check.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CheckStatus {
    /// `up`, `down` or `unknown`.
    pub state: &'static str,
    /// Consecutive successes counted towards `rise` (while down).
    pub successes: u32,
    /// Consecutive failures counted towards `fall` (while up).
    pub failures: u32,
    /// Probes that succeeded.
    pub probes_ok: u64,
    /// Probes that failed.
    pub probes_failed: u64,
    /// Changes to up.
    pub transitions_up: u64,
    /// Changes to down.
    pub transitions_down: u64,
    /// Why the last failed probe failed.
    pub last_error: Option<String>,
    /// How long the last probe took, in seconds.
    pub last_duration_seconds: Option<f64>,
}

fn state_name(s: Option<bool>) -> &'static str {
    match s {
        Some(true) => "up",
        Some(false) => "down",
        None => "unknown",
    }
}

#[derive(Debug)]
struct Shared {
    machine: Machine,
    status: CheckStatus,
    /// When the next probe is due (set before the check sleeps; kept while it probes).
    due: Option<std::time::Instant>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data are plain values, valid at every step: a panicked holder leaves them usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
struct Task {
    shared: Arc<Mutex<Shared>>,
    handle: JoinHandle<()>,
}

impl Drop for Task {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// A read-only view of the running checks' statuses, for the API (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct Board {
    checks: Arc<Mutex<BTreeMap<CheckKey, Arc<Mutex<Shared>>>>>,
}

impl Board {
    /// By when every running check must have probed again (its due time, plus its
    /// timeout, plus [`crate::CHECK_ALLOWANCE`]); `None` without checks. A check
    /// past it is stuck (systemd's watchdog stops being pinged).
    pub fn deadline(&self) -> Option<std::time::Instant> {
        lock(&self.checks)
            .iter()
            .filter_map(|(k, s)| {
                lock(s)
                    .due
                    .map(|d| d + k.timing.timeout + crate::CHECK_ALLOWANCE)
            })
            .min()
    }

    /// Every running check with its status, in key order.
    pub fn statuses(&self) -> Vec<(CheckKey, CheckStatus)> {
        lock(&self.checks)
            .iter()
            .map(|(k, s)| (k.clone(), lock(s).status.clone()))
            .collect()
    }
}

/// Runs the deduplicated checks and the neighbour nudges. Must be created and used inside a
/// tokio runtime.
#[derive(Debug)]
pub struct Runner {
    events: mpsc::UnboundedSender<Transition>,
    routes: ProbeRoutes,
    tls: Option<Arc<dyn Tls>>,
    checks: BTreeMap<CheckKey, Task>,
    board: Board,
    nudge_targets: Arc<Mutex<Vec<IpAddr>>>,
    nudger: Option<JoinHandle<()>>,
}

impl Drop for Runner {
    fn drop(&mut self) {
        if let Some(h) = self.nudger.take() {
            h.abort();
        }
    }
}

impl Runner {
    /// A runner without checks; transitions go to `events`.
    pub fn new(events: mpsc::UnboundedSender<Transition>) -> Self {
        Self::with_routes(events, ProbeRoutes::default())
    }

    /// A runner whose probes connect where `routes` say.
    pub fn with_routes(events: mpsc::UnboundedSender<Transition>, routes: ProbeRoutes) -> Self {
        Self {
            events,
            routes,
            tls: None,
            checks: BTreeMap::new(),
            board: Board::default(),
            nudge_targets: Arc::new(Mutex::new(Vec::new())),
            nudger: None,
        }
    }

    /// The runner, its HTTPS checks using `tls` (without one they fail).
    #[must_use]
    pub fn with_tls(mut self, tls: Arc<dyn Tls>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The state a check of `key` has, or would start with if the plan were applied now: its
    /// own, else that of a running check of the same target and method, else unknown.
    pub fn prospective(&self, key: &CheckKey) -> Option<bool> {
        match self.checks.get(key) {
            Some(t) => lock(&t.shared).machine.state(),
            None => self
                .checks
                .iter()
                .filter(|(k, _)| k.same_target(key))
                .find_map(|(_, t)| lock(&t.shared).machine.state()),
        }
    }

    /// Runs exactly the checks of `plan`: keeps running ones (with their state), starts new
    /// ones (staggered; inheriting the state of a check of the same target and method), stops
    /// the others. `unchecked` are the addresses of backends no check applies to: they get
    /// neighbour nudges.
    pub fn apply(&mut self, plan: &HealthPlan, unchecked: Vec<IpAddr>) {
        let wanted: BTreeMap<CheckKey, &stator_config::HealthCheck> =
            plan.checks.iter().map(|c| (CheckKey::of(c), c)).collect();
        let new: Vec<CheckKey> = wanted
            .keys()
            .filter(|k| !self.checks.contains_key(*k))
            .cloned()
            .collect();
        let inherited: Vec<Option<bool>> = new.iter().map(|k| self.prospective(k)).collect();
        self.checks.retain(|k, _| wanted.contains_key(k));
        let n = new.len().max(1) as u32;
        for (i, (key, initial)) in new.into_iter().zip(inherited).enumerate() {
            let window = key.timing.interval.min(STAGGER_MAX);
            let delay = window * i as u32 / n;
            let task = self.spawn(key.clone(), initial, delay);
            self.checks.insert(key, task);
        }
        *lock(&self.board.checks) = self
            .checks
            .iter()
            .map(|(k, t)| (k.clone(), Arc::clone(&t.shared)))
            .collect();
        *lock(&self.nudge_targets) = unchecked;
        if self.nudger.is_none() {
            let targets = Arc::clone(&self.nudge_targets);
            self.nudger = Some(tokio::spawn(nudge_loop(targets, self.routes.clone())));
        }
    }

    /// The current state of a running check.
    pub fn state(&self, key: &CheckKey) -> Option<bool> {
        self.checks
            .get(key)
            .and_then(|t| lock(&t.shared).machine.state())
    }

    /// Whether every running check has a result.
    pub fn all_known(&self) -> bool {
        self.checks
            .values()
            .all(|t| lock(&t.shared).machine.state().is_some())
    }

    /// The statuses of the running checks, for readers elsewhere.
    pub fn board(&self) -> Board {
        self.board.clone()
    }

    /// Stops every check and the nudges.
    pub fn stop(&mut self) {
        self.checks.clear();
        lock(&self.board.checks).clear();
        if let Some(h) = self.nudger.take() {
            h.abort();
        }
    }

    fn spawn(&self, key: CheckKey, initial: Option<bool>, delay: Duration) -> Task {
        let timing = key.timing;
        let shared = Arc::new(Mutex::new(Shared {
            machine: Machine::new(timing.rise, timing.fall, initial),
            status: CheckStatus {
                state: state_name(initial),
                ..CheckStatus::default()
            },
            due: None,
        }));
        let handle = tokio::spawn(check_loop(
            key,
            Arc::clone(&shared),
            self.events.clone(),
            delay,
            self.routes.clone(),
            self.tls.clone(),
        ));
        Task { shared, handle }
    }
}

/// `interval ± jitter`, uniformly.
fn jittered(interval: Duration, jitter: Duration) -> Duration {
    if jitter.is_zero() {
        return interval;
    }
    let j = jitter.as_secs_f64();
    let d = rand::rng().random_range(-j..=j);
    Duration::from_secs_f64((interval.as_secs_f64() + d).max(0.001))
}

async fn check_loop(
    key: CheckKey,
    shared: Arc<Mutex<Shared>>,
    events: mpsc::UnboundedSender<Transition>,
    delay: Duration,
    routes: ProbeRoutes,
    tls: Option<Arc<dyn Tls>>,
) {
    let url = key.url();
    let target = std::net::SocketAddr::new(key.address, key.port);
    let connect = routes.connect_to(target);
    // Built once per check: trust anchors read now (a changed ca_file is read when the
    // check is replaced, by a reload that changes it, or at the next start).
    let tls = match (&key.probe, &tls) {
        (stator_config::Probe::Https(h), Some(tls)) => Some(tls.client(&h.tls)),
        _ => None,
    };
    let mut next = Instant::now() + delay;
    loop {
        lock(&shared).due = Some(next.into_std());
        tokio::time::sleep_until(next).await;
        let started = Instant::now();
        let result = probe::run_via(
            target,
            connect,
            &key.probe,
            tls.as_deref(),
            key.timing.timeout,
        )
        .await;
        let took = started.elapsed();
        let (changed, probe) = {
            let mut s = lock(&shared);
            let changed = s.machine.observe(result.is_ok());
            let (successes, failures) = s.machine.streak();
            let state = state_name(s.machine.state());
            let st = &mut s.status;
            match &result {
                Ok(()) => st.probes_ok += 1,
                Err(e) => {
                    st.probes_failed += 1;
                    st.last_error = Some(e.clone());
                }
            }
            st.successes = successes;
            st.failures = failures;
            st.last_duration_seconds = Some(took.as_secs_f64());
            match changed {
                Some(true) => st.transitions_up += 1,
                Some(false) => st.transitions_down += 1,
                None => {}
            }
            st.state = state;
            (changed, st.probes_ok + st.probes_failed)
        };
        if let Some(up) = changed {
            let reason = match &result {
                Ok(()) => "ok".to_owned(),
                Err(e) => e.clone(),
            };
            if up {
                tracing::info!(check = %url, state = "up", %reason, "health check up");
            } else {
                tracing::warn!(check = %url, state = "down", %reason, "health check down");
            }
            if events
                .send(Transition {
                    key: key.clone(),
                    up,
                    reason,
                    probe,
                })
                .is_err()
            {
                return; // the reconciler is gone: the node is stopping
            }
        }
        next = started + jittered(key.timing.interval, key.timing.jitter);
        let now = Instant::now();
        if next < now {
            next = now;
        }
    }
}

async fn nudge_loop(targets: Arc<Mutex<Vec<IpAddr>>>, routes: ProbeRoutes) {
    loop {
        let now: Vec<IpAddr> = lock(&targets).clone();
        for address in now {
            let to = routes.connect_to(std::net::SocketAddr::new(address, probe::DISCARD_PORT));
            if let Err(e) = probe::nudge(to).await {
                tracing::debug!(backend = %address, error = %e, "neighbour nudge failed");
            }
        }
        tokio::time::sleep(NUDGE_INTERVAL).await;
    }
}
