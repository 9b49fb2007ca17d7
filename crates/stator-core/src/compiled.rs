//! A [`Snapshot`] in the form packets want: [`CompiledSnapshot`].
//!
//! Built once per commit, never per packet. It holds what the BPF maps hold for one generation:
//! the VIP-address flags (`stator_vtab` in XDP) (derived here from the VIP set, so they cannot disagree with
//! it), the `stator_vips` entries under integer keys, the reals in a dense array indexed by real
//! id, and the node parameters with "unset" addresses normalised. Lookups hash with a fixed
//! foldhash: the keys are configuration, not packet data, so no seed is needed to keep them
//! spread.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use foldhash::fast::FixedState;
use stator_abi::{
    Encap, Family, STATOR_CLASS_F_FRAGS, STATOR_REAL_F_DRAINING, STATOR_REAL_F_PREVIOUS,
    STATOR_REAL_F_USABLE, STATOR_VADDR_F_FRAGS, STATOR_VADDR_F_NODE, STATOR_VADDR_F_TCP_ANY,
    STATOR_VADDR_F_TCP_PORTS, STATOR_VADDR_F_UDP_ANY, STATOR_VADDR_F_UDP_PORTS,
};

use crate::snapshot::{NodeParams, Proto, RealId, RealState, Snapshot, VipId, VipKey};
use crate::validate::ValidSnapshot;

/// IP protocol numbers the decision names.
pub(crate) const IPPROTO_TCP: u8 = 6;
/// UDP.
pub(crate) const IPPROTO_UDP: u8 = 17;

type Map<K, V> = HashMap<K, V, FixedState>;

/// A VIP as the forwarder uses it (`struct stator_vip` plus its slots).
#[derive(Debug, Clone)]
pub(crate) struct CompiledVip {
    pub id: u32,
    pub no_ct: bool,
    /// `STATOR_VIP_F_FRAGMENTS`.
    pub fragments: bool,
    /// `stator_failover[vip_id]` when `STATOR_VIP_F_FAILOVER`.
    pub failover: Option<Addr>,
    pub table: Arc<[u32]>,
    /// `stator_prev[vip_id]`: the previous table (second chance, §12), if any.
    pub previous: Option<Arc<[u32]>>,
}

/// A class as `stator_classes` holds it for one family (docs/forwarding.md §3.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CompiledClass {
    pub id: u16,
    /// `STATOR_CLASS_F_*`.
    pub flags: u32,
    /// The class's suffix lengths of this family, longest first.
    pub lens: Vec<u8>,
}

/// A fragment peer (`struct stator_peer`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CompiledPeer {
    pub addr: Addr,
    pub is_self: bool,
}

/// `stator_sfx` keys: (class, bits, family, suffix in key form, port, proto).
type SfxKey = (u16, u8, Family, u128, u16, u8);

/// The low `bits` bits of a key-form address (IPv4 in the top 32 bits of the u128).
#[inline]
pub(crate) fn suffix_key(family: Family, addr: u128, bits: u8) -> u128 {
    match family {
        Family::V4 => {
            let m = u32::MAX
                .checked_shr(32 - u32::from(bits.min(32)))
                .unwrap_or(0);
            crate::flow::v4(crate::flow::v4_of(addr) & m)
        }
        Family::V6 => {
            addr & u128::MAX
                .checked_shr(128 - u32::from(bits.min(128)))
                .unwrap_or(0)
        }
    }
}

/// A backend address, in wire form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Addr {
    V4([u8; 4]),
    V6([u8; 16]),
}

impl Addr {
    pub fn of(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(a) => Addr::V4(a.octets()),
            IpAddr::V6(a) => Addr::V6(a.octets()),
        }
    }

    pub fn ip(self) -> IpAddr {
        match self {
            Addr::V4(a) => IpAddr::from(a),
            Addr::V6(a) => IpAddr::from(a),
        }
    }

    pub fn is_v6(self) -> bool {
        matches!(self, Addr::V6(_))
    }
}

