//! Pinning and restarts: a new loader reuses the pinned maps (connection table, counters,
//! active generation), reads the active snapshot back, refuses pins of another layout, and
//! swaps its program into the pinned links of a previous run. Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::fixtures;

use stator_abi::Encap;
use stator_core::{BackendSpec, SnapshotBuilder};
use stator_testkit::Packet;
use stator_xdp::testrun::TestRunOpts;
use stator_xdp::{AttachMode, ConntrackMode, Forwarder, XdpError, XdpMode};

use crate::common::expect::maglev;
use crate::common::{Lab, PinDir, require_root, v4};
use crate::fixtures::*;

#[test]
fn a_restart_keeps_flows_on_their_backends() {
    require_root();
    let lab = Lab::new("restart");
    let pins = PinDir::new("restart");
    let opts = pins.options(ConntrackMode::PerCpu);
    let lbin = lab.lbin;
    lab.run(move || {
        let run = |fwd: &Forwarder, p: &Packet| {
            fwd.test_run(
                &p.frame(),
                TestRunOpts {
                    ingress_ifindex: lbin,
                    ..TestRunOpts::default()
                },
            )
            .unwrap()
        };
        let backends = |n: u8| {
            (1..=n)
                .map(|i| BackendSpec::new(v4(10, 20, 0, i)).encap(Encap::Gre))
                .collect()
        };
        let vip = vips::tcp4();
        let s1 = SnapshotBuilder::new(node())
            .generation(1)
            .vip(vip.addr, vip.port, vip.proto, 251, backends(2))
            .build()
            .unwrap();
        // the same backends (same ids) plus a third: Maglev moves some flows to it
        let s2 = SnapshotBuilder::new(node())
            .generation(2)
            .vip(vip.addr, vip.port, vip.proto, 251, backends(3))
            .build()
            .unwrap();
        let flows: Vec<Packet> = (0..200)
            .map(|i| tcp(client4(), 31_000 + i, &vip, SYN))
            .collect();
        let moved: Vec<&Packet> = flows
            .iter()
            .filter(|p| maglev(&s1, &vip, hash_of(p)) != maglev(&s2, &vip, hash_of(p)))
            .collect();
        assert!(
            moved.len() > 20,
            "the third backend takes about a third of the flows"
        );

        let mut first = Forwarder::load(&opts).unwrap();
        first.commit(&common::valid(&s1)).unwrap();
        // the backend a flow went to: the outer IPv4 destination
        let backend = |data: &[u8]| data[30..34].to_vec();
        let mut answers = Vec::new();
        for p in &flows {
            answers.push(backend(&run(&first, p).data));
        }
        let inserts = first.maps().counters().unwrap();
        drop(first);

        let mut second = Forwarder::load(&opts).unwrap();
        assert_eq!(
            second.active_snapshot().unwrap().as_ref(),
            Some(&s1),
            "the active snapshot reads back exactly"
        );
        assert_eq!(
            second.maps().counters().unwrap(),
            inserts,
            "counters survive the restart"
        );
        second.self_test().unwrap();
        second.commit(&common::valid(&s2)).unwrap();
        for p in &moved {
            let i = flows.iter().position(|f| std::ptr::eq(f, *p)).unwrap();
            let mut ack = (*p).clone();
            if let stator_testkit::L4::Tcp { flags, .. } = &mut ack.l4 {
                *flags = ACK;
            }
            let out = run(&second, &ack);
            assert_eq!(out.action, TX);
            // same backend as before the restart, although s2's table says otherwise
            assert_eq!(
                backend(&out.data),
                answers[i],
                "flow {i} changed backend across the restart"
            );
        }
        let delta = second.maps().counters().unwrap().since(&inserts);
        assert_eq!(delta.get(stator_abi::Counter::CtHit), moved.len() as u64);
        println!(
            "{} of {} flows would move under the new table; all kept their backend",
            moved.len(),
            flows.len()
        );
        // a new SYN follows the new table
        let p = moved[0];
        let out = run(&second, p);
        let i = flows.iter().position(|f| f == p).unwrap();
        assert_ne!(
            backend(&out.data),
            answers[i],
            "a SYN follows the new table"
        );
    });
}

#[test]
fn pins_of_another_layout_are_refused() {
    require_root();
    let pins = PinDir::new("layout");
    let opts = pins.options(ConntrackMode::PerCpu);
    drop(Forwarder::load(&opts).unwrap());

    let smaller = stator_xdp::XdpOptions {
        ct_entries: 4096,
        ..opts.clone()
    };
    let err = Forwarder::load(&smaller).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            XdpError::IncompatiblePin {
                what: "max_entries",
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.contains("stator_ct") && msg.contains("65536") && msg.contains("4096"),
        "{msg}"
    );

    let shared = stator_xdp::XdpOptions {
        conntrack: ConntrackMode::Shared,
        ..opts.clone()
    };
    let err = Forwarder::load(&shared).unwrap_err();
    assert!(
        matches!(
            err,
            XdpError::IncompatiblePin {
                what: "the map type",
                ..
            }
        ),
        "{err}"
    );
    println!("refused: {err}");

    // the original options still load
    drop(Forwarder::load(&opts).unwrap());
}

