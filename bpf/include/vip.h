/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * vip.h — "is this VIP traffic?" (docs/forwarding.md §2 and §3).
 *
 * Non-VIP traffic pays one probe of stator_vtab, an open-addressing table in an ARRAY keyed by
 * the destination address alone: a multiplication, an inlined array lookup and a compare, no
 * helper call (stator_abi.h explains the table). The slot of a VIP address carries its VIPs
 * inline when they fit, so matching (port, protocol) is a scan of that slot; only addresses with
 * more VIPs look in stator_vips, and then only where the slot's flags say a VIP can exist.
 */
#ifndef STATOR_VIP_H
#define STATOR_VIP_H

#include "stats.h"
#include "clock.h"
#include "group.h"

/* Reads the active generation (once per packet), its stator_cfg, and the data-plane knobs of
 * stator_ctl[0]. */
static __always_inline int stator_read_ctl(struct stator_pkt *pkt)
{
	__u32 zero = 0;
	struct stator_ctl *ctl = bpf_map_lookup_elem(&stator_ctl, &zero);
	const struct stator_node_cfg *cfg;

	if (!ctl)
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	/* One 32-bit load: user space flips active_gen with one atomic store. */
	pkt->gen = *(volatile __u32 *)&ctl->active_gen & 1;
	pkt->test_clock = ctl->test_clock_ns;
	pkt->fib_cache_us = ctl->fib_cache_us;
	cfg = bpf_map_lookup_elem(&stator_cfg, &pkt->gen);
	if (!cfg) /* never: gen is 0 or 1 */
		return stator_drop(STATOR_DROP_BAD_CONFIG);
	pkt->cfg = cfg;
	return STATOR_CONTINUE;
}

/* §3.2: whether the controller's heartbeat is stale — its tables are then not trusted and VIP
 * traffic goes to the kernel. Off (never stale) while stale_after_ns is 0, the default. */
static __always_inline int stator_stale(struct stator_pkt *pkt)
{
	__u32 zero = 0;
	const struct stator_beat *b = bpf_map_lookup_elem(&stator_beat, &zero);
	__u64 now, after, at;

	if (!b)
		return 0;
	after = b->stale_after_ns;
	if (!after)
		return 0;
	at = b->refreshed_ns;
	now = stator_now(pkt);
	return now > at && now - at > after;
}

/* The stator_vtab slot of (addr, family) in generation `gen`, or NULL: at most
 * STATOR_VTAB_PROBES slots from the home slot, stopping at an empty one. `addr` is 16 bytes
 * (IPv4 in the first word, the rest zero, as in the slots). */
static __always_inline const struct stator_vaddr *
stator_vtab_find(__u32 gen, __u32 seed, const __be32 *addr, __u8 family)
{
	__u32 home = stator_vtab_hash(addr, family, seed);

#pragma unroll
	for (int i = 0; i < STATOR_VTAB_PROBES; i++) {
		__u32 idx = gen * STATOR_VTAB_SLOTS + ((home + i) & (STATOR_VTAB_SLOTS - 1));
		const struct stator_vaddr *v = bpf_map_lookup_elem(&stator_vtab, &idx);

		if (!v || v->family == STATOR_FAMILY_NONE)
			return NULL;
		if (v->family == family && v->addr[0] == addr[0] && v->addr[1] == addr[1] &&
		    v->addr[2] == addr[2] && v->addr[3] == addr[3])
			return v;
	}
	return NULL;
}

/* §2 "Ours": the destination (already in pkt->flow.dst) must be in the VIP-address table or,
 * when the generation has prefix groups, in a class; else PASS. */
static __always_inline int stator_vaddr_match(struct stator_pkt *pkt)
{
	const struct stator_vaddr *v;

	v = stator_vtab_find(pkt->gen, pkt->cfg->vtab_seed, pkt->flow.dst, pkt->family);
	pkt->vaddr = v;
	if (v)
		return STATOR_CONTINUE;
	if ((pkt->cfg->flags & STATOR_NODE_F_GROUPS) && stator_dst_class(pkt))
		return STATOR_CONTINUE;
	return STATOR_PASS(pkt, STATOR_CNT_NON_VIP);
}

/* The flags that say a VIP-address slot has a VIP (a slot without them is the node's own
 * address only). */
#define STATOR_VADDR_VIP_FLAGS                                                                     \
	(STATOR_VADDR_F_TCP_PORTS | STATOR_VADDR_F_TCP_ANY | STATOR_VADDR_F_UDP_PORTS |            \
	 STATOR_VADDR_F_UDP_ANY)

/*
 * §3: the VIP of (addr, port, proto) in the active generation, under the flags of the
 * destination's slot (pkt->vaddr): exact port first, then port 0. `addr` is the destination
 * (`at_dst` = 1, constant at every call site but ICMP errors) or, for an ICMP error, the quoted
 * source. From the slot when it carries the address's VIPs and `addr` is its address, else from
 * stator_vips, each lookup only when the slot's flags say it can match. NULL = none. `port` in
 * network order.
 */
static __always_inline const struct stator_vip *
stator_vip_match(struct stator_pkt *pkt, const __be32 *addr, const int at_dst, __be16 port,
		 __u8 proto)
{
	const struct stator_vaddr *va = pkt->vaddr;
	__u32 f_ports = proto == IPPROTO_TCP ? STATOR_VADDR_F_TCP_PORTS : STATOR_VADDR_F_UDP_PORTS;
	__u32 f_any = proto == IPPROTO_TCP ? STATOR_VADDR_F_TCP_ANY : STATOR_VADDR_F_UDP_ANY;
	const struct stator_vip *vip = NULL;
	struct stator_vip_key key = {};

	if (!va) /* ours by its class only */
		goto group;
	if ((va->flags & STATOR_VADDR_F_INLINE) &&
	    (at_dst || (addr[0] == va->addr[0] && addr[1] == va->addr[1] &&
			addr[2] == va->addr[2] && addr[3] == va->addr[3]))) {
#pragma unroll
		for (int i = 0; i < STATOR_VADDR_INLINE; i++) {
			const struct stator_vaddr_vip *e = &va->vips[i];

			if (e->proto != proto)
				continue;
			if (e->port == port)
				return &e->vip;
			if (!e->port)
				vip = &e->vip; /* the wildcard, if no exact port follows */
		}
		if (vip)
			return vip;
		goto group;
	}
	__builtin_memcpy(key.addr, addr, sizeof(key.addr));
	key.port = port;
	key.proto = proto;
	key.family = pkt->family;
	key.generation = pkt->gen;
	if (va->flags & f_ports)
		vip = bpf_map_lookup_elem(&stator_vips, &key);
	if (!vip && (va->flags & f_any)) {
		key.port = 0;
		vip = bpf_map_lookup_elem(&stator_vips, &key);
	}
	if (vip)
		return vip;
group:
	if (pkt->cfg->flags & STATOR_NODE_F_GROUPS)
		return stator_group_match(pkt, addr, at_dst, port, proto);
	return NULL;
}

#endif /* STATOR_VIP_H */
