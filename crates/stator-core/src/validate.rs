//! What a [`Snapshot`] must satisfy before it forwards: [`Snapshot::validate`], and the type
//! that carries the proof, [`ValidSnapshot`] — the only form a data plane commits, so that
//! every plane (XDP maps, the core plane, AF_XDP) forwards with snapshots checked by this one
//! definition of the rules, and each plane's commit only encodes.
//!
//! Two levels. *Representable*: every id and table fits the ABI's arrays (VIP ids below
//! `STATOR_MAX_VIPS`, real ids below `STATOR_MAX_REALS`, tables no larger than
//! `STATOR_MAX_TABLE_SIZE`, slots holding a real id or `STATOR_NO_REAL`); a snapshot that fails
//! this cannot be written to the BPF maps at all, and [`CompiledSnapshot`] never accepts it.
//! *Consistent*: what the controller guarantees and the forwarder relies on (every slot names a
//! usable real of its own VIP, unique VIP ids, prime table sizes, a source address for every
//! backend family, …). An inconsistent snapshot can be written to the maps and would make the
//! forwarder drop with `bad_config`, `no_source` and the like; only
//! [`ValidSnapshot::new_lenient`] accepts one, to test exactly those paths.
//!
//! [`CompiledSnapshot`]: crate::CompiledSnapshot

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;

use stator_abi::{
    STATOR_MAX_PEERS, STATOR_MAX_PREFIXES, STATOR_MAX_REALS, STATOR_MAX_SUFFIX_LENS,
    STATOR_MAX_TABLE_SIZE, STATOR_MAX_VIPS, STATOR_NO_REAL,
};
use stator_hash::is_prime;

use crate::snapshot::{ClassId, Encap, Prefix, RealId, RealState, Snapshot, VipId, VipKey};

/// Why a snapshot cannot be forwarded with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// A VIP id does not fit `stator_vipstats`.
    #[error("VIP {vip}: id {id} is not below STATOR_MAX_VIPS ({max})", max = STATOR_MAX_VIPS)]
    VipIdOutOfRange {
        /// The VIP.
        vip: VipKey,
        /// Its id.
        id: u32,
    },
    /// A real id does not fit `stator_reals`.
    #[error("real {id}: id is not below STATOR_MAX_REALS ({max})", max = STATOR_MAX_REALS)]
    RealIdOutOfRange {
        /// The real's id.
        id: u32,
    },
    /// A Maglev table is larger than the largest the maps allow.
    #[error(
        "VIP {vip}: table of {size} slots exceeds STATOR_MAX_TABLE_SIZE ({max})",
        max = STATOR_MAX_TABLE_SIZE
    )]
    TableTooLarge {
        /// The VIP.
        vip: VipKey,
        /// Its table size.
        size: usize,
    },
    /// A slot holds a value that is neither a real id nor `STATOR_NO_REAL`.
    #[error("VIP {vip}: slot {slot} holds {value}, which is not a real id")]
    SlotOutOfRange {
        /// The VIP.
        vip: VipKey,
        /// The slot index.
        slot: usize,
        /// The value.
        value: u32,
    },
    /// Two VIPs share an id (their counters would mix).
    #[error("VIPs {first} and {second} share id {id}")]
    DuplicateVipId {
        /// The id.
        id: u32,
        /// One VIP.
        first: VipKey,
        /// The other.
        second: VipKey,
    },
    /// A Maglev table size is not prime (Maglev's permutations need a prime M).
    #[error("VIP {vip}: table size {size} is not prime")]
    TableSizeNotPrime {
        /// The VIP.
        vip: VipKey,
        /// Its table size.
        size: usize,
    },
    /// A slot names a real that does not exist (would drop `bad_config`).
    #[error("VIP {vip}: slot {slot} names real {real}, which does not exist")]
    SlotUnknownReal {
        /// The VIP.
        vip: VipKey,
        /// The slot index.
        slot: usize,
        /// The real id.
        real: u32,
    },
    /// A slot names a real of another VIP.
    #[error("VIP {vip}: slot {slot} names real {real}, which belongs to VIP id {owner}")]
    SlotForeignReal {
        /// The VIP.
        vip: VipKey,
        /// The slot index.
        slot: usize,
        /// The real id.
        real: u32,
        /// The VIP id the real belongs to.
        owner: u32,
    },
    /// A slot names a draining real (draining reals get no new flows) or one kept only for a
    /// second chance.
    #[error(
        "VIP {vip}: slot {slot} names real {real}, which is draining or only a previous backend"
    )]
    SlotDrainingReal {
        /// The VIP.
        vip: VipKey,
        /// The slot index.
        slot: usize,
        /// The real id.
        real: u32,
    },
    /// A real belongs to no VIP of the snapshot.
    #[error("real {real} ({addr}): its VIP id {vip} is not in the snapshot")]
    RealWithoutVip {
        /// The real id.
        real: u32,
        /// Its backend address.
        addr: std::net::IpAddr,
        /// The VIP id it names.
        vip: u32,
    },
    /// A real's family has no outer source address (would drop `no_source`).
    #[error("real {real} ({addr}): the node has no {family} source address for its tunnel")]
    NoSource {
        /// The real id.
        real: u32,
        /// Its backend address.
        addr: std::net::IpAddr,
        /// `"IPv4"` or `"IPv6"`.
        family: &'static str,
    },
    /// The outer TTL is 0 (the first router would drop every tunnelled packet).
    #[error("node: outer_ttl is 0")]
    OuterTtlZero,
    /// A GUE backend exists but the GUE port is 0.
    #[error("real {real}: GUE encapsulation with gue_port 0")]
    GuePortZero {
        /// The real id.
        real: u32,
    },
    /// More fragment peers than `stator_peers` holds, or a peer table that does not fit.
    #[error("fragment peers: {reason}")]
    Peers {
        /// What is wrong.
        reason: String,
    },
    /// More prefix groups than `stator_classes` holds, or a prefix with host bits set.
    #[error("prefix group {prefix}: {reason}")]
    Prefix {
        /// The prefix.
        prefix: Prefix,
        /// What is wrong.
        reason: String,
    },
    /// A group VIP whose class, suffix length or suffix cannot be matched.
    #[error("VIP {vip}: {reason}")]
    Group {
        /// The VIP.
        vip: VipKey,
        /// What is wrong.
        reason: String,
    },
}

