/* The RTRS server engine with RNBD on top, over tcp:// on loopback, driven
 * by a scripted client built from the wire codecs and xrc alone (no
 * rtrs_clt): connection requests and their rejections, the INFO exchange,
 * requests and responses with always_invalidate off and on, every rule of
 * doc/rtrs-design.md "Rules the server enforces" (after each violation the
 * path is closed and a well-behaved session on the same server still
 * works), heartbeats, several paths of one session.  The RNBD layer's own
 * rules are in test_rnbd_srv.c; the harness in rtrs_srv_harness.h. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "rtrs_srv_harness.h"

#include "rtrs/rtrs_srv_pri.h"
#include "xprt/xrc_tcp_pri.h"

/* --- tests ------------------------------------------------------------- */

static void test_connect_info_io(void **state)
{
	struct tsrv *s = srv_start(8, 64 << 10, false, 0);
	uint32_t dev;
	struct tclt *t = good_session(s, 1, "sessa", 3, RNBD_ACCESS_RW, &dev);
	struct rtrs_srv_sess *ss;
	struct rtrs_srv_path_info pi;
	struct rnbd_export_info ei;
	struct rnbd_dev_info di;

	(void)state;
	assert_int_equal(t->g.queue_depth, 8);
	assert_int_equal(t->g.chunk_size, 64 << 10);
	assert_int_equal(t->flags, 0);
	check_io(t, dev, 0, 1);
	check_io(t, dev, 100, 2);
	/* a full max_io write at the very end of the device */
	{
		uint32_t len = t->g.chunk_size - RTRS_MAX_HDR_SIZE;
		uint8_t *p = malloc(len);

		memset(p, 0x5a, len);
		assert_int_equal(rnbd_io(t, 2, 5, dev, RNBD_OP_WRITE, (DEV_SIZE - len) / 512, p, len,
					 0), 0);
		assert_int_equal(rnbd_io(t, 1, 6, dev, RNBD_OP_READ, (DEV_SIZE - len) / 512, NULL,
					 len, 0), 0);
		assert_memory_equal(t->mem, p, len);
		free(p);
	}
	/* what status shows */
	pthread_mutex_lock(&s->mu);
	ss = rtrs_srv_sess_next(s->srv, NULL);
	assert_non_null(ss);
	assert_string_equal(rtrs_srv_sess_name(ss), "sessa");
	assert_int_equal(rtrs_srv_sess_paths(ss), 1);
	assert_int_equal(rtrs_srv_path_get(ss, 0, &pi), 0);
	assert_int_equal(pi.state, RTRS_SRV_CONNECTED);
	assert_int_equal(pi.cid_num, 3);
	assert_int_equal(pi.cid_up, 3);
	assert_string_equal(pi.transport, "tcp");
	assert_int_equal(pi.stats.writes, 3);
	assert_int_equal(pi.stats.reads, 5);	/* SESS_INFO, OPEN and three IO reads */
	assert_int_equal(pi.stats.inflight, 0);
	assert_int_equal(rnbd_srv_sess_devs(ss), 1);
	assert_int_equal(rnbd_srv_sess_dev_get(ss, 0, &di), 0);
	assert_string_equal(di.export, "disk");
	assert_int_equal(rnbd_srv_export_get(s->rnbd, 0, &ei), 0);
	assert_int_equal(ei.opens, 1);
	assert_int_equal(ei.writers, 1);
	pthread_mutex_unlock(&s->mu);
	/* CLOSE gives the device back */
	assert_int_equal(rnbd_close(t, dev), 0);
	pthread_mutex_lock(&s->mu);
	assert_int_equal(rnbd_srv_export_get(s->rnbd, 0, &ei), 0);
	assert_int_equal(ei.opens, 0);
	assert_int_equal(ei.writers, 0);
	pthread_mutex_unlock(&s->mu);
	/* IO to a closed device: -ENOTCONN, as the kernel */
	assert_int_equal(rnbd_io(t, 1, 3, dev, RNBD_OP_READ, 0, NULL, 512, 0), -ENOTCONN);
	clt_close(t);
	wait_sessions(s, 0);
	srv_stop(s);
}

