//! A worker's session table: client address → upstream, with an idle timeout and a bounded
//! size (least recently used evicted first). Pure: time is a parameter, nothing is shared.
//!
//! The table itself is the one the UDP listener keeps its sessions in ([`SessionTable`]),
//! keyed here by client address.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::table::SessionTable;

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
pub struct Sessions(SessionTable<IpAddr, SocketAddr>);

impl Sessions {
    /// A table of at most `capacity` entries (at least 1) that forgets an entry unused for
    /// `timeout`.
    pub fn new(capacity: usize, timeout: Duration) -> Self {
        Self(SessionTable::new(capacity, timeout))
    }

    /// Entries held (expired ones included until they are looked up or evicted).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The upstream `client` used last, if it used one within the timeout; refreshes the
    /// entry. An expired entry is removed.
    pub fn get(&mut self, client: IpAddr, now: Instant) -> Option<SocketAddr> {
        match self.0.touch(client, now) {
            Ok(found) => found.copied(),
            Err(_expired) => None,
        }
    }

    /// Remembers that `client` uses `upstream` as of `now`.
    pub fn insert(&mut self, client: IpAddr, upstream: SocketAddr, now: Instant) -> Inserted {
        let done = self.0.insert(client, upstream, now);
        match (done.replaced, done.evicted) {
            (Some(_), _) => Inserted::Updated,
            (None, Some(_)) => Inserted::Evicted,
            (None, None) => Inserted::New,
        }
    }

    /// Forgets `client`.
    pub fn remove(&mut self, client: IpAddr) {
        self.0.remove(client);
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
        assert!(s.0.slots() <= 3, "slab grew past the capacity");
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
        assert_eq!(s.0.slots(), 100);
    }
}
