/* Ports end to end on loopback: a peer host in a child process (fork, so
 * each host keeps its single thread) echoes what it receives; the parent
 * checks what a user of port.h sees over shm:// and tcp://. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/log.h"
#include "core/uri.h"
#include "core/xtime.h"
#include "port/port.h"
#include "port/port_pri.h"
#include "xprt/xrc.h"
#include "xprt/mbox.h"

#define S 1000000000ull
#define ECHO_PORT 1

static char mbox_name[64];

/* ------------------------------------------------ the echo host (child) */

struct ebuf {
	struct xp_port *p;
	void *buf;
	unsigned size;
	enum xp_prio prio;
};

static void echo_sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	struct ebuf *b = ctx;

	xp_provide_receive_buffer(b->p, b->buf, b->size, b->prio);
}

/* Never returns.  Writes the tcp port (or 0) to `fd` once listening. */
static void echo_host(const char *listen, int fd)
{
	char err[256];
	struct xuri u;
	struct xp_host_opts o = { .recv_tokens = 128 };
	struct xp_host *h;
	struct xp_port *p;
	static struct ebuf bufs[2][16][4];
	uint16_t port;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (xuri_parse(listen, 0, &u, err, sizeof(err)) < 0 ||
	    !(h = xp_host_new(&o, err, sizeof(err))) ||
	    xp_host_listen(h, &u, err, sizeof(err)) < 0 ||
	    !(p = xp_open(h, ECHO_PORT, err, sizeof(err)))) {
		fprintf(stderr, "echo host: %s\n", err);
		_exit(3);
	}
	for (unsigned pr = 0; pr < 2; pr++)
		for (unsigned s = 4; s < 16 + 4 && s <= 18; s++)
			for (unsigned k = 0; k < 4; k++) {
				struct ebuf *b = &bufs[pr][s - 4][k];

				b->p = p;
				b->size = s;
				b->prio = pr;
				b->buf = malloc(xp_max_length_for_size(s));
				if (xp_provide_receive_buffer(p, b->buf, s, pr) < 0)
					_exit(4);
			}
	port = xp_host_listen_port(h, 0);
	if (write(fd, &port, sizeof(port)) != sizeof(port))
		_exit(5);
	close(fd);
	/* messages taken while waiting for a send token, echoed next */
	static struct xp_event later[2 * 16 * 4];
	unsigned nlater = 0;

	for (;;) {
		struct xp_event ev;
		int rc;

		if (nlater) {
			ev = later[--nlater];
		} else if ((rc = xp_blocking_receive(p, &ev, 30 * S, 0)) <= 0) {
			_exit(rc == 0 ? 6 : 7);
		} else if (ev.type != XP_RECV_EVENT && ev.type != XP_HIGH_RECV_EVENT) {
			xp_unknown(p, &ev);
			continue;
		}
		if (ev.length >= 4 && !memcmp(ev.buffer, "quit", 4))
			_exit(0);
		/* the first byte of each message, in the order they came;
		 * "ord?" gets them back instead of its echo, and starts
		 * again */
		static char order[64];
		static unsigned nord;
		bool ask = ev.length >= 4 && !memcmp(ev.buffer, "ord?", 4);

		if (!ask && ev.length && nord < sizeof(order))
			order[nord++] = *(const char *)ev.buffer;
		unsigned olen = nord;

		if (ask)
			nord = 0;	/* the reply is copied before the next message */
		if (ev.length >= 4 && !memcmp(ev.buffer, "zzz.", 4))
			usleep(100000);	/* a reply that comes while the peer sleeps */
		if (ev.length >= 4 && !memcmp(ev.buffer, "die.", 4)) {
			usleep(100000);	/* a hang-up that comes while the peer sleeps */
			_exit(0);
		}
		struct ebuf *b = &bufs[ev.prio][ev.size - 4][0];
		for (unsigned k = 0; k < 4; k++)
			if (bufs[ev.prio][ev.size - 4][k].buf == ev.buffer)
				b = &bufs[ev.prio][ev.size - 4][k];
		/* echo back from the same buffer; re-provide it once sent */
		while (xp_send(p, ev.sender_node, ev.sender_port, ev.prio, ask ? order : ev.buffer,
			       ask ? olen : ev.length, echo_sent, b) == -EAGAIN) {
			struct xp_event e2;

			if (xp_receive(p, &e2) != 1)
				continue;
			if (e2.type == XP_RECV_EVENT || e2.type == XP_HIGH_RECV_EVENT)
				later[nlater++] = e2;
			else
				xp_unknown(p, &e2);
		}
	}
}

static pid_t child = -1;

static pid_t spawn(const char *listen, uint16_t *port)
{
	int pfd[2];
	pid_t pid;

	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		echo_host(listen, pfd[1]);
	}
	close(pfd[1]);
	child = pid;
	assert_int_equal(read(pfd[0], port, sizeof(*port)), sizeof(*port));
	close(pfd[0]);
	return pid;
}

static int reap_child(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return -1;
	child = -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* -------------------------------------------------------- the client */

static bool in_send, in_unknown, in_close;
static struct { void *ctx; enum xp_status st; } dn[64];
static unsigned ndone;

static void sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	/* seed 001 section 2: callbacks only from xp_unknown() -- and from
	 * xp_close(), for the sends it drops */
	assert_false(in_send);
	assert_true(in_unknown || in_close);
	dn[ndone % 64].ctx = ctx;
	dn[ndone % 64].st = st;
	ndone++;
}

static int send1(struct xp_port *p, uint32_t node, unsigned dst, enum xp_prio prio,
		 const void *buf, size_t len, void *ctx)
{
	int rc;

	in_send = true;
	rc = xp_send(p, node, dst, prio, buf, len, sent, ctx);
	in_send = false;
	return rc;
}

static bool internal(const struct xp_event *ev)
{
	return ev->type == XP_SENT_TOKENS_EVENT || ev->type == XP_ALARM_EVENT;
}

static void unknown(struct xp_port *p, const struct xp_event *ev)
{
	in_unknown = true;
	xp_unknown(p, ev);
	in_unknown = false;
}

/* Receives until an event for the program (a message, a send's event),
 * handing the library's own to xp_unknown(), or the timeout: 1 or 0. */
static int wait_event(struct xp_port *p, struct xp_event *ev, uint64_t tmo)
{
	uint64_t end = xtime_ns() + tmo;

	for (;;) {
		uint64_t now = xtime_ns();
		int rc;

		if (now >= end)
			return 0;
		if ((rc = xp_blocking_receive(p, ev, end - now, 20000)) <= 0)
			return rc;
		if (!internal(ev))
			return 1;
		unknown(p, ev);
	}
}

static void close_port(struct xp_port *p)
{
	in_close = true;
	xp_close(p);
	in_close = false;
}

/* Runs callbacks until n sends have completed (at least: one event runs
 * every callback due); no message may come. */
static void wait_done(struct xp_port *p, unsigned n, uint64_t tmo)
{
	uint64_t end = xtime_ns() + tmo;
	struct xp_event ev;

	while (ndone < n && xtime_ns() < end)
		if (xp_blocking_receive(p, &ev, 1000000, 0) == 1) {
			assert_true(internal(&ev));
			unknown(p, &ev);
		}
	assert_true(ndone >= n);
}

