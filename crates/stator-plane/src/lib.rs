//! # stator-plane — the boundary between the controller and a data plane
//!
//! Layer: above the forwarding model (`stator-core`) and the kernel ABI's plain types
//! (`stator-abi`); below every data plane's adapter (`stator-xdp`'s forwarder, the AF_XDP
//! plane) and the controller (`stator-control`), which holds a `Box<dyn DataPlane>` and never
//! names a plane's own types.
//!
//! A data plane forwards with the last [`Snapshot`] committed to it. The controller needs two
//! kinds of access, kept apart so that reading never waits behind writing:
//!
//! - [`DataPlane`], the *writer*, owned by the node behind one lock: attach and detach,
//!   commit, read back the active snapshot, check its own health. Its calls block (a commit
//!   waits for an RCU grace period); async code calls them from `spawn_blocking`.
//! - [`PlaneReader`], any number of *readers* (`Arc`, `Sync`): counters, per-VIP and per-real
//!   traffic, connection-table lookups for the tracer, the data plane's clock. The API and
//!   `/metrics` use these.
//!
//! Implementations, each in its plane's crate: the XDP forwarder's (`stator_xdp::XdpPlane`),
//! [`coreplane::CorePlane`] for stator-core alone (tests without root, in simulated time; its
//! reader side, [`coreplane::Shards`], is what user-space planes such as AF_XDP build on), the
//! AF_XDP forwarder's (`stator_afxdp::AfxdpPlane`), and [`noplane::NoPlane`] for a node that forwards nothing
//! (`dataplane.mode = "none"`).
//!
//! ## Contract
//! - A commit is atomic: every packet sees the previous snapshot or the new one, never a mix;
//!   on error the previous one is still in force.
//! - A plane refuses only what it has no room for; the rules were checked once, by stator-core
//!   ([`ValidSnapshot`]).
//! - Readers never take the writer's lock.
//! - Errors are [`PlaneError`]s, which the controller maps onto its own (and onto HTTP
//!   statuses) without knowing which plane failed.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod coreplane;
pub mod noplane;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use stator_core::{
    Counter, CtEntry, DropReason, FlowKey, RealId, Snapshot, Traffic, ValidSnapshot, VipId,
};

use stator_abi::TraceEvent;

/// What a commit took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitInfo {
    /// Writing the new configuration where packets do not see it yet.
    pub write: Duration,
    /// From the switch until no packet can still be using the old configuration.
    pub grace: Duration,
}

impl CommitInfo {
    /// The whole commit.
    pub fn total(&self) -> Duration {
        self.write + self.grace
    }
}

/// The controller's side of a data plane's heartbeat (`dataplane.stale_after`,
/// docs/forwarding.md §3.2): refreshed while the controller keeps its promises; a forwarder
/// whose beat is older than its bound passes VIP traffic to the kernel. The XDP plane's is
/// `stator_xdp::BeatWriter` (the pinned `stator_beat` map).
pub trait PlaneBeat: Send + Sync + std::fmt::Debug {
    /// Refreshes the beat now: the forwarder trusts its tables for `stale_after` from now.
    fn refresh(&self, stale_after: Duration);
    /// Turns the check off: the tables are trusted however old (a clean stop that keeps
    /// forwarding, `on_exit = "keep"`).
    fn off(&self);
}

/// One interface the data plane is attached to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttachInfo {
    /// Interface name.
    pub iface: String,
    /// How it is attached (`native`, `generic`, …).
    pub mode: String,
    /// The program's id, as the kernel reports it.
    pub prog_id: u32,
    /// Whether an existing attachment got the program (a restart) rather than a new one.
    pub replaced: bool,
    /// What the operator should know (generic-mode fallback, forwarding off, veth peers).
    pub warnings: Vec<String>,
}

/// Global counters of a data plane, summed over CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PlaneCounters {
    /// Every counter, in `Counter::ALL` order.
    pub counters: Vec<(Counter, u64)>,
    /// Drops by reason, in `DropReason::ALL` order.
    pub drops: Vec<(DropReason, u64)>,
}

impl PlaneCounters {
    /// One counter's value (0 if absent).
    pub fn get(&self, c: Counter) -> u64 {
        self.counters
            .iter()
            .find(|(k, _)| *k == c)
            .map_or(0, |(_, v)| *v)
    }
}

