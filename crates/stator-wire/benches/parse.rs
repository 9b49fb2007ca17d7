//! The hot path of the forwarder: Ethernet frame to flow tuple. Plus the checksum over a full
//! MTU, for scale. Figures only; a benchmark never fails on a timing.
//!
//! Names: `wire/<function>/<case>`, e.g. `wire/parse_flow/tcp_ipv4`.

use core::net::{Ipv4Addr, Ipv6Addr};
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use stator_wire::*;

const SRC_MAC: EthernetAddress = EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
const DST_MAC: EthernetAddress = EthernetAddress([0x52, 0x54, 0x00, 0xab, 0xcd, 0xef]);

fn tcp_repr(payload: &[u8]) -> TcpRepr<'_> {
    TcpRepr {
        src_port: 54321,
        dst_port: 443,
        seq_number: 1,
        ack_number: 2,
        flags: TcpFlags::ACK | TcpFlags::PSH,
        window_len: 512,
        urgent_at: 0,
        // A timestamp option, as on most Linux segments.
        options: &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
        payload,
    }
}

fn frame_v4(vlan: Option<VlanTag>) -> Vec<u8> {
    let payload = [0x61u8; 64];
    let tcp = tcp_repr(&payload);
    let addrs = IpPair::V4 {
        src: Ipv4Addr::new(198, 51, 100, 7),
        dst: Ipv4Addr::new(203, 0, 113, 10),
    };
    let ip = Ipv4Repr {
        src_addr: Ipv4Addr::new(198, 51, 100, 7),
        dst_addr: Ipv4Addr::new(203, 0, 113, 10),
        protocol: IpProtocol::TCP,
        payload_len: tcp.buffer_len(),
        ttl: 64,
        tos: 0,
        ident: 0x1c46,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    };
    let eth = EthernetRepr {
        src_addr: SRC_MAC,
        dst_addr: DST_MAC,
        vlan,
        ethertype: EtherType::IPV4,
    };
    let mut f = vec![0u8; eth.buffer_len() + ip.buffer_len()];
    let l3 = eth.buffer_len();
    eth.emit(&mut EthernetFrame::new_unchecked(&mut f[..]))
        .unwrap();
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut f[l3..]))
        .unwrap();
    tcp.emit(&mut TcpPacket::new_unchecked(&mut f[l3 + 20..]), &addrs)
        .unwrap();
    f
}

fn frame_v6(fragment: bool) -> Vec<u8> {
    let payload = [0x61u8; 64];
    let tcp = tcp_repr(&payload);
    let src: Ipv6Addr = "2001:db8:1::7".parse().unwrap();
    let dst: Ipv6Addr = "2001:db8:2::10".parse().unwrap();
    let ext_len = if fragment { 8 } else { 0 };
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: if fragment {
            IpProtocol::IPV6_FRAG
        } else {
            IpProtocol::TCP
        },
        payload_len: ext_len + tcp.buffer_len(),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0x12345,
    };
    let eth = EthernetRepr {
        src_addr: SRC_MAC,
        dst_addr: DST_MAC,
        vlan: None,
        ethertype: EtherType::IPV6,
    };
    let mut f = vec![0u8; 14 + ip.buffer_len()];
    eth.emit(&mut EthernetFrame::new_unchecked(&mut f[..]))
        .unwrap();
    ip.emit(&mut Ipv6Packet::new_unchecked(&mut f[14..]))
        .unwrap();
    if fragment {
        let frag = Ipv6FragmentRepr {
            next_header: IpProtocol::TCP,
            info: FragmentInfo {
                id: 7,
                offset: 0,
                more: true,
            },
        };
        frag.emit(&mut Ipv6FragmentHeader::new_unchecked(&mut f[54..]))
            .unwrap();
    }
    tcp.emit(
        &mut TcpPacket::new_unchecked(&mut f[54 + ext_len..]),
        &IpPair::V6 { src, dst },
    )
    .unwrap();
    f
}

