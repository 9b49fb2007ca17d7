//! The seeded generator of the differential test: a stream of steps — frames, clock moves and
//! configuration changes — in three classes:
//!
//! - **valid**: random well-formed traffic to the universe's VIPs (and some to non-VIPs): v4/v6,
//!   TCP/UDP, exact and port-0 VIPs (whose backends cover v4→v6, v6→v4 and every
//!   encapsulation), with 802.1Q tags, IPv4 options, IPv6 extension headers including atomic
//!   fragments, TOS/traffic class, DF, Ethernet padding, and payloads up to past the MTU;
//! - **adversarial**: truncations (every length of some frames), bad IHL / lengths / versions,
//!   fragments, the extension-header limit, ICMP errors quoting valid, invalid, other-VIP and
//!   non-VIP packets, echo, neighbour discovery, other ICMP, other protocols, non-IP
//!   ethertypes, random bytes, random tails behind valid headers, bit flips of valid frames;
//! - **stateful**: episodes — a connection's SYN then segments (connection-table insert, then
//!   hits), with commits in between that drain, remove and re-add the flow's backend
//!   (reselect), clock jumps past the idle timeouts (expiry) and across the refresh interval,
//!   ICMP errors about the flow, and SYN bursts through a small flood-guard limit.
//!
//! Everything comes from one ChaCha8 stream, so a seed replays exactly.

use std::net::IpAddr;

use rand::seq::IndexedRandom;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use stator_abi::{STATOR_PROBE_ETHERTYPE, STATOR_PROBE_MAGIC, STATOR_TRACE_MAGIC, TraceMark};
use stator_core::{FragKey, Proto, RealState, VipKey};
use stator_testkit::{Ext, L4, Packet, tcp_flags};

// explicit, so the AF_XDP differential test can compile this file from its own crate
#[path = "frames/fragments_redirects.rs"]
// also included from stator-afxdp's differential (a mod-rs there)
mod fragments_redirects;
#[path = "frames/hostile.rs"]
mod hostile;

use crate::common::{SRC_V4, src_v6, v4, v6};
use crate::diff::world::{Config, SEC, Universe, clients, group_addr};

/// The three classes of frames the test counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Valid,
    Adversarial,
    Stateful,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Valid => "valid",
            Class::Adversarial => "adversarial",
            Class::Stateful => "stateful",
        }
    }
}

/// A frame to run through both implementations.
#[derive(Debug, Clone)]
pub struct Frame {
    pub class: Class,
    pub kind: &'static str,
    pub bytes: Vec<u8>,
    /// Index into the topology's interfaces (0 = lbin).
    pub ingress: usize,
    /// For a fragment: its datagram, whose fragment-table records are compared too.
    pub frag: Option<FragKey>,
}

/// A configuration change, applied to both implementations at once.
#[derive(Debug, Clone, Copy)]
pub enum Change {
    /// Random changes to backends, VIPs and node parameters.
    Random,
    /// The real the last frame went to: drained, removed (`None`) or made usable again.
    LastReal(Option<RealState>),
    /// The real changed last by `LastReal`: usable again (re-added).
    Restore,
    /// The SYN-flood guard's limit.
    FloodLimit(u32),
    /// The next-hop cache on or off (not part of the snapshot; the core does not see it).
    Cache(bool),
    /// The controller's heartbeat (docs/forwarding.md §3.2) refreshed now, stale after this
    /// many ns (0: the check off).
    Beat(u64),
}

/// One step of a run.
#[derive(Debug, Clone)]
pub enum Step {
    Frame(Frame),
    /// The clock moves forward by this many ns.
    Advance(u64),
    /// The clock moves back by this many ns (never to 0 or below).
    Rewind(u64),
    Commit(Change),
    /// The test thread moves to the next allowed CPU (per-CPU tables, guard windows and
    /// counters: docs/forwarding.md §7).
    SwitchCpu,
}

/// The generator.
pub struct Gen {
    rng: ChaCha8Rng,
    u: Universe,
    /// Ingress weights per interface (lbin, lbout, lbx, lbnf).
    ingress_w: [u32; 4],
}

const ROUTER4: [u8; 4] = [203, 0, 113, 1];

