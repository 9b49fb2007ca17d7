//! Changing the live workers of a table with as little disruption as balance allows.
//!
//! Maglev's table (Pseudocode 1) is rebuilt from scratch when the backend set changes, and a
//! rebuild also moves a few slots between backends that did not change (the paper's Figure 12).
//! For steering that would move clients whose worker is still there, losing their session
//! state. So after the first table, changes are made in place, with Maglev's own preferences:
//!
//! 1. *Departures.* The slots of workers that left (and empty slots) are free. Until none is
//!    left, the live worker with the fewest slots (ties in name order) claims its most
//!    preferred free slot — the next free slot of its permutation `(offset + j·skip) mod M`.
//!    From an empty table this is exactly Pseudocode 1 (everyone has the fewest in turn).
//! 2. *Arrivals.* While the worker that just joined with the fewest slots has at least two fewer
//!    than the busiest live worker, it claims its most preferred slot among those held by a
//!    busiest worker.
//!
//! A slot therefore changes only when its worker left or its new worker joined, and the live
//! workers' shares stay within one slot of each other (given they were before: departures fill
//! the lowest first, arrivals take from the highest).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use stator_abi::{STATOR_RP_MAX_WORKERS, STATOR_RP_NO_WORKER};
use stator_hash::MaglevPermutation;

/// A worker's Maglev permutation and its position in it.
struct Walker {
    perm: MaglevPermutation,
    next: u32,
}

impl Walker {
    fn new(worker: u32, size: u32) -> Self {
        Self {
            perm: MaglevPermutation::from_name(&name(worker), size, worker, 1),
            next: 0,
        }
    }

    /// The next slot of the permutation accepted by `eligible`, advancing past it; `None` once
    /// the whole permutation (every slot) has been walked.
    fn claim(&mut self, size: u32, eligible: impl Fn(u32) -> bool) -> Option<u32> {
        while self.next < size {
            let slot = self.perm.nth(self.next, size);
            self.next += 1;
            if eligible(slot) {
                return Some(slot);
            }
        }
        None
    }
}

/// The Maglev name of a worker (what its permutation is derived from).
pub(crate) fn name(worker: u32) -> String {
    format!("worker-{worker}")
}

/// `live` in turn order: by name, as `MaglevTable::build` orders backends.
fn turn_order(live: &[u32]) -> Vec<u32> {
    let mut order = live.to_vec();
    order.sort_by_cached_key(|&w| name(w));
    order
}

/// The table after the live set changes from `old_live` to `live` (both sorted ascending,
/// deduplicated): `slots` is rewritten in place as the module documentation describes.
pub(crate) fn rebalance(slots: &mut [u32], old_live: &[u32], live: &[u32]) {
    let size = slots.len() as u32;
    let is_live = |w: u32| live.binary_search(&w).is_ok();
    let order = turn_order(live);
    // worker id -> position in `order` (ids are below STATOR_RP_MAX_WORKERS)
    let mut ranks = vec![usize::MAX; STATOR_RP_MAX_WORKERS as usize];
    for (i, &w) in order.iter().enumerate() {
        if let Some(r) = ranks.get_mut(w as usize) {
            *r = i;
        }
    }
    let rank = |w: u32| ranks.get(w as usize).copied().unwrap_or(usize::MAX);
    let mut counts: Vec<(u32, u32)> = order.iter().map(|&w| (w, 0)).collect();
    for &s in slots.iter() {
        if let Some(c) = counts.get_mut(rank(s)) {
            c.1 += 1;
        }
    }

    // 1. departures: free slots go to the emptiest worker's most preferred one
    let mut free: Vec<bool> = slots.iter().map(|&s| !is_live(s)).collect();
    let mut left = free.iter().filter(|&&f| f).count();
    if left > 0 && !order.is_empty() {
        let mut walkers: Vec<Walker> = order.iter().map(|&w| Walker::new(w, size)).collect();
        let mut heap: BinaryHeap<Reverse<(u32, usize)>> = counts
            .iter()
            .enumerate()
            .map(|(i, &(_, c))| Reverse((c, i)))
            .collect();
        while left > 0 {
            let Some(Reverse((c, i))) = heap.pop() else {
                break;
            };
            // Every permutation visits every slot, and a free slot stays free until claimed.
            if let Some(slot) = walkers[i].claim(size, |s| free[s as usize]) {
                slots[slot as usize] = order[i];
                free[slot as usize] = false;
                left -= 1;
                counts[i].1 = c + 1;
                heap.push(Reverse((c + 1, i)));
            }
        }
    }
    for (s, f) in slots.iter_mut().zip(&free) {
        if *f {
            *s = STATOR_RP_NO_WORKER; // no live worker at all
        }
    }

    // 2. arrivals: a newcomer short of the busiest takes the busiest's slots it prefers
    let joined: Vec<usize> = (0..order.len())
        .filter(|&i| old_live.binary_search(&order[i]).is_err())
        .collect();
    if joined.is_empty() {
        return;
    }
    // workers per slot count, to know the busiest count as counts fall
    let mut histogram = vec![0u32; size as usize + 1];
    for &(_, c) in &counts {
        histogram[c as usize] += 1;
    }
    let mut busiest = histogram.iter().rposition(|&n| n > 0).unwrap_or(0) as u32;
    let mut walkers: Vec<Walker> = joined
        .iter()
        .map(|&i| Walker::new(order[i], size))
        .collect();
    let mut restarted = false;
    while let Some((j, &i)) = joined
        .iter()
        .enumerate()
        .min_by_key(|&(_, &i)| (counts[i].1, i))
    {
        if counts[i].1 + 1 >= busiest {
            break;
        }
        let holder_count = |s: u32| {
            let w = slots[s as usize];
            counts.get(rank(w)).map_or(0, |&(_, c)| c)
        };
        let Some(slot) = walkers[j].claim(size, |s| holder_count(s) == busiest) else {
            // Every slot walked: start again (the busiest count fell since the walk began). A
            // busiest worker holds at least two slots, so a fresh walk finds one of them.
            if restarted {
                break;
            }
            restarted = true;
            walkers[j].next = 0;
            continue;
        };
        restarted = false;
        let from = rank(slots[slot as usize]);
        slots[slot as usize] = order[i];
        histogram[counts[from].1 as usize] -= 1;
        counts[from].1 -= 1;
        histogram[counts[from].1 as usize] += 1;
        histogram[counts[i].1 as usize] -= 1;
        counts[i].1 += 1;
        histogram[counts[i].1 as usize] += 1;
        if histogram[busiest as usize] == 0 {
            busiest -= 1;
            // slots passed over as not the busiest's may be the busiest's now
            for w in &mut walkers {
                w.next = 0;
            }
        }
    }
}
