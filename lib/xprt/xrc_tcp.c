/* tcp:// backend of xrc.h: the verbs operations over one non-blocking TCP
 * socket, framed as in xrc_tcp_wire.h (doc/xrc-tcp-framing.md).
 *
 * Progress is single-threaded and happens inside xrc_poll(); a post only
 * rings the "doorbell" (one write to the socket when nothing was queued
 * before), as a verbs post would.  Payloads go out zero-copy from the
 * caller's sges (a batch of at most TX_COPY_MAX bytes is copied once, for
 * one send(2)); the buffer is the caller's again at the request's
 * completion.  Incoming bytes are read into a staging buffer and parsed
 * many frames at a time; a payload that starts on an empty staging buffer
 * is read straight into its destination (receive buffer, registered
 * region, read sges) by the same readv that picks up the next headers
 * (a read into the staging buffer alone is a recv).  While payloads are
 * large the staging part of that readv is small (RX_BULK_STAGE), so that
 * little of the next payload is staged and copied.
 *
 * Flow control is TCP's own: when a SEND (or a write-with-imm) arrives and no
 * receive is posted, the parser stops and the socket is not read until one
 * is, so the sender's socket fills up -- the tcp equivalent of RNR.
 * Control frames we owe the peer (ACK, NAK, READ_RSP) take one slot each of
 * a ring sized by the peer's announced sq_depth, which a well-behaved peer
 * cannot overrun; a peer that does only stalls its own stream.
 *
 * Connection setup (the CONN_REQ/ACC/REJ exchange, the listener) is in
 * xrc_tcp_cm.c. */
#include "xprt/xrc_tcp_pri.h"
#include "xprt/xrc_tcp_wire.h"
#include "core/xtime.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define RXBUF_SIZE	(256u * 1024)
#define TX_IOV_MAX	256		/* iovecs per sendmsg */
#define RX_ROUNDS	16		/* reads per xrc_poll(): fairness between connections */
/* After a frame of RX_BULK payload bytes or more, until one of RX_SMALL to
 * RX_BULK, staging reads take at most RX_BULK_STAGE: the next frame's
 * header and the start of its payload, whose rest then goes straight into
 * its destination instead of through the staging buffer and a memcpy. */
#define RX_BULK		(32u << 10)
#define RX_SMALL	512u
#define RX_BULK_STAGE	4096u
#define NO_SQ		UINT32_MAX

/* --- the domain: one process-wide key table ------------------------------
 * Regions and memory windows share it.  rkey = generation (12 bits) << 20 |
 * slot (20 bits), the generation counted per slot: a key that was
 * deregistered, or that a window's rebind replaced, stays invalid for the
 * next 4095 keys of its slot (verbs give a window 8 bits).  A mutex
 * because connections (and so lookups) may run on different threads.
 *
 * Every operation is O(1) in the table's size: a server registers a
 * region and a window per chunk per path (512 of each by default), and
 * a scan per key would make the setup and teardown of a path cost the
 * square of what is registered.  Free slots form a FIFO list (the
 * oldest free slot is reused first, which spreads the generations over
 * the table); a bound window sits in its region's list and, type 2, in
 * its connection's, so a region's deregistration and a connection's end
 * reach exactly their windows. */

#define KEY_SLOT_BITS	20
#define KEY_SLOT_MAX	(1u << KEY_SLOT_BITS)
#define KEY_GEN_MASK	0xfffu

/* A window's two lists: its region's, its connection's (type 2). */
enum { ON_MR, ON_CONN };

/* What a key names: a region, or a window (bound or not). */
struct tkey {
	uint32_t rkey;
	bool valid;			/* region: always; window: bound */
	uint8_t *addr;
	size_t len;
	unsigned access;
	struct xrc_win *win;		/* a window's own base, else NULL */
	const struct xrc_mr *mr;	/* window: the region under it */
	struct xrc *conn;		/* type-2 window: the only connection it serves */
	/* A window while valid: in its region's list (ON_MR), and while conn
	 * is set in that connection's (ON_CONN); a region: the head of its
	 * windows' list. */
	struct {
		struct tkey *next, **pprev;
	} ln[2];
	struct tkey *wins;
};

struct tcp_mr {
	struct xrc_mr_base base;	/* first: what callers see */
	struct tkey k;
};

struct tcp_win {
	struct xrc_win base;		/* first: what callers see */
	struct tkey k;
};

static const struct xrc_dom_ops tcp_dom_ops;

static struct {
	struct xrc_dom dom;
	pthread_mutex_t lock;
	struct tkey **slot;
	uint16_t *gen;
	uint32_t *free_next;		/* free slots: free_head .. free_tail, 0 ends */
	uint32_t cap, used, free_head, free_tail;
} tdom = { { &tcp_dom_ops }, PTHREAD_MUTEX_INITIALIZER, NULL, NULL, NULL, 0, 0, 0, 0 };

struct xrc_dom *xrc_tcp_domain(void) { return &tdom.dom; }

/* A fresh key for slot i (lock held). */
static uint32_t key_next(uint32_t i)
{
	uint16_t g = (uint16_t)((tdom.gen[i] + 1) & KEY_GEN_MASK);

	tdom.gen[i] = g ? g : 1;
	return (uint32_t)tdom.gen[i] << KEY_SLOT_BITS | i;
}

/* Slot i to the end of the free list (lock held). */
static void slot_free(uint32_t i)
{
	tdom.free_next[i] = 0;
	if (tdom.free_tail)
		tdom.free_next[tdom.free_tail] = i;
	else
		tdom.free_head = i;
	tdom.free_tail = i;
}

/* Doubles the table, its new slots free (lock held; slot 0 is never
 * used: rkey 0 is the heartbeat's).  0 or -ENOMEM. */
static int key_grow(void)
{
	uint32_t ncap = tdom.cap ? tdom.cap * 2 : 64;
	struct tkey **ns;
	uint16_t *ng;
	uint32_t *nf;

	if (ncap > KEY_SLOT_MAX)
		return -ENOMEM;
	ns = realloc(tdom.slot, ncap * sizeof(*ns));
	if (ns)
		tdom.slot = ns;
	ng = realloc(tdom.gen, ncap * sizeof(*ng));
	if (ng)
		tdom.gen = ng;
	nf = realloc(tdom.free_next, ncap * sizeof(*nf));
	if (nf)
		tdom.free_next = nf;
	if (!ns || !ng || !nf)
		return -ENOMEM;
	memset(ns + tdom.cap, 0, (ncap - tdom.cap) * sizeof(*ns));
	memset(ng + tdom.cap, 0, (ncap - tdom.cap) * sizeof(*ng));
	for (uint32_t i = tdom.cap ? tdom.cap : 1; i < ncap; i++)
		slot_free(i);
	tdom.cap = ncap;
	return 0;
}

