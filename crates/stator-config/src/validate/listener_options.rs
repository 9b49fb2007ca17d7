//! `[listener.http]` and `[listener.udp]`: the options of a listener's protocol, each refused
//! (with its field path) on a listener of another protocol.

use super::Ctx;
use crate::defaults as d;
use crate::error::{Error, FieldPath};
use crate::raw::Scalar;
use crate::raw::{RawListenerHttp, RawListenerUdp};
use crate::types::{ForwardedMode, HttpOptions, ListenerProtocol, UdpOptions};

/// `http.forwarded_for` / `http.forwarded`: a mode, or the bool these keys were before the
/// modes (`true` reads as `"append"`, `false` as `"off"`).
fn forwarded_mode(ctx: &mut Ctx, at: FieldPath, raw: &Scalar) -> Option<ForwardedMode> {
    match raw {
        Scalar::Bool(true) => Some(ForwardedMode::Append),
        Scalar::Bool(false) => Some(ForwardedMode::Off),
        Scalar::Str(s) if s == "append" => Some(ForwardedMode::Append),
        Scalar::Str(s) if s == "replace" => Some(ForwardedMode::Replace),
        Scalar::Str(s) if s == "off" => Some(ForwardedMode::Off),
        other => {
            ctx.error(
                at,
                Error::Invalid {
                    value: other.to_string(),
                    expected: "\"append\", \"replace\" or \"off\" (true and false, from before \
                               the modes, read as \"append\" and \"off\")"
                        .into(),
                },
            );
            None
        }
    }
}

pub(super) fn http(
    ctx: &mut Ctx,
    at: &FieldPath,
    raw: Option<&RawListenerHttp>,
    protocol: Option<ListenerProtocol>,
) -> Option<HttpOptions> {
    let defaults = HttpOptions {
        forwarded_for: ForwardedMode::Append,
        forwarded: ForwardedMode::Off,
        trusted_proxies: Vec::new(),
        max_header_size: d::MAX_HEADER_SIZE,
        keepalive_pool: d::KEEPALIVE_POOL,
        keepalive_timeout: d::KEEPALIVE_TIMEOUT,
        served_by: false,
        retry_methods: d::RETRY_METHODS.iter().map(|m| (*m).to_owned()).collect(),
    };
    let Some(raw) = raw else {
        return Some(defaults);
    };
    if matches!(
        protocol,
        Some(ListenerProtocol::Tcp | ListenerProtocol::Udp)
    ) {
        ctx.error(
            at.clone(),
            Error::NotApplicable {
                reason: "[listener.http] applies to protocol = \"http\" only".into(),
            },
        );
        return None;
    }
    let max_header_size = match raw.max_header_size {
        None => Some(defaults.max_header_size),
        Some(n) => ctx.int(
            at.key("max_header_size"),
            n,
            d::MIN_MAX_HEADER_SIZE.into(),
            d::MAX_MAX_HEADER_SIZE.into(),
        ),
    };
    let keepalive_pool = match raw.keepalive_pool {
        None => Some(defaults.keepalive_pool),
        Some(n) => ctx.int(at.key("keepalive_pool"), n, 0, d::MAX_KEEPALIVE_POOL.into()),
    };
    let keepalive_timeout = match &raw.keepalive_timeout {
        None => Some(defaults.keepalive_timeout),
        Some(v) => ctx.duration_in(
            at.key("keepalive_timeout"),
            v,
            d::MIN_PROXY_TIMEOUT,
            d::MAX_PROXY_TIMEOUT,
        ),
    };
    let forwarded_for = match &raw.forwarded_for {
        None => Some(defaults.forwarded_for),
        Some(v) => forwarded_mode(ctx, at.key("forwarded_for"), v),
    };
    let forwarded = match &raw.forwarded {
        None => Some(defaults.forwarded),
        Some(v) => forwarded_mode(ctx, at.key("forwarded"), v),
    };
    let mut trusted_proxies = Some(Vec::new());
    for (i, text) in raw.trusted_proxies.iter().flatten().enumerate() {
        let p = super::cluster::prefix(ctx, at.key("trusted_proxies").index(i), text);
        match (p, trusted_proxies.as_mut()) {
            (Some(p), Some(list)) => list.push(p),
            _ => trusted_proxies = None,
        }
    }
    let retry_methods = match &raw.retry_methods {
        None => Some(defaults.retry_methods),
        Some(list) => {
            let mut ok = true;
            for (i, m) in list.iter().enumerate() {
                if !d::HTTP_METHODS.contains(&m.as_str()) {
                    ok = false;
                    ctx.error(
                        at.key("retry_methods").index(i),
                        Error::Invalid {
                            value: format!("{m:?}"),
                            expected: format!("one of {}", d::HTTP_METHODS.join(", ")),
                        },
                    );
                }
            }
            ok.then(|| list.clone())
        }
    };
    Some(HttpOptions {
        retry_methods: retry_methods?,
        forwarded_for: forwarded_for?,
        forwarded: forwarded?,
        trusted_proxies: trusted_proxies?,
        max_header_size: max_header_size?,
        keepalive_pool: keepalive_pool?,
        keepalive_timeout: keepalive_timeout?,
        served_by: raw.served_by.unwrap_or(defaults.served_by),
    })
}

