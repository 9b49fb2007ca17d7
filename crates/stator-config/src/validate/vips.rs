//! `[[vip]]`: matching, pools, Maglev table size, flattened backends; and the limits the
//! compiled data plane puts on all VIPs together.

use std::collections::HashMap;
use std::net::IpAddr;

use stator_abi::{STATOR_MAX_REALS, STATOR_MAX_VIPS};

use super::cluster::{VipExtras, check_groups, vip_extras};
use super::pools::Pools;
use super::sections::encap_of;
use super::{Ctx, suggest_pool};
use crate::defaults as d;
use crate::error::{Error, FieldPath};
use crate::flatten::{flatten, sorted_members};
use crate::raw::{FlagName, ProtocolName, RawVip, Scalar};
use crate::types::{
    Dataplane, Encap, EncapDefaults, Member, Node, PoolId, Proto, Vip, VipClass, VipFlags, VipKey,
};

#[allow(clippy::too_many_arguments)] // the sections a VIP is checked against
pub(super) fn vips(
    ctx: &mut Ctx,
    raw: &[RawVip],
    pools: &Pools,
    node: Option<&Node>,
    encap: &Option<EncapDefaults>,
    dataplane: Option<&Dataplane>,
    proxy_only: bool,
    classes: Option<&[VipClass]>,
) -> Option<Vec<Vip>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut groups = Vec::new();
    let mut ok = true;
    let mut keys: HashMap<VipKey, usize> = HashMap::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    for (i, v) in raw.iter().enumerate() {
        let at = FieldPath::root().key("vip").index(i);
        let key = vip_key(ctx, &at, v, node);
        let name = match (&v.name, &key) {
            (Some(name), _) => ctx.name(at.key("name"), name),
            (None, Some(key)) => Some(Vip::derived_name(key)),
            (None, None) => None,
        };
        if let Some(key) = key {
            if let Some(&first) = keys.get(&key) {
                ok = false;
                ctx.error(
                    at.clone(),
                    Error::Duplicate {
                        what: "VIP",
                        value: describe(&key),
                        first: FieldPath::root().key("vip").index(first),
                    },
                );
            } else {
                keys.insert(key, i);
            }
        }
        // Derived names collide only when keys do, which is reported just above.
        if let (Some(name), Some(_)) = (&name, &v.name) {
            if let Some(&first) = names.get(name) {
                ok = false;
                ctx.error(
                    at.key("name"),
                    Error::Duplicate {
                        what: "VIP name",
                        value: format!("{name:?}"),
                        first: FieldPath::root().key("vip").index(first),
                    },
                );
            } else {
                names.insert(name.clone(), i);
            }
        } else if let Some(name) = &name {
            names.entry(name.clone()).or_insert(i);
        }
        let extras = vip_extras(ctx, &at, v, key.as_ref(), classes);
        // Valid VIPs are kept even after an error elsewhere, so that the limits below count
        // everything that can be counted.
        match (vip(ctx, &at, v, pools, encap), key, name, extras) {
            (Some(parts), Some(key), Some(name), Some(extras)) => {
                if let Some(g) = extras.group {
                    groups.push((i, key, g));
                }
                out.push(parts.into_vip(key, name, extras));
            }
            _ => ok = false,
        }
    }
    if proxy_only && !raw.is_empty() {
        ok = false;
        ctx.error(
            FieldPath::root().key("vip").index(0),
            Error::NotApplicable {
                reason: "dataplane.mode = \"none\" forwards no packets, so it serves no VIP: \
                         remove the [[vip]] tables or set dataplane.mode = \"xdp\""
                    .into(),
            },
        );
    }
    let errors = ctx.errors.len();
    check_groups(ctx, &groups);
    ok &= ctx.errors.len() == errors;
    ok &= limits(ctx, raw.len(), &out, dataplane);
    ok.then_some(out)
}

/// `tcp 192.0.2.10:80`, `udp [2001:db8::53]:any`.
fn describe(key: &VipKey) -> String {
    let name = Vip::derived_name(key);
    name.replacen('/', " ", 1)
}

