/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * The clock probe the loader runs before it loads the forwarder (crates/stator-xdp/src/clock.rs):
 * one run under BPF_PROG_TEST_RUN writes, at the start of the frame, three little-endian u64s
 * read back to back — jiffies_64, CLOCK_MONOTONIC_COARSE and CLOCK_MONOTONIC in ns — from which
 * the loader derives the tick and the offset of the forwarder's jiffies clock (bpf/include/clock.h).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "license.h"

SEC("xdp")
int stator_clock_probe(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 *out = data;

	if ((void *)(out + 3) > data_end)
		return XDP_ABORTED;
	out[0] = bpf_jiffies64();
	out[1] = bpf_ktime_get_coarse_ns();
	out[2] = bpf_ktime_get_ns();
	return XDP_PASS;
}

char _license[] SEC("license") = STATOR_BPF_LICENSE;
