//! A data plane made of stator-core alone: [`CorePlane`].
//!
//! The XDP program and `stator_core::Forwarder` are two implementations of one decision,
//! held equal by the differential test (`crates/stator-xdp/tests/xdp/differential.rs`). So a
//! controller test that commits to a `CorePlane` and pushes frames through it sees the same
//! verdicts, backends, output bytes and counters the XDP forwarder would give — without
//! root, without BPF, and on a clock the test drives. The reconciler, health-driven commits,
//! drains and their timeouts, the watchdog, the tracer and the admin API are tested this way
//! (`crates/stator-node/tests/{reconciler,api,health}.rs`); one smoke test per path keeps
//! the real XDP plane honest (`tests/node_netns/xdp_plane.rs`).
//!
//! ## The seam for user-space planes
//!
//! ```text
//!   writer (DataPlane)                packet threads               readers (PlaneReader)
//!   commit: compile ──────────► CoreState ──► process(thread, …) ◄── CoreReader
//!     ArcSwap<Active>               │ active: Arc<CompiledSnapshot>       counters: Σ shards
//!                                   │ shards: [Arc<Mutex<Forwarder>>]     conntrack: per table
//!                                   └ clock:  Arc<dyn Clock>              clock_ns: same clock
//! ```
//!
//! Three pieces, usable apart, so that a plane running stator-core per thread (AF_XDP:
//! one `Forwarder` per packet thread, the paper's §3.1) builds on them instead of writing
//! them again:
//! - [`Shards`]: the forwarders, one per packet thread (or one with a shared table). A
//!   packet thread locks its own shard once per batch — uncontended except while a reader
//!   copies counters or table entries out of it. Made of std and stator-core types only, so
//!   a plane crate can hold them without depending on this one.
//! - [`CoreReader`]: a [`PlaneReader`] over `Shards` and a
//!   [`Clock`]: counters and per-VIP/per-real traffic summed over shards and CPU indexes;
//!   connection-table lookups answered one entry per table (the per-CPU convention the
//!   tracer already understands: index = thread); walks that copy under each lock and call
//!   back outside it.
//! - [`Clock`]: what `now_ns` packets are decided with and what `clock_ns` answers.
//!   [`TokioClock`] follows tokio's clock (real, or the test's under a paused runtime, in
//!   step with drain deadlines and health schedules); [`ManualClock`] moves when told.
//!
//! [`CoreState`] puts them together with the active snapshot: a commit compiles a
//! `ValidSnapshot` (validated once, by stator-core) and swaps an `Arc<CompiledSnapshot>` in
//! one store; a packet
//! takes the `Arc` it finds, so it sees the old configuration or the new one, never a mix,
//! and the old one is freed when its last packet is done (no grace period to wait for).
//!
//! ## Faithful to the XDP plane where the controller can tell
//! - Capacity: a commit whose Maglev tables need more slots than `slots_per_generation` is
//!   refused, as the XDP maps refuse it, and the previous snapshot stays.
//! - A new plane holds an empty snapshot (generation 0), as a freshly loaded XDP forwarder
//!   does after `ensure_programmed`. The state outlives a [`CorePlane`]: a second plane over
//!   the same [`CoreState`] is a restart over the same pins (ids are seeded from it);
//!   `detach(purge)` forgets everything, as removing the pins does.
//! - `check` is the XDP plane's check in this plane's terms: every shard answers, the
//!   compiled snapshot is the committed one, and a VIP address of it is found by the packet
//!   path. [`CoreState::set_fault`] makes it fail, as a forwarder that stopped answering
//!   would, for tests of the watchdog.

mod clock;
mod reader;

pub use clock::{Clock, ManualClock, TokioClock};
pub use reader::{CoreReader, Shard, Shards, lock_shard};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use std::time::Instant;

use stator_core::{
    CompiledSnapshot, CtMode, Forwarder, ForwarderConfig, NextHops, PacketBuf, Snapshot,
    ValidSnapshot, Verdict,
};

use crate::PlaneError;
use crate::{AttachInfo, CommitInfo, DataPlane, PlaneReader};

/// How a [`CoreState`] is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreOptions {
    /// Packet threads (CPU indexes), at least 1.
    pub threads: usize,
    /// One connection table per thread, or one shared.
    pub ct_mode: CtMode,
    /// Entries per connection table.
    pub ct_entries: usize,
    /// The most Maglev slots one snapshot may use (`dataplane.slots_per_generation`).
    pub slots_per_gen: u32,
    /// Seed of the connection tables' hash.
    pub ct_seed: u64,
}

