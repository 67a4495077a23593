/* GM port protocol engine (port_eng.h): no I/O, no clock, no malloc per
 * message -- send descriptors, receive-buffer records and event slots are
 * allocated per port when it opens; stream state once per stream. */
#include "port/port_eng.h"
#include "core/bytes.h"
#include "core/cc.h"
#include "core/ring.h"
#include "core/xtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- lists */

struct link {
	struct link *prev, *next;
};

static void list_init(struct link *l) { l->prev = l->next = l; }
static bool list_empty(const struct link *l) { return l->next == l; }
static bool linked(const struct link *n) { return n->next != NULL; }

static void list_add_tail(struct link *head, struct link *n)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}

static void list_del(struct link *n)
{
	if (!n->next)
		return;
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = NULL;
}

#define container_of(p, type, m) ((type *)((char *)(p) - offsetof(type, m)))

/* Serial-number order for u32 seqs (RFC 1982 style). */
static bool seq_le(uint32_t a, uint32_t b) { return (int32_t)(a - b) <= 0; }

/* ------------------------------------------------------------- state */

struct pe_txs;

struct pe_send {
	struct pe_send *next;
	struct pe_txs *s;
	const uint8_t *buf;
	uint32_t len, seq;
	uint32_t refs;			/* frames the transport still holds */
	bool sync;			/* its FIRST carries PW_SYNC */
	uint8_t status;			/* enum xp_status once done */
	uint16_t port;
	bool nobuf;			/* refused for want of a buffer before */
	uint64_t first_nobuf, backoff;
	xp_send_cb cb;
	void *ctx;
};

struct sq {				/* FIFO of send descriptors */
	struct pe_send *head, *tail;
};

/* Singly linked FIFOs with a tail pointer; "empty" is head == NULL. */
static void sq_push(struct sq *q, struct pe_send *d)
{
	d->next = NULL;
	*(q->tail ? &q->tail->next : &q->head) = d;
	q->tail = d;
}

static struct pe_send *sq_pop(struct sq *q)
{
	struct pe_send *d = q->head;

	if (d) {
		q->head = d->next;
		q->tail = q->head ? q->tail : NULL;
		d->next = NULL;
	}
	return d;
}

/* Sender side of a stream. */
struct pe_txs {
	struct pe_node *node;
	uint8_t src, dst, prio;
	struct sq q;			/* not yet acknowledged, in seq order */
	struct sq done;			/* finished, waiting for refs == 0 */
	struct pe_send *cur;		/* next to transmit (in q), or NULL */
	uint32_t cur_off;
	uint32_t next_seq;
	bool need_sync, stopped;
	uint64_t retry_at;
	struct link active;		/* on its lane's list: has frames to send */
	struct link backoff;		/* on the engine's retry list */
	struct link abort;		/* on its lane's aborts list */
	uint32_t abort_seq;		/* the message given up half sent */
	struct pe_rxs *rev;		/* the reverse stream's receiver: its ACKs
					 * ride on our DATA (NULL until it exists) */
};

enum rx_state { RX_UNSYNC, RX_IDLE, RX_ASM, RX_DISCARD };

/* Receiver side of a stream. */
struct pe_rxs {
	struct pe_node *node;
	uint8_t src, dst, prio;
	uint8_t st;
	uint32_t expect;		/* seq of the next message taken */
	struct pe_rbuf *rb;		/* RX_ASM: the matched buffer */
	uint32_t len, got;
	bool ack_pending, nack_pending;
	uint8_t nack_reason;
	uint32_t ack_seq, nack_seq;
	struct link ctl;		/* on its lane's control list */
	struct pe_txs *rev;		/* the reverse stream's sender (NULL until
					 * it exists) */
};

struct pe_rbuf {
	struct pe_rbuf *next;
	uint8_t *buf;
	uint8_t size, prio;
};

/* A size and priority's provided buffers: a stack, the one provided (or
 * given back unfilled) last on top -- the likeliest to be in the cache. */
struct rq {
	struct pe_rbuf *head;
};

struct pe_lane {
	struct link active[2];		/* per priority */
	struct link ctl;
	struct link aborts;		/* senders owing a PW_ABORT */
};

struct pe_node {
	uint32_t id;
	bool up;
	unsigned nlanes;
	uint32_t frag;
	uint32_t low_frag;		/* fragment size of low priority */
	uint64_t refs;
	uint8_t tx_maybe;		/* bit per lane: its lists gained an entry
					 * since the I/O layer last found them all
					 * empty (or a send-now emptied it) */
	struct pe_lane lane[2];
	/* [src port] -> [dst port * 2 + prio], allocated on first use */
	struct pe_txs **tx[PW_MAX_PORTS];
	struct pe_rxs **rx[PW_MAX_PORTS];
};

struct pe_port {
	bool open;
	unsigned stok, rtok;
	uint64_t refs;
	struct pe_send *descs;
	struct pe_send *dfree;
	struct sq comp;			/* due callbacks */
	struct pe_rbuf *rbufs, *rfree;
	struct rq avail[2][PW_MAX_SIZE + 1];
	uint64_t accept[2];
	struct xp_event *ev;		/* ring of ev_mask + 1 >= recv_tokens */
	unsigned ev_head, ev_n;
	struct xp_port_stats st;
};

struct pe_eng {
	struct pe_opts o;
	uint32_t ev_mask;		/* event rings: xring_cap(recv_tokens) - 1 */
	struct pe_node **nodes;		/* [id - 1] */
	uint32_t nnodes, cap;
	struct link backoff;
	uint32_t unacked;		/* messages taken since an ACK last went out */
	struct pe_port ports[PW_MAX_PORTS];
};

static unsigned lane_of(const struct pe_node *n, unsigned prio)
{
	return n->nlanes == 2 ? prio : 0;
}

static struct pe_node *node_get(const struct pe_eng *e, uint32_t id)
{
	return id >= 1 && id <= e->nnodes ? e->nodes[id - 1] : NULL;
}

/* ------------------------------------------------------------ engine */

struct pe_eng *pe_new(const struct pe_opts *o)
{
	struct pe_eng *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	if (o)
		e->o = *o;
	if (!e->o.send_tokens)
		e->o.send_tokens = 64;
	if (!e->o.recv_tokens)
		e->o.recv_tokens = 256;
	e->ev_mask = xring_cap(e->o.recv_tokens) - 1;
	if (!e->o.send_timeout_ns)
		e->o.send_timeout_ns = 10000000000ull;
	if (!e->o.max_msg)
		e->o.max_msg = 64u << 20;
	if (!e->o.backoff_min_ns)
		e->o.backoff_min_ns = 100000;
	if (!e->o.backoff_max_ns)
		e->o.backoff_max_ns = 20000000;
	list_init(&e->backoff);
	return e;
}

