/* gm-prodcons -- a producer and a consumer over GM-style ports
 * (lib/port/port.h) that use both priorities as seed 001 suggests: bulk
 * data at low priority, control messages at high priority, which never
 * wait behind the data.  The consumer shows alarms too: a progress line
 * every second, and a watchdog that gives up after 10 s of silence.
 *
 *   gm-prodcons consume URI          take one producer's stream, check it,
 *                                    print a summary, exit
 *   gm-prodcons produce URI [COUNT]  COUNT data messages of 32 KiB (default
 *                                    1000), a control message after every
 *                                    8th, and an END message
 *
 * Every data message carries its number and bytes derived from it; the
 * consumer checks both, and that each priority arrives in order.  Either
 * side exits 0 only when everything arrived intact.
 *
 * Build: make examples (build/examples/gm-prodcons).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/uri.h"
#include "core/xtime.h"
#include "port/port.h"

#define CONSUMER_PORT	3
#define DATA_LEN	32768u
#define DATA_CLASS	16		/* xp_min_size_for_length(DATA_LEN) */
#define CTL_CLASS	5		/* up to 24 bytes */
#define WINDOW		8		/* data buffers on each side */
#define CTL_EVERY	8

enum { CTL_MARK = 1, CTL_END = 2 };

struct ctl {				/* a control message (host order) */
	uint32_t type;
	uint32_t seq;			/* MARK: its number */
	uint64_t data;			/* data messages sent before it */
};

static void fill(uint8_t *b, uint64_t seq)
{
	memcpy(b, &seq, sizeof(seq));
	for (uint32_t i = sizeof(seq); i < DATA_LEN; i++)
		b[i] = (uint8_t)(seq * 31 + i);
}

static int usage(void)
{
	fprintf(stderr, "usage: gm-prodcons consume URI\n"
			"       gm-prodcons produce URI [COUNT]\n");
	return 2;
}

/* ---------------------------------------------------------- the consumer */

struct consumer {
	struct xp_port *p;
	uint64_t data, bytes, overtakes;
	uint32_t marks;
	struct ctl end;
	bool ended, silent;
	uint64_t t0;
	struct xp_alarm report, watchdog;
};

static void report(void *ctx)
{
	struct consumer *c = ctx;

	fprintf(stderr, "gm-prodcons: %llu data messages, %u control, %.1f s\n",
		(unsigned long long)c->data, c->marks, (xtime_ns() - c->t0) / 1e9);
	xp_set_alarm(c->p, &c->report, 1000000, report, c);
}

static void silence(void *ctx)
{
	((struct consumer *)ctx)->silent = true;
}

/* One message.  0, or -1 after saying what was wrong with it. */
static int take(struct consumer *c, const struct xp_event *ev)
{
	uint8_t want[DATA_LEN];
	struct ctl m;

	if (ev->type == XP_RECV_EVENT) {
		fill(want, c->data);
		if (ev->length != DATA_LEN || memcmp(ev->buffer, want, DATA_LEN)) {
			fprintf(stderr, "gm-prodcons: data message %llu is wrong or out of order\n",
				(unsigned long long)c->data);
			return -1;
		}
		c->data++;
		c->bytes += ev->length;
		return 0;
	}
	if (ev->length != sizeof(m)) {
		fprintf(stderr, "gm-prodcons: a control message of %u bytes\n", ev->length);
		return -1;
	}
	memcpy(&m, ev->buffer, sizeof(m));
	if (m.type == CTL_END) {
		c->end = m;
		c->ended = true;
		return 0;
	}
	if (m.type != CTL_MARK || m.seq != c->marks) {
		fprintf(stderr, "gm-prodcons: control message %u is not the next one (%u)\n",
			m.seq, c->marks);
		return -1;
	}
	c->marks++;
	/* it came before data that was sent ahead of it */
	if (m.data > c->data)
		c->overtakes++;
	return 0;
}

