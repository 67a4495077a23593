/* Verbs tests (vt.h): the client's operations and the server's sessions.
 *
 * Client and server each register one buffer and send its address and key
 * as their first SEND (struct probe_vt_mem).  Then, as perftest does:
 *   write  bw: writes of `size` bytes to the server's buffer, `depth` in
 *              flight; with --imm each consumes a receive there, which the
 *              server counts and posts again.
 *          lat: we write, the server watches the last byte of its buffer
 *              and writes the bytes back into ours, where we watch it
 *              (with --imm: the immediates' completions instead).
 *   read   bw: reads of the server's buffer; lat: one at a time.
 *   send   bw: sends, the server counts its receives and posts them again;
 *          lat: the server sends each message back from its receive buffer.
 * Sends and writes of at most the inline size go inline.  The client
 * busy-polls, as perftest does; the server sleeps between sessions' work
 * except while a write latency test needs it to watch memory. */
#include "cmd.h"
#include "vt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/parse.h"
#include "core/xtime.h"

#define VT_TIMEOUT_NS	(5 * XTIME_NS_PER_S)
#define VT_CONN_COST	(256u * 1024)	/* budget charged per session besides its buffer */

/* The server's receive ids besides the slots: the client's buffer, and the
 * catch-all a test without sends or immediates keeps posted (anything in
 * it ends the session: the client sent what its test does not have). */
#define WR_THEIRS	UINT32_MAX
#define WR_CATCH	(UINT32_MAX - 3)

enum probe_vt_op vt_op_parse(const char *s)
{
	return !strcmp(s, "write") ? PROBE_VT_WRITE : !strcmp(s, "read") ? PROBE_VT_READ :
	       !strcmp(s, "send") ? PROBE_VT_SEND : 0;
}

const char *vt_op_name(enum probe_vt_op op)
{
	return op == PROBE_VT_WRITE ? "write" : op == PROBE_VT_READ ? "read" : "send";
}

const char *vt_op_title(enum probe_vt_op op)
{
	return op == PROBE_VT_WRITE ? "RDMA write" : op == PROBE_VT_READ ? "RDMA read" : "send";
}

int vt_opt(const char *cmd, int c, const char *arg, struct vt_opts *o)
{
	uint64_t v;
	const char *es;

	switch (c) {
	case OPT_VT_OP:
		if (!(o->op = vt_op_parse(arg)))
			return usage_error(cmd, "--op: '%s' is not write, read or send", arg);
		return 1;
	case OPT_VT_IMM:
		o->imm = true;
		return 1;
	case OPT_VT_INLINE:
		if (xparse_size(arg, 0, 65536, &v, &es) < 0)
			return usage_error(cmd, "--inline: '%s' %s (0..64k)", arg, es);
		o->inline_max = (uint32_t)v;
		o->inline_set = true;
		return 1;
	}
	return 0;
}

int vt_check(const char *cmd, const struct vt_opts *o, const struct xuri *u)
{
	if (!o->op) {
		if (o->imm || o->inline_set)
			return usage_error(cmd, "%s: only with --op", o->imm ? "--imm" : "--inline");
		return EXIT_OK;
	}
	if (u->scheme != XURI_TCP && u->scheme != XURI_RDMA)
		return usage_error(cmd, "--op: a verbs test runs over tcp:// or rdma://, not %s://",
				   xuri_scheme_name(u->scheme));
	if (o->op == PROBE_VT_READ && o->imm)
		return usage_error(cmd, "--imm: a read carries no immediate");
	return EXIT_OK;
}

static size_t slot_len(uint32_t size)
{
	return size > PROBE_VT_MEM_LEN ? size : PROBE_VT_MEM_LEN;
}

/* The server's buffer before a read test: bytes a reader can check. */
static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 7 + 3);
}

/* The byte a write latency test leaves last in round `seq`: never 0, the
 * buffers' first value. */
static uint8_t round_byte(uint64_t seq)
{
	return (uint8_t)(1 + seq % 255);
}

