//! The FIB as an input: [`NextHops`] answers what `bpf_fib_lookup` answers the XDP program
//! (docs/forwarding.md §5.4), and says which interfaces are redirect targets (the
//! `stator_tx_ports` devmap). [`StaticFib`] is a table-backed implementation for tests and
//! tools; the AF_XDP data plane implements it over its own route and neighbour cache.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use stator_abi::DropReason;

/// A next-hop question: the outer packet about to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FibQuery {
    /// Outer source address (the node's address of the backend's family).
    pub src: IpAddr,
    /// Outer destination address (the backend).
    pub dst: IpAddr,
    /// The interface the frame came in on (`params.ifindex`).
    pub ingress_ifindex: u32,
    /// The outer protocol: 47 (GRE), 4 or 41 (IPIP), 17 (GUE) (`params.l4_protocol`).
    pub l4_protocol: u8,
    /// The outer IP packet's length: the IPv4 total length, or 40 + the IPv6 payload length
    /// (`params.tot_len`, which the kernel compares with the route's MTU).
    pub tot_len: u16,
}

/// A resolved next hop (`BPF_FIB_LKUP_RET_SUCCESS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NextHop {
    /// The egress interface.
    pub ifindex: u32,
    /// The egress interface's MAC address: the new Ethernet source.
    pub src_mac: [u8; 6],
    /// The neighbour's MAC address: the new Ethernet destination.
    pub dst_mac: [u8; 6],
    /// The route's MTU: an outer IP packet longer than this is dropped `mtu`.
    pub mtu: u32,
}

/// Why there is no usable next hop: the non-success results of `bpf_fib_lookup`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FibError {
    /// No route (`BPF_FIB_LKUP_RET_NOT_FWDED`: the destination is local or unroutable).
    NoRoute,
    /// A route, but no neighbour entry for the gateway (`BPF_FIB_LKUP_RET_NO_NEIGH`).
    NoNeigh,
    /// The packet is longer than the route's MTU (`BPF_FIB_LKUP_RET_FRAG_NEEDED`).
    FragNeeded,
    /// A blackhole route (`BPF_FIB_LKUP_RET_BLACKHOLE`).
    Blackhole,
    /// An unreachable route (`BPF_FIB_LKUP_RET_UNREACHABLE`).
    Unreachable,
    /// A prohibit route (`BPF_FIB_LKUP_RET_PROHIBIT`).
    Prohibit,
    /// Forwarding is disabled on the ingress interface (`BPF_FIB_LKUP_RET_FWD_DISABLED`).
    ForwardingDisabled,
    /// Anything else the kernel cannot answer in XDP (`BPF_FIB_LKUP_RET_UNSUPP_LWT`,
    /// `BPF_FIB_LKUP_RET_NO_SRC_ADDR`, …).
    Unsupported,
}

impl FibError {
    /// The drop reason of this failure (§5.4): `no_neigh`, `mtu`, or `fib` for the rest.
    pub fn drop_reason(self) -> DropReason {
        match self {
            FibError::NoNeigh => DropReason::NoNeigh,
            FibError::FragNeeded => DropReason::Mtu,
            FibError::NoRoute
            | FibError::Blackhole
            | FibError::Unreachable
            | FibError::Prohibit
            | FibError::ForwardingDisabled
            | FibError::Unsupported => DropReason::Fib,
        }
    }
}

/// The forwarding environment the forwarder consults: routes and neighbours, and the set of
/// interfaces a frame may be redirected to.
pub trait NextHops {
    /// The next hop for an outer packet, or why there is none. Implementations that know the
    /// route's MTU should answer [`FibError::FragNeeded`] when `q.tot_len` exceeds it, before
    /// looking at the neighbour (the kernel's order); the forwarder also checks
    /// [`NextHop::mtu`] itself.
    ///
    /// # Errors
    /// The [`FibError`] the kernel would have returned.
    fn next_hop(&self, q: &FibQuery) -> Result<NextHop, FibError>;

    /// Whether `ifindex` is in the redirect map (`stator_tx_ports`). Only asked for an egress
    /// interface other than the ingress one.
    fn is_tx_port(&self, ifindex: u32) -> bool;
}

/// A FIB from explicit tables: a result per destination address, a default per family, the
/// ingress interfaces that do not forward, and the tx-port set.
///
/// It answers in the kernel's order (`bpf_ipv4_fib_lookup` / `bpf_ipv6_fib_lookup`): forwarding
/// disabled on the ingress interface first, then the route, then the route's MTU (before the
/// neighbour: a packet too long for a route whose gateway is unresolved is `FragNeeded`), then
/// the neighbour.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StaticFib {
    routes: BTreeMap<IpAddr, Route>,
    default_v4: Option<Route>,
    default_v6: Option<Route>,
    no_forwarding: BTreeSet<u32>,
    tx_ports: BTreeSet<u32>,
}

/// One destination's answer: the route's MTU when it has one (checked first), then the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Route {
    mtu: Option<u32>,
    result: Result<NextHop, FibError>,
}

