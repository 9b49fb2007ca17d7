//! The forwarder's clock (`bpf/include/clock.h`): `jiffies_64 × tick + base` instead of the
//! `bpf_ktime_get_coarse_ns()` helper.
//!
//! The helper call cost ~20 ns of every connection-table hit on the development VMs
//! (docs/xdp.md, round three); `bpf_jiffies64()` has the same resolution and the verifier inlines
//! it into one load. What the program needs to turn jiffies into the nanoseconds of
//! `CLOCK_MONOTONIC_COARSE` — the tick (1 s / HZ) and the offset between the two clocks — is
//! measured here, once per process, with a probe program run under `BPF_PROG_TEST_RUN`
//! (`bpf/stator_clock.bpf.c`), and written into the forwarder's read-only data before it is
//! loaded. Nothing else changes: the program's stamps stay within about a tick of
//! `CLOCK_MONOTONIC_COARSE`, so a connection table pinned by a build that called the helper keeps
//! its meaning, and userspace still compares stamps with `CLOCK_MONOTONIC_COARSE`.

use std::os::fd::AsFd;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use aya::Ebpf;

use crate::error::{Result, XdpError};
use crate::testrun::{TestRunOpts, run_xdp};

/// The probe program in [`objects::CLOCK`](crate::objects::CLOCK).
pub const PROBE_PROGRAM: &str = "stator_clock_probe";

/// `.rodata` names of the forwarder's clock parameters (`bpf/include/clock.h`).
pub(crate) const TICK_GLOBAL: &str = "stator_clock_tick_ns";
pub(crate) const BASE_GLOBAL: &str = "stator_clock_base_ns";

const NS_PER_SEC: u64 = 1_000_000_000;
/// Two samples on either side of a jiffies increment count as an edge when they are at most this
/// far apart (otherwise the thread was preempted between them and the edge's time is unknown).
const EDGE_WINDOW_NS: u64 = 50_000;
/// Time between the two edges the tick is measured over: 10 ticks at HZ 100, and long enough
/// that the edges' uncertainty (and the tick interrupt's own jitter) moves the estimate by
/// well under 1%.
const SPAN: Duration = Duration::from_millis(100);
/// A probe that has not found its edges by then gives up.
const PROBE_DEADLINE: Duration = Duration::from_secs(2);
/// HZ values the kernel can be built with are 100 ..= 1000 on every architecture we know;
/// anything far outside is a measurement gone wrong.
const HZ_RANGE: std::ops::RangeInclusive<u64> = 24..=10_000;
/// The HZ choices of Linux's Kconfig (x86: 100, 250, 300, 1000; other architectures add the
/// rest): a measurement within 1% of one is taken to be it.
const USUAL_HZ: [u64; 12] = [24, 32, 48, 64, 100, 128, 200, 250, 256, 300, 1000, 1024];

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

/// A jiffies increment seen by two samples at most [`EDGE_WINDOW_NS`] apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockEdge {
    /// The last sample before the increment.
    pub before: ClockSample,
    /// The first sample after it.
    pub after: ClockSample,
}

impl ClockEdge {
    /// The edge as `(jiffies after it, CLOCK_MONOTONIC ns at it)`: the midpoint of the samples.
    fn at(&self) -> (u64, u64) {
        let mid = self.before.mono_ns + (self.after.mono_ns - self.before.mono_ns) / 2;
        (self.after.jiffies, mid)
    }
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

    /// Measures the tick and the offset with the probe program: an edge of `jiffies_64`, another
    /// one [`SPAN`] later, then a few samples for the offset.
    pub fn probe() -> Result<Self> {
        let probe = ClockProbe::load()?;
        let deadline = Instant::now() + PROBE_DEADLINE;
        let a = probe.edge(deadline)?;
        std::thread::sleep(SPAN);
        let b = probe.edge(deadline)?;
        let mut samples = vec![b.after];
        for _ in 0..4 {
            std::thread::sleep(Duration::from_micros(700));
            samples.push(probe.sample()?);
        }
        Self::from_edges(&a, &b, &samples).map_err(|reason| XdpError::Clock { reason })
    }

