/* gfcc rpc2 request/response and xprt's UDP extensions: exact bytes
 * (gfarm's x86-64 layout, little-endian), round trips, limits, and the
 * rejection of every bad field. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "ibcache/gfcc_wire.h"

static void ok_req(struct gfcc_req *q)
{
	memset(q, 0, sizeof(*q));
	q->id = 0x1122334455667788ull;
	q->obj = (struct gfcc_obj){ .ino = 0x0102030405060708ull, .gen = 7, .off = 8192, .len = 20480 };
	q->qkey = 0x12345678;
	q->cmd = GFCC_CMD_READ_REQ;
	q->psize = 4096;
	q->npage = 5;
	q->npblk = 2;
	q->pblk[0] = (struct gfcc_pblk){ .index = 2, .count = 3 };
	q->pblk[1] = (struct gfcc_pblk){ .index = 9, .count = 2 };
}

static void test_req_bytes(void **s)
{
	static const uint8_t want[GFCC_REQ_HDR + 2 * GFCC_PBLK_LEN] = {
		'g', 'f', 'c', 'c', '1', 0, 0, 0,		/* ver */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,	/* id, little-endian */
		8, 7, 6, 5, 4, 3, 2, 1,				/* ino */
		7, 0, 0, 0, 0, 0, 0, 0,				/* gen */
		0, 0x20, 0, 0, 0, 0, 0, 0,			/* off 8192 */
		0, 0x50, 0, 0, 0, 0, 0, 0,			/* len 20480 */
		0x78, 0x56, 0x34, 0x12,				/* qkey @48 */
		0, 0, 0, 0,					/* psn @52 */
		2, 0, 0, 0,					/* cmd @56 */
		0, 0x10, 0, 0,					/* psize @60 */
		5, 0, 0, 0,					/* npage @64 */
		2, 0, 0, 0,					/* npblk @68 */
		2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0,	/* pblk 0 @72 */
		9, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
	};
	struct gfcc_req q, d;
	uint8_t b[GFCC_REQ_MAX];

	ok_req(&q);
	assert_int_equal(gfcc_req_encode(&q, b, sizeof(b)), sizeof(want));
	assert_memory_equal(b, want, sizeof(want));
	memset(&d, 0xa5, sizeof(d));
	assert_int_equal(gfcc_req_decode(b, sizeof(want), &d), 0);
	assert_true(d.id == q.id && d.obj.ino == q.obj.ino && d.obj.gen == 7);
	assert_true(d.obj.off == 8192 && d.obj.len == 20480);
	assert_int_equal(d.qkey, q.qkey);
	assert_int_equal(d.psize, 4096);
	assert_int_equal(d.npage, 5);
	assert_int_equal(d.npblk, 2);
	assert_false(d.has_ext);
	assert_memory_equal(d.pblk, q.pblk, 2 * sizeof(q.pblk[0]));
	assert_int_equal(gfcc_kind(b, sizeof(want)), GFCC_KIND_REQ);

	/* gfarm copies 5 bytes of "gfcc1" into a reused buffer and never
	 * sets psn: whatever is there is ignored */
	b[5] = 'x'; b[7] = 0xff; b[52] = 0x99; b[55] = 0x01;
	assert_int_equal(gfcc_req_decode(b, sizeof(want), &d), 0);

	/* encoder room */
	assert_int_equal(gfcc_req_encode(&q, b, sizeof(want) - 1), -ENOSPC);
}

