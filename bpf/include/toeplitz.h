/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * toeplitz.h — the Toeplitz hash of receive-side scaling (RSS), as Microsoft defines it and NICs
 * compute it, over a byte string with a 40-byte (320-bit) key.
 *
 * This is the C half of one function; the Rust half is crates/stator-hash/src/toeplitz.rs. The two
 * are held bit-identical by crates/stator-hash/testdata/toeplitz_vectors.txt and 100,000 random
 * inputs, compiled for the host (crates/stator-hash/tests/toeplitz_c.rs) and run as BPF through
 * BPF_PROG_TEST_RUN (crates/stator-steer/tests/steer_toeplitz_bpf.rs). Change neither alone.
 *
 * Definition: for every input bit, most significant bit of input[0] first, when the bit is set
 * XOR the result with the leftmost 32 bits of the key; then shift the key left by one bit. Zeros
 * enter the key from the right, so the 40-byte key fully covers inputs of up to 36 bytes (an
 * IPv6 4-tuple); longer inputs see zeros.
 *
 * Usable from BPF C and host C: only <linux/types.h>, no libc. The loop over bits is unrolled;
 * the loop over bytes is left to the compiler (BPF callers pass a constant length, so the
 * verifier sees a bounded loop or, when clang unrolls it, straight-line code).
 */
#ifndef STATOR_TOEPLITZ_H
#define STATOR_TOEPLITZ_H

#include <linux/types.h>

#ifndef __always_inline
#define __always_inline inline __attribute__((__always_inline__))
#endif

/* The key length (STATOR_RSS_KEY_LEN in stator_abi.h; reuseport.h asserts they agree). */
#define STATOR_TOEPLITZ_KEY_LEN 40

/* Loop unrolling for clang (BPF); gcc unrolls constant-length loops at -O2 without being asked
 * and warns about clang's pragma. */
#ifdef __clang__
#define STATOR_UNROLL _Pragma("unroll")
#else
#define STATOR_UNROLL
#endif

/* Toeplitz hash of input[0..len) with key[0..40). The 64-bit window holds the next key bits, most
 * significant first; its top 32 bits are the current 32-bit slice of the key. After each input
 * byte the window has shifted by 8 and the next key byte enters at the bottom. */
static __always_inline __u32 stator_toeplitz(const __u8 *key, const __u8 *input, __u32 len)
{
	__u64 window = 0;
	__u32 result = 0;
	__u32 i;
	int bit;

	STATOR_UNROLL
	for (i = 0; i < 8; i++)
		window = (window << 8) | key[i];

	for (i = 0; i < len; i++) {
		__u8 byte = input[i];

		STATOR_UNROLL
		for (bit = 7; bit >= 0; bit--) {
			/* all ones when the bit is set: a branch-free conditional XOR */
			__u32 mask = 0u - (__u32)((byte >> bit) & 1);

			result ^= (__u32)(window >> 32) & mask;
			window <<= 1;
		}
		if (i + 8 < STATOR_TOEPLITZ_KEY_LEN)
			window |= key[i + 8];
	}
	return result;
}

#endif /* STATOR_TOEPLITZ_H */
