//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! Maglev §4 in the AF_XDP plane, on real veths (docs/afxdp.md "§4"): fragments that arrive
//! before their first are held by the packet threads — in their UMEM frames, bounded in frames,
//! bytes and time — and leave once the first fragment's record exists, so datagrams sent in
//! reverse order come out whole at the sink, each to the backend its flow's unfragmented
//! packets reach; and a traced packet's report reaches the plane's trace queue, naming the
//! backend the packet was sent to.

#[allow(unused_imports)]
use crate::common;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use stator_abi::{Counter, STATOR_TRACE_MAGIC, TraceKind, TraceMark};
use stator_afxdp::{AfxdpConfig, AfxdpForwarder, UmemConfig};
use stator_core::{
    BackendSpec, HoldLimits, NodeParams, Proto, Snapshot, SnapshotBuilder, VipFlags, VipKey,
};
use stator_testkit::{L4, Packet};

use crate::common::*;

const UDP_PORT: u16 = 53;

fn config(threads: usize, hold: HoldLimits) -> AfxdpConfig {
    AfxdpConfig {
        pin: false,
        packet_threads: threads,
        umem: UmemConfig {
            frames: 4096,
            frame_size: 4096,
            check_frames: true,
        },
        hold,
        ..AfxdpConfig::default()
    }
}

/// The tracer key the plane's node holds.
const TRACE_KEY: [u8; 16] = *b"afxdp-sec4-trace";

/// `VIP`:53/udp accepting fragments, on two backends routed into the sink.
fn frag_snapshot() -> Snapshot {
    let node = NodeParams {
        src_v4: Some(LB_OUT),
        trace_keys: stator_abi::TraceKeys::from_keys(&[TRACE_KEY]),
        ..NodeParams::default()
    };
    let specs = [BACKEND, BACKEND2]
        .iter()
        .map(|b| BackendSpec::new(IpAddr::V4(*b)).encap(stator_abi::Encap::Gre))
        .collect();
    SnapshotBuilder::new(node)
        .generation(1)
        .vip_with_flags(
            VipKey {
                addr: VIP.into(),
                port: UDP_PORT,
                proto: Proto::Udp,
            },
            VipFlags {
                fragments: true,
                ..VipFlags::default()
            },
            251,
            specs,
        )
        .build()
        .expect("snapshot")
}

fn start(lab: &Lab, cfg: AfxdpConfig) -> AfxdpForwarder {
    lab.start_plane(cfg, frag_snapshot().validated().expect("valid"))
}

/// A UDP datagram's transport bytes (header + payload) from `sport` to the VIP.
fn datagram(sport: u16, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|i| (i as u8) ^ (sport as u8)).collect();
    let p = Packet::udp(CLIENT.into(), sport, VIP.into(), UDP_PORT).with_payload(&payload);
    p.ip_bytes()[20..].to_vec()
}

/// The IP packets of `l4` cut into fragments of `chunk` bytes (a multiple of 8), IP id `id`.
fn fragments(l4: &[u8], id: u16, chunk: usize) -> Vec<Vec<u8>> {
    l4.chunks(chunk)
        .enumerate()
        .map(|(i, bytes)| {
            let mut p = Packet::udp(CLIENT.into(), 1, VIP.into(), UDP_PORT);
            p.df = false;
            p.ip_id = id;
            p.frag_offset = (i * chunk / 8) as u16;
            p.mf = (i + 1) * chunk < l4.len();
            p.l4 = L4::Raw {
                proto: 17,
                bytes: bytes.to_vec(),
            };
            p.ip_bytes()
        })
        .collect()
}

