//! Pinning the measuring thread to one CPU, so a benchmark is not migrated mid-measurement.

/// The last CPU this process may run on (the default for benchmarks: CPU 0 takes more of the
/// machine's interrupts), or 0 if the affinity mask cannot be read.
pub fn default_cpu() -> usize {
    allowed_cpus().last().copied().unwrap_or(0)
}

/// CPUs in this thread's affinity mask.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid (empty) set; sched_getaffinity(0, …) fills it for
    // the calling thread within the size given; CPU_ISSET only reads inside it.
    #[allow(unsafe_code)]
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// Pins the calling thread to `cpu`. Returns whether the kernel accepted it (a benchmark that
/// could not pin still runs, and says so).
pub fn pin_to_cpu(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it (cpu < CPU_SETSIZE was
    // checked); sched_setaffinity(0, …) affects only the calling thread.
    #[allow(unsafe_code)]
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) == 0
    }
}
