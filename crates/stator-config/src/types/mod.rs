//! The validated configuration: what the rest of Stator consumes.
//!
//! A [`Config`] exists only if validation found no error, so its invariants hold by
//! construction: addresses are of the right family and usable, pool references resolve, the
//! include graph is acyclic, every VIP has a non-empty, deduplicated backend list with a
//! positive total weight, table sizes are prime and everything fits the compiled map limits.
//! Fields are public for reading. Other crates cannot build a `Config` (or a [`Vip`], [`Node`],
//! ...) field by field (`#[non_exhaustive]`): it comes from [`crate::from_toml_str`],
//! [`crate::load_file`] or `Config::try_from(RawConfig)`. Ids ([`BackendId`], [`PoolId`]) index
//! the `Config` they came from; methods taking an id panic on an id from elsewhere.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
pub use stator_abi::Encap;
pub use stator_core::{Proto, VipFlags, VipKey};

use crate::health::HealthSpec;

mod listener;
pub use listener::*;

/// A complete, valid configuration of one Stator node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// `[node]`.
    pub node: Node,
    /// `[dataplane]`.
    pub dataplane: Dataplane,
    /// `[encap]`.
    pub encap: EncapDefaults,
    /// `[bgp]`; `None` when absent or `enabled = false`.
    pub bgp: Option<Bgp>,
    /// `[api]`.
    pub api: Api,
    /// `[log]`.
    pub log: Log,
    /// `[upgrade]`.
    pub upgrade: Upgrade,
    /// Every distinct backend, in order of first appearance; indexed by [`BackendId`].
    pub backends: Vec<Backend>,
    /// The pools, in file order; indexed by [`PoolId`].
    pub pools: Vec<Pool>,
    /// The VIPs, in file order.
    pub vips: Vec<Vip>,
    /// The proxy listeners, in file order.
    pub listeners: Vec<Listener>,
    /// `[fragments]`.
    pub fragments: Fragments,
    /// `[tracer]`.
    pub tracer: Tracer,
    /// `[[vip_class]]`, in file order; indexed by [`VipGroup::class`].
    pub classes: Vec<VipClass>,
    /// `[access_log]`; `None`: no access log.
    pub access_log: Option<AccessLog>,
    /// `[receive_steering]`; `None`: none (no listener has `steering = "cpu"`).
    pub receive_steering: Option<ReceiveSteering>,
}

impl Config {
    /// How long a VIP's previous Maglev table is kept for second chance: `encap.second_chance`,
    /// by default the longer of `dataplane.tcp_timeout` and `udp_timeout`; zero = off.
    pub fn second_chance_grace(&self) -> std::time::Duration {
        self.encap
            .second_chance
            .unwrap_or_else(|| self.dataplane.tcp_timeout.max(self.dataplane.udp_timeout))
    }

    /// The backend with this id.
    pub fn backend(&self, id: BackendId) -> &Backend {
        &self.backends[id.0]
    }

    /// The pool with this id.
    pub fn pool(&self, id: PoolId) -> &Pool {
        &self.pools[id.0]
    }

    /// The pool with this name.
    pub fn pool_by_name(&self, name: &str) -> Option<PoolId> {
        self.pools.iter().position(|p| p.name == name).map(PoolId)
    }

