/* The xprobe server's rules without I/O (probe_srv): control answers, the
 * sink's counts per client port, the limit on waiting replies, and the
 * datagram service, each on exact inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "probe/probe_srv.h"

static int ctl(struct probe_srv *ps, uint8_t type, uint8_t service, uint32_t size,
	       uint32_t window, uint32_t node, unsigned port, struct probe_ctl_act *act)
{
	struct probe_ctl c = { .type = type, .service = service, .size = size, .window = window };
	uint8_t b[PROBE_CTL_LEN];

	probe_ctl_encode(&c, b);
	return probe_srv_ctl(ps, b, sizeof(b), node, port, act);
}

static void test_setup_and_stats(void **state)
{
	struct probe_srv *ps = malloc(sizeof(*ps));
	struct probe_ctl_act a;

	(void)state;
	assert_non_null(ps);
	probe_srv_init(ps, 65536);
	/* SETUP within limits: buffers for two windows and some */
	assert_int_equal(ctl(ps, PROBE_SETUP_REQ, PROBE_PORT_ECHO, 64, 16, 1, 8, &a), 0);
	assert_int_equal(a.rep.type, PROBE_SETUP_REP);
	assert_int_equal(a.rep.status, 0);
	assert_int_equal(a.rep.max_size, 65536);
	assert_int_equal(a.buffers, 2 * 16 + 2 + PROBE_SHARE_SLACK);
	/* too big, no window, too big a window: refused, no buffers */
	assert_int_equal(ctl(ps, PROBE_SETUP_REQ, PROBE_PORT_ECHO, 65537, 16, 1, 8, &a), 0);
	assert_int_equal(a.rep.status, EMSGSIZE);
	assert_int_equal(a.buffers, 0);
	assert_int_equal(ctl(ps, PROBE_SETUP_REQ, PROBE_PORT_SINK, 64, 0, 1, 8, &a), 0);
	assert_int_equal(a.rep.status, EINVAL);
	assert_int_equal(ctl(ps, PROBE_SETUP_REQ, PROBE_PORT_SINK, 64, PROBE_WINDOW_MAX + 1, 1, 8, &a), 0);
	assert_int_equal(a.rep.status, EINVAL);
	/* the sink counts per (node, port); STATS answers them; SETUP resets */
	for (int i = 0; i < 5; i++)
		probe_srv_sink(ps, 1, 8, 100);
	probe_srv_sink(ps, 2, 8, 7);
	assert_int_equal(ctl(ps, PROBE_STATS_REQ, PROBE_PORT_SINK, 0, 1, 1, 8, &a), 0);
	assert_int_equal(a.rep.type, PROBE_STATS_REP);
	assert_int_equal(a.rep.msgs, 5);
	assert_int_equal(a.rep.bytes, 500);
	assert_int_equal(ctl(ps, PROBE_STATS_REQ, PROBE_PORT_SINK, 0, 1, 3, 8, &a), 0);
	assert_int_equal(a.rep.msgs, 0);
	assert_int_equal(ctl(ps, PROBE_SETUP_REQ, PROBE_PORT_SINK, 64, 4, 1, 8, &a), 0);
	assert_int_equal(ctl(ps, PROBE_STATS_REQ, PROBE_PORT_SINK, 0, 1, 1, 8, &a), 0);
	assert_int_equal(a.rep.msgs, 0);
	assert_int_equal(ctl(ps, PROBE_STATS_REQ, PROBE_PORT_SINK, 0, 1, 2, 8, &a), 0);
	assert_int_equal(a.rep.bytes, 7);
	/* a reply type, and bytes that are no control message */
	assert_int_equal(ctl(ps, PROBE_STATS_REP, PROBE_PORT_SINK, 0, 1, 1, 8, &a), -EBADMSG);
	assert_int_equal(a.req.type, PROBE_STATS_REP);
	assert_true(probe_srv_ctl(ps, "garbage", 7, 1, 8, &a) < 0);
	free(ps);
}

