//! The records of the input after the world: each is a frame to process (built from a few
//! bytes into a packet that gets past the first checks — TCP, UDP, other protocols, fragments
//! of a few datagrams in any order, ICMP errors and echoes, any of them inside a Stator
//! redirect or a plain GRE packet, with a VLAN tag, Ethernet padding, a trace mark, one byte
//! flipped — or taken raw from the input) or an event: a snapshot switch, the clock stepping
//! back or jumping.
//!
//! Record: `[op, ctl, dt, ...]`. `op`: bits 0–2 the kind (0 raw, 1–3 TCP/UDP/other packet,
//! 4 ICMP, 5 switch snapshot, 6 clock, 7 only time passes), bit 3 inside a GRE packet, bit 4 a
//! VLAN tag, bit 5 one byte flipped, bit 6 a trace mark, bit 7 Ethernet padding. `ctl`: bit 0
//! the CPU, bits 1–2 the ingress interface, bits 3–4 the headroom, bits 5–7 the unit of `dt`.

use std::net::IpAddr;

use stator_abi::{STATOR_TRACE_MAGIC, TraceMark};
use stator_testkit::{Ext, L4, Packet};

use crate::input::Reader;
use crate::world::{client, destinations, peer_of};

/// What a record asks for.
pub enum Record {
    /// Process a frame.
    Frame(Frame),
    /// Decide the next frames under the other snapshot.
    Switch,
    /// The clock goes back this many nanoseconds (a CPU whose clock lags another's).
    Back(u64),
    /// Only time passes (the holder looks at its queue).
    Tick(u64),
    /// The controller's heartbeat refreshed now, stale after this many ns (0: the check off;
    /// docs/forwarding.md §3.2).
    Beat(u64),
}

/// A frame and what the oracle knows about how it was made.
pub struct Frame {
    pub bytes: Vec<u8>,
    pub cpu: usize,
    pub ingress: u32,
    pub headroom: usize,
    /// Nanoseconds since the previous record.
    pub dt: u64,
    /// Built as a plain TCP or UDP packet (not a fragment, not in GRE, not flipped): one the
    /// forwarder's `explain` and `table_hash` must agree with `process` about.
    pub plain: Option<Plain>,
    /// The (inner) IP packet's length, for a built frame that was not flipped.
    pub ip_len: Option<usize>,
}

/// A plain packet's flow.
pub struct Plain {
    pub flow: stator_core::Flow,
    pub syn: bool,
}

/// Reads one record; `None` at the end of the input.
pub fn read(r: &mut Reader<'_>, seal_key: &[u8; 16]) -> Option<Record> {
    if r.is_empty() {
        return None;
    }
    let op = r.u8();
    let ctl = r.u8();
    let dt = r.u8();
    let dt_ns = u64::from(dt)
        * [
            0,
            1_000_000,
            10_000_000,
            100_000_000,
            1_000_000_000,
            0,
            1_000,
            1_000_000,
        ][usize::from(ctl >> 5)];
    let kind = op & 7;
    match kind {
        5 => return Some(Record::Switch),
        6 => return Some(Record::Back(dt_ns)),
        7 if op & 0x80 != 0 => return Some(Record::Beat(dt_ns)),
        7 => return Some(Record::Tick(dt_ns)),
        _ => {}
    }
    let (mut bytes, mut plain, mut ip_len) = match kind {
        0 => {
            let n = usize::from(r.u8());
            (r.bytes(n).to_vec(), None, None)
        }
        4 => {
            let p = icmp(r);
            let (bytes, ip_len) = wrap_and_frame(r, p, op);
            (bytes, None, ip_len)
        }
        _ => {
            let (p, plain) = packet(r, op & 0x40 != 0, seal_key);
            let (bytes, ip_len) = wrap_and_frame(r, p, op);
            (bytes, plain, ip_len)
        }
    };
    if op & 8 != 0 {
        plain = None;
    }
    if op & 0x20 != 0 && !bytes.is_empty() {
        let at = usize::from(r.u8()) % bytes.len();
        bytes[at] ^= r.u8() | 1;
        plain = None;
        ip_len = None;
    }
    Some(Record::Frame(Frame {
        bytes,
        cpu: usize::from(ctl & 1),
        ingress: [2, 3, 5, 2][usize::from((ctl >> 1) & 3)],
        headroom: [256, 64, 38, 0][usize::from((ctl >> 3) & 3)],
        dt: dt_ns,
        plain,
        ip_len,
    }))
}

