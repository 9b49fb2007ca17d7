//! Defaults and bounds of the schema, in one place (`docs/config.md` quotes them).
//!
//! Limits that the data plane compiles in come from `stator-abi` (the Rust mirror of
//! `bpf/include/stator_abi.h`) and are never restated here.

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

/// Shortest `dataplane.stale_after` other than 0: the controller refreshes the heartbeat every
/// second; a bound of a few seconds survives a loaded scheduler.
pub const MIN_STALE_AFTER: Duration = Duration::from_secs(3);
/// Longest `dataplane.stale_after`.
pub const MAX_STALE_AFTER: Duration = Duration::from_secs(86_400);

/// `dataplane.afxdp.packet_threads`: one beside the I/O thread fits a 2-core machine.
pub const AFXDP_PACKET_THREADS: u32 = 1;
/// `dataplane.afxdp.frames`.
pub const AFXDP_FRAMES: u32 = 8192;
/// `dataplane.afxdp.frame_size`.
pub const AFXDP_FRAME_SIZE: u32 = 4096;
/// `dataplane.afxdp.ring_size`.
pub const AFXDP_RING_SIZE: u32 = 2048;
/// `dataplane.afxdp.batch`.
pub const AFXDP_BATCH: u32 = 64;
/// `dataplane.afxdp.flush_timeout` (the paper's 50 µs).
pub const AFXDP_FLUSH_TIMEOUT: Duration = Duration::from_micros(50);
/// Longest `dataplane.afxdp.flush_timeout`.
pub const MAX_AFXDP_FLUSH_TIMEOUT: Duration = Duration::from_millis(10);
/// `dataplane.afxdp.queue_depth`.
pub const AFXDP_QUEUE_DEPTH: u32 = 1024;
/// `dataplane.afxdp.busy_poll`.
pub const AFXDP_BUSY_POLL: Duration = Duration::from_micros(20);
/// Longest `dataplane.afxdp.busy_poll`.
pub const MAX_AFXDP_BUSY_POLL: Duration = Duration::from_secs(1);

/// `encap.gue_port`.
pub const GUE_PORT: u16 = stator_abi::STATOR_GUE_PORT as u16;
/// `encap.outer_ttl`.
pub const OUTER_TTL: u8 = 64;

/// `bgp.bird_socket` (Debian's `bird2`).
pub const BIRD_SOCKET: &str = "/run/bird/bird.ctl";
/// `bgp.bird_config`.
pub const BIRD_CONFIG: &str = "/etc/bird/stator.conf";

/// `api.socket`: under systemd's `RuntimeDirectory=stator`.
pub const API_SOCKET: &str = "/run/stator/api.sock";
/// `upgrade.socket` with the default `api.socket` ([`crate::upgrade_socket_beside`] of it).
pub const UPGRADE_SOCKET: &str = "/run/stator/api.upgrade.sock";
/// Default `upgrade.drain`: a stopped worker's own limit (`stator_proxy::worker::DRAIN_LIMIT`).
pub const UPGRADE_DRAIN: Duration = Duration::from_secs(300);
/// Longest `upgrade.drain`.
pub const MAX_UPGRADE_DRAIN: Duration = Duration::from_secs(86_400);
/// Default `upgrade.start_timeout`.
pub const UPGRADE_START_TIMEOUT: Duration = Duration::from_secs(60);
/// Shortest `upgrade.start_timeout`.
pub const MIN_UPGRADE_START_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest `upgrade.start_timeout`.
pub const MAX_UPGRADE_START_TIMEOUT: Duration = Duration::from_secs(3_600);
/// `api.socket_group`: created by `make install` and the package.
pub const API_SOCKET_GROUP: &str = "stator";
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

