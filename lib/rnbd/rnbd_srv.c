/* RNBD server: exports, sessions and their devices, and the IO path (the
 * kernel's rnbd-srv.c over files and block devices).  See rnbd_srv.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/log.h"
#include "core/xthread.h"
#include "core/xtime.h"
#include "rnbd/rnbd_srv.h"
#include "rnbd/rnbd_srv_core.h"
#include "rnbd/rnbd_wire.h"

#define ZERO_BUF		(64u << 10)
/* A write on the loop's thread that takes this long sends the export's
 * writes to the IO threads for SLOW_HOLD_NS. */
#define SLOW_WRITE_NS		(1000 * XTIME_NS_PER_US)
#define SLOW_HOLD_NS		XTIME_NS_PER_S

struct export {
	struct rnbd_core_export c;	/* what the rules see (ro, size, writers) */
	char name[RNBD_NAME_MAX];
	char *path;
	int fd;
	bool blockdev;
	bool found;			/* opened through the search path: named by
					 * its real path, not an export name */
	dev_t id_dev;			/* the file it is (st_dev, st_ino; a block
					 * device: st_rdev, 0) */
	ino_t id_ino;
	uint64_t reads, read_bytes, writes, write_bytes, flushes, discards, errors;
	uint64_t queued;		/* IOs a worker ran */
	bool nowait_wr;			/* RWF_NOWAIT writes work here (until EOPNOTSUPP) */
	uint64_t slow_until;		/* without them: writes go to workers until then */
};

/* An IO that could not finish on the loop's thread: a read of pages not
 * in the page cache, a write that would block, a flush, a discard, a
 * write-zeroes.  A worker runs it; the loop answers it (rnbd_srv_poll). */
struct io_job {
	struct io_job *next;
	struct rtrs_srv_op *op;
	struct export *e;
	uint32_t op_code, fl;
	void *data;
	uint32_t datalen;		/* READ: the client's buffer; WRITE_ZEROES: the pattern */
	uint64_t off, len;		/* what is left to do */
	uint64_t pre;			/* bytes the loop's thread did already */
	int rc;
};

struct io_pool {
	pthread_t *th;
	unsigned n;
	pthread_mutex_t lock;
	pthread_cond_t cv, idle;
	struct io_job *todo, **todo_tail, *done, **done_tail;
	unsigned out;			/* jobs not answered yet */
	unsigned waiting;		/* workers with nothing to do */
	bool stop;
	_Atomic bool has_done;		/* `done` is not empty: the loop's cheap look */
	int efd;			/* eventfd: something is on `done` */
};

struct rnbd_srv {
	struct export **ex;		/* pointers: sessions hold them */
	unsigned nex, cap;
	uint32_t max_io;
	char *search;			/* dev_search_path, or NULL: exports only */
	struct io_pool pool;		/* n == 0: every IO on the loop's thread */
};

struct rnbd_sess {
	struct rnbd_core_sess c;	/* its devices, its version */
	struct rnbd_srv *r;
	char name[256];			/* the RTRS session's (NAME_MAX) */
};

static struct export *export_of(const struct rnbd_core_export *c)
{
	return (struct export *)((char *)c - offsetof(struct export, c));
}

struct rnbd_srv *rnbd_srv_new(uint32_t max_io_size, char *err, size_t errlen)
{
	struct rnbd_srv *r = calloc(1, sizeof(*r));

	if (!r) {
		xerr(err, errlen, "out of memory");
		return NULL;
	}
	r->max_io = max_io_size;
	r->pool.efd = -1;
	return r;
}

static void pool_stop(struct io_pool *pl)
{
	if (!pl->n)
		return;
	pthread_mutex_lock(&pl->lock);
	pl->stop = true;
	pthread_cond_broadcast(&pl->cv);
	pthread_mutex_unlock(&pl->lock);
	for (unsigned i = 0; i < pl->n; i++)
		pthread_join(pl->th[i], NULL);
	while (pl->done) {
		struct io_job *j = pl->done;

		pl->done = j->next;
		free(j);
	}
	free(pl->th);
	close(pl->efd);
	pthread_mutex_destroy(&pl->lock);
	pthread_cond_destroy(&pl->cv);
	pthread_cond_destroy(&pl->idle);
	pl->n = 0;
}

