/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * decap_tunnel.h — the tunnel header (GRE, GUE, nothing for IPIP) and the inner packet
 * (docs/decap.md §4–§5).
 *
 * Each stage finds where the inner packet starts and which family it announces, within the
 * bytes the outer header says it carries (p->end); then the inner IP header is checked against
 * that family and those bytes. Optional fields are skipped, never interpreted: GRE's checksum
 * (not verified), key and sequence number; GUE's flags and extension fields — except GUE private
 * data that is a second chance, which decap_second.h reads.
 */
#ifndef STATOR_DECAP_TUNNEL_H
#define STATOR_DECAP_TUNNEL_H

#include "decap_outer.h"

#define STATOR_GRE_F_C 0x8000
#define STATOR_GRE_F_R 0x4000
#define STATOR_GRE_F_K 0x2000
#define STATOR_GRE_F_S 0x1000
#define STATOR_GRE_VERSION 0x0007

/* §4, GRE (RFC 2784, RFC 2890). Like Linux's gre_parse_header: routing present or a version
 * other than 0 is refused; the strict-source-route, recursion and flag bits are ignored. */
static __always_inline int stator_decap_gre(const struct xdp_md *ctx, struct stator_dpkt *p)
{
	__be16 *g = stator_dptr(ctx, p->l4, 4);
	__u32 flags, hlen = 4;

	if (!g || p->l4 + 4 > p->end)
		return stator_dreject(STATOR_DECAP_CNT_BAD_OUTER);
	flags = bpf_ntohs(g[0]);
	if (flags & (STATOR_GRE_F_R | STATOR_GRE_VERSION))
		return stator_dreject(STATOR_DECAP_CNT_GRE_UNSUPPORTED);
	if (g[1] == bpf_htons(ETH_P_IP))
		p->inner_v6 = 0;
	else if (g[1] == bpf_htons(ETH_P_IPV6))
		p->inner_v6 = 1;
	else
		return stator_dreject(STATOR_DECAP_CNT_GRE_UNSUPPORTED);
	/* + 4 bytes each for checksum (with reserved1), key and sequence number; computed
	 * without branches so the verifier follows one path, not eight */
	hlen += ((flags >> 15) & 1) * 4 + ((flags >> 13) & 1) * 4 + ((flags >> 12) & 1) * 4;
	if (p->l4 + hlen > p->end)
		return stator_dreject(STATOR_DECAP_CNT_BAD_OUTER);
	p->inner = p->l4 + hlen;
	p->kind = STATOR_DECAP_CNT_GRE;
	return STATOR_CONTINUE;
}

/* §4, GUE (draft-ietf-intarea-gue) over UDP: variant 0 (a header with Hlen words of extension
 * fields, skipped) or variant 1 (the UDP payload is the IP packet). The UDP checksum is not
 * verified; zero is accepted over IPv6 too (RFC 6935). The UDP length bounds the inner packet. */
static __always_inline int stator_decap_gue(const struct xdp_md *ctx, struct stator_dpkt *p)
{
	__u8 *udp = stator_dptr(ctx, p->l4, STATOR_UDP_LEN);
	__u32 ulen, g, hlen;
	__u8 *h;

	if (!udp || p->l4 + STATOR_UDP_LEN > p->end)
		return stator_dreject(STATOR_DECAP_CNT_BAD_OUTER);
	ulen = bpf_ntohs(*(__be16 *)(udp + 4));
	if (ulen < STATOR_UDP_LEN + 1 || p->l4 + ulen > p->end)
		return stator_dreject(STATOR_DECAP_CNT_BAD_OUTER);
	p->end = p->l4 + ulen;
	g = p->l4 + STATOR_UDP_LEN;
	h = stator_dptr(ctx, g, 1);
	if (!h)
		return stator_dreject(STATOR_DECAP_CNT_BAD_OUTER);
	switch (h[0] >> 6) {
	case 0: /* variant 0: | 0 | C | Hlen | Proto/ctype | Flags | extension fields … */
		if (g + 4 > p->end)
			return stator_dreject(STATOR_DECAP_CNT_BAD_OUTER);
		h = stator_dptr(ctx, g, 4);
		if (!h)
			return stator_dreject(STATOR_DECAP_CNT_BAD_OUTER);
		if (h[0] & 0x20) /* a control message, not data */
			return stator_dreject(STATOR_DECAP_CNT_GUE_UNSUPPORTED);
		if (h[1] == STATOR_IPPROTO_IPIP)
			p->inner_v6 = 0;
		else if (h[1] == STATOR_IPPROTO_IPV6)
			p->inner_v6 = 1;
		else
			return stator_dreject(STATOR_DECAP_CNT_GUE_UNSUPPORTED);
		hlen = 4 + (__u32)(h[0] & 0x1f) * 4;
		if (g + hlen > p->end)
			return stator_dreject(STATOR_DECAP_CNT_BAD_OUTER);
		p->inner = g + hlen;
		if (hlen > 4) { /* private data: perhaps a second chance (decap_second.h) */
			p->sc = g + 4;
			p->sc_words = h[0] & 0x1f;
		}
		break;
	case 1: /* variant 1: direct IP, told apart by the IP version nibble */
		if ((h[0] >> 4) == 4)
			p->inner_v6 = 0;
		else if ((h[0] >> 4) == 6)
			p->inner_v6 = 1;
		else
			return stator_dreject(STATOR_DECAP_CNT_GUE_UNSUPPORTED);
		p->inner = g;
		break;
	default: /* versions 2 and 3 are not defined */
		return stator_dreject(STATOR_DECAP_CNT_GUE_UNSUPPORTED);
	}
	p->kind = STATOR_DECAP_CNT_GUE;
	return STATOR_CONTINUE;
}

