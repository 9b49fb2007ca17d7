//! Health checks: what `[pool.health]` says, and the deduplicated set the checker runs.
//!
//! Semantics (see `docs/config.md`, "Health checks"):
//! - a pool's `[pool.health]` checks the backends the pool lists itself; backends that come
//!   through `include` are checked by their own pool's check;
//! - a pool without `[pool.health]` checks its backends with a TCP connect on the default
//!   timings; `method = "none"` checks nothing (the backends are always up);
//! - a backend listed by several pools has one health state: it is up when every check that
//!   applies to it is up (a backend no check applies to is always up);
//! - checks are deduplicated across pools by (address, port, method, parameters), as in the
//!   paper: a backend in ten pools with the same check is probed once.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::defaults as d;
use crate::duration::format_duration;
use crate::error::{Error, FieldPath};
use crate::raw::{MethodName, RawHealth, Scalar};
use crate::types::{BackendId, Config};
use crate::validate::Ctx;

/// How a pool checks its own backends (a pool with `method = "none"` has no spec).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HealthSpec {
    /// What a probe does.
    pub probe: Probe,
    /// Port to probe instead of each backend's own port.
    pub port: Option<u16>,
    /// Parameters of the check's state machine and schedule.
    pub timing: Timing,
}

/// When probes run and how results turn into a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Timing {
    /// Time between the starts of two probes.
    pub interval: Duration,
    /// A probe that has not succeeded after this long has failed (< `interval`).
    pub timeout: Duration,
    /// Consecutive successes that make a down backend up.
    pub rise: u32,
    /// Consecutive failures that make an up backend down.
    pub fall: u32,
    /// Each interval is drawn uniformly from `interval ± jitter` (≤ interval / 2), so that
    /// checks started together drift apart; checks also start staggered over one interval.
    pub jitter: Duration,
}

/// What a probe does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "method", rename_all = "lowercase")]
pub enum Probe {
    /// Succeeds when a TCP connection is established.
    Tcp,
    /// HTTP/1.1 `GET`: succeeds on a status in the expected range.
    Http(HttpProbe),
    /// HTTP/1.1 `GET` over TLS: the handshake (and, by default, the certificate) must
    /// succeed, then the status must be in the expected range.
    Https(HttpsProbe),
    /// Sends one datagram: succeeds on a reply (that starts with the expected bytes, if set).
    Udp(UdpProbe),
}

impl Probe {
    /// `"tcp"`, `"http"`, `"https"` or `"udp"`.
    pub fn method(&self) -> &'static str {
        match self {
            Probe::Tcp => "tcp",
            Probe::Http(_) => "http",
            Probe::Https(_) => "https",
            Probe::Udp(_) => "udp",
        }
    }
}

/// An HTTP check.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct HttpProbe {
    /// Request path (starts with `/`).
    pub path: String,
    /// Statuses that count as success.
    pub expect_status: StatusRange,
    /// `Host` header; the backend address when `None`.
    pub host: Option<String>,
}

/// An HTTPS check: an HTTP check over TLS.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct HttpsProbe {
    /// The request and the statuses that count as success.
    #[serde(flatten)]
    pub http: HttpProbe,
    /// How the TLS session is set up and the certificate checked.
    pub tls: TlsSpec,
}

/// The client side of an HTTPS check's TLS session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct TlsSpec {
    /// The name sent in SNI and that the certificate must be valid for (`sni`, else the
    /// `Host` header's name, else `None`: no SNI, and the certificate must name the backend's
    /// IP address).
    pub server_name: Option<String>,
    /// Verify the certificate chain and name (`verify = false` accepts any certificate).
    pub verify: bool,
    /// Trust anchors added to the system's (PEM), read by the controller when the check
    /// starts.
    pub ca_file: Option<PathBuf>,
}

/// An inclusive range of HTTP statuses, `200-399`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct StatusRange {
    /// First status that counts as success.
    pub first: u16,
    /// Last status that counts as success.
    pub last: u16,
}