static struct xp_host *client(const char *uri, uint32_t *node, char *err)
{
	struct xp_host_opts o = { .send_tokens = 8, .recv_tokens = 16, .send_timeout_ns = S / 5 };
	struct xp_host *h = xp_host_new(&o, err, 256);
	struct xuri u;
	int rc;

	assert_non_null(h);
	assert_int_equal(xuri_parse(uri, 0, &u, err, 256), 0);
	rc = xp_host_connect(h, &u, err, 256);
	if (rc <= 0)
		fail_msg("connect %s: %s", uri, err);
	*node = (uint32_t)rc;
	/* connecting again names the same node */
	assert_int_equal(xp_host_connect(h, &u, err, 256), rc);
	assert_true(xp_node_up(h, *node));
	return h;
}

/* Sends whose completions are events (xp_send_no_callback), and a
 * message handed to xp_unknown(), which gives its buffer back. */
/* A 90-byte no-callback send to the echo port: its SENT event, and the
 * echo landing in `in` (the buffer the port has for its size). */
static void echo_90(struct xp_port *p, uint32_t node, const uint8_t *msg, const uint8_t *in)
{
	struct xp_event ev;

	assert_int_equal(xp_send_no_callback(p, node, ECHO_PORT, XP_LOW, msg, 90), 0);
	for (int n = 0; n < 2; n++) {
		assert_int_equal(wait_event(p, &ev, 5 * S), 1);
		if (ev.type == XP_RECV_EVENT) {
			assert_ptr_equal(ev.buffer, in);
			assert_memory_equal(in, msg, 90);
		} else {
			assert_int_equal(ev.type, XP_SENT_EVENT);
		}
	}
}

static void legacy_sends(struct xp_port *p, uint32_t node, const uint8_t *out, uint8_t *in)
{
	struct xp_event ev;
	bool got_sent = false, got_echo = false;

	assert_int_equal(xp_provide_receive_buffer(p, in, 7, XP_LOW), 0);
	assert_int_equal(xp_send_no_callback(p, node, ECHO_PORT, XP_LOW, out, 100), 0);
	assert_int_equal(xp_num_send_tokens(p), 7);
	while (!got_sent || !got_echo) {
		assert_int_equal(wait_event(p, &ev, 5 * S), 1);
		if (ev.type == XP_SENT_EVENT) {
			assert_false(got_sent);
			got_sent = true;
			assert_ptr_equal(ev.buffer, out);
			assert_int_equal(ev.length, 100);
			assert_int_equal(ev.target_node, node);
			assert_int_equal(ev.target_port, ECHO_PORT);
			assert_int_equal(ev.prio, XP_LOW);
			assert_int_equal(xp_num_send_tokens(p), 8);
		} else {
			assert_int_equal(ev.type, XP_RECV_EVENT);
			assert_false(got_echo);
			got_echo = true;
			assert_memory_equal(in, out, 100);
			/* not wanted: the buffer goes back to the port */
			xp_unknown(p, &ev);
			assert_int_equal(xp_num_receive_tokens(p), 15);
		}
	}
	/* the next message of that size lands in it with no new provide */
	memset(in, 0, 100);
	echo_90(p, node, out + 1, in);
	assert_int_equal(xp_num_receive_tokens(p), 16);
	/* a failure is an event too, with the GM status */
	assert_int_equal(xp_send_no_callback(p, node, 11, XP_HIGH, out, 10), 0);
	assert_int_equal(wait_event(p, &ev, 5 * S), 1);
	assert_int_equal(ev.type, XP_FAILED_SEND_EVENT);
	assert_int_equal(ev.status, XP_SEND_TARGET_PORT_CLOSED);
	assert_int_equal(ev.target_port, 11);
	assert_int_equal(ev.prio, XP_HIGH);
	assert_ptr_equal(ev.buffer, out);
	assert_int_equal(xp_num_send_tokens(p), 8);
	xp_resume_sending(p, XP_HIGH, node, 11);
	/* ...and so is a send the receiver provides no buffer for (class 19)
	 * within the send timeout; the stream goes on once resumed */
	assert_int_equal(xp_send_no_callback(p, node, ECHO_PORT, XP_LOW, out, 270000), 0);
	assert_int_equal(wait_event(p, &ev, 5 * S), 1);
	assert_int_equal(ev.type, XP_FAILED_SEND_EVENT);
	assert_int_equal(ev.status, XP_SEND_TIMED_OUT);
	assert_int_equal(ev.length, 270000);
	assert_int_equal(xp_num_send_tokens(p), 8);
	xp_resume_sending(p, XP_LOW, node, ECHO_PORT);
	assert_int_equal(xp_provide_receive_buffer(p, in, 7, XP_LOW), 0);
	echo_90(p, node, out + 2, in);
}

/* DMA memory: sends from it and from registered memory arrive intact, and
 * once a send's callback has run the library never touches its buffer
 * again (it is made inaccessible while more traffic flows). */
static void dma_sends(struct xp_port *p, uint32_t node, uint8_t *out, uint8_t *in,
		      const char *scheme)
{
	struct xp_port_stats st;
	uint64_t direct0;
	const size_t len = 1 << 20, msg = 100000;
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *m = xp_dma_malloc(p, len);
	struct xp_event ev;
	unsigned n0;

	assert_non_null(m);
	assert_int_equal((uintptr_t)m % (uintptr_t)pg, 0);
	for (size_t i = 0; i < len; i += 4096)
		assert_int_equal(m[i], 0);
	assert_null(xp_dma_malloc(p, 0));
	/* from 1 MiB on: whole 2 MiB pages, aligned (transparent huge pages
	 * may back them), all of len usable and zeroed; freed whole */
	assert_int_equal((uintptr_t)m % (2u << 20), 0);
	{
		const size_t big = (3u << 20) + 1;
		uint8_t *b = xp_dma_malloc(p, big);

		assert_non_null(b);
		assert_int_equal((uintptr_t)b % (2u << 20), 0);
		assert_int_equal(b[0] | b[big - 1] | b[(2u << 20) + 5], 0);
		b[big - 1] = 1;
		assert_int_equal(xp_register_memory(p, b + big - 1, 1), -EEXIST);
		xp_dma_free(p, b);
		assert_int_equal(xp_deregister_memory(p, b, big), -EINVAL);	/* forgotten */
		/* unmapped to its last 2 MiB page, past len */
		assert_int_equal(msync(b + (4u << 20) - 4096, 4096, MS_ASYNC), -1);
		assert_int_equal(errno, ENOMEM);
		assert_null(xp_dma_malloc(p, SIZE_MAX - 4096));
	}
	assert_int_equal(xp_register_memory(p, m + 10, 5), -EEXIST);
	assert_int_equal(xp_deregister_memory(p, m, len), -EINVAL);	/* xp_dma_free's */
	assert_int_equal(xp_register_memory(p, out, 300000), 0);
	assert_int_equal(xp_register_memory(p, out + 299999, 2), -EEXIST);
	assert_int_equal(xp_register_memory(p, out, 0), -EINVAL);
	assert_int_equal(xp_deregister_memory(p, out, 299999), -EINVAL);
	for (size_t i = 0; i < msg; i++)
		m[i] = (uint8_t)(i * 13 + 1);
	xp_port_stats(p, &st);
	direct0 = st.direct_bytes;
	usleep(20000);	/* past the high-priority sends' window (shm) */
	if (!strcmp(scheme, "rdma") || !strcmp(scheme, "tcp"))
		assert_int_equal(direct0, 0);	/* nothing registered so far */
	/* shm: big low-priority fragments go by reference while no high
	 * priority was sent for 10 ms */
	usleep(20000);
	for (int round = 0; round < 2; round++) {
		const uint8_t *src = round ? out : m;

		n0 = ndone;
		memset(in, 0, msg);
		assert_int_equal(xp_provide_receive_buffer(p, in, 17, XP_LOW), 0);
		assert_int_equal(send1(p, node, ECHO_PORT, XP_LOW, src, msg, NULL), 0);
		assert_int_equal(wait_event(p, &ev, 5 * S), 1);
		assert_int_equal(ev.type, XP_RECV_EVENT);
		assert_memory_equal(in, src, msg);
		wait_done(p, n0 + 1, 5 * S);
		assert_int_equal(dn[(ndone - 1) % 64].st, XP_SUCCESS);
		if (round == 0)	/* the callback ran: the buffer is ours alone */
			assert_int_equal(mprotect(m, len, PROT_NONE), 0);
	}
	/* over rdma both went from the user's memory (registered), over shm
	 * the peer pulled both, over tcp the kernel copied */
	xp_port_stats(p, &st);
	assert_int_equal(st.direct_bytes - direct0, strcmp(scheme, "tcp") ? 2 * msg : 0);
	assert_int_equal(mprotect(m, len, PROT_READ | PROT_WRITE), 0);
	assert_int_equal(xp_deregister_memory(p, out, 300000), 0);
	assert_int_equal(xp_deregister_memory(p, out, 300000), -EINVAL);
	xp_dma_free(p, m);
	/* freed: the range may be registered afresh (and is forgotten at close) */
	assert_non_null(m = xp_dma_malloc(p, 4096));
}

