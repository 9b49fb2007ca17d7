//! `[[pool]]` and `[[pool.backend]]`: names, backends (one per address and port), health,
//! includes and include cycles.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use super::{Ctx, family_name, suggest_pool};
use crate::defaults as d;
use crate::error::{Error, FieldPath};
use crate::health::validate_health;
use crate::raw::RawPool;
use crate::types::{Backend, BackendId, Member, Node, Pool, PoolId};

/// What VIP validation needs from the pools.
#[derive(Debug, Default)]
pub(super) struct Pools {
    /// Distinct backends (complete only when no backend error was recorded).
    pub backends: Vec<Backend>,
    /// Every `[[pool]]`, in file order (possibly partial when it had errors).
    pub pools: Vec<Pool>,
    /// Pool name → id (first definition).
    pub by_name: HashMap<String, PoolId>,
    /// Pools whose content is unknown because of an error (a bad backend or include, a cycle),
    /// directly or through include: checks that depend on their content are skipped.
    pub broken: Vec<bool>,
    /// Where each backend first appears (`pool[i].backend[j]`).
    pub backend_paths: Vec<FieldPath>,
}

/// One `[[pool.backend]]` entry that parsed.
struct Entry {
    path: FieldPath,
    pool: usize,
    address: IpAddr,
    port: Option<u16>,
    weight: u32,
    id: Option<String>,
}

pub(super) fn pools(
    ctx: &mut Ctx,
    raw: &[RawPool],
    node: Option<&Node>,
    proxy_only: bool,
) -> Pools {
    let mut out = Pools {
        broken: vec![false; raw.len()],
        ..Pools::default()
    };
    names(ctx, raw, &mut out);
    let entries = entries(ctx, raw, &mut out.broken, proxy_only);
    // A proxy-only node encapsulates nothing: backends need no node address.
    let node = node.filter(|_| !proxy_only);
    let members = backends(ctx, entries, node, &mut out);
    for (i, (raw_pool, members)) in raw.iter().zip(members).enumerate() {
        let at = FieldPath::root().key("pool").index(i);
        let health = pool_health(ctx, &at, raw_pool, &members, &out.backends);
        out.broken[i] |= health.is_none();
        out.pools.push(Pool {
            name: raw_pool.name.clone().unwrap_or_default(),
            includes: Vec::new(),
            members: members.into_iter().map(|(m, _)| m).collect(),
            health: health.flatten(),
        });
    }
    let include_index = includes(ctx, raw, &mut out);
    cycles(ctx, &mut out, &include_index);
    propagate_broken(&mut out);
    empty_pools(ctx, &out);
    out
}

fn names(ctx: &mut Ctx, raw: &[RawPool], out: &mut Pools) {
    for (i, pool) in raw.iter().enumerate() {
        let at = FieldPath::root().key("pool").index(i);
        let Some(name) = &pool.name else {
            ctx.missing::<()>(at.key("name"), "name the pool, e.g. name = \"web\"");
            continue;
        };
        if ctx.name(at.key("name"), name).is_none() {
            continue;
        }
        if let Some(first) = out.by_name.get(name) {
            ctx.error(
                at.key("name"),
                Error::Duplicate {
                    what: "pool name",
                    value: format!("{name:?}"),
                    first: FieldPath::root().key("pool").index(first.0).key("name"),
                },
            );
        } else {
            out.by_name.insert(name.clone(), PoolId(i));
        }
    }
}

