//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! One test binary for the XDP forwarder and the decap program: BPF_PROG_TEST_RUN, pinning,
//! namespaces: each module was a test binary of its own, and each linked the whole crate and its
//! dependencies again (issue 26). Each module keeps its own documentation; its tests run in
//! parallel with those of the others, so each keeps its own names, directories and ports.

#[path = "../common/mod.rs"]
mod common;
#[path = "../decap_fixture/mod.rs"]
mod decap_fixture;
#[path = "../diff/mod.rs"]
mod diff;
#[path = "../fixtures/mod.rs"]
mod fixtures;
#[path = "../tunnel/mod.rs"]
mod tunnel;

mod atomic;
mod decap;
mod decap_agree;
mod decap_attach;
mod decap_rejects;
mod decap_second_chance;
mod differential;
mod errors;
mod forwarding;
mod forwarding_icmp;
mod forwarding_malformed;
mod nexthop;
mod pinning;
mod smoke;
mod xdp_conntrack;
mod xdp_ct4;
mod xdp_fragments_redirects;