    /// A VIP's backends with their effective weights, in Maglev order (see [`Vip::backends`]).
    pub fn vip_backends<'a>(&'a self, vip: &'a Vip) -> impl Iterator<Item = (&'a Backend, u32)> {
        vip.backends
            .iter()
            .map(|m| (self.backend(m.backend), m.weight))
    }

    /// Number of (VIP, backend) pairs — the data plane's "reals".
    pub fn reals(&self) -> usize {
        self.vips.iter().map(|v| v.backends.len()).sum()
    }

    /// Maglev slots all VIP tables and the fragment peers' table need (per generation).
    pub fn slots(&self) -> u64 {
        let peers = if self.fragments.peers.is_empty() {
            0
        } else {
            u64::from(self.fragments.table_size)
        };
        self.vips
            .iter()
            .map(|v| u64::from(v.table_size))
            .sum::<u64>()
            + peers
    }

    /// The node-wide forwarding parameters of a `stator_core::Snapshot`.
    pub fn node_params(&self) -> stator_core::NodeParams {
        stator_core::NodeParams {
            src_v4: self.node.address_v4,
            src_v6: self.node.address_v6,
            icmp_echo: self.dataplane.icmp_echo,
            tcp_timeout_ns: duration_ns(self.dataplane.tcp_timeout),
            udp_timeout_ns: duration_ns(self.dataplane.udp_timeout),
            flood_new_per_sec: self.dataplane.flood_new_per_sec,
            gue_port: self.encap.gue_port,
            outer_ttl: self.encap.outer_ttl,
            frag_timeout_ns: duration_ns(self.fragments.timeout),
            trace_per_sec: if self.tracer.enabled() {
                self.tracer.reports_per_sec
            } else {
                0
            },
            // read from tracer.key_file by the node (validation reads no file)
            trace_keys: stator_abi::TraceKeys::default(),
        }
    }
}

/// Nanoseconds of a validated timeout (bounded to a day, so it fits).
fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `[node]`: who this node is and which addresses it encapsulates from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Node {
    /// Node name (logs, metrics, status).
    pub name: String,
    /// Outer source address toward IPv4 backends.
    pub address_v4: Option<Ipv4Addr>,
    /// Outer source address toward IPv6 backends.
    pub address_v6: Option<Ipv6Addr>,
}

/// Which data plane forwards packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataplaneMode {
    /// The XDP program (`bpf/stator_fwd.bpf.c`).
    Xdp,
    /// No packet forwarder: a proxy-only node (listeners, no VIPs, no interfaces).
    None,
    /// The AF_XDP forwarder (`crates/stator-afxdp`, docs/afxdp.md): stator-core in user-space
    /// packet threads, fed by `bpf/stator_xsk.bpf.c`.
    Afxdp,
}

/// How AF_XDP sockets bind (`dataplane.afxdp.bind_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AfxdpBindMode {
    /// Zero-copy where the driver offers it, else copy.
    #[default]
    Auto,
    /// Copy mode (what veth and generic XDP offer).
    Copy,
    /// Zero-copy only; binding fails where the driver has none.
    Zerocopy,
}

/// How the AF_XDP plane's threads share the work (`dataplane.afxdp.threading`; docs/afxdp.md
/// "Threads").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfxdpThreading {
    /// The paper's design: one I/O thread steers each frame by its 5-tuple to a packet thread
    /// and muxes the decided frames into TX rings.
    #[default]
    Steered,
    /// One thread per RX queue, owning that queue's socket on every interface: it reads,
    /// decides and transmits its own frames, with no hop between threads.
    RunToCompletion,
}

/// `[dataplane.afxdp]`: the AF_XDP forwarder's threads, packet pool, rings and timers (used
/// when `mode = "afxdp"`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Afxdp {
    /// Steered (the paper's I/O thread and packet threads) or run to completion.
    pub threading: AfxdpThreading,
    /// Packet threads, each with its own connection table (run to completion: one per RX
    /// queue of every interface).
    pub packet_threads: u32,
    /// CPUs to pin to (steered: the I/O thread's first; run to completion: one per thread);
    /// empty = the process's CPUs in order.
    pub cpus: Vec<u32>,
    /// Pin the threads to CPUs.
    pub pin: bool,
    /// Frames in the packet pool (the UMEM).
    pub frames: u32,
    /// Bytes per frame (2048 or 4096).
    pub frame_size: u32,
    /// Entries of every ring of every socket (a power of two).
    pub ring_size: u32,
    /// Frames per batch.
    pub batch: u32,
    /// A TX batch leaves at the latest this long after its first frame.
    pub flush_timeout: Duration,
    /// Capacity of each packet thread's queues.
    pub queue_depth: u32,
    /// RX queues bound per interface; `None` = all.
    pub queues: Option<u32>,
    /// Copy, zero-copy, or whatever the driver offers.
    pub bind_mode: AfxdpBindMode,
    /// How long an idle thread busy-polls before it sleeps.
    pub busy_poll: Duration,
}

