//! `[bgp]` and `[[bgp.neighbor]]`: what the announcer needs to write BIRD's side.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use super::Ctx;
use super::sections::wrong_family;
use crate::defaults as d;
use crate::error::{Error, FieldPath};
use crate::raw::{RawBgp, RawNeighbor, Scalar};
use crate::types::{Bgp, Neighbor, Node};

/// `Some(None)`: no BGP (no table, or `enabled = false`, in which case nothing else in the
/// table is checked). `None`: errors were recorded.
pub(super) fn bgp(ctx: &mut Ctx, raw: Option<&RawBgp>, node: Option<&Node>) -> Option<Option<Bgp>> {
    let Some(raw) = raw else { return Some(None) };
    if raw.enabled == Some(false) {
        return Some(None);
    }
    let at = FieldPath::root().key("bgp");
    let bird_socket = ctx.absolute_path(
        at.key("bird_socket"),
        raw.bird_socket.as_deref().unwrap_or(d::BIRD_SOCKET),
    );
    let bird_config = ctx.absolute_path(
        at.key("bird_config"),
        raw.bird_config.as_deref().unwrap_or(d::BIRD_CONFIG),
    );
    let local_as = match raw.local_as {
        Some(n) => as_number(ctx, at.key("local_as"), n),
        None => ctx.missing(at.key("local_as"), "set local_as, this node's AS number"),
    };
    let router_id = match raw.router_id.as_deref() {
        Some(text) => match ctx.ip(at.key("router_id"), text) {
            Some(IpAddr::V4(id)) if !id.is_unspecified() => Some(id),
            Some(IpAddr::V4(id)) => {
                ctx.error(
                    at.key("router_id"),
                    Error::Invalid {
                        value: id.to_string(),
                        expected: "a usable router id (not 0.0.0.0)".into(),
                    },
                );
                None
            }
            Some(v6) => wrong_family(
                ctx,
                at.key("router_id"),
                v6,
                "a BGP router id is 32 bits, written as an IPv4 address",
            ),
            None => None,
        },
        None => match node.map(|n| n.address_v4) {
            Some(Some(v4)) => Some(v4),
            // No node table at all: that error is already recorded.
            None => None,
            Some(None) => ctx.missing(
                at.key("router_id"),
                "set bgp.router_id (an IPv4 dotted quad); it defaults to node.address_v4, \
                 which is not set",
            ),
        },
    };
    let communities = communities(ctx, &at, raw.communities.as_deref());
    let bfd_interval = match &raw.bfd_interval {
        None => Some(None),
        Some(value) => bfd_interval(ctx, at.key("bfd_interval"), value).map(Some),
    };
    let bfd_multiplier = match raw.bfd_multiplier {
        None => Some(None),
        Some(n) => ctx.int(at.key("bfd_multiplier"), n, 1, 255).map(Some),
    };
    let neighbors = neighbors(ctx, &at, &raw.neighbor);
    Some(Some(Bgp {
        bird_socket: bird_socket?,
        bird_config: bird_config?,
        local_as: local_as?,
        router_id: router_id?,
        communities: communities?,
        bfd_interval: bfd_interval?,
        bfd_multiplier: bfd_multiplier?,
        neighbors: neighbors?,
    }))
}

/// A usable AS number: 1–4294967294 except the reserved 23456 (AS_TRANS, RFC 6793) and 65535
/// (RFC 7300).
fn as_number(ctx: &mut Ctx, path: FieldPath, n: i64) -> Option<u32> {
    let n: u32 = ctx.int(path.clone(), n, 1, 4_294_967_294)?;
    if n == 23456 || n == 65535 {
        ctx.error(
            path,
            Error::Invalid {
                value: n.to_string(),
                expected: "a usable AS number (23456 and 65535 are reserved)".into(),
            },
        );
        return None;
    }
    Some(n)
}

/// A BFD interval: whole milliseconds, 10ms–10s.
fn bfd_interval(ctx: &mut Ctx, path: FieldPath, value: &Scalar) -> Option<Duration> {
    let d = ctx.duration_in(
        path.clone(),
        value,
        Duration::from_millis(10),
        Duration::from_secs(10),
    )?;
    if d.subsec_nanos() % 1_000_000 != 0 {
        ctx.error(
            path,
            Error::Invalid {
                value: crate::duration::format_duration(d),
                expected: "whole milliseconds".into(),
            },
        );
        return None;
    }
    Some(d)
}

fn communities(ctx: &mut Ctx, at: &FieldPath, raw: Option<&[String]>) -> Option<Vec<(u16, u16)>> {
    let mut out = Vec::new();
    let mut ok = true;
    for (i, text) in raw.unwrap_or_default().iter().enumerate() {
        let parsed = text
            .split_once(':')
            .and_then(|(a, v)| Some((a.parse::<u16>().ok()?, v.parse::<u16>().ok()?)));
        match parsed {
            Some(c) => out.push(c),
            None => {
                ok = false;
                ctx.error(
                    at.key("communities").index(i),
                    Error::Invalid {
                        value: format!("{text:?}"),
                        expected: "a community \"ASN:VALUE\" (both 0-65535)".into(),
                    },
                );
            }
        }
    }
    ok.then_some(out)
}

