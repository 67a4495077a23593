/* rdma:// -- the reliable-connection class (xrc.h) on real RC queue pairs
 * set up through librdmacm.
 *
 * Connection setup is rdma_cm's, unchanged: the caller's private data is
 * the REQ/REP/REJ private data, byte for byte, with no header of ours in
 * front.  That keeps rdma:// wire-compatible with kernel ULPs (RTRS puts
 * its conn_req/conn_rsp at offset 0).  Two
 * consequences, documented in xrc(7)-to-be and relied on by the RTRS code:
 *   - the CM hands private data over padded with zeros to its fixed size
 *     (a REQ carries 56 bytes, a REP 196, a REJ 148 on IB/RoCE), so the
 *     length seen by xrc_req_data() and *replen is that padded size capped
 *     at XRC_PRIV_MAX, not the length the peer passed; protocols carry their
 *     own length or magic (RTRS does);
 *   - queue depths and max_send are not negotiated: both ends must use the
 *     same xrc_opts (SYMMETRIC, as perftest says), or negotiate them in their
 *     own private data.  A SEND bigger than the receiver's posted buffer
 *     fails the connection (receiver -EMSGSIZE, sender -EREMOTEIO).
 *
 * Per connection: its own CM event channel (accepted ids are migrated off
 * the listener's channel), a completion channel, one CQ for both queues and
 * an RC QP with sq_sig_all = 0.  xrc_fd() is an epoll set of the completion
 * channel and the CM channel, so a peer's DISCONNECTED wakes the caller
 * too; xrc_poll() consumes CM events (DISCONNECTED -> XRC_DOWN and
 * rdma_disconnect(), which moves the QP to ERROR so everything outstanding
 * comes back flushed as -ECONNRESET), then polls, re-arms and polls again.
 *
 * Send-queue accounting: ibv wr_id is a sequence number indexing a slot
 * ring; an RC send queue completes in order, so a completion for sequence s
 * frees every slot up to s.  Window binds and invalidations are send-queue
 * work requests too (ibv_bind_mw for type 1, BIND_MW / LOCAL_INV work
 * requests for type 2) and take their slot like any other.  A caller that
 * never asks for completions still gets slots back: every sq_depth/2-th
 * request is signaled
 * internally and its successful completion is not reported.  Receive
 * wr_ids carry bit 63 to tell the queues apart (an error completion's
 * opcode is undefined). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "xprt/rdma_util.h"
#include "core/cc.h"
#include "core/log.h"
#include "core/ring.h"
#include "xprt/xrc_pri.h"
#ifdef XRC_STAMPS
#include "xprt/xrc_stamps.h"
#else
#define stamp_send_begin() ((void)0)
#define stamp_send_end() ((void)0)
#define stamp_receive() ((void)0)
#endif

#define RQ_BIT (1ull << 63)
/* rdma_cm's IB_CM_REJ_CONSUMER_DEFINED: the peer called rdma_reject();
 * other reasons (8: no listener on that port) mean "refused". */
#define REJ_CONSUMER 28
#define RD_ATOMIC_MAX 16
#define HOLD_MAX 16	/* work requests one post may chain */

struct sq_slot {
	uint64_t wr_id;
	uint32_t len;
	uint8_t op;
	bool sig;	/* the caller asked for the completion */
};

struct rconn {
	struct xrc base;
	struct rdma_event_channel *ech;
	struct rdma_cm_id *id;
	struct xrdma_pd *pd;
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct xrdma_waker wk;
	struct sq_slot *sq;		/* xring_cap(sq_depth) slots */
	uint64_t sq_head, sq_tail;
	uint32_t sq_mask, rq_mask;	/* slots - 1 */
	uint32_t unsig, sig_every;
	uint64_t *rq;
	uint64_t rq_head, rq_tail;
	uint64_t up_deadline;	/* accepted, XRC_CONNECTING: ESTABLISHED due by then */
	/* Busy polling must not cost system calls (each costs more than an
	 * empty CQ poll, which stays in user space): the CQ is armed only when
	 * found empty and not armed yet, its events drained only before
	 * re-arming, the CM channel looked at every CM_EVERY_NS, the "more"
	 * eventfd touched only when its state changes. */
	bool armed, events_maybe, more_raised;
	uint64_t cm_ns;
	uint32_t polls;			/* conn_poll calls (CM_POLLS) */
	struct ibv_wc stash;	/* taken by conn_arm's look at the CQ */
	bool stashed;
	struct rwin *wins;	/* type-2 windows bound on this connection */
	/* Send work requests posted with XRC_MORE and not yet handed to the
	 * device: the next post without the flag, xrc_flush(), a poll, an
	 * arming or a bind posts them and itself as one chain (one
	 * ibv_post_send, one doorbell).  Their slots are counted when held;
	 * inline payloads are copied into hinl then. */
	struct ibv_send_wr hwr[HOLD_MAX];
	struct ibv_sge hsge[HOLD_MAX][XRC_MAX_SGE];
	uint8_t *hinl;			/* HOLD_MAX * max_inline bytes */
	unsigned nheld;
};

#define CM_EVERY_NS 1000000ull
#define CM_POLLS 128u

struct rlistener {
	struct xrc_listener base;
	struct rdma_event_channel *ech;
	struct rdma_cm_id *id;		/* NULL while it waits to listen again */
	struct sockaddr_storage addr;	/* what it listens on (the port bound) */
	char name[300];			/* its URI, for the log */
	uint64_t relisten_ns;		/* id NULL: when to try again */
	uint16_t port;
	uint64_t dropped;
};

struct rreq {
	struct xrc_req base;
	struct rdma_event_channel *ech;
	struct rdma_cm_id *id;
	uint8_t initiator_depth, responder_resources;
};

struct rmr {
	struct xrc_mr_base base;
	struct ibv_mr *mr;
	struct xrdma_pd *pd;
	int acc;		/* the ibv access it was registered with */
};

/* A memory window (xrc.h).  Type 2 ones, while bound, sit on the list of
 * the connection they are bound on, where a peer's send-with-invalidate
 * finds them. */
struct rwin {
	struct xrc_win base;
	struct ibv_mw *mw;
	struct xrdma_pd *pd;
	struct rwin *next;
};

static const struct xrc_conn_ops conn_ops;
static const struct xrc_listener_ops listener_ops;
static const struct xrc_dom_ops dom_ops;

/* --- memory ---------------------------------------------------------------- */

