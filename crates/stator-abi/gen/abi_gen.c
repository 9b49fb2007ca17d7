/*
 * Prints crates/stator-abi/src/generated.rs from bpf/include/stator_abi.h: every constant, enum
 * value, struct size and field offset the Rust mirror needs. Run by `make abi`; the test
 * `generated_is_fresh` rebuilds it and fails if the checked-in file differs.
 */
#include <stddef.h>
#include <stdio.h>
#include "stator_abi.h"

#define CONST_U32(name) printf("pub const %s: u32 = %u;\n", #name, (unsigned)(name))
#define CONST_U64(name) printf("pub const %s: u64 = %llu;\n", #name, (unsigned long long)(name))
#define SIZE(st) printf("pub const SIZEOF_%s: usize = %zu;\n", #st, sizeof(struct st))
#define OFF(st, f) printf("pub const OFFSETOF_%s_%s: usize = %zu;\n", #st, #f, offsetof(struct st, f))
#define NAME(prefix, e, label) printf("    (%s%s, \"%s\"),\n", prefix, #e, label)

/* Every enum value with its metric label. Adding a value to the header without adding it here
 * fails the completeness check below (a label left empty). */
#define COUNTERS(X)                                                                               \
	X(STATOR_CNT_ACT_ABORTED, "act_aborted")                                                  \
	X(STATOR_CNT_ACT_DROP, "act_drop")                                                        \
	X(STATOR_CNT_ACT_PASS, "act_pass")                                                        \
	X(STATOR_CNT_ACT_TX, "act_tx")                                                            \
	X(STATOR_CNT_ACT_REDIRECT, "act_redirect")                                                \
	X(STATOR_CNT_CT_HIT, "ct_hit")                                                            \
	X(STATOR_CNT_CT_MISS, "ct_miss")                                                          \
	X(STATOR_CNT_CT_RESELECT, "ct_reselect")                                                  \
	X(STATOR_CNT_CT_INSERT, "ct_insert")                                                      \
	X(STATOR_CNT_CT_EXPIRED, "ct_expired")                                                    \
	X(STATOR_CNT_CT_GUARD, "ct_guard")                                                        \
	X(STATOR_CNT_ICMP_ERROR_FWD, "icmp_error_fwd")                                            \
	X(STATOR_CNT_ICMP_ECHO_REPLY, "icmp_echo_reply")                                          \
	X(STATOR_CNT_NON_VIP, "non_vip")                                                          \
	X(STATOR_CNT_NON_IP, "non_ip")                                                            \
	X(STATOR_CNT_SELF_TEST, "self_test")                                                      \
	X(STATOR_CNT_FRAG_REDIRECT, "frag_redirect")                                              \
	X(STATOR_CNT_FRAG_RECORD, "frag_record")                                                  \
	X(STATOR_CNT_FRAG_HIT, "frag_hit")                                                        \
	X(STATOR_CNT_ACT_HOLD, "act_hold")                                                        \
	X(STATOR_CNT_FAILOVER, "failover")                                                        \
	X(STATOR_CNT_REDIRECT_RX, "redirect_rx")                                                  \
	X(STATOR_CNT_REDIRECT_AGAIN, "redirect_again")                                            \
	X(STATOR_CNT_GROUP_MATCH, "group_match")                                                  \
	X(STATOR_CNT_TRACE_REPORT, "trace_report")                                                \
	X(STATOR_CNT_TRACE_LIMITED, "trace_limited")                                              \
	X(STATOR_CNT_TRACE_LOST, "trace_lost")                                                    \
	X(STATOR_CNT_TRACE_UNAUTH, "trace_unauth")                                                \
	X(STATOR_CNT_STALE_PASS, "stale_pass")                                                    \
	X(STATOR_CNT_SC_SENT, "sc_sent")                                                          \
	X(STATOR_CNT_SC_UNSUPPORTED, "sc_unsupported")

