/* The gfcc requester and its endpoint pool (ibc_req.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/spin.h"
#include "core/xtime.h"
#include "ibcache/ibc_peers.h"
#include "ibcache/ibc_req.h"
#include "xprt/xdg.h"

enum { K_UDP4, K_UDP6, K_UD, K_MAX };

#define RX_BATCH	32
#define GRO_SEGLEN_MAX	16384u	/* coalesced receives for segments up to this */
#define MAX_REGIONS	16
#define SLOT_SGE	64	/* scatter entries of one predicted datagram */

struct kind;

struct ent {
	struct kind *k;
	struct xdg *d;
	bool busy;
	bool dirty;			/* ended early: drain/reset before reuse */
	bool watched;			/* in the epoll set (ent_watch) */
	int peer;
	uint32_t mtu;			/* the peer's datagram size when it went */
	struct xdg_addr *addr[IBC_PEERS_MAX];	/* peers imported into d */
	struct xdg_addr *connected;	/* udp */
	struct ibc_rq rq;
	uint8_t req[GFCC_REQ_MAX];
	int reqlen;
	uint64_t tag;
	/* ud: the shared GRH room and the response (seed 3.2.2), registered */
	uint8_t *small;
	struct xdg_mem *small_mem;
	struct xdg_rwr *wr;
	struct xdg_sge *sge;
	/* udp: the kernel scatters each datagram straight into the pages --
	 * into the place of the segment expected next, checked on arrival */
	bool placed;
	uint32_t cursor;		/* one past the highest segment seen */
	int npred;			/* slots predicted, valid until a datagram
					 * comes (-1: predict again) */
	uint32_t slot_seg[RX_BATCH];
	uint8_t hdrs[RX_BATCH][GFCC_DSEG_LEN];
	uint8_t res[GFCC_RES_LEN];
	uint8_t *tail;			/* room past a short last segment */
	struct xdg_rwr uwr[RX_BATCH];
	struct xdg_sge *usge;
};

struct kind {
	enum xuri_scheme scheme;
	const char *any;		/* wildcard bind address */
	struct xdg *resolver;
	uint32_t mtu;			/* the pool endpoints' (max over peers) */
	uint32_t nseg_max, pieces_max;	/* ud: WRs and SGEs a reply needs */
	uint32_t nent;
	struct ent *ents[IBC_DEPTH_MAX];
};

struct peer {
	struct xuri u;
	char name[300];
	struct kind *k;
	struct xdg_addr *addr;		/* on the resolver */
	uint32_t mtu;			/* datagram payload: the path's, or less */
	uint32_t seglen, max_pblk, max_pages, window;
	uint64_t srtt;			/* ns, 0 until measured */
	uint64_t heard;			/* last datagram for one of our requests */
};

struct region {
	uint8_t *buf;
	size_t len;
	struct xdg_mem *mem;
};

struct ibc_req {
	struct ibc_req_opts o;
	struct kind kinds[K_MAX];
	struct peer peers[IBC_PEERS_MAX];
	int npeers;
	struct region reg[MAX_REGIONS];
	int nreg;
	int epfd;
	uint32_t inflight;
	uint64_t next_id;
	uint64_t rnd;
	struct ibc_req_stats st;
	struct ent *fin[IBC_DEPTH_MAX * K_MAX];	/* finished, not yet reported */
	int nfin;
	char err[256];			/* why the last endpoint could not be had */
};

static uint64_t rnd(struct ibc_req *q)
{
	/* xorshift64*: ids and keys need to be unguessable by a stranger on
	 * the wire only as far as a 31-bit key goes; seeded from getrandom */
	q->rnd ^= q->rnd >> 12;
	q->rnd ^= q->rnd << 25;
	q->rnd ^= q->rnd >> 27;
	return q->rnd * 0x2545f4914f6cdd1dull;
}

struct ibc_req *ibc_req_new(const struct ibc_req_opts *o)
{
	struct ibc_req *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	if (o)
		q->o = *o;
	if (!q->o.psize)
		q->o.psize = 4096;
	if (!q->o.timeout_ns)
		q->o.timeout_ns = 500 * XTIME_NS_PER_MS;
	if (!q->o.window_bytes)
		q->o.window_bytes = 256u << 10;
	if (!q->o.depth)
		q->o.depth = 8;
	if (q->o.depth > IBC_DEPTH_MAX)
		q->o.depth = IBC_DEPTH_MAX;
	if (!q->o.spin_ns)
		q->o.spin_ns = 50 * XTIME_NS_PER_US;
	q->kinds[K_UDP4] = (struct kind){ .scheme = XURI_UDP, .any = "0.0.0.0" };
	q->kinds[K_UDP6] = (struct kind){ .scheme = XURI_UDP, .any = "::" };
	q->kinds[K_UD] = (struct kind){ .scheme = XURI_UD, .any = "0.0.0.0" };
	if (getrandom(&q->rnd, sizeof(q->rnd), 0) != sizeof(q->rnd))
		q->rnd = xtime_real_ns() ^ (uint64_t)getpid() << 32;
	q->rnd |= 1;
	q->next_id = rnd(q);
	q->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (q->epfd < 0) {
		free(q);
		return NULL;
	}
	xhist_reset(&q->st.rtt);
	return q;
}

