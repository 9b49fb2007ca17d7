//! Stable ids for VIPs and reals.
//!
//! The data plane indexes counters by VIP id and stores *real ids* — one per (VIP, backend)
//! pair — in Maglev slots and in connection-table entries. An established connection keeps its
//! backend across a reload only if its entry's real id still names the same pair afterwards,
//! so ids must be stable:
//!
//! - a VIP keeps its id while a VIP with the same match key (address, port, protocol) is
//!   configured; a real keeps its id while the same VIP lists a backend of the same stable
//!   name — whatever else changes (health, drain, weights, other VIPs, file order);
//! - at start, ids are seeded from the data plane's active snapshot ([`Ids::seeded`]), so a
//!   restart of `stator run` over pinned maps keeps them too (the maps hold VIP keys and real
//!   addresses, not names: reals are matched by (VIP, address));
//! - a freed id goes into **quarantine** for the longest connection-table idle timeout before
//!   it may name another pair: a connection-table entry of a removed pair can only be used
//!   while it is younger than that timeout, so a stale entry never reaches a recycled id.
//!   Ids never used are preferred; only when none is left is a quarantined id taken early
//!   ([`Reuse::Early`], which the caller logs).
//!
//! Pure: time is an argument, nothing here reads a clock.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use stator_abi::{STATOR_MAX_REALS, STATOR_MAX_VIPS};
use stator_config::Config;
use stator_core::{RealId, Snapshot, VipId, VipKey};

use crate::error::ControlError;

/// How an id was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// Never used by this process or the data plane's active snapshot.
    Fresh,
    /// Used before, freed longer than the quarantine ago.
    Recycled,
    /// Used before and still in quarantine: every other id was taken.
    Early,
}

/// Ids below a limit: fresh ones first, freed ones after their quarantine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdPool {
    limit: u32,
    next_fresh: u32,
    /// Freed ids with the time they may be reused, oldest first.
    quarantine: VecDeque<(u32, Instant)>,
}

impl IdPool {
    /// A pool of ids `0..limit`.
    pub fn new(limit: u32) -> Self {
        Self {
            limit,
            next_fresh: 0,
            quarantine: VecDeque::new(),
        }
    }

    /// Takes an id: a fresh one, else the oldest freed one whose quarantine is over, else the
    /// oldest freed one. `None` when all `limit` ids are in use.
    pub fn take(&mut self, now: Instant) -> Option<(u32, Reuse)> {
        if self.next_fresh < self.limit {
            self.next_fresh += 1;
            return Some((self.next_fresh - 1, Reuse::Fresh));
        }
        let (id, until) = self.quarantine.pop_front()?;
        Some((
            id,
            if until <= now {
                Reuse::Recycled
            } else {
                Reuse::Early
            },
        ))
    }

    /// Returns `id` to the pool; it may be reused from `until` on.
    pub fn release(&mut self, id: u32, until: Instant) {
        // Keep the queue ordered by release time: quarantines are equal for ids freed together
        // and grow with time, so this is almost always a push at the back.
        let at = self.quarantine.partition_point(|&(_, u)| u <= until);
        self.quarantine.insert(at, (id, until));
    }

    /// Marks `ids` as in use and every lower id that is not as freed until `until` (seeding
    /// from a data plane whose history is unknown).
    pub fn seed(&mut self, ids: &BTreeSet<u32>, until: Instant) {
        let top = ids.iter().next_back().map_or(0, |&m| m + 1);
        self.next_fresh = top;
        for id in (0..top).filter(|i| !ids.contains(i)) {
            self.release(id, until);
        }
    }

    /// Ids in quarantine.
    pub fn quarantined(&self) -> usize {
        self.quarantine.len()
    }
}

