//! A worker's session table: client → session, least recently used first out, with an idle
//! timeout. The UDP listener keys it by client address and port (a session is a connected
//! upstream socket); HTTP/TCP persistence keys it by client address (a session is the upstream
//! it used, [`crate::session::Sessions`]). Pure: time is a parameter, nothing is shared, no I/O.
//!
//! A slab of entries linked in recency order (most recent at the head) plus a hash map from
//! the client to its slot: lookups, inserts, evictions and expiry are O(1) per entry and
//! allocate only while the table grows towards its bound — a flood of new clients (or source
//! ports) evicts the least recently used sessions instead of growing the table.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

const NIL: usize = usize::MAX;

#[derive(Debug)]
struct Entry<K, V> {
    client: K,
    value: V,
    last_used: Instant,
    prev: usize,
    next: usize,
}

/// Client `K` → `V`, bounded, least recently used evicted first.
#[derive(Debug)]
pub struct SessionTable<K, V> {
    map: HashMap<K, usize>,
    slab: Vec<Option<Entry<K, V>>>,
    free: Vec<usize>,
    head: usize,
    tail: usize,
    capacity: usize,
    timeout: Duration,
}

impl<K: Copy + Eq + Hash, V> SessionTable<K, V> {
    /// A table of at most `capacity` sessions (at least 1); a session unused for `timeout`
    /// expires.
    pub fn new(capacity: usize, timeout: Duration) -> Self {
        Self {
            map: HashMap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            capacity: capacity.max(1),
            timeout,
        }
    }

    /// Sessions held (expired ones included until [`Self::expire`] or a lookup removes them).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The idle timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the bound and the timeout (a reload). A smaller bound evicts the least recently
    /// used sessions at once, down to the new bound; they are returned, oldest first, so that
    /// the caller counts and closes each (the table never holds more than its bound).
    pub fn reconfigure(&mut self, capacity: usize, timeout: Duration) -> Vec<(K, V)> {
        self.capacity = capacity.max(1);
        self.timeout = timeout;
        let mut evicted = Vec::new();
        while self.map.len() > self.capacity && self.tail != NIL {
            evicted.push(self.remove_slot(self.tail));
        }
        evicted
    }

    /// `client`'s session if it was used within the timeout, refreshed (now most recently
    /// used). An expired session is removed and returned as `Err`, so that the caller can
    /// close what it holds.
    pub fn touch(&mut self, client: K, now: Instant) -> Result<Option<&mut V>, V> {
        let Some(&slot) = self.map.get(&client) else {
            return Ok(None);
        };
        if self.expired(slot, now) {
            let (_, v) = self.remove_slot(slot);
            return Err(v);
        }
        self.unlink(slot);
        self.push_head(slot);
        let e = self.slab[slot].as_mut().expect("mapped slots are occupied");
        e.last_used = now;
        Ok(Some(&mut e.value))
    }

    /// `client`'s session without refreshing it (expired or not).
    pub fn peek_mut(&mut self, client: K) -> Option<&mut V> {
        let &slot = self.map.get(&client)?;
        self.slab[slot].as_mut().map(|e| &mut e.value)
    }