impl Route {
    fn of(result: Result<NextHop, FibError>) -> Self {
        Self {
            mtu: result.ok().map(|h| h.mtu),
            result,
        }
    }
}

impl StaticFib {
    /// An empty FIB: every lookup is [`FibError::NoRoute`], no tx port.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the result for destination `dst` (a success also gives the route's MTU).
    pub fn route(mut self, dst: IpAddr, result: Result<NextHop, FibError>) -> Self {
        self.routes.insert(dst, Route::of(result));
        self
    }

    /// Destination `dst` has a route of MTU `mtu` whose gateway has no neighbour entry: longer
    /// packets are [`FibError::FragNeeded`], the others [`FibError::NoNeigh`].
    pub fn unresolved(mut self, dst: IpAddr, mtu: u32) -> Self {
        self.routes.insert(
            dst,
            Route {
                mtu: Some(mtu),
                result: Err(FibError::NoNeigh),
            },
        );
        self
    }

    /// Sets the result for destinations of `dst`'s family that have no route of their own.
    pub fn default_route(mut self, family_of: IpAddr, result: Result<NextHop, FibError>) -> Self {
        match family_of {
            IpAddr::V4(_) => self.default_v4 = Some(Route::of(result)),
            IpAddr::V6(_) => self.default_v6 = Some(Route::of(result)),
        }
        self
    }

    /// Interface `ifindex` does not forward: every query arriving on it is
    /// [`FibError::ForwardingDisabled`].
    pub fn no_forwarding(mut self, ifindex: u32) -> Self {
        self.no_forwarding.insert(ifindex);
        self
    }

    /// Adds `ifindex` to the tx-port set.
    pub fn tx_port(mut self, ifindex: u32) -> Self {
        self.tx_ports.insert(ifindex);
        self
    }
}

impl NextHops for StaticFib {
    fn next_hop(&self, q: &FibQuery) -> Result<NextHop, FibError> {
        if self.no_forwarding.contains(&q.ingress_ifindex) {
            return Err(FibError::ForwardingDisabled);
        }
        let default = match q.dst {
            IpAddr::V4(_) => self.default_v4,
            IpAddr::V6(_) => self.default_v6,
        };
        let route = self
            .routes
            .get(&q.dst)
            .copied()
            .or(default)
            .ok_or(FibError::NoRoute)?;
        if route.mtu.is_some_and(|mtu| u32::from(q.tot_len) > mtu) {
            return Err(FibError::FragNeeded);
        }
        route.result
    }

    fn is_tx_port(&self, ifindex: u32) -> bool {
        self.tx_ports.contains(&ifindex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn hop(ifindex: u32, mtu: u32) -> NextHop {
        NextHop {
            ifindex,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            mtu,
        }
    }

    fn query(dst: IpAddr, tot_len: u16) -> FibQuery {
        FibQuery {
            src: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            dst,
            ingress_ifindex: 1,
            l4_protocol: 47,
            tot_len,
        }
    }

    #[test]
    fn routes_defaults_mtu_and_tx_ports() {
        let a = IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1));
        let b = IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2));
        let c = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let fib = StaticFib::new()
            .route(a, Ok(hop(2, 1500)))
            .route(b, Err(FibError::NoNeigh))
            .default_route(a, Err(FibError::Blackhole))
            .tx_port(2);
        assert_eq!(fib.next_hop(&query(a, 1500)), Ok(hop(2, 1500)));
        assert_eq!(fib.next_hop(&query(a, 1501)), Err(FibError::FragNeeded));
        assert_eq!(fib.next_hop(&query(b, 100)), Err(FibError::NoNeigh));
        let other = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(fib.next_hop(&query(other, 100)), Err(FibError::Blackhole));
        assert_eq!(fib.next_hop(&query(c, 100)), Err(FibError::NoRoute));
        assert!(fib.is_tx_port(2) && !fib.is_tx_port(3));
    }

    #[test]
    fn kernel_order_forwarding_then_mtu_then_neighbour() {
        let a = IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1));
        let b = IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2));
        let fib = StaticFib::new()
            .route(a, Ok(hop(2, 1500)))
            .unresolved(b, 1400)
            .no_forwarding(7);
        assert_eq!(fib.next_hop(&query(b, 1400)), Err(FibError::NoNeigh));
        assert_eq!(fib.next_hop(&query(b, 1401)), Err(FibError::FragNeeded));
        let from7 = FibQuery {
            ingress_ifindex: 7,
            ..query(a, 100)
        };
        assert_eq!(fib.next_hop(&from7), Err(FibError::ForwardingDisabled));
    }

    #[test]
    fn failures_map_to_drop_reasons() {
        assert_eq!(FibError::NoNeigh.drop_reason(), DropReason::NoNeigh);
        assert_eq!(FibError::FragNeeded.drop_reason(), DropReason::Mtu);
        for e in [
            FibError::NoRoute,
            FibError::Blackhole,
            FibError::Unreachable,
            FibError::Prohibit,
            FibError::ForwardingDisabled,
            FibError::Unsupported,
        ] {
            assert_eq!(e.drop_reason(), DropReason::Fib);
        }
    }
}
