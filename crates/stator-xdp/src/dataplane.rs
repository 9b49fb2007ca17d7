//! The XDP forwarder as a [`DataPlane`]: what the controller drives when `dataplane.mode =
//! "xdp"` (the configuration → [`XdpOptions`](crate::XdpOptions) mapping stays in
//! stator-control, which owns the configuration).
//!
//! The forwarder's health, checked every second by the node, is three things: every
//! configured interface carries *our* program through our pinned link (link pinned, its
//! interface is the interface of that name now, the kernel reports an XDP program attached,
//! and its id is the id we attached), the maps answer (the counters are read), and the
//! self-test probe through `BPF_PROG_TEST_RUN` gets the expected answer.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use stator_core::HoldLimits;
use stator_core::{
    Counter, CtEntry, DropReason, FlowKey, RealId, Snapshot, Traffic, ValidSnapshot, VipId,
};
use stator_plane::{AttachInfo, CommitInfo, DataPlane, PlaneCounters, PlaneError, PlaneReader};

use crate::{Forwarder, Holder, HolderStats, Maps, XdpError, XdpMode, XdpOptions};

/// The XDP forwarder, loaded, with the interfaces it should be attached to.
#[derive(Debug)]
pub struct XdpPlane {
    fwd: Forwarder,
    /// Interface name → (ifindex, program id) as attached.
    attached: BTreeMap<String, (u32, u32)>,
    /// The thread that holds early fragments (docs/forwarding.md §9).
    holder: Option<Arc<Holder>>,
}

impl XdpPlane {
    /// Loads the forwarder (reusing maps pinned by an earlier run) and makes sure a
    /// configuration is active (an empty one if nothing was ever committed). Attaches nothing.
    ///
    /// # Errors
    /// The loader's error (not root, pin path not on bpffs, incompatible pins, verifier).
    pub fn load(opts: &XdpOptions) -> Result<Self, PlaneError> {
        let mut fwd = Forwarder::load(opts).map_err(|e| plane_error("load", e))?;
        fwd.ensure_programmed()
            .map_err(|e| plane_error("initial commit", e))?;
        Ok(Self {
            fwd,
            attached: BTreeMap::new(),
            holder: None,
        })
    }

    /// Starts the holder of early fragments: fragments that reach this node before their
    /// first wait there, bounded by `limits`, and go through the forwarder again once their
    /// datagram's record exists (docs/forwarding.md §9). Runs in the calling thread's network
    /// namespace.
    ///
    /// # Errors
    /// The rings or maps cannot be opened, or the thread cannot start.
    pub fn start_holder(&mut self, limits: HoldLimits) -> Result<(), PlaneError> {
        let fd = self
            .fwd
            .program_fd_owned()
            .map_err(|e| plane_error("holder", e))?;
        let h = Holder::start(self.pin_path(), fd, limits).map_err(|e| plane_error("holder", e))?;
        self.holder = Some(Arc::new(h));
        Ok(())
    }

    /// The loaded forwarder.
    pub fn forwarder(&self) -> &Forwarder {
        &self.fwd
    }

    /// The pin directory.
    pub fn pin_path(&self) -> PathBuf {
        self.fwd.options().pin_path.clone()
    }

    fn check_attachments(&self) -> Result<(), PlaneError> {
        check_attachments(&self.fwd.options().pin_path, &self.attached)
    }
}

/// Whether every interface of `attached` (name → ifindex and program id as attached) still
/// carries that program through the link pinned under `pin`: the first half of a forwarder's
/// health, shared by the XDP and AF_XDP planes.
pub fn check_attachments(
    pin: &std::path::Path,
    attached: &BTreeMap<String, (u32, u32)>,
) -> Result<(), PlaneError> {
    if attached.is_empty() {
        return Ok(());
    }
    let status = crate::status(pin).map_err(|e| plane_error("reading attachments", e))?;
    for (iface, &(ifindex, prog_id)) in attached {
        let unhealthy = |reason: String| PlaneError::Unhealthy {
            reason: format!("{iface}: {reason}"),
        };
        let now = crate::ifindex(iface).ok_or_else(|| unhealthy("the interface is gone".into()))?;
        let a = status
            .attachments
            .iter()
            .find(|a| a.iface == *iface)
            .ok_or_else(|| unhealthy("no pinned XDP link (detached?)".into()))?;
        if a.ifindex != now || now != ifindex {
            return Err(unhealthy(format!(
                "the link is on ifindex {}, the interface is ifindex {now}",
                a.ifindex
            )));
        }
        if a.mode == XdpMode::None {
            return Err(unhealthy("the link is detached from the interface".into()));
        }
        if a.prog_id != prog_id {
            return Err(unhealthy(format!(
                "program {} is attached, not ours ({prog_id})",
                a.prog_id
            )));
        }
    }
    Ok(())
}

