/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * icmp.h — ICMP and ICMPv6 addressed to a VIP address (docs/forwarding.md §6).
 *
 * - Echo requests are answered in XDP when the node enables it (the default): a VIP can be
 *   pinged through any Stator node. It proves the node forwards, not that a backend is up.
 * - Fragmentation-needed / packet-too-big quote a packet a backend sent from the VIP: the quoted
 *   flow, reversed, is the client's flow, so the error is hashed and looked up as that flow and
 *   encapsulated to the backend that owns the connection (path MTU discovery keeps working).
 *   An error never creates connection-table state.
 * - Neighbour discovery is passed; anything else is dropped.
 */
#ifndef STATOR_ICMP_H
#define STATOR_ICMP_H

#include "classify.h"
#include "decide.h"

#define STATOR_ECHO_TTL 64

/* Swaps `n` bytes at a and b (n is a constant, at most 16: fixed-offset loads and stores). */
static __always_inline void stator_swap(__u8 *a, __u8 *b, const int n)
{
	__u8 t[16];

	__builtin_memcpy(t, a, n);
	__builtin_memcpy(a, b, n);
	__builtin_memcpy(b, t, n);
}

/* Echo request → echo reply, sent back where it came from (XDP_TX). */
static __always_inline int stator_icmp_echo(struct xdp_md *ctx, const struct stator_pkt *pkt)
{
	__u8 *eth, *ip, *icmp;
	__u16 old_word, csum;
	int rc = stator_icmp_echo_on(pkt);

	if (rc != STATOR_CONTINUE)
		return rc;
	eth = stator_ptr(ctx, 0, STATOR_ETH_LEN);
	icmp = stator_ptr(ctx, pkt->l4, 8);
	if (!eth || !icmp) /* unreachable: checked by the parser */
		return stator_drop(STATOR_DROP_MALFORMED_L4);
	stator_swap(eth, eth + ETH_ALEN, ETH_ALEN);
	old_word = *(__u16 *)icmp;

	if (pkt->family == STATOR_FAMILY_V4) {
		__u32 ihl, sum = 0;

		ip = stator_ptr(ctx, pkt->l3, STATOR_IPV4_LEN);
		if (!ip)
			return stator_drop(STATOR_DROP_MALFORMED_L3);
		stator_swap(ip + 12, ip + 16, 4);
		ip[8] = STATOR_ECHO_TTL;
		*(__u16 *)(ip + 10) = 0;
		/* recompute the header checksum over the whole header, options included */
		ihl = ip[0] & 0x0f;
		/* a bounded loop (at most 15 words): the verifier walks it */
		for (int i = 0; i < 15; i++) {
			__u32 *w;

			if (i >= ihl)
				break;
			w = stator_ptr(ctx, pkt->l3 + i * 4, 4);
			if (!w)
				break;
			sum = stator_csum_add32(sum, *w);
		}
		ip = stator_ptr(ctx, pkt->l3, STATOR_IPV4_LEN);
		if (!ip)
			return stator_drop(STATOR_DROP_MALFORMED_L3);
		*(__u16 *)(ip + 10) = ~stator_csum_fold(sum);
		icmp = stator_ptr(ctx, pkt->l4, 8);
		if (!icmp)
			return stator_drop(STATOR_DROP_MALFORMED_L4);
		icmp[0] = STATOR_ICMP_ECHO_REPLY;
	} else {
		ip = stator_ptr(ctx, pkt->l3, STATOR_IPV6_LEN);
		if (!ip)
			return stator_drop(STATOR_DROP_MALFORMED_L3);
		stator_swap(ip + 8, ip + 24, 16);
		ip[7] = STATOR_ECHO_TTL;
		icmp[0] = STATOR_ICMPV6_ECHO_REPLY;
	}
	/* RFC 1624 for the type change; the address swap leaves every sum unchanged. Eqn. 3
	 * gives 0x0000 where the data now sums to +0 (an all-zero echo reply: type, code,
	 * identifier, sequence and payload), which no receiver verifies; 0xffff is -0, the
	 * same checksum wherever 0x0000 was right (docs/forwarding.md §6) */
	csum = stator_csum_replace16(*(__u16 *)(icmp + 2), old_word, *(__u16 *)icmp);
	*(__u16 *)(icmp + 2) = csum ? csum : 0xffff;
	stator_count(STATOR_CNT_ICMP_ECHO_REPLY);
	stator_count(STATOR_CNT_ACT_TX);
	return XDP_TX;
}

