/* The RNBD server over the RTRS server (tcp:// on loopback, the scripted
 * client of rtrs_srv_harness.h): export specs, access modes, read-only
 * exports and mappings, bounds, flush/FUA/discard/write-zeroes, device
 * lifetime with the session. */
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "rtrs_srv_harness.h"

#include <sys/stat.h>
#include <sys/time.h>

#include "rnbd/rnbd_clt.h"
#include "rtrs/rtrs_clt.h"

static void test_exports(void **state)
{
	struct rnbd_srv *r;
	char err[256], name[256], path[4096], f[64];
	bool ro;

	(void)state;
	assert_int_equal(rnbd_export_parse("d=/x/y:ro", name, sizeof(name), path, sizeof(path), &ro,
					   err, sizeof(err)), 0);
	assert_string_equal(name, "d");
	assert_string_equal(path, "/x/y");
	assert_true(ro);
	assert_int_equal(rnbd_export_parse("dev/ram0=/dev/ram0", name, sizeof(name), path,
					   sizeof(path), &ro, err, sizeof(err)), 0);
	assert_string_equal(name, "dev/ram0");
	assert_false(ro);
	assert_int_equal(rnbd_export_parse("noequals", name, sizeof(name), path, sizeof(path), &ro,
					   err, sizeof(err)), -EINVAL);
	assert_int_equal(rnbd_export_parse("=/x", name, sizeof(name), path, sizeof(path), &ro, err,
					   sizeof(err)), -EINVAL);
	assert_int_equal(rnbd_export_parse("a=", name, sizeof(name), path, sizeof(path), &ro, err,
					   sizeof(err)), -EINVAL);
	assert_int_equal(rnbd_export_parse("a=:ro", name, sizeof(name), path, sizeof(path), &ro,
					   err, sizeof(err)), -EINVAL);
	r = rnbd_srv_new(126976, err, sizeof(err));
	assert_int_equal(rnbd_srv_export(r, "x", "/nonexistent/file", false, err, sizeof(err)),
			 -ENOENT);
	assert_non_null(strstr(err, "/nonexistent/file"));
	assert_int_equal(rnbd_srv_export(r, "x", "/tmp", true, err, sizeof(err)), -EINVAL);
	make_file(f, 0);
	assert_int_equal(rnbd_srv_export(r, "x", f, false, err, sizeof(err)), -EINVAL);
	assert_int_equal(truncate(f, 4096), 0);
	assert_int_equal(rnbd_srv_export(r, "x", f, false, err, sizeof(err)), 0);
	assert_int_equal(rnbd_srv_export(r, "x", f, true, err, sizeof(err)), -EEXIST);
	assert_int_equal(rnbd_srv_exports(r), 1);
	rnbd_srv_free(r);
	unlink(f);
}

