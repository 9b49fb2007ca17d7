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

/*
 * §12.2: after Maglev chose `real_id` (`real`) for a packet that is neither a SYN nor a
 * connection-table hit, nor a fragment: the VIP's previous table. 1 when the packet goes with a
 * second chance naming the previous table's backend (pkt->sc, pkt->sc_real set; the caller must
 * not insert, so every later packet of the flow takes this path again); 0 for the ordinary path.
 */
static __always_inline int stator_second_chance(struct stator_pkt *pkt,
						const struct stator_vip *vip, __u32 real_id,
						const struct stator_real *real)
{
	const struct stator_real *prev;
	const struct stator_prev *p;
	__u32 idx, prev_id;
	__u32 *slot;

	if (pkt->is_frag || vip->vip_id >= STATOR_MAX_VIPS)
		return 0;
	idx = pkt->gen * STATOR_MAX_VIPS + vip->vip_id;
	p = bpf_map_lookup_elem(&stator_prev, &idx);
	if (!p || !p->table_size)
		return 0;
	idx = p->table_off + stator_pkt_hash(pkt) % p->table_size;
	slot = bpf_map_lookup_elem(&stator_slots, &idx);
	if (!slot || *slot == real_id || *slot == STATOR_NO_REAL)
		return 0;
	prev_id = *slot;
	prev = stator_real_lookup(pkt->gen, prev_id);
	/* the same backend under another id (removed and added again): no second chance needed */
	if (!prev || !prev->flags ||
	    (prev->family == real->family && prev->addr[0] == real->addr[0] &&
	     prev->addr[1] == real->addr[1] && prev->addr[2] == real->addr[2] &&
	     prev->addr[3] == real->addr[3]))
		return 0;
	if (real->encap != STATOR_ENCAP_GUE || prev->family != real->family) {
		stator_count(STATOR_CNT_SC_UNSUPPORTED);
		return 0;
	}
	pkt->sc = 1;
	pkt->sc_real = prev_id;
	stator_count(STATOR_CNT_SC_SENT);
	return 1;
}

#endif /* STATOR_MAGLEV_H */
