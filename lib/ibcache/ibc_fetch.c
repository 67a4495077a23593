/* A fetch: local copy, then peers, then origin (ibc_fetch.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/parse.h"
#include "core/xtime.h"
#include "ibcache/ibc_fetch.h"

enum { P_NEED = 0, P_FLIGHT = 1, P_DONE = 2 };
/* Why the last peer asked for a page did not give it, for the line a
 * fetch that ends without the page prints. */
enum { WHY_MISS = 0, WHY_SIZE = 1, WHY_NOSIZE = 2, WHY_BUSY = 3 };
#define TRIES_MAX	3	/* asks of one peer for a page before the next */
#define FLIGHTS		(3 * IBC_DEPTH_MAX)
#define CACHE_RUN	16	/* pages per write into the cache */
/* With a cache: a page's home that lacks it is asked again this often, this
 * many times, before the next peer (it is likely fetching it right now) */
#define HOME_WAIT_NS	(2 * XTIME_NS_PER_MS)
#define HOME_WAITS	250
/* A peer out of room for a request (ENOMEM: its replies to this host,
 * ours too, hold the host's share) is asked again after this, doubled at
 * each try up to 320 ms: for BUSY_GIVE_UP_NS from the first ENOMEM, or
 * while requests of ours to it are still out (their replies drain: the
 * room is coming), for BUSY_MAX_NS at most */
#define BUSY_WAIT_NS	(5 * XTIME_NS_PER_MS)
#define BUSY_GIVE_UP_NS	(2 * XTIME_NS_PER_S)
#define BUSY_MAX_NS	(10 * XTIME_NS_PER_S)

struct flight {
	bool used;
	int peer;
	uint32_t n;
	uint32_t idx[GFCC_PAGES_MAX];	/* chunk positions of the pages */
};

struct ibc_fetch {
	struct ibc_fetch_opts o;
	char path[IBC_PATH_MAX];
	uint64_t ino, gen;
	bool have_gen;
	int64_t size;			/* -1: unknown */
	int size_peer;			/* the peer that told it, or -1 */
	int size_other;			/* a peer that told another one, or -1 */
	uint64_t other_size;
	int origin_fd, local_fd;
	struct stat origin_st, local_st;	/* as their generations were taken */
	bool origin_xa, local_xa;		/* ... from their tags */
	const char *local_name;		/* what local_fd reads, for messages */
	const char *origin_name;	/* --origin, or the directory's (dir_origin) */
	char *dir_origin;
	int64_t local_size;
	/* --cache: DIR/FILE open for writing (cache_fd), its directory and
	 * name (to remove it when a write went wrong) */
	int cache_fd, cache_dfd;
	char cache_name[NAME_MAX + 1];
	bool caching;
	int self;			/* the peer that is this host, or -1 */
	uint32_t psize;
	uint64_t block;
	/* what to output: a byte range, or a list of whole pages */
	uint64_t off, end;		/* range mode */
	uint64_t npages;		/* pages in all */
	struct ibc_req *rq;
	int npeers;			/* ibc_req peer ids 0..npeers-1 */
	uint64_t keys[IBC_PEERS_MAX];
	bool usable[IBC_PEERS_MAX];
	uint32_t mtu_said[IBC_PEERS_MAX];	/* the datagram size last said (IBC_NOTE_MTU) */
	uint8_t noted[IBC_PEERS_MAX];	/* note(): 1 busy said, 2 another said */
	bool hslow[IBC_PEERS_MAX];	/* a home that made a page wait out: not waited for again */
	ibc_note_fn note;
	void *nctx;
	/* the chunk */
	uint32_t chunk;
	uint8_t *buf;
	uint64_t *pg;
	uint8_t *state, *pos, *tries;
	uint8_t *fromloc;		/* the page came from the local copy */
	uint8_t *hwait;			/* times its home was asked again */
	uint8_t *why, *whyp;		/* WHY_*, and of which peer */
	uint64_t *not_before;		/* not asked again before then */
	uint64_t *busy_since;		/* its peer's first ENOMEM, or 0 */
	uint16_t *rank;			/* chunk x npeers */
	uint8_t **dst;			/* scratch for a request */
	uint64_t *reqpg;
	struct flight fl[FLIGHTS];
	struct ibc_fetch_stats st;
};

int ibc_pages_parse(const char *s, uint64_t **out, uint32_t *n, uint32_t max, char *err,
		    size_t errlen)
{
	uint64_t *v = NULL, next = 0;
	uint32_t cnt = 0, cap = 0;
	char *dup = strdup(s), *save = NULL, *tok;
	const char *es;

	if (!dup) {
		xerr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *dash = strchr(tok, '-');
		uint64_t a, b;

		if (dash)
			*dash = 0;
		if (xparse_u64(tok, 0, UINT64_MAX / 65536, &a, &es) < 0 ||
		    (dash && xparse_u64(dash + 1, 0, UINT64_MAX / 65536, &b, &es) < 0)) {
			xerr(err, errlen, "'%s': not a page number or range N-M (%s)", s, es);
			goto bad;
		}
		if (!dash)
			b = a;
		if (b < a || (cnt && a < next)) {
			xerr(err, errlen, "'%s': pages must be ascending, without overlaps", s);
			goto bad;
		}
		if (b - a >= max || cnt + (b - a) >= max) {
			xerr(err, errlen, "'%s': more than %u pages", s, max);
			goto bad;
		}
		for (uint64_t p = a; p <= b; p++) {
			if (cnt == cap) {
				uint64_t *nv;

				cap = cap ? 2 * cap : 64;
				if (!(nv = realloc(v, cap * sizeof(*v)))) {
					xerr(err, errlen, "out of memory");
					goto bad;
				}
				v = nv;
			}
			v[cnt++] = p;
		}
		next = b + 1;
	}
	free(dup);
	if (!cnt) {
		xerr(err, errlen, "'%s': no pages", s);
		free(v);
		return -EINVAL;
	}
	*out = v;
	*n = cnt;
	return 0;
bad:
	free(dup);
	free(v);
	return -EINVAL;
}

/* One note a peer, the first -- but a busy peer's, said once too, does not
 * hide why it was dropped later. */
static void note(struct ibc_fetch *f, int peer, enum ibc_note n, const char *detail)
{
	if (peer >= 0 && n != IBC_NOTE_MTU) {	/* a few steps down: each said */
		uint8_t bit = n == IBC_NOTE_BUSY ? 1 : 2;

		if (f->noted[peer] & bit)
			return;
		f->noted[peer] |= bit;
	}
	if (f->note)
		f->note(f->nctx, n, peer >= 0 ? ibc_req_peer_name(f->rq, peer) : NULL, detail);
}

