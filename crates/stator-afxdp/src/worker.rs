//! A packet thread (§3.1): stator-core's forwarding decision on frames in place, with a
//! connection table of its own.
//!
//! It pops a batch of frames from its receiving queue (filled by the steering step), takes the
//! snapshot the plane published (one per batch, so no packet sees two), reads the clock once,
//! runs `Forwarder::process` over each frame *in the UMEM* — the forwarder grows the frame
//! into its headroom and writes the outer headers there, nothing is copied — and pushes each
//! frame with its fate to its transmission queue, which the muxing step drains: transmit on a
//! socket (TX or REDIRECT), or recycle (a drop; or a pass, which user space cannot hand back to
//! the kernel — the XDP program passes what the forwarder would pass, so this happens only for
//! a packet caught between two generations, counted `user_pass`).
//!
//! An early fragment (`Action::Hold`) stays with the thread, in its UMEM frame, until the
//! thread's fragment table has its first fragment's record, then is processed again
//! (`hold`); a traced packet's report goes to the plane's tracer queue (`trace`).
//!
//! Its `Forwarder` sits behind a mutex that the thread takes once per batch; readers (counters,
//! the tracer's connection-table lookups) take it between batches. Uncontended, that is one
//! atomic exchange per batch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;
use stator_core::{Action, CompiledSnapshot, Forwarder, NextHops};

use crate::fib::{FibStats, KernelFib};
use crate::hold::{FrameHold, HeldFrame};
use crate::spsc::{Consumer, Producer};
use crate::trace::TraceSink;
use crate::umem::{Frame, FrameState, Umem};

/// A received frame on its way to a packet thread: the frame and the socket it came in on.
#[derive(Debug)]
pub(crate) struct RxItem {
    pub frame: Frame,
    pub sock: u16,
}

/// Socket index meaning "recycle the frame" in a [`TxItem`].
pub(crate) const RECYCLE: u16 = u16::MAX;

/// A processed frame on its way to the muxing step: transmit on socket `sock`, or recycle.
#[derive(Debug)]
pub(crate) struct TxItem {
    pub frame: Frame,
    pub sock: u16,
}

/// Where each socket is, for choosing the transmit socket of a verdict.
#[derive(Debug, Clone)]
pub(crate) struct SocketMap {
    /// `(ifindex, queue)` of socket `i`.
    pub socks: Vec<(u32, u32)>,
}

impl SocketMap {
    /// The socket to transmit on for a frame received on socket `from` and leaving through
    /// `ifindex`: the same socket for TX; for REDIRECT, the egress interface's socket of the
    /// same queue number, else its first.
    fn egress(&self, from: u16, ifindex: u32) -> Option<u16> {
        let queue = self.socks.get(from as usize).map_or(0, |s| s.1);
        let mut first = None;
        for (i, &(ifi, q)) in self.socks.iter().enumerate() {
            if ifi == ifindex {
                if q == queue {
                    return Some(i as u16);
                }
                first.get_or_insert(i as u16);
            }
        }
        first
    }

    pub(crate) fn ifindex(&self, sock: u16) -> u32 {
        self.socks.get(sock as usize).map_or(0, |s| s.0)
    }
}

/// What a packet thread counts (read by the plane's reader).
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Frames processed.
    pub packets: AtomicU64,
    /// Batches processed.
    pub batches: AtomicU64,
    /// CPU nanoseconds spent processing batches (the thread's CPU clock, read per batch).
    pub busy_ns: AtomicU64,
    /// Frames the forwarder passed, which user space cannot hand back: recycled.
    pub user_pass: AtomicU64,
    /// Times the thread went to sleep for lack of work.
    pub parks: AtomicU64,
    /// FIB questions answered by the cache / asked of the kernel / failed.
    pub fib_hits: AtomicU64,
    /// See `fib_hits`.
    pub fib_lookups: AtomicU64,
    /// See `fib_hits`.
    pub fib_errors: AtomicU64,
    /// Early fragments held (docs/forwarding.md §9): taken.
    pub hold_held: AtomicU64,
    /// Held fragments processed again once their record appeared.
    pub hold_released: AtomicU64,
    /// Held fragments dropped because they waited longer than `fragments.timeout`.
    pub hold_expired: AtomicU64,
    /// Early fragments dropped because the hold was full (frames or bytes).
    pub hold_full: AtomicU64,
    /// Fragments held now.
    pub holding: AtomicU64,
}

