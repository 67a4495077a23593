/* A bare ping-pong over the reliable-connection layer (lib/xprt/xrc.h):
 * one connection, a SEND of SIZE bytes posted inline, the peer sends it
 * back; no ports, no engine, both ends busy-polling.  It is the floor the
 * port layer's round trip (`xprobe ping`) is measured against, and the
 * start of a bisection upwards from it (bench/README.md, "xprobe").
 *
 *   xrc_pingpong serve URI                 echo one client, then exit
 *                                          (prints "listening PORT")
 *   xrc_pingpong ping URI [COUNT [SIZE]]   COUNT round trips (10000) of
 *                                          SIZE bytes (8) after 300 not
 *                                          counted; prints
 *                                          "rtt_p50_ns=N rtt_avg_ns=N count=N"
 *
 * URI is tcp:// or rdma://.  Exit status 0, 1 on a failure (one line on
 * stderr), 2 on bad usage. */
#include "core/stats.h"
#include "core/uri.h"
#include "core/xtime.h"
#include "xprt/xrc.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEPTH	64		/* receives posted */
#define BUF	256		/* bytes per receive buffer */
#define WARMUP	300

static char rx[DEPTH][BUF];

static int die(const char *what, const char *why)
{
	fprintf(stderr, "xrc_pingpong: %s: %s\n", what, why);
	return 1;
}

