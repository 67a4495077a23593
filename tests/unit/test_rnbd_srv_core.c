/* The RNBD server's rules without I/O (rnbd_srv_core): OPEN admission and
 * ids, CLOSE, SESS_INFO, and every IO check, each on exact inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "rnbd/rnbd_srv_core.h"

#define MAX_IO (128u << 10)

static struct rnbd_core_export ex_rw(void)
{
	return (struct rnbd_core_export){ .size = 1u << 20, .lbs = 512, .pbs = 4096,
					  .discard_gran = 4096, .discard = true };
}

static int open_as(struct rnbd_core_sess *s, struct rnbd_core_export *e, uint8_t mode,
		   struct rnbd_open_rsp *rsp)
{
	uint8_t out[RNBD_OPEN_RSP_LEN];
	int rc = rnbd_core_open(s, e, mode, MAX_IO, out);

	if (rc == 0)
		assert_int_equal(rnbd_open_rsp_decode(out, sizeof(out), rsp), 0);
	return rc;
}

static int io(struct rnbd_core_sess *s, int dir, uint32_t datalen, uint32_t id, uint64_t sector,
	      uint32_t rw, uint32_t len, struct rnbd_core_io *o)
{
	struct rnbd_io m = { .device_id = id, .sector = sector, .rw = rw, .bi_size = len };
	uint8_t b[RNBD_IO_LEN];

	rnbd_io_encode(&m, b);
	return rnbd_core_io(s, dir, datalen, b, sizeof(b), o);
}

/* OPEN_RSP carries the geometry; a second open of the same export gives
 * the same id; ids are the smallest free; a writer excludes a writer but
 * not readers; MIGRATION allows two writers; closing gives them back. */
static void test_open(void **state)
{
	struct rnbd_core_export a = ex_rw(), b = ex_rw(), c = ex_rw();
	struct rnbd_core_sess s1 = { 0 }, s2 = { 0 }, s3 = { 0 };
	struct rnbd_open_rsp r;

	(void)state;
	assert_int_equal(open_as(&s1, &a, RNBD_ACCESS_RW, &r), 0);
	assert_int_equal(r.device_id, 0);
	assert_int_equal(r.nsectors, 2048);
	assert_int_equal(r.max_hw_sectors, MAX_IO >> 9);
	assert_int_equal(r.logical_block_size, 512);
	assert_int_equal(r.physical_block_size, 4096);
	assert_int_equal(r.discard_granularity, 4096);
	assert_int_equal(r.max_discard_sectors, RNBD_SRV_MAX_DISCARD);
	assert_int_equal(r.max_write_zeroes_sectors, RNBD_SRV_MAX_DISCARD);
	assert_int_equal(r.max_segments, RNBD_SRV_MAX_SEGMENTS);
	assert_int_equal(r.cache_policy, RNBD_WRITEBACK | RNBD_FUA);
	assert_int_equal(a.writers, 1);
	assert_int_equal(a.opens, 1);
	/* the same export again, whatever the mode: the same id, no count */
	assert_int_equal(open_as(&s1, &a, RNBD_ACCESS_RO, &r), 0);
	assert_int_equal(r.device_id, 0);
	assert_int_equal(a.opens, 1);
	assert_int_equal(open_as(&s1, &b, RNBD_ACCESS_RW, &r), 0);
	assert_int_equal(r.device_id, 1);
	/* another session: a second writer is refused, a reader is not */
	assert_int_equal(open_as(&s2, &a, RNBD_ACCESS_RW, &r), -EPERM);
	assert_int_equal(open_as(&s2, &a, RNBD_ACCESS_RO, &r), 0);
	assert_int_equal(a.writers, 1);
	assert_int_equal(a.opens, 2);
	/* an unknown mode */
	assert_int_equal(open_as(&s3, &c, 7, &r), -EINVAL);
	assert_int_equal(c.opens, 0);
	/* migration: two writers, not three */
	assert_int_equal(open_as(&s1, &c, RNBD_ACCESS_MIGRATION, &r), 0);
	assert_int_equal(open_as(&s2, &c, RNBD_ACCESS_MIGRATION, &r), 0);
	assert_int_equal(open_as(&s3, &c, RNBD_ACCESS_MIGRATION, &r), -EPERM);
	assert_int_equal(c.writers, 2);
	/* close id 0 of s1: its id is free again, the writer gone */
	assert_int_equal(rnbd_core_dev_close(&s1, 0), 0);
	assert_int_equal(rnbd_core_dev_close(&s1, 0), -ENOENT);
	assert_int_equal(a.writers, 0);
	assert_int_equal(open_as(&s1, &a, RNBD_ACCESS_RW, &r), 0);
	assert_int_equal(r.device_id, 0);
	/* sessions gone: every count back to zero */
	rnbd_core_sess_free(&s1);
	rnbd_core_sess_free(&s2);
	rnbd_core_sess_free(&s3);
	assert_int_equal(a.opens + a.writers + b.opens + b.writers + c.opens + c.writers, 0);
}

