/* RTRS server engine, part 1: listeners, connection requests (the kernel's
 * rtrs_rdma_connect), sessions and paths, the INFO exchange
 * (process_info_req), the loop and teardown.  Requests, responses and
 * heartbeats are in rtrs_srv_io.c.  See rtrs_srv.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/log.h"
#include "core/xtime.h"
#include "rtrs/rtrs_srv_pri.h"

void rtrs_srv_opts_default(struct rtrs_srv_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->queue_depth = RTRS_DEFAULT_QUEUE_DEPTH;
	o->chunk_size = RTRS_DEFAULT_CHUNK_SIZE;
	o->always_invalidate = true;
	o->hb_interval_ms = RTRS_HB_INTERVAL_MS;
	o->hb_missed_max = RTRS_HB_MISSED_MAX;
}

uint32_t srv_chunk_size(const struct rtrs_srv *srv)
{
	return srv->o.chunk_size;
}

const char *rtrs_srv_path_state_str(enum rtrs_srv_path_state st)
{
	switch (st) {
	case RTRS_SRV_CONNECTING:
		return "connecting";
	case RTRS_SRV_CONNECTED:
		return "connected";
	case RTRS_SRV_CLOSING:
		return "closing";
	}
	return "?";
}

struct rtrs_srv *rtrs_srv_new(const struct rtrs_srv_opts *o, const struct rtrs_srv_ops *ops,
			      void *ctx, char *err, size_t errlen)
{
	struct rtrs_srv *srv;

	if (!ops || !ops->rdma_ev) {
		xerr(err, errlen, "no request handler");
		errno = EINVAL;
		return NULL;
	}
	srv = calloc(1, sizeof(*srv));
	if (!srv) {
		xerr(err, errlen, "out of memory");
		return NULL;
	}
	if (o)
		srv->o = *o;
	else
		rtrs_srv_opts_default(&srv->o);
	if (!srv->o.queue_depth)
		srv->o.queue_depth = RTRS_DEFAULT_QUEUE_DEPTH;
	if (!srv->o.chunk_size)
		srv->o.chunk_size = RTRS_DEFAULT_CHUNK_SIZE;
	if (rtrs_check_geometry(srv->o.queue_depth, srv->o.chunk_size) < 0) {
		xerr(err, errlen,
		     "queue depth %u with chunk size %u: not a geometry RTRS can address "
		     "(depth 1..65535, chunk a power of two >= 8192, depth x chunk <= 256 MiB)",
		     srv->o.queue_depth, srv->o.chunk_size);
		free(srv);
		errno = EINVAL;
		return NULL;
	}
	srv->ops = *ops;
	srv->ctx = ctx;
	srv->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (srv->epfd < 0) {
		xerr(err, errlen, "epoll: %s", strerror(errno));
		free(srv);
		return NULL;
	}
	srv->now = xtime_ns();
	return srv;
}

int rtrs_srv_listen(struct rtrs_srv *srv, const struct xuri *u, char *err, size_t errlen)
{
	struct srv_listener *sl;
	struct epoll_event ev = { .events = EPOLLIN };
	struct xrc_opts xo = { .timeout_ns = 5000000000ull };

	if (srv->nlsn >= SRV_MAX_LISTENERS) {
		xerr(err, errlen, "at most %d listeners", SRV_MAX_LISTENERS);
		return -ENOSPC;
	}
	if (u->scheme != XURI_TCP && u->scheme != XURI_RDMA) {
		xerr(err, errlen,
		     "%s://: RTRS runs over rdma:// or tcp://", xuri_scheme_name(u->scheme));
		return -EPROTONOSUPPORT;
	}
	sl = &srv->lsn[srv->nlsn];
	sl->l = xrc_listen(u, &xo, err, errlen);
	if (!sl->l)
		return errno ? -errno : -EIO;
	sl->uri = *u;
	sl->uri.port = xrc_listener_port(sl->l);
	ev.data.u64 = (uint64_t)srv->nlsn << 1 | 1;	/* a connection's is its srv_con */
	sl->ready = true;
	if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, xrc_listener_fd(sl->l), &ev) < 0) {
		int e = errno;

		xerr(err, errlen, "epoll: %s", strerror(e));
		xrc_listener_close(sl->l);
		return -e;
	}
	return (int)srv->nlsn++;
}

