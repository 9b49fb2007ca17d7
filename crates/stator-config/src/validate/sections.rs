//! `[node]`, `[dataplane]`, `[encap]`, `[api]`, `[log]`.

use crate::raw::RawUpgrade;
use crate::types::Upgrade;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use stator_abi::STATOR_MAX_TX_PORTS;

use super::{Ctx, family_name};
use crate::defaults as d;
use crate::error::{Error, FieldPath};
use crate::raw::{
    DataplaneModeName, EncapName, RawAfxdp, RawApi, RawDataplane, RawEncap, RawLog, RawNode, Scalar,
};
use crate::types::{
    Afxdp, AfxdpThreading, Api, Dataplane, DataplaneMode, Encap, EncapDefaults, Log, Node, Secret,
    SocketGroup, Token,
};

pub(super) fn node(ctx: &mut Ctx, raw: Option<&RawNode>, proxy_only: bool) -> Option<Node> {
    let at = FieldPath::root().key("node");
    let Some(raw) = raw else {
        return ctx.missing(
            at,
            "add a [node] table with name and address_v4 and/or address_v6",
        );
    };
    let name = match &raw.name {
        Some(name) => ctx.name(at.key("name"), name),
        None => ctx.missing(at.key("name"), "name this node, e.g. name = \"lb1\""),
    };
    let mut ok = true;
    let mut address = |ctx: &mut Ctx, key: &str, text: Option<&str>, want_v4: bool| {
        let text = text?;
        let addr = ctx.unicast(at.key(key), text);
        match addr {
            Some(addr) if addr.is_ipv4() == want_v4 => Some(addr),
            Some(addr) => {
                let hint = if want_v4 {
                    "use node.address_v6"
                } else {
                    "use node.address_v4"
                };
                ok = false;
                wrong_family(ctx, at.key(key), addr, hint)
            }
            None => {
                ok = false;
                None
            }
        }
    };
    let address_v4 = match address(ctx, "address_v4", raw.address_v4.as_deref(), true) {
        Some(IpAddr::V4(a)) => Some(a),
        _ => None,
    };
    let address_v6 = match address(ctx, "address_v6", raw.address_v6.as_deref(), false) {
        Some(IpAddr::V6(a)) => Some(a),
        _ => None,
    };
    if raw.address_v4.is_none() && raw.address_v6.is_none() && !proxy_only {
        ok = false;
        ctx.missing::<()>(
            at.key("address_v4"),
            "set node.address_v4 and/or node.address_v6 (the outer source addresses of \
             encapsulated packets; a proxy-only node, [dataplane] mode = \"none\", needs neither)",
        );
    }
    if !ok {
        return None;
    }
    Some(Node {
        name: name?,
        address_v4,
        address_v6,
    })
}

/// Records an address of the wrong family for `path` ("must be IPv4; {hint}").
pub(super) fn wrong_family<T>(
    ctx: &mut Ctx,
    path: FieldPath,
    addr: IpAddr,
    hint: &str,
) -> Option<T> {
    let expected = if addr.is_ipv4() { "IPv6" } else { "IPv4" };
    ctx.error(
        path.clone(),
        Error::WrongFamily {
            address: addr.to_string(),
            actual: family_name(addr),
            expected: format!("{path} must be {expected} ({hint})"),
        },
    );
    None
}

