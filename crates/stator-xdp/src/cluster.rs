//! What a node knows of the other nodes and clusters, in map form (docs/forwarding.md §3.1, §9,
//! §10): the fragment peers and their Maglev table (`stator_peers`, a table in `stator_slots`),
//! the failover addresses (`stator_failover`), the prefix groups (`stator_classes`) and the
//! group VIPs' suffix entries (`stator_sfx`) — encoded with the rest of a generation, written
//! into its half, and read back.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use aya::maps::lpm_trie::Key as LpmKey;
use stator_abi::{
    AddrRec, Class, Peer, STATOR_CLASS_F_FRAGS, STATOR_FAMILY_V4, STATOR_MAX_PEERS,
    STATOR_MAX_VIPS, STATOR_PEER_F_SELF, SfxKey, Vip as VipRec, low_bits,
};
use stator_core::{ClassId, Peers, Prefix, Snapshot, VipGroup, VipId};

use crate::error::{Result, XdpError};
use crate::maps::Maps;
use crate::program::addr_bytes;
use crate::sys::{ClassData, Rec};

/// One generation's cluster records.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClusterRecs {
    /// `stator_peers` of this half (`STATOR_MAX_PEERS` entries).
    pub(crate) peers: Vec<Peer>,
    /// The peers' Maglev table and its absolute offset in `stator_slots`.
    pub(crate) peer_table: Arc<[u32]>,
    pub(crate) peer_table_off: u32,
    /// `stator_failover` entries of this half, by VIP id.
    pub(crate) failover: Vec<(u32, AddrRec)>,
    /// `stator_classes` entries: (prefix length as the trie counts it, key data, class).
    pub(crate) classes: Vec<(u32, ClassData, Class)>,
    /// `stator_sfx` entries.
    pub(crate) sfx: Vec<(SfxKey, VipRec)>,
}

fn width(family: u8) -> u32 {
    if u32::from(family) == STATOR_FAMILY_V4 {
        32
    } else {
        128
    }
}

/// Encodes the cluster part of `snap` for `generation`; the peers' table goes to the absolute
/// slot `table_off`. `vip_recs` are the generation's VIP values by VIP id.
pub(crate) fn encode_cluster(
    snap: &Snapshot,
    generation: u32,
    vip_recs: &BTreeMap<u32, VipRec>,
    table_off: u32,
) -> Result<ClusterRecs> {
    let g = generation as u8;
    let mut recs = ClusterRecs {
        peers: vec![Peer::default(); STATOR_MAX_PEERS as usize],
        peer_table: snap.peers.table.clone(),
        peer_table_off: table_off,
        ..ClusterRecs::default()
    };
    if snap.peers.addrs.len() > STATOR_MAX_PEERS as usize {
        return Err(XdpError::invalid(format!(
            "{} fragment peers, the forwarder holds at most {STATOR_MAX_PEERS}",
            snap.peers.addrs.len()
        )));
    }
    if let Some(bad) = snap
        .peers
        .table
        .iter()
        .find(|&&p| p as usize >= snap.peers.addrs.len())
    {
        return Err(XdpError::invalid(format!(
            "the fragment peers' table names peer {bad}, which does not exist"
        )));
    }
    for (i, addr) in snap.peers.addrs.iter().enumerate() {
        let (a, family) = addr_bytes(*addr);
        recs.peers[i] = Peer {
            addr: a,
            family,
            flags: if snap.peers.self_index == Some(i) {
                STATOR_PEER_F_SELF as u8
            } else {
                0
            },
            _pad0: [0; 2],
        };
    }
    // (class, family) → (lengths, flags), from the group VIPs
    let mut lens: BTreeMap<(u16, u8), (Vec<u8>, u8)> = BTreeMap::new();
    for (key, vip) in &snap.vips {
        let id = vip.id.0;
        if let Some(addr) = vip.failover {
            let (a, family) = addr_bytes(addr);
            recs.failover.push((
                id,
                AddrRec {
                    addr: a,
                    family,
                    _pad0: [0; 3],
                },
            ));
        }
        let Some(grp) = vip.group else { continue };
        let (a, family) = addr_bytes(key.addr);
        let rec = vip_recs
            .get(&id)
            .copied()
            .ok_or_else(|| XdpError::invalid(format!("group VIP {key} was not encoded")))?;
        recs.sfx.push((
            SfxKey {
                suffix: low_bits(&a, width(family), u32::from(grp.bits)),
                port: key.port.to_be_bytes(),
                proto: key.proto.number(),
                family,
                class_id: grp.class.0,
                bits: grp.bits,
                generation: g,
            },
            rec,
        ));
        let e = lens.entry((grp.class.0, family)).or_default();
        if !e.0.contains(&grp.bits) {
            e.0.push(grp.bits);
        }
        if vip.flags.fragments {
            e.1 |= STATOR_CLASS_F_FRAGS as u8;
        }
    }
    for (prefix, class) in &snap.classes {
        let (a, family) = addr_bytes(prefix.addr);
        let (mut l, flags) = lens.get(&(class.0, family)).cloned().unwrap_or_default();
        l.sort_unstable_by(|x, y| y.cmp(x));
        let mut c = Class {
            class_id: class.0,
            nlens: 0,
            flags,
            lens: [0; stator_abi::STATOR_MAX_SUFFIX_LENS as usize],
        };
        if l.len() > c.lens.len() {
            return Err(XdpError::invalid(format!(
                "class {} uses more than {} suffix lengths",
                class.0,
                c.lens.len()
            )));
        }
        c.nlens = l.len() as u8;
        c.lens[..l.len()].copy_from_slice(&l);
        recs.classes.push((
            32 + u32::from(prefix.len),
            ClassData {
                generation: g,
                family,
                _pad0: [0; 2],
                addr: a,
            },
            c,
        ));
    }
    Ok(recs)
}

