//! The same forwarder on the ordinary kernel stack: frames read from an `AF_PACKET` socket,
//! decided by stator-core, written to an `AF_PACKET` socket — the paper's "vanilla Linux
//! network stack" mode (§5.2.1, Figure 8), kept as the benchmark's rival to kernel bypass.
//!
//! One thread; `recvmmsg` and `sendmmsg` move batches of up to 64 frames, each received into
//! a buffer with XDP's headroom in front so the forwarder encapsulates in place, as it does in
//! a UMEM frame. Next hops come from the kernel through `stator_fibq` with the same cache as
//! the AF_XDP packet threads. Not a data plane `stator run` offers: a baseline.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use stator_core::{
    Action, CompiledSnapshot, Forwarder, ForwarderConfig, SlicePacketBuf, XDP_HEADROOM,
};

use crate::error::AfxdpError;
use crate::fib::KernelFib;
use crate::sys;

const BATCH: usize = 64;
const BUF: usize = XDP_HEADROOM + 2048;

/// Counts of a run.
#[derive(Debug, Default)]
pub struct PacketSocketStats {
    /// Frames received.
    pub rx: AtomicU64,
    /// Frames sent.
    pub tx: AtomicU64,
    /// Nanoseconds deciding frames (`process`, from a clock read per batch; the system calls
    /// excluded).
    pub busy_ns: AtomicU64,
    /// Set once the sockets are open and bound: frames sent from then on are seen.
    pub ready: AtomicBool,
}

/// An `AF_PACKET` raw socket bound to one interface (of the calling thread's namespace).
#[derive(Debug)]
struct PacketSock {
    fd: OwnedFd,
}

impl PacketSock {
    fn open(ifindex: u32) -> Result<Self, AfxdpError> {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: socket() has no memory arguments; the result is checked and owned.
        let fd = unsafe {
            let fd = libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(proto),
            );
            if fd < 0 {
                return Err(AfxdpError::io(
                    "AF_PACKET socket",
                    std::io::Error::last_os_error(),
                ));
            }
            OwnedFd::from_raw_fd(fd)
        };
        // SAFETY: a zeroed sockaddr_ll is valid; bind and setsockopt read live locals of the
        // sizes passed.
        unsafe {
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto;
            sll.sll_ifindex = ifindex as i32;
            if libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as u32,
            ) != 0
            {
                return Err(AfxdpError::io(
                    "binding AF_PACKET",
                    std::io::Error::last_os_error(),
                ));
            }
            let one: libc::c_int = 1;
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_IGNORE_OUTGOING,
                (&one as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as u32,
            );
            let size: libc::c_int = 16 << 20;
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&size as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as u32,
            );
            // a read that waits at most 10 ms, so the loop sees `stop`
            let tv = libc::timeval {
                tv_sec: 0,
                tv_usec: 10_000,
            };
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as u32,
            );
        }
        Ok(Self { fd })
    }

    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// `recvmmsg` into `bufs` at offset `XDP_HEADROOM`; returns the lengths received.
