/* RTRS 2.0 codec: the exact bytes of real kernel traffic (linux
 * rtrs-client <-> rtrs-server over Soft-RoCE, queue depth 512, 128 KiB
 * chunks; the vectors below are copied from packet captures), and every
 * rule the decoders check. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rtrs/rtrs_wire.h"
#include "unhex.h"

#define QD	512u
#define CHUNK	(128u << 10)

static const struct rtrs_geom geom = { QD, CHUNK, RTRS_MAX_HDR_SIZE };


/* --- connection establishment (rdma_cm private data) ------------------- */

/* rnbd-wire-invN.pcap, CM REQ for cid 0 of 3: the 56 bytes after rdma_cm's
 * 36-byte header */
static const char conn_req_hex[] =
	"0000 bd1b 0002 0000 0300 0100"
	"a9fcb1ebe02546ddacc830a72b599b8c f65cb8d8d0f5478f99ee5cc094520731"
	"01 0000000000000000000000";
static const uint8_t sess_uuid[16] = { 0xa9, 0xfc, 0xb1, 0xeb, 0xe0, 0x25, 0x46, 0xdd,
				       0xac, 0xc8, 0x30, 0xa7, 0x2b, 0x59, 0x9b, 0x8c };
static const uint8_t paths_uuid[16] = { 0xf6, 0x5c, 0xb8, 0xd8, 0xd0, 0xf5, 0x47, 0x8f,
					0x99, 0xee, 0x5c, 0xc0, 0x94, 0x52, 0x07, 0x31 };

static void test_conn_req_bytes(void **s)
{
	uint8_t want[RTRS_CONN_REQ_LEN], out[RTRS_CONN_REQ_LEN];
	struct rtrs_conn_req m = { .cid = 0, .cid_num = 3, .recon_cnt = 1, .first_conn = true }, d;

	assert_int_equal(unhex(conn_req_hex, want), RTRS_CONN_REQ_LEN);
	memcpy(m.sess_uuid, sess_uuid, 16);
	memcpy(m.paths_uuid, paths_uuid, 16);
	rtrs_conn_req_encode(&m, out);
	assert_memory_equal(out, want, RTRS_CONN_REQ_LEN);

	assert_int_equal(rtrs_conn_req_decode(want, sizeof(want), &d), 0);
	assert_int_equal(d.version, RTRS_PROTO_VER);
	assert_int_equal(d.cid, 0);
	assert_int_equal(d.cid_num, 3);
	assert_int_equal(d.recon_cnt, 1);
	assert_true(d.first_conn);
	assert_memory_equal(d.sess_uuid, sess_uuid, 16);
	assert_memory_equal(d.paths_uuid, paths_uuid, 16);

	/* cid 2 of 3, same path */
	want[6] = 2;
	assert_int_equal(rtrs_conn_req_decode(want, sizeof(want), &d), 0);
	assert_int_equal(d.cid, 2);
}

static int conn_req_dec(uint16_t cid, uint16_t cid_num)
{
	uint8_t b[RTRS_CONN_REQ_LEN];
	struct rtrs_conn_req m = { .cid = cid, .cid_num = cid_num }, d;

	rtrs_conn_req_encode(&m, b);
	return rtrs_conn_req_decode(b, sizeof(b), &d);
}

static void test_conn_req_rejects(void **s)
{
	uint8_t b[RTRS_CONN_REQ_LEN + 8] = { 0 };
	struct rtrs_conn_req d;

	unhex(conn_req_hex, b);
	assert_int_equal(rtrs_conn_req_decode(b, RTRS_CONN_REQ_LEN - 1, &d), -EMSGSIZE);
	assert_int_equal(rtrs_conn_req_decode(NULL, 100, &d), -EMSGSIZE);
	assert_int_equal(rtrs_conn_req_decode(b, RTRS_CONN_REQ_LEN + 8, &d), 0); /* longer is fine */
	b[2] ^= 1;
	assert_int_equal(rtrs_conn_req_decode(b, RTRS_CONN_REQ_LEN, &d), -EPROTO);
	b[2] ^= 1;
	b[5] = 3;	/* version 3.0 */
	assert_int_equal(rtrs_conn_req_decode(b, RTRS_CONN_REQ_LEN, &d), -EPROTONOSUPPORT);
	b[5] = 1;
	assert_int_equal(rtrs_conn_req_decode(b, RTRS_CONN_REQ_LEN, &d), -EPROTONOSUPPORT);
	b[5] = 2;
	b[4] = 7;	/* 2.7: only the major has to match */
	assert_int_equal(rtrs_conn_req_decode(b, RTRS_CONN_REQ_LEN, &d), 0);
	assert_int_equal(d.version, 0x0207);

	assert_int_equal(conn_req_dec(0, 1), 0);
	assert_int_equal(conn_req_dec(4095, 4096), 0);
	assert_int_equal(conn_req_dec(0, 4097), -EINVAL);	/* cid_num > 4096 */
	assert_int_equal(conn_req_dec(3, 3), -EINVAL);		/* cid >= cid_num */
	assert_int_equal(conn_req_dec(0, 0), -EINVAL);
}

