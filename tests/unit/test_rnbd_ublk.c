/* ublk <-> RNBD translation: the parameters the driver is given (the
 * checks ublk_validate_params makes, the cache policy as attributes,
 * discard only where the device discards), every op of a descriptor,
 * the range checks, and a randomized sweep: a descriptor is accepted
 * exactly when it is a supported op inside the device and a buffer, and
 * then offset and length are its sectors'. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rnbd/rnbd_ublk.h"

#define MAX_IO (512u << 10)

static struct rnbd_clt_geom geom(void)
{
	return (struct rnbd_clt_geom){
		.size = 1ull << 30, .nsectors = 1ull << 21, .max_hw_sectors = 1024,
		.max_write_zeroes_sectors = 2048, .max_discard_sectors = 4096,
		.discard_granularity = 4096, .discard_alignment = 0,
		.physical_block_size = 4096, .logical_block_size = 512,
		.cache_policy = RNBD_WRITEBACK | RNBD_FUA,
	};
}

static void test_params(void **state)
{
	struct rnbd_clt_geom g = geom();
	struct ublk_params p;

	(void)state;
	assert_int_equal(rnbd_ublk_params(&g, false, MAX_IO, &p), 0);
	assert_int_equal(p.len, sizeof(p));
	assert_int_equal(p.types, UBLK_PARAM_TYPE_BASIC | UBLK_PARAM_TYPE_DISCARD);
	assert_int_equal(p.basic.attrs, UBLK_ATTR_VOLATILE_CACHE | UBLK_ATTR_FUA);
	/* ublk_validate_params: 9 <= logical <= PAGE_SHIFT, logical <=
	 * physical, max_sectors <= max_io_buf_bytes >> 9 */
	assert_int_equal(p.basic.logical_bs_shift, 9);
	assert_int_equal(p.basic.physical_bs_shift, 12);
	assert_int_equal(p.basic.max_sectors, MAX_IO >> 9);
	assert_int_equal(p.basic.dev_sectors, 1ull << 21);
	/* discard: a granularity, one segment */
	assert_int_equal(p.discard.discard_granularity, 4096);
	assert_int_equal(p.discard.max_discard_segments, 1);
	assert_int_equal(p.discard.max_discard_sectors, 4096);
	assert_int_equal(p.discard.max_write_zeroes_sectors, 2048);

	/* read-only: no write cache to flush */
	assert_int_equal(rnbd_ublk_params(&g, true, MAX_IO, &p), 0);
	assert_int_equal(p.basic.attrs, UBLK_ATTR_READ_ONLY);
	/* a physical block above a page is a hint the driver takes */
	g.physical_block_size = 32768;
	assert_int_equal(rnbd_ublk_params(&g, false, MAX_IO, &p), 0);
	assert_int_equal(p.basic.physical_bs_shift, 15);
	g.physical_block_size = 4096;

	/* write-through, read-only, no discard, no granularity given */
	g.cache_policy = 0;
	g.max_discard_sectors = 0;
	g.discard_granularity = 0;
	assert_int_equal(rnbd_ublk_params(&g, true, MAX_IO, &p), 0);
	assert_int_equal(p.basic.attrs, UBLK_ATTR_READ_ONLY);
	assert_int_equal(p.types, UBLK_PARAM_TYPE_BASIC | UBLK_PARAM_TYPE_DISCARD);
	assert_int_equal(p.discard.discard_granularity, 512);
	assert_int_equal(p.discard.max_discard_sectors, 0);
	g.max_write_zeroes_sectors = 0;
	assert_int_equal(rnbd_ublk_params(&g, false, MAX_IO, &p), 0);
	assert_int_equal(p.types, UBLK_PARAM_TYPE_BASIC);

	/* a physical block smaller than the logical one is raised to it */
	g = geom();
	g.logical_block_size = 4096;
	g.physical_block_size = 512;
	assert_int_equal(rnbd_ublk_params(&g, false, MAX_IO, &p), 0);
	assert_int_equal(p.basic.logical_bs_shift, 12);
	assert_int_equal(p.basic.physical_bs_shift, 12);

	/* what the driver would refuse */
	g = geom();
	g.logical_block_size = 1000;
	assert_int_equal(rnbd_ublk_params(&g, false, MAX_IO, &p), -EINVAL);
	g.logical_block_size = 8192;
	assert_int_equal(rnbd_ublk_params(&g, false, MAX_IO, &p), -EINVAL);
	g = geom();
	g.physical_block_size = 3000;
	assert_int_equal(rnbd_ublk_params(&g, false, MAX_IO, &p), -EINVAL);
	g = geom();
	g.nsectors = 0;
	assert_int_equal(rnbd_ublk_params(&g, false, MAX_IO, &p), -EINVAL);
	g.nsectors = (UINT64_MAX >> 9) + 1;
	assert_int_equal(rnbd_ublk_params(&g, false, MAX_IO, &p), -EINVAL);
	g = geom();
	assert_int_equal(rnbd_ublk_params(&g, false, 4096 + 512, &p), -EINVAL);
	assert_int_equal(rnbd_ublk_params(&g, false, 2048, &p), -EINVAL);
}

