//! The four rings of an AF_XDP socket as single-owner types — the paper's ring pointers (§3.2).
//!
//! Each ring is a power-of-two array shared with the kernel, a producer index and a consumer
//! index (free-running u32s; a slot is `index & mask`) and a flags word. One side only ever
//! writes the producer, the other only the consumer (af_xdp.rst):
//!
//! | ring | user space | kernel | paper (Figure 5) |
//! |---|---|---|---|
//! | [`FillRing`] | produces empty frames | consumes them to receive into | *reserved* |
//! | [`RxRing`] | consumes received frames | produces | *received* / *processed* |
//! | [`TxRing`] | produces frames to send | consumes them | *ready* / *sent* |
//! | [`CompRing`] | consumes sent frames | produces | *recycled* |
//!
//! Each type owns its side outright: it is `Send` (it moves into the thread that runs it) but
//! not `Sync` and not `Clone`, and every operation takes `&mut self` — so two threads can never
//! drive the same side of a ring, which is what the lock-free protocol assumes. The indices the
//! other side writes are read with acquire ordering and cached; our index is published with
//! release ordering after the slots are written (or read), once per batch.

use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering, fence};

use crate::error::AfxdpError;
use crate::socket::SocketFd;
use crate::sys::Mmap;
use crate::umem::{Frame, FrameState, Umem};

/// Where the parts of a ring lie in its mapping (`struct xdp_ring_offset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RingOffsets {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

/// The memory behind a ring: a kernel mapping, or heap memory in unit tests.
pub(crate) trait Backing: Send + std::fmt::Debug {}
impl<T: Send + std::fmt::Debug> Backing for T {}

/// One side of a ring of `T` (see the module essay).
#[derive(Debug)]
pub(crate) struct RawRing<T> {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut T,
    mask: u32,
    size: u32,
    /// Our view of the producer index (ours on a producer ring, the kernel's otherwise).
    prod: u32,
    /// Our view of the consumer index.
    cons: u32,
    _backing: Box<dyn Backing>,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: the ring's memory is a mapping (or heap block) owned through `_backing` and valid
// wherever the value goes; the protocol needs each side driven by one thread at a time, which
// `&mut self` on every operation and the absence of `Sync` and `Clone` guarantee.
unsafe impl<T: Send> Send for RawRing<T> {}

impl<T: Copy> RawRing<T> {
    /// A ring over `base` (kept alive by `backing`) laid out by `off`, `size` entries.
    ///
    /// # Safety
    /// `base + off.*` must point at properly aligned producer, consumer and flags words and at
    /// `size` (a power of two) slots of `T`, all inside memory that `backing` keeps mapped.
    pub(crate) unsafe fn new(
        base: *mut u8,
        off: RingOffsets,
        size: u32,
        backing: Box<dyn Backing>,
    ) -> Self {
        debug_assert!(size.is_power_of_two());
        // SAFETY: the caller guarantees the offsets lie inside the mapping.
        let (producer, consumer, flags, desc) = unsafe {
            (
                base.add(off.producer as usize) as *const AtomicU32,
                base.add(off.consumer as usize) as *const AtomicU32,
                base.add(off.flags as usize) as *const AtomicU32,
                base.add(off.desc as usize) as *mut T,
            )
        };
        let mut r = Self {
            producer,
            consumer,
            flags,
            desc,
            mask: size - 1,
            size,
            prod: 0,
            cons: 0,
            _backing: backing,
            _not_sync: PhantomData,
        };
        r.prod = r.producer().load(Ordering::Acquire);
        r.cons = r.consumer().load(Ordering::Acquire);
        r
    }

