//! From configuration and backend states to a complete [`Snapshot`] — pure.
//!
//! Each (VIP, backend) pair becomes one of three things ([`RealPlan`]):
//!
//! | backend | real | Maglev slots | connection-table hits |
//! |---|---|---|---|
//! | healthy, weight > 0, not drained | usable | yes (by weight) | kept |
//! | healthy, weight 0 (config) or drained by the API before its timeout | draining | none | kept |
//! | unhealthy, not checked yet, or drained past its timeout | absent | none | reselected |
//!
//! An absent real is simply not in the snapshot: connection-table entries that name it are
//! reselected by Maglev on their next packet (the paper's §3.3), which is how an unhealthy
//! backend leaves "every Maglev table it is in" and its connections move in one commit.
//!
//! Tables are rebuilt only for VIPs whose usable set (name, weight, id) changed since the
//! previous build; unchanged tables are shared (`Arc`) with it.
//!
//! **Second chance** (docs/forwarding.md §12.1): when a GUE VIP's table is rebuilt, the table it
//! replaces is kept as the VIP's *previous table* for `encap.second_chance` (one previous table
//! per VIP: a later change replaces it). Each backend that table names and the new snapshot no
//! longer serves stays in the snapshot as a [`RealState::Previous`] real — unless its health
//! checks say it is down or its drain timed out (neither is ever named). Previous tables take slots of the
//! generation beside the current ones; those that do not fit `dataplane.slots_per_generation`
//! are not kept (said in the build's [`BuiltVip::previous_dropped`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::time::Instant;

use serde::Serialize;
use stator_config::{BackendId, Config};
use stator_core::{
    ClassId, Encap, Peers, Real, RealId, RealState, Snapshot, ValidSnapshot, Vip, VipGroup, VipId,
    VipKey, peer_set,
};
use stator_hash::{MaglevBackend, MaglevTable};

use crate::error::ControlError;
use crate::ids::Assignment;

/// A backend's health, as the checks see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// Every check that applies to it is up (or none applies).
    Up,
    /// A check that applies to it is down.
    Down,
    /// A check that applies to it has no result yet.
    Unknown,
}

/// An operator's drain of a backend (through the API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Drain {
    /// Not drained.
    #[default]
    No,
    /// Draining until the deadline: no new connections, existing ones kept.
    Until(Instant),
    /// The drain timeout passed: removed, existing connections reselected.
    TimedOut,
}

/// What planning needs to know about one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendState {
    /// Its health.
    pub health: Health,
    /// Its drain.
    pub drain: Drain,
}

/// Why a real is draining.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DrainCause {
    /// `weight = 0` in the configuration.
    Weight,
    /// Drained through the API.
    Api,
}

/// Why a real is not in the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AbsentCause {
    /// Its health checks say it is down.
    Down,
    /// Its health checks have no result yet.
    Unchecked,
    /// It was drained through the API and the drain timeout passed.
    Drained,
}

/// What became of one (VIP, backend) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "cause", rename_all = "lowercase")]
pub enum RealPlan {
    /// In the Maglev table.
    Usable,
    /// In the snapshot without slots: existing connections only.
    Draining(DrainCause),
    /// Not in the snapshot.
    Absent(AbsentCause),
}

impl RealPlan {
    /// Decides one pair from its backend's state and configured weight.
    pub fn of(state: BackendState, weight: u32) -> Self {
        match (state.health, state.drain) {
            (Health::Down, _) => Self::Absent(AbsentCause::Down),
            (Health::Unknown, _) => Self::Absent(AbsentCause::Unchecked),
            (Health::Up, Drain::TimedOut) => Self::Absent(AbsentCause::Drained),
            (Health::Up, Drain::Until(_)) => Self::Draining(DrainCause::Api),
            (Health::Up, Drain::No) if weight == 0 => Self::Draining(DrainCause::Weight),
            (Health::Up, Drain::No) => Self::Usable,
        }
    }

    /// `usable`, `draining` or `absent`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Usable => "usable",
            Self::Draining(_) => "draining",
            Self::Absent(_) => "absent",
        }
    }
}

