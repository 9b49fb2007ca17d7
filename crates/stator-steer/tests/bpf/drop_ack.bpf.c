/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * drop_ack — for steer_migrate.rs: drops the final ACK of TCP handshakes to port 8080 (an ACK
 * without SYN, FIN, RST or payload), so connections stay pending (NEW_SYN_RECV) in their
 * listener's SYN queue while the test closes a listener. Everything else passes.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

SEC("xdp")
int drop_ack(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct tcphdr *tcp;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || ip->protocol != IPPROTO_TCP || ip->ihl != 5)
		return XDP_PASS;
	tcp = (void *)(ip + 1);
	if ((void *)(tcp + 1) > data_end || tcp->dest != bpf_htons(8080))
		return XDP_PASS;
	if (tcp->ack && !tcp->syn && !tcp->fin && !tcp->rst &&
	    bpf_ntohs(ip->tot_len) == sizeof(*ip) + tcp->doff * 4)
		return XDP_DROP;
	return XDP_PASS;
}

/* The GPL half of the SPDX line, as bpf/include/license.h says for every program. */
char _license[] SEC("license") = "GPL v2";