static int open_copy(const char *path, struct stat *st, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, st) < 0) {
		xerr(err, errlen, "%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (!S_ISREG(st->st_mode)) {
		xerr(err, errlen, "%s: not a regular file", path);
		close(fd);
		return -1;
	}
	return fd;
}

/* The copies, the generation and the size. */
static int open_copies(struct ibc_fetch *f, const char *origin, char *err, size_t errlen,
		       bool *usage)
{
	char det[IBC_PATH_MAX + 64];
	struct stat st;
	uint64_t g;
	bool xa;
	int rc;

	if (origin) {
		if ((f->origin_fd = open_copy(origin, &st, err, errlen)) < 0)
			return -ENOENT;
		f->size = st.st_size;
		f->origin_st = st;
		if ((rc = ibc_gen_fd(f->origin_fd, &st, &g, &xa)) && !f->have_gen) {
			xerr(err, errlen, "%s: %s: %s", origin, IBC_GEN_XATTR,
			     rc == -EINVAL ? "not a decimal number" : strerror(-rc));
			return rc;
		}
		f->origin_xa = !rc && xa;
		if (!f->have_gen) {
			f->gen = g;
			f->have_gen = true;
		}
	}
	if (f->o.size_set) {
		if (f->size >= 0 && (uint64_t)f->size != f->o.size) {
			xerr(err, errlen, "--size %llu: %s has %lld bytes",
			     (unsigned long long)f->o.size, origin, (long long)f->size);
			*usage = true;
			return -EINVAL;
		}
		f->size = (int64_t)f->o.size;
	}
	if (!f->o.local)
		return 0;
	if ((f->local_fd = open_copy(f->o.local, &st, err, errlen)) < 0)
		return -ENOENT;
	f->local_size = st.st_size;
	f->local_st = st;
	rc = ibc_gen_fd(f->local_fd, &st, &g, &xa);
	f->local_xa = !rc && xa;
	if (rc || (f->have_gen && g != f->gen)) {
		/* another generation's bytes must not go out as this one's */
		note(f, -1, IBC_NOTE_LOCAL_STALE, f->o.local);
		goto unused;
	}
	if (f->size >= 0 && f->local_size != f->size) {
		/* the same tag on another size: a copy cut short (its last
		 * page would read as zeros) or one the tag lies about */
		snprintf(det, sizeof(det), "%s: %lld bytes where the file has %lld", f->o.local,
			 (long long)f->local_size, (long long)f->size);
		note(f, -1, IBC_NOTE_LOCAL_SIZE, det);
		goto unused;
	}
	if (!f->have_gen) {
		f->gen = g;
		f->have_gen = true;
	}
	if (f->size < 0)
		f->size = f->local_size;
	f->local_name = f->o.local;
	return 0;
unused:
	close(f->local_fd);
	f->local_fd = -1;
	return 0;
}

/* Whether u is this host's own server: an address of one of our
 * interfaces (loopback left out: several servers share it in tests and
 * benches) whose UDP port is taken here. */
static bool is_self(const struct xuri *u)
{
	struct addrinfo hints = { .ai_socktype = SOCK_DGRAM, .ai_flags = AI_NUMERICSERV }, *ai;
	char port[8];
	bool self = false;

	if (u->scheme != XURI_UDP)
		return false;
	snprintf(port, sizeof(port), "%u", u->port);
	if (getaddrinfo(u->host, port, &hints, &ai))
		return false;
	for (struct addrinfo *a = ai; a && !self; a = a->ai_next) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)a->ai_addr;
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)a->ai_addr;
		struct sockaddr_storage any;
		int fd;

		if ((a->ai_family == AF_INET && (ntohl(s4->sin_addr.s_addr) >> 24) == 127) ||
		    (a->ai_family == AF_INET6 && (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr) ||
						   IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))) ||
		    (a->ai_family != AF_INET && a->ai_family != AF_INET6))
			continue;
		fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		/* the address is ours when port 0 binds to it; the server is
		 * when its port is in use */
		memcpy(&any, a->ai_addr, a->ai_addrlen);
		if (a->ai_family == AF_INET)
			((struct sockaddr_in *)&any)->sin_port = 0;
		else
			((struct sockaddr_in6 *)&any)->sin6_port = 0;
		if (bind(fd, (struct sockaddr *)&any, a->ai_addrlen) == 0) {
			int fd2 = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);

			self = fd2 >= 0 && bind(fd2, a->ai_addr, a->ai_addrlen) < 0 &&
			       errno == EADDRINUSE;
			if (fd2 >= 0)
				close(fd2);
		}
		close(fd);
	}
	freeaddrinfo(ai);
	return self;
}

static int add_peers(struct ibc_fetch *f, const struct ibc_dir *dir, const uint16_t *idx,
		     uint32_t n, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct ibc_peer *p = &dir->peers[idx[i]];
		char why[512];
		int id = ibc_req_add_peer(f->rq, &p->u, why, sizeof(why));

		if (id == -ENOMEM) {
			xerr(err, errlen, "out of memory");
			return id;
		}
		if (id < 0) {
			/* ud:// resolution asks the peer: a down one fails here */
			if (f->note)
				f->note(f->nctx, IBC_NOTE_UNRESOLVED, p->name, why);
			continue;
		}
		f->keys[id] = p->key;
		f->usable[id] = true;
		f->npeers = id + 1;
		/* with a cache, this host's own server holds what the cache
		 * does: never asked over the network (unless the cache could
		 * not be had: then it may have it in its export) */
		if (f->o.cache && f->local_fd >= 0 && f->self < 0 && is_self(&p->u)) {
			f->self = id;
			f->usable[id] = false;
		}
	}
	return 0;
}

/* The directory of rel under root, each component opened without
 * following a symbolic link (a link must not lead the cache out of its
 * root), made where missing.  An fd, or -errno. */
