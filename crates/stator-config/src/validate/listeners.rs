//! `[[listener]]` and `[listener.timeouts]`: the socket proxy
//! tier.
//!
//! A listener serves from one pool; its upstreams are the pool's flattened backends, each at
//! its own `port` or, when it has none, at the listener's `backend_port`. Addresses must be
//! unique, and may not be the admin API's or a VIP's (XDP would forward a VIP's packets before
//! they reach the socket).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::listener_options::{http, udp};
use super::pools::Pools;
use super::{Ctx, suggest_pool};
use crate::defaults as d;
use crate::error::{Error, FieldPath};
use crate::flatten::{flatten, sorted_members};
use crate::raw::Scalar;
use crate::raw::{RawListener, RawListenerTimeouts};
use crate::types::{
    Api, Listener, ListenerProtocol, ListenerTimeouts, Persistence, PoolId, ReceiveSteering,
    Steering, Upstream, Vip,
};

pub(super) fn listeners(
    ctx: &mut Ctx,
    raw: &[RawListener],
    pools: &Pools,
    api: Option<&Api>,
    vips: Option<&[Vip]>,
    receive: Option<Option<&ReceiveSteering>>,
) -> Option<Vec<Listener>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut ok = true;
    // a TCP and a UDP listener may share an address and port
    let mut addresses: HashMap<(SocketAddr, bool), usize> = HashMap::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    for (i, l) in raw.iter().enumerate() {
        let at = FieldPath::root().key("listener").index(i);
        let errors_before = ctx.errors.len();
        let address = address(ctx, &at, l, api, vips);
        let is_udp = l.protocol == Some(ListenerProtocol::Udp);
        if let Some(a) = address {
            if let Some(&first) = addresses.get(&(a, is_udp)) {
                ctx.error(
                    at.key("address"),
                    Error::Duplicate {
                        what: "listener address",
                        value: a.to_string(),
                        first: FieldPath::root()
                            .key("listener")
                            .index(first)
                            .key("address"),
                    },
                );
            } else {
                addresses.insert((a, is_udp), i);
            }
        }
        let protocol = l
            .protocol
            .or_else(|| ctx.missing(at.key("protocol"), "\"tcp\", \"http\" or \"udp\""));
        let name = match (&l.name, protocol, address) {
            (Some(n), _, _) => ctx.name(at.key("name"), n),
            (None, Some(p), Some(a)) => Some(Listener::derived_name(p, a)),
            _ => None,
        };
        if let Some(n) = &name {
            if let Some(&first) = names.get(n) {
                ctx.error(
                    at.key("name"),
                    Error::Duplicate {
                        what: "listener name",
                        value: format!("{n:?}"),
                        first: FieldPath::root().key("listener").index(first),
                    },
                );
            } else {
                names.insert(n.clone(), i);
            }
        }
        let backend_port = match l.backend_port {
            None => Some(None),
            Some(p) => ctx.int(at.key("backend_port"), p, 1, 65535).map(Some),
        };
        let pool = pool(ctx, &at, l.pool.as_deref(), pools);
        let upstreams = match (pool, backend_port) {
            (Some(p), Some(port)) => upstreams(ctx, &at, p, port, pools),
            _ => None,
        };
        let workers = match l.workers {
            None => Some(None),
            Some(n) => ctx
                .int::<u16>(at.key("workers"), n, 1, d::MAX_WORKERS.into())
                .map(Some),
        };
        if let Some(Some(n)) = workers
            && l.steering == Some(Steering::Source)
            && n > d::MAX_SOURCE_STEERING_WORKERS
        {
            ctx.error(
                at.key("workers"),
                Error::Limit {
                    what: "workers with steering = \"source\"".into(),
                    count: n.into(),
                    limit_name: "the steering program's socket array",
                    limit: d::MAX_SOURCE_STEERING_WORKERS.into(),
                    hint: "; use fewer workers, or steering = \"kernel\"".into(),
                },
            );
        }
        if l.steering == Some(Steering::Cpu) {
            match receive {
                None => ctx.error(
                    at.key("steering"),
                    Error::NotApplicable {
                        reason: "steering = \"cpu\" needs a [receive_steering] table naming the \
                                 interfaces clients' packets arrive on (docs/steering.md §8)"
                            .into(),
                    },
                ),
                Some(Some(ReceiveSteering {
                    cpus: Some(cpus), ..
                })) if workers.flatten().is_some_and(|n| usize::from(n) != cpus.len()) => ctx
                    .error(
                        at.key("workers"),
                        Error::NotApplicable {
                            reason: format!(
                                "steering = \"cpu\" runs one worker per CPU of \
                                 receive_steering.cpus ({} CPUs): leave workers out or set it to {}",
                                cpus.len(),
                                cpus.len()
                            ),
                        },
                    ),
                _ => {}
            }
        }
        let persistence = persistence(ctx, &at, l);
        let retries = match l.retries {
            None => Some(d::RETRIES),
            Some(n) => ctx.int(at.key("retries"), n, 0, d::MAX_RETRIES.into()),
        };
        let max_connections = match l.max_connections {
            None => Some(d::MAX_CONNECTIONS),
            Some(n) => ctx.int(at.key("max_connections"), n, 1, 1 << 24),
        };
        let max_connections_per_source = match l.max_connections_per_source {
            None => Some(d::MAX_CONNECTIONS_PER_SOURCE),
            Some(_) if protocol == Some(ListenerProtocol::Udp) => {
                ctx.error(
                    at.key("max_connections_per_source"),
                    Error::NotApplicable {
                        reason: "a UDP listener has sessions, not connections: \
                                 udp.max_sessions_per_source bounds them per source"
                            .into(),
                    },
                );
                None
            }
            Some(n) => ctx.int(at.key("max_connections_per_source"), n, 0, 1 << 24),
        };
        let source_prefix_v4 = match l.source_prefix_v4 {
            None => Some(d::SOURCE_PREFIX_V4),
            Some(n) => ctx.int(at.key("source_prefix_v4"), n, 1, 32),
        };
        let source_prefix_v6 = match l.source_prefix_v6 {
            None => Some(d::SOURCE_PREFIX_V6),
            Some(n) => ctx.int(at.key("source_prefix_v6"), n, 1, 128),
        };
        let passive = passive(ctx, &at, l, protocol);
        let timeouts = timeouts(ctx, &at.key("timeouts"), &l.timeouts, protocol);
        let http = http(ctx, &at.key("http"), l.http.as_ref(), protocol);
        let udp = udp(ctx, &at.key("udp"), l.udp.as_ref(), protocol);
        if ctx.errors.len() != errors_before {
            ok = false;
            continue;
        }
        let (
            Some(name),
            Some(address),
            Some(protocol),
            Some(pool),
            Some(backend_port),
            Some(upstreams),
            Some(workers),
            Some(persistence),
            Some(retries),
            Some(max_connections),
            Some(max_connections_per_source),
            Some(source_prefix_v4),
            Some(source_prefix_v6),
            Some((max_fails, fail_timeout)),
            Some(timeouts),
            Some(http),
            Some(udp),
        ) = (
            name,
            address,
            protocol,
            pool,
            backend_port,
            upstreams,
            workers,
            persistence,
            retries,
            max_connections,
            max_connections_per_source,
            source_prefix_v4,
            source_prefix_v6,
            passive,
            timeouts,
            http,
            udp,
        )
        else {
            ok = false;
            continue;
        };
        out.push(Listener {
            name,
            address,
            protocol,
            pool,
            backend_port,
            upstreams,
            scheduler: l.scheduler.unwrap_or_default(),
            workers,
            pin_workers: l.pin_workers.unwrap_or(false),
            steering: l.steering.unwrap_or_default(),
            persistence,
            retries,
            max_connections,
            max_connections_per_source,
            source_prefix_v4,
            source_prefix_v6,
            max_fails,
            fail_timeout,
            timeouts,
            http,
            udp,
        });
    }
    if ok {
        loops(ctx, &out, pools);
    }
    ok.then_some(out)
}

