//! Socket adapters: byte counting, activity time, and the HTTP client side's head and idle
//! timers.
//!
//! hyper's own `header_read_timeout` closes the connection silently and also runs while a
//! kept-alive connection waits for its next request. Stator wants HAProxy's behaviour instead:
//! a request head that does not arrive within `timeouts.header_read` — counted from accept for
//! the first request, from its first byte for later ones — gets `408 Request Timeout`; a
//! kept-alive connection with no new request for `timeouts.idle` is closed quietly. Both live
//! in [`ClientIo::poll_read`], driven by the connection's [`ConnState`]: the service marks a
//! request in progress, and tokens held by the request and response bodies mark it done.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use crate::stats::{ClientErrorKind, ListenerStats, add};

/// The answer to a client whose request head is too slow.
const REQUEST_TIMEOUT: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/// Where a client connection is between requests.
#[derive(Debug)]
pub(crate) struct ConnState {
    /// Parts of the current exchange still open (request body, response body); 0 = waiting
    /// for a request head.
    open: Cell<u8>,
    /// Requests begun on this connection.
    requests: Cell<u64>,
    /// Set when the head timer fired (408 sent).
    pub timed_out: Cell<bool>,
}

impl ConnState {
    pub fn new() -> Rc<Self> {
        Rc::new(Self {
            open: Cell::new(0),
            requests: Cell::new(0),
            timed_out: Cell::new(false),
        })
    }

    /// A request head arrived: two parts are open until their tokens drop.
    pub fn begin(self: &Rc<Self>) -> (Done, Done) {
        self.open.set(2);
        self.requests.set(self.requests.get() + 1);
        (Done(Some(Rc::clone(self))), Done(Some(Rc::clone(self))))
    }

    fn waiting_for_head(&self) -> bool {
        self.open.get() == 0
    }
}

/// Held by one part of an exchange (a body); dropping it (or [`Done::finish`]) closes the part.
#[derive(Debug)]
pub(crate) struct Done(Option<Rc<ConnState>>);

impl Done {
    pub fn finish(&mut self) {
        if let Some(st) = self.0.take() {
            st.open.set(st.open.get().saturating_sub(1));
        }
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The client side of an HTTP connection.
#[derive(Debug)]
pub(crate) struct ClientIo {
    stream: TcpStream,
    st: Rc<ConnState>,
    stats: Arc<ListenerStats>,
    header_read: Duration,
    idle: Duration,
    /// Running while a request head is awaited and due; tagged with the number of requests
    /// begun when it was set (a timer of an earlier exchange is stale).
    head: Option<(u64, Pin<Box<Sleep>>)>,
    /// Running while a kept-alive connection waits with no byte of a new request (tagged
    /// likewise).
    idle_timer: Option<(u64, Pin<Box<Sleep>>)>,
}

impl ClientIo {
    pub fn new(
        stream: TcpStream,
        st: Rc<ConnState>,
        stats: Arc<ListenerStats>,
        header_read: Duration,
        idle: Duration,
    ) -> Self {
        let first = tokio::time::Instant::now() + header_read;
        Self {
            stream,
            st,
            stats,
            header_read,
            idle,
            head: Some((0, Box::pin(tokio::time::sleep_until(first)))),
            idle_timer: None,
        }
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let exchange = this.st.requests.get();
        if this.head.as_ref().is_some_and(|(id, _)| *id != exchange) {
            this.head = None;
        }
        if this
            .idle_timer
            .as_ref()
            .is_some_and(|(id, _)| *id != exchange)
        {
            this.idle_timer = None;
        }
        if this.st.waiting_for_head() {
            if let Some((_, head)) = this.head.as_mut() {
                if head.as_mut().poll(cx).is_ready() {
                    // Nothing was written on this exchange yet (no head, no response): a
                    // whole response fits the socket buffer; if it does not, the client
                    // just sees the close.
                    let _ = this.stream.try_write(REQUEST_TIMEOUT);
                    this.st.timed_out.set(true);
                    this.stats.client_error(ClientErrorKind::HeaderTimeout);
                    this.head = None;
                    return Poll::Ready(Err(io::ErrorKind::TimedOut.into()));
                }
            } else {
                let idle = this.idle;
                let (_, timer) = this
                    .idle_timer
                    .get_or_insert_with(|| (exchange, Box::pin(tokio::time::sleep(idle))));
                if timer.as_mut().poll(cx).is_ready() {
                    this.stats.client_error(ClientErrorKind::IdleTimeout);
                    this.idle_timer = None;
                    return Poll::Ready(Ok(())); // end of stream: hyper closes quietly
                }
            }
        } else {
            this.head = None;
            this.idle_timer = None;
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.stream).poll_read(cx, buf))?;
        let n = buf.filled().len() - before;
        add(&this.stats.bytes_in, n as u64);
        if n > 0 && this.st.waiting_for_head() && this.head.is_none() {
            // The first byte of a later request: its head is now due.
            this.idle_timer = None;
            let due = tokio::time::Instant::now() + this.header_read;
            this.head = Some((exchange, Box::pin(tokio::time::sleep_until(due))));
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.stream).poll_write(cx, buf))?;
        add(&this.stats.bytes_out, n as u64);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.stream).poll_write_vectored(cx, bufs))?;
        add(&this.stats.bytes_out, n as u64);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// A socket that counts bytes both ways into two counters and notes when it last moved one.
#[derive(Debug)]
pub(crate) struct Counted<S> {
    inner: S,
    read: Arc<dyn CounterPair>,
    last: Rc<Cell<Instant>>,
}

/// Where a [`Counted`] socket adds its bytes: (read, written).
pub(crate) trait CounterPair: std::fmt::Debug {
    fn pair(&self) -> (&AtomicU64, &AtomicU64);
}

impl<S> Counted<S> {
    pub fn new(inner: S, counters: Arc<dyn CounterPair>, last: Rc<Cell<Instant>>) -> Self {
        Self {
            inner,
            read: counters,
            last,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let n = buf.filled().len() - before;
        if n > 0 {
            add(this.read.pair().0, n as u64);
            this.last.set(Instant::now());
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        if n > 0 {
            add(this.read.pair().1, n as u64);
            this.last.set(Instant::now());
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl CounterPair for ListenerStats {
    fn pair(&self) -> (&AtomicU64, &AtomicU64) {
        (&self.bytes_in, &self.bytes_out)
    }
}

impl CounterPair for crate::stats::UpstreamStats {
    fn pair(&self) -> (&AtomicU64, &AtomicU64) {
        (&self.bytes_in, &self.bytes_out)
    }
}
