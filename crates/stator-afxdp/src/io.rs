//! The I/O thread: the paper's steering and muxing modules on one core (§3.1, §5.2: "we use
//! one core for steering and muxing"). It alone owns every ring of every socket.
//!
//! One turn of its loop:
//! 1. **Completions**: frames the kernel has sent come back (completion ring → free list).
//! 2. **Muxing**: frames the packet threads finished are written into the TX ring of the
//!    socket they leave by, or recycled to the free list. A TX ring that is full keeps the rest
//!    in a backlog (counted) for the next turn.
//! 3. **Flush**: a socket's written TX descriptors are published and the kernel woken
//!    (`sendto`, when it asks for it — need_wakeup; always, in copy mode) when a batch is full
//!    or the oldest has waited the flush timeout (50 µs by default: §3.2's timer). Each flush
//!    is counted by its cause. In copy mode the kernel sends at most 32 frames per wake-up, so
//!    while a TX ring still holds frames it is woken again on every turn.
//! 4. **Fill**: free frames go back to the fill rings — every turn, each ring topped up to its
//!    share of the pool — and the driver is woken when it asks (need_wakeup).
//! 5. **Steering**: received frames are read from the RX rings, hashed (stator-hash's flow
//!    hash of the 5-tuple) and pushed to their packet thread's queue; a full queue sends the
//!    frame to the next thread with room, round-robin (counted); when every queue is full the
//!    frames wait here and no more are read (counted), so the RX ring fills and the kernel
//!    drops — counted in `XDP_STATISTICS` — instead of anything blocking.
//!
//! With nothing to do it spins for `spin`, then sleeps in `ppoll` on the RX sockets and an
//! eventfd the packet threads signal, never longer than the next flush deadline.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::time::Duration;

use crate::ring::{CompRing, FillRing, Refused, RxRing, TxRing};
use crate::spsc::{Consumer, Producer};
use crate::steer::{fallback_order, home_thread, steering_hash};
use crate::sys::{self, EventFd};
use crate::umem::{Frame, FrameState, Umem};
use crate::worker::{RxItem, TxItem, WorkerShared};

/// The frames one `sendto` makes the kernel send in copy mode (its TX budget per wake-up).
pub(crate) const COPY_TX_BUDGET: u32 = 32;

/// How the I/O thread is woken from `ppoll` by the packet threads.
#[derive(Debug)]
pub(crate) struct IoWake {
    efd: EventFd,
    sleeping: AtomicBool,
}

impl IoWake {
    pub(crate) fn new() -> std::io::Result<Self> {
        Ok(Self {
            efd: EventFd::new()?,
            sleeping: AtomicBool::new(false),
        })
    }

    /// Wakes the I/O thread if it sleeps (after pushing work to it).
    #[inline]
    pub(crate) fn wake(&self) {
        // the push (a release store) must be visible before the flag is read, or both sides
        // could miss each other: the sleeper sets its flag, then looks at the queues
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            self.efd.signal();
        }
    }

    /// Wakes it whatever it does.
    pub(crate) fn wake_now(&self) {
        self.efd.signal();
    }
}

