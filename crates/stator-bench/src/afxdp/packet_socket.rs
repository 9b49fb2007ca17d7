//! The same forwarder on the ordinary kernel stack: frames read from an `AF_PACKET` socket,
//! decided by stator-core, written to an `AF_PACKET` socket — the paper's "vanilla Linux
//! network stack" mode (§5.2.1, Figure 8), kept as the benchmark's rival to kernel bypass.
//!
//! One thread; `recvmmsg` and `sendmmsg` move batches of up to 64 frames, each received into
//! a buffer with XDP's headroom in front so the forwarder encapsulates in place, as it does in
//! a UMEM frame. Next hops come from the kernel through `stator_fibq` with the same cache as
//! the AF_XDP packet threads. Not a data plane `stator run` offers: a baseline.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use stator_afxdp::fib::KernelFib;
use stator_core::{
    Action, CompiledSnapshot, Forwarder, ForwarderConfig, SlicePacketBuf, XDP_HEADROOM,
};
use stator_sys::clock::{monotonic_coarse_ns, thread_cpu_ns};
use stator_sys::mmsg::{RecvBatch, SendBatch};
use stator_sys::socket::{packet_socket, set_opt};

use crate::BenchError;

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
    fn open(ifindex: u32) -> Result<Self, BenchError> {
        let fd = packet_socket(ifindex).map_err(|e| BenchError::io("AF_PACKET socket", e))?;
        // best effort, as tuning: the baseline runs without them, only slower or noisier
        let b = fd.as_fd();
        let _ = set_opt(b, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &1i32);
        let _ = set_opt(b, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &(16i32 << 20));
        // a read that waits at most 10 ms, so the loop sees `stop`
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 10_000,
        };
        let _ = set_opt(b, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv);
        Ok(Self { fd })
    }
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
) -> Result<(), BenchError> {
    if let Some(c) = cpu {
        let _ = stator_sys::cpu::pin_to_cpu(c);
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
    let mut batch = RecvBatch::new(BATCH, BUF, XDP_HEADROOM);
    let mut send = SendBatch::new();
    // per egress socket: (buffer, head, length) of each frame to send
    let mut out: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); tx.len()];
    while !stop.load(Ordering::Relaxed) {
        // a timeout (the socket's 10 ms) or an error reads as an empty batch, as before
        let n = batch.recv(rx.fd.as_fd(), libc::MSG_WAITFORONE).unwrap_or(0);
        if n == 0 {
            continue;
        }
        let t0 = thread_cpu_ns();
        let now = monotonic_coarse_ns();
        fib.set_now(now);
        {
            let mut f = fwd.lock().unwrap_or_else(|p| p.into_inner());
            for bi in 0..n {
                let len = batch.len(bi);
                let mut p = SlicePacketBuf::new(batch.buf_mut(bi), XDP_HEADROOM, len);
                let v = f.process(&snap, now, 0, ingress, &fib, &mut p);
                let port = match v.action {
                    Action::Tx => Some(ingress),
                    Action::Redirect { ifindex } => Some(ifindex),
                    _ => None,
                };
                if let Some(i) = port.and_then(|port| tx.iter().position(|(x, _)| *x == port)) {
                    out[i].push((bi, p.head(), p.len()));
                }
            }
        }
        let busy = thread_cpu_ns().saturating_sub(t0);
        let mut sent = 0;
        for (i, (_, s)) in tx.iter().enumerate() {
            let frames = out[i]
                .iter()
                .map(|&(bi, h, l)| (None, &batch.buf(bi)[h..h + l]));
            sent += send.send(s.fd.as_fd(), frames, 0).unwrap_or(0);
            out[i].clear();
        }
        stats.rx.fetch_add(n as u64, Ordering::Relaxed);
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