/* §4: the tunnel header, by outer protocol (classified already: 4, 41, 47 or 17). */
static __always_inline int stator_decap_tunnel(const struct xdp_md *ctx, struct stator_dpkt *p)
{
	switch (p->proto) {
	case STATOR_IPPROTO_GRE:
		return stator_decap_gre(ctx, p);
	case IPPROTO_UDP:
		return stator_decap_gue(ctx, p);
	case STATOR_IPPROTO_IPV6:
		p->inner_v6 = 1;
		break;
	default: /* STATOR_IPPROTO_IPIP */
		p->inner_v6 = 0;
		break;
	}
	p->inner = p->l4;
	p->kind = STATOR_DECAP_CNT_IPIP;
	return STATOR_CONTINUE;
}

/*
 * §5: the inner IP header must be complete, of the announced family, and within p->end; then
 * RFC 6040 §4.2: an outer CE mark is copied into an ECN-capable inner header (the forwarder
 * copies ECN outward, so a router on the way may have marked the outer header only).
 */
static __always_inline int stator_decap_inner(const struct xdp_md *ctx, struct stator_dpkt *p)
{
	__u32 ihl, tot_len, plen;
	__u8 *ip;

	if (p->inner_v6) {
		ip = stator_dptr(ctx, p->inner, STATOR_IPV6_LEN);
		if (!ip || p->inner + STATOR_IPV6_LEN > p->end || (ip[0] >> 4) != 6)
			return stator_dreject(STATOR_DECAP_CNT_BAD_INNER);
		plen = bpf_ntohs(*(__be16 *)(ip + 4));
		if (p->inner + STATOR_IPV6_LEN + plen > p->end)
			return stator_dreject(STATOR_DECAP_CNT_BAD_INNER);
		if (p->outer_ecn == 3 && (ip[1] & 0x30))
			ip[1] |= 0x30;
		return STATOR_CONTINUE;
	}
	ip = stator_dptr(ctx, p->inner, STATOR_IPV4_LEN);
	if (!ip || p->inner + STATOR_IPV4_LEN > p->end || (ip[0] >> 4) != 4)
		return stator_dreject(STATOR_DECAP_CNT_BAD_INNER);
	ihl = (__u32)(ip[0] & 0x0f) * 4;
	tot_len = bpf_ntohs(*(__be16 *)(ip + 2));
	if (ihl < STATOR_IPV4_LEN || ihl > tot_len || p->inner + tot_len > p->end)
		return stator_dreject(STATOR_DECAP_CNT_BAD_INNER);
	if (p->outer_ecn == 3 && (ip[1] & 3) && (ip[1] & 3) != 3) {
		__u16 old = *(__u16 *)ip;

		ip[1] |= 3;
		*(__u16 *)(ip + 10) = stator_csum_replace16(*(__u16 *)(ip + 10), old,
							    *(__u16 *)ip);
	}
	return STATOR_CONTINUE;
}

#endif /* STATOR_DECAP_TUNNEL_H */
