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
//! it is created only where the kernel hands a chunk back (RX and completion rings) or once at
//! start ([`Umem::take_frames`]). It moves — between rings, threads and queues — and whoever
//! holds it may borrow the chunk's bytes ([`Umem::packet`]). The kernel touches a chunk only
//! while it sits in the fill or TX ring, when no `Frame` for it exists. So no two parties ever
//! write a chunk at once.
//!
//! **Invariants** — what makes [`Umem::packet`] sound from safe code, each held by
//! construction (a `Frame`'s fields are private, and only this module makes or changes one):
//! 1. *A frame knows its pool.* Every `Umem` gets a [`UmemId`] from a process-wide counter that
//!    is never reused (it refuses to wrap), and every `Frame` carries its pool's. [`Umem::packet`]
//!    and [`Umem::pass`] panic on a frame of another pool (a bug in the plane, like a ledger
//!    violation); the calls that return a `Result` — [`Umem::set_packet`], [`Umem::write`], the
//!    fill and TX rings, [`XskSocket::bind`](crate::XskSocket::bind) with a first socket over
//!    another pool — refuse it with an error and hand the frame back.
//! 2. *A frame lies inside its chunk.* `addr >> log2(frame_size) < frames`, and
//!    `head + len <= frame_size` with `head < frame_size` (`head` = `addr` − chunk base), so a
//!    descriptor never names the next chunk or the end of the mapping. Descriptors from the
//!    kernel are checked before they become frames; setters refuse an offset or a length that
//!    would break it ([`AfxdpError::FrameBounds`]) rather than clamp.
//! 3. *One frame per chunk.* [`Umem::take_frames`] hands every chunk out once per pool; the
//!    rings make a frame only from a descriptor the kernel returns, and the kernel returns a
//!    chunk only once per hand-over (the ledger, when kept, checks even that).
//!
//! Why an identity and not a type brand (`Frame<'pool>`): a lifetime brand would have to
//! follow frames through the threads, queues and rings, all of them `'static` today; the
//! identity is a `u32` that fits the padding of the 16-byte `Frame` (asserted below) and costs
//! one comparison where a frame enters a ring or is dereferenced.
//!
//! **The ledger** ([`FrameState`]): with `check_frames` (on by default in debug builds, and
//! in every test that asks for it), each chunk's state is recorded and every hand-over checks
//! it: `Free → Fill → Rx → Thread → Tx → Free` (TX completion), or `Thread → Free` (dropped and
//! recycled). A hand-over from the wrong state — a frame recycled twice, a descriptor the kernel
//! returned that it was never given — panics with the frame and both states: a bug in the
//! plane, found where it happens instead of as a corrupted packet later.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};

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

/// A UMEM's identity in this process: never reused, so a frame of a dropped pool is not
/// mistaken for one of a pool mapped later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UmemId(u32);

impl fmt::Display for UmemId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UMEM #{}", self.0)
    }
}

/// The next identity to hand out (0 is never one).
static NEXT_UMEM_ID: AtomicU32 = AtomicU32::new(1);

impl UmemId {
    /// A fresh identity, or `None` once 2³² − 2 pools have been made (the counter never wraps).
    fn fresh() -> Option<Self> {
        NEXT_UMEM_ID
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1))
            .ok()
            .map(Self)
    }
}

/// The packet pool.
pub struct Umem {
    area: Mmap,
    cfg: UmemConfig,
    shift: u32,
    id: UmemId,
    /// [`Umem::take_frames`] was called: every chunk has had its frame.
    issued: AtomicBool,
    ledger: Option<Ledger>,
}

impl fmt::Debug for Umem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Umem")
            .field("id", &self.id)
            .field("frames", &self.cfg.frames)
            .field("frame_size", &self.cfg.frame_size)
            .field("check_frames", &self.ledger.is_some())
            .finish()
    }
}