static void ent_free(struct ent *e)
{
	if (!e)
		return;
	xdg_mem_dereg(e->small_mem);
	xdg_close(e->d);
	free(e->tail);
	free(e->usge);
	free(e->small);
	free(e->wr);
	free(e->sge);
	free(e);
}

void ibc_req_free(struct ibc_req *q)
{
	if (!q)
		return;
	for (int i = 0; i < K_MAX; i++) {
		for (uint32_t k = 0; k < q->kinds[i].nent; k++)
			ent_free(q->kinds[i].ents[k]);
	}
	for (int i = 0; i < q->nreg; i++)
		xdg_mem_dereg(q->reg[i].mem);
	for (int i = 0; i < K_MAX; i++)
		xdg_close(q->kinds[i].resolver);
	close(q->epfd);
	free(q);
}

static struct kind *kind_for(struct ibc_req *q, const struct xuri *u)
{
	if (u->scheme == XURI_UD)
		return &q->kinds[K_UD];
	return &q->kinds[strchr(u->host, ':') ? K_UDP6 : K_UDP4];
}

static int open_resolver(struct kind *k, char *err, size_t errlen)
{
	struct xdg_opts o = { .rx_depth = 16, .tx_depth = 16 };
	struct xuri u = { .scheme = k->scheme };

	if (k->resolver)
		return 0;
	snprintf(u.host, sizeof(u.host), "%s", k->any);
	if (k->scheme == XURI_UDP)
		o.mtu = GFCC_MTU_MAX;
	k->resolver = xdg_open(&u, &o, err, errlen);
	return k->resolver ? 0 : -errno;
}

/* What the datagram size pm sets for a peer.  UD: the whole MTU is
 * payload (the GRH lands in a buffer of its own); UDP: the segment header
 * goes first. */
static void peer_mtu(struct ibc_req *q, struct peer *p, uint32_t pm)
{
	uint32_t dgbytes;

	p->mtu = pm;
	p->seglen = gfcc_seglen(pm, p->k->scheme == XURI_UD ? GFCC_UD : GFCC_UDP);
	p->max_pblk = gfcc_req_max_pblk(pm, true);
	dgbytes = p->seglen + (p->k->scheme == XURI_UDP ? GFCC_DSEG_LEN : 0);
	p->window = q->o.window_bytes / dgbytes;
	if (p->window < 4)
		p->window = 4;
}

int ibc_req_add_peer(struct ibc_req *q, const struct xuri *u, char *err, size_t errlen)
{
	struct peer *p;
	struct kind *k;
	uint32_t pm;
	int rc;

	if (q->npeers == IBC_PEERS_MAX) {
		snprintf(err, errlen, "more than %d peers", IBC_PEERS_MAX);
		return -E2BIG;
	}
	if (u->scheme != XURI_UDP && u->scheme != XURI_UD) {
		snprintf(err, errlen, "%s: a peer is udp:// or ud://", u->host);
		return -EINVAL;
	}
	k = kind_for(q, u);
	if ((rc = open_resolver(k, err, errlen)))
		return rc;
	p = &q->peers[q->npeers];
	memset(p, 0, sizeof(*p));
	p->u = *u;
	p->k = k;
	xuri_format(u, p->name, sizeof(p->name));
	p->addr = xdg_resolve(k->resolver, u, err, errlen);
	if (!p->addr)
		return -(errno ? errno : EHOSTUNREACH);
	pm = xdg_path_mtu(k->resolver, p->addr);
	if (q->o.mtu && q->o.mtu < pm)
		pm = q->o.mtu;
	if (pm < GFCC_MTU_MIN) {
		snprintf(err, errlen, "%s: path MTU %u is below gfcc's %u", p->name, pm, GFCC_MTU_MIN);
		return -EMSGSIZE;
	}
	peer_mtu(q, p, pm);
	p->max_pages = gfcc_max_pages(q->o.psize);
	if (pm > k->mtu)
		k->mtu = pm;
	if (k->scheme == XURI_UD) {
		struct gfcc_layout l;

		gfcc_layout_init(&l, q->o.psize, p->max_pages, p->seglen);
		if (l.nseg > k->nseg_max)
			k->nseg_max = l.nseg;
		if (GFCC_PIECES_MAX(p->seglen, q->o.psize) > k->pieces_max)
			k->pieces_max = GFCC_PIECES_MAX(p->seglen, q->o.psize);
	}
	return q->npeers++;
}

