//! Tengine's virtual-node smooth weighted round-robin (VNSWRR): nginx's SWRR order precomputed
//! into a ring of TW/gcd virtual nodes, walked by each worker from its own random start. A pick
//! is O(1): read the next node, skip it if its peer is down, draining or already tried.
//!
//! **Sharing and the lazy build.** Tengine builds the ring per worker process, lazily: N nodes
//! at start-up, the next `min(N, remaining)` when the worker's cursor reaches the end of what is
//! built, so no request pays for the whole ring. Each batch still costs O(N) per node, O(N²)
//! per batch, paid by the request that reaches the end (Tengine later added `max_init` to cap
//! that spike), and every worker holds and builds its own copy. Stator builds the whole ring
//! once per configuration, when the scheduler is constructed (on the control thread, off every
//! request), and shares it read-only between workers behind the `Arc` the proxy swaps: no
//! lock, no atomic, no allocation and no build work on the pick path. What it keeps of the lazy
//! build is its observable rule, per worker: a worker's walk starts with N nodes visible from
//! its start and sees `min(N, remaining)` more each time its cursor reaches the end of what it
//! sees ([`VnswrrState::built`]). Because the nodes already exist, the random start can be
//! anywhere in the ring (Tengine's is among the first N). After k picks a worker has at most
//! k + N nodes visible: a batch is `min(N, remaining, k + N − visible)`, where the third term
//! binds only when skips carried the cursor faster than one node per pick; when it is 0 the
//! cursor wraps to the start of the visible part, as Tengine's always does in its skip loop.
//!
//! **Down peers.** As Tengine's readers note, the ring keeps every peer, usable or not; a pick
//! skips unusable and tried ones. Many unusable peers make skipping degenerate toward O(ring):
//! a pick therefore probes at most `min(visible, N)` nodes and then falls back to one weighted
//! random choice among the usable, untried peers (two passes, O(N), allocation-free, counted
//! in [`VnswrrState::fallbacks`]). The worst pick is O(N), like SWRR's every pick.
//!
//! **Building.** The ring is exactly nginx's SWRR over the reduced weights, every peer usable.
//! Peers of equal weight are served round-robin among themselves by SWRR (their current
//! weights differ only by whole rounds), so the build keeps one candidate per distinct weight
//! and costs O(TW/gcd × distinct weights) instead of O(TW/gcd × N).

use crate::peer::check_peers;
use crate::rng::{Rng, weighted_candidate};
use crate::{NoUpstream, Peer, PeerView, Request, SchedError, Schedule};

/// The most virtual nodes a VNSWRR ring may have (4 MiB of `u32`): weights whose total ÷ gcd
/// exceeds it are rejected at build time ([`SchedError::RingTooLarge`]).
pub const MAX_VIRTUAL_NODES: u64 = 1 << 20;

/// VNSWRR over a pool: the peers and the precomputed ring (immutable, shared by all workers).
#[derive(Debug, Clone)]
pub struct Vnswrr {
    peers: Vec<Peer>,
    ring: Box<[u32]>,
    gcd: u32,
}

/// One worker's walk over the shared ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VnswrrState {
    /// Ring position of this worker's first node (random).
    start: u32,
    /// Next node to consider, relative to `start`, in `0..=visible`.
    offset: u32,
    /// Nodes visible to this walk from `start` (Tengine's lazily built count).
    visible: u32,
    /// Picks made.
    picks: u64,
    /// Picks that fell back to a weighted random choice after `min(visible, N)` probes.
    fallbacks: u64,
    rng: Rng,
}

impl VnswrrState {
    /// The ring position this worker started at.
    pub fn start(&self) -> u32 {
        self.start
    }

    /// Virtual nodes this worker's walk has built so far (visible from its start): N at first,
    /// `min(N, remaining)` more each time the cursor reaches the end, at most picks + N.
    pub fn built(&self) -> u32 {
        self.visible
    }

    /// Picks made with this state.
    pub fn picks(&self) -> u64 {
        self.picks
    }

    /// Picks that found no candidate within `min(visible, N)` probes and fell back to a weighted
    /// random choice (many down or tried peers).
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks
    }
}

/// Virtual nodes VNSWRR needs for `weights`: their total divided by their greatest common
/// divisor (0 for no peers). The configuration can check it against [`MAX_VIRTUAL_NODES`].
pub fn vnswrr_ring_len(weights: &[u32]) -> u64 {
    let g = weights.iter().copied().fold(0, gcd);
    if g == 0 {
        return 0;
    }
    weights.iter().map(|&w| u64::from(w / g)).sum()
}

impl Vnswrr {
    /// VNSWRR over `peers` (weights ≥ 1, unique ids); builds the whole ring.
    ///
    /// # Errors
    /// [`SchedError::ZeroWeight`], [`SchedError::DuplicateId`], [`SchedError::TooManyPeers`],
    /// [`SchedError::RingTooLarge`].
    pub fn new(peers: &[Peer]) -> Result<Self, SchedError> {
        check_peers(peers)?;
        let weights: Vec<u32> = peers.iter().map(|p| p.weight).collect();
        let nodes = vnswrr_ring_len(&weights);
        if nodes > MAX_VIRTUAL_NODES {
            return Err(SchedError::RingTooLarge {
                nodes,
                max: MAX_VIRTUAL_NODES,
            });
        }
        let g = weights.iter().copied().fold(0, gcd).max(1);
        let reduced: Vec<u32> = weights.iter().map(|&w| w / g).collect();
        Ok(Self {
            peers: peers.to_vec(),
            ring: build_ring(&reduced).into_boxed_slice(),
            gcd: g,
        })
    }

