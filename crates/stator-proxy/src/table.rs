//! A worker's session table: client → session, bounded, with an idle timeout — and, for UDP,
//! conntrack's distinction between sessions that were answered and sessions that were not.
//! The UDP listener keys it by client address and port (a session is a connected upstream
//! socket); HTTP/TCP persistence keys it by client address (a session is the upstream it used,
//! [`crate::session::Sessions`]). Pure: time is a parameter, nothing is shared, no I/O.
//!
//! A slab of entries linked in recency order plus a hash map from the client to its slot:
//! lookups, inserts, evictions and expiry are O(1) per entry and allocate only while the table
//! grows towards its bound — a flood of new clients (or source ports) evicts sessions instead
//! of growing the table.
//!
//! **Unreplied first** (Linux conntrack's rule for UDP: an entry that has seen no reply lives
//! 30 s, an answered one longer, and only unanswered entries are dropped early when the table
//! is full). Entries live in one of two recency lists, [`Class::Unreplied`] and
//! [`Class::Replied`], each with its own timeout. A full table evicts the least recently used
//! *unreplied* session when there is one, and the least recently used session otherwise; and
//! [`SessionTable::evict_unreplied`] gives up an unreplied session, unused for a while, on
//! demand (the UDP listener's answer to a spent descriptor budget). A flood of sources that never get an
//! answer so churns among itself, and the sessions of clients that are being answered stay.
//! Persistence inserts every entry as replied: one list, plain LRU.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

const NIL: usize = usize::MAX;

/// Whether a session has been answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// No reply yet: the shorter timeout, and the first to go under pressure.
    Unreplied = 0,
    /// At least one reply (or an entry that has no notion of replies).
    Replied = 1,
}

#[derive(Debug)]
struct Entry<K, V> {
    client: K,
    value: V,
    last_used: Instant,
    class: Class,
    prev: usize,
    next: usize,
}

/// One recency list: most recently used at the head.
#[derive(Debug, Clone, Copy)]
struct List {
    head: usize,
    tail: usize,
}

const EMPTY: List = List {
    head: NIL,
    tail: NIL,
};

/// Client `K` → `V`, bounded; unreplied sessions first out, then the least recently used.
#[derive(Debug)]
pub struct SessionTable<K, V> {
    map: HashMap<K, usize>,
    slab: Vec<Option<Entry<K, V>>>,
    free: Vec<usize>,
    lists: [List; 2],
    capacity: usize,
    timeout: Duration,
    unreplied_timeout: Duration,
}

