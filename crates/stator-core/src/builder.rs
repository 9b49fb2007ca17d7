//! A convenience builder of [`Snapshot`]s: VIPs and their backends in, ids and Maglev tables out.
//!
//! Tests, benchmarks and the `stator xdp` tooling use it to describe a configuration the way a
//! person would ("VIP 10.0.0.10:80/tcp over backends a, b, c") and get a complete snapshot. The
//! controller builds snapshots from validated configuration with its own id allocator (ids must
//! survive reloads); this builder simply numbers VIPs and reals in insertion order.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use stator_hash::{MaglevBackend, MaglevError, MaglevTable};

use crate::snapshot::{
    ClassId, Encap, NodeParams, Peers, Prefix, Proto, Real, RealId, RealState, Snapshot, Vip,
    VipFlags, VipGroup, VipId, VipKey,
};

/// A backend of a VIP being built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSpec {
    /// Stable name (Maglev permutation seed).
    pub name: String,
    /// Address.
    pub addr: IpAddr,
    /// Weight (0 = no new flows).
    pub weight: u32,
    /// Usable or draining (draining backends get no slots).
    pub state: RealState,
    /// Encapsulation.
    pub encap: Encap,
}

impl BackendSpec {
    /// A usable GRE backend of weight 1 named after its address.
    pub fn new(addr: IpAddr) -> Self {
        Self {
            name: addr.to_string(),
            addr,
            weight: 1,
            state: RealState::Usable,
            encap: Encap::Gre,
        }
    }

    /// Sets the encapsulation.
    pub fn encap(mut self, encap: Encap) -> Self {
        self.encap = encap;
        self
    }

    /// Sets the weight.
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// Sets the state.
    pub fn state(mut self, state: RealState) -> Self {
        self.state = state;
        self
    }
}

/// Builds a [`Snapshot`].
#[derive(Debug, Clone, Default)]
pub struct SnapshotBuilder {
    node: NodeParams,
    generation: u64,
    vips: Vec<(VipKey, VipFlags, u32, Vec<BackendSpec>)>,
    failover: BTreeMap<VipKey, IpAddr>,
    groups: BTreeMap<VipKey, VipGroup>,
    classes: BTreeMap<Prefix, ClassId>,
    peers: Option<(Vec<IpAddr>, Option<usize>, u32)>,
}

impl SnapshotBuilder {
    /// A builder with default node parameters.
    pub fn new(node: NodeParams) -> Self {
        Self {
            node,
            ..Self::default()
        }
    }

    /// Gives the VIP `key` (added before or after) a failover address (§10.1).
    pub fn failover(mut self, key: VipKey, addr: IpAddr) -> Self {
        self.failover.insert(key, addr);
        self
    }

    /// Makes the VIP `key` a group VIP of `class` with a suffix of `bits` bits (§3.1).
    pub fn group(mut self, key: VipKey, class: u16, bits: u8) -> Self {
        self.groups.insert(
            key,
            VipGroup {
                class: ClassId(class),
                bits,
            },
        );
        self
    }

    /// Adds a prefix group of `class` (host bits are cleared).
    pub fn class(mut self, addr: IpAddr, len: u8, class: u16) -> Self {
        if let Some(p) = Prefix::new(addr, len) {
            self.classes.insert(p, ClassId(class));
        }
        self
    }

    /// Sets the fragment peers: their addresses (named by their address in the Maglev table),
    /// which one is this node, and the table size (prime).
    pub fn peers(mut self, addrs: Vec<IpAddr>, self_index: Option<usize>, table_size: u32) -> Self {
        self.peers = Some((addrs, self_index, table_size));
        self
    }

    /// Sets the generation number recorded in the snapshot.
    pub fn generation(mut self, generation: u64) -> Self {
        self.generation = generation;
        self
    }

    /// Adds a VIP with its Maglev table size (prime) and backends.
    pub fn vip(
        mut self,
        addr: IpAddr,
        port: u16,
        proto: Proto,
        table_size: u32,
        backends: Vec<BackendSpec>,
    ) -> Self {
        self.vips.push((
            VipKey { addr, port, proto },
            VipFlags::default(),
            table_size,
            backends,
        ));
        self
    }

