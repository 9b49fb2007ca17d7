//! The access log: one line per HTTP request, TCP connection and UDP session of every listener,
//! as nginx's `access_log` and HAProxy's `log` give their users.
//!
//! Shape, for a worker that must never wait on a disk or a pipe:
//! - each worker formats its lines into a buffer of its own ([`LogBuf`], no lock, no system
//!   call per line) and hands the buffer over when it holds [`FLUSH_AT`] bytes, once a second
//!   (the worker's sweeper), and when the worker ends;
//! - one writer thread per node ([`AccessLog`]) writes the buffers. The hand-over is a bounded
//!   queue ([`QUEUE`] buffers) that a worker never waits on: when the writer is behind (a slow
//!   disk, a `stdout` pipe nobody reads) the buffer is dropped and its lines counted as
//!   dropped — a flood of clients costs log lines, never a worker or unbounded memory;
//! - the file is opened `O_APPEND` (so logrotate's `copytruncate` works) and [`AccessLog::reopen`]
//!   opens it again by name (nginx's convention: `SIGUSR1` after logrotate moved it).
//!
//! Sampling (`sample`, the share of records written) never drops a record of a failure: an HTTP
//! status of 500 or more, or an outcome that says the proxy or an upstream failed (see
//! [`Record::failed`]). What a client's flood causes — sessions never replied to, evicted,
//! reclaimed; write timeouts of clients that stop reading — is sampled like the rest, so a
//! flood cannot push every line of it past the sample.
//!
//! Formats: JSON (one object per line) and a text line, both documented in docs/proxy.md.

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;

use crate::worker::WorkerCtx;

/// A worker hands its buffer to the writer once it holds this many bytes.
pub const FLUSH_AT: usize = 16 * 1024;
/// Buffers waiting for the writer, at most (with [`FLUSH_AT`]: about 4 MiB).
pub const QUEUE: usize = 256;
/// The longest request target written; longer ones are cut and end with `...`.
pub const MAX_TARGET: usize = 1024;

/// Where the lines go and how they look (`[access_log]`).
#[derive(Debug, Clone, PartialEq)]
pub struct AccessLogSpec {
    /// The file (appended to, created `0640`); `None`: standard output.
    pub path: Option<PathBuf>,
    /// Line format.
    pub format: AccessLogFormat,
    /// Share of records written, `0 < sample <= 1`; failures are always written.
    pub sample: f64,
}

/// Line format: the configuration's `access_log.format`.
pub use stator_config::AccessLogFormat;

/// The lines of the node's access log so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccessLogCounts {
    /// Lines written.
    pub written: u64,
    /// Lines dropped because the writer was behind (or the write failed).
    pub dropped: u64,
    /// Writes that failed (their lines are counted as dropped too).
    pub errors: u64,
}

/// Where the writer writes.
#[derive(Debug)]
enum Target {
    File(File),
    Stdout,
}

impl Target {
    fn open(path: Option<&PathBuf>) -> std::io::Result<Self> {
        match path {
            None => Ok(Self::Stdout),
            Some(p) => OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o640)
                .open(p)
                .map(Self::File),
        }
    }

    fn write_all(&self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Self::File(f) => (&*f).write_all(buf),
            Self::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(buf)?;
                out.flush()
            }
        }
    }
}

/// What workers read on every record: the format and the sample, or nothing (off).
#[derive(Debug)]
struct Settings {
    format: AccessLogFormat,
    sample: f64,
}

/// The node's access log: its settings, its writer thread and its counts.
#[derive(Debug)]
pub struct AccessLog {
    settings: ArcSwapOption<Settings>,
    /// The spec it runs (for reloads and reopen).
    spec: Mutex<Option<AccessLogSpec>>,
    target: Arc<Mutex<Arc<Target>>>,
    /// To the writer thread, started the first time the log is configured on.
    queue: OnceLock<SyncSender<(Vec<u8>, u64)>>,
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    written: AtomicU64,
    dropped: AtomicU64,
    errors: AtomicU64,
}

