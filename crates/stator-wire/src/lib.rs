//! # stator-wire: packets as bytes
//!
//! This is the bottom layer of Stator. The sans-IO forwarder (`stator-core`, for checksums),
//! the AF_XDP data plane (flow steering) and the CLI's packet tools read and write packets
//! through this crate. It knows the wire formats a Maglev
//! style load balancer meets (Ethernet with one 802.1Q tag, IPv4 with options and fragments, IPv6
//! with extension headers, TCP, UDP, ICMP and ICMPv6, GRE, GUE, IP-in-IP), the Internet checksum,
//! and nothing else: no sockets, no clock, no threads, no allocation. It is `#![no_std]` without
//! `alloc`, so the compiler holds it to that.
//!
//! ## The pattern (smoltcp's)
//! Each protocol module has:
//! - a **view**, `XxxPacket<T: AsRef<[u8]>>`, that reads (and, for `T: AsMut<[u8]>`, writes)
//!   fields in place, at offsets kept in a private `mod field`. `new_unchecked` wraps a buffer;
//!   `check_len` checks that every accessor can read it; `new_checked` does both.
//! - a **representation**, `XxxRepr`, a plain value: `parse` builds one from a checked view,
//!   validating what a well-formed packet must satisfy (version, checksum); `emit` writes one
//!   into a buffer; `buffer_len` says how many bytes that needs (each type documents whether that
//!   counts the payload).
//!
//! [`flow::parse_flow`] (and [`flow::parse_ip`] for a packet without Ethernet header) is the
//! exception: the forwarder's hot path, a single pass from a frame to the flow tuple, written
//! directly on fixed-size array views for speed, and tested against the views.
//!
//! ## How it is tested
//! Inline `test_deconstruct` / `test_construct` byte vectors per protocol (checksums computed
//! independently; RFC 1071's and RFC 1624's examples for the checksum); property tests in
//! `tests/` (emit → parse round-trips for every representation, incremental checksums against
//! full ones, `parse_flow` against a byte-by-byte model, and "any bytes, no panic" with oracles);
//! and one cargo-fuzz target per parser in the top-level `fuzz/` directory (`make fuzz`), which
//! shares the property tests' oracles (`tests/common/exercise.rs`).
//!
//! ## The contract
//! - **No panic on any byte string through the checked interface.** `new_checked`, `check_len`,
//!   every `Repr::parse`, [`flow::parse_flow`] and the helpers of [`icmp`], [`ipv6ext`] and
//!   [`gue`] return an [`Error`] for bad input and never panic, whatever the bytes.
//! - **Once `check_len` has succeeded, no accessor panics** and none reads out of bounds.
//!   Setters that change a length field (`set_header_len`, `set_total_len`, ...) void that
//!   check: call it again before reading. On a view made with `new_unchecked` and never checked,
//!   accessors may panic: that is what "unchecked" means.
//! - **`emit` is exact and deterministic**: the same representation always gives the same bytes,
//!   every field documented, reserved bits zero. A failed `emit` (a value the format cannot
//!   encode, a buffer too short) returns an error before writing anything.
//! - **Lengths on the wire win over buffer lengths.** Buffers may carry trailing bytes (Ethernet
//!   padding): payload accessors end where the IP, UDP or ICMP length says, never at the end of
//!   the buffer, except where the protocol has no length field (TCP, ICMP, GRE, GUE: there the
//!   view's buffer *is* the packet, and the caller slices it with the enclosing length).
//! - `#![forbid(unsafe_code)]`; no `unwrap` or `expect` outside tests; every error a packet can
//!   cause is a value of [`Error`], which is `Copy`, so the data path turns it into a drop reason
//!   and a counter without allocating.
//!
//! ## What it does not do
//! Build a tunnel. The forwarder's encapsulation is defined once in docs/forwarding.md §5 and
//! written in C (`bpf/include/encap.h`) and in stator-core, which the differential tests hold
//! to the same bytes; an encapsulation builder here (it was `encap`) ran in no data path and
//! had drifted from that definition, so it was removed. The views here still take any
//! encapsulated frame apart (GRE, GUE, IP-in-IP).
//!
//! ## What it must never do
//! Allocate, block, read a clock, log, or depend on anything above it. It must not guess: an
//! unknown protocol is carried as a number ([`IpProtocol`], [`EtherType`]), an unsupported layout
//! (GRE routing, IPv6 jumbograms) is an error, never a silent misreading.
//!
//! Multi-byte fields are big-endian on the wire and native integers in the API. Lengths and
//! offsets are in bytes, fragment offsets included.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod checksum;
mod error;
pub mod ethernet;
pub mod flow;
pub mod gre;
pub mod gue;
pub mod icmp;
pub mod icmpv4;
pub mod icmpv6;
mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod ipv6ext;
pub mod tcp;
pub mod udp;

pub use error::{Error, Result};
pub use ethernet::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr, VlanTag};
pub use flow::{FlowTuple, parse_flow, parse_ip};
pub use gre::{GrePacket, GreRepr};
pub use gue::{GuePacket, GueRepr, GueVariant};
pub use icmp::InvokingPacket;
pub use icmpv4::{Icmpv4Message, Icmpv4Packet, Icmpv4Repr};
pub use icmpv6::{Icmpv6Message, Icmpv6Packet, Icmpv6Repr};
pub use ip::{FragmentInfo, IpPair, IpProtocol};
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub use ipv6ext::{
    Ipv6ExtHeader, Ipv6ExtHeaderRepr, Ipv6FragmentHeader, Ipv6FragmentRepr, Ipv6UpperLayer,
};
pub use tcp::{TcpFlags, TcpPacket, TcpRepr};
pub use udp::{UdpPacket, UdpRepr};
