//! The connection table (`stator_ct`): flow key → (real id, last seen), bounded, with
//! least-recently-used eviction.
//!
//! The kernel's `LRU_HASH` evicts approximately (per-CPU free lists, a reference bit); this
//! table evicts exactly the least recently looked-up or written entry. docs/forwarding.md §7
//! puts eviction order out of the differential test's scope: it keeps tables below capacity.
//!
//! Layout: entries live in a slab (`Vec<Node>`) threaded by a doubly linked recency list of
//! slab indices; a `hashbrown::HashTable<u32>` maps a key's hash to its slab index. A lookup is
//! one hash, one probe and a key compare; a hit moves the entry to the front (three index
//! writes); an insert into a full table reuses the tail's slot. The hash is keyed by a seed the
//! caller chooses (the table never reads randomness itself), so a data plane that seeds it
//! randomly is not open to hash flooding by crafted flows.

use std::hash::{BuildHasher, Hasher};

use foldhash::fast::FixedState;
use hashbrown::HashTable;
use stator_abi::{CtEntry, FlowKey};

use crate::flow::{key_words, words_key};

/// How connection tables relate to CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CtMode {
    /// One table per CPU index, as the paper's per-packet-thread tables (§3.1) and the default
    /// build's `LRU_PERCPU_HASH`. See docs/forwarding.md for how the kernel's per-CPU map differs
    /// (shared keys, per-CPU values).
    #[default]
    PerCpu,
    /// One table for every CPU, as the "shared" build's `LRU_HASH`.
    Shared,
}

/// Slab index meaning "none" in the recency list.
const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Node {
    /// The key as five big-endian words ([`key_words`]).
    key: [u64; 5],
    entry: CtEntry,
    hash: u64,
    prev: u32,
    next: u32,
}

/// A bounded connection table with LRU eviction.
#[derive(Debug, Clone)]
pub struct ConnTable {
    index: HashTable<u32>,
    nodes: Vec<Node>,
    /// Most recently used.
    head: u32,
    /// Least recently used: evicted first.
    tail: u32,
    capacity: usize,
    hasher: FixedState,
}

impl ConnTable {
    /// An empty table holding at most `capacity` entries (at least 1), whose hash is keyed by
    /// `seed`. Memory grows with use, up to the capacity.
    pub fn new(capacity: usize, seed: u64) -> Self {
        Self {
            index: HashTable::new(),
            nodes: Vec::new(),
            head: NIL,
            tail: NIL,
            // Slab indices are u32 and NIL is reserved.
            capacity: capacity.clamp(1, NIL as usize),
            hasher: FixedState::with_seed(seed),
        }
    }

    /// The most entries the table holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The entry for `key`, without touching its recency.
    pub fn get(&self, key: &FlowKey) -> Option<CtEntry> {
        let w = key_words(key);
        self.find(&w, self.hash(&w)).map(|(_, e)| e)
    }

    /// Writes `entry` for `key` (overwriting any entry), evicting the least recently used entry
    /// when the table is full.
    pub fn insert(&mut self, key: FlowKey, entry: CtEntry) {
        let w = key_words(&key);
        let h = self.hash(&w);
        self.insert_hashed(w, h, entry);
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.index.clear();
        self.nodes.clear();
        self.head = NIL;
        self.tail = NIL;
    }

