/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * group.h — prefix groups and suffixes (docs/forwarding.md §3.1, Maglev §4.2).
 *
 * A class is a set of prefix groups; a group VIP of the class matches every address of the
 * class whose low bits equal its own, so a node serves the same service at the address it has
 * in another cluster of the class. The class of an address is one LPM-trie lookup
 * (stator_classes); the suffix step probes stator_sfx for each suffix length the class uses,
 * longest first (at most STATOR_MAX_SUFFIX_LENS, an unrolled loop), the exact port before port
 * 0. Nodes without prefix groups never get here (STATOR_NODE_F_GROUPS).
 */
#ifndef STATOR_GROUP_H
#define STATOR_GROUP_H

#include "stats.h"

/* The class of `addr` (16 bytes, the packet's family) in the active generation, or NULL. */
static __always_inline const struct stator_class *stator_class_of(const struct stator_pkt *pkt,
								  const __be32 *addr)
{
	struct stator_class_key k = {};

	k.prefixlen = 32 + (pkt->family == STATOR_FAMILY_V4 ? 32 : 128);
	k.generation = pkt->gen;
	k.family = pkt->family;
	stator_copy_addr(k.addr, addr);
	return bpf_map_lookup_elem(&stator_classes, &k);
}

/* The destination's class, looked up once per packet. */
static __always_inline const struct stator_class *stator_dst_class(struct stator_pkt *pkt)
{
	if (!pkt->class_done) {
		pkt->class = stator_class_of(pkt, pkt->flow.dst);
		pkt->class_done = 1;
	}
	return pkt->class;
}

/* The low `bits` bits of a host-order 32-bit word that holds address bits [lo, lo + 32) counted
 * from the low end, as a mask in network order. */
static __always_inline __be32 stator_low_mask(__u32 bits, __u32 lo)
{
	__u32 keep;

	if (bits <= lo)
		return 0;
	keep = bits - lo;
	if (keep >= 32)
		return 0xffffffff;
	return bpf_htonl((1u << keep) - 1);
}

/* §3.1's group step: the group VIP of (addr, port, proto), or NULL; counts group_match. `addr`
 * is the destination when `at_dst` (its class is cached in pkt), else an ICMP error's quoted
 * source. */
static __always_inline const struct stator_vip *
stator_group_match(struct stator_pkt *pkt, const __be32 *addr, const int at_dst, __be16 port,
		   __u8 proto)
{
	const struct stator_class *c = at_dst ? stator_dst_class(pkt) : stator_class_of(pkt, addr);
	struct stator_sfx_key k = {};
	const struct stator_vip *v;

	if (!c)
		return NULL;
	k.proto = proto;
	k.family = pkt->family;
	k.class_id = c->class_id;
	k.generation = pkt->gen;
#pragma unroll
	for (int i = 0; i < STATOR_MAX_SUFFIX_LENS; i++) {
		__u32 bits;

		if (i >= c->nlens)
			break;
		bits = c->lens[i];
		k.bits = bits;
		if (pkt->family == STATOR_FAMILY_V4) {
			k.suffix[0] = addr[0] & stator_low_mask(bits, 0);
		} else {
			k.suffix[0] = addr[0] & stator_low_mask(bits, 96);
			k.suffix[1] = addr[1] & stator_low_mask(bits, 64);
			k.suffix[2] = addr[2] & stator_low_mask(bits, 32);
			k.suffix[3] = addr[3] & stator_low_mask(bits, 0);
		}
		k.port = port;
		v = bpf_map_lookup_elem(&stator_sfx, &k);
		if (!v && port) {
			k.port = 0;
			v = bpf_map_lookup_elem(&stator_sfx, &k);
		}
		if (v) {
			stator_count(STATOR_CNT_GROUP_MATCH);
			return v;
		}
	}
	return NULL;
}

#endif /* STATOR_GROUP_H */
