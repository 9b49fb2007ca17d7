/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * stator_xsk — the AF_XDP data plane's XDP program (docs/afxdp.md) and its FIB helper.
 *
 *   stator_xsk   VIP traffic → the AF_XDP socket of the packet's RX queue (stator_xsks); the
 *                rest passed to the kernel. "VIP traffic" is decided by the forwarder's own
 *                stages — parse.h, vip.h and classify.h, the code stator_fwd runs — so this
 *                program passes exactly what the XDP forwarder passes (and counts it the same
 *                way: non_ip, non_vip, act_pass) and hands up everything the forwarder would
 *                decide. Its malformed-header drops are the forwarder's too (counted here, in
 *                the same maps). Self-test probes are answered as by the forwarder (probe.h).
 *   stator_fibq  never attached: run by BPF_PROG_TEST_RUN over a struct stator_fib_query, it
 *                asks bpf_fib_lookup what the forwarder asks (encap.h) and writes the answer
 *                back, so the user-space forwarder's next hops are the kernel's.
 *
 * The maps are the forwarder's (maps.h, pinned by name: configuration generations, counters),
 * plus stator_xsks and stator_xskcfg (xsk.h).
 */
#include "common.h"
#include "maps.h"
#include "stats.h"
#include "vip.h"
#include "parse.h"
#include "classify.h"
#include "probe.h"
#include "xsk.h"
#include "license.h"

/* §6's split of ICMP to a VIP address, by classify.h's kinds: echo (answered in user space when
 * the node answers pings, else passed), errors and the rest (user space routes or drops them),
 * neighbour discovery (passed). */
static __always_inline int stator_xsk_icmp(struct xdp_md *ctx, struct stator_pkt *pkt)
{
	enum stator_icmp_class kind = STATOR_ICMP_C_OTHER;
	int rc = stator_icmp_class(ctx, pkt, &kind);

	if (rc != STATOR_CONTINUE)
		return rc;
	if (kind == STATOR_ICMP_C_ECHO) {
		rc = stator_icmp_echo_on(pkt);
		if (rc != STATOR_CONTINUE)
			return rc;
	} else if (kind == STATOR_ICMP_C_ND) {
		return stator_pass(STATOR_CNT_NON_VIP);
	}
	return stator_xsk_redirect(ctx, pkt);
}

SEC("xdp")
int stator_xsk(struct xdp_md *ctx)
{
	struct stator_pkt pkt = {};
	const struct stator_vip *vip = NULL;
	__be16 ethertype;
	int rc;

	pkt.len = ctx->data_end - ctx->data;
	ethertype = stator_parse_eth(ctx, &pkt);
	if (ethertype == bpf_htons(ETH_P_IP) || ethertype == bpf_htons(ETH_P_IPV6)) {
		rc = stator_read_ctl(&pkt);
		if (rc != STATOR_CONTINUE)
			return rc;
		rc = stator_parse_ip(ctx, &pkt, ethertype);
		if (rc != STATOR_CONTINUE)
			return rc;
	} else if (ethertype == bpf_htons(STATOR_PROBE_ETHERTYPE) && pkt.l3 == STATOR_ETH_LEN) {
		return stator_probe(ctx);
	} else {
		return stator_pass(STATOR_CNT_NON_IP);
	}
	/* §9 steps 1–2 (frag.h's stator_frag_decide runs the same); the owner, the record and the
	 * hold are decided in user space. A first fragment for a VIP address on a port it does not
	 * serve is handed up too (only the owner's VIP match would pass it; the owner is user
	 * space's question): user space recycles it, counted `user_pass`. */
	if (pkt.is_frag) {
		rc = stator_frag_admit(ctx, &pkt);
		if (rc != STATOR_CONTINUE)
			return rc;
		return stator_xsk_redirect(ctx, &pkt);
	}

	switch (stator_l4_class(&pkt)) {
	case STATOR_L4_PORTS:
		rc = stator_ports_vip(ctx, &pkt, &vip);
		if (rc != STATOR_CONTINUE)
			return rc;
		return stator_xsk_redirect(ctx, &pkt);
	case STATOR_L4_ICMP:
		return stator_xsk_icmp(ctx, &pkt);
	case STATOR_L4_GRE:
		/* §10.2: a Stator redirect is handed up — stator-core decapsulates it and decides
		 * its inner packet once; any other GRE is the kernel's */
		if (!stator_gre_redirect(ctx, &pkt))
			return stator_pass(STATOR_CNT_NON_VIP);
		return stator_xsk_redirect(ctx, &pkt);
	case STATOR_L4_OTHER:
		break;
	}
	return stator_pass(STATOR_CNT_NON_VIP);
}

SEC("xdp")
int stator_fibq(struct xdp_md *ctx)
{
	struct stator_fib_query *q = stator_ptr(ctx, STATOR_FIBQ_OFF, sizeof(*q));
	struct bpf_fib_lookup fib = {};
	long rc;

	if (!q)
		return XDP_ABORTED;
	fib.l4_protocol = q->l4_protocol;
	fib.tot_len = q->tot_len;
	fib.ifindex = q->ifindex;
	if (q->family == STATOR_FAMILY_V6) {
		fib.family = STATOR_AF_INET6;
		stator_copy_addr(fib.ipv6_src, q->src);
		stator_copy_addr(fib.ipv6_dst, q->dst);
	} else {
		fib.family = STATOR_AF_INET;
		fib.ipv4_src = q->src[0];
		fib.ipv4_dst = q->dst[0];
	}
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	q = stator_ptr(ctx, STATOR_FIBQ_OFF, sizeof(*q));
	if (!q)
		return XDP_ABORTED;
	q->rc = (__s32)rc;
	q->ifindex = fib.ifindex;
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		q->tot_len = fib.mtu_result;
	__builtin_memcpy(q->smac, fib.smac, 6);
	__builtin_memcpy(q->dmac, fib.dmac, 6);
	return XDP_PASS;
}

char _license[] SEC("license") = STATOR_BPF_LICENSE;
