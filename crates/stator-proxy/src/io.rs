//! Socket waits. For the HTTP engine ([`read`], [`write`]): one [`Timer`] per connection,
//! armed only when a socket would block, so a read or write that goes through at once reads
//! no clock. For the TCP proxy ([`Counted`]): byte counting, activity time, and the stall
//! timer that bounds a write.
//!
//! A write to the client (`client_write`) or to an upstream (`upstream_write`) that accepts no
//! byte for its limit ends with an error carrying a [`Stalled`] (nginx's `send_timeout` model:
//! the time since the last progress, not the length of the connection), which the TCP proxy
//! turns into a counter and a close. The stall timer costs nothing while bytes move: a poll
//! that makes progress clears a deadline (no clock read), the first blocked poll after it reads
//! the clock once, and the timer itself is allocated on the first stall of its owner's life
//! and re-armed lazily after that.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

use crate::stats::{ListenerStats, add};

/// Which wait stalled: the source of the error that ends it (an [`io::Error`] of kind
/// `TimedOut` around it on a socket, the body error itself on a body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stalled {
    /// The client stopped reading.
    ClientWrite,
    /// The upstream stopped reading.
    UpstreamWrite,
}

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ClientWrite => "timeouts.client_write: the client stopped reading",
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

// The HTTP engine's socket waits: one timer per connection, armed only when a socket would
// block.

/// Bytes asked of the kernel per read (the buffers grow to this once, then are reused).
pub(crate) const READ_SIZE: usize = 16 * 1024;

/// Why a wait ended without what it waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Its timer fired.
    Timeout,
    /// The peer closed (end of stream on a read).
    Closed,
    /// The socket failed (a reset, a broken pipe).
    Failed,
}

/// When a wait gives up.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Due {
    /// This long without progress (armed when the socket would block).
    After(Duration),
    /// At this instant, progress or not.
    At(tokio::time::Instant),
}

/// The connection's one timer.
pub(crate) struct Timer(pub(crate) Pin<Box<Sleep>>);

impl Timer {
    pub(crate) fn arm(&mut self, due: Due) {
        let at = match due {
            Due::After(d) => tokio::time::Instant::now() + d,
            Due::At(at) => at,
        };
        self.0.as_mut().reset(at);
    }
}

/// Reads at least one byte from `s`, appended to `buf`.
pub(crate) async fn read(
    s: &TcpStream,
    buf: &mut Vec<u8>,
    timer: &mut Timer,
    due: Due,
) -> Result<usize, Wait> {
    if buf.capacity() - buf.len() < READ_SIZE / 4 {
        buf.reserve(READ_SIZE);
    }
    let mut armed = false;
    loop {
        let spare = buf.capacity() - buf.len();
        match s.try_read_buf(buf) {
            Ok(0) => return Err(Wait::Closed),
            Ok(n) => {
                if n < spare {
                    // A short read drained the socket: say so to the reactor now, so that the
                    // next read waits for readiness instead of trying and failing (a system
                    // call per request saved; new bytes bring a new edge, so none are missed).
                    let _ = s.try_io(Interest::READABLE, || {
                        Err::<(), _>(io::ErrorKind::WouldBlock.into())
                    });
                }
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return Err(Wait::Failed),
        }
        if !armed {
            timer.arm(due);
            armed = true;
        }
        tokio::select! {
            biased;
            r = s.readable() => r.map_err(|_| Wait::Failed)?,
            () = timer.0.as_mut() => return Err(Wait::Timeout),
        }
    }
}

/// Writes all of `data` to `s`; `due` without progress ends it.
pub(crate) async fn write(
    s: &TcpStream,
    mut data: &[u8],
    timer: &mut Timer,
    due: Due,
) -> Result<(), Wait> {
    let mut armed = false;
    while !data.is_empty() {
        match s.try_write(data) {
            Ok(n) => {
                data = &data[n..];
                armed = false;
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return Err(Wait::Failed),
        }
        if !armed {
            timer.arm(due);
            armed = true;
        }
        tokio::select! {
            biased;
            r = s.writable() => r.map_err(|_| Wait::Failed)?,
            () = timer.0.as_mut() => return Err(Wait::Timeout),
        }
    }
    Ok(())
}
