//! The tracer's reports from the packet threads (docs/forwarding.md §11, docs/afxdp.md
//! "Tracer"): what the XDP program writes to the `stator_trace` ring buffer, a packet thread
//! takes from its forwarder after each packet (`Forwarder::take_trace`) and pushes here; the
//! control plane's reporter reads it through a [`TraceTap`] exactly as it reads the ring.
//!
//! The forwarder already limits reports per node (`tracer.reports_per_sec`, counted
//! `trace_limited`), so a lock per report costs nothing on ordinary packets; the queue is
//! bounded all the same (a reader that stopped reading loses reports, counted `lost`, never
//! memory), as a full ring buffer loses them in XDP.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use stator_core::TraceEvent;

/// Reports waiting for the reader at most.
pub const TRACE_QUEUE: usize = 1024;

#[derive(Debug, Default)]
struct Queue {
    events: Mutex<VecDeque<TraceEvent>>,
    lost: AtomicU64,
}

/// The packet threads' side (the plane keeps one across runtime restarts).
#[derive(Debug, Clone, Default)]
pub struct TraceSink(Arc<Queue>);

impl TraceSink {
    pub(crate) fn push(&self, e: TraceEvent) {
        let mut q = self.0.events.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= TRACE_QUEUE {
            self.0.lost.fetch_add(1, Ordering::Relaxed);
        } else {
            q.push_back(e);
        }
    }

    /// A reader of this queue.
    pub fn tap(&self) -> TraceTap {
        TraceTap(Arc::clone(&self.0))
    }
}

/// The reader's side: the reports of every packet thread, oldest first.
#[derive(Debug, Clone)]
pub struct TraceTap(Arc<Queue>);

impl TraceTap {
    /// The next report, if any.
    pub fn next_event(&mut self) -> Option<TraceEvent> {
        self.0
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    /// Reports lost because the queue was full.
    pub fn lost(&self) -> u64 {
        self.0.lost.load(Ordering::Relaxed)
    }
}

impl stator_plane::TraceSource for TraceTap {
    fn next_event(&mut self) -> Option<TraceEvent> {
        TraceTap::next_event(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_in_order_and_counts_what_it_loses() {
        let sink = TraceSink::default();
        let mut tap = sink.tap();
        for i in 0..TRACE_QUEUE as u32 + 3 {
            sink.push(TraceEvent {
                trace_id: i,
                ..TraceEvent::default()
            });
        }
        assert_eq!(tap.lost(), 3);
        assert_eq!(tap.next_event().map(|e| e.trace_id), Some(0));
        assert_eq!(tap.next_event().map(|e| e.trace_id), Some(1));
        let rest = std::iter::from_fn(|| tap.next_event()).count();
        assert_eq!(rest, TRACE_QUEUE - 2);
    }
}