/// Reads every field a forwarder uses, the way it uses them: one by one, straight after the call.
///
/// The benchmarks consume the tuple through this rather than handing the whole 80-byte value to
/// `black_box`: that forces a copy of it through memory with wide loads right after the narrow
/// stores that built it, store-forwarding stalls that cost about 7 ns here and that no real caller
/// pays. `tcp_ipv4_whole_value` keeps that figure visible.
#[inline(always)]
fn consume(t: &FlowTuple) -> u64 {
    let (src, dst) = match t.addrs {
        IpPair::V4 { src, dst } => (u64::from(u32::from(src)), u64::from(u32::from(dst))),
        IpPair::V6 { src, dst } => {
            let (s, d) = (u128::from(src), u128::from(dst));
            ((s ^ (s >> 64)) as u64, (d ^ (d >> 64)) as u64)
        }
    };
    src ^ dst.rotate_left(32)
        ^ (u64::from(t.src_port) << 16)
        ^ u64::from(t.dst_port)
        ^ (u64::from(t.protocol.0) << 40)
        ^ (u64::from(t.tcp_flags.bits()) << 48)
        ^ u64::from(t.is_non_first_fragment())
        ^ (t.fragment.map_or(0, |f| u64::from(f.id)) << 8)
        ^ t.vlan.map_or(0, |v| u64::from(v.vid)) << 24
        ^ (t.l4_offset as u64) << 32
        ^ (t.l3_end as u64) << 36
}

fn parse_flow_benches(c: &mut Criterion) {
    let cases = [
        ("tcp_ipv4", frame_v4(None)),
        (
            "tcp_ipv4_vlan",
            frame_v4(Some(VlanTag {
                pcp: 0,
                dei: false,
                vid: 100,
            })),
        ),
        ("tcp_ipv6", frame_v6(false)),
        ("tcp_ipv6_fragment_header", frame_v6(true)),
    ];
    let mut group = c.benchmark_group("wire/parse_flow");
    group.throughput(Throughput::Elements(1));
    for (name, frame) in &cases {
        assert!(
            parse_flow(frame).unwrap().has_ports(),
            "{name} must parse to a 5-tuple"
        );
        group.bench_function(*name, |b| {
            b.iter(|| parse_flow(black_box(frame)).map(|t| consume(&t)))
        });
    }
    let frame = &cases[0].1;
    group.bench_function("tcp_ipv4_whole_value", |b| {
        b.iter(|| parse_flow(black_box(frame)))
    });
    group.finish();
}

/// The same work as `parse_flow` on TCP/IPv4, done with the checked views: the baseline the hot
/// path is measured against (`wire/parse_views/tcp_ipv4` over `wire/parse_flow/tcp_ipv4`).
#[inline(never)]
fn parse_with_views(frame: &[u8]) -> Result<(IpPair, u16, u16, TcpFlags)> {
    let eth = EthernetFrame::new_checked(frame)?;
    if eth.ethertype() != EtherType::IPV4 {
        return Err(Error::NotIp);
    }
    let ip = Ipv4Packet::new_checked(eth.payload())?;
    if ip.version() != 4 {
        return Err(Error::BadVersion);
    }
    let tcp = TcpPacket::new_checked(ip.payload())?;
    let addrs = IpPair::V4 {
        src: ip.src_addr(),
        dst: ip.dst_addr(),
    };
    Ok((addrs, tcp.src_port(), tcp.dst_port(), tcp.flags()))
}

fn baseline_benches(c: &mut Criterion) {
    let frame = frame_v4(None);
    assert!(parse_with_views(&frame).is_ok());
    let mut group = c.benchmark_group("wire/parse_views");
    group.throughput(Throughput::Elements(1));
    group.bench_function("tcp_ipv4", |b| {
        b.iter(|| {
            parse_with_views(black_box(&frame)).map(|(addrs, sp, dp, flags)| {
                let IpPair::V4 { src, dst } = addrs else {
                    return 0;
                };
                u64::from(u32::from(src))
                    ^ u64::from(u32::from(dst)).rotate_left(32)
                    ^ (u64::from(sp) << 16)
                    ^ u64::from(dp)
                    ^ (u64::from(flags.bits()) << 48)
            })
        })
    });
    group.finish();
}

fn checksum_benches(c: &mut Criterion) {
    let data = vec![0xa5u8; 1500];
    let mut group = c.benchmark_group("wire/checksum");
    group.throughput(Throughput::Bytes(1500));
    group.bench_function("sum_1500B", |b| b.iter(|| checksum::sum(black_box(&data))));
    group.finish();
}

criterion_group!(
    benches,
    parse_flow_benches,
    baseline_benches,
    checksum_benches
);
criterion_main!(benches);
