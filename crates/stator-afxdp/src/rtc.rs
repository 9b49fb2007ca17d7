//! A run-to-completion thread (`dataplane.afxdp.threading = "run_to_completion"`): what the
//! paper's design reduces to when a queue's packets already reach one thread — no steering
//! hop, no queue between threads, no muxing hop (docs/afxdp.md "Run to completion").
//!
//! Thread `q` owns queue `q`'s socket on every interface — the four rings of each — its own
//! share of the pool's frames, and its own `Forwarder` (connection table). One turn:
//! 1. **Completions** of its sockets back to its free list; frames that waited for room in a
//!    TX ring (its backlog) written first.
//! 2. **For each of its RX rings**: read a batch; decide it in place ([`Decider`], the very
//!    code a steered packet thread runs); write the decided frames into the TX ring of the
//!    socket each leaves by — its own socket of the same queue number on the egress
//!    interface, so a frame that leaves by another interface never changes hands — or back to
//!    its free list.
//! 3. **Fill**: its free frames back to its fill rings.
//! 4. **Flush**: every TX ring written this turn is published and the kernel woken (when it
//!    asks: need_wakeup) — one `sendto` per socket per batch (copy mode: per 32 frames).
//!
//! Frames never cross threads, so neither does the pool: a frame received on one of the
//! thread's sockets is sent on one of its sockets and completed back to the same thread.
//! Idle, it spins, then sleeps in `ppoll` on its RX sockets. Its counters are the I/O thread's
//! ([`IoStats`](crate::io::IoStats), shared by the plane's threads) and a packet thread's
//! ([`WorkerStats`](crate::worker::WorkerStats), its own).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::fib::KernelFib;
use crate::io::Io;
use crate::umem::{Frame, FrameState};
use crate::worker::{Decider, PacketFib};

/// Everything a run-to-completion thread owns: its sockets' rings and free frames (an [`Io`]
/// without packet threads) and its decision.
pub(crate) struct Rtc<F = KernelFib> {
    pub index: usize,
    pub io: Io,
    pub decider: Decider<F>,
}

impl<F> std::fmt::Debug for Rtc<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rtc")
            .field("index", &self.index)
            .field("io", &self.io)
            .finish()
    }
}

impl<F: PacketFib> Rtc<F> {
    /// The thread's body. Returns what it owns once stopped (the tests count its frames).
    pub(crate) fn run(mut self) -> Self {
        if let Some(cpu) = self.io.cpu
            && let Err(e) = stator_sys::cpu::pin_to_cpu(cpu)
        {
            tracing::warn!(thread = self.index, cpu, error = %e, "could not pin a run-to-completion thread");
        }
        // ppoll's timeout must mean microseconds, not the default 50 µs of timer slack
        crate::sys::set_timer_slack_ns(1_000);
        let shared = Arc::clone(&self.decider.shared);
        let published = Arc::clone(&self.io.published);
        let mut snap = published.current();
        let mut gen_seen = published.generation.load(Ordering::Acquire);
        shared.seen_gen.store(gen_seen, Ordering::Release);
        let mut rx_buf: Vec<Frame> = Vec::with_capacity(self.io.batch as usize);
        let share = self.fill_share();
        let spin_ns = self.io.spin.as_nanos() as u64;
        let mut idle_since: Option<u64> = None;
        while !published.stop.load(Ordering::Relaxed) {
            shared.heartbeat.fetch_add(1, Ordering::Relaxed);
            let g = published.generation.load(Ordering::Acquire);
            if g != gen_seen {
                snap = published.current();
                gen_seen = g;
                shared.seen_gen.store(g, Ordering::Release);
            }
            let now = stator_sys::clock::monotonic_ns();
            if self.turn(&snap, now, &mut rx_buf, share) != 0 {
                idle_since = None;
                continue;
            }
            let since = *idle_since.get_or_insert(now);
            if now - since < spin_ns {
                std::hint::spin_loop();
                continue;
            }
            if !self.decider.hold.is_empty() {
                self.decider.service_hold(&snap);
                self.send(now);
                self.io.flush_turn();
            }
            shared.stats.parks.fetch_add(1, Ordering::Relaxed);
            self.io.sleep(now, false);
            idle_since = None;
        }
        self.decider.drain_hold();
        self.send(stator_sys::clock::monotonic_ns());
        self
    }

