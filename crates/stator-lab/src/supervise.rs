//! A lab node's `stator run` supervised the way `packaging/stator.service.in` has systemd
//! supervise it (systemd is not PID 1 in the lab's environment, and its units would not be
//! the test's to own): `Type=notify`, `WatchdogSec=`, `ExecStartPre=stator check`,
//! `ExecStopPost=stator withdraw --unless-clean`, `Restart=on-failure`.
//!
//! The supervisor is a thread that owns a `NOTIFY_SOCKET` (a datagram socket in the lab's
//! directory) and the process:
//! 1. runs `stator check` on the configuration; a failure is a failed start (`exit-code`);
//! 2. starts `stator run` in the node's namespace with `NOTIFY_SOCKET` and `WATCHDOG_USEC`;
//!    the start times out without `READY=1` within the start timeout (`timeout`);
//! 3. after `READY=1`, a `WATCHDOG=1` must come within every watchdog bound; a missed one
//!    sends SIGABRT (`WatchdogSignal=`), then SIGKILL after the abort timeout
//!    (`TimeoutAbortSec=`); the result is `watchdog`;
//! 4. when the process is gone, runs `stator withdraw --unless-clean` with systemd's
//!    `SERVICE_RESULT`, `EXIT_CODE` and `EXIT_STATUS`, then restarts after the restart delay
//!    unless the stop was clean (`success`) — a clean restart ([`Supervisor::restart`]) starts
//!    again at once, as `systemctl restart` does.
//!
//! Every step is recorded with its time ([`Supervisor::events`]), so tests measure them. Not
//! emulated: `NotifyAccess=` (the socket is the node's own; any sender counts), `MAINPID=`, and the
//! start rate limit (`StartLimitBurst=`).

use std::fs::File;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::netns::{ChildGuard, Netns, NetnsError, Result};

/// The unit's timing (`packaging/stator.service.in`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitTiming {
    /// `WatchdogSec=` (`None`: no watchdog).
    pub watchdog: Option<Duration>,
    /// `TimeoutAbortSec=`: SIGABRT to SIGKILL after a missed watchdog ping.
    pub abort_timeout: Duration,
    /// `RestartSec=`.
    pub restart: Duration,
    /// `TimeoutStopSec=`: SIGTERM to SIGKILL on a stop.
    pub stop_timeout: Duration,
    /// `TimeoutStartSec=`: start to `READY=1`.
    pub start_timeout: Duration,
    /// `stator withdraw --timeout`.
    pub withdraw_timeout: Duration,
}

impl UnitTiming {
    /// The packaged unit's values.
    pub fn packaged() -> Self {
        Self {
            watchdog: Some(Duration::from_secs(10)),
            abort_timeout: Duration::from_secs(5),
            restart: Duration::from_secs(2),
            stop_timeout: Duration::from_secs(20),
            start_timeout: Duration::from_secs(90),
            withdraw_timeout: Duration::from_secs(5),
        }
    }
}

/// What happened to a supervised node, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `stator check` refused the configuration (`ExecStartPre=` failed).
    StartRefused {
        /// Its output.
        output: String,
    },
    /// `stator run` started.
    Started {
        /// Its pid.
        pid: u32,
    },
    /// `READY=1` came.
    Ready,
    /// No `WATCHDOG=1` within the bound: SIGABRT sent.
    WatchdogTimeout,
    /// No `READY=1` within the start timeout: SIGKILL sent.
    StartTimeout,
    /// The process is gone; systemd's variables for `ExecStopPost=`.
    Exited {
        /// `SERVICE_RESULT`.
        result: String,
        /// `EXIT_CODE`.
        code: String,
        /// `EXIT_STATUS`.
        status: String,
    },
    /// `stator withdraw --unless-clean` ran (`ExecStopPost=`).
    StopPost {
        /// Whether it succeeded.
        ok: bool,
        /// Its output.
        output: String,
    },
    /// Supervision ended (a stop, a clean exit, or the supervisor dropped).
    Ended,
}

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// When.
    pub at: Instant,
    /// What.
    pub event: Event,
}

/// What the supervisor runs.
#[derive(Debug, Clone)]
pub struct Service {
    /// The node's namespace.
    pub ns: Netns,
    /// The `stator` binary.
    pub binary: PathBuf,
    /// The configuration file.
    pub config: PathBuf,
    /// Where stdout and stderr of every command go (appended).
    pub log: PathBuf,
    /// The `NOTIFY_SOCKET` path (created; removed when supervision ends).
    pub notify: PathBuf,
    /// The pid file written at each start (for the lab's teardown).
    pub pid_file: PathBuf,
    /// BIRD's control socket, for `stator withdraw --bird-socket` (used when the
    /// configuration cannot be read; the unit relies on the default).
    pub bird_socket: PathBuf,
    /// The unit's timing.
    pub timing: UnitTiming,
}

