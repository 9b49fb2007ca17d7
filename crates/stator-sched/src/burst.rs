//! Tengine's second defect, simulated: one peer's weight goes up at a reload, every worker
//! renews its scheduler state, and with nginx's SWRR every worker's first pick is that peer (the
//! heaviest), so for a moment it takes a share far above its weight. VNSWRR's random start per
//! worker spreads the first picks over the ring instead. The same function serves the unit
//! test, `stator bench sched` and the proxy's end-to-end test (which compares its measured
//! share with [`steady_share`]).

use std::sync::Arc;

use crate::{Algorithm, AllUsable, Peer, Picker, Request, SchedError, Scheduler};

/// The scenario: `backends` peers of weight 1, `workers` workers picking in turn; at the reload
/// peer `changed` goes from `old_weight` to `new_weight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BurstParams {
    /// Peers in the pool.
    pub backends: usize,
    /// Workers (processes or threads), each with its own scheduler state.
    pub workers: usize,
    /// Picks counted after the reload, across all workers (worker `i mod workers` makes pick i).
    pub picks: usize,
    /// Picks made before the reload (so the old state is not fresh).
    pub warmup: usize,
    /// Index of the peer whose weight changes.
    pub changed: usize,
    /// Its weight before the reload.
    pub old_weight: u32,
    /// Its weight after.
    pub new_weight: u32,
    /// Seed of the workers' randomness.
    pub seed: u64,
}

impl Default for BurstParams {
    /// The case: 100 backends, 4 workers, the first 1,000 picks, weight 1 → 2.
    fn default() -> Self {
        Self {
            backends: 100,
            workers: 4,
            picks: 1000,
            warmup: 1000,
            changed: 50,
            old_weight: 1,
            new_weight: 2,
            seed: 1,
        }
    }
}

/// What one algorithm did after the reload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurstFigures {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Picks of the changed peer among the first `picks`.
    pub hits: usize,
    /// Picks counted.
    pub picks: usize,
    /// `hits / picks`.
    pub share: f64,
    /// Picks of the changed peer among the workers' first picks after the reload (one each).
    pub first_round_hits: usize,
    /// Workers (the size of the first round).
    pub workers: usize,
}

impl BurstFigures {
    /// The share as a multiple of the steady share (≤ 2 is the bound).
    pub fn ratio_to(&self, steady: f64) -> f64 {
        self.share / steady
    }
}

/// Both algorithms in the same scenario.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurstReport {
    /// The scenario.
    pub params: BurstParams,
    /// The changed peer's share of picks at its new weight, in the long run.
    pub steady_share: f64,
    /// Tengine's VNSWRR (random start per worker).
    pub vnswrr: BurstFigures,
    /// nginx's SWRR (every worker restarts from zero current weights).
    pub swrr: BurstFigures,
}

/// The long-run share of peer `index` under weights `weights`: its weight over the total.
pub fn steady_share(weights: &[u32], index: usize) -> f64 {
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    match weights.get(index) {
        Some(&w) if total > 0 => f64::from(w) / total as f64,
        _ => 0.0,
    }
}

/// Runs the scenario for VNSWRR and SWRR.
///
/// # Errors
/// [`SchedError`] if a pool cannot be built: a weight of 0, or more than
/// [`crate::MAX_PEERS`] backends.
pub fn weight_change_burst(params: &BurstParams) -> Result<BurstReport, SchedError> {
    let weights = |changed_weight: u32| -> Vec<u32> {
        (0..params.backends)
            .map(|i| {
                if i == params.changed {
                    changed_weight
                } else {
                    1
                }
            })
            .collect()
    };
    let after = weights(params.new_weight);
    Ok(BurstReport {
        params: *params,
        steady_share: steady_share(&after, params.changed),
        vnswrr: run(
            Algorithm::Vnswrr,
            params,
            &weights(params.old_weight),
            &after,
        )?,
        swrr: run(Algorithm::Swrr, params, &weights(params.old_weight), &after)?,
    })
}

/// One algorithm through warm-up, reload and the counted picks.
fn run(
    algorithm: Algorithm,
    params: &BurstParams,
    before: &[u32],
    after: &[u32],
) -> Result<BurstFigures, SchedError> {
    let pool = |weights: &[u32]| -> Vec<Peer> {
        weights
            .iter()
            .zip(0u32..)
            .map(|(&w, i)| Peer::new(i, format!("backend-{i}"), w))
            .collect()
    };
    let old = Arc::new(Scheduler::new(algorithm, &pool(before))?);
    let new = Arc::new(Scheduler::new(algorithm, &pool(after))?);
    let workers = params.workers.max(1);
    let mut seeds = crate::Rng::new(params.seed);
    let mut ws: Vec<Picker> = (0..workers)
        .map(|_| Picker::new(Arc::clone(&old), seeds.next_u64()))
        .collect();
    let req = Request::new(&AllUsable);
    for i in 0..params.warmup {
        // Every pool has at least one usable peer here, so a pick cannot fail; a failure
        // would only lower the counts below.
        let _ = ws[i % workers].pick(&req);
    }
    for w in &mut ws {
        w.sync(&new);
    }
    let (mut hits, mut first_round_hits) = (0, 0);
    for i in 0..params.picks {
        if ws[i % workers].pick(&req) == Ok(params.changed) {
            hits += 1;
            if i < workers {
                first_round_hits += 1;
            }
        }
    }
    Ok(BurstFigures {
        algorithm,
        hits,
        picks: params.picks,
        share: if params.picks == 0 {
            0.0
        } else {
            hits as f64 / params.picks as f64
        },
        first_round_hits,
        workers,
    })
}
