//! Frames for Maglev §4.2–4.4 (docs/forwarding.md §3.1, §9–§11): datagrams cut into fragments
//! and sent in any order (to fragment VIPs, other VIPs and group addresses, some inside
//! redirects), redirects between nodes (well-formed, plain GRE, other flags, nested, around
//! every kind of inner packet, to VIP, node and group addresses), packets to the addresses of
//! clusters the node was never told about, and traced packets.

use std::net::IpAddr;

use rand::Rng;
use rand::seq::IndexedRandom;

use super::*;

impl Gen {
    /// One §4 episode.
    pub(super) fn fragments_redirects(&mut self, cfg: &Config, out: &mut Vec<Step>) {
        match self.rng.random_range(0..100) {
            0..40 => self.fragmented(cfg, out),
            40..65 => {
                self.tick(cfg, out);
                let (f, kind) = self.redirect();
                let ingress = self.ingress();
                let s = self.frame(Class::Adversarial, kind, f, ingress);
                out.push(s);
            }
            65..85 => {
                self.tick(cfg, out);
                let mut p = self.group_packet();
                if self.pct(20) {
                    self.mark(&mut p);
                }
                let ingress = self.ingress();
                let s = self.frame(Class::Valid, "group", p.frame(), ingress);
                out.push(s);
            }
            _ => {
                self.tick(cfg, out);
                let (mut p, _) = self.valid_packet();
                self.mark(&mut p);
                let ingress = self.ingress();
                let s = self.frame(Class::Valid, "traced", p.frame(), ingress);
                out.push(s);
            }
        }
    }

    /// Puts a trace mark at the start of a TCP/UDP packet's payload (most of the time a
    /// whole one; now and then one cut short), sealed for the packet's flow with one of the
    /// nodes' keys, a key no node holds, or not at all (docs/forwarding.md §11.1).
    /// The controller's heartbeat (docs/forwarding.md §3.2): refreshed now with a bound, then
    /// frames on both sides of it — the clock exactly at the bound, one past, stepped back —
    /// unfragmented, redirected, fragmented and group traffic; then the check off again.
    pub(super) fn heartbeat(&mut self, cfg: &Config, out: &mut Vec<Step>) {
        let after = self.rng.random_range(1..3 * SEC);
        out.push(Step::Commit(Change::Beat(after)));
        for _ in 0..self.rng.random_range(3..10) {
            match self.rng.random_range(0..6) {
                0 => out.push(Step::Advance(after)),
                1 => out.push(Step::Advance(1)),
                2 => out.push(Step::Advance(self.rng.random_range(0..after))),
                3 => out.push(Step::Rewind(self.rng.random_range(1..SEC))),
                _ => {}
            }
            let ingress = self.ingress();
            match self.rng.random_range(0..10) {
                0..5 => {
                    let (p, kind) = self.valid_packet();
                    let s = self.frame(Class::Valid, kind, p.frame(), ingress);
                    out.push(s);
                }
                5..7 => {
                    let (f, kind) = self.redirect();
                    let s = self.frame(Class::Adversarial, kind, f, ingress);
                    out.push(s);
                }
                7..9 => self.fragmented(cfg, out),
                _ => {
                    let p = self.group_packet();
                    let s = self.frame(Class::Valid, "group", p.frame(), ingress);
                    out.push(s);
                }
            }
        }
        out.push(Step::Commit(Change::Beat(0)));
    }

    fn mark(&mut self, p: &mut Packet) {
        let v6_ = self.pct(30);
        let mut m = TraceMark {
            magic: STATOR_TRACE_MAGIC,
            receiver_family: if v6_ { 6 } else { 4 },
            receiver_port: self.rng.random::<u16>().to_be_bytes(),
            trace_id: self.rng.random(),
            ..TraceMark::default()
        };
        self.rng.fill_bytes(&mut m.receiver);
        let ports = match &p.l4 {
            L4::Tcp { sport, dport, .. } => Some((*sport, *dport, 6)),
            L4::Udp { sport, dport, .. } => Some((*sport, *dport, 17)),
            _ => None,
        };
        if let Some((sport, dport, proto)) = ports {
            let key = match self.rng.random_range(0..10) {
                0..4 => Some(crate::diff::world::TRACE_KEY_A),
                4..7 => Some(crate::diff::world::TRACE_KEY_B),
                7..9 => Some(*b"nobody-holds-it!"),
                _ => None,
            };
            if let Some(key) = key {
                m.mac = stator_core::trace_seal(&m, &key, p.src, p.dst, sport, dport, proto);
            }
        }
        let mut bytes = m.to_bytes().to_vec();
        if self.pct(10) {
            bytes.truncate(self.rng.random_range(8..40));
        } else {
            let n = self.rng.random_range(0..40);
            bytes.extend(self.bytes(n));
        }
        if let L4::Tcp { payload, .. } | L4::Udp { payload, .. } = &mut p.l4 {
            *payload = bytes;
        }
        p.ipv4_options.clear();
    }

