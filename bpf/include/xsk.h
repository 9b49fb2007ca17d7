/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * xsk.h — the AF_XDP plane's kernel half (docs/afxdp.md): its two maps, the hand-over of a
 * packet to the socket of its RX queue, and the FIB query the user-space forwarder asks
 * through BPF_PROG_TEST_RUN.
 *
 * Which packets go up is decided by the forwarder's own code (parse.h, vip.h): whatever the
 * XDP forwarder would pass is passed here too, counted the same way; everything it would decide
 * — forward, or drop with a reason — is handed over, and user space (stator-core) decides and
 * counts it. So the two planes' counters mean the same.
 */
#ifndef STATOR_XSK_H
#define STATOR_XSK_H

#include "stats.h"

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, STATOR_MAX_TX_PORTS * STATOR_MAX_XSK_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} stator_xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, STATOR_MAX_TX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} stator_xskifs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stator_xsk_cfg);
} stator_xskcfg SEC(".maps");

/* Hands the packet to the AF_XDP socket of its RX queue: stator_xsks[slot * STATOR_MAX_XSK_QUEUES
 * + queue], where `slot` is the interface's (stator_xskifs). A packet longer than a UMEM frame
 * holds is dropped (XSK_FRAME: the stated policy, docs/afxdp.md); no socket for this interface
 * and queue is a drop (XSK_SOCKET) — the kernel would drop it anyway, and this way it is
 * counted. */
static __always_inline int stator_xsk_redirect(struct xdp_md *ctx, const struct stator_pkt *pkt)
{
	__u32 zero = 0, ifindex = ctx->ingress_ifindex, queue = ctx->rx_queue_index, key;
	const struct stator_xsk_cfg *cfg = bpf_map_lookup_elem(&stator_xskcfg, &zero);
	const __u32 *slot;

	if (!cfg || pkt->len > cfg->max_len)
		return stator_drop(STATOR_DROP_XSK_FRAME);
	slot = bpf_map_lookup_elem(&stator_xskifs, &ifindex);
	if (!slot || *slot >= STATOR_MAX_TX_PORTS || queue >= STATOR_MAX_XSK_QUEUES)
		return stator_drop(STATOR_DROP_XSK_SOCKET);
	key = *slot * STATOR_MAX_XSK_QUEUES + queue;
	if (!bpf_map_lookup_elem(&stator_xsks, &key))
		return stator_drop(STATOR_DROP_XSK_SOCKET);
	return bpf_redirect_map(&stator_xsks, key, XDP_DROP);
}

#endif /* STATOR_XSK_H */