unsigned rtrs_srv_listeners(const struct rtrs_srv *srv) { return srv->nlsn; }

const struct xuri *rtrs_srv_listener_uri(const struct rtrs_srv *srv, unsigned idx)
{
	return idx < srv->nlsn ? &srv->lsn[idx].uri : NULL;
}

int rtrs_srv_fd(const struct rtrs_srv *srv) { return srv->epfd; }

/* --- sessions and paths -------------------------------------------------- */

/* The session's chunks in this path's domain: one region for all of them,
 * or with always_invalidate one region and one window per chunk (rxe
 * checks a window's requests against the bounds of the region under it,
 * xrc.h), plus the small control area for INFO_REQ/INFO_RSP.  Under
 * windows a region has no remote access of its own: only the window's
 * key of the moment reaches the chunk (the kernel's rtrs-srv gets the
 * same from fast registration: the chunk's MR key changes per request). */
static int path_mem(struct srv_path *p, struct xrc_dom *d, char *err, size_t errlen)
{
	struct rtrs_srv *srv = p->sess->srv;
	uint32_t qd = srv->o.queue_depth, cs = srv->o.chunk_size;

	p->dom = d;
	p->info_len = RTRS_INFO_RSP_HDR_LEN + RTRS_SG_DESC_LEN * (srv->o.always_invalidate ? qd : 1);
	p->ctl_len = RTRS_INFO_REQ_LEN + p->info_len;
	p->ctl = calloc(1, p->ctl_len);
	if (!p->ctl) {
		xerr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	p->ctl_mr = xrc_reg(d, p->ctl, p->ctl_len, XRC_ACCESS_LOCAL_WRITE, err, errlen);
	if (!p->ctl_mr)
		return -ENOMEM;
	if (!srv->o.always_invalidate) {
		p->chunks_mr = xrc_reg(d, p->sess->chunks, p->sess->chunks_len,
				       XRC_ACCESS_LOCAL_WRITE | XRC_ACCESS_REMOTE_WRITE, err, errlen);
		return p->chunks_mr ? 0 : -ENOMEM;
	}
	p->keys = calloc(qd, sizeof(*p->keys));
	if (!p->keys) {
		xerr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < qd; i++) {
		p->keys[i].mr = xrc_reg(d, p->sess->chunks + (size_t)i * cs, cs,
					XRC_ACCESS_LOCAL_WRITE, err, errlen);
		if (!p->keys[i].mr)
			return -ENOMEM;
		p->keys[i].win = xrc_win_new(d, 0, err, errlen);
		if (!p->keys[i].win)
			return -ENOMEM;
	}
	return 0;
}

/* Connections, windows, registrations: everything that ties the path to
 * the transport.  The path itself stays until its requests are answered. */
static void path_teardown(struct srv_path *p)
{
	struct rtrs_srv *srv = p->sess->srv;
	uint32_t qd = srv->o.queue_depth;

	/* requests waiting for their chunk's bind never reach the layer above:
	 * their chunks are free for a copy on another path */
	for (struct rtrs_srv_op *op = p->bindq; op; op = op->next)
		srv_op_done(op);
	for (struct rtrs_srv_op *op = p->bound; op; op = op->next)
		srv_op_done(op);
	p->bindq = p->bound = NULL;
	p->bindq_tail = &p->bindq;
	p->bound_tail = &p->bound;
	for (unsigned i = 0; i < p->cid_num; i++) {
		struct srv_con *c = p->con[i];

		if (!c)
			continue;
		/* answered requests that waited for room are done with */
		for (struct rtrs_srv_op *op = c->wait; op; op = op->next) {
			op->waiting = false;
			srv_op_done(op);
		}
		epoll_ctl(srv->epfd, EPOLL_CTL_DEL, xrc_fd(c->x), NULL);
		xrc_close(c->x);
		free(c);
		p->con[i] = NULL;
	}
	if (p->keys) {
		for (uint32_t i = 0; i < qd; i++)
			xrc_win_free(p->keys[i].win);
		for (uint32_t i = 0; i < qd; i++)
			xrc_dereg(p->keys[i].mr);
		free(p->keys);
		p->keys = NULL;
	}
	xrc_dereg(p->chunks_mr);
	p->chunks_mr = NULL;
	xrc_dereg(p->ctl_mr);
	p->ctl_mr = NULL;
	free(p->ctl);
	p->ctl = NULL;
	p->cid_up = 0;
}

/* Frees a closing path whose requests are all answered; the session's last
 * established path going takes the session down (rtrs_srv_sess_down, after
 * the kernel's wait for in-flight requests). */
static void path_reap(struct srv_path *p)
{
	struct rtrs_srv_sess *s = p->sess;
	struct rtrs_srv *srv = s->srv;

	if (!p->torn) {
		path_teardown(p);
		p->torn = true;
	}
	if (p->st.inflight)
		return;
	if (srv_path_unlink(p) && srv->ops.sess_ev)
		srv->ops.sess_ev(srv->ctx, s, RTRS_SRV_SESS_DOWN);
}

/* --- connection requests ------------------------------------------------- */

static void reject(struct rtrs_srv *srv, struct xrc_req *rq, int e, const char *why)
{
	struct rtrs_conn_rsp r = { .err = (int16_t)e };
	uint8_t buf[RTRS_CONN_RSP_LEN];

	xlog_info("connection request from %s refused (%s): %s", xrc_req_peer(rq), strerror(-e),
		  why);
	rtrs_conn_rsp_encode(&r, buf);
	xrc_reject(rq, buf, sizeof(buf));
	srv->rejected++;
	srv->reap = true;	/* a session made for it may be left empty */
}

static struct xrc_opts con_opts(const struct rtrs_srv *srv, uint16_t cid, uint32_t info_len)
{
	uint32_t qd = srv->o.queue_depth;
	/* rtrs-srv.c create_con: per request a bind (always_invalidate), the
	 * data write, a send-with-invalidate and the response; plus the
	 * heartbeat and its answer and INFO_RSP.  Receives: one per request
	 * in flight, on connection 0 at least the kernel's 512 for
	 * heartbeats and session messages. */
	struct xrc_opts o = {
		.sq_depth = qd * (srv->o.always_invalidate ? 4 : 3) + 3,
		.rq_depth = cid ? qd + 1 : (qd > RTRS_SERVICE_CON_QUEUE_DEPTH ? qd :
					    RTRS_SERVICE_CON_QUEUE_DEPTH) + 2,
		.max_send = info_len > 65536 ? info_len : 65536,
		.timeout_ns = 30000000000ull,
	};

	return o;
}

/* Posts n receives without memory, or as many as the connection's receive
 * queue still takes where the device allowed a shorter one than asked
 * (the kernel clamps its queues to max_qp_wr the same way). */
static int post_recv_empty(struct srv_con *c, unsigned n, unsigned posted)
{
	struct xrc_sge sg = { NULL, 0, NULL };
	uint32_t room = xrc_rq_depth(c->x);

	if (posted + n > room)
		n = room > posted ? room - posted : 0;
	for (unsigned i = 0; i < n; i++) {
		int rc = xrc_post_recv(c->x, &sg, 0);

		if (rc < 0)
			return rc;
	}
	return 0;
}

static void on_request(struct rtrs_srv *srv, unsigned li, struct xrc_req *rq)
{
	struct rtrs_conn_req cr;
	struct rtrs_conn_rsp rsp = { 0 };
	uint8_t rbuf[RTRS_CONN_RSP_LEN];
	char peer[64], local[64] = "", err[256];
	const char *why;
	struct srv_path *p;
	struct srv_con *c;
	struct xrc_opts xo;
	struct xrc *x;
	size_t len;
	const void *pd = xrc_req_data(rq, &len);
	int rc;

	snprintf(peer, sizeof(peer), "%s", xrc_req_peer(rq));
	/* the address the client connected to: on a wildcard listener the
	 * transport says which (the kernel compares the route's addresses) */
	if (xrc_req_local(rq)[0])
		srv_host_of(xrc_req_local(rq), local, sizeof(local));
	else if (!srv_wildcard(srv->lsn[li].uri.host))
		snprintf(local, sizeof(local), "%s", srv->lsn[li].uri.host);
	/* always_invalidate needs a window per chunk: a device without them
	 * is refused up front, with the reason in the log and for the client */
	if (srv->o.always_invalidate && xrc_req_windows(rq, 0, err, sizeof(err)) < 0) {
		xlog_ratelimited(XLOG_WARN, "%s, which always_invalidate needs: connections over "
				 "it are refused (run the server with always_invalidate off)", err);
		return reject(srv, rq, -EOPNOTSUPP, "no memory windows for always_invalidate");
	}
	rc = srv_admit(srv, li, pd, len, peer, local, &cr, &p, &why);
	if (rc < 0)
		return reject(srv, rq, rc, why);
	rsp.queue_depth = (uint16_t)srv->o.queue_depth;
	rsp.max_hdr_size = RTRS_MAX_HDR_SIZE;
	rsp.max_io_size = srv->o.chunk_size - RTRS_MAX_HDR_SIZE;
	rsp.flags = srv->o.always_invalidate ? RTRS_MSG_NEW_RKEY_F : 0;
	rtrs_conn_rsp_encode(&rsp, rbuf);
	xo = con_opts(srv, cr.cid,
		      RTRS_INFO_RSP_HDR_LEN + RTRS_SG_DESC_LEN *
		      (srv->o.always_invalidate ? srv->o.queue_depth : 1));
	x = xrc_accept(rq, rbuf, sizeof(rbuf), &xo, err, sizeof(err));
	if (!x) {
		xlog_info("accepting %s: %s", peer, err);
		if (!p->cid_up)
			srv_path_close(p, NULL);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		xrc_close(x);
		srv_path_close(p, "out of memory");
		return;
	}
	c->path = p;
	c->x = x;
	c->cid = cr.cid;
	c->sq_cap = xrc_sq_depth(x);
	c->wait_tail = &c->wait;
	srv_con_attached(p, cr.cid, c);
	{
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = c };

		if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, xrc_fd(x), &ev) < 0) {
			srv_path_close(p, "epoll failed");
			return;
		}
		xrc_ready_hints(x, true);	/* srv_ready() passes on the epoll's word */
	}
	if (!p->dom) {
		rc = path_mem(p, xrc_domain(x), err, sizeof(err));
		if (rc < 0) {
			xlog_warn("path %s: registering the session's chunks: %s", peer, err);
			srv_path_close(p, "memory registration failed");
			return;
		}
	} else if (xrc_domain(x) != p->dom) {
		srv_path_close(p, "connections of one path on different devices");
		return;
	}
	if (cr.cid == 0) {
		/* post_recv_info_req: one buffer for INFO_REQ; the rest of
		 * connection 0's receives follow it (post_recv_sess) */
		struct xrc_sge sg = { p->ctl, RTRS_INFO_REQ_LEN, p->ctl_mr };

		rc = xrc_post_recv(x, &sg, 0);
		snprintf(p->peer, sizeof(p->peer), "%s", peer);
	} else {
		/* The kernel posts these at INFO_REQ; posting them now lets a
		 * request that comes too early be seen (and refused) instead of
		 * stalling the stream. */
		rc = post_recv_empty(c, srv->o.queue_depth, 0);
	}
	if (rc < 0)
		srv_path_close(p, "posting receives failed");
}

