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

use crate::types::{ConntrackMode, LogFormat, LogLevel, OnExit, Secret, XdpMode};

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
    /// `[[pool]]`.
    #[serde(default)]
    pub pool: Vec<RawPool>,
    /// `[[vip]]`.
    #[serde(default)]
    pub vip: Vec<RawVip>,
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
}

/// Data-plane modes as written (`afxdp` is reserved: accepted by the schema so that the error
/// can say "not supported yet" instead of "unknown").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataplaneModeName {
    /// XDP.
    Xdp,
    /// AF_XDP (reserved).
    Afxdp,
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
    /// Listen address.
    pub listen: Option<String>,
    /// Bearer token.
    pub token: Option<Secret>,
    /// File holding the bearer token.
    pub token_file: Option<String>,
    /// How long a drain through the API keeps a backend's existing connections.
    pub drain_timeout: Option<Scalar>,
    /// Most connections open at once.
    pub max_connections: Option<i64>,
    /// How long a connection may take to send a complete request head.
    pub header_read_timeout: Option<Scalar>,
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
}
