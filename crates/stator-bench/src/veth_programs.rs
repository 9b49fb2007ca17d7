//! The programs of the end-to-end veth benchmark (`bpf/stator_veth.bpf.c`, `stator bench
//! veth`): a live-frames packet generator, a counting sink, and the plain-forwarding baseline
//! the forwarder is compared with. Nothing is pinned but the links, which the caller removes.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use aya::maps::{Array, DevMapHash, PerCpuArray};
use aya::programs::Xdp;
use stator_abi::{STATOR_VSINK_BYTES, STATOR_VSINK_PACKETS, STATOR_VSINK_TUNNELLED};
use stator_xdp::{Attachment, Result, UnpinnedObject, XdpError, objects};

use crate::programs::{bench_frame, reset_counter};

/// What the sink counted, summed across CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkCounts {
    /// Frames received.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Frames that were IPv4 GRE / IPIP / UDP: what the forwarder sends.
    pub tunnelled: u64,
}

impl SinkCounts {
    /// `self - earlier`.
    pub fn since(&self, earlier: &SinkCounts) -> SinkCounts {
        SinkCounts {
            packets: self.packets.wrapping_sub(earlier.packets),
            bytes: self.bytes.wrapping_sub(earlier.bytes),
            tunnelled: self.tunnelled.wrapping_sub(earlier.tunnelled),
        }
    }
}

/// `stator_vgen`, `stator_vsink` and `stator_vroute`, loaded with their (unpinned) maps.
#[derive(Debug)]
pub struct VethBench {
    object: UnpinnedObject,
}

fn map_err(op: &'static str) -> impl Fn(aya::maps::MapError) -> XdpError {
    move |e| XdpError::map("stator_veth", op, e)
}

impl VethBench {
    /// Loads the three programs.
    pub fn load() -> Result<Self> {
        let object = UnpinnedObject::load(
            objects::VETH_BENCH,
            "stator_veth",
            &["stator_vgen", "stator_vsink", "stator_vroute"],
        )?;
        Ok(Self { object })
    }

    fn map(&mut self, name: &'static str) -> Result<&mut aya::maps::Map> {
        self.object.map_mut(name)
    }

    /// The generator's frame, sent to interface `target_ifindex` (in the generator's
    /// namespace); with `nflows > 1`, frame `i` adds `i % nflows` to the big-endian 32-bit
    /// word at `flow_off`. Resets the frame counter.
    pub fn set_frame(
        &mut self,
        frame: &[u8],
        nflows: u32,
        flow_off: u32,
        target_ifindex: u32,
    ) -> Result<()> {
        let f = bench_frame("generator", frame, 14, nflows, flow_off)?;
        self.object.set_bench_frame("stator_vgframe", f)?;
        Array::<_, u32>::try_from(self.map("stator_vgtarget")?)
            .map_err(map_err("open stator_vgtarget"))?
            .set(0, target_ifindex, 0)
            .map_err(map_err("set the target"))?;
        reset_counter(&mut self.object, "stator_veth", "stator_vgiter")
    }

    /// A duplicate of the generator's fd: run it with
    /// [`run_xdp_live`](stator_xdp::testrun::run_xdp_live) from a thread in the generator's
    /// namespace (`ingress_ifindex` and the redirect target are looked up there).
    pub fn generator(&self) -> Result<OwnedFd> {
        self.object
            .program_fd("stator_vgen")
            .expect("loaded in VethBench::load")
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| XdpError::io("duplicating the generator's fd", e))
    }

    /// Attaches the generator in native mode to `iface` (in the calling thread's namespace, an
    /// interface that carries no traffic) for as long as this stays loaded; no link is pinned.
    ///
    /// This is for speed, not for traffic: a program attached to a device stays in the kernel's
    /// XDP dispatcher, so `BPF_PROG_TEST_RUN` no longer adds it there and removes it again around
    /// every call — an update that waited ~20 ms per call on Linux 6.18 and serialised the calls
    /// of concurrent threads (paced chunks of a millisecond's frames reached 0.02 of 0.3 Mpps;
    /// attached, 0.300).
    pub fn keep_generator_dispatched(&mut self, iface: &str) -> Result<()> {
        let prog: &mut Xdp = self
            .object
            .program_mut("stator_vgen")
            .expect("loaded in VethBench::load");
        prog.attach(iface, aya::programs::xdp::XdpMode::Driver)
            .map(drop)
            .map_err(|e| {
                XdpError::io(
                    format!("attaching the generator to {iface} (native mode)"),
                    std::io::Error::other(e.to_string()),
                )
            })
    }

    /// Attaches the sink to `iface` (native mode, calling thread's namespace), its link pinned
    /// as `<pin_path>/link_<iface>` (an existing link there gets the sink instead).
    pub fn attach_sink(&mut self, pin_path: &Path, iface: &str) -> Result<Attachment> {
        self.object.attach("stator_vsink", pin_path, iface)
    }

    /// Attaches the plain-forwarding baseline to `iface`, like [`VethBench::attach_sink`].
    pub fn attach_route(&mut self, pin_path: &Path, iface: &str) -> Result<Attachment> {
        self.object.attach("stator_vroute", pin_path, iface)
    }

    /// Lets the baseline redirect to interface `ifindex`.
    pub fn add_route_port(&mut self, ifindex: u32) -> Result<()> {
        DevMapHash::try_from(self.map("stator_vroutetx")?)
            .map_err(map_err("open stator_vroutetx"))?
            .insert(ifindex, ifindex, None, 0)
            .map_err(|e| XdpError::map("stator_vroutetx", "add a redirect target", e))
    }

    /// What the sink counted so far, summed across CPUs.
    pub fn sink(&mut self) -> Result<SinkCounts> {
        let m = PerCpuArray::<_, u64>::try_from(self.map("stator_vsinkcnt")?)
            .map_err(map_err("open stator_vsinkcnt"))?;
        let sum = |i: u32| -> Result<u64> {
            Ok(m.get(&i, 0)
                .map_err(map_err("read the sink counters"))?
                .iter()
                .copied()
                .fold(0u64, u64::wrapping_add))
        };
        Ok(SinkCounts {
            packets: sum(STATOR_VSINK_PACKETS)?,
            bytes: sum(STATOR_VSINK_BYTES)?,
            tunnelled: sum(STATOR_VSINK_TUNNELLED)?,
        })
    }
}