/* --- the INFO exchange --------------------------------------------------- */

/* INFO_RSP on connection 0, once it is up: with always_invalidate the
 * chunk windows are bound first, on the same send queue, so the keys it
 * announces are live when the client reads them (process_info_req chains
 * its REG_MRs before the send the same way). */
static void info_send(struct srv_path *p)
{
	struct rtrs_srv_sess *s = p->sess;
	struct rtrs_srv *srv = s->srv;
	struct srv_con *c = p->con[0];
	uint32_t qd = srv->o.queue_depth, cs = srv->o.chunk_size, nd;
	struct xrc_sge sg = { p->ctl + RTRS_INFO_REQ_LEN, p->info_len, p->ctl_mr };
	struct rtrs_sg_desc *d;
	int rc;

	if (!c || xrc_state(c->x) != XRC_UP ||
	    c->sq_used + c->sq_unsig + (qd - p->bind_next) + 1 > c->sq_cap)
		return;		/* again from the loop */
	if (srv->o.always_invalidate && p->bind_next < qd && srv_io_bind_all(p) < 0)
		return srv_path_close(p, "binding the chunk windows failed");
	d = calloc(srv->o.always_invalidate ? qd : 1, sizeof(*d));
	if (!d)
		return srv_path_close(p, "out of memory");
	if (srv->o.always_invalidate) {
		for (uint32_t i = 0; i < qd; i++)
			d[i] = (struct rtrs_sg_desc){ (uintptr_t)s->chunks + (uint64_t)i * cs,
						      xrc_win_rkey(p->keys[i].win), cs };
		nd = qd;
	} else {
		d[0] = (struct rtrs_sg_desc){ (uintptr_t)s->chunks, p->chunks_mr->rkey,
					      (uint32_t)s->chunks_len };
		nd = 1;
	}
	rc = rtrs_info_rsp_encode(p->ctl + RTRS_INFO_REQ_LEN, p->info_len, d, (uint16_t)nd);
	free(d);
	if (rc < 0)
		return srv_path_close(p, "INFO_RSP does not fit");
	rc = xrc_post_send(c->x, &sg, 1, WR_ID(WR_INFO, c->sq_unsig + 1), XRC_SIGNALED);
	if (rc < 0)
		return srv_path_close(p, "sending INFO_RSP failed");
	c->sq_used += c->sq_unsig + 1;
	c->sq_unsig = 0;
	p->info_pending = false;
}

