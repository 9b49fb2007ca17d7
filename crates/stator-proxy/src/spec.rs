//! What a listener is asked to be: plain data the controller builds from the configuration
//! (and tests build by hand). Nothing here is validated again: the configuration crate did
//! that; what the proxy itself must refuse (a scheduler over no upstream, a port in use) is
//! refused when the listener starts or a reload is applied.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

pub use crate::limits::SourcePrefixes;
pub use stator_sched::Algorithm;

/// What a listener speaks (`tcp`, `http`, `udp`) and which worker a new client reaches
/// (`kernel`, `source`): the configuration's own types, so that one definition serves both.
pub use stator_config::{ListenerProtocol as Protocol, Steering};

/// A backend's state as the health checks and drains decide it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamState {
    /// Picked for new connections and requests.
    #[default]
    Usable,
    /// Healthy but taking no new work (weight 0, or drained): existing connections go on.
    Draining,
    /// Down, not checked yet, or drained past its timeout: not picked.
    Absent,
}

/// One upstream of a listener.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UpstreamSpec {
    /// The backend's stable name (its id, else `address:port`): the metric label, and the key
    /// that carries counters and sessions across reloads.
    pub name: String,
    /// Where the proxy connects.
    pub addr: SocketAddr,
    /// Weight (0 = draining).
    pub weight: u32,
}

/// Client address → backend stickiness, per worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PersistenceSpec {
    /// An entry unused this long is forgotten.
    pub timeout: Duration,
    /// Entries per worker (least recently used evicted first).
    pub max_entries: usize,
}

/// Timeouts of a listener: the configuration's type (`[listener.timeouts]`), defaults
/// included. The four stall timeouts (`client_read` … `upstream_write`) are inactivity timers,
/// as nginx's: each bounds the time since the last progress of one wait, not the length of a
/// whole exchange.
pub use stator_config::ListenerTimeouts as Timeouts;

/// What a listener does with a forwarding header (`X-Forwarded-For`, `Forwarded`): the
/// configuration's type. Forwarding lines the client sent are kept only when the client is a
/// trusted proxy ([`HttpSpec::trusted_proxies`]): the backend never sees an address an
/// untrusted client wrote.
pub use stator_config::ForwardedMode;

/// An address prefix (`10.0.0.0/8`): which clients are trusted proxies. The configuration's
/// type; [`HttpSpec::trusts`] matches a peer against them.
pub use stator_config::Prefix;

/// HTTP options of a listener.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HttpSpec {
    /// `X-Forwarded-For`.
    pub forwarded_for: ForwardedMode,
    /// RFC 7239 `Forwarded` (`for=<client>;proto=http`).
    pub forwarded: ForwardedMode,
    /// Clients whose forwarding headers are believed (other proxies in front of this one).
    pub trusted_proxies: Vec<Prefix>,
    /// Largest request head, bytes.
    pub max_header_size: usize,
    /// Idle upstream connections kept per worker and upstream.
    pub keepalive_pool: usize,
    /// How long an idle upstream connection is kept.
    pub keepalive_timeout: Duration,
    /// Add `X-Served-By: <node>/<listener>/<worker>`.
    pub served_by: bool,
    /// Methods whose requests (without a body) are sent again to another upstream when the
    /// first fails before its response head (RFC 9110 §9.2.2's idempotent methods by default).
    pub retry_methods: Methods,
}

/// A set of HTTP methods (the standard ones a retry rule can name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Methods(u16);

impl Methods {
    /// The methods a set can hold, by bit.
    pub const NAMES: [&'static str; 9] = [
        "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE", "POST", "PATCH", "CONNECT",
    ];

    /// RFC 9110 §9.2.2's idempotent methods: GET, HEAD, OPTIONS, TRACE, PUT, DELETE.
    pub const IDEMPOTENT: Methods = Methods(0b11_1111);

    /// No method.
    pub const NONE: Methods = Methods(0);

