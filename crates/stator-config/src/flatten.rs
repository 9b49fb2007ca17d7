//! Flattening nested pools into the backend list of a VIP.
//!
//! A VIP names pools; pools list backends and include other pools. The controller needs, per
//! VIP, one list of distinct backends with one weight each, in an order every node agrees on —
//! that list is what the Maglev table is built from. The rules (`docs/config.md`, "Pools"):
//!
//! - the walk is depth-first, pre-order: a pool's own backends, then its includes in order;
//!   a pool reached twice (a diamond) is walked once;
//! - a backend reached through several pools is one backend; its weight must be the same on
//!   every path of one VIP — a difference is reported, never silently resolved (sum or max
//!   would each surprise someone; forbidding it now can be relaxed later without breaking
//!   anyone's configuration);
//! - the result is sorted by the backends' stable names.
//!
//! The functions are pure; the include graph must be acyclic for the result to be meaningful
//! (validation guarantees it in a [`crate::Config`]), but they terminate on any graph.

use std::collections::HashMap;

use crate::types::{Backend, BackendId, Config, Member, Pool, PoolId, Vip};

/// A backend reached while flattening, with the pool that lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlatMember {
    /// The backend.
    pub backend: BackendId,
    /// Its weight in `via`.
    pub weight: u32,
    /// The pool that lists it (the first one reached, if several).
    pub via: PoolId,
}

/// A backend reached with two different weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeightConflict {
    /// The backend.
    pub backend: BackendId,
    /// The first pool it was reached through, and its weight there.
    pub first: (PoolId, u32),
    /// A later pool with a different weight.
    pub second: (PoolId, u32),
}

/// The result of flattening.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Flattened {
    /// Distinct backends in walk order, each with its first weight.
    pub members: Vec<FlatMember>,
    /// Backends reached with different weights (empty in a valid configuration).
    pub conflicts: Vec<WeightConflict>,
}

/// Flattens `roots` (a VIP's `pools`, or a single pool) over `pools`: distinct backends in
/// depth-first pre-order, with weight conflicts. Unknown pool ids are ignored.
pub fn flatten(pools: &[Pool], roots: &[PoolId]) -> Flattened {
    let mut out = Flattened::default();
    let mut seen_pool = vec![false; pools.len()];
    let mut seen_backend: HashMap<BackendId, usize> = HashMap::new();
    let mut stack: Vec<PoolId> = roots.iter().rev().copied().collect();
    while let Some(id) = stack.pop() {
        let Some(pool) = pools.get(id.0) else {
            continue;
        };
        if std::mem::replace(&mut seen_pool[id.0], true) {
            continue;
        }
        for &Member { backend, weight } in &pool.members {
            match seen_backend.get(&backend) {
                None => {
                    seen_backend.insert(backend, out.members.len());
                    out.members.push(FlatMember {
                        backend,
                        weight,
                        via: id,
                    });
                }
                Some(&i) if out.members[i].weight != weight => {
                    let first = out.members[i];
                    out.conflicts.push(WeightConflict {
                        backend,
                        first: (first.via, first.weight),
                        second: (id, weight),
                    });
                }
                Some(_) => {}
            }
        }
        stack.extend(pool.includes.iter().rev());
    }
    out
}

/// The members of a VIP's backend list: flattened members sorted by stable name.
///
/// # Panics
/// If a member's backend id is not an index into `backends`.
pub fn sorted_members(backends: &[Backend], flat: &Flattened) -> Vec<Member> {
    let mut members: Vec<Member> = flat
        .members
        .iter()
        .map(|m| Member {
            backend: m.backend,
            weight: m.weight,
        })
        .collect();
    members.sort_by(|a, b| backends[a.backend.0].name.cmp(&backends[b.backend.0].name));
    members
}

impl Config {
    /// Flattens one pool: every backend it contains, directly or through include, with its
    /// weight (walk order, see the module documentation).
    pub fn flatten_pool(&self, pool: PoolId) -> Flattened {
        flatten(&self.pools, &[pool])
    }