/// Address, port and protocol: what the VIP matches.
fn vip_key(ctx: &mut Ctx, at: &FieldPath, raw: &RawVip, node: Option<&Node>) -> Option<VipKey> {
    let addr = match raw.address.as_deref() {
        Some(text) => ctx
            .unicast(at.key("address"), text)
            .and_then(|a| not_node_address(ctx, at, a, node)),
        None => ctx.missing(at.key("address"), "the VIP's IP address"),
    };
    let port = match &raw.port {
        None => ctx.missing(at.key("port"), "a port (1-65535), or \"any\""),
        Some(Scalar::Int(p)) if (0..=65535).contains(p) => u16::try_from(*p).ok(),
        Some(Scalar::Str(s)) if s == "any" => Some(0),
        Some(other) => {
            ctx.error(
                at.key("port"),
                Error::Invalid {
                    value: other.to_string(),
                    expected: "a port (1-65535), or \"any\" (or 0) for every port".into(),
                },
            );
            None
        }
    };
    let proto = match raw.protocol {
        Some(ProtocolName::Tcp) => Some(Proto::Tcp),
        Some(ProtocolName::Udp) => Some(Proto::Udp),
        None => ctx.missing(at.key("protocol"), "\"tcp\" or \"udp\""),
    };
    Some(VipKey {
        addr: addr?,
        port: port?,
        proto: proto?,
    })
}

/// Everything of a VIP but its key and name.
struct VipParts {
    pools: Vec<PoolId>,
    encap: Encap,
    table_size: u32,
    flags: VipFlags,
    backends: Vec<Member>,
}

impl VipParts {
    fn into_vip(self, key: VipKey, name: String, extras: VipExtras) -> Vip {
        let mut flags = self.flags;
        flags.fragments = extras.fragments;
        Vip {
            name,
            key,
            pools: self.pools,
            encap: self.encap,
            table_size: self.table_size,
            flags,
            backends: self.backends,
            failover: extras.failover,
            group: extras.group,
        }
    }
}

fn vip(
    ctx: &mut Ctx,
    at: &FieldPath,
    raw: &RawVip,
    pools: &Pools,
    encap: &Option<EncapDefaults>,
) -> Option<VipParts> {
    let errors_before = ctx.errors.len();
    let pool_ids = pool_refs(ctx, at, raw.pools.as_deref(), pools);
    let table_size = table_size(ctx, at.key("table_size"), raw.table_size);
    let mut flags = VipFlags::default();
    for (k, flag) in raw.flags.iter().enumerate() {
        if let Some(first) = raw.flags[..k].iter().position(|f| f == flag) {
            ctx.error(
                at.key("flags").index(k),
                Error::Duplicate {
                    what: "flag",
                    value: flag.as_str().into(),
                    first: at.key("flags").index(first),
                },
            );
        }
        match flag {
            FlagName::NoConntrack => flags.no_conntrack = true,
        }
    }
    let encap = match (raw.encap, encap) {
        (Some(name), _) => Some(encap_of(name)),
        (None, Some(defaults)) => Some(defaults.default),
        (None, None) => None,
    };
    // Backends: only from intact pools (errors in pools are reported where they are).
    let (pool_ids, table_size) = (pool_ids?, table_size?);
    if pool_ids.iter().any(|p| pools.broken[p.0]) {
        return None;
    }
    let flat = flatten(&pools.pools, &pool_ids);
    for c in &flat.conflicts {
        ctx.error(
            at.key("pools"),
            Error::WeightConflict {
                backend: pools.backends[c.backend.0].name.clone(),
                first_weight: c.first.1,
                first_pool: pools.pools[c.first.0.0].name.clone(),
                second_weight: c.second.1,
                second_pool: pools.pools[c.second.0.0].name.clone(),
            },
        );
    }
    let backends = sorted_members(&pools.backends, &flat);
    if !backends.is_empty() && backends.iter().all(|m| m.weight == 0) {
        ctx.error(
            at.key("pools"),
            Error::ZeroTotalWeight {
                backends: match backends.len() {
                    1 => "1 backend".into(),
                    n => format!("{n} backends"),
                },
            },
        );
    }
    if (table_size as usize) < backends.len() {
        ctx.error(
            at.key("table_size"),
            Error::TableTooSmall {
                table_size,
                backends: backends.len(),
            },
        );
    }
    if ctx.errors.len() != errors_before {
        return None;
    }
    Some(VipParts {
        pools: pool_ids,
        encap: encap?,
        table_size,
        flags,
        backends,
    })
}

