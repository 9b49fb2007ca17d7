//! How many file descriptors a configuration can make a node hold, at worst — what `stator
//! check` compares with the host's limit and `stator run` sizes its budget from
//! (docs/operations.md, "Descriptors and floods"). Pure: the host's facts (the descriptor
//! limit, the cores that decide a default worker count) are arguments.
//!
//! Two kinds of parts:
//! - **traffic**: what clients can make the proxy tier hold — each TCP or HTTP listener's
//!   `max_connections` × 2 (the client's connection and its upstream one) and an HTTP
//!   listener's idle kept-alive upstream connections (`http.keepalive_pool` × upstreams),
//!   each UDP listener's `udp.max_sessions` (one socket per session), all per worker;
//! - **reserved**: what must never fail for lack of a descriptor, whatever the traffic —
//!   a socket per health check (probes of one check run one at a time) and one for the
//!   neighbour nudges, the admin API's `api.max_connections` per endpoint (and the one
//!   accepted to be closed when it is full), BIRD's control socket and file, each listener
//!   worker's own socket and runtime (twice: a reload binds new sockets while the old ones
//!   drain), the process itself (estimated here, counted at start) and a spare.
//!
//! A node gives the proxy tier the limit less the reserved parts, and no more: traffic beyond
//! that is refused and counted, never taken from a health check or the API.

use std::fmt;

use crate::error::FieldPath;
use crate::types::{Config, DataplaneMode, ListenerProtocol};

/// Descriptors of each listener worker outside its traffic: the listening socket and the
/// runtime's epoll and eventfd, twice (a reload that re-binds opens the new ones while the
/// old drain), and one connection accepted to be refused.
pub const PER_WORKER: u64 = 7;
/// Descriptors of each TCP listener worker's kept pipes (32 empty pipes of 2): outside the
/// budget, so that they never stand between a connection and its descriptors (pipes lent to
/// connections draw on the budget).
pub const PIPES_PER_TCP_WORKER: u64 = 64;
/// Descriptors of a listener with `steering = "source"` or `"cpu"`: its reuseport program and
/// maps.
pub const PER_STEERED_LISTENER: u64 = 4;
/// BIRD's control socket and the file written through a temporary one, with room.
pub const BIRD: u64 = 4;
/// Left over for what the node opens now and then: a reload's configuration file, `/proc`
/// reads, log files.
pub const SPARE: u64 = 64;
/// What the process holds before any traffic, as estimated by `stator check` (standard
/// streams, the runtime, the API's sockets); `stator run` counts it instead.
pub const PROCESS_ESTIMATE: u64 = 64;
/// The data plane's programs, maps and sockets, estimated (XDP and AF_XDP).
pub const DATAPLANE_ESTIMATE: u64 = 192;

/// Whether a part is traffic or kept from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartKind {
    /// What clients of the listeners can make the node hold.
    Traffic,
    /// Kept from the traffic: health checks, the API, BIRD, listener sockets, a spare.
    Reserved,
    /// The process itself before any traffic: estimated, or counted at start.
    Process,
}

/// One line of a [`DescriptorPlan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The setting that decides it (`listener[0].udp.max_sessions`); the root for the
    /// process and the spare.
    pub path: FieldPath,
    /// What it is, with its arithmetic (`16384 sessions × 2 workers`).
    pub what: String,
    /// Descriptors.
    pub count: u64,
    /// Traffic or reserved.
    pub kind: PartKind,
}

/// The worst case of a configuration, part by part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorPlan {
    /// Every part, the traffic first, in document order.
    pub parts: Vec<Part>,
    /// The least the proxy tier needs to serve at all: one client per listener worker.
    pub min_traffic: u64,
}

impl DescriptorPlan {
    /// The traffic parts' sum.
    pub fn traffic(&self) -> u64 {
        self.sum(|k| k == PartKind::Traffic)
    }

    /// The reserved and process parts' sum: what a node keeps from the traffic.
    pub fn reserved(&self) -> u64 {
        self.sum(|k| k != PartKind::Traffic)
    }

    /// Everything.
    pub fn total(&self) -> u64 {
        self.sum(|_| true)
    }