static void port_free_mem(struct pe_port *p)
{
	free(p->descs);
	free(p->rbufs);
	free(p->ev);
	p->descs = NULL;
	p->rbufs = NULL;
	p->ev = NULL;
}

void pe_free(struct pe_eng *e)
{
	if (!e)
		return;
	for (uint32_t i = 0; i < e->nnodes; i++) {
		struct pe_node *n = e->nodes[i];

		for (unsigned p = 0; p < PW_MAX_PORTS; p++) {
			if (n->tx[p])
				for (unsigned k = 0; k < 2 * PW_MAX_PORTS; k++)
					free(n->tx[p][k]);
			if (n->rx[p])
				for (unsigned k = 0; k < 2 * PW_MAX_PORTS; k++)
					free(n->rx[p][k]);
			free(n->tx[p]);
			free(n->rx[p]);
		}
		free(n);
	}
	free(e->nodes);
	for (unsigned p = 0; p < PW_MAX_PORTS; p++)
		port_free_mem(&e->ports[p]);
	free(e);
}

/* ------------------------------------------------------------- nodes */

int pe_node_add(struct pe_eng *e, unsigned nlanes, uint32_t frag)
{
	struct pe_node *n;

	if (nlanes < 1 || nlanes > 2 || frag == 0)
		return -EINVAL;
	if (e->nnodes >= INT32_MAX - 1)
		return -ENOSPC;
	if (e->nnodes == e->cap) {
		uint32_t cap = e->cap ? 2 * e->cap : 8;
		struct pe_node **nn = realloc(e->nodes, cap * sizeof(*nn));

		if (!nn)
			return -ENOMEM;
		e->nodes = nn;
		e->cap = cap;
	}
	if (!(n = calloc(1, sizeof(*n))))
		return -ENOMEM;
	n->id = e->nnodes + 1;
	n->up = true;
	n->nlanes = nlanes;
	n->frag = frag;
	n->low_frag = frag;
	for (unsigned l = 0; l < 2; l++) {
		list_init(&n->lane[l].active[0]);
		list_init(&n->lane[l].active[1]);
		list_init(&n->lane[l].ctl);
		list_init(&n->lane[l].aborts);
	}
	e->nodes[e->nnodes++] = n;
	return (int)n->id;
}

bool pe_node_up(const struct pe_eng *e, uint32_t node)
{
	const struct pe_node *n = node_get(e, node);

	return n && n->up;
}

uint32_t pe_node_count(const struct pe_eng *e) { return e->nnodes; }

uint64_t pe_node_refs(const struct pe_eng *e, uint32_t node)
{
	const struct pe_node *n = node_get(e, node);

	return n ? n->refs : 0;
}

/* A new stream's state (once per stream, not per message). */
static XCOLD struct pe_txs *txs_make(struct pe_node *n, unsigned src, unsigned dst, unsigned prio)
{
	struct pe_txs **row = n->tx[src], *s;

	if (!row && !(row = n->tx[src] = calloc(2 * PW_MAX_PORTS, sizeof(*row))))
		return NULL;
	if (!(s = calloc(1, sizeof(*s))))
		return NULL;
	s->node = n;
	s->src = (uint8_t)src;
	s->dst = (uint8_t)dst;
	s->prio = (uint8_t)prio;
	s->need_sync = true;	/* a new stream: the receiver knows no seq yet */
	/* streams live as long as the engine: the pair points at each other */
	if (n->rx[dst] && (s->rev = n->rx[dst][src * 2 + prio]))
		s->rev->rev = s;
	row[dst * 2 + prio] = s;
	return s;
}

static XCOLD struct pe_rxs *rxs_make(struct pe_node *n, unsigned src, unsigned dst, unsigned prio)
{
	struct pe_rxs **row = n->rx[src], *r;

	if (!row && !(row = n->rx[src] = calloc(2 * PW_MAX_PORTS, sizeof(*row))))
		return NULL;
	if (!(r = calloc(1, sizeof(*r))))
		return NULL;
	r->node = n;
	r->src = (uint8_t)src;
	r->dst = (uint8_t)dst;
	r->prio = (uint8_t)prio;
	r->st = RX_UNSYNC;
	if (n->tx[dst] && (r->rev = n->tx[dst][src * 2 + prio]))
		r->rev->rev = r;
	row[dst * 2 + prio] = r;
	return r;
}

/* Stream lookups; `make` allocates a stream met for the first time. */
XINLINE struct pe_txs *txs_get(struct pe_node *n, unsigned src, unsigned dst, unsigned prio,
			       bool make)
{
	struct pe_txs *s = n->tx[src] ? n->tx[src][dst * 2 + prio] : NULL;

	return s || !make ? s : txs_make(n, src, dst, prio);
}

XINLINE struct pe_rxs *rxs_get(struct pe_node *n, unsigned src, unsigned dst, unsigned prio,
			       bool make)
{
	struct pe_rxs *r = n->rx[src] ? n->rx[src][dst * 2 + prio] : NULL;

	return r || !make ? r : rxs_make(n, src, dst, prio);
}

/* -------------------------------------------------- send completions */

/* Completions leave a stream in order: a finished message whose frames the
 * transport still holds keeps the ones behind it waiting too. */
XINLINE void done_flush(struct pe_eng *e, struct pe_txs *s)
{
	struct pe_send *d;

	while ((d = s->done.head) && d->refs == 0) {
		sq_pop(&s->done);
		sq_push(&e->ports[d->port].comp, d);
	}
}

XINLINE void finish(struct pe_eng *e, struct pe_txs *s, struct pe_send *d, enum xp_status st)
{
	struct pe_port *p = &e->ports[d->port];

	d->status = (uint8_t)st;
	if (st == XP_SUCCESS) {
		p->st.sent_msgs++;
		p->st.sent_bytes += d->len;
	} else if (st != XP_SEND_DROPPED) {
		p->st.send_failures++;
	}
	/* done_flush() would move it on at once: it goes there directly */
	if (!d->refs && !s->done.head)
		sq_push(&p->comp, d);
	else
		sq_push(&s->done, d);
}

static void activate(struct pe_txs *s)
{
	struct pe_node *n = s->node;

	if (s->cur && !s->stopped && !linked(&s->backoff) && !linked(&s->active) && n->up) {
		list_add_tail(&n->lane[lane_of(n, s->prio)].active[s->prio], &s->active);
		n->tx_maybe |= (uint8_t)(1u << lane_of(n, s->prio));
	}
}

/* The head message failed: it completes with `st`, the stream stops, and
 * the rest goes again from the next message's FIRST, flagged SYNC. */
