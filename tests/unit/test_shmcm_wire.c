/* Wire codec (network byte order, checked sizes) and reassembly. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shmcm/shmcm_reasm.h"
#include "shmcm/shmcm_wire.h"

static void test_con_bytes(void **s)
{
	uint8_t b[SHMCM_CON_LEN];
	static const uint8_t want[] = { 0, 0, 0, 1, 0, 0, 0, 16, 0, 0, 0, 4, 0x12, 0x34, 0, 0 };
	struct shmcm_pkt p;

	assert_int_equal(shmcm_encode_con(b, SHMCM_CON_ALV, 0x1234), 16);
	assert_memory_equal(b, want, sizeof(want));
	assert_int_equal(shmcm_decode(b, sizeof(b), 120, &p), SHMCM_OK);
	assert_int_equal(p.type, SHMCM_CON_PKT);
	assert_int_equal(p.con.type, SHMCM_CON_ALV);
	assert_int_equal(p.con.cno, 0x1234);
}

static void test_udata_bytes(void **s)
{
	uint8_t b[64] = { 0 };
	static const uint8_t want[] = {
		0, 0, 0, 2, 0, 0, 0, 37,		/* mhdr: UDATA_1, size */
		0, 7, 0xbe, 0xef,			/* cno, msgid */
		0, 0, 0, 1, 0, 0, 0, 2,			/* src, dst */
		0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0,	/* size, addr */
	};
	struct shmcm_pkt p;

	assert_int_equal(shmcm_encode_udata_hdr(b, 37, 7, 0xbeef, 1, 2, 5), 32);
	memcpy(b + 32, "hello", 5);
	assert_memory_equal(b, want, sizeof(want));
	assert_int_equal(shmcm_decode(b, sizeof(b), 120, &p), SHMCM_OK);
	assert_int_equal(p.u.cno, 7);
	assert_int_equal(p.u.msgid, 0xbeef);
	assert_int_equal(p.u.src, 1);
	assert_int_equal(p.u.dst, 2);
	assert_int_equal(p.u.size, 5);
	assert_int_equal(p.data_len, 5);
	assert_memory_equal(p.data, "hello", 5);
}

/* A decoder never trusts a length field (LINX does). */
static void test_decode_rejects(void **s)
{
	uint8_t b[128] = { 0 };
	struct shmcm_pkt p;

	assert_int_equal(shmcm_decode(b, 7, 120, &p), SHMCM_ETRUNC);
	shmcm_encode_udata_hdr(b, 100, 1, 1, 0, 0, 100);
	assert_int_equal(shmcm_decode(b, 64, 120, &p), SHMCM_ETRUNC);	/* beyond buffer */
	assert_int_equal(shmcm_decode(b, 128, 90, &p), SHMCM_EMRU);	/* beyond MRU */
	shmcm_encode_udata_hdr(b, 40, 1, 1, 0, 0, 4);			/* 8 bytes > size 4 */
	assert_int_equal(shmcm_decode(b, 128, 120, &p), SHMCM_EFRAG);
	shmcm_encode_udata_hdr(b, 20, 1, 1, 0, 0, 0);			/* shorter than uhdr */
	assert_int_equal(shmcm_decode(b, 128, 120, &p), SHMCM_ESIZE);
	shmcm_encode_con(b, SHMCM_CON_REQ, 1);
	b[7] = 17;							/* CON with size 17 */
	assert_int_equal(shmcm_decode(b, 128, 120, &p), SHMCM_ESIZE);
	shmcm_encode_con(b, 9, 1);
	assert_int_equal(shmcm_decode(b, 128, 120, &p), SHMCM_ETYPE);
	shmcm_encode_con(b, SHMCM_CON_REQ, 1);
	b[3] = SHMCM_UDATA_2_PKT;					/* defined, never used */
	assert_int_equal(shmcm_decode(b, 128, 120, &p), SHMCM_ETYPE);
}

/* ------------------------------------------------------------ reassembly */

struct frag { uint8_t buf[256]; struct shmcm_pkt p; };