uint32_t ibc_req_lower_mtu(struct ibc_req *q, int peer, uint32_t refused)
{
	static const uint32_t steps[] = { 8972, 1472 };
	struct peer *p;
	uint32_t pm = 0;

	if (peer < 0 || peer >= q->npeers || (p = &q->peers[peer])->k->scheme != XURI_UDP)
		return 0;
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]) && !pm; i++)
		if (steps[i] < refused)
			pm = steps[i];
	if (!pm)	/* halves, and gfcc's smallest last */
		pm = refused / 2 >= GFCC_MTU_MIN ? refused / 2 :
		     refused > GFCC_MTU_MIN ? GFCC_MTU_MIN : 0;
	if (pm && pm < p->mtu)
		peer_mtu(q, p, pm);
	return pm ? p->mtu : 0;
}

const char *ibc_req_peer_name(const struct ibc_req *q, int peer)
{
	return peer >= 0 && peer < q->npeers ? q->peers[peer].name : "?";
}

uint32_t ibc_req_max_pages(const struct ibc_req *q, int peer)
{
	return q->peers[peer].max_pages;
}

uint32_t ibc_req_seglen(const struct ibc_req *q, int peer)
{
	return q->peers[peer].seglen;
}

int ibc_req_register(struct ibc_req *q, void *buf, size_t len, char *err, size_t errlen)
{
	struct kind *k = &q->kinds[K_UD];
	struct xdg_mem *m;

	if (!k->resolver)
		return 0;	/* no ud:// peer: the pages are copied */
	if (q->nreg == MAX_REGIONS) {
		snprintf(err, errlen, "more than %d registered regions", MAX_REGIONS);
		return -E2BIG;
	}
	m = xdg_mem_reg(k->resolver, buf, len, err, errlen);
	if (!m)
		return -errno;
	q->reg[q->nreg++] = (struct region){ buf, len, m };
	return 0;
}

static const struct xdg_mem *region_of(const struct ibc_req *q, const uint8_t *p, uint32_t len)
{
	for (int i = 0; i < q->nreg; i++)
		if (p >= q->reg[i].buf && p + len <= q->reg[i].buf + q->reg[i].len)
			return q->reg[i].mem;
	return NULL;
}

static struct ent *ent_open(struct ibc_req *q, struct kind *k)
{
	struct xdg_opts o = { .rx_depth = RX_BATCH, .tx_depth = 16, .mtu = k->mtu };
	struct xuri u = { .scheme = k->scheme };
	struct epoll_event ev = { .events = EPOLLIN };
	struct ent *e = calloc(1, sizeof(*e));
	char *err = q->err;
	size_t errlen = sizeof(q->err);
	int rc = ENOMEM;

	snprintf(err, errlen, "out of memory");
	if (!e) {
		errno = ENOMEM;
		return NULL;
	}
	e->k = k;
	snprintf(u.host, sizeof(u.host), "%s", k->any);
	if (k->scheme == XURI_UD) {
		/* a QP with room for a whole reply's receive WRs */
		o.user_rx = true;
		o.rx_depth = k->nseg_max;
		o.rx_sge = k->pieces_max;
		o.mtu = 0;
		e->small = aligned_alloc(64, 128);
		e->wr = calloc(k->nseg_max, sizeof(*e->wr));
		e->sge = calloc((size_t)k->nseg_max * k->pieces_max, sizeof(*e->sge));
		if (!e->small || !e->wr || !e->sge)
			goto fail;
	} else {
		/* Runs of datagrams coalesced by the kernel, copied out of
		 * 64 KiB buffers, beat datagrams placed one by one at real
		 * MTUs: a reply's trip through the stack is paid once per run,
		 * not per datagram.  Where the kernel lacks it, placement. */
		o.gro = true;
		o.rx_depth = RX_BATCH / 2;
		e->usge = calloc(RX_BATCH * SLOT_SGE, sizeof(*e->usge));
		e->tail = malloc(k->mtu);
		if (!e->usge || !e->tail)
			goto fail;
	}
	e->d = xdg_open(&u, &o, err, errlen);
	if (!e->d)
		goto fail_errno;
	if (k->scheme == XURI_UD && !(e->small_mem = xdg_mem_reg(e->d, e->small, 128, err, errlen)))
		goto fail_errno;
	ev.data.ptr = e;
	if (epoll_ctl(q->epfd, EPOLL_CTL_ADD, xdg_fd(e->d), &ev) < 0) {
		snprintf(err, errlen, "epoll: %s", strerror(errno));
		goto fail_errno;
	}
	e->watched = true;
	err[0] = 0;	/* the "out of memory" preset above is for the early returns */
	return e;
fail_errno:
	rc = errno ? errno : EIO;
fail:
	ent_free(e);
	errno = rc;
	return NULL;
}

