//! Next hops for the user-space forwarder: the kernel's own answer, cached as the XDP
//! forwarder caches it.
//!
//! User space has no `bpf_fib_lookup`, and a second FIB (netlink route and neighbour dumps
//! kept in sync) would be a second implementation of the kernel's routing — with its own idea
//! of policy routing, ECMP, forwarding flags and MTUs. So [`KernelFib`] asks the kernel the
//! question the XDP forwarder asks, through the same helper: `stator_fibq`, a tiny XDP program
//! run with `BPF_PROG_TEST_RUN`, fills a `struct bpf_fib_lookup` exactly as `encap.h` does and
//! returns the answer. The answers therefore agree with the XDP plane by construction
//! (forwarding disabled, blackhole and unreachable routes, missing neighbours, the route MTU),
//! in the calling thread's network namespace.
//!
//! **Cache and invalidation** — the XDP forwarder's next-hop cache (`stator_nh`, docs/xdp.md),
//! per packet thread: a successful answer for (backend, ingress interface) is reused for
//! `dataplane.next_hop_cache` (1 s by default) for outer packets no longer than one the kernel
//! already accepted; a longer one asks again (the route MTU is the kernel's to check). Failures
//! (no route, no neighbour, too long) are never cached, so a resolved neighbour is used from
//! the next packet on. Invalidation is by age only: a changed route or neighbour applies within
//! the cache lifetime, as in XDP; `next_hop_cache = "0s"` asks the kernel for every packet
//! (about 1–2 µs each here: a system call instead of a helper call).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::OwnedFd;

use stator_abi::{FibQueryRec, STATOR_FAMILY_V4, STATOR_FAMILY_V6, STATOR_FIBQ_OFF};
use stator_core::{FibError, FibQuery, NextHop, NextHops};
use stator_xdp::testrun::{TestRunOpts, run_xdp};

/// `BPF_FIB_LKUP_RET_*`.
mod rc {
    pub const SUCCESS: i32 = 0;
    pub const BLACKHOLE: i32 = 1;
    pub const UNREACHABLE: i32 = 2;
    pub const PROHIBIT: i32 = 3;
    pub const NOT_FWDED: i32 = 4;
    pub const FWD_DISABLED: i32 = 5;
    pub const NO_NEIGH: i32 = 7;
    pub const FRAG_NEEDED: i32 = 8;
}

#[derive(Debug, Clone, Copy)]
struct Cached {
    stamp_ns: u64,
    ok_len: u16,
    hop: NextHop,
}

/// What a [`KernelFib`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FibStats {
    /// Questions answered from the cache.
    pub hits: u64,
    /// Questions asked of the kernel.
    pub lookups: u64,
    /// Test runs that failed (answered as [`FibError::Unsupported`]: drop `fib`).
    pub errors: u64,
}

/// The kernel's FIB through `stator_fibq`, with the XDP forwarder's next-hop cache. One per
/// packet thread (it is not `Sync`).
#[derive(Debug)]
pub struct KernelFib {
    prog: OwnedFd,
    lifetime_ns: u64,
    tx_ports: Vec<u32>,
    now: Cell<u64>,
    cache: RefCell<HashMap<(IpAddr, u32), Cached>>,
    stats: Cell<FibStats>,
}

impl KernelFib {
    /// A FIB asking through program `prog` (`stator_fibq`), caching answers for `lifetime_ns`
    /// (0: no cache), redirecting only to `tx_ports`.
    pub fn new(prog: OwnedFd, lifetime_ns: u64, tx_ports: Vec<u32>) -> Self {
        Self {
            prog,
            lifetime_ns,
            tx_ports,
            now: Cell::new(0),
            cache: RefCell::new(HashMap::new()),
            stats: Cell::new(FibStats::default()),
        }
    }

    /// Sets the time of the next questions (once per batch).
    #[inline]
    pub fn set_now(&self, now_ns: u64) {
        self.now.set(now_ns);
    }

    /// What it did so far.
    pub fn stats(&self) -> FibStats {
        self.stats.get()
    }

    fn bump(&self, f: impl FnOnce(&mut FibStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// Asks the kernel.
    fn ask(&self, q: &FibQuery) -> Result<NextHop, FibError> {
        let mut rec = FibQueryRec {
            ifindex: q.ingress_ifindex,
            tot_len: q.tot_len,
            l4_protocol: q.l4_protocol,
            rc: -1,
            ..FibQueryRec::default()
        };
        match (q.src, q.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                rec.family = STATOR_FAMILY_V4 as u8;
                rec.src[..4].copy_from_slice(&s.octets());
                rec.dst[..4].copy_from_slice(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                rec.family = STATOR_FAMILY_V6 as u8;
                rec.src = s.octets();
                rec.dst = d.octets();
            }
            _ => return Err(FibError::Unsupported),
        }
        let mut frame = vec![0u8; STATOR_FIBQ_OFF as usize];
        frame.extend_from_slice(&rec.to_bytes());
        self.bump(|s| s.lookups += 1);
        let answer = run_xdp(&self.prog, &frame, TestRunOpts::default())
            .ok()
            .and_then(|out| FibQueryRec::from_bytes(out.data.get(STATOR_FIBQ_OFF as usize..)?));
        let Some(a) = answer else {
            self.bump(|s| s.errors += 1);
            return Err(FibError::Unsupported);
        };
        match a.rc {
            rc::SUCCESS => Ok(NextHop {
                ifindex: a.ifindex,
                src_mac: a.smac,
                dst_mac: a.dmac,
                // the kernel checked tot_len against the route's MTU; a longer packet asks again
                mtu: u32::MAX,
            }),
            rc::NO_NEIGH => Err(FibError::NoNeigh),
            rc::FRAG_NEEDED => Err(FibError::FragNeeded),
            rc::BLACKHOLE => Err(FibError::Blackhole),
            rc::UNREACHABLE => Err(FibError::Unreachable),
            rc::PROHIBIT => Err(FibError::Prohibit),
            rc::NOT_FWDED => Err(FibError::NoRoute),
            rc::FWD_DISABLED => Err(FibError::ForwardingDisabled),
            -1 => {
                self.bump(|s| s.errors += 1);
                Err(FibError::Unsupported)
            }
            _ => Err(FibError::Unsupported),
        }
    }
}

impl NextHops for KernelFib {
    fn next_hop(&self, q: &FibQuery) -> Result<NextHop, FibError> {
        if self.lifetime_ns == 0 {
            return self.ask(q);
        }
        let now = self.now.get();
        let key = (q.dst, q.ingress_ifindex);
        let fresh = self
            .cache
            .borrow()
            .get(&key)
            .copied()
            .filter(|c| now >= c.stamp_ns && now - c.stamp_ns < self.lifetime_ns);
        if let Some(c) = fresh
            && q.tot_len <= c.ok_len
        {
            self.bump(|s| s.hits += 1);
            return Ok(c.hop);
        }
        let hop = self.ask(q)?;
        let entry = match fresh {
            // same key, a longer packet passed: raise the bar, keep the stamp
            Some(c) => Cached {
                ok_len: c.ok_len.max(q.tot_len),
                hop,
                ..c
            },
            None => Cached {
                stamp_ns: now,
                ok_len: q.tot_len,
                hop,
            },
        };
        self.cache.borrow_mut().insert(key, entry);
        Ok(hop)
    }

    fn is_tx_port(&self, ifindex: u32) -> bool {
        self.tx_ports.contains(&ifindex)
    }
}
