//! # stator-lab — a whole Maglev deployment on one machine
//!
//! Layer: test and demo infrastructure, above everything else. [`netns`] is a small, honest
//! wrapper over iproute2 and `setns(2)`: create network namespaces and veth pairs, run commands
//! and threads inside a namespace, and tear everything down again — by name prefix, so a lab
//! left behind by a crashed run is still found and removed (`down` is idempotent).
//!
//! [`lan`] builds the ECMP front of a deployment — a router and Stator nodes on one bridge —
//! and [`bird`] runs BIRD daemons in it (each with its own config, socket and pid file) and
//! reads back what tests assert: sessions, the router's kernel next hops, BGP connections.
//! [`wait`] bounds every wait and says what it waited for. [`stator`] runs `stator run` in a
//! node's namespace (pins on a bpffs of the lab's own) and talks to its admin API;
//! [`supervise`] supervises it as the packaged systemd unit does (readiness, watchdog,
//! `stator withdraw` after an unclean stop, restart on failure).
//!
//! [`topo`] builds the direct-server-return path end to end — clients, a router, load-balancer
//! nodes on one LAN, backends on another — with the sysctls, neighbour entries, GRO and MTUs
//! that XDP forwarding and decapsulation need; [`serve`] runs the backends' servers (TCP
//! identify, long-lived TCP lines, HTTP, UDP echo, long-lived TCP echo) and their clients.
//!
//! [`deploy`] puts it all together — the paper's Figure 2: a client with many addresses, a
//! BIRD router doing ECMP, Stator nodes running `stator run`, backends running `stator decap`
//! and their servers — with handles to fail and restore each part, optionally BFD between
//! router and nodes and a [`prometheus`] scraping the nodes; [`traffic`] drives bounded
//! load through it. `stator lab` and the end-to-end tests are built on these two.
//!
//! Contract: every object this crate creates carries the caller's prefix in its name; nothing
//! outside that prefix is ever touched. Operations fail with the command line and its stderr.
//! No `unsafe`: the system calls it makes beyond `std` (`setns`, `kill`) are stator-sys's.
#![forbid(unsafe_code)]

pub mod bird;
pub mod deploy;
pub mod lan;
pub mod netns;
pub mod prometheus;
pub mod serve;
pub mod stator;
pub mod supervise;
pub mod topo;
pub mod traffic;
pub mod wait;
