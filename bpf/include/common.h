/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * common.h — includes, small helpers and the per-packet state of the forwarder.
 *
 * Every stage of the forwarding decision (docs/forwarding.md) reads and fills one
 * `struct stator_pkt` on the stack and returns either an XDP action (the packet is finished and
 * counted) or STATOR_CONTINUE. Offsets are kept as scalars relative to ctx->data and turned into
 * packet pointers only through stator_ptr(), which gives the verifier a bounded offset and a
 * constant length to check.
 */
#ifndef STATOR_COMMON_H
#define STATOR_COMMON_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "stator_abi.h"
#include "flow_hash.h"

/* A stage's "not finished yet" return value (XDP actions are >= 0). */
#define STATOR_CONTINUE (-1)

/* Offsets are checked against this before becoming packet pointers: the verifier needs a
 * bounded offset, and no XDP frame without fragments is this long. */
#define STATOR_MAX_PKT_OFF 0x3fff

#define STATOR_ETH_LEN 14
#define STATOR_VLAN_ETH_LEN 18
#define STATOR_IPV4_LEN 20
#define STATOR_IPV6_LEN 40

#define STATOR_AF_INET 2
#define STATOR_AF_INET6 10

#define STATOR_IPPROTO_ICMPV6 58
#define STATOR_IPPROTO_IPV6 41

#define STATOR_NSEC_PER_SEC 1000000000ull

/* Which selection rules apply (docs/forwarding.md §4 and §6). */
enum stator_select_mode {
	STATOR_SEL_FLOW = 0,      /* an established-flow packet: table lookup, insert on miss */
	STATOR_SEL_SYN = 1,       /* SYN without ACK: Maglev and insert, no lookup */
	STATOR_SEL_ICMP_ERR = 2,  /* ICMP error: lookup, never insert, SYN ignored */
};

/* Everything known about the packet being forwarded. */
struct stator_pkt {
	__u32 len;         /* frame length as received */
	__u32 l3;          /* offset of the IP header: 14, or 18 behind an 802.1Q tag */
	__u32 l4;          /* offset of the upper-layer header */
	__u32 ip_end;      /* l3 + IP total length; bytes beyond are Ethernet padding */
	__u32 gen;         /* active generation, read once */
	__u32 fib_cache_us; /* stator_ctl.fib_cache_us (0 = no next-hop cache) */
	const struct stator_node_cfg *cfg;  /* stator_cfg[gen] */
	const struct stator_vaddr *vaddr;   /* the destination's stator_vtab slot */
	__u64 test_clock;  /* stator_ctl.test_clock_ns (0 = kernel clock) */
	__u64 now;         /* `now`, once read (0 = not yet) */
	__u8 family;       /* STATOR_FAMILY_V4 / V6 of the received (inner) packet */
	__u8 tos;          /* IPv4 TOS / IPv6 traffic class: copied to the outer header */
	__u8 df;           /* 1 when the outer header gets DF: inner IPv6, or inner DF set */
	__u8 tcp_flags;    /* TCP flags byte (0 for other protocols) */
	__u8 hashed;       /* `hash` is computed (stator_pkt_hash) */
	__u8 redirected;   /* the inner packet of a Stator redirect (§10.2) */
	__u8 is_frag;      /* a fragment (§9): frag_* are set */
	__u8 frag_first;   /* ... with offset 0 */
	__u32 hash;        /* the flow hash of `flow`, once computed */
	struct stator_flow_key flow; /* as received (reversed quoted flow for ICMP errors) */
	const struct stator_class *class; /* the destination's class (§3.1), once looked up */
	__u32 frag_id;     /* IPv4 identification (zero-extended) / IPv6 fragment id, host order */
	__u32 slot;        /* the Maglev slot of the decision (STATOR_NO_SLOT: none) */
	__u8 frag_proto;   /* IPv4 protocol / the fragment header's next header */
	__u8 class_done;   /* `class` was looked up */
	__u8 cause;        /* enum stator_trace_cause of the selection */
	__u8 sc;           /* sent with a second chance naming real sc_real (§12.2) */
	__u32 sc_real;     /* the previous backend's real id, when `sc` */
};

/*
 * A pointer to `len` bytes at offset `off` of the frame, or NULL when the frame is shorter.
 * Always inlined with a constant `len`, so the verifier sees a bounded offset and a fixed-size
 * range check on the resulting packet pointer.
 */
static __always_inline void *stator_ptr(const struct xdp_md *ctx, __u32 off, const __u32 len)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	void *p;

	if (off > STATOR_MAX_PKT_OFF)
		return NULL;
	p = data + off;
	if (p + len > data_end)
		return NULL;
	return p;
}

/*
 * 16-byte addresses and 6-byte MAC addresses copied as 32- and 16-bit words. Clang knows nothing
 * of a packet pointer's alignment, so __builtin_memcpy to or from the frame becomes a load and a
 * store per byte (a 16-byte address: 32 instructions, plus shifts when it lands in a register).
 * Unaligned packet and map-value words are fine where the program runs (x86-64 and arm64 have
 * efficient unaligned access, so the verifier does not enforce alignment there; every header
 * field is already read this way); stack operands must be aligned, which the struct layouts
 * give (addresses at 4-byte offsets, bpf_fib_lookup's MACs at 52 and 58).
 */
static __always_inline void stator_copy_addr(void *dst, const void *src)
{
	__u32 *d = dst;
	const __u32 *s = src;

	d[0] = s[0];
	d[1] = s[1];
	d[2] = s[2];
	d[3] = s[3];
}

static __always_inline void stator_copy_mac(void *dst, const void *src)
{
	__u16 *d = dst;
	const __u16 *s = src;

	d[0] = s[0];
	d[1] = s[1];
	d[2] = s[2];
}

#endif /* STATOR_COMMON_H */
