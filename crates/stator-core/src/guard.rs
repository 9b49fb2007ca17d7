//! The SYN-flood guard (docs/forwarding.md §4 "Insert"): at most `limit` connection-table
//! inserts per CPU per one-second window. Beyond that Maglev alone decides, as the paper's §3.3
//! does when the table cannot take more ("consistent hashing ... ensures reliable packet
//! delivery under such circumstances").

use stator_abi::Flood;

/// Length of the guard's window.
pub const WINDOW_NS: u64 = 1_000_000_000;

/// One CPU's guard window (`struct stator_flood`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FloodGuard {
    state: Flood,
}

impl FloodGuard {
    /// A guard whose window starts at time 0 with no inserts (a zeroed per-CPU array entry).
    pub fn new() -> Self {
        Self::default()
    }

    /// The window as the BPF map holds it.
    pub fn state(&self) -> Flood {
        self.state
    }

    /// Asks to insert at `now_ns` under `limit` inserts per second (0 = no guard: always yes,
    /// and the window is not touched). Opens a new window when the current one is a second old
    /// or lies in the future; counts the insert when allowed.
    pub fn admit(&mut self, now_ns: u64, limit: u32) -> bool {
        if limit == 0 {
            return true;
        }
        if now_ns < self.state.window_start_ns || now_ns - self.state.window_start_ns >= WINDOW_NS {
            self.state = Flood {
                window_start_ns: now_ns,
                inserts: 0,
            };
        }
        if self.state.inserts >= u64::from(limit) {
            return false;
        }
        self.state.inserts += 1;
        true
    }

    /// What [`admit`](Self::admit) would answer, without changing anything.
    pub fn would_admit(&self, now_ns: u64, limit: u32) -> bool {
        let mut copy = *self;
        copy.admit(now_ns, limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_exactly_limit_per_window() {
        let mut g = FloodGuard::new();
        let t0 = 5 * WINDOW_NS;
        assert!((0..3).all(|i| g.admit(t0 + i, 3)));
        assert!(!g.admit(t0 + 10, 3));
        assert!(!g.would_admit(t0 + WINDOW_NS - 1, 3));
        // A second after the window opened, a new one starts.
        assert!(g.would_admit(t0 + WINDOW_NS, 3));
        assert!(g.admit(t0 + WINDOW_NS, 3));
        assert_eq!(
            g.state(),
            Flood {
                window_start_ns: t0 + WINDOW_NS,
                inserts: 1
            }
        );
    }

    #[test]
    fn no_limit_leaves_the_window_alone_and_time_going_back_reopens() {
        let mut g = FloodGuard::new();
        assert!(g.admit(7, 0));
        assert_eq!(g.state(), Flood::default());
        assert!(g.admit(2 * WINDOW_NS, 1));
        assert!(!g.admit(2 * WINDOW_NS + 1, 1));
        assert!(g.admit(50, 1), "a clock going backwards opens a new window");
        assert_eq!(g.state().window_start_ns, 50);
    }

    #[test]
    fn first_window_starts_at_zero() {
        // A fresh per-CPU entry is zero, so at now < 1 s the first window is [0, 1 s).
        let mut g = FloodGuard::new();
        assert!(g.admit(10, 1));
        assert_eq!(g.state().window_start_ns, 0);
        assert!(!g.admit(WINDOW_NS - 1, 1));
    }
}
