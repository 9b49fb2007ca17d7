//! Codes shared with the header: the family and encapsulation tags, the forwarder's drop
//! reasons (which double as metric labels) and the indices of its global counters.

use crate::generated::*;

/// Address family tag of keys and reals (`enum stator_family`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// IPv4.
    V4 = STATOR_FAMILY_V4 as u8,
    /// IPv6.
    V6 = STATOR_FAMILY_V6 as u8,
}

/// Encapsulation toward a backend (`enum stator_encap`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Encap {
    /// Outer IP + 4-byte GRE header (RFC 2784); the paper's default.
    #[default]
    Gre = STATOR_ENCAP_GRE as u8,
    /// Outer IP only (IPIP, IP6IP6, or mixed 4-in-6 / 6-in-4).
    Ipip = STATOR_ENCAP_IPIP as u8,
    /// Outer IP + UDP + 4-byte GUE variant 0 header.
    Gue = STATOR_ENCAP_GUE as u8,
}

impl Encap {
    /// The encapsulation with this ABI code, if any.
    pub fn from_code(code: u8) -> Option<Self> {
        match u32::from(code) {
            STATOR_ENCAP_GRE => Some(Self::Gre),
            STATOR_ENCAP_IPIP => Some(Self::Ipip),
            STATOR_ENCAP_GUE => Some(Self::Gue),
            _ => None,
        }
    }
}

/// Why the forwarder dropped a packet (`enum stator_drop_reason`). The codes double as metric
/// labels ([`DropReason::label`]) and never change once released.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)] // each variant is documented in stator_abi.h
pub enum DropReason {
    MalformedL3 = STATOR_DROP_MALFORMED_L3 as u8,
    MalformedL4 = STATOR_DROP_MALFORMED_L4 as u8,
    Fragment = STATOR_DROP_FRAGMENT as u8,
    Ipv6ExtLimit = STATOR_DROP_IPV6_EXT_LIMIT as u8,
    NoBackend = STATOR_DROP_NO_BACKEND as u8,
    NoSource = STATOR_DROP_NO_SOURCE as u8,
    Fib = STATOR_DROP_FIB as u8,
    NoNeigh = STATOR_DROP_NO_NEIGH as u8,
    TxPort = STATOR_DROP_TX_PORT as u8,
    Adjust = STATOR_DROP_ADJUST as u8,
    Icmp = STATOR_DROP_ICMP as u8,
    BadConfig = STATOR_DROP_BAD_CONFIG as u8,
    Mtu = STATOR_DROP_MTU as u8,
    XskFrame = STATOR_DROP_XSK_FRAME as u8,
    XskSocket = STATOR_DROP_XSK_SOCKET as u8,
    FragHold = STATOR_DROP_FRAG_HOLD as u8,
    Redirect = STATOR_DROP_REDIRECT as u8,
}

impl DropReason {
    /// Every reason, in code order.
    pub const ALL: [DropReason; STATOR_DROP_MAX as usize - 1] = [
        Self::MalformedL3,
        Self::MalformedL4,
        Self::Fragment,
        Self::Ipv6ExtLimit,
        Self::NoBackend,
        Self::NoSource,
        Self::Fib,
        Self::NoNeigh,
        Self::TxPort,
        Self::Adjust,
        Self::Icmp,
        Self::BadConfig,
        Self::Mtu,
        Self::XskFrame,
        Self::XskSocket,
        Self::FragHold,
        Self::Redirect,
    ];

    /// The numeric code (index into the `stator_drops` per-CPU array).
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The reason with this code; `None` for 0 (no drop) and unknown codes.
    pub fn from_code(code: u32) -> Option<Self> {
        Self::ALL.iter().copied().find(|r| r.code() == code)
    }

    /// The metric label, e.g. `"no_backend"`.
    pub fn label(self) -> &'static str {
        DROP_REASON_NAMES[self as usize]
    }
}

/// Index of a global per-CPU counter (`enum stator_counter`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)] // each variant is documented in stator_abi.h
pub enum Counter {
    ActAborted = STATOR_CNT_ACT_ABORTED,
    ActDrop = STATOR_CNT_ACT_DROP,
    ActPass = STATOR_CNT_ACT_PASS,
    ActTx = STATOR_CNT_ACT_TX,
    ActRedirect = STATOR_CNT_ACT_REDIRECT,
    CtHit = STATOR_CNT_CT_HIT,
    CtMiss = STATOR_CNT_CT_MISS,
    CtReselect = STATOR_CNT_CT_RESELECT,
    CtInsert = STATOR_CNT_CT_INSERT,
    CtExpired = STATOR_CNT_CT_EXPIRED,
    CtGuard = STATOR_CNT_CT_GUARD,
    IcmpErrorFwd = STATOR_CNT_ICMP_ERROR_FWD,
    IcmpEchoReply = STATOR_CNT_ICMP_ECHO_REPLY,
    NonVip = STATOR_CNT_NON_VIP,
    NonIp = STATOR_CNT_NON_IP,
    SelfTest = STATOR_CNT_SELF_TEST,
    FragRedirect = STATOR_CNT_FRAG_REDIRECT,
    FragRecord = STATOR_CNT_FRAG_RECORD,
    FragHit = STATOR_CNT_FRAG_HIT,
    ActHold = STATOR_CNT_ACT_HOLD,
    Failover = STATOR_CNT_FAILOVER,
    RedirectRx = STATOR_CNT_REDIRECT_RX,
    RedirectAgain = STATOR_CNT_REDIRECT_AGAIN,
    GroupMatch = STATOR_CNT_GROUP_MATCH,
    TraceReport = STATOR_CNT_TRACE_REPORT,
    TraceLimited = STATOR_CNT_TRACE_LIMITED,
    TraceLost = STATOR_CNT_TRACE_LOST,
    TraceUnauth = STATOR_CNT_TRACE_UNAUTH,
    StalePass = STATOR_CNT_STALE_PASS,
    ScSent = STATOR_CNT_SC_SENT,
    ScUnsupported = STATOR_CNT_SC_UNSUPPORTED,
}