static struct ublksrv_io_desc iod(uint32_t op, uint32_t flags, uint64_t start, uint32_t n)
{
	return (struct ublksrv_io_desc){ .op_flags = op | flags, .nr_sectors = n,
					 .start_sector = start };
}

static void test_ops(void **state)
{
	struct rnbd_ublk_req r;
	struct ublksrv_io_desc d;
	const uint64_t dev = 1ull << 21;

	(void)state;
	d = iod(UBLK_IO_OP_READ, 0, 8, 8);
	assert_int_equal(rnbd_ublk_req(&d, dev, MAX_IO, &r), 0);
	assert_int_equal(r.op, RNBD_OP_READ);
	assert_true(r.data);
	assert_int_equal(r.off, 4096);
	assert_int_equal(r.len, 4096);
	assert_int_equal(r.flags, 0);
	assert_int_equal(rnbd_ublk_result(&r, 0), 4096);
	assert_int_equal(rnbd_ublk_result(&r, -EIO), -EIO);
	assert_int_equal(rnbd_ublk_result(&r, EIO), -EIO);

	d = iod(UBLK_IO_OP_WRITE, UBLK_IO_F_FUA, dev - 1024, 1024);
	assert_int_equal(rnbd_ublk_req(&d, dev, MAX_IO, &r), 0);
	assert_int_equal(r.op, RNBD_OP_WRITE);
	assert_int_equal(r.flags, RNBD_F_FUA);
	assert_int_equal(r.len, MAX_IO);
	/* a write reports its bytes too: 0 would make the block layer
	 * requeue it (blk_update_request with nothing done) */
	assert_int_equal(rnbd_ublk_result(&r, 0), (int32_t)MAX_IO);

	d = iod(UBLK_IO_OP_FLUSH, 0, 0, 0);
	assert_int_equal(rnbd_ublk_req(&d, dev, MAX_IO, &r), 0);
	assert_int_equal(r.op, RNBD_OP_FLUSH);
	assert_false(r.data);
	assert_int_equal(r.off, 0);
	assert_int_equal(r.len, 0);
	assert_int_equal(rnbd_ublk_result(&r, 0), 0);

	/* discard and write-zeroes: no buffer, so larger than one */
	d = iod(UBLK_IO_OP_DISCARD, 0, 0, 1u << 16);
	assert_int_equal(rnbd_ublk_req(&d, dev, MAX_IO, &r), 0);
	assert_int_equal(r.op, RNBD_OP_DISCARD);
	assert_int_equal(r.len, 32ull << 20);
	assert_int_equal(rnbd_ublk_result(&r, 0), 0);
	d = iod(UBLK_IO_OP_WRITE_ZEROES, UBLK_IO_F_NOUNMAP, 16, 16);
	assert_int_equal(rnbd_ublk_req(&d, dev, MAX_IO, &r), 0);
	assert_int_equal(r.op, RNBD_OP_WRITE_ZEROES);
	assert_int_equal(r.off, 8192);

	/* refused */
	d = iod(UBLK_IO_OP_WRITE_SAME, 0, 0, 8);
	assert_int_equal(rnbd_ublk_req(&d, dev, MAX_IO, &r), -EOPNOTSUPP);
	d = iod(0x22, 0, 0, 8);
	assert_int_equal(rnbd_ublk_req(&d, dev, MAX_IO, &r), -EOPNOTSUPP);
	d = iod(UBLK_IO_OP_READ, 0, 0, 0);
	assert_int_equal(rnbd_ublk_req(&d, dev, MAX_IO, &r), -EINVAL);
	d = iod(UBLK_IO_OP_READ, 0, dev - 7, 8);
	assert_int_equal(rnbd_ublk_req(&d, dev, MAX_IO, &r), -EINVAL);
	d = iod(UBLK_IO_OP_WRITE, 0, UINT64_MAX - 3, 8);
	assert_int_equal(rnbd_ublk_req(&d, dev, MAX_IO, &r), -EINVAL);
	d = iod(UBLK_IO_OP_WRITE, 0, 0, (MAX_IO >> 9) + 1);
	assert_int_equal(rnbd_ublk_req(&d, dev, MAX_IO, &r), -EINVAL);
	d = iod(UBLK_IO_OP_DISCARD, 0, dev, 1);
	assert_int_equal(rnbd_ublk_req(&d, dev, MAX_IO, &r), -EINVAL);
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void test_random(void **state)
{
	const char *env = getenv("XPRT_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL), s;
	unsigned ok = 0;

	(void)state;
	printf("test_random: seed %llu (XPRT_SEED to repeat)\n", (unsigned long long)seed);
	s = seed | 1;
	for (int i = 0; i < 200000; i++) {
		uint64_t dev = 1 + rnd(&s) % (1ull << 24);
		uint32_t op = (uint32_t)(rnd(&s) % 8), fl = (uint32_t)(rnd(&s) & 0xffffff00u);
		uint64_t start = rnd(&s) % 3 ? rnd(&s) % (dev + 16) : rnd(&s);
		uint32_t n = (uint32_t)(rnd(&s) % 3 ? rnd(&s) % 2100 : rnd(&s));
		struct ublksrv_io_desc d = iod(op, fl, start, n);
		struct rnbd_ublk_req r;
		int rc = rnbd_ublk_req(&d, dev, MAX_IO, &r);
		bool known = op <= UBLK_IO_OP_WRITE_ZEROES && op != UBLK_IO_OP_WRITE_SAME;
		bool data = op == UBLK_IO_OP_READ || op == UBLK_IO_OP_WRITE;
		bool fits = n && start <= dev && n <= dev - start && (!data || n <= MAX_IO >> 9);

		if (!known) {
			assert_int_equal(rc, -EOPNOTSUPP);
			continue;
		}
		if (op == UBLK_IO_OP_FLUSH) {
			assert_int_equal(rc, 0);
			assert_int_equal(r.len, 0);
			continue;
		}
		if (!fits) {
			assert_int_equal(rc, -EINVAL);
			continue;
		}
		assert_int_equal(rc, 0);
		ok++;
		assert_int_equal(r.data, data);
		assert_int_equal(r.off, start << 9);
		assert_int_equal(r.len, (uint64_t)n << 9);
		assert_true(r.off + r.len <= dev << 9);
		assert_int_equal(r.flags, (op == UBLK_IO_OP_WRITE && (fl & UBLK_IO_F_FUA) ? RNBD_F_FUA : 0) |
					  (op == UBLK_IO_OP_WRITE_ZEROES && (fl & UBLK_IO_F_NOUNMAP)
						   ? RNBD_F_NOUNMAP : 0));
		assert_int_equal(rnbd_ublk_result(&r, 0), data ? (int32_t)(n << 9) : 0);
	}
	assert_true(ok > 10000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_params),
		cmocka_unit_test(test_ops),
		cmocka_unit_test(test_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