    /// A ring over the kernel's mapping `m` laid out by `off`, `size` entries — `None` unless
    /// the three index words and the `size` slots lie inside the mapping, aligned. The ring
    /// keeps the mapping.
    pub(crate) fn over_mapping(m: Mmap, off: RingOffsets, size: u32) -> Option<Self> {
        let len = m.len() as u64;
        let word = |o: u64| o.is_multiple_of(4) && o.checked_add(4).is_some_and(|end| end <= len);
        let slots = u64::from(size).checked_mul(size_of::<T>() as u64);
        let ok = size.is_power_of_two()
            && word(off.producer)
            && word(off.consumer)
            && word(off.flags)
            && off.desc.is_multiple_of(align_of::<T>() as u64)
            && slots
                .and_then(|s| off.desc.checked_add(s))
                .is_some_and(|end| end <= len);
        if !ok {
            return None;
        }
        let base = m.as_ptr();
        // SAFETY: the mapping is page-aligned and the checks above put every word and slot
        // inside it at an offset aligned for its type; `m` moves into the ring, which keeps it
        // mapped as long as it lives.
        Some(unsafe { Self::new(base, off, size, Box::new(m)) })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: valid and aligned for the ring's lifetime (constructor contract).
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.consumer }
    }

    /// Entries.
    pub(crate) fn size(&self) -> u32 {
        self.size
    }

    /// Whether the kernel asks to be woken (`XDP_RING_NEED_WAKEUP`).
    pub(crate) fn needs_wakeup(&self) -> bool {
        // The flag is set by the kernel after it looked at the ring; order our index store
        // before this load.
        fence(Ordering::SeqCst);
        // SAFETY: valid and aligned for the ring's lifetime (constructor contract).
        let flags = unsafe { &*self.flags };
        flags.load(Ordering::Acquire) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// Sets the flags word, as the kernel does (need_wakeup): the heap rings' kernel side.
    #[cfg(test)]
    pub(crate) fn set_flags(&self, v: u32) {
        // SAFETY: valid and aligned for the ring's lifetime (constructor contract); an atomic
        // store, as the kernel's.
        let flags = unsafe { &*self.flags };
        flags.store(v, Ordering::Release);
    }

    // ---- producer side ----

    /// Free slots, refreshing the consumer index only when fewer than `want` are known free.
    pub(crate) fn free(&mut self, want: u32) -> u32 {
        let free = self.size - self.prod.wrapping_sub(self.cons);
        if free >= want {
            return free;
        }
        self.cons = self.consumer().load(Ordering::Acquire);
        self.size - self.prod.wrapping_sub(self.cons)
    }

    /// Writes slot `prod + i` (not yet visible).
    pub(crate) fn write(&mut self, i: u32, v: T) {
        let slot = (self.prod.wrapping_add(i) & self.mask) as usize;
        // SAFETY: slot <= mask < size: inside the descriptor array; the slot is free (the
        // caller asked `free`), so the kernel does not read it until we publish.
        unsafe { self.desc.add(slot).write_volatile(v) };
    }

    /// Publishes `n` written slots.
    pub(crate) fn submit(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.prod = self.prod.wrapping_add(n);
        self.producer().store(self.prod, Ordering::Release);
    }

    /// Entries produced but not yet consumed by the other side.
    pub(crate) fn in_flight(&mut self) -> u32 {
        self.cons = self.consumer().load(Ordering::Acquire);
        self.prod.wrapping_sub(self.cons)
    }

    // ---- consumer side ----

    /// Entries ready, refreshing the producer index only when fewer than `want` are known.
    pub(crate) fn ready(&mut self, want: u32) -> u32 {
        let n = self.prod.wrapping_sub(self.cons);
        if n >= want {
            return n;
        }
        self.prod = self.producer().load(Ordering::Acquire);
        self.prod.wrapping_sub(self.cons)
    }

    /// Reads slot `cons + i`.
    pub(crate) fn read(&self, i: u32) -> T {
        let slot = (self.cons.wrapping_add(i) & self.mask) as usize;
        // SAFETY: inside the array; the slot was published by the producer (the caller asked
        // `ready`) and is not reused before we release it.
        unsafe { self.desc.add(slot).read_volatile() }
    }

    /// Releases `n` read slots to the producer.
    pub(crate) fn release(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.cons = self.cons.wrapping_add(n);
        self.consumer().store(self.cons, Ordering::Release);
    }
}

/// The fill ring: empty frames for the kernel to receive into.
#[derive(Debug)]
pub struct FillRing {
    pub(crate) ring: RawRing<u64>,
    pub(crate) umem: Arc<Umem>,
    pub(crate) fd: Arc<SocketFd>,
}

impl FillRing {
    /// Hands frames from the end of `frames` to the kernel, as many as fit; returns how many.
    /// Refuses the lot — nothing written, `frames` untouched — when one it would hand over
    /// belongs to another UMEM than the ring's.
    pub fn fill(&mut self, frames: &mut Vec<Frame>) -> Result<u32, AfxdpError> {
        let n = self.ring.free(frames.len() as u32).min(frames.len() as u32);
        for f in &frames[frames.len() - n as usize..] {
            self.umem.check_owns(f)?;
        }
        let mask = !(u64::from(self.umem.config().frame_size) - 1);
        for i in 0..n {
            let Some(f) = frames.pop() else { break };
            let (addr, _) = self.umem.give(f, FrameState::Free, FrameState::Fill);
            self.ring.write(i, addr & mask);
        }
        self.ring.submit(n);
        Ok(n)
    }