impl Counter {
    /// Every counter, in index order.
    pub const ALL: [Counter; STATOR_CNT_MAX as usize] = [
        Self::ActAborted,
        Self::ActDrop,
        Self::ActPass,
        Self::ActTx,
        Self::ActRedirect,
        Self::CtHit,
        Self::CtMiss,
        Self::CtReselect,
        Self::CtInsert,
        Self::CtExpired,
        Self::CtGuard,
        Self::IcmpErrorFwd,
        Self::IcmpEchoReply,
        Self::NonVip,
        Self::NonIp,
        Self::SelfTest,
        Self::FragRedirect,
        Self::FragRecord,
        Self::FragHit,
        Self::ActHold,
        Self::Failover,
        Self::RedirectRx,
        Self::RedirectAgain,
        Self::GroupMatch,
        Self::TraceReport,
        Self::TraceLimited,
        Self::TraceLost,
        Self::TraceUnauth,
        Self::StalePass,
        Self::ScSent,
        Self::ScUnsupported,
    ];

    /// The index in the `stator_counters` per-CPU array.
    pub fn index(self) -> u32 {
        self as u32
    }

    /// The metric label, e.g. `"ct_hit"`.
    pub fn label(self) -> &'static str {
        COUNTER_NAMES[self as usize]
    }

    /// Where the counter is exported in `/metrics`: its family and, in a family of several
    /// counters, the label that tells it apart. The match is exhaustive, so a new counter
    /// cannot be added without deciding where operators will find it. The label values are
    /// the public names dashboards and alerts already use, not [`label`](Self::label).
    pub fn exported(self) -> Exported {
        let (family, label) = match self {
            Self::ActPass => ("stator_packets_total", Some(("action", "pass"))),
            Self::ActDrop => ("stator_packets_total", Some(("action", "drop"))),
            Self::ActTx => ("stator_packets_total", Some(("action", "tx"))),
            Self::ActRedirect => ("stator_packets_total", Some(("action", "redirect"))),
            Self::ActAborted => ("stator_packets_total", Some(("action", "aborted"))),
            Self::ActHold => ("stator_packets_total", Some(("action", "hold"))),
            Self::CtHit => ("stator_conntrack_lookups_total", Some(("result", "hit"))),
            Self::CtMiss => ("stator_conntrack_lookups_total", Some(("result", "miss"))),
            Self::CtReselect => (
                "stator_conntrack_lookups_total",
                Some(("result", "reselect")),
            ),
            Self::CtExpired => (
                "stator_conntrack_lookups_total",
                Some(("result", "expired")),
            ),
            Self::CtInsert => ("stator_conntrack_inserts_total", None),
            Self::CtGuard => ("stator_conntrack_guard_total", None),
            Self::NonVip => ("stator_passed_packets_total", Some(("reason", "non_vip"))),
            Self::NonIp => ("stator_passed_packets_total", Some(("reason", "non_ip"))),
            Self::StalePass => ("stator_passed_packets_total", Some(("reason", "stale"))),
            Self::IcmpEchoReply => ("stator_icmp_total", Some(("kind", "echo_reply"))),
            Self::IcmpErrorFwd => ("stator_icmp_total", Some(("kind", "error_forwarded"))),
            Self::SelfTest => ("stator_self_test_packets_total", None),
            Self::FragRedirect => ("stator_fragments_total", Some(("event", "redirected"))),
            Self::FragRecord => ("stator_fragments_total", Some(("event", "recorded"))),
            Self::FragHit => ("stator_fragments_total", Some(("event", "followed"))),
            Self::RedirectRx => ("stator_redirects_total", Some(("event", "received"))),
            Self::Failover => ("stator_redirects_total", Some(("event", "failover"))),
            Self::RedirectAgain => ("stator_redirects_total", Some(("event", "again"))),
            Self::GroupMatch => ("stator_group_matches_total", None),
            Self::TraceReport => ("stator_trace_reports_total", Some(("result", "reported"))),
            Self::TraceLimited => ("stator_trace_reports_total", Some(("result", "limited"))),
            Self::TraceLost => ("stator_trace_reports_total", Some(("result", "lost"))),
            Self::TraceUnauth => (
                "stator_trace_reports_total",
                Some(("result", "unauthenticated")),
            ),
            Self::ScSent => ("stator_second_chance_total", Some(("event", "sent"))),
            Self::ScUnsupported => ("stator_second_chance_total", Some(("event", "unsupported"))),
        };
        Exported { family, label }
    }
}

/// Where a [`Counter`] is exported in `/metrics` ([`Counter::exported`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exported {
    /// The metric family, e.g. `stator_packets_total`.
    pub family: &'static str,
    /// The label (name, value) that tells the family's counters apart; `None` for a family of
    /// one.
    pub label: Option<(&'static str, &'static str)>,
}
