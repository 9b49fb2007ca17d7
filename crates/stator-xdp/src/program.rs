//! A [`Snapshot`] in map form, one generation at a time: encoding a [`ValidSnapshot`] into map
//! records (the rules were checked by stator-core; only this plane's capacity is checked here),
//! writing a generation's half of every map, and reading a generation back into a `Snapshot`.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use stator_abi::{
    Encap, NodeCfg, PrevRec, Real as RealRec, STATOR_FAMILY_NONE, STATOR_FAMILY_V4,
    STATOR_FAMILY_V6, STATOR_MAX_REALS, STATOR_MAX_VIPS, STATOR_NODE_F_GROUPS,
    STATOR_NODE_F_ICMP_ECHO, STATOR_REAL_F_DRAINING, STATOR_REAL_F_PREVIOUS, STATOR_REAL_F_USABLE,
    STATOR_VADDR_F_FRAGS, STATOR_VADDR_F_INLINE, STATOR_VADDR_F_NODE, STATOR_VADDR_F_TCP_ANY,
    STATOR_VADDR_F_TCP_PORTS, STATOR_VADDR_F_UDP_ANY, STATOR_VADDR_F_UDP_PORTS,
    STATOR_VADDR_INLINE, STATOR_VIP_F_FAILOVER, STATOR_VIP_F_FRAGMENTS, STATOR_VIP_F_NO_CT,
    STATOR_VTAB_PROBES, STATOR_VTAB_SLOTS, Vaddr, VaddrVip, Vip as VipRec, VipKey as VipKeyRec,
    vtab_hash,
};
use stator_core::{
    NodeParams, Proto, Real, RealId, RealState, Snapshot, ValidSnapshot, Vip, VipFlags, VipId,
    VipKey,
};

use crate::cluster::{ClusterRecs, encode_cluster};
use crate::error::{Result, XdpError};
use crate::maps::Maps;
use crate::sys::Rec;

/// One generation's worth of map records.
#[derive(Debug, Clone)]
pub(crate) struct Encoded {
    pub(crate) cfg: NodeCfg,
    /// This generation's half of `stator_vtab` (`STATOR_VTAB_SLOTS` slots), laid out for
    /// `cfg.vtab_seed`.
    pub(crate) vtab: Vec<Vaddr>,
    /// (key, value with an absolute table_off, table)
    pub(crate) vips: Vec<(VipKeyRec, VipRec, Arc<[u32]>)>,
    pub(crate) reals: Vec<(u32, RealRec)>,
    /// `stator_prev` entries of this half by VIP id, with their tables (second chance).
    pub(crate) prev: Vec<(u32, PrevRec, Arc<[u32]>)>,
    pub(crate) slots_used: u32,
    /// Peers, failover addresses, prefix groups and suffixes.
    pub(crate) cluster: ClusterRecs,
    /// `stator_trkeys[0]`.
    pub(crate) trace_keys: stator_abi::TraceKeys,
}

/// Address bytes (IPv4 in the first four), family tag.
pub(crate) fn addr_bytes(addr: IpAddr) -> ([u8; 16], u8) {
    let mut b = [0u8; 16];
    match addr {
        IpAddr::V4(a) => {
            b[..4].copy_from_slice(&a.octets());
            (b, STATOR_FAMILY_V4 as u8)
        }
        IpAddr::V6(a) => (a.octets(), STATOR_FAMILY_V6 as u8),
    }
}

pub(crate) fn addr_from(bytes: [u8; 16], family: u8) -> Option<IpAddr> {
    match u32::from(family) {
        STATOR_FAMILY_V4 => Some(IpAddr::V4(Ipv4Addr::new(
            bytes[0], bytes[1], bytes[2], bytes[3],
        ))),
        STATOR_FAMILY_V6 => Some(IpAddr::V6(Ipv6Addr::from(bytes))),
        _ => None,
    }
}

fn vip_name(key: &VipKey) -> String {
    let proto = key.proto;
    match key.addr {
        IpAddr::V4(a) => format!("{a}:{}/{proto}", key.port),
        IpAddr::V6(a) => format!("[{a}]:{}/{proto}", key.port),
    }
}