static void test_req_ext(void **s)
{
	struct gfcc_req q, d;
	uint8_t b[GFCC_REQ_MAX];
	size_t len = gfcc_req_len(2, true);
	static const uint8_t ext[] = { 'g', 'f', 'c', 'x', 1, 0, 0xd8, 0x0f,
				       64, 0, 0, 0, 0, 0, 0, 0 };

	ok_req(&q);
	q.has_ext = true;
	q.ext = (struct gfcc_req_ext){ .xver = GFCC_X_VERSION, .seglen = 4056, .window = 64 };
	assert_int_equal(gfcc_req_encode(&q, b, sizeof(b)), len);
	assert_int_equal(len, GFCC_REQ_HDR + 32 + 16);
	assert_memory_equal(b + GFCC_REQ_HDR + 32, ext, sizeof(ext));
	assert_int_equal(gfcc_req_decode(b, len, &d), 0);
	assert_true(d.has_ext);
	assert_int_equal(d.ext.seglen, 4056);
	assert_int_equal(d.ext.window, 64);

	/* every byte of the extension checked */
	b[len - 16] = 'G';
	assert_int_equal(gfcc_req_decode(b, len, &d), -EPROTO);
	b[len - 16] = 'g'; b[len - 12] = 2;
	assert_int_equal(gfcc_req_decode(b, len, &d), -EPROTONOSUPPORT);
	b[len - 12] = 1; b[len - 11] = 1;
	assert_int_equal(gfcc_req_decode(b, len, &d), -EPROTO);
	b[len - 11] = 0; b[len - 1] = 1;
	assert_int_equal(gfcc_req_decode(b, len, &d), -EPROTO);
	b[len - 1] = 0;
	assert_int_equal(gfcc_req_decode(b, len, &d), 0);
	q.ext.seglen = GFCC_SEGLEN_MIN - 1;
	assert_int_equal(gfcc_req_encode(&q, b, sizeof(b)), -EINVAL);
	q.ext.seglen = GFCC_SEGLEN_MIN;
	assert_int_equal(gfcc_req_encode(&q, b, sizeof(b)), (int)len);
	q.ext.xver = 2;
	assert_int_equal(gfcc_req_encode(&q, b, sizeof(b)), -EPROTONOSUPPORT);
}

/* Encodes `q` without checks (as a hostile peer would) and decodes it. */
static int dec_raw(const struct gfcc_req *q, size_t adj)
{
	uint8_t b[GFCC_REQ_MAX + 64];
	struct gfcc_req good, d;
	size_t len;

	/* encode a valid twin, then patch the header fields by hand */
	ok_req(&good);
	good.npblk = 1;
	good.npage = 1;
	good.pblk[0] = (struct gfcc_pblk){ 0, 1 };
	assert_true(gfcc_req_encode(&good, b, sizeof(b)) > 0);
	memset(b + GFCC_REQ_HDR, 0, sizeof(b) - GFCC_REQ_HDR);
#define LE(off, v, n) do { uint64_t _v = (v); for (int _i = 0; _i < (n); _i++) b[(off) + _i] = (uint8_t)(_v >> (8 * _i)); } while (0)
	LE(8, q->id, 8);
	LE(16, q->obj.ino, 8);
	LE(24, q->obj.gen, 8);
	LE(32, (uint64_t)q->obj.off, 8);
	LE(40, (uint64_t)q->obj.len, 8);
	LE(48, q->qkey, 4);
	LE(56, q->cmd, 4);
	LE(60, q->psize, 4);
	LE(64, q->npage, 4);
	LE(68, q->npblk, 4);
	for (uint32_t i = 0; i < q->npblk && i < GFCC_PBLK_MAX + 1; i++) {
		LE(GFCC_REQ_HDR + i * 16, q->pblk[i < GFCC_PBLK_MAX ? i : 0].index, 8);
		LE(GFCC_REQ_HDR + i * 16 + 8, q->pblk[i < GFCC_PBLK_MAX ? i : 0].count, 8);
	}
#undef LE
	len = gfcc_req_len(q->npblk <= GFCC_PBLK_MAX + 1 ? q->npblk : 0, false) + adj;
	return gfcc_req_decode(b, len, &d);
}