pub(super) fn dataplane(ctx: &mut Ctx, raw: Option<&RawDataplane>) -> Option<Dataplane> {
    let at = FieldPath::root().key("dataplane");
    let Some(raw) = raw else {
        return ctx.missing(
            at,
            "add a [dataplane] table with interfaces = [\"eth0\"] (the interfaces to forward on), \
             or mode = \"none\" for a proxy-only node (listeners, no packet forwarder)",
        );
    };
    let mode = match raw.mode.unwrap_or(DataplaneModeName::Xdp) {
        DataplaneModeName::Xdp => Some(DataplaneMode::Xdp),
        DataplaneModeName::None => Some(DataplaneMode::None),
        DataplaneModeName::Afxdp => Some(DataplaneMode::Afxdp),
    };
    let interfaces = if mode == Some(DataplaneMode::None) {
        match raw.interfaces.as_deref() {
            None | Some([]) => Some(Vec::new()),
            Some(_) => {
                ctx.error(
                    at.key("interfaces"),
                    Error::NotApplicable {
                        reason: "dataplane.mode = \"none\" attaches no packet forwarder: remove \
                                 interfaces, or set mode = \"xdp\""
                            .into(),
                    },
                );
                None
            }
        }
    } else {
        interfaces(ctx, &at, raw.interfaces.as_deref())
    };
    let afxdp = afxdp(ctx, &at, raw.afxdp.as_ref());
    let pin_path = ctx.absolute_path(
        at.key("pin_path"),
        raw.pin_path.as_deref().unwrap_or(d::PIN_PATH),
    );
    let conntrack_entries = match raw.conntrack_entries {
        None => Some(d::CONNTRACK_ENTRIES),
        Some(n) => ctx.int(
            at.key("conntrack_entries"),
            n,
            d::MIN_CONNTRACK_ENTRIES.into(),
            d::MAX_CONNTRACK_ENTRIES.into(),
        ),
    };
    let slots_per_generation = match raw.slots_per_generation {
        None => Some(d::SLOTS_PER_GENERATION),
        Some(n) => ctx.int(
            at.key("slots_per_generation"),
            n,
            d::MIN_TABLE_SIZE.into(),
            d::MAX_SLOTS_PER_GENERATION.into(),
        ),
    };
    let mut timeout = |key: &str, raw: Option<&Scalar>, default| match raw {
        None => Some(default),
        Some(v) => ctx.duration_in(at.key(key), v, d::MIN_CT_TIMEOUT, d::MAX_CT_TIMEOUT),
    };
    let tcp_timeout = timeout("tcp_timeout", raw.tcp_timeout.as_ref(), d::TCP_TIMEOUT);
    let udp_timeout = timeout("udp_timeout", raw.udp_timeout.as_ref(), d::UDP_TIMEOUT);
    let flood_new_per_sec = match raw.flood_new_per_sec {
        None => Some(0),
        Some(n) => ctx.int(at.key("flood_new_per_sec"), n, 0, u32::MAX.into()),
    };
    let next_hop_cache = match raw.next_hop_cache.as_ref() {
        None => Some(Some(d::NEXT_HOP_CACHE)),
        Some(v) => ctx
            .duration_in(
                at.key("next_hop_cache"),
                v,
                Duration::ZERO,
                d::MAX_NEXT_HOP_CACHE,
            )
            .map(|t| (!t.is_zero()).then_some(t)),
    };
    let stale_after = match raw.stale_after.as_ref() {
        None => Some(None),
        Some(v) => stale_after(ctx, at.key("stale_after"), v, mode),
    };
    Some(Dataplane {
        mode: mode?,
        interfaces: interfaces?,
        xdp_mode: raw.xdp_mode.unwrap_or_default(),
        pin_path: pin_path?,
        conntrack: raw.conntrack.unwrap_or_default(),
        conntrack_entries: conntrack_entries?,
        slots_per_generation: slots_per_generation?,
        tcp_timeout: tcp_timeout?,
        udp_timeout: udp_timeout?,
        flood_new_per_sec: flood_new_per_sec?,
        next_hop_cache: next_hop_cache?,
        icmp_echo: raw.icmp_echo.unwrap_or(true),
        on_exit: raw.on_exit.unwrap_or_default(),
        stale_after: stale_after?,
        afxdp: afxdp?,
    })
}

