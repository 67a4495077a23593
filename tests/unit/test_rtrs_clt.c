/* The RTRS client's sans-I/O core (lib/rtrs/rtrs_clt_core.h): permits,
 * path selection policies, failover and reconnect bookkeeping, driven
 * with a fake transport. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "rtrs/rtrs_clt_core.h"

#define MS 1000000ull
#define NP 4

struct fake {
	struct rtrs_core c;
	struct rtrs_cpath p[NP];
	int post_err[NP];		/* what post returns on each path */
	int posted_on[1024];		/* per request id: path index, -1 */
	unsigned nposts;
	unsigned connects[NP];
	int conf_err[1024];
	unsigned nconf;
	unsigned ev_down, ev_up;
};

static int pidx(struct fake *f, const struct rtrs_cpath *p)
{
	return (int)(p - f->p);
}

static int fake_post(void *ctx, struct rtrs_cpath *p, struct rtrs_creq *r)
{
	struct fake *f = ctx;
	int i = pidx(f, p);

	if (f->post_err[i])
		return f->post_err[i];
	f->posted_on[r->id] = i;
	f->nposts++;
	return 0;
}

static void fake_connect(void *ctx, struct rtrs_cpath *p, uint64_t now)
{
	struct fake *f = ctx;

	(void)now;
	f->connects[pidx(f, p)]++;
}

static void fake_ev(void *ctx, enum rtrs_clt_link_ev ev)
{
	struct fake *f = ctx;

	if (ev == RTRS_CLT_LINK_EV_DISCONNECTED)
		f->ev_down++;
	else
		f->ev_up++;
}

static const struct rtrs_core_ops fops = { fake_post, fake_connect, fake_ev };

static void conf(void *priv, int err)
{
	int *slot = priv;

	*slot = err;
}

/* A core with n CONNECTED paths and the given depth. */
static struct fake *mk(unsigned n, uint32_t depth, enum rtrs_mp_policy pol, int32_t max_att)
{
	struct fake *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(rtrs_core_init(&f->c, &fops, f, pol, 1000, max_att, 42), 0);
	assert_int_equal(rtrs_core_set_depth(&f->c, depth), 0);
	for (unsigned i = 0; i < n; i++) {
		f->p[i].latency_ns = -1;
		assert_int_equal(rtrs_core_add_path(&f->c, &f->p[i]), 0);
		rtrs_core_path_up(&f->c, &f->p[i], 0);
	}
	for (unsigned i = 0; i < 1024; i++) {
		f->posted_on[i] = -1;
		f->conf_err[i] = 1;	/* 1: not confirmed */
	}
	return f;
}

static void done(struct fake *f)
{
	rtrs_core_fini(&f->c);
	free(f);
}

/* Submits one request; its id. */
static uint32_t sub(struct fake *f, int dir, uint32_t len, uint64_t now)
{
	uint32_t id = rtrs_permit_get(&f->c);
	struct rtrs_creq *r;

	assert_int_not_equal(id, RTRS_CORE_NONE);
	r = rtrs_core_req(&f->c, id);
	r->dir = dir;
	r->datalen = len;
	r->conf = conf;
	r->priv = &f->conf_err[id];
	assert_int_equal(rtrs_core_submit(&f->c, r, now), 0);
	return id;
}

/* --- permits ------------------------------------------------------------ */

static void permits_lowest_free_first(void **state)
{
	struct fake *f = mk(1, 70, RTRS_MP_MIN_INFLIGHT, -1);

	(void)state;
	for (uint32_t i = 0; i < 70; i++)
		assert_int_equal(rtrs_permit_get(&f->c), i);
	assert_int_equal(rtrs_permit_get(&f->c), RTRS_CORE_NONE);	/* all taken */
	rtrs_permit_put(&f->c, 66);
	rtrs_permit_put(&f->c, 3);
	rtrs_permit_put(&f->c, 3);	/* twice: harmless */
	assert_int_equal(f->c.used, 68);
	assert_int_equal(rtrs_permit_get(&f->c), 3);
	assert_int_equal(rtrs_permit_get(&f->c), 66);
	assert_int_equal(rtrs_permit_get(&f->c), RTRS_CORE_NONE);
	done(f);
}

/* IO leaves the last permit to session messages, so that an RNBD re-open
 * goes out even when every other permit is held across a reconnect; a
 * depth of 1 has no permit to spare. */
