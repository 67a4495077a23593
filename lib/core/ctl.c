/* Control sockets: see ctl.h for the protocol. */
#include "core/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/xtime.h"

#define XCTL_REQ_TIMEOUT_MS 1000

struct xctl {
	int fd;
	int spare;	/* /dev/null held for a process out of fds (xctl_poll) */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

int xctl_default_path(const char *name, char *buf, size_t len)
{
	const char *rt = getenv("XDG_RUNTIME_DIR");
	char dir[256];
	int n;

	if (rt && *rt)
		n = snprintf(dir, sizeof(dir), "%s/xprt", rt);
	else
		n = snprintf(dir, sizeof(dir), "/tmp/xprt-%u", (unsigned)getuid());
	if (n < 0 || (size_t)n >= sizeof(dir))
		return -ENAMETOOLONG;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	/* /tmp is shared: a directory someone else made (or left open) could
	 * let another user plant the socket we then talk to */
	struct stat st;

	if (lstat(dir, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077))
		return -EPERM;
	n = snprintf(buf, len, "%s/%s.sock", dir, name);
	if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return -ENAMETOOLONG;
	return 0;
}

static int make_addr(const char *path, struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(a->sun_path))
		return -ENAMETOOLONG;
	strcpy(a->sun_path, path);
	return 0;
}

static int connect_to(const char *path)
{
	struct sockaddr_un a;
	int fd, rc;

	if ((rc = make_addr(path, &a)) < 0)
		return rc;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

struct xctl *xctl_listen(const char *path, char *err, size_t errlen)
{
	struct xctl *c;
	struct sockaddr_un a;
	int rc;

	if (make_addr(path, &a) < 0) {
		snprintf(err, errlen, "control socket %s: path too long", path);
		return NULL;
	}
	/* A socket file nobody answers on is a leftover of a dead process. */
	rc = connect_to(path);
	if (rc >= 0) {
		close(rc);
		snprintf(err, errlen, "control socket %s: in use by a running process", path);
		errno = EADDRINUSE;
		return NULL;
	}
	if (rc == -ECONNREFUSED)
		unlink(path);
	c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "control socket: out of memory");
		return NULL;
	}
	strcpy(c->path, path);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->fd < 0)
		goto fail;
	mode_t old = umask(0177);	/* 0600 from the start, no window */

	rc = bind(c->fd, (struct sockaddr *)&a, sizeof(a));
	umask(old);
	if (rc < 0 || listen(c->fd, 16) < 0)
		goto fail;
	c->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	return c;
fail:
	rc = errno;
	snprintf(err, errlen, "control socket %s: %s", path, strerror(rc));
	if (c->fd >= 0)
		close(c->fd);
	free(c);
	errno = rc;
	return NULL;
}

int xctl_fd(const struct xctl *c) { return c->fd; }
const char *xctl_path(const struct xctl *c) { return c->path; }

/* Reads the request: args each ended by '\0', then an empty one.  Bounded
 * in size and time, so a stuck client cannot hold the server.  Returns
 * argc, or -1 for a malformed or late request. */
static int read_request(int fd, char *buf, size_t cap, char **argv)
{
	uint64_t deadline = xtime_ns() + XCTL_REQ_TIMEOUT_MS * XTIME_NS_PER_MS;
	size_t have = 0;

	for (;;) {
		/* complete when the buffer ends with an empty argument */
		if (have >= 1 && buf[have - 1] == '\0' && (have == 1 || buf[have - 2] == '\0'))
			break;
		if (have == cap)
			return -1;
		uint64_t now = xtime_ns();

		if (now >= deadline)
			return -1;
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (poll(&p, 1, (int)((deadline - now) / XTIME_NS_PER_MS) + 1) < 0 && errno != EINTR)
			return -1;
		ssize_t n = read(fd, buf + have, cap - have);

		if (n == 0)
			return -1;
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			return -1;
		}
		have += (size_t)n;
	}
	int argc = 0;

	for (size_t i = 0; i + 1 < have;) {
		if (argc == XCTL_MAX_ARGS)
			return -1;
		argv[argc++] = buf + i;
		i += strlen(buf + i) + 1;
	}
	argv[argc] = NULL;
	return argc;
}