static int cache_dir(const char *root, const char *rel, char *name, size_t namelen)
{
	char buf[IBC_PATH_MAX];
	char *s = buf, *slash;
	int dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	snprintf(buf, sizeof(buf), "%s", rel);
	while (dfd >= 0 && (slash = strchr(s, '/'))) {
		int nd;

		*slash = 0;
		if (mkdirat(dfd, s, 0755) < 0 && errno != EEXIST) {
			nd = -1;
		} else {
			struct stat st;

			nd = openat(dfd, s, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			/* a link is not followed out of the cache: say so */
			if (nd < 0 && (errno == ENOTDIR || errno == ELOOP) &&
			    fstatat(dfd, s, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
				errno = ELOOP;
		}
		close(dfd);
		dfd = nd;
		s = slash + 1;
	}
	if (dfd < 0)
		return -errno;
	if ((size_t)snprintf(name, namelen, "%s", s) >= namelen) {
		close(dfd);
		return -ENAMETOOLONG;
	}
	return dfd;
}

/* open_cache's new sparse file of this generation, made under a
 * temporary name and renamed into place. */
static int new_cache(struct ibc_fetch *f, char *err, size_t errlen)
{
	char tmp[NAME_MAX + 1], gen[24];
	int fd, rc;

	for (int i = 0;; i++) {
		snprintf(tmp, sizeof(tmp), ".%.200s.ibcache-%08x", f->cache_name,
			 (unsigned)(xtime_ns() ^ (uint64_t)getpid() * 2654435761u) + (unsigned)i);
		fd = openat(f->cache_dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd >= 0 || errno != EEXIST || i == 100)
			break;
	}
	if (fd < 0) {
		xerr(err, errlen, "--cache %s: %s: %s", f->o.cache, f->path, strerror(errno));
		return -errno;
	}
	snprintf(gen, sizeof(gen), "%llu", (unsigned long long)f->gen);
	if (fsetxattr(fd, IBC_GEN_XATTR, gen, strlen(gen), 0) < 0) {
		rc = -errno;
		xerr(err, errlen, "--cache %s: %s: %s%s", f->o.cache, f->path, strerror(errno),
		     errno == ENOTSUP ? " (the generation is kept in the " IBC_GEN_XATTR
					" attribute; this file system has no user attributes)" : "");
		goto fail;
	}
	if (ftruncate(fd, f->size) < 0) {
		rc = -errno;
		xerr(err, errlen, "--cache %s: %s: %s", f->o.cache, f->path, strerror(errno));
		goto fail;
	}
	/* pages not fetched must read as holes, or a server would serve
	 * zeros: a file system that cannot say so cannot hold a cache */
	if (f->size && lseek(fd, 0, SEEK_DATA) >= 0) {
		rc = -EOPNOTSUPP;
		xerr(err, errlen, "--cache %s: this file system does not report holes (SEEK_DATA), "
		     "which a partial cache needs", f->o.cache);
		goto fail;
	}
	if (renameat(f->cache_dfd, tmp, f->cache_dfd, f->cache_name) < 0) {
		rc = -errno;
		xerr(err, errlen, "--cache %s: %s: %s", f->o.cache, f->path, strerror(errno));
		goto fail;
	}
	f->cache_fd = fd;
	f->caching = true;
	return 0;
fail:
	unlinkat(f->cache_dfd, tmp, 0);
	close(fd);
	return rc;
}

/* --cache DIR: DIR/FILE of this generation, opened for writing.  One of
 * another generation (or size), or none, is replaced by a new sparse file
 * with the generation set, renamed into place: a server that has the old
 * one open keeps reading the old one, and none ever finds this
 * generation's name on another generation's bytes. */
static int open_cache(struct ibc_fetch *f, char *err, size_t errlen, bool *usage)
{
	char det[2 * IBC_PATH_MAX + 8];
	struct stat st, ost;
	sigset_t stop, old;
	uint64_t g;
	bool xa;
	int fd, rc;

	if (f->o.local) {
		xerr(err, errlen, "--cache is the local copy: not with --local");
		*usage = true;
		return -EINVAL;
	}
	if (f->size < 0 || !f->have_gen) {
		xerr(err, errlen, "--cache needs the size and generation of %s: give --origin, "
		     "or --gen and --size", f->path);
		*usage = true;
		return -EINVAL;
	}
	f->cache_dfd = cache_dir(f->o.cache, f->path, f->cache_name, sizeof(f->cache_name));
	if (f->cache_dfd < 0) {
		xerr(err, errlen, "--cache %s: %s: %s", f->o.cache, f->path,
		     f->cache_dfd == -ELOOP ? "a symbolic link on the way (not followed)"
					    : strerror(-f->cache_dfd));
		return f->cache_dfd;
	}
	/* The origin may be the very file the cache would hold (--origin
	 * DIR/FILE, or a hard link to it).  Without the generation tag it
	 * looks like another generation's copy, and the new sparse file
	 * renamed over it would destroy the only whole copy.  It is whole
	 * already: it is read as the local copy, and nothing is written. */
	if (f->origin_fd >= 0 && fstat(f->origin_fd, &ost) == 0 &&
	    fstatat(f->cache_dfd, f->cache_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    st.st_dev == ost.st_dev && st.st_ino == ost.st_ino) {
		snprintf(det, sizeof(det), "%s/%s", f->o.cache, f->path);
		note(f, -1, IBC_NOTE_CACHE_ORIGIN, det);
		return 0;
	}
	/* (O_NONBLOCK: a FIFO or a device under that name is not waited on) */
	fd = openat(f->cache_dfd, f->cache_name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == f->size &&
	    ibc_gen_fd(fd, &st, &g, &xa) == 0 && xa && g == f->gen) {
		f->cache_fd = fd;
		f->caching = true;
		return 0;
	}
	if (fd >= 0)
		close(fd);
	/* a stop signal between the temporary file's creation and its
	 * rename or removal would leave it behind in an export: the signal
	 * waits until that is done (and then does what it does) */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGHUP);
	sigaddset(&stop, SIGQUIT);
	pthread_sigmask(SIG_BLOCK, &stop, &old);
	rc = new_cache(f, err, errlen);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/* What to output, checked against the size where one is known. */
static int set_range(struct ibc_fetch *f, char *err, size_t errlen, bool *usage)
{
	const struct ibc_fetch_opts *o = &f->o;
	/* every page's byte offset goes on the wire as an off_t (gfcc_obj's
	 * int64): pages [0, lim) */
	uint64_t lim = (uint64_t)INT64_MAX / f->psize;

	if (o->pages) {
		if (o->pages[o->npages - 1] >= lim) {
			xerr(err, errlen, "--pages: page %llu ends past byte %llu (the end of the last "
			     "whole page below 2^63)", (unsigned long long)o->pages[o->npages - 1],
			     (unsigned long long)(lim * f->psize));
			*usage = true;
			return -EINVAL;
		}
		if (f->size >= 0 && o->pages[o->npages - 1] >= ((uint64_t)f->size + f->psize - 1) / f->psize) {
			xerr(err, errlen,
			     "--pages: page %llu is past the end of %s (%lld bytes, %llu pages)",
			     (unsigned long long)o->pages[o->npages - 1], f->path, (long long)f->size,
			     (unsigned long long)(((uint64_t)f->size + f->psize - 1) / f->psize));
			*usage = true;
			return -EINVAL;
		}
		f->npages = o->npages;
		return 0;
	}
	if (!o->length_set && f->size < 0) {
		xerr(err, errlen,
		     "the size of %s is unknown without --origin or --local: give --length or --pages",
		     f->path);
		*usage = true;
		return -EINVAL;
	}
	f->off = o->offset;
	f->end = !o->length_set ? (uint64_t)f->size
		 : o->offset > UINT64_MAX - o->length ? UINT64_MAX : o->offset + o->length;
	if (f->size >= 0 && f->end > (uint64_t)f->size)
		f->end = (uint64_t)f->size;	/* like read(2): up to the end */
	if (f->off > f->end)
		f->off = f->end;
	if (f->end > f->off && (f->end - 1) / f->psize >= lim) {
		xerr(err, errlen, "--offset + --length: the range ends at byte %llu, past %llu "
		     "(the end of the last whole page below 2^63)", (unsigned long long)f->end,
		     (unsigned long long)(lim * f->psize));
		*usage = true;
		return -EINVAL;
	}
	f->npages = f->end > f->off ? (f->end - 1) / f->psize - f->off / f->psize + 1 : 0;
	return 0;
}

struct ibc_fetch *ibc_fetch_new(const struct ibc_fetch_opts *o, const struct ibc_dir *dir,
				ibc_note_fn nfn, void *ctx, char *err, size_t errlen, bool *usage)
{
	struct ibc_fetch *f = calloc(1, sizeof(*f));
	uint16_t idx[IBC_PEERS_MAX];
	char *origin = NULL;
	struct stat cst;
	uint32_t np;

	*usage = false;
	if (!f) {
		xerr(err, errlen, "out of memory");
		return NULL;
	}
	f->o = *o;
	f->origin_fd = f->local_fd = f->cache_fd = f->cache_dfd = -1;
	f->self = -1;
	f->size = f->local_size = -1;
	f->size_peer = f->size_other = -1;
	f->note = nfn;
	f->nctx = ctx;
	f->psize = o->ro.psize ? o->ro.psize : 4096;
	f->o.ro.psize = f->psize;
	f->chunk = o->chunk_pages ? o->chunk_pages : 4096;
	if (ibc_path_norm(o->file, f->path, sizeof(f->path), err, errlen)) {
		*usage = true;
		goto fail;
	}
	f->ino = ibc_ino(f->path);
	f->have_gen = o->gen_set;
	f->gen = o->gen;
	np = dir ? ibc_dir_find(dir, f->path, idx, &origin) : 0;
	f->dir_origin = origin;
	origin = NULL;
	f->origin_name = o->origin ? o->origin : f->dir_origin;
	if (open_copies(f, f->origin_name, err, errlen, usage))
		goto fail;
	if (np && !f->have_gen) {
		xerr(err, errlen,
		     "peers need the generation of %s: give --origin, --local or --gen", f->path);
		*usage = true;
		goto fail;
	}
	if (set_range(f, err, errlen, usage))
		goto fail;
	/* a directory that is not there is the user's mistake: said, and
	 * nothing is fetched; what goes wrong inside it is a note */
	if (o->cache && stat(o->cache, &cst) < 0) {
		xerr(err, errlen, "--cache %s: %s", o->cache, strerror(errno));
		goto fail;
	}
	if (o->cache && !S_ISDIR(cst.st_mode)) {
		xerr(err, errlen, "--cache %s: %s", o->cache, strerror(ENOTDIR));
		goto fail;
	}
	if (o->cache && open_cache(f, err, errlen, usage)) {
		if (*usage)
			goto fail;
		/* (a read-only file system, no permission...) the output is
		 * whole all the same, as when the cache fills up later */
		note(f, -1, IBC_NOTE_CACHE, strncmp(err, "--cache ", 8) ? err : err + 8);
		err[0] = 0;
	} else if (o->cache) {
		/* the pages it has are read from it first (the origin
		 * itself when the cache's file is the origin) */
		if (f->local_fd < 0) {
			f->local_fd = dup(f->caching ? f->cache_fd : f->origin_fd);
			f->local_name = f->caching ? "the cache" : f->origin_name;
			f->local_size = f->size;
			/* the cache is written here, under its tag; the origin
			 * is looked at as when it is read as the origin */
			f->local_xa = f->caching || f->origin_xa;
			f->local_st = f->origin_st;
			if (f->local_fd < 0)
				goto nomem;
		}
	}
	f->block = o->block ? o->block : dir && dir->block ? dir->block : IBC_BLOCK_DEFAULT;
	if (f->block < f->psize)
		f->block = f->psize;
	if (!(f->rq = ibc_req_new(&f->o.ro)))
		goto nomem;
	if (add_peers(f, dir, idx, np, err, errlen))
		goto fail;
	f->buf = aligned_alloc(4096, (size_t)f->chunk * f->psize);
	f->pg = calloc(f->chunk, sizeof(*f->pg));
	f->state = calloc(f->chunk, 7);
	f->not_before = calloc(f->chunk, sizeof(*f->not_before));
	f->busy_since = calloc(f->chunk, sizeof(*f->busy_since));
	f->rank = calloc((size_t)f->chunk * (f->npeers ? f->npeers : 1), sizeof(*f->rank));
	f->dst = calloc(GFCC_PAGES_MAX, sizeof(*f->dst));
	f->reqpg = calloc(GFCC_PAGES_MAX, sizeof(*f->reqpg));
	if (!f->buf || !f->pg || !f->state || !f->rank || !f->dst || !f->reqpg || !f->not_before ||
	    !f->busy_since)
		goto nomem;
	f->pos = f->state + f->chunk;
	f->tries = f->pos + f->chunk;
	f->fromloc = f->tries + f->chunk;
	f->hwait = f->fromloc + f->chunk;
	f->why = f->hwait + f->chunk;
	f->whyp = f->why + f->chunk;
	/* ud:// pages land in the chunk straight from the device */
	if (f->npeers && ibc_req_register(f->rq, f->buf, (size_t)f->chunk * f->psize, err, errlen))
		goto fail;
	xhist_reset(&f->st.fetch_ns);
	free(origin);
	return f;
nomem:
	xerr(err, errlen, "out of memory");
fail:
	free(origin);
	ibc_fetch_free(f);
	return NULL;
}

void ibc_fetch_free(struct ibc_fetch *f)
{
	if (!f)
		return;
	ibc_req_free(f->rq);
	if (f->origin_fd >= 0)
		close(f->origin_fd);
	if (f->local_fd >= 0)
		close(f->local_fd);
	if (f->cache_fd >= 0)
		close(f->cache_fd);
	if (f->cache_dfd >= 0)
		close(f->cache_dfd);
	free(f->dir_origin);
	free(f->buf);
	free(f->pg);
	free(f->state);
	free(f->not_before);
	free(f->busy_since);
	free(f->rank);
	free(f->dst);
	free(f->reqpg);
	free(f);
}

uint64_t ibc_fetch_ino(const struct ibc_fetch *f) { return f->ino; }
uint64_t ibc_fetch_gen(const struct ibc_fetch *f) { return f->gen; }
int64_t ibc_fetch_size(const struct ibc_fetch *f) { return f->size; }

/* --- one chunk ------------------------------------------------------------ */

/* Whether requests of ours to peer are out. */
static bool asking(const struct ibc_fetch *f, int peer)
{
	for (unsigned k = 0; k < FLIGHTS; k++)
		if (f->fl[k].used && f->fl[k].peer == peer)
			return true;
	return false;
}

static uint8_t *page_buf(struct ibc_fetch *f, uint32_t i)
{
	return f->buf + (size_t)i * f->psize;
}

/* A copy that could not be read.  One that ends before the size it had
 * when the fetch began was cut meanwhile: its missing bytes would have
 * gone out as zeros under this generation's name. */
static int read_failed(char *err, size_t errlen, const char *name, int rc, int64_t size)
{
	if (rc == -ENODATA)
		xerr(err, errlen, "%s: file shrank during the fetch (%lld bytes expected)", name,
		     (long long)size);
	else
		xerr(err, errlen, "%s: read: %s", name, strerror(-rc));
	return rc;
}

/* After a read of a copy whose generation is its mtime's (xa false): one
 * written meanwhile (in place, or cut and grown again) may have given
 * another generation's bytes, neither output nor cached under this one's
 * name.  0, or -ESTALE said. */
static int check_unchanged(struct ibc_fetch *f, int fd, const struct stat *then, bool xa,
			   const char *name, char *err, size_t errlen)
{
	struct stat now;

	if (xa || (fstat(fd, &now) == 0 && ibc_same_state(then, &now)))
		return 0;
	xerr(err, errlen, "%s: changed during the fetch (its bytes are no longer those of "
	     "generation %llu)", name, (unsigned long long)f->gen);
	return -ESTALE;
}

/* Pages of the local copy: runs of data, holes skipped with SEEK_DATA. */
static int fill_local(struct ibc_fetch *f, uint32_t n, char *err, size_t errlen)
{
	const char *name = f->local_name;
	int rc;

	for (uint32_t i = 0; i < n;) {
		uint32_t run = 1;
		int64_t held;

		while (i + run < n && f->pg[i + run] == f->pg[i] + run)
			run++;
		held = ibc_pages_held(f->local_fd, (uint64_t)f->local_size, f->psize, f->pg[i], run,
				      false);
		if (held < 0)
			return read_failed(err, errlen, name, (int)held, f->local_size);
		if (held && (rc = ibc_pages_read(f->local_fd, (uint64_t)f->local_size, f->psize,
						 f->pg[i], (uint64_t)held, page_buf(f, i))))
			return read_failed(err, errlen, name, rc, f->local_size);
		if (held && (rc = check_unchanged(f, f->local_fd, &f->local_st, f->local_xa, name,
						  err, errlen)))
			return rc;
		for (int64_t k = 0; k < held; k++) {
			f->state[i + k] = P_DONE;
			f->fromloc[i + k] = 1;
		}
		f->st.local_pages += (uint64_t)held;
		i += (uint32_t)held;
		if ((uint64_t)held < run) {
			/* a hole: on to where the data starts again */
			off_t d = lseek(f->local_fd, (off_t)(f->pg[i] * f->psize), SEEK_DATA);
			uint64_t skip_to = d < 0 ? UINT64_MAX : (uint64_t)d / f->psize;

			i++;
			while (i < n && f->pg[i] < skip_to)
				i++;
		}
	}
	return 0;
}

static int candidate(struct ibc_fetch *f, uint32_t i)
{
	const uint16_t *r = &f->rank[(size_t)i * f->npeers];

	while (f->pos[i] < f->npeers && !f->usable[r[f->pos[i]]])
		f->pos[i]++;
	return f->pos[i] < f->npeers ? r[f->pos[i]] : -1;
}

static void next_peer(struct ibc_fetch *f, uint32_t i)
{
	f->pos[i]++;
	f->tries[i] = 0;
	f->busy_since[i] = 0;
}

static void peer_gone(struct ibc_fetch *f, int peer, enum ibc_note n, const char *detail)
{
	f->usable[peer] = false;
	note(f, peer, n, detail);
}

/* A miss at the page's home (a partial copy, or none yet) while every host
 * caches what it fetches: the home is probably fetching it now, or about
 * to; asked again shortly, for up to half a second.  A home that lets a
 * page wait that long is not waited for again in this fetch (it does not
 * fetch this file), so the wait costs a fetch half a second at most per
 * such host.  Whether it waits. */
static bool home_wait(struct ibc_fetch *f, uint32_t i, int peer, uint64_t now)
{
	if (!f->caching || f->rank[(size_t)i * f->npeers] != peer || f->hslow[peer])
		return false;
	if (f->hwait[i] >= HOME_WAITS) {
		f->hslow[peer] = true;
		return false;
	}
	f->hwait[i]++;
	f->not_before[i] = now + HOME_WAIT_NS;
	return true;
}

/* Beyond the end of the file, as far as it is known. */
static bool past_end(const struct ibc_fetch *f, uint64_t page)
{
	return f->size >= 0 && page * f->psize >= (uint64_t)f->size;
}

/* The size a peer told where nothing else did: the range ends there. */
static void learn_size(struct ibc_fetch *f, uint64_t size, int peer)
{
	f->size = (int64_t)size;
	f->size_peer = peer;
	if (f->o.pages)
		return;	/* pages past it are an error (fill) */
	if (f->end > size)
		f->end = size;
	if (f->off > f->end)
		f->off = f->end;
	f->npages = f->end > f->off ? (f->end - 1) / f->psize - f->off / f->psize + 1 : 0;
}

/* What a reply says of the file's size decides whether its pages may be
 * used (gfcc_wire.h: the responder tells the size of its copy).  A copy
 * of another size than the file's has the same generation tag on other
 * bytes, or was cut short: its last page would pass for whole, zeros
 * and all.  A peer that tells nothing (an older server) is trusted only
 * where the size is known here, to cut its last page.  Returns 1 (take
 * them), 0 (the peer's pages are not used: next peer, *why says why), or
 * -1 (its response was lost: nothing known, ask again). */
static int size_ok(struct ibc_fetch *f, const struct ibc_done *d, int peer, uint8_t *why)
{
	char det[160];

	if (d->err)
		return 1;	/* nothing to take */
	/* an empty reply tells it too: pages asked for past the end */
	if (d->has_size) {
		if (f->size < 0)
			learn_size(f, d->size, peer);
		if ((uint64_t)f->size == d->size)
			return 1;
		/* two peers, two sizes, nothing here to tell which is right:
		 * the fetch cannot promise either (fill says so) */
		if (f->size_peer >= 0 && f->size_other < 0) {
			f->size_other = peer;
			f->other_size = d->size;
		}
		snprintf(det, sizeof(det), "%llu bytes where the file has %lld",
			 (unsigned long long)d->size, (long long)f->size);
		peer_gone(f, peer, IBC_NOTE_SIZE, det);
		*why = WHY_SIZE;
		return 0;
	}
	if (!d->nok || f->size >= 0)
		return 1;
	if (!d->answered)
		return -1;
	peer_gone(f, peer, IBC_NOTE_NOSIZE, NULL);
	*why = WHY_NOSIZE;
	return 0;
}

static void on_done(struct ibc_fetch *f, const struct ibc_done *d)
{
	struct flight *fl = &f->fl[d->tag];
	int peer = fl->peer, take;
	uint64_t now = xtime_ns();
	uint8_t why = WHY_MISS;
	bool smaller = false;
	char det[128];
	uint32_t mtu;

	fl->used = false;
	take = size_ok(f, d, peer, &why);
	switch (d->err) {
	case 0: case ENOENT: case ETIMEDOUT: case -ETIMEDOUT:
		break;
	case EMSGSIZE:
		/* its --mtu is below our path's: smaller datagrams, again */
		if ((mtu = ibc_req_lower_mtu(f->rq, peer, d->mtu))) {
			snprintf(det, sizeof(det), "%u", mtu);
			if (mtu < f->mtu_said[peer] || !f->mtu_said[peer])
				note(f, peer, IBC_NOTE_MTU, det);
			f->mtu_said[peer] = mtu;
			smaller = true;
			break;
		}
		snprintf(det, sizeof(det), "%s", strerror(EMSGSIZE));
		peer_gone(f, peer, IBC_NOTE_ERROR, det);
		break;
	case ENOMEM:
		/* busy with others' requests, or ours: a while later, again */
		note(f, peer, IBC_NOTE_BUSY, NULL);
		why = WHY_BUSY;
		break;
	case ESTALE:
		peer_gone(f, peer, IBC_NOTE_STALE, NULL);
		break;
	case -ECONNREFUSED:
		peer_gone(f, peer, IBC_NOTE_REFUSED, NULL);
		break;
	default:
		snprintf(det, sizeof(det), "%s", strerror(d->err < 0 ? -d->err : d->err));
		if (d->err > 0)
			peer_gone(f, peer, IBC_NOTE_ERROR, det);
		break;
	}
	/* a plain miss: no need to say; but where hosts cache what they
	 * fetch, the peer may have the file a moment later */
	if (d->err == ENOENT && !f->caching)
		f->usable[peer] = false;
	if (d->err == -ETIMEDOUT && !d->nok) {
		snprintf(det, sizeof(det), "%llu ms",
			 (unsigned long long)(f->o.ro.timeout_ns / XTIME_NS_PER_MS));
		peer_gone(f, peer, IBC_NOTE_SILENT, det);
	}
	for (uint32_t j = 0; j < fl->n; j++) {
		uint32_t i = fl->idx[j];

		if (j < d->taken && ibc_done_ok(d, j) && take > 0) {
			f->state[i] = P_DONE;
			f->st.peer_pages++;
			continue;
		}
		f->state[i] = P_NEED;
		if (j >= d->taken || smaller)
			continue;		/* smaller: the same peer again */
		if (take == 0) {
			f->why[i] = why;
			f->whyp[i] = (uint8_t)peer;
			next_peer(f, i);
		} else if (take < 0)
			f->tries[i]++;		/* as if lost: the response was */
		else if (d->err == ENOMEM) {
			f->why[i] = why;
			f->whyp[i] = (uint8_t)peer;
			if (!f->busy_since[i])
				f->busy_since[i] = now;
			if (now - f->busy_since[i] >= BUSY_MAX_NS ||
			    (now - f->busy_since[i] >= BUSY_GIVE_UP_NS && !asking(f, peer))) {
				next_peer(f, i);
				continue;
			}
			/* as long again as it has been busy: doubling */
			f->not_before[i] = now + (now - f->busy_since[i] < BUSY_WAIT_NS ? BUSY_WAIT_NS
						  : now - f->busy_since[i] > 64 * BUSY_WAIT_NS
						  ? 64 * BUSY_WAIT_NS : now - f->busy_since[i]);
			continue;
		} else if ((d->err == 0 && j == d->reply_pages) || (d->err == ENOENT && f->caching)) {
			if (!home_wait(f, i, peer, now))
				next_peer(f, i);	/* the first page it lacks */
		} else if (d->err == 0)
			;			/* after the prefix: not asked yet, again */
		else if (d->err < 0)
			f->tries[i]++;		/* lost on the way: again, a few times */
		else
			next_peer(f, i);	/* busy, stale, missing... */
		if (f->tries[i] >= TRIES_MAX)
			next_peer(f, i);
	}
}

/* Requests for every page that has a candidate peer, as far as the pool
 * allows.  Returns whether any page still waits for a peer; *later is the
 * time the first page held back (home_wait) may go, or UINT64_MAX. */
static bool submit(struct ibc_fetch *f, uint32_t n, uint64_t *later)
{
	bool waiting = false, busy[IBC_PEERS_MAX] = { false };
	uint64_t now = xtime_ns();

	*later = UINT64_MAX;
	for (uint32_t i = 0; i < n; i++) {
		int p;

		if (f->state[i] != P_NEED || past_end(f, f->pg[i]) || (p = candidate(f, i)) < 0 ||
		    busy[p])
			continue;
		if (f->not_before[i] > now) {
			waiting = true;
			if (f->not_before[i] < *later)
				*later = f->not_before[i];
			continue;
		}
		waiting = true;
		/* this page and the following ones for the same peer */
		uint32_t max = ibc_req_max_pages(f->rq, p), k = 0, slot = 0;

		while (slot < FLIGHTS && f->fl[slot].used)
			slot++;
		if (slot == FLIGHTS)
			break;
		for (uint32_t j = i; j < n && k < max; j++) {
			if (f->state[j] != P_NEED || past_end(f, f->pg[j]) || candidate(f, j) != p ||
			    f->not_before[j] > now)
				continue;
			f->fl[slot].idx[k] = j;
			f->reqpg[k] = f->pg[j];
			f->dst[k] = page_buf(f, j);
			k++;
		}
		int rc = ibc_req_submit(f->rq, p, f->ino, f->gen, f->reqpg, k, f->dst, slot);

		/* the pool is full, or short of memory while requests are out:
		 * wait for one to finish */
		if (rc == -EBUSY || ((rc == -ENOMEM || rc == -ENOBUFS) && ibc_req_inflight(f->rq))) {
			busy[p] = true;
			continue;
		}
		if (rc < 0) {
			char det[300];

			snprintf(det, sizeof(det), "%s", *ibc_req_error(f->rq) ? ibc_req_error(f->rq)
								     : strerror(-rc));
			peer_gone(f, p, IBC_NOTE_ERROR, det);
			continue;
		}
		f->fl[slot].used = true;
		f->fl[slot].peer = p;
		f->fl[slot].n = (uint32_t)rc;
		for (int j = 0; j < rc; j++)
			f->state[f->fl[slot].idx[j]] = P_FLIGHT;
	}
	return waiting;
}

static int fill_peers(struct ibc_fetch *f, uint32_t n)
{
	struct ibc_done done[16];

	for (uint32_t i = 0; i < n; i++) {
		uint16_t *r = &f->rank[(size_t)i * f->npeers];

		f->pos[i] = f->tries[i] = f->hwait[i] = 0;
		f->not_before[i] = f->busy_since[i] = 0;
		for (int p = 0; p < f->npeers; p++)
			r[p] = (uint16_t)p;
		/* rendezvous: the block's home peer first */
		ibc_rdv_rank(f->keys, r, (uint32_t)f->npeers, f->ino, f->pg[i] * f->psize / f->block);
	}
	for (;;) {
		uint64_t later, now;
		bool waiting = submit(f, n, &later);
		int nd;

		if (!ibc_req_inflight(f->rq)) {
			if (!waiting)
				return 0;
			/* only pages held back for their home: until the first may go */
			now = xtime_ns();
			if (later != UINT64_MAX && later > now) {
				struct timespec ts = { 0, (long)(later - now) };

				nanosleep(&ts, NULL);
			}
			continue;
		}
		now = xtime_ns();
		nd = ibc_req_poll(f->rq, done, 16, later != UINT64_MAX && later > now ?
				  (later - now < XTIME_NS_PER_S ? later - now : XTIME_NS_PER_S) :
				  XTIME_NS_PER_S);
		if (nd < 0)
			return nd;
		for (int k = 0; k < nd; k++)
			on_done(f, &done[k]);
	}
}

static int fill_origin(struct ibc_fetch *f, uint32_t n, char *err, size_t errlen)
{
	int rc;

	for (uint32_t i = 0; i < n;) {
		uint32_t run = 1;

		if (f->state[i] == P_DONE) {
			i++;
			continue;
		}
		if (f->origin_fd < 0) {
			const char *pn = f->why[i] != WHY_MISS ? ibc_req_peer_name(f->rq, f->whyp[i])
							       : NULL;

			if (f->why[i] == WHY_SIZE)
				xerr(err, errlen, "page %llu of %s: %s has a copy of another size than "
				     "the file's (%lld bytes), no other peer%s has it, and no --origin "
				     "given", (unsigned long long)f->pg[i], f->path, pn,
				     (long long)f->size, f->o.local ? " nor the local copy" : "");
			else if (f->why[i] == WHY_BUSY)
				xerr(err, errlen, "page %llu of %s: %s is out of room for requests "
				     "(busy, ENOMEM), no other peer%s has it, and no --origin given",
				     (unsigned long long)f->pg[i], f->path, pn,
				     f->o.local ? " nor the local copy" : "");
			else if (f->why[i] == WHY_NOSIZE)
				xerr(err, errlen, "page %llu of %s: %s does not tell the file's size "
				     "(give --size), no other peer%s has it, and no --origin given",
				     (unsigned long long)f->pg[i], f->path, pn,
				     f->o.local ? " nor the local copy" : "");
			else
				xerr(err, errlen,
				     "page %llu of %s: in no peer's cache%s, and no --origin given",
				     (unsigned long long)f->pg[i], f->path,
				     f->o.local ? " nor the local copy" : "");
			return -ENOENT;
		}
		while (i + run < n && f->state[i + run] != P_DONE && f->pg[i + run] == f->pg[i] + run)
			run++;
		/* (a failed chunk is not cached: the cache never holds
		 * what the origin did not give) */
		if ((rc = ibc_pages_read(f->origin_fd, (uint64_t)f->size, f->psize, f->pg[i], run,
					 page_buf(f, i))))
			return read_failed(err, errlen, f->origin_name, rc, f->size);
		if ((rc = check_unchanged(f, f->origin_fd, &f->origin_st, f->origin_xa,
					  f->origin_name, err, errlen)))
			return rc;
		f->st.origin_pages += run;
		i += run;
	}
	return 0;
}

/* A write into the cache that failed (a full disk, an error): the pages it
 * may have touched become holes again, so that no server takes them for
 * present; where even that fails, the cache file goes.  No more writes. */
static void cache_failed(struct ibc_fetch *f, uint64_t off, uint64_t len, int e)
{
	char det[2 * IBC_PATH_MAX + 64];	/* the whole path, in a message a user reads */
	struct stat a, b;

	/* whole pages (the file's last one is cut at its end, but its block
	 * is not: punch it all) */
	len = (len + f->psize - 1) / f->psize * f->psize;
	if (fallocate(f->cache_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
		      (off_t)len) < 0) {
		/* removed by name only while the name is still this file (not
		 * a newer generation another fetch renamed over it) */
		if (fstat(f->cache_fd, &a) == 0 &&
		    fstatat(f->cache_dfd, f->cache_name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
		    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
			unlinkat(f->cache_dfd, f->cache_name, 0);
		snprintf(det, sizeof(det), "%s/%s: %s; removed", f->o.cache, f->path, strerror(e));
	} else {
		snprintf(det, sizeof(det), "%s/%s: %s", f->o.cache, f->path, strerror(e));
	}
	f->caching = false;
	note(f, -1, IBC_NOTE_CACHE, det);
}

/* The chunk's pages that did not come from the local copy, into the cache:
 * runs of whole pages (the last one as long as the file), each a page of
 * the page cache that a reader finds either absent (a hole) or whole. */
static void write_cache(struct ibc_fetch *f, uint32_t n)
{
	for (uint32_t i = 0; i < n && f->caching;) {
		uint32_t run = 1;
		uint64_t off, len, done = 0;

		if (f->fromloc[i]) {
			i++;
			continue;
		}
		/* at most CACHE_RUN pages a write: what a failed one takes back */
		while (i + run < n && run < CACHE_RUN && !f->fromloc[i + run] &&
		       f->pg[i + run] == f->pg[i] + run)
			run++;
		off = f->pg[i] * f->psize;
		len = (uint64_t)run * f->psize;
		if (off + len > (uint64_t)f->size)
			len = (uint64_t)f->size - off;
		while (done < len) {
			ssize_t w = pwrite(f->cache_fd, page_buf(f, i) + done, len - done,
					   (off_t)(off + done));

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				cache_failed(f, off, len, w < 0 ? errno : ENOSPC);
				return;
			}
			done += (uint64_t)w;
		}
		f->st.cached_pages += run;
		i += run;
	}
}

static int write_chunk(struct ibc_fetch *f, uint32_t n, ibc_write_fn out, void *octx)
{
	int rc;

	if (!f->o.pages) {
		uint64_t a = f->pg[0] * f->psize, b = (f->pg[n - 1] + 1) * f->psize;

		if (a < f->off)
			a = f->off;
		if (b > f->end)
			b = f->end;
		if (b <= a)
			return 0;	/* past the end a peer told */
		rc = out(octx, f->buf + (a - f->pg[0] * f->psize), b - a);
		f->st.bytes_out += b - a;
		return rc;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint64_t len = f->psize;

		/* the file's last page ends where the file does */
		if (f->size >= 0 && (f->pg[i] + 1) * f->psize > (uint64_t)f->size)
			len = (uint64_t)f->size - f->pg[i] * f->psize;
		if ((rc = out(octx, page_buf(f, i), len)))
			return rc;
		f->st.bytes_out += len;
	}
	return 0;
}

/* Pages f->pg[0..n) from the local copy, the peers and the origin, and
 * into the cache. */
static int fill(struct ibc_fetch *f, uint32_t n, char *err, size_t errlen)
{
	int rc;

	for (uint32_t i = 0; i < n; i++) {
		f->state[i] = P_NEED;
		f->fromloc[i] = 0;
		f->why[i] = WHY_MISS;
	}
	if (f->local_fd >= 0 && (rc = fill_local(f, n, err, errlen)))
		return rc;
	if (f->npeers && (rc = fill_peers(f, n))) {
		xerr(err, errlen, "%s", strerror(-rc));
		return rc;
	}
	if (f->size_other >= 0) {
		xerr(err, errlen, "the peers disagree on the size of %s: %s tells %lld bytes, %s "
		     "%llu (give --size or --origin)", f->path, ibc_req_peer_name(f->rq, f->size_peer),
		     (long long)f->size, ibc_req_peer_name(f->rq, f->size_other),
		     (unsigned long long)f->other_size);
		return -EPROTO;
	}
	/* a size a peer told ends the range there: nothing to output past it
	 * (a size known before never let such a page in) */
	for (uint32_t i = 0; i < n; i++) {
		if (!past_end(f, f->pg[i]))
			continue;
		if (f->o.pages) {
			xerr(err, errlen, "--pages: page %llu is past the end of %s (%lld bytes, as %s "
			     "tells)", (unsigned long long)f->pg[i], f->path, (long long)f->size,
			     ibc_req_peer_name(f->rq, f->size_peer));
			return -EINVAL;
		}
		f->state[i] = P_DONE;
	}
	if ((rc = fill_origin(f, n, err, errlen)))
		return rc;
	if (f->caching)
		write_cache(f, n);
	return 0;
}

/* Page number k of the range. */
static uint64_t range_page(const struct ibc_fetch *f, uint64_t k)
{
	return f->o.pages ? f->o.pages[k] : f->off / f->psize + k;
}

/* The pages of the range whose block has this host as its rendezvous home,
 * into the cache before anything else: the other hosts, fetching the
 * same file at the same time, ask the home first. */
static int fill_home(struct ibc_fetch *f, char *err, size_t errlen)
{
	uint16_t r[IBC_PEERS_MAX];
	uint64_t k = 0;
	int rc;

	while (k < f->npages && f->caching) {
		uint32_t n = 0;

		for (; k < f->npages && n < f->chunk; k++) {
			uint64_t p = range_page(f, k);

			for (int i = 0; i < f->npeers; i++)
				r[i] = (uint16_t)i;
			ibc_rdv_rank(f->keys, r, (uint32_t)f->npeers, f->ino, p * f->psize / f->block);
			if (r[0] == f->self)
				f->pg[n++] = p;
		}
		if (!n)
			continue;
		if ((rc = fill(f, n, err, errlen)))
			return rc;
		for (uint32_t i = 0; i < n; i++)
			f->st.home_pages += !f->fromloc[i];
	}
	return 0;
}

int ibc_fetch_run(struct ibc_fetch *f, ibc_write_fn out, void *octx, char *err, size_t errlen)
{
	uint64_t t0 = xtime_ns();
	int rc;

	if (f->caching && f->self >= 0 && f->npeers > 1 && (rc = fill_home(f, err, errlen)))
		return rc;
	for (uint64_t done = 0; done < f->npages;) {
		uint32_t n = f->npages - done < f->chunk ? (uint32_t)(f->npages - done) : f->chunk;

		for (uint32_t i = 0; i < n; i++)
			f->pg[i] = range_page(f, done + i);
		if ((rc = fill(f, n, err, errlen)))
			return rc;
		if ((rc = write_chunk(f, n, out, octx))) {
			xerr(err, errlen, "write: %s", strerror(-rc));
			return rc;
		}
		done += n;
	}
	f->st.fetches++;
	xhist_add(&f->st.fetch_ns, xtime_ns() - t0);
	return 0;
}

void ibc_fetch_get_stats(const struct ibc_fetch *f, struct ibc_fetch_stats *s)
{
	*s = f->st;
	if (f->rq)
		ibc_req_get_stats(f->rq, &s->req);
}
