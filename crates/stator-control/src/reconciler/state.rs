//! What the reconciler derives from its state: backend health, announcements, the
//! published view; and the shutdown sequence.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime};

use stator_bird::{Announcer, AnnouncerThread, DesiredRoutes};
use stator_config::{BackendId, Config, HealthPlan, OnExit};
use stator_core::Traffic;
use tokio::time::Instant;

use super::{
    ForwarderEvent, Reconciler, STARTUP_HEALTH_CAP, SharedAnnouncer, WITHDRAW_TIMEOUT, with_plane,
};
use crate::error::ControlError;
use crate::events::{Event, EventKind};
use crate::ids::{Assignment, Reuse};
use crate::plan::{BackendState, Drain, Health};
use crate::view::{BackendView, DrainView, LastError, Phase, View};
use stator_health::CheckKey;

impl Reconciler {
    /// Logs and counts backend health changes since the last look.
    pub(super) fn note_health(&mut self) {
        let states = backend_states(
            &self.config,
            &self.plan,
            &self.drains,
            Instant::now(),
            |k| self.runner.state(k),
        );
        for (i, (b, s)) in self.config.backends.iter().zip(&states).enumerate() {
            let before = self.health_seen.insert(b.name.clone(), s.health);
            if before == Some(s.health) || s.health == Health::Unknown {
                continue;
            }
            let entry = self.transitions.entry(b.name.clone()).or_default();
            match s.health {
                Health::Up => {
                    entry.0 += 1;
                    tracing::info!(backend = %b.name, address = %b.address, "backend up");
                    self.events.push(
                        Event::new(EventKind::BackendUp, format!("{} up", b.name)).backend(&b.name),
                    );
                }
                Health::Down => {
                    entry.1 += 1;
                    tracing::warn!(backend = %b.name, address = %b.address, "backend down: out of every Maglev table");
                    let why = self
                        .down_reason(BackendId(i))
                        .map_or_else(String::new, |r| format!(" ({r})"));
                    self.events.push(
                        Event::new(
                            EventKind::BackendDown,
                            format!("{} down, out of every Maglev table{why}", b.name),
                        )
                        .backend(&b.name),
                    );
                }
                Health::Unknown => {}
            }
        }
        self.health_seen
            .retain(|name, _| self.config.backends.iter().any(|b| &b.name == name));
    }

    /// Why a backend is down: the first of its checks that is down, with its last error.
    fn down_reason(&self, backend: BackendId) -> Option<String> {
        let keys: Vec<CheckKey> = self
            .plan
            .checks_of(backend)
            .iter()
            .map(|c| CheckKey::of(&self.plan.checks[c.0]))
            .collect();
        self.runner
            .board()
            .statuses()
            .into_iter()
            .find(|(k, s)| s.state == "down" && keys.contains(k))
            .map(|(k, s)| match s.last_error {
                Some(e) => format!("{}: {e}", k.url()),
                None => k.url(),
            })
    }