/// How the XDP program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// Native if the driver supports it, else generic.
    #[default]
    Auto,
    /// Driver (native) mode only; fail if unsupported.
    Native,
    /// Generic (skb) mode: slow, works everywhere.
    Generic,
}

/// Connection-table flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConntrackMode {
    /// One table per CPU, as in the paper: no cross-CPU contention; relies on the NIC's RSS
    /// keeping a flow on one CPU. IPv4 flows in Stator's own 4-way bucket table
    /// (`stator_ct4`), IPv6 flows in the kernel's `LRU_PERCPU_HASH`.
    #[default]
    Percpu,
    /// `percpu` with IPv4 flows in the kernel's `LRU_PERCPU_HASH` too (as before `stator_ct4`):
    /// exact LRU eviction and memory that does not grow with the number of CPUs, at the
    /// per-packet cost docs/xdp.md measures.
    #[serde(rename = "percpu-lru")]
    PercpuLru,
    /// One table shared by all CPUs (`LRU_HASH`): survives RSS changes, costs contention.
    Shared,
}

/// What happens to the data plane when Stator exits (after withdrawing its VIPs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnExit {
    /// Detach the XDP program and remove the pins: the node stops forwarding.
    #[default]
    Detach,
    /// Leave the program attached and its maps pinned, so packets already routed to this node
    /// keep flowing while a new Stator starts (a hitless restart).
    Keep,
}

/// `[dataplane]`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Dataplane {
    /// Which data plane.
    pub mode: DataplaneMode,
    /// Interfaces to attach to (non-empty, unique).
    pub interfaces: Vec<String>,
    /// XDP attach mode.
    pub xdp_mode: XdpMode,
    /// bpffs directory where maps are pinned.
    pub pin_path: PathBuf,
    /// Connection-table flavour.
    pub conntrack: ConntrackMode,
    /// Connection-table capacity (entries; per CPU when `percpu`).
    pub conntrack_entries: u32,
    /// Maglev slots per generation (`stator_slots` holds twice this many).
    pub slots_per_generation: u32,
    /// Idle timeout of TCP connection-table entries.
    pub tcp_timeout: Duration,
    /// Idle timeout of UDP connection-table entries.
    pub udp_timeout: Duration,
    /// SYN-flood guard: connection-table inserts per second per CPU; 0 = no guard.
    pub flood_new_per_sec: u32,
    /// How long the forwarder reuses a `bpf_fib_lookup` answer per CPU and backend; `None`
    /// looks the next hop up for every packet.
    pub next_hop_cache: Option<Duration>,
    /// Answer ICMP echo requests to VIP addresses in XDP.
    pub icmp_echo: bool,
    /// What to do with the data plane on exit.
    pub on_exit: OnExit,
    /// How long the forwarder trusts its tables after the controller's last heartbeat: past
    /// it, VIP traffic is passed to the kernel (docs/forwarding.md §3.2). `None`: always (the
    /// default).
    pub stale_after: Option<Duration>,
    /// The AF_XDP forwarder's settings (defaults unless `[dataplane.afxdp]` sets them).
    pub afxdp: Afxdp,
}

/// `[encap]`: encapsulation defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncapDefaults {
    /// Encapsulation of VIPs that do not set their own.
    pub default: Encap,
    /// GUE UDP destination port.
    pub gue_port: u16,
    /// TTL / hop limit of outer headers.
    pub outer_ttl: u8,
    /// How long a VIP's previous Maglev table is kept for second chance (docs/forwarding.md
    /// §12): `None` = the longer of the connection timeouts ([`Config::second_chance_grace`]);
    /// zero = off.
    pub second_chance: Option<std::time::Duration>,
}