/// A GRE frame captured at the sink: (outer destination, inner IP packet).
fn decap(f: &[u8]) -> Option<(Ipv4Addr, Vec<u8>)> {
    if !is_gre(f) {
        return None;
    }
    let ip = &f[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    Some((dst, ip.get(ihl + 4..)?.to_vec()))
}

/// A datagram's fragments seen at the sink: payload by offset, and the backend of each.
type Pieces = (BTreeMap<usize, Vec<u8>>, Vec<Ipv4Addr>);

#[test]
fn early_fragments_are_held_and_datagrams_come_out_whole() {
    let lab = Lab::new("fh", 2);
    let plane = start(&lab, config(2, HoldLimits::default()));
    let reader = plane.reader().expect("reader");
    let rx = lab.capture();
    // 24 datagrams of 2,400–3,100 bytes, 3 fragments each: every later fragment first (in
    // reverse order), then the first fragments; then one unfragmented datagram per flow
    let n = 24u16;
    let mut sent: BTreeMap<u16, Vec<u8>> = BTreeMap::new();
    let (mut later, mut firsts, mut whole) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let sport = 30_000 + i;
        let l4 = datagram(sport, 2400 + 30 * usize::from(i));
        let mut fr = fragments(&l4, 0x5000 + i, 1200);
        assert_eq!(fr.len(), 3);
        firsts.push(lab.to_lb(&fr.remove(0)));
        later.extend(fr.iter().rev().map(|f| lab.to_lb(f)));
        sent.insert(0x5000 + i, l4);
        let p = Packet::udp(CLIENT.into(), sport, VIP.into(), UDP_PORT).with_payload(&[7; 32]);
        whole.push(lab.to_lb(&p.ip_bytes()));
    }
    lab.send(later);
    // every later fragment is held before its first comes
    assert!(
        wait_for(Duration::from_secs(5), || {
            reader
                .hold_stats()
                .is_some_and(|h| h.holding == 2 * n as usize)
        }),
        "held: {:?}",
        reader.hold_stats()
    );
    lab.send(firsts);
    lab.send(whole);
    let got = rx.drain(Duration::from_millis(500), Duration::from_secs(10));
    let hold = reader.hold_stats().expect("attached");
    let stats = reader.stats();
    println!(
        "hold: held {}, released {}, expired {}, full {}, holding {}; {} frames at the sink",
        hold.queue.held,
        hold.queue.released,
        hold.queue.expired,
        hold.queue.full,
        hold.holding,
        got.len()
    );
    // reassemble at the sink: id → offset → bytes, and the backend of each
    let mut parts: BTreeMap<u16, Pieces> = BTreeMap::new();
    let mut flow_backend: BTreeMap<u16, Ipv4Addr> = BTreeMap::new();
    for f in &got {
        let Some((dst, inner)) = decap(f) else {
            continue;
        };
        let id = u16::from_be_bytes([inner[4], inner[5]]);
        let frag = u16::from_be_bytes([inner[6], inner[7]]);
        let ihl = usize::from(inner[0] & 0x0f) * 4;
        if frag & 0x3fff == 0 {
            let sport = u16::from_be_bytes([inner[ihl], inner[ihl + 1]]);
            flow_backend.insert(sport, dst);
            continue;
        }
        let e = parts.entry(id).or_default();
        e.0.insert(usize::from(frag & 0x1fff) * 8, inner[ihl..].to_vec());
        e.1.push(dst);
    }
    for (i, (id, l4)) in sent.iter().enumerate() {
        let (offs, backends) = parts
            .get(id)
            .unwrap_or_else(|| panic!("nothing of datagram {id:#x} at the sink"));
        let mut whole = Vec::new();
        for (off, b) in offs {
            assert_eq!(*off, whole.len(), "datagram {id:#x}: a fragment is missing");
            whole.extend_from_slice(b);
        }
        assert_eq!(&whole, l4, "datagram {id:#x} comes out whole");
        let sport = 30_000 + i as u16;
        let b = flow_backend
            .get(&sport)
            .unwrap_or_else(|| panic!("the unfragmented datagram of port {sport}"));
        assert!(
            backends.iter().all(|x| x == b),
            "datagram {id:#x}: every fragment to {b}, the flow's backend: {backends:?}"
        );
    }
    assert_eq!(
        (hold.queue.held, hold.queue.released, hold.queue.expired),
        (2 * u64::from(n), 2 * u64::from(n), 0)
    );
    assert_eq!(hold.holding, 0);
    let c = plane.shards().iter().fold(0, |a, s| {
        a + s.lock().expect("shard").totals().get(Counter::ActHold)
    });
    assert_eq!(c, 2 * u64::from(n), "each hold counted act_hold");
    assert_eq!(stats.threads_total("user_pass"), 0);
}