/* ------------------------------------------------------------------ client */

struct vt_client {
	char target[300];
	const char *cmd;
	struct vt_opts o;
	struct xrc *c;
	size_t slot;
	uint8_t *tx, *rx;		/* depth slots each: what we send or write
					 * (reads land here too), what comes back */
	uint8_t mem[2][PROBE_VT_MEM_LEN];	/* ours (sent), the server's */
	struct xrc_mr *txmr, *rxmr, *memmr;
	struct probe_vt_mem peer;
	uint32_t inl;
	uint64_t seq;
	bool stopping;			/* a first stop signal came: what is in
					 * flight ends; a second ends the command */
};

static int vt_fail(struct vt_client *c, const char *what, int err)
{
	fail(c->cmd, "%s: %s: %s", c->target, what, strerror(err < 0 ? -err : err));
	return -EIO;
}

/* The next completion, busy-polling, until `until` or a stop signal: 1, 0
 * (none), or -EIO (said why: the connection or the operation failed). */
static int next_wc(struct vt_client *c, struct xrc_wc *wc, uint64_t until)
{
	do {
		int n = xrc_poll(c->c, wc, 1);

		if (n < 0)
			return vt_fail(c, "poll", n);
		if (n == 1) {
			if (wc->status)
				return vt_fail(c, wc->op == XRC_OP_READ ? "read" :
					       wc->op == XRC_OP_WRITE ? "write" : "send", wc->status);
			return 1;
		}
		if (xrc_state(c->c) == XRC_DOWN)
			return vt_fail(c, "connection", ECONNRESET);
	} while (!cli_stop_requested && xtime_ns() < until);
	return 0;
}

static unsigned flags_for(const struct vt_client *c, uint32_t len)
{
	return XRC_SIGNALED | (len <= c->inl ? XRC_INLINE : 0);
}

/* Operation `i` of the test (slot i % depth). */
static int post_op(struct vt_client *c, uint64_t i, unsigned flags)
{
	uint8_t *b = c->tx + (size_t)(i % c->o.depth) * c->slot;
	struct xrc_sge sg = { b, c->o.size, c->txmr };
	uint32_t imm = (uint32_t)i;

	switch (c->o.op) {
	case PROBE_VT_WRITE:
		return xrc_post_write(c->c, &sg, 1, c->peer.addr, c->peer.rkey, c->o.imm, imm, i,
				      flags);
	case PROBE_VT_READ:
		return xrc_post_read(c->c, &sg, 1, c->peer.addr, c->peer.rkey, i, XRC_SIGNALED);
	default:
		return c->o.imm ? xrc_post_send_imm(c->c, &sg, 1, imm, i, flags)
				: xrc_post_send(c->c, &sg, 1, i, flags);
	}
}

static int refused(struct vt_client *c, const uint8_t *rep, size_t replen, const char *err)
{
	struct probe_vt v;

	if (probe_vt_decode(rep, replen, &v) < 0)
		return fail(c->cmd, "%s: the server does not take verbs tests (%s)", c->target, err);
	if (v.status == EMSGSIZE)
		return fail(c->cmd, "%s: size %u is beyond the server's limit of %u bytes", c->target,
			    c->o.size, v.size);
	if (v.status == ENOMEM)
		return fail(c->cmd, "%s: the server cannot take %u x %u bytes: more than its "
			    "--max-mem has free (256M unless set)", c->target, c->o.depth, c->o.size);
	return fail(c->cmd, "%s: the server refused: %s", c->target, strerror(v.status));
}

