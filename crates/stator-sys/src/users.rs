//! Users and groups: the effective ids, and a group's id by name from the local database.

use std::io;

/// The process's effective user id.
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Whether the process runs as root (effective uid 0).
pub fn is_root() -> bool {
    effective_uid() == 0
}

/// The process's effective group id.
pub fn effective_gid() -> u32 {
    rustix::process::getegid().as_raw()
}

/// The id of group `name` in the local group database (`/etc/group`); `None` when it has no
/// such group. Groups only a network directory (NSS: LDAP, SSSD) knows are not found: name
/// them by number.
///
/// # Errors
/// The group database cannot be read.
pub fn group_id(name: &str) -> io::Result<Option<u32>> {
    group_id_in(&std::fs::read_to_string("/etc/group")?, name)
}

fn group_id_in(database: &str, name: &str) -> io::Result<Option<u32>> {
    for line in database.lines() {
        let mut fields = line.split(':');
        if fields.next() != Some(name) {
            continue;
        }
        let id = fields.nth(1).and_then(|g| g.trim().parse().ok());
        return match id {
            Some(id) => Ok(Some(id)),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("/etc/group: the line of group {name:?} has no numeric id"),
            )),
        };
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_groups_by_exact_name() {
        let db = "root:x:0:\nstator-old:x:998:\nstator:x:999:alice,bob\nbroken:x::\n";
        assert_eq!(group_id_in(db, "stator").unwrap(), Some(999));
        assert_eq!(group_id_in(db, "root").unwrap(), Some(0));
        assert_eq!(group_id_in(db, "stat").unwrap(), None);
        assert!(group_id_in(db, "broken").is_err());
        assert_eq!(group_id("root").unwrap(), Some(0), "this host's /etc/group");
    }
}
