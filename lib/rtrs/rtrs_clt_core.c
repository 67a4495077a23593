/* Sans-I/O RTRS client core: see rtrs_clt_core.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rtrs/rtrs_clt_core.h"
#include "rtrs/rtrs_wire.h"

int rtrs_core_init(struct rtrs_core *c, const struct rtrs_core_ops *ops, void *ctx,
		   enum rtrs_mp_policy policy, uint32_t reconnect_delay_ms, int32_t max_attempts,
		   uint64_t seed)
{
	memset(c, 0, sizeof(*c));
	c->ops = ops;
	c->ctx = ctx;
	c->policy = policy;
	c->reconnect_delay_ms = reconnect_delay_ms;
	c->max_attempts = max_attempts;
	c->rr_last = -1;
	c->held_head = c->held_tail = RTRS_CORE_NONE;
	c->done_head = c->done_tail = RTRS_CORE_NONE;
	c->rng = seed ? seed : 0x9e3779b97f4a7c15ull;
	c->down_timeout_ns = RTRS_CORE_FOREVER;
	c->cap = RTRS_MAX_PATHS_NUM;
	c->paths = calloc(c->cap, sizeof(*c->paths));
	return c->paths ? 0 : -ENOMEM;
}

int rtrs_core_set_depth(struct rtrs_core *c, uint32_t depth)
{
	if (c->depth || !depth || depth > RTRS_MAX_SESS_QUEUE_DEPTH)
		return -EINVAL;
	c->map = calloc((depth + 63) / 64, sizeof(*c->map));
	c->reqs = calloc(depth, sizeof(*c->reqs));
	if (!c->map || !c->reqs) {
		free(c->map);
		free(c->reqs);
		c->map = NULL;
		c->reqs = NULL;
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < depth; i++)
		c->reqs[i].id = i;
	c->depth = depth;
	return 0;
}

void rtrs_core_fini(struct rtrs_core *c)
{
	free(c->paths);
	free(c->map);
	free(c->reqs);
	memset(c, 0, sizeof(*c));
}

/* --- permits ------------------------------------------------------------ */

uint32_t rtrs_permit_get(struct rtrs_core *c)
{
	for (uint32_t w = 0; w < (c->depth + 63) / 64; w++) {
		uint64_t free_bits = ~c->map[w];
		uint32_t id;

		if (!free_bits)
			continue;
		id = w * 64 + (uint32_t)__builtin_ctzll(free_bits);
		if (id >= c->depth)
			break;
		c->map[w] |= 1ull << (id % 64);
		c->used++;
		return id;
	}
	return RTRS_CORE_NONE;
}

uint32_t rtrs_permit_get_io(struct rtrs_core *c)
{
	/* requests held across a reconnect keep their permits until the
	 * layer above has re-opened its devices (rtrs_core_resume), and that
	 * re-open is a request too: with every permit held it could never go
	 * out.  So IO leaves the last one to session messages. */
	if (c->depth > 1 && c->used + 1 >= c->depth)
		return RTRS_CORE_NONE;
	return rtrs_permit_get(c);
}

void rtrs_permit_put(struct rtrs_core *c, uint32_t id)
{
	if (id >= c->depth || !(c->map[id / 64] & (1ull << (id % 64))))
		return;
	c->map[id / 64] &= ~(1ull << (id % 64));
	c->used--;
}

/* --- paths --------------------------------------------------------------- */

int rtrs_core_path_index(const struct rtrs_core *c, const struct rtrs_cpath *p)
{
	for (unsigned i = 0; i < c->npaths; i++)
		if (c->paths[i] == p)
			return (int)i;
	return -ENOENT;
}

int rtrs_core_add_path(struct rtrs_core *c, struct rtrs_cpath *p)
{
	if (c->npaths >= c->cap)
		return -E2BIG;
	c->paths[c->npaths++] = p;
	return 0;
}

