//! The packet threads' holder of early fragments (docs/forwarding.md §9, docs/afxdp.md
//! "Fragments"): a fragment that reaches its 3-tuple owner before its first fragment
//! (`Action::Hold`) waits here until the thread's fragment table has a fresh record for its
//! datagram, then goes through the forwarder again — the XDP plane's holder, in process.
//!
//! The rules are stator-core's [`HoldQueue`]'s (bounded in frames, bytes and time; counted
//! held, released, expired and full); this module only says what the queue keeps: the UMEM
//! frame itself rather than a copy, and the socket it arrived on. A packet thread has no free
//! frames of its own to copy a released fragment back into (the free list is the I/O
//! thread's), and keeping the descriptor is what the paper's pool is for — only descriptors
//! move. The price is pool frames out of circulation while held, so the plane bounds each
//! thread's hold to a share of the pool as well as of `fragments.hold_*` ([`HoldQueue`]'s
//! limits split over the threads; see `AfxdpConfig::hold_limits_per_thread`). A frame the queue
//! refuses, or that expires, comes back to be recycled.
//!
//! Every fragment of a datagram reaches the same packet thread (steering hashes fragments by
//! datagram: `stator_core::table_hash`), so the thread that holds a fragment is the one whose
//! table gets the first fragment's record.

use stator_core::{Held, HoldFrame, HoldQueue};

use crate::umem::Frame;

/// A packet thread's held fragments: UMEM frames, each with the socket it arrived on.
pub(crate) type FrameHold = HoldQueue<Frame, u16>;

/// A held fragment: its UMEM frame and the socket it arrived on (`ingress`).
pub(crate) type HeldFrame = Held<Frame, u16>;

impl HoldFrame for Frame {
    /// The packet's length (not the chunk's): what `fragments.hold_bytes` bounds.
    fn frame_len(&self) -> usize {
        self.len() as usize
    }
}

#[cfg(test)]
mod tests {
    use stator_core::{FragKey, HoldLimits};

    use super::*;
    use crate::umem::{Umem, UmemConfig};

    /// The queue's rules are tested in stator-core; here, that a UMEM frame is held by its
    /// packet's length and comes back, the same frame, when refused, expired or released.
    #[test]
    fn holds_umem_frames_by_packet_length_and_gives_them_back() {
        let umem = Umem::new(UmemConfig {
            frames: 16,
            frame_size: 4096,
            check_frames: false,
        })
        .expect("UMEM");
        let mut pool = umem.take_frames().expect("frames");
        let mut frame = |i: u64, len: usize| {
            let at = pool
                .iter()
                .position(|f| f.addr() == i * 4096)
                .expect("a frame not taken yet");
            let mut f = pool.swap_remove(at);
            umem.set_packet(&mut f, 0, len).expect("fits");
            f
        };
        let key = |id| FragKey {
            id: [0, 0, 0, id],
            ..FragKey::default()
        };
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
        assert_eq!(q.bytes(), 210, "packet lengths, not chunk sizes");
        let (mut rel, mut exp): (Vec<HeldFrame>, _) = (Vec::new(), Vec::new());
        q.release(105, |k| *k == key(2) || *k == key(1), &mut rel, &mut exp);
        assert_eq!(
            (rel[0].key, rel[0].ingress, rel[0].frame.addr()),
            (key(2), 1, 2 * 4096)
        );
        assert_eq!(exp.len(), 1, "key 1, held at 0, waited too long");
        assert_eq!(exp[0].addr(), 4096);
        let left: Vec<HeldFrame> = q.drain().collect();
        assert_eq!(left[0].frame.addr(), 4 * 4096);
        assert!(q.is_empty());
    }
}