void srv_info_req(struct srv_con *c, const void *buf, uint32_t len)
{
	struct srv_path *p = c->path;
	struct rtrs_srv_sess *s = p->sess;
	struct rtrs_srv *srv = s->srv;
	struct rtrs_info_req m;
	const char *why;

	if (srv_info_admit(p, c->cid, buf, len, &m, &why) < 0)
		return srv_path_close(p, why);
	srv_path_up(p, m.pathname, srv->now);
	if (post_recv_empty(c, RTRS_SERVICE_CON_QUEUE_DEPTH, 1) < 0)
		return srv_path_close(p, "posting receives failed");
	p->info_pending = true;
	info_send(p);
	if (p->state != RTRS_SRV_CONNECTED)
		return;
	/* rtrs_srv_sess_up: the first established path brings the session up */
	p->established = true;
	if (++s->paths_up == 1 && srv->ops.sess_ev &&
	    srv->ops.sess_ev(srv->ctx, s, RTRS_SRV_SESS_UP) < 0) {
		/* never up, so no DOWN either */
		p->established = false;
		s->paths_up--;
		srv_path_close(p, "refused by the layer above");
	} else
		xlog_info("path %s of session '%s' connected (%u connections)", p->peer,
			  p->sessname, p->cid_num);
}

/* --- the loop ------------------------------------------------------------ */

