//! Power of two choices (Mitzenmacher): draw two distinct candidates at random in proportion to
//! their weights, send the request to the one with fewer active connections per unit of weight.
//! O(1) expected: an alias table (Vose) makes each weighted draw two random numbers.

use crate::peer::check_peers;
use crate::rng::{Rng, weighted_candidate};
use crate::{NoUpstream, Peer, PeerView, Request, SchedError, Schedule};

/// Draws tried per choice before falling back to a weighted pass over the pool (many unusable
/// peers).
const DRAW_ATTEMPTS: usize = 4;

/// P2C over a pool: the peers and an alias table of their weights (immutable, shared).
#[derive(Debug, Clone)]
pub struct P2c {
    peers: Vec<Peer>,
    /// Total weight W: a draw is a column `i` and a number `r < W`.
    total: u64,
    /// Column `i` keeps `i` when `r < threshold[i]`, else gives `alias[i]`.
    threshold: Vec<u64>,
    alias: Vec<u32>,
}

/// One worker's state: its random number generator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct P2cState {
    rng: Rng,
    fallbacks: u64,
}

impl P2cState {
    /// Draws that fell back to a weighted pass over the pool.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks
    }
}

impl P2c {
    /// P2C over `peers` (weights ≥ 1, unique ids).
    ///
    /// # Errors
    /// [`SchedError::ZeroWeight`], [`SchedError::DuplicateId`], [`SchedError::TooManyPeers`].
    pub fn new(peers: &[Peer]) -> Result<Self, SchedError> {
        check_peers(peers)?;
        let (threshold, alias) = alias_table(peers);
        Ok(Self {
            peers: peers.to_vec(),
            total: peers.iter().map(|p| u64::from(p.weight)).sum(),
            threshold,
            alias,
        })
    }

    /// One weighted draw of a candidate other than `exclude`.
    fn draw<V: PeerView + ?Sized>(
        &self,
        state: &mut P2cState,
        req: &Request<'_, V>,
        exclude: Option<usize>,
    ) -> Option<usize> {
        let n = self.peers.len() as u64;
        for _ in 0..DRAW_ATTEMPTS {
            let column = state.rng.below(n) as usize;
            let r = state.rng.below(self.total);
            let i = match self.threshold.get(column) {
                Some(&t) if r < t => column,
                Some(_) => self.alias.get(column).map_or(column, |&a| a as usize),
                None => return None,
            };
            if Some(i) != exclude && req.candidate(i) {
                return Some(i);
            }
        }
        state.fallbacks += 1;
        weighted_candidate(&self.peers, &mut state.rng, req, exclude)
    }
}

impl Schedule for P2c {
    type State = P2cState;

    fn peers(&self) -> &[Peer] {
        &self.peers
    }

    fn new_state(&self, seed: u64) -> P2cState {
        P2cState {
            rng: Rng::new(seed),
            fallbacks: 0,
        }
    }

    /// Two weighted draws of distinct candidates; the lower `active / weight` wins (compared by
    /// cross-multiplying), the first drawn on a tie. One candidate only → that one.
    fn pick<V: PeerView + ?Sized>(
        &self,
        state: &mut P2cState,
        req: &Request<'_, V>,
    ) -> Result<usize, NoUpstream> {
        let a = self.draw(state, req, None).ok_or(NoUpstream)?;
        let Some(b) = self.draw(state, req, Some(a)) else {
            return Ok(a);
        };
        let (wa, wb) = (
            u64::from(self.peers[a].weight),
            u64::from(self.peers[b].weight),
        );
        let (ca, cb) = (u64::from(req.view.active(a)), u64::from(req.view.active(b)));
        Ok(if cb * wa < ca * wb { b } else { a })
    }
}

/// Vose's alias method in integers: column `i` holds `n·w_i` units out of `W` for itself and
/// the rest for its alias, so `P(i) = w_i / W` exactly.
fn alias_table(peers: &[Peer]) -> (Vec<u64>, Vec<u32>) {
    let n = peers.len() as u64;
    let total: u64 = peers.iter().map(|p| u64::from(p.weight)).sum();
    let mut scaled: Vec<u64> = peers.iter().map(|p| u64::from(p.weight) * n).collect();
    let mut threshold = vec![total; peers.len()];
    let mut alias: Vec<u32> = (0..peers.len() as u32).collect();
    let (mut small, mut large): (Vec<usize>, Vec<usize>) =
        (0..peers.len()).partition(|&i| scaled[i] < total);
    while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
        threshold[s] = scaled[s];
        alias[s] = l as u32;
        scaled[l] -= total - scaled[s];
        if scaled[l] < total {
            large.pop();
            small.push(l);
        }
    }
    (threshold, alias)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each peer's probability, summed over columns, is exactly `w_i / W`.
    #[test]
    fn alias_table_is_exact() {
        let peers: Vec<Peer> = [5u32, 1, 1, 9, 3, 3]
            .iter()
            .zip(0..)
            .map(|(&w, i)| Peer::new(i, format!("p{i}"), w))
            .collect();
        let (threshold, alias) = alias_table(&peers);
        let total: u64 = 22;
        let mut mass = vec![0u64; peers.len()];
        for (i, (&t, &a)) in threshold.iter().zip(&alias).enumerate() {
            mass[i] += t;
            mass[a as usize] += total - t;
        }
        // Each column is worth `total`; n columns; peer i must get n·w_i of the n·total.
        let n = peers.len() as u64;
        for (p, m) in peers.iter().zip(&mass) {
            assert_eq!(*m, n * u64::from(p.weight), "{p:?}");
        }
    }
}