static void test_conn_rsp_bytes(void **s)
{
	/* both captures: qd 512, max_io 126976, max_hdr 4096; always_invalidate
	 * N has flags 0, Y has RTRS_MSG_NEW_RKEY_F */
	static const char hex_n[] = "bd1b 0002 0000 0002 00f00100 00100000 00000000";
	uint8_t want[RTRS_CONN_RSP_LEN] = { 0 }, out[RTRS_CONN_RSP_LEN];
	struct rtrs_conn_rsp m = { .queue_depth = 512, .max_io_size = 126976,
				   .max_hdr_size = 4096 }, d;
	struct rtrs_geom g;

	unhex(hex_n, want);
	rtrs_conn_rsp_encode(&m, out);
	assert_memory_equal(out, want, RTRS_CONN_RSP_LEN);
	want[16] = 2;
	m.flags = RTRS_MSG_NEW_RKEY_F;
	rtrs_conn_rsp_encode(&m, out);
	assert_memory_equal(out, want, RTRS_CONN_RSP_LEN);

	assert_int_equal(rtrs_conn_rsp_decode(want, sizeof(want), &d), 0);
	assert_int_equal(d.err, 0);
	assert_int_equal(d.queue_depth, 512);
	assert_int_equal(d.max_io_size, RTRS_DEFAULT_MAX_IO_SIZE);
	assert_int_equal(d.max_hdr_size, RTRS_MAX_HDR_SIZE);
	assert_int_equal(d.flags, RTRS_MSG_NEW_RKEY_F);
	rtrs_geom_from_conn_rsp(&d, &g);
	assert_int_equal(g.queue_depth, QD);
	assert_int_equal(g.chunk_size, CHUNK);
	assert_int_equal(rtrs_check_geometry(g.queue_depth, g.chunk_size), 0);

	/* a reject: rtrs_rdma_do_reject(cm_id, -ECONNRESET) */
	struct rtrs_conn_rsp rej = { .err = -ECONNRESET };

	rtrs_conn_rsp_encode(&rej, out);
	assert_int_equal(out[4], 0x98);	/* -104 as le16 */
	assert_int_equal(out[5], 0xff);
	assert_int_equal(rtrs_conn_rsp_decode(out, sizeof(out), &d), 0);
	assert_int_equal(d.err, -ECONNRESET);

	assert_int_equal(rtrs_conn_rsp_decode(out, RTRS_CONN_RSP_LEN - 1, &d), -EMSGSIZE);
	out[0] = 0;
	assert_int_equal(rtrs_conn_rsp_decode(out, RTRS_CONN_RSP_LEN, &d), -EPROTO);
	out[0] = 0xbd;
	out[3] = 1;
	assert_int_equal(rtrs_conn_rsp_decode(out, RTRS_CONN_RSP_LEN, &d), -EPROTONOSUPPORT);
}

/* --- info_req / info_rsp ------------------------------------------------- */
static void test_info_req(void **s)
{
	uint8_t want[RTRS_INFO_REQ_LEN] = { 0x00, 0x00, 'w', '1' }, out[RTRS_INFO_REQ_LEN];
	struct rtrs_info_req m = { .pathname = "w1" }, d;

	assert_int_equal(rtrs_info_req_encode(&m, out), 0);
	assert_memory_equal(out, want, RTRS_INFO_REQ_LEN);
	assert_int_equal(rtrs_info_req_decode(want, sizeof(want), &d), 0);
	assert_string_equal(d.pathname, "w1");

	assert_int_equal(rtrs_info_req_decode(want, RTRS_INFO_REQ_LEN - 1, &d), -EMSGSIZE);
	out[0] = RTRS_MSG_INFO_RSP;
	assert_int_equal(rtrs_info_req_decode(out, sizeof(out), &d), -EPROTO);

	/* pathname rules: no '/' nor '.', not empty, terminated in 255 bytes */
	memcpy(out, want, sizeof(out));
	out[3] = '.';
	assert_int_equal(rtrs_info_req_decode(out, sizeof(out), &d), -EINVAL);
	out[3] = '/';
	assert_int_equal(rtrs_info_req_decode(out, sizeof(out), &d), -EINVAL);
	out[2] = out[3] = 0;
	assert_int_equal(rtrs_info_req_decode(out, sizeof(out), &d), -EINVAL);
	memset(out + 2, 'a', RTRS_NAME_MAX);
	assert_int_equal(rtrs_info_req_decode(out, sizeof(out), &d), -EINVAL);
	out[2 + 254] = 0;	/* 254 characters: the longest */
	assert_int_equal(rtrs_info_req_decode(out, sizeof(out), &d), 0);
	assert_int_equal(strlen(d.pathname), 254);

	assert_int_equal(rtrs_check_pathname("host-1_a"), 0);
	assert_int_equal(rtrs_check_pathname("a.b"), -EINVAL);
	assert_int_equal(rtrs_check_pathname(""), -EINVAL);
	strcpy(m.pathname, "../x");
	assert_int_equal(rtrs_info_req_encode(&m, out), -EINVAL);
}

