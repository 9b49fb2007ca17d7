//! Counters of listeners and upstreams: relaxed atomics written by the workers, read by the
//! API and `/metrics` (a snapshot is a copy; counters only grow, gauges go both ways).
//!
//! Upstream counters are kept per listener by the upstream's stable name, so a reload that
//! keeps a backend keeps its counters (and its active count, which least-connections reads).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;

/// Upper bounds (seconds) of the request-duration histogram's buckets (`+Inf` implied).
pub const DURATION_BUCKETS: [f64; 14] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Why a request or connection to an upstream failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The upstream refused the connection (RST to the SYN).
    ConnectRefused,
    /// Connecting took longer than `timeouts.connect`.
    ConnectTimeout,
    /// Connecting failed otherwise (unreachable, no route).
    ConnectOther,
    /// The connection was reset or closed before a complete response.
    Reset,
    /// No response head within `timeouts.response`.
    Timeout,
    /// The response was not valid HTTP.
    Protocol,
    /// The upstream answered with a 5xx status.
    Http5xx,
    /// The response body stopped arriving for `timeouts.upstream_read`: the response was cut.
    ReadTimeout,
    /// The upstream stopped reading what the proxy sent for `timeouts.upstream_write`: 504
    /// (HTTP, before a response head) or closed.
    WriteTimeout,
}

impl ErrorKind {
    /// Every kind, in metric order.
    pub const ALL: [Self; 9] = [
        Self::ConnectRefused,
        Self::ConnectTimeout,
        Self::ConnectOther,
        Self::Reset,
        Self::Timeout,
        Self::Protocol,
        Self::Http5xx,
        Self::ReadTimeout,
        Self::WriteTimeout,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::ConnectRefused => "connect_refused",
            Self::ConnectTimeout => "connect_timeout",
            Self::ConnectOther => "connect_other",
            Self::Reset => "reset",
            Self::Timeout => "timeout",
            Self::Protocol => "protocol",
            Self::Http5xx => "http_5xx",
            Self::ReadTimeout => "read_timeout",
            Self::WriteTimeout => "write_timeout",
        }
    }

    /// Whether it happened while connecting (the request was not sent: another upstream may
    /// be tried).
    pub fn is_connect(self) -> bool {
        matches!(
            self,
            Self::ConnectRefused | Self::ConnectTimeout | Self::ConnectOther
        )
    }
}

/// What went wrong on the client side of a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientErrorKind {
    /// A malformed request: 400 and close.
    BadRequest,
    /// A request head larger than `http.max_header_size`: 431 and close.
    HeaderTooLarge,
    /// The request head did not arrive within `timeouts.header_read`: 408 and close.
    HeaderTimeout,
    /// A connection idle longer than `timeouts.idle`: closed.
    IdleTimeout,
    /// A connection beyond `max_connections`: accepted and closed.
    Rejected,
    /// No usable upstream: 503 (HTTP) or close (TCP).
    NoUpstream,
    /// Every upstream tried failed: 502 (or 504 after a response timeout).
    UpstreamFailed,
    /// A request the proxy does not forward although it is well formed: `CONNECT` (405), a
    /// transfer coding other than `chunked` (501). Answered, then closed.
    Unsupported,
    /// A request body that stopped arriving for `timeouts.client_read`: 408 (or the
    /// connection cut, once a response head was sent).
    ReadTimeout,
    /// A client that stopped reading for `timeouts.client_write`: closed.
    WriteTimeout,
    /// A connection from a source that already has `max_connections_per_source` open:
    /// accepted and closed.
    SourceLimit,
    /// A connection (TCP, HTTP) accepted and closed, or a request answered 503 (HTTP, a new
    /// upstream connection), because the node's descriptor budget for the proxy tier was
    /// spent.
    Descriptors,
}

impl ClientErrorKind {
    /// Every kind, in metric order.
    pub const ALL: [Self; 12] = [
        Self::BadRequest,
        Self::HeaderTooLarge,
        Self::HeaderTimeout,
        Self::IdleTimeout,
        Self::Rejected,
        Self::NoUpstream,
        Self::UpstreamFailed,
        Self::Unsupported,
        Self::ReadTimeout,
        Self::WriteTimeout,
        Self::SourceLimit,
        Self::Descriptors,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::HeaderTooLarge => "header_too_large",
            Self::HeaderTimeout => "header_timeout",
            Self::IdleTimeout => "idle_timeout",
            Self::Rejected => "rejected",
            Self::NoUpstream => "no_upstream",
            Self::UpstreamFailed => "upstream_failed",
            Self::Unsupported => "unsupported",
            Self::ReadTimeout => "read_timeout",
            Self::WriteTimeout => "write_timeout",
            Self::SourceLimit => "source_limit",
            Self::Descriptors => "descriptors",
        }
    }
}