/// One real of a built VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltReal {
    /// Its id.
    pub id: RealId,
    /// The backend.
    pub backend: BackendId,
    /// Its configured weight.
    pub weight: u32,
    /// What became of it.
    pub plan: RealPlan,
    /// Maglev slots it holds.
    pub slots: u32,
}

/// One VIP as built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltVip {
    /// Its match key.
    pub key: VipKey,
    /// Its id.
    pub id: VipId,
    /// Its Maglev table size.
    pub table_size: u32,
    /// Its reals, in the order of `Vip::backends`.
    pub reals: Vec<BuiltReal>,
    /// Whether its table was built now (false: shared with the previous build).
    pub rebuilt: bool,
    /// The usable set the table was built from: (name, weight, real id).
    members: Vec<(String, u32, u32)>,
    table: Arc<[u32]>,
    /// The table kept for a second chance, if any.
    pub previous: Option<PreviousTable>,
    /// A previous table was due but did not fit the generation's slots.
    pub previous_dropped: bool,
    /// Since when its table has been current.
    pub since: Instant,
}

impl BuiltVip {
    /// Number of usable reals (in the table).
    pub fn usable(&self) -> usize {
        self.reals
            .iter()
            .filter(|r| r.plan == RealPlan::Usable)
            .count()
    }
}

/// A VIP's table kept for a second chance (docs/forwarding.md §12.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviousTable {
    /// The slots.
    pub table: Arc<[u32]>,
    /// When its grace ends.
    pub until: Instant,
}

/// A table current for less than this is never kept as a previous table over one still in its
/// grace (docs/forwarding.md §12.1): twice the longest health-check interval — checks start
/// staggered over one interval with up to half an interval of jitter, so backends that come
/// back together do so within about one and a half intervals, and each partial table on the
/// way lasts less. Zero without health checks (every change is then the operator's).
pub fn brief_table(config: &Config) -> std::time::Duration {
    config
        .pools
        .iter()
        .filter_map(|p| p.health.as_ref())
        .map(|h| h.timing.interval * 2)
        .max()
        .unwrap_or_default()
}

/// A complete snapshot and how it was derived.
#[derive(Debug, Clone)]
pub struct Built {
    /// What the data plane gets, validated.
    pub snapshot: ValidSnapshot,
    /// Per VIP, parallel to `Config::vips`.
    pub vips: Vec<BuiltVip>,
}

impl Built {
    /// Number of tables built (not shared with the previous build).
    pub fn tables_rebuilt(&self) -> usize {
        self.vips.iter().filter(|v| v.rebuilt).count()
    }

    /// The built VIP with this key.
    pub fn vip(&self, key: &VipKey) -> Option<&BuiltVip> {
        self.vips.iter().find(|v| v.key == *key)
    }

    /// What a node that restarts over the data plane's maps (`on_exit = "keep"`) knows of the
    /// tables before it: the active snapshot, as the "previous build" of its first build —
    /// so a table that changed across the restart keeps the one that was forwarding as its
    /// previous table (second chance survives the restart), and a previous table still in the
    /// maps is carried, each until `now + grace`. Weights are unknown: any later table
    /// replaces them. `None` when the snapshot does not validate.
    pub fn seeded(active: &Snapshot, now: Instant, grace: std::time::Duration) -> Option<Self> {
        let snapshot = active.clone().validated().ok()?;
        let vips = active
            .vips
            .iter()
            .map(|(key, v)| BuiltVip {
                key: *key,
                id: v.id,
                table_size: v.table.len() as u32,
                reals: Vec::new(),
                rebuilt: false,
                members: Vec::new(),
                table: Arc::clone(&v.table),
                previous: v.previous.clone().map(|table| PreviousTable {
                    table,
                    until: now + grace,
                }),
                // it forwarded for an unknown while: as good as long
                since: now.checked_sub(grace).unwrap_or(now),
                previous_dropped: false,
            })
            .collect();
        Some(Self { snapshot, vips })
    }

    /// When the first previous table's grace ends (a rebuild then drops it).
    pub fn previous_until(&self) -> Option<Instant> {
        self.vips
            .iter()
            .filter_map(|v| v.previous.as_ref().map(|p| p.until))
            .min()
    }
}

