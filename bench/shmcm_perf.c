/* shmcm_perf — ucx_perftest-style benchmarks over the SHMCM library API.
 *
 *   shmcm_perf lat  -s SIZE [-n ITERS] [-T SECONDS]   ping-pong, one-way = RTT/2
 *   shmcm_perf rate -s SIZE [-n MSGS]  [-T SECONDS]   one-way stream, msg/s
 *   shmcm_perf bw   -s SIZE [-n MSGS]  [-T SECONDS]   one-way stream, bytes/s
 *   common: [-m MTU] [--slots N] [-w WARMUP] [-c CPU0,CPU1] [--copy|--no-copy]
 *           [--batch N] [--async]
 *
 * One process creates a private connection (mbox_create), forks, and each
 * process opens its own side in poll mode (no rx thread: the caller runs
 * shmcm_poll() in a busy loop, like ucx_perftest's busy progress), pinned
 * to its CPU like ucx_perftest -c 0 / -c 1.  The parent measures and prints
 * one machine-readable line:
 *
 *   shmcm lat size=8 p50_us=0.210 avg_us=0.230 iters=1000000
 *   shmcm rate size=8 mmsg_s=12.3 msgs=...
 *   shmcm bw size=65536 gbyte_s=9.8 msgs=...        (GB = 1e9 bytes)
 *
 * bw: by default the receiver memcpy()s every message into its own buffer
 * (ucx_perftest's tag_bw receives into a user buffer too); --no-copy only
 * reads the sequence numbers in place, which measures little more than the
 * sender's memcpy into a cache-resident ring.
 *
 * Every message carries its sequence number in its first 8 bytes (and, when
 * it is 16 bytes or more, in its last 8): the receiver checks both and the
 * length, and any mismatch, failed call or stall is an error (exit 1).
 */
#include "shmcm/shmcm.h"
#include "shmcm/shmcm_wire.h"
#include "xprt/mbox.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define END_BIT		(1ull << 63)	/* seq of the stream's end marker */
#define ACK_SEQ		0x41434b21ull	/* receiver -> sender: "seen the end" */
#define SETUP_TMO_NS	(10ull * 1000000000ull)
#define STALL_CHECK	(1u << 16)	/* polls between liveness checks */

enum mode { M_LAT, M_RATE, M_BW };

struct opts {
	enum mode mode;
	size_t size;
	uint64_t iters;		/* 0: time-based (rate/bw) or default (lat) */
	uint64_t warmup;
	double secs;
	uint32_t mtu, slots;
	int cpu[2];		/* [0] parent, [1] child */
	bool copy;		/* receiver copies each message out (as an app would) */
	unsigned batch;		/* shmcm_poll(c, batch) */
	bool async;		/* bw: shmcm_send_ref, pulls overlapping */
};

/* Per-process state; the deliver up-call runs in our own thread (poll mode). */
struct st {
	const struct opts *o;
	struct shmcm_conn *c;
	const char *role;
	uint8_t *buf;		/* message to send */
	uint8_t *abuf;		/* --async: the one constant message */
	uint8_t *sink;		/* --copy destination */
	/* receiver / pong */
	uint64_t expect;
	uint64_t t_start, t_end;
	bool started, done;
	/* ping / sender: last seq echoed back */
	uint64_t got;
	bool have_got, have_ack;
	char err[256];		/* first error, set in the up-call */
};

static const char *g_role;	/* "ping", "sender"... once forked */
static char g_name[64];		/* connection to remove at exit (parent) */
static pid_t g_child;		/* child to stop if the parent fails */

static void parent_cleanup(void)
{
	char err[256];
	int status;

	if (g_child > 0) {
		kill(g_child, SIGKILL);
		waitpid(g_child, &status, 0);
		g_child = 0;
	}
	if (g_name[0]) {
		mbox_unlink(g_name, true, err, sizeof(err));
		g_name[0] = 0;
	}
}

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "shmcm_perf%s%s: ", g_role ? " " : "", g_role ? g_role : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void on_term(int sig)
{
	if (g_child > 0 || g_name[0])
		parent_cleanup();	/* remove the connection; not strictly async-signal-safe */
	signal(sig, SIG_DFL);
	raise(sig);
}

