//! The differential test's lab: interfaces and routes, installed in the namespace and read back
//! into the core's [`StaticFib`].
//!
//! One table ([`ROUTES`]) says what the namespace routes where; the test installs it, reads the
//! interfaces' indexes, MACs and MTUs back from the namespace, checks every unicast answer
//! against `ip route get`, and derives the core's FIB from it with the kernel's rules for
//! `bpf_fib_lookup` (forwarding disabled on the ingress first, then the route, then the route
//! MTU — a locked route MTU, else the device's — then the neighbour).

use std::net::IpAddr;

use stator_core::{FibError, NextHop, StaticFib};
use stator_lab::netns::{self, Netns};

use crate::common::{GW_MAC, GW2_MAC, Lab, SRC_V4, src_v6, v4, v6};
use crate::diff::world::Universe;

/// MAC of the next hop behind `lbx`.
pub const GW3_MAC: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 0x02];

/// An interface of the lab and whether the forwarder may redirect to it (`stator_tx_ports`).
#[derive(Debug, Clone)]
pub struct Iface {
    pub name: &'static str,
    pub ifindex: u32,
    pub mac: [u8; 6],
    pub mtu: u32,
    pub tx_port: bool,
    pub forwarding: bool,
}

/// What a route does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Unicast out of `dev`, through `gw` (on-link when `None`), with a locked MTU if any.
    Unicast {
        dev: &'static str,
        gw: Option<&'static str>,
        mtu_lock: Option<u32>,
    },
    Blackhole,
    Unreachable,
    Prohibit,
}

/// A route of the lab: prefix, length, kind; `installed` = false for the connected routes the
/// kernel creates from the addresses (and the ones `common::Lab` installs).
struct Route {
    prefix: &'static str,
    len: u8,
    kind: Kind,
    installed: bool,
}

const fn r(prefix: &'static str, len: u8, kind: Kind, installed: bool) -> Route {
    Route {
        prefix,
        len,
        kind,
        installed,
    }
}

const fn uni(dev: &'static str, gw: Option<&'static str>, mtu_lock: Option<u32>) -> Kind {
    Kind::Unicast { dev, gw, mtu_lock }
}

/// Every route of the lab namespace. `common::Lab` installs the lbin/lbout ones; this test adds
/// `lbx` (an egress that is not a redirect target), `lbnf` (an ingress that does not forward),
/// IPv6 counterparts of the no-neighbour and MTU routes, and reject routes.
const ROUTES: &[Route] = &[
    // connected
    r("10.10.0.0", 24, uni("lbin", None, None), false),
    r("fd10::", 64, uni("lbin", None, None), false),
    r("10.30.0.0", 24, uni("lbout", None, None), false),
    r("fd30::", 64, uni("lbout", None, None), false),
    r("10.70.0.0", 24, uni("lbx", None, None), false),
    r("fd70::", 64, uni("lbx", None, None), false),
    // common::Lab
    r("10.20.0.0", 16, uni("lbin", Some("10.10.0.2"), None), false),
    r("fd20::", 32, uni("lbin", Some("fd10::2"), None), false),
    r(
        "10.40.0.0",
        16,
        uni("lbout", Some("10.30.0.2"), None),
        false,
    ),
    r("fd40::", 32, uni("lbout", Some("fd30::2"), None), false),
    r("10.50.0.0", 16, uni("lbin", Some("10.10.0.3"), None), false),
    r(
        "10.60.0.0",
        16,
        uni("lbin", Some("10.10.0.2"), Some(200)),
        false,
    ),
    // this test
    r("10.80.0.0", 16, uni("lbx", Some("10.70.0.2"), None), true),
    r("fd80::", 32, uni("lbx", Some("fd70::2"), None), true),
    r("fd50::", 32, uni("lbin", Some("fd10::3"), None), true),
    r("fd60::", 32, uni("lbin", Some("fd10::2"), Some(1300)), true),
    r("10.90.0.0", 16, Kind::Blackhole, true),
    r("10.91.0.0", 16, Kind::Unreachable, true),
    r("10.92.0.0", 16, Kind::Prohibit, true),
    r("fd90::", 32, Kind::Blackhole, true),
    r("fd91::", 32, Kind::Unreachable, true),
];