/* A read-only export: read-only opens only, no write-zeroes announced. */
static void test_open_ro(void **state)
{
	struct rnbd_core_export e = ex_rw();
	struct rnbd_core_sess s = { 0 };
	struct rnbd_open_rsp r;

	(void)state;
	e.ro = true;
	e.discard = false;
	assert_int_equal(open_as(&s, &e, RNBD_ACCESS_RW, &r), -EROFS);
	assert_int_equal(open_as(&s, &e, RNBD_ACCESS_MIGRATION, &r), -EROFS);
	assert_int_equal(open_as(&s, &e, RNBD_ACCESS_RO, &r), 0);
	assert_int_equal(r.max_write_zeroes_sectors, 0);
	assert_int_equal(r.max_discard_sectors, 0);
	assert_int_equal(r.discard_granularity, 0);
	assert_int_equal(e.writers, 0);
	rnbd_core_sess_free(&s);
}

/* The message checks of OPEN, CLOSE and SESS_INFO. */
static void test_messages(void **state)
{
	struct rnbd_core_export e = ex_rw();
	struct rnbd_core_sess s = { 0 };
	struct rnbd_open m = { .access_mode = RNBD_ACCESS_RW, .dev_name = "d1" }, got;
	struct rnbd_sess_info si = { .ver = 9 }, sr;
	struct rnbd_close cl = { .device_id = 0 };
	struct rnbd_open_rsp r;
	uint8_t b[RNBD_OPEN_LEN], out[RNBD_SESS_INFO_LEN];

	(void)state;
	assert_int_equal(rnbd_open_encode(&m, b), 0);
	assert_int_equal(rnbd_core_open_msg(RTRS_READ, RNBD_OPEN_RSP_LEN, b, RNBD_OPEN_LEN, &got), 0);
	assert_string_equal(got.dev_name, "d1");
	assert_int_equal(rnbd_core_open_msg(RTRS_WRITE, RNBD_OPEN_RSP_LEN, b, RNBD_OPEN_LEN, &got),
			 -EINVAL);
	assert_int_equal(rnbd_core_open_msg(RTRS_READ, RNBD_OPEN_RSP_LEN - 1, b, RNBD_OPEN_LEN, &got),
			 -EINVAL);
	assert_int_equal(rnbd_core_open_msg(RTRS_READ, RNBD_OPEN_RSP_LEN, b, 10, &got), -EINVAL);
	/* SESS_INFO: the lower version wins */
	rnbd_sess_info_encode(&si, out);
	assert_int_equal(rnbd_core_sess_info(&s, RTRS_READ, out, sizeof(out), out, sizeof(out)), 0);
	assert_int_equal(rnbd_sess_info_rsp_decode(out, sizeof(out), &sr), 0);
	assert_int_equal(sr.ver, RNBD_PROTO_VER_MAJOR);
	assert_int_equal(s.ver, RNBD_PROTO_VER_MAJOR);
	si.ver = 1;
	rnbd_sess_info_encode(&si, out);
	assert_int_equal(rnbd_core_sess_info(&s, RTRS_READ, out, sizeof(out), out, sizeof(out)), 0);
	assert_int_equal(s.ver, 1);
	assert_int_equal(rnbd_core_sess_info(&s, RTRS_WRITE, out, sizeof(out), out, sizeof(out)),
			 -EINVAL);
	/* CLOSE: an unknown id is no error, a short message is */
	rnbd_close_encode(&cl, b);
	assert_int_equal(rnbd_core_close(&s, b, RNBD_CLOSE_LEN), 0);
	assert_int_equal(open_as(&s, &e, RNBD_ACCESS_RW, &r), 0);
	assert_int_equal(rnbd_core_close(&s, b, RNBD_CLOSE_LEN - 1), -EINVAL);
	assert_int_equal(e.opens, 1);
	assert_int_equal(rnbd_core_close(&s, b, RNBD_CLOSE_LEN), 0);
	assert_int_equal(e.opens, 0);
	assert_int_equal(e.writers, 0);
	rnbd_core_sess_free(&s);
}