impl Snapshot {
    /// Checks that the snapshot is representable in the maps and consistent (see the module
    /// documentation); returns the first problem found.
    ///
    /// # Errors
    /// The first [`SnapshotError`] found.
    pub fn validate(&self) -> Result<(), SnapshotError> {
        self.check_representable()?;
        self.check_consistent()
    }

    /// The representability half of [`validate`](Self::validate).
    pub(crate) fn check_representable(&self) -> Result<(), SnapshotError> {
        for (key, vip) in &self.vips {
            if vip.id.0 >= STATOR_MAX_VIPS {
                return Err(SnapshotError::VipIdOutOfRange {
                    vip: *key,
                    id: vip.id.0,
                });
            }
            // the previous table (second chance) is held to the same bounds
            for table in std::iter::once(&vip.table).chain(vip.previous.as_ref()) {
                if table.len() > STATOR_MAX_TABLE_SIZE as usize {
                    return Err(SnapshotError::TableTooLarge {
                        vip: *key,
                        size: table.len(),
                    });
                }
                if let Some((slot, &value)) = table
                    .iter()
                    .enumerate()
                    .find(|&(_, &r)| r >= STATOR_MAX_REALS && r != STATOR_NO_REAL)
                {
                    return Err(SnapshotError::SlotOutOfRange {
                        vip: *key,
                        slot,
                        value,
                    });
                }
            }
        }
        if let Some(RealId(id)) = self.reals.keys().find(|r| r.0 >= STATOR_MAX_REALS) {
            return Err(SnapshotError::RealIdOutOfRange { id: *id });
        }
        self.check_peers_representable()?;
        self.check_groups_representable()
    }

    fn check_peers_representable(&self) -> Result<(), SnapshotError> {
        let p = &self.peers;
        let bad = |reason: String| Err(SnapshotError::Peers { reason });
        if p.addrs.len() > STATOR_MAX_PEERS as usize {
            return bad(format!(
                "{} peers, the forwarder holds at most {STATOR_MAX_PEERS}",
                p.addrs.len()
            ));
        }
        if p.table.len() > STATOR_MAX_TABLE_SIZE as usize {
            return bad(format!(
                "table of {} slots exceeds STATOR_MAX_TABLE_SIZE",
                p.table.len()
            ));
        }
        if let Some((slot, v)) = p
            .table
            .iter()
            .enumerate()
            .find(|&(_, &v)| v as usize >= p.addrs.len())
        {
            return bad(format!("slot {slot} names peer {v}, which does not exist"));
        }
        if p.self_index.is_some_and(|i| i >= p.addrs.len()) {
            return bad("this node's index is not one of the peers".into());
        }
        Ok(())
    }

