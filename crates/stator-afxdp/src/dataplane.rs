//! The AF_XDP forwarder as a [`DataPlane`]: what the controller drives when `dataplane.mode =
//! "afxdp"` (the configuration → [`AfxdpConfig`] mapping stays in stator-control, which owns
//! the configuration).
//!
//! The writer is [`AfxdpForwarder`] (the redirect program over the forwarder's pinned maps,
//! plus the sockets and threads). The reader adds nothing of its own where another plane
//! already has it: the packet threads' forwarders are read through [`Shards`] — the reader side
//! of [`CorePlane`](stator_plane::coreplane::CorePlane), the same counter sums and connection-table
//! lookups (one entry per packet thread, as per CPU in XDP) — and the kernel half's counters
//! (what the redirect program passed, or dropped before handing up) are added to them, so every
//! packet is counted once, in the counters the XDP plane has. Its own figures
//! (`XDP_STATISTICS` per socket, the I/O and packet threads' counts) come out as
//! [`PlaneStat`]s in `/metrics` and `/v1/status`.
//!
//! Health is the XDP plane's, in this plane's terms: each interface still carries our program
//! through our pinned link; the kernel half's maps answer and its self-test probe gets the
//! expected answer; every thread is alive, turning and using the last committed snapshot.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use stator_core::{CtEntry, FlowKey, RealId, Snapshot, Traffic, ValidSnapshot, VipId};
use stator_plane::coreplane::{Clock, CoreReader, Shards};
use stator_plane::{
    AttachInfo, CommitInfo, DataPlane, PlaneCounters, PlaneError, PlaneReader, PlaneStat,
    TraceSource,
};
use stator_xdp::XdpOptions;
use stator_xdp::dataplane::check_attachments;

use crate::{AfxdpConfig, AfxdpError, AfxdpForwarder, ForwarderReader};

/// The AF_XDP forwarder, loaded, with the interfaces it should be attached to.
#[derive(Debug)]
pub struct AfxdpPlane {
    fwd: AfxdpForwarder,
    attached: BTreeMap<String, (u32, u32)>,
}

fn afxdp_err(op: &'static str, e: AfxdpError) -> PlaneError {
    match e {
        AfxdpError::NotRoot { what } => PlaneError::NotRoot { what },
        AfxdpError::Xdp(x) => stator_xdp::dataplane::plane_error(op, x),
        other => PlaneError::failed(op, other),
    }
}

impl AfxdpPlane {
    /// Loads the redirect program (reusing pinned maps: the active snapshot survives a
    /// restart) and makes sure a configuration is active. Binds and starts nothing yet.
    ///
    /// # Errors
    /// Not root, bad options, the loader's errors.
    pub fn load(xdp: &XdpOptions, cfg: AfxdpConfig) -> Result<Self, PlaneError> {
        Ok(Self {
            fwd: AfxdpForwarder::load(xdp, cfg).map_err(|e| afxdp_err("load", e))?,
            attached: BTreeMap::new(),
        })
    }

    /// The loaded forwarder.
    pub fn forwarder(&self) -> &AfxdpForwarder {
        &self.fwd
    }

    /// The pin directory.
    pub fn pin_path(&self) -> PathBuf {
        self.fwd.kernel().options().pin_path.clone()
    }
}

impl DataPlane for AfxdpPlane {
    fn kind(&self) -> &'static str {
        "afxdp"
    }

    fn attach(&mut self, ifaces: &[String]) -> Result<Vec<AttachInfo>, PlaneError> {
        let at = self
            .fwd
            .attach(ifaces)
            .map_err(|e| afxdp_err("attach", e))?;
        let zero_copy = self
            .fwd
            .runtime()
            .is_some_and(|r| r.sockets().iter().all(|s| s.zero_copy()));
        Ok(at
            .into_iter()
            .map(|a| {
                self.attached
                    .insert(a.iface.clone(), (a.ifindex, a.prog_id));
                AttachInfo {
                    iface: a.iface,
                    mode: format!(
                        "{}+afxdp-{}",
                        a.mode.name(),
                        if zero_copy { "zerocopy" } else { "copy" }
                    ),
                    prog_id: a.prog_id,
                    replaced: a.replaced,
                    warnings: a.warnings,
                }
            })
            .collect())
    }

    fn detach(&mut self, purge: bool) -> Result<(), PlaneError> {
        self.attached.clear();
        self.fwd.detach(purge).map_err(|e| afxdp_err("detach", e))
    }

    fn commit(&mut self, snap: &ValidSnapshot) -> Result<CommitInfo, PlaneError> {
        let r = self.fwd.commit(snap).map_err(|e| afxdp_err("commit", e))?;
        Ok(CommitInfo {
            write: r.kernel.write_time + r.publish,
            grace: r.kernel.grace_time,
        })
    }

    fn active_snapshot(&self) -> Result<Option<Snapshot>, PlaneError> {
        self.fwd
            .active_snapshot()
            .map_err(|e| afxdp_err("reading the active snapshot", e))
    }

    fn check(&self) -> Result<(), PlaneError> {
        check_attachments(&self.pin_path(), &self.attached)?;
        self.fwd.check().map_err(|e| PlaneError::Unhealthy {
            reason: e.to_string(),
        })
    }

    fn reader(&self) -> Result<Arc<dyn PlaneReader>, PlaneError> {
        let shards = Shards::new(self.fwd.shards().to_vec());
        Ok(Arc::new(AfxdpReader {
            kernel: self.fwd.reader().map_err(|e| afxdp_err("open maps", e))?,
            core: CoreReader::new(shards, Arc::new(CoarseClock)),
        }))
    }

    fn trace_source(&self) -> Option<Box<dyn TraceSource>> {
        Some(Box::new(self.fwd.trace_tap()))
    }
}

