//! `[fragments]`, `[tracer]` and `[[vip_class]]`, and what a `[[vip]]` says about them
//! (`fragments`, `failover`, `class`, `suffix_bits`): docs/forwarding.md §3.1, §9–§11.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use stator_abi::{
    STATOR_MAX_PEERS, STATOR_MAX_PREFIXES, STATOR_MAX_SUFFIX_LENS, STATOR_RSS_MAX_CPUS,
};
use stator_core::Prefix;

use super::Ctx;
use crate::defaults as d;
use crate::error::{Error, FieldPath};
use crate::raw::{
    RawAccessLog, RawFragments, RawReceiveSteering, RawTracer, RawVip, RawVipClass, Scalar,
};
use crate::types::{
    AccessLog, AccessLogFormat, Fragments, Node, ReceiveSteering, ReceiveXdpMode, Tracer, VipClass,
    VipGroup, VipKey,
};

/// `[fragments]`.
pub(super) fn fragments(
    ctx: &mut Ctx,
    raw: &RawFragments,
    node: Option<&Node>,
) -> Option<Fragments> {
    let at = FieldPath::root().key("fragments");
    let errors = ctx.errors.len();
    let mut peers = Vec::new();
    let mut self_index = None;
    let raw_peers = raw.peers.as_deref().unwrap_or(&[]);
    if raw_peers.len() > STATOR_MAX_PEERS as usize {
        ctx.error(
            at.key("peers"),
            Error::Limit {
                what: "fragment peers".into(),
                count: raw_peers.len() as u64,
                limit_name: "STATOR_MAX_PEERS",
                limit: u64::from(STATOR_MAX_PEERS),
                hint: String::new(),
            },
        );
    }
    for (i, text) in raw_peers.iter().enumerate() {
        let p = at.key("peers").index(i);
        let Some(addr) = ctx.unicast(p.clone(), text) else {
            continue;
        };
        if let Some(first) = peers.iter().position(|a| *a == addr) {
            ctx.error(
                p,
                Error::Duplicate {
                    what: "peer",
                    value: addr.to_string(),
                    first: at.key("peers").index(first),
                },
            );
            continue;
        }
        let mine = node.is_some_and(|n| match addr {
            IpAddr::V4(a) => n.address_v4 == Some(a),
            IpAddr::V6(a) => n.address_v6 == Some(a),
        });
        if mine {
            if let Some(first) = self_index {
                ctx.error(
                    p,
                    Error::NotApplicable {
                        reason: format!(
                            "this node is listed twice (also at fragments.peers[{first}]): each \
                             node must be listed once, by one of its addresses"
                        ),
                    },
                );
            }
            self_index = Some(peers.len());
        }
        peers.push(addr);
    }
    if !raw_peers.is_empty() && self_index.is_none() && node.is_some() && ctx.errors.len() == errors
    {
        ctx.error(
            at.key("peers"),
            Error::NotApplicable {
                reason: "none of the peers is this node (node.address_v4 / node.address_v6): \
                         list every Stator node of the cluster, this one included"
                    .into(),
            },
        );
    }
    let table_size = match raw.table_size {
        None => Some(d::PEER_TABLE_SIZE),
        Some(v) => ctx
            .int::<u32>(
                at.key("table_size"),
                v,
                7,
                i64::from(stator_abi::STATOR_MAX_TABLE_SIZE),
            )
            .and_then(|n| {
                if stator_hash::is_prime(n) {
                    Some(n)
                } else {
                    ctx.error(
                        at.key("table_size"),
                        Error::NotPrime {
                            value: n,
                            hint: String::new(),
                        },
                    );
                    None
                }
            }),
    };
    let timeout = match &raw.timeout {
        None => Some(d::FRAG_TIMEOUT),
        Some(v) => ctx.duration_in(
            at.key("timeout"),
            v,
            d::MIN_FRAG_TIMEOUT,
            d::MAX_FRAG_TIMEOUT,
        ),
    };
    let table_entries = match raw.table_entries {
        None => Some(d::FRAG_TABLE_ENTRIES),
        Some(v) => ctx.int(
            at.key("table_entries"),
            v,
            i64::from(d::MIN_FRAG_TABLE_ENTRIES),
            i64::from(d::MAX_FRAG_TABLE_ENTRIES),
        ),
    };
    let hold_frames = match raw.hold_frames {
        None => Some(d::HOLD_FRAMES),
        Some(v) => ctx.int(at.key("hold_frames"), v, 1, i64::from(d::MAX_HOLD_FRAMES)),
    };
    let hold_bytes = match raw.hold_bytes {
        None => Some(d::HOLD_BYTES),
        Some(v) => ctx.int(
            at.key("hold_bytes"),
            v,
            i64::from(d::MIN_HOLD_BYTES),
            i64::from(d::MAX_HOLD_BYTES),
        ),
    };
    if ctx.errors.len() != errors {
        return None;
    }
    Some(Fragments {
        peers,
        self_index,
        table_size: table_size?,
        timeout: timeout?,
        table_entries: table_entries?,
        hold_frames: hold_frames?,
        hold_bytes: hold_bytes?,
    })
}

