//! What to announce: one host route per VIP address, and whether it is announced.

use std::collections::BTreeMap;
use std::net::IpAddr;

use stator_config::{Config, Vip};

/// The VIP routes Stator wants BIRD to know, each announced or withdrawn.
///
/// BGP announces prefixes, not services: the unit is a VIP *address* (a `/32` or `/128`).
/// Several VIPs may share an address (`tcp/192.0.2.10:80` and `:443`); the address is
/// announced when *any* of them should be, since withdrawing it would take the others down
/// with it. The set of addresses (announced or not) is what BIRD's configuration is rendered
/// from; flipping one between announced and withdrawn never needs a reconfiguration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DesiredRoutes {
    routes: BTreeMap<IpAddr, bool>,
}

impl DesiredRoutes {
    /// No routes.
    pub fn new() -> Self {
        Self::default()
    }

    /// From (VIP address, announce?) pairs; an address listed several times is announced if
    /// any of its entries says so.
    pub fn from_vips(vips: impl IntoIterator<Item = (IpAddr, bool)>) -> Self {
        let mut out = Self::new();
        for (address, announce) in vips {
            out.add(address, announce);
        }
        out
    }

    /// Every VIP address of `config`, announced where `announce(vip)` is true for at least one
    /// VIP on it. The controller passes "the forwarder is healthy and the VIP has a usable
    /// backend".
    pub fn from_config(config: &Config, mut announce: impl FnMut(&Vip) -> bool) -> Self {
        Self::from_vips(config.vips.iter().map(|v| (v.key.addr, announce(v))))
    }

    /// Adds an address; if it is already present it stays announced if it was.
    pub fn add(&mut self, address: IpAddr, announce: bool) {
        *self.routes.entry(address).or_insert(false) |= announce;
    }

    /// Sets an address's state, adding it if absent.
    pub fn set(&mut self, address: IpAddr, announce: bool) {
        self.routes.insert(address, announce);
    }

    /// Removes an address.
    pub fn remove(&mut self, address: IpAddr) {
        self.routes.remove(&address);
    }

    /// Whether `address` is to be announced; `None` when it is not in the set.
    pub fn announce(&self, address: IpAddr) -> Option<bool> {
        self.routes.get(&address).copied()
    }

    /// The addresses and their states, in address order.
    pub fn iter(&self) -> impl Iterator<Item = (IpAddr, bool)> + '_ {
        self.routes.iter().map(|(a, s)| (*a, *s))
    }

    /// The addresses, in order.
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.routes.keys().copied()
    }

    /// Number of addresses.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// True without addresses.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The same addresses, none announced.
    pub fn withdrawn(&self) -> Self {
        Self {
            routes: self.routes.keys().map(|a| (*a, false)).collect(),
        }
    }

    /// Only the addresses for which `keep` is true.
    pub fn filtered(&self, mut keep: impl FnMut(IpAddr) -> bool) -> Self {
        Self {
            routes: self
                .routes
                .iter()
                .filter(|(a, _)| keep(**a))
                .map(|(a, s)| (*a, *s))
                .collect(),
        }
    }
}

/// The prefix every generated symbol starts with (`[[bgp.neighbor]]` names may not).
pub const SYMBOL_PREFIX: &str = "stator_";
/// The prefix of the per-VIP static protocols (a BIRD pattern `"stator_vip*"` matches all).
pub const STATIC_PREFIX: &str = "stator_vip";

/// The name of the static protocol that holds `address`'s route: `stator_vip4_192_0_2_10`,
/// `stator_vip6_2001_db8__10` (the canonical text with `.` and `:` as `_`, so distinct
/// addresses get distinct names; at most 51 characters, within BIRD's 64).
pub fn static_protocol_name(address: IpAddr) -> String {
    let (family, text) = match address {
        IpAddr::V4(a) => ('4', a.to_string()),
        IpAddr::V6(a) => ('6', a.to_string()),
    };
    let text: String = text
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{STATIC_PREFIX}{family}_{text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_is_announced_if_any_vip_on_it_is() {
        let d = DesiredRoutes::from_vips([
            (ip("192.0.2.10"), false),
            (ip("192.0.2.10"), true),
            (ip("192.0.2.11"), false),
            (ip("192.0.2.10"), false),
        ]);
        assert_eq!(d.len(), 2);
        assert_eq!(d.announce(ip("192.0.2.10")), Some(true));
        assert_eq!(d.announce(ip("192.0.2.11")), Some(false));
        assert_eq!(d.announce(ip("192.0.2.12")), None);
        let w = d.withdrawn();
        assert!(w.iter().all(|(_, a)| !a));
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn names_are_symbols_and_distinct() {
        assert_eq!(
            static_protocol_name(ip("192.0.2.10")),
            "stator_vip4_192_0_2_10"
        );
        assert_eq!(
            static_protocol_name(ip("2001:db8:100::10")),
            "stator_vip6_2001_db8_100__10"
        );
        let longest = static_protocol_name(ip("2001:db8:1111:2222:3333:4444:5555:6666"));
        assert!(longest.len() <= 64, "{longest}");
        assert!(crate::client::is_bird_symbol(&longest));
        // Canonical forms are distinct for distinct addresses, and the mapping keeps every
        // character position, so names are distinct too.
        assert_ne!(
            static_protocol_name(ip("2001:db8::1:0")),
            static_protocol_name(ip("2001:db8:0:1::"))
        );
    }
}