/* Bulk both ways at once: WIN messages of 200000 bytes in flight, each
 * echoed from the buffer it landed in, so both hosts send big messages
 * while they receive them (over shm: both pull from each other).  Every
 * reply is checked; none may be lost or late. */
#define WIN 4
#define BIG 200000
static void bulk_both_ways(struct xp_port *p, uint32_t node, const char *scheme)
{
	static uint8_t tx[WIN][BIG], rx[WIN][BIG];
	unsigned sent = 0, got = 0, n0 = ndone;
	const unsigned total = 200;
	struct xp_port_stats st;
	struct xp_event ev;
	uint64_t direct0;

	xp_port_stats(p, &st);
	direct0 = st.direct_bytes;
	for (unsigned k = 0; k < WIN; k++)
		assert_int_equal(xp_provide_receive_buffer(p, rx[k], 18, XP_LOW), 0);
	/* past the high-priority window of the tests before (XP_HIGH_RECENT_NS):
	 * over shm the peer pulls these */
	usleep(20000);
	while (got < total) {
		while (sent < total && sent - got < WIN) {
			uint8_t *b = tx[sent % WIN];

			/* a buffer is ours again once its send's callback ran */
			if (sent >= WIN && ndone - n0 <= sent - WIN) {
				if (sent != got)
					break;
				wait_done(p, n0 + sent - WIN + 1, 5 * S);
			}

			for (size_t i = 0; i < BIG; i += 512)
				b[i] = (uint8_t)(sent + i / 512);
			memcpy(b, &sent, sizeof(sent));
			assert_int_equal(send1(p, node, ECHO_PORT, XP_LOW, b, BIG, NULL), 0);
			sent++;
		}
		if (sent == got)
			continue;
		assert_int_equal(wait_event(p, &ev, 5 * S), 1);
		assert_int_equal(ev.type, XP_RECV_EVENT);
		assert_int_equal(ev.length, BIG);
		/* in order: the stream's messages come back as they went */
		assert_memory_equal(ev.buffer, &got, sizeof(got));
		for (size_t i = 512; i < BIG; i += 512)
			assert_int_equal(((uint8_t *)ev.buffer)[i], (uint8_t)(got + i / 512));
		got++;
		assert_int_equal(xp_provide_receive_buffer(p, ev.buffer, 18, XP_LOW), 0);
	}
	wait_done(p, n0 + total, 5 * S);
	/* over shm the peer pulled most (a message begun in small pieces
	 * ends in them; a retransmission counts again) */
	xp_port_stats(p, &st);
	if (!strcmp(scheme, "shm"))
		assert_true(st.direct_bytes - direct0 >= (uint64_t)total * BIG / 2);
}

/* Sends made from send callbacks go out together when xp_unknown()
 * returns (over shm, several frames to a mailbox packet): a stream of
 * small messages, each callback sending the next, comes back from the
 * echo host whole, every message once. */
#define CS_TOTAL 3000
static struct {
	struct xp_port *p;
	uint32_t node;
	unsigned next, fails;
	uint8_t msg[64][120];
} cs;

/* classes 6 and 7 in turn: each end has buffers of both for the window */
static size_t cs_len(uint32_t i) { return i & 1 ? 57 + (i * 37) % 64 : 25 + (i * 37) % 32; }

static void cs_fill(uint8_t *m, uint32_t i)
{
	for (size_t k = 0; k < cs_len(i); k++)
		m[k] = (uint8_t)(i + k * 13);
	memcpy(m, &i, 4);
}

static void cs_sent(struct xp_port *p, void *ctx, enum xp_status st);

static void cs_push(void)
{
	while (cs.next < CS_TOTAL && xp_num_send_tokens(cs.p)) {
		uint8_t *m = cs.msg[cs.next % 64];	/* at most 8 in flight */

		cs_fill(m, cs.next);
		if (xp_send(cs.p, cs.node, ECHO_PORT, XP_LOW, m, cs_len(cs.next), cs_sent,
			    NULL) != 0) {
			cs.fails++;
			return;
		}
		cs.next++;
	}
}

static void cs_sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	assert_true(in_unknown);
	if (st != XP_SUCCESS)
		cs.fails++;
	cs_push();
}

