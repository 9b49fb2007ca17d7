/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * reuseport_client.h — the client's address and port, read where the kernel has them
 * (docs/steering.md §"Which bytes are hashed").
 *
 * Selecting (a TCP SYN, a UDP datagram): from the packet. The context's data begins at the
 * transport header, so the source port is data[0..2); the addresses lie before it and are read
 * with bpf_skb_load_bytes_relative(BPF_HDR_START_NET).
 * Migrating (a request of a closing TCP listener, with or without a packet at hand): from the
 * request or child socket, whose remote ("dst") address and port are the client's. A v4-mapped
 * IPv6 remote address (an IPv4 client of a dual-stack socket) is read as the IPv4 address, which
 * is what the packet carried when the client was selected.
 */
#ifndef STATOR_REUSEPORT_CLIENT_H
#define STATOR_REUSEPORT_CLIENT_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "stator_abi.h"

#define STATOR_RP_AF_INET 2
#define STATOR_RP_AF_INET6 10

/* A client as the hash sees it. */
struct stator_rp_client {
	__u8 addr[16]; /* network order; IPv4 in addr[0..4) */
	__be16 port;   /* network order; read only when the port is hashed */
	__u8 family;   /* STATOR_FAMILY_V4 / V6 */
};

/* From the packet of a select run. Returns 0, or -1 when the address cannot be read. */
static __always_inline int stator_rp_client_from_skb(struct sk_reuseport_md *md, int want_port,
						     struct stator_rp_client *c)
{
	if (md->eth_protocol == bpf_htons(ETH_P_IP)) {
		/* iphdr.saddr is at offset 12 */
		if (bpf_skb_load_bytes_relative(md, 12, c->addr, 4, BPF_HDR_START_NET))
			return -1;
		c->family = STATOR_FAMILY_V4;
	} else if (md->eth_protocol == bpf_htons(ETH_P_IPV6)) {
		/* ipv6hdr.saddr is at offset 8 */
		if (bpf_skb_load_bytes_relative(md, 8, c->addr, 16, BPF_HDR_START_NET))
			return -1;
		c->family = STATOR_FAMILY_V6;
	} else {
		return -1;
	}
	if (want_port) {
		void *data = md->data;
		void *data_end = md->data_end;

		/* TCP and UDP both start with the source port */
		if (data + 2 <= data_end)
			c->port = *(__be16 *)data;
		else if (bpf_skb_load_bytes(md, 0, &c->port, 2))
			return -1;
	}
	return 0;
}

/* From the migrating socket of a migrate run. Returns 0, or -1 for an unknown family. */
static __always_inline int stator_rp_client_from_sock(struct bpf_sock *sk,
						      struct stator_rp_client *c)
{
	__u32 family = sk->family;

	c->port = sk->dst_port;
	if (family == STATOR_RP_AF_INET) {
		__u32 a = sk->dst_ip4;

		__builtin_memcpy(c->addr, &a, 4);
		c->family = STATOR_FAMILY_V4;
		return 0;
	}
	if (family == STATOR_RP_AF_INET6) {
		__u32 a0 = sk->dst_ip6[0], a1 = sk->dst_ip6[1];
		__u32 a2 = sk->dst_ip6[2], a3 = sk->dst_ip6[3];

		if (a0 == 0 && a1 == 0 && a2 == bpf_htonl(0xffff)) {
			__builtin_memcpy(c->addr, &a3, 4);
			c->family = STATOR_FAMILY_V4;
			return 0;
		}
		__builtin_memcpy(c->addr, &a0, 4);
		__builtin_memcpy(c->addr + 4, &a1, 4);
		__builtin_memcpy(c->addr + 8, &a2, 4);
		__builtin_memcpy(c->addr + 12, &a3, 4);
		c->family = STATOR_FAMILY_V6;
		return 0;
	}
	return -1;
}

#endif /* STATOR_REUSEPORT_CLIENT_H */
