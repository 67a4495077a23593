/* The RTRS client's paths: connecting (inline or through the connector
 * thread), taking the connections over, tearing them down, and the path
 * operations of the API (rtrs_clt.h).  See rtrs_clt.c for the data path. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "core/xtime.h"
#include "rtrs/rtrs_clt_pri.h"

/* --- a path's connections on the loop's side --------------------------------- */

static void con_epoll(struct rtrs_clt *s, struct clt_con *k, bool add)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = k };

	if (add && !k->in_epoll) {
		if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, xrc_fd(k->c), &ev) == 0)
			k->in_epoll = true;
	} else if (!add && k->in_epoll) {
		epoll_ctl(s->epfd, EPOLL_CTL_DEL, xrc_fd(k->c), NULL);
		k->in_epoll = false;
	}
	/* rtrs_clt_poll() passes on what the epoll set reports */
	if (xrc_ready_hints(k->c, k->in_epoll) && k->hinted != k->in_epoll) {
		k->hinted = k->in_epoll;
		s->nhinted += k->hinted ? 1 : -1;
	}
}

/* Closes a path's connections (everything outstanding is flushed inside
 * xrc; nothing of it reaches us) and what was registered for them.  The
 * close is an abort: what the transport still holds for the server is
 * dropped, and the server sees the path go before it reads what came in
 * ahead -- the requests it would find there go elsewhere now. */
void clt_path_detach(struct clt_path *p)
{
	struct rtrs_clt *s = p->s;

	if (p->cons) {
		for (uint32_t i = 0; i < p->ncon; i++) {
			struct clt_con *k = &p->cons[i];

			if (k->c) {
				con_epoll(s, k, false);
				xrc_abort(k->c);
			}
			xrc_dereg(k->rxmr);
			free(k->rx);
		}
		free(p->cons);
		p->cons = NULL;
	}
	for (unsigned i = 0; i < p->numr; i++)
		xrc_dereg(p->umr[i]);
	free(p->umr);
	p->umr = NULL;
	p->numr = 0;
	xrc_dereg(p->iu_mr);
	p->iu_mr = NULL;
	free(p->rbufs);
	p->rbufs = NULL;
	p->dom = NULL;
}

int clt_post_rx(struct clt_con *k, uint32_t slot)
{
	return xrc_post_recv(k->c, &(struct xrc_sge){ k->rx + (size_t)slot * RTRS_CLT_RX_LEN,
						      RTRS_CLT_RX_LEN, k->rxmr }, slot);
}

int clt_reg_mem(struct clt_path *p, unsigned i, char *err, size_t errlen)
{
	struct clt_mem *m = &p->s->mem[i];

	p->umr[i] = xrc_reg(p->dom, m->addr, m->len,
			    XRC_ACCESS_LOCAL_WRITE | XRC_ACCESS_REMOTE_WRITE, err, errlen);
	return p->umr[i] ? 0 : -ENOMEM;
}

/* Takes over a finished connector job: geometry, keys, receives.  0, or
 * -errno with p->last_error set (the job is freed either way). */
