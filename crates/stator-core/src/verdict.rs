//! What the forwarder decided, and why: [`Verdict`] for a processed frame, [`Trace`] for a flow
//! asked about with [`Forwarder::explain`](crate::Forwarder::explain).

use stator_abi::{Counter, CtEntry, DropReason, FlowKey};

use crate::snapshot::{RealId, VipId};

/// What the data plane does with the frame: the XDP action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Hand the frame, unmodified, to the kernel (`XDP_PASS`; the AF_XDP plane's TAP).
    Pass,
    /// Drop it, for this reason. The frame is unmodified except for [`DropReason::TxPort`],
    /// which happens after the rewrite (as `bpf_redirect_map` fails after it).
    Drop(DropReason),
    /// Send the rewritten frame back out of the interface it came in on (`XDP_TX`).
    Tx,
    /// Send the rewritten frame out of another interface (`XDP_REDIRECT` through the devmap).
    Redirect {
        /// The egress interface, as the FIB returned it.
        ifindex: u32,
    },
    /// A fragment that arrived before its first (docs/forwarding.md §9): the data plane keeps
    /// the frame, unmodified, and processes it again once its datagram has a record
    /// ([`Forwarder::held`](crate::Forwarder::held) names it). XDP returns `XDP_DROP` after
    /// copying it to `stator_hold`; counted `act_hold`.
    Hold,
}

impl Action {
    /// The action counter (`act_*`) this action is counted in.
    pub fn counter(self) -> Counter {
        match self {
            Action::Pass => Counter::ActPass,
            Action::Drop(_) => Counter::ActDrop,
            Action::Tx => Counter::ActTx,
            Action::Redirect { .. } => Counter::ActRedirect,
            Action::Hold => Counter::ActHold,
        }
    }

    /// The drop reason, for a drop.
    pub fn drop_reason(self) -> Option<DropReason> {
        match self {
            Action::Drop(r) => Some(r),
            _ => None,
        }
    }

    /// Whether the frame leaves rewritten toward a backend or client (TX or REDIRECT).
    pub fn is_transmit(self) -> bool {
        matches!(self, Action::Tx | Action::Redirect { .. })
    }
}

/// Why the real was chosen the way it was (docs/forwarding.md §4 "Selection").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// The VIP has `NO_CT`: Maglev alone decided; the table was not consulted.
    NoCt,
    /// A TCP SYN without ACK: Maglev decided; the table was not consulted (counted `ct_miss`).
    Syn,
    /// A connection-table entry for a usable real of this VIP was reused.
    CtHit,
    /// No entry: Maglev decided.
    CtMiss,
    /// An entry idle longer than the protocol's timeout: Maglev decided.
    CtExpired,
    /// An entry whose real is gone, unusable or another VIP's: Maglev decided.
    CtReselect,
}

impl Cause {
    /// The connection-table counter this cause is counted in (`None` for [`Cause::NoCt`]).
    pub fn counter(self) -> Option<Counter> {
        match self {
            Cause::NoCt => None,
            Cause::Syn | Cause::CtMiss => Some(Counter::CtMiss),
            Cause::CtHit => Some(Counter::CtHit),
            Cause::CtExpired => Some(Counter::CtExpired),
            Cause::CtReselect => Some(Counter::CtReselect),
        }
    }
}

/// What happened to the connection table after a Maglev decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Insert {
    /// No insert was due: a hit, a `NO_CT` VIP, an ICMP error, or Maglev found no real.
    NotAttempted,
    /// The decision was written to the table (`ct_insert`).
    Inserted,
    /// The SYN-flood guard's window was full: Maglev alone decided (`ct_guard`).
    GuardHeld,
}

/// How the real was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Selection {
    /// Why.
    pub cause: Cause,
    /// The index within the VIP's Maglev table (`hash % M`) when Maglev decided (also when the
    /// slot was empty and the packet was dropped `no_backend`); `None` for a hit or an empty
    /// table.
    pub slot: Option<u32>,
    /// The connection-table insert that followed.
    pub insert: Insert,
}

