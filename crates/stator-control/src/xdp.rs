//! The XDP forwarder (`stator-xdp`) as a [`DataPlane`].
//!
//! The forwarder's health, checked every second by the node, is three things: every
//! configured interface carries *our* program through our pinned link (link pinned, its
//! interface is the interface of that name now, the kernel reports an XDP program attached,
//! and its id is the id we attached), the maps answer (the counters are read), and the
//! self-test probe through `BPF_PROG_TEST_RUN` gets the expected answer.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use stator_config::{Config, ConntrackMode as CfgConntrack, XdpMode as CfgXdpMode};
use stator_core::HoldLimits;
use stator_core::{
    Counter, CtEntry, DropReason, FlowKey, RealId, Snapshot, Traffic, ValidSnapshot, VipId,
};
use stator_xdp::{
    AttachMode, ConntrackMode, Forwarder, Holder, HolderStats, Maps, XdpError, XdpMode, XdpOptions,
};

use stator_plane::PlaneError;
use stator_plane::{AttachInfo, CommitInfo, DataPlane, PlaneCounters, PlaneReader};

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
    /// The loader's options for a configuration's `[dataplane]`.
    pub fn options(config: &Config) -> XdpOptions {
        let d = &config.dataplane;
        XdpOptions {
            pin_path: d.pin_path.clone(),
            conntrack: match d.conntrack {
                CfgConntrack::Percpu | CfgConntrack::PercpuLru => ConntrackMode::PerCpu,
                CfgConntrack::Shared => ConntrackMode::Shared,
            },
            ct_entries: d.conntrack_entries,
            v4_table: d.conntrack != CfgConntrack::PercpuLru,
            slots_per_gen: d.slots_per_generation,
            attach_mode: match d.xdp_mode {
                CfgXdpMode::Auto => AttachMode::Auto,
                CfgXdpMode::Native => AttachMode::Native,
                CfgXdpMode::Generic => AttachMode::Generic,
            },
            fib_cache: d.next_hop_cache,
            frag_entries: config.fragments.table_entries,
            // a ring is a power of two of pages
            hold_ring: config
                .fragments
                .hold_bytes
                .checked_next_power_of_two()
                .unwrap_or(1 << 31),
        }
    }

    /// Loads the forwarder (reusing maps pinned by an earlier run) and makes sure a
    /// configuration is active (an empty one if nothing was ever committed). Attaches nothing.
    ///
    /// # Errors
    /// The loader's error (not root, pin path not on bpffs, incompatible pins, verifier).
    pub fn load(opts: &XdpOptions) -> Result<Self, PlaneError> {
        let mut fwd = Forwarder::load(opts).map_err(|e| xdp_err("load", e))?;
        fwd.ensure_programmed()
            .map_err(|e| xdp_err("initial commit", e))?;
        Ok(Self {
            fwd,
            attached: BTreeMap::new(),
            holder: None,
        })
    }

    /// The holder's bounds for a configuration's `[fragments]`.
    pub fn hold_limits(config: &Config) -> HoldLimits {
        let f = &config.fragments;
        HoldLimits {
            max_frames: f.hold_frames as usize,
            max_bytes: f.hold_bytes as usize,
            timeout_ns: u64::try_from(f.timeout.as_nanos()).unwrap_or(u64::MAX),
        }
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
            .map_err(|e| xdp_err("holder", e))?;
        let h = Holder::start(self.pin_path(), fd, limits).map_err(|e| xdp_err("holder", e))?;
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
pub(crate) fn check_attachments(
    pin: &std::path::Path,
    attached: &BTreeMap<String, (u32, u32)>,
) -> Result<(), PlaneError> {
    if attached.is_empty() {
        return Ok(());
    }
    let status = stator_xdp::status(pin).map_err(|e| xdp_err("reading attachments", e))?;
    for (iface, &(ifindex, prog_id)) in attached {
        let unhealthy = |reason: String| PlaneError::Unhealthy {
            reason: format!("{iface}: {reason}"),
        };
        let now =
            stator_xdp::ifindex(iface).ok_or_else(|| unhealthy("the interface is gone".into()))?;
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

pub(crate) fn xdp_err(op: &'static str, e: XdpError) -> PlaneError {
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
            let a = self.fwd.attach(iface).map_err(|e| xdp_err("attach", e))?;
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
            match stator_xdp::detach(&pin, &iface) {
                Ok(()) | Err(XdpError::NotAttached { .. }) => {}
                Err(e) => return Err(xdp_err("detach", e)),
            }
        }
        if purge {
            stator_xdp::purge(&pin).map_err(|e| xdp_err("purge", e))?;
        }
        Ok(())
    }

    fn commit(&mut self, snap: &ValidSnapshot) -> Result<CommitInfo, PlaneError> {
        let r = self.fwd.commit(snap).map_err(|e| xdp_err("commit", e))?;
        Ok(CommitInfo {
            write: r.write_time,
            grace: r.grace_time,
        })
    }

    fn active_snapshot(&self) -> Result<Option<Snapshot>, PlaneError> {
        self.fwd
            .active_snapshot()
            .map_err(|e| xdp_err("reading the active snapshot", e))
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
        let maps = Maps::open(&self.fwd.options().pin_path).map_err(|e| xdp_err("open maps", e))?;
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
    xdp_err("read", e)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn dataplane(conntrack: &str) -> Config {
        let text = format!(
            "[node]\nname = \"n\"\naddress_v4 = \"10.0.0.10\"\n\n[dataplane]\n\
             interfaces = [\"eth0\"]\n{conntrack}"
        );
        stator_config::from_toml_str("t.toml", &text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_conntrack_setting_picks_the_build_and_the_ipv4_table() {
        for (line, mode, v4_table) in [
            ("", ConntrackMode::PerCpu, true),
            ("conntrack = \"percpu\"", ConntrackMode::PerCpu, true),
            ("conntrack = \"percpu-lru\"", ConntrackMode::PerCpu, false),
            ("conntrack = \"shared\"", ConntrackMode::Shared, true),
        ] {
            let o = XdpPlane::options(&dataplane(line));
            assert_eq!((o.conntrack, o.v4_table), (mode, v4_table), "{line}");
        }
        let err = stator_config::from_toml_str(
            "t.toml",
            "[node]\nname = \"n\"\n[dataplane]\ninterfaces = [\"eth0\"]\nconntrack = \"lru\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("dataplane.conntrack") && err.contains("percpu-lru"),
            "{err}"
        );
    }
}
