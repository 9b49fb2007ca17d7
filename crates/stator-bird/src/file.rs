//! Writing Stator's file for BIRD atomically.

use std::fs;
use std::path::Path;

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
/// one, never a mix. The temporary file is created exclusively in the same directory, never
/// through a symbolic link (`stator_sys::files::write_atomic`), so a user who can write to that
/// directory cannot make the node write elsewhere. Mode 0640, group of the directory: Debian's
/// BIRD runs as user `bird` and reads `/etc/bird` (group `bird`) through its group; other
/// users cannot read the file.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), BirdError> {
    stator_sys::files::write_atomic(path, contents, OWNERSHIP).map_err(|source| BirdError::Write {
        path: path.to_owned(),
        source,
    })
}

/// How Stator's file for BIRD is owned.
const OWNERSHIP: stator_sys::files::Ownership = stator_sys::files::Ownership {
    mode: 0o640,
    directory_group: true,
};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_atomically_and_reads_back() {
        let dir = std::env::temp_dir().join(format!(
            "stator-bird-file-{}-{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stator.conf");
        assert_eq!(read_existing(&path).unwrap(), None);
        write_atomic(&path, b"one\n").unwrap();
        write_atomic(&path, b"two\n").unwrap();
        assert_eq!(
            read_existing(&path).unwrap().as_deref(),
            Some(&b"two\n"[..])
        );
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary file is left behind"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o640,
            "readable by BIRD's group, not by every user"
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
