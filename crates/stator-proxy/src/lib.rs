//! # stator-proxy — the proxy tier: TCP, HTTP/1.1 and UDP listeners in front of pools
//!
//! Layer: an I/O adapter beside the packet forwarder. The controller (`stator-control`) turns
//! `[[listener]]` tables into [`ListenerSpec`]s and health states into [`UpstreamState`]s; this
//! crate owns the sockets, threads and connections; the choice of an upstream is
//! `stator-sched`'s (VNSWRR by default), made per worker without locks.
//!
//! The shape, after nginx's workers and the 2014 session-persistence paper:
//! - **Workers** ([`worker`]): N threads per listener, each with its own `SO_REUSEPORT`
//!   listening socket and its own current-thread tokio runtime — no shared accept queue, no
//!   thundering herd, nothing shared on the request path but relaxed counters. Which worker a
//!   client reaches is the kernel's 4-tuple hash (`steering = "kernel"`), or a reuseport BPF
//!   program keyed by the client address (`"source"`, through [`SourceSteering`]), so that a
//!   client always reaches the same worker and that worker's [`session`] table keeps it on the
//!   same backend.
//! - **TCP** ([`tcp`]): bytes both ways, half-close propagated, idle and write-stall
//!   timeouts, counters.
//! - **HTTP/1.1** ([`http`]): an engine of its own over [`h1`] (sans-IO: heads parsed in
//!   place with `httparse`, forwarded with edits rather than rebuilt, bodies streamed and
//!   `chunked` re-framed; nothing allocated per kept-alive request); keep-alive with a
//!   per-worker upstream pool; retries of connect failures on the next upstream; 400/408/431
//!   from the client side, 502/503/504 of our own. Every request head passes [`rules`] first —
//!   pure functions over the head: no `CONNECT` (405), no transfer coding but `chunked` (501),
//!   one valid `Host`, absolute-form targets sent in origin form with their authority as
//!   `Host`, forwarding headers kept only from trusted proxies.
//! - **Every wait is bounded**: a request head (`header_read`), a kept-alive client (`idle`),
//!   a response head (`response`), and inside an exchange the request body (`client_read`),
//!   the client reading (`client_write`), the response body (`upstream_read`) and the upstream
//!   reading (`upstream_write`) — inactivity timers, one per connection, armed only when a
//!   socket would block.
//! - **UDP** ([`udp`]): a session per client address and port with its own connected upstream
//!   socket, idle timeout and `responses` hint, in a bounded LRU table per worker; batched
//!   receive with GRO and GSO bursts through quinn-udp, replies to many clients in one
//!   `sendmmsg` (`udp::outbox`); an optional PROXY v2 header that fails closed (nothing
//!   forwarded without it, a client's own dropped). The crate has no `unsafe`: its system
//!   calls beyond `std`, tokio and quinn-udp (`sendmmsg`, `setsockopt`, `getsockopt`, CPU
//!   pinning) are stator-sys's.
//! - **Reload** ([`Proxy::apply`]): new schedulers and upstreams are swapped (`ArcSwap`) under
//!   running workers; listeners added or removed open and close; a changed address re-binds;
//!   no socket or connection of an unchanged listener is closed.
//!
//! - **Floods** ([`limits`]): every client connection, upstream connection and UDP session
//!   socket takes its descriptors from one node-wide [`DescriptorBudget`] (the controller
//!   sizes it to leave health checks and the admin API their own); connections and sessions
//!   are bounded per source (an address prefix) across a listener's workers; UDP sessions
//!   also in rate per worker, unreplied ones first out under pressure.
//!
//! Contract: bad input from the network never panics a worker — a malformed request gets 400
//! and its connection closes, a datagram that cannot be forwarded is dropped and counted under
//! its reason; floods are bounded (`max_connections` per worker, per source, the descriptor
//! budget, bounded session tables) and every refusal is counted under its reason ([`stats`]):
//! no flood makes the proxy take a descriptor the budget does not give it; a peer that stops reading or sending holds nothing for longer than
//! its timeout; a backend never sees a client address a client wrote unless that client is a
//! trusted proxy. A reload that fails changes nothing.
//!
//! What it must never do: read the configuration file or health-check anything (the
//! controller tells it), share a scheduler's mutable state between workers, buffer a whole
//! body, block a worker's thread.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod access;
mod copy;
mod error;
pub mod h1;
pub mod http;
mod io;
pub mod limits;
pub mod passive;
mod proxy;
pub mod retry;
pub mod rules;
pub mod session;
mod shared;
pub mod spec;
pub mod stats;
pub mod table;
pub mod tcp;
pub mod udp;
pub mod worker;

pub use access::{AccessLog, AccessLogCounts, AccessLogFormat, AccessLogSpec};
pub use error::ProxyError;
pub use limits::{DescriptorBudget, Descriptors, SourcePrefixes};
pub use passive::PassiveSpec;
pub use proxy::{
    HandoverSocket, InheritedSocket, ListenerView, Prepared, Proxy, SourceSteering, SteeringGroup,
    UpstreamView,
};
pub use spec::{
    Algorithm, ForwardedMode, HttpSpec, ListenerSpec, Methods, PersistenceSpec, Prefix, Protocol,
    Steering, Timeouts, UdpSpec, UpstreamSpec, UpstreamState,
};
pub use stats::{
    ClientErrorKind, DURATION_BUCKETS, ErrorKind, ListenerStats, UdpDrop, UdpStats, UpstreamStats,
};