static int consume(struct xp_host *h)
{
	static struct consumer c;
	char err[256];
	uint8_t *mem;

	if (!(c.p = xp_open(h, CONSUMER_PORT, err, sizeof(err)))) {
		fprintf(stderr, "gm-prodcons: %s\n", err);
		return 1;
	}
	if (!(mem = xp_dma_malloc(c.p, 2 * WINDOW << DATA_CLASS))) {
		perror("gm-prodcons: DMA memory");
		return 1;
	}
	/* only these two kinds are accepted: anything else is refused at
	 * the sender (XP_SEND_REJECTED) instead of waiting for a buffer */
	xp_set_acceptable_sizes(c.p, XP_LOW, 1ull << DATA_CLASS);
	xp_set_acceptable_sizes(c.p, XP_HIGH, 1ull << CTL_CLASS);
	for (unsigned k = 0; k < WINDOW; k++) {
		xp_provide_receive_buffer(c.p, mem + ((size_t)k << DATA_CLASS), DATA_CLASS, XP_LOW);
		xp_provide_receive_buffer(c.p, mem + ((size_t)(WINDOW + k) << DATA_CLASS),
					  CTL_CLASS, XP_HIGH);
	}
	c.t0 = xtime_ns();
	xp_initialize_alarm(&c.report);
	xp_initialize_alarm(&c.watchdog);
	xp_set_alarm(c.p, &c.report, 1000000, report, &c);
	xp_set_alarm(c.p, &c.watchdog, 10000000, silence, &c);
	while (!c.silent && !(c.ended && c.data >= c.end.data)) {
		struct xp_event ev;

		if (xp_blocking_receive(c.p, &ev, 0, 50 * XTIME_NS_PER_US) <= 0)
			continue;
		switch (ev.type) {
		case XP_RECV_EVENT:
		case XP_HIGH_RECV_EVENT:
			if (take(&c, &ev) < 0)
				return 1;
			/* seed 001: replace receive tokens without waiting */
			xp_provide_receive_buffer(c.p, ev.buffer, ev.size, ev.prio);
			xp_set_alarm(c.p, &c.watchdog, 10000000, silence, &c);
			break;
		default:
			xp_unknown(c.p, &ev);	/* the alarms run here */
		}
	}
	if (c.silent) {
		fprintf(stderr, "gm-prodcons: nothing for 10 s after %llu data messages\n",
			(unsigned long long)c.data);
		return 1;
	}
	if (c.data != c.end.data || c.marks != c.end.seq) {
		fprintf(stderr, "gm-prodcons: END says %llu data and %u control messages, "
			"%llu and %u arrived\n", (unsigned long long)c.end.data, c.end.seq,
			(unsigned long long)c.data, c.marks);
		return 1;
	}
	printf("consumed %llu data messages (%llu bytes) and %u control messages, in order; "
	       "%llu control messages overtook data\n", (unsigned long long)c.data,
	       (unsigned long long)c.bytes, c.marks, (unsigned long long)c.overtakes);
	xp_close(c.p);
	return 0;
}

/* ---------------------------------------------------------- the producer */

struct producer {
	unsigned in_flight;
	enum xp_status failed;
	uint8_t *free[WINDOW];		/* data buffers not being sent */
	unsigned nfree;
};

struct slot {				/* a data buffer and its send */
	struct producer *pr;
	uint8_t *buf;
};

struct cslot {				/* a control message and its send */
	struct producer *pr;
	struct ctl m;
	bool busy;
};

static void data_sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	struct slot *s = ctx;

	(void)p;
	s->pr->in_flight--;
	s->pr->free[s->pr->nfree++] = s->buf;	/* ours again */
	if (st != XP_SUCCESS && s->pr->failed == XP_SUCCESS)
		s->pr->failed = st;
}

static void ctl_sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	struct cslot *c = ctx;
	struct producer *pr = c->pr;

	(void)p;
	c->busy = false;
	pr->in_flight--;
	if (st != XP_SUCCESS && pr->failed == XP_SUCCESS)
		pr->failed = st;
}

/* Runs the event loop once (up to 5 s): callbacks give buffers back. */
static int turn(struct xp_port *p)
{
	struct xp_event ev;

	if (xp_blocking_receive(p, &ev, 5 * XTIME_NS_PER_S, 50 * XTIME_NS_PER_US) <= 0)
		return -1;
	xp_unknown(p, &ev);	/* nothing is provided: only callbacks come */
	return 0;
}

/* Sends a control message from slot c.  0, or -1 after saying why not. */
static int send_ctl(struct xp_port *p, uint32_t node, struct cslot *c, struct ctl m)
{
	int rc;

	c->m = m;
	if ((rc = xp_send(p, node, CONSUMER_PORT, XP_HIGH, &c->m, sizeof(c->m), ctl_sent, c)) < 0) {
		fprintf(stderr, "gm-prodcons: send: %s\n", strerror(-rc));
		return -1;
	}
	c->busy = true;
	c->pr->in_flight++;
	return 0;
}

