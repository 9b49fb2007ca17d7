/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * reuseport.h — the pure part of client -> worker steering: which bytes of a client's address
 * are hashed, and how (docs/steering.md). No maps, no helpers: the program
 * (stator_reuseport.bpf.c) and the BPF_PROG_TEST_RUN probe of the Toeplitz test both call it,
 * and crates/stator-steer's `SteeringTable` computes the same in Rust.
 */
#ifndef STATOR_REUSEPORT_H
#define STATOR_REUSEPORT_H

#include <linux/types.h>

#include "stator_abi.h"
#include "toeplitz.h"

_Static_assert(STATOR_RSS_KEY_LEN == STATOR_TOEPLITZ_KEY_LEN,
	       "stator_abi.h and toeplitz.h disagree on the RSS key length");
_Static_assert(sizeof(struct stator_rp_cfg) == 56, "struct stator_rp_cfg changed size");

/* The hash of a client. `addr` holds the address as it sits in the packet: 4 bytes for
 * STATOR_FAMILY_V4, 16 for STATOR_FAMILY_V6; `port` is the source port in network order, hashed
 * after the address only when cfg->flags has STATOR_RP_F_PORT. */
static __always_inline __u32 stator_rp_client_hash(const struct stator_rp_cfg *cfg, __u8 family,
						   const __u8 *addr, __be16 port)
{
	__u8 input[18];
	__u32 i;

	if (family == STATOR_FAMILY_V4) {
		if (!(cfg->flags & STATOR_RP_F_PORT))
			return stator_toeplitz(cfg->key, addr, 4);
		for (i = 0; i < 4; i++)
			input[i] = addr[i];
		__builtin_memcpy(&input[4], &port, 2);
		return stator_toeplitz(cfg->key, input, 6);
	}
	if (!(cfg->flags & STATOR_RP_F_PORT))
		return stator_toeplitz(cfg->key, addr, 16);
	for (i = 0; i < 16; i++)
		input[i] = addr[i];
	__builtin_memcpy(&input[16], &port, 2);
	return stator_toeplitz(cfg->key, input, 18);
}

#endif /* STATOR_REUSEPORT_H */
