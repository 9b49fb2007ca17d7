//! The adversarial frames of the generator: truncations, bad headers, fragments, extension
//! headers, ICMP (errors quoting valid, invalid, other-VIP and non-VIP packets; echo; neighbour
//! discovery; the rest), other protocols, non-IP, random bytes and bit flips.

use std::net::IpAddr;

use rand::Rng;
use rand::seq::IndexedRandom;
use stator_abi::STATOR_PROBE_ETHERTYPE;
use stator_core::VipKey;
use stator_testkit::{Ext, L4, Packet};

use super::{Gen, frag_hdr_offset};
use crate::common::{v4, v6};

impl Gen {
    /// A frame of an adversarial kind.
    pub(super) fn adversarial(&mut self) -> (Vec<u8>, &'static str) {
        let k = self.rng.random_range(0..100);
        match k {
            0..8 => {
                let (p, _) = self.valid_packet();
                let mut f = p.frame();
                let n = self.rng.random_range(14..f.len());
                f.truncate(n);
                (f, "truncated")
            }
            8..12 => {
                let key = self.random_vip();
                let (c, sport) = self.client(key.addr.is_ipv6());
                let mut p = Packet::tcp(c, sport, key.addr, 80, 0);
                let proto = *[6u8, 17, if key.addr.is_ipv6() { 58 } else { 1 }]
                    .choose(&mut self.rng)
                    .unwrap();
                let n = self.rng.random_range(0..if proto == 6 { 20 } else { 8 });
                p.l4 = L4::Raw {
                    proto,
                    bytes: self.bytes(n),
                };
                self.decorate(&mut p);
                (p.frame(), "short_l4")
            }
            12..20 => self.bad_ip_header(),
            20..25 => {
                let (mut p, _) = self.valid_packet();
                if p.dst.is_ipv4() {
                    p.mf = self.pct(50);
                    p.frag_offset = if !p.mf || self.pct(50) {
                        self.rng.random_range(1..0x2000)
                    } else {
                        0
                    };
                    (p.frame(), "fragment4")
                } else {
                    let frag = Ext::Fragment {
                        offset: self.rng.random_range(0..0x2000),
                        more: self.pct(50),
                        id: self.rng.random(),
                    };
                    let at = self.rng.random_range(0..=p.ext.len());
                    p.ext.insert(at, frag);
                    let mut f = p.frame();
                    // an atomic fragment's two reserved bits are ignored
                    if let Some(i) = frag_hdr_offset(&p).filter(|_| self.pct(20)) {
                        f[i + 3] |= 0x06;
                    }
                    (f, "fragment6")
                }
            }
            25..30 => {
                let key = self.pick_vip(|k: &VipKey| k.addr.is_ipv6());
                let dport = self.dport(&key);
                let mut p = self.to(key.addr, dport, key.proto);
                let n = self.rng.random_range(4..=6);
                p.ext = (0..n).map(|_| self.ext()).collect();
                let mut f = p.frame();
                if self.pct(30) {
                    // an extension header claiming more than the packet holds
                    let l3 = if p.vlan.is_some() { 18 } else { 14 };
                    if let Some(b) = f.get_mut(l3 + 41) {
                        *b = 0xff;
                    }
                }
                (f, "ext_headers")
            }
            30..45 => self.icmp_error_frame(),
            45..52 => {
                let key = self.random_vip();
                let (c, _) = self.client(key.addr.is_ipv6());
                let v6_ = key.addr.is_ipv6();
                let ty = if v6_ { 128 } else { 8 };
                let rest: [u8; 4] = self.rng.random();
                let n = self.rng.random_range(0..64);
                let mut p = Packet::icmp(
                    c,
                    key.addr,
                    ty,
                    self.rng.random_range(0..2),
                    rest,
                    self.bytes(n),
                );
                self.decorate(&mut p);
                (p.frame(), "echo")
            }
            52..56 => {
                let key = self.random_vip();
                let v6_ = key.addr.is_ipv6();
                let (c, _) = self.client(v6_);
                let ty = if v6_ {
                    self.rng.random_range(133..=137)
                } else {
                    self.rng.random()
                };
                let n = self.rng.random_range(0..32);
                let p = Packet::icmp(c, key.addr, ty, 0, [0; 4], self.bytes(n));
                (p.frame(), "nd_or_icmp")
            }
            56..60 => {
                let key = self.random_vip();
                let v6_ = key.addr.is_ipv6();
                let (c, _) = self.client(v6_);
                let mut p = Packet::icmp(
                    c,
                    key.addr,
                    self.rng.random(),
                    self.rng.random(),
                    [0; 4],
                    vec![],
                );
                if self.pct(30) {
                    // ICMP of the other family
                    p.l4 = L4::Raw {
                        proto: if v6_ { 1 } else { 58 },
                        bytes: self.bytes(16),
                    };
                } else if self.pct(40) {
                    let proto = *[47u8, 50, 132, 59, 0, 4, 41].choose(&mut self.rng).unwrap();
                    p.l4 = L4::Raw {
                        proto,
                        bytes: self.bytes(24),
                    };
                }
                (p.frame(), "other_icmp_or_proto")
            }
            60..66 => (self.non_ip(), "non_ip"),
            66..74 => {
                let n = self.rng.random_range(14..300);
                let mut f = self.bytes(n);
                if self.pct(60) {
                    let v6_ = self.pct(50);
                    f[12..14].copy_from_slice(if v6_ { &[0x86, 0xdd] } else { &[0x08, 0x00] });
                    if self.pct(50) {
                        let key = self.random_vip();
                        match key.addr {
                            IpAddr::V4(a) if !v6_ && f.len() >= 34 => {
                                f[30..34].copy_from_slice(&a.octets())
                            }
                            IpAddr::V6(a) if v6_ && f.len() >= 54 => {
                                f[38..54].copy_from_slice(&a.octets())
                            }
                            _ => {}
                        }
                    }
                }
                (f, "random_bytes")
            }
            74..84 => (self.vip_random_tail(), "vip_random_tail"),
            84..97 => {
                let (p, _) = if self.pct(80) {
                    self.valid_packet()
                } else {
                    let (f, _) = self.icmp_error_frame();
                    return (self.flip(f), "bitflip");
                };
                let f = p.frame();
                (self.flip(f), "bitflip")
            }
            _ => {
                let n = self.rng.random_range(14..=18);
                let mut f = self.bytes(n);
                f[12..14].copy_from_slice(&[0x81, 0x00]);
                (f, "vlan_short")
            }
        }
    }