/// `[tracer]`.
/// `[access_log]`: `Some(None)` when absent, `None` when invalid (errors recorded).
pub(super) fn access_log(ctx: &mut Ctx, raw: Option<&RawAccessLog>) -> Option<Option<AccessLog>> {
    let Some(raw) = raw else {
        return Some(None);
    };
    let at = FieldPath::root().key("access_log");
    let errors = ctx.errors.len();
    let path = match raw.path.as_deref() {
        None => {
            ctx.error(
                at.key("path"),
                Error::Missing {
                    hint: "an absolute path such as \"/var/log/stator/access.log\", or \"stdout\""
                        .into(),
                },
            );
            None
        }
        Some("stdout") => Some(None),
        Some(text) => ctx.absolute_path(at.key("path"), text).map(Some),
    };
    let format = match raw.format.as_deref() {
        None | Some("json") => Some(AccessLogFormat::Json),
        Some("text") => Some(AccessLogFormat::Text),
        Some(other) => {
            ctx.error(
                at.key("format"),
                Error::Invalid {
                    value: format!("{other:?}"),
                    expected: "\"json\" or \"text\"".into(),
                },
            );
            None
        }
    };
    let sample = match &raw.sample {
        None => Some(1_000_000),
        Some(s) => {
            let v = match s {
                Scalar::Int(i) => Some(*i as f64),
                Scalar::Float(f) => Some(*f),
                _ => None,
            };
            match v {
                Some(v) if v > 0.0 && v <= 1.0 && (v * 1e6).round() >= 1.0 => {
                    Some((v * 1e6).round() as u32)
                }
                _ => {
                    ctx.error(
                        at.key("sample"),
                        Error::Invalid {
                            value: s.to_string(),
                            expected: "a share of the records above 0 and at most 1 (e.g. 0.1 \
                                       writes one in ten; failures are always written)"
                                .into(),
                        },
                    );
                    None
                }
            }
        }
    };
    if ctx.errors.len() != errors {
        return None;
    }
    Some(Some(AccessLog {
        path: path?,
        format: format?,
        sample_per_million: sample?,
    }))
}

/// `[receive_steering]`: `Some(None)` when absent, `None` when invalid (errors recorded).
pub(super) fn receive_steering(
    ctx: &mut Ctx,
    raw: Option<&RawReceiveSteering>,
) -> Option<Option<ReceiveSteering>> {
    let Some(raw) = raw else {
        return Some(None);
    };
    let at = FieldPath::root().key("receive_steering");
    let errors = ctx.errors.len();
    let mut interfaces = Vec::new();
    match raw.interfaces.as_deref() {
        None | Some([]) => ctx.error(
            at.key("interfaces"),
            Error::Missing {
                hint: "the interfaces clients' packets arrive on, e.g. [\"eth0\"]".into(),
            },
        ),
        Some(names) => {
            let mut seen: HashMap<&str, usize> = HashMap::new();
            for (i, name) in names.iter().enumerate() {
                if !super::sections::is_interface_name(name) {
                    ctx.error(
                        at.key("interfaces").index(i),
                        Error::Invalid {
                            value: format!("{name:?}"),
                            expected: "a Linux interface name (1-15 bytes, no '/', ':' or \
                                       whitespace, not \".\" or \"..\")"
                                .into(),
                        },
                    );
                } else if let Some(&first) = seen.get(name.as_str()) {
                    ctx.error(
                        at.key("interfaces").index(i),
                        Error::Duplicate {
                            what: "interface",
                            value: name.clone(),
                            first: at.key("interfaces").index(first),
                        },
                    );
                } else {
                    seen.insert(name, i);
                    interfaces.push(name.clone());
                }
            }
        }
    }
    let cpus = raw.cpus.as_deref().map(|list| {
        let mut cpus: Vec<u32> = Vec::new();
        if list.is_empty() {
            ctx.error(
                at.key("cpus"),
                Error::Empty {
                    hint: "; list the CPUs workers are pinned to, or leave cpus out for every \
                           CPU the node may run on"
                        .into(),
                },
            );
        }
        for (i, &c) in list.iter().enumerate() {
            let Some(cpu) = ctx.int::<u32>(
                at.key("cpus").index(i),
                c,
                0,
                i64::from(STATOR_RSS_MAX_CPUS) - 1,
            ) else {
                continue;
            };
            if let Some(first) = cpus.iter().position(|&x| x == cpu) {
                ctx.error(
                    at.key("cpus").index(i),
                    Error::Duplicate {
                        what: "CPU (one worker per CPU)",
                        value: cpu.to_string(),
                        first: at.key("cpus").index(first),
                    },
                );
            } else {
                cpus.push(cpu);
            }
        }
        cpus
    });
    let xdp_mode = match raw.xdp_mode.as_deref() {
        None | Some("generic") => ReceiveXdpMode::Generic,
        Some("native") => ReceiveXdpMode::Native,
        Some(other) => {
            ctx.error(
                at.key("xdp_mode"),
                Error::Invalid {
                    value: format!("{other:?}"),
                    expected: "\"generic\" (any interface) or \"native\" (a NIC whose driver \
                               has XDP)"
                        .into(),
                },
            );
            ReceiveXdpMode::Generic
        }
    };
    let queue_size = match raw.queue_size {
        None => Some(d::RECEIVE_QUEUE_SIZE),
        Some(n) => ctx.int(at.key("queue_size"), n, 1, d::MAX_RECEIVE_QUEUE_SIZE.into()),
    };
    if ctx.errors.len() != errors {
        return None;
    }
    Some(Some(ReceiveSteering {
        interfaces,
        cpus,
        xdp_mode,
        queue_size: queue_size?,
    }))
}