/// A real as the forwarder uses it (`struct stator_real`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CompiledReal {
    pub addr: Addr,
    pub vip_id: u32,
    /// `STATOR_REAL_F_*`, never 0 for a present real.
    pub flags: u16,
    pub encap: Encap,
}

/// Node parameters in wire form (`struct stator_node_cfg`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CompiledNode {
    /// `None` when unset or 0.0.0.0.
    pub src_v4: Option<[u8; 4]>,
    /// `None` when unset or `::`.
    pub src_v6: Option<[u8; 16]>,
    pub icmp_echo: bool,
    pub tcp_timeout_ns: u64,
    pub udp_timeout_ns: u64,
    pub flood_new_per_sec: u32,
    pub gue_port: u16,
    pub outer_ttl: u8,
    pub frag_timeout_ns: u64,
    pub trace_per_sec: u32,
    pub trace_keys: stator_abi::TraceKeys,
}

/// An immutable, packet-ready form of a [`Snapshot`]. Share it between threads (it is `Send` and
/// `Sync`); replace it atomically on each commit.
#[derive(Debug, Clone)]
pub struct CompiledSnapshot {
    generation: u64,
    params: NodeParams,
    pub(crate) node: CompiledNode,
    vaddrs_v4: Map<u32, u32>,
    vaddrs_v6: Map<u128, u32>,
    /// `(addr << 24) | (port << 8) | proto`.
    vips_v4: Map<u64, u32>,
    /// `((port << 8) | proto, addr)`.
    vips_v6: Map<(u32, u128), u32>,
    vips: Vec<CompiledVip>,
    reals: Vec<Option<CompiledReal>>,
    /// Prefix groups per length, longest first: (len, network → class), per family.
    classes_v4: Vec<(u8, Map<u32, CompiledClass>)>,
    classes_v6: Vec<(u8, Map<u128, CompiledClass>)>,
    /// `stator_sfx`: suffix entries → VIP index.
    sfx: Map<SfxKey, u32>,
    pub(crate) peers: Vec<CompiledPeer>,
    pub(crate) peer_table: Arc<[u32]>,
}

impl CompiledSnapshot {
    /// Compiles a validated snapshot. One made with [`ValidSnapshot::new_lenient`] (a slot
    /// naming a missing real, a real without a source address, …) is compiled exactly as the
    /// maps would hold it: the forwarder then drops with `bad_config`, `no_source` and so on,
    /// as the XDP program would.
    pub fn new(snap: &ValidSnapshot) -> Self {
        Self::compile(snap)
    }