static void fail_head(struct pe_eng *e, struct pe_txs *s, enum xp_status st)
{
	struct pe_send *d = sq_pop(&s->q);

	finish(e, s, d, st);
	s->cur = s->q.head;
	s->cur_off = 0;
	s->need_sync = true;
	s->stopped = true;
	list_del(&s->active);
	list_del(&s->backoff);
	done_flush(e, s);
}

/* Every message of the stream completes with `st`. */
static void fail_all(struct pe_eng *e, struct pe_txs *s, enum xp_status st, bool forget_refs)
{
	struct pe_send *d;

	/* A message cut off after some of its fragments went out: tell the
	 * receiver, or it keeps the buffer it was filling (a dead node takes
	 * care of itself). */
	if (s->cur && s->cur_off && s->node->up && !linked(&s->abort)) {
		s->abort_seq = s->cur->seq;
		list_add_tail(&s->node->lane[lane_of(s->node, s->prio)].aborts, &s->abort);
		s->node->tx_maybe |= (uint8_t)(1u << lane_of(s->node, s->prio));
	}
	while ((d = sq_pop(&s->q)))
		finish(e, s, d, st);
	s->cur = NULL;
	s->cur_off = 0;
	s->need_sync = true;
	list_del(&s->active);
	list_del(&s->backoff);
	if (forget_refs) {
		for (d = s->done.head; d; d = d->next) {
			s->node->refs -= d->refs;
			e->ports[d->port].refs -= d->refs;
			d->refs = 0;
		}
	}
	done_flush(e, s);
}

static void rbuf_push(struct pe_port *p, struct pe_rbuf *b)
{
	struct rq *q = &p->avail[b->prio][b->size];

	b->next = q->head;
	q->head = b;
}

void pe_node_down(struct pe_eng *e, uint32_t node)
{
	struct pe_node *n = node_get(e, node);

	if (!n || !n->up)
		return;
	n->up = false;
	for (unsigned src = 0; src < PW_MAX_PORTS; src++) {
		for (unsigned k = 0; n->tx[src] && k < 2 * PW_MAX_PORTS; k++)
			if (n->tx[src][k])
				fail_all(e, n->tx[src][k], XP_SEND_TARGET_NODE_UNREACHABLE, true);
		for (unsigned k = 0; n->rx[src] && k < 2 * PW_MAX_PORTS; k++) {
			struct pe_rxs *r = n->rx[src][k];

			if (!r)
				continue;
			/* a half-filled buffer is still the port's, unreported */
			if (r->st == RX_ASM && e->ports[r->dst].open)
				rbuf_push(&e->ports[r->dst], r->rb);
			r->st = RX_UNSYNC;
			r->rb = NULL;
			list_del(&r->ctl);
			r->ack_pending = r->nack_pending = false;
		}
	}
	e->unacked = 0;		/* a hint: the other nodes' ACKs go with the next round */
	n->refs = 0;
}

/* ------------------------------------------------------------- ports */

int pe_port_open(struct pe_eng *e, unsigned port)
{
	struct pe_port *p;
	unsigned ns = e->o.send_tokens, nr = e->o.recv_tokens;

	if (port >= PW_MAX_PORTS)
		return -EINVAL;
	p = &e->ports[port];
	if (p->open)
		return -EBUSY;
	/* Frames of an earlier life of this port may still be out. */
	if (p->refs)
		return -EBUSY;
	port_free_mem(p);
	memset(p, 0, sizeof(*p));
	p->descs = calloc(ns, sizeof(*p->descs));
	p->rbufs = calloc(nr, sizeof(*p->rbufs));
	p->ev = calloc((size_t)e->ev_mask + 1, sizeof(*p->ev));
	if (!p->descs || !p->rbufs || !p->ev) {
		port_free_mem(p);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < ns; i++) {
		p->descs[i].next = p->dfree;
		p->dfree = &p->descs[i];
	}
	for (unsigned i = 0; i < nr; i++) {
		p->rbufs[i].next = p->rfree;
		p->rfree = &p->rbufs[i];
	}
	p->stok = ns;
	p->rtok = nr;
	p->accept[0] = p->accept[1] = ~0ull;
	p->open = true;
	return 0;
}

bool pe_port_is_open(const struct pe_eng *e, unsigned port)
{
	return port < PW_MAX_PORTS && e->ports[port].open;
}

uint64_t pe_node_port_refs(const struct pe_eng *e, uint32_t node, unsigned port)
{
	const struct pe_node *n = node_get(e, node);
	uint64_t refs = 0;

	for (unsigned k = 0; n && port < PW_MAX_PORTS && n->tx[port] && k < 2 * PW_MAX_PORTS; k++) {
		const struct pe_txs *s = n->tx[port][k];

		for (const struct pe_send *d = s ? s->done.head : NULL; d; d = d->next)
			refs += d->refs;
		for (const struct pe_send *d = s ? s->q.head : NULL; d; d = d->next)
			refs += d->refs;
	}
	return refs;
}

uint64_t pe_port_refs(const struct pe_eng *e, unsigned port)
{
	return port < PW_MAX_PORTS ? e->ports[port].refs : 0;
}

XINLINE void queue_ctl(struct pe_rxs *r)
{
	struct pe_node *n = r->node;

	if (!linked(&r->ctl)) {
		list_add_tail(&n->lane[lane_of(n, r->prio)].ctl, &r->ctl);
		n->tx_maybe |= (uint8_t)(1u << lane_of(n, r->prio));
	}
}

/* Out of line but not cold: a sender outrunning the receiver's buffers
 * (bandwidth runs) meets it often. */
static void nack(struct pe_rxs *r, uint32_t seq, uint8_t reason)
{
	r->st = RX_DISCARD;
	r->expect = seq;
	r->nack_pending = true;
	r->nack_seq = seq;
	r->nack_reason = reason;
	queue_ctl(r);
}

void pe_port_close(struct pe_eng *e, unsigned port)
{
	struct pe_port *p;

	if (port >= PW_MAX_PORTS || !e->ports[port].open)
		return;
	p = &e->ports[port];
	for (uint32_t i = 0; i < e->nnodes; i++) {
		struct pe_node *n = e->nodes[i];

		/* our sends: GM drops them with the port */
		for (unsigned k = 0; n->tx[port] && k < 2 * PW_MAX_PORTS; k++)
			if (n->tx[port][k]) {
				fail_all(e, n->tx[port][k], XP_SEND_DROPPED, false);
				n->tx[port][k]->stopped = false;
			}
		/* messages coming in: refused, so their senders learn */
		for (unsigned src = 0; src < PW_MAX_PORTS; src++)
			for (unsigned pr = 0; pr < 2 && n->rx[src]; pr++) {
				struct pe_rxs *r = n->rx[src][port * 2 + pr];

				if (r && r->st == RX_ASM) {
					r->rb = NULL;
					if (n->up)
						nack(r, r->expect, PW_NACK_CLOSED);
					else
						r->st = RX_UNSYNC;
				}
			}
	}
	p->open = false;
	/* Buffers and events are forgotten; the completion queue stays, so
	 * the host can still run the DROPPED callbacks. */
	memset(p->avail, 0, sizeof(p->avail));
	p->ev_n = 0;
}

