//! CPU affinity: pinning the calling thread to one CPU, the CPUs it may run on, the one it
//! runs on.

use std::io;

/// Pins the calling thread to `cpu` (`sched_setaffinity(0, …)`: this thread only). A CPU
/// beyond the kernel's set size is `EINVAL`, like one the kernel refuses.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: a zeroed cpu_set_t is a valid (empty) set; CPU_SET writes inside it (cpu was
    // checked against its size); sched_setaffinity reads `size_of` bytes of it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    crate::zero_or_errno(rc)
}

/// The CPUs in the calling thread's affinity mask, in increasing order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid (empty) set; sched_getaffinity writes at most its
    // size into it; CPU_ISSET only reads inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect())
    }
}

/// The CPU the calling thread runs on now (`sched_getcpu`).
pub fn current_cpu() -> io::Result<usize> {
    // SAFETY: sched_getcpu takes no arguments; it returns -1 on error, checked below.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).map_err(|_| io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pins_to_an_allowed_cpu_and_nowhere_impossible() {
        std::thread::spawn(|| {
            let cpus = allowed_cpus().unwrap();
            assert!(!cpus.is_empty());
            let last = *cpus.last().unwrap();
            pin_to_cpu(last).unwrap();
            assert_eq!(allowed_cpus().unwrap(), [last]);
            assert_eq!(current_cpu().unwrap(), last);
            assert!(pin_to_cpu(libc::CPU_SETSIZE as usize).is_err());
        })
        .join()
        .unwrap();
    }
}
