/* xprobe's control and datagram messages: exact bytes, and rejection of
 * anything malformed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "probe/probe_wire.h"

static void test_ctl_roundtrip(void **s)
{
	struct probe_ctl c = { .type = PROBE_SETUP_REP, .service = PROBE_PORT_SINK, .prio = 1,
			       .size = 65536, .window = 16, .status = 12, .max_size = 1 << 26,
			       .msgs = 0x0102030405060708ull, .bytes = 42 };
	struct probe_ctl d;
	uint8_t b[PROBE_CTL_LEN];
	static const uint8_t head[] = { 'X', 'P', 'R', 'C', 1, 2, 1, 1, 0, 1, 0, 0, 0, 0, 0, 16 };

	memset(&d, 0xff, sizeof(d));
	probe_ctl_encode(&c, b);
	assert_memory_equal(b, head, sizeof(head));
	assert_int_equal(b[24], 1);
	assert_int_equal(b[31], 8);
	assert_int_equal(probe_ctl_decode(b, sizeof(b), &d), 0);
	assert_int_equal(d.type, c.type);
	assert_int_equal(d.service, c.service);
	assert_int_equal(d.prio, c.prio);
	assert_int_equal(d.size, c.size);
	assert_int_equal(d.window, c.window);
	assert_int_equal(d.status, c.status);
	assert_int_equal(d.max_size, c.max_size);
	assert_true(d.msgs == c.msgs);
	assert_true(d.bytes == c.bytes);
}

static void test_ctl_rejects(void **s)
{
	struct probe_ctl c = { .type = PROBE_SETUP_REQ }, d;
	uint8_t b[PROBE_CTL_LEN], t[PROBE_CTL_LEN];

	probe_ctl_encode(&c, b);
	assert_int_equal(probe_ctl_decode(b, sizeof(b) - 1, &d), -EMSGSIZE);
	assert_int_equal(probe_ctl_decode(b, 0, &d), -EMSGSIZE);
	memcpy(t, b, sizeof(t)); t[0] ^= 1;
	assert_int_equal(probe_ctl_decode(t, sizeof(t), &d), -EPROTO);	/* magic */
	memcpy(t, b, sizeof(t)); t[4] = 2;
	assert_int_equal(probe_ctl_decode(t, sizeof(t), &d), -EPROTO);	/* version */
	memcpy(t, b, sizeof(t)); t[5] = 0;
	assert_int_equal(probe_ctl_decode(t, sizeof(t), &d), -EPROTO);	/* type */
	memcpy(t, b, sizeof(t)); t[5] = 5;
	assert_int_equal(probe_ctl_decode(t, sizeof(t), &d), -EPROTO);
	memcpy(t, b, sizeof(t)); t[6] = PROBE_PORT_CTL;
	assert_int_equal(probe_ctl_decode(t, sizeof(t), &d), -EPROTO);	/* service */
	memcpy(t, b, sizeof(t)); t[7] = 2;
	assert_int_equal(probe_ctl_decode(t, sizeof(t), &d), -EPROTO);	/* prio */
}

static void test_dg(void **s)
{
	struct probe_dg g = { .type = PROBE_DG_PING, .session = 0xdeadbeef, .seq = 7 }, h;
	struct probe_dg st = { .type = PROBE_DG_STATS_REP, .session = 1, .pkts = 3, .bytes = 12288,
			       .span_ns = 99 };
	uint8_t b[PROBE_DG_STATS_LEN];

	probe_dg_encode(&g, b);
	assert_int_equal(b[5], PROBE_DG_PING);
	assert_int_equal(b[8], 0xde);
	assert_int_equal(b[15], 7);
	assert_int_equal(probe_dg_decode(b, PROBE_DG_HDR, &h), 0);
	assert_int_equal(h.session, 0xdeadbeef);
	assert_int_equal(h.seq, 7);
	assert_int_equal(probe_dg_decode(b, PROBE_DG_HDR - 1, &h), -EMSGSIZE);
	b[0] = 0;
	assert_int_equal(probe_dg_decode(b, PROBE_DG_HDR, &h), -EPROTO);

	probe_dg_encode(&st, b);
	assert_int_equal(probe_dg_decode(b, PROBE_DG_STATS_LEN, &h), 0);
	assert_int_equal(h.pkts, 3);
	assert_int_equal(h.bytes, 12288);
	assert_int_equal(h.span_ns, 99);
	/* a STATS_REP too short for its counters */
	assert_int_equal(probe_dg_decode(b, PROBE_DG_HDR, &h), -EMSGSIZE);
}

/* A verbs test's request and reply, and each end's buffer: round trips,
 * and what a decoder refuses. */
static void test_vt(void **s)
{
	struct probe_vt v = { PROBE_VT_WRITE, PROBE_VT_IMM | PROBE_VT_LAT, 0, 65536, 16 }, w;
	struct probe_vt_mem m = { 0x7f0012345678ull, 0xabcd1234u, 1u << 20 }, n;
	uint8_t b[PROBE_VT_LEN + 1], mb[PROBE_VT_MEM_LEN];

	(void)s;
	probe_vt_encode(&v, b);
	assert_true(probe_vt_is(b, PROBE_VT_LEN));
	assert_int_equal(probe_vt_decode(b, PROBE_VT_LEN, &w), 0);
	assert_int_equal(w.op, PROBE_VT_WRITE);
	assert_int_equal(w.flags, PROBE_VT_IMM | PROBE_VT_LAT);
	assert_int_equal(w.size, 65536);
	assert_int_equal(w.depth, 16);
	assert_int_equal(probe_vt_decode(b, PROBE_VT_LEN - 1, &w), -EMSGSIZE);
	b[5] = PROBE_VT_READ;	/* a read with an immediate */
	assert_int_equal(probe_vt_decode(b, PROBE_VT_LEN, &w), -EPROTO);
	b[5] = 4;
	assert_int_equal(probe_vt_decode(b, PROBE_VT_LEN, &w), -EPROTO);
	b[5] = PROBE_VT_SEND;
	b[6] = 4;		/* an unknown flag */
	assert_int_equal(probe_vt_decode(b, PROBE_VT_LEN, &w), -EPROTO);
	b[6] = 0;
	b[20] = 1;		/* the zero bytes */
	assert_int_equal(probe_vt_decode(b, PROBE_VT_LEN, &w), -EPROTO);
	b[20] = 0;
	v = (struct probe_vt){ PROBE_VT_SEND, 0, 0, 1, 0 };	/* depth 0 */
	probe_vt_encode(&v, b);
	assert_int_equal(probe_vt_decode(b, PROBE_VT_LEN, &w), -EPROTO);
	v.depth = PROBE_VT_MAX_DEPTH + 1;
	probe_vt_encode(&v, b);
	assert_int_equal(probe_vt_decode(b, PROBE_VT_LEN, &w), -EPROTO);
	b[0] = 'x';		/* not ours at all: a port host's, say */
	assert_false(probe_vt_is(b, PROBE_VT_LEN));
	assert_false(probe_vt_is(b, 3));
	probe_vt_mem_encode(&m, mb);
	assert_int_equal(probe_vt_mem_decode(mb, sizeof(mb), &n), 0);
	assert_true(n.addr == m.addr && n.rkey == m.rkey && n.len == m.len);
	assert_int_equal(probe_vt_mem_decode(mb, sizeof(mb) - 1, &n), -EMSGSIZE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ctl_roundtrip),
		cmocka_unit_test(test_ctl_rejects),
		cmocka_unit_test(test_dg),
		cmocka_unit_test(test_vt),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