static void callback_stream(struct xp_port *p, uint32_t node)
{
	static uint8_t in[8][120], seen[CS_TOTAL], want[120];
	unsigned got = 0;
	uint64_t end = xtime_ns() + 30 * S;
	struct xp_event ev;

	memset(&cs, 0, sizeof(cs));
	memset(seen, 0, sizeof(seen));
	cs.p = p;
	cs.node = node;
	for (unsigned k = 0; k < 8; k++)
		assert_int_equal(xp_provide_receive_buffer(p, in[k], 6 + (k & 1), XP_LOW), 0);
	cs_push();
	assert_int_equal(cs.next, 8);
	while (got < CS_TOTAL && xtime_ns() < end) {
		uint32_t i;

		if (xp_blocking_receive(p, &ev, S / 10, 0) != 1)
			continue;
		if (internal(&ev)) {
			unknown(p, &ev);
			continue;
		}
		assert_int_equal(ev.type, XP_RECV_EVENT);
		assert_true(ev.length >= 4);
		memcpy(&i, ev.buffer, 4);
		assert_true(i < CS_TOTAL);
		assert_int_equal(seen[i], 0);
		seen[i] = 1;
		assert_int_equal(ev.length, cs_len(i));
		cs_fill(want, i);
		assert_memory_equal(ev.buffer, want, ev.length);
		/* given back while more are to come: none is left over for
		 * the tests after this one */
		if (++got <= CS_TOTAL - 8)
			assert_int_equal(xp_provide_receive_buffer(p, ev.buffer, ev.size, XP_LOW),
					 0);
	}
	assert_int_equal(cs.fails, 0);
	assert_int_equal(got, CS_TOTAL);
	while (xp_num_send_tokens(p) < 8 && xtime_ns() < end)
		if (xp_blocking_receive(p, &ev, S / 100, 0) == 1) {
			assert_true(internal(&ev));
			unknown(p, &ev);
		}
	assert_int_equal(xp_num_send_tokens(p), 8);
	assert_int_equal(xp_num_receive_tokens(p), 16);
}

/* Ping-pong of several sizes and both priorities, then the error paths
 * a user sees: closed port, timeout, node death. */
static void run_echo(const char *listen)
{
	char err[256], uri[160];
	uint16_t port;
	pid_t pid = spawn(listen, &port);
	uint32_t node;
	struct xp_host *h;
	struct xp_port *p;
	static uint8_t out[300000], in[2][1 << 18];
	static const size_t lens[] = { 0, 1, 8, 100, 4000, 40000, 100000, 131064 };
	struct xp_event ev;
	char scheme[16];

	snprintf(scheme, sizeof(scheme), "%s", listen);
	snprintf(uri, sizeof(uri), "%s", listen);
	h = client(uri, &node, err);
	assert_non_null(p = xp_open(h, 0, err, sizeof(err)));
	assert_int_equal(xp_num_send_tokens(p), 8);
	for (size_t i = 0; i < sizeof(out); i++)
		out[i] = (uint8_t)(i * 7 + 3);
	ndone = 0;
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		for (unsigned pr = 0; pr < 2; pr++) {
			size_t len = lens[i];
			unsigned sz = xp_min_size_for_length(len) < 4 ? 4 : xp_min_size_for_length(len);

			memset(in[pr], 0, len + 16);
			assert_int_equal(xp_provide_receive_buffer(p, in[pr], sz, pr), 0);
			assert_int_equal(send1(p, node, ECHO_PORT, pr, out, len, (void *)len), 0);
			assert_int_equal(xp_num_send_tokens(p), 7);
			assert_int_equal(wait_event(p, &ev, 5 * S), 1);
			assert_int_equal(ev.type, pr ? XP_HIGH_RECV_EVENT : XP_RECV_EVENT);
			assert_ptr_equal(ev.buffer, in[pr]);
			assert_int_equal(ev.length, len);
			assert_int_equal(ev.sender_node, node);
			assert_int_equal(ev.sender_port, ECHO_PORT);
			assert_memory_equal(in[pr], out, len);
			wait_done(p, ndone + (ndone < i * 2 + pr + 1), 5 * S);
			assert_int_equal(dn[(ndone - 1) % 64].st, XP_SUCCESS);
			assert_int_equal(xp_num_send_tokens(p), 8);
		}
	*strchr(scheme, ':') = 0;
	callback_stream(p, node);
	legacy_sends(p, node, out, in[0]);
	bulk_both_ways(p, node, scheme);
	dma_sends(p, node, out, in[0], scheme);
	/* a port that is not open there */
	assert_int_equal(send1(p, node, 9, XP_LOW, out, 10, NULL), 0);
	wait_done(p, ndone + 1, 5 * S);
	assert_int_equal(dn[(ndone - 1) % 64].st, XP_SEND_TARGET_PORT_CLOSED);
	/* a size nobody provides there: NOBUF until the 200 ms timeout */
	uint64_t t0 = xtime_ns();
	assert_int_equal(send1(p, node, ECHO_PORT, XP_LOW, out, 270000, NULL), 0);	/* class 19 */
	wait_done(p, ndone + 1, 5 * S);
	assert_int_equal(dn[(ndone - 1) % 64].st, XP_SEND_TIMED_OUT);
	assert_true(xtime_ns() - t0 >= S / 5);
	struct xp_port_stats st;
	xp_port_stats(p, &st);
	assert_true(st.nacks_nobuf >= 2);
	xp_drop_sends(p, XP_LOW, node, ECHO_PORT);

	/* the peer host dies with big sends on their way (over shm: being
	 * pulled): each completes, delivered or UNREACHABLE, none hangs */
	static uint8_t big[3][BIG];
	unsigned n0 = ndone;

	usleep(20000);	/* past the high-priority window: shm pulls these */
	for (int k = 0; k < 3; k++)
		assert_int_equal(send1(p, node, ECHO_PORT, XP_LOW, big[k], BIG, NULL), 0);
	xp_receive(p, &ev);	/* some progress */
	kill(pid, SIGKILL);
	assert_int_equal(reap_child(pid), 128 + SIGKILL);
	for (uint64_t end = xtime_ns() + 10 * S; ndone < n0 + 3 && xtime_ns() < end;)
		if (xp_blocking_receive(p, &ev, S / 100, 0) == 1 && internal(&ev))
			unknown(p, &ev);
	assert_int_equal(ndone, n0 + 3);
	for (unsigned k = n0; k < ndone; k++)
		assert_true(dn[k % 64].st == XP_SUCCESS ||
			    dn[k % 64].st == XP_SEND_TARGET_NODE_UNREACHABLE);
	/* ...and later sends fail UNREACHABLE */
	assert_int_equal(xp_provide_receive_buffer(p, in[0], 5, XP_LOW), 0);
	assert_int_equal(send1(p, node, ECHO_PORT, XP_LOW, out, 10, NULL), 0);
	wait_done(p, ndone + 1, 10 * S);
	assert_int_equal(dn[(ndone - 1) % 64].st, XP_SEND_TARGET_NODE_UNREACHABLE);
	assert_false(xp_node_up(h, node));
	assert_int_equal(send1(p, node, ECHO_PORT, XP_LOW, out, 10, NULL), 0);
	wait_done(p, ndone + 1, S);
	assert_int_equal(dn[(ndone - 1) % 64].st, XP_SEND_TARGET_NODE_UNREACHABLE);
	assert_int_equal(xp_send(p, node + 1, 0, XP_LOW, out, 1, sent, NULL), -ENOENT);
	xp_close(p);
	xp_host_free(h);
}

/* A peer host that sends, on a tcp lane, a well-framed message that holds
 * no port frame: the echo host fails that link while reading its lanes --
 * and must not look at the freed lanes after --
 * then serves the next host. */