pub(super) fn tracer(ctx: &mut Ctx, raw: &RawTracer) -> Option<Tracer> {
    let at = FieldPath::root().key("tracer");
    let errors = ctx.errors.len();
    let reports_per_sec = match raw.reports_per_sec {
        None => Some(d::TRACE_REPORTS_PER_SEC),
        Some(v) => ctx.int(
            at.key("reports_per_sec"),
            v,
            0,
            i64::from(d::MAX_TRACE_REPORTS_PER_SEC),
        ),
    };
    let key_file = match raw.key_file.as_deref() {
        None => None,
        Some(text) => ctx.absolute_path(at.key("key_file"), text),
    };
    let mut receivers = Vec::new();
    for (i, text) in raw.receivers.iter().flatten().enumerate() {
        if let Some(p) = prefix(ctx, at.key("receivers").index(i), text) {
            receivers.push(p);
        }
    }
    match (&raw.key_file, &raw.receivers) {
        (Some(_), None) => ctx.error(
            at.key("receivers"),
            Error::Missing {
                hint: "name the prefixes reports may be sent to, e.g. receivers = \
                       [\"10.0.0.0/8\"] (the operators' hosts)"
                    .into(),
            },
        ),
        (Some(_), Some(r)) if r.is_empty() => ctx.error(
            at.key("receivers"),
            Error::Empty {
                hint: "; name the prefixes reports may be sent to".into(),
            },
        ),
        (None, Some(_)) => ctx.error(
            at.key("receivers"),
            Error::NotApplicable {
                reason: "tracer.receivers has no effect without tracer.key_file (the tracer \
                         is off)"
                    .into(),
            },
        ),
        _ => {}
    }
    if ctx.errors.len() != errors {
        return None;
    }
    Some(Tracer {
        reports_per_sec: reports_per_sec?,
        key_file,
        receivers,
    })
}

/// A prefix written `address/length`, its host bits zero.
pub(super) fn prefix(ctx: &mut Ctx, at: FieldPath, text: &str) -> Option<Prefix> {
    let bad = |ctx: &mut Ctx, expected: String| {
        ctx.error(
            at.clone(),
            Error::Invalid {
                value: format!("{text:?}"),
                expected,
            },
        );
        None
    };
    let Some((a, l)) = text.split_once('/') else {
        return bad(
            ctx,
            "a prefix such as \"10.100.0.0/16\" (address/length)".into(),
        );
    };
    let (Ok(addr), Ok(len)) = (a.parse::<IpAddr>(), l.parse::<u8>()) else {
        return bad(
            ctx,
            "a prefix such as \"10.100.0.0/16\" (address/length)".into(),
        );
    };
    match Prefix::new(addr, len) {
        None => bad(ctx, format!("a prefix length of at most {}", width(addr))),
        Some(p) if p.addr != addr => bad(ctx, format!("a prefix with its host bits zero ({p})")),
        Some(p) => Some(p),
    }
}

