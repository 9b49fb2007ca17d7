/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * toeplitz_probe — runs bpf/include/toeplitz.h and reuseport.h inside the kernel for
 * steer_toeplitz_bpf.rs, through BPF_PROG_TEST_RUN: the test frame carries the inputs, the
 * program writes the hash over the frame's first 4 bytes (host order).
 *
 * Frame: [0, 56)   struct stator_rp_cfg (key and flags; the table fields are ignored)
 *        [56]      mode: 0 = raw Toeplitz of `len` bytes, 1 = stator_rp_client_hash
 *        [57]      raw: len; client: STATOR_FAMILY_V4 / V6
 *        [58, 60)  client: port, network order
 *        [60, 104) raw: input bytes; client: the address (4 or 16 bytes)
 * Raw lengths are the ones the vectors and the program use, each a compile-time constant as in
 * the steering program; any other length returns XDP_ABORTED.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "reuseport.h"

struct probe {
	struct stator_rp_cfg cfg;
	__u8 mode;
	__u8 len_or_family;
	__be16 port;
	__u8 input[44];
};

_Static_assert(sizeof(struct probe) == 104, "probe frame layout");

#define RAW(n)                                                                     \
	case n:                                                                    \
		hash = stator_toeplitz(p.cfg.key, p.input, n);                     \
		break

SEC("xdp")
int toeplitz_probe(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct probe p;
	__u32 hash;

	if (data + sizeof(p) > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(&p, data, sizeof(p));
	if (p.mode == 1) {
		if (p.len_or_family != STATOR_FAMILY_V4 && p.len_or_family != STATOR_FAMILY_V6)
			return XDP_ABORTED;
		hash = stator_rp_client_hash(&p.cfg, p.len_or_family, p.input, p.port);
	} else {
		switch (p.len_or_family) {
		RAW(0);
		RAW(1);
		RAW(4);
		RAW(6);
		RAW(8);
		RAW(12);
		RAW(16);
		RAW(18);
		RAW(32);
		RAW(36);
		RAW(40);
		RAW(44);
		default:
			return XDP_ABORTED;
		}
	}
	__builtin_memcpy(data, &hash, sizeof(hash));
	return XDP_PASS;
}

/* The GPL half of the SPDX line, as bpf/include/license.h says for every program. */
char _license[] SEC("license") = "GPL v2";
