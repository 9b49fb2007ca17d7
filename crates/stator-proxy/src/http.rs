//! The HTTP/1.1 reverse proxy, on hyper's connection-level API.
//!
//! Client side: `hyper::server::conn::http1` over a [`ClientIo`] (head and idle timers, byte
//! counts); keep-alive; malformed heads get hyper's automatic `400` (`431` when too large) and
//! the connection closes. Upstream side: `hyper::client::conn::http1` connections, kept per
//! worker and upstream for reuse (`http.keepalive_pool`); a connection goes back to the pool
//! when its response body has been read to the end.
//!
//! Per request: hop-by-hop headers removed both ways (RFC 9110 §7.6.1, plus those `Connection`
//! names), `X-Forwarded-For` / `Forwarded` appended, the target in origin form, `Host` kept.
//! Bodies are streamed both ways, never buffered whole. An upstream is picked (session or
//! scheduler); a failure to connect — or a kept-alive connection found closed before the
//! request went out — moves on to the next upstream, up to `retries` more, never one already
//! tried. Answers of our own: `503` when no upstream is usable, `502` when every one tried
//! failed, `504` when the response head is later than `timeouts.response`.

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

use crate::io::{ClientIo, ConnState, Counted, CounterPair, Done};
use crate::shared::ListenerShared;
use crate::stats::{ClientErrorKind, ErrorKind, Gauge32, GaugeField, ListenerStats, add};
use crate::tcp::connect;
use crate::worker::{Sender, WorkerCtx};

