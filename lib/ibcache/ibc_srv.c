/* The gfcc responder engine (ibc_srv.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ibcache/ibc_srv.h"

/* What one requesting host holds: its share of max_states and max_mem.
 * Keyed by the host (cfg.host), not the peer: a share per address and
 * port would give a host that opens N sockets N shares, and N = 4 is all
 * of it. */
struct pacct {
	uint8_t key[IBC_SRV_HOST_MAX];
	uint8_t klen;
	uint32_t n;
	uint64_t mem;
	bool pinned;			/* a request of its is being taken */
	struct pacct *next;
};

struct st {
	void *peer;
	struct pacct *acct;		/* data states: its requester's host's */
	uint64_t id;
	uint32_t qkey;
	struct gfcc_layout lay;
	uint8_t *stream;		/* the response, then the pages */
	uint8_t small[GFCC_RES_LEN];	/* the stream of an error reply */
	uint64_t mem;			/* bytes charged to max_mem */
	uint32_t next;			/* first segment never sent */
	uint32_t sent;			/* datagrams sent, resends included */
	uint32_t allow;			/* cumulative credit */
	uint32_t nresend;		/* bits set in rs */
	uint32_t rs_from;		/* no bit below it is set */
	uint64_t *rs;			/* segments to send again */
	uint64_t last_ns;
	bool oneshot;			/* forgotten once everything went out */
	bool is_err;			/* an error reply: no state, not hashed */
	bool hashed, on_ready, on_idle, on_retire, retired;
	struct st *hnext;
	struct st *rprev, *rnext;	/* ready: round robin */
	struct st *iprev, *inext;	/* idle: least recently active first */
	struct st *tnext;		/* retire */
};

/* Reply buffers of the largest size are kept for reuse: malloc serves
 * 1 MiB from a fresh mmap each time, and faulting in and zeroing a
 * megabyte per request cost more than reading the pages into it. */
#define SPARE_MAX	16
#define BIG		IBC_SRV_MEM_MIN

struct ibc_srv {
	struct ibc_srv_cfg c;
	uint8_t *spare[SPARE_MAX];
	int nspare;
	ibc_srv_read_fn rd;
	void *ctx;
	struct st **tab;
	size_t nb;
	struct pacct **ptab;		/* hosts holding data, nb buckets */
	struct st *rhead, *rtail;
	struct st *ihead, *itail;
	struct st *thead;
	uint32_t ndata, nerr;
	struct ibc_srv_stats stats;
	struct gfcc_req q;		/* scratch: a request is big */
};

static size_t mix(const struct ibc_srv *s, uint64_t x)
{
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 29;
	return (size_t)(x & (s->nb - 1));
}

static size_t bucket(const struct ibc_srv *s, const void *peer, uint64_t id)
{
	return mix(s, (uint64_t)(uintptr_t)peer * 0x9e3779b97f4a7c15ull ^ id);
}

static size_t pbucket(const struct ibc_srv *s, const uint8_t *key, size_t klen)
{
	uint64_t x = 0xcbf29ce484222325ull;	/* FNV-1a, then the mixer */

	for (size_t i = 0; i < klen; i++)
		x = (x ^ key[i]) * 0x100000001b3ull;
	return mix(s, x);
}

/* The account of peer's host, made when it holds nothing yet; NULL when
 * out of memory. */
static struct pacct *acct_get(struct ibc_srv *s, void *peer)
{
	uint8_t key[IBC_SRV_HOST_MAX];
	size_t klen;
	struct pacct *a, **b;

	if (s->c.host) {
		klen = s->c.host(peer, key);
		if (klen > sizeof(key))
			klen = sizeof(key);
	} else {
		memcpy(key, &peer, sizeof(peer));
		klen = sizeof(peer);
	}
	b = &s->ptab[pbucket(s, key, klen)];
	for (a = *b; a; a = a->next)
		if (a->klen == klen && !memcmp(a->key, key, klen))
			return a;
	if (!(a = calloc(1, sizeof(*a))))
		return NULL;
	memcpy(a->key, key, klen);
	a->klen = (uint8_t)klen;
	a->next = *b;
	*b = a;
	return a;
}

