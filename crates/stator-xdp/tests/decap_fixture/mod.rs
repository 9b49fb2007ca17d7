//! The decap program loaded for BPF_PROG_TEST_RUN, shared by the decap test files: a
//! [`Fixture`] with its own pin directory that checks every run's counter deltas (one outcome per
//! packet, one reason per rejection), and the addresses, inner packets and tunnel variants the
//! cases are built from.
#![allow(dead_code)] // each test binary uses a different part

use std::net::IpAddr;
use std::path::PathBuf;

use stator_abi::DecapCounter as C;
use stator_testkit::{Packet, tcp_flags};
use stator_xdp::testrun::TestRunOpts;
use stator_xdp::{Decap, DecapConfig, DecapCounters, DecapOptions};

pub use crate::common::{PinDir, require_root, v4, v6};
use crate::tunnel::{GRE_C, GRE_K, GRE_S, Spec, Tunnel};

pub const DROP: u32 = 1;
pub const PASS: u32 = 2;

/// A pin directory for the decap program on a bpffs of its own under the temp directory
/// (never the host's `/sys/fs/bpf`), unmounted when dropped.
pub fn pin_dir(tag: &str) -> PinDir {
    PinDir::new(&format!("decap-{tag}"))
}

/// A loaded decap program with its own pin directory, removed on drop.
pub struct Fixture {
    pub decap: Decap,
    pub pin: PathBuf,
    /// Unmounted last, after the program and its pins are gone.
    pins: PinDir,
}

/// What one run did.
#[derive(Debug)]
pub struct Run {
    pub action: u32,
    pub data: Vec<u8>,
    pub delta: DecapCounters,
}

impl Fixture {
    pub fn new(tag: &str, cfg: &DecapConfig) -> Self {
        require_root();
        let pins = pin_dir(tag);
        let pin = pins.path().to_path_buf();
        let mut decap = Decap::load(&DecapOptions::with_pin_path(&pin)).expect("load stator_decap");
        decap.configure(cfg).expect("configure");
        Self { decap, pin, pins }
    }

    pub fn any() -> Self {
        Self::new("any", &DecapConfig::default())
    }

    pub fn run(&self, frame: &[u8]) -> Run {
        let before = self.decap.counters().unwrap();
        let out = self
            .decap
            .test_run(frame, TestRunOpts::default())
            .expect("BPF_PROG_TEST_RUN");
        let delta = self.decap.counters().unwrap().since(&before);
        assert_eq!(
            delta.packets(),
            1,
            "exactly one outcome: {:?}",
            delta.nonzero()
        );
        let reasons: u64 = delta
            .iter()
            .filter(|(c, _)| c.is_reason())
            .map(|(_, n)| n)
            .sum();
        assert_eq!(
            reasons,
            delta.get(C::Rejected),
            "one reason per rejection: {:?}",
            delta.nonzero()
        );
        Run {
            action: out.action,
            data: out.data,
            delta,
        }
    }

    pub fn expect_decap(&self, name: &str, spec: &Spec, kind: C) {
        let r = self.run(&spec.frame());
        assert_eq!(r.action, PASS, "{name}: action ({:?})", r.delta.nonzero());
        assert_eq!(
            r.delta.nonzero(),
            vec![(kind.label(), 1)],
            "{name}: counters"
        );
        assert_eq!(hex(&r.data), hex(&spec.expected()), "{name}: output");
    }

    pub fn expect_reject(&self, name: &str, frame: &[u8], reason: C) {
        let r = self.run(frame);
        assert_eq!(r.action, DROP, "{name}: action ({:?})", r.delta.nonzero());
        assert_eq!(
            r.delta.nonzero(),
            vec![("rejected", 1), (reason.label(), 1)],
            "{name}: counters"
        );
    }

    pub fn expect_pass(&self, name: &str, frame: &[u8], why: C) {
        let r = self.run(frame);
        assert_eq!(r.action, PASS, "{name}: action ({:?})", r.delta.nonzero());
        assert_eq!(
            r.delta.nonzero(),
            vec![(why.label(), 1)],
            "{name}: counters"
        );
        assert_eq!(hex(&r.data), hex(frame), "{name}: must pass untouched");
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = stator_xdp::detach_all(&self.pin);
        let _ = stator_xdp::decap_purge(&self.pin);
    }
}

/// An error and its sources, as an operator reads them.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The load balancer (outer source) and this backend (outer destination).
pub fn lb(v6_: bool) -> IpAddr {
    if v6_ { v6("fd10::1") } else { v4(10, 10, 0, 1) }
}
pub fn backend(v6_: bool) -> IpAddr {
    if v6_ { v6("fd20::1") } else { v4(10, 20, 0, 1) }
}

/// Inner packets: a TCP SYN with data from a client to the VIP, v4 or v6.
pub fn inner(v6_: bool) -> Vec<u8> {
    if v6_ {
        Packet::udp(v6("2001:db8::7"), 40000, v6("fd00::10"), 53)
            .with_payload(b"query")
            .ip_bytes()
    } else {
        Packet::tcp(
            v4(198, 51, 100, 7),
            40000,
            v4(10, 0, 0, 10),
            80,
            tcp_flags::SYN,
        )
        .with_payload(b"hello")
        .ip_bytes()
    }
}

pub fn spec(outer_v6: bool, tunnel: Tunnel, inner_v6: bool) -> Spec {
    Spec::new(lb(outer_v6), backend(outer_v6), tunnel, inner(inner_v6))
}

pub fn kind_of(t: &Tunnel) -> C {
    match t {
        Tunnel::Gre { .. } => C::Gre,
        Tunnel::Ipip { .. } => C::Ipip,
        _ => C::Gue,
    }
}

/// Every tunnel variant that must decapsulate.
pub fn good_tunnels() -> Vec<(&'static str, Tunnel)> {
    let gre = |flags: u16, opt: Vec<u32>| Tunnel::Gre {
        flags,
        ptype: None,
        opt,
    };
    vec![
        ("GRE", Tunnel::gre()),
        ("GRE + key", gre(GRE_K, vec![0xdead_beef])),
        ("GRE + sequence", gre(GRE_S, vec![7])),
        (
            "GRE + checksum (not verified)",
            gre(GRE_C, vec![0x1234_0000]),
        ),
        (
            "GRE + checksum + key + sequence",
            gre(GRE_C | GRE_K | GRE_S, vec![0x1234_0000, 42, 43]),
        ),
        (
            "GRE with strict-route, recursion and flag bits (ignored)",
            gre(0x0800 | 0x0700 | 0x00f8, vec![]),
        ),
        ("IPIP", Tunnel::ipip()),
        ("GUE variant 0", Tunnel::gue0()),
        (
            "GUE variant 0, 3 words of extension fields",
            Tunnel::Gue0 {
                ctl: false,
                hlen: 3,
                proto: None,
                flags: 0x8000,
            },
        ),
        ("GUE variant 1 (direct IP)", Tunnel::Gue1),
    ]
}
