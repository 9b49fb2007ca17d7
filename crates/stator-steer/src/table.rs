//! The steering decision in Rust: the same function as `bpf/stator_reuseport.bpf.c`, so user
//! space can predict, for any client, which worker the kernel will pick. Pure: no I/O, no clock.

use std::net::{IpAddr, SocketAddr};

use stator_abi::{STATOR_RP_MAX_TABLE_SIZE, STATOR_RP_MAX_WORKERS, STATOR_RP_PROBES};
use stator_hash::{MaglevBackend, MaglevTable, SlotChange, Toeplitz, next_prime};

use crate::rebalance::{name, rebalance};
use crate::{HashFields, Result, RssKey, SteerError};

/// Where a client's socket comes from, in the order the program tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pick {
    /// The worker of the client's own slot.
    Own(u32),
    /// Its own worker had no socket: the worker of the slot `step` (1..=STATOR_RP_PROBES) after
    /// it.
    Probe {
        /// The worker that takes the client.
        worker: u32,
        /// How many slots after the client's own.
        step: u32,
    },
    /// No probed slot had a socket: the kernel's own hash decides.
    Kernel,
}

impl Pick {
    /// The worker, unless the kernel decides.
    pub fn worker(self) -> Option<u32> {
        match self {
            Self::Own(w) | Self::Probe { worker: w, .. } => Some(w),
            Self::Kernel => None,
        }
    }
}

/// The default table size for `workers` workers: the smallest prime at or above
/// `max(100 × workers, 1000)`, so every worker's share of the slots is within 1% of the others'
/// (Maglev gives each ⌊M/N⌋ or ⌈M/N⌉ slots). Workers beyond `STATOR_RP_MAX_WORKERS` count as
/// that many.
pub fn default_table_size(workers: u32) -> u32 {
    let floor = (workers.min(STATOR_RP_MAX_WORKERS) * 100).max(1000);
    // There are primes between 1000 and 2^32 above every floor up to 102,400.
    next_prime(floor).unwrap_or(MaglevTable::DEFAULT_SIZE)
}

/// A Maglev table over worker ids plus the hash that indexes it.
///
/// Worker `i` is the Maglev backend named `worker-<i>` with weight 1. A new table is Maglev's
/// table over all workers (Pseudocode 1). Later changes of the live set ([`Self::with_live`])
/// are made in place with the same preferences (see `rebalance.rs`): a slot changes only when
/// its worker left or its new worker just joined, and the live workers' shares stay within one
/// slot of each other. So a worker that leaves moves only its own clients, and one that joins
/// takes clients only from the busiest workers. (Rebuilding from scratch would also move a few
/// other clients: Maglev's tables are not minimally disruptive — Figure 12 of the paper.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SteeringTable {
    toeplitz: Toeplitz,
    key: RssKey,
    fields: HashFields,
    workers: u32,
    live: Vec<u32>,
    slots: Vec<u32>,
}

impl SteeringTable {
    /// A table of `table_size` slots over all `workers` workers (ids `0..workers`).
    ///
    /// # Errors
    /// [`SteerError::InvalidOption`] for 0 or more than `STATOR_RP_MAX_WORKERS` workers or a
    /// table size that is not a prime at most `STATOR_RP_MAX_TABLE_SIZE`.
    pub fn new(workers: u32, table_size: u32, key: RssKey, fields: HashFields) -> Result<Self> {
        if workers == 0 || workers > STATOR_RP_MAX_WORKERS {
            return Err(SteerError::InvalidOption {
                field: "workers",
                reason: format!("{workers} is not in 1..={STATOR_RP_MAX_WORKERS}"),
            });
        }
        if table_size > STATOR_RP_MAX_TABLE_SIZE || !stator_hash::is_prime(table_size) {
            return Err(SteerError::InvalidOption {
                field: "table_size",
                reason: format!(
                    "{table_size} is not a prime at most {STATOR_RP_MAX_TABLE_SIZE} (default for \
                     {workers} workers: {})",
                    default_table_size(workers)
                ),
            });
        }
        let live: Vec<u32> = (0..workers).collect();
        let slots = build(&live, table_size)?.slots().to_vec();
        Ok(Self {
            toeplitz: Toeplitz::new(*key.bytes()),
            key,
            fields,
            workers,
            live,
            slots,
        })
    }

