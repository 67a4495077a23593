/* RTRS client session: requests over xrc, completions, heartbeats, the
 * loop.  See rtrs_clt.h; the rules without I/O are in rtrs_clt_core.c, a
 * path's life (connect, take over, tear down, the path API) in
 * rtrs_clt_path.c, the connector in rtrs_clt_conn.c.
 *
 * Per request (seed 002 "IO path", the kernel's rtrs_clt_write_req and
 * rtrs_clt_read_req): one RDMA WRITE WITH IMM into the server chunk named
 * by the permit -- a write carries [data][user header][rtrs_msg_rdma_write]
 * from offset 0 (two SGEs: the data, then the header and message from our
 * per-permit "iu" buffer), a read carries [user header][rtrs_msg_rdma_read
 * + one descriptor of our registered buffer] at offset data_len, flags 0
 * (plain MRs cannot be invalidated remotely, so we never ask for
 * NEED_INVAL).  The answer is an IO_RSP immediate: a zero-length write, or
 * with the server's always_invalidate a SEND WITH IMM carrying rkey_rsp,
 * the chunk's new key, which we take before completing the request. */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/xtime.h"
#include "rtrs/rtrs_clt_pri.h"

#define WC_BATCH 32

static const struct rtrs_core_ops core_ops;

/* --- small helpers ----------------------------------------------------------- */

static void rand_bytes(void *p, size_t n)
{
	uint8_t *b = p;

	if (getrandom(b, n, 0) != (ssize_t)n) {
		uint64_t x = xtime_ns() ^ ((uint64_t)getpid() << 32);

		for (size_t i = 0; i < n; i++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			b[i] = (uint8_t)(x >> 56);
		}
	}
}

void clt_uuid_v4(uint8_t u[16])
{
	rand_bytes(u, 16);
	u[6] = (u[6] & 0x0f) | 0x40;
	u[8] = (u[8] & 0x3f) | 0x80;
}

void rtrs_clt_opts_default(struct rtrs_clt_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->policy = RTRS_MP_MIN_INFLIGHT;
	o->reconnect_delay_ms = RTRS_CLT_RECONNECT_DELAY_MS;
	o->max_reconnect_attempts = -1;
	o->timeout_ns = RTRS_CLT_CONNECT_TIMEOUT_NS;
}

const char *rtrs_clt_state_str(enum rtrs_clt_state st)
{
	switch (st) {
	case RTRS_CLT_CONNECTING: return "connecting";
	case RTRS_CLT_CONNECTED: return "connected";
	case RTRS_CLT_RECONNECTING: return "reconnecting";
	case RTRS_CLT_CLOSED: return "closed";
	}
	return "?";
}

const char *rtrs_mp_policy_str(enum rtrs_mp_policy p)
{
	switch (p) {
	case RTRS_MP_RR: return "round-robin";
	case RTRS_MP_MIN_INFLIGHT: return "min-inflight";
	case RTRS_MP_MIN_LATENCY: return "min-latency";
	}
	return "?";
}

int rtrs_mp_policy_parse(const char *s, enum rtrs_mp_policy *p)
{
	if (!strcmp(s, "rr") || !strcmp(s, "round-robin"))
		*p = RTRS_MP_RR;
	else if (!strcmp(s, "min-inflight") || !strcmp(s, "mi"))
		*p = RTRS_MP_MIN_INFLIGHT;
	else if (!strcmp(s, "min-latency") || !strcmp(s, "ml"))
		*p = RTRS_MP_MIN_LATENCY;
	else
		return -EINVAL;
	return 0;
}

/* --- requests ---------------------------------------------------------------- */

static struct xrc_mr *mem_mr(const struct clt_path *p, const void *data, uint32_t len)
{
	const struct rtrs_clt *s = p->s;

	for (unsigned i = 0; i < s->nmem && i < p->numr; i++) {
		uintptr_t a = (uintptr_t)s->mem[i].addr, d = (uintptr_t)data;

		if (d >= a && len <= s->mem[i].len && d - a <= s->mem[i].len - len)
			return p->umr[i];
	}
	return NULL;
}

