/* rtrs-client nbd: the RNBD device as an NBD export, for nbdinfo, nbdcopy,
 * qemu, fio's nbd engine, nbd-client and the kernel's nbd driver.
 *
 * One RTRS session and one open RNBD device serve every NBD connection:
 * each NBD request becomes one rnbd_clt_submit() (which splits it at the
 * device's limits and queues what finds no free permit), and its reply
 * goes back when the RNBD IO completes -- out of order, as NBD allows.
 * Data buffers come from one arena registered with the session
 * (rtrs_clt_add_mem); a WRITE's payload is read from the socket straight
 * into its buffer and a READ's reply is sent from it.  A connection that
 * has too much in flight, or whose request finds the arena full, is not
 * read until that changes: the client's socket backs up, nothing is
 * buffered without bound.  A connection that breaks the protocol or goes
 * away is closed alone; its requests already at the server complete into
 * buffers that stay ours until then. */
#include "cmd.h"
#include "core/log.h"
#include "core/parse.h"
#include "core/xtime.h"
#include "nbd/nbd_srv.h"

#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define PAGE		4096u
#define ARENA_BYTES	(64u << 20)
#define ARENA_PAGES	(ARENA_BYTES / PAGE)
#define MAX_BLOCK	(32u << 20)	/* NBD's customary largest request */
#define CONN_INFLIGHT	512u		/* requests one connection may have open */
/* arena pages one connection may hold: a client that asks and never reads
 * its replies pins no more than half, so the others still get room for
 * the largest request */
#define CONN_PAGES	(ARENA_PAGES / 2)
#define INBUF		(64u << 10)
#define MAX_LISTEN	8
#define IOV_BATCH	256		/* iovecs per sendmsg: 128 4 KiB replies */

_Static_assert(INBUF >= NBD_SRV_INBUF, "an option fits in the input buffer");
_Static_assert(ARENA_BYTES >= 2 * MAX_BLOCK, "the largest request always fits eventually");

/* --- the data arena: first fit over 4 KiB pages -------------------------- */

struct arena {
	uint8_t *mem;
	uint64_t map[ARENA_PAGES / 64];	/* 1: page in use */
	uint32_t used;
};

static bool page_used(const struct arena *a, uint32_t i)
{
	return a->map[i / 64] >> (i % 64) & 1;
}

static void mark(struct arena *a, uint32_t first, uint32_t n, bool used)
{
	for (uint32_t i = first; i < first + n; i++) {
		if (used)
			a->map[i / 64] |= 1ull << (i % 64);
		else
			a->map[i / 64] &= ~(1ull << (i % 64));
	}
	a->used = used ? a->used + n : a->used - n;
}

/* Whether the unit pages from i are free. */
static bool unit_free(const struct arena *a, uint32_t i, uint32_t unit)
{
	for (uint32_t k = 0; k < unit; k++)
		if (page_used(a, i + k))
			return false;
	return true;
}

/* A run of n free pages (n a multiple of unit, a power of two of at most
 * 8), starting on a multiple of unit, or NULL.  Every request's pages are
 * whole aligned units, so the free ones are too: a request fits once
 * enough are free. */
static uint8_t *arena_get(struct arena *a, uint32_t n, uint32_t unit)
{
	uint32_t run = 0;

	for (uint32_t i = 0; i < ARENA_PAGES; i += unit) {
		if (!run && (i % 64) == 0 && a->map[i / 64] == ~0ull) {
			i += 64 - unit;	/* a full word: skip it */
			continue;
		}
		if (!unit_free(a, i, unit)) {
			run = 0;
			continue;
		}
		run += unit;
		if (run == n) {
			mark(a, i + unit - n, n, true);
			return a->mem + (size_t)(i + unit - n) * PAGE;
		}
	}
	return NULL;
}

static void arena_put(struct arena *a, uint8_t *p, uint32_t n)
{
	if (p)
		mark(a, (uint32_t)((p - a->mem) / PAGE), n, false);
}

/* A request's data: runs of arena pages, in order.  One run where the
 * free pages allow, else as many as it takes: pages held by a client that
 * asks and does not read can leave the free ones in pieces, and a request
 * must fit once enough pages are free, wherever they are. */
struct seg {
	uint8_t *buf;
	uint32_t npages;
};

static void segs_put(struct arena *a, struct seg *v, uint32_t nv)
{
	for (uint32_t k = 0; k < nv; k++)
		arena_put(a, v[k].buf, v[k].npages);
}

/* n pages into *v (one, in *one; or a new array), in runs of whole units
 * of unit pages (a logical block: every part starts on one).  False when
 * there are not so many to be had. */
static bool arena_take(struct arena *a, uint32_t n, uint32_t unit, struct seg *one,
		       struct seg **v, uint32_t *nv)
{
	uint32_t got = 0, k = 0;
	struct seg *w;

	if (ARENA_PAGES - a->used < n)
		return false;
	if ((one->buf = arena_get(a, n, unit))) {
		one->npages = n;
		*v = one;
		*nv = 1;
		return true;
	}
	if (!(w = malloc(sizeof(*w) * (n / unit + 1))))
		return false;
	for (uint32_t i = 0; i < ARENA_PAGES && got < n;) {
		uint32_t run = 0;

		if (!unit_free(a, i, unit)) {
			i += unit;
			continue;
		}
		while (i + run < ARENA_PAGES && run < n - got && unit_free(a, i + run, unit))
			run += unit;
		mark(a, i, run, true);
		w[k++] = (struct seg){ a->mem + (size_t)i * PAGE, run };
		got += run;
		i += run;
	}
	if (got < n) {
		segs_put(a, w, k);
		free(w);
		return false;
	}
	*v = w;
	*nv = k;
	return true;
}

static uint32_t pages(uint32_t len)
{
	return (len + PAGE - 1) / PAGE;
}

/* --- connections and requests --------------------------------------------- */

struct nbdx;
struct conn;

struct nreq {
	struct nreq *next;		/* reply queue, free list */
	struct conn *c;
	uint64_t cookie, off;
	uint16_t type, flags;
	uint32_t len;
	struct seg *segs;		/* arena: READ, WRITE (&seg1, or an array) */
	uint32_t nsegs, npages;
	uint32_t parts;			/* RNBD IOs still out (+1 while submitting) */
	int perr;			/* the first one's error */
	bool then_flush;		/* a FUA trim or write-zeroes: a FLUSH
					 * after it, before the reply */
	struct seg seg1;
	uint32_t sent;			/* bytes of hdr (+ data) sent */
	uint32_t err;			/* NBD error */
	uint8_t hdr[NBD_REPLY_LEN];
};