    /// Adds a VIP with flags.
    pub fn vip_with_flags(
        mut self,
        key: VipKey,
        flags: VipFlags,
        table_size: u32,
        backends: Vec<BackendSpec>,
    ) -> Self {
        self.vips.push((key, flags, table_size, backends));
        self
    }

    /// Numbers VIPs 0.. and reals 0.. in insertion order and builds every Maglev table.
    pub fn build(self) -> Result<Snapshot, MaglevError> {
        let mut snap = Snapshot {
            generation: self.generation,
            node: self.node,
            ..Snapshot::default()
        };
        let mut next_real = 0u32;
        for (i, (key, flags, size, backends)) in self.vips.into_iter().enumerate() {
            let vip_id = VipId(i as u32);
            let mut members = Vec::new();
            for b in &backends {
                let id = next_real;
                next_real += 1;
                snap.reals.insert(
                    RealId(id),
                    Real {
                        addr: b.addr,
                        vip: vip_id,
                        state: b.state,
                        encap: b.encap,
                    },
                );
                if b.state == RealState::Usable {
                    members.push(MaglevBackend::new(&b.name, b.weight, id));
                }
            }
            let table = MaglevTable::build(&members, size)?;
            let slots: Arc<[u32]> = if table.is_empty() {
                Arc::from(Vec::new())
            } else {
                Arc::from(table.slots())
            };
            snap.vips.insert(
                key,
                Vip {
                    id: vip_id,
                    flags,
                    table: slots,
                    failover: self.failover.get(&key).copied(),
                    group: self.groups.get(&key).copied(),
                    previous: None,
                },
            );
        }
        snap.classes = self.classes;
        if let Some((addrs, self_index, size)) = self.peers {
            snap.peers = peer_set(addrs, self_index, size)?;
        }
        Ok(snap)
    }
}

/// The fragment peers with their Maglev table, each named by its address and sorted, so that
/// every node that lists the same peers, in whatever order, builds the same table.
pub fn peer_set(
    addrs: Vec<IpAddr>,
    self_index: Option<usize>,
    table_size: u32,
) -> Result<Peers, MaglevError> {
    let me = self_index.and_then(|i| addrs.get(i).copied());
    let mut addrs = addrs;
    addrs.sort_unstable();
    addrs.dedup();
    let self_index = me.and_then(|m| addrs.iter().position(|a| *a == m));
    let names: Vec<String> = addrs.iter().map(IpAddr::to_string).collect();
    let members: Vec<MaglevBackend<'_>> = names
        .iter()
        .enumerate()
        // fewer than STATOR_MAX_PEERS, so the index fits
        .map(|(i, n)| MaglevBackend::new(n, 1, i as u32))
        .collect();
    let table = if members.is_empty() {
        Arc::from(Vec::new())
    } else {
        Arc::from(MaglevTable::build(&members, table_size)?.slots())
    };
    Ok(Peers {
        addrs,
        self_index,
        table,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(a: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 1, 0, a))
    }

    #[test]
    fn numbers_reals_and_keeps_draining_out_of_the_table() {
        let snap = SnapshotBuilder::new(NodeParams::default())
            .vip(
                ip(100),
                80,
                Proto::Tcp,
                13,
                vec![
                    BackendSpec::new(ip(1)),
                    BackendSpec::new(ip(2)).state(RealState::Draining),
                ],
            )
            .vip(ip(101), 0, Proto::Udp, 7, vec![])
            .build()
            .unwrap();
        assert_eq!(snap.reals.len(), 2);
        let web = &snap.vips[&VipKey {
            addr: ip(100),
            port: 80,
            proto: Proto::Tcp,
        }];
        assert_eq!(web.table.len(), 13);
        assert!(
            web.table.iter().all(|&r| r == 0),
            "only the usable real 0 has slots"
        );
        let empty = &snap.vips[&VipKey {
            addr: ip(101),
            port: 0,
            proto: Proto::Udp,
        }];
        assert!(empty.table.is_empty());
        assert_eq!(empty.id, VipId(1));
    }
}
