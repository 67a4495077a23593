/* Control sockets (lib/core/ctl.h): a server answering commands, stale
 * sockets, refusals, malformed requests. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/ctl.h"

static char dir[64], path[128];

static int setup(void **state)
{
	(void)state;
	strcpy(dir, "/tmp/xctl-test.XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/t.sock", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	rmdir(dir);
	return 0;
}

static int handler(void *ctx, int argc, char **argv, FILE *out)
{
	int *calls = ctx;

	(*calls)++;
	if (!strcmp(argv[0], "echo")) {
		for (int i = 1; i < argc; i++)
			fprintf(out, "%s%s", argv[i], i + 1 < argc ? " " : "\n");
		return 0;
	}
	if (!strcmp(argv[0], "big") && argc == 2) {
		long n = strtol(argv[1], NULL, 10);

		for (long i = 0; i < n; i++)
			fputc('a' + (int)(i % 26), out);
		return 0;
	}
	fprintf(out, "unknown command '%s'\n", argv[0]);
	return 2;
}

/* The client runs in a child (xctl_call blocks); the parent serves. */
static pid_t call_in_child(int argc, char **argv, int pipefd[2])
{
	assert_int_equal(pipe(pipefd), 0);
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		char err[200];
		FILE *f = fdopen(pipefd[1], "w");
		int st = xctl_call(path, argc, argv, f, err, sizeof(err));

		fprintf(f, "[%d]", st);
		fclose(f);
		_exit(0);
	}
	close(pipefd[1]);
	return pid;
}

static void serve_until_exit(struct xctl *c, pid_t pid, int *calls)
{
	int status;

	for (int i = 0; i < 2000; i++) {
		assert_true(xctl_poll(c, handler, calls) >= 0);
		if (waitpid(pid, &status, WNOHANG) == pid)
			return;
		usleep(1000);
	}
	fail_msg("client did not finish");
}

