//! An [`Announcer`] on a thread of its own, for a controller that must never block on BIRD.
//!
//! The controller (tokio or not) calls [`AnnouncerThread::set_desired`] whenever health
//! changes — it only stores the latest value and wakes the thread — and reads
//! [`AnnouncerThread::status`] for metrics. On shutdown it calls
//! [`AnnouncerThread::shutdown`] (from `spawn_blocking` in async code), which withdraws every
//! VIP, waits for BIRD to confirm, and stops the thread.

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use stator_config::Bgp;

use crate::announcer::{Announcer, AnnouncerStatus};
use crate::error::BirdError;
use crate::routes::DesiredRoutes;

/// Requests waiting for the thread.
#[derive(Debug, Default)]
struct Inbox {
    desired: Option<DesiredRoutes>,
    bgp: Option<Bgp>,
    resume: bool,
    withdraw: Option<(Duration, mpsc::Sender<Result<(), BirdError>>)>,
    stop: bool,
}

impl Inbox {
    fn is_empty(&self) -> bool {
        self.desired.is_none()
            && self.bgp.is_none()
            && !self.resume
            && self.withdraw.is_none()
            && !self.stop
    }
}

#[derive(Debug)]
struct Shared {
    inbox: Mutex<Inbox>,
    wake: Condvar,
    status: Mutex<AnnouncerStatus>,
    /// When the thread was last between two steps (not blocked on BIRD).
    beat: Mutex<Instant>,
}

/// Longest the thread waits without beating (for a supervisor's liveness check).
pub const BEAT_INTERVAL: Duration = Duration::from_secs(1);

/// A lock that survives a panicked holder: the data are plain values, valid at every step.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running announcer thread. Dropping it stops the thread *without* withdrawing anything
/// (BIRD keeps announcing what it announced); call [`AnnouncerThread::shutdown`] to withdraw.
#[derive(Debug)]
pub struct AnnouncerThread {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl AnnouncerThread {
    /// Starts a thread that runs `announcer`.
    pub fn spawn(announcer: Announcer) -> Result<Self, BirdError> {
        let shared = Arc::new(Shared {
            inbox: Mutex::new(Inbox::default()),
            wake: Condvar::new(),
            status: Mutex::new(announcer.status()),
            beat: Mutex::new(Instant::now()),
        });
        let thread_shared = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("stator-bgp".into())
            .spawn(move || run(announcer, &thread_shared))
            .map_err(|e| BirdError::Thread {
                reason: format!("cannot start: {e}"),
            })?;
        Ok(Self {
            shared,
            handle: Some(handle),
        })
    }

    fn send(&self, f: impl FnOnce(&mut Inbox)) {
        f(&mut lock(&self.shared.inbox));
        self.shared.wake.notify_one();
    }

    /// Sets the desired routes (never blocks on BIRD; the latest value wins).
    pub fn set_desired(&self, desired: DesiredRoutes) {
        self.send(|i| i.desired = Some(desired));
    }

    /// Replaces the `[bgp]` settings.
    pub fn set_bgp(&self, bgp: Bgp) {
        self.send(|i| i.bgp = Some(bgp));
    }

    /// Ends a `withdraw_all`: desired routes apply again.
    pub fn resume(&self) {
        self.send(|i| i.resume = true);
    }

    /// The latest status (updated after every pass).
    pub fn status(&self) -> AnnouncerStatus {
        lock(&self.shared.status).clone()
    }

    /// When the thread last made progress: it beats at least every [`BEAT_INTERVAL`] while
    /// idle, and after each pass (a pass waits on BIRD for at most the I/O timeout per
    /// reply). A thread stuck for longer is hung.
    pub fn last_beat(&self) -> Instant {
        *lock(&self.shared.beat)
    }

    /// Withdraws every VIP and waits until BIRD confirmed it or `timeout` passed (see
    /// [`Announcer::withdraw_all`]). Blocks the caller.
    pub fn withdraw_all(&self, timeout: Duration) -> Result<(), BirdError> {
        let (tx, rx) = mpsc::channel();
        self.send(|i| i.withdraw = Some((timeout, tx)));
        // The thread answers within `timeout` plus one pass (bounded by its I/O timeout).
        let grace = timeout + Duration::from_secs(10);
        rx.recv_timeout(grace).map_err(|e| BirdError::Thread {
            reason: format!("no answer to withdraw_all: {e}"),
        })?
    }

    /// Withdraws every VIP (waiting up to `timeout` for BIRD to confirm), then stops the
    /// thread. The withdrawal's result is returned; the thread stops either way.
    pub fn shutdown(mut self, timeout: Duration) -> Result<(), BirdError> {
        let result = self.withdraw_all(timeout);
        self.stop();
        result
    }

    fn stop(&mut self) {
        self.send(|i| i.stop = true);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for AnnouncerThread {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(mut announcer: Announcer, shared: &Shared) {
    loop {
        *lock(&shared.beat) = Instant::now();
        let inbox = std::mem::take(&mut *lock(&shared.inbox));
        if let Some(bgp) = inbox.bgp {
            announcer.set_bgp(bgp);
        }
        if let Some(desired) = inbox.desired {
            announcer.set_desired(desired);
        }
        if inbox.resume {
            announcer.resume();
        }
        if let Some((timeout, reply)) = inbox.withdraw {
            let result = announcer.withdraw_all(timeout);
            *lock(&shared.status) = announcer.status();
            let _ = reply.send(result);
        }
        if inbox.stop {
            return;
        }
        let next = announcer.poll(Instant::now());
        *lock(&shared.status) = announcer.status();
        let mut guard = lock(&shared.inbox);
        while guard.is_empty() {
            let now = Instant::now();
            if now >= next {
                break;
            }
            *lock(&shared.beat) = now;
            guard = shared
                .wake
                .wait_timeout(guard, (next - now).min(BEAT_INTERVAL))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}
