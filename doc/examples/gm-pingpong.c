/* gm-pingpong -- a ping-pong over GM-style ports (lib/port/port.h), written
 * the way seed 001 draws a GM program: messages in DMA memory, receive
 * buffers provided per size class and priority, and one event loop that
 * hands every event it does not handle itself to xp_unknown(), where the
 * send callbacks run.
 *
 *   gm-pingpong serve URI            echo every message back, until killed
 *   gm-pingpong URI [COUNT [SIZE]]   COUNT round trips (default 1000) of
 *                                    SIZE bytes (default 8, at most 131064)
 *
 * URI: shm://NAME, tcp://HOST:PORT or rdma://HOST:PORT.  The client checks
 * every reply against what it sent and prints the average round trip; it
 * exits 0 only when every reply came back intact and every send succeeded.
 *
 * Build: make examples (build/examples/gm-pingpong).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/uri.h"
#include "core/xtime.h"
#include "port/port.h"

#define ECHO_PORT	2
#define MIN_SIZE	XP_MIN_SIZE
#define MAX_SIZE	17		/* messages up to 2^17 - 8 bytes */
#define PER_CLASS	4		/* buffers per size class and priority */
#define NBUF		(2 * (MAX_SIZE - MIN_SIZE + 1) * PER_CLASS)

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* A whole decimal number, or -1. */
static int number(const char *s, unsigned long *v)
{
	char *end;

	errno = 0;
	*v = strtoul(s, &end, 10);
	return *s >= '0' && *s <= '9' && !*end && !errno ? 0 : -1;
}

static int usage(void)
{
	fprintf(stderr, "usage: gm-pingpong serve URI\n"
			"       gm-pingpong URI [COUNT [SIZE]]\n");
	return 2;
}

/* ------------------------------------------------------------ the server */

struct buf {
	void *mem;
	unsigned size;
	enum xp_prio prio;
};

/* The echo is sent from the buffer the message arrived in; once the send
 * is done, the buffer goes back to the port for the next message. */
static void echoed(struct xp_port *p, void *ctx, enum xp_status st)
{
	struct buf *b = ctx;

	if (st != XP_SUCCESS)
		fprintf(stderr, "gm-pingpong: echo failed: %s\n", xp_strstatus(st));
	xp_provide_receive_buffer(p, b->mem, b->size, b->prio);
}

static int serve(struct xp_host *h)
{
	static struct buf bufs[NBUF];
	char err[256];
	struct xp_port *p = xp_open(h, ECHO_PORT, err, sizeof(err));
	uint8_t *mem;
	unsigned n = 0;

	if (!p) {
		fprintf(stderr, "gm-pingpong: %s\n", err);
		return 1;
	}
	/* One DMA region carved into every buffer: a message's buffer is
	 * found from its address. */
	if (!(mem = xp_dma_malloc(p, (size_t)NBUF << MAX_SIZE))) {
		perror("gm-pingpong: DMA memory");
		return 1;
	}
	for (unsigned prio = XP_LOW; prio <= XP_HIGH; prio++)
		for (unsigned size = MIN_SIZE; size <= MAX_SIZE; size++)
			for (unsigned k = 0; k < PER_CLASS; k++, n++) {
				bufs[n] = (struct buf){ mem + ((size_t)n << MAX_SIZE), size, prio };
				xp_provide_receive_buffer(p, bufs[n].mem, size, prio);
			}
	while (!stop) {
		struct xp_event ev;
		struct buf *b;
		int rc = xp_blocking_receive(p, &ev, XTIME_NS_PER_S, 50 * XTIME_NS_PER_US);

		if (rc <= 0)
			continue;	/* a second without events, or a signal */
		switch (ev.type) {
		case XP_RECV_EVENT:
		case XP_HIGH_RECV_EVENT:
			b = &bufs[((uint8_t *)ev.buffer - mem) >> MAX_SIZE];
			/* The host has a send token for every buffer, so an
			 * echo never waits for one. */
			rc = xp_send(p, ev.sender_node, ev.sender_port, ev.prio, ev.buffer,
				     ev.length, echoed, b);
			if (rc < 0) {
				fprintf(stderr, "gm-pingpong: echo: %s\n", strerror(-rc));
				xp_unknown(p, &ev);	/* the buffer goes back */
			}
			break;
		default:
			xp_unknown(p, &ev);
		}
	}
	xp_close(p);
	return 0;
}

/* ------------------------------------------------------------ the client */

struct ping {
	unsigned in_flight;
	enum xp_status failed;
};

static void sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	struct ping *g = ctx;

	(void)p;
	g->in_flight--;
	if (st != XP_SUCCESS && g->failed == XP_SUCCESS)
		g->failed = st;
}