static void test_req_rejects(void **s)
{
	struct gfcc_req ok, q;
	uint8_t b[GFCC_REQ_MAX] = { 0 };
	int len;

	ok_req(&ok);
	assert_int_equal(dec_raw(&ok, 0), 0);
	len = gfcc_req_encode(&ok, b, sizeof(b));
	assert_int_equal(gfcc_req_decode(b, GFCC_REQ_HDR - 1, &q), -EMSGSIZE);
	assert_int_equal(gfcc_req_decode(NULL, 100, &q), -EMSGSIZE);
	assert_int_equal(gfcc_req_decode(b, len - 1, &q), -EMSGSIZE);	/* truncated block */
	assert_int_equal(gfcc_req_decode(b, len + 1, &q), -EMSGSIZE);
	assert_int_equal(gfcc_req_decode(b, len + 16, &q), -EPROTO);	/* zeros are no extension */
	b[0] = 'G';
	assert_int_equal(gfcc_req_decode(b, len, &q), -EPROTO);		/* magic */
	b[0] = 'g'; b[4] = '2';
	assert_int_equal(gfcc_req_decode(b, len, &q), -EPROTO);

	q = ok; q.cmd = 3;		assert_int_equal(dec_raw(&q, 0), -EPROTO);
	q = ok; q.cmd = 0;		assert_int_equal(dec_raw(&q, 0), -EPROTO);
	q = ok; q.qkey = 0;		assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.qkey = 0x80000001u;	assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.qkey = 0x7fffffffu;	assert_int_equal(dec_raw(&q, 0), 0);
	q = ok; q.psize = 4095;		assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.psize = 256;		assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.psize = 131072;	assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.psize = 0;		assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.psize = 512;		assert_int_equal(dec_raw(&q, 0), 0);
	q = ok; q.psize = 65536;	assert_int_equal(dec_raw(&q, 0), 0);
	q = ok; q.obj.off = -1;		assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.obj.len = -4096;	assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.obj.off = INT64_MAX; q.obj.len = 1; assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.obj.off = INT64_MAX; q.obj.len = 0; assert_int_equal(dec_raw(&q, 0), 0);
	/* counts */
	q = ok; q.npage = 0;		assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.npage = (uint32_t)-5;	assert_int_equal(dec_raw(&q, 0), -EINVAL);	/* gfarm int < 0 */
	q = ok; q.npage = 4;		assert_int_equal(dec_raw(&q, 0), -EINVAL);	/* sum 5 */
	q = ok; q.npage = 6;		assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.npblk = 0;		assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.npblk = (uint32_t)-1;	assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.npblk = GFCC_PBLK_MAX + 1; assert_int_equal(dec_raw(&q, 0), -E2BIG);
	q = ok; q.npage = 257; q.npblk = 1; q.pblk[0] = (struct gfcc_pblk){ 0, 257 };
	assert_int_equal(dec_raw(&q, 0), -E2BIG);
	q.npage = 256; q.pblk[0].count = 256;	assert_int_equal(dec_raw(&q, 0), 0);
	q.psize = 8192;				assert_int_equal(dec_raw(&q, 0), -E2BIG);	/* 2 MiB */
	q.npage = 128; q.pblk[0].count = 128;	assert_int_equal(dec_raw(&q, 0), 0);
	/* blocks */
	q = ok; q.pblk[0].count = 0; q.pblk[1].count = 5; assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.pblk[1].index = 4;	assert_int_equal(dec_raw(&q, 0), -EINVAL);	/* overlaps 2..4 */
	q = ok; q.pblk[1].index = 5;	assert_int_equal(dec_raw(&q, 0), 0);		/* adjacent */
	q = ok; q.pblk[1].index = 1;	assert_int_equal(dec_raw(&q, 0), -EINVAL);	/* unsorted */
	q = ok; q.pblk[1].index = (uint64_t)INT64_MAX / 4096 - 1;
	assert_int_equal(dec_raw(&q, 0), -EINVAL);	/* last page's offset past off_t */
	q.pblk[1].index--;		assert_int_equal(dec_raw(&q, 0), 0);
	q = ok; q.pblk[1].index = UINT64_MAX; assert_int_equal(dec_raw(&q, 0), -EINVAL);
	q = ok; q.pblk[0].count = UINT64_MAX - 1; assert_int_equal(dec_raw(&q, 0), -EINVAL);
	/* the encoder refuses the same things */
	q = ok; q.pblk[1].index = 4;	assert_int_equal(gfcc_req_encode(&q, b, sizeof(b)), -EINVAL);
	q = ok; q.npblk = GFCC_PBLK_MAX + 1; assert_int_equal(gfcc_req_encode(&q, b, sizeof(b)), -E2BIG);
}

