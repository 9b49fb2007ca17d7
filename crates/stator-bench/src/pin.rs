//! Pinning the measuring thread to one CPU, so a benchmark is not migrated mid-measurement
//! (stator-sys's `cpu`, with the benchmarks' defaults).

/// The last CPU this process may run on (the default for benchmarks: CPU 0 takes more of the
/// machine's interrupts), or 0 if the affinity mask cannot be read.
pub fn default_cpu() -> usize {
    allowed_cpus().last().copied().unwrap_or(0)
}

/// CPUs in this thread's affinity mask (none if it cannot be read).
pub fn allowed_cpus() -> Vec<usize> {
    stator_sys::cpu::allowed_cpus().unwrap_or_default()
}

/// Pins the calling thread to `cpu`. Returns whether the kernel accepted it (a benchmark that
/// could not pin still runs, and says so).
pub fn pin_to_cpu(cpu: usize) -> bool {
    stator_sys::cpu::pin_to_cpu(cpu).is_ok()
}
