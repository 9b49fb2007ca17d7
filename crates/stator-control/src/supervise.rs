//! Supervision by systemd: readiness and the watchdog (`sd_notify(3)`), spoken directly.
//!
//! A controller that dies is seen by its supervisor; one that hangs is not, unless it has to
//! prove it is alive. Under a unit with `Type=notify` and `WatchdogSec=`, systemd passes
//! `NOTIFY_SOCKET` (a datagram socket: a path, or an abstract name written `@name`) and
//! `WATCHDOG_USEC` (the bound) in the environment. `stator run` sends `READY=1` once the first
//! snapshot is committed and the announcements are decided, `STOPPING=1` when it starts to
//! shut down, and `WATCHDOG=1` every half bound — but only while every task the node cannot
//! live without makes progress ([`Vital`]: the main loop, the reconciler, the health checks,
//! the BGP announcer). One stalled task stops the pings; systemd then kills the node
//! (`WatchdogSignal=`), runs the unit's `ExecStopPost=` (`stator withdraw`) and restarts it.
//!
//! The pinger is a thread of its own, not a tokio task: a runtime that stops scheduling
//! stops the reconciler's beats, which stops the pings; a process that is stopped
//! (SIGSTOP) or deadlocked as a whole sends nothing at all.
//!
//! Without `NOTIFY_SOCKET` nothing is sent and the node runs as before (it says so once).

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use stator_plane::PlaneBeat;

/// How often a looping task beats ([`Heartbeat::beat`]) when it has nothing else to do.
pub const BEAT_INTERVAL: Duration = Duration::from_secs(1);

/// How long the main loop or the reconciler may go without a beat: a commit of a large
/// configuration (Maglev tables, BPF map writes) must fit in it.
pub const LOOP_ALLOWANCE: Duration = Duration::from_secs(10);

/// How long a health check may be late (past its due time plus its own timeout).
pub use stator_health::CHECK_ALLOWANCE;

/// How long the BGP announcer may go without a beat: one pass waits on BIRD for at most
/// `io_timeout` per reply (a `configure`, then one toggle per VIP that changes).
pub const ANNOUNCER_ALLOWANCE: Duration = Duration::from_secs(20);

/// Where `sd_notify` messages go: the datagram socket `NOTIFY_SOCKET` names.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    to: SocketAddr,
    name: String,
}

impl Notifier {
    /// The notifier `NOTIFY_SOCKET` asks for; `Ok(None)` when it is not set (not under a
    /// `Type=notify` unit).
    ///
    /// # Errors
    /// A `NOTIFY_SOCKET` that is neither a path nor `@name` (systemd's `vsock:` is not
    /// supported), or a socket that cannot be created.
    pub fn from_env() -> std::io::Result<Option<Self>> {
        match std::env::var_os("NOTIFY_SOCKET") {
            None => Ok(None),
            Some(v) => Self::to(&v.to_string_lossy()).map(Some),
        }
    }

    /// A notifier that sends to `name`: a filesystem path, or an abstract socket `@name`.
    ///
    /// # Errors
    /// An address of another form, or a socket that cannot be created.
    pub fn to(name: &str) -> std::io::Result<Self> {
        let to = if let Some(abs) = name.strip_prefix('@') {
            SocketAddr::from_abstract_name(abs.as_bytes())?
        } else if name.starts_with('/') {
            SocketAddr::from_pathname(name)?
        } else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("NOTIFY_SOCKET={name:?}: neither a path nor an abstract name (@name)"),
            ));
        };
        Ok(Self {
            socket: UnixDatagram::unbound()?,
            to,
            name: name.to_owned(),
        })
    }

    /// Sends one message (`KEY=value` lines).
    ///
    /// # Errors
    /// The datagram could not be sent (the supervisor's socket is gone).
    pub fn send(&self, message: &str) -> std::io::Result<()> {
        self.socket
            .send_to_addr(message.as_bytes(), &self.to)
            .map(|_| ())
    }

    /// The socket's name as `NOTIFY_SOCKET` gave it.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The watchdog bound systemd set (`WATCHDOG_USEC`), if it is meant for this process
/// (`WATCHDOG_PID` absent or ours). `Err` for a value that is not a positive number.
pub fn watchdog_from_env() -> Result<Option<Duration>, String> {
    let Some(usec) = std::env::var_os("WATCHDOG_USEC") else {
        return Ok(None);
    };
    if let Some(pid) = std::env::var_os("WATCHDOG_PID")
        && pid.to_string_lossy().trim() != std::process::id().to_string()
    {
        return Ok(None);
    }
    parse_watchdog_usec(&usec.to_string_lossy())
}