    /// Frames in the ring (given, not yet received into).
    pub fn queued(&mut self) -> u32 {
        self.ring.in_flight()
    }

    /// Entries.
    pub fn size(&self) -> u32 {
        self.ring.size()
    }

    /// Wakes the driver when it asked for it (need_wakeup); returns whether it did.
    pub fn wake_if_needed(&self) -> bool {
        if self.ring.needs_wakeup() {
            crate::sys::wake_rx(self.fd.as_fd().as_raw_fd());
            return true;
        }
        false
    }
}

/// The RX ring: received frames.
#[derive(Debug)]
pub struct RxRing {
    pub(crate) ring: RawRing<libc::xdp_desc>,
    pub(crate) umem: Arc<Umem>,
    pub(crate) fd: Arc<SocketFd>,
}

impl RxRing {
    /// Takes up to `max` received frames into `out`; returns how many descriptors were read
    /// and how many of them were invalid (outside the pool: never expected, counted).
    pub fn recv(&mut self, out: &mut Vec<Frame>, max: u32) -> (u32, u32) {
        let n = self.ring.ready(max).min(max);
        let mut bad = 0;
        for i in 0..n {
            let d = self.ring.read(i);
            match self
                .umem
                .take(d.addr, d.len, FrameState::Fill, FrameState::Rx)
            {
                Some(f) => out.push(f),
                None => bad += 1,
            }
        }
        self.ring.release(n);
        (n, bad)
    }

    /// The socket's descriptor (for `ppoll`).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_fd().as_raw_fd()
    }
}

/// Why [`TxRing::push`] did not take a frame; the frame comes back with it.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// No free slot: try again once the kernel has consumed some.
    Full(Frame),
    /// The frame belongs to another UMEM than the ring's.
    Foreign(Frame),
}

impl Refused {
    /// The frame, whatever the reason.
    pub fn into_frame(self) -> Frame {
        match self {
            Self::Full(f) | Self::Foreign(f) => f,
        }
    }
}

/// The TX ring: frames to transmit.
#[derive(Debug)]
pub struct TxRing {
    pub(crate) ring: RawRing<libc::xdp_desc>,
    pub(crate) umem: Arc<Umem>,
    pub(crate) fd: Arc<SocketFd>,
    /// Written, not yet published.
    pub(crate) written: u32,
}

impl TxRing {
    /// Writes `f` into the next free slot (published by [`TxRing::submit`]); gives it back when
    /// the ring is full or `f` belongs to another UMEM.
    pub fn push(&mut self, f: Frame) -> Result<(), Refused> {
        if !self.umem.owns(&f) {
            return Err(Refused::Foreign(f));
        }
        if self.ring.free(self.written + 1) <= self.written {
            return Err(Refused::Full(f));
        }
        let (addr, len) = self.umem.give(f, FrameState::Thread, FrameState::Tx);
        self.ring.write(
            self.written,
            libc::xdp_desc {
                addr,
                len,
                options: 0,
            },
        );
        self.written += 1;
        Ok(())
    }