    /// A packet to an address of the prefix groups: this cluster's, another cluster's, or
    /// one whose suffix no VIP has.
    fn group_packet(&mut self) -> Packet {
        let v6_ = self.pct(30);
        // 1: this cluster (exact); 0x11 and 0x21 share the 12-bit suffix 0x121 with 10.100.1.0x21
        let cluster = *[1u8, 2, 3, 0x11, 0x21, 0x7f].choose(&mut self.rng).unwrap();
        let host: u16 = match self.rng.random_range(0..10) {
            0..5 => 1,
            5..7 => 0x21,
            7 => 0x121,
            _ => self.rng.random_range(2..300),
        };
        let dst = group_addr(v6_, cluster, host);
        let (proto, port) = match self.rng.random_range(0..10) {
            0..4 => (Proto::Udp, 53),
            4..7 => (Proto::Tcp, 80),
            7 => (Proto::Tcp, 4444),
            _ => (Proto::Udp, 22),
        };
        let mut p = self.to(dst, port, proto);
        if self.pct(30) {
            self.decorate(&mut p);
        }
        p
    }

    /// The fragments of a packet's L4 bytes (its IP options and extension headers dropped):
    /// 2–4 pieces on 8-byte boundaries.
    fn cut(&mut self, p: &Packet, id: u32) -> Vec<Packet> {
        let mut whole = p.clone();
        whole.ipv4_options.clear();
        whole.ext.clear();
        let ip = whole.ip_bytes();
        let hdr = if whole.dst.is_ipv6() { 40 } else { 20 };
        let l4 = ip[hdr..].to_vec();
        let proto = if whole.dst.is_ipv6() { ip[6] } else { ip[9] };
        let mut cuts = vec![0usize];
        let pieces = self.rng.random_range(2..=4);
        while cuts.len() < pieces {
            let last = *cuts.last().unwrap();
            if last + 8 >= l4.len() {
                break;
            }
            let room = (l4.len() - last - 1) / 8;
            let step = 8 * self.rng.random_range(1..=room.clamp(1, 6));
            cuts.push(last + step);
        }
        cuts.push(l4.len());
        cuts.windows(2)
            .map(|w| {
                let mut f = whole.clone();
                let more = w[1] < l4.len();
                f.l4 = L4::Raw {
                    proto,
                    bytes: l4[w[0]..w[1]].to_vec(),
                };
                if f.dst.is_ipv6() {
                    f.ext = vec![Ext::Fragment {
                        offset: (w[0] / 8) as u16,
                        more,
                        id,
                    }];
                } else {
                    f.df = false;
                    f.mf = more;
                    f.frag_offset = (w[0] / 8) as u16;
                    f.ip_id = id as u16;
                }
                f
            })
            .collect()
    }