    /// Inserts a session for `client` (replacing and returning any it had); when the table is
    /// full the least recently used session is evicted and returned.
    pub fn insert(&mut self, client: K, value: V, now: Instant) -> Inserted<K, V> {
        let replaced = self
            .map
            .get(&client)
            .copied()
            .map(|slot| self.remove_slot(slot).1);
        // The table holds at most `capacity` (`reconfigure` evicts down to a smaller bound), so
        // one eviction makes room.
        let evicted = if self.map.len() >= self.capacity && self.tail != NIL {
            Some(self.remove_slot(self.tail))
        } else {
            None
        };
        let entry = Entry {
            client,
            value,
            last_used: now,
            prev: NIL,
            next: NIL,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s] = Some(entry);
                s
            }
            None => {
                self.slab.push(Some(entry));
                self.slab.len() - 1
            }
        };
        self.push_head(slot);
        self.map.insert(client, slot);
        Inserted { replaced, evicted }
    }

    /// Removes `client`'s session.
    pub fn remove(&mut self, client: K) -> Option<V> {
        let slot = self.map.get(&client).copied()?;
        Some(self.remove_slot(slot).1)
    }

    /// Removes up to `max` sessions that expired by `now`, oldest first.
    pub fn expire(&mut self, now: Instant, max: usize) -> Vec<(K, V)> {
        let mut out = Vec::new();
        while out.len() < max && self.tail != NIL && self.expired(self.tail, now) {
            out.push(self.remove_slot(self.tail));
        }
        out
    }

    /// Removes every session.
    pub fn drain(&mut self) -> Vec<(K, V)> {
        let mut out = Vec::with_capacity(self.map.len());
        while self.tail != NIL {
            out.push(self.remove_slot(self.tail));
        }
        out
    }

    /// Every session, most recently used first.
    pub fn iter(&self) -> impl Iterator<Item = (K, &V)> + '_ {
        let mut at = self.head;
        std::iter::from_fn(move || {
            let e = self.slab.get(at)?.as_ref()?;
            at = e.next;
            Some((e.client, &e.value))
        })
    }

    /// Slots allocated (held or free): the table's memory, for tests of its bound.
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.slab.len()
    }

    fn expired(&self, slot: usize, now: Instant) -> bool {
        self.slab[slot]
            .as_ref()
            .is_some_and(|e| now.saturating_duration_since(e.last_used) > self.timeout)
    }

    fn remove_slot(&mut self, slot: usize) -> (K, V) {
        self.unlink(slot);
        let e = self.slab[slot].take().expect("linked slots are occupied");
        self.map.remove(&e.client);
        self.free.push(slot);
        (e.client, e.value)
    }

    fn unlink(&mut self, slot: usize) {
        let (prev, next) = {
            let e = self.slab[slot].as_ref().expect("occupied");
            (e.prev, e.next)
        };
        match prev {
            NIL => self.head = next,
            p => self.slab[p].as_mut().expect("occupied").next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slab[n].as_mut().expect("occupied").prev = prev,
        }
    }

    fn push_head(&mut self, slot: usize) {
        let old = self.head;
        {
            let e = self.slab[slot].as_mut().expect("occupied");
            e.prev = NIL;
            e.next = old;
        }
        if old != NIL {
            self.slab[old].as_mut().expect("occupied").prev = slot;
        }
        self.head = slot;
        if self.tail == NIL {
            self.tail = slot;
        }
    }
}

