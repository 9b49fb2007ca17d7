/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * frag.h — fragments (docs/forwarding.md §9, Maglev §4.3).
 *
 * Every fragment of a datagram shares the 3-tuple, so it reaches the same owner among the
 * fragment peers (a Maglev table over the nodes, identical everywhere); a node that is not the
 * owner sends it there once, in GRE with recursion control 1. The owner decides the first
 * fragment like an unfragmented packet and records the decision in stator_frag (one table for
 * all CPUs); the others follow the record. One that comes before its record is copied to the
 * stator_hold ring buffer and dropped here: `stator run`'s holder runs it through the program
 * again once the record exists.
 */
#ifndef STATOR_FRAG_H
#define STATOR_FRAG_H

#include "classify.h"
#include "decide.h"
#include "tail.h"

/* The 3-tuple hash: the flow hash with both ports 0 and the fragment's protocol. */
static __always_inline __u32 stator_hash3(const struct stator_pkt *pkt)
{
	const struct stator_flow_key *f = &pkt->flow;

	if (pkt->family == STATOR_FAMILY_V4)
		return stator_flow_hash_v4(f->src[0], f->dst[0], 0, 0, pkt->frag_proto);
	return stator_flow_hash_v6(f->src, f->dst, 0, 0, pkt->frag_proto);
}

/* §9 step 5, no fresh record: the frame as received goes to the holder (XDP_DROP here,
 * counted act_hold), or is dropped frag_hold when it does not fit. */
static __always_inline int stator_hold_frame(struct xdp_md *ctx, struct stator_pkt *pkt,
					     const struct stator_frag_key *key)
{
	__u32 zero = 0, len = pkt->len;
	struct stator_hold_buf *b;

	if (len > STATOR_HOLD_FRAME_MAX || len < STATOR_ETH_LEN)
		return stator_drop(STATOR_DROP_FRAG_HOLD);
	b = bpf_map_lookup_elem(&stator_holdbuf, &zero);
	if (!b)
		return stator_drop(STATOR_DROP_FRAG_HOLD);
	b->hdr.key = *key;
	b->hdr.ingress_ifindex = ctx->ingress_ifindex;
	b->hdr.len = len;
	b->hdr.now_ns = stator_now(pkt);
	if (bpf_xdp_load_bytes(ctx, 0, b->frame, len))
		return stator_drop(STATOR_DROP_FRAG_HOLD);
	if (bpf_ringbuf_output(&stator_hold, b, sizeof(b->hdr) + len, 0))
		return stator_drop(STATOR_DROP_FRAG_HOLD);
	stator_count(STATOR_CNT_ACT_HOLD);
	return XDP_DROP;
}

/* The datagram of the fragment in pkt. */
static __always_inline void stator_frag_key_of(const struct stator_pkt *pkt,
					       struct stator_frag_key *key)
{
	stator_copy_addr(key->src, pkt->flow.src);
	stator_copy_addr(key->dst, pkt->flow.dst);
	key->id = bpf_htonl(pkt->frag_id);
	key->proto = pkt->frag_proto;
	key->family = pkt->family;
}

/* §9 steps 1–3 and 5 for one fragment (pkt->is_frag, of ethertype `et`); a first fragment this
 * node decides goes on to stator_first (step 4). */