static void test_info_rsp_one_mr(void **s)
{
	/* always_invalidate=N: one MR over all 512 chunks (64 MiB) */
	static const char hex[] = "0100 0100 00000000 0000700780 88ffff 83030000 00000004";
	uint8_t want[24], out[64];
	struct rtrs_sg_desc d = { 0xffff888007700000ull, 0x383, 67108864 };
	struct rtrs_rbuf *rb = calloc(QD, sizeof(*rb));
	struct rtrs_req_layout l;
	uint16_t n = 0;

	assert_int_equal(unhex(hex, want), 24);
	assert_int_equal(rtrs_info_rsp_encode(out, sizeof(out), &d, 1), 24);
	assert_memory_equal(out, want, 24);
	assert_int_equal(rtrs_info_rsp_decode(want, 24, QD, CHUNK, &n, rb), 0);
	assert_int_equal(n, 1);
	assert_true(rtrs_info_rsp_desc(want, 0).addr == d.addr);
	assert_int_equal(rb[0].rkey, 0x383);
	assert_true(rb[1].addr == 0xffff888007720000ull);
	assert_true(rb[511].addr == 0xffff888007700000ull + 511ull * CHUNK);
	/* "WRITE_ONLY_IMM va=0xffff888007721000 rkey=0x383 len=56 imm=0x00081020":
	 * a 4 KiB read into buffer 1 */
	assert_int_equal(rtrs_read_layout(&geom, 1, 4096, 32, 1, &l), 0);
	assert_true(rb[1].addr + l.wr_off == 0xffff888007721000ull);
	assert_int_equal(l.wr_len, 56);
	assert_int_equal(l.imm, 0x00081020);
	/* "va=0xffff888007808000 ... imm=0x00408020": 32 KiB into buffer 8 */
	assert_int_equal(rtrs_read_layout(&geom, 8, 32768, 32, 1, &l), 0);
	assert_true(rb[8].addr + l.wr_off == 0xffff888007808000ull);
	assert_int_equal(l.imm, 0x00408020);
	free(rb);
	assert_int_equal(rtrs_info_rsp_encode(out, 23, &d, 1), -EMSGSIZE);
}

static void test_info_rsp_per_chunk(void **s)
{
	/* always_invalidate=Y: one MR per chunk, sg_cnt 512 (8200 bytes in
	 * eight SENDs); its first two descriptors as captured */
	static const char hex[] = "0100 0002 00000000"
		"000078078088ffff db030000 00000200"
		"00007a078088ffff e2040000 00000200";
	uint8_t want[40];
	size_t len = RTRS_INFO_RSP_HDR_LEN + QD * RTRS_SG_DESC_LEN;
	uint8_t *msg = malloc(len);
	struct rtrs_sg_desc *d = calloc(QD, sizeof(*d));
	struct rtrs_rbuf *rb = calloc(QD, sizeof(*rb));
	uint16_t n;

	unhex(hex, want);
	for (unsigned i = 0; i < QD; i++)
		d[i] = (struct rtrs_sg_desc){ 0xffff888007780000ull + i * (uint64_t)CHUNK,
					      0x3db + i * 0x107, CHUNK };
	d[1].key = 0x4e2;
	assert_int_equal(rtrs_info_rsp_encode(msg, len, d, QD), (int)len);
	assert_memory_equal(msg, want, sizeof(want));
	assert_int_equal(rtrs_info_rsp_decode(msg, len, QD, CHUNK, &n, rb), 0);
	assert_int_equal(n, QD);
	/* "va=0xffff8880077a1000 rkey=0x4e2 len=56 imm=0x00081020" */
	assert_true(rb[1].addr + 0x1000 == 0xffff8880077a1000ull);
	assert_int_equal(rb[1].rkey, 0x4e2);
	/* the first SEND alone is not the whole message */
	assert_int_equal(rtrs_info_rsp_decode(msg, 1024, QD, CHUNK, &n, NULL), -EMSGSIZE);
	free(msg);
	free(d);
	free(rb);
}

static int info_rsp_dec(const struct rtrs_sg_desc *d, uint16_t cnt, uint32_t qd, uint32_t chunk)
{
	uint8_t b[RTRS_INFO_RSP_HDR_LEN + 8 * RTRS_SG_DESC_LEN];
	uint16_t n;
	int len = rtrs_info_rsp_encode(b, sizeof(b), d, cnt);

	assert_true(len > 0);
	return rtrs_info_rsp_decode(b, (size_t)len, qd, chunk, &n, NULL);
}

