//! The packet threads' holder of early fragments (docs/forwarding.md §9, docs/afxdp.md
//! "Fragments"): a fragment that reaches its 3-tuple owner before its first fragment
//! (`Action::Hold`) waits here until the thread's fragment table has a fresh record for its
//! datagram, then goes through the forwarder again — the XDP plane's holder, in process.
//!
//! The rules are stator-core's [`HoldQueue`]'s (bounded in frames, bytes and time; counted
//! held, released, expired and full), but this queue keeps the UMEM frame itself rather than a
//! copy: a packet thread has no free frames of its own to copy a released fragment back into
//! (the free list is the I/O thread's), and keeping the descriptor is what the paper's pool is
//! for — only descriptors move. The price is pool frames out of circulation while held, so the
//! plane bounds each thread's hold to a share of the pool as well as of `fragments.hold_*`
//! ([`HoldQueue`]'s limits split over the threads; see `AfxdpConfig::hold_limits_per_thread`).
//!
//! Every fragment of a datagram reaches the same packet thread (steering hashes fragments by
//! datagram: `stator_core::table_hash`), so the thread that holds a fragment is the one whose
//! table gets the first fragment's record.

use std::collections::VecDeque;

use stator_core::{FragKey, HoldLimits, HoldStats};

use crate::umem::Frame;

/// A held frame.
#[derive(Debug)]
pub(crate) struct HeldFrame {
    pub key: FragKey,
    /// The socket it arrived on.
    pub sock: u16,
    pub since_ns: u64,
    pub frame: Frame,
}

/// Fragments waiting for their first fragment's record, oldest first.
#[derive(Debug)]
pub(crate) struct FrameHold {
    limits: HoldLimits,
    frames: VecDeque<HeldFrame>,
    bytes: usize,
    stats: HoldStats,
}

impl FrameHold {
    pub(crate) fn new(limits: HoldLimits) -> Self {
        Self {
            limits,
            frames: VecDeque::new(),
            bytes: 0,
            stats: HoldStats::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.frames.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub(crate) fn stats(&self) -> HoldStats {
        self.stats
    }

    /// Takes a frame at `now_ns`; gives it back (counted `full`) when it does not fit.
    pub(crate) fn push(
        &mut self,
        now_ns: u64,
        key: FragKey,
        sock: u16,
        frame: Frame,
    ) -> Result<(), Frame> {
        let len = frame.len() as usize;
        if self.frames.len() >= self.limits.max_frames
            || self.bytes.saturating_add(len) > self.limits.max_bytes
        {
            self.stats.full += 1;
            return Err(frame);
        }
        self.bytes += len;
        self.stats.held += 1;
        self.frames.push_back(HeldFrame {
            key,
            sock,
            since_ns: now_ns,
            frame,
        });
        Ok(())
    }

    /// At `now_ns`: moves the frames that waited longer than the timeout to `expired` (counted)
    /// and those whose datagram `ready` says has a record now to `released` (counted), oldest
    /// first.
    pub(crate) fn release(
        &mut self,
        now_ns: u64,
        mut ready: impl FnMut(&FragKey) -> bool,
        released: &mut Vec<HeldFrame>,
        expired: &mut Vec<Frame>,
    ) {
        let mut keep = VecDeque::with_capacity(self.frames.len());
        for h in self.frames.drain(..) {
            if now_ns.saturating_sub(h.since_ns) > self.limits.timeout_ns {
                self.bytes -= h.frame.len() as usize;
                self.stats.expired += 1;
                expired.push(h.frame);
            } else if ready(&h.key) {
                self.bytes -= h.frame.len() as usize;
                self.stats.released += 1;
                released.push(h);
            } else {
                keep.push_back(h);
            }
        }
        self.frames = keep;
    }

    /// Everything held (at shutdown: the frames go back to the pool), not counted.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = HeldFrame> + '_ {
        self.bytes = 0;
        self.frames.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::umem::{Umem, UmemConfig};

    fn key(id: u8) -> FragKey {
        FragKey {
            id: [0, 0, 0, id],
            ..FragKey::default()
        }
    }

    /// Frame `i` of a fresh 16-frame pool, `len` bytes long.
    fn frame(pool: &mut Vec<Frame>, umem: &Umem, i: u64, len: u32) -> Frame {
        let at = pool
            .iter()
            .position(|f| f.addr() == i * 4096)
            .expect("a frame not taken yet");
        let mut f = pool.swap_remove(at);
        umem.set_packet(&mut f, 0, len as usize).expect("fits");
        f
    }

    #[test]
    fn bounded_in_frames_bytes_and_time_and_gives_the_frame_back() {
        let umem = Umem::new(UmemConfig {
            frames: 16,
            frame_size: 4096,
            check_frames: false,
        })
        .expect("UMEM");
        let mut pool = umem.take_frames().expect("frames");
        let mut frame = |i, len| frame(&mut pool, &umem, i, len);
        let mut q = FrameHold::new(HoldLimits {
            max_frames: 3,
            max_bytes: 250,
            timeout_ns: 100,
        });
        assert!(q.push(0, key(1), 0, frame(1, 100)).is_ok());
        assert!(q.push(10, key(2), 1, frame(2, 100)).is_ok());
        let back = q.push(20, key(3), 0, frame(3, 100)).expect_err("bytes");
        assert_eq!(back.addr(), 3 * 4096, "the refused frame comes back");
        assert!(q.push(20, key(3), 0, frame(4, 10)).is_ok());
        assert!(q.push(20, key(4), 0, frame(5, 1)).is_err(), "frames");
        assert_eq!(q.len(), 3);
        let (mut rel, mut exp) = (Vec::new(), Vec::new());
        q.release(105, |k| *k == key(2) || *k == key(1), &mut rel, &mut exp);
        assert_eq!(rel.len(), 1);
        assert_eq!((rel[0].key, rel[0].sock), (key(2), 1));
        assert_eq!(exp.len(), 1, "key 1, held at 0, waited too long");
        assert_eq!(exp[0].addr(), 4096);
        assert_eq!(
            q.stats(),
            HoldStats {
                held: 3,
                released: 1,
                expired: 1,
                full: 2
            }
        );
        assert_eq!(q.drain().count(), 1);
        assert!(q.is_empty());
    }
}