static void test_tcp_bad_frame(void **s)
{
	char l[64], err[256];
	uint16_t port;
	pid_t pid;
	uint32_t node, node2;
	struct xp_host *h, *h2;
	struct xp_port *p, *p2;
	struct xp_link *k;
	struct xp_event ev;
	static uint8_t junk[64], in[64];
	int st;

	(void)s;
	snprintf(l, sizeof(l), "tcp://127.0.0.1:%d", 20000 + (getpid() + 7919) % 20000);
	pid = spawn(l, &port);
	h = client(l, &node, err);
	assert_non_null(p = xp_open(h, 0, err, sizeof(err)));
	k = h->links[node - 1];
	assert_true(k && !k->shm && k->nlanes >= 1 && k->lane[0].c);
	memset(junk, 0xff, sizeof(junk));
	assert_int_equal(xrc_post_send(k->lane[0].c, &(struct xrc_sge){ junk, sizeof(junk), NULL },
				       1, 0, 0), 0);
	/* the echo host drops the link: ours goes down */
	for (uint64_t end = xtime_ns() + 10 * S; xp_node_up(h, node) && xtime_ns() < end;)
		if (xp_blocking_receive(p, &ev, S / 100, 0) == 1)
			unknown(p, &ev);
	assert_false(xp_node_up(h, node));
	assert_int_equal(waitpid(pid, &st, WNOHANG), 0);	/* still there */
	xp_close(p);
	xp_host_free(h);

	/* ...and echoes for the next host */
	h2 = client(l, &node2, err);
	assert_non_null(p2 = xp_open(h2, 0, err, sizeof(err)));
	ndone = 0;
	assert_int_equal(xp_provide_receive_buffer(p2, in, xp_min_size_for_length(5) < 4 ? 4 :
						   xp_min_size_for_length(5), XP_LOW), 0);
	assert_int_equal(send1(p2, node2, ECHO_PORT, XP_LOW, "hello", 5, NULL), 0);
	assert_int_equal(wait_event(p2, &ev, 5 * S), 1);
	assert_int_equal(ev.type, XP_RECV_EVENT);
	assert_int_equal(ev.length, 5);
	assert_memory_equal(in, "hello", 5);
	wait_done(p2, 1, 5 * S);
	assert_int_equal(send1(p2, node2, ECHO_PORT, XP_LOW, "quit", 4, NULL), 0);
	wait_done(p2, 2, 5 * S);
	assert_int_equal(reap_child(pid), 0);
	xp_close(p2);
	xp_host_free(h2);
}

/* A host that busy-polled takes its links out of the epoll set; when it
 * then sleeps it puts them back, and the reply that comes during the
 * sleep wakes it (no timer due for seconds), as does the peer's death.  A
 * program that asked for xp_host_fd() keeps them in it. */
static void test_tcp_sleep_after_spin(void **s)
{
	struct xp_host_opts o = { .send_tokens = 8, .recv_tokens = 16, .send_timeout_ns = 30 * S };
	char l[64], err[256];
	uint16_t port;
	pid_t pid;
	struct xuri u;
	struct xp_host *h;
	struct xp_port *p;
	struct xp_link *k;
	struct xp_event ev;
	static uint8_t in[64];
	uint64_t t0;
	int node;

	(void)s;
	snprintf(l, sizeof(l), "tcp://127.0.0.1:%d", 20000 + (getpid() + 4099) % 20000);
	pid = spawn(l, &port);
	assert_non_null(h = xp_host_new(&o, err, sizeof(err)));
	assert_int_equal(xuri_parse(l, 0, &u, err, sizeof(err)), 0);
	if ((node = xp_host_connect(h, &u, err, sizeof(err))) <= 0)
		fail_msg("connect %s: %s", l, err);
	assert_non_null(p = xp_open(h, 0, err, sizeof(err)));
	k = h->links[node - 1];
	assert_true(k && !k->shm && k->lane[0].c);
	ndone = 0;
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 2 * XP_EP_AWAKE_ROUNDS; i++)
			xp_host_progress(h);
		assert_false(k->lane[0].in_ep);
		assert_int_equal(xp_provide_receive_buffer(p, in, 4, XP_LOW), 0);
		assert_int_equal(send1(p, (uint32_t)node, ECHO_PORT, XP_LOW, "zzz.", 4, NULL), 0);
		t0 = xtime_ns();
		/* asleep at once (no spin), 100 ms before the reply comes: only
		 * the reply can end the sleep early */
		do
			assert_int_equal(xp_blocking_receive(p, &ev, 10 * S, 0), 1);
		while (internal(&ev) && (unknown(p, &ev), true));
		assert_int_equal(ev.type, XP_RECV_EVENT);
		assert_memory_equal(in, "zzz.", 4);
		if (xtime_ns() - t0 > 3 * S)
			fail_msg("round %d: the reply took %.1f s: the sleep did not see it", round,
				 (double)(xtime_ns() - t0) / S);
		/* (a host slowed down 100 ms may have had the reply before
		 * it slept: a short sleep puts them in -- unless it finds
		 * work first, so a few rounds) */
		for (int i = 0; i < 100 && !k->lane[0].in_ep; i++) {
			xp_host_progress(h);
			assert_int_equal(xp_host_wait(h, S / 1000), 0);
		}
		assert_true(k->lane[0].in_ep);
	}
	/* the peer dies 100 ms into our sleep: its hang-up ends the sleep */
	for (int i = 0; i < 2 * XP_EP_AWAKE_ROUNDS; i++)
		xp_host_progress(h);
	assert_false(k->lane[0].in_ep);
	assert_int_equal(send1(p, (uint32_t)node, ECHO_PORT, XP_LOW, "die.", 4, NULL), 0);
	t0 = xtime_ns();
	for (uint64_t end = t0 + 10 * S; xp_node_up(h, (uint32_t)node) && xtime_ns() < end;) {
		assert_int_equal(xp_host_wait(h, end - xtime_ns()), 0);
		xp_host_progress(h);
	}
	assert_false(xp_node_up(h, (uint32_t)node));
	if (xtime_ns() - t0 > 3 * S)
		fail_msg("the hang-up took %.1f s to be seen", (double)(xtime_ns() - t0) / S);
	assert_int_equal(reap_child(pid), 0);
	close_port(p);
	xp_host_free(h);

	/* a program that sleeps on xp_host_fd() itself: the lanes stay in */
	pid = spawn(l, &port);
	h = client(l, (uint32_t *)&node, err);
	assert_non_null(p = xp_open(h, 0, err, sizeof(err)));
	k = h->links[node - 1];
	assert_true(xp_host_fd(h) >= 0);
	for (int i = 0; i < 2 * XP_EP_AWAKE_ROUNDS; i++)
		xp_host_progress(h);
	assert_true(k->lane[0].in_ep);
	ndone = 0;
	assert_int_equal(send1(p, (uint32_t)node, ECHO_PORT, XP_LOW, "quit", 4, NULL), 0);
	wait_done(p, 1, 5 * S);
	assert_int_equal(reap_child(pid), 0);
	close_port(p);
	xp_host_free(h);
}

/* A failed test leaves no echo host behind for the next one. */
static int teardown(void **s)
{
	if (child > 0) {
		kill(child, SIGKILL);
		reap_child(child);
	}
	/* a killed echo host cannot remove the mailbox it created */
	for (const char *sfx = "erof"; *sfx; sfx++) {
		char n[80];

		snprintf(n, sizeof(n), "%s-%c", mbox_name, *sfx);
		mbox_unlink(n, true, NULL, 0);
	}
	return 0;
}

