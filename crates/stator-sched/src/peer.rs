//! What a pick is given: the pool's peers (at build time), and per request the caller's view of
//! which peers are usable and how loaded they are, the peers already tried, and a client key.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::SchedError;

/// The most peers one pool may have (peer indices are `u32`, the tried set stores them).
pub const MAX_PEERS: usize = 1 << 16;

/// One upstream peer of a pool, as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Peer {
    /// Stable id (the backend's id in the control plane). Unique in the pool.
    pub id: u32,
    /// Stable name (the backend's configured id, else `address:port`), from which source
    /// hashing derives the peer's Maglev permutation; the same on every node. Unique in the pool.
    pub name: String,
    /// Relative weight, at least 1.
    pub weight: u32,
}

impl Peer {
    /// A peer with the given id, name and weight.
    pub fn new(id: u32, name: impl Into<String>, weight: u32) -> Self {
        Self {
            id,
            name: name.into(),
            weight,
        }
    }
}

/// Checks a pool: weights ≥ 1, unique ids, at most [`MAX_PEERS`] peers.
pub(crate) fn check_peers(peers: &[Peer]) -> Result<(), SchedError> {
    if peers.len() > MAX_PEERS {
        return Err(SchedError::TooManyPeers {
            count: peers.len(),
            max: MAX_PEERS,
        });
    }
    if let Some(p) = peers.iter().find(|p| p.weight == 0) {
        return Err(SchedError::ZeroWeight { id: p.id });
    }
    let mut ids: Vec<u32> = peers.iter().map(|p| p.id).collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(SchedError::DuplicateId { id: w[0] });
    }
    Ok(())
}

/// The caller's view of a pool's peers at the moment of a pick, by peer index (the position in
/// the slice the scheduler was built from).
///
/// The proxy implements it over its health state (or uses [`AtomicPeerSet`] and
/// [`WithConns`]); it must be cheap: schedulers call it once per candidate.
pub trait PeerView {
    /// Whether peer `index` may get a new request now: not down, not draining. Indices past the
    /// pool's end must answer `false`.
    fn usable(&self, index: usize) -> bool;

    /// Active connections (or requests) of peer `index`, for least-connections and P2C; other
    /// schedulers never ask. Defaults to 0.
    #[inline]
    fn active(&self, _index: usize) -> u32 {
        0
    }
}

/// Every peer usable, none loaded (tests, benchmarks, pools without health checks).
#[derive(Debug, Clone, Copy, Default)]
pub struct AllUsable;

impl PeerView for AllUsable {
    #[inline]
    fn usable(&self, _index: usize) -> bool {
        true
    }
}

impl<F: Fn(usize) -> bool> PeerView for F {
    #[inline]
    fn usable(&self, index: usize) -> bool {
        self(index)
    }
}

/// A fixed set of usable peers, one bit per peer index.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PeerSet {
    words: Vec<u64>,
}

impl PeerSet {
    /// A set of `len` peers, all usable (`true`) or none (`false`).
    pub fn new(len: usize, usable: bool) -> Self {
        let mut set = Self {
            words: vec![0; len.div_ceil(64)],
        };
        if usable {
            for i in 0..len {
                set.set(i, true);
            }
        }
        set
    }

    /// Marks peer `index` usable or not (ignored past the end).
    pub fn set(&mut self, index: usize, usable: bool) {
        if let Some(word) = self.words.get_mut(index / 64) {
            let bit = 1u64 << (index % 64);
            if usable {
                *word |= bit;
            } else {
                *word &= !bit;
            }
        }
    }
}

impl PeerView for PeerSet {
    #[inline]
    fn usable(&self, index: usize) -> bool {
        self.words
            .get(index / 64)
            .is_some_and(|w| w & (1 << (index % 64)) != 0)
    }
}

/// A usable set that a health checker updates while workers read it, without locks: one atomic
/// bit per peer (relaxed loads: a pick that sees a state a moment old is fine).
#[derive(Debug, Default)]
pub struct AtomicPeerSet {
    words: Box<[AtomicU64]>,
}

impl AtomicPeerSet {
    /// A set of `len` peers, all usable (`true`) or none (`false`).
    pub fn new(len: usize, usable: bool) -> Self {
        let set = Self {
            words: (0..len.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        };
        if usable {
            for i in 0..len {
                set.set(i, true);
            }
        }
        set
    }

    /// Marks peer `index` usable or not (ignored past the end).
    pub fn set(&self, index: usize, usable: bool) {
        if let Some(word) = self.words.get(index / 64) {
            let bit = 1u64 << (index % 64);
            if usable {
                word.fetch_or(bit, Ordering::Relaxed);
            } else {
                word.fetch_and(!bit, Ordering::Relaxed);
            }
        }
    }
}

impl PeerView for AtomicPeerSet {
    #[inline]
    fn usable(&self, index: usize) -> bool {
        self.words
            .get(index / 64)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (index % 64)) != 0)
    }
}

/// A connection count the caller keeps per peer: plain (one worker's own count) or atomic
/// (shared between workers).
pub trait ConnCount {
    /// The current count.
    fn count(&self) -> u32;
}