static void io_leaves_the_last_permit(void **state)
{
	struct fake *f = mk(1, 4, RTRS_MP_MIN_INFLIGHT, -1), *g = mk(1, 1, RTRS_MP_MIN_INFLIGHT, -1);

	(void)state;
	for (uint32_t i = 0; i < 3; i++)
		assert_int_equal(rtrs_permit_get_io(&f->c), i);
	assert_int_equal(rtrs_permit_get_io(&f->c), RTRS_CORE_NONE);
	assert_int_equal(rtrs_permit_get(&f->c), 3);
	assert_int_equal(rtrs_permit_get(&f->c), RTRS_CORE_NONE);
	rtrs_permit_put(&f->c, 3);
	rtrs_permit_put(&f->c, 1);
	assert_int_equal(rtrs_permit_get_io(&f->c), 1);
	assert_int_equal(rtrs_permit_get_io(&f->c), RTRS_CORE_NONE);
	assert_int_equal(rtrs_permit_get_io(&g->c), 0);
	done(f);
	done(g);
}

static void depth_is_set_once_and_bounded(void **state)
{
	struct rtrs_core c;

	(void)state;
	assert_int_equal(rtrs_core_init(&c, &fops, NULL, RTRS_MP_RR, 0, -1, 1), 0);
	assert_int_equal(rtrs_core_set_depth(&c, 0), -EINVAL);
	assert_int_equal(rtrs_core_set_depth(&c, 65536), -EINVAL);
	assert_int_equal(rtrs_core_set_depth(&c, 65535), 0);
	assert_int_equal(rtrs_core_set_depth(&c, 512), -EINVAL);
	rtrs_core_fini(&c);
}

/* --- policies ------------------------------------------------------------- */

static void min_inflight_takes_the_least_busy(void **state)
{
	struct fake *f = mk(3, 64, RTRS_MP_MIN_INFLIGHT, -1);

	(void)state;
	/* ties go in list order, so requests spread 0,1,2,0,1,2 */
	for (int i = 0; i < 6; i++)
		assert_int_equal(f->posted_on[sub(f, RTRS_READ, 4096, 0)], i % 3);
	/* path 1 finishes both: it is the least busy now */
	rtrs_core_complete(&f->c, &f->p[1], 1, 0);
	rtrs_core_complete(&f->c, &f->p[1], 4, 0);
	rtrs_core_deliver(&f->c);
	assert_int_equal(f->posted_on[sub(f, RTRS_WRITE, 512, 0)], 1);
	assert_int_equal(f->p[1].inflight, 1);
	assert_int_equal(f->p[1].writes, 1);
	assert_int_equal(f->p[1].write_bytes, 512);
	assert_int_equal(f->p[1].reads, 2);
	assert_int_equal(f->p[1].read_bytes, 8192);
	done(f);
}

static void round_robin_skips_paths_that_are_down(void **state)
{
	struct fake *f = mk(3, 64, RTRS_MP_RR, -1);

	(void)state;
	assert_int_equal(f->posted_on[sub(f, RTRS_READ, 0, 0)], 0);
	assert_int_equal(f->posted_on[sub(f, RTRS_READ, 0, 0)], 1);
	rtrs_core_path_down(&f->c, &f->p[2], true, 0);
	assert_int_equal(f->posted_on[sub(f, RTRS_READ, 0, 0)], 0);
	assert_int_equal(f->posted_on[sub(f, RTRS_READ, 0, 0)], 1);
	assert_int_equal(f->posted_on[sub(f, RTRS_READ, 0, 0)], 0);
	done(f);
}

static void min_latency_prefers_the_fastest(void **state)
{
	struct fake *f = mk(3, 64, RTRS_MP_MIN_LATENCY, -1);

	(void)state;
	f->p[0].latency_ns = 900;
	f->p[1].latency_ns = 300;
	f->p[2].latency_ns = 500;
	for (int i = 0; i < 4; i++)
		assert_int_equal(f->posted_on[sub(f, RTRS_READ, 0, 0)], 1);
	/* a path without a measurement counts as 0, as in the kernel */
	f->p[2].latency_ns = -1;
	assert_int_equal(f->posted_on[sub(f, RTRS_READ, 0, 0)], 2);
	done(f);
}