static int post_all(struct xrc *c, struct xrc_mr *mr)
{
	for (uint64_t i = 0; i < DEPTH; i++) {
		struct xrc_sge sg = { rx[i], BUF, mr };
		int rc = xrc_post_recv(c, &sg, i);

		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The next receive completion (send completions are skipped), busy-polling.
 * 1, or -errno when the connection went down. */
static int next_recv(struct xrc *c, struct xrc_wc *out)
{
	for (;;) {
		struct xrc_wc wc[8];
		int n = xrc_poll(c, wc, 8);

		if (n < 0)
			return n;
		for (int i = 0; i < n; i++) {
			if (wc[i].status)
				return wc[i].status;
			if (wc[i].op == XRC_OP_RECV) {
				/* at most one message is in flight each way */
				*out = wc[i];
				return 1;
			}
		}
		if (xrc_state(c) == XRC_DOWN)
			return -ECONNRESET;
	}
}

static int serve(const struct xuri *u)
{
	const struct xrc_opts o = { .rq_depth = DEPTH, .max_send = BUF };
	char err[256];
	struct xrc_listener *l = xrc_listen(u, &o, err, sizeof(err));
	struct xrc_req *r = NULL;
	struct xrc_mr *mr;
	struct xrc *c;
	int rc;

	if (!l)
		return die("listen", err);
	printf("listening %u\n", xrc_listener_port(l));
	fflush(stdout);
	while (!r) {
		r = xrc_get_request(l, err, sizeof(err));
		if (!r && errno != EAGAIN)
			return die("listen", err);
	}
	if (!(c = xrc_accept(r, NULL, 0, &o, err, sizeof(err))))
		return die("accept", err);
	if (!(mr = xrc_reg(xrc_domain(c), rx, sizeof(rx), XRC_ACCESS_LOCAL_WRITE, err,
			   sizeof(err))))
		return die("register", err);
	if ((rc = post_all(c, mr)) < 0)
		return die("receive", strerror(-rc));
	for (uint64_t seq = 0;; seq++) {
		struct xrc_wc wc;
		struct xrc_sge sg;

		if (next_recv(c, &wc) < 0)
			break;	/* the client is done */
		rc = xrc_send_inline(c, rx[wc.wr_id], wc.len, NULL, 0, seq,
				     seq % 16 == 15 ? XRC_SIGNALED : 0);
		sg = (struct xrc_sge){ rx[wc.wr_id], BUF, mr };
		if (rc < 0 || (rc = xrc_post_recv(c, &sg, wc.wr_id)) < 0)
			return die("echo", strerror(-rc));
	}
	xrc_close(c);
	xrc_dereg(mr);
	xrc_listener_close(l);
	return 0;
}

static int ping(const struct xuri *u, unsigned long count, unsigned long size)
{
	const struct xrc_opts o = { .rq_depth = DEPTH, .max_send = BUF };
	/* the same histogram xprobe ping reports from */
	static struct xhist rtt;
	char err[256], msg[BUF];
	struct xrc_mr *mr;
	struct xrc *c = xrc_connect(u, &o, NULL, 0, NULL, NULL, err, sizeof(err));
	int rc;

	xhist_reset(&rtt);
	if (!c)
		return die("connect", err);
	if (size > xrc_max_inline(c))
		return die("ping", "SIZE is over the connection's inline limit");
	if (!(mr = xrc_reg(xrc_domain(c), rx, sizeof(rx), XRC_ACCESS_LOCAL_WRITE, err,
			   sizeof(err))))
		return die("register", err);
	if ((rc = post_all(c, mr)) < 0)
		return die("receive", strerror(-rc));
	memset(msg, 'p', sizeof(msg));
	for (unsigned long i = 0; i < count + WARMUP; i++) {
		uint64_t t0 = xtime_ns();
		struct xrc_wc wc;
		struct xrc_sge sg;

		rc = xrc_send_inline(c, msg, (uint32_t)size, NULL, 0, i,
				     i % 16 == 15 ? XRC_SIGNALED : 0);
		if (rc < 0)
			return die("send", strerror(-rc));
		if ((rc = next_recv(c, &wc)) < 0)
			return die("receive", strerror(-rc));
		if (i >= WARMUP)
			xhist_add(&rtt, xtime_ns() - t0);
		if (wc.len != size || memcmp(rx[wc.wr_id], msg, size))
			return die("receive", "the reply differs from what was sent");
		sg = (struct xrc_sge){ rx[wc.wr_id], BUF, mr };
		if ((rc = xrc_post_recv(c, &sg, wc.wr_id)) < 0)
			return die("receive", strerror(-rc));
	}
	printf("rtt_p50_ns=%llu rtt_avg_ns=%llu count=%lu\n",
	       (unsigned long long)xhist_pct(&rtt, 50), (unsigned long long)xhist_mean(&rtt), count);
	xrc_close(c);
	xrc_dereg(mr);
	return 0;
}

int main(int argc, char **argv)
{
	unsigned long count = 10000, size = 8;
	char err[256], *end;
	struct xuri u;

	if (argc < 3 || (strcmp(argv[1], "serve") && strcmp(argv[1], "ping")) ||
	    (!strcmp(argv[1], "serve") && argc != 3) || argc > 5) {
		fprintf(stderr, "usage: xrc_pingpong serve URI | ping URI [COUNT [SIZE]]\n");
		return 2;
	}
	if (xuri_parse(argv[2], 0, &u, err, sizeof(err)) < 0) {
		fprintf(stderr, "xrc_pingpong: %s\n", err);
		return 2;
	}
	if (u.scheme != XURI_TCP && u.scheme != XURI_RDMA) {
		fprintf(stderr, "xrc_pingpong: %s: not tcp:// or rdma://\n", argv[2]);
		return 2;
	}
	if (argc > 3 && ((count = strtoul(argv[3], &end, 10)) == 0 || *end)) {
		fprintf(stderr, "xrc_pingpong: COUNT '%s' is not a positive number\n", argv[3]);
		return 2;
	}
	if (argc > 4 && ((size = strtoul(argv[4], &end, 10)) == 0 || *end || size > BUF)) {
		fprintf(stderr, "xrc_pingpong: SIZE '%s' is not 1..%d\n", argv[4], BUF);
		return 2;
	}
	return !strcmp(argv[1], "serve") ? serve(&u) : ping(&u, count, size);
}