/// Builds the snapshot of `config` with the ids of `ids`, each backend in the state
/// `states[backend]` (a backend beyond the slice counts as [`Health::Unknown`]), recording
/// `generation`. Tables equal to `previous`'s are reused.
///
/// # Errors
/// [`ControlError::Table`] if a table cannot be built (validation prevents it).
pub fn build(
    config: &Config,
    ids: &Assignment,
    states: &[BackendState],
    generation: u64,
    previous: Option<&Built>,
) -> Result<Built, ControlError> {
    build_keyed(
        config,
        ids,
        states,
        generation,
        previous,
        stator_abi::TraceKeys::default(),
        Instant::now(),
    )
}

/// [`build`], with the tracer's keys (read from `tracer.key_file` by the node) in the
/// snapshot's node parameters, at `now` (previous tables whose grace has passed are dropped,
/// new ones kept until `now + encap.second_chance`).
///
/// # Errors
/// As [`build`].
pub fn build_keyed(
    config: &Config,
    ids: &Assignment,
    states: &[BackendState],
    generation: u64,
    previous: Option<&Built>,
    trace_keys: stator_abi::TraceKeys,
    now: Instant,
) -> Result<Built, ControlError> {
    let unknown = BackendState {
        health: Health::Unknown,
        drain: Drain::No,
    };
    let old: BTreeMap<VipKey, &BuiltVip> = previous
        .map(|p| p.vips.iter().map(|v| (v.key, v)).collect())
        .unwrap_or_default();
    let mut snap = Snapshot {
        generation,
        node: stator_core::NodeParams {
            trace_keys,
            ..config.node_params()
        },
        ..Snapshot::default()
    };
    let grace = config.second_chance_grace();
    let brief = brief_table(config);
    let mut vips = Vec::with_capacity(config.vips.len());
    for (i, vip) in config.vips.iter().enumerate() {
        let vip_id = ids.vips[i];
        let mut reals = Vec::with_capacity(vip.backends.len());
        let mut members = Vec::new();
        for (j, member) in vip.backends.iter().enumerate() {
            let backend = config.backend(member.backend);
            let id = ids.reals[i][j];
            let state = states.get(member.backend.0).copied().unwrap_or(unknown);
            let plan = RealPlan::of(state, member.weight);
            let real_state = match plan {
                RealPlan::Usable => Some(RealState::Usable),
                RealPlan::Draining(_) => Some(RealState::Draining),
                RealPlan::Absent(_) => None,
            };
            if let Some(state) = real_state {
                snap.reals.insert(
                    id,
                    Real {
                        addr: backend.address,
                        vip: vip_id,
                        state,
                        encap: vip.encap,
                    },
                );
            }
            if plan == RealPlan::Usable {
                members.push((backend.name.clone(), member.weight, id.0));
            }
            reals.push(BuiltReal {
                id,
                backend: member.backend,
                weight: member.weight,
                plan,
                slots: 0,
            });
        }
        let reuse = old
            .get(&vip.key)
            .filter(|o| o.table_size == vip.table_size && o.members == members);
        let (table, counts, rebuilt) = match reuse {
            Some(o) => (
                Arc::clone(&o.table),
                o.reals.iter().map(|r| (r.id.0, r.slots)).collect(),
                false,
            ),
            None => {
                let (table, counts) = table_of(&vip.name, &members, vip.table_size)?;
                (table, counts, true)
            }
        };
        for r in &mut reals {
            r.slots = counts.get(&r.id.0).copied().unwrap_or(0);
        }
        let mut v = Vip::new(vip_id, vip.flags, Arc::clone(&table));
        v.failover = vip.failover;
        v.group = vip.group.map(|g| VipGroup {
            // fits: classes are few (each has a prefix, and prefixes are bounded)
            class: ClassId(g.class as u16),
            bits: g.bits,
        });
        snap.vips.insert(vip.key, v);
        // §12.1: the table this build replaces — unless it was current for less than
        // `brief_table` while the one kept before is still in its grace: a node that lost its
        // backends for a while (cut off, health checks failing) and gets them back one by one
        // keeps the table from before the loss, not one of the brief partial tables on the way
        // back (few connections begin under a table that lasts seconds)
        let kept = old.get(&vip.key).and_then(|o| {
            let carried = o.previous.clone().filter(|p| p.until > now);
            // only GUE carries a second chance: no slots spent on the others' tables; a
            // rebuild that gave the same slots (a restart's first build) changed nothing
            if !rebuilt
                || o.table.is_empty()
                || o.table[..] == table[..]
                || grace.is_zero()
                || vip.encap != Encap::Gue
            {
                return carried.filter(|_| vip.encap == Encap::Gue && !grace.is_zero());
            }
            let fresh = PreviousTable {
                table: Arc::clone(&o.table),
                until: now + grace,
            };
            let brief = now.saturating_duration_since(o.since) < brief;
            Some(match carried {
                Some(c) if brief => c,
                _ => fresh,
            })
        });
        let since = match old.get(&vip.key) {
            Some(o) if !rebuilt || o.table[..] == table[..] => o.since,
            _ => now,
        };
        vips.push(BuiltVip {
            key: vip.key,
            id: vip_id,
            table_size: vip.table_size,
            reals,
            rebuilt,
            members,
            table,
            previous: kept,
            previous_dropped: false,
            since,
        });
    }
    keep_previous(config, states, previous, &mut snap, &mut vips);
    for (i, class) in config.classes.iter().enumerate() {
        for p in &class.prefixes {
            snap.classes.insert(*p, ClassId(i as u16));
        }
    }
    snap.peers = peers(config, previous)?;
    let snapshot = snap
        .validated()
        .map_err(|source| ControlError::Snapshot { source })?;
    Ok(Built { snapshot, vips })
}