void rnbd_srv_free(struct rnbd_srv *r)
{
	if (!r)
		return;
	pool_stop(&r->pool);
	for (unsigned i = 0; i < r->nex; i++) {
		close(r->ex[i]->fd);
		free(r->ex[i]->path);
		free(r->ex[i]);
	}
	free(r->ex);
	free(r->search);
	free(r);
}

/* --- exports ------------------------------------------------------------- */

int rnbd_export_parse(const char *spec, char *name, size_t namelen, char *path, size_t pathlen,
		      bool *ro, char *err, size_t errlen)
{
	const char *eq = strchr(spec, '=');
	size_t n, pl;

	if (!eq) {
		xerr(err, errlen, "'%s' is not NAME=PATH[:ro]", spec);
		return -EINVAL;
	}
	n = (size_t)(eq - spec);
	if (n == 0 || n >= RNBD_NAME_MAX || n >= namelen) {
		xerr(err, errlen, "'%s': the name must be 1 to %u bytes", spec, RNBD_NAME_MAX - 1);
		return -EINVAL;
	}
	memcpy(name, spec, n);
	name[n] = '\0';
	pl = strlen(eq + 1);
	*ro = false;
	if (pl >= 3 && (!strcmp(eq + 1 + pl - 3, ":ro") || !strcmp(eq + 1 + pl - 3, ":rw"))) {
		*ro = eq[1 + pl - 2] == 'r' && eq[1 + pl - 1] == 'o';
		pl -= 3;
	}
	if (pl == 0 || pl >= pathlen) {
		xerr(err, errlen, "'%s': %s", spec, pl ? "path too long" : "no path");
		return -EINVAL;
	}
	memcpy(path, eq + 1, pl);
	path[pl] = '\0';
	return 0;
}

/* An export by its name, or (found) one of the search path's by its real
 * path. */
static struct export *export_lookup(struct rnbd_srv *r, const char *name, bool found)
{
	for (unsigned i = 0; i < r->nex; i++)
		if (r->ex[i]->found == found && !strcmp(found ? r->ex[i]->path : r->ex[i]->name, name))
			return r->ex[i];
	return NULL;
}

static struct export *export_find(struct rnbd_srv *r, const char *name)
{
	return export_lookup(r, name, false);
}

/* A sysfs number of the block device's queue, or 0. */
static uint64_t bdev_queue_attr(dev_t rdev, const char *attr)
{
	char p[128], buf[32];
	unsigned long long v = 0;
	FILE *f;

	snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/queue/%s", major(rdev), minor(rdev), attr);
	f = fopen(p, "re");
	if (!f)
		return 0;
	if (fgets(buf, sizeof(buf), f))
		v = strtoull(buf, NULL, 10);
	fclose(f);
	return v;
}

static int export_geometry(struct export *e, const struct stat *st, char *err, size_t errlen)
{
	if (S_ISBLK(st->st_mode)) {
		int lbs = 512;
		unsigned int pbs = 512;

		e->blockdev = true;
		if (ioctl(e->fd, BLKGETSIZE64, &e->c.size) < 0) {
			xerr(err, errlen, "%s: BLKGETSIZE64: %s", e->path, strerror(errno));
			return -errno;
		}
		if (ioctl(e->fd, BLKSSZGET, &lbs) < 0 || lbs < 512 || lbs > 32768)
			lbs = 512;
		if (ioctl(e->fd, BLKPBSZGET, &pbs) < 0 || pbs < (unsigned)lbs || pbs > 32768)
			pbs = (unsigned)lbs;
		e->c.lbs = (uint32_t)lbs;
		e->c.pbs = pbs;
		e->c.discard = !e->c.ro && bdev_queue_attr(st->st_rdev, "discard_max_bytes") > 0;
		e->c.discard_gran = (uint32_t)bdev_queue_attr(st->st_rdev, "discard_granularity");
		if (!e->c.discard_gran)
			e->c.discard_gran = e->c.lbs;
		return 0;
	}
	if (!S_ISREG(st->st_mode)) {
		xerr(err, errlen, "%s: not a regular file or a block device", e->path);
		return -EINVAL;
	}
	e->c.size = (uint64_t)st->st_size;
	/* a file behaves like a disk of 512-byte sectors over 4 KiB pages */
	e->c.lbs = 512;
	e->c.pbs = 4096;
	e->c.discard_gran = 4096;
	/* hole punching, probed past the end where it changes nothing */
	e->c.discard = !e->c.ro && fallocate(e->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					 (off_t)((e->c.size + 4095) & ~4095ull), 4096) == 0;
	return 0;
}

