//! A router and Stator nodes on one L2 segment: the ECMP front of a Maglev deployment.
//!
//! ```text
//!                 router namespace (<prefix>r)
//!   10.S.0.1/24, fd00:S::1/64 on bridge br0 ── ports p0, p1, …
//!                    │ veth            │ veth
//!     node <prefix>n0: eth0        node <prefix>n1: eth0
//!     10.S.0.11, fd00:S::11        10.S.0.12, fd00:S::12
//! ```
//!
//! The router spreads flows over its ECMP next hops by 5-tuple
//! (`fib_multipath_hash_policy = 1`). [`EcmpLan::cut`] takes a node's bridge port down: the
//! node loses its uplink but the router's `br0` stays up, as when a cable or a switch port
//! between them dies — the router learns it only from BGP's hold timer or from BFD.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::netns::{Netns, Result, cleanup, veth};

/// One node on the LAN.
#[derive(Debug, Clone)]
pub struct LanNode {
    /// Its namespace (`<prefix>n<index>`).
    pub ns: Netns,
    /// Its IPv4 address on `eth0`.
    pub v4: Ipv4Addr,
    /// Its IPv6 address on `eth0`.
    pub v6: Ipv6Addr,
    /// Its port on the router's bridge.
    pub port: String,
}

/// The router and its nodes. Dropping it removes every namespace with its prefix.
#[derive(Debug)]
pub struct EcmpLan {
    prefix: String,
    /// The router's namespace (`<prefix>r`).
    pub router: Netns,
    /// The router's IPv4 address.
    pub router_v4: Ipv4Addr,
    /// The router's IPv6 address.
    pub router_v6: Ipv6Addr,
    /// The nodes, in order.
    pub nodes: Vec<LanNode>,
}

impl EcmpLan {
    /// Creates the router and `nodes` nodes on subnet `10.<subnet>.0.0/24` and
    /// `fd00:<subnet>::/64`. Namespaces left over with the same prefix are removed first.
    pub fn create(prefix: &str, subnet: u8, nodes: usize) -> Result<Self> {
        cleanup(prefix)?;
        let router = Netns::create(&format!("{prefix}r"))?;
        let router_v4 = Ipv4Addr::new(10, subnet, 0, 1);
        let router_v6 = Ipv6Addr::new(0xfd00, u16::from(subnet), 0, 0, 0, 0, 0, 1);
        router.ip(["link", "add", "br0", "type", "bridge"])?;
        router.addr_add("br0", &format!("{router_v4}/24"))?;
        router.addr_add("br0", &format!("{router_v6}/64"))?;
        router.sysctl("net.ipv4.ip_forward", "1")?;
        router.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        router.sysctl("net.ipv4.fib_multipath_hash_policy", "1")?;
        router.sysctl("net.ipv6.fib_multipath_hash_policy", "1")?;
        let mut lan = Self {
            prefix: prefix.to_owned(),
            router,
            router_v4,
            router_v6,
            nodes: Vec::new(),
        };
        for i in 0..nodes {
            let host = u8::try_from(11 + i).unwrap_or(u8::MAX);
            let ns = Netns::create(&format!("{prefix}n{i}"))?;
            let port = format!("p{i}");
            veth(&lan.router, &port, &ns, "eth0")?;
            lan.router.ip(["link", "set", &port, "master", "br0"])?;
            let v4 = Ipv4Addr::new(10, subnet, 0, host);
            let v6 = Ipv6Addr::new(0xfd00, u16::from(subnet), 0, 0, 0, 0, 0, u16::from(host));
            ns.addr_add("eth0", &format!("{v4}/24"))?;
            ns.addr_add("eth0", &format!("{v6}/64"))?;
            lan.nodes.push(LanNode { ns, v4, v6, port });
        }
        Ok(lan)
    }

    /// The node's addresses as `IpAddr`s: (IPv4, IPv6).
    pub fn node_addresses(&self, node: usize) -> (IpAddr, IpAddr) {
        let n = &self.nodes[node];
        (IpAddr::V4(n.v4), IpAddr::V6(n.v6))
    }

    /// Cuts a node's uplink: its bridge port goes down, the router's bridge stays up.
    pub fn cut(&self, node: usize) -> Result<()> {
        self.router
            .ip(["link", "set", &self.nodes[node].port, "down"])
            .map(|_| ())
    }

    /// Restores a node's uplink.
    pub fn restore(&self, node: usize) -> Result<()> {
        self.router
            .ip(["link", "set", &self.nodes[node].port, "up"])
            .map(|_| ())
    }
}

impl Drop for EcmpLan {
    fn drop(&mut self) {
        let _ = cleanup(&self.prefix);
    }
}