    /// The clock two edges and some samples imply (pure: the arithmetic of
    /// [`ProgramClock::probe`]). The tick is the time between the edges over the jiffies
    /// between them, taken to be one of Linux's usual HZ choices when within 1% of it (the edges
    /// are [`SPAN`] apart and each known to within [`EDGE_WINDOW_NS`]), else rounded to a whole
    /// HZ. The offset is the smallest `coarse − jiffies × tick` of the samples, so the
    /// program's clock is never ahead of `CLOCK_MONOTONIC_COARSE` by more than the samples'
    /// jitter: a sample that caught jiffies incremented and the coarse clock not yet is a tick
    /// lower and wins. Behind by a tick is harmless; a stamp ahead of userspace's clock would
    /// make a fresh entry look as if it came from the future.
    pub fn from_edges(
        a: &ClockEdge,
        b: &ClockEdge,
        samples: &[ClockSample],
    ) -> std::result::Result<Self, String> {
        let (ja, ta) = a.at();
        let (jb, tb) = b.at();
        if jb <= ja || tb <= ta {
            return Err(format!(
                "the second edge (jiffies {jb}, {tb} ns) is not after the first ({ja}, {ta} ns)"
            ));
        }
        let measured = (tb - ta) as f64 / (jb - ja) as f64;
        let rate = NS_PER_SEC as f64 / measured;
        let hz = USUAL_HZ
            .into_iter()
            .find(|&h| (rate - h as f64).abs() <= h as f64 * 0.01)
            .unwrap_or(rate.round() as u64);
        if !HZ_RANGE.contains(&hz) {
            return Err(format!(
                "measured a tick of {measured:.0} ns (HZ {hz}), outside HZ {HZ_RANGE:?}"
            ));
        }
        let tick_ns = (NS_PER_SEC + hz / 2) / hz;
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

    /// Samples until `jiffies_64` moves between two samples close enough together.
    pub fn edge(&self, deadline: Instant) -> Result<ClockEdge> {
        let mut before = self.sample()?;
        loop {
            let after = self.sample()?;
            if after.jiffies != before.jiffies
                && after.mono_ns.saturating_sub(before.mono_ns) <= EDGE_WINDOW_NS
            {
                return Ok(ClockEdge { before, after });
            }
            if Instant::now() > deadline {
                return Err(XdpError::Clock {
                    reason: format!("no jiffies edge within {PROBE_DEADLINE:?}"),
                });
            }
            before = after;
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

    /// The time of tick boundary `i` of a kernel with `hz`.
    fn boundary(hz: u64, i: u64) -> u64 {
        (i as u128 * NS_PER_SEC as u128).div_ceil(hz as u128) as u64
    }

    /// An edge around the boundary at `mono`, its second sample `late` ns after it.
    fn edge_at(k: &impl Fn(u64) -> ClockSample, mono: u64, late: u64) -> ClockEdge {
        ClockEdge {
            before: k(mono - 1_000),
            after: k(mono + late),
        }
    }

    #[test]
    fn every_usual_hz_is_recovered_with_an_offset_that_reproduces_the_coarse_clock() {
        for hz in [100, 250, 300, 1000] {
            let k = kernel(hz, 20_000);
            let tick = NS_PER_SEC / hz;
            let i0 = 36_000 * hz + 7; // ten hours of uptime
            // the first edge seen at once, the second 45 µs late: the window's worst
            let a = edge_at(&k, boundary(hz, i0), 2_000);
            let b = edge_at(&k, boundary(hz, i0 + hz / 10), 45_000);
            let t = boundary(hz, i0 + hz / 10);
            let samples: Vec<_> = (0..5).map(|i| k(t + 1_000 + i * 700_000)).collect();
            let c = ProgramClock::from_edges(&a, &b, &samples).unwrap();
            assert_eq!(c.hz(), Some(hz));
            assert_eq!(c.tick_ns(), (NS_PER_SEC + hz / 2) / hz);
            // a day later the program's clock is within a tick of the coarse clock (HZ 300's
            // tick is not a whole number of ns: its error grows by 1/3 ns a tick, 8.6 ms a day)
            let later = k(t + 86_400 * NS_PER_SEC + 1_234_567);
            let program = c.at(later.jiffies).unwrap();
            let drift = (program as i128 - later.coarse_ns as i128).abs();
            assert!(
                drift <= i128::from(tick) + 9_000_000,
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
        let a = edge_at(&k, 10 * NS_PER_SEC, 2_000);
        let b = edge_at(&k, 10 * NS_PER_SEC + 100_000_000, 2_000);
        let mut torn = k(10 * NS_PER_SEC + 33_000_000);
        torn.jiffies += 1; // jiffies moved, the coarse clock not yet
        let good = k(10 * NS_PER_SEC + 34_000_000);
        let c = ProgramClock::from_edges(&a, &b, &[good, torn]).unwrap();
        let program = c.at(good.jiffies).unwrap();
        assert!(
            program <= good.coarse_ns,
            "ahead: {program} > {}",
            good.coarse_ns
        );
        assert!(good.coarse_ns - program <= 4_000_000 + 5_000);
    }

    #[test]
    fn nonsense_measurements_are_refused() {
        let k = kernel(250, 0);
        let a = edge_at(&k, NS_PER_SEC, 2_000);
        let s = [k(NS_PER_SEC + 1_000_000)];
        // the same edge twice
        assert!(ProgramClock::from_edges(&a, &a, &s).is_err());
        // 1 jiffy in a second: HZ 1
        let mut far = edge_at(&k, 2 * NS_PER_SEC, 2_000);
        far.before.jiffies = a.after.jiffies;
        far.after.jiffies = a.after.jiffies + 1;
        let e = ProgramClock::from_edges(&a, &far, &s).unwrap_err();
        assert!(e.contains("outside HZ"), "{e}");
        // 10,000 jiffies in 30 ms: HZ 333,333
        let mut fast = edge_at(&k, NS_PER_SEC + 100_000_000, 2_000);
        fast.after.jiffies = a.after.jiffies + 10_000;
        let e = ProgramClock::from_edges(&a, &fast, &s).unwrap_err();
        assert!(e.contains("outside HZ"), "{e}");
        // no samples
        let b = edge_at(&k, NS_PER_SEC + 100_000_000, 2_000);
        assert!(ProgramClock::from_edges(&a, &b, &[]).is_err());
    }

    #[test]
    fn the_helper_has_no_hz_and_no_jiffies_time() {
        assert_eq!(ProgramClock::HELPER.hz(), None);
        assert_eq!(ProgramClock::HELPER.at(5), None);
        assert_eq!(ProgramClock::jiffies(4_000_000, 7).at(2), Some(8_000_007));
    }
}