/// `listener.timeouts.connect`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// `listener.timeouts.header_read` (HAProxy's usual `timeout http-request`).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// `listener.timeouts.idle`.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// `listener.timeouts.response` (nginx's `proxy_read_timeout`).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
/// `listener.timeouts.client_read` (nginx's `client_body_timeout`).
pub const CLIENT_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// `listener.timeouts.client_write` (nginx's `send_timeout`).
pub const CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// `listener.timeouts.upstream_read` (nginx's `proxy_read_timeout`).
pub const UPSTREAM_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// `listener.timeouts.upstream_write` (nginx's `proxy_send_timeout`).
pub const UPSTREAM_WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Bounds of every listener timeout.
pub const MIN_PROXY_TIMEOUT: Duration = Duration::from_millis(1);
/// Bounds of every listener timeout.
pub const MAX_PROXY_TIMEOUT: Duration = Duration::from_secs(86_400);
/// `listener.retries`.
pub const RETRIES: u8 = 2;
/// Largest `listener.retries`.
pub const MAX_RETRIES: u8 = 16;
/// Largest `listener.workers`.
pub const MAX_WORKERS: u16 = 256;
/// Most workers of a listener with `steering = "source"`: the steering program's socket array
/// holds this many worker ids, so that reloads that add workers always fit.
pub const MAX_SOURCE_STEERING_WORKERS: u16 = 64;
/// `receive_steering.queue_size`: packets each CPU's queue holds (a NIC's receive ring).
pub const RECEIVE_QUEUE_SIZE: u32 = 2048;
/// Most `receive_steering.queue_size`.
pub const MAX_RECEIVE_QUEUE_SIZE: u32 = 65_536;
/// `listener.max_connections` (per worker).
pub const MAX_CONNECTIONS: u32 = 16_384;
/// `listener.max_connections_per_source` (the whole listener): far above a browser's 6 to 8
/// connections per origin, or an office's NAT; a proxy in front of the node needs more.
pub const MAX_CONNECTIONS_PER_SOURCE: u32 = 1024;
/// `listener.source_prefix_v4`: one address is one source.
pub const SOURCE_PREFIX_V4: u8 = 32;
/// `listener.source_prefix_v6`: a /64 is one source (what one IPv6 host is usually given;
/// it can use any address in it).
pub const SOURCE_PREFIX_V6: u8 = 64;
/// `listener.udp.max_sessions` (per worker).
pub const UDP_MAX_SESSIONS: u32 = 16_384;
/// `listener.udp.max_sessions_per_source` (the whole listener).
pub const UDP_MAX_SESSIONS_PER_SOURCE: u32 = 1024;
/// `listener.udp.session_rate` (per worker): opening a session costs a socket, a bind, a
/// connect and an epoll registration, some 10–20 µs; 20,000 a second keeps that under a
/// third of a core and leaves the worker to the sessions it has.
pub const UDP_SESSION_RATE: u32 = 20_000;
/// Largest `listener.udp.session_rate` and `listener.udp.session_burst`.
pub const MAX_UDP_SESSION_RATE: u32 = 10_000_000;
/// `listener.udp.unreplied_timeout`: conntrack's `nf_conntrack_udp_timeout`.
pub const UDP_UNREPLIED_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest `listener.udp.max_sessions`.
pub const MAX_UDP_SESSIONS: u32 = 1 << 22;
/// Largest `listener.udp.responses`.
pub const MAX_UDP_RESPONSES: u32 = 65_535;
/// `listener.persistence_entries` (per worker).
pub const PERSISTENCE_ENTRIES: u32 = 65_536;
/// Largest `listener.persistence_entries`.
pub const MAX_PERSISTENCE_ENTRIES: u32 = 1 << 24;
/// `listener.http.max_header_size` (nginx: 4 × 8k buffers).
pub const MAX_HEADER_SIZE: u32 = 32 * 1024;
/// Smallest `listener.http.max_header_size` (hyper's smallest read buffer).
pub const MIN_MAX_HEADER_SIZE: u32 = 8192;
/// Largest `listener.http.max_header_size`.
pub const MAX_MAX_HEADER_SIZE: u32 = 1 << 20;
/// `listener.http.keepalive_pool` (nginx's usual `keepalive 32`).
pub const KEEPALIVE_POOL: u32 = 32;
/// Largest `listener.http.keepalive_pool`.
pub const MAX_KEEPALIVE_POOL: u32 = 65_536;
/// `listener.http.keepalive_timeout` (nginx's upstream `keepalive_timeout`).
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(60);

/// `fragments.table_size`: the peers' Maglev table (prime; 100 × the most peers keeps their
/// shares within 1%).
pub const PEER_TABLE_SIZE: u32 = 6553;
/// `fragments.timeout`.
pub const FRAG_TIMEOUT: Duration = Duration::from_secs(2);
/// Bounds of `fragments.timeout`.
pub const MIN_FRAG_TIMEOUT: Duration = Duration::from_millis(100);
/// Bounds of `fragments.timeout` (the kernel reassembles within 30 s).
pub const MAX_FRAG_TIMEOUT: Duration = Duration::from_secs(30);
/// `fragments.table_entries`.
pub const FRAG_TABLE_ENTRIES: u32 = stator_abi::STATOR_DEFAULT_FRAG_ENTRIES;
/// Bounds of `fragments.table_entries`.
pub const MIN_FRAG_TABLE_ENTRIES: u32 = 1024;
/// Bounds of `fragments.table_entries`.
pub const MAX_FRAG_TABLE_ENTRIES: u32 = 1 << 24;
/// `fragments.hold_frames`.
pub const HOLD_FRAMES: u32 = 1024;
/// Largest `fragments.hold_frames`.
pub const MAX_HOLD_FRAMES: u32 = 1 << 16;
/// `fragments.hold_bytes` (also the size of the `stator_hold` ring, rounded up to a power of
/// two).
pub const HOLD_BYTES: u32 = stator_abi::STATOR_DEFAULT_HOLD_RING;
/// Bounds of `fragments.hold_bytes`.
pub const MIN_HOLD_BYTES: u32 = 1 << 16;
/// Bounds of `fragments.hold_bytes`.
pub const MAX_HOLD_BYTES: u32 = 1 << 28;

/// `tracer.reports_per_sec`.
pub const TRACE_REPORTS_PER_SEC: u32 = 100;
/// Largest `tracer.reports_per_sec`.
pub const MAX_TRACE_REPORTS_PER_SEC: u32 = 100_000;

/// `vip_class.suffix_bits_v4`: a cluster prefix of /24.
pub const SUFFIX_BITS_V4: u8 = 8;
/// `vip_class.suffix_bits_v6`: a cluster prefix of /64.
pub const SUFFIX_BITS_V6: u8 = 64;

/// `listener.max_fails`: nginx's default, one failure excludes an upstream.
pub const MAX_FAILS: u32 = 1;
/// Largest `listener.max_fails`.
pub const MAX_MAX_FAILS: u32 = 1000;
/// `listener.fail_timeout`: nginx's default.
pub const FAIL_TIMEOUT: Duration = Duration::from_secs(10);
/// Shortest `listener.fail_timeout`.
pub const MIN_FAIL_TIMEOUT: Duration = Duration::from_millis(100);
/// The methods `listener.http.retry_methods` may name (the HTTP proxy's `Methods`).
pub const HTTP_METHODS: [&str; 9] = [
    "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE", "POST", "PATCH", "CONNECT",
];
/// `listener.http.retry_methods`: RFC 9110 §9.2.2's idempotent methods.
pub const RETRY_METHODS: [&str; 6] = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"];