static void test_always_invalidate(void **state)
{
	struct tsrv *s = srv_start(8, 64 << 10, true, 0);
	uint32_t dev, k0;
	struct tclt *t = good_session(s, 2, "inv", 2, RNBD_ACCESS_RW, &dev);
	uint8_t junk[64] = { 0 };

	(void)state;
	assert_int_equal(t->flags, RTRS_MSG_NEW_RKEY_F);
	/* every chunk its own key */
	assert_true(t->rb[0].rkey != t->rb[7].rkey);
	check_io(t, dev, 8, 3);
	k0 = t->rb[3].rkey;
	check_io(t, dev, 16, 4);
	assert_true(t->rb[3].rkey != k0);	/* replaced by the last request */
	/* the old key is dead: a write through it closes the path */
	t->rb[3].rkey = k0;
	assert_int_equal(clt_post(t, 1, 3, 0, junk, sizeof(junk), rtrs_imm_make(RTRS_IO_REQ_IMM,
			 rtrs_io_req_payload(8, 3, 60))), 0);
	expect_closed(t);
	clt_close(t);
	wait_sessions(s, 0);
	t = good_session(s, 3, "inv2", 2, RNBD_ACCESS_RW, &dev);
	check_io(t, dev, 24, 5);
	/* the region under a chunk's window grants nothing of its own: a
	 * write through its key (which a client could guess or have seen)
	 * is refused (the target's memory untouched, the xrc contract) */
	{
		struct rtrs_srv_sess *ss;
		struct xrc_sge sg = { t->mem + MEMSZ / 2, sizeof(junk), t->mr };
		struct xrc_wc wc;
		uint64_t end = xtime_ns() + TMO;
		uint32_t mkey;

		pthread_mutex_lock(&s->mu);
		ss = rtrs_srv_sess_next(s->srv, NULL);
		assert_non_null(ss);
		mkey = ss->paths->keys[5].mr->rkey;
		pthread_mutex_unlock(&s->mu);
		memset(t->mem + MEMSZ / 2, 0x77, sizeof(junk));
		assert_int_equal(xrc_post_write(t->con[1].x, &sg, 1, t->rb[5].addr, mkey, false, 0, 77,
						XRC_SIGNALED), 0);
		do {
			assert_true(xtime_ns() < end);
			if (xrc_poll(t->con[1].x, &wc, 1) == 0)
				xrc_wait(t->con[1].x, 10 * XTIME_NS_PER_MS);
			else if (wc.op == XRC_OP_WRITE && wc.wr_id == 77)
				break;
		} while (1);
		assert_int_equal(wc.status, -EREMOTEIO);
	}
	clt_close(t);
	wait_sessions(s, 0);
	srv_stop(s);
}

/* A device without memory windows cannot serve always_invalidate: the
 * connection is refused up front with EOPNOTSUPP (the client names it),
 * and no session is left; with always_invalidate off it serves. */
static void test_no_windows(void **state)
{
	struct tsrv *s;
	struct tclt *t;
	uint32_t dev;

	(void)state;
	xtcp_test_no_windows = true;
	s = srv_start(8, 64 << 10, true, 0);
	t = clt_new(s, 60);
	assert_int_equal(clt_connect(t, 2), -EOPNOTSUPP);
	clt_close(t);
	wait_sessions(s, 0);
	srv_stop(s);
	s = srv_start(8, 64 << 10, false, 0);
	t = good_session(s, 61, "nowin", 2, RNBD_ACCESS_RW, &dev);
	check_io(t, dev, 8, 6);
	clt_close(t);
	wait_sessions(s, 0);
	srv_stop(s);
}

static int windows_back(void **state)
{
	(void)state;
	xtcp_test_no_windows = false;
	return 0;
}

