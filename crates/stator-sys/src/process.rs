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

/// Gives the kernel back the heap's free pages (`malloc_trim(0)`: every allocator arena, free
/// pages inside it included, not only its top): memory freed after a burst — a thousand
/// connections' serving state — stays in the process otherwise, counted in its RSS. Returns
/// whether any was released. Costs a walk of the heap under each arena's lock: call it
/// seldom (the proxy's workers do at most once a second, after connections went idle). A no-op
/// returning `false` where the C library is not glibc.
pub fn trim_heap() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: malloc_trim takes an integer and works on the allocator's own state under its
        // own locks; it frees nothing that is in use.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    #[cfg(target_env = "gnu")]
    #[test]
    fn trimming_gives_freed_pages_in_the_middle_of_the_heap_back() {
        // 64 MiB in 4 KiB blocks, touched; then all freed but every 64th, which pins the heap's
        // top and leaves the freed pages between them, where only a trim returns them
        let mut blocks: Vec<Box<[u8]>> = (0..16_384).map(|i| vec![i as u8; 4096].into()).collect();
        let kept: Vec<Box<[u8]>> = blocks
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| i % 64 == 63)
            .map(|(_, b)| std::mem::take(b))
            .collect();
        drop(blocks);
        let before = rss_kib();
        trim_heap();
        let after = rss_kib();
        assert!(
            after + 32 * 1024 < before,
            "RSS {before} KiB before the trim, {after} after"
        );
        assert!(kept.iter().all(|b| b.len() == 4096));
    }

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
