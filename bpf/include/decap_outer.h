/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * decap_outer.h — Ethernet and the outer IPv4 / IPv6 header of a tunnel packet
 * (docs/decap.md §1–§3).
 *
 * A packet is first *classified* from fields that can be read without validating anything:
 * the outer protocol (4, 41, 47, or 17 to the GUE port) and the destination address. Only a
 * tunnel packet for us is then validated, and a malformed one is rejected with a reason; every
 * other packet goes to the kernel untouched, whatever it looks like, so the decap program never
 * changes how the host treats its own traffic.
 */
#ifndef STATOR_DECAP_OUTER_H
#define STATOR_DECAP_OUTER_H

#include "csum.h"
#include "decap_maps.h"

#define STATOR_IPPROTO_IPIP 4
#define STATOR_IPPROTO_GRE 47
#define STATOR_UDP_LEN 8

/* What is known about the tunnel packet being decapsulated. Offsets are from ctx->data. */
struct stator_dpkt {
	__u32 len;    /* frame length as received */
	__u32 l3;     /* outer IP header: 14, or 18 behind an 802.1Q tag */
	__u32 l4;     /* tunnel header (GRE, UDP) or, for IPIP, the inner packet */
	__u32 end;    /* end of what the tunnel carries: the outer IP end, or the UDP end */
	__u32 inner;  /* the inner packet */
	__u32 kind;   /* outcome counter on success: STATOR_DECAP_CNT_GRE / IPIP / GUE */
	__u8 proto;   /* outer protocol / next header */
	__u8 inner_v6; /* the inner packet is IPv6 (else IPv4) */
	__u8 outer_ecn; /* ECN bits of the outer header */
	__u8 outer_v6; /* the outer header is IPv6 (else IPv4) */
	__u32 sc;     /* GUE private data that may be a second chance (0: none): its offset */
	__u32 sc_words; /* its length in 32-bit words (GUE Hlen) */
};

/* §1: the ethertype (network order) behind at most one 802.1Q tag; sets p->l3. 0 = too short. */
static __always_inline __be16 stator_decap_eth(const struct xdp_md *ctx, struct stator_dpkt *p)
{
	struct ethhdr *eth = stator_dptr(ctx, 0, STATOR_ETH_LEN);
	__be16 *inner;

	if (!eth)
		return 0;
	p->l3 = STATOR_ETH_LEN;
	if (eth->h_proto != bpf_htons(ETH_P_8021Q))
		return eth->h_proto;
	inner = stator_dptr(ctx, 16, sizeof(*inner));
	if (!inner)
		return 0;
	p->l3 = STATOR_VLAN_ETH_LEN;
	return *inner;
}

/* §2: is `proto` a tunnel protocol for us? UDP only to the configured GUE port, whose UDP
 * header starts at `udp_off` (STATOR_CONTINUE = yes; otherwise the packet was passed). */
static __always_inline int stator_decap_classify(const struct xdp_md *ctx, __u8 proto,
						 __u32 udp_off,
						 const struct stator_decap_cfg *cfg)
{
	__be16 *ports;

	switch (proto) {
	case STATOR_IPPROTO_IPIP:
	case STATOR_IPPROTO_IPV6:
	case STATOR_IPPROTO_GRE:
		return STATOR_CONTINUE;
	case IPPROTO_UDP:
		if (!cfg->gue_port)
			break;
		ports = stator_dptr(ctx, udp_off, 4);
		if (ports && ports[1] == cfg->gue_port)
			return STATOR_CONTINUE;
		break;
	}
	return stator_dpass(STATOR_DECAP_CNT_PASS);
}

/* §2: with STATOR_DECAP_F_ADDRS, the outer destination must be in stator_daddrs. */
static __always_inline int stator_decap_ours(const struct stator_decap_cfg *cfg,
					     struct stator_decap_addr *key)
{
	if (!(cfg->flags & STATOR_DECAP_F_ADDRS))
		return STATOR_CONTINUE;
	if (bpf_map_lookup_elem(&stator_daddrs, key))
		return STATOR_CONTINUE;
	return stator_dpass(STATOR_DECAP_CNT_NOT_OURS);
}

/*
 * 1 when the IPv4 header checksum of the `ihl`-byte header at `off` verifies (the header sums
 * to 0xffff), else 0. A global function, so the verifier checks it once on its own instead of
 * once per option length at every later instruction of the caller.
 */
