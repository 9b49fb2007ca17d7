//! Batched datagram I/O: `recvmmsg(2)` into buffers set up once, `sendmmsg(2)` of slices.
//!
//! Both keep the `mmsghdr` bookkeeping (headers, iovecs, addresses) and its `unsafe` here, so
//! a caller holds only buffers and counts, and both are set up once and reused, so a loop
//! that calls them allocates nothing: [`RecvBatch`] owns its buffers (datagrams land in it),
//! [`SendBatch`] sends slices the caller lends for one call.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

use socket2::SockAddr;

const ADDR_LEN: libc::socklen_t = size_of::<libc::sockaddr_storage>() as libc::socklen_t;

/// `count` buffers of `buf_len` bytes for one `recvmmsg` call each time, every datagram
/// received at offset `headroom` of its buffer (room to prepend headers in place), with room
/// for its source address. Set up once; nothing is allocated per call.
pub struct RecvBatch {
    data: Vec<u8>,
    buf_len: usize,
    headroom: usize,
    // pointed at by `hdrs`; never touched after `new`
    _addrs: Vec<libc::sockaddr_storage>,
    _iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    received: usize,
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("count", &self.hdrs.len())
            .field("buf_len", &self.buf_len)
            .field("headroom", &self.headroom)
            .field("received", &self.received)
            .finish_non_exhaustive()
    }
}

impl RecvBatch {
    /// `count` (at least 1) buffers of `buf_len` bytes, datagrams landing at `headroom`
    /// (clamped to `buf_len`).
    pub fn new(count: usize, buf_len: usize, headroom: usize) -> Self {
        let count = count.max(1);
        let headroom = headroom.min(buf_len);
        let mut data = vec![0u8; count * buf_len];
        // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid (AF_UNSPEC) value.
        let mut addrs: Vec<libc::sockaddr_storage> = vec![unsafe { std::mem::zeroed() }; count];
        // `as_mut_ptr` materialises no reference to the buffer: the pointers stay valid beside
        // the ones `buf` and `buf_mut` derive the same way (Vec's aliasing guarantee)
        let base = data.as_mut_ptr();
        let mut iovs: Vec<libc::iovec> = (0..count)
            .map(|i| libc::iovec {
                // SAFETY: i * buf_len + headroom <= count * buf_len: inside (or one past) the
                // buffer `base` points at.
                iov_base: unsafe { base.add(i * buf_len + headroom) }.cast(),
                iov_len: buf_len - headroom,
            })
            .collect();
        let hdrs = iovs
            .iter_mut()
            .zip(addrs.iter_mut())
            .map(|(iov, addr)| {
                // SAFETY: mmsghdr is plain old data (pointers may be null, lengths zero);
                // every field the kernel reads is set just below.
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_name = std::ptr::from_mut(addr).cast();
                h.msg_hdr.msg_namelen = ADDR_LEN;
                h.msg_hdr.msg_iov = std::ptr::from_mut(iov);
                h.msg_hdr.msg_iovlen = 1;
                h
            })
            .collect();
        Self {
            data,
            buf_len,
            headroom,
            _addrs: addrs,
            _iovs: iovs,
            hdrs,
            received: 0,
        }
    }

    /// One `recvmmsg` with `flags` (`MSG_WAITFORONE`: wait for the first datagram, up to the
    /// socket's timeout, then take what is queued). Returns how many datagrams arrived; the
    /// previous call's are gone.
    pub fn recv(&mut self, fd: BorrowedFd<'_>, flags: libc::c_int) -> io::Result<usize> {
        self.received = 0;
        // SAFETY: `hdrs` holds `hdrs.len()` initialised headers whose address and iovec
        // pointers point into `addrs`, `iovs` and `data`, owned by `self`, never resized after
        // `new` and not borrowed during the call (`&mut self`); the kernel writes at most
        // `msg_namelen` bytes of address and `iov_len` bytes of data through them. A null
        // timeout is allowed.
        let r = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                self.hdrs.len() as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        self.received = r as usize;
        for h in &mut self.hdrs[..self.received] {
            h.msg_hdr.msg_namelen = ADDR_LEN;
        }
        Ok(self.received)
    }

    /// Datagrams the last [`RecvBatch::recv`] returned.
    pub fn received(&self) -> usize {
        self.received
    }

    /// The length of datagram `i` of the last call, as the kernel reported it (larger than
    /// the buffer for a truncated one). Panics for `i` beyond [`RecvBatch::received`].
    pub fn len(&self, i: usize) -> usize {
        self.hdrs[..self.received][i].msg_len as usize
    }

    /// Bytes of all datagrams of the last call, at their real lengths.
    pub fn bytes(&self) -> u64 {
        self.hdrs[..self.received]
            .iter()
            .map(|h| u64::from(h.msg_len))
            .sum()
    }

