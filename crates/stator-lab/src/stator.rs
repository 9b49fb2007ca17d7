//! `stator run` processes inside lab namespaces, and the bpffs they pin into.
//!
//! A node's `stator run` is started with `nsenter --net=/run/netns/NAME` — network namespace
//! only — rather than `ip netns exec`, which remounts `/sys` and hides bpffs. Its pins go to a
//! bpffs the lab mounts under a temporary directory ([`BpfFs`]), so nothing lands in the
//! host's `/sys/fs/bpf`. [`StatorRun::wait_ready`] waits until its admin API says `running`;
//! [`StatorRun::api`] talks to that API on its Unix socket (`api.socket`, a file of the lab's:
//! sockets are not in network namespaces), as root — the level of an operator on the node.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::netns::{ChildGuard, Netns, NetnsError, Result, run};
use crate::supervise::{Service, Supervisor, UnitTiming};
use crate::wait::wait_until;

/// A bpffs mounted for the lab; unmounted (and its directory removed) when dropped.
#[derive(Debug)]
pub struct BpfFs {
    path: PathBuf,
}

impl BpfFs {
    /// Mounts a bpffs at `path` (created if needed).
    pub fn mount(path: &Path) -> Result<Self> {
        std::fs::create_dir_all(path).map_err(|source| NetnsError::File {
            path: path.to_owned(),
            source,
        })?;
        run(Command::new("mount").args(["-t", "bpf", "bpf"]).arg(path))?;
        Ok(Self {
            path: path.to_owned(),
        })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for StatorRun {
    fn drop(&mut self) {
        // the child (ChildGuard) is killed by its own drop; a successor is not our child
        if self.signal_successor(libc::SIGKILL) {
            self.successor_gone(Duration::from_secs(5));
        }
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = run(Command::new("umount").arg("-l").arg(&self.path));
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// One HTTP answer of a node's admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiAnswer {
    /// Status code.
    pub status: u16,
    /// Body.
    pub body: String,
}

/// A `stator run` process in a namespace; killed when dropped.
#[derive(Debug)]
pub struct StatorRun {
    ns: Netns,
    name: String,
    config: PathBuf,
    log: PathBuf,
    socket: PathBuf,
    binary: PathBuf,
    child: Option<ChildGuard>,
    /// Set for a node supervised as the systemd unit does (then `child` is `None`).
    supervisor: Option<Supervisor>,
    /// The process serving now after [`StatorRun::upgrade`]: started by the one it replaced,
    /// so not our child (signalled by pid, gone when `/proc` says so).
    successor: Option<u32>,
}

impl StatorRun {
    /// Writes `config` to `<dir>/<name>.toml` (mode 0600: it may hold a token) and starts
    /// `<binary> run -c` with it in `ns` (stdout and stderr to `<dir>/<name>.log`). `socket`
    /// is the config's `api.socket`.
    pub fn start(
        ns: &Netns,
        binary: &Path,
        dir: &Path,
        name: &str,
        config: &str,
        socket: &Path,
    ) -> Result<Self> {
        let mut s = Self::written(ns, binary, dir, name, config, socket)?;
        s.restart()?;
        Ok(s)
    }

    /// The node's files written (`<dir>/<name>.toml`, private), nothing started yet.
    fn written(
        ns: &Netns,
        binary: &Path,
        dir: &Path,
        name: &str,
        config: &str,
        socket: &Path,
    ) -> Result<Self> {
        let path = dir.join(format!("{name}.toml"));
        write_private(&path, config)?;
        Ok(Self {
            ns: ns.clone(),
            name: name.to_owned(),
            config: path,
            log: dir.join(format!("{name}.log")),
            socket: socket.to_owned(),
            binary: binary.to_owned(),
            child: None,
            supervisor: None,
            successor: None,
        })
    }

    /// Like [`StatorRun::start`], but supervised as the packaged systemd unit does
    /// ([`crate::supervise`]), with `timing`; `bird_socket` is the node's BIRD (for
    /// `stator withdraw` when the configuration cannot be read). Its `NOTIFY_SOCKET` is
    /// `<dir>/<name>.notify`.
    #[allow(clippy::too_many_arguments)]
    pub fn start_supervised(
        ns: &Netns,
        binary: &Path,
        dir: &Path,
        name: &str,
        config: &str,
        socket: &Path,
        bird_socket: &Path,
        timing: UnitTiming,
    ) -> Result<Self> {
        let mut s = Self::written(ns, binary, dir, name, config, socket)?;
        s.supervisor = Some(Supervisor::start(Service {
            ns: ns.clone(),
            binary: binary.to_owned(),
            config: s.config.clone(),
            log: s.log.clone(),
            notify: dir.join(format!("{name}.notify")),
            pid_file: dir.join(format!("{name}.pid")),
            bird_socket: bird_socket.to_owned(),
            timing,
        })?);
        Ok(s)
    }

    /// The supervisor, for a supervised node.
    /// `stator upgrade` in the namespace: the node starts its successor, which takes its
    /// sockets and serves; the replaced process drains and exits by itself. Returns the
    /// successor's pid once `stator upgrade` reports it serves (an error, with the command's
    /// output and the log's tail, when it did not: the node then runs on).
    pub fn upgrade(&mut self) -> Result<u32> {
        let cmd = format!(
            "stator upgrade -c {} in {}",
            self.config.display(),
            self.ns.name()
        );
        let out = Command::new("nsenter")
            .arg(format!("--net={}", self.ns.path().display()))
            .arg(&self.binary)
            .args(["upgrade", "-c"])
            .arg(&self.config)
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null())
            .output()
            .map_err(|source| NetnsError::Spawn {
                cmd: cmd.clone(),
                source,
            })?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let pid = said
            .split("(pid ")
            .nth(1)
            .and_then(|r| r.split(')').next())
            .and_then(|p| p.parse::<u32>().ok());
        match pid {
            Some(pid) if out.status.success() => {
                self.successor = Some(pid);
                Ok(pid)
            }
            _ => Err(NetnsError::Failed {
                cmd,
                status: out.status.to_string(),
                stderr: said + "\n--- log ---\n" + &self.log_tail(30),
            }),
        }
    }

    /// Signals the successor, if an upgrade started one.
    fn signal_successor(&self, sig: i32) -> bool {
        match self.successor {
            Some(pid) => {
                let _ = stator_sys::process::send_signal(pid, sig);
                true
            }
            None => false,
        }
    }

    /// Waits up to `timeout` for the successor to be gone.
    fn successor_gone(&self, timeout: Duration) -> bool {
        let Some(pid) = self.successor else {
            return true;
        };
        let proc = PathBuf::from(format!("/proc/{pid}"));
        wait_until(
            "the successor to exit",
            timeout,
            Duration::from_millis(20),
            || {
                // a zombie (not yet reaped by the process that started it) has exited
                std::fs::read_to_string(proc.join("stat")).map_or(true, |s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z'))
                })
            },
        )
        .is_ok()
    }

    pub fn supervisor(&self) -> Option<&Supervisor> {
        self.supervisor.as_ref()
    }

    /// Starts the process again with the same files (after [`StatorRun::terminate`]).
    ///
    /// A supervised node is restarted cleanly by its supervisor (`systemctl restart`).
    pub fn restart(&mut self) -> Result<()> {
        if let Some(s) = &self.supervisor {
            s.restart();
            return Ok(());
        }
        self.kill();
        self.successor = None;
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|source| NetnsError::File {
                path: self.log.clone(),
                source,
            })?;
        let err = log.try_clone().map_err(|source| NetnsError::File {
            path: self.log.clone(),
            source,
        })?;
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.ns.path().display()))
            .arg(&self.binary)
            .args(["run", "-c"])
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        let what = format!(
            "stator run -c {} in {}",
            self.config.display(),
            self.ns.name()
        );
        let child = cmd.spawn().map_err(|source| NetnsError::Spawn {
            cmd: what.clone(),
            source,
        })?;
        self.child = Some(ChildGuard::from_child(child, what));
        Ok(())
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        if self.successor.is_some() {
            return self.successor;
        }
        match &self.supervisor {
            Some(s) => s.pid(),
            None => self.child.as_ref().and_then(ChildGuard::id),
        }
    }

    /// True while the process runs (supervised: while it is supervised, restarts included).
    pub fn is_running(&mut self) -> bool {
        if self.successor.is_some() {
            return !self.successor_gone(Duration::ZERO);
        }
        match &self.supervisor {
            Some(s) => s.is_active(),
            None => self.child.as_mut().is_some_and(ChildGuard::is_running),
        }
    }

    /// Sends `method path` (no body) to the node's admin API on its socket.
    pub fn api(&self, method: &str, path: &str) -> Result<ApiAnswer> {
        api_request(&self.socket, method, path)
    }

    /// The node's API socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Sends `method path` with extra `headers` (e.g. `("If-Match", "\"7\"")`,
    /// `("Content-Type", "application/toml")`) and `body` to the node's admin API on its
    /// socket.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<ApiAnswer> {
        let headers: String = headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\r\n"))
            .collect();
        http(&self.socket, method, path, &headers, body).map_err(|e| NetnsError::Failed {
            cmd: format!("HTTP request to {}", self.socket.display()),
            status: "no answer".into(),
            stderr: e.to_string(),
        })
    }

    /// The configuration file it runs with (rewrite it, then [`StatorRun::reload`]).
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// Sends SIGHUP: `stator run` applies its configuration file again.
    pub fn reload(&self) -> Result<()> {
        if self.signal_successor(libc::SIGHUP) {
            return Ok(());
        }
        if let Some(s) = &self.supervisor {
            s.signal(libc::SIGHUP);
            return Ok(());
        }
        match &self.child {
            Some(child) => {
                child.signal(libc::SIGHUP);
                Ok(())
            }
            None => Err(NetnsError::Failed {
                cmd: format!("reload stator run {}", self.name),
                status: "not running".into(),
                stderr: String::new(),
            }),
        }
    }

    /// Waits until the admin API answers `GET /v1/status` with phase `running`; returns how
    /// long it took. Fails early (with the log) if the process exits.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<Duration> {
        let what = format!("stator run {} to be running", self.name);
        let mut exited = false;
        let result = wait_until(&what, timeout, Duration::from_millis(50), || {
            if !self.is_running() {
                exited = true;
                return true;
            }
            self.api("GET", "/v1/status")
                .is_ok_and(|a| a.status == 200 && a.body.contains("\"phase\":\"running\""))
        });
        if exited {
            return Err(NetnsError::Failed {
                cmd: format!("stator run -c {}", self.config.display()),
                status: "exited".into(),
                stderr: self.log_tail(30) + "\n--- head ---\n" + &self.log_head(20),
            });
        }
        result.map_err(|e| match e {
            NetnsError::Timeout { what, waited } => NetnsError::Timeout {
                what: format!("{what}; log:\n{}", self.log_tail(30)),
                waited,
            },
            other => other,
        })
    }

    /// Sends SIGTERM and waits up to `timeout` for the exit; returns the exit status.
    ///
    /// A supervised node is stopped by its supervisor (`systemctl stop`: SIGTERM, then
    /// `stator withdraw --unless-clean`); its status is success unless the stop was not clean.
    pub fn terminate(&mut self, timeout: Duration) -> Result<std::process::ExitStatus> {
        if self.signal_successor(libc::SIGTERM) {
            use std::os::unix::process::ExitStatusExt as _;
            // not our child: its exit status is its parent's (or init's) to read
            return if self.successor_gone(timeout) {
                self.successor = None;
                Ok(std::process::ExitStatus::from_raw(0))
            } else {
                Err(NetnsError::Timeout {
                    what: format!(
                        "stator run {} (the successor) to exit after SIGTERM",
                        self.name
                    ),
                    waited: timeout,
                })
            };
        }
        if let Some(mut s) = self.supervisor.take() {
            use std::os::unix::process::ExitStatusExt as _;
            let result = s.stop(timeout)?;
            return Ok(std::process::ExitStatus::from_raw(
                if result.as_deref() == Some("success") {
                    0
                } else {
                    1 << 8
                },
            ));
        }
        let Some(mut child) = self.child.take() else {
            return Err(NetnsError::Failed {
                cmd: "terminate".into(),
                status: "not running".into(),
                stderr: String::new(),
            });
        };
        child.signal(libc::SIGTERM);
        child
            .wait_timeout(timeout)
            .ok_or_else(|| NetnsError::Timeout {
                what: format!(
                    "stator run {} to exit after SIGTERM; log:\n{}",
                    self.name,
                    self.log_tail(20)
                ),
                waited: timeout,
            })
    }

    /// Kills the process (SIGKILL), as a crash would.
    ///
    /// A supervised node's supervisor sees the crash: it withdraws the node and restarts it.
    pub fn kill(&mut self) {
        if self.signal_successor(libc::SIGKILL) {
            self.successor_gone(Duration::from_secs(5));
        }
        if let Some(s) = &self.supervisor {
            s.signal(libc::SIGKILL);
            return;
        }
        if let Some(mut child) = self.child.take() {
            child.signal(libc::SIGKILL);
            let _ = child.wait_timeout(Duration::from_secs(5));
        }
    }

    /// The first `n` lines of its log (where a panic message is).
    pub fn log_head(&self, n: usize) -> String {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .take(n)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// Sends `method path` (no body) to the admin API on `socket` — also for a node whose
/// `stator run` another process started (`stator lab status`).
pub fn api_request(socket: &Path, method: &str, path: &str) -> Result<ApiAnswer> {
    http(socket, method, path, "", "").map_err(|e| NetnsError::Failed {
        cmd: format!("HTTP request to {}", socket.display()),
        status: "no answer".into(),
        stderr: e.to_string(),
    })
}

/// Writes `text` to `path`, readable by its owner only (a configuration or token).
pub fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|source| NetnsError::File {
            path: path.to_owned(),
            source,
        })
}

/// One HTTP/1.1 request with `Connection: close`; the status and the body after the headers.
/// `headers` are complete header lines (`"Name: value\r\n"` each).
fn http(
    socket: &Path,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> std::io::Result<ApiAnswer> {
    let mut s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{headers}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line in {head:?}")))?;
    Ok(ApiAnswer {
        status,
        body: body.to_owned(),
    })
}
