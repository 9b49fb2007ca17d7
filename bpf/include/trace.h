/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * trace.h — the packet tracer (docs/forwarding.md §11, Maglev §4.4).
 *
 * The mark check is on the path of every VIP packet, so it is one bounds test and one 8-byte
 * compare, made once the decision is known. The report is written straight into the stator_trace ring buffer (reserve + submit: nothing is
 * assembled on the stack), under the node's one-second window (stator_trl, one for all CPUs);
 * `stator run` reads the ring and sends the receiver a UDP report. The packet itself is
 * forwarded exactly as any other.
 */
#ifndef STATOR_TRACE_H
#define STATOR_TRACE_H

#include "stats.h"

/* §11.1: the offset of the trace mark when the 32 bytes after the TCP (20) or UDP (8) header are
 * within the IP packet and start with STATOR_TRACE_MAGIC, else 0. Asked where a report would be
 * made, right after the decision, so that no per-packet state divides the verifier's paths. */
static __always_inline __u32 stator_trace_mark_at(const struct xdp_md *ctx,
						  const struct stator_pkt *pkt)
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
	return *magic == STATOR_TRACE_MAGIC ? m : 0;
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
	__u8 _pad0[2];
	__u32 limit;      /* the node's reports per second */
	__u64 now;
};

/* §11.2: the report of a packet of flow `flow` traced with the mark at `mark_off`, unless the
 * node's window (d->limit reports a second) is full (trace_limited) or the ring is (trace_lost).
 * A global function: the verifier checks it once, not once per path that reaches a report; so it
 * is given only scalars (a pointer to the caller's stack would lose its pointers). */
__attribute__((noinline)) int stator_trace_report(struct xdp_md *ctx,
						  const struct stator_flow_key *flow,
						  __u32 mark_off, const struct stator_decision *d)
{
	struct stator_trace_event *e;
	struct stator_trace_mark *m;
	struct stator_flood *w;
	__u32 zero = 0;
	__u64 now;

	if (!ctx || !flow || !d)
		return 0;
	now = d->now;
	w = bpf_map_lookup_elem(&stator_trl, &zero);
	if (!w)
		return 0;
	if (now < w->window_start_ns || now - w->window_start_ns >= STATOR_NSEC_PER_SEC) {
		w->window_start_ns = now;
		w->inserts = 0;
	}
	if (w->inserts >= d->limit) {
		stator_count(STATOR_CNT_TRACE_LIMITED);
		return 0;
	}
	__sync_fetch_and_add(&w->inserts, 1);
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
	e->flow = *flow;
	e->now_ns = now;
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
	d->limit = pkt->cfg ? pkt->cfg->trace_per_sec : 0;
	stator_trace_report(ctx, &pkt->flow, mark, d);
}

#endif /* STATOR_TRACE_H */
