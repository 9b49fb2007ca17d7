//! Descriptors handed to another process over a Unix stream socket (`SCM_RIGHTS`): how a node
//! gives its listening sockets to the process that replaces it (docs/operations.md,
//! "Upgrades").

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// The most descriptors one message carries (the kernel's `SCM_MAX_FD` is 253).
pub const MAX_FDS: usize = 250;

/// Sends `data` (at least one byte) with `fds` attached, in one `sendmsg`. The receiver gets
/// its own descriptors for the same open files; the sender keeps its own.
///
/// # Errors
/// `InvalidInput` for empty `data` or more than [`MAX_FDS`] descriptors; `WriteZero` when the
/// kernel took only part of `data`; the kernel's errors unchanged.
pub fn send_with_fds(socket: impl AsFd, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if data.is_empty() || fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} bytes with {} descriptors: at least one byte and at most {MAX_FDS} descriptors",
                data.len(),
                fds.len()
            ),
        ));
    }
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let payload = std::mem::size_of_val(raw.as_slice());
    // SAFETY: CMSG_SPACE only computes a size from its argument.
    let space = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8).max(1)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty header; the fields are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    if !raw.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: `msg_control` points at `space` writable, 8-byte aligned bytes, enough for
        // one header holding `payload` bytes (CMSG_SPACE); CMSG_FIRSTHDR returns a pointer
        // into that buffer, and CMSG_DATA a pointer `payload` bytes fit behind.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(payload as u32) as _;
            std::ptr::copy_nonoverlapping(
                raw.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                payload,
            );
        }
    }
    let sent = loop {
        // SAFETY: `msg` points at `iov` (which points at `data`) and at `control`, all alive
        // for the call; the kernel only reads them.
        let n = unsafe {
            libc::sendmsg(
                socket.as_fd().as_raw_fd(),
                &raw const msg,
                libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    if sent != data.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("sent {sent} of {} bytes", data.len()),
        ));
    }
    Ok(())
}

/// Receives one message into `buf` with up to `max_fds` descriptors attached (close-on-exec):
/// the bytes read and the descriptors, which the caller now owns. 0 bytes: the peer closed.
///
/// # Errors
/// `InvalidData` when the kernel truncated the descriptors (more than `max_fds` were sent:
/// those it did deliver are closed); the kernel's errors unchanged.
pub fn recv_with_fds(
    socket: impl AsFd,
    buf: &mut [u8],
    max_fds: usize,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let max_fds = max_fds.min(MAX_FDS);
    let payload = max_fds * size_of::<RawFd>();
    // SAFETY: CMSG_SPACE only computes a size from its argument.
    let space = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8).max(1)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty header; the fields are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: `msg` points at `iov` (which points at `buf`, writable for its length) and
        // at `control` (writable for `space` bytes), all alive for the call.
        let n = unsafe {
            libc::recvmsg(
                socket.as_fd().as_raw_fd(),
                &raw mut msg,
                libc::MSG_CMSG_CLOEXEC,
            )
        };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` with `msg.msg_controllen` bytes of well-formed
    // headers; CMSG_FIRSTHDR/CMSG_NXTHDR walk them within that length. Each SCM_RIGHTS
    // header's data holds `(cmsg_len - CMSG_LEN(0)) / 4` descriptors the kernel installed in
    // this process for us, each owned by nobody else: wrapping each in an OwnedFd once is
    // sound. The data may be unaligned: read_unaligned.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.add(i * size_of::<RawFd>()).cast());
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("more than {max_fds} descriptors sent: the message was truncated"),
        ));
    }
    Ok((n, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    #[test]
    fn descriptors_cross_and_stay_usable() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut x, y) = UnixStream::pair().unwrap();
        send_with_fds(&a, b"hello", &[y.as_fd()]).unwrap();
        drop(y);
        let mut buf = [0u8; 16];
        let (n, fds) = recv_with_fds(&b, &mut buf, 4).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 1);
        let mut y2 = UnixStream::from(fds.into_iter().next().unwrap());
        x.write_all(b"via").unwrap();
        let mut got = [0u8; 3];
        y2.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"via");
    }

    #[test]
    fn too_many_descriptors_are_refused_and_closed() {
        let (a, b) = UnixStream::pair().unwrap();
        let pairs: Vec<_> = (0..3).map(|_| UnixStream::pair().unwrap()).collect();
        let fds: Vec<BorrowedFd<'_>> = pairs.iter().map(|(s, _)| s.as_fd()).collect();
        send_with_fds(&a, b"x", &fds).unwrap();
        let mut buf = [0u8; 4];
        let err = recv_with_fds(&b, &mut buf, 1).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(send_with_fds(&a, b"", &[]).is_err());
    }
}