/* More clients than the sink table holds: it starts over, nobody's count
 * goes to another. */
static void test_sink_full(void **state)
{
	struct probe_srv *ps = malloc(sizeof(*ps));
	struct probe_ctl_act a;

	(void)state;
	probe_srv_init(ps, 1024);
	for (uint32_t n = 0; n < PROBE_SINKS + 10; n++)
		probe_srv_sink(ps, n, 8, n);
	assert_int_equal(ctl(ps, PROBE_STATS_REQ, PROBE_PORT_SINK, 0, 1, PROBE_SINKS + 9, 8, &a), 0);
	assert_int_equal(a.rep.msgs, 1);
	assert_int_equal(a.rep.bytes, PROBE_SINKS + 9);
	free(ps);
}

static void test_replies_waiting(void **state)
{
	struct probe_srv *ps = malloc(sizeof(*ps));

	(void)state;
	probe_srv_init(ps, 1024);
	for (int i = 0; i < PROBE_CTL_PER_NODE; i++)
		assert_true(probe_srv_reply_begin(ps, 5));
	assert_false(probe_srv_reply_begin(ps, 5));
	assert_true(probe_srv_reply_begin(ps, 6));	/* another node */
	probe_srv_reply_end(ps, 5);
	assert_true(probe_srv_reply_begin(ps, 5));
	assert_false(probe_srv_reply_begin(ps, 5));
	free(ps);
}

static void test_datagrams(void **state)
{
	static struct probe_dgsrv g;
	struct probe_dg d = { .type = PROBE_DG_PING, .session = 7, .seq = 9 }, r;
	uint8_t b[100], out[200];
	int a = 1, z = 2;

	(void)state;
	memset(b, 0x5a, sizeof(b));
	probe_dg_encode(&d, b);
	/* PING: the same bytes back as a PONG */
	assert_int_equal(probe_dg_input(&g, &a, b, sizeof(b), 10, out), (int)sizeof(b));
	assert_int_equal(probe_dg_decode(out, sizeof(b), &r), 0);
	assert_int_equal(r.type, PROBE_DG_PONG);
	assert_int_equal(r.session, 7);
	assert_int_equal(r.seq, 9);
	assert_memory_equal(out + PROBE_DG_HDR, b + PROBE_DG_HDR, sizeof(b) - PROBE_DG_HDR);
	/* DATA counted per sender and session; STATS answers them */
	d.type = PROBE_DG_DATA;
	probe_dg_encode(&d, b);
	assert_int_equal(probe_dg_input(&g, &a, b, 100, 100, out), 0);
	assert_int_equal(probe_dg_input(&g, &a, b, 60, 350, out), 0);
	assert_int_equal(probe_dg_input(&g, &z, b, 60, 400, out), 0);
	d.type = PROBE_DG_STATS_REQ;
	probe_dg_encode(&d, b);
	assert_int_equal(probe_dg_input(&g, &a, b, PROBE_DG_HDR, 500, out), PROBE_DG_STATS_LEN);
	assert_int_equal(probe_dg_decode(out, PROBE_DG_STATS_LEN, &r), 0);
	assert_int_equal(r.type, PROBE_DG_STATS_REP);
	assert_int_equal(r.pkts, 2);
	assert_int_equal(r.bytes, 160);
	assert_int_equal(r.span_ns, 250);
	/* not ours; and a PONG is not for a server */
	assert_true(probe_dg_input(&g, &a, "xx", 2, 600, out) < 0);
	d.type = PROBE_DG_PONG;
	probe_dg_encode(&d, b);
	assert_int_equal(probe_dg_input(&g, &a, b, PROBE_DG_HDR, 600, out), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_setup_and_stats),
		cmocka_unit_test(test_sink_full),
		cmocka_unit_test(test_replies_waiting),
		cmocka_unit_test(test_datagrams),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
