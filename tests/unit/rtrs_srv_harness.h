/* The harness of test_rtrs_srv.c and test_rnbd_srv.c: the RTRS server with
 * RNBD on top, its loop on a thread of its own (the test takes its lock to
 * look inside), over tcp:// on loopback, and a scripted client built from
 * the wire codecs and xrc alone (no rtrs_clt).  Include after <cmocka.h>. */
#ifndef XPRT_TESTS_RTRS_SRV_HARNESS_H
#define XPRT_TESTS_RTRS_SRV_HARNESS_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/xtime.h"
#include "rnbd/rnbd_srv.h"
#include "rnbd/rnbd_wire.h"
#include "rtrs/rtrs_srv.h"
#include "rtrs/rtrs_wire.h"
#include "xprt/xrc.h"

#define TMO		(10 * XTIME_NS_PER_S)
#define NRECV		64
#define MEMSZ		(2u << 20)
#define DEV_SIZE	(1u << 20)

/* --- the server on its thread ------------------------------------------- */

struct tsrv {
	struct rtrs_srv *srv;
	struct rnbd_srv *rnbd;
	pthread_t th;
	pthread_mutex_t mu;
	_Atomic int stop;
	uint16_t port, port2;		/* listeners on 127.0.0.1 and 127.0.0.2 */
	uint16_t port_any;		/* and one on 0.0.0.0 */
	char file[64], rofile[64];
};

/* IO threads of the servers srv_start() makes (0: synchronous IO). */
static unsigned harness_io_threads;

/* A test may keep requests from the RNBD layer, as an IO thread would
 * that has not finished yet: when harness_hold says so, the request waits
 * in harness_held until harness_release() (with s->mu held). */
struct harness_req {
	struct rtrs_srv_sess *sess;
	struct rtrs_srv_op *op;
	int dir;
	void *data;
	uint32_t datalen, usrlen;
	const void *usr;
};
static bool (*harness_hold)(struct rtrs_srv_sess *s, int dir, const void *usr, uint32_t usrlen);
static struct harness_req harness_held[8];
static unsigned harness_nheld;
static int (*harness_rnbd_ev)(void *ctx, struct rtrs_srv_sess *s, struct rtrs_srv_op *op, int dir,
			      void *data, uint32_t datalen, const void *usr, uint32_t usrlen);

static inline int harness_rdma_ev(void *ctx, struct rtrs_srv_sess *s, struct rtrs_srv_op *op,
				  int dir, void *data, uint32_t datalen, const void *usr,
				  uint32_t usrlen)
{
	if (harness_hold && harness_nheld < 8 && harness_hold(s, dir, usr, usrlen)) {
		harness_held[harness_nheld++] =
			(struct harness_req){ s, op, dir, data, datalen, usrlen, usr };
		return 0;
	}
	return harness_rnbd_ev(ctx, s, op, dir, data, datalen, usr, usrlen);
}

/* Hands the held requests to the RNBD layer, in arrival order. */
static inline void harness_release(void *rnbd)
{
	for (unsigned i = 0; i < harness_nheld; i++) {
		struct harness_req *h = &harness_held[i];

		if (harness_rnbd_ev(rnbd, h->sess, h->op, h->dir, h->data, h->datalen, h->usr,
				    h->usrlen) < 0)
			rtrs_srv_resp(h->op, -EIO);
	}
	harness_nheld = 0;
}

static inline void *srv_main(void *arg)
{
	struct tsrv *s = arg;

	while (!s->stop) {
		int armed;

		pthread_mutex_lock(&s->mu);
		rtrs_srv_poll(s->srv, xtime_ns());
		armed = rnbd_srv_pending(s->rnbd);
		if (armed) {
			rtrs_srv_batch(s->srv, true);
			rnbd_srv_poll(s->rnbd);
			rtrs_srv_batch(s->srv, false);
		}
		armed |= rtrs_srv_arm(s->srv);
		pthread_mutex_unlock(&s->mu);
		if (!armed) {
			struct pollfd p[2] = { { rtrs_srv_fd(s->srv), POLLIN, 0 },
					       { rnbd_srv_fd(s->rnbd), POLLIN, 0 } };

			poll(p, 2, 5);
		}
	}
	return NULL;
}