    fn compile(snap: &Snapshot) -> Self {
        let n = snap.node;
        let node = CompiledNode {
            src_v4: n.src_v4.filter(|a| !a.is_unspecified()).map(|a| a.octets()),
            src_v6: n.src_v6.filter(|a| !a.is_unspecified()).map(|a| a.octets()),
            icmp_echo: n.icmp_echo,
            tcp_timeout_ns: n.tcp_timeout_ns,
            udp_timeout_ns: n.udp_timeout_ns,
            flood_new_per_sec: n.flood_new_per_sec,
            gue_port: n.gue_port,
            outer_ttl: n.outer_ttl,
            frag_timeout_ns: n.frag_timeout_ns,
            trace_per_sec: n.trace_per_sec,
            trace_keys: n.trace_keys,
        };
        let mut c = Self {
            generation: snap.generation,
            params: n,
            node,
            vaddrs_v4: Map::default(),
            vaddrs_v6: Map::default(),
            vips_v4: Map::default(),
            vips_v6: Map::default(),
            vips: Vec::with_capacity(snap.vips.len()),
            reals: Vec::new(),
            classes_v4: Vec::new(),
            classes_v6: Vec::new(),
            sfx: Map::default(),
            peers: Vec::new(),
            peer_table: snap.peers.table.clone(),
        };
        c.compile_groups(snap);
        for (i, addr) in snap.peers.addrs.iter().enumerate() {
            c.peers.push(CompiledPeer {
                addr: Addr::of(*addr),
                is_self: snap.peers.self_index == Some(i),
            });
        }
        // The node's own addresses receive redirects (docs/forwarding.md §2).
        if let Some(a) = c.node.src_v4 {
            *c.vaddrs_v4.entry(u32::from_be_bytes(a)).or_default() |= STATOR_VADDR_F_NODE;
        }
        if let Some(a) = c.node.src_v6 {
            *c.vaddrs_v6.entry(u128::from_be_bytes(a)).or_default() |= STATOR_VADDR_F_NODE;
        }
        for (key, vip) in &snap.vips {
            // Fits: there are fewer VIPs than memory.
            let index = c.vips.len() as u32;
            c.vips.push(CompiledVip {
                id: vip.id.0,
                no_ct: vip.flags.no_conntrack,
                fragments: vip.flags.fragments,
                failover: vip.failover.map(Addr::of),
                table: vip.table.clone(),
                previous: vip.previous.clone().filter(|t| !t.is_empty()),
            });
            if let Some(g) = vip.group {
                let (family, a) = key_form(key.addr);
                c.sfx.insert(
                    (
                        g.class.0,
                        g.bits,
                        family,
                        suffix_key(family, a, g.bits),
                        key.port,
                        key.proto.number(),
                    ),
                    index,
                );
            }
            let mut flag = match (key.proto, key.port == 0) {
                (Proto::Tcp, false) => STATOR_VADDR_F_TCP_PORTS,
                (Proto::Tcp, true) => STATOR_VADDR_F_TCP_ANY,
                (Proto::Udp, false) => STATOR_VADDR_F_UDP_PORTS,
                (Proto::Udp, true) => STATOR_VADDR_F_UDP_ANY,
            };
            if vip.flags.fragments {
                flag |= STATOR_VADDR_F_FRAGS;
            }
            let pp = (u32::from(key.port) << 8) | u32::from(key.proto.number());
            match key.addr {
                IpAddr::V4(a) => {
                    let a = u32::from_be_bytes(a.octets());
                    *c.vaddrs_v4.entry(a).or_default() |= flag;
                    c.vips_v4
                        .insert((u64::from(a) << 24) | u64::from(pp), index);
                }
                IpAddr::V6(a) => {
                    let a = u128::from_be_bytes(a.octets());
                    *c.vaddrs_v6.entry(a).or_default() |= flag;
                    c.vips_v6.insert((pp, a), index);
                }
            }
        }
        let len = snap
            .reals
            .keys()
            .next_back()
            .map_or(0, |r| r.0 as usize + 1);
        c.reals = vec![None; len];
        for (id, real) in &snap.reals {
            let addr = match real.addr {
                IpAddr::V4(a) => Addr::V4(a.octets()),
                IpAddr::V6(a) => Addr::V6(a.octets()),
            };
            let flags = match real.state {
                RealState::Usable => STATOR_REAL_F_USABLE,
                RealState::Draining => STATOR_REAL_F_DRAINING,
                RealState::Previous => STATOR_REAL_F_PREVIOUS,
            };
            if let Some(slot) = c.reals.get_mut(id.0 as usize) {
                *slot = Some(CompiledReal {
                    addr,
                    vip_id: real.vip.0,
                    // The flag constants are single low bits.
                    flags: flags as u16,
                    encap: real.encap,
                });
            }
        }
        c
    }

    /// `stator_classes` for one family: a class per prefix, with the suffix lengths and the
    /// fragment flag of the class's VIPs of that family.
    fn compile_groups(&mut self, snap: &Snapshot) {
        // (class, family) → (lengths, flags)
        let mut per: std::collections::BTreeMap<(u16, Family), (Vec<u8>, u32)> =
            std::collections::BTreeMap::new();
        for (key, vip) in &snap.vips {
            let Some(g) = vip.group else { continue };
            let (family, _) = key_form(key.addr);
            let e = per.entry((g.class.0, family)).or_default();
            if !e.0.contains(&g.bits) {
                e.0.push(g.bits);
            }
            if vip.flags.fragments {
                e.1 |= STATOR_CLASS_F_FRAGS;
            }
        }
        for (prefix, class) in &snap.classes {
            let (family, a) = key_form(prefix.addr);
            let (mut lens, flags) = per.get(&(class.0, family)).cloned().unwrap_or_default();
            lens.sort_unstable_by(|a, b| b.cmp(a));
            let cc = CompiledClass {
                id: class.0,
                flags,
                lens,
            };
            match family {
                Family::V4 => {
                    insert_len(&mut self.classes_v4, prefix.len, crate::flow::v4_of(a), cc)
                }
                Family::V6 => insert_len(&mut self.classes_v6, prefix.len, a, cc),
            }
        }
    }

