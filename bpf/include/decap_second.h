/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * decap_second.h — second chance on the backend (docs/decap.md §7, docs/forwarding.md §12.4).
 *
 * A node that no longer knows a connection, and whose Maglev table changed since it began,
 * sends its packets to the new table's backend and names the previous table's backend in the
 * GUE private data ("SC", family, hop, address). Here, after the inner packet was checked: if a
 * socket of this host owns the connection (or its handshake), the packet is delivered as any
 * other; if none does, it is passed on — once — to the named backend, the outer header
 * rewritten in place (hop 1, this host's address as source, the named backend as destination,
 * a FIB lookup for the next hop). A packet with hop 1 is always delivered here.
 *
 * Every second chance that is delivered is counted in one detail beside the `gue` outcome;
 * one passed on ends in the `sc_forwarded` outcome; one that cannot be passed on for want of a
 * route is rejected (`sc_fib`, `sc_mtu`).
 */
#ifndef STATOR_DECAP_SECOND_H
#define STATOR_DECAP_SECOND_H

#include "decap_tunnel.h"

#define STATOR_DSC_TCP_SYN 0x02
#define STATOR_DSC_TTL 64
#define STATOR_DSC_TCP_LEN 20

/* Delivers a second chance here, counted in `detail`. */
static __always_inline int stator_dsc_deliver(__u32 detail)
{
	stator_dcount(detail);
	return STATOR_CONTINUE;
}

/* Is the outer source allowed to ask for a second chance (a prefix of stator_dscfrom)? */
static __always_inline int stator_dsc_allowed(const struct xdp_md *ctx,
					      const struct stator_dpkt *p)
{
	struct stator_decap_prefix key = {};
	__u8 *src;

	if (p->outer_v6) {
		src = stator_dptr(ctx, p->l3 + 8, 16);
		if (!src)
			return 0;
		stator_copy_addr(key.addr, src);
		key.family = STATOR_FAMILY_V6;
		key.prefixlen = 32 + 128;
	} else {
		src = stator_dptr(ctx, p->l3 + 12, 4);
		if (!src)
			return 0;
		key.addr[0] = *(__be32 *)src;
		key.family = STATOR_FAMILY_V4;
		key.prefixlen = 32 + 32;
	}
	return bpf_map_lookup_elem(&stator_dscfrom, &key) != NULL;
}

/*
 * Does a socket of this host own the inner TCP segment's connection? 1: an established, closing
 * or time-wait socket, or a request socket (its handshake is here); 0: none, or only a
 * listener; -1: the inner packet is not a TCP segment without SYN (not for a lookup).
 */