const char *ibc_req_error(const struct ibc_req *q)
{
	return q->err;
}

static uint32_t new_qkey(struct ibc_req *q)
{
	uint32_t k = (uint32_t)(rnd(q) >> 33);	/* 31 bits: the high bit is IB's "own" */

	return k ? k : 1;
}

/* UD: receive WRs for the whole reply, posted before the request goes
 * out (seed 004 3.2.2 figure: GRH, the response in the first, then page
 * pieces up to the MTU, a page split across two WRs where it falls). */
static int post_reply(struct ibc_req *q, struct ent *e, uint8_t *const *dst, uint32_t n)
{
	struct gfcc_layout l;
	struct gfcc_piece pc[40];
	struct xdg_sge *g = e->sge;
	uint32_t seglen = e->rq.ra.lay.seglen, maxp = e->k->pieces_max;
	int rc;

	if (gfcc_layout_init(&l, q->o.psize, n, seglen) || l.nseg > e->k->nseg_max)
		return -EINVAL;
	for (uint32_t s = 0; s < l.nseg; s++) {
		int np = gfcc_seg_pieces(&l, s, GFCC_PFX_GRH, pc, maxp < 40 ? maxp : 40);

		if (np < 0)
			return np;
		for (int i = 0; i < np; i++) {
			uint8_t *a = e->small;
			uint32_t len = GFCC_GRH_LEN;
			const struct xdg_mem *m = e->small_mem;

			if (pc[i].kind == GFCC_PC_RES) {
				a = e->small + 64;
				len = GFCC_RES_LEN;
			} else if (pc[i].kind == GFCC_PC_PAGE) {
				a = dst[pc[i].page] + pc[i].off;
				len = pc[i].len;
				if (!(m = region_of(q, a, len)))
					return -EFAULT;	/* not registered: ibc_req_register */
			}
			g[i] = (struct xdg_sge){ a, len, m };
		}
		e->wr[s] = (struct xdg_rwr){ .sg = g, .nsge = (uint32_t)np, .wr_id = s };
		g += np;
	}
	rc = xdg_post_recv(e->d, e->wr, (int)l.nseg);
	return rc == (int)l.nseg ? 0 : rc < 0 ? rc : -ENOBUFS;
}

/* A send our own host refused for now -- a full queue, a local firewall
 * dropping it (EPERM from the output hook), no buffer or memory for it --
 * is a lost datagram, not a dead peer: the request's timers send it again
 * and give up by time as they would on a lossy link. */
static bool send_lost(int rc)
{
	return rc == -EAGAIN || rc == -EPERM || rc == -ENOBUFS || rc == -ENOMEM;
}

static void send_out(struct ibc_req *q, struct ent *e, const struct ibc_rq_out *out)
{
	struct xdg_addr *to = e->addr[e->peer];
	int rc;

	/* what does not go is lost: the timers send it again */
	if (out->request && (rc = xdg_send(e->d, to, e->req, (size_t)e->reqlen, 0, 0)) < 0 &&
	    rc != -EAGAIN)
		q->st.send_errors++;
	for (int i = 0; i < out->n; i++)
		if ((rc = xdg_send(e->d, to, out->msg[i], out->len[i], 0, 0)) < 0 && rc != -EAGAIN)
			q->st.send_errors++;
}