/// A TCP, UDP or other packet, maybe a fragment, maybe traced.
fn packet(r: &mut Reader<'_>, traced: bool, seal_key: &[u8; 16]) -> (Packet, Option<Plain>) {
    let [p0, p1, p2, p3, p4, p5] = [r.u8(), r.u8(), r.u8(), r.u8(), r.u8(), r.u8()];
    let dst = destinations()[usize::from(p0 & 15)];
    let src = client(dst, p0 >> 4);
    let sport = 40000 + u16::from(p2 & 0x3f);
    let dport = [80, 53, 443, 81, 0, 1, 8080, 53][usize::from(p3 & 7)];
    let len = usize::from(r.u8());
    let body = r.bytes(len);
    let raw = (p0 >> 5) & 3 == 2;
    let (proto, mut p) = match (p0 >> 5) & 3 {
        1 => (17, Packet::udp(src, sport, dst, dport)),
        2 => (
            p1,
            Packet::udp(src, sport, dst, dport), // its L4 is replaced below
        ),
        _ => (6, Packet::tcp(src, sport, dst, dport, p1)),
    };
    // A mark authentic under `seal_key`, where a sender puts it: first in the payload.
    let mut payload = Vec::new();
    if traced && (proto == 6 || proto == 17) {
        let mut m = TraceMark {
            magic: STATOR_TRACE_MAGIC,
            trace_id: u32::from(p5),
            receiver_family: 4,
            receiver_port: [0x15, 0xb3],
            ..TraceMark::default()
        };
        m.receiver[..4].copy_from_slice(&[192, 0, 2, 77]);
        let key = if p3 & 0x80 == 0 { *seal_key } else { [3; 16] };
        m.mac = stator_core::trace_seal(&m, &key, src, dst, sport, dport, proto);
        payload.extend_from_slice(&m.to_bytes());
    }
    payload.extend_from_slice(body);
    p = match proto {
        6 | 17 => p.with_payload(&payload),
        _ => {
            p.l4 = L4::Raw {
                proto,
                bytes: payload,
            };
            p
        }
    };
    p.tos = p5 & 0xfc;
    p.df = p5 & 1 != 0;
    if p0 & 0x80 != 0 {
        match dst {
            IpAddr::V4(_) => p.ipv4_options = vec![1; 4],
            IpAddr::V6(_) => p.ext.push(Ext::HopByHop(0)),
        }
    }
    // A fragment of datagram `id` (a few per run, so that first and later pieces meet).
    let fragment = p4 & 1 != 0;
    if fragment {
        let id = 0x100 + u16::from(p5 >> 5);
        let first = p4 & 2 != 0;
        let more = p4 & 4 != 0 || !first;
        let offset = if first { 0 } else { u16::from(p4 >> 3).max(1) };
        if !first {
            // the data of a later piece: no ports, no mark
            p.l4 = L4::Raw {
                proto,
                bytes: body.to_vec(),
            };
        }
        match dst {
            IpAddr::V4(_) => {
                p.df = false;
                p.mf = more && p4 & 0x80 == 0;
                p.frag_offset = offset;
                p.ip_id = id;
            }
            IpAddr::V6(_) => p.ext.push(Ext::Fragment {
                offset,
                more: more && p4 & 0x80 == 0,
                id: u32::from(id) << 8,
            }),
        }
    }
    let plain = (!fragment && !raw && (proto == 6 || proto == 17)).then_some(Plain {
        flow: stator_core::Flow {
            src,
            dst,
            sport,
            dport,
            proto,
        },
        syn: proto == 6 && p1 & 0x12 == 0x02,
    });
    (p, plain)
}

