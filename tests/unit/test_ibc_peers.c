/* The peer directory (YAML: exports, prefixes, origins, peers; errors
 * with their line) and rendezvous hashing: every peer its fair share of
 * blocks, and removing a peer moves only the blocks it was home to. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ibcache/ibc_peers.h"

static int parse(struct ibc_dir *d, const char *y, char *err)
{
	ibc_dir_init(d);
	return ibc_dir_parse(d, y, strlen(y), err, 256);
}

static void test_parse_find(void **s)
{
	static const char y[] =
		"block: 128k\n"
		"exports:\n"
		"  - prefix: /\n"
		"    peers: [udp://10.0.0.1, udp://10.0.0.2:9000]\n"
		"  - prefix: data/big\n"
		"    origin: /mnt/origin/big\n"
		"    peers:\n"
		"      - ud://10.0.1.3:7480\n"
		"      - udp://10.0.0.1:7480\n";
	struct ibc_dir d;
	uint16_t idx[IBC_PEERS_MAX];
	char err[256], *origin;
	uint32_t n;

	assert_int_equal(parse(&d, y, err), 0);
	assert_true(d.block == 128 << 10);
	assert_int_equal(d.npeers, 3);	/* udp://10.0.0.1 named twice: one peer */
	assert_string_equal(d.peers[0].name, "udp://10.0.0.1:7480");
	n = ibc_dir_find(&d, "data/big/x/y", idx, &origin);
	assert_int_equal(n, 2);
	assert_string_equal(d.peers[idx[0]].name, "ud://10.0.1.3:7480");
	assert_string_equal(origin, "/mnt/origin/big/x/y");
	free(origin);
	/* whole components: "data/bigger" is not under "data/big" */
	n = ibc_dir_find(&d, "data/bigger", idx, &origin);
	assert_int_equal(n, 2);
	assert_string_equal(d.peers[idx[1]].name, "udp://10.0.0.2:9000");
	assert_null(origin);
	/* command-line peers join every export, once */
	assert_int_equal(ibc_dir_add_peer(&d, "udp://10.0.0.9", err, 256), 0);
	assert_int_equal(ibc_dir_add_peer(&d, "udp://10.0.0.1:7480", err, 256), 0);
	n = ibc_dir_find(&d, "other", idx, &origin);
	assert_int_equal(n, 3);
	assert_string_equal(d.peers[idx[2]].name, "udp://10.0.0.9:7480");
	ibc_dir_free(&d);
}

static void test_parse_errors(void **s)
{
	static const struct { const char *y, *msg; } bad[] = {
		{ "exports: 3\n", "line 1: exports: a list" },
		{ "exports:\n  - prefix: a\n    peerz: []\n", "line 3: exports: unknown key 'peerz'" },
		{ "exports:\n  - peers: udp://h\n", "line 2: peers: a list of URIs" },
		{ "exports:\n  - peers: [tcp://h:1]\n", "a peer is udp://" },
		{ "exports:\n  - prefix: ../x\n", "'..' would leave the export" },
		{ "block: 1\n", "line 1:" },
		{ "blocks: 4k\n", "unknown key 'blocks'" },
		{ "exports: [\n", "line" },
	};
	struct ibc_dir d;
	char err[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse(&d, bad[i].y, err), -EINVAL);
		if (!strstr(err, bad[i].msg))
			fail_msg("'%s': got '%s', want '%s'", bad[i].y, err, bad[i].msg);
		ibc_dir_free(&d);
	}
	ibc_dir_init(&d);
	assert_int_equal(ibc_dir_add_peer(&d, "udp://h:0", err, 256), -EINVAL);
	assert_int_equal(ibc_dir_add_peer(&d, "rdma://h", err, 256), -EINVAL);
	assert_int_equal(ibc_dir_load(&d, "/nonexistent.yaml", err, 256), -ENOENT);
	assert_non_null(strstr(err, "/nonexistent.yaml"));
}

static void test_rendezvous(void **s)
{
	enum { NP = 5, NB = 20000 };
	uint64_t keys[NP];
	uint32_t home[NB], count[NP] = { 0 };
	uint16_t idx[NP];

	for (int i = 0; i < NP; i++) {
		char u[64];
		struct ibc_peer p;
		char err[256];

		snprintf(u, sizeof(u), "udp://10.0.0.%d", i + 1);
		assert_int_equal(ibc_peer_parse(u, &p, err, sizeof(err)), 0);
		keys[i] = p.key;
	}
	for (uint32_t b = 0; b < NB; b++) {
		for (int i = 0; i < NP; i++)
			idx[i] = (uint16_t)i;
		ibc_rdv_rank(keys, idx, NP, 0x1234, b);
		/* a ranking, each peer once, best first */
		for (int i = 1; i < NP; i++)
			assert_true(ibc_rdv_score(keys[idx[i - 1]], 0x1234, b) >=
				    ibc_rdv_score(keys[idx[i]], 0x1234, b));
		home[b] = idx[0];
		count[idx[0]]++;
	}
	/* fair: each peer within 10% of NB/NP */
	for (int i = 0; i < NP; i++)
		assert_true(count[i] > NB / NP * 9 / 10 && count[i] < NB / NP * 11 / 10);
	/* without peer 2, only its blocks find a new home */
	for (uint32_t b = 0; b < NB; b++) {
		uint16_t rest[NP - 1] = { 0, 1, 3, 4 };

		ibc_rdv_rank(keys, rest, NP - 1, 0x1234, b);
		if (home[b] != 2)
			assert_int_equal(rest[0], home[b]);
	}
	/* another object, another layout */
	for (int i = 0; i < NP; i++)
		idx[i] = (uint16_t)i;
	{
		int differ = 0;

		for (uint32_t b = 0; b < 100; b++) {
			ibc_rdv_rank(keys, idx, NP, 0x9999, b);
			differ += idx[0] != home[b];
		}
		assert_true(differ > 50);
	}
}

int main(void)
{
	const struct CMUnitTest t[] = {
		cmocka_unit_test(test_parse_find),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_rendezvous),
	};

	return cmocka_run_group_tests(t, NULL, NULL);
}