#define DROPS(X)                                                                                  \
	X(STATOR_DROP_NONE, "none")                                                               \
	X(STATOR_DROP_MALFORMED_L3, "malformed_l3")                                               \
	X(STATOR_DROP_MALFORMED_L4, "malformed_l4")                                               \
	X(STATOR_DROP_FRAGMENT, "fragment")                                                       \
	X(STATOR_DROP_IPV6_EXT_LIMIT, "ipv6_ext_limit")                                           \
	X(STATOR_DROP_NO_BACKEND, "no_backend")                                                   \
	X(STATOR_DROP_NO_SOURCE, "no_source")                                                     \
	X(STATOR_DROP_FIB, "fib")                                                                 \
	X(STATOR_DROP_NO_NEIGH, "no_neigh")                                                       \
	X(STATOR_DROP_TX_PORT, "tx_port")                                                         \
	X(STATOR_DROP_ADJUST, "adjust")                                                           \
	X(STATOR_DROP_ICMP, "icmp")                                                               \
	X(STATOR_DROP_BAD_CONFIG, "bad_config")                                                   \
	X(STATOR_DROP_MTU, "mtu")                                                                 \
	X(STATOR_DROP_XSK_FRAME, "xsk_frame")                                                     \
	X(STATOR_DROP_XSK_SOCKET, "xsk_socket")                                                   \
	X(STATOR_DROP_FRAG_HOLD, "frag_hold")                                                     \
	X(STATOR_DROP_REDIRECT, "redirect")

#define DECAP_COUNTERS(X)                                                                         \
	X(STATOR_DECAP_CNT_GRE, "gre")                                                            \
	X(STATOR_DECAP_CNT_IPIP, "ipip")                                                          \
	X(STATOR_DECAP_CNT_GUE, "gue")                                                            \
	X(STATOR_DECAP_CNT_PASS, "pass")                                                          \
	X(STATOR_DECAP_CNT_NOT_OURS, "not_ours")                                                  \
	X(STATOR_DECAP_CNT_REJECTED, "rejected")                                                  \
	X(STATOR_DECAP_CNT_BAD_OUTER, "bad_outer")                                                \
	X(STATOR_DECAP_CNT_FRAGMENT, "fragment")                                                  \
	X(STATOR_DECAP_CNT_GRE_UNSUPPORTED, "gre_unsupported")                                    \
	X(STATOR_DECAP_CNT_GUE_UNSUPPORTED, "gue_unsupported")                                    \
	X(STATOR_DECAP_CNT_BAD_INNER, "bad_inner")                                                \
	X(STATOR_DECAP_CNT_ADJUST, "adjust")                                                      \
	X(STATOR_DECAP_CNT_SC_FORWARDED, "sc_forwarded")                                          \
	X(STATOR_DECAP_CNT_SC_FIB, "sc_fib")                                                      \
	X(STATOR_DECAP_CNT_SC_MTU, "sc_mtu")                                                      \
	X(STATOR_DECAP_CNT_SC_LOCAL, "sc_local")                                                  \
	X(STATOR_DECAP_CNT_SC_DELIVERED, "sc_delivered")                                          \
	X(STATOR_DECAP_CNT_SC_ORPHAN, "sc_orphan")                                                \
	X(STATOR_DECAP_CNT_SC_NOT_TCP, "sc_not_tcp")                                              \
	X(STATOR_DECAP_CNT_SC_REFUSED, "sc_refused")                                              \
	X(STATOR_DECAP_CNT_SC_NO_SOURCE, "sc_no_source")                                          \
	X(STATOR_DECAP_CNT_SC_MALFORMED, "sc_malformed")

#define RP_COUNTERS(X)                                                                            \
	X(STATOR_RP_CNT_SELECT_OWN, "select_own")                                                 \
	X(STATOR_RP_CNT_SELECT_PROBE, "select_probe")                                             \
	X(STATOR_RP_CNT_SELECT_KERNEL, "select_kernel")                                           \
	X(STATOR_RP_CNT_MIGRATE_OWN, "migrate_own")                                               \
	X(STATOR_RP_CNT_MIGRATE_PROBE, "migrate_probe")                                           \
	X(STATOR_RP_CNT_MIGRATE_KERNEL, "migrate_kernel")                                         \
	X(STATOR_RP_CNT_NO_ADDRESS, "no_address")                                                 \
	X(STATOR_RP_CNT_NOT_CONFIGURED, "not_configured")                                         \
	X(STATOR_RP_CNT_CPU_LOCAL, "cpu_local")                                                   \
	X(STATOR_RP_CNT_CPU_REMOTE, "cpu_remote")