struct conn {
	struct conn *next, *prev;	/* srv->conns */
	struct conn *stall_next;	/* srv's queue of those waiting for the arena */
	struct conn *flush_next;	/* srv's list of those with replies to send */
	struct nbdx *srv;
	int fd;
	unsigned id;
	char peer[80];
	uint32_t events;		/* registered with epoll */
	uint8_t *in;
	size_t inoff, inlen;
	struct nreq *wr;		/* WRITE whose payload is coming in */
	uint32_t wr_got;
	uint32_t drop;			/* payload bytes of a refused WRITE to drop */
	struct nbd_req pend;		/* parsed, waiting for arena pages */
	bool have_pend, stalled, flushing;
	struct nreq *rq_head, *rq_tail;	/* replies to send */
	unsigned inflight;		/* nreqs of this connection */
	bool eof, disc, closing, dead;
	bool shutting;			/* the export stops: what comes is
					 * answered ESHUTDOWN, then it closes */
	bool told_down;			/* ... and it was: its DISC ends it */
	bool dry;			/* a read drained the socket: wait for
					 * epoll's EPOLLIN before the next */
	bool throttled;			/* stopped at CONN_INFLIGHT or CONN_PAGES */
	bool quota_wait;		/* ... at CONN_PAGES: c->pend waits for its own pages */
	bool out_blocked;		/* the handshake's output is full: read
					 * nothing until it has gone */
	bool out_full;			/* the socket took less than it was
					 * offered: EPOLLOUT says when it takes
					 * more (else the round's end sends) */
	uint32_t pages;			/* arena pages its requests hold */
	uint64_t stuck_since;		/* replies waiting, the socket taking
					 * none of them since then; 0 not */
	/* while others wait for pages: the WRITE whose data is coming (by
	 * c->reqs and c->wr_got) when last seen moving, and since when */
	uint64_t wr_seen_req, wr_since;
	uint32_t wr_seen_got;
	uint64_t reqs, bytes_in, bytes_out;
	struct nbd_srv nbd;
};

struct listener {
	int fd;
	uint64_t paused_until;		/* out of epoll until then (EMFILE ...) */
	bool unix_sock;
	char path[108];			/* unix: removed at exit */
	char desc[300];
};

struct nbdx {
	struct sess *ss;
	struct nbd_export exp;
	struct arena arena;
	struct listener lis[MAX_LISTEN];
	unsigned nlis;
	struct conn *conns;
	struct conn *stall_head, *stall_tail;
	struct conn *flush_head;
	struct nreq *free_reqs;
	unsigned nconns, next_id;
	unsigned ndead;			/* closed, not yet freed (srv_reap) */
	uint32_t unit;			/* pages of a logical block (1 for 512 or 4096) */
	unsigned throttled;		/* connections stopped at CONN_INFLIGHT */
	unsigned lis_paused;		/* listeners out of epoll for a while */
	uint64_t stall_since;		/* the first in the stall queue waits */
	uint64_t unread_ns;		/* --unread-timeout, 0 never */
	uint64_t accepted, proto_errors;
	bool verbose, quiet;
	char desc[RNBD_NAME_MAX + RTRS_NAME_MAX + 64];
};

static void conn_pump(struct conn *c);
static void conn_flush(struct conn *c);
static void listeners_resume(struct nbdx *s);