/// `CLOCK_MONOTONIC_COARSE`: the clock the packet threads decide with (and the XDP program's
/// `bpf_ktime_get_coarse_ns`).
#[derive(Debug, Clone, Copy)]
struct CoarseClock;

impl Clock for CoarseClock {
    fn now_ns(&self) -> u64 {
        crate::clock_ns()
    }
}

/// The AF_XDP plane's reader: the packet threads' forwarders through [`CoreReader`], plus the
/// kernel half's counters and AF_XDP's own statistics.
#[derive(Debug)]
pub struct AfxdpReader {
    kernel: ForwarderReader,
    core: CoreReader,
}

fn read_err(e: AfxdpError) -> PlaneError {
    afxdp_err("read", e)
}

fn add(a: Traffic, b: Traffic) -> Traffic {
    Traffic {
        packets: a.packets.wrapping_add(b.packets),
        bytes: a.bytes.wrapping_add(b.bytes),
    }
}

impl PlaneReader for AfxdpReader {
    fn counters(&self) -> Result<PlaneCounters, PlaneError> {
        let k = self.kernel.kernel_counters().map_err(read_err)?;
        let mut c = self.core.counters()?;
        for (key, v) in &mut c.counters {
            *v = v.wrapping_add(k.get(*key));
        }
        for (r, v) in &mut c.drops {
            *v = v.wrapping_add(k.drops(*r));
        }
        Ok(c)
    }

    fn vip_traffic(&self, id: VipId) -> Result<Traffic, PlaneError> {
        let (k, _) = self
            .kernel
            .kernel_traffic(id, RealId(0))
            .map_err(read_err)?;
        Ok(add(k, self.core.vip_traffic(id)?))
    }

    fn real_traffic(&self, id: RealId) -> Result<Traffic, PlaneError> {
        let (_, k) = self.kernel.kernel_traffic(VipId(0), id).map_err(read_err)?;
        Ok(add(k, self.core.real_traffic(id)?))
    }

    fn conntrack_lookup(&self, flow: &FlowKey) -> Result<Vec<CtEntry>, PlaneError> {
        self.core.conntrack_lookup(flow)
    }

    fn conntrack_scan(
        &self,
        limit: usize,
        f: &mut dyn FnMut(&FlowKey, &[CtEntry]),
    ) -> Result<usize, PlaneError> {
        self.core.conntrack_scan(limit, f)
    }

    fn clock_ns(&self) -> u64 {
        self.core.clock_ns()
    }

    fn hold_stats(&self) -> Option<stator_plane::HolderStats> {
        self.kernel.hold_stats()
    }

    fn plane_stats(&self) -> Vec<PlaneStat> {
        let st = self.kernel.stats();
        let mut out = Vec::new();
        for (ifindex, queue, s) in &st.sockets {
            let iface = stator_xdp::ifname(*ifindex).unwrap_or_else(|| ifindex.to_string());
            for (stat, v) in s.fields() {
                out.push(PlaneStat {
                    family: "stator_afxdp_xsk_total",
                    counter: true,
                    help: "The kernel's XDP_STATISTICS of each AF_XDP socket: packets it dropped \
                           (rx_dropped, rx_ring_full, rx_fill_ring_empty_descs), descriptors it \
                           refused (rx/tx_invalid_descs), TX wake-ups with nothing to send.",
                    labels: vec![
                        ("iface", iface.clone()),
                        ("queue", queue.to_string()),
                        ("stat", stat.to_owned()),
                    ],
                    value: v,
                });
            }
        }
        for (event, v) in &st.io {
            out.push(PlaneStat {
                family: "stator_afxdp_io_total",
                counter: true,
                help: "The AF_XDP I/O thread (steering and muxing): frames read, steered \
                       (steer_fallback: round-robin past a full queue), transmitted, recycled, \
                       completed; flushes by cause; wake-ups; nanoseconds spent.",
                labels: vec![("event", (*event).to_owned())],
                value: *v,
            });
        }
        for (i, t) in st.threads.iter().enumerate() {
            for (event, v) in t {
                out.push(PlaneStat {
                    family: "stator_afxdp_thread_total",
                    counter: true,
                    help: "Each AF_XDP packet thread: frames and batches processed, \
                           nanoseconds busy, frames passed that user space could not hand \
                           back (user_pass), sleeps, next-hop cache hits and kernel lookups, \
                           early fragments held, released, expired and refused (hold_*).",
                    labels: vec![("thread", i.to_string()), ("event", (*event).to_owned())],
                    value: *v,
                });
            }
        }
        out
    }
}
