//! Weighted least-connections, as nginx's `least_conn`: the candidate with the fewest active
//! connections per unit of weight wins; among equals, a smooth weighted round-robin step over the
//! tied peers decides (so an idle pool behaves like SWRR, not like "always the first"). O(N).

use crate::peer::check_peers;
use crate::{NoUpstream, Peer, PeerView, Request, SchedError, Schedule};

/// Least-connections over a pool (immutable, shared).
#[derive(Debug, Clone)]
pub struct LeastConn {
    peers: Vec<Peer>,
    weights: Vec<i64>,
}

/// One worker's tie-breaking state: SWRR current weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeastConnState {
    current: Vec<i64>,
}

impl LeastConn {
    /// Least-connections over `peers` (weights ≥ 1, unique ids).
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

impl Schedule for LeastConn {
    type State = LeastConnState;

    fn peers(&self) -> &[Peer] {
        &self.peers
    }

    fn new_state(&self, _seed: u64) -> LeastConnState {
        LeastConnState {
            current: vec![0; self.peers.len()],
        }
    }

    /// Pass 1 finds the least `active / weight` (compared by cross-multiplying, no division);
    /// pass 2 runs one SWRR step over the candidates with exactly that ratio.
    fn pick<V: PeerView + ?Sized>(
        &self,
        state: &mut LeastConnState,
        req: &Request<'_, V>,
    ) -> Result<usize, NoUpstream> {
        // (index, active, weight) of the least loaded candidate so far. Products of two u32
        // fit in u64.
        let mut least: Option<(usize, u64, u64)> = None;
        for (i, &w) in self.weights.iter().enumerate() {
            if !req.candidate(i) {
                continue;
            }
            let (a, w) = (u64::from(req.view.active(i)), w as u64);
            if least.is_none_or(|(_, la, lw)| a * lw < la * w) {
                least = Some((i, a, w));
            }
        }
        let (first, la, lw) = least.ok_or(NoUpstream)?;
        // Pass 1 kept the first peer with the least ratio, so ties start there (as nginx's).
        let mut best: Option<usize> = None;
        let mut best_cw = i64::MIN;
        let mut total = 0i64;
        let tail = state
            .current
            .iter_mut()
            .zip(&self.weights)
            .enumerate()
            .skip(first);
        for (i, (cw, &w)) in tail {
            if !req.candidate(i) || u64::from(req.view.active(i)) * lw != la * w as u64 {
                continue;
            }
            *cw += w;
            total += w;
            if best.is_none() || *cw > best_cw {
                best = Some(i);
                best_cw = *cw;
            }
        }
        // Shared (atomic) counts may change between the passes; if no peer has the least ratio
        // any more, the one pass 1 found is still a fine answer.
        let Some(best) = best else { return Ok(first) };
        if let Some(cw) = state.current.get_mut(best) {
            *cw -= total;
        }
        Ok(best)
    }
}