    /// The table after the live set becomes `live` (any order, duplicates ignored): the slots of
    /// workers that left go to the live workers with the fewest slots, each taking the one it
    /// prefers; workers that joined take the slots they prefer from the busiest; every other
    /// slot keeps its worker.
    ///
    /// # Errors
    /// [`SteerError::UnknownWorker`] for an id at or above the capacity.
    pub fn with_live(&self, live: &[u32]) -> Result<Self> {
        let mut live = live.to_vec();
        live.sort_unstable();
        live.dedup();
        if let Some(&worker) = live.iter().find(|&&w| w >= self.workers) {
            return Err(SteerError::UnknownWorker {
                worker,
                workers: self.workers,
            });
        }
        let mut slots = self.slots.clone();
        rebalance(&mut slots, &self.live, &live);
        Ok(Self {
            live,
            slots,
            ..self.clone()
        })
    }

    /// The hash of a client, as the program computes it: Toeplitz over the address bytes (4 for
    /// IPv4, including an IPv4-mapped IPv6 address; 16 for IPv6), then the port (2 bytes, network
    /// order) with [`HashFields::AddrPort`].
    pub fn hash(&self, client: SocketAddr) -> u32 {
        let mut input = [0u8; 18];
        let len = match client.ip().to_canonical() {
            IpAddr::V4(a) => {
                input[..4].copy_from_slice(&a.octets());
                4
            }
            IpAddr::V6(a) => {
                input[..16].copy_from_slice(&a.octets());
                16
            }
        };
        let len = match self.fields {
            HashFields::Addr => len,
            HashFields::AddrPort => {
                input[len..len + 2].copy_from_slice(&client.port().to_be_bytes());
                len + 2
            }
        };
        self.toeplitz.hash(&input[..len])
    }

    /// The client's own slot, `hash % M`.
    pub fn slot(&self, client: SocketAddr) -> u32 {
        self.hash(client) % self.size()
    }

    /// The worker of the client's own slot (`None` when no worker is live).
    pub fn owner(&self, client: SocketAddr) -> Option<u32> {
        let worker = self.slots[self.slot(client) as usize];
        (worker < self.workers).then_some(worker)
    }

    /// What the program picks for `client` when `has_socket(worker)` says which workers have a
    /// socket in the group's socket array: its own slot's worker, else the first of the next
    /// `STATOR_RP_PROBES` slots whose worker has one, else the kernel's choice.
    pub fn pick(&self, client: SocketAddr, has_socket: impl Fn(u32) -> bool) -> Pick {
        let size = self.size();
        let slot = self.slot(client);
        for step in 0..=STATOR_RP_PROBES {
            // Both terms are below 2^24 + 8: no overflow.
            let index = (slot + step) % size;
            let worker = self.slots[index as usize];
            if worker >= self.workers || !has_socket(worker) {
                continue;
            }
            return if step == 0 {
                Pick::Own(worker)
            } else {
                Pick::Probe { worker, step }
            };
        }
        Pick::Kernel
    }

    /// The slots that differ from `old` to `self`, in increasing index order, with `self`'s
    /// workers: what to write into the program's table (the same notion as
    /// `MaglevTable::delta`).
    ///
    /// # Errors
    /// [`SteerError::InvalidOption`] when the sizes differ.
    pub fn delta(&self, old: &Self) -> Result<Vec<SlotChange>> {
        if old.size() != self.size() {
            return Err(SteerError::InvalidOption {
                field: "table_size",
                reason: format!(
                    "cannot compare tables of {} and {} slots",
                    old.size(),
                    self.size()
                ),
            });
        }
        Ok(old
            .slots
            .iter()
            .zip(&self.slots)
            .zip(0u32..)
            .filter(|((a, b), _)| a != b)
            .map(|((_, &id), index)| SlotChange { index, id })
            .collect())
    }

    /// The slots: worker ids, [`stator_abi::STATOR_RP_NO_WORKER`] where none is live.
    pub fn slots(&self) -> &[u32] {
        &self.slots
    }

    /// The table size M.
    pub fn size(&self) -> u32 {
        // The length is a prime below 2^24 (checked in `new`).
        self.slots.len() as u32
    }

    /// Slots held by `worker`.
    pub fn slot_count(&self, worker: u32) -> u32 {
        self.slots.iter().filter(|&&w| w == worker).count() as u32
    }

    /// The live workers, ascending.
    pub fn live(&self) -> &[u32] {
        &self.live
    }

