/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/* Stator flow hash: Linux's jhash2 (Bob Jenkins' lookup3, public domain) over a flow's fields.
 *
 * This is the C half of one function; the Rust half is crates/stator-hash/src/flow.rs. Both
 * follow docs/hashing.md and are held bit-identical by crates/stator-hash/testdata/
 * flow_hash_vectors.txt and a differential test that compiles this header
 * (crates/stator-hash/tests/flow_hash_c.rs). Change neither without the other and the vectors.
 *
 * Definition:
 *   initval = STATOR_FLOW_HASH_SEED ^ proto
 *   words   = host-order values of the network-order fields: each address 32 bits at a time,
 *             then ports = (sport << 16) | dport
 *   5-tuple: jhash2([saddr, daddr, ports])          IPv4, 3 words
 *            jhash2([saddr0..3, daddr0..3, ports])  IPv6, 9 words
 *   3-tuple (fragments): the same without the ports word (2 or 8 words).
 *
 * ICMP errors: hash the embedded header with source and destination (addresses and ports)
 * swapped; that is the hash of the flow the error is about.
 *
 * Usable from BPF C (clang -target bpf) and host C: only <linux/types.h>, no libc, every
 * function static __always_inline, straight-line code (no loops for the verifier to bound).
 * IPv6 address pointers may point into packet data: BPF allows unaligned packet loads on the
 * architectures XDP runs on; host callers should pass 4-byte-aligned storage.
 */
#ifndef STATOR_FLOW_HASH_H
#define STATOR_FLOW_HASH_H

#include <linux/types.h>

#ifndef __always_inline
#define __always_inline inline __attribute__((__always_inline__))
#endif

#if !defined(__BYTE_ORDER__) || !defined(__ORDER_LITTLE_ENDIAN__) || \
	!defined(__ORDER_BIG_ENDIAN__)
#error "flow_hash.h needs the compiler's __BYTE_ORDER__ macros (gcc or clang)"
#endif

/* Lookup3's arbitrary initial value (JHASH_INITVAL in include/linux/jhash.h). */
#define STATOR_JHASH_INITVAL 0xdeadbeefU
/* Stator's seed; initval = STATOR_FLOW_HASH_SEED ^ IP protocol number. */
#define STATOR_FLOW_HASH_SEED 0x5ca1ab1eU

/* Network to host byte order, without libc or libbpf. */
static __always_inline __u32 stator_be32_to_cpu(__be32 v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return __builtin_bswap32((__u32)v);
#elif __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	return (__u32)v;
#else
#error "unsupported byte order"
#endif
}

static __always_inline __u16 stator_be16_to_cpu(__be16 v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return __builtin_bswap16((__u16)v);
#else
	return (__u16)v;
#endif
}

static __always_inline __u32 stator_rol32(__u32 word, unsigned int shift)
{
	return (word << (shift & 31)) | (word >> ((-shift) & 31));
}

/* __jhash_mix: mix three 32-bit values reversibly. */
#define STATOR_JHASH_MIX(a, b, c)                                       \
	do {                                                            \
		a -= c; a ^= stator_rol32(c, 4);  c += b;               \
		b -= a; b ^= stator_rol32(a, 6);  a += c;               \
		c -= b; c ^= stator_rol32(b, 8);  b += a;               \
		a -= c; a ^= stator_rol32(c, 16); c += b;               \
		b -= a; b ^= stator_rol32(a, 19); a += c;               \
		c -= b; c ^= stator_rol32(b, 4);  b += a;               \
	} while (0)

/* __jhash_final: final mixing of three 32-bit values into c. */
#define STATOR_JHASH_FINAL(a, b, c)                                     \
	do {                                                            \
		c ^= b; c -= stator_rol32(b, 14);                       \
		a ^= c; a -= stator_rol32(c, 11);                       \
		b ^= a; b -= stator_rol32(a, 25);                       \
		c ^= b; c -= stator_rol32(b, 16);                       \
		a ^= c; a -= stator_rol32(c, 4);                        \
		b ^= a; b -= stator_rol32(a, 14);                       \
		c ^= b; c -= stator_rol32(b, 24);                       \
	} while (0)

/* jhash2(k, 2, initval) */
static __always_inline __u32 stator_jhash_2words(__u32 w0, __u32 w1, __u32 initval)
{
	__u32 a, b, c;

	a = b = c = STATOR_JHASH_INITVAL + (2U << 2) + initval;
	b += w1;
	a += w0;
	STATOR_JHASH_FINAL(a, b, c);
	return c;
}