static struct xrc_mr *dom_reg(struct xrc_dom *d, void *addr, size_t len, unsigned access,
			      char *err, size_t errlen)
{
	struct xrdma_pd *p = (struct xrdma_pd *)d;
	struct rmr *m = calloc(1, sizeof(*m));
	int acc = 0, mw = p->mw1 || p->mw2 ? IBV_ACCESS_MW_BIND : 0, e;
	bool ro = !(access & (XRC_ACCESS_LOCAL_WRITE | XRC_ACCESS_REMOTE_WRITE));

	if (!m) {
		snprintf(err, errlen, "register: out of memory");
		errno = ENOMEM;
		return NULL;
	}
	if (access & XRC_ACCESS_REMOTE_WRITE)
		acc |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;	/* verbs needs both */
	if (access & XRC_ACCESS_REMOTE_READ)
		acc |= IBV_ACCESS_REMOTE_READ;
	/* Local write is granted whenever possible, so that receives and
	 * reads may land in any region, as on tcp://; read-only memory is
	 * registered without it.  MW_BIND too, where the device has windows,
	 * so that any region can carry one (xrc_win_bind); without it only
	 * if the device refuses it. */
	const int want[4] = { acc | mw | IBV_ACCESS_LOCAL_WRITE, acc | mw,
			      acc | IBV_ACCESS_LOCAL_WRITE, acc };

	for (int i = 0; i < 4 && !m->mr; i++)
		if (!(i % 2 && !ro) && !(i >= 2 && !mw))
			m->mr = ibv_reg_mr(p->pd, addr, len, m->acc = want[i]);
	if (!m->mr) {
		char hint[96] = "";

		e = errno ? errno : ENOMEM;
		xrdma_memlock_hint(e, hint, sizeof(hint));
		snprintf(err, errlen, "register %zu bytes on %s: %s%s", len,
			 ibv_get_device_name(p->ctx->device), strerror(e), hint);
		free(m);
		errno = e;
		return NULL;
	}
	xrdma_pd_ref(p);
	m->pd = p;
	m->base.dom = d;
	m->base.mr = (struct xrc_mr){ .addr = addr, .len = len, .lkey = m->mr->lkey,
				      .rkey = m->mr->rkey, .access = access };
	return &m->base.mr;
}

static void dom_dereg(struct xrc_mr *mr)
{
	struct rmr *m = (struct rmr *)mr;

	/* fails (and leaks) while a window is bound over it: xrc.h says so */
	ibv_dereg_mr(m->mr);
	xrdma_pd_put(m->pd);
	free(m);
}

static struct xrc_win *dom_win_new(struct xrc_dom *d, unsigned flags, char *err, size_t errlen)
{
	struct xrdma_pd *p = (struct xrdma_pd *)d;
	bool t2 = flags & XRC_WIN_TYPE2;
	const char *dev = ibv_get_device_name(p->ctx->device);
	struct rwin *w;
	int e;

	if (!(t2 ? p->mw2 : p->mw1)) {
		snprintf(err, errlen, "%s has no %s memory windows", dev, t2 ? "type-2" : "type-1");
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(w = calloc(1, sizeof(*w)))) {
		snprintf(err, errlen, "window: out of memory");
		errno = ENOMEM;
		return NULL;
	}
	w->mw = ibv_alloc_mw(p->pd, t2 ? IBV_MW_TYPE_2 : IBV_MW_TYPE_1);
	if (!w->mw) {
		e = errno ? errno : ENOMEM;
		snprintf(err, errlen, "%s: ibv_alloc_mw: %s", dev, strerror(e));
		free(w);
		errno = e;
		return NULL;
	}
	xrdma_pd_ref(p);
	w->pd = p;
	w->base = (struct xrc_win){ .dom = d, .flags = flags, .rkey = w->mw->rkey };
	return &w->base;
}

static void win_unlink(struct rwin *w)
{
	struct rconn *c = (struct rconn *)w->base.conn;

	if (c)
		for (struct rwin **pp = &c->wins; *pp; pp = &(*pp)->next)
			if (*pp == w) {
				*pp = w->next;
				break;
			}
	w->base.conn = NULL;
	w->next = NULL;
}

static void dom_win_free(struct xrc_win *xw)
{
	struct rwin *w = (struct rwin *)xw;

	win_unlink(w);
	ibv_dealloc_mw(w->mw);
	xrdma_pd_put(w->pd);
	free(w);
}

static const struct xrc_dom_ops dom_ops = {
	.reg = dom_reg, .dereg = dom_dereg, .win_new = dom_win_new, .win_free = dom_win_free,
};

/* --- connection objects ------------------------------------------------------- */

static struct rconn *conn_new(void)
{
	struct rconn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->base.ops = &conn_ops;
	c->base.scheme = XURI_RDMA;
	c->base.state = XRC_CONNECTING;
	c->wk.ep = c->wk.more = -1;
	return c;
}

static void conn_free(struct rconn *c)
{
	/* Type-2 windows bound here stay bound to a QP that is gone: they
	 * can only be freed now (xrc_win_bind keeps answering -EBUSY). */
	while (c->wins)
		win_unlink(c->wins);
	if (c->id && c->base.state == XRC_UP)
		rdma_disconnect(c->id);
	if (c->qp)
		rdma_destroy_qp(c->id);
	xrdma_cq_destroy(c->cq, c->cch);
	xrdma_waker_fini(&c->wk);
	/* every CM event was acknowledged when read, so this does not block */
	xrdma_cm_destroy(c->id, c->ech);
	xrdma_pd_put(c->pd);
	free(c->sq);
	free(c->rq);
	free(c->hinl);
	free(c);
}

static uint8_t rd_atomic_cap(struct ibv_context *ctx)
{
	struct ibv_device_attr da;
	int cap = RD_ATOMIC_MAX;

	if (!ibv_query_device(ctx, &da)) {
		if (da.max_qp_rd_atom < cap)
			cap = da.max_qp_rd_atom;
		if (da.max_qp_init_rd_atom < cap)
			cap = da.max_qp_init_rd_atom;
	}
	return (uint8_t)cap;
}