impl AccessLog {
    /// An access log that is off until [`AccessLog::configure`]d.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            settings: ArcSwapOption::empty(),
            spec: Mutex::new(None),
            target: Arc::new(Mutex::new(Arc::new(Target::Stdout))),
            queue: OnceLock::new(),
            counts: Arc::default(),
        })
    }

    /// Whether `spec`'s file can be opened for appending (it is created when missing): what a
    /// reload checks before it commits anything.
    pub fn check(spec: &AccessLogSpec) -> std::io::Result<()> {
        Target::open(spec.path.as_ref()).map(drop)
    }

    /// Runs `spec` (`None`: off). A new path is opened first: when it cannot be, nothing
    /// changes and the error says why.
    pub fn configure(&self, spec: Option<AccessLogSpec>) -> std::io::Result<()> {
        let mut running = self.spec.lock().unwrap_or_else(|e| e.into_inner());
        if spec.is_some() && self.queue.get().is_none() {
            let (queue, rx) = std::sync::mpsc::sync_channel(QUEUE);
            let (t, c) = (Arc::clone(&self.target), Arc::clone(&self.counts));
            std::thread::Builder::new()
                .name("stator-access".into())
                .spawn(move || writer(&rx, &t, &c))?;
            let _ = self.queue.set(queue);
        }
        if let Some(s) = &spec {
            let same_path = running.as_ref().is_some_and(|r| r.path == s.path);
            if !same_path {
                let t = Target::open(s.path.as_ref())?;
                *self.target.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(t);
            }
        }
        self.settings.store(spec.as_ref().map(|s| {
            Arc::new(Settings {
                format: s.format,
                sample: s.sample.clamp(f64::MIN_POSITIVE, 1.0),
            })
        }));
        *running = spec;
        Ok(())
    }

    /// Opens the file again by its name (after logrotate moved it); lines buffered so far go
    /// to the new file. Nothing to do when off or writing to standard output.
    pub fn reopen(&self) -> std::io::Result<()> {
        let running = self.spec.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(AccessLogSpec {
            path: Some(path), ..
        }) = running.as_ref()
        {
            let t = Target::open(Some(path))?;
            *self.target.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(t);
        }
        Ok(())
    }

    /// Whether it is on.
    pub fn is_on(&self) -> bool {
        self.settings.load().is_some()
    }

    /// The spec it runs.
    pub fn spec(&self) -> Option<AccessLogSpec> {
        self.spec.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Lines written and dropped so far.
    pub fn counts(&self) -> AccessLogCounts {
        AccessLogCounts {
            written: self.counts.written.load(Relaxed),
            dropped: self.counts.dropped.load(Relaxed),
            errors: self.counts.errors.load(Relaxed),
        }
    }

    /// Hands a worker's buffer of `lines` lines to the writer, or drops it (counted) when the
    /// writer is behind. Never waits.
    fn hand_over(&self, buf: Vec<u8>, lines: u64) {
        let sent = self.queue.get().map(|q| q.try_send((buf, lines)));
        if !matches!(sent, Some(Ok(()))) {
            self.counts.dropped.fetch_add(lines, Relaxed);
        }
    }
}

fn writer(rx: &Receiver<(Vec<u8>, u64)>, target: &Mutex<Arc<Target>>, counts: &Counts) {
    while let Ok((buf, lines)) = rx.recv() {
        let t = Arc::clone(&target.lock().unwrap_or_else(|e| e.into_inner()));
        match t.write_all(&buf) {
            Ok(()) => counts.written.fetch_add(lines, Relaxed),
            Err(_) => {
                counts.errors.fetch_add(1, Relaxed);
                counts.dropped.fetch_add(lines, Relaxed)
            }
        };
    }
}

/// What a record is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Http,
    Tcp,
    Udp,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Tcp => "tcp",
            Self::Udp => "udp",
        }
    }
}

/// One line's facts.
#[derive(Debug, Clone)]
pub(crate) struct Record<'a> {
    pub kind: Kind,
    pub listener: &'a str,
    pub worker: usize,
    pub client: SocketAddr,
    pub upstream: Option<SocketAddr>,
    /// HTTP: the status sent to the client.
    pub status: Option<u16>,
    /// How it ended (docs/proxy.md lists them): `ok` (HTTP: the response sent whole; TCP: both
    /// sides closed), UDP's `responses`, `idle`, `unreplied`, `evicted`, `reclaimed`,
    /// `closed`, or what went wrong.
    pub outcome: &'static str,
    /// HTTP: method and target (origin form, as the client sent it).
    pub request: Option<(&'a str, &'a str)>,
    /// Bytes from the client (HTTP: the request body) and to it (HTTP: the response body).
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// UDP: datagrams from the client and to it.
    pub datagrams: Option<(u64, u64)>,
    /// From the first byte (HTTP: the request head; TCP: the accept; UDP: the first datagram)
    /// to the end.
    pub duration: Duration,
}

