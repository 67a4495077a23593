/* rtrs-client read / write: a device range to stdout, stdin to a device.
 * A ring of `depth` buffers of one request each keeps that many requests
 * in flight; data leaves (read) or enters (write) the ring in order. */
#include "cmd.h"
#include "core/parse.h"
#include "core/xtime.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/time.h>
#include <unistd.h>

#define SECTOR 512u
#define RING 16u

struct slot {
	uint64_t off;		/* device offset of the request */
	uint32_t len;		/* request bytes (a multiple of ring.unit) */
	uint32_t fill;		/* write: bytes of input in it */
	int state;		/* 0 free, 1 in flight, 2 done */
	int err;
	uint8_t *buf;
};

struct ring {
	struct sess *ss;
	struct slot s[RING];
	/* write's own requests besides the ring's: the read of a last
	 * partial block, the flush (kept here, not on the stack, so that
	 * one still in flight after a stop signal lands in live memory) */
	struct slot block, flush;
	unsigned depth;
	uint32_t chunk;
	uint32_t unit;		/* the device's logical block: what every request
				 * is a multiple of and starts on */
	uint8_t *mem;
	uint64_t t0, last_progress;
	bool progress;
};

static void slot_done(void *priv, int err)
{
	struct slot *sl = priv;

	sl->err = err;
	sl->state = 2;
}

static int ring_init(struct ring *r, struct sess *ss)
{
	uint32_t qd = rtrs_clt_queue_depth(ss->clt);

	memset(r, 0, sizeof(*r));
	r->ss = ss;
	uint32_t lbs = rnbd_clt_geom(ss->dev)->logical_block_size;

	r->chunk = rnbd_clt_max_io(ss->dev);
	if (r->chunk >= 4096)
		r->chunk &= ~4095u;
	r->chunk -= r->chunk % SECTOR;	/* whatever the server said */
	/* the device's logical block where it is a sane one: a 4Kn disk
	 * behind the kernel's rnbd-server refuses smaller writes */
	r->unit = lbs > SECTOR && lbs % SECTOR == 0 && !(lbs & (lbs - 1)) && lbs <= r->chunk ? lbs
													 : SECTOR;
	r->chunk -= r->chunk % r->unit;
	r->depth = qd < RING ? qd : RING;
	if (!r->depth || !r->chunk)
		return fail(ss->cmd, "session %s: no room for requests", ss->o->session);
	r->mem = aligned_alloc(4096, (size_t)r->depth * r->chunk);
	if (!r->mem)
		return fail(ss->cmd, "out of memory");
	for (unsigned i = 0; i < r->depth; i++)
		r->s[i].buf = r->mem + (size_t)i * r->chunk;
	r->progress = want_progress(ss->o);
	r->t0 = r->last_progress = xtime_ns();
	return sess_add_mem(ss, r->mem, (size_t)r->depth * r->chunk);
}

static void ring_fini(struct ring *r)
{
	/* what is still in flight must land before the ring goes (unless
	 * the session died or we were told to stop) */
	for (unsigned i = 0; i < r->depth; i++)
		while (r->s[i].state == 1 && rtrs_clt_alive(r->ss->clt) && !cli_stop_requested)
			sess_run(r->ss, 100000000ull);
	/* a request still in flight writes into the ring: keep it then */
	for (unsigned i = 0; i < r->depth; i++)
		if (r->s[i].state == 1)
			return;
	if (r->block.state == 1)
		return;
	if (r->mem && r->ss->clt)
		rtrs_clt_del_mem(r->ss->clt, r->mem);
	free(r->mem);
	r->mem = NULL;
}

static void progress(struct ring *r, uint64_t done, uint64_t total, bool end)
{
	uint64_t now = xtime_ns();
	char a[32], b[32], c[32];

	if (!r->progress || (!end && now - r->last_progress < 500000000ull))
		return;
	r->last_progress = now;
	if (end) {
		fprintf(stderr, "\r%60s\r", "");
		return;
	}
	xfmt_size(done, a, sizeof(a));
	xfmt_rate(done / ((now - r->t0) / 1e9 + 1e-9), c, sizeof(c));
	if (total) {
		xfmt_size(total, b, sizeof(b));
		fprintf(stderr, "\r%s / %s (%.0f%%)  %s   ", a, b, 100.0 * done / total, c);
	} else {
		fprintf(stderr, "\r%s  %s   ", a, c);
	}
}