#define RSS_COUNTERS(X)                                                                           \
	X(STATOR_RSS_CNT_LOCAL, "local")                                                          \
	X(STATOR_RSS_CNT_REDIRECTED, "redirected")                                                \
	X(STATOR_RSS_CNT_NO_CPU, "no_cpu")                                                        \
	X(STATOR_RSS_CNT_OTHER, "other")                                                          \
	X(STATOR_RSS_CNT_MALFORMED, "malformed")

#define EMIT_CONST(e, label) printf("pub const %s: u32 = %u;\n", #e, (unsigned)(e));
#define EMIT_LABEL(e, label) names[e] = label;
#define EMIT_TABLE(rust, what, max, LIST)                                                         \
	do {                                                                                       \
		const char *names[max] = { 0 };                                                    \
		LIST(EMIT_CONST)                                                                   \
		LIST(EMIT_LABEL)                                                                   \
		printf("\n/// %s → metric label, in index order.\n", what);                        \
		printf("pub const %s_NAMES: [&str; %u] = [\n", rust, (unsigned)(max));           \
		for (unsigned i = 0; i < (max); i++) {                                             \
			if (!names[i]) {                                                           \
				fprintf(stderr, "abi_gen: %s %u has no label\n", rust, i);      \
				return 1;                                                          \
			}                                                                          \
			printf("    \"%s\",\n", names[i]);                                         \
		}                                                                                  \
		printf("];\n");                                                                  \
	} while (0)