/// `WATCHDOG_USEC`'s value as a bound (`0` means no watchdog).
pub fn parse_watchdog_usec(text: &str) -> Result<Option<Duration>, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Ok(None),
        Ok(usec) => Ok(Some(Duration::from_micros(usec))),
        Err(e) => Err(format!("WATCHDOG_USEC={text:?}: {e}")),
    }
}

/// A beat a looping task gives each time round (cheap to clone; any thread).
#[derive(Debug, Clone)]
pub struct Heartbeat {
    last: Arc<Mutex<Instant>>,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self::new()
    }
}

impl Heartbeat {
    /// A heartbeat that beat just now.
    pub fn new() -> Self {
        Self {
            last: Arc::new(Mutex::new(Instant::now())),
        }
    }

    /// The task made progress.
    pub fn beat(&self) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    /// When it last beat.
    pub fn last(&self) -> Instant {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

type Deadline = Box<dyn Fn() -> Option<Instant> + Send>;

/// One task the node cannot live without: it promises to act again by a deadline
/// (`None`: nothing to promise now, such as an announcer without `[bgp]`).
pub struct Vital {
    name: &'static str,
    deadline: Deadline,
}

impl std::fmt::Debug for Vital {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vital").field("name", &self.name).finish()
    }
}

impl Vital {
    /// A task whose deadline `deadline` computes.
    pub fn new(
        name: &'static str,
        deadline: impl Fn() -> Option<Instant> + Send + 'static,
    ) -> Self {
        Self {
            name,
            deadline: Box::new(deadline),
        }
    }

    /// A looping task that beats `heartbeat` and may be silent for `allowance`.
    pub fn looping(name: &'static str, heartbeat: Heartbeat, allowance: Duration) -> Self {
        Self::new(name, move || Some(heartbeat.last() + allowance))
    }

    /// The task's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// How far past its deadline the task is at `now`, if it is.
    pub fn overdue(&self, now: Instant) -> Option<Duration> {
        (self.deadline)().and_then(|d| now.checked_duration_since(d).filter(|o| !o.is_zero()))
    }
}

/// The first of `vitals` past its deadline at `now`, with how far past.
pub fn stalled(vitals: &[Vital], now: Instant) -> Option<(&'static str, Duration)> {
    vitals
        .iter()
        .find_map(|v| v.overdue(now).map(|o| (v.name, o)))
}

/// The supervision of a running node: the notifier, if any, and the pinger thread.
#[derive(Debug)]
pub struct Supervision {
    notifier: Option<Arc<Notifier>>,
    pinger: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
    /// A successor (`stator run --takeover`): READY=1 comes with `MAINPID=` (the unit needs
    /// `NotifyAccess=all`), so that systemd follows this process, not the one it replaces.
    successor: bool,
}

impl Supervision {
    /// Reads the environment and says in the log what supervision the node is under.
    pub fn from_env() -> Self {
        let notifier = match Notifier::from_env() {
            Ok(Some(n)) => {
                tracing::info!(socket = n.name(), "supervised: systemd notifications on");
                Some(Arc::new(n))
            }
            Ok(None) => {
                tracing::info!(
                    "not supervised by systemd (no NOTIFY_SOCKET): no readiness notification, \
                     no watchdog; a hung or killed node is not withdrawn by anyone"
                );
                None
            }
            Err(e) => {
                tracing::error!(error = %e, "NOTIFY_SOCKET unusable: running without supervision");
                None
            }
        };
        Self {
            notifier,
            pinger: None,
            successor: false,
        }
    }

    /// Whether notifications are sent.
    pub fn is_supervised(&self) -> bool {
        self.notifier.is_some()
    }

    fn send(&self, message: &str) {
        if let Some(n) = &self.notifier
            && let Err(e) = n.send(message)
        {
            tracing::warn!(error = %e, socket = n.name(), message, "sd_notify failed");
        }
    }

    /// The node is ready (the first snapshot is committed, announcements decided); starts
    /// pinging the watchdog, if systemd set one, while every one of `vitals` keeps its
    /// promise.
    pub fn ready(&mut self, status: &str, vitals: Vec<Vital>) {
        if self.notifier.is_none() {
            return;
        }
        let bound = match watchdog_from_env() {
            Ok(Some(b)) => Some(b),
            Ok(None) => {
                tracing::info!("no systemd watchdog (WatchdogSec= not set)");
                None
            }
            Err(e) => {
                tracing::error!(error = %e, "ignoring the systemd watchdog setting");
                None
            }
        };
        self.ready_with(status, vitals, bound);
    }

