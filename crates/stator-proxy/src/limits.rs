//! What a client may make the proxy hold, bounded: descriptors node-wide, connections and
//! sessions per source, new sessions per second. Plain types — the rate bucket is handed
//! `now`, the counters are atomics — with nothing on the hot path that allocates: taking a
//! descriptor or a source's slot is a few relaxed atomic operations, and the guard that gives
//! it back holds one `Arc`.
//!
//! - [`DescriptorBudget`]: the node's descriptors that the proxy tier may use for client
//!   connections, upstream connections and UDP session sockets — the descriptor limit less a
//!   reserve for what must never fail for lack of one (health checks, the admin API, BIRD,
//!   the listening sockets, the process itself). The controller computes it (docs/operations.md,
//!   "Descriptors and floods"); every worker of every listener draws from the one budget, so
//!   that a flood of any size ends in counted refusals, never in `EMFILE` for a health probe
//!   or an API accept.
//! - [`SourceCounts`]: connections or sessions open per source — an address masked to a
//!   prefix ([`SourcePrefixes`]) — for a whole listener, shared by its workers. Counted in a
//!   small count-min sketch of atomic counters under a random key: two counters per source,
//!   a source refused only when both are at the limit, so another source can be refused in
//!   its place only if it collides with crowded sources in both rows; no map, no lock, no
//!   allocation, a fixed 128 KiB per listener.
//! - [`TokenBucket`]: new sessions per second of one worker, with a burst.

use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Descriptors the proxy tier may hold at once, node-wide. Starts unlimited (a proxy built
/// without a controller: tests, benchmarks); the controller sets the capacity.
#[derive(Debug)]
pub struct DescriptorBudget {
    capacity: AtomicU64,
    used: AtomicU64,
    peak: AtomicU64,
    refused: AtomicU64,
}

impl Default for DescriptorBudget {
    fn default() -> Self {
        Self::new(u64::MAX)
    }
}

impl DescriptorBudget {
    /// A budget of `capacity` descriptors.
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity: AtomicU64::new(capacity),
            used: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Sets the capacity (a reload's new reserve). Descriptors held beyond a smaller capacity
    /// stay held; new ones are refused until enough are given back.
    pub fn set_capacity(&self, capacity: u64) {
        self.capacity.store(capacity, Ordering::Relaxed);
    }

    /// The capacity.
    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Descriptors held now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The most held at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Takes refused so far (each take counts once, whatever its size).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Takes `n` descriptors, given back when the guard drops; `None` (counted) when that
    /// would go over the capacity. Never more than the capacity is handed out: each take
    /// sees every earlier one in the counter's order, including those being rolled back.
    pub fn take(self: &Arc<Self>, n: u32) -> Option<Descriptors> {
        let n64 = u64::from(n);
        let before = self.used.fetch_add(n64, Ordering::Relaxed);
        if before.saturating_add(n64) > self.capacity() {
            self.used.fetch_sub(n64, Ordering::Relaxed);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.peak.fetch_max(before + n64, Ordering::Relaxed);
        Some(Descriptors {
            budget: Arc::clone(self),
            n,
        })
    }
}

/// Descriptors taken from a [`DescriptorBudget`], given back on drop.
#[derive(Debug)]
pub struct Descriptors {
    budget: Arc<DescriptorBudget>,
    n: u32,
}

impl Descriptors {
    /// How many it holds.
    pub fn count(&self) -> u32 {
        self.n
    }
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        self.budget
            .used
            .fetch_sub(u64::from(self.n), Ordering::Relaxed);
    }
}

/// How much of a client address is "the source": its prefix of these lengths (an IPv4-mapped
/// IPv6 address counts as the IPv4 address it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourcePrefixes {
    /// IPv4 prefix length, 0–32.
    pub v4: u8,
    /// IPv6 prefix length, 0–128.
    pub v6: u8,
}

impl Default for SourcePrefixes {
    /// A host for IPv4, a /64 — what one IPv6 host is usually given — for IPv6.
    fn default() -> Self {
        Self { v4: 32, v6: 64 }
    }
}

impl SourcePrefixes {
    /// `ip` with its host bits cleared.
    pub fn source(&self, ip: IpAddr) -> IpAddr {
        match ip.to_canonical() {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.v4.min(32)))
                    .unwrap_or(0);
                IpAddr::from((a.to_bits() & mask).to_be_bytes())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.v6.min(128)))
                    .unwrap_or(0);
                IpAddr::from((a.to_bits() & mask).to_be_bytes())
            }
        }
    }
}

/// Counters per row of a [`SourceCounts`].
const ROW: usize = 16_384;

/// Connections or sessions open per source, for one listener (see the module documentation).
pub struct SourceCounts {
    rows: [Box<[AtomicU32]>; 2],
    hasher: std::hash::RandomState,
}