static void logc(const struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logc(const struct conn *c, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG " nbd: connection %u (%s): ", c->id, c->peer);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static struct nreq *req_new(struct conn *c)
{
	struct nbdx *s = c->srv;
	struct nreq *r = s->free_reqs;

	if (r)
		s->free_reqs = r->next;
	else if (!(r = malloc(sizeof(*r))))
		return NULL;
	memset(r, 0, offsetof(struct nreq, hdr));
	r->c = c;
	c->inflight++;
	return r;
}

/* The request's pages back to the arena. */
static void req_put_pages(struct nreq *r)
{
	segs_put(&r->c->srv->arena, r->segs, r->nsegs);
	if (r->segs != &r->seg1)
		free(r->segs);
	r->c->pages -= r->npages;
	r->segs = NULL;
	r->nsegs = r->npages = 0;
}

/* iovecs (at most max) over r's data from byte at to its end: how many;
 * *bytes, what they hold. */
static size_t data_iov(const struct nreq *r, uint32_t at, struct iovec *iov, size_t max,
		       uint32_t *bytes)
{
	uint32_t k = 0, base = 0, end = at;
	size_t n = 0;

	while (k < r->nsegs && base + r->segs[k].npages * PAGE <= at)
		base += r->segs[k++].npages * PAGE;
	for (; k < r->nsegs && n < max && end < r->len; k++) {
		uint32_t sz = r->segs[k].npages * PAGE, from = end - base;
		uint32_t m = sz - from < r->len - end ? sz - from : r->len - end;

		iov[n++] = (struct iovec){ r->segs[k].buf + from, m };
		end += m;
		base += sz;
	}
	*bytes = end - at;
	return n;
}

static void req_free(struct nreq *r)
{
	struct conn *c = r->c;
	struct nbdx *s = c->srv;

	req_put_pages(r);
	r->next = s->free_reqs;
	s->free_reqs = r;
	c->inflight--;
}

static void set_events(struct conn *c)
{
	uint32_t want = 0;
	struct epoll_event ev;

	if (c->dead)
		return;
	if (!c->eof && !c->disc && !c->closing && !c->stalled && !c->quota_wait &&
	    !c->out_blocked && c->inflight < CONN_INFLIGHT && c->nbd.phase != NBD_PH_DONE)
		want |= EPOLLIN;
	if ((c->nbd.outlen || c->rq_head) && c->out_full)
		want |= EPOLLOUT;
	if (want == c->events)
		return;
	ev.events = want;
	ev.data.ptr = c;
	epoll_ctl(c->srv->ss->epfd, EPOLL_CTL_MOD, c->fd, &ev);
	c->events = want;
}

/* The connection goes: its socket now, its memory when its last request
 * (still at the server) comes back. */
static void conn_kill(struct conn *c)
{
	struct nbdx *s = c->srv;

	if (c->dead)
		return;
	c->dead = true;
	s->ndead++;
	epoll_ctl(s->ss->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	s->nconns--;
	if (s->verbose)
		logc(c, "closed after %llu requests", (unsigned long long)c->reqs);
	/* unsent replies and a half-received WRITE are ours to free */
	while (c->rq_head) {
		struct nreq *r = c->rq_head;

		c->rq_head = r->next;
		req_free(r);
	}
	c->rq_tail = NULL;
	if (c->wr) {
		struct nreq *r = c->wr;

		c->wr = NULL;
		req_free(r);
	}
}

/* Memory of dead connections goes only between rounds of the loop (an
 * event for one may still sit in the batch epoll_wait returned). */
static void srv_reap(struct nbdx *s)
{
	struct conn *c = s->conns, *next;

	/* (a walk over every connection each round would make idle ones
	 * cost every request) */
	for (; c && s->ndead; c = next) {
		next = c->next;
		if (!c->dead || c->inflight || c->stalled || c->flushing)
			continue;
		s->ndead--;
		if (c->throttled)
			s->throttled--;
		if (c->prev)
			c->prev->next = c->next;
		else
			s->conns = c->next;
		if (c->next)
			c->next->prev = c->prev;
		free(c->in);
		free(c);
	}
}

/* A connection that has said goodbye (DISC, EOF, ABORT), or whose export
 * stops, closes once its replies are out.  One whose export stops and
 * that sent nothing since closes then; one that did was answered
 * ESHUTDOWN, and closes at its DISC (or EOF), as the NBD spec has it: the
 * requests it sent meanwhile are answered too, and it reads its replies
 * and then the end, not a reset (a socket closed with input unread sends
 * RST).  nbdx_close() bounds the wait. */
static void conn_maybe_close(struct conn *c)
{
	char b;

	if (c->dead || !(c->disc || c->eof || c->closing || c->shutting) || c->inflight ||
	    c->nbd.outlen || c->wr || c->have_pend || c->drop)
		return;
	if (c->shutting && !c->disc && !c->eof && !c->closing &&
	    (c->told_down || c->inoff < c->inlen ||
	     recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0))
		return;	/* conn_pump answers what is there first */
	conn_kill(c);
}

static void want_flush(struct conn *c)
{
	struct nbdx *s = c->srv;

	if (c->flushing || c->dead)
		return;
	c->flushing = true;
	c->flush_next = s->flush_head;
	s->flush_head = c;
}

static void queue_reply(struct nreq *r)
{
	struct conn *c = r->c;

	if (c->dead) {
		req_free(r);
		return;
	}
	nbd_reply_hdr(r->hdr, r->err, r->cookie);
	/* a READ's data goes only with success */
	if (r->type != NBD_CMD_READ || r->err)
		r->len = 0;
	/* a WRITE's pages are done with now */
	if (r->type != NBD_CMD_READ)
		req_put_pages(r);
	r->next = NULL;
	if (c->rq_tail)
		c->rq_tail->next = r;
	else
		c->rq_head = r;
	c->rq_tail = r;
	want_flush(c);
}

static void req_done(void *priv, int err)
{
	struct nreq *r = priv;

	if (!err && r->then_flush) {
		r->then_flush = false;
		err = rnbd_clt_submit(r->c->srv->ss->dev, RNBD_OP_FLUSH, 0, 0, NULL, 0, req_done, r);
		if (!err)
			return;
	}
	r->err = nbd_errno(err);
	queue_reply(r);
}

static unsigned rnbd_op_of(unsigned type)
{
	switch (type) {
	case NBD_CMD_READ:
		return RNBD_OP_READ;
	case NBD_CMD_WRITE:
		return RNBD_OP_WRITE;
	case NBD_CMD_FLUSH:
		return RNBD_OP_FLUSH;
	case NBD_CMD_TRIM:
		return RNBD_OP_DISCARD;
	default:
		return RNBD_OP_WRITE_ZEROES;
	}
}

/* One of a READ's or WRITE's RNBD IOs (one per run of pages) answered. */
static void part_done(void *priv, int err)
{
	struct nreq *r = priv;

	if (err && !r->perr)
		r->perr = err;
	if (!--r->parts)
		req_done(r, r->perr);
}

static void submit(struct nreq *r)
{
	struct nbdx *s = r->c->srv;
	unsigned op = rnbd_op_of(r->type);
	bool fua = r->flags & NBD_CMD_FLAG_FUA;
	uint32_t rf = fua && op == RNBD_OP_WRITE ? RNBD_F_FUA : 0;
	int rc;

	/* FUA is valid on every NBD command (a READ ignores it), REQ_FUA on a
	 * write alone: the block layer ends a discard or write-zeroes that
	 * carries it with an IO error.  Those are followed by a FLUSH where
	 * the device has a write cache to flush. */
	r->then_flush = fua && (op == RNBD_OP_DISCARD || op == RNBD_OP_WRITE_ZEROES) &&
			(rnbd_clt_geom(s->ss->dev)->cache_policy & RNBD_WRITEBACK);

	/* "do not punch a hole": the block layer's REQ_NOUNMAP */
	if (op == RNBD_OP_WRITE_ZEROES && (r->flags & NBD_CMD_FLAG_NO_HOLE))
		rf |= RNBD_F_NOUNMAP;

	if (op == RNBD_OP_READ || op == RNBD_OP_WRITE) {
		uint64_t off = r->off;
		uint32_t left = r->len;

		r->parts = 1;	/* until every part is out */
		r->perr = 0;
		for (uint32_t k = 0; k < r->nsegs && left; k++) {
			uint32_t n = r->segs[k].npages * PAGE < left ? r->segs[k].npages * PAGE : left;

			r->parts++;
			rc = rnbd_clt_submit(s->ss->dev, op, rf, off, r->segs[k].buf, n, part_done, r);
			if (rc) {
				r->parts--;
				r->perr = rc;
				break;
			}
			off += n;
			left -= n;
		}
		part_done(r, 0);
		return;
	}
	rc = rnbd_clt_submit(s->ss->dev, op, rf, op == RNBD_OP_FLUSH ? 0 : r->off,
			     NULL, op == RNBD_OP_FLUSH ? 0 : r->len, req_done, r);
	if (rc)
		req_done(r, rc);
}

/* The connection waits for arena pages, behind those already waiting:
 * first come, first served, so a large request is not starved by small
 * ones. */
static void stall(struct conn *c)
{
	struct nbdx *s = c->srv;

	if (c->stalled)
		return;
	c->stalled = true;
	c->stall_next = NULL;
	if (s->stall_tail)
		s->stall_tail->stall_next = c;
	else {
		s->stall_head = c;
		s->stall_since = xtime_ns();
	}
	s->stall_tail = c;
}

/* Starts the parsed request c->pend: false when it must wait for pages. */
static bool start(struct conn *c)
{
	struct nbdx *s = c->srv;
	struct nbd_req *q = &c->pend;
	struct nreq *r;

	if (!q->err && (q->type == NBD_CMD_READ || q->type == NBD_CMD_WRITE)) {
		uint32_t np = pages(q->len);
		struct seg one = { 0 }, *v;
		uint32_t nv;

		if (c->pages && c->pages + np > CONN_PAGES) {
			/* its own replies must go first: it waits alone, not in
			 * the queue the other connections wait in */
			c->quota_wait = true;
			if (!c->throttled) {
				c->throttled = true;
				s->throttled++;
			}
			return false;
		}
		if ((s->stall_head && s->stall_head != c) ||
		    !arena_take(&s->arena, np, s->unit, &one, &v, &nv)) {
			stall(c);
			return false;
		}
		if (!(r = req_new(c))) {
			segs_put(&s->arena, v, nv);
			if (v != &one)
				free(v);
			goto nomem;
		}
		r->seg1 = one;
		r->segs = v == &one ? &r->seg1 : v;
		r->nsegs = nv;
		r->npages = np;
		c->pages += np;
	} else if (!(r = req_new(c))) {
		goto nomem;
	}
	c->have_pend = false;
	c->reqs++;
	r->cookie = q->cookie;
	r->type = q->type;
	r->flags = q->flags;
	r->off = q->off;
	r->len = q->len;
	if (q->err) {
		c->drop = q->payload;
		r->err = q->err;
		queue_reply(r);
		return true;
	}
	if (q->type == NBD_CMD_WRITE) {
		c->wr = r;
		c->wr_got = 0;
		return true;
	}
	submit(r);
	return true;
nomem:
	/* no memory for the bookkeeping: try again when something frees */
	stall(c);
	return false;
}

static void srv_unstall(struct nbdx *s)
{
	while (s->stall_head) {
		struct conn *c = s->stall_head;

		if (!c->dead && c->have_pend && !start(c))
			return;	/* still no room: it stays first */
		s->stall_head = c->stall_next;
		if (!s->stall_head)
			s->stall_tail = NULL;
		else
			s->stall_since = xtime_ns();	/* the next one's turn */
		c->stalled = false;
		if (!c->dead)
			conn_pump(c);
	}
}

/* Reads into the input buffer: 1 read something, 0 would block, -1 the
 * connection ended (eof set, or killed). */
static int fill_in(struct conn *c)
{
	ssize_t n;

	if (c->eof)
		goto ended;
	if (c->inoff) {
		memmove(c->in, c->in + c->inoff, c->inlen - c->inoff);
		c->inlen -= c->inoff;
		c->inoff = 0;
	}
	if (c->inlen == INBUF)
		return 1;	/* full: the parser takes some first */
	if (c->dry)
		return 0;
	n = read(c->fd, c->in + c->inlen, INBUF - c->inlen);
	if (n > 0) {
		/* less than asked for: what follows is not there yet, and
		 * a read now would only say EAGAIN (the level-triggered
		 * epoll tells when it is) */
		c->dry = (size_t)n < INBUF - c->inlen;
		c->inlen += (size_t)n;
		c->bytes_in += (uint64_t)n;
		return 1;
	}
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
		c->dry = errno == EAGAIN;
		return 0;
	}
	if (n < 0 && !c->srv->quiet)
		logc(c, "%s", strerror(errno));
	/* the same words as for a hang-up epoll reports (srv_on_fd) */
	if (n == 0 && c->wr && !c->srv->quiet)
		logc(c, "the client hung up in the middle of a write's data (not written)");
	else if (n == 0 && (c->drop || c->inlen) && !c->srv->quiet)
		logc(c, "the client hung up in the middle of a request");
	c->eof = true;
ended:
	if (c->wr) {	/* a write whose data never came is not done */
		struct nreq *r = c->wr;

		c->wr = NULL;
		req_free(r);
	}
	c->drop = 0;	/* nor is there more of a refused one to come */
	return -1;
}

/* A WRITE's payload: from the input buffer, then straight from the
 * socket into its pages.  1 done, 0 would block, -1 ended. */
static int take_payload(struct conn *c)
{
	struct nreq *r = c->wr;
	size_t have = c->inlen - c->inoff, need = r->len - c->wr_got, k = have < need ? have : need;
	struct iovec iov[16];
	uint32_t want;
	ssize_t n;

	/* what the input buffer has of it first */
	while (k) {
		data_iov(r, c->wr_got, iov, 1, &want);
		if (want > k)
			want = (uint32_t)k;
		memcpy(iov[0].iov_base, c->in + c->inoff, want);
		c->inoff += want;
		c->wr_got += want;
		k -= want;
	}
	while (c->wr_got < r->len) {
		size_t niov;

		if (c->dry)
			return 0;
		niov = data_iov(r, c->wr_got, iov, 16, &want);
		n = readv(c->fd, iov, (int)niov);
		if (n > 0) {
			c->dry = (size_t)n < want;	/* as in fill_in */
			c->wr_got += (uint32_t)n;
			c->bytes_in += (uint64_t)n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			c->dry = errno == EAGAIN;
			return 0;
		}
		return fill_in(c);	/* says why, frees the write */
	}
	c->wr = NULL;
	submit(r);
	return 1;
}

static int drop_payload(struct conn *c)
{
	while (c->drop) {
		size_t have = c->inlen - c->inoff, k = have < c->drop ? have : c->drop;
		int rc;

		c->inoff += k;
		c->drop -= (uint32_t)k;
		if (c->drop && (rc = fill_in(c)) <= 0)
			return rc;
	}
	return 1;
}

/* Takes what the client sent, as far as it may: until the socket is
 * empty, or the connection must wait (arena, in-flight limit, output). */
static void conn_pump(struct conn *c)
{
	struct nbdx *s = c->srv;
	struct nbd_req q;
	enum nbd_ev ev;
	size_t used;

	while (!c->dead) {
		if (c->wr) {
			if (take_payload(c) <= 0)
				break;
			continue;
		}
		if (c->drop) {
			if (drop_payload(c) <= 0)
				break;
			continue;
		}
		if (c->have_pend) {
			if (c->stalled || c->quota_wait || !start(c))
				break;
			continue;
		}
		if (c->disc || c->closing || c->nbd.phase == NBD_PH_DONE)
			break;
		if (c->inflight >= CONN_INFLIGHT) {
			/* what is buffered waits for replies to go out (the
			 * socket may have nothing more to say: srv_after_round
			 * comes back here) */
			if (!c->throttled) {
				c->throttled = true;
				s->throttled++;
			}
			break;
		}
		used = nbd_srv_input(&c->nbd, c->in + c->inoff, c->inlen - c->inoff, &ev, &q);
		c->inoff += used;
		switch (ev) {
		case NBD_EV_MORE:
			/* after EOF what is buffered is still served (a client
			 * may shut down its sending side and wait for replies) */
			if (!used && (c->eof || fill_in(c) <= 0))
				goto out;
			continue;
		case NBD_EV_BLOCKED:
			/* a client that asks and does not read: nothing more
			 * is read until what it was told has gone */
			conn_flush(c);
			if (c->dead)
				goto out;
			if (c->nbd.outlen) {
				c->out_blocked = true;
				goto out;
			}
			continue;
		case NBD_EV_OPT:
			continue;
		case NBD_EV_READY:
			if (s->verbose)
				logc(c, "export %s: transmission", s->exp.name);
			continue;
		case NBD_EV_REQ:
			if (c->shutting && !q.err) {
				q.err = NBD_ESHUTDOWN;	/* its WRITE data is dropped */
				c->told_down = true;
			}
			c->pend = q;
			c->have_pend = true;
			continue;
		case NBD_EV_DISC:
			c->disc = true;
			goto out;
		case NBD_EV_CLOSE:
			c->closing = true;
			goto out;
		case NBD_EV_ERROR:
			s->proto_errors++;
			if (!s->quiet)
				logc(c, "closed: %s", nbd_srv_why(&c->nbd));
			conn_kill(c);
			return;
		}
	}
out:
	if (c->dead)
		return;
	if (c->nbd.outlen)
		want_flush(c);
	conn_maybe_close(c);
	set_events(c);
}

/* Sends the handshake's output, then the queued replies, as much as the
 * socket takes; a reply's pages go back to the arena once it is out. */
static void conn_flush(struct conn *c)
{
	struct iovec iov[IOV_BATCH];
	struct msghdr mh = { .msg_iov = iov };
	bool moved = false;
	ssize_t w;

	while (!c->dead && (c->nbd.outlen || c->rq_head)) {
		size_t n = 0, total = 0, sent;

		if (c->nbd.outlen) {
			iov[n++] = (struct iovec){ c->nbd.out, c->nbd.outlen };
			total += c->nbd.outlen;
		}
		for (struct nreq *r = c->rq_head; r && n + 2 <= IOV_BATCH; r = r->next) {
			uint32_t hs = r->sent < NBD_REPLY_LEN ? r->sent : NBD_REPLY_LEN;
			uint32_t ds = r->sent - hs, db = 0;

			if (hs < NBD_REPLY_LEN)
				iov[n++] = (struct iovec){ r->hdr + hs, NBD_REPLY_LEN - hs };
			if (r->len)
				n += data_iov(r, ds, iov + n, IOV_BATCH - n, &db);
			total += NBD_REPLY_LEN - hs + db;
			if (ds + db < r->len)
				break;	/* the rest of it, and what follows, next time */
		}
		mh.msg_iovlen = n;
		w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			if (c->srv->verbose || (errno != EPIPE && errno != ECONNRESET))
				logc(c, "%s", strerror(errno));
			conn_kill(c);
			return;
		}
		c->bytes_out += (uint64_t)w;
		moved |= w > 0;
		sent = (size_t)w;
		if (c->nbd.outlen) {
			size_t k = (size_t)w < c->nbd.outlen ? (size_t)w : c->nbd.outlen;

			nbd_srv_sent(&c->nbd, k);
			w -= (ssize_t)k;
		}
		while (w > 0 && c->rq_head) {
			struct nreq *r = c->rq_head;
			uint32_t left = NBD_REPLY_LEN + r->len - r->sent;

			if ((size_t)w < left) {
				r->sent += (uint32_t)w;
				break;
			}
			w -= left;
			c->rq_head = r->next;
			if (!c->rq_head)
				c->rq_tail = NULL;
			req_free(r);
		}
		if (sent < total)
			break;	/* the socket is full: EPOLLOUT says when to go on */
	}
	if (c->dead)
		return;
	c->out_full = c->nbd.outlen || c->rq_head;
	if (!c->out_full)
		c->stuck_since = 0;
	else if (moved || !c->stuck_since)
		c->stuck_since = xtime_ns();
	conn_maybe_close(c);
	set_events(c);
}

