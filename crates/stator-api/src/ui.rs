//! The status page: `GET /` and its two assets, embedded in the binary (no CDN, no build
//! step, works offline), and the rules that keep a browser-facing API safe.
//!
//! The page is static: HTML, CSS and a script that polls the JSON endpoints (`/v1/status`,
//! `/v1/vips`, `/v1/backends`, `/v1/dataplane`, `/v1/events`, and `/v1/listeners` where it
//! exists) and computes rates and small graphs from successive answers. It holds no node
//! data itself, so:
//!
//! - The page and its assets are served without the token; the data are not (a browser reaches
//!   the TCP endpoint, which always has a token). The page asks for the token once (or takes
//!   it from the URL fragment, `http://lb1:9180/#token=…`, which browsers never send to a
//!   server), keeps it in `sessionStorage` (this tab only, gone when it closes) and sends it
//!   as `Authorization: Bearer` with every poll — the same rule as every other client. The
//!   token is never put in a cookie, so no other site can make a browser use it. A `read`
//!   token is enough for the page.
//!
//! One more rule applies to every request, because a browser may be pointed at the API: a
//! request whose `Origin` is not the API's own (`http://<Host>`) is refused (403): no other
//! site's script can drive the API from an operator's browser (a drain is a `POST` that a
//! foreign page could otherwise send). A DNS-rebinding page gains nothing either: every
//! request needs the token, which the attacker's page does not have.

use axum::extract::Request;
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

/// The refusal of a request a browser might have been tricked into sending, if it is one.
pub fn browser_guard(headers: &HeaderMap) -> Option<Response> {
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
    None
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
    fn guard() {
        let ok = headers(&[("host", "127.0.0.1:9180")]);
        assert!(browser_guard(&ok).is_none());
        let same = headers(&[
            ("host", "127.0.0.1:9180"),
            ("origin", "http://127.0.0.1:9180"),
        ]);
        assert!(browser_guard(&same).is_none());
        let cross = headers(&[
            ("host", "127.0.0.1:9180"),
            ("origin", "http://evil.example"),
        ]);
        assert_eq!(
            browser_guard(&cross).map(|r| r.status()),
            Some(StatusCode::FORBIDDEN)
        );
        let named = headers(&[("host", "lb1.example:9180")]);
        assert!(browser_guard(&named).is_none(), "the token protects");
        assert!(browser_guard(&HeaderMap::new()).is_none());
    }
}