    /// The traffic part that needs the most (the first of equals), where a warning points.
    pub fn largest_traffic(&self) -> Option<&Part> {
        self.parts
            .iter()
            .filter(|p| p.kind == PartKind::Traffic)
            .fold(None, |best: Option<&Part>, p| match best {
                Some(b) if b.count >= p.count => Some(b),
                _ => Some(p),
            })
    }

    /// The same plan with the process part counted (`stator run`: its open descriptors
    /// before the listeners start) instead of estimated.
    #[must_use]
    pub fn with_process(mut self, open: u64) -> Self {
        for p in &mut self.parts {
            if p.kind == PartKind::Process {
                p.count = open;
                p.what = "descriptors the process holds before any traffic".into();
            }
        }
        self
    }

    /// What the proxy tier may hold under `limit`: the limit less the reserved parts (0 when
    /// they do not fit).
    pub fn budget(&self, limit: u64) -> u64 {
        limit.saturating_sub(self.reserved())
    }

    /// Why the configuration cannot fit `limit`, if it cannot: [`Fit::Short`] when the
    /// worst case does not fit (traffic beyond the budget is refused and counted),
    /// [`Fit::Unworkable`] when the budget cannot serve one client per listener worker.
    pub fn fit(&self, limit: u64) -> Fit {
        if self.min_traffic > 0 && self.budget(limit) < self.min_traffic {
            Fit::Unworkable
        } else if self.total() > limit {
            Fit::Short
        } else {
            Fit::Fits
        }
    }

    /// The parts in one sentence each for the traffic and the reserve
    /// (`traffic: listener[0].udp.max_sessions: 16384 sessions × 2 workers = 32768. reserved:
    /// …`).
    pub fn lines(&self) -> String {
        let group = |title: &str, kinds: &[PartKind]| {
            let parts: Vec<String> = self
                .parts
                .iter()
                .filter(|p| kinds.contains(&p.kind))
                .map(|p| {
                    let at = if p.path.is_root() {
                        String::new()
                    } else {
                        format!("{}: ", p.path)
                    };
                    format!("{at}{} = {}", p.what, p.count)
                })
                .collect();
            format!("{title}: {}", parts.join("; "))
        };
        format!(
            "{}. {}",
            group("traffic", &[PartKind::Traffic]),
            group("reserved", &[PartKind::Reserved, PartKind::Process])
        )
    }

    fn sum(&self, keep: impl Fn(PartKind) -> bool) -> u64 {
        self.parts
            .iter()
            .filter(|p| keep(p.kind))
            .map(|p| p.count)
            .fold(0, u64::saturating_add)
    }
}

/// How a plan fits a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// The worst case fits.
    Fits,
    /// The worst case does not fit: traffic beyond the budget is refused (counted); health
    /// checks and the API keep their descriptors.
    Short,
    /// The reserve leaves too little to serve one client per listener worker.
    Unworkable,
}

