//! The opt-in next-hop cache (stator_ctl.fib_cache_us, stator_nh): a successful FIB answer is
//! reused per CPU and real for its lifetime; a longer packet than any accepted is looked up
//! again (MTU), failures are never cached, and without the option every packet asks the FIB.
//! Needs root.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)

#[allow(unused_imports)]
use crate::common;
#[allow(unused_imports)]
use crate::fixtures;

use std::time::Duration;

use stator_xdp::{ConntrackMode, Forwarder};

use crate::common::{Lab, PinDir, require_root};
use crate::fixtures::*;

const SEC: u64 = 1_000_000_000;

#[test]
fn the_next_hop_cache_reuses_answers_but_never_failures() {
    require_root();
    let lab = Lab::new("nh");
    let pins = PinDir::new("nh");
    let mut opts = pins.options(ConntrackMode::PerCpu);
    opts.fib_cache = Some(Duration::from_secs(1));
    let ns = lab.ns.clone();
    let lbin = lab.lbin;
    let macs = LabMacs {
        lbin: lab.lbin_mac,
        lbout: lab.lbout_mac,
    };
    lab.run(move || {
        let mut fwd = Forwarder::load(&opts).unwrap();
        let snap = snapshot();
        fwd.commit(&common::valid(&snap)).unwrap();
        let mut w = World {
            fwd,
            snap,
            lbin,
            macs,
        };
        let t0 = 9_000 * SEC;
        w.fwd.set_test_clock(Some(t0));
        let neigh = |op: &str| {
            let mut args = vec!["neigh", op, "10.10.0.2", "dev", "lbin"];
            if op == "replace" {
                args.extend(["lladdr", "02:aa:00:00:00:02", "nud", "permanent"]);
            }
            ns.ip(args).unwrap();
        };
        let vip = vips::udp4(); // one backend, 10.20.0.3 via 10.10.0.2
        let no_neigh = [
            (Stat::C(Counter::ActDrop), 1),
            (Stat::D(DropReason::NoNeigh), 1),
            (Stat::C(Counter::CtMiss), 1),
            (Stat::C(Counter::CtInsert), 1),
        ];

        let p = udp(client4(), 41_001, &vip);
        w.check(&w.miss_tx("first packet asks the FIB", &p, &vip));
        neigh("del");
        let p = udp(client4(), 41_002, &vip);
        w.check(&w.miss_tx("neighbour gone, answer cached", &p, &vip));
        let big = udp(client4(), 41_003, &vip).with_payload(&[7; 100]);
        w.check(&case(
            "a longer packet asks the FIB again",
            big.frame(),
            DROP,
            Out::Same,
            &no_neigh,
        ));
        w.fwd.set_test_clock(Some(t0 + SEC));
        let p = udp(client4(), 41_004, &vip);
        w.check(&case(
            "lifetime over",
            p.frame(),
            DROP,
            Out::Same,
            &no_neigh,
        ));
        let p = udp(client4(), 41_005, &vip);
        w.check(&case(
            "failures are not cached",
            p.frame(),
            DROP,
            Out::Same,
            &no_neigh,
        ));
        neigh("replace");
        let p = udp(client4(), 41_006, &vip);
        w.check(&w.miss_tx("neighbour back", &p, &vip));

        // the route MTU is still enforced for packets longer than any the FIB accepted
        let small = tcp(client4(), 41_007, &vips::mtu4(), SYN).with_payload(&[0; 100]);
        w.check(&w.miss_tx("below the route MTU", &small, &vips::mtu4()));
        let large = tcp(client4(), 41_008, &vips::mtu4(), SYN).with_payload(&[0; 160]);
        w.check(&case(
            "above the route MTU",
            large.frame(),
            DROP,
            Out::Same,
            &dropped_after_insert(DropReason::Mtu),
        ));

        // off: every packet asks the FIB
        w.fwd.set_fib_cache(None).unwrap();
        assert_eq!(w.fwd.maps().fib_cache(), None);
        neigh("del");
        let p = udp(client4(), 41_009, &vip);
        w.check(&case(
            "cache off, neighbour gone",
            p.frame(),
            DROP,
            Out::Same,
            &no_neigh,
        ));
        neigh("replace");
        w.fwd.set_test_clock(None);
    });
}