int vt_open(struct vt_client **out, const char *cmd, const struct xuri *u,
	    const struct vt_opts *o)
{
	struct vt_client *c = calloc(1, sizeof(*c));
	struct probe_vt req = { o->op, (uint8_t)((o->imm ? PROBE_VT_IMM : 0) |
				(o->lat ? PROBE_VT_LAT : 0)), 0, o->size, o->depth };
	uint8_t priv[PROBE_VT_LEN], rep[XRC_PRIV_MAX];
	size_t replen = 0;
	struct xrc_opts xo = { 0 };
	struct xrc_dom *d;
	struct xrc_wc wc;
	char err[256];
	int rc;

	*out = c;
	if (!c)
		return fail(cmd, "out of memory");
	c->cmd = cmd;
	c->o = *o;
	c->slot = slot_len(o->size);
	if (xuri_format(u, c->target, sizeof(c->target)) < 0)
		snprintf(c->target, sizeof(c->target), "%s://?", xuri_scheme_name(u->scheme));
	xo.sq_depth = o->depth + 4;
	xo.rq_depth = o->depth + 2;
	xo.max_send = (uint32_t)c->slot;
	xo.max_inline = o->inline_set ? o->inline_max : 0;
	xo.timeout_ns = VT_TIMEOUT_NS;
	probe_vt_encode(&req, priv);
	if (!(c->c = xrc_connect(u, &xo, priv, sizeof(priv), rep, &replen, err, sizeof(err)))) {
		if (errno == ECONNREFUSED && replen)
			return refused(c, rep, replen, err);
		return fail(cmd, "%s", err);
	}
	c->inl = o->inline_set && o->inline_max < xrc_max_inline(c->c) ? o->inline_max
									 : xrc_max_inline(c->c);
	d = xrc_domain(c->c);
	c->tx = aligned_alloc(4096, (c->slot * o->depth + 4095) / 4096 * 4096);
	c->rx = aligned_alloc(4096, (c->slot * o->depth + 4095) / 4096 * 4096);
	if (!c->tx || !c->rx)
		return fail(cmd, "out of memory for %u x %u bytes", o->depth, o->size);
	/* every slot the same bytes: whichever write lands last leaves them */
	for (size_t i = 0; i < c->slot * o->depth; i++)
		c->tx[i] = (uint8_t)(i % c->slot * 13 + 1);
	memset(c->rx, 0, c->slot * o->depth);
	if (!(c->txmr = xrc_reg(d, c->tx, c->slot * o->depth, XRC_ACCESS_LOCAL_WRITE, err,
				sizeof(err))) ||
	    !(c->rxmr = xrc_reg(d, c->rx, c->slot * o->depth,
				XRC_ACCESS_LOCAL_WRITE | XRC_ACCESS_REMOTE_WRITE, err, sizeof(err))) ||
	    !(c->memmr = xrc_reg(d, c->mem, sizeof(c->mem), XRC_ACCESS_LOCAL_WRITE, err,
				 sizeof(err))))
		return fail(cmd, "%s: registering memory: %s", c->target, err);
	/* the server's buffer comes first; then (send latency) its answers */
	rc = xrc_post_recv(c->c, &(struct xrc_sge){ c->mem[1], PROBE_VT_MEM_LEN, c->memmr }, 0);
	if (rc == 0 && o->lat && o->op != PROBE_VT_READ)
		rc = xrc_post_recv(c->c, &(struct xrc_sge){ c->rx, (uint32_t)c->slot, c->rxmr }, 1);
	if (rc < 0)
		return vt_fail(c, "posting receives", rc);
	/* ours: where a write latency test's answers land */
	probe_vt_mem_encode(&(struct probe_vt_mem){ (uintptr_t)c->rx, c->rxmr->rkey,
						  (uint32_t)(c->slot * o->depth) }, c->mem[0]);
	rc = xrc_post_send(c->c, &(struct xrc_sge){ c->mem[0], PROBE_VT_MEM_LEN, c->memmr }, 1, 0,
			   XRC_SIGNALED);
	if (rc < 0)
		return vt_fail(c, "sending our buffer", rc);
	for (int got = 0; got < 2;) {
		if ((rc = next_wc(c, &wc, xtime_ns() + VT_TIMEOUT_NS)) < 0)
			return EXIT_FAIL;
		if (rc == 0)
			return fail(cmd, "%s: the server did not name its buffer within 5 s", c->target);
		if (wc.op == XRC_OP_RECV &&
		    probe_vt_mem_decode(c->mem[1], wc.len, &c->peer) < 0)
			return fail(cmd, "%s: the server named its buffer in %u bytes", c->target,
				    wc.len);
		got++;
	}
	if (c->peer.len < o->size)
		return fail(cmd, "%s: the server's buffer holds %u bytes, not %u", c->target,
			    c->peer.len, o->size);
	return EXIT_OK;
}

