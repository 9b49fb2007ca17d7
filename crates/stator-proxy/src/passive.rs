//! Passive health (nginx's `max_fails` / `fail_timeout`): an upstream that fails `max_fails`
//! times within `fail_timeout` — a refused or reset connection, a connect or response-head
//! timeout, a new connection that died under a request (not a kept-alive one: its reset may be
//! the upstream closing it as idle) — is left out of every worker's picks for `fail_timeout`,
//! independently of the active health checks (which a restarting backend beats by up to
//! `fall × interval`). Lock-free: one bit per upstream in an
//! [`AtomicPeerSet`] that picks test (a set bit costs one clock read, only then), and per
//! upstream the failures of the current window and the end of the exclusion, in nanoseconds
//! of the process's monotonic clock ([`now_ns`]).
//!
//! When every usable upstream is excluded, picks ignore the exclusions (as nginx does: a
//! listener whose backends all failed once tries them again rather than answering 503).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use stator_sched::{AtomicPeerSet, PeerView};

/// Nanoseconds of the process's monotonic clock (from its first use).
pub fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// How failures exclude an upstream (`max_fails = 0`: never).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PassiveSpec {
    /// Failures within `fail_timeout` that exclude an upstream (0 = passive health off).
    pub max_fails: u32,
    /// The window failures are counted in, and how long an excluded upstream stays out.
    pub fail_timeout: Duration,
}

impl Default for PassiveSpec {
    /// nginx's defaults: one failure excludes for ten seconds.
    fn default() -> Self {
        Self {
            max_fails: 1,
            fail_timeout: Duration::from_secs(10),
        }
    }
}

/// One upstream's passive state.
#[derive(Debug, Default)]
struct Slot {
    window_start: AtomicU64,
    fails: AtomicU32,
    until: AtomicU64,
}

/// The passive state of a listener's upstreams.
#[derive(Debug)]
pub struct Passive {
    spec: PassiveSpec,
    excluded: AtomicPeerSet,
    slots: Box<[Slot]>,
}

impl Passive {
    /// No failure yet for `n` upstreams.
    pub fn new(n: usize, spec: PassiveSpec) -> Self {
        Self {
            spec,
            excluded: AtomicPeerSet::new(n, false),
            slots: (0..n).map(|_| Slot::default()).collect(),
        }
    }

    /// Copies upstream `from`'s state of `old` into upstream `to` (a reload keeps exclusions
    /// by name).
    pub fn carry(&self, to: usize, old: &Passive, from: usize, now: u64) {
        let (Some(t), Some(f)) = (self.slots.get(to), old.slots.get(from)) else {
            return;
        };
        t.window_start
            .store(f.window_start.load(Ordering::Relaxed), Ordering::Relaxed);
        t.fails
            .store(f.fails.load(Ordering::Relaxed), Ordering::Relaxed);
        let until = f.until.load(Ordering::Relaxed);
        t.until.store(until, Ordering::Relaxed);
        self.excluded
            .set(to, until > now && self.spec.max_fails > 0);
    }

    /// Counts a failure of upstream `i` at `now`; whether it excluded the upstream (counted
    /// by the caller).
    pub fn fail(&self, i: usize, now: u64) -> bool {
        let Some(s) = self.slots.get(i) else {
            return false;
        };
        if self.spec.max_fails == 0 {
            return false;
        }
        let window = nanos(self.spec.fail_timeout);
        let start = s.window_start.load(Ordering::Relaxed);
        if now.saturating_sub(start) >= window || start == 0 {
            s.window_start.store(now.max(1), Ordering::Relaxed);
            s.fails.store(0, Ordering::Relaxed);
        }
        let fails = s.fails.fetch_add(1, Ordering::Relaxed) + 1;
        if fails < self.spec.max_fails || self.excluded.usable(i) {
            return false;
        }
        s.until.store(now.saturating_add(window), Ordering::Relaxed);
        s.fails.store(0, Ordering::Relaxed);
        s.window_start.store(0, Ordering::Relaxed);
        self.excluded.set(i, true);
        true
    }

    /// Whether upstream `i` is excluded at `now` (an exclusion that has ended is cleared).
    #[inline]
    pub fn excluded(&self, i: usize, now: impl FnOnce() -> u64) -> bool {
        if !self.excluded.usable(i) {
            return false;
        }
        let now = now();
        let until = self
            .slots
            .get(i)
            .map_or(0, |s| s.until.load(Ordering::Relaxed));
        if now >= until {
            self.excluded.set(i, false);
            return false;
        }
        true
    }

    /// How long upstream `i` stays excluded from `now`, if it is.
    pub fn excluded_for(&self, i: usize, now: u64) -> Option<Duration> {
        if !self.excluded(i, || now) {
            return None;
        }
        let until = self.slots.get(i)?.until.load(Ordering::Relaxed);
        Some(Duration::from_nanos(until.saturating_sub(now)))
    }

    /// Failures of upstream `i` counted in its current window.
    pub fn failures(&self, i: usize) -> u32 {
        self.slots
            .get(i)
            .map_or(0, |s| s.fails.load(Ordering::Relaxed))
    }

    /// Whether any upstream is excluded (cheap: the bits only).
    pub fn any(&self, n: usize) -> bool {
        (0..n).any(|i| self.excluded.usable(i))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn max_fails_within_the_window_exclude_for_the_window() {
        let p = Passive::new(
            2,
            PassiveSpec {
                max_fails: 2,
                fail_timeout: Duration::from_millis(100),
            },
        );
        let t = 1_000 * MS;
        assert!(!p.fail(0, t));
        assert!(!p.excluded(0, || t));
        // the second failure 150 ms later is in a new window: not excluded
        assert!(!p.fail(0, t + 150 * MS));
        assert!(p.fail(0, t + 160 * MS), "two within 100 ms");
        assert!(p.excluded(0, || t + 200 * MS));
        assert!(!p.excluded(1, || t + 200 * MS), "only the one that failed");
        assert_eq!(
            p.excluded_for(0, t + 200 * MS),
            Some(Duration::from_millis(60))
        );
        assert!(!p.fail(0, t + 210 * MS), "already excluded: not again");
        assert!(!p.excluded(0, || t + 260 * MS), "back after fail_timeout");
        assert!(!p.any(2));
    }

    #[test]
    fn max_fails_zero_turns_it_off_and_a_reload_carries_exclusions() {
        let off = Passive::new(
            1,
            PassiveSpec {
                max_fails: 0,
                fail_timeout: Duration::from_secs(10),
            },
        );
        assert!(!off.fail(0, 5 * MS));
        assert!(!off.excluded(0, || 5 * MS));
        let on = Passive::new(2, PassiveSpec::default());
        assert!(on.fail(1, 5 * MS), "nginx's default: one failure");
        let next = Passive::new(3, PassiveSpec::default());
        next.carry(2, &on, 1, 6 * MS);
        assert!(next.excluded(2, || 6 * MS));
        assert!(!next.excluded(0, || 6 * MS));
    }
}
