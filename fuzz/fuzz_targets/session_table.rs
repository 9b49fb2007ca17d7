//! Fuzz target: `stator_proxy::table::SessionTable` — the bounded LRU table a UDP listener
//! keeps one session per client address and port in (and HTTP/TCP persistence one upstream
//! per client address) — driven by sequences of the operations the listener makes, against a
//! model: a list in recency order.
//!
//! Input: records of `[op, client, time step]` until the input ends; the first two bytes set
//! the capacity (1–16) and the idle timeout (0–255 ms). A client is one byte (256 clients, so
//! that a capacity is reached and flooded), the time step in milliseconds.
//!
//! Oracles, after every operation:
//! - the table never holds more than its capacity (the bound a flood of new source ports
//!   meets, docs/udp.md), a `reconfigure` to a smaller one included: it evicts at once and
//!   hands back, oldest first, every session it evicts;
//! - its order is the model's: most recently used first (`iter`), its length the model's;
//! - `insert` returns the client's previous session (`replaced`) and the session it evicted
//!   (the least recently used, at most one), exactly the model's;
//! - `touch` refreshes a live session, and removes and returns one idle for longer than the
//!   timeout (`Err`); `peek_mut` neither refreshes nor removes;
//! - `expire(now, max)` removes at most `max` sessions, oldest first, every one of them idle
//!   past the timeout, and stops at the first that is not; `remove` and `drain` give back what
//!   they remove.
#![no_main]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use stator_proxy::table::SessionTable;

/// The model: (client, value, last used), most recently used first.
struct Model {
    entries: Vec<(u8, u32, Instant)>,
    capacity: usize,
    timeout: Duration,
}

impl Model {
    fn position(&self, c: u8) -> Option<usize> {
        self.entries.iter().position(|e| e.0 == c)
    }

    fn idle(&self, i: usize, now: Instant) -> bool {
        now.saturating_duration_since(self.entries[i].2) > self.timeout
    }
}

fuzz_target!(|data: &[u8]| {
    static T0: OnceLock<Instant> = OnceLock::new();
    let t0 = *T0.get_or_init(Instant::now);
    let [cap, timeout, rest @ ..] = data else {
        return;
    };
    let capacity = usize::from(cap % 16) + 1;
    let timeout = Duration::from_millis(u64::from(*timeout));
    let mut table: SessionTable<u8, u32> = SessionTable::new(capacity, timeout);
    let mut model = Model {
        entries: Vec::new(),
        capacity,
        timeout,
    };
    let mut now = t0;
    let mut next_value = 0u32;
    for rec in rest.chunks_exact(3) {
        let [op, c, dt] = [rec[0], rec[1], rec[2]];
        now += Duration::from_millis(u64::from(dt));
        match op % 8 {
            0..=2 => {
                next_value += 1;
                let got = table.insert(c, next_value, now);
                let replaced = model.position(c).map(|i| model.entries.remove(i).1);
                let mut evicted = Vec::new();
                while model.entries.len() >= model.capacity {
                    let (k, v, _) = model.entries.pop().expect("non-empty at capacity");
                    evicted.push((k, v));
                }
                model.entries.insert(0, (c, next_value, now));
                assert_eq!(got.replaced, replaced, "insert {c}: the replaced session");
                assert_eq!(
                    got.evicted.into_iter().collect::<Vec<_>>(),
                    evicted,
                    "insert {c}: every evicted session is returned"
                );
            }
            3 => {
                let got = table.touch(c, now).map(|v| v.copied());
                let want = match model.position(c) {
                    None => Ok(None),
                    Some(i) if model.idle(i, now) => Err(model.entries.remove(i).1),
                    Some(i) => {
                        let (k, v, _) = model.entries.remove(i);
                        model.entries.insert(0, (k, v, now));
                        Ok(Some(v))
                    }
                };
                assert_eq!(got, want, "touch {c}");
            }
            4 => {
                let got = table.peek_mut(c).map(|v| *v);
                assert_eq!(
                    got,
                    model.position(c).map(|i| model.entries[i].1),
                    "peek {c}"
                );
            }
            5 => {
                let got = table.remove(c);
                assert_eq!(got, model.position(c).map(|i| model.entries.remove(i).1));
            }
            6 => {
                let max = usize::from(c % 8);
                // every session here was inserted replied (`insert`): one LRU order, the
                // model's; the class is the table's own business
                let got: Vec<(u8, u32)> = table
                    .expire(now, max)
                    .into_iter()
                    .map(|(k, v, _)| (k, v))
                    .collect();
                let mut want = Vec::new();
                while want.len() < max
                    && !model.entries.is_empty()
                    && model.idle(model.entries.len() - 1, now)
                {
                    let (k, v, _) = model.entries.pop().expect("non-empty");
                    want.push((k, v));
                }
                assert_eq!(got, want, "expire {max}: oldest first");
            }
            _ if c == 255 => {
                let got = table.drain();
                let want: Vec<_> = model
                    .entries
                    .drain(..)
                    .rev()
                    .map(|(k, v, _)| (k, v))
                    .collect();
                assert_eq!(got, want, "drain: oldest first");
            }
            _ => {
                // a reload: a new bound and timeout
                let capacity = usize::from(c % 16) + 1;
                let timeout = Duration::from_millis(u64::from(dt));
                let got = table.reconfigure(capacity, timeout);
                model.capacity = capacity;
                model.timeout = timeout;
                let mut want = Vec::new();
                while model.entries.len() > capacity {
                    let (k, v, _) = model.entries.pop().expect("over the bound");
                    want.push((k, v));
                }
                assert_eq!(
                    got, want,
                    "reconfigure {capacity}: evicted at once, oldest first"
                );
            }
        }
        let order: Vec<(u8, u32)> = table.iter().map(|(k, v)| (k, *v)).collect();
        let want: Vec<(u8, u32)> = model.entries.iter().map(|e| (e.0, e.1)).collect();
        assert_eq!(order, want, "most recently used first");
        assert_eq!(table.len(), model.entries.len());
        assert!(
            table.len() <= model.capacity,
            "{} sessions in a table of {}",
            table.len(),
            model.capacity
        );
    }
});
