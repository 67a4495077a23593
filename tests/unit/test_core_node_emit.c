#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/emit.h"
#include "core/node.h"

/* Emits into memory and returns the text (caller frees). */
static char *emit_str(const struct xnode *n, enum xfmt fmt)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	assert_int_equal(xemit(f, n, fmt), 0);
	fclose(f);
	return buf;
}

static void assert_emit(const struct xnode *n, enum xfmt fmt, const char *want)
{
	char *got = emit_str(n, fmt);

	assert_string_equal(got, want);
	free(got);
}

static void test_node_build(void **state)
{
	struct xnode *m = xnode_map(), *l, *c;
	const char *key;
	int prec;

	(void)state;
	assert_non_null(xnode_set_str(m, "b", "one"));
	assert_non_null(xnode_set_u64(m, "a", 2));
	assert_non_null(xnode_set_strf(m, "c", "%d-%s", 3, "x"));
	/* Replacing keeps the position. */
	c = xnode_set_i64(m, "b", -7);
	assert_non_null(c);
	assert_int_equal(xnode_len(m), 3);
	assert_ptr_equal(xnode_at(m, 0, &key), c);
	assert_string_equal(key, "b");
	assert_string_equal(xnode_key(c), "b");
	assert_int_equal(xnode_type(c), XN_I64);
	assert_true(xnode_i64(c) == -7);
	assert_true(xnode_u64(xnode_get(m, "a")) == 2);
	assert_string_equal(xnode_str(xnode_get(m, "c")), "3-x");
	assert_null(xnode_str(xnode_get(m, "a")));
	assert_null(xnode_get(m, "zz"));
	assert_null(xnode_at(m, 3, &key));
	assert_null(key);

	assert_non_null(xnode_set_f64(m, "f", 2.5, 3));
	assert_true(xnode_f64(xnode_get(m, "f"), &prec) == 2.5);
	assert_int_equal(prec, 3);
	assert_non_null(xnode_set_bool(m, "t", true));
	assert_true(xnode_bool(xnode_get(m, "t")));
	assert_int_equal(xnode_type(xnode_set_str(m, "n", NULL)), XN_NULL);
	assert_int_equal(xnode_type(xnode_set_null(m, "n2")), XN_NULL);

	l = xnode_set_list(m, "l");
	assert_non_null(xnode_push_str(l, "s"));
	assert_non_null(xnode_push_u64(l, 1));
	assert_non_null(xnode_push_i64(l, -1));
	assert_non_null(xnode_push_f64(l, 1.0, 1));
	assert_non_null(xnode_push_bool(l, false));
	assert_non_null(xnode_push_list(l));
	assert_int_equal(xnode_type(xnode_push_map(l)), XN_MAP);
	assert_int_equal(xnode_len(l), 7);
	assert_string_equal(xnode_str(xnode_at(l, 0, &key)), "s");
	assert_null(key);
	assert_null(xnode_get(l, "s")); /* not a map */
	assert_int_equal(xnode_len(xnode_get(m, "a")), 0);

	/* Wrong parent types. */
	errno = 0;
	assert_null(xnode_push_str(m, "x"));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(xnode_set_str(l, "k", "v"));
	assert_int_equal(errno, EINVAL);
	assert_null(xnode_set_u64(NULL, "k", 1));

	assert_int_equal(xnode_type(NULL), XN_NULL);
	assert_int_equal(xnode_line(xnode_get(m, "a")), 0);
	xnode_set_line(c, 12);
	assert_int_equal(xnode_line(c), 12);
	xnode_free(m);
	xnode_free(NULL);
}

/* Past 16 keys maps switch to a hash index; order and replacement must not
 * change. */
static void test_node_big_map(void **state)
{
	struct xnode *m = xnode_map();
	char key[16];
	const char *k;

	(void)state;
	for (unsigned i = 0; i < 5000; i++) {
		snprintf(key, sizeof(key), "k%u", i);
		assert_non_null(xnode_set_u64(m, key, i));
	}
	for (unsigned i = 0; i < 5000; i += 7) {
		snprintf(key, sizeof(key), "k%u", i);
		assert_non_null(xnode_set_u64(m, key, i * 2));
	}
	assert_int_equal(xnode_len(m), 5000);
	for (unsigned i = 0; i < 5000; i++) {
		const struct xnode *c = xnode_at(m, i, &k);

		snprintf(key, sizeof(key), "k%u", i);
		assert_string_equal(k, key);
		assert_ptr_equal(xnode_get(m, key), c);
		assert_true(xnode_u64(c) == (i % 7 ? i : i * 2));
	}
	assert_null(xnode_get(m, "k5000"));
	xnode_free(m);
}

