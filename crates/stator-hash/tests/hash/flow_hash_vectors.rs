//! The shared flow-hash vectors, checked against the Rust implementation (the C header is
//! checked against the same file by `hash/flow_hash_c.rs`).
#[allow(unused_imports)]
use crate::common;

use crate::common::flow_hash_vectors;
use stator_hash::{flow_hash_v4, flow_hash_v6};

#[test]
fn rust_matches_the_shared_vectors() {
    let vectors = flow_hash_vectors();
    assert!(vectors.len() >= 30, "the vector file lost entries");
    for kind in ["V4 ", "V6 ", "V4Frag", "V6Frag"] {
        assert!(
            vectors
                .iter()
                .any(|(_, f, _)| format!("{f:?}").starts_with(kind)),
            "no {kind} vector"
        );
    }
    for (line, flow, want) in vectors {
        assert_eq!(flow.hash(), want, "line {line}: {flow:?}");
    }
}

/// An ICMP error (destination unreachable / fragmentation needed, packet too big) quotes the
/// packet that could not be delivered. For a VIP's reply traffic that quoted packet runs from the
/// VIP to the client; the forwarder hashes it with source and destination swapped, which must
/// give the hash of the client's flow, so the error reaches the backend that owns the connection.
#[test]
fn icmp_errors_hash_like_the_forward_flow_when_the_inner_header_is_reversed() {
    let (client, vip) = ([198, 51, 100, 23], [203, 0, 113, 80]);
    let (client_port, vip_port) = (51_234, 443);
    let forward = flow_hash_v4(client, vip, client_port, vip_port, 6);
    // Inner (quoted) header as it appears in the ICMP error: VIP -> client.
    let (inner_src, inner_dst, inner_sport, inner_dport) = (vip, client, vip_port, client_port);
    let reversed = flow_hash_v4(inner_dst, inner_src, inner_dport, inner_sport, 6);
    assert_eq!(reversed, forward);
    assert_ne!(
        flow_hash_v4(inner_src, inner_dst, inner_sport, inner_dport, 6),
        forward
    );

    let client6 = "2001:db8:1::23"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let vip6 = "2001:db8:ffff::80"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let forward6 = flow_hash_v6(client6, vip6, client_port, vip_port, 17);
    let (inner_src, inner_dst, inner_sport, inner_dport) = (vip6, client6, vip_port, client_port);
    assert_eq!(
        flow_hash_v6(inner_dst, inner_src, inner_dport, inner_sport, 17),
        forward6
    );
}