/* A client that asks and does not read its replies holds arena pages
 * until it does: one cannot keep the others from the largest request
 * (CONN_PAGES), several can -- and so can clients that stop in the middle
 * of a WRITE's data.  When the connection first in line for pages has
 * waited --unread-timeout, those that hold pages and whose socket has
 * taken none of their replies, or given none of a WRITE's data, for as
 * long are closed: a client stopped (^Z) for that long while others need
 * the buffers loses its connections, as one whose peer vanished would.
 * Runs each round while some connection waits for pages. */
static bool evict_unread(struct nbdx *s)
{
	uint64_t now = xtime_ns();
	bool due = now - s->stall_since >= s->unread_ns, any = false;
	char d[32];

	for (struct conn *c = s->conns; c; c = c->next) {
		const char *what = NULL;
		uint64_t idle = 0;

		if (c->dead || !c->pages)
			continue;
		/* (not read because we stopped reading it -- at CONN_INFLIGHT,
		 * say -- is no stall of the client's) */
		if (c->wr && (c->wr_seen_req != c->reqs || c->wr_seen_got != c->wr_got ||
			      !c->wr_since || !(c->events & EPOLLIN))) {
			c->wr_seen_req = c->reqs;
			c->wr_seen_got = c->wr_got;
			c->wr_since = now;
		}
		if (!due)
			continue;
		if (c->stuck_since && now - c->stuck_since >= s->unread_ns) {
			what = "its replies went unread";
			idle = now - c->stuck_since;
		} else if (c->wr && now - c->wr_since >= s->unread_ns) {
			what = "a write's data stopped coming";
			idle = now - c->wr_since;
		} else {
			continue;
		}
		if (!s->quiet)
			logc(c, "closed: %s for %s while others waited for buffers (--unread-timeout)",
			     what, xfmt_duration(idle, d, sizeof(d)));
		conn_kill(c);
		any = true;
	}
	return any;
}

