/* One gfcc request, requester side (ibc_rq.h). */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "ibcache/ibc_rq.h"

int ibc_rq_init(struct ibc_rq *r, const struct ibc_rq_cfg *c)
{
	struct gfcc_req *q = &r->req;
	struct gfcc_reasm_cfg rc;
	uint32_t n = c->npages, maxp = c->max_pages ? c->max_pages : gfcc_max_pages(c->psize);
	int taken, e;

	if (!c->pages || !n || (c->flavour != GFCC_UDP && c->flavour != GFCC_UD) ||
	    (c->flavour == GFCC_UDP && (!c->window || c->placed)) || (!c->placed && !c->dst))
		return -EINVAL;
	/* all but the big arrays: the page blocks gfcc_req_set_pages fills
	 * (npblk of them are read), the reassembly gfcc_reasm_init clears,
	 * and dst (taken entries copied below) -- 5 KiB a request otherwise */
	memset(q, 0, offsetof(struct gfcc_req, pblk));
	memset(&r->state, 0, offsetof(struct ibc_rq, dst) - offsetof(struct ibc_rq, state));
	q->id = c->id;
	q->obj = c->obj;
	q->qkey = c->qkey;
	q->cmd = GFCC_CMD_READ_REQ;
	q->psize = c->psize;
	q->has_ext = true;
	q->ext.xver = GFCC_X_VERSION;
	q->ext.seglen = (uint16_t)c->seglen;
	q->ext.window = c->flavour == GFCC_UDP ? c->window : 0;
	if (c->seglen > GFCC_SEGLEN_MAX)
		return -EINVAL;
	if (n > maxp)
		n = maxp;
	taken = gfcc_req_set_pages(q, c->pages, n, c->max_pblk);
	if (taken < 0)
		return taken;
	/* gfcc_obj's extent: from the first page to the end of the last */
	q->obj.off = (int64_t)(c->pages[0] * c->psize);
	q->obj.len = (int64_t)((c->pages[taken - 1] + 1 - c->pages[0]) * c->psize);
	if ((e = gfcc_req_check(q)))
		return e;
	if (!c->placed)
		memcpy(r->dst, c->dst, (size_t)taken * sizeof(*r->dst));
	rc = (struct gfcc_reasm_cfg){ .id = c->id, .qkey = c->qkey, .psize = c->psize,
				      .npage = (uint32_t)taken, .seglen = c->seglen,
				      .mode = c->placed ? GFCC_RA_PLACED
					      : c->flavour == GFCC_UDP ? GFCC_RA_UDP : GFCC_RA_UD,
				      .pages = c->placed ? NULL : r->dst };
	if ((e = gfcc_reasm_init(&r->ra, &rc)))
		return e;
	r->flavour = c->flavour;
	r->window = q->ext.window;
	r->t_start = r->t_progress = c->now;
	r->deadline = c->now + c->timeout_ns;
	/* a few rounds of doubling, then a steady pace: a dozen tries in
	 * the timeout even under heavy loss */
	r->rto_max = c->timeout_ns / 8;
	r->rto = c->rto_ns < r->rto_max ? c->rto_ns : r->rto_max;
	if (!r->rto)
		r->rto = 1;
	r->rto_base = r->rto;
	r->state = IBC_RQ_WAIT;
	return taken;
}

int ibc_rq_encode(const struct ibc_rq *r, uint8_t *buf, size_t cap)
{
	return gfcc_req_encode(&r->req, buf, cap);
}

static uint32_t allow_now(const struct ibc_rq *r)
{
	uint64_t a = r->window + r->ra.arrived + r->asked;

	return a > UINT32_MAX ? UINT32_MAX : (uint32_t)a;
}

