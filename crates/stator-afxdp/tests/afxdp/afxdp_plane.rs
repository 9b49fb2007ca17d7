//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! The AF_XDP plane on real veths in namespaces: frames sent from a generator namespace are
//! redirected by `stator_xsk` to the sockets, forwarded by the packet threads, transmitted by
//! the I/O thread and captured in the sink namespace. Also the resource pitfalls: an undersized
//! packet pool degrades (drops, counted) without deadlock; a lone packet after a second of
//! idleness leaves through the flush timer; a burst of 2,048 frames all complete. And the
//! run-to-completion mode: one thread owning queue 0 of in0 and out0 forwards from one to the
//! other, counted once; interfaces with more RX queues than threads are refused.

#[allow(unused_imports)]
use crate::common;

use std::time::Duration;

use stator_abi::Counter;
use stator_afxdp::{AfxdpConfig, AfxdpForwarder, RingSizes, Threading, UmemConfig};
use stator_testkit::{Packet, tcp_flags};

use crate::common::*;

fn config() -> AfxdpConfig {
    AfxdpConfig {
        pin: false,
        packet_threads: 2,
        umem: UmemConfig {
            frames: 4096,
            frame_size: 4096,
            check_frames: true,
        },
        ..AfxdpConfig::default()
    }
}

/// Starts a plane on the lab's LB with `cfg`, attached to in0 and out0, one VIP committed.
fn start(lab: &Lab, cfg: AfxdpConfig) -> AfxdpForwarder {
    lab.start_plane(cfg, snapshot(1, &[BACKEND, BACKEND2]))
}

fn syn(port: u16) -> Vec<u8> {
    Packet::tcp(CLIENT.into(), port, VIP.into(), 80, tcp_flags::SYN).frame()
}

#[test]
fn frames_are_forwarded_through_the_sockets_and_counted_once() {
    let lab = Lab::new("fw", 2);
    let plane = start(&lab, config());
    let reader = plane.reader().expect("reader");
    let rx = lab.capture();
    let n = 300u16;
    let mut frames: Vec<Vec<u8>> = (0..n).map(|i| syn(20_000 + i)).collect();
    // not ours: a non-VIP address and the VIP's address on another port, both passed by the
    // kernel half exactly as the XDP forwarder passes them
    frames.push(Packet::tcp(CLIENT.into(), 1, SINK.into(), 80, tcp_flags::SYN).frame());
    frames.push(Packet::tcp(CLIENT.into(), 1, VIP.into(), 81, tcp_flags::SYN).frame());
    lab.send(frames);
    let got: Vec<Vec<u8>> = rx
        .drain(Duration::from_millis(300), Duration::from_secs(10))
        .into_iter()
        .filter(|f| is_gre(f))
        .collect();
    assert_eq!(
        got.len(),
        usize::from(n),
        "every VIP frame came out encapsulated"
    );
    for f in &got {
        assert_eq!(
            &f[..6],
            &lab.sink_mac,
            "to the next hop the kernel's FIB names"
        );
        assert_eq!(&f[6..12], &lab.lb_out_mac, "from the egress interface");
        let dst = [f[30], f[31], f[32], f[33]];
        assert!(dst == BACKEND.octets() || dst == BACKEND2.octets());
    }
    let get = |k: Counter| counter(&plane, &reader, k);
    assert_eq!(get(Counter::ActRedirect), u64::from(n));
    assert_eq!(get(Counter::CtInsert), u64::from(n));
    assert!(
        get(Counter::NonVip) >= 2,
        "the kernel half passed and counted the rest"
    );
    let st = reader.stats();
    println!("AF_XDP stats after {n} frames: io {:?}", st.io);
    println!("  threads {:?}", st.threads);
    println!("  sockets {:?}", st.sockets);
    assert_eq!(st.io("rx"), u64::from(n), "only VIP frames went up");
    assert_eq!(st.io("tx"), u64::from(n));
    assert!(wait_for(Duration::from_secs(2), || reader
        .stats()
        .io("completed")
        == u64::from(n)));
    // the connection table is the threads': the tracer finds each flow in exactly one of them
    let key = stator_core::Flow {
        src: CLIENT.into(),
        dst: VIP.into(),
        sport: 20_000,
        dport: 80,
        proto: 6,
    }
    .key()
    .expect("key");
    let holders = plane
        .shards()
        .iter()
        .filter(|s| s.lock().expect("shard").conn_table(0).get(&key).is_some())
        .count();
    assert_eq!(holders, 1, "one packet thread owns the flow");
    let flows: usize = plane
        .shards()
        .iter()
        .map(|s| s.lock().expect("shard").conn_table(0).len())
        .sum();
    assert_eq!(flows, usize::from(n), "each flow in exactly one table");
    plane.check().expect("self-test");
    drop(plane);
}

