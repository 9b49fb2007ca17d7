//! The admin API's Unix socket: created so that no other user can take its place or reach
//! it, removed when the node stops.
//!
//! [`bind`]:
//! 1. the directory (`/run/stator` by default; systemd's `RuntimeDirectory=stator` makes it)
//!    is created if missing (mode 0755) and refused if another user could replace files in it
//!    (owned by someone else than root or the node's user, or writable by group or others
//!    without the sticky bit);
//! 2. a socket already at the path is another node's if it answers a `connect` (refused:
//!    two nodes cannot share one socket), else a stale one left by a node that died (removed);
//!    anything else at the path is refused;
//! 3. the socket is bound under a temporary name in the same directory, given mode 0660 and
//!    `api.socket_group`, then renamed into place — so it never exists at its path with other
//!    permissions.
//!
//! [`ApiSocket`]'s drop removes the path if it is still the socket this node made.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use stator_config::SocketGroup;
use tokio::net::UnixListener;

use super::access::UnixPolicy;
use stator_control::ControlError;

/// A bound socket.
#[derive(Debug)]
pub struct ApiSocket {
    /// The listener.
    pub listener: UnixListener,
    /// Who may use it.
    pub policy: UnixPolicy,
    /// Its file, removed when this is dropped.
    pub file: SocketFile,
}

/// The socket's file: removed on drop, if it is still the one this node bound.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    ino: u64,
    keep: bool,
}

impl SocketFile {
    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl SocketFile {
    /// The socket file now at `path` (by its inode), removed on drop unless `keep`.
    fn at(path: &Path, keep: bool) -> Result<Self, ControlError> {
        let ino = std::fs::symlink_metadata(path)
            .map_err(|e| {
                host(
                    "api.socket",
                    format!("cannot inspect {}: {e}", path.display()),
                )
            })?
            .ino();
        Ok(Self {
            path: path.to_owned(),
            ino,
            keep,
        })
    }

    /// Leaves the file in place when this is dropped: the socket is another process's now
    /// (an upgrade handed it over).
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// Removes the file on drop again: this node serves on it now (a successor that started).
    pub fn own(&mut self) {
        self.keep = false;
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if !self.keep && std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn host(field: &str, reason: String) -> ControlError {
    ControlError::Host {
        field: field.to_owned(),
        reason,
    }
}

/// Binds the API's socket at `path` for `group` (see the module's steps). Must run inside a
/// tokio runtime.
///
/// # Errors
/// `api.socket`: an unsafe directory, another node's socket, something else at the path, a
/// bind that fails.
pub fn bind(path: &Path, group: &SocketGroup) -> Result<ApiSocket, ControlError> {
    let own_uid = stator_sys::users::effective_uid();
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| host("api.socket", format!("{} has no directory", path.display())))?;
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| {
                host(
                    "api.socket",
                    format!("cannot create {}: {e}", dir.display()),
                )
            })?;
    }
    let meta = std::fs::metadata(dir).map_err(|e| {
        host(
            "api.socket",
            format!("cannot inspect {}: {e}", dir.display()),
        )
    })?;
    let mode = meta.permissions().mode();
    if meta.uid() != 0 && meta.uid() != own_uid {
        return Err(host(
            "api.socket",
            format!(
                "{} belongs to user {}: another user could replace the socket; use a \
                 directory of root's such as /run/stator",
                dir.display(),
                meta.uid()
            ),
        ));
    }
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(host(
            "api.socket",
            format!(
                "{} is writable by other users (mode {:o}): they could replace the socket; \
                 use a directory only root can write, such as /run/stator",
                dir.display(),
                mode & 0o7777
            ),
        ));
    }
    clear_stale(path)?;
    let (gid, policy) = policy(path, group, own_uid)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // pid, counter and time: another process with our pid (in another pid namespace, sharing
    // the directory) does not pick the same name
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(
        ".{name}.{}.{n}.{nanos:08x}.tmp",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let failed = |what: &str, e: io::Error| {
        let _ = std::fs::remove_file(&tmp);
        host("api.socket", format!("{what} {}: {e}", path.display()))
    };
    let listener = UnixListener::bind(&tmp).map_err(|e| failed("cannot bind", e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o660))
        .map_err(|e| failed("cannot set the mode of", e))?;
    let mut policy = policy;
    if let Some(gid) = gid {
        match std::os::unix::fs::lchown(&tmp, None, Some(gid)) {
            Ok(()) => {}
            // A node not run as root (a proxy-only node) may not give a file a group it is not
            // in: the socket stays its user's and group's alone.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied && own_uid != 0 => {
                tracing::warn!(
                    group = %group,
                    socket = %path.display(),
                    "the node's user is not in api.socket_group: only it can use the admin \
                     API's socket"
                );
                policy.group = None;
            }
            Err(e) => return Err(failed("cannot give the group to", e)),
        }
    }
    std::fs::rename(&tmp, path).map_err(|e| failed("cannot move into place", e))?;
    Ok(ApiSocket {
        listener,
        policy,
        file: SocketFile::at(path, false)?,
    })
}

