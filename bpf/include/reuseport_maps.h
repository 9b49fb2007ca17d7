/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * reuseport_maps.h — the steering program's maps and counters (docs/steering.md).
 *
 * None is pinned: the proxy process that loads the program owns them, and the program stays
 * attached to its SO_REUSEPORT group for as long as a socket of the group is open. The loader
 * (crates/stator-steer) sets the sizes of stator_rp_socks (workers) and stator_rp_table (the
 * table size) at load time; the sizes below are only what an unconfigured load gets.
 */
#ifndef STATOR_REUSEPORT_MAPS_H
#define STATOR_REUSEPORT_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "stator_abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stator_rp_cfg);
} stator_rp_cfg SEC(".maps");

/* Worker id -> its listening (TCP) or bound (UDP) socket. User space writes a socket fd (a 4-byte
 * value, as aya's ReusePortSockArray writes it). The kernel empties a slot when its socket
 * closes. */
struct {
	__uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
	__uint(max_entries, STATOR_RP_MAX_WORKERS);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} stator_rp_socks SEC(".maps");

/* The Maglev table over worker ids (stator_rp_cfg.table_size slots are used). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4093);
	__type(key, __u32);
	__type(value, __u32);
} stator_rp_table SEC(".maps");

/* steering = "cpu" (STATOR_RP_F_CPU): worker id -> the CPU it is pinned to. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STATOR_RP_MAX_WORKERS);
	__type(key, __u32);
	__type(value, __u32);
} stator_rp_cpus SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STATOR_RP_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stator_rp_cnt SEC(".maps");

/* Counts one program run in counter `idx` (enum stator_rp_counter). */
static __always_inline void stator_rp_count(__u32 idx)
{
	__u64 *n = bpf_map_lookup_elem(&stator_rp_cnt, &idx);

	if (n)
		*n += 1;
}

#endif /* STATOR_REUSEPORT_MAPS_H */