static bool mem_known(const struct rtrs_clt *s, const void *data, uint32_t len)
{
	for (unsigned i = 0; i < s->nmem; i++) {
		uintptr_t a = (uintptr_t)s->mem[i].addr, d = (uintptr_t)data;

		if (d >= a && len <= s->mem[i].len && d - a <= s->mem[i].len - len)
			return true;
	}
	return false;
}

/* core_ops.post */
static int op_post(void *ctx, struct rtrs_cpath *cp, struct rtrs_creq *r)
{
	struct rtrs_clt *s = ctx;
	struct clt_path *p = P(cp);
	struct clt_con *k;
	uint8_t *iu = s->iu + (size_t)r->id * s->iu_size;
	const struct rtrs_rbuf *rb = &p->rbufs[r->id];
	struct rtrs_req_layout l;
	struct xrc_sge sg[2];
	struct xrc_mr *dmr = NULL;
	int nsg = 0, rc;

	if (!p->cons)
		return -ENOTCONN;
	/* session messages on connection 0, IO on the connection of the CPU
	 * it is posted on, like the kernel (rtrs_permit_to_clt_con): one
	 * thread submits here, so a batch goes out on one connection (one
	 * sendmsg over tcp, one doorbell over rdma) rather than split */
	if ((r->dir & RTRS_CLT_ADMIN) || p->ncon == 1) {
		k = &p->cons[0];
	} else {
		int cpu = sched_getcpu();

		k = &p->cons[1 + (cpu > 0 ? (unsigned)cpu : 0u) % (p->ncon - 1)];
	}
	if (r->datalen && !(dmr = mem_mr(p, r->data, r->datalen)))
		return -EFAULT;
	if ((r->dir & 0xff) == RTRS_WRITE) {
		rc = rtrs_write_layout(&p->geom, r->id, r->datalen, r->usrlen, &l);
		if (rc)
			return rc;
		rtrs_rdma_write_encode(&(struct rtrs_rdma_write){ (uint16_t)r->usrlen },
				       iu + r->usrlen);
		if (r->datalen)
			sg[nsg++] = (struct xrc_sge){ r->data, r->datalen, dmr };
		sg[nsg++] = (struct xrc_sge){ iu, r->usrlen + RTRS_RDMA_WRITE_LEN, p->iu_mr };
	} else {
		struct rtrs_rdma_read m = { (uint16_t)r->usrlen, 0, r->datalen ? 1 : 0,
					    { (uintptr_t)r->data, dmr ? dmr->rkey : 0, r->datalen } };

		rc = rtrs_read_layout(&p->geom, r->id, r->datalen, r->usrlen, m.sg_cnt, &l);
		if (rc)
			return rc;
		rc = rtrs_rdma_read_encode(&m, iu + r->usrlen, s->iu_size - r->usrlen);
		if (rc < 0)
			return rc;
		sg[nsg++] = (struct xrc_sge){ iu, l.wr_len, p->iu_mr };
	}
	rc = xrc_post_write(k->c, sg, nsg, rb->addr + l.wr_off, rb->rkey, true, l.imm, r->id,
			    XRC_MORE);
	if (rc == 0)
		k->dirty = true;
	return rc;
}

