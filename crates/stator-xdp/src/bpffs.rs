//! Making sure the pin directory is on a bpffs, as Cilium's agent does.
//!
//! Pinned maps and links only live on a BPF filesystem. Most distributions mount one at
//! `/sys/fs/bpf` at boot; a freshly provisioned machine of the kind Stator is tested on does
//! not, and `ip netns exec` hides the host's mount behind a fresh `/sys`. So every loader calls
//! [`ensure_bpffs`] first: when the pin path is not on a bpffs, Stator creates the directory
//! and mounts one — at `/sys/fs/bpf` when the pin path lies below it (so other tools find it
//! where they expect it), else at the pin path itself — and logs one line saying so. It never
//! mounts over a bpffs that is already there.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Result, XdpError};
use crate::sys;

/// The conventional mount point of the BPF filesystem.
pub const BPFFS_ROOT: &str = "/sys/fs/bpf";

/// Where a bpffs has to be mounted for `pin_path` to be on one: `/sys/fs/bpf` when the pin path
/// is that directory or below it, else the pin path itself.
pub fn bpffs_mount_point(pin_path: &Path) -> PathBuf {
    let root = Path::new(BPFFS_ROOT);
    if pin_path.starts_with(root) {
        root.to_path_buf()
    } else {
        pin_path.to_path_buf()
    }
}

/// Makes `pin_path` lie on a bpffs: nothing to do when it already does (returns `None`);
/// otherwise creates the mount point, mounts a bpffs there (mode 0700), logs it, and returns
/// where it mounted. Needs root (the callers check first).
pub fn ensure_bpffs(pin_path: &Path) -> Result<Option<PathBuf>> {
    if sys::on_bpffs(pin_path).unwrap_or(false) {
        return Ok(None);
    }
    let at = bpffs_mount_point(pin_path);
    let failed = |what: &str, source: io::Error| XdpError::BpffsMount {
        pin_path: pin_path.to_path_buf(),
        at: at.clone(),
        what: what.to_string(),
        source,
    };
    std::fs::create_dir_all(&at).map_err(|e| failed("creating the mount point", e))?;
    // The nearest existing ancestor of the pin path was not a bpffs; the mount point itself can
    // still be one only if the pin path sits under a different filesystem mounted inside it.
    // Mounting again there would hide everything pinned: refuse instead.
    if sys::on_bpffs(&at).unwrap_or(false) {
        return Err(failed(
            "checking the mount point",
            io::Error::other(
                "a bpffs is mounted there but the pin path lies on another filesystem below it",
            ),
        ));
    }
    sys::mount_bpffs(&at).map_err(|e| failed("mounting", e))?;
    if !sys::on_bpffs(pin_path).unwrap_or(false) {
        return Err(failed(
            "checking the new mount",
            io::Error::other("the pin path is still not on a bpffs after mounting one"),
        ));
    }
    tracing::info!(
        at = %at.display(),
        pin_path = %pin_path.display(),
        "no bpffs at the pin path: mounted one at {}",
        at.display()
    );
    Ok(Some(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_paths_below_sys_fs_bpf_mount_the_conventional_root() {
        assert_eq!(
            bpffs_mount_point(Path::new("/sys/fs/bpf/stator")),
            Path::new("/sys/fs/bpf")
        );
        assert_eq!(
            bpffs_mount_point(Path::new("/sys/fs/bpf")),
            Path::new("/sys/fs/bpf")
        );
        assert_eq!(
            bpffs_mount_point(Path::new("/sys/fs/bpfx/stator")),
            Path::new("/sys/fs/bpfx/stator")
        );
        assert_eq!(
            bpffs_mount_point(Path::new("/run/stator/pins")),
            Path::new("/run/stator/pins")
        );
    }
}
