//! The `stator_proxy_udp_*` families: datagrams, session ends, batching and drops by reason of
//! the UDP listeners (their sessions and bytes are in the `stator_proxy_connections_*` and
//! `stator_proxy_bytes_total` families every listener has).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use stator_proxy::{ListenerView, Protocol, UdpDrop};

use super::metrics::{Exposition, Kind};

/// Adds the UDP families for the UDP listeners among `listeners` (nothing when there is none).
pub(super) fn udp_metrics(e: &mut Exposition, listeners: &[ListenerView]) {
    let udp: Vec<&ListenerView> = listeners
        .iter()
        .filter(|l| l.spec.protocol == Protocol::Udp)
        .collect();
    if udp.is_empty() {
        return;
    }
    let n = |c: &AtomicU64| c.load(Relaxed) as f64;
    e.family(
        "stator_proxy_udp_datagrams_total",
        Kind::Counter,
        "Datagrams of a UDP listener, by peer (client or upstream) and direction (in = towards Stator).",
    );
    for l in &udp {
        let u = &l.stats.udp;
        for (peer, direction, c) in [
            ("client", "in", &u.datagrams_in),
            ("client", "out", &u.datagrams_out),
            ("upstream", "in", &u.upstream_datagrams_in),
            ("upstream", "out", &u.upstream_datagrams_out),
        ] {
            e.sample(
                &[
                    ("listener", &l.spec.name),
                    ("peer", peer),
                    ("direction", direction),
                ],
                n(c),
            );
        }
    }
    e.family(
        "stator_proxy_udp_sessions_ended_total",
        Kind::Counter,
        "UDP sessions ended by the idle timeout, by the unreplied timeout, by the responses hint, or reclaimed (an unreplied session whose descriptor went to a new one when the budget was spent); evictions by a full table are stator_proxy_session_evictions_total.",
    );
    for l in &udp {
        let u = &l.stats.udp;
        for (why, c) in [
            ("idle", &u.sessions_expired),
            ("unreplied", &u.sessions_unreplied),
            ("responses", &u.sessions_completed),
            ("reclaimed", &u.sessions_reclaimed),
        ] {
            e.sample(&[("listener", &l.spec.name), ("reason", why)], n(c));
        }
    }
    e.family(
        "stator_proxy_udp_syscalls_total",
        Kind::Counter,
        "Batched system calls of a UDP listener: recvmmsg on the listening socket, sendmmsg of replies, GSO sends.",
    );
    for l in &udp {
        let u = &l.stats.udp;
        for (call, c) in [
            ("recvmmsg", &u.recv_calls),
            ("sendmmsg", &u.sendmmsg_calls),
            ("gso", &u.gso_sends),
        ] {
            e.sample(&[("listener", &l.spec.name), ("call", call)], n(c));
        }
    }
    e.family(
        "stator_proxy_udp_drops_total",
        Kind::Counter,
        "Datagrams a UDP listener dropped, by reason.",
    );
    for l in &udp {
        for why in UdpDrop::ALL {
            e.sample(
                &[("listener", &l.spec.name), ("reason", why.label())],
                l.stats.udp.drops(why) as f64,
            );
        }
    }
}
