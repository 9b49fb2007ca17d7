//! Raw → validated: `TryFrom<RawConfig> for Config`, collecting every error.
//!
//! Each section has a function that reads its raw table, records every problem in a [`Ctx`] and
//! returns the typed value (or `None` — only ever after recording an error). Pools are validated
//! before VIPs, because VIP checks (weights, limits, families) need the flattened pools. When a
//! part is broken (an unknown pool reference, a cycle), checks that depend on it are skipped
//! rather than reported a second time in other words.

mod bgp;
mod cluster;
mod listener_options;
mod listeners;
mod pools;
mod sections;
mod vips;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::duration::{format_duration, parse_duration};
use crate::error::{ConfigError, Error, FieldPath};
use crate::raw::{RawConfig, Scalar};
use crate::types::Config;

/// Validates a raw configuration, returning every error found (never an empty list).
pub fn validate(raw: &RawConfig) -> Result<Config, Vec<ConfigError>> {
    let mut ctx = Ctx::default();
    let proxy_only = raw
        .dataplane
        .as_ref()
        .is_some_and(|d| d.mode == Some(crate::raw::DataplaneModeName::None));
    let node = sections::node(&mut ctx, raw.node.as_ref(), proxy_only);
    let dataplane = sections::dataplane(&mut ctx, raw.dataplane.as_ref());
    let encap = sections::encap(&mut ctx, &raw.encap);
    let api = sections::api(&mut ctx, &raw.api);
    let log = sections::log(&raw.log);
    let upgrade = sections::upgrade(&mut ctx, &raw.upgrade, api.as_ref());
    let bgp = bgp::bgp(&mut ctx, raw.bgp.as_ref(), node.as_ref());
    let pools = pools::pools(&mut ctx, &raw.pool, node.as_ref(), proxy_only);
    let fragments = cluster::fragments(&mut ctx, &raw.fragments, node.as_ref());
    let tracer = cluster::tracer(&mut ctx, &raw.tracer);
    let classes = cluster::classes(&mut ctx, &raw.vip_class);
    let access_log = cluster::access_log(&mut ctx, raw.access_log.as_ref());
    let receive_steering = cluster::receive_steering(&mut ctx, raw.receive_steering.as_ref());
    let vips = vips::vips(
        &mut ctx,
        &raw.vip,
        &pools,
        node.as_ref(),
        &encap,
        dataplane.as_ref(),
        proxy_only,
        classes.as_deref(),
    );
    let listeners = listeners::listeners(
        &mut ctx,
        &raw.listener,
        &pools,
        api.as_ref(),
        vips.as_deref(),
        raw.receive_steering
            .is_some()
            .then_some(receive_steering.as_ref().and_then(|r| r.as_ref())),
    );
    if let (Some(Some(r)), Some(dp)) = (&receive_steering, &dataplane) {
        for (i, name) in r.interfaces.iter().enumerate() {
            if dp.interfaces.contains(name) {
                ctx.error(
                    FieldPath::root()
                        .key("receive_steering")
                        .key("interfaces")
                        .index(i),
                    Error::NotApplicable {
                        reason: format!(
                            "{name} is also in dataplane.interfaces: an interface has one XDP \
                             program, the forwarder's or receive steering's"
                        ),
                    },
                );
            }
        }
    }
    if let (Some(v), Some(f), Some(dp)) = (&vips, &fragments, &dataplane)
        && !f.peers.is_empty()
    {
        let tables: u64 = v.iter().map(|x| u64::from(x.table_size)).sum();
        if tables + u64::from(f.table_size) > u64::from(dp.slots_per_generation) {
            ctx.error(
                FieldPath::root().key("fragments").key("table_size"),
                Error::Limit {
                    what: "Maglev slots (the VIPs' tables and the fragment peers' table)".into(),
                    count: tables + u64::from(f.table_size),
                    limit_name: "dataplane.slots_per_generation",
                    limit: dp.slots_per_generation.into(),
                    hint: "; raise dataplane.slots_per_generation or use smaller tables".into(),
                },
            );
        }
    }
    match (
        node,
        dataplane,
        encap,
        api,
        bgp,
        vips,
        listeners,
        fragments,
        tracer,
        classes,
        access_log,
        receive_steering,
        upgrade,
    ) {
        (
            Some(node),
            Some(dataplane),
            Some(encap),
            Some(api),
            Some(bgp),
            Some(vips),
            Some(listeners),
            Some(fragments),
            Some(tracer),
            Some(classes),
            Some(access_log),
            Some(receive_steering),
            Some(upgrade),
        ) if ctx.errors.is_empty() => Ok(Config {
            node,
            dataplane,
            encap,
            bgp,
            api,
            log,
            upgrade,
            backends: pools.backends,
            pools: pools.pools,
            vips,
            listeners,
            fragments,
            tracer,
            classes,
            access_log,
            receive_steering,
        }),
        _ => {
            if ctx.errors.is_empty() {
                // Every validator records an error before returning None; this keeps the
                // promise "never an empty list" even if one forgets.
                ctx.error(
                    FieldPath::root(),
                    Error::Schema {
                        message: "internal: validation failed without a reason".into(),
                    },
                );
            }
            Err(ctx.errors)
        }
    }
}

