#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>

#include "core/uri.h"

static void ok(const char *s, uint16_t dport, enum xuri_scheme sch, const char *host,
	       uint16_t port, const char *canon)
{
	char err[256] = "", buf[512];
	struct xuri u;

	if (xuri_parse(s, dport, &u, err, sizeof(err)) != 0)
		fail_msg("'%s': %s", s, err);
	assert_int_equal(u.scheme, sch);
	assert_string_equal(u.host, host);
	assert_int_equal(u.port, port);
	assert_string_equal(u.name, "");
	assert_int_equal(xuri_format(&u, buf, sizeof(buf)), 0);
	assert_string_equal(buf, canon);
}

static void bad(const char *s, uint16_t dport, const char *msg)
{
	char err[256] = "";
	struct xuri u;

	assert_int_equal(xuri_parse(s, dport, &u, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, msg);
}

static void test_hostport(void **state)
{
	(void)state;
	ok("tcp://host:80", 0, XURI_TCP, "host", 80, "tcp://host:80");
	ok("udp://10.0.0.1:5000", 0, XURI_UDP, "10.0.0.1", 5000, "udp://10.0.0.1:5000");
	ok("rdma://node-1.example.org:1234", 0, XURI_RDMA, "node-1.example.org", 1234,
	   "rdma://node-1.example.org:1234");
	ok("ud://h:65535", 0, XURI_UD, "h", 65535, "ud://h:65535");
	ok("TCP://h:1", 0, XURI_TCP, "h", 1, "tcp://h:1");
	ok("h:7", 0, XURI_AUTO, "h", 7, "h:7");
	ok("h", 7000, XURI_AUTO, "h", 7000, "h:7000");
	ok("tcp://h", 7000, XURI_TCP, "h", 7000, "tcp://h:7000");
	ok("tcp://h:0080", 0, XURI_TCP, "h", 80, "tcp://h:80");
	ok("[::1]:80", 0, XURI_AUTO, "::1", 80, "[::1]:80");
	ok("tcp://[::1]", 9, XURI_TCP, "::1", 9, "tcp://[::1]:9");
	ok("udp://[fe80::1%eth0]:53", 0, XURI_UDP, "fe80::1%eth0", 53, "udp://[fe80::1%eth0]:53");
	ok("tcp://[::ffff:198.18.0.1]:80", 0, XURI_TCP, "::ffff:198.18.0.1", 80,
	   "tcp://[::ffff:198.18.0.1]:80");
	ok("tcp://[::]:80", 0, XURI_TCP, "::", 80, "tcp://[::]:80");
}

static void test_shm(void **state)
{
	char err[256], buf[256], name[128];
	struct xuri u;

	(void)state;
	assert_int_equal(xuri_parse("shm://conn_1.a-b", 0, &u, err, sizeof(err)), 0);
	assert_int_equal(u.scheme, XURI_SHM);
	assert_string_equal(u.name, "conn_1.a-b");
	assert_string_equal(u.host, "");
	assert_int_equal(u.port, 0);
	assert_int_equal(xuri_format(&u, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "shm://conn_1.a-b");

	memset(name, 'n', 100);
	name[100] = '\0';
	snprintf(buf, sizeof(buf), "shm://%s", name);
	assert_int_equal(xuri_parse(buf, 0, &u, err, sizeof(err)), 0);
	assert_string_equal(u.name, name);
	strcat(buf, "n");
	assert_int_equal(xuri_parse(buf, 0, &u, err, sizeof(err)), -EINVAL);

	bad("shm://a/b", 0, "invalid shm name 'a/b'");
	bad("shm://", 0, "invalid shm name ''");
	bad("shm://.hidden", 0, "invalid shm name '.hidden'");
	bad("shm://-x", 0, "invalid shm name '-x'");
	bad("shm://a:1", 0, "invalid shm name 'a:1'");
}

static void test_errors(void **state)
{
	char longhost[300], err[64];
	struct xuri u;

	(void)state;
	bad("foo://x", 0, "unknown scheme 'foo' in 'foo://x'");
	bad("://x", 0, "unknown scheme '' in '://x'");
	bad("tcp://host", 0, "missing port in 'tcp://host'");
	bad("tcp://host:", 80, "missing port in 'tcp://host:'");
	bad("tcp://h:99999", 0, "port '99999' out of range");
	ok("tcp://h:0", 0, XURI_TCP, "h", 0, "tcp://h:0");	/* 0: any port, for listening */
	bad("tcp://h:8x", 0, "invalid port '8x' in 'tcp://h:8x'");
	bad("tcp://h:-1", 0, "invalid port '-1' in 'tcp://h:-1'");
	bad("tcp://:80", 0, "missing host in 'tcp://:80'");
	bad("tcp://a b:80", 0, "invalid host 'a b' in 'tcp://a b:80'");
	bad("tcp://h/x:80", 0, "invalid host 'h/x' in 'tcp://h/x:80'");
	bad("::1:80", 0, "IPv6 address must be in brackets in '::1:80'");
	bad("tcp://[::1:80", 0, "missing ']' in 'tcp://[::1:80'");
	bad("tcp://[]:80", 0, "invalid IPv6 address '[]' in 'tcp://[]:80'");
	bad("tcp://[host]:80", 0, "invalid IPv6 address '[host]' in 'tcp://[host]:80'");
	bad("tcp://[::1]x", 0, "unexpected 'x' after ']' in 'tcp://[::1]x'");
	bad("tcp://[::1%]:1", 0, "invalid IPv6 address '[::1%]' in 'tcp://[::1%]:1'");
	bad("", 0, "empty address");

	memset(longhost, 'h', 256);
	strcpy(longhost + 256, ":80");
	assert_int_equal(xuri_parse(longhost, 0, &u, err, sizeof(err)), -EINVAL);
	assert_memory_equal(err, "host name too long in 'hhh", 26);
	longhost[255] = ':';
	assert_int_equal(xuri_parse(longhost, 0, &u, NULL, 0), -EINVAL); /* 255 h + "::80" */
	memmove(longhost + 255, ":80", 4);
	assert_int_equal(xuri_parse(longhost, 0, &u, NULL, 0), 0);
	assert_int_equal(strlen(u.host), 255);
}

static void test_format(void **state)
{
	struct xuri u = { .scheme = XURI_TCP, .host = "h", .port = 80 };
	char buf[64];

	(void)state;
	assert_string_equal(xuri_scheme_name(XURI_AUTO), "auto");
	assert_string_equal(xuri_scheme_name(XURI_SHM), "shm");
	assert_string_equal(xuri_scheme_name(XURI_TCP), "tcp");
	assert_string_equal(xuri_scheme_name(XURI_UDP), "udp");
	assert_string_equal(xuri_scheme_name(XURI_RDMA), "rdma");
	assert_string_equal(xuri_scheme_name(XURI_UD), "ud");
	assert_string_equal(xuri_scheme_name((enum xuri_scheme)42), "?");

	assert_int_equal(xuri_format(&u, buf, 11), 0);
	assert_string_equal(buf, "tcp://h:80");
	assert_int_equal(xuri_format(&u, buf, 10), -ENOSPC);
	u.scheme = (enum xuri_scheme)9;
	assert_int_equal(xuri_format(&u, buf, sizeof(buf)), -EINVAL);
}

/* SRC@HOST: the local address a connection leaves from (the kernel's
 * path=[src@]dst); it is part of the canonical form. */
static void test_source(void **state)
{
	struct xuri u;
	char buf[128], err[256];

	(void)state;
	assert_int_equal(xuri_parse("tcp://127.0.0.2@127.0.0.1:1234", 0, &u, err, sizeof(err)), 0);
	assert_string_equal(u.src, "127.0.0.2");
	assert_string_equal(u.host, "127.0.0.1");
	assert_int_equal(u.port, 1234);
	assert_int_equal(xuri_format(&u, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "tcp://127.0.0.2@127.0.0.1:1234");
	assert_int_equal(xuri_parse("rdma://[fe80::1%eth1]@[fe80::2%eth1]", 1234, &u, err,
				    sizeof(err)), 0);
	assert_string_equal(u.src, "fe80::1%eth1");
	assert_string_equal(u.host, "fe80::2%eth1");
	assert_int_equal(xuri_format(&u, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "rdma://[fe80::1%eth1]@[fe80::2%eth1]:1234");
	assert_int_equal(xuri_parse("10.0.0.1@server:7", 0, &u, err, sizeof(err)), 0);
	assert_string_equal(u.src, "10.0.0.1");
	assert_string_equal(u.host, "server");
	/* no source: empty */
	assert_int_equal(xuri_parse("tcp://h:1", 0, &u, err, sizeof(err)), 0);
	assert_string_equal(u.src, "");
	bad("tcp://myhost@h:1", 0, "the source address 'myhost' in 'tcp://myhost@h:1' is not an IP address (an IPv6 one goes in brackets)");
	bad("tcp://::1@h:1", 0, "the source address '::1' in 'tcp://::1@h:1' is not an IP address (an IPv6 one goes in brackets)");
	bad("tcp://1.2.3@h:1", 0, "invalid source address '1.2.3' in 'tcp://1.2.3@h:1'");
	bad("tcp://@h:1", 0, "invalid source address in 'tcp://@h:1'");
	bad("udp://1.2.3.4@h:1", 0, "a source address (SRC@) is for tcp:// and rdma:// only, in 'udp://1.2.3.4@h:1'");
	bad("tcp://[zz]@h:1", 0, "invalid IPv6 source address '[zz]' in 'tcp://[zz]@h:1'");
}

/* InfiniBand addresses (the kernel's rtrs "gid:"): rdma:// only, in
 * brackets, as destination and source, no scope. */
static void test_gid(void **state)
{
	struct xuri u;
	char buf[128], err[256];

	(void)state;
	ok("rdma://[gid:fe80::2:c903:a:1]:1234", 0, XURI_RDMA, "gid:fe80::2:c903:a:1", 1234,
	   "rdma://[gid:fe80::2:c903:a:1]:1234");
	ok("RDMA://[GID:FE80::1]", 1234, XURI_RDMA, "GID:FE80::1", 1234, "rdma://[GID:FE80::1]:1234");
	ok("rdma://[gid:::]:0", 0, XURI_RDMA, "gid:::", 0, "rdma://[gid:::]:0");
	assert_int_equal(xuri_parse("rdma://[gid:fe80::1]@[gid:fe80::2]:7", 0, &u, err, sizeof(err)),
			 0);
	assert_string_equal(u.src, "gid:fe80::1");
	assert_string_equal(u.host, "gid:fe80::2");
	assert_int_equal(xuri_format(&u, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "rdma://[gid:fe80::1]@[gid:fe80::2]:7");
	bad("tcp://[gid:fe80::1]:7", 0, "a gid: address is for rdma:// only, in 'tcp://[gid:fe80::1]:7'");
	bad("[gid:fe80::1]:7", 0, "a gid: address is for rdma:// only, in '[gid:fe80::1]:7'");
	bad("rdma://[gid:fe80::1%ib0]:7", 0, "invalid GID '[gid:fe80::1%ib0]' in 'rdma://[gid:fe80::1%ib0]:7'");
	bad("rdma://[gid:1.2.3.4]:7", 0, "invalid GID '[gid:1.2.3.4]' in 'rdma://[gid:1.2.3.4]:7'");
	bad("rdma://[gid:]:7", 0, "invalid GID '[gid:]' in 'rdma://[gid:]:7'");
	bad("rdma://gid:fe80::1:7", 0, "IPv6 address must be in brackets in 'rdma://gid:fe80::1:7'");
	bad("tcp://[gid:fe80::1]@h:7", 0, "invalid source GID '[gid:fe80::1]' in 'tcp://[gid:fe80::1]@h:7' (rdma:// only)");
	bad("rdma://[gid:fe80::1]@10.0.0.1:7", 0, "a GID and an IP address in one path, in 'rdma://[gid:fe80::1]@10.0.0.1:7'");
	bad("rdma://10.0.0.1@[gid:fe80::1]:7", 0, "a GID and an IP address in one path, in 'rdma://10.0.0.1@[gid:fe80::1]:7'");
	bad("rdma://[gid:zz]@[gid:fe80::2]:7", 0, "invalid source GID '[gid:zz]' in 'rdma://[gid:zz]@[gid:fe80::2]:7' (rdma:// only)");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hostport),
		cmocka_unit_test(test_shm),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_source),
		cmocka_unit_test(test_gid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