/* PD, completion channel, CQ, QP on the id's device; slot rings; waker. */
static int conn_setup(struct rconn *c, const struct xrc_opts *o, const char *what,
		      char *err, size_t errlen)
{
	struct ibv_context *ctx = c->id->verbs;
	struct ibv_qp_init_attr qa;
	struct ibv_device_attr da;
	struct xrc_opts fit = *o;
	uint32_t sge = XRC_MAX_SGE;
	const char *failed;
	int rc;

	/* what the device allows (the kernel's RTRS: min(wr_limit, ...)) */
	if (!ibv_query_device(ctx, &da))
		xrc_opts_fit(&fit, &(struct xrc_dev_caps){ (uint32_t)da.max_qp_wr,
							   (uint32_t)da.max_cqe,
							   (uint32_t)da.max_sge }, &sge);
	o = &fit;
	c->pd = xrdma_pd_get(ctx, err, errlen);
	if (!c->pd)
		return -errno;
	c->pd->dom.ops = &dom_ops;
	rc = xrdma_cq_create(ctx, (int)(o->sq_depth + o->rq_depth + 1), c, &c->cch, &c->cq,
			     &failed);
	if (rc) {
		if (!strcmp(failed, "ibv_create_cq"))	/* with the size a device refused */
			snprintf(err, errlen, "%s: ibv_create_cq(%u): %s", what,
				 o->sq_depth + o->rq_depth + 1, strerror(-rc));
		else
			snprintf(err, errlen, "%s: %s: %s", what, failed, strerror(-rc));
		return rc;
	}
	/* xrdma_cq_create() armed it: its event must be read before the next
	 * arming, or the fd stays readable and a sleeper spins */
	c->armed = c->events_maybe = true;
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = c->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 0;
	qa.cap.max_send_wr = o->sq_depth;
	qa.cap.max_recv_wr = o->rq_depth;
	qa.cap.max_send_sge = sge;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = o->max_inline;
	/* A device refuses a QP whose inline size it cannot do (rxe: above
	 * 512 bytes; some have none): halve until it fits, down to none, and
	 * XRC_INLINE above what was granted fails with -EINVAL. */
	while (rdma_create_qp(c->id, c->pd->pd, &qa)) {
		rc = -errno;
		if (!qa.cap.max_inline_data) {
			snprintf(err, errlen, "%s: rdma_create_qp(sq %u, rq %u): %s", what,
				 o->sq_depth, o->rq_depth, strerror(-rc));
			return rc;
		}
		qa.cap.max_inline_data /= 2;
		if (qa.cap.max_inline_data < 16)
			qa.cap.max_inline_data = 0;
	}
	c->qp = c->id->qp;
	c->base.max_send = o->max_send;
	c->base.sq_depth = o->sq_depth;
	c->base.rq_depth = o->rq_depth;
	c->base.max_sge = sge;
	c->base.max_inline = qa.cap.max_inline_data < o->max_inline ? qa.cap.max_inline_data
								     : o->max_inline;
	c->sig_every = o->sq_depth / 2 ? o->sq_depth / 2 : 1;
	c->sq_mask = xring_cap(o->sq_depth) - 1;
	c->rq_mask = xring_cap(o->rq_depth) - 1;
	c->sq = calloc((size_t)c->sq_mask + 1, sizeof(*c->sq));
	c->rq = calloc((size_t)c->rq_mask + 1, sizeof(*c->rq));
	c->hinl = malloc((size_t)HOLD_MAX * (c->base.max_inline ? c->base.max_inline : 1));
	if (!c->sq || !c->rq || !c->hinl) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = xrdma_waker_init(&c->wk, c->cch->fd, c->ech->fd);
	if (rc)
		goto fail;
	return 0;
fail:
	snprintf(err, errlen, "%s: connection setup: %s", what, strerror(-rc));
	return rc;
}

static void set_peer(struct rconn *c)
{
	xrdma_addr_str(rdma_get_peer_addr(c->id), c->base.peer, sizeof(c->base.peer));
}

static void copy_priv(const struct rdma_cm_event *ev, void *rep, size_t *replen)
{
	size_t n = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;

	if (n > XRC_PRIV_MAX)
		n = XRC_PRIV_MAX;
	if (rep && n)
		memcpy(rep, ev->param.conn.private_data, n);
	if (replen)
		*replen = rep ? n : 0;
}

/* The port space of an address: IB's for an AF_IB one (a gid: address),
 * as the kernel's rtrs, else TCP's. */
static enum rdma_port_space port_space(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_IB ? RDMA_PS_IB : RDMA_PS_TCP;
}

/* A non-blocking event channel and an id on it, for either side.  0, or
 * -errno with err filled and both NULL. */
static int cm_create(struct rdma_event_channel **ech, struct rdma_cm_id **id, void *context,
		     enum rdma_port_space ps, const char *us, char *err, size_t errlen)
{
	const char *failed;
	int rc = xrdma_cm_create(ech, id, context, ps, &failed);

	if (rc)
		snprintf(err, errlen, "%s: %s: %s%s", us, failed, strerror(-rc),
			 strcmp(failed, "rdma_create_event_channel") ? ""
			 : " (is rdma_ucm loaded?)");
	return rc;
}

/* --- active side ---------------------------------------------------------------- */

static struct xrc *rdma_connect_(const struct xuri *u, const struct xrc_opts *o,
				 const void *priv, size_t privlen, void *rep, size_t *replen,
				 char *err, size_t errlen)
{
	uint64_t deadline = xrdma_now_ns() + o->timeout_ns;
	struct rdma_conn_param cp;
	struct sockaddr_storage dst, src;
	struct rdma_cm_event *ev;
	struct rconn *c;
	char us[300];
	int rc;

	if (replen)
		*replen = 0;
	if (xrdma_prepare(u, false, &dst, us, sizeof(us), err, errlen))
		return NULL;
	c = conn_new();
	if (!c) {
		snprintf(err, errlen, "%s: out of memory", us);
		errno = ENOMEM;
		return NULL;
	}
	rc = cm_create(&c->ech, &c->id, c, port_space(&dst), us, err, errlen);
	if (rc)
		goto free_conn;
	/* the traffic class must be set before route resolution */
	if (o->tos && rdma_set_option(c->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS,
				      (void *)&o->tos, sizeof(o->tos))) {
		rc = -errno;
		snprintf(err, errlen, "%s: tos %u: %s", us, o->tos, strerror(-rc));
		goto free_conn;
	}
	if (u->src[0]) {	/* SRC@HOST: leave from that address (its device) */
		struct xuri su = { .scheme = u->scheme, .port = 0 };

		snprintf(su.host, sizeof(su.host), "%s", u->src);
		if ((rc = xrdma_sockaddr(&su, true, &src, err, errlen)))
			goto free_conn;
	}
	rc = xrdma_resolve(c->id, u->src[0] ? (struct sockaddr *)&src : NULL,
			   (struct sockaddr *)&dst, deadline, o->cancel_fd, us, err, errlen);
	if (rc)
		goto free_conn;
	rc = conn_setup(c, o, us, err, errlen);
	if (rc)
		goto free_conn;
	memset(&cp, 0, sizeof(cp));
	cp.private_data = priv;
	cp.private_data_len = (uint8_t)privlen;
	cp.responder_resources = cp.initiator_depth = rd_atomic_cap(c->id->verbs);
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;	/* 7 = retry forever while the peer has no receive posted */
	if (rdma_connect(c->id, &cp)) {
		rc = -errno;
		snprintf(err, errlen, "%s: rdma_connect: %s", us, strerror(-rc));
		goto free_conn;
	}
	rc = xrdma_next_event(c->ech, deadline, o->cancel_fd, &ev);
	if (rc) {
		snprintf(err, errlen, "%s: %s", us, rc == -ETIMEDOUT ? "timed out" : strerror(-rc));
		goto free_conn;
	}
	switch (ev->event) {
	case RDMA_CM_EVENT_ESTABLISHED:
		copy_priv(ev, rep, replen);
		rdma_ack_cm_event(ev);
		c->base.state = XRC_UP;
		set_peer(c);
		return &c->base;
	case RDMA_CM_EVENT_REJECTED:
		if (ev->status == REJ_CONSUMER) {
			copy_priv(ev, rep, replen);
			snprintf(err, errlen, "%s: rejected by peer", us);
		} else {
			snprintf(err, errlen, "%s: connection refused", us);
		}
		rc = -ECONNREFUSED;
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
		rc = ev->status == -ETIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH;
		snprintf(err, errlen, "%s: %s", us,
			 rc == -ETIMEDOUT ? "timed out" : "unreachable");
		break;
	default:
		rc = -ECONNABORTED;
		snprintf(err, errlen, "%s: %s", us, rdma_event_str(ev->event));
		break;
	}
	rdma_ack_cm_event(ev);
free_conn:
	conn_free(c);
	errno = -rc;
	return NULL;
}