    /// Whether the generation has prefix groups (`STATOR_NODE_F_GROUPS`).
    #[inline]
    pub(crate) fn has_groups(&self) -> bool {
        !self.classes_v4.is_empty() || !self.classes_v6.is_empty()
    }

    /// The class of a key-form address: the longest prefix group containing it.
    #[inline]
    pub(crate) fn class_of(&self, family: Family, addr: u128) -> Option<&CompiledClass> {
        match family {
            Family::V4 => {
                let a = crate::flow::v4_of(addr);
                self.classes_v4.iter().find_map(|(len, m)| {
                    let mask = u32::MAX.checked_shl(32 - u32::from(*len)).unwrap_or(0);
                    m.get(&(a & mask))
                })
            }
            Family::V6 => self.classes_v6.iter().find_map(|(len, m)| {
                let mask = u128::MAX.checked_shl(128 - u32::from(*len)).unwrap_or(0);
                m.get(&(addr & mask))
            }),
        }
    }

    /// The group VIP of a suffix entry (`stator_sfx`).
    #[inline]
    pub(crate) fn sfx_vip(
        &self,
        class: u16,
        bits: u8,
        family: Family,
        suffix: u128,
        port: u16,
        proto: u8,
    ) -> Option<&CompiledVip> {
        let &i = self.sfx.get(&(class, bits, family, suffix, port, proto))?;
        self.vips.get(i as usize)
    }

    /// The generation of the snapshot this was compiled from.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The node parameters.
    pub fn node(&self) -> &NodeParams {
        &self.params
    }

    /// The VIP-address table flags (`STATOR_VADDR_F_*`) of a VIP address; `None` when no VIP has
    /// that address.
    pub fn vaddr_flags(&self, addr: IpAddr) -> Option<u32> {
        match addr {
            IpAddr::V4(a) => self.vaddr_v4(a.to_bits()),
            IpAddr::V6(a) => self.vaddr_v6(a.to_bits()),
        }
    }

    /// The id of the VIP with exactly this key (no wildcard fallback).
    pub fn vip_id(&self, key: &VipKey) -> Option<VipId> {
        let v = match key.addr {
            IpAddr::V4(a) => self.vip_v4(a.to_bits(), key.port, key.proto.number()),
            IpAddr::V6(a) => self.vip_v6(a.to_bits(), key.port, key.proto.number()),
        };
        v.map(|v| VipId(v.id))
    }

    /// The backend address of a real.
    pub fn real_addr(&self, id: RealId) -> Option<IpAddr> {
        self.real(id.0).map(|r| r.addr.ip())
    }

    /// The VIP-address table flags of an IPv4 address (as a big-endian number).
    #[inline]
    pub(crate) fn vaddr_v4(&self, dst: u32) -> Option<u32> {
        self.vaddrs_v4.get(&dst).copied()
    }

    /// The VIP-address table flags of an IPv6 address (as a big-endian number).
    #[inline]
    pub(crate) fn vaddr_v6(&self, dst: u128) -> Option<u32> {
        self.vaddrs_v6.get(&dst).copied()
    }

    #[inline]
    pub(crate) fn vip_v4(&self, addr: u32, port: u16, proto: u8) -> Option<&CompiledVip> {
        let k = (u64::from(addr) << 24) | (u64::from(port) << 8) | u64::from(proto);
        let &i = self.vips_v4.get(&k)?;
        self.vips.get(i as usize)
    }

