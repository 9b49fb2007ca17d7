//! The HTTP/1.1 reverse proxy, on hyper's connection-level API.
//!
//! Client side: `hyper::server::conn::http1` over a [`ClientIo`] (head and idle timers, byte
//! counts); keep-alive; malformed heads get hyper's automatic `400` (`431` when too large) and
//! the connection closes. Upstream side: `hyper::client::conn::http1` connections, kept per
//! worker and upstream for reuse (`http.keepalive_pool`); a connection goes back to the pool
//! when its response body has been read to the end.
//!
//! Per request: the head is checked by [`crate::rules`] first (no `CONNECT`, no transfer
//! coding but `chunked`, one valid `Host`, an absolute-form target sent in origin form with
//! its authority as `Host`; a head that fails gets 400, 405 or 501 and the connection
//! closes); hop-by-hop headers removed both ways (RFC 9110 §7.6.1, plus those `Connection`
//! names); every `X-Forwarded-For` / `Forwarded` line the client sent kept only when it is a
//! trusted proxy (`http.trusted_proxies`), its address appended or put in their place.
//! Bodies are streamed both ways, never buffered whole. An upstream is picked (session or
//! scheduler); a failure to connect — or a kept-alive connection found closed before the
//! request went out — moves on to the next upstream, up to `retries` more, never one already
//! tried. Answers of our own: `503` when no upstream is usable, `502` when every one tried
//! failed, `504` when the response head is later than `timeouts.response` or the upstream
//! stops reading the request for `timeouts.upstream_write`, `408` when the client stops
//! sending the request body for `timeouts.client_read`.
//!
//! Every wait of an exchange is bounded by an inactivity timer (see [`crate::io`]): the
//! request body here ([`ReqBody`], `client_read`), the response body here ([`ProxyBody`],
//! `upstream_read`), the writes to the client ([`ClientIo`], `client_write`) and to the
//! upstream (its [`Counted`] socket, `upstream_write`).

use std::cell::Cell;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode, Uri};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use stator_sched::Tried;
use tokio::net::TcpStream;

use crate::access::{HttpLog, Kind, Record};
use crate::io::{ClientIo, ConnState, Counted, CounterPair, Done, Stalled};
use crate::rules::{self, Forwarding, Rejection, Rewrite, Verdict};
use crate::shared::ListenerShared;
use crate::stats::{
    ClientErrorKind, ErrorKind, Gauge32, GaugeField, ListenerStats, UpstreamStats, add,
};
use crate::tcp::connect;
use crate::worker::{Sender, WorkerCtx};

/// A body's error: ours ([`Stalled`]) or hyper's.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Serves one client connection until it closes.
pub(crate) async fn serve(ctx: &Rc<WorkerCtx>, stream: TcpStream, peer: SocketAddr) {
    let connected = Instant::now();
    let shared = ctx.shared();
    let t = shared.spec.timeouts;
    let st = ConnState::new(Arc::clone(&ctx.stats), t.client_read, t.upstream_read);
    let io = ClientIo::new(
        stream,
        Rc::clone(&st),
        Arc::clone(&ctx.stats),
        t.header_read,
        t.idle,
        t.client_write,
    );
    // Whether the client is a proxy whose forwarding headers are believed: once per
    // connection.
    let trusted = shared.spec.http.trusts(peer.ip());
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .keep_alive(true)
        .max_buf_size(shared.spec.http.max_header_size.max(8192))
        // max_buf_size alone is soft: a head that arrives in one read larger than it is
        // parsed all the same. This one is the limit (431 above it).
        .max_header_size(shared.spec.http.max_header_size)
        .header_read_timeout(None);
    drop(shared);
    let svc_ctx = Rc::clone(ctx);
    let svc_st = Rc::clone(&st);
    let service = hyper::service::service_fn(move |req| {
        handle(Rc::clone(&svc_ctx), Rc::clone(&svc_st), peer, trusted, req)
    });
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut stop = ctx.stop.clone();
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = stop.wait_for(|s| *s) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        let answered = if e.is_parse_too_large() {
            ctx.stats.client_error(ClientErrorKind::HeaderTooLarge);
            ctx.stats.response(431);
            Some((431, "header_too_large"))
        } else if e.is_parse() {
            ctx.stats.client_error(ClientErrorKind::BadRequest);
            ctx.stats.response(400);
            Some((400, "bad_request"))
        } else if st.timed_out.get() {
            ctx.stats.response(408);
            Some((408, "header_timeout"))
        } else {
            None
        };
        // a head hyper refused never reached `handle`: its line is written here
        if let Some((status, outcome)) = answered {
            ctx.log(Record {
                status: Some(status),
                outcome,
                duration: connected.elapsed(),
                ..Record::new(Kind::Http, peer)
            });
        }
    }
}

