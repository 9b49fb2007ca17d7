/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * decap_maps.h — the decap program's maps and counters (docs/decap.md).
 *
 * Four maps, pinned by name (default directory /sys/fs/bpf/stator-decap): the configuration
 * (GUE port, flags, second chance's source addresses), the set of outer destination addresses
 * that are ours, the sources allowed to ask for a second chance, and the per-CPU counters. Every packet ends in exactly one outcome counter; a rejected packet is also counted
 * in exactly one reason (enum stator_decap_counter).
 */
#ifndef STATOR_DECAP_MAPS_H
#define STATOR_DECAP_MAPS_H

#include "common.h"

#ifndef LIBBPF_PIN_BY_NAME
#define LIBBPF_PIN_BY_NAME 1
#endif

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stator_decap_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_dcfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, STATOR_MAX_DECAP_ADDRS);
	__type(key, struct stator_decap_addr);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_daddrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, STATOR_MAX_DECAP_PREFIXES);
	__type(key, struct stator_decap_prefix);
	__type(value, __u8);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_dscfrom SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STATOR_DECAP_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_dcnt SEC(".maps");

/*
 * stator_ptr() of common.h, with the packet pointer passed through an empty asm: clang 14 may
 * otherwise re-zero-extend the 32-bit ctx->data load (`w = w`) when it merges paths, and the
 * verifier then sees a scalar instead of a packet pointer.
 */
static __always_inline void *stator_dptr(const struct xdp_md *ctx, __u32 off, const __u32 len)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	void *p;

	asm volatile("" : "+r"(data));
	if (off > STATOR_MAX_PKT_OFF)
		return NULL;
	p = data + off;
	if (p + len > data_end)
		return NULL;
	return p;
}

/* Adds 1 to stator_dcnt[idx] on this CPU. */
static __always_inline void stator_dcount(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&stator_dcnt, &idx);

	if (c)
		*c += 1;
}

/* Ends the packet untouched: XDP_PASS, counted in `why` (pass or not_ours). */
static __always_inline int stator_dpass(__u32 why)
{
	stator_dcount(why);
	return XDP_PASS;
}

/* Ends a tunnel packet we cannot deliver: XDP_DROP, counted in `rejected` and in `reason`. */
static __always_inline int stator_dreject(__u32 reason)
{
	stator_dcount(STATOR_DECAP_CNT_REJECTED);
	stator_dcount(reason);
	return XDP_DROP;
}

#endif /* STATOR_DECAP_MAPS_H */
