/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * encap.h — encapsulation toward the backend and transmit (docs/forwarding.md §5).
 *
 * The inner packet (l3 .. ip_end, plus any Ethernet padding after it) is never touched: the
 * program grows the head of the frame and writes Ethernet + outer IPv4/IPv6 + the GRE or
 * UDP/GUE header in front of it. The next hop comes from bpf_fib_lookup, asked *before* the
 * frame is modified so that a drop leaves it as it was. XDP_TX when the FIB's egress is the
 * ingress interface, XDP_REDIRECT through stator_tx_ports otherwise.
 */
#ifndef STATOR_ENCAP_H
#define STATOR_ENCAP_H

#include "clock.h"
#include "csum.h"
#include "stats.h"

#define STATOR_GRE_LEN 4
#define STATOR_GUE_LEN 12 /* UDP 8 + GUE variant 0 header 4 */
#define STATOR_GUE_SPORT_BASE 0xC000

/* What goes in front of the inner packet. */
struct stator_outer {
	__u32 ip_len;    /* outer IP header: 20 or 40 */
	__u32 encap_len; /* E: 4 (GRE), 0 (IPIP), 12 (GUE) */
	__u32 inner_len; /* ip_end - l3 */
	__u8 proto;      /* outer protocol / next header */
	__u8 v6;         /* outer family is IPv6 */
	__u8 inner_v6;   /* inner family is IPv6 */
	__u8 sc_words;   /* GUE Hlen of a second chance's private data: 0, 2 or 5 (§12.3) */
};

/* Writes the 4-byte GRE or 12-byte UDP + GUE header at `e` (nothing for IPIP). */
static __always_inline void stator_write_encap(__u8 *e, const struct stator_outer *o,
					       struct stator_pkt *pkt,
					       const struct stator_node_cfg *cfg,
					       const struct stator_real *real, const int redirect)
{
	if (real->encap == STATOR_ENCAP_GRE) {
		/* no C/K/S bits, version 0; a redirect between Stator nodes carries RFC 1701
		 * recursion control 1 (§10.1) */
		*(__be16 *)e = redirect ? bpf_htons(STATOR_GRE_REDIRECT) : 0;
		*(__be16 *)(e + 2) = o->inner_v6 ? bpf_htons(ETH_P_IPV6) : bpf_htons(ETH_P_IP);
	} else if (real->encap == STATOR_ENCAP_GUE) {
		*(__be16 *)e = bpf_htons(STATOR_GUE_SPORT_BASE | (stator_pkt_hash(pkt) & 0x3fff));
		*(__be16 *)(e + 2) = cfg->gue_port;
		*(__be16 *)(e + 4) = bpf_htons(o->encap_len + o->inner_len);
		*(__be16 *)(e + 6) = 0; /* zero UDP checksum (RFC 6935/6936) */
		e[8] = o->sc_words;     /* version 0, C 0, Hlen: the private data's words */
		e[9] = o->inner_v6 ? STATOR_IPPROTO_IPV6 : IPPROTO_IPIP;
		*(__be16 *)(e + 10) = 0;
	}
}

/* §12.3: a second chance's GUE private data after the 12-byte UDP + GUE header at `e`:
 * "SC", the previous backend's family, hop 0, its address. */
static __always_inline void stator_write_sc(__u8 *e, const struct stator_real *prev)
{
	*(__be16 *)(e + 12) = bpf_htons(STATOR_SC_MAGIC);
	e[14] = prev->family == STATOR_FAMILY_V6 ? 6 : 4;
	e[15] = 0;
	*(__be32 *)(e + 16) = prev->addr[0];
	if (prev->family == STATOR_FAMILY_V6) {
		*(__be32 *)(e + 20) = prev->addr[1];
		*(__be32 *)(e + 24) = prev->addr[2];
		*(__be32 *)(e + 28) = prev->addr[3];
	}
}

/* The 20-byte outer IPv4 header at `ip`: five 32-bit words built and checksummed in registers
 * (word values are in network order, as they sit in memory). */
