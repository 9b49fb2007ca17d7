//! The status page: `GET /` and its two assets, embedded in the binary (no CDN, no build
//! step, works offline), and the rules that keep a browser-facing API safe.
//!
//! The page is static: HTML, CSS and a script that polls the JSON endpoints (`/v1/status`,
//! `/v1/vips`, `/v1/backends`, `/v1/dataplane`, `/v1/events`, and `/v1/listeners` where it
//! exists) and computes rates and small graphs from successive answers. It holds no node
//! data itself, so:
//!
//! - **With `api.token`**, the page and its assets are served without the token; the data
//!   are not. The page asks for the token once (or takes it from the URL fragment,
//!   `http://lb1:9180/#token=…`, which browsers never send to a server), keeps it in
//!   `sessionStorage` (this tab only, gone when it closes) and sends it as
//!   `Authorization: Bearer` with every poll — the same rule as every other client. The token
//!   is never put in a cookie, so no other site can make a browser use it.
//! - **Without a token**, the page is served to loopback clients only (an SSH tunnel,
//!   `ssh -L 9180:127.0.0.1:9180 lb1`, is the way in from elsewhere); others get 403 with
//!   the reason.
//!
//! Two more rules apply to every request, because a browser may now be pointed at the API:
//! - a request whose `Origin` is not the API's own (`http://<Host>`) is refused (403): no
//!   other site's script can drive the API from an operator's browser (a drain is a `POST`
//!   that a foreign page could otherwise send);
//! - without a token, a request whose `Host` names anything but an IP address or `localhost`
//!   is refused (403): a DNS-rebinding page, whose own name resolves to 127.0.0.1, would
//!   otherwise read and change an open API as if it were its own origin. Clients that address
//!   the API by IP address (the CLI, Prometheus targets written as addresses) are unaffected.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error_response;

const INDEX_HTML: &str = include_str!("ui/index.html");
const STATUS_CSS: &str = include_str!("ui/status.css");
const STATUS_JS: &str = include_str!("ui/status.js");

/// Paths of the page and its assets.
pub const PAGE_PATHS: [&str; 3] = ["/", "/ui/status.css", "/ui/status.js"];

/// Whether `req` asks for the page or one of its assets.
pub fn is_page_request(req: &Request) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD) && PAGE_PATHS.contains(&req.uri().path())
}

/// Whether the request came from a loopback address (unknown peers are not loopback).
pub fn from_loopback(req: &Request) -> bool {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .is_some_and(|ConnectInfo(peer)| match peer.ip() {
            IpAddr::V4(a) => a.is_loopback(),
            IpAddr::V6(a) => {
                a.is_loopback() || a.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            }
        })
}

/// The refusal of a request a browser might have been tricked into sending, if it is one.
pub fn browser_guard(headers: &HeaderMap, token_set: bool) -> Option<Response> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let same = !host.is_empty()
            && (origin == format!("http://{host}") || origin == format!("https://{host}"));
        if !same {
            return Some(error_response(
                StatusCode::FORBIDDEN,
                &format!(
                    "cross-origin request refused (Origin {origin:?} is not this API's own): \
                     only the status page served here may call the API from a browser"
                ),
            ));
        }
    }
    if !token_set && !host.is_empty() && !addressed_by_ip_or_localhost(host) {
        return Some(error_response(
            StatusCode::FORBIDDEN,
            &format!(
                "Host {host:?} refused: without api.token the API answers requests addressed \
                 by IP address or localhost only (DNS-rebinding protection); set api.token to \
                 use a name"
            ),
        ));
    }
    None
}

/// `127.0.0.1:9180`, `[::1]:9180`, `10.0.0.5`, `localhost:9180`, `x.localhost`.
fn addressed_by_ip_or_localhost(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => {
            return rest
                .split(']')
                .next()
                .is_some_and(|a| a.parse::<IpAddr>().is_ok());
        }
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<IpAddr>().is_ok() || name == "localhost" || name.ends_with(".localhost")
}

/// The refusal of the tokenless page to a client that is not on loopback.
pub fn not_on_loopback() -> Response {
    error_response(
        StatusCode::FORBIDDEN,
        "the status page is served without a token to loopback clients only: set api.token \
         (the page then asks for it), or reach it through a tunnel such as \
         `ssh -L 9180:127.0.0.1:9180 <node>`",
    )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut r = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Only this origin's script and style; fetches to this origin only; no framing.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    r
}

/// `GET /`.
pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// `GET /ui/status.css`.
pub async fn css() -> Response {
    asset("text/css; charset=utf-8", STATUS_CSS)
}

/// `GET /ui/status.js`.
pub async fn js() -> Response {
    asset("text/javascript; charset=utf-8", STATUS_JS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn hosts() {
        for ok in [
            "127.0.0.1:9180",
            "[::1]:9180",
            "[2001:db8::1]",
            "10.0.0.5",
            "localhost:9180",
            "LOCALHOST",
            "lb.localhost:1",
        ] {
            assert!(addressed_by_ip_or_localhost(ok), "{ok}");
        }
        for bad in [
            "evil.example:9180",
            "evil.example",
            "localhost.evil.example",
            "[nope]",
        ] {
            assert!(!addressed_by_ip_or_localhost(bad), "{bad}");
        }
    }

    #[test]
    fn guard() {
        let ok = headers(&[("host", "127.0.0.1:9180")]);
        assert!(browser_guard(&ok, false).is_none());
        let same = headers(&[
            ("host", "127.0.0.1:9180"),
            ("origin", "http://127.0.0.1:9180"),
        ]);
        assert!(browser_guard(&same, false).is_none());
        let cross = headers(&[
            ("host", "127.0.0.1:9180"),
            ("origin", "http://evil.example"),
        ]);
        assert_eq!(
            browser_guard(&cross, true).map(|r| r.status()),
            Some(StatusCode::FORBIDDEN)
        );
        let rebound = headers(&[("host", "evil.example:9180")]);
        assert_eq!(
            browser_guard(&rebound, false).map(|r| r.status()),
            Some(StatusCode::FORBIDDEN)
        );
        assert!(
            browser_guard(&rebound, true).is_none(),
            "the token protects"
        );
        assert!(browser_guard(&HeaderMap::new(), false).is_none());
    }
}