int ibc_req_submit(struct ibc_req *q, int peer, uint64_t ino, uint64_t gen,
		   const uint64_t *pages, uint32_t n, uint8_t *const *dst, uint64_t tag)
{
	struct peer *p;
	struct kind *k;
	struct ent *e = NULL;
	struct ibc_rq_cfg c;
	uint32_t qkey;
	uint64_t now;
	int taken, rc;

	if (peer < 0 || peer >= q->npeers || !n)
		return -EINVAL;
	p = &q->peers[peer];
	k = p->k;
	qkey = new_qkey(q);
	q->err[0] = 0;
	for (uint32_t i = 0; i < k->nent && !e; i++)
		if (!k->ents[i]->busy)
			e = k->ents[i];
	if (!e) {
		if (k->nent >= q->o.depth)
			return -EBUSY;
		if (!(e = ent_open(q, k)))
			return -(errno ? errno : ENOMEM);
		k->ents[k->nent++] = e;
		q->st.endpoints++;
	}
	if (!e->addr[peer] &&
	    !(e->addr[peer] = xdg_addr_import(e->d, p->addr, q->err, sizeof(q->err))))
		return -EHOSTUNREACH;
	/* udp: segments an MTU of a real link carries come in runs the
	 * kernel coalesces (copied out of its buffers); ones near 64 KiB
	 * (loopback) are placed straight into the pages instead */
	if (k->scheme == XURI_UDP)
		xdg_set_gro(e->d, p->seglen <= GRO_SEGLEN_MAX);
	/* a fresh key per request: what an earlier request left in flight
	 * no longer matches (seed 004 3.2 "qkey をQP毎に変えれば誤受信の危険が
	 * 減る") */
	if (e->dirty) {
		rc = xdg_reset(e->d, qkey);
		q->st.resets++;
		e->dirty = false;
	} else {
		rc = xdg_set_qkey(e->d, qkey);
	}
	if (rc)
		return rc;
	if (k->scheme == XURI_UDP && e->connected != e->addr[peer]) {
		if ((rc = xdg_connect(e->d, e->addr[peer])))
			return rc;
		e->connected = e->addr[peer];
	}
	now = xtime_ns();
	c = (struct ibc_rq_cfg){ .id = q->next_id++, .qkey = qkey,
		.obj = { .ino = ino, .gen = gen }, .psize = q->o.psize, .pages = pages, .npages = n,
		.max_pblk = p->max_pblk, .max_pages = p->max_pages,
		.flavour = k->scheme == XURI_UD ? GFCC_UD : GFCC_UDP,
		.placed = k->scheme == XURI_UD, .seglen = p->seglen, .window = p->window,
		.dst = dst, .timeout_ns = q->o.timeout_ns, .now = now,
		/* progress is any datagram: a few round trips of silence */
		.rto_ns = p->srtt ? 4 * p->srtt + 2 * XTIME_NS_PER_MS : 10 * XTIME_NS_PER_MS };
	taken = ibc_rq_init(&e->rq, &c);
	if (taken < 0)
		return taken;
	e->mtu = p->mtu;
	/* the pieces of a segment, its header and room past the end must fit
	 * one scatter list; else (small pages in big segments) copy */
	e->placed = k->scheme == XURI_UDP && !xdg_gro(e->d) &&
		    GFCC_PIECES_MAX(p->seglen, q->o.psize) + 1 <= SLOT_SGE;
	e->cursor = 0;
	e->npred = -1;
	e->reqlen = ibc_rq_encode(&e->rq, e->req, sizeof(e->req));
	if (e->reqlen < 0)
		return e->reqlen;
	if (k->scheme == XURI_UD && (rc = post_reply(q, e, dst, (uint32_t)taken))) {
		xdg_reset(e->d, 0);	/* what was posted must not stay */
		return rc;
	}
	rc = xdg_send(e->d, e->addr[peer], e->req, (size_t)e->reqlen, 0, 0);
	if (rc < 0 && !send_lost(rc)) {
		e->dirty = true;
		if (k->scheme == XURI_UD)
			xdg_reset(e->d, 0);
		return rc;
	}
	/* not sent by our own host: as if lost on the way; the retransmit
	 * timer covers it (a peer that never answers is given up by time) */
	if (rc < 0 && rc != -EAGAIN)
		q->st.send_errors++;
	e->busy = true;
	e->peer = peer;
	e->tag = tag;
	q->inflight++;
	q->st.requests++;
	q->st.pages_requested += (uint32_t)taken;
	return taken;
}

uint32_t ibc_req_inflight(const struct ibc_req *q)
{
	return q->inflight;
}