impl Maps {
    /// Writes the cluster part of generation `generation` (its half of every map: stale trie
    /// and hash entries deleted, arrays rewritten whole).
    pub(crate) fn write_cluster(&mut self, generation: u32, recs: &ClusterRecs) -> Result<()> {
        let g = generation as u8;
        for (i, p) in recs.peers.iter().enumerate() {
            self.peers
                .write(generation * STATOR_MAX_PEERS + i as u32, *p);
        }
        for (i, &p) in recs.peer_table.iter().enumerate() {
            self.slots.write(recs.peer_table_off + i as u32, p);
        }
        let base = generation * STATOR_MAX_VIPS;
        for i in 0..STATOR_MAX_VIPS {
            self.failover.write(base + i, AddrRec::default());
        }
        for (id, a) in &recs.failover {
            if *id < STATOR_MAX_VIPS {
                self.failover.write(base + id, *a);
            }
        }
        // stator_sfx: this half's stale entries out, the new ones in
        let wanted: HashSet<SfxKey> = recs.sfx.iter().map(|(k, _)| *k).collect();
        let stale: Vec<Rec<SfxKey>> = self
            .sfx
            .keys()
            .filter_map(std::result::Result::ok)
            .filter(|k| k.0.generation == g && !wanted.contains(&k.0))
            .collect();
        for k in stale {
            self.sfx
                .remove(&k)
                .map_err(|e| XdpError::map("stator_sfx", "delete", e))?;
        }
        for (k, v) in &recs.sfx {
            self.sfx
                .insert(Rec(*k), Rec(*v), 0)
                .map_err(|e| XdpError::map("stator_sfx", "update", e))?;
        }
        // stator_classes likewise
        let wanted: HashSet<(u32, ClassData)> =
            recs.classes.iter().map(|(l, d, _)| (*l, *d)).collect();
        let stale: Vec<LpmKey<ClassData>> = self
            .classes
            .keys()
            .filter_map(std::result::Result::ok)
            .filter(|k| k.data().generation == g && !wanted.contains(&(k.prefix_len(), k.data())))
            .collect();
        for k in stale {
            self.classes
                .remove(&k)
                .map_err(|e| XdpError::map("stator_classes", "delete", e))?;
        }
        for (len, d, c) in &recs.classes {
            self.classes
                .insert(&LpmKey::new(*len, *d), Rec(*c), 0)
                .map_err(|e| XdpError::map("stator_classes", "update", e))?;
        }
        Ok(())
    }

    /// Reads the cluster part of generation `generation` into `snap` (whose VIPs are read
    /// already): failover addresses, groups, classes and peers.
    pub(crate) fn read_cluster(
        &self,
        generation: u32,
        snap: &mut Snapshot,
        peer_table: (u32, u32),
    ) -> Result<()> {
        let g = generation as u8;
        let base = generation * STATOR_MAX_VIPS;
        // group membership by VIP id
        let mut groups: BTreeMap<u32, VipGroup> = BTreeMap::new();
        for k in self.sfx.keys() {
            let k = k.map_err(|e| XdpError::map("stator_sfx", "iterate", e))?.0;
            if k.generation != g {
                continue;
            }
            if let Ok(v) = self.sfx.get(&Rec(k), 0) {
                groups.insert(
                    v.0.vip_id,
                    VipGroup {
                        class: ClassId(k.class_id),
                        bits: k.bits,
                    },
                );
            }
        }
        for vip in snap.vips.values_mut() {
            let VipId(id) = vip.id;
            if id < STATOR_MAX_VIPS {
                let a = self.failover.read(base + id);
                vip.failover = crate::program::addr_from(a.addr, a.family);
            }
            vip.group = groups.get(&id).copied();
        }
        for k in self.classes.keys() {
            let k = k.map_err(|e| XdpError::map("stator_classes", "iterate", e))?;
            let d = k.data();
            if d.generation != g {
                continue;
            }
            let Some(addr) = crate::program::addr_from(d.addr, d.family) else {
                continue;
            };
            let Ok(c) = self.classes.get(&k, 0) else {
                continue;
            };
            let len = k.prefix_len().saturating_sub(32);
            if let Some(p) = Prefix::new(addr, len as u8) {
                snap.classes.insert(p, ClassId(c.0.class_id));
            }
        }
        let mut addrs: Vec<IpAddr> = Vec::new();
        let mut self_index = None;
        for i in 0..STATOR_MAX_PEERS {
            let p = self.peers.read(generation * STATOR_MAX_PEERS + i);
            let Some(addr) = crate::program::addr_from(p.addr, p.family) else {
                break;
            };
            if u32::from(p.flags) & STATOR_PEER_F_SELF != 0 {
                self_index = Some(addrs.len());
            }
            addrs.push(addr);
        }
        let (off, size) = peer_table;
        let table: Vec<u32> = (0..size).map(|i| self.slots.read(off + i)).collect();
        snap.peers = Peers {
            addrs,
            self_index,
            table: Arc::from(table),
        };
        Ok(())
    }
}
