/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * classify.h — which of the forwarding decision's rules a packet of ours comes under, and the
 * checks that send it to the kernel or drop it before anything is decided (docs/forwarding.md
 * §2's dispatch, §3's VIP match, §6's ICMP kinds, §9 steps 1–2, §10.2's redirect header).
 *
 * Two programs run these: stator_fwd, which goes on to decide, and stator_xsk, which hands
 * whatever stator_fwd would decide to the AF_XDP socket (stator-core decides it in user space)
 * and passes or drops the rest exactly as stator_fwd does, counted the same. Each check is
 * written once, here, so the two cannot drift apart. Every function ends the packet (an XDP
 * action, counted) or returns STATOR_CONTINUE / a class for the caller to act on.
 */
#ifndef STATOR_CLASSIFY_H
#define STATOR_CLASSIFY_H

#include "parse.h"

/* ICMP (IPv4) and ICMPv6 types and codes §6 names. */
#define STATOR_ICMP_ECHO_REPLY 0
#define STATOR_ICMP_DEST_UNREACH 3
#define STATOR_ICMP_FRAG_NEEDED 4
#define STATOR_ICMP_ECHO 8
#define STATOR_ICMPV6_PKT_TOOBIG 2
#define STATOR_ICMPV6_ECHO_REQUEST 128
#define STATOR_ICMPV6_ECHO_REPLY 129
#define STATOR_ICMPV6_ND_FIRST 133
#define STATOR_ICMPV6_ND_LAST 137

/* §2's dispatch of an unfragmented packet by its protocol. */
enum stator_l4_class {
	STATOR_L4_OTHER, /* anything else, ICMP in the wrong family included: PASS non_vip */
	STATOR_L4_PORTS, /* TCP or UDP: §3 */
	STATOR_L4_ICMP,  /* ICMP in IPv4, ICMPv6 in IPv6: §6 */
	STATOR_L4_GRE,   /* GRE: §10.2 */
};

static __always_inline enum stator_l4_class stator_l4_class(const struct stator_pkt *pkt)
{
	switch (pkt->flow.proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
		return STATOR_L4_PORTS;
	case IPPROTO_ICMP:
		return pkt->family == STATOR_FAMILY_V4 ? STATOR_L4_ICMP : STATOR_L4_OTHER;
	case STATOR_IPPROTO_ICMPV6:
		return pkt->family == STATOR_FAMILY_V6 ? STATOR_L4_ICMP : STATOR_L4_OTHER;
	case IPPROTO_GRE:
		return STATOR_L4_GRE;
	}
	return STATOR_L4_OTHER;
}

/* §3 for TCP and UDP: the ports, then the VIP of (destination, port, protocol) into *vip; no
 * VIP → PASS non_vip. */
static __always_inline int stator_ports_vip(const struct xdp_md *ctx, struct stator_pkt *pkt,
					    const struct stator_vip **vip)
{
	int rc = stator_parse_ports(ctx, pkt);

	if (rc != STATOR_CONTINUE)
		return rc;
	*vip = stator_vip_match(pkt, pkt->flow.dst, 1, pkt->flow.dport, pkt->flow.proto);
	if (!*vip)
		return STATOR_PASS(pkt, STATOR_CNT_NON_VIP);
	return STATOR_CONTINUE;
}

/* §6's kinds of ICMP to a VIP address. */
enum stator_icmp_class {
	STATOR_ICMP_C_OTHER, /* DROP icmp */
	STATOR_ICMP_C_ERROR, /* frag-needed / packet-too-big: to the quoted flow's backend */
	STATOR_ICMP_C_ECHO,  /* echo request: answered when the node answers pings */
	STATOR_ICMP_C_ND,    /* ICMPv6 neighbour discovery: PASS non_vip */
};

/* §6: the ICMP header (8 bytes within ip_end, else DROP malformed_l4) and its kind in *kind. */
static __always_inline int stator_icmp_class(const struct xdp_md *ctx, const struct stator_pkt *pkt,
					     enum stator_icmp_class *kind)
{
	__u8 *icmp;

