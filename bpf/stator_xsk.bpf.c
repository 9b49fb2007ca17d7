/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * stator_xsk — the AF_XDP data plane's XDP program (docs/afxdp.md) and its FIB helper.
 *
 *   stator_xsk   VIP traffic → the AF_XDP socket of the packet's RX queue (stator_xsks); the
 *                rest passed to the kernel. "VIP traffic" is decided by the forwarder's own
 *                stages — parse.h and vip.h, the same code stator_fwd runs — so this program
 *                passes exactly what the XDP forwarder passes (and counts it the same way:
 *                non_ip, non_vip, act_pass) and hands up everything the forwarder would decide.
 *                Its malformed-header drops are the forwarder's too (counted here, in the same
 *                maps). Self-test probes are answered as by the forwarder (probe.h).
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
#include "probe.h"
#include "xsk.h"
#include "license.h"

/* §6's split of ICMP to a VIP address, as icmp.h decides it: echo (answered in user space when
 * the node answers pings, else passed), errors and the rest (user space routes or drops them),
 * neighbour discovery (passed). */
static __always_inline int stator_xsk_icmp(struct xdp_md *ctx, struct stator_pkt *pkt)
{
	__u8 *icmp;

	if (pkt->l4 + 8 > pkt->ip_end)
		return stator_drop(STATOR_DROP_MALFORMED_L4);
	icmp = stator_ptr(ctx, pkt->l4, 8);
	if (!icmp)
		return stator_drop(STATOR_DROP_MALFORMED_L4);
	if ((pkt->family == STATOR_FAMILY_V4 && icmp[0] == 8) ||
	    (pkt->family == STATOR_FAMILY_V6 && icmp[0] == 128)) {
		if (!pkt->cfg || !(pkt->cfg->flags & STATOR_NODE_F_ICMP_ECHO))
			return stator_pass(STATOR_CNT_NON_VIP);
	} else if (pkt->family == STATOR_FAMILY_V6 && icmp[0] >= 133 && icmp[0] <= 137) {
		return stator_pass(STATOR_CNT_NON_VIP);
	}
	return stator_xsk_redirect(ctx, pkt);
}

/* §9 steps 1–2 of frag.h's stator_frag_decide, which stator-core runs again in user space: a
 * fragment for an address that does not opt in is dropped `fragment`, one of another protocol
 * passed, the rest (owner, record, hold) decided up there. A first fragment for a VIP address
 * on a port it does not serve is handed up too (only the owner's VIP match would pass it; the
 * owner is user space's question): user space recycles it, counted `user_pass`. */
static __always_inline int stator_xsk_frag(struct xdp_md *ctx, struct stator_pkt *pkt)
{
	const struct stator_node_cfg *cfg = pkt->cfg;
	int rc;

	if (!cfg)
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	if (!(pkt->vaddr && (pkt->vaddr->flags & STATOR_VADDR_F_FRAGS))) {
		const struct stator_class *c = NULL;

		if (cfg->flags & STATOR_NODE_F_GROUPS)
			c = stator_dst_class(pkt);
		if (!c || !(c->flags & STATOR_CLASS_F_FRAGS))
			return stator_drop(STATOR_DROP_FRAGMENT);
	}
	if (pkt->frag_first) {
		if (pkt->flow.proto != IPPROTO_TCP && pkt->flow.proto != IPPROTO_UDP)
			return stator_pass(STATOR_CNT_NON_VIP);
		rc = stator_parse_ports(ctx, pkt);
		if (rc != STATOR_CONTINUE)
			return rc;
	} else if (pkt->frag_proto != IPPROTO_TCP && pkt->frag_proto != IPPROTO_UDP) {
		return stator_pass(STATOR_CNT_NON_VIP);
	}
	return stator_xsk_redirect(ctx, pkt);
}

/* §10.2: GRE to an address of ours. A Stator redirect (01 00 + an IP protocol type) is handed
 * up — stator-core decapsulates it and decides its inner packet once; any other GRE is the
 * kernel's, as in stator_fwd's stator_redirect_rx. */
static __always_inline int stator_xsk_gre(struct xdp_md *ctx, struct stator_pkt *pkt)
{
	__be16 *g;

	if (pkt->l4 + 4 > pkt->ip_end)
		return stator_pass(STATOR_CNT_NON_VIP);
	g = stator_ptr(ctx, pkt->l4, 4);
	if (!g)
		return stator_pass(STATOR_CNT_NON_VIP);
	if (g[0] != bpf_htons(STATOR_GRE_REDIRECT) ||
	    (g[1] != bpf_htons(ETH_P_IP) && g[1] != bpf_htons(ETH_P_IPV6)))
		return stator_pass(STATOR_CNT_NON_VIP);
	return stator_xsk_redirect(ctx, pkt);
}

SEC("xdp")
int stator_xsk(struct xdp_md *ctx)
{
	struct stator_pkt pkt = {};
	__be16 ethertype;
	int rc;

	pkt.len = ctx->data_end - ctx->data;
	ethertype = stator_parse_eth(ctx, &pkt);
	if (ethertype == bpf_htons(ETH_P_IP) || ethertype == bpf_htons(ETH_P_IPV6)) {
		rc = stator_read_ctl(&pkt);
		if (rc != STATOR_CONTINUE)
			return rc;
		if (ethertype == bpf_htons(ETH_P_IP))
			rc = stator_parse_ipv4(ctx, &pkt);
		else
			rc = stator_parse_ipv6(ctx, &pkt);
		if (rc != STATOR_CONTINUE)
			return rc;
	} else if (ethertype == bpf_htons(STATOR_PROBE_ETHERTYPE) && pkt.l3 == STATOR_ETH_LEN) {
		return stator_probe(ctx);
	} else {
		return stator_pass(STATOR_CNT_NON_IP);
	}
	if (pkt.is_frag)
		return stator_xsk_frag(ctx, &pkt);

	switch (pkt.flow.proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
		rc = stator_parse_ports(ctx, &pkt);
		if (rc != STATOR_CONTINUE)
			return rc;
		if (!stator_vip_match(&pkt, pkt.flow.dst, 1, pkt.flow.dport, pkt.flow.proto))
			return stator_pass(STATOR_CNT_NON_VIP);
		return stator_xsk_redirect(ctx, &pkt);
	case IPPROTO_ICMP:
		if (pkt.family == STATOR_FAMILY_V4)
			return stator_xsk_icmp(ctx, &pkt);
		break;
	case STATOR_IPPROTO_ICMPV6:
		if (pkt.family == STATOR_FAMILY_V6)
			return stator_xsk_icmp(ctx, &pkt);
		break;
	case IPPROTO_GRE:
		return stator_xsk_gre(ctx, &pkt);
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
