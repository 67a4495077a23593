/* xrc.h front: argument checks common to every backend, then dispatch. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "xprt/xrc_pri.h"
#include "core/cc.h"

void xrc_opts_fill(struct xrc_opts *dst, const struct xrc_opts *src)
{
	static const struct xrc_opts zero;

	*dst = src ? *src : zero;
	if (!dst->sq_depth)
		dst->sq_depth = 128;
	if (!dst->rq_depth)
		dst->rq_depth = 128;
	/* ring indices are free-running counters modulo the depth: keep the
	 * depths powers of two so they stay consistent across wrap-around */
	while (dst->sq_depth <= (1u << 30) && (dst->sq_depth & (dst->sq_depth - 1)))
		dst->sq_depth += dst->sq_depth & -dst->sq_depth;
	while (dst->rq_depth <= (1u << 30) && (dst->rq_depth & (dst->rq_depth - 1)))
		dst->rq_depth += dst->rq_depth & -dst->rq_depth;
	if (!dst->max_send)
		dst->max_send = 64 * 1024;
	if (!dst->max_inline)
		dst->max_inline = 64;
	if (!dst->timeout_ns)
		dst->timeout_ns = 5000000000ull;
	if (!dst->burst)
		dst->burst = 4u << 20;
}

static uint32_t floor_pow2(uint32_t x)
{
	return x ? 1u << (31 - __builtin_clz(x)) : 0;
}

bool xrc_opts_fit(struct xrc_opts *o, const struct xrc_dev_caps *d, uint32_t *sge)
{
	uint32_t wr = floor_pow2(d->max_qp_wr);
	bool cut = false;

	if (wr && o->sq_depth > wr) {
		o->sq_depth = wr;
		cut = true;
	}
	if (wr && o->rq_depth > wr) {
		o->rq_depth = wr;
		cut = true;
	}
	while (d->max_cqe && (uint64_t)o->sq_depth + o->rq_depth + 1 > d->max_cqe &&
	       (o->sq_depth > 1 || o->rq_depth > 1)) {
		if (o->sq_depth >= o->rq_depth && o->sq_depth > 1)
			o->sq_depth /= 2;
		else
			o->rq_depth /= 2;
		cut = true;
	}
	*sge = XRC_MAX_SGE;
	if (d->max_sge && d->max_sge < *sge) {
		*sge = d->max_sge;
		cut = true;
	}
	return cut;
}

static const struct xrc_ops *backend(const struct xuri *u, char *err, size_t errlen)
{
	switch (u->scheme) {
	case XURI_TCP:
		return &xrc_tcp_ops;
	case XURI_RDMA:
		return &xrc_rdma_ops;
	default:
		snprintf(err, errlen, "%s://: not a reliable-connection transport "
			 "(use tcp:// or rdma://)", xuri_scheme_name(u->scheme));
		errno = EPROTONOSUPPORT;
		return NULL;
	}
}

struct xrc_listener *xrc_listen(const struct xuri *u, const struct xrc_opts *o,
				char *err, size_t errlen)
{
	const struct xrc_ops *b = backend(u, err, errlen);
	struct xrc_opts opts;

	if (!b)
		return NULL;
	xrc_opts_fill(&opts, o);
	return b->listen(u, &opts, err, errlen);
}

int xrc_listener_fd(const struct xrc_listener *l) { return l->ops->fd(l); }
uint16_t xrc_listener_port(const struct xrc_listener *l) { return l->ops->port(l); }

struct xrc_req *xrc_get_request(struct xrc_listener *l, char *err, size_t errlen)
{
	return l->ops->get_request(l, err, errlen);
}

const void *xrc_req_data(const struct xrc_req *r, size_t *len)
{
	*len = r->privlen;
	return r->priv;
}

const char *xrc_req_peer(const struct xrc_req *r) { return r->peer; }
const char *xrc_req_local(const struct xrc_req *r) { return r->local; }

bool xrc_listener_waiting(const struct xrc_listener *l)
{
	return l->ops->waiting && l->ops->waiting(l);
}

uint64_t xrc_listener_dropped(const struct xrc_listener *l)
{
	return l->ops->dropped ? l->ops->dropped(l) : 0;
}

