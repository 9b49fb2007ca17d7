//! One AF_XDP socket per (interface, queue), its rings, and its statistics.
//!
//! Creation follows af_xdp.rst: the plane's first socket registers the UMEM (`XDP_UMEM_REG`);
//! every socket gets its own fill and completion rings (`XDP_UMEM_FILL_RING`,
//! `XDP_UMEM_COMPLETION_RING` — required when sockets sharing a UMEM are bound to different
//! queues or devices) and its RX and TX rings, maps the four, and binds to one queue of one
//! interface, the others with `XDP_SHARED_UMEM` naming the first. A socket bound to queue `q`
//! receives only what the XDP program redirects on queue `q`: the kernel drops a packet
//! redirected to a socket of another queue.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use crate::error::AfxdpError;
use crate::ring::{CompRing, FillRing, RawRing, RingOffsets, RxRing, TxRing};
use crate::sys::{self, Mmap};
use crate::umem::{Umem, UmemId};

/// An AF_XDP socket's descriptor, shared by its rings (each keeps it open).
#[derive(Debug)]
pub struct SocketFd(pub(crate) OwnedFd);

impl AsFd for SocketFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Ring sizes of one socket (powers of two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingSizes {
    /// Fill ring.
    pub fill: u32,
    /// Completion ring.
    pub comp: u32,
    /// RX ring (0: no RX ring, a transmit-only socket).
    pub rx: u32,
    /// TX ring.
    pub tx: u32,
}

impl RingSizes {
    /// Every ring of `n` entries.
    pub fn all(n: u32) -> Self {
        Self {
            fill: n,
            comp: n,
            rx: n,
            tx: n,
        }
    }

    fn validate(&self) -> Result<(), AfxdpError> {
        for (name, n) in [
            ("fill", self.fill),
            ("completion", self.comp),
            ("rx", self.rx),
            ("tx", self.tx),
        ] {
            if (n != 0 || name != "rx") && (!n.is_power_of_two() || !(64..=1 << 16).contains(&n)) {
                return Err(AfxdpError::invalid(format!(
                    "{name} ring of {n} entries (a power of two, 64 ..= 65536)"
                )));
            }
        }
        Ok(())
    }
}

/// How a socket binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BindMode {
    /// Zero-copy where the driver offers it, else copy.
    #[default]
    Auto,
    /// Copy mode (`XDP_COPY`): what veth offers.
    Copy,
    /// Zero-copy only (`XDP_ZEROCOPY`).
    ZeroCopy,
}

/// `XDP_STATISTICS` of a socket: what the kernel dropped or refused on its rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XskStats {
    /// Packets dropped for other reasons than a full RX ring or an empty fill ring.
    pub rx_dropped: u64,
    /// Invalid descriptors in the fill ring.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors in the TX ring.
    pub tx_invalid_descs: u64,
    /// Packets dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty when a packet came.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the TX ring empty when asked to send.
    pub tx_ring_empty_descs: u64,
}