static void a_refused_post_tries_the_next_path(void **state)
{
	struct fake *f = mk(2, 64, RTRS_MP_MIN_INFLIGHT, -1);
	uint32_t id;

	(void)state;
	f->post_err[0] = -ENOBUFS;
	assert_int_equal(f->posted_on[sub(f, RTRS_READ, 0, 0)], 1);
	/* neither takes it: held, sent by a later kick */
	f->post_err[1] = -ENOBUFS;
	id = sub(f, RTRS_READ, 0, 0);
	assert_int_equal(f->posted_on[id], -1);
	assert_int_equal(f->c.nheld, 1);
	f->post_err[0] = 0;
	assert_int_equal(rtrs_core_kick(&f->c, 0), 1);
	assert_int_equal(f->posted_on[id], 0);
	assert_int_equal(f->p[0].failovers, 0);	/* not a failover */
	done(f);
}

/* --- failover ---------------------------------------------------------------- */

static void a_failed_path_hands_its_requests_over(void **state)
{
	struct fake *f = mk(2, 64, RTRS_MP_RR, -1);
	uint32_t a, b, c;

	(void)state;
	a = sub(f, RTRS_WRITE, 4096, 0);	/* path 0 */
	b = sub(f, RTRS_READ, 4096, 0);		/* path 1 */
	c = sub(f, RTRS_WRITE, 4096, 0);	/* path 0 */
	assert_int_equal(f->posted_on[a], 0);
	assert_int_equal(f->posted_on[c], 0);
	rtrs_core_path_down(&f->c, &f->p[0], true, 0);
	/* same buffer ids, now on path 1, counted there; nothing confirmed */
	assert_int_equal(f->posted_on[a], 1);
	assert_int_equal(f->posted_on[c], 1);
	assert_int_equal(f->p[1].failovers, 2);
	assert_int_equal(f->p[1].inflight, 3);
	assert_int_equal(f->p[0].inflight, 0);
	assert_int_equal(rtrs_core_deliver(&f->c), 0);
	assert_int_equal(f->conf_err[a], 1);
	/* a late answer on the failed path is refused */
	assert_int_equal(rtrs_core_complete(&f->c, &f->p[0], a, 0), -EPROTO);
	assert_int_equal(rtrs_core_complete(&f->c, &f->p[1], a, 0), 0);
	assert_int_equal(rtrs_core_complete(&f->c, &f->p[1], b, -EIO), 0);
	assert_int_equal(rtrs_core_complete(&f->c, &f->p[1], b, 0), -EPROTO);	/* twice */
	/* confirmations only from deliver, with the permit back first */
	assert_int_equal(f->conf_err[a], 1);
	assert_int_equal(rtrs_core_deliver(&f->c), 2);
	assert_int_equal(f->conf_err[a], 0);
	assert_int_equal(f->conf_err[b], -EIO);
	assert_int_equal(f->c.used, 1);
	assert_int_equal(rtrs_core_busy(&f->c), 1);
	done(f);
}

static void without_a_live_path_requests_wait(void **state)
{
	struct fake *f = mk(2, 64, RTRS_MP_MIN_INFLIGHT, -1);
	uint32_t a, b;

	(void)state;
	a = sub(f, RTRS_WRITE, 4096, 0);
	rtrs_core_path_down(&f->c, &f->p[0], true, 0);
	rtrs_core_path_down(&f->c, &f->p[1], true, 0);
	rtrs_core_deliver(&f->c);
	assert_int_equal(f->ev_down, 1);
	assert_int_equal(f->c.nheld, 1);
	b = sub(f, RTRS_READ, 0, 0);		/* new ones wait too */
	assert_int_equal(f->c.nheld, 2);
	assert_int_equal(f->conf_err[a], 1);
	/* path 1 comes back: both go out, in order, a counted as failover */
	f->nposts = 0;
	rtrs_core_path_up(&f->c, &f->p[1], 5 * MS);
	assert_int_equal(f->nposts, 2);
	assert_int_equal(f->posted_on[a], 1);
	assert_int_equal(f->posted_on[b], 1);
	/* a went 0 -> 1 when path 0 failed, then waited, then 1 again */
	assert_int_equal(f->p[1].failovers, 2);
	assert_int_equal(f->p[1].reconnects_ok, 1);
	rtrs_core_deliver(&f->c);
	assert_int_equal(f->ev_up, 1);
	done(f);
}

/* With a bound on the wait: held requests fail with -ECONNABORTED once
 * every path has been down that long, new ones at once, until a path is
 * up again; the deadline is a timer of its own. */