int vt_once(struct vt_client *c, uint64_t timeout_ns, uint64_t *ns)
{
	uint64_t t0 = xtime_ns(), until = t0 + timeout_ns, seq = c->seq++;
	uint32_t size = c->o.size;
	uint8_t v = round_byte(seq);
	volatile uint8_t *last = c->rx + size - 1;
	/* a write's answer is the server's write into our buffer: watched */
	bool watch = c->o.op == PROBE_VT_WRITE && !c->o.imm;
	bool completed = false, answered = c->o.op == PROBE_VT_READ;
	struct xrc_wc wc;
	int rc;

	if (c->o.op == PROBE_VT_WRITE)
		c->tx[size - 1] = v;	/* latency tests use slot 0 only */
	if ((rc = post_op(c, 0, flags_for(c, size))) < 0)
		return vt_fail(c, "post", rc);
	while (!completed || !answered) {
		if (watch && *last == v)
			answered = true;
		if ((rc = next_wc(c, &wc, watch ? 0 : until)) < 0)
			return rc;
		if (rc == 0) {
			if (xtime_ns() >= until || cli_stop_requested)
				return -ETIMEDOUT;
			continue;
		}
		switch (wc.op) {
		case XRC_OP_RECV:	/* a send latency test's answer */
			if (wc.len != size || memcmp(c->rx, c->tx, size))
				return vt_fail(c, "the answer differs from what was sent", EBADMSG);
			/* fall through */
		case XRC_OP_RECV_IMM:	/* a write latency test's answer (--imm) */
			answered = true;
			rc = xrc_post_recv(c->c, &(struct xrc_sge){ c->rx, (uint32_t)c->slot,
					   c->rxmr }, 1);
			if (rc < 0)
				return vt_fail(c, "posting a receive", rc);
			break;
		default:		/* our own operation */
			completed = true;
		}
	}
	*ns = xtime_ns() - t0;
	return 0;
}

int vt_stream(struct vt_client *c, uint64_t secs_ns, uint64_t *msgs, uint64_t *bytes,
	      uint64_t *last_ns)
{
	uint64_t end = xtime_ns() + secs_ns, posted = 0, done = 0;
	struct xrc_wc wc;
	int rc;

	*msgs = *bytes = 0;
	*last_ns = xtime_ns();
	for (;;) {
		uint64_t now = xtime_ns();

		cli_first_stop(&c->stopping);	/* no new operations; those in flight end */
		while (posted - done < c->o.depth && now < end && !c->stopping) {
			if ((rc = post_op(c, posted, flags_for(c, c->o.size))) < 0)
				return vt_fail(c, "post", rc);
			posted++;
		}
		if (posted == done)
			break;
		if ((rc = next_wc(c, &wc, now + VT_TIMEOUT_NS)) < 0)
			return rc;
		if (rc == 0 && cli_stop_requested && !c->stopping)
			continue;			/* the first signal came while waiting */
		if (rc == 0 && cli_stop_requested) {
			fail(c->cmd, "%s: stopped again: %llu operation(s) in flight not waited for",
			     c->target, (unsigned long long)(posted - done));
			return -EIO;
		}
		if (rc == 0)
			return vt_fail(c, "no completion within 5 s", ETIMEDOUT);
		done++;
		*msgs += 1;
		*bytes += c->o.size;
		*last_ns = xtime_ns();
	}
	return c->stopping ? -EINTR : 0;
}