static void test_shm_echo(void **s)
{
	char l[100];

	snprintf(l, sizeof(l), "shm://%s-e", mbox_name);
	run_echo(l);
}

static void test_tcp_echo(void **s)
{
	char l[64];

	snprintf(l, sizeof(l), "tcp://127.0.0.1:%d", 20000 + getpid() % 20000);
	run_echo(l);
}

/* The served mailbox takes the next peer host after one leaves; node ids
 * are never reused. */
static void test_shm_reserve(void **s)
{
	char l[100], err[256];
	uint16_t port;
	pid_t pid;
	uint32_t node;
	struct xp_event ev;
	char buf[64];

	snprintf(l, sizeof(l), "shm://%s-r", mbox_name);
	pid = spawn(l, &port);
	for (int round = 0; round < 2; round++) {
		struct xp_host *h = client(l, &node, err);
		struct xp_port *p = xp_open(h, 3, err, sizeof(err));

		ndone = 0;
		assert_int_equal(node, 1);	/* each client host counts its own */
		assert_int_equal(xp_provide_receive_buffer(p, buf, 4, XP_HIGH), 0);
		assert_int_equal(send1(p, node, ECHO_PORT, XP_HIGH, "round", 6, NULL), 0);
		assert_int_equal(wait_event(p, &ev, 5 * S), 1);
		assert_string_equal(buf, "round");
		wait_done(p, 1, S);
		close_port(p);
		xp_host_free(h);
	}
	struct xp_host *h = client(l, &node, err);
	struct xp_port *p = xp_open(h, 3, err, sizeof(err));
	assert_int_equal(send1(p, node, ECHO_PORT, XP_LOW, "quit", 4, NULL), 0);
	assert_int_equal(reap_child(pid), 0);
	close_port(p);
	xp_host_free(h);
}

/* seed 001: priorities never block each other.  While high priority is
 * in use on an shm link, a low-priority message does not go into a
 * mailbox that holds anything -- sent from the main loop (xp_send()'s way
 * straight into a slot) as from the queue: a high one sent after it
 * overtakes it.  The peer is stopped meanwhile, so the mailbox holds
 * whatever went in; it says afterwards in which order it took them. */
static void test_shm_low_behind_high(void **s)
{
	char l[100], err[256], hb[3][16], lb[5][16], ob[16];
	uint16_t port;
	pid_t pid;
	uint32_t node;
	struct xp_event ev;

	snprintf(l, sizeof(l), "shm://%s-o", mbox_name);
	pid = spawn(l, &port);
	struct xp_host *h = client(l, &node, err);
	struct xp_port *p = xp_open(h, 3, err, sizeof(err));

	ndone = 0;
	/* high priority is "in use" for 10 ms after a send: a round whose
	 * sends took longer than half that (the host paused us) is run
	 * again */
	for (int round = 0; round < 3; round++) {
		uint64_t t0, took;
		int st;

		for (int i = 0; i < 3; i++)
			assert_int_equal(xp_provide_receive_buffer(p, hb[i], 4, XP_HIGH), 0);
		for (int i = 0; i < 5; i++)
			assert_int_equal(xp_provide_receive_buffer(p, lb[i], 4, XP_LOW), 0);
		assert_int_equal(kill(pid, SIGSTOP), 0);
		assert_int_equal(waitpid(pid, &st, WUNTRACED), pid);	/* stopped now */
		t0 = xtime_ns();
		assert_int_equal(send1(p, node, ECHO_PORT, XP_HIGH, "H1", 3, NULL), 0);
		for (int i = 0; i < 5; i++)
			assert_int_equal(send1(p, node, ECHO_PORT, XP_LOW, "L", 2, NULL), 0);
		assert_int_equal(send1(p, node, ECHO_PORT, XP_HIGH, "H2", 3, NULL), 0);
		took = xtime_ns() - t0;
		assert_int_equal(kill(pid, SIGCONT), 0);
		for (int i = 0; i < 7; i++)
			assert_int_equal(wait_event(p, &ev, 5 * S), 1);
		assert_int_equal(xp_provide_receive_buffer(p, ob, 4, XP_LOW), 0);
		assert_int_equal(send1(p, node, ECHO_PORT, XP_LOW, "ord?", 4, NULL), 0);
		assert_int_equal(wait_event(p, &ev, 5 * S), 1);
		assert_ptr_equal(ev.buffer, ob);
		assert_int_equal(ev.length, 7);
		wait_done(p, 8 * (round + 1), S);
		if (took > 5 * XTIME_NS_PER_MS && round < 2)
			continue;
		assert_memory_equal(ob, "HHLLLLL", 7);
		break;
	}
	assert_int_equal(send1(p, node, ECHO_PORT, XP_LOW, "quit", 4, NULL), 0);
	assert_int_equal(reap_child(pid), 0);
	close_port(p);
	xp_host_free(h);
}

/* A link whose fragments are smaller than a mailbox packet (the host's
 * frag): a low-priority message beyond them, sent from the main loop,
 * goes the way tx_shm() sends it -- by reference, pulled by the peer --
 * never as one frame bigger than the link's fragment. */
