/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * conntrack.h — backend selection: the connection table, its idle timeouts and the SYN-flood
 * guard (docs/forwarding.md §4, Maglev §3.3).
 *
 * The table maps the 5-tuple to a real id, the flow hash and a last-seen time. A hit whose
 * real is still usable (or draining) for the same VIP is reused; anything else asks Maglev again
 * and, unless the flood guard holds, records the answer. SYNs always follow the current Maglev
 * table. Hits write last_seen only when it is STATOR_CT_REFRESH_NS stale, so a busy flow costs
 * no write per packet, and take the flow hash from the entry, so a hit never hashes the 5-tuple
 * (for IPv6 that is jhash2 over 9 words; the outer flow label and GUE source port need it).
 *
 * Two tables. The per-CPU build keeps IPv4 flows in stator_ct4, a table of Stator's own
 * (stator_abi.h): the bucket is found by one inlined array access (no hash-map helper, no 40-byte
 * key to jhash and compare), an insert is a store into a line the lookup has just read (no LRU
 * lists, no allocation). IPv6 flows, and every flow of the shared build, stay in the kernel's
 * LRU table stator_ct. Both follow the same rules.
 */
#ifndef STATOR_CONNTRACK_H
#define STATOR_CONNTRACK_H

#include "clock.h"
#include "maglev.h"

/*
 * The SYN-flood guard: whether one more insert is allowed (at most cfg.flood_new_per_sec on this
 * CPU in the current one-second window; 0 = no limit). Counts ct_guard when it refuses.
 */
static __always_inline int stator_ct_guard_allows(const struct stator_node_cfg *cfg, __u64 now)
{
	__u32 limit = cfg->flood_new_per_sec, zero = 0;
	struct stator_flood *f;

	if (!limit)
		return 1;
	f = bpf_map_lookup_elem(&stator_flood, &zero);
	if (!f)
		return 0;
	if (now < f->window_start_ns || now - f->window_start_ns >= STATOR_NSEC_PER_SEC) {
		f->window_start_ns = now;
		f->inserts = 0;
	}
	if (f->inserts >= limit) {
		stator_count(STATOR_CNT_CT_GUARD);
		return 0;
	}
	f->inserts += 1;
	return 1;
}

/*
 * A found entry (real `real_id`, last seen `*last_seen`): a hit — the real is still usable (or
 * draining) for this VIP and the entry is not idle past its protocol's timeout — returns 1 with
 * *real set and *last_seen refreshed when STATOR_CT_REFRESH_NS stale; otherwise counts
 * ct_expired or ct_reselect and returns 0 (Maglev decides again). One rule for both tables.
 */
static __always_inline int stator_ct_hit(struct stator_pkt *pkt, const struct stator_vip *vip,
					 const struct stator_node_cfg *cfg, __u64 now,
					 __u32 real_id, __u64 *last_seen,
					 const struct stator_real **real)
{
	__u64 last = *last_seen;
	__u64 timeout = pkt->flow.proto == IPPROTO_TCP ? cfg->tcp_timeout_ns : cfg->udp_timeout_ns;
	const struct stator_real *r;

	if (now > last && now - last > timeout) {
		pkt->cause = STATOR_TRACE_C_CT_EXPIRED;
		stator_count(STATOR_CNT_CT_EXPIRED);
		return 0;
	}
	r = stator_real_lookup(pkt->gen, real_id);
	if (r && (r->flags & (STATOR_REAL_F_USABLE | STATOR_REAL_F_DRAINING)) &&
	    r->vip_id == vip->vip_id) {
		pkt->cause = STATOR_TRACE_C_CT_HIT;
		stator_count(STATOR_CNT_CT_HIT);
		/* unsigned, as §4 writes it: a last_seen in the future also refreshes */
		if (now - last >= STATOR_CT_REFRESH_NS)
			*last_seen = now;
		*real = r;
		return 1;
	}
	pkt->cause = STATOR_TRACE_C_CT_RESELECT;
	stator_count(STATOR_CNT_CT_RESELECT);
	return 0;
}

/*
 * Insert(real_id): records the flow unless the SYN-flood guard holds (more than
 * cfg.flood_new_per_sec inserts on this CPU in the current one-second window). `found` is the
 * entry the lookup returned (expired, reselected, or another CPU's zero value), overwritten in
 * place: cheaper than bpf_map_update_elem, which for LRU maps takes a free node before it
 * even looks for the key.
 */
static __always_inline void stator_ct_insert(struct stator_pkt *pkt,
					     const struct stator_node_cfg *cfg, __u32 real_id,
					     __u64 now, struct stator_ct_entry *found)
{
	/* Maglev has hashed the flow by now: kept in the entry for the flow's hits. */
	struct stator_ct_entry e = {
		.real_id = real_id,
		.hash = stator_pkt_hash(pkt),
		.last_seen_ns = now,
	};

	if (!stator_ct_guard_allows(cfg, now))
		return;
	if (found) {
		found->real_id = real_id;
		found->hash = e.hash;
		found->last_seen_ns = now;
		stator_count(STATOR_CNT_CT_INSERT);
	} else if (bpf_map_update_elem(&stator_ct, &pkt->flow, &e, BPF_ANY) == 0) {
		stator_count(STATOR_CNT_CT_INSERT);
	}
}

