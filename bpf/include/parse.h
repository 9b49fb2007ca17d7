/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * parse.h — Ethernet, IPv4, IPv6 (with its extension-header walk), TCP and UDP headers
 * (docs/forwarding.md §1–§3).
 *
 * The destination address is read from the fixed IP header and looked up *before* anything else
 * is validated: traffic that is not for a VIP is passed untouched, however it looks. Only VIP
 * traffic is validated, and a malformed VIP packet is dropped with a reason.
 */
#ifndef STATOR_PARSE_H
#define STATOR_PARSE_H

#include "vip.h"

/* §1: the ethertype (network order) behind at most one 802.1Q tag; sets pkt->l3. 0 = frame too
 * short (counted as non-IP by the caller, like any other ethertype it does not handle). */
static __always_inline __be16 stator_parse_eth(const struct xdp_md *ctx, struct stator_pkt *pkt)
{
	struct ethhdr *eth = stator_ptr(ctx, 0, STATOR_ETH_LEN);
	__be16 *inner;

	if (!eth)
		return 0;
	pkt->l3 = STATOR_ETH_LEN;
	if (eth->h_proto != bpf_htons(ETH_P_8021Q))
		return eth->h_proto;
	inner = stator_ptr(ctx, 16, sizeof(*inner));
	if (!inner)
		return 0;
	pkt->l3 = STATOR_VLAN_ETH_LEN;
	return *inner;
}

/* §2, IPv4: fixed header, VIP address, header validation, fragments. */
static __always_inline int stator_parse_ipv4(const struct xdp_md *ctx, struct stator_pkt *pkt)
{
	__u8 *ip = stator_ptr(ctx, pkt->l3, STATOR_IPV4_LEN);
	__u32 ihl, tot_len;
	__be16 frag;
	int rc;

	if (!ip)
		return stator_drop(STATOR_DROP_MALFORMED_L3);
	pkt->family = STATOR_FAMILY_V4;
	pkt->flow.family = STATOR_FAMILY_V4;
	pkt->flow.dst[0] = *(__be32 *)(ip + 16);
	rc = stator_vaddr_match(pkt);
	if (rc != STATOR_CONTINUE)
		return rc;
	frag = *(__be16 *)(ip + 6);
	/* the node's own address: only an unfragmented GRE packet may be a redirect (§2) */
	if (pkt->vaddr && !(pkt->vaddr->flags & STATOR_VADDR_VIP_FLAGS) &&
	    (ip[9] != IPPROTO_GRE || (frag & bpf_htons(0x3fff))))
		return STATOR_PASS(pkt, STATOR_CNT_NON_VIP);

	ihl = (__u32)(ip[0] & 0x0f) * 4;
	tot_len = bpf_ntohs(*(__be16 *)(ip + 2));
	if ((ip[0] >> 4) != 4 || ihl < STATOR_IPV4_LEN || pkt->l3 + ihl > pkt->len ||
	    ihl > tot_len || pkt->l3 + tot_len > pkt->len)
		return stator_drop(STATOR_DROP_MALFORMED_L3);
	if (frag & bpf_htons(0x3fff)) { /* MF or a fragment offset: §9 */
		pkt->is_frag = 1;
		pkt->frag_first = (frag & bpf_htons(0x1fff)) ? 0 : 1;
		pkt->frag_id = bpf_ntohs(*(__be16 *)(ip + 4));
		pkt->frag_proto = ip[9];
	}

	pkt->l4 = pkt->l3 + ihl;
	pkt->ip_end = pkt->l3 + tot_len;
	pkt->tos = ip[1];
	pkt->df = (frag & bpf_htons(0x4000)) ? 1 : 0;
	pkt->flow.proto = ip[9];
	pkt->flow.src[0] = *(__be32 *)(ip + 12);
	return STATOR_CONTINUE;
}

/* The five extension headers §2.4 walks over. */
static __always_inline int stator_ipv6_is_ext(__u8 nh)
{
	return nh == IPPROTO_HOPOPTS || nh == IPPROTO_ROUTING || nh == IPPROTO_DSTOPTS ||
	       nh == IPPROTO_AH || nh == IPPROTO_FRAGMENT;
}

/* §2.4: walks at most STATOR_MAX_IPV6_EXT_HDRS extension headers from l3 + 40; sets l4 and the
 * upper-layer protocol. Every header must lie within ip_end. */
