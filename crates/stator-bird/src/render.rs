//! The file Stator owns and BIRD includes, rendered from `[bgp]` and the VIP routes (pure).
//!
//! Layout (see `docs/bgp.md` for the reasons):
//! - two tables of Stator's own, `stator_v4` and `stator_v6`: VIP routes live there, so no
//!   kernel protocol installs them on the node and nothing else in BIRD mixes with them;
//! - one export filter per family that lets through only host routes of Stator's static
//!   protocols (and adds the configured communities);
//! - one static protocol per VIP address, holding its `/32` or `/128` blackhole route;
//!   announcing and withdrawing the VIP is `enable`/`disable` of that protocol, and its
//!   `disabled` line is written to match, so that a later `configure` finds it unchanged;
//! - a BFD protocol when a neighbour wants BFD;
//! - one BGP protocol per neighbour: import none, export the filter above, next hop self,
//!   no graceful restart. Its text depends on `[bgp]` only — never on the VIPs — so a
//!   `configure` after the VIP set changed leaves the sessions alone.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

use stator_config::{Bgp, Neighbor};

use crate::routes::{DesiredRoutes, static_protocol_name};

/// Stator's IPv4 table in BIRD.
pub const TABLE_V4: &str = "stator_v4";
/// Stator's IPv6 table in BIRD.
pub const TABLE_V6: &str = "stator_v6";
/// The export filter of IPv4 sessions.
pub const FILTER_V4: &str = "stator_export_v4";
/// The export filter of IPv6 sessions.
pub const FILTER_V6: &str = "stator_export_v6";
/// Stator's BFD protocol (written when a neighbour has `bfd = true`).
pub const BFD_PROTOCOL: &str = "stator_bfd";

/// BIRD's default maximum error wait (seconds); kept unless `error_wait` exceeds it.
const BIRD_ERROR_WAIT_MAX: u16 = 300;

/// Per-family names and shapes.
struct Family {
    channel: &'static str,
    table: &'static str,
    filter: &'static str,
    net_type: &'static str,
    host_len: u8,
    digit: char,
}

const V4: Family = Family {
    channel: "ipv4",
    table: TABLE_V4,
    filter: FILTER_V4,
    net_type: "NET_IP4",
    host_len: 32,
    digit: '4',
};

const V6: Family = Family {
    channel: "ipv6",
    table: TABLE_V6,
    filter: FILTER_V6,
    net_type: "NET_IP6",
    host_len: 128,
    digit: '6',
};

fn family(address: IpAddr) -> &'static Family {
    if address.is_ipv4() { &V4 } else { &V6 }
}

/// Renders the whole file. Equal inputs give byte-equal output (no timestamps), and the
/// text of everything but the static protocols' `disabled` lines depends only on `bgp` and
/// the set of addresses in `routes`.
pub fn render(bgp: &Bgp, routes: &DesiredRoutes) -> String {
    let mut out = String::new();
    header(&mut out);
    for f in [&V4, &V6] {
        // Writing to a String cannot fail.
        let _ = writeln!(out, "{} table {};", f.channel, f.table);
    }
    out.push('\n');
    for f in [&V4, &V6] {
        filter(&mut out, f, &bgp.communities);
    }
    for (address, announce) in routes.iter() {
        static_protocol(&mut out, address, announce);
    }
    if bgp.neighbors.iter().any(|n| n.bfd) {
        bfd(&mut out, bgp);
    }
    for n in &bgp.neighbors {
        bgp_protocol(&mut out, bgp, n);
    }
    out
}

fn header(out: &mut String) {
    out.push_str(
        "# Stator's part of BIRD's configuration. Written by Stator: do not edit, changes are\n\
         # overwritten. Stator rewrites it when its VIPs or [bgp] settings change and asks BIRD\n\
         # to `configure` only when the set of VIPs or [bgp] changed; it announces and withdraws\n\
         # a VIP with `enable`/`disable` of the VIP's static protocol. See docs/bgp.md.\n\n",
    );
}