/* The request is over: its record, and the endpoint made fit for reuse. */
static void finish(struct ibc_req *q, struct ent *e, struct ibc_done *d)
{
	struct ibc_rq *r = &e->rq;
	struct peer *p = &q->peers[e->peer];

	memset(d, 0, sizeof(*d));
	d->tag = e->tag;
	d->peer = e->peer;
	d->mtu = e->mtu;
	d->taken = r->req.npage;
	d->reply_pages = ibc_rq_reply_pages(r);
	d->err = r->err;
	/* r->ra.res is valid once segment 0 is in */
	d->answered = r->ra.known && (r->ra.segmap[0] & 1);
	d->has_size = d->answered && r->ra.res.has_size;
	d->size = d->has_size ? r->ra.res.size : 0;
	for (uint32_t i = 0; i < d->taken; i++)
		if (ibc_rq_page_ok(r, i)) {
			d->ok[i / 64] |= 1ull << (i % 64);
			d->nok++;
		}
	q->st.pages_received += d->nok;
	q->st.retries += r->retries;
	q->st.fast_resends += r->fast_resends;
	q->st.segments_asked += r->asked;
	q->st.credits += r->credits;
	q->st.rejected += r->ra.rejected;
	if (r->state == IBC_RQ_DONE) {
		q->st.pages_sent += d->reply_pages;
		if (r->err)
			q->st.errors++;
		else if (d->reply_pages < d->taken)
			q->st.short_replies++;
	} else if (r->err == -ETIMEDOUT) {
		q->st.reaped++;
	} else {
		q->st.refused++;
	}
	if (r->t_first) {
		uint64_t rtt = r->t_first - r->t_start;

		xhist_add(&q->st.rtt, rtt);
		p->srtt = p->srtt ? (7 * p->srtt + rtt) / 8 : rtt;
	}
	if (!ibc_rq_clean(r)) {
		if (e->k->scheme == XURI_UD) {
			/* now, not at the next use: WRs still posted point into
			 * pages the caller is about to fill from elsewhere */
			xdg_reset(e->d, new_qkey(q));
			q->st.resets++;
		} else {
			e->dirty = true;
		}
	}
	e->busy = false;
	q->inflight--;
}

static void on_wc(struct ibc_req *q, struct ent *e, const struct xdg_wc *w, uint64_t now)
{
	struct ibc_rq_out out = { 0 };

	if (w->op != XDG_OP_RECV)
		return;
	if (!w->status)
		q->peers[e->peer].heard = now;	/* the responder is sending */
	if (!e->busy) {
		e->dirty = true;	/* late datagrams of a finished request */
		return;
	}
	if (w->status) {
		ibc_rq_fail(&e->rq, w->status == -ECONNREFUSED ? -ECONNREFUSED : -EIO, &out);
	} else if (e->k->scheme == XURI_UD) {
		ibc_rq_placed(&e->rq, w->len, e->small + 64, now);
	} else {
		ibc_rq_input(&e->rq, w->data, w->len, now, &out);
	}
	send_out(q, e, &out);
	if (e->rq.state != IBC_RQ_WAIT)
		q->fin[q->nfin++] = e;
}

/* An endpoint in the epoll set only while the requester may sleep on it:
 * a socket nobody waits on takes a datagram without the wake-up path (a
 * lock and the epoll callback on the sender's side of the round trip). */
static void ent_watch(struct ibc_req *q, struct ent *e, bool on)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = e };

	if (e->watched != on &&
	    epoll_ctl(q->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, xdg_fd(e->d), &ev) == 0)
		e->watched = on;
}

/* The segments expected next, each with its scatter list: missing ones
 * from the cursor on (a flow arrives in order), then the holes below it
 * (what was asked for again).  Returns how many. */
static int predict(struct ent *e)
{
	const struct gfcc_layout *l = &e->rq.ra.lay;
	struct gfcc_piece pc[SLOT_SGE];
	struct xdg_sge *g = e->usge;
	uint32_t cursor = e->cursor < l->nseg ? e->cursor : l->nseg;
	uint32_t from = cursor, stop = l->nseg;
	bool wrapped = false;
	int n = 0;

	/* each segment once: two slots on one region would let one datagram
	 * overwrite another's bytes */
	while (n < RX_BATCH) {
		uint32_t s = gfcc_reasm_next_missing(&e->rq.ra, from);
		int np;

		if (s == UINT32_MAX || s >= stop) {
			if (wrapped || !cursor)
				break;
			wrapped = true;	/* then the holes below the cursor */
			from = 0;
			stop = cursor;
			continue;
		}
		np = gfcc_seg_pieces(l, s, GFCC_PFX_DSEG, pc, SLOT_SGE - 1);
		if (np < 0)
			break;
		for (int i = 0; i < np; i++) {
			if (pc[i].kind == GFCC_PC_DSEG)
				g[i] = (struct xdg_sge){ e->hdrs[n], GFCC_DSEG_LEN, NULL };
			else if (pc[i].kind == GFCC_PC_RES)
				g[i] = (struct xdg_sge){ e->res, GFCC_RES_LEN, NULL };
			else
				g[i] = (struct xdg_sge){ e->rq.dst[pc[i].page] + pc[i].off, pc[i].len,
							 NULL };
		}
		/* a datagram longer than the slot (the last, short segment
		 * predicted, another one come) must not be cut */
		if (gfcc_seg_len(l, s) < l->seglen)
			g[np++] = (struct xdg_sge){ e->tail, l->seglen, NULL };
		e->uwr[n] = (struct xdg_rwr){ .sg = g, .nsge = (uint32_t)np, .wr_id = (uint64_t)n };
		e->slot_seg[n++] = s;
		g += np;
		from = s + 1;
	}
	return n;
}

