/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * stats.h — per-CPU counters: events, actions, drop reasons, per-VIP and per-real traffic.
 *
 * Every packet ends in exactly one action counter; every drop also in exactly one drop reason
 * (docs/forwarding.md). Per-CPU arrays need no atomics; user space sums across CPUs. The
 * verifier inlines these array lookups, so a count is a handful of instructions.
 */
#ifndef STATOR_STATS_H
#define STATOR_STATS_H

#include "maps.h"

/* Adds 1 to stator_counters[idx] on this CPU. */
static __always_inline void stator_count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&stator_counters, &idx);

	if (c)
		*c += 1;
}

/* Ends the packet: XDP_DROP, counted in act_drop and in stator_drops[reason]. */
static __always_inline int stator_drop(__u32 reason)
{
	__u64 *c = bpf_map_lookup_elem(&stator_drops, &reason);

	if (c)
		*c += 1;
	stator_count(STATOR_CNT_ACT_DROP);
	return XDP_DROP;
}

/* Ends the packet: XDP_PASS, counted in act_pass and in `why` (non_ip, non_vip, self_test). */
static __always_inline int stator_pass(__u32 why)
{
	stator_count(why);
	stator_count(STATOR_CNT_ACT_PASS);
	return XDP_PASS;
}

/* A PASS of packet `pkt`: the inner packet of a redirect is never handed to the kernel (the
 * kernel cannot use a GRE packet), it is dropped with the `redirect` reason (§10.2). */
#define STATOR_PASS(pkt, why)                                                                      \
	((pkt)->redirected ? stator_drop(STATOR_DROP_REDIRECT) : stator_pass(why))

/* Adds one packet of `bytes` bytes to entry `id` of a per-CPU stator_traffic array. */
static __always_inline void stator_traffic_add(void *map, __u32 id, __u32 bytes)
{
	struct stator_traffic *t = bpf_map_lookup_elem(map, &id);

	if (t) {
		t->packets += 1;
		t->bytes += bytes;
	}
}

#endif /* STATOR_STATS_H */
