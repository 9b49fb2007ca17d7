//! The TCP proxy's copy: bytes both ways between a client and its upstream, each way moved
//! through a pipe with `splice(2)` ([`stator_sys::splice::Pipe`]), so they never pass through
//! user space — the kernel hands pages from one socket to the other where it can. HAProxy does
//! the same with `option splice-auto`; nginx's `stream` copies through a buffer.
//!
//! A way borrows a pipe from its worker's [`Pipes`] only while bytes are in flight: it waits
//! for its source to be readable holding nothing, fills an empty pipe with one `splice` (up to
//! the pipe's 64 KiB), drains it into the destination, and gives it back empty. So an idle
//! connection holds no pipe and a worker needs about as many pipes as it has connections whose
//! destination is slow to take their bytes. A lent pipe's two descriptors are taken from the
//! node's descriptor budget, and connections come first: a pipe is lent only from descriptors
//! to spare, and a way that can have no pipe copies through a 16 KiB buffer of its own instead
//! — nothing fails, and nothing is counted as refused. A pipe given back gives its
//! descriptors back to the budget at once; the empty pipes a worker keeps (at most [`KEPT`])
//! are outside the budget, counted once in the node's reserve
//! (`stator_config::descriptors::PIPES_PER_TCP_WORKER`), so they never stand between a
//! connection and its descriptors. A pipe given back holding bytes (its way failed) is
//! closed, never reused.
//!
//! The rest is what tokio's `copy_bidirectional` did here before: a way that reads the end of
//! its source's stream shuts down writing on its destination (half-close) and ends; the copy
//! ends when both ways have, or at the first error. Bytes are counted as they move (the
//! listener's and the upstream's counters, the connection's own for the access log) and the
//! time of the last one is noted for the idle timer. A write that makes no progress for its
//! stall limit ends the copy with [`Stalled`] (`client_write` / `upstream_write`).

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use stator_sys::splice::Pipe;
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::io::Stalled;
use crate::limits::{DescriptorBudget, Descriptors};
use crate::stats::add;

/// Bytes asked of one `splice` into a pipe: the kernel's default pipe capacity.
const CHUNK: usize = 64 * 1024;
/// Bytes of the buffer a way copies through when it can have no pipe.
const BUFFER: usize = 16 * 1024;
/// Empty pipes a worker keeps for its next ways; more are closed when given back. Their
/// descriptors (2 each) are in the node's reserve, not its budget.
pub(crate) const KEPT: usize = 32;

/// A worker's pipes, lent to the ways of its TCP connections while their bytes are in flight.
#[derive(Debug)]
pub(crate) struct Pipes {
    free: RefCell<Vec<Pipe>>,
    budget: Arc<DescriptorBudget>,
}

/// A pipe lent to a way, and the descriptors it holds of the budget while lent.
#[derive(Debug)]
pub(crate) struct Lent {
    pipe: Pipe,
    _fds: Descriptors,
}

impl Pipes {
    pub(crate) fn new(budget: Arc<DescriptorBudget>) -> Self {
        Self {
            free: RefCell::new(Vec::new()),
            budget,
        }
    }

    /// An empty pipe — a kept one, or a new one if the kernel allows — with two descriptors
    /// of the budget, if the budget has them to spare.
    fn take(&self) -> Option<Lent> {
        // only descriptors to spare: connections come first, and a pipe the budget cannot
        // give is no refusal of anything (the way uses its buffer), so it is not counted
        if self.budget.used() + 2 > self.budget.capacity() {
            return None;
        }
        let fds = self.budget.take(2)?;
        let kept = self.free.borrow_mut().pop();
        let pipe = match kept {
            Some(p) => p,
            None => Pipe::new().ok()?,
        };
        Some(Lent { pipe, _fds: fds })
    }

    /// Gives `p` back: its descriptors to the budget; the pipe kept if it is empty and the
    /// worker keeps fewer than [`KEPT`], else closed.
    fn give(&self, p: Lent) {
        let Lent { pipe, _fds } = p;
        let mut free = self.free.borrow_mut();
        if pipe.held() == 0 && free.len() < KEPT {
            free.push(pipe);
        }
    }