/// An ICMP error quoting a reply from a VIP, an echo request, neighbour discovery or another
/// message.
fn icmp(r: &mut Reader<'_>) -> Packet {
    let [i0, i1, i2] = [r.u8(), r.u8(), r.u8()];
    let dst = destinations()[usize::from(i0 & 15)];
    let src = client(dst, i0 >> 4);
    let v6 = dst.is_ipv6();
    // The quoted packet: from a VIP (or another address) to the client.
    let quoted_src = {
        let q = destinations()[usize::from(i2 & 15)];
        if q.is_ipv6() == v6 { q } else { dst }
    };
    let vport = [80, 53, 443, 0][usize::from(i1 & 3)];
    let mut quoted = if i1 & 4 == 0 {
        Packet::tcp(quoted_src, vport, src, 40000, 0x10)
    } else {
        Packet::udp(quoted_src, vport, src, 40000)
    };
    if i1 & 8 != 0 {
        quoted.l4 = L4::Raw {
            proto: 47,
            bytes: vec![0; 8],
        };
    }
    let mut body = quoted.ip_bytes();
    body.truncate(usize::from(i2 >> 4) * 4 + 20);
    let (ty, code, rest) = match (i0 >> 5, v6) {
        (0..=2, false) => (3, 4, [0, 0, 5, 0xdc]),
        (0..=2, true) => (2, 0, [0, 0, 5, 0xdc]),
        (3 | 4, false) => (8, 0, [0, 1, 0, 2]),
        (3 | 4, true) => (128, 0, [0, 1, 0, 2]),
        (5, true) => (135, 0, [0; 4]),
        (6, _) => (3, 1, [0; 4]),
        _ => (i1, i2, [0; 4]),
    };
    if ty == 8 || ty == 128 {
        body = r.bytes(usize::from(i1 >> 4)).to_vec();
    }
    Packet::icmp(src, dst, ty, code, rest, body)
}

/// Puts `p` inside a GRE packet when `op` says so (a Stator redirect from another node, or
/// another GRE, maybe twice), adds a VLAN tag and padding (bytes of the input, so that the
/// oracle sees them kept); returns the frame and the length of the IP packet the forwarder
/// decides on.
fn wrap_and_frame(r: &mut Reader<'_>, p: Packet, op: u8) -> (Vec<u8>, Option<usize>) {
    let ip_len = p.ip_bytes().len();
    let mut outer = p;
    if op & 8 != 0 {
        let w = r.u8();
        let layers = if w & 0x80 != 0 { 2 } else { 1 };
        for _ in 0..layers {
            let dst = {
                let d = destinations()[usize::from(w & 15)];
                if d.is_ipv6() == outer.dst.is_ipv6() || w & 0x40 != 0 {
                    d
                } else {
                    outer.dst
                }
            };
            let flags: [u8; 2] = [[1, 0], [1, 0], [0, 0], [0x81, 0]][usize::from((w >> 4) & 3)];
            let et: [u8; 2] = if outer.dst.is_ipv6() {
                [0x86, 0xdd]
            } else {
                [0x08, 0x00]
            };
            let mut bytes = vec![flags[0], flags[1], et[0], et[1]];
            bytes.extend_from_slice(&outer.ip_bytes());
            let mut o = Packet::udp(peer_of(dst), 1, dst, 1);
            o.l4 = L4::Raw { proto: 47, bytes };
            outer = o;
        }
    }
    if op & 0x10 != 0 {
        outer.vlan = Some(0x0123);
    }
    let mut frame = outer.frame();
    if op & 0x80 != 0 {
        let n = usize::from(r.u8() % 16);
        frame.extend_from_slice(r.bytes(n));
    }
    (frame, Some(ip_len))
}