/// `dataplane.stale_after`: "0s" is off (`None`); otherwise at least
/// [`d::MIN_STALE_AFTER`], and only where the XDP forwarder runs.
fn stale_after(
    ctx: &mut Ctx,
    at: FieldPath,
    v: &Scalar,
    mode: Option<DataplaneMode>,
) -> Option<Option<Duration>> {
    let t = ctx.duration_in(at.clone(), v, Duration::ZERO, d::MAX_STALE_AFTER)?;
    if t.is_zero() {
        return Some(None);
    }
    if t < d::MIN_STALE_AFTER {
        ctx.error(
            at,
            Error::OutOfRange {
                value: crate::duration::format_duration(t),
                min: crate::duration::format_duration(d::MIN_STALE_AFTER),
                max: crate::duration::format_duration(d::MAX_STALE_AFTER),
                hint: "; the controller refreshes the heartbeat once a second, and a loaded \
                       node would pass VIP traffic for nothing (\"0s\" turns the check off)"
                    .into(),
            },
        );
        return None;
    }
    if mode != Some(DataplaneMode::Xdp) {
        ctx.error(
            at,
            Error::Unsupported {
                what: "the heartbeat check outside the XDP forwarder".into(),
                hint: "; the AF_XDP plane runs inside stator run itself, and mode = \"none\" \
                       forwards nothing: remove stale_after, or set mode = \"xdp\""
                    .into(),
            },
        );
        return None;
    }
    Some(Some(t))
}

/// `[dataplane.afxdp]`: every key optional, checked against what the AF_XDP plane accepts.
fn afxdp(ctx: &mut Ctx, at: &FieldPath, raw: Option<&RawAfxdp>) -> Option<Afxdp> {
    let at = at.key("afxdp");
    let raw = raw.cloned().unwrap_or_default();
    let mut int = |key: &str, v: Option<i64>, default: u32, min: u32, max: u32| match v {
        None => Some(default),
        Some(n) => ctx.int::<u32>(at.key(key), n, min.into(), max.into()),
    };
    let packet_threads = int(
        "packet_threads",
        raw.packet_threads,
        d::AFXDP_PACKET_THREADS,
        1,
        64,
    );
    let frames = int("frames", raw.frames, d::AFXDP_FRAMES, 64, 1 << 20);
    let frame_size = int(
        "frame_size",
        raw.frame_size,
        d::AFXDP_FRAME_SIZE,
        2048,
        4096,
    );
    let ring_size = int("ring_size", raw.ring_size, d::AFXDP_RING_SIZE, 64, 1 << 16);
    let batch = int("batch", raw.batch, d::AFXDP_BATCH, 1, 1024);
    let queue_depth = int(
        "queue_depth",
        raw.queue_depth,
        d::AFXDP_QUEUE_DEPTH,
        2,
        1 << 16,
    );
    let mut queues = match raw.queues {
        None => Some(None),
        Some(n) => int("queues", Some(n), 1, 1, stator_abi::STATOR_MAX_XSK_QUEUES).map(Some),
    };
    let threading = raw.threading.unwrap_or_default();
    // run to completion: one thread per RX queue of every interface
    if let (AfxdpThreading::RunToCompletion, Some(Some(q)), Some(n)) =
        (threading, queues, packet_threads)
        && q != n
    {
        ctx.error(
            at.key("queues"),
            Error::Invalid {
                value: q.to_string(),
                expected: format!(
                    "packet_threads ({n}) with threading = \"run_to_completion\": one thread \
                     per RX queue"
                ),
            },
        );
        queues = None;
    }
    let frame_size = frame_size.and_then(|f| {
        if f == 2048 || f == 4096 {
            Some(f)
        } else {
            ctx.error(
                at.key("frame_size"),
                Error::Invalid {
                    value: f.to_string(),
                    expected: "2048 or 4096 (an AF_XDP frame is a power of two, at most a page)"
                        .into(),
                },
            );
            None
        }
    });
    let ring_size = ring_size.and_then(|r| {
        if r.is_power_of_two() {
            Some(r)
        } else {
            ctx.error(
                at.key("ring_size"),
                Error::Invalid {
                    value: r.to_string(),
                    expected: format!(
                        "a power of two (AF_XDP rings are), e.g. {}",
                        r.next_power_of_two()
                    ),
                },
            );
            None
        }
    });
    let mut cpus = Some(Vec::new());
    if let Some(list) = &raw.cpus {
        let mut out = Vec::with_capacity(list.len());
        for (i, c) in list.iter().enumerate() {
            match ctx.int::<u32>(at.key("cpus").index(i), *c, 0, 4095) {
                Some(c) => out.push(c),
                None => cpus = None,
            }
        }
        // steered: the I/O thread and the packet threads; run to completion: the threads
        let (extra, whom) = match threading {
            AfxdpThreading::Steered => (1, "one for the I/O thread and one per packet thread"),
            AfxdpThreading::RunToCompletion => (0, "one per run-to-completion thread"),
        };
        if let (Some(n), false) = (packet_threads, list.is_empty())
            && list.len() != n as usize + extra
        {
            ctx.error(
                at.key("cpus"),
                Error::Invalid {
                    value: format!("{} CPUs", list.len()),
                    expected: format!(
                        "{whom}: {} (or [] to pin automatically)",
                        n as usize + extra
                    ),
                },
            );
            cpus = None;
        }
        if cpus.is_some() {
            cpus = Some(out);
        }
    }
    let flush_timeout = match raw.flush_timeout.as_ref() {
        None => Some(d::AFXDP_FLUSH_TIMEOUT),
        Some(v) => ctx.duration_in(
            at.key("flush_timeout"),
            v,
            Duration::from_micros(1),
            d::MAX_AFXDP_FLUSH_TIMEOUT,
        ),
    };
    let busy_poll = match raw.busy_poll.as_ref() {
        None => Some(d::AFXDP_BUSY_POLL),
        Some(v) => ctx.duration_in(
            at.key("busy_poll"),
            v,
            Duration::ZERO,
            d::MAX_AFXDP_BUSY_POLL,
        ),
    };
    Some(Afxdp {
        threading,
        packet_threads: packet_threads?,
        cpus: cpus?,
        pin: raw.pin.unwrap_or(true),
        frames: frames?,
        frame_size: frame_size?,
        ring_size: ring_size?,
        batch: batch?,
        flush_timeout: flush_timeout?,
        queue_depth: queue_depth?,
        queues: queues?,
        bind_mode: raw.bind_mode.unwrap_or_default(),
        busy_poll: busy_poll?,
    })
}

