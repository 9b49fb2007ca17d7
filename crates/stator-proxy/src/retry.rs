//! Which upstream a request goes to next, and when to give up: the proxy's retry policy as a
//! plain state machine (no I/O, no clock), told what became of each attempt and answering what
//! to do — the HTTP engine only sends and reads.
//!
//! The rules (docs/proxy.md's table): a request that was not sent (connecting failed, a new
//! connection closed before it left) goes to another upstream, up to `retries` more, never one
//! already tried; a request that left and got no response head goes again only when it is
//! replayable (a method of `http.retry_methods`, no body) and the failure was before the head
//! (a reset, the response timeout); every failure counts towards the upstream's passive
//! exclusion, except a reset of a kept-alive connection (the upstream may have closed it as
//! idle just as the request went out). When none is left the client gets `503` if nothing was
//! tried, else the last failure's answer (`504` after a timeout, `502` otherwise).

use stator_sched::Tried;

use crate::stats::ErrorKind;

/// Why the next attempt is made (what it is counted as).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Again {
    /// Connecting to the last one failed: the request had not left (`retries`).
    Connect,
    /// The last one failed before a response head: the request is sent again
    /// (`retries_resent`).
    Resent,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Count the failure against the upstream (passive exclusion).
    pub blame: bool,
    /// Try another upstream (else answer `status`).
    pub next: bool,
    /// The answer when no other upstream is tried: 502 or 504.
    pub status: u16,
}

/// The attempts of one request.
#[derive(Debug)]
pub struct Retries {
    tried: Tried,
    failures: usize,
    again: Option<Again>,
    last: u16,
    limit: usize,
    replayable: bool,
}

impl Retries {
    /// A request that may go to `limit` more upstreams after the first; `replayable`: it may be
    /// sent again after it left (an idempotent method of `http.retry_methods`, no body).
    pub fn new(limit: usize, replayable: bool) -> Self {
        Self {
            tried: Tried::new(),
            failures: 0,
            again: None,
            last: 502,
            limit,
            replayable,
        }
    }

    /// The upstreams tried so far (the next pick leaves them out).
    pub fn tried(&self) -> &Tried {
        &self.tried
    }

    /// Upstream `i` was picked: what this attempt counts as (`None` for the first).
    pub fn picked(&mut self, i: usize) -> Option<Again> {
        self.tried.insert(i);
        self.again.take()
    }

    /// Nothing left to pick: the status and reason to answer with.
    pub fn exhausted(&self) -> (u16, &'static str) {
        if self.failures == 0 {
            (503, "no usable upstream\n")
        } else {
            (self.last, "every upstream tried failed\n")
        }
    }

    /// The request was not sent to the last upstream (connecting failed, or a new connection
    /// closed before it left).
    pub fn not_sent(&mut self) -> Verdict {
        self.failures += 1;
        self.last = 502;
        let next = self.failures <= self.limit;
        if next {
            self.again = Some(Again::Connect);
        }
        Verdict {
            blame: true,
            next,
            status: 502,
        }
    }

    /// The request left and failed with `kind` before a response head (or while its body was
    /// being sent: `WriteTimeout`); `reused`: on a kept-alive connection.
    pub fn lost(&mut self, kind: ErrorKind, reused: bool) -> Verdict {
        let before_head = matches!(kind, ErrorKind::Reset | ErrorKind::Timeout);
        let status = if matches!(kind, ErrorKind::Timeout | ErrorKind::WriteTimeout) {
            504
        } else {
            502
        };
        let next = self.replayable && before_head && self.failures < self.limit;
        if next {
            self.failures += 1;
            self.last = status;
            self.again = Some(Again::Resent);
        }
        Verdict {
            blame: before_head && !(reused && kind == ErrorKind::Reset),
            next,
            status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_failures_move_on_until_the_limit_then_502() {
        let mut r = Retries::new(2, false);
        assert_eq!(r.picked(0), None, "the first attempt is no retry");
        let v = r.not_sent();
        assert!(v.blame && v.next);
        assert_eq!(r.picked(1), Some(Again::Connect));
        assert!(r.not_sent().next);
        assert_eq!(r.picked(2), Some(Again::Connect));
        let v = r.not_sent();
        assert_eq!(
            (v.next, v.status),
            (false, 502),
            "three tries with retries = 2"
        );
        assert!(r.tried().contains(0) && r.tried().contains(1) && r.tried().contains(2));
    }

    #[test]
    fn nothing_to_pick_is_503_before_any_failure_and_the_last_answer_after() {
        let mut r = Retries::new(3, true);
        assert_eq!(r.exhausted().0, 503);
        r.picked(0);
        assert!(r.lost(ErrorKind::Timeout, false).next);
        assert_eq!(
            r.exhausted().0,
            504,
            "the last failure was a response timeout"
        );
        r.picked(1);
        r.not_sent();
        assert_eq!(r.exhausted().0, 502);
    }

    #[test]
    fn a_request_that_left_goes_again_only_when_replayable_and_before_the_head() {
        // a POST (not replayable): never sent twice
        let mut post = Retries::new(3, false);
        post.picked(0);
        let v = post.lost(ErrorKind::Reset, false);
        assert_eq!((v.next, v.status, v.blame), (false, 502, true));
        // a GET reset before its head: again, counted as resent
        let mut get = Retries::new(3, true);
        get.picked(0);
        assert!(get.lost(ErrorKind::Reset, false).next);
        assert_eq!(get.picked(1), Some(Again::Resent));
        // a malformed response head is not "before the head": not again, and not blamed
        let v = get.lost(ErrorKind::Protocol, false);
        assert_eq!((v.next, v.blame, v.status), (false, false, 502));
        // the upstream stopped reading the body: 504, never again
        let mut put = Retries::new(3, true);
        put.picked(0);
        let v = put.lost(ErrorKind::WriteTimeout, false);
        assert_eq!((v.next, v.status), (false, 504));
    }

    #[test]
    fn a_reset_kept_alive_connection_is_not_held_against_its_upstream() {
        let mut r = Retries::new(1, true);
        r.picked(0);
        let v = r.lost(ErrorKind::Reset, true);
        assert!(!v.blame && v.next);
        r.picked(1);
        // a timeout is blamed even on a kept-alive connection; the limit is reached
        let v = r.lost(ErrorKind::Timeout, true);
        assert_eq!((v.blame, v.next, v.status), (true, false, 504));
    }
}