/* Connection requests the server must refuse, each with its errno. */
static void test_conn_req_rules(void **state)
{
	struct tsrv *s = srv_start(6, 64 << 10, false, 0);
	uint32_t dev;
	struct tclt *good = good_session(s, 10, "good", 2, RNBD_ACCESS_RW, &dev);
	struct tclt *t = clt_new(s, 11);
	struct rtrs_conn_req r;
	uint8_t raw[RTRS_CONN_REQ_LEN];

	(void)state;
	t->cid_num = 2;
	r = conn_req(t, 0, true);
	rtrs_conn_req_encode(&r, raw);
	raw[2] ^= 0xff;					/* magic */
	assert_int_equal(clt_connect_raw(t, 0, raw, NULL), -ECONNRESET);
	rtrs_conn_req_encode(&r, raw);
	raw[5] = 3;					/* major version 3 */
	assert_int_equal(clt_connect_raw(t, 0, raw, NULL), -ECONNRESET);
	r.cid = 2;					/* cid >= cid_num */
	assert_int_equal(clt_connect_raw(t, 0, NULL, &r), -ECONNRESET);
	r.cid = 0;
	r.cid_num = 4097;				/* cid_num > 4096 */
	assert_int_equal(clt_connect_raw(t, 0, NULL, &r), -ECONNRESET);
	r = conn_req(t, 0, false);			/* unknown session, not first */
	assert_int_equal(clt_connect_raw(t, 0, NULL, &r), -ENXIO);
	/* a second path of the good session between the same addresses */
	{
		struct tclt *dup = clt_new(s, 10);

		uuid_fill(dup->sess_uuid, 77);
		dup->cid_num = 2;
		r = conn_req(dup, 0, false);
		assert_int_equal(clt_connect_raw(dup, 0, NULL, &r), -EEXIST);
		clt_close(dup);
	}
	/* behind a wildcard listener the rule holds too, on the address
	 * the client connected to: a second path to 127.0.0.3 is one too
	 * many, one to 127.0.0.4 is another path */
	{
		struct tclt *w1 = clt_new(s, 20), *w2 = clt_new(s, 20), *w3 = clt_new(s, 20);

		w1->any = w2->any = "127.0.0.3";
		w3->any = "127.0.0.4";
		uuid_fill(w2->sess_uuid, 78);
		uuid_fill(w3->sess_uuid, 79);
		w1->cid_num = w2->cid_num = w3->cid_num = 1;
		r = conn_req(w1, 0, true);
		assert_int_equal(clt_connect_raw(w1, 0, NULL, &r), 0);
		r = conn_req(w2, 0, false);
		assert_int_equal(clt_connect_raw(w2, 0, NULL, &r), -EEXIST);
		r = conn_req(w3, 0, false);
		assert_int_equal(clt_connect_raw(w3, 0, NULL, &r), 0);
		clt_close(w3);
		clt_close(w2);
		clt_close(w1);
	}
	/* connections of one path must agree */
	r = conn_req(t, 0, true);
	assert_int_equal(clt_connect_raw(t, 0, NULL, &r), 0);
	r.cid = 0;
	assert_int_equal(clt_connect_raw(t, 1, NULL, &r), -ECONNRESET);	/* cid taken */
	r.cid = 1;
	r.cid_num = 3;
	assert_int_equal(clt_connect_raw(t, 1, NULL, &r), -ECONNRESET);	/* other cid_num */
	assert_true(srv_info(s).rejected >= 8);
	clt_close(t);
	check_io(good, dev, 0, 7);
	clt_close(good);
	srv_stop(s);
}

enum violation {
	V_NAME_DOT, V_NAME_SLASH, V_NAME_EMPTY, V_NAME_TAKEN, V_INFO_EARLY, V_REQ_EARLY,
	V_BUF_ID, V_OFFSET, V_USR_LEN, V_SG_CNT, V_READ_LEN, V_TYPE, V_SEND, V_MISC, V_MAX
};

/* One violation on a fresh path; the path is closed, the good session
 * carries on. */
