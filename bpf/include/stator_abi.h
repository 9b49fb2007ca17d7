/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * stator_abi.h — the one definition of everything shared between Stator's BPF programs and
 * user space: map keys and values, limits, flags, counter indices and drop reasons.
 *
 * The Rust mirror lives in crates/stator-abi. Its `generated.rs` is produced from this file by
 * `crates/stator-abi/gen/abi_gen.c` (run `make abi`); a test regenerates it and fails if it is
 * stale, and the hand-written `#[repr(C)]` mirror structs assert their size and field offsets
 * against the generated numbers at compile time. Never keep a second hand-written copy of a value.
 *
 * Layout rules: every struct is naturally aligned with explicit padding fields, so the layout is
 * the same for clang -target bpf and for the host compiler; no bitfields; no pointers; addresses
 * and ports are kept in network byte order (__be32/__be16) exactly as they sit in packets.
 *
 * Generations: all configuration maps are double-buffered. `stator_ctl[0].active_gen` (0 or 1)
 * says which half packets use; a packet reads it once, first, and uses only that half. User space
 * writes the inactive half completely, flips `active_gen`, then waits for an RCU grace period
 * (membarrier(MEMBARRIER_CMD_GLOBAL) calls synchronize_rcu) before it touches the old half again.
 * So no packet ever sees a mix of two snapshots.
 */
#ifndef STATOR_ABI_H
#define STATOR_ABI_H

#include <linux/types.h>

/* ---- limits (compiled into the programs; config validation checks against them) ---------- */

/* VIPs per generation (key space of stator_vips is 2 * STATOR_MAX_VIPS). */
#define STATOR_MAX_VIPS 1024
/* (VIP, backend) pairs ("reals") per generation; a real id indexes half of stator_reals. */
#define STATOR_MAX_REALS 65536
/* Default Maglev slots per generation; the loader may set another size at load time
 * (stator_slots has 2 * slots_per_gen entries). 4 Mi slots = 64 VIPs of the default 65537. */
#define STATOR_DEFAULT_SLOTS_PER_GEN (1u << 22)
/* Largest Maglev table a single VIP may have (the paper's larger size, 655373, fits). */
#define STATOR_MAX_TABLE_SIZE 1048573
/* Default connection-table capacity (entries); the loader may override it. */
#define STATOR_DEFAULT_CT_ENTRIES (1u << 20)
/* Egress interfaces the forwarder may redirect to (stator_tx_ports, a DEVMAP_HASH). */
#define STATOR_MAX_TX_PORTS 64
/* IPv6 extension headers walked before giving up (drop reason IPV6_EXT_LIMIT). */
#define STATOR_MAX_IPV6_EXT_HDRS 4
/* Addresses the backend-side decap program accepts as outer destinations. */
#define STATOR_MAX_DECAP_ADDRS 64
/* Source prefixes the decap program accepts second chances from. */
#define STATOR_MAX_DECAP_PREFIXES 64
/* Stator nodes a fragment may be redirected to (fragments.peers; stator_peers per generation). */
#define STATOR_MAX_PEERS 64
/* Prefix groups (stator_classes entries) per generation. */
#define STATOR_MAX_PREFIXES 256
/* Distinct suffix lengths a class may use per family (the group step's bounded loop). */
#define STATOR_MAX_SUFFIX_LENS 4
/* Default fragment-table capacity (stator_frag entries); the loader may override it. */
#define STATOR_DEFAULT_FRAG_ENTRIES 65536
/* Largest frame the holder takes (stator_hold); longer ones drop FRAG_HOLD. Jumbo frames fit. */
#define STATOR_HOLD_FRAME_MAX 9216
/* Default size of the stator_hold ring buffer (bytes; a power of two); the loader may override. */
#define STATOR_DEFAULT_HOLD_RING (1u << 22)
/* Size of the stator_trace ring buffer (bytes; a power of two). */
#define STATOR_TRACE_RING (1u << 18)

/* stator_progs (PROG_ARRAY): the forwarder's rare paths, tail-called so that the verifier checks
 * them apart from the path of ordinary packets. */
#define STATOR_TAIL_FRAG 0  /* program stator_fragment: a fragment (docs/forwarding.md §9) */
#define STATOR_TAIL_INNER 1 /* program stator_inner: a redirect's inner packet (§10.2) */
#define STATOR_TAIL_FIRST 2 /* program stator_first: a first fragment this node decides (§9.4) */
#define STATOR_TAIL_MAX 3

/* Real id meaning "no backend" in a Maglev slot (an empty table: every backend unusable). */
#define STATOR_NO_REAL 0xffffffffu

/* Default GUE UDP destination port (IANA "gue"). */
#define STATOR_GUE_PORT 6080

/* ---- enums ---------------------------------------------------------------------------------- */

/* Address family tag used in keys and reals (not AF_INET/AF_INET6, to stay one byte). */
enum stator_family {
	STATOR_FAMILY_NONE = 0,
	STATOR_FAMILY_V4 = 4,
	STATOR_FAMILY_V6 = 6,
};

/* Encapsulation toward a backend. */
enum stator_encap {
	STATOR_ENCAP_GRE = 0,  /* outer IP + 4-byte GRE (RFC 2784), protocol = inner ethertype */
	STATOR_ENCAP_IPIP = 1, /* outer IP only: IPv4 proto 4 / IPv6 next-header 41 (or 4/41 mixed) */
	STATOR_ENCAP_GUE = 2,  /* outer IP + UDP + 4-byte GUE variant 0 header */
	STATOR_ENCAP_MAX = 3,
};

/* VIP flags (struct stator_vip.flags). */
#define STATOR_VIP_F_NO_CT (1u << 0)     /* never consult or fill the connection table */
#define STATOR_VIP_F_FRAGMENTS (1u << 1) /* accepts fragments (docs/forwarding.md §9) */
#define STATOR_VIP_F_FAILOVER (1u << 2)  /* stator_failover[vip_id] holds its failover address */

/* Real flags (struct stator_real.flags). */
#define STATOR_REAL_F_USABLE (1u << 0)   /* healthy: new and existing flows may use it */
#define STATOR_REAL_F_DRAINING (1u << 1) /* existing flows keep it; it is absent from the table */
/* only a second chance's previous backend (docs/forwarding.md §12): named by a VIP's previous
 * table, chosen by neither Maglev nor the connection table */
