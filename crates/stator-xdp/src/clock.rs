//! The forwarder's clock (`bpf/include/clock.h`): `jiffies_64 × tick + base` instead of the
//! `bpf_ktime_get_coarse_ns()` helper.
//!
//! The helper call cost ~20 ns of every connection-table hit on the development VMs
//! (docs/xdp.md, round three); `bpf_jiffies64()` has the same resolution and the verifier inlines
//! it into one load. What the program needs to turn jiffies into the nanoseconds of
//! `CLOCK_MONOTONIC_COARSE` — the tick (1 s / HZ, which the kernel publishes as the coarse
//! clock's resolution) and the offset between the two clocks, measured here once per process
//! with a probe program run under `BPF_PROG_TEST_RUN` (`bpf/stator_clock.bpf.c`) — is written
//! into the forwarder's read-only data before it is loaded. Nothing else changes: the program's stamps stay within about a tick of
//! `CLOCK_MONOTONIC_COARSE`, so a connection table pinned by a build that called the helper keeps
//! its meaning, and userspace still compares stamps with `CLOCK_MONOTONIC_COARSE`.

use std::os::fd::AsFd;
use std::sync::OnceLock;
use std::time::Duration;

use aya::Ebpf;

use crate::error::{Result, XdpError};
use crate::testrun::{TestRunOpts, run_xdp};

/// The probe program in [`objects::CLOCK`](crate::objects::CLOCK).
pub const PROBE_PROGRAM: &str = "stator_clock_probe";

/// `.rodata` names of the forwarder's clock parameters (`bpf/include/clock.h`).
pub(crate) const TICK_GLOBAL: &str = "stator_clock_tick_ns";
pub(crate) const BASE_GLOBAL: &str = "stator_clock_base_ns";

const NS_PER_SEC: u64 = 1_000_000_000;
/// HZ values the kernel can be built with are 100 ..= 1000 on every architecture we know;
/// anything far outside is not a tick.
const HZ_RANGE: std::ops::RangeInclusive<u64> = 24..=10_000;
/// Samples of the three clocks the offset is taken from, and the time between two of them.
const OFFSET_SAMPLES: usize = 5;
const SAMPLE_GAP: Duration = Duration::from_micros(700);

/// How the forwarder reads the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramClock {
    tick_ns: u64,
    base_ns: u64,
}

/// One run of the probe: the three clocks read back to back in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    /// `jiffies_64`.
    pub jiffies: u64,
    /// `CLOCK_MONOTONIC_COARSE`, ns.
    pub coarse_ns: u64,
    /// `CLOCK_MONOTONIC`, ns.
    pub mono_ns: u64,
}

impl ProgramClock {
    /// The `bpf_ktime_get_coarse_ns()` helper: what a load without a probe gets.
    pub const HELPER: Self = Self {
        tick_ns: 0,
        base_ns: 0,
    };

    /// A jiffies clock with this tick and offset (tests, and a probe's result).
    pub const fn jiffies(tick_ns: u64, base_ns: u64) -> Self {
        Self { tick_ns, base_ns }
    }

    /// ns per jiffy (0: the helper).
    pub fn tick_ns(&self) -> u64 {
        self.tick_ns
    }

    /// The offset: `CLOCK_MONOTONIC_COARSE − jiffies_64 × tick` (mod 2^64).
    pub fn base_ns(&self) -> u64 {
        self.base_ns
    }

    /// The kernel's HZ, for a jiffies clock.
    pub fn hz(&self) -> Option<u64> {
        (self.tick_ns != 0).then(|| (NS_PER_SEC + self.tick_ns / 2) / self.tick_ns)
    }

    /// What the program computes at `jiffies` (`None` for the helper).
    pub fn at(&self, jiffies: u64) -> Option<u64> {
        (self.tick_ns != 0).then(|| {
            jiffies
                .wrapping_mul(self.tick_ns)
                .wrapping_add(self.base_ns)
        })
    }