static void test_rnbd_rules(void **state)
{
	struct tsrv *s = srv_start(8, 64 << 10, false, 0);
	uint32_t dev, dev2;
	struct tclt *a = good_session(s, 40, "a", 2, RNBD_ACCESS_RW, &dev);
	struct tclt *b = clt_new(s, 41), *c;
	struct rnbd_open_rsp r;
	uint8_t buf[4096];

	(void)state;
	memset(buf, 1, sizeof(buf));
	assert_int_equal(clt_connect(b, 2), 0);
	assert_int_equal(clt_info(b, "b"), 0);
	assert_int_equal(rnbd_sess_info(b), 0);
	/* rw once, migration a second writer, then no more */
	assert_int_equal(rnbd_open(b, "disk", RNBD_ACCESS_RW, &r), -EPERM);
	assert_int_equal(rnbd_open(b, "disk", RNBD_ACCESS_MIGRATION, &r), 0);
	dev2 = r.device_id;
	assert_int_equal(rnbd_close(b, dev2), 0);
	assert_int_equal(rnbd_open(b, "disk", RNBD_ACCESS_RO, &r), 0);
	dev2 = r.device_id;
	/* write-zeroes is advertised on a writable export (6.8+ clients read
	 * max_write_zeroes_sectors) */
	assert_int_equal(r.max_write_zeroes_sectors, UINT32_MAX >> 9);
	/* a ro mapping does not write */
	assert_int_equal(rnbd_io(b, 1, 3, dev2, RNBD_OP_WRITE, 0, buf, 512, 0), -EROFS);
	/* read-only export: no rw open, no writes */
	assert_int_equal(rnbd_open(b, "rodisk", RNBD_ACCESS_RW, &r), -EROFS);
	assert_int_equal(rnbd_open(b, "rodisk", RNBD_ACCESS_RO, &r), 0);
	assert_int_equal(r.max_discard_sectors, 0);
	assert_int_equal(r.max_write_zeroes_sectors, 0);
	assert_int_equal(rnbd_io(b, 1, 3, r.device_id, RNBD_OP_WRITE, 0, buf, 512, 0), -EROFS);
	assert_int_equal(rnbd_io(b, 1, 3, r.device_id, RNBD_OP_READ, 0, NULL, 512, 0), 0);
	/* no such export; names are matched exactly (no paths) */
	assert_int_equal(rnbd_open(b, "nope", RNBD_ACCESS_RO, &r), -ENOENT);
	assert_int_equal(rnbd_open(b, "/disk", RNBD_ACCESS_RO, &r), -ENOENT);
	/* bounds: the last sector is fine, one more is not */
	assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_WRITE, DEV_SIZE / 512 - 1, buf, 512, 0), 0);
	assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_WRITE, DEV_SIZE / 512 - 1, buf, 1024, 0),
			 -EIO);
	assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_READ, DEV_SIZE / 512, NULL, 512, 0), -EIO);
	assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_READ, UINT64_MAX / 256, NULL, 512, 0), -EIO);
	/* a READ longer than the client's buffer is malformed */
	{
		struct rnbd_io m = { .device_id = dev, .rw = RNBD_OP_READ, .bi_size = 4096 };
		uint8_t u[RNBD_IO_LEN];

		rnbd_io_encode(&m, u);
		assert_int_equal(clt_read(a, 1, 3, 0, 512, u, sizeof(u)), -EINVAL);
	}
	/* flush, FUA write, discard, write-zeroes */
	assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_FLUSH, 0, NULL, 0, 0), 0);
	assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_WRITE | RNBD_F_FUA, 8, buf, 4096, 0), 0);
	assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_WRITE_ZEROES, 8, NULL, 2048, 0), 0);
	assert_int_equal(rnbd_io(a, 1, 4, dev, RNBD_OP_READ, 8, NULL, 4096, 0), 0);
	{
		uint8_t z[2048] = { 0 };

		assert_memory_equal(a->mem, z, 2048);
		assert_memory_equal(a->mem + 2048, buf, 2048);
	}
	/* on a file, write-zeroes punches a hole unless NOUNMAP keeps the
	 * range allocated (the loop driver's rule) */
	{
		int fd = open(s->file, O_RDWR);
		uint8_t z[4096] = { 0 };

		assert_true(fd >= 0);
		if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, DEV_SIZE, 4096) == 0) {
			assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_WRITE, 64, buf, 4096, 0), 0);
			assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_WRITE, 72, buf, 4096, 0), 0);
			struct stat st0, st1;

			assert_int_equal(fstat(fd, &st0), 0);
			assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_WRITE_ZEROES, 64, NULL, 4096, 0), 0);
			assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_WRITE_ZEROES | RNBD_F_NOUNMAP, 72,
						 NULL, 4096, 0), 0);
			/* one 4 KiB block let go, the other kept (zeroed: an
			 * unwritten extent, which SEEK_DATA calls a hole) */
			assert_int_equal(fstat(fd, &st1), 0);
			assert_int_equal(st0.st_blocks - st1.st_blocks, 8);
			assert_int_equal(rnbd_io(a, 1, 4, dev, RNBD_OP_READ, 64, NULL, 4096, 0), 0);
			assert_memory_equal(a->mem, z, 4096);
			assert_int_equal(rnbd_io(a, 1, 4, dev, RNBD_OP_READ, 72, NULL, 4096, 0), 0);
			assert_memory_equal(a->mem, z, 4096);
		}
		close(fd);
	}
	assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_SECURE_ERASE, 0, NULL, 4096, 0), -EOPNOTSUPP);
	assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_WRITE_ZEROES, 0, NULL, 100, 0), -EINVAL);
	/* an unknown op is malformed; unknown flags are ignored (the kernel
	 * server since 6.5): the write lands */
	assert_int_equal(rnbd_io(a, 1, 3, dev, 7, 0, NULL, 0, 0), -EINVAL);
	memset(buf, 0xa5, 512);
	assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_WRITE | (1u << 20) | RNBD_F_FUA, 16, buf,
				 512, 0), 0);
	assert_int_equal(rnbd_io(a, 1, 4, dev, RNBD_OP_READ | (1u << 21), 16, NULL, 512, 0), 0);
	assert_memory_equal(a->mem, buf, 512);
	/* a session going takes its writer with it */
	clt_close(a);
	wait_sessions(s, 1);
	c = clt_new(s, 42);
	assert_int_equal(clt_connect(c, 1), 0);
	assert_int_equal(clt_info(c, "c"), 0);
	assert_int_equal(rnbd_open(c, "disk", RNBD_ACCESS_RW, &r), 0);
	/* the same name twice in a session is the same device */
	assert_int_equal(rnbd_open(c, "disk", RNBD_ACCESS_RW, &r), 0);
	assert_int_equal(r.device_id, 0);
	clt_close(c);
	clt_close(b);
	wait_sessions(s, 0);
	srv_stop(s);
}