/// The right to one chunk of a UMEM, and where the packet is in it. Not `Clone`: see the
/// module essay. Only this crate makes or changes one, so its invariants (its pool, inside its
/// chunk) hold wherever it goes; outside the crate neither compiles:
///
/// ```compile_fail,E0616
/// # use stator_afxdp::umem::{Frame, Umem, UmemConfig};
/// let u = Umem::new(UmemConfig { frames: 16, frame_size: 2048, check_frames: false }).unwrap();
/// let mut f = u.take_frames().unwrap().pop().unwrap();
/// f.addr += 2048; // private: a frame cannot be moved to another chunk
/// ```
///
/// ```compile_fail,E0451
/// # use stator_afxdp::umem::Frame;
/// let f = Frame { addr: 0, len: 0, pool: todo!() }; // private fields: no frame from nothing
/// ```
///
/// ```compile_fail,E0599
/// # use stator_afxdp::umem::{Frame, Umem, UmemConfig};
/// let u = Umem::new(UmemConfig { frames: 16, frame_size: 2048, check_frames: false }).unwrap();
/// let f = u.take_frames().unwrap().pop().unwrap();
/// let twin = f.clone(); // not Clone: one frame per chunk
/// ```
///
/// ```compile_fail,E0133
/// # use stator_afxdp::umem::{Frame, Umem, UmemConfig};
/// let u = Umem::new(UmemConfig { frames: 16, frame_size: 2048, check_frames: false }).unwrap();
/// let f = Frame::forge(&u, 0, 0); // forging is `unsafe`: the caller vouches for ownership
/// ```
///
/// What the four above do wrong, done right:
///
/// ```
/// # use stator_afxdp::umem::{Frame, Umem, UmemConfig};
/// let u = Umem::new(UmemConfig { frames: 16, frame_size: 2048, check_frames: false }).unwrap();
/// let mut f = u.take_frames().unwrap().pop().unwrap();
/// u.set_packet(&mut f, 256, 64).unwrap(); // checked: inside the chunk
/// assert!(u.set_packet(&mut f, 2048, 0).is_err()); // the next chunk's address: refused
/// // SAFETY: chunk 0 is not in use (`f` is chunk 15) and this is its only frame.
/// let forged = unsafe { Frame::forge(&u, 0, 0) }.unwrap();
/// assert_eq!((forged.pool(), f.pool()), (u.id(), u.id()));
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    /// The descriptor address: chunk offset + packet offset in the chunk.
    addr: u64,
    /// The packet's length.
    len: u32,
    /// The pool the chunk belongs to.
    pool: UmemId,
}

// The identity rides in what was padding: moving a frame costs what it did.
const _: () = assert!(size_of::<Frame>() == 16);

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

    /// The pool the frame belongs to.
    pub fn pool(&self) -> UmemId {
        self.pool
    }

    /// Forges a frame of `umem` for a descriptor address; `None` when it lies outside the pool
    /// or crosses a chunk (the bounds are checked; ownership cannot be).
    ///
    /// # Safety
    /// The caller must own chunk `addr` of `umem`: no other `Frame` for it exists and the kernel
    /// does not hold it. Tests use this to prove the ledger catches a violation of exactly this
    /// rule; the plane itself never forges.
    pub unsafe fn forge(umem: &Umem, addr: u64, len: u32) -> Option<Self> {
        umem.frame_at(addr, len)
    }
}

impl Umem {
    /// Maps a zeroed pool (no socket yet: the first socket registers it).
    pub fn new(cfg: UmemConfig) -> Result<Self, AfxdpError> {
        cfg.validate()?;
        let id = UmemId::fresh().ok_or_else(|| {
            AfxdpError::invalid("UMEM identities exhausted (2^32 pools in one process)")
        })?;
        let len = cfg.frames as usize * cfg.frame_size as usize;
        let len = len.div_ceil(sys::page_size()) * sys::page_size();
        let area = Mmap::anonymous(len).map_err(|e| AfxdpError::io("mapping the UMEM", e))?;
        Ok(Self {
            area,
            cfg,
            shift: cfg.frame_size.trailing_zeros(),
            id,
            issued: AtomicBool::new(false),
            ledger: cfg.check_frames.then(|| Ledger::new(cfg.frames)),
        })
    }

    /// How it was built.
    pub fn config(&self) -> &UmemConfig {
        &self.cfg
    }

    /// Its identity (what its frames carry).
    pub fn id(&self) -> UmemId {
        self.id
    }

    /// Whether `f` is one of this pool's frames.
    #[inline]
    pub fn owns(&self, f: &Frame) -> bool {
        f.pool == self.id
    }

    /// `Ok` for one of this pool's frames, else the error that names both pools.
    #[inline]
    pub(crate) fn check_owns(&self, f: &Frame) -> Result<(), AfxdpError> {
        if self.owns(f) {
            Ok(())
        } else {
            Err(AfxdpError::ForeignFrame {
                frame: f.pool,
                pool: self.id,
            })
        }
    }

    /// The mapping's address and length (for `XDP_UMEM_REG`).
    pub(crate) fn region(&self) -> (u64, u64) {
        (self.area.as_ptr() as u64, self.area.len() as u64)
    }