/// Serves one client connection until it closes.
pub(crate) async fn serve(ctx: &Rc<WorkerCtx>, stream: TcpStream, peer: SocketAddr) {
    let shared = ctx.shared();
    let st = ConnState::new();
    let io = ClientIo::new(
        stream,
        Rc::clone(&st),
        Arc::clone(&ctx.stats),
        shared.spec.timeouts.header_read,
        shared.spec.timeouts.idle,
    );
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .keep_alive(true)
        .max_buf_size(shared.spec.http.max_header_size.max(8192))
        .header_read_timeout(None);
    drop(shared);
    let svc_ctx = Rc::clone(ctx);
    let svc_st = Rc::clone(&st);
    let service = hyper::service::service_fn(move |req| {
        handle(Rc::clone(&svc_ctx), Rc::clone(&svc_st), peer, req)
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
        if e.is_parse_too_large() {
            ctx.stats.client_error(ClientErrorKind::HeaderTooLarge);
            ctx.stats.response(431);
        } else if e.is_parse() {
            ctx.stats.client_error(ClientErrorKind::BadRequest);
            ctx.stats.response(400);
        } else if st.timed_out.get() {
            ctx.stats.response(408);
        }
    }
}

async fn handle(
    ctx: Rc<WorkerCtx>,
    st: Rc<ConnState>,
    peer: SocketAddr,
    req: http::Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let started = Instant::now();
    let (req_done, resp_done) = st.begin();
    add(&ctx.stats.requests, 1);
    let shared = ctx.shared();
    let (mut parts, body) = req.into_parts();
    let body = ReqBody {
        inner: body,
        done: req_done,
    };
    let finish = Finish {
        stats: Arc::clone(&ctx.stats),
        started,
        done: resp_done,
    };
    if let Err(reason) = prepare_request(&mut parts, peer.ip(), &shared) {
        ctx.stats.client_error(ClientErrorKind::BadRequest);
        return Ok(local(
            &ctx,
            &shared,
            StatusCode::BAD_REQUEST,
            reason,
            finish,
        ));
    }
    let req = http::Request::from_parts(parts, body);
    let resp = match forward(&ctx, &shared, peer.ip(), req, finish).await {
        Ok(r) => r,
        Err((status, why, finish)) => {
            let kind = if status == StatusCode::SERVICE_UNAVAILABLE {
                ClientErrorKind::NoUpstream
            } else {
                ClientErrorKind::UpstreamFailed
            };
            ctx.stats.client_error(kind);
            local(&ctx, &shared, status, why, finish)
        }
    };
    Ok(resp)
}

type Failure = (StatusCode, &'static str, Finish);

/// Sends `req` to an upstream, retrying on connect failures.
async fn forward(
    ctx: &Rc<WorkerCtx>,
    shared: &Arc<ListenerShared>,
    client: IpAddr,
    mut req: http::Request<ReqBody>,
    finish: Finish,
) -> Result<Response<ProxyBody>, Failure> {
    let spec = &shared.spec;
    let mut tried = Tried::new();
    let mut failures = 0;
    loop {
        let Some(i) = ctx.pick(shared, client, &tried) else {
            return Err(if failures == 0 {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no usable upstream\n",
                    finish,
                )
            } else {
                (
                    StatusCode::BAD_GATEWAY,
                    "every upstream tried failed\n",
                    finish,
                )
            });
        };
        tried.insert(i);
        let addr = spec.upstreams[i].addr;
        let ustats = Arc::clone(&shared.stats[i]);
        let active = Gauge32::new(Arc::clone(&ustats), GaugeField::Active);
        match send(ctx, shared, i, req).await {
            Ok((resp, sender)) => {
                add(&ustats.requests, 1);
                if resp.status().is_server_error() {
                    ustats.error(ErrorKind::Http5xx);
                }
                ctx.remember(shared, client, i);
                return Ok(upstream_response(
                    ctx, shared, resp, addr, sender, active, finish,
                ));
            }
            Err(Unsent::Back(back, kind)) => {
                ustats.error(kind);
                failures += 1;
                if failures > spec.retries {
                    return Err((
                        StatusCode::BAD_GATEWAY,
                        "every upstream tried failed\n",
                        finish,
                    ));
                }
                add(&ctx.stats.retries, 1);
                req = back;
            }
            Err(Unsent::Lost(kind)) => {
                add(&ustats.requests, 1);
                ustats.error(kind);
                let status = if kind == ErrorKind::Timeout {
                    StatusCode::GATEWAY_TIMEOUT
                } else {
                    StatusCode::BAD_GATEWAY
                };
                return Err((status, "the upstream failed\n", finish));
            }
        }
    }
}

/// Why a request did not get a response from one upstream (the request is moved back and
/// forth, never copied: the size difference does not matter).
#[allow(clippy::large_enum_variant)]
enum Unsent {
    /// It was not sent: here it is back, for the next upstream.
    Back(http::Request<ReqBody>, ErrorKind),
    /// It was (at least partly) sent and failed: no retry.
    Lost(ErrorKind),
}

/// Sends on a kept-alive connection to upstream `i` or a new one.
async fn send(
    ctx: &Rc<WorkerCtx>,
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
            None => match open(ctx, shared, i).await {
                Ok(s) => (s, false),
                Err(kind) => return Err(Unsent::Back(req, kind)),
            },
        };
        if reused {
            add(&ustats.reused, 1);
        }
        let sent = tokio::time::timeout(spec.timeouts.response, sender.try_send_request(req));
        match sent.await {
            Ok(Ok(resp)) => return Ok((resp, sender)),
            Ok(Err(mut e)) => match e.take_message() {
                // Closed before the request went out: a kept-alive connection the upstream
                // closed meanwhile — try another one (not a retry of the request).
                Some(back) if reused => req = back,
                Some(back) => return Err(Unsent::Back(back, ErrorKind::Reset)),
                None => return Err(Unsent::Lost(classify(e.error()))),
            },
            Err(_) => return Err(Unsent::Lost(ErrorKind::Timeout)),
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

/// A new upstream connection, its connection task spawned on this worker.
async fn open(ctx: &Rc<WorkerCtx>, shared: &ListenerShared, i: usize) -> Result<Sender, ErrorKind> {
    let addr = shared.spec.upstreams[i].addr;
    let stream = connect(addr, shared.spec.timeouts.connect).await?;
    let ustats = Arc::clone(&shared.stats[i]);
    add(&ustats.connects, 1);
    let counters: Arc<dyn CounterPair> = ustats.clone();
    let io = Counted::new(
        stream,
        counters,
        Rc::new(std::cell::Cell::new(Instant::now())),
    );
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|_| ErrorKind::ConnectOther)?;
    let open = Gauge32::new(ustats, GaugeField::Open);
    let _ = ctx; // the task runs on this worker's LocalSet
    tokio::task::spawn_local(async move {
        let _open = open;
        let _ = conn.await;
    });
    Ok(sender)
}

/// Hop-by-hop headers (RFC 9110 §7.6.1, and the pre-standard ones proxies strip).
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("keep-alive"),
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for h in HOP_BY_HOP.iter().chain(&named) {
        headers.remove(h);
    }
    headers.remove("proxy-connection");
}