static void requests_wait_for_a_path_only_so_long(void **state)
{
	struct fake *f = mk(2, 64, RTRS_MP_MIN_INFLIGHT, -1);
	uint32_t a, b, id;
	struct rtrs_creq *r;

	(void)state;
	f->c.down_timeout_ns = 5000 * MS;
	f->c.reconnect_delay_ms = 60000;	/* the reconnects come later */
	a = sub(f, RTRS_WRITE, 4096, 0);
	rtrs_core_path_down(&f->c, &f->p[0], true, 10 * MS);
	assert_int_equal(rtrs_core_next_timer(&f->c), f->p[0].due_ns);	/* one path still up */
	rtrs_core_path_down(&f->c, &f->p[1], true, 100 * MS);
	b = sub(f, RTRS_READ, 0, 200 * MS);
	assert_int_equal(f->c.nheld, 2);
	assert_int_equal(rtrs_core_next_timer(&f->c), 5100 * MS);	/* 100 ms + 5 s */
	rtrs_core_path_up(&f->c, &f->p[0], 1020 * MS);		/* a short reconnect */
	assert_int_equal(f->c.nheld, 0);			/* both went out */
	rtrs_core_path_down(&f->c, &f->p[0], true, 2000 * MS);	/* all down again */
	assert_int_equal(f->c.nheld, 2);
	assert_int_equal(rtrs_core_next_timer(&f->c), 7000 * MS);	/* counted afresh */
	rtrs_core_timers(&f->c, 7000 * MS - 1);
	rtrs_core_deliver(&f->c);
	assert_int_equal(f->conf_err[a], 1);			/* still waiting */
	rtrs_core_timers(&f->c, 7000 * MS);
	assert_int_equal(f->c.nheld, 0);
	rtrs_core_deliver(&f->c);
	assert_int_equal(f->conf_err[a], -ECONNABORTED);
	assert_int_equal(f->conf_err[b], -ECONNABORTED);
	/* new requests fail at once, the paths still reconnecting */
	id = rtrs_permit_get(&f->c);
	r = rtrs_core_req(&f->c, id);
	r->dir = RTRS_READ;
	r->conf = conf;
	r->priv = &f->conf_err[id];
	assert_int_equal(rtrs_core_submit(&f->c, r, 7001 * MS), -ECONNABORTED);
	assert_false(r->in_use);
	/* ... until one is up again */
	rtrs_core_path_up(&f->c, &f->p[1], 8000 * MS);
	assert_int_equal(rtrs_core_submit(&f->c, r, 8000 * MS), 0);
	assert_int_equal(f->posted_on[id], 1);
	done(f);
}

/* Bound 0 is the kernel's rule: with no path connected a request fails at
 * once, and a dead path's requests fail over or fail. */
static void kernel_rule_fails_at_once(void **state)
{
	struct fake *f = mk(2, 64, RTRS_MP_MIN_INFLIGHT, -1);
	uint32_t a, b, id;
	struct rtrs_creq *r;

	(void)state;
	f->c.down_timeout_ns = 0;
	a = sub(f, RTRS_WRITE, 4096, 0);
	b = sub(f, RTRS_WRITE, 4096, 0);
	assert_int_not_equal(f->posted_on[a], f->posted_on[b]);	/* min-inflight */
	f->post_err[0] = f->post_err[1] = -ENOBUFS;
	uint32_t c = sub(f, RTRS_READ, 0, 5 * MS);		/* no path takes it: held */
	assert_int_equal(f->c.nheld, 1);
	f->post_err[0] = f->post_err[1] = 0;
	rtrs_core_path_down(&f->c, &f->p[0], true, 10 * MS);
	assert_int_equal(f->c.nheld, 1);			/* a failed over to 1 */
	rtrs_core_path_down(&f->c, &f->p[1], true, 20 * MS);
	assert_int_equal(f->c.nheld, 0);
	rtrs_core_deliver(&f->c);
	assert_int_equal(f->conf_err[a], -ECONNABORTED);
	assert_int_equal(f->conf_err[b], -ECONNABORTED);
	assert_int_equal(f->conf_err[c], -ECONNABORTED);
	id = rtrs_permit_get(&f->c);
	r = rtrs_core_req(&f->c, id);
	r->conf = conf;
	r->priv = &f->conf_err[id];
	assert_int_equal(rtrs_core_submit(&f->c, r, 30 * MS), -ECONNABORTED);
	assert_int_equal(rtrs_core_next_timer(&f->c), f->p[0].due_ns);	/* no deadline */
	done(f);
}

