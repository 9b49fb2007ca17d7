//! The kernel's tick, as the coarse clocks publish it.

use std::time::Duration;

use rustix::time::{ClockId, clock_getres};

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
}
