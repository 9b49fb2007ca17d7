//! `BPF_PROG_TEST_RUN` for XDP programs (a thin wrapper of our own, older than aya's).

use std::os::fd::{AsFd, AsRawFd};

/// `struct xdp_md` as the kernel accepts it in `ctx_in` of a test run.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

/// The `test` member of `union bpf_attr`.
#[repr(C)]
#[derive(Debug, Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

const BPF_PROG_TEST_RUN: libc::c_long = 10;

/// What one test run returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRunOutput {
    /// The XDP action.
    pub action: u32,
    /// The frame after the program (length as the kernel reported it).
    pub data: Vec<u8>,
    /// Average nanoseconds per repetition, as the kernel measured it.
    pub duration_ns: u32,
}

/// Options of a test run.
#[derive(Debug, Clone, Copy)]
pub struct TestRunOpts {
    /// Repetitions inside the kernel (0 and 1 both mean one run).
    pub repeat: u32,
    /// `xdp_md.ingress_ifindex` (0 = the loopback device).
    pub ingress_ifindex: u32,
    /// Room for the output frame.
    pub out_capacity: usize,
}

impl Default for TestRunOpts {
    fn default() -> Self {
        Self {
            repeat: 1,
            ingress_ifindex: 0,
            out_capacity: 4096,
        }
    }
}

/// Runs an XDP program once (or `repeat` times) over `frame`.
pub fn run_xdp(prog: impl AsFd, frame: &[u8], opts: TestRunOpts) -> std::io::Result<TestRunOutput> {
    let mut out = vec![0u8; opts.out_capacity.max(frame.len() + 512)];
    let ctx = XdpMd {
        data: 0,
        data_end: u32::try_from(frame.len())
            .map_err(|_| std::io::Error::other("frame too large"))?,
        ingress_ifindex: opts.ingress_ifindex,
        ..XdpMd::default()
    };
    let mut attr = TestRunAttr {
        prog_fd: prog.as_fd().as_raw_fd() as u32,
        data_size_in: ctx.data_end,
        data_size_out: out.len() as u32,
        data_in: frame.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat: opts.repeat,
        ctx_size_in: if opts.ingress_ifindex != 0 {
            size_of::<XdpMd>() as u32
        } else {
            0
        },
        ctx_in: if opts.ingress_ifindex != 0 {
            &ctx as *const XdpMd as u64
        } else {
            0
        },
        ..TestRunAttr::default()
    };
    // SAFETY: `attr` is a valid `bpf_attr.test` for BPF_PROG_TEST_RUN; the kernel reads
    // `data_size_in` bytes from `frame`, writes at most `data_size_out` bytes into `out` and reads
    // `ctx_size_in` bytes from `ctx`; all three outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &mut attr as *mut TestRunAttr,
            size_of::<TestRunAttr>(),
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    out.truncate(attr.data_size_out as usize);
    Ok(TestRunOutput {
        action: attr.retval,
        data: out,
        duration_ns: attr.duration,
    })
}

/// `BPF_F_TEST_XDP_LIVE_FRAMES`: the kernel runs the program on real frames from a page pool
/// and really transmits what it sends (XDP_TX, XDP_REDIRECT) — a packet generator.
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// Runs an XDP program `repeat` times in live-frames mode: each run gets `frame` in a fresh
/// (or recycled) page, and what the program redirects is sent for real, flushed every
/// `batch_size` frames (0 = the kernel's default, 64). `ingress_ifindex` (in the calling
/// thread's network namespace) is the device the frames appear to arrive on, which is also
/// where `bpf_redirect` looks interface indexes up. Returns the kernel's mean time per run.
pub fn run_xdp_live(
    prog: impl AsFd,
    frame: &[u8],
    repeat: u32,
    batch_size: u32,
    ingress_ifindex: u32,
) -> std::io::Result<u32> {
    let ctx = XdpMd {
        data: 0,
        data_end: u32::try_from(frame.len())
            .map_err(|_| std::io::Error::other("frame too large"))?,
        ingress_ifindex,
        ..XdpMd::default()
    };
    let mut attr = TestRunAttr {
        prog_fd: prog.as_fd().as_raw_fd() as u32,
        data_size_in: ctx.data_end,
        data_in: frame.as_ptr() as u64,
        repeat,
        ctx_size_in: size_of::<XdpMd>() as u32,
        ctx_in: &ctx as *const XdpMd as u64,
        flags: BPF_F_TEST_XDP_LIVE_FRAMES,
        batch_size,
        ..TestRunAttr::default()
    };
    // SAFETY: `attr` is a valid `bpf_attr.test` for BPF_PROG_TEST_RUN in live-frames mode (no
    // output buffers); the kernel reads `data_size_in` bytes from `frame` and `ctx_size_in`
    // bytes from `ctx`, both of which outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &mut attr as *mut TestRunAttr,
            size_of::<TestRunAttr>(),
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(attr.duration)
}