unsigned pe_send_tokens(const struct pe_eng *e, unsigned port)
{
	return port < PW_MAX_PORTS && e->ports[port].open ? e->ports[port].stok : 0;
}

unsigned pe_recv_tokens(const struct pe_eng *e, unsigned port)
{
	return port < PW_MAX_PORTS && e->ports[port].open ? e->ports[port].rtok : 0;
}

/* The header of fragment [off, off + chunk) of message d of stream s into
 * hdr, with the reverse stream's ACK riding along when one is owed (and
 * no NACK, which never waits).  Whether it is the message's last
 * fragment. */
XINLINE bool frame_hdr(struct pe_eng *e, struct pe_txs *s, struct pe_send *d, uint32_t off,
		       uint32_t chunk, uint8_t *hdr)
{
	struct pe_rxs *r = s->rev;
	struct pw_hdr h = { .type = PW_DATA, .prio = s->prio, .arg = (uint8_t)pw_size_for_len(d->len),
			    .src_port = s->src, .dst_port = s->dst, .seq = d->seq, .len = d->len,
			    .off = off };

	if (r && r->ack_pending && !r->nack_pending) {
		h.flags |= PW_ACKS;
		h.aux = r->ack_seq;
		r->ack_pending = false;
		e->unacked = 0;
		list_del(&r->ctl);
	}
	if (off == 0) {
		h.flags |= PW_FIRST;
		if (s->need_sync) {
			d->sync = true;
			s->need_sync = false;
		}
		if (d->sync)
			h.flags |= PW_SYNC;
	}
	if (off + chunk == d->len)
		h.flags |= PW_LAST;
	pw_encode(hdr, &h);
	return h.flags & PW_LAST;
}

/* ...as a DATA frame in *f: the transport holds d until pe_frame_done(). */
XINLINE bool frame_data(struct pe_eng *e, struct pe_txs *s, struct pe_send *d, uint32_t off,
			uint32_t chunk, struct pe_frame *f)
{
	bool last = frame_hdr(e, s, d, off, chunk, f->hdr);

	f->data = d->buf + off;
	f->dlen = chunk;
	f->ref = d;
	d->refs++;
	s->node->refs++;
	e->ports[d->port].refs++;
	return last;
}

/* pe_send up to the point where the message has its seq: *dp, or a
 * return for the caller (0 for a node that is down: already completed). */
XINLINE int send_take(struct pe_eng *e, unsigned port, uint32_t node, unsigned dst_port,
		      unsigned prio, const void *buf, size_t len, xp_send_cb cb, void *ctx,
		      struct pe_send **dp)
{
	struct pe_port *p;
	struct pe_node *n;
	struct pe_txs *s;
	struct pe_send *d;

	*dp = NULL;
	if (port >= PW_MAX_PORTS || !e->ports[port].open || dst_port >= PW_MAX_PORTS ||
	    prio > 1 || (len && !buf))
		return -EINVAL;
	p = &e->ports[port];
	if (len > e->o.max_msg)
		return -EMSGSIZE;
	if (!(n = node_get(e, node)))
		return -ENOENT;
	/* seed 001 section 2: a send needs a send token */
	if (!p->stok || !p->dfree)
		return -EAGAIN;
	if (!(s = txs_get(n, port, dst_port, prio, true)))
		return -ENOMEM;
	d = p->dfree;
	p->dfree = d->next;
	p->stok--;
	*d = (struct pe_send){ .s = s, .buf = buf, .len = (uint32_t)len, .port = (uint16_t)port,
			       .cb = cb, .ctx = ctx };
	if (!n->up) {
		/* Not an error at the call (port.h): the callback says it. */
		finish(e, s, d, XP_SEND_TARGET_NODE_UNREACHABLE);
		done_flush(e, s);
		return 0;
	}
	d->seq = s->next_seq++;
	sq_push(&s->q, d);
	*dp = d;
	return 0;
}

/* The ordinary way: the stream's next to transmit, on its lane's list. */
static void send_queue(struct pe_txs *s, struct pe_send *d)
{
	if (!s->cur) {
		s->cur = d;
		s->cur_off = 0;
	}
	activate(s);
}

int pe_send(struct pe_eng *e, unsigned port, uint32_t node, unsigned dst_port,
	    unsigned prio, const void *buf, size_t len, xp_send_cb cb, void *ctx)
{
	struct pe_send *d;
	int rc = send_take(e, port, node, dst_port, prio, buf, len, cb, ctx, &d);

	if (d)
		send_queue(d->s, d);
	return rc;
}

XHOT_INLINE int pe_send_now(struct pe_eng *e, unsigned port, uint32_t node, unsigned dst_port,
			    unsigned prio, const void *buf, size_t len, xp_send_cb cb, void *ctx,
			    struct pe_frame *f)
{
	struct pe_send *d;
	struct pe_txs *s;
	struct pe_node *n;
	struct pe_lane *l;
	struct pe_rxs *r;
	int rc = send_take(e, port, node, dst_port, prio, buf, len, cb, ctx, &d);

	if (!d)
		return rc;
	s = d->s;
	n = s->node;
	l = &n->lane[lane_of(n, prio)];
	r = s->rev;
	/* What pe_pull would hand out next anyway: one frame, nothing of the
	 * stream before it, no abort owed on the lane, no stream of this
	 * priority (or, on a shared lane, of the high one) waiting for its
	 * turn, and no control frame but the ACK this frame carries. */
	if (s->cur || s->stopped || linked(&s->backoff) ||
	    len > (prio ? n->frag : n->low_frag) || !list_empty(&l->aborts) ||
	    !list_empty(&l->active[prio]) || (n->nlanes == 1 && !list_empty(&l->active[1])) ||
	    (!list_empty(&l->ctl) &&
	     (!r || l->ctl.next != &r->ctl || r->ctl.next != &l->ctl || r->nack_pending))) {
		send_queue(s, d);
		return 0;
	}
	frame_data(e, s, d, 0, (uint32_t)len, f);
	/* The lane's lists are empty now when it has one priority to itself
	 * (the checks above and the ACK taken): the next progress round need
	 * not look at them (a round trip's reply would otherwise cost the
	 * round after it a look at every list of both lanes). */
	if (n->nlanes == 2 && list_empty(&l->ctl))
		n->tx_maybe &= (uint8_t)~(1u << prio);
	return 1;
}