int vt_verify(struct vt_client *c)
{
	uint32_t size = c->o.size;
	struct xrc_wc wc;
	int rc;

	cli_first_stop(&c->stopping);	/* after a ^C too; a second one ends it */
	/* The server's buffer into our receive area, by a read.  The server
	 * answers it after everything sent before it on the connection (a
	 * responder takes requests in order): its completion says every send
	 * and write arrived, so a bandwidth test's exit 0 means delivered. */
	memset(c->rx, 0, size);
	rc = xrc_post_read(c->c, &(struct xrc_sge){ c->rx, size, c->rxmr }, 1, c->peer.addr,
			   c->peer.rkey, UINT64_MAX, XRC_SIGNALED);
	if (rc < 0)
		return vt_fail(c, "read", rc);
	/* ours by its id: an operation a ^C left in flight completes first;
	 * a first stop signal now lets the check end, a second ends it */
	for (;;) {
		rc = next_wc(c, &wc, xtime_ns() + VT_TIMEOUT_NS);
		if (rc == 1 && wc.wr_id != UINT64_MAX)
			continue;
		if (rc == 0 && cli_first_stop(&c->stopping))
			continue;
		break;
	}
	if (rc == 0 && cli_stop_requested) {
		fail(c->cmd, "%s: stopped again: the check of the server's buffer not waited for",
		     c->target);
		return -EIO;
	}
	if (rc <= 0)
		return rc < 0 ? rc : vt_fail(c, "read", ETIMEDOUT);
	if (c->o.op == PROBE_VT_SEND)
		return 0;	/* answers were checked one by one, or counted */
	for (uint32_t i = 0; i < size; i++) {
		/* writes leave our slot's bytes (a latency test's last byte is
		 * its last round's); reads find the pattern */
		uint8_t want = c->o.op == PROBE_VT_READ ? pattern(i) : c->tx[i];

		if (c->rx[i] != want) {
			fail(c->cmd, "%s: byte %u of the server's buffer is %u, not %u", c->target, i,
			     c->rx[i], want);
			return -EIO;
		}
	}
	return 0;
}

const char *vt_target(const struct vt_client *c) { return c->target; }
uint32_t vt_inline(const struct vt_client *c) { return c->inl; }

void vt_close(struct vt_client *c)
{
	if (!c)
		return;
	xrc_close(c->c);	/* flushes: nothing uses the regions after */
	xrc_dereg(c->txmr);
	xrc_dereg(c->rxmr);
	xrc_dereg(c->memmr);
	free(c->tx);
	free(c->rx);
	free(c);
}

/* ------------------------------------------------------------------ server */

struct vt_sess {
	struct vt_sess *next;
	struct xrc *c;
	struct probe_vt v;
	char peer[64];
	size_t slot, len;
	uint32_t nslot;
	uint8_t *buf;			/* nslot slots, then our probe_vt_mem and
					 * the receive for the client's */
	struct xrc_mr *mr;
	struct probe_vt_mem them;
	bool named, got_them, fd_added;
	uint8_t expect;			/* write latency: the next round's byte */
	uint64_t ops;
	uint64_t deadline;		/* to name its buffer by */
	size_t charge;			/* of the server's memory budget */
};

struct vt_server {
	struct vt_sess *list;
	uint64_t *mem_used, mem_max;
	uint32_t max_size;
	bool verbose;
};

struct vt_server *vt_server_new(uint64_t *mem_used, uint64_t mem_max, uint32_t max_size,
				bool verbose)
{
	struct vt_server *s = calloc(1, sizeof(*s));

	if (s)
		*s = (struct vt_server){ NULL, mem_used, mem_max, max_size, verbose };
	return s;
}

static uint8_t *mine(struct vt_sess *t) { return t->buf + t->len; }
static uint8_t *theirs(struct vt_sess *t) { return t->buf + t->len + PROBE_VT_MEM_LEN; }

static void sess_free(struct vt_server *s, struct vt_sess *t)
{
	xrc_close(t->c);
	xrc_dereg(t->mr);
	free(t->buf);
	*s->mem_used -= t->charge;
	free(t);
}