static void test_req_pages(void **s)
{
	struct gfcc_req q;
	uint64_t pages[300], idx;
	uint8_t b[GFCC_REQ_MAX];

	ok_req(&q);
	/* runs merge into blocks: {3,4,5} {7} {10,11} */
	uint64_t a[] = { 3, 4, 5, 7, 10, 11 };
	assert_int_equal(gfcc_req_set_pages(&q, a, 6, GFCC_PBLK_MAX), 6);
	assert_int_equal(q.npblk, 3);
	assert_int_equal(q.npage, 6);
	assert_true(q.pblk[0].index == 3 && q.pblk[0].count == 3);
	assert_true(q.pblk[1].index == 7 && q.pblk[1].count == 1);
	assert_true(q.pblk[2].index == 10 && q.pblk[2].count == 2);
	for (uint32_t i = 0; i < 6; i++) {
		assert_int_equal(gfcc_req_page(&q, i, &idx), 0);
		assert_true(idx == a[i]);
	}
	assert_int_equal(gfcc_req_page(&q, 6, &idx), -ERANGE);
	assert_true(gfcc_req_encode(&q, b, sizeof(b)) > 0);
	/* too many blocks: stop before the third, like gfarm's map */
	assert_int_equal(gfcc_req_set_pages(&q, a, 6, 2), 4);
	assert_int_equal(q.npblk, 2);
	assert_int_equal(q.npage, 4);
	/* not ascending */
	uint64_t bad[] = { 3, 3 };
	assert_int_equal(gfcc_req_set_pages(&q, bad, 2, 4), -EINVAL);
	assert_int_equal(gfcc_req_set_pages(&q, a, 0, 4), -EINVAL);
	/* the page limit: 300 scattered pages, 256 taken at 4 KiB, 16 at 64 KiB */
	for (int i = 0; i < 300; i++)
		pages[i] = 2 * (uint64_t)i;
	assert_int_equal(gfcc_req_set_pages(&q, pages, 300, GFCC_PBLK_MAX), GFCC_PBLK_MAX);
	for (int i = 0; i < 300; i++)
		pages[i] = 1000 + (uint64_t)i;
	assert_int_equal(gfcc_req_set_pages(&q, pages, 300, GFCC_PBLK_MAX), 256);
	assert_int_equal(q.npblk, 1);
	assert_true(gfcc_req_encode(&q, b, sizeof(b)) > 0);
	q.psize = 65536;
	assert_int_equal(gfcc_req_set_pages(&q, pages, 300, GFCC_PBLK_MAX), 16);
	q.psize = 1000;
	assert_int_equal(gfcc_req_set_pages(&q, pages, 300, GFCC_PBLK_MAX), -EINVAL);

	/* a full request (121 blocks) fits 2048 - 40, gfarm's buffer */
	q.psize = 4096;
	for (int i = 0; i < 300; i++)
		pages[i] = 2 * (uint64_t)i;
	assert_int_equal(gfcc_req_set_pages(&q, pages, 300, GFCC_PBLK_MAX), GFCC_PBLK_MAX);
	assert_int_equal(gfcc_req_encode(&q, b, sizeof(b)), 2048 - 40);
}

static void test_limits(void **s)
{
	assert_int_equal(gfcc_max_pages(4096), 256);
	assert_int_equal(gfcc_max_pages(512), 256);
	assert_int_equal(gfcc_max_pages(8192), 128);
	assert_int_equal(gfcc_max_pages(65536), 16);
	assert_int_equal(gfcc_max_pages(3000), 0);
	assert_false(gfcc_psize_ok(0));
	assert_false(gfcc_psize_ok(256));
	assert_true(gfcc_psize_ok(16384));
	assert_int_equal(gfcc_req_max_pblk(256, false), 11);
	assert_int_equal(gfcc_req_max_pblk(256, true), 10);
	assert_int_equal(gfcc_req_max_pblk(2008, false), 121);	/* gfarm's GFCC_PBLK_MAX */
	assert_int_equal(gfcc_req_max_pblk(4096, true), 121);
	assert_int_equal(gfcc_req_max_pblk(87, false), 0);
	assert_int_equal(gfcc_req_max_pblk(88, false), 1);
	assert_int_equal(GFCC_SEG_MAX, 4855);
	assert_true(gfcc_req_len(gfcc_req_max_pblk(256, true), true) <= 256);
}