static int submit(struct ring *r, struct slot *sl, unsigned op)
{
	char e[128];
	int rc;

	sl->state = 1;
	sl->err = 0;
	rc = rnbd_clt_submit(r->ss->dev, op, 0, sl->off, sl->buf, sl->len, slot_done, sl);
	if (rc) {
		sl->state = 0;
		return fail(r->ss->cmd, "%s at offset %llu: %s", op == RNBD_OP_READ ? "read" : "write",
			    (unsigned long long)sl->off, sess_strerror(r->ss, rc, e, sizeof(e)));
	}
	return EXIT_OK;
}

/* A stop signal: what is done, so that a user can go on from there (a
 * write's completed bytes are on the server, not yet flushed; those in
 * flight may or may not have landed). */
static int interrupted(const struct sess *ss)
{
	if (!strcmp(ss->cmd, "write"))
		return fail(ss->cmd, "interrupted: the first %llu bytes are written (not flushed), "
			    "those after them perhaps in part", (unsigned long long)ss->done_bytes);
	return fail(ss->cmd, "interrupted after %llu bytes", (unsigned long long)ss->done_bytes);
}

/* Waits for sl to finish.  EXIT_OK, or EXIT_FAIL printed. */
static int wait_slot(struct ring *r, struct slot *sl, const char *what)
{
	char e[128];

	while (sl->state == 1) {
		if (sess_run(r->ss, 200000000ull) == -EINTR)
			return interrupted(r->ss);
	}
	if (sl->err)
		return fail(r->ss->cmd, "%s at offset %llu: %s", what, (unsigned long long)sl->off,
			    sess_strerror(r->ss, sl->err, e, sizeof(e)));
	return EXIT_OK;
}

/* Waits until fd is ready (POLLIN or POLLOUT), at most timeout_ns, while
 * the session runs: a producer or a consumer that stalls (`| less`, a
 * quiet `tail -f`) must not stall the session with it, or the server,
 * hearing no heartbeat, takes it for dead and the client reconnects.
 * 1 ready, 0 timed out, or -EINTR (a stop signal). */