    /// Publishes what [`TxRing::push`] wrote.
    pub fn submit(&mut self) {
        self.ring.submit(self.written);
        self.written = 0;
    }

    /// Descriptors published but not yet taken by the kernel.
    pub fn in_flight(&mut self) -> u32 {
        self.ring.in_flight()
    }

    /// Entries.
    pub fn size(&self) -> u32 {
        self.ring.size()
    }

    /// Asks the kernel to transmit when it asked for it (need_wakeup; always so in copy mode).
    /// Returns whether a `sendto` was made.
    pub fn kick_if_needed(&self) -> std::io::Result<bool> {
        if self.ring.needs_wakeup() {
            crate::sys::kick_tx(self.fd.as_fd().as_raw_fd())?;
            return Ok(true);
        }
        Ok(false)
    }
}

/// The completion ring: frames the kernel has sent.
#[derive(Debug)]
pub struct CompRing {
    pub(crate) ring: RawRing<u64>,
    pub(crate) umem: Arc<Umem>,
    #[allow(dead_code)] // keeps the socket open as long as the ring is mapped
    pub(crate) fd: Arc<SocketFd>,
}

impl CompRing {
    /// Takes up to `max` sent frames into `out` (now `Free`); returns how many descriptors were
    /// read and how many of them were invalid (outside the pool: never expected, counted —
    /// the I/O thread's `comp_invalid`).
    pub fn reap(&mut self, out: &mut Vec<Frame>, max: u32) -> (u32, u32) {
        let n = self.ring.ready(max).min(max);
        let mut bad = 0;
        for i in 0..n {
            let addr = self.ring.read(i);
            match self.umem.take(addr, 0, FrameState::Tx, FrameState::Free) {
                Some(f) => out.push(f),
                None => bad += 1,
            }
        }
        self.ring.release(n);
        (n, bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::heap_ring;

    #[test]
    fn a_ring_over_a_mapping_is_made_only_when_the_layout_fits_inside_it() {
        let map = || Mmap::anonymous(4096).expect("mmap");
        let off = RingOffsets {
            producer: 0,
            consumer: 64,
            flags: 128,
            desc: 192,
        };
        // 192 + 64 × 16 bytes of descriptors fit in 4096
        assert!(RawRing::<libc::xdp_desc>::over_mapping(map(), off, 64).is_some());
        assert!(
            RawRing::<u64>::over_mapping(map(), off, 488).is_none(),
            "not a power of two"
        );
        assert!(
            RawRing::<u64>::over_mapping(map(), off, 512).is_none(),
            "slots past the end"
        );
        for bad in [
            RingOffsets { flags: 4094, ..off },
            RingOffsets {
                consumer: 66,
                ..off
            },
            RingOffsets {
                producer: u64::MAX - 1,
                ..off
            },
            RingOffsets { desc: 196, ..off },
            RingOffsets {
                desc: u64::MAX - 8,
                ..off
            },
        ] {
            assert!(
                RawRing::<libc::xdp_desc>::over_mapping(map(), bad, 64).is_none(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn producer_and_consumer_wrap_and_see_each_other_per_batch() {
        let (mut p, mut c) = heap_ring::<u64>(8);
        let mut next = 0u64;
        let mut expect = 0u64;
        for round in 0..100 {
            let want = (round % 7 + 1) as u32;
            let free = p.free(want);
            let n = want.min(free);
            for i in 0..n {
                p.write(i, next);
                next += 1;
            }
            assert_eq!(c.ready(1), 0, "nothing visible before submit");
            p.submit(n);
            let got = c.ready(8);
            for i in 0..got {
                assert_eq!(c.read(i), expect);
                expect += 1;
            }
            c.release(got);
        }
        assert_eq!(next, expect);
        assert!(next > 8 * 10, "wrapped many times");
    }

    #[test]
    fn a_full_ring_refuses_until_the_consumer_releases() {
        let (mut p, mut c) = heap_ring::<u64>(4);
        assert_eq!(p.free(4), 4);
        for i in 0..4 {
            p.write(i, u64::from(i));
        }
        p.submit(4);
        assert_eq!(p.free(1), 0);
        assert_eq!(p.in_flight(), 4);
        assert_eq!(c.ready(4), 4);
        c.release(3);
        assert_eq!(p.free(1), 3);
        assert_eq!(p.in_flight(), 1);
        assert!(!p.needs_wakeup());
    }
}

#[cfg(test)]
mod misuse {
    use super::*;
    use crate::sim;
    use crate::umem::UmemConfig;

    fn umem(frames: u32) -> Arc<Umem> {
        Arc::new(
            Umem::new(UmemConfig {
                frames,
                frame_size: 2048,
                check_frames: true,
            })
            .expect("UMEM"),
        )
    }

    #[test]
    fn the_fill_ring_refuses_a_frame_of_another_umem_and_writes_nothing() {
        let (a, b) = (umem(16), umem(16));
        let (mut rings, mut kernel) = sim::socket(&a, 64);
        let mut ours = a.take_frames().unwrap();
        let theirs = b.take_frames().unwrap().pop().unwrap();
        ours.push(theirs);
        let e = rings.fill.fill(&mut ours).unwrap_err();
        assert!(
            matches!(e, AfxdpError::ForeignFrame { frame, pool } if frame == b.id() && pool == a.id()),
            "{e}"
        );
        assert_eq!(ours.len(), 17, "every frame left where it was");
        assert_eq!(rings.fill.queued(), 0, "nothing handed to the kernel");
        assert!(kernel.fill_held().is_empty());
        assert_eq!(a.ledger().unwrap().count(FrameState::Free), 16);
        // without the stranger, the lot goes in
        let theirs = ours.pop().unwrap();
        assert_eq!(theirs.pool(), b.id());
        assert_eq!(rings.fill.fill(&mut ours).unwrap(), 16);
        assert_eq!(kernel.fill_held().len(), 16);
    }

    #[test]
    fn the_tx_ring_refuses_a_frame_of_another_umem_and_gives_it_back() {
        let (a, b) = (umem(16), umem(16));
        let (mut rings, mut kernel) = sim::socket(&a, 64);
        let mut theirs = b.take_frames().unwrap().pop().unwrap();
        b.write(&mut theirs, 256, &[1, 2, 3]).unwrap();
        b.pass(&theirs, FrameState::Free, FrameState::Thread);
        let back = match rings.tx.push(theirs) {
            Err(Refused::Foreign(f)) => f,
            other => panic!("a foreign frame was not refused: {other:?}"),
        };
        assert_eq!((back.pool(), back.len()), (b.id(), 3), "handed back intact");
        rings.tx.submit();
        assert_eq!(rings.tx.in_flight(), 0);
        assert!(kernel.transmit().is_empty(), "nothing reached the kernel");
        assert_eq!(b.ledger().unwrap().state(15), Some(FrameState::Thread));
    }

    #[test]
    fn reaping_counts_a_completion_outside_the_pool_and_recycles_the_rest() {
        let a = umem(16);
        let (mut rings, mut kernel) = sim::socket(&a, 64);
        let mut f = a.take_frames().unwrap().pop().unwrap();
        a.write(&mut f, 256, &[9; 60]).unwrap();
        a.pass(&f, FrameState::Free, FrameState::Thread);
        rings.tx.push(f).unwrap();
        rings.tx.submit();
        assert_eq!(kernel.transmit(), vec![vec![9u8; 60]]);
        kernel.complete_raw(16 * 2048); // one chunk past the pool
        kernel.complete_raw(1 << 44); // far past it (wraps to chunk 0 in 32 bits)
        let mut out = Vec::new();
        assert_eq!(rings.comp.reap(&mut out, 64), (3, 2));
        assert_eq!(out.len(), 1, "the real completion is recycled");
        assert_eq!(a.frame_index(out[0].addr()), 15);
        assert_eq!(a.ledger().unwrap().count(FrameState::Free), 16);
        assert_eq!(
            rings.comp.reap(&mut out, 64),
            (0, 0),
            "and all were released"
        );
    }
}