/// One packet thread's forwarder behind the lock the thread takes once per batch — the same
/// shape as `stator-control`'s `coreplane::Shard`, whose reader (counters summed, connection
/// tables looked up and walked) the controller uses over these.
pub type Shard = Arc<Mutex<Forwarder>>;

/// A packet thread's state shared with the rest of the plane.
#[derive(Debug)]
pub(crate) struct WorkerShared {
    pub fwd: Shard,
    /// The last snapshot generation this thread took.
    pub seen_gen: AtomicU64,
    /// The thread is (about to be) parked: unpark it after pushing work.
    pub sleeping: AtomicBool,
    /// Loop iterations: proof of life for the self-test.
    pub heartbeat: AtomicU64,
    pub stats: WorkerStats,
}

impl WorkerShared {
    pub(crate) fn new(fwd: Shard) -> Self {
        Self {
            fwd,
            seen_gen: AtomicU64::new(0),
            sleeping: AtomicBool::new(false),
            heartbeat: AtomicU64::new(0),
            stats: WorkerStats::default(),
        }
    }

    /// The forwarder, even if a packet thread panicked while holding it (its state is plain
    /// data: counters and tables stay readable).
    pub(crate) fn forwarder(&self) -> MutexGuard<'_, Forwarder> {
        self.fwd.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the packet threads share with the plane: the published snapshot and the stop flag.
///
/// Published the one way every plane and the proxy tier publish what their threads read: an
/// `ArcSwap`, loaded without a lock. `generation` counts publications, so a thread notices a
/// new snapshot with one atomic load per batch and acknowledges it (`WorkerShared::seen_gen`):
/// [`Runtime::publish`](crate::runtime::Runtime::publish) returns once every thread has.
#[derive(Debug)]
pub(crate) struct Published {
    snap: ArcSwap<CompiledSnapshot>,
    pub generation: AtomicU64,
    pub stop: AtomicBool,
}

impl Published {
    /// `snap` published as the first generation.
    pub(crate) fn new(snap: Arc<CompiledSnapshot>) -> Self {
        Self {
            snap: ArcSwap::new(snap),
            generation: AtomicU64::new(1),
            stop: AtomicBool::new(false),
        }
    }

    /// The snapshot published last.
    pub(crate) fn current(&self) -> Arc<CompiledSnapshot> {
        self.snap.load_full()
    }

    /// Makes `snap` the current snapshot; returns its publication's generation. The snapshot
    /// is stored before the generation moves, so a thread that sees the new generation loads
    /// this snapshot or a later one. One writer at a time (the plane's commit holds it
    /// exclusively).
    pub(crate) fn publish(&self, snap: Arc<CompiledSnapshot>) -> u64 {
        self.snap.store(snap);
        self.generation.fetch_add(1, Ordering::AcqRel) + 1
    }
}

/// Where a packet thread's next hops come from: the kernel's FIB ([`KernelFib`], through
/// `stator_fibq`: root) in the plane, a table in the tests that run the loop without root. The
/// worker is generic over it, so the plane's loop is compiled for `KernelFib` alone.
pub(crate) trait PacketFib: NextHops {
    /// The clock the cache ages answers by (once per batch).
    fn set_now(&self, now_ns: u64);
    /// What it did.
    fn stats(&self) -> FibStats;
}

impl PacketFib for KernelFib {
    #[inline]
    fn set_now(&self, now_ns: u64) {
        KernelFib::set_now(self, now_ns);
    }