    /// One turn: completions, each RX ring's batch decided and written to TX, fill, flush.
    /// Returns the work done (0: idle).
    pub(crate) fn turn(
        &mut self,
        snap: &stator_core::CompiledSnapshot,
        now: u64,
        rx_buf: &mut Vec<Frame>,
        share: u32,
    ) -> usize {
        let c0 = stator_sys::clock::thread_cpu_ns();
        let work = self.io.reap();
        // frames that found a TX ring full wait in its backlog: every turn, not only one that
        // receives, or the last of a burst would wait for the next packet
        self.send(now);
        let mut received = 0u64;
        for si in 0..self.io.socks.len() {
            let Some(rx) = self.io.socks[si].rx.as_mut() else {
                continue;
            };
            let (got, bad) = rx.recv(rx_buf, self.io.batch);
            if got == 0 {
                continue;
            }
            let st = &self.io.stats;
            st.rx.fetch_add(u64::from(got), Ordering::Relaxed);
            if bad != 0 {
                st.rx_invalid.fetch_add(u64::from(bad), Ordering::Relaxed);
            }
            for f in rx_buf.iter() {
                self.io.umem.pass(f, FrameState::Rx, FrameState::Thread);
            }
            received += rx_buf.len() as u64;
            self.decider
                .batch(snap, rx_buf.drain(..).map(|f| (f, si as u16)));
            self.send(now);
        }
        self.io.fill(share);
        // the user-space part: the `sendto` below (in copy mode the kernel's transmit work,
        // charged to this thread) is left out, as the steered figures leave out the I/O
        // thread's flush
        if received != 0 {
            self.io.stats.rtc_ns.fetch_add(
                stator_sys::clock::thread_cpu_ns().saturating_sub(c0),
                Ordering::Relaxed,
            );
        }
        work + received as usize + self.io.flush_turn()
    }

    /// The decided frames into this thread's TX rings (or its free list).
    fn send(&mut self, now: u64) {
        self.io.transmit_all(&mut self.decider.out, now);
    }

    /// Each fill ring's share of this thread's frames.
    pub(crate) fn fill_share(&self) -> u32 {
        let rx_socks = self.io.socks.iter().filter(|s| s.rx.is_some()).count();
        (self.io.free.len() / rx_socks.max(1)) as u32
    }
}

#[cfg(test)]
mod tests {
    //! A run-to-completion thread's turns over heap rings (`sim`), the test playing the kernel:
    //! no root, no socket; its own loop once, with deadlines and nothing counted against the
    //! clock.

    use std::collections::BTreeSet;
    use std::sync::atomic::AtomicU64;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::sim::{self, RigConfig, RtcRig};