    /// [`Supervision::ready`] with the watchdog bound given (`None`: no watchdog).
    fn ready_with(&mut self, status: &str, vitals: Vec<Vital>, bound: Option<Duration>) {
        let Some(notifier) = self.notifier.clone() else {
            return;
        };
        let main = if self.successor {
            format!("MAINPID={}\n", std::process::id())
        } else {
            String::new()
        };
        self.send(&format!("{main}READY=1\nSTATUS={status}"));
        let Some(bound) = bound else {
            return;
        };
        let names: Vec<&str> = vitals.iter().map(Vital::name).collect();
        tracing::info!(bound = ?bound, tasks = ?names, "systemd watchdog: pinging while every task makes progress");
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("stator-sd-watchdog".into())
            .spawn(move || ping(&notifier, bound, &vitals, &thread_stop));
        match spawned {
            Ok(handle) => self.pinger = Some((stop, handle)),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the watchdog pinger: systemd will kill the node")
            }
        }
    }

    /// This process replaces a node (`stator run --takeover`): it tells systemd it is the
    /// service's main process when it is ready.
    pub fn successor(&mut self) {
        self.successor = true;
    }

    /// The node handed over to its successor, now systemd's main process: the pings stop and
    /// nothing more is sent (a `STOPPING=1` from here would stop the service).
    pub fn handed_over(&mut self) {
        if let Some((stop, handle)) = self.pinger.take() {
            stop.store(true, Ordering::SeqCst);
            handle.thread().unpark();
            let _ = handle.join();
        }
        self.notifier = None;
    }

    /// The node starts to shut down: the pings stop (systemd does not watch a stopping
    /// unit; `TimeoutStopSec=` bounds the stop).
    pub fn stopping(&mut self) {
        if let Some((stop, handle)) = self.pinger.take() {
            stop.store(true, Ordering::SeqCst);
            handle.thread().unpark();
            let _ = handle.join();
        }
        self.send("STOPPING=1");
    }
}

/// The data plane's heartbeat (`dataplane.stale_after`, docs/forwarding.md §3.2): a thread
/// that refreshes `stator_beat` every [`BEAT_INTERVAL`] while every one of its vitals makes
/// progress — the same rule as the watchdog pings, but seen by the forwarder itself, so it
/// holds without systemd, and when the supervisor's kill or `stator withdraw` did not happen.
/// A controller that dies, is stopped or hangs stops refreshing; past the bound the XDP
/// forwarder passes VIP traffic to the kernel (`stale_pass`).
#[derive(Debug)]
pub struct BeatRefresher {
    writer: Arc<dyn PlaneBeat>,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

impl BeatRefresher {
    /// Refreshes now, then every [`BEAT_INTERVAL`] while `vitals` keep their promises.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn start(
        writer: Arc<dyn PlaneBeat>,
        stale_after: Duration,
        vitals: Vec<Vital>,
    ) -> std::io::Result<Self> {
        writer.refresh(stale_after);
        tracing::info!(stale_after = ?stale_after, "data-plane heartbeat on: the forwarder passes VIP traffic if the controller stops refreshing it");
        let stop = Arc::new(AtomicBool::new(false));
        let (w, s) = (Arc::clone(&writer), Arc::clone(&stop));
        let handle = std::thread::Builder::new()
            .name("stator-dp-beat".into())
            .spawn(move || refresh(&*w, stale_after, &vitals, &s))?;
        Ok(Self {
            writer,
            stop,
            handle,
        })
    }

    /// Stops refreshing. `keep_forwarding` (a clean stop with `on_exit = "keep"`): the check
    /// is turned off, so that the forwarder goes on trusting its tables until the next
    /// controller refreshes them; otherwise the last refresh stands.
    pub fn finish(self, keep_forwarding: bool) {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.thread().unpark();
        let _ = self.handle.join();
        if keep_forwarding {
            self.writer.off();
            tracing::info!(
                "data-plane heartbeat off: the forwarder keeps trusting its tables until the next controller"
            );
        }
    }
}

fn refresh(w: &dyn PlaneBeat, stale_after: Duration, vitals: &[Vital], stop: &AtomicBool) {
    let mut silent_since: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        std::thread::park_timeout(BEAT_INTERVAL);
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let now = Instant::now();
        match stalled(vitals, now) {
            None => {
                if let Some(since) = silent_since.take() {
                    tracing::info!(silent_for = ?since.elapsed(), "every task makes progress again: data-plane heartbeat resumes");
                }
                w.refresh(stale_after);
            }
            Some((name, late)) => {
                if silent_since.is_none() {
                    tracing::error!(task = name, late = ?late, stale_after = ?stale_after,
                                    "a task the node cannot live without made no progress: the data-plane \
                                     heartbeat stops (past stale_after, the forwarder passes VIP traffic)");
                    silent_since = Some(now);
                }
            }
        }
    }
}