/* After each round of the loop: replies out, waiting connections on,
 * dead ones freed. */
static void srv_after_round(struct nbdx *s)
{
	do {
		while (s->flush_head) {
			struct conn *c = s->flush_head;

			s->flush_head = c->flush_next;
			c->flushing = false;
			conn_flush(c);
			/* a handshake stopped for its output goes on once that
			 * is out, as after EPOLLOUT (it asks for neither EPOLLIN
			 * nor EPOLLOUT then) */
			if (!c->dead && c->out_blocked && !c->nbd.outlen) {
				c->out_blocked = false;
				conn_pump(c);
			}
		}
		srv_unstall(s);
		if (s->stall_head && s->unread_ns && evict_unread(s))
			srv_unstall(s);	/* their queued replies' pages are free */
		/* those stopped at the in-flight limit go on once replies
		 * have left: their next requests may be buffered already */
		for (struct conn *c = s->conns; s->throttled && c; c = c->next) {
			if (!c->throttled)
				continue;
			if (!c->dead && (c->inflight >= CONN_INFLIGHT ||
					 (c->quota_wait && c->pages + pages(c->pend.len) > CONN_PAGES)))
				continue;
			c->throttled = false;
			c->quota_wait = false;
			s->throttled--;
			if (!c->dead)
				conn_pump(c);
		}
		listeners_resume(s);
	} while (s->flush_head);
	srv_reap(s);
}

/* Out of descriptors or memory: the connection waits in the backlog, and
 * the listener, readable all along, would spin the loop; it sits out a
 * second instead (one line each time). */
