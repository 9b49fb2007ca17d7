/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * decide.h — from a matched VIP to an action (docs/forwarding.md §3–§5, §9 step 4, §10.1,
 * §11.2): the VIP's traffic, selection, the "no backend" rules (failover once), a first
 * fragment's record, the tracer's report, and encapsulation. Shared by TCP/UDP, ICMP errors
 * and first fragments so the three cannot drift.
 */
#ifndef STATOR_DECIDE_H
#define STATOR_DECIDE_H

#include "clock.h"
#include "conntrack.h"
#include "encap.h"
#include "trace.h"

/* §10.1: GRE with recursion control 1 to another Stator node (a real with no id). */
static __always_inline int stator_redirect_tx(struct xdp_md *ctx, struct stator_pkt *pkt,
					      const __be32 *addr, __u8 family, __u32 counter)
{
	struct stator_real to = {};

	stator_copy_addr(to.addr, addr);
	to.vip_id = STATOR_NO_VIP;
	to.flags = STATOR_REAL_F_USABLE;
	to.family = family;
	to.encap = STATOR_ENCAP_GRE;
	return stator_encap_xmit(ctx, pkt, pkt->cfg, &to, counter, 1);
}

/* §9 step 4: stator_frag[key] = the first fragment's decision (or refusal). */
static __always_inline void stator_frag_record(struct stator_pkt *pkt,
					       const struct stator_frag_key *key, __u32 real_id,
					       __u32 vip_id, __u32 reason, __u32 hash)
{
	struct stator_frag_entry e = {
		.real_id = real_id,
		.vip_id = vip_id,
		.created_ns = stator_now(pkt),
		.reason = reason,
		.hash = hash,
	};

	bpf_map_update_elem(&stator_frag, key, &e, BPF_ANY);
	if (!reason)
		stator_count(STATOR_CNT_FRAG_RECORD);
}

/* §4 "No backend": failover once (§10.1), else the drop; a first fragment records the refusal
 * instead and never fails over. */
static __always_inline int stator_no_backend(struct xdp_md *ctx, struct stator_pkt *pkt,
					     const struct stator_vip *vip,
					     const struct stator_frag_key *key, __u32 reason,
					     const int icmp_err)
{
	const struct stator_addr *fo = NULL;
	__u32 mark;

	if (key)
		stator_frag_record(pkt, key, STATOR_NO_REAL, vip->vip_id, reason, 0);
	if (!key && reason == STATOR_DROP_NO_BACKEND && (vip->flags & STATOR_VIP_F_FAILOVER)) {
		if (pkt->redirected) {
			stator_count(STATOR_CNT_REDIRECT_AGAIN);
		} else if (vip->vip_id < STATOR_MAX_VIPS) {
			__u32 idx = pkt->gen * STATOR_MAX_VIPS + vip->vip_id;

			fo = bpf_map_lookup_elem(&stator_failover, &idx);
			if (fo && fo->family == STATOR_FAMILY_NONE)
				fo = NULL;
		}
	}
	mark = icmp_err ? 0 : stator_trace_mark_at(ctx, pkt);
	if (mark) {
		struct stator_decision d = STATOR_DECISION(STATOR_TRACE_DROP);

		d.vip_id = vip->vip_id;
		if (fo) {
			d.kind = STATOR_TRACE_FAILOVER;
			stator_copy_addr(d.target, fo->addr);
			d.target_family = fo->family;
		} else {
			d.reason = reason;
			d.flags = key ? STATOR_TRACE_F_FRAGMENT : 0;
		}
		stator_trace_decision(ctx, pkt, mark, &d);
	}
	if (fo)
		return stator_redirect_tx(ctx, pkt, fo->addr, fo->family, STATOR_CNT_FAILOVER);
	return stator_drop(reason);
}

/* §3's VIP accounting, §4 (mode STATOR_SEL_*), then the record of a first fragment (`key`),
 * the report, and §5. `icmp_err`: count icmp_error_fwd once a real is chosen. */
static __always_inline int stator_decide(struct xdp_md *ctx, struct stator_pkt *pkt,
					 const struct stator_vip *vip, int mode,
					 const struct stator_frag_key *key, const int icmp_err)
{
	const struct stator_node_cfg *cfg = pkt->cfg;
	const struct stator_real *real = NULL;
	__u32 real_id, reason = STATOR_DROP_NONE, mark;

	stator_traffic_add(&stator_vipstats, vip->vip_id, pkt->len);
	if (!cfg) /* never: read with the generation */
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	real_id = stator_select(pkt, vip, cfg, mode, &real, &reason);
	if (real_id == STATOR_NO_REAL || !real)
		return stator_no_backend(ctx, pkt, vip, key, reason, icmp_err);
	if (icmp_err)
		stator_count(STATOR_CNT_ICMP_ERROR_FWD);
	if (key)
		stator_frag_record(pkt, key, real_id, vip->vip_id, 0, stator_pkt_hash(pkt));
	mark = icmp_err ? 0 : stator_trace_mark_at(ctx, pkt);
	if (mark) {
		struct stator_decision d = STATOR_DECISION(STATOR_TRACE_FORWARD);

		d.vip_id = vip->vip_id;
		d.real_id = real_id;
		d.cause = pkt->cause;
		d.slot = pkt->cause == STATOR_TRACE_C_CT_HIT ? STATOR_NO_SLOT : pkt->slot;
		d.flags = key ? STATOR_TRACE_F_FRAGMENT : 0;
		stator_trace_decision(ctx, pkt, mark, &d);
	}
	return stator_encap_xmit(ctx, pkt, cfg, real, real_id, 0);
}

#endif /* STATOR_DECIDE_H */