#define STATOR_REAL_F_PREVIOUS (1u << 2)

/* Node flags (struct stator_node_cfg.flags). */
#define STATOR_NODE_F_ICMP_ECHO (1u << 0) /* answer ICMP/ICMPv6 echo requests to VIPs in XDP */
#define STATOR_NODE_F_GROUPS (1u << 1)    /* this generation has prefix groups (stator_classes) */

/* GRE flags word of a redirect between Stator nodes: RFC 1701 recursion control = 1, nothing
 * else (docs/forwarding.md §10). Host order; on the wire the first two bytes are 01 00. */
#define STATOR_GRE_REDIRECT 0x0100

/*
 * Counter indices of the per-CPU array stator_counters. The names (lower case, without the
 * prefix) are metric labels; their numeric values never change once released.
 */
enum stator_counter {
	/* XDP actions returned */
	STATOR_CNT_ACT_ABORTED = 0,
	STATOR_CNT_ACT_DROP = 1,
	STATOR_CNT_ACT_PASS = 2,
	STATOR_CNT_ACT_TX = 3,
	STATOR_CNT_ACT_REDIRECT = 4,
	/* connection table */
	STATOR_CNT_CT_HIT = 5,      /* entry found, backend still usable: reused */
	STATOR_CNT_CT_MISS = 6,     /* no entry (or SYN, or expired): Maglev decided */
	STATOR_CNT_CT_RESELECT = 7, /* entry found but backend unusable: Maglev decided again */
	STATOR_CNT_CT_INSERT = 8,   /* entry written after a Maglev decision */
	STATOR_CNT_CT_EXPIRED = 9,  /* entry found but idle longer than the timeout */
	STATOR_CNT_CT_GUARD = 10,   /* insert skipped: the SYN-flood guard holds */
	/* other events */
	STATOR_CNT_ICMP_ERROR_FWD = 11, /* ICMP frag-needed / PTB forwarded to a flow's backend */
	STATOR_CNT_ICMP_ECHO_REPLY = 12,
	STATOR_CNT_NON_VIP = 13, /* IP traffic not addressed to a VIP (passed) */
	STATOR_CNT_NON_IP = 14,  /* not IPv4/IPv6 (passed) */
	STATOR_CNT_SELF_TEST = 15, /* self-test probes answered (also counted in act_pass) */
	/* fragments, redirects, prefix groups, tracer (docs/forwarding.md §3.1, §9–§11) */
	STATOR_CNT_FRAG_REDIRECT = 16,  /* fragment sent to its 3-tuple owner (GRE, recursion 1) */
	STATOR_CNT_FRAG_RECORD = 17,    /* first fragment's decision written to stator_frag */
	STATOR_CNT_FRAG_HIT = 18,       /* non-first fragment forwarded by its record */
	STATOR_CNT_ACT_HOLD = 19,       /* action: fragment copied to stator_hold, XDP_DROP */
	STATOR_CNT_FAILOVER = 20,       /* packet of a VIP without backend sent to its failover */
	STATOR_CNT_REDIRECT_RX = 21,    /* Stator redirect received and its inner packet decided */
	STATOR_CNT_REDIRECT_AGAIN = 22, /* a redirected packet that would have been redirected again */
	STATOR_CNT_GROUP_MATCH = 23,    /* VIP matched by prefix group and suffix */
	STATOR_CNT_TRACE_REPORT = 24,   /* tracer report written to stator_trace */
	STATOR_CNT_TRACE_LIMITED = 25,  /* traced packet not reported: rate limit */
	STATOR_CNT_TRACE_LOST = 26,     /* traced packet not reported: stator_trace full */
	STATOR_CNT_TRACE_UNAUTH = 27,   /* a mark whose MAC no tracer key verifies: not traced */
	STATOR_CNT_STALE_PASS = 28,     /* VIP packet passed: the controller's heartbeat is stale */
	STATOR_CNT_SC_SENT = 29,        /* sent with a second chance naming the previous backend */
	STATOR_CNT_SC_UNSUPPORTED = 30, /* a second chance was due, but not GUE or not one family */
	STATOR_CNT_MAX = 31,
};

/*
 * Drop reasons (per-CPU array stator_drops). Shared codes that double as metric labels
 * (`stator_drops_total{reason="..."}`); numeric values never change once released.
 */
enum stator_drop_reason {
	STATOR_DROP_NONE = 0,
	STATOR_DROP_MALFORMED_L3 = 1,   /* truncated or invalid IPv4/IPv6 header (bad IHL, length) */
	STATOR_DROP_MALFORMED_L4 = 2,   /* VIP traffic with a truncated TCP/UDP/ICMP header */
	STATOR_DROP_FRAGMENT = 3,       /* fragment to a VIP that does not accept fragments */
	STATOR_DROP_IPV6_EXT_LIMIT = 4, /* more than STATOR_MAX_IPV6_EXT_HDRS extension headers */
	STATOR_DROP_NO_BACKEND = 5,     /* VIP has no usable backend */
	STATOR_DROP_NO_SOURCE = 6,      /* node has no source address of the backend's family */
	STATOR_DROP_FIB = 7,            /* bpf_fib_lookup found no route / forwarding disabled */
	STATOR_DROP_NO_NEIGH = 8,       /* bpf_fib_lookup found a route but no neighbour entry */
	STATOR_DROP_TX_PORT = 9,        /* egress interface not in stator_tx_ports */
	STATOR_DROP_ADJUST = 10,        /* bpf_xdp_adjust_head failed (no headroom) */
	STATOR_DROP_ICMP = 11,          /* ICMP to a VIP that is neither an error we route nor echo */
	STATOR_DROP_BAD_CONFIG = 12,    /* a map lookup that configuration guarantees failed */
	STATOR_DROP_MTU = 13,           /* encapsulated packet larger than the egress MTU */
	STATOR_DROP_XSK_FRAME = 14,     /* AF_XDP plane: VIP packet longer than a UMEM frame holds */
	STATOR_DROP_XSK_SOCKET = 15,    /* AF_XDP plane: no socket on the packet's RX queue */
	STATOR_DROP_FRAG_HOLD = 16,     /* early fragment, but stator_hold is full or it is too long */
	STATOR_DROP_REDIRECT = 17,      /* Stator redirect whose inner packet this node cannot serve */
	STATOR_DROP_MAX = 18,
};