fn width(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

/// Whether two prefixes share an address.
fn overlap(a: &Prefix, b: &Prefix) -> bool {
    a.addr.is_ipv4() == b.addr.is_ipv4() && (a.contains(b.addr) || b.contains(a.addr))
}

/// `[[vip_class]]`.
pub(super) fn classes(ctx: &mut Ctx, raw: &[RawVipClass]) -> Option<Vec<VipClass>> {
    let errors = ctx.errors.len();
    let mut out: Vec<VipClass> = Vec::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    // every prefix seen: (prefix, class index, its path)
    let mut seen: Vec<(Prefix, usize, FieldPath)> = Vec::new();
    for (i, c) in raw.iter().enumerate() {
        let at = FieldPath::root().key("vip_class").index(i);
        let name = match &c.name {
            Some(n) => ctx.name(at.key("name"), n),
            None => ctx.missing(at.key("name"), "a name that vip.class refers to"),
        };
        if let Some(n) = &name {
            if let Some(&first) = names.get(n) {
                ctx.error(
                    at.key("name"),
                    Error::Duplicate {
                        what: "class",
                        value: format!("{n:?}"),
                        first: FieldPath::root().key("vip_class").index(first),
                    },
                );
            } else {
                names.insert(n.clone(), i);
            }
        }
        let mut prefixes = Vec::new();
        match c.prefixes.as_deref() {
            None => {
                ctx.missing::<()>(at.key("prefixes"), "the class's prefix groups (CIDRs)");
            }
            Some([]) => ctx.error(
                at.key("prefixes"),
                Error::Empty {
                    hint: ": a class needs at least one prefix group".into(),
                },
            ),
            Some(list) => {
                for (j, text) in list.iter().enumerate() {
                    let p_at = at.key("prefixes").index(j);
                    let Some(p) = prefix(ctx, p_at.clone(), text) else {
                        continue;
                    };
                    if let Some((q, _, q_at)) = seen.iter().find(|(q, _, _)| overlap(&p, q)) {
                        ctx.error(
                            p_at.clone(),
                            Error::Overlap {
                                value: p.to_string(),
                                other: q.to_string(),
                                first: q_at.clone(),
                            },
                        );
                        continue;
                    }
                    seen.push((p, i, p_at));
                    prefixes.push(p);
                }
            }
        }
        let bits = |ctx: &mut Ctx, key: &str, v: Option<i64>, def: u8, max: i64| match v {
            None => Some(def),
            Some(v) => ctx.int::<u8>(at.key(key), v, 1, max),
        };
        let v4 = bits(
            ctx,
            "suffix_bits_v4",
            c.suffix_bits_v4,
            d::SUFFIX_BITS_V4,
            32,
        );
        let v6 = bits(
            ctx,
            "suffix_bits_v6",
            c.suffix_bits_v6,
            d::SUFFIX_BITS_V6,
            128,
        );
        if let (Some(name), Some(v4), Some(v6)) = (name, v4, v6) {
            out.push(VipClass {
                name,
                prefixes,
                suffix_bits_v4: v4,
                suffix_bits_v6: v6,
            });
        }
    }
    if seen.len() > STATOR_MAX_PREFIXES as usize {
        ctx.error(
            FieldPath::root().key("vip_class"),
            Error::Limit {
                what: "prefix groups".into(),
                count: seen.len() as u64,
                limit_name: "STATOR_MAX_PREFIXES",
                limit: u64::from(STATOR_MAX_PREFIXES),
                hint: String::new(),
            },
        );
    }
    (ctx.errors.len() == errors).then_some(out)
}

/// What a `[[vip]]` says about fragments, failover and its class.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct VipExtras {
    pub fragments: bool,
    pub failover: Option<IpAddr>,
    pub group: Option<VipGroup>,
}