/// What the I/O thread counts (read by the plane's reader). All monotonic.
#[derive(Debug, Default)]
pub struct IoStats {
    /// Frames read from RX rings.
    pub rx: AtomicU64,
    /// Frames steered to their hash's packet thread.
    pub steered: AtomicU64,
    /// Frames sent to another thread because their own thread's queue was full (§3.1's
    /// round-robin fallback).
    pub steer_fallback: AtomicU64,
    /// Times every packet-thread queue was full and reading RX paused.
    pub steer_stalls: AtomicU64,
    /// Frames written to TX rings.
    pub tx: AtomicU64,
    /// Frames recycled without transmission (dropped or passed by the forwarder).
    pub recycled: AtomicU64,
    /// Frames the kernel completed (sent).
    pub completed: AtomicU64,
    /// Flushes because a batch was full.
    pub flush_full: AtomicU64,
    /// Flushes because the oldest descriptor waited the flush timeout.
    pub flush_timer: AtomicU64,
    /// Run to completion: TX rings published at the end of a turn (one per socket written).
    pub flush_turn: AtomicU64,
    /// `sendto` wake-ups of the kernel's transmit path.
    pub tx_kicks: AtomicU64,
    /// Times a TX ring was full and frames waited in the backlog.
    pub tx_ring_full: AtomicU64,
    /// Wake-ups of the driver to refill (`recvfrom`, need_wakeup).
    pub fill_wakeups: AtomicU64,
    /// RX descriptors outside the UMEM (never expected).
    pub rx_invalid: AtomicU64,
    /// Completion descriptors outside the UMEM (never expected): read, released, not recycled.
    pub comp_invalid: AtomicU64,
    /// Times the thread slept in `ppoll`.
    pub sleeps: AtomicU64,
    /// CPU nanoseconds spent steering (reading RX and pushing to threads).
    pub steer_ns: AtomicU64,
    /// CPU nanoseconds spent muxing (draining the threads' queues into TX rings).
    pub mux_ns: AtomicU64,
    /// Run to completion: CPU nanoseconds of the turns that received frames — rings and
    /// `process` together (the `process` part is also in the threads' `busy_ns`), without the
    /// TX `sendto` (as `steer_ns` and `mux_ns` leave out the I/O thread's flush).
    pub rtc_ns: AtomicU64,
    /// Loop turns: proof of life for the self-test.
    pub heartbeat: AtomicU64,
}

/// One socket's rings and its flush state.
#[derive(Debug)]
pub(crate) struct SockIo {
    pub fill: FillRing,
    pub comp: CompRing,
    pub rx: Option<RxRing>,
    pub tx: TxRing,
    /// Written to the TX ring, not yet flushed.
    pub unflushed: u32,
    /// When the oldest unflushed descriptor was written.
    pub oldest_ns: u64,
    /// Frames waiting for room in the TX ring.
    pub backlog: VecDeque<Frame>,
}

/// Everything the I/O thread owns.
#[derive(Debug)]
pub(crate) struct Io {
    pub umem: Arc<Umem>,
    pub socks: Vec<SockIo>,
    pub free: Vec<Frame>,
    pub to_workers: Vec<Producer<RxItem>>,
    pub from_workers: Vec<Consumer<TxItem>>,
    pub workers: Vec<Arc<WorkerShared>>,
    pub threads: Vec<std::thread::Thread>,
    pub wake: Arc<IoWake>,
    pub stats: Arc<IoStats>,
    /// The plane's published snapshot (and its generation) and the stop flag, shared with the
    /// packet threads.
    pub published: Arc<crate::worker::Published>,
    /// The snapshot steering parses with (the packet threads' current one), and its
    /// publication generation.
    pub snap: Arc<stator_core::CompiledSnapshot>,
    pub snap_gen: u64,
    pub batch: u32,
    pub flush_ns: u64,
    pub spin: Duration,
    pub cpu: Option<usize>,
}

