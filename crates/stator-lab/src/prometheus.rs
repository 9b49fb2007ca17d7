//! Debian's `prometheus` in a lab namespace, scraping Stator nodes' `/metrics`.
//!
//! The lab runs it in the router's namespace, which reaches every node's address (the nodes'
//! admin APIs listen there too, not only on their loopback). Its configuration is written to
//! the lab's state directory — one `stator` job, a target per node labelled `node="n<j>"`,
//! scraped every second, and Stator's alerting rules (`examples/stator-alerts.yml`, compiled
//! in) evaluated every second — as is its TSDB. It listens on the namespace's loopback; the
//! lab's tests and `stator lab status` ask its HTTP API from a thread inside the namespace.
//!
//! A query answer is returned as the raw JSON text of Prometheus's API (this crate parses
//! nothing); HTTP/1.0 is used so that Go's server answers without chunked encoding.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::netns::{ChildGuard, Netns, NetnsError, Result};
use crate::wait::wait_until;

/// Stator's alerting rules, as shipped in `examples/`.
pub const ALERT_RULES: &str = include_str!("../../../examples/stator-alerts.yml");

/// Where Prometheus listens, inside its namespace.
pub const LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9090);

/// A running Prometheus; killed when dropped.
#[derive(Debug)]
pub struct Prometheus {
    ns: Netns,
    child: ChildGuard,
    log: PathBuf,
}

/// The scrape configuration for `targets` (node name, `/metrics` address), each scraped with
/// the bearer token in `token_file` (the nodes' `read` token).
pub fn config(targets: &[(String, SocketAddr)], rules: &Path, token_file: &Path) -> String {
    let mut c = format!(
        "# stator lab (generated)\nglobal:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {rules}\nscrape_configs:\n  - job_name: stator\n    \
         scrape_interval: 1s\n    scrape_timeout: 900ms\n    authorization:\n      \
         type: Bearer\n      credentials_file: {token}\n    static_configs:\n",
        rules = rules.display(),
        token = token_file.display()
    );
    for (node, addr) in targets {
        c.push_str(&format!(
            "      - targets: [\"{addr}\"]\n        labels:\n          node: {node}\n"
        ));
    }
    c
}

impl Prometheus {
    /// Writes the configuration and the rules into `dir` and starts `prometheus` in `ns`,
    /// storing its data under `dir/prometheus-data`; returns once it is ready.
    pub fn start(
        ns: &Netns,
        dir: &Path,
        targets: &[(String, SocketAddr)],
        token_file: &Path,
    ) -> Result<Self> {
        let file = |name: &str, text: &str| -> Result<PathBuf> {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|source| NetnsError::File {
                path: path.clone(),
                source,
            })?;
            Ok(path)
        };
        let rules = file("stator-alerts.yml", ALERT_RULES)?;
        let conf = file("prometheus.yml", &config(targets, &rules, token_file))?;
        let log = dir.join("prometheus.log");
        let data = dir.join("prometheus-data");
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", ns.path().display()))
            .arg("prometheus")
            .arg(format!("--config.file={}", conf.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={LISTEN}"))
            .arg("--storage.tsdb.retention.time=1d")
            .arg("--log.level=warn")
            .stdin(Stdio::null());
        let out = std::fs::File::create(&log).map_err(|source| NetnsError::File {
            path: log.clone(),
            source,
        })?;
        let err = out.try_clone().map_err(|source| NetnsError::File {
            path: log.clone(),
            source,
        })?;
        cmd.stdout(out).stderr(err);
        let what = format!("prometheus in {}", ns.name());
        let child = cmd.spawn().map_err(|source| NetnsError::Spawn {
            cmd: format!("{what} (Debian's prometheus package; `make test-deps` installs it)"),
            source,
        })?;
        let mut p = Self {
            ns: ns.clone(),
            child: ChildGuard::from_child(child, what.clone()),
            log,
        };
        let mut exited = false;
        wait_until(
            &format!("{what} to be ready"),
            Duration::from_secs(30),
            Duration::from_millis(100),
            || {
                exited = !p.child.is_running();
                exited || p.get("/-/ready").is_ok_and(|(s, _)| s == 200)
            },
        )?;
        if exited {
            return Err(NetnsError::Failed {
                cmd: what,
                status: "exited".into(),
                stderr: p.log_tail(20),
            });
        }
        Ok(p)
    }

    /// Its pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// `GET path` on its HTTP API: status and body.
    pub fn get(&self, path: &str) -> Result<(u16, String)> {
        get(&self.ns, path)
    }

    /// `GET /api/v1/query?query=…`: the JSON answer, whatever its status.
    pub fn query(&self, promql: &str) -> Result<String> {
        self.get(&format!("/api/v1/query?query={}", encode(promql)))
            .map(|(_, body)| body)
    }
}

/// `GET path` on the Prometheus API of the lab whose router namespace is `ns` (also from
/// another process, e.g. `stator lab status`).
pub fn get(ns: &Netns, path: &str) -> Result<(u16, String)> {
    let path = path.to_owned();
    let answer = ns.run_in(move || -> std::io::Result<(u16, String)> {
        let mut s = TcpStream::connect_timeout(&LISTEN, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: {LISTEN}\r\n\r\n")?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("no status line in {head:?}")))?;
        Ok((status, body.to_owned()))
    })?;
    answer.map_err(|e| NetnsError::Failed {
        cmd: format!("HTTP request to Prometheus in {}", ns.name()),
        status: "no answer".into(),
        stderr: e.to_string(),
    })
}

/// Percent-encodes a query parameter's value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_and_configures() {
        assert_eq!(
            encode("rate(x{a=\"b c\"}[5s])"),
            "rate%28x%7Ba%3D%22b%20c%22%7D%5B5s%5D%29"
        );
        let c = config(
            &[("n0".into(), "10.1.1.11:9180".parse().unwrap())],
            Path::new("/run/x/stator-alerts.yml"),
            Path::new("/run/x/read-token"),
        );
        assert!(
            c.contains(
                "authorization:\n      type: Bearer\n      credentials_file: /run/x/read-token\n"
            ),
            "{c}"
        );
        assert!(
            c.contains("- targets: [\"10.1.1.11:9180\"]\n        labels:\n          node: n0\n")
        );
        assert!(c.contains("rule_files:\n  - /run/x/stator-alerts.yml\n"));
        assert!(ALERT_RULES.contains("StatorForwarderUnhealthy"));
    }
}
