//! An XDP program that passes everything (`stator_pass`), attached to the peer of a veth that
//! XDP transmits on.
//!
//! On veth, a frame sent with `XDP_TX` is queued on the peer, whose NAPI the kernel schedules
//! only when the peer has an XDP program of its own (GRO, which is enough for
//! `XDP_REDIRECT` into a veth, is not enough for `XDP_TX`); without one, the frames wait in the
//! peer's ring until other traffic happens to schedule it, i.e. they are effectively lost.
//! Labs and tests attach this program to such peers (docs/xdp.md, "veth").

use std::path::Path;

use aya::Ebpf;
use aya::programs::Xdp;

use crate::attach::{Attachment, XdpMode, attach_err, attach_pinned, link_pin};
use crate::error::{Result, XdpError};
use crate::forwarder::load_xdp;
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
    if !sys::on_bpffs(pin_path).unwrap_or(false) {
        return Err(XdpError::NotBpffs {
            path: pin_path.to_path_buf(),
        });
    }
    let ifindex = sys::if_nametoindex(iface).ok_or_else(|| XdpError::InterfaceMissing {
        iface: iface.to_string(),
    })?;
    std::fs::create_dir_all(pin_path)
        .map_err(|e| XdpError::io(format!("creating pin directory {}", pin_path.display()), e))?;
    let mut ebpf = Ebpf::load(objects::PASS).map_err(|e| XdpError::Load {
        object: "stator_pass".into(),
        source: Box::new(e),
    })?;
    load_xdp(&mut ebpf, "stator_pass")?;
    let prog: &mut Xdp = ebpf
        .program_mut("stator_pass")
        .and_then(|p| p.try_into().ok())
        .expect("loaded just above");
    let mut warnings = Vec::new();
    let pin = link_pin(pin_path, iface);
    let replaced = attach_pinned(prog, iface, ifindex, &pin, mode, &mut warnings)?;
    let state = sys::xdp_query(ifindex).map_err(|e| attach_err("query", iface, e))?;
    Ok(Attachment {
        iface: iface.to_string(),
        ifindex,
        mode: XdpMode::from_attached(state.attached),
        prog_id: state.prog_id,
        replaced,
        warnings,
    })
}