impl Io {
    /// The thread's body. Returns what it owns once stopped (the tests count its frames; the
    /// plane drops it, and with it the rings and sockets).
    pub(crate) fn run(mut self) -> Self {
        if let Some(cpu) = self.cpu
            && let Err(e) = stator_sys::cpu::pin_to_cpu(cpu)
        {
            tracing::warn!(cpu, error = %e, "could not pin the AF_XDP I/O thread");
        }
        // ppoll's timeout must mean microseconds, not the default 50 µs of timer slack
        sys::set_timer_slack_ns(1_000);
        let mut rx_buf: Vec<Frame> = Vec::with_capacity(self.batch as usize);
        let mut stalled: VecDeque<RxItem> = VecDeque::new();
        let mut rr = 0usize;
        let mut idle_since: Option<u64> = None;
        let spin_ns = self.spin.as_nanos() as u64;
        let rx_socks = self.socks.iter().filter(|s| s.rx.is_some()).count().max(1);
        let share = (self.umem.config().frames as usize / rx_socks) as u32;
        while !self.published.stop.load(Ordering::Relaxed) {
            self.stats.heartbeat.fetch_add(1, Ordering::Relaxed);
            let g = self.published.generation.load(Ordering::Acquire);
            if g != self.snap_gen {
                self.snap = self.published.current();
                self.snap_gen = g;
            }
            let now = stator_sys::clock::monotonic_ns();
            let c0 = stator_sys::clock::thread_cpu_ns();
            let mut work = self.reap();
            let muxed = self.mux(now);
            let c1 = stator_sys::clock::thread_cpu_ns();
            if muxed != 0 {
                self.stats.mux_ns.fetch_add(c1 - c0, Ordering::Relaxed);
            }
            work += muxed + self.flush(now);
            self.fill(share);
            let c2 = stator_sys::clock::thread_cpu_ns();
            let steered = self.steer(&mut rx_buf, &mut stalled, &mut rr);
            if steered != 0 {
                self.stats.steer_ns.fetch_add(
                    stator_sys::clock::thread_cpu_ns().saturating_sub(c2),
                    Ordering::Relaxed,
                );
            }
            work += steered;
            if work != 0 {
                idle_since = None;
                continue;
            }
            let since = *idle_since.get_or_insert(now);
            if now - since < spin_ns {
                std::hint::spin_loop();
                continue;
            }
            self.sleep(now, !stalled.is_empty());
            idle_since = None;
        }
        // what the threads still hold goes with the rings and sockets when they are dropped
        self
    }

    /// 1. Completions back to the free list.
    pub(crate) fn reap(&mut self) -> usize {
        let (mut n, mut bad) = (0, 0);
        for s in &mut self.socks {
            let (read, invalid) = s.comp.reap(&mut self.free, s.comp.ring.size());
            n += read as usize;
            bad += u64::from(invalid);
        }
        if n != 0 {
            let good = n as u64 - bad;
            self.stats.completed.fetch_add(good, Ordering::Relaxed);
            if bad != 0 {
                self.stats.comp_invalid.fetch_add(bad, Ordering::Relaxed);
            }
        }
        n
    }

    /// 2. The packet threads' output into TX rings (or the free list).
    fn mux(&mut self, now: u64) -> usize {
        let mut n = 0usize;
        let mut out = self.drain_backlogs(now);
        let cap = 4 * self.batch as usize;
        for c in &mut self.from_workers {
            for _ in 0..cap {
                let Some(item) = c.pop() else {
                    break;
                };
                n += 1;
                transmit(
                    &mut self.socks,
                    &mut self.free,
                    &self.umem,
                    item,
                    now,
                    &mut out,
                );
            }
        }
        // `tx` includes the backlog's frames, written on turns that may pop nothing new
        if n != 0 || out.tx != 0 {
            out.count(&self.stats);
        }
        n
    }

    /// Frames that waited for room in a TX ring, first, in order.
    pub(crate) fn drain_backlogs(&mut self, now: u64) -> TxCounts {
        let mut out = TxCounts::default();
        for s in &mut self.socks {
            while let Some(f) = s.backlog.pop_front() {
                match s.tx.push(f) {
                    Ok(()) => {
                        out.tx += 1;
                        mark_written(s, now);
                    }
                    Err(r) => {
                        s.backlog.push_front(r.into_frame());
                        break;
                    }
                }
            }
        }
        out
    }

    /// Decided frames into the TX rings of the sockets they leave by (or the free list), and
    /// counted: what the muxing step does with a packet thread's queue, for a thread that
    /// decides its own frames (run to completion).
    pub(crate) fn transmit_all(&mut self, items: &mut Vec<TxItem>, now: u64) {
        let mut out = self.drain_backlogs(now);
        for item in items.drain(..) {
            transmit(
                &mut self.socks,
                &mut self.free,
                &self.umem,
                item,
                now,
                &mut out,
            );
        }
        out.count(&self.stats);
    }

