//! The AF_XDP forwarder: the redirect program (kernel half) and the
//! runtime (user half), committed to together, read together.
//!
//! **Commit order.** A snapshot is compiled (and so validated) first; then the packet threads
//! take it (each between two batches, [`Runtime::publish`] waits until all have); then the
//! kernel half flips its generation (`stator_xdp::Forwarder::commit`, atomic with an RCU grace
//! period). User space first means a VIP added by the commit is known to the threads before
//! the kernel hands its packets up. A VIP removed by it can, for the few microseconds between
//! the two switches, still be handed up to threads that no longer know it: the forwarder says
//! PASS, user space cannot give the frame back to the kernel, and it is counted (`user_pass`)
//! and recycled. Each packet is still decided under exactly one snapshot.
//!
//! **Reading.** Counters are the kernel half's (what the redirect program passed or dropped
//! before a frame went up: `non_ip`, `non_vip`, `act_pass`, malformed headers, `xsk_*`) plus
//! every packet thread's `Forwarder` totals — every packet is counted exactly once, in the same
//! counters as the XDP plane. The threads' forwarders are [`Shard`]s: the controller reads
//! them (counters summed, connection tables looked up one entry per thread, as the XDP plane's
//! per-CPU table gives one per CPU) with the reader it already has for user-space planes
//! (`stator_plane::coreplane::Shards`, in [`crate::dataplane`]); [`ForwarderReader`] adds the kernel half's counters
//! and AF_XDP's own statistics.

use std::sync::{Arc, Mutex};

use stator_abi::Traffic;
use stator_core::{CompiledSnapshot, RealId, Snapshot, ValidSnapshot, VipId};
use stator_xdp::{Attachment, Maps, XdpOptions};

use crate::config::AfxdpConfig;
use crate::error::AfxdpError;
use crate::io::IoStats;
use crate::runtime::{Iface, Runtime, Shard, Start, new_shards};
use crate::socket::{XskSocket, XskStats};
use crate::sys;
use crate::trace::{TraceSink, TraceTap};
use crate::worker::WorkerShared;

/// The snapshot as the packet threads run it: `snap` with the tracer's report limit
/// (`tracer.reports_per_sec`, per node: one window in XDP) shared among the `threads`
/// forwarders, each of which keeps its own window — so the node sends at most the limit (or
/// one report per thread per second, when the limit is lower than the thread count).
fn for_threads(snap: &Snapshot, threads: usize) -> Snapshot {
    let mut s = snap.clone();
    let limit = s.node.trace_per_sec;
    if limit != 0 {
        s.node.trace_per_sec = (limit / threads.max(1) as u32).max(1);
    }
    s
}

/// What a commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfxdpCommit {
    /// The kernel half's report.
    pub kernel: stator_xdp::CommitReport,
    /// Time for the packet threads to take the snapshot.
    pub publish: std::time::Duration,
}

/// The running parts a reader looks at (replaced when the runtime restarts).
#[derive(Debug, Clone)]
struct View {
    workers: Vec<Arc<WorkerShared>>,
    io: Arc<IoStats>,
    sockets: Vec<XskSocket>,
}

/// The AF_XDP data plane.
#[derive(Debug)]
pub struct AfxdpForwarder {
    kernel: stator_xdp::Forwarder,
    cfg: AfxdpConfig,
    runtime: Option<Runtime>,
    ifaces: Vec<Iface>,
    snap: Arc<CompiledSnapshot>,
    shards: Vec<Shard>,
    view: Arc<Mutex<Option<View>>>,
    trace: TraceSink,
}