/// The router's BGP side in the lab.
#[derive(Debug, Clone)]
pub struct RouterBgp {
    /// The router's AS.
    pub local_as: u32,
    /// The nodes' AS (all nodes share one, as Stator nodes usually do).
    pub node_as: u32,
    /// Hold time, seconds.
    pub hold_time: u16,
    /// Keepalive time, seconds.
    pub keepalive: u16,
    /// Indices of the nodes whose sessions use BFD.
    pub bfd_nodes: Vec<usize>,
    /// IPv4 prefixes whose host routes the router accepts (`192.0.2.0/24`).
    pub accept_v4: Vec<String>,
    /// IPv6 prefixes whose host routes the router accepts (`2001:db8:100::/64`).
    pub accept_v6: Vec<String>,
}

impl EcmpLan {
    /// The router's BIRD configuration: like `examples/bird-router.conf` (`merge paths on`,
    /// import only VIP host routes, export nothing) with the lab's timers; one session per
    /// node and family, named `n<index>_v4` / `n<index>_v6`; logging to `log`.
    pub fn router_bird_config(&self, bgp: &RouterBgp, log: &std::path::Path) -> String {
        let nodes: Vec<(Ipv4Addr, Ipv6Addr)> = self.nodes.iter().map(|n| (n.v4, n.v6)).collect();
        router_bird_config(self.router_v4, &nodes, bgp, log)
    }
}

/// The BIRD configuration of a router with id `router_id` peering with `nodes` (each node's
/// IPv4 and IPv6 address): what [`EcmpLan::router_bird_config`] writes, for any topology.
pub fn router_bird_config(
    router_id: Ipv4Addr,
    nodes: &[(Ipv4Addr, Ipv6Addr)],
    bgp: &RouterBgp,
    log: &std::path::Path,
) -> String {
    let set = |prefixes: &[String], len: u8| {
        prefixes
            .iter()
            .map(|p| format!("{p}{{{len},{len}}}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut c = String::new();
    let _ = write!(
        c,
        "router id {rid};\ntimeformat protocol iso long ms;\nlog \"{log}\" all;\n\n\
         protocol device {{}}\n\n\
         protocol kernel kernel_v4 {{\n  ipv4 {{ import none; export all; }};\n  merge paths on;\n}}\n\
         protocol kernel kernel_v6 {{\n  ipv6 {{ import none; export all; }};\n  merge paths on;\n}}\n\n\
         filter stator_vips_v4 {{\n  if net ~ [ {v4} ] then accept;\n  reject;\n}}\n\
         filter stator_vips_v6 {{\n  if net ~ [ {v6} ] then accept;\n  reject;\n}}\n\n\
         protocol bfd {{\n  interface \"*\" {{ min rx interval 100 ms; min tx interval 100 ms; multiplier 3; }};\n}}\n\n\
         template bgp stator_node {{\n  local as {las};\n  hold time {hold};\n  keepalive time {ka};\n  \
         connect retry time 1;\n  error wait time 1, 5;\n}}\n\n",
        rid = router_id,
        log = log.display(),
        v4 = set(&bgp.accept_v4, 32),
        v6 = set(&bgp.accept_v6, 128),
        las = bgp.local_as,
        hold = bgp.hold_time,
        ka = bgp.keepalive,
    );
    for (i, &(n4, n6)) in nodes.iter().enumerate() {
        let bfd = if bgp.bfd_nodes.contains(&i) {
            "  bfd on;\n"
        } else {
            ""
        };
        for (family, addr) in [("v4", IpAddr::V4(n4)), ("v6", IpAddr::V6(n6))] {
            let channel = if family == "v4" { "ipv4" } else { "ipv6" };
            let _ = write!(
                c,
                "protocol bgp n{i}_{family} from stator_node {{\n  neighbor {addr} as {nas};\n{bfd}  \
                 {channel} {{ import filter stator_vips_{family}; export none; }};\n}}\n",
                nas = bgp.node_as,
            );
        }
    }
    c
}

/// A node's BIRD configuration: like `examples/bird-node.conf` — router id, device
/// protocol, no kernel protocol, Stator's file included — logging to `log`.
pub fn node_bird_config(
    router_id: Ipv4Addr,
    include: &std::path::Path,
    log: &std::path::Path,
) -> String {
    format!(
        "router id {router_id};\ntimeformat protocol iso long ms;\nlog \"{log}\" all;\n\n\
         protocol device {{}}\n\n\
         # A pattern, so that BIRD starts before Stator has written the file.\n\
         include \"{include}\";\n",
        log = log.display(),
        include = include_pattern(include),
    )
}

/// `…/stator.conf` as a pattern that matches only that file (`…/stator.con[f]`): BIRD
/// treats a pattern that matches nothing as an empty include.
pub fn include_pattern(path: &std::path::Path) -> String {
    let text = path.display().to_string();
    match text.char_indices().last() {
        Some((i, c)) => format!("{}[{c}]", &text[..i]),
        None => text,
    }
}