fn interfaces(ctx: &mut Ctx, at: &FieldPath, raw: Option<&[String]>) -> Option<Vec<String>> {
    let at = at.key("interfaces");
    let Some(raw) = raw else {
        return ctx.missing(at, "list the interfaces to forward on, e.g. [\"eth0\"]");
    };
    if raw.is_empty() {
        ctx.error(
            at,
            Error::Empty {
                hint: "; list the interfaces to forward on, e.g. [\"eth0\"]".into(),
            },
        );
        return None;
    }
    let mut ok = true;
    if raw.len() > STATOR_MAX_TX_PORTS as usize {
        ok = false;
        ctx.error(
            at.clone(),
            Error::Limit {
                what: "interfaces".into(),
                count: raw.len() as u64,
                limit_name: "STATOR_MAX_TX_PORTS",
                limit: STATOR_MAX_TX_PORTS.into(),
                hint: String::new(),
            },
        );
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, name) in raw.iter().enumerate() {
        if !is_interface_name(name) {
            ok = false;
            ctx.error(
                at.index(i),
                Error::Invalid {
                    value: format!("{name:?}"),
                    expected: "a Linux interface name (1-15 bytes, no '/', ':' or whitespace, \
                               not \".\" or \"..\")"
                        .into(),
                },
            );
        } else if let Some(first) = seen.insert(name, i) {
            ok = false;
            seen.insert(name, first);
            ctx.error(
                at.index(i),
                Error::Duplicate {
                    what: "interface",
                    value: format!("{name:?}"),
                    first: at.index(first),
                },
            );
        }
    }
    ok.then(|| raw.to_vec())
}

/// Linux's `dev_valid_name()`: 1–15 bytes (IFNAMSIZ − 1), not `.` or `..`, no `/`, `:` or
/// whitespace.
pub(super) fn is_interface_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c == '\0' || c.is_whitespace())
}

