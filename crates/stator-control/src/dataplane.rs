//! The boundary between the controller and a data plane.
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
//! [`crate::xdp::XdpPlane`] implements both for the XDP forwarder, [`crate::coreplane::CorePlane`]
//! for stator-core alone, and [`crate::afxdp::AfxdpPlane`] for the AF_XDP forwarder, whose
//! reader is the latter's ([`crate::coreplane::Shards`] over its packet threads' forwarders)
//! plus the counters of its kernel half.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use stator_core::{Counter, CtEntry, DropReason, FlowKey, RealId, Snapshot, Traffic, VipId};

use crate::error::ControlError;

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
    fn attach(&mut self, ifaces: &[String]) -> Result<Vec<AttachInfo>, ControlError>;

    /// Detaches from every interface; with `purge`, also removes what it pinned.
    fn detach(&mut self, purge: bool) -> Result<(), ControlError>;

    /// Makes `snap` what every packet sees, atomically. On error, the previous snapshot is
    /// still active.
    fn commit(&mut self, snap: &Snapshot) -> Result<CommitInfo, ControlError>;

    /// The snapshot packets use now (`None` if nothing was ever committed).
    fn active_snapshot(&self) -> Result<Option<Snapshot>, ControlError>;

    /// Whether it forwards: attached where it should be, its state answering, and a test
    /// packet through the program getting the expected verdict. The error says what failed.
    fn check(&self) -> Result<(), ControlError>;

    /// A reader that does not borrow the writer.
    fn reader(&self) -> Result<Arc<dyn PlaneReader>, ControlError>;
}

/// The reader side of a data plane.
pub trait PlaneReader: Send + Sync + std::fmt::Debug {
    /// Global counters and drops by reason.
    fn counters(&self) -> Result<PlaneCounters, ControlError>;

    /// Packets and bytes matched for a VIP id.
    fn vip_traffic(&self, id: VipId) -> Result<Traffic, ControlError>;

    /// Packets and bytes forwarded to a real id.
    fn real_traffic(&self, id: RealId) -> Result<Traffic, ControlError>;

    /// The connection-table entries of a flow, one per CPU that has one (index = CPU) for a
    /// per-CPU table (a zero `last_seen_ns` means none on that CPU), or one for a shared
    /// table; empty when the flow has none.
    fn conntrack_lookup(&self, flow: &FlowKey) -> Result<Vec<CtEntry>, ControlError>;

    /// Walks up to `limit` flows of the connection table; returns how many were visited.
    fn conntrack_scan(
        &self,
        limit: usize,
        f: &mut dyn FnMut(&FlowKey, &[CtEntry]),
    ) -> Result<usize, ControlError>;

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
    fn hold_stats(&self) -> Option<stator_xdp::HolderStats> {
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