/// The result of [`Forwarder::process`](crate::Forwarder::process): the action, and what the
/// packet tracer shows about how it was reached. Fields are `None` when the packet never got
/// that far (a non-VIP packet has no VIP; a malformed one no flow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Verdict {
    /// What to do with the frame.
    pub action: Action,
    /// The matched VIP.
    pub vip: Option<VipId>,
    /// The chosen real (set as soon as it is chosen, so a later drop, e.g. `no_source` or
    /// `fib`, still says which backend the packet was meant for).
    pub real: Option<RealId>,
    /// How the real was chosen (or, on `no_backend` / `bad_config`, how Maglev failed).
    pub selection: Option<Selection>,
    /// The flow the decision keyed on: as received for TCP/UDP; for an ICMP frag-needed / packet
    /// too big, the quoted flow reversed (the flow of the connection the error is about).
    pub flow: Option<FlowKey>,
    /// The flow hash of [`Verdict::flow`].
    pub hash: Option<u32>,
}

impl Verdict {
    /// A verdict with only an action.
    pub fn new(action: Action) -> Self {
        Self {
            action,
            vip: None,
            real: None,
            selection: None,
            flow: None,
            hash: None,
        }
    }
}

/// How a flow matched a VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VipMatch {
    /// The VIP.
    pub id: VipId,
    /// Matched on the VIP's port-0 ("any port") entry rather than an exact port.
    pub wildcard: bool,
}

/// Where a traced flow would end up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceOutcome {
    /// Not addressed to a VIP (or not TCP/UDP): the packet would be passed to the kernel.
    NotVip,
    /// The decision would drop it (`no_backend` or `bad_config`).
    Drop(DropReason),
    /// This real would get it.
    Real(RealId),
}

/// The answer of [`Forwarder::explain`](crate::Forwarder::explain): which backend a flow would
/// get now, on one CPU, and why. Computed without changing any state or counter. Covers §3–§4
/// of docs/forwarding.md (VIP match and backend selection); the encapsulation and next-hop
/// steps, which depend on the frame and the FIB, are not simulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trace {
    /// The flow, in connection-table key form (`None` when its two addresses are of
    /// different families).
    pub flow: Option<FlowKey>,
    /// Its flow hash (0 when `flow` is `None`).
    pub hash: u32,
    /// The VIP it matches.
    pub vip: Option<VipMatch>,
    /// The connection-table entry found for it, if the table would be consulted.
    pub ct_entry: Option<CtEntry>,
    /// How the real would be chosen; for `insert`, what the SYN-flood guard would allow now.
    pub selection: Option<Selection>,
    /// The result.
    pub outcome: TraceOutcome,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_map_to_their_counters() {
        assert_eq!(Action::Pass.counter(), Counter::ActPass);
        assert_eq!(Action::Drop(DropReason::Fib).counter(), Counter::ActDrop);
        assert_eq!(Action::Tx.counter(), Counter::ActTx);
        assert_eq!(
            Action::Redirect { ifindex: 3 }.counter(),
            Counter::ActRedirect
        );
        assert_eq!(
            Action::Drop(DropReason::Mtu).drop_reason(),
            Some(DropReason::Mtu)
        );
        assert!(Action::Tx.is_transmit() && !Action::Pass.is_transmit());
    }

    #[test]
    fn causes_map_to_ct_counters() {
        assert_eq!(Cause::NoCt.counter(), None);
        assert_eq!(Cause::Syn.counter(), Some(Counter::CtMiss));
        assert_eq!(Cause::CtMiss.counter(), Some(Counter::CtMiss));
        assert_eq!(Cause::CtHit.counter(), Some(Counter::CtHit));
        assert_eq!(Cause::CtExpired.counter(), Some(Counter::CtExpired));
        assert_eq!(Cause::CtReselect.counter(), Some(Counter::CtReselect));
    }
}