int xrc_req_windows(const struct xrc_req *r, unsigned flags, char *err, size_t errlen)
{
	return r->ops->windows ? r->ops->windows(r, flags, err, errlen) : 0;
}

struct xrc *xrc_accept(struct xrc_req *r, const void *priv, size_t privlen,
		       const struct xrc_opts *o, char *err, size_t errlen)
{
	struct xrc_opts opts;

	if (privlen > XRC_PRIV_MAX) {
		snprintf(err, errlen, "accept: %zu bytes of private data (max %d)",
			 privlen, XRC_PRIV_MAX);
		r->ops->reject(r, NULL, 0);
		errno = EINVAL;
		return NULL;
	}
	xrc_opts_fill(&opts, o);
	return r->ops->accept(r, priv, privlen, &opts, err, errlen);
}

void xrc_reject(struct xrc_req *r, const void *priv, size_t privlen)
{
	if (privlen > XRC_PRIV_MAX)
		privlen = XRC_PRIV_MAX;
	r->ops->reject(r, priv, privlen);
}

void xrc_listener_close(struct xrc_listener *l)
{
	if (l)
		l->ops->close(l);
}

struct xrc *xrc_connect(const struct xuri *u, const struct xrc_opts *o,
			const void *priv, size_t privlen, void *rep, size_t *replen,
			char *err, size_t errlen)
{
	const struct xrc_ops *b = backend(u, err, errlen);
	struct xrc_opts opts;

	if (!b)
		return NULL;
	if (privlen > XRC_PRIV_MAX) {
		snprintf(err, errlen, "connect: %zu bytes of private data (max %d)",
			 privlen, XRC_PRIV_MAX);
		errno = EINVAL;
		return NULL;
	}
	xrc_opts_fill(&opts, o);
	return b->connect(u, &opts, priv, privlen, rep, replen, err, errlen);
}

void xrc_close(struct xrc *c)
{
	if (c)
		c->ops->close(c);
}

void xrc_abort(struct xrc *c)
{
	if (c)
		(c->ops->abort ? c->ops->abort : c->ops->close)(c);
}

XHOT_INLINE enum xrc_state xrc_state(const struct xrc *c) { return c->state; }
enum xuri_scheme xrc_scheme(const struct xrc *c) { return c->scheme; }
const char *xrc_peer(const struct xrc *c) { return c->peer; }
uint32_t xrc_max_send(const struct xrc *c) { return c->max_send; }
uint32_t xrc_sq_depth(const struct xrc *c) { return c->sq_depth; }
uint32_t xrc_rq_depth(const struct xrc *c) { return c->rq_depth; }
uint32_t xrc_max_sge(const struct xrc *c) { return c->max_sge ? c->max_sge : XRC_MAX_SGE; }
XHOT_INLINE uint32_t xrc_max_inline(const struct xrc *c) { return c->max_inline; }
struct xrc_dom *xrc_domain(struct xrc *c) { return c->ops->domain(c); }

struct xrc_mr *xrc_reg(struct xrc_dom *d, void *addr, size_t len, unsigned access,
		       char *err, size_t errlen)
{
	if (!addr || !len) {
		snprintf(err, errlen, "register: empty region");
		errno = EINVAL;
		return NULL;
	}
	return d->ops->reg(d, addr, len, access, err, errlen);
}

void xrc_dereg(struct xrc_mr *mr)
{
	struct xrc_mr_base *b = (struct xrc_mr_base *)mr;

	if (mr)
		b->dom->ops->dereg(mr);
}

static int check_sg(const struct xrc *c, const struct xrc_sge *sg, int nsg, unsigned flags,
		    uint64_t *total)
{
	uint64_t t = 0;

	if (nsg < 0 || (uint32_t)nsg > xrc_max_sge(c) || (nsg && !sg))
		return -EINVAL;
	for (int i = 0; i < nsg; i++) {
		if (sg[i].len && !sg[i].addr)
			return -EINVAL;
		t += sg[i].len;
	}
	if ((flags & XRC_INLINE) && t > c->max_inline)
		return -EINVAL;
	*total = t;
	return 0;
}

static int post_send(struct xrc *c, const struct xrc_sge *sg, int nsg, int kind,
		     uint32_t arg, uint64_t wr_id, unsigned flags)
{
	uint64_t t;
	int rc = check_sg(c, sg, nsg, flags, &t);

	if (rc)
		return rc;
	if (c->state != XRC_UP)
		return -ENOTCONN;
	if (t > c->max_send)
		return -EMSGSIZE;
	return c->ops->post_send(c, sg, nsg, kind, arg, wr_id, flags);
}

