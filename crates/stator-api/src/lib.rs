//! # stator-api — the admin API, its metrics and status page, and its client
//!
//! Layer: above the controller (`stator-control`, whose reconciler it sends requests to and
//! whose published `View` it reads); below the node (`stator-node`), which binds and serves
//! it, and the CLI, which uses [`client`].
//!
//! The admin API: HTTP/JSON on a Unix socket (`api.socket`, `/run/stator/api.sock` by
//! default) and, when configured, on TCP (`api.listen`, only with a token); Prometheus
//! `/metrics`, the packet tracer, and the status page (`GET /`, [`ui`]). Every endpoint is in
//! `docs/api.md`.
//!
//! - Who may do what is [`access`]: the socket's peers by their credentials (root, the node's
//!   user, `api.socket_group`), TCP clients by their bearer token (`admin` or `read`); a
//!   missing or wrong token gets 401 with `WWW-Authenticate: Bearer`, a caller below the
//!   level a request needs 403. The one exception is the status page's static HTML, CSS and
//!   script, which hold no node data (the page asks for the token and sends it with every
//!   poll). Cross-origin requests are refused: see [`ui`].
//! - Errors are JSON, `{"error": "...", "field": "..."}` (plus `errors` for configuration
//!   errors), with a 4xx status for anything the caller can fix: 400 invalid input, 401, 404
//!   unknown route / backend / VIP, 405, 412 `If-Match` mismatch, 415 unsupported body type,
//!   422 valid but not applicable here (needs a restart, host not ready); 5xx only when the
//!   data plane fails or the node is stopping.
//! - Handlers only read the published [`View`] and the data plane's
//!   readers, or send a message to the reconciler and wait for its answer: nothing here can
//!   stop the node.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod access;
pub mod client;
pub mod feeds;
mod handlers;
pub mod metrics;
pub mod serve;
pub mod socket;
pub mod trace;
mod udp_metrics;
pub mod ui;

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request as HttpRequest, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use stator_control::ControlError;
use stator_control::events::EventLog;
use stator_control::reconciler::{Request, SharedAnnouncer};
use stator_control::view::View;
use stator_health::Board;
use stator_plane::PlaneReader;

/// Largest request body (a configuration with thousands of VIPs fits).
pub const BODY_LIMIT: usize = 16 << 20;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// Requests to the reconciler.
    pub requests: mpsc::Sender<Request>,
    /// The latest published view.
    pub view: watch::Receiver<Arc<View>>,
    /// A data-plane reader (counters, connection table, clock).
    pub reader: Arc<dyn PlaneReader>,
    /// Health-check statuses.
    pub board: Board,
    /// The BGP announcer, for its status.
    pub announcer: SharedAnnouncer,
    /// The TCP endpoint's bearer tokens (updated on reload).
    pub tokens: Arc<RwLock<access::Tokens>>,
    /// Serializes connection-table walks (they can take a while on a big table).
    pub scan: Arc<Mutex<()>>,
    /// Whether a configuration must also suit the host (forwarding sysctls): true unless the
    /// data plane does not forward through the kernel.
    pub host_checks: bool,
    /// The TLS stack of HTTPS checks, for a proposed configuration's `ca_file`s.
    pub tls: Arc<dyn stator_health::Tls>,
    /// What the server did with connections.
    pub conn_stats: Arc<serve::ConnStats>,
    /// The proxy tier (listeners).
    pub proxy: stator_control::listeners::ProxyTier,
    /// Recent events, recorded by the reconciler.
    pub events: EventLog,
    /// The commit the binary was built from (`unknown` when not known).
    pub commit: Arc<str>,
    /// What the tracer's reporter did with the data plane's reports.
    pub tracer: Arc<stator_control::reports::ReporterStats>,
}

impl Ctx {
    /// The latest view.
    pub fn view(&self) -> Arc<View> {
        Arc::clone(&self.view.borrow())
    }
}