    fn count(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// One turn of the thread, its fill rings topped up to the whole pool.
    fn turn(rig: &mut RtcRig) -> usize {
        let snap = rig.published.current();
        let share = rig.umem.config().frames;
        let mut rx_buf = Vec::new();
        rig.rtc.turn(&snap, 0, &mut rx_buf, share)
    }

    /// Every frame is free in the thread or in a fill ring, each chunk once.
    fn assert_every_frame_home(rig: &mut RtcRig) {
        let ledger = rig.umem.ledger().expect("kept");
        let in_fill: Vec<u64> = rig.kernels.iter_mut().flat_map(|k| k.fill_held()).collect();
        let free = &rig.rtc.io.free;
        assert_eq!(ledger.count(FrameState::Free), free.len());
        assert_eq!(ledger.count(FrameState::Fill), in_fill.len());
        let chunks: BTreeSet<u32> = free
            .iter()
            .map(|f| rig.umem.frame_index(f.addr()))
            .chain(in_fill.iter().map(|&a| rig.umem.frame_index(a)))
            .collect();
        assert_eq!(
            chunks.len(),
            rig.umem.config().frames as usize,
            "none lost or twice"
        );
    }

    #[test]
    fn a_frame_in_leaves_decided_by_its_socket_and_a_pass_is_recycled() {
        let mut rig = RtcRig::new(RigConfig::default(), 1, 0);
        turn(&mut rig); // fills
        assert!(rig.kernels[0].receive(&sim::packet(10_000, 80, 7)));
        // port 81 is no VIP's: the forwarder passes it, user space recycles it
        assert!(rig.kernels[0].receive(&sim::packet(10_001, 81, 8)));
        assert!(turn(&mut rig) > 0);
        let sent = rig.kernels[0].transmit();
        assert_eq!(
            sent.len(),
            1,
            "the forwarded frame, published in the same turn"
        );
        assert_eq!(&sent[0][30..34], &sim::BACKEND.octets(), "encapsulated");
        assert_eq!(sim::packet_id(&sent[0]), 7);
        let st = Arc::clone(&rig.stats);
        assert_eq!(
            (count(&st.rx), count(&st.tx), count(&st.recycled)),
            (2, 1, 1)
        );
        let w = &Arc::clone(&rig.shared).stats;
        assert_eq!((count(&w.packets), count(&w.user_pass)), (2, 1));
        assert_eq!(count(&w.batches), 1, "one batch for both");
        turn(&mut rig); // reaps the completion
        assert_eq!(count(&st.completed), 1);
        assert_every_frame_home(&mut rig);
    }

    #[test]
    fn one_kick_per_batch_and_another_while_the_kernel_still_sends() {
        let mut rig = RtcRig::new(RigConfig::default(), 1, 0); // batch 16
        rig.kernels[0].need_tx_wakeup(true); // copy mode: the kernel always asks
        turn(&mut rig);
        for i in 0..48 {
            assert!(rig.kernels[0].receive(&sim::packet(10_000 + i as u16, 80, i)));
        }
        rig.kernels[0].quiet();
        for t in 0..3 {
            turn(&mut rig);
            assert_eq!(rig.kernels[0].transmit().len(), 16, "turn {t}: a batch");
            assert_eq!(rig.kernels[0].kicks(), 1, "turn {t}: one sendto");
        }
        assert_eq!(count(&rig.stats.flush_turn), 3);
        assert_eq!(count(&rig.stats.tx_kicks), 3);
        turn(&mut rig);
        assert_eq!(rig.kernels[0].kicks(), 0, "nothing to send: no kick");
        // the kernel took none of a batch (copy mode sends 32 per wake-up): the next turn,
        // with nothing new, wakes it again
        for i in 0..16 {
            assert!(rig.kernels[0].receive(&sim::packet(20_000 + i as u16, 80, i)));
        }
        turn(&mut rig);
        assert_eq!(rig.kernels[0].kicks(), 1);
        turn(&mut rig);
        assert_eq!(rig.kernels[0].kicks(), 1, "still in flight: woken again");
        assert_eq!(count(&rig.stats.flush_turn), 4, "but published once");
        assert_eq!(rig.kernels[0].transmit().len(), 16);
    }

    #[test]
    fn a_full_tx_ring_keeps_a_backlog_sent_on_a_turn_that_receives_nothing() {
        let mut rig = RtcRig::new(
            RigConfig {
                batch: 64,
                ..RigConfig::default()
            },
            1,
            0,
        ); // every ring 64
        turn(&mut rig);
        for i in 0..64 {
            assert!(rig.kernels[0].receive(&sim::packet(10_000, 80, i)));
        }
        turn(&mut rig);
        for i in 64..80 {
            assert!(rig.kernels[0].receive(&sim::packet(10_000, 80, i)));
        }
        turn(&mut rig); // the TX ring still holds the first 64: 16 wait
        assert_eq!(count(&rig.stats.tx_ring_full), 1);
        let mut sent: Vec<u32> = rig.kernels[0]
            .transmit()
            .iter()
            .map(|f| sim::packet_id(f))
            .collect();
        assert_eq!(sent.len(), 64);
        // the burst is over: nothing more arrives, and the 16 still leave
        assert!(turn(&mut rig) > 0);
        sent.extend(rig.kernels[0].transmit().iter().map(|f| sim::packet_id(f)));
        assert_eq!(sent, (0..80).collect::<Vec<_>>(), "all, once, in order");
        assert_eq!(count(&rig.stats.tx), 80);
    }

    #[test]
    fn completions_are_recycled_to_the_fill_ring_so_a_small_pool_carries_many_packets() {
        let mut rig = RtcRig::new(
            RigConfig {
                frames: 64,
                ..RigConfig::default()
            },
            1,
            0,
        );
        turn(&mut rig);
        let mut sent = Vec::new();
        for round in 0..10u32 {
            for i in 0..16 {
                let id = round * 16 + i;
                assert!(
                    rig.kernels[0].receive(&sim::packet(10_000 + i as u16, 80, id)),
                    "round {round}: a frame to receive into"
                );
            }
            turn(&mut rig);
            sent.extend(rig.kernels[0].transmit().iter().map(|f| sim::packet_id(f)));
        }
        turn(&mut rig);
        assert_eq!(
            sent,
            (0..160).collect::<Vec<_>>(),
            "160 packets through 64 frames"
        );
        assert_eq!(count(&rig.stats.completed), 160);
        assert_every_frame_home(&mut rig);
    }

    #[test]
    fn a_frame_for_another_interface_leaves_by_the_threads_socket_there() {
        // in on interface 2's socket, the backend's route out of interface 3
        let mut rig = RtcRig::new(RigConfig::default(), 2, 1);
        turn(&mut rig);
        for i in 0..5 {
            assert!(rig.kernels[0].receive(&sim::packet(10_000, 80, i)));
        }
        turn(&mut rig);
        assert!(
            rig.kernels[0].transmit().is_empty(),
            "nothing back out of 2"
        );
        let sent = rig.kernels[1].transmit();
        assert_eq!(
            sent.iter().map(|f| sim::packet_id(f)).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert!(sent.iter().all(|f| f[30..34] == sim::BACKEND.octets()));
        let fwd = rig.shared.forwarder();
        assert_eq!(fwd.totals().get(stator_abi::Counter::ActRedirect), 5);
        drop(fwd);
        // completed on interface 3's socket, back to the same thread's free list
        turn(&mut rig);
        assert_eq!(count(&rig.stats.completed), 5);
        assert_every_frame_home(&mut rig);
    }

    #[test]
    fn the_running_loop_forwards_thousands_of_packets_and_stops() {
        const N: u32 = 2000;
        let rig = RtcRig::new(
            RigConfig {
                frames: 128,
                ..RigConfig::default()
            },
            1,
            0,
        );
        let RtcRig {
            rtc,
            mut kernels,
            published,
            stats,
            ..
        } = rig;
        let wake = Arc::clone(&rtc.io.wake);
        let thread = std::thread::spawn(move || rtc.run());
        let k = &mut kernels[0];
        let (mut next, mut sent) = (0u32, Vec::new());
        let deadline = Instant::now() + Duration::from_secs(60);
        while sent.len() < N as usize {
            while next < N && k.receive(&sim::packet(10_000 + (next % 50) as u16, 80, next)) {
                next += 1;
            }
            let out = k.transmit();
            if out.is_empty() {
                std::thread::sleep(Duration::from_micros(50));
            }
            sent.extend(out.iter().map(|f| sim::packet_id(f)));
            assert!(
                Instant::now() < deadline,
                "stuck: {next} received, {} sent",
                sent.len()
            );
        }
        published.stop.store(true, Ordering::SeqCst);
        wake.wake_now();
        let rtc = thread.join().expect("the thread panicked");
        assert_eq!(sent, (0..N).collect::<Vec<_>>(), "each once, in order");
        assert_eq!(count(&stats.rx), u64::from(N));
        assert_eq!(count(&stats.tx), u64::from(N));
        assert!(count(&stats.rtc_ns) > 0, "its turns measured");
        drop(rtc);
    }
}
