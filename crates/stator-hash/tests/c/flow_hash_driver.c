/* Host-side driver for the flow-hash differential test (tests/flow_hash_c.rs).
 *
 * Reads lines "kind proto src dst sport dport" from stdin (kind: v4, v6, v4frag, v6frag; src and
 * dst as hex of the network-order address bytes; ports as decimal host-order numbers, ignored
 * for 3-tuples), lays the fields out exactly as they sit in a packet, hashes them with
 * bpf/include/flow_hash.h and prints one 8-digit hex hash per line.
 *
 * As a third opinion, every hash is also recomputed with a transcription of Linux's generic
 * jhash2() loop over the host-order words; a disagreement exits with status 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flow_hash.h"

static __u32 rol32(__u32 w, unsigned int s)
{
	return (w << s) | (w >> ((-s) & 31));
}

/* include/linux/jhash.h: jhash2(), __jhash_mix(), __jhash_final(). */
static __u32 linux_jhash2(const __u32 *k, __u32 length, __u32 initval)
{
	__u32 a, b, c;

	a = b = c = 0xdeadbeef + (length << 2) + initval;
	while (length > 3) {
		a += k[0];
		b += k[1];
		c += k[2];
		a -= c; a ^= rol32(c, 4);  c += b;
		b -= a; b ^= rol32(a, 6);  a += c;
		c -= b; c ^= rol32(b, 8);  b += a;
		a -= c; a ^= rol32(c, 16); c += b;
		b -= a; b ^= rol32(a, 19); a += c;
		c -= b; c ^= rol32(b, 4);  b += a;
		length -= 3;
		k += 3;
	}
	switch (length) {
	case 3: c += k[2]; /* fall through */
	case 2: b += k[1]; /* fall through */
	case 1: a += k[0];
		c ^= b; c -= rol32(b, 14);
		a ^= c; a -= rol32(c, 11);
		b ^= a; b -= rol32(a, 25);
		c ^= b; c -= rol32(b, 16);
		a ^= c; a -= rol32(c, 4);
		b ^= a; b -= rol32(a, 14);
		c ^= b; c -= rol32(b, 24);
		break;
	case 0:
		break;
	}
	return c;
}

static int parse_hex(const char *text, unsigned char *out, size_t len)
{
	size_t i;

	if (strlen(text) != 2 * len)
		return -1;
	for (i = 0; i < len; i++) {
		unsigned int byte;

		if (sscanf(text + 2 * i, "%2x", &byte) != 1)
			return -1;
		out[i] = (unsigned char)byte;
	}
	return 0;
}

int main(void)
{
	char kind[16], src_hex[40], dst_hex[40];
	unsigned int proto, sport, dport;
	unsigned long line = 0;

	while (scanf("%15s %u %39s %39s %u %u", kind, &proto, src_hex, dst_hex, &sport, &dport) ==
	       6) {
		int v6 = strncmp(kind, "v6", 2) == 0;
		int frag = strstr(kind, "frag") != NULL;
		size_t alen = v6 ? 16 : 4;
		/* Packet layout: addresses and ports in network byte order. */
		unsigned char src[16], dst[16], sport_be[2], dport_be[2];
		__be32 saddr[4], daddr[4];
		__be16 sp, dp;
		__u32 words[9], n = 0, hash, reference;
		size_t i;

		line++;
		if (parse_hex(src_hex, src, alen) || parse_hex(dst_hex, dst, alen) || proto > 255 ||
		    sport > 65535 || dport > 65535) {
			fprintf(stderr, "line %lu: malformed input\n", line);
			return 1;
		}
		memcpy(saddr, src, alen);
		memcpy(daddr, dst, alen);
		sport_be[0] = (unsigned char)(sport >> 8);
		sport_be[1] = (unsigned char)sport;
		dport_be[0] = (unsigned char)(dport >> 8);
		dport_be[1] = (unsigned char)dport;
		memcpy(&sp, sport_be, 2);
		memcpy(&dp, dport_be, 2);

		if (v6)
			hash = frag ? stator_flow_hash3_v6(saddr, daddr, (__u8)proto)
				    : stator_flow_hash_v6(saddr, daddr, sp, dp, (__u8)proto);
		else
			hash = frag ? stator_flow_hash3_v4(saddr[0], daddr[0], (__u8)proto)
				    : stator_flow_hash_v4(saddr[0], daddr[0], sp, dp, (__u8)proto);

		for (i = 0; i < alen; i += 4)
			words[n++] = ((__u32)src[i] << 24) | ((__u32)src[i + 1] << 16) |
				     ((__u32)src[i + 2] << 8) | src[i + 3];
		for (i = 0; i < alen; i += 4)
			words[n++] = ((__u32)dst[i] << 24) | ((__u32)dst[i + 1] << 16) |
				     ((__u32)dst[i + 2] << 8) | dst[i + 3];
		if (!frag)
			words[n++] = (sport << 16) | dport;
		reference = linux_jhash2(words, n, STATOR_FLOW_HASH_SEED ^ proto);
		if (hash != reference) {
			fprintf(stderr, "line %lu: flow_hash.h gives %08x, linux jhash2 %08x\n", line,
				hash, reference);
			return 2;
		}
		printf("%08x\n", hash);
	}
	return 0;
}