#[test]
fn the_hold_is_bounded_in_frames_and_time() {
    let lab = Lab::new("fb", 1);
    let limits = HoldLimits {
        max_frames: 3,
        max_bytes: 1 << 20,
        timeout_ns: 300_000_000,
    };
    let plane = start(&lab, config(1, limits));
    let reader = plane.reader().expect("reader");
    // five orphans (no first fragment ever comes): three held, two refused; then all expire
    let frames: Vec<Vec<u8>> = (0..5u16)
        .map(|i| {
            let l4 = datagram(31_000 + i, 1000);
            lab.to_lb(&fragments(&l4, 0x6000 + i, 504)[1])
        })
        .collect();
    lab.send(frames);
    assert!(
        wait_for(Duration::from_secs(5), || {
            reader
                .hold_stats()
                .is_some_and(|h| h.queue.held + h.queue.full == 5)
        }),
        "{:?}",
        reader.hold_stats()
    );
    let h = reader.hold_stats().expect("attached");
    assert_eq!((h.queue.held, h.queue.full, h.holding), (3, 2, 3));
    assert!(
        wait_for(Duration::from_secs(5), || {
            reader.hold_stats().is_some_and(|h| h.queue.expired == 3)
        }),
        "expired after the timeout: {:?}",
        reader.hold_stats()
    );
    let h = reader.hold_stats().expect("attached");
    assert_eq!((h.holding, h.queue.released), (0, 0));
    println!("bounded hold: {h:?}");
    // the frames went back to the pool: the plane still forwards
    let rx = lab.capture();
    let p = Packet::udp(CLIENT.into(), 31_100, VIP.into(), UDP_PORT).with_payload(&[1; 8]);
    lab.send(vec![lab.to_lb(&p.ip_bytes())]);
    assert!(
        rx.drain(Duration::from_millis(300), Duration::from_secs(5))
            .iter()
            .any(|f| is_gre(f)),
        "forwarding after the expiry"
    );
    drop(plane);
}

#[test]
fn a_traced_packet_is_reported_by_its_packet_thread() {
    let lab = Lab::new("tr", 2);
    let plane = start(&lab, config(2, HoldLimits::default()));
    let mut tap = plane.trace_tap();
    let rx = lab.capture();
    let mut m = TraceMark {
        magic: STATOR_TRACE_MAGIC,
        receiver_family: 4,
        receiver_port: 9999u16.to_be_bytes(),
        trace_id: 4242,
        ..TraceMark::default()
    };
    m.receiver[..4].copy_from_slice(&[192, 0, 2, 9]);
    m.mac = stator_core::trace_seal(
        &m,
        &TRACE_KEY,
        CLIENT.into(),
        VIP.into(),
        32_000,
        UDP_PORT,
        17,
    );
    let mut payload = m.to_bytes().to_vec();
    payload.resize(1200, 0);
    let p = Packet::udp(CLIENT.into(), 32_000, VIP.into(), UDP_PORT).with_payload(&payload);
    // an ordinary packet of another flow: no report
    let q = Packet::udp(CLIENT.into(), 32_001, VIP.into(), UDP_PORT).with_payload(&[0; 40]);
    lab.send(vec![lab.to_lb(&q.ip_bytes()), lab.to_lb(&p.ip_bytes())]);
    let mut ev = None;
    assert!(
        wait_for(Duration::from_secs(5), || {
            ev = tap.next_event();
            ev.is_some()
        }),
        "a report"
    );
    let e = ev.expect("a report");
    assert!(
        tap.next_event().is_none(),
        "one report: the marked packet's"
    );
    assert_eq!(e.kind(), Some(TraceKind::Forward));
    assert_eq!((e.trace_id, e.hop), (4242, 1));
    assert_eq!(e.receiver[..4], [192, 0, 2, 9]);
    assert_eq!(u16::from_be_bytes(e.flow.sport), 32_000);
    // the backend it names is where the packet went
    let snap = frag_snapshot();
    let real = snap
        .reals
        .iter()
        .find(|(id, _)| id.0 == e.real_id)
        .map(|(_, r)| r.addr)
        .expect("the report names a real");
    let out: Vec<(Ipv4Addr, Vec<u8>)> = rx
        .drain(Duration::from_millis(300), Duration::from_secs(5))
        .iter()
        .filter_map(|f| decap(f))
        .filter(|(_, inner)| inner.len() > 21 && inner[20..22] == 32_000u16.to_be_bytes())
        .collect();
    assert_eq!(out.len(), 1, "the traced packet is forwarded as usual");
    assert_eq!(IpAddr::V4(out[0].0), real, "the report names its backend");
    let c = plane.shards().iter().fold(0, |a, s| {
        a + s.lock().expect("shard").totals().get(Counter::TraceReport)
    });
    assert_eq!(c, 1, "trace_report counted once");
    assert_eq!(tap.lost(), 0);
    println!(
        "report: trace {} hop {} real {} → {real}",
        e.trace_id, e.hop, e.real_id
    );
}
