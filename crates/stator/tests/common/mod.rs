//! What the lab's end-to-end test files share.

use std::path::Path;

use stator_lab::netns::Netns;
use stator_xdp::AttachMode;

/// The pass-through XDP program on a router port facing a node (veth delivers a node's XDP_TX
/// frames only to a peer with an XDP program; docs/xdp.md) — the deployment's `peer_xdp` hook.
pub fn peer_xdp(router: &Netns, port: &str, pin: &Path) -> Result<(), String> {
    let (pin, port) = (pin.to_owned(), port.to_owned());
    router
        .run_in(move || stator_xdp::attach_pass(&pin, &port, AttachMode::Native))
        .map_err(|e| e.to_string())?
        .map(|_| ())
        .map_err(|e| e.to_string())
}
