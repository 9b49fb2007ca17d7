/* Proves bpf/include/flow_hash.h compiles for the BPF target with -Wall -Werror (see
 * tests/flow_hash_c.rs). It hashes fields read from packet data so nothing is constant-folded;
 * the XDP forwarder later proves the same code in the kernel's verifier.
 */
#include <linux/bpf.h>

#include "flow_hash.h"

__attribute__((section("xdp"), used)) int stator_flow_hash_probe(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const __be32 *w = data;
	const __be16 *ports = (const __be16 *)(w + 8);
	__u32 hash;

	if (data + 40 > data_end)
		return XDP_PASS;
	hash = stator_flow_hash_v4(w[0], w[1], ports[0], ports[1], 6);
	hash ^= stator_flow_hash3_v4(w[0], w[1], 17);
	hash ^= stator_flow_hash_v6(w, w + 4, ports[0], ports[1], 6);
	hash ^= stator_flow_hash3_v6(w, w + 4, 58);
	return (hash & 1) ? XDP_PASS : XDP_DROP;
}

char _license[] __attribute__((section("license"), used)) = "GPL";
