//! A blocking client for BIRD's control socket (the protocol `birdc` speaks), with a timeout on
//! every read and write and a reconnect when BIRD has restarted.
//!
//! Blocking, not async, on purpose: the socket is local, BIRD answers the commands Stator
//! sends in well under a millisecond and serves one command per connection at a time anyway;
//! the announcer that uses this client runs on its own thread ([`crate::AnnouncerThread`]), so
//! an async controller is never blocked by it, and no runtime is needed to test or script it.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::BirdError;
use crate::reply::{Reply, ReplyAssembler, ReplyCode};
use crate::show::{Protocol, parse_protocols};

/// The longest line accepted from BIRD (BIRD's own limit is 512 bytes).
const MAX_LINE: u64 = 64 * 1024;
/// The most lines accepted in one reply (Stator's commands get a few hundred at most).
const MAX_REPLY_LINES: usize = 1_000_000;
/// The pseudo-command in errors while reading the greeting.
const GREETING: &str = "<greeting>";

/// What `configure` reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconfigure {
    /// `0003 Reconfigured`: the new configuration is active.
    Done,
    /// `0004 Reconfiguration in progress`: accepted; protocols are still being restarted or
    /// stopped (removed protocols flush their routes).
    InProgress,
    /// `0005` (or `0017`): another reconfiguration is running; this one is queued (or
    /// replaces the queued one) and runs next.
    Queued,
}

/// What `enable` / `disable` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toggle {
    /// The protocol changed state (`0011 enabled`, `0009 disabled`).
    Changed,
    /// It already was in that state (`0010`, `0008`).
    Unchanged,
}

/// An open control connection.
#[derive(Debug)]
struct Session {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    version: String,
}

/// A client for one BIRD control socket. It connects on first use, and again after BIRD
/// closed the connection (a restart): a command that finds its connection closed is sent
/// once more on a new one — every command this client sends is idempotent.
#[derive(Debug)]
pub struct BirdClient {
    path: PathBuf,
    timeout: Duration,
    session: Option<Session>,
    connections: u64,
}

impl BirdClient {
    /// A client for the socket at `path`; every reply (and the greeting) must arrive within
    /// `timeout`. Nothing is connected yet.
    pub fn new(path: impl Into<PathBuf>, timeout: Duration) -> Self {
        Self {
            path: path.into(),
            timeout,
            session: None,
            connections: 0,
        }
    }