    /// The capacity: worker ids are below it.
    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// The Toeplitz key.
    pub fn key(&self) -> RssKey {
        self.key
    }

    /// The hashed fields.
    pub fn fields(&self) -> HashFields {
        self.fields
    }
}

// `MaglevTable::NO_BACKEND` is what the program reads as "no worker".
const _: () = assert!(MaglevTable::NO_BACKEND == stator_abi::STATOR_RP_NO_WORKER);

/// The Maglev table over `live` worker ids.
fn build(live: &[u32], size: u32) -> Result<MaglevTable> {
    let names: Vec<String> = live.iter().map(|&w| name(w)).collect();
    let backends: Vec<MaglevBackend<'_>> = live
        .iter()
        .zip(&names)
        .map(|(&id, name)| MaglevBackend::new(name, 1, id))
        .collect();
    Ok(MaglevTable::build(&backends, size)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn table(workers: u32) -> SteeringTable {
        SteeringTable::new(
            workers,
            default_table_size(workers),
            RssKey::microsoft(),
            HashFields::Addr,
        )
        .unwrap()
    }

    fn v4(a: u8, b: u8, port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, a, b)), port)
    }

    #[test]
    fn hash_is_the_toeplitz_of_the_address_bytes() {
        let t = table(4);
        let c = v4(1, 2, 4000);
        let want = Toeplitz::default().hash(&[10, 0, 1, 2]);
        assert_eq!(t.hash(c), want);
        // the port does not matter by default, and an IPv4-mapped address is its IPv4 address
        assert_eq!(t.hash(v4(1, 2, 9)), want);
        let mapped = SocketAddr::new(IpAddr::V6(Ipv4Addr::new(10, 0, 1, 2).to_ipv6_mapped()), 1);
        assert_eq!(t.hash(mapped), want);
        // with the port: address then port, network order
        let tp = SteeringTable::new(4, 1009, RssKey::microsoft(), HashFields::AddrPort).unwrap();
        assert_eq!(
            tp.hash(c),
            Toeplitz::default().hash(&[10, 0, 1, 2, 0x0f, 0xa0])
        );
        let v6: Ipv6Addr = "fd00::1:2".parse().unwrap();
        let mut input = v6.octets().to_vec();
        input.extend_from_slice(&4000u16.to_be_bytes());
        assert_eq!(
            tp.hash(SocketAddr::new(IpAddr::V6(v6), 4000)),
            Toeplitz::default().hash(&input)
        );
    }

    #[test]
    fn workers_share_the_slots_within_one_percent() {
        let t = table(7);
        let counts: Vec<u32> = (0..7).map(|w| t.slot_count(w)).collect();
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(max - min <= 1, "{counts:?}");
        assert_eq!(counts.iter().sum::<u32>(), t.size());
        // after a worker leaves, the others still share within one slot
        let six = t.with_live(&[0, 1, 2, 4, 5, 6]).unwrap();
        let counts: Vec<u32> = [0, 1, 2, 4, 5, 6]
            .iter()
            .map(|&w| six.slot_count(w))
            .collect();
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(max - min <= 1, "{counts:?}");
    }

    #[test]
    fn removing_a_worker_moves_only_its_slots() {
        let all = table(8);
        let without = all.with_live(&[0, 1, 2, 4, 5, 6, 7]).unwrap();
        let delta = without.delta(&all).unwrap();
        assert!(!delta.is_empty());
        for change in &delta {
            assert_eq!(
                all.slots()[change.index as usize],
                3,
                "slot {}",
                change.index
            );
            assert_ne!(change.id, 3);
        }
        assert_eq!(delta.len() as u32, all.slot_count(3));
        // adding it back moves slots only to it, and it gets its share again
        let back = without.with_live(&(0..8).collect::<Vec<_>>()).unwrap();
        for change in back.delta(&without).unwrap() {
            assert_eq!(change.id, 3, "slot {}", change.index);
        }
        let counts: Vec<u32> = (0..8).map(|w| back.slot_count(w)).collect();
        assert!(
            counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
            "{counts:?}"
        );
    }

    /// Why changes are made in place: a fresh Maglev table over the remaining workers also moves
    /// slots between workers that stayed (the paper's Figure 12); in place, none move.
    #[test]
    fn a_rebuild_would_move_other_workers_slots_in_place_does_not() {
        let mut rebuild_moves_others = 0;
        for n in 2..=16u32 {
            let all = table(n);
            let live: Vec<u32> = (0..n).filter(|&w| w != n / 2).collect();
            let rebuilt = build(&live, all.size()).unwrap();
            let others = all
                .slots()
                .iter()
                .zip(rebuilt.slots())
                .filter(|(a, b)| **a != n / 2 && a != b)
                .count();
            let in_place = all.with_live(&live).unwrap();
            let in_place_others = in_place
                .delta(&all)
                .unwrap()
                .iter()
                .filter(|c| all.slots()[c.index as usize] != n / 2)
                .count();
            println!(
                "{n} workers, M = {}, worker {} leaves: a rebuild moves {others} slots of other \
                 workers ({:.2}% of the table), in place {in_place_others}",
                all.size(),
                n / 2,
                100.0 * others as f64 / f64::from(all.size())
            );
            assert_eq!(in_place_others, 0);
            rebuild_moves_others += others;
        }
        assert!(
            rebuild_moves_others > 0,
            "Maglev rebuilds became minimally disruptive?"
        );
    }

    /// Filling an empty table in place is Maglev's Pseudocode 1: the same table as stator-hash
    /// builds.
    #[test]
    fn filling_an_empty_table_is_maglevs_table() {
        let all = table(12);
        let empty = all.with_live(&[]).unwrap();
        assert!(
            empty
                .slots()
                .iter()
                .all(|&s| s == stator_abi::STATOR_RP_NO_WORKER)
        );
        let refilled = empty.with_live(&(0..12).collect::<Vec<_>>()).unwrap();
        assert_eq!(refilled.slots(), all.slots());
    }

    /// Random joins and departures: a slot changes only when its worker left or its new worker
    /// joined, and the live workers' shares stay within one slot of each other.
    #[test]
    fn random_changes_disturb_only_the_workers_that_change() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut t = table(16);
        for round in 0..200 {
            let mut live: Vec<u32> = (0..16).filter(|_| rng.random_bool(0.85)).collect();
            if live.is_empty() {
                live.push(rng.random_range(0..16));
            }
            let next = t.with_live(&live).unwrap();
            for change in next.delta(&t).unwrap() {
                let old = t.slots()[change.index as usize];
                let left = !live.contains(&old);
                let joined = !t.live().contains(&change.id);
                assert!(
                    left || joined,
                    "round {round}: slot {} moved {old} -> {}",
                    change.index,
                    change.id
                );
            }
            let counts: Vec<u32> = live.iter().map(|&w| next.slot_count(w)).collect();
            let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(max - min <= 1, "round {round}: {counts:?}");
            t = next;
        }
    }

    #[test]
    fn pick_probes_past_missing_sockets_then_gives_up() {
        let t = table(4);
        let c = v4(7, 7, 1);
        let own = t.owner(c).unwrap();
        assert_eq!(t.pick(c, |_| true), Pick::Own(own));
        match t.pick(c, |w| w != own) {
            Pick::Probe { worker, step } => {
                assert_ne!(worker, own);
                let slot = (t.slot(c) + step) % t.size();
                assert_eq!(t.slots()[slot as usize], worker);
                for s in 1..step {
                    assert_eq!(t.slots()[((t.slot(c) + s) % t.size()) as usize], own);
                }
            }
            other => panic!("expected a probe, got {other:?}"),
        }
        assert_eq!(t.pick(c, |_| false), Pick::Kernel);
        let none = t.with_live(&[]).unwrap();
        assert_eq!(none.owner(c), None);
        assert_eq!(none.pick(c, |_| true), Pick::Kernel);
    }

    #[test]
    fn bad_options_are_rejected() {
        let k = RssKey::microsoft();
        assert!(SteeringTable::new(0, 1009, k, HashFields::Addr).is_err());
        assert!(SteeringTable::new(2000, 1009, k, HashFields::Addr).is_err());
        let e = SteeringTable::new(2, 1000, k, HashFields::Addr).unwrap_err();
        assert!(e.to_string().contains("default for 2 workers: 1009"), "{e}");
        let e = table(2).with_live(&[0, 2]).unwrap_err();
        assert!(
            matches!(
                e,
                SteerError::UnknownWorker {
                    worker: 2,
                    workers: 2
                }
            ),
            "{e}"
        );
    }
}