/// The node parameters as `stator_cfg` holds them.
pub(crate) fn encode_node(node: &NodeParams, config_generation: u64) -> NodeCfg {
    NodeCfg {
        src_v4: node.src_v4.map_or([0; 4], |a| a.octets()),
        src_v6: node.src_v6.map_or([0; 16], |a| a.octets()),
        flags: if node.icmp_echo {
            STATOR_NODE_F_ICMP_ECHO
        } else {
            0
        },
        tcp_timeout_ns: node.tcp_timeout_ns,
        udp_timeout_ns: node.udp_timeout_ns,
        flood_new_per_sec: node.flood_new_per_sec,
        gue_port: node.gue_port.to_be_bytes(),
        outer_ttl: node.outer_ttl,
        _pad0: 0,
        config_generation,
        vtab_seed: 0,
        trace_per_sec: node.trace_per_sec,
        peer_table_off: 0,
        peer_table_size: 0,
        frag_timeout_ns: node.frag_timeout_ns,
    }
}

/// Seeds [`vtab_layout`] tries before giving up. With at most `STATOR_MAX_VIPS` addresses in
/// `STATOR_VTAB_SLOTS` (load ≤ 1/4) and Robin Hood placement, the first seed almost always
/// fits; running out means the table constants were changed without thought.
const VTAB_SEED_TRIES: u32 = 4096;

/// Lays out the VIP-address table of one generation: the first seed (0, 1, …) under which every
/// address lies within `STATOR_VTAB_PROBES` slots of its home slot, and the slots. Linear
/// probing with Robin Hood placement (an entry farther from its home takes the slot of one
/// nearer to its own), which keeps the longest probe short; no slot is ever emptied, so a
/// lookup that stops at the first empty slot never stops before its address.
pub(crate) fn vtab_layout(addrs: &[Vaddr]) -> Result<(u32, Vec<Vaddr>)> {
    let n = STATOR_VTAB_SLOTS as usize;
    let mask = STATOR_VTAB_SLOTS - 1;
    let mut slots = vec![Vaddr::default(); n];
    // probe distance of each occupied slot's entry from its home
    let mut dist = vec![0u32; n];
    'seed: for seed in 0..VTAB_SEED_TRIES {
        if addrs.len() > n {
            break;
        }
        slots.fill(Vaddr::default());
        dist.fill(0);
        for a in addrs {
            let mut cur = *a;
            let mut d = 0u32;
            let mut i = vtab_hash(&cur.addr, cur.family, seed);
            loop {
                if d >= STATOR_VTAB_PROBES {
                    continue 'seed;
                }
                let slot = i as usize;
                if u32::from(slots[slot].family) == STATOR_FAMILY_NONE {
                    slots[slot] = cur;
                    dist[slot] = d;
                    break;
                }
                if dist[slot] < d {
                    std::mem::swap(&mut slots[slot], &mut cur);
                    std::mem::swap(&mut dist[slot], &mut d);
                }
                i = (i + 1) & mask;
                d += 1;
            }
        }
        return Ok((seed, slots));
    }
    Err(XdpError::invalid(format!(
        "{} VIP addresses do not fit the VIP-address table ({STATOR_VTAB_SLOTS} slots, \
         {STATOR_VTAB_PROBES} probes) under any of {VTAB_SEED_TRIES} seeds",
        addrs.len()
    )))
}