/* ---- stator_ct4: the per-CPU build's IPv4 table ------------------------------------------ */

/* Buckets per CPU (a power of two); 0 = IPv4 flows use stator_ct (the shared build, or a loader
 * that did not size stator_ct4). Frozen read-only data: the verifier prunes the path not taken. */
volatile const __u32 stator_ct4_buckets = 0;
/* Until this time (the program's clock), an IPv4 flow that misses in stator_ct4 is looked up once
 * in stator_ct and moved: the IPv4 flows a build before stator_ct4 left in the pinned table
 * survive the upgrade. 0 = no such table (the loader sets it when it finds one). */
volatile const __u64 stator_ct4_legacy_until_ns = 0;

/* The first 16 bytes of an entry (addresses, ports, protocol, zero padding) as two words. */
struct stator_ct4_key {
	__u64 w0;
	__u64 w1;
};

static __always_inline struct stator_ct4_key stator_ct4_key_of(const struct stator_flow_key *f)
{
	struct stator_ct4_entry e = {
		.src = f->src[0],
		.dst = f->dst[0],
		.sport = f->sport,
		.dport = f->dport,
		.proto = f->proto,
	};
	struct stator_ct4_key k;

	__builtin_memcpy(&k, &e, sizeof(k));
	return k;
}

/*
 * The way of bucket b that holds the flow of key k (0 .. STATOR_CT4_WAYS - 1), else
 * STATOR_CT4_WAYS + the way an insert takes: a free one, else an expired one, else the least
 * recently seen (so an expired entry is kept, as the kernel's LRU keeps it, until its bucket
 * is full). A free way never matches (its protocol is 0).
 *
 * Global, not inlined: the verifier checks it once, and its callers see one unknown index
 * instead of a state per way for everything that follows (inlined, the ways multiplied the
 * program's states past the verifier's limit).
 */
__attribute__((noinline)) int stator_ct4_way(struct stator_ct4_bucket *b,
					     const struct stator_ct4_key *k,
					     const struct stator_node_cfg *cfg, __u64 now)
{
	int victim = 0, free = -1;
	__u64 oldest = ~0ull;

	if (!b || !k || !cfg)
		return STATOR_CT4_WAYS;
#pragma unroll
	for (int i = 0; i < STATOR_CT4_WAYS; i++) {
		const __u64 *w = (const __u64 *)&b->e[i];

		if (w[0] == k->w0 && w[1] == k->w1)
			return i;
		if (free < 0 && !b->e[i].last_seen_ns)
			free = i;
	}
	if (free >= 0)
		return STATOR_CT4_WAYS + free;
#pragma unroll
	for (int i = 0; i < STATOR_CT4_WAYS; i++) {
		const struct stator_ct4_entry *e = &b->e[i];
		__u64 last = e->last_seen_ns;
		__u64 timeout = e->proto == IPPROTO_TCP ? cfg->tcp_timeout_ns : cfg->udp_timeout_ns;

		if (now > last && now - last > timeout)
			return STATOR_CT4_WAYS + i;
		if (last < oldest) {
			oldest = last;
			victim = i;
		}
	}
	return STATOR_CT4_WAYS + victim;
}

static __always_inline void stator_ct4_write(struct stator_ct4_entry *e,
					     const struct stator_ct4_key *k, __u32 real_id,
					     __u32 hash, __u64 last_seen)
{
	__u64 *w = (__u64 *)e;

	w[0] = k->w0;
	w[1] = k->w1;
	e->real_id = real_id;
	e->hash = hash;
	e->last_seen_ns = last_seen;
}

/* This CPU's bucket of a flow hash (NULL only if the map is smaller than the loader makes it). */
static __always_inline struct stator_ct4_bucket *stator_ct4_bucket_of(__u32 hash)
{
	__u32 idx = bpf_get_smp_processor_id() * stator_ct4_buckets +
		    (hash & (stator_ct4_buckets - 1));

	return bpf_map_lookup_elem(&stator_ct4, &idx);
}

/*
 * The upgrade path: a flow missing from stator_ct4 that this CPU's part of the pinned stator_ct
 * still holds is moved into way e (the one an insert would take; its old entry is cleared) and
 * handled as found. Returns 1 when it moved one.
 */
static __always_inline int stator_ct4_migrate(struct stator_pkt *pkt, struct stator_ct4_entry *e,
					      const struct stator_ct4_key *k, __u32 hash)
{
	struct stator_ct_entry *old;

	if (!stator_ct4_legacy_until_ns || pkt->now >= stator_ct4_legacy_until_ns)
		return 0;
	old = bpf_map_lookup_elem(&stator_ct, &pkt->flow);
	if (!old || !old->last_seen_ns)
		return 0;
	stator_ct4_write(e, k, old->real_id, hash, old->last_seen_ns);
	old->last_seen_ns = 0;
	return 1;
}