/// Who may use the socket at `path`: the node's user, and `group` if it exists.
fn policy(
    path: &Path,
    group: &SocketGroup,
    own_uid: u32,
) -> Result<(Option<u32>, UnixPolicy), ControlError> {
    Ok(match group_id(group) {
        Ok(Some(gid)) => (
            Some(gid),
            UnixPolicy {
                own_uid,
                group: Some(gid),
            },
        ),
        Ok(None) => {
            tracing::warn!(
                group = %group,
                socket = %path.display(),
                "api.socket_group does not exist: only root and the node's user can use the \
                 admin API's socket (create the group: groupadd --system {group})"
            );
            (
                None,
                UnixPolicy {
                    own_uid,
                    group: None,
                },
            )
        }
        Err(e) => return Err(host("api.socket_group", e.to_string())),
    })
}

/// Takes the socket a node this one replaces was serving its API on (an upgrade:
/// docs/operations.md), instead of binding one: `fd` must be a listening Unix socket, the
/// one at `path` (it was bound under a temporary name: the kernel cannot say). Its file is
/// left in place on drop until [`SocketFile::own`]: a successor that fails to start must not
/// remove the socket the node it was to replace serves on.
///
/// # Errors
/// `api.socket`: the descriptor is not a Unix socket listening at `path`.
pub fn adopt(
    fd: std::os::fd::OwnedFd,
    path: &Path,
    group: &SocketGroup,
) -> Result<ApiSocket, ControlError> {
    let std_listener = std::os::unix::net::UnixListener::from(fd);
    let at = std_listener
        .local_addr()
        .map_err(|e| host("api.socket", format!("the handed-over socket: {e}")))?;
    // bound under a temporary name and renamed (see `bind`): the name it reports is that one
    if at.as_pathname().is_none() {
        return Err(host(
            "api.socket",
            "the handed-over socket is not bound to a path".into(),
        ));
    }
    std_listener
        .set_nonblocking(true)
        .map_err(|e| host("api.socket", e.to_string()))?;
    let listener =
        UnixListener::from_std(std_listener).map_err(|e| host("api.socket", e.to_string()))?;
    let (_, policy) = policy(path, group, stator_sys::users::effective_uid())?;
    Ok(ApiSocket {
        listener,
        policy,
        file: SocketFile::at(path, true)?,
    })
}

fn group_id(group: &SocketGroup) -> io::Result<Option<u32>> {
    match group {
        SocketGroup::Id(id) => Ok(Some(*id)),
        SocketGroup::Name(name) => stator_sys::users::group_id(name),
    }
}

/// Removes a stale socket at `path`; refuses a live one or anything that is not a socket.
fn clear_stale(path: &Path) -> Result<(), ControlError> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(host(
            "api.socket",
            format!("{} exists and is not a socket", path.display()),
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(host(
            "api.socket",
            format!(
                "{} is in use: another `stator run` serves its API there",
                path.display()
            ),
        )),
        Err(_) => std::fs::remove_file(path).map_err(|e| {
            host(
                "api.socket",
                format!("cannot remove the stale socket {}: {e}", path.display()),
            )
        }),
    }
}