/* ---- maps --------------------------------------------------------------------------------------
 * Names are at most 15 characters (BPF_OBJ_NAME_LEN) and are also the pin names under the pin
 * directory (default /sys/fs/bpf/stator/).
 *
 *  forwarder (stator_fwd.bpf.c; every map pinned by name)
 *   stator_ctl       ARRAY[1]                      struct stator_ctl,      BPF_F_MMAPABLE
 *   stator_beat      ARRAY[1]                      struct stator_beat,     BPF_F_MMAPABLE
 *   stator_cfg       ARRAY[2]                      struct stator_node_cfg, BPF_F_MMAPABLE (per gen)
 *   stator_vtab      ARRAY[2 * STATOR_VTAB_SLOTS]  struct stator_vaddr,    BPF_F_MMAPABLE (per gen)
 *   stator_vips      HASH[2 * STATOR_MAX_VIPS] stator_vip_key → struct stator_vip     (per gen)
 *   stator_reals     ARRAY[2 * STATOR_MAX_REALS]   struct stator_real,     BPF_F_MMAPABLE (per gen)
 *   stator_slots     ARRAY[2 * slots_per_gen]      __u32 real id,          BPF_F_MMAPABLE (per gen)
 *   stator_ct        LRU_PERCPU_HASH (or LRU_HASH, "shared" build) flow_key → ct_entry
 *   stator_ct4       ARRAY[CPUs * B] struct stator_ct4_bucket, BPF_F_MMAPABLE (per-CPU build's
 *                    IPv4 flows; 1 bucket, unused, in the shared build)
 *   stator_flood     PERCPU_ARRAY[1]               struct stator_flood
 *   stator_counters  PERCPU_ARRAY[STATOR_CNT_MAX]  __u64
 *   stator_drops     PERCPU_ARRAY[STATOR_DROP_MAX] __u64
 *   stator_vipstats  PERCPU_ARRAY[STATOR_MAX_VIPS] struct stator_traffic
 *   stator_realstat  PERCPU_ARRAY[STATOR_MAX_REALS] struct stator_traffic
 *   stator_nh        PERCPU_ARRAY[STATOR_MAX_REALS] struct stator_nh (next-hop cache)
 *   stator_tx_ports  DEVMAP_HASH[STATOR_MAX_TX_PORTS] ifindex → struct bpf_devmap_val
 *                    (8 bytes: ifindex + program; aya creates devmaps with the 8-byte value)
 *   stator_peers     ARRAY[2 * STATOR_MAX_PEERS]   struct stator_peer,     BPF_F_MMAPABLE (per gen)
 *   stator_prev      ARRAY[2 * STATOR_MAX_VIPS]    struct stator_prev,     BPF_F_MMAPABLE (per gen)
 *   stator_failover  ARRAY[2 * STATOR_MAX_VIPS]    struct stator_addr,     BPF_F_MMAPABLE (per gen)
 *   stator_classes   LPM_TRIE[2 * STATOR_MAX_PREFIXES] stator_class_key → struct stator_class
 *   stator_sfx       HASH[2 * STATOR_MAX_VIPS]     stator_sfx_key → struct stator_vip (per gen)
 *   stator_frag      LRU_HASH (all CPUs)           stator_frag_key → stator_frag_entry
 *   stator_hold      RINGBUF                       struct stator_hold_hdr + the frame
 *   stator_holdbuf   PERCPU_ARRAY[1]               struct stator_hold_buf (scratch for a copy)
 *   stator_trace     RINGBUF[STATOR_TRACE_RING]    struct stator_trace_event
 *   stator_trl       ARRAY[1]                      struct stator_flood (the report window)
 *   stator_trkeys    ARRAY[1]                      struct stator_trace_keys (the tracer's keys)
 *   stator_progs     PROG_ARRAY[STATOR_TAIL_MAX]   the tail-called programs (set by the loader)
 *   stator_tcx       PERCPU_ARRAY[1]               struct stator_tail (what a tail call needs)
 *  The array maps user space writes (ctl, cfg, vtab, reals, slots) are BPF_F_MMAPABLE: the loader
 *  writes them as memory, and flips stator_ctl.active_gen with one atomic 32-bit store.
 *  bench wrapper (stator_bench.bpf.c; not pinned)
 *   stator_bprogs    PROG_ARRAY[1]                 the program under measurement
 *   stator_bframe    ARRAY[1]                      struct stator_bench_frame
 *   stator_biter     PERCPU_ARRAY[1]               __u64 iteration counter
 *  veth benchmark (stator_veth.bpf.c; not pinned)
 *   stator_vgframe   ARRAY[1]                      struct stator_bench_frame
 *   stator_vgtarget  ARRAY[1]                      __u32 ifindex the generator redirects to
 *   stator_vgiter    PERCPU_ARRAY[1]               __u64 iteration counter
 *   stator_vsinkcnt  PERCPU_ARRAY[STATOR_VSINK_MAX] __u64
 *   stator_vroutetx  DEVMAP_HASH[STATOR_MAX_TX_PORTS] ifindex → struct bpf_devmap_val
 *  AF_XDP redirect (stator_xsk.bpf.c): the forwarder's maps above, pinned by name (stator_ct
 *  and the next-hop cache unused, loaded with one entry), plus, not pinned:
 *   stator_xsks      XSKMAP[STATOR_MAX_TX_PORTS * STATOR_MAX_XSK_QUEUES]
 *                    slot * STATOR_MAX_XSK_QUEUES + RX queue → AF_XDP socket
 *   stator_xskifs    HASH[STATOR_MAX_TX_PORTS]      ifindex → the interface's slot
 *   stator_xskcfg    ARRAY[1]                      struct stator_xsk_cfg
 *  decap (stator_decap.bpf.c; every map pinned by name, default pin directory
 *  /sys/fs/bpf/stator-decap/)
 *   stator_dcfg      ARRAY[1]                      struct stator_decap_cfg
 *   stator_daddrs    HASH[STATOR_MAX_DECAP_ADDRS]  struct stator_decap_addr → __u8 (1)
 *   stator_dscfrom   LPM_TRIE[STATOR_MAX_DECAP_PREFIXES] struct stator_decap_prefix → __u8 (1)
 *   stator_dcnt      PERCPU_ARRAY[STATOR_DECAP_CNT_MAX] __u64
 */