/* Slot k's datagram, gathered from where its list put it. */
static void gather(const struct ent *e, int k, uint8_t *out, uint32_t len)
{
	const struct xdg_rwr *w = &e->uwr[k];

	for (uint32_t j = 0, at = 0; j < w->nsge && at < len; j++) {
		uint32_t c = len - at < w->sg[j].len ? len - at : w->sg[j].len;

		memcpy(out + at, w->sg[j].addr, c);
		at += c;
	}
}

static void poll_placed(struct ibc_req *q, struct ent *e, uint64_t now)
{
	struct xdg_wc wc[RX_BATCH];
	struct ibc_rq_out out;
	int n, late[RX_BATCH], nlate;

	do {
		/* a poll that found nothing leaves the prediction as it was:
		 * a spinning requester asks the socket, and nothing else */
		int slots = e->npred >= 0 ? e->npred : (e->npred = predict(e));
		size_t bytes = 0;
		uint8_t *bounce;

		if (!slots)
			return;
		n = xdg_recv_sg(e->d, e->uwr, slots, wc);
		if (n)
			e->npred = -1;
		nlate = 0;
		for (int k = 0; k < n && e->rq.state == IBC_RQ_WAIT; k++) {
			struct gfcc_dseg h;

			if (wc[k].status == -ECONNREFUSED) {
				ibc_rq_fail(&e->rq, -ECONNREFUSED, &out);
				send_out(q, e, &out);
				break;
			}
			if (!wc[k].status)
				q->peers[e->peer].heard = now;
			/* in its expected place, or not ours at all: taken (or
			 * counted) as it lies */
			if (wc[k].status || gfcc_dseg_decode(e->hdrs[k], wc[k].len, &h) ||
			    h.seg == e->slot_seg[k] || h.id != e->rq.req.id ||
			    h.qkey != e->rq.req.qkey) {
				if (ibc_rq_input_hdr(&e->rq, e->hdrs[k], wc[k].status ? 0 : wc[k].len,
						     e->res, now, &out) >= 0 &&
				    e->slot_seg[k] + 1 > e->cursor)
					e->cursor = e->slot_seg[k] + 1;
				send_out(q, e, &out);
				continue;
			}
			/* another segment than expected (a loss before it, or a
			 * resend): moved once every datagram of the batch is out
			 * of the way, since it may belong where another landed */
			late[nlate++] = k;
			bytes += wc[k].len;
		}
		if (!nlate || e->rq.state != IBC_RQ_WAIT)
			continue;
		bounce = malloc(bytes);
		if (!bounce)
			continue;	/* lost: asked for again */
		bytes = 0;
		for (int i = 0; i < nlate; i++) {
			gather(e, late[i], bounce + bytes, wc[late[i]].len);
			bytes += wc[late[i]].len;
		}
		bytes = 0;
		for (int i = 0; i < nlate && e->rq.state == IBC_RQ_WAIT; i++) {
			struct gfcc_dseg h;

			gfcc_dseg_decode(bounce + bytes, wc[late[i]].len, &h);
			if (ibc_rq_input(&e->rq, bounce + bytes, wc[late[i]].len, now, &out) >= 0 &&
			    (uint32_t)h.seg + 1 > e->cursor)
				e->cursor = (uint32_t)h.seg + 1;
			send_out(q, e, &out);
			bytes += wc[late[i]].len;
		}
		free(bounce);
	} while (n == RX_BATCH && e->rq.state == IBC_RQ_WAIT);
	if (e->rq.state != IBC_RQ_WAIT)
		q->fin[q->nfin++] = e;
}

static void poll_ent(struct ibc_req *q, struct ent *e, uint64_t now)
{
	struct xdg_wc wc[RX_BATCH];
	int n;

	if (e->placed) {
		poll_placed(q, e, now);
		return;
	}

	do {
		n = xdg_poll(e->d, wc, RX_BATCH);
		for (int i = 0; i < n && e->busy && e->rq.state == IBC_RQ_WAIT; i++)
			on_wc(q, e, &wc[i], now);
		if (!e->busy || e->rq.state != IBC_RQ_WAIT)
			break;
	} while (n == RX_BATCH);
}