static int ping(struct xp_host *h, uint32_t node, unsigned long count, size_t size)
{
	char err[256];
	struct xp_port *p = xp_open(h, 0, err, sizeof(err));
	unsigned cls = xp_min_size_for_length(size);
	struct ping g = { 0, XP_SUCCESS };
	uint8_t *tx, *rx;
	uint64_t t0;
	unsigned long i;

	if (!p) {
		fprintf(stderr, "gm-pingpong: %s\n", err);
		return 1;
	}
	tx = xp_dma_malloc(p, size ? size : 1);
	rx = xp_dma_malloc(p, xp_max_length_for_size(cls));
	if (!tx || !rx) {
		perror("gm-pingpong: DMA memory");
		return 1;
	}
	for (size_t k = 0; k < size; k++)
		tx[k] = (uint8_t)(k * 7 + 1);
	t0 = xtime_ns();
	for (i = 0; i < count && !stop && g.failed == XP_SUCCESS; i++) {
		bool back = false;
		int rc;

		memset(rx, 0, size);
		xp_provide_receive_buffer(p, rx, cls, XP_LOW);
		/* tx never changes, so the next ping need not wait for this
		 * one's callback: only for a send token */
		if ((rc = xp_send(p, node, ECHO_PORT, XP_LOW, tx, size, sent, &g)) < 0) {
			fprintf(stderr, "gm-pingpong: send: %s\n", strerror(-rc));
			return 1;
		}
		g.in_flight++;
		while (!back && !stop && g.failed == XP_SUCCESS) {
			struct xp_event ev;

			rc = xp_blocking_receive(p, &ev, 5 * XTIME_NS_PER_S, 50 * XTIME_NS_PER_US);
			if (rc == 0) {
				fprintf(stderr, "gm-pingpong: no reply within 5 s\n");
				return 1;
			}
			if (rc < 0)
				break;	/* a signal */
			switch (ev.type) {
			case XP_RECV_EVENT:
				if (ev.length != size || memcmp(rx, tx, size)) {
					fprintf(stderr, "gm-pingpong: reply %lu differs\n", i);
					return 1;
				}
				back = true;
				break;
			default:
				xp_unknown(p, &ev);	/* runs sent() */
			}
		}
		if (!back)
			break;	/* i round trips came back */
	}
	/* every callback, so that every status is known */
	while (g.in_flight && g.failed == XP_SUCCESS) {
		struct xp_event ev;

		if (xp_blocking_receive(p, &ev, 5 * XTIME_NS_PER_S, 0) <= 0)
			break;
		xp_unknown(p, &ev);
	}
	if (g.failed != XP_SUCCESS || g.in_flight) {
		fprintf(stderr, "gm-pingpong: %s\n", g.failed != XP_SUCCESS ?
			xp_strstatus(g.failed) : "sends still pending");
		return 1;
	}
	if (i < count) {
		fprintf(stderr, "gm-pingpong: interrupted after %lu round trips\n", i);
		return 1;
	}
	printf("%lu round trips of %zu bytes over %s: %.2f us average\n", count, size,
	       xp_node_name(h, node), count ? (xtime_ns() - t0) / 1e3 / (double)count : 0.0);
	xp_close(p);
	return 0;
}

int main(int argc, char **argv)
{
	bool server = argc > 1 && !strcmp(argv[1], "serve");
	struct xp_host_opts o = { .send_tokens = NBUF };
	struct sigaction sa = { .sa_handler = on_signal };
	unsigned long count = 1000, size = 8;
	struct xp_host *h;
	struct xuri u;
	char err[256];
	int rc;

	if (argc < 2 + server || argc > (server ? 3 : 4))
		return usage();
	if ((!server && argc > 2 && number(argv[2], &count) < 0) ||
	    (!server && argc > 3 && number(argv[3], &size) < 0))
		return usage();
	if (size > xp_max_length_for_size(MAX_SIZE)) {
		fprintf(stderr, "gm-pingpong: SIZE %lu over %llu\n", size,
			(unsigned long long)xp_max_length_for_size(MAX_SIZE));
		return 2;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (xuri_parse(argv[1 + server], 0, &u, err, sizeof(err)) < 0) {
		fprintf(stderr, "gm-pingpong: %s\n", err);
		return 2;
	}
	if (!(h = xp_host_new(&o, err, sizeof(err)))) {
		fprintf(stderr, "gm-pingpong: %s\n", err);
		return 1;
	}
	if (server) {
		if (xp_host_listen(h, &u, err, sizeof(err)) < 0) {
			fprintf(stderr, "gm-pingpong: %s\n", err);
			rc = 1;
		} else {
			uint16_t port = xp_host_listen_port(h, 0);

			if (port)
				printf("listening on %s (port %u)\n", argv[2], port);
			else
				printf("listening on %s\n", argv[2]);
			fflush(stdout);
			rc = serve(h);
		}
	} else if ((rc = xp_host_connect(h, &u, err, sizeof(err))) < 0) {
		fprintf(stderr, "gm-pingpong: %s\n", err);
		rc = 1;
	} else {
		rc = ping(h, (uint32_t)rc, count, size);
	}
	xp_host_free(h);
	return rc;
}
