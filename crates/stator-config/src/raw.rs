//! The TOML schema as written: serde structs, every table `deny_unknown_fields`.
//!
//! These types say which keys exist and roughly what type each value has — nothing more. Keys
//! that are required are still `Option` here so that a missing key is reported together with
//! every other problem by validation (serde would stop at the first), and numbers are `i64` so
//! that an out-of-range value gets a message naming the range rather than serde's "expected
//! u16". Values that may be written in more than one way (a port or `"any"`, a jitter fraction
//! or duration, a status or range) are [`Scalar`]s. `docs/config.md` documents every key.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Visitor};

use crate::types::{
    AfxdpBindMode, AfxdpThreading, ConntrackMode, ListenerProtocol, LogFormat, LogLevel, OnExit,
    Scheduler, Secret, Steering, XdpMode,
};

/// A TOML scalar whose meaning validation decides (`port = 80` or `port = "any"`).
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
}

impl fmt::Display for Scalar {
    /// As it would be written in TOML (strings quoted).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
            Scalar::Str(s) => write!(f, "{s:?}"),
            Scalar::Bool(b) => write!(f, "{b}"),
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl Visitor<'_> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                i64::try_from(v)
                    .map(Scalar::Int)
                    .map_err(|_| E::custom(format!("integer {v} is too large")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(v.to_owned()))
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `[node]` (required).
    pub node: Option<RawNode>,
    /// `[dataplane]` (required).
    pub dataplane: Option<RawDataplane>,
    /// `[encap]`.
    #[serde(default)]
    pub encap: RawEncap,
    /// `[bgp]`; absent = no BGP.
    pub bgp: Option<RawBgp>,
    /// `[api]`.
    #[serde(default)]
    pub api: RawApi,
    /// `[log]`.
    #[serde(default)]
    pub log: RawLog,
    /// `[upgrade]`.
    #[serde(default)]
    pub upgrade: RawUpgrade,
    /// `[[pool]]`.
    #[serde(default)]
    pub pool: Vec<RawPool>,
    /// `[[vip]]`.
    #[serde(default)]
    pub vip: Vec<RawVip>,
    /// `[[listener]]`.
    #[serde(default)]
    pub listener: Vec<RawListener>,
    /// `[fragments]`.
    #[serde(default)]
    pub fragments: RawFragments,
    /// `[tracer]`.
    #[serde(default)]
    pub tracer: RawTracer,
    /// `[[vip_class]]`.
    #[serde(default)]
    pub vip_class: Vec<RawVipClass>,
    /// `[access_log]`; absent = no access log.
    pub access_log: Option<RawAccessLog>,
    /// `[receive_steering]`; absent = none (listeners cannot use `steering = "cpu"`).
    pub receive_steering: Option<RawReceiveSteering>,
}

/// `[fragments]`: how fragments reach one node and wait for their first.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFragments {
    /// The cluster's Stator nodes, this one included.
    pub peers: Option<Vec<String>>,
    /// Size of the peers' Maglev table (prime).
    pub table_size: Option<i64>,
    /// How long a first fragment's decision is kept, and an early fragment held.
    pub timeout: Option<Scalar>,
    /// Fragment-table capacity.
    pub table_entries: Option<i64>,
    /// Early fragments held at most.
    pub hold_frames: Option<i64>,
    /// Bytes of early fragments held at most.
    pub hold_bytes: Option<i64>,
}

/// `[receive_steering]`: each client's packets to its worker's CPU (`steering = "cpu"`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReceiveSteering {
    /// The interfaces clients' packets arrive on.
    pub interfaces: Option<Vec<String>>,
    /// The CPUs workers are pinned to, one worker each.
    pub cpus: Option<Vec<i64>>,
    /// `"generic"` or `"native"`.
    pub xdp_mode: Option<String>,
    /// Packets each CPU's queue holds.
    pub queue_size: Option<i64>,
}

/// `[access_log]`: the proxy tier's access log.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccessLog {
    /// An absolute path, or `"stdout"`.
    pub path: Option<String>,
    /// `"json"` or `"text"`.
    pub format: Option<String>,
    /// Share of records written, `0 < sample <= 1`.
    pub sample: Option<Scalar>,
}

/// `[tracer]`: the packet tracer's reports.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTracer {
    /// Reports per second the node sends at most.
    pub reports_per_sec: Option<i64>,
    /// The file of the cluster's tracer keys.
    pub key_file: Option<String>,
    /// Prefixes reports may be sent to.
    pub receivers: Option<Vec<String>>,
}

/// `[[vip_class]]`: a class of clusters and its prefix groups.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVipClass {
    /// Name (referred to by `vip.class`).
    pub name: Option<String>,
    /// Prefix groups (CIDRs).
    pub prefixes: Option<Vec<String>>,
    /// Default suffix length of its IPv4 VIPs.
    pub suffix_bits_v4: Option<i64>,
    /// Default suffix length of its IPv6 VIPs.
    pub suffix_bits_v6: Option<i64>,
}