static int path_attach(struct clt_path *p, struct rtrs_conn_job *j, uint64_t now, bool *close_it)
{
	struct rtrs_clt *s = p->s;
	const struct rtrs_conn_rsp *r = &j->rsp;
	char err[256];
	int rc = j->rc;

	*close_it = j->close_it;
	if (rc) {
		snprintf(p->last_error, sizeof(p->last_error), "%s", j->err);
		goto out_free;
	}
	/* the session's queue depth is the first path's; a server that
	 * comes back with another one is refused (the kernel: "queue depth
	 * changed", auto-reconnect disabled) */
	if (s->core.depth && r->queue_depth != s->core.depth) {
		snprintf(p->last_error, sizeof(p->last_error),
			 "queue depth changed (%u, the session's is %u)", r->queue_depth,
			 s->core.depth);
		*close_it = true;
		rc = -ECONNRESET;
		goto out_free;
	}
	if (!s->core.depth) {
		rc = rtrs_core_set_depth(&s->core, r->queue_depth);
		s->iu_size = (r->max_hdr_size + 63) & ~63u;
		s->max_hdr = r->max_hdr_size;
		if (!rc && !(s->iu = aligned_alloc(64, (size_t)s->iu_size * r->queue_depth)))
			rc = -ENOMEM;
		if (rc) {
			snprintf(p->last_error, sizeof(p->last_error), "out of memory");
			goto out_free;
		}
	}
	if (r->max_hdr_size < s->max_hdr) {
		/* our iu layout assumed the first path's header room */
		snprintf(p->last_error, sizeof(p->last_error),
			 "max header size %u smaller than the session's %u", r->max_hdr_size,
			 s->max_hdr);
		*close_it = true;
		rc = -ECONNRESET;
		goto out_free;
	}
	p->geom = (struct rtrs_geom){ r->queue_depth, r->max_io_size + r->max_hdr_size,
				      r->max_hdr_size };
	p->max_io = r->max_io_size;
	p->flags = r->flags;
	if (!s->max_io || p->max_io < s->max_io)
		s->max_io = p->max_io;	/* the kernel keeps the minimum */
	p->ncon = j->cid_num;
	p->cons = calloc(p->ncon, sizeof(*p->cons));
	p->umr = calloc(s->nmem ? s->nmem : 1, sizeof(*p->umr));
	if (!p->cons || !p->umr) {
		snprintf(p->last_error, sizeof(p->last_error), "out of memory");
		rc = -ENOMEM;
		goto out_detach;
	}
	p->rbufs = j->rbufs;
	j->rbufs = NULL;
	for (uint32_t i = 0; i < p->ncon; i++) {
		p->cons[i].c = j->cons[i];
		j->cons[i] = NULL;
	}
	p->dom = xrc_domain(p->cons[0].c);
	for (uint32_t i = 1; i < p->ncon; i++)
		if (xrc_domain(p->cons[i].c) != p->dom) {
			snprintf(p->last_error, sizeof(p->last_error),
				 "connections of one path on different devices");
			rc = -EXDEV;
			goto out_detach;
		}
	p->iu_mr = xrc_reg(p->dom, s->iu, (size_t)s->iu_size * s->core.depth,
			   XRC_ACCESS_LOCAL_WRITE, err, sizeof(err));
	if (!p->iu_mr) {
		snprintf(p->last_error, sizeof(p->last_error), "%s", err);
		rc = -ENOMEM;
		goto out_detach;
	}
	for (unsigned i = 0; i < s->nmem; i++, p->numr++)
		if (clt_reg_mem(p, i, err, sizeof(err))) {
			snprintf(p->last_error, sizeof(p->last_error), "%s", err);
			rc = -ENOMEM;
			goto out_detach;
		}
	for (uint32_t i = 0; i < p->ncon; i++) {
		struct clt_con *k = &p->cons[i];
		struct xrc_opts xo;

		rtrs_clt_xrc_opts(i, s->core.depth, 0, &xo);
		/* the device may have allowed a shorter queue (max_qp_wr) */
		k->nrx = xo.rq_depth < xrc_rq_depth(k->c) ? xo.rq_depth : xrc_rq_depth(k->c);
		k->rx = calloc(k->nrx, RTRS_CLT_RX_LEN);
		k->rxmr = k->rx ? xrc_reg(p->dom, k->rx, (size_t)k->nrx * RTRS_CLT_RX_LEN,
					  XRC_ACCESS_LOCAL_WRITE, err, sizeof(err)) : NULL;
		if (!k->rxmr) {
			snprintf(p->last_error, sizeof(p->last_error), "%s",
				 k->rx ? err : "out of memory");
			rc = -ENOMEM;
			goto out_detach;
		}
		for (uint32_t slot = 0; slot < k->nrx; slot++)
			if ((rc = clt_post_rx(k, slot))) {
				snprintf(p->last_error, sizeof(p->last_error),
					 "connection %u: receive: %s", i, strerror(-rc));
				goto out_detach;
			}
		con_epoll(s, k, true);
	}
	/* set for_new_clt, to allow future reconnect on any path */
	p->for_new_clt = true;
	rtrs_hb_init(&p->hb, s->o.hb_interval_ms, s->o.hb_missed_max, now);
	p->core.latency_ns = -1;
	p->last_error[0] = 0;
	rtrs_conn_free(j);
	return 0;
out_detach:
	clt_path_detach(p);
out_free:
	rtrs_conn_free(j);
	return rc;
}