int rtrs_core_remove_path(struct rtrs_core *c, struct rtrs_cpath *p)
{
	int k = rtrs_core_path_index(c, p);

	if (k < 0)
		return k;
	memmove(&c->paths[k], &c->paths[k + 1], (c->npaths - (unsigned)k - 1) * sizeof(*c->paths));
	c->npaths--;
	/* RR goes on with the path that followed the removed one (the
	 * kernel moves its per-cpu pointers to the next path) */
	if (c->rr_last >= k)
		c->rr_last--;
	if (p->established && c->paths_up)
		c->paths_up--;
	return 0;
}

bool rtrs_core_any_connected(const struct rtrs_core *c)
{
	for (unsigned i = 0; i < c->npaths; i++)
		if (c->paths[i]->state == RTRS_CLT_CONNECTED)
			return true;
	return false;
}

bool rtrs_core_all_closed(const struct rtrs_core *c)
{
	for (unsigned i = 0; i < c->npaths; i++)
		if (c->paths[i]->state != RTRS_CLT_CLOSED)
			return false;
	return true;
}

bool rtrs_core_alive(const struct rtrs_core *c)
{
	for (unsigned i = 0; i < c->npaths; i++)
		if (c->paths[i]->state != RTRS_CLT_CLOSED || c->paths[i]->by_request)
			return true;
	return false;
}

static bool skipped(const struct rtrs_core_it *it, unsigned i)
{
	return it->skip[i / 64] & (1ull << (i % 64));
}

static void skip(struct rtrs_core_it *it, unsigned i)
{
	it->skip[i / 64] |= 1ull << (i % 64);
}

struct rtrs_cpath *rtrs_core_next_path(struct rtrs_core *c, struct rtrs_core_it *it)
{
	int best = -1;

	if (!c->npaths)
		return NULL;
	if (c->policy == RTRS_MP_RR) {
		/* get_next_path_rr: the path after the last one used, wrapping;
		 * the caller's loop skips paths that are not CONNECTED, at most
		 * npaths tries */
		while (it->tried < c->npaths) {
			unsigned i = (unsigned)(c->rr_last + 1) % c->npaths;

			it->tried++;
			c->rr_last = (int)i;
			if (c->paths[i]->state == RTRS_CLT_CONNECTED && !skipped(it, i)) {
				skip(it, i);
				return c->paths[i];
			}
		}
		return NULL;
	}
	for (unsigned i = 0; i < c->npaths; i++) {
		const struct rtrs_cpath *p = c->paths[i];

		if (p->state != RTRS_CLT_CONNECTED || skipped(it, i))
			continue;
		if (best < 0) {
			best = (int)i;
		} else if (c->policy == RTRS_MP_MIN_INFLIGHT) {
			if (p->inflight < c->paths[best]->inflight)
				best = (int)i;
		} else {
			/* hb_cur_latency starts at 0 in the kernel: a path
			 * without a measurement looks fastest */
			int64_t l = p->latency_ns < 0 ? 0 : p->latency_ns;
			int64_t b = c->paths[best]->latency_ns < 0 ? 0 : c->paths[best]->latency_ns;

			if (l < b)
				best = (int)i;
		}
	}
	if (best < 0)
		return NULL;
	skip(it, (unsigned)best);
	it->tried++;
	return c->paths[best];
}

/* --- queues --------------------------------------------------------------- */

static void q_push(struct rtrs_core *c, uint32_t *head, uint32_t *tail, struct rtrs_creq *r)
{
	r->next = RTRS_CORE_NONE;
	if (*tail == RTRS_CORE_NONE)
		*head = r->id;
	else
		c->reqs[*tail].next = r->id;
	*tail = r->id;
}

static struct rtrs_creq *q_pop(struct rtrs_core *c, uint32_t *head, uint32_t *tail)
{
	struct rtrs_creq *r;

	if (*head == RTRS_CORE_NONE)
		return NULL;
	r = &c->reqs[*head];
	*head = r->next;
	if (*head == RTRS_CORE_NONE)
		*tail = RTRS_CORE_NONE;
	r->next = RTRS_CORE_NONE;
	return r;
}

