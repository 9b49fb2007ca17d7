//! Writing Stator's file for BIRD atomically.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::BirdError;

/// The bytes of `path`, or `None` when it does not exist (other errors are reported).
pub fn read_existing(path: &Path) -> Result<Option<Vec<u8>>, BirdError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(BirdError::Write {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Replaces `path` with `contents` atomically: a reader (BIRD) sees the old file or the new
/// one, never a mix. Writes a temporary file in the same directory (`.NAME.tmp`, which an
/// `include` pattern such as `stator.con[f]` does not match), syncs it and renames it over
/// `path`. The file is readable by everyone (BIRD may run as user `bird`).
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), BirdError> {
    let error = |source| BirdError::Write {
        path: path.to_owned(),
        source,
    };
    let tmp = temp_path(path);
    let result = (|| {
        let mut file = File::create(&tmp)?;
        file.write_all(contents)?;
        file.sync_all()?;
        set_readable(&tmp)?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(error)
}

/// Removes `path` (no error when it is already gone).
pub fn remove(path: &Path) -> Result<(), BirdError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(BirdError::Write {
            path: path.to_owned(),
            source: e,
        }),
        _ => Ok(()),
    }
}

fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "stator.conf".into());
    path.with_file_name(format!(".{name}.tmp"))
}

fn set_readable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o644))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_atomically_and_reads_back() {
        let dir = std::env::temp_dir().join(format!("stator-bird-file-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stator.conf");
        assert_eq!(read_existing(&path).unwrap(), None);
        write_atomic(&path, b"one\n").unwrap();
        write_atomic(&path, b"two\n").unwrap();
        assert_eq!(
            read_existing(&path).unwrap().as_deref(),
            Some(&b"two\n"[..])
        );
        assert!(
            !temp_path(&path).exists(),
            "no temporary file is left behind"
        );
        remove(&path).unwrap();
        remove(&path).unwrap();
        let missing_dir = dir.join("missing").join("stator.conf");
        assert!(matches!(
            write_atomic(&missing_dir, b"x"),
            Err(BirdError::Write { .. })
        ));
        fs::remove_dir_all(&dir).unwrap();
    }
}