async fn handle(
    ctx: Rc<WorkerCtx>,
    st: Rc<ConnState>,
    peer: SocketAddr,
    trusted: bool,
    req: http::Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let started = Instant::now();
    let (req_done, resp_done) = st.begin();
    add(&ctx.stats.requests, 1);
    let shared = ctx.shared();
    let (mut parts, body) = req.into_parts();
    st.body_in.borrow_mut().progress();
    let body = ReqBody {
        inner: Some(body),
        done: req_done,
        exchange: st.exchange(),
        st: Rc::clone(&st),
        counted: None,
    };
    let log = ctx.access.on().then(|| {
        Rc::new(HttpLog {
            ctx: Rc::clone(&ctx),
            client: peer,
            method: parts.method.to_string(),
            target: parts.uri.to_string(),
            status: Cell::new(0),
            upstream: Cell::new(None),
            bytes_in: Rc::new(Cell::new(0)),
            bytes_out: Cell::new(0),
            cut: Cell::new(false),
        })
    });
    let body = ReqBody {
        counted: log.as_ref().map(|l| Rc::clone(&l.bytes_in)),
        ..body
    };
    let finish = Finish {
        stats: Arc::clone(&ctx.stats),
        started,
        done: resp_done,
        log,
    };
    if let Err(r) = prepare_request(&mut parts, peer.ip(), trusted, &shared) {
        ctx.stats.client_error(if r.is_unsupported() {
            ClientErrorKind::Unsupported
        } else {
            ClientErrorKind::BadRequest
        });
        let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_REQUEST);
        return Ok(local(&ctx, &shared, status, r.reason, true, finish));
    }
    let req = http::Request::from_parts(parts, body);
    let resp = match forward(&ctx, &st, &shared, peer.ip(), req, finish).await {
        Ok(r) => r,
        Err(f) => {
            if let Some(kind) = f.count {
                ctx.stats.client_error(kind);
            }
            local(&ctx, &shared, f.status, f.text, f.close, f.finish)
        }
    };
    Ok(resp)
}

/// An exchange that ends with an answer of the proxy's own.
struct Failure {
    status: StatusCode,
    text: &'static str,
    /// The client-side error to count (`None`: counted where it happened).
    count: Option<ClientErrorKind>,
    /// Close the client connection after the answer (a request body may be left unread).
    close: bool,
    finish: Finish,
}

impl Failure {
    fn upstream(status: StatusCode, text: &'static str, finish: Finish) -> Self {
        let count = if status == StatusCode::SERVICE_UNAVAILABLE {
            ClientErrorKind::NoUpstream
        } else {
            ClientErrorKind::UpstreamFailed
        };
        Self {
            status,
            text,
            count: Some(count),
            close: false,
            finish,
        }
    }
}

