/* Control sockets: see ctl.h for the protocol. */
#include "core/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/xtime.h"

/* A client has this long to send its request, and a reader that stalls
 * this long in the middle of the answer is given up. */
#define XCTL_REQ_TIMEOUT_NS (1000 * XTIME_NS_PER_MS)
#define XCTL_OUT_TIMEOUT_NS (10000 * XTIME_NS_PER_MS)
/* Exchanges in progress at once.  A client beyond that pushes out the
 * oldest one still sending its request, once that one has had
 * XCTL_EVICT_GRACE_NS (a client writes its request right after
 * connecting: a burst of status calls is served, not cut); until then the
 * newcomers wait in the listen backlog. */
#define XCTL_MAX_CONNS 16
#define XCTL_EVICT_GRACE_NS (250 * XTIME_NS_PER_MS)

/* One exchange: the request coming in, then the answer going out, each a
 * step of xctl_poll() as the socket allows -- the owner's loop never waits
 * for a slow or silent client. */
struct xconn {
	int fd;
	bool answering;		/* the request is in: out[] is being sent */
	uint64_t born;		/* xtime_ns() of the accept */
	uint64_t deadline;	/* xtime_ns(): dropped when nothing moved by then */
	size_t have;		/* request bytes */
	char *out;		/* status line + output */
	size_t outlen, outoff;
	char req[XCTL_MAX_REQ];
};

struct xctl {
	int fd;		/* the listening socket */
	int ep;		/* what the owner watches: the listener, the exchanges, the timer */
	int tfd;	/* fires at the earliest deadline */
	int spare;	/* /dev/null held for a process out of fds (xctl_poll) */
	bool listen_off;	/* the listener is out of ep: no room for a client */
	uint64_t retry_ns;	/* out of fds: when to listen again (0: a slot frees) */
	int nconn;
	struct xconn *conn[XCTL_MAX_CONNS];
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	dev_t dev;	/* the socket file we made: only it is removed at the end */
	ino_t ino;
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
	if (n >= 0 && (size_t)n < len && (size_t)n < sizeof(((struct sockaddr_un *)0)->sun_path))
		return 0;
	/* A name too long for a socket's path (a session name may have 254
	 * characters): its start, '~' and a hash of the whole, the same in
	 * the daemon and in every command that looks for it. */
	uint64_t h = 0xcbf29ce484222325ull;	/* FNV-1a */
	size_t room = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
	size_t fixed = strlen(dir) + 1 + 1 + 16 + strlen(".sock");

	for (const char *q = name; *q; q++)
		h = (h ^ (uint8_t)*q) * 0x100000001b3ull;
	if (fixed >= room)
		return -ENAMETOOLONG;
	n = snprintf(buf, len, "%s/%.*s~%016llx.sock", dir, (int)(room - fixed), name,
		     (unsigned long long)h);
	if (n < 0 || (size_t)n >= len)
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

static int watch(struct xctl *c, int fd, int op, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.fd = fd };

	return epoll_ctl(c->ep, op, fd, &ev);
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
	/* a process that does not answer (stopped, wedged) is said to be so,
	 * not waited for without end: XCTL_CALL_TIMEOUT_S for the connect
	 * (its backlog full of earlier callers) and between bytes after */
	struct timeval tv = { XCTL_CALL_TIMEOUT_S, 0 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		rc = errno == EAGAIN ? -ETIMEDOUT : -errno;
		close(fd);
		return rc;
	}
	return fd;
}

struct xctl *xctl_listen(const char *path, char *err, size_t errlen)
{
	struct xctl *c;
	struct sockaddr_un a;
	bool bound = false;
	int rc;

	if (make_addr(path, &a) < 0) {
		snprintf(err, errlen, "control socket %s: path too long", path);
		return NULL;
	}
	/* A socket file nobody answers on is a leftover of a dead process. */
	rc = connect_to(path);
	if (rc >= 0 || rc == -ETIMEDOUT) {	/* (one that does not answer: stopped) */
		if (rc >= 0)
			close(rc);
		snprintf(err, errlen, "control socket %s: in use by a running process", path);
		errno = EADDRINUSE;
		return NULL;
	}
	/* only a socket is ours to replace: a --ctl that names a file of
	 * another kind (a typo) must not cost that file */
	struct stat st;

