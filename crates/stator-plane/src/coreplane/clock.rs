//! The clock of a user-space data plane: what `now_ns` the forwarder decides with and what
//! [`PlaneReader::clock_ns`](crate::PlaneReader::clock_ns) answers, so that the
//! tracer ages connection-table entries on the clock that stamped them.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Nanoseconds on a monotonic clock shared by a data plane's packet path and its readers.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now, in nanoseconds. Never 0 (a zero `last_seen_ns` means "no entry" in the tables).
    fn now_ns(&self) -> u64;
}

/// Where both clocks start: one second, so that no stamp is ever 0.
const EPOCH_NS: u64 = 1_000_000_000;

/// Tokio's clock: real monotonic time normally, and the test's time under a paused runtime
/// (`tokio::time::pause`, `advance`) — the same clock the reconciler's drain deadlines and the
/// health checks' schedules run on, so one `advance` moves all of them together.
///
/// Read it from tasks of the runtime (or its blocking threads): a thread outside every
/// runtime sees real time.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    base: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose zero is now (it reads 1 s then, and counts up).
    pub fn new() -> Self {
        Self {
            base: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_ns(&self) -> u64 {
        let d = tokio::time::Instant::now().saturating_duration_since(self.base);
        // u64 nanoseconds cover 584 years of uptime.
        EPOCH_NS.saturating_add(d.as_nanos() as u64)
    }
}

/// A clock that moves only when told to: tests set it to the instant they mean.
#[derive(Debug)]
pub struct ManualClock {
    ns: AtomicU64,
}

impl ManualClock {
    /// A clock reading 1 s.
    pub fn new() -> Self {
        Self {
            ns: AtomicU64::new(EPOCH_NS),
        }
    }

    /// Sets the time (values below 1 ns read as 1 ns).
    pub fn set_ns(&self, ns: u64) {
        self.ns.store(ns.max(1), Ordering::SeqCst);
    }

    /// Moves the time forward.
    pub fn advance(&self, d: std::time::Duration) {
        let add = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .ns
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                Some(v.saturating_add(add))
            });
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.ns.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let c = ManualClock::new();
        assert_eq!(c.now_ns(), EPOCH_NS);
        c.advance(Duration::from_millis(1500));
        assert_eq!(c.now_ns(), EPOCH_NS + 1_500_000_000);
        c.set_ns(0);
        assert_eq!(c.now_ns(), 1, "never 0");
        c.set_ns(u64::MAX);
        c.advance(Duration::from_secs(1));
        assert_eq!(c.now_ns(), u64::MAX, "saturates");
    }

    #[tokio::test(start_paused = true)]
    async fn the_tokio_clock_follows_a_paused_runtime() {
        let c = TokioClock::new();
        assert_eq!(c.now_ns(), EPOCH_NS);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(c.now_ns(), EPOCH_NS + 30_000_000_000);
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(c.now_ns(), EPOCH_NS + 30_250_000_000);
    }
}