static void listener_pause(struct nbdx *s, struct listener *l, const char *why)
{
	if (l->paused_until)
		return;
	epoll_ctl(s->ss->epfd, EPOLL_CTL_DEL, l->fd, NULL);
	l->paused_until = xtime_ns() + 1000000000ull;
	s->lis_paused++;
	if (!s->quiet)
		fprintf(stderr, PROG " nbd: %s: %s; new connections wait a second\n", l->desc, why);
}

static void listeners_resume(struct nbdx *s)
{
	uint64_t now;

	if (!s->lis_paused)
		return;
	now = xtime_ns();
	for (unsigned i = 0; i < s->nlis; i++) {
		struct listener *l = &s->lis[i];
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 2 + i };

		if (!l->paused_until || now < l->paused_until || l->fd < 0)
			continue;
		l->paused_until = 0;
		s->lis_paused--;
		epoll_ctl(s->ss->epfd, EPOLL_CTL_ADD, l->fd, &ev);
	}
}

static void srv_accept(struct nbdx *s, struct listener *l)
{
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);
	struct epoll_event ev = { .events = 0 };
	struct conn *c;
	int fd, one = 1;

	while ((fd = accept4(l->fd, (struct sockaddr *)&sa, &sl,
			     SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		c = calloc(1, sizeof(*c));
		if (c)
			c->in = malloc(INBUF);
		if (!c || !c->in) {
			if (c)
				free(c);
			close(fd);
			listener_pause(s, l, "out of memory for a connection");
			return;
		}
		c->srv = s;
		c->fd = fd;
		c->id = ++s->next_id;
		if (l->unix_sock) {
			snprintf(c->peer, sizeof(c->peer), "unix");
		} else {
			char h[INET6_ADDRSTRLEN], p[8];

			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			if (getnameinfo((struct sockaddr *)&sa, sl, h, sizeof(h), p, sizeof(p),
					NI_NUMERICHOST | NI_NUMERICSERV) == 0)
				snprintf(c->peer, sizeof(c->peer), "%s%s%s:%s",
					 strchr(h, ':') ? "[" : "", h, strchr(h, ':') ? "]" : "", p);
		}
		nbd_srv_init(&c->nbd, &s->exp, false);
		ev.data.ptr = c;
		if (epoll_ctl(s->ss->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			close(fd);
			free(c->in);
			free(c);
			continue;
		}
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		s->nconns++;
		s->accepted++;
		if (s->verbose)
			logc(c, "connected");
		conn_flush(c);	/* the greeting */
		sl = sizeof(sa);
	}
	if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
		listener_pause(s, l, strerror(errno));
	else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED && !s->quiet)
		fprintf(stderr, PROG " nbd: accept on %s: %s\n", l->desc, strerror(errno));
}

static void srv_on_fd(void *ctx, uint64_t tag, uint32_t events)
{
	struct nbdx *s = ctx;
	struct conn *c;

	if (tag < 2 + MAX_LISTEN) {
		srv_accept(s, &s->lis[tag - 2]);
		return;
	}
	c = (struct conn *)(uintptr_t)tag;
	if (c->dead)
		return;
	/* hung up both ways, or an error: nobody is left to answer */
	if (events & (EPOLLHUP | EPOLLERR)) {
		if (c->wr && !s->quiet)
			logc(c, "the client hung up in the middle of a write's data (not written)");
		else if (c->inflight && !s->quiet)
			logc(c, "the client hung up with %u request(s) in flight", c->inflight);
		else if (s->verbose)
			logc(c, "the client hung up");
		conn_kill(c);
		return;
	}
	if (events & EPOLLOUT) {
		conn_flush(c);
		if (!c->dead && c->out_blocked && !c->nbd.outlen) {
			c->out_blocked = false;
			conn_pump(c);
		}
	}
	if (!c->dead && (events & EPOLLIN)) {
		c->dry = false;
		conn_pump(c);
	}
}

static void srv_status(void *ctx, struct xnode *m)
{
	struct nbdx *s = ctx;
	struct xnode *n = xnode_set_map(m, "nbd"), *l = xnode_set_list(n, "listen");

	xnode_set_str(n, "export", s->exp.name);
	for (unsigned i = 0; i < s->nlis; i++)
		xnode_push_str(l, s->lis[i].desc);
	xnode_set_u64(n, "connections", s->nconns);
	xnode_set_u64(n, "accepted", s->accepted);
	xnode_set_u64(n, "protocol_errors", s->proto_errors);
	xnode_set_u64(n, "buffer_bytes_used", (uint64_t)s->arena.used * PAGE);
}

/* --- listeners ----------------------------------------------------------- */

/* An NBD URI's export part: unreserved characters and '/' as they are,
 * the rest %XX. */
static void uri_export(const char *name, char *buf, size_t len)
{
	size_t o = 0;

	for (const unsigned char *p = (const unsigned char *)name; *p && o + 4 < len; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    strchr("-._~/", *p))
			buf[o++] = (char)*p;
		else
			o += (size_t)snprintf(buf + o, len - o, "%%%02X", *p);
	}
	buf[o] = 0;
}

static int listen_tcp(struct listener *l, const struct xuri *u, const char *exp, char *err,
		      size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char port[8], e[NBD_NAME_MAX * 3 + 1];
	int one = 1, off = 0, rc;
	uint16_t p;

	snprintf(port, sizeof(port), "%u", u->port);
	rc = getaddrinfo(u->host, port, &hints, &ai);
	if (rc) {
		snprintf(err, errlen, "cannot resolve '%s': %s", u->host,
			 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return -1;
	}
	l->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->fd < 0)
		goto fail;
	setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6)
		setsockopt(l->fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
	if (bind(l->fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(l->fd, 128) < 0 ||
	    getsockname(l->fd, (struct sockaddr *)&ss, &sl) < 0)
		goto fail;
	freeaddrinfo(ai);
	p = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					   : ((struct sockaddr_in *)&ss)->sin_port);
	uri_export(exp, e, sizeof(e));
	snprintf(l->desc, sizeof(l->desc), "nbd://%s%s%s:%u/%s", strchr(u->host, ':') ? "[" : "",
		 u->host, strchr(u->host, ':') ? "]" : "", p, e);
	return 0;
fail:
	snprintf(err, errlen, "listen on tcp://%s%s%s:%u: %s", strchr(u->host, ':') ? "[" : "",
		 u->host, strchr(u->host, ':') ? "]" : "", u->port, strerror(errno));
	freeaddrinfo(ai);
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
	return -1;
}