    /// Reads the counters of ids given to new VIPs and pairs: a recycled id's counters start
    /// where its last owner left them.
    pub(super) fn note_new_ids(&mut self, a: &Assignment) {
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

    pub(super) fn forwarder_changed(&mut self, f: ForwarderEvent) {
        if f.healthy == self.forwarder.healthy && f.reason == self.forwarder.reason {
            return;
        }
        if f.healthy {
            tracing::info!("forwarder healthy: announcing VIPs with usable backends");
            self.events.push(Event::new(
                EventKind::ForwarderHealthy,
                "forwarder healthy: VIPs with usable backends are announced",
            ));
        } else {
            self.forwarder.failures += 1;
            tracing::error!(
                reason = f.reason.as_deref().unwrap_or(""),
                "forwarder unhealthy: withdrawing every VIP"
            );
            self.events.push(Event::new(
                EventKind::ForwarderUnhealthy,
                format!(
                    "forwarder unhealthy, every VIP withdrawn: {}",
                    f.reason.as_deref().unwrap_or("no reason given")
                ),
            ));
        }
        self.forwarder.healthy = f.healthy;
        self.forwarder.reason = f.reason;
        self.forwarder_checked = true;
        self.forwarder.since = SystemTime::now();
    }

    pub(super) fn expire_drains(&mut self) {
        let now = Instant::now();
        for (name, d) in &mut self.drains {
            if let Drain::Until(t) = *d
                && t <= now
            {
                tracing::info!(backend = %name, "drain timeout: backend removed, its remaining connections move");
                self.events.push(
                    Event::new(
                        EventKind::DrainTimeout,
                        format!("{name}: drain timeout, removed; its remaining connections move"),
                    )
                    .backend(name),
                );
                *d = Drain::TimedOut;
            }
        }
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let drains = self.drains.values().filter_map(|d| match d {
            Drain::Until(t) => Some(*t),
            _ => None,
        });
        // a previous table's grace ends: the rebuild drops it (docs/forwarding.md §12.1)
        let previous = self.built.as_ref().and_then(|b| b.previous_until());
        drains.chain(self.retry_at).chain(previous).min()
    }

    pub(super) fn record_error(&mut self, message: String) {
        self.last_error = Some(LastError {
            at_unix_seconds: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            message,
        });
    }

    /// Whether each VIP should be announced now: while the forwarder is healthy and the VIP
    /// has a usable backend — or a failover address, which serves it through another cluster
    /// when it has none (docs/forwarding.md §10.1).
    pub(super) fn announce_states(&self) -> Vec<bool> {
        let ok = self.phase == Phase::Running && self.forwarder.healthy;
        self.config
            .vips
            .iter()
            .map(|v| {
                ok && (v.failover.is_some()
                    || self
                        .built
                        .as_ref()
                        .and_then(|b| b.vip(&v.key))
                        .is_some_and(|b| b.usable() > 0))
            })
            .collect()
    }

    /// Tells the announcer what to announce, and logs each VIP whose state changed.
    pub(super) fn announce(&mut self) {
        let states = self.announce_states();
        let mut seen = BTreeMap::new();
        for (vip, &on) in self.config.vips.iter().zip(&states) {
            let before = self.announce_seen.get(&vip.name).copied();
            if before != Some(on) && (before.is_some() || on) {
                if on {
                    tracing::info!(vip = %vip.name, address = %vip.key.addr, "VIP announced");
                    let what = if self.config.bgp.is_some() {
                        "announced"
                    } else {
                        "ready to be announced (no [bgp] configured)"
                    };
                    self.events.push(
                        Event::new(
                            EventKind::Announce,
                            format!("{} ({}) {what}", vip.name, vip.key.addr),
                        )
                        .vip(&vip.name),
                    );
                } else {
                    let why = if self.phase != Phase::Running {
                        "the node is stopping"
                    } else if !self.forwarder.healthy {
                        "the forwarder is unhealthy"
                    } else {
                        "no usable backend"
                    };
                    tracing::warn!(vip = %vip.name, address = %vip.key.addr, reason = why, "VIP withdrawn");
                    self.events.push(
                        Event::new(
                            EventKind::Withdraw,
                            format!("{} ({}) withdrawn: {why}", vip.name, vip.key.addr),
                        )
                        .vip(&vip.name),
                    );
                }
            }
            seen.insert(vip.name.clone(), on);
        }
        self.announce_seen = seen;
        let desired = self.desired(&states);
        if let Some(a) = lock_announcer(&self.announcer).as_ref() {
            a.set_desired(desired);
        }
    }

    fn desired(&self, states: &[bool]) -> DesiredRoutes {
        DesiredRoutes::from_vips(
            self.config
                .vips
                .iter()
                .zip(states)
                .map(|(v, s)| (v.key.addr, *s)),
        )
    }

    /// Starts the announcer. Before the forwarder's first check is in, it is undecided: it
    /// makes no pass until `announce` gives it the routes (after that check), so its first
    /// pass never tells BIRD anything but the decision. A node that replaces another (an
    /// upgrade) thus never withdraws, even for a moment, what the replaced one announced and
    /// it announces too.
    pub(super) fn spawn_announcer(&mut self) {
        let Some(bgp) = self.config.bgp.clone() else {
            return;
        };
        let mut announcer = Announcer::new(bgp);
        if self.forwarder_checked {
            let states = self.announce_states();
            announcer.set_desired(self.desired(&states));
        } else {
            announcer = announcer.undecided();
        }
        match AnnouncerThread::spawn(announcer) {
            Ok(t) => *lock_announcer(&self.announcer) = Some(t),
            Err(e) => tracing::error!(error = %e, "cannot start the BGP announcer"),
        }
    }

    pub(super) async fn reconfigure_announcer(&mut self) {
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

    /// Whether changes are taken now: not while stopping, nor while a successor starts.
    pub(super) fn takes_changes(&self) -> Result<(), ControlError> {
        match self.phase {
            Phase::Stopping => Err(ControlError::ShuttingDown),
            Phase::Upgrading => Err(ControlError::Upgrading),
            Phase::Starting | Phase::Running => Ok(()),
        }
    }

    /// [`super::Request::Pause`].
    pub(super) fn pause(&mut self) -> Result<(), ControlError> {
        self.takes_changes()?;
        self.events.push(Event::new(
            EventKind::Upgrade,
            "upgrade: a successor process starts; no change is taken meanwhile",
        ));
        tracing::info!("upgrade: paused while the successor starts");
        self.phase = Phase::Upgrading;
        // the watchdog repairs nothing meanwhile: the successor attaches its own program
        self.stopping.store(true, Ordering::SeqCst);
        self.publish();
        Ok(())
    }

    /// [`super::Request::Resume`].
    pub(super) async fn resume(&mut self) -> Result<(), ControlError> {
        if self.phase != Phase::Upgrading {
            return Ok(());
        }
        self.events.push(Event::new(
            EventKind::Upgrade,
            "upgrade failed: the successor did not serve; this node runs on",
        ));
        tracing::warn!("upgrade: the successor did not serve; running on");
        self.phase = Phase::Running;
        self.stopping.store(false, Ordering::SeqCst);
        let interfaces = self.interfaces.clone();
        let seen = with_plane(&self.plane, move |p| {
            if !interfaces.is_empty() {
                p.attach(&interfaces)?;
            }
            p.active_snapshot()
        })
        .await??;
        // a generation above any the successor committed: generations only grow
        if let Some(s) = seen {
            self.generation = self.generation.max(s.generation);
        }
        let result = self.rebuild(true).await.map(drop);
        self.announce();
        self.publish();
        result
    }

    /// [`super::Request::HandOver`]: what a shutdown does, but for withdrawing and detaching.
    pub(super) fn hand_over(&mut self) {
        self.events.push(Event::new(
            EventKind::Upgrade,
            "upgrade: the successor serves; this node hands over and drains",
        ));
        self.phase = Phase::Stopping;
        self.stopping.store(true, Ordering::SeqCst);
        self.publish();
        // Dropping the announcer stops its thread without a withdrawal: BIRD keeps the
        // routes, which the successor's announcer now keeps.
        drop(lock_announcer(&self.announcer).take());
        self.runner.stop();
        tracing::info!("upgrade: handed over; routes and the data plane are the successor's");
    }

    pub(super) async fn shutdown(&mut self) -> Result<(), ControlError> {
        self.events.push(Event::new(
            EventKind::Stopping,
            "shutting down: withdrawing every VIP",
        ));
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
                    Ok(Err(e)) => tracing::error!(error = %e, "detaching the data plane failed"),
                    Err(e) => tracing::error!(error = %e, "detaching the data plane failed"),
                }
            }
            OnExit::Keep => tracing::info!("data plane left attached (on_exit = \"keep\")"),
        }
        result
    }

    pub(super) fn publish(&self) {
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
                        Some(Drain::Until(t)) => DrainView::Draining { until: *t },
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

pub(super) fn lock_announcer(
    a: &SharedAnnouncer,
) -> std::sync::MutexGuard<'_, Option<AnnouncerThread>> {
    // An Option of a handle: valid whatever a panicked holder was doing.
    a.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)
}

/// How long start waits for every check's first result: each starts within
/// `min(interval, 2 s)` and answers within its timeout.
pub(super) fn startup_wait(plan: &HealthPlan) -> Duration {
    let longest = plan
        .checks
        .iter()
        .map(|c| c.timing.interval.min(Duration::from_secs(2)) + c.timing.timeout)
        .max()
        .unwrap_or_default();
    (longest + Duration::from_millis(250)).min(STARTUP_HEALTH_CAP)
}

/// Addresses of backends no check applies to (they get neighbour nudges).
pub(super) fn unchecked_addresses(config: &Config, plan: &HealthPlan) -> Vec<IpAddr> {
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
