//! Upgrades: the node's process replaced without closing a connection (docs/operations.md,
//! "Upgrades") — nginx's binary upgrade, HAProxy's socket transfer, pingora's graceful
//! upgrade, for a node that also owns a data plane.
//!
//! Over `upgrade.socket` (`SOCK_SEQPACKET`, mode 0600, a peer of another user refused by its
//! credentials):
//! 1. the successor (`stator run --takeover`, its configuration already valid and its host
//!    checked) sends [`Message::Hello`];
//! 2. the node pauses its controller ([`stator_control::view::Phase::Upgrading`]: nothing
//!    committed, announced or repaired; the data plane forwards what was last committed; the
//!    proxy serves on) and sends [`Message::Offer`]: a manifest of its sockets with the
//!    descriptors attached (`SCM_RIGHTS`, at most [`MAX_FDS`] a message, [`Message::More`]
//!    for the rest) — every proxy listener's, one per worker, the admin API's Unix socket
//!    and TCP endpoint, and this upgrade socket;
//! 3. the successor starts on them (data plane swapped in over the pinned maps, listeners
//!    accepting from the same sockets: no connection waiting in a queue is lost, no port is
//!    ever closed) and sends [`Message::Serving`] — or [`Message::Failed`], or nothing before
//!    `upgrade.start_timeout`;
//! 4. on `Serving` the node hands over (no withdrawal, no detach), stops accepting, serves
//!    its connections for up to `upgrade.drain` and exits; otherwise it attaches its own
//!    program again, commits, and runs on.
//!
//! A client may send [`Message::Spawn`] instead (`stator upgrade`): the node starts its
//! successor itself — the binary at the path it was started from, which a package upgrade
//! has replaced, with its own configuration file — so that under systemd the successor is
//! in the service's cgroup and can become its main process; it answers with the outcome.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use socket2::{Domain, SockAddr, Socket, Type};
use stator_control::listeners::SteeringKeys;
use stator_proxy::InheritedSocket;
use stator_sys::fdpass::{MAX_FDS, recv_with_fds, send_with_fds};

/// The longest a message may be (a manifest of a few thousand sockets).
const MAX_MESSAGE: usize = 1 << 20;

/// How long either side waits for a message other than the successor's outcome.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the accepting thread looks whether it should stop.
const ACCEPT_POLL: Duration = Duration::from_millis(200);

/// One socket of an [`Message::Offer`], in the order of the descriptors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A proxy listener's worker socket.
    Listener {
        /// The listener's name.
        listener: String,
        /// Where it is bound.
        address: SocketAddr,
        /// UDP (else TCP, listening).
        udp: bool,
    },
    /// The admin API's Unix socket.
    ApiUnix {
        /// Its path.
        path: PathBuf,
    },
    /// The admin API's TCP endpoint.
    ApiTcp {
        /// Its address.
        address: SocketAddr,
    },
    /// The upgrade socket itself (the successor serves the next upgrade on it).
    Upgrade {
        /// Its path.
        path: PathBuf,
    },
}

/// A message of the protocol (one JSON document per packet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Message {
    /// Successor → node: take my sockets? (`commit`: the successor's build.)
    Hello {
        /// The successor's process id.
        pid: u32,
        /// The commit it was built from.
        commit: String,
    },
    /// Client → node: start your successor and tell me how it went.
    Spawn,
    /// Node → successor: the sockets (descriptors in this message and `more` [`Message::More`]).
    Offer {
        /// The node's process id.
        pid: u32,
        /// The commit it was built from.
        commit: String,
        /// The sockets, in descriptor order.
        sockets: Vec<Entry>,
        /// How many [`Message::More`] follow.
        more: usize,
        /// The steering programs' keys by listener, and receive steering's: the successor's
        /// programs send every client to the same worker index.
        #[serde(default)]
        steering_keys: Vec<(String, Vec<u8>)>,
        /// Receive steering's key.
        #[serde(default)]
        receive_key: Option<Vec<u8>>,
    },
    /// Node → successor: more descriptors of the offer.
    More,
    /// Successor → node: serving on the sockets; node → `Spawn` client: the successor serves.
    Serving {
        /// The successor's process id.
        pid: u32,
    },
    /// Successor → node, or node → `Spawn` client: the successor could not start.
    Failed {
        /// Why.
        reason: String,
    },
    /// Node → peer: not now (another upgrade runs, the node is stopping).
    Refused {
        /// Why.
        reason: String,
    },
}

