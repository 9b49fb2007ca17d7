/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * stator_fwd — Stator's XDP forwarder: the forwarding decision of docs/forwarding.md.
 *
 * This file only strings the stages together; each concern lives in its header:
 *   parse.h     Ethernet / IPv4 / IPv6 (+ extension headers) / TCP / UDP      §1–§3
 *   vip.h       active generation, the VIP-address table, VIP match          §2–§3
 *   conntrack.h connection table, timeouts, SYN-flood guard                  §4
 *   maglev.h    flow hash, Maglev table                                      §4
 *   encap.h     GRE / IPIP / GUE, outer IPv4 / IPv6, FIB, TX / REDIRECT      §5
 *   icmp.h      echo, frag-needed / packet-too-big                           §6
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
#include "maglev.h"
#include "conntrack.h"
#include "encap.h"
#include "icmp.h"
#include "probe.h"
#include "license.h"

/* §3–§5 for TCP and UDP: VIP match, selection, encapsulation. */
static __always_inline int stator_forward(struct xdp_md *ctx, struct stator_pkt *pkt)
{
	const struct stator_node_cfg *cfg = pkt->cfg;
	const struct stator_real *real = NULL;
	const struct stator_vip *vip;
	__u32 real_id, reason = STATOR_DROP_NONE;
	int rc, mode = STATOR_SEL_FLOW;

	rc = stator_parse_ports(ctx, pkt);
	if (rc != STATOR_CONTINUE)
		return rc;
	vip = stator_vip_match(pkt, pkt->flow.dst, 1, pkt->flow.dport, pkt->flow.proto);
	if (!vip)
		return stator_pass(STATOR_CNT_NON_VIP);
	stator_traffic_add(&stator_vipstats, vip->vip_id, pkt->len);
	if (!cfg) /* never: read with the generation */
		return stator_drop(STATOR_DROP_BAD_CONFIG);

	/* SYN without ACK: a new connection attempt (retransmissions included) */
	if (pkt->flow.proto == IPPROTO_TCP && (pkt->tcp_flags & 0x12) == 0x02)
		mode = STATOR_SEL_SYN;
	real_id = stator_select(pkt, vip, cfg, mode, &real, &reason);
	if (real_id == STATOR_NO_REAL || !real)
		return stator_drop(reason);
	return stator_encap_xmit(ctx, pkt, cfg, real, real_id);
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

	switch (pkt.flow.proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
		return stator_forward(ctx, &pkt);
	case IPPROTO_ICMP:
		if (pkt.family == STATOR_FAMILY_V4)
			return stator_icmp(ctx, &pkt);
		break;
	case STATOR_IPPROTO_ICMPV6:
		if (pkt.family == STATOR_FAMILY_V6)
			return stator_icmp(ctx, &pkt);
		break;
	}
	return stator_pass(STATOR_CNT_NON_VIP);
}

char _license[] SEC("license") = STATOR_BPF_LICENSE;
