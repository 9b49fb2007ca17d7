//! The rise/fall state machine of one check — pure.

/// A check's state: unknown until the first result, which sets it; then up after `rise`
/// consecutive successes, down after `fall` consecutive failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine {
    rise: u32,
    fall: u32,
    state: Option<bool>,
    successes: u32,
    failures: u32,
}

impl Machine {
    /// A machine in state `initial` (`None` = unknown).
    pub fn new(rise: u32, fall: u32, initial: Option<bool>) -> Self {
        Self {
            rise: rise.max(1),
            fall: fall.max(1),
            state: initial,
            successes: 0,
            failures: 0,
        }
    }

    /// The state: `Some(true)` up, `Some(false)` down, `None` unknown.
    pub fn state(&self) -> Option<bool> {
        self.state
    }

    /// Consecutive successes (while down) or failures (while up) counted towards a change.
    pub fn streak(&self) -> (u32, u32) {
        (self.successes, self.failures)
    }

    /// Feeds one probe result; returns the new state if it changed.
    pub fn observe(&mut self, ok: bool) -> Option<bool> {
        if ok {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
        }
        let next = match self.state {
            None => ok,
            Some(true) if self.failures >= self.fall => false,
            Some(false) if self.successes >= self.rise => true,
            Some(s) => s,
        };
        if self.state == Some(next) {
            return None;
        }
        self.state = Some(next);
        self.successes = 0;
        self.failures = 0;
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds a pattern (`+` success, `-` failure) and returns the 1-based probe numbers at
    /// which the state changed, with the new state.
    fn run(rise: u32, fall: u32, initial: Option<bool>, pattern: &str) -> Vec<(usize, bool)> {
        let mut m = Machine::new(rise, fall, initial);
        pattern
            .chars()
            .enumerate()
            .filter_map(|(i, c)| m.observe(c == '+').map(|s| (i + 1, s)))
            .collect()
    }

    #[test]
    fn first_result_decides_then_rise_and_fall_hold() {
        assert_eq!(run(2, 3, None, "+"), vec![(1, true)]);
        assert_eq!(run(2, 3, None, "-"), vec![(1, false)]);
        // up; two failures are not enough, the third is; one success is not enough, two are.
        assert_eq!(
            run(2, 3, None, "+--+---+-++"),
            vec![(1, true), (7, false), (11, true)]
        );
    }

    #[test]
    fn streaks_reset_on_the_other_result() {
        assert_eq!(run(3, 2, Some(false), "++-++-+++"), vec![(9, true)]);
        assert_eq!(
            run(1, 1, Some(true), "-+-"),
            vec![(1, false), (2, true), (3, false)]
        );
        let mut m = Machine::new(3, 3, Some(true));
        m.observe(false);
        m.observe(false);
        assert_eq!(m.streak(), (0, 2));
        m.observe(true);
        assert_eq!(m.streak(), (1, 0));
    }

    #[test]
    fn an_inherited_state_needs_the_full_streak() {
        assert_eq!(run(2, 2, Some(true), "+-+--"), vec![(5, false)]);
    }
}
