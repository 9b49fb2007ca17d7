//! The kernel interfaces the AF_XDP plane needs, as small safe functions over `libc`: the
//! `AF_XDP` socket and its options, `sendto`/`recvfrom` wake-ups, `ppoll`, an eventfd, the
//! RX queue count. Every system call of the crate is here (memory maps, pinning and clocks are
//! stator-sys's); the crate's other `unsafe` is the rings' and the UMEM's memory (see `lib.rs`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

pub(crate) use stator_sys::mmap::{Mmap, page_size};
pub(crate) use stator_sys::users::is_root;

/// `-1` as an error, else the value.
fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A new `AF_XDP` socket.
pub(crate) fn xsk_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket() has no memory arguments; a non-negative result is a new descriptor
    // that nothing else owns.
    unsafe {
        let fd = cvt(libc::socket(
            libc::AF_XDP,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            0,
        ))?;
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// `setsockopt(fd, SOL_XDP, name, value)` (stator-sys's `set_opt`).
pub(crate) fn set_xdp_opt<T: Copy>(
    fd: BorrowedFd<'_>,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    stator_sys::socket::set_opt(fd, libc::SOL_XDP, name, value)
}

/// `getsockopt(fd, SOL_XDP, name)` into a `T`, with the length the kernel wrote.
pub(crate) fn xdp_opt<T>(fd: BorrowedFd<'_>, name: libc::c_int, init: T) -> io::Result<(T, usize)> {
    let mut value = init;
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `value`, a live `T` of that size,
    // and updates `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            (&mut value as *mut T).cast(),
            &mut len,
        )
    };
    cvt(rc)?;
    Ok((value, len as usize))
}

/// `bind(fd, sockaddr_xdp{…})`.
pub(crate) fn bind_xsk(
    fd: BorrowedFd<'_>,
    ifindex: u32,
    queue: u32,
    flags: u16,
    shared_umem_fd: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let addr = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: shared_umem_fd.map_or(0, |f| f.as_raw_fd() as u32),
    };
    // SAFETY: `addr` is a valid sockaddr_xdp and the length is its size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_xdp).cast(),
            size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    cvt(rc).map(drop)
}

/// `sendto(fd, NULL, 0, MSG_DONTWAIT)`: asks the kernel to transmit what the TX ring holds.
/// `EAGAIN`, `EBUSY` and `ENOBUFS` mean "not now" and are not errors (af_xdp.rst).
pub(crate) fn kick_tx(fd: RawFd) -> io::Result<()> {
    // SAFETY: no buffer and no address are passed.
    let rc = unsafe {
        libc::sendto(
            fd,
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if rc >= 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN) => Ok(()),
        _ => Err(e),
    }
}

/// `recvfrom(fd, NULL, 0, MSG_DONTWAIT)`: wakes the driver to refill from the fill ring.
pub(crate) fn wake_rx(fd: RawFd) {
    // SAFETY: no buffer and no address are passed; the result is irrelevant (a wake-up).
    unsafe {
        libc::recvfrom(
            fd,
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
    }
}

/// `ppoll` on `fds` for `POLLIN`, at most `timeout`. Returns whether any is readable.
pub(crate) fn poll_in(fds: &mut [libc::pollfd], timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `fds` is a live slice of pollfd of the length passed; `ts` lives for the call.
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    rc > 0
}

/// A non-blocking eventfd: the packet threads' way to wake the I/O thread from `ppoll`.
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: eventfd() has no memory arguments; a non-negative result is a new fd.
        unsafe {
            let fd = cvt(libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC))?;
            Ok(Self(OwnedFd::from_raw_fd(fd)))
        }
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// A second descriptor for the same counter (the heap rings' stand-in for a socket).
    #[cfg(test)]
    pub(crate) fn try_clone_fd(&self) -> io::Result<OwnedFd> {
        self.0.try_clone()
    }

    /// Adds 1 (wakes a poller).
    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64, as eventfd requires.
        unsafe {
            libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    /// Resets the counter (after a wake-up).
    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64; non-blocking.
        unsafe {
            libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8);
        }
    }
}

/// `SIOCETHTOOL` (linux/sockios.h).
const SIOCETHTOOL: libc::c_ulong = 0x8946;
/// `ETHTOOL_GCHANNELS` (linux/ethtool.h).
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// The number of RX queues of interface `name` in the calling thread's network namespace
/// (`ETHTOOL_GCHANNELS`: the larger of the RX and combined channel counts), at least 1. An
/// interface without the ethtool operation has one queue.
pub(crate) fn rx_queues(name: &str) -> u32 {
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    // SAFETY: a zeroed ifreq is valid; the name is copied inside its IFNAMSIZ array (NUL
    // kept); ifr_data points at a live ethtool_channels that the kernel fills; the socket is
    // closed by OwnedFd.
    unsafe {
        let Ok(fd) = cvt(libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        )) else {
            return 1;
        };
        let sock = OwnedFd::from_raw_fd(fd);
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (d, s) in ifr
            .ifr_name
            .iter_mut()
            .zip(name.bytes().take(libc::IFNAMSIZ - 1))
        {
            *d = s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_data = (&mut ch as *mut EthtoolChannels).cast();
        if libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) < 0 {
            return 1;
        }
    }
    ch.rx_count.max(ch.combined_count).max(1)
}

/// Sets the calling thread's timer slack (`PR_SET_TIMERSLACK`), so a short `ppoll` timeout
/// is honoured to about this precision instead of the default 50 µs.
pub(crate) fn set_timer_slack_ns(ns: u64) {
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes an integer and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0);
    }
}