    fn check_groups_representable(&self) -> Result<(), SnapshotError> {
        if let Some(prefix) = self.classes.keys().nth(STATOR_MAX_PREFIXES as usize) {
            return Err(SnapshotError::Prefix {
                prefix: *prefix,
                reason: format!("more than {STATOR_MAX_PREFIXES} prefix groups"),
            });
        }
        for prefix in self.classes.keys() {
            if Prefix::new(prefix.addr, prefix.len) != Some(*prefix) {
                return Err(SnapshotError::Prefix {
                    prefix: *prefix,
                    reason: "host bits are set, or the length exceeds the address".into(),
                });
            }
        }
        // (class, IPv6?) → distinct suffix lengths
        let mut lens: BTreeMap<(ClassId, bool), Vec<u8>> = BTreeMap::new();
        for (key, vip) in &self.vips {
            let Some(g) = vip.group else { continue };
            let width = if key.addr.is_ipv6() { 128 } else { 32 };
            if g.bits == 0 || u32::from(g.bits) > width {
                return Err(SnapshotError::Group {
                    vip: *key,
                    reason: format!("suffix length {} is not 1..={width}", g.bits),
                });
            }
            let l = lens.entry((g.class, key.addr.is_ipv6())).or_default();
            if !l.contains(&g.bits) {
                l.push(g.bits);
            }
            if l.len() > STATOR_MAX_SUFFIX_LENS as usize {
                return Err(SnapshotError::Group {
                    vip: *key,
                    reason: format!(
                        "class {} uses more than {STATOR_MAX_SUFFIX_LENS} suffix lengths",
                        g.class.0
                    ),
                });
            }
        }
        Ok(())
    }

    fn check_consistent(&self) -> Result<(), SnapshotError> {
        let mut ids: BTreeMap<VipId, VipKey> = BTreeMap::new();
        for (key, vip) in &self.vips {
            if let Some(first) = ids.insert(vip.id, *key) {
                return Err(SnapshotError::DuplicateVipId {
                    id: vip.id.0,
                    first,
                    second: *key,
                });
            }
            let size = vip.table.len();
            if size != 0 && !u32::try_from(size).is_ok_and(is_prime) {
                return Err(SnapshotError::TableSizeNotPrime { vip: *key, size });
            }
            for (slot, &r) in vip.table.iter().enumerate() {
                if r == STATOR_NO_REAL {
                    continue;
                }
                let err = match self.reals.get(&RealId(r)) {
                    None => SnapshotError::SlotUnknownReal {
                        vip: *key,
                        slot,
                        real: r,
                    },
                    Some(real) if real.vip != vip.id => SnapshotError::SlotForeignReal {
                        vip: *key,
                        slot,
                        real: r,
                        owner: real.vip.0,
                    },
                    Some(real) if real.state != RealState::Usable => {
                        SnapshotError::SlotDrainingReal {
                            vip: *key,
                            slot,
                            real: r,
                        }
                    }
                    Some(_) => continue,
                };
                return Err(err);
            }
        }
        if self.node.outer_ttl == 0 {
            return Err(SnapshotError::OuterTtlZero);
        }
        let has_v4 = self.node.src_v4.is_some_and(|a| !a.is_unspecified());
        let has_v6 = self.node.src_v6.is_some_and(|a| !a.is_unspecified());
        for (id, real) in &self.reals {
            if !ids.contains_key(&real.vip) {
                return Err(SnapshotError::RealWithoutVip {
                    real: id.0,
                    addr: real.addr,
                    vip: real.vip.0,
                });
            }
            let family = match real.addr {
                std::net::IpAddr::V4(_) if !has_v4 => Some("IPv4"),
                std::net::IpAddr::V6(_) if !has_v6 => Some("IPv6"),
                _ => None,
            };
            if let Some(family) = family {
                return Err(SnapshotError::NoSource {
                    real: id.0,
                    addr: real.addr,
                    family,
                });
            }
            if real.encap == Encap::Gue && self.node.gue_port == 0 {
                return Err(SnapshotError::GuePortZero { real: id.0 });
            }
        }
        let p = &self.peers;
        if !p.table.is_empty() && !u32::try_from(p.table.len()).is_ok_and(is_prime) {
            return Err(SnapshotError::Peers {
                reason: format!("table size {} is not prime", p.table.len()),
            });
        }
        if !p.table.is_empty() && p.self_index.is_none() {
            return Err(SnapshotError::Peers {
                reason: "this node is not one of the peers".into(),
            });
        }
        self.check_groups_consistent()
    }

