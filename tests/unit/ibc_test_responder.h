/* A responder thread for the requester's tests: ibc_srv over an xdg
 * endpoint (udp:// in the host, ud:// in the VM) serving the page store of
 * ibc_test_store.h, with faults a test switches on by setting mode:
 *
 *   RESP_SILENT  requests are read and dropped (lost on the way)
 *   RESP_HOLD    replies are kept instead of sent (a slow responder)
 *   RESP_FLUSH   the kept replies go out now, late; back to RESP_NORMAL
 *   RESP_LOSSY   a datagram in 23 is lost, and replies go in bursts so
 *                that the requester finds several waiting */
#ifndef XPRT_TEST_IBC_RESPONDER_H
#define XPRT_TEST_IBC_RESPONDER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/xtime.h"
#include "ibcache/ibc_srv.h"
#include "xprt/xdg.h"
#include "ibc_test_store.h"

enum { RESP_NORMAL, RESP_SILENT, RESP_HOLD, RESP_FLUSH, RESP_LOSSY };

struct resp_kept {
	struct xdg_addr *to;
	uint32_t qkey, len;
	uint8_t b[9000];
};

struct responder {
	struct xdg *d;
	struct ibc_srv *s;
	pthread_t t;
	atomic_bool stop;
	atomic_int mode;
	struct resp_kept *kept;
	int nkept, maxkept;
	unsigned nsent;
};

static void resp_send(struct responder *r, const struct xdg_dgram *g)
{
	while (xdg_send_dgrams(r->d, g, 1, 0) != 1)
		xdg_poll(r->d, NULL, 0);
}

static void resp_out(struct responder *r, const struct ibc_out *o, int mode)
{
	struct xdg_dgram g = { .to = o->peer, .hdr = o->hdr, .hlen = o->hlen, .buf = o->buf,
			       .len = o->len, .qkey = o->qkey };

	/* a loss below the last segment too: the requester's receives
	 * then go to the holes */
	if (mode == RESP_LOSSY && ++r->nsent % 23 == 0)
		return;
	if (mode != RESP_HOLD) {
		resp_send(r, &g);
		return;
	}
	if (r->nkept < r->maxkept) {
		struct resp_kept *k = &r->kept[r->nkept++];

		*k = (struct resp_kept){ .to = o->peer, .qkey = o->qkey, .len = o->hlen + o->len };
		memcpy(k->b, o->hdr, o->hlen);
		memcpy(k->b + o->hlen, o->buf, o->len);
	}
}

static void *resp_main(void *p)
{
	struct responder *r = p;
	struct xdg_wc wc[64];
	struct ibc_out out[64];

	while (!atomic_load(&r->stop)) {
		uint64_t now = xtime_ns();
		int n = xdg_poll(r->d, wc, 64), mode = atomic_load(&r->mode), k;

		for (int i = 0; i < n; i++)
			if (wc[i].op == XDG_OP_RECV && !wc[i].status && mode != RESP_SILENT)
				ibc_srv_input(r->s, wc[i].src, wc[i].data, wc[i].len, now);
		if (mode == RESP_FLUSH) {
			for (int i = 0; i < r->nkept; i++)
				resp_send(r, &(struct xdg_dgram){ .to = r->kept[i].to,
								  .buf = r->kept[i].b,
								  .len = r->kept[i].len,
								  .qkey = r->kept[i].qkey });
			r->nkept = 0;
			atomic_store(&r->mode, RESP_NORMAL);
		}
		if (mode == RESP_LOSSY && ibc_srv_busy(r->s))
			usleep(2000);
		while ((k = ibc_srv_pump(r->s, out, 64, now)) > 0)
			for (int i = 0; i < k; i++)
				resp_out(r, &out[i], mode);
		if (!n)
			xdg_wait(r->d, 1000000);
	}
	return NULL;
}

/* Serves on d (the responder owns it from now on) with cfg's flavour and
 * MTU, keeping up to maxkept replies under RESP_HOLD. */
static struct responder *resp_start(struct xdg *d, const struct ibc_srv_cfg *cfg, int maxkept)
{
	struct responder *r = calloc(1, sizeof(*r));

	assert_non_null(r);
	assert_non_null(d);
	r->d = d;
	r->s = ibc_srv_new(cfg, store, NULL);
	r->maxkept = maxkept;
	r->kept = calloc((size_t)maxkept, sizeof(*r->kept));
	assert_true(r->s && r->kept);
	assert_int_equal(pthread_create(&r->t, NULL, resp_main, r), 0);
	return r;
}

static void resp_stop(struct responder *r)
{
	atomic_store(&r->stop, true);
	pthread_join(r->t, NULL);
	ibc_srv_free(r->s);
	xdg_close(r->d);
	free(r->kept);
	free(r);
}

/* Sets mode RESP_FLUSH and waits until the kept replies went out. */
static void resp_flush(struct responder *r)
{
	atomic_store(&r->mode, RESP_FLUSH);
	while (atomic_load(&r->mode) == RESP_FLUSH)
		usleep(1000);
}

#endif