/// Sends `req` to an upstream, retrying on connect failures — and, for an idempotent request
/// without a body (`http.retry_methods`), on a failure before the response head — on another
/// upstream each time, at most `retries` more; every failure counts towards the upstream's
/// passive exclusion (`max_fails`).
async fn forward(
    ctx: &Rc<WorkerCtx>,
    st: &Rc<ConnState>,
    shared: &Arc<ListenerShared>,
    client: IpAddr,
    mut req: http::Request<ReqBody>,
    finish: Finish,
) -> Result<Response<ProxyBody>, Failure> {
    let spec = &shared.spec;
    let mut tried = Tried::new();
    let mut failures = 0;
    let mut again = None;
    // what the client gets when no upstream is left to try: the last failure's answer (504
    // after a response timeout, 502 otherwise)
    let mut last = StatusCode::BAD_GATEWAY;
    // What is sent again after a failure past the connect: the head alone (a request with a
    // body is never replayed: its body has been streamed, not kept).
    let replay = (spec.http.retry_methods.contains(req.method()) && req.body().is_end_stream())
        .then(|| Replay::of(&req));
    loop {
        let Some(i) = ctx.pick(shared, client, &tried) else {
            return Err(if failures == 0 {
                Failure::upstream(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no usable upstream\n",
                    finish,
                )
            } else {
                Failure::upstream(last, "every upstream tried failed\n", finish)
            });
        };
        tried.insert(i);
        // a retry counts when it goes out, not when there was no upstream left for it
        match again.take() {
            Some(Again::Connect) => add(&ctx.stats.retries, 1),
            Some(Again::Resent) => add(&ctx.stats.retries_resent, 1),
            None => {}
        }
        let addr = spec.upstreams[i].addr;
        let ustats = Arc::clone(&shared.stats[i]);
        let active = Gauge32::new(Arc::clone(&ustats), GaugeField::Active);
        match send(ctx, st, shared, i, req).await {
            Ok((resp, sender)) => {
                add(&ustats.requests, 1);
                if resp.status().is_server_error() {
                    ustats.error(ErrorKind::Http5xx);
                }
                ctx.remember(shared, client, i);
                return Ok(upstream_response(
                    ctx, st, shared, resp, addr, sender, ustats, active, finish,
                ));
            }
            Err(Unsent::Back(back, kind)) => {
                ustats.error(kind);
                shared.failed(i);
                failures += 1;
                if failures > spec.retries {
                    return Err(Failure::upstream(
                        StatusCode::BAD_GATEWAY,
                        "every upstream tried failed\n",
                        finish,
                    ));
                }
                last = StatusCode::BAD_GATEWAY;
                again = Some(Again::Connect);
                req = back;
            }
            Err(Unsent::Lost(kind, reused)) => {
                add(&ustats.requests, 1);
                ustats.error(kind);
                // no response head: the upstream failed (a reset, a kept-alive connection that
                // died under the request, the response timeout) — though a reset of a
                // kept-alive connection is not held against the upstream: it may have closed
                // it as idle just as the request went out (a healthy backend's keep-alive
                // timeout must not exclude it)
                let before_head = matches!(kind, ErrorKind::Reset | ErrorKind::Timeout);
                if before_head && !(reused && kind == ErrorKind::Reset) {
                    shared.failed(i);
                }
                let status = if matches!(kind, ErrorKind::Timeout | ErrorKind::WriteTimeout) {
                    StatusCode::GATEWAY_TIMEOUT
                } else {
                    StatusCode::BAD_GATEWAY
                };
                if let Some(r) = replay.as_ref().filter(|_| before_head)
                    && failures < spec.retries
                {
                    failures += 1;
                    last = status;
                    again = Some(Again::Resent);
                    req = r.request();
                    continue;
                }
                let mut f = Failure::upstream(status, "the upstream failed\n", finish);
                // the request body may be left half read
                f.close = kind == ErrorKind::WriteTimeout;
                return Err(f);
            }
            Err(Unsent::Descriptors) => {
                return Err(Failure {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    text: "the proxy is out of connections\n",
                    count: Some(ClientErrorKind::Descriptors),
                    close: false,
                    finish,
                });
            }
            Err(Unsent::ClientRead) => {
                // counted by the body when it stalled
                add(&ustats.requests, 1);
                return Err(Failure {
                    status: StatusCode::REQUEST_TIMEOUT,
                    text: "the request body stopped arriving\n",
                    count: None,
                    close: true,
                    finish,
                });
            }
            Err(Unsent::ClientBody { malformed }) => {
                // The client's fault, not the upstream's: a malformed body is a bad request;
                // a client gone mid-body gets an answer nobody reads, and no count.
                add(&ustats.requests, 1);
                return Err(Failure {
                    status: StatusCode::BAD_REQUEST,
                    text: "malformed request body\n",
                    count: malformed.then_some(ClientErrorKind::BadRequest),
                    close: true,
                    finish,
                });
            }
        }
    }
}

/// Why the request goes to another upstream.
#[derive(Debug, Clone, Copy)]
enum Again {
    /// Connecting to the last one failed (the request had not left).
    Connect,
    /// The last one failed before a response head (the request is sent again).
    Resent,
}

/// A bodyless request's head, kept to send it again to another upstream.
struct Replay {
    method: http::Method,
    uri: Uri,
    version: http::Version,
    headers: HeaderMap,
    st: Rc<ConnState>,
    exchange: u64,
}

impl Replay {
    fn of(req: &http::Request<ReqBody>) -> Self {
        Self {
            method: req.method().clone(),
            uri: req.uri().clone(),
            version: req.version(),
            headers: req.headers().clone(),
            st: Rc::clone(&req.body().st),
            exchange: req.body().exchange,
        }
    }