    fn check_groups_consistent(&self) -> Result<(), SnapshotError> {
        let classes: std::collections::BTreeSet<ClassId> = self.classes.values().copied().collect();
        let mut seen: BTreeMap<(ClassId, u8, std::net::IpAddr, u16, crate::Proto), VipKey> =
            BTreeMap::new();
        for (key, vip) in &self.vips {
            let Some(g) = vip.group else { continue };
            if !classes.contains(&g.class) {
                return Err(SnapshotError::Group {
                    vip: *key,
                    reason: format!("class {} has no prefix group", g.class.0),
                });
            }
            let suffix = crate::snapshot::suffix_of(key.addr, g.bits);
            if let Some(first) = seen.insert((g.class, g.bits, suffix, key.port, key.proto), *key) {
                return Err(SnapshotError::Group {
                    vip: *key,
                    reason: format!(
                        "same class, suffix, port and protocol as VIP {first}: a packet could \
                         match either"
                    ),
                });
            }
        }
        Ok(())
    }
}

/// A [`Snapshot`] that passed [`Snapshot::validate`] (or, made with
/// [`new_lenient`](Self::new_lenient), only its representability half): what data planes
/// commit and [`CompiledSnapshot`](crate::CompiledSnapshot) compiles. Cheap to clone (the
/// snapshot is shared); reads as the [`Snapshot`] it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidSnapshot {
    snap: Arc<Snapshot>,
    consistent: bool,
}

impl ValidSnapshot {
    /// Validates `snap` ([`Snapshot::validate`]).
    ///
    /// # Errors
    /// The first [`SnapshotError`].
    pub fn new(snap: impl Into<Arc<Snapshot>>) -> Result<Self, SnapshotError> {
        let snap = snap.into();
        snap.validate()?;
        Ok(Self {
            snap,
            consistent: true,
        })
    }

    /// Checks only that `snap` is representable in the maps: a slot may name a missing real,
    /// a real may lack a source address, …, exactly as the maps could hold it, so that the
    /// forwarders drop with `bad_config`, `no_source` and so on. For tests of those paths and
    /// for the differential test; the controller uses [`new`](Self::new).
    ///
    /// # Errors
    /// A representability [`SnapshotError`] (an id or table that does not fit the ABI).
    pub fn new_lenient(snap: impl Into<Arc<Snapshot>>) -> Result<Self, SnapshotError> {
        let snap = snap.into();
        snap.check_representable()?;
        let consistent = snap.check_consistent().is_ok();
        Ok(Self { snap, consistent })
    }

    /// The empty snapshot (no VIP, default node parameters), which is valid.
    pub fn empty() -> Self {
        Self {
            snap: Arc::new(Snapshot::default()),
            consistent: true,
        }
    }

    /// Whether it also passed the consistency half of [`Snapshot::validate`].
    pub fn is_consistent(&self) -> bool {
        self.consistent
    }

    /// The shared snapshot.
    pub fn shared(&self) -> &Arc<Snapshot> {
        &self.snap
    }
}

impl Deref for ValidSnapshot {
    type Target = Snapshot;

    fn deref(&self) -> &Snapshot {
        &self.snap
    }
}

impl TryFrom<Snapshot> for ValidSnapshot {
    type Error = SnapshotError;

    fn try_from(snap: Snapshot) -> Result<Self, SnapshotError> {
        Self::new(snap)
    }
}

impl Snapshot {
    /// Validates the snapshot into the form data planes commit ([`ValidSnapshot::new`]).
    ///
    /// # Errors
    /// The first [`SnapshotError`].
    pub fn validated(self) -> Result<ValidSnapshot, SnapshotError> {
        ValidSnapshot::new(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{BackendSpec, SnapshotBuilder};
    use crate::snapshot::{NodeParams, Proto, Real, Vip, VipFlags};
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;

    fn ip(a: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 1, 0, a))
    }

    fn good() -> Snapshot {
        SnapshotBuilder::new(NodeParams {
            src_v4: Some(Ipv4Addr::new(10, 9, 9, 9)),
            ..NodeParams::default()
        })
        .vip(
            ip(100),
            80,
            Proto::Tcp,
            13,
            vec![BackendSpec::new(ip(1)), BackendSpec::new(ip(2))],
        )
        .build()
        .unwrap()
    }

    fn key() -> VipKey {
        VipKey {
            addr: ip(100),
            port: 80,
            proto: Proto::Tcp,
        }
    }

    fn with_table(table: Vec<u32>) -> Snapshot {
        let mut s = good();
        s.vips.get_mut(&key()).unwrap().table = Arc::from(table);
        s
    }