    #[inline]
    fn stats(&self) -> FibStats {
        KernelFib::stats(self)
    }
}

/// The decision on frames in place — `Forwarder::process` over a frame in its UMEM chunk,
/// the verdict turned into a socket (or recycling), early fragments held and released, trace
/// reports taken — with what it needs: the one piece of code a steered packet thread and a
/// run-to-completion thread both run. The decided frames collect in `out`, in order, for the
/// caller to send on their way (the muxing step's queue, or the thread's own TX rings).
pub(crate) struct Decider<F = KernelFib> {
    pub umem: Arc<Umem>,
    pub fib: F,
    pub socks: SocketMap,
    pub shared: Arc<WorkerShared>,
    pub hold: FrameHold,
    pub trace: TraceSink,
    /// Decided frames: transmit on socket `sock`, or recycle ([`RECYCLE`]).
    pub out: Vec<TxItem>,
}

impl<F> std::fmt::Debug for Decider<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decider")
            .field("socks", &self.socks)
            .field("out", &self.out.len())
            .finish()
    }
}

impl<F: PacketFib> Decider<F> {
    /// Decides a batch of received frames (each with the socket it came in on) under one
    /// snapshot and one clock reading, then the held fragments whose record appeared; counts
    /// the batch. The frames end in `out` (or in the hold).
    pub(crate) fn batch(
        &mut self,
        snap: &CompiledSnapshot,
        frames: impl ExactSizeIterator<Item = (Frame, u16)>,
    ) {
        let t0 = stator_sys::clock::thread_cpu_ns();
        let now = stator_sys::clock::monotonic_coarse_ns();
        self.fib.set_now(now);
        let n = frames.len() as u64;
        let mut user_pass = 0;
        {
            let shared = Arc::clone(&self.shared);
            let mut fwd = shared.forwarder();
            for (frame, sock) in frames {
                user_pass += self.decide(&mut fwd, snap, now, frame, sock);
            }
            if !self.hold.is_empty() {
                user_pass += self.release(&mut fwd, snap, now);
            }
        }
        let st = &self.shared.stats;
        st.packets.fetch_add(n, Ordering::Relaxed);
        st.batches.fetch_add(1, Ordering::Relaxed);
        st.busy_ns.fetch_add(
            stator_sys::clock::thread_cpu_ns().saturating_sub(t0),
            Ordering::Relaxed,
        );
        if user_pass != 0 {
            st.user_pass.fetch_add(user_pass, Ordering::Relaxed);
        }
        self.publish_hold();
        let f = self.fib.stats();
        st.fib_hits.store(f.hits, Ordering::Relaxed);
        st.fib_lookups.store(f.lookups, Ordering::Relaxed);
        st.fib_errors.store(f.errors, Ordering::Relaxed);
    }

    /// Runs the forwarder over one frame and sends it on its way: out, recycled, or held.
    /// Returns 1 for a pass (which user space cannot hand back), else 0.
    fn decide(
        &mut self,
        fwd: &mut Forwarder,
        snap: &CompiledSnapshot,
        now: u64,
        mut frame: Frame,
        sock: u16,
    ) -> u64 {
        let ingress = self.socks.ifindex(sock);
        let mut buf = self.umem.packet(&mut frame);
        let v = fwd.process(snap, now, 0, ingress, &self.fib, &mut buf);
        let (head, len) = (buf.head(), buf.len());
        if let Some(e) = fwd.take_trace() {
            self.trace.push(e);
        }
        let mut passed = 0;
        let out = match v.action {
            Action::Tx => Some(sock),
            Action::Redirect { ifindex } => self.socks.egress(sock, ifindex),
            Action::Pass => {
                passed = 1;
                None
            }
            Action::Hold => {
                // An early fragment (forwarding.md §9), as received: the forwarder wrote
                // nothing before deciding to hold it (counted `act_hold`).
                let Some(key) = fwd.held() else {
                    self.emit(frame, RECYCLE);
                    return 0;
                };
                match self.hold.push(now, key, sock, frame) {
                    Ok(()) => {}
                    Err(frame) => self.emit(frame, RECYCLE),
                }
                return 0;
            }
            Action::Drop(_) => None,
        };
        // the forwarder's buffer is the chunk, so the packet lies inside it; were it not, the
        // frame is recycled rather than sent with a descriptor naming another chunk
        let out = match out {
            Some(s) if self.umem.set_packet(&mut frame, head, len).is_ok() => s,
            _ => RECYCLE,
        };
        self.emit(frame, out);
        passed
    }