static void test_res(void **s)
{
	static const uint8_t want[GFCC_RES_LEN] = {
		'g', 'f', 'c', 'c', '1', 0, 0, 0,
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
		0, 0, 0, 0,		/* err */
		3, 0, 0, 0,		/* npage */
		4, 0, 0, 0,		/* nseg */
		0, 0, 0, 0,		/* x86-64 tail padding */
	};
	struct gfcc_res r = { .id = 0x1122334455667788ull, .npage = 3, .nseg = 4 }, d;
	uint8_t b[GFCC_RES_LEN + 8] = { 0 }, t[sizeof(b)];

	assert_int_equal(gfcc_res_encode(&r, b), GFCC_RES_LEN);
	assert_memory_equal(b, want, sizeof(want));
	assert_int_equal(gfcc_res_decode(b, sizeof(b), &d), 0);	/* page bytes follow */
	assert_true(d.id == r.id && d.err == 0 && d.npage == 3 && d.nseg == 4);
	b[30] = 0x77;	/* gfarm leaves the padding as it finds it */
	assert_int_equal(gfcc_res_decode(b, GFCC_RES_LEN, &d), 0);
	assert_int_equal(gfcc_res_decode(b, GFCC_RES_LEN - 1, &d), -EMSGSIZE);
	memcpy(t, b, sizeof(b)); t[1] = 'x';
	assert_int_equal(gfcc_res_decode(t, sizeof(t), &d), -EPROTO);

	struct gfcc_res e = { .id = 1, .err = ESTALE, .nseg = 1 }, q;
	assert_int_equal(gfcc_res_encode(&e, b), GFCC_RES_LEN);
	assert_int_equal(gfcc_res_decode(b, GFCC_RES_LEN, &d), 0);
	assert_int_equal(d.err, ESTALE);
	q = e; q.npage = 1;		assert_int_equal(gfcc_res_encode(&q, b), -EINVAL);	/* error with pages */
	q = e; q.nseg = 2;		assert_int_equal(gfcc_res_encode(&q, b), -EINVAL);
	q = e; q.err = 4096;		assert_int_equal(gfcc_res_encode(&q, b), -EINVAL);
	q = e; q.err = (uint32_t)-5;	assert_int_equal(gfcc_res_encode(&q, b), -EINVAL);
	q = r; q.nseg = 0;		assert_int_equal(gfcc_res_encode(&q, b), -EINVAL);
	q = r; q.npage = 0; q.nseg = 2;	assert_int_equal(gfcc_res_encode(&q, b), -EINVAL);
	q = r; q.npage = 0; q.nseg = 1;	assert_int_equal(gfcc_res_encode(&q, b), GFCC_RES_LEN);	/* none cached */
	q = r; q.npage = 257;		assert_int_equal(gfcc_res_encode(&q, b), -E2BIG);
	q = r; q.nseg = GFCC_SEG_MAX + 1; assert_int_equal(gfcc_res_encode(&q, b), -E2BIG);
	q = r; q.nseg = (uint32_t)-1;	assert_int_equal(gfcc_res_encode(&q, b), -EINVAL);
	/* and the decoder, on patched bytes */
	memcpy(t, want, sizeof(want)); t[20] = 0; t[21] = 1;	/* npage 256 */
	assert_int_equal(gfcc_res_decode(t, GFCC_RES_LEN, &d), 0);
	t[20] = 1;						/* 257 */
	assert_int_equal(gfcc_res_decode(t, GFCC_RES_LEN, &d), -E2BIG);
	memcpy(t, want, sizeof(want)); t[16] = EIO;		/* error with pages */
	assert_int_equal(gfcc_res_decode(t, GFCC_RES_LEN, &d), -EINVAL);
	memcpy(t, want, sizeof(want)); t[24] = 0;		/* nseg 0 */
	assert_int_equal(gfcc_res_decode(t, GFCC_RES_LEN, &d), -EINVAL);
}

