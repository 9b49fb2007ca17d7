/* Host-side driver for the Toeplitz differential test (tests/toeplitz_c.rs).
 *
 * Reads lines "key input" from stdin (key: 80 hex digits; input: hex bytes, "-" for none, at most
 * 64 bytes), hashes the input with bpf/include/toeplitz.h and prints one 8-digit hex hash per
 * line.
 *
 * As a third opinion, every hash is also recomputed with a literal transcription of Microsoft's
 * bit-by-bit definition; a disagreement exits with status 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "toeplitz.h"

#define MAX_INPUT 64

static int parse_hex(const char *text, unsigned char *out, size_t max, size_t *len)
{
	size_t n = strlen(text);

	if (strcmp(text, "-") == 0) {
		*len = 0;
		return 0;
	}
	if (n % 2 != 0 || n / 2 > max)
		return -1;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned int byte;

		if (sscanf(text + 2 * i, "%2x", &byte) != 1)
			return -1;
		out[i] = (unsigned char)byte;
	}
	*len = n / 2;
	return 0;
}

/* For every set input bit i, XOR in key bits [i, i + 32), reading zeros past the key's end. */
static __u32 reference(const unsigned char *key, const unsigned char *input, size_t len)
{
	__u32 result = 0;

	for (size_t i = 0; i < len * 8; i++) {
		__u32 window = 0;

		if (!((input[i / 8] >> (7 - i % 8)) & 1))
			continue;
		for (size_t j = 0; j < 32; j++) {
			size_t bit = i + j;
			unsigned int kb = bit < 320 ? (key[bit / 8] >> (7 - bit % 8)) & 1 : 0;

			window = (window << 1) | kb;
		}
		result ^= window;
	}
	return result;
}

int main(void)
{
	char key_text[128], input_text[2 * MAX_INPUT + 8];
	unsigned char key[40], input[MAX_INPUT];
	size_t key_len, len;
	unsigned long line = 0;

	while (scanf("%127s %135s", key_text, input_text) == 2) {
		__u32 hash;

		line++;
		if (parse_hex(key_text, key, sizeof(key), &key_len) || key_len != sizeof(key) ||
		    parse_hex(input_text, input, sizeof(input), &len)) {
			fprintf(stderr, "line %lu: bad input\n", line);
			return 1;
		}
		hash = stator_toeplitz(key, input, (__u32)len);
		if (hash != reference(key, input, len)) {
			fprintf(stderr, "line %lu: toeplitz.h %08x != reference %08x\n", line, hash,
				reference(key, input, len));
			return 2;
		}
		printf("%08x\n", hash);
	}
	return 0;
}