impl XskStats {
    /// `(label, value)` of every field, in declaration order (metric labels).
    pub fn fields(&self) -> [(&'static str, u64); 6] {
        [
            ("rx_dropped", self.rx_dropped),
            ("rx_invalid_descs", self.rx_invalid_descs),
            ("tx_invalid_descs", self.tx_invalid_descs),
            ("rx_ring_full", self.rx_ring_full),
            ("rx_fill_ring_empty_descs", self.rx_fill_ring_empty_descs),
            ("tx_ring_empty_descs", self.tx_ring_empty_descs),
        ]
    }

    /// Field-wise sum.
    pub fn add(&mut self, o: &XskStats) {
        self.rx_dropped += o.rx_dropped;
        self.rx_invalid_descs += o.rx_invalid_descs;
        self.tx_invalid_descs += o.tx_invalid_descs;
        self.rx_ring_full += o.rx_ring_full;
        self.rx_fill_ring_empty_descs += o.rx_fill_ring_empty_descs;
        self.tx_ring_empty_descs += o.tx_ring_empty_descs;
    }
}

/// A ring over its mapping, or why the kernel's layout cannot be used.
fn ring<T: Copy>(m: Mmap, off: RingOffsets, n: u32, name: &str) -> Result<RawRing<T>, AfxdpError> {
    RawRing::over_mapping(m, off, n).ok_or_else(|| AfxdpError::Unsupported {
        what: format!("{name} ring offsets outside its mapping"),
    })
}

/// A bound socket: its descriptor (for the XSKMAP, statistics and wake-ups) and where it is.
#[derive(Debug, Clone)]
pub struct XskSocket {
    fd: Arc<SocketFd>,
    umem: UmemId,
    ifindex: u32,
    queue: u32,
    zero_copy: bool,
}

/// The rings of a freshly bound socket, to be moved into the threads that drive them.
#[derive(Debug)]
pub struct SocketRings {
    /// Fill ring.
    pub fill: FillRing,
    /// Completion ring.
    pub comp: CompRing,
    /// RX ring (`None` for a transmit-only socket).
    pub rx: Option<RxRing>,
    /// TX ring.
    pub tx: TxRing,
}

impl XskSocket {
    /// Creates a socket bound to `queue` of interface `ifindex` (in the calling thread's
    /// network namespace) over `umem`. `first` is the plane's first socket, which registered
    /// the UMEM; `None` makes this the first. A `first` bound over another pool is refused
    /// ([`AfxdpError::ForeignUmem`]) before anything is created: the kernel would receive into
    /// the first socket's pool while this socket's rings read `umem`.
    pub fn bind(
        umem: &Arc<Umem>,
        ifindex: u32,
        queue: u32,
        sizes: RingSizes,
        mode: BindMode,
        first: Option<&XskSocket>,
    ) -> Result<(Self, SocketRings), AfxdpError> {
        if let Some(f) = first
            && f.umem != umem.id()
        {
            return Err(AfxdpError::ForeignUmem {
                umem: umem.id(),
                first: f.umem,
            });
        }
        sizes.validate()?;
        let what = |op: &str| format!("AF_XDP socket on ifindex {ifindex} queue {queue}: {op}");
        let fd = sys::xsk_socket().map_err(|e| AfxdpError::io(what("socket(AF_XDP)"), e))?;
        let b = fd.as_fd();
        if first.is_none() {
            let (addr, len) = umem.region();
            let reg = libc::xdp_umem_reg {
                addr,
                len,
                chunk_size: umem.config().frame_size,
                headroom: 0,
                flags: 0,
                tx_metadata_len: 0,
            };
            sys::set_xdp_opt(b, libc::XDP_UMEM_REG, &reg)
                .map_err(|e| AfxdpError::io(what("registering the UMEM"), e))?;
        }
        let set = |name, n: u32, ring: &str| {
            sys::set_xdp_opt(b, name, &n)
                .map_err(|e| AfxdpError::io(what(&format!("sizing the {ring} ring")), e))
        };
        set(libc::XDP_UMEM_FILL_RING, sizes.fill, "fill")?;
        set(libc::XDP_UMEM_COMPLETION_RING, sizes.comp, "completion")?;
        if sizes.rx != 0 {
            set(libc::XDP_RX_RING, sizes.rx, "RX")?;
        }
        set(libc::XDP_TX_RING, sizes.tx, "TX")?;
        let zero = libc::xdp_ring_offset {
            producer: 0,
            consumer: 0,
            desc: 0,
            flags: 0,
        };
        let (off, got) = sys::xdp_opt(
            b,
            libc::XDP_MMAP_OFFSETS,
            libc::xdp_mmap_offsets {
                rx: zero,
                tx: zero,
                fr: zero,
                cr: zero,
            },
        )
        .map_err(|e| AfxdpError::io(what("reading ring offsets"), e))?;
        if got < size_of::<libc::xdp_mmap_offsets>() {
            return Err(AfxdpError::Unsupported {
                what: "ring offsets without a flags word (a kernel older than 5.4)".into(),
            });
        }
        let conv = |o: &libc::xdp_ring_offset| RingOffsets {
            producer: o.producer,
            consumer: o.consumer,
            desc: o.desc,
            flags: o.flags,
        };
        let map = |o: &libc::xdp_ring_offset, pgoff: u64, n: u32, elem: usize, ring: &str| {
            let len = o.desc as usize + n as usize * elem;
            Mmap::shared(b, pgoff, len)
                .map_err(|e| AfxdpError::io(what(&format!("mapping the {ring} ring")), e))
        };
        let fill_map = map(
            &off.fr,
            libc::XDP_UMEM_PGOFF_FILL_RING,
            sizes.fill,
            8,
            "fill",
        )?;
        let comp_map = map(
            &off.cr,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            sizes.comp,
            8,
            "completion",
        )?;
        let desc = size_of::<libc::xdp_desc>();
        let rx_map = (sizes.rx != 0)
            .then(|| {
                map(
                    &off.rx,
                    libc::XDP_PGOFF_RX_RING as u64,
                    sizes.rx,
                    desc,
                    "RX",
                )
            })
            .transpose()?;
        let tx_map = map(
            &off.tx,
            libc::XDP_PGOFF_TX_RING as u64,
            sizes.tx,
            desc,
            "TX",
        )?;

        // a socket sharing the UMEM inherits the first one's mode and need_wakeup, and the
        // kernel refuses those flags on it
        let flags = if first.is_some() {
            libc::XDP_SHARED_UMEM
        } else {
            libc::XDP_USE_NEED_WAKEUP
                | match mode {
                    BindMode::Auto => 0,
                    BindMode::Copy => libc::XDP_COPY,
                    BindMode::ZeroCopy => libc::XDP_ZEROCOPY,
                }
        };
        sys::bind_xsk(b, ifindex, queue, flags, first.map(|f| f.fd.as_fd())).map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::EBUSY) => " (another AF_XDP socket is bound to this queue)",
                Some(libc::EINVAL) => " (no such queue on this interface?)",
                Some(libc::EOPNOTSUPP) => " (the driver has no zero-copy: use copy mode)",
                _ => "",
            };
            AfxdpError::io(what(&format!("bind{hint}")), e)
        })?;
        let (opts, _) = sys::xdp_opt(b, libc::XDP_OPTIONS, libc::xdp_options { flags: 0 })
            .unwrap_or((libc::xdp_options { flags: 0 }, 0));
        let fd = Arc::new(SocketFd(fd));
        let rings = SocketRings {
            fill: FillRing {
                ring: ring(fill_map, conv(&off.fr), sizes.fill, "fill")?,
                umem: Arc::clone(umem),
                fd: Arc::clone(&fd),
            },
            comp: CompRing {
                ring: ring(comp_map, conv(&off.cr), sizes.comp, "completion")?,
                umem: Arc::clone(umem),
                fd: Arc::clone(&fd),
            },
            rx: rx_map
                .map(|m| -> Result<RxRing, AfxdpError> {
                    Ok(RxRing {
                        ring: ring(m, conv(&off.rx), sizes.rx, "RX")?,
                        umem: Arc::clone(umem),
                        fd: Arc::clone(&fd),
                    })
                })
                .transpose()?,
            tx: TxRing {
                ring: ring(tx_map, conv(&off.tx), sizes.tx, "TX")?,
                umem: Arc::clone(umem),
                fd: Arc::clone(&fd),
                written: 0,
            },
        };
        Ok((
            Self {
                fd,
                umem: umem.id(),
                ifindex,
                queue,
                zero_copy: opts.flags & libc::XDP_OPTIONS_ZEROCOPY != 0,
            },
            rings,
        ))
    }

    /// The socket's descriptor (for the XSKMAP).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The pool its rings use (the one the plane's first socket registered).
    pub fn umem(&self) -> UmemId {
        self.umem
    }

    /// The interface it is bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The queue it is bound to.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Whether the driver runs it in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// `XDP_STATISTICS`.
    pub fn stats(&self) -> Result<XskStats, AfxdpError> {
        let zero = libc::xdp_statistics {
            rx_dropped: 0,
            rx_invalid_descs: 0,
            tx_invalid_descs: 0,
            rx_ring_full: 0,
            rx_fill_ring_empty_descs: 0,
            tx_ring_empty_descs: 0,
        };
        let (s, _) = sys::xdp_opt(self.fd.as_fd(), libc::XDP_STATISTICS, zero)
            .map_err(|e| AfxdpError::io("reading XDP_STATISTICS", e))?;
        Ok(XskStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: s.tx_ring_empty_descs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::umem::UmemConfig;

    #[test]
    fn binding_refuses_a_first_socket_over_another_umem_before_making_anything() {
        let pool = || {
            Arc::new(
                Umem::new(UmemConfig {
                    frames: 16,
                    frame_size: 2048,
                    check_frames: false,
                })
                .expect("UMEM"),
            )
        };
        let (a, b) = (pool(), pool());
        // a "first socket" over `a` (any descriptor will do: the check comes before the kernel
        // is asked anything, so this needs no root)
        let efd = sys::EventFd::new().expect("eventfd");
        let first = XskSocket {
            fd: Arc::new(SocketFd(efd.try_clone_fd().expect("dup"))),
            umem: a.id(),
            ifindex: 1,
            queue: 0,
            zero_copy: false,
        };
        let e = XskSocket::bind(&b, 1, 1, RingSizes::all(64), BindMode::Copy, Some(&first))
            .expect_err("another pool's first socket");
        assert!(
            matches!(e, AfxdpError::ForeignUmem { umem, first } if umem == b.id() && first == a.id()),
            "{e}"
        );
        assert!(e.to_string().contains(&a.id().to_string()), "{e}");
    }
}
