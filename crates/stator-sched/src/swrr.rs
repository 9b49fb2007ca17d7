//! nginx's smooth weighted round-robin (SWRR), pick by pick as `ngx_http_upstream_get_peer`
//! defines it: O(N) per pick. Kept for comparison (the benchmark, the weight-change burst) and
//! for small pools; VNSWRR precomputes the same order.

use crate::peer::check_peers;
use crate::{NoUpstream, Peer, PeerView, Request, SchedError, Schedule};

/// Smooth weighted round-robin over a pool (the immutable, shared part: the peers).
#[derive(Debug, Clone)]
pub struct Swrr {
    peers: Vec<Peer>,
    weights: Vec<i64>,
}

/// One worker's SWRR state: a current weight (`cw`) per peer, all 0 at the start — which is
/// why every worker's first pick after a reload is the heaviest peer (Tengine's second defect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwrrState {
    current: Vec<i64>,
}

impl Swrr {
    /// SWRR over `peers` (weights ≥ 1, unique ids).
    ///
    /// # Errors
    /// [`SchedError::ZeroWeight`], [`SchedError::DuplicateId`], [`SchedError::TooManyPeers`].
    pub fn new(peers: &[Peer]) -> Result<Self, SchedError> {
        check_peers(peers)?;
        Ok(Self {
            peers: peers.to_vec(),
            weights: peers.iter().map(|p| i64::from(p.weight)).collect(),
        })
    }
}

impl Schedule for Swrr {
    type State = SwrrState;

    fn peers(&self) -> &[Peer] {
        &self.peers
    }

    fn new_state(&self, _seed: u64) -> SwrrState {
        SwrrState {
            current: vec![0; self.peers.len()],
        }
    }

    /// One nginx SWRR step over the candidates (usable, not tried): every candidate's `cw` grows
    /// by its weight, the largest `cw` wins (the first in pool order on a tie), and the winner's
    /// `cw` drops by the candidates' total weight. Non-candidates keep their `cw`, as in nginx.
    /// (nginx's `effective_weight`, lowered on failures, is not modelled: Stator's health
    /// checks take a failing peer out instead.)
    fn pick<V: PeerView + ?Sized>(
        &self,
        state: &mut SwrrState,
        req: &Request<'_, V>,
    ) -> Result<usize, NoUpstream> {
        let mut best: Option<usize> = None;
        let mut best_cw = i64::MIN;
        let mut total = 0i64;
        for (i, (cw, &w)) in state.current.iter_mut().zip(&self.weights).enumerate() {
            if !req.candidate(i) {
                continue;
            }
            *cw += w;
            total += w;
            if best.is_none() || *cw > best_cw {
                best = Some(i);
                best_cw = *cw;
            }
        }
        let best = best.ok_or(NoUpstream)?;
        if let Some(cw) = state.current.get_mut(best) {
            *cw -= total;
        }
        Ok(best)
    }
}

/// The SWRR order of `weights` for `len` picks from a fresh state with every peer usable: the
/// definition VNSWRR's ring is built from and tested against. O(len × N).
pub fn swrr_sequence(weights: &[u32], len: usize) -> Vec<usize> {
    let mut current = vec![0i64; weights.len()];
    let total: i64 = weights.iter().map(|&w| i64::from(w)).sum();
    let mut out = Vec::with_capacity(len);
    for _ in 0..len {
        let mut best = None;
        let mut best_cw = i64::MIN;
        for (i, (cw, &w)) in current.iter_mut().zip(weights).enumerate() {
            *cw += i64::from(w);
            if best.is_none() || *cw > best_cw {
                best = Some(i);
                best_cw = *cw;
            }
        }
        let Some(best) = best else { break };
        current[best] -= total;
        out.push(best);
    }
    out
}
