//! TCP proxying: pick an upstream, connect (next upstream on failure, bounded), then copy
//! bytes both ways until both directions have ended. A read of end-of-stream on one side
//! shuts down writing on the other (half-close), so a client that sends a request and shuts
//! its side still gets the whole answer. No bytes either way for `timeouts.idle` closes both;
//! so does a write that makes no progress for `timeouts.client_write` (the client stopped
//! reading) or `timeouts.upstream_write` (the upstream did) — while the other side still
//! sends, the idle timer alone would never fire. Reads have no timer of their own: silence
//! is the protocol's business, and `idle` bounds it.
//!
//! Copying is [`copy::both`]: each way through a pipe with `splice(2)`, never through user
//! space, counting bytes per listener and per upstream and noting the time of the last byte
//! for the idle timer.

use std::cell::Cell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use stator_sched::Tried;
use tokio::net::TcpStream;

use crate::access::{Kind, Record};
use crate::copy::{self, Way};
use crate::io::Stalled;
use crate::stats::{ClientErrorKind, ErrorKind, Gauge32, GaugeField, add};
use crate::worker::WorkerCtx;

/// Writes the access-log line of a connection that ended `outcome`.
fn log(
    ctx: &WorkerCtx,
    peer: SocketAddr,
    upstream: Option<SocketAddr>,
    outcome: &'static str,
    bytes: (u64, u64),
    started: Instant,
) {
    ctx.log(Record {
        upstream,
        outcome,
        bytes_in: bytes.0,
        bytes_out: bytes.1,
        duration: started.elapsed(),
        ..Record::new(Kind::Tcp, peer)
    });
}

pub(crate) async fn serve(ctx: &Rc<WorkerCtx>, client: TcpStream, peer: SocketAddr) {
    let started = Instant::now();
    let shared = ctx.shared();
    let spec = &shared.spec;
    let mut tried = Tried::new();
    let mut attempts = 0;
    let (upstream, index) = loop {
        let Some(i) = ctx.pick(&shared, peer.ip(), &tried) else {
            let kind = if attempts == 0 {
                ClientErrorKind::NoUpstream
            } else {
                ClientErrorKind::UpstreamFailed
            };
            ctx.stats.client_error(kind);
            let outcome = if attempts == 0 {
                "no_upstream"
            } else {
                "upstream_failed"
            };
            log(ctx, peer, None, outcome, (0, 0), started);
            return;
        };
        tried.insert(i);
        let addr = spec.upstreams[i].addr;
        match connect(addr, spec.timeouts.connect).await {
            Ok(s) => break (s, i),
            Err(kind) => {
                shared.stats[i].error(kind);
                shared.failed(i);
                attempts += 1;
                if attempts > spec.retries {
                    ctx.stats.client_error(ClientErrorKind::UpstreamFailed);
                    log(ctx, peer, Some(addr), "upstream_failed", (0, 0), started);
                    return;
                }
                add(&ctx.stats.retries, 1);
            }
        }
    };
    let ustats = Arc::clone(&shared.stats[index]);
    add(&ustats.connects, 1);
    add(&ustats.requests, 1);
    ctx.remember(&shared, peer.ip(), index);
    let _open = Gauge32::new(Arc::clone(&ustats), GaugeField::Open);
    let _active = Gauge32::new(Arc::clone(&ustats), GaugeField::Active);
    let last = Cell::new(Instant::now());
    let t = spec.timeouts;
    let own = (Cell::new(0), Cell::new(0));
    let upstream_addr = spec.upstreams[index].addr;
    let idle = spec.timeouts.idle;
    drop(shared);
    let copy = copy::both(
        &ctx.pipes,
        Way {
            from: &client,
            to: &upstream,
            read: &ctx.stats.bytes_in,
            written: &ustats.bytes_out,
            own: &own.0,
            own_on_read: true,
            last: &last,
            stall: (t.upstream_write, Stalled::UpstreamWrite),
        },
        Way {
            from: &upstream,
            to: &client,
            read: &ustats.bytes_in,
            written: &ctx.stats.bytes_out,
            own: &own.1,
            own_on_read: false,
            last: &last,
            stall: (t.client_write, Stalled::ClientWrite),
        },
    );
    tokio::pin!(copy);
    let mut outcome = "ok";
    loop {
        let due = last.get() + idle;
        tokio::select! {
            r = &mut copy => {
                if let Err(e) = r {
                    match Stalled::find(&e) {
                        Some(Stalled::ClientWrite) => {
                            ctx.stats.client_error(ClientErrorKind::WriteTimeout);
                            outcome = "client_write_timeout";
                        }
                        Some(_) => {
                            ustats.error(ErrorKind::WriteTimeout);
                            outcome = "upstream_write_timeout";
                        }
                        None if e.kind() == io::ErrorKind::ConnectionReset => {
                            ustats.error(ErrorKind::Reset);
                            outcome = "reset";
                        }
                        None => outcome = "error",
                    }
                }
                break;
            }
            () = tokio::time::sleep_until(due.into()) => {
                if last.get() + idle <= Instant::now() {
                    ctx.stats.client_error(ClientErrorKind::IdleTimeout);
                    outcome = "idle_timeout";
                    break;
                }
            }
        }
    }
    ctx.stats.duration.observe(started.elapsed());
    log(
        ctx,
        peer,
        Some(upstream_addr),
        outcome,
        (own.0.get(), own.1.get()),
        started,
    );
}

/// Connects to `addr` within `timeout`; the error says which kind of failure it was.
pub(crate) async fn connect(
    addr: SocketAddr,
    timeout: std::time::Duration,
) -> Result<TcpStream, ErrorKind> {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
            Err(ErrorKind::ConnectRefused)
        }
        Ok(Err(e)) if e.kind() == io::ErrorKind::TimedOut => Err(ErrorKind::ConnectTimeout),
        Ok(Err(_)) => Err(ErrorKind::ConnectOther),
        Err(_) => Err(ErrorKind::ConnectTimeout),
    }
}
