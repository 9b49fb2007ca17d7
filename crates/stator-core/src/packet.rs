//! Frames in buffers with headroom: [`PacketBuf`] and two implementations.
//!
//! The XDP program grows a frame at its head with `bpf_xdp_adjust_head` and writes the new
//! outer headers in front of the untouched inner packet. The core does the same through
//! [`PacketBuf::grow_head`], so a data plane whose frames sit in a larger buffer (an AF_XDP UMEM
//! chunk with headroom) forwards in place, without copying the packet.

/// The headroom XDP gives a frame (`XDP_PACKET_HEADROOM`). `bpf_xdp_adjust_head` keeps room for
/// a `struct xdp_frame` (40 bytes on 64-bit kernels) out of it, so at most 216 bytes can be
/// pushed; the core pushes at most 52 (Ethernet 14 + IPv6 40 + UDP and GUE 12 − an untagged
/// Ethernet header 14).
pub const XDP_HEADROOM: usize = 256;

/// The frame could not grow: not enough headroom (`bpf_xdp_adjust_head` failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NoHeadroom;

/// A frame in a buffer that may have free space in front of it.
///
/// Implementations must keep `data()` and `data_mut()` the same bytes, and make `grow_head(n)`
/// prepend exactly `n` bytes (of unspecified content) when it succeeds and change nothing when
/// it fails.
pub trait PacketBuf {
    /// The frame's bytes.
    fn data(&self) -> &[u8];
    /// The frame's bytes, writable.
    fn data_mut(&mut self) -> &mut [u8];
    /// Free bytes in front of the frame.
    fn headroom(&self) -> usize;
    /// Prepends `n` bytes to the frame (their content is whatever the buffer held there).
    ///
    /// # Errors
    /// [`NoHeadroom`] when fewer than `n` bytes are free; the frame is unchanged.
    fn grow_head(&mut self, n: usize) -> Result<(), NoHeadroom>;
    /// Removes `n` bytes from the front of the frame (they become headroom).
    ///
    /// # Errors
    /// [`NoHeadroom`] (meaning "no such bytes") when the frame is shorter than `n`; the frame is
    /// unchanged.
    fn shrink_head(&mut self, n: usize) -> Result<(), NoHeadroom>;
}

/// A frame borrowed in place: `buf[head..head + len]`, with `buf[..head]` as headroom. This is
/// the shape of an AF_XDP UMEM chunk (descriptor address and length) and of a test-run buffer.
#[derive(Debug)]
pub struct SlicePacketBuf<'a> {
    buf: &'a mut [u8],
    head: usize,
    end: usize,
}

impl<'a> SlicePacketBuf<'a> {
    /// The frame `buf[head..head + len]`; `head` and `len` are clamped to the buffer.
    pub fn new(buf: &'a mut [u8], head: usize, len: usize) -> Self {
        let head = head.min(buf.len());
        let end = head.saturating_add(len).min(buf.len());
        Self { buf, head, end }
    }

    /// Where the frame starts in the buffer (after a grow, earlier than it was).
    pub fn head(&self) -> usize {
        self.head
    }

    /// The frame's length.
    pub fn len(&self) -> usize {
        self.end - self.head
    }

    /// Whether the frame is empty.
    pub fn is_empty(&self) -> bool {
        self.end == self.head
    }
}

impl PacketBuf for SlicePacketBuf<'_> {
    #[inline]
    fn data(&self) -> &[u8] {
        // head <= end <= buf.len(), kept by every constructor and method.
        self.buf.get(self.head..self.end).unwrap_or(&[])
    }

    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        self.buf.get_mut(self.head..self.end).unwrap_or(&mut [])
    }

    #[inline]
    fn headroom(&self) -> usize {
        self.head
    }

    #[inline]
    fn grow_head(&mut self, n: usize) -> Result<(), NoHeadroom> {
        self.head = self.head.checked_sub(n).ok_or(NoHeadroom)?;
        Ok(())
    }

    #[inline]
    fn shrink_head(&mut self, n: usize) -> Result<(), NoHeadroom> {
        if n > self.len() {
            return Err(NoHeadroom);
        }
        self.head += n;
        Ok(())
    }
}

