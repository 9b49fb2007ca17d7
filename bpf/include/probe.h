/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * probe.h — the self-test probe (docs/forwarding.md §1.4, struct stator_probe).
 *
 * The controller's forwarder-health check runs a probe frame through BPF_PROG_TEST_RUN every
 * second. The program answers it from the active generation — the generation number, whether
 * stator_cfg[gen] is programmed and its config generation, and a stator_vtab lookup of an
 * address the probe names — and passes it. Probes are not traffic: they count only in
 * self_test (and act_pass, so every packet still ends in one action counter).
 */
#ifndef STATOR_PROBE_H
#define STATOR_PROBE_H

#include "vip.h"

/* A frame of ethertype STATOR_PROBE_ETHERTYPE at l3 = 14; non-probes are non-IP. */
static __always_inline int stator_probe(const struct xdp_md *ctx)
{
	struct stator_probe *p = stator_ptr(ctx, STATOR_ETH_LEN, sizeof(*p));
	const struct stator_node_cfg *cfg;
	const struct stator_vaddr *v;
	__be32 addr[4] = {};
	struct stator_pkt pkt = {};
	__u32 result = 0;

	if (!p || p->magic != STATOR_PROBE_MAGIC)
		return stator_pass(STATOR_CNT_NON_IP);
	if (stator_read_ctl(&pkt) != STATOR_CONTINUE)
		return XDP_DROP; /* counted by stator_read_ctl */
	p->answer = ~p->nonce;
	p->active_gen = pkt.gen;
	cfg = pkt.cfg;
	if (cfg) {
		if (cfg->outer_ttl)
			result |= STATOR_PROBE_F_CFG;
		p->config_generation = cfg->config_generation;
	}
	if (cfg && (p->family == STATOR_FAMILY_V4 || p->family == STATOR_FAMILY_V6)) {
		addr[0] = p->addr[0];
		if (p->family == STATOR_FAMILY_V6)
			__builtin_memcpy(addr, p->addr, sizeof(addr));
		v = stator_vtab_find(pkt.gen, cfg->vtab_seed, addr, p->family);
		if (v) {
			result |= STATOR_PROBE_F_VADDR;
			p->vaddr_flags = v->flags;
		}
	}
	p->result = result;
	return stator_pass(STATOR_CNT_SELF_TEST);
}

#endif /* STATOR_PROBE_H */
