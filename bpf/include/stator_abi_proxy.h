/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * stator_abi_proxy.h — the proxy tier's part of stator_abi.h (included by it; include
 * stator_abi.h, not this file): the reuseport steering program's settings and counters, and
 * receive steering's (steering = "cpu"). The same rules as stator_abi.h: naturally aligned
 * structs with explicit padding, mirrored and checked by crates/stator-abi (`make abi`).
 */
#ifndef STATOR_ABI_PROXY_H
#define STATOR_ABI_PROXY_H

#include <linux/types.h>

/* ---- proxy tier: client -> worker steering (bpf/stator_reuseport.bpf.c, docs/steering.md) -----
 * An SK_REUSEPORT program attached to one SO_REUSEPORT group (one listening address) picks the
 * worker socket from a Maglev table over worker ids, keyed by the Toeplitz hash of the client's
 * address (and port, with STATOR_RP_F_PORT). Maps (not pinned; the proxy's process owns them):
 *   stator_rp_cfg    ARRAY[1]                       struct stator_rp_cfg (written before attach)
 *   stator_rp_socks  REUSEPORT_SOCKARRAY[workers]   worker id -> socket (a 4-byte fd in)
 *   stator_rp_table  ARRAY[table_size]              __u32 worker id, STATOR_RP_NO_WORKER = none
 *   stator_rp_cnt    PERCPU_ARRAY[STATOR_RP_CNT_MAX] __u64
 *   stator_rp_cpus   ARRAY[workers]                 __u32 CPU of worker i (STATOR_RP_F_CPU only)
 * The loader sets the sizes of stator_rp_socks and stator_rp_table at load time. */

/* Worker sockets one group may hold (worker ids are 0 .. workers - 1 < this). */
#define STATOR_RP_MAX_WORKERS 1024
/* Largest steering table (the largest prime below it is accepted). */
#define STATOR_RP_MAX_TABLE_SIZE 1048576
/* Slots tried after the client's own when its worker has no socket, before the kernel's own
 * choice decides: slot + 1, slot + 2, ... (mod table_size). */
#define STATOR_RP_PROBES 8
/* A table slot that names no worker (no live workers at all). */
#define STATOR_RP_NO_WORKER 0xffffffffu
/* Length of the Toeplitz (RSS) key, as NICs use it: 320 bits. */
#define STATOR_RSS_KEY_LEN 40

#define STATOR_RP_F_PORT (1u << 0) /* hash the client's source port after its address */
/* steering = "cpu": worker i is pinned to CPU stator_rp_cpus[i], and a receive-steering program
 * (stator_rss) sends each client's packets to the CPU of the worker its slot names; a select run
 * whose worker took the socket also counts whether it ran on that CPU (cpu_local / cpu_remote). */
#define STATOR_RP_F_CPU (1u << 1)

/* stator_rp_cfg[0]. The hash input is the client's address as it sits in the packet (4 bytes for
 * IPv4, also for IPv4 clients of a dual-stack IPv6 socket; 16 for IPv6), followed by its port
 * (2 bytes, network order) when flags has STATOR_RP_F_PORT. table_size = 0: not configured yet,
 * every socket is the kernel's choice. */
struct stator_rp_cfg {
	__u8 key[STATOR_RSS_KEY_LEN]; /* Toeplitz key, most significant bit first */
	__u32 table_size;             /* M, prime, <= max_entries of stator_rp_table */
	__u32 flags;                  /* STATOR_RP_F_* */
	__u32 workers;                /* max_entries of stator_rp_socks: ids at or above are empty */
	__u32 _pad0;
};

/*
 * Counter indices of stator_rp_cnt (names without the prefix are metric labels; values never
 * change once released). Every program run ends in exactly one of them. "select" runs choose
 * the socket for a new connection (TCP SYN) or a datagram (UDP); "migrate" runs re-home a
 * request of a closing TCP listener (SK_REUSEPORT_SELECT_OR_MIGRATE).
 */