/* ---- map keys and values ---------------------------------------------------------------------- */

/* stator_ctl[0]: which generation packets use, plus data-plane knobs that are not part of a
 * snapshot. */
struct stator_ctl {
	__u32 active_gen;    /* 0 or 1 */
	__u32 fib_cache_us;  /* next-hop cache lifetime (stator_nh, docs/forwarding.md §5.4); the
	                      * loader's default is 1 s; 0 = bpf_fib_lookup for every packet */
	__u64 test_clock_ns; /* if non-zero, the programs use it instead of bpf_ktime_get_coarse_ns()
	                      * (tests only; the loader always writes 0) */
};

/* stator_beat[0]: the controller's heartbeat (docs/forwarding.md §3.2). While stale_after_ns is
 * non-zero and `now` is more than stale_after_ns past refreshed_ns, the tables are not trusted:
 * VIP traffic is passed to the kernel, counted stale_pass. A map of its own (not stator_ctl) so
 * that a node upgraded in place keeps its pinned stator_ctl. */
struct stator_beat {
	__u64 refreshed_ns;   /* `now` (CLOCK_MONOTONIC_COARSE) of the controller's last refresh */
	__u64 stale_after_ns; /* 0 = the check is off (the default) */
};

/* stator_cfg[gen]: node-wide settings that change atomically with the rest of a snapshot. */
struct stator_node_cfg {
	__be32 src_v4;         /* outer source for IPv4 backends; 0 = none */
	__be32 src_v6[4];      /* outer source for IPv6 backends; :: = none */
	__u32 flags;           /* STATOR_NODE_F_* */
	__u64 tcp_timeout_ns;  /* idle timeout of TCP connection-table entries */
	__u64 udp_timeout_ns;  /* idle timeout of UDP connection-table entries */
	__u32 flood_new_per_sec; /* SYN-flood guard: max CT inserts per second per CPU; 0 = no limit */
	__be16 gue_port;       /* GUE UDP destination port (network order) */
	__u8 outer_ttl;        /* TTL / hop limit of the outer header */
	__u8 _pad0;
	__u64 config_generation; /* Snapshot::generation of this half (status and self-test only;
	                          * the forwarding decision never reads it) */
	__u32 vtab_seed;       /* seed of stator_vtab_hash for this half's stator_vtab */
	__u32 trace_per_sec;   /* tracer reports per second for the node; 0 = none */
	__u32 peer_table_off;  /* absolute index of the fragment peers' Maglev table in stator_slots */
	__u32 peer_table_size; /* its size (prime); 0 = fragments are decided where they arrive */
	__u64 frag_timeout_ns; /* a stator_frag record is fresh this long after its first fragment */
};

/*
 * stator_vtab: the VIP-address table — every address that has at least one VIP, per generation.
 * Looked up first, with the destination address only: a miss means "not VIP traffic, XDP_PASS
 * untouched". It is an open-addressing hash table in an ARRAY (no helper call, no hashing of a
 * key struct): generation `gen` owns slots [gen * STATOR_VTAB_SLOTS, (gen + 1) *
 * STATOR_VTAB_SLOTS); an address's home slot is stator_vtab_hash(addr, family, vtab_seed) and it
 * lies within STATOR_VTAB_PROBES slots after it (linear probing, wrapping inside the half). The
 * loader rebuilds a half completely on every commit and picks the seed (stator_cfg[gen]) so that
 * every address fits; a lookup stops at the first empty slot (family NONE).
 *
 * A slot carries its address's VIPs inline when they fit (STATOR_VADDR_F_INLINE, at most
 * STATOR_VADDR_INLINE): the VIP match is then a scan of the slot, with no stator_vips lookup.
 * Otherwise the flags say which stator_vips lookups can succeed, so VIP traffic never pays for a
 * lookup that cannot match. Both are derived from the VIP set: semantics-neutral.
 */
#define STATOR_VTAB_SLOTS 4096 /* per generation: a power of two, >= 4 * STATOR_MAX_VIPS */
#define STATOR_VTAB_PROBES 4   /* slots a lookup examines at most */
#define STATOR_VADDR_INLINE 4  /* VIPs a slot carries inline */
/* Multiplier of stator_vtab_hash (2^32 / golden ratio). */
#define STATOR_VTAB_HASH_MUL 0x9e3779b1u

#define STATOR_VADDR_F_TCP_PORTS (1u << 0) /* some TCP VIP on this address has a port */
#define STATOR_VADDR_F_TCP_ANY (1u << 1)   /* a TCP VIP on this address has port 0 (any) */
#define STATOR_VADDR_F_UDP_PORTS (1u << 2)
#define STATOR_VADDR_F_UDP_ANY (1u << 3)
#define STATOR_VADDR_F_INLINE (1u << 4)    /* vips[] holds every VIP of this address */
#define STATOR_VADDR_F_FRAGS (1u << 5)     /* a VIP on this address accepts fragments */
#define STATOR_VADDR_F_NODE (1u << 6)      /* the node's own address (receives redirects) */

/* The home slot (within a half) of an address: a multiplicative hash of its 32-bit words as
 * they sit in memory (IPv4: addr[0] only). User space computes the same on the same host. */
static inline __attribute__((always_inline)) __u32
stator_vtab_hash(const __be32 *addr, __u8 family, __u32 seed)
{
	__u32 h = seed ^ (__u32)addr[0];

	if (family == STATOR_FAMILY_V6) {
		h = h * STATOR_VTAB_HASH_MUL ^ (__u32)addr[1];
		h = h * STATOR_VTAB_HASH_MUL ^ (__u32)addr[2];
		h = h * STATOR_VTAB_HASH_MUL ^ (__u32)addr[3];
	}
	return (h * STATOR_VTAB_HASH_MUL) >> 20; /* 12 bits: STATOR_VTAB_SLOTS */
}

/* stator_vips value (also carried inline by stator_vtab slots). */
struct stator_vip {
	__u32 vip_id;     /* stable id (< STATOR_MAX_VIPS): index into stator_vip_stats */
	__u32 flags;      /* STATOR_VIP_F_* */
	__u32 table_off;  /* absolute index of slot 0 of this VIP's Maglev table in stator_slots */
	__u32 table_size; /* M (prime); 0 = no table (drop NO_BACKEND) */
};