/// `[node]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNode {
    /// Node name.
    pub name: Option<String>,
    /// Outer source address toward IPv4 backends.
    pub address_v4: Option<String>,
    /// Outer source address toward IPv6 backends.
    pub address_v6: Option<String>,
}

/// `[dataplane]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDataplane {
    /// Which data plane.
    pub mode: Option<DataplaneModeName>,
    /// Interfaces to attach to.
    pub interfaces: Option<Vec<String>>,
    /// XDP attach mode.
    pub xdp_mode: Option<XdpMode>,
    /// bpffs directory for pinned maps.
    pub pin_path: Option<String>,
    /// Connection-table flavour.
    pub conntrack: Option<ConntrackMode>,
    /// Connection-table capacity.
    pub conntrack_entries: Option<i64>,
    /// Maglev slots per generation.
    pub slots_per_generation: Option<i64>,
    /// TCP connection idle timeout.
    pub tcp_timeout: Option<Scalar>,
    /// UDP flow idle timeout.
    pub udp_timeout: Option<Scalar>,
    /// SYN-flood guard.
    pub flood_new_per_sec: Option<i64>,
    /// Lifetime of a cached next hop.
    pub next_hop_cache: Option<Scalar>,
    /// Answer pings to VIPs.
    pub icmp_echo: Option<bool>,
    /// What to do with the data plane on exit.
    pub on_exit: Option<OnExit>,
    /// How long the forwarder trusts its tables without a heartbeat; "0s" = always.
    pub stale_after: Option<Scalar>,
    /// `[dataplane.afxdp]`.
    pub afxdp: Option<RawAfxdp>,
}

/// `[dataplane.afxdp]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAfxdp {
    /// Steered or run to completion.
    pub threading: Option<AfxdpThreading>,
    /// Packet threads.
    pub packet_threads: Option<i64>,
    /// CPUs to pin to.
    pub cpus: Option<Vec<i64>>,
    /// Pin threads.
    pub pin: Option<bool>,
    /// Frames in the packet pool.
    pub frames: Option<i64>,
    /// Bytes per frame.
    pub frame_size: Option<i64>,
    /// Entries of each ring.
    pub ring_size: Option<i64>,
    /// Frames per batch.
    pub batch: Option<i64>,
    /// Flush timer.
    pub flush_timeout: Option<Scalar>,
    /// Per-thread queue capacity.
    pub queue_depth: Option<i64>,
    /// RX queues bound per interface.
    pub queues: Option<i64>,
    /// Copy or zero-copy.
    pub bind_mode: Option<AfxdpBindMode>,
    /// Busy-poll before sleeping.
    pub busy_poll: Option<Scalar>,
}

/// Data-plane modes as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataplaneModeName {
    /// XDP.
    Xdp,
    /// AF_XDP.
    Afxdp,
    /// No packet forwarder: a proxy-only node.
    None,
}

/// Protocols as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProtocolName {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// Encapsulation names as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EncapName {
    /// GRE.
    Gre,
    /// IP in IP.
    Ipip,
    /// Generic UDP Encapsulation.
    Gue,
}

/// `[encap]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEncap {
    /// Default encapsulation of VIPs.
    pub default: Option<EncapName>,
    /// GUE destination port.
    pub gue_port: Option<i64>,
    /// Outer TTL / hop limit.
    pub outer_ttl: Option<i64>,
    /// How long a VIP's previous Maglev table is kept for second chance.
    pub second_chance: Option<Scalar>,
}

/// `[bgp]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBgp {
    /// Whether to announce (default true when the table is present).
    pub enabled: Option<bool>,
    /// BIRD's control socket.
    pub bird_socket: Option<String>,
    /// The file Stator writes and BIRD includes.
    pub bird_config: Option<String>,
    /// Local AS number.
    pub local_as: Option<i64>,
    /// BGP router id (IPv4 dotted quad).
    pub router_id: Option<String>,
    /// Communities attached to VIP routes, `"asn:value"`.
    pub communities: Option<Vec<String>>,
    /// BFD transmit and receive interval of Stator's BFD protocol.
    pub bfd_interval: Option<Scalar>,
    /// BFD detection multiplier.
    pub bfd_multiplier: Option<i64>,
    /// `[[bgp.neighbor]]`.
    #[serde(default)]
    pub neighbor: Vec<RawNeighbor>,
}