/*
 * Frag-needed / packet-too-big: parse the quoted header at l4 + 8, reverse its flow into
 * pkt->flow, match the VIP it came from, select without inserting, encapsulate the whole ICMP
 * packet.
 */
static __always_inline int stator_icmp_error(struct xdp_md *ctx, struct stator_pkt *pkt)
{
	const struct stator_vip *vip;
	__u32 q = pkt->l4 + 8, ql4;
	__be16 *ports;
	__u8 *qh, qproto;

	if (pkt->family == STATOR_FAMILY_V4) {
		__u32 qihl;

		if (q + STATOR_IPV4_LEN > pkt->ip_end)
			return stator_drop(STATOR_DROP_MALFORMED_L4);
		qh = stator_ptr(ctx, q, STATOR_IPV4_LEN);
		if (!qh)
			return stator_drop(STATOR_DROP_MALFORMED_L4);
		qihl = (__u32)(qh[0] & 0x0f) * 4;
		if ((qh[0] >> 4) != 4 || qihl < STATOR_IPV4_LEN || q + qihl + 8 > pkt->ip_end)
			return stator_drop(STATOR_DROP_MALFORMED_L4);
		qproto = qh[9];
		if (qproto != IPPROTO_TCP && qproto != IPPROTO_UDP)
			return stator_drop(STATOR_DROP_ICMP);
		/* reversed: the client (quoted destination) is the flow's source */
		pkt->flow.src[0] = *(__be32 *)(qh + 16);
		pkt->flow.dst[0] = *(__be32 *)(qh + 12);
		ql4 = q + qihl;
	} else {
		if (q + STATOR_IPV6_LEN + 8 > pkt->ip_end)
			return stator_drop(STATOR_DROP_MALFORMED_L4);
		qh = stator_ptr(ctx, q, STATOR_IPV6_LEN);
		if (!qh)
			return stator_drop(STATOR_DROP_MALFORMED_L4);
		if ((qh[0] >> 4) != 6)
			return stator_drop(STATOR_DROP_MALFORMED_L4);
		qproto = qh[6];
		if (qproto != IPPROTO_TCP && qproto != IPPROTO_UDP)
			return stator_drop(STATOR_DROP_ICMP);
		stator_copy_addr(pkt->flow.src, qh + 24);
		stator_copy_addr(pkt->flow.dst, qh + 8);
		ql4 = q + STATOR_IPV6_LEN;
	}
	ports = stator_ptr(ctx, ql4, 4);
	if (!ports)
		return stator_drop(STATOR_DROP_MALFORMED_L4);
	pkt->flow.sport = ports[1];
	pkt->flow.dport = ports[0];
	pkt->flow.proto = qproto;

	/* the VIP is the quoted source (its address flags are the outer destination's) */
	vip = stator_vip_match(pkt, pkt->flow.dst, 0, pkt->flow.dport, qproto);
	if (!vip)
		return stator_drop(STATOR_DROP_ICMP);
	return stator_decide(ctx, pkt, vip, STATOR_SEL_ICMP_ERR, NULL, 1);
}

/* §6: ICMP (IPv4) or ICMPv6 (IPv6) to a VIP address, by its kind (classify.h). */
static __always_inline int stator_icmp(struct xdp_md *ctx, struct stator_pkt *pkt)
{
	enum stator_icmp_class kind = STATOR_ICMP_C_OTHER;
	int rc = stator_icmp_class(ctx, pkt, &kind);

	if (rc != STATOR_CONTINUE)
		return rc;
	if (kind == STATOR_ICMP_C_ERROR)
		return stator_icmp_error(ctx, pkt);
	if (pkt->redirected) /* only errors are served inside a redirect (§6) */
		return stator_drop(STATOR_DROP_REDIRECT);
	if (kind == STATOR_ICMP_C_ECHO)
		return stator_icmp_echo(ctx, pkt);
	if (kind == STATOR_ICMP_C_ND)
		return stator_pass(STATOR_CNT_NON_VIP);
	return stator_drop(STATOR_DROP_ICMP);
}

#endif /* STATOR_ICMP_H */