impl StatusRange {
    /// Whether `status` counts as success.
    pub fn contains(&self, status: u16) -> bool {
        (self.first..=self.last).contains(&status)
    }
}

/// A UDP check.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct UdpProbe {
    /// The datagram to send (non-empty).
    pub payload: Vec<u8>,
    /// A reply must start with these bytes; any reply will do when `None`.
    pub expect: Option<Vec<u8>>,
}

/// Index of a check in [`HealthPlan::checks`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct CheckId(pub usize);

/// One deduplicated check: one probe target, one method with its parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthCheck {
    /// Address probed.
    pub address: IpAddr,
    /// Port probed.
    pub port: u16,
    /// What a probe does.
    pub probe: Probe,
    /// Schedule and state machine.
    pub timing: Timing,
    /// Backends whose health this check decides (in part, if they have other checks).
    pub backends: Vec<BackendId>,
}

/// Every check to run, and which apply to each backend.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HealthPlan {
    /// Deduplicated checks, ordered by (address, port, method, parameters).
    pub checks: Vec<HealthCheck>,
    /// For each backend (indexed by [`BackendId`]), the checks that apply to it; empty means
    /// "always up".
    pub by_backend: Vec<Vec<CheckId>>,
}

impl HealthPlan {
    /// The checks that decide `backend` (empty: always up).
    pub fn checks_of(&self, backend: BackendId) -> &[CheckId] {
        self.by_backend.get(backend.0).map_or(&[], Vec::as_slice)
    }

    /// A backend's one health state: up when every check that applies to it is up.
    pub fn is_up(&self, backend: BackendId, check_is_up: impl Fn(CheckId) -> bool) -> bool {
        self.checks_of(backend).iter().all(|&c| check_is_up(c))
    }
}

impl Config {
    /// The deduplicated health checks and, per backend, the checks that decide it.
    pub fn health_plan(&self) -> HealthPlan {
        health_plan(self)
    }
}

/// Builds the [`HealthPlan`] of a configuration: one check per distinct (address, port, probe,
/// timing) over all pools' own members. Pure and deterministic.
pub fn health_plan(config: &Config) -> HealthPlan {
    type Key = (IpAddr, u16, Probe, Timing);
    let mut checks: BTreeMap<Key, Vec<BackendId>> = BTreeMap::new();
    for pool in &config.pools {
        let Some(spec) = &pool.health else { continue };
        for member in &pool.members {
            let backend = config.backend(member.backend);
            // Validation rejects a check without a port to probe, so this always has one.
            let Some(port) = spec.port.or(backend.port) else {
                continue;
            };
            let key = (backend.address, port, spec.probe.clone(), spec.timing);
            let list = checks.entry(key).or_default();
            if !list.contains(&member.backend) {
                list.push(member.backend);
            }
        }
    }
    let mut plan = HealthPlan {
        checks: Vec::with_capacity(checks.len()),
        by_backend: vec![Vec::new(); config.backends.len()],
    };
    for (i, ((address, port, probe, timing), mut backends)) in checks.into_iter().enumerate() {
        backends.sort();
        for b in &backends {
            plan.by_backend[b.0].push(CheckId(i));
        }
        plan.checks.push(HealthCheck {
            address,
            port,
            probe,
            timing,
            backends,
        });
    }
    plan
}