    /// The request again, without a body.
    fn request(&self) -> http::Request<ReqBody> {
        let mut r = http::Request::new(ReqBody {
            inner: None,
            done: Done::none(),
            st: Rc::clone(&self.st),
            exchange: self.exchange,
            counted: None,
        });
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone();
        *r.version_mut() = self.version;
        *r.headers_mut() = self.headers.clone();
        r
    }
}

/// Why a request did not get a response from one upstream (the request is moved back and
/// forth, never copied: the size difference does not matter).
#[allow(clippy::large_enum_variant)]
enum Unsent {
    /// It was not sent: here it is back, for the next upstream.
    Back(http::Request<ReqBody>, ErrorKind),
    /// It was (at least partly) sent and failed before a response head; `reused`: on a
    /// kept-alive connection (whose reset may be the upstream closing it as idle just then,
    /// not a failure of the upstream).
    Lost(ErrorKind, bool),
    /// It was partly sent and its body stopped arriving from the client (`client_read`).
    ClientRead,
    /// Reading its body from the client failed: malformed (a bad chunk), or the client left.
    ClientBody { malformed: bool },
    /// No kept-alive connection, and the node's descriptor budget has none for a new one.
    Descriptors,
}

/// Sends on a kept-alive connection to upstream `i` or a new one.
async fn send(
    ctx: &Rc<WorkerCtx>,
    st: &ConnState,
    shared: &ListenerShared,
    i: usize,
    mut req: http::Request<ReqBody>,
) -> Result<(Response<Incoming>, Sender), Unsent> {
    let spec = &shared.spec;
    let addr = spec.upstreams[i].addr;
    let ustats = &shared.stats[i];
    loop {
        let (mut sender, reused) = match ctx.checkout(addr, spec.http.keepalive_timeout).await {
            Some(s) => (s, true),
            None => {
                let Some(held) = ctx.budget.take(1) else {
                    return Err(Unsent::Descriptors);
                };
                match open(ctx, shared, i, held).await {
                    Ok(s) => (s, false),
                    Err(kind) => return Err(Unsent::Back(req, kind)),
                }
            }
        };
        if reused {
            add(&ustats.reused, 1);
        }
        let sent = st.within(spec.timeouts.response, sender.try_send_request(req));
        match sent.await {
            Ok(Ok(resp)) => return Ok((resp, sender)),
            Ok(Err(mut e)) => match e.take_message() {
                // Closed before the request went out: a kept-alive connection the upstream
                // closed meanwhile — try another one (not a retry of the request).
                Some(back) if reused => req = back,
                Some(back) => return Err(Unsent::Back(back, ErrorKind::Reset)),
                None => {
                    let e = e.into_error();
                    return Err(match Stalled::find(&e) {
                        Some(Stalled::ClientRead) => Unsent::ClientRead,
                        Some(Stalled::UpstreamWrite) => {
                            Unsent::Lost(ErrorKind::WriteTimeout, reused)
                        }
                        _ => match ClientBodyError::find(&e) {
                            Some(b) => Unsent::ClientBody {
                                malformed: !b.is_incomplete_message(),
                            },
                            None => Unsent::Lost(classify(&e), reused),
                        },
                    });
                }
            },
            Err(_) => return Err(Unsent::Lost(ErrorKind::Timeout, reused)),
        }
    }
}

fn classify(e: &hyper::Error) -> ErrorKind {
    if e.is_parse() || e.is_parse_status() {
        ErrorKind::Protocol
    } else if e.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Reset
    }
}

/// A new upstream connection, its connection task spawned on this worker; the task holds the
/// connection's descriptor from the budget for as long as it lives (in use or kept alive).
async fn open(
    ctx: &Rc<WorkerCtx>,
    shared: &ListenerShared,
    i: usize,
    held: crate::limits::Descriptors,
) -> Result<Sender, ErrorKind> {
    let addr = shared.spec.upstreams[i].addr;
    let stream = connect(addr, shared.spec.timeouts.connect).await?;
    let ustats = Arc::clone(&shared.stats[i]);
    add(&ustats.connects, 1);
    let counters: Arc<dyn CounterPair> = ustats.clone();
    let stall = (shared.spec.timeouts.upstream_write, Stalled::UpstreamWrite);
    let io = Counted::new(stream, counters, None, stall);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|_| ErrorKind::ConnectOther)?;
    let open = Gauge32::new(ustats, GaugeField::Open);
    let _ = ctx; // the task runs on this worker's LocalSet
    tokio::task::spawn_local(async move {
        let _open = (open, held);
        let _ = conn.await;
    });
    Ok(sender)
}

