//! The lab's state directory: what `stator lab status` and `down` read from it without the
//! process that built the lab — its shape, the backends' counters, every process's pid — and
//! [`down`], which removes a lab from its prefix and directory alone.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{DeploySpec, Served, file_err, vip_prefix};
use crate::bird::kernel_next_hops;
use crate::netns::{Netns, Result, cleanup, run};

/// Reads a counters file written by `stator lab serve` (`http=N echo=N udp=N`).
pub fn read_served(path: &Path) -> Served {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut s = Served::default();
    for word in text.split_whitespace() {
        if let Some((k, v)) = word.split_once('=') {
            let v = v.parse().unwrap_or(0);
            match k {
                "http" => s.http = v,
                "echo" => s.echo = v,
                "udp" => s.udp = v,
                _ => {}
            }
        }
    }
    s
}

/// The spec's shape, for `status` and `down` of another process: `key=value` lines.
pub(super) fn write_state(spec: &DeploySpec) -> Result<()> {
    let path = spec.dir.join("lab.state");
    let text = format!(
        "prefix={}\nsubnet={}\nnodes={}\nbackends={}\n",
        spec.prefix, spec.subnet, spec.nodes, spec.backends
    );
    std::fs::write(&path, text).map_err(file_err(&path))
}

/// What a state directory says about the lab in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabState {
    /// The namespace prefix.
    pub prefix: String,
    /// `S` of the addresses.
    pub subnet: u8,
    /// Stator nodes.
    pub nodes: usize,
    /// Backends.
    pub backends: usize,
}

impl LabState {
    /// Node `j`'s namespace.
    pub fn node_ns(&self, j: usize) -> Netns {
        Netns::existing(&format!("{}l{j}", self.prefix))
    }

    /// The router's namespace.
    pub fn router_ns(&self) -> Netns {
        Netns::existing(&format!("{}r", self.prefix))
    }

    /// Node `j`'s address of a family (as [`crate::topo`] assigns it).
    pub fn node_addr(&self, j: usize, v6: bool) -> IpAddr {
        let h = u8::try_from(11 + j).unwrap_or(u8::MAX);
        if v6 {
            IpAddr::V6(Ipv6Addr::new(
                0xfd00,
                u16::from(self.subnet),
                1,
                0,
                0,
                0,
                0,
                u16::from(h),
            ))
        } else {
            IpAddr::V4(Ipv4Addr::new(10, self.subnet, 1, h))
        }
    }

    /// The router's next hops for the VIP of a family, as node indices.
    pub fn routed_nodes(&self, v6: bool) -> Vec<usize> {
        let hops = kernel_next_hops(&self.router_ns(), &vip_prefix(v6)).unwrap_or_default();
        (0..self.nodes)
            .filter(|&j| hops.contains(&self.node_addr(j, v6)))
            .collect()
    }
}

/// Reads the state a lab wrote into its directory (`None` when there is no lab there).
pub fn read_state(dir: &Path) -> Option<LabState> {
    let text = std::fs::read_to_string(dir.join("lab.state")).ok()?;
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(|v| v.trim().to_owned())
    };
    Some(LabState {
        prefix: field("prefix")?,
        subnet: field("subnet")?.parse().ok()?,
        nodes: field("nodes")?.parse().ok()?,
        backends: field("backends")?.parse().ok()?,
    })
}

/// Backend `k`'s counters file in a lab's state directory.
pub fn served_path(dir: &Path, k: usize) -> PathBuf {
    dir.join(format!("b{k}.served"))
}

pub(super) fn write_pid(dir: &Path, name: &str, pid: Option<u32>) -> Result<()> {
    let path = dir.join(format!("{name}.pid"));
    match pid {
        Some(pid) => std::fs::write(&path, format!("{pid}\n")).map_err(file_err(&path)),
        None => Ok(()),
    }
}

/// What [`down`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DownReport {
    /// Processes killed by their pid file.
    pub processes: usize,
    /// Namespaces removed.
    pub namespaces: usize,
    /// Whether the lab's bpffs was unmounted.
    pub unmounted: bool,
    /// Whether the state directory existed.
    pub dir: bool,
}

impl DownReport {
    /// True when there was nothing to remove.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Removes a lab, running or left behind by a crash: kills the processes of its pid files
/// (only those whose command line names the state directory, so a reused pid is left alone),
/// every process in and every namespace with the prefix, unmounts its bpffs (dropping every
/// pin) and removes the directory. Idempotent: nothing there is success.
pub fn down(prefix: &str, dir: &Path) -> Result<DownReport> {
    let mut report = DownReport::default();
    let needle = dir.display().to_string();
    if let Ok(entries) = std::fs::read_dir(dir) {
        report.dir = true;
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "pid") {
                continue;
            }
            let Some(pid) = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
            else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&needle) {
                // a process whose command line names this lab; gone meanwhile is no error
                let _ = stator_sys::process::send_signal(pid, libc::SIGKILL);
                report.processes += 1;
            }
        }
    }
    report.namespaces = cleanup(prefix)?;
    let bpffs = dir.join("bpffs");
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mounted = bpffs.display().to_string();
    if mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(mounted.as_str()))
    {
        run(Command::new("umount").arg("-l").arg(&bpffs))?;
        report.unmounted = true;
    }
    if report.dir {
        std::fs::remove_dir_all(dir).map_err(file_err(dir))?;
    }
    Ok(report)
}