static int produce(struct xp_host *h, uint32_t node, uint64_t count)
{
	static struct slot slots[WINDOW];
	static struct cslot ctls[2];	/* the next MARK while one is in flight */
	struct producer pr = { .failed = XP_SUCCESS };
	char err[256];
	struct xp_port *p = xp_open(h, 0, err, sizeof(err));
	uint8_t *mem;
	uint32_t marks = 0;
	uint64_t seq = 0;
	int rc;

	if (!p) {
		fprintf(stderr, "gm-prodcons: %s\n", err);
		return 1;
	}
	if (!(mem = xp_dma_malloc(p, (size_t)WINDOW * DATA_LEN))) {
		perror("gm-prodcons: DMA memory");
		return 1;
	}
	for (unsigned k = 0; k < WINDOW; k++) {
		slots[k] = (struct slot){ &pr, mem + (size_t)k * DATA_LEN };
		pr.free[pr.nfree++] = slots[k].buf;
	}
	ctls[0].pr = ctls[1].pr = &pr;
	while (seq < count && pr.failed == XP_SUCCESS) {
		struct slot *s;

		if (!pr.nfree) {
			if (turn(p) < 0)
				break;
			continue;
		}
		s = &slots[(pr.free[--pr.nfree] - mem) / DATA_LEN];
		fill(s->buf, seq);
		if ((rc = xp_send(p, node, CONSUMER_PORT, XP_LOW, s->buf, DATA_LEN, data_sent,
				  s)) < 0) {
			fprintf(stderr, "gm-prodcons: send: %s\n", strerror(-rc));
			return 1;
		}
		pr.in_flight++;
		if (++seq % CTL_EVERY)
			continue;
		/* a control message: it may overtake data queued before it */
		while (ctls[marks % 2].busy && pr.failed == XP_SUCCESS && turn(p) == 0)
			;
		if (ctls[marks % 2].busy || pr.failed != XP_SUCCESS)
			break;
		if (send_ctl(p, node, &ctls[marks % 2], (struct ctl){ CTL_MARK, marks, seq }) < 0)
			return 1;
		marks++;
	}
	/* END once every data message is in: then the consumer has them all */
	while (pr.in_flight && pr.failed == XP_SUCCESS && turn(p) == 0)
		;
	if (pr.failed == XP_SUCCESS && !pr.in_flight && seq == count) {
		if (send_ctl(p, node, &ctls[0], (struct ctl){ CTL_END, marks, seq }) < 0)
			return 1;
		while (pr.in_flight && pr.failed == XP_SUCCESS && turn(p) == 0)
			;
	}
	if (pr.failed != XP_SUCCESS || pr.in_flight || seq < count) {
		fprintf(stderr, "gm-prodcons: %s after %llu data messages\n",
			pr.failed != XP_SUCCESS ? xp_strstatus(pr.failed) : "no progress for 5 s",
			(unsigned long long)seq);
		return 1;
	}
	printf("produced %llu data messages and %u control messages\n",
	       (unsigned long long)count, marks);
	xp_close(p);
	return 0;
}

int main(int argc, char **argv)
{
	bool consumer = argc > 2 && !strcmp(argv[1], "consume");
	bool producer = argc > 2 && !strcmp(argv[1], "produce");
	uint64_t count = 1000;
	struct xp_host *h;
	struct xuri u;
	char err[256];
	int rc;

	if (!(consumer && argc == 3) && !(producer && argc <= 4))
		return usage();
	if (argc == 4) {
		char *end;

		errno = 0;
		count = strtoull(argv[3], &end, 10);
		if (argv[3][0] < '0' || argv[3][0] > '9' || *end || errno)
			return usage();
	}
	if (xuri_parse(argv[2], 0, &u, err, sizeof(err)) < 0) {
		fprintf(stderr, "gm-prodcons: %s\n", err);
		return 2;
	}
	if (!(h = xp_host_new(NULL, err, sizeof(err)))) {
		fprintf(stderr, "gm-prodcons: %s\n", err);
		return 1;
	}
	if (consumer) {
		if (xp_host_listen(h, &u, err, sizeof(err)) < 0) {
			fprintf(stderr, "gm-prodcons: %s\n", err);
			rc = 1;
		} else {
			uint16_t port = xp_host_listen_port(h, 0);

			if (port)
				printf("listening on %s (port %u)\n", argv[2], port);
			else
				printf("listening on %s\n", argv[2]);
			fflush(stdout);
			rc = consume(h);
		}
	} else if ((rc = xp_host_connect(h, &u, err, sizeof(err))) < 0) {
		fprintf(stderr, "gm-prodcons: %s\n", err);
		rc = 1;
	} else {
		rc = produce(h, (uint32_t)rc, count);
	}
	xp_host_free(h);
	return rc;
}