impl TryFrom<RawConfig> for Config {
    type Error = Vec<ConfigError>;

    fn try_from(raw: RawConfig) -> Result<Self, Self::Error> {
        validate(&raw)
    }
}

impl TryFrom<&RawConfig> for Config {
    type Error = Vec<ConfigError>;

    fn try_from(raw: &RawConfig) -> Result<Self, Self::Error> {
        validate(raw)
    }
}

/// Where validation records what it finds.
#[derive(Debug, Default)]
pub(crate) struct Ctx {
    pub errors: Vec<ConfigError>,
}

impl Ctx {
    /// Records an error.
    pub fn error(&mut self, path: FieldPath, error: Error) {
        self.errors.push(ConfigError::new(path, error));
    }

    /// Records a missing required key; returns `None` for `?`-style use.
    pub fn missing<T>(&mut self, path: FieldPath, hint: &str) -> Option<T> {
        self.error(
            path,
            Error::Missing {
                hint: hint.to_owned(),
            },
        );
        None
    }

    /// The value if `min <= value <= max`, else records an error.
    pub fn range(&mut self, path: FieldPath, value: i64, min: i64, max: i64) -> Option<i64> {
        self.range_hint(path, value, min, max, "")
    }

    /// Like [`Ctx::range`], with a hint ("; ...") appended to the message.
    pub fn range_hint(
        &mut self,
        path: FieldPath,
        value: i64,
        min: i64,
        max: i64,
        hint: &str,
    ) -> Option<i64> {
        if (min..=max).contains(&value) {
            Some(value)
        } else {
            self.error(
                path,
                Error::OutOfRange {
                    value: value.to_string(),
                    min: min.to_string(),
                    max: max.to_string(),
                    hint: hint.to_owned(),
                },
            );
            None
        }
    }

    /// An integer that must fit `T` exactly, within `[min, max]`.
    pub fn int<T: TryFrom<i64>>(
        &mut self,
        path: FieldPath,
        value: i64,
        min: i64,
        max: i64,
    ) -> Option<T> {
        self.range(path, value, min, max)
            .and_then(|v| T::try_from(v).ok())
    }

    /// A duration written as a string; numbers get a message asking for a unit.
    pub fn duration(&mut self, path: FieldPath, value: &Scalar) -> Option<Duration> {
        let text = match value {
            Scalar::Str(s) => s,
            Scalar::Int(i) => {
                self.error(
                    path,
                    Error::Duration {
                        value: i.to_string(),
                        reason: "a number without a unit is ambiguous".into(),
                    },
                );
                return None;
            }
            other => {
                self.error(
                    path,
                    Error::Invalid {
                        value: other.to_string(),
                        expected: "a duration string such as \"2s\"".into(),
                    },
                );
                return None;
            }
        };
        match parse_duration(text) {
            Ok(d) => Some(d),
            Err(reason) => {
                self.error(
                    path,
                    Error::Duration {
                        value: format!("{text:?}"),
                        reason,
                    },
                );
                None
            }
        }
    }

    /// A duration within `[min, max]`.
    pub fn duration_in(
        &mut self,
        path: FieldPath,
        value: &Scalar,
        min: Duration,
        max: Duration,
    ) -> Option<Duration> {
        let d = self.duration(path.clone(), value)?;
        if (min..=max).contains(&d) {
            Some(d)
        } else {
            self.error(
                path,
                Error::OutOfRange {
                    value: format_duration(d),
                    min: format_duration(min),
                    max: format_duration(max),
                    hint: String::new(),
                },
            );
            None
        }
    }

    /// An IP address, with a hint for the usual mistakes (a prefix length or a port).
    pub fn ip(&mut self, path: FieldPath, text: &str) -> Option<IpAddr> {
        if let Ok(addr) = text.parse::<IpAddr>() {
            return Some(addr);
        }
        let expected = if text.contains('/') {
            "an IP address (write the address without a prefix length)"
        } else if text.parse::<std::net::SocketAddr>().is_ok() {
            "an IP address (the port is a separate key)"
        } else {
            "an IP address"
        };
        self.error(
            path,
            Error::Invalid {
                value: format!("{text:?}"),
                expected: expected.into(),
            },
        );
        None
    }

