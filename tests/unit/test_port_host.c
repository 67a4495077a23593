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
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/log.h"
#include "core/uri.h"
#include "core/xtime.h"
#include "port/port.h"
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
	for (;;) {
		struct xp_event ev;
		int rc = xp_blocking_receive(p, &ev, 30 * S, 0);

		if (rc <= 0)
			_exit(rc == 0 ? 6 : 7);
		if (ev.length >= 4 && !memcmp(ev.buffer, "quit", 4))
			_exit(0);
		struct ebuf *b = &bufs[ev.prio][ev.size - 4][0];
		for (unsigned k = 0; k < 4; k++)
			if (bufs[ev.prio][ev.size - 4][k].buf == ev.buffer)
				b = &bufs[ev.prio][ev.size - 4][k];
		/* echo back from the same buffer; re-provide it once sent */
		while (xp_send(p, ev.sender_node, ev.sender_port, ev.prio, ev.buffer, ev.length,
			       echo_sent, b) == -EAGAIN)
			xp_receive(p, &(struct xp_event){ 0 });
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

static bool in_send;
static struct { void *ctx; enum xp_status st; } dn[64];
static unsigned ndone;

static void sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	/* seed 001 section 2: callbacks only from the receive calls */
	assert_false(in_send);
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

/* Receives until an event, or the timeout: 1 or 0. */
static int wait_event(struct xp_port *p, struct xp_event *ev, uint64_t tmo)
{
	return xp_blocking_receive(p, ev, tmo, 20000);
}

static void wait_done(struct xp_port *p, unsigned n, uint64_t tmo)
{
	uint64_t end = xtime_ns() + tmo;
	struct xp_event ev;

	while (ndone < n && xtime_ns() < end)
		xp_blocking_receive(p, &ev, 1000000, 0);
	assert_int_equal(ndone, n);
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

	/* the peer host dies: pending and later sends fail UNREACHABLE */
	kill(pid, SIGKILL);
	assert_int_equal(reap_child(pid), 128 + SIGKILL);
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

/* A failed test leaves no echo host behind for the next one. */
static int teardown(void **s)
{
	if (child > 0) {
		kill(child, SIGKILL);
		reap_child(child);
	}
	/* a killed echo host cannot remove the mailbox it created */
	for (const char *sfx = "er"; *sfx; sfx++) {
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
		xp_close(p);
		xp_host_free(h);
	}
	struct xp_host *h = client(l, &node, err);
	struct xp_port *p = xp_open(h, 3, err, sizeof(err));
	assert_int_equal(send1(p, node, ECHO_PORT, XP_LOW, "quit", 4, NULL), 0);
	assert_int_equal(reap_child(pid), 0);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blocking_receive),
		cmocka_unit_test(test_token_bound),
		cmocka_unit_test_teardown(test_shm_echo, teardown),
		cmocka_unit_test_teardown(test_shm_reserve, teardown),
		cmocka_unit_test_teardown(test_tcp_echo, teardown),
	};

	xlog_init("test_port_host");
	xlog_set_level(getenv("XPRT_LOG") ? xlog_level() : XLOG_ERROR);
	snprintf(mbox_name, sizeof(mbox_name), "test-port-%d", (int)getpid());
	return cmocka_run_group_tests(tests, NULL, NULL);
}