enum stator_rp_counter {
	STATOR_RP_CNT_SELECT_OWN = 0,      /* the worker of the client's own slot took it */
	STATOR_RP_CNT_SELECT_PROBE = 1,    /* own worker had no socket: a later slot's worker took it */
	STATOR_RP_CNT_SELECT_KERNEL = 2,   /* no socket in the probed slots: the kernel's hash chose */
	STATOR_RP_CNT_MIGRATE_OWN = 3,     /* migrated to the worker of the client's own slot */
	STATOR_RP_CNT_MIGRATE_PROBE = 4,   /* migrated to a later slot's worker */
	STATOR_RP_CNT_MIGRATE_KERNEL = 5,  /* no socket in the probed slots: the kernel's hash chose */
	STATOR_RP_CNT_NO_ADDRESS = 6,      /* client address unreadable (not IPv4/IPv6): kernel's choice */
	STATOR_RP_CNT_NOT_CONFIGURED = 7,  /* stator_rp_cfg not written yet: kernel's choice */
	/* Not outcomes: with STATOR_RP_F_CPU, a select run that ended in select_own or select_probe
	 * is counted in one of these as well. */
	STATOR_RP_CNT_CPU_LOCAL = 8,       /* it ran on the CPU its worker is pinned to */
	STATOR_RP_CNT_CPU_REMOTE = 9,      /* it ran on another CPU (packets not steered there) */
	STATOR_RP_CNT_MAX = 10,
};

/* Counters below it are outcomes: every run ends in exactly one of them. */
#define STATOR_RP_CNT_OUTCOMES 8

/* ---- receive steering: a client's packets to its worker's CPU (bpf/stator_rss.bpf.c) -------
 * The NIC's receive-side scaling done in software for steering = "cpu" (docs/steering.md §8):
 * an XDP program on the interfaces clients arrive on hashes the source address of each packet
 * to a listening port (Toeplitz, the key and table of the listeners' reuseport programs) and
 * sends it through a CPUMAP to the CPU of the worker that owns the client, so the packet is
 * received, queued and served on one CPU. Maps (not pinned; the node's process owns them):
 *   stator_rss_cfg     ARRAY[1]                 struct stator_rp_cfg (the same key, table size)
 *   stator_rss_table   ARRAY[table_size]        __u32 worker id (STATOR_RP_NO_WORKER = none)
 *   stator_rss_cpus    ARRAY[STATOR_RSS_MAX_CPUS] __u32 CPU of worker i
 *   stator_rss_cpumap  CPUMAP[STATOR_RSS_MAX_CPUS] struct bpf_cpumap_val, index = CPU
 *   stator_rss_ports   HASH[STATOR_RSS_MAX_PORTS] __u32 (protocol << 16 | port) -> __u8 1
 *   stator_rss_cnt     PERCPU_ARRAY[STATOR_RSS_CNT_MAX] __u64 */
#define STATOR_RSS_MAX_CPUS 256
#define STATOR_RSS_MAX_PORTS 256

/* Counter indices of stator_rss_cnt: every run of the program ends in exactly one. */
enum stator_rss_counter {
	STATOR_RSS_CNT_LOCAL = 0,       /* a listener's packet already on its worker's CPU: passed */
	STATOR_RSS_CNT_REDIRECTED = 1,  /* sent to its worker's CPU through the CPUMAP */
	STATOR_RSS_CNT_NO_CPU = 2,      /* its slot names no worker, or the CPU has no CPUMAP entry */
	STATOR_RSS_CNT_OTHER = 3,       /* not IPv4/IPv6 TCP/UDP to a steered port: passed */
	STATOR_RSS_CNT_MALFORMED = 4,   /* headers cut short: passed for the kernel to judge */
	STATOR_RSS_CNT_MAX = 5,
};

#endif /* STATOR_ABI_PROXY_H */