/// An owned frame with headroom, for tests, fuzzing and tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VecPacketBuf {
    buf: Vec<u8>,
    head: usize,
}

impl VecPacketBuf {
    /// A copy of `frame` with `headroom` free bytes (zeros) in front of it.
    pub fn new(frame: &[u8], headroom: usize) -> Self {
        let mut buf = vec![0; headroom + frame.len()];
        buf[headroom..].copy_from_slice(frame);
        Self {
            buf,
            head: headroom,
        }
    }

    /// A copy of `frame` with [`XDP_HEADROOM`] in front of it.
    pub fn with_xdp_headroom(frame: &[u8]) -> Self {
        Self::new(frame, XDP_HEADROOM)
    }

    /// The frame's bytes, as an owned vector.
    pub fn to_vec(&self) -> Vec<u8> {
        self.data().to_vec()
    }

    /// Replaces the frame by a copy of `frame`, keeping `headroom` free bytes in front of it and
    /// reusing the allocation (for benchmarks and fuzzing loops).
    pub fn reset(&mut self, frame: &[u8], headroom: usize) {
        self.buf.clear();
        self.buf.resize(headroom, 0);
        self.buf.extend_from_slice(frame);
        self.head = headroom;
    }
}

impl PacketBuf for VecPacketBuf {
    #[inline]
    fn data(&self) -> &[u8] {
        // head <= buf.len(), kept by every constructor and method.
        self.buf.get(self.head..).unwrap_or(&[])
    }

    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        self.buf.get_mut(self.head..).unwrap_or(&mut [])
    }

    #[inline]
    fn headroom(&self) -> usize {
        self.head
    }

    #[inline]
    fn grow_head(&mut self, n: usize) -> Result<(), NoHeadroom> {
        self.head = self.head.checked_sub(n).ok_or(NoHeadroom)?;
        Ok(())
    }

    #[inline]
    fn shrink_head(&mut self, n: usize) -> Result<(), NoHeadroom> {
        if n > self.buf.len() - self.head {
            return Err(NoHeadroom);
        }
        self.head += n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec_buf_grows_into_headroom_and_refuses_beyond() {
        let mut b = VecPacketBuf::new(&[1, 2, 3], 4);
        assert_eq!(b.headroom(), 4);
        b.grow_head(3).unwrap();
        assert_eq!(b.data(), &[0, 0, 0, 1, 2, 3]);
        assert_eq!(b.grow_head(2), Err(NoHeadroom));
        assert_eq!(b.data().len(), 6, "a failed grow changes nothing");
        b.shrink_head(4).unwrap();
        assert_eq!(b.data(), &[2, 3]);
        assert_eq!(b.shrink_head(3), Err(NoHeadroom));
        b.reset(&[9], 1);
        assert_eq!((b.headroom(), b.to_vec()), (1, vec![9]));
    }

    #[test]
    fn slice_buf_works_in_place() {
        let mut mem = [0u8, 0, 0xaa, 0xbb, 0xcc, 0xee];
        let mut b = SlicePacketBuf::new(&mut mem, 2, 3);
        assert_eq!(b.data(), &[0xaa, 0xbb, 0xcc]);
        b.grow_head(2).unwrap();
        b.data_mut()[0] = 7;
        assert_eq!((b.head(), b.len()), (0, 5));
        assert_eq!(b.grow_head(1), Err(NoHeadroom));
        b.shrink_head(1).unwrap();
        assert!(!b.is_empty());
        assert_eq!(mem, [7, 0, 0xaa, 0xbb, 0xcc, 0xee]);
        // Out-of-range construction is clamped, never a panic.
        let mut small = [0u8; 2];
        let b = SlicePacketBuf::new(&mut small, 5, 10);
        assert!(b.is_empty() && b.data().is_empty());
    }
}
