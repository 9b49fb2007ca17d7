//! The credentials of a Unix socket's peer.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// What the kernel recorded of a peer when it connected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCreds {
    /// Process id at connect time.
    pub pid: u32,
    /// Effective user id.
    pub uid: u32,
    /// Effective primary group id.
    pub gid: u32,
    /// Supplementary group ids.
    pub groups: Vec<u32>,
}

impl PeerCreds {
    /// Whether the peer is in group `gid` (primary or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// Most supplementary groups asked for at first (the kernel's limit is 65,536; more than a
/// few dozen is rare): a larger buffer is used when the kernel says this one is too small.
const GROUPS_FIRST: usize = 64;

/// The credentials of the peer of a connected Unix socket (`SO_PEERCRED`, `SO_PEERGROUPS`).
///
/// # Errors
/// The kernel's, e.g. `ENOTCONN`, or `ENOPROTOOPT` on a kernel older than 4.13.
pub fn peer_creds(socket: impl AsFd) -> io::Result<PeerCreds> {
    let fd = socket.as_fd().as_raw_fd();
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `fd` is a valid descriptor borrowed for this call; `cred` is a writable
    // `ucred` and `len` holds its size, which the kernel writes at most.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut groups: Vec<libc::gid_t> = vec![0; GROUPS_FIRST];
    loop {
        let mut len = (groups.len() * size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: `groups` is a writable buffer of `len` bytes; the kernel writes at most
        // `len` bytes and sets `len` to what it wrote (or, with ERANGE, to what it needs).
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &raw mut len,
            )
        };
        let needed = len as usize / size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(needed);
            break;
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) || needed <= groups.len() {
            return Err(e);
        }
        groups.resize(needed, 0);
    }
    Ok(PeerCreds {
        pid: u32::try_from(cred.pid).unwrap_or(0),
        uid: cred.uid,
        gid: cred.gid,
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_socket_pair_sees_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let c = peer_creds(&a).unwrap();
        assert_eq!(c.pid, std::process::id());
        assert_eq!(c.uid, crate::users::effective_uid());
        assert!(c.in_group(crate::users::effective_gid()));
        let own: Vec<u32> = rustix::process::getgroups()
            .unwrap()
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        for g in own {
            assert!(c.in_group(g), "supplementary group {g} seen");
        }
    }
}
