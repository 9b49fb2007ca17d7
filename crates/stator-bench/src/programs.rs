//! The programs `stator bench xdp` measures beside the forwarder under BPF_PROG_TEST_RUN, the
//! two ways `docs/xdp.md` describes (the objects are stator-xdp's, loaded through
//! [`UnpinnedObject`]).
//!
//! - **Per call**: one run per syscall (`repeat = 1`), the frame supplied fresh each time;
//!   `duration` then includes the kernel's fixed per-call overhead.
//! - **Kernel repeat**: the kernel runs [`BenchWrapper`]'s program `repeat` times on one
//!   buffer; the wrapper restores the original frame (stripping what the measured program
//!   prepended), optionally varies the flow, and tail-calls the program under measurement.
//!
//! Baselines ([`Baselines`]: XDP_PASS, MAC swap + XDP_TX, and MAC swap + XDP_TX after growing
//! the head as encapsulation does) run the same ways, so differences are what the forwarder
//! adds.

use aya::maps::{PerCpuArray, PerCpuValues, ProgramArray};
pub use aya::programs::ProgramFd;
use aya::util::nr_cpus;
use stator_abi::{BenchFrame, STATOR_BENCH_FRAME_MAX};
use stator_xdp::testrun::{TestRunOpts, TestRunOutput, run_xdp};
use stator_xdp::{Result, UnpinnedObject, XdpError, objects};

/// The baseline programs.
#[derive(Debug)]
pub struct Baselines {
    object: UnpinnedObject,
}

impl Baselines {
    /// Loads `stator_pass`, `stator_swap_tx` and `stator_grow_tx`.
    pub fn load() -> Result<Self> {
        let object = UnpinnedObject::load(
            objects::PASS,
            "stator_pass",
            &["stator_pass", "stator_swap_tx", "stator_grow_tx"],
        )?;
        Ok(Self { object })
    }

    /// XDP_PASS and nothing else.
    pub fn pass(&self) -> &ProgramFd {
        self.object
            .program_fd("stator_pass")
            .expect("loaded in Baselines::load")
    }

    /// Swaps the Ethernet addresses and returns XDP_TX.
    pub fn swap_tx(&self) -> &ProgramFd {
        self.object
            .program_fd("stator_swap_tx")
            .expect("loaded in Baselines::load")
    }

    /// Grows the head by 24 bytes (an outer IPv4 + GRE header's room), writes the Ethernet
    /// header there with the addresses swapped, and returns XDP_TX: the floor of encapsulation.
    pub fn grow_tx(&self) -> &ProgramFd {
        self.object
            .program_fd("stator_grow_tx")
            .expect("loaded in Baselines::load")
    }
}

/// The restore-and-tail-call wrapper for kernel-repeat measurements.
#[derive(Debug)]
pub struct BenchWrapper {
    object: UnpinnedObject,
}

fn wrap_err(op: &'static str) -> impl Fn(aya::maps::MapError) -> XdpError {
    move |e| XdpError::map("stator_bench", op, e)
}

impl BenchWrapper {
    /// Loads `stator_bench` with fresh (unpinned) maps.
    pub fn load() -> Result<Self> {
        let object = UnpinnedObject::load(objects::BENCH, "stator_bench", &["stator_bench"])?;
        Ok(Self { object })
    }

    /// The program to measure (tail-called after every restore).
    pub fn set_target(&mut self, prog: &ProgramFd) -> Result<()> {
        ProgramArray::try_from(self.object.map_mut("stator_bprogs")?)
            .map_err(wrap_err("open stator_bprogs"))?
            .set(0, prog, 0)
            .map_err(wrap_err("set the target program"))
    }

    /// The original frame; with `nflows > 1`, iteration `i` adds `i % nflows` to the
    /// big-endian 32-bit word at `flow_off` (e.g. the source address). Resets the iteration
    /// counter.
    pub fn set_frame(&mut self, frame: &[u8], nflows: u32, flow_off: u32) -> Result<()> {
        let f = bench_frame("bench", frame, 1, nflows, flow_off)?;
        self.object.set_bench_frame("stator_bframe", f)?;
        reset_counter(&mut self.object, "stator_bench", "stator_biter")
    }

    /// Runs the wrapper `repeat` times in the kernel over the frame (the kernel's `duration`
    /// is the mean per iteration).
    pub fn run(&self, frame: &[u8], repeat: u32, ingress_ifindex: u32) -> Result<TestRunOutput> {
        let fd = self
            .object
            .program_fd("stator_bench")
            .expect("loaded in BenchWrapper::load");
        run_xdp(
            fd,
            frame,
            TestRunOpts {
                repeat,
                ingress_ifindex,
                ..TestRunOpts::default()
            },
        )
        .map_err(|e| XdpError::io("BPF_PROG_TEST_RUN (bench wrapper)", e))
    }
}

/// Zeroes element 0 of per-CPU array `map` of `object` (called `name` in errors) on every
/// CPU: a frame or iteration counter.
pub(crate) fn reset_counter(
    object: &mut UnpinnedObject,
    name: &'static str,
    map: &'static str,
) -> Result<()> {
    let cpus = nr_cpus().map_err(|(_, e)| XdpError::io("counting CPUs", e))?;
    let zeros =
        PerCpuValues::try_from(vec![0u64; cpus]).map_err(|e| XdpError::io("per-CPU values", e))?;
    PerCpuArray::<_, u64>::try_from(object.map_mut(map)?)
        .map_err(|e| XdpError::map(name, "open a counter map", e))?
        .set(0, zeros, 0)
        .map_err(|e| XdpError::map(name, "reset the frame counter", e))
}

/// The `BenchFrame` record of `frame` (a `what` frame of at least `min` bytes), whose
/// iteration `i` adds `i % nflows` to the big-endian word at `flow_off`; refuses a frame that
/// does not fit the record or a flow word beyond it.
pub(crate) fn bench_frame(
    what: &str,
    frame: &[u8],
    min: usize,
    nflows: u32,
    flow_off: u32,
) -> Result<BenchFrame> {
    if frame.len() < min || frame.len() > STATOR_BENCH_FRAME_MAX as usize {
        return Err(XdpError::InvalidOptions {
            reason: format!(
                "{what} frame of {} bytes ({min}..={STATOR_BENCH_FRAME_MAX})",
                frame.len()
            ),
        });
    }
    if nflows > 1 && flow_off as usize + 4 > frame.len() {
        return Err(XdpError::InvalidOptions {
            reason: format!("flow word at {flow_off} beyond the frame"),
        });
    }
    let mut f = BenchFrame {
        len: frame.len() as u32,
        nflows,
        flow_off,
        ..BenchFrame::default()
    };
    f.bytes[..frame.len()].copy_from_slice(frame);
    Ok(f)
}