pub(super) fn udp(
    ctx: &mut Ctx,
    at: &FieldPath,
    raw: Option<&RawListenerUdp>,
    protocol: Option<ListenerProtocol>,
) -> Option<UdpOptions> {
    let defaults = UdpOptions {
        responses: None,
        max_sessions: d::UDP_MAX_SESSIONS,
        max_sessions_per_source: d::UDP_MAX_SESSIONS_PER_SOURCE,
        session_rate: d::UDP_SESSION_RATE,
        session_burst: d::UDP_SESSION_RATE,
        unreplied_timeout: d::UDP_UNREPLIED_TIMEOUT,
        proxy_protocol: false,
        gro: true,
        gso: true,
    };
    let Some(raw) = raw else {
        return Some(defaults);
    };
    if matches!(
        protocol,
        Some(ListenerProtocol::Tcp | ListenerProtocol::Http)
    ) {
        ctx.error(
            at.clone(),
            Error::NotApplicable {
                reason: "[listener.udp] applies to protocol = \"udp\" only".into(),
            },
        );
        return None;
    }
    let responses = match raw.responses {
        None => Some(None),
        Some(n) => ctx
            .int(at.key("responses"), n, 1, d::MAX_UDP_RESPONSES.into())
            .map(Some),
    };
    let max_sessions = match raw.max_sessions {
        None => Some(defaults.max_sessions),
        Some(n) => ctx.int(at.key("max_sessions"), n, 1, d::MAX_UDP_SESSIONS.into()),
    };
    let max_sessions_per_source = match raw.max_sessions_per_source {
        None => Some(defaults.max_sessions_per_source),
        Some(n) => ctx.int(
            at.key("max_sessions_per_source"),
            n,
            0,
            d::MAX_UDP_SESSIONS.into(),
        ),
    };
    let session_rate = match raw.session_rate {
        None => Some(defaults.session_rate),
        Some(n) => ctx.int(at.key("session_rate"), n, 0, d::MAX_UDP_SESSION_RATE.into()),
    };
    // The burst follows the rate unless it is given: one second's worth.
    let session_burst = match raw.session_burst {
        None => session_rate.map(|r| r.max(1)),
        Some(n) => ctx.int(
            at.key("session_burst"),
            n,
            1,
            d::MAX_UDP_SESSION_RATE.into(),
        ),
    };
    let unreplied_timeout = match &raw.unreplied_timeout {
        None => Some(defaults.unreplied_timeout),
        Some(v) => ctx.duration_in(
            at.key("unreplied_timeout"),
            v,
            d::MIN_PROXY_TIMEOUT,
            d::MAX_PROXY_TIMEOUT,
        ),
    };
    Some(UdpOptions {
        responses: responses?,
        max_sessions: max_sessions?,
        max_sessions_per_source: max_sessions_per_source?,
        session_rate: session_rate?,
        session_burst: session_burst?,
        unreplied_timeout: unreplied_timeout?,
        proxy_protocol: raw.proxy_protocol.unwrap_or(defaults.proxy_protocol),
        gro: raw.gro.unwrap_or(defaults.gro),
        gso: raw.gso.unwrap_or(defaults.gso),
    })
}