static inline void make_file(char *name, size_t len)
{
	int fd;

	strcpy(name, "/tmp/test_rtrs_srv.XXXXXX");
	fd = mkstemp(name);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)len), 0);
	close(fd);
}

static inline struct tsrv *srv_start(uint32_t qd, uint32_t chunk, bool inval, uint32_t hb_ms)
{
	struct tsrv *s = calloc(1, sizeof(*s));
	struct rtrs_srv_opts o;
	struct rtrs_srv_ops ops = { 0 };
	struct xuri u = { .scheme = XURI_TCP, .host = "127.0.0.1", .port = 0 };
	char err[256];

	assert_non_null(s);
	rtrs_srv_opts_default(&o);
	o.queue_depth = qd;
	o.chunk_size = chunk;
	o.always_invalidate = inval;
	o.hb_interval_ms = hb_ms;
	o.hb_missed_max = 2;
	make_file(s->file, DEV_SIZE);
	make_file(s->rofile, DEV_SIZE);
	s->rnbd = rnbd_srv_new(chunk - RTRS_MAX_HDR_SIZE, err, sizeof(err));
	assert_non_null(s->rnbd);
	assert_int_equal(rnbd_srv_export(s->rnbd, "disk", s->file, false, err, sizeof(err)), 0);
	assert_int_equal(rnbd_srv_export(s->rnbd, "rodisk", s->rofile, true, err, sizeof(err)), 0);
	assert_int_equal(rnbd_srv_set_io_threads(s->rnbd, harness_io_threads, err, sizeof(err)), 0);
	rnbd_srv_rtrs_ops(&ops);
	harness_rnbd_ev = ops.rdma_ev;
	ops.rdma_ev = harness_rdma_ev;
	s->srv = rtrs_srv_new(&o, &ops, s->rnbd, err, sizeof(err));
	assert_non_null(s->srv);
	assert_int_equal(rtrs_srv_listen(s->srv, &u, err, sizeof(err)), 0);
	s->port = rtrs_srv_listener_uri(s->srv, 0)->port;
	strcpy(u.host, "127.0.0.2");
	assert_int_equal(rtrs_srv_listen(s->srv, &u, err, sizeof(err)), 1);
	s->port2 = rtrs_srv_listener_uri(s->srv, 1)->port;
	strcpy(u.host, "0.0.0.0");
	assert_int_equal(rtrs_srv_listen(s->srv, &u, err, sizeof(err)), 2);
	s->port_any = rtrs_srv_listener_uri(s->srv, 2)->port;
	pthread_mutex_init(&s->mu, NULL);
	assert_int_equal(pthread_create(&s->th, NULL, srv_main, s), 0);
	return s;
}

static inline void srv_stop(struct tsrv *s)
{
	s->stop = 1;
	pthread_join(s->th, NULL);
	rnbd_srv_drain(s->rnbd);
	rtrs_srv_free(s->srv);
	rnbd_srv_free(s->rnbd);
	unlink(s->file);
	unlink(s->rofile);
	free(s);
}

static inline struct rtrs_srv_info srv_info(struct tsrv *s)
{
	struct rtrs_srv_info in;

	pthread_mutex_lock(&s->mu);
	rtrs_srv_get_info(s->srv, &in);
	pthread_mutex_unlock(&s->mu);
	return in;
}

/* Waits until the server has `n` sessions (they go a loop round after
 * their paths). */
static inline void wait_sessions(struct tsrv *s, unsigned n)
{
	uint64_t end = xtime_ns() + TMO;

	while (srv_info(s).sessions != n && xtime_ns() < end)
		usleep(1000);
	assert_int_equal(srv_info(s).sessions, n);
}

/* --- the scripted client ------------------------------------------------ */

struct tcon {
	struct xrc *x;
	uint8_t *rbuf;			/* NRECV receive buffers of rlen */
	uint32_t rlen;
};

