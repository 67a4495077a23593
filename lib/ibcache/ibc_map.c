/* FILE -> (ino, gen), pages a copy holds, and the responder's export
 * (ibc_map.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "ibcache/ibc_map.h"

#include "core/xthread.h"
#include "core/xtime.h"

#define FNV_OFF		0xcbf29ce484222325ull
#define FNV_PRIME	0x100000001b3ull
#define MAX_DEPTH	64
#define RECHECK_NS	1000000000ull	/* path -> inode re-checked this often */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * FNV_PRIME;
	return h;
}

int ibc_path_norm(const char *in, char *out, size_t len, char *err, size_t errlen)
{
	size_t o = 0;
	const char *p = in;

	if (!in || !*in) {
		snprintf(err, errlen, "empty path");
		return -EINVAL;
	}
	if (*in == '/') {
		snprintf(err, errlen, "%s: must be relative to the export (no leading '/')", in);
		return -EINVAL;
	}
	while (*p) {
		const char *e = strchrnul(p, '/');
		size_t n = (size_t)(e - p);

		if (n == 2 && p[0] == '.' && p[1] == '.') {
			snprintf(err, errlen, "%s: '..' would leave the export", in);
			return -EINVAL;
		}
		if (n && !(n == 1 && p[0] == '.')) {
			if (o + (o ? 1 : 0) + n + 1 > len || o + n + 1 > IBC_PATH_MAX) {
				snprintf(err, errlen, "%.40s...: path too long", in);
				return -ENAMETOOLONG;
			}
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p = *e ? e + 1 : e;
	}
	if (!o) {
		snprintf(err, errlen, "%s: names the export itself, not a file in it", in);
		return -EINVAL;
	}
	out[o] = 0;
	return 0;
}

uint64_t ibc_ino(const char *normpath)
{
	return fnv(FNV_OFF, normpath, strlen(normpath));
}

uint64_t ibc_gen_hash(uint64_t size, uint64_t mtime_ns)
{
	uint8_t b[16];
	uint64_t h;

	for (int i = 0; i < 8; i++) {
		b[i] = (uint8_t)(size >> (8 * i));
		b[8 + i] = (uint8_t)(mtime_ns >> (8 * i));
	}
	h = fnv(FNV_OFF, b, sizeof(b));
	return h ? h : 1;
}

int ibc_gen_parse(const char *s, size_t len, uint64_t *gen)
{
	uint64_t v = 0;

	/* a trailing newline is what `echo N > xattr` tools leave */
	while (len && (s[len - 1] == '\n' || s[len - 1] == 0))
		len--;
	if (!len || len > 20)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		unsigned d = (unsigned)(s[i] - '0');

		if (d > 9 || v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	*gen = v;
	return 0;
}

bool ibc_same_state(const struct stat *then, const struct stat *now)
{
	return now->st_size == then->st_size && now->st_mtim.tv_sec == then->st_mtim.tv_sec &&
	       now->st_mtim.tv_nsec == then->st_mtim.tv_nsec &&
	       now->st_ctim.tv_sec == then->st_ctim.tv_sec &&
	       now->st_ctim.tv_nsec == then->st_ctim.tv_nsec;
}

int ibc_gen_fd(int fd, const struct stat *st, uint64_t *gen, bool *xattr)
{
	char v[32];
	ssize_t n = fgetxattr(fd, IBC_GEN_XATTR, v, sizeof(v));

	if (n >= 0) {
		*xattr = true;
		return ibc_gen_parse(v, (size_t)n, gen);
	}
	if (errno != ENODATA && errno != ENOTSUP && errno != ERANGE)
		return -errno;
	if (errno == ERANGE)
		return -EINVAL;
	*xattr = false;
	*gen = ibc_gen_hash((uint64_t)st->st_size,
			    (uint64_t)st->st_mtim.tv_sec * 1000000000ull +
				    (uint64_t)st->st_mtim.tv_nsec);
	return 0;
}

/* Of n data pages from byte offset off, how many are in the page cache. */
static int64_t resident_prefix(int fd, uint64_t off, uint64_t n, uint32_t psize, uint64_t size)
{
	uint64_t sp = (uint64_t)sysconf(_SC_PAGESIZE), base = off / sp * sp;
	uint64_t end = off + n * psize < size ? off + n * psize : size;
	size_t maplen = (size_t)(end - base), nvec = (maplen + sp - 1) / sp;
	unsigned char *vec;
	void *m;
	uint64_t ok = 0;

	if (!n || end <= off)
		return 0;
	vec = malloc(nvec);
	if (!vec)
		return -ENOMEM;
	m = mmap(NULL, maplen, PROT_READ, MAP_SHARED, fd, (off_t)base);
	if (m == MAP_FAILED || mincore(m, maplen, vec) < 0) {
		int e = errno;

		if (m != MAP_FAILED)
			munmap(m, maplen);
		free(vec);
		return -e;
	}
	for (; ok < n; ok++) {
		uint64_t a = off + ok * psize, b = a + psize < end ? a + psize : end;
		bool all = true;

		for (uint64_t q = (a - base) / sp; q * sp < b - base; q++)
			all &= vec[q] & 1;
		if (!all)
			break;
	}
	munmap(m, maplen);
	free(vec);
	return (int64_t)ok;
}

int64_t ibc_pages_held(int fd, uint64_t size, uint32_t psize, uint64_t first, uint64_t count,
		       bool resident_only)
{
	uint64_t data_end = 0, n = 0;

	for (; n < count; n++) {
		uint64_t p = first + n, off, end;

		if (p > size / psize)
			break;
		off = p * psize;
		if (off >= size)
			break;
		end = off + psize < size ? off + psize : size;
		if (end > data_end) {
			/* [off, data_end) is known data when data_end > off:
			 * look for the next hole from whichever is further.
			 * SEEK_HOLE returns its argument when that lies in a
			 * hole, else where the data covering it ends. */
			uint64_t q = off > data_end ? off : data_end;
			off_t h = lseek(fd, (off_t)q, SEEK_HOLE);

			if (h < 0)
				return errno == ENXIO ? (int64_t)n : -errno;
			if ((uint64_t)h <= q)
				break;
			data_end = (uint64_t)h;
			if (data_end < end)
				break;
		}
	}
	if (resident_only && n)
		return resident_prefix(fd, first * psize, n, psize, size);
	return (int64_t)n;
}

int ibc_pages_read(int fd, uint64_t size, uint32_t psize, uint64_t first, uint64_t count,
		   uint8_t *buf)
{
	uint64_t off = first * psize, want = count * psize, got = 0;

	while (got < want && off + got < size) {
		uint64_t n = want - got;
		ssize_t r;

		if (n > size - (off + got))
			n = size - (off + got);
		r = pread(fd, buf + got, n, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		/* cut meanwhile: what the size promised is not there, and
		 * zeros must not go out as its bytes */
		if (r == 0)
			return -ENODATA;
		got += (uint64_t)r;
	}
	memset(buf + got, 0, want - got);
	return 0;
}

/* --- export -------------------------------------------------------------- */

struct ent {
	uint64_t ino;
	char *path;
	bool collided;			/* another path has its ino: not served */
	int fd;				/* -1 while closed */
	struct stat st;			/* of fd when gen was computed */
	uint64_t gen;
	bool gen_ok;
	bool gen_xa;			/* gen from IBC_GEN_XATTR, not the mtime */
	bool solid;			/* no hole below the size, as of st */
	uint64_t checked_ns;		/* path re-checked against fd */
	struct ent *hnext;		/* hash chain */
	struct ent *next;		/* all entries */
	struct ent *oprev, *onext;	/* open ones, most recent first */
};

struct ibc_export {
	char *root;
	int rootfd;
	dev_t root_dev;			/* what rootfd is: the root's path named it */
	ino_t root_ino;
	uint64_t root_checked_ns;	/* the path looked at again (root_check) */
	struct ibc_export_opts o;
	struct ent **tab;
	size_t nbucket;
	struct ent *all;
	struct ent *ohead, *otail;
	uint32_t nopen;
	uint64_t last_scan_ns;
	uint64_t scan_gap_ns;		/* from one rescan's start to the next */
	bool scanned;
	struct scan *job;		/* a rescan running on its own thread */
	const char *coll[2];		/* a colliding pair of the index, for a log */
	struct ibc_export_stats st;
};

static void open_unlink(struct ibc_export *x, struct ent *e)
{
	if (e->oprev)
		e->oprev->onext = e->onext;
	else
		x->ohead = e->onext;
	if (e->onext)
		e->onext->oprev = e->oprev;
	else
		x->otail = e->oprev;
	e->oprev = e->onext = NULL;
}

static void ent_close(struct ibc_export *x, struct ent *e)
{
	if (e->fd < 0)
		return;
	open_unlink(x, e);
	close(e->fd);
	e->fd = -1;
	e->gen_ok = false;
	x->nopen--;
}

static void index_free(struct ibc_export *x)
{
	for (struct ent *e = x->all, *n; e; e = n) {
		n = e->next;
		ent_close(x, e);
		free(e->path);
		free(e);
	}
	x->all = NULL;
	free(x->tab);
	x->tab = NULL;
	x->nbucket = 0;
	x->st.files = 0;
	x->st.collisions = 0;
	x->coll[0] = x->coll[1] = NULL;
}

/* One walk of the root and the index made of it.  A rescan runs on a
 * thread of its own, so that a large export does not stop the serving
 * loop while it is read: the thread owns everything here until it sets
 * done (under lock), the loop owns it after. */
struct scan {
	int dfd;			/* the root, for the walk */
	dev_t dev;			/* which root: an index of one replaced */
	ino_t ino;			/* since is not taken in */
	uint64_t max_files;
	uint64_t start_ns;		/* the index is the tree as of then */
	uint64_t took_ns;		/* the walk and the hashing, on the clock */
	struct ent *list;
	uint64_t n, skipped;
	struct ent **tab;		/* the index: NULL when out of memory */
	size_t nb;
	uint64_t collisions;
	const char *coll[2];
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	bool done;
	atomic_bool stop;		/* the export is closing: give up */
	char path[IBC_PATH_MAX];
};

static void walk(struct scan *sc, int dfd, size_t plen, int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;

	if (!d) {
		close(dfd);
		return;
	}
	while ((de = readdir(d)) && sc->n < sc->max_files &&
	       !atomic_load_explicit(&sc->stop, memory_order_relaxed)) {
		size_t nl = strlen(de->d_name);
		unsigned char t = de->d_type;
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (plen + nl + 2 > sizeof(sc->path)) {
			sc->skipped++;
			continue;
		}
		if (t == DT_UNKNOWN) {
			if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				continue;
			t = S_ISREG(st.st_mode) ? DT_REG : S_ISDIR(st.st_mode) ? DT_DIR : DT_LNK;
		}
		if (t != DT_REG && t != DT_DIR) {
			sc->skipped++;	/* links, devices, sockets: never served */
			continue;
		}
		if (plen)
			sc->path[plen] = '/';
		memcpy(sc->path + plen + (plen ? 1 : 0), de->d_name, nl + 1);
		if (t == DT_DIR) {
			int fd;

			if (depth >= MAX_DEPTH) {
				sc->skipped++;
				continue;
			}
			fd = openat(dirfd(d), de->d_name,
				    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (fd >= 0)
				walk(sc, fd, plen + (plen ? 1 : 0) + nl, depth + 1);
		} else {
			struct ent *e = calloc(1, sizeof(*e));

			if (!e || !(e->path = strdup(sc->path))) {
				free(e);
				continue;
			}
			e->fd = -1;
			e->ino = ibc_ino(e->path);
			e->next = sc->list;
			sc->list = e;
			sc->n++;
		}
		sc->path[plen] = 0;
	}
	closedir(d);
}

/* Walks the root and hashes what it found (sc->tab NULL: no memory). */
static void scan_build(struct scan *sc)
{
	uint64_t t0 = xtime_ns();
	size_t nb = 64;

	walk(sc, sc->dfd, 0, 0);
	sc->dfd = -1;	/* closed by the walk */
	while (nb < 2 * sc->n)
		nb *= 2;
	sc->tab = calloc(nb, sizeof(*sc->tab));
	sc->took_ns = xtime_ns() - t0;
	if (!sc->tab)
		return;
	sc->nb = nb;
	/* Two paths, one ino: neither is served.  A request names its file
	 * by ino alone (gfcc_obj: ino, gen, off, len; no name travels, and
	 * gfarm's requester sends an inode number of its own), so nothing
	 * tells which of the two is meant, and serving either -- the first
	 * one readdir() happened to give, say -- serves one path's bytes
	 * for the other's whenever their generations agree, which a crafted
	 * FNV-1a collision with the same size and mtime (or the gen xattr)
	 * arranges.  Both answer ENOENT: the requester goes on to the next
	 * source.  The first is kept in the table, flagged, to catch a third. */
	for (struct ent *e = sc->list; e; e = e->next) {
		struct ent **b = &sc->tab[e->ino & (nb - 1)], *o;

		for (o = *b; o && o->ino != e->ino; o = o->hnext)
			;
		if (!o) {
			e->hnext = *b;
			*b = e;
			continue;
		}
		if (!o->collided) {
			o->collided = true;
			sc->collisions++;
			sc->coll[0] = o->path;
			sc->coll[1] = e->path;
		}
		e->collided = true;
		sc->collisions++;
	}
}

static void scan_free(struct scan *sc)
{
	for (struct ent *e = sc->list, *n; e; e = n) {
		n = e->next;
		free(e->path);
		free(e);
	}
	free(sc->tab);
	if (sc->dfd >= 0)
		close(sc->dfd);
	free(sc);
}

static struct scan *scan_new(struct ibc_export *x, uint64_t now_ns)
{
	struct scan *sc = calloc(1, sizeof(*sc));

	if (!sc)
		return NULL;
	sc->max_files = x->o.max_files;
	sc->start_ns = now_ns;
	sc->dfd = openat(x->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sc->dfd < 0) {
		free(sc);
		return NULL;
	}
	sc->dev = x->root_dev;
	sc->ino = x->root_ino;
	return sc;
}

/* The index becomes what sc found (sc is freed).  0, or -ENOMEM with the
 * index as it was.  The next rescan is due rescan_ns after this one
 * began, not after it was taken in (a file made while it walked may be
 * missing from it) -- or ten times as long as it took, so that a large
 * export is not walked over and over by a core of its own while peers
 * ask for files it does not have, as they do. */
static int scan_install(struct ibc_export *x, struct scan *sc)
{
	if (!sc->tab || sc->dev != x->root_dev || sc->ino != x->root_ino) {
		scan_free(sc);		/* out of memory, or a root replaced since */
		return -ENOMEM;
	}
	index_free(x);
	x->tab = sc->tab;
	x->nbucket = sc->nb;
	x->all = sc->list;
	x->st.files = sc->n;
	x->st.skipped = sc->skipped;
	x->st.collisions = sc->collisions;
	x->coll[0] = sc->coll[0];
	x->coll[1] = sc->coll[1];
	x->st.scans++;
	x->last_scan_ns = sc->start_ns;
	x->scan_gap_ns = 10 * sc->took_ns > x->o.rescan_ns ? 10 * sc->took_ns : x->o.rescan_ns;
	x->scanned = true;
	sc->list = NULL;
	sc->tab = NULL;
	scan_free(sc);
	return 0;
}

/* Builds the index afresh, here and now: the files under the root. */
static int scan(struct ibc_export *x, uint64_t now_ns)
{
	struct scan *sc = scan_new(x, now_ns);

	if (!sc)
		return errno ? -errno : -ENOMEM;
	scan_build(sc);
	return scan_install(x, sc);
}

static void *scan_main(void *arg)
{
	struct scan *sc = arg;

	scan_build(sc);
	pthread_mutex_lock(&sc->lock);
	sc->done = true;
	pthread_cond_signal(&sc->cv);
	pthread_mutex_unlock(&sc->lock);
	return NULL;
}

/* Takes in a finished rescan: true when the index changed.  wait_ns: how
 * long to wait for a running one. */
static bool scan_reap(struct ibc_export *x, uint64_t wait_ns)
{
	struct scan *sc = x->job;
	bool done;

	if (!sc)
		return false;
	pthread_mutex_lock(&sc->lock);
	if (!sc->done && wait_ns) {
		struct timespec ts;
		uint64_t t;

		if (wait_ns > 3600 * XTIME_NS_PER_S)
			wait_ns = 3600 * XTIME_NS_PER_S;	/* no overflow below */
		clock_gettime(CLOCK_MONOTONIC, &ts);
		t = (uint64_t)ts.tv_sec * XTIME_NS_PER_S + (uint64_t)ts.tv_nsec + wait_ns;
		ts.tv_sec = (time_t)(t / XTIME_NS_PER_S);
		ts.tv_nsec = (long)(t % XTIME_NS_PER_S);
		while (!sc->done && pthread_cond_timedwait(&sc->cv, &sc->lock, &ts) == 0)
			;
	}
	done = sc->done;
	pthread_mutex_unlock(&sc->lock);
	if (!done)
		return false;
	pthread_join(sc->th, NULL);
	pthread_mutex_destroy(&sc->lock);
	pthread_cond_destroy(&sc->cv);
	x->job = NULL;
	return scan_install(x, sc) == 0;
}

/* Starts a rescan on its own thread (or, without threads, runs it here)
 * and waits o.scan_wait_ns for it: a small export is indexed by then and
 * the file made a moment ago is served at once; a large one goes on in
 * the background while the loop serves from the old index (the miss
 * answers ENOENT, a later request finds the file).  True when the index
 * changed. */
static bool rescan(struct ibc_export *x, uint64_t now_ns)
{
	struct scan *sc;
	pthread_condattr_t ca;

	if (x->job)
		return scan_reap(x, 0);
	/* the next one not before scan_gap_ns, however this one goes */
	x->last_scan_ns = now_ns;
	x->scanned = true;
	if (!(sc = scan_new(x, now_ns)))
		return false;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&sc->lock, NULL);
	pthread_cond_init(&sc->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (xthread_create(&sc->th, scan_main, sc)) {
		pthread_mutex_destroy(&sc->lock);
		pthread_cond_destroy(&sc->cv);
		scan_build(sc);
		return scan_install(x, sc) == 0;
	}
	x->job = sc;
	return scan_reap(x, x->o.scan_wait_ns);
}

/* The entry an ino names, if exactly one does. */
static struct ent *lookup(struct ibc_export *x, uint64_t ino)
{
	if (!x->nbucket)
		return NULL;
	for (struct ent *e = x->tab[ino & (x->nbucket - 1)]; e; e = e->hnext)
		if (e->ino == ino)
			return e->collided ? NULL : e;
	return NULL;
}

/* Opens a path under the root without following any symbolic link. */
static int open_beneath(int rootfd, const char *path)
{
	struct open_how how = { .flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
					   RESOLVE_NO_MAGICLINKS };
	char comp[256];
	int fd = (int)syscall(SYS_openat2, rootfd, path, &how, sizeof(how)), cur;
	const char *p = path;

	if (fd >= 0 || (errno != ENOSYS && errno != EPERM))
		return fd;
	/* no openat2 (or a seccomp filter refusing it): component by component */
	cur = dup(rootfd);
	while (cur >= 0) {
		const char *e = strchrnul(p, '/');
		size_t n = (size_t)(e - p);
		int next;

		if (n >= sizeof(comp)) {
			close(cur);
			errno = ENAMETOOLONG;
			return -1;
		}
		memcpy(comp, p, n);
		comp[n] = 0;
		next = openat(cur, comp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | (*e ? O_DIRECTORY : 0));
		close(cur);
		if (!*e || next < 0)
			return next;
		cur = next;
		p = e + 1;
	}
	return -1;
}

static int ent_open(struct ibc_export *x, struct ent *e, uint64_t now_ns)
{
	struct stat st;
	int fd = open_beneath(x->rootfd, e->path);

	if (fd < 0)
		return -ENOENT;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -ENOENT;
	}
	while (x->nopen >= x->o.max_open && x->otail)
		ent_close(x, x->otail);
	e->fd = fd;
	e->gen_ok = false;
	e->checked_ns = now_ns;
	e->onext = x->ohead;
	if (x->ohead)
		x->ohead->oprev = e;
	x->ohead = e;
	if (!x->otail)
		x->otail = e;
	x->nopen++;
	x->st.opens++;
	return 0;
}

/* An open entry whose gen is current: the path still names the open file,
 * and the file is unchanged since its gen was computed. */
static int ent_ready(struct ibc_export *x, struct ent *e, uint64_t now_ns)
{
	struct stat st;
	bool xa;
	int rc;

	if (e->fd >= 0 && now_ns - e->checked_ns >= RECHECK_NS) {
		/* replaced by a rename, or removed: the name is what is asked for */
		if (fstatat(x->rootfd, e->path, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    st.st_ino != e->st.st_ino || st.st_dev != e->st.st_dev)
			ent_close(x, e);
		else
			e->checked_ns = now_ns;
	}
	if (e->fd < 0 && (rc = ent_open(x, e, now_ns)))
		return rc;
	if (x->ohead != e) {
		open_unlink(x, e);
		e->onext = x->ohead;
		x->ohead->oprev = e;
		x->ohead = e;
	}
	if (fstat(e->fd, &st) < 0)
		return -EIO;
	if (e->gen_ok && ibc_same_state(&e->st, &st))
		return 0;
	if ((rc = ibc_gen_fd(e->fd, &st, &e->gen, &xa)))
		return rc == -EINVAL ? -ESTALE : -EIO;	/* a tag we cannot read matches nothing */
	e->st = st;
	e->gen_xa = xa;
	e->gen_ok = true;
	/* a file without holes (most are) needs no SEEK_HOLE per request */
	e->solid = lseek(e->fd, 0, SEEK_HOLE) >= st.st_size;
	return 0;
}

struct ibc_export *ibc_export_open(const char *root, const struct ibc_export_opts *o, char *err,
				   size_t errlen)
{
	struct ibc_export *x = calloc(1, sizeof(*x));
	struct stat st;
	int rc;

	if (!x || !(x->root = strdup(root))) {
		free(x);
		snprintf(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	if (o)
		x->o = *o;
	if (!x->o.max_open)
		x->o.max_open = 256;
	if (!x->o.max_files)
		x->o.max_files = 1000000;
	if (!x->o.rescan_ns)
		x->o.rescan_ns = 1000000000ull;
	if (!x->o.scan_wait_ns)
		x->o.scan_wait_ns = 20 * XTIME_NS_PER_MS;
	x->rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (x->rootfd < 0 || fstat(x->rootfd, &st) < 0) {
		rc = errno;
		snprintf(err, errlen, "%s: %s", root, strerror(rc));
		ibc_export_close(x);
		errno = rc;
		return NULL;
	}
	x->root_dev = st.st_dev;
	x->root_ino = st.st_ino;
	if ((rc = scan(x, 0))) {
		snprintf(err, errlen, "%s: %s", root, strerror(-rc));
		ibc_export_close(x);
		errno = -rc;
		return NULL;
	}
	x->scanned = false;	/* the first miss may rescan at once */
	return x;
}

void ibc_export_close(struct ibc_export *x)
{
	if (!x)
		return;
	if (x->job) {
		atomic_store_explicit(&x->job->stop, true, memory_order_relaxed);
		pthread_join(x->job->th, NULL);
		pthread_mutex_destroy(&x->job->lock);
		pthread_cond_destroy(&x->job->cv);
		scan_free(x->job);
	}
	index_free(x);
	if (x->rootfd >= 0)
		close(x->rootfd);
	free(x->root);
	free(x);
}

const char *ibc_export_root(const struct ibc_export *x) { return x->root; }

void ibc_export_get_stats(const struct ibc_export *x, struct ibc_export_stats *s)
{
	*s = x->st;
	s->rescanning = x->job != NULL;
}

bool ibc_export_collision(const struct ibc_export *x, const char **a, const char **b)
{
	if (!x->coll[0])
		return false;
	*a = x->coll[0];
	*b = x->coll[1];
	return true;
}

/* The root's path names another directory now (an export swapped in by
 * a rename, as a deployment does): serve that one, indexed afresh, the
 * files of the old one closed.  Looked at once a second. */
static void root_check(struct ibc_export *x, uint64_t now_ns)
{
	struct stat st;
	int fd;

	if (now_ns - x->root_checked_ns < RECHECK_NS)
		return;
	x->root_checked_ns = now_ns;
	if (stat(x->root, &st) < 0 || !S_ISDIR(st.st_mode) ||
	    (st.st_dev == x->root_dev && st.st_ino == x->root_ino))
		return;		/* gone: what is still open of it is served */
	fd = open(x->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while (x->ohead)
		ent_close(x, x->ohead);
	close(x->rootfd);
	x->rootfd = fd;
	x->root_dev = st.st_dev;
	x->root_ino = st.st_ino;
	x->st.root_changes++;
	if (x->job)
		scan_reap(x, 0);	/* the old root's: not taken in */
	x->scanned = false;		/* the next request rescans at once */
	if (!x->job)
		rescan(x, now_ns);
}

int ibc_export_read(struct ibc_export *x, const struct gfcc_req *q, uint8_t *buf, uint64_t now_ns,
		    uint64_t *size)
{
	struct ent *e;
	uint32_t total = 0;
	struct stat now;
	int rc;

	root_check(x, now_ns);
	e = lookup(x, q->obj.ino);

	/* a rescan done meanwhile; or a file made after the last one: look
	 * again, not too often */
	if (x->job && scan_reap(x, 0))
		e = lookup(x, q->obj.ino);
	if (!e && !x->job && (!x->scanned || now_ns - x->last_scan_ns >= x->scan_gap_ns)) {
		if (rescan(x, now_ns))
			e = lookup(x, q->obj.ino);
	}
	if (!e)
		return -ENOENT;
	if ((rc = ent_ready(x, e, now_ns)))
		return rc;
	if (e->gen != q->obj.gen)
		return -ESTALE;
	/* the size the generation was taken with: a copy cut since is
	 * refused below (ESTALE), never told with another size */
	*size = (uint64_t)e->st.st_size;
	/* the reply is a prefix: stop at the first page we lack (gfarm's
	 * find_get_page loop in gfsk_ccib.c) */
	for (uint32_t b = 0; b < q->npblk; b++) {
		const struct gfcc_pblk *p = &q->pblk[b];
		uint64_t npg = (*size + q->psize - 1) / q->psize;
		int64_t held = e->solid && !x->o.resident_only
			? (int64_t)(p->index >= npg ? 0 : npg - p->index < p->count ? npg - p->index
											 : p->count)
			: ibc_pages_held(e->fd, *size, q->psize, p->index, p->count,
					 x->o.resident_only);

		if (held < 0)
			return -EIO;
		if (held && (rc = ibc_pages_read(e->fd, (uint64_t)e->st.st_size, q->psize, p->index,
						 (uint64_t)held, buf + (size_t)total * q->psize))) {
			/* cut since its size was taken: no longer the
			 * generation asked for, and looked at afresh next time */
			e->gen_ok = false;
			return rc == -ENODATA ? -ESTALE : -EIO;
		}
		total += (uint32_t)held;
		if ((uint64_t)held < p->count)
			break;
	}
	/* written meanwhile: what was read may be the next generation's
	 * bytes (a tagged copy is written only with its own generation's
	 * pages: a cache being filled) */
	if (total && !e->gen_xa && (fstat(e->fd, &now) < 0 || !ibc_same_state(&e->st, &now))) {
		e->gen_ok = false;
		return -ESTALE;
	}
	return (int)total;
}
