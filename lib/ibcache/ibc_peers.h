/* Which peers may hold a file's pages, and which one to ask for each
 * block (seed 004 4.: gfarm_cc_find_host "obj が示すファイルのキャッシュを
 * 持っているノードのIBアドレスを返す" -- gfarm only ever returned the first
 * address registered by hand; here a directory maps exports to peers).
 *
 * The directory is a YAML file:
 *
 *   block: 64k                  # optional: rendezvous block (default 64 KiB)
 *   exports:
 *     - prefix: data/big        # FILE paths at or under it ("" or "/": all)
 *       origin: /mnt/origin/big # optional: the origin copy of FILE is
 *                               # ORIGIN/<FILE with the prefix taken off>
 *       peers:
 *         - udp://10.0.0.2:7480
 *         - ud://10.0.1.3:7480
 *
 * The export with the longest matching prefix (whole path components)
 * wins.  Peers given on the command line join every export's list.
 *
 * Rendezvous (highest random weight) hashing: for block b of object ino,
 * every peer scores mix(peer, ino, b) and they are asked best first.  Each
 * block has one home among the peers, spread evenly, and removing a peer
 * moves only the blocks it was home to. */
#ifndef XPRT_IBCACHE_IBC_PEERS_H
#define XPRT_IBCACHE_IBC_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/uri.h"
#include "ibcache/ibc_map.h"

#define IBC_DEFAULT_PORT	7480
#define IBC_PEERS_MAX		64
#define IBC_EXPORTS_MAX		256
#define IBC_BLOCK_DEFAULT	(64u << 10)

struct ibc_peer {
	struct xuri u;
	char name[300];		/* canonical URI */
	uint64_t key;		/* rendezvous identity: hash of the name */
};

struct ibc_dir_export {
	char prefix[IBC_PATH_MAX];	/* normalized; "" matches everything */
	char *origin;			/* NULL: none given */
	uint32_t npeers;
	uint16_t peer[IBC_PEERS_MAX];	/* indices into ibc_dir.peers */
	int line;
};

struct ibc_dir {
	uint64_t block;			/* bytes; 0 until set */
	uint32_t npeers;
	struct ibc_peer peers[IBC_PEERS_MAX];
	uint32_t nexports;
	struct ibc_dir_export *exports;
	uint32_t ncli;			/* peers from the command line */
	uint16_t cli[IBC_PEERS_MAX];
};

void ibc_dir_init(struct ibc_dir *d);
void ibc_dir_free(struct ibc_dir *d);
/* The YAML text above (sans-I/O: the fuzzer's entry).  0, or -EINVAL with
 * "line N: reason" in err. */
int ibc_dir_parse(struct ibc_dir *d, const char *buf, size_t len, char *err, size_t errlen);
/* Reads and parses a file: err is "PATH: line N: reason". */
int ibc_dir_load(struct ibc_dir *d, const char *path, char *err, size_t errlen);
/* A peer for every export (-p).  0, -EINVAL (bad URI), -E2BIG (too many). */
int ibc_dir_add_peer(struct ibc_dir *d, const char *uri, char *err, size_t errlen);
/* A URI of a peer: udp:// or ud://, default port IBC_DEFAULT_PORT. */
int ibc_peer_parse(const char *s, struct ibc_peer *p, char *err, size_t errlen);

/* The peers (indices) to ask for FILE (normalized), the matching export's
 * then the command line's, each once; *origin the origin path of FILE
 * from the export (malloc'd, NULL when none).  Returns how many. */
uint32_t ibc_dir_find(const struct ibc_dir *d, const char *normpath, uint16_t *out,
		      char **origin);

/* --- rendezvous ------------------------------------------------------------- */
uint64_t ibc_rdv_score(uint64_t peer_key, uint64_t ino, uint64_t block);
/* Sorts idx[0..n) (peer indices) best first for (ino, block); keys[i] is
 * peer i's key.  Ties (never in practice) by index. */
void ibc_rdv_rank(const uint64_t *keys, uint16_t *idx, uint32_t n, uint64_t ino,
		  uint64_t block);

#endif