XHOT_INLINE int pe_provide(struct pe_eng *e, unsigned port, void *buf, unsigned size, unsigned prio)
{
	struct pe_port *p;
	struct pe_rbuf *b;

	if (port >= PW_MAX_PORTS || !e->ports[port].open || size < PW_MIN_SIZE ||
	    size > PW_MAX_SIZE || prio > 1 || !buf)
		return -EINVAL;
	p = &e->ports[port];
	/* seed 001 section 3: providing a buffer gives up a receive token */
	if (!p->rtok || !p->rfree)
		return -EAGAIN;
	b = p->rfree;
	p->rfree = b->next;
	p->rtok--;
	b->buf = buf;
	b->size = (uint8_t)size;
	b->prio = (uint8_t)prio;
	/* filled first (seed 001 names no order) */
	rbuf_push(p, b);
	return 0;
}

void pe_set_acceptable(struct pe_eng *e, unsigned port, unsigned prio, uint64_t mask)
{
	if (port < PW_MAX_PORTS && prio <= 1)
		e->ports[port].accept[prio] = mask;
}

static struct pe_txs *txs_find(struct pe_eng *e, unsigned port, unsigned prio, uint32_t node,
			       unsigned dst)
{
	struct pe_node *n = node_get(e, node);

	if (!n || port >= PW_MAX_PORTS || dst >= PW_MAX_PORTS || prio > 1)
		return NULL;
	return txs_get(n, port, dst, prio, false);
}

void pe_resume(struct pe_eng *e, unsigned port, unsigned prio, uint32_t node, unsigned dst)
{
	struct pe_txs *s = txs_find(e, port, prio, node, dst);

	if (!s || !s->stopped)
		return;
	s->stopped = false;
	activate(s);
}

void pe_drop(struct pe_eng *e, unsigned port, unsigned prio, uint32_t node, unsigned dst)
{
	struct pe_txs *s = txs_find(e, port, prio, node, dst);

	if (!s)
		return;
	/* GM's gm_drop_sends: what waits completes DROPPED; the stream runs
	 * again for new sends, which start with SYNC. */
	fail_all(e, s, XP_SEND_DROPPED, false);
	s->stopped = false;
}

XHOT_INLINE int pe_next_completion(struct pe_eng *e, unsigned port, struct pe_done *out)
{
	struct pe_port *p;
	struct pe_send *d;

	if (port >= PW_MAX_PORTS)
		return 0;
	p = &e->ports[port];
	if (!(d = sq_pop(&p->comp)))
		return 0;
	*out = (struct pe_done){ .cb = d->cb, .ctx = d->ctx, .status = (enum xp_status)d->status,
				 .buf = d->buf, .len = d->len, .node = d->s->node->id,
				 .dst_port = d->s->dst, .prio = d->s->prio };
	/* seed 001 section 2: the callback hands the send token back */
	d->next = p->dfree;
	p->dfree = d;
	p->stok++;
	return 1;
}

XHOT_INLINE bool pe_peek_completion(const struct pe_eng *e, unsigned port, xp_send_cb *cb)
{
	const struct pe_send *d = port < PW_MAX_PORTS ? e->ports[port].comp.head : NULL;

	if (!d)
		return false;
	*cb = d->cb;
	return true;
}

XHOT_INLINE int pe_next_event(struct pe_eng *e, unsigned port, struct xp_event *ev)
{
	struct pe_port *p;

	if (port >= PW_MAX_PORTS || !e->ports[port].open || !e->ports[port].ev_n) {
		*ev = (struct xp_event){ .type = XP_NO_EVENT };
		return 0;
	}
	p = &e->ports[port];
	*ev = p->ev[p->ev_head];
	p->ev_head = (p->ev_head + 1) & e->ev_mask;
	p->ev_n--;
	p->rtok++;	/* seed 001 section 3: one receive token per RECV event */
	return 1;
}

XHOT_INLINE bool pe_port_pending(const struct pe_eng *e, unsigned port)
{
	return port < PW_MAX_PORTS && (e->ports[port].comp.head || e->ports[port].ev_n);
}

void pe_port_stats(const struct pe_eng *e, unsigned port, struct xp_port_stats *s)
{
	if (port < PW_MAX_PORTS)
		*s = e->ports[port].st;
	else
		memset(s, 0, sizeof(*s));
}

/* ------------------------------------------------------- transmitting */

XHOT_INLINE bool pe_node_tx_maybe(const struct pe_eng *e, uint32_t node)
{
	const struct pe_node *n = node_get(e, node);

	return n && n->tx_maybe != 0;
}

XHOT_INLINE void pe_node_tx_idle(struct pe_eng *e, uint32_t node)
{
	struct pe_node *n = node_get(e, node);

	if (n)
		n->tx_maybe = 0;
}

uint32_t pe_unacked(const struct pe_eng *e) { return e->unacked; }

XHOT_INLINE bool pe_has_tx(const struct pe_eng *e, uint32_t node, unsigned lane)
{
	const struct pe_node *n = node_get(e, node);
	const struct pe_lane *l;

	if (!n || !n->up || lane >= n->nlanes)
		return false;
	l = &n->lane[lane];
	return !list_empty(&l->ctl) || !list_empty(&l->aborts) || !list_empty(&l->active[1]) ||
	       !list_empty(&l->active[0]);
}

static int pull_ctl(struct pe_eng *e, struct pe_lane *l, struct pe_rxs *r, struct pe_frame *f)
{
	struct pw_hdr h = { .prio = r->prio, .src_port = r->dst, .dst_port = r->src };

	/* The ACK before the NACK: it covers the messages before the
	 * refused one, and the sender expects the NACK for its oldest. */
	if (r->ack_pending) {
		h.type = PW_ACK;
		h.seq = r->ack_seq;
		r->ack_pending = false;
		e->unacked = 0;
	} else {
		h.type = PW_NACK;
		h.seq = r->nack_seq;
		h.arg = r->nack_reason;
		r->nack_pending = false;
	}
	if (!r->ack_pending && !r->nack_pending)
		list_del(&r->ctl);
	pw_encode(f->hdr, &h);
	f->data = NULL;
	f->dlen = 0;
	f->ref = NULL;
	return 1;
}

void pe_node_set_low_frag(struct pe_eng *e, uint32_t node, uint32_t frag)
{
	struct pe_node *n = node_get(e, node);

	if (n)
		n->low_frag = frag ? frag : n->frag;
}

int pe_pull(struct pe_eng *e, uint32_t node, unsigned lane, struct pe_frame *f)
{
	return pe_pull_prio(e, node, lane, 0, f);
}