/// One end of an upgrade connection.
#[derive(Debug)]
pub struct Link(Socket);

impl Link {
    /// Connects to the node serving `path`.
    ///
    /// # Errors
    /// No node there (`NotFound`, `ConnectionRefused`), or not allowed (`PermissionDenied`).
    pub fn connect(path: &Path) -> io::Result<Self> {
        let s = Socket::new(Domain::UNIX, Type::SEQPACKET.cloexec(), None)?;
        s.connect(&SockAddr::unix(path)?)?;
        Ok(Self(s))
    }

    /// Sends `message` with `fds` attached.
    ///
    /// # Errors
    /// The kernel's (the peer left: `BrokenPipe`).
    pub fn send(&self, message: &Message, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let bytes = serde_json::to_vec(message).map_err(io::Error::other)?;
        self.0.set_write_timeout(Some(STEP_TIMEOUT))?;
        send_with_fds(&self.0, &bytes, fds)
    }

    /// The next message and the descriptors attached to it, waiting up to `timeout`.
    ///
    /// # Errors
    /// `TimedOut`/`WouldBlock` past `timeout`; `UnexpectedEof` when the peer closed;
    /// `InvalidData` for a message that is not one of ours.
    pub fn recv(&self, timeout: Duration) -> io::Result<(Message, Vec<OwnedFd>)> {
        self.0
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let mut buf = vec![0u8; MAX_MESSAGE];
        let (n, fds) = recv_with_fds(&self.0, &mut buf, MAX_FDS)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the other process closed the connection",
            ));
        }
        let message = serde_json::from_slice(&buf[..n])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok((message, fds))
    }

    /// The peer's credentials.
    ///
    /// # Errors
    /// The kernel's.
    pub fn peer(&self) -> io::Result<stator_sys::creds::PeerCreds> {
        stator_sys::creds::peer_creds(&self.0)
    }
}

