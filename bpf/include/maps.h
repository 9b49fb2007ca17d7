/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * maps.h — the forwarder's maps, exactly as listed in stator_abi.h.
 *
 * Every map is pinned by name (LIBBPF_PIN_BY_NAME), so a loader given the same pin directory
 * reuses the maps of a previous run: the connection table, counters and the active generation
 * survive a restart or an upgrade of the program. The loader overrides max_entries of
 * stator_ct, stator_ct4 and stator_slots before loading (EbpfLoader::set_max_entries).
 *
 * Connection table: by default LRU_PERCPU_HASH (one LRU and one value per CPU; no cache line is
 * shared between CPUs, which is right when RSS keeps a flow on one CPU). Built with
 * -DSTATOR_CT_SHARED it is one LRU_HASH with per-CPU LRU lists (BPF_F_NO_COMMON_LRU): one
 * entry per flow whatever CPU sees it, for veth and virtio without RSS, where a flow's CPU is
 * not stable. The per-CPU build keeps IPv4 flows in a table of its own, stator_ct4 (conntrack.h),
 * and only IPv6 flows in stator_ct.
 */
#ifndef STATOR_MAPS_H
#define STATOR_MAPS_H

#include "common.h"

#ifndef LIBBPF_PIN_BY_NAME
#define LIBBPF_PIN_BY_NAME 1
#endif

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct stator_ctl);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct stator_beat);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_beat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct stator_node_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * STATOR_VTAB_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct stator_vaddr);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_vtab SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * STATOR_MAX_VIPS);
	__type(key, struct stator_vip_key);
	__type(value, struct stator_vip);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_vips SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * STATOR_MAX_REALS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct stator_real);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_reals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * STATOR_DEFAULT_SLOTS_PER_GEN);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_slots SEC(".maps");

struct {
#ifdef STATOR_CT_SHARED
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
#else
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
#endif
	__uint(max_entries, STATOR_DEFAULT_CT_ENTRIES);
	__type(key, struct stator_flow_key);
	__type(value, struct stator_ct_entry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_ct SEC(".maps");

/* The per-CPU build's IPv4 connection table (stator_abi.h, conntrack.h): the loader sets
 * max_entries to CPUs × stator_ct4_buckets; the shared build leaves it one bucket, unused. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stator_ct4_bucket);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_ct4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stator_flood);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_flood SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STATOR_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STATOR_DROP_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STATOR_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct stator_traffic);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_vipstats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STATOR_MAX_REALS);
	__type(key, __u32);
	__type(value, struct stator_traffic);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_realstat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STATOR_MAX_REALS);
	__type(key, __u32);
	__type(value, struct stator_nh);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_nh SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, STATOR_MAX_TX_PORTS);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_tx_ports SEC(".maps");

/* §9–§11 and §3.1 (docs/forwarding.md): fragment peers, failover addresses, prefix groups and
 * suffixes (configuration, per generation), the fragment table, the holder's and the tracer's
 * ring buffers, the report window. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * STATOR_MAX_PEERS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct stator_peer);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * STATOR_MAX_VIPS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct stator_addr);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_failover SEC(".maps");

/* §12: each VIP's previous Maglev table (second chance). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * STATOR_MAX_VIPS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct stator_prev);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_prev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 2 * STATOR_MAX_PREFIXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct stator_class_key);
	__type(value, struct stator_class);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_classes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * STATOR_MAX_VIPS);
	__type(key, struct stator_sfx_key);
	__type(value, struct stator_vip);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_sfx SEC(".maps");

/* One table for every CPU: a datagram's fragments may arrive on different CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, STATOR_DEFAULT_FRAG_ENTRIES);
	__type(key, struct stator_frag_key);
	__type(value, struct stator_frag_entry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_frag SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, STATOR_DEFAULT_HOLD_RING);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_hold SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stator_hold_buf);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_holdbuf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, STATOR_TRACE_RING);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_trace SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stator_flood);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_trl SEC(".maps");

/* The tracer's keys (docs/forwarding.md §11.1), written by user space from tracer.key_file. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stator_trace_keys);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_trkeys SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, STATOR_TAIL_MAX);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_progs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stator_tail);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stator_tcx SEC(".maps");

/* stator_reals[gen * STATOR_MAX_REALS + real_id], or NULL for an id out of range. */
static __always_inline const struct stator_real *stator_real_lookup(__u32 gen, __u32 real_id)
{
	__u32 idx;

	if (real_id >= STATOR_MAX_REALS)
		return NULL;
	idx = gen * STATOR_MAX_REALS + real_id;
	return bpf_map_lookup_elem(&stator_reals, &idx);
}

#endif /* STATOR_MAPS_H */