/* Session t, unlinked, is over: said (-v says it as it said the start) */
static void sess_end(struct vt_server *s, struct vt_sess *t)
{
	xlog(s->verbose ? XLOG_WARN : XLOG_INFO, "%s: verbs test ended after %llu operations",
	     t->peer, (unsigned long long)t->ops);
	sess_free(s, t);
}

/* A client that just died still holds its share until its last bytes
 * are read (a write test leaves megabytes in the socket): sessions whose
 * peer is gone go now, before a request is refused for their memory. */
static void reap_gone(struct vt_server *s)
{
	for (struct vt_sess **pp = &s->list, *t; (t = *pp);) {
		if (t->c && !xrc_peer_gone(t->c)) {
			pp = &t->next;
			continue;
		}
		*pp = t->next;
		sess_end(s, t);
	}
}

static int post_slot(struct vt_sess *t, uint32_t i)
{
	return xrc_post_recv(t->c, &(struct xrc_sge){ t->buf + i * t->slot, (uint32_t)t->slot,
						      t->mr }, i);
}

bool vt_server_take(void *arg, struct xrc_req *r)
{
	struct vt_server *s = arg;
	size_t pdl;
	const void *pd = xrc_req_data(r, &pdl);
	struct probe_vt v, rep = { 0 };
	uint8_t out[PROBE_VT_LEN];
	struct xrc_opts xo = { 0 };
	struct vt_sess *t;
	char err[256];
	size_t need;

	if (!probe_vt_is(pd, pdl))
		return false;
	/* a reply the client can decode, whatever it asked */
	rep.op = PROBE_VT_WRITE;
	rep.size = s->max_size;
	rep.depth = 1;
	if (probe_vt_decode(pd, pdl, &v) < 0 || !v.size) {
		rep.status = EPROTO;
		goto reject;
	}
	rep.op = v.op;
	rep.flags = v.flags;
	rep.depth = v.depth;
	if (v.size > s->max_size) {
		rep.status = EMSGSIZE;
		goto reject;
	}
	need = slot_len(v.size) * v.depth + 2 * PROBE_VT_MEM_LEN;
	if (*s->mem_used + need + VT_CONN_COST > s->mem_max)
		reap_gone(s);
	if (*s->mem_used + need + VT_CONN_COST > s->mem_max) {
		rep.status = ENOMEM;
		goto reject;
	}
	if (!(t = calloc(1, sizeof(*t)))) {
		rep.status = ENOMEM;
		goto reject;
	}
	t->v = v;
	t->slot = slot_len(v.size);
	t->nslot = v.depth;
	t->len = t->slot * t->nslot;
	t->expect = round_byte(0);
	snprintf(t->peer, sizeof(t->peer), "%s", xrc_req_peer(r));
	xo.sq_depth = v.depth + 4;
	xo.rq_depth = v.depth + 2;
	xo.max_send = (uint32_t)t->slot;
	xo.timeout_ns = VT_TIMEOUT_NS;
	probe_vt_encode(&rep, out);
	if (!(t->c = xrc_accept(r, out, sizeof(out), &xo, err, sizeof(err)))) {
		xlog_warn("%s: verbs test: accept: %s", t->peer, err);
		free(t);
		return true;
	}
	/* the buffer, and what a connection costs besides (tcp's staging,
	 * queues): a flood of small sessions spends the budget too */
	t->charge = need + VT_CONN_COST;
	*s->mem_used += t->charge;
	t->deadline = xtime_ns() + VT_TIMEOUT_NS;
	t->buf = aligned_alloc(4096, (need + 4095) / 4096 * 4096);
	if (t->buf) {
		/* a read test reads what a reader can check; the others start
		 * from zeros (a write latency test watches for its bytes) */
		for (size_t i = 0; i < t->len; i++)
			t->buf[i] = v.op == PROBE_VT_READ ? pattern(i) : 0;
		t->mr = xrc_reg(xrc_domain(t->c), t->buf, need, XRC_ACCESS_LOCAL_WRITE |
				XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ, err, sizeof(err));
	}
	/* the client's buffer first; then, for sends and immediates, a
	 * receive per operation in flight */
	if (!t->buf || !t->mr ||
	    xrc_post_recv(t->c, &(struct xrc_sge){ theirs(t), PROBE_VT_MEM_LEN, t->mr },
			  WR_THEIRS) < 0) {
		xlog_warn("%s: verbs test: %s", t->peer, t->buf && !t->mr ? err : "out of memory");
		t->next = s->list;	/* freed with the others, at once */
		s->list = t;
		xrc_close(t->c);
		t->c = NULL;
		return true;
	}
	for (uint32_t i = 0; (v.op == PROBE_VT_SEND || v.flags & PROBE_VT_IMM) && i < t->nslot; i++)
		if (post_slot(t, i) < 0)
			break;
	if (s->verbose)
		xlog(XLOG_WARN, "%s: verbs test: %s%s %s, %u bytes, %u in flight", t->peer,
		     vt_op_name(v.op), v.flags & PROBE_VT_IMM ? " with immediate" : "",
		     v.flags & PROBE_VT_LAT ? "latency" : "bandwidth", v.size, v.depth);
	t->next = s->list;
	s->list = t;
	return true;

reject:
	probe_vt_encode(&rep, out);
	xlog_info("%s: verbs test refused: %s", xrc_req_peer(r), strerror(rep.status));
	xrc_reject(r, out, sizeof(out));
	return true;
}