static void test_node_convert(void **state)
{
	struct xnode *m = xnode_map(), *l = xnode_set_list(m, "list");
	char err[128];
	uint64_t v = 0;
	bool b = false;

	(void)state;
	xnode_set_str(m, "port", "7000");
	xnode_set_str(m, "big", "99999");
	xnode_set_str(m, "junk", "12x");
	xnode_set_str(m, "size", "4k");
	xnode_set_u64(m, "typed", 5);
	xnode_set_i64(m, "neg", -1);
	xnode_set_str(m, "yes", "yes");
	xnode_set_str(m, "maybe", "maybe");
	xnode_set_bool(m, "tb", true);
	xnode_push_str(l, "x");

	assert_int_equal(xnode_to_u64(xnode_get(m, "port"), 1, 65535, &v, err, sizeof(err)), 0);
	assert_true(v == 7000);
	assert_int_equal(xnode_to_u64(xnode_get(m, "big"), 1, 65535, &v, err, sizeof(err)), -1);
	assert_string_equal(err, "big: '99999' is too large (max 65535)");
	assert_int_equal(xnode_to_u64(xnode_get(m, "port"), 8000, 9000, &v, err, sizeof(err)), -1);
	assert_string_equal(err, "port: '7000' is too small (min 8000)");
	assert_int_equal(xnode_to_u64(xnode_get(m, "junk"), 0, 100, &v, err, sizeof(err)), -1);
	assert_string_equal(err, "junk: invalid number '12x'");
	assert_int_equal(xnode_to_u64(xnode_get(m, "size"), 0, 100000, &v, err, sizeof(err)), -1);
	assert_string_equal(err, "size: invalid number '4k'");
	assert_int_equal(xnode_to_size(xnode_get(m, "size"), 0, 100000, &v, err, sizeof(err)), 0);
	assert_true(v == 4096);
	assert_int_equal(xnode_to_size(xnode_get(m, "size"), 0, 1000, &v, err, sizeof(err)), -1);
	assert_string_equal(err, "size: '4k' is too large (max 1000)");
	assert_int_equal(xnode_to_size(xnode_get(m, "junk"), 0, 1000, &v, err, sizeof(err)), -1);
	assert_string_equal(err, "junk: invalid size '12x'");
	assert_int_equal(xnode_to_u64(xnode_get(m, "typed"), 0, 10, &v, err, sizeof(err)), 0);
	assert_true(v == 5);
	assert_int_equal(xnode_to_u64(xnode_get(m, "typed"), 0, 4, &v, err, sizeof(err)), -1);
	assert_string_equal(err, "typed: '5' is too large (max 4)");
	assert_int_equal(xnode_to_u64(xnode_get(m, "neg"), 0, 4, &v, err, sizeof(err)), -1);
	assert_string_equal(err, "neg: '-1' is too small (min 0)");
	assert_int_equal(xnode_to_u64(l, 0, 4, &v, err, sizeof(err)), -1);
	assert_string_equal(err, "list: expected number, got a list");
	assert_int_equal(xnode_to_u64(xnode_at(l, 0, NULL), 0, 4, &v, err, sizeof(err)), -1);
	assert_string_equal(err, "value: invalid number 'x'");
	assert_int_equal(xnode_to_u64(NULL, 0, 4, &v, err, sizeof(err)), -1);
	assert_string_equal(err, "value: missing");

	assert_int_equal(xnode_to_bool(xnode_get(m, "yes"), &b, err, sizeof(err)), 0);
	assert_true(b);
	assert_int_equal(xnode_to_bool(xnode_get(m, "tb"), &b, err, sizeof(err)), 0);
	assert_true(b);
	assert_int_equal(xnode_to_bool(xnode_get(m, "maybe"), &b, err, sizeof(err)), -1);
	assert_string_equal(err, "maybe: invalid boolean 'maybe' (use yes or no)");
	assert_int_equal(xnode_to_bool(xnode_get(m, "typed"), &b, err, sizeof(err)), -1);
	assert_string_equal(err, "typed: expected a boolean, got a number");

	/* A tiny buffer truncates, never overflows. */
	assert_int_equal(xnode_to_u64(xnode_get(m, "big"), 1, 65535, &v, err, 5), -1);
	assert_string_equal(err, "big:");
	xnode_free(m);
}