fn filter(out: &mut String, f: &Family, communities: &[(u16, u16)]) {
    let _ = writeln!(
        out,
        "# Only host routes of Stator's per-VIP static protocols leave through IPv{} sessions.",
        f.digit
    );
    let _ = writeln!(out, "filter {} {{", f.filter);
    let _ = writeln!(
        out,
        "  if source = RTS_STATIC && proto ~ \"stator_vip{}_*\" && net.type = {} && net.len = {} then {{",
        f.digit, f.net_type, f.host_len
    );
    for (asn, value) in communities {
        let _ = writeln!(out, "    bgp_community.add(({asn}, {value}));");
    }
    out.push_str("    accept;\n  }\n  reject;\n}\n\n");
}

fn static_protocol(out: &mut String, address: IpAddr, announce: bool) {
    let f = family(address);
    let _ = writeln!(out, "protocol static {} {{", static_protocol_name(address));
    out.push_str(if announce {
        "  disabled no;   # announced\n"
    } else {
        "  disabled yes;  # withdrawn\n"
    });
    let _ = writeln!(out, "  {} {{ table {}; }};", f.channel, f.table);
    let _ = writeln!(out, "  route {address}/{} blackhole;", f.host_len);
    out.push_str("}\n\n");
}

fn bfd(out: &mut String, bgp: &Bgp) {
    let mut options = String::new();
    if let Some(interval) = bgp.bfd_interval {
        let _ = writeln!(options, "    min rx interval {};", bird_time(interval));
        let _ = writeln!(options, "    min tx interval {};", bird_time(interval));
    }
    if let Some(multiplier) = bgp.bfd_multiplier {
        let _ = writeln!(options, "    multiplier {multiplier};");
    }
    let _ = writeln!(out, "protocol bfd {BFD_PROTOCOL} {{");
    if !options.is_empty() {
        let _ = write!(out, "  interface \"*\" {{\n{options}  }};\n");
        if bgp.neighbors.iter().any(|n| n.bfd && n.multihop.is_some()) {
            let _ = write!(out, "  multihop {{\n{options}  }};\n");
        }
    }
    out.push_str("}\n\n");
}

/// A duration in BIRD's syntax: `100 ms` (BFD intervals are whole milliseconds).
fn bird_time(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

fn bgp_protocol(out: &mut String, bgp: &Bgp, n: &Neighbor) {
    let f = family(n.address);
    let _ = writeln!(out, "protocol bgp {} {{", n.name);
    let _ = writeln!(
        out,
        "  description \"Stator: VIPs to {} (AS {})\";",
        n.address, n.remote_as
    );
    let _ = writeln!(out, "  router id {};", bgp.router_id);
    match n.source_address {
        Some(source) => {
            let _ = writeln!(out, "  local {source} as {};", bgp.local_as);
        }
        None => {
            let _ = writeln!(out, "  local as {};", bgp.local_as);
        }
    }
    let _ = writeln!(out, "  neighbor {} as {};", n.address, n.remote_as);
    if let Some(hold) = n.hold_time {
        let _ = writeln!(out, "  hold time {hold};");
    }
    if let Some(keepalive) = n.keepalive {
        let _ = writeln!(out, "  keepalive time {keepalive};");
    }
    if let Some(retry) = n.connect_retry {
        let _ = writeln!(out, "  connect retry time {retry};");
    }
    if let Some(wait) = n.error_wait {
        let _ = writeln!(
            out,
            "  error wait time {wait}, {};",
            wait.max(BIRD_ERROR_WAIT_MAX)
        );
    }
    if let Some(ttl) = n.multihop {
        let _ = writeln!(out, "  multihop {ttl};");
    }
    if n.bfd {
        out.push_str("  bfd on;\n");
    }
    out.push_str(
        "  # A node that goes away must be forgotten at once, not kept as a stale route.\n  \
         graceful restart off;\n  long lived graceful restart off;\n",
    );
    let _ = writeln!(out, "  {} {{", f.channel);
    let _ = writeln!(out, "    table {};", f.table);
    out.push_str("    import none;\n");
    let _ = writeln!(out, "    export filter {};", f.filter);
    if n.next_hop_self {
        out.push_str("    next hop self;\n");
    }
    out.push_str("  };\n}\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bird_times() {
        assert_eq!(bird_time(Duration::from_millis(100)), "100 ms");
        assert_eq!(bird_time(Duration::from_secs(2)), "2000 ms");
    }
}
