//! One test binary for the proxy tier on loopback: HTTP, TCP and UDP listeners, affinity, retries,
//! timeouts, the smuggling table, the access log: each module was a test binary of its own, and
//! each linked the whole crate and its dependencies again (issue 26). Each module keeps its own
//! documentation; its tests run in parallel with those of the others, so each keeps its own names,
//! directories and ports.

#[path = "../common/mod.rs"]
mod common;
#[path = "../udp_common/mod.rs"]
mod udp_common;

mod proxy_access_log;
mod proxy_affinity;
mod proxy_http;
mod proxy_retries;
mod proxy_smuggling;
mod proxy_tcp;
mod proxy_timeouts;
mod proxy_udp;
