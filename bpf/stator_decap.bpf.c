/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * stator_decap — the backend side of Stator: decapsulates GRE, IPIP (4in4, 6in6, 4in6, 6in4)
 * and GUE packets addressed to this host and hands the inner packet to the kernel stack, which
 * delivers it to the VIP configured on `lo`; the reply leaves by normal routing, straight to
 * the client (direct server return). For kernels without ip_gre / ipip / fou, and faster than
 * them where they exist. The contract is docs/decap.md.
 *
 * Stages, one header per concern:
 *   decap_outer.h   Ethernet, classification, outer IPv4 / IPv6, our addresses   §1–§3
 *   decap_tunnel.h  GRE / GUE / IPIP headers, the inner packet, ECN              §4–§5
 *   decap_second.h  second chance: deliver here or pass on to the previous backend §7
 *   decap_maps.h    maps and counters
 * This file strips the outer headers (§6).
 */
#include "common.h"
#include "decap_maps.h"
#include "decap_outer.h"
#include "decap_tunnel.h"
#include "decap_second.h"
#include "license.h"

/* §6: removes everything between the Ethernet header and the inner packet, keeping the MAC
 * addresses and an 802.1Q tag, and sets the inner ethertype. */
static __always_inline int stator_decap_strip(struct xdp_md *ctx, struct stator_dpkt *p)
{
	__u8 *eth = stator_dptr(ctx, 0, STATOR_VLAN_ETH_LEN - 2);
	__u32 w0, w1, w2, tag = 0, strip;
	__be16 ethertype;

	if (!eth) /* unreachable: the outer IP header was read behind it */
		return stator_dreject(STATOR_DECAP_CNT_ADJUST);
	w0 = *(__u32 *)eth;
	w1 = *(__u32 *)(eth + 4);
	w2 = *(__u32 *)(eth + 8);
	if (p->l3 == STATOR_VLAN_ETH_LEN)
		tag = *(__u32 *)(eth + 12); /* TPID 0x8100 + TCI */
	strip = p->inner - p->l3;
	if (strip > STATOR_MAX_PKT_OFF || bpf_xdp_adjust_head(ctx, (int)strip))
		return stator_dreject(STATOR_DECAP_CNT_ADJUST);
	eth = stator_dptr(ctx, 0, STATOR_VLAN_ETH_LEN);
	if (!eth) /* unreachable: the inner IP header follows */
		return stator_dreject(STATOR_DECAP_CNT_ADJUST);
	ethertype = p->inner_v6 ? bpf_htons(ETH_P_IPV6) : bpf_htons(ETH_P_IP);
	*(__u32 *)eth = w0;
	*(__u32 *)(eth + 4) = w1;
	*(__u32 *)(eth + 8) = w2;
	if (p->l3 == STATOR_VLAN_ETH_LEN) {
		*(__u32 *)(eth + 12) = tag;
		*(__be16 *)(eth + 16) = ethertype;
	} else {
		*(__be16 *)(eth + 12) = ethertype;
	}
	stator_dcount(p->kind);
	return XDP_PASS;
}

SEC("xdp")
int stator_decap(struct xdp_md *ctx)
{
	const struct stator_decap_cfg *cfg;
	struct stator_dpkt p = {};
	__u32 zero = 0;
	__be16 ethertype;
	int rc;

	p.len = ctx->data_end - ctx->data;
	cfg = bpf_map_lookup_elem(&stator_dcfg, &zero);
	if (!cfg) /* unreachable: an array always has element 0 */
		return stator_dpass(STATOR_DECAP_CNT_PASS);
	ethertype = stator_decap_eth(ctx, &p);
	if (ethertype == bpf_htons(ETH_P_IP))
		rc = stator_decap_ipv4(ctx, &p, cfg);
	else if (ethertype == bpf_htons(ETH_P_IPV6))
		rc = stator_decap_ipv6(ctx, &p, cfg);
	else
		return stator_dpass(STATOR_DECAP_CNT_PASS);
	if (rc != STATOR_CONTINUE)
		return rc;
	rc = stator_decap_tunnel(ctx, &p);
	if (rc != STATOR_CONTINUE)
		return rc;
	rc = stator_decap_inner(ctx, &p);
	if (rc != STATOR_CONTINUE)
		return rc;
	rc = stator_decap_second_chance(ctx, &p, cfg);
	if (rc != STATOR_CONTINUE)
		return rc;
	return stator_decap_strip(ctx, &p);
}

char _license[] SEC("license") = STATOR_BPF_LICENSE;