int main(void)
{
	printf("// @generated by crates/stator-abi/gen/abi_gen.c from bpf/include/stator_abi.h.\n");
	printf("// Do not edit: run `make abi`.\n\n");
	printf("#![allow(missing_docs, non_upper_case_globals)]\n\n");

	CONST_U32(STATOR_MAX_VIPS);
	CONST_U32(STATOR_MAX_REALS);
	CONST_U32(STATOR_DEFAULT_SLOTS_PER_GEN);
	CONST_U32(STATOR_MAX_TABLE_SIZE);
	CONST_U32(STATOR_DEFAULT_CT_ENTRIES);
	CONST_U32(STATOR_MAX_TX_PORTS);
	CONST_U32(STATOR_MAX_IPV6_EXT_HDRS);
	CONST_U32(STATOR_MAX_DECAP_ADDRS);
	CONST_U32(STATOR_MAX_DECAP_PREFIXES);
	CONST_U32(STATOR_MAX_PEERS);
	CONST_U32(STATOR_MAX_PREFIXES);
	CONST_U32(STATOR_MAX_SUFFIX_LENS);
	CONST_U32(STATOR_DEFAULT_FRAG_ENTRIES);
	CONST_U32(STATOR_HOLD_FRAME_MAX);
	CONST_U32(STATOR_TRACE_KEYS);
	CONST_U32(STATOR_DEFAULT_HOLD_RING);
	CONST_U32(STATOR_TRACE_RING);
	CONST_U32(STATOR_TAIL_FRAG);
	CONST_U32(STATOR_TAIL_INNER);
	CONST_U32(STATOR_TAIL_FIRST);
	CONST_U32(STATOR_TAIL_MAX);
	CONST_U32(STATOR_NO_REAL);
	CONST_U32(STATOR_GUE_PORT);
	CONST_U64(STATOR_CT_REFRESH_NS);
	CONST_U32(STATOR_CT4_WAYS);
	CONST_U32(STATOR_VTAB_SLOTS);
	CONST_U32(STATOR_VTAB_PROBES);
	CONST_U32(STATOR_VADDR_INLINE);
	CONST_U32(STATOR_VTAB_HASH_MUL);

	CONST_U32(STATOR_FAMILY_NONE);
	CONST_U32(STATOR_FAMILY_V4);
	CONST_U32(STATOR_FAMILY_V6);
	CONST_U32(STATOR_ENCAP_GRE);
	CONST_U32(STATOR_ENCAP_IPIP);
	CONST_U32(STATOR_ENCAP_GUE);
	CONST_U32(STATOR_ENCAP_MAX);
	CONST_U32(STATOR_VIP_F_NO_CT);
	CONST_U32(STATOR_VIP_F_FRAGMENTS);
	CONST_U32(STATOR_VIP_F_FAILOVER);
	CONST_U32(STATOR_NODE_F_GROUPS);
	CONST_U32(STATOR_GRE_REDIRECT);
	CONST_U32(STATOR_VADDR_F_FRAGS);
	CONST_U32(STATOR_VADDR_F_NODE);
	CONST_U32(STATOR_PEER_F_SELF);
	CONST_U32(STATOR_CLASS_F_FRAGS);
	CONST_U64(STATOR_TRACE_MAGIC);
	CONST_U32(STATOR_TRACE_FORWARD);
	CONST_U32(STATOR_TRACE_FRAG_REDIRECT);
	CONST_U32(STATOR_TRACE_FAILOVER);
	CONST_U32(STATOR_TRACE_DROP);
	CONST_U32(STATOR_TRACE_C_NONE);
	CONST_U32(STATOR_TRACE_C_NO_CT);
	CONST_U32(STATOR_TRACE_C_SYN);
	CONST_U32(STATOR_TRACE_C_CT_HIT);
	CONST_U32(STATOR_TRACE_C_CT_MISS);
	CONST_U32(STATOR_TRACE_C_CT_EXPIRED);
	CONST_U32(STATOR_TRACE_C_CT_RESELECT);
	CONST_U32(STATOR_TRACE_F_FRAGMENT);
	CONST_U32(STATOR_NO_SLOT);
	CONST_U32(STATOR_NO_VIP);
	CONST_U32(STATOR_VADDR_F_TCP_PORTS);
	CONST_U32(STATOR_VADDR_F_TCP_ANY);
	CONST_U32(STATOR_VADDR_F_UDP_PORTS);
	CONST_U32(STATOR_VADDR_F_UDP_ANY);
	CONST_U32(STATOR_VADDR_F_INLINE);
	CONST_U32(STATOR_REAL_F_USABLE);
	CONST_U32(STATOR_REAL_F_DRAINING);
	CONST_U32(STATOR_REAL_F_PREVIOUS);
	CONST_U32(STATOR_NODE_F_ICMP_ECHO);
	CONST_U32(STATOR_PROBE_ETHERTYPE);
	CONST_U64(STATOR_PROBE_MAGIC);
	CONST_U32(STATOR_PROBE_F_CFG);
	CONST_U32(STATOR_PROBE_F_VADDR);
	CONST_U32(STATOR_BENCH_FRAME_MAX);
	CONST_U32(STATOR_MAX_XSK_QUEUES);
	CONST_U32(STATOR_FIBQ_OFF);

	CONST_U32(STATOR_CNT_MAX);
	CONST_U32(STATOR_DROP_MAX);
	CONST_U32(STATOR_DECAP_CNT_MAX);
	CONST_U32(STATOR_DECAP_CNT_FIRST_REASON);
	CONST_U32(STATOR_DECAP_CNT_FIRST_DETAIL);
	CONST_U32(STATOR_DECAP_F_ADDRS);
	CONST_U32(STATOR_DECAP_F_SECOND_CHANCE);
	CONST_U32(STATOR_SC_MAGIC);
	CONST_U32(STATOR_SC_HLEN_V4);
	CONST_U32(STATOR_SC_HLEN_V6);
	CONST_U32(STATOR_VSINK_PACKETS);
	CONST_U32(STATOR_VSINK_BYTES);
	CONST_U32(STATOR_VSINK_TUNNELLED);
	CONST_U32(STATOR_VSINK_MAX);
	CONST_U32(STATOR_RP_MAX_WORKERS);
	CONST_U32(STATOR_RP_MAX_TABLE_SIZE);
	CONST_U32(STATOR_RP_PROBES);
	CONST_U32(STATOR_RP_NO_WORKER);
	CONST_U32(STATOR_RSS_KEY_LEN);
	CONST_U32(STATOR_RP_F_PORT);
	CONST_U32(STATOR_RP_CNT_MAX);
	CONST_U32(STATOR_RP_CNT_OUTCOMES);
	CONST_U32(STATOR_RP_F_CPU);
	CONST_U32(STATOR_RSS_MAX_CPUS);
	CONST_U32(STATOR_RSS_MAX_PORTS);
	CONST_U32(STATOR_RSS_CNT_MAX);

	EMIT_TABLE("COUNTER", "Counter index", STATOR_CNT_MAX, COUNTERS);
	EMIT_TABLE("DROP_REASON", "Drop reason code", STATOR_DROP_MAX, DROPS);
	EMIT_TABLE("DECAP_COUNTER", "Decap counter index", STATOR_DECAP_CNT_MAX, DECAP_COUNTERS);
	EMIT_TABLE("RP_COUNTER", "Steering counter index", STATOR_RP_CNT_MAX, RP_COUNTERS);
	EMIT_TABLE("RSS_COUNTER", "Receive-steering counter index", STATOR_RSS_CNT_MAX, RSS_COUNTERS);
	printf("\n");

	SIZE(stator_xsk_cfg);
	OFF(stator_xsk_cfg, max_len);

	SIZE(stator_fib_query);
	OFF(stator_fib_query, src);
	OFF(stator_fib_query, dst);
	OFF(stator_fib_query, ifindex);
	OFF(stator_fib_query, tot_len);
	OFF(stator_fib_query, family);
	OFF(stator_fib_query, l4_protocol);
	OFF(stator_fib_query, rc);
	OFF(stator_fib_query, smac);
	OFF(stator_fib_query, dmac);

	SIZE(stator_ctl);
	OFF(stator_ctl, active_gen);
	OFF(stator_ctl, fib_cache_us);
	OFF(stator_ctl, test_clock_ns);
	SIZE(stator_beat);
	OFF(stator_beat, refreshed_ns);
	OFF(stator_beat, stale_after_ns);

	SIZE(stator_node_cfg);
	OFF(stator_node_cfg, src_v4);
	OFF(stator_node_cfg, src_v6);
	OFF(stator_node_cfg, flags);
	OFF(stator_node_cfg, tcp_timeout_ns);
	OFF(stator_node_cfg, udp_timeout_ns);
	OFF(stator_node_cfg, flood_new_per_sec);
	OFF(stator_node_cfg, gue_port);
	OFF(stator_node_cfg, outer_ttl);
	OFF(stator_node_cfg, config_generation);
	OFF(stator_node_cfg, vtab_seed);
	OFF(stator_node_cfg, trace_per_sec);
	OFF(stator_node_cfg, peer_table_off);
	OFF(stator_node_cfg, peer_table_size);
	OFF(stator_node_cfg, frag_timeout_ns);

	SIZE(stator_prev);
	OFF(stator_prev, table_off);
	OFF(stator_prev, table_size);
	SIZE(stator_addr);
	OFF(stator_addr, addr);
	OFF(stator_addr, family);

	SIZE(stator_peer);
	OFF(stator_peer, addr);
	OFF(stator_peer, family);
	OFF(stator_peer, flags);

	SIZE(stator_class_key);
	OFF(stator_class_key, prefixlen);
	OFF(stator_class_key, generation);
	OFF(stator_class_key, family);
	OFF(stator_class_key, addr);

	SIZE(stator_class);
	OFF(stator_class, class_id);
	OFF(stator_class, nlens);
	OFF(stator_class, flags);
	OFF(stator_class, lens);

	SIZE(stator_sfx_key);
	OFF(stator_sfx_key, suffix);
	OFF(stator_sfx_key, port);
	OFF(stator_sfx_key, proto);
	OFF(stator_sfx_key, family);
	OFF(stator_sfx_key, class_id);
	OFF(stator_sfx_key, bits);
	OFF(stator_sfx_key, generation);

	SIZE(stator_frag_key);
	OFF(stator_frag_key, src);
	OFF(stator_frag_key, dst);
	OFF(stator_frag_key, id);
	OFF(stator_frag_key, proto);
	OFF(stator_frag_key, family);

	SIZE(stator_frag_entry);
	OFF(stator_frag_entry, real_id);
	OFF(stator_frag_entry, vip_id);
	OFF(stator_frag_entry, created_ns);
	OFF(stator_frag_entry, reason);
	OFF(stator_frag_entry, hash);

	SIZE(stator_hold_hdr);
	OFF(stator_hold_hdr, key);
	OFF(stator_hold_hdr, ingress_ifindex);
	OFF(stator_hold_hdr, len);
	OFF(stator_hold_hdr, now_ns);

	SIZE(stator_tail);
	OFF(stator_tail, l3);
	OFF(stator_tail, ethertype);
	OFF(stator_tail, redirected);

	SIZE(stator_trace_mark);
	OFF(stator_trace_mark, magic);
	OFF(stator_trace_mark, receiver);
	OFF(stator_trace_mark, receiver_port);
	OFF(stator_trace_mark, receiver_family);
	OFF(stator_trace_mark, trace_id);
	OFF(stator_trace_mark, mac);

	SIZE(stator_trace_keys);
	OFF(stator_trace_keys, k);
	OFF(stator_trace_keys, count);

	SIZE(stator_trace_event);
	OFF(stator_trace_event, receiver);
	OFF(stator_trace_event, receiver_port);
	OFF(stator_trace_event, receiver_family);
	OFF(stator_trace_event, hop);
	OFF(stator_trace_event, trace_id);
	OFF(stator_trace_event, kind);
	OFF(stator_trace_event, cause);
	OFF(stator_trace_event, reason);
	OFF(stator_trace_event, flags);
	OFF(stator_trace_event, vip_id);
	OFF(stator_trace_event, real_id);
	OFF(stator_trace_event, slot);
	OFF(stator_trace_event, target);
	OFF(stator_trace_event, target_family);
	OFF(stator_trace_event, ip_len);
	OFF(stator_trace_event, flow);
	OFF(stator_trace_event, now_ns);

	SIZE(stator_vaddr_vip);
	OFF(stator_vaddr_vip, port);
	OFF(stator_vaddr_vip, proto);
	OFF(stator_vaddr_vip, vip);

	SIZE(stator_vaddr);
	OFF(stator_vaddr, addr);
	OFF(stator_vaddr, family);
	OFF(stator_vaddr, flags);
	OFF(stator_vaddr, vips);

	SIZE(stator_vip_key);
	OFF(stator_vip_key, addr);
	OFF(stator_vip_key, port);
	OFF(stator_vip_key, proto);
	OFF(stator_vip_key, family);
	OFF(stator_vip_key, generation);

	SIZE(stator_vip);
	OFF(stator_vip, vip_id);
	OFF(stator_vip, flags);
	OFF(stator_vip, table_off);
	OFF(stator_vip, table_size);

	SIZE(stator_real);
	OFF(stator_real, addr);
	OFF(stator_real, vip_id);
	OFF(stator_real, flags);
	OFF(stator_real, family);
	OFF(stator_real, encap);

	SIZE(stator_flow_key);
	OFF(stator_flow_key, src);
	OFF(stator_flow_key, dst);
	OFF(stator_flow_key, sport);
	OFF(stator_flow_key, dport);
	OFF(stator_flow_key, proto);
	OFF(stator_flow_key, family);

	SIZE(stator_ct4_entry);
	OFF(stator_ct4_entry, src);
	OFF(stator_ct4_entry, dst);
	OFF(stator_ct4_entry, sport);
	OFF(stator_ct4_entry, dport);
	OFF(stator_ct4_entry, proto);
	OFF(stator_ct4_entry, real_id);
	OFF(stator_ct4_entry, hash);
	OFF(stator_ct4_entry, last_seen_ns);
	SIZE(stator_ct4_bucket);
	SIZE(stator_ct_entry);
	OFF(stator_ct_entry, real_id);
	OFF(stator_ct_entry, hash);
	OFF(stator_ct_entry, last_seen_ns);

	SIZE(stator_nh);
	OFF(stator_nh, stamp_ns);
	OFF(stator_nh, dst);
	OFF(stator_nh, in_ifindex);
	OFF(stator_nh, out_ifindex);
	OFF(stator_nh, ok_len);
	OFF(stator_nh, family);
	OFF(stator_nh, dmac);
	OFF(stator_nh, smac);

	SIZE(stator_flood);
	OFF(stator_flood, window_start_ns);
	OFF(stator_flood, inserts);

	SIZE(stator_traffic);
	OFF(stator_traffic, packets);
	OFF(stator_traffic, bytes);

	SIZE(stator_probe);
	OFF(stator_probe, magic);
	OFF(stator_probe, nonce);
	OFF(stator_probe, answer);
	OFF(stator_probe, addr);
	OFF(stator_probe, family);
	OFF(stator_probe, active_gen);
	OFF(stator_probe, result);
	OFF(stator_probe, vaddr_flags);
	OFF(stator_probe, config_generation);

	SIZE(stator_bench_frame);
	OFF(stator_bench_frame, len);
	OFF(stator_bench_frame, nflows);
	OFF(stator_bench_frame, flow_off);
	OFF(stator_bench_frame, bytes);

	SIZE(stator_decap_addr);
	OFF(stator_decap_addr, addr);
	OFF(stator_decap_addr, family);

	SIZE(stator_decap_cfg);
	OFF(stator_decap_cfg, gue_port);
	OFF(stator_decap_cfg, flags);
	OFF(stator_decap_cfg, src_v4);
	OFF(stator_decap_cfg, src_v6);
	SIZE(stator_decap_prefix);
	OFF(stator_decap_prefix, prefixlen);
	OFF(stator_decap_prefix, family);
	OFF(stator_decap_prefix, addr);

	SIZE(stator_rp_cfg);
	OFF(stator_rp_cfg, key);
	OFF(stator_rp_cfg, table_size);
	OFF(stator_rp_cfg, flags);
	OFF(stator_rp_cfg, workers);

	/* stator_vtab_hash as the host computes it: (address, family, seed, home slot). */
	{
		static const __be32 addrs[][4] = {
			{ 0x0a00000a, 0, 0, 0 }, { 0x0b00000a, 0, 0, 0 }, { 0xffffffff, 0, 0, 0 },
			{ 0x0000b80d, 0, 0, 0x10000000 }, { 0x0000b80d, 0, 0, 0x11000000 },
			{ 0x000000fd, 0, 0, 0x10000000 },
		};
		static const __u8 fams[] = { 4, 4, 4, 6, 6, 6 };
		static const __u32 seeds[] = { 0, 1, 0xdeadbeef };

		printf("\n/// `stator_vtab_hash` vectors from the C header, computed on the generating host\n");
		printf("/// (little-endian): (address words as in memory, family, seed, home slot).\n");
		printf("pub const VTAB_HASH_VECTORS: [([u32; 4], u8, u32, u32); %zu] = [\n",
		       sizeof(fams) * sizeof(seeds) / sizeof(seeds[0]));
		for (unsigned i = 0; i < sizeof(fams); i++)
			for (unsigned j = 0; j < sizeof(seeds) / sizeof(seeds[0]); j++)
				printf("    ([%#x, %#x, %#x, %#x], %u, %#x, %u),\n", (unsigned)addrs[i][0],
				       (unsigned)addrs[i][1], (unsigned)addrs[i][2], (unsigned)addrs[i][3],
				       fams[i], seeds[j],
				       stator_vtab_hash(addrs[i], fams[i], seeds[j]));
		printf("];\n");
	}
	return 0;
}