/// Run to completion, one thread: queue 0 of in0 and of out0 (each veth here has one queue).
fn rtc_config() -> AfxdpConfig {
    AfxdpConfig {
        threading: Threading::RunToCompletion,
        packet_threads: 1,
        ..config()
    }
}

#[test]
fn run_to_completion_forwards_from_one_interface_to_the_other_and_counts_once() {
    let lab = Lab::new("rtc", 1);
    let plane = start(&lab, rtc_config());
    let reader = plane.reader().expect("reader");
    let rx = lab.capture();
    let n = 300u16;
    lab.send((0..n).map(|i| syn(20_000 + i)).collect());
    let got: Vec<Vec<u8>> = rx
        .drain(Duration::from_millis(300), Duration::from_secs(10))
        .into_iter()
        .filter(|f| is_gre(f))
        .collect();
    assert_eq!(
        got.len(),
        usize::from(n),
        "every VIP frame out, encapsulated"
    );
    for f in &got {
        assert_eq!(&f[..6], &lab.sink_mac, "to the FIB's next hop");
        assert_eq!(
            &f[6..12],
            &lab.lb_out_mac,
            "from out0: the thread's socket there"
        );
    }
    let get = |k: Counter| counter(&plane, &reader, k);
    assert_eq!(get(Counter::ActRedirect), u64::from(n));
    assert_eq!(get(Counter::CtInsert), u64::from(n));
    let st = reader.stats();
    println!("run to completion after {n} frames: io {:?}", st.io);
    println!("  threads {:?}", st.threads);
    assert_eq!((st.io("rx"), st.io("tx")), (u64::from(n), u64::from(n)));
    assert_eq!(st.io("steered"), 0, "no steering hop");
    assert!(st.io("flush_turn") > 0 && st.io("flush_timer") == 0);
    assert_eq!(st.threads_total("packets"), u64::from(n));
    assert!(wait_for(Duration::from_secs(2), || reader
        .stats()
        .io("completed")
        == u64::from(n)));
    plane.check().expect("self-test");
    // and a commit reaches the thread (the self-test checks the generation it uses)
    drop(plane);
}

#[test]
fn run_to_completion_refuses_an_interface_with_more_rx_queues_than_threads() {
    let lab = Lab::new("rtcq", 2); // in0: 2 RX queues
    let opts = lab.xdp_options();
    let err = lab
        .lb
        .run_in(move || {
            let mut p = AfxdpForwarder::load(&opts, rtc_config()).expect("load");
            let e = p.attach(&["in0".into(), "out0".into()]).map(|_| ());
            let _ = p.detach(true);
            e
        })
        .expect("enter the LB namespace")
        .expect_err("in0's second queue would have no thread");
    let msg = err.to_string();
    assert!(
        msg.contains("run_to_completion") && msg.contains("in0 has 2 RX queues"),
        "{msg}"
    );
}

