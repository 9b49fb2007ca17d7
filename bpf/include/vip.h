/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * vip.h — "is this VIP traffic?" (docs/forwarding.md §2 and §3).
 *
 * Non-VIP traffic pays exactly one hash lookup, in stator_vaddrs, keyed by the destination
 * address alone. Its value's flags say which of the two stator_vips lookups (exact port, then
 * port 0 = any) can match, so VIP traffic never pays for a lookup that cannot succeed.
 */
#ifndef STATOR_VIP_H
#define STATOR_VIP_H

#include "stats.h"

/* Reads the active generation (once per packet) and the test clock from stator_ctl[0]. */
static __always_inline int stator_read_ctl(struct stator_pkt *pkt)
{
	__u32 zero = 0;
	struct stator_ctl *ctl = bpf_map_lookup_elem(&stator_ctl, &zero);

	if (!ctl)
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	/* One 32-bit load: user space flips active_gen with one atomic store. */
	pkt->gen = *(volatile __u32 *)&ctl->active_gen & 1;
	pkt->test_clock = ctl->test_clock_ns;
	pkt->fib_cache_us = ctl->fib_cache_us;
	return STATOR_CONTINUE;
}

/* stator_cfg[gen]; NULL never happens for gen in {0, 1}. */
static __always_inline const struct stator_node_cfg *stator_cfg_lookup(__u32 gen)
{
	return bpf_map_lookup_elem(&stator_cfg, &gen);
}

/* §2.2: the destination address (already in pkt->flow.dst) must be a VIP address, else PASS. */
static __always_inline int stator_vaddr_match(struct stator_pkt *pkt)
{
	struct stator_vaddr_key key = {};
	const struct stator_vaddr *v;

	__builtin_memcpy(key.addr, pkt->flow.dst, sizeof(key.addr));
	key.family = pkt->family;
	key.generation = pkt->gen;
	v = bpf_map_lookup_elem(&stator_vaddrs, &key);
	if (!v)
		return stator_pass(STATOR_CNT_NON_VIP);
	pkt->vaddr_flags = v->flags;
	return STATOR_CONTINUE;
}

/*
 * §3: the VIP of (addr, port, proto) in the packet's family and the active generation: exact
 * port first, then port 0, each only when the address's flags say it can exist. NULL = none.
 * `addr` is 16 bytes (IPv4 in the first word, the rest zero), `port` in network order.
 */
static __always_inline const struct stator_vip *
stator_vip_match(const struct stator_pkt *pkt, const __be32 *addr, __be16 port, __u8 proto)
{
	__u32 f_ports = proto == IPPROTO_TCP ? STATOR_VADDR_F_TCP_PORTS : STATOR_VADDR_F_UDP_PORTS;
	__u32 f_any = proto == IPPROTO_TCP ? STATOR_VADDR_F_TCP_ANY : STATOR_VADDR_F_UDP_ANY;
	struct stator_vip_key key = {};
	const struct stator_vip *vip = NULL;

	__builtin_memcpy(key.addr, addr, sizeof(key.addr));
	key.port = port;
	key.proto = proto;
	key.family = pkt->family;
	key.generation = pkt->gen;
	if (pkt->vaddr_flags & f_ports)
		vip = bpf_map_lookup_elem(&stator_vips, &key);
	if (!vip && (pkt->vaddr_flags & f_any)) {
		key.port = 0;
		vip = bpf_map_lookup_elem(&stator_vips, &key);
	}
	return vip;
}

#endif /* STATOR_VIP_H */
