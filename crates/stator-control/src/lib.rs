//! # stator-control — the controller of a Stator node
//!
//! Layer: above the configuration (`stator-config`), the forwarding model (`stator-core`), the
//! data-plane boundary (`stator-plane`; the XDP and AF_XDP adapters are here) and the BGP
//! announcer (`stator-bird`); below the node (`stator-node`), whose `Node::start` is
//! `stator run`. The paper's §2.2 in one crate: "each Maglev machine contains a controller and a forwarder"; the controller
//! checks the health of backends (deduplicated) and of its own forwarder, commits complete
//! configurations atomically, and announces or withdraws the VIPs.
//!
//! ## The shape
//!
//! ```text
//!  SIGHUP / PUT /v1/config ─┐                 ┌─ health::Runner (one task per deduplicated check)
//!  drain / undrain (API) ───┤                 │        │ transitions
//!  drain timeouts ──────────┼──► Reconciler ◄─┴────────┘
//!  forwarder health (1 s) ──┘   (one task; owns Config, ids, health, drains, generation)
//!                                   │ plan::build (pure): complete Snapshot + Maglev tables
//!                                   ├──► DataPlane::commit (spawn_blocking; atomic in the plane)
//!                                   ├──► announcer: DesiredRoutes (VIP has a usable backend
//!                                   │               && forwarder healthy)
//!                                   └──► View (watch channel) ──► admin API, /metrics, tracer
//! ```
//!
//! - [`ids`] gives every VIP (by match key) and every (VIP, backend stable name) pair a
//!   stable id, seeded from the data plane's active snapshot at start, so connection-table
//!   entries (which name real ids) stay meaningful across reloads, health changes and
//!   restarts. Freed ids are quarantined for the longest connection-table idle timeout.
//! - [`plan`] is pure: config + ids + per-backend health and drain state → a complete
//!   [`stator_core::Snapshot`] (unchanged Maglev tables are reused, not rebuilt).
//! - `stator-plane`'s `DataPlane` is the boundary to a forwarder: commit, read back, attach
//!   and detach, self-test; its `PlaneReader` reads counters and the connection table
//!   without holding the writer. Each plane implements both in its own crate —
//!   `stator_xdp::XdpPlane`, `stator_afxdp::AfxdpPlane` — and stator-plane's own `CorePlane` does for
//!   stator-core alone (tests without root, in simulated time) and `NoPlane` for a node that
//!   forwards nothing.
//! - `stator-health` (its own crate): TCP connect, HTTP GET, HTTPS GET (TLS from the node,
//!   through its `Tls` trait) and UDP
//!   probes on a jittered
//!   schedule, rise/fall state machines; also keeps the kernel's neighbour entries of
//!   backends resolved (which the XDP forwarder needs and cannot do itself).
//! - [`reconciler`]: the one owner of the node's state. Every input is a message; each
//!   produces at most one new Snapshot, committed before the announcer is told.
//! - [`watchdog`]: the forwarder's health, once a second (attached with our program, maps
//!   answering, self-test); withdraws everything on failure and re-attaches.
//! - [`host`]: what the host must provide (root, interfaces, forwarding sysctls — checked,
//!   never set) and which settings a reload may not change.
//! - [`events`]: the recent events (health changes, reloads, drains, announcements) the
//!   reconciler records for `GET /v1/events` and the status page.
//! - [`tokens`]: the admin API's bearer tokens, swapped on reload (the API itself —
//!   axum, `/metrics`, the tracer, the status page, its client — is `stator-api`).
//! - [`listeners`]: the proxy tier (`stator-proxy`) kept in step with the views: listeners
//!   from `[[listener]]`, upstream states from the same health checks and drains.
//! - [`descriptors`]: the descriptor limit raised at start, and the proxy tier's budget — the
//!   limit less what health checks, the API, BIRD and the process keep — sized from the
//!   configuration at start and on each reload.
//! - [`supervise`]: heartbeats, systemd notification and the watchdog of the node's loops.
//!
//! All of the above is started in order and stopped in order by `stator-node` (`stator run`),
//! which also starts the API (`stator-api`) and hands the reconciler its TLS stack
//! (`stator-tls`). This crate compiles neither axum nor rustls.
//!
//! ## Contract
//! - **A bad config never replaces a running one.** A reload is validated, planned, built and
//!   committed; any failure leaves the previous config, snapshot and generation in place and
//!   is returned to whoever asked (HTTP status + field path, or the log for SIGHUP).
//! - **Every commit is a complete snapshot**; the data plane switches atomically.
//! - **Stable ids**: a (VIP, backend) pair keeps its real id while it stays in the
//!   configuration; an id is reused for a different pair only after the quarantine.
//! - **Announce iff** the forwarder is healthy and the VIP has at least one usable backend;
//!   nothing is announced before the first commit; everything is withdrawn on shutdown before
//!   the data plane is detached.
//! - **Generations** are monotonic across restarts (seeded from the data plane).
//! - **No traffic takes what the node owes its operator and its backends**: the proxy tier
//!   holds no more descriptors than its budget, so health probes, API accepts and BIRD's
//!   socket never fail for lack of one, whatever clients do.
//! - Nothing here panics on input from the network (API requests, probe replies).
//!
//! ## What it must never do
//! Make a forwarding decision (that is `stator-core` and the BPF program); block the
//! reconciler or the API on BIRD or on a probe; log per packet; hold the data plane's writer
//! lock while reading counters for the API.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod descriptors;
mod error;
pub mod events;
pub mod host;
pub mod ids;
pub mod listeners;
pub mod logging;
pub mod plan;
pub mod reconciler;
pub mod reports;
pub mod supervise;
pub mod tokens;
pub mod view;
pub mod watchdog;

pub use error::ControlError;
