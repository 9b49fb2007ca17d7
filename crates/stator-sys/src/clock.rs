//! The kernel's tick, as the coarse clocks publish it; the clocks Stator reads, in ns.

use std::time::Duration;

use rustix::time::{ClockId, clock_getres, clock_gettime};

/// The resolution of `CLOCK_MONOTONIC_COARSE`: the kernel's tick, `TICK_NSEC` =
/// (10⁹ + HZ/2) / HZ ns (Linux's `posix_get_coarse_res`), the period at which both the coarse
/// clocks and `jiffies_64` advance. Exact, where timing two jiffies increments from userspace
/// is at the mercy of the scheduler (a preempted vCPU catches up several jiffies at once).
pub fn coarse_tick() -> Duration {
    let res = clock_getres(ClockId::MonotonicCoarse);
    Duration::new(
        u64::try_from(res.tv_sec).unwrap_or(0),
        u32::try_from(res.tv_nsec).unwrap_or(0),
    )
}

/// `clock` in nanoseconds (wrapping, as the kernel's own `u64` clocks do).
fn clock_ns(clock: ClockId) -> u64 {
    let ts = clock_gettime(clock);
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC` in ns (timers, cost measurements).
pub fn monotonic_ns() -> u64 {
    clock_ns(ClockId::Monotonic)
}

/// `CLOCK_MONOTONIC_COARSE` in ns: what the XDP program's `bpf_ktime_get_coarse_ns` reads, so
/// connection-table timestamps mean the same in user space and in the kernel.
pub fn monotonic_coarse_ns() -> u64 {
    clock_ns(ClockId::MonotonicCoarse)
}

/// The calling thread's CPU time in ns (`CLOCK_THREAD_CPUTIME_ID`): what cost figures use, so
/// time the thread spent descheduled on a busy machine is not counted as work.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(ClockId::ThreadCPUTime)
}

/// The CPU time in ns of the thread `handle` runs (its `CLOCK_THREAD_CPUTIME_ID`, read from
/// another thread through `pthread_getcpuclockid`); `None` when the kernel will not say.
pub fn thread_cpu_ns_of<T>(handle: &std::thread::JoinHandle<T>) -> Option<u64> {
    use std::os::unix::thread::JoinHandleExt as _;
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the id comes from a JoinHandle borrowed for the call and so not yet joined: it
    // names a thread of this process whose id stays valid; both out-pointers are to live
    // locals.
    let ok = unsafe {
        libc::pthread_getcpuclockid(handle.as_pthread_t(), &mut clock) == 0
            && libc::clock_gettime(clock, &mut ts) == 0
    };
    ok.then(|| (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64)
}

/// This process's CPU time in ns, all its threads (`CLOCK_PROCESS_CPUTIME_ID`).
pub fn process_cpu_ns() -> u64 {
    clock_ns(ClockId::ProcessCPUTime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_is_one_of_a_kernels_hz() {
        let tick = coarse_tick().as_nanos() as u64;
        // HZ 24 ..= 10,000 (every architecture's Kconfig choice lies inside)
        assert!(
            (100_000..=41_666_667).contains(&tick),
            "CLOCK_MONOTONIC_COARSE resolution {tick} ns is no kernel tick"
        );
        let hz = (1_000_000_000 + tick / 2) / tick;
        assert_eq!((1_000_000_000 + hz / 2) / hz, tick, "TICK_NSEC of HZ {hz}");
    }

    #[test]
    fn a_threads_cpu_clock_advances_with_work_and_the_monotonic_clocks_agree() {
        let t0 = thread_cpu_ns();
        let mut x = 0u64;
        while thread_cpu_ns() - t0 < 1_000_000 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(process_cpu_ns() >= thread_cpu_ns() - t0);
        let (fine, coarse) = (monotonic_ns(), monotonic_coarse_ns());
        let tick = coarse_tick().as_nanos() as u64;
        assert!(coarse <= fine + tick && fine <= coarse + 2 * tick + 1_000_000_000);
    }
}