fn neighbors(ctx: &mut Ctx, at: &FieldPath, raw: &[RawNeighbor]) -> Option<Vec<Neighbor>> {
    if raw.is_empty() {
        ctx.error(
            at.key("neighbor"),
            Error::Empty {
                hint: "; add a [[bgp.neighbor]] with address and remote_as, or set \
                       bgp.enabled = false"
                    .into(),
            },
        );
        return None;
    }
    let mut out = Vec::new();
    let mut ok = true;
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut addresses: HashMap<IpAddr, usize> = HashMap::new();
    for (i, n) in raw.iter().enumerate() {
        let at = at.key("neighbor").index(i);
        let Some(neighbor) = neighbor(ctx, &at, i, n) else {
            ok = false;
            continue;
        };
        if let Some(&first) = names.get(&neighbor.name) {
            ok = false;
            ctx.error(
                at.key("name"),
                Error::Duplicate {
                    what: "neighbor name",
                    value: format!("{:?}", neighbor.name),
                    first: FieldPath::root().key("bgp").key("neighbor").index(first),
                },
            );
        } else {
            names.insert(neighbor.name.clone(), i);
        }
        if let Some(&first) = addresses.get(&neighbor.address) {
            ok = false;
            ctx.error(
                at.key("address"),
                Error::Duplicate {
                    what: "neighbor",
                    value: neighbor.address.to_string(),
                    first: FieldPath::root().key("bgp").key("neighbor").index(first),
                },
            );
        } else {
            addresses.insert(neighbor.address, i);
        }
        out.push(neighbor);
    }
    ok.then_some(out)
}

fn neighbor(ctx: &mut Ctx, at: &FieldPath, index: usize, raw: &RawNeighbor) -> Option<Neighbor> {
    let name = match raw.name.as_deref() {
        None => Some(format!("stator_{index}")),
        Some(name) if name.starts_with("stator_") => {
            ctx.error(
                at.key("name"),
                Error::Invalid {
                    value: format!("{name:?}"),
                    expected: "a usable neighbor name (names starting with \"stator_\" are \
                               reserved for the BIRD symbols Stator generates)"
                        .into(),
                },
            );
            None
        }
        Some(name) if is_bird_symbol(name) => Some(name.to_owned()),
        Some(name) => {
            ctx.error(
                at.key("name"),
                Error::Invalid {
                    value: format!("{name:?}"),
                    expected: "a BIRD symbol (a letter or '_', then letters, digits or '_'; at \
                               most 64)"
                        .into(),
                },
            );
            None
        }
    };
    let address = match raw.address.as_deref() {
        Some(text) => ctx.unicast(at.key("address"), text),
        None => ctx.missing(at.key("address"), "the peer's address"),
    };
    let remote_as = match raw.remote_as {
        Some(n) => as_number(ctx, at.key("remote_as"), n),
        None => ctx.missing(at.key("remote_as"), "the peer's AS number"),
    };
    let source_address = match (raw.source_address.as_deref(), address) {
        (None, _) => Some(None),
        (Some(text), peer) => match (ctx.unicast(at.key("source_address"), text), peer) {
            (Some(src), Some(peer)) if src.is_ipv4() != peer.is_ipv4() => wrong_family(
                ctx,
                at.key("source_address"),
                src,
                "the same family as the neighbor's address",
            ),
            (Some(src), _) => Some(Some(src)),
            (None, _) => None,
        },
    };
    let hold_time = seconds(ctx, at.key("hold_time"), raw.hold_time.as_ref(), 3);
    let keepalive = seconds(ctx, at.key("keepalive"), raw.keepalive.as_ref(), 1);
    let connect_retry = seconds(ctx, at.key("connect_retry"), raw.connect_retry.as_ref(), 1);
    let error_wait = seconds(ctx, at.key("error_wait"), raw.error_wait.as_ref(), 1);
    if let (Some(Some(hold)), Some(Some(keepalive))) = (hold_time, keepalive)
        && keepalive >= hold
    {
        ctx.error(
            at.key("keepalive"),
            Error::Invalid {
                value: format!("{keepalive}s"),
                expected: format!("shorter than hold_time ({hold}s)"),
            },
        );
    }
    let multihop = match raw.multihop {
        None => Some(None),
        Some(ttl) => ctx.int(at.key("multihop"), ttl, 1, 255).map(Some),
    };
    let bfd = raw.bfd.unwrap_or(false);
    let bfd_source = if bfd && raw.multihop.is_some() && raw.source_address.is_none() {
        ctx.missing(
            at.key("source_address"),
            "BFD on a multihop session needs the session's source_address (BIRD cannot \
             choose one for a multihop BFD session)",
        )
    } else {
        Some(())
    };
    bfd_source?;
    Some(Neighbor {
        name: name?,
        address: address?,
        remote_as: remote_as?,
        source_address: source_address?,
        hold_time: hold_time?,
        keepalive: keepalive?,
        connect_retry: connect_retry?,
        error_wait: error_wait?,
        bfd,
        multihop: multihop?,
        next_hop_self: raw.next_hop_self.unwrap_or(true),
    })
}

/// A BGP timer: a duration of whole seconds in `[min, 65535]`. `Some(None)` when absent.
fn seconds(ctx: &mut Ctx, path: FieldPath, raw: Option<&Scalar>, min: u64) -> Option<Option<u16>> {
    let Some(raw) = raw else { return Some(None) };
    let d = ctx.duration(path.clone(), raw)?;
    if d.subsec_nanos() != 0 {
        ctx.error(
            path,
            Error::Invalid {
                value: crate::duration::format_duration(d),
                expected: "whole seconds (BIRD counts BGP timers in seconds)".into(),
            },
        );
        return None;
    }
    match u16::try_from(d.as_secs()) {
        Ok(secs) if u64::from(secs) >= min => Some(Some(secs)),
        _ => {
            ctx.error(
                path,
                Error::OutOfRange {
                    value: format!("{}s", d.as_secs()),
                    min: format!("{min}s"),
                    max: "65535s".into(),
                    hint: String::new(),
                },
            );
            None
        }
    }
}

/// A BIRD symbol: a letter or `_`, then letters, digits or `_`; at most 64 characters.
fn is_bird_symbol(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}
