/* libFuzzer: the peer directory's YAML (ibc_peers.h), then a look-up and
 * a rendezvous ranking with what it produced.  The parser must refuse
 * what it does not understand with a message, never crash or leak; a
 * ranking is a permutation of the peers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ibcache/ibc_peers.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	static struct ibc_dir dir;
	uint16_t idx[IBC_PEERS_MAX];
	uint64_t keys[IBC_PEERS_MAX];
	char err[512], *origin = NULL;
	uint32_t k;

	ibc_dir_init(&dir);
	err[0] = 0;
	if (ibc_dir_parse(&dir, (const char *)d, n, err, sizeof(err))) {
		if (!err[0])
			__builtin_trap();	/* a refusal says why */
		ibc_dir_free(&dir);
		return 0;
	}
	k = ibc_dir_find(&dir, n > 4 ? "data/x" : "x", idx, &origin);
	free(origin);
	if (k > dir.npeers)
		__builtin_trap();
	for (uint32_t i = 0; i < dir.npeers; i++)
		keys[i] = dir.peers[i].key;
	ibc_rdv_rank(keys, idx, k, n, n * 3);
	for (uint32_t i = 0; i < k; i++)
		for (uint32_t j = i + 1; j < k; j++)
			if (idx[i] == idx[j] || idx[i] >= dir.npeers)
				__builtin_trap();
	ibc_dir_free(&dir);
	return 0;
}