    /// The set of `names` (upper case); `Err` names the first unknown one.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, &'a str> {
        let mut bits = 0u16;
        for n in names {
            let i = Self::NAMES.iter().position(|m| *m == n).ok_or(n)?;
            bits |= 1 << i;
        }
        Ok(Self(bits))
    }

    /// Whether `method` is in the set.
    #[inline]
    pub fn contains(self, method: &http::Method) -> bool {
        self.contains_name(method.as_str())
    }

    /// Whether the method named `method` (as on the request line) is in the set.
    #[inline]
    pub fn contains_name(self, method: &str) -> bool {
        Self::NAMES
            .iter()
            .position(|m| *m == method)
            .is_some_and(|i| self.0 & (1 << i) != 0)
    }

    /// The names in the set.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Self::NAMES
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, n)| *n)
    }
}

impl HttpSpec {
    /// Whether `peer` is a trusted proxy. An IPv4-mapped IPv6 address (`::ffff:10.1.2.3`,
    /// what a dual-stack socket reports) is matched as the IPv4 address it is.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.trusted_proxies.iter().any(|p| p.contains(peer))
    }
}

impl Default for HttpSpec {
    fn default() -> Self {
        Self {
            forwarded_for: ForwardedMode::Append,
            forwarded: ForwardedMode::Off,
            trusted_proxies: Vec::new(),
            max_header_size: 32 * 1024,
            keepalive_pool: 32,
            keepalive_timeout: Duration::from_secs(60),
            served_by: false,
            retry_methods: Methods::IDEMPOTENT,
        }
    }
}

/// UDP options of a listener (the session idle timeout is `timeouts.idle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpSpec {
    /// Datagrams expected from the upstream per client datagram; once all arrived the session
    /// ends (nginx's `proxy_responses`; DNS: 1). `None`: sessions end by idle timeout only.
    pub responses: Option<u32>,
    /// Sessions per worker (unreplied ones evicted first, then the least recently used).
    pub max_sessions: usize,
    /// Sessions open per source (address masked to [`ListenerSpec::source_prefixes`]) for
    /// the whole listener; 0: no limit.
    pub max_sessions_per_source: u32,
    /// New sessions per second per worker (a token bucket); 0: no limit.
    pub session_rate: u32,
    /// New sessions a worker may open at once beyond the rate (the bucket's size).
    pub session_burst: u32,
    /// How long a session that has had no reply lives unused (conntrack's 30 s for UDP); at
    /// most `timeouts.idle`.
    pub unreplied_timeout: Duration,
    /// Put a PROXY protocol v2 header before the first datagram of each session (and drop
    /// client datagrams that begin with the header's signature).
    pub proxy_protocol: bool,
    /// Ask for UDP GRO on the listening and upstream sockets (the kernel may refuse).
    pub gro: bool,
    /// Send bursts to one peer as one GSO buffer (falls back when the kernel refuses).
    pub gso: bool,
}

impl Default for UdpSpec {
    fn default() -> Self {
        Self {
            responses: None,
            max_sessions: 16_384,
            max_sessions_per_source: 1024,
            session_rate: 20_000,
            session_burst: 20_000,
            unreplied_timeout: Duration::from_secs(30),
            proxy_protocol: false,
            gro: true,
            gso: true,
        }
    }
}