    /// Every entry, most recently used first.
    pub fn iter(&self) -> impl Iterator<Item = (FlowKey, CtEntry)> + '_ {
        let mut at = self.head;
        std::iter::from_fn(move || {
            let n = self.nodes.get(at as usize)?;
            at = n.next;
            Some((words_key(&n.key), n.entry))
        })
    }

    /// The keyed hash of a key in word form.
    #[inline]
    pub(crate) fn hash(&self, key: &[u64; 5]) -> u64 {
        // Word by word: hashing the array would go through the byte-string path.
        let mut h = self.hasher.build_hasher();
        for &w in key {
            h.write_u64(w);
        }
        h.finish()
    }

    /// The slab index and entry of `key`.
    #[inline]
    pub(crate) fn find(&self, key: &[u64; 5], hash: u64) -> Option<(u32, CtEntry)> {
        let nodes = &self.nodes;
        let &i = self.index.find(hash, |&i| {
            nodes.get(i as usize).is_some_and(|n| same_key(&n.key, key))
        })?;
        Some((i, nodes.get(i as usize)?.entry))
    }

    /// Marks slab entry `i` (from [`find`](Self::find), with no insert in between) as just used,
    /// and sets its `last_seen_ns` when `refresh` is given.
    #[inline]
    pub(crate) fn touch(&mut self, i: u32, refresh: Option<u64>) {
        if let (Some(now), Some(n)) = (refresh, self.nodes.get_mut(i as usize)) {
            n.entry.last_seen_ns = now;
        }
        self.move_to_front(i);
    }

    /// [`insert`](Self::insert) with the key's hash already computed.
    pub(crate) fn insert_hashed(&mut self, key: [u64; 5], hash: u64, entry: CtEntry) {
        if let Some((i, _)) = self.find(&key, hash) {
            if let Some(n) = self.nodes.get_mut(i as usize) {
                n.entry = entry;
            }
            self.move_to_front(i);
            return;
        }
        let i = if self.nodes.len() < self.capacity {
            // len < capacity <= NIL, so the index fits and is not NIL.
            let i = self.nodes.len() as u32;
            self.nodes.push(Node {
                key,
                entry,
                hash,
                prev: NIL,
                next: NIL,
            });
            i
        } else {
            // Full (capacity >= 1, so there is a tail): reuse the least recently used slot.
            let i = self.tail;
            let Some(old_hash) = self.nodes.get(i as usize).map(|n| n.hash) else {
                return;
            };
            if let Ok(slot) = self.index.find_entry(old_hash, |&j| j == i) {
                slot.remove();
            }
            self.unlink(i);
            if let Some(n) = self.nodes.get_mut(i as usize) {
                n.key = key;
                n.entry = entry;
                n.hash = hash;
            }
            i
        };
        let nodes = &self.nodes;
        self.index
            .insert_unique(hash, i, |&j| nodes.get(j as usize).map_or(0, |n| n.hash));
        self.link_front(i);
    }

    fn move_to_front(&mut self, i: u32) {
        if self.head != i {
            self.unlink(i);
            self.link_front(i);
        }
    }

    fn unlink(&mut self, i: u32) {
        let Some(n) = self.nodes.get(i as usize) else {
            return;
        };
        let (prev, next) = (n.prev, n.next);
        match self.nodes.get_mut(prev as usize) {
            Some(p) => p.next = next,
            None => self.head = next,
        }
        match self.nodes.get_mut(next as usize) {
            Some(nx) => nx.prev = prev,
            None => self.tail = prev,
        }
        if let Some(n) = self.nodes.get_mut(i as usize) {
            n.prev = NIL;
            n.next = NIL;
        }
    }

    fn link_front(&mut self, i: u32) {
        let old = self.head;
        if let Some(n) = self.nodes.get_mut(i as usize) {
            n.prev = NIL;
            n.next = old;
        }
        match self.nodes.get_mut(old as usize) {
            Some(o) => o.prev = i,
            None => self.tail = i,
        }
        self.head = i;
    }
}

/// Key equality without a call to `memcmp` (what `==` on the arrays compiles to).
#[inline]
fn same_key(a: &[u64; 5], b: &[u64; 5]) -> bool {
    ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4])) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u16) -> FlowKey {
        FlowKey {
            src: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            dst: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            sport: n.to_be_bytes(),
            dport: [0, 80],
            proto: 6,
            family: 4,
            _pad0: [0; 2],
        }
    }

    fn entry(real_id: u32, t: u64) -> CtEntry {
        CtEntry {
            real_id,
            hash: 0,
            last_seen_ns: t,
        }
    }

    fn order(t: &ConnTable) -> Vec<u16> {
        t.iter().map(|(k, _)| u16::from_be_bytes(k.sport)).collect()
    }

    fn words(n: u16) -> [u64; 5] {
        key_words(&key(n))
    }

    #[test]
    fn insert_get_overwrite() {
        let mut t = ConnTable::new(4, 1);
        assert!(t.is_empty() && t.get(&key(1)).is_none());
        t.insert(key(1), entry(5, 10));
        t.insert(key(2), entry(6, 20));
        assert_eq!(t.get(&key(1)), Some(entry(5, 10)));
        t.insert(key(1), entry(7, 30));
        assert_eq!(t.get(&key(1)), Some(entry(7, 30)));
        assert_eq!(t.len(), 2);
        assert_eq!(order(&t), [1, 2]);
    }

    #[test]
    fn evicts_least_recently_used() {
        let mut t = ConnTable::new(3, 7);
        for n in 1..=3 {
            t.insert(key(n), entry(u32::from(n), 0));
        }
        // Use 1, so 2 is now the least recently used.
        let h = t.hash(&words(1));
        let (i, _) = t.find(&words(1), h).unwrap();
        t.touch(i, Some(99));
        assert_eq!(order(&t), [1, 3, 2]);
        t.insert(key(4), entry(4, 0));
        assert_eq!(t.len(), 3);
        assert!(t.get(&key(2)).is_none(), "the LRU entry was evicted");
        assert_eq!(t.get(&key(1)), Some(entry(1, 99)), "touch refreshed it");
        assert_eq!(order(&t), [4, 1, 3]);
        // Keep churning through a tiny table: no panic, invariants hold.
        for n in 5..200 {
            t.insert(key(n), entry(0, 0));
            assert_eq!(t.len(), 3);
        }
        assert_eq!(order(&t), [199, 198, 197]);
        t.clear();
        assert!(t.is_empty() && order(&t).is_empty());
    }

    #[test]
    fn capacity_one_and_zero() {
        let mut t = ConnTable::new(0, 0);
        assert_eq!(t.capacity(), 1);
        t.insert(key(1), entry(1, 1));
        t.insert(key(2), entry(2, 2));
        assert_eq!(order(&t), [2]);
        assert_eq!(t.get(&key(2)), Some(entry(2, 2)));
    }

    #[test]
    fn seed_changes_the_hash_not_the_content() {
        let (a, b) = (ConnTable::new(8, 1), ConnTable::new(8, 2));
        assert_ne!(a.hash(&words(1)), b.hash(&words(1)));
    }
}
