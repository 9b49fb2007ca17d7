//! Defaults and bounds of the schema, in one place (`docs/config.md` quotes them).
//!
//! Limits that the data plane compiles in come from `stator-abi` (the Rust mirror of
//! `bpf/include/stator_abi.h`) and are never restated here.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// `dataplane.pin_path`.
pub const PIN_PATH: &str = "/sys/fs/bpf/stator";
/// `dataplane.conntrack_entries`.
pub const CONNTRACK_ENTRIES: u32 = stator_abi::STATOR_DEFAULT_CT_ENTRIES;
/// Smallest `dataplane.conntrack_entries`.
pub const MIN_CONNTRACK_ENTRIES: u32 = 1024;
/// Largest `dataplane.conntrack_entries` (2^26; per CPU with `conntrack = "percpu"`).
pub const MAX_CONNTRACK_ENTRIES: u32 = 1 << 26;
/// `dataplane.slots_per_generation`.
pub const SLOTS_PER_GENERATION: u32 = stator_abi::STATOR_DEFAULT_SLOTS_PER_GEN;
/// Largest `dataplane.slots_per_generation` (2^26 slots: 512 MiB for both generations).
pub const MAX_SLOTS_PER_GENERATION: u32 = 1 << 26;
/// `dataplane.tcp_timeout`.
pub const TCP_TIMEOUT: Duration = Duration::from_secs(900);
/// `dataplane.udp_timeout`.
pub const UDP_TIMEOUT: Duration = Duration::from_secs(300);
/// Bounds of both connection-table timeouts.
pub const MIN_CT_TIMEOUT: Duration = Duration::from_secs(1);
/// Bounds of both connection-table timeouts.
pub const MAX_CT_TIMEOUT: Duration = Duration::from_secs(86_400);

/// `dataplane.next_hop_cache`.
pub const NEXT_HOP_CACHE: Duration = Duration::from_secs(1);
/// Longest `dataplane.next_hop_cache`.
pub const MAX_NEXT_HOP_CACHE: Duration = Duration::from_secs(3600);

/// `encap.gue_port`.
pub const GUE_PORT: u16 = stator_abi::STATOR_GUE_PORT as u16;
/// `encap.outer_ttl`.
pub const OUTER_TTL: u8 = 64;

/// `bgp.bird_socket` (Debian's `bird2`).
pub const BIRD_SOCKET: &str = "/run/bird/bird.ctl";
/// `bgp.bird_config`.
pub const BIRD_CONFIG: &str = "/etc/bird/stator.conf";

/// `api.listen`.
pub const API_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9180);
/// Default `api.drain_timeout`: as long as a load balancer's usual deregistration delay.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);
/// Shortest `api.drain_timeout`.
pub const MIN_DRAIN_TIMEOUT: Duration = Duration::from_secs(0);
/// Longest `api.drain_timeout`.
pub const MAX_DRAIN_TIMEOUT: Duration = Duration::from_secs(86_400);
/// Default `api.max_connections`: far more than operators, scrapers and dashboards use, far
/// fewer than a process's file descriptors (1,024 by default on many hosts).
pub const API_MAX_CONNECTIONS: u32 = 256;
/// Largest `api.max_connections`.
pub const MAX_API_MAX_CONNECTIONS: u32 = 65_536;
/// Default `api.header_read_timeout`: ample for any client on a real network.
pub const API_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Shortest `api.header_read_timeout`.
pub const MIN_API_HEADER_READ_TIMEOUT: Duration = Duration::from_millis(100);
/// Longest `api.header_read_timeout`.
pub const MAX_API_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(300);

/// `vip.table_size`: the paper's default, prime.
pub const TABLE_SIZE: u32 = 65537;
/// Smallest `vip.table_size` (the paper's worked example; useful in tests).
pub const MIN_TABLE_SIZE: u32 = 7;
/// Largest `vip.table_size`.
pub const MAX_TABLE_SIZE: u32 = stator_abi::STATOR_MAX_TABLE_SIZE;

/// `pool.backend.weight`.
pub const WEIGHT: u32 = 1;
/// Largest weight (as IPVS).
pub const MAX_WEIGHT: u32 = 65535;

/// `pool.health.interval`.
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(2);
/// Smallest `pool.health.interval`.
pub const MIN_HEALTH_INTERVAL: Duration = Duration::from_millis(100);
/// Largest `pool.health.interval`.
pub const MAX_HEALTH_INTERVAL: Duration = Duration::from_secs(3600);
/// `pool.health.timeout`.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);
/// Smallest `pool.health.timeout`.
pub const MIN_HEALTH_TIMEOUT: Duration = Duration::from_millis(1);
/// `pool.health.rise`.
pub const HEALTH_RISE: u32 = 2;
/// `pool.health.fall`.
pub const HEALTH_FALL: u32 = 3;
/// Largest `rise` / `fall`.
pub const MAX_RISE_FALL: u32 = 100;
/// `pool.health.jitter`, as a fraction of the interval.
pub const HEALTH_JITTER: f64 = 0.1;
/// Largest jitter, as a fraction of the interval.
pub const MAX_JITTER: f64 = 0.5;
/// `pool.health.path`.
pub const HTTP_PATH: &str = "/";
/// `pool.health.expect_status`.
pub const HTTP_STATUS: (u16, u16) = (200, 399);
/// Largest UDP payload or expected reply, in bytes.
pub const MAX_UDP_PAYLOAD: usize = 1024;