impl Record<'static> {
    /// A record of `kind` for `client` with nothing else known yet (an `ok` outcome): the
    /// caller sets what it knows; [`WorkerCtx::log`] sets the listener and the worker.
    pub fn new(kind: Kind, client: SocketAddr) -> Self {
        Self {
            kind,
            listener: "",
            worker: 0,
            client,
            upstream: None,
            status: None,
            outcome: "ok",
            request: None,
            bytes_in: 0,
            bytes_out: 0,
            datagrams: None,
            duration: Duration::ZERO,
        }
    }
}

impl WorkerCtx {
    /// Writes `r` to the access log (when it is on) as this worker's, of its listener.
    pub(crate) fn log(&self, r: Record<'_>) {
        if !self.access.on() {
            return;
        }
        let shared = self.shared();
        self.access.write(&Record {
            listener: &shared.spec.name,
            worker: self.id,
            ..r
        });
    }
}

impl Record<'_> {
    /// A failure of the proxy's or an upstream's: always written, whatever the sample.
    pub fn failed(&self) -> bool {
        self.status.is_some_and(|s| s >= 500)
            || matches!(
                self.outcome,
                "no_response"
                    | "cut"
                    | "no_upstream"
                    | "upstream_failed"
                    | "upstream_write_timeout"
                    | "upstream_gone"
                    | "reset"
                    | "error"
            )
    }
}

/// A worker's side of the access log: its buffer, its sampling state.
#[derive(Debug)]
pub(crate) struct LogBuf {
    log: Option<Arc<AccessLog>>,
    buf: RefCell<Vec<u8>>,
    lines: Cell<u64>,
    rng: Cell<u64>,
}

impl LogBuf {
    pub fn new(log: Option<Arc<AccessLog>>, seed: u64) -> Self {
        Self {
            log,
            buf: RefCell::new(Vec::new()),
            lines: Cell::new(0),
            rng: Cell::new(seed | 1),
        }
    }

    /// Whether records are being written (worth gathering their facts).
    pub fn on(&self) -> bool {
        self.log.as_ref().is_some_and(|l| l.is_on())
    }

    /// Formats `r` into the buffer (unless sampled out); hands the buffer over when full.
    pub fn write(&self, r: &Record<'_>) {
        let Some(log) = &self.log else { return };
        let Some(settings) = log.settings.load_full() else {
            return;
        };
        if settings.sample < 1.0 && !r.failed() && self.uniform() >= settings.sample {
            return;
        }
        let ended = SystemTime::now();
        let started = ended.checked_sub(r.duration).unwrap_or(ended);
        let mut buf = self.buf.borrow_mut();
        let mut line = String::with_capacity(256);
        match settings.format {
            AccessLogFormat::Json => json_line(&mut line, r, started),
            AccessLogFormat::Text => text_line(&mut line, r, started),
        }
        buf.extend_from_slice(line.as_bytes());
        self.lines.set(self.lines.get() + 1);
        if buf.len() >= FLUSH_AT {
            drop(buf);
            self.flush();
        }
    }

    /// Hands what is buffered to the writer.
    pub fn flush(&self) {
        let Some(log) = &self.log else { return };
        let lines = self.lines.replace(0);
        if lines == 0 {
            return;
        }
        let buf = std::mem::take(&mut *self.buf.borrow_mut());
        log.hand_over(buf, lines);
    }