int rtrs_clt_request(struct rtrs_clt *s, int dir, const void *usr, uint32_t usrlen,
		     void *data, uint32_t datalen, void (*conf)(void *priv, int err),
		     void *priv)
{
	struct rtrs_creq *r;
	uint32_t id;
	int rc;

	if ((dir & 0xff) != RTRS_READ && (dir & 0xff) != RTRS_WRITE)
		return -EINVAL;
	if (datalen > s->max_io)
		return -EMSGSIZE;
	/* the header and our message must fit the server's max_hdr_size */
	if ((uint64_t)usrlen + RTRS_RDMA_READ_HDR_LEN + RTRS_SG_DESC_LEN > s->max_hdr ||
	    (usrlen && !usr))
		return -EMSGSIZE;
	if (datalen && !mem_known(s, data, datalen))
		return -EFAULT;
	if (rtrs_core_all_closed(&s->core))
		return -ENOTCONN;
	id = dir & RTRS_CLT_ADMIN ? rtrs_permit_get(&s->core) : rtrs_permit_get_io(&s->core);
	if (id == RTRS_CORE_NONE)
		return -EAGAIN;
	r = rtrs_core_req(&s->core, id);
	r->dir = dir;
	r->data = data;
	r->datalen = datalen;
	r->usrlen = usrlen;
	r->conf = conf;
	r->priv = priv;
	if (usrlen)
		memcpy(s->iu + (size_t)id * s->iu_size, usr, usrlen);
	rc = rtrs_core_submit(&s->core, r, s->now ? s->now : xtime_ns());
	if (rc)
		rtrs_permit_put(&s->core, id);
	return rc;
}

/* --- completions ------------------------------------------------------------ */

static void send_hb(struct clt_path *p, uint32_t imm)
{
	struct clt_con *k = &p->cons[0];
	/* an empty RDMA write with immediate on connection 0, as the kernel
	 * (rtrs_send_hb_ack / hb_work): it names no memory */
	int rc = xrc_post_write(k->c, NULL, 0, 0, 0, true, imm, 0, XRC_MORE);

	if (rc == 0)
		k->dirty = true;
}

/* An IO_RSP (or heartbeat) immediate; rk: the rkey_rsp that came with it
 * (always_invalidate), or NULL.  0 or -EPROTO (a malformed rkey_rsp: the
 * kernel's rtrs_clt_rkey_rsp_done starts error recovery). */
static int on_imm(struct clt_path *p, uint32_t imm, const uint8_t *rk, uint32_t rklen,
		  uint64_t now)
{
	struct rtrs_clt *s = p->s;
	uint32_t msg_id;
	int err;

	switch (rtrs_imm_type(imm)) {
	case RTRS_IO_RSP_IMM:
	case RTRS_IO_RSP_W_INV_IMM:
		rtrs_io_rsp_payload_decode(rtrs_imm_payload(imm), &msg_id, &err);
		if (rk) {
			struct rtrs_rkey_rsp m;

			/* rtrs_clt_rkey_rsp_done: the chunk's new key before
			 * the request completes */
			if (rtrs_rkey_rsp_decode(rk, rklen, s->core.depth, &m) || m.buf_id != msg_id) {
				snprintf(p->last_error, sizeof(p->last_error),
					 "malformed rkey response");
				return -EPROTO;
			}
			p->rbufs[m.buf_id].rkey = m.rkey;
		}
		/* A response for no request in flight on this path (a late
		 * one, after its request failed over): counted and ignored,
		 * as the kernel's complete_rdma_req, not a reason to close a
		 * working path. */
		if (rtrs_core_complete(&s->core, &p->core, msg_id, err))
			p->stray_rsps++;
		return 0;
	case RTRS_HB_MSG_IMM:
		send_hb(p, RTRS_IMM_HB_ACK);
		return 0;
	case RTRS_HB_ACK_IMM:
		rtrs_hb_acked(&p->hb, now);
		p->core.latency_ns = p->hb.latency_ns;
		return 0;
	default:
		return 0;	/* the kernel warns "Unknown IMM type" and goes on */
	}
}

/* Polls one connection.  Returns completions handled, or -1 when the path
 * failed (it is detached then). */