/* The tree used by the format tests. */
static struct xnode *sample(void)
{
	struct xnode *r = xnode_map(), *m, *l, *p;

	xnode_set_str(r, "name", "srv1");
	xnode_set_u64(r, "port", 7000);
	xnode_set_i64(r, "delta", -5);
	xnode_set_f64(r, "ratio", 1.23456, 2);
	xnode_set_bool(r, "up", true);
	xnode_set_str(r, "num_str", "123");
	xnode_set_str(r, "empty", "");
	xnode_set_str(r, "nul", NULL);
	m = xnode_set_map(r, "limits");
	xnode_set_u64(m, "depth", 128);
	xnode_set_str(m, "mode", "yes");
	l = xnode_set_list(r, "paths");
	p = xnode_push_map(l);
	xnode_set_str(p, "addr", "tcp://h1:1");
	xnode_set_str(p, "state", "up");
	xnode_set_u64(p, "inflight", 3);
	p = xnode_push_map(l);
	xnode_set_str(p, "addr", "tcp://host-two:2");
	xnode_set_u64(p, "inflight", 12345);
	l = xnode_set_list(r, "tags");
	xnode_push_str(l, "a");
	xnode_push_u64(l, 2);
	xnode_set_list(r, "none");
	return r;
}

static void test_emit_text(void **state)
{
	struct xnode *r = sample(), *t;

	(void)state;
	assert_emit(r, XFMT_TEXT,
		    "name     srv1\n"
		    "port     7000\n"
		    "delta    -5\n"
		    "ratio    1.23\n"
		    "up       yes\n"
		    "num_str  123\n"
		    "empty    \"\"\n"
		    "nul      -\n"
		    "limits:\n"
		    "  depth  128\n"
		    "  mode   yes\n"
		    "paths:\n"
		    "  ADDR              STATE  INFLIGHT\n"
		    "  tcp://h1:1        up     3\n"
		    "  tcp://host-two:2  -      12345\n"
		    "tags:\n"
		    "  a\n"
		    "  2\n"
		    "none     -\n");
	xnode_free(r);

	/* A bare table; control characters cannot reach the terminal; UTF-8
	 * counts one column per character. */
	t = xnode_list();
	r = xnode_push_map(t);
	xnode_set_str(r, "id", "\xc3\xa9t\xc3\xa9");
	xnode_set_str(r, "note", "a\x1b[2Jb");
	r = xnode_push_map(t);
	xnode_set_u64(r, "id", 10);
	xnode_set_bool(r, "note", false);
	assert_emit(t, XFMT_TEXT,
		    "ID   NOTE\n"
		    "\xc3\xa9t\xc3\xa9  a?[2Jb\n"
		    "10   no\n");
	xnode_free(t);

	t = xnode_list();
	xnode_push_str(t, "x");
	xnode_push_str(t, "y");
	assert_emit(t, XFMT_TEXT, "x\ny\n");
	xnode_free(t);
}

static void test_emit_yaml(void **state)
{
	struct xnode *r = sample();

	(void)state;
	xnode_set_str(r, "quoted", "say \"hi\"\\\n\x01 \xc3\xa9");
	xnode_set_str(r, "colon", "a: b");
	xnode_set_str(r, "truth", "true");
	xnode_set_str(r, "dash", "-x");
	xnode_set_f64(r, "inf", -INFINITY, 1);
	assert_emit(r, XFMT_YAML,
		    "name: srv1\n"
		    "port: 7000\n"
		    "delta: -5\n"
		    "ratio: 1.23\n"
		    "up: true\n"
		    "num_str: '123'\n"
		    "empty: ''\n"
		    "nul: null\n"
		    "limits:\n"
		    "  depth: 128\n"
		    "  mode: 'yes'\n"
		    "paths:\n"
		    "- addr: tcp://h1:1\n"
		    "  state: up\n"
		    "  inflight: 3\n"
		    "- addr: tcp://host-two:2\n"
		    "  inflight: 12345\n"
		    "tags:\n"
		    "- a\n"
		    "- 2\n"
		    "none: []\n"
		    "quoted: \"say \\\"hi\\\"\\\\\\n\\x01 \xc3\xa9\"\n"
		    "colon: 'a: b'\n"
		    "truth: 'true'\n"
		    "dash: -x\n"
		    "inf: -.inf\n");
	xnode_free(r);
}