static void finish(struct rtrs_core *c, struct rtrs_creq *r, int err)
{
	r->err = err;
	r->done = true;
	r->held = false;
	r->path = NULL;
	q_push(c, &c->done_head, &c->done_tail, r);
}

static void hold(struct rtrs_core *c, struct rtrs_creq *r)
{
	r->held = true;
	r->path = NULL;
	c->nheld++;
	q_push(c, &c->held_head, &c->held_tail, r);
}

/* Posts r on the first path the policy offers that takes it.  0 or the
 * last post error (-ENOTCONN when no path is connected). */
static int dispatch(struct rtrs_core *c, struct rtrs_creq *r, bool failover)
{
	struct rtrs_core_it it = { 0 };
	struct rtrs_cpath *p;
	int rc = -ENOTCONN;

	while ((p = rtrs_core_next_path(c, &it))) {
		rc = c->ops->post(c->ctx, p, r);
		if (rc)
			continue;
		r->path = p;
		p->inflight++;
		if ((r->dir & 0xff) == RTRS_WRITE) {
			p->writes++;
			p->write_bytes += r->datalen;
		} else {
			p->reads++;
			p->read_bytes += r->datalen;
		}
		if (failover)
			p->failovers++;
		return 0;
	}
	return rc;
}

static void fail_held(struct rtrs_core *c, int err)
{
	struct rtrs_creq *r;

	while ((r = q_pop(c, &c->held_head, &c->held_tail))) {
		c->nheld--;
		finish(c, r, err);
	}
}

int rtrs_core_submit(struct rtrs_core *c, struct rtrs_creq *r, uint64_t now)
{
	r->in_use = true;
	r->done = false;
	r->held = false;
	r->failed_over = false;
	r->path = NULL;
	r->t0 = now;
	/* keep the order of what already waits; while the gate is shut only
	 * a session message goes (held requests or none: IO sent before the
	 * re-open is done could reach a device the server now numbers
	 * otherwise) */
	if ((c->gated ? (r->dir & RTRS_CLT_ADMIN) != 0 : c->nheld == 0) &&
	    dispatch(c, r, false) == 0)
		return 0;
	if (rtrs_core_all_closed(c)) {
		r->in_use = false;
		return -ENOTCONN;
	}
	if (c->down_failing) {
		r->in_use = false;
		return -ECONNABORTED;
	}
	hold(c, r);
	return 0;
}

int rtrs_core_complete(struct rtrs_core *c, struct rtrs_cpath *p, uint32_t msg_id, int err)
{
	struct rtrs_creq *r = rtrs_core_req(c, msg_id);

	if (!r || !r->in_use || r->path != p)
		return -EPROTO;
	p->inflight--;
	finish(c, r, err);
	return 0;
}

unsigned rtrs_core_kick(struct rtrs_core *c, uint64_t now)
{
	unsigned n = 0, left = c->nheld;
	struct rtrs_creq *r;

	(void)now;
	if (!c->nheld)
		return 0;
	if (rtrs_core_all_closed(c)) {
		fail_held(c, -ENOTCONN);
		return 0;
	}
	/* one pass in FIFO order; what no path takes goes back, in order.
	 * While the gate is shut only session messages go: the re-open that
	 * opens it may itself have been held, by an outage that came while
	 * it was in flight. */
	while (left-- && (r = q_pop(c, &c->held_head, &c->held_tail))) {
		c->nheld--;
		r->held = false;
		if (c->gated && !(r->dir & RTRS_CLT_ADMIN)) {
			hold(c, r);
			continue;
		}
		if (dispatch(c, r, r->failed_over) == 0) {
			r->failed_over = false;
			n++;
			continue;
		}
		hold(c, r);
		if (!rtrs_core_any_connected(c)) {
			/* nothing will take the rest either: keep their order */
			while (left-- && (r = q_pop(c, &c->held_head, &c->held_tail))) {
				c->nheld--;
				hold(c, r);
			}
			break;
		}
	}
	return n;
}