static int wait_fd(struct sess *ss, int fd, short events, uint64_t timeout_ns)
{
	struct pollfd p = { .fd = fd, .events = events };
	struct epoll_event ev = { .events = events == POLLIN ? EPOLLIN : EPOLLOUT,
				  .data.u64 = SESS_TAG_STDIO };
	uint64_t end = timeout_ns == UINT64_MAX ? UINT64_MAX : xtime_ns() + timeout_ns, now;
	bool watched = false;
	int rc = 1;

	for (;;) {
		int k = poll(&p, 1, 0);

		if (k > 0 || (k < 0 && errno != EINTR))
			break;	/* ready (or no fd to wait on: the read says so) */
		if (cli_stop_requested)
			break;
		if ((now = xtime_ns()) >= end) {
			rc = 0;
			break;
		}
		/* a regular file is always ready; anything epoll refuses is
		 * looked at again every 10 ms */
		if (!watched)
			watched = epoll_ctl(ss->epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
		uint64_t nap = watched ? 1000000000ull : 10000000ull;

		if (sess_run(ss, end - now < nap ? end - now : nap) == -EINTR) {
			rc = -EINTR;
			break;
		}
	}
	if (watched)
		epoll_ctl(ss->epfd, EPOLL_CTL_DEL, fd, NULL);
	return cli_stop_requested ? -EINTR : rc;
}

static void on_alarm(int sig)
{
	(void)sig;
}

/* Writes p to stdout, counting what went in ss->done_bytes.  Room for some
 * of it is waited for with the session running (wait_fd); the write itself
 * has an alarm every 100 ms armed, as a blocking write into a pipe or a
 * socket with less room than it needs waits for the reader, and a signal
 * cuts it short with what it wrote (pipe_write, sk_stream_wait_memory):
 * the session runs in between.  0 or -errno (-EINTR: a stop signal). */
static int write_out(struct sess *ss, const uint8_t *p, size_t n)
{
	static const struct itimerval on = { { 0, 100000 }, { 0, 100000 } }, off;
	static bool handler;
	int rc;

	if (!handler) {
		struct sigaction sa = { .sa_handler = on_alarm };	/* no SA_RESTART */

		sigemptyset(&sa.sa_mask);
		sigaction(SIGALRM, &sa, NULL);
		handler = true;
	}
	while (n) {
		ssize_t w;
		int e;

		if ((rc = wait_fd(ss, STDOUT_FILENO, POLLOUT, UINT64_MAX)) < 0)
			return rc;
		setitimer(ITIMER_REAL, &on, NULL);
		w = write(STDOUT_FILENO, p, n);
		e = errno;
		setitimer(ITIMER_REAL, &off, NULL);
		if (w < 0) {
			if (e == EINTR || e == EAGAIN)	/* EAGAIN: a non-blocking stdout */
				continue;
			return -e;
		}
		p += w;
		n -= (size_t)w;
		ss->done_bytes += (uint64_t)w;
		if (n)
			sess_run(ss, 0);	/* cut short: a turn for the session */
	}
	return 0;
}

/* Options of read and write. */
static int io_opts(const char *cmd, int argc, char **argv, struct sess_opts *o, uint64_t *off,
		   uint64_t *len, bool *len_set)
{
#define IO_LONGOPTS SESS_LONGOPTS, { "offset", required_argument, NULL, OPT_OFFSET }, \
		{ "help", no_argument, NULL, 'h' }
	static const struct option rlo[] = {
		IO_LONGOPTS,
		{ "length", required_argument, NULL, OPT_LENGTH },
		{ NULL, 0, NULL, 0 },
	};
	/* write has no --length: its input says how much */
	static const struct option wlo[] = { IO_LONGOPTS, { NULL, 0, NULL, 0 } };
#undef IO_LONGOPTS
	const char *e;
	int c, rc;

	while ((c = getopt_long(argc, argv, SESS_SHORTOPTS "h", len ? rlo : wlo, NULL)) != -1) {
		rc = sess_opt(cmd, c, optarg, o);
		if (rc == 1)
			continue;
		if (rc)
			return rc;
		switch (c) {
		case OPT_OFFSET:
			if (xparse_size(optarg, 0, UINT64_MAX / 2, off, &e))
				return usage_error(cmd, "--offset: '%s' is %s", optarg, e);
			break;
		case OPT_LENGTH:
			if (xparse_size(optarg, 0, UINT64_MAX / 2, len, &e))
				return usage_error(cmd, "--length: '%s' is %s", optarg, e);
			*len_set = true;
			break;
		case 'h':
			cmd_usage(stdout, cmd);
			return -1;
		default:
			return bad_option(cmd, SESS_SHORTOPTS "h", argv);
		}
	}
	if (optind < argc)
		return usage_error(cmd, "unexpected argument '%s'", argv[optind]);
	return sess_opts_finish(cmd, o, true);
}

int cmd_read(int argc, char **argv)
{
	struct sess_opts o;
	struct sess ss;
	struct ring r;
	uint64_t off = 0, len = 0, start, end, next, out_off, size;
	unsigned head = 0, tail = 0;	/* submitted / written out, in requests */
	bool len_set = false;
	int rc;

	sess_opts_init(&o);
	rc = io_opts("read", argc, argv, &o, &off, &len, &len_set);
	if (rc)
		return rc < 0 ? EXIT_OK : rc;
	/* a read opens the device read-only unless told otherwise: it works
	 * on read-only exports, and holds no write access from a writer */
	if (!o.access_set)
		o.access = RNBD_ACCESS_RO;
	cli_stop_handlers();
	if ((rc = sess_open(&ss, "read", &o)))
		return rc;
	size = rnbd_clt_geom(ss.dev)->size;
	if (off > size) {
		rc = fail("read", "offset %llu is beyond the end of device %s (%llu bytes)",
			  (unsigned long long)off, o.device, (unsigned long long)size);
		goto out;
	}
	if (!len_set)
		len = size - off;
	if (len > size - off) {
		rc = fail("read", "%llu bytes at offset %llu go beyond the end of device %s "
			  "(%llu bytes)", (unsigned long long)len, (unsigned long long)off,
			  o.device, (unsigned long long)size);
		goto out;
	}
	if ((rc = ring_init(&r, &ss)))
		goto out;
	/* whole logical blocks from start to end; the bytes before off and
	 * after off + len are not written out */
	start = off - off % r.unit;
	end = off + len;
	end += (r.unit - end % r.unit) % r.unit;
	if (end > size)		/* a device whose size is no whole block */
		end = size;
	next = start;
	out_off = off;
	ss.activity = "read";
	ss.total_bytes = len;
	while (out_off < off + len) {
		while (next < end && head - tail < r.depth) {
			struct slot *sl = &r.s[head % r.depth];

			sl->off = next;
			sl->len = (uint32_t)(end - next < r.chunk ? end - next : r.chunk);
			if ((rc = submit(&r, sl, RNBD_OP_READ)))
				goto out_ring;
			next += sl->len;
			head++;
		}
		struct slot *sl = &r.s[tail % r.depth];

		if ((rc = wait_slot(&r, sl, "read")))
			goto out_ring;
		/* the part of this request within [off, off + len) */
		uint64_t a = sl->off > off ? sl->off : off;
		uint64_t b = sl->off + sl->len < off + len ? sl->off + sl->len : off + len;

		sl->state = 0;
		tail++;
		if (b > a && (rc = write_out(&ss, sl->buf + (a - sl->off), b - a))) {
			rc = rc == -EINTR ? interrupted(&ss) : fail("read", "stdout: %s", strerror(-rc));
			goto out_ring;
		}
		out_off = b;
		progress(&r, ss.done_bytes, len, false);
	}
	progress(&r, 0, 0, true);
	rc = EXIT_OK;
out_ring:
	if (rc)
		progress(&r, 0, 0, true);
	ring_fini(&r);
out:
	sess_close(&ss);
	return rc;
}

/* Bytes of input short of a whole unit (ring.unit: a sector, or the
 * device's logical block), carried from one request to the next (fill). */
struct carry {
	uint32_t n;
	uint8_t b[32768];	/* a logical block is a uint16_t power of two */
};

/* stdin quiet this long with a unit or more in hand: what is whole goes
 * out now (a slow producer's data lands within this, not when a request's
 * worth has come; a fast one's stays in whole requests) */
#define STDIN_IDLE_NS (50 * XTIME_NS_PER_MS)

/* The oldest write in flight, waited for and counted.  EXIT_OK or
 * EXIT_FAIL (printed). */
static int write_done(struct ring *r, unsigned *tail)
{
	struct slot *sl = &r->s[*tail % r->depth];
	int rc = wait_slot(r, sl, "write");

	if (rc)
		return rc;
	sl->state = 0;
	++*tail;
	r->ss->done_bytes += sl->fill;
	progress(r, r->ss->done_bytes, 0, false);
	return EXIT_OK;
}

/* Fills sl from stdin, after the bytes carried from the last one: a whole
 * chunk, unless the input ends (*eof) or pauses for STDIN_IDLE_NS with a
 * unit or more in, when the whole units go and the rest is carried.  While
 * stdin has nothing the session runs (wait_fd) and the writes that finish
 * are taken in, in order (*tail): counted, and a failed one reported at
 * once, not when more input comes.  Returns the bytes to write, or -1
 * (EXIT_FAIL, printed). */
static ssize_t fill(struct ring *r, struct slot *sl, struct carry *cy, bool *eof, unsigned head,
		    unsigned *tail)
{
	struct sess *ss = r->ss;
	uint64_t idle_end = 0;

	memcpy(sl->buf, cy->b, cy->n);
	sl->fill = cy->n;
	cy->n = 0;
	while (sl->fill < r->chunk) {
		uint64_t wait = 100 * XTIME_NS_PER_MS, now = xtime_ns();
		int w;

		if (sl->fill >= r->unit) {
			if (!idle_end)
				idle_end = now + STDIN_IDLE_NS;
			if (now >= idle_end) {
				cy->n = sl->fill % r->unit;
				sl->fill -= cy->n;
				memcpy(cy->b, sl->buf + sl->fill, cy->n);
				break;
			}
			if (idle_end - now < wait)
				wait = idle_end - now;
		}
		w = wait_fd(ss, STDIN_FILENO, POLLIN, wait);
		if (w < 0) {
			interrupted(ss);
			return -1;
		}
		if (w == 0) {
			while (head != *tail && r->s[*tail % r->depth].state == 2)
				if (write_done(r, tail))
					return -1;
			continue;
		}
		ssize_t n = read(STDIN_FILENO, sl->buf + sl->fill, r->chunk - sl->fill);

		if (n < 0) {
			/* EAGAIN: a non-blocking stdin someone else read first */
			if (errno == EINTR || errno == EAGAIN) {
				if (cli_stop_requested) {
					interrupted(ss);
					return -1;
				}
				continue;
			}
			fail("write", "stdin: %s", strerror(errno));
			return -1;
		}
		if (n == 0) {
			*eof = true;
			break;
		}
		sl->fill += (uint32_t)n;
		idle_end = 0;	/* it came: the quiet starts again */
	}
	return sl->fill;
}

int cmd_write(int argc, char **argv)
{
	struct sess_opts o;
	struct sess ss;
	struct ring r;
	uint64_t off = 0, next, size;
	unsigned head = 0, tail = 0;
	struct carry cy = { 0 };
	bool eof = false, past_end = false;
	char e[128];
	int rc;

	sess_opts_init(&o);
	rc = io_opts("write", argc, argv, &o, &off, NULL, NULL);
	if (rc)
		return rc < 0 ? EXIT_OK : rc;
	if (off % SECTOR)
		return usage_error("write", "--offset: %llu is not a multiple of %u",
				   (unsigned long long)off, SECTOR);
	if (o.access == RNBD_ACCESS_RO)
		return usage_error("write", "--access ro: the device would be read-only");
	cli_stop_handlers();
	if ((rc = sess_open(&ss, "write", &o)))
		return rc;
	size = rnbd_clt_geom(ss.dev)->size;
	if (off > size) {
		rc = fail("write", "offset %llu is beyond the end of device %s (%llu bytes)",
			  (unsigned long long)off, o.device, (unsigned long long)size);
		goto out;
	}
	if ((rc = ring_init(&r, &ss)))
		goto out;
	if (off % r.unit) {
		rc = fail("write", "--offset: %llu is not a multiple of device %s's logical "
			  "block size (%u bytes)", (unsigned long long)off, o.device, r.unit);
		goto out_ring;
	}
	next = off;
	ss.activity = "write";
	while (!eof || head != tail) {
		while (!eof && head - tail < r.depth) {
			struct slot *sl = &r.s[head % r.depth];
			ssize_t n;

			/* what is done already is counted now, not when the
			 * ring is full (status, progress, an interruption's
			 * count) */
			while (head != tail && r.s[tail % r.depth].state == 2)
				if ((rc = write_done(&r, &tail)))
					goto out_ring;
			n = fill(&r, sl, &cy, &eof, head, &tail);
			if (n < 0) {
				rc = EXIT_FAIL;
				goto out_ring;
			}
			if (!n)
				break;
			sl->off = next;
			sl->len = (uint32_t)((n + r.unit - 1) / r.unit * r.unit);
			if (sl->off + sl->len > size) {
				/* what fits is written, as dd does at a device's
				 * end; then it fails, saying how much went */
				past_end = true;
				eof = true;
				if (sl->off + r.unit > size)
					break;
				sl->len = (uint32_t)((size - sl->off) / r.unit * r.unit);
				n = sl->fill = sl->len;
			}
			if (sl->len != (uint32_t)n) {
				/* a last partial block: the rest of it keeps what
				 * the device has, so read that block first (the
				 * writes before it end before sl->off) */
				struct slot *rd = &r.block;
				uint32_t keep = sl->len - (uint32_t)n;

				/* the input has ended: the carry is empty and
				 * holds the block's data meanwhile */
				memcpy(cy.b, sl->buf + sl->len - r.unit, r.unit - keep);
				*rd = *sl;
				rd->off = sl->off + sl->len - r.unit;
				rd->len = r.unit;
				rd->buf = sl->buf + sl->len - r.unit;
				if ((rc = submit(&r, rd, RNBD_OP_READ)) ||
				    (rc = wait_slot(&r, rd, "read")))
					goto out_ring;
				memcpy(sl->buf + sl->len - r.unit, cy.b, r.unit - keep);
			}
			if ((rc = submit(&r, sl, RNBD_OP_WRITE)))
				goto out_ring;
			next += sl->len;
			head++;
		}
		if (head == tail)
			break;
		if ((rc = write_done(&r, &tail)))
			goto out_ring;
	}
	/* the data is on the server's device when the flush is answered
	 * (the kernel's fsync sends one too) */
	{
		struct slot *fl = &r.flush;

		*fl = (struct slot){ .state = 1 };
		rc = rnbd_clt_submit(ss.dev, RNBD_OP_FLUSH, 0, 0, NULL, 0, slot_done, fl);
		if (rc && rc != -EOPNOTSUPP) {
			fl->state = 0;
			rc = fail("write", "flush: %s", sess_strerror(&ss, rc, e, sizeof(e)));
			goto out_ring;
		}
		if (rc == 0 && (rc = wait_slot(&r, fl, "flush")))
			goto out_ring;
	}
	if (past_end) {
		rc = fail("write", "the data goes beyond the end of device %s (%llu bytes): the "
			  "first %llu bytes were written, from offset %llu", o.device,
			  (unsigned long long)size, (unsigned long long)ss.done_bytes,
			  (unsigned long long)off);
		goto out_ring;
	}
	progress(&r, 0, 0, true);
	if (o.verbose)
		fprintf(stderr, PROG " write: %llu bytes at offset %llu of %s\n",
			(unsigned long long)ss.done_bytes, (unsigned long long)off, o.device);
	rc = EXIT_OK;
out_ring:
	if (rc)
		progress(&r, 0, 0, true);
	ring_fini(&r);
out:
	sess_close(&ss);
	return rc;
}