/* A VIP carried inline by a stator_vtab slot: its port (0 = any) and protocol, and its value. */
struct stator_vaddr_vip {
	__be16 port;
	__u8 proto; /* IPPROTO_TCP / IPPROTO_UDP; 0 = unused entry */
	__u8 _pad0;
	struct stator_vip vip;
};

/* stator_vtab[gen * STATOR_VTAB_SLOTS + i]: one VIP address, or empty (family NONE). */
struct stator_vaddr {
	__be32 addr[4]; /* IPv4 in addr[0], rest zero */
	__u8 family;    /* STATOR_FAMILY_V4 / V6; NONE = empty slot */
	__u8 _pad0[3];
	__u32 flags;    /* STATOR_VADDR_F_* */
	struct stator_vaddr_vip vips[STATOR_VADDR_INLINE];
};

/* stator_vips key: exact (address, port, protocol) or the wildcard (address, 0, protocol).
 * stator_vips holds every VIP, also those carried inline, and is read back by user space; the
 * program looks in it only for addresses whose VIPs do not fit a stator_vtab slot. */
struct stator_vip_key {
	__be32 addr[4]; /* IPv4 in addr[0], rest zero */
	__be16 port;    /* 0 = any port */
	__u8 proto;     /* IPPROTO_TCP / IPPROTO_UDP */
	__u8 family;    /* STATOR_FAMILY_V4 / V6 */
	__u8 generation; /* generation this entry belongs to (0 or 1) */
	__u8 _pad0[3];
};


/* stator_reals[gen * STATOR_MAX_REALS + real_id]: one (VIP, backend) pair. */
struct stator_real {
	__be32 addr[4]; /* backend address; IPv4 in addr[0] */
	__u32 vip_id;   /* the VIP this real belongs to (a conntrack entry is valid only for it) */
	__u16 flags;    /* STATOR_REAL_F_*; 0 = slot unused */
	__u8 family;    /* STATOR_FAMILY_V4 / V6 */
	__u8 encap;     /* enum stator_encap */
};

/* stator_slots[i]: a real id, or STATOR_NO_REAL. Tables live at stator_vip.table_off. The
 * fragment peers' table (stator_node_cfg.peer_table_off) holds peer indexes instead. */

/* An address with its family (stator_failover[gen * STATOR_MAX_VIPS + vip_id]). */
struct stator_addr {
	__be32 addr[4]; /* IPv4 in addr[0], rest zero */
	__u8 family;    /* STATOR_FAMILY_V4 / V6; NONE = unset */
	__u8 _pad0[3];
};

/* stator_prev[gen * STATOR_MAX_VIPS + vip_id]: the VIP's previous Maglev table, kept for a
 * second chance (docs/forwarding.md §12): table_size slots from table_off in stator_slots, in
 * the same generation's half; table_size 0 = none. */
struct stator_prev {
	__u32 table_off;
	__u32 table_size;
};

/* stator_peers[gen * STATOR_MAX_PEERS + i]: a Stator node of fragments.peers. */
#define STATOR_PEER_F_SELF (1u << 0) /* this node */
struct stator_peer {
	__be32 addr[4];
	__u8 family;
	__u8 flags; /* STATOR_PEER_F_* */
	__u8 _pad0[2];
};

/* stator_classes key (LPM trie): prefixlen = 32 + the prefix length; generation, family and the
 * two zero bytes are matched as the first 32 bits. */
struct stator_class_key {
	__u32 prefixlen;
	__u8 generation;
	__u8 family;
	__u8 _pad0[2];
	__be32 addr[4];
};

/* stator_classes value: a class of prefix groups (docs/forwarding.md §3.1). */
#define STATOR_CLASS_F_FRAGS (1u << 0) /* a VIP of the class accepts fragments */
struct stator_class {
	__u16 class_id;
	__u8 nlens; /* suffix lengths in lens[], at most STATOR_MAX_SUFFIX_LENS */
	__u8 flags; /* STATOR_CLASS_F_* */
	__u8 lens[STATOR_MAX_SUFFIX_LENS]; /* the class's suffix lengths of this family, longest first */
};

/* stator_sfx key: a group VIP's suffix entry. */
struct stator_sfx_key {
	__be32 suffix[4]; /* the address's low `bits` bits, the rest zero (IPv4 in suffix[0]) */
	__be16 port;      /* 0 = any port */
	__u8 proto;
	__u8 family;
	__u16 class_id;
	__u8 bits;        /* suffix length */
	__u8 generation;
};

/* stator_frag key: one datagram (docs/forwarding.md §9). */
struct stator_frag_key {
	__be32 src[4];
	__be32 dst[4];
	__be32 id;     /* IPv4: the 16-bit identification zero-extended (00 00 hi lo); IPv6: as sent */
	__u8 proto;    /* IPv4 protocol / the IPv6 fragment header's next header */
	__u8 family;
	__u8 _pad0[2];
};

/* stator_frag value: what the datagram's first fragment decided. */
struct stator_frag_entry {
	__u32 real_id; /* STATOR_NO_REAL when refused */
	__u32 vip_id;
	__u64 created_ns; /* `now` of the first fragment (never 0) */
	__u32 reason;     /* 0: forward to real_id; else the drop reason for every other fragment */
	__u32 hash;       /* the first fragment's flow hash: the others get the same outer entropy */
};

/* A record of stator_hold: a fragment that arrived before its first, as received. */
struct stator_hold_hdr {
	struct stator_frag_key key;
	__u32 ingress_ifindex;
	__u32 len; /* bytes of frame that follow this header */
	__u64 now_ns;
};

/* stator_holdbuf[0] (per CPU): where a held frame is assembled before bpf_ringbuf_output. */
struct stator_hold_buf {
	struct stator_hold_hdr hdr;
	__u8 frame[STATOR_HOLD_FRAME_MAX];
};

/* Connection-table key: the flow as the client sent it (for ICMP errors: the inner flow,
 * reversed, so it is the same key as the flow's own packets). */
struct stator_flow_key {
	__be32 src[4];
	__be32 dst[4];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 family;
	__u8 _pad0[2];
};

/* Connection-table value. last_seen_ns is never 0 in an entry the program wrote (time 0 is
 * never "now"); a zero value means "no entry on this CPU": LRU_PERCPU_HASH shares keys between
 * CPUs and zero-fills the other CPUs' values when one CPU inserts, so a zero value is treated
 * exactly like a missing key. */
