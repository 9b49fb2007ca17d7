//! # stator-bird — Stator's BGP announcer, through BIRD 2
//!
//! Layer: the edge of the control plane towards the network. Many Stator nodes sit behind a
//! router that spreads VIP traffic over them with ECMP; each node tells the router over BGP
//! which VIPs it serves (the Maglev paper, §2.1–2.2). The BGP speaker is BIRD 2 (Debian's
//! `bird2`), the usual routing daemon on Linux load-balancer hosts; this crate is how Stator
//! drives it. The controller decides *what* to announce — a VIP address while the local
//! forwarder is healthy and the VIP has a usable backend — and hands that over as
//! [`DesiredRoutes`]; this crate makes BIRD announce exactly that.
//!
//! How:
//! - [`render()`] (pure) writes the file Stator owns and BIRD `include`s: Stator's own
//!   tables, export filters, one static protocol per VIP address, and the BGP sessions from
//!   `[bgp]`. It is written atomically ([`file`]).
//! - [`BirdClient`] speaks BIRD's control-socket line protocol ([`reply`], [`show`]) directly
//!   — no `birdc` subprocess — with a timeout on every reply and a reconnect after BIRD
//!   restarts.
//! - [`Announcer`] reconciles: it asks BIRD to `configure` only when the VIP set or `[bgp]`
//!   changed, and announces or withdraws a VIP with `enable`/`disable` of its static
//!   protocol, so health changes never reconfigure anything and the BGP sessions never flap
//!   because VIPs changed. [`AnnouncerThread`] runs it on its own thread for the controller.
//! - [`withdraw`] withdraws every VIP without the controller (`stator withdraw`, run by
//!   systemd after a controller died, hung or could not start).
//!
//! Contract:
//! - BIRD announces a VIP address exactly while the latest [`DesiredRoutes`] says so (after
//!   at most one pass; passes retry with backoff while BIRD is unreachable);
//! - [`Announcer::withdraw_all`] returns `Ok` only once BIRD confirmed that no Stator route is
//!   exported on any Stator session, and returns within its timeout either way;
//! - only Stator's file is written, and only symbols starting with `stator_` plus the
//!   configured neighbour names are defined in BIRD;
//! - the file on disk always holds the latest intent BIRD accepted, so a BIRD that restarts
//!   on its own announces what Stator last wanted.
//!
//! What it must never do: decide health (it takes the desired state as given); touch the
//! kernel's routing tables or anything in BIRD outside its own file and protocols; run
//! `birdc` or any other subprocess; reconfigure BIRD because a VIP's health changed; leave a
//! file BIRD rejected in place of one it accepted; block the caller of
//! [`AnnouncerThread::set_desired`] or [`AnnouncerThread::status`] on BIRD.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod announcer;
pub mod client;
pub mod error;
pub mod file;
pub mod render;
pub mod reply;
pub mod routes;
pub mod show;
pub mod thread;
pub mod withdraw;

pub use announcer::{
    Announcer, AnnouncerOptions, AnnouncerStatus, Counters, Pass, RouteStatus, SessionStatus,
};
pub use client::{BirdClient, Reconfigure, Toggle};
pub use error::BirdError;
pub use render::render;
pub use reply::{Reply, ReplyAssembler, ReplyClass, ReplyCode, ReplyLine};
pub use routes::{DesiredRoutes, static_protocol_name};
pub use show::{Protocol, ProtocolState};
pub use thread::AnnouncerThread;
pub use withdraw::{withdraw_configured, withdraw_unconfigured};