/// Hop-by-hop headers (RFC 9110 §7.6.1, and the pre-standard ones proxies strip).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
];

/// Most hop-by-hop headers one head can carry before the slow path (a `Vec`) is taken.
const HOP_INLINE: usize = 4;

/// Removes the hop-by-hop headers and those `Connection` names. One pass over the names
/// finds what to remove (a head usually has none or only `Connection`): no allocation and no
/// hash lookup for headers that are not there — this runs twice per request (profiled with
/// callgrind, the lookup-per-name version was a tenth of the proxy's instructions).
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let mut found: [Option<HeaderName>; HOP_INLINE] = Default::default();
    let mut n = 0;
    let mut more: Vec<HeaderName> = Vec::new();
    let mut push = |name: HeaderName| {
        if n < HOP_INLINE {
            found[n] = Some(name);
            n += 1;
        } else {
            more.push(name);
        }
    };
    let mut connection = false;
    for name in headers.keys() {
        if HOP_BY_HOP.contains(name) {
            connection |= name == header::CONNECTION;
            push(name.clone());
        }
    }
    if connection {
        for v in headers.get_all(header::CONNECTION) {
            let Ok(v) = v.to_str() else { continue };
            for token in v.split(',') {
                let token = token.trim();
                // `close` and `keep-alive` are options, not header names (keep-alive is
                // in the list anyway).
                if token.is_empty()
                    || token.eq_ignore_ascii_case("close")
                    || token.eq_ignore_ascii_case("keep-alive")
                {
                    continue;
                }
                if let Ok(name) = HeaderName::from_bytes(token.as_bytes()) {
                    push(name);
                }
            }
        }
    }
    for name in found.iter().flatten().chain(&more) {
        headers.remove(name);
    }
}

/// Rewrites a request head for the upstream, or refuses it ([`rules::check`]).
fn prepare_request(
    parts: &mut http::request::Parts,
    client: IpAddr,
    trusted: bool,
    shared: &ListenerShared,
) -> Result<(), Rejection> {
    const BAD_TARGET: Rejection = Rejection {
        status: 400,
        reason: "bad request target\n",
    };
    let version = if parts.version == http::Version::HTTP_10 {
        rules::Version::Http10
    } else {
        rules::Version::Http11
    };
    // The target as received: an origin-form one (nearly every one) as it is, another form
    // written out.
    let written;
    let target = if parts.uri.scheme().is_none() && parts.uri.authority().is_none() {
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    } else {
        written = parts.uri.to_string();
        written.as_str()
    };
    let lines = parts
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_bytes()));
    let (uri, host) = match rules::check(parts.method.as_str(), target, version, lines) {
        Verdict::Reject(r) => return Err(r),
        Verdict::Forward(edits) => (
            edits
                .target
                .map(|t| t.parse::<Uri>().map_err(|_| BAD_TARGET))
                .transpose()?,
            edits
                .host
                .map(|h| HeaderValue::from_str(h).map_err(|_| BAD_TARGET))
                .transpose()?,
        ),
    };
    if let Some(uri) = uri {
        parts.uri = uri;
    }
    parts.version = http::Version::HTTP_11;
    let h = &mut parts.headers;
    if let Some(host) = host {
        h.insert(header::HOST, host);
    }
    strip_hop_by_hop(h);
    // The proxy answers `Expect: 100-continue` itself (hyper sends 100 when the body is read).
    h.remove(header::EXPECT);
    let http = &shared.spec.http;
    for (which, name) in [
        (Forwarding::XForwardedFor, X_FORWARDED_FOR),
        (Forwarding::Forwarded, header::FORWARDED),
    ] {
        let mode = match which {
            Forwarding::XForwardedFor => http.forwarded_for,
            Forwarding::Forwarded => http.forwarded,
        };
        let lines = h.get_all(&name).iter().map(HeaderValue::as_bytes);
        match rules::forwarding(which, mode, trusted, client, lines) {
            Rewrite::Keep => {}
            Rewrite::Remove => {
                h.remove(&name);
            }
            Rewrite::Set(v) => {
                let v = HeaderValue::from_maybe_shared(Bytes::from(v)).map_err(|_| Rejection {
                    status: 400,
                    reason: "a forwarding header that cannot be extended\n",
                })?;
                h.insert(name, v);
            }
        }
    }
    Ok(())
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