/// Parses every backend entry; a pool with a bad entry is marked broken. A proxy-only node
/// may proxy to loopback backends (a sidecar's `127.0.0.1:8080`): nothing is encapsulated.
fn entries(ctx: &mut Ctx, raw: &[RawPool], broken: &mut [bool], proxy_only: bool) -> Vec<Entry> {
    let mut out = Vec::new();
    for (i, pool) in raw.iter().enumerate() {
        let mut in_pool: HashMap<(IpAddr, Option<u16>), FieldPath> = HashMap::new();
        for (j, b) in pool.backend.iter().enumerate() {
            let at = FieldPath::root()
                .key("pool")
                .index(i)
                .key("backend")
                .index(j);
            let address = match b.address.as_deref() {
                Some(text)
                    if proxy_only && text.parse::<IpAddr>().is_ok_and(|a| a.is_loopback()) =>
                {
                    text.parse::<IpAddr>().ok()
                }
                Some(text) => ctx.unicast(at.key("address"), text),
                None => ctx.missing(at.key("address"), "the backend's IP address"),
            };
            let port = match b.port {
                None => Some(None),
                Some(p) => ctx
                    .range_hint(at.key("port"), p, 1, 65535, "; omit port for none")
                    .map(|p| u16::try_from(p).ok()),
            };
            let weight = match b.weight {
                None => Some(d::WEIGHT),
                Some(w) => ctx.int(at.key("weight"), w, 0, d::MAX_WEIGHT.into()),
            };
            let id = match b.id.as_deref() {
                None => Some(None),
                Some(id) => backend_id(ctx, at.key("id"), id).map(Some),
            };
            let (Some(address), Some(port), Some(weight), Some(id)) = (address, port, weight, id)
            else {
                broken[i] = true;
                continue;
            };
            if let Some(first) = in_pool.get(&(address, port)) {
                broken[i] = true;
                ctx.error(
                    at.key("address"),
                    Error::Duplicate {
                        what: "backend",
                        value: format!("{} in this pool", Backend::derived_name(address, port)),
                        first: first.clone(),
                    },
                );
                continue;
            }
            in_pool.insert((address, port), at.clone());
            out.push(Entry {
                path: at,
                pool: i,
                address,
                port,
                weight,
                id,
            });
        }
    }
    out
}

/// A backend id: 1–128 visible ASCII characters other than quotes and backslash.
fn backend_id(ctx: &mut Ctx, path: FieldPath, id: &str) -> Option<String> {
    let ok = (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\'' | b'\\'));
    if ok {
        Some(id.to_owned())
    } else {
        ctx.error(
            path,
            Error::Invalid {
                value: format!("{id:?}"),
                expected: "a backend id (1-128 visible ASCII characters, no quotes or \
                           backslash)"
                    .into(),
            },
        );
        None
    }
}

/// Groups entries into backends by (address, port), resolves ids and stable names, checks the
/// node has a source address of each backend's family. Returns each pool's members, with the
/// path of the entry that made each.
fn backends(
    ctx: &mut Ctx,
    entries: Vec<Entry>,
    node: Option<&Node>,
    out: &mut Pools,
) -> Vec<Vec<(Member, FieldPath)>> {
    let mut members = vec![Vec::new(); out.broken.len()];
    let mut by_key: HashMap<(IpAddr, Option<u16>), BackendId> = HashMap::new();
    let mut ids: Vec<Option<(String, FieldPath)>> = Vec::new();
    let mut keys: Vec<(IpAddr, Option<u16>)> = Vec::new();
    for entry in &entries {
        let key = (entry.address, entry.port);
        let id = *by_key.entry(key).or_insert_with(|| {
            out.backend_paths.push(entry.path.clone());
            keys.push(key);
            ids.push(None);
            BackendId(ids.len() - 1)
        });
        members[entry.pool].push((
            Member {
                backend: id,
                weight: entry.weight,
            },
            entry.path.clone(),
        ));
        let Some(configured) = &entry.id else {
            continue;
        };
        match &ids[id.0] {
            None => ids[id.0] = Some((configured.clone(), entry.path.clone())),
            Some((first, _)) if first == configured => {}
            Some((first, first_path)) => {
                out.broken[entry.pool] = true;
                ctx.error(
                    entry.path.key("id"),
                    Error::BackendConflict {
                        backend: Backend::derived_name(entry.address, entry.port),
                        other: first_path.key("id"),
                        detail: format!(
                            "id {first:?} there, {configured:?} here; a backend has one id"
                        ),
                    },
                );
            }
        }
    }
    let mut by_name: HashMap<String, FieldPath> = HashMap::new();
    for (i, (first_path, &(address, port))) in out.backend_paths.iter().zip(&keys).enumerate() {
        let (name, name_path) = match &ids[i] {
            Some((id, path)) => (id.clone(), path.key("id")),
            None => (
                Backend::derived_name(address, port),
                first_path.key("address"),
            ),
        };
        if let Some(other) = by_name.get(&name) {
            mark_pool_broken(&mut out.broken, first_path);
            ctx.error(
                name_path,
                Error::Duplicate {
                    what: "backend name",
                    value: format!("{name:?}"),
                    first: other.clone(),
                },
            );
        } else {
            by_name.insert(name.clone(), name_path);
        }
        if let Some(node) = node {
            let (missing, key) = match address {
                IpAddr::V4(_) => (node.address_v4.is_none(), "address_v4"),
                IpAddr::V6(_) => (node.address_v6.is_none(), "address_v6"),
            };
            if missing {
                ctx.error(
                    first_path.key("address"),
                    Error::NoNodeAddress {
                        address: address.to_string(),
                        family: family_name(address),
                        key,
                    },
                );
            }
        }
        out.backends.push(Backend {
            address,
            port,
            name,
        });
    }
    members
}

