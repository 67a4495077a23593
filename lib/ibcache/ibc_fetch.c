/* A fetch: local copy, then peers, then origin (ibc_fetch.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/parse.h"
#include "core/xtime.h"
#include "ibcache/ibc_fetch.h"

enum { P_NEED = 0, P_FLIGHT = 1, P_DONE = 2 };
#define TRIES_MAX	3	/* asks of one peer for a page before the next */
#define FLIGHTS		(3 * IBC_DEPTH_MAX)

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
	int origin_fd, local_fd;
	int64_t local_size;
	uint32_t psize;
	uint64_t block;
	/* what to output: a byte range, or a list of whole pages */
	uint64_t off, end;		/* range mode */
	uint64_t npages;		/* pages in all */
	struct ibc_req *rq;
	int npeers;			/* ibc_req peer ids 0..npeers-1 */
	uint64_t keys[IBC_PEERS_MAX];
	bool usable[IBC_PEERS_MAX];
	bool noted[IBC_PEERS_MAX];
	ibc_note_fn note;
	void *nctx;
	/* the chunk */
	uint32_t chunk;
	uint8_t *buf;
	uint64_t *pg;
	uint8_t *state, *pos, *tries;
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

static void note(struct ibc_fetch *f, int peer, enum ibc_note n, const char *detail)
{
	if (peer >= 0) {
		if (f->noted[peer])
			return;
		f->noted[peer] = true;
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
static int open_copies(struct ibc_fetch *f, const char *origin, char *err, size_t errlen)
{
	struct stat st;
	uint64_t g;
	bool xa;
	int rc;

	if (origin) {
		if ((f->origin_fd = open_copy(origin, &st, err, errlen)) < 0)
			return -ENOENT;
		f->size = st.st_size;
		if (!f->have_gen) {
			if ((rc = ibc_gen_fd(f->origin_fd, &st, &f->gen, &xa))) {
				xerr(err, errlen, "%s: %s: %s", origin, IBC_GEN_XATTR,
				     rc == -EINVAL ? "not a decimal number" : strerror(-rc));
				return rc;
			}
			f->have_gen = true;
		}
	}
	if (!f->o.local)
		return 0;
	if ((f->local_fd = open_copy(f->o.local, &st, err, errlen)) < 0)
		return -ENOENT;
	f->local_size = st.st_size;
	rc = ibc_gen_fd(f->local_fd, &st, &g, &xa);
	if (rc || (f->have_gen && g != f->gen)) {
		/* another generation's bytes must not go out as this one's */
		note(f, -1, IBC_NOTE_LOCAL_STALE, f->o.local);
		close(f->local_fd);
		f->local_fd = -1;
		return 0;
	}
	if (!f->have_gen) {
		f->gen = g;
		f->have_gen = true;
	}
	if (f->size < 0)
		f->size = f->local_size;
	return 0;
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
	}
	return 0;
}

/* What to output, checked against the size where one is known. */
static int set_range(struct ibc_fetch *f, char *err, size_t errlen, bool *usage)
{
	const struct ibc_fetch_opts *o = &f->o;

	if (o->pages) {
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
	if (o->length_set && o->offset > UINT64_MAX - o->length) {
		xerr(err, errlen, "--offset + --length overflow");
		*usage = true;
		return -EINVAL;
	}
	f->end = o->length_set ? o->offset + o->length : (uint64_t)f->size;
	if (f->size >= 0 && f->end > (uint64_t)f->size)
		f->end = (uint64_t)f->size;	/* like read(2): up to the end */
	if (f->off > f->end)
		f->off = f->end;
	f->npages = f->end > f->off ? (f->end - 1) / f->psize - f->off / f->psize + 1 : 0;
	return 0;
}

struct ibc_fetch *ibc_fetch_new(const struct ibc_fetch_opts *o, const struct ibc_dir *dir,
				ibc_note_fn nfn, void *ctx, char *err, size_t errlen, bool *usage)
{
	struct ibc_fetch *f = calloc(1, sizeof(*f));
	uint16_t idx[IBC_PEERS_MAX];
	char *origin = NULL;
	uint32_t np;

	*usage = false;
	if (!f) {
		xerr(err, errlen, "out of memory");
		return NULL;
	}
	f->o = *o;
	f->origin_fd = f->local_fd = -1;
	f->size = f->local_size = -1;
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
	if (open_copies(f, o->origin ? o->origin : origin, err, errlen))
		goto fail;
	if (np && !f->have_gen) {
		xerr(err, errlen,
		     "peers need the generation of %s: give --origin, --local or --gen", f->path);
		*usage = true;
		goto fail;
	}
	if (set_range(f, err, errlen, usage))
		goto fail;
	f->block = o->block ? o->block : dir && dir->block ? dir->block : IBC_BLOCK_DEFAULT;
	if (f->block < f->psize)
		f->block = f->psize;
	if (!(f->rq = ibc_req_new(&f->o.ro)))
		goto nomem;
	if (add_peers(f, dir, idx, np, err, errlen))
		goto fail;
	f->buf = aligned_alloc(4096, (size_t)f->chunk * f->psize);
	f->pg = calloc(f->chunk, sizeof(*f->pg));
	f->state = calloc(f->chunk, 3);
	f->rank = calloc((size_t)f->chunk * (f->npeers ? f->npeers : 1), sizeof(*f->rank));
	f->dst = calloc(GFCC_PAGES_MAX, sizeof(*f->dst));
	f->reqpg = calloc(GFCC_PAGES_MAX, sizeof(*f->reqpg));
	if (!f->buf || !f->pg || !f->state || !f->rank || !f->dst || !f->reqpg)
		goto nomem;
	f->pos = f->state + f->chunk;
	f->tries = f->pos + f->chunk;
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
	free(f->buf);
	free(f->pg);
	free(f->state);
	free(f->rank);
	free(f->dst);
	free(f->reqpg);
	free(f);
}

uint64_t ibc_fetch_ino(const struct ibc_fetch *f) { return f->ino; }
uint64_t ibc_fetch_gen(const struct ibc_fetch *f) { return f->gen; }
int64_t ibc_fetch_size(const struct ibc_fetch *f) { return f->size; }

/* --- one chunk ------------------------------------------------------------ */

static uint8_t *page_buf(struct ibc_fetch *f, uint32_t i)
{
	return f->buf + (size_t)i * f->psize;
}

/* Pages of the local copy: runs of data, holes skipped with SEEK_DATA. */
static int fill_local(struct ibc_fetch *f, uint32_t n)
{
	for (uint32_t i = 0; i < n;) {
		uint32_t run = 1;
		int64_t held;

		while (i + run < n && f->pg[i + run] == f->pg[i] + run)
			run++;
		held = ibc_pages_held(f->local_fd, (uint64_t)f->local_size, f->psize, f->pg[i], run,
				      false);
		if (held < 0)
			return (int)held;
		if (held && ibc_pages_read(f->local_fd, (uint64_t)f->local_size, f->psize, f->pg[i],
					   (uint64_t)held, page_buf(f, i)))
			return -EIO;
		for (int64_t k = 0; k < held; k++)
			f->state[i + k] = P_DONE;
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
}

static void peer_gone(struct ibc_fetch *f, int peer, enum ibc_note n, const char *detail)
{
	f->usable[peer] = false;
	note(f, peer, n, detail);
}

static void on_done(struct ibc_fetch *f, const struct ibc_done *d)
{
	struct flight *fl = &f->fl[d->tag];
	int peer = fl->peer;
	char det[128];

	fl->used = false;
	switch (d->err) {
	case 0: case ENOENT: case ENOMEM: case ETIMEDOUT: case -ETIMEDOUT:
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
	if (d->err == ENOENT)
		f->usable[peer] = false;	/* a plain miss: no need to say */
	if (d->err == -ETIMEDOUT && !d->nok) {
		snprintf(det, sizeof(det), "%llu ms",
			 (unsigned long long)(f->o.ro.timeout_ns / XTIME_NS_PER_MS));
		peer_gone(f, peer, IBC_NOTE_SILENT, det);
	}
	for (uint32_t j = 0; j < fl->n; j++) {
		uint32_t i = fl->idx[j];

		if (j < d->taken && ibc_done_ok(d, j)) {
			f->state[i] = P_DONE;
			f->st.peer_pages++;
			continue;
		}
		f->state[i] = P_NEED;
		if (j >= d->taken)
			continue;
		if (d->err == 0 && j == d->reply_pages)
			next_peer(f, i);	/* the first page it lacks */
		else if (d->err == 0)
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
 * allows.  Returns whether any page still waits for a peer. */
static bool submit(struct ibc_fetch *f, uint32_t n)
{
	bool waiting = false, busy[IBC_PEERS_MAX] = { false };

	for (uint32_t i = 0; i < n; i++) {
		int p;

		if (f->state[i] != P_NEED || (p = candidate(f, i)) < 0 || busy[p])
			continue;
		waiting = true;
		/* this page and the following ones for the same peer */
		uint32_t max = ibc_req_max_pages(f->rq, p), k = 0, slot = 0;

		while (slot < FLIGHTS && f->fl[slot].used)
			slot++;
		if (slot == FLIGHTS)
			break;
		for (uint32_t j = i; j < n && k < max; j++) {
			if (f->state[j] != P_NEED || candidate(f, j) != p)
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

		f->pos[i] = f->tries[i] = 0;
		for (int p = 0; p < f->npeers; p++)
			r[p] = (uint16_t)p;
		/* rendezvous: the block's home peer first */
		ibc_rdv_rank(f->keys, r, (uint32_t)f->npeers, f->ino, f->pg[i] * f->psize / f->block);
	}
	for (;;) {
		bool waiting = submit(f, n);
		int nd;

		if (!ibc_req_inflight(f->rq)) {
			if (!waiting)
				return 0;
			continue;
		}
		nd = ibc_req_poll(f->rq, done, 16, XTIME_NS_PER_S);
		if (nd < 0)
			return nd;
		for (int k = 0; k < nd; k++)
			on_done(f, &done[k]);
	}
}

static int fill_origin(struct ibc_fetch *f, uint32_t n, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < n;) {
		uint32_t run = 1;

		if (f->state[i] == P_DONE) {
			i++;
			continue;
		}
		if (f->origin_fd < 0) {
			xerr(err, errlen,
			     "page %llu of %s: in no peer's cache%s, and no --origin given",
			     (unsigned long long)f->pg[i], f->path, f->o.local ? " nor the local copy" : "");
			return -ENOENT;
		}
		while (i + run < n && f->state[i + run] != P_DONE && f->pg[i + run] == f->pg[i] + run)
			run++;
		if (ibc_pages_read(f->origin_fd, (uint64_t)f->size, f->psize, f->pg[i], run,
				   page_buf(f, i))) {
			xerr(err, errlen,
			     "%s: read: %s", f->o.origin ? f->o.origin : "origin", strerror(errno));
			return -EIO;
		}
		f->st.origin_pages += run;
		i += run;
	}
	return 0;
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

int ibc_fetch_run(struct ibc_fetch *f, ibc_write_fn out, void *octx, char *err, size_t errlen)
{
	uint64_t t0 = xtime_ns(), first = f->o.pages ? 0 : f->off / f->psize;
	int rc;

	for (uint64_t done = 0; done < f->npages;) {
		uint32_t n = f->npages - done < f->chunk ? (uint32_t)(f->npages - done) : f->chunk;

		for (uint32_t i = 0; i < n; i++) {
			f->pg[i] = f->o.pages ? f->o.pages[done + i] : first + done + i;
			f->state[i] = P_NEED;
		}
		if (f->local_fd >= 0 && (rc = fill_local(f, n))) {
			xerr(err, errlen, "%s: %s", f->o.local, strerror(-rc));
			return rc;
		}
		if (f->npeers && (rc = fill_peers(f, n))) {
			xerr(err, errlen, "%s", strerror(-rc));
			return rc;
		}
		if ((rc = fill_origin(f, n, err, errlen)))
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
