//! The reader side of any data plane that runs `stator_core::Forwarder`s in user space: the
//! counters summed over them, the connection tables looked up and walked, the clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use stator_core::{
    Counter, CtEntry, CtMode, DropReason, FlowKey, Forwarder, RealId, Traffic, VipId,
};

use super::clock::Clock;
use crate::PlaneError;
use crate::{PlaneCounters, PlaneReader};

/// One packet thread's forwarder, behind the lock its thread takes once per batch.
pub type Shard = Arc<Mutex<Forwarder>>;

/// Locks a shard. A packet thread that panicked mid-packet leaves counters and a table that
/// are still plain values (at worst one packet's updates half done), so the lock stays usable.
pub fn lock_shard(shard: &Mutex<Forwarder>) -> MutexGuard<'_, Forwarder> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The forwarders of a data plane, in packet-thread order. A per-thread plane (AF_XDP, the
/// paper's §3.1) has one single-CPU `Forwarder` per thread; a plane with one shared table
/// has one `Forwarder` whose CPU indexes are the threads.
#[derive(Debug, Clone)]
pub struct Shards {
    shards: Arc<[Shard]>,
}

impl Shards {
    /// The given forwarders (at least one).
    pub fn new(shards: Vec<Shard>) -> Self {
        Self {
            shards: shards.into(),
        }
    }

    /// The forwarders.
    pub fn all(&self) -> &[Shard] {
        &self.shards
    }

    fn each<T>(&self, mut f: impl FnMut(&Forwarder) -> T) -> Vec<T> {
        self.shards.iter().map(|s| f(&lock_shard(s))).collect()
    }

    /// Every counter and drop reason, summed over every forwarder and CPU index.
    pub fn counters(&self) -> PlaneCounters {
        let mut global = vec![0u64; Counter::ALL.len()];
        let mut drops = vec![0u64; DropReason::ALL.len()];
        for (g, d) in self.each(|f| {
            let mut g = vec![0u64; Counter::ALL.len()];
            let mut d = vec![0u64; DropReason::ALL.len()];
            for cpu in 0..f.cpus() {
                let c = f.counters(cpu);
                for (i, k) in Counter::ALL.iter().enumerate() {
                    g[i] = g[i].wrapping_add(c.get(*k));
                }
                for (i, r) in DropReason::ALL.iter().enumerate() {
                    d[i] = d[i].wrapping_add(c.drops(*r));
                }
            }
            (g, d)
        }) {
            for (a, b) in global.iter_mut().zip(g) {
                *a = a.wrapping_add(b);
            }
            for (a, b) in drops.iter_mut().zip(d) {
                *a = a.wrapping_add(b);
            }
        }
        PlaneCounters {
            counters: Counter::ALL.iter().copied().zip(global).collect(),
            drops: DropReason::ALL.iter().copied().zip(drops).collect(),
        }
    }

    fn traffic(&self, one: impl Fn(&stator_core::Counters) -> Traffic) -> Traffic {
        let mut t = Traffic::default();
        for part in self.each(|f| {
            (0..f.cpus())
                .map(|c| one(f.counters(c)))
                .collect::<Vec<_>>()
        }) {
            for p in part {
                t.packets = t.packets.wrapping_add(p.packets);
                t.bytes = t.bytes.wrapping_add(p.bytes);
            }
        }
        t
    }

    /// Packets and bytes matched for a VIP, over every forwarder and CPU index.
    pub fn vip_traffic(&self, id: VipId) -> Traffic {
        self.traffic(|c| c.vip(id))
    }

    /// Packets and bytes forwarded to a real, over every forwarder and CPU index.
    pub fn real_traffic(&self, id: RealId) -> Traffic {
        self.traffic(|c| c.real(id))
    }

