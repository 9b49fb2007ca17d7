//! BIRD processes inside namespaces, and what tests read back from them.
//!
//! Each [`Bird`] has its own configuration file, control socket (`-s`), pid file (`-P`) and
//! log under a directory of the caller's, so several run side by side; it runs in the
//! foreground (`-f`) as a child of the test, killed when dropped. Queries go through `birdc`
//! (this is test infrastructure: Stator itself speaks the socket protocol directly).

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::netns::{ChildGuard, Netns, NetnsError, Result, run};
use crate::wait::{wait_for, wait_until};

/// How long BIRD may take to open its control socket.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A BIRD daemon running in a namespace.
#[derive(Debug)]
pub struct Bird {
    ns: Netns,
    name: String,
    config: PathBuf,
    socket: PathBuf,
    pid_file: PathBuf,
    log: PathBuf,
    child: Option<ChildGuard>,
}

impl Bird {
    /// Writes `config` to `<dir>/<name>.conf` and starts BIRD with it in `ns`, with socket
    /// `<dir>/<name>.ctl`, pid file `<dir>/<name>.pid`; returns once BIRD greets on its
    /// socket. The configuration should log to [`Bird::log_path`] (`log "…" all;`) for
    /// [`Bird::log_tail`] to show anything.
    pub fn start(ns: &Netns, dir: &Path, name: &str, config: &str) -> Result<Self> {
        let path = |ext: &str| dir.join(format!("{name}.{ext}"));
        let bird = Self {
            ns: ns.clone(),
            name: name.to_owned(),
            config: path("conf"),
            socket: path("ctl"),
            pid_file: path("pid"),
            log: path("log"),
            child: None,
        };
        std::fs::write(&bird.config, config).map_err(|source| NetnsError::File {
            path: bird.config.clone(),
            source,
        })?;
        let mut bird = bird;
        bird.restart()?;
        Ok(bird)
    }

    /// Starts BIRD again with the same files (after [`Bird::kill`] or [`Bird::stop`]).
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        let (config, socket, pid) = (
            self.config.display().to_string(),
            self.socket.display().to_string(),
            self.pid_file.display().to_string(),
        );
        // BIRD's own output (before its log is configured) goes next to its log
        let out = self.log.with_extension("out");
        let child = self.ns.spawn_logged(
            "bird",
            &["-f", "-c", &config, "-s", &socket, "-P", &pid],
            &out,
        )?;
        self.child = Some(child);
        let what = format!("BIRD {} to greet on {}", self.name, self.socket.display());
        let socket = self.socket.clone();
        let child = &mut self.child;
        // An exited BIRD ends the wait too; it is reported below with its log.
        wait_until(&what, START_TIMEOUT, Duration::from_millis(20), || {
            !child.as_mut().is_some_and(ChildGuard::is_running) || greets(&socket)
        })?;
        if !self.child.as_mut().is_some_and(ChildGuard::is_running) {
            return Err(NetnsError::Failed {
                cmd: format!("bird -c {}", self.config.display()),
                status: "exited".into(),
                stderr: self.log_tail(20),
            });
        }
        Ok(())
    }

    /// The name given at start.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The control socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The configuration file.
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// Where the configuration should log.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The namespace it runs in.
    pub fn netns(&self) -> &Netns {
        &self.ns
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(ChildGuard::id)
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(ChildGuard::is_running)
    }

    /// Kills BIRD with SIGKILL, as a crash would: no BGP notification is sent (the kernel
    /// still closes its TCP connections).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.signal(libc::SIGKILL);
            let _ = child.wait_timeout(Duration::from_secs(5));
        }
    }

    /// Stops BIRD with SIGTERM (it shuts its sessions down cleanly) and waits for it.
    pub fn stop(&mut self, timeout: Duration) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.signal(libc::SIGTERM);
            if child.wait_timeout(timeout).is_none() {
                return Err(NetnsError::Timeout {
                    what: format!("BIRD {} to exit after SIGTERM", self.name),
                    waited: timeout,
                });
            }
        }
        Ok(())
    }

    /// Runs `birdc -s SOCKET <command>` and returns its output.
    pub fn birdc(&self, command: &str) -> Result<String> {
        let mut cmd = Command::new("birdc");
        cmd.arg("-s")
            .arg(&self.socket)
            .args(command.split_whitespace());
        let out = run(&mut cmd)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The `show protocols` row of `protocol`, split on whitespace.
    pub fn protocol_row(&self, protocol: &str) -> Result<Option<Vec<String>>> {
        let out = self.birdc(&format!("show protocols {protocol}"))?;
        Ok(out.lines().find_map(|l| {
            let words: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
            (words.first().map(String::as_str) == Some(protocol)).then_some(words)
        }))
    }

    /// True when BGP protocol `protocol` is established.
    pub fn is_established(&self, protocol: &str) -> Result<bool> {
        Ok(self
            .protocol_row(protocol)?
            .is_some_and(|w| w.iter().any(|x| x == "Established")))
    }

    /// The "since" column of `protocol` (both words with an `iso long` time format).
    pub fn since(&self, protocol: &str) -> Result<String> {
        let row = self
            .protocol_row(protocol)?
            .ok_or_else(|| NetnsError::Failed {
                cmd: format!("birdc show protocols {protocol}"),
                status: "no such protocol".into(),
                stderr: String::new(),
            })?;
        let mut since = row.get(4).cloned().unwrap_or_default();
        if since.len() == 10
            && since.as_bytes().get(4) == Some(&b'-')
            && let Some(time) = row.get(5)
        {
            since = format!("{since} {time}");
        }
        Ok(since)
    }

    /// Waits until every protocol in `protocols` is established; returns how long it took.
    pub fn wait_established(&self, protocols: &[&str], timeout: Duration) -> Result<Duration> {
        let what = format!("{} to establish {}", self.name, protocols.join(", "));
        wait_until(&what, timeout, Duration::from_millis(50), || {
            protocols
                .iter()
                .all(|p| self.is_established(p).unwrap_or(false))
        })
        .map_err(|e| self.with_log(e))
    }

    /// The last `n` lines of the log (for failure messages).
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn with_log(&self, e: NetnsError) -> NetnsError {
        match e {
            NetnsError::Timeout { what, waited } => NetnsError::Timeout {
                what: format!("{what}; log of {}:\n{}", self.name, self.log_tail(15)),
                waited,
            },
            other => other,
        }
    }
}

