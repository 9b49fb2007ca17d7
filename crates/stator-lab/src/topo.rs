//! A direct-server-return deployment in network namespaces: clients, a router, load-balancer
//! nodes and backends.
//!
//! ```text
//!  client <p>c0 eth0 ──c0─┐                          ┌─l0── eth0 <p>l0  LB node 10.S.1.11
//!  10.S.100.2 (+ more)    │   router <p>r            ├─l1── eth0 <p>l1           10.S.1.12
//!                         ├── brlb 10.S.1.1/24 ──────┘
//!  client <p>c1 ──────c1──┤   brbe 10.S.2.1/24 ──────┬─b0── eth0 <p>b0  backend  10.S.2.11
//!                         │   VIP → ECMP over LBs    └─b1── eth0 <p>b1           10.S.2.12
//! ```
//! (IPv6 alike: `fd00:S:1::/64` LBs, `fd00:S:2::/64` backends, `fd00:S:100+i::/64` client i.)
//!
//! The router routes each VIP to the LB nodes (ECMP by 5-tuple when there are several); an LB
//! node encapsulates to a backend, which it reaches back through the router (one-armed, as in
//! the Maglev paper: the LB's egress is its ingress, so the forwarder uses XDP_TX); a backend
//! decapsulates, its kernel delivers to the VIP on `lo`, and the reply goes straight to the
//! client through the router — never through an LB node.
//!
//! What the setup takes care of, so tests do not have to:
//! - **an XDP program on the router's ports towards the LB nodes**, through the caller's hook
//!   ([`DsrLab::create_with`]; this crate loads no BPF): a frame an LB node sends with XDP_TX
//!   is delivered by veth only when the receiving peer has an XDP program (docs/xdp.md);
//!   `stator_xdp::attach_pass` is such a program;
//! - **GRO on every veth end**, which is what a frame *redirected* into a veth needs;
//! - **no TX checksum offload** on the hosts: veth hands a locally generated segment on with a
//!   partial checksum (`CHECKSUM_PARTIAL`), which an XDP program that re-sends the frame turns
//!   into a wrong one; a real client's NIC would have filled it in;
//! - **forwarding** on the LB nodes (`bpf_fib_lookup` refuses to answer otherwise) and the
//!   router; **permanent neighbour entries** for the router on every LB node (XDP does not
//!   resolve neighbours);
//! - **reverse-path filtering off** on the router (replies from a VIP arrive from the backend
//!   LAN while the VIP is routed to the LB LAN) and on the backends (docs/decap.md);
//!   `arp_ignore=1`/`arp_announce=2` on the backends, so the VIP on `lo` is never announced;
//! - an **MTU of [`DsrSpec::tunnel_mtu`]** on the LB and backend LANs, so a full-sized client
//!   segment still fits once encapsulated.
//!
//! Every namespace carries the prefix; dropping the [`DsrLab`] removes them all
//! ([`crate::netns::cleanup`]). Pins in bpffs are not namespaced: whoever attaches programs
//! removes their pins.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::netns::{Netns, NetnsError, Result, cleanup, veth};

/// The shape of a lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DsrSpec {
    /// Prefix of every namespace (`<prefix>r`, `<prefix>c0`, `<prefix>l0`, `<prefix>b0`, …).
    pub prefix: String,
    /// `S` of the addresses `10.S.x.y` and `fd00:S:x::y`.
    pub subnet: u8,
    /// Client namespaces.
    pub clients: usize,
    /// Addresses per client (at least 1): `10.S.100+i.2`, `.3`, ….
    pub addrs_per_client: usize,
    /// Load-balancer nodes.
    pub lbs: usize,
    /// Backends.
    pub backends: usize,
    /// MTU of the LB and backend LANs (the client links keep 1500).
    pub tunnel_mtu: u32,
    /// Call the XDP hook for the router's ports towards the backends too: a backend that
    /// passes a packet on (second chance, docs/decap.md §7) sends it with XDP_TX.
    pub backend_xdp: bool,
}

impl DsrSpec {
    /// `clients` clients with one address each, `lbs` LB nodes, `backends` backends, a tunnel
    /// MTU of 1600.
    pub fn new(prefix: &str, subnet: u8, clients: usize, lbs: usize, backends: usize) -> Self {
        Self {
            prefix: prefix.to_string(),
            subnet,
            clients,
            addrs_per_client: 1,
            lbs,
            backends,
            tunnel_mtu: 1600,
            backend_xdp: false,
        }
    }
}

