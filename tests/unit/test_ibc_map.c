/* FILE -> (ino, gen), the pages a sparse copy holds, and the responder's
 * export: prefix replies, ESTALE, confinement (no '..', no symbolic link
 * followed, nothing outside the root served), new and replaced files. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "ibcache/ibc_map.h"

#define PS 4096u

static char root[256], outside[256];

/* A rescan is waited for as long as it takes (it takes milliseconds):
 * what these tests look at is what it finds, not when. */
static const struct ibc_export_opts sync_scan = { .scan_wait_ns = 10000000000ull };

static void mkfile(const char *rel, size_t size, uint8_t seed)
{
	char p[512];
	uint8_t *b = malloc(size ? size : 1);
	int fd;

	for (size_t i = 0; i < size; i++)
		b[i] = (uint8_t)(seed + i * 7 + (i >> 12));
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, b, size), (ssize_t)size);
	close(fd);
	free(b);
}

/* Punches page-sized holes: pages listed become holes. */
static void punch(const char *rel, const uint64_t *pages, int n)
{
	char p[512];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", root, rel);
	fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					   (off_t)(pages[i] * PS), PS), 0);
	close(fd);
}

static int setup(void **s)
{
	char p[512];

	snprintf(root, sizeof(root), "/tmp/test_ibc_map.XXXXXX");
	snprintf(outside, sizeof(outside), "/tmp/test_ibc_out.XXXXXX");
	assert_non_null(mkdtemp(root));
	assert_non_null(mkdtemp(outside));
	snprintf(p, sizeof(p), "%s/d", root);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/d/e", root);
	mkdir(p, 0755);
	return 0;
}