    /// The ledger, when kept.
    pub fn ledger(&self) -> Option<&Ledger> {
        self.ledger.as_ref()
    }

    /// The index of the chunk holding descriptor address `addr` (saturated: an address past
    /// the pool gives an index past it, never one inside).
    #[inline]
    pub fn frame_index(&self, addr: u64) -> u32 {
        u32::try_from(addr >> self.shift).unwrap_or(u32::MAX)
    }

    /// Every frame, `Free` and empty, addressed at the start of its chunk — once per pool: a
    /// second call is refused, as a second frame for a chunk would break ownership.
    pub fn take_frames(&self) -> Result<Vec<Frame>, AfxdpError> {
        if self.issued.swap(true, Ordering::AcqRel) {
            return Err(AfxdpError::FramesTaken { pool: self.id });
        }
        Ok((0..u64::from(self.cfg.frames))
            .map(|i| Frame {
                addr: i << self.shift,
                len: 0,
                pool: self.id,
            })
            .collect())
    }

    /// A frame of this pool for descriptor `(addr, len)` if it lies inside one chunk of the
    /// pool (invariant 2), without touching the ledger.
    #[inline]
    fn frame_at(&self, addr: u64, len: u32) -> Option<Frame> {
        let chunk = addr >> self.shift;
        let head = addr - (chunk << self.shift);
        if chunk >= u64::from(self.cfg.frames)
            || head + u64::from(len) > u64::from(self.cfg.frame_size)
        {
            return None;
        }
        Some(Frame {
            addr,
            len,
            pool: self.id,
        })
    }

    /// Records a hand-over of the frame at `addr` (when the ledger is kept); panics on a
    /// violation.
    #[inline]
    fn hand_over(&self, addr: u64, from: FrameState, to: FrameState) {
        if let Some(l) = &self.ledger
            && let Err(v) = l.check(self.frame_index(addr), from, to)
        {
            panic!("AF_XDP frame ledger: {v}");
        }
    }

    /// Turns a descriptor the kernel returned into a frame, or `None` when it lies outside the
    /// pool or crosses a chunk (counted by the caller as an invalid descriptor).
    #[inline]
    pub(crate) fn take(
        &self,
        addr: u64,
        len: u32,
        from: FrameState,
        to: FrameState,
    ) -> Option<Frame> {
        let f = self.frame_at(addr, len)?;
        self.hand_over(addr, from, to);
        Some(f)
    }

    /// Ends `f` as a descriptor handed to the kernel. The ring checked `f` is ours.
    #[inline]
    pub(crate) fn give(&self, f: Frame, from: FrameState, to: FrameState) -> (u64, u32) {
        debug_assert!(self.owns(&f), "{} given to {}", f.pool, self.id);
        self.hand_over(f.addr, from, to);
        (f.addr, f.len)
    }

    /// Moves `f` between user-space owners (`Rx → Thread`, `Thread → Free`).
    ///
    /// # Panics
    /// On a frame of another pool (it would corrupt this pool's ledger), and on a ledger
    /// violation.
    #[inline]
    pub fn pass(&self, f: &Frame, from: FrameState, to: FrameState) {
        self.assert_owns(f);
        self.hand_over(f.addr, from, to);
    }

    #[inline]
    fn assert_owns(&self, f: &Frame) {
        assert!(
            self.owns(f),
            "AF_XDP: a frame of {} used with {}",
            f.pool,
            self.id
        );
    }

    /// The chunk base and the packet's offset in it.
    #[inline]
    fn split(&self, f: &Frame) -> (u64, usize) {
        let base = f.addr >> self.shift << self.shift;
        (base, (f.addr - base) as usize)
    }

    /// The packet in `f` as a [`PacketBuf`](stator_core::PacketBuf) over its chunk: the bytes
    /// in front of it are headroom the forwarder may grow into. Borrowing `f` mutably is what
    /// makes this exclusive.
    ///
    /// # Panics
    /// On a frame of another pool: its address means nothing here (a bug in the plane).
    #[inline]
    pub fn packet<'a>(&'a self, f: &'a mut Frame) -> SlicePacketBuf<'a> {
        self.assert_owns(f);
        let (base, head) = self.split(f);
        let size = self.cfg.frame_size as usize;
        // SAFETY: `f` is this pool's (checked above), so by invariant 2 `base` is the offset of
        // one of its chunks and `size` bytes from it are inside the mapping, which stays mapped
        // while `self` lives. Holding `&mut Frame` — and Frame is neither Clone nor Copy, and
        // each chunk has one (invariant 3) — means no other reference to this chunk exists, and
        // the kernel does not touch a chunk while a Frame for it exists (it is in no fill or TX
        // ring).
        let chunk =
            unsafe { std::slice::from_raw_parts_mut(self.area.as_ptr().add(base as usize), size) };
        SlicePacketBuf::new(chunk, head, f.len as usize)
    }