int xrc_post_send(struct xrc *c, const struct xrc_sge *sg, int nsg, uint64_t wr_id,
		  unsigned flags)
{
	return post_send(c, sg, nsg, SEND_PLAIN, 0, wr_id, flags);
}

int xrc_post_send_imm(struct xrc *c, const struct xrc_sge *sg, int nsg, uint32_t imm,
		      uint64_t wr_id, unsigned flags)
{
	return post_send(c, sg, nsg, SEND_IMM, imm, wr_id, flags);
}

int xrc_post_send_inv(struct xrc *c, const struct xrc_sge *sg, int nsg, uint32_t inv_rkey,
		      uint64_t wr_id, unsigned flags)
{
	return post_send(c, sg, nsg, SEND_INV, inv_rkey, wr_id, flags);
}

XHOT_INLINE int xrc_send_inline(struct xrc *c, const void *hdr, uint32_t hlen, const void *data,
				uint32_t dlen, uint64_t wr_id, unsigned flags)
{
	uint64_t len = (uint64_t)hlen + dlen;

	if ((hlen && !hdr) || (dlen && !data) || len > c->max_inline ||
	    (flags & ~(unsigned)(XRC_SIGNALED | XRC_MORE)))
		return -EINVAL;
	if (c->state != XRC_UP)
		return -ENOTCONN;
	if (len > c->max_send)
		return -EMSGSIZE;
	if (c->ops->send_inline)
		return c->ops->send_inline(c, hdr, hlen, data, dlen, wr_id, flags);
	struct xrc_sge sg[2] = { { (void *)hdr, hlen, NULL }, { (void *)data, dlen, NULL } };

	return c->ops->post_send(c, sg, dlen ? 2 : 1, SEND_PLAIN, 0, wr_id, flags | XRC_INLINE);
}

/* --- memory windows ------------------------------------------------------ */

struct xrc_win *xrc_win_new(struct xrc_dom *d, unsigned flags, char *err, size_t errlen)
{
	if (flags & ~(unsigned)XRC_WIN_TYPE2) {
		snprintf(err, errlen, "window: unknown flags %#x", flags);
		errno = EINVAL;
		return NULL;
	}
	return d->ops->win_new(d, flags, err, errlen);
}

/* Post-time checks of a bind or invalidate (mr NULL), common to both
 * backends: what a device would only report as a failed bind -- which
 * also kills the connection -- is refused here instead. */
static int win_check(struct xrc *c, const struct xrc_win *w, const struct xrc_mr *mr,
		     const void *addr, size_t len, unsigned access, unsigned flags)
{
	if (!w || (flags & XRC_INLINE) || w->dom != xrc_domain(c))
		return -EINVAL;
	if (mr) {
		uintptr_t a = (uintptr_t)addr, lo = (uintptr_t)mr->addr;

		if (((const struct xrc_mr_base *)mr)->dom != w->dom || !len || a < lo ||
		    a - lo > mr->len || len > mr->len - (a - lo) ||
		    (access & ~(unsigned)(XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ)))
			return -EINVAL;
	}
	if (c->state != XRC_UP)
		return -ENOTCONN;
	/* verbs: a type-2 window binds only from the free state */
	if (mr && (w->flags & XRC_WIN_TYPE2) && w->valid)
		return -EBUSY;
	return 0;
}

int xrc_win_bind(struct xrc *c, struct xrc_win *w, struct xrc_mr *mr, void *addr, size_t len,
		 unsigned access, uint64_t wr_id, unsigned flags)
{
	int rc = mr ? win_check(c, w, mr, addr, len, access, flags) : -EINVAL;

	return rc ? rc : c->ops->win_bind(c, w, mr, addr, len, access, wr_id, flags);
}

int xrc_win_invalidate(struct xrc *c, struct xrc_win *w, uint64_t wr_id, unsigned flags)
{
	int rc = win_check(c, w, NULL, NULL, 0, 0, flags);

	return rc ? rc : c->ops->win_bind(c, w, NULL, NULL, 0, 0, wr_id, flags);
}

