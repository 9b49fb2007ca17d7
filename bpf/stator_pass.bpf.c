/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/* Baselines for benchmarks: XDP_PASS, and MAC swap + XDP_TX. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "license.h"

SEC("xdp")
int stator_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("xdp")
int stator_swap_tx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	unsigned char tmp[ETH_ALEN];

	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
	return XDP_TX;
}

char _license[] SEC("license") = STATOR_BPF_LICENSE;
