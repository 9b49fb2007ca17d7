/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * maglev.h — the flow hash of a packet and the Maglev table lookup (docs/forwarding.md §4,
 * Maglev §3.4).
 *
 * Tables are programmed by user space from stator-hash: a VIP's table is `table_size` (prime)
 * consecutive real ids in stator_slots starting at `table_off`, inside the active generation's
 * half. A lookup is one modulo and two array reads.
 */
#ifndef STATOR_MAGLEV_H
#define STATOR_MAGLEV_H

#include "stats.h"

/* The flow hash (flow_hash.h, identical to stator_hash::flow_hash_v4/v6) of pkt->flow, computed
 * the first time it is asked for: a connection-table hit toward a GRE or IPIP backend over IPv4
 * never needs it. pkt->flow must be final by then (ICMP errors reverse it first). */
static __always_inline __u32 stator_pkt_hash(struct stator_pkt *pkt)
{
	const struct stator_flow_key *f = &pkt->flow;

	if (!pkt->hashed) {
		if (pkt->family == STATOR_FAMILY_V4)
			pkt->hash = stator_flow_hash_v4(f->src[0], f->dst[0], f->sport, f->dport,
							f->proto);
		else
			pkt->hash = stator_flow_hash_v6(f->src, f->dst, f->sport, f->dport,
							f->proto);
		pkt->hashed = 1;
	}
	return pkt->hash;
}

/*
 * Maglev(vip): the real id in slot `hash % M` of the VIP's table, with the real itself in
 * *real. Returns STATOR_NO_REAL with *reason set when the VIP has no table or no backend in that
 * slot (no_backend), or when the maps contradict the configuration (bad_config).
 */
static __always_inline __u32 stator_maglev(struct stator_pkt *pkt, const struct stator_vip *vip,
					   const struct stator_real **real, __u32 *reason)
{
	__u32 size = vip->table_size;
	const struct stator_real *r;
	__u32 idx, real_id;
	__u32 *slot;

	if (!size) {
		pkt->slot = STATOR_NO_SLOT;
		*reason = STATOR_DROP_NO_BACKEND;
		return STATOR_NO_REAL;
	}
	pkt->slot = stator_pkt_hash(pkt) % size;
	idx = vip->table_off + pkt->slot;
	slot = bpf_map_lookup_elem(&stator_slots, &idx);
	if (!slot) {
		*reason = STATOR_DROP_BAD_CONFIG;
		return STATOR_NO_REAL;
	}
	real_id = *slot;
	if (real_id == STATOR_NO_REAL) {
		*reason = STATOR_DROP_NO_BACKEND;
		return STATOR_NO_REAL;
	}
	r = stator_real_lookup(pkt->gen, real_id);
	if (!r || !r->flags) {
		*reason = STATOR_DROP_BAD_CONFIG;
		return STATOR_NO_REAL;
	}
	*real = r;
	return real_id;
}

#endif /* STATOR_MAGLEV_H */
