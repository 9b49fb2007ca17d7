/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * stator_rss — receive steering for steering = "cpu": each client's packets to the CPU of the
 * worker that serves it (docs/steering.md §8).
 *
 * The 2014 session-persistence paper aligns three things on one core: the NIC's receive queue
 * (the NIC hashes the source address only), the queue's interrupt, and the worker process that
 * serves the client. A client's packets are then received, queued and served on one CPU. This
 * program is that NIC in software, for interfaces whose NIC cannot be told to hash the source
 * address alone (veth, loopback, most virtual NICs): attached at XDP on the interface clients
 * arrive on, it hashes the source address of every IPv4/IPv6 TCP or UDP packet to a steered
 * listening port with the listeners' own Toeplitz key and table (struct stator_rp_cfg, the
 * table over worker ids), and sends the packet through a CPUMAP to the CPU that worker is
 * pinned to, where the kernel builds the socket buffer and runs the stack. The listener's
 * reuseport program (stator_reuseport.bpf.c, STATOR_RP_F_CPU) picks the same worker from the
 * same table, and counts whether it ran on that CPU.
 *
 * A packet already on its CPU is passed (XDP_PASS): with generic XDP the CPUMAP hands the
 * packet to the stack on the target CPU, where this program runs again and passes it. Every
 * other packet — not IP, not TCP/UDP, fragments after the first, another port — is passed
 * untouched and counted; nothing is ever dropped. Every run is counted in exactly one counter
 * of stator_rss_cnt (enum stator_rss_counter).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "stator_abi.h"
#include "reuseport.h"
#include "license.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stator_rp_cfg);
} stator_rss_cfg SEC(".maps");

/* slot -> worker id; the loader sets max_entries to the table size */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4093);
	__type(key, __u32);
	__type(value, __u32);
} stator_rss_table SEC(".maps");

/* worker id -> CPU */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STATOR_RSS_MAX_CPUS);
	__type(key, __u32);
	__type(value, __u32);
} stator_rss_cpus SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, STATOR_RSS_MAX_CPUS);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} stator_rss_cpumap SEC(".maps");

/* (IPPROTO_TCP or IPPROTO_UDP) << 16 | destination port (host order) -> 1 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, STATOR_RSS_MAX_PORTS);
	__type(key, __u32);
	__type(value, __u8);
} stator_rss_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STATOR_RSS_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stator_rss_cnt SEC(".maps");

static __always_inline int stator_rss_count(__u32 idx, int action)
{
	__u64 *n = bpf_map_lookup_elem(&stator_rss_cnt, &idx);

	if (n)
		*n += 1;
	return action;
}

/* The destination port of the transport header at `l4` (TCP and UDP both start with the two
 * ports). Returns 0 and sets *port, or -1 when the header is cut short. */
static __always_inline int stator_rss_dport(void *l4, void *end, __u16 *port)
{
	__be16 *ports = l4;

	if ((void *)(ports + 2) > end)
		return -1;
	*port = bpf_ntohs(ports[1]);
	return 0;
}

SEC("xdp")
int stator_rss(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	const struct stator_rp_cfg *cfg;
	__u32 zero = 0, key, slot, *worker, *cpu;
	__u8 addr[16] = {}, family, proto;
	__u16 port;

	if ((void *)(eth + 1) > end)
		return stator_rss_count(STATOR_RSS_CNT_MALFORMED, XDP_PASS);
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || ip->ihl < 5)
			return stator_rss_count(STATOR_RSS_CNT_MALFORMED, XDP_PASS);
		proto = ip->protocol;
		/* a later fragment has no ports: the kernel reassembles it wherever it lands */
		if (ip->frag_off & bpf_htons(0x1fff))
			return stator_rss_count(STATOR_RSS_CNT_OTHER, XDP_PASS);
		if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
			return stator_rss_count(STATOR_RSS_CNT_OTHER, XDP_PASS);
		if (stator_rss_dport((void *)ip + ip->ihl * 4, end, &port))
			return stator_rss_count(STATOR_RSS_CNT_MALFORMED, XDP_PASS);
		__builtin_memcpy(addr, &ip->saddr, 4);
		family = STATOR_FAMILY_V4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > end)
			return stator_rss_count(STATOR_RSS_CNT_MALFORMED, XDP_PASS);
		/* extension headers are not walked: such packets take the kernel's path */
		proto = ip6->nexthdr;
		if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
			return stator_rss_count(STATOR_RSS_CNT_OTHER, XDP_PASS);
		if (stator_rss_dport(ip6 + 1, end, &port))
			return stator_rss_count(STATOR_RSS_CNT_MALFORMED, XDP_PASS);
		__builtin_memcpy(addr, &ip6->saddr, 16);
		family = STATOR_FAMILY_V6;
	} else {
		return stator_rss_count(STATOR_RSS_CNT_OTHER, XDP_PASS);
	}

	key = (__u32)proto << 16 | port;
	if (!bpf_map_lookup_elem(&stator_rss_ports, &key))
		return stator_rss_count(STATOR_RSS_CNT_OTHER, XDP_PASS);
	cfg = bpf_map_lookup_elem(&stator_rss_cfg, &zero);
	if (!cfg || cfg->table_size == 0)
		return stator_rss_count(STATOR_RSS_CNT_NO_CPU, XDP_PASS);
	slot = stator_rp_client_hash(cfg, family, addr, 0) % cfg->table_size;
	worker = bpf_map_lookup_elem(&stator_rss_table, &slot);
	if (!worker || *worker == STATOR_RP_NO_WORKER)
		return stator_rss_count(STATOR_RSS_CNT_NO_CPU, XDP_PASS);
	cpu = bpf_map_lookup_elem(&stator_rss_cpus, worker);
	if (!cpu)
		return stator_rss_count(STATOR_RSS_CNT_NO_CPU, XDP_PASS);
	if (*cpu == bpf_get_smp_processor_id())
		return stator_rss_count(STATOR_RSS_CNT_LOCAL, XDP_PASS);
	/* XDP_PASS as the fallback action: a CPU without a CPUMAP entry keeps the packet here */
	if (bpf_redirect_map(&stator_rss_cpumap, *cpu, XDP_PASS) != XDP_REDIRECT)
		return stator_rss_count(STATOR_RSS_CNT_NO_CPU, XDP_PASS);
	return stator_rss_count(STATOR_RSS_CNT_REDIRECTED, XDP_REDIRECT);
}

char _license[] SEC("license") = STATOR_BPF_LICENSE;
