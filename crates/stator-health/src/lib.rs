//! # stator-health — health checks of backends: probes, their schedule, rise/fall machines
//!
//! Layer: above the configuration (`stator-config`, whose `HealthPlan` says what to check);
//! below the controller (`stator-control`), whose reconciler owns a [`Runner`] and reads its
//! [`Transition`]s. HTTPS probes take their TLS from the node through the [`tls::Tls`] trait
//! (`stator-tls`, rustls): neither this crate nor the controller compiles a TLS library.
//!
//! The checks to run come from `Config::health_plan()`, deduplicated across all pools by
//! (address, port, method, parameters) as in the paper's §2.2: a backend listed in ten pools
//! with the same check is probed once. [`Runner`] keeps one task per check; a reload keeps
//! the tasks (and the states) of checks that are still configured, stops removed ones and
//! starts new ones, staggered.
//!
//! Per check:
//! - a probe ([`probe`]) starts every `interval ± jitter` (start to start); it fails when it
//!   has not succeeded within `timeout`;
//! - the **first** result sets the state (there is no history to smooth yet; until then the
//!   check is *unknown* and its backends are not used); after that the state changes only
//!   after `rise` consecutive successes or `fall` consecutive failures ([`Machine`]);
//! - new checks start spread over `min(interval, 2 s)`, so a start or reload does not probe
//!   every backend at the same instant and first results arrive within seconds;
//! - a check replaced by one with other timings but the same target and method inherits its
//!   state, so editing an interval never makes backends unknown.
//!
//! Transitions are logged, counted and sent to the reconciler as [`Transition`]s.
//!
//! **Neighbours.** The XDP forwarder takes next hops from the kernel FIB and cannot resolve
//! a missing neighbour itself (`bpf_fib_lookup` answers `no_neigh` and the packet is
//! dropped). Probes are ordinary kernel traffic to the backend, so they keep its neighbour
//! entry (or its gateway's) resolved. Backends with no check (`method = "none"`) get a
//! *neighbour nudge* instead: one UDP datagram to the discard port (9) every 5 s — the
//! kernel resolves the neighbour to send it, whatever the backend does with it.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod machine;
pub mod probe;
mod runner;
pub mod tls;

pub use machine::Machine;
pub use runner::{Board, CheckStatus, NUDGE_INTERVAL, Runner, Transition};
pub use tls::{Tls, TlsClient};

/// How long a health check may be late (past its due time plus its own timeout) before the
/// node's supervisor counts it as stuck.
pub const CHECK_ALLOWANCE: std::time::Duration = std::time::Duration::from_secs(5);

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use stator_config::{HealthCheck, Probe, Timing};

/// Where probes and nudges connect: to the backend's own address, unless a route sends
/// that address elsewhere — curl's `--connect-to`. A node has none (the default). Tests that
/// run without root, which cannot own a backend's address, route backends to real servers
/// on loopback: the probes are the real ones (handshake, HTTP exchange, datagram and reply),
/// only their destination differs, and an HTTP check still names the backend in `Host`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeRoutes {
    routes: Arc<BTreeMap<SocketAddr, SocketAddr>>,
}

impl ProbeRoutes {
    /// No routes: every probe goes to its backend.
    pub fn new() -> Self {
        Self::default()
    }

    /// Probes of `backend` connect to `to` instead.
    #[must_use]
    pub fn route(mut self, backend: SocketAddr, to: SocketAddr) -> Self {
        Arc::make_mut(&mut self.routes).insert(backend, to);
        self
    }

    /// Where a probe of `backend` connects.
    pub fn connect_to(&self, backend: SocketAddr) -> SocketAddr {
        self.routes.get(&backend).copied().unwrap_or(backend)
    }
}

/// What identifies a deduplicated check across reloads: target, method with its parameters,
/// and timing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CheckKey {
    /// Address probed.
    pub address: IpAddr,
    /// Port probed.
    pub port: u16,
    /// Method and parameters.
    pub probe: Probe,
    /// Schedule and state machine.
    pub timing: Timing,
}

impl CheckKey {
    /// The key of a planned check.
    pub fn of(check: &HealthCheck) -> Self {
        Self {
            address: check.address,
            port: check.port,
            probe: check.probe.clone(),
            timing: check.timing,
        }
    }

    /// The same target and method, whatever the timing (a state may pass between these).
    pub fn same_target(&self, other: &Self) -> bool {
        self.address == other.address && self.port == other.port && self.probe == other.probe
    }

    /// `tcp://10.1.1.11:80`, `http://[2001:db8::1]:80/healthz`,
    /// `https://10.1.1.11:443/healthz`, `udp://10.1.5.11:53`.
    pub fn url(&self) -> String {
        let host = match self.address {
            IpAddr::V4(a) => format!("{a}:{}", self.port),
            IpAddr::V6(a) => format!("[{a}]:{}", self.port),
        };
        match &self.probe {
            Probe::Tcp => format!("tcp://{host}"),
            Probe::Http(h) => format!("http://{host}{}", h.path),
            Probe::Https(h) => format!("https://{host}{}", h.http.path),
            Probe::Udp(_) => format!("udp://{host}"),
        }
    }
}