	if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
		snprintf(err, errlen, "control socket %s: exists and is not a socket", path);
		errno = EEXIST;
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
	c->ep = c->tfd = -1;
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->fd < 0)
		goto fail;
	mode_t old = umask(0177);	/* 0600 from the start, no window */

	rc = bind(c->fd, (struct sockaddr *)&a, sizeof(a));
	umask(old);
	if (rc < 0)
		goto fail;
	bound = true;
	if (lstat(path, &st) == 0) {
		c->dev = st.st_dev;
		c->ino = st.st_ino;
	}
	if (listen(c->fd, 16) < 0)
		goto fail;
	c->ep = epoll_create1(EPOLL_CLOEXEC);
	c->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (c->ep < 0 || c->tfd < 0 || watch(c, c->fd, EPOLL_CTL_ADD, EPOLLIN) < 0 ||
	    watch(c, c->tfd, EPOLL_CTL_ADD, EPOLLIN) < 0)
		goto fail;
	c->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	return c;
fail:
	rc = errno;
	snprintf(err, errlen, "control socket %s: %s", path, strerror(rc));
	if (bound)
		unlink(path);
	for (int *f = &c->fd; f <= &c->tfd; f++)
		if (*f >= 0)
			close(*f);
	free(c);
	errno = rc;
	return NULL;
}

int xctl_fd(const struct xctl *c) { return c->ep; }
const char *xctl_path(const struct xctl *c) { return c->path; }

/* The request is complete when it ends with an empty argument. */
static bool request_complete(const struct xconn *k)
{
	return k->have >= 1 && k->req[k->have - 1] == '\0' &&
	       (k->have == 1 || k->req[k->have - 2] == '\0');
}

/* Splits a complete request into argv.  argc, or -1 for too many. */
static int request_args(struct xconn *k, char **argv)
{
	int argc = 0;

	for (size_t i = 0; i + 1 < k->have;) {
		if (argc == XCTL_MAX_ARGS)
			return -1;
		argv[argc++] = k->req + i;
		i += strlen(k->req + i) + 1;
	}
	argv[argc] = NULL;
	return argc;
}

/* Whether the owner is woken for new clients.  Out of room (every slot
 * taken by a young exchange, or no fd for one), the listener, readable
 * while clients wait in its backlog, would keep waking an owner that can
 * take none: it leaves the set until a slot frees or grows old. */
static void listener_on(struct xctl *c, bool on)
{
	if (c->listen_off == !on)
		return;
	if (watch(c, c->fd, EPOLL_CTL_MOD, on ? EPOLLIN : 0) == 0)
		c->listen_off = !on;
}

static void conn_close(struct xctl *c, int i)
{
	struct xconn *k = c->conn[i];

	epoll_ctl(c->ep, EPOLL_CTL_DEL, k->fd, NULL);
	close(k->fd);
	free(k->out);
	free(k);
	c->conn[i] = c->conn[--c->nconn];
	/* the slot it freed holds the spare again (it may have gone to
	 * this very exchange, see xctl_poll) */
	if (c->spare == -1)
		c->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	listener_on(c, true);
}

/* Runs the command: its status line and output become k->out. */
static int conn_run(struct xctl *c, struct xconn *k, xctl_handler fn, void *ctx)
{
	char *argv[XCTL_MAX_ARGS + 1], *body = NULL;
	size_t bodylen = 0;
	int argc = request_args(k, argv), st;
	FILE *f;

	if (argc < 0 || !(f = open_memstream(&body, &bodylen)))
		return -1;
	st = argc ? fn(ctx, argc, argv, f) : 2;
	if (!argc)
		fputs("no command\n", f);
	if (fclose(f) != 0) {
		free(body);
		return -1;
	}
	k->out = malloc(bodylen + 16);
	if (!k->out) {
		free(body);
		return -1;
	}
	k->outlen = (size_t)snprintf(k->out, 16, "%d\n", st);
	memcpy(k->out + k->outlen, body, bodylen);
	k->outlen += bodylen;
	free(body);
	k->answering = true;
	k->deadline = xtime_ns() + XCTL_OUT_TIMEOUT_NS;
	return watch(c, k->fd, EPOLL_CTL_MOD, EPOLLOUT);
}

