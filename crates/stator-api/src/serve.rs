//! The admin API's HTTP server: hyper's HTTP/1 connections, on the Unix socket or the TCP
//! endpoint, under two limits, so that clients holding connections open without sending
//! anything cannot make the API wait. Each connection's request carry its [`Peer`]: the TCP
//! client's address, or the Unix peer's credentials and the level they give (read by the
//! access check, `super::auth`).
//!
//! - **Header-read timeout** (`api.header_read_timeout`): a connection must send a complete
//!   request head within this time of opening, and of its previous response (keep-alive); a
//!   silent or slow one is closed (hyper's own timer, on tokio's clock).
//! - **Connection limit** (`api.max_connections`): at most this many connections are open.
//!   When a new one arrives at the limit, the oldest *idle* connection (no request in
//!   progress: a silent client, or a keep-alive one between requests) is closed to make room;
//!   if every connection is busy with a request, the new one is closed at once. New clients
//!   are never left in the accept queue behind idle ones — the defect this fixes: a few
//!   hundred idle connections made new connections wait (and, on a host with the common
//!   1,024-descriptor limit, made `accept` fail with EMFILE).
//!
//! Both limits are read from the running configuration at each accept, so a reload changes
//! them for the next connection; each endpoint has its own table. What happens is counted
//! ([`ConnStats`], `/metrics`).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{Notify, oneshot, watch};
use tower::ServiceExt as _;

use super::Ctx;
use super::access::{Peer, UnixPolicy};

/// An endpoint the API serves.
#[derive(Debug)]
pub enum Endpoint {
    /// `api.listen`.
    Tcp(TcpListener),
    /// `api.socket`, and who may use it.
    Unix(UnixListener, UnixPolicy),
}

impl Endpoint {
    async fn accept(&self) -> io::Result<(Stream, Peer)> {
        match self {
            Endpoint::Tcp(l) => {
                let (s, addr) = l.accept().await?;
                Ok((Stream::Tcp(s), Peer::Tcp(addr)))
            }
            Endpoint::Unix(l, policy) => {
                let (s, _) = l.accept().await?;
                // The credentials the kernel recorded at connect: not the peer's later ones.
                let creds = stator_sys::creds::peer_creds(&s)?;
                let level = policy.level(&creds);
                Ok((Stream::Unix(s), Peer::Unix { creds, level }))
            }
        }
    }
}

/// A connection of either endpoint.
#[derive(Debug)]
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// How long shutdown waits for requests in progress.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// After an accept error that says the process or system is out of something (descriptors,
/// memory), wait this long before accepting again instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What the server did with connections (monotonic counters, plus the open count).
#[derive(Debug, Default)]
pub struct ConnStats {
    accepted: AtomicU64,
    evicted: AtomicU64,
    refused: AtomicU64,
    open: AtomicUsize,
}

impl ConnStats {
    /// Connections accepted and served.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Idle connections closed to make room for a new one.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// New connections closed at once because every open one was busy.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

/// One open connection, as the accept loop sees it.
#[derive(Debug, Default)]
struct Conn {
    /// Requests in progress.
    busy: AtomicUsize,
    /// Closes the connection when notified.
    evict: Notify,
}

/// Counts a request in progress on a connection while it lives.
struct Busy(Arc<Conn>);

impl Busy {
    fn enter(conn: &Arc<Conn>) -> Self {
        conn.busy.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(conn))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The open connections, in accept order (ids grow).
#[derive(Debug, Default)]
struct Table {
    conns: Mutex<BTreeMap<u64, Arc<Conn>>>,
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Conn>>> {
        // A map of handles: valid whatever a panicked holder was doing.
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes room for one more connection under `max`: `false` if every open connection is
    /// busy (the new one must be refused).
    fn make_room(&self, max: usize, stats: &ConnStats) -> bool {
        let mut conns = self.lock();
        while conns.len() >= max {
            let idle = conns
                .iter()
                .find(|(_, c)| c.busy.load(Ordering::SeqCst) == 0)
                .map(|(id, _)| *id);
            let Some(id) = idle else {
                return false;
            };
            if let Some(c) = conns.remove(&id) {
                c.evict.notify_one();
                stats.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        true
    }
}

/// Serves `router` on `endpoint` until `stop` fires (or is dropped), under the limits of the
/// running configuration in `ctx`. Then stops accepting, lets requests in progress finish
/// (bounded), and returns.
pub async fn serve(endpoint: Endpoint, router: Router, ctx: Ctx, stop: oneshot::Receiver<()>) {
    let table = Arc::new(Table::default());
    let stats = Arc::clone(&ctx.conn_stats);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let mut next_id = 0u64;
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            r = endpoint.accept() => r,
            _ = &mut stop => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE, ENFILE, ENOBUFS, ENOMEM: out of something; back off briefly.
                if matches!(e.raw_os_error(), Some(23 | 24 | 105 | 12)) {
                    tracing::warn!(error = %e, "admin API: accept failed, retrying shortly");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                } else {
                    tracing::debug!(error = %e, "admin API: accept failed");
                }
                continue;
            }
        };
        let api = ctx.view().config.api.clone();
        let max = usize::try_from(api.max_connections)
            .unwrap_or(usize::MAX)
            .max(1);
        if !table.make_room(max, &stats) {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(max, "admin API: every connection busy, a new one closed");
            drop(stream);
            continue;
        }
        let conn = Arc::new(Conn::default());
        let id = next_id;
        next_id += 1;
        table.lock().insert(id, Arc::clone(&conn));
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        stats.open.fetch_add(1, Ordering::Relaxed);
        let (table, stats, router) = (Arc::clone(&table), Arc::clone(&stats), router.clone());
        let shutdown = shutdown_rx.clone();
        tasks.spawn(async move {
            connection(
                stream,
                peer,
                router,
                &conn,
                api.header_read_timeout,
                shutdown,
            )
            .await;
            table.lock().remove(&id);
            stats.open.fetch_sub(1, Ordering::Relaxed);
        });
    }
    drop(endpoint);
    let _ = shutdown_tx.send(true);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
}

/// One connection: HTTP/1 with keep-alive and the header-read timeout, until the client
/// closes it, the timeout or an eviction closes it, or the server shuts down (gracefully:
/// a request in progress is answered first). Each request carries the connection's [`Peer`].
async fn connection(
    stream: Stream,
    peer: Peer,
    router: Router,
    conn: &Arc<Conn>,
    header_read_timeout: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let state = Arc::clone(conn);
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(peer.clone());
        let busy = Busy::enter(&state);
        let router = router.clone();
        async move {
            let response = router.oneshot(req).await;
            drop(busy);
            Ok::<_, Infallible>(match response {
                Ok(r) => r,
                Err(never) => match never {},
            })
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .keep_alive(true);
    let http = builder.serve_connection(TokioIo::new(stream), service);
    let mut http = std::pin::pin!(http);
    tokio::select! {
        r = http.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "admin API connection ended");
            }
        }
        () = conn.evict.notified() => {}
        _ = shutdown.changed() => {
            http.as_mut().graceful_shutdown();
            let _ = http.await;
        }
    }
}