static __always_inline void stator_write_ipv4(__u8 *ip, const struct stator_outer *o,
					      const struct stator_pkt *pkt,
					      const struct stator_node_cfg *cfg,
					      const struct stator_real *real)
{
	__u32 tot_len = STATOR_IPV4_LEN + o->encap_len + o->inner_len;
	__u32 w0 = bpf_htonl((0x45u << 24) | ((__u32)pkt->tos << 16) | tot_len);
	__u32 w1 = pkt->df ? bpf_htonl(0x4000) : 0; /* identification 0 */
	__u32 w2 = bpf_htonl(((__u32)cfg->outer_ttl << 24) | ((__u32)o->proto << 16));
	__u32 w3 = cfg->src_v4;
	__u32 w4 = real->addr[0];
	__u32 sum = 0;

	sum = stator_csum_add32(sum, w0);
	sum = stator_csum_add32(sum, w1);
	sum = stator_csum_add32(sum, w2);
	sum = stator_csum_add32(sum, w3);
	sum = stator_csum_add32(sum, w4);
	*(__u32 *)ip = w0;
	*(__u32 *)(ip + 4) = w1;
	*(__u32 *)(ip + 8) = w2;
	*(__u32 *)(ip + 12) = w3;
	*(__u32 *)(ip + 16) = w4;
	*(__u16 *)(ip + 10) = ~stator_csum_fold(sum);
}

/* The 40-byte outer IPv6 header at `ip`. */
static __always_inline void stator_write_ipv6(__u8 *ip, const struct stator_outer *o,
					      struct stator_pkt *pkt,
					      const struct stator_node_cfg *cfg,
					      const struct stator_real *real)
{
	*(__be32 *)ip = bpf_htonl((6u << 28) | ((__u32)pkt->tos << 20) |
				  (stator_pkt_hash(pkt) & 0xfffff));
	*(__be16 *)(ip + 4) = bpf_htons(o->encap_len + o->inner_len);
	ip[6] = o->proto;
	ip[7] = cfg->outer_ttl;
	stator_copy_addr(ip + 8, cfg->src_v6);
	stator_copy_addr(ip + 24, real->addr);
}

/* A cached next hop of `real` that still answers for this packet (stator_nh), or NULL. */
static __always_inline struct stator_nh *stator_nh_lookup(struct xdp_md *ctx,
							  struct stator_pkt *pkt,
							  const struct stator_real *real,
							  __u32 real_id, __u32 tot_len, int *fresh)
{
	struct stator_nh *nh = bpf_map_lookup_elem(&stator_nh, &real_id);
	__u64 now, age;

	*fresh = 0;
	if (!nh || !nh->stamp_ns)
		return nh;
	now = stator_now(pkt);
	age = now - nh->stamp_ns;
	if (now < nh->stamp_ns || age >= (__u64)pkt->fib_cache_us * 1000 ||
	    nh->in_ifindex != ctx->ingress_ifindex || nh->family != real->family ||
	    nh->dst[0] != real->addr[0] || nh->dst[1] != real->addr[1] ||
	    nh->dst[2] != real->addr[2] || nh->dst[3] != real->addr[3])
		return nh;
	*fresh = tot_len <= nh->ok_len ? 2 : 1; /* 1: same key, longer than ever accepted */
	return nh;
}

/* Records a successful lookup in the next-hop cache. */
static __always_inline void stator_nh_store(struct xdp_md *ctx, struct stator_pkt *pkt,
					    struct stator_nh *nh, int fresh,
					    const struct bpf_fib_lookup *fib,
					    const struct stator_real *real, __u32 tot_len)
{
	if (!fresh) {
		nh->stamp_ns = stator_now(pkt);
		nh->ok_len = tot_len;
	} else if (tot_len > nh->ok_len) { /* same key, a longer packet passed: raise the bar */
		nh->ok_len = tot_len;
	}
	stator_copy_addr(nh->dst, real->addr);
	nh->in_ifindex = ctx->ingress_ifindex;
	nh->out_ifindex = fib->ifindex;
	nh->family = real->family;
	stator_copy_mac(nh->dmac, fib->dmac);
	stator_copy_mac(nh->smac, fib->smac);
}