static void violate(struct tsrv *s, struct tclt *good, uint32_t gdev, enum violation v)
{
	struct tclt *t = clt_new(s, 100 + v);
	uint8_t m[64];
	uint32_t qd = 6, imm;

	memset(m, 0, sizeof(m));
	switch (v) {
	case V_NAME_DOT:
	case V_NAME_SLASH:
	case V_NAME_EMPTY:
	case V_NAME_TAKEN:
		assert_int_equal(clt_connect(t, 2), 0);
		assert_int_equal(clt_info(t, v == V_NAME_DOT ? "a.b" : v == V_NAME_SLASH ? "a/b" :
					  v == V_NAME_EMPTY ? "" : "good"), -ENOTCONN);
		break;
	case V_INFO_EARLY:
		/* INFO_REQ before the path's every connection is up */
		t->cid_num = 2;
		{
			struct rtrs_conn_req r = conn_req(t, 0, true);

			assert_int_equal(clt_connect_raw(t, 0, NULL, &r), 0);
		}
		assert_int_equal(clt_info(t, "early"), -ENOTCONN);
		break;
	case V_REQ_EARLY:
		assert_int_equal(clt_connect(t, 2), 0);
		assert_int_equal(xrc_post_write(t->con[1].x, NULL, 0, 0, 0, true,
						rtrs_imm_make(RTRS_IO_REQ_IMM, 8), 0, 0), 0);
		break;
	default:
		assert_int_equal(clt_connect(t, 2), 0);
		assert_int_equal(clt_info(t, "bad"), 0);
		break;
	}
	switch (v) {
	case V_BUF_ID:		/* buffer id 7 >= queue depth 6 (3 bits carry it) */
		rtrs_rdma_write_encode(&(struct rtrs_rdma_write){ 0 }, m);
		imm = rtrs_imm_make(RTRS_IO_REQ_IMM, rtrs_io_req_payload(8, 7, 0));
		assert_int_equal(clt_post(t, 1, 0, 0, m, 4, imm), 0);
		break;
	case V_OFFSET:		/* message offset beyond the chunk */
		imm = rtrs_imm_make(RTRS_IO_REQ_IMM, rtrs_io_req_payload(qd, 0, 70000));
		assert_int_equal(clt_post(t, 1, 0, 0, m, 4, imm), 0);
		break;
	case V_USR_LEN:		/* usr_len 100 in front of a message at 16 */
		rtrs_rdma_write_encode(&(struct rtrs_rdma_write){ 100 }, m + 16);
		imm = rtrs_imm_make(RTRS_IO_REQ_IMM, rtrs_io_req_payload(qd, 0, 16));
		assert_int_equal(clt_post(t, 1, 0, 0, m, 20, imm), 0);
		break;
	case V_SG_CNT:		/* a READ naming two buffers */
	case V_READ_LEN: {	/* a READ longer than its data area */
		uint8_t *p = m + 32;

		p[0] = RTRS_MSG_READ;
		p[6] = v == V_SG_CNT ? 2 : 1;
		p[8 + 12] = v == V_SG_CNT ? 16 : 64;	/* desc len */
		imm = rtrs_imm_make(RTRS_IO_REQ_IMM, rtrs_io_req_payload(qd, 0, 32));
		assert_int_equal(clt_post(t, 1, 0, 0, m, 64, imm), 0);
		break;
	}
	case V_TYPE:		/* neither READ nor WRITE */
		m[0] = RTRS_MSG_RKEY_RSP;
		imm = rtrs_imm_make(RTRS_IO_REQ_IMM, rtrs_io_req_payload(qd, 0, 0));
		assert_int_equal(clt_post(t, 1, 0, 0, m, 8, imm), 0);
		break;
	case V_SEND: {		/* a SEND after the INFO exchange */
		struct xrc_sge sg = { m, 8, NULL };

		assert_int_equal(xrc_post_send(t->con[0].x, &sg, 1, 0, 0), 0);
		break;
	}
	case V_MISC:
		/* what does not close a path: a request the layer above
		 * refuses (an empty WRITE carries no RNBD message: -EINVAL) ... */
		rtrs_rdma_write_encode(&(struct rtrs_rdma_write){ 0 }, m);
		imm = rtrs_imm_make(RTRS_IO_REQ_IMM, rtrs_io_req_payload(qd, 0, 0));
		assert_int_equal(clt_post(t, 1, 0, 0, m, 4, imm), 0);
		assert_int_equal(clt_rsp(t, 1, 0), -EINVAL);
		/* ... an immediate of an unknown type (ignored, as the kernel) */
		assert_int_equal(xrc_post_write(t->con[0].x, NULL, 0, 0, 0, true,
						rtrs_imm_make(5, 0), 0, 0), 0);
		assert_int_equal(clt_post(t, 1, 0, 0, m, 4, imm), 0);
		assert_int_equal(clt_rsp(t, 1, 0), -EINVAL);
		/* then one that does: usr_len beyond the data */
		rtrs_rdma_write_encode(&(struct rtrs_rdma_write){ 1 }, m);
		assert_int_equal(clt_post(t, 1, 0, 0, m, 4, imm), 0);
		break;
	default:
		break;
	}
	expect_closed(t);
	clt_close(t);
	check_io(good, gdev, 8 * (v + 1), (unsigned)v);
}

