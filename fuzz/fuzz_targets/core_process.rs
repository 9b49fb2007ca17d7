//! Fuzzes stator-core's forwarding decision, `Forwarder::process`, with sequences of frames
//! under a snapshot the input shapes, so that every decision of docs/forwarding.md is reached
//! with state behind it: VIP classes and longest-suffix matches (§3.1), the connection table's
//! rules and its LRU bound (§4: SYNs, hits, expiry, reselection, the flood guard), failover
//! (§10.1), received redirects with and without recursion control (§10.2), fragments first,
//! later, held, released and expired, sent to their 3-tuple owner or decided here (§9), trace
//! marks authentic or not and the report window (§11), ICMP errors and echoes (§6), and
//! malformed frames of every layer.
//!
//! Input: the world first (`core_process/world.rs`: node, forwarder and timeouts, peers,
//! classes, VIPs with their backends, how the second snapshot differs), then records
//! (`core_process/frames.rs`: a frame built from a few bytes or taken raw, a snapshot switch,
//! the clock stepping back, time passing, the controller's heartbeat refreshed or turned off)
//! until the input ends.
//!
//! The data plane's holder runs as the AF_XDP plane runs it (`HoldQueue`): a held fragment is
//! queued; after every record the frames whose datagram now has a fresh record are processed
//! again, exactly as received, and those that waited too long expire.
//!
//! Oracles (`core_process/oracle.rs`): no panic, whatever the frame, snapshot or clock; one
//! action counter per frame (a frame run again by the holder is a run of its own); one drop
//! reason per drop; a frame untouched unless transmitted; a transmitted frame well-formed
//! (stator-wire) and byte for byte stator-testkit's §5 encapsulation of the received IP packet
//! (or an echo reply with correct checksums); a redirect goes to another node, carries GRE
//! recursion control, and is never made from a received redirect; tables within their
//! bounds; `explain` and `table_hash` agree with `process`; a frame the holder releases is
//! not held again; the holder within its bounds, every frame it took released, expired or
//! still held.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stator_core::{Action, Beat, Forwarder, HoldQueue};

#[path = "core_process/frames.rs"]
mod frames;
#[path = "core_process/input.rs"]
mod input;
#[path = "core_process/oracle.rs"]
mod oracle;
#[path = "core_process/world.rs"]
mod world;

use frames::{Frame, Record};

fuzz_target!(|data: &[u8]| {
    let mut r = input::Reader::new(data);
    let Some(world) = world::read(&mut r) else {
        return;
    };
    let mut fwd = Forwarder::new(world.config);
    let mut holder: HoldQueue = HoldQueue::new(world.hold);
    let mut now: u64 = 1_000_000_000_000;
    let mut which = 0;
    while let Some(record) = frames::read(&mut r, &world.seal_key) {
        match record {
            Record::Switch => which ^= 1,
            // never 0: the data path's clock is never 0 once the machine is up
            Record::Back(ns) => now = now.saturating_sub(ns).max(1),
            Record::Tick(ns) => now += ns,
            Record::Beat(after) => fwd.set_beat(Beat {
                refreshed_ns: now,
                stale_after_ns: after,
            }),
            Record::Frame(f) => {
                now += f.dt;
                let v = oracle::process(&mut fwd, &world, which, now, &f);
                if v.action == Action::Hold {
                    let key = fwd.held().expect("a held frame names its datagram");
                    // a frame that does not fit is dropped, counted `full`
                    let _ = holder.push(now, key, f.ingress, f.bytes.clone());
                }
            }
        }
        // the holder's turn
        let timeout = world.plain[which].node.frag_timeout_ns;
        let frags = fwd.frag_table();
        let (mut ready, mut expired) = (Vec::new(), Vec::new());
        holder.release(
            now,
            |k| frags.is_fresh(k, now, timeout),
            &mut ready,
            &mut expired,
        );
        for h in ready {
            let again = Frame {
                bytes: h.frame,
                cpu: 0,
                ingress: h.ingress,
                headroom: 256,
                dt: 0,
                plain: None,
                ip_len: None,
            };
            let v = oracle::process(&mut fwd, &world, which, now, &again);
            assert_ne!(v.action, Action::Hold, "a released fragment is held again");
        }
        let limits = holder.limits();
        assert!(holder.len() <= limits.max_frames && holder.bytes() <= limits.max_bytes);
        let s = holder.stats();
        assert_eq!(s.held, s.released + s.expired + holder.len() as u64);
    }
});