    /// Empty pipes kept now.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.free.borrow().len()
    }
}

/// One way of a connection: from a socket, to the other, and where its bytes are counted.
pub(crate) struct Way<'a> {
    pub from: &'a TcpStream,
    pub to: &'a TcpStream,
    /// Bytes read from `from`, and written to `to` (the listener's or an upstream's).
    pub read: &'a AtomicU64,
    pub written: &'a AtomicU64,
    /// The connection's own count of this way's bytes (the access log): of those read when
    /// `own_on_read`, else of those written.
    pub own: &'a Cell<u64>,
    pub own_on_read: bool,
    /// When a byte last moved, either way (the idle timer's).
    pub last: &'a Cell<Instant>,
    /// How long a write to `to` may make no progress, and what that is called.
    pub stall: (Duration, Stalled),
}

impl Way<'_> {
    fn moved_in(&self, n: usize) {
        add(self.read, n as u64);
        if self.own_on_read {
            self.own.set(self.own.get() + n as u64);
        }
        self.last.set(Instant::now());
    }

    fn moved_out(&self, n: usize) {
        add(self.written, n as u64);
        if !self.own_on_read {
            self.own.set(self.own.get() + n as u64);
        }
        self.last.set(Instant::now());
    }
}

/// Copies both ways until both have ended (`Ok`) or one fails.
pub(crate) async fn both(pipes: &Pipes, a: Way<'_>, b: Way<'_>) -> io::Result<()> {
    tokio::try_join!(one_way(pipes, &a), one_way(pipes, &b)).map(|_| ())
}