/// `max_fails` and `fail_timeout`: passive health (TCP and HTTP listeners).
fn passive(
    ctx: &mut Ctx,
    at: &FieldPath,
    l: &RawListener,
    protocol: Option<ListenerProtocol>,
) -> Option<(u32, Duration)> {
    if protocol == Some(ListenerProtocol::Udp) {
        let mut ok = true;
        for (key, set) in [
            ("max_fails", l.max_fails.is_some()),
            ("fail_timeout", l.fail_timeout.is_some()),
        ] {
            if set {
                ctx.error(
                    at.key(key),
                    Error::NotApplicable {
                        reason: format!(
                            "{key} applies to TCP and HTTP listeners (a UDP listener sees no \
                             connection fail)"
                        ),
                    },
                );
                ok = false;
            }
        }
        if !ok {
            return None;
        }
    }
    let max_fails = match l.max_fails {
        None => Some(d::MAX_FAILS),
        Some(n) => ctx.int(at.key("max_fails"), n, 0, d::MAX_MAX_FAILS.into()),
    };
    let fail_timeout = match &l.fail_timeout {
        None => Some(d::FAIL_TIMEOUT),
        Some(v) => ctx.duration_in(
            at.key("fail_timeout"),
            v,
            d::MIN_FAIL_TIMEOUT,
            d::MAX_PROXY_TIMEOUT,
        ),
    };
    Some((max_fails?, fail_timeout?))
}

