//! Socket adapters: byte counting, activity time, the HTTP client side's head and idle
//! timers, and the stall timers that bound every other wait.
//!
//! hyper's own `header_read_timeout` closes the connection silently and also runs while a
//! kept-alive connection waits for its next request. Stator wants HAProxy's behaviour instead:
//! a request head that does not arrive within `timeouts.header_read` — counted from accept for
//! the first request, from its first byte for later ones — gets `408 Request Timeout`; a
//! kept-alive connection with no new request for `timeouts.idle` is closed quietly. Both live
//! in [`ClientIo::poll_read`], driven by the connection's [`ConnState`]: the service marks a
//! request in progress, and tokens held by the request and response bodies mark it done.
//!
//! Once an exchange is under way every wait is an inactivity timer ([`Stall`], nginx's
//! `send_timeout` / `proxy_read_timeout` model: the time since the last progress, not the
//! length of the exchange): a write to the client (`client_write`, here in
//! [`ClientIo::poll_write`]) or to an upstream (`upstream_write`, in [`Counted`]) that
//! accepts no byte, a request body the upstream waits for (`client_read`, in the HTTP request
//! body) and a response body the client waits for (`upstream_read`, in the HTTP response
//! body). A stall ends the wait with an error carrying a [`Stalled`], which whoever sees it
//! turns into an answer (408, 504) and a counter. Like the head timer, a stall timer costs
//! nothing while bytes move: a poll that makes progress clears a deadline (no clock read), the
//! first blocked poll after it reads the clock once, and the timer itself is allocated on the
//! first stall of its owner's life and re-armed lazily after that.

use std::cell::{Cell, RefCell};
use std::future::Future;
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

/// Which wait stalled: the source of the error that ends it (an [`io::Error`] of kind
/// `TimedOut` around it on a socket, the body error itself on a body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stalled {
    /// The client stopped sending a request body the upstream waits for.
    ClientRead,
    /// The client stopped reading.
    ClientWrite,
    /// The upstream stopped sending a response body.
    UpstreamRead,
    /// The upstream stopped reading.
    UpstreamWrite,
}

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ClientRead => "timeouts.client_read: the request body stopped arriving",
            Self::ClientWrite => "timeouts.client_write: the client stopped reading",
            Self::UpstreamRead => "timeouts.upstream_read: the response body stopped arriving",
            Self::UpstreamWrite => "timeouts.upstream_write: the upstream stopped reading",
        })
    }
}

impl std::error::Error for Stalled {}

impl Stalled {
    /// The I/O error a socket adapter ends its wait with.
    pub fn io(self) -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, self)
    }

    /// The stall at the root of `e`, if one is there (hyper wraps body and I/O errors; an I/O
    /// error wraps ours).
    pub fn find(e: &(dyn std::error::Error + 'static)) -> Option<Self> {
        let mut cur = Some(e);
        while let Some(e) = cur {
            if let Some(s) = e.downcast_ref::<Self>() {
                return Some(*s);
            }
            if let Some(s) = e
                .downcast_ref::<io::Error>()
                .and_then(io::Error::get_ref)
                .and_then(|inner| inner.downcast_ref::<Self>())
            {
                return Some(*s);
            }
            cur = e.source();
        }
        None
    }
}

/// One inactivity timer: how long a wait may go without progress.
///
/// [`Stall::progress`] (the wait moved) clears the deadline — a field write, no clock read;
/// [`Stall::blocked`] (the wait would block) sets it on the first blocked poll after progress
/// and polls the timer towards it. The timer is allocated on the first stall of the owner's
/// life, then re-armed only when it fires early (see [`expired`]).
#[derive(Debug)]
pub(crate) struct Stall {
    limit: Duration,
    due: Option<tokio::time::Instant>,
    timer: Option<Pin<Box<Sleep>>>,
}

impl Stall {
    pub fn new(limit: Duration) -> Self {
        Self {
            limit,
            due: None,
            timer: None,
        }
    }

    /// The wait made progress.
    pub fn progress(&mut self) {
        self.due = None;
    }

    /// The wait would block: whether it has been blocked for the limit since its last
    /// progress (the task is woken when it will have been).
    pub fn blocked(&mut self, cx: &mut Context<'_>) -> bool {
        let limit = self.limit;
        let due = *self
            .due
            .get_or_insert_with(|| tokio::time::Instant::now() + limit);
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        if expired(timer, due, cx) {
            self.due = None;
            true
        } else {
            false
        }
    }
}

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
    /// The connection's response timer (one exchange at a time), made on first use and
    /// re-armed lazily like [`ClientIo`]'s.
    timer: RefCell<Option<Pin<Box<Sleep>>>>,
    /// `timeouts.client_read`: the request body, polled by the upstream connection's task.
    pub body_in: RefCell<Stall>,
    /// `timeouts.upstream_read`: the response body, polled by this connection's task.
    pub body_out: RefCell<Stall>,
    /// The listener's counters (a body that stalls counts itself).
    pub stats: Arc<ListenerStats>,
}