static void ctl(struct ibc_rq *r, struct ibc_rq_out *out, struct gfcc_xmsg *m)
{
	int len;

	if (out->n == IBC_RQ_CTL_MAX)
		return;
	m->id = r->req.id;
	m->qkey = r->req.qkey;
	m->allow = allow_now(r);
	len = gfcc_xmsg_encode(m, out->msg[out->n], GFCC_X_MAX);
	if (len > 0)
		out->len[out->n++] = (uint32_t)len;
}

static void simple(struct ibc_rq *r, struct ibc_rq_out *out, uint8_t type)
{
	struct gfcc_xmsg m;

	memset(&m, 0, sizeof(m));
	m.type = type;
	ctl(r, out, &m);
}

/* RESENDs for the missing segments, at most `limit` of them named. */
static void ask(struct ibc_rq *r, struct ibc_rq_out *out, uint32_t limit)
{
	uint32_t from = 0;

	while (out->n < IBC_RQ_CTL_MAX && limit) {
		struct gfcc_xmsg m;
		uint32_t n = gfcc_reasm_resend(&r->ra, from, limit < GFCC_X_BITS_MAX ? limit :
					       GFCC_X_BITS_MAX, &m);

		if (!n)
			break;
		/* each segment named is credit for its resend (the contract:
		 * allow = window + arrived + asked) */
		r->asked += n;
		ctl(r, out, &m);
		from = (uint32_t)m.base + m.nbits;
		limit = limit > m.nbits ? limit - m.nbits : 0;
	}
}

static void finish(struct ibc_rq *r, enum ibc_rq_state st, int err, struct ibc_rq_out *out)
{
	r->state = st;
	r->err = err;
	/* the responder keeps state only for a windowed UDP request of more
	 * than one datagram (ibc_srv.h) */
	if (r->flavour == GFCC_UDP && r->window && out && !(r->ra.known && r->ra.lay.nseg == 1))
		simple(r, out, GFCC_X_FIN);
}

static void progress(struct ibc_rq *r, uint64_t now)
{
	if (!r->t_first)
		r->t_first = now;
	r->t_progress = now;
	r->rto = r->rto_base;	/* it came: the backoff is over */
}

static bool last_in(const struct ibc_rq *r)
{
	uint32_t last = r->ra.lay.nseg - 1;

	return r->ra.known && (r->ra.segmap[last / 64] >> (last % 64) & 1);
}

/* What a UDP datagram's arrival (result e) calls for. */
static int arrived(struct ibc_rq *r, int e, bool had_last, uint64_t now, struct ibc_rq_out *out)
{
	if (e < 0)
		return e;
	progress(r, now);
	if (e == GFCC_RA_DONE) {
		finish(r, IBC_RQ_DONE, (int)gfcc_reasm_error(&r->ra), out);
		return e;
	}
	if (r->flavour != GFCC_UDP)
		return e;
	if (!had_last && last_in(r)) {
		/* the end is in and holes remain: datagrams of one flow come
		 * in order, so those are lost -- ask now, not after rto */
		r->fast_resends++;
		ask(r, out, UINT32_MAX);
	}
	if (r->ra.arrived - r->credit_at >= (r->window / 4 ? r->window / 4 : 1) || out->n) {
		r->credit_at = r->ra.arrived;
		if (!out->n) {
			simple(r, out, GFCC_X_CREDIT);
			r->credits++;
		}
	}
	return e;
}

int ibc_rq_input(struct ibc_rq *r, const void *buf, size_t len, uint64_t now,
		 struct ibc_rq_out *out)
{
	bool had = last_in(r);

	out->request = false;
	out->n = 0;
	if (r->state != IBC_RQ_WAIT)
		return -EALREADY;
	return arrived(r, gfcc_reasm_input(&r->ra, buf, len), had, now, out);
}

int ibc_rq_input_hdr(struct ibc_rq *r, const void *hdr, size_t len, const void *res,
		     uint64_t now, struct ibc_rq_out *out)
{
	bool had = last_in(r);

	out->request = false;
	out->n = 0;
	if (r->state != IBC_RQ_WAIT)
		return -EALREADY;
	return arrived(r, gfcc_reasm_input_hdr(&r->ra, hdr, len, res), had, now, out);
}