/// True when a BIRD answers on `socket` with its greeting.
pub fn greets(socket: &Path) -> bool {
    let Ok(stream) = UnixStream::connect(socket) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).is_ok() && line.starts_with("0001 ")
}

/// The gateways of the kernel route for `prefix` in `ns` (`ip route show exact`): empty
/// when there is no route, one for a plain route, several for an ECMP route. Sorted.
pub fn kernel_next_hops(ns: &Netns, prefix: &str) -> Result<Vec<IpAddr>> {
    let family = if prefix.contains(':') { "-6" } else { "-4" };
    let out = ns.ip([family, "route", "show", "exact", prefix])?;
    let words: Vec<&str> = out.split_whitespace().collect();
    let mut hops: Vec<IpAddr> = words
        .windows(2)
        .filter(|w| w[0] == "via")
        .filter_map(|w| w[1].parse().ok())
        .collect();
    hops.sort();
    Ok(hops)
}

/// Waits until the kernel route for `prefix` in `ns` has exactly `want` as next hops (in
/// any order; empty = no route); returns how long it took.
pub fn wait_next_hops(
    ns: &Netns,
    prefix: &str,
    want: &[IpAddr],
    timeout: Duration,
) -> Result<Duration> {
    let mut want = want.to_vec();
    want.sort();
    let mut last = Vec::new();
    let what = format!("{prefix} in {} to have next hops {want:?}", ns.name());
    wait_for(&what, timeout, Duration::from_millis(10), || {
        last = kernel_next_hops(ns, prefix).unwrap_or_default();
        (last == want).then_some(())
    })
    .map(|((), took)| took)
    .map_err(|e| match e {
        NetnsError::Timeout { what, waited } => NetnsError::Timeout {
            what: format!("{what} (last seen: {last:?})"),
            waited,
        },
        other => other,
    })
}

/// The established BGP connections in `ns`, as `local peer` address pairs (`ss`): a
/// session that was reset shows up with a new ephemeral port.
pub fn bgp_connections(ns: &Netns) -> Result<Vec<String>> {
    let out = ns.exec(
        "ss",
        [
            "-tnH",
            "state",
            "established",
            "( sport = :179 or dport = :179 )",
        ],
    )?;
    let mut conns: Vec<String> = out
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            // Recv-Q Send-Q Local Peer
            (w.len() >= 4).then(|| format!("{} {}", w[2], w[3]))
        })
        .collect();
    conns.sort();
    Ok(conns)
}
