//! Shared by the BPF tests: root check, pin directories that clean up after themselves, the
//! lab namespace `bpf_fib_lookup` answers in, CPU pinning, and expected outputs built by hand.
#![allow(dead_code)] // each test binary uses a different part

pub mod expect;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use stator_core::{Snapshot, ValidSnapshot};
use stator_lab::netns::{self, Netns};
use stator_xdp::{ConntrackMode, XdpOptions};

/// `snap` validated by stator-core's rules, the form every commit takes.
pub fn valid(snap: &Snapshot) -> ValidSnapshot {
    snap.clone().validated().expect("a valid snapshot")
}

/// `snap` checked only for fitting the maps: for the drop paths an inconsistent snapshot
/// takes (a real without a source address, …).
pub fn lenient(snap: &Snapshot) -> ValidSnapshot {
    ValidSnapshot::new_lenient(snap.clone()).expect("a representable snapshot")
}

pub use stator_lab::netns::require_root;

static SEQ: AtomicU32 = AtomicU32::new(0);

fn unique(tag: &str) -> String {
    format!(
        "{}-{}-{tag}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A pin directory unique to one test, on a bpffs of its own under the temp directory (never
/// the host's `/sys/fs/bpf`, which a developer's machine may not have and CI must not see);
/// detaches and purges everything, then unmounts, on drop.
pub struct PinDir(pub PathBuf, Option<stator_lab::stator::BpfFs>);

impl PinDir {
    pub fn new(tag: &str) -> Self {
        require_root();
        let mount = std::env::temp_dir().join(format!("stator-test-{}", unique(tag)));
        let fs = stator_lab::stator::BpfFs::mount(&mount).expect("a private bpffs for the pins");
        Self(mount.join("pins"), Some(fs))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Small maps: tests load many forwarders.
    pub fn options(&self, conntrack: ConntrackMode) -> XdpOptions {
        XdpOptions {
            pin_path: self.0.clone(),
            conntrack,
            ct_entries: 65536,
            slots_per_gen: 1 << 18,
            ..XdpOptions::default()
        }
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        let _ = stator_xdp::detach_all(&self.0);
        let _ = stator_xdp::purge(&self.0);
        drop(self.1.take());
    }
}

/// Pins the calling thread to one CPU, so per-CPU maps (connection table, flood window)
/// behave like one packet thread.
pub fn pin_to_cpu(cpu: usize) {
    stator_sys::cpu::pin_to_cpu(cpu).unwrap_or_else(|e| panic!("sched_setaffinity: {e}"));
}

pub fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

pub fn v6(s: &str) -> IpAddr {
    IpAddr::V6(s.parse::<Ipv6Addr>().unwrap())
}

/// MAC of the next hop behind `lbin` (static neighbour entries).
pub const GW_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x02];
/// MAC of the next hop behind `lbout`.
pub const GW2_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x02];

/// The node's outer source addresses in the lab.
pub const SRC_V4: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 1);
pub fn src_v6() -> Ipv6Addr {
    "fd10::1".parse().unwrap()
}

/// A network namespace in which `bpf_fib_lookup` has answers:
///
/// - `lbin` (the ingress): 10.10.0.1/24, fd10::1/64; gateway 10.10.0.2 / fd10::2 = GW_MAC.
///   Routes: 10.20/16 and fd20::/32 (backends, egress = ingress → XDP_TX); 10.50/16 via
///   10.10.0.3 (no neighbour entry → no_neigh); 10.60/16 with route MTU 200 (→ mtu).
/// - `lbout`: 10.30.0.1/24, fd30::1/64; gateway 10.30.0.2 / fd30::2 = GW2_MAC. Routes:
///   10.40/16 and fd40::/32 (egress ≠ ingress → XDP_REDIRECT through stator_tx_ports).
/// - 192.0.2.0/24: no route (→ fib).
/// - IPv4 and IPv6 forwarding enabled.
#[derive(Debug)]
pub struct Lab {
    pub ns: Netns,
    pub lbin: u32,
    pub lbout: u32,
    pub lbin_mac: [u8; 6],
    pub lbout_mac: [u8; 6],
}

impl Lab {
    pub fn new(tag: &str) -> Self {
        require_root();
        let name = format!("stx{}", unique(tag));
        let ns = Netns::create(&name).expect("create namespace");
        netns::veth(&ns, "lbin", &ns, "lbinp").expect("veth lbin");
        netns::veth(&ns, "lbout", &ns, "lboutp").expect("veth lbout");
        ns.sysctl("net.ipv4.ip_forward", "1").unwrap();
        ns.sysctl("net.ipv4.conf.all.forwarding", "1").unwrap();
        ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        ns.addr_add("lbin", "10.10.0.1/24").unwrap();
        ns.addr_add("lbin", "fd10::1/64").unwrap();
        ns.addr_add("lbout", "10.30.0.1/24").unwrap();
        ns.addr_add("lbout", "fd30::1/64").unwrap();
        let mac = |m: [u8; 6]| {
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        };
        for (addr, dev, m) in [
            ("10.10.0.2", "lbin", GW_MAC),
            ("fd10::2", "lbin", GW_MAC),
            ("10.30.0.2", "lbout", GW2_MAC),
            ("fd30::2", "lbout", GW2_MAC),
        ] {
            ns.ip([
                "neigh",
                "replace",
                addr,
                "lladdr",
                &mac(m),
                "dev",
                dev,
                "nud",
                "permanent",
            ])
            .unwrap();
        }
        for route in [
            vec![
                "route",
                "add",
                "10.20.0.0/16",
                "via",
                "10.10.0.2",
                "dev",
                "lbin",
            ],
            vec![
                "-6",
                "route",
                "add",
                "fd20::/32",
                "via",
                "fd10::2",
                "dev",
                "lbin",
            ],
            vec![
                "route",
                "add",
                "10.40.0.0/16",
                "via",
                "10.30.0.2",
                "dev",
                "lbout",
            ],
            vec![
                "-6",
                "route",
                "add",
                "fd40::/32",
                "via",
                "fd30::2",
                "dev",
                "lbout",
            ],
            vec![
                "route",
                "add",
                "10.50.0.0/16",
                "via",
                "10.10.0.3",
                "dev",
                "lbin",
            ],
            vec![
                "route",
                "add",
                "10.60.0.0/16",
                "via",
                "10.10.0.2",
                "dev",
                "lbin",
                "mtu",
                "lock",
                "200",
            ],
        ] {
            ns.ip(route).unwrap();
        }
        Self {
            lbin: ns.ifindex("lbin").unwrap(),
            lbout: ns.ifindex("lbout").unwrap(),
            lbin_mac: ns.mac("lbin").unwrap(),
            lbout_mac: ns.mac("lbout").unwrap(),
            ns,
        }
    }

    /// Runs `f` on a thread inside the namespace, pinned to CPU 0; panics propagate.
    pub fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        self.ns
            .run_in(move || {
                pin_to_cpu(0);
                f()
            })
            .expect("enter the lab namespace")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.ns.clone().delete();
    }
}