#[allow(clippy::too_many_arguments)]
fn upstream_response(
    ctx: &Rc<WorkerCtx>,
    st: &Rc<ConnState>,
    shared: &ListenerShared,
    resp: Response<Incoming>,
    addr: SocketAddr,
    sender: Sender,
    stats: Arc<UpstreamStats>,
    active: Gauge32,
    finish: Finish,
) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    served_by(ctx, shared, &mut parts.headers);
    ctx.stats.response(parts.status.as_u16());
    finish.responded(parts.status.as_u16(), Some(addr));
    // hyper never polls a body that is already at its end (204, 304, HEAD, length 0): give
    // the connection back now (the next checkout waits for it to be ready).
    let back = if body.is_end_stream() {
        ctx.checkin(addr, sender);
        None
    } else {
        Some((Rc::clone(ctx), addr, sender))
    };
    st.body_out.borrow_mut().progress();
    let body = ProxyBody::Upstream {
        inner: body,
        back,
        st: Rc::clone(st),
        stats,
        _active: active,
        _finish: finish,
    };
    Response::from_parts(parts, body)
}

fn served_by(ctx: &WorkerCtx, shared: &ListenerShared, headers: &mut HeaderMap) {
    if shared.spec.http.served_by {
        let v = format!("{}/{}/{}", ctx.node, shared.spec.name, ctx.id);
        if let Ok(v) = HeaderValue::from_str(&v) {
            headers.insert("x-served-by", v);
        }
    }
}

/// An answer of the proxy's own; `close`: the client connection closes after it (a
/// malformed or refused request, a timeout with a request body left unread).
fn local(
    ctx: &WorkerCtx,
    shared: &ListenerShared,
    status: StatusCode,
    text: &'static str,
    close: bool,
    finish: Finish,
) -> Response<ProxyBody> {
    ctx.stats.response(status.as_u16());
    finish.responded(status.as_u16(), None);
    let mut resp = Response::new(ProxyBody::Local {
        data: Some(Bytes::from_static(text.as_bytes())),
        _finish: finish,
    });
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if close {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    served_by(ctx, shared, h);
    resp
}

/// The request body sent upstream: the client's, streamed; marks the request part of the
/// exchange done when it ends (or is dropped). Polled by the upstream connection's task: when
/// it has nothing to give for `timeouts.client_read`, it ends with [`Stalled::ClientRead`]
/// (counted here), which aborts the upstream request.
#[derive(Debug)]
pub(crate) struct ReqBody {
    /// The client's body; `None` for a request sent again without one ([`Replay`]).
    inner: Option<Incoming>,
    done: Done,
    st: Rc<ConnState>,
    /// The exchange it belongs to: the connection's `client_read` timer is its own only while
    /// that exchange is the current one.
    exchange: u64,
    /// Where its bytes are counted for the access log (when it is on).
    counted: Option<Rc<Cell<u64>>>,
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            this.done.finish();
            return Poll::Ready(None);
        };
        let r = Pin::new(inner).poll_frame(cx);
        match &r {
            Poll::Pending => {
                if this.st.exchange() == this.exchange && this.st.body_in.borrow_mut().blocked(cx) {
                    this.st.stats.client_error(ClientErrorKind::ReadTimeout);
                    this.done.finish();
                    return Poll::Ready(Some(Err(Box::new(Stalled::ClientRead))));
                }
                return Poll::Pending;
            }
            Poll::Ready(Some(Ok(f))) => {
                this.st.body_in.borrow_mut().progress();
                if let (Some(c), Some(d)) = (&this.counted, f.data_ref()) {
                    c.set(c.get() + d.len() as u64);
                }
            }
            Poll::Ready(None | Some(Err(_))) => {
                this.st.body_in.borrow_mut().progress();
                this.done.finish();
            }
        }
        // hyper's error on the client's body (a bad chunk, a closed connection) is the
        // client's: marked, so that the upstream is not blamed for it
        r.map(|f| f.map(|f| f.map_err(|e| Box::new(ClientBodyError(e)) as BoxError)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}

/// An error reading the client's request body (hyper's, wrapped so that it is known as the
/// client's when it comes back from the upstream connection).
#[derive(Debug)]
struct ClientBodyError(hyper::Error);

impl std::fmt::Display for ClientBodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the client's request body: {}", self.0)
    }
}