static struct rtrs_conn_job *job_new(struct clt_path *p)
{
	struct rtrs_clt *s = p->s;
	struct rtrs_conn_job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->efd = -1;
	j->uri = p->uri;
	snprintf(j->uristr, sizeof(j->uristr), "%s", p->name);
	snprintf(j->sessname, sizeof(j->sessname), "%s", s->sessname);
	/* init_conns: every (re)connection of a path bumps recon_cnt, so the
	 * first one sends 1 */
	p->recon_cnt++;
	j->req.recon_cnt = p->recon_cnt;
	memcpy(j->req.sess_uuid, p->uuid, 16);
	memcpy(j->req.paths_uuid, s->paths_uuid, 16);
	/* first_conn: the kernel sets it on the session's first path and on
	 * every path that has connected once; we also set it whenever no
	 * path of ours is up, so that the path that happens to connect first
	 * may (re)create the server's session */
	j->req.first_conn = p->for_new_clt || s->core.paths_up == 0;
	j->cid_num = s->o.connections;
	j->expect_qd = s->core.depth;
	j->timeout_ns = s->o.timeout_ns;
	return j;
}

/* Connects p now, blocking.  0 or -errno (p->last_error). */
int clt_path_connect_inline(struct clt_path *p, uint64_t now, bool *close_it)
{
	struct rtrs_conn_job *j = job_new(p);

	*close_it = false;
	if (!j) {
		snprintf(p->last_error, sizeof(p->last_error), "out of memory");
		return -ENOMEM;
	}
	rtrs_conn_run(j);
	return path_attach(p, j, now, close_it);
}

/* A connector job finished on its thread: take it over. */
void clt_path_job_done(struct clt_path *p, uint64_t now)
{
	struct rtrs_conn_job *j = p->job;
	bool close_it;

	epoll_ctl(p->s->epfd, EPOLL_CTL_DEL, j->efd, NULL);
	rtrs_conn_join(j);
	p->job = NULL;
	if (p->core.state != RTRS_CLT_CONNECTING) {	/* disconnected meanwhile */
		rtrs_conn_free(j);
		return;
	}
	if (path_attach(p, j, now, &close_it)) {
		rtrs_core_connect_failed(&p->s->core, &p->core, close_it || p->adding, now);
	} else {
		p->adding = false;
		rtrs_core_path_up(&p->s->core, &p->core, now);
	}
}

void clt_path_cancel_job(struct clt_path *p)
{
	if (!p->job)
		return;
	epoll_ctl(p->s->epfd, EPOLL_CTL_DEL, p->job->efd, NULL);
	/* a server that takes the connection and never answers (stopped)
	 * would hold the join for the connect timeout, 30 s: it gives up */
	rtrs_conn_cancel(p->job);
	rtrs_conn_free(p->job);
	p->job = NULL;
}

/* core_ops.connect: reconnects run on the connector thread. */
void clt_op_connect(void *ctx, struct rtrs_cpath *cp, uint64_t now)
{
	struct clt_path *p = P(cp);
	struct rtrs_conn_job *j = job_new(p);
	struct epoll_event ev = { .events = EPOLLIN };
	int rc = j ? rtrs_conn_start(j) : -ENOMEM;

	(void)ctx;
	if (rc) {
		snprintf(p->last_error, sizeof(p->last_error), "connector thread: %s",
			 strerror(-rc));
		rtrs_conn_free(j);
		rtrs_core_connect_failed(&p->s->core, cp, p->adding, now);
		return;
	}
	p->job = j;
	epoll_ctl(p->s->epfd, EPOLL_CTL_ADD, j->efd, &ev);
}

/* A path failed under us: close it and let its requests fail over. */
void clt_path_fail(struct clt_path *p, uint64_t now, const char *fmt, ...)
{
	va_list ap;

	if (p->core.state != RTRS_CLT_CONNECTED)
		return;
	va_start(ap, fmt);
	vsnprintf(p->last_error, sizeof(p->last_error), fmt, ap);
	va_end(ap);
	clt_path_detach(p);
	rtrs_core_path_down(&p->s->core, &p->core, true, now);
}

struct clt_path *clt_path_new(struct rtrs_clt *s, const struct xuri *u)
{
	struct clt_path *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->s = s;
	p->uri = *u;
	if (xuri_format(u, p->name, sizeof(p->name)))
		snprintf(p->name, sizeof(p->name), "%s://%s", xuri_scheme_name(u->scheme), u->host);
	clt_uuid_v4(p->uuid);
	p->core.state = RTRS_CLT_CONNECTING;
	p->core.latency_ns = -1;
	return p;
}

void clt_path_free(struct clt_path *p)
{
	if (!p)
		return;
	clt_path_cancel_job(p);
	clt_path_detach(p);
	free(p);
}