int pe_pull_prio(struct pe_eng *e, uint32_t node, unsigned lane, unsigned min_prio,
		 struct pe_frame *f)
{
	struct pe_node *n = node_get(e, node);
	struct pe_lane *l;

	if (!n || !n->up || lane >= n->nlanes)
		return 0;
	l = &n->lane[lane];
	if (!list_empty(&l->aborts)) {
		struct pe_txs *s = container_of(l->aborts.next, struct pe_txs, abort);
		struct pw_hdr h = { .type = PW_ABORT, .prio = s->prio, .src_port = s->src,
				    .dst_port = s->dst, .seq = s->abort_seq };

		list_del(&s->abort);
		pw_encode(f->hdr, &h);
		f->data = NULL;
		f->dlen = 0;
		f->ref = NULL;
		return 1;
	}
	/* A bare ACK waits if DATA of the reverse stream is about to go: it
	 * rides on that (PW_ACKS).  NACKs never wait. */
	for (struct link *c = l->ctl.next; c != &l->ctl; c = c->next) {
		struct pe_rxs *r = container_of(c, struct pe_rxs, ctl);
		struct pe_txs *rev = r->nack_pending ? NULL : r->rev;

		if (!rev || !linked(&rev->active) || rev->prio < min_prio)
			return pull_ctl(e, l, r, f);
	}
	/* seed 001: high priority never waits behind low; on a shared lane
	 * the next frame is a high one whenever there is one. */
	for (int prio = 1; prio >= (int)min_prio; prio--) {
		struct link *al = &l->active[prio];
		struct pe_txs *s;
		struct pe_send *d;
		uint32_t chunk;
		bool last;

		if (list_empty(al))
			continue;
		s = container_of(al->next, struct pe_txs, active);
		d = s->cur;
		uint32_t fr = prio ? n->frag : n->low_frag;

		chunk = d->len - s->cur_off < fr ? d->len - s->cur_off : fr;
		last = frame_data(e, s, d, s->cur_off, chunk, f);
		s->cur_off += chunk;
		list_del(&s->active);
		if (last) {
			s->cur = d->next;
			s->cur_off = 0;
		}
		/* Round robin per fragment among the streams of a priority. */
		activate(s);
		return 1;
	}
	return 0;
}

/* After a DATA frame of priority prio went into a pack: the frames that
 * pe_pull_prio(min_prio) would give next, as long as they are whole
 * messages of one small frame each of the stream it would serve next --
 * the only stream of that priority with frames, none of a higher priority
 * on the lane, no abort or control frame owed but the ACK its DATA
 * carries.  Copied into the pack, header and payload, so held by
 * nobody. */
size_t pe_pull_pack(struct pe_eng *e, uint32_t node, unsigned lane, unsigned prio,
		    unsigned min_prio, uint32_t max_frame, uint8_t *b, size_t room,
		    unsigned *nframes)
{
	struct pe_node *n = node_get(e, node);
	struct pe_lane *l;
	struct link *al;
	struct pe_txs *s;
	size_t used = 0;
	uint32_t fr;

	*nframes = 0;
	if (!n || !n->up || lane >= n->nlanes || prio > 1 || prio < min_prio)
		return 0;
	l = &n->lane[lane];
	al = &l->active[prio];
	if (!list_empty(&l->aborts) || list_empty(al) || al->next != al->prev ||
	    (prio == 0 && !list_empty(&l->active[1])))
		return 0;
	s = container_of(al->next, struct pe_txs, active);
	fr = prio ? n->frag : n->low_frag;
	while (s->cur && !s->cur_off) {
		struct pe_send *d = s->cur;
		struct pe_rxs *r = s->rev;

		if (!list_empty(&l->ctl) &&
		    (!r || l->ctl.next != &r->ctl || r->ctl.next != &l->ctl || r->nack_pending))
			break;
		if (d->len > fr || PW_HDR_LEN + d->len > max_frame ||
		    used + PW_PACK_LEN + PW_HDR_LEN + d->len > room)
			break;
		/* copied into the pack at once: the transport holds nothing */
		put_be16(b + used, (uint16_t)(PW_HDR_LEN + d->len));
		frame_hdr(e, s, d, 0, d->len, b + used + PW_PACK_LEN);
		if (d->len)
			memcpy(b + used + PW_PACK_LEN + PW_HDR_LEN, d->buf, d->len);
		used += PW_PACK_LEN + PW_HDR_LEN + d->len;
		s->cur = d->next;
		++*nframes;
	}
	if (!s->cur)
		list_del(&s->active);
	return used;
}

XHOT_INLINE void pe_frame_done(struct pe_eng *e, struct pe_send *d)
{
	if (!d || !d->refs)
		return;
	d->refs--;
	d->s->node->refs--;
	e->ports[d->port].refs--;
	if (!d->refs && d->s->done.head == d)
		done_flush(e, d->s);
}

/* --------------------------------------------------------- receiving */

static XCOLD int proto_err(char *why, size_t whylen, const char *fmt, const struct pw_hdr *h)
{
	snprintf(why, whylen, "%s (port %u -> %u prio %u seq %u off %u)", fmt,
		 h->src_port, h->dst_port, h->prio, h->seq, h->off);
	return -EPROTO;
}

/* seed 001 section 3: a message lands only in a buffer provided for its
 * size and priority; otherwise the receiver refuses it and says why. */
XINLINE void rx_first(struct pe_eng *e, struct pe_rxs *r, const struct pw_hdr *h)
{
	struct pe_port *p = &e->ports[h->dst_port];
	struct rq *q;
	struct pe_rbuf *b;

	if (!p->open) {
		nack(r, h->seq, PW_NACK_CLOSED);
		return;
	}
	if (!(p->accept[h->prio] >> h->arg & 1)) {
		nack(r, h->seq, PW_NACK_REJECTED);
		return;
	}
	q = &p->avail[h->prio][h->arg];
	if (!(b = q->head)) {
		nack(r, h->seq, PW_NACK_NOBUF);
		return;
	}
	q->head = b->next;
	r->st = RX_ASM;
	r->expect = h->seq;
	r->rb = b;
	r->len = h->len;
	r->got = 0;
}