    /// An address that can be a VIP, a backend or a node address: a unicast address of a
    /// routable kind.
    pub fn unicast(&mut self, path: FieldPath, text: &str) -> Option<IpAddr> {
        let addr = self.ip(path.clone(), text)?;
        match unusable_reason(addr) {
            None => Some(addr),
            Some(reason) => {
                self.error(
                    path,
                    Error::UnusableAddress {
                        address: addr.to_string(),
                        reason,
                    },
                );
                None
            }
        }
    }

    /// An absolute filesystem path (relative paths would depend on the service's working
    /// directory, which differs between a shell and systemd).
    pub fn absolute_path(&mut self, path: FieldPath, text: &str) -> Option<PathBuf> {
        if text.starts_with('/') && !text.contains('\0') {
            Some(PathBuf::from(text))
        } else {
            self.error(
                path,
                Error::Invalid {
                    value: format!("{text:?}"),
                    expected: "an absolute path".into(),
                },
            );
            None
        }
    }

    /// A name of a node, pool or VIP: 1–63 characters out of letters, digits, `.`, `_` and
    /// `-`, starting with a letter or digit (safe as a metric label and in log fields).
    pub fn name(&mut self, path: FieldPath, text: &str) -> Option<String> {
        let ok = (1..=63).contains(&text.len())
            && text.starts_with(|c: char| c.is_ascii_alphanumeric())
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok {
            Some(text.to_owned())
        } else {
            self.error(
                path,
                Error::Invalid {
                    value: format!("{text:?}"),
                    expected: "a valid name (1-63 letters, digits, '.', '_' or '-', starting \
                               with a letter or digit)"
                        .into(),
                },
            );
            None
        }
    }
}

/// Why an address cannot be a VIP, a backend or a node address, if it cannot.
pub(crate) fn unusable_reason(addr: IpAddr) -> Option<String> {
    let reason = match addr {
        a if a.is_unspecified() => "the unspecified address",
        a if a.is_loopback() => "a loopback address",
        a if a.is_multicast() => "a multicast address",
        IpAddr::V4(a) if a.is_broadcast() => "the broadcast address",
        IpAddr::V4(a) if a.is_link_local() => "link-local",
        IpAddr::V6(a) if a.is_unicast_link_local() => {
            "link-local (it would need an interface scope)"
        }
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => return Some(format!("an IPv4-mapped IPv6 address; write {v4}")),
            None => return None,
        },
        IpAddr::V4(_) => return None,
    };
    Some(reason.to_owned())
}

/// "IPv4" or "IPv6".
pub(crate) fn family_name(addr: IpAddr) -> &'static str {
    if addr.is_ipv4() { "IPv4" } else { "IPv6" }
}

/// A suggestion for a misspelt pool name: "; did you mean \"web\"?" when one known name is within
/// edit distance 2, else the list of known names (or nothing when there are none).
pub(crate) fn suggest_pool<'a>(name: &str, known: impl Iterator<Item = &'a str> + Clone) -> String {
    let best = known
        .clone()
        .map(|k| (edit_distance(name, k), k))
        .filter(|(d, _)| *d <= 2)
        .min();
    if let Some((_, k)) = best {
        return format!("; did you mean {k:?}?");
    }
    let all: Vec<&str> = known.collect();
    match all.len() {
        0 => "; no pools are defined".into(),
        1..=10 => format!("; defined pools: {}", all.join(", ")),
        n => format!("; {n} pools are defined, e.g. {}", all[..10].join(", ")),
    }
}

/// Levenshtein distance (names are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        let known = ["web", "canary", "dns"];
        assert_eq!(
            suggest_pool("webb", known.iter().copied()),
            "; did you mean \"web\"?"
        );
        assert_eq!(
            suggest_pool("zzzzzz", known.iter().copied()),
            "; defined pools: web, canary, dns"
        );
        assert_eq!(
            suggest_pool("x", [].iter().copied()),
            "; no pools are defined"
        );
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn unusable_addresses() {
        let r = |s: &str| unusable_reason(s.parse().unwrap());
        assert_eq!(r("192.0.2.1"), None);
        assert_eq!(r("2001:db8::1"), None);
        assert_eq!(r("0.0.0.0").as_deref(), Some("the unspecified address"));
        assert_eq!(r("127.0.0.1").as_deref(), Some("a loopback address"));
        assert_eq!(r("::1").as_deref(), Some("a loopback address"));
        assert_eq!(r("224.0.0.5").as_deref(), Some("a multicast address"));
        assert_eq!(r("ff02::1").as_deref(), Some("a multicast address"));
        assert_eq!(
            r("255.255.255.255").as_deref(),
            Some("the broadcast address")
        );
        assert_eq!(r("169.254.1.1").as_deref(), Some("link-local"));
        assert!(r("fe80::1").unwrap().starts_with("link-local"));
        assert_eq!(
            r("::ffff:192.0.2.1").as_deref(),
            Some("an IPv4-mapped IPv6 address; write 192.0.2.1")
        );
    }
}
