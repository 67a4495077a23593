/* RTRS server engine, part 2: what happens on a path's connections once it
 * is up -- requests (rtrs_srv_rdma_done, process_io_req), responses
 * (rtrs_srv_resp_rdma, rdma_write_sg, send_io_resp_imm), keys with
 * always_invalidate, heartbeats.  See rtrs_srv.h and seed 002.
 *
 * Keys (always_invalidate).  A request's chunk gets a new key (a memory
 * window bind) before the request runs, as the kernel invalidates on
 * arrival (its message is read out when it arrives, see on_io_req).  The
 * binds go to connection 0 and only when its send queue is empty, in
 * batches; the requests are dispatched when the batch's last bind
 * completes.  Why not on the connection the request came in on, next
 * to its response: rxe (Linux 6.1) re-executes the local work requests
 * (binds) that sit between the oldest unacknowledged request and the end
 * of the queue when it retransmits, and a window bind is not idempotent --
 * the second execution fails and takes the connection down, or stalls it
 * (seen on the veth wire of xprt-vm -w, where packets get reordered).  A
 * bind posted on an empty queue is retired at once and no retransmission
 * can reach it.  The kernel's own server uses fast-registration MRs,
 * whose re-execution is harmless.
 *
 * Send-queue accounting.  Responses are posted unsignaled but for the last
 * work request of one now and then (post_rsp); each signaled request
 * carries in its wr_id how many slots were posted since the previous one,
 * and its completion gives them back (an RC send queue completes in
 * order).  A request holds at most four slots (bind, data write,
 * send-with-invalidate, response), which is what
 * the queue is sized for, so arrivals never wait; answers that find the
 * queue full (completions not polled yet) or the connection not up yet
 * (rdma: the CM's ESTABLISHED can trail the first receive) wait in
 * arrival order on the connection. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "rtrs/rtrs_srv_pri.h"

static bool room(const struct srv_con *c, uint32_t n)
{
	return c->sq_used + c->sq_unsig + n <= c->sq_cap;
}

/* Bookkeeping after a post: signaled ones take the slots since the last. */
static uint64_t wr_id_for(struct srv_con *c, enum wr_kind k, bool signaled)
{
	return signaled ? WR_ID(k, c->sq_unsig + 1) : 0;
}

static void posted(struct srv_con *c, bool signaled)
{
	if (signaled) {
		c->sq_used += c->sq_unsig + 1;
		c->sq_unsig = 0;
	} else {
		c->sq_unsig++;
	}
}

static uint8_t *chunk_of(const struct srv_path *p, uint32_t buf_id)
{
	return p->sess->chunks + (size_t)buf_id * srv_chunk_size(p->sess->srv);
}

/* always_invalidate: a new key for chunk buf_id; the old one dies once the
 * bind executes (seed 002: "invalidated on arrival and replaced"). */
static int bind_chunk(struct srv_con *c, uint32_t buf_id, bool signaled)
{
	struct srv_path *p = c->path;
	int rc = xrc_win_bind(c->x, p->keys[buf_id].win, p->keys[buf_id].mr, chunk_of(p, buf_id),
			      srv_chunk_size(p->sess->srv), XRC_ACCESS_REMOTE_WRITE,
			      wr_id_for(c, WR_BIND, signaled), signaled ? XRC_SIGNALED : 0);

	if (rc == 0)
		posted(c, signaled);
	return rc;
}

int srv_io_bind_all(struct srv_path *p)
{
	struct srv_con *c = p->con[0];
	uint32_t qd = p->sess->srv->o.queue_depth;

	while (p->bind_next < qd) {
		int rc = bind_chunk(c, p->bind_next, p->bind_next + 1 == qd);

		if (rc < 0)
			return rc;
		p->bind_next++;
	}
	return 0;
}

/* --- responses ------------------------------------------------------------- */

static bool need_inval(const struct rtrs_srv_op *op)
{
	/* send_io_resp_imm: a READ that asked for it and named a buffer */
	return op->dir == RTRS_READ && (op->rd.flags & RTRS_MSG_NEED_INVAL_F) && op->rd.sg_cnt;
}