/*
 * §5.4: the next hop of the outer packet; returns a drop reason or STATOR_DROP_NONE. With
 * stator_ctl.fib_cache_us set, a fresh stator_nh answer stands in for bpf_fib_lookup (never for
 * a redirect, which has no real id to cache under).
 */
static __always_inline __u32 stator_next_hop(struct xdp_md *ctx, struct stator_pkt *pkt,
					     struct bpf_fib_lookup *fib,
					     const struct stator_outer *o,
					     const struct stator_node_cfg *cfg,
					     const struct stator_real *real, __u32 real_id,
					     const int redirect)
{
	__u32 tot_len = o->ip_len + o->encap_len + o->inner_len;
	struct stator_nh *nh = NULL;
	int fresh = 0;
	long rc;

	if (!redirect && pkt->fib_cache_us) {
		nh = stator_nh_lookup(ctx, pkt, real, real_id, tot_len, &fresh);
		if (nh && fresh == 2) {
			fib->ifindex = nh->out_ifindex;
			stator_copy_mac(fib->dmac, nh->dmac);
			stator_copy_mac(fib->smac, nh->smac);
			return STATOR_DROP_NONE;
		}
	}
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->l4_protocol = o->proto;
	fib->tot_len = tot_len;
	fib->ifindex = ctx->ingress_ifindex;
	if (o->v6) {
		fib->family = STATOR_AF_INET6;
		stator_copy_addr(fib->ipv6_src, cfg->src_v6);
		stator_copy_addr(fib->ipv6_dst, real->addr);
	} else {
		fib->family = STATOR_AF_INET;
		fib->ipv4_src = cfg->src_v4;
		fib->ipv4_dst = real->addr[0];
	}
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		if (nh)
			stator_nh_store(ctx, pkt, nh, fresh, fib, real, tot_len);
		return STATOR_DROP_NONE;
	}
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return STATOR_DROP_NO_NEIGH;
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return STATOR_DROP_MTU;
	return STATOR_DROP_FIB;
}

/* §5: encapsulates the packet toward `real` (id `real_id`) and transmits it. A redirect to
 * another Stator node (§10.1, `redirect` a constant 1) passes its target as a real, and as
 * `real_id` the counter to count instead of the real's traffic. */