/// Encodes `snap` for generation `generation`, whose slots start at
/// `generation * slots_per_gen`. The snapshot's rules were checked once, by
/// [`ValidSnapshot`]; what is left to refuse is what this data plane has no room for: more
/// Maglev slots than a generation holds, or VIP addresses that do not fit `stator_vtab`.
pub(crate) fn encode(snap: &ValidSnapshot, generation: u32, slots_per_gen: u32) -> Result<Encoded> {
    let mut reals = Vec::with_capacity(snap.reals.len());
    for (id, real) in &snap.reals {
        let (addr, family) = addr_bytes(real.addr);
        reals.push((
            id.0,
            RealRec {
                addr,
                vip_id: real.vip.0,
                flags: match real.state {
                    RealState::Usable => STATOR_REAL_F_USABLE as u16,
                    RealState::Draining => STATOR_REAL_F_DRAINING as u16,
                    RealState::Previous => STATOR_REAL_F_PREVIOUS as u16,
                },
                family,
                encap: real.encap as u8,
            },
        ));
    }

    // (address, family) → its stator_vtab slot, VIPs inline while they fit
    let mut vaddrs: HashMap<([u8; 16], u8), (Vaddr, usize)> = HashMap::new();
    let mut vips = Vec::with_capacity(snap.vips.len());
    let base = u64::from(generation) * u64::from(slots_per_gen);
    let mut used: u64 = 0;
    for (key, vip) in &snap.vips {
        let size = vip.table.len();
        if used + size as u64 > u64::from(slots_per_gen) {
            return Err(XdpError::invalid(format!(
                "Maglev tables need more than the {slots_per_gen} slots per generation the \
                 forwarder was loaded with (VIP {}); load with a larger slots_per_gen",
                vip_name(key)
            )));
        }
        let (addr, family) = addr_bytes(key.addr);
        let flag = match (key.proto, key.port) {
            (Proto::Tcp, 0) => STATOR_VADDR_F_TCP_ANY,
            (Proto::Tcp, _) => STATOR_VADDR_F_TCP_PORTS,
            (Proto::Udp, 0) => STATOR_VADDR_F_UDP_ANY,
            (Proto::Udp, _) => STATOR_VADDR_F_UDP_PORTS,
        };
        let mut flags = 0;
        if vip.flags.no_conntrack {
            flags |= STATOR_VIP_F_NO_CT;
        }
        if vip.flags.fragments {
            flags |= STATOR_VIP_F_FRAGMENTS;
        }
        if vip.failover.is_some() {
            flags |= STATOR_VIP_F_FAILOVER;
        }
        let vip_rec = VipRec {
            vip_id: vip.id.0,
            flags,
            table_off: (base + used) as u32,
            table_size: size as u32,
        };
        let (va, count) = vaddrs.entry((addr, family)).or_insert_with(|| {
            (
                Vaddr {
                    addr,
                    family,
                    ..Vaddr::default()
                },
                0,
            )
        });
        va.flags |= flag;
        if vip.flags.fragments {
            va.flags |= STATOR_VADDR_F_FRAGS;
        }
        if let Some(e) = va.vips.get_mut(*count) {
            *e = VaddrVip {
                port: key.port.to_be_bytes(),
                proto: key.proto.number(),
                _pad0: 0,
                vip: vip_rec,
            };
        }
        *count += 1;
        vips.push((
            VipKeyRec {
                addr,
                port: key.port.to_be_bytes(),
                proto: key.proto.number(),
                family,
                generation: generation as u8,
                _pad0: [0; 3],
            },
            vip_rec,
            vip.table.clone(),
        ));
        used += size as u64;
    }
    // The previous tables (second chance, docs/forwarding.md §12.1) follow the VIPs' tables.
    let mut prev = Vec::new();
    for (key, vip) in &snap.vips {
        let Some(table) = vip.previous.as_ref().filter(|t| !t.is_empty()) else {
            continue;
        };
        if used + table.len() as u64 > u64::from(slots_per_gen) {
            return Err(XdpError::invalid(format!(
                "Maglev tables and the previous tables kept for second chance need more than \
                 the {slots_per_gen} slots per generation the forwarder was loaded with (VIP \
                 {}); load with a larger slots_per_gen or shorten encap.second_chance",
                vip_name(key)
            )));
        }
        let rec = PrevRec {
            table_off: (base + used) as u32,
            table_size: table.len() as u32,
        };
        prev.push((vip.id.0, rec, Arc::clone(table)));
        used += table.len() as u64;
    }
    // The node's own addresses receive redirects (docs/forwarding.md §2).
    let own = [
        snap.node.src_v4.map(IpAddr::V4),
        snap.node.src_v6.map(IpAddr::V6),
    ];
    for addr in own.into_iter().flatten().filter(|a| !a.is_unspecified()) {
        let (a, family) = addr_bytes(addr);
        let (va, _) = vaddrs.entry((a, family)).or_insert_with(|| {
            (
                Vaddr {
                    addr: a,
                    family,
                    ..Vaddr::default()
                },
                0,
            )
        });
        va.flags |= STATOR_VADDR_F_NODE;
    }
    // The peers' Maglev table follows the VIPs' in this generation's slots.
    let vip_recs = vips.iter().map(|(_, v, _)| (v.vip_id, *v)).collect();
    let cluster = encode_cluster(snap, generation, &vip_recs, (base + used) as u32)?;
    if used + cluster.peer_table.len() as u64 > u64::from(slots_per_gen) {
        return Err(XdpError::invalid(format!(
            "Maglev tables and the fragment peers' table need more than the {slots_per_gen} \
             slots per generation the forwarder was loaded with"
        )));
    }
    let peer_table_off = (base + used) as u32;
    used += cluster.peer_table.len() as u64;
    // An address whose VIPs all fit carries them inline (the rest of the slot's entries stay
    // zero, protocol 0 = unused); the flags stay set either way (the ICMP-error path may look
    // up another address's VIPs in stator_vips under them). Sorted: one layout per VIP set.
    let mut addrs: Vec<Vaddr> = vaddrs
        .into_values()
        .map(|(mut va, count)| {
            if count <= STATOR_VADDR_INLINE as usize {
                va.flags |= STATOR_VADDR_F_INLINE;
            } else {
                va.vips = Default::default();
            }
            va
        })
        .collect();
    addrs.sort_by_key(|va| (va.family, va.addr));
    let (seed, vtab) = vtab_layout(&addrs)?;
    let mut cfg = encode_node(&snap.node, snap.generation);
    cfg.vtab_seed = seed;
    if !cluster.classes.is_empty() {
        cfg.flags |= STATOR_NODE_F_GROUPS;
    }
    cfg.peer_table_off = peer_table_off;
    cfg.peer_table_size = cluster.peer_table.len() as u32;
    Ok(Encoded {
        cfg,
        vtab,
        vips,
        reals,
        prev,
        slots_used: used as u32,
        cluster,
        trace_keys: snap.node.trace_keys,
    })
}