static void test_emit_json(void **state)
{
	struct xnode *r = sample(), *e;

	(void)state;
	xnode_set_str(r, "quoted", "say \"hi\"\\\n\x01\x1f/\xc3\xa9");
	xnode_set_f64(r, "nan", NAN, 2);
	xnode_set_u64(r, "max", UINT64_MAX);
	xnode_set_i64(r, "min", INT64_MIN);
	xnode_set_f64(r, "third", 1.0 / 3, 4);
	xnode_set_map(r, "nomap");
	assert_emit(r, XFMT_JSON,
		    "{\n"
		    "  \"name\": \"srv1\",\n"
		    "  \"port\": 7000,\n"
		    "  \"delta\": -5,\n"
		    "  \"ratio\": 1.23,\n"
		    "  \"up\": true,\n"
		    "  \"num_str\": \"123\",\n"
		    "  \"empty\": \"\",\n"
		    "  \"nul\": null,\n"
		    "  \"limits\": {\n"
		    "    \"depth\": 128,\n"
		    "    \"mode\": \"yes\"\n"
		    "  },\n"
		    "  \"paths\": [\n"
		    "    {\n"
		    "      \"addr\": \"tcp://h1:1\",\n"
		    "      \"state\": \"up\",\n"
		    "      \"inflight\": 3\n"
		    "    },\n"
		    "    {\n"
		    "      \"addr\": \"tcp://host-two:2\",\n"
		    "      \"inflight\": 12345\n"
		    "    }\n"
		    "  ],\n"
		    "  \"tags\": [\n"
		    "    \"a\",\n"
		    "    2\n"
		    "  ],\n"
		    "  \"none\": [],\n"
		    "  \"quoted\": \"say \\\"hi\\\"\\\\\\u000a\\u0001\\u001f/\xc3\xa9\",\n"
		    "  \"nan\": null,\n"
		    "  \"max\": 18446744073709551615,\n"
		    "  \"min\": -9223372036854775808,\n"
		    "  \"third\": 0.3333,\n"
		    "  \"nomap\": {}\n"
		    "}\n");
	xnode_free(r);

	e = xnode_map();
	xnode_set_str(e, "k\"ey", "v");
	assert_emit(e, XFMT_JSON, "{\n  \"k\\\"ey\": \"v\"\n}\n");
	assert_emit(e, XFMT_YAML, "k\"ey: v\n");
	xnode_free(e);
	e = xnode_map();
	assert_emit(e, XFMT_JSON, "{}\n");
	assert_emit(e, XFMT_YAML, "{}\n");
	assert_emit(e, XFMT_TEXT, "");
	xnode_free(e);
}

static void test_emit_errors(void **state)
{
	struct xnode *m = xnode_map();
	enum xfmt f = XFMT_TEXT;
	FILE *ro;
	char *out;

	(void)state;
	assert_int_equal(xfmt_parse("text", &f), 0);
	assert_int_equal(f, XFMT_TEXT);
	assert_int_equal(xfmt_parse("yaml", &f), 0);
	assert_int_equal(f, XFMT_YAML);
	assert_int_equal(xfmt_parse("json", &f), 0);
	assert_int_equal(f, XFMT_JSON);
	assert_int_equal(xfmt_parse("xml", &f), -1);
	assert_int_equal(xfmt_parse("", &f), -1);
	assert_int_equal(xfmt_parse(NULL, &f), -1);

	assert_int_equal(xemit(stdout, NULL, XFMT_JSON), -EINVAL);

	xnode_set_str(m, "bad", "\xff\xfe");
	ro = fopen("/dev/null", "w");
	assert_non_null(ro);
	assert_int_equal(xemit(ro, m, XFMT_YAML), -EILSEQ);
	fclose(ro);
	/* JSON passes bytes through. */
	out = emit_str(m, XFMT_JSON);
	assert_string_equal(out, "{\n  \"bad\": \"\xff\xfe\"\n}\n");
	free(out);

	/* A stream that cannot be written reports an error. */
	ro = fopen("/dev/null", "r");
	assert_non_null(ro);
	assert_true(xemit(ro, m, XFMT_JSON) < 0);
	fclose(ro);
	xnode_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_node_build),  cmocka_unit_test(test_node_big_map),
		cmocka_unit_test(test_node_convert), cmocka_unit_test(test_emit_text),
		cmocka_unit_test(test_emit_yaml),   cmocka_unit_test(test_emit_json),
		cmocka_unit_test(test_emit_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