impl AfxdpForwarder {
    /// Loads the redirect program over the maps pinned at `xdp.pin_path` (reusing them: the
    /// active snapshot survives a restart, as in the XDP plane) and makes sure a configuration
    /// is active. Binds and starts nothing: [`AfxdpForwarder::attach`] does.
    pub fn load(xdp: &XdpOptions, cfg: AfxdpConfig) -> Result<Self, AfxdpError> {
        if !sys::is_root() {
            return Err(AfxdpError::NotRoot {
                what: "the AF_XDP data plane".into(),
            });
        }
        cfg.validate()?;
        let mut kernel = stator_xdp::Forwarder::load_xsk(xdp, cfg.umem.max_packet())?;
        kernel.ensure_programmed()?;
        let active = kernel.active_snapshot()?.unwrap_or_default();
        // What the maps hold: representable, as the kernel half reads it back; the threads'
        // copy shares the tracer's rate among them.
        let snap = Arc::new(CompiledSnapshot::new(&ValidSnapshot::new_lenient(
            for_threads(&active, cfg.packet_threads),
        )?));
        Ok(Self {
            shards: new_shards(&cfg),
            kernel,
            cfg,
            runtime: None,
            ifaces: Vec::new(),
            snap,
            view: Arc::new(Mutex::new(None)),
            trace: TraceSink::default(),
        })
    }

    /// The tracer's reports from every packet thread (docs/forwarding.md §11): what the XDP
    /// plane's `stator_trace` ring carries, in process. The queue outlives runtime restarts.
    pub fn trace_tap(&self) -> TraceTap {
        self.trace.tap()
    }

    /// The kernel half (self-test, status, counters).
    pub fn kernel(&self) -> &stator_xdp::Forwarder {
        &self.kernel
    }

    /// The kernel half, writable (tests: the XSKMAP).
    pub fn kernel_mut(&mut self) -> &mut stator_xdp::Forwarder {
        &mut self.kernel
    }

    /// The options.
    pub fn config(&self) -> &AfxdpConfig {
        &self.cfg
    }

    /// The packet threads' forwarders, in thread order (they outlive runtimes).
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// The runtime, when attached.
    pub fn runtime(&self) -> Option<&Runtime> {
        self.runtime.as_ref()
    }

    /// Attaches the redirect program to `ifaces` (in the calling thread's namespace; an
    /// interface already carrying it keeps it, the new program is swapped in) and, when the
    /// set of interfaces changed, (re)starts the runtime on them — binding a socket per RX
    /// queue and starting the threads, which keep the previous threads' connection tables.
    pub fn attach(&mut self, ifaces: &[String]) -> Result<Vec<Attachment>, AfxdpError> {
        let mut out = Vec::with_capacity(ifaces.len());
        let mut want = Vec::with_capacity(ifaces.len());
        for name in ifaces {
            let a = self.kernel.attach(name)?;
            want.push(Iface {
                name: name.clone(),
                ifindex: a.ifindex,
            });
            out.push(a);
        }
        if want != self.ifaces || self.runtime.is_none() {
            if let Some(r) = self.runtime.take() {
                r.stop(Some(&mut self.kernel));
            }
            *self.view.lock().unwrap_or_else(|p| p.into_inner()) = None;
            let rt = Runtime::start(
                &mut self.kernel,
                Start {
                    ifaces: &want,
                    cfg: &self.cfg,
                    snap: Arc::clone(&self.snap),
                    shards: self.shards.clone(),
                    trace: self.trace.clone(),
                },
            )?;
            *self.view.lock().unwrap_or_else(|p| p.into_inner()) = Some(View {
                workers: rt.workers().to_vec(),
                io: Arc::clone(rt.io_stats()),
                sockets: rt.sockets().to_vec(),
            });
            self.runtime = Some(rt);
            self.ifaces = want;
        }
        Ok(out)
    }