/* Every IO check, and what a good IO hands the driver. */
static void test_io(void **state)
{
	struct rnbd_core_export e = ex_rw(), ro = ex_rw();
	struct rnbd_core_sess s = { 0 };
	struct rnbd_core_io o;
	struct rnbd_open_rsp r;
	const uint32_t end = 2048;	/* sectors */

	(void)state;
	ro.ro = true;
	assert_int_equal(open_as(&s, &e, RNBD_ACCESS_RW, &r), 0);	/* id 0 */
	assert_int_equal(open_as(&s, &ro, RNBD_ACCESS_RO, &r), 0);	/* id 1 */
	/* a good read and write */
	assert_int_equal(io(&s, RTRS_READ, 8192, 0, 8, RNBD_OP_READ, 4096, &o), 0);
	assert_ptr_equal(o.dev->ex, &e);
	assert_int_equal(o.op, RNBD_OP_READ);
	assert_int_equal(o.off, 4096);
	assert_int_equal(o.len, 4096);
	assert_int_equal(o.arg, 8192);
	assert_int_equal(io(&s, RTRS_WRITE, 4096, 0, end - 8, RNBD_OP_WRITE | RNBD_F_FUA, 4096, &o),
			 0);
	assert_int_equal(o.fl, RNBD_F_FUA);
	/* the last byte and one past it */
	assert_int_equal(io(&s, RTRS_READ, 512, 0, end - 1, RNBD_OP_READ, 512, &o), 0);
	assert_int_equal(io(&s, RTRS_READ, 1024, 0, end - 1, RNBD_OP_READ, 1024, &o), -EIO);
	assert_int_equal(io(&s, RTRS_READ, 512, 0, end, RNBD_OP_READ, 512, &o), -EIO);
	assert_int_equal(io(&s, RTRS_READ, 512, 0, UINT64_MAX >> 8, RNBD_OP_READ, 512, &o), -EIO);
	assert_int_equal(io(&s, RTRS_READ, 512, 0, UINT64_MAX, RNBD_OP_READ, 512, &o), -EIO);
	/* a FLUSH has no range */
	assert_int_equal(io(&s, RTRS_WRITE, 0, 0, UINT64_MAX, RNBD_OP_FLUSH, 0, &o), 0);
	/* direction and buffer */
	assert_int_equal(io(&s, RTRS_WRITE, 4096, 0, 0, RNBD_OP_READ, 4096, &o), -EINVAL);
	assert_int_equal(io(&s, RTRS_READ, 2048, 0, 0, RNBD_OP_READ, 4096, &o), -EINVAL);
	assert_int_equal(io(&s, RTRS_READ, 4096, 0, 0, RNBD_OP_WRITE, 4096, &o), -EINVAL);
	assert_int_equal(io(&s, RTRS_WRITE, 2048, 0, 0, RNBD_OP_WRITE, 4096, &o), -EINVAL);
	/* unknown device, read-only export, read-only open */
	assert_int_equal(io(&s, RTRS_READ, 512, 2, 0, RNBD_OP_READ, 512, &o), -ENOTCONN);
	assert_int_equal(io(&s, RTRS_WRITE, 512, 1, 0, RNBD_OP_WRITE, 512, &o), -EROFS);
	assert_int_equal(io(&s, RTRS_WRITE, 0, 1, 0, RNBD_OP_DISCARD, 4096, &o), -EROFS);
	assert_int_equal(io(&s, RTRS_READ, 512, 1, 0, RNBD_OP_READ, 512, &o), 0);
	/* discard: aligned, and only where the export has it */
	assert_int_equal(io(&s, RTRS_WRITE, 0, 0, 0, RNBD_OP_DISCARD, 4096, &o), 0);
	assert_int_equal(io(&s, RTRS_WRITE, 0, 0, 0, RNBD_OP_DISCARD, 4000, &o), -EINVAL);
	e.discard = false;
	assert_int_equal(io(&s, RTRS_WRITE, 0, 0, 0, RNBD_OP_DISCARD, 4096, &o), -EOPNOTSUPP);
	/* write-zeroes: aligned; a pattern that divides the length */
	assert_int_equal(io(&s, RTRS_WRITE, 0, 0, 0, RNBD_OP_WRITE_ZEROES, 8192, &o), 0);
	assert_int_equal(o.arg, 0);
	assert_int_equal(io(&s, RTRS_WRITE, 512, 0, 0, RNBD_OP_WRITE_ZEROES, 8192, &o), 0);
	assert_int_equal(o.arg, 512);
	assert_int_equal(io(&s, RTRS_WRITE, 1536, 0, 0, RNBD_OP_WRITE_ZEROES, 8192, &o), -EINVAL);
	assert_int_equal(io(&s, RTRS_WRITE, 100, 0, 0, RNBD_OP_WRITE_ZEROES, 8192, &o), -EINVAL);
	assert_int_equal(io(&s, RTRS_WRITE, 0, 0, 0, RNBD_OP_WRITE_ZEROES, 8000, &o), -EINVAL);
	assert_int_equal(io(&s, RTRS_READ, 0, 0, 0, RNBD_OP_WRITE_ZEROES, 8192, &o), 0);
	/* secure erase is not offered */
	assert_int_equal(io(&s, RTRS_WRITE, 0, 0, 0, RNBD_OP_SECURE_ERASE, 4096, &o), -EOPNOTSUPP);
	/* a short or foreign message */
	{
		uint8_t b[RNBD_IO_LEN] = { 0 };

		assert_int_equal(rnbd_core_io(&s, RTRS_READ, 512, b, 3, &o), -EINVAL);
		assert_int_equal(rnbd_core_io(&s, RTRS_READ, 512, b, sizeof(b), &o), -EINVAL);
	}
	rnbd_core_sess_free(&s);
}