impl fmt::Display for DescriptorPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.lines())
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl Config {
    /// The descriptors this configuration can make a node hold at worst, part by part;
    /// `default_workers` is the worker count of a listener that sets none (one per core of
    /// the host).
    pub fn descriptor_plan(&self, default_workers: usize) -> DescriptorPlan {
        let mut traffic = Vec::new();
        let mut reserved = Vec::new();
        let mut min_traffic = 0u64;
        let mut listener_workers = 0u64;
        let mut tcp_workers = 0u64;
        let mut steered = 0u64;
        for (i, l) in self.listeners.iter().enumerate() {
            let at = FieldPath::root().key("listener").index(i);
            let per_cpu = match (&self.receive_steering, l.steering) {
                (Some(r), crate::types::Steering::Cpu) => r.cpus.as_ref().map(Vec::len),
                _ => None,
            };
            let workers = l
                .workers
                .map_or(per_cpu.unwrap_or(default_workers) as u64, u64::from)
                .max(1);
            listener_workers += workers;
            if l.protocol == ListenerProtocol::Tcp {
                tcp_workers += workers;
            }
            steered += u64::from(l.steering != crate::types::Steering::Kernel);
            let w = plural(workers, "worker", "workers");
            match l.protocol {
                ListenerProtocol::Tcp | ListenerProtocol::Http => {
                    let n = u64::from(l.max_connections);
                    traffic.push(Part {
                        path: at.key("max_connections"),
                        what: format!("{n} connections × 2 (client and upstream) × {w}"),
                        count: n.saturating_mul(2).saturating_mul(workers),
                        kind: PartKind::Traffic,
                    });
                    min_traffic += 2 * workers;
                    if l.protocol == ListenerProtocol::Http && l.http.keepalive_pool > 0 {
                        let pool = u64::from(l.http.keepalive_pool);
                        let ups = l.upstreams.len() as u64;
                        traffic.push(Part {
                            path: at.key("http").key("keepalive_pool"),
                            what: format!(
                                "{pool} idle upstream connections × {} × {w}",
                                plural(ups, "upstream", "upstreams")
                            ),
                            count: pool.saturating_mul(ups).saturating_mul(workers),
                            kind: PartKind::Traffic,
                        });
                    }
                }
                ListenerProtocol::Udp => {
                    let n = u64::from(l.udp.max_sessions);
                    traffic.push(Part {
                        path: at.key("udp").key("max_sessions"),
                        what: format!("{n} sessions × {w}"),
                        count: n.saturating_mul(workers),
                        kind: PartKind::Traffic,
                    });
                    min_traffic += workers;
                }
            }
        }
        let checks = self.health_plan().checks.len() as u64;
        reserved.push(Part {
            path: FieldPath::root().key("pool"),
            what: format!(
                "{} and the neighbour nudges",
                plural(checks, "health check", "health checks")
            ),
            count: checks + 1,
            kind: PartKind::Reserved,
        });
        let endpoints = 1 + u64::from(self.api.listen.is_some());
        let api = u64::from(self.api.max_connections) + 1;
        reserved.push(Part {
            path: FieldPath::root().key("api").key("max_connections"),
            what: format!(
                "({} + 1) × {}",
                self.api.max_connections,
                plural(endpoints, "endpoint", "endpoints")
            ),
            count: api * endpoints,
            kind: PartKind::Reserved,
        });
        if self.bgp.is_some() {
            reserved.push(Part {
                path: FieldPath::root().key("bgp"),
                what: "BIRD's socket and file".into(),
                count: BIRD,
                kind: PartKind::Reserved,
            });
        }
        if listener_workers > 0 {
            reserved.push(Part {
                path: FieldPath::root().key("listener"),
                what: format!(
                    "{} × {PER_WORKER} (sockets and runtimes){}{}",
                    plural(listener_workers, "worker", "workers"),
                    if tcp_workers > 0 {
                        format!(
                            " + {} × {PIPES_PER_TCP_WORKER} (kept pipes)",
                            plural(tcp_workers, "TCP worker", "TCP workers")
                        )
                    } else {
                        String::new()
                    },
                    if steered > 0 {
                        format!(" + {steered} steering programs × {PER_STEERED_LISTENER}")
                    } else {
                        String::new()
                    }
                ),
                count: listener_workers * PER_WORKER
                    + tcp_workers * PIPES_PER_TCP_WORKER
                    + steered * PER_STEERED_LISTENER,
                kind: PartKind::Reserved,
            });
        }
        let process = match self.dataplane.mode {
            DataplaneMode::None => PROCESS_ESTIMATE,
            DataplaneMode::Xdp | DataplaneMode::Afxdp => PROCESS_ESTIMATE + DATAPLANE_ESTIMATE,
        };
        reserved.push(Part {
            path: FieldPath::root(),
            what: "the process itself (estimated)".into(),
            count: process,
            kind: PartKind::Process,
        });
        reserved.push(Part {
            path: FieldPath::root(),
            what: "spare (reloads, logs)".into(),
            count: SPARE,
            kind: PartKind::Reserved,
        });
        traffic.extend(reserved);
        DescriptorPlan {
            parts: traffic,
            min_traffic,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{Host, check_str_on};

    const CONFIG: &str = r#"
[node]
name = "lb"
[dataplane]
mode = "none"
[api]
max_connections = 100
listen = "127.0.0.1:9000"
read_token = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
[[pool]]
name = "dns"
[pool.health]
method = "udp"
payload = "ping"
[[pool.backend]]
address = "10.0.0.1"
port = 53
[[pool.backend]]
address = "10.0.0.2"
port = 53
[[listener]]
name = "dns"
address = "0.0.0.0:53"
protocol = "udp"
pool = "dns"
workers = 2
[listener.udp]
max_sessions = 1000
[[listener]]
name = "web"
address = "0.0.0.0:80"
protocol = "http"
pool = "dns"
backend_port = 80
[listener.http]
keepalive_pool = 4
"#;

    fn plan() -> DescriptorPlan {
        crate::from_toml_str("t.toml", CONFIG)
            .unwrap()
            .descriptor_plan(3)
    }

    #[test]
    fn every_part_has_its_setting_and_its_arithmetic() {
        let p = plan();
        let by_path = |path: &str| {
            p.parts
                .iter()
                .find(|x| x.path.to_string() == path)
                .unwrap_or_else(|| panic!("no part at {path}: {p:#?}"))
        };
        // UDP: sessions × workers; HTTP (3 workers by default here): connections × 2 and the
        // idle kept-alive connections per upstream
        assert_eq!(by_path("listener[0].udp.max_sessions").count, 2000);
        assert_eq!(by_path("listener[1].max_connections").count, 16_384 * 2 * 3);
        assert_eq!(by_path("listener[1].http.keepalive_pool").count, 4 * 2 * 3);
        assert_eq!(p.traffic(), 2000 + 98_304 + 24);
        // two health checks (one per backend, the same method for both listeners) + nudges;
        // two API endpoints with one connection over each limit; 5 workers' own descriptors
        assert_eq!(by_path("pool").count, 3);
        assert_eq!(by_path("api.max_connections").count, 202);
        assert_eq!(by_path("listener").count, 5 * PER_WORKER);
        assert_eq!(
            p.reserved(),
            3 + 202 + 5 * PER_WORKER + PROCESS_ESTIMATE + SPARE
        );
        assert_eq!(p.min_traffic, 2 + 6);
        assert_eq!(p.total(), p.traffic() + p.reserved());
        assert_eq!(
            p.largest_traffic().map(|x| x.path.to_string()),
            Some("listener[1].max_connections".into())
        );
        // counted at start instead of estimated
        let counted = p.clone().with_process(20);
        assert_eq!(counted.reserved(), p.reserved() - PROCESS_ESTIMATE + 20);
    }

    #[test]
    fn fit_budget_and_refusal() {
        let p = plan();
        assert_eq!(p.fit(1 << 20), Fit::Fits);
        assert_eq!(p.fit(4096), Fit::Short);
        assert_eq!(p.budget(4096), 4096 - p.reserved());
        // the reserve leaves fewer than one client per worker
        assert_eq!(p.fit(p.reserved() + 7), Fit::Unworkable);
        assert_eq!(p.fit(p.reserved() + 8), Fit::Short);
        assert_eq!(p.budget(10), 0);
    }

    #[test]
    fn stator_check_names_the_settings_when_the_worst_case_does_not_fit() {
        let host = Host {
            nofile: Some(4096),
            cores: 3,
        };
        let report = check_str_on("t.toml", CONFIG, Some(&host));
        assert!(report.is_ok(), "{report}");
        let w: Vec<_> = report
            .warnings
            .iter()
            .filter(|w| w.message.contains("descriptors"))
            .collect();
        assert_eq!(w.len(), 1, "{report}");
        // located at the setting that needs the most, every other named in the message
        assert_eq!(w[0].path.to_string(), "listener[1].max_connections");
        assert!(w[0].location.is_some());
        for path in [
            "listener[0].udp.max_sessions: 1000 sessions × 2 workers = 2000",
            "listener[1].max_connections",
            "listener[1].http.keepalive_pool",
            "api.max_connections",
            "limit here (4096",
        ] {
            assert!(w[0].message.contains(path), "{path}: {}", w[0].message);
        }
        let text = report.to_string();
        assert!(text.contains("warning: listener[1].max_connections: the worst case needs"));
        // enough descriptors: no warning; no host: no warning
        let big = Host {
            nofile: Some(1 << 20),
            cores: 3,
        };
        assert!(
            check_str_on("t.toml", CONFIG, Some(&big))
                .warnings
                .is_empty()
        );
        assert!(check_str_on("t.toml", CONFIG, None).warnings.is_empty());
        // too few to serve at all: the message says start-up is refused
        let tiny = Host {
            nofile: Some(300),
            cores: 3,
        };
        let r = check_str_on("t.toml", CONFIG, Some(&tiny));
        assert!(
            r.warnings[0].message.contains("refuses to start"),
            "{}",
            r.warnings[0].message
        );
    }
}