static void violations(bool inval)
{
	struct tsrv *s = srv_start(6, 64 << 10, inval, 0);
	uint32_t dev;
	struct tclt *good = good_session(s, 20, "good", 2, RNBD_ACCESS_RW, &dev);

	for (int v = 0; v < V_MAX; v++) {
		print_message("violation %d\n", v);
		violate(s, good, dev, (enum violation)v);
	}
	assert_true(srv_info(s).closed >= V_MAX);
	wait_sessions(s, 1);
	clt_close(good);
	srv_stop(s);
}

static void test_violations(void **state)
{
	(void)state;
	violations(false);
}

/* The same with a key per chunk, replaced on every request. */
static void test_violations_inval(void **state)
{
	(void)state;
	violations(true);
}

static void test_heartbeats(void **state)
{
	struct tsrv *s = srv_start(8, 64 << 10, false, 100);
	uint32_t dev, dev2;
	struct tclt *alive = good_session(s, 30, "alive", 1, RNBD_ACCESS_RW, &dev);
	struct tclt *silent = good_session(s, 31, "silent", 1, RNBD_ACCESS_RO, &dev2);
	struct xrc_wc wc;
	uint64_t end = xtime_ns() + XTIME_NS_PER_S;

	(void)state;
	/* alive answers the server's beats (clt_next does) and sends its own */
	while (xtime_ns() < end) {
		assert_int_equal(xrc_post_write(alive->con[0].x, NULL, 0, 0, 0, true,
						RTRS_IMM_HB_MSG, 0, 0), 0);
		assert_int_equal(clt_next(alive, 0, &wc), 0);
		/* the server's HB_ACK */
		assert_true(wc.has_imm);
		assert_int_equal(wc.imm, RTRS_IMM_HB_ACK);
	}
	/* silent never answered: about (2 + 2) * 100 ms later it is gone */
	expect_closed(silent);
	check_io(alive, dev, 0, 9) ;
	clt_close(silent);
	clt_close(alive);
	srv_stop(s);
}

/* A second path of the session name (same paths_uuid as clt_new(s, seed)
 * gives), two connections through the 127.0.0.2 listener. */
static struct tclt *second_path(struct tsrv *s, unsigned seed, unsigned uuid_seed, const char *name)
{
	struct tclt *t = clt_new(s, seed);

	t->second = true;
	uuid_fill(t->sess_uuid, uuid_seed);
	t->cid_num = 2;
	for (unsigned i = 0; i < 2; i++) {
		struct rtrs_conn_req r = conn_req(t, i, false);

		assert_int_equal(clt_connect_raw(t, i, NULL, &r), 0);
	}
	assert_int_equal(clt_info(t, name), 0);
	return t;
}

/* One session over two paths (two listeners, so two address pairs):
 * chunks are the session's, keys the path's; a path going leaves the
 * session and its open device to the other. */