/// §12.1: puts the previous tables kept in `vips` into `snap` while the generation's slots
/// hold them (in configuration order), with each backend they name that `snap` no longer
/// serves as a previous-only real — unless its health checks say it is down or its drain timed
/// out. Those that do not fit are dropped and marked.
fn keep_previous(
    config: &Config,
    states: &[BackendState],
    previous: Option<&Built>,
    snap: &mut Snapshot,
    vips: &mut [BuiltVip],
) {
    let limit = u64::from(config.dataplane.slots_per_generation);
    let mut used: u64 = vips.iter().map(|v| v.table.len() as u64).sum::<u64>()
        + u64::from(if config.fragments.peers.is_empty() {
            0
        } else {
            config.fragments.table_size
        });
    // never named: a backend its checks say is down, or whose drain timed out (its
    // connections are meant to move)
    let down: std::collections::BTreeSet<std::net::IpAddr> = config
        .backends
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            states
                .get(*i)
                .is_some_and(|s| s.health == Health::Down || s.drain == Drain::TimedOut)
        })
        .map(|(_, b)| b.address)
        .collect();
    for v in vips.iter_mut() {
        let Some(PreviousTable { table, .. }) = &v.previous else {
            continue;
        };
        if used + table.len() as u64 > limit {
            v.previous = None;
            v.previous_dropped = true;
            continue;
        }
        used += table.len() as u64;
        let table = Arc::clone(table);
        let mut named: Vec<u32> = table.to_vec();
        named.sort_unstable();
        named.dedup();
        for id in named {
            let id = RealId(id);
            if snap.reals.contains_key(&id) {
                continue;
            }
            // where it was: the previous build's snapshot (a usable, draining or previous real)
            let Some(was) = previous.and_then(|p| p.snapshot.reals.get(&id)) else {
                continue;
            };
            if was.vip != v.id || down.contains(&was.addr) {
                continue;
            }
            snap.reals.insert(
                id,
                Real {
                    state: RealState::Previous,
                    ..*was
                },
            );
        }
        if let Some(vip) = snap.vips.get_mut(&v.key) {
            vip.previous = Some(table);
        }
    }
}

/// The fragment peers with their Maglev table (docs/forwarding.md §9), reused from `previous`
/// when the peers have not changed.
fn peers(config: &Config, previous: Option<&Built>) -> Result<Peers, ControlError> {
    let f = &config.fragments;
    if f.peers.is_empty() {
        return Ok(Peers::default());
    }
    let fresh = peer_set(f.peers.clone(), f.self_index, f.table_size).map_err(|source| {
        ControlError::Table {
            vip: "fragments.peers".to_owned(),
            source,
        }
    })?;
    Ok(match previous.map(|p| &p.snapshot.peers) {
        Some(old) if old.addrs == fresh.addrs && old.table.len() == fresh.table.len() => Peers {
            self_index: fresh.self_index,
            ..old.clone()
        },
        _ => fresh,
    })
}

