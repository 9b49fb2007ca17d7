//! What the reconciler publishes after every change: one immutable [`View`] of the node,
//! read by the admin API, `/metrics` and the tracer without asking the reconciler anything.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use serde::Serialize;
use stator_config::Config;
use stator_core::{RealId, Traffic, VipId};

use crate::plan::{Built, Health};
use stator_health::CheckKey;

/// Where the node is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Waiting for the first health results and the first commit; nothing is announced.
    Starting,
    /// Forwarding and announcing.
    Running,
    /// Shutting down: VIPs withdrawn, no more changes taken.
    Stopping,
    /// Paused while a successor process starts (an upgrade, docs/operations.md): the data
    /// plane forwards what was last committed, routes stay announced, no change is taken;
    /// then either handed over (the successor serves) or running again (it failed).
    Upgrading,
}

/// An operator's drain of a backend, as shown. The deadline is kept as an instant, so that
/// an answer given after it says `drained` even if the view was published before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DrainView {
    /// Not drained through the API.
    #[default]
    None,
    /// Draining: existing connections kept until the deadline.
    Draining {
        /// The drain timeout.
        until: Instant,
    },
    /// Drain timeout passed: removed until undrained.
    Drained,
}

impl DrainView {
    /// `{"state": "none"}`, `{"state": "draining", "remaining_seconds": 12.5}` or
    /// `{"state": "drained"}`, as of `now`.
    pub fn json(&self, now: Instant) -> serde_json::Value {
        match self {
            Self::None => serde_json::json!({ "state": "none" }),
            Self::Draining { until } if *until > now => serde_json::json!({
                "state": "draining",
                "remaining_seconds": until.duration_since(now).as_secs_f64(),
            }),
            Self::Draining { .. } | Self::Drained => serde_json::json!({ "state": "drained" }),
        }
    }
}

/// One backend's state.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendView {
    /// Its health (all its checks).
    pub health: Health,
    /// Its drain.
    pub drain: DrainView,
    /// The checks that decide its health.
    pub checks: Vec<CheckKey>,
    /// Times it became healthy since this process started.
    pub transitions_up: u64,
    /// Times it became unhealthy.
    pub transitions_down: u64,
}

/// The forwarder's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwarderView {
    /// Healthy: attached, maps answer, self-test passes.
    pub healthy: bool,
    /// Why not, when not.
    pub reason: Option<String>,
    /// Since when it is in this state.
    pub since: SystemTime,
    /// Failed checks since start.
    pub failures: u64,
}

/// A duration statistic: the last value, the sum and the count.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Timing {
    /// The last observation, in seconds.
    pub last: f64,
    /// Sum of all observations, in seconds.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl Timing {
    /// Records one observation.
    pub fn observe(&mut self, d: Duration) {
        self.last = d.as_secs_f64();
        self.sum += self.last;
        self.count += 1;
    }
}

/// Event counts since the process started.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Stats {
    /// Configuration reloads applied.
    pub reloads_ok: u64,
    /// Configuration reloads refused (invalid, precondition, commit failure).
    pub reloads_failed: u64,
    /// Snapshots committed.
    pub commits_ok: u64,
    /// Commits the data plane refused.
    pub commits_failed: u64,
    /// Building snapshots (Maglev tables included).
    pub build: Timing,
    /// Committing snapshots.
    pub commit: Timing,
    /// Applying a reload, request to commit done.
    pub reload: Timing,
}

/// The last error the reconciler met, for status pages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LastError {
    /// When.
    pub at_unix_seconds: u64,
    /// What.
    pub message: String,
}

/// Everything the API shows, as of the last change.
#[derive(Debug, Clone)]
pub struct View {
    /// Life phase.
    pub phase: Phase,
    /// The running configuration.
    pub config: Arc<Config>,
    /// Its text, as applied (TOML).
    pub config_text: Arc<str>,
    /// Where it came from (a file path, or `admin API`).
    pub config_source: String,
    /// Its generation: the snapshot generation that first carried it (monotonic across
    /// restarts). `If-Match` compares with this.
    pub config_generation: u64,
    /// When it was applied.
    pub config_applied_at: SystemTime,
    /// The generation of the snapshot the data plane forwards with.
    pub generation: u64,
    /// When it was committed.
    pub committed_at: Option<SystemTime>,
    /// The snapshot and how it was derived (`None` before the first commit).
    pub built: Option<Arc<Built>>,
    /// Per backend, parallel to `config.backends`.
    pub backends: Vec<BackendView>,
    /// The forwarder's health.
    pub forwarder: ForwarderView,
    /// Whether each VIP should be announced (parallel to `config.vips`).
    pub announce: Vec<bool>,
    /// Counter values of ids when they were given to their VIP or pair: a recycled id
    /// starts from its old counters, which `/metrics` subtracts.
    pub vip_baselines: Arc<BTreeMap<VipId, Traffic>>,
    /// The same for reals.
    pub real_baselines: Arc<BTreeMap<RealId, Traffic>>,
    /// Event counts.
    pub stats: Stats,
    /// The last error (a refused reload, a failed commit), if any.
    pub last_error: Option<LastError>,
    /// Interfaces the data plane is attached to.
    pub interfaces: Vec<String>,
    /// The data plane's kind (`xdp`).
    pub plane: &'static str,
}

/// Seconds since the Unix epoch.
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Subtracts a baseline from a counter (never below zero).
pub fn since_baseline(now: Traffic, base: Option<&Traffic>) -> Traffic {
    match base {
        None => now,
        Some(b) => Traffic {
            packets: now.packets.saturating_sub(b.packets),
            bytes: now.bytes.saturating_sub(b.bytes),
        },
    }
}

impl View {
    /// The view of a node that has not committed anything yet.
    pub fn starting(
        config: Arc<Config>,
        text: Arc<str>,
        source: String,
        plane: &'static str,
    ) -> Self {
        let n = config.backends.len();
        let vips = config.vips.len();
        Self {
            phase: Phase::Starting,
            config_text: text,
            config_source: source,
            config_generation: 0,
            config_applied_at: SystemTime::now(),
            generation: 0,
            committed_at: None,
            built: None,
            backends: vec![
                BackendView {
                    health: Health::Unknown,
                    drain: DrainView::None,
                    checks: Vec::new(),
                    transitions_up: 0,
                    transitions_down: 0,
                };
                n
            ],
            forwarder: ForwarderView {
                healthy: false,
                reason: Some("not checked yet".into()),
                since: SystemTime::now(),
                failures: 0,
            },
            announce: vec![false; vips],
            vip_baselines: Arc::default(),
            real_baselines: Arc::default(),
            stats: Stats::default(),
            last_error: None,
            interfaces: Vec::new(),
            plane,
            config,
        }
    }
}
