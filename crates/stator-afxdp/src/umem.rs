//! The UMEM — the paper's packet pool (§3.2) — and the frames in it.
//!
//! One anonymous mapping of `frames × frame_size` bytes, registered with the kernel on the
//! plane's first socket and shared by every socket of the plane (`XDP_SHARED_UMEM`), so a
//! frame received on one interface can be transmitted on another without a copy. Frames are
//! aligned chunks ("aligned mode"); a descriptor's address is the chunk's offset plus where the
//! packet starts in it, so `address − chunk base` is the headroom in front of the packet
//! (`XDP_PACKET_HEADROOM` = 256 bytes in copy mode), which is where the forwarder writes its
//! outer headers.
//!
//! **Ownership.** A [`Frame`] is the right to touch one chunk: it is not `Clone` or `Copy`, and
//! it is created only where the kernel hands a chunk back (RX and completion rings) or at start.
//! It moves — between rings, threads and queues — and whoever holds it may borrow the chunk's
//! bytes ([`Umem::packet`]). The kernel touches a chunk only while it sits in the fill or TX
//! ring, when no `Frame` for it exists. So no two parties ever write a chunk at once.
//!
//! **The ledger** ([`FrameState`]): with `check_frames` (on by default in debug builds, and
//! in every test that asks for it), each chunk's state is recorded and every hand-over checks
//! it: `Free → Fill → Rx → Thread → Tx → Free` (TX completion), or `Thread → Free` (dropped and
//! recycled). A hand-over from the wrong state — a frame recycled twice, a descriptor the kernel
//! returned that it was never given — panics with the frame and both states: a bug in the
//! plane, found where it happens instead of as a corrupted packet later.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

use stator_core::SlicePacketBuf;

use crate::error::AfxdpError;
use crate::sys::{self, Mmap};

/// Chunk sizes the kernel accepts in aligned mode.
pub const FRAME_SIZES: [u32; 2] = [2048, 4096];

/// The headroom the kernel leaves in front of a received packet (`XDP_PACKET_HEADROOM`).
pub const KERNEL_HEADROOM: u32 = 256;

/// How a UMEM is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UmemConfig {
    /// Number of frames (the packet pool's size).
    pub frames: u32,
    /// Bytes per frame: 2048 or 4096.
    pub frame_size: u32,
    /// Keep the per-frame ledger and check every hand-over.
    pub check_frames: bool,
}

impl Default for UmemConfig {
    fn default() -> Self {
        Self {
            frames: 8192,
            frame_size: 4096,
            check_frames: cfg!(debug_assertions),
        }
    }
}

impl UmemConfig {
    /// The longest packet a frame holds: the frame less the kernel's headroom.
    pub fn max_packet(&self) -> u32 {
        self.frame_size - KERNEL_HEADROOM
    }

    /// Checks the sizes.
    pub fn validate(&self) -> Result<(), AfxdpError> {
        if !FRAME_SIZES.contains(&self.frame_size) {
            return Err(AfxdpError::invalid(format!(
                "frame_size {} (2048 or 4096)",
                self.frame_size
            )));
        }
        if self.frames < 16 || self.frames > 1 << 20 {
            return Err(AfxdpError::invalid(format!(
                "frames {} (16 ..= 1048576)",
                self.frames
            )));
        }
        Ok(())
    }
}

/// Where a frame is in its cycle (the ledger's states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameState {
    /// In user space, unused (the I/O thread's free list).
    Free = 0,
    /// In a fill ring: the kernel may write it.
    Fill = 1,
    /// Received: taken from an RX ring by the steering step.
    Rx = 2,
    /// Handed to a packet thread (and on its way to the muxing step).
    Thread = 3,
    /// In a TX ring: the kernel reads it until it completes.
    Tx = 4,
}

impl FrameState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Fill,
            2 => Self::Rx,
            3 => Self::Thread,
            4 => Self::Tx,
            _ => Self::Free,
        }
    }
}

/// A frame a hand-over did not expect: a bug in the plane (or the kernel returned an address it
/// was never given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerViolation {
    /// The frame's index.
    pub frame: u32,
    /// The state the hand-over requires.
    pub expected: FrameState,
    /// The state the frame was in.
    pub actual: FrameState,
    /// The state it was being moved to.
    pub to: FrameState,
}

impl fmt::Display for LedgerViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "frame {} moved {:?} → {:?} but it is {:?} (a frame handed over twice, or one the \
             plane does not own)",
            self.frame, self.expected, self.to, self.actual
        )
    }
}

/// The per-frame state record (see the module essay).
#[derive(Debug)]
pub struct Ledger {
    states: Vec<AtomicU8>,
}

impl Ledger {
    /// Every frame `Free`.
    pub fn new(frames: u32) -> Self {
        Self {
            states: (0..frames)
                .map(|_| AtomicU8::new(FrameState::Free as u8))
                .collect(),
        }
    }