    #[test]
    fn a_built_snapshot_is_valid() {
        assert_eq!(good().validate(), Ok(()));
    }

    #[test]
    fn representability() {
        let mut s = good();
        s.vips.get_mut(&key()).unwrap().id = VipId(STATOR_MAX_VIPS);
        assert!(matches!(
            s.validate(),
            Err(SnapshotError::VipIdOutOfRange { .. })
        ));
        let mut s = good();
        let r = s.reals[&RealId(0)];
        s.reals.insert(RealId(STATOR_MAX_REALS), r);
        assert_eq!(
            s.validate(),
            Err(SnapshotError::RealIdOutOfRange {
                id: STATOR_MAX_REALS
            })
        );
        let s = with_table(vec![0, 70_000, 1]);
        assert!(matches!(
            s.validate(),
            Err(SnapshotError::SlotOutOfRange {
                slot: 1,
                value: 70_000,
                ..
            })
        ));
    }

    #[test]
    fn consistency() {
        assert!(matches!(
            with_table(vec![0, 1, 0, 1]).validate(),
            Err(SnapshotError::TableSizeNotPrime { size: 4, .. })
        ));
        assert!(matches!(
            with_table(vec![0, 1, 9]).validate(),
            Err(SnapshotError::SlotUnknownReal {
                slot: 2,
                real: 9,
                ..
            })
        ));
        assert_eq!(with_table(vec![STATOR_NO_REAL; 3]).validate(), Ok(()));
        let mut s = with_table(vec![0, 1, 0]);
        s.reals.get_mut(&RealId(1)).unwrap().state = RealState::Draining;
        assert!(matches!(
            s.validate(),
            Err(SnapshotError::SlotDrainingReal { real: 1, .. })
        ));
        let mut s = good();
        s.reals.get_mut(&RealId(1)).unwrap().vip = VipId(5);
        assert!(matches!(
            s.validate(),
            Err(SnapshotError::SlotForeignReal { owner: 5, .. })
        ));
        let mut s = good();
        let other = VipKey { port: 81, ..key() };
        s.vips.insert(
            other,
            Vip::new(VipId(0), VipFlags::default(), Arc::from(Vec::new())),
        );
        assert!(matches!(
            s.validate(),
            Err(SnapshotError::DuplicateVipId { id: 0, .. })
        ));
        let mut s = good();
        s.reals.insert(
            RealId(7),
            Real {
                addr: ip(7),
                vip: VipId(3),
                state: RealState::Usable,
                encap: Encap::Gre,
            },
        );
        assert_eq!(
            s.validate(),
            Err(SnapshotError::RealWithoutVip {
                real: 7,
                addr: ip(7),
                vip: 3
            })
        );
        let mut s = good();
        s.node.src_v4 = Some(Ipv4Addr::UNSPECIFIED);
        assert_eq!(
            s.validate(),
            Err(SnapshotError::NoSource {
                real: 0,
                addr: ip(1),
                family: "IPv4"
            })
        );
        let mut s = good();
        s.node.outer_ttl = 0;
        assert_eq!(s.validate(), Err(SnapshotError::OuterTtlZero));
        let mut s = good();
        s.node.gue_port = 0;
        s.reals.get_mut(&RealId(0)).unwrap().encap = Encap::Gue;
        assert_eq!(s.validate(), Err(SnapshotError::GuePortZero { real: 0 }));
        assert_eq!(
            SnapshotError::OuterTtlZero.to_string(),
            "node: outer_ttl is 0"
        );
    }

    #[test]
    fn a_valid_snapshot_carries_the_proof() {
        let v = ValidSnapshot::new(good()).unwrap();
        assert!(v.is_consistent());
        assert_eq!(*v, good(), "reads as the snapshot");
        assert_eq!(good().validated(), Ok(v));
        assert!(ValidSnapshot::empty().is_consistent());
        assert_eq!(Snapshot::default().validated(), Ok(ValidSnapshot::empty()));
        // Inconsistent: refused by new, taken by new_lenient (marked), for drop-path tests.
        let holes = with_table(vec![0, 1, 9]);
        assert!(matches!(
            ValidSnapshot::new(holes.clone()),
            Err(SnapshotError::SlotUnknownReal { .. })
        ));
        let lenient = ValidSnapshot::new_lenient(holes).unwrap();
        assert!(!lenient.is_consistent());
        // Unrepresentable: refused by both.
        let too_far = with_table(vec![0, 70_000, 1]);
        assert!(ValidSnapshot::new_lenient(too_far.clone()).is_err());
        assert!(ValidSnapshot::try_from(too_far).is_err());
    }
}