impl Default for CoreOptions {
    /// Two threads with per-thread tables of 4,096 entries, 4 Mi slots, seed 0.
    fn default() -> Self {
        Self {
            threads: 2,
            ct_mode: CtMode::PerCpu,
            ct_entries: 4096,
            slots_per_gen: 1 << 22,
            ct_seed: 0,
        }
    }
}

impl CoreOptions {
    /// How many forwarders, and how each is built.
    fn layout(&self) -> (usize, ForwarderConfig) {
        let threads = self.threads.max(1);
        let (shards, cpus) = match self.ct_mode {
            CtMode::PerCpu => (threads, 1),
            CtMode::Shared => (1, threads),
        };
        let cfg = ForwarderConfig {
            cpus,
            ct_mode: self.ct_mode,
            ct_capacity: self.ct_entries.max(1),
            ct_seed: self.ct_seed,
            ..ForwarderConfig::default()
        };
        (shards, cfg)
    }

    fn forwarders(&self) -> Vec<Shard> {
        let (n, cfg) = self.layout();
        (0..n)
            .map(|_| Arc::new(Mutex::new(Forwarder::new(cfg))))
            .collect()
    }
}

/// The committed configuration, in both forms.
#[derive(Debug, Clone)]
struct Active {
    snapshot: ValidSnapshot,
    compiled: Arc<CompiledSnapshot>,
}

/// What a [`CorePlane`] forwards with: the active snapshot, the forwarders, the clock. It
/// outlives the plane (a restart over the same state keeps snapshot, tables and counters).
#[derive(Debug)]
pub struct CoreState {
    opts: CoreOptions,
    active: ArcSwap<Active>,
    shards: Shards,
    clock: Arc<dyn Clock>,
    fault: Mutex<Option<String>>,
    checks: AtomicU64,
}

impl CoreState {
    /// Forwarders per `opts`, holding an empty snapshot (generation 0), telling time with
    /// `clock`.
    pub fn new(opts: CoreOptions, clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            opts,
            active: ArcSwap::from_pointee(empty()),
            shards: Shards::new(opts.forwarders()),
            clock,
            fault: Mutex::new(None),
            checks: AtomicU64::new(0),
        })
    }

    /// The options it was built with.
    pub fn options(&self) -> CoreOptions {
        self.opts
    }

    /// The forwarders.
    pub fn shards(&self) -> &Shards {
        &self.shards
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The snapshot packets use now, compiled.
    pub fn compiled(&self) -> Arc<CompiledSnapshot> {
        Arc::clone(&self.read().compiled)
    }

    /// The snapshot packets use now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(self.read().snapshot.shared())
    }

    /// Processes one frame as packet thread `thread` (taken modulo the thread count)
    /// receiving it on `ingress`, now: the forwarding decision with its effects on that
    /// thread's table and counters. `fib` is the FIB and devmap.
    pub fn process<N, B>(&self, thread: usize, ingress: u32, fib: &N, frame: &mut B) -> Verdict
    where
        N: NextHops + ?Sized,
        B: PacketBuf + ?Sized,
    {
        let snap = self.compiled();
        let now = self.clock.now_ns();
        let threads = self.opts.threads.max(1);
        let t = thread % threads;
        let (shard, cpu) = match self.opts.ct_mode {
            CtMode::PerCpu => (t, 0),
            CtMode::Shared => (0, t),
        };
        let all = self.shards.all();
        let mut fwd = lock_shard(&all[shard % all.len()]);
        fwd.process(&snap, now, cpu, ingress, fib, frame)
    }

    /// Makes [`CorePlane::check`](DataPlane::check) fail with `reason` (`Some`) or pass
    /// again (`None`) — what a forwarder that stops answering looks like to the watchdog.
    pub fn set_fault(&self, reason: Option<String>) {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner) = reason;
    }

    /// How many times a plane's [`check`](DataPlane::check) has run on this state (tests
    /// step the watchdog by it).
    pub fn checks_run(&self) -> u64 {
        self.checks.load(Ordering::SeqCst)
    }

    /// The active pair, replaced whole by a commit: a reader never sees the snapshot of one
    /// commit with the compiled form of another. Published the one way every plane and the
    /// proxy tier publish what their threads read: an `ArcSwap`, loaded without a lock.
    fn read(&self) -> arc_swap::Guard<Arc<Active>> {
        self.active.load()
    }

    fn swap(&self, a: Active) {
        self.active.store(Arc::new(a));
    }

    /// Forgets the snapshot, the tables and the counters (as removing the pins does).
    fn purge(&self) {
        self.swap(empty());
        let (_, cfg) = self.opts.layout();
        for shard in self.shards.all() {
            *lock_shard(shard) = Forwarder::new(cfg);
        }
    }
}