static int poll_con(struct clt_path *p, struct clt_con *k, uint64_t now)
{
	struct xrc_wc wc[WC_BATCH];
	int n = xrc_poll(k->c, wc, WC_BATCH), rc;

	if (n < 0) {
		clt_path_fail(p, now, "poll: %s", strerror(-n));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		const struct xrc_wc *w = &wc[i];
		uint32_t slot = (uint32_t)w->wr_id;

		if (w->status) {
			clt_path_fail(p, now, "%s", w->status == -ECONNRESET ? "connection lost" :
				  w->status == -EREMOTEIO ? "the server refused an RDMA write (key or bounds)"
				  : strerror(-w->status));
			return -1;
		}
		if (w->op != XRC_OP_RECV && w->op != XRC_OP_RECV_IMM)
			continue;
		rtrs_hb_heard(&p->hb);
		if (slot >= k->nrx) {
			clt_path_fail(p, now, "receive completion for unknown slot");
			return -1;
		}
		if (w->has_imm && on_imm(p, w->imm, w->op == XRC_OP_RECV ?
					 k->rx + (size_t)slot * RTRS_CLT_RX_LEN : NULL,
					 w->len, now)) {
			char why[sizeof(p->last_error)];

			snprintf(why, sizeof(why), "%s", p->last_error);
			clt_path_fail(p, now, "%s", why);
			return -1;
		}
		if ((rc = clt_post_rx(k, slot))) {
			clt_path_fail(p, now, "receive on connection %u: %s", (unsigned)(k - p->cons),
				      strerror(-rc));
			return -1;
		}
	}
	if (xrc_state(k->c) == XRC_DOWN) {
		clt_path_fail(p, now, "connection lost");
		return -1;
	}
	return n;
}

static int poll_path(struct clt_path *p, uint64_t now)
{
	int total = 0;

	for (uint32_t i = 0; p->cons && i < p->ncon; i++) {
		int n = poll_con(p, &p->cons[i], now);

		if (n < 0)
			return total + 1;
		total += n;
	}
	if (!p->cons)
		return total;
	if (now >= rtrs_hb_next(&p->hb)) {
		switch (rtrs_hb_tick(&p->hb, now)) {
		case RTRS_HB_SEND:
			send_hb(p, RTRS_IMM_HB_MSG);
			break;
		case RTRS_HB_DEAD:
			clt_path_fail(p, now, "heartbeat: %u beats missed", p->hb.missed_max);
			return total + 1;
		case RTRS_HB_IDLE:
			break;
		}
	}
	return total;
}

static void flush_path(struct clt_path *p)
{
	for (uint32_t i = 0; p->cons && i < p->ncon; i++) {
		struct clt_con *k = &p->cons[i];

		if (k->dirty) {
			k->dirty = xrc_flush(k->c) > 0;
		}
		bool out = xrc_tx_pending(k->c);

		if (out != k->want_out && k->in_epoll) {
			struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0),
						  .data.ptr = k };

			if (epoll_ctl(p->s->epfd, EPOLL_CTL_MOD, xrc_fd(k->c), &ev) == 0)
				k->want_out = out;
		}
	}
}

/* Which connections have something to read: one epoll_wait for all of
 * them, where a poll of each would be a read(2) each over tcp.  The set is
 * level-triggered, so what arrives after this shows in the next round. */