static void test_info_rsp_rejects(void **s)
{
	struct rtrs_sg_desc d[4] = {
		{ 0x1000, 1, 128 * CHUNK }, { 0x2000, 2, 128 * CHUNK },
		{ 0x3000, 3, 128 * CHUNK }, { 0x4000, 4, 128 * CHUNK },
	};
	uint8_t b[16] = { 1, 0, 0, 0 };
	uint16_t n;

	assert_int_equal(info_rsp_dec(d, 4, QD, CHUNK), 0);
	assert_int_equal(info_rsp_dec(d, 0, QD, CHUNK), -EINVAL);	/* sg_cnt 0 */
	assert_int_equal(info_rsp_dec(d, 3, QD, CHUNK), -EINVAL);	/* 512 % 3 */
	assert_int_equal(info_rsp_dec(d, 4, QD, 0), -EINVAL);
	assert_int_equal(info_rsp_dec(d, 2, QD, CHUNK), -EINVAL);	/* 256 of 512 chunks */
	d[2].len = 0;
	assert_int_equal(info_rsp_dec(d, 4, QD, CHUNK), -EINVAL);
	d[2].len = 128 * CHUNK + 1;					/* not whole chunks */
	assert_int_equal(info_rsp_dec(d, 4, QD, CHUNK), -EINVAL);
	d[2].len = 127 * CHUNK;						/* uneven but whole */
	d[3].len = 129 * CHUNK;
	assert_int_equal(info_rsp_dec(d, 4, QD, CHUNK), 0);
	d[3].len = 130 * CHUNK;						/* one chunk too many */
	assert_int_equal(info_rsp_dec(d, 4, QD, CHUNK), -EINVAL);
	/* the immediate check, with sg_cnt: 2 + 27 bits > 28 */
	d[0].len = d[1].len = d[2].len = d[3].len = 1u << 27;
	assert_int_equal(info_rsp_dec(d, 4, 4, 1u << 27), -EINVAL);
	assert_int_equal(info_rsp_dec(d, 2, 2, 1u << 27), 0);
	/* lengths and type */
	assert_int_equal(rtrs_info_rsp_decode(b, 7, QD, CHUNK, &n, NULL), -EMSGSIZE);
	b[2] = 1;	/* sg_cnt 1, no descriptor */
	assert_int_equal(rtrs_info_rsp_decode(b, 8, QD, CHUNK, &n, NULL), -EMSGSIZE);
	b[0] = 0;
	assert_int_equal(rtrs_info_rsp_decode(b, 16, QD, CHUNK, &n, NULL), -EPROTO);
}

/* --- IO requests ------------------------------------------------------------ */
static void test_imm_traffic(void **s)
{
	uint32_t buf, off, id;
	int err;

	/* the decoded traffic's immediates, qd 512 / 128 KiB: chunk_bits 9 */
	assert_int_equal(rtrs_chunk_bits(QD), 9);
	assert_int_equal(rtrs_mem_bits(QD), 19);
	static const struct { uint32_t imm, buf, off; } req[] = {
		{ 0x00000048, 0, 0x48 },	/* SESS_INFO read: 36 + 36 */
		{ 0x00000140, 0, 0x140 },	/* OPEN read: 56 + 264 */
		{ 0x00081020, 1, 0x1020 },	/* 4 KiB read, buffer 1 */
		{ 0x0001f020, 0, 0x1f020 },	/* 124 KiB write: max_io + 32 */
		{ 0x0039f020, 7, 0x1f020 },
		{ 0x00408020, 8, 0x8020 },
		{ 0x00000008, 0, 8 },		/* CLOSE */
	};
	for (unsigned i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
		assert_int_equal(rtrs_imm_type(req[i].imm), RTRS_IO_REQ_IMM);
		assert_int_equal(rtrs_io_req_payload_decode(rtrs_imm_payload(req[i].imm), QD,
							    CHUNK, &buf, &off), 0);
		assert_int_equal(buf, req[i].buf);
		assert_int_equal(off, req[i].off);
		assert_int_equal(rtrs_imm_make(RTRS_IO_REQ_IMM,
					       rtrs_io_req_payload(QD, buf, off)), req[i].imm);
	}
	/* responses: 0x10000000 IO_RSP msg 0; 0x20000001 IO_RSP_W_INV msg 1 */
	assert_int_equal(rtrs_imm_type(0x10000000), RTRS_IO_RSP_IMM);
	rtrs_io_rsp_payload_decode(rtrs_imm_payload(0x10000000), &id, &err);
	assert_int_equal(id, 0);
	assert_int_equal(err, 0);
	assert_int_equal(rtrs_imm_type(0x20000001), RTRS_IO_RSP_W_INV_IMM);
	rtrs_io_rsp_payload_decode(rtrs_imm_payload(0x20000001), &id, &err);
	assert_int_equal(id, 1);
	assert_int_equal(rtrs_imm_io_rsp(0, 0, false), 0x10000000);
	assert_int_equal(rtrs_imm_io_rsp(1, 0, true), 0x20000001);
	assert_int_equal(rtrs_imm_io_rsp(8, 0, false), 0x10000008);
	/* heartbeats */
	assert_int_equal(rtrs_imm_make(RTRS_HB_MSG_IMM, 0), RTRS_IMM_HB_MSG);
	assert_int_equal(rtrs_imm_make(RTRS_HB_ACK_IMM, 0), RTRS_IMM_HB_ACK);
	assert_int_equal(rtrs_imm_type(0x90000000), RTRS_HB_ACK_IMM);
	/* on the wire the immediate is big-endian: 00 08 10 20 */
	uint32_t w = rtrs_imm_to_wire(0x00081020);
	const uint8_t *wb = (const uint8_t *)&w;

	assert_int_equal(wb[0], 0x00);
	assert_int_equal(wb[1], 0x08);
	assert_int_equal(wb[3], 0x20);
	assert_int_equal(rtrs_imm_from_wire(w), 0x00081020);
}