static __always_inline int stator_encap_xmit(struct xdp_md *ctx, struct stator_pkt *pkt,
					     const struct stator_node_cfg *cfg,
					     const struct stator_real *real, __u32 real_id,
					     const int redirect)
{
	struct bpf_fib_lookup fib; /* zeroed by stator_next_hop before a lookup */
	const struct stator_real *prev = NULL;
	struct stator_outer o = {};
	__u32 reason, grow;
	__u8 *data, *data_end;
	long act;

	/* 1. a source address of the backend's family */
	if (real->family == STATOR_FAMILY_V6) {
		if (!(cfg->src_v6[0] | cfg->src_v6[1] | cfg->src_v6[2] | cfg->src_v6[3]))
			return stator_drop(STATOR_DROP_NO_SOURCE);
		o.v6 = 1;
		o.ip_len = STATOR_IPV6_LEN;
	} else if (real->family == STATOR_FAMILY_V4) {
		if (!cfg->src_v4)
			return stator_drop(STATOR_DROP_NO_SOURCE);
		o.ip_len = STATOR_IPV4_LEN;
	} else {
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	}

	/* 2. the encapsulation header */
	o.inner_v6 = pkt->family == STATOR_FAMILY_V6;
	o.inner_len = pkt->ip_end - pkt->l3;
	if (real->encap == STATOR_ENCAP_GRE) {
		o.encap_len = STATOR_GRE_LEN;
		o.proto = IPPROTO_GRE;
	} else if (real->encap == STATOR_ENCAP_IPIP) {
		o.proto = o.inner_v6 ? STATOR_IPPROTO_IPV6 : IPPROTO_IPIP;
	} else if (real->encap == STATOR_ENCAP_GUE) {
		o.encap_len = STATOR_GUE_LEN;
		o.proto = IPPROTO_UDP;
		/* 3. a second chance names the previous backend in GUE private data (§12.3) */
		if (!redirect && pkt->sc) {
			prev = stator_real_lookup(pkt->gen, pkt->sc_real);
			if (!prev) /* never: stator_second_chance found it */
				return stator_drop(STATOR_DROP_BAD_CONFIG);
			o.sc_words = prev->family == STATOR_FAMILY_V6 ? STATOR_SC_HLEN_V6
								     : STATOR_SC_HLEN_V4;
			o.encap_len += o.sc_words * 4;
		}
	} else {
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	}

	/* 4. next hop, before the frame changes */
	reason = stator_next_hop(ctx, pkt, &fib, &o, cfg, real, real_id, redirect);
	if (reason != STATOR_DROP_NONE)
		return stator_drop(reason);

	/* 5. room for Ethernet + outer IP + encap header in place of the old L2 header */
	grow = STATOR_ETH_LEN + o.ip_len + o.encap_len - pkt->l3;
	if (bpf_xdp_adjust_head(ctx, -(int)grow))
		return stator_drop(STATOR_DROP_ADJUST);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	/* The frame is now at least 14 + outer + E + 28 bytes (the smallest inner packet): the
	 * checks below always pass; they are for the verifier. */
	if (o.v6) {
		if (data + STATOR_ETH_LEN + STATOR_IPV6_LEN + STATOR_GUE_LEN > data_end)
			return stator_drop(STATOR_DROP_ADJUST);
		stator_write_ipv6(data + STATOR_ETH_LEN, &o, pkt, cfg, real);
		stator_write_encap(data + STATOR_ETH_LEN + STATOR_IPV6_LEN, &o, pkt, cfg, real,
				   redirect);
		if (prev) {
			if (data + STATOR_ETH_LEN + STATOR_IPV6_LEN + STATOR_GUE_LEN + 20 > data_end)
				return stator_drop(STATOR_DROP_ADJUST);
			stator_write_sc(data + STATOR_ETH_LEN + STATOR_IPV6_LEN, prev);
		}
		*(__be16 *)(data + 12) = bpf_htons(ETH_P_IPV6);
	} else {
		if (data + STATOR_ETH_LEN + STATOR_IPV4_LEN + STATOR_GUE_LEN > data_end)
			return stator_drop(STATOR_DROP_ADJUST);
		stator_write_ipv4(data + STATOR_ETH_LEN, &o, pkt, cfg, real);
		stator_write_encap(data + STATOR_ETH_LEN + STATOR_IPV4_LEN, &o, pkt, cfg, real,
				   redirect);
		if (prev) {
			if (data + STATOR_ETH_LEN + STATOR_IPV4_LEN + STATOR_GUE_LEN + 20 > data_end)
				return stator_drop(STATOR_DROP_ADJUST);
			stator_write_sc(data + STATOR_ETH_LEN + STATOR_IPV4_LEN, prev);
		}
		*(__be16 *)(data + 12) = bpf_htons(ETH_P_IP);
	}
	stator_copy_mac(data, fib.dmac);
	stator_copy_mac(data + ETH_ALEN, fib.smac);

	/* 6. */
	if (redirect)
		stator_count(real_id); /* the redirect's counter */
	else
		stator_traffic_add(&stator_realstat, real_id, pkt->len);

	/* 7. */
	if (fib.ifindex == ctx->ingress_ifindex) {
		stator_count(STATOR_CNT_ACT_TX);
		return XDP_TX;
	}
	act = bpf_redirect_map(&stator_tx_ports, fib.ifindex, XDP_DROP);
	if (act == XDP_REDIRECT) {
		stator_count(STATOR_CNT_ACT_REDIRECT);
		return XDP_REDIRECT;
	}
	return stator_drop(STATOR_DROP_TX_PORT);
}

#endif /* STATOR_ENCAP_H */