static void on_alarm(int sig)
{
	static const char msg[] = "shmcm_perf: watchdog: no progress before the deadline "
				  "(hang or lost message), giving up\n";
	(void)sig;
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
		_exit(3);
	if (g_child > 0 || g_name[0]) {
		parent_cleanup();	/* not async-signal-safe in theory; we exit anyway */
	}
	_exit(3);
}

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fail(struct st *s, const char *fmt, ...)
{
	va_list ap;

	if (s->err[0])
		return;
	va_start(ap, fmt);
	vsnprintf(s->err, sizeof(s->err), fmt, ap);
	va_end(ap);
}

static inline uint64_t get_u64(const void *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

#define ASYNC_PATTERN 0x5a5a5a5a5a5a5a5aull	/* --async message bytes */

static inline void put_seq(uint8_t *buf, size_t size, uint64_t seq)
{
	memcpy(buf, &seq, 8);
	if (size >= 16)
		memcpy(buf + size - 8, &seq, 8);
}

/* Checks the length and both sequence numbers; false (and s->err) on a mismatch. */
static inline bool check_msg(struct st *s, const uint8_t *d, size_t len, uint64_t want)
{
	uint64_t seq;

	if (len != s->o->size) {
		fail(s, "message %" PRIu64 ": got %zu bytes, expected %zu", want, len, s->o->size);
		return false;
	}
	seq = get_u64(d);
	if (seq != want) {
		fail(s, "message %" PRIu64 ": wrong sequence number %#" PRIx64 " in bytes 0-7",
		     want, seq);
		return false;
	}
	if (len >= 16 && get_u64(d + len - 8) != want) {
		fail(s, "message %" PRIu64 ": wrong sequence number %#" PRIx64 " in the last 8 bytes",
		     want, get_u64(d + len - 8));
		return false;
	}
	return true;
}

/* ---- up-calls ---- */

/* lat, pong side: check, echo back from inside the up-call. */
static void deliver_pong(void *arg, uint32_t src, uint32_t dst, const void *data, size_t len)
{
	struct st *s = arg;
	int rc;

	if (len == 8 && get_u64(data) == (END_BIT | s->expect)) {
		s->done = true;
		return;
	}
	if (!check_msg(s, data, len, s->expect))
		return;
	s->expect++;
	rc = shmcm_transmit(s->c, 0, 0, data, len);
	if (rc < 0)
		fail(s, "shmcm_transmit (pong %" PRIu64 ") from the deliver up-call: %s",
		     s->expect - 1, strerror(-rc));
}

/* lat ping side, and the sender's ack. */
static void deliver_ping(void *arg, uint32_t src, uint32_t dst, const void *data, size_t len)
{
	struct st *s = arg;

	if (len == 8 && get_u64(data) == ACK_SEQ && s->o->mode != M_LAT) {
		s->have_ack = true;
		return;
	}
	if (s->o->mode != M_LAT) {
		fail(s, "sender got an unexpected %zu-byte message", len);
		return;
	}
	if (s->have_got) {
		fail(s, "pong %" PRIu64 " arrived before the previous one was consumed", s->expect);
		return;
	}
	if (!check_msg(s, data, len, s->expect))
		return;
	s->have_got = true;
}

/* rate/bw receiver. */
static void deliver_sink(void *arg, uint32_t src, uint32_t dst, const void *data, size_t len)
{
	struct st *s = arg;
	const uint8_t *d = data;

	if (len == 8 && get_u64(d) == (END_BIT | s->expect)) {
		s->t_end = now_ns();
		s->done = true;
		return;
	}
	if (s->o->copy) {
		/* a message sent by reference was pulled straight into sink */
		if (d != s->sink && len <= s->o->size)
			memcpy(s->sink, d, len);
		d = s->sink;
	}
	if (s->o->async) {
		/* --async: one constant buffer, as ucx_perftest sends; the
		 * sequence number travels in the header's src field */
		if (len != s->o->size || src != (uint32_t)s->expect ||
		    get_u64(d) != ASYNC_PATTERN || get_u64(d + len - 8) != ASYNC_PATTERN) {
			fail(s, "message %" PRIu64 ": wrong length, order or content (src %u)",
			     s->expect, src);
			return;
		}
	} else if (!check_msg(s, d, len, s->expect)) {
		return;
	}
	if (++s->expect == s->o->warmup) {
		s->t_start = now_ns();
		s->started = true;
	}
}

/* --copy: messages sent by reference land in sink directly (one copy). */
static void *rx_into_sink(void *arg, uint32_t src, uint32_t dst, size_t len)
{
	struct st *s = arg;

	return s->o->copy && len <= s->o->size ? s->sink : NULL;
}

static void noop_conn(void *arg) { (void)arg; }
static void noop_disc(void *arg, enum shmcm_reason why) { (void)arg; (void)why; }

/* ---- setup ---- */

static void pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		die("cannot pin to CPU %d: %s", cpu, strerror(errno));
}