/* One step of an exchange, as far as the socket allows without waiting.
 * 1: the command ran; 0: in progress; -1: over (answered, malformed,
 * late or gone) -- the caller closes it. */
static int conn_step(struct xctl *c, struct xconn *k, xctl_handler fn, void *ctx,
		     uint64_t now)
{
	int ran = 0;

	while (!k->answering) {
		if (request_complete(k)) {
			if (conn_run(c, k, fn, ctx) < 0)
				return -1;
			ran = 1;
			break;
		}
		if (k->have == sizeof(k->req))
			return -1;	/* too long */
		ssize_t n = read(k->fd, k->req + k->have, sizeof(k->req) - k->have);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return now >= k->deadline ? -1 : 0;
		if (n <= 0)
			return -1;	/* gone before its request was whole */
		k->have += (size_t)n;
	}
	while (k->outoff < k->outlen) {
		ssize_t n = send(k->fd, k->out + k->outoff, k->outlen - k->outoff,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			if (ran)
				return 1;
			return now >= k->deadline ? -1 : 0;
		}
		if (n <= 0)
			return ran ? 1 | 2 : -1;	/* the reader left */
		k->outoff += (size_t)n;
		k->deadline = now + XCTL_OUT_TIMEOUT_NS;
	}
	return ran ? 1 | 2 : -1;
}

/* The exchange a newcomer may push out: the oldest one still sending its
 * request, when it has had its grace; -1 when none may go. */
static int evictable(const struct xctl *c, uint64_t now)
{
	int old = -1;

	for (int i = 0; i < c->nconn; i++) {
		const struct xconn *k = c->conn[i];

		if (!k->answering && now - k->born >= XCTL_EVICT_GRACE_NS &&
		    (old < 0 || k->born < c->conn[old]->born))
			old = i;
	}
	return old;
}

/* A new exchange (the caller made room).  False when out of memory. */
static bool conn_add(struct xctl *c, int fd, uint64_t now)
{
	struct xconn *k = malloc(sizeof(*k));

	if (!k)
		return false;
	*k = (struct xconn){ .fd = fd, .born = now, .deadline = now + XCTL_REQ_TIMEOUT_NS };
	if (watch(c, fd, EPOLL_CTL_ADD, EPOLLIN) < 0) {
		free(k);
		return false;
	}
	c->conn[c->nconn++] = k;
	return true;
}

/* The timer fires at the earliest deadline, so that an owner asleep on
 * xctl_fd() comes back to drop a silent client. */
static void arm_timer(struct xctl *c)
{
	uint64_t first = c->listen_off && c->retry_ns ? c->retry_ns : UINT64_MAX;
	struct itimerspec ts = { 0 };

	for (int i = 0; i < c->nconn; i++) {
		const struct xconn *k = c->conn[i];

		if (k->deadline < first)
			first = k->deadline;
		/* newcomers wait for a slot: when one may be pushed out */
		if (c->listen_off && c->nconn == XCTL_MAX_CONNS && !k->answering &&
		    k->born + XCTL_EVICT_GRACE_NS < first)
			first = k->born + XCTL_EVICT_GRACE_NS;
	}
	if (first != UINT64_MAX) {
		ts.it_value.tv_sec = (time_t)(first / XTIME_NS_PER_S);
		ts.it_value.tv_nsec = (long)(first % XTIME_NS_PER_S);
	}
	/* should this fail, a silent client waits for the next poll, or for
	 * a newer one to push it out: nothing spins */
	timerfd_settime(c->tfd, TFD_TIMER_ABSTIME, &ts, NULL);
}

