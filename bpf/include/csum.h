/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * csum.h — the Internet checksum (RFC 1071) and its incremental update (RFC 1624).
 *
 * Sums are kept in 32 bits and folded at the end. 16-bit words are used in the byte order they
 * have in the packet: one's-complement sums are byte-order independent, so no swapping is needed
 * as long as the result is stored the same way it was read.
 */
#ifndef STATOR_CSUM_H
#define STATOR_CSUM_H

#include "common.h"

/* Folds a 32-bit one's-complement sum to 16 bits (not inverted). */
static __always_inline __u16 stator_csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* Adds a 32-bit word (as two 16-bit halves) to a running sum. */
static __always_inline __u32 stator_csum_add32(__u32 sum, __u32 word)
{
	return sum + (word & 0xffff) + (word >> 16);
}

/*
 * RFC 1624 eqn. 3: the checksum after one 16-bit word of the covered data changes from
 * `old_word` to `new_word`: HC' = ~(~HC + ~m + m').
 */
static __always_inline __u16 stator_csum_replace16(__u16 check, __u16 old_word, __u16 new_word)
{
	__u32 sum = (__u16)~check;

	sum += (__u16)~old_word;
	sum += new_word;
	return ~stator_csum_fold(sum);
}

#endif /* STATOR_CSUM_H */