pub(super) fn encap(ctx: &mut Ctx, raw: &RawEncap) -> Option<EncapDefaults> {
    let at = FieldPath::root().key("encap");
    let gue_port = match raw.gue_port {
        None => Some(d::GUE_PORT),
        Some(p) => ctx.int(at.key("gue_port"), p, 1, 65535),
    };
    let outer_ttl = match raw.outer_ttl {
        None => Some(d::OUTER_TTL),
        Some(t) => ctx.int(at.key("outer_ttl"), t, 1, 255),
    };
    let second_chance = match raw.second_chance.as_ref() {
        None => Some(None),
        Some(v) => ctx
            .duration_in(
                at.key("second_chance"),
                v,
                Duration::ZERO,
                d::MAX_CT_TIMEOUT,
            )
            .map(Some),
    };
    Some(EncapDefaults {
        default: encap_of(raw.default.unwrap_or(EncapName::Gre)),
        gue_port: gue_port?,
        outer_ttl: outer_ttl?,
        second_chance: second_chance?,
    })
}

/// The ABI encapsulation of a configured name.
pub(super) fn encap_of(name: EncapName) -> Encap {
    match name {
        EncapName::Gre => Encap::Gre,
        EncapName::Ipip => Encap::Ipip,
        EncapName::Gue => Encap::Gue,
    }
}

pub(super) fn api(ctx: &mut Ctx, raw: &RawApi) -> Option<Api> {
    let at = FieldPath::root().key("api");
    let socket = match raw.socket.as_deref() {
        None => Some(PathBuf::from(d::API_SOCKET)),
        Some(text) => ctx.absolute_path(at.key("socket"), text),
    };
    let socket_group = match raw.socket_group.as_deref() {
        None => Some(SocketGroup::Name(d::API_SOCKET_GROUP.to_owned())),
        Some(text) => socket_group(ctx, at.key("socket_group"), text),
    };
    let listen = match raw.listen.as_deref() {
        None => Some(None),
        Some(text) => match text.parse::<SocketAddr>() {
            Ok(addr) if addr.port() != 0 => Some(Some(addr)),
            Ok(_) => {
                ctx.error(
                    at.key("listen"),
                    Error::Invalid {
                        value: format!("{text:?}"),
                        expected: "a listen address with a non-zero port".into(),
                    },
                );
                None
            }
            Err(_) => {
                ctx.error(
                    at.key("listen"),
                    Error::Invalid {
                        value: format!("{text:?}"),
                        expected: "an address:port such as \"127.0.0.1:9180\" or \"[::1]:9180\""
                            .into(),
                    },
                );
                None
            }
        },
    };
    let token = bearer(
        ctx,
        &at,
        (&raw.token, "token"),
        (&raw.token_file, "token_file"),
    );
    let read_token = bearer(
        ctx,
        &at,
        (&raw.read_token, "read_token"),
        (&raw.read_token_file, "read_token_file"),
    );
    if let (Some(Some(_)), Some(None), Some(None)) = (&listen, &token, &read_token) {
        // Loopback included: any local user can reach a loopback port.
        ctx.error(
            at.key("listen"),
            Error::Unsafe {
                reason: "a TCP endpoint needs a token, loopback included (every local user can \
                         reach a loopback port): set api.token_file (admin) and/or \
                         api.read_token_file (read-only), or remove api.listen and use the Unix \
                         socket (api.socket)"
                    .into(),
            },
        );
    }
    let drain_timeout = match &raw.drain_timeout {
        None => Some(d::DRAIN_TIMEOUT),
        Some(v) => ctx.duration_in(
            at.key("drain_timeout"),
            v,
            d::MIN_DRAIN_TIMEOUT,
            d::MAX_DRAIN_TIMEOUT,
        ),
    };
    let max_connections = match raw.max_connections {
        None => Some(d::API_MAX_CONNECTIONS),
        Some(n) => ctx.int(
            at.key("max_connections"),
            n,
            1,
            d::MAX_API_MAX_CONNECTIONS.into(),
        ),
    };
    let header_read_timeout = match &raw.header_read_timeout {
        None => Some(d::API_HEADER_READ_TIMEOUT),
        Some(v) => ctx.duration_in(
            at.key("header_read_timeout"),
            v,
            d::MIN_API_HEADER_READ_TIMEOUT,
            d::MAX_API_HEADER_READ_TIMEOUT,
        ),
    };
    Some(Api {
        socket: socket?,
        socket_group: socket_group?,
        listen: listen?,
        token: token?,
        read_token: read_token?,
        drain_timeout: drain_timeout?,
        max_connections: max_connections?,
        header_read_timeout: header_read_timeout?,
    })
}