static void test_imm_rules(void **s)
{
	uint32_t buf, off, id;
	int err;

	/* errno: 9 bits at 19, negative on decode */
	assert_int_equal(rtrs_io_rsp_payload(5, -EIO), (5u << 19) | 5);
	rtrs_io_rsp_payload_decode(rtrs_io_rsp_payload(0x7ffff, -ENOSPC), &id, &err);
	assert_int_equal(id, 0x7ffff);
	assert_int_equal(err, -ENOSPC);
	rtrs_io_rsp_payload_decode(rtrs_io_rsp_payload(3, -524), &id, &err);
	assert_int_equal(err, -12);	/* ENOTSUPP truncated to 9 bits, as the kernel */
	/* server rejects: buffer id beyond the queue, offset beyond the chunk */
	assert_int_equal(rtrs_io_req_payload_decode(500u << 19, 500, CHUNK, &buf, &off), -EINVAL);
	assert_int_equal(rtrs_io_req_payload_decode(499u << 19, 500, CHUNK, &buf, &off), 0);
	assert_int_equal(rtrs_io_req_payload_decode(CHUNK, QD, CHUNK, &buf, &off), -EINVAL);
	assert_int_equal(rtrs_io_req_payload_decode(CHUNK - 1, QD, CHUNK, &buf, &off), 0);
	assert_int_equal(rtrs_io_req_payload_decode((511u << 19) | 5, QD, CHUNK, &buf, &off), 0);
	assert_int_equal(buf, 511);
	/* depth 1: no buffer bits, the whole payload is the offset */
	assert_int_equal(rtrs_chunk_bits(1), 0);
	assert_int_equal(rtrs_io_req_payload_decode(0x123, 1, CHUNK, &buf, &off), 0);
	assert_int_equal(off, 0x123);
	assert_int_equal(rtrs_chunk_bits(2), 1);
	assert_int_equal(rtrs_chunk_bits(513), 10);
	assert_int_equal(rtrs_chunk_bits(65535), 16);
}

static void test_geometry(void **s)
{
	assert_int_equal(rtrs_check_geometry(RTRS_DEFAULT_QUEUE_DEPTH, RTRS_DEFAULT_CHUNK_SIZE), 0);
	assert_int_equal(rtrs_check_geometry(0, CHUNK), -EINVAL);
	assert_int_equal(rtrs_check_geometry(65536, 8192), -EINVAL);
	assert_int_equal(rtrs_check_geometry(65535, 8192), -EINVAL);	/* 16 + 13 bits */
	assert_int_equal(rtrs_check_geometry(32768, 8192), 0);		/* 15 + 13 */
	assert_int_equal(rtrs_check_geometry(QD, 4096), -EINVAL);	/* < MIN_CHUNK_SIZE */
	assert_int_equal(rtrs_check_geometry(QD, 3u << 16), -EINVAL);	/* not a power of 2 */
	assert_int_equal(rtrs_check_geometry(QD, 1u << 19), 0);		/* 9 + 19 = 28 */
	assert_int_equal(rtrs_check_geometry(QD, 1u << 20), -EINVAL);
	assert_int_equal(rtrs_check_geometry(1, 1u << 28), 0);
	assert_int_equal(rtrs_check_geometry(2, 1u << 28), -EINVAL);
	assert_int_equal(RTRS_DEFAULT_MAX_IO_SIZE, 126976);
}