/* Puts k in a free slot with a fresh key.  0, or -ENOMEM with the table full. */
static int key_add(struct tkey *k)
{
	uint32_t i;

	pthread_mutex_lock(&tdom.lock);
	if (!tdom.free_head && key_grow() < 0) {
		pthread_mutex_unlock(&tdom.lock);
		return -ENOMEM;
	}
	i = tdom.free_head;
	tdom.free_head = tdom.free_next[i];
	if (!tdom.free_head)
		tdom.free_tail = 0;
	k->rkey = key_next(i);
	tdom.slot[i] = k;
	tdom.used++;
	pthread_mutex_unlock(&tdom.lock);
	return 0;
}

static void key_del(struct tkey *k)
{
	uint32_t i = k->rkey & (KEY_SLOT_MAX - 1);

	if (i < tdom.cap && tdom.slot[i] == k) {
		tdom.slot[i] = NULL;
		tdom.used--;
		slot_free(i);
	}
}

/* Window lists (lock held): k first in *head, k out of list l. */
static void klist_add(struct tkey **head, struct tkey *k, int l)
{
	k->ln[l].next = *head;
	if (*head)
		(*head)->ln[l].pprev = &k->ln[l].next;
	*head = k;
	k->ln[l].pprev = head;
}

static void klist_del(struct tkey *k, int l)
{
	if (!k->ln[l].pprev)
		return;
	*k->ln[l].pprev = k->ln[l].next;
	if (k->ln[l].next)
		k->ln[l].next->ln[l].pprev = k->ln[l].pprev;
	k->ln[l].next = NULL;
	k->ln[l].pprev = NULL;
}

static void win_unlink(struct tkey *k)
{
	klist_del(k, ON_MR);
	klist_del(k, ON_CONN);
}

/* A window stops serving (lock held): unbound, and a type-2 one is free to
 * be bound again. */
static void win_kill(struct tkey *k)
{
	k->valid = false;
	k->conn = NULL;
	k->win->valid = false;
	k->win->conn = NULL;
	win_unlink(k);
}

static struct xrc_mr *tcp_reg(struct xrc_dom *d, void *addr, size_t len, unsigned access,
			      char *err, size_t errlen)
{
	struct tcp_mr *m = calloc(1, sizeof(*m));

	if (!m) {
		xerr(err, errlen, "register: out of memory");
		errno = ENOMEM;
		return NULL;
	}
	m->k = (struct tkey){ .valid = true, .addr = addr, .len = len, .access = access };
	if (key_add(&m->k)) {
		free(m);
		xerr(err, errlen, "register: too many regions");
		errno = ENOMEM;
		return NULL;
	}
	m->base.mr = (struct xrc_mr){ .addr = addr, .len = len, .access = access,
				      .lkey = m->k.rkey, .rkey = m->k.rkey };
	m->base.dom = d;
	return &m->base.mr;
}

static void tcp_dereg(struct xrc_mr *mr)
{
	struct tcp_mr *m = (struct tcp_mr *)mr;

	pthread_mutex_lock(&tdom.lock);
	key_del(&m->k);
	/* Windows over it must not outlive it: its memory may be freed next. */
	while (m->k.wins)
		win_kill(m->k.wins);
	pthread_mutex_unlock(&tdom.lock);
	free(m);
}

_Atomic bool xtcp_test_no_windows;

static struct xrc_win *tcp_win_new(struct xrc_dom *d, unsigned flags, char *err, size_t errlen)
{
	struct tcp_win *w;