/// A bearer token: inline or from a file, not both, not empty.
fn bearer(
    ctx: &mut Ctx,
    at: &FieldPath,
    (inline, inline_key): (&Option<Secret>, &'static str),
    (file, file_key): (&Option<String>, &'static str),
) -> Option<Option<Token>> {
    match (inline, file) {
        (Some(_), Some(_)) => {
            ctx.error(
                at.key(file_key),
                Error::Exclusive {
                    first: if inline_key == "token" {
                        "api.token"
                    } else {
                        "api.read_token"
                    },
                    second: if file_key == "token_file" {
                        "api.token_file"
                    } else {
                        "api.read_token_file"
                    },
                },
            );
            None
        }
        (Some(token), None) if token.expose().trim().is_empty() => {
            ctx.error(
                at.key(inline_key),
                Error::Empty {
                    hint: format!("; remove api.{inline_key} to run without one"),
                },
            );
            None
        }
        (Some(token), None) => Some(Some(Token::Inline(token.clone()))),
        (None, Some(file)) => ctx
            .absolute_path(at.key(file_key), file)
            .map(|p| Some(Token::File(p))),
        (None, None) => Some(None),
    }
}

/// `api.socket_group`: a group name (as `groupadd` allows) or a numeric id.
fn socket_group(ctx: &mut Ctx, path: FieldPath, text: &str) -> Option<SocketGroup> {
    if let Ok(id) = text.parse::<u32>() {
        return Some(SocketGroup::Id(id));
    }
    let ok = (1..=32).contains(&text.len())
        && text.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'));
    if ok {
        Some(SocketGroup::Name(text.to_owned()))
    } else {
        ctx.error(
            path,
            Error::Invalid {
                value: format!("{text:?}"),
                expected: "a group name (lower-case letters, digits, `_`, `-`) or a numeric \
                           group id"
                    .into(),
            },
        );
        None
    }
}

pub(super) fn upgrade(ctx: &mut Ctx, raw: &RawUpgrade, api: Option<&Api>) -> Option<Upgrade> {
    let at = FieldPath::root().key("upgrade");
    let socket = match raw.socket.as_deref() {
        None => Some(api.map_or_else(
            || PathBuf::from(d::UPGRADE_SOCKET),
            |a| crate::upgrade_socket_beside(&a.socket),
        )),
        Some(text) => ctx.absolute_path(at.key("socket"), text),
    };
    let drain = match &raw.drain {
        None => Some(d::UPGRADE_DRAIN),
        Some(v) => ctx.duration_in(at.key("drain"), v, Duration::ZERO, d::MAX_UPGRADE_DRAIN),
    };
    let start_timeout = match &raw.start_timeout {
        None => Some(d::UPGRADE_START_TIMEOUT),
        Some(v) => ctx.duration_in(
            at.key("start_timeout"),
            v,
            d::MIN_UPGRADE_START_TIMEOUT,
            d::MAX_UPGRADE_START_TIMEOUT,
        ),
    };
    Some(Upgrade {
        socket: socket?,
        drain: drain?,
        start_timeout: start_timeout?,
    })
}

pub(super) fn log(raw: &RawLog) -> Log {
    Log {
        format: raw.format.unwrap_or_default(),
        level: raw.level.unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names() {
        for good in [
            "eth0",
            "enp1s0f0",
            "veth-lb1",
            "a",
            "123456789012345",
            "bond0.100",
        ] {
            assert!(is_interface_name(good), "{good}");
        }
        for bad in ["", ".", "..", "eth/0", "eth:0", "eth 0", "1234567890123456"] {
            assert!(!is_interface_name(bad), "{bad}");
        }
    }
}