void rtrs_core_resume(struct rtrs_core *c)
{
	if (c->gate_pending && --c->gate_pending)
		return;		/* another user still re-opens */
	c->gated = false;
}

void rtrs_core_held_foreach(struct rtrs_core *c, int (*fn)(void *ctx, struct rtrs_creq *r),
			    void *ctx)
{
	uint32_t left = c->nheld;
	struct rtrs_creq *r;

	/* one pass: each popped and pushed back behind the rest, or finished */
	while (left-- && (r = q_pop(c, &c->held_head, &c->held_tail))) {
		int rc = fn(ctx, r);

		c->nheld--;
		if (rc < 0)
			finish(c, r, rc);
		else
			hold(c, r);
	}
}

unsigned rtrs_core_deliver(struct rtrs_core *c)
{
	unsigned n = 0;
	struct rtrs_creq *r;

	while (c->pending_ev) {
		enum rtrs_clt_link_ev ev = c->pending_ev & (1u << RTRS_CLT_LINK_EV_DISCONNECTED)
			? RTRS_CLT_LINK_EV_DISCONNECTED : RTRS_CLT_LINK_EV_RECONNECTED;

		c->pending_ev &= ~(1u << ev);
		if (c->ops->link_ev)
			c->ops->link_ev(c->ctx, ev);
		n++;
	}
	while ((r = q_pop(c, &c->done_head, &c->done_tail))) {
		void (*conf)(void *, int) = r->conf;
		void *priv = r->priv;
		int err = r->err;

		r->in_use = false;
		r->done = false;
		rtrs_permit_put(c, r->id);
		if (conf)
			conf(priv, err);
		n++;
	}
	return n;
}

uint32_t rtrs_core_busy(const struct rtrs_core *c)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < c->depth; i++)
		n += c->reqs[i].in_use && !c->reqs[i].done;
	return n;
}

/* --- path events -------------------------------------------------------------- */

static uint64_t jitter_ns(struct rtrs_core *c)
{
	/* xorshift64*: get_random_u32_below(RTRS_RECONNECT_SEED) ms */
	c->rng ^= c->rng >> 12;
	c->rng ^= c->rng << 25;
	c->rng ^= c->rng >> 27;
	return ((c->rng * 0x2545f4914f6cdd1dull) >> 33) % RTRS_RECONNECT_JITTER_MS * 1000000ull;
}

static void schedule(struct rtrs_core *c, struct rtrs_cpath *p, uint64_t now)
{
	p->state = RTRS_CLT_RECONNECTING;
	p->due_ns = now + (uint64_t)c->reconnect_delay_ms * 1000000ull + jitter_ns(c);
}

static void went_down(struct rtrs_core *c, struct rtrs_cpath *p, uint64_t now)
{
	if (!p->established)
		return;
	p->established = false;
	if (c->paths_up && --c->paths_up == 0) {
		c->pending_ev |= 1u << RTRS_CLT_LINK_EV_DISCONNECTED;
		c->pending_ev &= ~(1u << RTRS_CLT_LINK_EV_RECONNECTED);
		c->was_down = true;
		c->down_since_ns = now;
		if (c->down_timeout_ns == 0) {
			/* what waited for a path that would not take it, or
			 * for the layer above, fails with the rest */
			c->down_failing = true;
			fail_held(c, -ECONNABORTED);
		}
	}
}

/* Held requests wait for a path: not once every path has been down for
 * the bound (or, with bound 0, at all). */
static void wait_or_fail(struct rtrs_core *c, struct rtrs_creq *r)
{
	if (c->down_failing)
		finish(c, r, -ECONNABORTED);
	else
		hold(c, r);
}