/* The same rules with IO threads: what would block (flush, FUA,
 * write-zeroes, discard) goes to a worker and is answered the same. */
static void test_rnbd_rules_io_threads(void **state)
{
	harness_io_threads = 2;
	test_rnbd_rules(state);
	harness_io_threads = 0;
}

/* Pages not in the page cache are read by a worker (RWF_NOWAIT fails on
 * the loop's thread), byte-exact; a flush too; the export counts them. */
static void test_io_threads_cache_miss(void **state)
{
	struct tsrv *s;
	struct tclt *a;
	struct rnbd_export_info ei;
	uint32_t dev, len = 65536;
	uint8_t *pat = malloc(len);
	int fd;

	(void)state;
	harness_io_threads = 3;
	s = srv_start(8, 128 << 10, false, 0);
	harness_io_threads = 0;
	a = good_session(s, 50, "m", 2, RNBD_ACCESS_RW, &dev);
	for (uint32_t i = 0; i < len; i++)
		pat[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_WRITE, 64, pat, len, 0), 0);
	assert_int_equal(rnbd_io(a, 1, 3, dev, RNBD_OP_FLUSH, 0, NULL, 0, 0), 0);
	/* out of the page cache: written back, then dropped */
	fd = open(s->file, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(fdatasync(fd), 0);
	assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
	memset(a->mem, 0xee, len);
	assert_int_equal(rnbd_io(a, 1, 4, dev, RNBD_OP_READ, 64, NULL, len, 0), 0);
	assert_memory_equal(a->mem, pat, len);
	pthread_mutex_lock(&s->mu);
	assert_int_equal(rnbd_srv_io_threads(s->rnbd), 3);
	assert_int_equal(rnbd_srv_export_get(s->rnbd, 0, &ei), 0);
	pthread_mutex_unlock(&s->mu);
	assert_string_equal(ei.name, "disk");
	/* the flush and (on a file system that evicts on request) the read */
	assert_true(ei.queued >= 1);
	assert_int_equal(ei.flushes, 1);
	assert_int_equal(ei.reads, 1);
	assert_int_equal(ei.read_bytes, len);
	assert_int_equal(ei.writes, 1);
	assert_int_equal(ei.errors, 0);
	clt_close(a);
	wait_sessions(s, 0);
	srv_stop(s);
	free(pat);
}

static volatile sig_atomic_t alarms, stop_flag;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

/* rnbd_clt_open against the server with a signal every 50 us, as a stop
 * signal and SIGCONT (^Z, fg) or a profiler would deliver them: every
 * open succeeds.  Then the stop flag is set: the open gives up, EINTR. */