struct stator_ct_entry {
	__u32 real_id;
	__u32 hash;         /* the key's flow hash (flow_hash.h), stored by the insert so a hit
			     * does not recompute it; 0 = not stored (an entry written by an older
			     * build): the program computes it */
	__u64 last_seen_ns; /* refreshed on use when older than STATOR_CT_REFRESH_NS */
};

/*
 * stator_ct4 (per-CPU build): the IPv4 connection table of Stator's own (docs/xdp.md, round five).
 * A BPF_F_MMAPABLE ARRAY of buckets, partitioned by CPU: the flow whose hash is h, seen on CPU c,
 * lives in bucket c * B + (h & (B - 1)), B = stator_ct4_buckets (a power of two, the loader's
 * choice, written into the program's read-only data). A bucket is STATOR_CT4_WAYS entries in two
 * adjacent cache lines (128 bytes; the array's data is page aligned). An entry with
 * last_seen_ns 0 is free. An insert takes the flow's own entry if the bucket holds it, else a
 * free one, else an expired one, else the least recently seen: the paper's fixed-size
 * per-thread table (§3.3), with 4-way buckets so that a flow is lost to a collision only when
 * 4 others of its bucket are more recent. IPv6 flows, and every flow of the shared build, stay in
 * stator_ct.
 */
#define STATOR_CT4_WAYS 4

struct stator_ct4_entry {
	__be32 src;
	__be32 dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 _pad0[3];      /* zero: the first 16 bytes compare as two 64-bit words */
	__u32 real_id;
	__u32 hash;         /* the flow hash (flow_hash.h): the bucket's and the encapsulation's */
	__u64 last_seen_ns; /* 0 = free; refreshed on use when older than STATOR_CT_REFRESH_NS */
};

struct stator_ct4_bucket {
	struct stator_ct4_entry e[STATOR_CT4_WAYS];
};

/* Hits refresh last_seen only when it is this stale, to avoid a write per packet. */
#define STATOR_CT_REFRESH_NS 1000000000ull

/*
 * stator_nh[real_id] (per CPU): a successful bpf_fib_lookup for a real, reused for
 * stator_ctl.fib_cache_us when the same outer destination arrives on the same ingress interface
 * and is no longer than an outer length the FIB already accepted (so the MTU is still checked).
 * Failures (no route, no neighbour, MTU) are never cached. On by default (the loader sets
 * fib_cache_us to 1 s): a changed route or neighbour applies within that lifetime.
 */
struct stator_nh {
	__u64 stamp_ns;     /* when the FIB answered; 0 = empty */
	__be32 dst[4];      /* outer destination it answered for */
	__u32 in_ifindex;   /* ingress interface it answered for */
	__u32 out_ifindex;  /* its egress interface */
	__u16 ok_len;       /* largest outer IP length it accepted */
	__u8 family;        /* STATOR_FAMILY_V4 / V6 of dst */
	__u8 _pad0;
	__u8 dmac[6];
	__u8 smac[6];
};

/* stator_flood[0] (per CPU): the SYN-flood guard's one-second window. */
struct stator_flood {
	__u64 window_start_ns;
	__u64 inserts;
};

/* stator_vip_stats[vip_id], stator_real_stats[real_id] (per CPU). */
struct stator_traffic {
	__u64 packets;
	__u64 bytes; /* bytes of the frame as received */
};

/* stator_tcx[0] (per CPU): where the packet being tail-called to stator_fragment, stator_first or stator_inner
 * starts, written just before the call (the callee parses it again from there). */
struct stator_tail {
	__u32 l3;         /* offset of its IP header */
	__be16 ethertype; /* ETH_P_IP / ETH_P_IPV6, network order */
	__u8 redirected;  /* it is a redirect's inner packet */
	__u8 _pad0;
};

/* ---- packet tracer (docs/forwarding.md §11) ------------------------------------------------
 * A traced packet carries a struct stator_trace_mark at the start of its TCP (no options) or UDP
 * payload; the forwarder writes a struct stator_trace_event to stator_trace for it, and
 * `stator run` sends the receiver a UDP report. */
/* "STATORT1", read as a host-order __u64 on a little-endian host. */
#define STATOR_TRACE_MAGIC 0x3154524f54415453ull

struct stator_trace_mark {
	__u64 magic;           /* STATOR_TRACE_MAGIC */
	__be32 receiver[4];    /* where reports go (IPv4 in receiver[0]) */
	__be16 receiver_port;
	__u8 receiver_family;  /* STATOR_FAMILY_V4 / V6 */
	__u8 _pad0;
	__u32 trace_id;        /* the sender's, echoed in every report */
	__u64 mac;             /* SipHash-2-4 of docs/forwarding.md §11.1's message, host order */
};

/* Tracer keys a node holds at once (the current one and the one being rotated out). */
#define STATOR_TRACE_KEYS 2

/* stator_trkeys[0]: the keys a mark's MAC is checked with (docs/forwarding.md §11.1); written
 * by user space whenever the configuration's key file is read. count = 0: no mark verifies. */
struct stator_trace_keys {
	__u64 k[STATOR_TRACE_KEYS][2]; /* each key's k0, k1: its 16 bytes read little-endian */
	__u32 count;
	__u32 _pad0;
};

/* What the node did with a traced packet. */
enum stator_trace_kind {
	STATOR_TRACE_FORWARD = 1,       /* encapsulated toward real_id (cause, slot) */
	STATOR_TRACE_FRAG_REDIRECT = 2, /* sent to the fragment's 3-tuple owner (target) */
	STATOR_TRACE_FAILOVER = 3,      /* sent to the VIP's failover address (target) */
	STATOR_TRACE_DROP = 4,          /* dropped in selection (reason) */
};

/* How the real was chosen (stator_trace_event.cause). */
enum stator_trace_cause {
	STATOR_TRACE_C_NONE = 0,
	STATOR_TRACE_C_NO_CT = 1,
	STATOR_TRACE_C_SYN = 2,
	STATOR_TRACE_C_CT_HIT = 3,
	STATOR_TRACE_C_CT_MISS = 4,
	STATOR_TRACE_C_CT_EXPIRED = 5,
	STATOR_TRACE_C_CT_RESELECT = 6,
};