    fn flip(&mut self, mut f: Vec<u8>) -> Vec<u8> {
        let n = self.rng.random_range(1..=4);
        let span = if self.pct(50) {
            f.len().min(80)
        } else {
            f.len()
        };
        for _ in 0..n {
            let bit = self.rng.random_range(0..span * 8);
            f[bit / 8] ^= 1 << (bit % 8);
        }
        f
    }

    fn bad_ip_header(&mut self) -> (Vec<u8>, &'static str) {
        let (p, _) = self.valid_packet();
        let mut f = p.frame();
        let l3 = if p.vlan.is_some() { 18 } else { 14 };
        let kind = if p.dst.is_ipv4() {
            match self.rng.random_range(0..3) {
                0 => {
                    f[l3] = (f[l3] & 0xf0) | self.rng.random_range(0..16);
                    "bad_ihl"
                }
                1 => {
                    let ihl = usize::from(f[l3] & 0x0f) * 4;
                    let avail = f.len() - l3;
                    let v: u16 = match self.rng.random_range(0..4) {
                        0 => 0,
                        1 => ihl.saturating_sub(1) as u16,
                        2 => (avail + self.rng.random_range(1..100)) as u16,
                        _ => self.rng.random(),
                    };
                    f[l3 + 2..l3 + 4].copy_from_slice(&v.to_be_bytes());
                    "bad_tot_len"
                }
                _ => {
                    f[l3] = (f[l3] & 0x0f) | (self.rng.random_range(0..16) << 4);
                    "bad_version"
                }
            }
        } else if self.pct(70) {
            let avail = f.len() - l3 - 40;
            let v: u16 = match self.rng.random_range(0..4) {
                0 => 0,
                1 => self.rng.random_range(0..=avail as u16),
                2 => (avail + self.rng.random_range(1..100)) as u16,
                _ => self.rng.random(),
            };
            f[l3 + 4..l3 + 6].copy_from_slice(&v.to_be_bytes());
            "bad_payload_len"
        } else {
            f[l3] = (f[l3] & 0x0f) | (self.rng.random_range(0..16) << 4);
            "bad_version"
        };
        (f, kind)
    }