impl Maps {
    /// Writes generation `generation` completely: its stale hash entries are deleted, its halves
    /// of `stator_vtab` and `stator_reals` are rewritten (empty slots and unused ids zeroed), tables are copied into its half of
    /// `stator_slots`, and `stator_cfg[generation]` last. Packets must not be using it.
    pub(crate) fn write_generation(&mut self, generation: u32, enc: &Encoded) -> Result<()> {
        let g = generation as u8;
        // hash maps: delete what this half holds and the new snapshot does not, then upsert
        let wanted_vips: HashSet<VipKeyRec> = enc.vips.iter().map(|(k, _, _)| *k).collect();
        let stale: Vec<Rec<VipKeyRec>> = self
            .vips
            .keys()
            .filter_map(std::result::Result::ok)
            .filter(|k| k.0.generation == g && !wanted_vips.contains(&k.0))
            .collect();
        for k in stale {
            self.vips
                .remove(&k)
                .map_err(|e| XdpError::map("stator_vips", "delete", e))?;
        }
        // the whole half of stator_vtab: empty slots included, so nothing of an older layout
        // (another seed) survives
        let base = generation * STATOR_VTAB_SLOTS;
        for (i, v) in enc.vtab.iter().enumerate() {
            self.vtab.write(base + i as u32, *v);
        }
        for (k, v, table) in &enc.vips {
            for (i, &slot) in table.iter().enumerate() {
                self.slots.write(v.table_off + i as u32, slot);
            }
            self.vips
                .insert(Rec(*k), Rec(*v), 0)
                .map_err(|e| XdpError::map("stator_vips", "update", e))?;
        }
        let base = generation * STATOR_MAX_REALS;
        for i in 0..STATOR_MAX_REALS {
            self.reals.write(base + i, RealRec::default());
        }
        for (id, r) in &enc.reals {
            self.reals.write(base + id, *r);
        }
        match &self.prev {
            Some(prev) => {
                let base = generation * STATOR_MAX_VIPS;
                for i in 0..STATOR_MAX_VIPS {
                    prev.write(base + i, PrevRec::default());
                }
                for (id, rec, table) in &enc.prev {
                    for (i, &slot) in table.iter().enumerate() {
                        self.slots.write(rec.table_off + i as u32, slot);
                    }
                    if *id < STATOR_MAX_VIPS {
                        prev.write(base + id, *rec);
                    }
                }
            }
            None if !enc.prev.is_empty() => {
                return Err(XdpError::invalid(
                    "the pinned maps predate second chance (no stator_prev): restart the \
                     forwarder to load this build's maps",
                ));
            }
            None => {}
        }
        self.write_cluster(generation, &enc.cluster)?;
        self.cfg.write(generation, enc.cfg);
        // Not per generation: a key verifies from the moment it is written (a packet of the
        // old generation may be checked with the new keys; nothing else depends on them).
        self.set_trace_keys(&enc.trace_keys)?;
        Ok(())
    }