/// An error answered as JSON.
#[derive(Debug)]
pub struct ApiError(pub ControlError);

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> Self {
        Self(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut body = json!({
            "error": error_message(&self.0),
            "field": self.0.field(),
        });
        match &self.0 {
            ControlError::Config(errors) => {
                // The same shape as `stator check --json` and `POST /v1/config:validate`.
                body["errors"] = errors
                    .errors
                    .iter()
                    .map(|e| json!(stator_config::Diagnostic::from(e)))
                    .collect();
            }
            ControlError::GenerationMismatch { current, .. } => {
                body["generation"] = json!(current);
            }
            _ => {}
        }
        let mut response = (status, axum::Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// The error's message: for a configuration, the first error with its path, and how many
/// more there are.
fn error_message(e: &ControlError) -> String {
    match e {
        ControlError::Config(errors) => {
            let first = errors
                .errors
                .first()
                .map(|e| {
                    if e.path.is_root() {
                        e.error.to_string()
                    } else {
                        format!("{}: {}", e.path, e.error)
                    }
                })
                .unwrap_or_default();
            match errors.errors.len() {
                0 | 1 => format!("invalid configuration: {first}"),
                n => format!("invalid configuration: {first} (and {} more)", n - 1),
            }
        }
        other => other.to_string(),
    }
}

/// A JSON error response with a status and no [`ControlError`] behind it.
pub fn error_response(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({ "error": message, "field": null })),
    )
        .into_response()
}

pub use stator_control::tokens::constant_time_eq;

async fn auth(State(ctx): State<Ctx>, req: HttpRequest, next: Next) -> Response {
    if let Some(refused) = ui::browser_guard(req.headers()) {
        return refused;
    }
    if ui::is_page_request(&req) {
        // Static files without node data: the page asks for the token.
        return next.run(req).await;
    }
    let level = match req.extensions().get::<access::Peer>() {
        Some(access::Peer::Unix { level: Some(l), .. }) => *l,
        Some(access::Peer::Unix { creds, level: None }) => {
            return error_response(
                StatusCode::FORBIDDEN,
                &format!(
                    "uid {} (pid {}) is not root, the node's user or a member of \
                     api.socket_group: the admin API's socket admits no one else",
                    creds.uid, creds.pid
                ),
            );
        }
        Some(access::Peer::Tcp(_)) => {
            let given = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            let level = given.and_then(|g| {
                ctx.tokens
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .level(g)
            });
            match level {
                Some(l) => l,
                None => {
                    let mut r = error_response(
                        StatusCode::UNAUTHORIZED,
                        if given.is_some() {
                            "invalid bearer token"
                        } else {
                            "this API needs `Authorization: Bearer <token>` (api.token_file or \
                             api.read_token_file)"
                        },
                    );
                    r.headers_mut()
                        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                    return r;
                }
            }
        }
        // Every connection sets its peer; a request without one was not served by
        // `serve` (never trusted).
        None => {
            return error_response(StatusCode::FORBIDDEN, "request from an unknown peer");
        }
    };
    let needed = access::required(&req);
    if level < needed {
        return error_response(
            StatusCode::FORBIDDEN,
            &format!(
                "{} {} needs the {} level; this caller has the {} level",
                req.method(),
                req.uri().path(),
                needed.as_str(),
                level.as_str()
            ),
        );
    }
    next.run(req).await
}

/// The router of the admin API.
pub fn router(ctx: Ctx) -> Router {
    Router::new()
        .route("/", get(ui::index))
        .route("/ui/status.css", get(ui::css))
        .route("/ui/status.js", get(ui::js))
        .route("/v1/status", get(handlers::status))
        .route("/v1/events", get(feeds::events))
        .route("/v1/dataplane", get(feeds::dataplane))
        .route(
            "/v1/config",
            get(handlers::config_get).put(handlers::config_put),
        )
        .route("/v1/config:validate", post(handlers::config_validate))
        .route("/v1/vips", get(handlers::vips))
        .route("/v1/backends", get(handlers::backends))
        .route("/v1/backends/{id}/drain", post(handlers::drain))
        .route("/v1/backends/{id}/undrain", post(handlers::undrain))
        .route("/v1/trace", get(trace::handler))
        .route("/v1/listeners", get(handlers::listeners))
        .route("/metrics", get(metrics::handler))
        .fallback(|| async {
            error_response(StatusCode::NOT_FOUND, "no such endpoint (see docs/api.md)")
        })
        .method_not_allowed_fallback(|| async {
            error_response(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this endpoint",
            )
        })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(ctx.clone(), auth))
        .with_state(ctx)
}