    /// Moves frame `i` from `from` to `to`, or says why it cannot.
    pub fn check(&self, i: u32, from: FrameState, to: FrameState) -> Result<(), LedgerViolation> {
        let Some(s) = self.states.get(i as usize) else {
            return Err(LedgerViolation {
                frame: i,
                expected: from,
                actual: FrameState::Free,
                to,
            });
        };
        s.compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .map(drop)
            .map_err(|actual| LedgerViolation {
                frame: i,
                expected: from,
                actual: FrameState::from_u8(actual),
                to,
            })
    }

    /// Frame `i`'s state.
    pub fn state(&self, i: u32) -> Option<FrameState> {
        self.states
            .get(i as usize)
            .map(|s| FrameState::from_u8(s.load(Ordering::Acquire)))
    }

    /// How many frames are in `state`.
    pub fn count(&self, state: FrameState) -> usize {
        self.states
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) == state as u8)
            .count()
    }
}

/// The packet pool.
pub struct Umem {
    area: Mmap,
    cfg: UmemConfig,
    shift: u32,
    ledger: Option<Ledger>,
}

impl fmt::Debug for Umem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Umem")
            .field("frames", &self.cfg.frames)
            .field("frame_size", &self.cfg.frame_size)
            .field("check_frames", &self.ledger.is_some())
            .finish()
    }
}

/// The right to one chunk of the UMEM, and where the packet is in it. Not `Clone`: see the
/// module essay.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    /// The descriptor address: chunk offset + packet offset in the chunk.
    addr: u64,
    /// The packet's length.
    len: u32,
}

impl Frame {
    /// The descriptor address (chunk offset in the UMEM plus the packet's offset in the chunk).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The packet's length.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the frame holds no packet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forges a frame for a descriptor address.
    ///
    /// # Safety
    /// The caller must own chunk `addr` (no other `Frame` for it exists and the kernel does not
    /// hold it). Only the rings and the start-up use this; tests use it to prove the ledger
    /// catches a violation of exactly this rule.
    pub unsafe fn forge(addr: u64, len: u32) -> Self {
        Self { addr, len }
    }
}

impl Umem {
    /// Maps a zeroed pool (no socket yet: the first socket registers it).
    pub fn new(cfg: UmemConfig) -> Result<Self, AfxdpError> {
        cfg.validate()?;
        let len = cfg.frames as usize * cfg.frame_size as usize;
        let len = len.div_ceil(sys::page_size()) * sys::page_size();
        let area = Mmap::anonymous(len).map_err(|e| AfxdpError::io("mapping the UMEM", e))?;
        Ok(Self {
            area,
            cfg,
            shift: cfg.frame_size.trailing_zeros(),
            ledger: cfg.check_frames.then(|| Ledger::new(cfg.frames)),
        })
    }

    /// How it was built.
    pub fn config(&self) -> &UmemConfig {
        &self.cfg
    }

    /// The mapping's address and length (for `XDP_UMEM_REG`).
    pub(crate) fn region(&self) -> (u64, u64) {
        (self.area.as_ptr() as u64, self.area.len() as u64)
    }

    /// The ledger, when kept.
    pub fn ledger(&self) -> Option<&Ledger> {
        self.ledger.as_ref()
    }

    /// The index of the chunk holding descriptor address `addr`.
    #[inline]
    pub fn frame_index(&self, addr: u64) -> u32 {
        (addr >> self.shift) as u32
    }

    /// Every frame, `Free` and empty, addressed at the start of its chunk (start-up only).
    pub(crate) fn all_frames(&self) -> Vec<Frame> {
        (0..u64::from(self.cfg.frames))
            .map(|i| Frame {
                addr: i << self.shift,
                len: 0,
            })
            .collect()
    }

    /// Records a hand-over of `f` (when the ledger is kept); panics on a violation.
    #[inline]
    pub(crate) fn hand_over(&self, addr: u64, from: FrameState, to: FrameState) {
        if let Some(l) = &self.ledger
            && let Err(v) = l.check(self.frame_index(addr), from, to)
        {
            panic!("AF_XDP frame ledger: {v}");
        }
    }

    /// Turns a descriptor the kernel returned into a frame, or `None` when it lies outside the
    /// pool (counted by the caller as an invalid descriptor).
    #[inline]
    pub(crate) fn take(
        &self,
        addr: u64,
        len: u32,
        from: FrameState,
        to: FrameState,
    ) -> Option<Frame> {
        let end = addr.checked_add(u64::from(len))?;
        let chunk_end = ((addr >> self.shift) + 1) << self.shift;
        if self.frame_index(addr) >= self.cfg.frames || end > chunk_end {
            return None;
        }
        self.hand_over(addr, from, to);
        Some(Frame { addr, len })
    }

    /// Ends `f` as a descriptor handed to the kernel.
    #[inline]
    pub(crate) fn give(&self, f: Frame, from: FrameState, to: FrameState) -> (u64, u32) {
        self.hand_over(f.addr, from, to);
        (f.addr, f.len)
    }

    /// Moves `f` between user-space owners (`Rx → Thread`, `Thread → Free`).
    #[inline]
    pub fn pass(&self, f: &Frame, from: FrameState, to: FrameState) {
        self.hand_over(f.addr, from, to);
    }