static int listen_unix(struct listener *l, const char *path, const char *exp, char *err,
		       size_t errlen)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char e[NBD_NAME_MAX * 3 + 1];
	struct stat st;
	int fd;

	if (strlen(path) >= sizeof(a.sun_path)) {
		snprintf(err, errlen, "--socket %s: path too long", path);
		return -1;
	}
	strcpy(a.sun_path, path);
	/* a socket file nobody answers on is left by a dead process; anything
	 * else at the path is not ours to remove */
	if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
		snprintf(err, errlen, "--socket %s: exists and is not a socket", path);
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
		close(fd);
		snprintf(err, errlen, "--socket %s: in use by a running process", path);
		return -1;
	}
	if (fd >= 0 && errno == ECONNREFUSED)
		unlink(path);
	if (fd >= 0)
		close(fd);
	l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(l->fd, 128) < 0) {
		snprintf(err, errlen, "--socket %s: %s", path, strerror(errno));
		if (l->fd >= 0)
			close(l->fd);
		l->fd = -1;
		return -1;
	}
	l->unix_sock = true;
	snprintf(l->path, sizeof(l->path), "%s", path);
	uri_export(exp, e, sizeof(e));
	snprintf(l->desc, sizeof(l->desc), "nbd+unix:///%s?socket=%s", e, path);
	return 0;
}

static void srv_close_listeners(struct nbdx *s)
{
	for (unsigned i = 0; i < s->nlis; i++) {
		struct listener *l = &s->lis[i];

		if (l->fd < 0)
			continue;
		epoll_ctl(s->ss->epfd, EPOLL_CTL_DEL, l->fd, NULL);
		close(l->fd);
		l->fd = -1;
		if (l->unix_sock)
			unlink(l->path);
	}
}

/* --- the serving core's interface (cmd.h) -------------------------------- */

static void nbdx_make_export(struct nbdx *s, const struct sess_opts *o)
{
	const struct rnbd_clt_geom *g = rnbd_clt_geom(s->ss->dev);
	uint16_t f = NBD_FLAG_CAN_MULTI_CONN;

	/* what the kernel's rnbd-client tells its block layer
	 * (blk_queue_write_cache from cache_policy; discard and write-zeroes
	 * limits), as NBD flags */
	if (g->cache_policy & RNBD_WRITEBACK)
		f |= NBD_FLAG_SEND_FLUSH;
	if (g->cache_policy & RNBD_FUA)
		f |= NBD_FLAG_SEND_FUA;
	if (g->max_discard_sectors)
		f |= NBD_FLAG_SEND_TRIM;
	if (g->max_write_zeroes_sectors)
		f |= NBD_FLAG_SEND_WRITE_ZEROES;
	/* read-only: nothing to flush, trim or zero (and the device refuses
	 * every request but a read) */
	if (o->access == RNBD_ACCESS_RO)
		f = NBD_FLAG_CAN_MULTI_CONN | NBD_FLAG_READ_ONLY;
	/* (a power of two up to 32 KiB: a unit divides the map's words) */
	s->unit = g->logical_block_size > PAGE && g->logical_block_size <= 32768 &&
			  !(g->logical_block_size & (g->logical_block_size - 1))
		  ? g->logical_block_size / PAGE
		  : 1;
	snprintf(s->desc, sizeof(s->desc), "RNBD device %s over RTRS session %s", o->device,
		 o->session);
	s->exp = (struct nbd_export){
		.name = o->device,
		.description = s->desc,
		.size = g->size,
		.tflags = f,
		.min_block = g->logical_block_size >= 512 ? g->logical_block_size : 512,
		.pref_block = g->physical_block_size > 4096 ? g->physical_block_size : 4096,
		.max_block = MAX_BLOCK,
	};
}

struct nbdx *nbdx_open(struct sess *ss)
{
	struct nbdx *s = calloc(1, sizeof(*s));

	if (!s || !(s->arena.mem = aligned_alloc(PAGE, ARENA_BYTES))) {
		free(s);
		fail(ss->cmd, "out of memory");
		return NULL;
	}
	s->ss = ss;
	s->unread_ns = NBDX_UNREAD_NS;
	s->verbose = ss->o->verbose;
	s->quiet = ss->o->quiet;
	if (sess_add_mem(ss, s->arena.mem, ARENA_BYTES)) {
		free(s->arena.mem);
		free(s);
		return NULL;
	}
	nbdx_make_export(s, ss->o);
	ss->on_fd = srv_on_fd;
	ss->on_fd_ctx = s;
	ss->status_extra = srv_status;
	return s;
}

void nbdx_set_unread_timeout(struct nbdx *s, uint64_t ns)
{
	s->unread_ns = ns;
}

const struct nbd_export *nbdx_export(const struct nbdx *s)
{
	return &s->exp;
}

int nbdx_listen(struct nbdx *s, const struct xuri *tcp, const char *path)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct listener *l = &s->lis[s->nlis];
	char err[512];

	if (s->nlis == MAX_LISTEN)
		return fail(s->ss->cmd, "at most %d listeners", MAX_LISTEN);
	l->fd = -1;
	if (tcp ? listen_tcp(l, tcp, s->exp.name, err, sizeof(err))
		: listen_unix(l, path, s->exp.name, err, sizeof(err)))
		return fail(s->ss->cmd, "%s", err);
	ev.data.u64 = 2 + s->nlis++;
	epoll_ctl(s->ss->epfd, EPOLL_CTL_ADD, l->fd, &ev);
	return EXIT_OK;
}

const char *nbdx_uri(const struct nbdx *s, unsigned i)
{
	return i < s->nlis ? s->lis[i].desc : NULL;
}