/* A device of 4 KiB logical blocks takes reads and writes of whole blocks
 * only (the kernel's block layer fails smaller ones with EIO). */
static void test_io_4kn(void **state)
{
	struct rnbd_core_export e = ex_rw();
	struct rnbd_core_sess s = { 0 };
	struct rnbd_core_io o;
	struct rnbd_open_rsp r;

	(void)state;
	e.lbs = 4096;
	assert_int_equal(open_as(&s, &e, RNBD_ACCESS_RW, &r), 0);
	assert_int_equal(r.logical_block_size, 4096);
	assert_int_equal(io(&s, RTRS_READ, 8192, 0, 8, RNBD_OP_READ, 8192, &o), 0);
	assert_int_equal(io(&s, RTRS_WRITE, 4096, 0, 2040, RNBD_OP_WRITE, 4096, &o), 0);
	/* a sector off the block, or a block and a sector */
	assert_int_equal(io(&s, RTRS_READ, 4096, 0, 1, RNBD_OP_READ, 4096, &o), -EIO);
	assert_int_equal(io(&s, RTRS_READ, 4608, 0, 8, RNBD_OP_READ, 4608, &o), -EIO);
	assert_int_equal(io(&s, RTRS_WRITE, 512, 0, 8, RNBD_OP_WRITE, 512, &o), -EIO);
	assert_int_equal(io(&s, RTRS_WRITE, 4096, 0, 4, RNBD_OP_WRITE, 4096, &o), -EIO);
	/* no range: a flush */
	assert_int_equal(io(&s, RTRS_WRITE, 0, 0, 3, RNBD_OP_FLUSH, 0, &o), 0);
	rnbd_core_sess_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open),
		cmocka_unit_test(test_open_ro),
		cmocka_unit_test(test_messages),
		cmocka_unit_test(test_io),
		cmocka_unit_test(test_io_4kn),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