/// The writer side of a data plane.
pub trait DataPlane: Send + std::fmt::Debug + 'static {
    /// A short name (`xdp`).
    fn kind(&self) -> &'static str;

    /// Attaches to `ifaces` (an interface already attached keeps forwarding: the program is
    /// swapped in place).
    fn attach(&mut self, ifaces: &[String]) -> Result<Vec<AttachInfo>, PlaneError>;

    /// Detaches from every interface; with `purge`, also removes what it pinned.
    fn detach(&mut self, purge: bool) -> Result<(), PlaneError>;

    /// Makes `snap` what every packet sees, atomically. The snapshot was validated once, by
    /// stator-core's rules ([`ValidSnapshot`]); a plane refuses only what it has no room for.
    /// On error, the previous snapshot is still active.
    fn commit(&mut self, snap: &ValidSnapshot) -> Result<CommitInfo, PlaneError>;

    /// The snapshot packets use now (`None` if nothing was ever committed).
    fn active_snapshot(&self) -> Result<Option<Snapshot>, PlaneError>;

    /// Whether it forwards: attached where it should be, its state answering, and a test
    /// packet through the program getting the expected verdict. The error says what failed.
    fn check(&self) -> Result<(), PlaneError>;

    /// A reader that does not borrow the writer.
    fn reader(&self) -> Result<Arc<dyn PlaneReader>, PlaneError>;

    /// Where the tracer's reports (docs/forwarding.md §11) come out, for a plane whose reports
    /// do not go through the pinned `stator_trace` ring (which the node opens itself for the
    /// XDP plane): the AF_XDP plane's packet threads.
    fn trace_source(&self) -> Option<Box<dyn TraceSource>> {
        None
    }
}

/// The reader side of a data plane.
pub trait PlaneReader: Send + Sync + std::fmt::Debug {
    /// Global counters and drops by reason.
    fn counters(&self) -> Result<PlaneCounters, PlaneError>;

    /// Packets and bytes matched for a VIP id.
    fn vip_traffic(&self, id: VipId) -> Result<Traffic, PlaneError>;

    /// Packets and bytes forwarded to a real id.
    fn real_traffic(&self, id: RealId) -> Result<Traffic, PlaneError>;

    /// The connection-table entries of a flow, one per CPU that has one (index = CPU) for a
    /// per-CPU table (a zero `last_seen_ns` means none on that CPU), or one for a shared
    /// table; empty when the flow has none.
    fn conntrack_lookup(&self, flow: &FlowKey) -> Result<Vec<CtEntry>, PlaneError>;

    /// Walks up to `limit` flows of the connection table; returns how many were visited.
    fn conntrack_scan(
        &self,
        limit: usize,
        f: &mut dyn FnMut(&FlowKey, &[CtEntry]),
    ) -> Result<usize, PlaneError>;

    /// The data plane's clock, in nanoseconds (the clock of `CtEntry::last_seen_ns`).
    fn clock_ns(&self) -> u64;

    /// Figures of the plane's own machinery, beside the counters every plane has (the AF_XDP
    /// plane: each socket's `XDP_STATISTICS`, its I/O and packet threads' counts), for
    /// `/metrics` and `/v1/status`. Empty for planes without any.
    fn plane_stats(&self) -> Vec<PlaneStat> {
        Vec::new()
    }

    /// What the holder of early fragments has done (docs/forwarding.md §9), for a plane that
    /// has one.
    fn hold_stats(&self) -> Option<HolderStats> {
        None
    }
}

/// One sample of [`PlaneReader::plane_stats`]: a metric family (samples of one family come
/// together), its help text, labels and value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlaneStat {
    /// The metric family, e.g. `stator_afxdp_xsk_total`.
    pub family: &'static str,
    /// Counter or gauge.
    pub counter: bool,
    /// Its help text.
    pub help: &'static str,
    /// Label names and values.
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: u64,
}

/// Where a plane's trace reports (docs/forwarding.md §11) come from: the XDP forwarder's
/// pinned `stator_trace` ring, or the AF_XDP packet threads' queue.
pub trait TraceSource: Send {
    /// The next event, if any (never blocks).
    fn next_event(&mut self) -> Option<TraceEvent>;
}

/// What a plane's holder of early fragments (docs/forwarding.md §9) has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HolderStats {
    /// The queue's counts: held, released, expired, full.
    pub queue: stator_core::HoldStats,
    /// Frames held now.
    pub holding: usize,
    /// Released frames the kernel refused to run again (BPF_PROG_TEST_RUN failed).
    pub rerun_errors: u64,
    /// Ring records that did not parse.
    pub malformed: u64,
}

/// What can go wrong in a data plane. The previous state is in force after any of these.
#[derive(Debug, thiserror::Error)]
pub enum PlaneError {
    /// The plane refused or failed an operation.
    #[error("data plane: {op} failed: {source}")]
    Failed {
        /// What was attempted (`commit`, `self-test`, `attach`, …).
        op: &'static str,
        /// The plane's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// The plane has no room for a snapshot (more Maglev slots than it was created with).
    #[error("data plane: commit refused: {reason}")]
    Refused {
        /// What does not fit.
        reason: String,
    },

    /// The forwarder is not healthy (not attached, maps not answering, self-test failed).
    #[error("forwarder unhealthy: {reason}")]
    Unhealthy {
        /// What the check found.
        reason: String,
    },

    /// The plane must run as root.
    #[error("{what} needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN); run as root")]
    NotRoot {
        /// What needs it.
        what: String,
    },

    /// An I/O operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl PlaneError {
    /// A failed operation, with the plane's own error as its source.
    pub fn failed(op: &'static str, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Failed {
            op,
            source: Box::new(e),
        }
    }

    /// A failed I/O operation.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}