/// What [`SessionTable::insert`] displaced.
#[derive(Debug)]
pub struct Inserted<K, V> {
    /// The client's previous session.
    pub replaced: Option<V>,
    /// The least recently used session, evicted because the table was full.
    pub evicted: Option<(K, V)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn c(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    #[test]
    fn lookups_refresh_and_the_least_recent_is_evicted() {
        let t0 = Instant::now();
        let mut t = SessionTable::new(3, Duration::from_secs(60));
        for p in 1..=3 {
            assert!(t.insert(c(p), p, t0).evicted.is_none());
        }
        // 1 is used again: 2 is now the least recently used
        assert_eq!(t.touch(c(1), t0).unwrap().copied(), Some(1));
        let ins = t.insert(c(4), 4, t0);
        assert_eq!(ins.evicted, Some((c(2), 2)));
        assert_eq!(t.len(), 3);
        let order: Vec<u16> = t.iter().map(|(k, _)| k.port()).collect();
        assert_eq!(order, [4, 1, 3]);
    }

    #[test]
    fn a_flood_of_new_ports_never_grows_the_table() {
        let t0 = Instant::now();
        let mut t = SessionTable::new(100, Duration::from_secs(60));
        let mut evicted = 0;
        for p in 0..10_000u16 {
            if t.insert(c(p), (), t0).evicted.is_some() {
                evicted += 1;
            }
            assert!(t.len() <= 100);
        }
        assert_eq!(evicted, 10_000 - 100);
        assert!(t.slab.len() <= 100, "the slab stays at the bound");
    }

    #[test]
    fn sessions_expire_after_the_idle_timeout() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut t = SessionTable::new(10, Duration::from_secs(60));
        t.insert(c(1), 1, t0);
        t.insert(c(2), 2, t0 + 30 * s);
        // nothing has been idle for more than 60 s yet
        assert!(t.expire(t0 + 60 * s, usize::MAX).is_empty());
        let gone = t.expire(t0 + 61 * s, usize::MAX);
        assert_eq!(gone, vec![(c(1), 1)]);
        // a lookup of an expired session removes it and hands it back
        assert!(matches!(t.touch(c(2), t0 + 91 * s), Err(2)));
        assert!(t.is_empty());
        // traffic keeps a session alive
        t.insert(c(3), 3, t0);
        for i in 1..10 {
            assert!(t.touch(c(3), t0 + i * 50 * s).unwrap().is_some());
        }
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn replace_remove_drain() {
        let t0 = Instant::now();
        let mut t = SessionTable::new(4, Duration::from_secs(5));
        t.insert(c(1), 1, t0);
        let ins = t.insert(c(1), 10, t0);
        assert_eq!(ins.replaced, Some(1));
        assert!(ins.evicted.is_none());
        assert_eq!(t.len(), 1);
        assert_eq!(t.peek_mut(c(1)).copied(), Some(10));
        t.insert(c(2), 2, t0);
        assert_eq!(t.remove(c(1)), Some(10));
        assert_eq!(t.remove(c(1)), None);
        assert_eq!(t.drain(), vec![(c(2), 2)]);
        assert!(t.is_empty());
        assert!(t.reconfigure(1, Duration::from_secs(1)).is_empty());
        t.insert(c(5), 5, t0);
        assert!(t.insert(c(6), 6, t0).evicted.is_some());
    }

    #[test]
    fn a_smaller_bound_evicts_at_once_and_says_whom() {
        let t0 = Instant::now();
        let mut t = SessionTable::new(4, Duration::from_secs(5));
        for p in 1..=4 {
            t.insert(c(p), p, t0);
        }
        t.touch(c(1), t0).unwrap();
        // 2 and 3 are the least recently used: out at once, oldest first, and returned
        let gone = t.reconfigure(2, Duration::from_secs(5));
        assert_eq!(gone, vec![(c(2), 2), (c(3), 3)]);
        assert_eq!(t.len(), 2);
        let ins = t.insert(c(5), 5, t0);
        assert_eq!(ins.evicted, Some((c(4), 4)), "one eviction per insert");
        assert_eq!(t.len(), 2);
    }

    /// The fuzz target `session_table`'s input that found the table holding more than a bound
    /// lowered by a reload (fuzz/regressions/session_table/, format in
    /// fuzz/fuzz_targets/session_table.rs: capacity, timeout, then `[op, client, ms]` records;
    /// op 0–2 insert, 7 reconfigure to `client % 16 + 1`), replayed for its invariant: never more
    /// sessions than the bound, and every session an operation evicts handed back.
    #[test]
    fn fuzz_regression_reload_to_a_smaller_bound() {
        let input =
            include_bytes!("../../../fuzz/regressions/session_table/reload-to-a-smaller-bound");
        let t0 = Instant::now();
        let (capacity, timeout) = (usize::from(input[0] % 16) + 1, u64::from(input[1]));
        let mut t = SessionTable::new(capacity, Duration::from_millis(timeout));
        let mut bound = capacity;
        let (mut held, mut now) = (0usize, t0);
        for r in input[2..].chunks_exact(3) {
            now += Duration::from_millis(u64::from(r[2]));
            match r[0] % 8 {
                0..=2 => {
                    let ins = t.insert(r[1], (), now);
                    held = held + 1
                        - usize::from(ins.replaced.is_some())
                        - usize::from(ins.evicted.is_some());
                }
                7 => {
                    bound = usize::from(r[1] % 16) + 1;
                    held -= t
                        .reconfigure(bound, Duration::from_millis(u64::from(r[2])))
                        .len();
                }
                _ => {}
            }
            assert!(
                t.len() <= bound,
                "{} sessions in a table of {bound}",
                t.len()
            );
            assert_eq!(t.len(), held, "every session that left was handed back");
        }
    }
}