/// A client, LB node or backend.
#[derive(Debug, Clone)]
pub struct Host {
    /// Short name: `c0`, `l0`, `b0`, … (also the router's port towards it).
    pub name: String,
    /// Its namespace.
    pub ns: Netns,
    /// Its interface towards the router (`eth0`).
    pub iface: String,
    /// Its IPv4 addresses on `eth0` (the first is the primary).
    pub v4: Vec<Ipv4Addr>,
    /// Its IPv6 addresses on `eth0`.
    pub v6: Vec<Ipv6Addr>,
    /// MAC address of `eth0`.
    pub mac: [u8; 6],
}

impl Host {
    /// The primary address of a family.
    pub fn addr(&self, v6: bool) -> IpAddr {
        if v6 {
            IpAddr::V6(self.v6[0])
        } else {
            IpAddr::V4(self.v4[0])
        }
    }

    /// Every address of a family.
    pub fn addrs(&self, v6: bool) -> Vec<IpAddr> {
        if v6 {
            self.v6.iter().copied().map(IpAddr::V6).collect()
        } else {
            self.v4.iter().copied().map(IpAddr::V4).collect()
        }
    }
}

/// A DSR lab; dropping it removes every namespace with its prefix.
#[derive(Debug)]
pub struct DsrLab {
    spec: DsrSpec,
    /// The router (`<prefix>r`).
    pub router: Netns,
    /// Clients.
    pub clients: Vec<Host>,
    /// Load-balancer nodes.
    pub lbs: Vec<Host>,
    /// Backends.
    pub backends: Vec<Host>,
}

fn v4(s: u8, c: u8, d: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, s, c, d)
}

fn v6(s: u8, c: u16, d: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, u16::from(s), c, 0, 0, 0, 0, d)
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The router's address on the LB LAN (`lan = 1`) or the backend LAN (`lan = 2`).
fn gateway(s: u8, lan: u8) -> (Ipv4Addr, Ipv6Addr) {
    (v4(s, lan, 1), v6(s, u16::from(lan), 1))
}

const LB_LAN: u8 = 1;
const BACKEND_LAN: u8 = 2;
const BRIDGE_LB_MAC: [u8; 6] = [0x02, 0x5a, 0, 0, 1, 1];
const BRIDGE_BACKEND_MAC: [u8; 6] = [0x02, 0x5a, 0, 0, 2, 1];

impl DsrLab {
    /// Builds the lab without attaching anything to the router's ports: enough when the LB
    /// nodes do not send with XDP_TX (kernel forwarding, or XDP_REDIRECT only).
    pub fn create(spec: &DsrSpec) -> Result<Self> {
        Self::create_with(spec, |_, _| Ok(()))
    }

    /// Builds the lab and calls `peer_xdp(router, port)` for each router port facing an LB
    /// node (and, with [`DsrSpec::backend_xdp`], a backend), to attach an XDP program there
    /// (see the module documentation). Namespaces left
    /// over with the same prefix are removed first.
    pub fn create_with(
        spec: &DsrSpec,
        peer_xdp: impl Fn(&Netns, &str) -> std::result::Result<(), String>,
    ) -> Result<Self> {
        cleanup(&spec.prefix)?;
        let s = spec.subnet;
        let router = Netns::create(&format!("{}r", spec.prefix))?;
        for (key, value) in [
            ("net.ipv4.ip_forward", "1"),
            ("net.ipv6.conf.all.forwarding", "1"),
            ("net.ipv4.fib_multipath_hash_policy", "1"),
            ("net.ipv6.fib_multipath_hash_policy", "1"),
            ("net.ipv4.conf.all.rp_filter", "0"),
            ("net.ipv4.conf.default.rp_filter", "0"),
        ] {
            router.sysctl(key, value)?;
        }
        for (br, lan, mac) in [
            ("brlb", LB_LAN, BRIDGE_LB_MAC),
            ("brbe", BACKEND_LAN, BRIDGE_BACKEND_MAC),
        ] {
            router.ip(["link", "add", br, "type", "bridge"])?;
            // a fixed MAC: a bridge otherwise takes its lowest port's, and the LB nodes'
            // permanent neighbour entries would go stale
            router.ip(["link", "set", br, "address", &mac_text(mac)])?;
            router.ip(["link", "set", br, "mtu", &spec.tunnel_mtu.to_string()])?;
            let (g4, g6) = gateway(s, lan);
            router.addr_add(br, &format!("{g4}/24"))?;
            router.addr_add(br, &format!("{g6}/64"))?;
        }
        let mut lab = Self {
            spec: spec.clone(),
            router,
            clients: Vec::new(),
            lbs: Vec::new(),
            backends: Vec::new(),
        };
        for i in 0..spec.clients {
            let host = lab.client(i)?;
            lab.clients.push(host);
        }
        for j in 0..spec.lbs {
            let host = lab.member(&format!("l{j}"), LB_LAN, 11 + j, "brlb")?;
            lab.setup_lb(&host)?;
            peer_xdp(&lab.router, &host.name).map_err(|stderr| NetnsError::Failed {
                cmd: format!("attach an XDP program to router port {}", host.name),
                status: "hook".into(),
                stderr,
            })?;
            lab.lbs.push(host);
        }
        for k in 0..spec.backends {
            let host = lab.member(&format!("b{k}"), BACKEND_LAN, 11 + k, "brbe")?;
            setup_backend(&host)?;
            if spec.backend_xdp {
                peer_xdp(&lab.router, &host.name).map_err(|stderr| NetnsError::Failed {
                    cmd: format!("attach an XDP program to router port {}", host.name),
                    status: "hook".into(),
                    stderr,
                })?;
            }
            lab.backends.push(host);
        }
        Ok(lab)
    }