impl Default for SourceCounts {
    fn default() -> Self {
        let row = || (0..ROW).map(|_| AtomicU32::new(0)).collect();
        Self {
            rows: [row(), row()],
            hasher: std::hash::RandomState::new(),
        }
    }
}

impl std::fmt::Debug for SourceCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceCounts")
            .field("rows", &self.rows.len())
            .field("counters", &ROW)
            .finish_non_exhaustive()
    }
}

/// A source that already has as many connections or sessions as its limit allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtLimit;

/// The two counters of one source, held for as long as its connection or session lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceSlot([u32; 2]);

impl SourceCounts {
    /// The counters of `source` (an address already masked to its prefix).
    fn slots(&self, source: IpAddr) -> [usize; 2] {
        let mut h = self.hasher.build_hasher();
        source.hash(&mut h);
        let h = std::hash::Hasher::finish(&h);
        [(h as usize) % ROW, ((h >> 32) as usize) % ROW]
    }

    /// Counts one more for `source` unless it already has `limit`: its slot to give back
    /// ([`Self::release`]), or `None` when there is no limit (`0`: nothing counted).
    ///
    /// # Errors
    /// [`AtLimit`]: refused, nothing counted.
    pub fn add(&self, source: IpAddr, limit: u32) -> Result<Option<SourceSlot>, AtLimit> {
        if limit == 0 {
            return Ok(None);
        }
        let slots = self.slots(source);
        let before: [u32; 2] =
            std::array::from_fn(|r| self.rows[r][slots[r]].fetch_add(1, Ordering::Relaxed));
        // Both counters count this source's own entries (and any colliding source's): the
        // smaller one is the closer bound.
        if before[0].min(before[1]) >= limit {
            for (r, &s) in slots.iter().enumerate() {
                self.rows[r][s].fetch_sub(1, Ordering::Relaxed);
            }
            return Err(AtLimit);
        }
        Ok(Some(SourceSlot(slots.map(|s| s as u32))))
    }