static void test_multipath(void **state)
{
	struct tsrv *s = srv_start(16, 64 << 10, false, 0);
	uint32_t dev;
	struct tclt *a = good_session(s, 50, "mp", 4, RNBD_ACCESS_RW, &dev);
	struct tclt *p2 = second_path(s, 50, 999, "mp");
	struct tclt *other = clt_new(s, 52);
	struct rtrs_srv_sess *ss;
	uint8_t pat[4096];

	(void)state;
	assert_true(p2->rb[0].rkey != a->rb[0].rkey);
	/* another session may not take the name */
	assert_int_equal(clt_connect(other, 1), 0);
	assert_int_equal(clt_info(other, "mp"), -ENOTCONN);
	clt_close(other);
	for (unsigned i = 0; i < 8; i++) {
		memset(pat, (int)i + 1, sizeof(pat));
		assert_int_equal(rnbd_io(i & 1 ? a : p2, 1, i, dev, RNBD_OP_WRITE, 8 * i, pat,
					 sizeof(pat), 0), 0);
		assert_int_equal(rnbd_io(i & 1 ? p2 : a, 1, 8 + i, dev, RNBD_OP_READ, 8 * i, NULL,
					 sizeof(pat), 0), 0);
		assert_memory_equal((i & 1 ? p2 : a)->mem, pat, sizeof(pat));
	}
	pthread_mutex_lock(&s->mu);
	ss = rtrs_srv_sess_next(s->srv, NULL);
	assert_non_null(ss);
	assert_null(rtrs_srv_sess_next(s->srv, ss));
	assert_int_equal(rtrs_srv_sess_paths(ss), 2);
	pthread_mutex_unlock(&s->mu);
	clt_close(a);
	check_io(p2, dev, 200, 11);
	wait_sessions(s, 1);
	clt_close(p2);
	wait_sessions(s, 0);
	srv_stop(s);
}

/* The bytes of an RNBD READ of len bytes at sector into client into's
 * memory at dst (under its key), as a request message. */
static uint32_t read_msg(const struct tclt *into, uint32_t dev, uint64_t sector, uint32_t len,
			 uint32_t dst, uint8_t *b, uint32_t cap)
{
	struct rnbd_io m = { .device_id = dev, .sector = sector, .rw = RNBD_OP_READ, .bi_size = len };
	struct rtrs_rdma_read r = { .usr_len = RNBD_IO_LEN, .sg_cnt = 1,
				    .desc = { (uintptr_t)(into->mem + dst), into->mr->rkey, len } };
	int n;

	rnbd_io_encode(&m, b);
	n = rtrs_rdma_read_encode(&r, b + RNBD_IO_LEN, cap - RNBD_IO_LEN);
	assert_true(n > 0);
	return RNBD_IO_LEN + (uint32_t)n;
}

/* A READ posted, its answer not waited for. */
static void post_read(struct tclt *t, unsigned cid, uint32_t buf_id, uint32_t dev, uint64_t sector,
		      uint32_t len, uint32_t dst)
{
	struct rtrs_req_layout l;
	uint8_t b[256];
	uint32_t n = read_msg(t, dev, sector, len, dst, b, sizeof(b));

	assert_int_equal(rtrs_read_layout(&t->g, buf_id, len, RNBD_IO_LEN, 1, &l), 0);
	assert_int_equal(clt_post(t, cid, buf_id, l.wr_off, b, n, l.imm), 0);
}

static bool hold_next_read;

static bool hold_read(struct rtrs_srv_sess *s, int dir, const void *usr, uint32_t usrlen)
{
	(void)s;
	(void)usr;
	(void)usrlen;
	if (dir != RTRS_READ || !hold_next_read)
		return false;
	hold_next_read = false;
	return true;
}

static uint64_t chunk_waits(struct tsrv *s, unsigned path)
{
	struct rtrs_srv_path_info pi;

	pthread_mutex_lock(&s->mu);
	assert_int_equal(rtrs_srv_path_get(rtrs_srv_sess_next(s->srv, NULL), path, &pi), 0);
	pthread_mutex_unlock(&s->mu);
	return pi.stats.chunk_waits;
}