static void test_shm_small_frag(void **s)
{
	struct xp_host_opts o = { .send_tokens = 8, .recv_tokens = 16, .frag = 64 };
	char l[100], err[256], small[16], big[256];
	uint8_t msg[150];
	uint16_t port;
	pid_t pid;
	struct xp_event ev;
	struct xp_port_stats st0, st1;
	struct xuri u;
	int node;

	snprintf(l, sizeof(l), "shm://%s-f", mbox_name);
	pid = spawn(l, &port);
	struct xp_host *h = xp_host_new(&o, err, sizeof(err));

	assert_non_null(h);
	assert_int_equal(xuri_parse(l, 0, &u, err, sizeof(err)), 0);
	node = xp_host_connect(h, &u, err, sizeof(err));
	assert_true(node > 0);
	struct xp_port *p = xp_open(h, 3, err, sizeof(err));

	ndone = 0;
	/* a round trip first: the peer has answered whether it can pull */
	assert_int_equal(xp_provide_receive_buffer(p, small, 4, XP_LOW), 0);
	assert_int_equal(send1(p, (uint32_t)node, ECHO_PORT, XP_LOW, "hi", 3, NULL), 0);
	assert_int_equal(wait_event(p, &ev, 5 * S), 1);
	wait_done(p, 1, S);
	usleep(20000);	/* no high priority in use */
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 7 + 3);
	/* twice: after the first, the link knows it may send by reference */
	for (unsigned round = 0; round < 2; round++) {
		xp_port_stats(p, &st0);
		assert_int_equal(xp_provide_receive_buffer(p, big, 8, XP_LOW), 0);
		assert_int_equal(send1(p, (uint32_t)node, ECHO_PORT, XP_LOW, msg, sizeof(msg), NULL),
				 0);
		assert_int_equal(wait_event(p, &ev, 5 * S), 1);
		assert_int_equal(ev.length, sizeof(msg));
		assert_memory_equal(big, msg, sizeof(msg));
		wait_done(p, 2 + round, S);
		assert_int_equal(dn[1 + round].st, XP_SUCCESS);
		xp_port_stats(p, &st1);
		assert_int_equal(st1.direct_bytes - st0.direct_bytes, sizeof(msg));
	}
	/* with high priority in use, low goes in small pieces through the
	 * mailbox: never above the link's fragment, which a packet holds
	 * (4 KiB pieces went by reference, and failed the link where the
	 * peer may not pull from us) */
	char hi[16];

	xp_port_stats(p, &st0);
	assert_int_equal(xp_provide_receive_buffer(p, hi, 4, XP_HIGH), 0);
	assert_int_equal(xp_provide_receive_buffer(p, big, 8, XP_LOW), 0);
	assert_int_equal(send1(p, (uint32_t)node, ECHO_PORT, XP_HIGH, "hi!", 4, NULL), 0);
	assert_int_equal(send1(p, (uint32_t)node, ECHO_PORT, XP_LOW, msg, sizeof(msg), NULL), 0);
	memset(big, 0, sizeof(big));
	for (int n = 0; n < 2; n++) {
		assert_int_equal(wait_event(p, &ev, 5 * S), 1);
		assert_int_equal(ev.length, ev.type == XP_HIGH_RECV_EVENT ? 4 : sizeof(msg));
	}
	assert_memory_equal(big, msg, sizeof(msg));
	assert_string_equal(hi, "hi!");
	wait_done(p, 5, S);
	assert_int_equal(dn[3].st, XP_SUCCESS);
	assert_int_equal(dn[4].st, XP_SUCCESS);
	xp_port_stats(p, &st1);
	assert_int_equal(st1.direct_bytes, st0.direct_bytes);
	/* (high priority was in use a moment ago: the quit may be queued,
	 * not written at once -- our progress sends it, so it runs until the
	 * peer has gone, not only a waitpid) */
	assert_int_equal(send1(p, (uint32_t)node, ECHO_PORT, XP_LOW, "quit", 4, NULL), 0);
	for (uint64_t end = xtime_ns() + 10 * S; xtime_ns() < end;) {
		int st;

		if (waitpid(pid, &st, WNOHANG) == pid) {
			child = -1;
			assert_true(WIFEXITED(st));
			assert_int_equal(WEXITSTATUS(st), 0);
			break;
		}
		xp_blocking_receive(p, &ev, S / 1000, 0);
	}
	assert_int_equal(child, -1);
	close_port(p);
	xp_host_free(h);
}

static int fired[8];
static unsigned nfired;
static struct xp_alarm again;

static void alarm_cb(void *ctx)
{
	assert_true(in_unknown);	/* seed 001: only inside xp_unknown() */
	fired[nfired++ % 8] = (int)(intptr_t)ctx;
}

/* an alarm that sets itself again until it has fired three times */
static void again_cb(void *ctx)
{
	struct xp_port *p = ctx;

	assert_true(in_unknown);
	if (++nfired < 3)
		xp_set_alarm(p, &again, 1000, again_cb, p);
}

/* CPU time this process used so far. */
static uint64_t cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * S +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

/* Waits for the next event of p, which must be an alarm, and hands it to
 * xp_unknown(); returns the ms it took. */
static uint64_t next_alarm(struct xp_port *p, uint64_t t0)
{
	struct xp_event ev;

	assert_int_equal(xp_blocking_receive(p, &ev, 5 * S, 0), 1);
	assert_int_equal(ev.type, XP_ALARM_EVENT);
	unknown(p, &ev);
	return (xtime_ns() - t0) / 1000000;
}

/* gm_set_alarm: alarms fire in due order through XP_ALARM_EVENT and
 * xp_unknown(), a sleeping receive wakes for them, set again they move,
 * cancelled or closed they never fire, and they belong to their port. */
static void test_alarms(void **s)
{
	char err[256];
	struct xp_host *h = xp_host_new(NULL, err, sizeof(err));
	struct xp_port *p = xp_open(h, 0, err, sizeof(err)), *q = xp_open(h, 1, err, sizeof(err));
	struct xp_alarm a, b, c, d;
	struct xp_event ev;
	uint64_t t0 = xtime_ns();

	(void)s;
	assert_non_null(p);
	assert_non_null(q);
	nfired = 0;
	xp_initialize_alarm(&a);
	xp_initialize_alarm(&b);
	xp_initialize_alarm(&c);
	xp_initialize_alarm(&d);
	xp_cancel_alarm(&a);			/* not set: nothing */
	xp_set_alarm(p, &a, 60000, alarm_cb, (void *)1);
	xp_set_alarm(p, &b, 20000, alarm_cb, (void *)2);
	xp_set_alarm(p, &c, 40000, alarm_cb, (void *)3);
	xp_set_alarm(q, &d, 1000, alarm_cb, (void *)4);
	xp_cancel_alarm(&c);
	/* q's alarm is q's: p sees none before b, and sleeps meanwhile (q's
	 * due alarm is no timer of the host) */
	uint64_t cpu0 = cpu_ns();
	assert_true(next_alarm(p, t0) >= 20);
	assert_true(cpu_ns() - cpu0 < (xtime_ns() - t0) / 2);
	assert_int_equal(nfired, 1);
	assert_int_equal(fired[0], 2);
	assert_false(b.set);
	/* a moved closer, then due before any sleep */
	xp_set_alarm(p, &a, 5000, alarm_cb, (void *)1);
	t0 = xtime_ns();
	uint64_t ms = next_alarm(p, t0);
	assert_true(ms >= 5 && ms < 40);
	assert_int_equal(fired[1], 1);
	/* q's alarm waited for q */
	assert_int_equal(xp_receive(q, &ev), 1);
	assert_int_equal(ev.type, XP_ALARM_EVENT);
	assert_int_equal(nfired, 2);
	unknown(q, &ev);
	assert_int_equal(fired[2], 4);
	/* c was cancelled: nothing more */
	assert_int_equal(xp_blocking_receive(p, &ev, S / 20, 0), 0);
	/* an alarm that sets itself again from its callback */
	nfired = 0;
	xp_initialize_alarm(&again);
	xp_set_alarm(p, &again, 1000, again_cb, p);
	while (nfired < 3)
		next_alarm(p, t0);
	assert_false(again.set);
	/* closing q cancels its alarm */
	xp_set_alarm(q, &d, 1000, alarm_cb, (void *)5);
	xp_close(q);
	assert_false(d.set);
	assert_int_equal(xp_blocking_receive(p, &ev, S / 50, 0), 0);
	assert_int_equal(nfired, 3);
	/* "never" as a delay stays never, not a wrapped due time passed */
	xp_set_alarm(p, &a, UINT64_MAX, alarm_cb, (void *)6);
	assert_int_equal(xp_blocking_receive(p, &ev, S / 50, 0), 0);
	assert_true(a.set);
	xp_cancel_alarm(&a);
	assert_int_equal(nfired, 3);
	xp_close(p);
	xp_host_free(h);
}

/* A registration is a range in the address space: one past its end
 * (whose end would wrap to 0, and the overlap test with it) is refused,
 * and one that ends at its top overlaps what it holds.  (A host without
 * links: nothing is registered with a device.) */