/// `[bgp]`: what the announcer needs to write BIRD's side and talk to BIRD.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Bgp {
    /// BIRD's control socket (`birdc` talks to it).
    pub bird_socket: PathBuf,
    /// The file Stator writes (VIP routes and BGP sessions); BIRD's own configuration
    /// `include`s it.
    pub bird_config: PathBuf,
    /// Local AS number.
    pub local_as: u32,
    /// BGP router id.
    pub router_id: Ipv4Addr,
    /// Standard communities (RFC 1997) attached to every VIP route, as (AS, value).
    pub communities: Vec<(u16, u16)>,
    /// Transmit and receive interval of BFD sessions, whole milliseconds (BIRD's defaults,
    /// 100 ms transmit and 10 ms receive, when `None`).
    pub bfd_interval: Option<Duration>,
    /// BFD detection multiplier: a session is down after this many intervals without a
    /// packet (BIRD's default, 5, when `None`).
    pub bfd_multiplier: Option<u8>,
    /// BGP sessions (at least one).
    pub neighbors: Vec<Neighbor>,
}

/// `[[bgp.neighbor]]`: one BGP session. A neighbor announces the VIPs of its own address family.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Neighbor {
    /// Protocol name in BIRD (configured, else `stator_<index>`); a BIRD symbol.
    pub name: String,
    /// Peer address.
    pub address: IpAddr,
    /// Peer AS number (equal to `local_as` for iBGP).
    pub remote_as: u32,
    /// Local address of the session (BIRD `source address`), same family as `address`.
    pub source_address: Option<IpAddr>,
    /// Hold time, whole seconds (BIRD's default when `None`).
    pub hold_time: Option<u16>,
    /// Keepalive time, whole seconds (BIRD's default, a third of the hold time, when `None`).
    pub keepalive: Option<u16>,
    /// Delay between attempts to open the session, whole seconds (BIRD's default, 120, when
    /// `None`).
    pub connect_retry: Option<u16>,
    /// Minimum delay after a session error before the session starts again, whole seconds
    /// (BIRD's default, 60, when `None`).
    pub error_wait: Option<u16>,
    /// Run BFD on this session.
    pub bfd: bool,
    /// eBGP multihop TTL (`None` = directly connected).
    pub multihop: Option<u8>,
    /// Announce VIPs with the session's local address as next hop.
    pub next_hop_self: bool,
}

/// A secret string (a bearer token). Its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself; call only where it is used (comparing a request's token).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Where the admin API's bearer token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// Written in the configuration (`api.token`).
    Inline(Secret),
    /// Read from this file at start and on reload (`api.token_file`); the API layer reads it.
    File(PathBuf),
}

/// What a caller of the admin API may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessLevel {
    /// `GET` of everything but the configuration's text (which may hold secrets): status,
    /// VIPs, backends, listeners, events, metrics, the status page.
    Read,
    /// Everything: apply a configuration, drain, read the configuration's text.
    Admin,
}

impl AccessLevel {
    /// `read` or `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Admin => "admin",
        }
    }
}

/// Who may use the Unix socket besides root and the node's own user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketGroup {
    /// A group by name, looked up when the socket is created.
    Name(String),
    /// A numeric group id.
    Id(u32),
}

impl fmt::Display for SocketGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(n) => f.write_str(n),
            Self::Id(id) => write!(f, "{id}"),
        }
    }
}

