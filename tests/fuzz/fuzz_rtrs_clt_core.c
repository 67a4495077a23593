/* The RTRS client's sans-I/O core (lib/rtrs/rtrs_clt_core.h) under any
 * sequence of events the I/O layer can produce: requests, answers (for
 * requests in flight or not, on the right path or not), paths failing,
 * coming up, failing to connect, manual reconnects, timers, posts that are
 * refused, outage gates.  Invariants after every event: every permit in
 * use is a request in flight, held or confirmed-to-be; each path's
 * inflight counts exactly its requests; held requests are on no path;
 * every confirmation runs once. */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rtrs/rtrs_clt_core.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

#define NP 4
#define DEPTH 16

struct fz {
	struct rtrs_core c;
	struct rtrs_cpath p[NP];
	int refuse[NP];
	unsigned confirmed[DEPTH];	/* confirmations per permit use */
	unsigned submitted[DEPTH];
};

static int fz_post(void *ctx, struct rtrs_cpath *p, struct rtrs_creq *r)
{
	struct fz *f = ctx;

	assert(p->state == RTRS_CLT_CONNECTED);
	assert(r->in_use && !r->done);
	return f->refuse[p - f->p];
}

static void fz_connect(void *ctx, struct rtrs_cpath *p, uint64_t now)
{
	(void)ctx;
	(void)now;
	assert(p->state == RTRS_CLT_CONNECTING);
}

static const struct rtrs_core_ops ops = { fz_post, fz_connect, NULL };

static void conf(void *priv, int err)
{
	unsigned *slot = priv;

	(void)err;
	(*slot)++;
}

static void check(struct fz *f)
{
	uint32_t used = 0, held = 0;
	uint32_t infl[NP] = { 0 };

	for (uint32_t i = 0; i < DEPTH; i++) {
		const struct rtrs_creq *r = &f->c.reqs[i];
		bool permit = f->c.map[0] & (1ull << i);

		assert(permit == r->in_use);
		used += permit;
		if (!r->in_use)
			continue;
		assert(!(r->held && r->path));
		assert(!(r->done && (r->held || r->path)));
		held += r->held;
		if (r->path) {
			assert(r->path->state == RTRS_CLT_CONNECTED);
			infl[r->path - f->p]++;
		}
		/* a permit in use has not been confirmed yet */
		assert(f->confirmed[i] + 1 == f->submitted[i]);
	}
	assert(used == f->c.used);
	assert(held == f->c.nheld);
	/* once the wait with every path down has run out, nothing waits */
	if (f->c.down_failing)
		assert(f->c.nheld == 0 && f->c.paths_up == 0);
	for (unsigned k = 0; k < f->c.npaths; k++) {
		const struct rtrs_cpath *p = f->c.paths[k];

		assert(p->inflight == infl[p - f->p]);
	}
}

/* Fails the held requests whose id has bit (*arg % 8) set. */
static int fail_some(void *ctx, struct rtrs_creq *r)
{
	unsigned *arg = ctx;

	return r->id & (1u << (*arg % 8)) ? -ESTALE : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct fz *f = calloc(1, sizeof(*f));
	uint64_t now = 1;
	size_t i = 0;

	if (!f || n < 1)
		goto out;
	if (rtrs_core_init(&f->c, &ops, f, d[0] % 3, 10, (int8_t)(d[0] >> 2) % 4 - 1, 7) ||
	    rtrs_core_set_depth(&f->c, DEPTH))
		goto out_fini;
	f->c.hold_users = d[0] >> 7;
	{	/* how long requests wait with every path down */
		static const uint64_t tmo[4] = { RTRS_CORE_FOREVER, 0, 5000000ull, 50000000ull };

		f->c.down_timeout_ns = tmo[(d[0] >> 4) & 3];
	}
	for (unsigned k = 0; k < NP; k++) {
		f->p[k].latency_ns = -1;
		rtrs_core_add_path(&f->c, &f->p[k]);
		rtrs_core_path_up(&f->c, &f->p[k], now);
	}
	for (i = 1; i + 1 < n; i += 2) {
		unsigned op = d[i] % 13, arg = d[i + 1];
		struct rtrs_cpath *p = &f->p[arg % NP];

		switch (op) {
		case 0: {	/* a request */
			uint32_t id = rtrs_permit_get(&f->c);
			struct rtrs_creq *r;

			if (id == RTRS_CORE_NONE)
				break;
			r = rtrs_core_req(&f->c, id);
			r->dir = (arg & 1) | (arg & 2 ? RTRS_CLT_ADMIN : 0);
			r->datalen = arg * 16u;
			r->conf = conf;
			r->priv = &f->confirmed[id];
			f->submitted[id]++;
			if (rtrs_core_submit(&f->c, r, now)) {
				rtrs_permit_put(&f->c, id);
				f->submitted[id]--;
			}
			break;
		}
		case 1:		/* an answer, maybe bogus */
			if (p->state == RTRS_CLT_CONNECTED)
				rtrs_core_complete(&f->c, p, arg % (DEPTH + 2), -(int)(arg >> 5));
			break;
		case 2:
			if (p->state == RTRS_CLT_CONNECTED)
				rtrs_core_path_down(&f->c, p, arg & 0x10, now);
			break;
		case 3:
			if (p->state == RTRS_CLT_CONNECTING)
				rtrs_core_path_up(&f->c, p, now);
			break;
		case 4:
			if (p->state == RTRS_CLT_CONNECTING)
				rtrs_core_connect_failed(&f->c, p, arg & 0x10, now);
			break;
		case 5:
			now += (uint64_t)arg * 1000000ull;
			rtrs_core_timers(&f->c, now);
			break;
		case 6:
			rtrs_core_kick(&f->c, now);
			break;
		case 7:
			rtrs_core_deliver(&f->c);
			break;
		case 8:
			if (p->state != RTRS_CLT_CONNECTING) {
				assert(rtrs_core_path_reconnect(&f->c, p, now) == 0);
			}
			break;
		case 9:
			f->refuse[arg % NP] = arg & 0x10 ? -ENOBUFS : 0;
			break;
		case 10:
			rtrs_core_resume(&f->c);
			break;
		case 11:
			f->c.policy = arg % 3;
			p->latency_ns = (int64_t)arg * 1000 - 1;
			break;
		case 12:	/* a re-open fails some of what waits */
			rtrs_core_held_foreach(&f->c, fail_some, &arg);
			break;
		}
		check(f);
	}
	/* closing everything confirms everything */
	for (unsigned k = 0; k < NP; k++)
		if (f->p[k].state == RTRS_CLT_CONNECTED)
			rtrs_core_path_down(&f->c, &f->p[k], false, now);
		else
			f->p[k].state = RTRS_CLT_CLOSED;
	rtrs_core_kick(&f->c, now);
	rtrs_core_deliver(&f->c);
	check(f);
	assert(f->c.used == 0);
	for (unsigned k = 0; k < DEPTH; k++)
		assert(f->confirmed[k] == f->submitted[k]);
out_fini:
	rtrs_core_fini(&f->c);
out:
	free(f);
	return 0;
}
