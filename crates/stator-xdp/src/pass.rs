//! An XDP program that passes everything (`stator_pass`), attached to the peer of a veth that
//! XDP transmits on.
//!
//! On veth, a frame sent with `XDP_TX` is queued on the peer, whose NAPI the kernel schedules
//! only when the peer has an XDP program of its own (GRO, which is enough for
//! `XDP_REDIRECT` into a veth, is not enough for `XDP_TX`); without one, the frames wait in the
//! peer's ring until other traffic happens to schedule it, i.e. they are effectively lost.
//! Labs and tests attach this program to such peers (docs/xdp.md, "veth").

use std::path::Path;

use crate::attach::{Attachment, attach_loaded};
use crate::error::{Result, XdpError};
use crate::forwarder::load_unpinned;
use crate::objects;
use crate::options::AttachMode;
use crate::sys;

/// Attaches `stator_pass` to `iface` (in the calling thread's namespace) through a bpf_link
/// pinned as `<pin_path>/link_<iface>`; remove it with [`detach`](crate::detach) or
/// [`detach_all`](crate::detach_all), then remove the directory.
pub fn attach_pass(pin_path: &Path, iface: &str, mode: AttachMode) -> Result<Attachment> {
    if !sys::is_root() {
        return Err(XdpError::NotRoot {
            what: "attaching XDP".into(),
        });
    }
    if sys::if_nametoindex(iface).is_none() {
        return Err(XdpError::InterfaceMissing {
            iface: iface.to_string(),
        });
    }
    let mut ebpf = load_unpinned(objects::PASS, "stator_pass", &["stator_pass"])?;
    attach_loaded(&mut ebpf, "stator_pass", pin_path, iface, mode, |_| {
        Vec::new()
    })
}