fn ping(notifier: &Notifier, bound: Duration, vitals: &[Vital], stop: &AtomicBool) {
    let every = bound / 2;
    let mut silent_since: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        match stalled(vitals, now) {
            None => {
                if let Some(since) = silent_since.take() {
                    tracing::info!(silent_for = ?since.elapsed(), "every task makes progress again: watchdog pings resume");
                }
                if let Err(e) = notifier.send("WATCHDOG=1") {
                    tracing::warn!(error = %e, "watchdog ping failed");
                }
            }
            Some((name, late)) => {
                if silent_since.is_none() {
                    tracing::error!(task = name, late = ?late, "a task the node cannot live without made no progress: \
                                    no more watchdog pings (systemd will kill and withdraw the node)");
                    silent_since = Some(now);
                }
            }
        }
        std::thread::park_timeout(every);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchdog_usec_values() {
        assert_eq!(
            parse_watchdog_usec("3000000"),
            Ok(Some(Duration::from_secs(3)))
        );
        assert_eq!(parse_watchdog_usec("0"), Ok(None));
        assert!(parse_watchdog_usec("3s").is_err());
    }

    #[test]
    fn notify_socket_forms() {
        assert!(Notifier::to("/run/systemd/notify").is_ok());
        assert!(Notifier::to("@stator-test").is_ok());
        assert!(Notifier::to("vsock:2:1234").is_err());
    }

    #[test]
    fn a_stalled_task_is_named() {
        let t0 = Instant::now();
        let hb = Heartbeat::new();
        let vitals = vec![
            Vital::new("idle", || None),
            Vital::looping("loop", hb.clone(), Duration::from_secs(2)),
        ];
        let at = hb.last();
        assert_eq!(stalled(&vitals, at + Duration::from_secs(1)), None);
        assert_eq!(stalled(&vitals, at + Duration::from_secs(2)), None);
        assert_eq!(
            stalled(&vitals, at + Duration::from_secs(5)),
            Some(("loop", Duration::from_secs(3)))
        );
        hb.beat();
        assert!(hb.last() >= t0);
        assert_eq!(stalled(&vitals, hb.last() + Duration::from_secs(1)), None);
    }

    /// The pinger pings while every task keeps its promise, and stops at once when one
    /// does not (systemd's watchdog then fires); it resumes when the task does.
    #[test]
    fn the_pinger_stops_while_a_task_is_stalled() {
        let dir = stator_testkit::scratch::TempDir::new("stator-pinger");
        let path = dir.join("notify.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        server
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let notifier = Notifier::to(path.to_str().unwrap()).unwrap();
        let mut sup = Supervision {
            notifier: Some(Arc::new(notifier)),
            pinger: None,
            successor: false,
        };
        let stalled = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stalled);
        let vital = Vital::new("test task", move || {
            let now = Instant::now();
            Some(if flag.load(Ordering::SeqCst) {
                now - Duration::from_secs(1)
            } else {
                now + Duration::from_secs(1)
            })
        });
        sup.ready_with("test", vec![vital], Some(Duration::from_millis(40)));
        let mut buf = [0u8; 64];
        let mut next = || {
            server
                .recv(&mut buf)
                .ok()
                .map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
        };
        assert_eq!(next().as_deref(), Some("READY=1\nSTATUS=test"));
        assert_eq!(next().as_deref(), Some("WATCHDOG=1"));
        assert_eq!(next().as_deref(), Some("WATCHDOG=1"));
        stalled.store(true, Ordering::SeqCst);
        // At most one ping already on its way, then silence.
        let mut late = 0;
        while next().is_some() {
            late += 1;
            assert!(late <= 1, "pings went on while the task was stalled");
        }
        stalled.store(false, Ordering::SeqCst);
        assert_eq!(next().as_deref(), Some("WATCHDOG=1"));
        sup.stopping();
        // Pings already sent before the stop may still be queued; STOPPING=1 comes last.
        let mut last = None;
        while let Some(m) = next() {
            last = Some(m);
        }
        assert_eq!(last.as_deref(), Some("STOPPING=1"));
    }

    #[test]
    fn messages_reach_the_supervisor_socket() {
        let dir = stator_testkit::scratch::TempDir::new("stator-notify");
        let path = dir.join("notify.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let n = Notifier::to(path.to_str().unwrap()).unwrap();
        n.send("READY=1\nSTATUS=x").unwrap();
        let mut buf = [0u8; 64];
        let len = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1\nSTATUS=x");

        let name = stator_testkit::scratch::unique_name("stator-notify-test");
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abs = UnixDatagram::bind_addr(&addr).unwrap();
        abs.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Notifier::to(&format!("@{name}"))
            .unwrap()
            .send("WATCHDOG=1")
            .unwrap();
        let len = abs.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"WATCHDOG=1");
    }
}