/// Static neighbour entries (device, address, MAC); `common::Lab` installs the first four.
fn neighbours() -> Vec<(&'static str, IpAddr, [u8; 6], bool)> {
    vec![
        ("lbin", v4(10, 10, 0, 2), GW_MAC, false),
        ("lbin", v6("fd10::2"), GW_MAC, false),
        ("lbout", v4(10, 30, 0, 2), GW2_MAC, false),
        ("lbout", v6("fd30::2"), GW2_MAC, false),
        ("lbx", v4(10, 70, 0, 2), GW3_MAC, true),
        ("lbx", v6("fd70::2"), GW3_MAC, true),
    ]
}

/// The node's own addresses (a backend there is local: `NOT_FWDED`, no route to forward on).
fn local_addrs() -> Vec<IpAddr> {
    vec![
        IpAddr::V4(SRC_V4),
        IpAddr::V6(src_v6()),
        v4(10, 30, 0, 1),
        v6("fd30::1"),
        v4(10, 70, 0, 1),
        v6("fd70::1"),
    ]
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn in_prefix(addr: IpAddr, prefix: IpAddr, len: u8) -> bool {
    match (addr, prefix) {
        (IpAddr::V4(a), IpAddr::V4(p)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            a.to_bits() & mask == p.to_bits() & mask
        }
        (IpAddr::V6(a), IpAddr::V6(p)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            a.to_bits() & mask == p.to_bits() & mask
        }
        _ => false,
    }
}

/// The lab: `common::Lab` plus `lbx` and `lbnf`, with the routes of [`ROUTES`].
pub struct Topo {
    pub lab: Lab,
    pub ifaces: Vec<Iface>,
}

impl Topo {
    pub fn new(tag: &str) -> Self {
        let lab = Lab::new(tag);
        let ns = lab.ns.clone();
        netns::veth(&ns, "lbx", &ns, "lbxp").expect("veth lbx");
        netns::veth(&ns, "lbnf", &ns, "lbnfp").expect("veth lbnf");
        ns.addr_add("lbx", "10.70.0.1/24").unwrap();
        ns.addr_add("lbx", "fd70::1/64").unwrap();
        ns.addr_add("lbnf", "10.71.0.1/24").unwrap();
        ns.sysctl("net.ipv4.conf.lbnf.forwarding", "0").unwrap();
        ns.sysctl("net.ipv6.conf.lbnf.forwarding", "0").unwrap();
        for (dev, addr, mac, install) in neighbours() {
            if install {
                ns.ip([
                    "neigh",
                    "replace",
                    &addr.to_string(),
                    "lladdr",
                    &mac_str(mac),
                    "dev",
                    dev,
                    "nud",
                    "permanent",
                ])
                .unwrap();
            }
        }
        for r in ROUTES.iter().filter(|r| r.installed) {
            let dst = format!("{}/{}", r.prefix, r.len);
            let mut args: Vec<String> = Vec::new();
            if r.prefix.contains(':') {
                args.push("-6".into());
            }
            args.extend(["route".into(), "add".into()]);
            match r.kind {
                Kind::Unicast { dev, gw, mtu_lock } => {
                    args.push(dst);
                    if let Some(gw) = gw {
                        args.extend(["via".into(), gw.into()]);
                    }
                    args.extend(["dev".into(), dev.into()]);
                    if let Some(m) = mtu_lock {
                        args.extend(["mtu".into(), "lock".into(), m.to_string()]);
                    }
                }
                Kind::Blackhole => args.extend(["blackhole".into(), dst]),
                Kind::Unreachable => args.extend(["unreachable".into(), dst]),
                Kind::Prohibit => args.extend(["prohibit".into(), dst]),
            }
            ns.ip(&args).unwrap_or_else(|e| panic!("ip {args:?}: {e}"));
        }
        let iface = |name: &'static str, tx_port: bool, forwarding: bool| {
            let link = ns.ip(["-o", "link", "show", "dev", name]).unwrap();
            let mtu = link
                .split_whitespace()
                .skip_while(|w| *w != "mtu")
                .nth(1)
                .and_then(|m| m.parse().ok())
                .unwrap_or_else(|| panic!("no mtu in `{link}`"));
            Iface {
                name,
                ifindex: ns.ifindex(name).unwrap(),
                mac: ns.mac(name).unwrap(),
                mtu,
                tx_port,
                forwarding,
            }
        };
        let ifaces = vec![
            iface("lbin", true, true),
            iface("lbout", true, true),
            iface("lbx", false, true),
            iface("lbnf", false, false),
        ];
        Self { lab, ifaces }
    }

    pub fn ns(&self) -> &Netns {
        &self.lab.ns
    }

    pub fn iface(&self, name: &str) -> &Iface {
        self.ifaces.iter().find(|i| i.name == name).unwrap()
    }

    /// What `bpf_fib_lookup` answers for outer destination `dst` (from any forwarding ingress):
    /// the kernel's rules applied to [`ROUTES`] and the neighbour table.
    fn answer(&self, dst: IpAddr) -> Answer {
        if local_addrs().contains(&dst) {
            return Answer::Fixed(Err(FibError::NoRoute));
        }
        let route = ROUTES
            .iter()
            .filter(|r| in_prefix(dst, r.prefix.parse().unwrap(), r.len))
            .max_by_key(|r| r.len);
        let Some(route) = route else {
            return Answer::Fixed(Err(FibError::NoRoute));
        };
        match route.kind {
            Kind::Blackhole => Answer::Fixed(Err(FibError::Blackhole)),
            Kind::Unreachable => Answer::Fixed(Err(FibError::Unreachable)),
            Kind::Prohibit => Answer::Fixed(Err(FibError::Prohibit)),
            Kind::Unicast { dev, gw, mtu_lock } => {
                let i = self.iface(dev);
                let mtu = mtu_lock.unwrap_or(i.mtu);
                let next = gw.map_or(dst, |g| g.parse().unwrap());
                let neigh = neighbours()
                    .into_iter()
                    .find(|(d, a, _, _)| *d == dev && *a == next);
                match neigh {
                    Some((_, _, mac, _)) => Answer::Fixed(Ok(NextHop {
                        ifindex: i.ifindex,
                        src_mac: i.mac,
                        dst_mac: mac,
                        mtu,
                    })),
                    None => Answer::Unresolved(mtu),
                }
            }
        }
    }

    /// Checks the table against the kernel: `ip route get` must name the same device (and
    /// gateway) for every unicast destination.
    fn check_against_kernel(&self, dst: IpAddr) {
        let Some(route) = ROUTES
            .iter()
            .filter(|r| in_prefix(dst, r.prefix.parse().unwrap(), r.len))
            .max_by_key(|r| r.len)
        else {
            return;
        };
        if local_addrs().contains(&dst) {
            return;
        }
        if let Kind::Unicast { dev, gw, .. } = route.kind {
            let got = self
                .ns()
                .ip(["-o", "route", "get", &dst.to_string()])
                .unwrap();
            assert!(
                got.contains(&format!("dev {dev} ")),
                "lab table says {dst} leaves by {dev}, the kernel: {got}"
            );
            if let Some(gw) = gw {
                assert!(
                    got.contains(&format!("via {gw} ")),
                    "lab table says {dst} goes via {gw}, the kernel: {got}"
                );
            }
        }
    }

    /// The core's FIB for the backends of `universe`: their answers, the ingresses that do not
    /// forward, and the redirect targets.
    pub fn fib(&self, universe: &Universe) -> StaticFib {
        let mut fib = StaticFib::new();
        // every outer destination: the backends, the fragment peers, the failover targets
        let targets = universe
            .reals
            .iter()
            .map(|r| r.addr)
            .chain(universe.peers.iter().copied())
            .chain(universe.vips.iter().filter_map(|v| v.failover));
        for addr in targets {
            self.check_against_kernel(addr);
            fib = match self.answer(addr) {
                Answer::Fixed(a) => fib.route(addr, a),
                Answer::Unresolved(mtu) => fib.unresolved(addr, mtu),
            };
        }
        for i in &self.ifaces {
            if i.tx_port {
                fib = fib.tx_port(i.ifindex);
            }
            if !i.forwarding {
                fib = fib.no_forwarding(i.ifindex);
            }
        }
        fib
    }
}

enum Answer {
    Fixed(Result<NextHop, FibError>),
    Unresolved(u32),
}