XINLINE void rx_complete(struct pe_eng *e, struct pe_rxs *r)
{
	struct pe_port *p = &e->ports[r->dst];
	struct pe_rbuf *b = r->rb;
	struct xp_event *ev = &p->ev[(p->ev_head + p->ev_n) & e->ev_mask];

	/* At most recv_tokens buffers exist, so the ring cannot overflow. */
	ev->type = r->prio ? XP_HIGH_RECV_EVENT : XP_RECV_EVENT;
	ev->buffer = b->buf;
	ev->length = r->len;
	ev->size = b->size;
	ev->prio = r->prio ? XP_HIGH : XP_LOW;
	ev->sender_node = r->node->id;
	ev->sender_port = r->src;
	p->ev_n++;
	p->st.recv_msgs++;
	p->st.recv_bytes += r->len;
	b->next = p->rfree;
	p->rfree = b;
	r->rb = NULL;
	r->st = RX_IDLE;
	r->ack_seq = r->expect;
	r->ack_pending = true;
	r->expect++;
	e->unacked++;
	queue_ctl(r);
}

/* A DATA frame's header: the checks, and where its payload goes in the
 * receive buffer (*dest; NULL when the stream discards the frame).
 * rx_data_end() then counts the payload in. */
XINLINE int rx_data_begin(struct pe_eng *e, struct pe_rxs *r, const struct pw_hdr *h,
			  uint8_t **dest, char *why, size_t whylen)
{
	*dest = NULL;
	if (h->flags & PW_FIRST) {
		if (r->st == RX_ASM) {
			/* Only a sender that gave the message up restarts mid-way,
			 * and it says so with SYNC. */
			if (!(h->flags & PW_SYNC))
				return proto_err(why, whylen, "new message inside a message", h);
			rbuf_push(&e->ports[r->dst], r->rb);
			r->rb = NULL;
			r->st = RX_IDLE;
		}
		if (!(h->flags & PW_SYNC) && (h->seq != r->expect || r->st == RX_UNSYNC)) {
			/* go-back-N: after a refusal, everything but the
			 * refused message again is dropped */
			if (r->st == RX_DISCARD)
				return 0;
			return proto_err(why, whylen, r->st == RX_UNSYNC ? "stream starts without SYNC"
								     : "message out of sequence", h);
		}
		rx_first(e, r, h);
		if (r->st != RX_ASM)
			return 0;
	} else if (r->st != RX_ASM) {
		if (r->st == RX_DISCARD)
			return 0;
		return proto_err(why, whylen, "fragment without a message", h);
	} else if (h->seq != r->expect || h->len != r->len || h->off != r->got) {
		return proto_err(why, whylen, "fragment out of order", h);
	}
	/* pw_decode checked off + plen <= len; the buffer holds
	 * max_length_for_size(size) >= len since size is len's class. */
	*dest = r->rb->buf + h->off;
	return 0;
}

XINLINE void rx_data_end(struct pe_eng *e, struct pe_rxs *r, const struct pw_hdr *h,
			 uint32_t plen)
{
	r->got += plen;
	if (h->flags & PW_LAST)
		rx_complete(e, r);
}

XINLINE int rx_data(struct pe_eng *e, struct pe_rxs *r, const struct pw_hdr *h,
		    const uint8_t *pl, uint32_t plen, char *why, size_t whylen)
{
	uint8_t *dest;
	int rc = rx_data_begin(e, r, h, &dest, why, whylen);

	if (rc < 0 || !dest)
		return rc;
	if (plen)
		memcpy(dest, pl, plen);
	rx_data_end(e, r, h, plen);
	return 0;
}

/* Stream s (NULL: none, a port closed since) acknowledged up to seq. */
XINLINE int rx_ack(struct pe_eng *e, struct pe_txs *s, const struct pw_hdr *h, char *why,
		   size_t whylen)
{
	struct pe_send *d;

	if (!s)
		return 0;
	while ((d = s->q.head) && seq_le(d->seq, h->seq)) {
		if (d == s->cur)
			return proto_err(why, whylen, "ACK of a message not sent yet", h);
		sq_pop(&s->q);
		finish(e, s, d, XP_SUCCESS);
	}
	done_flush(e, s);
	return 0;
}

static int rx_nack(struct pe_eng *e, struct pe_node *n, const struct pw_hdr *h,
			    uint64_t now, char *why, size_t whylen)
{
	struct pe_txs *s = txs_get(n, h->dst_port, h->src_port, h->prio, false);
	struct pe_send *d;

	/* A NACK names the oldest unacknowledged message; anything else is
	 * about messages dropped since. */
	if (!s || !(d = s->q.head) || d->seq != h->seq)
		return 0;
	if (d == s->cur && s->cur_off == 0)
		return proto_err(why, whylen, "NACK of a message not sent yet", h);
	switch (h->arg) {
	case PW_NACK_CLOSED:
		fail_head(e, s, XP_SEND_TARGET_PORT_CLOSED);
		return 0;
	case PW_NACK_REJECTED:
		fail_head(e, s, XP_SEND_REJECTED);
		return 0;
	}
	e->ports[d->port].st.nacks_nobuf++;
	if (!d->nobuf) {
		d->nobuf = true;
		d->first_nobuf = now;
		d->backoff = e->o.backoff_min_ns;
	} else {
		d->backoff = d->backoff * 2 > e->o.backoff_max_ns ? e->o.backoff_max_ns
								 : d->backoff * 2;
	}
	if (now >= xtime_after(d->first_nobuf, e->o.send_timeout_ns)) {
		fail_head(e, s, XP_SEND_TIMED_OUT);
		return 0;
	}
	/* go-back-N: everything from the refused message goes again */
	s->cur = d;
	s->cur_off = 0;
	s->retry_at = xtime_after(now, d->backoff);
	if (s->retry_at > xtime_after(d->first_nobuf, e->o.send_timeout_ns))
		s->retry_at = xtime_after(d->first_nobuf, e->o.send_timeout_ns);
	list_del(&s->active);
	if (!linked(&s->backoff))
		list_add_tail(&e->backoff, &s->backoff);
	return 0;
}

static XCOLD int bad_frame(char *why, size_t whylen, int rc)
{
	snprintf(why, whylen, "bad frame: %s", pw_strerror(rc));
	return -EPROTO;
}

/* A frame other than DATA: kept out of the data path's code (an ACK on
 * its own comes once per window, the rest rarely). */
static int rx_control(struct pe_eng *e, struct pe_node *n, const struct pw_hdr *h,
			       uint64_t now, char *why, size_t whylen)
{
	switch (h->type) {
	case PW_ACK:
		/* ours is the dst_port of an ACK/NACK */
		return rx_ack(e, txs_get(n, h->dst_port, h->src_port, h->prio, false), h, why,
			      whylen);
	case PW_NACK:
		return rx_nack(e, n, h, now, why, whylen);
	case PW_ABORT: {
		struct pe_rxs *r = rxs_get(n, h->src_port, h->dst_port, h->prio, false);

		/* only the message being filled; anything else is stale */
		if (r && r->st == RX_ASM && r->expect == h->seq) {
			if (e->ports[r->dst].open)
				rbuf_push(&e->ports[r->dst], r->rb);
			r->rb = NULL;
			r->st = RX_UNSYNC;	/* the sender's next message has SYNC */
		}
		return 0;
	}
	default:
		snprintf(why, whylen, "HELLO after the link was set up");
		return -EPROTO;
	}
}

