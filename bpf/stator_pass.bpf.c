/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/* Baselines for benchmarks: XDP_PASS, MAC swap + XDP_TX, and the same after growing the head. */
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

/* MAC swap + XDP_TX after growing the head by 24 bytes, the room of an outer IPv4 + GRE header:
 * the floor of any program that encapsulates. Under the bench wrapper it also pays what every
 * encapsulating forwarder row pays and stator_swap_tx does not: the wrapper's
 * bpf_xdp_adjust_head that strips the growth before the next iteration. */
SEC("xdp")
int stator_grow_tx(struct xdp_md *ctx)
{
	void *data, *data_end;
	struct ethhdr *eth, *old;

	if (bpf_xdp_adjust_head(ctx, -24))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	old = data + 24;
	if ((void *)(old + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(eth->h_dest, old->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, old->h_dest, ETH_ALEN);
	eth->h_proto = old->h_proto;
	return XDP_TX;
}

char _license[] SEC("license") = STATOR_BPF_LICENSE;