/* --- passive side --------------------------------------------------------------- */

/* A listening id on l->ech for *ss: 0, or -errno with err filled. */
static int listen_id(struct rlistener *l, const struct sockaddr_storage *ss, char *err,
		     size_t errlen)
{
	struct rdma_cm_id *id;
	int rc;

	if (rdma_create_id(l->ech, &id, l, port_space(ss))) {
		rc = -errno;
		snprintf(err, errlen, "%s: rdma_create_id: %s", l->name, strerror(-rc));
		return rc;
	}
	if (ss->ss_family == AF_INET6) {
		/* [::] takes IPv4 clients too (the kernel's rtrs-server
		 * listens on the IPv6 wildcard for both) */
		int afonly = 0;

		rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &afonly, sizeof(afonly));
	}
	if (rdma_bind_addr(id, (struct sockaddr *)ss)) {
		rc = -errno;
		snprintf(err, errlen, "%s: bind: %s", l->name, strerror(-rc));
		rdma_destroy_id(id);
		return rc;
	}
	if (rdma_listen(id, 128)) {
		rc = -errno;
		snprintf(err, errlen, "%s: listen: %s", l->name, strerror(-rc));
		rdma_destroy_id(id);
		return rc;
	}
	l->id = id;
	return 0;
}

static struct xrc_listener *rdma_listen_(const struct xuri *u, const struct xrc_opts *o,
					 char *err, size_t errlen)
{
	struct rlistener *l;
	struct sockaddr_storage ss;
	char us[300];
	int rc;

	if (xrdma_prepare(u, true, &ss, us, sizeof(us), err, errlen))
		return NULL;
	l = calloc(1, sizeof(*l));
	if (!l) {
		snprintf(err, errlen, "%s: out of memory", us);
		errno = ENOMEM;
		return NULL;
	}
	l->base.ops = &listener_ops;
	l->base.scheme = XURI_RDMA;
	snprintf(l->name, sizeof(l->name), "%s", us);
	l->ech = xrdma_channel_create();
	if (!l->ech) {
		rc = -(errno ? errno : ENOMEM);
		snprintf(err, errlen, "%s: rdma_create_event_channel: %s (is rdma_ucm loaded?)", us,
			 strerror(-rc));
		goto free_listener;
	}
	rc = listen_id(l, &ss, err, errlen);
	if (rc)
		goto destroy;
	l->port = ntohs(rdma_get_src_port(l->id));
	/* a listen again takes the same port (port 0 picked one) */
	l->addr = ss;
	if (ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&l->addr)->sin6_port = htons(l->port);
	else if (ss.ss_family == AF_IB)
		((struct sockaddr_ib *)&l->addr)->sib_sid = htobe64(RDMA_IB_PS_IB | l->port);
	else
		((struct sockaddr_in *)&l->addr)->sin_port = htons(l->port);
	return &l->base;

destroy:
	xrdma_cm_destroy(NULL, l->ech);
free_listener:
	free(l);
	errno = -rc;
	return NULL;
}

/* The listening id's device went away (DEVICE_REMOVAL), or its address
 * moved (ADDR_CHANGE): the id is no use any more.  The listener lets it go
 * and listens again on the same address and port, now or, while that
 * fails (the device or address not back yet), once a second: the server
 * keeps serving its other listeners and connections meanwhile. */
static void relisten(struct rlistener *l, const char *why)
{
	char err[400];
	uint64_t now = xrdma_now_ns();

	if (why) {
		xlog_warn("%s: %s: listening again once it can", l->name, why);
		rdma_destroy_id(l->id);
		l->id = NULL;
	} else if (now < l->relisten_ns) {
		return;
	}
	if (listen_id(l, &l->addr, err, sizeof(err)) == 0) {
		xlog_info("%s: listening again", l->name);
		return;
	}
	if (why)	/* the first try; the next ones fail the same way */
		xlog_info("%s", err);
	l->relisten_ns = now + 1000000000ull;
}

static void listener_close(struct xrc_listener *xl)
{
	struct rlistener *l = (struct rlistener *)xl;

	xrdma_cm_destroy(l->id, l->ech);	/* id NULL ok */
	free(l);
}

static int listener_fd(const struct xrc_listener *xl)
{
	return ((const struct rlistener *)xl)->ech->fd;
}

static uint16_t listener_port(const struct xrc_listener *xl)
{
	return ((const struct rlistener *)xl)->port;
}

static void drop_request(struct rlistener *l, struct rdma_cm_id *id)
{
	rdma_reject(id, NULL, 0);
	rdma_destroy_id(id);
	l->dropped++;
}

static struct xrc_req *listener_get(struct xrc_listener *xl, char *err, size_t errlen)
{
	struct rlistener *l = (struct rlistener *)xl;
	struct rdma_cm_event *ev;

	if (!l->id)
		relisten(l, NULL);
	for (;;) {
		if (rdma_get_cm_event(l->ech, &ev)) {
			int e = errno;

			if (e != EAGAIN && e != EWOULDBLOCK && e != EINTR)
				snprintf(err, errlen, "listener: rdma_get_cm_event: %s", strerror(e));
			errno = e == EINTR ? EAGAIN : e;
			return NULL;
		}
		if ((ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL ||
		     ev->event == RDMA_CM_EVENT_ADDR_CHANGE) && ev->id == l->id) {
			const char *why = ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL ?
				"the RDMA device went away" : "the address moved";

			rdma_ack_cm_event(ev);
			relisten(l, why);
			continue;
		}
		if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
			rdma_ack_cm_event(ev);
			continue;
		}
		struct rreq *r = calloc(1, sizeof(*r));
		struct rdma_cm_id *id = ev->id;