static void test_layout(void **s)
{
	struct rtrs_req_layout l;

	/* SESS_INFO read: "va=...0024 len=60 imm=0x00000048" */
	assert_int_equal(rtrs_read_layout(&geom, 0, 36, 36, 1, &l), 0);
	assert_int_equal(l.wr_off, 0x24);
	assert_int_equal(l.wr_len, 60);
	assert_int_equal(l.msg_off, 0x48);
	assert_int_equal(l.imm, 0x48);
	/* OPEN read: "va=...0038 len=288 imm=0x00000140" */
	assert_int_equal(rtrs_read_layout(&geom, 0, 56, 264, 1, &l), 0);
	assert_int_equal(l.wr_off, 0x38);
	assert_int_equal(l.wr_len, 288);
	assert_int_equal(l.imm, 0x140);
	/* 124 KiB read into buffer 0: "va=0xffff88800771f000 ... imm=0x0001f020" */
	assert_int_equal(rtrs_read_layout(&geom, 0, 126976, 32, 1, &l), 0);
	assert_int_equal(l.wr_off, 0x1f000);
	assert_int_equal(l.imm, 0x1f020);
	/* 4 KiB write into buffer 0: one write from 0 of 4096 + 32 + 4 bytes,
	 * "WRITE_LAST_IMM imm=0x00001020 payload=36B" */
	assert_int_equal(rtrs_write_layout(&geom, 0, 4096, 32, &l), 0);
	assert_int_equal(l.wr_off, 0);
	assert_int_equal(l.wr_len, 4132);
	assert_int_equal(l.imm, 0x1020);
	/* CLOSE: "va=...0000 len=12 imm=0x00000008" */
	assert_int_equal(rtrs_write_layout(&geom, 0, 0, 8, &l), 0);
	assert_int_equal(l.wr_len, 12);
	assert_int_equal(l.imm, 8);
	/* the largest write: max_io_size of data */
	assert_int_equal(rtrs_write_layout(&geom, 3, 126976, 32, &l), 0);
	assert_int_equal(l.imm, 0x0019f020);

	/* refusals */
	assert_int_equal(rtrs_write_layout(&geom, QD, 0, 8, &l), -EINVAL);
	assert_int_equal(rtrs_read_layout(&geom, 0, 0, 8, 2, &l), -EINVAL);
	assert_int_equal(rtrs_write_layout(&geom, 0, CHUNK - 35, 32, &l), -EMSGSIZE);
	assert_int_equal(rtrs_write_layout(&geom, 0, CHUNK - 36, 32, &l), 0);
	assert_int_equal(rtrs_read_layout(&geom, 0, CHUNK - 32 - 24 + 1, 32, 1, &l), -EMSGSIZE);
	assert_int_equal(rtrs_write_layout(&geom, 0, 0, 4093, &l), -EMSGSIZE);	/* > max_hdr */
	assert_int_equal(rtrs_write_layout(&geom, 0, 0, 4092, &l), 0);
	struct rtrs_geom big = { QD, 1u << 20, 0 };	/* chunk the immediate can't span */
	assert_int_equal(rtrs_write_layout(&big, 0, 1u << 19, 8, &l), -EMSGSIZE);
	assert_int_equal(rtrs_write_layout(&big, 0, 70000, 70000, &l), -EMSGSIZE); /* usr > u16 */
}

/* --- the server's parse, on the captured requests placed in a chunk ------ */
static const char sess_info_read_hex[] =	/* 60 bytes at offset 0x24 */
	"00000000 02 00000000000000000000000000000000000000000000000000000000000000"
	"0300 2400 0100 0100 00d93a0c8088ffff e6030000 24000000";
static const char io_read_hex[] =		/* 56 bytes at 0x1000 of buffer 1 */
	"04000000 00000000 0000000000000000 00010000 00100000 0440 000000000000"
	"0300 2000 0100 0100 00a0da0c8088ffff d4040000 00100000";
static const char io_write_tail_hex[] =		/* the last 36 bytes, at 0x1000 */
	"04000000 00000000 0800000000000000 01010000 00100000 0440 000000000000"
	"0200 2000";