void rtrs_core_path_down(struct rtrs_core *c, struct rtrs_cpath *p, bool reconnect, uint64_t now)
{
	went_down(c, p, now);
	if (reconnect)
		schedule(c, p, now);
	else
		p->state = RTRS_CLT_CLOSED;
	/* fail_all_outstanding_reqs + rtrs_clt_failover_req: in buffer id
	 * order, each to a live path with the same id, else it waits */
	for (uint32_t i = 0; i < c->depth; i++) {
		struct rtrs_creq *r = &c->reqs[i];

		if (!r->in_use || r->done || r->path != p)
			continue;
		p->inflight--;
		r->path = NULL;
		if (dispatch(c, r, true) == 0)
			continue;
		r->failed_over = true;	/* counted where it goes out later */
		wait_or_fail(c, r);
	}
	if (rtrs_core_all_closed(c))
		fail_held(c, -ENOTCONN);
}

void rtrs_core_path_up(struct rtrs_core *c, struct rtrs_cpath *p, uint64_t now)
{
	p->state = RTRS_CLT_CONNECTED;
	p->attempts = 0;
	if (p->ever_up)
		p->reconnects_ok++;
	p->ever_up = true;
	if (!p->established) {
		p->established = true;
		c->down_failing = false;
		if (++c->paths_up == 1 && c->was_down) {
			c->was_down = false;
			c->pending_ev |= 1u << RTRS_CLT_LINK_EV_RECONNECTED;
			c->gate_pending = c->hold_users;
			c->gated = c->hold_users > 0;
		}
	}
	rtrs_core_kick(c, now);
}

void rtrs_core_connect_failed(struct rtrs_core *c, struct rtrs_cpath *p, bool close_it,
			      uint64_t now)
{
	if (p->ever_up || p->attempts)
		p->reconnects_failed++;
	if (close_it) {
		p->state = RTRS_CLT_CLOSED;
		if (rtrs_core_all_closed(c))
			fail_held(c, -ENOTCONN);
		return;
	}
	schedule(c, p, now);
}

int rtrs_core_path_reconnect(struct rtrs_core *c, struct rtrs_cpath *p, uint64_t now)
{
	if (p->state == RTRS_CLT_CONNECTING)
		return -EBUSY;
	if (p->state == RTRS_CLT_CONNECTED)
		rtrs_core_path_down(c, p, true, now);
	p->state = RTRS_CLT_RECONNECTING;
	p->by_request = false;
	p->attempts = 0;
	p->due_ns = now;
	return 0;
}

/* When the held requests of a session with every path down give up. */
static uint64_t down_deadline(const struct rtrs_core *c)
{
	if (c->paths_up || !c->was_down || c->down_failing ||
	    c->down_timeout_ns == RTRS_CORE_FOREVER)
		return UINT64_MAX;
	if (c->down_timeout_ns > UINT64_MAX - 1 - c->down_since_ns)
		return UINT64_MAX - 1;
	return c->down_since_ns + c->down_timeout_ns;
}

unsigned rtrs_core_timers(struct rtrs_core *c, uint64_t now)
{
	unsigned n = 0;

	if (now >= down_deadline(c)) {
		c->down_failing = true;
		n += c->nheld;
		fail_held(c, -ECONNABORTED);
	}

	for (unsigned i = 0; i < c->npaths; i++) {
		struct rtrs_cpath *p = c->paths[i];

		if (p->state != RTRS_CLT_RECONNECTING || now < p->due_ns)
			continue;
		n++;
		/* rtrs_clt_reconnect_work: the attempt limit is checked when
		 * the attempt is due; -1 means forever */
		if (c->max_attempts >= 0 && p->attempts >= (uint32_t)c->max_attempts) {
			p->state = RTRS_CLT_CLOSED;
			if (rtrs_core_all_closed(c))
				fail_held(c, -ENOTCONN);
			continue;
		}
		p->attempts++;
		p->state = RTRS_CLT_CONNECTING;
		c->ops->connect(c->ctx, p, now);
	}
	return n;
}

uint64_t rtrs_core_next_timer(const struct rtrs_core *c)
{
	uint64_t t = down_deadline(c);

	for (unsigned i = 0; i < c->npaths; i++)
		if (c->paths[i]->state == RTRS_CLT_RECONNECTING && c->paths[i]->due_ns < t)
			t = c->paths[i]->due_ns;
	return t;
}
