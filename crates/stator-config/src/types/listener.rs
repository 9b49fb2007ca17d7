//! The proxy tier's part of the configuration: `[[listener]]` and `[access_log]`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::*;

/// `[access_log]`: one line per HTTP request, TCP connection and UDP session of every
/// listener (docs/proxy.md).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AccessLog {
    /// The file, appended to; `None`: standard output (`path = "stdout"`).
    pub path: Option<PathBuf>,
    /// Line format.
    pub format: AccessLogFormat,
    /// Records written per million (`sample` × 1,000,000, 1..=1,000,000); failures always.
    pub sample_per_million: u32,
}

/// `access_log.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AccessLogFormat {
    /// One JSON object per line (the default).
    #[default]
    Json,
    /// Space-separated fields.
    Text,
}

/// `[receive_steering]`: the NIC's receive-side scaling by source address, in software, for
/// listeners with `steering = "cpu"` (docs/steering.md §8).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceiveSteering {
    /// The interfaces clients' packets arrive on (an XDP program on each).
    pub interfaces: Vec<String>,
    /// Worker `i` of every `steering = "cpu"` listener is pinned to `cpus[i]`; `None`: every
    /// CPU the node may run on, decided at start.
    pub cpus: Option<Vec<u32>>,
    /// How the program is attached.
    pub xdp_mode: ReceiveXdpMode,
    /// Packets each CPU's queue holds.
    pub queue_size: u32,
}

/// `receive_steering.xdp_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReceiveXdpMode {
    /// In the stack (any interface; keeps each packet's checksum state).
    #[default]
    Generic,
    /// In the driver (NICs with XDP support).
    Native,
}

impl ReceiveXdpMode {
    /// `generic` or `native`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Generic => "generic",
            Self::Native => "native",
        }
    }
}

/// What a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListenerProtocol {
    /// TCP: bytes copied both ways.
    Tcp,
    /// HTTP/1.1 reverse proxy.
    Http,
    /// UDP sessions: datagrams both ways, one upstream socket per client address and port.
    Udp,
}

impl ListenerProtocol {
    /// `tcp`, `http` or `udp`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Http => "http",
            Self::Udp => "udp",
        }
    }
}

/// How a listener picks an upstream for a new connection or request: stator-sched's
/// algorithms, by their configuration names (`vnswrr`, the default; `swrr`; `least_conn`;
/// `p2c`; `source_hash`).
pub use stator_sched::Algorithm as Scheduler;

/// Which worker a new client connection reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Steering {
    /// The kernel's `SO_REUSEPORT` hash of the 4-tuple.
    #[default]
    Kernel,
    /// A reuseport BPF program: a consistent table over workers keyed by the client address
    /// (the proxy needs a `SourceSteering` implementation for it).
    Source,
    /// `source`, with the workers pinned one per CPU of `[receive_steering]` and each
    /// client's packets received on its worker's CPU (docs/steering.md §8).
    Cpu,
}

impl Steering {
    /// The name as written in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kernel => "kernel",
            Self::Source => "source",
            Self::Cpu => "cpu",
        }
    }
}

/// Client address → backend stickiness, per worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Persistence {
    /// An entry unused this long is forgotten.
    pub timeout: Duration,
    /// Entries per worker (least recently used evicted first).
    pub max_entries: u32,
}

/// `[listener.timeouts]`. The proxy tier runs with this type as is (`stator_proxy::Timeouts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerTimeouts {
    /// Connecting to an upstream.
    pub connect: Duration,
    /// Receiving a request head (HTTP): from accept, or from the first byte of a later
    /// request on a kept-alive connection; then 408.
    pub header_read: Duration,
    /// A connection with no bytes in either direction (TCP), or a kept-alive client
    /// connection between requests (HTTP), is closed after this long.
    pub idle: Duration,
    /// Waiting for an upstream's response head (HTTP); then 504.
    pub response: Duration,
    /// A request body that makes no progress this long while the upstream waits for it
    /// (HTTP); then 408 and close.
    pub client_read: Duration,
    /// A write to the client that makes no progress this long (HTTP, TCP); then close.
    pub client_write: Duration,
    /// A response body that makes no progress this long (HTTP); then the response is cut.
    pub upstream_read: Duration,
    /// A write to the upstream that makes no progress this long (HTTP, TCP); then 504 (HTTP,
    /// before a response head) and close.
    pub upstream_write: Duration,
}

impl Default for ListenerTimeouts {
    /// What a listener without `[listener.timeouts]` gets.
    fn default() -> Self {
        use crate::defaults as d;
        Self {
            connect: d::CONNECT_TIMEOUT,
            header_read: d::HEADER_READ_TIMEOUT,
            idle: d::IDLE_TIMEOUT,
            response: d::RESPONSE_TIMEOUT,
            client_read: d::CLIENT_READ_TIMEOUT,
            client_write: d::CLIENT_WRITE_TIMEOUT,
            upstream_read: d::UPSTREAM_READ_TIMEOUT,
            upstream_write: d::UPSTREAM_WRITE_TIMEOUT,
        }
    }
}