static void test_read_msg_bytes(void **s)
{
	uint8_t want[60], out[24];
	struct rtrs_rdma_read m = { .usr_len = 36, .flags = RTRS_MSG_NEED_INVAL_F, .sg_cnt = 1,
				    .desc = { 0xffff88800c3ad900ull, 0x3e6, 36 } }, d;

	assert_int_equal(unhex(sess_info_read_hex, want), 60);
	assert_int_equal(rtrs_rdma_read_encode(&m, out, sizeof(out)), 24);
	assert_memory_equal(out, want + 36, 24);
	assert_int_equal(rtrs_rdma_read_decode(want + 36, 24, &d), 0);
	assert_int_equal(d.usr_len, 36);
	assert_int_equal(d.flags, RTRS_MSG_NEED_INVAL_F);
	assert_int_equal(d.sg_cnt, 1);
	assert_true(d.desc.addr == m.desc.addr);
	assert_int_equal(d.desc.key, 0x3e6);
	assert_int_equal(d.desc.len, 36);

	assert_int_equal(rtrs_rdma_read_decode(want + 36, 23, &d), -EMSGSIZE);
	assert_int_equal(rtrs_rdma_read_decode(want + 36, 7, &d), -EMSGSIZE);
	assert_int_equal(rtrs_rdma_read_encode(&m, out, 23), -EMSGSIZE);
	m.sg_cnt = 2;
	assert_int_equal(rtrs_rdma_read_encode(&m, out, sizeof(out)), -EINVAL);
	out[6] = 2;	/* sg_cnt 2: process_read refuses */
	assert_int_equal(rtrs_rdma_read_decode(out, sizeof(out), &d), -EINVAL);
	out[6] = 1;
	memset(out + 20, 0, 4);	/* desc len 0: rdma_write_sg refuses */
	assert_int_equal(rtrs_rdma_read_decode(out, sizeof(out), &d), -EINVAL);
	out[6] = 0;	/* no descriptor: a read with nothing to send back */
	assert_int_equal(rtrs_rdma_read_decode(out, 8, &d), 0);
	assert_int_equal(d.sg_cnt, 0);
	out[0] = RTRS_MSG_WRITE;
	assert_int_equal(rtrs_rdma_read_decode(out, 8, &d), -EPROTO);

	/* write message and rkey_rsp */
	struct rtrs_rdma_write w = { 32 }, wd;
	uint8_t wb[4];

	rtrs_rdma_write_encode(&w, wb);
	assert_memory_equal(wb, "\x02\x00\x20\x00", 4);
	assert_int_equal(rtrs_rdma_write_decode(wb, 4, &wd), 0);
	assert_int_equal(wd.usr_len, 32);
	assert_int_equal(rtrs_rdma_write_decode(wb, 3, &wd), -EMSGSIZE);
	assert_int_equal(rtrs_rdma_write_decode(want + 36, 4, &wd), -EPROTO);

	/* always_invalidate=Y: "RKEY_RSP buf_id=1 rkey=0x4e3" */
	struct rtrs_rkey_rsp k = { 1, 0x4e3 }, kd;
	uint8_t kb[8], kwant[8];

	unhex("0400 0100 e3040000", kwant);
	rtrs_rkey_rsp_encode(&k, kb);
	assert_memory_equal(kb, kwant, 8);
	assert_int_equal(rtrs_rkey_rsp_decode(kwant, 8, QD, &kd), 0);
	assert_int_equal(kd.buf_id, 1);
	assert_int_equal(kd.rkey, 0x4e3);
	assert_int_equal(rtrs_rkey_rsp_decode(kwant, 7, QD, &kd), -EMSGSIZE);
	assert_int_equal(rtrs_rkey_rsp_decode(kwant, 8, 1, &kd), -EINVAL);	/* buf_id >= qd */
	kwant[0] = 3;
	assert_int_equal(rtrs_rkey_rsp_decode(kwant, 8, QD, &kd), -EPROTO);
}

static void test_srv_parse(void **s)
{
	uint8_t *chunk = calloc(1, CHUNK);
	uint8_t usr[60];
	struct rtrs_srv_req r;
	uint32_t buf, off;

	/* SESS_INFO read as sent: message at 0x48, user header before it */
	unhex(sess_info_read_hex, chunk + 0x24);
	unhex(sess_info_read_hex, usr);
	assert_int_equal(rtrs_io_req_payload_decode(0x48, QD, CHUNK, &buf, &off), 0);
	assert_int_equal(rtrs_srv_parse_req(chunk, CHUNK, off, &r), 0);
	assert_int_equal(r.type, RTRS_MSG_READ);
	assert_int_equal(r.data_len, 36);
	assert_int_equal(r.usr_len, 36);
	assert_ptr_equal(r.usr, chunk + 36);
	assert_memory_equal(r.usr, usr, 36);
	assert_int_equal(r.rd.sg_cnt, 1);
	assert_true(r.rd.desc.addr == 0xffff88800c3ad900ull);
	assert_int_equal(r.rd.desc.key, 0x3e6);
	assert_int_equal(r.rd.desc.len, 36);
	/* the same, when only the written bytes are known (a byte stream) */
	assert_int_equal(rtrs_srv_parse_req(chunk, 0x24 + 60, off, &r), 0);
	assert_int_equal(rtrs_srv_parse_req(chunk, 0x24 + 59, off, &r), -EMSGSIZE);

	/* 4 KiB read into buffer 1 (imm 0x00081020) */
	memset(chunk, 0, CHUNK);
	unhex(io_read_hex, chunk + 0x1000);
	assert_int_equal(rtrs_io_req_payload_decode(0x81020, QD, CHUNK, &buf, &off), 0);
	assert_int_equal(buf, 1);
	assert_int_equal(rtrs_srv_parse_req(chunk, CHUNK, off, &r), 0);
	assert_int_equal(r.type, RTRS_MSG_READ);
	assert_int_equal(r.data_len, 4096);
	assert_int_equal(r.usr_len, 32);
	assert_int_equal(r.rd.desc.len, 4096);
	assert_int_equal(r.rd.flags, RTRS_MSG_NEED_INVAL_F);

	/* 4 KiB write (imm 0x00001020) */
	memset(chunk, 0, CHUNK);
	unhex(io_write_tail_hex, chunk + 0x1000);
	assert_int_equal(rtrs_srv_parse_req(chunk, CHUNK, 0x1020, &r), 0);
	assert_int_equal(r.type, RTRS_MSG_WRITE);
	assert_ptr_equal(r.data, chunk);
	assert_int_equal(r.data_len, 4096);
	assert_int_equal(r.usr_len, 32);
	assert_int_equal(r.usr[0], 4);	/* RNBD_MSG_IO */

	/* refusals */
	assert_int_equal(rtrs_srv_parse_req(chunk, CHUNK, CHUNK, &r), -EMSGSIZE);
	assert_int_equal(rtrs_srv_parse_req(chunk, CHUNK, CHUNK - 1, &r), -EMSGSIZE);
	assert_int_equal(rtrs_srv_parse_req(chunk, 0x1023, 0x1020, &r), -EMSGSIZE);
	assert_int_equal(rtrs_srv_parse_req(chunk, CHUNK, 0x1020 - 32 + 31, &r), -EPROTO);
	chunk[0x1020] = 9;	/* unknown type */
	assert_int_equal(rtrs_srv_parse_req(chunk, CHUNK, 0x1020, &r), -EPROTO);
	chunk[0x1020] = RTRS_MSG_WRITE;
	assert_int_equal(rtrs_srv_parse_req(chunk, CHUNK, 31, &r), -EPROTO);
	memcpy(chunk + 16, "\x02\x00\x20\x00", 4);	/* usr_len 32 > off 16 */
	assert_int_equal(rtrs_srv_parse_req(chunk, CHUNK, 16, &r), -EINVAL);
	/* a read asking for more than the data area it reserved */
	memset(chunk, 0, CHUNK);
	unhex(io_read_hex, chunk + 0x1000);
	chunk[0x1020 + 8 + 12 + 1] = 0x20;	/* desc len 0x2000 > 0x1000 */
	assert_int_equal(rtrs_srv_parse_req(chunk, CHUNK, 0x1020, &r), -EINVAL);
	assert_int_equal(rtrs_srv_parse_req(NULL, CHUNK, 0, &r), -EMSGSIZE);
	free(chunk);
}