    /// The control socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The time allowed for a reply.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the time allowed for a reply (from the next command on).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout.max(Duration::from_millis(1));
    }

    /// True while a connection is open (it may still turn out to be closed by BIRD).
    pub fn is_connected(&self) -> bool {
        self.session.is_some()
    }

    /// How many connections were opened so far. When it changes, BIRD may have restarted
    /// (and re-read its configuration) in between.
    pub fn connections(&self) -> u64 {
        self.connections
    }

    /// BIRD's version from the greeting of the current connection (`2.0.12`).
    pub fn version(&self) -> Option<&str> {
        self.session.as_ref().map(|s| s.version.as_str())
    }

    /// Connects unless connected, reads the greeting, and returns the connection's number.
    pub fn connect(&mut self) -> Result<u64, BirdError> {
        if self.session.is_none() {
            self.session = Some(self.open()?);
            self.connections += 1;
            tracing::debug!(socket = %self.path.display(), "connected to BIRD");
        }
        Ok(self.connections)
    }

    /// Closes the connection (the next command opens a new one).
    pub fn disconnect(&mut self) {
        self.session = None;
    }

    fn open(&self) -> Result<Session, BirdError> {
        let stream = UnixStream::connect(&self.path).map_err(|source| BirdError::Connect {
            path: self.path.clone(),
            source,
        })?;
        let writer = stream.try_clone().map_err(|source| BirdError::Connect {
            path: self.path.clone(),
            source,
        })?;
        let mut session = Session {
            reader: BufReader::new(stream),
            writer,
            version: String::new(),
        };
        let greeting = self.read_reply(&mut session, GREETING)?;
        if greeting.code() != ReplyCode::WELCOME {
            return Err(BirdError::Command {
                command: GREETING.into(),
                code: greeting.code().0,
                message: greeting.last().text.clone(),
            });
        }
        // "BIRD 2.0.12 ready."
        let text = &greeting.last().text;
        session.version = text
            .strip_prefix("BIRD ")
            .and_then(|t| t.split_whitespace().next())
            .unwrap_or(text)
            .to_owned();
        Ok(session)
    }

    /// Sends one command and returns BIRD's reply. A reply with an error code (8xxx, 9xxx)
    /// is returned as [`BirdError::Command`]; a lost connection drops it.
    pub fn command(&mut self, command: &str) -> Result<Reply, BirdError> {
        if command.is_empty() || command.contains(['\n', '\r']) {
            return Err(BirdError::InvalidCommand {
                command: command.escape_debug().to_string(),
                reason: "a command is one non-empty line",
            });
        }
        let reused = self.session.is_some();
        self.connect()?;
        let reply = match self.exchange(command) {
            // A reused connection that BIRD closed meanwhile (it restarted): once more on a
            // fresh one. A timeout is not retried: BIRD is there but does not answer.
            Err(BirdError::Closed { .. } | BirdError::Io { .. }) if reused => {
                self.session = None;
                self.connect()?;
                self.exchange(command)
            }
            other => other,
        };
        let reply = reply.inspect_err(|e| {
            if e.is_connection_lost() {
                self.session = None;
            }
        })?;
        match reply.error() {
            Some(line) => Err(BirdError::Command {
                command: command.to_owned(),
                code: line.code.0,
                message: line.text.clone(),
            }),
            None => Ok(reply),
        }
    }

    fn exchange(&mut self, command: &str) -> Result<Reply, BirdError> {
        let Some(mut session) = self.session.take() else {
            return Err(BirdError::Closed {
                path: self.path.clone(),
                command: command.to_owned(),
            });
        };
        let io = |source: std::io::Error| self.io_error(command, source);
        session
            .writer
            .set_write_timeout(Some(self.timeout))
            .map_err(io)?;
        session
            .writer
            .write_all(format!("{command}\n").as_bytes())
            .map_err(io)?;
        let reply = self.read_reply(&mut session, command)?;
        self.session = Some(session);
        Ok(reply)
    }

    /// Reads lines until a final one; the whole reply must arrive within the timeout.
    fn read_reply(&self, session: &mut Session, command: &str) -> Result<Reply, BirdError> {
        let deadline = Instant::now() + self.timeout;
        let mut assembler = ReplyAssembler::new();
        let mut buf = Vec::new();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(self.timeout_error(command));
            }
            session
                .reader
                .get_ref()
                .set_read_timeout(Some(remaining))
                .map_err(|e| self.io_error(command, e))?;
            buf.clear();
            let n = (&mut session.reader)
                .take(MAX_LINE)
                .read_until(b'\n', &mut buf)
                .map_err(|e| self.io_error(command, e))?;
            if n == 0 {
                return Err(BirdError::Closed {
                    path: self.path.clone(),
                    command: command.to_owned(),
                });
            }
            let Some(line) = buf.strip_suffix(b"\n") else {
                return Err(self.protocol_error(&buf, "a line longer than 64 KiB"));
            };
            let line = String::from_utf8_lossy(line);
            match assembler.push(&line) {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) if assembler.len() > MAX_REPLY_LINES => {
                    return Err(self.protocol_error(&buf, "a reply of more than 1000000 lines"));
                }
                Ok(None) => {}
                Err(reason) => return Err(self.protocol_error(&buf, reason)),
            }
        }
    }

    fn io_error(&self, command: &str, source: std::io::Error) -> BirdError {
        match source.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => self.timeout_error(command),
            _ => BirdError::Io {
                path: self.path.clone(),
                command: command.to_owned(),
                source,
            },
        }
    }

    fn timeout_error(&self, command: &str) -> BirdError {
        BirdError::Timeout {
            path: self.path.clone(),
            command: command.to_owned(),
            timeout: self.timeout,
        }
    }

    fn protocol_error(&self, line: &[u8], reason: &'static str) -> BirdError {
        let shown = &line[..line.len().min(200)];
        BirdError::Protocol {
            path: self.path.clone(),
            line: String::from_utf8_lossy(shown).into_owned(),
            reason,
        }
    }

    /// `configure`: BIRD re-reads its configuration file (which includes Stator's) and
    /// applies the difference. A configuration error is [`BirdError::Command`] with code
    /// 8002 and BIRD's "file, line N: what" message; BIRD keeps running the old one.
    pub fn configure(&mut self) -> Result<Reconfigure, BirdError> {
        let reply = self.command("configure")?;
        match reply.code() {
            ReplyCode::RECONFIGURED => Ok(Reconfigure::Done),
            ReplyCode::RECONFIG_IN_PROGRESS => Ok(Reconfigure::InProgress),
            ReplyCode::RECONFIG_QUEUED | ReplyCode::RECONFIG_UNQUEUED => Ok(Reconfigure::Queued),
            // 0006 shutting down, 0016 access restricted, anything unexpected.
            code => Err(unexpected("configure", code, &reply)),
        }
    }

    /// `configure check`: BIRD parses its configuration without applying it.
    pub fn configure_check(&mut self) -> Result<(), BirdError> {
        let reply = self.command("configure check")?;
        match reply.code() {
            ReplyCode::CONFIG_OK => Ok(()),
            code => Err(unexpected("configure check", code, &reply)),
        }
    }

    /// `enable PROTOCOL "message"`. The message shows in `show protocols all`.
    pub fn enable(&mut self, protocol: &str, message: &str) -> Result<Toggle, BirdError> {
        self.toggle(
            "enable",
            protocol,
            message,
            ReplyCode::ENABLED,
            ReplyCode::ALREADY_ENABLED,
        )
    }

    /// `disable PROTOCOL "message"`. The message shows in `show protocols all`.
    pub fn disable(&mut self, protocol: &str, message: &str) -> Result<Toggle, BirdError> {
        self.toggle(
            "disable",
            protocol,
            message,
            ReplyCode::DISABLED,
            ReplyCode::ALREADY_DISABLED,
        )
    }

    fn toggle(
        &mut self,
        verb: &str,
        protocol: &str,
        message: &str,
        changed: ReplyCode,
        unchanged: ReplyCode,
    ) -> Result<Toggle, BirdError> {
        if !is_bird_symbol(protocol) {
            return Err(BirdError::InvalidCommand {
                command: format!("{verb} {}", protocol.escape_debug()),
                reason: "a protocol name is a BIRD symbol",
            });
        }
        let message: String = message
            .chars()
            .map(|c| {
                if c == '"' || c == '\\' || c.is_control() {
                    '\''
                } else {
                    c
                }
            })
            .collect();
        let command = format!("{verb} {protocol} \"{message}\"");
        let reply = self.command(&command)?;
        let codes: Vec<ReplyCode> = reply.lines.iter().map(|l| l.code).collect();
        if codes.contains(&changed) {
            Ok(Toggle::Changed)
        } else if codes.contains(&unchanged) {
            Ok(Toggle::Unchanged)
        } else {
            Err(unexpected(&command, reply.code(), &reply))
        }
    }

    /// `show protocols` (or `show protocols all`, with detail lines), parsed.
    pub fn show_protocols(&mut self, all: bool) -> Result<Vec<Protocol>, BirdError> {
        let command = if all {
            "show protocols all"
        } else {
            "show protocols"
        };
        match self.command(command) {
            Ok(reply) => Ok(parse_protocols(&reply)),
            Err(BirdError::Command { code: 8003, .. }) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

fn unexpected(command: &str, code: ReplyCode, reply: &Reply) -> BirdError {
    BirdError::Command {
        command: command.to_owned(),
        code: code.0,
        message: reply.last().text.clone(),
    }
}

/// A BIRD symbol: a letter or `_`, then letters, digits or `_`.
pub(crate) fn is_bird_symbol(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}
