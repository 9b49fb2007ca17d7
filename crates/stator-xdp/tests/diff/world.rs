//! The differential test's world: the universe of VIPs and backends that snapshots are drawn
//! from, and the configuration (which of them are present, in what state, with which node
//! parameters) that commits change.

use std::net::IpAddr;
use std::sync::Arc;

use stator_abi::{Encap, STATOR_NO_REAL};
use stator_core::{
    ClassId, NodeParams, Prefix, Proto, Real, RealId, RealState, Snapshot, Vip, VipFlags, VipGroup,
    VipId, VipKey, peer_set,
};
use stator_hash::{MaglevBackend, MaglevTable};

use crate::common::{SRC_V4, src_v6, v4, v6};

/// One second in ns.
pub const SEC: u64 = 1_000_000_000;

/// A VIP that snapshots may contain.
#[derive(Debug, Clone)]
pub struct VipDef {
    pub key: VipKey,
    pub id: u32,
    pub no_ct: bool,
    pub size: u32,
    /// Indexes into [`Universe::reals`].
    pub reals: Vec<usize>,
    /// Present in every snapshot (others come and go).
    pub always: bool,
    /// Accepts fragments (docs/forwarding.md §9).
    pub fragments: bool,
    /// Failover address (§10.1).
    pub failover: Option<IpAddr>,
    /// Class and suffix length of a group VIP (§3.1).
    pub group: Option<(u16, u8)>,
}

/// A (VIP, backend) pair that snapshots may contain. Two defs may share an `id` (a real id
/// reused for another VIP and address in another snapshot: "now another VIP's real").
#[derive(Debug, Clone)]
pub struct RealDef {
    pub id: u32,
    pub addr: IpAddr,
    pub encap: Encap,
    pub weight: u32,
}

/// Every VIP and backend the test's snapshots are made of, the prefix groups and the fragment
/// peers.
#[derive(Debug, Clone)]
pub struct Universe {
    pub vips: Vec<VipDef>,
    pub reals: Vec<RealDef>,
    /// (prefix, length, class).
    pub classes: Vec<(IpAddr, u8, u16)>,
    /// The fragment peers: this node (its IPv4 source) first, then two others.
    pub peers: Vec<IpAddr>,
}

/// The class of the universe's prefix groups.
pub const CLASS: u16 = 1;

/// Addresses of the prefix groups' clusters: `10.100.<n>.<host>` / `fd00:100:<n>::<host>`.
pub fn group_addr(v6_: bool, n: u8, host: u16) -> IpAddr {
    if v6_ {
        v6(&format!("fd00:100:{n:x}::{host:x}"))
    } else {
        v4(10, 100, n, host as u8)
    }
}

/// Clients (the sources of client traffic).
pub fn clients(v6: bool) -> Vec<IpAddr> {
    (1..=6u8)
        .map(|i| {
            if v6 {
                IpAddr::V6(format!("2001:db8::{i}").parse().unwrap())
            } else {
                v4(198, 51, 100, i)
            }
        })
        .collect()
}