impl ConnState {
    pub fn new(
        stats: Arc<ListenerStats>,
        client_read: Duration,
        upstream_read: Duration,
    ) -> Rc<Self> {
        Rc::new(Self {
            open: Cell::new(0),
            requests: Cell::new(0),
            timed_out: Cell::new(false),
            timer: RefCell::new(None),
            body_in: RefCell::new(Stall::new(client_read)),
            body_out: RefCell::new(Stall::new(upstream_read)),
            stats,
        })
    }

    /// Requests begun on this connection (which exchange a body belongs to).
    pub fn exchange(&self) -> u64 {
        self.requests.get()
    }

    /// A request head arrived: two parts are open until their tokens drop.
    pub fn begin(self: &Rc<Self>) -> (Done, Done) {
        self.open.set(2);
        self.requests.set(self.requests.get() + 1);
        (Done(Some(Rc::clone(self))), Done(Some(Rc::clone(self))))
    }

    /// `fut`'s output, or `Err(())` when it takes longer than `limit` (like
    /// `tokio::time::timeout`, without a timer registered per call).
    pub async fn within<F: Future>(&self, limit: Duration, fut: F) -> Result<F::Output, ()> {
        let due = tokio::time::Instant::now() + limit;
        let mut fut = std::pin::pin!(fut);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(out) = fut.as_mut().poll(cx) {
                return Poll::Ready(Ok(out));
            }
            let mut timer = self.timer.borrow_mut();
            let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            if expired(timer, due, cx) {
                Poll::Ready(Err(()))
            } else {
                Poll::Pending
            }
        })
        .await
    }

    fn waiting_for_head(&self) -> bool {
        self.open.get() == 0
    }
}

/// Held by one part of an exchange (a body); dropping it (or [`Done::finish`]) closes the part.
#[derive(Debug)]
pub(crate) struct Done(Option<Rc<ConnState>>);

impl Done {
    /// A token that closes nothing (a part that is no exchange's).
    pub fn none() -> Self {
        Self(None)
    }

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
///
/// One timer per connection, armed lazily: the deadline that applies (head or idle) is kept
/// as an `Instant`, and the tokio timer is only polled when a read would block while a head
/// is awaited. A timer that fires before the deadline that now applies (it was set for an
/// earlier exchange) is moved to the new one. So a kept-alive request costs a clock read,
/// not a timer allocation and two timer-wheel insertions (callgrind: the boxed timers per
/// request were ~5% of the proxy's instructions).
#[derive(Debug)]
pub(crate) struct ClientIo {
    stream: TcpStream,
    st: Rc<ConnState>,
    stats: Arc<ListenerStats>,
    header_read: Duration,
    idle: Duration,
    /// The exchange the marks below belong to (requests begun when they were taken).
    exchange: u64,
    /// When the head of the awaited request became due: accept for the first request, its
    /// first byte for later ones.
    head_due: Option<tokio::time::Instant>,
    /// When a kept-alive connection waiting with no byte of a new request closes.
    idle_due: Option<tokio::time::Instant>,
    timer: Pin<Box<Sleep>>,
    /// `timeouts.client_write`.
    write: Stall,
}

impl ClientIo {
    pub fn new(
        stream: TcpStream,
        st: Rc<ConnState>,
        stats: Arc<ListenerStats>,
        header_read: Duration,
        idle: Duration,
        client_write: Duration,
    ) -> Self {
        let first = tokio::time::Instant::now() + header_read;
        Self {
            stream,
            st,
            stats,
            header_read,
            idle,
            exchange: 0,
            head_due: Some(first),
            idle_due: None,
            timer: Box::pin(tokio::time::sleep_until(first)),
            write: Stall::new(client_write),
        }
    }

    /// A write's outcome, through the `client_write` stall timer.
    fn wrote(
        &mut self,
        r: Poll<io::Result<usize>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) => {
                add(&self.stats.bytes_out, n as u64);
                self.write.progress();
                Poll::Ready(Ok(n))
            }
            Poll::Pending if self.write.blocked(cx) => {
                self.stats.client_error(ClientErrorKind::WriteTimeout);
                Poll::Ready(Err(Stalled::ClientWrite.io()))
            }
            other => other,
        }
    }

    /// Answers `408` and gives the error that ends the connection.
    fn head_timed_out(&mut self) -> io::Error {
        // Nothing was written on this exchange yet (no head, no response): a whole response
        // fits the socket buffer; if it does not, the client just sees the close.
        let _ = self.stream.try_write(REQUEST_TIMEOUT);
        self.st.timed_out.set(true);
        self.stats.client_error(ClientErrorKind::HeaderTimeout);
        self.head_due = None;
        io::ErrorKind::TimedOut.into()
    }

    fn expired(&mut self, due: tokio::time::Instant, cx: &mut Context<'_>) -> bool {
        expired(&mut self.timer, due, cx)
    }
}