    /// The clock the forwarder is loaded with: measured once per process by
    /// [`ProgramClock::probe`]; the helper, with a warning, if the probe fails (a kernel without
    /// `bpf_jiffies64` or BPF_PROG_TEST_RUN for XDP).
    pub fn for_load() -> Self {
        static MEASURED: OnceLock<ProgramClock> = OnceLock::new();
        if let Some(c) = MEASURED.get() {
            return *c;
        }
        match Self::probe() {
            Ok(c) => {
                tracing::info!(
                    hz = c.hz().unwrap_or(0),
                    tick_ns = c.tick_ns,
                    "XDP program clock: jiffies (inlined), measured against CLOCK_MONOTONIC_COARSE"
                );
                *MEASURED.get_or_init(|| c)
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "could not measure the kernel's tick: the XDP program reads the time with \
                     bpf_ktime_get_coarse_ns() (about 20 ns more per packet)"
                );
                Self::HELPER
            }
        }
    }

    /// The tick and the offset: the tick is the kernel's own (`CLOCK_MONOTONIC_COARSE`'s
    /// resolution, [`stator_sys::clock::coarse_tick`]), the offset comes from a few runs of
    /// the probe program.
    ///
    /// The tick used to be timed here, between two jiffies increments ~100 ms apart: on a
    /// loaded VM a preempted vCPU catches several jiffies up at once, and one such measurement
    /// took HZ 250 for 256 — a clock 2.4% fast, its stamps 85 ms ahead of the coarse clock an
    /// hour later. The kernel's number has no such error.
    pub fn probe() -> Result<Self> {
        let probe = ClockProbe::load()?;
        let mut samples = Vec::with_capacity(OFFSET_SAMPLES);
        for i in 0..OFFSET_SAMPLES {
            if i > 0 {
                std::thread::sleep(SAMPLE_GAP);
            }
            samples.push(probe.sample()?);
        }
        Self::from_tick(stator_sys::clock::coarse_tick(), &samples)
            .map_err(|reason| XdpError::Clock { reason })
    }

    /// The clock a tick and some samples imply (pure: the arithmetic of
    /// [`ProgramClock::probe`]). The offset is the smallest `coarse − jiffies × tick` of the
    /// samples, so the program's clock is never ahead of `CLOCK_MONOTONIC_COARSE` by more than
    /// the samples' jitter: a sample that caught jiffies incremented and the coarse clock not
    /// yet is a tick lower and wins. Behind by a tick is harmless; a stamp ahead of
    /// userspace's clock would make a fresh entry look as if it came from the future.
    pub fn from_tick(tick: Duration, samples: &[ClockSample]) -> std::result::Result<Self, String> {
        let tick_ns = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX);
        let hz = (NS_PER_SEC + tick_ns / 2).checked_div(tick_ns).unwrap_or(0);
        if !HZ_RANGE.contains(&hz) {
            return Err(format!(
                "the coarse clock's resolution, {tick_ns} ns, is no kernel tick (HZ {hz}, outside \
                 HZ {HZ_RANGE:?})"
            ));
        }
        let base = samples
            .iter()
            .map(|s| i128::from(s.coarse_ns) - i128::from(s.jiffies) * i128::from(tick_ns))
            .min()
            .ok_or_else(|| "no sample for the offset".to_string())?;
        // mod 2^64, as the program's wrapping u64 arithmetic reads it
        Ok(Self::jiffies(tick_ns, base as u64))
    }
}

/// The probe program, loaded (unpinned; nothing outlives it).
#[derive(Debug)]
pub struct ClockProbe {
    ebpf: Ebpf,
}

impl ClockProbe {
    /// Loads `stator_clock_probe` (needs root).
    pub fn load() -> Result<Self> {
        let ebpf = crate::forwarder::load_unpinned(
            crate::objects::CLOCK,
            "stator_clock",
            &[PROBE_PROGRAM],
        )?;
        Ok(Self { ebpf })
    }