/* xprt's size in the response: byte 5 the flag, 6..7 and the pad the
 * size; without the flag nothing is told and those bytes mean nothing. */
static void test_res_size(void **s)
{
	static const uint8_t want[GFCC_RES_LEN] = {
		'g', 'f', 'c', 'c', '1', GFCC_RES_F_SIZE, 0x56, 0x34,	/* size bits 32..47 */
		2, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0,		/* err */
		3, 0, 0, 0,		/* npage */
		1, 0, 0, 0,		/* nseg */
		0x10, 0x27, 0x00, 0x12,	/* size bits 0..31 */
	};
	struct gfcc_res r = { .id = 2, .npage = 3, .nseg = 1, .has_size = true,
			      .size = 0x345612002710ull }, d, q;
	uint8_t b[GFCC_RES_LEN], t[GFCC_RES_LEN];

	assert_int_equal(gfcc_res_encode(&r, b), GFCC_RES_LEN);
	assert_memory_equal(b, want, sizeof(want));
	assert_int_equal(gfcc_res_decode(b, sizeof(b), &d), 0);
	assert_true(d.has_size && d.size == r.size && d.npage == 3);
	/* 0 bytes and the largest the field holds; an empty reply tells it too */
	q = r; q.size = 0; q.npage = 0;
	assert_int_equal(gfcc_res_encode(&q, b), GFCC_RES_LEN);
	assert_int_equal(gfcc_res_decode(b, sizeof(b), &d), 0);
	assert_true(d.has_size && d.size == 0);
	q = r; q.size = GFCC_RES_SIZE_MAX;
	assert_int_equal(gfcc_res_encode(&q, b), GFCC_RES_LEN);
	assert_int_equal(gfcc_res_decode(b, sizeof(b), &d), 0);
	assert_true(d.has_size && d.size == GFCC_RES_SIZE_MAX);
	q = r; q.size = GFCC_RES_SIZE_MAX + 1;	assert_int_equal(gfcc_res_encode(&q, b), -EINVAL);
	q = r; q.err = ESTALE; q.npage = 0;	assert_int_equal(gfcc_res_encode(&q, b), -EINVAL);
	/* an older responder's zeros, or anything but the flag: not told */
	memcpy(t, want, sizeof(want)); t[5] = 0;
	assert_int_equal(gfcc_res_decode(t, sizeof(t), &d), 0);
	assert_false(d.has_size);
	t[5] = 3;
	assert_int_equal(gfcc_res_decode(t, sizeof(t), &d), 0);
	assert_false(d.has_size);
	/* an error that claims a size is not a response we make sense of */
	memcpy(t, want, sizeof(want)); t[16] = ENOENT; t[20] = 0;
	assert_int_equal(gfcc_res_decode(t, sizeof(t), &d), -EINVAL);
}

static void test_dseg(void **s)
{
	static const uint8_t want[GFCC_DSEG_LEN] = {
		8, 7, 6, 5, 4, 3, 2, 1, 0x67, 0x45, 0x23, 0x01, 0x34, 0x12, 0x00, 0x01,
	};
	struct gfcc_dseg g = { .id = 0x0102030405060708ull, .qkey = 0x01234567, .seg = 0x1234,
			       .npage = 256 }, d, q;
	uint8_t b[GFCC_DSEG_LEN];

	assert_int_equal(gfcc_dseg_encode(&g, b), GFCC_DSEG_LEN);
	assert_memory_equal(b, want, sizeof(want));
	assert_int_equal(gfcc_dseg_decode(b, GFCC_DSEG_LEN, &d), 0);
	assert_memory_equal(&d, &g, sizeof(g));
	assert_int_equal(gfcc_dseg_decode(b, GFCC_DSEG_LEN - 1, &d), -EMSGSIZE);
	assert_int_equal(gfcc_dseg_decode(NULL, 100, &d), -EMSGSIZE);
	q = g; q.qkey = 0;		assert_int_equal(gfcc_dseg_encode(&q, b), -EINVAL);
	q = g; q.qkey = 0x80000000u;	assert_int_equal(gfcc_dseg_encode(&q, b), -EINVAL);
	q = g; q.npage = 257;		assert_int_equal(gfcc_dseg_encode(&q, b), -E2BIG);
	q = g; q.seg = GFCC_SEG_MAX;	assert_int_equal(gfcc_dseg_encode(&q, b), -ERANGE);
	q = g; q.seg = GFCC_SEG_MAX - 1; assert_int_equal(gfcc_dseg_encode(&q, b), GFCC_DSEG_LEN);
	memcpy(b, want, sizeof(b)); b[11] = 0x81;
	assert_int_equal(gfcc_dseg_decode(b, GFCC_DSEG_LEN, &d), -EINVAL);
}