impl Universe {
    pub fn new() -> Self {
        use Encap::*;
        let k = |a: IpAddr, port, proto| VipKey {
            addr: a,
            port,
            proto,
        };
        let (a4, b4, c4, d4, e4, f4) = (
            v4(10, 0, 0, 10),
            v4(10, 0, 0, 11),
            v4(10, 0, 0, 12),
            v4(10, 0, 0, 13),
            v4(10, 0, 0, 14),
            v4(10, 0, 0, 15),
        );
        let (a6, b6, c6) = (v6("fd00::10"), v6("fd00::11"), v6("fd00::12"));
        // (key, no_ct, size, always, backends)
        #[allow(clippy::type_complexity)]
        let defs: Vec<(VipKey, bool, u32, bool, Vec<(IpAddr, Encap, u32)>)> = vec![
            (
                k(a4, 80, Proto::Tcp),
                false,
                13,
                true,
                vec![
                    (v4(10, 20, 0, 1), Gre, 1),
                    (v4(10, 20, 0, 2), Gre, 2),
                    (v6("fd20::1"), Gue, 1),
                    (v4(10, 20, 0, 3), Ipip, 1),
                ],
            ),
            (
                k(a4, 53, Proto::Udp),
                false,
                7,
                true,
                vec![
                    (v4(10, 20, 1, 1), Ipip, 1),
                    (v6("fd20::1:1"), Ipip, 1),
                    (v4(10, 40, 1, 1), Gue, 1),
                ],
            ),
            (
                k(a4, 0, Proto::Tcp),
                false,
                31,
                true,
                vec![(v4(10, 20, 2, 1), Gue, 1), (v4(10, 20, 2, 2), Gre, 1)],
            ),
            (
                k(b4, 443, Proto::Tcp),
                true,
                13,
                true,
                vec![(v4(10, 20, 3, 1), Gre, 1), (v6("fd20::3:1"), Gre, 1)],
            ),
            (
                k(b4, 0, Proto::Udp),
                false,
                7,
                true,
                vec![(v4(10, 20, 4, 1), Gue, 1), (v4(10, 10, 0, 2), Gre, 1)],
            ),
            // awkward next hops: redirect, not a tx port, no neighbour, MTU, reject routes, local
            (
                k(c4, 80, Proto::Tcp),
                false,
                61,
                true,
                vec![
                    (v4(10, 40, 5, 1), Gre, 1),
                    (v4(10, 80, 5, 1), Gre, 1),
                    (v4(10, 50, 5, 1), Gre, 1),
                    (v4(10, 60, 5, 1), Gue, 1),
                    (v4(192, 0, 2, 1), Gre, 1),
                    (v4(10, 90, 5, 1), Ipip, 1),
                    (v4(10, 91, 5, 1), Gre, 1),
                    (v4(10, 92, 5, 1), Gre, 1),
                    (v4(10, 10, 0, 1), Gre, 1),
                    (v4(10, 10, 0, 5), Gre, 1),
                ],
            ),
            (
                k(d4, 80, Proto::Tcp),
                false,
                7,
                false,
                vec![(v4(10, 20, 6, 1), Gre, 1)],
            ),
            (
                k(e4, 8080, Proto::Tcp),
                false,
                7,
                false,
                vec![(v6("fd20::7:1"), Gre, 1)],
            ),
            (
                k(a6, 80, Proto::Tcp),
                false,
                13,
                true,
                vec![
                    (v6("fd20::10:1"), Gre, 1),
                    (v6("fd20::10:2"), Gue, 1),
                    (v4(10, 20, 10, 1), Ipip, 1),
                ],
            ),
            (
                k(a6, 53, Proto::Udp),
                false,
                7,
                true,
                vec![(v6("fd20::11:1"), Ipip, 1), (v4(10, 20, 11, 1), Gre, 1)],
            ),
            (
                k(a6, 0, Proto::Tcp),
                false,
                13,
                true,
                vec![(v6("fd20::12:1"), Gue, 1)],
            ),
            (
                k(b6, 0, Proto::Udp),
                true,
                7,
                true,
                vec![(v6("fd20::13:1"), Gre, 1), (v6("fd40::13:1"), Gre, 1)],
            ),
            (
                k(b6, 443, Proto::Tcp),
                false,
                31,
                true,
                vec![
                    (v6("fd40::14:1"), Gre, 1),
                    (v6("fd80::14:1"), Gue, 1),
                    (v6("fd50::14:1"), Gre, 1),
                    (v6("fd60::14:1"), Ipip, 1),
                    (v6("fd90::14:1"), Gre, 1),
                    (v6("fd91::14:1"), Gre, 1),
                    (v6("2001:db8:dead::1"), Gre, 1),
                ],
            ),
            (
                k(c6, 80, Proto::Udp),
                false,
                7,
                false,
                vec![(v4(10, 20, 15, 1), Gue, 1)],
            ),
        ];
        let mut vips = Vec::new();
        let mut reals = Vec::new();
        for (i, (key, no_ct, size, always, backends)) in defs.into_iter().enumerate() {
            let mut mine = Vec::new();
            for (addr, encap, weight) in backends {
                mine.push(reals.len());
                reals.push(RealDef {
                    id: 100 + reals.len() as u32,
                    addr,
                    encap,
                    weight,
                });
            }
            vips.push(VipDef {
                key,
                id: i as u32,
                no_ct,
                size,
                reals: mine,
                always,
                fragments: false,
                failover: None,
                group: None,
            });
        }
        // Fragments: the UDP VIPs on a4 and a6, and b4's any-port UDP VIP.
        for i in [1, 4, 9] {
            vips[i].fragments = true;
        }
        // A VIP whose backend is often missing fails over to another cluster (v4 and v6).
        for (i, (key, to, be)) in [
            (
                k(v4(10, 0, 0, 16), 80, Proto::Tcp),
                v4(10, 20, 0, 88),
                v4(10, 20, 16, 1),
            ),
            (
                k(v6("fd00::16"), 80, Proto::Tcp),
                v6("fd20::88"),
                v6("fd20::16:1"),
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let id = vips.len() as u32;
            reals.push(RealDef {
                id: 100 + reals.len() as u32,
                addr: be,
                encap: Gre,
                weight: 1,
            });
            vips.push(VipDef {
                key,
                id,
                no_ct: false,
                size: 7,
                reals: vec![reals.len() - 1],
                always: i == 0,
                fragments: false,
                failover: Some(to),
                group: None,
            });
        }
        // Group VIPs of class 1: this cluster's 10.100.1.1:53/udp (8-bit suffix, fragments),
        // 10.100.1.0x21 any port/tcp (12-bit suffix), [fd00:100:1::1]:80/tcp (16-bit suffix).
        for (key, bits, frags, be) in [
            (
                k(group_addr(false, 1, 1), 53, Proto::Udp),
                8,
                true,
                v4(10, 20, 17, 1),
            ),
            (
                k(group_addr(false, 1, 0x21), 0, Proto::Tcp),
                12,
                false,
                v4(10, 40, 17, 2),
            ),
            (
                k(group_addr(true, 1, 1), 80, Proto::Tcp),
                16,
                false,
                v6("fd20::17:3"),
            ),
        ] {
            let id = vips.len() as u32;
            reals.push(RealDef {
                id: 100 + reals.len() as u32,
                addr: be,
                encap: Gre,
                weight: 1,
            });
            vips.push(VipDef {
                key,
                id,
                no_ct: false,
                size: 7,
                reals: vec![reals.len() - 1],
                always: true,
                fragments: frags,
                failover: None,
                group: Some((CLASS, bits)),
            });
        }
        // Six TCP ports on one address: more VIPs than an address's inline entries hold.
        for port in 1..=6u16 {
            let i = vips.len();
            reals.push(RealDef {
                id: 100 + reals.len() as u32,
                addr: v4(10, 20, 20, port as u8),
                encap: Gre,
                weight: 1,
            });
            vips.push(VipDef {
                key: k(f4, port, Proto::Tcp),
                id: i as u32,
                no_ct: false,
                size: 7,
                reals: vec![reals.len() - 1],
                always: port <= 3,
                fragments: false,
                failover: None,
                group: None,
            });
        }
        // One real id that moves between two VIPs (and addresses) from snapshot to snapshot.
        let mobile = 99;
        for (vip, addr) in [(0usize, v4(10, 20, 0, 99)), (8, v6("fd20::10:99"))] {
            vips[vip].reals.push(reals.len());
            reals.push(RealDef {
                id: mobile,
                addr,
                encap: Gre,
                weight: 1,
            });
        }
        Self {
            vips,
            reals,
            classes: vec![
                (v4(10, 100, 0, 0), 16, CLASS),
                (v6("fd00:100::"), 32, CLASS),
            ],
            peers: vec![IpAddr::V4(SRC_V4), v4(10, 20, 0, 77), v6("fd20::77")],
        }
    }

    /// VIP ids of every VIP (for the per-VIP counters).
    pub fn vip_ids(&self) -> Vec<u32> {
        self.vips.iter().map(|v| v.id).collect()
    }

    /// Every real id (deduplicated).
    pub fn real_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.reals.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// The tracer keys the nodes of the differential test hold (one, the other, both, or none as
/// commits change them); marks are sealed with either or with a key no node holds.
pub const TRACE_KEY_A: [u8; 16] = *b"diff-trace-key-a";
/// The second key.
pub const TRACE_KEY_B: [u8; 16] = *b"diff-trace-key-b";

/// Which VIPs and backends a snapshot has, and in what state: what commits change.
#[derive(Debug, Clone)]
pub struct Config {
    pub node: NodeParams,
    pub vip_present: Vec<bool>,
    /// Per entry of [`Universe::reals`]: absent, usable or draining.
    pub state: Vec<Option<RealState>>,
    /// Slots replaced by `STATOR_NO_REAL` (per VIP, a modulus: every n-th slot; 0 = none).
    pub holes: Vec<u32>,
    /// Whether fragments are spread over the peers (else every fragment is decided here).
    pub peers_on: bool,
    /// Whether the prefix groups are configured (their VIPs are then also group VIPs).
    pub groups_on: bool,
    /// Per VIP, the table kept for a second chance (docs/forwarding.md §12): the table it had
    /// before a random change, or none.
    pub previous: Vec<Option<Arc<[u32]>>>,
}

/// Whether a def of the mobile real id is the one present (the other must be absent).
fn mobile_ok(u: &Universe, state: &[Option<RealState>], i: usize) -> bool {
    let id = u.reals[i].id;
    !u.reals
        .iter()
        .enumerate()
        .any(|(j, r)| j != i && r.id == id && state[j].is_some())
}

impl Config {
    /// Everything present and usable, the default node with both sources.
    pub fn initial(u: &Universe) -> Self {
        let mut state = vec![Some(RealState::Usable); u.reals.len()];
        // the mobile id starts with its first VIP
        let mut seen = std::collections::HashSet::new();
        for (i, r) in u.reals.iter().enumerate() {
            if !seen.insert(r.id) {
                state[i] = None;
            }
        }
        Self {
            node: NodeParams {
                src_v4: Some(SRC_V4),
                src_v6: Some(src_v6()),
                tcp_timeout_ns: 30 * SEC,
                udp_timeout_ns: 10 * SEC,
                trace_per_sec: 4,
                trace_keys: stator_abi::TraceKeys::from_keys(&[TRACE_KEY_A]),
                ..NodeParams::default()
            },
            vip_present: vec![true; u.vips.len()],
            state,
            holes: vec![0; u.vips.len()],
            peers_on: true,
            groups_on: true,
            previous: vec![None; u.vips.len()],
        }
    }

    /// Sets a real's state, keeping the mobile id on at most one VIP.
    pub fn set(&mut self, u: &Universe, i: usize, s: Option<RealState>) {
        if s.is_some() {
            let id = u.reals[i].id;
            for (j, r) in u.reals.iter().enumerate() {
                if j != i && r.id == id {
                    self.state[j] = None;
                }
            }
        }
        self.state[i] = s;
        // removing one def leaves the other as it was (present or not)
        debug_assert!(s.is_none() || mobile_ok(u, &self.state, i));
    }

    /// Random changes: backends drained, removed, re-added; VIPs that come and go; Maglev
    /// slots without a backend; node parameters (flood limit, echo, sources, timeouts, GUE
    /// port, outer TTL).
    pub fn randomize(&mut self, u: &Universe, g: &mut impl rand::Rng) {
        // each VIP's table now is, more often than not, the previous table after the change
        let before = self.snapshot(u, 0);
        for (vi, v) in u.vips.iter().enumerate() {
            self.previous[vi] = match before.vips.get(&v.key) {
                Some(vip) if g.random_range(0..100) < 60 => Some(vip.table.clone()),
                _ => None,
            };
        }
        for i in 0..u.reals.len() {
            // usable ones leave now and then; the others mostly come back
            let usable = self.state[i] == Some(RealState::Usable);
            if g.random_range(0..100) < if usable { 8 } else { 35 } {
                let s = match g.random_range(0..10) {
                    0..6 => Some(RealState::Usable),
                    6..8 => Some(RealState::Draining),
                    _ => None,
                };
                self.set(u, i, s);
            }
        }
        for (vi, v) in u.vips.iter().enumerate() {
            if !v.always && g.random_range(0..100) < 25 {
                self.vip_present[vi] = !self.vip_present[vi];
            }
            if self.holes[vi] == 0 && g.random_range(0..100) < 2 {
                self.holes[vi] = g.random_range(2..=3);
            } else if self.holes[vi] != 0 && g.random_range(0..100) < 40 {
                self.holes[vi] = 0;
            }
        }
        let n = &mut self.node;
        if g.random_range(0..100) < 20 {
            n.flood_new_per_sec = [0, 0, 0, 3, 8][g.random_range(0..5)];
        }
        if g.random_range(0..100) < 10 {
            n.icmp_echo = !n.icmp_echo;
        }
        n.src_v6 = (g.random_range(0..100) >= 7).then(src_v6);
        n.src_v4 = (g.random_range(0..100) >= 3).then_some(SRC_V4);
        if g.random_range(0..100) < 20 {
            let (t, u_) = [(30 * SEC, 10 * SEC), (5 * SEC, 2 * SEC)][g.random_range(0..2)];
            n.tcp_timeout_ns = t;
            n.udp_timeout_ns = u_;
        }
        if g.random_range(0..100) < 10 {
            n.gue_port = [6080, 5555][g.random_range(0..2)];
        }
        if g.random_range(0..100) < 10 {
            n.outer_ttl = [64, 1, 255][g.random_range(0..3)];
        }
        if g.random_range(0..100) < 15 {
            n.trace_per_sec = [0, 1, 4, 100][g.random_range(0..4)];
        }
        if g.random_range(0..100) < 10 {
            let sets: [&[[u8; 16]]; 4] = [
                &[TRACE_KEY_A],
                &[TRACE_KEY_B],
                &[TRACE_KEY_B, TRACE_KEY_A],
                &[],
            ];
            n.trace_keys = stator_abi::TraceKeys::from_keys(sets[g.random_range(0..4)]);
        }
        if g.random_range(0..100) < 10 {
            n.frag_timeout_ns = [SEC, 2 * SEC][g.random_range(0..2)];
        }
        if g.random_range(0..100) < 10 {
            self.peers_on = !self.peers_on;
        }
        if g.random_range(0..100) < 5 {
            self.groups_on = !self.groups_on;
        }
    }

    /// The snapshot of this configuration (`generation` recorded in it).
    pub fn snapshot(&self, u: &Universe, generation: u64) -> Snapshot {
        let mut snap = Snapshot {
            generation,
            node: self.node,
            ..Snapshot::default()
        };
        for (vi, v) in u.vips.iter().enumerate() {
            if !self.vip_present[vi] {
                continue;
            }
            let names: Vec<String> = v
                .reals
                .iter()
                .map(|&ri| u.reals[ri].addr.to_string())
                .collect();
            let mut members = Vec::new();
            for (n, &ri) in v.reals.iter().enumerate() {
                let r = &u.reals[ri];
                let Some(state) = self.state[ri] else {
                    continue;
                };
                snap.reals.insert(
                    RealId(r.id),
                    Real {
                        addr: r.addr,
                        vip: VipId(v.id),
                        state,
                        encap: r.encap,
                    },
                );
                if state == RealState::Usable {
                    members.push(MaglevBackend::new(&names[n], r.weight, r.id));
                }
            }
            let table = MaglevTable::build(&members, v.size).expect("maglev table");
            let mut slots: Vec<u32> = if table.is_empty() {
                Vec::new()
            } else {
                table.slots().to_vec()
            };
            if self.holes[vi] > 1 {
                for (i, s) in slots.iter_mut().enumerate() {
                    if (i as u32).is_multiple_of(self.holes[vi]) {
                        *s = STATOR_NO_REAL;
                    }
                }
            }
            let mut vip = Vip::new(
                VipId(v.id),
                VipFlags {
                    no_conntrack: v.no_ct,
                    fragments: v.fragments,
                },
                Arc::from(slots),
            );
            vip.failover = v.failover;
            // the previous table's backends that are gone stay, as previous backends only
            if let Some(prev) = &self.previous[vi] {
                for &id in prev.iter() {
                    let def = v.reals.iter().map(|&ri| &u.reals[ri]).find(|r| r.id == id);
                    if let Some(r) = def
                        && !snap.reals.contains_key(&RealId(id))
                    {
                        snap.reals.insert(
                            RealId(id),
                            Real {
                                addr: r.addr,
                                vip: VipId(v.id),
                                state: RealState::Previous,
                                encap: r.encap,
                            },
                        );
                    }
                }
                vip.previous = Some(prev.clone());
            }
            if self.groups_on {
                vip.group = v.group.map(|(c, bits)| VipGroup {
                    class: ClassId(c),
                    bits,
                });
            }
            snap.vips.insert(v.key, vip);
        }
        if self.groups_on {
            for &(addr, len, class) in &u.classes {
                snap.classes
                    .insert(Prefix::new(addr, len).unwrap(), ClassId(class));
            }
        }
        if self.peers_on {
            snap.peers = peer_set(u.peers.clone(), Some(0), 13).expect("peer table");
        }
        snap
    }
}