static void all_paths_closed_fails_everything(void **state)
{
	struct fake *f = mk(2, 64, RTRS_MP_MIN_INFLIGHT, -1);
	uint32_t a, id;
	struct rtrs_creq *r;

	(void)state;
	a = sub(f, RTRS_WRITE, 4096, 0);
	rtrs_core_path_down(&f->c, &f->p[0], true, 0);	/* reconnecting */
	rtrs_core_path_down(&f->c, &f->p[1], false, 0);	/* closed */
	assert_int_equal(f->c.nheld, 1);
	assert_false(rtrs_core_all_closed(&f->c));
	rtrs_core_path_down(&f->c, &f->p[0], false, 0);
	assert_true(rtrs_core_all_closed(&f->c));
	rtrs_core_deliver(&f->c);
	assert_int_equal(f->conf_err[a], -ENOTCONN);
	assert_int_equal(f->c.used, 0);
	id = rtrs_permit_get(&f->c);
	r = rtrs_core_req(&f->c, id);
	r->dir = RTRS_READ;
	assert_int_equal(rtrs_core_submit(&f->c, r, 0), -ENOTCONN);
	done(f);
}

/* --- reconnect ------------------------------------------------------------------ */

static void reconnect_after_the_delay_with_jitter(void **state)
{
	struct fake *f = mk(1, 8, RTRS_MP_MIN_INFLIGHT, -1);
	uint64_t t = 100 * MS;

	(void)state;
	rtrs_core_path_down(&f->c, &f->p[0], true, t);
	assert_int_equal(f->p[0].state, RTRS_CLT_RECONNECTING);
	/* reconnect_delay 1000 ms + 0..7 ms */
	assert_true(f->p[0].due_ns >= t + 1000 * MS && f->p[0].due_ns < t + 1008 * MS);
	assert_int_equal(rtrs_core_next_timer(&f->c), f->p[0].due_ns);
	assert_int_equal(rtrs_core_timers(&f->c, t + 999 * MS), 0);
	assert_int_equal(f->connects[0], 0);
	assert_int_equal(rtrs_core_timers(&f->c, f->p[0].due_ns), 1);
	assert_int_equal(f->connects[0], 1);
	assert_int_equal(f->p[0].state, RTRS_CLT_CONNECTING);
	assert_int_equal(f->p[0].attempts, 1);
	assert_int_equal(rtrs_core_next_timer(&f->c), UINT64_MAX);
	rtrs_core_connect_failed(&f->c, &f->p[0], false, t + 2000 * MS);
	assert_int_equal(f->p[0].reconnects_failed, 1);
	assert_int_equal(f->p[0].state, RTRS_CLT_RECONNECTING);
	rtrs_core_timers(&f->c, t + 4000 * MS);
	assert_int_equal(f->p[0].attempts, 2);
	rtrs_core_path_up(&f->c, &f->p[0], t + 4100 * MS);
	assert_int_equal(f->p[0].attempts, 0);
	assert_int_equal(f->p[0].reconnects_ok, 1);
	done(f);
}

static void jitter_stays_below_8_ms(void **state)
{
	struct fake *f = mk(1, 8, RTRS_MP_MIN_INFLIGHT, -1);
	bool seen_nonzero = false;

	(void)state;
	for (int i = 0; i < 200; i++) {
		rtrs_core_path_down(&f->c, &f->p[0], true, 0);
		assert_true(f->p[0].due_ns >= 1000 * MS && f->p[0].due_ns <= 1007 * MS);
		seen_nonzero |= f->p[0].due_ns != 1000 * MS;
		rtrs_core_path_up(&f->c, &f->p[0], 0);
	}
	assert_true(seen_nonzero);
	done(f);
}

static void attempts_run_out_and_the_path_closes(void **state)
{
	struct fake *f = mk(2, 8, RTRS_MP_MIN_INFLIGHT, 2);
	uint64_t t = 0;

	(void)state;
	rtrs_core_path_down(&f->c, &f->p[0], true, t);
	for (int i = 0; i < 2; i++) {
		t = f->p[0].due_ns;
		rtrs_core_timers(&f->c, t);
		assert_int_equal(f->p[0].state, RTRS_CLT_CONNECTING);
		rtrs_core_connect_failed(&f->c, &f->p[0], false, t);
	}
	assert_int_equal(f->connects[0], 2);
	rtrs_core_timers(&f->c, f->p[0].due_ns);	/* the third is not tried */
	assert_int_equal(f->connects[0], 2);
	assert_int_equal(f->p[0].state, RTRS_CLT_CLOSED);
	assert_int_equal(f->p[0].reconnects_failed, 2);
	/* a manual reconnect starts over */
	assert_int_equal(rtrs_core_path_reconnect(&f->c, &f->p[0], t), 0);
	assert_int_equal(f->p[0].attempts, 0);
	rtrs_core_timers(&f->c, t);
	assert_int_equal(f->connects[0], 3);
	assert_int_equal(rtrs_core_path_reconnect(&f->c, &f->p[0], t), -EBUSY);
	done(f);
}

