/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * trace.h — the packet tracer (docs/forwarding.md §11, Maglev §4.4).
 *
 * The mark check is on the path of every VIP packet, so it is one bounds test and one 8-byte
 * compare, made once the decision is known; only a mark with the magic is then admitted by the
 * node's one-second window (stator_trl, one for all CPUs) and its MAC checked (SipHash-2-4 under
 * the keys of stator_trkeys). The report is written straight into the stator_trace ring buffer
 * (reserve + submit: nothing is assembled on the stack);
 * `stator run` reads the ring and sends the receiver a UDP report. The packet itself is
 * forwarded exactly as any other.
 */
#ifndef STATOR_TRACE_H
#define STATOR_TRACE_H

#include "stats.h"

/* SipHash-2-4 (docs/forwarding.md §11.1) of the 64-byte message m[0..8] under (k0, k1): the
 * reference algorithm for a message of exactly 8 words (the length word is 64 << 56). */
#define STATOR_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define STATOR_SIPROUND                                                                          \
	do {                                                                                       \
		v0 += v1;                                                                          \
		v1 = STATOR_ROTL(v1, 13);                                                          \
		v1 ^= v0;                                                                          \
		v0 = STATOR_ROTL(v0, 32);                                                          \
		v2 += v3;                                                                          \
		v3 = STATOR_ROTL(v3, 16);                                                          \
		v3 ^= v2;                                                                          \
		v0 += v3;                                                                          \
		v3 = STATOR_ROTL(v3, 21);                                                          \
		v3 ^= v0;                                                                          \
		v2 += v1;                                                                          \
		v1 = STATOR_ROTL(v1, 17);                                                          \
		v1 ^= v2;                                                                          \
		v2 = STATOR_ROTL(v2, 32);                                                          \
	} while (0)