fn router(v6_: bool) -> IpAddr {
    if v6_ {
        v6("2001:db8:ff::1")
    } else {
        IpAddr::from(ROUTER4)
    }
}

fn set_flags(p: &mut Packet, flags: u8) {
    if let L4::Tcp { flags: f, .. } = &mut p.l4 {
        *f = flags;
    }
}

/// Never a self-test probe: the core treats probes as non-IP (docs/forwarding.md §1.4).
fn not_a_probe(f: &mut [u8]) {
    if f.len() >= 22
        && f[12..14] == (STATOR_PROBE_ETHERTYPE as u16).to_be_bytes()
        && f[14..22] == STATOR_PROBE_MAGIC.to_le_bytes()
    {
        f[14] ^= 0xff;
    }
}

impl Gen {
    pub fn new(seed: u64, u: Universe) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            u,
            ingress_w: [80, 10, 5, 5],
        }
    }

    fn pct(&mut self, p: u32) -> bool {
        self.rng.random_range(0..100) < p
    }

    fn ingress(&mut self) -> usize {
        let total: u32 = self.ingress_w.iter().sum();
        let mut x = self.rng.random_range(0..total);
        for (i, w) in self.ingress_w.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        0
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.rng.fill_bytes(&mut b);
        b
    }

    fn client(&mut self, v6_: bool) -> (IpAddr, u16) {
        let c = *clients(v6_).choose(&mut self.rng).unwrap();
        (c, 40_000 + self.rng.random_range(0..12u16))
    }

    fn payload_len(&mut self) -> usize {
        match self.rng.random_range(0..100) {
            0..70 => self.rng.random_range(0..32),
            70..96 => self.rng.random_range(32..300),
            _ => self.rng.random_range(1100..1480),
        }
    }

    /// A destination port for `key`: its port, or any for a port-0 VIP (and now and then a
    /// port no VIP has).
    fn dport(&mut self, key: &VipKey) -> u16 {
        if key.port == 0 || self.pct(4) {
            *[1u16, 2, 7, 80, 443, 8080, 9999, self.rng.random()]
                .choose(&mut self.rng)
                .unwrap()
        } else {
            key.port
        }
    }

    fn random_vip(&mut self) -> VipKey {
        self.u.vips.choose(&mut self.rng).unwrap().key
    }

    /// A random VIP key among those `keep` accepts.
    fn pick_vip(&mut self, keep: impl Fn(&VipKey) -> bool) -> VipKey {
        let keys: Vec<VipKey> = self
            .u
            .vips
            .iter()
            .map(|v| v.key)
            .filter(|k| keep(k))
            .collect();
        *keys.choose(&mut self.rng).unwrap()
    }

    fn tcp_flags(&mut self) -> u8 {
        use tcp_flags::*;
        match self.rng.random_range(0..100) {
            0..30 => SYN,
            30..80 => ACK,
            80..88 => SYN | ACK,
            88..93 => FIN | ACK,
            93..96 => RST,
            _ => self.rng.random(),
        }
    }

    /// Header knobs of valid frames.
    fn decorate(&mut self, p: &mut Packet) {
        if self.pct(10) {
            p.vlan = Some(self.rng.random_range(0..4096));
        }
        if self.pct(30) {
            p.tos = self.rng.random();
        }
        p.df = self.pct(80);
        p.ip_id = self.rng.random();
        p.flow_label = self.rng.random_range(0..1 << 20);
        if p.dst.is_ipv4() && self.pct(10) {
            let n = self.rng.random_range(1..=40);
            p.ipv4_options = self.bytes(n);
        }
        if p.dst.is_ipv6() && self.pct(15) {
            let n = self.rng.random_range(1..=3);
            p.ext = (0..n).map(|_| self.ext()).collect();
        }
        if self.pct(10) {
            p.padding = self.rng.random_range(1..=30);
        }
    }

    fn ext(&mut self) -> Ext {
        match self.rng.random_range(0..5) {
            0 => Ext::HopByHop(self.rng.random_range(0..=2)),
            1 => Ext::DstOpts(self.rng.random_range(0..=2)),
            2 => Ext::Routing(self.rng.random_range(0..=1)),
            3 => Ext::Ah(self.rng.random_range(1..=4)),
            _ => Ext::Fragment {
                offset: 0,
                more: false,
                id: self.rng.random(),
            },
        }
    }

    /// A TCP or UDP packet from a client to (addr, dport, proto).
    fn to(&mut self, addr: IpAddr, dport: u16, proto: Proto) -> Packet {
        let (c, sport) = self.client(addr.is_ipv6());
        let n = self.payload_len();
        let payload = self.bytes(n);
        match proto {
            Proto::Tcp => {
                let f = self.tcp_flags();
                Packet::tcp(c, sport, addr, dport, f).with_payload(&payload)
            }
            Proto::Udp => Packet::udp(c, sport, addr, dport).with_payload(&payload),
        }
    }

    /// A valid packet: mostly to a VIP, sometimes to an address or port that is not one.
    fn valid_packet(&mut self) -> (Packet, &'static str) {
        let (mut p, kind) = if self.pct(88) {
            let key = self.random_vip();
            let dport = self.dport(&key);
            let kind = match (key.addr.is_ipv6(), key.proto) {
                (false, Proto::Tcp) => "tcp4",
                (false, Proto::Udp) => "udp4",
                (true, Proto::Tcp) => "tcp6",
                (true, Proto::Udp) => "udp6",
            };
            (self.to(key.addr, dport, key.proto), kind)
        } else {
            let addr = *[
                v4(10, 0, 0, 99),
                v6("fd00::99"),
                v4(10, 0, 0, 10),
                v6("fd00::11"),
            ]
            .choose(&mut self.rng)
            .unwrap();
            let proto = if self.pct(50) { Proto::Tcp } else { Proto::Udp };
            let port = self.rng.random_range(1000..2000);
            (self.to(addr, port, proto), "not_a_vip")
        };
        self.decorate(&mut p);
        (p, kind)
    }

    /// An ICMP frag-needed (v4) / packet-too-big (v6) to `outer_dst`, quoting `quoted` (IP
    /// bytes, cut to the header + 8 or left whole).
    fn icmp_error(&mut self, outer_dst: IpAddr, mut quoted: Vec<u8>) -> Packet {
        let v6_ = outer_dst.is_ipv6();
        if self.pct(60) && quoted.len() > 48 {
            let keep = if v6_ {
                48
            } else {
                usize::from(quoted[0] & 0x0f) * 4 + 8
            };
            quoted.truncate(keep.min(quoted.len()));
        }
        let mut p = if v6_ {
            Packet::icmp(router(true), outer_dst, 2, 0, 1280u32.to_be_bytes(), quoted)
        } else {
            Packet::icmp(router(false), outer_dst, 3, 4, [0, 0, 0x05, 0xdc], quoted)
        };
        if self.pct(10) {
            p.vlan = Some(7);
        }
        p
    }

    /// A reply from VIP `key` (source) to a client: what a backend sends and a router quotes.
    fn reply_from(&mut self, key: &VipKey, client: IpAddr, cport: u16) -> Packet {
        let vport = self.dport(key);
        let mut q = match key.proto {
            Proto::Tcp => Packet::tcp(key.addr, vport, client, cport, tcp_flags::ACK),
            Proto::Udp => Packet::udp(key.addr, vport, client, cport),
        };
        let n = self.rng.random_range(0..64);
        q = q.with_payload(&self.bytes(n));
        if q.dst.is_ipv4() && self.pct(10) {
            q.ipv4_options = vec![1; 4];
        }
        q
    }

    fn frame(
        &mut self,
        class: Class,
        kind: &'static str,
        mut bytes: Vec<u8>,
        ingress: usize,
    ) -> Step {
        not_a_probe(&mut bytes);
        Step::Frame(Frame {
            class,
            kind,
            bytes,
            ingress,
            frag: None,
        })
    }

    /// The clock's ordinary step before a frame, now and then a large one.
    fn tick(&mut self, cfg: &Config, out: &mut Vec<Step>) {
        match self.rng.random_range(0..1000) {
            0..5 => out.push(Step::Advance(
                cfg.node.udp_timeout_ns + self.rng.random_range(1..SEC),
            )),
            5..8 => out.push(Step::Advance(
                cfg.node.tcp_timeout_ns + self.rng.random_range(1..SEC),
            )),
            8..20 => out.push(Step::Advance(SEC + self.rng.random_range(0..SEC))),
            20..23 => out.push(Step::Rewind(self.rng.random_range(1..2 * SEC))),
            _ => out.push(Step::Advance(self.rng.random_range(0..400_000))),
        }
    }

    /// The next episode: one or more steps.
    pub fn episode(&mut self, cfg: &Config) -> Vec<Step> {
        let mut out = Vec::new();
        let r = self.rng.random_range(0..1000);
        match r {
            0..6 => out.push(Step::Commit(Change::Random)),
            6..8 => {
                let on = self.pct(50);
                out.push(Step::Commit(Change::Cache(on)));
            }
            8..11 => self.truncation_sweep(&mut out),
            11 => out.push(Step::SwitchCpu),
            12..480 => {
                self.tick(cfg, &mut out);
                let (p, kind) = self.valid_packet();
                let ingress = self.ingress();
                let s = self.frame(Class::Valid, kind, p.frame(), ingress);
                out.push(s);
            }
            480..870 => {
                self.tick(cfg, &mut out);
                let (f, kind) = self.adversarial();
                let ingress = self.ingress();
                let s = self.frame(Class::Adversarial, kind, f, ingress);
                out.push(s);
            }
            870..940 => self.connection(cfg, &mut out),
            940..948 => self.flood(&mut out),
            948..953 => self.heartbeat(cfg, &mut out),
            _ => self.fragments_redirects(cfg, &mut out),
        }
        out
    }

    /// Every cut of one frame from 14 bytes to its length.
    fn truncation_sweep(&mut self, out: &mut Vec<Step>) {
        let f = if self.pct(70) {
            let (mut p, _) = self.valid_packet();
            p.l4 = match p.l4 {
                L4::Tcp {
                    sport,
                    dport,
                    flags,
                    ..
                } => L4::Tcp {
                    sport,
                    dport,
                    flags,
                    payload: vec![],
                },
                L4::Udp { sport, dport, .. } => L4::Udp {
                    sport,
                    dport,
                    payload: vec![1, 2],
                },
                other => other,
            };
            p.padding = 0;
            p.frame()
        } else {
            self.icmp_error_frame().0
        };
        for n in 14..f.len() {
            out.push(Step::Advance(1000));
            let s = self.frame(Class::Adversarial, "truncation_sweep", f[..n].to_vec(), 0);
            out.push(s);
        }
    }

    /// A connection: a SYN (or first datagram), then segments with events between them.
    fn connection(&mut self, cfg: &Config, out: &mut Vec<Step>) {
        let key = self.random_vip();
        let dport = self.dport(&key);
        let mut p = self.to(key.addr, dport, key.proto);
        p.padding = 0;
        if self.pct(20) {
            self.decorate(&mut p);
        }
        let ingress = if self.pct(90) { 0 } else { self.ingress() };
        set_flags(&mut p, tcp_flags::SYN);
        let (client, cport) = (
            p.src,
            match &p.l4 {
                L4::Tcp { sport, .. } | L4::Udp { sport, .. } => *sport,
                _ => 0,
            },
        );
        out.push(Step::Advance(1000));
        let s = self.frame(Class::Stateful, "conn_open", p.frame(), ingress);
        out.push(s);
        set_flags(&mut p, tcp_flags::ACK);
        if self.pct(25) {
            // Exactly at the boundaries: the idle timeout (`>`: not expired at T, expired at
            // T + 1 after the last refresh) and the refresh interval (`>=`).
            let t = if key.proto == Proto::Tcp {
                cfg.node.tcp_timeout_ns
            } else {
                cfg.node.udp_timeout_ns
            };
            for dt in [t, SEC - 1, 1, t + 1] {
                out.push(Step::Advance(dt));
                let s = self.frame(Class::Stateful, "conn_boundary", p.frame(), ingress);
                out.push(s);
            }
        }
        for _ in 0..self.rng.random_range(2..8) {
            match self.rng.random_range(0..100) {
                0..40 => out.push(Step::Advance(self.rng.random_range(1..100_000))),
                40..52 => out.push(Step::Advance(SEC + self.rng.random_range(0..SEC / 2))),
                52..60 => {
                    let t = if key.proto == Proto::Tcp {
                        cfg.node.tcp_timeout_ns
                    } else {
                        cfg.node.udp_timeout_ns
                    };
                    out.push(Step::Advance(t + self.rng.random_range(1..SEC)));
                }
                60..68 => out.push(Step::Commit(Change::LastReal(Some(RealState::Draining)))),
                68..75 => out.push(Step::Commit(Change::LastReal(None))),
                75..82 => out.push(Step::Commit(Change::Restore)),
                82..86 => out.push(Step::Commit(Change::Random)),
                86..90 => out.push(Step::Rewind(self.rng.random_range(1..SEC))),
                90..95 => {
                    let mut syn = p.clone();
                    set_flags(&mut syn, tcp_flags::SYN);
                    let s = self.frame(Class::Stateful, "conn_syn_again", syn.frame(), ingress);
                    out.push(s);
                }
                _ => {
                    let vport = match &p.l4 {
                        L4::Tcp { dport, .. } | L4::Udp { dport, .. } => *dport,
                        _ => 0,
                    };
                    let reply = match key.proto {
                        Proto::Tcp => Packet::tcp(key.addr, vport, client, cport, tcp_flags::ACK),
                        Proto::Udp => Packet::udp(key.addr, vport, client, cport),
                    };
                    let e = self.icmp_error(key.addr, reply.ip_bytes());
                    let s = self.frame(Class::Stateful, "conn_icmp_error", e.frame(), ingress);
                    out.push(s);
                }
            }
            let n = self.payload_len().min(200);
            let seg = p.clone().with_payload(&self.bytes(n));
            let s = self.frame(Class::Stateful, "conn_segment", seg.frame(), ingress);
            out.push(s);
        }
    }

    /// SYNs of distinct flows through a small flood-guard limit, across a window boundary.
    fn flood(&mut self, out: &mut Vec<Step>) {
        let limit = self.rng.random_range(2..=4);
        out.push(Step::Commit(Change::FloodLimit(limit)));
        // the window opens with the first SYN, at t0
        out.push(Step::Advance(SEC + self.rng.random_range(0..SEC)));
        let mut elapsed = 0;
        let key = self.pick_vip(|k: &VipKey| k.proto == Proto::Tcp);
        let mut syns = Vec::new();
        for _ in 0..limit + self.rng.random_range(1..=4) {
            let dport = self.dport(&key);
            let (c, sport) = self.client(key.addr.is_ipv6());
            let p = Packet::tcp(c, sport, key.addr, dport, tcp_flags::SYN);
            if !syns.is_empty() {
                let dt = self.rng.random_range(1..10_000);
                elapsed += dt;
                out.push(Step::Advance(dt));
            }
            let s = self.frame(Class::Stateful, "flood_syn", p.frame(), 0);
            out.push(s);
            syns.push(p);
        }
        for p in syns.iter().take(2) {
            let mut a = p.clone();
            set_flags(&mut a, tcp_flags::ACK);
            let dt = self.rng.random_range(1..10_000);
            elapsed += dt;
            out.push(Step::Advance(dt));
            let s = self.frame(Class::Stateful, "flood_ack", a.frame(), 0);
            out.push(s);
        }
        // the last nanosecond of the window (still full), then the first of the next
        out.push(Step::Advance(SEC - 1 - elapsed));
        let s = self.frame(Class::Stateful, "flood_window_edge", syns[0].frame(), 0);
        out.push(s);
        out.push(Step::Advance(1));
        let s = self.frame(Class::Stateful, "flood_window_edge", syns[1].frame(), 0);
        out.push(s);
    }
}

/// The offset in the frame of the first IPv6 fragment header of `p`, if any.
fn frag_hdr_offset(p: &Packet) -> Option<usize> {
    let mut off = if p.vlan.is_some() { 18 } else { 14 } + 40;
    for e in &p.ext {
        if matches!(e, Ext::Fragment { .. }) {
            return Some(off);
        }
        off += match e {
            Ext::HopByHop(l) | Ext::DstOpts(l) | Ext::Routing(l) => (usize::from(*l) + 1) * 8,
            Ext::Ah(l) => (usize::from(*l) + 2) * 4,
            Ext::Fragment { .. } => 8,
        };
    }
    None
}