static void clt_ready(struct rtrs_clt *s)
{
	struct epoll_event ev[32];
	int n = epoll_wait(s->epfd, ev, 32, 0);

	for (int i = 0; i < n; i++) {
		struct clt_con *k = ev[i].data.ptr;

		/* NULL: a connector's eventfd; EPOLLOUT alone: nothing to read */
		if (k && (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
			xrc_ready(k->c);
	}
	if (n == 32)	/* maybe more than were told: all read once */
		for (unsigned i = 0; i < s->core.npaths; i++) {
			struct clt_path *p = path_at(s, i);

			for (uint32_t c = 0; p->cons && c < p->ncon; c++)
				if (p->cons[c].c)
					xrc_ready(p->cons[c].c);
		}
}

int rtrs_clt_poll(struct rtrs_clt *s, uint64_t now)
{
	int n = 0;

	s->now = now;
	/* rdma polls a CQ in memory: nothing to ask then */
	if (s->quiet)
		s->quiet = false;
	else if (s->nhinted)
		clt_ready(s);
	for (unsigned i = 0; i < s->core.npaths; i++) {
		struct clt_path *p = path_at(s, i);

		if (p->job && atomic_load(&p->job->finished)) {
			clt_path_job_done(p, now);
			n++;
		}
		if (p->core.state == RTRS_CLT_CONNECTED)
			n += poll_path(p, now);
	}
	n += (int)rtrs_core_timers(&s->core, now);
	n += (int)rtrs_core_kick(&s->core, now);
	n += (int)rtrs_core_deliver(&s->core);
	/* after the confirmations: they may have posted new requests */
	for (unsigned i = 0; i < s->core.npaths; i++)
		flush_path(path_at(s, i));
	s->now = 0;
	return n;
}

int rtrs_clt_fd(const struct rtrs_clt *s) { return s->epfd; }
void rtrs_clt_quiet(struct rtrs_clt *s) { s->quiet = true; }
bool rtrs_clt_stopping(const struct rtrs_clt *s) { return s->o.stop && *s->o.stop; }

int rtrs_clt_arm(struct rtrs_clt *s)
{
	if (s->core.done_head != RTRS_CORE_NONE || s->core.pending_ev)
		return 1;
	for (unsigned i = 0; i < s->core.npaths; i++) {
		struct clt_path *p = path_at(s, i);

		if (p->job && atomic_load(&p->job->finished))
			return 1;
		for (uint32_t c = 0; p->cons && c < p->ncon; c++) {
			if (p->cons[c].dirty || xrc_arm(p->cons[c].c) != 0)
				return 1;
		}
	}
	return 0;
}

uint64_t rtrs_clt_next_timer(const struct rtrs_clt *s)
{
	uint64_t t = rtrs_core_next_timer(&s->core);

	for (unsigned i = 0; i < s->core.npaths; i++) {
		const struct clt_path *p = path_at(s, i);

		if (p->core.state == RTRS_CLT_CONNECTED && rtrs_hb_next(&p->hb) < t)
			t = rtrs_hb_next(&p->hb);
		/* an ACK held for our next requests (tcp) */
		for (uint32_t c = 1; p->core.state == RTRS_CLT_CONNECTED && p->cons && c < p->ncon;
		     c++) {
			uint64_t x = p->cons[c].c ? xrc_next_timer(p->cons[c].c) : UINT64_MAX;

			if (x < t)
				t = x;
		}
	}
	return t;
}

/* --- session ----------------------------------------------------------------- */

static void op_link_ev(void *ctx, enum rtrs_clt_link_ev ev)
{
	struct rtrs_clt *s = ctx;

	if (s->link_ev)
		s->link_ev(s->ctx, ev);
}

static const struct rtrs_core_ops core_ops = { op_post, clt_op_connect, op_link_ev };

static unsigned default_connections(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	/* nr_cpu_ids IO connections + the service connection */
	return n > 0 && n < (long)RTRS_CLT_MAX_CONNECTIONS ? (unsigned)n + 1 : 2;
}

struct rtrs_clt *rtrs_clt_open(const struct rtrs_clt_opts *o, const struct xuri *paths,
			       unsigned npaths,
			       void (*link_ev)(void *ctx, enum rtrs_clt_link_ev ev), void *ctx,
			       char *err, size_t errlen)
{
	struct rtrs_clt *s;
	size_t off = 0;
	uint64_t seed;

	if (!o || !o->sessname || rtrs_check_pathname(o->sessname)) {
		xerr(err, errlen, "session name '%s': 1 to 254 characters, without '/' or '.'",
			o && o->sessname ? o->sessname : "");
		errno = EINVAL;
		return NULL;
	}
	if (!npaths || npaths > RTRS_MAX_PATHS_NUM || o->connections > RTRS_CLT_MAX_CONNECTIONS ||
	    o->max_reconnect_attempts < -1 || o->max_reconnect_attempts > 9999) {
		xerr(err, errlen, "%s", !npaths ? "no path given" : npaths > RTRS_MAX_PATHS_NUM ?
			"more than 128 paths" : o->connections > RTRS_CLT_MAX_CONNECTIONS ?
			"more than 4096 connections per path" :
			"max reconnect attempts must be -1..9999");
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		goto nomem;
	s->o = *o;
	if (!s->o.connections)
		s->o.connections = default_connections();
	if (!s->o.timeout_ns)
		s->o.timeout_ns = RTRS_CLT_CONNECT_TIMEOUT_NS;
	snprintf(s->sessname, sizeof(s->sessname), "%s", o->sessname);
	s->o.sessname = s->sessname;
	s->link_ev = link_ev;
	s->ctx = ctx;
	clt_uuid_v4(s->paths_uuid);
	rand_bytes(&seed, sizeof(seed));
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (s->epfd < 0 || rtrs_core_init(&s->core, &core_ops, s, o->policy, o->reconnect_delay_ms,
					  o->max_reconnect_attempts, seed)) {
		if (s->epfd >= 0)
			close(s->epfd);
		free(s);
		goto nomem;
	}
	s->core.down_timeout_ns = o->down_timeout_ns;
	if (err && errlen)
		err[0] = 0;
	for (unsigned i = 0; i < npaths; i++) {
		struct clt_path *p = clt_path_new(s, &paths[i]);
		uint64_t now = xtime_ns();
		bool close_it;

		if (!p || rtrs_core_add_path(&s->core, &p->core)) {
			free(p);
			rtrs_clt_close(s);
			goto nomem;
		}
		for (unsigned k = 0; k < i; k++)
			if (!strcmp(path_at(s, k)->name, p->name)) {
				xerr(err, errlen, "path %s given twice", p->name);
				rtrs_clt_close(s);
				errno = EEXIST;
				return NULL;
			}
		if (clt_path_connect_inline(p, now, &close_it) == 0) {
			rtrs_core_path_up(&s->core, &p->core, now);
			continue;
		}
		/* it reconnects in the background like a path that failed */
		rtrs_core_connect_failed(&s->core, &p->core, close_it, now);
		if (err && off < errlen)
			off += (size_t)snprintf(err + off, errlen - off, "%s%s", off ? "; " : "",
						p->last_error);
	}
	if (!rtrs_core_any_connected(&s->core)) {
		rtrs_clt_close(s);
		errno = ENOTCONN;
		return NULL;
	}
	if (err && errlen)
		err[0] = 0;
	return s;
nomem:
	xerr(err, errlen, "out of memory");
	errno = ENOMEM;
	return NULL;
}

void rtrs_clt_close(struct rtrs_clt *s)
{
	if (!s)
		return;
	for (unsigned i = 0; i < s->core.npaths; i++) {
		struct clt_path *p = path_at(s, i);

		clt_path_cancel_job(p);
		clt_path_detach(p);
		p->core.state = RTRS_CLT_CLOSED;
	}
	/* what was still in flight or waiting is aborted */
	for (uint32_t i = 0; i < s->core.depth; i++) {
		struct rtrs_creq *r = &s->core.reqs[i];

		if (r->in_use && !r->done && r->conf) {
			void (*conf)(void *, int) = r->conf;

			r->in_use = false;
			conf(r->priv, -ECONNABORTED);
		}
	}
	for (unsigned i = 0; i < s->core.npaths; i++)
		clt_path_free(path_at(s, i));
	for (unsigned i = 0; i < s->core.npaths; i++)
		s->core.paths[i] = NULL;
	rtrs_core_fini(&s->core);
	if (s->epfd >= 0)
		close(s->epfd);
	free(s->iu);
	free(s->mem);
	free(s);
}

int rtrs_clt_add_mem(struct rtrs_clt *s, void *addr, size_t len, char *err, size_t errlen)
{
	struct clt_mem *m;

	if (!addr || !len) {
		xerr(err, errlen, "empty region");
		return -EINVAL;
	}
	m = realloc(s->mem, (s->nmem + 1) * sizeof(*m));
	if (!m) {
		xerr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->mem = m;
	s->mem[s->nmem++] = (struct clt_mem){ addr, len };
	for (unsigned i = 0; i < s->core.npaths; i++) {
		struct clt_path *p = path_at(s, i);
		struct xrc_mr **u;

		if (!p->cons)
			continue;	/* registered when it connects */
		u = realloc(p->umr, s->nmem * sizeof(*u));
		if (!u) {
			xerr(err, errlen, "out of memory");
			s->nmem--;
			return -ENOMEM;
		}
		p->umr = u;
		if (clt_reg_mem(p, s->nmem - 1, err, errlen)) {
			s->nmem--;
			return -ENOMEM;
		}
		p->numr = s->nmem;
	}
	return 0;
}

int rtrs_clt_del_mem(struct rtrs_clt *s, void *addr)
{
	unsigned k;

	for (k = 0; k < s->nmem && s->mem[k].addr != addr; k++)
		;
	if (k == s->nmem)
		return -ENOENT;
	for (unsigned i = 0; i < s->core.npaths; i++) {
		struct clt_path *p = path_at(s, i);

		if (k < p->numr) {
			xrc_dereg(p->umr[k]);
			memmove(&p->umr[k], &p->umr[k + 1], (p->numr - k - 1) * sizeof(*p->umr));
			p->numr--;
		}
	}
	memmove(&s->mem[k], &s->mem[k + 1], (s->nmem - k - 1) * sizeof(*s->mem));
	s->nmem--;
	return 0;
}

void rtrs_clt_hold_on_reconnect(struct rtrs_clt *s, bool hold)
{
	if (hold)
		s->core.hold_users++;
	else if (s->core.hold_users)
		s->core.hold_users--;
}

void rtrs_clt_resume(struct rtrs_clt *s) { rtrs_core_resume(&s->core); }

struct held_walk {
	struct rtrs_clt *s;
	int (*fn)(void *ctx, void (*conf)(void *priv, int err), void *priv, void *usr,
		  uint32_t usrlen);
	void *ctx;
};

static int held_one(void *ctx, struct rtrs_creq *r)
{
	struct held_walk *w = ctx;

	return w->fn(w->ctx, r->conf, r->priv, w->s->iu + (size_t)r->id * w->s->iu_size,
		     r->usrlen);
}

void rtrs_clt_held_foreach(struct rtrs_clt *s,
			   int (*fn)(void *ctx, void (*conf)(void *priv, int err), void *priv,
				     void *usr, uint32_t usrlen),
			   void *ctx)
{
	struct held_walk w = { s, fn, ctx };

	rtrs_core_held_foreach(&s->core, held_one, &w);
}

uint32_t rtrs_clt_queue_depth(const struct rtrs_clt *s) { return s->core.depth; }
uint32_t rtrs_clt_max_io(const struct rtrs_clt *s) { return s->max_io; }
uint32_t rtrs_clt_inflight(const struct rtrs_clt *s) { return rtrs_core_busy(&s->core); }
bool rtrs_clt_connected(const struct rtrs_clt *s) { return rtrs_core_any_connected(&s->core); }
bool rtrs_clt_alive(const struct rtrs_clt *s) { return rtrs_core_alive(&s->core); }
bool rtrs_clt_all_closed(const struct rtrs_clt *s) { return rtrs_core_all_closed(&s->core); }
const char *rtrs_clt_sessname(const struct rtrs_clt *s) { return s->sessname; }
enum rtrs_mp_policy rtrs_clt_policy(const struct rtrs_clt *s) { return s->core.policy; }
void rtrs_clt_set_policy(struct rtrs_clt *s, enum rtrs_mp_policy p) { s->core.policy = p; }
int32_t rtrs_clt_max_reconnect_attempts(const struct rtrs_clt *s) { return s->core.max_attempts; }
void rtrs_clt_set_max_reconnect_attempts(struct rtrs_clt *s, int32_t n) { s->core.max_attempts = n; }
uint64_t rtrs_clt_down_timeout(const struct rtrs_clt *s) { return s->core.down_timeout_ns; }
void rtrs_clt_set_down_timeout(struct rtrs_clt *s, uint64_t ns)
{
	s->core.down_timeout_ns = ns;
	s->core.down_failing = false;	/* the next poll judges by the new bound */
}
unsigned rtrs_clt_npaths(const struct rtrs_clt *s) { return s->core.npaths; }

