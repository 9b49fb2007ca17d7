//! Socket waits. For the HTTP engine ([`read`], [`write`]): one [`Timer`] per connection,
//! armed only when a socket would block, so a read or write that goes through at once reads
//! no clock. For the TCP proxy's copy (`copy`): [`Stalled`], the error that ends a write to the
//! client (`client_write`) or to an upstream (`upstream_write`) that accepted no byte for its
//! limit (nginx's `send_timeout` model: the time since the last progress, not the length of the
//! connection), which the TCP proxy turns into a counter and a close.

use std::io;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Sleep;

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