impl ConnCount for u32 {
    #[inline]
    fn count(&self) -> u32 {
        *self
    }
}

impl ConnCount for AtomicU32 {
    #[inline]
    fn count(&self) -> u32 {
        self.load(Ordering::Relaxed)
    }
}

/// A usable view plus active-connection counts by peer index (missing entries count 0), for
/// least-connections and P2C.
#[derive(Debug, Clone, Copy)]
pub struct WithConns<'a, V: ?Sized, C> {
    /// Which peers are usable.
    pub usable: &'a V,
    /// Active connections by peer index.
    pub active: &'a [C],
}

impl<V: PeerView + ?Sized, C: ConnCount> PeerView for WithConns<'_, V, C> {
    #[inline]
    fn usable(&self, index: usize) -> bool {
        self.usable.usable(index)
    }

    #[inline]
    fn active(&self, index: usize) -> u32 {
        self.active.get(index).map_or(0, ConnCount::count)
    }
}

/// The peers already tried for one request (a retry must not return to them): a small inline
/// set, never allocated. Holds up to [`Tried::CAPACITY`] peers, which bounds retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tried {
    len: u8,
    peers: [u32; Tried::CAPACITY],
}

impl Default for Tried {
    fn default() -> Self {
        Self::new()
    }
}

impl Tried {
    /// How many peers the set holds: the most tries one request can make.
    pub const CAPACITY: usize = 16;

    /// The empty set (a request's first try).
    pub const fn new() -> Self {
        Self {
            len: 0,
            peers: [0; Self::CAPACITY],
        }
    }

    /// Adds peer `index`; `false` if the set is full (the caller should stop retrying).
    pub fn insert(&mut self, index: usize) -> bool {
        if self.contains(index) {
            return true;
        }
        let (Some(slot), Ok(index)) = (self.peers.get_mut(usize::from(self.len)), index.try_into())
        else {
            return false;
        };
        *slot = index;
        self.len += 1;
        true
    }

    /// Whether peer `index` was tried.
    #[inline]
    pub fn contains(&self, index: usize) -> bool {
        // The common case, a first try, costs one compare.
        self.len != 0
            && self.peers[..usize::from(self.len)]
                .iter()
                .any(|&p| p as usize == index)
    }

    /// Number of peers tried.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether no peer was tried yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether no more peers fit.
    pub fn is_full(&self) -> bool {
        usize::from(self.len) == Self::CAPACITY
    }
}

/// Everything a pick needs from the caller for one request.
#[derive(Debug)]
pub struct Request<'a, V: ?Sized> {
    /// Which peers are usable now, and their load.
    pub view: &'a V,
    /// Peers already tried for this request.
    pub tried: &'a Tried,
    /// The client key for source hashing (e.g. [`crate::client_key`] of the client address);
    /// other schedulers ignore it.
    pub key: u32,
}

impl<'a, V: PeerView + ?Sized> Request<'a, V> {
    /// A first try with no client key.
    pub fn new(view: &'a V) -> Self {
        const NONE_TRIED: &Tried = &Tried::new();
        Self {
            view,
            tried: NONE_TRIED,
            key: 0,
        }
    }

    /// The same request, avoiding the peers in `tried`.
    pub fn with_tried(self, tried: &'a Tried) -> Self {
        Self { tried, ..self }
    }

    /// The same request with a client key.
    pub fn with_key(self, key: u32) -> Self {
        Self { key, ..self }
    }

    /// Whether peer `index` is a candidate: usable and not tried.
    #[inline]
    pub(crate) fn candidate(&self, index: usize) -> bool {
        self.view.usable(index) && !self.tried.contains(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tried_set_is_bounded_and_exact() {
        let mut t = Tried::new();
        assert!(!t.contains(0));
        for i in 0..Tried::CAPACITY {
            assert!(t.insert(i * 3));
        }
        assert!(t.insert(0), "re-inserting a member succeeds");
        assert!(t.is_full());
        assert!(!t.insert(1000));
        assert!(t.contains(45) && !t.contains(46) && !t.contains(1000));
    }

    #[test]
    fn peer_sets_answer_by_bit() {
        let mut s = PeerSet::new(130, true);
        s.set(129, false);
        assert!(s.usable(0) && s.usable(128) && !s.usable(129) && !s.usable(130));
        let a = AtomicPeerSet::new(130, false);
        a.set(64, true);
        assert!(a.usable(64) && !a.usable(63) && !a.usable(999));
    }

    #[test]
    fn pool_checks_name_the_offender() {
        let ok = [Peer::new(1, "a", 1), Peer::new(2, "b", 3)];
        assert_eq!(check_peers(&ok), Ok(()));
        let zero = [Peer::new(1, "a", 1), Peer::new(7, "b", 0)];
        assert_eq!(check_peers(&zero), Err(SchedError::ZeroWeight { id: 7 }));
        let dup = [Peer::new(4, "a", 1), Peer::new(4, "b", 1)];
        assert_eq!(check_peers(&dup), Err(SchedError::DuplicateId { id: 4 }));
    }
}
