//! Recent events of a node — start, reloads (applied or refused), backend health changes,
//! drains, the forwarder's health, VIP announcements and withdrawals, failed commits — kept
//! in a bounded ring for `GET /v1/events` and the status page.
//!
//! The reconciler writes (it is where every one of these happens, one at a time); the API
//! reads. Every event has a sequence number, increasing from 1 for the life of the process,
//! so that a poller asks for what is newer than the last one it saw (`?since=`) and can tell
//! when events were dropped from the ring before it saw them. Events are for people: the
//! counters in `/metrics` are what to alert on.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use serde::Serialize;

/// Events kept; older ones are dropped.
pub const KEPT: usize = 256;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The first snapshot was committed; the node runs.
    Start,
    /// A configuration was applied.
    Reload,
    /// A configuration was refused (the running one stays).
    ReloadFailed,
    /// A backend became healthy.
    BackendUp,
    /// A backend became unhealthy and left every Maglev table.
    BackendDown,
    /// A backend was drained through the API.
    Drain,
    /// A drain ended through the API.
    Undrain,
    /// A drain's timeout passed: the backend was removed.
    DrainTimeout,
    /// The forwarder's checks pass again.
    ForwarderHealthy,
    /// A forwarder check failed: every VIP is withdrawn.
    ForwarderUnhealthy,
    /// The node wants a VIP announced.
    Announce,
    /// The node withdraws a VIP.
    Withdraw,
    /// The data plane refused a commit (the previous snapshot forwards).
    CommitFailed,
    /// The node is shutting down.
    Stopping,
    /// An upgrade: a successor process starts, serves (the node hands over) or fails (the
    /// node runs on).
    Upgrade,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Sequence number (1, 2, …, for the life of the process).
    pub seq: u64,
    /// When, in Unix seconds.
    pub at: f64,
    /// What happened.
    pub kind: EventKind,
    /// A sentence for people.
    pub message: String,
    /// The backend it is about (stable name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// The VIP it is about (name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vip: Option<String>,
    /// The configuration generation it made or refers to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_generation: Option<u64>,
}

impl Event {
    /// An event about nothing in particular (`seq` and `at` are set when it is pushed).
    pub fn new(kind: EventKind, message: impl Into<String>) -> Self {
        Self {
            seq: 0,
            at: 0.0,
            kind,
            message: message.into(),
            backend: None,
            vip: None,
            config_generation: None,
        }
    }

    /// About a backend.
    #[must_use]
    pub fn backend(mut self, name: &str) -> Self {
        self.backend = Some(name.to_owned());
        self
    }

    /// About a VIP.
    #[must_use]
    pub fn vip(mut self, name: &str) -> Self {
        self.vip = Some(name.to_owned());
        self
    }

    /// About a configuration generation.
    #[must_use]
    pub fn generation(mut self, generation: u64) -> Self {
        self.config_generation = Some(generation);
        self
    }
}

#[derive(Debug, Default)]
struct Ring {
    last: u64,
    events: VecDeque<Event>,
}

/// What [`EventLog::since`] found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Page {
    /// Events newer than asked for, oldest first.
    pub events: Vec<Event>,
    /// The sequence number of the newest event (0 when there is none): the next `since`.
    pub last: u64,
    /// Whether events newer than `since` were dropped from the ring before this answer.
    pub truncated: bool,
}

/// The ring of recent events, shared by the reconciler (writing) and the API (reading).
/// Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    ring: Arc<Mutex<Ring>>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        // Plain values, consistent after every statement: usable after a panicked holder.
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `event` now; returns its sequence number.
    pub fn push(&self, mut event: Event) -> u64 {
        let mut ring = self.lock();
        ring.last += 1;
        event.seq = ring.last;
        event.at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if ring.events.len() == KEPT {
            ring.events.pop_front();
        }
        ring.events.push_back(event);
        ring.last
    }

    /// Events with a sequence number above `since`, at most `limit` of the newest.
    pub fn since(&self, since: u64, limit: usize) -> Page {
        let ring = self.lock();
        let oldest = ring.events.front().map_or(ring.last + 1, |e| e.seq);
        let newer: Vec<&Event> = ring.events.iter().filter(|e| e.seq > since).collect();
        let skip = newer.len().saturating_sub(limit);
        Page {
            truncated: since.saturating_add(1) < oldest || skip > 0,
            events: newer.into_iter().skip(skip).cloned().collect(),
            last: ring.last,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_since_and_the_bound() {
        let log = EventLog::new();
        assert_eq!(log.since(0, 10).last, 0);
        assert!(!log.since(0, 10).truncated);
        for i in 0..KEPT + 5 {
            let seq = log.push(Event::new(EventKind::Reload, format!("r{i}")).generation(i as u64));
            assert_eq!(seq, i as u64 + 1);
        }
        let all = log.since(0, usize::MAX);
        assert_eq!(all.events.len(), KEPT);
        assert!(
            all.truncated,
            "5 events were dropped before this reader saw them"
        );
        assert_eq!(all.events[0].seq, 6);
        assert_eq!(all.last, KEPT as u64 + 5);
        let recent = log.since(all.last - 2, usize::MAX);
        assert_eq!(
            recent.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [all.last - 1, all.last]
        );
        assert!(!recent.truncated);
        let limited = log.since(all.last - 10, 3);
        assert_eq!(limited.events.len(), 3);
        assert_eq!(limited.events[2].seq, all.last);
        assert!(limited.truncated);
        assert!(log.since(all.last, 10).events.is_empty());
    }

    #[test]
    fn serialized_fields() {
        let log = EventLog::new();
        log.push(Event::new(EventKind::BackendDown, "down").backend("b0"));
        let v = serde_json::to_value(&log.since(0, 10).events[0]).unwrap();
        assert_eq!(v["kind"], "backend_down");
        assert_eq!(v["backend"], "b0");
        assert!(v.get("vip").is_none());
        assert!(v["at"].as_f64().unwrap() > 1.0e9);
    }
}