static uint32_t rsp_slots(const struct rtrs_srv_op *op)
{
	return 1 + need_inval(op) + (op->dir == RTRS_READ && !op->err && op->rd.sg_cnt);
}

/* rtrs_srv_resp_rdma: for a READ the data first (RDMA WRITE into the
 * client's buffer), then SEND_WITH_INV of the client's key when it asked
 * (NEED_INVAL, as the kernel client does with its fast-registered buffers),
 * then the response: an empty WRITE WITH IMM, or with always_invalidate a
 * SEND WITH IMM carrying the chunk's new key (rkey_rsp). */
static int post_rsp(struct rtrs_srv_op *op)
{
	struct srv_con *c = op->con;
	struct srv_path *p = op->path;
	bool inv = need_inval(op);
	uint32_t imm = rtrs_imm_io_rsp(op->buf_id, op->err, inv);
	/* one post (rdma: a chain, one doorbell; tcp: one sendmsg) for the
	 * work requests of an answer, and inside the poll loop for a batch of
	 * answers (poll_con flushes); an answer from outside goes at once */
	unsigned more = p->sess->srv->in_poll ? XRC_MORE : 0;
	/* The answer's last work request is signaled on connection 0 with
	 * always_invalidate (the binds wait for its queue to be empty), and
	 * elsewhere once a quarter of the queue went unsignaled: its
	 * completion gives all those slots back (the kernel's server signals
	 * every signal_interval-th send). */
	bool sig = (c->cid == 0 && p->keys) ||
		   c->sq_unsig + rsp_slots(op) >= (c->sq_cap / 4 ? c->sq_cap / 4 : 1);
	unsigned sf = (sig ? XRC_SIGNALED : 0) | more;
	int rc;

	if (op->dir == RTRS_READ && !op->err && op->rd.sg_cnt) {
		struct xrc_mr *mr = p->keys ? p->keys[op->buf_id].mr : p->chunks_mr;
		struct xrc_sge sg = { chunk_of(p, op->buf_id), op->rd.desc.len, mr };

		rc = xrc_post_write(c->x, &sg, 1, op->rd.desc.addr, op->rd.desc.key, false, 0, 0,
				    XRC_MORE);
		if (rc < 0)
			return rc;
		posted(c, false);
	}
	if (inv) {
		rc = xrc_post_send_inv(c->x, NULL, 0, op->rd.desc.key, 0, XRC_MORE);
		if (rc < 0)
			return rc;
		posted(c, false);
	}
	if (p->keys) {
		struct rtrs_rkey_rsp rk = { (uint16_t)op->buf_id, xrc_win_rkey(p->keys[op->buf_id].win) };
		uint8_t msg[RTRS_RKEY_RSP_LEN];
		struct xrc_sge sg = { msg, sizeof(msg), NULL };

		rtrs_rkey_rsp_encode(&rk, msg);
		rc = xrc_post_send_imm(c->x, &sg, 1, imm, wr_id_for(c, WR_RSP, sig),
				       sf | XRC_INLINE);
	} else {
		rc = xrc_post_write(c->x, NULL, 0, 0, 0, true, imm, wr_id_for(c, WR_RSP, sig), sf);
	}
	if (rc < 0)
		return rc;
	posted(c, sig);
	c->held |= more != 0;
	return 0;
}

static void enqueue(struct srv_con *c, struct rtrs_srv_op *op)
{
	op->next = NULL;
	op->waiting = true;
	*c->wait_tail = op;
	c->wait_tail = &op->next;
}

int srv_io_answer(struct rtrs_srv_op *op, int err)
{
	struct srv_path *p = op->path;
	struct srv_con *c = op->con;
	int rc;

	if (!op->busy || op->waiting)
		return -EINVAL;		/* answered twice */
	p->st.inflight--;
	op->err = err;
	if (p->state == RTRS_SRV_CLOSING) {
		/* rtrs_srv_resp_rdma: "session is disconnected" -- the client
		 * reissues it elsewhere */
		srv_op_done(op);
		p->sess->srv->reap = true;
		return -ENOTCONN;
	}
	if (c->wait || xrc_state(c->x) != XRC_UP || !room(c, rsp_slots(op))) {
		enqueue(c, op);
		return 0;
	}
	rc = post_rsp(op);
	srv_op_done(op);
	if (rc < 0) {
		xlog_info("path %s: posting a response: %s", p->peer, strerror(-rc));
		srv_path_close(p, "posting a response failed");
		return -ENOTCONN;
	}
	return 0;
}