    #[inline]
    pub(crate) fn vip_v6(&self, addr: u128, port: u16, proto: u8) -> Option<&CompiledVip> {
        let k = ((u32::from(port) << 8) | u32::from(proto), addr);
        let &i = self.vips_v6.get(&k)?;
        self.vips.get(i as usize)
    }

    /// `stator_reals[gen * MAX_REALS + id]` with `flags != 0`.
    #[inline]
    pub(crate) fn real(&self, id: u32) -> Option<&CompiledReal> {
        self.reals.get(id as usize)?.as_ref()
    }
}

/// An address in key form: its family and its 16-byte field as a big-endian number.
fn key_form(addr: IpAddr) -> (Family, u128) {
    match addr {
        IpAddr::V4(a) => (Family::V4, crate::flow::v4(a.to_bits())),
        IpAddr::V6(a) => (Family::V6, a.to_bits()),
    }
}

/// Adds a prefix to the per-length maps, keeping them longest first.
fn insert_len<K: std::hash::Hash + Eq>(
    v: &mut Vec<(u8, Map<K, CompiledClass>)>,
    len: u8,
    k: K,
    c: CompiledClass,
) {
    let i = match v.binary_search_by(|(l, _)| len.cmp(l)) {
        Ok(i) => i,
        Err(i) => {
            v.insert(i, (len, Map::default()));
            i
        }
    };
    v[i].1.insert(k, c);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{BackendSpec, SnapshotBuilder};
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn vaddr_flags_follow_the_vip_set() {
        let v4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 10));
        let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10));
        let be = || vec![BackendSpec::new(IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1)))];
        let snap = SnapshotBuilder::new(NodeParams {
            src_v4: Some(Ipv4Addr::new(10, 9, 9, 9)),
            ..NodeParams::default()
        })
        .vip(v4, 80, Proto::Tcp, 7, be())
        .vip(v4, 0, Proto::Udp, 7, be())
        .vip(v6, 0, Proto::Tcp, 7, be())
        .vip(v6, 53, Proto::Udp, 7, be())
        .build()
        .unwrap();
        let c = CompiledSnapshot::new(&snap.validated().unwrap());
        assert_eq!(
            c.vaddr_flags(v4),
            Some(STATOR_VADDR_F_TCP_PORTS | STATOR_VADDR_F_UDP_ANY)
        );
        assert_eq!(
            c.vaddr_flags(v6),
            Some(STATOR_VADDR_F_TCP_ANY | STATOR_VADDR_F_UDP_PORTS)
        );
        assert_eq!(c.vaddr_flags(IpAddr::V4(Ipv4Addr::LOCALHOST)), None);
        let key = |addr, port, proto| VipKey { addr, port, proto };
        assert_eq!(c.vip_id(&key(v4, 80, Proto::Tcp)), Some(VipId(0)));
        assert_eq!(c.vip_id(&key(v4, 81, Proto::Tcp)), None);
        assert_eq!(c.vip_id(&key(v4, 0, Proto::Udp)), Some(VipId(1)));
        assert_eq!(c.vip_id(&key(v6, 0, Proto::Tcp)), Some(VipId(2)));
        assert_eq!(c.vip_id(&key(v6, 53, Proto::Udp)), Some(VipId(3)));
        assert_eq!(
            c.real_addr(RealId(3)),
            Some(IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1)))
        );
        assert_eq!(c.real_addr(RealId(4)), None);
        assert_eq!(c.generation(), 0);
        assert!(c.node().icmp_echo);
    }

    #[test]
    fn unset_sources_are_normalised() {
        let snap = Snapshot {
            node: NodeParams {
                src_v4: Some(Ipv4Addr::UNSPECIFIED),
                src_v6: Some(Ipv6Addr::UNSPECIFIED),
                ..NodeParams::default()
            },
            ..Snapshot::default()
        };
        let c = CompiledSnapshot::new(&ValidSnapshot::new_lenient(snap).unwrap());
        assert_eq!((c.node.src_v4, c.node.src_v6), (None, None));
    }
}