/// A VIP's `fragments`, `failover`, `class` and `suffix_bits` (the class must exist and hold
/// the VIP's address; the suffix must fit every prefix of the class of its family).
pub(super) fn vip_extras(
    ctx: &mut Ctx,
    at: &FieldPath,
    raw: &RawVip,
    key: Option<&VipKey>,
    classes: Option<&[VipClass]>,
) -> Option<VipExtras> {
    let errors = ctx.errors.len();
    let failover = raw
        .failover
        .as_deref()
        .and_then(|t| ctx.unicast(at.key("failover"), t));
    if let (Some(f), Some(k)) = (failover, key)
        && f == k.addr
    {
        ctx.error(
            at.key("failover"),
            Error::NotApplicable {
                reason: format!(
                    "{f} is the VIP's own address: failover names the same service's address \
                     in another cluster"
                ),
            },
        );
    }
    let group = match (&raw.class, classes, key) {
        (None, _, _) => {
            if raw.suffix_bits.is_some() {
                ctx.error(
                    at.key("suffix_bits"),
                    Error::NotApplicable {
                        reason: "suffix_bits needs vip.class".into(),
                    },
                );
            }
            None
        }
        // a broken [[vip_class]] is reported there
        (Some(_), None, _) | (Some(_), _, None) => None,
        (Some(name), Some(classes), Some(key)) => group(ctx, at, raw, name, classes, key),
    };
    (ctx.errors.len() == errors).then_some(VipExtras {
        fragments: raw.fragments.unwrap_or(false),
        failover,
        group,
    })
}

fn group(
    ctx: &mut Ctx,
    at: &FieldPath,
    raw: &RawVip,
    name: &str,
    classes: &[VipClass],
    key: &VipKey,
) -> Option<VipGroup> {
    let Some(i) = classes.iter().position(|c| c.name == name) else {
        let known: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
        ctx.error(
            at.key("class"),
            Error::Invalid {
                value: format!("{name:?}"),
                expected: if known.is_empty() {
                    "the name of a [[vip_class]] (there is none)".into()
                } else {
                    format!("the name of a [[vip_class]] ({})", known.join(", "))
                },
            },
        );
        return None;
    };
    let class = &classes[i];
    let mine: Vec<&Prefix> = class
        .prefixes
        .iter()
        .filter(|p| p.addr.is_ipv4() == key.addr.is_ipv4())
        .collect();
    if !mine.iter().any(|p| p.contains(key.addr)) {
        ctx.error(
            at.key("address"),
            Error::NotApplicable {
                reason: format!(
                    "{} is in none of class {name:?}'s prefix groups ({})",
                    key.addr,
                    mine.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        );
        return None;
    }
    let def = if key.addr.is_ipv4() {
        class.suffix_bits_v4
    } else {
        class.suffix_bits_v6
    };
    let bits = match raw.suffix_bits {
        None => def,
        Some(v) => ctx.int::<u8>(at.key("suffix_bits"), v, 1, i64::from(width(key.addr)))?,
    };
    if let Some(p) = mine
        .iter()
        .find(|p| u32::from(bits) + u32::from(p.len) > u32::from(width(key.addr)))
    {
        ctx.error(
            at.key(if raw.suffix_bits.is_some() {
                "suffix_bits"
            } else {
                "class"
            }),
            Error::NotApplicable {
                reason: format!(
                    "a suffix of {bits} bits reaches into prefix group {p} of class {name:?}: \
                     at most {} bits",
                    width(key.addr) - p.len
                ),
            },
        );
        return None;
    }
    Some(VipGroup { class: i, bits })
}

/// Group VIPs that a packet could match both ways, and classes with too many suffix lengths.
pub(super) fn check_groups(ctx: &mut Ctx, groups: &[(usize, VipKey, VipGroup)]) {
    let mut seen: BTreeMap<(usize, u8, IpAddr, u16, u8), usize> = BTreeMap::new();
    let mut lens: BTreeMap<(usize, bool), Vec<u8>> = BTreeMap::new();
    for &(i, key, g) in groups {
        let at = FieldPath::root().key("vip").index(i);
        let suffix = stator_core::snapshot::suffix_of(key.addr, g.bits);
        let k = (g.class, g.bits, suffix, key.port, key.proto.number());
        if let Some(&first) = seen.get(&k) {
            ctx.error(
                at.key("address"),
                Error::Overlap {
                    value: format!("{} (suffix of {} bits)", key.addr, g.bits),
                    other: "a VIP of the same class, suffix, port and protocol".into(),
                    first: FieldPath::root().key("vip").index(first),
                },
            );
        } else {
            seen.insert(k, i);
        }
        let l = lens.entry((g.class, key.addr.is_ipv6())).or_default();
        if !l.contains(&g.bits) {
            l.push(g.bits);
            if l.len() > STATOR_MAX_SUFFIX_LENS as usize {
                ctx.error(
                    at.key("suffix_bits"),
                    Error::Limit {
                        what: "distinct suffix lengths in one class and family".into(),
                        count: l.len() as u64,
                        limit_name: "STATOR_MAX_SUFFIX_LENS",
                        limit: u64::from(STATOR_MAX_SUFFIX_LENS),
                        hint: String::new(),
                    },
                );
            }
        }
    }
}