/// `[api]`: the admin API.
///
/// Two endpoints: a Unix socket (always; root, the node's user and `socket_group` reach it,
/// and the peer's credentials are checked), and a TCP endpoint (only with `listen`, and then
/// only with a token: every request carries one, and its level says what it may do).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Api {
    /// The Unix socket (default `/run/stator/api.sock`), created mode 0660, owned by root and
    /// `socket_group`.
    pub socket: PathBuf,
    /// The group whose members may use the socket (`admin` level).
    pub socket_group: SocketGroup,
    /// TCP listen address; `None` (the default): no TCP endpoint.
    pub listen: Option<SocketAddr>,
    /// Bearer token of the `admin` level (every request over TCP, at either level, needs one
    /// of the two tokens).
    pub token: Option<Token>,
    /// Bearer token of the `read` level.
    pub read_token: Option<Token>,
    /// How long a backend drained through the API keeps its existing connections before it
    /// is removed (a drain request may ask for another time).
    pub drain_timeout: Duration,
    /// Most connections open at once; when full, a new connection replaces the one idle
    /// the longest (or is closed, if none is idle).
    pub max_connections: u32,
    /// How long a connection may take to send a complete request head (from when it opens,
    /// or from its previous response): slow or silent clients are closed after it.
    pub header_read_timeout: Duration,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// Log level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// The default.
    #[default]
    Info,
    /// Debugging detail.
    Debug,
    /// Everything.
    Trace,
}

/// `[log]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Log {
    /// Output format.
    pub format: LogFormat,
    /// Level.
    pub level: LogLevel,
}

/// `[upgrade]`: replacing the node's process without closing a connection (docs/operations.md,
/// "Upgrades"): `stator run --takeover` takes the running node's listening sockets over
/// `socket`, serves, and the node drains for up to `drain`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Upgrade {
    /// The Unix socket (default: beside `api.socket`, `/run/stator/api.upgrade.sock`), mode
    /// 0600: root (or the node's user) only.
    pub socket: PathBuf,
    /// How long the replaced process goes on serving its connections once its successor
    /// serves (default 300 s): then it exits, closing what is left.
    pub drain: Duration,
    /// How long the node waits for its successor to serve (default 60 s): past it, or when
    /// the successor fails, the node runs on as before.
    pub start_timeout: Duration,
}

/// Index of a backend in [`Config::backends`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct BackendId(pub usize);

/// Index of a pool in [`Config::pools`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PoolId(pub usize);

/// A backend: one machine (address, optional port) with one health state, however many pools
/// list it. Identity is (address, port); `name` is its stable Maglev name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Backend {
    /// Address (either family, whatever the VIP's).
    pub address: IpAddr,
    /// Port: the default health-check port and part of the derived name. Packets are never
    /// rewritten to it (direct server return keeps the VIP's port).
    pub port: Option<u16>,
    /// Stable Maglev name: the configured `id`, else `address:port` (`[v6]:port`), else
    /// `address`, with addresses in canonical form (RFC 5952 for IPv6). Every node derives the
    /// same Maglev permutation from it.
    pub name: String,
}

impl Backend {
    /// The derived name of a backend without an `id`: `10.0.0.1`, `10.0.0.1:80`,
    /// `2001:db8::1`, `[2001:db8::1]:80`.
    pub fn derived_name(address: IpAddr, port: Option<u16>) -> String {
        match (address, port) {
            (address, None) => address.to_string(),
            (IpAddr::V4(a), Some(p)) => format!("{a}:{p}"),
            (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        }
    }

    /// `address:port` or `address`, for messages.
    pub fn endpoint(&self) -> String {
        Self::derived_name(self.address, self.port)
    }
}

/// A backend's membership in a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Member {
    /// The backend.
    pub backend: BackendId,
    /// Its weight in this pool (0 = draining: keeps existing flows, gets no new ones).
    pub weight: u32,
}

/// `[[pool]]`: a named set of backends, possibly including other pools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// Name (unique).
    pub name: String,
    /// Pools whose backends this pool also contains (acyclic, resolved).
    pub includes: Vec<PoolId>,
    /// The backends this pool lists itself, in file order.
    pub members: Vec<Member>,
    /// How this pool's own members are checked; `None` = `method = "none"` (always up).
    /// Included pools' backends are checked by their own pools' checks.
    pub health: Option<HealthSpec>,
}