	if (xtcp_test_no_windows) {
		xerr(err, errlen, "tcp has no %s memory windows",
		     flags & XRC_WIN_TYPE2 ? "type-2" : "type-1");
		errno = EOPNOTSUPP;
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (!w) {
		xerr(err, errlen, "window: out of memory");
		errno = ENOMEM;
		return NULL;
	}
	w->base = (struct xrc_win){ .dom = d, .flags = flags };
	w->k.win = &w->base;
	if (key_add(&w->k)) {
		free(w);
		xerr(err, errlen, "window: too many regions and windows");
		errno = ENOMEM;
		return NULL;
	}
	w->base.rkey = w->k.rkey;
	return &w->base;
}

static void tcp_win_free(struct xrc_win *xw)
{
	struct tcp_win *w = (struct tcp_win *)xw;

	pthread_mutex_lock(&tdom.lock);
	key_del(&w->k);
	win_unlink(&w->k);
	pthread_mutex_unlock(&tdom.lock);
	free(w);
}

/* Bind (mr set) or invalidate (mr NULL) as it executes: at once, since
 * nothing queued before it on the send queue reads our keys.  The old key
 * dies here; the new one is valid from here. */
static void win_apply(struct xrc *c, struct tkey **cwins, struct xrc_win *xw,
		      const struct xrc_mr *mr, void *addr, size_t len, unsigned access)
{
	struct tcp_win *w = (struct tcp_win *)xw;
	struct tkey *k = &w->k;
	bool t2 = xw->flags & XRC_WIN_TYPE2;

	pthread_mutex_lock(&tdom.lock);
	win_unlink(k);
	k->rkey = key_next(k->rkey & (KEY_SLOT_MAX - 1));
	k->valid = mr != NULL;
	k->addr = addr;
	k->len = len;
	k->access = access;
	k->mr = mr;
	k->conn = mr && t2 ? c : NULL;
	xw->rkey = k->rkey;
	xw->valid = k->valid;
	xw->conn = k->conn;
	if (mr)		/* xrc_win_bind checked that mr is ours */
		klist_add(&((struct tcp_mr *)(uintptr_t)mr)->k.wins, k, ON_MR);
	if (k->conn)
		klist_add(cwins, k, ON_CONN);
	pthread_mutex_unlock(&tdom.lock);
}

/* The receiving side of a send-with-invalidate (xrc.h): a window valid for
 * this connection dies, any other key is only reported. */
static void key_remote_inv(const struct xrc *c, uint32_t rkey)
{
	uint32_t i = rkey & (KEY_SLOT_MAX - 1);
	struct tkey *k;

	pthread_mutex_lock(&tdom.lock);
	k = i < tdom.cap ? tdom.slot[i] : NULL;
	if (k && k->win && k->valid && k->rkey == rkey && (!k->conn || k->conn == c))
		win_kill(k);
	pthread_mutex_unlock(&tdom.lock);
}

/* A connection goes away: type-2 windows bound on it die with it, and as
 * on rdma (where they stay bound to a QP that is gone) they can only be
 * freed: they stay "valid" for xrc_win_bind()'s -EBUSY. */
static void key_conn_gone(struct tkey **cwins)
{
	pthread_mutex_lock(&tdom.lock);
	while (*cwins) {
		struct tkey *k = *cwins;

		k->valid = false;
		k->conn = NULL;
		k->win->conn = NULL;
		win_unlink(k);
	}
	pthread_mutex_unlock(&tdom.lock);
}

static const struct xrc_dom_ops tcp_dom_ops = { tcp_reg, tcp_dereg, tcp_win_new, tcp_win_free };

/* The target-side check of seed 002's RDMA rules: key (a type-2 window's
 * only on its own connection), access, then bounds with no overflow, all
 * before a byte is touched.  *p gets the address.  A zero-length access
 * checks nothing (IBA C9-88: RTRS's heartbeat is a zero-length write with
 * immediate, rkey 0). */
static uint32_t dom_check(const struct xrc *c, uint32_t rkey, uint64_t raddr, uint32_t len,
			  unsigned need, uint8_t **p)
{
	uint32_t i = rkey & (KEY_SLOT_MAX - 1), st = XTCP_ST_OK;
	struct tkey *k;

	if (!len)
		return XTCP_ST_OK;
	pthread_mutex_lock(&tdom.lock);
	k = i < tdom.cap ? tdom.slot[i] : NULL;
	if (!k || !k->valid || k->rkey != rkey || (k->conn && k->conn != c)) {
		st = XTCP_ST_BAD_KEY;
	} else if (!(k->access & need)) {
		st = XTCP_ST_ACCESS;
	} else {
		uint64_t base = (uintptr_t)k->addr;

		if (raddr < base || len > k->len || raddr - base > k->len - len)
			st = XTCP_ST_BOUNDS;
		else
			*p = k->addr + (raddr - base);
	}
	pthread_mutex_unlock(&tdom.lock);
	return st;
}

/* --- connection state ---------------------------------------------------- */

struct sq_ent {
	uint64_t wr_id;
	uint8_t op;		/* XRC_OP_SEND / WRITE / READ / BIND */
	uint8_t flags;
	bool has_imm;
	bool has_inv;		/* SEND: rkey is the key to invalidate */
	bool written;		/* the whole frame is in the kernel */
	bool answered;		/* WRITE: ACKed or NAKed; READ: response in */
	bool done;
	int status;
	int nsg;
	uint32_t imm, seq, rkey, len;
	uint64_t raddr;
	struct xrc_sge sg[XRC_MAX_SGE];
};

struct rq_ent {
	uint64_t wr_id;
	void *addr;
	uint32_t cap, len, imm, inv_rkey;
	uint8_t op;
	bool has_imm, has_inv, done;
	int status;
};

/* A batch of at most this many bytes goes out by send(2) from one copy:
 * sendmsg(2) first copies and checks the msghdr and the iovec array,
 * about 100 ns more per call on a 2-vCPU KVM guest, more than copying a
 * few hundred bytes costs (an 8-byte port message is 48 bytes with its
 * port and SEND headers). */
#define TX_COPY_MAX 512

struct tx_frame {
	uint32_t sq;		/* SQ slot, or NO_SQ for ACK/NAK/READ_RSP */
	uint8_t type;
	int niov;
	size_t total;
	struct iovec iov[1 + XRC_MAX_SGE];
	uint8_t hdr[XTCP_HDR_MAX];
};

struct tcp_conn {
	struct xrc base;
	int fd;
	/* send queue: slots [sq_head, sq_tail); [sq_txnext, sq_tail) not yet framed */
	struct sq_ent *sq;
	uint32_t sq_head, sq_tail, sq_txnext;
	uint8_t *inl;			/* sq_depth * max_inline bytes */
	uint32_t seq_next;		/* next WRITE/READ_REQ seq we send */
	uint32_t *wq, wq_head, wq_tail;	/* WRITEs waiting for ACK/NAK (SQ slots) */
	uint32_t *rdq, rd_head, rd_tail;	/* READs waiting for a response */
	/* frames on their way into the socket, in wire order */
	struct tx_frame *tx;
	uint32_t tx_cap, tx_head, tx_tail, ctl_n, ctl_cap;
	size_t tx_off;			/* bytes of the head frame already sent */
	bool ack_due;
	uint32_t ack_seq;
	uint32_t ack_owed, ack_max;	/* WRITEs the ACK owed answers; at ack_max it goes */
	uint64_t ack_delay, ack_by;	/* opts.ack_delay_ns; when the owed ACK must go */
	/* receive queue: [rq_head, rq_fill) filled or filling, [rq_fill, rq_tail) free */
	struct rq_ent *rq;
	uint32_t rq_head, rq_fill, rq_tail;
	/* receive side of the stream */
	uint8_t *rxbuf;
	size_t rx_start, rx_end;
	bool rx_blocked;		/* parser waits for a receive or a ctl slot */
	bool in_payload, discard;
	struct xtcp_frame cur;
	uint64_t remain;
	struct iovec dst[XRC_MAX_SGE];
	int ndst, dsti;
	uint32_t cur_rq, cur_sq;
	uint32_t rx_seq;		/* last WRITE/READ_REQ seq from the peer */
	uint32_t burst;			/* bytes per direction per poll (xrc_opts) */
	size_t rx_budget;		/* what this poll may still read */
	/* xrc_ready_hints(): the owner's epoll says when to read; rx_maybe
	 * is false from a read that drained the socket until it says so */
	bool rx_hints, rx_maybe;
	bool rx_bulk;			/* large payloads: stage little (RX_BULK) */
	struct tkey *t2wins;		/* type-2 windows bound on it (key_conn_gone) */
	uint8_t txcopy[TX_COPY_MAX];	/* a small batch, one piece (tx_flush_ack) */
};

static const struct xrc_conn_ops tcp_conn_ops;

static struct tcp_conn *TC(struct xrc *c) { return (struct tcp_conn *)c; }

static uint32_t pow2_up(uint32_t v)
{
	uint32_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

static void sq_check(struct sq_ent *e)
{
	if (e->written && (e->op == XRC_OP_SEND || e->answered))
		e->done = true;
}

/* Verbs flush: the connection is gone, every outstanding request completes
 * with -ECONNRESET (a request that already failed keeps its status), and the
 * peer sees EOF, as a verbs peer would see its QP go to error. */
static void conn_fail(struct tcp_conn *c)
{
	uint32_t sd = c->base.sq_depth, rd = c->base.rq_depth;

	if (c->base.state == XRC_DOWN)
		return;
	c->base.state = XRC_DOWN;
	shutdown(c->fd, SHUT_RDWR);
	for (uint32_t i = c->sq_head; i != c->sq_tail; i++) {
		struct sq_ent *e = &c->sq[i % sd];
		if (!e->done) {
			e->status = e->status ? e->status : -ECONNRESET;
			e->done = true;
		}
	}
	for (uint32_t i = c->rq_head; i != c->rq_tail; i++) {
		struct rq_ent *e = &c->rq[i % rd];
		if (!e->done) {
			e->status = e->status ? e->status : -ECONNRESET;
			e->op = XRC_OP_RECV;
			e->done = true;
		}
	}
	c->rq_fill = c->rq_tail;
	c->sq_txnext = c->sq_tail;
	c->tx_head = c->tx_tail = c->ctl_n = 0;
	c->tx_off = 0;
	c->wq_head = c->wq_tail = c->rd_head = c->rd_tail = 0;
	c->in_payload = c->ack_due = false;
	c->ack_owed = 0;
}

/* --- transmit -------------------------------------------------------------- */

static struct tx_frame *tx_push(struct tcp_conn *c, uint8_t type, uint32_t sq)
{
	struct tx_frame *t = &c->tx[c->tx_tail++ % c->tx_cap];

	t->type = type;
	t->sq = sq;
	t->niov = 1;
	t->iov[0].iov_base = t->hdr;
	return t;
}

static void tx_seal(struct tx_frame *t, const struct xtcp_frame *f)
{
	t->iov[0].iov_len = xtcp_encode(t->hdr, f);
	t->total = 0;
	for (int i = 0; i < t->niov; i++)
		t->total += t->iov[i].iov_len;
}

static void tx_ctl(struct tcp_conn *c, uint8_t type, uint32_t seq, uint32_t st, void *data,
		   uint32_t len)
{
	struct xtcp_frame f = { .type = type, .seq = seq, .status = st, .len = len };
	struct tx_frame *t = tx_push(c, type, NO_SQ);

	if (len) {
		t->iov[1] = (struct iovec){ data, len };
		t->niov = 2;
	}
	tx_seal(t, &f);
	c->ctl_n++;
}

/* Frames the posted requests that may go: a FENCEd one waits until every
 * earlier READ has its response (verbs fence semantics). */
static void sq_kick(struct tcp_conn *c)
{
	while (c->sq_txnext != c->sq_tail) {
		uint32_t slot = c->sq_txnext % c->base.sq_depth;
		struct sq_ent *e = &c->sq[slot];
		struct xtcp_frame f = { .imm = e->imm, .seq = e->seq, .rkey = e->rkey,
					.raddr = e->raddr };
		struct tx_frame *t;

		if (e->op == XRC_OP_BIND) {	/* executed at post time, no frame */
			c->sq_txnext++;
			continue;
		}
		if ((e->flags & XRC_FENCE) && c->rd_head != c->rd_tail &&
		    c->rdq[c->rd_head % c->base.sq_depth] != slot)
			return;
		c->sq_txnext++;
		f.type = e->op == XRC_OP_SEND ? XTCP_SEND :
			 e->op == XRC_OP_WRITE ? XTCP_WRITE : XTCP_READ_REQ;
		f.flags = e->has_imm ? XTCP_F_IMM : e->has_inv ? XTCP_F_INV : 0;
		if (e->has_inv)
			f.inv_rkey = e->rkey;
		t = tx_push(c, f.type, slot);
		if (e->op == XRC_OP_READ) {
			f.rlen = e->len;
		} else if (e->flags & XRC_INLINE) {
			f.len = e->len;
			if (e->len)
				t->iov[t->niov++] = (struct iovec){
					c->inl + (size_t)slot * c->base.max_inline, e->len };
		} else {
			f.len = e->len;
			for (int i = 0; i < e->nsg; i++)
				if (e->sg[i].len)
					t->iov[t->niov++] = (struct iovec){ e->sg[i].addr,
									    e->sg[i].len };
		}
		tx_seal(t, &f);
	}
}

static void tx_frame_done(struct tcp_conn *c, struct tx_frame *t)
{
	if (t->sq == NO_SQ) {
		c->ctl_n--;
		return;
	}
	c->sq[t->sq].written = true;
	sq_check(&c->sq[t->sq]);
}

/* Whether the ACK owed may wait (opts.ack_delay_ns): nothing else goes
 * out now to carry it, less than ack_max WRITEs are owed, and its time has
 * not come.  The clock is read only while one is held. */
static bool ack_held(const struct tcp_conn *c)
{
	return c->ack_delay && c->tx_head == c->tx_tail && c->ack_owed < c->ack_max &&
	       xtime_ns() < c->ack_by;
}

/* Writes queued frames until the socket is full or `burst` bytes went out,
 * many frames per call, an owed ACK first unless `hold` and ack_held();
 * true when frames are left for a later call although the socket would
 * take more (the caller must not sleep on the fd for them). */
static bool tx_flush_ack(struct tcp_conn *c, bool hold)
{
	if (c->ack_due && c->ctl_n < c->ctl_cap && !(hold && ack_held(c))) {
		struct tx_frame *last = &c->tx[(c->tx_tail - 1) % c->tx_cap];

		/* One ACK answers every WRITE up to its seq: fold into a
		 * queued ACK that has not started going out. */
		if (c->tx_head != c->tx_tail && last->type == XTCP_ACK &&
		    (c->tx_tail - 1 != c->tx_head || !c->tx_off)) {
			struct xtcp_frame f = { .type = XTCP_ACK, .seq = c->ack_seq };
			tx_seal(last, &f);
		} else {
			tx_ctl(c, XTCP_ACK, c->ack_seq, 0, NULL, 0);
		}
		c->ack_due = false;
		c->ack_owed = 0;
	}
	size_t budget = c->burst;

	while (c->base.state == XRC_UP && c->tx_head != c->tx_tail && budget) {
		struct iovec iov[TX_IOV_MAX];
		struct msghdr mh = { .msg_iov = iov };
		size_t want = 0, skip = c->tx_off;
		ssize_t n;

		for (uint32_t i = c->tx_head; i != c->tx_tail && mh.msg_iovlen < TX_IOV_MAX &&
		     want < budget; i++) {
			struct tx_frame *t = &c->tx[i % c->tx_cap];

			for (int k = 0; k < t->niov && mh.msg_iovlen < TX_IOV_MAX; k++) {
				struct iovec v = t->iov[k];

				if (skip >= v.iov_len) {
					skip -= v.iov_len;
					continue;
				}
				v.iov_base = (uint8_t *)v.iov_base + skip;
				v.iov_len -= skip;
				skip = 0;
				iov[mh.msg_iovlen++] = v;
				want += v.iov_len;
			}
		}
		if (want <= TX_COPY_MAX) {
			size_t o = 0;

			for (size_t i = 0; i < mh.msg_iovlen; i++) {
				memcpy(c->txcopy + o, iov[i].iov_base, iov[i].iov_len);
				o += iov[i].iov_len;
			}
			n = send(c->fd, c->txcopy, o, MSG_NOSIGNAL | MSG_DONTWAIT);
		} else {
			n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		}
		if (n > 0)
			budget = (size_t)n < budget ? budget - (size_t)n : 0;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				conn_fail(c);
			return false;
		}
		for (size_t left = (size_t)n; left;) {
			struct tx_frame *t = &c->tx[c->tx_head % c->tx_cap];
			size_t rest = t->total - c->tx_off;

			if (left < rest) {
				c->tx_off += left;
				break;
			}
			left -= rest;
			c->tx_off = 0;
			c->tx_head++;
			tx_frame_done(c, t);
		}
		if ((size_t)n < want)	/* socket buffer full */
			return false;
	}
	return c->base.state == XRC_UP && c->tx_head != c->tx_tail;
}

static bool tx_flush(struct tcp_conn *c)
{
	return tx_flush_ack(c, true);
}

/* --- receive ---------------------------------------------------------------- */

static int proto_err(struct tcp_conn *c)
{
	conn_fail(c);
	return -1;
}

static void dst_set1(struct tcp_conn *c, void *p, uint32_t len)
{
	c->dst[0] = (struct iovec){ p, len };
	c->ndst = len ? 1 : 0;
}

/* Moves m payload bytes into the destination; src NULL: readv put them there. */
static void dst_advance(struct tcp_conn *c, const uint8_t *src, size_t m)
{
	c->remain -= m;
	if (c->discard)
		return;
	while (m) {
		struct iovec *v = &c->dst[c->dsti];
		size_t k = m < v->iov_len ? m : v->iov_len;

		if (src) {
			memcpy(v->iov_base, src, k);
			src += k;
		}
		v->iov_base = (uint8_t *)v->iov_base + k;
		v->iov_len -= k;
		m -= k;
		if (!v->iov_len)
			c->dsti++;
	}
}

static void read_answered(struct tcp_conn *c, struct sq_ent *e)
{
	e->answered = true;
	c->rd_head++;
	sq_check(e);
	sq_kick(c);	/* a FENCEd request may be waiting for this read */
}

/* Pops WRITEs the peer has applied: every seq before `upto` (NAK) or up to
 * and including it (ACK).  The target works in stream order, so an answer
 * for seq N says every earlier WRITE went through. */
static void writes_acked(struct tcp_conn *c, uint32_t upto, bool inclusive)
{
	while (c->wq_head != c->wq_tail) {
		struct sq_ent *e = &c->sq[c->wq[c->wq_head % c->base.sq_depth]];
		int32_t d = (int32_t)(e->seq - upto);

		if (d > 0 || (d == 0 && !inclusive))
			return;
		e->answered = true;
		sq_check(e);
		c->wq_head++;
	}
}

/* Acts on one decoded header.  0: consumed (payload, if any, follows),
 * 1: cannot act yet (no posted receive, no control slot): the header stays
 * in the buffer and reading stops, -1: the connection failed. */
static int rx_frame(struct tcp_conn *c, const struct xtcp_frame *f)
{
	uint32_t sd = c->base.sq_depth, rd = c->base.rq_depth, st;
	bool imm = f->flags & XTCP_F_IMM;
	struct sq_ent *e;
	uint8_t *p = NULL;

	c->cur = *f;
	c->remain = f->len;
	c->discard = false;
	if (f->len >= RX_BULK)
		c->rx_bulk = true;
	else if (f->len >= RX_SMALL)
		c->rx_bulk = false;
	c->ndst = c->dsti = 0;
	switch (f->type) {
	case XTCP_SEND: {
		struct rq_ent *r;

		if (c->rq_fill == c->rq_tail)
			return 1;
		r = &c->rq[c->rq_fill % rd];
		c->cur_rq = c->rq_fill++;
		if (f->len > r->cap) {
			/* verbs: the receive completes with a length error
			 * and the QP goes to error. */
			r->status = -EMSGSIZE;
			return proto_err(c);
		}
		dst_set1(c, r->addr, f->len);
		break;
	}
	case XTCP_WRITE:
		if (f->seq != c->rx_seq + 1)
			return proto_err(c);
		st = dom_check(&c->base, f->rkey, f->raddr, f->len, XRC_ACCESS_REMOTE_WRITE, &p);
		if (st && c->ctl_n >= c->ctl_cap)
			return 1;
		if (!st && imm && c->rq_fill == c->rq_tail)
			return 1;
		c->rx_seq = f->seq;
		if (st) {
			/* Refused: the payload is read and dropped, our memory
			 * is untouched, the connection stays up. */
			tx_ctl(c, XTCP_NAK, f->seq, st, NULL, 0);
			c->base.stats.remote_errors++;
			c->discard = true;
		} else {
			dst_set1(c, p, f->len);
			if (imm)
				c->cur_rq = c->rq_fill++;
		}
		break;
	case XTCP_READ_REQ:
		if (f->seq != c->rx_seq + 1)
			return proto_err(c);
		if (c->ctl_n >= c->ctl_cap)
			return 1;
		st = dom_check(&c->base, f->rkey, f->raddr, f->rlen, XRC_ACCESS_REMOTE_READ, &p);
		c->rx_seq = f->seq;
		if (st)
			c->base.stats.remote_errors++;
		tx_ctl(c, st ? XTCP_NAK : XTCP_READ_RSP, f->seq, st, p, st ? 0 : f->rlen);
		break;
	case XTCP_READ_RSP:
		if (c->rd_head == c->rd_tail)
			return proto_err(c);
		c->cur_sq = c->rdq[c->rd_head % sd];
		e = &c->sq[c->cur_sq];
		if (e->seq != f->seq || (!f->status && f->len != e->len))
			return proto_err(c);
		if (f->status) {
			e->status = xtcp_status_errno(f->status);
			c->base.stats.remote_errors++;
			read_answered(c, e);
			break;
		}
		for (int i = 0; i < e->nsg; i++)
			if (e->sg[i].len)
				c->dst[c->ndst++] = (struct iovec){ e->sg[i].addr, e->sg[i].len };
		break;
	case XTCP_ACK:
		if ((int32_t)(f->seq - (c->seq_next - 1)) > 0)
			return proto_err(c);
		writes_acked(c, f->seq, true);
		break;
	case XTCP_NAK:
		writes_acked(c, f->seq, false);
		c->base.stats.remote_errors++;
		if (c->wq_head != c->wq_tail &&
		    (e = &c->sq[c->wq[c->wq_head % sd]])->seq == f->seq) {
			e->status = xtcp_status_errno(f->status);
			e->answered = true;
			sq_check(e);
			c->wq_head++;
		} else if (c->rd_head != c->rd_tail &&
			   (e = &c->sq[c->rdq[c->rd_head % sd]])->seq == f->seq) {
			e->status = xtcp_status_errno(f->status);
			read_answered(c, e);
		} else {
			return proto_err(c);
		}
		break;
	default:	/* CM frames after the handshake */
		return proto_err(c);
	}
	c->in_payload = true;
	return 0;
}

static void payload_done(struct tcp_conn *c)
{
	const struct xtcp_frame *f = &c->cur;
	struct rq_ent *r = &c->rq[c->cur_rq % c->base.rq_depth];
	bool imm = f->flags & XTCP_F_IMM;

	c->in_payload = false;
	switch (f->type) {
	case XTCP_SEND:
		/* verbs: the key is invalidated before the receive completes */
		if (f->flags & XTCP_F_INV)
			key_remote_inv(&c->base, f->inv_rkey);
		*r = (struct rq_ent){ .wr_id = r->wr_id, .addr = r->addr, .cap = r->cap,
				      .len = f->len, .imm = f->imm, .op = XRC_OP_RECV,
				      .has_imm = imm, .done = true,
				      .has_inv = f->flags & XTCP_F_INV, .inv_rkey = f->inv_rkey };
		c->base.stats.recvs++;
		c->base.stats.rx_bytes += f->len;
		break;
	case XTCP_WRITE:
		if (c->discard)
			break;
		if (!c->ack_due && c->ack_delay)
			c->ack_by = xtime_ns() + c->ack_delay;
		c->ack_due = true;
		c->ack_owed++;
		c->ack_seq = f->seq;
		c->base.stats.rx_bytes += f->len;
		if (imm) {
			*r = (struct rq_ent){ .wr_id = r->wr_id, .addr = r->addr, .cap = r->cap,
					      .len = f->len, .imm = f->imm, .op = XRC_OP_RECV_IMM,
					      .has_imm = true, .done = true };
			c->base.stats.recvs++;
		}
		break;
	case XTCP_READ_RSP:
		if (f->status)
			break;
		c->base.stats.rx_bytes += f->len;
		read_answered(c, &c->sq[c->cur_sq]);
		break;
	}
}

/* Parses and applies every whole frame in the staging buffer. */
static void rx_parse(struct tcp_conn *c)
{
	c->rx_blocked = false;
	while (c->base.state == XRC_UP) {
		size_t avail = c->rx_end - c->rx_start;
		struct xtcp_frame f;
		int rc;

		if (c->in_payload) {
			size_t m = avail < c->remain ? avail : (size_t)c->remain;

			dst_advance(c, c->rxbuf + c->rx_start, m);
			c->rx_start += m;
			if (c->remain)
				return;
			payload_done(c);
			continue;
		}
		rc = xtcp_decode(c->rxbuf + c->rx_start, avail, c->base.max_send, &f);
		if (rc == XTCP_EMORE)
			return;
		if (rc < 0) {
			conn_fail(c);
			return;
		}
		switch (rx_frame(c, &f)) {
		case 1:
			c->rx_blocked = true;
			return;
		case 0:
			c->rx_start += (size_t)rc;
			break;
		default:
			return;
		}
	}
}

/* One read: the rest of the current payload straight into its destination
 * when nothing of it is staged, then the staging buffer for what follows.
 * 1: the socket may have more, 0: drained, -1: failed. */
static int rx_read(struct tcp_conn *c)
{
	struct iovec iov[XRC_MAX_SGE + 1];
	size_t direct = 0, want, m;
	int k = 0;
	ssize_t n;

	if (c->rx_start == c->rx_end) {
		c->rx_start = c->rx_end = 0;
	} else if (c->rx_start) {
		/* at most a partial header: the parser consumed the rest */
		memmove(c->rxbuf, c->rxbuf + c->rx_start, c->rx_end - c->rx_start);
		c->rx_end -= c->rx_start;
		c->rx_start = 0;
	}
	if (c->in_payload && !c->discard && !c->rx_end)
		for (int i = c->dsti; i < c->ndst; i++) {
			iov[k++] = c->dst[i];
			direct += c->dst[i].iov_len;
		}
	m = RXBUF_SIZE - c->rx_end;
	if (c->rx_bulk && m > RX_BULK_STAGE)
		m = RX_BULK_STAGE > c->rx_end ? RX_BULK_STAGE - c->rx_end : 64;
	if (m > c->rx_budget)
		m = c->rx_budget > 64 ? c->rx_budget : 64;	/* room for headers */
	iov[k++] = (struct iovec){ c->rxbuf + c->rx_end, m };
	want = direct + m;
	/* recv(2) when there is one buffer: readv(2) goes through the file
	 * layer and copies the iovec array in first, about 150 ns more per
	 * call on a 2-vCPU KVM guest -- paid by every round of a busy poll */
	n = k == 1 ? recv(c->fd, iov[0].iov_base, iov[0].iov_len, MSG_DONTWAIT) :
		     readv(c->fd, iov, k);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (n < 0 && errno == EINTR)
		return 1;
	if (n <= 0) {
		conn_fail(c);
		return -1;
	}
	c->rx_budget = (size_t)n < c->rx_budget ? c->rx_budget - (size_t)n : 0;
	m = (size_t)n < direct ? (size_t)n : direct;
	dst_advance(c, NULL, m);
	c->rx_end += (size_t)n - m;
	return (size_t)n == want;
}

static void progress(struct tcp_conn *c)
{
	if (c->base.state != XRC_UP)
		return;
	tx_flush(c);
	rx_parse(c);	/* what waited for a receive or a control slot */
	c->rx_budget = c->burst;
	for (int r = 0; r < RX_ROUNDS && c->base.state == XRC_UP && !c->rx_blocked &&
	     c->rx_budget && (c->rx_maybe || !c->rx_hints); r++) {
		int more = rx_read(c);

		if (more < 0)
			return;
		rx_parse(c);
		if (!more) {
			c->rx_maybe = false;
			break;
		}
	}
	tx_flush(c);
	if (c->rx_blocked && c->ctl_n < c->ctl_cap)
		rx_parse(c);
}

/* --- data path ops ------------------------------------------------------------ */

/* rkey: WRITE/READ the target's key, SEND with has_inv the key to invalidate. */
static int post(struct tcp_conn *c, uint8_t op, const struct xrc_sge *sg, int nsg, bool has_imm,
		uint32_t imm, bool has_inv, uint64_t raddr, uint32_t rkey, uint64_t wr_id,
		unsigned flags)
{
	uint32_t sd = c->base.sq_depth, slot = c->sq_tail % sd, len = 0;
	struct sq_ent *e = &c->sq[slot];
	bool idle = c->tx_head == c->tx_tail;

	if (c->sq_tail - c->sq_head >= sd)
		return -ENOBUFS;
	*e = (struct sq_ent){ .wr_id = wr_id, .op = op, .flags = (uint8_t)flags,
			      .has_imm = has_imm, .has_inv = has_inv, .imm = imm, .rkey = rkey,
			      .raddr = raddr, .nsg = nsg };
	if (flags & XRC_INLINE) {
		uint8_t *d = c->inl + (size_t)slot * c->base.max_inline;

		for (int i = 0; i < nsg; i++) {
			memcpy(d + len, sg[i].addr, sg[i].len);
			len += sg[i].len;
		}
		e->nsg = 0;
	} else {
		for (int i = 0; i < nsg; i++) {
			e->sg[i] = sg[i];
			len += sg[i].len;
		}
	}
	e->len = len;
	if (op != XRC_OP_SEND) {
		e->seq = c->seq_next++;
		if (op == XRC_OP_WRITE)
			c->wq[c->wq_tail++ % sd] = slot;
		else
			c->rdq[c->rd_tail++ % sd] = slot;
	}
	c->sq_tail++;
	if (op == XRC_OP_SEND)
		c->base.stats.sends++;
	else if (op == XRC_OP_WRITE)
		c->base.stats.writes++;
	else
		c->base.stats.reads++;
	if (op != XRC_OP_READ)
		c->base.stats.tx_bytes += len;
	sq_kick(c);
	if (idle && !(flags & XRC_MORE))
		tx_flush(c);	/* the doorbell */
	return 0;
}

static int tcp_post_send(struct xrc *xc, const struct xrc_sge *sg, int nsg, int kind,
			 uint32_t arg, uint64_t wr_id, unsigned flags)
{
	return post(TC(xc), XRC_OP_SEND, sg, nsg, kind == SEND_IMM, kind == SEND_IMM ? arg : 0,
		    kind == SEND_INV, 0, kind == SEND_INV ? arg : 0, wr_id, flags);
}

static int tcp_post_write(struct xrc *xc, const struct xrc_sge *sg, int nsg, uint64_t raddr,
			  uint32_t rkey, bool with_imm, uint32_t imm, uint64_t wr_id,
			  unsigned flags)
{
	return post(TC(xc), XRC_OP_WRITE, sg, nsg, with_imm, imm, false, raddr, rkey, wr_id,
		    flags);
}

static int tcp_post_read(struct xrc *xc, const struct xrc_sge *sg, int nsg, uint64_t raddr,
			 uint32_t rkey, uint64_t wr_id, unsigned flags)
{
	return post(TC(xc), XRC_OP_READ, sg, nsg, false, 0, false, raddr, rkey, wr_id, flags);
}

/* A bind or invalidate takes a send-queue slot and completes in order with
 * the rest, but executes at once (win_apply) and sends nothing. */
static int tcp_win_bind(struct xrc *xc, struct xrc_win *w, struct xrc_mr *mr, void *addr,
			size_t len, unsigned access, uint64_t wr_id, unsigned flags)
{
	struct tcp_conn *c = TC(xc);

	if (c->sq_tail - c->sq_head >= c->base.sq_depth)
		return -ENOBUFS;
	c->sq[c->sq_tail++ % c->base.sq_depth] = (struct sq_ent){
		.wr_id = wr_id, .op = XRC_OP_BIND, .flags = (uint8_t)flags,
		.written = true, .answered = true, .done = true };
	win_apply(xc, &c->t2wins, w, mr, addr, len, access);
	/* The framing cursor must pass the bind now: polled, its slot is
	 * free, and a cursor left behind sq_head would frame whatever the
	 * slots hold later -- the same WRITE again on every lap. */
	sq_kick(c);
	return 0;
}

static int tcp_post_recv(struct xrc *xc, const struct xrc_sge *sg, uint64_t wr_id)
{
	struct tcp_conn *c = TC(xc);

	if (c->rq_tail - c->rq_head >= c->base.rq_depth)
		return -ENOBUFS;
	c->rq[c->rq_tail++ % c->base.rq_depth] = (struct rq_ent){ .wr_id = wr_id,
		.addr = sg->addr, .cap = sg->len };
	return 0;
}

static bool have_wc(const struct tcp_conn *c)
{
	return (c->sq_head != c->sq_tail && c->sq[c->sq_head % c->base.sq_depth].done) ||
	       (c->rq_head != c->rq_tail && c->rq[c->rq_head % c->base.rq_depth].done);
}

static int tcp_poll(struct xrc *xc, struct xrc_wc *wc, int n)
{
	struct tcp_conn *c = TC(xc);
	int k = 0;

	progress(c);
	while (k < n && c->sq_head != c->sq_tail) {
		struct sq_ent *e = &c->sq[c->sq_head % c->base.sq_depth];

		if (!e->done)
			break;
		c->sq_head++;
		if (!(e->flags & XRC_SIGNALED) && !e->status)
			continue;
		wc[k++] = (struct xrc_wc){ .wr_id = e->wr_id, .status = e->status,
					   .op = (enum xrc_op)e->op, .len = e->len };
	}
	while (k < n && c->rq_head != c->rq_tail) {
		struct rq_ent *r = &c->rq[c->rq_head % c->base.rq_depth];

		if (!r->done)
			break;
		c->rq_head++;
		wc[k++] = (struct xrc_wc){ .wr_id = r->wr_id, .status = r->status,
					   .op = (enum xrc_op)r->op, .len = r->status ? 0 : r->len,
					   .imm = r->imm, .has_imm = r->has_imm,
					   .has_inv = r->has_inv, .inv_rkey = r->inv_rkey };
	}
	return k;
}

static int tcp_fd(const struct xrc *xc) { return ((const struct tcp_conn *)xc)->fd; }

static uint64_t tcp_next_timer(const struct xrc *xc)
{
	const struct tcp_conn *c = (const struct tcp_conn *)xc;

	/* with the control ring full, the ACK waits for room, not a time */
	return c->ack_due && c->ack_delay && c->ctl_n < c->ctl_cap ? c->ack_by : UINT64_MAX;
}

static int tcp_wait(struct xrc *xc, uint64_t timeout_ns)
{
	struct tcp_conn *c = TC(xc);
	struct pollfd p = { c->fd, 0, 0 };
	struct timespec ts = { (time_t)(timeout_ns / XTIME_NS_PER_S),
			       (long)(timeout_ns % XTIME_NS_PER_S) };
	int rc;

	c->rx_maybe = true;	/* a blocking wait looks for itself */
	progress(c);
	if (c->ack_due && c->base.state == XRC_UP)
		tx_flush_ack(c, false);	/* a waiter has nothing to carry it */
	if (have_wc(c))
		return 1;
	if (c->base.state == XRC_DOWN)
		return -ENOTCONN;
	/* A parser waiting for a receive would only spin on POLLIN. */
	if (!c->rx_blocked)
		p.events |= POLLIN;
	if (c->tx_head != c->tx_tail || c->ack_due)
		p.events |= POLLOUT;
	rc = ppoll(&p, 1, &ts, NULL);
	if (rc < 0)
		return errno == EINTR ? 0 : -errno;
	if (rc > 0)
		c->rx_maybe = true;	/* the caller polls next: read then */
	return rc > 0;
}

static struct xrc_dom *tcp_domain(struct xrc *xc) { return &tdom.dom; }

static void tcp_close(struct xrc *xc)
{
	struct tcp_conn *c = TC(xc);

	key_conn_gone(&c->t2wins);
	close(c->fd);
	free(c->sq);
	free(c->inl);
	free(c->wq);
	free(c->rdq);
	free(c->tx);
	free(c->rq);
	free(c->rxbuf);
	free(c);
}

static void tcp_abort(struct xrc *xc)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(TC(xc)->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	tcp_close(xc);
}

static int tcp_flush(struct xrc *xc)
{
	bool more = tx_flush(TC(xc));

	return TC(xc)->base.state != XRC_UP ? -ENOTCONN : more;
}

static bool tcp_tx_pending(const struct xrc *xc)
{
	const struct tcp_conn *c = (const struct tcp_conn *)xc;

	return c->tx_head != c->tx_tail;
}

/* The peer's FIN (or RST) shows in poll() before the bytes ahead of it
 * are read. */
static bool tcp_peer_gone(const struct xrc *xc)
{
	struct pollfd p = { .fd = ((const struct tcp_conn *)xc)->fd, .events = POLLRDHUP };

	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* The socket needs no arming; completions parsed but not returned yet
 * would not make it readable, though. */
static int tcp_arm(struct xrc *xc)
{
	return have_wc(TC(xc)) ? 1 : 0;
}

static void tcp_ready(struct xrc *xc, int how)
{
	struct tcp_conn *c = TC(xc);

	if (how == XRC_READY)
		c->rx_maybe = true;
	else
		c->rx_hints = how == XRC_HINTS_ON;
	if (!c->rx_hints)
		c->rx_maybe = true;
}

static const struct xrc_conn_ops tcp_conn_ops = {
	.close = tcp_close,
	.abort = tcp_abort,
	.post_send = tcp_post_send,
	.post_write = tcp_post_write,
	.post_read = tcp_post_read,
	.post_recv = tcp_post_recv,
	.poll = tcp_poll,
	.fd = tcp_fd,
	.wait = tcp_wait,
	.domain = tcp_domain,
	.flush = tcp_flush,
	.tx_pending = tcp_tx_pending,
	.peer_gone = tcp_peer_gone,
	.next_timer = tcp_next_timer,
	.arm = tcp_arm,
	.ready = tcp_ready,
	.win_bind = tcp_win_bind,
};

/* --- connections ----------------------------------------------------------------
 * Setup (connect, listen, accept) is in xrc_tcp_cm.c; it hands the connected
 * socket over here. */

struct xrc *xtcp_conn_new(int fd, const struct xrc_opts *o, uint32_t peer_max_send,
			  uint32_t peer_sq_depth, const char *peer, char *err, size_t errlen)
{
	struct tcp_conn *c = calloc(1, sizeof(*c));
	uint32_t sd = o->sq_depth, rd = o->rq_depth;

	if (!c)
		goto out_close_fd;
	c->fd = fd;
	c->base = (struct xrc){ &tcp_conn_ops, XURI_TCP, XRC_UP, "", o->max_send, sd, rd,
				o->max_inline, XRC_MAX_SGE, { 0 } };
	if (peer_max_send < c->base.max_send)
		c->base.max_send = peer_max_send;
	snprintf(c->base.peer, sizeof(c->base.peer), "%s", peer);
	c->seq_next = 1;
	c->ctl_cap = peer_sq_depth + 2;
	/* Rings are indexed by free-running u32 counters modulo their size:
	 * only a power of two keeps that consistent when the counters wrap. */
	c->tx_cap = pow2_up(sd + c->ctl_cap);
	c->sq = calloc(sd, sizeof(*c->sq));
	c->burst = o->burst ? o->burst : 4u << 20;
	c->ack_delay = o->ack_delay_ns;
	c->ack_max = peer_sq_depth / 4 ? peer_sq_depth / 4 : 1;
	c->rx_maybe = true;
	c->inl = malloc((size_t)sd * o->max_inline);
	c->wq = calloc(sd, sizeof(*c->wq));
	c->rdq = calloc(sd, sizeof(*c->rdq));
	c->tx = calloc(c->tx_cap, sizeof(*c->tx));
	c->rq = calloc(rd, sizeof(*c->rq));
	c->rxbuf = malloc(RXBUF_SIZE);
	if (!c->sq || !c->inl || !c->wq || !c->rdq || !c->tx || !c->rq || !c->rxbuf ||
	    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
		goto out_free_conn;
	return &c->base;

out_free_conn:
	c->fd = -1;
	tcp_close(&c->base);
out_close_fd:
	close(fd);
	xerr(err, errlen, "%s: out of memory", peer);
	errno = ENOMEM;
	return NULL;
}