    /// Processes again the held fragments whose first fragment's record is in the table now,
    /// and recycles those that waited too long. Returns the passes among them.
    fn release(&mut self, fwd: &mut Forwarder, snap: &CompiledSnapshot, now: u64) -> u64 {
        let timeout = snap.node().frag_timeout_ns;
        let (mut released, mut expired) = (Vec::new(), Vec::new());
        {
            let table = fwd.frag_table();
            self.hold.release(
                now,
                |k| table.is_fresh(k, now, timeout),
                &mut released,
                &mut expired,
            );
        }
        for f in expired {
            self.emit(f, RECYCLE);
        }
        // count the releases before deciding them again: a reader that adds up decisions and
        // subtracts releases never sees a second decision without its release
        self.publish_hold();
        let mut passed = 0;
        for h in released {
            passed += self.decide(fwd, snap, now, h.frame, h.ingress);
        }
        self.publish_hold();
        passed
    }

    /// The hold's work while no packet arrives: expiry, and records that a batch left behind.
    pub(crate) fn service_hold(&mut self, snap: &CompiledSnapshot) {
        let now = stator_sys::clock::monotonic_coarse_ns();
        self.fib.set_now(now);
        let passed = {
            let shared = Arc::clone(&self.shared);
            let mut fwd = shared.forwarder();
            self.release(&mut fwd, snap, now)
        };
        if passed != 0 {
            self.shared
                .stats
                .user_pass
                .fetch_add(passed, Ordering::Relaxed);
        }
    }

    /// Everything held, to be recycled (the thread is stopping).
    pub(crate) fn drain_hold(&mut self) {
        let held: Vec<HeldFrame> = self.hold.drain().collect();
        for h in held {
            self.emit(h.frame, RECYCLE);
        }
        self.publish_hold();
    }

    /// Copies the hold's counts to the shared statistics.
    fn publish_hold(&self) {
        let h = self.hold.stats();
        let st = &self.shared.stats;
        st.hold_held.store(h.held, Ordering::Relaxed);
        st.hold_released.store(h.released, Ordering::Relaxed);
        st.hold_expired.store(h.expired, Ordering::Relaxed);
        st.hold_full.store(h.full, Ordering::Relaxed);
        st.holding.store(self.hold.len() as u64, Ordering::Relaxed);
    }

    /// A decided frame, to `out`.
    pub(crate) fn emit(&mut self, frame: Frame, sock: u16) {
        if sock == RECYCLE {
            self.umem
                .pass(&frame, FrameState::Thread, FrameState::Thread);
        }
        self.out.push(TxItem { frame, sock });
    }
}

/// Everything a packet thread owns.
pub(crate) struct Worker<F = KernelFib> {
    pub index: usize,
    pub decider: Decider<F>,
    pub rx: Consumer<RxItem>,
    pub tx: Producer<TxItem>,
    pub published: Arc<Published>,
    pub io_wake: Arc<crate::io::IoWake>,
    pub batch: usize,
    pub spin: Duration,
    pub cpu: Option<usize>,
}