/// `[[vip]]`: a virtual service.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Vip {
    /// Name: configured, else `<protocol>/<address>:<port|any>` (e.g. `tcp/192.0.2.10:80`).
    pub name: String,
    /// What packets match: address, port (0 = any), protocol.
    pub key: VipKey,
    /// The pools it serves from (resolved, non-empty).
    pub pools: Vec<PoolId>,
    /// Encapsulation toward its backends.
    pub encap: Encap,
    /// Maglev table size M (prime).
    pub table_size: u32,
    /// Flags.
    pub flags: VipFlags,
    /// Flattened, deduplicated backends with their effective weights, sorted by stable name
    /// (byte order). Maglev population must iterate backends in this order: it breaks ties by
    /// position, and every node must build the same table.
    pub backends: Vec<Member>,
    /// Where its packets go when no backend is usable: the same service's address in another
    /// cluster (docs/forwarding.md §10.1).
    pub failover: Option<IpAddr>,
    /// Its class and suffix, for a VIP that also serves its class's other clusters (§3.1).
    pub group: Option<VipGroup>,
}

/// A VIP's membership of a class (`vip.class`, `vip.suffix_bits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VipGroup {
    /// Index into [`Config::classes`] (also the data plane's class id).
    pub class: usize,
    /// Suffix length in bits.
    pub bits: u8,
}

/// `[fragments]` (docs/forwarding.md §9).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fragments {
    /// The cluster's Stator nodes (this one included), in file order; empty = every node
    /// decides the fragments it receives.
    pub peers: Vec<IpAddr>,
    /// Which of them is this node.
    pub self_index: Option<usize>,
    /// Size of the peers' Maglev table (prime).
    pub table_size: u32,
    /// How long a first fragment's decision is kept, and an early fragment held.
    pub timeout: Duration,
    /// Fragment-table capacity.
    pub table_entries: u32,
    /// Early fragments held at most.
    pub hold_frames: u32,
    /// Bytes of early fragments held at most.
    pub hold_bytes: u32,
}

/// `[tracer]` (docs/forwarding.md §11).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tracer {
    /// Reports per second the node sends at most (0 = none).
    pub reports_per_sec: u32,
    /// The cluster's tracer keys (hex, one per line, at most two): a mark is reported only when
    /// its MAC verifies under one of them. `None`: the tracer is off.
    pub key_file: Option<PathBuf>,
    /// Where reports may go: a report to a receiver outside these prefixes is not sent.
    pub receivers: Vec<stator_core::Prefix>,
}

impl Tracer {
    /// Whether the tracer is on (a key file is configured).
    pub fn enabled(&self) -> bool {
        self.key_file.is_some()
    }
}

/// `[[vip_class]]`: a class of clusters and its prefix groups (docs/forwarding.md §3.1).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VipClass {
    /// Name.
    pub name: String,
    /// Prefix groups.
    pub prefixes: Vec<stator_core::Prefix>,
    /// Default suffix length of its IPv4 VIPs.
    pub suffix_bits_v4: u8,
    /// Default suffix length of its IPv6 VIPs.
    pub suffix_bits_v6: u8,
}

impl Vip {
    /// The derived name of a VIP without a `name`.
    pub fn derived_name(key: &VipKey) -> String {
        let proto = key.proto;
        let port = match key.port {
            0 => "any".to_string(),
            p => p.to_string(),
        };
        match key.addr {
            IpAddr::V4(a) => format!("{proto}/{a}:{port}"),
            IpAddr::V6(a) => format!("{proto}/[{a}]:{port}"),
        }
    }

    /// Sum of the backends' weights (positive).
    pub fn total_weight(&self) -> u64 {
        self.backends.iter().map(|m| u64::from(m.weight)).sum()
    }
}