    /// The spec it was built from.
    pub fn spec(&self) -> &DsrSpec {
        &self.spec
    }

    /// A veth between the router (`port`) and a new namespace (`eth0`), GRO on both ends, no
    /// TX checksum offload on the host's end.
    fn link(&self, name: &str, mtu: Option<u32>) -> Result<Netns> {
        let ns = Netns::create(&format!("{}{name}", self.spec.prefix))?;
        veth(&self.router, name, &ns, "eth0")?;
        for (n, dev) in [(&self.router, name), (&ns, "eth0")] {
            if let Some(mtu) = mtu {
                n.ip(["link", "set", dev, "mtu", &mtu.to_string()])?;
            }
            n.exec("ethtool", ["-K", dev, "gro", "on"])?;
        }
        ns.exec("ethtool", ["-K", "eth0", "tx", "off"])?;
        Ok(ns)
    }

    fn client(&self, i: usize) -> Result<Host> {
        let s = self.spec.subnet;
        let name = format!("c{i}");
        let ns = self.link(&name, None)?;
        let net = u8::try_from(100 + i).unwrap_or(u8::MAX);
        self.router
            .addr_add(&name, &format!("{}/24", v4(s, net, 1)))?;
        self.router
            .addr_add(&name, &format!("{}/64", v6(s, u16::from(net), 1)))?;
        let n = self.spec.addrs_per_client.max(1);
        let host_v4: Vec<Ipv4Addr> = (0..n)
            .map(|k| v4(s, net, u8::try_from(2 + k).unwrap_or(u8::MAX)))
            .collect();
        let host_v6: Vec<Ipv6Addr> = (0..n)
            .map(|k| v6(s, u16::from(net), u16::try_from(2 + k).unwrap_or(u16::MAX)))
            .collect();
        for a in &host_v4 {
            ns.addr_add("eth0", &format!("{a}/24"))?;
        }
        for a in &host_v6 {
            ns.addr_add("eth0", &format!("{a}/64"))?;
        }
        ns.ip(["route", "add", "default", "via", &v4(s, net, 1).to_string()])?;
        ns.ip([
            "-6",
            "route",
            "add",
            "default",
            "via",
            &v6(s, u16::from(net), 1).to_string(),
        ])?;
        Ok(Host {
            name,
            mac: ns.mac("eth0")?,
            ns,
            iface: "eth0".into(),
            v4: host_v4,
            v6: host_v6,
        })
    }

    /// An LB node or backend on one of the router's bridges.
    fn member(&self, name: &str, lan: u8, host: usize, bridge: &str) -> Result<Host> {
        let s = self.spec.subnet;
        let ns = self.link(name, Some(self.spec.tunnel_mtu))?;
        self.router.ip(["link", "set", name, "master", bridge])?;
        let h = u8::try_from(host).unwrap_or(u8::MAX);
        let (a4, a6) = (v4(s, lan, h), v6(s, u16::from(lan), u16::from(h)));
        ns.addr_add("eth0", &format!("{a4}/24"))?;
        ns.addr_add("eth0", &format!("{a6}/64"))?;
        let (g4, g6) = gateway(s, lan);
        ns.ip(["route", "add", "default", "via", &g4.to_string()])?;
        ns.ip(["-6", "route", "add", "default", "via", &g6.to_string()])?;
        Ok(Host {
            name: name.to_string(),
            mac: ns.mac("eth0")?,
            ns,
            iface: "eth0".into(),
            v4: vec![a4],
            v6: vec![a6],
        })
    }