struct tclt {
	struct tsrv *s;
	bool second;			/* through the 127.0.0.2 listener */
	const char *any;		/* through the wildcard listener, to this address */
	uint8_t sess_uuid[16], paths_uuid[16];
	uint16_t cid_num;
	struct tcon con[8];
	struct rtrs_geom g;
	uint32_t flags;
	struct rtrs_rbuf rb[64];
	uint8_t *mem;
	struct xrc_mr *mr;
	uint8_t rnbd_ver;
	int last_err;			/* conn_rsp errno of the last connect */
};

static inline void uuid_fill(uint8_t u[16], unsigned seed)
{
	for (int i = 0; i < 16; i++)
		u[i] = (uint8_t)(seed * 31 + (unsigned)i * 7 + 1);
}

static inline struct tclt *clt_new(struct tsrv *s, unsigned seed)
{
	struct tclt *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	t->s = s;
	uuid_fill(t->paths_uuid, seed);
	uuid_fill(t->sess_uuid, seed + 1000);
	t->mem = aligned_alloc(4096, MEMSZ);
	assert_non_null(t->mem);
	memset(t->mem, 0, MEMSZ);
	return t;
}

static inline struct xuri srv_uri(const struct tclt *t)
{
	struct xuri u = { .scheme = XURI_TCP, .host = "127.0.0.1", .port = t->s->port };

	if (t->second) {
		strcpy(u.host, "127.0.0.2");
		u.port = t->s->port2;
	}
	if (t->any) {
		snprintf(u.host, sizeof(u.host), "%s", t->any);
		u.port = t->s->port_any;
	}
	return u;
}

/* Connects one connection with a conn_req built from r (raw bytes when
 * raw is not NULL).  Returns 0 or the errno of the reject's conn_rsp. */
static inline int clt_connect_raw(struct tclt *t, unsigned cid, const uint8_t *raw,
			   const struct rtrs_conn_req *r)
{
	uint8_t req[RTRS_CONN_REQ_LEN], rep[XRC_PRIV_MAX];
	struct xrc_opts o = { .sq_depth = 512, .rq_depth = 512, .max_send = 1 << 20 };
	struct xuri u = srv_uri(t);
	struct rtrs_conn_rsp rsp;
	size_t replen = sizeof(rep);
	char err[256];
	struct xrc *x;

	if (raw)
		memcpy(req, raw, sizeof(req));
	else
		rtrs_conn_req_encode(r, req);
	x = xrc_connect(&u, &o, req, sizeof(req), rep, &replen, err, sizeof(err));
	if (!x) {
		assert_int_equal(errno, ECONNREFUSED);
		assert_int_equal(rtrs_conn_rsp_decode(rep, replen, &rsp), 0);
		assert_true(rsp.err < 0);
		t->last_err = rsp.err;
		return rsp.err;
	}
	assert_int_equal(rtrs_conn_rsp_decode(rep, replen, &rsp), 0);
	assert_int_equal(rsp.err, 0);
	rtrs_geom_from_conn_rsp(&rsp, &t->g);
	t->flags = rsp.flags;
	t->con[cid].x = x;
	/* receive buffers big enough for INFO_RSP on connection 0 and
	 * rkey_rsp everywhere */
	t->con[cid].rlen = RTRS_INFO_RSP_HDR_LEN + RTRS_SG_DESC_LEN * 64;
	t->con[cid].rbuf = calloc(NRECV, t->con[cid].rlen);
	for (unsigned i = 0; i < NRECV; i++) {
		struct xrc_sge sg = { t->con[cid].rbuf + i * t->con[cid].rlen, t->con[cid].rlen, NULL };

		assert_int_equal(xrc_post_recv(x, &sg, i), 0);
	}
	if (!t->mr) {
		t->mr = xrc_reg(xrc_domain(x), t->mem, MEMSZ,
				XRC_ACCESS_LOCAL_WRITE | XRC_ACCESS_REMOTE_WRITE, err, sizeof(err));
		assert_non_null(t->mr);
	}
	return 0;
}

static inline struct rtrs_conn_req conn_req(const struct tclt *t, unsigned cid, bool first)
{
	struct rtrs_conn_req r = { .cid = (uint16_t)cid, .cid_num = t->cid_num, .recon_cnt = 1,
				   .first_conn = first };

	memcpy(r.sess_uuid, t->sess_uuid, 16);
	memcpy(r.paths_uuid, t->paths_uuid, 16);
	return r;
}