static void check_up(struct st *s)
{
	if (s->err[0])
		die("%s", s->err);
	if (shmcm_get_state(s->c) != SHMCM_CONNECTED)
		die("connection lost (%s) in the middle of the test",
		    shmcm_reason_str(shmcm_get_reason(s->c)));
}

/* Poll mode: CON packets arrive through the ring too, so keep polling
 * while waiting for the connection. */
static void open_side(struct st *s, const char *name, int side,
		      void (*deliver)(void *, uint32_t, uint32_t, const void *, size_t))
{
	struct shmcm_params p = {
		.name = name, .side = side, .flow = SHMCM_FLOW_WAIT, .poll = true,
		.max_msg = s->o->size > 8 ? (uint32_t)s->o->size : 8,
	};
	struct shmcm_upcalls uc = { noop_conn, noop_disc, deliver, s, rx_into_sink, NULL };
	uint64_t deadline = now_ns() + SETUP_TMO_NS;
	char err[256];
	int rc;

	s->c = shmcm_open(&p, &uc, err, sizeof(err));
	if (!s->c)
		die("shmcm_open: %s", err);
	if ((rc = shmcm_connect(s->c)) < 0)
		die("shmcm_connect: %s", strerror(-rc));
	for (;;) {
		shmcm_poll(s->c, 64);
		rc = shmcm_wait_connected(s->c, 1000000);
		if (rc == 0)
			break;
		if (rc != -ETIMEDOUT)
			die("shmcm_wait_connected: %s", strerror(-rc));
		if (now_ns() > deadline)
			die("not connected within %llu s", SETUP_TMO_NS / 1000000000ull);
	}
}

static void xmit(struct st *s, const void *buf, size_t len, uint64_t seq)
{
	int rc = shmcm_transmit(s->c, 0, 0, buf, len);

	if (rc < 0)
		die("shmcm_transmit (message %" PRIu64 ", %zu bytes): %s", seq, len, strerror(-rc));
}

/* Polls until *flag or an error. */
static void poll_until(struct st *s, const bool *flag)
{
	unsigned k = 0, batch = s->o->batch;

	while (!*(volatile const bool *)flag) {
		shmcm_poll(s->c, batch);
		if (s->err[0])
			die("%s", s->err);
		if (++k == STALL_CHECK) {
			k = 0;
			check_up(s);
		}
	}
}

static void finish(struct st *s)
{
	if (s->err[0])
		die("%s", s->err);
	shmcm_close(s->c);
}

/* ---- lat ---- */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void lat_ping(struct st *s)
{
	const struct opts *o = s->o;
	uint64_t n = o->iters, total = o->warmup + n, deadline = 0, prev, i, sum = 0;
	uint32_t *rtt = malloc(n * sizeof(*rtt));

	if (!rtt)
		die("out of memory for %" PRIu64 " samples", n);
	if (o->secs > 0)
		deadline = now_ns() + (uint64_t)(o->secs * 1e9);
	prev = now_ns();
	for (i = 0; i < total; i++) {
		unsigned k = 0;

		put_seq(s->buf, o->size, i);
		s->expect = i;
		s->have_got = false;
		xmit(s, s->buf, o->size, i);
		while (!*(volatile bool *)&s->have_got) {
			shmcm_poll(s->c, o->batch);
			if (s->err[0])
				die("%s", s->err);
			if (++k == STALL_CHECK) {
				k = 0;
				check_up(s);
			}
		}
		/* one clock read per round trip: RTT(i) = t(i) - t(i-1) */
		uint64_t t = now_ns(), d = t - prev;
		prev = t;
		if (i >= o->warmup)
			rtt[i - o->warmup] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
		if (deadline && (i & 1023) == 0 && t > deadline && i >= o->warmup) {
			i++;
			break;
		}
	}
	/* tell the pong side we are done */
	put_seq(s->buf, 8, END_BIT | i);
	xmit(s, s->buf, 8, i);
	if (shmcm_wait_drained(s->c, SETUP_TMO_NS) < 0)
		die("the pong side did not take the end marker");
	n = i - o->warmup;
	if (!n)
		die("no samples");
	for (uint64_t j = 0; j < n; j++)
		sum += rtt[j];
	qsort(rtt, n, sizeof(*rtt), cmp_u32);
	printf("shmcm lat size=%zu p50_us=%.3f avg_us=%.3f p99_us=%.3f max_us=%.3f iters=%" PRIu64
	       " mtu=%u slots=%u\n",
	       o->size, rtt[n / 2] / 2000.0, (double)sum / n / 2000.0,
	       rtt[n - 1 - n / 100] / 2000.0, rtt[n - 1] / 2000.0, n, shmcm_get_mtu(s->c), o->slots);
	free(rtt);
	finish(s);
}