/// Validates `[pool.health]`. `Some(None)` = `method = "none"`; `None` = errors recorded.
/// An absent table is the default TCP check.
pub(crate) fn validate_health(
    ctx: &mut Ctx,
    at: &FieldPath,
    raw: Option<&RawHealth>,
) -> Option<Option<HealthSpec>> {
    let default = RawHealth::default();
    let raw = raw.unwrap_or(&default);
    let method = raw.method.unwrap_or(MethodName::Tcp);
    let errors_before = ctx.errors.len();
    let not_for = |ctx: &mut Ctx, key: &str, set: bool, only: &str| {
        if set {
            let reason = if method == MethodName::None {
                format!("{key} has no effect with method = \"none\"")
            } else {
                format!("{key} applies only to {only}")
            };
            ctx.error(at.key(key), Error::NotApplicable { reason });
        }
    };
    if method == MethodName::None {
        for (key, set) in [
            ("port", raw.port.is_some()),
            ("interval", raw.interval.is_some()),
            ("timeout", raw.timeout.is_some()),
            ("rise", raw.rise.is_some()),
            ("fall", raw.fall.is_some()),
            ("jitter", raw.jitter.is_some()),
        ] {
            not_for(ctx, key, set, "");
        }
    }
    let http = "method = \"http\" or \"https\"";
    let https = "method = \"https\"";
    let udp = "method = \"udp\"";
    if !matches!(method, MethodName::Http | MethodName::Https) {
        not_for(ctx, "path", raw.path.is_some(), http);
        not_for(ctx, "expect_status", raw.expect_status.is_some(), http);
        not_for(ctx, "host", raw.host.is_some(), http);
    }
    if method != MethodName::Https {
        not_for(ctx, "sni", raw.sni.is_some(), https);
        not_for(ctx, "verify", raw.verify.is_some(), https);
        not_for(ctx, "ca_file", raw.ca_file.is_some(), https);
    }
    if method != MethodName::Udp {
        not_for(ctx, "payload", raw.payload.is_some(), udp);
        not_for(ctx, "payload_hex", raw.payload_hex.is_some(), udp);
        not_for(ctx, "expect", raw.expect.is_some(), udp);
        not_for(ctx, "expect_hex", raw.expect_hex.is_some(), udp);
    }
    if method == MethodName::None {
        return (ctx.errors.len() == errors_before).then_some(None);
    }
    let port = match raw.port {
        None => Some(None),
        Some(p) => ctx.int(at.key("port"), p, 1, 65535).map(Some),
    };
    let timing = timing(ctx, at, raw);
    let probe = match method {
        MethodName::Tcp | MethodName::None => Some(Probe::Tcp),
        MethodName::Http => http_probe(ctx, at, raw).map(Probe::Http),
        MethodName::Https => {
            let tls = tls_spec(ctx, at, raw);
            http_probe(ctx, at, raw)
                .zip(tls)
                .map(|(http, tls)| Probe::Https(HttpsProbe { http, tls }))
        }
        MethodName::Udp => udp_probe(ctx, at, raw).map(Probe::Udp),
    };
    if ctx.errors.len() != errors_before {
        return None;
    }
    Some(Some(HealthSpec {
        probe: probe?,
        port: port?,
        timing: timing?,
    }))
}

fn timing(ctx: &mut Ctx, at: &FieldPath, raw: &RawHealth) -> Option<Timing> {
    let interval = match &raw.interval {
        None => Some(d::HEALTH_INTERVAL),
        Some(v) => ctx.duration_in(
            at.key("interval"),
            v,
            d::MIN_HEALTH_INTERVAL,
            d::MAX_HEALTH_INTERVAL,
        ),
    };
    let timeout = match &raw.timeout {
        None => Some(d::HEALTH_TIMEOUT),
        Some(v) => ctx.duration_in(
            at.key("timeout"),
            v,
            d::MIN_HEALTH_TIMEOUT,
            d::MAX_HEALTH_INTERVAL,
        ),
    };
    if let (Some(interval), Some(timeout)) = (interval, timeout)
        && timeout >= interval
    {
        ctx.error(
            at.key(if raw.timeout.is_some() {
                "timeout"
            } else {
                "interval"
            }),
            Error::Health {
                reason: format!(
                    "timeout {} must be shorter than interval {}",
                    format_duration(timeout),
                    format_duration(interval)
                ),
            },
        );
    }
    let max = i64::from(d::MAX_RISE_FALL);
    let rise = match raw.rise {
        None => Some(d::HEALTH_RISE),
        Some(n) => ctx.int(at.key("rise"), n, 1, max),
    };
    let fall = match raw.fall {
        None => Some(d::HEALTH_FALL),
        Some(n) => ctx.int(at.key("fall"), n, 1, max),
    };
    let jitter = interval.and_then(|interval| jitter(ctx, at, raw.jitter.as_ref(), interval));
    Some(Timing {
        interval: interval?,
        timeout: timeout?,
        rise: rise?,
        fall: fall?,
        jitter: jitter?,
    })
}