/// `[[bgp.neighbor]]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNeighbor {
    /// Name (BIRD protocol name).
    pub name: Option<String>,
    /// Peer address.
    pub address: Option<String>,
    /// Peer AS.
    pub remote_as: Option<i64>,
    /// Local address of the session.
    pub source_address: Option<String>,
    /// BGP hold time.
    pub hold_time: Option<Scalar>,
    /// BGP keepalive time.
    pub keepalive: Option<Scalar>,
    /// Delay between attempts to connect.
    pub connect_retry: Option<Scalar>,
    /// Delay after a session error before the session starts again.
    pub error_wait: Option<Scalar>,
    /// Use BFD for this session.
    pub bfd: Option<bool>,
    /// eBGP multihop TTL.
    pub multihop: Option<i64>,
    /// Announce with the node as next hop.
    pub next_hop_self: Option<bool>,
}

/// `[api]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApi {
    /// The Unix socket's path.
    pub socket: Option<String>,
    /// The group whose members may use the Unix socket (name or numeric id).
    pub socket_group: Option<String>,
    /// TCP listen address (absent: no TCP endpoint).
    pub listen: Option<String>,
    /// Bearer token of the `admin` level.
    pub token: Option<Secret>,
    /// File holding the `admin` bearer token.
    pub token_file: Option<String>,
    /// Bearer token of the `read` level.
    pub read_token: Option<Secret>,
    /// File holding the `read` bearer token.
    pub read_token_file: Option<String>,
    /// How long a drain through the API keeps a backend's existing connections.
    pub drain_timeout: Option<Scalar>,
    /// Most connections open at once.
    pub max_connections: Option<i64>,
    /// How long a connection may take to send a complete request head.
    pub header_read_timeout: Option<Scalar>,
}

/// `[upgrade]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpgrade {
    /// The Unix socket a successor process takes the node's sockets from.
    pub socket: Option<String>,
    /// How long the replaced process serves its connections after the successor serves.
    pub drain: Option<Scalar>,
    /// How long the node waits for its successor to serve before it runs on.
    pub start_timeout: Option<Scalar>,
}

/// `[log]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    /// Output format.
    pub format: Option<LogFormat>,
    /// Level.
    pub level: Option<LogLevel>,
}

/// `[[pool]]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPool {
    /// Pool name.
    pub name: Option<String>,
    /// Names of pools whose backends this pool also contains.
    #[serde(default)]
    pub include: Vec<String>,
    /// `[pool.health]`: how this pool's own backends are checked.
    pub health: Option<RawHealth>,
    /// `[[pool.backend]]`.
    #[serde(default)]
    pub backend: Vec<RawBackend>,
}

/// Health-check methods as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MethodName {
    /// TCP connect.
    Tcp,
    /// HTTP GET.
    Http,
    /// HTTP GET over TLS.
    Https,
    /// UDP request/reply.
    Udp,
    /// No check.
    None,
}

/// `[pool.health]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    /// Method.
    pub method: Option<MethodName>,
    /// Port override.
    pub port: Option<i64>,
    /// Time between probes.
    pub interval: Option<Scalar>,
    /// Probe timeout.
    pub timeout: Option<Scalar>,
    /// Successes to become healthy.
    pub rise: Option<i64>,
    /// Failures to become unhealthy.
    pub fall: Option<i64>,
    /// Random spread of the interval: fraction or duration.
    pub jitter: Option<Scalar>,
    /// HTTP path.
    pub path: Option<String>,
    /// HTTP expected status or range.
    pub expect_status: Option<Scalar>,
    /// HTTP Host header.
    pub host: Option<String>,
    /// HTTPS: the server name sent in SNI and verified.
    pub sni: Option<String>,
    /// HTTPS: verify the certificate.
    pub verify: Option<bool>,
    /// HTTPS: more trust anchors (PEM).
    pub ca_file: Option<String>,
    /// UDP payload (text).
    pub payload: Option<String>,
    /// UDP payload (hex).
    pub payload_hex: Option<String>,
    /// UDP expected reply prefix (text).
    pub expect: Option<String>,
    /// UDP expected reply prefix (hex).
    pub expect_hex: Option<String>,
}

/// `[[pool.backend]]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBackend {
    /// Address.
    pub address: Option<String>,
    /// Port (health checks and naming only).
    pub port: Option<i64>,
    /// Weight.
    pub weight: Option<i64>,
    /// Stable id.
    pub id: Option<String>,
}

/// VIP flags as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlagName {
    /// Never use the connection table.
    NoConntrack,
}

impl FlagName {
    /// The flag as written.
    pub fn as_str(self) -> &'static str {
        match self {
            FlagName::NoConntrack => "no_conntrack",
        }
    }
}