__attribute__((noinline)) int stator_decap_csum4(struct xdp_md *ctx, __u32 off, __u32 ihl)
{
	__u32 sum = 0;

	if (ihl < STATOR_IPV4_LEN || ihl > 60)
		return 0;
#pragma unroll
	for (int i = 0; i < 15; i++) {
		__u32 *w;

		if ((__u32)i * 4 >= ihl)
			break;
		w = stator_dptr(ctx, off + i * 4, 4);
		if (!w)
			return 0;
		sum = stator_csum_add32(sum, *w);
	}
	return stator_csum_fold(sum) == 0xffff;
}

/* §2, outer IPv4. */
static __always_inline int stator_decap_ipv4(const struct xdp_md *ctx, struct stator_dpkt *p,
					     const struct stator_decap_cfg *cfg)
{
	__u8 *ip = stator_dptr(ctx, p->l3, STATOR_IPV4_LEN);
	struct stator_decap_addr key = {};
	__u32 ihl, tot_len;
	int rc;

	if (!ip)
		return stator_dpass(STATOR_DECAP_CNT_PASS);
	ihl = (__u32)(ip[0] & 0x0f) * 4;
	if (ip[9] == IPPROTO_UDP && ihl < STATOR_IPV4_LEN) /* the UDP header cannot be found */
		return stator_dpass(STATOR_DECAP_CNT_PASS);
	rc = stator_decap_classify(ctx, ip[9], p->l3 + ihl, cfg);
	if (rc != STATOR_CONTINUE)
		return rc;
	key.addr[0] = *(__be32 *)(ip + 16);
	key.family = STATOR_FAMILY_V4;
	rc = stator_decap_ours(cfg, &key);
	if (rc != STATOR_CONTINUE)
		return rc;

	tot_len = bpf_ntohs(*(__be16 *)(ip + 2));
	if ((ip[0] >> 4) != 4 || ihl < STATOR_IPV4_LEN || p->l3 + ihl > p->len ||
	    ihl > tot_len || p->l3 + tot_len > p->len ||
	    !stator_decap_csum4((struct xdp_md *)ctx, p->l3, ihl))
		return stator_dreject(STATOR_DECAP_CNT_BAD_OUTER);
	if (*(__be16 *)(ip + 6) & bpf_htons(0x3fff)) /* MF or a fragment offset */
		return stator_dreject(STATOR_DECAP_CNT_FRAGMENT);
	p->proto = ip[9];
	p->outer_ecn = ip[1] & 3;
	p->l4 = p->l3 + ihl;
	p->end = p->l3 + tot_len;
	return STATOR_CONTINUE;
}

/* §3, outer IPv6 (no extension headers: the next header must be the tunnel protocol). */
static __always_inline int stator_decap_ipv6(const struct xdp_md *ctx, struct stator_dpkt *p,
					     const struct stator_decap_cfg *cfg)
{
	__u8 *ip = stator_dptr(ctx, p->l3, STATOR_IPV6_LEN);
	struct stator_decap_addr key = {};
	__u32 plen;
	int rc;

	if (!ip)
		return stator_dpass(STATOR_DECAP_CNT_PASS);
	rc = stator_decap_classify(ctx, ip[6], p->l3 + STATOR_IPV6_LEN, cfg);
	if (rc != STATOR_CONTINUE)
		return rc;
	__builtin_memcpy(key.addr, ip + 24, 16);
	key.family = STATOR_FAMILY_V6;
	rc = stator_decap_ours(cfg, &key);
	if (rc != STATOR_CONTINUE)
		return rc;

	plen = bpf_ntohs(*(__be16 *)(ip + 4));
	if ((ip[0] >> 4) != 6 || plen == 0 || p->l3 + STATOR_IPV6_LEN + plen > p->len)
		return stator_dreject(STATOR_DECAP_CNT_BAD_OUTER);
	p->proto = ip[6];
	p->outer_v6 = 1;
	p->outer_ecn = (ip[1] >> 4) & 3;
	p->l4 = p->l3 + STATOR_IPV6_LEN;
	p->end = p->l4 + plen;
	return STATOR_CONTINUE;
}

#endif /* STATOR_DECAP_OUTER_H */
