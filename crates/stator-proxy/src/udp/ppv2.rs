//! The PROXY protocol, version 2 (HAProxy's `proxy-protocol.txt`, section 2.2), for datagrams:
//! the header a UDP listener puts before the first datagram of a session when
//! `udp.proxy_protocol` is on, so that the upstream learns the client's address and port and
//! the address the client sent to.
//!
//! ```text
//!  0                   12  13  14      16                              16 + len
//!  +-------------------+---+---+-------+--------------------------------+-----------------
//!  | 0D 0A 0D 0A 00 0D | 21| x2| len   | src addr, dst addr, src port,  | the client's
//!  | 0A 51 55 49 54 0A |   |   | (BE)  | dst port (network byte order)  | datagram
//!  +-------------------+---+---+-------+--------------------------------+-----------------
//!    signature          ver family:     IPv4: 4 + 4 + 2 + 2 = 12 bytes (x = 1)
//!                       2,  AF_INET(1)  IPv6: 16 + 16 + 2 + 2 = 36 bytes (x = 2)
//!                       cmd or AF_INET6(2),
//!                       PROXY transport DGRAM (2)
//! ```
//!
//! A client and a destination of different families are both written as IPv6 (an IPv4
//! address as `::ffff:a.b.c.d`). Pure: no I/O.

use std::net::{IpAddr, SocketAddr};

/// The 12-byte signature that opens every version 2 header.
pub const SIGNATURE: [u8; 12] = [
    0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a,
];

/// Longest header this module writes (IPv6).
pub const MAX_LEN: usize = 16 + 36;

/// Writes the header for a datagram from `client` to `dst` into `out`; returns its length
/// (28 for IPv4, 52 for IPv6).
pub fn encode(client: SocketAddr, dst: SocketAddr, out: &mut [u8; MAX_LEN]) -> usize {
    out[..12].copy_from_slice(&SIGNATURE);
    out[12] = 0x21; // version 2, command PROXY
    let (src_ip, dst_ip) = match (client.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out[13] = 0x12; // AF_INET, DGRAM
            out[14..16].copy_from_slice(&12u16.to_be_bytes());
            out[16..20].copy_from_slice(&s.octets());
            out[20..24].copy_from_slice(&d.octets());
            out[24..26].copy_from_slice(&client.port().to_be_bytes());
            out[26..28].copy_from_slice(&dst.port().to_be_bytes());
            return 28;
        }
        (s, d) => (v6(s), v6(d)),
    };
    out[13] = 0x22; // AF_INET6, DGRAM
    out[14..16].copy_from_slice(&36u16.to_be_bytes());
    out[16..32].copy_from_slice(&src_ip);
    out[32..48].copy_from_slice(&dst_ip);
    out[48..50].copy_from_slice(&client.port().to_be_bytes());
    out[50..52].copy_from_slice(&dst.port().to_be_bytes());
    52
}

fn v6(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Parses a version 2 header at the start of `datagram` (what an upstream does; the tests and
/// the benchmark's echo server use it): the client, the destination and the payload after the
/// header. `None` when there is no valid PROXY/DGRAM header.
pub fn decode(datagram: &[u8]) -> Option<(SocketAddr, SocketAddr, &[u8])> {
    if datagram.len() < 16 || datagram[..12] != SIGNATURE || datagram[12] != 0x21 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([datagram[14], datagram[15]]));
    let body = datagram.get(16..16 + len)?;
    let rest = &datagram[16 + len..];
    let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
    match datagram[13] {
        0x12 if len >= 12 => {
            let s: [u8; 4] = body[0..4].try_into().ok()?;
            let d: [u8; 4] = body[4..8].try_into().ok()?;
            Some((
                SocketAddr::from((s, port(&body[8..10]))),
                SocketAddr::from((d, port(&body[10..12]))),
                rest,
            ))
        }
        0x22 if len >= 36 => {
            let s: [u8; 16] = body[0..16].try_into().ok()?;
            let d: [u8; 16] = body[16..32].try_into().ok()?;
            Some((
                SocketAddr::from((s, port(&body[32..34]))),
                SocketAddr::from((d, port(&body[34..36]))),
                rest,
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_header_bytes() {
        let mut out = [0u8; MAX_LEN];
        let n = encode(
            "192.0.2.1:5353".parse().unwrap(),
            "198.51.100.7:53".parse().unwrap(),
            &mut out,
        );
        assert_eq!(n, 28);
        assert_eq!(
            out[..n],
            [
                0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, // sig
                0x21, 0x12, 0x00, 0x0c, // v2 PROXY, AF_INET DGRAM, 12 bytes
                192, 0, 2, 1, 198, 51, 100, 7, // addresses
                0x14, 0xe9, 0x00, 0x35, // 5353, 53
            ]
        );
    }

    #[test]
    fn round_trips_and_mixed_families() {
        let mut out = [0u8; MAX_LEN];
        for (c, d) in [
            ("10.1.2.3:40000", "10.9.9.9:4321"),
            ("[2001:db8::1]:1", "[2001:db8::2]:2"),
        ] {
            let (c, d): (SocketAddr, SocketAddr) = (c.parse().unwrap(), d.parse().unwrap());
            let n = encode(c, d, &mut out);
            let mut dgram = out[..n].to_vec();
            dgram.extend_from_slice(b"payload");
            assert_eq!(decode(&dgram), Some((c, d, &b"payload"[..])));
        }
        let n = encode(
            "10.1.2.3:1".parse().unwrap(),
            "[2001:db8::2]:2".parse().unwrap(),
            &mut out,
        );
        assert_eq!(n, 52);
        let (c, _, _) = decode(&out[..n]).unwrap();
        assert_eq!(c, "[::ffff:10.1.2.3]:1".parse().unwrap());
    }

    #[test]
    fn garbage_is_not_a_header() {
        assert!(decode(b"").is_none());
        assert!(decode(&[0u8; 40]).is_none());
        let mut out = [0u8; MAX_LEN];
        let n = encode(
            "10.1.2.3:1".parse().unwrap(),
            "10.1.2.4:2".parse().unwrap(),
            &mut out,
        );
        assert!(decode(&out[..n - 1]).is_none(), "truncated");
    }
}