static void zero_attempts_close_at_the_first_due_time(void **state)
{
	struct fake *f = mk(1, 8, RTRS_MP_MIN_INFLIGHT, 0);
	uint32_t a;

	(void)state;
	a = sub(f, RTRS_READ, 0, 0);
	rtrs_core_path_down(&f->c, &f->p[0], true, 0);
	assert_int_equal(f->conf_err[a], 1);	/* waits meanwhile */
	rtrs_core_timers(&f->c, f->p[0].due_ns);
	assert_int_equal(f->connects[0], 0);
	assert_int_equal(f->p[0].state, RTRS_CLT_CLOSED);
	rtrs_core_deliver(&f->c);
	assert_int_equal(f->conf_err[a], -ENOTCONN);
	done(f);
}

static void a_changed_queue_depth_closes_the_path(void **state)
{
	struct fake *f = mk(2, 8, RTRS_MP_MIN_INFLIGHT, -1);

	(void)state;
	rtrs_core_path_down(&f->c, &f->p[0], true, 0);
	rtrs_core_timers(&f->c, f->p[0].due_ns);
	rtrs_core_connect_failed(&f->c, &f->p[0], true, f->p[0].due_ns);
	assert_int_equal(f->p[0].state, RTRS_CLT_CLOSED);
	assert_int_equal(rtrs_core_next_timer(&f->c), UINT64_MAX);
	assert_int_equal(f->p[1].state, RTRS_CLT_CONNECTED);
	done(f);
}

static void link_events_follow_the_last_and_first_path(void **state)
{
	struct fake *f = mk(2, 8, RTRS_MP_MIN_INFLIGHT, -1);

	(void)state;
	rtrs_core_path_down(&f->c, &f->p[0], true, 0);
	rtrs_core_deliver(&f->c);
	assert_int_equal(f->ev_down, 0);
	rtrs_core_path_down(&f->c, &f->p[1], true, 0);
	rtrs_core_path_up(&f->c, &f->p[0], 0);
	rtrs_core_path_up(&f->c, &f->p[1], 0);
	rtrs_core_deliver(&f->c);
	assert_int_equal(f->ev_down, 1);
	assert_int_equal(f->ev_up, 1);
	/* nothing owed at open: paths that come up first send no event */
	assert_int_equal(rtrs_core_deliver(&f->c), 0);
	done(f);
}

static void after_an_outage_requests_wait_for_resume(void **state)
{
	struct fake *f = mk(2, 16, RTRS_MP_MIN_INFLIGHT, -1);
	uint32_t a, b, adm;

	(void)state;
	f->c.hold_users = 1;
	a = sub(f, RTRS_WRITE, 512, 0);
	rtrs_core_path_down(&f->c, &f->p[0], true, 0);
	rtrs_core_path_down(&f->c, &f->p[1], true, 0);
	rtrs_core_path_up(&f->c, &f->p[1], 0);
	/* RECONNECTED: a still waits, new IO waits behind it ... */
	assert_int_equal(f->posted_on[a], 1);	/* it went to 1 when 0 failed ... */
	assert_int_equal(f->c.nheld, 1);	/* ... and waits since 1 failed too */
	b = sub(f, RTRS_READ, 0, 0);
	assert_int_equal(f->c.nheld, 2);
	assert_int_equal(rtrs_core_kick(&f->c, 0), 0);
	/* ... but a session message goes out (RNBD's re-open) */
	adm = sub(f, RTRS_READ | RTRS_CLT_ADMIN, 36, 0);
	assert_int_equal(f->posted_on[adm], 1);
	rtrs_core_deliver(&f->c);
	assert_int_equal(f->ev_up, 1);
	rtrs_core_resume(&f->c);
	f->nposts = 0;
	assert_int_equal(rtrs_core_kick(&f->c, 0), 2);
	assert_int_equal(f->posted_on[b], 1);
	assert_int_equal(f->c.nheld, 0);
	/* a path that fails while others are up opens no gate */
	rtrs_core_path_up(&f->c, &f->p[0], 0);
	rtrs_core_path_down(&f->c, &f->p[0], true, 0);
	rtrs_core_path_up(&f->c, &f->p[0], 0);
	assert_false(f->c.gated);
	done(f);
}