    /// One run: the three clocks.
    pub fn sample(&self) -> Result<ClockSample> {
        let prog = crate::forwarder::program_fd(&self.ebpf, PROBE_PROGRAM)
            .expect("loaded by ClockProbe::load");
        let out = run_xdp(prog.as_fd(), &[0u8; 64], TestRunOpts::default())
            .map_err(|e| XdpError::io("running the clock probe", e))?;
        let word = |i: usize| -> Option<u64> {
            Some(u64::from_ne_bytes(
                out.data.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        match (word(0), word(1), word(2)) {
            (Some(jiffies), Some(coarse_ns), Some(mono_ns)) if out.action == 2 => Ok(ClockSample {
                jiffies,
                coarse_ns,
                mono_ns,
            }),
            _ => Err(XdpError::Clock {
                reason: format!(
                    "the probe returned action {} and {} bytes",
                    out.action,
                    out.data.len()
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel with `hz` whose coarse clock runs `phase_ns` after each tick, jiffies starting
    /// where Linux starts them (2^32 − 300 × HZ on 64-bit).
    fn kernel(hz: u64, phase_ns: u64) -> impl Fn(u64) -> ClockSample {
        let tick = NS_PER_SEC as f64 / hz as f64;
        let j0 = (1u64 << 32) - 300 * hz;
        move |mono_ns: u64| {
            let ticks = (mono_ns as f64 / tick).floor() as u64;
            ClockSample {
                jiffies: j0 + ticks,
                coarse_ns: (ticks as f64 * tick) as u64 + phase_ns,
                mono_ns,
            }
        }
    }

    /// Linux's `TICK_NSEC` for `hz`: what `clock_getres(CLOCK_MONOTONIC_COARSE)` returns.
    fn tick(hz: u64) -> Duration {
        Duration::from_nanos((NS_PER_SEC + hz / 2) / hz)
    }

    #[test]
    fn every_usual_hz_gives_an_offset_that_reproduces_the_coarse_clock() {
        for hz in [100, 250, 300, 1000] {
            let k = kernel(hz, 20_000);
            let t = 36_000 * NS_PER_SEC + 7_654_321; // ten hours of uptime
            let samples: Vec<_> = (0..5).map(|i| k(t + i * 700_000)).collect();
            let c = ProgramClock::from_tick(tick(hz), &samples).unwrap();
            assert_eq!(c.hz(), Some(hz));
            assert_eq!(c.tick_ns(), (NS_PER_SEC + hz / 2) / hz);
            // a day later the program's clock is within a tick of the coarse clock (HZ 300's
            // tick is not a whole number of ns: its error grows by 1/3 ns a tick, 8.6 ms a day)
            let later = k(t + 86_400 * NS_PER_SEC + 1_234_567);
            let program = c.at(later.jiffies).unwrap();
            let drift = (program as i128 - later.coarse_ns as i128).abs();
            assert!(
                drift <= tick(hz).as_nanos() as i128 + 9_000_000,
                "HZ {hz}: {drift} ns off"
            );
            if hz != 300 {
                assert!(
                    program <= later.coarse_ns,
                    "HZ {hz}: ahead of the coarse clock"
                );
            }
        }
    }

    #[test]
    fn a_sample_between_the_jiffies_and_the_coarse_update_pulls_the_offset_back_not_forward() {
        let k = kernel(250, 5_000);
        let mut torn = k(10 * NS_PER_SEC + 33_000_000);
        torn.jiffies += 1; // jiffies moved, the coarse clock not yet
        let good = k(10 * NS_PER_SEC + 34_000_000);
        let c = ProgramClock::from_tick(tick(250), &[good, torn]).unwrap();
        let program = c.at(good.jiffies).unwrap();
        assert!(
            program <= good.coarse_ns,
            "ahead: {program} > {}",
            good.coarse_ns
        );
        assert!(good.coarse_ns - program <= 4_000_000 + 5_000);
    }

    #[test]
    fn nonsense_ticks_and_no_samples_are_refused() {
        let s = [kernel(250, 0)(NS_PER_SEC + 1_000_000)];
        for bad in [
            Duration::ZERO,
            Duration::from_secs(1),
            Duration::from_nanos(1_000),
        ] {
            let e = ProgramClock::from_tick(bad, &s).unwrap_err();
            assert!(e.contains("no kernel tick"), "{bad:?}: {e}");
        }
        assert!(ProgramClock::from_tick(tick(250), &[]).is_err());
    }

    #[test]
    fn the_kernels_tick_is_accepted() {
        let s = [kernel(250, 0)(NS_PER_SEC)];
        let c = ProgramClock::from_tick(stator_sys::clock::coarse_tick(), &s).unwrap();
        assert!([100, 250, 300, 1000].contains(&c.hz().unwrap()), "{c:?}");
    }

    #[test]
    fn the_helper_has_no_hz_and_no_jiffies_time() {
        assert_eq!(ProgramClock::HELPER.hz(), None);
        assert_eq!(ProgramClock::HELPER.at(5), None);
        assert_eq!(ProgramClock::jiffies(4_000_000, 7).at(2), Some(8_000_007));
    }
}