/// An earlier build's counters (one fewer: before `trace_unauth`) are a statistics map: the
/// load replaces the pin instead of refusing, and the program counts into the new one; a map
/// that holds state (the connection table) is still refused (above).
#[test]
fn a_statistics_map_of_an_earlier_shape_is_replaced() {
    require_root();
    let pins = PinDir::new("stats");
    let opts = pins.options(ConntrackMode::PerCpu);
    drop(Forwarder::load(&opts).unwrap());
    let counters = pins.path().join("stator_counters");
    std::fs::remove_file(&counters).unwrap();
    let old = stator_abi::STATOR_CNT_MAX - 1;
    let out = std::process::Command::new("bpftool")
        .args(["map", "create"])
        .arg(&counters)
        .args(["type", "percpu_array", "key", "4", "value", "8", "entries"])
        .arg(old.to_string())
        .args(["name", "stator_counters"])
        .output()
        .expect("bpftool (make test-deps installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fwd = Forwarder::load(&opts).expect("a statistics map's shape does not refuse the load");
    let info = aya::maps::MapInfo::from_pin(&counters).unwrap();
    assert_eq!(
        info.max_entries(),
        stator_abi::STATOR_CNT_MAX,
        "a fresh map"
    );
    assert_eq!(
        fwd.maps()
            .counters()
            .unwrap()
            .get(stator_abi::Counter::TraceUnauth),
        0
    );
}

#[test]
fn attachments_outlive_the_loader_and_a_reload_replaces_the_program() {
    require_root();
    let lab = Lab::new("attach");
    let pins = PinDir::new("attach");
    let opts = pins.options(ConntrackMode::PerCpu);
    let pin_path = pins.path().to_path_buf();
    let ns = lab.ns.clone();
    lab.run(move || {
        let mut first = Forwarder::load(&opts).unwrap();
        assert!(
            first.ensure_programmed().unwrap(),
            "an empty snapshot is programmed"
        );
        let a = first.attach("lbin").unwrap();
        assert_eq!((a.mode, a.replaced), (XdpMode::Native, false));
        assert!(
            a.warnings
                .iter()
                .any(|w| w.contains("veth") && w.contains("(lbinp)")),
            "the veth warning names the peer: {:?}",
            a.warnings
        );
        let p1 = a.prog_id;
        drop(first);

        let st = stator_xdp::status(&pin_path).unwrap();
        assert_eq!(st.attachments.len(), 1);
        let s = &st.attachments[0];
        assert_eq!(
            (s.iface.as_str(), s.mode, s.prog_id),
            ("lbin", XdpMode::Native, p1)
        );
        assert!(st.programmed);
        assert!(st.tx_ports.contains(&s.ifindex));
        let link_id = s.link_id;

        let mut second = Forwarder::load(&opts).unwrap();
        assert!(
            !second.ensure_programmed().unwrap(),
            "the pinned generation is kept"
        );
        let b = second.attach("lbin").unwrap();
        assert!(b.replaced, "the pinned link got the new program");
        assert_ne!(b.prog_id, p1);
        let st = stator_xdp::status(&pin_path).unwrap();
        assert_eq!(
            (st.attachments[0].prog_id, st.attachments[0].link_id),
            (b.prog_id, link_id)
        );

        // loopback has no native XDP: auto falls back to generic mode and says so
        let lo = second.attach("lo").unwrap();
        assert_eq!(lo.mode, XdpMode::Generic);
        assert!(
            lo.warnings.iter().any(|w| w.contains("generic")),
            "{:?}",
            lo.warnings
        );

        let mut native_only = Forwarder::load(&stator_xdp::XdpOptions {
            attach_mode: AttachMode::Native,
            ..opts.clone()
        })
        .unwrap();
        let err = native_only.attach("lboutp").err();
        // veth supports native XDP, so this one works; a missing interface does not
        assert!(err.is_none(), "{err:?}");
        let err = native_only.attach("nosuchif0").unwrap_err();
        assert!(matches!(err, XdpError::InterfaceMissing { .. }), "{err}");
        // a bridge has no driver XDP: native mode is refused, clearly
        ns.ip(["link", "add", "br0", "type", "bridge"]).unwrap();
        ns.ip(["link", "set", "br0", "up"]).unwrap();
        let err = native_only.attach("br0").unwrap_err();
        assert!(
            matches!(err, XdpError::XdpUnsupported { mode: "native", .. }),
            "{err}"
        );
        println!("{err}");

        assert_eq!(
            stator_xdp::attached_interfaces(&pin_path).unwrap(),
            vec!["lbin", "lboutp", "lo"]
        );
        stator_xdp::detach(&pin_path, "lbin").unwrap();
        let err = stator_xdp::detach(&pin_path, "lbin").unwrap_err();
        assert!(matches!(err, XdpError::NotAttached { .. }), "{err}");
        let st = stator_xdp::status(&pin_path).unwrap();
        assert_eq!(st.attachments.len(), 2);
        assert!(
            stator_xdp::purge(&pin_path).is_err(),
            "maps stay while attached"
        );
        assert_eq!(
            stator_xdp::detach_all(&pin_path).unwrap(),
            vec!["lboutp", "lo"]
        );
        drop((second, native_only));
        stator_xdp::purge(&pin_path).unwrap();
        assert!(!pin_path.exists());
        let err = stator_xdp::status(&pin_path).unwrap_err();
        assert!(matches!(err, XdpError::NotLoaded { .. }), "{err}");
    });
}