#define STATOR_TRACE_F_FRAGMENT (1u << 0) /* a first fragment; its decision was recorded */
#define STATOR_NO_SLOT 0xffffffffu        /* stator_trace_event.slot: Maglev did not decide */
#define STATOR_NO_VIP 0xffffffffu         /* stator_trace_event.vip_id: no VIP matched yet */

struct stator_trace_event {
	__be32 receiver[4];
	__be16 receiver_port;
	__u8 receiver_family;
	__u8 hop;          /* 1; 2 for the inner packet of a redirect */
	__u32 trace_id;
	__u8 kind;         /* enum stator_trace_kind */
	__u8 cause;        /* enum stator_trace_cause (FORWARD) */
	__u8 reason;       /* drop reason (DROP) */
	__u8 flags;        /* STATOR_TRACE_F_* */
	__u32 vip_id;      /* STATOR_NO_VIP when none */
	__u32 real_id;     /* STATOR_NO_REAL when none */
	__u32 slot;        /* Maglev slot, or STATOR_NO_SLOT */
	__be32 target[4];  /* redirect target (FRAG_REDIRECT, FAILOVER) */
	__u8 target_family;
	__u8 _pad0;
	__u16 ip_len;      /* the traced IP packet's length: no report may be longer */
	__u8 _pad1[4];
	struct stator_flow_key flow; /* as decided on (ports 0 for a fragment redirect) */
	__u64 now_ns;
};

/* ---- self-test probe ----------------------------------------------------------------------
 * A frame of ethertype STATOR_PROBE_ETHERTYPE (IEEE 802 "local experimental 1", never routed)
 * whose payload starts with STATOR_PROBE_MAGIC is a self-test probe (docs/forwarding.md §1.4):
 * the forwarder fills in the answer fields from the active generation and passes the frame, so a
 * BPF_PROG_TEST_RUN of a probe proves the program, its maps and the active generation answer,
 * without touching any traffic counter (a probe counts in self_test and act_pass only). */
#define STATOR_PROBE_ETHERTYPE 0x88B5
/* The first 8 payload bytes, "STATORP1", read as a host-order __u64 on a little-endian host. */
#define STATOR_PROBE_MAGIC 0x3150524f54415453ull

#define STATOR_PROBE_F_CFG (1u << 0)   /* stator_cfg[gen] is programmed (outer_ttl != 0) */
#define STATOR_PROBE_F_VADDR (1u << 1) /* probe.addr was found in stator_vtab[gen] */

struct stator_probe {
	__u64 magic;             /* STATOR_PROBE_MAGIC (written by user space) */
	__u32 nonce;             /* user space's; the answer echoes it in `answer` */
	__u32 answer;            /* written: ~nonce */
	__be32 addr[4];          /* an address to look up in stator_vtab (user space) */
	__u8 family;             /* its family; STATOR_FAMILY_NONE = no lookup */
	__u8 _pad0[3];
	__u32 active_gen;        /* written: stator_ctl[0].active_gen */
	__u32 result;            /* written: STATOR_PROBE_F_* */
	__u32 vaddr_flags;       /* written: stator_vaddr.flags when found */
	__u64 config_generation; /* written: stator_cfg[gen].config_generation */
};

/* ---- the AF_XDP plane (bpf/stator_xsk.bpf.c, crates/stator-afxdp, docs/afxdp.md) -----------
 * stator_xsk runs the forwarder's own parse and VIP match (parse.h, vip.h) and redirects what
 * the forwarder would decide — VIP traffic and malformed VIP traffic alike — to the AF_XDP
 * socket of the packet's RX queue; what it would pass (not IP, not a VIP, ICMP echo with echo
 * off, neighbour discovery) it passes, counted exactly as the forwarder counts it. */
#define STATOR_MAX_XSK_QUEUES 64

/* stator_xskcfg[0]. */
struct stator_xsk_cfg {
	__u32 max_len; /* longest frame a UMEM frame holds; longer VIP packets: drop XSK_FRAME */
	__u32 _pad0;
};

/* stator_fibq: BPF_PROG_TEST_RUN over STATOR_FIBQ_OFF zero bytes followed by this struct asks
 * bpf_fib_lookup exactly what the forwarder asks (encap.h) and writes the answer into it: the
 * AF_XDP plane's next hops are the kernel's own. */
#define STATOR_FIBQ_OFF 14

struct stator_fib_query {
	__be32 src[4];    /* in: outer source (IPv4 in src[0]) */
	__be32 dst[4];    /* in: outer destination (the backend) */
	__u32 ifindex;    /* in: ingress interface; out: egress interface */
	__u16 tot_len;    /* in: outer IP length; out, on FRAG_NEEDED: the MTU */
	__u8 family;      /* in: STATOR_FAMILY_V4 / V6 */
	__u8 l4_protocol; /* in: the outer protocol (47, 4, 41, 17) */
	__s32 rc;         /* out: BPF_FIB_LKUP_RET_* (or -1: not answered) */
	__u8 smac[6];     /* out */
	__u8 dmac[6];     /* out */
};

/* ---- benchmark wrapper -------------------------------------------------------------------
 * stator_bench.bpf.c restores this frame before every iteration of a kernel-repeat test run,
 * optionally varies one 32-bit word of it (a flow per iteration), and tail-calls the program
 * under measurement. */
#define STATOR_BENCH_FRAME_MAX 256

struct stator_bench_frame {
	__u32 len;      /* bytes of `bytes` that form the frame (1..STATOR_BENCH_FRAME_MAX) */
	__u32 nflows;   /* > 1: add (iteration % nflows) to the big-endian word at flow_off */
	__u32 flow_off; /* offset of that word; flow_off + 4 <= len */
	__u32 _pad0;
	__u8 bytes[STATOR_BENCH_FRAME_MAX];
};

/* ---- veth benchmark (bpf/stator_veth.bpf.c, `stator bench veth`) --------------------------------
 * stator_vgen (a BPF_PROG_TEST_RUN live-frames generator) restores a struct stator_bench_frame
 * from stator_vgframe before every frame, varies one word of it, and redirects it to the
 * interface in stator_vgtarget[0]; stator_vsink counts what arrives (stator_vsinkcnt, per CPU)
 * and drops it; stator_vroute is the "forward without load balancing" baseline (FIB lookup,
 * TTL, MACs, redirect through stator_vroutetx). None of their maps is pinned. */