/// `[[vip]]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVip {
    /// Name.
    pub name: Option<String>,
    /// Address.
    pub address: Option<String>,
    /// Port, 0 or `"any"`.
    pub port: Option<Scalar>,
    /// Protocol.
    pub protocol: Option<ProtocolName>,
    /// Pools.
    pub pools: Option<Vec<String>>,
    /// Encapsulation override.
    pub encap: Option<EncapName>,
    /// Maglev table size.
    pub table_size: Option<i64>,
    /// Flags.
    #[serde(default)]
    pub flags: Vec<FlagName>,
    /// Accept fragments.
    pub fragments: Option<bool>,
    /// Where packets go when no backend is usable.
    pub failover: Option<String>,
    /// The class whose prefix groups the VIP also serves, by suffix.
    pub class: Option<String>,
    /// Suffix length (overrides the class's default).
    pub suffix_bits: Option<i64>,
}

/// `[[listener]]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListener {
    /// Name.
    pub name: Option<String>,
    /// `ip:port` to listen on.
    pub address: Option<String>,
    /// Protocol.
    pub protocol: Option<ListenerProtocol>,
    /// The pool of upstreams.
    pub pool: Option<String>,
    /// Port of pool members that have none.
    pub backend_port: Option<i64>,
    /// Scheduler.
    pub scheduler: Option<Scheduler>,
    /// Worker threads.
    pub workers: Option<i64>,
    /// Pin workers to cores.
    pub pin_workers: Option<bool>,
    /// Client to worker steering.
    pub steering: Option<Steering>,
    /// Idle timeout of client address to backend stickiness.
    pub persistence: Option<Scalar>,
    /// Session-table capacity per worker.
    pub persistence_entries: Option<i64>,
    /// Further peers tried after a failure.
    pub retries: Option<i64>,
    /// Failures within `fail_timeout` that leave an upstream out of picks.
    pub max_fails: Option<i64>,
    /// The window of `max_fails`, and how long an upstream stays out.
    pub fail_timeout: Option<Scalar>,
    /// Client connections per worker.
    pub max_connections: Option<i64>,
    /// Client connections open per source, for the whole listener.
    pub max_connections_per_source: Option<i64>,
    /// Prefix length that makes an IPv4 client address a source.
    pub source_prefix_v4: Option<i64>,
    /// Prefix length that makes an IPv6 client address a source.
    pub source_prefix_v6: Option<i64>,
    /// `[listener.timeouts]`.
    #[serde(default)]
    pub timeouts: RawListenerTimeouts,
    /// `[listener.http]`.
    pub http: Option<RawListenerHttp>,
    /// `[listener.udp]`.
    pub udp: Option<RawListenerUdp>,
}

/// `[listener.udp]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListenerUdp {
    /// Replies expected per client datagram; the session ends when they all arrived.
    pub responses: Option<i64>,
    /// Sessions per worker.
    pub max_sessions: Option<i64>,
    /// Sessions open per source, for the whole listener.
    pub max_sessions_per_source: Option<i64>,
    /// New sessions per second per worker.
    pub session_rate: Option<i64>,
    /// New sessions a worker may open at once beyond the rate.
    pub session_burst: Option<i64>,
    /// How long a session that has had no reply lives.
    pub unreplied_timeout: Option<Scalar>,
    /// PROXY protocol v2 header on the first datagram of a session.
    pub proxy_protocol: Option<bool>,
    /// UDP GRO on the sockets.
    pub gro: Option<bool>,
    /// UDP GSO for bursts to one peer.
    pub gso: Option<bool>,
}

/// `[listener.timeouts]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListenerTimeouts {
    /// Upstream connect.
    pub connect: Option<Scalar>,
    /// Client request head.
    pub header_read: Option<Scalar>,
    /// Idle connection.
    pub idle: Option<Scalar>,
    /// Upstream response head.
    pub response: Option<Scalar>,
    /// A request body that stops arriving from the client.
    pub client_read: Option<Scalar>,
    /// A client that stops reading.
    pub client_write: Option<Scalar>,
    /// A response body that stops arriving from the upstream.
    pub upstream_read: Option<Scalar>,
    /// An upstream that stops reading.
    pub upstream_write: Option<Scalar>,
}

/// `[listener.http]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListenerHttp {
    /// `X-Forwarded-For`: `"append"`, `"replace"` or `"off"` (`true`, `false`: `"append"`,
    /// `"off"`, as before these modes).
    pub forwarded_for: Option<Scalar>,
    /// RFC 7239 `Forwarded`: the same values.
    pub forwarded: Option<Scalar>,
    /// Prefixes of clients whose forwarding headers are kept.
    pub trusted_proxies: Option<Vec<String>>,
    /// Largest request head, bytes.
    pub max_header_size: Option<i64>,
    /// Idle upstream connections kept per worker.
    pub keepalive_pool: Option<i64>,
    /// How long an idle upstream connection is kept.
    pub keepalive_timeout: Option<Scalar>,
    /// Add `X-Served-By` to responses.
    pub served_by: Option<bool>,
    /// Methods whose requests are sent again to another upstream after a failure.
    pub retry_methods: Option<Vec<String>>,
}