/* Path 0 down and up again with one user holding through it: the gate
 * is shut. */
static void outage(struct fake *f)
{
	rtrs_core_path_down(&f->c, &f->p[0], true, 0);
	rtrs_core_path_up(&f->c, &f->p[0], 0);
	assert_true(f->c.gated);
}

/* An outage while the re-open is in flight holds the re-open too: once a
 * path is back it goes out, though the gate is shut, ahead of the IO. */
static void a_held_reopen_goes_out_through_the_gate(void **state)
{
	struct fake *f = mk(1, 16, RTRS_MP_MIN_INFLIGHT, -1);
	uint32_t a, adm;

	(void)state;
	f->c.hold_users = 1;
	a = sub(f, RTRS_WRITE, 512, 0);
	outage(f);
	adm = sub(f, RTRS_READ | RTRS_CLT_ADMIN, 36, 0);
	assert_int_equal(f->posted_on[adm], 0);
	f->posted_on[adm] = f->posted_on[a] = -1;
	outage(f);				/* it was held meanwhile */
	assert_int_equal(f->posted_on[adm], 0);		/* through the gate */
	assert_int_equal(f->posted_on[a], -1);		/* the IO waits */
	assert_int_equal(f->c.nheld, 1);
	rtrs_core_resume(&f->c);
	assert_int_equal(rtrs_core_kick(&f->c, 0), 1);
	assert_int_equal(f->posted_on[a], 0);
	done(f);
}

/* An idle session's outage: nothing waited, but IO that comes once a path
 * is back waits for the resume all the same (the re-open may give its
 * device another id); the re-open itself goes. */
static void io_after_an_idle_outage_waits_for_resume(void **state)
{
	struct fake *f = mk(1, 16, RTRS_MP_MIN_INFLIGHT, -1);
	uint32_t a, adm;

	(void)state;
	f->c.hold_users = 1;
	outage(f);
	assert_int_equal(f->c.nheld, 0);
	a = sub(f, RTRS_WRITE, 512, 0);
	assert_int_equal(f->posted_on[a], -1);
	assert_int_equal(f->c.nheld, 1);
	adm = sub(f, RTRS_READ | RTRS_CLT_ADMIN, 36, 0);
	assert_int_equal(f->posted_on[adm], 0);
	rtrs_core_resume(&f->c);
	assert_int_equal(rtrs_core_kick(&f->c, 0), 1);
	assert_int_equal(f->posted_on[a], 0);
	done(f);
}

/* Two users (two RNBD devices) hold through an outage: the requests that
 * waited go out only when both have resumed. */
static void the_gate_waits_for_every_user(void **state)
{
	struct fake *f = mk(1, 16, RTRS_MP_MIN_INFLIGHT, -1);
	uint32_t a;

	(void)state;
	f->c.hold_users = 2;
	rtrs_core_path_down(&f->c, &f->p[0], true, 0);
	a = sub(f, RTRS_WRITE, 512, 0);
	rtrs_core_path_up(&f->c, &f->p[0], 0);
	assert_true(f->c.gated);
	rtrs_core_resume(&f->c);		/* the first device re-opened */
	assert_true(f->c.gated);
	assert_int_equal(rtrs_core_kick(&f->c, 0), 0);
	assert_int_equal(f->posted_on[a], -1);
	rtrs_core_resume(&f->c);		/* and the second */
	assert_false(f->c.gated);
	assert_int_equal(rtrs_core_kick(&f->c, 0), 1);
	assert_int_equal(f->posted_on[a], 0);
	rtrs_core_resume(&f->c);		/* a stray resume opens nothing */
	assert_false(f->c.gated);
	done(f);
}

static int fix_some(void *ctx, struct rtrs_creq *r)
{
	uint32_t *fail_id = ctx;

	if (r->id == *fail_id)
		return -ESTALE;
	r->datalen += 1;			/* "rewritten in place" */
	return 0;
}

/* Before the gate opens, the layer above fails or rewrites what waits;
 * the rest keeps its order. */