int rtrs_srv_resp(struct rtrs_srv_op *op, int err)
{
	if (!op)
		return -EINVAL;
	return srv_io_answer(op, err > 0 ? -err : err);
}

struct rtrs_srv_sess *rtrs_srv_op_sess(const struct rtrs_srv_op *op)
{
	return op->path->sess;
}

void srv_io_flush_waiting(struct srv_con *c)
{
	struct srv_path *p = c->path;

	if (xrc_state(c->x) != XRC_UP)
		return;
	while (c->wait && p->state != RTRS_SRV_CLOSING) {
		struct rtrs_srv_op *op = c->wait;
		int rc;

		if (!room(c, rsp_slots(op)))
			return;
		c->wait = op->next;
		if (!c->wait)
			c->wait_tail = &c->wait;
		op->waiting = false;
		rc = post_rsp(op);
		srv_op_done(op);
		if (rc < 0)
			srv_path_close(p, "posting a response failed");
	}
}

/* --- chunks and failover ------------------------------------------------------ */

/* Chunk i is the session's, the same memory under every path (the client's
 * buffer id i), and the client hands id i out again once it has i's answer
 * -- or once it has given up on the path the request went on and sent it
 * again on another (rtrs_clt_failover_req keeps the id).  The server may
 * still be working on that first copy then: reading into the chunk in an
 * IO thread, or holding its answer for send-queue room, its path not yet
 * seen closing.  Run at once, the copy would finish first, the client
 * would put its next request into chunk i, and the first copy's read or
 * write would land in that one.  So a request whose chunk another path's
 * request holds waits (parked) until that one is answered or its path is
 * freed; a parked request whose own path closes meanwhile is dropped (the
 * client fails it over again).  The kernel's server runs such a copy at
 * once. */

void srv_op_done(struct rtrs_srv_op *op)
{
	struct rtrs_srv_sess *s = op->path->sess;

	op->busy = false;
	if (s->holder[op->buf_id] == op) {
		s->holder[op->buf_id] = NULL;
		if (s->parked)
			s->srv->unpark = true;
	}
}

static void dispatch(struct rtrs_srv_op *op);

/* A request that holds its chunk: at work now, or after its key's bind. */
static void op_start(struct rtrs_srv_op *op)
{
	struct srv_path *p = op->path;

	p->sess->holder[op->buf_id] = op;
	if (!p->keys)
		return dispatch(op);
	*p->bindq_tail = op;
	p->bindq_tail = &op->next;
	srv_io_binds(p);
}

void srv_io_unpark(struct rtrs_srv *srv)
{
	srv->unpark = false;
	for (struct rtrs_srv_sess *s = srv->sessions; s; s = s->next) {
		struct rtrs_srv_op **pp = &s->parked;

		while (*pp) {
			struct rtrs_srv_op *op = *pp;
			bool live = op->path->state == RTRS_SRV_CONNECTED;

			if (live && s->holder[op->buf_id]) {
				pp = &op->next;
				continue;
			}
			*pp = op->next;
			op->next = NULL;
			if (live)
				op_start(op);
			else
				op->busy = false;
		}
	}
}

void srv_io_forget(struct srv_path *p)
{
	struct rtrs_srv_sess *s = p->sess;
	uint32_t qd = s->srv->o.queue_depth;

	for (struct rtrs_srv_op **pp = &s->parked; *pp;) {
		if ((*pp)->path == p)
			*pp = (*pp)->next;
		else
			pp = &(*pp)->next;
	}
	for (uint32_t i = 0; i < qd; i++)
		if (s->holder[i] && s->holder[i]->path == p)
			srv_op_done(s->holder[i]);
}

/* --- requests --------------------------------------------------------------- */