    /// Reads generation `generation` back into a [`Snapshot`]; `None` when it was never
    /// programmed (`stator_cfg[gen].outer_ttl == 0`).
    pub(crate) fn read_generation(&self, generation: u32) -> Result<Option<Snapshot>> {
        let cfg = self.cfg.read(generation);
        if cfg.outer_ttl == 0 {
            return Ok(None);
        }
        let src_v4 = (cfg.src_v4 != [0; 4]).then(|| Ipv4Addr::from(cfg.src_v4));
        let src_v6 = (cfg.src_v6 != [0; 16]).then(|| Ipv6Addr::from(cfg.src_v6));
        let mut snap = Snapshot {
            generation: cfg.config_generation,
            node: NodeParams {
                src_v4,
                src_v6,
                icmp_echo: cfg.flags & STATOR_NODE_F_ICMP_ECHO != 0,
                tcp_timeout_ns: cfg.tcp_timeout_ns,
                udp_timeout_ns: cfg.udp_timeout_ns,
                flood_new_per_sec: cfg.flood_new_per_sec,
                gue_port: u16::from_be_bytes(cfg.gue_port),
                outer_ttl: cfg.outer_ttl,
                frag_timeout_ns: cfg.frag_timeout_ns,
                trace_per_sec: cfg.trace_per_sec,
                trace_keys: self.trace_keys()?,
            },
            ..Snapshot::default()
        };
        for entry in self.vips.iter() {
            let (k, v) = entry.map_err(|e| XdpError::map("stator_vips", "iterate", e))?;
            let (k, v) = (k.0, v.0);
            if u32::from(k.generation) != generation {
                continue;
            }
            let proto = Proto::from_number(k.proto).ok_or_else(|| {
                XdpError::invalid(format!("stator_vips holds protocol {}", k.proto))
            })?;
            let addr = addr_from(k.addr, k.family)
                .ok_or_else(|| XdpError::invalid("stator_vips holds an unknown family"))?;
            let table: Vec<u32> = (0..v.table_size)
                .map(|i| self.slots.read(v.table_off + i))
                .collect();
            snap.vips.insert(
                VipKey {
                    addr,
                    port: u16::from_be_bytes(k.port),
                    proto,
                },
                Vip::new(
                    VipId(v.vip_id),
                    VipFlags {
                        no_conntrack: v.flags & STATOR_VIP_F_NO_CT != 0,
                        fragments: v.flags & STATOR_VIP_F_FRAGMENTS != 0,
                    },
                    Arc::from(table),
                ),
            );
        }
        if let Some(prev) = &self.prev {
            let base = generation * STATOR_MAX_VIPS;
            for vip in snap.vips.values_mut() {
                let p = prev.read(base + vip.id.0);
                if p.table_size != 0 {
                    let table: Vec<u32> = (0..p.table_size)
                        .map(|i| self.slots.read(p.table_off + i))
                        .collect();
                    vip.previous = Some(Arc::from(table));
                }
            }
        }
        let base = generation * STATOR_MAX_REALS;
        for id in 0..STATOR_MAX_REALS {
            let r = self.reals.read(base + id);
            if r.flags == 0 {
                continue;
            }
            let addr = addr_from(r.addr, r.family)
                .ok_or_else(|| XdpError::invalid(format!("real {id} has an unknown family")))?;
            snap.reals.insert(
                RealId(id),
                Real {
                    addr,
                    vip: VipId(r.vip_id),
                    state: if u32::from(r.flags) & STATOR_REAL_F_USABLE != 0 {
                        RealState::Usable
                    } else if u32::from(r.flags) & STATOR_REAL_F_DRAINING != 0 {
                        RealState::Draining
                    } else {
                        RealState::Previous
                    },
                    encap: Encap::from_code(r.encap).ok_or_else(|| {
                        XdpError::invalid(format!("real {id} has encap code {}", r.encap))
                    })?,
                },
            );
        }
        self.read_cluster(
            generation,
            &mut snap,
            (cfg.peer_table_off, cfg.peer_table_size),
        )?;
        Ok(Some(snap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stator_abi::STATOR_MAX_VIPS;
    use stator_core::{BackendSpec, SnapshotBuilder};

    fn v4(a: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, a))
    }

    fn node() -> NodeParams {
        NodeParams {
            src_v4: Some(Ipv4Addr::new(10, 0, 0, 254)),
            ..NodeParams::default()
        }
    }

    fn snap() -> Snapshot {
        SnapshotBuilder::new(node())
            .vip(v4(100), 80, Proto::Tcp, 13, vec![BackendSpec::new(v4(1))])
            .vip(v4(100), 0, Proto::Udp, 7, vec![BackendSpec::new(v4(2))])
            .vip(v4(101), 0, Proto::Tcp, 7, vec![])
            .build()
            .unwrap()
    }

    fn valid(s: Snapshot) -> ValidSnapshot {
        s.validated().unwrap()
    }

    /// The program's `stator_vtab_find` over one half: at most `STATOR_VTAB_PROBES` slots from
    /// the home slot, stopping at an empty one.
    fn find(vtab: &[Vaddr], seed: u32, addr: IpAddr) -> Option<Vaddr> {
        let (a, family) = addr_bytes(addr);
        let home = vtab_hash(&a, family, seed);
        (0..STATOR_VTAB_PROBES)
            .map(|i| vtab[((home + i) & (STATOR_VTAB_SLOTS - 1)) as usize])
            .take_while(|v| u32::from(v.family) != STATOR_FAMILY_NONE)
            .find(|v| v.family == family && v.addr == a)
    }

    #[test]
    fn vaddr_slots_carry_flags_and_inline_vips() {
        let e = encode(&valid(snap()), 1, 100).unwrap();
        assert_eq!(e.vtab.len(), STATOR_VTAB_SLOTS as usize);
        let used = e.vtab.iter().filter(|v| v.family != 0).count();
        assert_eq!(used, 3, "two VIP addresses and the node's own (redirects)");
        let a = find(&e.vtab, e.cfg.vtab_seed, v4(100)).expect("10.0.0.100 in stator_vtab");
        assert_eq!(
            a.flags,
            STATOR_VADDR_F_TCP_PORTS | STATOR_VADDR_F_UDP_ANY | STATOR_VADDR_F_INLINE
        );
        let mut inline: Vec<(u16, u8, u32)> = a
            .vips
            .iter()
            .filter(|v| v.proto != 0)
            .map(|v| (u16::from_be_bytes(v.port), v.proto, v.vip.table_size))
            .collect();
        inline.sort_unstable();
        assert_eq!(inline, vec![(0, 17, 7), (80, 6, 13)]);
        // the inline values are the stator_vips values
        for v in a.vips.iter().filter(|v| v.proto != 0) {
            assert!(
                e.vips
                    .iter()
                    .any(|(k, r, _)| k.port == v.port && k.proto == v.proto && *r == v.vip)
            );
        }
        let b = find(&e.vtab, e.cfg.vtab_seed, v4(101)).expect("10.0.0.101 in stator_vtab");
        assert_eq!(b.flags, STATOR_VADDR_F_TCP_ANY | STATOR_VADDR_F_INLINE);
        assert!(find(&e.vtab, e.cfg.vtab_seed, v4(102)).is_none());
    }

    #[test]
    fn an_address_with_more_vips_than_a_slot_holds_is_looked_up_in_stator_vips() {
        let mut b = SnapshotBuilder::new(node());
        for port in 1..=STATOR_VADDR_INLINE as u16 + 1 {
            b = b.vip(v4(100), port, Proto::Tcp, 7, vec![]);
        }
        let e = encode(&valid(b.build().unwrap()), 0, 100).unwrap();
        let a = find(&e.vtab, e.cfg.vtab_seed, v4(100)).unwrap();
        assert_eq!(a.flags, STATOR_VADDR_F_TCP_PORTS);
        assert!(a.vips.iter().all(|v| *v == VaddrVip::default()));
        assert_eq!(e.vips.len(), STATOR_VADDR_INLINE as usize + 1);
    }

    #[test]
    fn a_full_vip_set_fits_the_address_table_within_the_probe_limit() {
        let mut b = SnapshotBuilder::new(node());
        let addr = |i: u32| -> IpAddr {
            if i.is_multiple_of(2) {
                IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
            } else {
                IpAddr::V6(Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(i)))
            }
        };
        for i in 0..STATOR_MAX_VIPS {
            b = b.vip(addr(i), 80, Proto::Tcp, 7, vec![]);
        }
        let e = encode(&valid(b.build().unwrap()), 1, 1 << 16).unwrap();
        assert_eq!(
            e.vtab.iter().filter(|v| v.family != 0).count(),
            STATOR_MAX_VIPS as usize
        );
        for i in 0..STATOR_MAX_VIPS {
            assert!(
                find(&e.vtab, e.cfg.vtab_seed, addr(i)).is_some(),
                "{}",
                addr(i)
            );
        }
        assert!(find(&e.vtab, e.cfg.vtab_seed, addr(STATOR_MAX_VIPS)).is_none());
    }

