//! The holder's rules (docs/forwarding.md §9): fragments that arrived before their first wait
//! here — bounded in frames, bytes and time — until the fragment table has a record for their
//! datagram, then go through the forwarder again.
//!
//! Pure: the data plane owns the frames' source and the clock. The XDP data plane fills a
//! [`HoldQueue`] from the `stator_hold` ring buffer and asks the kernel's `stator_frag` whether
//! a record exists; an AF_XDP data plane fills it from [`Action::Hold`](crate::Action::Hold)
//! verdicts and asks its own [`Forwarder`](crate::Forwarder).

use std::collections::VecDeque;

use stator_abi::FragKey;

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

/// A held frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Its datagram.
    pub key: FragKey,
    /// The interface it arrived on.
    pub ingress_ifindex: u32,
    /// When it was held.
    pub since_ns: u64,
    /// The frame as received.
    pub frame: Vec<u8>,
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
#[derive(Debug, Clone, Default)]
pub struct HoldQueue {
    limits: HoldLimits,
    frames: VecDeque<Held>,
    bytes: usize,
    stats: HoldStats,
}

impl HoldQueue {
    /// An empty queue with these bounds.
    pub fn new(limits: HoldLimits) -> Self {
        Self {
            limits,
            ..Self::default()
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

    /// Takes a frame at `now_ns`; `false` (counted `full`) when it does not fit.
    pub fn push(&mut self, now_ns: u64, key: FragKey, ingress_ifindex: u32, frame: &[u8]) -> bool {
        if self.frames.len() >= self.limits.max_frames
            || self.bytes.saturating_add(frame.len()) > self.limits.max_bytes
        {
            self.stats.full += 1;
            return false;
        }
        self.bytes += frame.len();
        self.stats.held += 1;
        self.frames.push_back(Held {
            key,
            ingress_ifindex,
            since_ns: now_ns,
            frame: frame.to_vec(),
        });
        true
    }

    /// At `now_ns`: drops (counted `expired`) the frames that waited longer than the timeout,
    /// and returns, oldest first, those whose datagram `ready` says has a record now.
    pub fn release(&mut self, now_ns: u64, mut ready: impl FnMut(&FragKey) -> bool) -> Vec<Held> {
        let mut out = Vec::new();
        let mut keep = VecDeque::with_capacity(self.frames.len());
        for h in self.frames.drain(..) {
            if now_ns.saturating_sub(h.since_ns) > self.limits.timeout_ns {
                self.bytes -= h.frame.len();
                self.stats.expired += 1;
            } else if ready(&h.key) {
                self.bytes -= h.frame.len();
                self.stats.released += 1;
                out.push(h);
            } else {
                keep.push_back(h);
            }
        }
        self.frames = keep;
        out
    }

    /// The datagrams held now (each once), for the data plane to ask about.
    pub fn keys(&self) -> Vec<FragKey> {
        let mut k: Vec<FragKey> = self.frames.iter().map(|h| h.key).collect();
        k.sort_unstable();
        k.dedup();
        k
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
        assert!(q.push(0, key(1), 2, &[0; 100]));
        assert!(q.push(10, key(2), 2, &[0; 100]));
        assert!(!q.push(20, key(3), 2, &[0; 100]), "bytes");
        assert!(q.push(20, key(3), 2, &[0; 10]));
        assert!(!q.push(20, key(4), 2, &[0; 1]), "frames");
        assert_eq!((q.len(), q.bytes()), (3, 210));
        assert_eq!(q.keys(), vec![key(1), key(2), key(3)]);
        // key 2 is ready; at 105, key 1 (held at 0) has waited too long
        let out = q.release(105, |k| *k == key(2) || *k == key(1));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].key, key(2));
        assert_eq!(out[0].ingress_ifindex, 2);
        assert_eq!(q.len(), 1);
        assert_eq!(q.bytes(), 10);
        assert_eq!(
            q.stats(),
            HoldStats {
                held: 3,
                released: 1,
                expired: 1,
                full: 2
            }
        );
        assert!(q.release(500, |_| true).is_empty());
        assert!(q.is_empty());
        assert_eq!(q.stats().expired, 2);
    }
}
