/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * tail.h — the forwarder's rare paths as tail-called programs (stator_progs): a fragment
 * (stator_fragment, then stator_first for a first fragment decided here) and a redirect's inner
 * packet (stator_inner). Each is verified on its own, so the path of ordinary packets keeps its
 * verification cost and its code. The caller writes where the packet's IP header is
 * (stator_tcx) and the callee parses it again from there.
 */
#ifndef STATOR_TAIL_H
#define STATOR_TAIL_H

#include "parse.h"

/* Hands the packet at pkt->l3 (ethertype `et`) to the tail-called program `which`; if the call
 * fails (the loader did not fill stator_progs), DROP bad_config. */
static __always_inline int stator_tail(struct xdp_md *ctx, struct stator_pkt *pkt, __u32 which,
				       __be16 et)
{
	__u32 zero = 0;
	struct stator_tail *t = bpf_map_lookup_elem(&stator_tcx, &zero);

	if (!t)
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	t->l3 = pkt->l3;
	t->ethertype = et;
	t->redirected = pkt->redirected;
	bpf_tail_call(ctx, &stator_progs, which);
	return stator_drop(STATOR_DROP_BAD_CONFIG);
}

/* A tail-called program's start: the frame's length, the generation, and where its packet is. */
static __always_inline int stator_resume(struct xdp_md *ctx, struct stator_pkt *pkt, __be16 *et)
{
	__u32 zero = 0;
	struct stator_tail *t = bpf_map_lookup_elem(&stator_tcx, &zero);
	int rc;

	pkt->len = ctx->data_end - ctx->data;
	rc = stator_read_ctl(pkt);
	if (rc != STATOR_CONTINUE)
		return rc;
	if (!t)
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	pkt->l3 = t->l3;
	pkt->redirected = t->redirected;
	*et = t->ethertype;
	return STATOR_CONTINUE;
}

#endif /* STATOR_TAIL_H */