/// Jitter as a fraction of the interval (`0.1`) or a duration (`"200ms"`), at most half the
/// interval; stored as a duration so that equal checks written either way deduplicate.
fn jitter(
    ctx: &mut Ctx,
    at: &FieldPath,
    raw: Option<&Scalar>,
    interval: Duration,
) -> Option<Duration> {
    let path = at.key("jitter");
    let fraction = match raw {
        None => d::HEALTH_JITTER,
        Some(Scalar::Float(f)) => *f,
        Some(Scalar::Int(0)) => 0.0,
        Some(Scalar::Str(_)) => {
            let jitter = ctx.duration(path.clone(), raw?)?;
            if jitter > interval / 2 {
                ctx.error(
                    path,
                    Error::Health {
                        reason: format!(
                            "jitter {} must be at most half the interval ({})",
                            format_duration(jitter),
                            format_duration(interval / 2)
                        ),
                    },
                );
                return None;
            }
            return Some(jitter);
        }
        Some(other) => {
            ctx.error(
                path,
                Error::Invalid {
                    value: other.to_string(),
                    expected: "a fraction of the interval (0.0 to 0.5) or a duration such as \
                               \"200ms\""
                        .into(),
                },
            );
            return None;
        }
    };
    if !(0.0..=d::MAX_JITTER).contains(&fraction) {
        ctx.error(
            path,
            Error::OutOfRange {
                value: fraction.to_string(),
                min: "0.0".into(),
                max: d::MAX_JITTER.to_string(),
                hint: " (a fraction of the interval)".into(),
            },
        );
        return None;
    }
    // Rounded to whole microseconds so that 0.1 x 2s is exactly 200ms.
    Some(Duration::from_micros(
        (interval.as_micros() as f64 * fraction).round() as u64,
    ))
}

fn http_probe(ctx: &mut Ctx, at: &FieldPath, raw: &RawHealth) -> Option<HttpProbe> {
    let path = raw.path.clone().unwrap_or_else(|| d::HTTP_PATH.to_owned());
    let path_ok = path.starts_with('/') && path.bytes().all(|b| b.is_ascii_graphic());
    if !path_ok {
        ctx.error(
            at.key("path"),
            Error::Invalid {
                value: format!("{path:?}"),
                expected: "an HTTP path starting with '/', without spaces or control characters"
                    .into(),
            },
        );
    }
    let expect_status = match &raw.expect_status {
        None => Some(StatusRange {
            first: d::HTTP_STATUS.0,
            last: d::HTTP_STATUS.1,
        }),
        Some(v) => status_range(ctx, at.key("expect_status"), v),
    };
    let host = match raw.host.as_deref() {
        None => Some(None),
        Some(h) if !h.is_empty() && h.len() <= 255 && h.bytes().all(|b| b.is_ascii_graphic()) => {
            Some(Some(h.to_owned()))
        }
        Some(h) => {
            ctx.error(
                at.key("host"),
                Error::Invalid {
                    value: format!("{h:?}"),
                    expected: "a Host header value (1-255 characters, no spaces)".into(),
                },
            );
            None
        }
    };
    path_ok.then_some(())?;
    Some(HttpProbe {
        path,
        expect_status: expect_status?,
        host: host?,
    })
}