/// Sends `offer`'s sockets: the manifest with the first [`MAX_FDS`] descriptors, then
/// [`Message::More`] with the next, until all are sent.
///
/// # Errors
/// The kernel's.
pub fn send_offer(
    link: &Link,
    pid: u32,
    commit: &str,
    sockets: &[(Entry, BorrowedFd<'_>)],
    keys: SteeringKeys,
) -> io::Result<()> {
    let chunks: Vec<Vec<BorrowedFd<'_>>> = sockets
        .chunks(MAX_FDS)
        .map(|c| c.iter().map(|(_, fd)| *fd).collect())
        .collect();
    let offer = Message::Offer {
        pid,
        commit: commit.to_owned(),
        sockets: sockets.iter().map(|(e, _)| e.clone()).collect(),
        more: chunks.len().saturating_sub(1),
        steering_keys: keys.listeners,
        receive_key: keys.receive,
    };
    link.send(&offer, chunks.first().map_or(&[], Vec::as_slice))?;
    for chunk in chunks.iter().skip(1) {
        link.send(&Message::More, chunk)?;
    }
    Ok(())
}

/// What a successor takes from the node it replaces.
#[derive(Debug, Default)]
pub struct Inherited {
    /// The proxy listeners' sockets.
    pub listeners: Vec<InheritedSocket>,
    /// The admin API's Unix socket and its path.
    pub api_unix: Option<(PathBuf, OwnedFd)>,
    /// The admin API's TCP endpoint and its address.
    pub api_tcp: Option<(SocketAddr, OwnedFd)>,
    /// The upgrade socket and its path.
    pub upgrade: Option<(PathBuf, OwnedFd)>,
    /// The steering programs' keys.
    pub steering_keys: SteeringKeys,
}

/// The node a successor replaces, until the successor tells it how its start went.
#[derive(Debug)]
pub struct Predecessor {
    link: Link,
    /// Its process id.
    pub pid: u32,
    /// The commit it was built from.
    pub commit: String,
}

impl Predecessor {
    /// Tells it this process serves: it hands over and drains.
    ///
    /// # Errors
    /// It is gone (then it has already resumed or died; this process serves either way).
    pub fn serving(self) -> io::Result<()> {
        self.link.send(
            &Message::Serving {
                pid: std::process::id(),
            },
            &[],
        )
    }

    /// Tells it this process could not start: it runs on.
    pub fn failed(self, reason: &str) {
        let _ = self.link.send(
            &Message::Failed {
                reason: reason.to_owned(),
            },
            &[],
        );
    }
}

/// The successor's side of steps 1 and 2: connects to the node at `path`, says hello and
/// takes its sockets. The node is paused from here until [`Predecessor::serving`] or
/// [`Predecessor::failed`] (or `upgrade.start_timeout`).
///
/// # Errors
/// A sentence: no node at `path`, refused, or a broken offer.
pub fn take_over(path: &Path, commit: &str) -> Result<(Inherited, Predecessor), String> {
    let at = path.display();
    let link = Link::connect(path)
        .map_err(|e| format!("no node to take over at {at} (upgrade.socket): {e}"))?;
    link.send(
        &Message::Hello {
            pid: std::process::id(),
            commit: commit.to_owned(),
        },
        &[],
    )
    .map_err(|e| format!("{at}: {e}"))?;
    let (first, mut fds) = link
        .recv(STEP_TIMEOUT)
        .map_err(|e| format!("{at}: no offer: {e}"))?;
    let (pid, node_commit, sockets, more, keys) = match first {
        Message::Offer {
            pid,
            commit,
            sockets,
            more,
            steering_keys,
            receive_key,
        } => (
            pid,
            commit,
            sockets,
            more,
            SteeringKeys {
                listeners: steering_keys,
                receive: receive_key,
            },
        ),
        Message::Refused { reason } => return Err(format!("the node at {at} refused: {reason}")),
        other => return Err(format!("{at}: expected an offer, got {other:?}")),
    };
    for _ in 0..more {
        match link.recv(STEP_TIMEOUT) {
            Ok((Message::More, more_fds)) => fds.extend(more_fds),
            Ok((other, _)) => {
                return Err(format!("{at}: expected more descriptors, got {other:?}"));
            }
            Err(e) => return Err(format!("{at}: the offer broke off: {e}")),
        }
    }
    if fds.len() != sockets.len() {
        return Err(format!(
            "{at}: the offer names {} sockets but carries {} descriptors",
            sockets.len(),
            fds.len()
        ));
    }
    let mut inherited = Inherited {
        steering_keys: keys,
        ..Inherited::default()
    };
    for (entry, fd) in sockets.into_iter().zip(fds) {
        match entry {
            Entry::Listener {
                listener,
                address,
                udp,
            } => inherited.listeners.push(InheritedSocket {
                listener,
                address,
                udp,
                fd,
            }),
            Entry::ApiUnix { path } => inherited.api_unix = Some((path, fd)),
            Entry::ApiTcp { address } => inherited.api_tcp = Some((address, fd)),
            Entry::Upgrade { path } => inherited.upgrade = Some((path, fd)),
        }
    }
    Ok((
        inherited,
        Predecessor {
            link,
            pid,
            commit: node_commit,
        },
    ))
}

/// `stator upgrade`: asks the node at `path` to start its successor and waits (up to
/// `timeout`) for the outcome: the successor's process id, or why it failed.
///
/// # Errors
/// A sentence: no node, refused, failed, or no answer in time.
pub fn request_spawn(path: &Path, timeout: Duration) -> Result<u32, String> {
    let at = path.display();
    let link = Link::connect(path).map_err(|e| format!("no node at {at}: {e}"))?;
    let refused = |e: io::Error| {
        format!(
            "the node at {at} closed the connection ({e}): only root and the node's own user \
             may upgrade it"
        )
    };
    link.send(&Message::Spawn, &[]).map_err(refused)?;
    match link.recv(timeout) {
        Ok((Message::Serving { pid }, _)) => Ok(pid),
        Ok((Message::Failed { reason }, _)) => Err(format!(
            "the successor did not serve: {reason}; the node runs on as before"
        )),
        Ok((Message::Refused { reason }, _)) => Err(format!("the node refused: {reason}")),
        Ok((other, _)) => Err(format!("unexpected answer {other:?}")),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
            ) =>
        {
            Err(refused(e))
        }
        Err(e) => Err(format!("no answer from the node at {at}: {e}")),
    }
}

/// The node's upgrade socket: bound (or taken over) at start, accepting on a thread of its
/// own, its file removed when the node stops — unless it was handed over.
#[derive(Debug)]
pub struct UpgradeSocket {
    socket: Arc<Socket>,
    path: PathBuf,
    ino: u64,
    keep: bool,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl UpgradeSocket {
    /// Binds at `path` (mode 0600, created under a temporary name and renamed into place):
    /// a live socket there is another node's (refused), a dead one is replaced. The
    /// directory must exist or is created (0755).
    ///
    /// # Errors
    /// A sentence naming the path.
    pub fn bind(path: &Path) -> Result<Self, String> {
        let at = path.display();
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .ok_or_else(|| format!("{at} has no directory"))?;
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(format!("{at} exists and is not a socket"));
            }
            if Link::connect(path).is_ok() {
                return Err(format!(
                    "{at} is in use: another `stator run` serves upgrades there (to replace \
                     it, start this one with --takeover)"
                ));
            }
            std::fs::remove_file(path).map_err(|e| format!("cannot remove stale {at}: {e}"))?;
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        // pid, counter and time: a process with our pid in another pid namespace, sharing the
        // directory, or a second node of this process (tests), never picks the same name
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(
            ".{name}.{}.{n}.{nanos:08x}.tmp",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&tmp);
        let bound = (|| -> io::Result<Socket> {
            let s = Socket::new(Domain::UNIX, Type::SEQPACKET.cloexec(), None)?;
            s.bind(&SockAddr::unix(&tmp)?)?;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
            s.listen(8)?;
            std::fs::rename(&tmp, path)?;
            Ok(s)
        })();
        let socket = bound.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot bind the upgrade socket {at}: {e}")
        })?;
        Self::new(socket, path)
    }

    /// Takes the upgrade socket the replaced node served on at `path`.
    ///
    /// # Errors
    /// A sentence: not a socket at `path`.
    pub fn adopt(fd: OwnedFd, path: &Path) -> Result<Self, String> {
        let socket = Socket::from(fd);
        let at = socket
            .local_addr()
            .map_err(|e| format!("the handed-over upgrade socket: {e}"))?;
        // bound under a temporary name and renamed (see `bind`): the name it reports is that
        if at.as_pathname().is_none() {
            return Err("the handed-over upgrade socket is not bound to a path".into());
        }
        let mut adopted = Self::new(socket, path)?;
        // the replaced node's file until this one serves ([`UpgradeSocket::own`])
        adopted.keep = true;
        Ok(adopted)
    }

    fn new(socket: Socket, path: &Path) -> Result<Self, String> {
        // accept() waits at most this long (SO_RCVTIMEO applies to accept): the thread looks
        // whether to stop between waits
        socket
            .set_read_timeout(Some(ACCEPT_POLL))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let ino = std::fs::symlink_metadata(path)
            .map_err(|e| format!("cannot inspect {}: {e}", path.display()))?
            .ino();
        Ok(Self {
            socket: Arc::new(socket),
            path: path.to_owned(),
            ino,
            keep: false,
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The listening socket (to hand over).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// Accepts connections on a thread, sending each whose peer is this process's user (or
    /// root) to `to`; others are refused and logged.
    ///
    /// # Errors
    /// The thread cannot start.
    pub fn start(&mut self, to: tokio::sync::mpsc::Sender<Link>) -> io::Result<()> {
        let socket = Arc::clone(&self.socket);
        let stop = Arc::clone(&self.stop);
        let own = stator_sys::users::effective_uid();
        let thread = std::thread::Builder::new()
            .name("stator-upgrade".into())
            .spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let link = match socket.accept() {
                        Ok((s, _)) => Link(s),
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock
                                    | io::ErrorKind::TimedOut
                                    | io::ErrorKind::Interrupted
                            ) =>
                        {
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "upgrade socket: accept failed");
                            std::thread::sleep(ACCEPT_POLL);
                            continue;
                        }
                    };
                    match link.peer() {
                        Ok(c) if c.uid == own || c.uid == 0 => {}
                        Ok(c) => {
                            tracing::warn!(
                                uid = c.uid,
                                pid = c.pid,
                                "upgrade socket: refused a peer of another user"
                            );
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "upgrade socket: no peer credentials");
                            continue;
                        }
                    }
                    if to.try_send(link).is_err() {
                        tracing::warn!("upgrade socket: busy, a connection closed");
                    }
                }
            })?;
        self.thread = Some(thread);
        Ok(())
    }

    /// Stops accepting (within [`ACCEPT_POLL`]); the socket stays open until dropped.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Leaves the file in place when dropped: the socket is the successor's now.
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// Removes the file when dropped again: this node serves on it now.
    pub fn own(&mut self) {
        self.keep = false;
    }
}

impl Drop for UpgradeSocket {
    fn drop(&mut self) {
        self.stop();
        if !self.keep && std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
