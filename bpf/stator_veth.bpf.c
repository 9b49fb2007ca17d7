/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * stator_veth — the three programs of the end-to-end veth benchmark (`stator bench veth`):
 *
 *   stator_vgen    the packet generator, run by BPF_PROG_TEST_RUN in live-frames mode
 *                  (BPF_F_TEST_XDP_LIVE_FRAMES): the kernel runs it `repeat` times, each time
 *                  on a frame from its own page pool, and really transmits what it redirects.
 *                  A page comes back from the sink with whatever the load balancer wrote into
 *                  it, so the frame is restored from stator_vgframe every time; one big-endian
 *                  word (e.g. the source port) is varied for a many-flow run.
 *   stator_vsink   counts what arrives (packets, bytes, tunnelled packets) and drops it.
 *   stator_vroute  the baseline the forwarder is compared with: plain IPv4 forwarding without
 *                  load balancing, like the kernel's samples/bpf/xdp_fwd — FIB lookup, TTL
 *                  decrement with the checksum update, MAC rewrite, redirect through a devmap.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "stator_abi.h"
#include "license.h"

#define STATOR_AF_INET 2

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stator_bench_frame);
} stator_vgframe SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} stator_vgtarget SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} stator_vgiter SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STATOR_VSINK_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stator_vsinkcnt SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, STATOR_MAX_TX_PORTS);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} stator_vroutetx SEC(".maps");

SEC("xdp")
int stator_vgen(struct xdp_md *ctx)
{
	__u32 zero = 0, len, have, off;
	struct stator_bench_frame *f;
	void *data, *data_end;
	__u32 *target;
	__u64 *iter;
	__be32 *word;

	f = bpf_map_lookup_elem(&stator_vgframe, &zero);
	target = bpf_map_lookup_elem(&stator_vgtarget, &zero);
	iter = bpf_map_lookup_elem(&stator_vgiter, &zero);
	if (!f || !target || !iter)
		return XDP_ABORTED;
	len = f->len;
	have = ctx->data_end - ctx->data;
	if (len == 0 || len > STATOR_BENCH_FRAME_MAX || have != len)
		return XDP_ABORTED;
	if (bpf_xdp_store_bytes(ctx, 0, f->bytes, len))
		return XDP_ABORTED;
	if (f->nflows > 1) {
		off = f->flow_off;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (off > STATOR_BENCH_FRAME_MAX - 4)
			return XDP_ABORTED;
		word = data + off;
		if ((void *)(word + 1) > data_end)
			return XDP_ABORTED;
		*word = bpf_htonl(bpf_ntohl(*word) + (__u32)(*iter % f->nflows));
	}
	*iter += 1;
	return bpf_redirect(*target, 0);
}

static __always_inline void stator_vcount(__u32 idx, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&stator_vsinkcnt, &idx);

	if (c)
		*c += n;
}

SEC("xdp")
int stator_vsink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u8 *ip = data + sizeof(*eth);

	stator_vcount(STATOR_VSINK_PACKETS, 1);
	stator_vcount(STATOR_VSINK_BYTES, data_end - data);
	if ((void *)(ip + 20) <= data_end && eth->h_proto == bpf_htons(ETH_P_IP) &&
	    (ip[9] == IPPROTO_GRE || ip[9] == IPPROTO_IPIP || ip[9] == IPPROTO_IPV6 ||
	     ip[9] == IPPROTO_UDP))
		stator_vcount(STATOR_VSINK_TUNNELLED, 1);
	return XDP_DROP;
}

SEC("xdp")
int stator_vroute(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct bpf_fib_lookup fib = {};
	struct ethhdr *eth = data;
	__u8 *ip = data + sizeof(*eth);
	__u32 check;
	long rc;

	if ((void *)(ip + 20) > data_end || eth->h_proto != bpf_htons(ETH_P_IP) || ip[8] <= 1)
		return XDP_PASS;
	fib.family = STATOR_AF_INET;
	fib.tos = ip[1];
	fib.l4_protocol = ip[9];
	fib.tot_len = bpf_ntohs(*(__be16 *)(ip + 2));
	fib.ipv4_src = *(__be32 *)(ip + 12);
	fib.ipv4_dst = *(__be32 *)(ip + 16);
	fib.ifindex = ctx->ingress_ifindex;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return XDP_PASS;
	/* TTL - 1, checksum + 0x0100 with end-around carry (RFC 1624, as ip_decrease_ttl) */
	check = *(__u16 *)(ip + 10);
	check += bpf_htons(0x0100);
	*(__u16 *)(ip + 10) = (__u16)(check + (check >= 0xffff));
	ip[8] -= 1;
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	return bpf_redirect_map(&stator_vroutetx, fib.ifindex, 0);
}

char _license[] SEC("license") = STATOR_BPF_LICENSE;
