//! docs/forwarding.md §3 (VIP match) and §4 (backend selection), as pure functions.
//!
//! [`plan`] decides without changing anything: which cause, which entry, which real or drop,
//! whether to refresh and whether an insert is due. The forwarder applies a plan (counters,
//! refresh, flood guard, insert); [`Forwarder::explain`](crate::Forwarder::explain) only reports
//! it. One decision, two uses, so the tracer cannot drift from the data path.

use stator_abi::{
    CtEntry, DropReason, Encap, Family, STATOR_CT_REFRESH_NS, STATOR_NO_REAL,
    STATOR_REAL_F_DRAINING, STATOR_REAL_F_USABLE, STATOR_VADDR_F_TCP_ANY, STATOR_VADDR_F_TCP_PORTS,
    STATOR_VADDR_F_UDP_ANY, STATOR_VADDR_F_UDP_PORTS,
};

use crate::compiled::{
    CompiledReal, CompiledSnapshot, CompiledVip, IPPROTO_TCP, IPPROTO_UDP, suffix_key,
};
use crate::conntrack::ConnTable;
use crate::flow::v4_of;
use crate::verdict::Cause;

/// A VIP match: the VIP, whether it was a port-0 ("any port") entry, whether it was found by
/// prefix group and suffix.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Matched<'s> {
    pub vip: &'s CompiledVip,
    pub wildcard: bool,
    pub group: bool,
}

/// §3: the VIP of `(addr, port, proto)`. Exact: under the destination's VIP-address table flags
/// (`vaddr`, `None` when it has no slot), the exact entry if the protocol's `*_PORTS` flag is
/// set, then the port-0 entry if its `*_ANY` flag is. Then, when the generation has prefix
/// groups, §3.1's group step for `addr`.
#[inline]
pub(crate) fn match_vip(
    snap: &CompiledSnapshot,
    vaddr: Option<u32>,
    family: Family,
    addr: u128,
    port: u16,
    proto: u8,
) -> Option<Matched<'_>> {
    let (ports, any) = match proto {
        IPPROTO_TCP => (STATOR_VADDR_F_TCP_PORTS, STATOR_VADDR_F_TCP_ANY),
        IPPROTO_UDP => (STATOR_VADDR_F_UDP_PORTS, STATOR_VADDR_F_UDP_ANY),
        _ => return None,
    };
    let lookup = |port| match family {
        Family::V4 => snap.vip_v4(v4_of(addr), port, proto),
        Family::V6 => snap.vip_v6(addr, port, proto),
    };
    let exact = |vip, wildcard| Matched {
        vip,
        wildcard,
        group: false,
    };
    let flags = vaddr.unwrap_or(0);
    if flags & ports != 0
        && let Some(v) = lookup(port)
    {
        // Port 0 in the packet finds the port-0 entry here already.
        return Some(exact(v, port == 0));
    }
    if flags & any != 0
        && let Some(v) = lookup(0)
    {
        return Some(exact(v, true));
    }
    if snap.has_groups() {
        return match_group(snap, family, addr, port, proto);
    }
    None
}

/// §3.1's group step: the class of `addr`, then its suffix lengths longest first, each with the
/// exact port before port 0.
#[cold]
fn match_group(
    snap: &CompiledSnapshot,
    family: Family,
    addr: u128,
    port: u16,
    proto: u8,
) -> Option<Matched<'_>> {
    let class = snap.class_of(family, addr)?;
    for &bits in &class.lens {
        let suffix = suffix_key(family, addr, bits);
        for p in [port, 0] {
            if let Some(vip) = snap.sfx_vip(class.id, bits, family, suffix, p, proto) {
                return Some(Matched {
                    vip,
                    wildcard: p == 0,
                    group: true,
                });
            }
            if port == 0 {
                break;
            }
        }
    }
    None
}

/// `Maglev(vip)`: the real in slot `hash % M`, with the slot index.
#[inline]
pub(crate) fn maglev<'s>(
    snap: &'s CompiledSnapshot,
    vip: &CompiledVip,
    hash: u32,
) -> (Option<u32>, Result<(u32, &'s CompiledReal), DropReason>) {
    let m = vip.table.len();
    if m == 0 {
        return (None, Err(DropReason::NoBackend));
    }
    // Table sizes fit a u32 (at most STATOR_MAX_TABLE_SIZE), so the slot does too.
    let slot = (hash as usize % m) as u32;
    let real_id = vip
        .table
        .get(slot as usize)
        .copied()
        .unwrap_or(STATOR_NO_REAL);
    if real_id == STATOR_NO_REAL {
        return (Some(slot), Err(DropReason::NoBackend));
    }
    match snap.real(real_id) {
        Some(r) => (Some(slot), Ok((real_id, r))),
        None => (Some(slot), Err(DropReason::BadConfig)),
    }
}

/// What §4 decides for one packet, before anything is changed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan<'s> {
    pub cause: Cause,
    /// The entry the lookup found: its slab index and value.
    pub found: Option<(u32, CtEntry)>,
    /// On a hit: `last_seen_ns` is stale enough to be refreshed.
    pub refresh: bool,
    /// The Maglev slot, when Maglev decided and the table was not empty.
    pub slot: Option<u32>,
    /// The real, or why there is none.
    pub real: Result<(u32, &'s CompiledReal), DropReason>,
    /// After the Maglev decision, an insert is due (subject to the flood guard).
    pub insert: bool,
    /// §12.2: what the previous table said about a packet Maglev decided.
    pub second: Second,
}

/// §12.2's outcome for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Second {
    /// Not asked, or the previous table agrees (or names nobody): the ordinary path.
    No,
    /// Sent with a second chance naming this real (never inserted): `sc_sent`.
    Sent(u32),
    /// Due, but not GUE toward the new backend or not the same family: `sc_unsupported`.
    Unsupported,
}