int ibc_rq_placed(struct ibc_rq *r, size_t len, const void *res, uint64_t now)
{
	int e;

	if (r->state != IBC_RQ_WAIT)
		return -EALREADY;
	e = gfcc_reasm_placed(&r->ra, len, res);
	if (e < 0) {
		/* a positional scatter that went wrong once stays wrong */
		finish(r, IBC_RQ_FAILED, -EBADMSG, NULL);
		return e;
	}
	progress(r, now);
	if (e == GFCC_RA_DONE)
		finish(r, IBC_RQ_DONE, (int)gfcc_reasm_error(&r->ra), NULL);
	return e;
}

void ibc_rq_fail(struct ibc_rq *r, int err, struct ibc_rq_out *out)
{
	out->request = false;
	out->n = 0;
	if (r->state == IBC_RQ_WAIT)
		finish(r, IBC_RQ_FAILED, err, out);
}

/* Since when the request counts as silent.  A responder serves its
 * requests in turns: one that answered this request and has been heard
 * from on others since is busy, not deaf, and this request's turn is
 * coming -- up to three more rto, which bounds what a loss waits.  A
 * request nothing came for may itself be lost: one rto. */
static uint64_t quiet_since(const struct ibc_rq *r, uint64_t heard)
{
	uint64_t cap = r->t_progress + 3 * r->rto;

	if (!r->ra.got || heard <= r->t_progress)
		return r->t_progress;
	return heard < cap ? heard : cap;
}

void ibc_rq_timer(struct ibc_rq *r, uint64_t now, uint64_t heard, struct ibc_rq_out *out)
{
	out->request = false;
	out->n = 0;
	if (r->state != IBC_RQ_WAIT)
		return;
	if (now >= r->deadline) {
		finish(r, IBC_RQ_FAILED, -ETIMEDOUT, out);
		return;
	}
	if (heard > now)
		heard = now;
	if (r->flavour != GFCC_UDP || now - quiet_since(r, heard) < r->rto)
		return;
	r->retries++;
	if (!r->ra.got) {
		/* nothing came: the request may be lost (send it again: a
		 * responder that has it ignores the copy) or the first window
		 * (ask for it again) */
		out->request = true;
		ask(r, out, r->window);
	} else {
		ask(r, out, UINT32_MAX);
	}
	r->credit_at = r->ra.arrived;
	r->t_progress = now;
	r->rto = 2 * r->rto < r->rto_max ? 2 * r->rto : r->rto_max;
}

uint64_t ibc_rq_next_timer(const struct ibc_rq *r, uint64_t heard)
{
	uint64_t t;

	if (r->state != IBC_RQ_WAIT)
		return UINT64_MAX;
	if (r->flavour != GFCC_UDP)
		return r->deadline;
	t = quiet_since(r, heard) + r->rto;
	return t < r->deadline ? t : r->deadline;
}

bool ibc_rq_page_ok(const struct ibc_rq *r, uint32_t i)
{
	if (r->state == IBC_RQ_FAILED && r->flavour != GFCC_UDP)
		return false;
	if (r->state == IBC_RQ_DONE && r->err)
		return false;
	return gfcc_reasm_page_ok(&r->ra, i);
}

bool ibc_rq_clean(const struct ibc_rq *r)
{
	struct gfcc_layout full;

	if (r->state != IBC_RQ_DONE)
		return false;
	if (r->flavour == GFCC_UDP)
		return true;
	/* UD: a short reply leaves receive WRs posted for the pages that did
	 * not come */
	if (gfcc_layout_init(&full, r->req.psize, r->req.npage, r->ra.lay.seglen))
		return false;
	return r->ra.lay.nseg == full.nseg;
}