/// Why a UDP listener dropped a datagram (each one counted under its reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UdpDrop {
    /// A client datagram that needed a new session while no upstream was usable.
    NoUpstream,
    /// A new session whose upstream socket could not be opened (the kernel refused it).
    SessionSocket,
    /// Sending a client's datagram to its upstream failed (send buffer full, or an error). With
    /// `proxy_protocol`, a session whose header has not gone out yet forwards nothing without
    /// it: each datagram is tried with the header until one is sent.
    UpstreamSend,
    /// A reply that did not fit in the worker's reply queue.
    ReplyQueueFull,
    /// A reply the kernel refused on the listening socket (send buffer full, or an error).
    ClientSend,
    /// A client datagram the kernel dropped because the listening socket's receive buffer was
    /// full: the worker did not keep up (read from the socket, `SO_MEMINFO`).
    SocketOverflow,
    /// A client datagram that begins with the PROXY v2 signature on a listener that sends
    /// PROXY v2 headers itself: a client naming an address of its choice to the upstream.
    ClientProxyHeader,
    /// A datagram that needed a new session from a source that already has
    /// `udp.max_sessions_per_source` sessions.
    SourceLimit,
    /// A datagram that needed a new session beyond the worker's `udp.session_rate` (and
    /// burst).
    SessionRate,
    /// A datagram that needed a new session while the node's descriptor budget for the proxy
    /// tier was spent and the worker had no unreplied session to give up.
    Descriptors,
}

impl UdpDrop {
    /// Every reason, in metric order.
    pub const ALL: [Self; 10] = [
        Self::NoUpstream,
        Self::SessionSocket,
        Self::UpstreamSend,
        Self::ReplyQueueFull,
        Self::ClientSend,
        Self::SocketOverflow,
        Self::ClientProxyHeader,
        Self::SourceLimit,
        Self::SessionRate,
        Self::Descriptors,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::NoUpstream => "no_upstream",
            Self::SessionSocket => "session_socket",
            Self::UpstreamSend => "upstream_send",
            Self::ReplyQueueFull => "reply_queue_full",
            Self::ClientSend => "client_send",
            Self::SocketOverflow => "socket_overflow",
            Self::ClientProxyHeader => "client_proxy_header",
            Self::SourceLimit => "source_limit",
            Self::SessionRate => "session_rate",
            Self::Descriptors => "descriptors",
        }
    }
}

/// Counters of a UDP listener (sessions opened are `ListenerStats::connections`, sessions open
/// `ListenerStats::active`, bytes `bytes_in`/`bytes_out`).
#[derive(Debug, Default)]
pub struct UdpStats {
    /// Datagrams received from clients.
    pub datagrams_in: AtomicU64,
    /// Datagrams sent to clients.
    pub datagrams_out: AtomicU64,
    /// Datagrams sent to upstreams.
    pub upstream_datagrams_out: AtomicU64,
    /// Datagrams received from upstreams.
    pub upstream_datagrams_in: AtomicU64,
    /// Sessions ended by the idle timeout.
    pub sessions_expired: AtomicU64,
    /// Sessions that never had a reply, ended by `udp.unreplied_timeout`.
    pub sessions_unreplied: AtomicU64,
    /// Unreplied sessions ended to give their descriptor to a new session when the budget was
    /// spent.
    pub sessions_reclaimed: AtomicU64,
    /// Sessions ended because every expected response arrived (`udp.responses`).
    pub sessions_completed: AtomicU64,
    /// Receive system calls on the listening socket that returned datagrams (`recvmmsg`).
    pub recv_calls: AtomicU64,
    /// Reply `sendmmsg` calls.
    pub sendmmsg_calls: AtomicU64,
    /// Bursts sent as one GSO buffer (either direction).
    pub gso_sends: AtomicU64,
    drops: [AtomicU64; UdpDrop::ALL.len()],
}

