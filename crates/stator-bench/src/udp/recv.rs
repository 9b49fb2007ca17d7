//! The receivers of the ladder: sockets, the two ways of reading them (`recvfrom` per datagram,
//! `recvmmsg` in batches), and the receiving threads' own CPU clocks.
//!
//! A receiving thread counts what it read in its own cache line (one writer, read once a second
//! by the reporting thread), and stops within [`POLL`] of being told to: its socket has a
//! receive timeout, so a thread blocked on an idle socket wakes up to look at the flag.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use stator_sys::mmsg::RecvBatch;

/// How long a receiving thread may block before it looks at its stop flag.
pub const POLL: Duration = Duration::from_millis(50);

/// The most datagrams one `recvmmsg` returns (the article's batch).
pub const MAX_BATCH: usize = 1024;

/// Receive buffer of one datagram in a batch: the benchmark's are 32 bytes; a longer one is
/// truncated (and counted at its real length, as `recvmmsg` reports it).
const BUF: usize = 256;

/// How a thread reads its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `recvfrom(2)`, one datagram per system call.
    RecvFrom,
    /// `recvmmsg(2)`, up to `n` datagrams per call, `MSG_WAITFORONE`.
    RecvMmsg(usize),
}

/// Opens a UDP socket bound to `addr`, with `SO_REUSEPORT` when asked, a receive timeout of
/// [`POLL`], and a receive buffer of `rcvbuf` bytes (`None`: the kernel's default,
/// `net.core.rmem_default`, as in the article; a larger one is capped by `net.core.rmem_max`).
/// Call it from a thread in the receiver's namespace.
pub fn bind(addr: SocketAddr, reuseport: bool, rcvbuf: Option<usize>) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if reuseport {
        s.set_reuse_port(true)?;
    }
    if let Some(bytes) = rcvbuf {
        s.set_recv_buffer_size(bytes)?;
    }
    s.set_read_timeout(Some(POLL))?;
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// The socket's inode, as `/proc/net/udp` lists it.
pub fn inode(sock: &impl AsRawFd) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt as _;
    Ok(std::fs::metadata(format!("/proc/self/fd/{}", sock.as_raw_fd()))?.ino())
}

/// A receiving thread's counters, in a cache line of their own.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Counts {
    /// Datagrams read.
    pub packets: AtomicU64,
    /// Their payload bytes.
    pub bytes: AtomicU64,
    /// System calls made (successful ones).
    pub calls: AtomicU64,
}

/// A running receiving thread.
#[derive(Debug)]
pub struct Receiver {
    /// CPU it is pinned to, if any.
    pub cpu: Option<usize>,
    /// Whether the pinning was accepted.
    pub pinned: bool,
    /// Its counters.
    pub counts: Arc<Counts>,
    handle: JoinHandle<io::Result<()>>,
}

impl Receiver {
    /// Starts a thread reading `sock` with `method` until `stop`, pinned to `cpu` if given.
    pub fn spawn(
        name: String,
        sock: Arc<UdpSocket>,
        method: Method,
        cpu: Option<usize>,
        stop: Arc<AtomicBool>,
    ) -> io::Result<Self> {
        let counts = Arc::new(Counts::default());
        let c = Arc::clone(&counts);
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new().name(name).spawn(move || {
            let pinned = cpu.is_none_or(crate::pin::pin_to_cpu);
            let _ = tx.send(pinned);
            match method {
                Method::RecvFrom => recvfrom_loop(&sock, &c, &stop),
                Method::RecvMmsg(n) => recvmmsg_loop(sock.as_fd(), n, &c, &stop),
            }
        })?;
        let pinned = rx.recv().unwrap_or(false);
        Ok(Self {
            cpu,
            pinned,
            counts,
            handle,
        })
    }

    /// The thread's CPU time so far (`CLOCK_THREAD_CPUTIME_ID` of that thread, read from
    /// here through `pthread_getcpuclockid`): user and system time of its own system calls.
    pub fn cpu_time(&self) -> Option<Duration> {
        stator_sys::clock::thread_cpu_ns_of(&self.handle).map(Duration::from_nanos)
    }

    /// Waits for the thread (after its stop flag was set); the error that ended it, if any.
    pub fn join(self) -> io::Result<()> {
        self.handle
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("receiving thread panicked")))
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Step 1's receiver: one `recvfrom` per datagram, into a buffer on the stack.
fn recvfrom_loop(sock: &UdpSocket, c: &Counts, stop: &AtomicBool) -> io::Result<()> {
    let mut buf = [0u8; BUF];
    let (mut packets, mut bytes) = (0u64, 0u64);
    while !stop.load(Relaxed) {
        match sock.recv_from(&mut buf) {
            Ok((n, _from)) => {
                packets += 1;
                bytes += n as u64;
                c.packets.store(packets, Relaxed);
                c.bytes.store(bytes, Relaxed);
                c.calls.store(packets, Relaxed);
            }
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn recvmmsg_loop(fd: BorrowedFd<'_>, n: usize, c: &Counts, stop: &AtomicBool) -> io::Result<()> {
    let mut batch = RecvBatch::new(n.clamp(1, MAX_BATCH), BUF, 0);
    let (mut packets, mut bytes, mut calls) = (0u64, 0u64, 0u64);
    while !stop.load(Relaxed) {
        match batch.recv(fd, libc::MSG_WAITFORONE) {
            Ok(k) => {
                packets += k as u64;
                bytes += batch.bytes();
                calls += 1;
                c.packets.store(packets, Relaxed);
                c.bytes.store(bytes, Relaxed);
                c.calls.store(calls, Relaxed);
            }
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// This process's CPU time, all its threads (`CLOCK_PROCESS_CPUTIME_ID`).
pub fn process_cpu_time() -> Duration {
    Duration::from_nanos(stator_sys::clock::process_cpu_ns())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both methods over loopback (no root): what they count is what was sent.
    #[test]
    fn both_methods_count_what_arrives() {
        for method in [Method::RecvFrom, Method::RecvMmsg(64)] {
            let sock = Arc::new(bind("127.0.0.1:0".parse().unwrap(), false, None).unwrap());
            let to = sock.local_addr().unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let r = Receiver::spawn(
                "t".into(),
                Arc::clone(&sock),
                method,
                None,
                Arc::clone(&stop),
            )
            .unwrap();
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            // in rounds of 10, each awaited: a receive buffer never overflows
            for round in 1..=50u64 {
                for _ in 0..10 {
                    tx.send_to(&[0u8; 32], to).unwrap();
                }
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while r.counts.packets.load(Relaxed) < round * 10
                    && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            assert_eq!(r.counts.packets.load(Relaxed), 500, "{method:?}");
            assert_eq!(r.counts.bytes.load(Relaxed), 500 * 32, "{method:?}");
            assert!(r.cpu_time().is_some());
            assert!(inode(&*sock).unwrap() > 0);
            stop.store(true, Relaxed);
            r.join().unwrap();
        }
    }
}
