//! Bounded waiting: every wait in the lab has a deadline and says what it waited for.

use std::time::{Duration, Instant};

use crate::netns::{NetnsError, Result};

/// Calls `check` every `poll` until it returns `Some`, for at most `timeout`. Returns the
/// value and how long it took; on timeout, an error naming `what`.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    poll: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Result<(T, Duration)> {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return Ok((value, start.elapsed()));
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(NetnsError::Timeout {
                what: what.to_owned(),
                waited,
            });
        }
        std::thread::sleep(poll.min(timeout - waited));
    }
}

/// Like [`wait_for`] for a condition; returns how long it took.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    poll: Duration,
    mut check: impl FnMut() -> bool,
) -> Result<Duration> {
    wait_for(what, timeout, poll, || check().then_some(())).map(|((), took)| took)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_and_times_out() {
        let mut n = 0;
        let (v, _) = wait_for(
            "three calls",
            Duration::from_secs(1),
            Duration::ZERO,
            || {
                n += 1;
                (n == 3).then_some(n)
            },
        )
        .unwrap();
        assert_eq!(v, 3);
        let e = wait_until(
            "never",
            Duration::from_millis(30),
            Duration::from_millis(5),
            || false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("waiting for never"), "{e}");
    }
}
