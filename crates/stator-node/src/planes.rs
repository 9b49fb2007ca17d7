//! The data plane `dataplane.mode` names — XDP ([`XdpPlane`]), AF_XDP ([`AfxdpPlane`]) or none
//! ([`NoPlane`]) — loaded but not attached, and the configuration's `[dataplane]` and
//! `[fragments]` translated into each plane's own options. The planes implement
//! [`DataPlane`] in their own crates; what a configuration means for them is decided here, where
//! the node is put together, so that the controller builds no data plane (no aya, no BPF
//! objects) and runs whichever it is handed.

use stator_afxdp::{AfxdpConfig, AfxdpPlane, BindMode, RingSizes, Threading, UmemConfig};
use stator_config::{
    AfxdpBindMode, AfxdpThreading, Config, ConntrackMode as CfgConntrack, DataplaneMode,
    XdpMode as CfgXdpMode,
};
use stator_core::HoldLimits;
use stator_plane::DataPlane;
use stator_plane::noplane::NoPlane;
use stator_xdp::{AttachMode, ConntrackMode, XdpOptions, XdpPlane};

use stator_control::ControlError;

/// The data plane `dataplane.mode` names, loaded (not attached).
///
/// # Errors
/// The plane's loader failed (not root, pin path not on bpffs, incompatible pins, verifier).
pub fn load(config: &Config) -> Result<Box<dyn DataPlane>, ControlError> {
    match config.dataplane.mode {
        DataplaneMode::Xdp => {
            let mut p = XdpPlane::load(&xdp_options(config))?;
            p.start_holder(hold_limits(config))?;
            Ok(Box::new(p))
        }
        DataplaneMode::Afxdp => {
            let (xdp, cfg) = afxdp_options(config);
            Ok(Box::new(AfxdpPlane::load(&xdp, cfg)?))
        }
        DataplaneMode::None => Ok(Box::new(NoPlane::default())),
    }
}

/// The XDP loader's options for a configuration's `[dataplane]`.
pub fn xdp_options(config: &Config) -> XdpOptions {
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

/// The fragment holder's bounds for a configuration's `[fragments]`.
pub fn hold_limits(config: &Config) -> HoldLimits {
    let f = &config.fragments;
    HoldLimits {
        max_frames: f.hold_frames as usize,
        max_bytes: f.hold_bytes as usize,
        timeout_ns: u64::try_from(f.timeout.as_nanos()).unwrap_or(u64::MAX),
    }
}

/// The AF_XDP loader's options for a configuration's `[dataplane]` and `[dataplane.afxdp]`:
/// the kernel half's (the XDP plane's) and the runtime's.
pub fn afxdp_options(config: &Config) -> (XdpOptions, AfxdpConfig) {
    let d = &config.dataplane;
    let a = &d.afxdp;
    let cfg = AfxdpConfig {
        threading: match a.threading {
            AfxdpThreading::Steered => Threading::Steered,
            AfxdpThreading::RunToCompletion => Threading::RunToCompletion,
        },
        packet_threads: a.packet_threads as usize,
        cpus: a.cpus.iter().map(|&c| c as usize).collect(),
        pin: a.pin,
        umem: UmemConfig {
            frames: a.frames,
            frame_size: a.frame_size,
            ..UmemConfig::default()
        },
        rings: RingSizes::all(a.ring_size),
        batch: a.batch,
        flush_timeout: a.flush_timeout,
        queue_depth: a.queue_depth as usize,
        queues: a.queues,
        bind_mode: match a.bind_mode {
            AfxdpBindMode::Auto => BindMode::Auto,
            AfxdpBindMode::Copy => BindMode::Copy,
            AfxdpBindMode::Zerocopy => BindMode::ZeroCopy,
        },
        spin: a.busy_poll,
        ct_capacity: d.conntrack_entries as usize,
        ct_seed: rand::random(),
        fib_cache: d.next_hop_cache,
        hold: hold_limits(config),
    };
    (xdp_options(config), cfg)
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
            let o = xdp_options(&dataplane(line));
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