    /// Where datagrams start in their buffer.
    pub fn headroom(&self) -> usize {
        self.headroom
    }

    /// The whole buffer `i` (headroom and room to grow included), the datagram at
    /// [`RecvBatch::headroom`]. Panics for `i` beyond the batch.
    pub fn buf_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.hdrs.len(), "buffer {i} of {}", self.hdrs.len());
        // SAFETY: buffer `i` lies inside `data` (checked above); derived through
        // `as_mut_ptr` like the kernel's pointers, so those stay valid; `&mut self` keeps
        // the kernel (`recv`) out while the slice lives.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.data.as_mut_ptr().add(i * self.buf_len),
                self.buf_len,
            )
        }
    }

    /// The whole buffer `i`, read-only. Panics for `i` beyond the batch.
    pub fn buf(&self, i: usize) -> &[u8] {
        assert!(i < self.hdrs.len(), "buffer {i} of {}", self.hdrs.len());
        // SAFETY: as in `buf_mut`; `&self` keeps `recv` out while the slice lives.
        unsafe {
            std::slice::from_raw_parts(self.data.as_ptr().add(i * self.buf_len), self.buf_len)
        }
    }
}

/// The headers, iovecs and addresses of `sendmmsg` calls, kept between calls so that a
/// sender that flushes every turn allocates only while its batches grow. Between calls it
/// holds nothing: the pointers a call builds into the caller's datagrams end with the call.
#[derive(Default)]
pub struct SendBatch {
    addrs: Vec<Option<SockAddr>>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

impl std::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch")
            .field("capacity", &self.hdrs.capacity())
            .finish_non_exhaustive()
    }
}

// SAFETY: the raw pointers of `iovs` and `hdrs` exist only during `send`, which empties both
// before it returns; between calls the vectors hold no element, so nothing refers to memory
// of the thread that sent last.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// One `sendmmsg` with `flags` of `msgs`: each a datagram, to its address (`None` on a
    /// connected or packet socket). Returns how many the kernel took.
    pub fn send<'a>(
        &mut self,
        fd: BorrowedFd<'_>,
        msgs: impl IntoIterator<Item = (Option<SocketAddr>, &'a [u8])>,
        flags: libc::c_int,
    ) -> io::Result<usize> {
        self.addrs.clear();
        self.iovs.clear();
        self.hdrs.clear();
        for (addr, d) in msgs {
            self.addrs.push(addr.map(SockAddr::from));
            self.iovs.push(libc::iovec {
                // the kernel only reads through this pointer (sendmmsg)
                iov_base: d.as_ptr().cast_mut().cast(),
                iov_len: d.len(),
            });
        }
        if self.iovs.is_empty() {
            return Ok(0);
        }
        for (iov, addr) in self.iovs.iter_mut().zip(&self.addrs) {
            // SAFETY: mmsghdr is plain old data; all zeroes is valid (null pointers, zero
            // lengths), and every field the kernel reads is set below.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            if let Some(addr) = addr {
                h.msg_hdr.msg_name = addr.as_ptr().cast_mut().cast();
                h.msg_hdr.msg_namelen = addr.len();
            }
            h.msg_hdr.msg_iov = std::ptr::from_mut(iov);
            h.msg_hdr.msg_iovlen = 1;
            self.hdrs.push(h);
        }
        // SAFETY: `hdrs` holds `hdrs.len()` initialised headers whose name and iovec pointers
        // point into `addrs`, `iovs` (not resized until the call returns) and the datagrams
        // borrowed for `'a`; sendmmsg only reads them (and writes each header's msg_len).
        let r = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                self.hdrs.len() as libc::c_uint,
                flags,
            )
        };
        self.hdrs.clear();
        self.iovs.clear();
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn a_batch_sent_to_two_sockets_arrives_whole_at_the_headroom() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let msgs = [
            (Some(aa), &b"one"[..]),
            (Some(ba), b"two"),
            (Some(aa), b"three"),
        ];
        let mut send = SendBatch::new();
        assert_eq!(send.send(tx.as_fd(), msgs, 0).unwrap(), 3);
        assert_eq!(send.send(tx.as_fd(), [], 0).unwrap(), 0);

        a.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut batch = RecvBatch::new(4, 64, 16);
        let mut got = Vec::new();
        while got.len() < 2 {
            let n = batch.recv(a.as_fd(), libc::MSG_WAITFORONE).unwrap();
            for i in 0..n {
                let at = batch.headroom();
                got.push(batch.buf(i)[at..at + batch.len(i)].to_vec());
            }
        }
        assert_eq!(got, [b"one".to_vec(), b"three".to_vec()]);
        let mut one = [0u8; 8];
        assert_eq!(b.recv(&mut one).unwrap(), 3);
        assert_eq!(&one[..3], b"two");
    }
}