static void lat_pong(struct st *s)
{
	poll_until(s, &s->done);
	finish(s);
}

/* ---- rate / bw ---- */

static void async_sent(void *ctx, int status)
{
	if (status != 0)
		die("send by reference completed with %s", strerror(-status));
}

/* --async: every message from the same constant buffer (read-only while
 * sends are in flight), by reference, without waiting for the pull; the
 * sequence number goes in src. */
static void send_async(struct st *s, uint64_t i)
{
	int rc = shmcm_send_ref(s->c, (uint32_t)i, 0, s->abuf, s->o->size, async_sent, NULL);

	if (rc < 0)
		die("shmcm_send_ref (message %" PRIu64 "): %s", i, strerror(-rc));
}

static void stream_send(struct st *s)
{
	const struct opts *o = s->o;
	uint64_t i, deadline = 0, stop_at = o->iters ? o->warmup + o->iters : UINT64_MAX;
	uint64_t t_first = 0, mask = 1;

	while (mask * o->size < 65536 && mask < 1024)
		mask <<= 1;
	mask--;
	for (i = 0; i < stop_at; i++) {
		if (o->async) {
			send_async(s, i);
		} else {
			put_seq(s->buf, o->size, i);
			xmit(s, s->buf, o->size, i);
		}
		if (i == o->warmup) {
			t_first = now_ns();
			if (!o->iters)
				deadline = t_first + (uint64_t)(o->secs * 1e9);
		}
		/* Clock and housekeeping every `every` messages (about 64 KiB
		 * worth, at least every message): keepalives from the peer are
		 * read here (we are in poll mode). */
		if ((i & mask) == mask) {
			shmcm_poll(s->c, 64);
			if (s->err[0])
				die("%s", s->err);
			if (deadline && now_ns() >= deadline) {
				i++;
				break;
			}
		}
	}
	while (o->async && shmcm_refs_in_flight(s->c))
		shmcm_poll(s->c, 64);
	put_seq(s->buf, 8, END_BIT | i);
	xmit(s, s->buf, 8, i);
	poll_until(s, &s->have_ack);
	finish(s);
}

static void stream_recv(struct st *s)
{
	const struct opts *o = s->o;
	uint64_t ack = ACK_SEQ, n;
	double secs;

	poll_until(s, &s->done);
	if (!s->started || s->expect <= o->warmup)
		die("only %" PRIu64 " messages arrived, no more than the %" PRIu64 " of the warm-up",
		    s->expect, o->warmup);
	xmit(s, &ack, 8, ack);
	n = s->expect - o->warmup;
	secs = (double)(s->t_end - s->t_start) / 1e9;
	if (o->mode == M_RATE)
		printf("shmcm rate size=%zu mmsg_s=%.3f msgs=%" PRIu64 " secs=%.3f mtu=%u slots=%u\n",
		       o->size, n / secs / 1e6, n, secs, shmcm_get_mtu(s->c), o->slots);
	else
		printf("shmcm bw size=%zu gbyte_s=%.3f msgs=%" PRIu64 " secs=%.3f mtu=%u slots=%u copy=%d\n",
		       o->size, (double)n * o->size / secs / 1e9, n, secs, shmcm_get_mtu(s->c),
		       o->slots, o->copy);
	finish(s);
}