#[test]
fn an_idle_plane_sends_a_lone_packet_through_the_flush_timer() {
    let lab = Lab::new("idle", 1);
    let plane = start(&lab, config());
    let reader = plane.reader().expect("reader");
    let rx = lab.capture();
    std::thread::sleep(Duration::from_secs(1));
    let before = reader.stats();
    let t = std::time::Instant::now();
    lab.send(vec![syn(30_000)]);
    let got = rx.recv(Duration::from_secs(5)).filter(|f| is_gre(f));
    let took = t.elapsed();
    assert!(got.is_some(), "the packet came out");
    let after = reader.stats();
    let d = |l: &str| after.io(l) - before.io(l);
    println!(
        "lone packet after 1 s idle: out after {:?} (send included); flushes: timer {}, full {}; \
         I/O sleeps {}",
        took,
        d("flush_timer"),
        d("flush_full"),
        d("sleeps")
    );
    assert_eq!(d("flush_timer"), 1, "one flush, by the timer");
    assert_eq!(d("flush_full"), 0, "a batch of one is never full");
    assert!(d("sleeps") >= 1, "the I/O thread was asleep while idle");
}

#[test]
fn a_burst_of_2048_frames_all_complete() {
    let lab = Lab::new("burst", 1);
    let mut cfg = config();
    cfg.rings = RingSizes::all(2048);
    cfg.queue_depth = 4096;
    let plane = start(&lab, cfg);
    let reader = plane.reader().expect("reader");
    let rx = lab.capture();
    let n = 2048u16;
    lab.send((0..n).map(|i| syn(40_000 + i)).collect());
    let got = rx
        .drain(Duration::from_millis(300), Duration::from_secs(20))
        .into_iter()
        .filter(|f| is_gre(f))
        .count();
    assert!(
        wait_for(Duration::from_secs(5), || reader.stats().io("completed")
            == u64::from(n)),
        "completions: {} of {n}",
        reader.stats().io("completed")
    );
    let st = reader.stats();
    println!(
        "2048 frames: sink saw {got}; tx {} completed {} kicks {} flushes full {} timer {}; \
         xsk {:?}",
        st.io("tx"),
        st.io("completed"),
        st.io("tx_kicks"),
        st.io("flush_full"),
        st.io("flush_timer"),
        st.xsk_totals()
    );
    assert_eq!(st.io("tx"), u64::from(n));
    assert_eq!(got, usize::from(n), "every one reached the sink");
}

#[test]
fn an_undersized_packet_pool_drops_and_counts_without_deadlock() {
    let lab = Lab::new("small", 1);
    let mut cfg = config();
    // 64 frames for fill rings of 64: the kernel runs out of frames to receive into
    cfg.umem.frames = 64;
    cfg.rings = RingSizes::all(64);
    cfg.queue_depth = 16;
    let plane = start(&lab, cfg);
    let reader = plane.reader().expect("reader");
    let rx = lab.capture();
    let n = 3000u16;
    lab.send((0..n).map(|i| syn(i.wrapping_add(1))).collect());
    let got = rx
        .drain(Duration::from_millis(300), Duration::from_secs(20))
        .into_iter()
        .filter(|f| is_gre(f))
        .count();
    let st = reader.stats();
    let x = st.xsk_totals();
    println!(
        "64-frame pool, {n} frames sent at once: {got} forwarded; kernel: rx_dropped {} \
         rx_ring_full {} fill_ring_empty {}; steer stalls {}",
        x.rx_dropped,
        x.rx_ring_full,
        x.rx_fill_ring_empty_descs,
        st.io("steer_stalls")
    );
    assert!(got > 0, "it forwarded");
    assert_eq!(st.io("rx"), got as u64, "what went up came out");
    // what did not make it was dropped by the kernel and counted there (or was lost by veth
    // before XDP: the sender outran the receiver)
    assert!(
        x.rx_dropped + x.rx_fill_ring_empty_descs + x.rx_ring_full > 0 || got == usize::from(n),
        "drops are counted: {x:?}"
    );
    // and it still works: no frame leaked, no thread stuck
    let rx2 = lab.capture();
    lab.send(vec![syn(50_000)]);
    assert!(
        rx2.drain(Duration::from_millis(300), Duration::from_secs(5))
            .iter()
            .any(|f| is_gre(f)),
        "a packet after the flood still goes through"
    );
    plane.check().expect("threads alive");
}
