/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * stator_fwd — Stator's XDP forwarder: the forwarding decision of docs/forwarding.md.
 *
 * This file only strings the stages together; each concern lives in its header:
 *   parse.h     Ethernet / IPv4 / IPv6 (+ extension headers) / TCP / UDP      §1–§3
 *   classify.h  dispatch, VIP of TCP/UDP, ICMP kinds, fragments' admission,   §2–§3, §6,
 *               redirect header (shared with stator_xsk)                      §9, §10.2
 *   vip.h       active generation, the VIP-address table, VIP match          §2–§3
 *   conntrack.h connection table, timeouts, SYN-flood guard                  §4
 *   maglev.h    flow hash, Maglev table                                      §4
 *   encap.h     GRE / IPIP / GUE, outer IPv4 / IPv6, FIB, TX / REDIRECT      §5
 *   icmp.h      echo, frag-needed / packet-too-big                           §6
 *   group.h     prefix groups and suffixes                                   §3.1
 *   decide.h    VIP accounting → selection → failover / record / report      §3–§5, §10.1
 *   frag.h      fragments: owner, record, holder                             §9
 *   trace.h     the tracer's mark and report                                 §11
 *   probe.h     the self-test probe                                          §1.4
 *   stats.h     counters; maps.h the maps; csum.h checksums
 * Built twice: stator_fwd.o (per-CPU connection table) and stator_fwd_shared.o
 * (-DSTATOR_CT_SHARED: one shared table with per-CPU LRU lists).
 */
#include "common.h"
#include "maps.h"
#include "stats.h"
#include "vip.h"
#include "parse.h"
#include "classify.h"
#include "maglev.h"
#include "conntrack.h"
#include "encap.h"
#include "trace.h"
#include "decide.h"
#include "icmp.h"
#include "tail.h"
#include "frag.h"
#include "probe.h"
#include "license.h"

/* §3–§5 for TCP and UDP: VIP match, selection, the trace mark, encapsulation. */
static __always_inline int stator_forward(struct xdp_md *ctx, struct stator_pkt *pkt)
{
	const struct stator_vip *vip = NULL;
	int rc = stator_ports_vip(ctx, pkt, &vip), mode = STATOR_SEL_FLOW;

	if (rc != STATOR_CONTINUE)
		return rc;
	if (!vip) /* never: stator_ports_vip found it */
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	if (stator_stale(pkt))
		return STATOR_PASS(pkt, STATOR_CNT_STALE_PASS);
	/* SYN without ACK: a new connection attempt (retransmissions included) */
	if (pkt->flow.proto == IPPROTO_TCP && (pkt->tcp_flags & 0x12) == 0x02)
		mode = STATOR_SEL_SYN;
	return stator_decide(ctx, pkt, vip, mode, NULL, 0);
}

/* §10.2: GRE to an address of ours. A Stator redirect (01 00 + an IP protocol type) goes to
 * stator_inner with pkt->l3 at its inner packet; any other GRE is the kernel's. */
static __always_inline int stator_redirect_rx(struct xdp_md *ctx, struct stator_pkt *pkt)
{
	__be16 proto = stator_gre_redirect(ctx, pkt);

	if (!proto)
		return STATOR_PASS(pkt, STATOR_CNT_NON_VIP);
	if (pkt->redirected)
		return stator_drop(STATOR_DROP_REDIRECT);
	stator_count(STATOR_CNT_REDIRECT_RX);
	pkt->l3 = pkt->l4 + 4;
	pkt->redirected = 1;
	return stator_tail(ctx, pkt, STATOR_TAIL_INNER, proto);
}

/* §2 onwards for the IP packet at pkt->l3 of ethertype `et`. */
static __always_inline int stator_ip(struct xdp_md *ctx, struct stator_pkt *pkt, __be16 et)
{
	int rc = stator_parse_ip(ctx, pkt, et);

	if (rc != STATOR_CONTINUE)
		return rc;
	if (pkt->is_frag)
		return stator_tail(ctx, pkt, STATOR_TAIL_FRAG, et);

	switch (stator_l4_class(pkt)) {
	case STATOR_L4_PORTS:
		return stator_forward(ctx, pkt);
	case STATOR_L4_ICMP:
		return stator_icmp(ctx, pkt);
	case STATOR_L4_GRE:
		return stator_redirect_rx(ctx, pkt);
	case STATOR_L4_OTHER:
		break;
	}
	return STATOR_PASS(pkt, STATOR_CNT_NON_VIP);
}

SEC("xdp")
int stator_fwd(struct xdp_md *ctx)
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
		return stator_ip(ctx, &pkt, ethertype);
	}
	if (ethertype == bpf_htons(STATOR_PROBE_ETHERTYPE) && pkt.l3 == STATOR_ETH_LEN)
		return stator_probe(ctx);
	return stator_pass(STATOR_CNT_NON_IP);
}

/* §10.2: a Stator redirect's inner packet (tail-called by stator_fwd), decided once and never
 * redirected again. */
SEC("xdp")
int stator_inner(struct xdp_md *ctx)
{
	struct stator_pkt pkt = {};
	__be16 et;
	int rc = stator_resume(ctx, &pkt, &et);

	if (rc != STATOR_CONTINUE)
		return rc;
	return stator_ip(ctx, &pkt, et);
}

/* §9: a fragment (tail-called by stator_fwd or stator_inner), parsed again from its IP header. */
SEC("xdp")
int stator_fragment(struct xdp_md *ctx)
{
	struct stator_pkt pkt = {};
	__be16 et;
	int rc = stator_resume(ctx, &pkt, &et);

	if (rc != STATOR_CONTINUE)
		return rc;
	rc = stator_parse_ip(ctx, &pkt, et);
	if (rc != STATOR_CONTINUE)
		return rc;
	if (!pkt.is_frag) /* never: the same frame was a fragment a moment ago */
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	return stator_frag_decide(ctx, &pkt, et);
}

/* §9 step 4: a first fragment this node decides (tail-called by stator_fragment). */
SEC("xdp")
int stator_first(struct xdp_md *ctx)
{
	struct stator_pkt pkt = {};
	__be16 et;
	int rc = stator_resume(ctx, &pkt, &et);

	if (rc != STATOR_CONTINUE)
		return rc;
	rc = stator_parse_ip(ctx, &pkt, et);
	if (rc != STATOR_CONTINUE)
		return rc;
	if (!pkt.is_frag || !pkt.frag_first) /* never */
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	return stator_frag_first(ctx, &pkt);
}

char _license[] SEC("license") = STATOR_BPF_LICENSE;