/* ---- main ---- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shmcm_perf lat|rate|bw -s SIZE [-n ITERS] [-T SECONDS] [-w WARMUP]\n"
		"                  [-m MTU] [--slots N] [-c CPU,CPU] [--copy|--no-copy] [--batch N]\n"
		"                  [--async]\n"
		"  lat   ping-pong in poll mode, one-way latency = RTT/2 (p50, mean)\n"
		"  rate  one-way stream, messages/s at the receiver\n"
		"  bw    one-way stream, bytes/s at the receiver (GB = 1e9)\n"
		"  -n    iterations (lat: default 1000000; rate/bw: messages, default: run -T)\n"
		"  -T    seconds (rate/bw: default 1; lat: stop early after this long)\n"
		"  -m    connection MTU (default: fits SIZE in one packet up to 1 MiB+32)\n"
		"  --slots  mailbox slots each way, a power of two (default depends on mode)\n"
		"  -c    CPUs of the measuring and the other process (default 0,1; -1 = no pinning)\n"
		"  --copy   receiver memcpy()s every message out of the mailbox into its own\n"
		"           buffer, as ucx_perftest's receiver gets it (default for bw)\n"
		"  --no-copy  receiver only checks the sequence numbers in place (default for rate)\n"
		"  --batch N  packets per shmcm_poll() call (default 64)\n"
		"  --async  bw: send with shmcm_send_ref() from one constant buffer, up to\n"
		"           SHMCM_REF_WINDOW pulls in flight (needs an MTU smaller than -s)\n");
}

static uint64_t parse_size(const char *s, const char *what)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		die("bad %s '%s'", what, s);
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (*end)
		die("bad %s '%s'", what, s);
	return v;
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "slots", required_argument, NULL, 'S' },
		{ "copy",  no_argument,       NULL, 'C' },
		{ "async", no_argument,       NULL, 'A' },
		{ "no-copy", no_argument,     NULL, 'N' },
		{ "batch", required_argument, NULL, 'B' },
		{ "help",  no_argument,       NULL, 'h' },
		{ 0 }
	};
	struct opts o = { .cpu = { 0, 1 }, .batch = 64 };
	bool have_w = false;
	int copy = -1;
	char name[64], err[256];
	int ch;

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "lat"))
		o.mode = M_LAT;
	else if (!strcmp(argv[1], "rate"))
		o.mode = M_RATE;
	else if (!strcmp(argv[1], "bw"))
		o.mode = M_BW;
	else {
		usage(stderr);
		die("unknown test '%s'", argv[1]);
	}
	optind = 2;
	while ((ch = getopt_long(argc, argv, "s:n:T:w:m:c:h", lopts, NULL)) != -1) {
		switch (ch) {
		case 's': o.size = parse_size(optarg, "size"); break;
		case 'n': o.iters = parse_size(optarg, "iteration count"); break;
		case 'w': o.warmup = parse_size(optarg, "warm-up count"); have_w = true; break;
		case 'T': o.secs = strtod(optarg, NULL);
			  if (!(o.secs > 0 && o.secs < 3600))
				  die("bad duration '%s'", optarg);
			  break;
		case 'm': o.mtu = (uint32_t)parse_size(optarg, "MTU"); break;
		case 'S': o.slots = (uint32_t)parse_size(optarg, "slot count"); break;
		case 'c': if (sscanf(optarg, "%d,%d", &o.cpu[0], &o.cpu[1]) != 2)
				  die("bad CPU list '%s' (want A,B)", optarg);
			  break;
		case 'C': copy = 1; break;
		case 'A': o.async = true; break;
		case 'N': copy = 0; break;
		case 'B': o.batch = (uint32_t)parse_size(optarg, "poll batch");
			  if (!o.batch)
				  die("--batch must be at least 1");
			  break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc)
		die("unexpected argument '%s'", argv[optind]);
	/* bw: the receiver copies each message into its own buffer by
	 * default, so the data ends where ucx_perftest's tag_bw puts it */
	o.copy = copy < 0 ? o.mode == M_BW : copy;
	if (o.size < 8)
		die("size must be given (-s) and at least 8 bytes (the sequence number)");
	if (o.size > (256u << 20))
		die("size %zu too large (256 MiB at most)", o.size);
	if (o.mode == M_LAT) {
		if (!o.iters)
			o.iters = 1000000;
		if (!have_w)
			o.warmup = 10000;
	} else {
		if (!o.iters && !o.secs)
			o.secs = 1.0;
		if (!have_w)
			o.warmup = o.size <= 4096 ? 100000 : o.size <= 65536 ? 2000 : 200;
		if (o.warmup == 0)
			o.warmup = 1;	/* the clock starts at a received message */
	}
	if (!o.mtu) {
		uint64_t m = o.size + SHMCM_UDATA_HLEN;
		o.mtu = (uint32_t)(m > (1u << 20) + SHMCM_UDATA_HLEN
				   ? (1u << 20) + SHMCM_UDATA_HLEN : m);
	}
	if (o.mtu < SHMCM_UDATA_HLEN + 8)
		die("MTU %u too small for an 8-byte message (at least %u)", o.mtu, SHMCM_UDATA_HLEN + 8);
	if (!o.slots) {
		/* about 2 MiB each way (the ring stays in cache), 8 to 1024
		 * slots: measured best for 64 KiB and 1 MiB messages */
		uint64_t want = (2ull << 20) / o.mtu, sl = 8;
		while (sl < want && sl < 1024)
			sl <<= 1;
		o.slots = o.mode == M_LAT ? 64 : (uint32_t)sl;
	}

	struct mbox_cfg cfg = { .nslots = o.slots, .mtu = o.mtu, .con_tmo_ms = 1000, .defq_max = 0 };
	bool replaced;
	snprintf(name, sizeof(name), "shmcm-perf-%d", (int)getpid());
	if (mbox_create(name, &cfg, &replaced, err, sizeof(err)) < 0)
		die("mbox_create: %s", err);
	memcpy(g_name, name, sizeof(g_name));
	atexit(parent_cleanup);

	/* stdout is a pipe under bench/run: flush before fork */
	fflush(stdout);
	pid_t me = getpid(), pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	bool parent = pid > 0;
	if (parent) {
		g_child = pid;
	} else {
		g_name[0] = 0;	/* the parent removes it */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != me)
			_exit(1);
	}
	struct st s = { .o = &o };
	uint64_t budget = o.mode == M_LAT ? 60 : (uint64_t)(o.secs + 60);

	signal(SIGALRM, on_alarm);
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	signal(SIGHUP, on_term);
	alarm((unsigned)budget);
	s.buf = aligned_alloc(64, (o.size + 63) & ~(size_t)63);
	s.sink = o.copy ? aligned_alloc(64, (o.size + 63) & ~(size_t)63) : NULL;
	if (o.async) {
		if (o.mode != M_BW)
			die("--async is for bw");
		if (o.size < 16)
			die("--async needs messages of at least 16 bytes");
		s.abuf = aligned_alloc(64, (o.size + 63) & ~(size_t)63);
		if (!s.abuf)
			die("out of memory");
		memset(s.abuf, 0x5a, o.size);
	}
	if (!s.buf || (o.copy && !s.sink))
		die("out of memory");
	memset(s.buf, 0xa5, o.size);
	pin(o.cpu[parent ? 0 : 1]);

	/* parent: lat ping (measures) / stream receiver (measures);
	 * child: lat pong / stream sender */
	if (o.mode == M_LAT) {
		g_role = parent ? "ping" : "pong";
		open_side(&s, name, parent ? MBOX_SIDE_A : MBOX_SIDE_B,
			  parent ? deliver_ping : deliver_pong);
		if (parent)
			lat_ping(&s);
		else
			lat_pong(&s);
	} else {
		g_role = parent ? "receiver" : "sender";
		open_side(&s, name, parent ? MBOX_SIDE_A : MBOX_SIDE_B,
			  parent ? deliver_sink : deliver_ping);
		if (parent)
			stream_recv(&s);
		else
			stream_send(&s);
	}
	free(s.buf);
	free(s.sink);
	if (!parent) {
		fflush(stdout);
		_exit(0);
	}

	int status, rc = 0;
	if (waitpid(pid, &status, 0) < 0)
		die("waitpid: %s", strerror(errno));
	g_child = 0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "shmcm_perf: the %s process failed (%s %d)\n",
			o.mode == M_LAT ? "pong" : "sender",
			WIFEXITED(status) ? "exit" : "signal",
			WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		rc = 1;
	}
	if (mbox_unlink(name, false, err, sizeof(err)) < 0) {
		fprintf(stderr, "shmcm_perf: mbox_unlink: %s\n", err);
		rc = 1;
	}
	g_name[0] = 0;
	return rc;
}