static inline int clt_connect(struct tclt *t, unsigned cid_num)
{
	t->cid_num = (uint16_t)cid_num;
	for (unsigned i = 0; i < cid_num; i++) {
		struct rtrs_conn_req r = conn_req(t, i, true);
		int rc = clt_connect_raw(t, i, NULL, &r);

		if (rc)
			return rc;
	}
	return 0;
}

/* The next completion of connection cid other than our own sends; HB_MSG
 * is answered on the way. */
static inline int clt_next(struct tclt *t, unsigned cid, struct xrc_wc *wc)
{
	struct tcon *c = &t->con[cid];
	uint64_t end = xtime_ns() + TMO;

	while (xtime_ns() < end) {
		int n = xrc_poll(c->x, wc, 1);

		if (n < 0 || (n == 0 && xrc_state(c->x) == XRC_DOWN))
			return -ENOTCONN;
		if (n == 0) {
			xrc_wait(c->x, 10 * XTIME_NS_PER_MS);
			continue;
		}
		if (wc->status)
			return -ENOTCONN;	/* flushed: the server closed us */
		if (wc->op != XRC_OP_RECV && wc->op != XRC_OP_RECV_IMM)
			continue;
		{
			struct xrc_sge sg = { c->rbuf + wc->wr_id * c->rlen, c->rlen, NULL };

			assert_int_equal(xrc_post_recv(c->x, &sg, wc->wr_id), 0);
		}
		if (wc->has_imm && wc->imm == RTRS_IMM_HB_MSG) {
			xrc_post_write(c->x, NULL, 0, 0, 0, true, RTRS_IMM_HB_ACK, 0, 0);
			continue;
		}
		return 0;
	}
	return -ETIMEDOUT;
}

static inline int clt_info(struct tclt *t, const char *name)
{
	struct rtrs_info_req m;
	uint8_t buf[RTRS_INFO_REQ_LEN];
	struct xrc_sge sg = { buf, sizeof(buf), NULL };
	struct xrc_wc wc;
	uint16_t n;
	int rc;

	memset(&m, 0, sizeof(m));
	snprintf(m.pathname, sizeof(m.pathname), "%s", name);
	/* encode refuses bad names: write the bytes by hand */
	memset(buf, 0, sizeof(buf));
	buf[0] = RTRS_MSG_INFO_REQ;
	memcpy(buf + 2, name, strlen(name));
	assert_int_equal(xrc_post_send(t->con[0].x, &sg, 1, 0, 0), 0);
	rc = clt_next(t, 0, &wc);
	if (rc)
		return rc;
	assert_int_equal(wc.op, XRC_OP_RECV);
	rc = rtrs_info_rsp_decode(t->con[0].rbuf + wc.wr_id * t->con[0].rlen, wc.len,
				  t->g.queue_depth, t->g.chunk_size, &n, t->rb);
	assert_int_equal(rc, 0);
	return 0;
}

static inline void clt_close(struct tclt *t)
{
	for (unsigned i = 0; i < 8; i++) {
		xrc_close(t->con[i].x);
		free(t->con[i].rbuf);
		t->con[i].x = NULL;
		t->con[i].rbuf = NULL;
	}
	xrc_dereg(t->mr);
	free(t->mem);
	free(t);
}

/* Waits until the server has closed every connection of the client. */
static inline void expect_closed(struct tclt *t)
{
	uint64_t end = xtime_ns() + TMO;

	for (unsigned i = 0; i < 8; i++) {
		struct xrc_wc wc[8];

		if (!t->con[i].x)
			continue;
		while (xrc_state(t->con[i].x) != XRC_DOWN && xtime_ns() < end) {
			if (xrc_poll(t->con[i].x, wc, 8) == 0)
				xrc_wait(t->con[i].x, 10 * XTIME_NS_PER_MS);
		}
		assert_int_equal(xrc_state(t->con[i].x), XRC_DOWN);
	}
}

