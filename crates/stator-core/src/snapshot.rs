//! The immutable configuration a data plane forwards with.
//!
//! A [`Snapshot`] says everything the forwarding decision needs and nothing about where it came
//! from (config files, health checks and id allocation are the controller's business). Ids are
//! stable across snapshots: a connection-table entry names a [`RealId`], and it stays meaningful
//! for as long as the same (VIP, backend) pair keeps that id.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

pub use stator_abi::Encap;

/// Stable VIP id (< `STATOR_MAX_VIPS`): the index of the VIP's traffic counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VipId(pub u32);

/// Stable id of a (VIP, backend) pair (< `STATOR_MAX_REALS`): what Maglev slots and
/// connection-table entries hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RealId(pub u32);

/// Transport protocol of a VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proto {
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
}

impl Proto {
    /// `tcp` or `udp`: the name the configuration, the API and the logs use.
    pub const fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }

    /// The protocol with IP protocol number `n`, if it is one a VIP can have.
    pub const fn from_number(n: u8) -> Option<Self> {
        match n {
            6 => Some(Proto::Tcp),
            17 => Some(Proto::Udp),
            _ => None,
        }
    }

    /// The name of IP protocol number `n`: `tcp`, `udp`, or the number itself.
    pub fn name_of(n: u8) -> String {
        Self::from_number(n).map_or_else(|| n.to_string(), |p| p.as_str().to_owned())
    }

    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a VIP is matched on: address, port (0 = any) and protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VipKey {
    /// The VIP address.
    pub addr: IpAddr,
    /// The port; 0 matches any port (after exact matches).
    pub port: u16,
    /// The protocol.
    pub proto: Proto,
}

impl fmt::Display for VipKey {
    /// `10.0.0.10:80/tcp`, `[2001:db8::10]:0/udp`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            IpAddr::V4(a) => write!(f, "{a}:{}/{}", self.port, self.proto),
            IpAddr::V6(a) => write!(f, "[{a}]:{}/{}", self.port, self.proto),
        }
    }
}

/// Per-VIP flags (`STATOR_VIP_F_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VipFlags {
    /// Never consult or fill the connection table: Maglev alone decides.
    pub no_conntrack: bool,
    /// Accept fragments (docs/forwarding.md §9); other VIPs drop them (`fragment`).
    pub fragments: bool,
}

/// A class of prefix groups (docs/forwarding.md §3.1): clusters of one kind, whose VIPs share
/// suffixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClassId(pub u16);

/// A CIDR prefix: the network address (host bits zero) and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    /// The network address.
    pub addr: IpAddr,
    /// Its length in bits (at most 32 / 128).
    pub len: u8,
}

impl Prefix {
    /// The prefix of `addr` with `len` bits (host bits cleared); `None` when `len` exceeds the
    /// family's width.
    pub fn new(addr: IpAddr, len: u8) -> Option<Self> {
        let addr = match addr {
            IpAddr::V4(a) if len <= 32 => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from_bits(a.to_bits() & mask))
            }
            IpAddr::V6(a) if len <= 128 => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from_bits(a.to_bits() & mask))
            }
            _ => return None,
        };
        Some(Self { addr, len })
    }

    /// Whether `addr` lies in the prefix.
    pub fn contains(&self, addr: IpAddr) -> bool {
        Prefix::new(addr, self.len).is_some_and(|p| p == *self)
    }
}

impl fmt::Display for Prefix {
    /// `10.100.0.0/16`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl std::str::FromStr for Prefix {
    type Err = String;

    /// `10.100.0.0/16`, `2001:db8::/32`, or an address alone (a host prefix). Host bits must
    /// be zero: `10.1.2.3/16` is refused rather than read as `10.1.0.0/16`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?}: not an IP address or prefix"))?;
        let width = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => width,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|l| *l <= width)
                .ok_or_else(|| format!("{s:?}: a prefix length is 0 to {width}"))?,
        };
        let p = Prefix::new(addr, len).ok_or_else(|| format!("{s:?}: bad prefix"))?;
        if p.addr != addr {
            return Err(format!("{s:?}: host bits set (the prefix is {p})"));
        }
        Ok(p)
    }
}

/// The low `bits` bits of `addr` (an IPv4 suffix of more than 32 bits is the whole address).
pub fn suffix_of(addr: IpAddr, bits: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX
                .checked_shr(32 - u32::from(bits.min(32)))
                .unwrap_or(0);
            IpAddr::V4((a.to_bits() & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX
                .checked_shr(128 - u32::from(bits.min(128)))
                .unwrap_or(0);
            IpAddr::V6((a.to_bits() & m).into())
        }
    }
}

/// A group VIP's membership: its class and suffix length. The VIP also matches any destination
/// of the class whose low `bits` bits equal its address's (docs/forwarding.md §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VipGroup {
    /// The class.
    pub class: ClassId,
    /// The suffix length, in bits.
    pub bits: u8,
}

