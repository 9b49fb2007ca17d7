//! Network interfaces by name and index, in the calling thread's network namespace.

use std::ffi::{CStr, CString};

/// Index of the interface `name`, if it exists.
pub fn index(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (idx != 0).then_some(idx)
}

/// Name of the interface `index`, if it exists.
pub fn name(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `buf` has IF_NAMESIZE bytes, as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success the buffer holds a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(buf.as_ptr()) };
    Some(name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_by_name_and_back() {
        let lo = index("lo").expect("every namespace has lo");
        assert_eq!(name(lo).as_deref(), Some("lo"));
        assert_eq!(index("no-such-if0"), None);
        assert_eq!(index("bad\0name"), None, "an interior NUL is no name");
        assert_eq!(name(0), None);
    }
}