static void read_all(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	ssize_t k;

	while (n + 1 < cap && (k = read(fd, buf + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	buf[n] = '\0';
	close(fd);
}

static void command_and_status(void **state)
{
	char err[200], out[256];
	int calls = 0, pfd[2];
	struct xctl *c = xctl_listen(path, err, sizeof(err));
	const char *a1[] = { "echo", "hello", "world" };
	const char *a2[] = { "frobnicate" };

	(void)state;
	assert_non_null(c);
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	serve_until_exit(c, call_in_child(3, (char **)a1, pfd), &calls);
	read_all(pfd[0], out, sizeof(out));
	assert_string_equal(out, "hello world\n[0]");
	serve_until_exit(c, call_in_child(1, (char **)a2, pfd), &calls);
	read_all(pfd[0], out, sizeof(out));
	assert_string_equal(out, "unknown command 'frobnicate'\n[2]");
	assert_int_equal(calls, 2);
	xctl_close(c);
	assert_int_equal(access(path, F_OK), -1);	/* unlinked */
}

static void missing_socket_is_named(void **state)
{
	char err[200];
	const char *a[] = { "status" };

	(void)state;
	assert_int_equal(xctl_call(path, 1, (char **)a, stdout, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, path));
	assert_non_null(strstr(err, "no such control socket"));
}

static void stale_socket_replaced_live_one_refused(void **state)
{
	char err[200];
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	(void)state;
	/* a socket file left by a dead process */
	strcpy(a.sun_path, path);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	close(fd);
	struct xctl *c = xctl_listen(path, err, sizeof(err));

	assert_non_null(c);
	/* a second server on a live socket is refused */
	assert_null(xctl_listen(path, err, sizeof(err)));
	assert_int_equal(errno, EADDRINUSE);
	assert_non_null(strstr(err, "in use"));
	xctl_close(c);
}

static void malformed_request_dropped_server_keeps_serving(void **state)
{
	char err[200], out[256];
	int calls = 0, pfd[2];
	struct xctl *c = xctl_listen(path, err, sizeof(err));
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char junk[XCTL_MAX_REQ + 10];
	const char *a1[] = { "echo", "still", "here" };

	(void)state;
	assert_non_null(c);
	strcpy(a.sun_path, path);
	/* more than XCTL_MAX_REQ bytes without the terminating empty argument */
	memset(junk, 'x', sizeof(junk));
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	assert_int_equal(xctl_poll(c, handler, &calls), 0);
	assert_int_equal(calls, 0);
	close(fd);
	serve_until_exit(c, call_in_child(3, (char **)a1, pfd), &calls);
	read_all(pfd[0], out, sizeof(out));
	assert_string_equal(out, "still here\n[0]");
	xctl_close(c);
}

static int raw_connect(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	strcpy(a.sun_path, path);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Whether fd has nothing to read and is still open (a client the server
 * has not answered or dropped yet). */
static bool still_waiting(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 0;
}

/* A client that connects and says nothing, or half a request, holds up
 * neither the owner's loop nor the next client; it is dropped once its
 * second is up, and the owner, asleep on xctl_fd(), is woken for that. */
static void silent_client_stalls_nothing(void **state)
{
	char err[200], out[256];
	int calls = 0, pfd[2];
	struct xctl *c = xctl_listen(path, err, sizeof(err));
	const char *a1[] = { "echo", "served" };

	(void)state;
	assert_non_null(c);
	int quiet = raw_connect(), half = raw_connect();

	assert_int_equal(write(half, "echo\0hal", 9), 9);
	uint64_t t0 = ms_now();

	assert_int_equal(xctl_poll(c, handler, &calls), 0);
	assert_true(ms_now() - t0 < 900);	/* not the silent client's second */
	assert_true(still_waiting(quiet) && still_waiting(half));
	serve_until_exit(c, call_in_child(2, (char **)a1, pfd), &calls);
	read_all(pfd[0], out, sizeof(out));
	assert_string_equal(out, "served\n[0]");
	assert_int_equal(calls, 1);
	/* the deadline makes xctl_fd() readable: an owner asleep on it
	 * comes back and drops them (unless the serving above took that
	 * long already) */
	struct pollfd p = { .fd = xctl_fd(c), .events = POLLIN };

	while (still_waiting(quiet) || still_waiting(half)) {
		assert_true(ms_now() - t0 < 5000);
		if (poll(&p, 1, 100) == 1)
			assert_int_equal(xctl_poll(c, handler, &calls), 0);
	}
	assert_true(ms_now() - t0 >= 900);
	/* both dropped, unanswered; nothing left to wake the owner */
	assert_int_equal(read(quiet, out, sizeof(out)), 0);
	assert_int_equal(read(half, out, sizeof(out)), 0);
	assert_int_equal(poll(&p, 1, 0), 0);
	assert_int_equal(calls, 1);
	close(quiet);
	close(half);
	xctl_close(c);
}

/* An answer bigger than the socket takes goes out as the client reads it,
 * while the owner goes on: nothing of it is lost. */
static void slow_reader_gets_all_of_a_big_answer(void **state)
{
	char err[200];
	int calls = 0;
	struct xctl *c = xctl_listen(path, err, sizeof(err));
	const long big = 4 << 20;
	static const char req[] = "big\0" "4194304\0";

	(void)state;
	assert_non_null(c);
	int fd = raw_connect();

	assert_int_equal(write(fd, req, sizeof(req)), (ssize_t)sizeof(req));
	/* runs the command, sends what fits and returns */
	for (int i = 0; i < 100 && !calls; i++) {
		assert_true(xctl_poll(c, handler, &calls) >= 0);
		usleep(1000);
	}
	assert_int_equal(calls, 1);
	/* the client reads at last; the owner serves when xctl_fd() says so
	 * (a server that gave up on a full socket after a second would
	 * send it short) */
	char *buf = malloc((size_t)big + 64);
	size_t got = 0;

	assert_non_null(buf);
	for (;;) {
		struct pollfd p[2] = { { .fd = fd, .events = POLLIN },
				       { .fd = xctl_fd(c), .events = POLLIN } };

		assert_true(poll(p, 2, 5000) > 0);
		if (p[1].revents)
			assert_true(xctl_poll(c, handler, &calls) >= 0);
		if (!p[0].revents)
			continue;
		ssize_t n = read(fd, buf + got, (size_t)big + 64 - got);

		assert_true(n >= 0);
		if (!n)
			break;
		got += (size_t)n;
	}
	assert_int_equal(got, 2 + (size_t)big);
	assert_memory_equal(buf, "0\n", 2);
	for (long i = 0; i < big; i++)
		if (buf[2 + i] != 'a' + (int)(i % 26))
			fail_msg("byte %ld differs", i);
	free(buf);
	close(fd);
	assert_int_equal(calls, 1);
	xctl_close(c);
}

/* More silent clients than the server keeps: the oldest gives way, and a
 * real command still gets through. */
static void full_table_pushes_out_the_oldest_silent_one(void **state)
{
	char err[200], out[256];
	int calls = 0, pfd[2], q[20];
	struct xctl *c = xctl_listen(path, err, sizeof(err));
	const char *a1[] = { "echo", "through" };

	uint64_t t0 = ms_now();

	(void)state;
	assert_non_null(c);
	for (int i = 0; i < 20; i++) {
		q[i] = raw_connect();
		assert_int_equal(xctl_poll(c, handler, &calls), 0);
	}
	serve_until_exit(c, call_in_child(2, (char **)a1, pfd), &calls);
	read_all(pfd[0], out, sizeof(out));
	assert_string_equal(out, "through\n[0]");
	/* the first ones were dropped (EOF), the newest still wait (if this
	 * ran within the second they have) */
	assert_int_equal(read(q[0], out, sizeof(out)), 0);
	if (ms_now() - t0 < 900)
		assert_true(still_waiting(q[19]));
	for (int i = 0; i < 20; i++)
		close(q[i]);
	xctl_close(c);
}

/* A burst of real clients, more than there are slots: all are answered
 * (newcomers wait for a slot instead of pushing out one just accepted). */
static void burst_of_clients_all_answered(void **state)
{
	char err[200];
	int calls = 0, pfd[24][2];
	pid_t pid[24];
	struct xctl *c = xctl_listen(path, err, sizeof(err));

	(void)state;
	assert_non_null(c);
	for (int i = 0; i < 24; i++) {
		char n[8];
		const char *a[] = { "echo", n };

		snprintf(n, sizeof(n), "%d", i);
		pid[i] = call_in_child(2, (char **)a, pfd[i]);
	}
	for (int i = 0; i < 24; i++) {
		char out[64], want[64];

		serve_until_exit(c, pid[i], &calls);
		read_all(pfd[i][0], out, sizeof(out));
		snprintf(want, sizeof(want), "%d\n[0]", i);
		assert_string_equal(out, want);
	}
	assert_int_equal(calls, 24);
	xctl_close(c);
}

static void client_rejects_bad_arguments(void **state)
{
	char err[200];
	const char *a[] = { "status", "" };

	(void)state;
	assert_int_equal(xctl_call(path, 2, (char **)a, stdout, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "empty argument"));
	assert_int_equal(xctl_call(path, 0, (char **)a, stdout, err, sizeof(err)), -EINVAL);
}

static void default_path_is_private(void **state)
{
	char p[256], rt[128];
	struct stat st;

	(void)state;
	snprintf(rt, sizeof(rt), "%s/rt", dir);
	assert_int_equal(mkdir(rt, 0700), 0);
	setenv("XDG_RUNTIME_DIR", rt, 1);
	assert_int_equal(xctl_default_path("rtrs-client-s1", p, sizeof(p)), 0);
	assert_non_null(strstr(p, "/rt/xprt/rtrs-client-s1.sock"));
	/* a name too long for a socket: its start and a hash, one per name */
	{
		char l1[300], l2[300], q1[256], q2[256];

		memset(l1, 'a', 270);
		l1[270] = 0;
		memcpy(l2, l1, sizeof(l1));
		l2[269] = 'b';
		assert_int_equal(xctl_default_path(l1, q1, sizeof(q1)), 0);
		assert_int_equal(xctl_default_path(l2, q2, sizeof(q2)), 0);
		assert_true(strlen(q1) < sizeof(((struct sockaddr_un *)0)->sun_path));
		assert_string_not_equal(q1, q2);
		assert_non_null(strstr(q1, "/rt/xprt/aaaa"));
		assert_non_null(strchr(q1, '~'));
		assert_int_equal(xctl_default_path(l1, q2, sizeof(q2)), 0);
		assert_string_equal(q1, q2);
	}
	snprintf(p, sizeof(p), "%s/xprt", rt);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	/* a directory others can write to is refused */
	assert_int_equal(chmod(p, 0777), 0);
	assert_int_equal(xctl_default_path("x", p, sizeof(p)), -EPERM);
	snprintf(p, sizeof(p), "%s/xprt", rt);
	rmdir(p);
	rmdir(rt);
	unsetenv("XDG_RUNTIME_DIR");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(command_and_status, setup, teardown),
		cmocka_unit_test_setup_teardown(missing_socket_is_named, setup, teardown),
		cmocka_unit_test_setup_teardown(stale_socket_replaced_live_one_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(malformed_request_dropped_server_keeps_serving, setup,
						teardown),
		cmocka_unit_test_setup_teardown(silent_client_stalls_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(slow_reader_gets_all_of_a_big_answer, setup, teardown),
		cmocka_unit_test_setup_teardown(full_table_pushes_out_the_oldest_silent_one, setup,
						teardown),
		cmocka_unit_test_setup_teardown(burst_of_clients_all_answered, setup, teardown),
		cmocka_unit_test_setup_teardown(client_rejects_bad_arguments, setup, teardown),
		cmocka_unit_test_setup_teardown(default_path_is_private, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