    /// 3. Publish and wake TX when a batch is full or the timer expired.
    fn flush(&mut self, now: u64) -> usize {
        let mut n = 0;
        for s in &mut self.socks {
            if s.unflushed != 0 {
                let full = s.unflushed >= self.batch;
                if full || now.saturating_sub(s.oldest_ns) >= self.flush_ns {
                    let c = if full {
                        &self.stats.flush_full
                    } else {
                        &self.stats.flush_timer
                    };
                    c.fetch_add(1, Ordering::Relaxed);
                    s.tx.submit();
                    s.unflushed = 0;
                    n += 1;
                    if matches!(s.tx.kick_if_needed(), Ok(true)) {
                        self.stats.tx_kicks.fetch_add(1, Ordering::Relaxed);
                    }
                    continue;
                }
            }
            // copy mode sends 32 frames per wake-up: keep waking while frames remain
            if s.tx.in_flight() != 0 && matches!(s.tx.kick_if_needed(), Ok(true)) {
                self.stats.tx_kicks.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
        }
        n
    }

    /// Run to completion: every socket written this turn is published and the kernel woken
    /// (when it asks) — counted `flush_turn`, one per socket written. A wake-up in copy mode
    /// sends at most [`COPY_TX_BUDGET`] frames, synchronously, so while a wake-up moved the
    /// ring and frames remain the kernel is woken again, at most once per 32 frames in the
    /// ring (a batch of 64: two `sendto`); a wake-up that moved nothing (zero-copy: the driver
    /// sends on its own time) is not repeated this turn.
    pub(crate) fn flush_turn(&mut self) -> usize {
        let mut n = 0;
        let mut kicks = 0;
        for s in &mut self.socks {
            if s.unflushed != 0 {
                self.stats.flush_turn.fetch_add(1, Ordering::Relaxed);
                s.tx.submit();
                s.unflushed = 0;
                n += 1;
            }
            let mut left = s.tx.in_flight();
            let mut tries = left.div_ceil(COPY_TX_BUDGET);
            while left != 0 && tries != 0 {
                tries -= 1;
                if !matches!(s.tx.kick_if_needed(), Ok(true)) {
                    break;
                }
                kicks += 1;
                let now_left = s.tx.in_flight();
                if now_left == left {
                    break;
                }
                left = now_left;
            }
        }
        if kicks != 0 {
            self.stats.tx_kicks.fetch_add(kicks, Ordering::Relaxed);
        }
        n
    }

    /// 4. Free frames back to the fill rings, each up to its share of the pool.
    pub(crate) fn fill(&mut self, share: u32) {
        for s in self.socks.iter_mut().filter(|s| s.rx.is_some()) {
            if self.free.is_empty() {
                break;
            }
            let want = share.min(s.fill.size()).saturating_sub(s.fill.queued());
            if want == 0 {
                continue;
            }
            let keep = self.free.len().saturating_sub(want as usize);
            let mut give = self.free.split_off(keep);
            // never refused (the free list holds only this UMEM's frames); if it were, nothing
            // is written and the frames go back to the free list below
            let _ = s.fill.fill(&mut give);
            self.free.append(&mut give);
            if s.fill.wake_if_needed() {
                self.stats.fill_wakeups.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// 5. RX rings to the packet threads.
    fn steer(
        &mut self,
        rx_buf: &mut Vec<Frame>,
        stalled: &mut VecDeque<RxItem>,
        rr: &mut usize,
    ) -> usize {
        let threads = self.to_workers.len();
        let mut n = 0;
        // frames that found every queue full wait first
        while let Some(item) = stalled.pop_front() {
            match self.dispatch(item, rr) {
                Ok(()) => n += 1,
                Err(item) => {
                    stalled.push_front(item);
                    return n;
                }
            }
        }
        for si in 0..self.socks.len() {
            let Some(rx) = self.socks[si].rx.as_mut() else {
                continue;
            };
            let (got, bad) = rx.recv(rx_buf, self.batch);
            if got == 0 {
                continue;
            }
            self.stats.rx.fetch_add(u64::from(got), Ordering::Relaxed);
            if bad != 0 {
                self.stats
                    .rx_invalid
                    .fetch_add(u64::from(bad), Ordering::Relaxed);
            }
            for frame in rx_buf.drain(..) {
                self.umem.pass(&frame, FrameState::Rx, FrameState::Thread);
                let item = RxItem {
                    frame,
                    sock: si as u16,
                };
                if let Err(item) = self.dispatch(item, rr) {
                    stalled.push_back(item);
                }
                n += 1;
            }
            if !stalled.is_empty() {
                self.stats.steer_stalls.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
        if threads != 0 && n != 0 {
            // as in IoWake::wake: pushes before the flags are read
            fence(Ordering::SeqCst);
            for (w, t) in self.workers.iter().zip(&self.threads) {
                if w.sleeping.load(Ordering::Relaxed) {
                    t.unpark();
                }
            }
        }
        n
    }

    /// Pushes one frame to its thread, or round-robin to the next with room.
    fn dispatch(&mut self, mut item: RxItem, rr: &mut usize) -> Result<(), RxItem> {
        let threads = self.to_workers.len();
        let hash = {
            let buf = self.umem.packet(&mut item.frame);
            let data = stator_core::PacketBuf::data(&buf);
            stator_core::table_hash(&self.snap, data).unwrap_or_else(|| steering_hash(data))
        };
        let home = home_thread(hash, threads);
        match self.to_workers[home].push(item) {
            Ok(()) => {
                self.stats.steered.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            Err(back) => item = back,
        }
        for t in fallback_order(home, *rr, threads) {
            match self.to_workers[t].push(item) {
                Ok(()) => {
                    *rr = t;
                    self.stats.steer_fallback.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Err(back) => item = back,
            }
        }
        Err(item)
    }

    /// Sleeps in `ppoll` until a socket has frames, a packet thread signals, or the next flush
    /// is due.
    pub(crate) fn sleep(&mut self, now: u64, stalled: bool) {
        self.wake.sleeping.store(true, Ordering::SeqCst);
        let pending = self.from_workers.iter_mut().any(|c| !c.is_empty());
        if pending || stalled {
            self.wake.sleeping.store(false, Ordering::SeqCst);
            return;
        }
        let mut timeout = Duration::from_millis(10);
        for s in &mut self.socks {
            if s.unflushed != 0 {
                let due = s.oldest_ns + self.flush_ns;
                timeout = timeout.min(Duration::from_nanos(due.saturating_sub(now).max(1_000)));
            } else if s.tx.in_flight() != 0 || !s.backlog.is_empty() {
                timeout = timeout.min(Duration::from_micros(50));
            }
        }
        let mut fds: Vec<libc::pollfd> = self
            .socks
            .iter()
            .filter_map(|s| s.rx.as_ref().map(RxRing::raw_fd))
            .chain(std::iter::once(self.wake.efd.raw()))
            .map(|fd: RawFd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        self.stats.sleeps.fetch_add(1, Ordering::Relaxed);
        sys::poll_in(&mut fds, timeout);
        self.wake.sleeping.store(false, Ordering::SeqCst);
        self.wake.efd.drain();
    }
}

/// What one pass of writing TX rings did.
#[derive(Debug, Default)]
pub(crate) struct TxCounts {
    tx: u64,
    recycled: u64,
    full: u64,
}

impl TxCounts {
    fn count(&self, st: &IoStats) {
        st.tx.fetch_add(self.tx, Ordering::Relaxed);
        st.recycled.fetch_add(self.recycled, Ordering::Relaxed);
        st.tx_ring_full.fetch_add(self.full, Ordering::Relaxed);
    }
}

/// One decided frame into the TX ring of its socket (behind that socket's backlog, if any; into
/// the backlog when the ring is full), or back to the free list (`RECYCLE`, or no such socket).
fn transmit(
    socks: &mut [SockIo],
    free: &mut Vec<Frame>,
    umem: &Umem,
    TxItem { frame, sock }: TxItem,
    now: u64,
    out: &mut TxCounts,
) {
    let Some(s) = socks.get_mut(sock as usize) else {
        umem.pass(&frame, FrameState::Thread, FrameState::Free);
        free.push(frame);
        out.recycled += 1;
        return;
    };
    if !s.backlog.is_empty() {
        s.backlog.push_back(frame);
        return;
    }
    match s.tx.push(frame) {
        Ok(()) => {
            out.tx += 1;
            mark_written(s, now);
        }
        Err(Refused::Full(f)) => {
            out.full += 1;
            s.backlog.push_back(f);
        }
        // every frame here came from this UMEM's rings: the runtime binds every socket over it
        Err(Refused::Foreign(f)) => unreachable!("{} in the muxing step", f.pool()),
    }
}

fn mark_written(s: &mut SockIo, now: u64) {
    if s.unflushed == 0 {
        s.oldest_ns = now;
    }
    s.unflushed += 1;
}

#[cfg(test)]
mod tests {
    //! The I/O thread's steps over heap rings (`sim`), with the test as the kernel and the
    //! packet threads, and its own clock: no root, no socket, no timing.

    use super::*;
    use crate::sim::{self, Rig, RigConfig};
    use crate::worker::RECYCLE;

    /// Top up the fill ring as the loop does.
    fn fill(rig: &mut Rig) {
        let share = rig.umem.config().frames;
        rig.io.fill(share);
    }

    /// One steering step.
    fn steer(rig: &mut Rig, stalled: &mut VecDeque<RxItem>, rr: &mut usize) -> usize {
        let mut rx_buf = Vec::new();
        rig.io.steer(&mut rx_buf, stalled, rr)
    }

    /// Everything in packet thread `i`'s receiving queue: (packet number, frame).
    fn drain(rig: &mut Rig, i: usize) -> Vec<(u32, Frame)> {
        let q = rig.to_threads[i].as_mut().expect("queue");
        let mut out = Vec::new();
        while let Some(mut item) = q.pop() {
            assert_eq!(item.sock, 0);
            let id = sim::packet_id(stator_core::PacketBuf::data(
                &rig.umem.packet(&mut item.frame),
            ));
            out.push((id, item.frame));
        }
        out
    }

    /// The thread the loop must choose for `frame` (the forwarder's own key, else the
    /// steering hash).
    fn home(frame: &[u8], threads: usize) -> usize {
        let snap = sim::snapshot();
        let hash = stator_core::table_hash(&snap, frame).unwrap_or_else(|| steering_hash(frame));
        home_thread(hash, threads)
    }

    fn count(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    #[test]
    fn steering_sends_every_packet_of_a_flow_to_its_home_thread() {
        let mut rig = Rig::new(RigConfig::default());
        fill(&mut rig);
        let packets: Vec<Vec<u8>> = (0..48u32)
            .map(|i| sim::packet(10_000 + (i % 16) as u16, 80, i))
            .collect();
        for p in &packets {
            assert!(rig.kernel.receive(p), "a frame to receive into");
        }
        let (mut stalled, mut rr) = (VecDeque::new(), 0);
        // `batch` (16) frames per RX ring per turn
        let steered: Vec<usize> = (0..4)
            .map(|_| steer(&mut rig, &mut stalled, &mut rr))
            .collect();
        assert_eq!(steered, [16, 16, 16, 0]);
        assert!(stalled.is_empty());
        let mut seen = 0;
        let mut used = [false; 2];
        for (t, used) in used.iter_mut().enumerate() {
            for (id, _) in drain(&mut rig, t) {
                let want = home(&packets[id as usize], 2);
                assert_eq!(
                    t, want,
                    "packet {id} reached thread {t}, its flow's is {want}"
                );
                *used = true;
                seen += 1;
            }
        }
        assert_eq!(seen, 48, "every packet reached a thread once");
        assert_eq!(used, [true, true], "16 flows spread over both threads");
        let st = &rig.stats;
        assert_eq!((count(&st.rx), count(&st.steered)), (48, 48));
        assert_eq!((count(&st.steer_fallback), count(&st.steer_stalls)), (0, 0));
    }

    #[test]
    fn a_full_queue_sends_frames_round_robin_and_a_full_house_stops_reading() {
        // three threads with room for 2 frames each, and one flow (the paper's flood of one
        // 5-tuple): 2 frames home, the next 4 to the other two in turn, the 7th waits
        let mut rig = Rig::new(RigConfig {
            threads: 3,
            queue_depth: 2,
            ..RigConfig::default()
        });
        fill(&mut rig);
        let packets: Vec<Vec<u8>> = (0..9u32).map(|i| sim::packet(10_000, 80, i)).collect();
        let home = home(&packets[0], 3);
        for p in &packets[..7] {
            assert!(rig.kernel.receive(p));
        }
        let (mut stalled, mut rr) = (VecDeque::new(), 0);
        steer(&mut rig, &mut stalled, &mut rr);
        let st = Arc::clone(&rig.stats);
        assert_eq!((count(&st.steered), count(&st.steer_fallback)), (2, 4));
        assert_eq!(count(&st.steer_stalls), 1);
        assert_eq!(stalled.len(), 1, "the 7th frame waits in the I/O thread");
        // while every queue is full, the RX ring is not read: the kernel would drop there
        for p in &packets[7..] {
            assert!(rig.kernel.receive(p));
        }
        assert_eq!(steer(&mut rig, &mut stalled, &mut rr), 0);
        assert_eq!(rig.kernel.rx_waiting(), 2, "left in the RX ring");
        assert_eq!(count(&st.rx), 7);
        let queues: Vec<Vec<u32>> = (0..3)
            .map(|t| drain(&mut rig, t).into_iter().map(|(id, _)| id).collect())
            .collect();
        assert_eq!(queues[home], vec![0, 1], "the first two at home, in order");
        let others: Vec<usize> = (0..3).filter(|&t| t != home).collect();
        let (a, b) = (&queues[others[0]], &queues[others[1]]);
        assert_eq!((a.len(), b.len()), (2, 2), "the fallback took turns");
        let mut spilled: Vec<u32> = a.iter().chain(b).copied().collect();
        spilled.sort_unstable();
        assert_eq!(spilled, vec![2, 3, 4, 5]);
        assert!(
            a[0] + 1 == b[0] || b[0] + 1 == a[0],
            "alternating: {a:?} {b:?}"
        );
        // room again: the waiting frame goes first, home, then reading resumes
        assert_eq!(steer(&mut rig, &mut stalled, &mut rr), 3);
        assert!(stalled.is_empty());
        assert_eq!(drain(&mut rig, home)[0].0, 6, "the stalled frame, first");
        assert_eq!(count(&st.rx), 9);
    }

    #[test]
    fn the_flush_timer_sends_a_lone_frame_after_the_timeout_and_a_full_batch_at_once() {
        let mut rig = Rig::new(RigConfig {
            threads: 1,
            batch: 4,
            flush_ns: 50_000,
            ..RigConfig::default()
        });
        fill(&mut rig);
        let (mut stalled, mut rr) = (VecDeque::new(), 0);
        let mut through = |rig: &mut Rig, ids: std::ops::Range<u32>| {
            for i in ids {
                assert!(rig.kernel.receive(&sim::packet(10_000, 80, i)));
            }
            steer(rig, &mut stalled, &mut rr);
            // the test plays the packet thread: everything goes out where it came in
            for (_, frame) in drain(rig, 0) {
                let out = rig.from_threads[0].as_mut().expect("queue");
                out.push(TxItem { frame, sock: 0 }).expect("room");
            }
        };
        // a lone frame: written at t0, not published before the timeout
        let t0 = 1_000_000_000;
        through(&mut rig, 0..1);
        assert_eq!(rig.io.mux(t0), 1);
        assert_eq!(rig.io.flush(t0 + 49_999), 0);
        assert!(
            rig.kernel.transmit().is_empty(),
            "not yet visible to the kernel"
        );
        assert_eq!(rig.io.flush(t0 + 50_000), 1);
        let sent = rig.kernel.transmit();
        assert_eq!(
            sent.iter().map(|f| sim::packet_id(f)).collect::<Vec<_>>(),
            [0]
        );
        let st = Arc::clone(&rig.stats);
        assert_eq!((count(&st.flush_timer), count(&st.flush_full)), (1, 0));
        // a full batch goes at once, whatever the clock says
        let t1 = t0 + 1_000_000;
        through(&mut rig, 1..5);
        assert_eq!(rig.io.mux(t1), 4);
        assert_eq!(rig.io.flush(t1), 1);
        let sent: Vec<u32> = rig
            .kernel
            .transmit()
            .iter()
            .map(|f| sim::packet_id(f))
            .collect();
        assert_eq!(sent, [1, 2, 3, 4]);
        assert_eq!((count(&st.flush_timer), count(&st.flush_full)), (1, 1));
        // and the timer counts from the oldest frame, not the newest
        through(&mut rig, 5..6);
        rig.io.mux(t1 + 10_000);
        through(&mut rig, 6..7);
        rig.io.mux(t1 + 40_000);
        assert_eq!(rig.io.flush(t1 + 59_999), 0);
        assert_eq!(rig.io.flush(t1 + 60_000), 1);
        assert_eq!(rig.kernel.transmit().len(), 2);
        // completions come back to the free list
        assert_eq!(rig.io.reap(), 7);
        assert_eq!(count(&st.completed), 7);
        assert_eq!(count(&st.tx), 7);
    }

    #[test]
    fn a_completion_outside_the_pool_is_counted_not_recycled() {
        let mut rig = Rig::new(RigConfig::default());
        let free = rig.io.free.len();
        rig.kernel.complete_raw(256 * 2048); // the chunk after the last
        rig.kernel.complete_raw(1 << 44); // far past it: not taken for chunk 0
        assert_eq!(rig.io.reap(), 2, "read and released");
        assert_eq!(rig.io.free.len(), free, "nothing recycled");
        assert_eq!(count(&rig.stats.comp_invalid), 2);
        assert_eq!(count(&rig.stats.completed), 0);
    }

    #[test]
    fn a_full_tx_ring_keeps_a_backlog_in_order_and_recycling_needs_no_ring() {
        let mut rig = Rig::new(RigConfig {
            threads: 1,
            ring: 64,
            batch: 64,
            ..RigConfig::default()
        });
        fill(&mut rig);
        let (mut stalled, mut rr) = (VecDeque::new(), 0);
        let mut ids = Vec::new();
        for round in 0..2u32 {
            for i in 0..40 {
                assert!(rig.kernel.receive(&sim::packet(10_000, 80, round * 40 + i)));
            }
            steer(&mut rig, &mut stalled, &mut rr);
            for (id, frame) in drain(&mut rig, 0) {
                // every 10th is dropped by the "packet thread": recycled, never in a ring
                let sock = if id % 10 == 0 { RECYCLE } else { 0 };
                if sock == 0 {
                    ids.push(id);
                } else {
                    rig.umem
                        .pass(&frame, FrameState::Thread, FrameState::Thread);
                }
                let out = rig.from_threads[0].as_mut().expect("queue");
                out.push(TxItem { frame, sock }).expect("room");
            }
            rig.io.mux(0);
            fill(&mut rig);
        }
        let st = Arc::clone(&rig.stats);
        assert_eq!(count(&st.recycled), 8);
        assert_eq!(count(&st.tx), 64, "the TX ring's 64 slots");
        assert_eq!(count(&st.tx_ring_full), 1);
        rig.io.flush(0);
        let mut sent: Vec<u32> = rig
            .kernel
            .transmit()
            .iter()
            .map(|f| sim::packet_id(f))
            .collect();
        rig.io.reap();
        rig.io.mux(1);
        assert_eq!(
            count(&st.tx),
            72,
            "the backlog's frames counted, though none was new"
        );
        rig.io.flush(1 + 50_000);
        sent.extend(rig.kernel.transmit().iter().map(|f| sim::packet_id(f)));
        assert_eq!(
            sent, ids,
            "all 72 sent once, in order, the backlog after the ring"
        );
    }
}