/* Layout and parse agree for every request the layout accepts. */
static void test_layout_parse_roundtrip(void **s)
{
	uint8_t *chunk = calloc(1, CHUNK);
	static const uint32_t dl[] = { 0, 1, 36, 512, 4096, 65536, 126976 };
	static const uint32_t ul[] = { 0, 8, 32, 264, 4000 };

	for (unsigned i = 0; i < sizeof(dl) / sizeof(dl[0]); i++) {
		for (unsigned j = 0; j < sizeof(ul) / sizeof(ul[0]); j++) {
			struct rtrs_req_layout l;
			struct rtrs_srv_req r;
			uint32_t buf, off;

			if (rtrs_read_layout(&geom, 5, dl[i], ul[j], dl[i] ? 1 : 0, &l) == 0) {
				struct rtrs_rdma_read m = { .usr_len = (uint16_t)ul[j],
							    .sg_cnt = dl[i] ? 1 : 0,
							    .desc = { 0x1000, 7, dl[i] } };

				assert_int_equal(l.wr_off, dl[i]);
				assert_true(rtrs_rdma_read_encode(&m, chunk + l.msg_off,
								  CHUNK - l.msg_off) > 0);
				assert_int_equal(rtrs_io_req_payload_decode(
					rtrs_imm_payload(l.imm), QD, CHUNK, &buf, &off), 0);
				assert_int_equal(buf, 5);
				assert_int_equal(rtrs_srv_parse_req(chunk, l.wr_off + l.wr_len,
								    off, &r), 0);
				assert_int_equal(r.data_len, dl[i]);
				assert_int_equal(r.usr_len, ul[j]);
			}
			if (rtrs_write_layout(&geom, 5, dl[i], ul[j], &l) == 0) {
				struct rtrs_rdma_write w = { (uint16_t)ul[j] };

				rtrs_rdma_write_encode(&w, chunk + l.msg_off);
				assert_int_equal(rtrs_io_req_payload_decode(
					rtrs_imm_payload(l.imm), QD, CHUNK, &buf, &off), 0);
				assert_int_equal(rtrs_srv_parse_req(chunk, l.wr_len, off, &r), 0);
				assert_int_equal(r.type, RTRS_MSG_WRITE);
				assert_int_equal(r.data_len, dl[i]);
				assert_int_equal(r.usr_len, ul[j]);
			}
		}
	}
	free(chunk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conn_req_bytes),
		cmocka_unit_test(test_conn_req_rejects),
		cmocka_unit_test(test_conn_rsp_bytes),
		cmocka_unit_test(test_info_req),
		cmocka_unit_test(test_info_rsp_one_mr),
		cmocka_unit_test(test_info_rsp_per_chunk),
		cmocka_unit_test(test_info_rsp_rejects),
		cmocka_unit_test(test_imm_traffic),
		cmocka_unit_test(test_imm_rules),
		cmocka_unit_test(test_geometry),
		cmocka_unit_test(test_layout),
		cmocka_unit_test(test_read_msg_bytes),
		cmocka_unit_test(test_srv_parse),
		cmocka_unit_test(test_layout_parse_roundtrip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