async fn one_way(pipes: &Pipes, w: &Way<'_>) -> io::Result<()> {
    let mut buffer: Option<Box<[u8]>> = None;
    loop {
        w.from.readable().await?;
        let Some(mut p) = pipes.take() else {
            let buf = buffer.get_or_insert_with(|| vec![0u8; BUFFER].into_boxed_slice());
            match w.from.try_read(buf) {
                Ok(0) => return end(w.to),
                Ok(n) => {
                    if n < BUFFER {
                        drained(w.from);
                    }
                    w.moved_in(n);
                    write_all(w, &buf[..n]).await?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            continue;
        };
        match w
            .from
            .try_io(Interest::READABLE, || p.pipe.fill(w.from.as_fd(), CHUNK))
        {
            Ok(0) => {
                pipes.give(p);
                return end(w.to);
            }
            Ok(n) => {
                if n < CHUNK {
                    drained(w.from);
                }
                w.moved_in(n);
                // an error leaves bytes in the pipe: it is closed with them (dropped here)
                drain(w, &mut p.pipe).await?;
                pipes.give(p);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => pipes.give(p),
            Err(e) => {
                pipes.give(p);
                return Err(e);
            }
        }
    }
}

/// A read took less than it asked: the socket had no more, and the reactor is told so now,
/// so that the next wait begins with waiting, not with a `splice` (or `read`) that fails (one
/// system call per read saved). Nothing is missed: the worker's runtime is single-threaded, so
/// no readiness can arrive between the read and this; bytes that come later bring a new edge,
/// and the end of the stream is never cleared (tokio keeps "closed" readiness).
fn drained(from: &TcpStream) {
    let _ = from.try_io(Interest::READABLE, || {
        Err::<(), _>(io::ErrorKind::WouldBlock.into())
    });
}

/// The end of `from`'s stream: no more writes to `to` (its peer reads the end in turn).
fn end(to: &TcpStream) -> io::Result<()> {
    match socket2::SockRef::from(to).shutdown(std::net::Shutdown::Write) {
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
        r => r,
    }
}

/// Moves everything `pipe` holds into `w.to`.
async fn drain(w: &Way<'_>, pipe: &mut Pipe) -> io::Result<()> {
    let mut due = None;
    while pipe.held() > 0 {
        match w.to.try_io(Interest::WRITABLE, || pipe.drain(w.to.as_fd())) {
            Ok(n) => {
                w.moved_out(n);
                due = None;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => writable(w, &mut due).await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `data` to `w.to` (the buffered way).
async fn write_all(w: &Way<'_>, mut data: &[u8]) -> io::Result<()> {
    let mut due = None;
    while !data.is_empty() {
        match w.to.try_write(data) {
            Ok(n) => {
                w.moved_out(n);
                data = &data[n..];
                due = None;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => writable(w, &mut due).await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Waits for `w.to` to take bytes again, up to the stall limit since the last progress (set
/// in `due` on the first wait after it).
async fn writable(w: &Way<'_>, due: &mut Option<tokio::time::Instant>) -> io::Result<()> {
    let at = *due.get_or_insert_with(|| tokio::time::Instant::now() + w.stall.0);
    match tokio::time::timeout_at(at, w.to.writable()).await {
        Ok(r) => r,
        Err(_) => Err(w.stall.1.io()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    /// client ⇄ [proxy: c, u] ⇄ upstream, through `copy::both`, with a budget of `budget`
    /// descriptors for pipes: `budget` 0 makes both ways copy through their buffers.
    async fn proxied(budget: u64) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, c) = pair().await;
        let (u, mut upstream) = pair().await;
        let descriptors = Arc::new(DescriptorBudget::new(budget));
        let pipes = Pipes::new(Arc::clone(&descriptors));
        let counters: [AtomicU64; 4] = Default::default();
        let own = (Cell::new(0), Cell::new(0));
        let last = Cell::new(Instant::now());
        let up: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        let down: Vec<u8> = (0..700_000u32).map(|i| (i % 241) as u8).collect();
        let copy = both(
            &pipes,
            Way {
                from: &c,
                to: &u,
                read: &counters[0],
                written: &counters[1],
                own: &own.0,
                own_on_read: true,
                last: &last,
                stall: (Duration::from_secs(5), Stalled::UpstreamWrite),
            },
            Way {
                from: &u,
                to: &c,
                read: &counters[2],
                written: &counters[3],
                own: &own.1,
                own_on_read: false,
                last: &last,
                stall: (Duration::from_secs(5), Stalled::ClientWrite),
            },
        );
        // the client sends, then shuts its side: the upstream reads it all and its end, then
        // answers and closes; the client reads the answer and its end
        let client_side = async {
            client.write_all(&up).await.unwrap();
            client.shutdown().await.unwrap();
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            got
        };
        let upstream_side = async {
            let mut got = Vec::new();
            upstream.read_to_end(&mut got).await.unwrap();
            upstream.write_all(&down).await.unwrap();
            upstream.shutdown().await.unwrap();
            got
        };
        let (r, got_down, got_up) = tokio::time::timeout(Duration::from_secs(20), async {
            tokio::join!(copy, client_side, upstream_side)
        })
        .await
        .expect("the copy ends");
        r.unwrap();
        assert!(got_up == up, "the upstream got the client's bytes whole");
        assert!(
            got_down == down,
            "the client got the upstream's bytes whole"
        );
        let n = |i: usize| counters[i].load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!((n(0), n(1)), (up.len() as u64, up.len() as u64));
        assert_eq!((n(2), n(3)), (down.len() as u64, down.len() as u64));
        assert_eq!(
            (own.0.get(), own.1.get()),
            (up.len() as u64, down.len() as u64)
        );
        if budget == 0 {
            assert_eq!(pipes.kept(), 0, "no pipe without descriptors");
        } else {
            assert!(pipes.kept() >= 1, "the pipes came back empty and were kept");
        }
        // kept pipes are in the node's reserve, not the budget: all of it is free again
        assert_eq!(descriptors.used(), 0);
    }

    #[test]
    fn the_kept_pipes_are_what_the_node_reserves_for_them() {
        assert_eq!(
            KEPT as u64 * 2,
            stator_config::descriptors::PIPES_PER_TCP_WORKER
        );
    }

    #[tokio::test]
    async fn both_ways_arrive_whole_through_pipes_with_half_close() {
        proxied(64).await;
    }

    #[tokio::test]
    async fn both_ways_arrive_whole_through_buffers_when_no_pipe_can_be_had() {
        proxied(0).await;
    }
}
