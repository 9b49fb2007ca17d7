//! `stator check FILE`: a report of every error (or, if there is none, a summary of what the
//! configuration contains), for humans (`Display`) and tools (`Serialize`, for `--json`).
//!
//! Line format, one problem per line, compiler style so that editors can jump to it:
//!
//! ```text
//! stator.toml:40:14: error: vip[2].table_size: 65536 is not prime; the nearest primes are 65521 and 65537
//! stator.toml:12:1: warning: pool[3]: pool "old" is not used by any VIP
//! stator.toml: 1 error, 1 warning
//! ```
//!
//! The exit status is 1 when there is any error and 0 otherwise; warnings never fail a check.

use std::fmt;
use std::net::IpAddr;
use std::path::Path;

use serde::Serialize;

use crate::error::{ConfigError, FieldPath, Location, Warning, write_line};
use crate::parse::parse;
use crate::types::{Config, Encap};
use crate::validate::validate;

/// The result of checking one file.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// The file, as given.
    pub file: String,
    /// Whether the configuration is valid (no errors).
    pub ok: bool,
    /// Every error, in document order.
    pub errors: Vec<Diagnostic>,
    /// Warnings (only when there are no errors), in document order.
    pub warnings: Vec<Diagnostic>,
    /// What the configuration contains (only when there are no errors).
    pub summary: Option<Summary>,
}

/// One error or warning, flattened for output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Field path (`vip[2].table_size`); empty for the whole file.
    pub path: FieldPath,
    /// Line and column, when known.
    pub location: Option<Location>,
    /// What is wrong, without the path.
    pub message: String,
}

impl From<&ConfigError> for Diagnostic {
    fn from(e: &ConfigError) -> Self {
        Self {
            path: e.path.clone(),
            location: e.location,
            message: e.error.to_string(),
        }
    }
}