/// `sni`, `verify` and `ca_file` of an HTTPS check.
fn tls_spec(ctx: &mut Ctx, at: &FieldPath, raw: &RawHealth) -> Option<TlsSpec> {
    let verify = raw.verify.unwrap_or(true);
    let sni = match raw.sni.as_deref() {
        None => Some(None),
        Some(name) if is_server_name(name) => Some(Some(name.to_ascii_lowercase())),
        Some(name) => {
            ctx.error(
                at.key("sni"),
                Error::Invalid {
                    value: format!("{name:?}"),
                    expected: "a DNS name (letters, digits, '-' and '.'; labels of 1-63 \
                               characters) or an IP address"
                        .into(),
                },
            );
            None
        }
    };
    // Without `sni`, the Host header's name (without a port) is the server name, as a
    // browser would use it; an address there means "verify against the address".
    let from_host = raw
        .host
        .as_deref()
        .map(host_name)
        .filter(|h| is_server_name(h))
        .map(str::to_ascii_lowercase);
    let ca_file = match raw.ca_file.as_deref() {
        None => Some(None),
        Some(_) if !verify => {
            ctx.error(
                at.key("ca_file"),
                Error::NotApplicable {
                    reason: "ca_file has no effect with verify = false".into(),
                },
            );
            None
        }
        Some(path) => ctx.absolute_path(at.key("ca_file"), path).map(Some),
    };
    Some(TlsSpec {
        server_name: sni?.or(from_host),
        verify,
        ca_file: ca_file?,
    })
}

/// The name part of a `Host` header value: `example.com:8443` → `example.com`,
/// `[2001:db8::1]:443` → `2001:db8::1`.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