impl std::error::Error for ClientBodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl ClientBodyError {
    /// hyper's error on the client's body, if `e` has one in its chain.
    fn find<'e>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e hyper::Error> {
        let mut cur = Some(e);
        while let Some(e) = cur {
            if let Some(b) = e.downcast_ref::<Self>() {
                return Some(&b.0);
            }
            cur = e.source();
        }
        None
    }
}

/// Records the request's duration and closes the response part of the exchange when the
/// response body ends or is dropped.
#[derive(Debug)]
pub(crate) struct Finish {
    stats: Arc<ListenerStats>,
    started: Instant,
    done: Done,
    /// The request's access-log facts (when the log is on).
    log: Option<Rc<HttpLog>>,
}

impl Finish {
    /// The response head went out: its status, and the upstream that answered (`None`: the
    /// proxy did).
    fn responded(&self, status: u16, upstream: Option<SocketAddr>) {
        if let Some(l) = &self.log {
            l.status.set(status);
            l.upstream.set(upstream);
        }
    }

    /// `n` bytes of the response body went to the client.
    fn sent(&self, n: usize) {
        if let Some(l) = &self.log {
            l.bytes_out.set(l.bytes_out.get() + n as u64);
        }
    }

    /// The response body was cut (an error of the upstream's or a stall).
    fn cut(&self) {
        if let Some(l) = &self.log {
            l.cut.set(true);
        }
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        let took = self.started.elapsed();
        self.stats.duration.observe(took);
        self.done.finish();
        if let Some(l) = self.log.take() {
            l.write(took);
        }
    }
}

/// The response body sent to the client.
#[derive(Debug)]
pub(crate) enum ProxyBody {
    /// Streamed from an upstream; its connection goes back to the pool at the end. When it
    /// has nothing to give for `timeouts.upstream_read`, it ends with
    /// [`Stalled::UpstreamRead`] (counted on the upstream), which cuts the response.
    Upstream {
        inner: Incoming,
        back: Option<(Rc<WorkerCtx>, SocketAddr, Sender)>,
        st: Rc<ConnState>,
        stats: Arc<UpstreamStats>,
        _active: Gauge32,
        _finish: Finish,
    },
    /// An answer of the proxy's own.
    Local {
        data: Option<Bytes>,
        _finish: Finish,
    },
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut *self {
            ProxyBody::Local { data, _finish } => Poll::Ready(data.take().map(|d| {
                _finish.sent(d.len());
                Ok(Frame::data(d))
            })),
            ProxyBody::Upstream {
                inner,
                back,
                st,
                stats,
                _finish,
                ..
            } => {
                let r = Pin::new(&mut *inner).poll_frame(cx);
                match &r {
                    Poll::Pending => {
                        if st.body_out.borrow_mut().blocked(cx) {
                            stats.error(ErrorKind::ReadTimeout);
                            _finish.cut();
                            return Poll::Ready(Some(Err(Box::new(Stalled::UpstreamRead))));
                        }
                        return Poll::Pending;
                    }
                    Poll::Ready(Some(Err(e))) => {
                        // the upstream stopped reading a request body it answered early
                        if Stalled::find(e) == Some(Stalled::UpstreamWrite) {
                            stats.error(ErrorKind::WriteTimeout);
                        }
                        _finish.cut();
                    }
                    Poll::Ready(Some(Ok(f))) => {
                        st.body_out.borrow_mut().progress();
                        if let Some(d) = f.data_ref() {
                            _finish.sent(d.len());
                        }
                    }
                    Poll::Ready(None) => st.body_out.borrow_mut().progress(),
                }
                // The end is either a `None` frame or, after the last data frame, a body that
                // says it is at its end (hyper then stops polling).
                let ended = match &r {
                    Poll::Ready(None) => true,
                    Poll::Ready(Some(Ok(_))) => inner.is_end_stream(),
                    _ => false,
                };
                if ended && let Some((ctx, addr, sender)) = back.take() {
                    ctx.checkin(addr, sender);
                }
                r.map(|f| f.map(|f| f.map_err(Into::into)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Local { data, .. } => data.is_none(),
            ProxyBody::Upstream { inner, .. } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Local { data, .. } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            ProxyBody::Upstream { inner, .. } => inner.size_hint(),
        }
    }
}