    /// A datagram cut into fragments and sent in some order (the first sometimes last),
    /// with clock steps between them; some pieces arrive inside redirects.
    fn fragmented(&mut self, cfg: &Config, out: &mut Vec<Step>) {
        let mut p = match self.rng.random_range(0..10) {
            0..6 => {
                let key = self.pick_vip(|k: &VipKey| k.proto == Proto::Udp);
                let dport = self.dport(&key);
                self.to(key.addr, dport, key.proto)
            }
            6..8 => self.group_packet(),
            _ => {
                let key = self.random_vip();
                let dport = self.dport(&key);
                self.to(key.addr, dport, key.proto)
            }
        };
        if self.pct(15) {
            self.mark(&mut p);
        }
        let len = match &p.l4 {
            L4::Tcp { payload, .. } | L4::Udp { payload, .. } => payload.len(),
            _ => 0,
        };
        if len < 24 {
            let n = self.rng.random_range(24..200);
            let b = self.bytes(n);
            if let L4::Tcp { payload, .. } | L4::Udp { payload, .. } = &mut p.l4 {
                if payload.len() >= 32 && payload[..8] == STATOR_TRACE_MAGIC.to_ne_bytes() {
                    payload.extend(b);
                } else {
                    *payload = b;
                }
            }
        }
        let v6_ = p.dst.is_ipv6();
        let id: u32 = if v6_ {
            self.rng.random()
        } else {
            u32::from(self.rng.random::<u16>())
        };
        let mut pieces = self.cut(&p, id);
        match self.rng.random_range(0..10) {
            0..4 => {}
            4..7 => pieces.reverse(),
            _ => {
                let i = self.rng.random_range(0..pieces.len());
                let j = self.rng.random_range(0..pieces.len());
                pieces.swap(i, j);
            }
        }
        if self.pct(10) {
            let again = pieces.choose(&mut self.rng).unwrap().clone();
            pieces.push(again);
        }
        let mut key = FragKey {
            id: id.to_be_bytes(),
            family: if v6_ { 6 } else { 4 },
            ..FragKey::default()
        };
        match (p.src, p.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                key.src[..4].copy_from_slice(&s.octets());
                key.dst[..4].copy_from_slice(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                key.src = s.octets();
                key.dst = d.octets();
            }
            _ => {}
        }
        key.proto = match &p.l4 {
            L4::Tcp { .. } => 6,
            _ => 17,
        };
        let ingress = if self.pct(80) { 0 } else { self.ingress() };
        let redirected = self.pct(20);
        for piece in pieces {
            match self.rng.random_range(0..10) {
                0..6 => out.push(Step::Advance(self.rng.random_range(1..200_000))),
                6..9 => self.tick(cfg, out),
                _ => out.push(Step::Advance(cfg.node.frag_timeout_ns / 2)),
            }
            let bytes = if redirected || self.pct(5) {
                self.wrap(&piece, [1, 0])
            } else {
                piece.frame()
            };
            let mut s = self.frame(Class::Stateful, "fragment", bytes, ingress);
            if let Step::Frame(f) = &mut s {
                f.frag = Some(key);
            }
            out.push(s);
        }
    }

    /// `inner` in GRE with `flags` from another node to one of our addresses.
    fn wrap(&mut self, inner: &Packet, flags: [u8; 2]) -> Vec<u8> {
        let outer_v6 = self.pct(25);
        let dst = match self.rng.random_range(0..10) {
            0..4 if outer_v6 => IpAddr::V6(src_v6()),
            0..4 => IpAddr::V4(SRC_V4),
            4..7 => {
                self.pick_vip(|k: &VipKey| k.addr.is_ipv6() == outer_v6)
                    .addr
            }
            7..9 => group_addr(outer_v6, 2, 1),
            _ => {
                if outer_v6 {
                    v6("fd00::99")
                } else {
                    v4(10, 0, 0, 99)
                }
            }
        };
        let src = if outer_v6 {
            v6("fd20::77")
        } else {
            v4(10, 20, 0, 77)
        };
        let et: [u8; 2] = if inner.dst.is_ipv6() {
            [0x86, 0xdd]
        } else {
            [0x08, 0x00]
        };
        let mut bytes = vec![flags[0], flags[1], et[0], et[1]];
        bytes.extend_from_slice(&inner.ip_bytes());
        let mut outer = Packet::udp(src, 1, dst, 1);
        outer.l4 = L4::Raw { proto: 47, bytes };
        if self.pct(10) {
            outer.vlan = Some(3);
        }
        if self.pct(10) {
            outer.padding = self.rng.random_range(1..20);
        }
        outer.frame()
    }

    /// A redirect from another node, well-formed or not, around any kind of inner packet.
    fn redirect(&mut self) -> (Vec<u8>, &'static str) {
        let inner = match self.rng.random_range(0..10) {
            0..5 => self.valid_packet().0,
            5..7 => self.group_packet(),
            7 => {
                let key = self.random_vip();
                let q = self.reply_from(&key, key.addr, 1);
                self.icmp_error(key.addr, q.ip_bytes())
            }
            8 => {
                let key = self.random_vip();
                Packet::icmp(
                    key.addr,
                    key.addr,
                    if key.addr.is_ipv6() { 128 } else { 8 },
                    0,
                    [0; 4],
                    vec![],
                )
            }
            _ => {
                // a redirect inside the redirect
                let (p, _) = self.valid_packet();
                let b = self.wrap(&p, [1, 0]);
                let mut q = Packet::udp(v4(10, 20, 0, 77), 1, v4(10, 0, 0, 10), 1);
                q.l4 = L4::Raw {
                    proto: 47,
                    bytes: b[14..].to_vec(),
                };
                q
            }
        };
        let (flags, kind) = match self.rng.random_range(0..10) {
            0..7 => ([1, 0], "redirect"),
            7 => ([0, 0], "gre_plain"),
            8 => ([0x81, 0], "gre_other_flags"),
            _ => ([2, 0], "gre_recursion_2"),
        };
        let mut f = self.wrap(&inner, flags);
        if self.pct(5) {
            let n = self.rng.random_range(14..f.len());
            f.truncate(n);
        }
        (f, kind)
    }
}