/// A name TLS can verify a certificate against: an IP address, or a DNS name of labels of
/// 1–63 letters, digits and hyphens (not at either end), 253 characters at most.
fn is_server_name(name: &str) -> bool {
    if name.parse::<IpAddr>().is_ok() {
        return true;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// `200`, `"200"` or `"200-399"`, within 100–599.
fn status_range(ctx: &mut Ctx, path: FieldPath, raw: &Scalar) -> Option<StatusRange> {
    let parsed = match raw {
        Scalar::Int(n) => u16::try_from(*n).ok().map(|n| (n, n)),
        Scalar::Str(s) => match s.split_once('-') {
            Some((a, b)) => a.trim().parse().ok().zip(b.trim().parse().ok()),
            None => s.trim().parse().ok().map(|n| (n, n)),
        },
        _ => None,
    };
    match parsed {
        Some((first, last)) if (100..=599).contains(&first) && first <= last && last <= 599 => {
            Some(StatusRange { first, last })
        }
        _ => {
            ctx.error(
                path,
                Error::Invalid {
                    value: raw.to_string(),
                    expected: "an HTTP status or range within 100-599, e.g. 200 or \"200-399\""
                        .into(),
                },
            );
            None
        }
    }
}

fn udp_probe(ctx: &mut Ctx, at: &FieldPath, raw: &RawHealth) -> Option<UdpProbe> {
    let payload = bytes(
        ctx,
        at,
        ("payload", &raw.payload),
        ("payload_hex", &raw.payload_hex),
    );
    let payload = match payload {
        Some(Some(p)) => Some(p),
        Some(None) => ctx.missing(
            at.key("payload"),
            "a UDP check sends a datagram: set payload (text) or payload_hex",
        ),
        None => None,
    };
    let expect = bytes(
        ctx,
        at,
        ("expect", &raw.expect),
        ("expect_hex", &raw.expect_hex),
    );
    Some(UdpProbe {
        payload: payload?,
        expect: expect?,
    })
}

/// Bytes written as text or as hex (exclusive), non-empty and at most `MAX_UDP_PAYLOAD`.
/// `Some(None)` when neither key is set.
fn bytes(
    ctx: &mut Ctx,
    at: &FieldPath,
    (text_key, text): (&'static str, &Option<String>),
    (hex_key, hex): (&'static str, &Option<String>),
) -> Option<Option<Vec<u8>>> {
    let (key, value) = match (text, hex) {
        (None, None) => return Some(None),
        (Some(_), Some(_)) => {
            ctx.error(
                at.key(hex_key),
                Error::Exclusive {
                    first: text_key,
                    second: hex_key,
                },
            );
            return None;
        }
        (Some(t), None) => (text_key, Some(t.as_bytes().to_vec())),
        (None, Some(h)) => (hex_key, decode_hex(h)),
    };
    match value {
        None => {
            ctx.error(
                at.key(key),
                Error::Invalid {
                    value: format!("{:?}", hex.as_deref().unwrap_or_default()),
                    expected: "hex bytes, e.g. \"0d0a\" (spaces allowed between bytes)".into(),
                },
            );
            None
        }
        Some(v) if v.is_empty() || v.len() > d::MAX_UDP_PAYLOAD => {
            ctx.error(
                at.key(key),
                Error::OutOfRange {
                    value: format!("{} bytes", v.len()),
                    min: "1".into(),
                    max: d::MAX_UDP_PAYLOAD.to_string(),
                    hint: String::new(),
                },
            );
            None
        }
        Some(v) => Some(Some(v)),
    }
}

/// Hex digits in pairs; whitespace between pairs is ignored.
fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for word in text.split_whitespace() {
        if word.len() % 2 != 0 || !word.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        for pair in word.as_bytes().chunks(2) {
            let pair = std::str::from_utf8(pair).ok()?;
            out.push(u8::from_str_radix(pair, 16).ok()?);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex() {
        assert_eq!(decode_hex("0d0a"), Some(vec![0x0d, 0x0a]));
        assert_eq!(
            decode_hex("de ad BE EF"),
            Some(vec![0xde, 0xad, 0xbe, 0xef])
        );
        assert_eq!(decode_hex(""), Some(vec![]));
        assert_eq!(decode_hex("abc"), None);
        assert_eq!(decode_hex("zz"), None);
        assert_eq!(decode_hex("+1"), None);
    }

    #[test]
    fn status_ranges() {
        let mut ctx = Ctx::default();
        let p = FieldPath::root();
        let r = |ctx: &mut Ctx, s: Scalar| status_range(ctx, p.clone(), &s);
        assert_eq!(
            r(&mut ctx, Scalar::Str("200-399".into())),
            Some(StatusRange {
                first: 200,
                last: 399
            })
        );
        assert_eq!(
            r(&mut ctx, Scalar::Int(204)),
            Some(StatusRange {
                first: 204,
                last: 204
            })
        );
        assert!(ctx.errors.is_empty());
        for bad in [
            Scalar::Str("399-200".into()),
            Scalar::Str("99".into()),
            Scalar::Int(600),
            Scalar::Str("2xx".into()),
            Scalar::Int(-1),
        ] {
            assert_eq!(r(&mut ctx, bad), None);
        }
        assert_eq!(ctx.errors.len(), 5);
        assert!(
            StatusRange {
                first: 200,
                last: 399
            }
            .contains(302)
        );
        assert!(
            !StatusRange {
                first: 200,
                last: 399
            }
            .contains(404)
        );
    }

    #[test]
    fn server_names() {
        for ok in [
            "example.com",
            "a-b.c",
            "10.0.0.1",
            "2001:db8::1",
            "x",
            "www.example.com.",
        ] {
            assert!(is_server_name(ok), "{ok}");
        }
        for bad in [
            "",
            "-a.com",
            "a-.com",
            "a..b",
            "a b",
            "x_y.com",
            &"a".repeat(64),
        ] {
            assert!(!is_server_name(bad), "{bad}");
        }
        assert_eq!(host_name("example.com:8443"), "example.com");
        assert_eq!(host_name("[2001:db8::1]:443"), "2001:db8::1");
        assert_eq!(host_name("example.com"), "example.com");
        assert_eq!(host_name("2001:db8::1"), "2001:db8::1");
    }

    #[test]
    fn jitter_forms_agree() {
        let mut ctx = Ctx::default();
        let at = FieldPath::root();
        let interval = Duration::from_secs(2);
        let a = jitter(&mut ctx, &at, Some(&Scalar::Float(0.1)), interval);
        let b = jitter(&mut ctx, &at, Some(&Scalar::Str("200ms".into())), interval);
        let c = jitter(&mut ctx, &at, None, interval);
        assert_eq!(a, Some(Duration::from_millis(200)));
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(
            jitter(&mut ctx, &at, Some(&Scalar::Float(0.6)), interval),
            None
        );
        assert_eq!(
            jitter(&mut ctx, &at, Some(&Scalar::Str("1.5s".into())), interval),
            None
        );
        assert_eq!(ctx.errors.len(), 2);
    }
}
