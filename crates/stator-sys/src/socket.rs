//! `AF_PACKET` raw sockets, and the socket options `std` has no call for.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// An `AF_PACKET` raw socket for every protocol (`ETH_P_ALL`), bound to interface `ifindex`
/// of the calling thread's network namespace.
pub fn packet_socket(ifindex: u32) -> io::Result<OwnedFd> {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: socket() has no memory arguments; a non-negative result is a new descriptor
    // that nothing else owns.
    let fd = unsafe {
        let fd = libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            i32::from(proto),
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(fd)
    };
    // SAFETY: an all-zero sockaddr_ll is a valid value (plain integers and bytes).
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a live sockaddr_ll and the length is its size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// `setsockopt(fd, level, name, value)`, for an option whose value is plain data of type `T`
/// (an `int`, a `timeval`).
pub fn set_opt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live reference to a `T` and the length passed is its size; the
    // kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Datagrams the kernel dropped at `socket` so far because its receive buffer was full (the
/// socket's `sk_drops`, read with `getsockopt(SO_MEMINFO)`; the count `/proc/net/udp` shows
/// as `drops`).
pub fn socket_drops(socket: BorrowedFd<'_>) -> io::Result<u32> {
    // SK_MEMINFO_DROPS is index 8; newer kernels may add entries after it
    const DROPS: usize = 8;
    let mut info = [0u32; 16];
    let mut len = size_of_val(&info) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`, a live local of that size,
    // and updates `len`.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < (DROPS + 1) * size_of::<u32>() {
        return Err(io::Error::other("SO_MEMINFO without SK_MEMINFO_DROPS"));
    }
    Ok(info[DROPS])
}