		if (!r) {
			rdma_ack_cm_event(ev);
			drop_request(l, id);
			continue;
		}
		r->base.ops = &listener_ops;
		r->id = id;
		copy_priv(ev, r->base.priv, &r->base.privlen);
		r->initiator_depth = ev->param.conn.initiator_depth;
		r->responder_resources = ev->param.conn.responder_resources;
		xrdma_addr_str(rdma_get_peer_addr(id), r->base.peer, sizeof(r->base.peer));
		xrdma_addr_str(rdma_get_local_addr(id), r->base.local, sizeof(r->base.local));
		rdma_ack_cm_event(ev);
		/* The request's later events (ESTABLISHED, DISCONNECTED) go to
		 * a channel of its own, so the listener never sees them and
		 * the connection can wait for them alone.  rdma_migrate_id()
		 * needs the event above acknowledged first. */
		r->ech = xrdma_channel_create();
		if (!r->ech || rdma_migrate_id(id, r->ech)) {
			xrdma_cm_destroy(NULL, r->ech);
			free(r);
			drop_request(l, id);
			continue;
		}
		id->context = r;
		return &r->base;
	}
}

static void req_free(struct rreq *r)
{
	xrdma_cm_destroy(r->id, r->ech);
	free(r);
}

static void req_reject(struct xrc_req *xr, const void *priv, size_t privlen)
{
	struct rreq *r = (struct rreq *)xr;

	rdma_reject(r->id, priv, (uint8_t)privlen);
	req_free(r);
}

static struct xrc *req_accept(struct xrc_req *xr, const void *priv, size_t privlen,
			      const struct xrc_opts *o, char *err, size_t errlen)
{
	struct rreq *r = (struct rreq *)xr;
	uint64_t deadline = xrdma_now_ns() + o->timeout_ns;
	struct rdma_conn_param cp;

	struct rconn *c = conn_new();
	char what[96];
	uint8_t cap, peer_init, peer_resp;
	int rc;

	snprintf(what, sizeof(what), "accept %s", r->base.peer);
	if (!c) {
		snprintf(err, errlen, "%s: out of memory", what);
		req_reject(xr, NULL, 0);
		errno = ENOMEM;
		return NULL;
	}
	peer_init = r->initiator_depth;
	peer_resp = r->responder_resources;
	/* the connection takes over the request's id and channel */
	c->id = r->id;
	c->ech = r->ech;
	c->id->context = c;
	free(r);
	rc = conn_setup(c, o, what, err, errlen);
	if (rc) {
		rdma_reject(c->id, NULL, 0);
		goto free_conn;
	}
	cap = rd_atomic_cap(c->id->verbs);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = priv;
	cp.private_data_len = (uint8_t)privlen;
	/* our responder resources serve the peer's initiator depth and the
	 * other way round, each within what the device can do */
	cp.responder_resources = peer_init < cap ? peer_init : cap;
	cp.initiator_depth = peer_resp < cap ? peer_resp : cap;
	cp.rnr_retry_count = 7;
	if (rdma_accept(c->id, &cp)) {
		rc = -errno;
		snprintf(err, errlen, "%s: rdma_accept: %s", what, strerror(-rc));
		goto free_conn;
	}
	/* Not waiting for ESTABLISHED here: a client that sends a request and
	 * never completes the handshake must not hold up a server serving
	 * others.  xrc_poll() turns the connection XRC_UP on the event, or
	 * XRC_DOWN when the peer gives up or the deadline passes. */
	c->base.state = XRC_CONNECTING;
	c->up_deadline = deadline;
	set_peer(c);
	return &c->base;

free_conn:
	conn_free(c);
	errno = -rc;
	return NULL;
}

static bool listener_waiting(const struct xrc_listener *xl)
{
	return !((const struct rlistener *)xl)->id;
}

static int req_windows(const struct xrc_req *xr, unsigned flags, char *err, size_t errlen)
{
	const struct rreq *r = (const struct rreq *)xr;
	bool t2 = flags & XRC_WIN_TYPE2;
	struct ibv_device_attr da;

	if (!r->id->verbs || ibv_query_device(r->id->verbs, &da))
		return 0;	/* xrc_win_new() will say */
	if (da.device_cap_flags & (t2 ? IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B
				      : IBV_DEVICE_MEM_WINDOW))
		return 0;
	snprintf(err, errlen, "%s has no %s memory windows",
		 ibv_get_device_name(r->id->verbs->device), t2 ? "type-2" : "type-1");
	return -EOPNOTSUPP;
}

static const struct xrc_listener_ops listener_ops = {
	.close = listener_close,
	.fd = listener_fd,
	.port = listener_port,
	.get_request = listener_get,
	.accept = req_accept,
	.reject = req_reject,
	.windows = req_windows,
	.waiting = listener_waiting,
};

/* --- data path ------------------------------------------------------------------ */

static int sq_flush(struct rconn *c);

static void go_down(struct rconn *c)
{
	if (c->base.state == XRC_DOWN)
		return;
	/* held requests go too, to be flushed with the rest: a caller may
	 * wait for every post's completion (a refusal went down already) */
	sq_flush(c);
	if (c->base.state == XRC_DOWN)
		return;
	c->base.state = XRC_DOWN;
	/* moves the QP to ERROR (every outstanding request flushes) and tells
	 * the peer, which then sees DISCONNECTED */
	rdma_disconnect(c->id);
}

static int build_sge(const struct rconn *c, const struct xrc_sge *sg, int nsg, bool inl,
			  struct ibv_sge *out, uint32_t *total)
{
	uint32_t t = 0;

	for (int i = 0; i < nsg; i++) {
		const struct xrc_mr *mr = sg[i].mr;

		if (mr) {
			const struct xrc_mr_base *b = (const struct xrc_mr_base *)mr;
			uintptr_t a = (uintptr_t)sg[i].addr, lo = (uintptr_t)mr->addr;

			if (b->dom != &c->pd->dom || a < lo || a - lo > mr->len ||
			    sg[i].len > mr->len - (a - lo))
				return -EINVAL;
		} else if (!inl && sg[i].len) {
			return -EINVAL;
		}
		out[i].addr = (uintptr_t)sg[i].addr;
		out[i].length = sg[i].len;
		out[i].lkey = mr ? mr->lkey : 0;
		t += sg[i].len;
	}
	*total = t;
	return 0;
}

/* Fills the next send-queue slot for a work request about to be posted:
 * its ibv wr_id is the returned sequence number, its send flags come back
 * in *send_flags (SIGNALED when the caller asked, or as the internal
 * every-sig_every-th signal that recycles unsignaled slots).  The post
 * counts only once sq_posted() says it went in. */
XINLINE int sq_claim(struct rconn *c, unsigned flags, enum xrc_op op, uint64_t wr_id,
		     uint32_t len, uint64_t *seq, unsigned *send_flags)
{
	bool sig = (flags & XRC_SIGNALED) || c->unsig + 1 >= c->sig_every;

	*seq = c->sq_head;
	if (*seq - c->sq_tail >= c->base.sq_depth)
		return -ENOBUFS;
	c->sq[*seq & c->sq_mask] = (struct sq_slot){ .wr_id = wr_id, .len = len,
							   .op = (uint8_t)op,
							   .sig = flags & XRC_SIGNALED };
	*send_flags = (sig ? IBV_SEND_SIGNALED : 0) | (flags & XRC_FENCE ? IBV_SEND_FENCE : 0);
	return 0;
}