impl From<&Warning> for Diagnostic {
    fn from(w: &Warning) -> Self {
        Self {
            path: w.path.clone(),
            location: w.location,
            message: w.kind.to_string(),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_root() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// What a valid configuration contains.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Node name.
    pub node: String,
    /// Interfaces the data plane attaches to.
    pub interfaces: Vec<String>,
    /// VIPs, in file order.
    pub vips: Vec<VipSummary>,
    /// Number of pools.
    pub pools: usize,
    /// Number of distinct backends.
    pub backends: usize,
    /// Number of health checks after deduplication.
    pub health_checks: usize,
    /// (VIP, backend) pairs.
    pub reals: usize,
    /// Maglev slots used per generation.
    pub slots: u64,
    /// Maglev slots available per generation.
    pub slots_per_generation: u32,
    /// BGP neighbours (0 when BGP is off).
    pub bgp_neighbors: usize,
    /// Data plane (`xdp`, `none`).
    pub dataplane: &'static str,
    /// Proxy listeners, in file order.
    pub listeners: Vec<ListenerSummary>,
    /// The packet tracer: on (with its receivers) or off, and how to turn it on.
    pub tracer: String,
    /// `[receive_steering]`: what it does and what the host needs for it (`None`: absent).
    pub receive_steering: Option<String>,
}

/// One listener in a [`Summary`].
#[derive(Debug, Clone, Serialize)]
pub struct ListenerSummary {
    /// Name.
    pub name: String,
    /// `tcp` or `http`.
    pub protocol: &'static str,
    /// Listen address.
    pub address: std::net::SocketAddr,
    /// Pool name.
    pub pool: String,
    /// Upstreams (the pool's backends).
    pub upstreams: usize,
    /// Scheduler name.
    pub scheduler: &'static str,
    /// Steering name.
    pub steering: &'static str,
}

/// One VIP in a [`Summary`].
#[derive(Debug, Clone, Serialize)]
pub struct VipSummary {
    /// Name.
    pub name: String,
    /// `tcp` or `udp`.
    pub protocol: &'static str,
    /// Address.
    pub address: IpAddr,
    /// Port (0 = any).
    pub port: u16,
    /// Pool names.
    pub pools: Vec<String>,
    /// Backends after flattening.
    pub backends: usize,
    /// Sum of their weights.
    pub total_weight: u64,
    /// Maglev table size.
    pub table_size: u32,
    /// `gre`, `ipip` or `gue`.
    pub encap: &'static str,
    /// Whether the connection table is bypassed.
    pub no_conntrack: bool,
}

impl Summary {
    /// Summarises a valid configuration.
    pub fn of(config: &Config) -> Self {
        let vips = config
            .vips
            .iter()
            .map(|v| VipSummary {
                name: v.name.clone(),
                protocol: v.key.proto.as_str(),
                address: v.key.addr,
                port: v.key.port,
                pools: v
                    .pools
                    .iter()
                    .map(|&p| config.pool(p).name.clone())
                    .collect(),
                backends: v.backends.len(),
                total_weight: v.total_weight(),
                table_size: v.table_size,
                encap: match v.encap {
                    Encap::Gre => "gre",
                    Encap::Ipip => "ipip",
                    Encap::Gue => "gue",
                },
                no_conntrack: v.flags.no_conntrack,
            })
            .collect();
        Self {
            node: config.node.name.clone(),
            interfaces: config.dataplane.interfaces.clone(),
            vips,
            pools: config.pools.len(),
            backends: config.backends.len(),
            health_checks: config.health_plan().checks.len(),
            reals: config.reals(),
            slots: config.slots(),
            slots_per_generation: config.dataplane.slots_per_generation,
            bgp_neighbors: config.bgp.as_ref().map_or(0, |b| b.neighbors.len()),
            dataplane: match config.dataplane.mode {
                crate::types::DataplaneMode::Xdp => "xdp",
                crate::types::DataplaneMode::None => "none",
                crate::types::DataplaneMode::Afxdp => "afxdp",
            },
            listeners: config
                .listeners
                .iter()
                .map(|l| ListenerSummary {
                    name: l.name.clone(),
                    protocol: l.protocol.as_str(),
                    address: l.address,
                    pool: config.pool(l.pool).name.clone(),
                    upstreams: l.upstreams.len(),
                    scheduler: l.scheduler.name(),
                    steering: l.steering.as_str(),
                })
                .collect(),
            tracer: match &config.tracer.key_file {
                Some(key) => format!(
                    "on: marks sealed with the key in {}, reports to {} at most {} a second",
                    key.display(),
                    config
                        .tracer
                        .receivers
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    config.tracer.reports_per_sec
                ),
                None => "off (to trace packets: [tracer] key_file = the cluster's key file, \
                         receivers = [the prefixes reports may go to])"
                    .into(),
            },
            receive_steering: config.receive_steering.as_ref().map(|r| {
                let cpus = r.cpus.as_ref().map_or_else(
                    || "every CPU the node may run on".to_string(),
                    |c| {
                        let list: Vec<String> = c.iter().map(u32::to_string).collect();
                        format!("CPUs {}", list.join(","))
                    },
                );
                let users: Vec<&str> = config
                    .listeners
                    .iter()
                    .filter(|l| l.steering == crate::types::Steering::Cpu)
                    .map(|l| l.name.as_str())
                    .collect();
                format!(
                    "XDP ({}) on {} sends each client's packets to its worker's CPU; workers of \
                     steering = \"cpu\" listeners ({}) pinned one per CPU on {cpus}; the host \
                     needs: root (CAP_BPF, CAP_NET_ADMIN), the interfaces free of other XDP \
                     programs, nothing else (no RPS mask or sysctl is changed; the programs \
                     are removed when the node exits)",
                    r.xdp_mode.as_str(),
                    r.interfaces.join(", "),
                    if users.is_empty() {
                        "none yet".to_string()
                    } else {
                        users.join(", ")
                    },
                )
            }),
        }
    }
}

impl CheckReport {
    /// Whether the configuration is valid.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }

    /// The process exit status for `stator check`: 0 when valid, 1 on any error.
    pub fn exit_code(&self) -> i32 {
        if self.is_ok() { 0 } else { 1 }
    }
}

/// What `stator check` knows of the host it runs on, for the warnings that depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    /// The descriptor limit `stator run` would have here: the hard `RLIMIT_NOFILE`, which it
    /// raises the soft one to (`None`: unlimited).
    pub nofile: Option<u64>,
    /// Cores: the worker count of a listener that sets none.
    pub cores: usize,
}

/// Checks configuration text; `file` is only used in messages.
pub fn check_str(file: &str, text: &str) -> CheckReport {
    check_str_on(file, text, None)
}

/// Checks configuration text, with the warnings that depend on `host` when it is given.
pub fn check_str_on(file: &str, text: &str, host: Option<&Host>) -> CheckReport {
    let mut report = CheckReport {
        file: file.to_owned(),
        ok: false,
        errors: Vec::new(),
        warnings: Vec::new(),
        summary: None,
    };
    let parsed = match parse(text) {
        Ok(parsed) => parsed,
        Err(errors) => {
            report.errors = errors.iter().map(Diagnostic::from).collect();
            return report;
        }
    };
    match validate(&parsed.raw) {
        Ok(config) => {
            let mut warnings = config.warnings();
            if let Some(host) = host {
                warnings.extend(config.host_warnings(host));
            }
            for w in &mut warnings {
                w.location = parsed.doc.locate(&w.path);
            }
            sort_by_location(&mut warnings, |w| w.location);
            report.warnings = warnings.iter().map(Diagnostic::from).collect();
            report.summary = Some(Summary::of(&config));
            report.ok = true;
        }
        Err(mut errors) => {
            parsed.doc.locate_all(&mut errors);
            sort_by_location(&mut errors, |e| e.location);
            crate::error::bound_errors(&mut errors);
            report.errors = errors.iter().map(Diagnostic::from).collect();
        }
    }
    report
}

/// Checks a configuration file. A file that cannot be read is an error like any other.
pub fn check_file(path: &Path) -> CheckReport {
    check_file_on(path, None)
}

/// Checks a configuration file, with the warnings that depend on `host` when it is given
/// (`stator check`: the descriptor limit and cores of the host it runs on).
pub fn check_file_on(path: &Path, host: Option<&Host>) -> CheckReport {
    let file = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => check_str_on(&file, &text, host),
        Err(e) => CheckReport {
            ok: false,
            errors: vec![Diagnostic::from(&crate::read_error(&file, &e))],
            warnings: Vec::new(),
            summary: None,
            file,
        },
    }
}

