//! One test binary for the `stator` binary without privileges: the access log, the benchmark smoke
//! runs, the build loop, packaging: each module was a test binary of its own, and each linked the
//! whole crate and its dependencies again (issue 26). Each module keeps its own documentation; its
//! tests run in parallel with those of the others, so each keeps its own names, directories and
//! ports.

#[path = "../common/mod.rs"]
mod common;

mod access_log_node;
mod bench_hashing;
mod bench_proxy_smoke;
mod bench_sched;
mod bench_tcp_smoke;
mod bench_udp_proxy_smoke;
mod build_loop;
mod packaging;
mod upgrade_node;