int rtrs_clt_path_find(const struct rtrs_clt *s, const struct xuri *uri)
{
	char name[300];

	if (xuri_format(uri, name, sizeof(name)))
		return -ENOENT;
	for (unsigned i = 0; i < s->core.npaths; i++)
		if (!strcmp(path_at(s, i)->name, name))
			return (int)i;
	return -ENOENT;
}

int rtrs_clt_path_add(struct rtrs_clt *s, const struct xuri *uri, char *err, size_t errlen)
{
	struct clt_path *p;
	uint64_t now = xtime_ns();

	if (rtrs_clt_path_find(s, uri) >= 0) {
		xerr(err, errlen, "already a path of the session");
		return -EEXIST;
	}
	if (s->core.npaths >= RTRS_MAX_PATHS_NUM) {
		xerr(err, errlen, "the session has 128 paths already");
		return -E2BIG;
	}
	p = clt_path_new(s, uri);
	if (!p || rtrs_core_add_path(&s->core, &p->core)) {
		free(p);
		xerr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	/* connecting on the connector thread, CONNECTING as clt_path_new
	 * left it: the loop goes on (the kernel's add_path blocks only the
	 * writer of its sysfs file) */
	p->adding = true;
	clt_op_connect(s, &p->core, now);
	return 0;
}

int rtrs_clt_path_remove(struct rtrs_clt *s, unsigned idx)
{
	struct clt_path *p;

	if (idx >= s->core.npaths)
		return -ENOENT;
	p = path_at(s, idx);
	clt_path_cancel_job(p);
	clt_path_detach(p);
	rtrs_core_path_down(&s->core, &p->core, false, xtime_ns());
	rtrs_core_remove_path(&s->core, &p->core);
	if (rtrs_core_all_closed(&s->core))
		rtrs_core_kick(&s->core, 0);	/* fails what waits */
	clt_path_free(p);
	return 0;
}

int rtrs_clt_path_disconnect(struct rtrs_clt *s, unsigned idx)
{
	struct clt_path *p;

	if (idx >= s->core.npaths)
		return -ENOENT;
	p = path_at(s, idx);
	clt_path_cancel_job(p);
	clt_path_detach(p);
	snprintf(p->last_error, sizeof(p->last_error), "disconnected by request");
	rtrs_core_path_down(&s->core, &p->core, false, xtime_ns());
	p->core.by_request = true;
	return 0;
}

int rtrs_clt_path_reconnect(struct rtrs_clt *s, unsigned idx)
{
	struct clt_path *p;

	if (idx >= s->core.npaths)
		return -ENOENT;
	p = path_at(s, idx);
	if (p->core.state == RTRS_CLT_CONNECTING)
		return -EBUSY;
	clt_path_detach(p);
	return rtrs_core_path_reconnect(&s->core, &p->core, xtime_ns());
}

enum rtrs_clt_state rtrs_clt_path_state(const struct rtrs_clt *s, unsigned idx)
{
	return idx < s->core.npaths ? s->core.paths[idx]->state : RTRS_CLT_CLOSED;
}

int rtrs_clt_path_stats(const struct rtrs_clt *s, unsigned idx, struct rtrs_clt_path_stats *st)
{
	const struct clt_path *p;

	if (idx >= s->core.npaths)
		return -ENOENT;
	p = path_at(s, idx);
	memset(st, 0, sizeof(*st));
	snprintf(st->uri, sizeof(st->uri), "%s", p->name);
	st->state = p->core.state;
	st->cur_latency_ns = p->core.latency_ns;
	st->reads = p->core.reads;
	st->read_bytes = p->core.read_bytes;
	st->writes = p->core.writes;
	st->write_bytes = p->core.write_bytes;
	st->inflight = p->core.inflight;
	st->failovers = p->core.failovers;
	st->reconnects_ok = p->core.reconnects_ok;
	st->reconnects_failed = p->core.reconnects_failed;
	st->stray_responses = p->stray_rsps;
	st->connections = s->o.connections;
	st->reconnect_attempts = p->core.attempts;
	st->recon_cnt = p->recon_cnt;
	snprintf(st->last_error, sizeof(st->last_error), "%s", p->last_error);
	return 0;
}

void rtrs_clt_reset_stats(struct rtrs_clt *s)
{
	for (unsigned i = 0; i < s->core.npaths; i++) {
		struct rtrs_cpath *c = s->core.paths[i];

		c->reads = c->read_bytes = c->writes = c->write_bytes = 0;
		c->failovers = c->reconnects_ok = c->reconnects_failed = 0;
		path_at(s, i)->stray_rsps = 0;
	}
}