#[derive(Debug, Default)]
struct State {
    events: Vec<Record>,
    child: Option<ChildGuard>,
    /// A stop (no restart) was asked for.
    stop: bool,
    /// A clean restart was asked for.
    restart: bool,
    /// Leave now: kill the process, run nothing more.
    abandon: bool,
    ended: bool,
}

#[derive(Debug)]
struct Inner {
    service: Service,
    state: Mutex<State>,
    changed: Condvar,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // Plain values, valid at every step.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Inner {
    fn record(&self, event: Event) {
        lock(&self.state).events.push(Record {
            at: Instant::now(),
            event,
        });
        self.changed.notify_all();
    }

    fn signal(&self, sig: i32) {
        if let Some(c) = &lock(&self.state).child {
            c.signal(sig);
        }
    }

    fn flag(&self, f: impl Fn(&State) -> bool) -> bool {
        f(&lock(&self.state))
    }

    /// Sleeps `d` unless a stop or abandon comes; false if one came.
    fn pause(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut s = lock(&self.state);
        loop {
            if s.stop || s.abandon {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            s = self
                .changed
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// A supervised `stator run`; dropping it kills the process (no `ExecStopPost=`).
#[derive(Debug)]
pub struct Supervisor {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

impl Supervisor {
    /// Starts supervising `service` (binds its `NOTIFY_SOCKET`, then starts the node).
    ///
    /// # Errors
    /// The socket cannot be bound or the thread cannot start.
    pub fn start(service: Service) -> Result<Self> {
        let _ = std::fs::remove_file(&service.notify);
        let socket = UnixDatagram::bind(&service.notify).map_err(|source| NetnsError::File {
            path: service.notify.clone(),
            source,
        })?;
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .map_err(|source| NetnsError::File {
                path: service.notify.clone(),
                source,
            })?;
        let inner = Arc::new(Inner {
            service,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let thread_inner = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("lab-supervisor".into())
            .spawn(move || {
                supervise(&thread_inner, &socket);
                let _ = std::fs::remove_file(&thread_inner.service.notify);
                lock(&thread_inner.state).ended = true;
                thread_inner.record(Event::Ended);
            })
            .map_err(|e| NetnsError::Spawn {
                cmd: "the lab supervisor thread".into(),
                source: e,
            })?;
        Ok(Self {
            inner,
            thread: Some(thread),
        })
    }

    /// The running process's pid.
    pub fn pid(&self) -> Option<u32> {
        lock(&self.inner.state)
            .child
            .as_ref()
            .and_then(ChildGuard::id)
    }

    /// Whether supervision goes on (the node runs, or will be restarted).
    pub fn is_active(&self) -> bool {
        !lock(&self.inner.state).ended
    }

    /// Sends `sig` to the running process (SIGKILL: a crash; SIGSTOP: a hang; SIGHUP).
    pub fn signal(&self, sig: i32) {
        self.inner.signal(sig);
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Record> {
        lock(&self.inner.state).events.clone()
    }

    /// Waits up to `timeout` for an event after the first `skip` that `want` accepts;
    /// returns its index and record.
    ///
    /// # Errors
    /// A timeout (the message lists the events).
    pub fn wait_event(
        &self,
        skip: usize,
        timeout: Duration,
        want: impl Fn(&Event) -> bool,
    ) -> Result<(usize, Record)> {
        let deadline = Instant::now() + timeout;
        let mut s = lock(&self.inner.state);
        loop {
            if let Some((i, r)) = s
                .events
                .iter()
                .enumerate()
                .skip(skip)
                .find(|(_, r)| want(&r.event))
            {
                return Ok((i, r.clone()));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(NetnsError::Timeout {
                    what: format!("a supervisor event; events: {:?}", s.events),
                    waited: timeout,
                });
            }
            s = self
                .inner
                .changed
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// A clean restart (`systemctl restart`): SIGTERM, `ExecStopPost=` (which does nothing
    /// after a clean exit), and a start at once.
    pub fn restart(&self) {
        lock(&self.inner.state).restart = true;
        self.inner.changed.notify_all();
    }

    /// A stop (`systemctl stop`): SIGTERM (SIGKILL after the stop timeout),
    /// `ExecStopPost=`, no restart. Waits up to `timeout` for supervision to end and returns
    /// the last exit's `SERVICE_RESULT`.
    ///
    /// # Errors
    /// Supervision did not end within `timeout`.
    pub fn stop(&mut self, timeout: Duration) -> Result<Option<String>> {
        lock(&self.inner.state).stop = true;
        self.inner.changed.notify_all();
        self.wait_event(0, timeout, |e| *e == Event::Ended)?;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        Ok(self.events().iter().rev().find_map(|r| match &r.event {
            Event::Exited { result, .. } => Some(result.clone()),
            _ => None,
        }))
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        {
            let mut s = lock(&self.inner.state);
            s.abandon = true;
            if let Some(c) = &s.child {
                c.signal(libc::SIGCONT);
                c.signal(libc::SIGKILL);
            }
        }
        self.inner.changed.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn open_log(path: &Path) -> std::io::Result<(File, File)> {
    let out = File::options().create(true).append(true).open(path)?;
    let err = out.try_clone()?;
    Ok((out, err))
}

fn supervise(inner: &Inner, socket: &UnixDatagram) {
    let svc = &inner.service;
    loop {
        if inner.flag(|s| s.stop || s.abandon) {
            return;
        }
        lock(&inner.state).restart = false;
        // ExecStartPre=stator check
        let check = Command::new(&svc.binary)
            .arg("check")
            .arg(&svc.config)
            .stdin(Stdio::null())
            .output();
        let refused = match check {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some((
                o.status,
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr),
            )),
            Err(e) => Some((ExitStatus::from_raw(1 << 8), e.to_string())),
        };
        let (result, code, status) = if let Some((st, output)) = refused {
            inner.record(Event::StartRefused { output });
            classify(st, false, false)
        } else {
            match run_once(inner, socket) {
                Some(r) => r,
                None => return,
            }
        };
        let clean = result == "success";
        inner.record(Event::Exited {
            result: result.clone(),
            code: code.clone(),
            status: status.clone(),
        });
        if inner.flag(|s| s.abandon) {
            return;
        }
        stop_post(inner, &result, &code, &status);
        if inner.flag(|s| s.restart) {
            continue;
        }
        if clean || inner.flag(|s| s.stop) {
            return;
        }
        if !inner.pause(svc.timing.restart) {
            return;
        }
    }
}

/// Starts `stator run` and watches it until it is gone; its (result, code, status), or
/// `None` when abandoned.
fn run_once(inner: &Inner, socket: &UnixDatagram) -> Option<(String, String, String)> {
    let svc = &inner.service;
    let t = &svc.timing;
    let spawned = open_log(&svc.log).and_then(|(out, err)| {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", svc.ns.path().display()))
            .arg(&svc.binary)
            .args(["run", "-c"])
            .arg(&svc.config)
            .env("NOTIFY_SOCKET", &svc.notify)
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        match t.watchdog {
            Some(w) => cmd.env("WATCHDOG_USEC", w.as_micros().to_string()),
            None => cmd.env_remove("WATCHDOG_USEC"),
        };
        cmd.spawn()
    });
    let child = match spawned {
        Ok(c) => c,
        Err(e) => {
            inner.record(Event::StartRefused {
                output: format!("spawning stator run: {e}"),
            });
            return Some(("resources".into(), "exited".into(), "1".into()));
        }
    };
    let pid = child.id();
    let _ = std::fs::write(&svc.pid_file, format!("{pid}\n"));
    lock(&inner.state).child = Some(ChildGuard::from_child(
        child,
        format!("supervised stator run -c {}", svc.config.display()),
    ));
    inner.record(Event::Started { pid });
    let started = Instant::now();
    let mut ready = false;
    let mut stopping = false;
    let mut last_ping = started;
    let mut watchdog_fired = false;
    let mut abort_at: Option<Instant> = None;
    let mut term_at: Option<Instant> = None;
    let mut buf = [0u8; 4096];
    loop {
        if let Ok(n) = socket.recv(&mut buf) {
            for line in String::from_utf8_lossy(&buf[..n]).lines() {
                match line {
                    "READY=1" if !ready => {
                        ready = true;
                        last_ping = Instant::now();
                        inner.record(Event::Ready);
                    }
                    "WATCHDOG=1" => last_ping = Instant::now(),
                    "STOPPING=1" => stopping = true,
                    _ => {}
                }
            }
        }
        let now = Instant::now();
        let (exited, abandon, stop_wanted) = {
            let mut s = lock(&inner.state);
            let exited = s
                .child
                .as_mut()
                .and_then(|c| c.wait_timeout(Duration::ZERO));
            (exited, s.abandon, s.stop || s.restart)
        };
        if abandon {
            lock(&inner.state).child = None; // killed and reaped by the guard
            return None;
        }
        if let Some(st) = exited {
            lock(&inner.state).child = None;
            return Some(classify(st, watchdog_fired, term_at.is_some()));
        }
        if !ready
            && !stopping
            && now.duration_since(started) > t.start_timeout
            && abort_at.is_none()
        {
            inner.record(Event::StartTimeout);
            inner.signal(libc::SIGKILL);
            abort_at = Some(now);
        }
        if let Some(w) = t.watchdog
            && ready
            && !stopping
            && !watchdog_fired
            && now.duration_since(last_ping) > w
        {
            watchdog_fired = true;
            inner.record(Event::WatchdogTimeout);
            inner.signal(libc::SIGABRT);
            abort_at = Some(now + t.abort_timeout);
        }
        if abort_at.is_some_and(|a| now >= a) {
            inner.signal(libc::SIGKILL);
            abort_at = Some(now + Duration::from_secs(3600));
        }
        if stop_wanted && term_at.is_none() {
            inner.signal(libc::SIGTERM);
            term_at = Some(now);
        }
        if term_at.is_some_and(|s| now.duration_since(s) > t.stop_timeout) {
            inner.signal(libc::SIGKILL);
            term_at = Some(now);
        }
    }
}

/// systemd's `SERVICE_RESULT`, `EXIT_CODE` and `EXIT_STATUS` for an exit.
fn classify(st: ExitStatus, watchdog: bool, terminated: bool) -> (String, String, String) {
    let (code, status) = match (st.code(), st.signal()) {
        (Some(c), _) => ("exited", c.to_string()),
        (None, Some(sig)) => (
            if st.core_dumped() { "dumped" } else { "killed" },
            signal_name(sig),
        ),
        (None, None) => ("exited", "unknown".to_owned()),
    };
    let result = if watchdog {
        "watchdog"
    } else if st.success() || (terminated && st.signal() == Some(libc::SIGTERM)) {
        "success"
    } else if st.core_dumped() {
        "core-dump"
    } else if st.signal().is_some() {
        "signal"
    } else {
        "exit-code"
    };
    (result.to_owned(), code.to_owned(), status)
}

fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGABRT => "ABRT".into(),
        libc::SIGKILL => "KILL".into(),
        libc::SIGTERM => "TERM".into(),
        libc::SIGSEGV => "SEGV".into(),
        other => other.to_string(),
    }
}

/// `ExecStopPost=stator withdraw --unless-clean -c CONFIG`, with systemd's variables.
fn stop_post(inner: &Inner, result: &str, code: &str, status: &str) {
    let svc = &inner.service;
    let out = Command::new(&svc.binary)
        .args(["withdraw", "--unless-clean", "-c"])
        .arg(&svc.config)
        .arg("--bird-socket")
        .arg(&svc.bird_socket)
        .arg("--timeout")
        .arg(svc.timing.withdraw_timeout.as_secs_f64().to_string())
        .env("SERVICE_RESULT", result)
        .env("EXIT_CODE", code)
        .env("EXIT_STATUS", status)
        .stdin(Stdio::null())
        .output();
    let (ok, output) = match out {
        Ok(o) => (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        ),
        Err(e) => (false, format!("spawning stator withdraw: {e}")),
    };
    if let Ok(mut f) = File::options().create(true).append(true).open(&svc.log) {
        use std::io::Write as _;
        let _ = writeln!(
            f,
            "--- lab supervisor: ExecStopPost (SERVICE_RESULT={result} EXIT_CODE={code} \
             EXIT_STATUS={status}) ok={ok} ---\n{output}"
        );
    }
    inner.record(Event::StopPost { ok, output });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_as_systemd_names_them() {
        let exited = |c: i32| ExitStatus::from_raw(c << 8);
        let killed = |s: i32| ExitStatus::from_raw(s);
        let s = |r: (String, String, String)| (r.0, r.1, r.2);
        assert_eq!(
            s(classify(exited(0), false, true)),
            ("success".into(), "exited".into(), "0".into())
        );
        assert_eq!(
            s(classify(exited(1), false, false)),
            ("exit-code".into(), "exited".into(), "1".into())
        );
        assert_eq!(
            s(classify(killed(libc::SIGKILL), false, false)),
            ("signal".into(), "killed".into(), "KILL".into())
        );
        assert_eq!(
            classify(killed(libc::SIGKILL), true, false).0,
            "watchdog".to_owned()
        );
        assert_eq!(
            classify(killed(libc::SIGTERM), false, true).0,
            "success".to_owned()
        );
    }
}
