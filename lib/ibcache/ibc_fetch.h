/* A fetch: the bytes of a range of FILE, filled from -- in this order --
 * the local copy, the peers, the origin (seed 004 2.3 gfsk_readpages: the
 * gfarm buffer, then other nodes' caches, then gfsd), byte-exact whatever
 * the mix.  Unlike gfarm's asynchronous path, pages a peer could not give
 * are always read from the next source (the seed's open problem in 2.3:
 * "残りのページへの先読みは行われないことになり、性能が低下する").
 *
 * Peers: each page's block (IBC_BLOCK_DEFAULT bytes, or the directory's)
 * ranks the peers by rendezvous hashing; a page is asked of its best peer
 * first, of the next one when that peer lacks it, and so on:
 *   short reply   the page after the prefix is missing there: next peer;
 *                 the rest are asked of the same peer again
 *   ESTALE/ENOENT the peer's copy is another generation / it has none:
 *                 not asked again for this file (ENOENT with a cache: next
 *                 peer for those pages only -- the others cache too)
 *   ENOMEM        the peer is out of room for requests: asked again a
 *                 little later, a few times, before the next peer
 *   another size  the peer's copy has another size than the file's (the
 *                 size it tells in its reply, gfcc_wire.h): its pages are
 *                 not used, it is not asked again.  Where nothing here
 *                 knows the size (no --origin, --local, --size), the first
 *                 peer to tell it sets it: the range is cut there, and a
 *                 peer that does not tell it (an older server) is not used
 *   no answer     reaped after the timeout; a closed port at once: the
 *                 peer is not asked again (pages that came whole over UDP
 *                 are kept)
 * and only pages no peer gave are read from the origin.
 *
 * The range goes out in chunks (chunk_pages), each written once it is
 * whole, so memory stays bounded whatever the size.
 *
 * A cache (opts.cache, seed 004's cooperative page cache): the pages that
 * came from peers or the origin are also written into DIR/FILE, a sparse
 * copy carrying the generation in IBC_GEN_XATTR, so that an ibcache-serve
 * exporting DIR answers for them; pages not there yet are holes.  A copy
 * of another generation is replaced by a new file renamed over it, never
 * rewritten in place.  The cache is also the local copy (unless one is
 * given).  A cache whose file is the origin itself (the same inode) is
 * left alone: read as the local copy, never replaced.  With a cache, the peer that is this host (its address is
 * local) is not asked, and the blocks whose rendezvous home it is are
 * fetched first: the others then find them at their home. */
#ifndef XPRT_IBCACHE_IBC_FETCH_H
#define XPRT_IBCACHE_IBC_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ibcache/ibc_peers.h"
#include "ibcache/ibc_req.h"

struct ibc_fetch_opts {
	const char *file;		/* FILE, relative to the export */
	const char *origin;		/* the origin's copy (NULL: none, or the directory's) */
	const char *local;		/* a local copy, maybe partial (NULL: none) */
	bool gen_set;
	uint64_t gen;
	bool size_set;			/* the file's size, where no copy here says */
	uint64_t size;
	uint64_t offset;
	bool length_set;
	uint64_t length;
	const uint64_t *pages;		/* --pages: ascending page numbers, or NULL */
	uint32_t npages;
	uint64_t block;			/* rendezvous block bytes (0: directory's or 64 KiB) */
	uint32_t chunk_pages;		/* 0: 4096 */
	const char *cache;		/* an export root to keep what is fetched in, or NULL */
	struct ibc_req_opts ro;
};

/* Things a user should hear about, once each (the caller prints them). */
enum ibc_note {
	IBC_NOTE_UNRESOLVED,	/* a peer could not be resolved: detail says why */
	IBC_NOTE_SILENT,	/* no answer within the timeout */
	IBC_NOTE_REFUSED,	/* closed port */
	IBC_NOTE_STALE,		/* its copy has another generation */
	IBC_NOTE_ERROR,		/* it answered an error: detail */
	IBC_NOTE_BUSY,		/* it refused a request: out of room (ENOMEM) */
	IBC_NOTE_MTU,		/* it refused our datagram size (EMSGSIZE): asked again
				 * with datagrams of detail bytes */
	IBC_NOTE_SIZE,		/* its copy has another size than the file's: detail */
	IBC_NOTE_NOSIZE,	/* it does not tell the size, and nothing here knows it */
	IBC_NOTE_LOCAL_STALE,	/* --local has another generation: not used */
	IBC_NOTE_LOCAL_SIZE,	/* --local has another size than the file's (detail): not used */
	IBC_NOTE_CACHE,		/* the cache could not take a write: detail; not written to again */
	IBC_NOTE_CACHE_ORIGIN,	/* the cache's file (detail) is the origin: read, not written */
};
typedef void (*ibc_note_fn)(void *ctx, enum ibc_note n, const char *peer, const char *detail);
/* Writes all of buf; 0 or -errno. */
typedef int (*ibc_write_fn)(void *ctx, const void *buf, size_t len);

struct ibc_fetch_stats {
	uint64_t local_pages, peer_pages, origin_pages;
	uint64_t cached_pages;		/* written into the cache */
	uint64_t home_pages;		/* of those, fetched first as this host's blocks */
	uint64_t bytes_out;
	uint64_t fetches;
	struct xhist fetch_ns;		/* per ibc_fetch_run */
	struct ibc_req_stats req;
};

struct ibc_fetch;
/* Resolves FILE to (ino, gen) and its size, opens the copies, resolves
 * the peers.  NULL + a one-line err; *usage set when it is the
 * command line's fault (exit 2, not 1). */
struct ibc_fetch *ibc_fetch_new(const struct ibc_fetch_opts *o, const struct ibc_dir *dir,
				ibc_note_fn note, void *ctx, char *err, size_t errlen, bool *usage);
void ibc_fetch_free(struct ibc_fetch *f);	/* NULL ok */
/* One pass over the range, written through out.  0, or -errno + err. */
int ibc_fetch_run(struct ibc_fetch *f, ibc_write_fn out, void *octx, char *err, size_t errlen);
void ibc_fetch_get_stats(const struct ibc_fetch *f, struct ibc_fetch_stats *s);
/* The object as it goes on the wire. */
uint64_t ibc_fetch_ino(const struct ibc_fetch *f);
uint64_t ibc_fetch_gen(const struct ibc_fetch *f);
/* Bytes of FILE, or -1 when no copy says. */
int64_t ibc_fetch_size(const struct ibc_fetch *f);

/* "0-3,7,9-12" into ascending page numbers (malloc'd).  0, or -EINVAL
 * with the reason (not ascending, overlapping, beyond max). */
int ibc_pages_parse(const char *s, uint64_t **out, uint32_t *n, uint32_t max, char *err,
		    size_t errlen);

#endif