static __always_inline int stator_ipv6_walk(const struct xdp_md *ctx, struct stator_pkt *pkt,
					    __u8 nh)
{
	__u32 off = pkt->l3 + STATOR_IPV6_LEN;

#pragma unroll
	for (int i = 0; i < STATOR_MAX_IPV6_EXT_HDRS; i++) {
		__u8 *h;
		__u32 hlen;

		if (!stator_ipv6_is_ext(nh))
			goto done;
		if (off + 2 > pkt->ip_end)
			return stator_drop(STATOR_DROP_MALFORMED_L3);
		h = stator_ptr(ctx, off, 2);
		if (!h) /* unreachable: ip_end <= frame length */
			return stator_drop(STATOR_DROP_MALFORMED_L3);
		if (nh == IPPROTO_AH)
			hlen = ((__u32)h[1] + 2) * 4;
		else if (nh == IPPROTO_FRAGMENT)
			hlen = 8;
		else
			hlen = ((__u32)h[1] + 1) * 8;
		if (off + hlen > pkt->ip_end)
			return stator_drop(STATOR_DROP_MALFORMED_L3);
		if (nh == IPPROTO_FRAGMENT) {
			__u8 *fh = stator_ptr(ctx, off, 8);

			if (!fh)
				return stator_drop(STATOR_DROP_MALFORMED_L3);
			/* offset (bits 15..3): a later fragment, the walk ends after it; M (bit 0)
			 * alone: the first fragment, the walk goes on; neither: atomic, walked over */
			if (*(__be16 *)(fh + 2) & bpf_htons(0xfff8)) {
				pkt->is_frag = 1;
				pkt->frag_first = 0;
				pkt->frag_id = bpf_ntohl(*(__be32 *)(fh + 4));
				pkt->frag_proto = fh[0];
				nh = fh[0];
				off += 8;
				goto done;
			}
			if (*(__be16 *)(fh + 2) & bpf_htons(1)) {
				pkt->is_frag = 1;
				pkt->frag_first = 1;
				pkt->frag_id = bpf_ntohl(*(__be32 *)(fh + 4));
				pkt->frag_proto = fh[0];
			}
		}
		nh = h[0];
		off += hlen;
	}
	if (stator_ipv6_is_ext(nh))
		return stator_drop(STATOR_DROP_IPV6_EXT_LIMIT);
done:
	pkt->l4 = off;
	pkt->flow.proto = nh;
	return STATOR_CONTINUE;
}

/* §2, IPv6: fixed header, VIP address, payload length, extension headers. */
static __always_inline int stator_parse_ipv6(const struct xdp_md *ctx, struct stator_pkt *pkt)
{
	__u8 *ip = stator_ptr(ctx, pkt->l3, STATOR_IPV6_LEN);
	__u32 plen, word0;
	int rc;

	if (!ip)
		return stator_drop(STATOR_DROP_MALFORMED_L3);
	pkt->family = STATOR_FAMILY_V6;
	pkt->flow.family = STATOR_FAMILY_V6;
	stator_copy_addr(pkt->flow.dst, ip + 24);
	rc = stator_vaddr_match(pkt);
	if (rc != STATOR_CONTINUE)
		return rc;
	/* the node's own address: only GRE may be a redirect (§2) */
	if (pkt->vaddr && !(pkt->vaddr->flags & STATOR_VADDR_VIP_FLAGS) && ip[6] != IPPROTO_GRE)
		return STATOR_PASS(pkt, STATOR_CNT_NON_VIP);

	plen = bpf_ntohs(*(__be16 *)(ip + 4));
	if ((ip[0] >> 4) != 6 || plen == 0 || pkt->l3 + STATOR_IPV6_LEN + plen > pkt->len)
		return stator_drop(STATOR_DROP_MALFORMED_L3);
	pkt->ip_end = pkt->l3 + STATOR_IPV6_LEN + plen;
	word0 = bpf_ntohl(*(__be32 *)ip);
	pkt->tos = (word0 >> 20) & 0xff;
	pkt->df = 1;
	stator_copy_addr(pkt->flow.src, ip + 8);
	return stator_ipv6_walk(ctx, pkt, ip[6]);
}

/* The IP header at pkt->l3 of ethertype `et` (§2): IPv4 or IPv6, the ethertype says which. */
static __always_inline int stator_parse_ip(const struct xdp_md *ctx, struct stator_pkt *pkt,
					   __be16 et)
{
	if (et == bpf_htons(ETH_P_IP))
		return stator_parse_ipv4(ctx, pkt);
	return stator_parse_ipv6(ctx, pkt);
}

/* §3: the TCP (20 bytes) or UDP (8 bytes) header within ip_end; ports and TCP flags. */
static __always_inline int stator_parse_ports(const struct xdp_md *ctx, struct stator_pkt *pkt)
{
	__u8 *l4;

	if (pkt->flow.proto == IPPROTO_TCP) {
		if (pkt->l4 + 20 > pkt->ip_end)
			return stator_drop(STATOR_DROP_MALFORMED_L4);
		l4 = stator_ptr(ctx, pkt->l4, 20);
		if (!l4)
			return stator_drop(STATOR_DROP_MALFORMED_L4);
		pkt->tcp_flags = l4[13];
	} else {
		if (pkt->l4 + 8 > pkt->ip_end)
			return stator_drop(STATOR_DROP_MALFORMED_L4);
		l4 = stator_ptr(ctx, pkt->l4, 8);
		if (!l4)
			return stator_drop(STATOR_DROP_MALFORMED_L4);
	}
	pkt->flow.sport = *(__be16 *)l4;
	pkt->flow.dport = *(__be16 *)(l4 + 2);
	return STATOR_CONTINUE;
}

#endif /* STATOR_PARSE_H */