/// Which ids a configuration's VIPs and reals have: positions parallel to `Config::vips` and
/// each `Vip::backends`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    /// `vips[i]` is the id of `config.vips[i]`.
    pub vips: Vec<VipId>,
    /// `reals[i][j]` is the id of `config.vips[i].backends[j]`.
    pub reals: Vec<Vec<RealId>>,
    /// Ids given to pairs that had none, with how (counters of recycled ids need a baseline).
    pub new_reals: Vec<(RealId, Reuse)>,
    /// The same for VIPs.
    pub new_vips: Vec<(VipId, Reuse)>,
    /// Ids freed by this assignment (pairs no longer configured).
    pub freed_reals: Vec<RealId>,
}

/// The id maps of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids {
    vips: BTreeMap<VipKey, VipId>,
    reals: BTreeMap<(VipKey, String), RealId>,
    vip_pool: IdPool,
    real_pool: IdPool,
}

impl Default for Ids {
    fn default() -> Self {
        Self::new()
    }
}

impl Ids {
    /// No ids in use.
    pub fn new() -> Self {
        Self::with_limits(STATOR_MAX_VIPS, STATOR_MAX_REALS)
    }

    /// No ids in use, with other limits (tests).
    pub fn with_limits(vips: u32, reals: u32) -> Self {
        Self {
            vips: BTreeMap::new(),
            reals: BTreeMap::new(),
            vip_pool: IdPool::new(vips),
            real_pool: IdPool::new(reals),
        }
    }

    /// Ids that keep what `active` (the data plane's snapshot, from an earlier run) used for
    /// `config`'s VIPs and reals: VIPs by match key; reals by (VIP, address), several backends
    /// of one VIP on one address in name order onto their ids in id order (they forward to the
    /// same address, so which gets which does not matter to a connection). Every other id
    /// below the highest in use is quarantined until `now + quarantine`.
    pub fn seeded(active: &Snapshot, config: &Config, now: Instant, quarantine: Duration) -> Self {
        let mut ids = Self::new();
        let until = now + quarantine;
        let mut by_vip_addr: BTreeMap<(VipId, IpAddr), Vec<RealId>> = BTreeMap::new();
        for (&id, real) in &active.reals {
            by_vip_addr
                .entry((real.vip, real.addr))
                .or_default()
                .push(id);
        }
        for vip in &config.vips {
            let Some(active_vip) = active.vips.get(&vip.key) else {
                continue;
            };
            ids.vips.insert(vip.key, active_vip.id);
            let mut by_addr: BTreeMap<IpAddr, Vec<&str>> = BTreeMap::new();
            for (backend, _) in config.vip_backends(vip) {
                by_addr
                    .entry(backend.address)
                    .or_default()
                    .push(&backend.name);
            }
            for (addr, mut names) in by_addr {
                names.sort_unstable();
                let Some(candidates) = by_vip_addr.get(&(active_vip.id, addr)) else {
                    continue;
                };
                for (name, &id) in names.iter().zip(candidates) {
                    ids.reals.insert((vip.key, (*name).to_owned()), id);
                }
            }
        }
        let vip_ids: BTreeSet<u32> = active.vips.values().map(|v| v.id.0).collect();
        let kept_vips: BTreeSet<u32> = ids.vips.values().map(|v| v.0).collect();
        ids.vip_pool.seed(&vip_ids, until);
        let real_ids: BTreeSet<u32> = active.reals.keys().map(|r| r.0).collect();
        let kept_reals: BTreeSet<u32> = ids.reals.values().map(|r| r.0).collect();
        ids.real_pool.seed(&real_ids, until);
        // Active ids the config no longer has: freed now, reusable after the quarantine.
        for id in vip_ids.difference(&kept_vips) {
            ids.vip_pool.release(*id, until);
        }
        for id in real_ids.difference(&kept_reals) {
            ids.real_pool.release(*id, until);
        }
        ids
    }

