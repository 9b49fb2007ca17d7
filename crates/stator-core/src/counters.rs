//! One CPU's counters: the global [`Counter`]s (`stator_counters`), drops by [`DropReason`]
//! (`stator_drops`), and packets/bytes per VIP and per real (`stator_vipstats`,
//! `stator_realstat`).

use stator_abi::{Counter, DropReason, STATOR_CNT_MAX, STATOR_DROP_MAX, Traffic};

use crate::snapshot::{RealId, VipId};

/// Counters of one CPU, or a sum of several ([`Counters::add`]).
///
/// The per-VIP and per-real arrays grow to the largest id counted so far (ids are bounded by
/// `STATOR_MAX_VIPS` / `STATOR_MAX_REALS`, which [`CompiledSnapshot`](crate::CompiledSnapshot)
/// enforces); ids never counted read as zero.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    global: [u64; STATOR_CNT_MAX as usize],
    drops: [u64; STATOR_DROP_MAX as usize],
    vips: Vec<Traffic>,
    reals: Vec<Traffic>,
}

impl Counters {
    /// All zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// A global counter.
    pub fn get(&self, c: Counter) -> u64 {
        self.global.get(c as usize).copied().unwrap_or(0)
    }

    /// Drops for one reason.
    pub fn drops(&self, r: DropReason) -> u64 {
        self.drops.get(r as usize).copied().unwrap_or(0)
    }

    /// The global counters in index order (as the `stator_counters` array).
    pub fn global(&self) -> &[u64] {
        &self.global
    }

    /// Drops in reason-code order, index 0 (`none`) unused (as the `stator_drops` array).
    pub fn drop_array(&self) -> &[u64] {
        &self.drops
    }

    /// One VIP's traffic.
    pub fn vip(&self, id: VipId) -> Traffic {
        self.vips.get(id.0 as usize).copied().unwrap_or_default()
    }

    /// One real's traffic.
    pub fn real(&self, id: RealId) -> Traffic {
        self.reals.get(id.0 as usize).copied().unwrap_or_default()
    }

    /// VIPs with traffic, in id order.
    pub fn vips(&self) -> impl Iterator<Item = (VipId, Traffic)> + '_ {
        nonzero(&self.vips).map(|(i, t)| (VipId(i), t))
    }

    /// Reals with traffic, in id order.
    pub fn reals(&self) -> impl Iterator<Item = (RealId, Traffic)> + '_ {
        nonzero(&self.reals).map(|(i, t)| (RealId(i), t))
    }

    /// The sum of the action counters (`act_*`): the number of packets processed.
    pub fn packets(&self) -> u64 {
        [
            Counter::ActAborted,
            Counter::ActDrop,
            Counter::ActPass,
            Counter::ActTx,
            Counter::ActRedirect,
        ]
        .into_iter()
        .map(|c| self.get(c))
        .sum()
    }

    /// Adds `other` to these counters (to sum CPUs).
    pub fn add(&mut self, other: &Counters) {
        for (a, b) in self.global.iter_mut().zip(other.global) {
            *a = a.wrapping_add(b);
        }
        for (a, b) in self.drops.iter_mut().zip(other.drops) {
            *a = a.wrapping_add(b);
        }
        add_traffic(&mut self.vips, &other.vips);
        add_traffic(&mut self.reals, &other.reals);
    }

    #[inline]
    pub(crate) fn inc(&mut self, c: Counter) {
        if let Some(v) = self.global.get_mut(c as usize) {
            *v = v.wrapping_add(1);
        }
    }

    #[inline]
    pub(crate) fn inc_drop(&mut self, r: DropReason) {
        if let Some(v) = self.drops.get_mut(r as usize) {
            *v = v.wrapping_add(1);
        }
    }

    #[inline]
    pub(crate) fn count_vip(&mut self, id: u32, bytes: usize) {
        count(&mut self.vips, id, bytes);
    }

    #[inline]
    pub(crate) fn count_real(&mut self, id: u32, bytes: usize) {
        count(&mut self.reals, id, bytes);
    }
}

#[inline]
fn count(v: &mut Vec<Traffic>, id: u32, bytes: usize) {
    let i = id as usize;
    if i >= v.len() {
        v.resize(i + 1, Traffic::default());
    }
    if let Some(t) = v.get_mut(i) {
        t.packets = t.packets.wrapping_add(1);
        t.bytes = t.bytes.wrapping_add(bytes as u64);
    }
}

fn add_traffic(into: &mut Vec<Traffic>, from: &[Traffic]) {
    if into.len() < from.len() {
        into.resize(from.len(), Traffic::default());
    }
    for (a, b) in into.iter_mut().zip(from) {
        a.packets = a.packets.wrapping_add(b.packets);
        a.bytes = a.bytes.wrapping_add(b.bytes);
    }
}

fn nonzero(v: &[Traffic]) -> impl Iterator<Item = (u32, Traffic)> + '_ {
    // Ids are below STATOR_MAX_REALS, so the index fits a u32.
    v.iter()
        .enumerate()
        .filter(|(_, t)| t.packets != 0)
        .map(|(i, t)| (i as u32, *t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_sums() {
        let mut a = Counters::new();
        a.inc(Counter::ActPass);
        a.inc(Counter::NonIp);
        a.inc_drop(DropReason::Fib);
        a.inc(Counter::ActDrop);
        a.count_vip(3, 60);
        a.count_real(7, 60);
        let mut b = Counters::new();
        b.count_vip(3, 40);
        b.count_vip(9, 1);
        b.inc(Counter::ActTx);
        b.add(&a);
        assert_eq!(b.packets(), 3);
        assert_eq!(b.get(Counter::NonIp), 1);
        assert_eq!(b.drops(DropReason::Fib), 1);
        assert_eq!(
            b.vip(VipId(3)),
            Traffic {
                packets: 2,
                bytes: 100
            }
        );
        assert_eq!(b.vip(VipId(1000)), Traffic::default());
        assert_eq!(b.vips().map(|(id, _)| id.0).collect::<Vec<_>>(), [3, 9]);
        assert_eq!(b.reals().count(), 1);
        assert_eq!(b.real(RealId(7)).bytes, 60);
        assert_eq!(b.global().len(), STATOR_CNT_MAX as usize);
        assert_eq!(b.drop_array()[DropReason::Fib as usize], 1);
    }
}
