//! Processes: the process's own session, and signals to other processes.

use std::io;

/// Makes the calling process the leader of a new session (`setsid(2)`), so of a new process
/// group and, with autogroup scheduling, of a scheduling group of its own. Fails (`EPERM`)
/// for a process that already leads a process group.
pub fn new_session() -> io::Result<()> {
    rustix::process::setsid().map(drop).map_err(io::Error::from)
}

/// Sends `signal` (`libc::SIGTERM`, `libc::SIGKILL`…) to the one process `pid` (`kill(2)`).
/// Only a single process can be named: pid 0 and pids beyond `i32::MAX` (which `kill` reads as
/// process groups or every process) are refused with `EINVAL`, as is a signal the kernel does
/// not know.
///
/// # Errors
/// `EINVAL` as above; the kernel's `ESRCH` (no such process) or `EPERM`.
pub fn send_signal(pid: u32, signal: i32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: kill takes two integers and touches no memory of ours; `pid` is positive, so it
    // names one process.
    let rc = unsafe { libc::kill(pid, signal) };
    crate::zero_or_errno(rc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_one_process_only() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        send_signal(child.id(), libc::SIGKILL).unwrap();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        for bad in [0, u32::MAX, i32::MAX as u32 + 1] {
            let e = send_signal(bad, 0).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "pid {bad}");
        }
        // signal 0 only checks that the process exists
        send_signal(std::process::id(), 0).unwrap();
    }
}