/// A VIP on the node's own address would capture traffic to the node itself.
fn not_node_address(
    ctx: &mut Ctx,
    at: &FieldPath,
    addr: IpAddr,
    node: Option<&Node>,
) -> Option<IpAddr> {
    let key = match (addr, node) {
        (IpAddr::V4(a), Some(n)) if n.address_v4 == Some(a) => "node.address_v4",
        (IpAddr::V6(a), Some(n)) if n.address_v6 == Some(a) => "node.address_v6",
        _ => return Some(addr),
    };
    ctx.error(
        at.key("address"),
        Error::UnusableAddress {
            address: addr.to_string(),
            reason: format!(
                "{key}, the node's own address (traffic to the node itself would be load-balanced)"
            ),
        },
    );
    None
}

fn pool_refs(
    ctx: &mut Ctx,
    at: &FieldPath,
    raw: Option<&[String]>,
    pools: &Pools,
) -> Option<Vec<PoolId>> {
    let at = at.key("pools");
    let Some(raw) = raw else {
        return ctx.missing(at, "the pools this VIP serves from, e.g. pools = [\"web\"]");
    };
    if raw.is_empty() {
        ctx.error(
            at,
            Error::Empty {
                hint: "; name the pools this VIP serves from".into(),
            },
        );
        return None;
    }
    let mut out = Vec::new();
    let mut ok = true;
    for (k, name) in raw.iter().enumerate() {
        if let Some(first) = raw[..k].iter().position(|n| n == name) {
            ok = false;
            ctx.error(
                at.index(k),
                Error::Duplicate {
                    what: "pool",
                    value: format!("{name:?}"),
                    first: at.index(first),
                },
            );
            continue;
        }
        match pools.by_name.get(name) {
            Some(&id) => out.push(id),
            None => {
                ok = false;
                let hint = suggest_pool(name, pools.names());
                ctx.error(
                    at.index(k),
                    Error::UnknownPool {
                        name: name.clone(),
                        hint,
                    },
                );
            }
        }
    }
    ok.then_some(out)
}

fn table_size(ctx: &mut Ctx, path: FieldPath, raw: Option<i64>) -> Option<u32> {
    let Some(raw) = raw else {
        return Some(d::TABLE_SIZE);
    };
    let size: u32 = ctx.int(
        path.clone(),
        raw,
        d::MIN_TABLE_SIZE.into(),
        d::MAX_TABLE_SIZE.into(),
    )?;
    if is_prime(size) {
        return Some(size);
    }
    let below = (d::MIN_TABLE_SIZE..size).rev().find(|&n| is_prime(n));
    let above = (size..=d::MAX_TABLE_SIZE).find(|&n| is_prime(n));
    let hint = match (below, above) {
        (Some(b), Some(a)) => format!("; the nearest primes are {b} and {a}"),
        (Some(p), None) | (None, Some(p)) => format!("; the nearest prime is {p}"),
        (None, None) => String::new(),
    };
    ctx.error(path, Error::NotPrime { value: size, hint });
    None
}

/// Counts against the compiled map limits (`bpf/include/stator_abi.h`).
fn limits(ctx: &mut Ctx, count: usize, vips: &[Vip], dataplane: Option<&Dataplane>) -> bool {
    let at = FieldPath::root().key("vip");
    let mut ok = true;
    let mut limit = |what: &str, count: u64, limit_name, limit: u64, hint: &str| {
        if count > limit {
            ok = false;
            ctx.error(
                at.clone(),
                Error::Limit {
                    what: what.into(),
                    count,
                    limit_name,
                    limit,
                    hint: hint.into(),
                },
            );
        }
    };
    limit(
        "VIPs",
        count as u64,
        "STATOR_MAX_VIPS",
        STATOR_MAX_VIPS.into(),
        "",
    );
    let reals: usize = vips.iter().map(|v| v.backends.len()).sum();
    limit(
        "(VIP, backend) pairs",
        reals as u64,
        "STATOR_MAX_REALS",
        STATOR_MAX_REALS.into(),
        "",
    );
    if let Some(dataplane) = dataplane {
        let slots: u64 = vips.iter().map(|v| u64::from(v.table_size)).sum();
        limit(
            "Maglev slots (the sum of all table_size)",
            slots,
            "dataplane.slots_per_generation",
            dataplane.slots_per_generation.into(),
            "; raise dataplane.slots_per_generation or use smaller tables",
        );
    }
    ok
}

use stator_hash::is_prime;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiled_table_limit_is_a_valid_size() {
        assert!(is_prime(stator_abi::STATOR_MAX_TABLE_SIZE));
    }
}