fn empty() -> Active {
    let snapshot = ValidSnapshot::empty();
    Active {
        compiled: Arc::new(CompiledSnapshot::new(&snapshot)),
        snapshot,
    }
}

/// A [`DataPlane`] over a [`CoreState`] (see the module documentation).
#[derive(Debug)]
pub struct CorePlane {
    state: Arc<CoreState>,
    attached: Vec<String>,
}

impl CorePlane {
    /// A plane over `state` (new, or left by an earlier plane: a restart).
    pub fn new(state: Arc<CoreState>) -> Self {
        Self {
            state,
            attached: Vec::new(),
        }
    }

    /// Its state.
    pub fn state(&self) -> &Arc<CoreState> {
        &self.state
    }
}

impl DataPlane for CorePlane {
    fn kind(&self) -> &'static str {
        "core"
    }

    /// Records the names: a `CorePlane` receives frames only through
    /// [`CoreState::process`].
    fn attach(&mut self, ifaces: &[String]) -> Result<Vec<AttachInfo>, PlaneError> {
        let mut out = Vec::with_capacity(ifaces.len());
        for iface in ifaces {
            let replaced = self.attached.contains(iface);
            if !replaced {
                self.attached.push(iface.clone());
            }
            out.push(AttachInfo {
                iface: iface.clone(),
                mode: "core".into(),
                prog_id: 0,
                replaced,
                warnings: vec!["a core plane forwards only frames handed to it in-process".into()],
            });
        }
        Ok(out)
    }

    fn detach(&mut self, purge: bool) -> Result<(), PlaneError> {
        self.attached.clear();
        if purge {
            self.state.purge();
        }
        Ok(())
    }

    fn commit(&mut self, snap: &ValidSnapshot) -> Result<CommitInfo, PlaneError> {
        let started = Instant::now();
        let slots: u64 = snap.vips.values().map(|v| v.table.len() as u64).sum();
        let limit = self.state.opts.slots_per_gen;
        if slots > u64::from(limit) {
            return Err(PlaneError::Refused {
                reason: format!(
                    "Maglev tables need {slots} slots, more than the {limit} slots per \
                     generation the data plane was created with (dataplane.slots_per_generation)"
                ),
            });
        }
        let compiled = CompiledSnapshot::new(snap);
        let write = started.elapsed();
        self.state.swap(Active {
            snapshot: snap.clone(),
            compiled: Arc::new(compiled),
        });
        Ok(CommitInfo {
            write,
            grace: std::time::Duration::ZERO,
        })
    }

    fn active_snapshot(&self) -> Result<Option<Snapshot>, PlaneError> {
        Ok(Some((*self.state.snapshot()).clone()))
    }

    fn check(&self) -> Result<(), PlaneError> {
        let result = self.self_test();
        self.state.checks.fetch_add(1, Ordering::SeqCst);
        result
    }

    fn reader(&self) -> Result<Arc<dyn PlaneReader>, PlaneError> {
        Ok(Arc::new(CoreReader::new(
            self.state.shards.clone(),
            Arc::clone(&self.state.clock),
        )))
    }
}

impl CorePlane {
    /// The check: no fault set, every shard answering, the compiled snapshot the committed
    /// one, a VIP address of it found by the packet path.
    fn self_test(&self) -> Result<(), PlaneError> {
        let unhealthy = |reason: String| PlaneError::Unhealthy { reason };
        if let Some(reason) = self
            .state
            .fault
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            return Err(unhealthy(reason));
        }
        for shard in self.state.shards.all() {
            if shard
                .try_lock()
                .is_err_and(|e| matches!(e, std::sync::TryLockError::Poisoned(_)))
            {
                return Err(unhealthy(
                    "a packet thread panicked while forwarding".into(),
                ));
            }
        }
        let active = self.state.read().clone();
        if active.compiled.generation() != active.snapshot.generation {
            return Err(unhealthy(format!(
                "packets see generation {}, the plane committed {}",
                active.compiled.generation(),
                active.snapshot.generation
            )));
        }
        if let Some(key) = active.snapshot.vips.keys().next()
            && active.compiled.vaddr_flags(key.addr).is_none()
        {
            return Err(unhealthy(format!(
                "VIP address {} is missing from the packet path",
                key.addr
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