/// Refuses listeners whose upstreams lead back to a listener of the node, themselves or
/// through others (`a → b → a`): each request or datagram would come back to be proxied again
/// until the node runs out of descriptors. An upstream reaches a listener when its port is the
/// listener's and its address is the listener's, or any local address the listener's
/// wildcard (`0.0.0.0`, `::`) covers that the configuration knows of: loopback, and the
/// listeners' own addresses.
fn loops(ctx: &mut Ctx, listeners: &[Listener], pools: &Pools) {
    let local: Vec<std::net::IpAddr> = listeners
        .iter()
        .map(|l| l.address.ip())
        .filter(|ip| !ip.is_unspecified())
        .collect();
    let reaches = |target: &Listener, addr: SocketAddr| -> bool {
        if addr.port() != target.address.port() {
            return false;
        }
        let ip = target.address.ip();
        if ip == addr.ip() {
            return true;
        }
        if !ip.is_unspecified() {
            return false;
        }
        // `[::]` also accepts IPv4 (dual stack) unless the socket says otherwise.
        let family_ok = ip.is_ipv6() || addr.is_ipv4();
        family_ok
            && (addr.ip().is_loopback() || addr.ip().is_unspecified() || local.contains(&addr.ip()))
    };
    // next[i]: the listeners that listener i's upstreams reach (same transport).
    let next: Vec<Vec<usize>> = listeners
        .iter()
        .map(|l| {
            let udp = l.protocol == ListenerProtocol::Udp;
            (0..listeners.len())
                .filter(|&j| {
                    let t = &listeners[j];
                    (t.protocol == ListenerProtocol::Udp) == udp
                        && l.upstreams.iter().any(|u| {
                            let b = &pools.backends[u.backend.0];
                            reaches(t, SocketAddr::new(b.address, u.port))
                        })
                })
                .collect()
        })
        .collect();
    for (i, l) in listeners.iter().enumerate() {
        // A path from i back to i, breadth first (shortest loop reported).
        let mut from = vec![None; listeners.len()];
        let mut queue = std::collections::VecDeque::from([i]);
        let mut found = false;
        while let Some(k) = queue.pop_front() {
            for &j in &next[k] {
                if j == i {
                    from[i] = Some(k);
                    found = true;
                    break;
                }
                if from[j].is_none() {
                    from[j] = Some(k);
                    queue.push_back(j);
                }
            }
            if found {
                break;
            }
        }
        if !found {
            continue;
        }
        let mut path = vec![l.name.clone()];
        let mut k = from[i].unwrap_or(i);
        while k != i {
            path.push(listeners[k].name.clone());
            k = from[k].unwrap_or(i);
        }
        path.push(l.name.clone());
        let cycle = if path.len() == 2 {
            format!("listener {:?} proxies to its own address", l.name)
        } else {
            let mut names = path.clone();
            names[1..path.len() - 1].reverse();
            format!("a loop of listeners: {}", names.join(" → "))
        };
        ctx.error(
            FieldPath::root().key("listener").index(i).key("pool"),
            Error::Unsafe {
                reason: format!(
                    "{cycle} through pool {:?}: every request would be proxied back to the \
                     node until it runs out of descriptors",
                    pools.pools[l.pool.0].name
                ),
            },
        );
    }
}