/* What pe_input and pe_input_hdr share: the header of a frame of flen
 * bytes decoded and, unless it is DATA, handled.  1 with *h and *r for a
 * DATA frame (after the ACK it may carry), 0 when done, or -EPROTO. */
XINLINE int input_hdr(struct pe_eng *e, uint32_t node, const void *frame, size_t flen,
		      uint64_t now, struct pw_hdr *h, struct pe_rxs **r, char *why, size_t whylen)
{
	struct pe_node *n = node_get(e, node);
	int rc;

	if (!n || !n->up)
		return 0;
	if ((rc = pw_decode(frame, flen, h)) < 0)
		return bad_frame(why, whylen, rc);
	if (h->type != PW_DATA)
		return rx_control(e, n, h, now, why, whylen);
	if (!(*r = rxs_get(n, h->src_port, h->dst_port, h->prio, true)))
		return proto_err(why, whylen, "out of memory for a new stream", h);
	if (h->flags & PW_ACKS) {
		/* for our stream the other way: ours is the DATA's dst */
		struct pw_hdr a = { .type = PW_ACK, .prio = h->prio, .src_port = h->src_port,
				    .dst_port = h->dst_port, .seq = h->aux };
		int arc = rx_ack(e, (*r)->rev, &a, why, whylen);

		if (arc)
			return arc;
	}
	return 1;
}

XHOT_INLINE int pe_input(struct pe_eng *e, uint32_t node, const void *frame, size_t len,
			 uint64_t now, char *why, size_t whylen)
{
	struct pe_rxs *r = NULL;
	struct pw_hdr h;
	int rc = input_hdr(e, node, frame, len, now, &h, &r, why, whylen);

	if (rc <= 0)
		return rc;
	return rx_data(e, r, &h, (const uint8_t *)frame + PW_HDR_LEN, (uint32_t)(len - PW_HDR_LEN),
		       why, whylen);
}

/* Whether frame fr of flen bytes is prev's header again but for its seq
 * (bytes 8..11), at the same length.  pw_decode()'s checks do not read
 * seq: it would pass them as prev did, and it is DATA for the stream prev
 * went to.  An ACK it carries is prev's, taken already: taking it again
 * would change nothing. */
XINLINE bool same_run(const uint8_t *fr, size_t flen, const uint8_t *prev, size_t prev_len)
{
	return flen == prev_len && memcmp(fr, prev, 8) == 0 &&
	       memcmp(fr + 12, prev + 12, PW_HDR_LEN - 12) == 0;
}

/* A pack is mostly a run of one stream's one-frame messages: a frame
 * whose header is the previous DATA frame's but for its seq goes to the
 * same stream without a second decode or look-up; anything else goes
 * the way of pe_input(). */
int pe_input_pack(struct pe_eng *e, uint32_t node, const void *pack, size_t len, uint64_t now,
		  char *why, size_t whylen)
{
	const uint8_t *fr, *prev = NULL;
	size_t off = 0, flen, prev_len = 0;
	struct pe_rxs *r = NULL;
	struct pw_hdr h;
	int rc;

	while ((rc = pw_pack_next(pack, len, &off, &fr, &flen)) > 0) {
		if (r && same_run(fr, flen, prev, prev_len)) {
			h.seq = get_be32(fr + 8);
		} else {
			r = NULL;
			if ((rc = input_hdr(e, node, fr, flen, now, &h, &r, why, whylen)) < 0)
				return rc;
			if (!rc)
				continue;	/* not DATA, or not from a node that is up */
			prev = fr;
			prev_len = flen;
		}
		if ((rc = rx_data(e, r, &h, fr + PW_HDR_LEN, (uint32_t)(flen - PW_HDR_LEN), why,
				  whylen)) < 0)
			return rc;
	}
	if (rc < 0) {
		snprintf(why, whylen, "a cut pack of frames");
		return -EPROTO;
	}
	return 0;
}

int pe_input_hdr(struct pe_eng *e, uint32_t node, const void *hdr, uint32_t plen, uint64_t now,
		 void **dest, char *why, size_t whylen)
{
	struct pe_rxs *r = NULL;
	struct pw_hdr h;
	uint8_t *d = NULL;
	int rc;

	*dest = NULL;
	/* decoded as the whole frame would be: the payload's bounds too */
	rc = input_hdr(e, node, hdr, PW_HDR_LEN + (size_t)plen, now, &h, &r, why, whylen);
	if (rc <= 0)
		return rc;
	if (!plen)
		return proto_err(why, whylen, "a payload to place that is empty", &h);
	if ((rc = rx_data_begin(e, r, &h, &d, why, whylen)) < 0)
		return rc;
	*dest = d;
	return 0;
}

void pe_input_placed(struct pe_eng *e, uint32_t node, const void *hdr, uint32_t plen)
{
	struct pe_node *n = node_get(e, node);
	struct pe_rxs *r;
	struct pw_hdr h;

	/* pe_input_hdr took this header and gave a place: nothing has run
	 * on the stream since */
	if (!n || !n->up || pw_decode(hdr, PW_HDR_LEN + (size_t)plen, &h) < 0 ||
	    !(r = rxs_get(n, h.src_port, h.dst_port, h.prio, false)) || r->st != RX_ASM)
		return;
	rx_data_end(e, r, &h, plen);
}

/* ------------------------------------------------------------- timers */

XHOT_INLINE int pe_timers(struct pe_eng *e, uint64_t now)
{
	struct link *it, *nx;
	int fired = 0;

	for (it = e->backoff.next; it != &e->backoff; it = nx) {
		struct pe_txs *s = container_of(it, struct pe_txs, backoff);
		struct pe_send *d = s->q.head;

		nx = it->next;
		if (now < s->retry_at)
			continue;
		fired++;
		list_del(&s->backoff);
		if (d && d->nobuf && now >= xtime_after(d->first_nobuf, e->o.send_timeout_ns))
			fail_head(e, s, XP_SEND_TIMED_OUT);
		else
			activate(s);
	}
	return fired;
}

uint64_t pe_next_timer(const struct pe_eng *e)
{
	uint64_t t = UINT64_MAX;

	/* Only streams waiting to retry are here: a handful, not all. */
	for (const struct link *it = e->backoff.next; it != &e->backoff; it = it->next) {
		const struct pe_txs *s = container_of(it, const struct pe_txs, backoff);

		if (s->retry_at < t)
			t = s->retry_at;
	}
	return t;
}