static __always_inline __u64 stator_siphash_8w(__u64 k0, __u64 k1, const __u64 *m)
{
	__u64 v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
	__u64 v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
	const __u64 b = 64ull << 56;

#pragma unroll
	for (int i = 0; i < 8; i++) {
		v3 ^= m[i];
		STATOR_SIPROUND;
		STATOR_SIPROUND;
		v0 ^= m[i];
	}
	v3 ^= b;
	STATOR_SIPROUND;
	STATOR_SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	STATOR_SIPROUND;
	STATOR_SIPROUND;
	STATOR_SIPROUND;
	STATOR_SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

/* A little-endian 64-bit word of packet bytes (the host's order: Stator runs on little-endian
 * hosts, as the magic's compare already assumes). */
static __always_inline __u64 stator_le64(const void *p)
{
	return *(const __u64 *)p;
}

/* §11.1: whether the mark at `mark_off` carries a MAC one of stator_trkeys' keys verifies, for
 * the packet whose IP header is at l3 and TCP/UDP header at l4 (`fp`: family << 8 | protocol).
 * A global function: the verifier checks it once, for every caller; it reads the packet again
 * itself (only scalars cross the call) and runs only for packets whose magic matched. */
__attribute__((noinline)) int stator_trace_auth(struct xdp_md *ctx, __u32 l3, __u32 l4,
						__u32 mark_off, __u32 fp)
{
	const struct stator_trace_keys *keys;
	__u64 m[8] = {};
	__u8 *mk, *ip, *ports;
	__u32 zero = 0, family = fp >> 8;
	int ok = 0;

	if (!ctx)
		return 0;
	keys = bpf_map_lookup_elem(&stator_trkeys, &zero);
	if (!keys || keys->count == 0)
		return 0;
	mk = stator_ptr(ctx, mark_off, sizeof(struct stator_trace_mark));
	ports = stator_ptr(ctx, l4, 4);
	if (!mk || !ports)
		return 0;
	m[0] = stator_le64(mk + 8);
	m[1] = stator_le64(mk + 16);
	m[2] = stator_le64(mk + 24);
	if (family == STATOR_FAMILY_V4) {
		ip = stator_ptr(ctx, l3, 20);
		if (!ip)
			return 0;
		m[3] = *(const __u32 *)(ip + 12);
		m[5] = *(const __u32 *)(ip + 16);
	} else {
		ip = stator_ptr(ctx, l3, 40);
		if (!ip)
			return 0;
		m[3] = stator_le64(ip + 8);
		m[4] = stator_le64(ip + 16);
		m[5] = stator_le64(ip + 24);
		m[6] = stator_le64(ip + 32);
	}
	m[7] = (__u64)(*(const __u32 *)ports) | ((__u64)(fp & 0xff) << 32);
	if (stator_siphash_8w(keys->k[0][0], keys->k[0][1], m) == stator_le64(mk + 32))
		ok = 1;
	else if (keys->count > 1 &&
		 stator_siphash_8w(keys->k[1][0], keys->k[1][1], m) == stator_le64(mk + 32))
		ok = 1;
	return ok;
}

/* §11.2: whether the node's window (stator_trl[0], `limit` marks a second for all CPUs) admits
 * one more mark at `now`; counts it if so. A global function, checked once. */
__attribute__((noinline)) int stator_trace_admit(__u64 now, __u32 limit)
{
	struct stator_flood *w;
	__u32 zero = 0;

	w = bpf_map_lookup_elem(&stator_trl, &zero);
	if (!w)
		return 0;
	if (now < w->window_start_ns || now - w->window_start_ns >= STATOR_NSEC_PER_SEC) {
		w->window_start_ns = now;
		w->inserts = 0;
	}
	if (w->inserts >= limit)
		return 0;
	__sync_fetch_and_add(&w->inserts, 1);
	return 1;
}

/* §11.1–§11.2: the offset of the trace mark when the 40 bytes after the TCP (20) or UDP (8)
 * header are within the IP packet and start with STATOR_TRACE_MAGIC, the node's window admits
 * it (else trace_limited: so a flood of marks costs at most `trace_per_sec` MAC checks a
 * second) and it is authentic (else trace_unauth); else 0. Asked where a report would be made,
 * right after the decision, so that no per-packet state divides the verifier's paths. */
static __always_inline __u32 stator_trace_mark_at(struct xdp_md *ctx, struct stator_pkt *pkt)
{
	__u32 m = pkt->l4 + (pkt->flow.proto == IPPROTO_TCP ? 20 : 8);
	void *data, *data_end;
	__u64 *magic;

	if (m + sizeof(struct stator_trace_mark) > pkt->ip_end || m > STATOR_MAX_PKT_OFF)
		return 0;
	/* Fresh loads of ctx->data: clang otherwise reuses an earlier load through a 32-bit move,
	 * which the verifier no longer takes for a packet pointer. */
	data = (void *)(long)*(volatile __u32 *)&ctx->data;
	data_end = (void *)(long)*(volatile __u32 *)&ctx->data_end;
	magic = data + m;
	if ((void *)(magic + 1) > data_end)
		return 0;
	if (*magic != STATOR_TRACE_MAGIC)
		return 0;
	if (!stator_trace_admit(stator_now(pkt), pkt->cfg ? pkt->cfg->trace_per_sec : 0)) {
		stator_count(STATOR_CNT_TRACE_LIMITED);
		return 0;
	}
	if (!stator_trace_auth(ctx, pkt->l3, pkt->l4, m,
			       ((__u32)pkt->family << 8) | pkt->flow.proto)) {
		stator_count(STATOR_CNT_TRACE_UNAUTH);
		return 0;
	}
	return m;
}

/* What a report says besides the mark (§11.2). */
struct stator_decision {
	__u32 vip_id;
	__u32 real_id;
	__u32 slot;
	__u8 kind;
	__u8 cause;
	__u8 reason;
	__u8 flags;
	__be32 target[4]; /* a redirect's target address */
	__u8 target_family;
	__u8 hop;         /* 1, or 2 in a redirect's inner packet */
	__u16 ip_len;     /* the traced IP packet's length */
	__u32 _pad1;
	__u64 now;
};

/* §11.2: the report of a packet of flow `flow` traced with the (admitted, authentic) mark at
 * `mark_off`, unless the ring is full (trace_lost). A global function: the verifier checks it
 * once, not once per path that reaches a report. */
__attribute__((noinline)) int stator_trace_report(struct xdp_md *ctx,
						  const struct stator_flow_key *flow,
						  __u32 mark_off, const struct stator_decision *d)
{
	struct stator_trace_event *e;
	struct stator_trace_mark *m;

	if (!ctx || !flow || !d)
		return 0;
	m = stator_ptr(ctx, mark_off, sizeof(*m));
	if (!m) /* never: checked by stator_trace_mark_at */
		return 0;
	e = bpf_ringbuf_reserve(&stator_trace, sizeof(*e), 0);
	if (!e) {
		stator_count(STATOR_CNT_TRACE_LOST);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	stator_copy_addr(e->receiver, m->receiver);
	e->receiver_port = m->receiver_port;
	e->receiver_family = m->receiver_family;
	e->trace_id = m->trace_id;
	e->hop = d->hop;
	e->kind = d->kind;
	e->cause = d->cause;
	e->reason = d->reason;
	e->flags = d->flags;
	e->vip_id = d->vip_id;
	e->real_id = d->real_id;
	e->slot = d->slot;
	stator_copy_addr(e->target, d->target);
	e->target_family = d->target_family;
	e->ip_len = d->ip_len;
	e->flow = *flow;
	e->now_ns = d->now;
	bpf_ringbuf_submit(e, 0);
	stator_count(STATOR_CNT_TRACE_REPORT);
	return 0;
}

/* A decision with nothing known yet. */
#define STATOR_DECISION(k)                                                                         \
	{ .vip_id = STATOR_NO_VIP, .real_id = STATOR_NO_REAL, .slot = STATOR_NO_SLOT, .kind = (k) }

/* Reports decision `d` of pkt, traced with the mark at `mark`. */
static __always_inline void stator_trace_decision(struct xdp_md *ctx, struct stator_pkt *pkt,
						  __u32 mark,
						  struct stator_decision *d)
{
	d->now = stator_now(pkt);
	d->hop = pkt->redirected ? 2 : 1;
	d->ip_len = (__u16)(pkt->ip_end - pkt->l3);
	stator_trace_report(ctx, &pkt->flow, mark, d);
}

#endif /* STATOR_TRACE_H */