/* One completion of session t: 0, or -1 when it must go. */
static int sess_wc(struct vt_sess *t, const struct xrc_wc *wc)
{
	uint32_t i = (uint32_t)wc->wr_id;
	bool lat = t->v.flags & PROBE_VT_LAT, imm = t->v.flags & PROBE_VT_IMM;
	bool sends = t->v.op == PROBE_VT_SEND;
	unsigned fl = XRC_SIGNALED;

	if (wc->status) {
		xlog_info("%s: verbs test: %s", t->peer, strerror(-wc->status));
		return -1;
	}
	if (wc->op == XRC_OP_RECV || wc->op == XRC_OP_RECV_IMM) {
		/* what the test has: its buffer by a SEND first, then sends
		 * (send tests) or immediates (--imm) into slots */
		bool ok = i == WR_THEIRS ? wc->op == XRC_OP_RECV :
			  i < t->nslot && (wc->op == XRC_OP_RECV ? sends : imm) && t->got_them;

		if (!ok) {
			xlog_info("%s: verbs test: the client sent what its test has not", t->peer);
			return -1;
		}
	}
	switch (wc->op) {
	case XRC_OP_RECV:
		if (i == WR_THEIRS) {	/* the client's buffer */
			if (probe_vt_mem_decode(theirs(t), wc->len, &t->them) < 0)
				return -1;
			t->got_them = true;
			if (!sends && !imm)
				return xrc_post_recv(t->c, &(struct xrc_sge){ theirs(t),
						     PROBE_VT_MEM_LEN, t->mr }, WR_CATCH) < 0 ? -1 : 0;
			return 0;
		}
		t->ops++;
		if (!lat)
			return post_slot(t, i) < 0 ? -1 : 0;
		/* send latency: the message back from where it landed, its
		 * receive up again first -- the client may send the next as
		 * soon as the answer arrives, which can be before the post of
		 * the answer returns (Soft-RoCE sends inside it): a receive
		 * posted after would meet the next ping late, answered with
		 * an RNR NAK and a retry 655 ms later.  It cannot land on
		 * these bytes before they are out: the client sends the next
		 * only once the answer has arrived. */
		if (post_slot(t, i) < 0)
			return -1;
		if (wc->len <= xrc_max_inline(t->c))
			fl |= XRC_INLINE;
		struct xrc_sge sg = { t->buf + i * t->slot, wc->len, t->mr };

		return (imm ? xrc_post_send_imm(t->c, &sg, 1, wc->imm, i, fl)
			    : xrc_post_send(t->c, &sg, 1, i, fl)) < 0 ? -1 : 0;
	case XRC_OP_RECV_IMM:	/* a write with an immediate landed */
		t->ops++;
		if (post_slot(t, i) < 0)
			return -1;
		if (!lat)
			return 0;
		if (t->v.size <= xrc_max_inline(t->c))
			fl |= XRC_INLINE;
		return xrc_post_write(t->c, &(struct xrc_sge){ t->buf, t->v.size, t->mr }, 1,
				      t->them.addr, t->them.rkey, true, wc->imm, UINT32_MAX - 1,
				      fl) < 0 ? -1 : 0;
	default:		/* our sends and writes */
		return 0;
	}
}

