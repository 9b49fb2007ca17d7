//! The rival processes of the proxy benchmarks (`stator bench proxy`, `stator bench udp
//! --proxy`), started the same way for both: Stator and nginx from a configuration written
//! into the run's temporary directory, pinned to CPU 0 with `taskset`, killed and reaped when
//! dropped ([`Proc`]); and the small helpers they share (free ports, `which`, the temporary
//! directory, the error constructors).

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::BenchError;

type Result<T> = std::result::Result<T, BenchError>;

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}

pub(crate) fn failed(what: impl Into<String>) -> BenchError {
    BenchError::Failed { what: what.into() }
}

/// A child process (named for messages) killed and reaped on drop.
pub(crate) struct Proc(
    pub(crate) Child,
    #[allow(dead_code)] pub(crate) &'static str,
);

impl Proc {
    pub(crate) fn stop(&mut self) {
        // SIGTERM first so the proxies close their sockets; then make sure.
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Whether [`pinned`] pins (`stator bench proxy` measures both ways; every other benchmark
/// pins). Set between runs, never during one.
static PINNING: AtomicBool = AtomicBool::new(true);

/// Makes [`pinned`] pin (`true`, the default) or start programs wherever the scheduler puts
/// them (`false`: the unpinned rounds of `stator bench proxy`).
pub(crate) fn set_pinning(pin: bool) {
    PINNING.store(pin, Ordering::Relaxed);
}

/// `program` under `taskset -c cpu` (or not pinned, see [`set_pinning`]).
pub(crate) fn pinned(cpu: &str, program: &Path) -> Command {
    let mut c = if PINNING.load(Ordering::Relaxed) {
        let mut c = Command::new("taskset");
        c.arg("-c").arg(cpu).arg(program);
        c
    } else {
        Command::new(program)
    };
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// The part of a `stator run` configuration both proxy benchmarks share: a node without a data
/// plane, its API on the Unix socket `socket` (the run's own, not the host's), warnings only,
/// and the pool `b` of `backends` (health checks off). The caller appends its `[[listener]]`.
pub(crate) fn stator_pool_config(backends: &[SocketAddr], socket: &Path) -> Result<String> {
    let mut t = format!(
        "[node]\nname = \"bench\"\n[dataplane]\nmode = \"none\"\n[api]\nsocket = \"{}\"\n\
         [log]\nlevel = \"warn\"\n[[pool]]\nname = \"b\"\n[pool.health]\nmethod = \"none\"\n",
        socket.display()
    );
    for a in backends {
        t += &format!(
            "[[pool.backend]]\naddress = \"{}\"\nport = {}\n",
            a.ip(),
            a.port()
        );
    }
    Ok(t)
}

/// Writes `config` to `path` and starts `stator run -c path` on CPU 0.
pub(crate) fn spawn_stator(stator: &Path, path: &Path, config: &str) -> Result<Proc> {
    std::fs::write(path, config).map_err(io("writing the stator configuration"))?;
    let child = pinned("0", stator)
        .arg("run")
        .arg("-c")
        .arg(path)
        .spawn()
        .map_err(io("starting stator run"))?;
    Ok(Proc(child, "stator"))
}

/// Creates nginx's prefix directory `dir/name`.
pub(crate) fn nginx_prefix(dir: &Path, name: &str) -> Result<PathBuf> {
    let prefix = dir.join(name);
    std::fs::create_dir_all(&prefix).map_err(io("creating nginx's prefix"))?;
    Ok(prefix)
}

/// nginx's main context both benchmarks use: in the foreground, a master and 2 workers, pid
/// and error log (critical only) under `prefix`.
pub(crate) fn nginx_globals(prefix: &Path) -> String {
    format!(
        "daemon off;\nmaster_process on;\nworker_processes 2;\npid {p}/nginx.pid;\n\
         error_log {p}/error.log crit;\nevents {{ worker_connections 8192; }}\n",
        p = prefix.display()
    )
}

/// Writes `conf` to `prefix/nginx.conf` and starts nginx on CPU 0.
pub(crate) fn spawn_nginx(prefix: &Path, conf: &str) -> Result<Proc> {
    let path = prefix.join("nginx.conf");
    std::fs::write(&path, conf).map_err(io("writing nginx.conf"))?;
    let child = pinned("0", Path::new("nginx"))
        .arg("-p")
        .arg(prefix)
        .arg("-c")
        .arg(&path)
        .spawn()
        .map_err(io("starting nginx"))?;
    Ok(Proc(child, "nginx"))
}

/// Writes `conf` to `path` and starts HAProxy in the foreground (`-db`) on CPU 0.
pub(crate) fn spawn_haproxy(path: &Path, conf: &str) -> Result<Proc> {
    std::fs::write(path, conf).map_err(io("writing haproxy.cfg"))?;
    let child = pinned("0", Path::new("haproxy"))
        .arg("-db")
        .arg("-f")
        .arg(path)
        .spawn()
        .map_err(io("starting haproxy"))?;
    Ok(Proc(child, "haproxy"))
}

/// Runs `task()` on a thread of its own named `name`, pinned to CPU 1 (the load generator's,
/// away from the proxies' CPU 0), in a single-threaded tokio runtime: the benchmarks' local
/// backends. The thread ends when the future does (or at once if no runtime can be built).
pub(crate) fn spawn_backend_thread<F, Fut>(name: &str, task: F) -> std::io::Result<()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            crate::pin::pin_to_cpu(1);
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(task());
        })
        .map(|_| ())
}

pub(crate) fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(io("finding a free port"))?;
    Ok(l.local_addr().map_err(io("finding a free port"))?.port())
}

pub(crate) fn which(tool: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!path.is_empty()).then(|| PathBuf::from(path))
}

pub(crate) fn tempdir() -> Result<PathBuf> {
    // a name of this run's own: two runs in one process (the smoke tests) must not share it
    let dir = stator_testkit::scratch::unique_path("stator-bench-proxy", "");
    std::fs::create_dir(&dir).map_err(io("creating a temporary directory"))?;
    let mut f = std::fs::File::create(dir.join("README")).map_err(io("writing README"))?;
    writeln!(
        f,
        "stator bench proxy: configurations of one run; removed at its end"
    )
    .map_err(io("writing README"))?;
    Ok(dir)
}
