//! Names and directories no other test uses: tests of one binary run in parallel, and
//! several test binaries may run at once, so a name made from the process id alone is shared.
//! Every name here adds a counter and the time to it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// `<prefix>-<pid>-<n>-<nanoseconds>`: unique in this process and, by the time, across
/// processes that reuse a pid.
pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}-{}-{}-{nanos:08x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A path in the temporary directory named by [`unique_name`]; nothing is created.
pub fn unique_path(prefix: &str, suffix: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{}{suffix}", unique_name(prefix)))
}

/// A directory of its own under the temporary directory, removed with its content on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `<tmp>/<unique_name(prefix)>`, mode 0700.
    ///
    /// # Panics
    /// When it cannot be created (a test cannot go on without it).
    pub fn new(prefix: &str) -> Self {
        use std::os::unix::fs::DirBuilderExt;
        let path = unique_path(prefix, "");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        Self { path }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `path/name`.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_differ_and_directories_go() {
        assert_ne!(unique_name("x"), unique_name("x"));
        let d = TempDir::new("stator-testkit");
        std::fs::write(d.join("f"), b"x").unwrap();
        let p = d.path().to_owned();
        assert!(p.is_dir());
        drop(d);
        assert!(!p.exists());
    }
}