int vt_server_poll(struct vt_server *s)
{
	int work = 0;

	for (struct vt_sess **pp = &s->list, *t; (t = *pp);) {
		struct xrc_wc wc[16];
		int n = t->c ? xrc_poll(t->c, wc, 16) : -1;
		bool gone = n < 0 || !t->c || xrc_state(t->c) == XRC_DOWN;

		for (int k = 0; k < n && !gone; k++)
			gone = sess_wc(t, &wc[k]) < 0;
		if (!gone && !t->got_them && xtime_ns() > t->deadline) {
			xlog_info("%s: verbs test: no buffer named within 5 s", t->peer);
			gone = true;
		}
		if (!gone && !t->named && xrc_state(t->c) == XRC_UP) {
			/* up: name our buffer (the client's first receive) */
			probe_vt_mem_encode(&(struct probe_vt_mem){ (uintptr_t)t->buf, t->mr->rkey,
								  (uint32_t)t->len }, mine(t));
			gone = xrc_post_send(t->c, &(struct xrc_sge){ mine(t), PROBE_VT_MEM_LEN,
								     t->mr }, 1, UINT32_MAX,
					     XRC_SIGNALED) < 0;
			t->named = true;
		}
		/* write latency: the client's bytes in our buffer are its ping,
		 * and they go back into its buffer */
		if (!gone && t->v.op == PROBE_VT_WRITE && (t->v.flags & PROBE_VT_LAT) &&
		    !(t->v.flags & PROBE_VT_IMM) && t->got_them) {
			work++;		/* memory is watched, not signalled */
			if (((volatile uint8_t *)t->buf)[t->v.size - 1] == t->expect) {
				unsigned fl = XRC_SIGNALED |
					      (t->v.size <= xrc_max_inline(t->c) ? XRC_INLINE : 0);

				t->ops++;
				t->expect = round_byte(t->ops);
				gone = xrc_post_write(t->c, &(struct xrc_sge){ t->buf, t->v.size,
						      t->mr }, 1, t->them.addr, t->them.rkey,
						      false, 0, UINT32_MAX - 2, fl) < 0;
			}
		}
		if (gone) {
			*pp = t->next;
			sess_end(s, t);
			work++;
			continue;
		}
		work += n > 0 ? n : 0;
		pp = &t->next;
	}
	return work;
}

bool vt_server_arm(struct vt_server *s)
{
	/* bytes waiting for the socket (a read's answer, say): nothing
	 * would wake us to send them (the fds are watched for input) */
	for (struct vt_sess *t = s->list; t; t = t->next)
		if (t->c && (xrc_tx_pending(t->c) || xrc_arm(t->c) != 0))
			return true;
	return false;
}

int vt_server_new_fd(struct vt_server *s)
{
	for (struct vt_sess *t = s->list; t; t = t->next)
		if (t->c && !t->fd_added) {
			t->fd_added = true;
			return xrc_fd(t->c);
		}
	return -1;
}

void vt_server_free(struct vt_server *s)
{
	if (!s)
		return;
	while (s->list) {
		struct vt_sess *t = s->list;

		s->list = t->next;
		sess_free(s, t);
	}
	free(s);
}