static int export_add(struct rnbd_srv *r, const char *name, const char *path, bool ro,
		      bool found, char *err, size_t errlen);

int rnbd_srv_export(struct rnbd_srv *r, const char *name, const char *path, bool ro,
		    char *err, size_t errlen)
{
	if (!name[0] || strlen(name) >= RNBD_NAME_MAX || strchr(name, '=')) {
		xerr(err, errlen,
		     "export name '%s': 1 to %u bytes, no '='", name, RNBD_NAME_MAX - 1);
		return -EINVAL;
	}
	if (export_find(r, name)) {
		xerr(err, errlen, "export name '%s' given twice", name);
		return -EEXIST;
	}
	return export_add(r, name, path, ro, false, err, errlen);
}

static int export_add(struct rnbd_srv *r, const char *name, const char *path, bool ro,
		      bool found, char *err, size_t errlen)
{
	struct export *e;
	struct stat st;
	int rc;

	if (r->nex == r->cap) {
		unsigned nc = r->cap ? r->cap * 2 : 8;
		struct export **ne = realloc(r->ex, nc * sizeof(*ne));

		if (!ne) {
			xerr(err, errlen, "out of memory");
			return -ENOMEM;
		}
		r->ex = ne;
		r->cap = nc;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		xerr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->c.ro = ro;
	e->found = found;
	e->path = strdup(path);
	if (!e->path) {
		xerr(err, errlen, "out of memory");
		rc = -ENOMEM;
		goto out_free;
	}
	e->nowait_wr = true;
	e->fd = open(path, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (e->fd < 0) {
		rc = -errno;
		xerr(err, errlen, "%s: %s", path, strerror(errno));
		goto out_free_path;
	}
	if (fstat(e->fd, &st) < 0) {
		rc = -errno;
		xerr(err, errlen, "%s: %s", path, strerror(errno));
		goto out_close;
	}
	rc = export_geometry(e, &st, err, errlen);
	if (rc < 0)
		goto out_close;
	e->id_dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
	e->id_ino = S_ISBLK(st.st_mode) ? 0 : st.st_ino;
	if (e->c.size < 512) {
		xerr(err, errlen, "%s: empty (a device needs at least one 512-byte sector)", path);
		rc = -EINVAL;
		goto out_close;
	}
	/* the open answer counts whole sectors (nsectors), as the kernel's
	 * server does for a file: a tail past the last one is out of reach */
	if (e->c.size % 512)
		xlog_warn("%s: %llu bytes, not whole 512-byte sectors: the last %llu are out of "
			  "reach of clients", path, (unsigned long long)e->c.size,
			  (unsigned long long)(e->c.size % 512));
	r->ex[r->nex++] = e;
	return 0;
out_close:
	close(e->fd);
out_free_path:
	free(e->path);
out_free:
	free(e);
	return rc;
}

/* --- sessions ------------------------------------------------------------ */

static int sess_ev(void *ctx, struct rtrs_srv_sess *s, enum rtrs_srv_ev ev)
{
	struct rnbd_srv *r = ctx;
	struct rnbd_sess *rs = rtrs_srv_sess_priv(s);

	switch (ev) {
	case RTRS_SRV_SESS_UP:
		rs = calloc(1, sizeof(*rs));
		if (!rs)
			return -ENOMEM;
		rs->r = r;
		snprintf(rs->name, sizeof(rs->name), "%s", rtrs_srv_sess_name(s));
		rtrs_srv_sess_set_priv(s, rs);
		xlog_info("session '%s' up", rtrs_srv_sess_name(s));
		return 0;
	case RTRS_SRV_SESS_DOWN:
		if (!rs)
			return 0;
		/* destroy_sess: the session's mappings go with it */
		rnbd_core_sess_free(&rs->c);
		free(rs);
		rtrs_srv_sess_set_priv(s, NULL);
		xlog_info("session '%s' down", rtrs_srv_sess_name(s));
		return 0;
	}
	return 0;
}

/* rnbd_srv_get_full_path: dev_search_path, its %SESSNAME% replaced by
 * the session's name, then the name the client asked for.  Unlike the
 * kernel's, the result must stay inside the search path (no "..", no
 * symbolic link out of it): the search path is all a client may reach.
 * What is found becomes an export under the client's name (read-only
 * where we may not write it).  0 with *e, or -ENOENT (outside the search
 * path too), -errno. */
static int search_open(struct rnbd_sess *rs, const char *name, struct export **e)
{
	struct rnbd_srv *r = rs->r;
	char root[PATH_MAX], path[PATH_MAX * 2], real[PATH_MAX], rroot[PATH_MAX], err[256];
	const char *mark = strstr(r->search, "%SESSNAME%");
	size_t n;
	int rc;

	*e = NULL;
	if (mark)
		snprintf(root, sizeof(root), "%.*s%s%s", (int)(mark - r->search), r->search,
			 rs->name, mark + 10);
	else
		snprintf(root, sizeof(root), "%s", r->search);
	snprintf(path, sizeof(path), "%s/%s", root, name);
	if (!realpath(root, rroot) || !realpath(path, real))
		return -ENOENT;
	n = strlen(rroot);
	if (strncmp(real, rroot, n) || (real[n] != '/' && !(n == 1 && rroot[0] == '/'))) {
		/* to the client, as if it were not there */
		xlog_info("OPEN of '%s': %s is outside the search path %s", name, real, rroot);
		return -ENOENT;
	}
	/* one export per file, whichever session and name found it: its
	 * writers are counted together */
	if ((*e = export_lookup(r, real, true)))
		return 0;
	if (strlen(real) >= RNBD_NAME_MAX) {
		xlog_info("OPEN of '%s': %s: path too long", name, real);
		return -ENAMETOOLONG;
	}
	rc = export_add(r, real, real, false, true, err, sizeof(err));
	if (rc == -EACCES || rc == -EROFS || rc == -EPERM)
		rc = export_add(r, real, real, true, true, err, sizeof(err));
	if (rc < 0) {
		xlog_info("OPEN of '%s': %s", name, err);
		return rc;
	}
	*e = export_lookup(r, real, true);
	xlog_info("OPEN of '%s': exported %s from the search path%s", name, real,
		  (*e)->c.ro ? " (read-only)" : "");
	return 0;
}

int rnbd_srv_set_search_path(struct rnbd_srv *r, const char *dir)
{
	char *d = dir ? strdup(dir) : NULL;

	if (dir && !d)
		return -ENOMEM;
	free(r->search);
	r->search = d;
	return 0;
}

/* process_msg_open.  The answer is the READ's data. */
static int do_open(struct rnbd_sess *rs, int dir, void *data, uint32_t datalen, const void *usr,
		   uint32_t usrlen)
{
	struct rnbd_open m;
	struct export *e;
	int rc;

	if (rnbd_core_open_msg(dir, datalen, usr, usrlen, &m) < 0)
		return -EINVAL;
	e = export_find(rs->r, m.dev_name);
	if (!e && rs->r->search && (rc = search_open(rs, m.dev_name, &e)) < 0)
		return rc;
	if (!e) {
		xlog_info("OPEN of '%s': no such export", m.dev_name);
		return -ENOENT;
	}
	/* one file under two names (two exports of it, an export and the
	 * search path, a link) is one device: one writer at most among
	 * all of them */
	unsigned others = 0;

	for (unsigned i = 0; i < rs->r->nex; i++) {
		const struct export *o = rs->r->ex[i];

		if (o != e && o->id_dev == e->id_dev && o->id_ino == e->id_ino)
			others += o->c.writers;
	}
	e->c.writers += others;
	rc = rnbd_core_open(&rs->c, &e->c, m.access_mode, rs->r->max_io, data);
	e->c.writers -= others;
	if (rc == -EPERM)
		xlog_info("OPEN of '%s' %s refused: %u writer(s) already%s", e->name,
			  rnbd_access_mode_str(m.access_mode), e->c.writers + others,
			  others ? " (of the same file under another name)" : "");
	return rc;
}

int rnbd_srv_sess_dev_close(struct rtrs_srv_sess *s, uint32_t device_id)
{
	struct rnbd_sess *rs = rtrs_srv_sess_priv(s);

	return rs ? rnbd_core_dev_close(&rs->c, device_id) : -ENOENT;
}

/* --- IO ------------------------------------------------------------------ */

static int rw_full(int fd, void *buf, uint64_t len, uint64_t off, bool wr)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = wr ? pwrite(fd, p, len, (off_t)off) : pread(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;	/* the file shrank under us */
		p += n;
		off += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

static int sync_dev(struct export *e)
{
	return fdatasync(e->fd) < 0 ? -errno : 0;
}

static int discard(struct export *e, uint64_t off, uint64_t len)
{
	if (e->blockdev) {
		uint64_t range[2] = { off, len };

		return ioctl(e->fd, BLKDISCARD, range) < 0 ? -errno : 0;
	}
	return fallocate(e->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
			 (off_t)len) < 0 ? -errno : 0;
}

/* WRITE_ZEROES (op 5 from linux 6.8), or with data linux 6.1's WRITE_SAME:
 * the given block repeated over the range.  On a file, as the kernel's
 * loop driver does (lo_fallocate): a hole punched unless RNBD_F_NOUNMAP
 * (REQ_NOUNMAP) asks for the range to stay allocated, then zeroed in
 * place. */
static int write_zeroes(struct export *e, uint32_t fl, uint64_t off, uint64_t len,
			const uint8_t *pat, uint32_t patlen)
{
	static const uint8_t zeros[ZERO_BUF];
	int rc;

	if (!patlen) {
		if (!e->blockdev && !(fl & RNBD_F_NOUNMAP) && e->c.discard &&
		    fallocate(e->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
			      (off_t)len) == 0)
			return 0;
		if (e->blockdev) {
			uint64_t range[2] = { off, len };

			if (ioctl(e->fd, BLKZEROOUT, range) == 0)
				return 0;
		} else if (fallocate(e->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, (off_t)off,
				     (off_t)len) == 0) {
			return 0;
		}
		pat = zeros;
		patlen = ZERO_BUF;
	}
	while (len) {
		uint32_t n = len < patlen ? (uint32_t)len : patlen;

		rc = rw_full(e->fd, (void *)pat, n, off, true);
		if (rc < 0)
			return rc;
		off += n;
		len -= n;
	}
	return 0;
}

/* A checked request's work, on the loop's thread or a worker's: touches
 * the export's file and the request's buffer only.  0 or -errno.
 * READ: datalen is the client's buffer (zeroed past len: no stale bytes
 * of an earlier request behind a short read); WRITE_ZEROES: the pattern's
 * length (0: zeros). */
static int io_run(struct export *e, uint32_t op, uint32_t fl, uint8_t *data, uint32_t datalen,
		  uint64_t off, uint64_t len)
{
	int rc = 0;

	switch (op) {
	case RNBD_OP_READ:
		rc = rw_full(e->fd, data, len, off, false);
		if (!rc && len < datalen)
			memset(data + len, 0, datalen - len);
		return rc;
	case RNBD_OP_WRITE:
		if (fl & RNBD_F_PREFLUSH)
			rc = sync_dev(e);
		if (!rc)
			rc = rw_full(e->fd, data, len, off, true);
		break;
	case RNBD_OP_FLUSH:
		return sync_dev(e);
	case RNBD_OP_DISCARD:
		rc = discard(e, off, len);
		break;
	case RNBD_OP_WRITE_ZEROES:
		rc = write_zeroes(e, fl, off, len, data, datalen);
		break;
	default:
		return -EOPNOTSUPP;
	}
	/* (FUA on a discard or write-zeroes, which the kernel's server
	 * fails, is kept here: made durable) */
	if (!rc && (fl & RNBD_F_FUA))
		rc = sync_dev(e);
	return rc;
}

/* The export's counters, on the loop's thread once the request is done. */
static void io_account(struct export *e, uint32_t op, uint32_t fl, uint64_t len, int rc)
{
	if (rc < 0) {
		e->errors++;
		return;
	}
	e->flushes += !!(fl & RNBD_F_PREFLUSH) + !!(fl & RNBD_F_FUA) + (op == RNBD_OP_FLUSH);
	if (op == RNBD_OP_READ) {
		e->reads++;
		e->read_bytes += len;
	} else if (op == RNBD_OP_WRITE) {
		e->writes++;
		e->write_bytes += len;
	} else if (op == RNBD_OP_DISCARD) {
		e->discards++;
	}
}

/* With workers, the loop's thread only does what cannot block: a read of
 * pages in the page cache, a write the file system takes without waiting
 * (RWF_NOWAIT).  Bytes done: len when all went; less leaves the rest to
 * a worker. */
static uint64_t io_nowait(struct export *e, uint32_t op, uint32_t fl, uint8_t *data,
			  uint64_t off, uint64_t len)
{
	uint64_t done = 0;

	if ((op != RNBD_OP_READ && op != RNBD_OP_WRITE) ||
	    (op == RNBD_OP_WRITE && (fl & (RNBD_F_PREFLUSH | RNBD_F_FUA) || !e->nowait_wr)))
		return 0;
	while (done < len) {
		struct iovec v = { data + done, len - done };
		ssize_t n = op == RNBD_OP_READ ?
			preadv2(e->fd, &v, 1, (off_t)(off + done), RWF_NOWAIT) :
			pwritev2(e->fd, &v, 1, (off_t)(off + done), RWF_NOWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EOPNOTSUPP && op == RNBD_OP_WRITE)
			e->nowait_wr = false;	/* this file system: writes go to workers */
		if (n <= 0)
			break;
		done += (uint64_t)n;
	}
	return done;
}

static void *worker_main(void *arg)
{
	struct io_pool *pl = arg;

	pthread_mutex_lock(&pl->lock);
	for (;;) {
		struct io_job *j;
		bool wake;

		while (!pl->todo && !pl->stop) {
			pl->waiting++;
			pthread_cond_wait(&pl->cv, &pl->lock);
			pl->waiting--;
		}
		if (!pl->todo)
			break;
		j = pl->todo;
		pl->todo = j->next;
		if (!pl->todo)
			pl->todo_tail = &pl->todo;
		pthread_mutex_unlock(&pl->lock);
		j->rc = io_run(j->e, j->op_code, j->fl, j->data, j->datalen, j->off, j->len);
		pthread_mutex_lock(&pl->lock);
		j->next = NULL;
		wake = !pl->done;
		*pl->done_tail = j;
		pl->done_tail = &j->next;
		if (wake) {
			atomic_store_explicit(&pl->has_done, true, memory_order_release);
			uint64_t one = 1;

			/* one wakeup per batch: the loop takes the whole list */
			if (write(pl->efd, &one, sizeof(one)) < 0)
				xlog_err("rnbd: waking the loop: %s", strerror(errno));
		}
	}
	pthread_mutex_unlock(&pl->lock);
	return NULL;
}

int rnbd_srv_set_io_threads(struct rnbd_srv *r, unsigned n, char *err, size_t errlen)
{
	struct io_pool *pl = &r->pool;

	if (pl->n) {
		xerr(err, errlen, "the IO threads are running already");
		return -EBUSY;
	}
	if (!n)
		return 0;
	pl->th = calloc(n, sizeof(*pl->th));
	pl->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!pl->th || pl->efd < 0) {
		xerr(err, errlen, "IO threads: %s", pl->th ? strerror(errno) : "out of memory");
		free(pl->th);
		if (pl->efd >= 0)
			close(pl->efd);
		pl->th = NULL;
		pl->efd = -1;
		return -ENOMEM;
	}
	pthread_mutex_init(&pl->lock, NULL);
	pthread_cond_init(&pl->cv, NULL);
	pthread_cond_init(&pl->idle, NULL);
	pl->todo_tail = &pl->todo;
	pl->done_tail = &pl->done;
	pl->stop = false;
	for (unsigned i = 0; i < n; i++) {
		int rc = xthread_create(&pl->th[i], worker_main, pl);

		if (rc) {
			pl->n = i;
			pool_stop(pl);
			xerr(err, errlen, "IO threads: %s", strerror(rc));
			return -rc;
		}
		pl->n = i + 1;
	}
	return 0;
}

bool rnbd_srv_pending(const struct rnbd_srv *r)
{
	return r->pool.n && atomic_load_explicit(&r->pool.has_done, memory_order_acquire);
}

int rnbd_srv_fd(const struct rnbd_srv *r)
{
	return r->pool.efd;
}

unsigned rnbd_srv_io_threads(const struct rnbd_srv *r)
{
	return r->pool.n;
}

static void queue_job(struct io_pool *pl, struct io_job *j)
{
	j->next = NULL;
	pthread_mutex_lock(&pl->lock);
	*pl->todo_tail = j;
	pl->todo_tail = &j->next;
	pl->out++;
	if (pl->waiting)	/* a busy worker takes it when it is done */
		pthread_cond_signal(&pl->cv);
	pthread_mutex_unlock(&pl->lock);
}

int rnbd_srv_poll(struct rnbd_srv *r)
{
	struct io_pool *pl = &r->pool;
	struct io_job *j;
	uint64_t v;
	int n = 0;

	/* called on every turn of the loop: no lock, no syscall when the
	 * workers finished nothing */
	if (!rnbd_srv_pending(r))
		return 0;
	pthread_mutex_lock(&pl->lock);
	atomic_store_explicit(&pl->has_done, false, memory_order_relaxed);
	j = pl->done;
	pl->done = NULL;
	pl->done_tail = &pl->done;
	if (read(pl->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		xlog_err("rnbd: reading the wakeup: %s", strerror(errno));
	pthread_mutex_unlock(&pl->lock);
	while (j) {
		struct io_job *next = j->next;

		io_account(j->e, j->op_code, j->fl, j->len + j->pre, j->rc);
		j->e->queued++;
		rtrs_srv_resp(j->op, j->rc);
		free(j);
		j = next;
		n++;
	}
	if (n) {
		pthread_mutex_lock(&pl->lock);
		pl->out -= (unsigned)n;
		if (!pl->out)
			pthread_cond_broadcast(&pl->idle);
		pthread_mutex_unlock(&pl->lock);
	}
	return n;
}

void rnbd_srv_drain(struct rnbd_srv *r)
{
	struct io_pool *pl = &r->pool;

	if (!pl->n)
		return;
	for (;;) {
		pthread_mutex_lock(&pl->lock);
		while (pl->out && !pl->done)
			pthread_cond_wait(&pl->idle, &pl->lock);
		bool left = pl->out != 0;
		pthread_mutex_unlock(&pl->lock);
		if (!left)
			return;
		rnbd_srv_poll(r);
	}
}

/* process_rdma + the block layer's checks: a request never reaches past
 * the device's end (bio_check_eod: -EIO).  0 or -errno: answered now;
 * 1: a worker has it, rnbd_srv_poll() answers. */
static int do_io(struct rnbd_sess *rs, struct rtrs_srv_op *rop, int dir, void *data,
		 uint32_t datalen, const void *usr, uint32_t usrlen)
{
	struct io_pool *pl = &rs->r->pool;
	struct rnbd_core_io io;
	struct export *e;
	struct io_job *j;
	uint64_t off, len, done, now;
	uint32_t op, fl, arg;
	int rc;

	rc = rnbd_core_io(&rs->c, dir, datalen, usr, usrlen, &io);
	if (rc < 0)
		return rc;
	e = export_of(io.dev->ex);
	op = io.op;
	fl = io.fl;
	off = io.off;
	len = io.len;
	arg = io.arg;
	if (!pl->n) {
		rc = io_run(e, op, fl, data, arg, off, len);
		io_account(e, op, fl, len, rc);
		return rc;
	}
	if (op == RNBD_OP_WRITE && !e->nowait_wr && !(fl & (RNBD_F_PREFLUSH | RNBD_F_FUA)) &&
	    (now = xtime_ns()) >= e->slow_until) {
		/* No RWF_NOWAIT writes on this file system: a buffered write
		 * runs here while writes are quick (a hand-off costs more
		 * than the page-cache copy); one that took long sends the
		 * export's writes to the workers for a while. */
		rc = io_run(e, op, fl, data, arg, off, len);
		if (xtime_ns() - now >= SLOW_WRITE_NS)
			e->slow_until = xtime_ns() + SLOW_HOLD_NS;
		io_account(e, op, fl, len, rc);
		return rc;
	}
	done = io_nowait(e, op, fl, data, off, len);
	if (done == len) {
		if (op == RNBD_OP_READ && len < datalen)
			memset((uint8_t *)data + len, 0, datalen - len);
		io_account(e, op, fl, len, 0);
		return 0;
	}
	j = malloc(sizeof(*j));
	if (!j) {
		rc = io_run(e, op, fl, data, arg, off, len);
		io_account(e, op, fl, len, rc);
		return rc;
	}
	*j = (struct io_job){ .op = rop, .e = e, .op_code = op, .fl = fl,
			      .data = (uint8_t *)data + done, .off = off + done, .len = len - done,
			      .pre = done, .datalen = op == RNBD_OP_READ ? arg - (uint32_t)done : arg };
	queue_job(pl, j);
	return 1;
}

/* rnbd_srv_rdma_ev: every message but a queued IO is answered at once. */
static int rdma_ev(void *ctx, struct rtrs_srv_sess *s, struct rtrs_srv_op *op, int dir, void *data,
		   uint32_t datalen, const void *usr, uint32_t usrlen)
{
	struct rnbd_sess *rs = rtrs_srv_sess_priv(s);
	int rc;

	(void)ctx;
	if (!rs)
		return -ENODEV;
	switch (rnbd_msg_type(usr, usrlen)) {
	case RNBD_MSG_IO:
		rc = do_io(rs, op, dir, data, datalen, usr, usrlen);
		if (rc > 0)
			return 0;	/* a worker has it */
		break;
	case RNBD_MSG_OPEN:
		rc = do_open(rs, dir, data, datalen, usr, usrlen);
		break;
	case RNBD_MSG_CLOSE:
		rc = rnbd_core_close(&rs->c, usr, usrlen);
		break;
	case RNBD_MSG_SESS_INFO:
		rc = rnbd_core_sess_info(&rs->c, dir, data, datalen, usr, usrlen);
		break;
	default:
		/* "Received unexpected message type" */
		return -EINVAL;
	}
	rtrs_srv_resp(op, rc);
	return 0;
}

void rnbd_srv_rtrs_ops(struct rtrs_srv_ops *ops)
{
	ops->sess_ev = sess_ev;
	ops->rdma_ev = rdma_ev;
}

/* --- introspection ------------------------------------------------------- */

unsigned rnbd_srv_exports(const struct rnbd_srv *r) { return r->nex; }

int rnbd_srv_export_get(const struct rnbd_srv *r, unsigned idx, struct rnbd_export_info *ei)
{
	const struct export *e;
	struct stat st;

	if (idx >= r->nex)
		return -ENOENT;
	e = r->ex[idx];
	*ei = (struct rnbd_export_info){
		.name = e->name, .path = e->path, .ro = e->c.ro, .blockdev = e->blockdev,
		.size = e->c.size, .lbs = e->c.lbs, .pbs = e->c.pbs, .discard = e->c.discard,
		.write_zeroes = !e->c.ro, .opens = e->c.opens, .writers = e->c.writers,
		.reads = e->reads, .read_bytes = e->read_bytes, .writes = e->writes,
		.write_bytes = e->write_bytes, .flushes = e->flushes, .discards = e->discards,
		.errors = e->errors, .queued = e->queued,
		.deleted = !e->blockdev && fstat(e->fd, &st) == 0 && st.st_nlink == 0,
	};
	return 0;
}

unsigned rnbd_srv_sess_devs(const struct rtrs_srv_sess *s)
{
	const struct rnbd_sess *rs = rtrs_srv_sess_priv(s);
	unsigned n = 0;

	for (unsigned i = 0; rs && i < rs->c.ndevs; i++)
		n += rs->c.devs[i].used;
	return n;
}

int rnbd_srv_sess_dev_get(const struct rtrs_srv_sess *s, unsigned idx, struct rnbd_dev_info *di)
{
	const struct rnbd_sess *rs = rtrs_srv_sess_priv(s);

	for (unsigned i = 0; rs && i < rs->c.ndevs; i++) {
		if (!rs->c.devs[i].used || idx--)
			continue;
		di->device_id = i;
		di->export = export_of(rs->c.devs[i].ex)->name;
		di->access_mode = rs->c.devs[i].mode;
		return 0;
	}
	return -ENOENT;
}

uint8_t rnbd_srv_sess_ver(const struct rtrs_srv_sess *s)
{
	const struct rnbd_sess *rs = rtrs_srv_sess_priv(s);

	return rs ? rs->c.ver : 0;
}