/// Stable sort in document order; items without a location keep their order, last.
pub(crate) fn sort_by_location<T>(items: &mut [T], key: impl Fn(&T) -> Option<Location>) {
    items.sort_by_key(|item| key(item).map_or((usize::MAX, usize::MAX), |l| (l.line, l.column)));
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.errors {
            write_line(f, &self.file, e.location, "error", e)?;
            f.write_str("\n")?;
        }
        for w in &self.warnings {
            write_line(f, &self.file, w.location, "warning", w)?;
            f.write_str("\n")?;
        }
        let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        let Some(s) = &self.summary else {
            return writeln!(f, "{}: {}", self.file, plural(self.errors.len(), "error"));
        };
        let plane = if s.interfaces.is_empty() {
            format!("data plane {}", s.dataplane)
        } else {
            format!("{} on {}", s.dataplane, s.interfaces.join(", "))
        };
        writeln!(
            f,
            "{}: ok ({}): node {}, {plane}",
            self.file,
            plural(self.warnings.len(), "warning"),
            s.node,
        )?;
        writeln!(
            f,
            "  {}, {}, {}, {} after deduplication, {}, {} of {} Maglev slots, {}",
            plural(s.vips.len(), "VIP"),
            plural(s.pools, "pool"),
            plural(s.backends, "backend"),
            plural(s.health_checks, "health check"),
            plural(s.reals, "real"),
            s.slots,
            s.slots_per_generation,
            plural(s.bgp_neighbors, "BGP neighbor"),
        )?;
        if s.dataplane != "none" {
            writeln!(f, "  tracer {}", s.tracer)?;
        }
        if let Some(r) = &s.receive_steering {
            writeln!(f, "  receive steering: {r}")?;
        }
        for v in &s.vips {
            let endpoint = match (v.address, v.port) {
                (IpAddr::V4(a), 0) => format!("{a}:any"),
                (IpAddr::V4(a), p) => format!("{a}:{p}"),
                (IpAddr::V6(a), 0) => format!("[{a}]:any"),
                (IpAddr::V6(a), p) => format!("[{a}]:{p}"),
            };
            writeln!(
                f,
                "  vip {}: {} {} -> pools {}: {}, total weight {}, table {}, {}{}",
                v.name,
                v.protocol,
                endpoint,
                v.pools.join(", "),
                plural(v.backends, "backend"),
                v.total_weight,
                v.table_size,
                v.encap,
                if v.no_conntrack { ", no_conntrack" } else { "" },
            )?;
        }
        for l in &s.listeners {
            writeln!(
                f,
                "  listener {}: {} {} -> pool {}: {}, {}, steering {}",
                l.name,
                l.protocol,
                l.address,
                l.pool,
                plural(l.upstreams, "upstream"),
                l.scheduler,
                l.steering,
            )?;
        }
        Ok(())
    }
}