    /// Gives back what [`Self::add`] counted.
    pub fn release(&self, slot: SourceSlot) {
        for (r, &s) in slot.0.iter().enumerate() {
            self.rows[r][s as usize].fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The count for `source` (at least its own entries; more when it collides in both
    /// rows).
    pub fn count(&self, source: IpAddr) -> u32 {
        let slots = self.slots(source);
        (0..2)
            .map(|r| self.rows[r][slots[r]].load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }
}

/// A source's counted entry in a listener's [`SourceCounts`], given back on drop.
#[derive(Debug)]
pub(crate) struct SourceGuard {
    counts: Arc<crate::ListenerStats>,
    slot: SourceSlot,
}

impl SourceGuard {
    /// Counts one more entry for `source` in `stats`' counts (see [`SourceCounts::add`]):
    /// `Err` when refused, `Ok(None)` when there is no limit.
    pub(crate) fn add(
        stats: &Arc<crate::ListenerStats>,
        source: IpAddr,
        limit: u32,
    ) -> Result<Option<Self>, AtLimit> {
        Ok(stats.sources.add(source, limit)?.map(|slot| Self {
            counts: Arc::clone(stats),
            slot,
        }))
    }
}

impl Drop for SourceGuard {
    fn drop(&mut self) {
        self.counts.sources.release(self.slot);
    }
}

/// New sessions per second with a burst: a token bucket, refilled continuously, handed the
/// time. Counted in billionths of a token, so that refills add up exactly. A rate of 0 is no
/// limit.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: u32,
    burst: u32,
    nanotokens: u64,
    last: Option<Instant>,
}

/// Billionths of a token per token.
const NANO: u64 = 1_000_000_000;

impl TokenBucket {
    /// `rate` tokens a second, at most `burst` (at least 1) saved up; it starts full.
    pub fn new(rate: u32, burst: u32) -> Self {
        let burst = burst.max(1);
        Self {
            rate,
            burst,
            nanotokens: u64::from(burst) * NANO,
            last: None,
        }
    }

    /// Changes the rate and burst (a reload); the tokens saved are kept, up to the new burst.
    pub fn reconfigure(&mut self, rate: u32, burst: u32) {
        self.rate = rate;
        self.burst = burst.max(1);
        self.nanotokens = self.nanotokens.min(u64::from(self.burst) * NANO);
    }

    /// Takes a token at `now`: whether there was one.
    pub fn take(&mut self, now: Instant) -> bool {
        if self.rate == 0 {
            return true;
        }
        let elapsed = self
            .last
            .map_or(Duration::ZERO, |l| now.saturating_duration_since(l));
        self.last = Some(now);
        // nanoseconds × tokens per second = billionths of a token
        let refill = u64::try_from(elapsed.as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_mul(u64::from(self.rate));
        self.nanotokens = self
            .nanotokens
            .saturating_add(refill)
            .min(u64::from(self.burst) * NANO);
        if self.nanotokens >= NANO {
            self.nanotokens -= NANO;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_never_hands_out_more_than_its_capacity() {
        let b = Arc::new(DescriptorBudget::new(5));
        let two = b.take(2).unwrap();
        let three = b.take(3).unwrap();
        assert!(b.take(1).is_none());
        assert_eq!((b.used(), b.refused()), (5, 1));
        drop(two);
        assert!(b.take(3).is_none(), "2 free, 3 asked");
        let again = b.take(2).unwrap();
        assert_eq!((b.used(), b.peak(), b.refused()), (5, 5, 2));
        // a smaller capacity keeps what is held and refuses what is new
        b.set_capacity(3);
        assert!(b.take(1).is_none());
        drop(three);
        assert_eq!(b.used(), 2);
        let one = b.take(1).unwrap();
        assert_eq!(one.count(), 1);
        drop((again, one));
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn the_budget_holds_under_threads() {
        let b = Arc::new(DescriptorBudget::new(1000));
        let held: Vec<Vec<Descriptors>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let b = Arc::clone(&b);
                    s.spawn(move || (0..1000).filter_map(|_| b.take(1)).collect::<Vec<_>>())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let total: usize = held.iter().map(Vec::len).sum();
        assert_eq!(total, 1000);
        assert_eq!(b.refused(), 3000);
        drop(held);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn sources_are_masked_to_their_prefix() {
        let p = SourcePrefixes { v4: 24, v6: 48 };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(p.source(ip("192.0.2.77")), ip("192.0.2.0"));
        assert_eq!(p.source(ip("::ffff:192.0.2.77")), ip("192.0.2.0"));
        assert_eq!(p.source(ip("2001:db8:1:2:3::4")), ip("2001:db8:1::"));
        let d = SourcePrefixes::default();
        assert_eq!(d.source(ip("192.0.2.77")), ip("192.0.2.77"));
        assert_eq!(d.source(ip("2001:db8:1:2:3::4")), ip("2001:db8:1:2::"));
        let all = SourcePrefixes { v4: 0, v6: 0 };
        assert_eq!(all.source(ip("192.0.2.77")), ip("0.0.0.0"));
        assert_eq!(all.source(ip("2001:db8::1")), ip("::"));
    }

    #[test]
    fn a_source_at_its_limit_is_refused_and_others_are_not() {
        let c = SourceCounts::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let mut held: Vec<SourceSlot> = (0..3).map(|_| c.add(a, 3).unwrap().unwrap()).collect();
        assert!(c.add(a, 3).is_err());
        assert_eq!(c.count(a), 3);
        // 2,000 other sources, one entry each: none refused at a limit of 3 (a source is
        // refused in another's place only when both of its counters are crowded: here about
        // one chance in a billion each)
        let others: Vec<SourceSlot> = (0..2_000u32)
            .map(|i| {
                let ip = IpAddr::from((0x0a00_0000 + i).to_be_bytes());
                c.add(ip, 3).expect("a source of its own").unwrap()
            })
            .collect();
        for s in others {
            c.release(s);
        }
        assert_eq!(c.count(a), 3, "the others gave theirs back");
        c.release(held.pop().unwrap());
        assert!(c.add(a, 3).is_ok(), "one given back: one more allowed");
        // no limit: nothing counted
        assert_eq!(c.add(a, 0), Ok(None));
        assert_eq!(c.count(a), 3);
    }

    #[test]
    fn the_bucket_allows_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut b = TokenBucket::new(1000, 10);
        let first: usize = (0..100).filter(|_| b.take(t0)).count();
        assert_eq!(first, 10, "the burst, at one instant");
        // 1,000 a second: one per millisecond after that
        assert!(!b.take(t0 + ms / 2));
        assert!(b.take(t0 + ms));
        assert!(!b.take(t0 + ms));
        let mut granted = 0;
        for i in 1..=1000u32 {
            granted += usize::from(b.take(t0 + ms + i * ms));
        }
        assert_eq!(granted, 1000);
        // a quiet second saves no more than the burst
        let later = t0 + Duration::from_secs(10);
        assert_eq!((0..100).filter(|_| b.take(later)).count(), 10);
        // rate 0: no limit
        let mut free = TokenBucket::new(0, 1);
        assert!((0..10_000).all(|_| free.take(t0)));
        // a reload keeps what was saved, up to the new burst
        b.reconfigure(1000, 5);
        assert_eq!((0..100).filter(|_| b.take(later + 100 * ms)).count(), 5);
    }
}