impl<K: Copy + Eq + Hash, V> SessionTable<K, V> {
    /// A table of at most `capacity` sessions (at least 1); a session unused for `timeout`
    /// expires (an unreplied one too, until [`Self::set_unreplied_timeout`] says otherwise).
    pub fn new(capacity: usize, timeout: Duration) -> Self {
        Self {
            map: HashMap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            lists: [EMPTY; 2],
            capacity: capacity.max(1),
            timeout,
            unreplied_timeout: timeout,
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

    /// The idle timeout of a replied session.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The timeout of an unreplied session: the one set, or the idle timeout if shorter.
    pub fn unreplied_timeout(&self) -> Duration {
        self.unreplied_timeout.min(self.timeout)
    }

    /// Changes the bound and the timeout (a reload). A smaller bound evicts at once, down to
    /// the new bound, in the order a full table evicts (unreplied sessions first, least
    /// recently used first); they are returned, so that the caller counts and closes each
    /// (the table never holds more than its bound).
    pub fn reconfigure(&mut self, capacity: usize, timeout: Duration) -> Vec<(K, V)> {
        self.capacity = capacity.max(1);
        self.timeout = timeout;
        let mut evicted = Vec::new();
        while self.map.len() > self.capacity {
            let Some(slot) = self.victim() else {
                break;
            };
            evicted.push(self.remove_slot(slot));
        }
        evicted
    }

    /// The session a full table gives up first: the least recently used unreplied one, else
    /// the least recently used.
    fn victim(&self) -> Option<usize> {
        match self.lists[Class::Unreplied as usize].tail {
            NIL => Some(self.lists[Class::Replied as usize].tail).filter(|&t| t != NIL),
            t => Some(t),
        }
    }

    /// Sets how long an unreplied session lives unused (never longer than the idle timeout).
    pub fn set_unreplied_timeout(&mut self, timeout: Duration) {
        self.unreplied_timeout = timeout;
    }

    /// `client`'s session if it was used within its timeout, refreshed (now the most recently
    /// used of its class). An expired session is removed and returned as `Err`, so that the
    /// caller can close what it holds.
    pub fn touch(&mut self, client: K, now: Instant) -> Result<Option<&mut V>, V> {
        self.refresh(client, now, None)
    }

    /// As [`Self::touch`], and the session is replied from now on.
    pub fn touch_replied(&mut self, client: K, now: Instant) -> Result<Option<&mut V>, V> {
        self.refresh(client, now, Some(Class::Replied))
    }

    /// `client`'s session without refreshing it (expired or not).
    pub fn peek_mut(&mut self, client: K) -> Option<&mut V> {
        let &slot = self.map.get(&client)?;
        self.slab[slot].as_mut().map(|e| &mut e.value)
    }

    /// `client`'s class, if it has a session (expired or not).
    pub fn class(&self, client: K) -> Option<Class> {
        let &slot = self.map.get(&client)?;
        self.slab[slot].as_ref().map(|e| e.class)
    }

    /// Inserts a replied session for `client` (see [`Self::insert_as`]).
    pub fn insert(&mut self, client: K, value: V, now: Instant) -> Inserted<K, V> {
        self.insert_as(client, value, now, Class::Replied)
    }

    /// Inserts a session of `class` for `client` (replacing and returning any it had); when
    /// the table is full the least recently used unreplied session is evicted and returned,
    /// or, when there is none, the least recently used session.
    pub fn insert_as(&mut self, client: K, value: V, now: Instant, class: Class) -> Inserted<K, V> {
        let replaced = self
            .map
            .get(&client)
            .copied()
            .map(|slot| self.remove_slot(slot).1);
        // The table holds at most `capacity` (`reconfigure` evicts down to a smaller bound), so
        // one eviction makes room.
        let evicted = if self.map.len() >= self.capacity {
            self.victim().map(|slot| self.remove_slot(slot))
        } else {
            None
        };
        let entry = Entry {
            client,
            value,
            last_used: now,
            class,
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

    /// Removes and returns the least recently used unreplied session, if there is one that
    /// has been unused for `idle` or longer at `now`.
    pub fn evict_unreplied(&mut self, now: Instant, idle: Duration) -> Option<(K, V)> {
        let t = self.lists[Class::Unreplied as usize].tail;
        let e = self.slab.get(t)?.as_ref()?;
        (now.saturating_duration_since(e.last_used) >= idle).then(|| self.remove_slot(t))
    }

    /// Removes `client`'s session.
    pub fn remove(&mut self, client: K) -> Option<V> {
        let slot = self.map.get(&client).copied()?;
        Some(self.remove_slot(slot).1)
    }

    /// Removes up to `max` sessions that expired by `now` (each by its class's timeout), the
    /// least recently used of each class first, with their class.
    pub fn expire(&mut self, now: Instant, max: usize) -> Vec<(K, V, Class)> {
        let mut out = Vec::new();
        while out.len() < max {
            let slot = [Class::Unreplied, Class::Replied]
                .into_iter()
                .map(|c| self.lists[c as usize].tail)
                .find(|&t| t != NIL && self.expired(t, now));
            let Some(slot) = slot else {
                break;
            };
            let class = self.slab[slot].as_ref().map_or(Class::Replied, |e| e.class);
            let (k, v) = self.remove_slot(slot);
            out.push((k, v, class));
        }
        out
    }

    /// Removes every session.
    pub fn drain(&mut self) -> Vec<(K, V)> {
        let mut out = Vec::with_capacity(self.map.len());
        for c in [Class::Unreplied, Class::Replied] {
            while self.lists[c as usize].tail != NIL {
                out.push(self.remove_slot(self.lists[c as usize].tail));
            }
        }
        out
    }

    /// Every session: the replied ones, then the unreplied ones, each most recently used
    /// first.
    pub fn iter(&self) -> impl Iterator<Item = (K, &V)> + '_ {
        let mut lists = [Class::Replied, Class::Unreplied].into_iter();
        let mut at = NIL;
        std::iter::from_fn(move || {
            while at == NIL {
                at = self.lists[lists.next()? as usize].head;
            }
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

    fn refresh(&mut self, client: K, now: Instant, to: Option<Class>) -> Result<Option<&mut V>, V> {
        let Some(&slot) = self.map.get(&client) else {
            return Ok(None);
        };
        if self.expired(slot, now) {
            let (_, v) = self.remove_slot(slot);
            return Err(v);
        }
        self.unlink(slot);
        if let Some(class) = to
            && let Some(e) = self.slab[slot].as_mut()
        {
            e.class = class;
        }
        self.push_head(slot);
        let e = self.slab[slot].as_mut().expect("mapped slots are occupied");
        e.last_used = now;
        Ok(Some(&mut e.value))
    }

    fn expired(&self, slot: usize, now: Instant) -> bool {
        self.slab[slot].as_ref().is_some_and(|e| {
            let timeout = match e.class {
                Class::Unreplied => self.unreplied_timeout(),
                Class::Replied => self.timeout,
            };
            now.saturating_duration_since(e.last_used) > timeout
        })
    }

    fn remove_slot(&mut self, slot: usize) -> (K, V) {
        self.unlink(slot);
        let e = self.slab[slot].take().expect("linked slots are occupied");
        self.map.remove(&e.client);
        self.free.push(slot);
        (e.client, e.value)
    }

    fn unlink(&mut self, slot: usize) {
        let (prev, next, class) = {
            let e = self.slab[slot].as_ref().expect("occupied");
            (e.prev, e.next, e.class)
        };
        let list = &mut self.lists[class as usize];
        match prev {
            NIL => list.head = next,
            p => self.slab[p].as_mut().expect("occupied").next = next,
        }
        let list = &mut self.lists[class as usize];
        match next {
            NIL => list.tail = prev,
            n => self.slab[n].as_mut().expect("occupied").prev = prev,
        }
    }

    fn push_head(&mut self, slot: usize) {
        let class = self.slab[slot].as_ref().expect("occupied").class;
        let old = self.lists[class as usize].head;
        {
            let e = self.slab[slot].as_mut().expect("occupied");
            e.prev = NIL;
            e.next = old;
        }
        if old != NIL {
            self.slab[old].as_mut().expect("occupied").prev = slot;
        }
        let list = &mut self.lists[class as usize];
        list.head = slot;
        if list.tail == NIL {
            list.tail = slot;
        }
    }
}

/// What [`SessionTable::insert`] displaced.
#[derive(Debug)]
pub struct Inserted<K, V> {
    /// The client's previous session.
    pub replaced: Option<V>,
    /// The session evicted because the table was full.
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
        assert_eq!(gone, vec![(c(1), 1, Class::Replied)]);
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
        t.reconfigure(1, Duration::from_secs(1));
        t.insert(c(5), 5, t0);
        assert!(t.insert(c(6), 6, t0).evicted.is_some());
    }

    #[test]
    fn a_full_table_evicts_unreplied_sessions_first() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut t = SessionTable::new(4, Duration::from_secs(60));
        // two answered clients, used long ago
        t.insert_as(c(1), 1, t0, Class::Unreplied);
        assert!(t.touch_replied(c(1), t0).unwrap().is_some());
        t.insert(c(2), 2, t0);
        // a flood of clients that are never answered, each newer than the answered ones
        for p in 100..200u16 {
            let ins = t.insert_as(c(p), p, t0 + s, Class::Unreplied);
            if p >= 102 {
                // the oldest unreplied goes, never an answered session
                assert_eq!(ins.evicted.map(|(k, _)| k.port()), Some(p - 2));
            }
        }
        assert_eq!(t.class(c(1)), Some(Class::Replied));
        assert_eq!(t.class(c(2)), Some(Class::Replied));
        assert_eq!(t.len(), 4);
        // on demand: the least recently used unreplied session, once unused long enough
        let later = t0 + 3 * s;
        assert!(t.evict_unreplied(t0 + s, s).is_none(), "too recent");
        assert_eq!(
            t.evict_unreplied(later, s).map(|(k, _)| k.port()),
            Some(198)
        );
        assert_eq!(
            t.evict_unreplied(later, s).map(|(k, _)| k.port()),
            Some(199)
        );
        assert!(t.evict_unreplied(later, s).is_none());
        // with no unreplied session left, a full table evicts the least recently used
        t.insert(c(3), 3, t0 + s);
        t.insert(c(4), 4, t0 + s);
        assert_eq!(t.insert(c(5), 5, t0 + s).evicted, Some((c(1), 1)));
        assert!(t.slots() <= 4);
    }

    #[test]
    fn unreplied_sessions_expire_sooner_and_a_reply_gives_them_the_idle_timeout() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut t = SessionTable::new(10, 60 * s);
        t.set_unreplied_timeout(30 * s);
        t.insert_as(c(1), 1, t0, Class::Unreplied);
        t.insert_as(c(2), 2, t0, Class::Unreplied);
        t.insert_as(c(3), 3, t0, Class::Unreplied);
        // 2 is answered: it lives as long as a replied session
        assert!(t.touch_replied(c(2), t0 + 10 * s).unwrap().is_some());
        // 3 keeps sending but is never answered: unreplied, refreshed by its own datagrams
        assert!(t.touch(c(3), t0 + 20 * s).unwrap().is_some());
        assert_eq!(t.class(c(3)), Some(Class::Unreplied));
        let gone = t.expire(t0 + 31 * s, usize::MAX);
        assert_eq!(gone, vec![(c(1), 1, Class::Unreplied)]);
        let gone = t.expire(t0 + 51 * s, usize::MAX);
        assert_eq!(gone, vec![(c(3), 3, Class::Unreplied)]);
        assert!(t.expire(t0 + 70 * s, usize::MAX).is_empty());
        let gone = t.expire(t0 + 71 * s, usize::MAX);
        assert_eq!(gone, vec![(c(2), 2, Class::Replied)]);
        // an unreplied timeout longer than the idle one is cut to it
        t.set_unreplied_timeout(600 * s);
        assert_eq!(t.unreplied_timeout(), 60 * s);
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
