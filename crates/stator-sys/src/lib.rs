//! # stator-sys — the system calls Stator makes beyond `std`
//!
//! Layer: the bottom of the I/O side, beside `std`; no other Stator crate below it. It holds
//! what the node needs from the kernel that `std` does not offer, each behind a safe function
//! with a plain Rust signature:
//! - [`bpf_build`]: BPF C compiled with clang the one way every object is built, for the
//!   build scripts that embed objects and the tests that build probes (a process, no `unsafe`);
//! - [`clock`]: the kernel's tick (the coarse clocks' resolution), and the clocks read in
//!   nanoseconds: monotonic, coarse monotonic (the XDP program's), a thread's and the process's CPU time;
//! - [`cpu`]: pinning the calling thread to a CPU, and the CPUs it may run on;
//! - [`mmsg`]: `recvmmsg` into buffers set up once, `sendmmsg` of slices;
//! - [`mmap`]: memory mappings owned by a value (anonymous, or a kernel object's memory:
//!   AF_XDP rings, `BPF_F_MMAPABLE` arrays), unmapped on drop; the page size;
//! - [`ns`]: a thread moved into another network namespace (`setns`);
//! - [`process`]: a session of the process's own (`setsid`), a signal to one process;
//! - [`socket`]: `AF_PACKET` raw sockets, and socket options `std` has no call for (set any,
//!   read the drop count);
//! - [`creds`]: who is at the other end of a Unix socket — user, primary group and, with
//!   `SO_PEERGROUPS`, every supplementary group, as the kernel recorded them at `connect`
//!   (no race with the peer exiting or changing identity later);
//! - [`limits`]: the process's descriptor limit (`RLIMIT_NOFILE`), set or raised to its hard
//!   limit, and the descriptors open now;
//! - [`users`]: a group name to its id (the local group database), the effective ids;
//! - [`fdpass`]: descriptors handed to another process over a Unix socket (`SCM_RIGHTS`);
//! - [`files`]: a file replaced atomically through a temporary file created exclusively in
//!   the target's directory (`O_EXCL | O_NOFOLLOW`, chosen mode and group): a user who can
//!   write to that directory cannot make the node write through a symbolic link.
//!
//! Contract: every function is safe to call, its `unsafe` blocks inside, each with its
//! `SAFETY` comment; functions return `io::Error`s from the kernel unchanged. Every other
//! crate forbids `unsafe_code`, except where it reaches into memory it shares with the kernel
//! or speaks a kernel interface of its own (stator-afxdp's rings, UMEM and AF_XDP socket;
//! stator-xdp's BPF arrays and the BPF and netlink calls aya lacks), which deny it outside the
//! modules their crate docs name. It never logs, never allocates on a hot path and
//! knows nothing of Stator's configuration.

pub mod bpf_build;
pub mod clock;
pub mod cpu;
pub mod creds;
pub mod fdpass;
pub mod files;
pub mod iface;
pub mod limits;
pub mod mmap;
pub mod mmsg;
pub mod ns;
pub mod process;
pub mod socket;
pub mod splice;
pub mod users;

/// How many times [`retry_interrupted`] makes a call the kernel interrupted.
pub const INTERRUPTED_ATTEMPTS: u32 = 5;

/// Calls `call` again, up to [`INTERRUPTED_ATTEMPTS`] times in all, while the kernel answers
/// `EAGAIN` — what `BPF_PROG_LOAD` answers when a signal arrives while the verifier runs
/// (libbpf retries the same way). `errno` reads the error's raw OS error; any other error,
/// or the last attempt's, is returned as it came.
pub fn retry_interrupted<T, E>(
    mut call: impl FnMut() -> Result<T, E>,
    errno: impl Fn(&E) -> Option<i32>,
) -> Result<T, E> {
    let mut attempt = 1;
    loop {
        match call() {
            Err(e) if attempt < INTERRUPTED_ATTEMPTS && errno(&e) == Some(libc::EAGAIN) => {
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// A system call's `0 on success, -1 and errno on failure`, as an `io::Result`.
pub(crate) fn zero_or_errno(rc: libc::c_int) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn an_interrupted_call_is_made_again_and_other_errors_are_not() {
        let mut calls = 0;
        let r: io::Result<u32> = retry_interrupted(
            || {
                calls += 1;
                if calls < 3 {
                    Err(io::Error::from_raw_os_error(libc::EAGAIN))
                } else {
                    Ok(7)
                }
            },
            io::Error::raw_os_error,
        );
        assert_eq!((r.unwrap(), calls), (7, 3));

        let mut calls = 0;
        let r: io::Result<()> = retry_interrupted(
            || {
                calls += 1;
                Err(io::Error::from_raw_os_error(libc::EPERM))
            },
            io::Error::raw_os_error,
        );
        assert_eq!(
            (r.unwrap_err().raw_os_error(), calls),
            (Some(libc::EPERM), 1)
        );

        let mut calls = 0;
        let r: io::Result<()> = retry_interrupted(
            || {
                calls += 1;
                Err(io::Error::from_raw_os_error(libc::EAGAIN))
            },
            io::Error::raw_os_error,
        );
        assert!(r.is_err());
        assert_eq!(calls, INTERRUPTED_ATTEMPTS);
    }
}