/// Marks the pool of a `pool[i]...` path broken.
fn mark_pool_broken(broken: &mut [bool], path: &FieldPath) {
    if let Some(crate::error::Segment::Index(i)) = path.segments().get(1) {
        broken[*i] = true;
    }
}

/// The pool's check of its own members; a check that needs a port must find one.
fn pool_health(
    ctx: &mut Ctx,
    at: &FieldPath,
    raw: &RawPool,
    members: &[(Member, FieldPath)],
    backends: &[Backend],
) -> Option<Option<crate::health::HealthSpec>> {
    if raw.backend.is_empty() {
        if raw.health.is_some() {
            ctx.error(
                at.key("health"),
                Error::NotApplicable {
                    reason: "this pool lists no backends of its own: [pool.health] checks only \
                             the backends a pool lists, and included pools are checked by their \
                             own [pool.health]"
                        .into(),
                },
            );
            return None;
        }
        return Some(None);
    }
    let spec = validate_health(ctx, &at.key("health"), raw.health.as_ref())?;
    if let Some(spec) = &spec
        && spec.port.is_none()
    {
        let check = if raw.health.as_ref().is_some_and(|h| h.method.is_some()) {
            format!("{} health check", spec.probe.method())
        } else {
            "health check (tcp, the default)".to_string()
        };
        let mut ok = true;
        for (member, path) in members {
            let Some(backend) = backends.get(member.backend.0) else {
                continue;
            };
            if backend.port.is_none() {
                ok = false;
                ctx.missing::<()>(
                    path.key("port"),
                    &format!(
                        "the pool's {check} needs a port: set port here, pool.health.port, or \
                         pool.health.method = \"none\""
                    ),
                );
            }
        }
        if !ok {
            return None;
        }
    }
    Some(spec)
}