    /// A VIP's backends as the controller builds its Maglev table from them: (stable name,
    /// backend, weight), sorted by name. Same as [`Vip::backends`], with the backends resolved.
    pub fn maglev_backends<'a>(&'a self, vip: &'a Vip) -> Vec<(&'a str, &'a Backend, u32)> {
        self.vip_backends(vip)
            .map(|(b, w)| (b.name.as_str(), b, w))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(name: &str, members: &[(usize, u32)], includes: &[usize]) -> Pool {
        Pool {
            name: name.into(),
            includes: includes.iter().map(|&i| PoolId(i)).collect(),
            members: members
                .iter()
                .map(|&(b, weight)| Member {
                    backend: BackendId(b),
                    weight,
                })
                .collect(),
            health: None,
        }
    }

    fn ids(f: &Flattened) -> Vec<(usize, u32, usize)> {
        f.members
            .iter()
            .map(|m| (m.backend.0, m.weight, m.via.0))
            .collect()
    }

    #[test]
    fn preorder_own_members_then_includes() {
        // 0 "web" = {b0} + include [1, 2]; 1 "rack1" = {b1}; 2 "rack2" = {b2, b3}
        let pools = [
            pool("web", &[(0, 1)], &[1, 2]),
            pool("rack1", &[(1, 2)], &[]),
            pool("rack2", &[(2, 1), (3, 1)], &[]),
        ];
        let f = flatten(&pools, &[PoolId(0)]);
        assert_eq!(ids(&f), [(0, 1, 0), (1, 2, 1), (2, 1, 2), (3, 1, 2)]);
        assert!(f.conflicts.is_empty());
    }

    #[test]
    fn diamond_is_walked_once() {
        // web -> {a, b}; a -> base; b -> base; base = {b0}
        let pools = [
            pool("web", &[], &[1, 2]),
            pool("a", &[], &[3]),
            pool("b", &[], &[3]),
            pool("base", &[(0, 5)], &[]),
        ];
        let f = flatten(&pools, &[PoolId(0)]);
        assert_eq!(ids(&f), [(0, 5, 3)]);
        assert!(f.conflicts.is_empty());
        // Naming the same pool twice at the root changes nothing either.
        assert_eq!(flatten(&pools, &[PoolId(3), PoolId(0), PoolId(3)]), f);
    }

    #[test]
    fn same_backend_same_weight_is_one_backend() {
        let pools = [pool("a", &[(0, 2), (1, 1)], &[]), pool("b", &[(0, 2)], &[])];
        let f = flatten(&pools, &[PoolId(0), PoolId(1)]);
        assert_eq!(ids(&f), [(0, 2, 0), (1, 1, 0)]);
        assert!(f.conflicts.is_empty());
    }

    #[test]
    fn different_weights_conflict() {
        let pools = [pool("a", &[(0, 2)], &[1]), pool("b", &[(0, 5)], &[])];
        let f = flatten(&pools, &[PoolId(0)]);
        assert_eq!(ids(&f), [(0, 2, 0)]);
        assert_eq!(
            f.conflicts,
            [WeightConflict {
                backend: BackendId(0),
                first: (PoolId(0), 2),
                second: (PoolId(1), 5),
            }]
        );
    }

    #[test]
    fn terminates_on_cycles_and_unknown_ids() {
        let pools = [pool("a", &[(0, 1)], &[1, 7]), pool("b", &[(1, 1)], &[0])];
        let f = flatten(&pools, &[PoolId(0), PoolId(9)]);
        assert_eq!(ids(&f), [(0, 1, 0), (1, 1, 1)]);
    }

    #[test]
    fn sorted_by_stable_name() {
        let backends: Vec<Backend> = ["web-2", "10.0.0.1:80", "web-10"]
            .iter()
            .map(|n| Backend {
                address: "10.0.0.1".parse().unwrap(),
                port: None,
                name: (*n).into(),
            })
            .collect();
        let pools = [pool("p", &[(0, 1), (1, 1), (2, 3)], &[])];
        let members = sorted_members(&backends, &flatten(&pools, &[PoolId(0)]));
        let names: Vec<&str> = members
            .iter()
            .map(|m| backends[m.backend.0].name.as_str())
            .collect();
        // Byte order: digits sort before letters; no "natural" ordering.
        assert_eq!(names, ["10.0.0.1:80", "web-10", "web-2"]);
        assert_eq!(members[1].weight, 3);
    }
}