static void write_all(int fd, const char *p, size_t n)
{
	uint64_t deadline = xtime_ns() + XCTL_REQ_TIMEOUT_MS * XTIME_NS_PER_MS;

	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
			struct pollfd q = { .fd = fd, .events = POLLOUT };

			if (xtime_ns() >= deadline)
				return;
			poll(&q, 1, 10);
			continue;
		}
		if (k <= 0)
			return;
		p += k;
		n -= (size_t)k;
	}
}

int xctl_poll(struct xctl *c, xctl_handler fn, void *ctx)
{
	int done = 0;

	/* another thread (or process) may have taken the slot it freed */
	if (c->spare == -1)
		c->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	for (;;) {
		char buf[XCTL_MAX_REQ], *argv[XCTL_MAX_ARGS + 1];
		int fd = accept4(c->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

		/* Out of fds (a server full of clients, or under attack), the
		 * socket would stay readable and its owner's loop spin: the
		 * spare descriptor makes room for this one question, the one
		 * that asks what is going on. */
		if (fd < 0 && (errno == EMFILE || errno == ENFILE) && c->spare >= 0) {
			close(c->spare);
			fd = accept4(c->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			c->spare = -2;	/* taken again below, once fd is closed */
		}
		if (fd < 0) {
			int e = errno;

			if (c->spare == -2)
				c->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
			if (e == EAGAIN || e == EWOULDBLOCK || e == ECONNABORTED || e == EINTR)
				return done;
			return -e;
		}
		int argc = read_request(fd, buf, sizeof(buf), argv);

		if (argc >= 0) {
			char *out = NULL;
			size_t outlen = 0;
			FILE *f = open_memstream(&out, &outlen);
			int st;

			if (!f) {
				close(fd);
				continue;
			}
			st = argc ? fn(ctx, argc, argv, f) : 2;
			if (!argc)
				fputs("no command\n", f);
			fclose(f);
			char head[16];
			int hn = snprintf(head, sizeof(head), "%d\n", st);

			write_all(fd, head, (size_t)hn);
			write_all(fd, out, outlen);
			free(out);
			done++;
		}
		close(fd);
		if (c->spare == -2)
			c->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
}

void xctl_close(struct xctl *c)
{
	if (!c)
		return;
	close(c->fd);
	if (c->spare >= 0)
		close(c->spare);
	unlink(c->path);
	free(c);
}

int xctl_call(const char *path, int argc, char *const *argv, FILE *out, char *err,
	      size_t errlen)
{
	char req[XCTL_MAX_REQ];
	size_t n = 0;
	int fd, st = -1;

	if (argc < 1 || argc > XCTL_MAX_ARGS) {
		snprintf(err, errlen, "control command: 1 to %d arguments", XCTL_MAX_ARGS);
		return -EINVAL;
	}
	for (int i = 0; i < argc; i++) {
		size_t l = strlen(argv[i]) + 1;

		if (l == 1 || n + l + 1 > sizeof(req)) {
			snprintf(err, errlen, "control command: %s",
				 l == 1 ? "empty argument" : "too long");
			return -EINVAL;
		}
		memcpy(req + n, argv[i], l);
		n += l;
	}
	req[n++] = '\0';
	fd = connect_to(path);
	if (fd < 0) {
		if (fd == -ENOENT)
			snprintf(err, errlen, "%s: no such control socket (is it running?)", path);
		else if (fd == -ECONNREFUSED)
			snprintf(err, errlen, "%s: nobody answers (a leftover socket?)", path);
		else
			snprintf(err, errlen, "%s: %s", path, strerror(-fd));
		return fd;
	}
	write_all(fd, req, n);
	/* the status line, then the output as it comes */
	char buf[4096], head[16];
	size_t hl = 0;
	bool in_head = true;

	for (;;) {
		ssize_t k = read(fd, buf, sizeof(buf));

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		size_t i = 0;

		while (in_head && i < (size_t)k) {
			char ch = buf[i++];

			if (ch == '\n') {
				head[hl] = '\0';
				st = (int)strtol(head, NULL, 10);
				in_head = false;
			} else if (hl < sizeof(head) - 1 && ch >= '0' && ch <= '9') {
				head[hl++] = ch;
			} else {
				break;	/* not our protocol */
			}
		}
		if (!in_head && i < (size_t)k)
			fwrite(buf + i, 1, (size_t)k - i, out);
	}
	close(fd);
	if (in_head) {
		snprintf(err, errlen, "%s: no answer", path);
		return -EPROTO;
	}
	fflush(out);
	return st;
}
