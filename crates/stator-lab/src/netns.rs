//! Network namespaces, veth pairs and processes inside them.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Errors of namespace operations.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// A command could not be started.
    #[error("cannot run `{cmd}`: {source}")]
    Spawn {
        /// The command line.
        cmd: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A command exited unsuccessfully.
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        cmd: String,
        /// Exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// Entering a namespace failed.
    #[error("cannot enter network namespace {name}: {source}")]
    Enter {
        /// Namespace name.
        name: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not running as root.
    #[error("network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN); run as root")]
    NotRoot,
    /// A condition did not become true in time.
    #[error("timed out after {waited:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        waited: Duration,
    },
    /// A file of the lab could not be written or read.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Result alias.
pub type Result<T> = std::result::Result<T, NetnsError>;

/// True when the process has uid 0.
pub fn is_root() -> bool {
    stator_sys::users::is_root()
}

/// Fails (never skips) a test that needs root when it does not run as root, saying why: the
/// one check every root-tier test file makes first (scripts/test-tier.sh runs them as root).
pub fn require_root() {
    assert!(
        is_root(),
        "this test needs root: it creates network namespaces, loads BPF programs or runs BIRD \
         (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN); run it as root (`make test` does)"
    );
}

fn render(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs a command to completion; fails with its command line and stderr unless it succeeded.
pub fn run(cmd: &mut Command) -> Result<Output> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| NetnsError::Spawn {
            cmd: render(cmd),
            source,
        })?;
    if !out.status.success() {
        return Err(NetnsError::Failed {
            cmd: render(cmd),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// `ip <args>` in the current namespace.
pub fn ip<I, S>(args: I) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = run(Command::new("ip").args(args))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Names of all network namespaces whose name starts with `prefix`.
pub fn list(prefix: &str) -> Result<Vec<String>> {
    let out = ip(["netns", "list"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect())
}

/// Removes every namespace whose name starts with `prefix`, killing the processes inside first.
/// Idempotent: nothing to remove is success.
pub fn cleanup(prefix: &str) -> Result<usize> {
    let names = list(prefix)?;
    for name in &names {
        Netns::existing(name).kill_all();
    }
    for name in &names {
        // A namespace can be busy for a moment while its last process exits.
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            match ip(["netns", "delete", name]) {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    Ok(names.len())
}

/// A named network namespace (`/run/netns/<name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates the namespace (replacing a stale one of the same name) and brings `lo` up.
    pub fn create(name: &str) -> Result<Self> {
        if !is_root() {
            return Err(NetnsError::NotRoot);
        }
        if list(name)?.iter().any(|n| n == name) {
            cleanup_exact(name)?;
        }
        ip(["netns", "add", name])?;
        let ns = Self {
            name: name.to_string(),
        };
        ns.ip(["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A handle on a namespace that already exists (nothing is checked).
    pub fn existing(name: &str) -> Self {
        Self {
            name: name.to_string(),
        }
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Path of the namespace's handle, for `setns(2)`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// A `Command` that runs `program` inside the namespace (`ip netns exec`).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Runs `program args…` inside the namespace to completion and returns its stdout.
    pub fn exec<I, S>(&self, program: &str, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let out = run(self.command(program).args(args))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `ip -n <ns> <args>`.
    pub fn ip<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut c = Command::new("ip");
        c.args(["-n", &self.name]).args(args);
        let out = run(&mut c)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `ip -n <ns> -batch`: `commands`, one `ip` command a line without the leading `ip`
    /// (`addr add 10.0.0.2/16 dev eth0`), run by one process — dozens of addresses cost one
    /// fork, not one each. The batch file lives in the temporary directory for the call only.
    pub fn ip_batch(&self, commands: &str) -> Result<()> {
        // two threads may batch into one namespace at once: the counter keeps their files apart
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "stator-ip-batch-{}-{n}-{}",
            std::process::id(),
            self.name
        ));
        std::fs::write(&path, commands).map_err(|source| NetnsError::File {
            path: path.clone(),
            source,
        })?;
        let r = self.ip([OsStr::new("-batch"), path.as_os_str()]);
        let _ = std::fs::remove_file(&path);
        r.map(|_| ())
    }

    /// Sets a sysctl inside the namespace (e.g. `net.ipv4.ip_forward`, `1`).
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        self.exec("sysctl", ["-q", "-w", &format!("{key}={value}")])
            .map(|_| ())
    }

    /// Adds an address (`10.0.0.1/24`, `fd00::1/64`) to a device and brings it up.
    pub fn addr_add(&self, dev: &str, cidr: &str) -> Result<()> {
        let mut args = vec!["addr", "add", cidr, "dev", dev];
        if cidr.contains(':') {
            args.push("nodad");
        }
        self.ip(args)?;
        self.ip(["link", "set", dev, "up"]).map(|_| ())
    }

    /// Index of a device in this namespace.
    pub fn ifindex(&self, dev: &str) -> Result<u32> {
        let out = self.exec("cat", [format!("/sys/class/net/{dev}/ifindex")])?;
        out.trim().parse().map_err(|_| NetnsError::Failed {
            cmd: format!("read ifindex of {dev} in {}", self.name),
            status: "parse".into(),
            stderr: out,
        })
    }

    /// MAC address of a device in this namespace.
    pub fn mac(&self, dev: &str) -> Result<[u8; 6]> {
        let out = self.exec("cat", [format!("/sys/class/net/{dev}/address")])?;
        let mut mac = [0u8; 6];
        let parts: Vec<_> = out.trim().split(':').collect();
        if parts.len() != 6 {
            return Err(NetnsError::Failed {
                cmd: format!("read MAC of {dev} in {}", self.name),
                status: "parse".into(),
                stderr: out,
            });
        }
        for (m, p) in mac.iter_mut().zip(parts) {
            *m = u8::from_str_radix(p, 16).map_err(|_| NetnsError::Failed {
                cmd: format!("read MAC of {dev} in {}", self.name),
                status: "parse".into(),
                stderr: out.clone(),
            })?;
        }
        Ok(mac)
    }

    /// Starts a long-running process inside the namespace; it is killed when the guard drops.
    pub fn spawn(&self, program: &str, args: &[&str]) -> Result<ChildGuard> {
        let mut cmd = self.command(program);
        cmd.args(args).stdin(Stdio::null());
        let child = cmd.spawn().map_err(|source| NetnsError::Spawn {
            cmd: render(&cmd),
            source,
        })?;
        Ok(ChildGuard {
            child: Some(child),
            what: render(&cmd),
        })
    }

    /// Like [`Netns::spawn`], with stdout and stderr appended to `log`: a process that
    /// outlives its starter must not hold the starter's terminal or pipe.
    pub fn spawn_logged(&self, program: &str, args: &[&str], log: &Path) -> Result<ChildGuard> {
        let open = || {
            File::options()
                .create(true)
                .append(true)
                .open(log)
                .map_err(|source| NetnsError::File {
                    path: log.to_owned(),
                    source,
                })
        };
        let mut cmd = self.command(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(open()?)
            .stderr(open()?);
        let child = cmd.spawn().map_err(|source| NetnsError::Spawn {
            cmd: render(&cmd),
            source,
        })?;
        Ok(ChildGuard {
            child: Some(child),
            what: render(&cmd),
        })
    }

    /// Runs `f` on a new thread whose network namespace is this one, and returns its result.
    /// Sockets `f` creates belong to this namespace (and keep working after the thread ends).
    pub fn run_in<F, R>(&self, f: F) -> Result<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let handle = self.spawn_thread(f)?;
        Ok(handle.join().expect("namespace thread panicked"))
    }

    /// Like [`Netns::run_in`] but returns the thread's handle instead of waiting.
    pub fn spawn_thread<F, R>(&self, f: F) -> Result<std::thread::JoinHandle<R>>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let file = File::open(self.path()).map_err(|source| NetnsError::Enter {
            name: self.name.clone(),
            source,
        })?;
        let name = self.name.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name(format!("netns-{name}"))
            .spawn(move || {
                // this thread only: the rest of the process stays where it is
                if let Err(e) = stator_sys::ns::enter_net(file.as_fd()) {
                    let _ = tx.send(Err(e));
                    panic!("setns failed");
                }
                let _ = tx.send(Ok(()));
                f()
            })
            .map_err(|source| NetnsError::Enter {
                name: self.name.clone(),
                source,
            })?;
        match rx.recv() {
            Ok(Ok(())) => Ok(handle),
            Ok(Err(source)) => Err(NetnsError::Enter {
                name: self.name.clone(),
                source,
            }),
            Err(_) => Err(NetnsError::Enter {
                name: self.name.clone(),
                source: std::io::Error::other("namespace thread died"),
            }),
        }
    }

    /// Kills every process inside the namespace (best effort).
    pub fn kill_all(&self) {
        if let Ok(out) = run(Command::new("ip").args(["netns", "pids", &self.name])) {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                if let Ok(pid) = pid.parse::<u32>() {
                    // best effort: the process may have exited since `ip` listed it
                    let _ = stator_sys::process::send_signal(pid, libc::SIGKILL);
                }
            }
        }
    }

    /// Kills the processes inside and deletes the namespace.
    pub fn delete(self) -> Result<()> {
        cleanup_exact(&self.name)
    }
}

fn cleanup_exact(name: &str) -> Result<()> {
    Netns::existing(name).kill_all();
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        match ip(["netns", "delete", name]) {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Creates namespaces `a_name` and `b_name` joined by a veth pair (`a_dev` in the first,
/// `b_dev` in the second); on failure deletes whatever it created. The caller deletes both.
pub fn pair(a_name: &str, a_dev: &str, b_name: &str, b_dev: &str) -> Result<(Netns, Netns)> {
    let a = Netns::create(a_name)?;
    let b = match Netns::create(b_name) {
        Ok(b) => b,
        Err(e) => {
            let _ = a.delete();
            return Err(e);
        }
    };
    if let Err(e) = veth(&a, a_dev, &b, b_dev) {
        let _ = a.delete();
        let _ = b.delete();
        return Err(e);
    }
    Ok((a, b))
}

/// Creates a veth pair with one end in each namespace (names ≤ 15 characters).
pub fn veth(a: &Netns, a_dev: &str, b: &Netns, b_dev: &str) -> Result<()> {
    ip([
        "link",
        "add",
        a_dev,
        "netns",
        a.name(),
        "type",
        "veth",
        "peer",
        "name",
        b_dev,
        "netns",
        b.name(),
    ])?;
    a.ip(["link", "set", a_dev, "up"])?;
    b.ip(["link", "set", b_dev, "up"])?;
    Ok(())
}

/// A process started in a namespace; killed (and reaped) when dropped.
#[derive(Debug)]
pub struct ChildGuard {
    child: Option<Child>,
    what: String,
}

impl ChildGuard {
    /// Guards a process started elsewhere; `what` describes it in messages.
    pub fn from_child(child: Child, what: String) -> Self {
        Self {
            child: Some(child),
            what,
        }
    }

    /// The process id.
    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Sends a signal (e.g. `libc::SIGTERM`).
    pub fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            // our own child, not yet reaped (so its pid is not reused); an exited one is no error
            let _ = stator_sys::process::send_signal(c.id(), sig);
        }
    }

    /// Waits up to `timeout` for the process to exit; returns its exit status if it did.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What was started (for messages).
    pub fn describe(&self) -> &str {
        &self.what
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