/* A host that holds nothing any more is forgotten (not while a request
 * of its is being taken: making room may drop all it held). */
static void acct_put(struct ibc_srv *s, struct pacct *a)
{
	struct pacct **pp;

	if (!a || a->n || a->pinned)
		return;
	for (pp = &s->ptab[pbucket(s, a->key, a->klen)]; *pp && *pp != a; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = a->next;
	free(a);
}

static void unpin(struct ibc_srv *s, struct pacct *a)
{
	if (!a)
		return;
	a->pinned = false;
	acct_put(s, a);
}

static struct st *find(struct ibc_srv *s, const void *peer, uint64_t id)
{
	for (struct st *t = s->tab[bucket(s, peer, id)]; t; t = t->hnext)
		if (t->peer == peer && t->id == id)
			return t;
	return NULL;
}

static void unhash(struct ibc_srv *s, struct st *t)
{
	struct st **pp = &s->tab[bucket(s, t->peer, t->id)];

	while (*pp && *pp != t)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = t->hnext;
	t->hashed = false;
}

static void ready_del(struct ibc_srv *s, struct st *t)
{
	if (!t->on_ready)
		return;
	if (t->rprev)
		t->rprev->rnext = t->rnext;
	else
		s->rhead = t->rnext;
	if (t->rnext)
		t->rnext->rprev = t->rprev;
	else
		s->rtail = t->rprev;
	t->rprev = t->rnext = NULL;
	t->on_ready = false;
}

static void ready_add(struct ibc_srv *s, struct st *t)
{
	if (t->on_ready)
		return;
	t->rprev = s->rtail;
	t->rnext = NULL;
	if (s->rtail)
		s->rtail->rnext = t;
	else
		s->rhead = t;
	s->rtail = t;
	t->on_ready = true;
}

static void idle_del(struct ibc_srv *s, struct st *t)
{
	if (!t->on_idle)
		return;
	if (t->iprev)
		t->iprev->inext = t->inext;
	else
		s->ihead = t->inext;
	if (t->inext)
		t->inext->iprev = t->iprev;
	else
		s->itail = t->iprev;
	t->iprev = t->inext = NULL;
	t->on_idle = false;
}

/* t was active just now: to the end of the idle list. */
static void touch(struct ibc_srv *s, struct st *t, uint64_t now)
{
	t->last_ns = now;
	if (t->is_err)
		return;
	idle_del(s, t);
	t->iprev = s->itail;
	if (s->itail)
		s->itail->inext = t;
	else
		s->ihead = t;
	s->itail = t;
	t->on_idle = true;
}

static bool has_work(const struct st *t)
{
	return t->nresend || t->next < t->lay.nseg;
}

static uint8_t *buf_get(struct ibc_srv *s, uint64_t need)
{
	if (need == BIG && s->nspare)
		return s->spare[--s->nspare];
	return malloc(need);
}

static void buf_put(struct ibc_srv *s, uint8_t *b, uint64_t size)
{
	if (size == BIG && s->nspare < SPARE_MAX)
		s->spare[s->nspare++] = b;
	else
		free(b);
}

static void st_free(struct ibc_srv *s, struct st *t)
{
	if (t->is_err) {
		s->nerr--;
	} else {
		s->ndata--;
		s->stats.state_mem -= t->mem;
		if (t->acct) {
			t->acct->n--;
			t->acct->mem -= t->mem;
			acct_put(s, t->acct);
		}
	}
	if (t->stream != t->small)
		buf_put(s, t->stream, t->mem);
	free(t->rs);
	free(t);
	s->stats.states = s->ndata;
}

/* Out of every list; freed now, or by the next pump when the caller may
 * still be sending from its buffers. */
static void kill(struct ibc_srv *s, struct st *t)
{
	if (t->hashed)
		unhash(s, t);
	ready_del(s, t);
	idle_del(s, t);
	if (t->on_retire)
		t->retired = true;
	else
		st_free(s, t);
}

static void retire(struct ibc_srv *s, struct st *t)
{
	t->retired = true;
	if (!t->on_retire) {
		t->tnext = s->thead;
		s->thead = t;
		t->on_retire = true;
	}
}

static void retire_free(struct ibc_srv *s)
{
	while (s->thead) {
		struct st *t = s->thead;

		s->thead = t->tnext;
		t->on_retire = false;
		if (t->retired)
			kill(s, t);
	}
}

struct ibc_srv *ibc_srv_new(const struct ibc_srv_cfg *c, ibc_srv_read_fn rd, void *ctx)
{
	struct ibc_srv *s;

	if (!c || !rd || (c->flavour != GFCC_UDP && c->flavour != GFCC_UD) ||
	    c->mtu < GFCC_MTU_MIN || c->mtu > GFCC_MTU_MAX ||
	    /* less would refuse every full request, for good */
	    (c->max_mem && c->max_mem < IBC_SRV_MEM_MIN)) {
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->c = *c;
	if (!s->c.max_states)
		s->c.max_states = 1024;
	if (!s->c.max_mem)
		s->c.max_mem = 256ull << 20;
	if (!s->c.ttl_ns)
		s->c.ttl_ns = 2000000000ull;
	if (!s->c.burst)
		s->c.burst = 64;
	if (!s->c.peer_states)
		s->c.peer_states = s->c.max_states / 4 ? s->c.max_states / 4 : 1;
	if (!s->c.peer_mem)
		s->c.peer_mem = s->c.max_mem / 4 > IBC_SRV_MEM_MIN ? s->c.max_mem / 4 : IBC_SRV_MEM_MIN;
	s->rd = rd;
	s->ctx = ctx;
	s->nb = 64;
	while (s->nb < 2 * (size_t)s->c.max_states && s->nb < (1u << 24))
		s->nb *= 2;
	s->tab = calloc(s->nb, sizeof(*s->tab));
	s->ptab = calloc(s->nb, sizeof(*s->ptab));
	if (!s->tab || !s->ptab) {
		free(s->tab);
		free(s->ptab);
		free(s);
		return NULL;
	}
	return s;
}

void ibc_srv_free(struct ibc_srv *s)
{
	if (!s)
		return;
	retire_free(s);
	while (s->ihead)
		kill(s, s->ihead);
	while (s->rhead)
		kill(s, s->rhead);
	while (s->nspare)
		free(s->spare[--s->nspare]);
	free(s->tab);
	free(s->ptab);
	free(s);
}

/* The response alone, for an error or a refused request: no state kept,
 * a lost one is asked for again by the requester's retry. */
static int reply_error(struct ibc_srv *s, void *peer, uint64_t id, uint32_t qkey, int err,
		       uint64_t now)
{
	struct gfcc_res r = { .id = id, .err = (uint32_t)err, .nseg = 1 };
	struct st *t;

	if (!gfcc_qkey_ok(qkey) || s->nerr >= IBC_SRV_ERR_MAX)
		return -err;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -err;
	t->peer = peer;
	t->id = id;
	t->qkey = qkey;
	t->stream = t->small;
	gfcc_layout_init(&t->lay, GFCC_PSIZE_MIN, 0, GFCC_SEGLEN_MIN);
	gfcc_res_encode(&r, t->small);
	t->allow = UINT32_MAX;
	t->oneshot = t->is_err = true;
	t->last_ns = now;
	s->nerr++;
	ready_add(s, t);
	return -err;
}

static bool peer_full(const struct ibc_srv *s, const struct pacct *a, uint64_t need)
{
	return a->n >= s->c.peer_states || a->mem + need > s->c.peer_mem;
}

/* Room for a reply of `need` bytes to host a: replies wholly sent go
 * first, oldest first (their requesters had the time to ask for what
 * they lacked) -- its own first while it holds its whole share.  A reply
 * still waiting for credit is never dropped, so the share is what keeps
 * one host (one that never grants credit, say, from as many sockets as
 * it likes) from holding every state and byte while the others are
 * refused. */
static bool make_room(struct ibc_srv *s, struct pacct *a, uint64_t need)
{
	struct st *t;

	for (t = s->ihead; t && peer_full(s, a, need);) {
		struct st *n = t->inext;

		if (t->acct == a && !has_work(t)) {
			kill(s, t);
			s->stats.evicted++;
		}
		t = n;
	}
	if (peer_full(s, a, need))
		return false;
	t = s->ihead;
	while (t && (s->ndata >= s->c.max_states || s->stats.state_mem + need > s->c.max_mem)) {
		struct st *n = t->inext;

		if (!has_work(t)) {
			kill(s, t);
			s->stats.evicted++;
		}
		t = n;
	}
	return s->ndata < s->c.max_states && s->stats.state_mem + need <= s->c.max_mem;
}

static int on_request(struct ibc_srv *s, void *peer, const void *buf, size_t len, uint64_t now)
{
	struct gfcc_req *q = &s->q;
	struct gfcc_res r;
	struct pacct *a;
	struct st *t;
	uint32_t seglen, hdr = s->c.flavour == GFCC_UDP ? GFCC_DSEG_LEN : 0;
	uint64_t need, size;
	int rc = gfcc_req_decode(buf, len, q);

	if (rc) {
		s->stats.bad_requests++;
		/* id and qkey sit at fixed offsets, filled before the checks
		 * failed: the requester hears why instead of timing out */
		if (len < GFCC_REQ_HDR || rc == -EPROTO)
			return rc;
		return reply_error(s, peer, q->id, q->qkey,
				   rc == -EMSGSIZE ? EINVAL :
				   rc == -EINVAL && !gfcc_psize_ok(q->psize) ? ENXIO : -rc, now);
	}
	if ((t = find(s, peer, q->id))) {
		s->stats.dup_requests++;
		return -EALREADY;
	}
	s->stats.requests++;
	/* without the extension the requester is gfarm: MTU - 40 (gfarm's
	 * iosize), no flow control */
	seglen = q->has_ext ? q->ext.seglen
			    : gfcc_seglen(s->c.mtu, s->c.flavour == GFCC_UD ? GFCC_UD_GFARM : GFCC_UDP);
	if (!seglen || seglen < GFCC_SEGLEN_MIN || seglen + hdr > s->c.mtu) {
		s->stats.errors++;
		return reply_error(s, peer, q->id, q->qkey, EMSGSIZE, now);
	}
	need = GFCC_RES_LEN + (uint64_t)q->npage * q->psize;
	if ((a = acct_get(s, peer)))
		a->pinned = true;
	if (!a || !make_room(s, a, need)) {
		unpin(s, a);
		s->stats.refused++;
		return reply_error(s, peer, q->id, q->qkey, ENOMEM, now);
	}
	t = calloc(1, sizeof(*t));
	if (!t || !(t->stream = buf_get(s, need))) {
		free(t);
		unpin(s, a);
		s->stats.refused++;
		return reply_error(s, peer, q->id, q->qkey, ENOMEM, now);
	}
	size = UINT64_MAX;
	rc = s->rd(s->ctx, q, t->stream + GFCC_RES_LEN, now, &size);
	if (rc < 0) {
		buf_put(s, t->stream, need);
		free(t);
		unpin(s, a);
		if (rc == -ESTALE)
			s->stats.stale++;
		else if (rc == -ENOENT)
			s->stats.not_found++;
		else
			s->stats.errors++;
		return reply_error(s, peer, q->id, q->qkey, rc < -GFCC_ERR_MAX ? EIO : -rc, now);
	}
	if ((uint32_t)rc > q->npage)
		rc = (int)q->npage;
	gfcc_layout_init(&t->lay, q->psize, (uint32_t)rc, seglen);
	r = (struct gfcc_res){ .id = q->id, .npage = t->lay.npage, .nseg = t->lay.nseg };
	/* the copy's size, to a requester that speaks xprt's extension: its
	 * last page is cut there, and a copy of another size than the file's
	 * is not used (gfcc_wire.h) */
	if (q->has_ext && size <= GFCC_RES_SIZE_MAX) {
		r.has_size = true;
		r.size = size;
	}
	gfcc_res_encode(&r, t->stream);
	t->peer = peer;
	t->id = q->id;
	t->qkey = q->qkey;
	t->mem = need;
	/* UD: the scatter is positional, a resend could not land right, so
	 * there is nothing to keep (gfarm); UDP with a window: credits */
	t->oneshot = s->c.flavour == GFCC_UD || !q->has_ext || !q->ext.window ||
		     /* one datagram: if it is lost the requester asks again,
		      * and the request alone rebuilds it -- no state, no FIN */
		     t->lay.nseg == 1;
	t->allow = t->oneshot ? UINT32_MAX : q->ext.window;
	t->hnext = s->tab[bucket(s, peer, t->id)];
	s->tab[bucket(s, peer, t->id)] = t;
	t->hashed = true;
	s->ndata++;
	s->stats.states = s->ndata;
	s->stats.state_mem += need;
	t->acct = a;
	a->n++;
	a->mem += need;
	a->pinned = false;
	s->stats.replies++;
	s->stats.pages_sent += t->lay.npage;
	if (t->lay.npage < q->npage)
		s->stats.short_replies++;
	touch(s, t, now);
	ready_add(s, t);
	return 0;
}

static void mark_resend(struct st *t, uint32_t seg)
{
	uint64_t bit = 1ull << (seg % 64);

	if (t->rs[seg / 64] & bit)
		return;
	t->rs[seg / 64] |= bit;
	t->nresend++;
	if (seg < t->rs_from || t->nresend == 1)
		t->rs_from = seg;
}

static int on_ctl(struct ibc_srv *s, void *peer, const void *buf, size_t len, uint64_t now)
{
	struct gfcc_xmsg m;
	struct st *t;
	int rc = gfcc_xmsg_decode(buf, len, &m);

	if (rc) {
		s->stats.bad_ctl++;
		return rc;
	}
	t = find(s, peer, m.id);
	if (!t) {
		s->stats.unknown_ctl++;
		return -ENOENT;
	}
	if (t->qkey != m.qkey) {
		/* only the requester knows the key it chose */
		s->stats.foreign++;
		return -EPERM;
	}
	if (m.type == GFCC_X_FIN) {
		s->stats.fins++;
		kill(s, t);
		return 0;
	}
	if (m.type == GFCC_X_CREDIT)
		s->stats.credits++;
	/* cumulative: a late or lost message costs nothing, the larger wins */
	if (!t->oneshot && m.allow > t->allow)
		t->allow = m.allow;
	if (m.type == GFCC_X_RESEND && !t->oneshot) {
		uint32_t words = (t->lay.nseg + 63) / 64;

		s->stats.resend_msgs++;
		if (!t->rs && !(t->rs = calloc(words, sizeof(*t->rs))))
			return -ENOMEM;
		/* only what went out already: the rest comes in order anyway */
		for (uint32_t i = 0; i < m.nbits; i++) {
			uint32_t seg = (uint32_t)m.base + i;

			if (seg < t->next && gfcc_xmsg_bit(&m, i))
				mark_resend(t, seg);
		}
	}
	touch(s, t, now);
	if (has_work(t) && t->sent < t->allow)
		ready_add(s, t);
	return 0;
}

int ibc_srv_input(struct ibc_srv *s, void *peer, const void *buf, size_t len, uint64_t now)
{
	retire_free(s);
	switch (gfcc_kind(buf, len)) {
	case GFCC_KIND_REQ:
		return on_request(s, peer, buf, len, now);
	case GFCC_KIND_X:
		return on_ctl(s, peer, buf, len, now);
	default:
		s->stats.foreign++;
		return -EPROTO;
	}
}

static uint32_t take_resend(struct st *t)
{
	uint32_t seg = t->rs_from;

	for (;; seg = (seg / 64 + 1) * 64) {
		uint64_t w = t->rs[seg / 64] >> (seg % 64);

		if (w) {
			seg += (uint32_t)__builtin_ctzll(w);
			break;
		}
	}
	t->rs[seg / 64] &= ~(1ull << (seg % 64));
	t->nresend--;
	t->rs_from = seg + 1;
	return seg;
}

static void fill(const struct ibc_srv *s, const struct st *t, uint32_t seg, bool resend,
		 struct ibc_out *o)
{
	*o = (struct ibc_out){ .peer = t->peer, .buf = t->stream + (size_t)seg * t->lay.seglen,
			       .len = gfcc_seg_len(&t->lay, seg), .qkey = t->qkey,
			       .st = (void *)t, .seg = seg, .resend = resend };
	if (s->c.flavour == GFCC_UDP) {
		struct gfcc_dseg d = { .id = t->id, .qkey = t->qkey, .seg = (uint16_t)seg,
				       .npage = (uint16_t)t->lay.npage };

		gfcc_dseg_encode(&d, o->hdr);
		o->hlen = GFCC_DSEG_LEN;
	}
}

int ibc_srv_pump(struct ibc_srv *s, struct ibc_out *out, int max, uint64_t now)
{
	int n = 0;

	retire_free(s);
	while (n < max && s->rhead) {
		struct st *t = s->rhead;
		uint32_t k = 0;

		while (n < max && k < s->c.burst && t->sent < t->allow && has_work(t)) {
			bool rs = t->nresend > 0;
			uint32_t seg = rs ? take_resend(t) : t->next++;

			fill(s, t, seg, rs, &out[n]);
			if (rs)
				s->stats.resent++;
			else
				s->stats.segments_sent++;
			s->stats.bytes_sent += out[n].hlen + out[n].len;
			t->sent++;
			n++;
			k++;
		}
		ready_del(s, t);
		if (k)
			touch(s, t, now);
		/* its turn is over: to the back, or off the list until credit
		 * or a RESEND comes */
		if (has_work(t) && t->sent < t->allow)
			ready_add(s, t);
		else if (!has_work(t) && t->oneshot)
			retire(s, t);
	}
	return n;
}

void ibc_srv_unsent(struct ibc_srv *s, const struct ibc_out *out, int n)
{
	for (int i = n - 1; i >= 0; i--) {
		struct st *t = out[i].st;

		t->retired = false;
		t->sent--;
		if (out[i].resend) {
			mark_resend(t, out[i].seg);
			s->stats.resent--;
		} else {
			t->next = out[i].seg;
			s->stats.segments_sent--;
		}
		s->stats.bytes_sent -= out[i].hlen + out[i].len;
		if (!t->on_ready) {
			/* first in line again: it was cut off mid-turn */
			t->rnext = s->rhead;
			t->rprev = NULL;
			if (s->rhead)
				s->rhead->rprev = t;
			else
				s->rtail = t;
			s->rhead = t;
			t->on_ready = true;
		}
	}
}

bool ibc_srv_busy(const struct ibc_srv *s)
{
	return s->rhead != NULL;
}

uint64_t ibc_srv_timer(struct ibc_srv *s, uint64_t now)
{
	retire_free(s);
	while (s->ihead && now - s->ihead->last_ns >= s->c.ttl_ns) {
		kill(s, s->ihead);
		s->stats.expired++;
	}
	return s->ihead ? s->ihead->last_ns + s->c.ttl_ns : UINT64_MAX;
}

void ibc_srv_get_stats(const struct ibc_srv *s, struct ibc_srv_stats *st)
{
	*st = s->stats;
}