/// Resolves `include` names; returns, per pool, the include index of each resolved edge.
fn includes(ctx: &mut Ctx, raw: &[RawPool], out: &mut Pools) -> Vec<Vec<usize>> {
    let mut index = vec![Vec::new(); raw.len()];
    for (i, pool) in raw.iter().enumerate() {
        let at = FieldPath::root().key("pool").index(i).key("include");
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (k, name) in pool.include.iter().enumerate() {
            if let Some(&first) = seen.get(name.as_str()) {
                out.broken[i] = true;
                ctx.error(
                    at.index(k),
                    Error::Duplicate {
                        what: "include",
                        value: format!("{name:?}"),
                        first: at.index(first),
                    },
                );
                continue;
            }
            seen.insert(name, k);
            match out.by_name.get(name) {
                Some(&id) => {
                    out.pools[i].includes.push(id);
                    index[i].push(k);
                }
                None => {
                    out.broken[i] = true;
                    let hint = suggest_pool(name, out.names());
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
    }
    index
}

impl Pools {
    /// Names of the pools that can be referred to, in file order (for suggestions).
    pub fn names(&self) -> impl Iterator<Item = &str> + Clone {
        self.pools
            .iter()
            .enumerate()
            .filter(|(i, p)| self.by_name.get(&p.name) == Some(&PoolId(*i)))
            .map(|(_, p)| p.name.as_str())
    }
}

/// Finds include cycles with an iterative depth-first search and reports each back edge as
/// `pool[u].include[k]: include cycle a -> b -> a`; pools on a cycle are marked broken.
fn cycles(ctx: &mut Ctx, out: &mut Pools, include_index: &[Vec<usize>]) {
    #[derive(Clone, Copy, PartialEq)]
    enum Color {
        White,
        Gray,
        Black,
    }
    let n = out.pools.len();
    let mut color = vec![Color::White; n];
    for root in 0..n {
        if color[root] != Color::White {
            continue;
        }
        color[root] = Color::Gray;
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        while let Some(&mut (u, ref mut next)) = stack.last_mut() {
            let Some(&PoolId(v)) = out.pools[u].includes.get(*next) else {
                color[u] = Color::Black;
                stack.pop();
                continue;
            };
            let k = include_index[u][*next];
            *next += 1;
            match color[v] {
                Color::White => {
                    color[v] = Color::Gray;
                    stack.push((v, 0));
                }
                Color::Gray => {
                    let start = stack.iter().position(|&(p, _)| p == v).unwrap_or(0);
                    let mut names: Vec<&str> = stack[start..]
                        .iter()
                        .map(|&(p, _)| out.pools[p].name.as_str())
                        .collect();
                    names.push(&out.pools[v].name);
                    let cycle = names.join(" -> ");
                    for &(p, _) in &stack[start..] {
                        out.broken[p] = true;
                    }
                    ctx.error(
                        FieldPath::root()
                            .key("pool")
                            .index(u)
                            .key("include")
                            .index(k),
                        Error::IncludeCycle { cycle },
                    );
                }
                Color::Black => {}
            }
        }
    }
}

/// A pool that includes a broken pool is broken too (its content is unknown).
fn propagate_broken(out: &mut Pools) {
    let mut included_by: Vec<Vec<usize>> = vec![Vec::new(); out.pools.len()];
    for (u, pool) in out.pools.iter().enumerate() {
        for v in &pool.includes {
            included_by[v.0].push(u);
        }
    }
    let mut queue: VecDeque<usize> = (0..out.pools.len()).filter(|&p| out.broken[p]).collect();
    while let Some(v) = queue.pop_front() {
        for &u in &included_by[v] {
            if !out.broken[u] {
                out.broken[u] = true;
                queue.push_back(u);
            }
        }
    }
}

/// Pools with no backend even through include (checked on intact pools only).
fn empty_pools(ctx: &mut Ctx, out: &Pools) {
    // A pool is non-empty if it has members or includes a non-empty pool: propagate from the
    // pools with members along reversed include edges.
    let n = out.pools.len();
    let mut included_by: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (u, pool) in out.pools.iter().enumerate() {
        for v in &pool.includes {
            included_by[v.0].push(u);
        }
    }
    let mut non_empty: Vec<bool> = out.pools.iter().map(|p| !p.members.is_empty()).collect();
    let mut queue: VecDeque<usize> = (0..n).filter(|&p| non_empty[p]).collect();
    while let Some(v) = queue.pop_front() {
        for &u in &included_by[v] {
            if !non_empty[u] {
                non_empty[u] = true;
                queue.push_back(u);
            }
        }
    }
    for (i, pool) in out.pools.iter().enumerate() {
        if !non_empty[i] && !out.broken[i] && !pool.name.is_empty() {
            ctx.error(
                FieldPath::root().key("pool").index(i),
                Error::EmptyPool {
                    name: pool.name.clone(),
                },
            );
        }
    }
}