static void test_open_interrupted(void **state)
{
	struct itimerval it = { { 0, 50 }, { 0, 50 } }, off = { 0 };
	struct sigaction sa = { .sa_handler = on_alarm };	/* no SA_RESTART */
	struct rtrs_clt_opts o;
	struct rtrs_clt *clt;
	struct rnbd_clt_dev *d;
	struct tsrv *s;
	struct xuri u;
	sigset_t set;
	char err[256], uri[64];

	(void)state;
	/* the server's thread never takes the signal */
	sigemptyset(&set);
	sigaddset(&set, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	s = srv_start(8, 64 << 10, false, 0);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%u", s->port);
	assert_int_equal(xuri_parse(uri, 0, &u, err, sizeof(err)), 0);
	rtrs_clt_opts_default(&o);
	o.sessname = "intr";
	o.connections = 1;
	o.stop = &stop_flag;
	clt = rtrs_clt_open(&o, &u, 1, NULL, NULL, err, sizeof(err));
	assert_non_null(clt);
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	/* 50 opens at least, and on as long as it takes 50 signals */
	for (int i = 0; i < 50 || alarms < 50; i++) {
		assert_true(i < 100000);
		d = rnbd_clt_open(clt, "disk", RNBD_ACCESS_RO, TMO, err, sizeof(err));
		if (!d)
			fail_msg("open %d: %s", i, err);
		assert_int_equal(rnbd_clt_close(d, TMO), 0);
	}
	stop_flag = 1;
	d = rnbd_clt_open(clt, "disk", RNBD_ACCESS_RO, TMO, err, sizeof(err));
	assert_null(d);
	assert_int_equal(errno, EINTR);
	setitimer(ITIMER_REAL, &off, NULL);
	signal(SIGALRM, SIG_IGN);	/* one still on its way (TSan delivers late) */
	rtrs_clt_close(clt);
	wait_sessions(s, 0);
	srv_stop(s);
}

static void fua_done(void *priv, int err)
{
	*(int *)priv = err;
}

/* FUA goes with a WRITE only: the kernel's block layer fails a bio of any
 * other op that carries REQ_FUA, and rnbd-server passes the flag on. */
static void test_fua_write_only(void **state)
{
	static const unsigned ops[] = { RNBD_OP_READ, RNBD_OP_FLUSH, RNBD_OP_DISCARD,
					RNBD_OP_WRITE_ZEROES };
	static uint8_t buf[4096];
	struct rtrs_clt_opts o;
	struct rtrs_clt *clt;
	struct rnbd_clt_dev *d;
	struct tsrv *s;
	struct xuri u;
	char err[256], uri[64];

	(void)state;
	s = srv_start(8, 64 << 10, false, 0);
	snprintf(uri, sizeof(uri), "tcp://127.0.0.1:%u", s->port);
	assert_int_equal(xuri_parse(uri, 0, &u, err, sizeof(err)), 0);
	rtrs_clt_opts_default(&o);
	o.sessname = "fua";
	o.connections = 1;
	clt = rtrs_clt_open(&o, &u, 1, NULL, NULL, err, sizeof(err));
	assert_non_null(clt);
	d = rnbd_clt_open(clt, "disk", RNBD_ACCESS_RO, TMO, err, sizeof(err));
	if (!d)
		fail_msg("open: %s", err);
	for (unsigned i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		assert_int_equal(rnbd_clt_submit(d, ops[i], RNBD_F_FUA, 0,
						 ops[i] == RNBD_OP_READ ? buf : NULL,
						 ops[i] == RNBD_OP_FLUSH ? 0 : 4096, NULL, NULL),
				 -EINVAL);
	assert_int_equal(rnbd_clt_busy(d), 0);
	assert_int_equal(rnbd_clt_close(d, TMO), 0);
	/* ...and a WRITE takes it */
	uint8_t *wbuf = aligned_alloc(4096, 4096);
	int res = 1;
	uint64_t end = xtime_ns() + 10 * XTIME_NS_PER_S;

	assert_non_null(wbuf);
	memset(wbuf, 0x5a, 4096);
	assert_int_equal(rtrs_clt_add_mem(clt, wbuf, 4096, err, sizeof(err)), 0);
	d = rnbd_clt_open(clt, "disk", RNBD_ACCESS_RW, TMO, err, sizeof(err));
	if (!d)
		fail_msg("open rw: %s", err);
	assert_int_equal(rnbd_clt_submit(d, RNBD_OP_WRITE, RNBD_F_FUA, 0, wbuf, 4096, fua_done, &res),
			 0);
	while (res == 1 && xtime_ns() < end) {
		rtrs_clt_poll(clt, xtime_ns());
		rnbd_clt_kick(d);
		usleep(100);
	}
	assert_int_equal(res, 0);
	assert_int_equal(rnbd_clt_close(d, TMO), 0);
	assert_int_equal(rtrs_clt_del_mem(clt, wbuf), 0);
	free(wbuf);
	rtrs_clt_close(clt);
	wait_sessions(s, 0);
	srv_stop(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exports),
		cmocka_unit_test(test_rnbd_rules),
		cmocka_unit_test(test_rnbd_rules_io_threads),
		cmocka_unit_test(test_io_threads_cache_miss),
		cmocka_unit_test(test_open_interrupted),
		cmocka_unit_test(test_fua_write_only),
	};

	xlog_init("test_rnbd_srv");	/* XPRT_LOG=info: why paths close */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