static void wait_for(struct tsrv *s, bool (*cond)(struct tsrv *), const char *what)
{
	uint64_t end = xtime_ns() + TMO;

	while (!cond(s)) {
		if (xtime_ns() > end)
			fail_msg("never: %s", what);
		usleep(1000);
	}
}

static bool one_held(struct tsrv *s)
{
	bool r;

	pthread_mutex_lock(&s->mu);
	r = harness_nheld == 1;
	pthread_mutex_unlock(&s->mu);
	return r;
}

static bool a_waits(struct tsrv *s) { return chunk_waits(s, 0) == 1; }

static bool one_path(struct tsrv *s)
{
	bool r;

	pthread_mutex_lock(&s->mu);
	r = rtrs_srv_sess_paths(rtrs_srv_sess_next(s->srv, NULL)) == 1;
	pthread_mutex_unlock(&s->mu);
	return r;
}

/* What a client that gives a path up leaves behind (rtrs_clt_failover_req
 * sends the path's requests again, same buffer ids, on another path):
 * - a copy whose first is still at work (here held from the RNBD layer,
 *   as an IO thread would have it) waits for it, and runs with its own
 *   message even if the first's bytes land in the chunk again meanwhile;
 * - requests still unread on connections the client closed never run. */
static void test_failover_copies(void **state)
{
	struct tsrv *s = srv_start(16, 64 << 10, false, 0);
	uint32_t dev, len = 4096, sector = 64, dst_a = 0, dst_b = 8192, dst_x = 16384;
	struct tclt *a = good_session(s, 60, "fo", 2, RNBD_ACCESS_RW, &dev);
	struct tclt *b = second_path(s, 60, 998, "fo");
	uint8_t pat[4096], msg[256], zero[4096] = { 0 };
	struct rtrs_req_layout l;
	struct rtrs_srv_sess *ss;
	uint32_t n;

	(void)state;
	for (unsigned i = 0; i < sizeof(pat); i++)
		pat[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(rnbd_io(a, 1, 1, dev, RNBD_OP_WRITE, sector, pat, len, 0), 0);

	/* the first copy, on b, is at work; the second, on a, waits */
	pthread_mutex_lock(&s->mu);
	harness_hold = hold_read;
	hold_next_read = true;
	pthread_mutex_unlock(&s->mu);
	post_read(b, 1, 3, dev, sector, len, dst_b);
	wait_for(s, one_held, "the first copy held");
	post_read(a, 1, 3, dev, sector, len, dst_a);
	wait_for(s, a_waits, "the second copy waiting for its chunk");
	{
		struct xrc_wc wc;

		xrc_wait(a->con[1].x, 20 * XTIME_NS_PER_MS);
		assert_int_equal(xrc_poll(a->con[1].x, &wc, 1), 0);	/* no answer yet */
	}
	/* the first copy's bytes land again, now naming other memory */
	n = read_msg(b, dev, sector, len, dst_x, msg, sizeof(msg));
	assert_int_equal(rtrs_read_layout(&b->g, 3, len, RNBD_IO_LEN, 1, &l), 0);
	{
		struct xrc_sge sg = { b->mem + MEMSZ / 2, n, b->mr };
		uint8_t *at;

		memcpy(b->mem + MEMSZ / 2, msg, n);
		assert_int_equal(xrc_post_write(b->con[1].x, &sg, 1, b->rb[3].addr + l.wr_off,
						b->rb[3].rkey, false, 0, 0, 0), 0);
		pthread_mutex_lock(&s->mu);
		ss = rtrs_srv_sess_next(s->srv, NULL);
		at = ss->chunks + 3 * (size_t)(64 << 10) + l.wr_off;
		pthread_mutex_unlock(&s->mu);
		for (uint64_t end = xtime_ns() + TMO; ; usleep(1000)) {
			bool landed;

			pthread_mutex_lock(&s->mu);
			landed = !memcmp(at, msg, n);
			pthread_mutex_unlock(&s->mu);
			if (landed)
				break;
			if (xtime_ns() > end)
				fail_msg("the rewrite never landed");
		}
	}
	pthread_mutex_lock(&s->mu);
	harness_hold = NULL;
	harness_release(s->rnbd);
	pthread_mutex_unlock(&s->mu);
	assert_int_equal(clt_rsp(b, 1, 3), 0);
	assert_memory_equal(b->mem + dst_b, pat, len);
	assert_int_equal(clt_rsp(a, 1, 3), 0);
	assert_memory_equal(a->mem + dst_a, pat, len);
	assert_memory_equal(b->mem + dst_x, zero, len);
	assert_int_equal(chunk_waits(s, 0), 1);
	assert_int_equal(chunk_waits(s, 1), 0);

	/* b's client gives up with a write the server has not read: it never runs */
	memset(pat, 0xee, sizeof(pat));
	pthread_mutex_lock(&s->mu);
	{
		struct rnbd_io m = { .device_id = dev, .sector = sector + 8, .rw = RNBD_OP_WRITE,
				     .bi_size = len };
		struct rtrs_rdma_write w = { RNBD_IO_LEN };
		uint8_t *buf = malloc(len + RNBD_IO_LEN + RTRS_RDMA_WRITE_LEN);

		assert_int_equal(rtrs_write_layout(&b->g, 5, len, RNBD_IO_LEN, &l), 0);
		memcpy(buf, pat, len);
		rnbd_io_encode(&m, buf + len);
		rtrs_rdma_write_encode(&w, buf + len + RNBD_IO_LEN);
		assert_int_equal(clt_post(b, 1, 5, l.wr_off, buf, l.wr_len, l.imm), 0);
		free(buf);
	}
	/* a FIN behind the write (close(2) with nothing unread: not a
	 * reset), on its connection only: the path's other one stays */
	{
		struct xrc_wc wc[8];

		while (xrc_poll(b->con[1].x, wc, 8) > 0)
			;
		xrc_close(b->con[1].x);
		b->con[1].x = NULL;
	}
	/* the FIN is in the server's socket before the server looks */
	for (uint64_t end = xtime_ns() + TMO; ; usleep(1000)) {
		struct srv_path *p = rtrs_srv_sess_next(s->srv, NULL)->paths;

		while (p && p->listener != 1)
			p = p->next;
		assert_non_null(p);
		if (xrc_peer_gone(p->con[1]->x))
			break;
		assert_true(xtime_ns() < end);
	}
	pthread_mutex_unlock(&s->mu);
	wait_for(s, one_path, "the aborted path gone");
	assert_int_equal(rnbd_io(a, 1, 2, dev, RNBD_OP_READ, sector + 8, NULL, len, dst_a), 0);
	assert_memory_equal(a->mem + dst_a, zero, len);
	clt_close(b);
	clt_close(a);
	wait_sessions(s, 0);
	srv_stop(s);
}

static void test_geometry(void **state)
{
	struct rtrs_srv_opts o;
	struct rtrs_srv_ops ops = { 0 };
	char err[256];

	(void)state;
	rnbd_srv_rtrs_ops(&ops);
	rtrs_srv_opts_default(&o);
	o.chunk_size = 100000;
	assert_null(rtrs_srv_new(&o, &ops, NULL, err, sizeof(err)));
	o.chunk_size = 1 << 20;
	o.queue_depth = 1024;		/* 10 + 20 bits > 28 */
	assert_null(rtrs_srv_new(&o, &ops, NULL, err, sizeof(err)));
	assert_non_null(strstr(err, "queue depth"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_geometry),
		cmocka_unit_test(test_connect_info_io),
		cmocka_unit_test(test_always_invalidate),
		cmocka_unit_test_teardown(test_no_windows, windows_back),
		cmocka_unit_test(test_conn_req_rules),
		cmocka_unit_test(test_violations),
		cmocka_unit_test(test_violations_inval),
		cmocka_unit_test(test_heartbeats),
		cmocka_unit_test(test_multipath),
		cmocka_unit_test(test_failover_copies),
	};

	xlog_init("test_rtrs_srv");	/* XPRT_LOG=info: why paths close */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
