//! What quinn-udp does not do: replies to many clients in one `sendmmsg(2)` on the listening
//! socket (the outbox), turning UDP GRO off when a listener asks for that, and reading the
//! socket's drop count. The system calls themselves are stator-sys's.
//!
//! quinn-udp batches receives (`recvmmsg`, with GRO) and bursts to *one* peer (GSO), but it
//! sends one `sendmsg` per destination; a worker's replies go to many clients, so they are
//! queued here during one turn of the worker's event loop and leave in batches of up to
//! [`BATCH`] datagrams. The queue is bounded: a datagram that does not fit is refused (the
//! caller counts the drop).

use std::io;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;

use stator_sys::mmsg::SendBatch;

/// Datagrams per `sendmmsg` call.
pub const BATCH: usize = 64;

/// Replies waiting for the next flush.
#[derive(Debug)]
pub struct Outbox {
    data: Vec<u8>,
    msgs: Vec<(SocketAddr, usize, usize)>,
    max_msgs: usize,
    max_bytes: usize,
    batch: SendBatch,
}

/// What one flush did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flushed {
    /// Datagrams the kernel took.
    pub sent: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Datagrams it refused (send buffer full, or an error); they are dropped.
    pub dropped: u64,
    /// `sendmmsg` calls made.
    pub calls: u64,
}

impl Outbox {
    /// A queue of at most `max_msgs` datagrams and `max_bytes` bytes.
    pub fn new(max_msgs: usize, max_bytes: usize) -> Self {
        Self {
            data: Vec::new(),
            msgs: Vec::new(),
            max_msgs,
            max_bytes,
            batch: SendBatch::new(),
        }
    }

    /// Queues `payload` for `to`; `false` (nothing queued) when the queue is full.
    pub fn push(&mut self, to: SocketAddr, payload: &[u8]) -> bool {
        if self.msgs.len() >= self.max_msgs || self.data.len() + payload.len() > self.max_bytes {
            return false;
        }
        self.msgs.push((to, self.data.len(), payload.len()));
        self.data.extend_from_slice(payload);
        true
    }

    /// Datagrams queued.
    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// Sends everything queued on `socket` (non-blocking), [`BATCH`] at a time; what the kernel
    /// does not take is dropped. The queue is empty afterwards.
    pub fn flush(&mut self, socket: BorrowedFd<'_>) -> Flushed {
        let mut out = Flushed::default();
        let mut at = 0;
        while at < self.msgs.len() {
            let end = (at + BATCH).min(self.msgs.len());
            let data = &self.data;
            let batch = self.msgs[at..end]
                .iter()
                .map(|&(to, off, len)| (Some(to), &data[off..off + len]));
            match self.batch.send(socket, batch, libc::MSG_DONTWAIT) {
                Ok(0) | Err(_) => {
                    out.dropped += (self.msgs.len() - at) as u64;
                    out.calls += 1;
                    break;
                }
                Ok(n) => {
                    out.calls += 1;
                    out.sent += n as u64;
                    out.bytes += self.msgs[at..at + n]
                        .iter()
                        .map(|m| m.2 as u64)
                        .sum::<u64>();
                    at += n;
                }
            }
        }
        self.msgs.clear();
        self.data.clear();
        out
    }
}

/// Turns UDP GRO (`UDP_GRO`) on or off on `socket`.
pub fn set_gro(socket: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    let value: libc::c_int = on.into();
    stator_sys::socket::set_opt(socket, libc::SOL_UDP, libc::UDP_GRO, &value)
}

/// Datagrams the kernel dropped at `socket` so far because its receive buffer was full (the
/// socket's `sk_drops`, read with `getsockopt(SO_MEMINFO)`; the same count `/proc/net/udp`
/// shows as `drops`).
pub fn socket_drops(socket: BorrowedFd<'_>) -> io::Result<u32> {
    stator_sys::socket::socket_drops(socket)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd as _;

    use super::*;

    #[test]
    fn one_flush_reaches_every_destination() {
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let rx: Vec<std::net::UdpSocket> = (0..3)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let mut out = Outbox::new(200, 1 << 20);
        for i in 0..150u8 {
            let to = rx[usize::from(i) % 3].local_addr().unwrap();
            assert!(out.push(to, &[i; 10]));
        }
        let f = out.flush(tx.as_fd());
        assert_eq!(f.sent, 150);
        assert_eq!(f.bytes, 1500);
        assert_eq!(f.calls, 3, "64 + 64 + 22");
        assert!(out.is_empty());
        let mut buf = [0u8; 16];
        for i in 0..150u8 {
            let (n, from) = rx[usize::from(i) % 3].recv_from(&mut buf).unwrap();
            assert_eq!((n, buf[0]), (10, i));
            assert_eq!(from, tx.local_addr().unwrap());
        }
    }

    #[test]
    fn overflow_drops_are_read_from_the_socket() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(socket_drops(rx.as_fd()).unwrap(), 0);
        // nobody reads: the receive buffer fills and the kernel drops the rest
        for _ in 0..5000 {
            tx.send_to(&[0u8; 1000], rx.local_addr().unwrap()).unwrap();
        }
        assert!(socket_drops(rx.as_fd()).unwrap() > 0);
    }

    #[test]
    fn the_queue_is_bounded() {
        let to: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut out = Outbox::new(2, 15);
        assert!(out.push(to, &[0; 10]));
        assert!(!out.push(to, &[0; 10]), "bytes bound");
        assert!(out.push(to, &[0; 5]));
        assert!(!out.push(to, &[]), "datagram bound");
        assert_eq!(out.len(), 2);
    }
}
