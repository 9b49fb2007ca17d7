//! The holder (docs/forwarding.md §9): fragments that reach their 3-tuple owner before their
//! first fragment cannot wait in XDP, so the program copies them to `stator_hold` and drops
//! them; this thread takes them into a [`HoldQueue`] (stator-core's rules: bounded in frames,
//! bytes and time, every drop counted) and, once `stator_frag` holds a fresh record for their
//! datagram, runs each frame through the forwarder again exactly as it was received —
//! `BPF_PROG_TEST_RUN` in live-frames mode on the interface it arrived on, so its `XDP_TX` or
//! `XDP_REDIRECT` leaves for real, byte for byte what it would have been had it come later.
//!
//! It polls: the ring every millisecond while it holds something and every ten otherwise, and
//! `stator_frag` only for the datagrams it holds. Time is the program's clock
//! ([`Maps::clock_ns`]), so expiry agrees with the record's `created_ns`.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use stator_core::{HoldLimits, HoldQueue};

use crate::error::{Result, XdpError};
use crate::maps::Maps;
use crate::rings::HoldRing;
use crate::testrun::run_xdp_live;

/// What the holder has done so far (the type every plane reports through
/// `PlaneReader::hold_stats`).
pub use stator_plane::HolderStats;

/// The holder's thread. Dropping it stops the thread.
#[derive(Debug)]
pub struct Holder {
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<HolderStats>>,
    thread: Option<JoinHandle<()>>,
}

impl Holder {
    /// Starts the holder for the forwarder pinned under `pin_path`, whose program is `program`
    /// (a duplicate of [`Forwarder::program_fd_owned`](crate::Forwarder::program_fd_owned)).
    /// The thread runs in the calling thread's network namespace.
    pub fn start(pin_path: PathBuf, program: OwnedFd, limits: HoldLimits) -> Result<Self> {
        let maps = Maps::open(&pin_path)?;
        let ring = HoldRing::open(&pin_path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(HolderStats::default()));
        let (s, st) = (Arc::clone(&stop), Arc::clone(&stats));
        let thread = std::thread::Builder::new()
            .name("stator-holder".into())
            .spawn(move || run(maps, ring, program, limits, &s, &st))
            .map_err(|e| XdpError::io("starting the holder thread", e))?;
        Ok(Self {
            stop,
            stats,
            thread: Some(thread),
        })
    }

    /// Its counts now.
    pub fn stats(&self) -> HolderStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Copies the queue's counts to the shared statistics.
fn publish(stats: &Mutex<HolderStats>, queue: &HoldQueue, rerun_errors: u64, ring: &HoldRing) {
    if let Ok(mut s) = stats.lock() {
        *s = HolderStats {
            queue: queue.stats(),
            holding: queue.len(),
            rerun_errors,
            malformed: ring.malformed(),
        };
    }
}

fn run(
    maps: Maps,
    mut ring: HoldRing,
    program: OwnedFd,
    limits: HoldLimits,
    stop: &AtomicBool,
    stats: &Mutex<HolderStats>,
) {
    let mut queue: HoldQueue = HoldQueue::new(limits);
    let (mut released, mut expired) = (Vec::new(), Vec::new());
    let mut rerun_errors = 0;
    while !stop.load(Ordering::Relaxed) {
        while let Some((h, frame)) = ring.next_frame() {
            // a frame that does not fit is dropped here, counted `full` by the queue
            let _ = queue.push(h.now_ns, h.key, h.ingress_ifindex, frame);
        }
        if !queue.is_empty() {
            let now = maps.clock_ns();
            let timeout = maps.node_cfg(maps.active_generation()).frag_timeout_ns;
            queue.release(
                now,
                |k| {
                    maps.frag_lookup(k)
                        .ok()
                        .flatten()
                        .is_some_and(|e| now >= e.created_ns && now - e.created_ns <= timeout)
                },
                &mut released,
                &mut expired,
            );
            expired.clear(); // dropped: counted `expired` by the queue
            // count the releases before running them again: a reader that adds up the
            // program's decisions and subtracts the releases never sees a re-run decision
            // without its release (the AF_XDP differential test's barrier relies on it)
            publish(stats, &queue, rerun_errors, &ring);
            for h in released.drain(..) {
                if run_xdp_live(&program, &h.frame, 1, 1, h.ingress).is_err() {
                    rerun_errors += 1;
                }
            }
        }
        publish(stats, &queue, rerun_errors, &ring);
        let idle = if queue.is_empty() { 10 } else { 1 };
        std::thread::sleep(Duration::from_millis(idle));
    }
}