/* process_io_req / process_read / process_write for a request read out at
 * arrival whose chunk is safe from the client (bound anew, or
 * always_invalidate off) and no other path's request holds. */
static void dispatch(struct rtrs_srv_op *op)
{
	struct srv_path *p = op->path;
	struct rtrs_srv *srv = p->sess->srv;
	int rc;

	if (p->state != RTRS_SRV_CONNECTED)
		return;
	if (op->dir == RTRS_READ) {
		p->st.reads++;
		p->st.read_bytes += op->datalen;
	} else {
		p->st.writes++;
		p->st.write_bytes += op->datalen;
	}
	p->st.inflight++;
	rc = srv->ops.rdma_ev(srv->ctx, p->sess, op, op->dir, chunk_of(p, op->buf_id), op->datalen,
			      op->usr, op->usr_len);
	if (rc < 0)
		srv_io_answer(op, rc);
}

/* rtrs_srv_rdma_done for IO_REQ.  Every fault closes the path (the
 * kernel's close_sess).  The request's rtrs message is read out of the
 * chunk at once: until it runs (after its key's bind, or parked) a copy
 * of it that the client sent on a path it gave up may still land in the
 * chunk -- the same bytes but for the READ descriptor's key, which is
 * that path's.  The layer above's message and a WRITE's data stay in the
 * chunk, read when the request runs: a copy carries the same. */
static void on_io_req(struct srv_con *c, uint32_t payload)
{
	struct srv_path *p = c->path;
	struct rtrs_srv *srv = p->sess->srv;
	struct rtrs_srv_op *op;
	struct rtrs_srv_req r;
	uint32_t buf_id, off;
	int rc;

	if (rtrs_io_req_payload_decode(payload, srv->o.queue_depth, srv->o.chunk_size, &buf_id,
				       &off) < 0)
		return srv_path_close(p, "buffer id beyond the queue depth or offset beyond the chunk");
	op = &p->ops[buf_id];
	/* the client's permit is ours until we answer: a second request on
	 * the same buffer would overwrite what we are working on */
	if (op->busy)
		return srv_path_close(p, "request on a buffer still in use");
	rc = rtrs_srv_parse_req(chunk_of(p, buf_id), srv->o.chunk_size, off, &r);
	if (rc < 0)
		return srv_path_close(p, rc == -EPROTO ? "unknown request type" :
				      r.type == RTRS_MSG_READ && r.rd.sg_cnt > 1 ? "READ with sg_cnt > 1" :
				      rc == -EINVAL ? "usr_len or read length beyond the data" :
				      "request message beyond the chunk");
	memset(op, 0, sizeof(*op));
	op->path = p;
	op->con = c;
	op->buf_id = buf_id;
	op->off = off;
	op->usr = r.usr;
	op->usr_len = r.usr_len;
	if (r.type == RTRS_MSG_READ) {
		op->dir = RTRS_READ;
		op->rd = r.rd;
		op->datalen = r.rd.sg_cnt ? r.rd.desc.len : 0;
	} else {
		op->dir = RTRS_WRITE;
		op->datalen = r.data_len;
	}
	op->busy = true;
	if (p->sess->holder[buf_id]) {
		struct rtrs_srv_op **pp = &p->sess->parked;

		while (*pp)
			pp = &(*pp)->next;
		*pp = op;
		p->st.chunk_waits++;
		return;
	}
	op_start(op);
}

bool srv_io_binds_ready(const struct srv_path *p)
{
	const struct srv_con *c = p->con[0];

	return p->bindq && c && !c->sq_used && !c->sq_unsig && xrc_state(c->x) == XRC_UP;
}

void srv_io_binds(struct srv_path *p)
{
	struct srv_con *c = p->con[0];

	if (!srv_io_binds_ready(p) || p->bound)
		return;
	p->bound_tail = &p->bound;
	while (p->bindq && room(c, 1)) {
		struct rtrs_srv_op *op = p->bindq;
		bool last = !op->next || !room(c, 2);
		int rc = bind_chunk(c, op->buf_id, last);

		if (rc < 0)
			return srv_path_close(p, "binding a chunk window failed");
		p->bindq = op->next;
		if (!p->bindq)
			p->bindq_tail = &p->bindq;
		op->next = NULL;
		*p->bound_tail = op;
		p->bound_tail = &op->next;
		if (last)
			break;
	}
}

