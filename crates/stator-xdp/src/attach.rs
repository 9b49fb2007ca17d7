//! Attaching the forwarder to interfaces, detaching it, and reporting what is attached where.
//!
//! An attachment is a bpf_link pinned as `<pin_path>/link_<ifname>`: it outlives the process
//! that made it (the CLI exits, the forwarder keeps running) and a later `attach` swaps the new
//! program into the same link atomically (`BPF_LINK_UPDATE`): a restart or upgrade never leaves
//! the interface without a program, and the pinned maps carry the connection table across.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::xdp::{XdpLink, XdpMode as AyaXdpMode};
use aya::programs::{ProgramError, Xdp};

use crate::error::{Result, XdpError};
use crate::forwarder::Forwarder;
use crate::maps::{FORWARDER_MAPS, Maps, RETIRED_FORWARDER_MAPS};
use crate::options::{AttachMode, ConntrackMode};
use crate::sys;

/// How a program is attached, as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// Nothing attached.
    None,
    /// Driver (native) mode.
    Native,
    /// Generic (skb) mode.
    Generic,
    /// Offloaded to the NIC.
    Offload,
    /// Several programs in several modes.
    Multi,
}

impl XdpMode {
    pub(crate) fn from_attached(v: u8) -> Self {
        match v {
            1 => Self::Native,
            2 => Self::Generic,
            3 => Self::Offload,
            4 => Self::Multi,
            _ => Self::None,
        }
    }

    /// `none`, `native`, `generic`, `offload`, `multi`.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Native => "native",
            Self::Generic => "generic",
            Self::Offload => "offload",
            Self::Multi => "multi",
        }
    }
}

/// The result of [`Forwarder::attach`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// Interface name.
    pub iface: String,
    /// Interface index.
    pub ifindex: u32,
    /// Mode the kernel reports.
    pub mode: XdpMode,
    /// The attached program's id.
    pub prog_id: u32,
    /// True when an existing pinned link got the new program (restart), false for a new link.
    pub replaced: bool,
    /// Things the operator should know (generic-mode fallback, forwarding disabled, veth).
    pub warnings: Vec<String>,
}

/// One attachment found by [`status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachStatus {
    /// Interface name from the pin (`link_<ifname>`).
    pub iface: String,
    /// The link's interface index.
    pub ifindex: u32,
    /// Mode the kernel reports for the interface.
    pub mode: XdpMode,
    /// Program id of the link.
    pub prog_id: u32,
    /// bpf_link id.
    pub link_id: u32,
}

/// What [`status`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The pin directory.
    pub pin_path: PathBuf,
    /// Generation packets use.
    pub active_gen: u32,
    /// `Snapshot::generation` of the active half (0 = never programmed).
    pub config_generation: u64,
    /// Whether the active half was ever programmed.
    pub programmed: bool,
    /// Connection-table flavour of the pinned maps.
    pub conntrack: ConntrackMode,
    /// Connection-table capacity.
    pub ct_entries: u32,
    /// The per-CPU build's IPv4 table (`stator_ct4`): buckets per CPU and how full it is (a
    /// walk of the table), when it is in use.
    pub ct4: Option<(u32, crate::ct4::Occupancy)>,
    /// Maglev slots per generation.
    pub slots_per_gen: u32,
    /// Next-hop cache lifetime (`None` = a FIB lookup per packet).
    pub fib_cache: Option<std::time::Duration>,
    /// Attachments.
    pub attachments: Vec<AttachStatus>,
    /// Interfaces in `stator_tx_ports`.
    pub tx_ports: Vec<u32>,
}

pub(crate) fn link_pin(pin_path: &Path, iface: &str) -> PathBuf {
    pin_path.join(format!("link_{iface}"))
}

