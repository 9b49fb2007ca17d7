/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * conntrack.h — backend selection: the connection table, its idle timeouts and the SYN-flood
 * guard (docs/forwarding.md §4, Maglev §3.3).
 *
 * The table maps the 5-tuple to a real id, the flow hash and a last-seen time. A hit whose
 * real is still usable (or draining) for the same VIP is reused; anything else asks Maglev again
 * and, unless the flood guard holds, records the answer. SYNs always follow the current Maglev
 * table. Hits write last_seen only when it is STATOR_CT_REFRESH_NS stale, so a busy flow costs
 * no write per packet, and take the flow hash from the entry, so a hit never hashes the 5-tuple
 * (for IPv6 that is jhash2 over 9 words; the outer flow label and GUE source port need it).
 */
#ifndef STATOR_CONNTRACK_H
#define STATOR_CONNTRACK_H

#include "clock.h"
#include "maglev.h"

/*
 * Insert(real_id): records the flow unless the SYN-flood guard holds (more than
 * cfg.flood_new_per_sec inserts on this CPU in the current one-second window). `found` is the
 * entry the lookup returned (expired, reselected, or another CPU's zero value), overwritten in
 * place: cheaper than bpf_map_update_elem, which for LRU maps takes a free node before it
 * even looks for the key.
 */
static __always_inline void stator_ct_insert(struct stator_pkt *pkt,
					     const struct stator_node_cfg *cfg, __u32 real_id,
					     __u64 now, struct stator_ct_entry *found)
{
	/* Maglev has hashed the flow by now: kept in the entry for the flow's hits. */
	struct stator_ct_entry e = {
		.real_id = real_id,
		.hash = stator_pkt_hash(pkt),
		.last_seen_ns = now,
	};
	__u32 limit = cfg->flood_new_per_sec;

	if (limit) {
		__u32 zero = 0;
		struct stator_flood *f = bpf_map_lookup_elem(&stator_flood, &zero);

		if (!f)
			return;
		if (now < f->window_start_ns || now - f->window_start_ns >= STATOR_NSEC_PER_SEC) {
			f->window_start_ns = now;
			f->inserts = 0;
		}
		if (f->inserts >= limit) {
			stator_count(STATOR_CNT_CT_GUARD);
			return;
		}
		f->inserts += 1;
	}
	if (found) {
		found->real_id = real_id;
		found->hash = e.hash;
		found->last_seen_ns = now;
		stator_count(STATOR_CNT_CT_INSERT);
	} else if (bpf_map_update_elem(&stator_ct, &pkt->flow, &e, BPF_ANY) == 0) {
		stator_count(STATOR_CNT_CT_INSERT);
	}
}

/*
 * Selection: the real for this packet (id returned, pointer in *real), or STATOR_NO_REAL with
 * *reason. `mode` is STATOR_SEL_FLOW, STATOR_SEL_SYN or STATOR_SEL_ICMP_ERR (lookup, never
 * insert).
 */
static __always_inline __u32 stator_select(struct stator_pkt *pkt,
					   const struct stator_vip *vip,
					   const struct stator_node_cfg *cfg, int mode,
					   const struct stator_real **real, __u32 *reason)
{
	struct stator_ct_entry *e = NULL;
	const struct stator_real *r;
	__u64 now, last, timeout;
	__u32 real_id;

	if (vip->flags & STATOR_VIP_F_NO_CT) {
		pkt->cause = STATOR_TRACE_C_NO_CT;
		return stator_maglev(pkt, vip, real, reason);
	}

	now = stator_now(pkt);
	if (mode == STATOR_SEL_SYN) {
		pkt->cause = STATOR_TRACE_C_SYN;
		stator_count(STATOR_CNT_CT_MISS);
		goto decide;
	}
	e = bpf_map_lookup_elem(&stator_ct, &pkt->flow);
	/* last_seen 0: another CPU's entry (LRU_PERCPU_HASH zero-fills the others' values) */
	if (!e || !e->last_seen_ns) {
		pkt->cause = STATOR_TRACE_C_CT_MISS;
		stator_count(STATOR_CNT_CT_MISS);
		goto decide;
	}
	last = e->last_seen_ns;
	timeout = pkt->flow.proto == IPPROTO_TCP ? cfg->tcp_timeout_ns : cfg->udp_timeout_ns;
	if (now > last && now - last > timeout) {
		pkt->cause = STATOR_TRACE_C_CT_EXPIRED;
		stator_count(STATOR_CNT_CT_EXPIRED);
		goto decide;
	}
	real_id = e->real_id;
	r = stator_real_lookup(pkt->gen, real_id);
	if (r && (r->flags & (STATOR_REAL_F_USABLE | STATOR_REAL_F_DRAINING)) &&
	    r->vip_id == vip->vip_id) {
		pkt->cause = STATOR_TRACE_C_CT_HIT;
		stator_count(STATOR_CNT_CT_HIT);
		/* unsigned, as §4 writes it: a last_seen in the future also refreshes */
		if (now - last >= STATOR_CT_REFRESH_NS)
			e->last_seen_ns = now;
		/* The hash the insert stored (a function of the key alone, so a torn read of a
		 * shared entry cannot mix flows); 0: an older build's entry, computed on use. */
		if (e->hash) {
			pkt->hash = e->hash;
			pkt->hashed = 1;
		}
		*real = r;
		return real_id;
	}
	pkt->cause = STATOR_TRACE_C_CT_RESELECT;
	stator_count(STATOR_CNT_CT_RESELECT);
decide:
	real_id = stator_maglev(pkt, vip, real, reason);
	if (real_id != STATOR_NO_REAL && mode != STATOR_SEL_ICMP_ERR)
		stator_ct_insert(pkt, cfg, real_id, now, e);
	return real_id;
}

#endif /* STATOR_CONNTRACK_H */