static void test_xmsg(void **s)
{
	struct gfcc_xmsg m = { .id = 5, .qkey = 77, .allow = 0x10203, .type = GFCC_X_RESEND,
			       .base = 0x102, .nbits = 10 }, d, q;
	uint8_t b[GFCC_X_MAX], t[GFCC_X_MAX];
	static const uint8_t want[] = {
		'g', 'f', 'c', 'x', '1', 0, 0, 0,
		5, 0, 0, 0, 0, 0, 0, 0,		/* id */
		77, 0, 0, 0,			/* qkey */
		3, 2, 1, 0,			/* allow */
		GFCC_X_RESEND, 0,		/* type, flags */
		2, 1,				/* base 0x102 */
		10, 0,				/* nbits */
		0, 0,
		0x81, 0x02,			/* segments base+0, +7, +9 */
	};

	m.bitmap[0] = 0x81;
	m.bitmap[1] = 0x02;
	assert_int_equal(gfcc_xmsg_len(10), sizeof(want));
	assert_int_equal(gfcc_xmsg_encode(&m, b, sizeof(b)), sizeof(want));
	assert_memory_equal(b, want, sizeof(want));
	assert_int_equal(gfcc_kind(b, sizeof(want)), GFCC_KIND_X);
	assert_int_equal(gfcc_xmsg_decode(b, sizeof(want), &d), 0);
	assert_true(d.id == 5 && d.qkey == 77 && d.allow == 0x10203 && d.base == 0x102);
	assert_int_equal(d.nbits, 10);
	assert_true(gfcc_xmsg_bit(&d, 0) && gfcc_xmsg_bit(&d, 7) && gfcc_xmsg_bit(&d, 9));
	assert_false(gfcc_xmsg_bit(&d, 1) || gfcc_xmsg_bit(&d, 8));
	assert_int_equal(gfcc_xmsg_encode(&m, b, sizeof(want) - 1), -ENOSPC);

	/* decoder: every field */
#define BAD(i, v, e) do { memcpy(t, want, sizeof(want)); t[i] = (v); \
		assert_int_equal(gfcc_xmsg_decode(t, sizeof(want), &d), e); } while (0)
	BAD(0, 'G', -EPROTO);
	BAD(4, '2', -EPROTONOSUPPORT);
	BAD(6, 1, -EPROTO);
	BAD(19, 0x80, -EINVAL);		/* qkey high bit */
	BAD(24, 0, -EPROTO);		/* type */
	BAD(24, 4, -EPROTO);
	BAD(25, 1, -EPROTO);		/* flags */
	BAD(31, 1, -EPROTO);		/* reserved */
	BAD(33, 0x06, -EINVAL);		/* bits past nbits */
	BAD(28, 9, -EINVAL);		/* nbits 9: 2 bytes, but bit 9 is past it */
	BAD(28, 17, -EMSGSIZE);		/* ... 17 wants 3 */
	BAD(28, 0, -EMSGSIZE);
	BAD(27, 0x13, -ERANGE);		/* base 0x1302 + 10 > GFCC_SEG_MAX */