    /// The packet in `f` as a [`PacketBuf`](stator_core::PacketBuf) over its chunk: the bytes
    /// in front of it are headroom the forwarder may grow into. Borrowing `f` mutably is what
    /// makes this exclusive.
    #[inline]
    pub fn packet<'a>(&'a self, f: &'a mut Frame) -> SlicePacketBuf<'a> {
        let base = f.addr >> self.shift << self.shift;
        let head = (f.addr - base) as usize;
        let size = self.cfg.frame_size as usize;
        // SAFETY: `base` is the offset of a chunk inside the mapping (every Frame is created
        // for an address checked against the pool), so `size` bytes from it are mapped and
        // stay mapped while `self` lives. Holding `&mut Frame` — and Frame is neither Clone nor
        // Copy — means no other reference to this chunk exists, and the kernel does not touch
        // a chunk while a Frame for it exists (it is in no fill or TX ring).
        let chunk =
            unsafe { std::slice::from_raw_parts_mut(self.area.as_ptr().add(base as usize), size) };
        SlicePacketBuf::new(chunk, head, f.len as usize)
    }

    /// Makes `f` describe `buf`'s packet after processing (the forwarder may have grown it at
    /// the head).
    #[inline]
    pub fn set_packet(&self, f: &mut Frame, head: usize, len: usize) {
        let base = f.addr >> self.shift << self.shift;
        f.addr = base + head as u64;
        f.len = len as u32;
    }

    /// Copies `bytes` into `f`'s chunk at `head` (tests, the AF_PACKET baseline): at most the
    /// rest of the chunk.
    pub fn write(&self, f: &mut Frame, head: usize, bytes: &[u8]) {
        let size = self.cfg.frame_size as usize;
        let head = head.min(size);
        let n = bytes.len().min(size - head);
        let base = f.addr >> self.shift << self.shift;
        // SAFETY: as in `packet`: the chunk is mapped and exclusively ours through `&mut f`;
        // `head + n <= size` keeps the copy inside it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.area.as_ptr().add(base as usize + head),
                n,
            );
        }
        self.set_packet(f, head, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_follows_the_cycle_and_catches_a_double_recycle() {
        let l = Ledger::new(4);
        let cycle = [
            (FrameState::Free, FrameState::Fill),
            (FrameState::Fill, FrameState::Rx),
            (FrameState::Rx, FrameState::Thread),
            (FrameState::Thread, FrameState::Tx),
            (FrameState::Tx, FrameState::Free),
        ];
        for (from, to) in cycle {
            l.check(2, from, to).unwrap();
        }
        assert_eq!(l.state(2), Some(FrameState::Free));
        // dropped by a packet thread: recycled once …
        for (from, to) in &cycle[..3] {
            l.check(1, *from, *to).unwrap();
        }
        l.check(1, FrameState::Thread, FrameState::Free).unwrap();
        // … and a second recycle is caught
        let v = l
            .check(1, FrameState::Thread, FrameState::Free)
            .unwrap_err();
        assert_eq!(v.actual, FrameState::Free);
        assert!(v.to_string().contains("handed over twice"));
        // a frame pushed to the fill ring twice
        l.check(0, FrameState::Free, FrameState::Fill).unwrap();
        assert!(l.check(0, FrameState::Free, FrameState::Fill).is_err());
        // a frame index outside the pool
        assert!(l.check(9, FrameState::Free, FrameState::Fill).is_err());
        assert_eq!(l.count(FrameState::Free), 3);
    }

    #[test]
    fn frames_are_chunks_with_headroom() {
        let u = Umem::new(UmemConfig {
            frames: 16,
            frame_size: 2048,
            check_frames: true,
        })
        .unwrap();
        let mut frames = u.all_frames();
        assert_eq!(frames.len(), 16);
        let mut f = frames.pop().unwrap();
        assert_eq!(u.frame_index(f.addr()), 15);
        u.write(&mut f, 256, &[1, 2, 3]);
        assert_eq!((f.addr(), f.len()), (15 * 2048 + 256, 3));
        {
            use stator_core::PacketBuf;
            let mut p = u.packet(&mut f);
            assert_eq!(p.data(), &[1, 2, 3]);
            assert_eq!(p.headroom(), 256);
            p.grow_head(14).unwrap();
            let (head, len) = (p.head(), p.len());
            u.set_packet(&mut f, head, len);
        }
        assert_eq!((f.addr(), f.len()), (15 * 2048 + 242, 17));
        // descriptors outside the pool or crossing a chunk are refused
        assert!(
            u.take(16 * 2048, 10, FrameState::Free, FrameState::Fill)
                .is_none()
        );
        assert!(
            u.take(2048 - 5, 10, FrameState::Free, FrameState::Fill)
                .is_none()
        );
        assert!(
            Umem::new(UmemConfig {
                frame_size: 3000,
                ..UmemConfig::default()
            })
            .is_err()
        );
    }
}
