//! The holder's rules (docs/forwarding.md §9): fragments that arrived before their first wait
//! here — bounded in frames, bytes and time — until the fragment table has a record for their
//! datagram, then go through the forwarder again.
//!
//! Pure: the data plane owns the frames' source and the clock. The XDP data plane fills a
//! [`HoldQueue`] with copies of the frames it reads from the `stator_hold` ring buffer and asks
//! the kernel's `stator_frag` whether a record exists; the AF_XDP data plane keeps the UMEM
//! frames themselves (only descriptors move there), taken on
//! [`Action::Hold`](crate::Action::Hold) verdicts, and asks its own
//! [`Forwarder`](crate::Forwarder). So the queue is generic over what it keeps — a [`HoldFrame`]
//! — and over where a frame arrived (an interface index, a socket), and one set of rules counts
//! for both planes.

use std::collections::VecDeque;

use stator_abi::FragKey;

/// What a [`HoldQueue`] keeps of a frame: its bytes (`Vec<u8>`, a copy) or a handle to them
/// (the AF_XDP plane's UMEM frame). The queue only needs to know how long it is, for its bound
/// in bytes.
pub trait HoldFrame {
    /// The frame's length in bytes, as counted against [`HoldLimits::max_bytes`].
    fn frame_len(&self) -> usize;
}

impl HoldFrame for Vec<u8> {
    fn frame_len(&self) -> usize {
        self.len()
    }
}

/// The bounds of a [`HoldQueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldLimits {
    /// Frames held at most.
    pub max_frames: usize,
    /// Bytes of frames held at most.
    pub max_bytes: usize,
    /// How long a frame waits at most, in nanoseconds.
    pub timeout_ns: u64,
}

impl Default for HoldLimits {
    /// 1024 frames, 4 MiB, 2 s.
    fn default() -> Self {
        Self {
            max_frames: 1024,
            max_bytes: 4 << 20,
            timeout_ns: 2_000_000_000,
        }
    }
}

/// A held frame: by default a copy of its bytes and the index of the interface it arrived on
/// (the XDP plane's holder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held<F = Vec<u8>, I = u32> {
    /// Its datagram.
    pub key: FragKey,
    /// Where it arrived, for the data plane to run it again from there: the interface index
    /// (XDP), the socket (AF_XDP).
    pub ingress: I,
    /// When it was held.
    pub since_ns: u64,
    /// The frame as received.
    pub frame: F,
}

/// What a [`HoldQueue`] has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HoldStats {
    /// Frames taken.
    pub held: u64,
    /// Frames given back because their record appeared.
    pub released: u64,
    /// Frames dropped because they waited longer than the timeout.
    pub expired: u64,
    /// Frames dropped because the queue was full (frames or bytes).
    pub full: u64,
}

/// Fragments waiting for their first fragment's record, oldest first.
#[derive(Debug, Clone)]
pub struct HoldQueue<F = Vec<u8>, I = u32> {
    limits: HoldLimits,
    frames: VecDeque<Held<F, I>>,
    bytes: usize,
    stats: HoldStats,
}

impl<F: HoldFrame, I> Default for HoldQueue<F, I> {
    /// An empty queue with the default bounds.
    fn default() -> Self {
        Self::new(HoldLimits::default())
    }
}

impl<F: HoldFrame, I> HoldQueue<F, I> {
    /// An empty queue with these bounds.
    pub fn new(limits: HoldLimits) -> Self {
        Self {
            limits,
            frames: VecDeque::new(),
            bytes: 0,
            stats: HoldStats::default(),
        }
    }

    /// Its bounds.
    pub fn limits(&self) -> HoldLimits {
        self.limits
    }

    /// Frames held now.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Counts so far.
    pub fn stats(&self) -> HoldStats {
        self.stats
    }

    /// Takes a frame that arrived at `ingress`, at `now_ns`; when it does not fit (frames or
    /// bytes) gives it back, counted `full`, for the data plane to drop (or recycle).
    pub fn push(&mut self, now_ns: u64, key: FragKey, ingress: I, frame: F) -> Result<(), F> {
        let len = frame.frame_len();
        if self.frames.len() >= self.limits.max_frames
            || self.bytes.saturating_add(len) > self.limits.max_bytes
        {
            self.stats.full += 1;
            return Err(frame);
        }
        self.bytes += len;
        self.stats.held += 1;
        self.frames.push_back(Held {
            key,
            ingress,
            since_ns: now_ns,
            frame,
        });
        Ok(())
    }

