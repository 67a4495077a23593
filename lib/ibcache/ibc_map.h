/* How a FILE names a gfcc object, on both ends, and which of its pages a
 * copy holds (seed 004 3.3.3: the object is found by inode number and
 * generation; gfarm_cc_find_host's gfcc_obj).
 *
 * Identity.  FILE is a path relative to the export: components split on
 * '/', empty ones and "." dropped, ".." refused anywhere (a requester can
 * only name what lies under the export, and a responder only serves what
 * it found under its root), no leading '/'.  Then
 *
 *   ino = FNV-1a 64 of the normalized path's bytes ("a/b/c")
 *   gen = the decimal value of the xattr user.ibcache.gen of the copy if
 *         it is set, else FNV-1a 64 of (size, mtime in ns) as two
 *         little-endian u64 (0 reads as 1)
 *
 * A requester takes gen from the origin's copy (or --gen); a responder
 * computes it from its own copy, and a copy whose gen differs is stale:
 * ESTALE, never its data (the seed's open problem in 3.3.3: gfarm's
 * generation mixed inode and data versions; here it is the data's).
 * Copies made with their mtime kept (cp -p, rsync -t) or tagged with the
 * xattr match the origin.
 *
 * Pages.  A copy holds page p when p * psize < its size and the bytes
 * [p * psize, min((p + 1) * psize, size)) are all data: holes (SEEK_HOLE)
 * are pages it does not have, so a sparse copy is a partial cache; with
 * resident_only also only pages in the page cache (mincore).  Bytes of the
 * last page past the size read as zeros.
 *
 * The export (responder side) indexes every regular file under its root
 * by ino, never following a symbolic link (a link out of the export must
 * not serve what lies outside it), and keeps a bounded set of them open.
 * Paths whose inos collide (FNV-1a collisions are easy to make) are not
 * served at all: the request carries the ino, not the path, so nothing
 * says which one it means.  What the responder cannot see -- a colliding
 * path outside its export, or made since its last scan -- only the
 * generation check stands against. */
#ifndef XPRT_IBCACHE_IBC_MAP_H
#define XPRT_IBCACHE_IBC_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "ibcache/gfcc_wire.h"

#define IBC_PATH_MAX	4096
#define IBC_GEN_XATTR	"user.ibcache.gen"

/* Normalizes FILE into out.  0, -EINVAL (empty, absolute, "..") or
 * -ENAMETOOLONG; err gets the reason for a user. */
int ibc_path_norm(const char *in, char *out, size_t len, char *err, size_t errlen);
uint64_t ibc_ino(const char *normpath);
uint64_t ibc_gen_hash(uint64_t size, uint64_t mtime_ns);
/* A gen value as written in the xattr or given to --gen: decimal u64.
 * 0 or -EINVAL. */
int ibc_gen_parse(const char *s, size_t len, uint64_t *gen);
/* The generation of an open copy.  0, or -errno (-EINVAL: the xattr holds
 * no number).  xattr: set when it came from IBC_GEN_XATTR. */
int ibc_gen_fd(int fd, const struct stat *st, uint64_t *gen, bool *xattr);
/* Whether now still shows the file a generation was taken from (then):
 * the same size, mtime and ctime (an xattr change moves ctime).  A copy
 * whose generation is its mtime's is read, then looked at again: one that
 * changed meanwhile may have given another generation's bytes. */
bool ibc_same_state(const struct stat *then, const struct stat *now);

/* How many pages from `first` on (at most count) the copy holds, per the
 * rule above.  -errno on I/O errors. */
int64_t ibc_pages_held(int fd, uint64_t size, uint32_t psize, uint64_t first, uint64_t count,
		       bool resident_only);
/* Reads count pages from `first` into buf (count * psize bytes), zeros
 * past the size.  0 or -errno; -ENODATA when the file ends before the
 * size (cut meanwhile: the bytes are not there, and no zeros stand in). */
int ibc_pages_read(int fd, uint64_t size, uint32_t psize, uint64_t first, uint64_t count,
		   uint8_t *buf);

/* --- the responder's export ------------------------------------------------ */

struct ibc_export_opts {
	bool resident_only;
	uint32_t max_open;	/* files kept open (0: 256) */
	uint32_t max_files;	/* indexed at most (0: 1000000) */
	uint64_t rescan_ns;	/* a miss rescans the root at most this often (0: 1 s),
				 * and no sooner than ten times what the last
				 * rescan took after its start */
	uint64_t scan_wait_ns;	/* the rescan runs on a thread of its own; the miss
				 * that started it waits this long for it (0: 20 ms),
				 * then answers ENOENT while the old index serves */
};

struct ibc_export_stats {
	uint64_t files, scans, opens, skipped;
	uint64_t root_changes;	/* the root's path named another directory */
	uint64_t collisions;	/* files of the index not served: their ino is another's too */
	bool rescanning;	/* a rescan started and not taken in yet */
};

struct ibc_export;
/* Opens and indexes ROOT.  NULL + err. */
struct ibc_export *ibc_export_open(const char *root, const struct ibc_export_opts *o, char *err,
				   size_t errlen);
void ibc_export_close(struct ibc_export *x);		/* NULL ok */
const char *ibc_export_root(const struct ibc_export *x);
void ibc_export_get_stats(const struct ibc_export *x, struct ibc_export_stats *s);
/* Two paths of the index with one ino (neither served), for the operator;
 * false when there are none.  Valid until the next call into x. */
bool ibc_export_collision(const struct ibc_export *x, const char **a, const char **b);

/* The reply's pages for q: the prefix of q's pages (in request order) this
 * export holds, read into buf (npage * psize bytes of room), and the size
 * of the copy they come from into *size.  Returns how many (0 when it
 * holds the first one not), or -ENOENT (no such object here), -ESTALE
 * (our copy has another generation), -EIO. */
int ibc_export_read(struct ibc_export *x, const struct gfcc_req *q, uint8_t *buf, uint64_t now_ns,
		    uint64_t *size);

#endif