/// Rewrites a request head for the upstream; an error is a reason for `400`.
fn prepare_request(
    parts: &mut http::request::Parts,
    client: IpAddr,
    shared: &ListenerShared,
) -> Result<(), &'static str> {
    // Origin form: absolute-form targets (`GET http://host/path`) keep only path and query.
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    parts.uri = path.parse::<Uri>().map_err(|_| "bad request target\n")?;
    parts.version = http::Version::HTTP_11;
    let h = &mut parts.headers;
    strip_hop_by_hop(h);
    // The proxy answers `Expect: 100-continue` itself (hyper sends 100 when the body is read).
    h.remove(header::EXPECT);
    let http = &shared.spec.http;
    if http.forwarded_for {
        let value = match h.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
            Some(prev) => format!("{prev}, {client}"),
            None => client.to_string(),
        };
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_str(&value).map_err(|_| "bad X-Forwarded-For\n")?,
        );
    }
    if http.forwarded {
        let node = match client {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => format!("\"[{a}]\""),
        };
        let element = format!("for={node};proto=http");
        let value = match h.get(header::FORWARDED).and_then(|v| v.to_str().ok()) {
            Some(prev) => format!("{prev}, {element}"),
            None => element,
        };
        h.insert(
            header::FORWARDED,
            HeaderValue::from_str(&value).map_err(|_| "bad Forwarded\n")?,
        );
    }
    Ok(())
}

fn upstream_response(
    ctx: &Rc<WorkerCtx>,
    shared: &ListenerShared,
    resp: Response<Incoming>,
    addr: SocketAddr,
    sender: Sender,
    active: Gauge32,
    finish: Finish,
) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    served_by(ctx, shared, &mut parts.headers);
    ctx.stats.response(parts.status.as_u16());
    // hyper never polls a body that is already at its end (204, 304, HEAD, length 0): give
    // the connection back now (the next checkout waits for it to be ready).
    let back = if body.is_end_stream() {
        ctx.checkin(addr, sender);
        None
    } else {
        Some((Rc::clone(ctx), addr, sender))
    };
    let body = ProxyBody::Upstream {
        inner: body,
        back,
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

/// An answer of the proxy's own; it closes the client connection after a 5xx.
fn local(
    ctx: &WorkerCtx,
    shared: &ListenerShared,
    status: StatusCode,
    text: &'static str,
    finish: Finish,
) -> Response<ProxyBody> {
    ctx.stats.response(status.as_u16());
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
    if status == StatusCode::BAD_REQUEST {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    served_by(ctx, shared, h);
    resp
}

/// The request body sent upstream: the client's, streamed; marks the request part of the
/// exchange done when it ends (or is dropped).
#[derive(Debug)]
pub(crate) struct ReqBody {
    inner: Incoming,
    done: Done,
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            this.done.finish();
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Records the request's duration and closes the response part of the exchange when the
/// response body ends or is dropped.
#[derive(Debug)]
pub(crate) struct Finish {
    stats: Arc<ListenerStats>,
    started: Instant,
    done: Done,
}

impl Drop for Finish {
    fn drop(&mut self) {
        self.stats.duration.observe(self.started.elapsed());
        self.done.finish();
    }
}

/// The response body sent to the client.
#[derive(Debug)]
pub(crate) enum ProxyBody {
    /// Streamed from an upstream; its connection goes back to the pool at the end.
    Upstream {
        inner: Incoming,
        back: Option<(Rc<WorkerCtx>, SocketAddr, Sender)>,
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
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match &mut *self {
            ProxyBody::Local { data, .. } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            ProxyBody::Upstream { inner, back, .. } => {
                let r = Pin::new(&mut *inner).poll_frame(cx);
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
                r
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