	if (pkt->l4 + 8 > pkt->ip_end)
		return stator_drop(STATOR_DROP_MALFORMED_L4);
	icmp = stator_ptr(ctx, pkt->l4, 8);
	if (!icmp)
		return stator_drop(STATOR_DROP_MALFORMED_L4);
	*kind = STATOR_ICMP_C_OTHER;
	if (pkt->family == STATOR_FAMILY_V4) {
		if (icmp[0] == STATOR_ICMP_DEST_UNREACH && icmp[1] == STATOR_ICMP_FRAG_NEEDED)
			*kind = STATOR_ICMP_C_ERROR;
		else if (icmp[0] == STATOR_ICMP_ECHO)
			*kind = STATOR_ICMP_C_ECHO;
	} else {
		if (icmp[0] == STATOR_ICMPV6_PKT_TOOBIG)
			*kind = STATOR_ICMP_C_ERROR;
		else if (icmp[0] == STATOR_ICMPV6_ECHO_REQUEST)
			*kind = STATOR_ICMP_C_ECHO;
		else if (icmp[0] >= STATOR_ICMPV6_ND_FIRST && icmp[0] <= STATOR_ICMPV6_ND_LAST)
			*kind = STATOR_ICMP_C_ND;
	}
	return STATOR_CONTINUE;
}

/* §6: an echo request is answered only when the node answers pings (STATOR_NODE_F_ICMP_ECHO),
 * else PASS non_vip. */
static __always_inline int stator_icmp_echo_on(const struct stator_pkt *pkt)
{
	if (!pkt->cfg) /* never: read with the generation */
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	if (!(pkt->cfg->flags & STATOR_NODE_F_ICMP_ECHO))
		return stator_pass(STATOR_CNT_NON_VIP);
	return STATOR_CONTINUE;
}

/* §10.2: whether the GRE packet at pkt->l4 is a Stator redirect — a 4-byte header within ip_end
 * reading 01 00 and an IP protocol type. Its inner ethertype (network order), else 0: any other
 * GRE is the kernel's (PASS non_vip). */
static __always_inline __be16 stator_gre_redirect(const struct xdp_md *ctx,
						  const struct stator_pkt *pkt)
{
	__be16 *g;

	if (pkt->l4 + 4 > pkt->ip_end)
		return 0;
	g = stator_ptr(ctx, pkt->l4, 4);
	if (!g)
		return 0;
	if (g[0] != bpf_htons(STATOR_GRE_REDIRECT) ||
	    (g[1] != bpf_htons(ETH_P_IP) && g[1] != bpf_htons(ETH_P_IPV6)))
		return 0;
	return g[1];
}

/* §9 steps 1–2 for a fragment (pkt->is_frag): its destination opts in to fragments (the
 * address's slot, or its class), else DROP fragment; a first fragment's protocol is TCP or UDP
 * and its L4 header is parsed, the others' protocol is TCP or UDP, else PASS non_vip. */
static __always_inline int stator_frag_admit(const struct xdp_md *ctx, struct stator_pkt *pkt)
{
	const struct stator_node_cfg *cfg = pkt->cfg;

	if (!cfg) /* never: read with the generation */
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	/* 1. opt-in: the destination's slot, or its class */
	if (!(pkt->vaddr && (pkt->vaddr->flags & STATOR_VADDR_F_FRAGS))) {
		const struct stator_class *c = NULL;

		if (cfg->flags & STATOR_NODE_F_GROUPS)
			c = stator_dst_class(pkt);
		if (!c || !(c->flags & STATOR_CLASS_F_FRAGS))
			return stator_drop(STATOR_DROP_FRAGMENT);
	}
	/* 2. a first fragment's L4 header; the others' protocol */
	if (pkt->frag_first) {
		if (pkt->flow.proto != IPPROTO_TCP && pkt->flow.proto != IPPROTO_UDP)
			return STATOR_PASS(pkt, STATOR_CNT_NON_VIP);
		return stator_parse_ports(ctx, pkt);
	}
	if (pkt->frag_proto != IPPROTO_TCP && pkt->frag_proto != IPPROTO_UDP)
		return STATOR_PASS(pkt, STATOR_CNT_NON_VIP);
	return STATOR_CONTINUE;
}

#endif /* STATOR_CLASSIFY_H */