XINLINE void sq_posted(struct rconn *c, unsigned send_flags)
{
	c->sq_head++;
	c->unsig = send_flags & IBV_SEND_SIGNALED ? 0 : c->unsig + 1;
}

/* errno of a failed post: a full queue is -ENOBUFS as documented */
static int post_errno(int e)
{
	e = e ? e : ENOMEM;
	return e == ENOMEM ? -ENOBUFS : -e;
}

/* One ibv_post_send of the held chain followed by wr (NULL: the chain
 * alone).  On a refusal the held requests from the refused one on never
 * reached the device, though their posts returned 0: their slots are given
 * back and the connection goes down (what did go flushes), so nobody waits
 * for completions that cannot come; the error is returned to whichever
 * post or flush rang. */
static int sq_ring(struct rconn *c, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *first = wr, *bad = NULL;
	unsigned n = c->nheld;

	if (n) {
		c->hwr[n - 1].next = wr;
		first = &c->hwr[0];
		c->nheld = 0;
	}
	if (!first)
		return 0;
	stamp_send_begin();
	int e = xrdma_post_err(ibv_post_send(c->qp, first, &bad));

	if (e) {
		if (n && bad >= &c->hwr[0] && bad < &c->hwr[n]) {
			c->sq_head -= (uint64_t)(&c->hwr[n] - bad);
			go_down(c);
		}
		return post_errno(e);
	}
	stamp_send_end();
	return 0;
}

/* Keeps wr (and its gather list, and an inline payload) to go with the
 * next post. */
static void sq_hold(struct rconn *c, const struct ibv_send_wr *wr)
{
	unsigned i = c->nheld++;
	struct ibv_send_wr *h = &c->hwr[i];
	struct ibv_sge *sg = c->hsge[i];

	*h = *wr;
	h->next = NULL;
	if (i)
		c->hwr[i - 1].next = h;
	h->sg_list = sg;
	if (wr->send_flags & IBV_SEND_INLINE) {
		uint8_t *b = c->hinl + (size_t)i * c->base.max_inline;
		uint32_t off = 0;

		for (int k = 0; k < wr->num_sge; k++) {
			memcpy(b + off, (const void *)(uintptr_t)wr->sg_list[k].addr,
			       wr->sg_list[k].length);
			off += wr->sg_list[k].length;
		}
		sg[0] = (struct ibv_sge){ (uintptr_t)b, off, 0 };
		h->num_sge = off ? 1 : 0;
	} else {
		memcpy(sg, wr->sg_list, sizeof(*sg) * (size_t)wr->num_sge);
	}
}

XINLINE int post_sq(struct rconn *c, struct ibv_send_wr *wr, unsigned flags, enum xrc_op op,
		    uint64_t wr_id, uint32_t len)
{
	unsigned sf;
	uint64_t seq;
	int rc = sq_claim(c, flags, op, wr_id, len, &seq, &sf);

	if (rc) {
		sq_flush(c);	/* what is held must reach the device to free room */
		return rc;
	}
	wr->wr_id = seq;
	wr->send_flags |= sf;
	if ((flags & XRC_MORE) && c->nheld < HOLD_MAX - 1) {
		sq_hold(c, wr);
		sq_posted(c, sf);
		return 0;
	}
	rc = sq_ring(c, wr);
	if (rc)
		return rc;
	sq_posted(c, sf);
	return 0;
}

/* The held chain out now, before a post that does not join it (a bind)
 * or a sleep. */
static int sq_flush(struct rconn *c)
{
	return c->nheld ? sq_ring(c, NULL) : 0;
}

static int conn_flush(struct xrc *xc)
{
	return sq_flush((struct rconn *)xc);
}

/* Gathers sg into wr (opcode and remote address set by the caller), posts
 * it on the send queue and counts it. */
static int post_sg(struct rconn *c, struct ibv_send_wr *wr, const struct xrc_sge *sg, int nsg,
		   unsigned flags, enum xrc_op op, uint64_t wr_id)
{
	struct ibv_sge sge[XRC_MAX_SGE];
	/* a READ lands in local memory: it has nothing to send inline */
	bool inl = op != XRC_OP_READ && (flags & XRC_INLINE);
	uint32_t len;
	int rc = build_sge(c, sg, nsg, inl, sge, &len);

	if (rc)
		return rc;
	wr->sg_list = sge;
	wr->num_sge = nsg;
	if (inl)
		wr->send_flags = IBV_SEND_INLINE;
	rc = post_sq(c, wr, flags, op, wr_id, len);
	if (rc)
		return rc;
	if (op == XRC_OP_READ) {
		c->base.stats.reads++;
		c->base.stats.rx_bytes += len;
		return 0;
	}
	if (op == XRC_OP_SEND)
		c->base.stats.sends++;
	else
		c->base.stats.writes++;
	c->base.stats.tx_bytes += len;
	return 0;
}

static int conn_post_send(struct xrc *xc, const struct xrc_sge *sg, int nsg, int kind,
			  uint32_t arg, uint64_t wr_id, unsigned flags)
{
	struct ibv_send_wr wr = {
		.opcode = kind == SEND_IMM ? IBV_WR_SEND_WITH_IMM :
			  kind == SEND_INV ? IBV_WR_SEND_WITH_INV : IBV_WR_SEND,
	};

	if (kind == SEND_IMM)
		wr.imm_data = htonl(arg);
	else if (kind == SEND_INV)
		wr.invalidate_rkey = arg;	/* host order, unlike imm_data */

	return post_sg((struct rconn *)xc, &wr, sg, nsg, flags, XRC_OP_SEND, wr_id);
}

/* xrc_send_inline(): no regions to check, the two pieces go as they are. */
static int conn_send_inline(struct xrc *xc, const void *hdr, uint32_t hlen,
				 const void *data, uint32_t dlen, uint64_t wr_id, unsigned flags)
{
	struct rconn *c = (struct rconn *)xc;
	struct ibv_sge sge[2] = { { (uintptr_t)hdr, hlen, 0 }, { (uintptr_t)data, dlen, 0 } };
	struct ibv_send_wr wr = { .sg_list = sge, .num_sge = dlen ? 2 : 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_INLINE };
	int rc = post_sq(c, &wr, flags, XRC_OP_SEND, wr_id, hlen + dlen);

	if (rc)
		return rc;
	c->base.stats.sends++;
	c->base.stats.tx_bytes += hlen + dlen;
	return 0;
}

static int conn_post_write(struct xrc *xc, const struct xrc_sge *sg, int nsg, uint64_t raddr,
			   uint32_t rkey, bool with_imm, uint32_t imm, uint64_t wr_id,
			   unsigned flags)
{
	struct ibv_send_wr wr = {
		.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
		.imm_data = htonl(imm),
		.wr.rdma = { .remote_addr = raddr, .rkey = rkey },
	};

	return post_sg((struct rconn *)xc, &wr, sg, nsg, flags, XRC_OP_WRITE, wr_id);
}