static int teardown(void **s)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", root, outside);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_norm(void **s)
{
	char out[64], err[256];

	assert_int_equal(ibc_path_norm("a/b/c", out, sizeof(out), err, sizeof(err)), 0);
	assert_string_equal(out, "a/b/c");
	assert_int_equal(ibc_path_norm("./a//b/./c/", out, sizeof(out), err, sizeof(err)), 0);
	assert_string_equal(out, "a/b/c");
	assert_int_equal(ibc_path_norm("a/../b", out, sizeof(out), err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'..' would leave the export"));
	assert_int_equal(ibc_path_norm("..", out, sizeof(out), err, sizeof(err)), -EINVAL);
	assert_int_equal(ibc_path_norm("/etc/passwd", out, sizeof(out), err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "relative to the export"));
	assert_int_equal(ibc_path_norm("", out, sizeof(out), err, sizeof(err)), -EINVAL);
	assert_int_equal(ibc_path_norm("./.", out, sizeof(out), err, sizeof(err)), -EINVAL);
	/* "..." and "..x" are names, not the parent */
	assert_int_equal(ibc_path_norm(".../..x", out, sizeof(out), err, sizeof(err)), 0);
	assert_string_equal(out, ".../..x");
	assert_int_equal(ibc_path_norm("aaaaaaaaaa/bbbbbbbbbb", out, 12, err, sizeof(err)),
			 -ENAMETOOLONG);
}

static void test_ino_gen(void **s)
{
	uint64_t g;

	/* FNV-1a 64: the documented rule, pinned so both ends agree forever */
	assert_true(ibc_ino("") == 0xcbf29ce484222325ull);
	assert_true(ibc_ino("a") == 0xaf63dc4c8601ec8cull);
	assert_true(ibc_ino("a/b") != ibc_ino("b/a"));
	assert_true(ibc_gen_hash(4096, 1) != ibc_gen_hash(4096, 2));
	assert_true(ibc_gen_hash(4096, 1) != ibc_gen_hash(4097, 1));
	assert_true(ibc_gen_hash(0, 0) != 0);
	assert_int_equal(ibc_gen_parse("42", 2, &g), 0);
	assert_true(g == 42);
	assert_int_equal(ibc_gen_parse("42\n", 3, &g), 0);
	assert_int_equal(ibc_gen_parse("18446744073709551615", 20, &g), 0);
	assert_true(g == UINT64_MAX);
	assert_int_equal(ibc_gen_parse("18446744073709551616", 20, &g), -EINVAL);
	assert_int_equal(ibc_gen_parse("-1", 2, &g), -EINVAL);
	assert_int_equal(ibc_gen_parse("", 0, &g), -EINVAL);
	assert_int_equal(ibc_gen_parse("4x", 2, &g), -EINVAL);
}

static int open_rel(const char *rel)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", root, rel);
	return open(p, O_RDONLY);
}

static void test_gen_fd(void **s)
{
	struct stat st;
	uint64_t g, g2;
	bool xa;
	int fd;

	mkfile("g", 10000, 1);
	fd = open_rel("g");
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(ibc_gen_fd(fd, &st, &g, &xa), 0);
	assert_false(xa);
	assert_true(g == ibc_gen_hash(10000, (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
					       (uint64_t)st.st_mtim.tv_nsec));
	if (fsetxattr(fd, IBC_GEN_XATTR, "77", 2, 0) < 0) {
		close(fd);
		skip();		/* no user xattrs on this file system */
	}
	assert_int_equal(ibc_gen_fd(fd, &st, &g2, &xa), 0);
	assert_true(xa);
	assert_true(g2 == 77);
	assert_int_equal(fsetxattr(fd, IBC_GEN_XATTR, "nope", 4, 0), 0);
	assert_int_equal(ibc_gen_fd(fd, &st, &g2, &xa), -EINVAL);
	close(fd);
}

static void test_held(void **s)
{
	static const uint64_t holes[] = { 3, 7, 8 };
	int fd;

	/* 10 pages and a half; holes at 3, 7, 8 */
	mkfile("sparse", 10 * PS + 100, 5);
	punch("sparse", holes, 3);
	fd = open_rel("sparse");
	{
		/* a file system without holes at page grain: nothing to check */
		off_t h = lseek(fd, 0, SEEK_HOLE);

		if (h != 3 * PS) {
			close(fd);
			skip();
		}
	}
	assert_int_equal(ibc_pages_held(fd, 10 * PS + 100, PS, 0, 10, false), 3);
	assert_int_equal(ibc_pages_held(fd, 10 * PS + 100, PS, 3, 4, false), 0);
	assert_int_equal(ibc_pages_held(fd, 10 * PS + 100, PS, 4, 10, false), 3);
	/* the last page is partial: held, and nothing past the end */
	assert_int_equal(ibc_pages_held(fd, 10 * PS + 100, PS, 9, 5, false), 2);
	assert_int_equal(ibc_pages_held(fd, 10 * PS + 100, PS, 11, 1, false), 0);
	assert_int_equal(ibc_pages_held(fd, 10 * PS + 100, PS, UINT64_MAX / PS, 1, false), 0);
	/* 512-byte pages inside a 4 KiB hole are all missing */
	assert_int_equal(ibc_pages_held(fd, 10 * PS + 100, 512, 8, 30, false), 16);
	close(fd);
}

/* resident_only: what is in the page cache, nothing else (a clean file
 * dropped with POSIX_FADV_DONTNEED is not, its data notwithstanding). */
static void test_resident(void **s)
{
	int fd;

	mkfile("res", 8 * PS, 4);
	fd = open_rel("res");
	assert_int_equal(fsync(fd), 0);
	{
		uint8_t b[PS];

		for (int i = 0; i < 8; i++)
			assert_int_equal(pread(fd, b, PS, (off_t)i * PS), PS);
	}
	assert_int_equal(ibc_pages_held(fd, 8 * PS, PS, 0, 8, true), 8);
	/* the whole file: a large folio is dropped only whole */
	assert_int_equal(posix_fadvise(fd, 0, 8 * PS, POSIX_FADV_DONTNEED), 0);
	{
		int64_t n = ibc_pages_held(fd, 8 * PS, PS, 0, 8, true);

		/* a file system that keeps them anyway: nothing to check */
		if (n == 8) {
			close(fd);
			skip();
		}
		assert_int_equal(n, 0);
	}
	/* without the option the data is what counts */
	assert_int_equal(ibc_pages_held(fd, 8 * PS, PS, 0, 8, false), 8);
	close(fd);
}

static void test_read_zero_tail(void **s)
{
	uint8_t buf[2 * PS];
	int fd;

	mkfile("tail", PS + 10, 9);
	fd = open_rel("tail");
	memset(buf, 0xee, sizeof(buf));
	assert_int_equal(ibc_pages_read(fd, PS + 10, PS, 1, 1, buf), 0);
	assert_int_equal(buf[0], (uint8_t)(9 + PS * 7 + 1));
	for (size_t i = 10; i < PS; i++)
		assert_int_equal(buf[i], 0);
	close(fd);
}

/* A file cut below the size its reader took: an error, never zeros for
 * the bytes that are gone (fetch: the origin shrank; serve: the copy) */
static void test_read_cut(void **s)
{
	uint8_t buf[5 * PS];
	int fd;

	mkfile("cut", 3 * PS, 4);
	fd = open_rel("cut");
	assert_int_equal(ibc_pages_read(fd, 5 * PS, PS, 0, 5, buf), -ENODATA);
	assert_int_equal(ibc_pages_read(fd, 5 * PS, PS, 3, 2, buf), -ENODATA);
	assert_int_equal(ibc_pages_read(fd, 3 * PS + 10, PS, 3, 1, buf), -ENODATA);
	/* what is still there reads as before */
	assert_int_equal(ibc_pages_read(fd, 5 * PS, PS, 1, 2, buf), 0);
	assert_int_equal(buf[0], (uint8_t)(4 + PS * 7 + 1));
	close(fd);
}

static struct gfcc_req req_for(const char *rel, uint64_t gen, uint64_t first, uint32_t n)
{
	struct gfcc_req q = { .cmd = GFCC_CMD_READ_REQ, .psize = PS, .qkey = 5, .id = 1 };

	q.obj.ino = ibc_ino(rel);
	q.obj.gen = gen;
	q.npblk = 1;
	q.npage = n;
	q.pblk[0] = (struct gfcc_pblk){ first, n };
	return q;
}

static uint64_t gen_of(const char *rel)
{
	struct stat st;
	uint64_t g;
	bool xa;
	int fd = open_rel(rel);

	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(ibc_gen_fd(fd, &st, &g, &xa), 0);
	close(fd);
	return g;
}

static void test_export(void **s)
{
	static const uint64_t holes[] = { 2 };
	struct ibc_export *x;
	struct gfcc_req q;
	uint8_t *buf = malloc(256 * PS);
	char err[256], p[512], o[512];
	uint64_t g, size = 0;

	mkfile("d/e/f", 5 * PS, 3);
	punch("d/e/f", holes, 1);
	snprintf(o, sizeof(o), "%s/secret", outside);
	assert_int_equal(symlink(o, (snprintf(p, sizeof(p), "%s/link", root), p)), 0);
	{
		int fd = open(o, O_WRONLY | O_CREAT, 0600);

		assert_int_equal(write(fd, "secret", 6), 6);
		close(fd);
	}
	x = ibc_export_open(root, &sync_scan, err, sizeof(err));
	assert_non_null(x);
	g = gen_of("d/e/f");
	q = req_for("d/e/f", g, 0, 5);
	/* a prefix: pages 0, 1; page 2 is a hole */
	assert_int_equal(ibc_export_read(x, &q, buf, 1, &size), 2);
	assert_int_equal(buf[0], 3);
	assert_int_equal(size, 5 * PS);	/* the copy's, told in the reply */
	q = req_for("d/e/f", g, 3, 2);
	assert_int_equal(ibc_export_read(x, &q, buf, 1, &size), 2);
	q = req_for("d/e/f", g + 1, 0, 1);
	assert_int_equal(ibc_export_read(x, &q, buf, 1, &size), -ESTALE);
	q = req_for("nope", g, 0, 1);
	assert_int_equal(ibc_export_read(x, &q, buf, 1, &size), -ENOENT);
	/* the link's target is outside: never indexed, never served */
	q = req_for("link", 0, 0, 1);
	assert_int_equal(ibc_export_read(x, &q, buf, 1, &size), -ENOENT);
	{
		struct ibc_export_stats st;

		ibc_export_get_stats(x, &st);
		assert_true(st.skipped >= 1);
	}
	/* a file made after the scan is found by the rescan a miss makes */
	mkfile("late", PS, 1);
	q = req_for("late", gen_of("late"), 0, 1);
	assert_int_equal(ibc_export_read(x, &q, buf, 2000000000ull, &size), 1);
	/* rewritten in place: the generation moves with it */
	mkfile("late", 2 * PS, 2);
	q = req_for("late", gen_of("late"), 0, 2);
	assert_int_equal(ibc_export_read(x, &q, buf, 2000000001ull, &size), 2);
	assert_int_equal(buf[0], 2);
	assert_int_equal(size, 2 * PS);
	ibc_export_close(x);
	free(buf);
}

static void test_export_replaced(void **s)
{
	struct ibc_export *x;
	struct gfcc_req q;
	uint8_t buf[PS];
	char err[256], a[512], b[512];
	uint64_t size;

	mkfile("r", PS, 1);
	mkfile("r.new", PS, 99);
	x = ibc_export_open(root, &sync_scan, err, sizeof(err));
	q = req_for("r", gen_of("r"), 0, 1);
	assert_int_equal(ibc_export_read(x, &q, buf, 10, &size), 1);
	assert_int_equal(buf[0], 1);
	snprintf(a, sizeof(a), "%s/r.new", root);
	snprintf(b, sizeof(b), "%s/r", root);
	assert_int_equal(rename(a, b), 0);
	/* a second later the name is looked at again: the new file is the
	 * one served, under its own generation */
	q = req_for("r", gen_of("r"), 0, 1);
	assert_int_equal(ibc_export_read(x, &q, buf, 2000000000ull, &size), 1);
	assert_int_equal(buf[0], 99);
	ibc_export_close(x);
}

/* Two names with one FNV-1a 64 (0x734a0e5c974adc29; found offline by
 * Floyd's cycle search for two 13-byte names whose hashes agree above
 * the low 6 bits, then a last byte each that cancels the rest -- the
 * last step depends on h ^ byte alone), the same size and mtime, so the
 * same generation too: a request for either is answered ENOENT, never
 * with the other's bytes, whichever readdir() gives first; once one is
 * gone the other is served. */
static void test_export_collision(void **s)
{
	static const char *const name[2] = { "cyrmkzup3aeydA", "cf51og4zffrgfj" };
	const struct timespec t[2] = { { 1700000000, 5 }, { 1700000000, 5 } };
	struct ibc_export_stats st;
	struct ibc_export *x;
	struct gfcc_req q;
	uint8_t buf[PS];
	char err[256], p[512];
	const char *a, *b;
	uint64_t size;

	assert_true(ibc_ino(name[0]) == ibc_ino(name[1]));
	assert_true(ibc_ino(name[0]) == 0x734a0e5c974adc29ull);
	for (int i = 0; i < 2; i++) {
		mkfile(name[i], PS, (uint8_t)(10 + i));
		snprintf(p, sizeof(p), "%s/%s", root, name[i]);
		assert_int_equal(utimensat(AT_FDCWD, p, t, 0), 0);
	}
	mkfile("other", PS, 7);
	assert_true(gen_of(name[0]) == gen_of(name[1]));
	x = ibc_export_open(root, &sync_scan, err, sizeof(err));
	assert_non_null(x);
	for (int i = 0; i < 2; i++) {
		q = req_for(name[i], gen_of(name[i]), 0, 1);
		assert_int_equal(ibc_export_read(x, &q, buf, 1, &size), -ENOENT);
	}
	q = req_for("other", gen_of("other"), 0, 1);
	assert_int_equal(ibc_export_read(x, &q, buf, 1, &size), 1);
	ibc_export_get_stats(x, &st);
	assert_int_equal(st.collisions, 2);
	assert_true(ibc_export_collision(x, &a, &b));
	assert_true((!strcmp(a, name[0]) && !strcmp(b, name[1])) ||
		    (!strcmp(a, name[1]) && !strcmp(b, name[0])));
	/* a rescan finds the same: still neither, counted once */
	q = req_for(name[1], gen_of(name[1]), 0, 1);
	{
		uint64_t scans = st.scans;

		assert_int_equal(ibc_export_read(x, &q, buf, 2000000000ull, &size), -ENOENT);
		ibc_export_get_stats(x, &st);
		assert_int_equal(st.scans, scans + 1);
		assert_int_equal(st.collisions, 2);
	}
	/* one removed: the other is the only path with the ino again */
	snprintf(p, sizeof(p), "%s/%s", root, name[0]);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(ibc_export_read(x, &q, buf, 4000000000ull, &size), 1);
	assert_int_equal(buf[0], 11);
	ibc_export_get_stats(x, &st);
	assert_int_equal(st.collisions, 0);
	assert_false(ibc_export_collision(x, &a, &b));
	ibc_export_close(x);
	snprintf(p, sizeof(p), "%s/%s", root, name[1]);
	unlink(p);
	snprintf(p, sizeof(p), "%s/other", root);
	unlink(p);
}

/* A rescan does not stop the caller: it runs on its own thread while the
 * old index serves; the miss that started it answers ENOENT once its wait
 * is up, a later request finds the new file, and closing the export with
 * a rescan under way waits for it and leaks nothing. */
#define MANY 20000

static void test_export_rescan_in_background(void **s)
{
	struct ibc_export_opts o = { .scan_wait_ns = 1, .rescan_ns = 1000 };
	struct ibc_export_stats st;
	struct ibc_export *x;
	struct gfcc_req q;
	uint8_t buf[PS];
	char err[256], p[512];
	uint64_t size, files, t = 2000000000ull;
	int rc = -ENOENT;

	/* enough files that a walk takes milliseconds, not the microseconds
	 * the caller needs to look whether it is done */
	snprintf(p, sizeof(p), "%s/many", root);
	assert_int_equal(mkdir(p, 0700), 0);
	for (int i = 0; i < MANY; i++) {
		snprintf(p, sizeof(p), "%s/many/%d", root, i);
		int fd = open(p, O_CREAT | O_WRONLY, 0600);

		assert_true(fd >= 0);
		close(fd);
	}
	mkfile("bg1", PS, 5);
	x = ibc_export_open(root, &o, err, sizeof(err));
	assert_non_null(x);
	ibc_export_get_stats(x, &st);
	assert_true(st.files >= MANY + 1);
	files = st.files;
	mkfile("bg2", PS, 6);
	q = req_for("bg2", gen_of("bg2"), 0, 1);
	/* the rescan starts; the miss does not wait for it */
	assert_int_equal(ibc_export_read(x, &q, buf, t, &size), -ENOENT);
	q = req_for("bg1", gen_of("bg1"), 0, 1);
	assert_int_equal(ibc_export_read(x, &q, buf, t, &size), 1);
	assert_int_equal(buf[0], 5);
	/* within the same rescan period: found once the thread is done */
	q = req_for("bg2", gen_of("bg2"), 0, 1);
	for (int i = 0; i < 5000 && rc == -ENOENT; i++) {
		rc = ibc_export_read(x, &q, buf, t + 1, &size);
		if (rc == -ENOENT)
			usleep(1000);
	}
	assert_int_equal(rc, 1);
	assert_int_equal(buf[0], 6);
	ibc_export_get_stats(x, &st);
	assert_int_equal(st.scans, 2);
	assert_int_equal(st.files, files + 1);
	/* rescan_ns (1 us) is long past, but not ten times what a walk of
	 * 20000 files took: a miss does not walk them again yet */
	q = req_for("nope", 1, 0, 1);
	assert_int_equal(ibc_export_read(x, &q, buf, t + 2000, &size), -ENOENT);
	ibc_export_get_stats(x, &st);
	assert_false(st.rescanning);
	assert_int_equal(st.scans, 2);
	/* closed while a rescan runs (or before it is taken in) */
	q = req_for("nope", 1, 0, 1);
	assert_int_equal(ibc_export_read(x, &q, buf, 1000 * t, &size), -ENOENT);
	ibc_export_get_stats(x, &st);
	assert_true(st.rescanning);
	ibc_export_close(x);
	for (int i = 1; i <= 2; i++) {
		snprintf(p, sizeof(p), "%s/bg%d", root, i);
		unlink(p);
	}
	for (int i = 0; i < MANY; i++) {
		snprintf(p, sizeof(p), "%s/many/%d", root, i);
		unlink(p);
	}
	snprintf(p, sizeof(p), "%s/many", root);
	rmdir(p);
}

static void test_export_missing_root(void **s)
{
	char err[256];

	assert_null(ibc_export_open("/nonexistent/ibc", NULL, err, sizeof(err)));
	assert_non_null(strstr(err, "/nonexistent/ibc"));
}

int main(void)
{
	const struct CMUnitTest t[] = {
		cmocka_unit_test(test_norm),
		cmocka_unit_test(test_ino_gen),
		cmocka_unit_test(test_gen_fd),
		cmocka_unit_test(test_held),
		cmocka_unit_test(test_resident),
		cmocka_unit_test(test_read_zero_tail),
		cmocka_unit_test(test_read_cut),
		cmocka_unit_test(test_export),
		cmocka_unit_test(test_export_replaced),
		cmocka_unit_test(test_export_collision),
		cmocka_unit_test(test_export_rescan_in_background),
		cmocka_unit_test(test_export_missing_root),
	};

	return cmocka_run_group_tests(t, setup, teardown);
}