/* jhash2(k, 3, initval) */
static __always_inline __u32 stator_jhash_3words(__u32 w0, __u32 w1, __u32 w2, __u32 initval)
{
	__u32 a, b, c;

	a = b = c = STATOR_JHASH_INITVAL + (3U << 2) + initval;
	c += w2;
	b += w1;
	a += w0;
	STATOR_JHASH_FINAL(a, b, c);
	return c;
}

/* jhash2(k, 8, initval): two mixed blocks of three, then a tail of two. */
static __always_inline __u32 stator_jhash_8words(const __u32 k[8], __u32 initval)
{
	__u32 a, b, c;

	a = b = c = STATOR_JHASH_INITVAL + (8U << 2) + initval;
	a += k[0]; b += k[1]; c += k[2];
	STATOR_JHASH_MIX(a, b, c);
	a += k[3]; b += k[4]; c += k[5];
	STATOR_JHASH_MIX(a, b, c);
	b += k[7];
	a += k[6];
	STATOR_JHASH_FINAL(a, b, c);
	return c;
}

/* jhash2(k, 9, initval): two mixed blocks of three, then a tail of three. */
static __always_inline __u32 stator_jhash_9words(const __u32 k[9], __u32 initval)
{
	__u32 a, b, c;

	a = b = c = STATOR_JHASH_INITVAL + (9U << 2) + initval;
	a += k[0]; b += k[1]; c += k[2];
	STATOR_JHASH_MIX(a, b, c);
	a += k[3]; b += k[4]; c += k[5];
	STATOR_JHASH_MIX(a, b, c);
	c += k[8];
	b += k[7];
	a += k[6];
	STATOR_JHASH_FINAL(a, b, c);
	return c;
}

static __always_inline __u32 stator_flow_ports(__be16 sport, __be16 dport)
{
	return ((__u32)stator_be16_to_cpu(sport) << 16) | stator_be16_to_cpu(dport);
}

static __always_inline void stator_flow_v6_words(__u32 w[8], const __be32 *saddr,
						 const __be32 *daddr)
{
	w[0] = stator_be32_to_cpu(saddr[0]);
	w[1] = stator_be32_to_cpu(saddr[1]);
	w[2] = stator_be32_to_cpu(saddr[2]);
	w[3] = stator_be32_to_cpu(saddr[3]);
	w[4] = stator_be32_to_cpu(daddr[0]);
	w[5] = stator_be32_to_cpu(daddr[1]);
	w[6] = stator_be32_to_cpu(daddr[2]);
	w[7] = stator_be32_to_cpu(daddr[3]);
}

/* IPv4 5-tuple, fields as they sit in the packet (network byte order). */
static __always_inline __u32 stator_flow_hash_v4(__be32 saddr, __be32 daddr, __be16 sport,
						 __be16 dport, __u8 proto)
{
	return stator_jhash_3words(stator_be32_to_cpu(saddr), stator_be32_to_cpu(daddr),
				   stator_flow_ports(sport, dport),
				   STATOR_FLOW_HASH_SEED ^ (__u32)proto);
}

/* IPv6 5-tuple; saddr and daddr point at the 16-byte addresses (4 network-order words). */
static __always_inline __u32 stator_flow_hash_v6(const __be32 *saddr, const __be32 *daddr,
						 __be16 sport, __be16 dport, __u8 proto)
{
	__u32 w[9];

	stator_flow_v6_words(w, saddr, daddr);
	w[8] = stator_flow_ports(sport, dport);
	return stator_jhash_9words(w, STATOR_FLOW_HASH_SEED ^ (__u32)proto);
}

/* IPv4 3-tuple, for fragments (which carry no ports after the first). */
static __always_inline __u32 stator_flow_hash3_v4(__be32 saddr, __be32 daddr, __u8 proto)
{
	return stator_jhash_2words(stator_be32_to_cpu(saddr), stator_be32_to_cpu(daddr),
				   STATOR_FLOW_HASH_SEED ^ (__u32)proto);
}

/* IPv6 3-tuple, for fragments. */
static __always_inline __u32 stator_flow_hash3_v6(const __be32 *saddr, const __be32 *daddr,
						  __u8 proto)
{
	__u32 w[8];

	stator_flow_v6_words(w, saddr, daddr);
	return stator_jhash_8words(w, STATOR_FLOW_HASH_SEED ^ (__u32)proto);
}

#endif /* STATOR_FLOW_HASH_H */
