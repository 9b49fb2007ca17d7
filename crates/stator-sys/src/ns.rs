//! Namespaces: moving the calling thread into another network namespace.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Moves the calling thread — this thread only, not the process — into the network namespace
/// that `ns` refers to (`setns(2)` with `CLONE_NEWNET`): an open `/run/netns/<name>` or
/// `/proc/<pid>/ns/net`. Sockets it opens from then on belong to that namespace; the thread
/// cannot come back except by entering its old namespace the same way.
///
/// # Errors
/// The kernel's: `EINVAL` when `ns` is not a network namespace, `EPERM` without
/// `CAP_SYS_ADMIN`.
pub fn enter_net(ns: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: setns takes a descriptor (borrowed, open for the call) and an integer, and
    // touches no memory of ours.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    crate::zero_or_errno(rc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd as _;

    #[test]
    fn a_thread_reenters_its_own_namespace_and_refuses_other_files() {
        let own = std::fs::File::open("/proc/self/ns/net").unwrap();
        let not_ns = std::fs::File::open("/proc/self/status").unwrap();
        std::thread::spawn(move || {
            let e = enter_net(not_ns.as_fd()).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
            // the namespace the thread is in already: allowed to root only
            if crate::users::is_root() {
                enter_net(own.as_fd()).unwrap();
            }
        })
        .join()
        .unwrap();
    }
}