/// What a listener does with a forwarding header (`http.forwarded_for`, `http.forwarded`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ForwardedMode {
    /// Nothing added; an untrusted client's lines removed, a trusted one's kept.
    Off,
    /// A trusted client's lines merged with the client address appended; an untrusted
    /// client's replaced by its address.
    #[default]
    Append,
    /// Every line replaced by the client address, trusted or not.
    Replace,
}

impl ForwardedMode {
    /// The name as written in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Append => "append",
            Self::Replace => "replace",
        }
    }
}

/// `[listener.udp]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpOptions {
    /// Replies expected per client datagram (`None`: sessions end by idle timeout only).
    pub responses: Option<u32>,
    /// Sessions per worker; beyond it an unreplied session is evicted first, else the least
    /// recently used (counted).
    pub max_sessions: u32,
    /// Sessions open per source (address prefix) for the whole listener; 0: no limit.
    pub max_sessions_per_source: u32,
    /// New sessions per second per worker; 0: no limit.
    pub session_rate: u32,
    /// New sessions a worker may open at once beyond the rate.
    pub session_burst: u32,
    /// How long a session with no reply yet lives unused (at most `timeouts.idle`).
    pub unreplied_timeout: Duration,
    /// A PROXY protocol v2 header before the first datagram of each session.
    pub proxy_protocol: bool,
    /// UDP GRO on the listening and upstream sockets.
    pub gro: bool,
    /// UDP GSO for bursts to one peer.
    pub gso: bool,
}

/// `[listener.http]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HttpOptions {
    /// `X-Forwarded-For`.
    pub forwarded_for: ForwardedMode,
    /// RFC 7239 `Forwarded: for=...;proto=http`.
    pub forwarded: ForwardedMode,
    /// Clients whose forwarding headers are kept (proxies in front of this one).
    pub trusted_proxies: Vec<stator_core::Prefix>,
    /// Largest request head, bytes (larger: 431).
    pub max_header_size: u32,
    /// Idle upstream connections kept per worker and upstream (0: no upstream keep-alive).
    pub keepalive_pool: u32,
    /// How long an idle upstream connection is kept.
    pub keepalive_timeout: Duration,
    /// Add `X-Served-By: <node>/<listener>/<worker>` to responses.
    pub served_by: bool,
    /// Methods whose requests (without a body) are sent again to another upstream when the
    /// first fails before its response head.
    pub retry_methods: Vec<String>,
}

/// One upstream of a listener: a pool member with the port the proxy connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Upstream {
    /// The backend (health state, stable name).
    pub backend: BackendId,
    /// The port connected to: the backend's own, else the listener's `backend_port`.
    pub port: u16,
    /// Its weight in the pool (0 = draining: no new connections).
    pub weight: u32,
}

/// `[[listener]]`: a socket proxy in front of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listener {
    /// Name: configured, else `<protocol>/<address>` (e.g. `http/0.0.0.0:8080`).
    pub name: String,
    /// Where it listens.
    pub address: SocketAddr,
    /// What it speaks.
    pub protocol: ListenerProtocol,
    /// The pool it serves from.
    pub pool: PoolId,
    /// Port for pool members without one.
    pub backend_port: Option<u16>,
    /// The pool's backends, flattened, sorted by stable name, with the port connected to.
    pub upstreams: Vec<Upstream>,
    /// How upstreams are picked.
    pub scheduler: Scheduler,
    /// Worker threads (`None`: one per core, decided when the listener starts).
    pub workers: Option<u16>,
    /// Pin worker `i` to core `i mod cores`.
    pub pin_workers: bool,
    /// Client → worker steering.
    pub steering: Steering,
    /// Client address → backend stickiness (`None`: off).
    pub persistence: Option<Persistence>,
    /// Further upstreams tried after a failure (to connect, or — an idempotent request without
    /// a body — before the response head).
    pub retries: u8,
    /// Failures within `fail_timeout` that leave an upstream out of every worker's picks for
    /// `fail_timeout` (nginx's `max_fails`; 0 = passive health off). TCP and HTTP.
    pub max_fails: u32,
    /// The window of `max_fails`, and how long a failed upstream stays out.
    pub fail_timeout: Duration,
    /// Client connections per worker; more are accepted and closed at once (counted).
    pub max_connections: u32,
    /// Client connections open per source (address prefix) for the whole listener; more are
    /// accepted and closed at once (counted). 0: no limit. TCP and HTTP.
    pub max_connections_per_source: u32,
    /// The prefix length that makes an IPv4 client address a source (per-source limits).
    pub source_prefix_v4: u8,
    /// The prefix length that makes an IPv6 client address a source.
    pub source_prefix_v6: u8,
    /// Timeouts.
    pub timeouts: ListenerTimeouts,
    /// HTTP options (defaults for a TCP listener, where they do not apply).
    pub http: HttpOptions,
    /// UDP options (defaults for a TCP or HTTP listener, where they do not apply).
    pub udp: UdpOptions,
}

impl Listener {
    /// The derived name of a listener without a `name`.
    pub fn derived_name(protocol: ListenerProtocol, address: SocketAddr) -> String {
        format!("{}/{address}", protocol.as_str())
    }
}