static int conn_post_read(struct xrc *xc, const struct xrc_sge *sg, int nsg, uint64_t raddr,
			  uint32_t rkey, uint64_t wr_id, unsigned flags)
{
	struct ibv_send_wr wr = {
		.opcode = IBV_WR_RDMA_READ,
		.wr.rdma = { .remote_addr = raddr, .rkey = rkey },
	};

	return post_sg((struct rconn *)xc, &wr, sg, nsg, flags, XRC_OP_READ, wr_id);
}

/* Receives as one chain of work requests (one post, one doorbell).  Each
 * buffer is checked in turn: the first bad one (-EINVAL) or the first with
 * no room left in the queue (-ENOBUFS) ends the chain there, and a
 * work request the provider refuses ends it too; the ones before it are
 * posted and counted. */
static int conn_post_recvs(struct xrc *xc, const struct xrc_sge *sg,
				const uint64_t *wr_id, int n)
{
	struct rconn *c = (struct rconn *)xc;
	struct ibv_recv_wr wr[XRC_RECV_BATCH], *bad = NULL;
	struct ibv_sge sge[XRC_RECV_BATCH];
	uint64_t room = c->base.rq_depth - (c->rq_head - c->rq_tail);
	int k, rc = 0;

	if (n > XRC_RECV_BATCH)
		n = XRC_RECV_BATCH;
	for (k = 0; k < n; k++) {
		uint32_t len;

		if (!sg[k].mr && sg[k].len)
			rc = -EINVAL;
		else
			rc = build_sge(c, &sg[k], 1, false, &sge[k], &len);
		if (!rc && (uint64_t)k >= room)
			rc = -ENOBUFS;
		if (rc)
			break;
		wr[k] = (struct ibv_recv_wr){ .wr_id = RQ_BIT | (c->rq_head + k), .sg_list = &sge[k],
					      .num_sge = 1, .next = &wr[k + 1] };
		c->rq[(c->rq_head + k) & c->rq_mask] = wr_id[k];
	}
	if (!k)
		return rc;
	wr[k - 1].next = NULL;
	int e = xrdma_post_err(ibv_post_recv(c->qp, wr, &bad));

	if (e) {
		k = bad ? (int)(bad - wr) : 0;
		if (!k)
			return e == ENOMEM ? -ENOBUFS : -e;
	}
	c->rq_head += (uint64_t)k;
	return k;
}

static int conn_post_recv(struct xrc *xc, const struct xrc_sge *sg, uint64_t wr_id)
{
	int rc = conn_post_recvs(xc, sg, &wr_id, 1);

	return rc < 0 ? rc : 0;
}

/* Bind (mr set) or invalidate (mr NULL) a window through c's send queue. */
static int conn_win_bind(struct xrc *xc, struct xrc_win *xw, struct xrc_mr *xmr, void *addr,
			 size_t len, unsigned access, uint64_t wr_id, unsigned flags)
{
	struct rconn *c = (struct rconn *)xc;
	struct rwin *w = (struct rwin *)xw;
	struct rmr *m = (struct rmr *)xmr;
	struct ibv_mw_bind_info bi = { 0 };
	bool t2 = xw->flags & XRC_WIN_TYPE2;
	unsigned sf;
	uint64_t seq;
	int rc;

	if (m) {
		/* what the device would fail the bind (and the QP) for */
		if (!(m->acc & IBV_ACCESS_MW_BIND) ||
		    ((access & XRC_ACCESS_REMOTE_WRITE) && !(m->acc & IBV_ACCESS_LOCAL_WRITE)))
			return -EINVAL;
		bi = (struct ibv_mw_bind_info){ .mr = m->mr, .addr = (uintptr_t)addr,
						.length = len };
		if (access & XRC_ACCESS_REMOTE_WRITE)
			bi.mw_access_flags |= IBV_ACCESS_REMOTE_WRITE;
		if (access & XRC_ACCESS_REMOTE_READ)
			bi.mw_access_flags |= IBV_ACCESS_REMOTE_READ;
	}
	/* in posting order: what is held goes first */
	rc = sq_flush(c);
	if (rc)
		return rc;
	rc = sq_claim(c, flags, XRC_OP_BIND, wr_id, 0, &seq, &sf);
	if (rc)
		return rc;
	if (!t2) {
		/* A zero-length bind is how a type-1 window is invalidated; it
		 * still names a region of the PD (rxe's provider reads it). */
		struct ibv_mw_bind b = { .wr_id = seq, .send_flags = sf, .bind_info = bi };

		if (!m && !(b.bind_info.mr = xrdma_pd_zmr(c->pd)))
			return post_errno(errno);
		rc = xrdma_post_err(ibv_bind_mw(c->qp, w->mw, &b));
		if (rc)
			return post_errno(rc);
		xw->rkey = w->mw->rkey;	/* the provider stepped it at post */
	} else {
		struct ibv_send_wr wr = { .wr_id = seq, .send_flags = sf }, *bad;
		uint32_t key = m ? ibv_inc_rkey(xw->rkey) : xw->rkey;

		if (m) {
			wr.opcode = IBV_WR_BIND_MW;
			wr.bind_mw.mw = w->mw;
			wr.bind_mw.rkey = key;
			wr.bind_mw.bind_info = bi;
		} else {
			wr.opcode = IBV_WR_LOCAL_INV;
			wr.invalidate_rkey = key;
		}
		rc = xrdma_post_err(ibv_post_send(c->qp, &wr, &bad));
		if (rc)
			return post_errno(rc);
		/* For type 2 the consumer keeps the MW's key current (type 1:
		 * the provider does): rxe checks it against its own on the
		 * next bind. */
		w->mw->rkey = xw->rkey = key;
		win_unlink(w);
		if (m) {
			w->base.conn = xc;
			w->next = c->wins;
			c->wins = w;
		}
	}
	xw->valid = m != NULL;
	sq_posted(c, sf);
	return 0;
}

static void conn_cm_events(struct rconn *c)
{
	struct rdma_cm_event *ev;

	while (!rdma_get_cm_event(c->ech, &ev)) {
		switch (ev->event) {
		case RDMA_CM_EVENT_ESTABLISHED:
			rdma_ack_cm_event(ev);
			if (c->base.state == XRC_CONNECTING)
				c->base.state = XRC_UP;
			break;
		case RDMA_CM_EVENT_REJECTED:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_DISCONNECTED:
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
		case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		case RDMA_CM_EVENT_CONNECT_ERROR:
			rdma_ack_cm_event(ev);
			go_down(c);
			break;
		default:
			rdma_ack_cm_event(ev);
			break;
		}
	}
}

