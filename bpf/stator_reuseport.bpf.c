/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * stator_reuseport — client -> worker affinity decided in the kernel (docs/steering.md).
 *
 * The proxy tier runs N workers, each with its own SO_REUSEPORT socket on the listening address.
 * This program, attached to that group, picks the socket of a new TCP connection or of a UDP
 * datagram: the worker in slot hash % M of a Maglev table over worker ids, where hash is the
 * Toeplitz (RSS) hash of the client's address (and port, if configured). So every connection of
 * a client reaches the same worker, whose session table keeps the client on its backend — the
 * 2014 session-persistence paper's kernel patch, done with today's kernel API; and a worker that
 * leaves (the table rebuilt without it) moves only its own clients.
 *
 * A slot whose worker has no socket (it exited, or was never set) falls back to the next slots,
 * at most STATOR_RP_PROBES of them, then to the kernel's own hash. Attached as
 * BPF_SK_REUSEPORT_SELECT_OR_MIGRATE, the same decision re-homes the pending and accept-queue
 * requests of a listener that closes, keyed by the requesting client's address. Every run is
 * counted in exactly one outcome counter of stator_rp_cnt (enum stator_rp_counter).
 *
 * steering = "cpu" (STATOR_RP_F_CPU) decides the same way; worker i is pinned to CPU
 * stator_rp_cpus[i] and the receive-steering program (stator_rss.bpf.c) sends each client's
 * packets to its worker's CPU, so a select run also counts whether it ran there (cpu_local) or
 * not (cpu_remote): the client's packets were received on another CPU.
 *
 * One header per concern:
 *   reuseport.h         the client's hash (pure; shared with the Toeplitz test probe)
 *   reuseport_client.h  the client's address and port, from the packet or the migrating socket
 *   reuseport_maps.h    maps and counters
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "reuseport.h"
#include "reuseport_client.h"
#include "reuseport_maps.h"
#include "license.h"

SEC("sk_reuseport/migrate")
int stator_reuseport(struct sk_reuseport_md *md)
{
	struct bpf_sock *migrating = md->migrating_sk;
	const struct stator_rp_cfg *cfg;
	struct stator_rp_client client = {};
	__u32 zero = 0, hash, slot, i;

	cfg = bpf_map_lookup_elem(&stator_rp_cfg, &zero);
	if (!cfg || cfg->table_size == 0) {
		stator_rp_count(STATOR_RP_CNT_NOT_CONFIGURED);
		return SK_PASS;
	}
	if (migrating ? stator_rp_client_from_sock(migrating, &client)
		      : stator_rp_client_from_skb(md, cfg->flags & STATOR_RP_F_PORT, &client)) {
		stator_rp_count(STATOR_RP_CNT_NO_ADDRESS);
		return SK_PASS;
	}
	hash = stator_rp_client_hash(cfg, client.family, client.addr, client.port);
	slot = hash % cfg->table_size;

	for (i = 0; i <= STATOR_RP_PROBES; i++) {
		__u32 index = (slot + i) % cfg->table_size;
		__u32 *worker = bpf_map_lookup_elem(&stator_rp_table, &index);
		__u32 id;

		if (!worker || *worker >= cfg->workers)
			continue;
		id = *worker;
		/* fails with -ENOENT when the worker's slot of stator_rp_socks is empty */
		if (bpf_sk_select_reuseport(md, &stator_rp_socks, &id, 0))
			continue;
		if (migrating) {
			stator_rp_count(i == 0 ? STATOR_RP_CNT_MIGRATE_OWN : STATOR_RP_CNT_MIGRATE_PROBE);
			return SK_PASS;
		}
		stator_rp_count(i == 0 ? STATOR_RP_CNT_SELECT_OWN : STATOR_RP_CNT_SELECT_PROBE);
		if (cfg->flags & STATOR_RP_F_CPU) {
			__u32 *cpu = bpf_map_lookup_elem(&stator_rp_cpus, &id);

			stator_rp_count(cpu && *cpu == bpf_get_smp_processor_id()
						? STATOR_RP_CNT_CPU_LOCAL
						: STATOR_RP_CNT_CPU_REMOTE);
		}
		return SK_PASS;
	}
	/* SK_PASS without a selection: the kernel picks by its own hash among live sockets */
	stator_rp_count(migrating ? STATOR_RP_CNT_MIGRATE_KERNEL : STATOR_RP_CNT_SELECT_KERNEL);
	return SK_PASS;
}

char _license[] SEC("license") = STATOR_BPF_LICENSE;