static __always_inline int stator_frag_decide(struct xdp_md *ctx, struct stator_pkt *pkt,
					      __be16 et)
{
	const struct stator_node_cfg *cfg = pkt->cfg;
	struct stator_frag_key key = {};
	const struct stator_frag_entry *r;
	__u64 now;
	int rc;

	/* 1. opt-in; 2. a first fragment's L4 header, the others' protocol (classify.h) */
	rc = stator_frag_admit(ctx, pkt);
	if (rc != STATOR_CONTINUE)
		return rc;
	if (!cfg) /* never: stator_frag_admit checked it */
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	if (stator_stale(pkt))
		return STATOR_PASS(pkt, STATOR_CNT_STALE_PASS);
	stator_frag_key_of(pkt, &key);

	/* 3. the 3-tuple owner */
	if (cfg->peer_table_size) {
		__u32 h3 = stator_hash3(pkt), idx = cfg->peer_table_off + h3 % cfg->peer_table_size;
		const struct stator_peer *peer;
		__u32 *slot = bpf_map_lookup_elem(&stator_slots, &idx);

		if (!slot || *slot >= STATOR_MAX_PEERS)
			return stator_drop(STATOR_DROP_BAD_CONFIG);
		idx = pkt->gen * STATOR_MAX_PEERS + *slot;
		peer = bpf_map_lookup_elem(&stator_peers, &idx);
		if (!peer || peer->family == STATOR_FAMILY_NONE)
			return stator_drop(STATOR_DROP_BAD_CONFIG);
		if (!(peer->flags & STATOR_PEER_F_SELF)) {
			if (!pkt->redirected) {
				__u32 mark = pkt->frag_first ? stator_trace_mark_at(ctx, pkt) : 0;

				if (mark) {
					struct stator_decision d =
						STATOR_DECISION(STATOR_TRACE_FRAG_REDIRECT);

					d.flags = STATOR_TRACE_F_FRAGMENT;
					stator_copy_addr(d.target, peer->addr);
					d.target_family = peer->family;
					stator_trace_decision(ctx, pkt, mark, &d);
				}
				pkt->hash = h3;
				pkt->hashed = 1;
				return stator_redirect_tx(ctx, pkt, peer->addr, peer->family,
							  STATOR_CNT_FRAG_REDIRECT);
			}
			stator_count(STATOR_CNT_REDIRECT_AGAIN);
		}
	}

	/* 4. the first fragment: decided as unfragmented, and recorded (stator_first) */
	if (pkt->frag_first)
		return stator_tail(ctx, pkt, STATOR_TAIL_FIRST, et);

	/* 5. the others: the record, or the holder */
	r = bpf_map_lookup_elem(&stator_frag, &key);
	now = stator_now(pkt);
	if (r && now >= r->created_ns && now - r->created_ns <= cfg->frag_timeout_ns) {
		const struct stator_real *real;
		__u32 real_id = r->real_id;

		if (r->reason)
			return stator_drop(r->reason < STATOR_DROP_MAX ? r->reason
								 : STATOR_DROP_BAD_CONFIG);
		real = stator_real_lookup(pkt->gen, real_id);
		if (!real || !(real->flags & (STATOR_REAL_F_USABLE | STATOR_REAL_F_DRAINING)) ||
		    real->vip_id != r->vip_id)
			return stator_drop(STATOR_DROP_NO_BACKEND);
		stator_traffic_add(&stator_vipstats, r->vip_id, pkt->len);
		stator_count(STATOR_CNT_FRAG_HIT);
		pkt->hash = r->hash;
		pkt->hashed = 1;
		return stator_encap_xmit(ctx, pkt, cfg, real, real_id, 0);
	}
	return stator_hold_frame(ctx, pkt, &key);
}

/* §9 step 4 (program stator_first): a first fragment this node decides — VIP match, then
 * refused and recorded, or decided as unfragmented and recorded. */
static __always_inline int stator_frag_first(struct xdp_md *ctx, struct stator_pkt *pkt)
{
	struct stator_frag_key key = {};
	const struct stator_vip *vip = NULL;
	int rc = stator_ports_vip(ctx, pkt, &vip);

	if (rc != STATOR_CONTINUE) /* no VIP (the ports were parsed by stator_fragment) */
		return rc;
	if (!vip) /* never */
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	stator_frag_key_of(pkt, &key);
	if (!(vip->flags & STATOR_VIP_F_FRAGMENTS)) {
		__u32 mark = stator_trace_mark_at(ctx, pkt);

		stator_frag_record(pkt, &key, STATOR_NO_REAL, vip->vip_id,
				   STATOR_DROP_FRAGMENT, 0);
		if (mark) {
			struct stator_decision d = STATOR_DECISION(STATOR_TRACE_DROP);

			d.vip_id = vip->vip_id;
			d.reason = STATOR_DROP_FRAGMENT;
			d.flags = STATOR_TRACE_F_FRAGMENT;
			stator_trace_decision(ctx, pkt, mark, &d);
		}
		return stator_drop(STATOR_DROP_FRAGMENT);
	}
	return stator_decide(ctx, pkt, vip, STATOR_SEL_FLOW, &key, 0);
}

#endif /* STATOR_FRAG_H */