/* The batch's last bind completed: its requests' chunks are the server's. */
static void binds_done(struct srv_path *p)
{
	while (p->bound && p->state == RTRS_SRV_CONNECTED) {
		struct rtrs_srv_op *op = p->bound;

		p->bound = op->next;
		op->next = NULL;
		dispatch(op);
	}
	p->bound = NULL;
	srv_io_binds(p);
}

static void post_hb(struct srv_con *c, uint32_t imm)
{
	int rc;

	/* a heartbeat that finds the queue full is skipped, not queued: the
	 * next tick sends another */
	if (xrc_state(c->x) != XRC_UP || !room(c, 1))
		return;
	rc = xrc_post_write(c->x, NULL, 0, 0, 0, true, imm, wr_id_for(c, WR_HB, true),
			    XRC_SIGNALED);
	if (rc < 0)
		srv_path_close(c->path, "posting a heartbeat failed");
	else
		posted(c, true);
}

void srv_io_hb(struct srv_path *p, uint64_t now)
{
	switch (rtrs_hb_tick(&p->hb, now)) {
	case RTRS_HB_SEND:
		if (p->con[0])
			post_hb(p->con[0], RTRS_IMM_HB_MSG);
		break;
	case RTRS_HB_DEAD:
		srv_path_close(p, "heartbeats missed");
		break;
	case RTRS_HB_IDLE:
		break;
	}
}

void srv_io_wc(struct srv_con *c, const struct xrc_wc *wc)
{
	struct srv_path *p = c->path;
	struct xrc_sge empty = { NULL, 0, NULL };

	if (wc->status) {
		/* a flushed request means the connection went down; anything
		 * else is a transport error: either way the path goes */
		srv_path_close(p, wc->status == -ECONNRESET ? "connection lost" :
			       wc->status == -EREMOTEIO ? "the client refused our access" :
			       wc->status == -EMSGSIZE ? "message bigger than the receive buffer" :
			       "transport error");
		return;
	}
	switch (wc->op) {
	case XRC_OP_SEND:
	case XRC_OP_WRITE:
	case XRC_OP_BIND:
	case XRC_OP_READ:
		if (wc->wr_id) {
			uint32_t n = WR_SLOTS(wc->wr_id);

			c->sq_used = c->sq_used > n ? c->sq_used - n : 0;
		}
		if (wc->op == XRC_OP_BIND && p->bound)
			binds_done(p);
		else if (c->cid == 0 && p->bindq)
			srv_io_binds(p);
		return;
	case XRC_OP_RECV:
		rtrs_hb_heard(&p->hb);
		srv_info_req(c, p->ctl, wc->len);
		return;
	case XRC_OP_RECV_IMM:
		break;
	}
	rtrs_hb_heard(&p->hb);
	/* a kernel client writes nothing before INFO_RSP: what does came too
	 * early, and on connection 0 it took the INFO_REQ buffer */
	if (p->state != RTRS_SRV_CONNECTED)
		return srv_path_close(p, "request before the INFO exchange");
	if (xrc_post_recv(c->x, &empty, 0) < 0)
		return srv_path_close(p, xrc_state(c->x) == XRC_DOWN ? "connection lost" :
				      "reposting a receive failed");
	switch (rtrs_imm_type(wc->imm)) {
	case RTRS_IO_REQ_IMM:
		on_io_req(c, rtrs_imm_payload(wc->imm));
		break;
	case RTRS_HB_MSG_IMM:
		if (p->con[0])
			post_hb(p->con[0], RTRS_IMM_HB_ACK);
		break;
	case RTRS_HB_ACK_IMM:
		rtrs_hb_acked(&p->hb, p->sess->srv->now);
		break;
	default:
		/* rtrs_srv_rdma_done: "Unknown IMM type", ignored */
		xlog_ratelimited(XLOG_INFO, "path %s: unknown immediate type %u", p->peer,
				 rtrs_imm_type(wc->imm));
		break;
	}
}