    fn non_ip(&mut self) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
        let tail_len = self.rng.random_range(0..80);
        match self.rng.random_range(0..7) {
            0 => f.extend_from_slice(&[0x08, 0x06]),
            1 => f.extend_from_slice(&[0x88, 0xcc]),
            2 => f.extend_from_slice(&[0x88, 0xa8, 0, 5, 0x08, 0x00]),
            3 => f.extend_from_slice(&[0x81, 0x00, 0, 5, 0x81, 0x00, 0, 6, 0x08, 0x00]),
            4 => f.extend_from_slice(&[0x81, 0x00, 0, 5, 0x08, 0x06]),
            5 => f.extend_from_slice(&(STATOR_PROBE_ETHERTYPE as u16).to_be_bytes()),
            _ => {
                let t: u16 = self.rng.random();
                f.extend_from_slice(&t.to_be_bytes());
            }
        }
        let tail = self.bytes(tail_len);
        f.extend_from_slice(&tail);
        f
    }

    /// Valid Ethernet + IP headers to a VIP address (lengths true), then random bytes under a
    /// random protocol.
    fn vip_random_tail(&mut self) -> Vec<u8> {
        let key = self.random_vip();
        let (c, _) = self.client(key.addr.is_ipv6());
        let proto = *[6u8, 17, 1, 58, 0, 43, 44, 51, 60, 59, self.rng.random()]
            .choose(&mut self.rng)
            .unwrap();
        let n = self.rng.random_range(0..80);
        let mut p = Packet::tcp(c, 1, key.addr, 1, 0);
        p.l4 = L4::Raw {
            proto,
            bytes: self.bytes(n),
        };
        self.decorate(&mut p);
        p.ext.clear();
        p.frame()
    }

    /// An ICMP frag-needed / packet-too-big to a VIP address: quoting a reply of a VIP of that
    /// address (valid), of another VIP address, of a non-VIP, or an invalid quoted header.
    pub(super) fn icmp_error_frame(&mut self) -> (Vec<u8>, &'static str) {
        let key = self.random_vip();
        let v6_ = key.addr.is_ipv6();
        let (c, cport) = self.client(v6_);
        match self.rng.random_range(0..10) {
            0..4 => {
                let q = self.reply_from(&key, c, cport).ip_bytes();
                (self.icmp_error(key.addr, q).frame(), "icmp_error_valid")
            }
            4..6 => {
                // quoting a reply from another VIP address of the family
                let other =
                    self.pick_vip(|k: &VipKey| k.addr.is_ipv6() == v6_ && k.addr != key.addr);
                let q = self.reply_from(&other, c, cport).ip_bytes();
                (self.icmp_error(key.addr, q).frame(), "icmp_error_other_vip")
            }
            6 => {
                let not_vip = VipKey {
                    addr: if v6_ {
                        v6("fd00::99")
                    } else {
                        v4(10, 0, 0, 99)
                    },
                    ..key
                };
                let q = self.reply_from(&not_vip, c, cport).ip_bytes();
                (self.icmp_error(key.addr, q).frame(), "icmp_error_non_vip")
            }
            _ => {
                let mut q = self.reply_from(&key, c, cport).ip_bytes();
                match self.rng.random_range(0..6) {
                    0 => {
                        let n = self.rng.random_range(0..q.len().min(60));
                        q.truncate(n);
                    }
                    1 => q[0] = (q[0] & 0x0f) | (self.rng.random_range(0..16) << 4),
                    2 if !v6_ => q[0] = (q[0] & 0xf0) | self.rng.random_range(0..16),
                    3 => {
                        let at = if v6_ { 6 } else { 9 };
                        q[at] = *[1u8, 58, 47, 0, 44, self.rng.random()]
                            .choose(&mut self.rng)
                            .unwrap();
                    }
                    4 => {
                        let cut = if v6_ {
                            40
                        } else {
                            usize::from(q[0] & 0x0f) * 4
                        };
                        q.truncate(cut + self.rng.random_range(0..8));
                    }
                    _ => {
                        let mut p = self.icmp_error(key.addr, q);
                        if let L4::Icmp { code, ty, .. } = &mut p.l4 {
                            if v6_ {
                                *ty = *[1u8, 3, 4].choose(&mut self.rng).unwrap();
                            } else {
                                *code = *[0u8, 1, 3, 13].choose(&mut self.rng).unwrap();
                            }
                        }
                        return (p.frame(), "icmp_error_invalid");
                    }
                }
                (self.icmp_error(key.addr, q).frame(), "icmp_error_invalid")
            }
        }
    }
}