    /// Makes `f` describe the packet at offset `head` of its chunk, `len` bytes long (after
    /// processing: the forwarder may have grown it at the head). Refuses, leaving `f` as it
    /// was, a packet that would not lie inside the chunk (`head < frame_size`,
    /// `head + len <= frame_size`) or a frame of another pool.
    #[inline]
    pub fn set_packet(&self, f: &mut Frame, head: usize, len: usize) -> Result<(), AfxdpError> {
        let base = self.check_packet(f, head, len)?;
        f.addr = base + head as u64;
        f.len = len as u32;
        Ok(())
    }

    /// Copies `bytes` into `f`'s chunk at `head` and makes `f` describe them (tests, tools).
    /// Refuses, writing nothing, what would not fit the chunk or a frame of another pool.
    pub fn write(&self, f: &mut Frame, head: usize, bytes: &[u8]) -> Result<(), AfxdpError> {
        let base = self.check_packet(f, head, bytes.len())?;
        // SAFETY: as in `packet`: the chunk is this pool's (checked), mapped, and exclusively
        // ours through `&mut f`; `head + bytes.len() <= frame_size` (checked) keeps the copy
        // inside it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.area.as_ptr().add(base as usize + head),
                bytes.len(),
            );
        }
        f.addr = base + head as u64;
        f.len = bytes.len() as u32;
        Ok(())
    }

    /// What the kernel does to a chunk it holds (the heap rings' stand-in for it): copies
    /// `bytes` to descriptor address `addr`. Panics outside the pool.
    ///
    /// # Safety
    /// No `Frame` for the chunk may exist: it is in a fill ring (the kernel's to write).
    #[cfg(test)]
    pub(crate) unsafe fn kernel_write(&self, addr: u64, bytes: &[u8]) {
        let f = self
            .frame_at(addr, bytes.len() as u32)
            .expect("a descriptor inside the pool");
        // SAFETY: inside the mapping (frame_at checked); the caller guarantees nobody else
        // holds the chunk.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.area.as_ptr().add(f.addr as usize),
                bytes.len(),
            );
        }
    }

    /// The bytes of descriptor `(addr, len)`, as the kernel reads a TX descriptor. Panics
    /// outside the pool.
    ///
    /// # Safety
    /// No `Frame` for the chunk may exist that someone writes through: it is in a TX ring.
    #[cfg(test)]
    pub(crate) unsafe fn kernel_read(&self, addr: u64, len: u32) -> Vec<u8> {
        let f = self
            .frame_at(addr, len)
            .expect("a descriptor inside the pool");
        // SAFETY: inside the mapping (frame_at checked); nobody writes the chunk meanwhile.
        unsafe {
            std::slice::from_raw_parts(self.area.as_ptr().add(f.addr as usize), len as usize)
                .to_vec()
        }
    }

    /// `f`'s chunk base, if `f` is ours and a packet at `head`, `len` bytes long, lies inside
    /// its chunk (invariant 2).
    #[inline]
    fn check_packet(&self, f: &Frame, head: usize, len: usize) -> Result<u64, AfxdpError> {
        self.check_owns(f)?;
        let size = self.cfg.frame_size as usize;
        if head >= size || len > size - head {
            return Err(AfxdpError::FrameBounds {
                head,
                len,
                frame_size: self.cfg.frame_size,
            });
        }
        Ok(self.split(f).0)
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

    fn pool(frames: u32, frame_size: u32) -> Umem {
        Umem::new(UmemConfig {
            frames,
            frame_size,
            check_frames: true,
        })
        .expect("UMEM")
    }

    #[test]
    fn frames_are_chunks_with_headroom() {
        let u = pool(16, 2048);
        let mut frames = u.take_frames().unwrap();
        assert_eq!(frames.len(), 16);
        let mut f = frames.pop().unwrap();
        assert_eq!(u.frame_index(f.addr()), 15);
        u.write(&mut f, 256, &[1, 2, 3]).unwrap();
        assert_eq!((f.addr(), f.len()), (15 * 2048 + 256, 3));
        {
            use stator_core::PacketBuf;
            let mut p = u.packet(&mut f);
            assert_eq!(p.data(), &[1, 2, 3]);
            assert_eq!(p.headroom(), 256);
            p.grow_head(14).unwrap();
            let (head, len) = (p.head(), p.len());
            u.set_packet(&mut f, head, len).unwrap();
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

    #[test]
    fn an_offset_or_length_past_the_frame_is_refused_and_the_frame_left_as_it_was() {
        let u = pool(16, 2048);
        let mut frames = u.take_frames().unwrap();
        // the last chunk: past it is the end of the mapping
        let mut f = frames.pop().unwrap();
        u.write(&mut f, 256, &[7; 10]).unwrap();
        let before = (f.addr(), f.len());
        // the issue's case: an empty packet at the frame's end names the next chunk
        for (head, len) in [(2048, 0), (2048, 1), (4096, 0), (2000, 49), (0, 2049)] {
            let e = u.set_packet(&mut f, head, len).unwrap_err();
            assert!(
                matches!(
                    e,
                    AfxdpError::FrameBounds {
                        frame_size: 2048,
                        ..
                    }
                ),
                "({head}, {len}): {e}"
            );
            assert!(u.write(&mut f, head, &vec![0; len]).is_err());
            assert_eq!(
                (f.addr(), f.len()),
                before,
                "({head}, {len}) changed nothing"
            );
        }
        assert!(
            u.set_packet(&mut f, usize::MAX, 2).is_err(),
            "no overflow either"
        );
        // the edges that fit
        u.set_packet(&mut f, 2047, 1).unwrap();
        u.set_packet(&mut f, 0, 2048).unwrap();
        u.write(&mut f, 2047, &[9]).unwrap();
        assert_eq!(u.frame_index(f.addr()), 15, "still its own chunk");
        use stator_core::PacketBuf;
        assert_eq!(u.packet(&mut f).data(), &[9]);
        // a kernel descriptor far past the pool does not wrap into it
        assert!(
            u.take(1 << 43, 0, FrameState::Free, FrameState::Fill)
                .is_none()
        );
        assert_eq!(u.frame_index(u64::MAX), u32::MAX);
    }

    #[test]
    fn a_pool_hands_out_its_frames_once_with_its_own_identity() {
        let (a, b) = (pool(16, 2048), pool(16, 2048));
        assert_ne!(a.id(), b.id(), "identities are never shared");
        let fa = a.take_frames().unwrap();
        assert!(matches!(
            a.take_frames(),
            Err(AfxdpError::FramesTaken { pool }) if pool == a.id()
        ));
        assert!(
            fa.iter()
                .all(|f| f.pool() == a.id() && a.owns(f) && !b.owns(f))
        );
        // a pool made after another was dropped does not take its identity
        let gone = a.id();
        drop(fa);
        drop(a);
        assert_ne!(pool(16, 2048).id(), gone);
    }

    #[test]
    fn a_frame_of_another_pool_is_refused() {
        let (a, b) = (pool(16, 2048), pool(32, 4096));
        let mut fb = b.take_frames().unwrap().pop().unwrap(); // chunk 31 of b: past a's end
        let e = a.set_packet(&mut fb, 0, 1).unwrap_err();
        assert!(
            matches!(e, AfxdpError::ForeignFrame { frame, pool } if frame == b.id() && pool == a.id()),
            "{e}"
        );
        assert!(e.to_string().contains(&b.id().to_string()));
        assert!(a.write(&mut fb, 0, &[1]).is_err());
        let packet = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            a.packet(&mut fb);
        }));
        assert!(packet.is_err(), "packet() on a foreign frame panics");
        let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            a.pass(&fb, FrameState::Free, FrameState::Thread);
        }));
        assert!(pass.is_err(), "pass() on a foreign frame panics");
        assert_eq!(
            a.ledger().unwrap().count(FrameState::Free),
            16,
            "a's ledger untouched"
        );
        // SAFETY: chunk 3 of `a` is not in use: none of a's frames were taken.
        let forged = unsafe { Frame::forge(&a, 3 * 2048, 100) }.expect("inside");
        assert!(a.owns(&forged));
        // SAFETY: as above; this one is refused before any frame exists.
        assert!(unsafe { Frame::forge(&a, 16 * 2048, 0) }.is_none());
        // SAFETY: as above.
        assert!(unsafe { Frame::forge(&a, 2000, 100) }.is_none());
    }
}