/* stator_select for an IPv4 flow of the per-CPU build: the same rules, in stator_ct4. */
static __always_inline __u32 stator_select4(struct stator_pkt *pkt,
					    const struct stator_vip *vip,
					    const struct stator_node_cfg *cfg, int mode,
					    const struct stator_real **real, __u32 *reason)
{
	struct stator_ct4_key k = stator_ct4_key_of(&pkt->flow);
	struct stator_ct4_bucket *b = NULL;
	struct stator_ct4_entry *e = NULL;
	__u64 now;
	__u32 real_id, hash;
	int way;

	now = stator_now(pkt);
	hash = stator_pkt_hash(pkt);
	if (mode == STATOR_SEL_SYN) {
		/* the bucket is read only if the flood guard lets the insert happen */
		pkt->cause = STATOR_TRACE_C_SYN;
		stator_count(STATOR_CNT_CT_MISS);
		goto decide;
	}
	b = stator_ct4_bucket_of(hash);
	if (!b)
		goto decide; /* never: the loader sizes the map for every CPU */
	way = stator_ct4_way(b, &k, cfg, now);
	e = &b->e[way & (STATOR_CT4_WAYS - 1)];
	if (way >= STATOR_CT4_WAYS && !stator_ct4_migrate(pkt, e, &k, hash)) {
		/* e stays the way the insert takes */
		pkt->cause = STATOR_TRACE_C_CT_MISS;
		stator_count(STATOR_CNT_CT_MISS);
		goto decide;
	}
	real_id = e->real_id;
	if (stator_ct_hit(pkt, vip, cfg, now, real_id, &e->last_seen_ns, real))
		return real_id;
decide:
	real_id = stator_maglev(pkt, vip, real, reason);
	if (real_id == STATOR_NO_REAL || mode == STATOR_SEL_ICMP_ERR)
		return real_id;
	if (mode == STATOR_SEL_FLOW && stator_second_chance(pkt, vip, real_id, *real))
		return real_id; /* never inserted: §12.2 */
	if (!stator_ct_guard_allows(cfg, now))
		return real_id;
	if (!e) {
		/* a SYN: the flow's own way if the bucket holds it, else the one an insert takes */
		b = stator_ct4_bucket_of(hash);
		if (!b)
			return real_id;
		way = stator_ct4_way(b, &k, cfg, now);
		e = &b->e[way & (STATOR_CT4_WAYS - 1)];
	}
	stator_ct4_write(e, &k, real_id, hash, now);
	stator_count(STATOR_CNT_CT_INSERT);
	return real_id;
}

/*
 * Selection: the real for this packet (id returned, pointer in *real), or STATOR_NO_REAL with
 * *reason. `mode` is STATOR_SEL_FLOW, STATOR_SEL_SYN or STATOR_SEL_ICMP_ERR (lookup, never
 * insert).
 */
static __always_inline __u32 stator_select(struct stator_pkt *pkt,
					   const struct stator_vip *vip,
					   const struct stator_node_cfg *cfg, int mode,
					   const struct stator_real **real, __u32 *reason)
{
	struct stator_ct_entry *e = NULL;
	__u64 now;
	__u32 real_id;

	if (vip->flags & STATOR_VIP_F_NO_CT) {
		pkt->cause = STATOR_TRACE_C_NO_CT;
		real_id = stator_maglev(pkt, vip, real, reason);
		if (real_id != STATOR_NO_REAL && mode == STATOR_SEL_FLOW)
			stator_second_chance(pkt, vip, real_id, *real);
		return real_id;
	}
	if (stator_ct4_buckets && pkt->family == STATOR_FAMILY_V4)
		return stator_select4(pkt, vip, cfg, mode, real, reason);

	now = stator_now(pkt);
	if (mode == STATOR_SEL_SYN) {
		pkt->cause = STATOR_TRACE_C_SYN;
		stator_count(STATOR_CNT_CT_MISS);
		goto decide;
	}
	e = bpf_map_lookup_elem(&stator_ct, &pkt->flow);
	/* last_seen 0: another CPU's entry (LRU_PERCPU_HASH zero-fills the others' values) */
	if (!e || !e->last_seen_ns) {
		pkt->cause = STATOR_TRACE_C_CT_MISS;
		stator_count(STATOR_CNT_CT_MISS);
		goto decide;
	}
	real_id = e->real_id;
	if (stator_ct_hit(pkt, vip, cfg, now, real_id, &e->last_seen_ns, real)) {
		/* The hash the insert stored (a function of the key alone, so a torn read of a
		 * shared entry cannot mix flows); 0: an older build's entry, computed on use. */
		if (e->hash) {
			pkt->hash = e->hash;
			pkt->hashed = 1;
		}
		return real_id;
	}
decide:
	real_id = stator_maglev(pkt, vip, real, reason);
	if (real_id != STATOR_NO_REAL && mode == STATOR_SEL_FLOW &&
	    stator_second_chance(pkt, vip, real_id, *real))
		return real_id; /* never inserted: §12.2 */
	if (real_id != STATOR_NO_REAL && mode != STATOR_SEL_ICMP_ERR)
		stator_ct_insert(pkt, cfg, real_id, now, e);
	return real_id;
}

#endif /* STATOR_CONNTRACK_H */