pub fn plane_error(op: &'static str, e: XdpError) -> PlaneError {
    match e {
        XdpError::NotRoot { what } => PlaneError::NotRoot { what },
        other => PlaneError::failed(op, other),
    }
}

impl DataPlane for XdpPlane {
    fn kind(&self) -> &'static str {
        "xdp"
    }

    fn attach(&mut self, ifaces: &[String]) -> Result<Vec<AttachInfo>, PlaneError> {
        let mut out = Vec::with_capacity(ifaces.len());
        for iface in ifaces {
            let a = self
                .fwd
                .attach(iface)
                .map_err(|e| plane_error("attach", e))?;
            self.attached.insert(iface.clone(), (a.ifindex, a.prog_id));
            out.push(AttachInfo {
                iface: a.iface,
                mode: a.mode.name().to_owned(),
                prog_id: a.prog_id,
                replaced: a.replaced,
                warnings: a.warnings,
            });
        }
        Ok(out)
    }

    fn detach(&mut self, purge: bool) -> Result<(), PlaneError> {
        let pin = self.fwd.options().pin_path.clone();
        for iface in std::mem::take(&mut self.attached).into_keys() {
            match crate::detach(&pin, &iface) {
                Ok(()) | Err(XdpError::NotAttached { .. }) => {}
                Err(e) => return Err(plane_error("detach", e)),
            }
        }
        if purge {
            crate::purge(&pin).map_err(|e| plane_error("purge", e))?;
        }
        Ok(())
    }

    fn commit(&mut self, snap: &ValidSnapshot) -> Result<CommitInfo, PlaneError> {
        let r = self
            .fwd
            .commit(snap)
            .map_err(|e| plane_error("commit", e))?;
        Ok(CommitInfo {
            write: r.write_time,
            grace: r.grace_time,
        })
    }

    fn active_snapshot(&self) -> Result<Option<Snapshot>, PlaneError> {
        self.fwd
            .active_snapshot()
            .map_err(|e| plane_error("reading the active snapshot", e))
    }

    fn check(&self) -> Result<(), PlaneError> {
        self.check_attachments()?;
        self.fwd
            .maps()
            .counters()
            .map_err(|e| PlaneError::Unhealthy {
                reason: format!("maps do not answer: {e}"),
            })?;
        self.fwd.self_test().map_err(|e| PlaneError::Unhealthy {
            reason: e.to_string(),
        })?;
        Ok(())
    }

    fn reader(&self) -> Result<Arc<dyn PlaneReader>, PlaneError> {
        let maps =
            Maps::open(&self.fwd.options().pin_path).map_err(|e| plane_error("open maps", e))?;
        Ok(Arc::new(XdpReader {
            maps,
            holder: self.holder.clone(),
        }))
    }
}

/// Reads the pinned maps through handles of its own.
#[derive(Debug)]
pub struct XdpReader {
    maps: Maps,
    holder: Option<Arc<Holder>>,
}

fn read_err(e: XdpError) -> PlaneError {
    plane_error("read", e)
}

impl PlaneReader for XdpReader {
    fn counters(&self) -> Result<PlaneCounters, PlaneError> {
        let c = self.maps.counters().map_err(read_err)?;
        Ok(PlaneCounters {
            counters: Counter::ALL.iter().map(|&k| (k, c.get(k))).collect(),
            drops: DropReason::ALL.iter().map(|&r| (r, c.drops(r))).collect(),
        })
    }

    fn vip_traffic(&self, id: VipId) -> Result<Traffic, PlaneError> {
        self.maps.vip_traffic(id.0).map_err(read_err)
    }

    fn real_traffic(&self, id: RealId) -> Result<Traffic, PlaneError> {
        self.maps.real_traffic(id.0).map_err(read_err)
    }

    fn conntrack_lookup(&self, flow: &FlowKey) -> Result<Vec<CtEntry>, PlaneError> {
        self.maps.conntrack_lookup(flow).map_err(read_err)
    }

    fn conntrack_scan(
        &self,
        limit: usize,
        f: &mut dyn FnMut(&FlowKey, &[CtEntry]),
    ) -> Result<usize, PlaneError> {
        self.maps.conntrack_scan(limit, f).map_err(read_err)
    }

    fn clock_ns(&self) -> u64 {
        self.maps.clock_ns()
    }

    fn hold_stats(&self) -> Option<HolderStats> {
        self.holder.as_ref().map(|h| h.stats())
    }
}