fn recv_batch(fd: RawFd, bufs: &mut [Vec<u8>], lens: &mut Vec<usize>) {
    lens.clear();
    let mut iovs: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b[XDP_HEADROOM..].as_mut_ptr().cast(),
            iov_len: BUF - XDP_HEADROOM,
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = iovs
        .iter_mut()
        .map(|iov| {
            // SAFETY: a zeroed mmsghdr is valid (null pointers, zero lengths); it is pointed
            // at one live iovec over a live buffer below.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    // SAFETY: `msgs` and everything it points at live for the call; the kernel writes at most
    // each iovec's length into its buffer.
    let n = unsafe {
        libc::recvmmsg(
            fd,
            msgs.as_mut_ptr(),
            msgs.len() as u32,
            libc::MSG_WAITFORONE,
            std::ptr::null_mut(),
        )
    };
    for m in msgs.iter().take(n.max(0) as usize) {
        lens.push(m.msg_len as usize);
    }
}

/// `sendmmsg` of `frames` (slices of the buffers).
fn send_batch(fd: RawFd, frames: &[(*const u8, usize)]) -> usize {
    if frames.is_empty() {
        return 0;
    }
    let mut iovs: Vec<libc::iovec> = frames
        .iter()
        .map(|&(p, n)| libc::iovec {
            iov_base: p as *mut libc::c_void,
            iov_len: n,
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = iovs
        .iter_mut()
        .map(|iov| {
            // SAFETY: a zeroed mmsghdr is valid.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    // SAFETY: `msgs` points at iovecs over frames that live for the call; the kernel only
    // reads them.
    let n = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), msgs.len() as u32, 0) };
    n.max(0) as usize
}

/// Runs the forwarder over `AF_PACKET` sockets until `stop`: frames arriving on `ingress` are
/// decided with `snap`, and what leaves goes out of its egress (`ingress` or one of
/// `egress`). `fib_prog` is a `stator_fibq` descriptor.
#[allow(clippy::too_many_arguments)] // a benchmark rival's knobs
pub fn run(
    ingress: u32,
    egress: &[u32],
    snap: Arc<CompiledSnapshot>,
    fwd: Arc<Mutex<Forwarder>>,
    fib_prog: OwnedFd,
    fib_cache_ns: u64,
    cpu: Option<usize>,
    stop: &AtomicBool,
    stats: &PacketSocketStats,
) -> Result<(), AfxdpError> {
    if let Some(c) = cpu {
        let _ = sys::pin_to_cpu(c);
    }
    let rx = PacketSock::open(ingress)?;
    let mut tx: Vec<(u32, PacketSock)> = vec![(ingress, PacketSock::open(ingress)?)];
    for &e in egress {
        tx.push((e, PacketSock::open(e)?));
    }
    let mut ports = vec![ingress];
    ports.extend_from_slice(egress);
    let fib = KernelFib::new(fib_prog, fib_cache_ns, ports);
    stats.ready.store(true, Ordering::Release);
    let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; BUF]).collect();
    let mut lens = Vec::with_capacity(BATCH);
    let mut out: Vec<Vec<(*const u8, usize)>> = vec![Vec::new(); tx.len()];
    while !stop.load(Ordering::Relaxed) {
        recv_batch(rx.raw(), &mut bufs, &mut lens);
        if lens.is_empty() {
            continue;
        }
        let t0 = sys::thread_cpu_ns();
        let now = sys::monotonic_coarse_ns();
        fib.set_now(now);
        {
            let mut f = fwd.lock().unwrap_or_else(|p| p.into_inner());
            for (b, &len) in bufs.iter_mut().zip(&lens) {
                let mut p = SlicePacketBuf::new(b, XDP_HEADROOM, len);
                let v = f.process(&snap, now, 0, ingress, &fib, &mut p);
                let port = match v.action {
                    Action::Tx => Some(ingress),
                    Action::Redirect { ifindex } => Some(ifindex),
                    _ => None,
                };
                if let Some(i) = port.and_then(|port| tx.iter().position(|(x, _)| *x == port)) {
                    let (h, l) = (p.head(), p.len());
                    out[i].push((b[h..].as_ptr(), l));
                }
            }
        }
        let busy = sys::thread_cpu_ns().saturating_sub(t0);
        let mut sent = 0;
        for (i, (_, s)) in tx.iter().enumerate() {
            sent += send_batch(s.raw(), &out[i]);
            out[i].clear();
        }
        stats.rx.fetch_add(lens.len() as u64, Ordering::Relaxed);
        stats.tx.fetch_add(sent as u64, Ordering::Relaxed);
        stats.busy_ns.fetch_add(busy, Ordering::Relaxed);
    }
    Ok(())
}

/// A single-CPU forwarder for [`run`], with a table of `ct_capacity` entries.
pub fn forwarder(ct_capacity: usize) -> Arc<Mutex<Forwarder>> {
    Arc::new(Mutex::new(Forwarder::new(ForwarderConfig {
        cpus: 1,
        ct_capacity,
        ..ForwarderConfig::default()
    })))
}