/* The bytes of a request: where they go and the immediate. */
static inline int clt_post(struct tclt *t, unsigned cid, uint32_t buf_id, uint64_t raddr_off,
		    const void *bytes, uint32_t len, uint32_t imm)
{
	uint8_t *stage = t->mem + MEMSZ / 2;
	struct xrc_sge sg = { stage, len, t->mr };

	memcpy(stage, bytes, len);
	return xrc_post_write(t->con[cid].x, &sg, 1, t->rb[buf_id].addr + raddr_off,
			      t->rb[buf_id].rkey, true, imm, 0, 0);
}

/* Waits for the response to buf_id: its errno (0 or -errno), or a
 * transport error. */
static inline int clt_rsp(struct tclt *t, unsigned cid, uint32_t buf_id)
{
	struct xrc_wc wc;
	uint32_t id;
	int rc = clt_next(t, cid, &wc), err;

	if (rc)
		return rc;
	assert_true(wc.has_imm);
	assert_true(rtrs_imm_type(wc.imm) == RTRS_IO_RSP_IMM ||
		    rtrs_imm_type(wc.imm) == RTRS_IO_RSP_W_INV_IMM);
	rtrs_io_rsp_payload_decode(rtrs_imm_payload(wc.imm), &id, &err);
	assert_int_equal(id, buf_id);
	if (t->flags & RTRS_MSG_NEW_RKEY_F) {
		struct rtrs_rkey_rsp k;

		assert_int_equal(wc.op, XRC_OP_RECV);
		assert_int_equal(rtrs_rkey_rsp_decode(t->con[cid].rbuf + wc.wr_id * t->con[cid].rlen,
						      wc.len, t->g.queue_depth, &k), 0);
		assert_int_equal(k.buf_id, buf_id);
		t->rb[buf_id].rkey = k.rkey;
	} else {
		assert_int_equal(wc.op, XRC_OP_RECV_IMM);
	}
	return err;
}

/* An RTRS WRITE: data, then usr, then the message, one RDMA write. */
static inline int clt_write(struct tclt *t, unsigned cid, uint32_t buf_id, const void *data,
		     uint32_t len, const void *usr, uint32_t usrlen)
{
	struct rtrs_req_layout l;
	struct rtrs_rdma_write w = { (uint16_t)usrlen };
	uint8_t *b = malloc(len + usrlen + RTRS_RDMA_WRITE_LEN);
	int rc;

	assert_int_equal(rtrs_write_layout(&t->g, buf_id, len, usrlen, &l), 0);
	if (len)
		memcpy(b, data, len);
	memcpy(b + len, usr, usrlen);
	rtrs_rdma_write_encode(&w, b + len + usrlen);
	rc = clt_post(t, cid, buf_id, l.wr_off, b, l.wr_len, l.imm);
	free(b);
	assert_int_equal(rc, 0);
	return clt_rsp(t, cid, buf_id);
}

/* An RTRS READ into the client's buffer at mem + dst (len bytes). */
static inline int clt_read(struct tclt *t, unsigned cid, uint32_t buf_id, uint32_t dst, uint32_t len,
		    const void *usr, uint32_t usrlen)
{
	struct rtrs_req_layout l;
	struct rtrs_rdma_read r = { .usr_len = (uint16_t)usrlen, .sg_cnt = 1,
				    .desc = { (uintptr_t)(t->mem + dst), t->mr->rkey, len } };
	uint8_t b[4096];
	int n;

	assert_int_equal(rtrs_read_layout(&t->g, buf_id, len, usrlen, 1, &l), 0);
	memcpy(b, usr, usrlen);
	n = rtrs_rdma_read_encode(&r, b + usrlen, sizeof(b) - usrlen);
	assert_true(n > 0);
	assert_int_equal(clt_post(t, cid, buf_id, l.wr_off, b, usrlen + (uint32_t)n, l.imm), 0);
	return clt_rsp(t, cid, buf_id);
}

/* --- RNBD over the scripted client -------------------------------------- */