/// Polls `timer` towards `due`: true when `due` has passed. A timer set later than `due` is
/// moved back; one that fires earlier (set for an earlier deadline) is moved on to `due`, so
/// a deadline that moves forward costs no timer operation until the old one fires.
fn expired(timer: &mut Pin<Box<Sleep>>, due: tokio::time::Instant, cx: &mut Context<'_>) -> bool {
    if timer.deadline() > due {
        timer.as_mut().reset(due);
    }
    while timer.as_mut().poll(cx).is_ready() {
        if tokio::time::Instant::now() >= due {
            return true;
        }
        timer.as_mut().reset(due);
    }
    false
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let exchange = this.st.requests.get();
        if this.exchange != exchange {
            // A new exchange began since the marks were taken: they are stale.
            this.exchange = exchange;
            this.head_due = None;
            this.idle_due = None;
        }
        let waiting = this.st.waiting_for_head();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len() - before;
                add(&this.stats.bytes_in, n as u64);
                if n > 0 && waiting {
                    match this.head_due {
                        // The first byte of a later request: its head is now due.
                        None => {
                            this.head_due = Some(tokio::time::Instant::now() + this.header_read);
                            this.idle_due = None;
                        }
                        // More of a head that is late (a client trickling it in).
                        Some(due) if tokio::time::Instant::now() >= due => {
                            return Poll::Ready(Err(this.head_timed_out()));
                        }
                        Some(_) => {}
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if !waiting => Poll::Pending,
            Poll::Pending => {
                if let Some(due) = this.head_due {
                    if this.expired(due, cx) {
                        return Poll::Ready(Err(this.head_timed_out()));
                    }
                } else {
                    let due = *this
                        .idle_due
                        .get_or_insert_with(|| tokio::time::Instant::now() + this.idle);
                    if this.expired(due, cx) {
                        this.stats.client_error(ClientErrorKind::IdleTimeout);
                        return Poll::Ready(Ok(())); // end of stream: hyper closes quietly
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.wrote(r, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.wrote(r, cx)
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

/// A socket that counts bytes both ways into two counters, notes when it last moved one, and
/// ends a write that makes no progress for its stall limit with [`Stalled`] (the caller
/// counts it: it knows which side this is).
#[derive(Debug)]
pub(crate) struct Counted<S> {
    inner: S,
    read: Arc<dyn CounterPair>,
    /// Where the time of the last byte goes (the TCP proxy's idle timer; HTTP has none).
    last: Option<Rc<Cell<Instant>>>,
    /// The write stall timer and what its expiry is called.
    write: Stall,
    stalled: Stalled,
    /// This socket's own (read, written) bytes, when someone asked (the access log).
    own: Option<Rc<(Cell<u64>, Cell<u64>)>>,
}

/// Where a [`Counted`] socket adds its bytes: (read, written).
pub(crate) trait CounterPair: std::fmt::Debug {
    fn pair(&self) -> (&AtomicU64, &AtomicU64);
}

impl<S> Counted<S> {
    /// `write_stall`: how long a write may make no progress, and which stall that is.
    pub fn new(
        inner: S,
        counters: Arc<dyn CounterPair>,
        last: Option<Rc<Cell<Instant>>>,
        write_stall: (Duration, Stalled),
    ) -> Self {
        Self {
            inner,
            read: counters,
            last,
            write: Stall::new(write_stall.0),
            stalled: write_stall.1,
            own: None,
        }
    }

    /// The same socket also counting its own bytes (read, written) into `own`.
    pub fn with_own(mut self, own: Rc<(Cell<u64>, Cell<u64>)>) -> Self {
        self.own = Some(own);
        self
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
            if let Some(o) = &this.own {
                o.0.set(o.0.get() + n as u64);
            }
            if let Some(last) = &this.last {
                last.set(Instant::now());
            }
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
        let n = match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(r) => r?,
            Poll::Pending if this.write.blocked(cx) => {
                return Poll::Ready(Err(this.stalled.io()));
            }
            Poll::Pending => return Poll::Pending,
        };
        this.write.progress();
        if n > 0 {
            add(this.read.pair().1, n as u64);
            if let Some(o) = &this.own {
                o.1.set(o.1.get() + n as u64);
            }
            if let Some(last) = &this.last {
                last.set(Instant::now());
            }
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