int xctl_poll(struct xctl *c, xctl_handler fn, void *ctx)
{
	uint64_t now = xtime_ns(), ticks;
	int done = 0;

	/* another thread (or process) may have taken the slot it freed */
	if (c->spare == -1)
		c->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (read(c->tfd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
		return -errno;
	for (int i = 0; i < c->nconn;) {
		int rc = conn_step(c, c->conn[i], fn, ctx, now);

		done += rc > 0;
		if (rc < 0 || rc & 2)
			conn_close(c, i);	/* the last one moved into slot i */
		else
			i++;
	}
	listener_on(c, true);
	c->retry_ns = 0;
	for (;;) {
		int fd, old = -1;

		/* room for one more: a free slot, or one to push out */
		if (c->nconn == XCTL_MAX_CONNS && (old = evictable(c, now)) < 0) {
			listener_on(c, false);
			break;
		}
		fd = accept4(c->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		/* Out of fds (a server full of clients, or under attack), the
		 * socket would stay readable and its owner's loop spin: the
		 * spare descriptor makes room for this one question, the one
		 * that asks what is going on. */
		if (fd < 0 && (errno == EMFILE || errno == ENFILE) && c->spare >= 0) {
			close(c->spare);
			c->spare = -1;	/* taken again when an exchange ends */
			fd = accept4(c->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		}
		if (fd < 0) {
			int e = errno;

			if (c->spare == -1)
				c->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
			if (e == EAGAIN || e == EWOULDBLOCK || e == ECONNABORTED || e == EINTR)
				break;
			if (e == EMFILE || e == ENFILE) {
				/* the spare is with an exchange still going, or
				 * gone to another thread: the next client waits
				 * for an exchange to end, or a while */
				listener_on(c, false);
				c->retry_ns = now + 100 * XTIME_NS_PER_MS;
				break;
			}
			arm_timer(c);
			return -e;
		}
		if (old >= 0)
			conn_close(c, old);
		if (!conn_add(c, fd, now)) {
			close(fd);
			if (c->spare == -1)
				c->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
			continue;
		}
		/* most clients have written their request by now */
		int rc = conn_step(c, c->conn[c->nconn - 1], fn, ctx, now);

		done += rc > 0;
		if (rc < 0 || rc & 2)
			conn_close(c, c->nconn - 1);
	}
	arm_timer(c);
	return done;
}

void xctl_close(struct xctl *c)
{
	uint64_t end = xtime_ns() + XCTL_REQ_TIMEOUT_NS;

	if (!c)
		return;
	/* answers still on their way (a command that ended the process,
	 * say) get a last second to go */
	for (int i = 0; i < c->nconn; i++) {
		struct xconn *k = c->conn[i];

		while (k->answering && k->outoff < k->outlen) {
			struct pollfd q = { .fd = k->fd, .events = POLLOUT };
			uint64_t now = xtime_ns();
			ssize_t n;

			if (now >= end || poll(&q, 1, (int)((end - now) / XTIME_NS_PER_MS) + 1) <= 0)
				break;
			n = send(k->fd, k->out + k->outoff, k->outlen - k->outoff,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (n <= 0)
				break;
			k->outoff += (size_t)n;
		}
	}
	while (c->nconn)
		conn_close(c, 0);
	close(c->fd);
	close(c->ep);
	close(c->tfd);
	if (c->spare >= 0)
		close(c->spare);
	/* ours, not what took its name meanwhile */
	struct stat st;

	if (lstat(c->path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == c->dev &&
	    st.st_ino == c->ino)
		unlink(c->path);
	free(c);
}

/* The client's side of a write: blocking, bounded by XCTL_REQ_TIMEOUT_NS. */
static void write_all(int fd, const char *p, size_t n)
{
	uint64_t deadline = xtime_ns() + XCTL_REQ_TIMEOUT_NS;

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
		else if (fd == -ETIMEDOUT)
			snprintf(err, errlen, "%s: no answer within %d s (is the process stopped?)", path,
				 XCTL_CALL_TIMEOUT_S);
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
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			close(fd);
			snprintf(err, errlen, "%s: no answer within %d s (is the process stopped?)", path,
				 XCTL_CALL_TIMEOUT_S);
			return -ETIMEDOUT;
		}
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
