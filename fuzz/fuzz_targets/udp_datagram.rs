//! Fuzz target: what a UDP client controls at a listener with `udp.proxy_protocol` on — the
//! bytes of its datagrams (and, through GRO, how the kernel batches them) — against the pure
//! part of the listener's datagram handling, `stator_proxy::udp::ppv2`.
//!
//! Input: byte 0 flags (bit 0: client IPv6, bit 1: destination IPv6, bit 2: also run the
//! datagram bytes through `decode` as a header), then the client's and the destination's
//! address and port (4 or 16 bytes, then 2), a 2-byte GRO stride, and the received buffer.
//!
//! Oracles:
//! - `decode` never panics on any bytes; when it reads a header, the rest it returns is the
//!   datagram's tail right after `16 + len` bytes, the header opens with the signature and
//!   version 2 / PROXY, and its addresses re-encode (`encode`) to the bytes they came from —
//!   the parser and the writer speak one format;
//! - the signature check the listener applies to every client datagram (`from_client` drops a
//!   datagram that starts with `ppv2::SIGNATURE`, counted `client_proxy_header`) catches every
//!   datagram an upstream would read as a header: `decode(d).is_some()` implies `d` starts
//!   with the signature. So no client names the address of its choice to an upstream;
//! - for each datagram of the buffer (split by the stride, as GRO delivers them) that the
//!   check lets through, the header the listener puts in front (`encode(client, dst)`) is what
//!   the upstream reads back — the client and destination (both IPv6, IPv4-mapped, when the
//!   families differ) — followed by exactly the client's bytes; a header is 28 bytes for two
//!   IPv4 addresses and 52 otherwise.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use libfuzzer_sys::fuzz_target;
use stator_proxy::udp::ppv2::{MAX_LEN, SIGNATURE, decode, encode};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Some((client, rest)) = addr(rest, flags & 1 != 0) else {
        return;
    };
    let Some((dst, rest)) = addr(rest, flags & 2 != 0) else {
        return;
    };
    let Some((stride, buffer)) = rest.split_first_chunk::<2>() else {
        return;
    };
    if flags & 4 != 0 {
        header(buffer);
    }
    // The listener's stride is the GRO segment size (at least 1).
    let stride = usize::from(u16::from_be_bytes(*stride)).max(1);
    let mut head = [0u8; MAX_LEN];
    let n = encode(client, dst, &mut head);
    let both_v4 = client.is_ipv4() && dst.is_ipv4();
    assert_eq!(n, if both_v4 { 28 } else { 52 });
    let as_read = |a: SocketAddr| match (both_v4, a.ip()) {
        (false, IpAddr::V4(v4)) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), a.port()),
        _ => a,
    };
    for d in buffer.chunks(stride) {
        header(d);
        if d.starts_with(&SIGNATURE) {
            continue; // dropped: client_proxy_header
        }
        let mut upstream = head[..n].to_vec();
        upstream.extend_from_slice(d);
        assert_eq!(
            decode(&upstream),
            Some((as_read(client), as_read(dst), d)),
            "the upstream reads our header and the client's bytes"
        );
    }
});

/// An address and port from the input.
fn addr(b: &[u8], v6: bool) -> Option<(SocketAddr, &[u8])> {
    if v6 {
        let (a, rest) = b.split_first_chunk::<16>()?;
        let (p, rest) = rest.split_first_chunk::<2>()?;
        let ip = IpAddr::V6(Ipv6Addr::from(*a));
        Some((SocketAddr::new(ip, u16::from_be_bytes(*p)), rest))
    } else {
        let (a, rest) = b.split_first_chunk::<4>()?;
        let (p, rest) = rest.split_first_chunk::<2>()?;
        let ip = IpAddr::V4(Ipv4Addr::from(*a));
        Some((SocketAddr::new(ip, u16::from_be_bytes(*p)), rest))
    }
}

/// `decode` on arbitrary bytes, and what it must mean when it reads a header.
fn header(d: &[u8]) {
    let Some((client, dst, rest)) = decode(d) else {
        return;
    };
    assert!(
        d.starts_with(&SIGNATURE),
        "a header the signature check would miss"
    );
    assert_eq!(d[12], 0x21, "version 2, PROXY");
    let len = usize::from(u16::from_be_bytes([d[14], d[15]]));
    assert_eq!(
        d.len() - rest.len(),
        16 + len,
        "the payload starts after the header"
    );
    assert!(
        std::ptr::eq(rest, &d[16 + len..]),
        "the payload is the datagram's tail"
    );
    let mut again = [0u8; MAX_LEN];
    let n = encode(client, dst, &mut again);
    assert_eq!(again[13], d[13], "the family byte");
    assert!(len >= n - 16, "a header holds its addresses");
    assert_eq!(
        again[16..n],
        d[16..n],
        "the addresses re-encode to their bytes"
    );
}