int nbdx_adopt(struct nbdx *s, int fd, const char *peer)
{
	struct epoll_event ev = { .events = 0 };
	struct conn *c = calloc(1, sizeof(*c));

	if (!c || !(c->in = malloc(INBUF))) {
		free(c);
		return -ENOMEM;
	}
	c->srv = s;
	c->fd = fd;
	c->id = ++s->next_id;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	nbd_srv_init(&c->nbd, &s->exp, true);
	ev.data.ptr = c;
	if (epoll_ctl(s->ss->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int rc = -errno;

		free(c->in);
		free(c);
		return rc;
	}
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	set_events(c);
	return 0;
}

unsigned nbdx_nconns(const struct nbdx *s)
{
	return s->nconns;
}

void nbdx_after_round(struct nbdx *s)
{
	srv_after_round(s);
}

unsigned nbdx_close(struct nbdx *s)
{
	struct sess *ss = s->ss;
	unsigned lost = 0;
	uint64_t end;

	srv_after_round(s);
	srv_close_listeners(s);
	/* what was asked is answered (5 s at most; a second signal ends it
	 * at once): replies go out, requests that come meanwhile are
	 * answered ESHUTDOWN (the NBD spec's "the server is shutting down",
	 * after which a client sends only NBD_CMD_DISC), and each connection
	 * closes once it has nothing in flight and nothing unread; one still
	 * in the handshake closes at once */
	for (struct conn *c = s->conns; c; c = c->next)
		if (!c->dead) {
			if (c->nbd.phase == NBD_PH_TRANSMISSION)
				c->shutting = true;
			else
				c->closing = true;
			conn_pump(c);
			if (!c->dead && c->nbd.outlen)
				conn_flush(c);
			conn_maybe_close(c);
			set_events(c);
		}
	cli_stop_requested = 0;
	/* one deadline for all of it, the session's close too */
	end = xtime_ns() + 5000000000ull;
	ss->close_by = end;
	while (s->nconns && !cli_stop_requested && xtime_ns() < end && rtrs_clt_alive(ss->clt)) {
		sess_run(ss, 100000000ull);
		srv_after_round(s);
	}
	/* what is left got no answer: said, and the exit status says so */
	for (struct conn *c = s->conns; c; c = c->next)
		if (!c->dead) {
			unsigned n = c->inflight + (c->have_pend ? 1u : 0u);

			if (n && !s->quiet)
				logc(c, "closed with %u request(s) unanswered", n);
			lost += n;
			conn_kill(c);
		}
	srv_after_round(s);
	/* requests at the server write into the arena: they come back (or
	 * fail) before it goes, or it stays */
	for (;;) {
		bool busy = false;

		for (struct conn *c = s->conns; c; c = c->next)
			busy |= c->inflight > 0;
		if (!busy || cli_stop_requested || xtime_ns() >= end || !rtrs_clt_alive(ss->clt))
			break;
		sess_run(ss, 100000000ull);
		srv_after_round(s);
	}
	srv_reap(s);
	ss->on_fd = NULL;
	ss->status_extra = NULL;
	if (cli_stop_requested)
		ss->close_by = 1;	/* a second signal: no more waiting */
	if (s->conns)
		return lost;	/* still in flight: the memory stays (we are exiting) */
	rtrs_clt_del_mem(ss->clt, s->arena.mem);
	while (s->free_reqs) {
		struct nreq *r = s->free_reqs;

		s->free_reqs = r->next;
		free(r);
	}
	free(s->arena.mem);
	free(s);
	return lost;
}

/* --- rtrs-client nbd ------------------------------------------------------ */

enum { OPT_SOCKET = 0x200, OPT_UNREAD };

struct nbd_opts {
	struct sess_opts so;
	uint64_t unread_ns;
	struct xuri tcp[MAX_LISTEN];
	const char *sock[MAX_LISTEN];
	unsigned ntcp, nsock;
};

static int nbd_opts(int argc, char **argv, struct nbd_opts *o)
{
	static const struct option lo[] = {
		SESS_LONGOPTS,
		{ "listen", required_argument, NULL, 'l' },
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "unread-timeout", required_argument, NULL, OPT_UNREAD },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *e;
	char err[300];
	int c, rc;

	o->unread_ns = NBDX_UNREAD_NS;
	while ((c = getopt_long(argc, argv, SESS_SHORTOPTS "l:h", lo, NULL)) != -1) {
		rc = sess_opt("nbd", c, optarg, &o->so);
		if (rc == 1)
			continue;
		if (rc)
			return rc;
		switch (c) {
		case 'l':
			if (o->ntcp + o->nsock >= MAX_LISTEN)
				return usage_error("nbd", "at most %d listeners", MAX_LISTEN);
			if (xuri_parse(optarg, NBD_DEFAULT_PORT, &o->tcp[o->ntcp], err, sizeof(err)))
				return usage_error("nbd", "-l: %s", err);
			if (o->tcp[o->ntcp].scheme != XURI_TCP)
				return usage_error("nbd", "-l: '%s' is not tcp://HOST[:PORT]"
						   " (--socket PATH listens on a unix socket)", optarg);
			o->ntcp++;
			break;
		case OPT_SOCKET:
			if (o->ntcp + o->nsock >= MAX_LISTEN)
				return usage_error("nbd", "at most %d listeners", MAX_LISTEN);
			if (!*optarg)
				return usage_error("nbd", "--socket: an empty path");
			o->sock[o->nsock++] = optarg;
			break;
		case OPT_UNREAD:
			if (xparse_duration(optarg, 1000000000ull, 0, 86400 * 1000000000ull,
					    &o->unread_ns, &e))
				return usage_error("nbd", "--unread-timeout: '%s' is %s", optarg, e);
			break;
		case 'h':
			cmd_usage(stdout, "nbd");
			return -1;
		default:
			return bad_option("nbd", SESS_SHORTOPTS "l:h", argv);
		}
	}
	if (optind < argc)
		return usage_error("nbd", "unexpected argument '%s'", argv[optind]);
	return sess_opts_finish("nbd", &o->so, true);
}

int cmd_nbd(int argc, char **argv)
{
	struct nbd_opts o = { 0 };
	struct sess ss;
	struct nbdx *x;
	char defpath[256];
	unsigned lost;
	int rc;

	sess_opts_init(&o.so);
	rc = nbd_opts(argc, argv, &o);
	if (rc)
		return rc < 0 ? EXIT_OK : rc;
	if (!o.ntcp && !o.nsock) {
		char name[300];

		snprintf(name, sizeof(name), PROG "-%s-nbd", o.so.session);
		if ((rc = xctl_default_path(name, defpath, sizeof(defpath))))
			return fail("nbd", "no default socket path: %s (say --socket PATH)",
				    strerror(-rc));
		o.sock[o.nsock++] = defpath;
	}
	cli_stop_handlers();
	o.so.ro_fallback = true;
	if ((rc = sess_open(&ss, "nbd", &o.so)))
		return rc;
	if (!(x = nbdx_open(&ss))) {
		rc = EXIT_FAIL;
		goto out;
	}
	nbdx_set_unread_timeout(x, o.unread_ns);
	for (unsigned i = 0; i < o.ntcp + o.nsock; i++)
		if ((rc = nbdx_listen(x, i < o.ntcp ? &o.tcp[i] : NULL,
				      i < o.ntcp ? NULL : o.sock[i - o.ntcp])))
			goto out_nbdx;
	ss.activity = "nbd";
	/* the URIs, one per line, once every listener takes connections:
	 * scripts wait for them */
	for (unsigned i = 0; nbdx_uri(x, i); i++)
		printf("%s\n", nbdx_uri(x, i));
	int e = cli_stdout_error();

	if (e) {
		rc = fail("nbd", "standard output: %s: the export's URIs are lost", strerror(e));
		goto out_nbdx;
	}
	rc = EXIT_OK;
	while (sess_run(&ss, 1000000000ull) != -EINTR) {
		nbdx_after_round(x);
		if (!rtrs_clt_alive(ss.clt)) {
			rc = fail("nbd", "all paths to %s are down: no more reconnect attempts",
				  o.so.session);
			break;
		}
	}
out_nbdx:
	if ((lost = nbdx_close(x)) && rc == EXIT_OK)
		rc = fail("nbd", "%u request(s) got no answer before the end", lost);
out:
	sess_close(&ss);
	return rc;
}