fn address(
    ctx: &mut Ctx,
    at: &FieldPath,
    raw: &RawListener,
    api: Option<&Api>,
    vips: Option<&[Vip]>,
) -> Option<SocketAddr> {
    let path = at.key("address");
    let Some(text) = raw.address.as_deref() else {
        return ctx.missing(path, "the address to listen on, e.g. \"0.0.0.0:8080\"");
    };
    let addr = match text.parse::<SocketAddr>() {
        Ok(a) if a.port() != 0 => a,
        Ok(_) => {
            ctx.error(
                path,
                Error::Invalid {
                    value: format!("{text:?}"),
                    expected: "a listen address with a non-zero port".into(),
                },
            );
            return None;
        }
        Err(_) => {
            ctx.error(
                path,
                Error::Invalid {
                    value: format!("{text:?}"),
                    expected: "an address:port such as \"0.0.0.0:8080\" or \"[::]:8080\"".into(),
                },
            );
            return None;
        }
    };
    if addr.ip().is_multicast() {
        ctx.error(
            path,
            Error::UnusableAddress {
                address: addr.ip().to_string(),
                reason: "a multicast address".into(),
            },
        );
        return None;
    }
    if api.is_some_and(|a| a.listen == Some(addr)) {
        ctx.error(
            path,
            Error::UnusableAddress {
                address: addr.to_string(),
                reason: "api.listen, the admin API's address".into(),
            },
        );
        return None;
    }
    let proto = if raw.protocol == Some(ListenerProtocol::Udp) {
        crate::types::Proto::Udp
    } else {
        crate::types::Proto::Tcp
    };
    let vip = vips.into_iter().flatten().position(|v| {
        v.key.addr == addr.ip()
            && v.key.proto == proto
            && (v.key.port == 0 || v.key.port == addr.port())
    });
    if let Some(v) = vip {
        ctx.error(
            path,
            Error::UnusableAddress {
                address: addr.to_string(),
                reason: format!(
                    "matched by vip[{v}]: the XDP forwarder would send its packets to the VIP's \
                     backends before they reach the listener"
                ),
            },
        );
        return None;
    }
    Some(addr)
}

fn pool(ctx: &mut Ctx, at: &FieldPath, raw: Option<&str>, pools: &Pools) -> Option<PoolId> {
    let Some(name) = raw else {
        return ctx.missing(at.key("pool"), "the pool to proxy to, e.g. pool = \"web\"");
    };
    match pools.by_name.get(name) {
        Some(&id) if pools.broken[id.0] => None, // reported in the pool itself
        Some(&id) => Some(id),
        None => {
            let hint = suggest_pool(name, pools.names());
            ctx.error(
                at.key("pool"),
                Error::UnknownPool {
                    name: name.to_owned(),
                    hint,
                },
            );
            None
        }
    }
}

/// The pool's backends with the port the proxy connects to.
fn upstreams(
    ctx: &mut Ctx,
    at: &FieldPath,
    pool: PoolId,
    backend_port: Option<u16>,
    pools: &Pools,
) -> Option<Vec<Upstream>> {
    let flat = flatten(&pools.pools, &[pool]);
    let mut ok = true;
    for c in &flat.conflicts {
        ok = false;
        ctx.error(
            at.key("pool"),
            Error::WeightConflict {
                backend: pools.backends[c.backend.0].name.clone(),
                first_weight: c.first.1,
                first_pool: pools.pools[c.first.0.0].name.clone(),
                second_weight: c.second.1,
                second_pool: pools.pools[c.second.0.0].name.clone(),
            },
        );
    }
    let mut out = Vec::new();
    for m in sorted_members(&pools.backends, &flat) {
        let backend = &pools.backends[m.backend.0];
        match backend.port.or(backend_port) {
            Some(port) => out.push(Upstream {
                backend: m.backend,
                port,
                weight: m.weight,
            }),
            None => {
                ok = false;
                let path = pools
                    .backend_paths
                    .get(m.backend.0)
                    .map_or_else(String::new, |p| format!(" ({p})"));
                ctx.missing::<()>(
                    at.key("backend_port"),
                    &format!(
                        "backend {}{path} has no port to proxy to: set its port, or \
                         backend_port for every backend of the pool without one",
                        backend.name
                    ),
                );
            }
        }
    }
    if ok && out.iter().all(|u| u.weight == 0) {
        ok = false;
        ctx.error(
            at.key("pool"),
            Error::ZeroTotalWeight {
                backends: match out.len() {
                    1 => "1 backend".into(),
                    n => format!("{n} backends"),
                },
            },
        );
    }
    ok.then_some(out)
}

