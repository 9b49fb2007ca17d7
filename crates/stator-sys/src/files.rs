//! Files the node writes where other users may also write: replaced atomically, through a
//! temporary file the node created itself.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How a written file is owned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ownership {
    /// Permission bits (e.g. `0o600`, or `0o640` for a file another daemon reads through its
    /// group).
    pub mode: u32,
    /// Give the file the group of its directory (BIRD's configuration directory belongs to
    /// group `bird`, and BIRD reads its files as that group).
    pub directory_group: bool,
}

impl Ownership {
    /// Mode 0600: the node's own user only.
    pub const PRIVATE: Self = Self {
        mode: 0o600,
        directory_group: false,
    };
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Replaces `path` with `contents` atomically: a reader sees the old file or the new one,
/// never a mix. The temporary file (`.NAME.<pid>.<n>.tmp`, which an `include` pattern such
/// as `stator.con[f]` does not match) is created in `path`'s directory with
/// `O_CREAT | O_EXCL | O_NOFOLLOW` — never an existing file, never through a symbolic link —
/// with `owner`'s mode, synced, then renamed over `path` (a symbolic link at `path` is
/// replaced, not followed).
///
/// # Errors
/// Any step's; the temporary file is removed on failure.
pub fn write_atomic(path: &Path, contents: &[u8], owner: Ownership) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a path with no file name"))?
        .to_string_lossy()
        .into_owned();
    let (tmp, mut file) = create_temp(&dir, &name, owner.mode)?;
    let result = (|| {
        if owner.directory_group {
            let gid = fs::metadata(&dir)?.gid();
            std::os::unix::fs::fchown(&file, None, Some(gid))?;
        }
        // The mode asked for, whatever the umask took away at creation.
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(owner.mode))?;
        file.write_all(contents)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn create_temp(dir: &Path, name: &str, mode: u32) -> io::Result<(PathBuf, File)> {
    loop {
        let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            // Someone else's file (or link) under that name: take the next name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!(
            "stator-sys-{name}-{}-{n}-{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn replaces_with_the_mode_asked_and_leaves_no_temporary_file() {
        let d = scratch("mode");
        let p = d.join("stator.conf");
        write_atomic(&p, b"one\n", Ownership::PRIVATE).unwrap();
        write_atomic(
            &p,
            b"two\n",
            Ownership {
                mode: 0o640,
                directory_group: true,
            },
        )
        .unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two\n");
        let m = fs::metadata(&p).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o640);
        assert_eq!(m.gid(), fs::metadata(&d).unwrap().gid());
        let left: Vec<_> = fs::read_dir(&d).unwrap().collect();
        assert_eq!(left.len(), 1, "only the file itself: {left:?}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn never_writes_through_a_planted_link() {
        let d = scratch("link");
        let victim = d.join("victim");
        fs::write(&victim, b"precious\n").unwrap();
        let p = d.join("stator.conf");
        // A link at the target itself is replaced, not followed.
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        // Links at every temporary name this process would try next are skipped.
        let next = SEQUENCE.load(Ordering::Relaxed);
        for n in next..next + 4 {
            let tmp = d.join(format!(".stator.conf.{}.{n}.tmp", std::process::id()));
            std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        }
        write_atomic(&p, b"ours\n", Ownership::PRIVATE).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious\n");
        assert!(!fs::symlink_metadata(&p).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&p).unwrap(), b"ours\n");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_missing_directory_is_an_error() {
        let d = scratch("missing");
        let r = write_atomic(&d.join("no").join("f"), b"x", Ownership::PRIVATE);
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::NotFound);
        fs::remove_dir_all(&d).unwrap();
    }
}