pub(crate) fn attach_err(
    op: &'static str,
    iface: &str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> XdpError {
    XdpError::Attach {
        op,
        iface: iface.to_string(),
        source: Box::new(e),
    }
}

/// The OS error inside an aya attach error, if any.
fn os_error(e: &ProgramError) -> Option<i32> {
    match e {
        ProgramError::SyscallError(s) => s.io_error.raw_os_error(),
        _ => None,
    }
}

impl Forwarder {
    /// Attaches the forwarder to `iface` in the mode of [`XdpOptions::attach_mode`]
    /// (auto: native, else generic with a warning), pins the link as `link_<iface>` so it
    /// survives this process, and adds the interface to the redirect targets. If a link is
    /// already pinned for `iface`, the new program replaces the old one in it atomically.
    ///
    /// [`XdpOptions::attach_mode`]: crate::XdpOptions::attach_mode
    pub fn attach(&mut self, iface: &str) -> Result<Attachment> {
        let program = self.program;
        let at = attach_loaded(
            &mut self.ebpf,
            program,
            &self.opts.pin_path,
            iface,
            self.opts.attach_mode,
            |ifindex| preflight(iface, ifindex),
        )?;
        self.add_tx_port(at.ifindex)?;
        Ok(at)
    }
}

/// Attaches the loaded XDP program `program` of `ebpf` to `iface` (in the calling thread's
/// namespace) through a bpf_link pinned as `<pin_path>/link_<iface>` ([`attach_pinned`]), and
/// reports what the kernel now has there. `preflight(ifindex)` gives the warnings about the
/// host the caller's program cares about. Shared by every program Stator attaches.
pub(crate) fn attach_loaded(
    ebpf: &mut aya::Ebpf,
    program: &str,
    pin_path: &Path,
    iface: &str,
    mode: AttachMode,
    preflight: impl FnOnce(u32) -> Vec<String>,
) -> Result<Attachment> {
    if !sys::is_root() {
        return Err(XdpError::NotRoot {
            what: "attaching XDP".into(),
        });
    }
    let ifindex = sys::if_nametoindex(iface).ok_or_else(|| XdpError::InterfaceMissing {
        iface: iface.to_string(),
    })?;
    crate::bpffs::ensure_bpffs(pin_path)?;
    std::fs::create_dir_all(pin_path)
        .map_err(|e| XdpError::io(format!("creating pin directory {}", pin_path.display()), e))?;
    let mut warnings = preflight(ifindex);
    let prog: &mut Xdp = ebpf
        .program_mut(program)
        .and_then(|p| p.try_into().ok())
        .unwrap_or_else(|| panic!("XDP program `{program}` is loaded before it is attached"));
    let replaced = attach_pinned(
        prog,
        iface,
        ifindex,
        &link_pin(pin_path, iface),
        mode,
        &mut warnings,
    )?;
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

/// Attaches `prog` to `iface` (index `ifindex`) through a bpf_link pinned at `pin`, in `mode`
/// (auto: native, else generic with a warning pushed to `warnings`). If a link is already
/// pinned there for this interface, `prog` replaces the old program in it atomically
/// (`BPF_LINK_UPDATE`) and the result is `true`; a pin left by a deleted interface is removed.
/// Shared by the forwarder and the decap program.
pub(crate) fn attach_pinned(
    prog: &mut Xdp,
    iface: &str,
    ifindex: u32,
    pin: &Path,
    mode: AttachMode,
    warnings: &mut Vec<String>,
) -> Result<bool> {
    if pin.exists() {
        let info = sys::obj_get(pin)
            .and_then(|fd| sys::link_info(fd.as_fd()))
            .map_err(|e| attach_err("re-attach", iface, e))?;
        let pinned = PinnedLink::from_pin(pin).map_err(|e| attach_err("re-attach", iface, e))?;
        if info.ifindex == ifindex {
            let fd_link: FdLink = pinned.into();
            let link = XdpLink::try_from(fd_link).map_err(|e| attach_err("re-attach", iface, e))?;
            let id = prog
                .attach_to_link(link)
                .map_err(|e| attach_err("re-attach", iface, e))?;
            // The pin keeps the link (and so the attachment) alive; our fd may go.
            drop(
                prog.take_link(id)
                    .map_err(|e| attach_err("re-attach", iface, e))?,
            );
            return Ok(true);
        }
        // the interface was deleted and re-created: the old link is dead
        warnings.push(format!("removed stale link pin {}", pin.display()));
        let _ = pinned.unpin();
    }
    let tries: &[(AyaXdpMode, &'static str)] = match mode {
        AttachMode::Auto => &[(AyaXdpMode::Driver, "native"), (AyaXdpMode::Skb, "generic")],
        AttachMode::Native => &[(AyaXdpMode::Driver, "native")],
        AttachMode::Generic => &[(AyaXdpMode::Skb, "generic")],
    };
    let mut attached = None;
    for (i, (flags, name)) in tries.iter().enumerate() {
        match prog.attach_to_if_index(ifindex, *flags) {
            Ok(id) => {
                attached = Some(id);
                break;
            }
            Err(e) if os_error(&e) == Some(libc::EBUSY) || os_error(&e) == Some(libc::EEXIST) => {
                return Err(attach_err(
                    "attach",
                    iface,
                    std::io::Error::other(format!(
                        "another XDP program is already attached to `{iface}` \
                         (remove it first: `ip link set dev {iface} xdp off`)"
                    )),
                ));
            }
            Err(e) if i + 1 < tries.len() => {
                let why = os_error(&e).map_or_else(
                    || e.to_string(),
                    |c| std::io::Error::from_raw_os_error(c).to_string(),
                );
                warnings.push(format!(
                    "native XDP is not available on `{iface}` ({why}); fell back to \
                     generic (skb) mode, which is much slower"
                ));
            }
            Err(e) => {
                let source = match os_error(&e) {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::other(e.to_string()),
                };
                return Err(XdpError::XdpUnsupported {
                    iface: iface.to_string(),
                    mode: name,
                    source,
                });
            }
        }
    }
    let id = attached.expect("the loop returns unless it attached");
    let link = prog
        .take_link(id)
        .map_err(|e| attach_err("attach", iface, e))?;
    let fd_link = FdLink::try_from(link).map_err(|e| attach_err("attach", iface, e))?;
    // pinning keeps the attachment after the FdLink (and this process) is gone
    drop(
        fd_link
            .pin(pin)
            .map_err(|e| attach_err("pin link", iface, e))?,
    );
    Ok(false)
}

/// Detaches the forwarder from `iface`: `BPF_LINK_DETACH` on the pinned link (effective even
/// if another process holds it open), then removes the pin. The maps stay pinned.
pub fn detach(pin_path: &Path, iface: &str) -> Result<()> {
    if !sys::is_root() {
        return Err(XdpError::NotRoot {
            what: "detaching XDP".into(),
        });
    }
    let pin = link_pin(pin_path, iface);
    if !pin.exists() {
        return Err(XdpError::NotAttached {
            iface: iface.to_string(),
            pin_path: pin_path.to_path_buf(),
        });
    }
    let link = sys::obj_get(&pin).map_err(|e| attach_err("detach", iface, e))?;
    sys::link_detach(link.as_fd()).map_err(|e| attach_err("detach", iface, e))?;
    std::fs::remove_file(&pin).map_err(|e| attach_err("unpin", iface, e))?;
    Ok(())
}

/// Interface names with a pinned link under `pin_path`.
pub fn attached_interfaces(pin_path: &Path) -> Result<Vec<String>> {
    let Ok(dir) = std::fs::read_dir(pin_path) else {
        return Ok(Vec::new());
    };
    let mut out: Vec<String> = dir
        .filter_map(std::result::Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("link_"))
                .map(str::to_string)
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Detaches every pinned link; returns the interfaces.
pub fn detach_all(pin_path: &Path) -> Result<Vec<String>> {
    let ifaces = attached_interfaces(pin_path)?;
    for iface in &ifaces {
        detach(pin_path, iface)?;
    }
    Ok(ifaces)
}

/// Removes the pinned maps (and the directory if it is then empty). Refuses while links are
/// pinned: a running forwarder must not lose its maps under it.
pub fn purge(pin_path: &Path) -> Result<()> {
    let left = attached_interfaces(pin_path)?;
    if !left.is_empty() {
        return Err(XdpError::io(
            format!("purging {}", pin_path.display()),
            std::io::Error::other(format!(
                "still attached to {}; detach first",
                left.join(", ")
            )),
        ));
    }
    for name in FORWARDER_MAPS.iter().chain(&RETIRED_FORWARDER_MAPS) {
        let p = pin_path.join(name);
        if p.exists() {
            std::fs::remove_file(&p)
                .map_err(|e| XdpError::io(format!("removing {}", p.display()), e))?;
        }
    }
    let _ = std::fs::remove_dir(pin_path);
    Ok(())
}

/// What is loaded and attached under `pin_path`.
pub fn status(pin_path: &Path) -> Result<Status> {
    let maps = Maps::open(pin_path)?;
    let active_gen = maps.active_generation();
    let cfg = maps.node_cfg(active_gen);
    let attachments = attachments(pin_path)?;
    Ok(Status {
        pin_path: pin_path.to_path_buf(),
        active_gen,
        config_generation: cfg.config_generation,
        programmed: cfg.outer_ttl != 0,
        conntrack: maps.conntrack(),
        ct_entries: maps.ct_entries(),
        ct4: maps.ct4_buckets().zip(maps.ct4_occupancy()),
        slots_per_gen: maps.slots_per_gen(),
        fib_cache: maps.fib_cache(),
        attachments,
        tx_ports: maps.tx_ports()?,
    })
}

/// The links pinned under `pin_path` (`link_<ifname>`), with what the kernel says about them.
pub(crate) fn attachments(pin_path: &Path) -> Result<Vec<AttachStatus>> {
    let mut out = Vec::new();
    for iface in attached_interfaces(pin_path)? {
        let info = sys::obj_get(&link_pin(pin_path, &iface))
            .and_then(|fd| sys::link_info(fd.as_fd()))
            .map_err(|e| attach_err("status", &iface, e))?;
        let state = sys::xdp_query(info.ifindex).unwrap_or(sys::XdpAttachState {
            attached: 0,
            prog_id: 0,
            link: None,
            link_elsewhere: false,
        });
        out.push(AttachStatus {
            iface,
            ifindex: info.ifindex,
            mode: if info.link_type == sys::BPF_LINK_TYPE_XDP {
                XdpMode::from_attached(state.attached)
            } else {
                XdpMode::None
            },
            prog_id: info.prog_id,
            link_id: info.id,
        });
    }
    Ok(out)
}

/// Warnings about the host setup the forwarder depends on.
fn preflight(iface: &str, ifindex: u32) -> Vec<String> {
    let mut w = Vec::new();
    for (family, path) in [
        (
            "IPv4",
            format!("/proc/sys/net/ipv4/conf/{iface}/forwarding"),
        ),
        (
            "IPv6",
            format!("/proc/sys/net/ipv6/conf/{iface}/forwarding"),
        ),
    ] {
        if std::fs::read_to_string(&path).is_ok_and(|v| v.trim() != "1") {
            w.push(format!(
                "{family} forwarding is disabled on `{iface}`: bpf_fib_lookup answers \
                 \"forwarding disabled\" and {family} backends are dropped (reason fib); \
                 enable it with `sysctl -w {}=1`",
                path.trim_start_matches("/proc/sys/").replace('/', ".")
            ));
        }
    }
    if sys::is_veth(iface) {
        let peer = match sys::xdp_query(ifindex) {
            Ok(st) => match (st.link, st.link_elsewhere) {
                (Some(p), false) => {
                    sys::if_indextoname(p).unwrap_or_else(|| format!("ifindex {p}"))
                }
                (Some(p), true) => format!("ifindex {p} in another network namespace"),
                (None, _) => "the peer".into(),
            },
            Err(_) => "the peer".into(),
        };
        w.push(format!(
            "`{iface}` is a veth: frames it sends with XDP_TX reach its peer ({peer}) only if \
             the peer has an XDP program attached (GRO is not enough for XDP_TX); frames \
             redirected into a veth need an XDP program or GRO (`ethtool -K <peer> gro on`) on \
             that veth's peer; otherwise they are lost silently; see docs/xdp.md"
        ));
    }
    w
}