fn persistence(ctx: &mut Ctx, at: &FieldPath, raw: &RawListener) -> Option<Option<Persistence>> {
    let timeout = match &raw.persistence {
        None => Some(None),
        Some(v) => ctx
            .duration_in(
                at.key("persistence"),
                v,
                Duration::ZERO,
                d::MAX_PROXY_TIMEOUT,
            )
            .map(|t| (!t.is_zero()).then_some(t)),
    };
    let entries = match raw.persistence_entries {
        None => Some(d::PERSISTENCE_ENTRIES),
        Some(n) => ctx.int(
            at.key("persistence_entries"),
            n,
            1,
            d::MAX_PERSISTENCE_ENTRIES.into(),
        ),
    };
    let (timeout, max_entries) = (timeout?, entries?);
    Some(timeout.map(|timeout| Persistence {
        timeout,
        max_entries,
    }))
}

/// Which listeners a timeout applies to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Applies {
    /// Every protocol.
    All,
    /// TCP and HTTP (a connection, no request head).
    Stream,
    /// HTTP only; the reason it is not TCP's.
    Http(&'static str),
}

fn timeouts(
    ctx: &mut Ctx,
    at: &FieldPath,
    raw: &RawListenerTimeouts,
    protocol: Option<ListenerProtocol>,
) -> Option<ListenerTimeouts> {
    let mut one = |key: &str, value: Option<&Scalar>, default, applies: Applies| {
        let Some(v) = value else {
            return Some(default);
        };
        let reason = match (applies, protocol) {
            (Applies::Http(why), Some(ListenerProtocol::Tcp)) => {
                format!("timeouts.{key} applies to protocol = \"http\" only ({why})")
            }
            (Applies::Stream | Applies::Http(_), Some(ListenerProtocol::Udp)) => format!(
                "timeouts.{key} does not apply to protocol = \"udp\" (a UDP session has no \
                 connection and no request head; it ends after timeouts.idle)"
            ),
            _ => {
                return ctx.duration_in(at.key(key), v, d::MIN_PROXY_TIMEOUT, d::MAX_PROXY_TIMEOUT);
            }
        };
        ctx.error(at.key(key), Error::NotApplicable { reason });
        None
    };
    const NO_HEAD: Applies = Applies::Http("a TCP listener reads no request head");
    const NO_BODY: Applies = Applies::Http(
        "a TCP listener has no body to wait for: timeouts.idle bounds a silence both ways",
    );
    let connect = one(
        "connect",
        raw.connect.as_ref(),
        d::CONNECT_TIMEOUT,
        Applies::Stream,
    );
    let header_read = one(
        "header_read",
        raw.header_read.as_ref(),
        d::HEADER_READ_TIMEOUT,
        NO_HEAD,
    );
    let idle = one("idle", raw.idle.as_ref(), d::IDLE_TIMEOUT, Applies::All);
    let response = one(
        "response",
        raw.response.as_ref(),
        d::RESPONSE_TIMEOUT,
        NO_HEAD,
    );
    let client_read = one(
        "client_read",
        raw.client_read.as_ref(),
        d::CLIENT_READ_TIMEOUT,
        NO_BODY,
    );
    let client_write = one(
        "client_write",
        raw.client_write.as_ref(),
        d::CLIENT_WRITE_TIMEOUT,
        Applies::Stream,
    );
    let upstream_read = one(
        "upstream_read",
        raw.upstream_read.as_ref(),
        d::UPSTREAM_READ_TIMEOUT,
        NO_BODY,
    );
    let upstream_write = one(
        "upstream_write",
        raw.upstream_write.as_ref(),
        d::UPSTREAM_WRITE_TIMEOUT,
        Applies::Stream,
    );
    Some(ListenerTimeouts {
        connect: connect?,
        header_read: header_read?,
        idle: idle?,
        response: response?,
        client_read: client_read?,
        client_write: client_write?,
        upstream_read: upstream_read?,
        upstream_write: upstream_write?,
    })
}