    /// The entries of `flow` in every table, in table order: one per CPU index of a
    /// forwarder with per-CPU tables, one for a forwarder with a shared table; a zero
    /// `last_seen_ns` where a table has none. Empty when no table has one (the convention
    /// of [`PlaneReader::conntrack_lookup`]).
    pub fn conntrack_lookup(&self, flow: &FlowKey) -> Vec<CtEntry> {
        let entries: Vec<CtEntry> = self
            .each(|f| {
                tables(f)
                    .map(|cpu| f.conn_table(cpu).get(flow).unwrap_or_default())
                    .collect::<Vec<_>>()
            })
            .into_iter()
            .flatten()
            .collect();
        if entries.iter().all(|e| e.last_seen_ns == 0) {
            Vec::new()
        } else {
            entries
        }
    }

    /// Calls `f` with up to `limit` flows and their entries (laid out as
    /// [`conntrack_lookup`](Self::conntrack_lookup) lays them out). Each forwarder is locked
    /// only while its entries are copied, so packet threads wait for a copy, never for `f`;
    /// as with a walk of a live BPF map, a flow inserted meanwhile may be missed.
    pub fn conntrack_scan(&self, limit: usize, f: &mut dyn FnMut(&FlowKey, &[CtEntry])) -> usize {
        let width: usize = self.each(|fw| tables(fw).count()).into_iter().sum();
        let mut order: Vec<FlowKey> = Vec::new();
        let mut flows: HashMap<FlowKey, Vec<CtEntry>> = HashMap::new();
        let mut column = 0;
        for shard in self.shards.iter() {
            let fw = lock_shard(shard);
            for cpu in tables(&fw) {
                for (key, entry) in fw.conn_table(cpu).iter() {
                    let row = match flows.get_mut(&key) {
                        Some(row) => row,
                        None if order.len() < limit => {
                            order.push(key);
                            flows
                                .entry(key)
                                .or_insert_with(|| vec![CtEntry::default(); width])
                        }
                        None => continue,
                    };
                    if let Some(slot) = row.get_mut(column) {
                        *slot = entry;
                    }
                }
                column += 1;
            }
        }
        for key in &order {
            if let Some(entries) = flows.get(key) {
                f(key, entries);
            }
        }
        order.len()
    }
}

/// The CPU indexes whose tables are distinct: every one for per-CPU tables, index 0 for a
/// shared table.
fn tables(f: &Forwarder) -> std::ops::Range<usize> {
    match f.ct_mode() {
        CtMode::PerCpu => 0..f.cpus(),
        CtMode::Shared => 0..1,
    }
}

/// A [`PlaneReader`] over [`Shards`] and a [`Clock`]: what the admin API, `/metrics` and the
/// tracer read from a user-space data plane. Shared by [`CorePlane`](super::CorePlane) and
/// any plane that runs stator-core per thread.
#[derive(Debug, Clone)]
pub struct CoreReader {
    shards: Shards,
    clock: Arc<dyn Clock>,
}

impl CoreReader {
    /// A reader of `shards`, telling time with `clock` (the clock the forwarders are given).
    pub fn new(shards: Shards, clock: Arc<dyn Clock>) -> Self {
        Self { shards, clock }
    }
}

impl PlaneReader for CoreReader {
    fn counters(&self) -> Result<PlaneCounters, PlaneError> {
        Ok(self.shards.counters())
    }

    fn vip_traffic(&self, id: VipId) -> Result<Traffic, PlaneError> {
        Ok(self.shards.vip_traffic(id))
    }

    fn real_traffic(&self, id: RealId) -> Result<Traffic, PlaneError> {
        Ok(self.shards.real_traffic(id))
    }

    fn conntrack_lookup(&self, flow: &FlowKey) -> Result<Vec<CtEntry>, PlaneError> {
        Ok(self.shards.conntrack_lookup(flow))
    }

    fn conntrack_scan(
        &self,
        limit: usize,
        f: &mut dyn FnMut(&FlowKey, &[CtEntry]),
    ) -> Result<usize, PlaneError> {
        Ok(self.shards.conntrack_scan(limit, f))
    }

    fn clock_ns(&self) -> u64 {
        self.clock.now_ns()
    }
}