    fn setup_lb(&self, host: &Host) -> Result<()> {
        let ns = &host.ns;
        for (key, value) in [
            ("net.ipv4.ip_forward", "1"),
            ("net.ipv4.conf.all.forwarding", "1"),
            ("net.ipv4.conf.eth0.forwarding", "1"),
            ("net.ipv6.conf.all.forwarding", "1"),
            ("net.ipv6.conf.eth0.forwarding", "1"),
        ] {
            ns.sysctl(key, value)?;
        }
        let (g4, g6) = gateway(self.spec.subnet, LB_LAN);
        for g in [g4.to_string(), g6.to_string()] {
            ns.ip([
                "neigh",
                "replace",
                &g,
                "lladdr",
                &mac_text(BRIDGE_LB_MAC),
                "dev",
                "eth0",
                "nud",
                "permanent",
            ])?;
        }
        Ok(())
    }

    /// Routes `vip` (a host route) from the router to the LB nodes `lbs` (ECMP when several).
    pub fn route_vip(&self, vip: IpAddr, lbs: &[usize]) -> Result<()> {
        let v6 = vip.is_ipv6();
        let prefix = if v6 {
            format!("{vip}/128")
        } else {
            format!("{vip}/32")
        };
        let mut args: Vec<String> = Vec::new();
        if v6 {
            args.push("-6".into());
        }
        args.extend(["route", "replace", prefix.as_str()].map(String::from));
        for &j in lbs {
            let via = self.lbs[j].addr(v6).to_string();
            if lbs.len() == 1 {
                args.extend(["via".to_string(), via]);
            } else {
                args.extend(["nexthop", "via"].map(String::from));
                args.push(via);
            }
        }
        self.router.ip(&args).map(|_| ())
    }

    /// Permanent neighbour entries on every LB node for every other LB node (both families):
    /// an XDP program that sends to a peer node (a fragment redirect) resolves no neighbour.
    pub fn permanent_neighbours_between_lbs(&self) -> Result<()> {
        permanent_neighbours(&self.lbs)
    }

    /// Permanent neighbour entries between the backends: a backend that passes a packet on
    /// to another (second chance, docs/decap.md §7) does it in XDP, which resolves none.
    pub fn permanent_neighbours_between_backends(&self) -> Result<()> {
        permanent_neighbours(&self.backends)
    }

    /// Puts `vip` on backend `k`'s `lo` (a host address: /32 or /128).
    pub fn add_vip_to_backend(&self, k: usize, vip: IpAddr) -> Result<()> {
        let cidr = if vip.is_ipv6() {
            format!("{vip}/128")
        } else {
            format!("{vip}/32")
        };
        self.backends[k].ns.addr_add("lo", &cidr)
    }
}

/// Permanent neighbour entries from each of `hosts` to every other, both families.
fn permanent_neighbours(hosts: &[Host]) -> Result<()> {
    for a in hosts {
        for b in hosts.iter().filter(|b| b.name != a.name) {
            let mac = b
                .mac
                .iter()
                .map(|x| format!("{x:02x}"))
                .collect::<Vec<_>>()
                .join(":");
            for addr in [b.addr(false), b.addr(true)] {
                a.ns.ip([
                    "neigh",
                    "replace",
                    &addr.to_string(),
                    "lladdr",
                    &mac,
                    "dev",
                    &a.iface,
                    "nud",
                    "permanent",
                ])?;
            }
        }
    }
    Ok(())
}

/// The sysctls a backend behind Stator needs (docs/decap.md).
fn setup_backend(host: &Host) -> Result<()> {
    for (key, value) in [
        ("net.ipv4.conf.all.rp_filter", "0"),
        ("net.ipv4.conf.default.rp_filter", "0"),
        ("net.ipv4.conf.eth0.rp_filter", "0"),
        ("net.ipv4.conf.all.arp_ignore", "1"),
        ("net.ipv4.conf.all.arp_announce", "2"),
    ] {
        host.ns.sysctl(key, value)?;
    }
    Ok(())
}

impl Drop for DsrLab {
    fn drop(&mut self) {
        let _ = cleanup(&self.spec.prefix);
    }
}