static void held_requests_are_fixed_before_they_go(void **state)
{
	struct fake *f = mk(1, 16, RTRS_MP_MIN_INFLIGHT, -1);
	uint32_t a, b, c, fail_id;

	(void)state;
	f->c.hold_users = 1;
	rtrs_core_path_down(&f->c, &f->p[0], true, 0);
	a = sub(f, RTRS_WRITE, 512, 0);
	b = sub(f, RTRS_WRITE, 512, 0);
	c = sub(f, RTRS_WRITE, 512, 0);
	rtrs_core_path_up(&f->c, &f->p[0], 0);
	fail_id = b;
	rtrs_core_held_foreach(&f->c, fix_some, &fail_id);
	assert_int_equal(f->c.nheld, 2);
	rtrs_core_deliver(&f->c);
	assert_int_equal(f->conf_err[b], -ESTALE);
	assert_int_equal(f->conf_err[a], 1);
	rtrs_core_resume(&f->c);
	f->nposts = 0;
	assert_int_equal(rtrs_core_kick(&f->c, 0), 2);
	assert_int_equal(rtrs_core_req(&f->c, a)->datalen, 513);
	assert_int_equal(rtrs_core_req(&f->c, c)->datalen, 513);
	assert_int_equal(f->c.held_head, RTRS_CORE_NONE);
	done(f);
}

static void removing_a_path_keeps_round_robin_going(void **state)
{
	struct fake *f = mk(3, 8, RTRS_MP_RR, -1);

	(void)state;
	uint32_t a;

	assert_int_equal(f->posted_on[sub(f, RTRS_READ, 0, 0)], 0);
	a = sub(f, RTRS_READ, 0, 0);
	assert_int_equal(f->posted_on[a], 1);
	rtrs_core_path_down(&f->c, &f->p[1], false, 0);
	assert_int_equal(f->posted_on[a], 2);	/* failed over the RR way */
	assert_int_equal(rtrs_core_remove_path(&f->c, &f->p[1]), 0);
	assert_int_equal(rtrs_core_remove_path(&f->c, &f->p[1]), -ENOENT);
	assert_int_equal(f->c.npaths, 2);
	/* RR goes on after the path used last */
	assert_int_equal(f->posted_on[sub(f, RTRS_READ, 0, 0)], 0);
	assert_int_equal(f->posted_on[sub(f, RTRS_READ, 0, 0)], 2);
	done(f);
}

static void at_most_128_paths(void **state)
{
	struct rtrs_core c;
	static struct rtrs_cpath p[129];

	(void)state;
	assert_int_equal(rtrs_core_init(&c, &fops, NULL, RTRS_MP_RR, 0, -1, 1), 0);
	for (int i = 0; i < 128; i++)
		assert_int_equal(rtrs_core_add_path(&c, &p[i]), 0);
	assert_int_equal(rtrs_core_add_path(&c, &p[128]), -E2BIG);
	rtrs_core_fini(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(permits_lowest_free_first),
		cmocka_unit_test(io_leaves_the_last_permit),
		cmocka_unit_test(depth_is_set_once_and_bounded),
		cmocka_unit_test(min_inflight_takes_the_least_busy),
		cmocka_unit_test(round_robin_skips_paths_that_are_down),
		cmocka_unit_test(min_latency_prefers_the_fastest),
		cmocka_unit_test(a_refused_post_tries_the_next_path),
		cmocka_unit_test(a_failed_path_hands_its_requests_over),
		cmocka_unit_test(without_a_live_path_requests_wait),
		cmocka_unit_test(requests_wait_for_a_path_only_so_long),
		cmocka_unit_test(kernel_rule_fails_at_once),
		cmocka_unit_test(all_paths_closed_fails_everything),
		cmocka_unit_test(reconnect_after_the_delay_with_jitter),
		cmocka_unit_test(jitter_stays_below_8_ms),
		cmocka_unit_test(attempts_run_out_and_the_path_closes),
		cmocka_unit_test(zero_attempts_close_at_the_first_due_time),
		cmocka_unit_test(a_changed_queue_depth_closes_the_path),
		cmocka_unit_test(link_events_follow_the_last_and_first_path),
		cmocka_unit_test(after_an_outage_requests_wait_for_resume),
		cmocka_unit_test(the_gate_waits_for_every_user),
		cmocka_unit_test(a_held_reopen_goes_out_through_the_gate),
		cmocka_unit_test(io_after_an_idle_outage_waits_for_resume),
		cmocka_unit_test(held_requests_are_fixed_before_they_go),
		cmocka_unit_test(removing_a_path_keeps_round_robin_going),
		cmocka_unit_test(at_most_128_paths),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
