//! The programs of the end-to-end veth benchmark (`bpf/stator_veth.bpf.c`, `stator bench
//! veth`): a live-frames packet generator, a counting sink, and the plain-forwarding baseline
//! the forwarder is compared with. Nothing is pinned but the links, which the caller removes.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use aya::Ebpf;
use aya::maps::{Array, DevMapHash, PerCpuArray, PerCpuValues};
use aya::programs::Xdp;
use aya::util::nr_cpus;
use stator_abi::{BenchFrame, STATOR_VSINK_BYTES, STATOR_VSINK_PACKETS, STATOR_VSINK_TUNNELLED};

use crate::attach::{Attachment, attach_loaded};
use crate::error::{Result, XdpError};
use crate::forwarder::load_unpinned;
use crate::objects;
use crate::options::AttachMode;
use crate::sys::Rec;

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
pub struct VethBench {
    ebpf: Ebpf,
}

impl std::fmt::Debug for VethBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VethBench").finish_non_exhaustive()
    }
}

fn map_err(op: &'static str) -> impl Fn(aya::maps::MapError) -> XdpError {
    move |e| XdpError::map("stator_veth", op, e)
}

impl VethBench {
    /// Loads the three programs.
    pub fn load() -> Result<Self> {
        let ebpf = load_unpinned(
            objects::VETH_BENCH,
            "stator_veth",
            &["stator_vgen", "stator_vsink", "stator_vroute"],
        )?;
        Ok(Self { ebpf })
    }

    fn map(&mut self, name: &'static str) -> Result<&mut aya::maps::Map> {
        self.ebpf.map_mut(name).ok_or_else(|| XdpError::Load {
            object: "stator_veth".into(),
            source: format!("map {name} missing").into(),
        })
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
        let f = crate::bench::bench_frame("generator", frame, 14, nflows, flow_off)?;
        Array::<_, Rec<BenchFrame>>::try_from(self.map("stator_vgframe")?)
            .map_err(map_err("open stator_vgframe"))?
            .set(0, Rec(f), 0)
            .map_err(map_err("set the frame"))?;
        Array::<_, u32>::try_from(self.map("stator_vgtarget")?)
            .map_err(map_err("open stator_vgtarget"))?
            .set(0, target_ifindex, 0)
            .map_err(map_err("set the target"))?;
        let cpus = nr_cpus().map_err(|(_, e)| XdpError::io("counting CPUs", e))?;
        let zeros = PerCpuValues::try_from(vec![0u64; cpus])
            .map_err(|e| XdpError::io("per-CPU values", e))?;
        PerCpuArray::<_, u64>::try_from(self.map("stator_vgiter")?)
            .map_err(map_err("open stator_vgiter"))?
            .set(0, zeros, 0)
            .map_err(map_err("reset the frame counter"))
    }

    /// A duplicate of the generator's fd: run it with
    /// [`run_xdp_live`](crate::testrun::run_xdp_live) from a thread in the generator's
    /// namespace (`ingress_ifindex` and the redirect target are looked up there).
    pub fn generator(&self) -> Result<OwnedFd> {
        let prog: &Xdp = self
            .ebpf
            .program("stator_vgen")
            .and_then(|p| p.try_into().ok())
            .expect("loaded in VethBench::load");
        prog.fd()
            .map_err(|e| XdpError::io("the generator's fd", std::io::Error::other(e.to_string())))?
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
            .ebpf
            .program_mut("stator_vgen")
            .and_then(|p| p.try_into().ok())
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

    fn attach(
        &mut self,
        program: &'static str,
        pin_path: &Path,
        iface: &str,
    ) -> Result<Attachment> {
        attach_loaded(
            &mut self.ebpf,
            program,
            pin_path,
            iface,
            AttachMode::Native,
            |_| Vec::new(),
        )
    }

    /// Attaches the sink to `iface` (native mode, calling thread's namespace), its link pinned
    /// as `<pin_path>/link_<iface>` (an existing link there gets the sink instead).
    pub fn attach_sink(&mut self, pin_path: &Path, iface: &str) -> Result<Attachment> {
        self.attach("stator_vsink", pin_path, iface)
    }

    /// Attaches the plain-forwarding baseline to `iface`, like [`VethBench::attach_sink`].
    pub fn attach_route(&mut self, pin_path: &Path, iface: &str) -> Result<Attachment> {
        self.attach("stator_vroute", pin_path, iface)
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