/// A VIP and its Maglev lookup table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vip {
    /// Stable id.
    pub id: VipId,
    /// Flags.
    pub flags: VipFlags,
    /// The Maglev table: `M` slots (M prime) of real ids, `STATOR_NO_REAL` for "no backend";
    /// empty when the VIP has no usable backend. Shared, because tables are large and often
    /// unchanged between snapshots.
    pub table: Arc<[u32]>,
    /// Where packets go when the VIP has no usable backend (the same service in another
    /// cluster, docs/forwarding.md §10.1); `None` drops them (`no_backend`).
    pub failover: Option<IpAddr>,
    /// Its class and suffix, for a group VIP.
    pub group: Option<VipGroup>,
    /// The table it had before its latest change, kept for a second chance
    /// (docs/forwarding.md §12): a packet that misses the connection table and that this table
    /// sends elsewhere than [`Vip::table`] names its backend here to the new one. `None`: no
    /// second chance (no recent change, or the grace period is over).
    pub previous: Option<Arc<[u32]>>,
}

impl Vip {
    /// A VIP with only an id, flags and a table (no failover, no group, no previous table).
    pub fn new(id: VipId, flags: VipFlags, table: Arc<[u32]>) -> Self {
        Self {
            id,
            flags,
            table,
            failover: None,
            group: None,
            previous: None,
        }
    }
}

/// The Stator nodes fragments are spread over (`fragments.peers`, docs/forwarding.md §9).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Peers {
    /// Their addresses; the index is what the table holds.
    pub addrs: Vec<IpAddr>,
    /// Which of them is this node.
    pub self_index: Option<usize>,
    /// The Maglev table over them (prime size; peer indexes). Empty: every node decides the
    /// fragments it receives.
    pub table: Arc<[u32]>,
}

/// Whether a real may take flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RealState {
    /// Healthy: in the Maglev table; new and existing flows use it.
    Usable,
    /// Draining: out of the Maglev table; existing flows (connection-table hits) keep it.
    Draining,
    /// Only a previous table's backend (docs/forwarding.md §12): never chosen for a flow, only
    /// named in a second chance.
    Previous,
}

/// A (VIP, backend) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Real {
    /// The backend's address (either family, whatever the VIP's).
    pub addr: IpAddr,
    /// The VIP this pair belongs to.
    pub vip: VipId,
    /// Usable or draining. Unhealthy and removed backends are simply absent.
    pub state: RealState,
    /// Encapsulation toward the backend.
    pub encap: Encap,
}

/// Node-wide parameters (`struct stator_node_cfg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeParams {
    /// Outer source address for IPv4 backends.
    pub src_v4: Option<Ipv4Addr>,
    /// Outer source address for IPv6 backends.
    pub src_v6: Option<Ipv6Addr>,
    /// Answer ICMP/ICMPv6 echo requests to VIP addresses.
    pub icmp_echo: bool,
    /// Idle timeout of TCP connection-table entries, in nanoseconds.
    pub tcp_timeout_ns: u64,
    /// Idle timeout of UDP connection-table entries, in nanoseconds.
    pub udp_timeout_ns: u64,
    /// SYN-flood guard: connection-table inserts per second per CPU; 0 = unlimited.
    pub flood_new_per_sec: u32,
    /// GUE destination port.
    pub gue_port: u16,
    /// TTL / hop limit of outer headers.
    pub outer_ttl: u8,
    /// How long a fragment-table record stays fresh, in nanoseconds.
    pub frag_timeout_ns: u64,
    /// Tracer reports per second for the node (0 = none).
    pub trace_per_sec: u32,
    /// The keys a trace mark's MAC is checked with (none: no mark verifies).
    pub trace_keys: stator_abi::TraceKeys,
}

impl Default for NodeParams {
    fn default() -> Self {
        Self {
            src_v4: None,
            src_v6: None,
            icmp_echo: true,
            tcp_timeout_ns: 900 * 1_000_000_000,
            udp_timeout_ns: 300 * 1_000_000_000,
            flood_new_per_sec: 0,
            gue_port: stator_abi::STATOR_GUE_PORT as u16,
            outer_ttl: 64,
            frag_timeout_ns: 2 * 1_000_000_000,
            trace_per_sec: 100,
            trace_keys: stator_abi::TraceKeys::default(),
        }
    }
}

/// A complete, immutable forwarding configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Monotonic config generation this snapshot was built from (for status and metrics).
    pub generation: u64,
    /// Node parameters.
    pub node: NodeParams,
    /// VIPs by match key.
    pub vips: BTreeMap<VipKey, Vip>,
    /// Reals by id.
    pub reals: BTreeMap<RealId, Real>,
    /// Prefix groups and their classes (docs/forwarding.md §3.1).
    pub classes: BTreeMap<Prefix, ClassId>,
    /// The fragment peers (docs/forwarding.md §9).
    pub peers: Peers,
}

#[cfg(test)]
mod tests {
    use super::Prefix;

    #[test]
    fn prefixes_parse_and_refuse_what_is_not_one() {
        let p: Prefix = "10.1.0.0/16".parse().unwrap();
        assert_eq!((p.to_string(), p.len), ("10.1.0.0/16".to_string(), 16));
        assert_eq!("2001:db8::".parse::<Prefix>().unwrap().len, 128);
        assert_eq!(
            "192.0.2.7".parse::<Prefix>().unwrap().to_string(),
            "192.0.2.7/32"
        );
        for (bad, why) in [
            ("10.1.2.3/16", "host bits"),
            ("10.0.0.0/33", "0 to 32"),
            ("fd00::/129", "0 to 128"),
            ("nope/8", "not an IP"),
        ] {
            let e = bad.parse::<Prefix>().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