impl<F> std::fmt::Debug for Worker<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("index", &self.index)
            .finish()
    }
}

impl<F: PacketFib> Worker<F> {
    /// The thread's body.
    pub(crate) fn run(mut self) {
        if let Some(cpu) = self.cpu
            && let Err(e) = stator_sys::cpu::pin_to_cpu(cpu)
        {
            tracing::warn!(thread = self.index, cpu, error = %e, "could not pin a packet thread");
        }
        let shared = Arc::clone(&self.decider.shared);
        let mut snap = self.published.current();
        let mut gen_seen = self.published.generation.load(Ordering::Acquire);
        shared.seen_gen.store(gen_seen, Ordering::Release);
        let mut batch: Vec<RxItem> = Vec::with_capacity(self.batch);
        let mut idle_since: Option<u64> = None;
        let spin_ns = self.spin.as_nanos() as u64;
        while !self.published.stop.load(Ordering::Relaxed) {
            shared.heartbeat.fetch_add(1, Ordering::Relaxed);
            let g = self.published.generation.load(Ordering::Acquire);
            if g != gen_seen {
                snap = self.published.current();
                gen_seen = g;
                shared.seen_gen.store(g, Ordering::Release);
            }
            while batch.len() < self.batch {
                match self.rx.pop() {
                    Some(item) => batch.push(item),
                    None => break,
                }
            }
            if batch.is_empty() && !self.decider.hold.is_empty() {
                self.decider.service_hold(&snap);
                self.send();
            }
            if batch.is_empty() {
                let now = stator_sys::clock::monotonic_ns();
                let since = *idle_since.get_or_insert(now);
                if now.saturating_sub(since) < spin_ns {
                    std::hint::spin_loop();
                    continue;
                }
                shared.sleeping.store(true, Ordering::SeqCst);
                if self.rx.is_empty() && !self.published.stop.load(Ordering::SeqCst) {
                    shared.stats.parks.fetch_add(1, Ordering::Relaxed);
                    // holding fragments: wake often enough to expire them on time
                    let nap = if self.decider.hold.is_empty() { 10 } else { 1 };
                    std::thread::park_timeout(Duration::from_millis(nap));
                }
                shared.sleeping.store(false, Ordering::SeqCst);
                idle_since = None;
                continue;
            }
            idle_since = None;
            self.decider
                .batch(&snap, batch.drain(..).map(|i| (i.frame, i.sock)));
            self.send();
        }
        // hand back whatever is still queued so the frames are accounted for
        while let Some(item) = self.rx.pop() {
            batch.push(item);
        }
        for item in batch.drain(..) {
            self.decider.emit(item.frame, RECYCLE);
        }
        self.decider.drain_hold();
        self.send();
    }

    /// Pushes the decided frames to the muxing step, waiting (and waking it) while the queue
    /// is full: the I/O thread never waits on a packet thread, so this always drains.
    fn send(&mut self) {
        for mut item in self.decider.out.drain(..) {
            loop {
                match self.tx.push(item) {
                    Ok(()) => break,
                    Err(back) => {
                        item = back;
                        self.io_wake.wake_now();
                        std::thread::yield_now();
                    }
                }
            }
        }
        self.io_wake.wake();
    }
}

#[cfg(test)]
mod tests {
    //! The I/O thread and two packet threads running their real loops over heap rings
    //! (`sim`), the test playing the kernel: no root. Every wait has a deadline; nothing is
    //! counted against the clock.

    use std::collections::BTreeSet;
    use std::time::Instant;

    use super::*;
    use crate::sim::{self, Rig, RigConfig};
    use crate::umem::FrameState;

