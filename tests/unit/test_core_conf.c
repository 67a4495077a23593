#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/conf.h"
#include "core/node.h"

static struct xnode *parse(const char *s, char *err, size_t errlen)
{
	return xconf_parse(s, strlen(s), err, errlen);
}

static void bad(const char *s, const char *want)
{
	char err[256] = "";

	assert_null(parse(s, err, sizeof(err)));
	assert_string_equal(err, want);
}

static void test_good(void **state)
{
	static const char doc[] =
		"# session config\n"
		"name: s1\n"
		"port: 7000\n"
		"paths:\n"
		"  - addr: tcp://198.18.0.1:7000\n"
		"    weight: 2\n"
		"  - addr: tcp://198.18.0.2:7000\n"
		"limits: {depth: 128, size: 4k}\n"
		"quoted: \"a: b\"\n"
		"empty:\n";
	char err[256] = "";
	const struct xnode *paths, *p, *lim;
	struct xnode *n = parse(doc, err, sizeof(err));
	uint64_t v;

	(void)state;
	assert_non_null(n);
	assert_string_equal(err, "");
	assert_int_equal(xnode_type(n), XN_MAP);
	assert_int_equal(xnode_len(n), 6);
	assert_string_equal(xnode_str(xnode_get(n, "name")), "s1");
	assert_int_equal(xnode_line(xnode_get(n, "name")), 2);
	/* Numbers stay strings until the consumer says what they are. */
	assert_int_equal(xnode_type(xnode_get(n, "port")), XN_STR);
	assert_int_equal(xnode_to_u64(xnode_get(n, "port"), 1, 65535, &v, err, sizeof(err)), 0);
	assert_true(v == 7000);

	paths = xnode_get(n, "paths");
	assert_int_equal(xnode_type(paths), XN_LIST);
	assert_int_equal(xnode_line(paths), 4);
	assert_int_equal(xnode_len(paths), 2);
	p = xnode_at(paths, 1, NULL);
	assert_int_equal(xnode_line(p), 7);
	assert_string_equal(xnode_str(xnode_get(p, "addr")), "tcp://198.18.0.2:7000");
	assert_int_equal(xnode_line(xnode_get(xnode_at(paths, 0, NULL), "weight")), 6);

	lim = xnode_get(n, "limits");
	assert_int_equal(xnode_to_size(xnode_get(lim, "size"), 0, 1 << 20, &v, err, sizeof(err)), 0);
	assert_true(v == 4096);
	assert_string_equal(xnode_str(xnode_get(n, "quoted")), "a: b");
	assert_string_equal(xnode_str(xnode_get(n, "empty")), "");
	xnode_free(n);
}

static void test_empty(void **state)
{
	static const char *const docs[] = { "", "\n", "# only a comment\n", "---\n", "--- ~\n",
					    "---\n...\n" };
	char err[64];

	(void)state;
	for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
		struct xnode *n = parse(docs[i], err, sizeof(err));

		assert_non_null(n);
		assert_int_equal(xnode_type(n), XN_MAP);
		assert_int_equal(xnode_len(n), 0);
		xnode_free(n);
	}
}

static void test_errors(void **state)
{
	(void)state;
	bad("a: 1\nb: 2\na: 3\n", "line 3 column 1: duplicate key 'a' (first at line 1)");
	bad("x:\n  k: 1\n  j: 2\n  k: 3\n", "line 4 column 3: duplicate key 'k' (first at line 2)");
	bad("a: &anc 1\nb: 2\n", "line 1 column 4: anchors (&anc) are not supported");
	bad("a: 1\nb: *anc\n", "line 2 column 4: aliases (*anc) are not supported");
	bad("base: &b {x: 1}\n", "line 1 column 7: anchors (&b) are not supported");
	bad("a: [1, 2\n",
	    "line 2 column 1: did not find expected ',' or ']' (while parsing a flow sequence at line 1)");
	bad("a:\n  b: 1\n c: 2\n",
	    "line 3 column 2: did not find expected key (while parsing a block mapping at line 1)");
	bad("a: b: c\n", "line 1 column 5: mapping values are not allowed in this context");
	bad("- 1\n- 2\n", "line 1 column 1: the top level must be a mapping");
	bad("just text\n", "line 1 column 1: the top level must be a mapping");
	bad("a: 1\n---\nb: 2\n", "line 2 column 1: multiple documents are not supported");
	bad("? [a]\n: 1\n", "line 1 column 3: a key must be a scalar, not a list");
	bad("a: \"x\\0y\"\n", "line 1 column 4: NUL character in a value");
	bad("a: 1\nb: \x01\n", "line 2 column 4: control characters are not allowed");
	bad("a: 1\nb: \xff\n", "line 2 column 4: invalid leading UTF-8 octet");
}