    /// Stops the runtime, detaches the program from every interface and, with `purge`,
    /// removes the pins.
    pub fn detach(&mut self, purge: bool) -> Result<(), AfxdpError> {
        if let Some(rt) = self.runtime.take() {
            rt.stop(Some(&mut self.kernel));
        }
        *self.view.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let pin = self.kernel.options().pin_path.clone();
        for i in std::mem::take(&mut self.ifaces) {
            match stator_xdp::detach(&pin, &i.name) {
                Ok(()) | Err(stator_xdp::XdpError::NotAttached { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if purge {
            stator_xdp::purge(&pin)?;
        }
        Ok(())
    }

    /// Makes `snap` what every packet sees (see the module essay for the order). It takes the
    /// same [`ValidSnapshot`] as the kernel half — validated once by stator-core, or made with
    /// `ValidSnapshot::new_lenient` by tests of the drop paths (a backend without a source
    /// address: its packets are dropped `no_source`, as in XDP) — so both halves always hold
    /// the same snapshot: if the kernel half refuses it (no room), the packet threads go back
    /// to the previous one.
    pub fn commit(&mut self, snap: &ValidSnapshot) -> Result<AfxdpCommit, AfxdpError> {
        // The threads' copy: the same snapshot with the tracer's rate shared among them.
        let compiled = Arc::new(CompiledSnapshot::new(&ValidSnapshot::new_lenient(
            for_threads(snap, self.cfg.packet_threads),
        )?));
        let t = std::time::Instant::now();
        if let Some(rt) = &self.runtime {
            rt.publish(Arc::clone(&compiled))?;
        }
        let publish = t.elapsed();
        let kernel = match self.kernel.commit(snap) {
            Ok(k) => k,
            Err(e) => {
                if let Some(rt) = &self.runtime {
                    rt.publish(Arc::clone(&self.snap))?;
                }
                return Err(e.into());
            }
        };
        self.snap = compiled;
        Ok(AfxdpCommit { kernel, publish })
    }

    /// The active snapshot (the kernel half's, read back from its maps).
    pub fn active_snapshot(&self) -> Result<Option<Snapshot>, AfxdpError> {
        Ok(self.kernel.active_snapshot()?)
    }

    /// The plane's self-test: the redirect program answers its probe from the active
    /// generation (as the XDP forwarder's self-test), and every thread is alive, turning and
    /// using the last published snapshot.
    pub fn check(&self) -> Result<(), AfxdpError> {
        self.kernel.self_test()?;
        match &self.runtime {
            Some(rt) => rt.check_alive(),
            None if self.ifaces.is_empty() => Ok(()),
            None => Err(AfxdpError::thread("the AF_XDP threads are not running")),
        }
    }

    /// A reader that does not borrow the plane.
    pub fn reader(&self) -> Result<ForwarderReader, AfxdpError> {
        Ok(ForwarderReader {
            maps: Maps::open(&self.kernel.options().pin_path)?,
            view: Arc::clone(&self.view),
        })
    }
}

impl Drop for AfxdpForwarder {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.stop(Some(&mut self.kernel));
        }
    }
}

/// AF_XDP's own figures: the kernel's per-socket statistics, the I/O thread's and each packet
/// thread's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlaneStats {
    /// `(ifindex, queue, XDP_STATISTICS)` per socket.
    pub sockets: Vec<(u32, u32, XskStats)>,
    /// The I/O thread's counters, `(label, value)`.
    pub io: Vec<(&'static str, u64)>,
    /// Each packet thread's counters, `(label, value)`.
    pub threads: Vec<Vec<(&'static str, u64)>>,
}

impl PlaneStats {
    /// The sockets' statistics summed.
    pub fn xsk_totals(&self) -> XskStats {
        let mut t = XskStats::default();
        for (_, _, s) in &self.sockets {
            t.add(s);
        }
        t
    }

    /// An I/O counter by label (0 if absent).
    pub fn io(&self, label: &str) -> u64 {
        self.io
            .iter()
            .find(|(l, _)| *l == label)
            .map_or(0, |(_, v)| *v)
    }

    /// A packet-thread counter summed over threads.
    pub fn threads_total(&self, label: &str) -> u64 {
        self.threads
            .iter()
            .flat_map(|t| t.iter())
            .filter(|(l, _)| *l == label)
            .map(|(_, v)| *v)
            .sum()
    }
}

/// Reads counters, connection tables and statistics without the plane's writer.
#[derive(Debug)]
pub struct ForwarderReader {
    maps: Maps,
    view: Arc<Mutex<Option<View>>>,
}

impl ForwarderReader {
    fn view(&self) -> Option<View> {
        self.view.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The kernel half's counters: what the redirect program passed, or dropped before a
    /// frame went up (the packet threads' own are read through their shards).
    pub fn kernel_counters(&self) -> Result<stator_xdp::Counters, AfxdpError> {
        Ok(self.maps.counters()?)
    }

    /// The kernel half's packets and bytes for a VIP and a real (0 in this plane: the redirect
    /// program counts none; read for completeness, as pins may come from an XDP forwarder).
    pub fn kernel_traffic(
        &self,
        vip: VipId,
        real: RealId,
    ) -> Result<(Traffic, Traffic), AfxdpError> {
        Ok((
            self.maps.vip_traffic(vip.0)?,
            self.maps.real_traffic(real.0)?,
        ))
    }

    /// The plane's clock (`CLOCK_MONOTONIC_COARSE`, what the packet threads stamp entries with).
    pub fn clock_ns(&self) -> u64 {
        stator_sys::clock::monotonic_coarse_ns()
    }

    /// What the packet threads' holders of early fragments have done, summed (the XDP plane's
    /// holder's figures; `rerun_errors` and `malformed` cannot happen in process: 0). `None`
    /// while not attached.
    pub fn hold_stats(&self) -> Option<stator_xdp::HolderStats> {
        let v = self.view()?;
        let r = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let mut h = stator_xdp::HolderStats::default();
        for w in &v.workers {
            let s = &w.stats;
            h.queue.held += r(&s.hold_held);
            h.queue.released += r(&s.hold_released);
            h.queue.expired += r(&s.hold_expired);
            h.queue.full += r(&s.hold_full);
            h.holding += r(&s.holding) as usize;
        }
        Some(h)
    }

    /// AF_XDP's own statistics (empty while not attached).
    pub fn stats(&self) -> PlaneStats {
        let Some(v) = self.view() else {
            return PlaneStats::default();
        };
        let io = &v.io;
        let r = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        PlaneStats {
            sockets: v
                .sockets
                .iter()
                .map(|s| (s.ifindex(), s.queue(), s.stats().unwrap_or_default()))
                .collect(),
            io: vec![
                ("rx", r(&io.rx)),
                ("steered", r(&io.steered)),
                ("steer_fallback", r(&io.steer_fallback)),
                ("steer_stalls", r(&io.steer_stalls)),
                ("tx", r(&io.tx)),
                ("recycled", r(&io.recycled)),
                ("completed", r(&io.completed)),
                ("flush_full", r(&io.flush_full)),
                ("flush_timer", r(&io.flush_timer)),
                ("flush_turn", r(&io.flush_turn)),
                ("tx_kicks", r(&io.tx_kicks)),
                ("tx_ring_full", r(&io.tx_ring_full)),
                ("fill_wakeups", r(&io.fill_wakeups)),
                ("rx_invalid", r(&io.rx_invalid)),
                ("comp_invalid", r(&io.comp_invalid)),
                ("sleeps", r(&io.sleeps)),
                ("steer_ns", r(&io.steer_ns)),
                ("mux_ns", r(&io.mux_ns)),
                ("rtc_ns", r(&io.rtc_ns)),
            ],
            threads: v
                .workers
                .iter()
                .map(|w| {
                    let s = &w.stats;
                    vec![
                        ("packets", r(&s.packets)),
                        ("batches", r(&s.batches)),
                        ("busy_ns", r(&s.busy_ns)),
                        ("user_pass", r(&s.user_pass)),
                        ("parks", r(&s.parks)),
                        ("fib_hits", r(&s.fib_hits)),
                        ("fib_lookups", r(&s.fib_lookups)),
                        ("fib_errors", r(&s.fib_errors)),
                        ("hold_held", r(&s.hold_held)),
                        ("hold_released", r(&s.hold_released)),
                        ("hold_expired", r(&s.hold_expired)),
                        ("hold_full", r(&s.hold_full)),
                    ]
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_limit_is_shared_among_the_packet_threads() {
        let mut s = Snapshot::default();
        let per = |s: &Snapshot, n| for_threads(s, n).node.trace_per_sec;
        s.node.trace_per_sec = 100;
        assert_eq!((per(&s, 1), per(&s, 2), per(&s, 3)), (100, 50, 33));
        s.node.trace_per_sec = 1;
        assert_eq!(per(&s, 4), 1, "at least one per thread");
        s.node.trace_per_sec = 0;
        assert_eq!(per(&s, 2), 0, "off stays off");
        assert_eq!(for_threads(&s, 2).generation, s.generation);
    }
}
