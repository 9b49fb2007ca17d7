/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * stator_bench — the wrapper that makes kernel-repeat BPF_PROG_TEST_RUN measure the right path.
 *
 * With `repeat` > 1 the kernel runs a program again and again on the same xdp_buff, so a plain
 * repeat measures the forwarder on its *own output* (an already encapsulated packet). This
 * wrapper runs first on every iteration: it strips whatever the previous iteration prepended
 * (the frame is longer than the original by exactly that much), writes the original frame back
 * from stator_bframe, optionally makes it a different flow (adds iteration % nflows to one
 * big-endian 32-bit word, e.g. the source address, for a cold connection table), and
 * tail-calls the program under measurement (stator_bprogs[0]). Baselines run through the same
 * wrapper, so its cost cancels out of every difference.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "stator_abi.h"
#include "license.h"

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} stator_bprogs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stator_bench_frame);
} stator_bframe SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} stator_biter SEC(".maps");

SEC("xdp")
int stator_bench(struct xdp_md *ctx)
{
	__u32 zero = 0, len, have, off;
	struct stator_bench_frame *f;
	void *data, *data_end;
	__u64 *iter;
	__be32 *word;

	f = bpf_map_lookup_elem(&stator_bframe, &zero);
	iter = bpf_map_lookup_elem(&stator_biter, &zero);
	if (!f || !iter)
		return XDP_ABORTED;
	len = f->len;
	if (len == 0 || len > STATOR_BENCH_FRAME_MAX)
		return XDP_ABORTED;
	have = ctx->data_end - ctx->data;
	/* strip what the measured program prepended (it never shortens the frame) */
	if (have > len && bpf_xdp_adjust_head(ctx, (int)(have - len)))
		return XDP_ABORTED;
	if (bpf_xdp_store_bytes(ctx, 0, f->bytes, len))
		return XDP_ABORTED;
	if (f->nflows > 1) {
		off = f->flow_off;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (off > STATOR_BENCH_FRAME_MAX - 4 || off + 4 > len)
			return XDP_ABORTED;
		word = data + off;
		if ((void *)(word + 1) > data_end)
			return XDP_ABORTED;
		*word = bpf_htonl(bpf_ntohl(*word) + (__u32)(*iter % f->nflows));
		*iter += 1;
	}
	bpf_tail_call(ctx, &stator_bprogs, 0);
	return XDP_ABORTED;
}

char _license[] SEC("license") = STATOR_BPF_LICENSE;