#undef BAD
	assert_int_equal(gfcc_xmsg_decode(want, sizeof(want) - 1, &d), -EMSGSIZE);
	assert_int_equal(gfcc_xmsg_decode(want, sizeof(want) + 1, &d), -EMSGSIZE);
	assert_int_equal(gfcc_xmsg_decode(want, GFCC_X_HDR - 1, &d), -EMSGSIZE);
	memcpy(t, want, sizeof(want)); t[32] = t[33] = 0;	/* nothing asked */
	assert_int_equal(gfcc_xmsg_decode(t, sizeof(want), &d), -EINVAL);
	memcpy(t, want, sizeof(want)); t[28] = 0xff; t[29] = 0xff;
	assert_int_equal(gfcc_xmsg_decode(t, sizeof(t), &d), -E2BIG);

	/* encoder: the same rules; credit and fin carry no bitmap */
	q = m; q.nbits = 0;		assert_int_equal(gfcc_xmsg_encode(&q, b, sizeof(b)), -EINVAL);
	q = m; q.nbits = GFCC_X_BITS_MAX + 1; assert_int_equal(gfcc_xmsg_encode(&q, b, sizeof(b)), -E2BIG);
	q = m; q.qkey = 0;		assert_int_equal(gfcc_xmsg_encode(&q, b, sizeof(b)), -EINVAL);
	q = m; q.type = 9;		assert_int_equal(gfcc_xmsg_encode(&q, b, sizeof(b)), -EPROTO);
	q = m; q.base = GFCC_SEG_MAX - 9; assert_int_equal(gfcc_xmsg_encode(&q, b, sizeof(b)), -ERANGE);
	q = m; q.base = GFCC_SEG_MAX - 10; assert_int_equal(gfcc_xmsg_encode(&q, b, sizeof(b)), (int)sizeof(want));
	struct gfcc_xmsg c = { .id = 5, .qkey = 77, .allow = 96, .type = GFCC_X_CREDIT };
	assert_int_equal(gfcc_xmsg_encode(&c, b, sizeof(b)), GFCC_X_HDR);
	assert_int_equal(gfcc_xmsg_decode(b, GFCC_X_HDR, &d), 0);
	assert_int_equal(d.type, GFCC_X_CREDIT);
	assert_int_equal(d.allow, 96);
	c.nbits = 1;			assert_int_equal(gfcc_xmsg_encode(&c, b, sizeof(b)), -EINVAL);
	c.nbits = 0; c.base = 1;	assert_int_equal(gfcc_xmsg_encode(&c, b, sizeof(b)), -EINVAL);
	c.base = 0; c.type = GFCC_X_FIN; assert_int_equal(gfcc_xmsg_encode(&c, b, sizeof(b)), GFCC_X_HDR);
	/* the largest bitmap fits the smallest MTU */
	memset(&q, 0, sizeof(q));
	q.id = 1; q.qkey = 1; q.type = GFCC_X_RESEND; q.nbits = GFCC_X_BITS_MAX;
	q.bitmap[GFCC_X_BITMAP_MAX - 1] = 0x80;
	assert_int_equal(gfcc_xmsg_encode(&q, b, sizeof(b)), GFCC_MTU_MIN);
	assert_int_equal(gfcc_xmsg_decode(b, GFCC_MTU_MIN, &d), 0);
	assert_true(gfcc_xmsg_bit(&d, GFCC_X_BITS_MAX - 1));
}

static void test_kind(void **s)
{
	assert_int_equal(gfcc_kind("gfcc1\0\0\0", 8), GFCC_KIND_REQ);
	assert_int_equal(gfcc_kind("gfcx1\0\0\0", 8), GFCC_KIND_X);
	assert_int_equal(gfcc_kind("gfcx1\0\0", 7), GFCC_KIND_NONE);
	assert_int_equal(gfcc_kind("GFCCrpc", 8), GFCC_KIND_NONE);
	assert_int_equal(gfcc_kind(NULL, 8), GFCC_KIND_NONE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_req_bytes),
		cmocka_unit_test(test_req_ext),
		cmocka_unit_test(test_req_rejects),
		cmocka_unit_test(test_req_pages),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_res),
		cmocka_unit_test(test_res_size),
		cmocka_unit_test(test_dseg),
		cmocka_unit_test(test_xmsg),
		cmocka_unit_test(test_kind),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