    /// The ring: peer indices in nginx's SWRR order over the reduced weights, one period.
    pub fn ring(&self) -> &[u32] {
        &self.ring
    }

    /// The greatest common divisor the weights were reduced by.
    pub fn gcd(&self) -> u32 {
        self.gcd
    }
}

impl Schedule for Vnswrr {
    type State = VnswrrState;

    fn peers(&self) -> &[Peer] {
        &self.peers
    }

    /// A walk from a random ring position drawn from `seed`, N nodes visible.
    fn new_state(&self, seed: u64) -> VnswrrState {
        let mut rng = Rng::new(seed);
        let len = self.ring.len() as u64;
        // Both fit in u32: the ring holds at most MAX_VIRTUAL_NODES nodes.
        let start = rng.below(len) as u32;
        let visible = len.min(self.peers.len() as u64) as u32;
        VnswrrState {
            start,
            offset: 0,
            visible,
            picks: 0,
            fallbacks: 0,
            rng,
        }
    }

    fn pick<V: PeerView + ?Sized>(
        &self,
        state: &mut VnswrrState,
        req: &Request<'_, V>,
    ) -> Result<usize, NoUpstream> {
        state.picks += 1;
        let len = self.ring.len() as u32;
        let n = self.peers.len() as u32;
        for _ in 0..state.visible.min(n) {
            if state.offset >= state.visible {
                // The cursor reached the end of what is built: build the next batch (bounded
                // by picks + N), or wrap to the start once the whole ring is built.
                let room = (state.picks + u64::from(n)).saturating_sub(u64::from(state.visible));
                let batch = u64::from(n.min(len - state.visible)).min(room) as u32;
                if batch == 0 {
                    state.offset = 0;
                } else {
                    state.visible += batch;
                }
            }
            let mut pos = state.start + state.offset;
            if pos >= len {
                pos -= len;
            }
            state.offset += 1;
            if let Some(&peer) = self.ring.get(pos as usize) {
                let peer = peer as usize;
                if req.candidate(peer) {
                    return Ok(peer);
                }
            }
        }
        state.fallbacks += 1;
        weighted_candidate(&self.peers, &mut state.rng, req, None).ok_or(NoUpstream)
    }
}

/// Greatest common divisor (`gcd(0, x) = x`).
fn gcd(a: u32, b: u32) -> u32 {
    let (mut a, mut b) = (a, b);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// One weight class of the build: the peers of that weight in pool order, the next of them to
/// win, and how many full rounds the class has made.
struct Class {
    weight: i64,
    members: Vec<u32>,
    next: usize,
    rounds: i64,
}

/// nginx's SWRR over `weights` (all usable) for one period of Σ weights picks.
///
/// At step t (1-based) a peer's current weight is `t·w − TW·picks`; within a class of equal
/// weights the largest is the member with the fewest picks and, on a tie, the first — so the
/// class's candidate is `members[next]` with `rounds` picks, and the step compares one
/// candidate per class, breaking ties by pool index exactly as nginx's strict `>` does.
fn build_ring(weights: &[u32]) -> Vec<u32> {
    let total: i64 = weights.iter().map(|&w| i64::from(w)).sum();
    let mut classes: Vec<Class> = Vec::new();
    let mut order: Vec<(u32, u32)> = weights.iter().copied().zip(0..).collect();
    order.sort_unstable();
    for (w, i) in order {
        match classes.last_mut() {
            Some(c) if c.weight == i64::from(w) => c.members.push(i),
            _ => classes.push(Class {
                weight: i64::from(w),
                members: vec![i],
                next: 0,
                rounds: 0,
            }),
        }
    }
    let mut ring = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    for t in 1..=total {
        let mut best: Option<(usize, i64, u32)> = None;
        for (ci, c) in classes.iter().enumerate() {
            let value = t * c.weight - total * c.rounds;
            let index = c.members[c.next];
            let better = match best {
                None => true,
                Some((_, v, idx)) => value > v || (value == v && index < idx),
            };
            if better {
                best = Some((ci, value, index));
            }
        }
        let Some((ci, _, index)) = best else { break };
        ring.push(index);
        let c = &mut classes[ci];
        c.next += 1;
        if c.next == c.members.len() {
            c.next = 0;
            c.rounds += 1;
        }
    }
    ring
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swrr_sequence;

    #[test]
    fn ring_is_swrr_including_equal_weight_classes() {
        for weights in [
            vec![5, 1, 1],
            vec![1, 2, 3],
            vec![3, 1, 3, 1, 2],
            vec![1, 1, 1, 1],
            vec![7],
        ] {
            let total: u32 = weights.iter().sum();
            let ring: Vec<usize> = build_ring(&weights).iter().map(|&i| i as usize).collect();
            assert_eq!(ring, swrr_sequence(&weights, total as usize), "{weights:?}");
        }
    }

    #[test]
    fn ring_len_is_total_over_gcd() {
        assert_eq!(vnswrr_ring_len(&[100, 200, 400]), 7);
        assert_eq!(vnswrr_ring_len(&[6, 4]), 5);
        assert_eq!(vnswrr_ring_len(&[]), 0);
    }
}