    #[test]
    fn addresses_that_cannot_fit_are_refused() {
        let same: Vec<Vaddr> = (0..STATOR_VTAB_SLOTS + 1)
            .map(|i| Vaddr {
                addr: addr_bytes(IpAddr::V4(Ipv4Addr::from(i))).0,
                family: STATOR_FAMILY_V4 as u8,
                ..Vaddr::default()
            })
            .collect();
        let err = vtab_layout(&same).unwrap_err().to_string();
        assert!(err.contains("do not fit the VIP-address table"), "{err}");
    }

    #[test]
    fn tables_are_packed_into_the_generation_half() {
        let e = encode(&valid(snap()), 1, 100).unwrap();
        let offs: Vec<(u32, u32)> = e
            .vips
            .iter()
            .map(|(_, v, _)| (v.table_off, v.table_size))
            .collect();
        assert_eq!(offs.iter().map(|o| o.1).sum::<u32>(), 20);
        assert!(
            offs.iter()
                .all(|&(off, size)| off >= 100 && off + size <= 200)
        );
        assert_eq!(e.slots_used, 20);
    }

    #[test]
    fn encode_refuses_only_what_the_maps_have_no_room_for() {
        let err = encode(&valid(snap()), 0, 15).unwrap_err().to_string();
        assert!(err.contains("slots per generation"), "{err}");
        // The rules are stator-core's, checked once before a commit can be asked for; the
        // messages say as much as this module's own checks used to.
        let mut s = snap();
        let (_, vip) = s.vips.iter_mut().next().unwrap();
        vip.id = VipId(STATOR_MAX_VIPS);
        let err = s.validated().unwrap_err().to_string();
        assert!(
            err.contains("id 1024 is not below STATOR_MAX_VIPS"),
            "{err}"
        );
        let mut s = snap();
        let (_, vip) = s.vips.iter_mut().next().unwrap();
        vip.table = Arc::from(vec![0u32; 12]);
        let err = s.validated().unwrap_err().to_string();
        assert!(err.contains("not prime"), "{err}");
        let web = VipKey {
            addr: v4(100),
            port: 80,
            proto: Proto::Tcp,
        };
        let mut s = snap();
        let vip = s.vips.get_mut(&web).unwrap();
        vip.table = Arc::from(vec![1u32; 13]); // real 1 belongs to the UDP VIP
        let err = s.validated().unwrap_err().to_string();
        assert!(err.contains("which belongs to VIP id 1"), "{err}");
        let mut s = snap();
        s.node.outer_ttl = 0;
        assert_eq!(
            s.validated().unwrap_err().to_string(),
            "node: outer_ttl is 0"
        );
    }
}