    /// Ids for `config`: existing pairs keep theirs, new pairs get new ones, pairs no longer
    /// configured are freed (quarantined until `now + quarantine`). Returns the new maps (to
    /// be kept only if the configuration is committed) and the assignment.
    ///
    /// # Errors
    /// [`ControlError::IdsExhausted`] when the data plane's id space is used up.
    pub fn assign(
        &self,
        config: &Config,
        now: Instant,
        quarantine: Duration,
    ) -> Result<(Ids, Assignment), ControlError> {
        let mut next = self.clone();
        let mut out = Assignment::default();
        let until = now + quarantine;
        let mut vips = BTreeMap::new();
        let mut reals = BTreeMap::new();
        // Keep every id that stays before taking new ones, so a new pair never takes an id a
        // later VIP of the same config still holds.
        for vip in &config.vips {
            if let Some(&id) = self.vips.get(&vip.key) {
                vips.insert(vip.key, id);
            }
            for (backend, _) in config.vip_backends(vip) {
                let key = (vip.key, backend.name.clone());
                if let Some(&id) = self.reals.get(&key) {
                    reals.insert(key, id);
                }
            }
        }
        for (key, id) in &self.vips {
            if !vips.contains_key(key) {
                next.vip_pool.release(id.0, until);
            }
        }
        for (key, id) in &self.reals {
            if !reals.contains_key(key) {
                next.real_pool.release(id.0, until);
                out.freed_reals.push(*id);
            }
        }
        for vip in &config.vips {
            let vip_id = match vips.get(&vip.key) {
                Some(&id) => id,
                None => {
                    let (id, how) = next.vip_pool.take(now).ok_or(ControlError::IdsExhausted {
                        what: "VIP",
                        limit: next.vip_pool.limit,
                    })?;
                    vips.insert(vip.key, VipId(id));
                    out.new_vips.push((VipId(id), how));
                    VipId(id)
                }
            };
            out.vips.push(vip_id);
            let mut row = Vec::with_capacity(vip.backends.len());
            for (backend, _) in config.vip_backends(vip) {
                let key = (vip.key, backend.name.clone());
                let id = match reals.get(&key) {
                    Some(&id) => id,
                    None => {
                        let (id, how) =
                            next.real_pool.take(now).ok_or(ControlError::IdsExhausted {
                                what: "real",
                                limit: next.real_pool.limit,
                            })?;
                        reals.insert(key, RealId(id));
                        out.new_reals.push((RealId(id), how));
                        RealId(id)
                    }
                };
                row.push(id);
            }
            out.reals.push(row);
        }
        next.vips = vips;
        next.reals = reals;
        Ok((next, out))
    }

    /// The id of a VIP, if it has one.
    pub fn vip(&self, key: &VipKey) -> Option<VipId> {
        self.vips.get(key).copied()
    }

    /// The id of a (VIP, backend) pair, if it has one.
    pub fn real(&self, key: &VipKey, backend: &str) -> Option<RealId> {
        self.reals.get(&(*key, backend.to_owned())).copied()
    }