static void mkfrag(struct frag *f, uint16_t msgid, uint32_t msg_size,
		   const uint8_t *data, uint32_t n)
{
	shmcm_encode_udata_hdr(f->buf, SHMCM_UDATA_HLEN + n, 1, msgid, 10, 20, msg_size);
	if (n)
		memcpy(f->buf + SHMCM_UDATA_HLEN, data, n);
	assert_int_equal(shmcm_decode(f->buf, sizeof(f->buf), 256, &f->p), SHMCM_OK);
}

static void test_reasm_single(void **s)
{
	struct shmcm_reasm r;
	struct shmcm_msg m;
	struct frag f;

	shmcm_reasm_init(&r, 1000, 4000);
	mkfrag(&f, 1, 3, (const uint8_t *)"abc", 3);
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), 1);
	assert_int_equal(m.len, 3);
	assert_ptr_equal(m.data, f.buf + 32);	/* delivered in place */
	mkfrag(&f, 2, 0, NULL, 0);		/* empty message */
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), 1);
	assert_int_equal(m.len, 0);
	shmcm_reasm_reset(&r);
}

/* Two messages whose fragments interleave, each reassembled by msgid. */
static void test_reasm_interleaved(void **s)
{
	uint8_t a[300], b[300];
	struct shmcm_reasm r;
	struct shmcm_msg m;
	struct frag f;

	for (int i = 0; i < 300; i++) {
		a[i] = (uint8_t)i;
		b[i] = (uint8_t)(255 - i);
	}
	shmcm_reasm_init(&r, 1000, 4000);
	mkfrag(&f, 7, 300, a, 200);
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), 0);
	mkfrag(&f, 8, 300, b, 100);
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), 0);
	mkfrag(&f, 8, 300, b + 100, 200);
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), 1);
	assert_int_equal(m.msgid, 8);
	assert_int_equal(m.len, 300);
	assert_memory_equal(m.data, b, 300);
	mkfrag(&f, 7, 300, a + 200, 100);
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), 1);
	assert_int_equal(m.msgid, 7);
	assert_int_equal(m.src, 10);
	assert_int_equal(m.dst, 20);
	assert_memory_equal(m.data, a, 300);
	assert_int_equal(r.active, 0);
	assert_int_equal(r.used, 0);
	shmcm_reasm_reset(&r);
}

static void test_reasm_limits(void **s)
{
	uint8_t d[200] = { 0 };
	struct shmcm_reasm r;
	struct shmcm_msg m;
	struct frag f;

	shmcm_reasm_init(&r, 1000, 2500);
	mkfrag(&f, 1, 1001, d, 100);		/* beyond max_msg */
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), -EMSGSIZE);
	mkfrag(&f, 1, 1000, d, 100);
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), 0);
	mkfrag(&f, 2, 1000, d, 100);
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), 0);
	mkfrag(&f, 3, 1000, d, 100);		/* budget 2500 exhausted */
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), -ENOBUFS);
	/* a continuation that does not match its first fragment drops both */
	mkfrag(&f, 1, 999, d, 100);
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), -EPROTO);
	assert_int_equal(r.active, 1);
	/* overflow of the announced size */
	mkfrag(&f, 2, 1000, d, 200);
	for (int i = 0; i < 4; i++)
		assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), 0);
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), -EPROTO);
	assert_int_equal(r.active, 0);
	assert_int_equal(r.used, 0);
	assert_int_equal(r.dropped, 4);
	shmcm_reasm_reset(&r);
}

static void test_reasm_slots(void **s)
{
	uint8_t d[10] = { 0 };
	struct shmcm_reasm r;
	struct shmcm_msg m;
	struct frag f;

	shmcm_reasm_init(&r, 100, 1 << 20);
	for (uint16_t i = 0; i < SHMCM_REASM_SLOTS; i++) {
		mkfrag(&f, i, 20, d, 10);
		assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), 0);
	}
	mkfrag(&f, 999, 20, d, 10);
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), -ENOBUFS);
	shmcm_reasm_reset(&r);
	assert_int_equal(r.active, 0);
	assert_int_equal(shmcm_reasm_input(&r, &f.p, &m), 0);
	shmcm_reasm_reset(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_con_bytes),
		cmocka_unit_test(test_udata_bytes),
		cmocka_unit_test(test_decode_rejects),
		cmocka_unit_test(test_reasm_single),
		cmocka_unit_test(test_reasm_interleaved),
		cmocka_unit_test(test_reasm_limits),
		cmocka_unit_test(test_reasm_slots),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