/// One listener.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListenerSpec {
    /// Name (unique; metric label).
    pub name: String,
    /// Where it listens.
    pub address: SocketAddr,
    /// What it speaks.
    pub protocol: Protocol,
    /// The pool's name (for the API).
    pub pool: String,
    /// Upstreams, in the order schedulers index them.
    pub upstreams: Vec<UpstreamSpec>,
    /// How upstreams are picked.
    pub algorithm: Algorithm,
    /// Worker threads (at least 1).
    pub workers: usize,
    /// Pin worker `i` to core `i mod cores`.
    pub pin_workers: bool,
    /// Pin worker `i` to CPU `worker_cpus[i]` instead (`steering = "cpu"`: one worker per CPU
    /// of the node's receive steering).
    pub worker_cpus: Option<Vec<usize>>,
    /// Client → worker steering.
    pub steering: Steering,
    /// Stickiness (`None`: off).
    pub persistence: Option<PersistenceSpec>,
    /// Further upstreams tried after a failure: to connect, or (an idempotent request without
    /// a body, HTTP) before the response head.
    pub retries: usize,
    /// Upstreams left out of picks after failures (nginx's `max_fails` / `fail_timeout`).
    pub passive: crate::passive::PassiveSpec,
    /// Client connections per worker.
    pub max_connections: usize,
    /// Client connections open per source (address masked to `source_prefixes`) for the
    /// whole listener; more are accepted and closed at once (counted). 0: no limit. TCP and
    /// HTTP.
    pub max_connections_per_source: u32,
    /// What a source is, for the per-source limits: a client address masked to these
    /// prefix lengths.
    pub source_prefixes: SourcePrefixes,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// HTTP options.
    pub http: HttpSpec,
    /// UDP options.
    pub udp: UdpSpec,
}

impl ListenerSpec {
    /// A listener with the configuration's defaults: VNSWRR, one worker, kernel steering, no
    /// persistence, two retries.
    pub fn new(
        name: impl Into<String>,
        address: SocketAddr,
        protocol: Protocol,
        upstreams: Vec<UpstreamSpec>,
    ) -> Self {
        Self {
            name: name.into(),
            address,
            protocol,
            pool: String::new(),
            upstreams,
            algorithm: Algorithm::Vnswrr,
            workers: 1,
            pin_workers: false,
            worker_cpus: None,
            steering: Steering::Kernel,
            persistence: None,
            retries: 2,
            passive: crate::passive::PassiveSpec::default(),
            max_connections: 16_384,
            max_connections_per_source: 1024,
            source_prefixes: SourcePrefixes::default(),
            timeouts: Timeouts::default(),
            http: HttpSpec::default(),
            udp: UdpSpec::default(),
        }
    }

    /// The CPU worker `i` is pinned to: `worker_cpus[i]`, else with `pin_workers` the
    /// `i mod n`-th of the `n` CPUs the process may run on, else none.
    pub(crate) fn worker_cpu(&self, i: usize) -> Option<usize> {
        if let Some(cpus) = &self.worker_cpus {
            return cpus.get(i % cpus.len().max(1)).copied();
        }
        if !self.pin_workers {
            return None;
        }
        let cores = stator_sys::cpu::allowed_cpus().unwrap_or_default();
        cores.get(i % cores.len().max(1)).copied()
    }

    /// Whether a change from `self` to `other` needs new sockets (the rest is swapped in
    /// place).
    pub(crate) fn needs_rebind(&self, other: &Self) -> bool {
        self.address != other.address
            || self.protocol != other.protocol
            || self.steering != other.steering
            || self.pin_workers != other.pin_workers
            || self.worker_cpus != other.worker_cpus
            || (self.protocol == Protocol::Udp && self.udp.gro != other.udp.gro)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusted_proxies_match_ipv4_clients_seen_through_a_dual_stack_socket() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let spec = HttpSpec {
            trusted_proxies: vec![
                Prefix::new(ip("10.0.0.0"), 8).unwrap(),
                Prefix::new(ip("2001:db8::"), 32).unwrap(),
            ],
            ..HttpSpec::default()
        };
        assert!(spec.trusts(ip("10.1.2.3")));
        assert!(spec.trusts(ip("::ffff:10.1.2.3")), "IPv4-mapped");
        assert!(spec.trusts(ip("2001:db8::7")));
        assert!(!spec.trusts(ip("11.1.2.3")));
        assert!(!spec.trusts(ip("::ffff:11.1.2.3")));
        assert!(!spec.trusts(ip("2001:db9::7")));
        assert!(
            !HttpSpec::default().trusts(ip("10.1.2.3")),
            "none by default"
        );
    }
}