static inline int rnbd_sess_info(struct tclt *t)
{
	struct rnbd_sess_info m = { 2 }, r;
	uint8_t b[RNBD_SESS_INFO_LEN];
	int rc;

	rnbd_sess_info_encode(&m, b);
	rc = clt_read(t, 0, 0, 0, RNBD_SESS_INFO_LEN, b, sizeof(b));
	if (rc)
		return rc;
	assert_int_equal(rnbd_sess_info_rsp_decode(t->mem, RNBD_SESS_INFO_LEN, &r), 0);
	t->rnbd_ver = r.ver;
	return 0;
}

static inline int rnbd_open(struct tclt *t, const char *name, uint8_t mode, struct rnbd_open_rsp *rsp)
{
	struct rnbd_open m = { .access_mode = mode };
	uint8_t b[RNBD_OPEN_LEN];
	int rc;

	snprintf(m.dev_name, sizeof(m.dev_name), "%s", name);
	assert_int_equal(rnbd_open_encode(&m, b), 0);
	rc = clt_read(t, 0, 1, 0, RNBD_OPEN_RSP_LEN, b, sizeof(b));
	if (rc)
		return rc;
	assert_int_equal(rnbd_open_rsp_decode(t->mem, RNBD_OPEN_RSP_LEN, rsp), 0);
	return 0;
}

static inline int rnbd_close(struct tclt *t, uint32_t dev)
{
	struct rnbd_close m = { dev };
	uint8_t b[RNBD_CLOSE_LEN];

	rnbd_close_encode(&m, b);
	return clt_write(t, 0, 2, NULL, 0, b, sizeof(b));
}

static inline int rnbd_io(struct tclt *t, unsigned cid, uint32_t buf_id, uint32_t dev, uint32_t rw,
		   uint64_t sector, const void *data, uint32_t len, uint32_t dst)
{
	struct rnbd_io m = { .device_id = dev, .sector = sector, .rw = rw, .bi_size = len };
	uint8_t b[RNBD_IO_LEN];

	rnbd_io_encode(&m, b);
	if (rnbd_op(rw) == RNBD_OP_READ)
		return clt_read(t, cid, buf_id, dst, len, b, sizeof(b));
	return clt_write(t, cid, buf_id, data, data ? len : 0, b, sizeof(b));
}

/* A whole well-behaved session: connect, INFO, SESS_INFO, OPEN of "disk"
 * (mode), ready for IO.  Returns the device id. */
static inline struct tclt *good_session(struct tsrv *s, unsigned seed, const char *name, unsigned cids,
				 uint8_t mode, uint32_t *dev)
{
	struct tclt *t = clt_new(s, seed);
	struct rnbd_open_rsp r;

	assert_int_equal(clt_connect(t, cids), 0);
	assert_int_equal(clt_info(t, name), 0);
	assert_int_equal(rnbd_sess_info(t), 0);
	assert_int_equal(t->rnbd_ver, 2);
	assert_int_equal(rnbd_open(t, "disk", mode, &r), 0);
	assert_int_equal(r.nsectors, DEV_SIZE / 512);
	assert_int_equal(r.logical_block_size, 512);
	assert_int_equal(r.max_hw_sectors, (t->g.chunk_size - RTRS_MAX_HDR_SIZE) / 512);
	*dev = r.device_id;
	return t;
}

/* Write a pattern at sector, read it back through another buffer and
 * connection: the session works. */
static inline void check_io(struct tclt *t, uint32_t dev, uint64_t sector, unsigned seed)
{
	uint32_t len = 8192, cid = t->cid_num > 1 ? 1 : 0;
	uint8_t *pat = malloc(len);

	for (uint32_t i = 0; i < len; i++)
		pat[i] = (uint8_t)(i * 13 + seed);
	assert_int_equal(rnbd_io(t, cid, 3, dev, RNBD_OP_WRITE | RNBD_F_SYNC, sector, pat, len, 0), 0);
	memset(t->mem + 65536, 0xee, len);
	assert_int_equal(rnbd_io(t, t->cid_num - 1, 4, dev, RNBD_OP_READ, sector, NULL, len, 65536),
			 0);
	assert_memory_equal(t->mem + 65536, pat, len);
	free(pat);
}

#endif
