/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * clock.h — the forwarder's clock: `now` of a decision, in nanoseconds on the time base of
 * CLOCK_MONOTONIC_COARSE (connection-table last_seen, fragment and next-hop stamps, the flood
 * window, trace reports).
 *
 * bpf_ktime_get_coarse_ns() is a helper call that reads the timekeeper under its sequence
 * count: ~13-20 ns per packet on the development VMs, the largest single step left on a
 * connection-table hit (docs/xdp.md, round three). bpf_jiffies64() has the same resolution (one
 * tick) and the verifier inlines it into one load of jiffies_64 on 64-bit JITs. The loader
 * takes the tick from the kernel and measures the offset between the two clocks once, before
 * loading (crates/stator-xdp/src/clock.rs), and writes them here; the values are frozen read-only
 * data, so the verifier knows them and removes the branch not taken. A tick of 0 (a load
 * that did not probe: `verify`, an object loaded by other tools) keeps the helper.
 *
 * now = jiffies_64 * tick_ns + base_ns stays within a tick of CLOCK_MONOTONIC_COARSE, so the
 * stamps of a connection table pinned by a build that used the helper stay meaningful, and
 * userspace compares them with CLOCK_MONOTONIC_COARSE as before.
 */
#ifndef STATOR_CLOCK_H
#define STATOR_CLOCK_H

#include "common.h"

/* ns per jiffy (1e9 / HZ, rounded); 0 = use bpf_ktime_get_coarse_ns() */
volatile const __u64 stator_clock_tick_ns = 0;
/* CLOCK_MONOTONIC_COARSE − jiffies_64 × tick_ns at load (mod 2^64) */
volatile const __u64 stator_clock_base_ns = 0;

/* `now` of the decision: the test clock when set, else the kernel's; read once per packet. */
static __always_inline __u64 stator_now(struct stator_pkt *pkt)
{
	if (!pkt->now) {
		if (pkt->test_clock)
			pkt->now = pkt->test_clock;
		else if (stator_clock_tick_ns)
			pkt->now = bpf_jiffies64() * stator_clock_tick_ns + stator_clock_base_ns;
		else
			pkt->now = bpf_ktime_get_coarse_ns();
	}
	return pkt->now;
}

#endif /* STATOR_CLOCK_H */