/// The inputs of [`plan`] that describe the packet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask {
    /// The flow's key in the connection table's word form.
    pub words: [u64; 5],
    /// The flow's protocol (picks the timeout).
    pub proto: u8,
    /// The connection table's hash of `key`.
    pub ct_hash: u64,
    /// The flow hash of `key`.
    pub hash: u32,
    pub now: u64,
    /// A TCP SYN without ACK.
    pub syn: bool,
    /// An ICMP error: never insert, ignore SYN.
    pub icmp_error: bool,
    /// A (first) fragment: never a second chance.
    pub frag: bool,
}

/// §12.2: after Maglev chose `real_id` (`real`) for a packet that may have a second chance.
fn second_chance(
    snap: &CompiledSnapshot,
    vip: &CompiledVip,
    hash: u32,
    real_id: u32,
    real: &CompiledReal,
) -> Second {
    let Some(prev) = vip.previous.as_deref().filter(|t| !t.is_empty()) else {
        return Second::No;
    };
    let p = prev
        .get(hash as usize % prev.len())
        .copied()
        .unwrap_or(STATOR_NO_REAL);
    if p == real_id || p == STATOR_NO_REAL {
        return Second::No;
    }
    // the same backend under another id (removed and added again) needs no second chance
    let Some(pr) = snap.real(p).filter(|r| r.flags != 0 && r.addr != real.addr) else {
        return Second::No;
    };
    if real.encap != Encap::Gue || pr.addr.is_v6() != real.addr.is_v6() {
        return Second::Unsupported;
    }
    Second::Sent(p)
}

/// §4 "Selection" (and §6's variant for ICMP errors, `ask.icmp_error`).
#[inline]
pub(crate) fn plan<'s>(
    snap: &'s CompiledSnapshot,
    vip: &CompiledVip,
    table: &ConnTable,
    ask: &Ask,
) -> Plan<'s> {
    let may_second = !ask.syn && !ask.icmp_error && !ask.frag;
    let by_maglev = |cause, found, insert: bool| {
        let (slot, real) = maglev(snap, vip, ask.hash);
        let second = match real {
            Ok((id, r)) if may_second => second_chance(snap, vip, ask.hash, id, r),
            _ => Second::No,
        };
        Plan {
            cause,
            found,
            refresh: false,
            slot,
            insert: insert && real.is_ok() && !matches!(second, Second::Sent(_)),
            real,
            second,
        }
    };
    if vip.no_ct {
        return by_maglev(Cause::NoCt, None, false);
    }
    let may_insert = !ask.icmp_error;
    if ask.syn && !ask.icmp_error {
        return by_maglev(Cause::Syn, None, true);
    }
    let Some((i, e)) = table.find(&ask.words, ask.ct_hash) else {
        return by_maglev(Cause::CtMiss, None, may_insert);
    };
    let found = Some((i, e));
    let timeout = if ask.proto == IPPROTO_TCP {
        snap.node.tcp_timeout_ns
    } else {
        snap.node.udp_timeout_ns
    };
    if ask.now >= e.last_seen_ns && ask.now - e.last_seen_ns > timeout {
        return by_maglev(Cause::CtExpired, found, may_insert);
    }
    match snap.real(e.real_id) {
        Some(r)
            if u32::from(r.flags) & (STATOR_REAL_F_USABLE | STATOR_REAL_F_DRAINING) != 0
                && r.vip_id == vip.id =>
        {
            Plan {
                cause: Cause::CtHit,
                found,
                // Unsigned difference, as in C: a last_seen in the future also refreshes
                // (docs/forwarding.md, open question on §4).
                refresh: ask.now.wrapping_sub(e.last_seen_ns) >= STATOR_CT_REFRESH_NS,
                slot: None,
                real: Ok((e.real_id, r)),
                insert: false,
                second: Second::No,
            }
        }
        _ => by_maglev(Cause::CtReselect, found, may_insert),
    }
}