/* What has something to read: one epoll_wait for the listeners and every
 * connection, where a poll of each would be a read(2) each over tcp.  The
 * set is level-triggered: what arrives after this shows next round.
 *
 * A connection the client closed (tcp: its FIN or reset, which the
 * socket shows while bytes sent before it still wait unread) closes the
 * path at once, unread bytes and all.  A client closes a path's
 * connections when it gives the path up, and then sends what was in
 * flight on it again on another (rtrs_clt_failover_req), or when it
 * closes the session with nothing in flight: requests still unread here
 * are copies it no longer waits for.  Read now, after their copies were
 * answered, they would run in chunks the client has handed out again. */
static void srv_ready(struct rtrs_srv *srv)
{
	struct epoll_event ev[32];
	int n = epoll_wait(srv->epfd, ev, 32, 0);

	for (int i = 0; i < n; i++) {
		struct srv_con *c = ev[i].data.ptr;

		if (ev[i].data.u64 & 1)
			srv->lsn[ev[i].data.u64 >> 1].ready = true;
		else if (ev[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			srv_path_close(c->path, "connection lost");
		else if (ev[i].events & EPOLLIN)	/* not EPOLLOUT alone */
			xrc_ready(c->x);
	}
	if (n < 32)
		return;
	/* maybe more than were told: everything is read once, but what the
	 * client closed (asked one by one, a poll(2) each) */
	for (unsigned i = 0; i < srv->nlsn; i++)
		srv->lsn[i].ready = true;
	for (struct rtrs_srv_sess *s = srv->sessions; s; s = s->next)
		for (struct srv_path *p = s->paths; p; p = p->next)
			for (unsigned i = 0; i < p->cid_num && p->state != RTRS_SRV_CLOSING; i++) {
				struct srv_con *c = p->con[i];

				if (c && xrc_peer_gone(c->x))
					srv_path_close(p, "connection lost");
				else if (c)
					xrc_ready(c->x);
			}
}

/* Listeners whose fd showed readable; all of them now and then, for the
 * deadlines of half-open connections. */
static int poll_listeners(struct rtrs_srv *srv)
{
	bool all = srv->now - srv->lsn_ns >= SRV_LISTEN_CHECK_NS;
	char err[256];
	int n = 0;

	if (all)
		srv->lsn_ns = srv->now;
	for (unsigned i = 0; i < srv->nlsn; i++) {
		struct xrc_req *rq;

		if (!srv->lsn[i].ready && !all)
			continue;
		srv->lsn[i].ready = false;

		while ((rq = xrc_get_request(srv->lsn[i].l, err, sizeof(err)))) {
			on_request(srv, i, rq);
			n++;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
			xlog_err("listener %u: %s", i, err);
			return -errno;
		}
	}
	return n;
}

/* The held posts of a connection out; 1 when the burst limit left some
 * for later (the fd would not say so: come back before sleeping). */
static int con_flush(struct srv_con *c)
{
	int rc;

	if (!c->held)
		return 0;
	if (c->path->state == RTRS_SRV_CLOSING) {
		c->held = false;
		return 0;
	}
	rc = xrc_flush(c->x);
	c->held = rc > 0;
	return rc > 0;
}

void rtrs_srv_batch(struct rtrs_srv *srv, bool on)
{
	srv->in_poll = on;
	if (on)
		return;
	for (struct rtrs_srv_sess *s = srv->sessions; s; s = s->next)
		for (struct srv_path *p = s->paths; p; p = p->next)
			for (unsigned i = 0; i < p->cid_num; i++)
				if (p->con[i])
					con_flush(p->con[i]);
}

static int poll_con(struct srv_con *c)
{
	struct srv_path *p = c->path;
	struct xrc_wc wc[SRV_WC_BATCH];
	struct xrc_stats st;
	int n, total = 0;

	p->sess->srv->in_poll = true;
	for (int round = 0; round < 8; round++) {
		n = xrc_poll(c->x, wc, SRV_WC_BATCH);
		if (n <= 0)
			break;
		total += n;
		for (int i = 0; i < n && p->state != RTRS_SRV_CLOSING; i++)
			srv_io_wc(c, &wc[i]);
		if (p->state == RTRS_SRV_CLOSING || n < SRV_WC_BATCH)
			break;
	}
	if (p->state == RTRS_SRV_CLOSING)
		goto out;
	if (xrc_state(c->x) == XRC_DOWN) {
		srv_path_close(p, "connection lost");
		total++;
		goto out;
	}
	/* A request under a dead key: over rdma the QP errors out (and we see
	 * XRC_DOWN); tcp refuses it and carries on, so we close the path the
	 * way an RC connection would go down. */
	xrc_get_stats(c->x, &st);
	if (st.remote_errors != c->remote_errors) {
		c->remote_errors = st.remote_errors;
		srv_path_close(p, "the client wrote or read through an invalid key");
		total++;
		goto out;
	}
	if (c->wait)
		srv_io_flush_waiting(c);
out:
	p->sess->srv->in_poll = false;
	return total + con_flush(c);
}

int rtrs_srv_poll(struct rtrs_srv *srv, uint64_t now)
{
	int work, rc;

	srv->now = now;
	srv_ready(srv);
	rc = poll_listeners(srv);
	if (rc < 0)
		return rc;
	work = rc;
	for (struct rtrs_srv_sess *s = srv->sessions; s; s = s->next) {
		for (struct srv_path *p = s->paths; p; p = p->next) {
			if (p->state == RTRS_SRV_CLOSING)
				continue;
			for (unsigned i = 0; i < p->cid_num && p->state != RTRS_SRV_CLOSING; i++)
				if (p->con[i])
					work += poll_con(p->con[i]);
			if (p->state == RTRS_SRV_CLOSING)
				continue;
			if (p->info_pending) {
				info_send(p);
				work += !p->info_pending;
			}
			if (srv_io_binds_ready(p) && !p->bound) {
				srv_io_binds(p);
				work++;
			}
			if (p->state == RTRS_SRV_CONNECTING &&
			    now - p->created_ns >= RTRS_SRV_CONNECT_TIMEOUT_NS)
				srv_path_close(p, "no INFO_REQ within 30 s");
			else if (p->state == RTRS_SRV_CONNECTED && now >= rtrs_hb_next(&p->hb))
				srv_io_hb(p, now);
		}
	}
	if (srv->unpark) {
		srv_io_unpark(srv);
		work++;
	}
	if (srv->reap) {
		srv->reap = false;
		for (struct rtrs_srv_sess *s = srv->sessions; s; s = s->next) {
			struct srv_path *p, *pn;

			for (p = s->paths; p; p = pn) {
				pn = p->next;
				if (p->state == RTRS_SRV_CLOSING) {
					path_reap(p);
					work++;
				}
			}
			for (p = s->paths; p; p = p->next)
				if (p->state == RTRS_SRV_CLOSING)
					srv->reap = true;	/* requests still out */
		}
		srv_tidy(srv);
	}
	return work;
}

int rtrs_srv_arm(struct rtrs_srv *srv)
{
	if (srv->reap || srv->unpark)
		return 1;
	for (struct rtrs_srv_sess *s = srv->sessions; s; s = s->next) {
		for (struct srv_path *p = s->paths; p; p = p->next) {
			if (p->state == RTRS_SRV_CLOSING)
				continue;
			if (p->info_pending && p->con[0] && xrc_state(p->con[0]->x) == XRC_UP)
				return 1;
			if (srv_io_binds_ready(p) && !p->bound)
				return 1;
			for (unsigned i = 0; i < p->cid_num; i++) {
				struct srv_con *c = p->con[i];
				bool out;

				if (!c)
					continue;
				if (xrc_arm(c->x) != 0)
					return 1;
				/* arming read the CM's ESTABLISHED: answers that
				 * waited for it can go now */
				if (c->wait && xrc_state(c->x) == XRC_UP)
					return 1;
				/* tcp: bytes waiting for room in the socket */
				out = xrc_tx_pending(c->x);
				if (out != c->epoll_out) {
					struct epoll_event ev = {
						.events = EPOLLIN | EPOLLRDHUP |
							  (out ? EPOLLOUT : 0),
						.data.ptr = c };

					epoll_ctl(srv->epfd, EPOLL_CTL_MOD, xrc_fd(c->x), &ev);
					c->epoll_out = out;
				}
			}
		}
	}
	return 0;
}

uint64_t rtrs_srv_next_timer(const struct rtrs_srv *srv)
{
	uint64_t t = UINT64_MAX;

	for (const struct rtrs_srv_sess *s = srv->sessions; s; s = s->next)
		for (const struct srv_path *p = s->paths; p; p = p->next) {
			uint64_t d = UINT64_MAX;

			if (p->state == RTRS_SRV_CONNECTING)
				d = p->created_ns + RTRS_SRV_CONNECT_TIMEOUT_NS;
			else if (p->state == RTRS_SRV_CONNECTED)
				d = rtrs_hb_next(&p->hb);
			if (d < t)
				t = d;
		}
	return t;
}

void rtrs_srv_free(struct rtrs_srv *srv)
{
	if (!srv)
		return;
	while (srv->sessions) {
		struct rtrs_srv_sess *s = srv->sessions;

		while (s->paths) {
			struct srv_path *p = s->paths;

			srv_path_close(p, NULL);
			p->st.inflight = 0;	/* whatever is out is abandoned */
			path_reap(p);
		}
		srv_sess_free(s);
	}
	for (unsigned i = 0; i < srv->nlsn; i++)
		xrc_listener_close(srv->lsn[i].l);
	close(srv->epfd);
	free(srv);
}

/* --- introspection -------------------------------------------------------- */

void rtrs_srv_sess_set_priv(struct rtrs_srv_sess *s, void *priv) { s->priv = priv; }
void *rtrs_srv_sess_priv(const struct rtrs_srv_sess *s) { return s->priv; }
const char *rtrs_srv_sess_name(const struct rtrs_srv_sess *s) { return s->sessname; }
uint32_t rtrs_srv_sess_queue_depth(const struct rtrs_srv_sess *s) { return s->srv->o.queue_depth; }
unsigned rtrs_srv_sess_paths(const struct rtrs_srv_sess *s) { return s->npaths; }

struct rtrs_srv_sess *rtrs_srv_sess_next(const struct rtrs_srv *srv,
					 const struct rtrs_srv_sess *prev)
{
	return prev ? prev->next : srv->sessions;
}

int rtrs_srv_path_get(const struct rtrs_srv_sess *s, unsigned idx, struct rtrs_srv_path_info *pi)
{
	const struct srv_path *p = s->paths;

	while (p && idx--)
		p = p->next;
	if (!p)
		return -ENOENT;
	memset(pi, 0, sizeof(*pi));
	pi->state = p->state;
	snprintf(pi->sessname, sizeof(pi->sessname), "%s", p->sessname);
	memcpy(pi->sess_uuid, p->sess_uuid, 16);
	snprintf(pi->peer, sizeof(pi->peer), "%s", p->peer);
	pi->transport = xuri_scheme_name(p->scheme);
	pi->listener = p->listener;
	pi->cid_num = p->cid_num;
	pi->cid_up = p->cid_up;
	pi->recon_cnt = p->recon_cnt;
	pi->hb_latency_ns = p->state == RTRS_SRV_CONNECTED ? p->hb.latency_ns : -1;
	pi->up_ns = p->up_ns;
	pi->stats = p->st;
	return 0;
}

int rtrs_srv_path_disconnect(struct rtrs_srv_sess *s, unsigned idx)
{
	struct srv_path *p = s->paths;

	while (p && idx--)
		p = p->next;
	if (!p)
		return -ENOENT;
	if (p->state == RTRS_SRV_CLOSING)
		return -EALREADY;
	srv_path_close(p, "disconnected by request");
	return 0;
}

void rtrs_srv_get_info(const struct rtrs_srv *srv, struct rtrs_srv_info *in)
{
	memset(in, 0, sizeof(*in));
	in->queue_depth = srv->o.queue_depth;
	in->chunk_size = srv->o.chunk_size;
	in->max_io_size = srv->o.chunk_size - RTRS_MAX_HDR_SIZE;
	in->always_invalidate = srv->o.always_invalidate;
	for (const struct rtrs_srv_sess *s = srv->sessions; s; s = s->next) {
		in->sessions++;
		in->paths += s->npaths;
	}
	in->rejected = srv->rejected;
	in->closed = srv->closed;
	for (unsigned i = 0; i < srv->nlsn; i++)
		in->dropped += xrc_listener_dropped(srv->lsn[i].l);
}