static __always_inline int stator_dsc_owned(struct xdp_md *ctx, const struct stator_dpkt *p)
{
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk;
	__u32 l4, tuple_len;
	__u8 *ip, *tcp;
	int owned;

	if (p->inner_v6) {
		ip = stator_dptr(ctx, p->inner, STATOR_IPV6_LEN);
		if (!ip || ip[6] != IPPROTO_TCP)
			return -1;
		stator_copy_addr(t.ipv6.saddr, ip + 8);
		stator_copy_addr(t.ipv6.daddr, ip + 24);
		l4 = p->inner + STATOR_IPV6_LEN;
		tuple_len = sizeof(t.ipv6);
	} else {
		ip = stator_dptr(ctx, p->inner, STATOR_IPV4_LEN);
		if (!ip || ip[9] != IPPROTO_TCP || (*(__be16 *)(ip + 6) & bpf_htons(0x3fff)))
			return -1;
		t.ipv4.saddr = *(__be32 *)(ip + 12);
		t.ipv4.daddr = *(__be32 *)(ip + 16);
		l4 = p->inner + (__u32)(ip[0] & 0x0f) * 4;
		tuple_len = sizeof(t.ipv4);
	}
	tcp = stator_dptr(ctx, l4, STATOR_DSC_TCP_LEN);
	if (!tcp || l4 + STATOR_DSC_TCP_LEN > p->end || (tcp[13] & STATOR_DSC_TCP_SYN))
		return -1;
	if (p->inner_v6) {
		t.ipv6.sport = *(__be16 *)tcp;
		t.ipv6.dport = *(__be16 *)(tcp + 2);
	} else {
		t.ipv4.sport = *(__be16 *)tcp;
		t.ipv4.dport = *(__be16 *)(tcp + 2);
	}
	sk = bpf_skc_lookup_tcp(ctx, &t, tuple_len, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	owned = sk->state != BPF_TCP_LISTEN;
	bpf_sk_release(sk);
	return owned;
}

/* Rewrites the outer IPv4 header toward `dst` from `src`, TTL reset; the header checksum
 * follows word by word (RFC 1624). */
static __always_inline int stator_dsc_rewrite4(struct xdp_md *ctx, const struct stator_dpkt *p,
					       __be32 src, __be32 dst)
{
	__u8 *ip = stator_dptr(ctx, p->l3, STATOR_IPV4_LEN);
	__u16 check, old;

	if (!ip)
		return -1;
	check = *(__u16 *)(ip + 10);
	old = *(__u16 *)(ip + 8);
	ip[8] = STATOR_DSC_TTL;
	check = stator_csum_replace16(check, old, *(__u16 *)(ip + 8));
#pragma unroll
	for (int i = 0; i < 2; i++) {
		check = stator_csum_replace16(check, *(__u16 *)(ip + 12 + 2 * i),
					      ((__u16 *)&src)[i]);
		*(__u16 *)(ip + 12 + 2 * i) = ((__u16 *)&src)[i];
		check = stator_csum_replace16(check, *(__u16 *)(ip + 16 + 2 * i),
					      ((__u16 *)&dst)[i]);
		*(__u16 *)(ip + 16 + 2 * i) = ((__u16 *)&dst)[i];
	}
	*(__u16 *)(ip + 10) = check;
	return 0;
}

/*
 * §7: a GUE packet whose private data may be a second chance, its inner packet checked.
 * STATOR_CONTINUE: deliver it here (strip); otherwise the XDP action taken (passed on, or
 * rejected for want of a route).
 */
static __always_inline int stator_decap_second_chance(struct xdp_md *ctx,
						      const struct stator_dpkt *p,
						      const struct stator_decap_cfg *cfg)
{
	struct bpf_fib_lookup fib = {};
	__u32 family, hop;
	__be32 prev[4] = {};
	__u8 *sc, *eth, *udp;
	int owned;
	long rc;

	if (!p->sc)
		return STATOR_CONTINUE;
	sc = stator_dptr(ctx, p->sc, 4);
	if (!sc || *(__be16 *)sc != bpf_htons(STATOR_SC_MAGIC))
		return STATOR_CONTINUE; /* other private data: skipped, as ever */
	family = sc[2];
	hop = sc[3];
	if (hop > 1 || !((family == 4 && p->sc_words == STATOR_SC_HLEN_V4) ||
			 (family == 6 && p->sc_words == STATOR_SC_HLEN_V6)))
		return stator_dsc_deliver(STATOR_DECAP_CNT_SC_MALFORMED);
	/* only a hop-0 packet can be passed on, so only its source matters (hop 1 comes from
	 * another backend, and is delivered here whatever it says) */
	if (!(cfg->flags & STATOR_DECAP_F_SECOND_CHANCE) || (hop == 0 && !stator_dsc_allowed(ctx, p)))
		return stator_dsc_deliver(STATOR_DECAP_CNT_SC_REFUSED);
	owned = stator_dsc_owned(ctx, p);
	if (owned < 0)
		return stator_dsc_deliver(STATOR_DECAP_CNT_SC_NOT_TCP);
	if (hop == 1)
		return stator_dsc_deliver(owned ? STATOR_DECAP_CNT_SC_DELIVERED
					  : STATOR_DECAP_CNT_SC_ORPHAN);
	if (owned)
		return stator_dsc_deliver(STATOR_DECAP_CNT_SC_LOCAL);

	/* Nobody here: pass it on to the previous backend, over the same outer family. */
	if (p->l3 != STATOR_ETH_LEN) /* a tagged frame is not passed on (docs/decap.md §7) */
		return stator_dsc_deliver(STATOR_DECAP_CNT_SC_REFUSED);
	if ((family == 6) != p->outer_v6)
		return stator_dsc_deliver(STATOR_DECAP_CNT_SC_MALFORMED);
	fib.ifindex = ctx->ingress_ifindex;
	fib.l4_protocol = IPPROTO_UDP;
	if (p->outer_v6) {
		sc = stator_dptr(ctx, p->sc + 4, 16);
		if (!sc)
			return stator_dsc_deliver(STATOR_DECAP_CNT_SC_MALFORMED);
		stator_copy_addr(prev, sc);
		if (!(cfg->src_v6[0] | cfg->src_v6[1] | cfg->src_v6[2] | cfg->src_v6[3]))
			return stator_dsc_deliver(STATOR_DECAP_CNT_SC_NO_SOURCE);
		fib.family = STATOR_AF_INET6;
		stator_copy_addr(fib.ipv6_src, cfg->src_v6);
		stator_copy_addr(fib.ipv6_dst, prev);
	} else {
		sc = stator_dptr(ctx, p->sc + 4, 4);
		if (!sc)
			return stator_dsc_deliver(STATOR_DECAP_CNT_SC_MALFORMED);
		prev[0] = *(__be32 *)sc;
		if (!cfg->src_v4)
			return stator_dsc_deliver(STATOR_DECAP_CNT_SC_NO_SOURCE);
		fib.family = STATOR_AF_INET;
		fib.ipv4_src = cfg->src_v4;
		fib.ipv4_dst = prev[0];
	}
	fib.tot_len = p->end - p->l3;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return stator_dreject(STATOR_DECAP_CNT_SC_MTU);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return stator_dreject(STATOR_DECAP_CNT_SC_FIB);

	/* The frame changes only from here on: hop 1, addresses, no UDP checksum (RFC 6935). */
	sc = stator_dptr(ctx, p->sc, 4);
	udp = stator_dptr(ctx, p->l4, STATOR_UDP_LEN);
	if (!sc || !udp) /* unreachable: read above */
		return stator_dreject(STATOR_DECAP_CNT_SC_FIB);
	sc[3] = 1;
	*(__be16 *)(udp + 6) = 0;
	if (p->outer_v6) {
		__u8 *ip = stator_dptr(ctx, p->l3, STATOR_IPV6_LEN);

		if (!ip)
			return stator_dreject(STATOR_DECAP_CNT_SC_FIB);
		ip[7] = STATOR_DSC_TTL;
		stator_copy_addr(ip + 8, cfg->src_v6);
		stator_copy_addr(ip + 24, prev);
	} else if (stator_dsc_rewrite4(ctx, p, cfg->src_v4, prev[0])) {
		return stator_dreject(STATOR_DECAP_CNT_SC_FIB);
	}
	eth = stator_dptr(ctx, 0, STATOR_ETH_LEN);
	if (!eth)
		return stator_dreject(STATOR_DECAP_CNT_SC_FIB);
	stator_copy_mac(eth, fib.dmac);
	stator_copy_mac(eth + 6, fib.smac);
	stator_dcount(STATOR_DECAP_CNT_SC_FORWARDED);
	if (fib.ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(fib.ifindex, 0);
}

#endif /* STATOR_DECAP_SECOND_H */
