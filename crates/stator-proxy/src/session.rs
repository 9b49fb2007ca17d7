//! A worker's session table: client address → upstream, with an idle timeout and a bounded
//! size (least recently used evicted first). Pure: time is a parameter, nothing is shared.
//!
//! A slab of entries linked in recency order (most recent at the head) plus a hash map from
//! client address to slot: lookups, inserts and evictions are O(1) and allocate only while the
//! table grows towards its bound.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

const NIL: usize = usize::MAX;

#[derive(Debug, Clone)]
struct Entry {
    client: IpAddr,
    upstream: SocketAddr,
    last_used: Instant,
    prev: usize,
    next: usize,
}

/// What [`Sessions::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// A new entry, without evicting.
    New,
    /// An existing entry, updated.
    Updated,
    /// A new entry, after evicting the least recently used one.
    Evicted,
}

/// Client address → upstream address, least recently used first out.
#[derive(Debug)]
pub struct Sessions {
    map: HashMap<IpAddr, usize>,
    slab: Vec<Entry>,
    free: Vec<usize>,
    head: usize,
    tail: usize,
    capacity: usize,
    timeout: Duration,
}

impl Sessions {
    /// A table of at most `capacity` entries (at least 1) that forgets an entry unused for
    /// `timeout`.
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

    /// Entries held (expired ones included until they are looked up or evicted).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The upstream `client` used last, if it used one within the timeout; refreshes the
    /// entry. An expired entry is removed.
    pub fn get(&mut self, client: IpAddr, now: Instant) -> Option<SocketAddr> {
        let &slot = self.map.get(&client)?;
        if now.saturating_duration_since(self.slab[slot].last_used) > self.timeout {
            self.remove_slot(slot);
            return None;
        }
        self.slab[slot].last_used = now;
        self.move_to_head(slot);
        Some(self.slab[slot].upstream)
    }

    /// Remembers that `client` uses `upstream` as of `now`.
    pub fn insert(&mut self, client: IpAddr, upstream: SocketAddr, now: Instant) -> Inserted {
        if let Some(&slot) = self.map.get(&client) {
            let e = &mut self.slab[slot];
            e.upstream = upstream;
            e.last_used = now;
            self.move_to_head(slot);
            return Inserted::Updated;
        }
        let mut how = Inserted::New;
        let slot = if self.map.len() >= self.capacity {
            // Full: reuse the least recently used slot.
            let slot = self.tail;
            self.unlink(slot);
            self.map.remove(&self.slab[slot].client);
            how = Inserted::Evicted;
            slot
        } else if let Some(free) = self.free.pop() {
            free
        } else {
            self.slab.push(Entry {
                client,
                upstream,
                last_used: now,
                prev: NIL,
                next: NIL,
            });
            self.slab.len() - 1
        };
        self.slab[slot] = Entry {
            client,
            upstream,
            last_used: now,
            prev: NIL,
            next: NIL,
        };
        self.link_head(slot);
        self.map.insert(client, slot);
        how
    }

    /// Forgets `client`.
    pub fn remove(&mut self, client: IpAddr) {
        if let Some(&slot) = self.map.get(&client) {
            self.remove_slot(slot);
        }
    }

    fn remove_slot(&mut self, slot: usize) {
        self.unlink(slot);
        self.map.remove(&self.slab[slot].client);
        self.free.push(slot);
    }

    fn unlink(&mut self, slot: usize) {
        let (prev, next) = (self.slab[slot].prev, self.slab[slot].next);
        if prev == NIL {
            self.head = next;
        } else {
            self.slab[prev].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slab[next].prev = prev;
        }
    }

    fn link_head(&mut self, slot: usize) {
        self.slab[slot].prev = NIL;
        self.slab[slot].next = self.head;
        if self.head != NIL {
            self.slab[self.head].prev = slot;
        }
        self.head = slot;
        if self.tail == NIL {
            self.tail = slot;
        }
    }

    fn move_to_head(&mut self, slot: usize) {
        if self.head != slot {
            self.unlink(slot);
            self.link_head(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }
    fn up(n: u16) -> SocketAddr {
        SocketAddr::from(([10, 1, 0, 1], n))
    }

    #[test]
    fn sticks_refreshes_and_expires() {
        let t0 = Instant::now();
        let mut s = Sessions::new(10, Duration::from_secs(10));
        assert_eq!(s.insert(ip(1), up(80), t0), Inserted::New);
        assert_eq!(s.get(ip(1), t0 + Duration::from_secs(9)), Some(up(80)));
        // The lookup at 9 s refreshed it: still there at 18 s.
        assert_eq!(s.get(ip(1), t0 + Duration::from_secs(18)), Some(up(80)));
        assert_eq!(s.get(ip(1), t0 + Duration::from_secs(29)), None);
        assert!(s.is_empty());
        assert_eq!(s.insert(ip(1), up(81), t0), Inserted::New);
        assert_eq!(s.insert(ip(1), up(82), t0), Inserted::Updated);
        assert_eq!(s.get(ip(1), t0), Some(up(82)));
    }

    #[test]
    fn evicts_the_least_recently_used() {
        let t = Instant::now();
        let mut s = Sessions::new(3, Duration::from_secs(60));
        for n in 1..=3 {
            s.insert(ip(n), up(u16::from(n)), t);
        }
        s.get(ip(1), t); // 2 is now the least recently used
        assert_eq!(s.insert(ip(4), up(4), t), Inserted::Evicted);
        assert_eq!(s.len(), 3);
        assert_eq!(s.get(ip(2), t), None);
        for n in [1, 3, 4] {
            assert_eq!(s.get(ip(n), t), Some(up(u16::from(n))));
        }
        s.remove(ip(3));
        assert_eq!(s.insert(ip(5), up(5), t), Inserted::New);
        assert_eq!(s.len(), 3);
        assert!(s.slab.len() <= 3, "slab grew past the capacity");
    }

    #[test]
    fn stays_bounded_under_a_flood() {
        let t = Instant::now();
        let mut s = Sessions::new(100, Duration::from_secs(60));
        let mut evicted = 0;
        for i in 0..10_000u32 {
            let client = IpAddr::from(i.to_be_bytes());
            if s.insert(client, up(1), t) == Inserted::Evicted {
                evicted += 1;
            }
        }
        assert_eq!(s.len(), 100);
        assert_eq!(evicted, 9_900);
        assert_eq!(s.slab.len(), 100);
    }
}