/* Timers of the requests in flight; the earliest one left. */
static uint64_t timers(struct ibc_req *q, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	for (int i = 0; i < K_MAX; i++)
		for (uint32_t k = 0; k < q->kinds[i].nent; k++) {
			struct ent *e = q->kinds[i].ents[k];
			uint64_t t;

			if (!e->busy || e->rq.state != IBC_RQ_WAIT)
				continue;
			t = ibc_rq_next_timer(&e->rq, q->peers[e->peer].heard);
			if (t <= now && e->k->scheme == XURI_UDP) {
				/* silence is judged by what the socket holds, not
				 * by when this thread last looked: a requester
				 * descheduled while a reply arrived would
				 * otherwise ask for what it already has */
				poll_ent(q, e, now);
				if (e->rq.state != IBC_RQ_WAIT)
					continue;	/* on q->fin already */
				t = ibc_rq_next_timer(&e->rq, q->peers[e->peer].heard);
			}
			if (t <= now) {
				struct ibc_rq_out out;

				ibc_rq_timer(&e->rq, now, q->peers[e->peer].heard, &out);
				send_out(q, e, &out);
				if (e->rq.state != IBC_RQ_WAIT) {
					q->fin[q->nfin++] = e;
					continue;
				}
				t = ibc_rq_next_timer(&e->rq, q->peers[e->peer].heard);
			}
			if (t < next)
				next = t;
		}
	return next;
}

/* An endpoint with no request on it became readable: what arrived is
 * late, dropped now. */
static void drop_strays(struct ent *e)
{
	struct xdg_wc wc[RX_BATCH];

	if (e->k->scheme == XURI_UDP)
		xdg_reset(e->d, 0);
	else
		while (xdg_poll(e->d, wc, RX_BATCH) == RX_BATCH)
			;
}

int ibc_req_poll(struct ibc_req *q, struct ibc_done *done, int max, uint64_t wait_ns)
{
	uint64_t start = xtime_ns(), now = start;
	bool looked = false;
	struct xspin sp;
	int nd = 0;

	xspin_init(&sp, q->o.spin_ns, start);

	for (;;) {
		struct epoll_event ev[IBC_DEPTH_MAX];
		uint64_t next, until;
		int n, ms = 0;

		while (q->nfin && nd < max)
			finish(q, q->fin[--q->nfin], &done[nd++]);
		if (nd || !q->inflight)
			return nd;
		next = timers(q, now);
		if (q->nfin)
			continue;
		if (looked && now >= start + wait_ns)
			return 0;
		/* spin first: a reply is usually a round trip away */
		until = start + wait_ns < next ? start + wait_ns : next;
		if (!xspin_again(&sp, now, false) && until > now)
			ms = (int)((until - now + XTIME_NS_PER_MS - 1) / XTIME_NS_PER_MS);
		looked = true;
		if (!ms && q->inflight <= 2) {
			/* one or two requests out: asking their endpoints costs
			 * less than asking epoll which one to ask */
			bool got = false;

			for (int i = 0; i < K_MAX; i++)
				for (uint32_t k = 0; k < q->kinds[i].nent; k++) {
					struct ent *e = q->kinds[i].ents[k];
					uint64_t before = e->rq.ra.arrived + e->rq.ra.rejected;

					if (!e->busy || e->rq.state != IBC_RQ_WAIT)
						continue;
					ent_watch(q, e, false);
					poll_ent(q, e, now);
					got |= e->rq.ra.arrived + e->rq.ra.rejected != before ||
					       e->rq.state != IBC_RQ_WAIT;
				}
			now = xtime_ns();
			xspin_again(&sp, now, got);	/* a reply restarts the spin */
			continue;
		}
		for (int i = 0; i < K_MAX; i++)
			for (uint32_t k = 0; k < q->kinds[i].nent; k++)
				ent_watch(q, q->kinds[i].ents[k], true);
		n = epoll_wait(q->epfd, ev, IBC_DEPTH_MAX, ms);
		if (n < 0 && errno != EINTR)
			return -errno;
		now = xtime_ns();
		for (int i = 0; i < n; i++) {
			struct ent *e = ev[i].data.ptr;

			if (e->busy && e->rq.state == IBC_RQ_WAIT)
				poll_ent(q, e, now);
			else
				drop_strays(e);
		}
		if (n > 0)
			xspin_woke(&sp, now, true);
	}
}

void ibc_req_get_stats(const struct ibc_req *q, struct ibc_req_stats *s)
{
	*s = q->st;
}