    /// At `now_ns`: moves the frames that waited longer than the timeout to `expired` (counted
    /// `expired`, for the data plane to drop or recycle) and those whose datagram `ready` says
    /// has a record now to `released` (counted `released`), each oldest first.
    pub fn release(
        &mut self,
        now_ns: u64,
        mut ready: impl FnMut(&FragKey) -> bool,
        released: &mut Vec<Held<F, I>>,
        expired: &mut Vec<F>,
    ) {
        let mut keep = VecDeque::with_capacity(self.frames.len());
        for h in self.frames.drain(..) {
            if now_ns.saturating_sub(h.since_ns) > self.limits.timeout_ns {
                self.bytes -= h.frame.frame_len();
                self.stats.expired += 1;
                expired.push(h.frame);
            } else if ready(&h.key) {
                self.bytes -= h.frame.frame_len();
                self.stats.released += 1;
                released.push(h);
            } else {
                keep.push_back(h);
            }
        }
        self.frames = keep;
    }

    /// The datagrams held now (each once), for the data plane to ask about.
    pub fn keys(&self) -> Vec<FragKey> {
        let mut k: Vec<FragKey> = self.frames.iter().map(|h| h.key).collect();
        k.sort_unstable();
        k.dedup();
        k
    }

    /// Everything held, oldest first, not counted (at shutdown: a data plane gives the frames
    /// back to where they came from).
    pub fn drain(&mut self) -> impl Iterator<Item = Held<F, I>> + '_ {
        self.bytes = 0;
        self.frames.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u8) -> FragKey {
        FragKey {
            id: [0, 0, 0, id],
            ..FragKey::default()
        }
    }

    #[test]
    fn bounded_in_frames_bytes_and_time() {
        let mut q = HoldQueue::new(HoldLimits {
            max_frames: 3,
            max_bytes: 250,
            timeout_ns: 100,
        });
        assert!(q.push(0, key(1), 2, vec![1; 100]).is_ok());
        assert!(q.push(10, key(2), 3, vec![2; 100]).is_ok());
        let back = q.push(20, key(3), 2, vec![3; 100]).expect_err("bytes");
        assert_eq!(back, vec![3; 100], "the refused frame comes back");
        assert!(q.push(20, key(3), 2, vec![4; 10]).is_ok());
        assert!(q.push(20, key(4), 2, vec![5; 1]).is_err(), "frames");
        assert_eq!((q.len(), q.bytes()), (3, 210));
        assert_eq!(q.keys(), vec![key(1), key(2), key(3)]);
        // key 2 is ready; at 105, key 1 (held at 0) has waited too long
        let (mut rel, mut exp) = (Vec::new(), Vec::new());
        q.release(105, |k| *k == key(2) || *k == key(1), &mut rel, &mut exp);
        assert_eq!(rel.len(), 1);
        assert_eq!((rel[0].key, rel[0].ingress), (key(2), 3));
        assert_eq!(rel[0].frame, vec![2; 100]);
        assert_eq!(exp, vec![vec![1; 100]], "key 1's frame comes back, expired");
        assert_eq!((q.len(), q.bytes()), (1, 10));
        assert_eq!(
            q.stats(),
            HoldStats {
                held: 3,
                released: 1,
                expired: 1,
                full: 2
            }
        );
        let (mut rel, mut exp) = (Vec::new(), Vec::new());
        q.release(500, |_| true, &mut rel, &mut exp);
        assert!(rel.is_empty());
        assert_eq!(exp.len(), 1);
        assert!(q.is_empty());
        assert_eq!(q.stats().expired, 2);
    }

    #[test]
    fn drain_gives_everything_back_uncounted() {
        let mut q = HoldQueue::new(HoldLimits::default());
        assert!(q.push(0, key(1), 7, vec![0; 10]).is_ok());
        assert!(q.push(0, key(2), 8, vec![0; 20]).is_ok());
        let out: Vec<_> = q.drain().map(|h| (h.key, h.ingress)).collect();
        assert_eq!(out, vec![(key(1), 7), (key(2), 8)]);
        assert!(q.is_empty());
        assert_eq!(q.bytes(), 0);
        assert_eq!(
            q.stats(),
            HoldStats {
                held: 2,
                ..HoldStats::default()
            }
        );
    }
}