/* One work completion -> 0 (hidden) or 1 xrc_wc. */
XINLINE int map_wc(struct rconn *c, const struct ibv_wc *w, struct xrc_wc *o)
{
	int st = xrdma_wc_errno(w->status);

	/* A SEND longer than the posted buffer: mlx5 says LOC_LEN_ERR, rxe
	 * says LOC_QP_OP_ERR (its responder's length check); on a receive
	 * nothing else produces the latter. */
	if ((w->wr_id & RQ_BIT) && w->status == IBV_WC_LOC_QP_OP_ERR)
		st = -EMSGSIZE;

	if (st) {
		if (st == -EREMOTEIO)
			c->base.stats.remote_errors++;
		go_down(c);
	}
	*o = (struct xrc_wc){ .status = st };
	if (w->wr_id & RQ_BIT) {
		uint64_t seq = w->wr_id & ~RQ_BIT;

		o->wr_id = c->rq[seq & c->rq_mask];
		c->rq_tail = seq + 1;
		o->op = XRC_OP_RECV;
		if (st)
			return 1;
		if (w->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
			o->op = XRC_OP_RECV_IMM;
		else
			c->base.stats.recvs++;
		o->len = w->byte_len;
		/* imm_data and invalidated_rkey share their bytes */
		o->has_imm = w->wc_flags & IBV_WC_WITH_IMM;
		if (o->has_imm)
			o->imm = ntohl(w->imm_data);
		o->has_inv = (w->wc_flags & IBV_WC_WITH_INV) ||
			     (c->pd->inv_bit2 && w->opcode == IBV_WC_RECV &&
			      (w->wc_flags & IBV_WC_IP_CSUM_OK));
		if (o->has_inv) {
			o->inv_rkey = w->invalidated_rkey;
			/* the device invalidated one of our type-2 windows */
			for (struct rwin *x = c->wins; x; x = x->next)
				if (x->base.rkey == o->inv_rkey) {
					win_unlink(x);
					x->base.valid = false;
					break;
				}
		}
		c->base.stats.rx_bytes += w->byte_len;
		return 1;
	}
	const struct sq_slot *s = &c->sq[w->wr_id & c->sq_mask];

	/* in-order send queue: everything up to this one is done */
	c->sq_tail = w->wr_id + 1;
	if (!st && !s->sig)
		return 0;
	o->wr_id = s->wr_id;
	o->op = (enum xrc_op)s->op;
	o->len = s->len;
	return 1;
}

static int conn_poll(struct xrc *xc, struct xrc_wc *out, int n)
{
	struct rconn *c = (struct rconn *)xc;
	struct ibv_wc wc[32];
	bool more;
	int got = 0;

	/* the CM channel (a read(2)): while connecting at every poll, then
	 * at most every CM_EVERY_NS, the clock looked at every CM_POLLS-th
	 * poll */
	if (c->base.state == XRC_CONNECTING || ++c->polls % CM_POLLS == 0) {
		uint64_t now = xrdma_coarse_ns();

		if (c->base.state == XRC_CONNECTING || now - c->cm_ns >= CM_EVERY_NS) {
			c->cm_ns = now;
			conn_cm_events(c);
			if (c->base.state == XRC_CONNECTING && now > c->up_deadline)
				go_down(c);
		}
	}
	if (c->nheld && c->base.state == XRC_UP)
		sq_flush(c);	/* a refusal: the connection is down */
	if (!n)
		return 0;
	if (c->stashed) {
		c->stashed = false;
		if (c->stash.status == IBV_WC_SUCCESS && (c->stash.opcode & IBV_WC_RECV))
			stamp_receive();
		got += map_wc(c, &c->stash, &out[got]);
	}
	more = false;
	while (got < n) {
		int k = ibv_poll_cq(c->cq, n - got < 32 ? n - got : 32, wc);

		if (k < 0)
			return -EIO;
		if (!k)
			break;
		c->armed = false;	/* what it was armed for has come */
		for (int i = 0; i < k; i++) {
			if (wc[i].status == IBV_WC_SUCCESS && (wc[i].opcode & IBV_WC_RECV))
				stamp_receive();
			got += map_wc(c, &wc[i], &out[got]);
		}
		more = got >= n;
	}
	/* Stopped on a full array: the CQ may hold more, so keep the fd
	 * readable until a poll finds it empty. */
	if (more != c->more_raised) {
		xrdma_waker_more(&c->wk, more);
		c->more_raised = more;
	}
	return got;
}

static int conn_fd(const struct xrc *xc)
{
	return ((const struct rconn *)xc)->wk.ep;
}

static int conn_arm(struct xrc *xc)
{
	struct rconn *c = (struct rconn *)xc;
	int k;

	if (c->nheld && c->base.state == XRC_UP && sq_flush(c))
		return 1;	/* refused: the connection is down, poll */
	if (c->stashed || c->more_raised)
		return 1;
	/* About to sleep: a CM event the throttled look in conn_poll left
	 * unread would keep the fd readable (the system call is paid per
	 * sleep, not per poll). */
	conn_cm_events(c);
	c->cm_ns = xrdma_coarse_ns();
	if (c->armed)
		return 0;
	/* Events of an earlier arming must be read (and acked) before arming
	 * again, or the fd stays readable. */
	if (c->events_maybe)
		xrdma_cq_drain_events(c->cch);
	if (ibv_req_notify_cq(c->cq, 0))
		return -EIO;
	c->armed = c->events_maybe = true;
	/* Look once more: a completion that came between the caller's last
	 * poll and the arming raised no event.  Kept for the next poll. */
	k = ibv_poll_cq(c->cq, 1, &c->stash);
	if (k < 0)
		return -EIO;
	if (k) {
		c->stashed = true;
		c->armed = false;
		return 1;
	}
	return 0;
}

static int conn_wait(struct xrc *xc, uint64_t timeout_ns)
{
	int rc = conn_arm(xc);

	if (rc)
		return rc < 0 ? rc : 1;
	return xrdma_waker_wait(&((struct rconn *)xc)->wk, timeout_ns);
}

static struct xrc_dom *conn_domain(struct xrc *xc)
{
	return &((struct rconn *)xc)->pd->dom;
}

static void conn_close(struct xrc *xc)
{
	conn_free((struct rconn *)xc);
}

static const struct xrc_conn_ops conn_ops = {
	.close = conn_close,
	.post_send = conn_post_send,
	.send_inline = conn_send_inline,
	.post_write = conn_post_write,
	.post_read = conn_post_read,
	.post_recv = conn_post_recv,
	.post_recvs = conn_post_recvs,
	.poll = conn_poll,
	.flush = conn_flush,
	.fd = conn_fd,
	.wait = conn_wait,
	.arm = conn_arm,
	.domain = conn_domain,
	.win_bind = conn_win_bind,
};

const struct xrc_ops xrc_rdma_ops = {
	.name = "rdma",
	.listen = rdma_listen_,
	.connect = rdma_connect_,
};