    /// Ids in quarantine: (VIPs, reals).
    pub fn quarantined(&self) -> (usize, usize) {
        (self.vip_pool.quarantined(), self.real_pool.quarantined())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stator_config::from_toml_str;
    use stator_core::{BackendSpec, NodeParams, Proto, SnapshotBuilder};

    const Q: Duration = Duration::from_secs(900);

    fn config(vips: &[(&str, &[&str])]) -> Config {
        let mut t = String::from(
            "[node]\nname = \"n\"\naddress_v4 = \"10.0.0.10\"\n[dataplane]\ninterfaces = [\"eth0\"]\n",
        );
        for (i, (_, backends)) in vips.iter().enumerate() {
            t += &format!("[[pool]]\nname = \"p{i}\"\n[pool.health]\nmethod = \"none\"\n");
            for b in *backends {
                t += &format!("[[pool.backend]]\naddress = \"{b}\"\n");
            }
        }
        for (i, (addr, _)) in vips.iter().enumerate() {
            t += &format!(
                "[[vip]]\naddress = \"{addr}\"\nport = 80\nprotocol = \"tcp\"\npools = [\"p{i}\"]\ntable_size = 13\n"
            );
        }
        from_toml_str("t.toml", &t).unwrap()
    }

    fn key(addr: &str) -> VipKey {
        VipKey {
            addr: addr.parse().unwrap(),
            port: 80,
            proto: Proto::Tcp,
        }
    }

    #[test]
    fn pool_prefers_fresh_then_waits_for_quarantine() {
        let t0 = Instant::now();
        let mut p = IdPool::new(3);
        assert_eq!(p.take(t0), Some((0, Reuse::Fresh)));
        assert_eq!(p.take(t0), Some((1, Reuse::Fresh)));
        p.release(0, t0 + Q);
        assert_eq!(p.take(t0), Some((2, Reuse::Fresh)), "fresh before freed");
        assert_eq!(
            p.take(t0),
            Some((0, Reuse::Early)),
            "only a quarantined one left"
        );
        assert_eq!(p.take(t0), None);
        p.release(1, t0 + Q);
        assert_eq!(p.take(t0 + Q), Some((1, Reuse::Recycled)));
    }

    #[test]
    fn pool_releases_in_time_order() {
        let t0 = Instant::now();
        let mut p = IdPool::new(3);
        for _ in 0..3 {
            p.take(t0);
        }
        p.release(2, t0 + Duration::from_secs(30));
        p.release(0, t0 + Duration::from_secs(10));
        p.release(1, t0 + Duration::from_secs(20));
        let order: Vec<u32> = (0..3).map(|_| p.take(t0).unwrap().0).collect();
        assert_eq!(order, vec![0, 1, 2]);
    }

    #[test]
    fn ids_survive_reloads_reordering_and_other_changes() {
        let t0 = Instant::now();
        let a = config(&[
            ("192.0.2.1", &["10.1.0.1", "10.1.0.2"]),
            ("192.0.2.2", &["10.1.0.3"]),
        ]);
        let (ids, first) = Ids::new().assign(&a, t0, Q).unwrap();
        assert_eq!(first.vips, vec![VipId(0), VipId(1)]);
        assert_eq!(
            first.reals,
            vec![vec![RealId(0), RealId(1)], vec![RealId(2)]]
        );
        // VIPs swapped in the file, a backend added to the first, another VIP added.
        let b = config(&[
            ("192.0.2.3", &["10.1.0.9"]),
            ("192.0.2.2", &["10.1.0.3"]),
            ("192.0.2.1", &["10.1.0.1", "10.1.0.2", "10.1.0.4"]),
        ]);
        let (ids, second) = ids.assign(&b, t0, Q).unwrap();
        assert_eq!(ids.vip(&key("192.0.2.1")), Some(VipId(0)));
        assert_eq!(ids.vip(&key("192.0.2.2")), Some(VipId(1)));
        assert_eq!(ids.real(&key("192.0.2.1"), "10.1.0.1"), Some(RealId(0)));
        assert_eq!(ids.real(&key("192.0.2.1"), "10.1.0.2"), Some(RealId(1)));
        assert_eq!(ids.real(&key("192.0.2.2"), "10.1.0.3"), Some(RealId(2)));
        assert_eq!(second.vips[0], VipId(2));
        assert_eq!(second.new_reals.len(), 2);
        assert!(second.freed_reals.is_empty());
        // The same config again changes nothing.
        let (again, third) = ids.assign(&b, t0, Q).unwrap();
        assert_eq!(again, ids);
        assert!(third.new_reals.is_empty() && third.new_vips.is_empty());
    }

    #[test]
    fn removed_pairs_are_quarantined_not_recycled() {
        let t0 = Instant::now();
        let a = config(&[("192.0.2.1", &["10.1.0.1", "10.1.0.2"])]);
        let (ids, _) = Ids::with_limits(4, 3).assign(&a, t0, Q).unwrap();
        let b = config(&[("192.0.2.1", &["10.1.0.1"])]);
        let (ids, removed) = ids.assign(&b, t0, Q).unwrap();
        assert_eq!(removed.freed_reals, vec![RealId(1)]);
        // A new backend of the same VIP gets a fresh id, not the freed one.
        let c = config(&[("192.0.2.1", &["10.1.0.1", "10.1.0.5"])]);
        let (ids, added) = ids.assign(&c, t0, Q).unwrap();
        assert_eq!(added.new_reals, vec![(RealId(2), Reuse::Fresh)]);
        // With the space used up, the quarantined id is taken early, and says so.
        let d = config(&[("192.0.2.1", &["10.1.0.1", "10.1.0.5", "10.1.0.6"])]);
        let (ids, early) = ids.assign(&d, t0, Q).unwrap();
        assert_eq!(early.new_reals, vec![(RealId(1), Reuse::Early)]);
        let e = config(&[(
            "192.0.2.1",
            &["10.1.0.1", "10.1.0.5", "10.1.0.6", "10.1.0.7"],
        )]);
        assert!(matches!(
            ids.assign(&e, t0, Q),
            Err(ControlError::IdsExhausted { what: "real", .. })
        ));
    }

    #[test]
    fn a_failed_assignment_changes_nothing() {
        let t0 = Instant::now();
        let a = config(&[("192.0.2.1", &["10.1.0.1"])]);
        let (ids, _) = Ids::with_limits(4, 1).assign(&a, t0, Q).unwrap();
        let before = ids.clone();
        let b = config(&[("192.0.2.1", &["10.1.0.1", "10.1.0.2"])]);
        assert!(ids.assign(&b, t0, Q).is_err());
        assert_eq!(ids, before, "assign works on a copy");
    }

    #[test]
    fn seeding_from_the_data_plane_keeps_ids_by_vip_and_address() {
        let t0 = Instant::now();
        let v = |s: &str| -> IpAddr { s.parse().unwrap() };
        // What an earlier run committed: VIP .2 got id 0 (reals 0, 1), VIP .1 id 1 (real 2),
        // and a VIP .9 with real 3 that the new config no longer has.
        let active = SnapshotBuilder::new(NodeParams::default())
            .vip(
                v("192.0.2.2"),
                80,
                Proto::Tcp,
                13,
                vec![
                    BackendSpec::new(v("10.1.0.3")),
                    BackendSpec::new(v("10.1.0.4")),
                ],
            )
            .vip(
                v("192.0.2.1"),
                80,
                Proto::Tcp,
                13,
                vec![BackendSpec::new(v("10.1.0.1"))],
            )
            .vip(
                v("192.0.2.9"),
                80,
                Proto::Tcp,
                13,
                vec![BackendSpec::new(v("10.1.0.8"))],
            )
            .build()
            .unwrap();
        let cfg = config(&[
            ("192.0.2.1", &["10.1.0.1", "10.1.0.2"]),
            ("192.0.2.2", &["10.1.0.3", "10.1.0.4"]),
        ]);
        let seeded = Ids::seeded(&active, &cfg, t0, Q);
        let (ids, a) = seeded.assign(&cfg, t0, Q).unwrap();
        assert_eq!(a.vips, vec![VipId(1), VipId(0)]);
        assert_eq!(a.reals[1], vec![RealId(0), RealId(1)]);
        assert_eq!(a.reals[0][0], RealId(2));
        // 10.1.0.2 is new: a fresh id above everything the data plane used; id 3 (VIP .9's
        // real) is in quarantine.
        assert_eq!(a.reals[0][1], RealId(4));
        assert_eq!(a.new_reals, vec![(RealId(4), Reuse::Fresh)]);
        assert_eq!(ids.quarantined(), (1, 1));
    }
}