/// Maglev slots per real id.
type SlotCounts = BTreeMap<u32, u32>;

/// The Maglev table of a usable set — empty (no slots at all) when the set is, which the data
/// plane reads as "no backend" — and the slots of each real id.
fn table_of(
    vip: &str,
    members: &[(String, u32, u32)],
    size: u32,
) -> Result<(Arc<[u32]>, SlotCounts), ControlError> {
    let backends: Vec<MaglevBackend<'_>> = members
        .iter()
        .map(|(name, weight, id)| MaglevBackend::new(name, *weight, *id))
        .collect();
    let table = MaglevTable::build(&backends, size).map_err(|source| ControlError::Table {
        vip: vip.to_owned(),
        source,
    })?;
    let counts = table
        .slot_counts()
        .iter()
        .map(|b| (b.id, b.slots))
        .collect();
    let slots = if table.is_empty() {
        Arc::from(Vec::new())
    } else {
        Arc::from(table.slots())
    };
    Ok((slots, counts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Ids;
    use stator_config::from_toml_str;

    /// Two VIPs sharing backend a (10.1.0.1); b only behind the first, c (weight 0) only
    /// behind the second.
    fn config() -> Config {
        from_toml_str(
            "t.toml",
            r#"
[node]
name = "n"
address_v4 = "10.0.0.10"
[dataplane]
interfaces = ["eth0"]
[[pool]]
name = "web"
[pool.health]
method = "tcp"
port = 80
interval = "2s"
[[pool.backend]]
address = "10.1.0.1"
id = "a"
[[pool.backend]]
address = "10.1.0.2"
id = "b"
[[pool]]
name = "api"
[pool.health]
method = "none"
[[pool.backend]]
address = "10.1.0.1"
id = "a"
[[pool.backend]]
address = "10.1.0.3"
id = "c"
weight = 0
[[vip]]
address = "192.0.2.1"
port = 80
protocol = "tcp"
pools = ["web"]
table_size = 251
encap = "gue"
[[vip]]
address = "192.0.2.2"
port = 80
protocol = "tcp"
pools = ["api"]
table_size = 251
"#,
        )
        .unwrap()
    }

    fn up() -> BackendState {
        BackendState {
            health: Health::Up,
            drain: Drain::No,
        }
    }

    fn states(config: &Config, f: impl Fn(&str) -> BackendState) -> Vec<BackendState> {
        config.backends.iter().map(|b| f(&b.name)).collect()
    }

    fn slots_of(built: &Built, vip: usize, name: &str, config: &Config) -> u32 {
        built.vips[vip]
            .reals
            .iter()
            .find(|r| config.backend(r.backend).name == name)
            .map_or(0, |r| r.slots)
    }

    #[test]
    fn a_down_backend_leaves_every_table_and_the_reals() {
        let cfg = config();
        let (_, ids) = Ids::new()
            .assign(&cfg, Instant::now(), std::time::Duration::ZERO)
            .unwrap();
        let all_up = build(&cfg, &ids, &states(&cfg, |_| up()), 1, None).unwrap();
        assert!(all_up.snapshot.is_consistent());
        assert!(slots_of(&all_up, 0, "a", &cfg) > 0);
        assert!(slots_of(&all_up, 1, "a", &cfg) > 0);
        assert_eq!(slots_of(&all_up, 1, "c", &cfg), 0, "weight 0: draining");
        assert_eq!(
            all_up.vips[1].reals[1].plan,
            RealPlan::Draining(DrainCause::Weight)
        );
        assert_eq!(all_up.snapshot.reals.len(), 4, "a twice, b, c (draining)");

        let a_down = states(&cfg, |n| BackendState {
            health: if n == "a" { Health::Down } else { Health::Up },
            drain: Drain::No,
        });
        let built = build(&cfg, &ids, &a_down, 2, Some(&all_up)).unwrap();
        assert!(built.snapshot.is_consistent());
        for (v, vip) in built.vips.iter().enumerate() {
            let a = &vip
                .reals
                .iter()
                .find(|r| cfg.backend(r.backend).name == "a")
                .unwrap();
            assert_eq!(a.plan, RealPlan::Absent(AbsentCause::Down), "vip {v}");
            assert!(!built.snapshot.reals.contains_key(&a.id), "vip {v}");
            let table = &built.snapshot.vips[&vip.key].table;
            assert!(!table.contains(&a.id.0), "vip {v}: a still has slots");
        }
        assert_eq!(
            slots_of(&built, 0, "b", &cfg),
            251,
            "b takes every slot of VIP 0"
        );
        assert!(
            built.snapshot.vips[&built.vips[1].key].table.is_empty(),
            "VIP 1: only c, draining"
        );
        assert_eq!(built.vips[1].usable(), 0);
        assert_eq!(built.tables_rebuilt(), 2);
    }

    #[test]
    fn unchanged_tables_are_shared_and_drains_keep_the_real() {
        let cfg = config();
        let (_, ids) = Ids::new()
            .assign(&cfg, Instant::now(), std::time::Duration::ZERO)
            .unwrap();
        let first = build(&cfg, &ids, &states(&cfg, |_| up()), 1, None).unwrap();
        let later = Instant::now() + std::time::Duration::from_secs(60);
        let b_drained = states(&cfg, |n| BackendState {
            health: Health::Up,
            drain: if n == "b" {
                Drain::Until(later)
            } else {
                Drain::No
            },
        });
        let second = build(&cfg, &ids, &b_drained, 2, Some(&first)).unwrap();
        assert!(second.vips[0].rebuilt && !second.vips[1].rebuilt);
        assert!(Arc::ptr_eq(&first.vips[1].table, &second.vips[1].table));
        let b = second.vips[0].reals[1];
        assert_eq!(b.plan, RealPlan::Draining(DrainCause::Api));
        assert_eq!(b.slots, 0);
        assert_eq!(second.snapshot.reals[&b.id].state, RealState::Draining);
        let timed_out = states(&cfg, |n| BackendState {
            health: Health::Up,
            drain: if n == "b" { Drain::TimedOut } else { Drain::No },
        });
        let third = build(&cfg, &ids, &timed_out, 3, Some(&second)).unwrap();
        assert!(!third.snapshot.reals.contains_key(&b.id));
        assert!(!third.vips[0].rebuilt, "same usable set as while draining");
    }

    fn b_down_of(cfg: &Config) -> Vec<BackendState> {
        states(cfg, |n| BackendState {
            health: if n == "c" || n == "a" {
                Health::Down
            } else {
                Health::Up
            },
            drain: Drain::No,
        })
    }

    /// §12.1: a change keeps the table it replaces, naming the backend that left as a
    /// previous-only real, for the grace period; a dead backend is never named; tables that do
    /// not fit the generation's slots are not kept.
    #[test]
    fn a_change_keeps_the_previous_table_for_its_grace() {
        let mut cfg = config();
        let (_, ids) = Ids::new()
            .assign(&cfg, Instant::now(), std::time::Duration::ZERO)
            .unwrap();
        let t0 = Instant::now();
        let keyed = |cfg: &Config, st: &[BackendState], g, prev: Option<&Built>, at| {
            build_keyed(cfg, &ids, st, g, prev, Default::default(), at).unwrap()
        };
        let first = keyed(&cfg, &states(&cfg, |_| up()), 1, None, t0);
        assert!(first.vips.iter().all(|v| v.previous.is_none()));
        // b goes to weight 0 (draining): VIP 0's table changes
        let b = first.vips[0].reals[1].id;
        let b_at = first.snapshot.reals[&b].addr;
        let grace = cfg.second_chance_grace();
        assert_eq!(
            grace,
            cfg.dataplane.tcp_timeout.max(cfg.dataplane.udp_timeout)
        );
        let mut drained = cfg.clone();
        drained.vips[0].backends[1].weight = 0;
        let second = keyed(&drained, &states(&cfg, |_| up()), 2, Some(&first), t0);
        let v0 = &second.snapshot.vips[&second.vips[0].key];
        assert_eq!(v0.previous.as_deref(), Some(&first.vips[0].table[..]));
        assert_eq!(second.vips[0].previous.as_ref().unwrap().until, t0 + grace);
        assert!(
            second.snapshot.vips[&second.vips[1].key].previous.is_none(),
            "unchanged"
        );
        // a GRE VIP keeps none: only GUE carries a second chance
        let gre = keyed(&drained, &b_down_of(&cfg), 3, Some(&second), t0);
        assert!(gre.vips[1].rebuilt && gre.vips[1].previous.is_none());
        assert_eq!(second.snapshot.reals[&b].state, RealState::Draining);
        assert_eq!(second.previous_until(), Some(t0 + grace));
        // b leaves the configuration: still named, as a previous backend only
        cfg.vips[0].backends.truncate(1);
        let third = keyed(&cfg, &states(&cfg, |_| up()), 3, Some(&second), t0);
        assert_eq!(third.snapshot.reals[&b].state, RealState::Previous);
        assert_eq!(third.snapshot.reals[&b].addr, b_at);
        assert!(third.snapshot.is_consistent());
        // ... until the grace is over
        let later = keyed(&cfg, &states(&cfg, |_| up()), 4, Some(&third), t0 + grace);
        assert!(later.snapshot.vips.values().all(|v| v.previous.is_none()));
        assert!(!later.snapshot.reals.contains_key(&b));
        // a backend that is down is never named
        let b_down = states(&cfg, |n| BackendState {
            health: if n == "b" { Health::Down } else { Health::Up },
            drain: Drain::No,
        });
        let dead = keyed(&cfg, &b_down, 4, Some(&third), t0);
        assert!(!dead.snapshot.reals.contains_key(&b));
        // a node that loses every backend and gets them back one by one keeps the table
        // from before the loss: the partial tables on the way back last only seconds
        let only = |name: &'static str| {
            move |n: &str| BackendState {
                health: if n == name || n == "c" {
                    Health::Up
                } else {
                    Health::Down
                },
                drain: Drain::No,
            }
        };
        let none_up = states(&cfg, |_| BackendState {
            health: Health::Down,
            drain: Drain::No,
        });
        let lost = keyed(&drained, &none_up, 3, Some(&second), t0);
        let partial = keyed(&drained, &states(&cfg, only("a")), 4, Some(&lost), t0);
        let back = keyed(&drained, &states(&cfg, |_| up()), 5, Some(&partial), t0);
        assert_eq!(
            back.snapshot.vips[&back.vips[0].key].previous.as_deref(),
            Some(&first.vips[0].table[..]),
            "the table before the loss, not the partial one"
        );
        // a table that was current for a while replaces the one kept before
        let later = t0 + brief_table(&cfg) + std::time::Duration::from_secs(1);
        let undrained = keyed(&config(), &states(&cfg, |_| up()), 6, Some(&second), later);
        assert_eq!(
            undrained.snapshot.vips[&undrained.vips[0].key]
                .previous
                .as_deref(),
            Some(&second.vips[0].table[..])
        );
        // "0s" turns it off
        let mut off = drained.clone();
        off.encap.second_chance = Some(std::time::Duration::ZERO);
        let none = keyed(&off, &states(&cfg, |_| up()), 2, Some(&first), t0);
        assert!(none.vips.iter().all(|v| v.previous.is_none()));
        // no room in the generation: not kept, and said so
        let mut tight = drained.clone();
        tight.dataplane.slots_per_generation = 251 * 2;
        let full = keyed(&tight, &states(&cfg, |_| up()), 2, Some(&first), t0);
        assert!(full.vips[0].previous.is_none() && full.vips[0].previous_dropped);
    }

    /// A restart over the maps: the active snapshot stands in for the previous build, so a
    /// table that changed across the restart keeps the one that was forwarding.
    #[test]
    fn a_restart_keeps_the_table_that_was_forwarding() {
        let cfg = config();
        let (_, ids) = Ids::new()
            .assign(&cfg, Instant::now(), std::time::Duration::ZERO)
            .unwrap();
        let t0 = Instant::now();
        let all = states(&cfg, |_| up());
        let before = build(&cfg, &ids, &all, 1, None).unwrap();
        let active: Snapshot = (*before.snapshot).clone();
        let grace = cfg.second_chance_grace();
        let seed = Built::seeded(&active, t0, grace).unwrap();
        // the same configuration: nothing changed, nothing kept
        let same = build_keyed(&cfg, &ids, &all, 2, Some(&seed), Default::default(), t0).unwrap();
        assert!(same.vips.iter().all(|v| v.previous.is_none()));
        // b drained across the restart: VIP 0 keeps the table that was forwarding
        let mut drained = cfg.clone();
        drained.vips[0].backends[1].weight = 0;
        let after =
            build_keyed(&drained, &ids, &all, 2, Some(&seed), Default::default(), t0).unwrap();
        let v0 = &after.snapshot.vips[&after.vips[0].key];
        assert_eq!(v0.previous.as_deref(), Some(&before.vips[0].table[..]));
        assert_eq!(after.vips[0].previous.as_ref().unwrap().until, t0 + grace);
    }

    #[test]
    fn unknown_health_is_not_usable() {
        let cfg = config();
        let (_, ids) = Ids::new()
            .assign(&cfg, Instant::now(), std::time::Duration::ZERO)
            .unwrap();
        let built = build(&cfg, &ids, &[], 1, None).unwrap();
        assert!(built.snapshot.reals.is_empty());
        assert!(built.vips.iter().all(|v| v.usable() == 0));
        assert_eq!(
            built.vips[0].reals[0].plan,
            RealPlan::Absent(AbsentCause::Unchecked)
        );
    }

    /// The fragment peers, classes, group membership and failover addresses reach the
    /// snapshot; the peers' table is every node's table (the same whatever the order) and is
    /// kept across builds while the peers do not change.
    #[test]
    fn fragments_classes_and_failover_reach_the_snapshot() {
        let text = |peers: &str| {
            format!(
                r#"
[node]
name = "n"
address_v4 = "10.0.0.10"
[dataplane]
interfaces = ["eth0"]
[fragments]
peers = [{peers}]
table_size = 251
[[vip_class]]
name = "web"
prefixes = ["10.100.0.0/16"]
[[pool]]
name = "web"
[pool.health]
method = "none"
[[pool.backend]]
address = "10.1.0.1"
[[vip]]
address = "10.100.1.1"
port = 80
protocol = "udp"
pools = ["web"]
table_size = 251
class = "web"
fragments = true
failover = "10.100.2.1"
"#
            )
        };
        let a = from_toml_str("t.toml", &text(r#""10.0.0.10", "10.0.0.11", "10.0.0.12""#)).unwrap();
        let b = from_toml_str("t.toml", &text(r#""10.0.0.12", "10.0.0.10", "10.0.0.11""#)).unwrap();
        let (_, ids) = Ids::new()
            .assign(&a, Instant::now(), std::time::Duration::ZERO)
            .unwrap();
        let built = build(&a, &ids, &states(&a, |_| up()), 1, None).unwrap();
        let snap = &built.snapshot;
        assert!(snap.is_consistent());
        assert_eq!(snap.peers.addrs.len(), 3);
        assert_eq!(snap.peers.table.len(), 251);
        assert_eq!(
            snap.peers
                .self_index
                .map(|i| snap.peers.addrs[i].to_string()),
            Some("10.0.0.10".into())
        );
        assert_eq!(snap.classes.len(), 1);
        let vip = snap.vips.values().next().unwrap();
        assert!(vip.flags.fragments);
        assert_eq!(
            vip.failover.map(|a| a.to_string()),
            Some("10.100.2.1".into())
        );
        assert_eq!(vip.group.map(|g| (g.class.0, g.bits)), Some((0, 8)));
        // another order, another build: the same table
        let (_, ids_b) = Ids::new()
            .assign(&b, Instant::now(), std::time::Duration::ZERO)
            .unwrap();
        let other = build(&b, &ids_b, &states(&b, |_| up()), 1, None).unwrap();
        assert_eq!(other.snapshot.peers.table, snap.peers.table);
        assert_eq!(other.snapshot.peers.addrs, snap.peers.addrs);
        // unchanged peers: the previous table is shared
        let again = build(&a, &ids, &states(&a, |_| up()), 2, Some(&built)).unwrap();
        assert!(Arc::ptr_eq(&again.snapshot.peers.table, &snap.peers.table));
    }
}