    /// A uniform number in [0, 1) (xorshift64*; sampling needs no more).
    fn uniform(&self) -> f64 {
        let mut x = self.rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.set(x);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Drop for LogBuf {
    fn drop(&mut self) {
        self.flush();
    }
}

/// `time` as RFC 3339, UTC, milliseconds: `2026-11-28T08:45:01.123Z`.
pub(crate) fn rfc3339(time: SystemTime) -> String {
    let d = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // civil from days (Howard Hinnant's algorithm)
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The target as written: at most [`MAX_TARGET`] bytes (cut on a character boundary).
fn cut(target: &str) -> (&str, bool) {
    if target.len() <= MAX_TARGET {
        return (target, false);
    }
    let mut end = MAX_TARGET;
    while !target.is_char_boundary(end) {
        end -= 1;
    }
    (&target[..end], true)
}

fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn json_line(out: &mut String, r: &Record<'_>, started: SystemTime) {
    let _ = write!(
        out,
        "{{\"time\":\"{}\",\"kind\":\"{}\",\"listener\":",
        rfc3339(started),
        r.kind.name()
    );
    json_str(out, r.listener);
    let _ = write!(
        out,
        ",\"worker\":{},\"client\":\"{}\",\"upstream\":",
        r.worker, r.client
    );
    match r.upstream {
        Some(u) => {
            let _ = write!(out, "\"{u}\"");
        }
        None => out.push_str("null"),
    }
    if let Some(s) = r.status {
        let _ = write!(out, ",\"status\":{s}");
    }
    let _ = write!(out, ",\"outcome\":\"{}\"", r.outcome);
    if let Some((method, target)) = r.request {
        out.push_str(",\"method\":");
        json_str(out, method);
        let (t, cut) = cut(target);
        out.push_str(",\"target\":");
        if cut {
            json_str(out, &format!("{t}..."));
        } else {
            json_str(out, t);
        }
    }
    let _ = write!(
        out,
        ",\"bytes_in\":{},\"bytes_out\":{}",
        r.bytes_in, r.bytes_out
    );
    if let Some((i, o)) = r.datagrams {
        let _ = write!(out, ",\"datagrams_in\":{i},\"datagrams_out\":{o}");
    }
    let _ = writeln!(
        out,
        ",\"duration_ms\":{:.3}}}",
        r.duration.as_secs_f64() * 1000.0
    );
}

/// A field of the text format: printable ASCII but space, `"` and `\` as is, anything else as
/// `\xHH` (so a line is always one line of printable ASCII, whatever a client sent).
fn text_field(out: &mut String, s: &str) {
    for b in s.bytes() {
        if b.is_ascii_graphic() && b != b'"' && b != b'\\' {
            out.push(b as char);
        } else {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
}

fn text_line(out: &mut String, r: &Record<'_>, started: SystemTime) {
    let _ = write!(out, "{} {} ", rfc3339(started), r.kind.name());
    text_field(out, r.listener);
    let _ = write!(out, " {} {} ", r.worker, r.client);
    match r.upstream {
        Some(u) => {
            let _ = write!(out, "{u}");
        }
        None => out.push('-'),
    }
    match r.status {
        Some(s) => {
            let _ = write!(out, " {s}");
        }
        None => out.push_str(" -"),
    }
    let _ = write!(out, " {} {} {}", r.outcome, r.bytes_in, r.bytes_out);
    match r.datagrams {
        Some((i, o)) => {
            let _ = write!(out, " {i} {o}");
        }
        None => out.push_str(" - -"),
    }
    let _ = write!(out, " {:.3}", r.duration.as_secs_f64() * 1000.0);
    match r.request {
        Some((method, target)) => {
            out.push_str(" \"");
            text_field(out, method);
            out.push(' ');
            let (t, cut) = cut(target);
            text_field(out, t);
            if cut {
                out.push_str("...");
            }
            out.push('"');
        }
        None => out.push_str(" -"),
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http() -> Record<'static> {
        Record {
            kind: Kind::Http,
            listener: "web",
            worker: 1,
            client: "192.0.2.7:40000".parse().unwrap(),
            upstream: Some("10.0.0.2:8080".parse().unwrap()),
            status: Some(200),
            outcome: "ok",
            request: Some(("GET", "/a?b=\"c\"\n")),
            bytes_in: 0,
            bytes_out: 1234,
            datagrams: None,
            duration: Duration::from_micros(1500),
        }
    }

    #[test]
    fn rfc3339_is_utc_with_milliseconds() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_855_501_123);
        assert_eq!(rfc3339(t), "2026-11-28T08:45:01.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn a_json_line_is_one_line_of_escaped_json() {
        let mut s = String::new();
        json_line(&mut s, &http(), UNIX_EPOCH);
        assert_eq!(s.matches('\n').count(), 1);
        assert!(s.ends_with("}\n"));
        assert!(s.contains(r#""target":"/a?b=\"c\"\u000a""#), "{s}");
        assert!(s.contains(r#""client":"192.0.2.7:40000","upstream":"10.0.0.2:8080""#));
        assert!(s.contains(r#""status":200,"outcome":"ok","method":"GET""#));
        assert!(s.contains(r#""bytes_in":0,"bytes_out":1234,"duration_ms":1.500}"#));
    }

    #[test]
    fn a_text_line_keeps_to_printable_ascii() {
        let mut s = String::new();
        let mut r = http();
        r.request = Some(("GET", "/ä \"x\""));
        text_line(&mut s, &r, UNIX_EPOCH);
        assert_eq!(
            s,
            "1970-01-01T00:00:00.000Z http web 1 192.0.2.7:40000 10.0.0.2:8080 200 ok 0 1234 - - \
             1.500 \"GET /\\xc3\\xa4\\x20\\x22x\\x22\"\n"
        );
        let mut s = String::new();
        let udp = Record {
            kind: Kind::Udp,
            upstream: None,
            status: None,
            outcome: "no_upstream",
            request: None,
            datagrams: Some((3, 0)),
            ..http()
        };
        text_line(&mut s, &udp, UNIX_EPOCH);
        assert!(s.ends_with("- - no_upstream 0 1234 3 0 1.500 -\n"), "{s}");
    }

    #[test]
    fn long_targets_are_cut_on_a_character_boundary() {
        let long = format!("/{}", "é".repeat(MAX_TARGET));
        let (t, was) = cut(&long);
        assert!(was && t.len() <= MAX_TARGET && t.len() >= MAX_TARGET - 1);
        let mut s = String::new();
        let mut r = http();
        r.request = Some(("GET", &long));
        json_line(&mut s, &r, UNIX_EPOCH);
        assert!(s.contains("...\""));
    }

    #[test]
    fn failures_are_never_sampled_out() {
        let mut r = http();
        assert!(!r.failed());
        r.status = Some(502);
        assert!(r.failed());
        r.status = None;
        r.outcome = "upstream_failed";
        assert!(r.failed());
        // what a client's flood causes is sampled
        for o in [
            "idle",
            "unreplied",
            "evicted",
            "reclaimed",
            "client_write_timeout",
        ] {
            r.outcome = o;
            assert!(!r.failed(), "{o}");
        }
    }

    #[test]
    fn sampling_writes_about_the_share_asked_and_every_failure() {
        let dir = stator_testkit::scratch::TempDir::new("stator-access-unit");
        let path = dir.join("access.log");
        let log = AccessLog::new();
        log.configure(Some(AccessLogSpec {
            path: Some(path.clone()),
            format: AccessLogFormat::Json,
            sample: 0.25,
        }))
        .unwrap();
        let buf = LogBuf::new(Some(Arc::clone(&log)), 42);
        let mut failed = http();
        failed.status = Some(503);
        for _ in 0..4000 {
            buf.write(&http());
        }
        for _ in 0..100 {
            buf.write(&failed);
        }
        drop(buf);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut text = String::new();
        while std::time::Instant::now() < deadline {
            text = std::fs::read_to_string(&path).unwrap_or_default();
            // the buffer went to the writer in several hand-overs, the failures in the last:
            // wait for that one (or for the deadline), not for the first to be on disk
            let c = log.counts();
            let failures = text.matches("\"status\":503").count();
            if failures >= 100 && text.lines().count() as u64 == c.written {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let ok = text
            .lines()
            .filter(|l| l.contains("\"status\":200"))
            .count();
        let bad = text
            .lines()
            .filter(|l| l.contains("\"status\":503"))
            .count();
        assert_eq!(bad, 100, "every failure written");
        assert!((800..1200).contains(&ok), "about a quarter of 4,000: {ok}");
        assert_eq!(log.counts().dropped, 0);
        // a reopen after the file was moved writes to a new file of the same name
        let moved = dir.join("access.log.1");
        std::fs::rename(&path, &moved).unwrap();
        log.reopen().unwrap();
        let buf = LogBuf::new(Some(Arc::clone(&log)), 7);
        buf.write(&failed);
        drop(buf);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline
            && std::fs::read_to_string(&path).map_or(0, |t| t.lines().count()) < 1
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
        assert_eq!(
            std::fs::read_to_string(&moved).unwrap().lines().count(),
            ok + bad
        );
    }
}