enum stator_vsink_counter {
	STATOR_VSINK_PACKETS = 0,
	STATOR_VSINK_BYTES = 1,
	STATOR_VSINK_TUNNELLED = 2, /* IPv4 protocol 47, 4, 41 or 17: what the forwarder sends */
	STATOR_VSINK_MAX = 3,
};

/* ---- backend side: the decap program (bpf/stator_decap.bpf.c, docs/decap.md) ------------------ */

/* stator_daddrs key: an outer destination address the decap program accepts. Consulted only
 * when stator_dcfg[0].flags has STATOR_DECAP_F_ADDRS; without it any destination is accepted. */
struct stator_decap_addr {
	__be32 addr[4]; /* IPv4 in addr[0], rest zero */
	__u8 family;    /* STATOR_FAMILY_V4 / V6 */
	__u8 _pad0[3];
};

#define STATOR_DECAP_F_ADDRS (1u << 0) /* the outer destination must be in stator_daddrs */
/* second chance (docs/decap.md §7): a GUE packet naming a previous backend, from a source in
 * stator_dscfrom, is passed on to that backend when no socket here owns its connection */
#define STATOR_DECAP_F_SECOND_CHANCE (1u << 1)

/* stator_dcfg[0]. */
struct stator_decap_cfg {
	__be16 gue_port; /* GUE UDP destination port (network order); 0 = GUE not decapsulated */
	__u16 flags;     /* STATOR_DECAP_F_* */
	__be32 src_v4;   /* outer source of a packet passed on over IPv4; 0 = none */
	__be32 src_v6[4]; /* outer source of a packet passed on over IPv6; all zero = none */
};

/* stator_dscfrom key (LPM trie): an outer source allowed to ask for a second chance.
 * prefixlen = 32 + the prefix length; family and the three zero bytes are matched as the first
 * 32 bits. Value: __u8 1. */
struct stator_decap_prefix {
	__u32 prefixlen;
	__u8 family; /* STATOR_FAMILY_V4 / V6 */
	__u8 _pad0[3];
	__be32 addr[4]; /* IPv4 in addr[0] */
};

/* The GUE private data of a second chance (docs/forwarding.md §12.3): magic "SC", the
 * previous backend's family, the hop (0 from a node, 1 once passed on by a backend), the
 * address (4 or 16 bytes). GUE Hlen is 2 (IPv4) or 5 (IPv6). */
#define STATOR_SC_MAGIC 0x5343
#define STATOR_SC_HLEN_V4 2
#define STATOR_SC_HLEN_V6 5

/*
 * Counter indices of the per-CPU array stator_dcnt (names without the prefix are metric labels;
 * values never change once released). Every packet ends in exactly one *outcome* (0..5); every
 * rejected packet is also counted in exactly one *reason* (6..11).
 */
enum stator_decap_counter {
	/* outcomes */
	STATOR_DECAP_CNT_GRE = 0,      /* GRE decapsulated, inner packet passed to the stack */
	STATOR_DECAP_CNT_IPIP = 1,     /* IPIP / IP6IP6 / 4in6 / 6in4 decapsulated */
	STATOR_DECAP_CNT_GUE = 2,      /* GUE (variant 0 or 1) decapsulated */
	STATOR_DECAP_CNT_PASS = 3,     /* not a tunnel packet: passed untouched */
	STATOR_DECAP_CNT_NOT_OURS = 4, /* tunnel packet to an address not in stator_daddrs: passed */
	STATOR_DECAP_CNT_REJECTED = 5, /* tunnel packet for us that cannot be delivered: dropped */
	/* reasons of `rejected` */
	STATOR_DECAP_CNT_BAD_OUTER = 6, /* outer IP / GRE / UDP header truncated or invalid */
	STATOR_DECAP_CNT_FRAGMENT = 7,  /* outer IPv4 fragment (XDP does not reassemble) */
	STATOR_DECAP_CNT_GRE_UNSUPPORTED = 8, /* GRE version != 0, routing bit, payload not IP */
	STATOR_DECAP_CNT_GUE_UNSUPPORTED = 9, /* GUE control message, version 2/3, payload not IP */
	STATOR_DECAP_CNT_BAD_INNER = 10, /* inner packet not a well-formed header of its family */
	STATOR_DECAP_CNT_ADJUST = 11,    /* bpf_xdp_adjust_head failed */
	/* second chance (docs/decap.md §7) */
	STATOR_DECAP_CNT_SC_FORWARDED = 12, /* outcome: passed on to the previous backend */
	STATOR_DECAP_CNT_SC_FIB = 13,       /* reason: no route or neighbour to the previous backend */
	STATOR_DECAP_CNT_SC_MTU = 14,       /* reason: too big for the way to the previous backend */
	/* details of `gue` (neither outcomes nor reasons): what a second chance met here */
	STATOR_DECAP_CNT_SC_LOCAL = 15,     /* hop 0, a socket here owns it: delivered here */
	STATOR_DECAP_CNT_SC_DELIVERED = 16, /* hop 1, a socket here owns it: delivered here */
	STATOR_DECAP_CNT_SC_ORPHAN = 17,    /* hop 1, no socket owns it: delivered (to be reset) */
	STATOR_DECAP_CNT_SC_NOT_TCP = 18,   /* inner not a TCP segment without SYN: delivered */
	STATOR_DECAP_CNT_SC_REFUSED = 19,   /* second chance off, or source not allowed: delivered */
	STATOR_DECAP_CNT_SC_NO_SOURCE = 20, /* no source address of the family: delivered */
	STATOR_DECAP_CNT_SC_MALFORMED = 21, /* "SC" with a bad family or length: delivered */
	STATOR_DECAP_CNT_MAX = 22,
};

/* The first reason index: counters below it are outcomes (and so is SC_FORWARDED); SC_FIB and
 * SC_MTU are reasons too; from STATOR_DECAP_CNT_FIRST_DETAIL on, details. */
#define STATOR_DECAP_CNT_FIRST_REASON STATOR_DECAP_CNT_BAD_OUTER
#define STATOR_DECAP_CNT_FIRST_DETAIL STATOR_DECAP_CNT_SC_LOCAL

/* ---- proxy tier: client steering and receive steering -------------------------------------
 * In their own header (the same ABI, generated into stator-abi the same way). */
#include "stator_abi_proxy.h"

#endif /* STATOR_ABI_H */