uint32_t xrc_win_rkey(const struct xrc_win *w) { return w->rkey; }

void xrc_win_free(struct xrc_win *w)
{
	if (w)
		w->dom->ops->win_free(w);
}

int xrc_post_write(struct xrc *c, const struct xrc_sge *sg, int nsg, uint64_t raddr,
		   uint32_t rkey, bool with_imm, uint32_t imm, uint64_t wr_id,
		   unsigned flags)
{
	uint64_t t;
	int rc = check_sg(c, sg, nsg, flags, &t);

	if (rc)
		return rc;
	if (c->state != XRC_UP)
		return -ENOTCONN;
	if (t > UINT32_MAX)
		return -EMSGSIZE;
	return c->ops->post_write(c, sg, nsg, raddr, rkey, with_imm, imm, wr_id, flags);
}

int xrc_post_read(struct xrc *c, const struct xrc_sge *sg, int nsg, uint64_t raddr,
		  uint32_t rkey, uint64_t wr_id, unsigned flags)
{
	uint64_t t;
	int rc = check_sg(c, sg, nsg, flags & ~XRC_INLINE, &t);

	if (rc)
		return rc;
	if (flags & XRC_INLINE)
		return -EINVAL;
	if (c->state != XRC_UP)
		return -ENOTCONN;
	if (t > UINT32_MAX)
		return -EMSGSIZE;
	return c->ops->post_read(c, sg, nsg, raddr, rkey, wr_id, flags);
}

int xrc_post_recv(struct xrc *c, const struct xrc_sge *sg, uint64_t wr_id)
{
	if (!sg || (sg->len && !sg->addr))
		return -EINVAL;
	if (c->state == XRC_DOWN)
		return -ENOTCONN;
	return c->ops->post_recv(c, sg, wr_id);
}

int xrc_post_recvs(struct xrc *c, const struct xrc_sge *sg, const uint64_t *wr_id, int n)
{
	int i;

	if (n < 0 || (n && (!sg || !wr_id)))
		return -EINVAL;
	for (i = 0; i < n; i++)
		if (sg[i].len && !sg[i].addr)
			return -EINVAL;
	if (c->state == XRC_DOWN)
		return -ENOTCONN;
	if (c->ops->post_recvs)
		return n ? c->ops->post_recvs(c, sg, wr_id, n) : 0;
	for (i = 0; i < n; i++) {
		int rc = c->ops->post_recv(c, &sg[i], wr_id[i]);

		if (rc < 0)
			return i ? i : rc;
	}
	return n;
}

XHOT_INLINE int xrc_poll(struct xrc *c, struct xrc_wc *wc, int n)
{
	if (n < 0 || (n && !wc))
		return -EINVAL;
	return c->ops->poll(c, wc, n);
}

int xrc_flush(struct xrc *c)
{
	if (c->state != XRC_UP)
		return -ENOTCONN;
	return c->ops->flush ? c->ops->flush(c) : 0;
}

int xrc_arm(struct xrc *c)
{
	if (c->state == XRC_DOWN || !c->ops->arm)
		return 0;
	return c->ops->arm(c);
}

bool xrc_ready_hints(struct xrc *c, bool on)
{
	if (!c->ops->ready)
		return false;
	c->ops->ready(c, on ? XRC_HINTS_ON : XRC_HINTS_OFF);
	return true;
}

void xrc_ready(struct xrc *c)
{
	if (c->ops->ready)
		c->ops->ready(c, XRC_READY);
}

bool xrc_tx_pending(const struct xrc *c)
{
	return c->state == XRC_UP && c->ops->tx_pending && c->ops->tx_pending(c);
}

uint64_t xrc_next_timer(const struct xrc *c)
{
	return c->state == XRC_UP && c->ops->next_timer ? c->ops->next_timer(c) : UINT64_MAX;
}

bool xrc_peer_gone(const struct xrc *c)
{
	return c->state == XRC_DOWN || (c->ops->peer_gone && c->ops->peer_gone(c));
}

int xrc_fd(const struct xrc *c) { return c->ops->fd(c); }
int xrc_wait(struct xrc *c, uint64_t timeout_ns) { return c->ops->wait(c, timeout_ns); }

void xrc_get_stats(const struct xrc *c, struct xrc_stats *s) { *s = c->stats; }