    #[test]
    fn every_frame_is_accounted_for_after_thousands_of_packets_through_the_running_loops() {
        const N: u32 = 3000;
        let cfg = RigConfig {
            frames: 256,
            threads: 2,
            queue_depth: 64,
            ring: 64,
            batch: 16,
            flush_ns: 50_000,
        };
        let mut rig = Rig::new(cfg);
        let workers: Vec<Worker<stator_core::StaticFib>> =
            (0..cfg.threads).map(|i| rig.worker(i)).collect();
        let Rig {
            umem,
            mut io,
            mut kernel,
            shared,
            published,
            stats,
            wake,
            ..
        } = rig;
        let handles: Vec<_> = workers
            .into_iter()
            .map(|w| std::thread::spawn(move || w.run()))
            .collect();
        io.threads = handles.iter().map(|h| h.thread().clone()).collect();
        let io_thread = std::thread::spawn(move || io.run());

        // every 10th packet is for a port no VIP serves: passed by the forwarder, recycled
        let packets: Vec<Vec<u8>> = (0..N)
            .map(|i| {
                sim::packet(
                    10_000 + (i % 50) as u16,
                    if i % 10 == 0 { 81 } else { 80 },
                    i,
                )
            })
            .collect();
        let forwarded: Vec<u32> = (0..N).filter(|i| i % 10 != 0).collect();
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let (mut next, mut sent) = (0usize, Vec::new());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut progress = false;
            while next < packets.len() && kernel.receive(&packets[next]) {
                next += 1;
                progress = true;
            }
            if kernel.rx_waiting() == 0 {
                kernel.quiet();
            }
            for f in kernel.transmit() {
                assert_eq!(
                    &f[30..34],
                    &sim::BACKEND.octets(),
                    "encapsulated to the backend"
                );
                sent.push(sim::packet_id(&f));
                progress = true;
            }
            let done = next == packets.len()
                && sent.len() == forwarded.len()
                && r(&stats.recycled) == u64::from(N) - forwarded.len() as u64
                && r(&stats.completed) == sent.len() as u64;
            if done {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "stuck: {next} received, {} sent, {} recycled, {} completed",
                sent.len(),
                r(&stats.recycled),
                r(&stats.completed)
            );
            if !progress {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        published.stop.store(true, Ordering::SeqCst);
        for h in &handles {
            h.thread().unpark();
        }
        wake.wake_now();
        for h in handles {
            h.join().expect("a packet thread panicked");
        }
        let io = io_thread.join().expect("the I/O thread panicked");

        // each forwarded packet left exactly once
        sent.sort_unstable();
        assert_eq!(sent, forwarded, "none lost, none sent twice");
        assert_eq!(r(&stats.rx), u64::from(N));
        assert_eq!(r(&stats.steered) + r(&stats.steer_fallback), u64::from(N));
        assert_eq!(r(&stats.tx), forwarded.len() as u64);
        assert_eq!((r(&stats.rx_invalid), r(&stats.comp_invalid)), (0, 0));
        let total = |f: fn(&WorkerStats) -> &AtomicU64| -> u64 {
            shared.iter().map(|w| r(f(&w.stats))).sum()
        };
        assert_eq!(total(|s| &s.packets), u64::from(N));
        assert_eq!(total(|s| &s.user_pass), u64::from(N / 10));
        assert!(
            shared.iter().all(|w| r(&w.stats.packets) > 0),
            "both threads worked"
        );
        // the frame ledger: every frame is free in user space or in the kernel's fill ring,
        // each exactly once
        let ledger = umem.ledger().expect("kept");
        let in_fill = kernel.fill_held();
        assert_eq!(ledger.count(FrameState::Free), io.free.len());
        assert_eq!(ledger.count(FrameState::Fill), in_fill.len());
        assert_eq!(io.free.len() + in_fill.len(), 256, "no frame lost");
        let chunks: BTreeSet<u32> = io
            .free
            .iter()
            .map(|f| umem.frame_index(f.addr()))
            .chain(in_fill.iter().map(|&a| umem.frame_index(a)))
            .collect();
        assert_eq!(chunks.len(), 256, "no frame duplicated");
    }
}