static void test_limits(void **state)
{
	char err[128];
	struct xnode *n;
	size_t cap = 1 << 20, off = 0;
	char *doc = malloc(cap);

	(void)state;
	/* 32 levels deep is fine, 33 is not. */
	for (int depth = 32; depth <= 33; depth++) {
		off = 0;
		for (int i = 1; i < depth; i++)
			off += (size_t)sprintf(doc + off, "%*sk:\n", 2 * (i - 1), "");
		sprintf(doc + off, "%*sk: v\n", 2 * (depth - 1), "");
		n = parse(doc, err, sizeof(err));
		if (depth == 32) {
			assert_non_null(n);
			xnode_free(n);
		} else {
			assert_null(n);
			assert_string_equal(err, "line 33 column 65: nesting deeper than 32 levels");
		}
	}
	/* Flow style reaches the limit too. */
	off = (size_t)sprintf(doc, "a: ");
	for (int i = 0; i < 40; i++)
		doc[off++] = '[';
	doc[off] = '\0';
	assert_null(parse(doc, err, sizeof(err)));
	assert_string_equal(err, "line 1 column 35: nesting deeper than 32 levels");

	/* The root and the list count: 99998 items fit, 99999 do not. */
	for (int items = 99998; items <= 99999; items++) {
		off = (size_t)sprintf(doc, "a: [");
		for (int i = 0; i < items; i++)
			off += (size_t)sprintf(doc + off, "%s1", i ? "," : "");
		sprintf(doc + off, "]\n");
		n = parse(doc, err, sizeof(err));
		if (items == 99998) {
			assert_non_null(n);
			assert_int_equal(xnode_len(xnode_get(n, "a")), 99998);
			xnode_free(n);
		} else {
			assert_null(n);
			assert_string_equal(err, "line 1 column 200001: too many nodes (max 100000)");
		}
	}
	free(doc);
}

static void test_load(void **state)
{
	char path[] = "/tmp/test_core_conf.XXXXXX", err[512], want[512];
	struct xnode *n;
	int fd;

	(void)state;
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "a: 1\nb: [\n", 10), 10);
	n = xconf_load(path, err, sizeof(err));
	assert_null(n);
	assert_int_equal(errno, EINVAL);
	snprintf(want, sizeof(want),
		 "%s: line 3 column 1: did not find expected node content (while parsing a flow node at line 3)",
		 path);
	assert_string_equal(err, want);

	assert_int_equal(ftruncate(fd, 0), 0);
	assert_int_equal(pwrite(fd, "a: 1\n", 5, 0), 5);
	n = xconf_load(path, err, sizeof(err));
	assert_non_null(n);
	assert_string_equal(xnode_str(xnode_get(n, "a")), "1");
	xnode_free(n);

	/* Exactly 4 MiB of comment is accepted, one more byte is not. */
	assert_int_equal(ftruncate(fd, 0), 0);
	{
		char *big = malloc(XCONF_MAX_FILE + 1);

		memset(big, '#', XCONF_MAX_FILE + 1);
		assert_int_equal(pwrite(fd, big, XCONF_MAX_FILE, 0), XCONF_MAX_FILE);
		n = xconf_load(path, err, sizeof(err));
		assert_non_null(n);
		xnode_free(n);
		assert_int_equal(pwrite(fd, big, 1, XCONF_MAX_FILE), 1);
		free(big);
	}
	n = xconf_load(path, err, sizeof(err));
	assert_null(n);
	assert_int_equal(errno, EFBIG);
	snprintf(want, sizeof(want), "%s: file too large (max 4 MiB)", path);
	assert_string_equal(err, want);
	close(fd);
	unlink(path);

	n = xconf_load(path, err, sizeof(err));
	assert_null(n);
	assert_int_equal(errno, ENOENT);
	snprintf(want, sizeof(want), "%s: No such file or directory", path);
	assert_string_equal(err, want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),   cmocka_unit_test(test_empty),
		cmocka_unit_test(test_errors), cmocka_unit_test(test_limits),
		cmocka_unit_test(test_load),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