static void test_register_range(void **s)
{
	char err[256];
	struct xp_host *h = xp_host_new(NULL, err, sizeof(err));
	struct xp_port *p = xp_open(h, 0, err, sizeof(err));
	uint8_t *top = (uint8_t *)UINTPTR_MAX - 100;

	(void)s;
	assert_non_null(p);
	assert_int_equal(xp_register_memory(p, top, 1000), -EINVAL);
	assert_int_equal(xp_register_memory(p, top, 101), -EINVAL);
	assert_int_equal(xp_register_memory(p, top, 100), 0);
	assert_int_equal(xp_register_memory(p, top + 50, 10), -EEXIST);
	assert_int_equal(xp_register_memory(p, (void *)16, 10), 0);
	assert_int_equal(xp_deregister_memory(p, top, 100), 0);
	assert_int_equal(xp_deregister_memory(p, (void *)16, 10), 0);
	xp_close(p);
	xp_host_free(h);
}

/* An alarm that falls due right as a blocking receive's spin ends (after
 * the spin's last shared clock reading, before the sleep's own) is not
 * slept past: the receive returns it, not its timeout.  The due time
 * moves around the spin's end, iteration by iteration. */
static void test_alarm_at_spin_end(void **s)
{
	char err[256];
	struct xp_host *h = xp_host_new(NULL, err, sizeof(err));
	struct xp_port *p = xp_open(h, 0, err, sizeof(err));
	struct xp_alarm a;
	struct xp_event ev;
	unsigned late = 0;

	(void)s;
	assert_non_null(p);
	xp_initialize_alarm(&a);
	for (unsigned i = 0; i < 3000; i++) {
		xp_set_alarm(p, &a, 45 + i % 11, alarm_cb, NULL);
		if (xp_blocking_receive(p, &ev, S / 2, 50 * 1000) != 1) {
			late++;		/* slept to the timeout past it */
			continue;
		}
		assert_int_equal(ev.type, XP_ALARM_EVENT);
		unknown(p, &ev);
	}
	assert_int_equal(late, 0);
	xp_close(p);
	xp_host_free(h);
}

/* The clock reading a blocking receive's spin rounds share does not
 * outlive it: after a pause, the next receive sees an alarm that fell due
 * meanwhile, whatever round the spin ended on. */
static void test_clock_after_pause(void **s)
{
	char err[256];
	struct xp_host *h = xp_host_new(NULL, err, sizeof(err));
	struct xp_port *p = xp_open(h, 0, err, sizeof(err));
	struct xp_alarm a;
	struct xp_event ev;

	(void)s;
	assert_non_null(p);
	nfired = 0;
	for (int i = 0; i < 20; i++) {
		/* 100 us of busy idle rounds, a different count each time */
		assert_int_equal(xp_blocking_receive(p, &ev, 100000 + 7000 * (uint64_t)i, S), 0);
		xp_initialize_alarm(&a);
		xp_set_alarm(p, &a, 1000, alarm_cb, (void *)7);
		usleep(3000);
		assert_int_equal(xp_receive(p, &ev), 1);
		assert_int_equal(ev.type, XP_ALARM_EVENT);
		unknown(p, &ev);
	}
	assert_int_equal(nfired, 20);
	xp_close(p);
	xp_host_free(h);
}

static void on_alarm(int sig) { }

/* xp_blocking_receive: 0 on timeout, -EINTR on a signal. */
/* Token counts past the bound are refused with a line naming them. */
static void test_token_bound(void **s)
{
	struct xp_host_opts o = { .recv_tokens = XP_MAX_TOKENS + 1 };
	char err[256];

	(void)s;
	assert_null(xp_host_new(&o, err, sizeof(err)));
	assert_non_null(strstr(err, "receive tokens"));
	o = (struct xp_host_opts){ .send_tokens = UINT32_MAX };
	assert_null(xp_host_new(&o, err, sizeof(err)));
	assert_non_null(strstr(err, "send tokens"));
	o = (struct xp_host_opts){ .recv_tokens = 1000 };	/* not a power of two */
	struct xp_host *h = xp_host_new(&o, err, sizeof(err));

	assert_non_null(h);
	xp_host_free(h);
}

static void test_blocking_receive(void **s)
{
	char err[256];
	struct xp_host *h = xp_host_new(NULL, err, sizeof(err));
	struct xp_port *p = xp_open(h, 0, err, sizeof(err));
	struct xp_event ev;
	struct sigaction sa = { .sa_handler = on_alarm };
	uint64_t t0 = xtime_ns();

	assert_non_null(p);
	assert_null(xp_open(h, 0, err, sizeof(err)));
	assert_int_equal(xp_blocking_receive(p, &ev, S / 20, 0), 0);
	assert_true(xtime_ns() - t0 >= S / 20);
	sigaction(SIGALRM, &sa, NULL);
	ualarm(20000, 0);
	assert_int_equal(xp_blocking_receive(p, &ev, 5 * S, 0), -EINTR);
	assert_int_equal(xp_num_receive_tokens(p), 256);
	/* the absolute form: a deadline already past returns at once; one
	 * ahead, spinning first and then sleeping, returns at it */
	t0 = xtime_ns();
	assert_int_equal(xp_blocking_receive_until(p, &ev, t0, t0), 0);
	assert_true(xtime_ns() - t0 < S / 20);
	t0 = xtime_ns();
	assert_int_equal(xp_blocking_receive_until(p, &ev, t0 + S / 20, t0 + S / 100), 0);
	assert_true(xtime_ns() - t0 >= S / 20);
	xp_close(p);
	xp_host_free(h);
}

/* Over rdma (in the test VM, where XPRT_VM_IP names the address of its
 * Soft-RoCE device): zero-copy sends from registered memory. */
static void test_rdma_echo(void **s)
{
	char l[64];

	(void)s;
	snprintf(l, sizeof(l), "rdma://%s:%d", getenv("XPRT_VM_IP"), 20000 + getpid() % 20000);
	run_echo(l);
}

int main(void)
{
	const struct CMUnitTest rdma[] = {
		cmocka_unit_test_teardown(test_rdma_echo, teardown),
	};
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blocking_receive),
		cmocka_unit_test(test_token_bound),
		cmocka_unit_test(test_alarms),
		cmocka_unit_test(test_clock_after_pause),
		cmocka_unit_test(test_alarm_at_spin_end),
		cmocka_unit_test(test_register_range),
		cmocka_unit_test_teardown(test_shm_echo, teardown),
		cmocka_unit_test_teardown(test_shm_reserve, teardown),
		cmocka_unit_test_teardown(test_shm_low_behind_high, teardown),
		cmocka_unit_test_teardown(test_shm_small_frag, teardown),
		cmocka_unit_test_teardown(test_tcp_echo, teardown),
		cmocka_unit_test_teardown(test_tcp_bad_frame, teardown),
		cmocka_unit_test_teardown(test_tcp_sleep_after_spin, teardown),
	};

	xlog_init("test_port_host");
	xlog_set_level(getenv("XPRT_LOG") ? xlog_level() : XLOG_ERROR);
	snprintf(mbox_name, sizeof(mbox_name), "test-port-%d", (int)getpid());
	if (getenv("XPRT_VM_IP"))	/* tests/vm/run-tests */
		return cmocka_run_group_tests(rdma, NULL, NULL);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