impl UdpStats {
    /// Counts `n` dropped datagrams.
    pub fn count_drop(&self, why: UdpDrop, n: u64) {
        self.drops[why as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Datagrams dropped for `why` so far.
    pub fn drops(&self, why: UdpDrop) -> u64 {
        self.drops[why as usize].load(Ordering::Relaxed)
    }
}

/// Counters of one upstream of one listener.
#[derive(Debug, Default)]
pub struct UpstreamStats {
    /// Connections opened to it.
    pub connects: AtomicU64,
    /// Connections to it open now (kept-alive idle ones included).
    pub open: AtomicU32,
    /// Requests (HTTP), client connections (TCP) or sessions (UDP) it is serving now;
    /// least-connections and P2C read this.
    pub active: AtomicU32,
    /// Requests (HTTP), client connections (TCP) or sessions (UDP) sent to it.
    pub requests: AtomicU64,
    /// Requests sent over a kept-alive connection.
    pub reused: AtomicU64,
    /// Bytes sent to it.
    pub bytes_out: AtomicU64,
    /// Bytes received from it.
    pub bytes_in: AtomicU64,
    /// Times it was left out of picks after failures (passive health, `max_fails`).
    pub passive_excluded: AtomicU64,
    errors: [AtomicU64; ErrorKind::ALL.len()],
}

impl UpstreamStats {
    /// Counts an error.
    pub fn error(&self, kind: ErrorKind) {
        self.errors[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Errors of `kind` so far.
    pub fn errors(&self, kind: ErrorKind) -> u64 {
        self.errors[kind as usize].load(Ordering::Relaxed)
    }
}

/// A latency histogram with fixed buckets ([`DURATION_BUCKETS`]).
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; 15],
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = DURATION_BUCKETS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(DURATION_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Cumulative counts per bucket (the last is `+Inf`, the total), and the sum in seconds.
    pub fn snapshot(&self) -> (Vec<u64>, f64) {
        let mut acc = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|b| {
                acc += b.load(Ordering::Relaxed);
                acc
            })
            .collect();
        (cumulative, self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9)
    }
}

/// Counters of one listener.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Client connections accepted.
    pub connections: AtomicU64,
    /// Client connections open now.
    pub active: AtomicU64,
    /// HTTP requests received (TCP: 0).
    pub requests: AtomicU64,
    /// Responses by status class, 1xx to 5xx.
    pub responses: [AtomicU64; 5],
    /// Bytes received from clients.
    pub bytes_in: AtomicU64,
    /// Bytes sent to clients.
    pub bytes_out: AtomicU64,
    /// Further upstreams tried after a failure to connect (the request never went out).
    pub retries: AtomicU64,
    /// Idempotent requests sent again to another upstream after the first failed before its
    /// response head (a reset, a closed kept-alive connection, a timeout).
    pub retries_resent: AtomicU64,
    /// Session-table lookups that found a usable backend.
    pub session_hits: AtomicU64,
    /// Session-table entries evicted because the table was full.
    pub session_evictions: AtomicU64,
    /// Request (HTTP) or connection (TCP) durations.
    pub duration: Histogram,
    /// UDP listeners' datagram counters.
    pub udp: UdpStats,
    /// Connections or sessions open per source, for the per-source limits.
    pub(crate) sources: crate::limits::SourceCounts,
    client_errors: [AtomicU64; ClientErrorKind::ALL.len()],
    upstreams: Mutex<HashMap<String, Arc<UpstreamStats>>>,
}

impl ListenerStats {
    /// Counts a client-side error.
    pub fn client_error(&self, kind: ClientErrorKind) {
        self.client_errors[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Client-side errors of `kind` so far.
    pub fn client_errors(&self, kind: ClientErrorKind) -> u64 {
        self.client_errors[kind as usize].load(Ordering::Relaxed)
    }

    /// Counts a response status.
    pub fn response(&self, status: u16) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.responses[class].fetch_add(1, Ordering::Relaxed);
    }

    /// The counters of the upstream named `name`, created on first use and kept across
    /// reloads.
    pub fn upstream(&self, name: &str) -> Arc<UpstreamStats> {
        let mut map = self
            .upstreams
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(map.entry(name.to_owned()).or_default())
    }

    /// Forgets upstreams not in `keep` whose counters nobody holds (a removed backend's series
    /// disappear once its last connection is gone).
    pub fn retain_upstreams(&self, keep: &[&str]) {
        let mut map = self
            .upstreams
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.retain(|name, s| keep.contains(&name.as_str()) || Arc::strong_count(s) > 1);
    }
}

/// Adds `n` to a counter.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Increments a gauge for as long as the guard lives.
#[derive(Debug)]
pub(crate) struct Gauge32(Arc<UpstreamStats>, GaugeField);

#[derive(Debug, Clone, Copy)]
pub(crate) enum GaugeField {
    Active,
    Open,
}

impl Gauge32 {
    pub(crate) fn new(stats: Arc<UpstreamStats>, field: GaugeField) -> Self {
        Self::field(&stats, field).fetch_add(1, Ordering::Relaxed);
        Self(stats, field)
    }

    fn field(s: &UpstreamStats, f: GaugeField) -> &AtomicU32 {
        match f {
            GaugeField::Active => &s.active,
            GaugeField::Open => &s.open,
        }
    }
}

impl Drop for Gauge32 {
    fn drop(&mut self) {
        Self::field(&self.0, self.1).fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(100));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(100));
        let (b, sum) = h.snapshot();
        assert_eq!(b.len(), DURATION_BUCKETS.len() + 1);
        assert_eq!(b[0], 1);
        assert_eq!(b[3], 2); // le 0.005
        assert_eq!(b[DURATION_BUCKETS.len() - 1], 2);
        assert_eq!(*b.last().unwrap(), 3);
        assert!((sum - 100.0031).abs() < 1e-6);
    }

    #[test]
    fn upstream_counters_survive_by_name() {
        let s = ListenerStats::default();
        let a = s.upstream("a");
        a.requests.fetch_add(3, Ordering::Relaxed);
        drop(a);
        s.retain_upstreams(&["a"]);
        assert_eq!(get_u(&s.upstream("a").requests), 3);
        s.retain_upstreams(&[]);
        assert_eq!(get_u(&s.upstream("a").requests), 0);
    }

    fn get_u(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}
