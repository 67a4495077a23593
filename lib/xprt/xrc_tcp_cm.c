/* tcp:// connection setup (xrc_tcp.c has the data path): the CONN_REQ /
 * CONN_ACC / CONN_REJ exchange of xrc_tcp_wire.h, bounded by the caller's
 * timeout, on the connecting side and on the listener, which never blocks
 * on a slow client.  A completed exchange hands the socket to
 * xtcp_conn_new(). */
#include "xprt/xrc_tcp_pri.h"
#include "xprt/xrc_tcp_wire.h"
#include "core/xtime.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define ACCEPT_PAUSE_NS	100000000ull	/* out of fds: the listening socket rests */
#define ACCEPT_HOLD_NS	10000000ull	/* every slot holds a young request: it rests */
#define TIMER_TAG	UINT32_MAX	/* the pause's timer in the listener's epoll set */

static void sock_setup(int fd, int family, uint8_t tos)
{
	int one = 1, t = tos;

	/* Best effort: a socketpair (tests, fuzzer) has neither option. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (tos && family == AF_INET)
		setsockopt(fd, IPPROTO_IP, IP_TOS, &t, sizeof(t));
	else if (tos && family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &t, sizeof(t));
}

static void fmt_sa(const struct sockaddr *sa, socklen_t sl, char *buf, size_t len)
{
	char h[NI_MAXHOST], p[NI_MAXSERV];
	const char *host = h;

	if (getnameinfo(sa, sl, h, sizeof(h), p, sizeof(p), NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(buf, len, "local");
		return;
	}
	/* an IPv4 client of a dual-stack listener is an IPv4 address */
	if (!strncmp(h, "::ffff:", 7) && strchr(h + 7, '.'))
		host = h + 7;
	snprintf(buf, len, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, p);
}

static void fmt_peer(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (getpeername(fd, (struct sockaddr *)&ss, &sl))
		snprintf(buf, len, "?");
	else
		fmt_sa((struct sockaddr *)&ss, sl, buf, len);
}

static int check_opts(const struct xrc_opts *o, const char *who, char *err, size_t errlen)
{
	/* What we announce must pass the peer's decoder (xtcp_decode). */
	if (o->sq_depth > XTCP_MAX_DEPTH || o->rq_depth > XTCP_MAX_DEPTH ||
	    o->max_send > XTCP_MAX_SEND || o->max_inline > 65536) {
		xerr(err, errlen,
		     "%s: sq_depth/rq_depth over %u, max_send over %u or max_inline over 65536",
		     who, XTCP_MAX_DEPTH, XTCP_MAX_SEND);
		return -EINVAL;
	}
	return 0;
}

struct xrc *xrc_tcp_wrap_fd(int fd, const struct xrc_opts *o, uint32_t peer_max_send,
			    uint32_t peer_sq_depth, char *err, size_t errlen)
{
	struct xrc_opts opts;
	char peer[64];

	xrc_opts_fill(&opts, o);
	if (check_opts(&opts, "wrap", err, errlen)) {
		close(fd);
		errno = EINVAL;
		return NULL;
	}
	sock_setup(fd, AF_UNSPEC, 0);
	fmt_peer(fd, peer, sizeof(peer));
	return xtcp_conn_new(fd, &opts, peer_max_send, peer_sq_depth, peer, err, errlen);
}

/* Until fd has ev, the deadline (-ETIMEDOUT) or cancel (> 0) becomes
 * readable (-ECANCELED, xrc_opts.cancel_fd). */
static int wait_fd(int fd, short ev, uint64_t deadline, int cancel)
{
	for (;;) {
		uint64_t now = xtime_ns();
		struct pollfd p[2] = { { fd, ev, 0 }, { cancel, POLLIN, 0 } };
		struct timespec ts;
		int rc;

		if (now >= deadline)
			return -ETIMEDOUT;
		ts = (struct timespec){ (time_t)((deadline - now) / XTIME_NS_PER_S),
					(long)((deadline - now) % XTIME_NS_PER_S) };
		rc = ppoll(p, cancel > 0 ? 2 : 1, &ts, NULL);
		if (rc > 0 && cancel > 0 && p[1].revents)
			return -ECANCELED;
		if (rc > 0)
			return 0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

/* Exactly len bytes, bounded by the deadline: setup frames only. */
static int io_exact(int fd, void *buf, size_t len, bool wr, uint64_t deadline, int cancel)
{
	for (size_t got = 0; got < len;) {
		ssize_t n = wr ? send(fd, (uint8_t *)buf + got, len - got, MSG_NOSIGNAL | MSG_DONTWAIT)
			       : recv(fd, (uint8_t *)buf + got, len - got, MSG_DONTWAIT);
		int rc;

		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if ((rc = wait_fd(fd, wr ? POLLOUT : POLLIN, deadline, cancel)))
			return rc;
	}
	return 0;
}

static size_t cm_encode(uint8_t *buf, uint8_t type, const struct xrc_opts *o, const void *priv,
			size_t privlen)
{
	struct xtcp_frame f = { .type = type, .len = (uint32_t)privlen };

	if (type != XTCP_CONN_REJ) {
		f.max_send = o->max_send;
		f.rq_depth = o->rq_depth;
		f.sq_depth = o->sq_depth;
	}
	xtcp_encode(buf, &f);
	if (privlen)
		memcpy(buf + XTCP_HDR_MAX, priv, privlen);
	return XTCP_HDR_MAX + privlen;
}

static const char *conn_errstr(int e)
{
	return e == ECONNREFUSED ? "connection refused" :
	       e == ETIMEDOUT ? "timed out" :
	       e == ECONNRESET ? "connection closed by peer" :
	       e == EADDRNOTAVAIL ? "the source address is not one of this host's" :
	       e == EAFNOSUPPORT ? "the source and destination addresses are of different families" :
	       strerror(e);
}

/* Binds fd to the URI's source address (SRC@HOST), port any; 0 or an
 * errno (EAFNOSUPPORT: SRC is of another family than this destination). */
static int bind_src(int fd, const struct xuri *u, int family)
{
	struct addrinfo hints = { .ai_family = family, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_PASSIVE };
	struct addrinfo *ai;
	int e = 0;

	if (!u->src[0])
		return 0;
	if (getaddrinfo(u->src, NULL, &hints, &ai))
		return EAFNOSUPPORT;
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0)
		e = errno;
	freeaddrinfo(ai);
	return e;
}

static struct xrc *tcp_connect(const struct xuri *u, const struct xrc_opts *o, const void *priv,
			       size_t privlen, void *rep, size_t *replen, char *err, size_t errlen)
{
	uint64_t deadline = xtime_ns() + o->timeout_ns;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai, *a;
	uint8_t buf[XTCP_HDR_MAX + XRC_PRIV_MAX];
	char name[300], port[8], peer[64];
	struct xtcp_frame f;
	int fd = -1, e = 0, rc;

	xuri_format(u, name, sizeof(name));
	if (check_opts(o, name, err, errlen)) {
		errno = EINVAL;
		return NULL;
	}
	snprintf(port, sizeof(port), "%u", u->port);
	rc = getaddrinfo(u->host, port, &hints, &ai);
	if (rc) {
		xerr(err, errlen, "%s: cannot resolve '%s': %s", name, u->host,
		     rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		errno = rc == EAI_SYSTEM ? errno : EHOSTUNREACH;
		return NULL;
	}
	for (a = ai; a && e != ETIMEDOUT && e != ECANCELED; a = a->ai_next) {
		socklen_t sl = sizeof(e);

		fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			e = errno;
			continue;
		}
		sock_setup(fd, a->ai_family, o->tos);
		if ((e = bind_src(fd, u, a->ai_family))) {
			close(fd);
			fd = -1;
			continue;
		}
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
			break;
		e = errno;
		if (e == EINPROGRESS) {
			rc = wait_fd(fd, POLLOUT, deadline, o->cancel_fd);
			e = rc ? -rc : getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) ? errno : e;
			if (!e)
				break;
		}
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		xerr(err, errlen, "%s: %s", name, conn_errstr(e));
		errno = e;
		return NULL;
	}

	rc = io_exact(fd, buf, cm_encode(buf, XTCP_CONN_REQ, o, priv, privlen), true, deadline,
		      o->cancel_fd);
	if (!rc)
		rc = io_exact(fd, buf, XTCP_HDR_MAX, false, deadline, o->cancel_fd);
	if (!rc) {
		rc = xtcp_decode(buf, XTCP_HDR_MAX, 0, &f);
		if (rc < 0 || (f.type != XTCP_CONN_ACC && f.type != XTCP_CONN_REJ)) {
			xerr(err, errlen, "%s: not an xrc tcp peer (%s)", name,
			     rc < 0 ? xtcp_strerror(rc) : "unexpected frame");
			errno = EPROTO;
			goto out_close;
		}
		rc = io_exact(fd, buf + XTCP_HDR_MAX, f.len, false, deadline, o->cancel_fd);
	}
	if (rc) {
		xerr(err, errlen, "%s: %s", name, conn_errstr(-rc));
		errno = -rc;
		goto out_close;
	}
	if (rep)
		memcpy(rep, buf + XTCP_HDR_MAX, f.len);
	if (replen)
		*replen = f.len;
	if (f.type == XTCP_CONN_REJ) {
		xerr(err, errlen, "%s: rejected by peer", name);
		errno = ECONNREFUSED;
		goto out_close;
	}
	fmt_peer(fd, peer, sizeof(peer));
	return xtcp_conn_new(fd, o, f.max_send, f.sq_depth, peer, err, errlen);

out_close:
	close(fd);
	return NULL;
}

/* --- listener ---------------------------------------------------------------------
 * The listener's fd is an epoll set of the listening socket and of every
 * accepted socket whose CONN_REQ is not complete yet, so a caller waiting on
 * it wakes for either, and a slow client never blocks anyone.
 *
 * Out of file descriptors, accept(2) fails while the listening socket
 * stays readable: in a level-triggered set the caller would spin on it.
 * The socket leaves the set for ACCEPT_PAUSE_NS instead, and a timer in
 * the set wakes the caller to put it back; the clients wait in the
 * kernel's backlog meanwhile.  So they do while every one of the
 * XTCP_PENDING_MAX slots holds a request younger than XTCP_PENDING_GRACE_NS
 * (many clients at once); an older one gives way to the next client. */

struct pending {
	int fd;			/* -1: free slot */
	uint32_t got;
	uint64_t deadline;
	char peer[64];
	uint8_t buf[XTCP_HDR_MAX + XRC_PRIV_MAX];
};

struct tcp_listener {
	struct xrc_listener base;
	int lfd, efd, tfd;
	bool paused;		/* lfd out of efd until tfd fires */
	bool fds_short;		/* the last accept failed for lack of fds */
	bool rewatch;		/* paused with no timer: each look tries again */
	uint16_t port;
	uint64_t timeout_ns;
	uint64_t dropped;	/* garbage, timed out, gone, or no room */
	struct pending pend[XTCP_PENDING_MAX];
};

struct tcp_req {
	struct xrc_req base;
	int fd;
	uint32_t max_send, sq_depth;
};

static const struct xrc_listener_ops tcp_listener_ops;

/* A client whose connect request cannot be had.  why: for a client at
 * fault (garbage, too slow), one line naming it; NULL for one that went
 * away, or that we had no room for. */
static void pend_drop(struct tcp_listener *l, struct pending *p, const char *why)
{
	if (why)
		xlog_ratelimited(XLOG_WARN, "tcp listener on port %u: connection from %s dropped: %s",
				 l->port, p->peer, why);
	epoll_ctl(l->efd, EPOLL_CTL_DEL, p->fd, NULL);
	close(p->fd);
	p->fd = -1;
	l->dropped++;
}

/* The listening socket out of the set for ns; new clients wait in the
 * kernel's backlog. */
static void accept_rest(struct tcp_listener *l, uint64_t ns)
{
	struct itimerspec ts = { .it_value = { 0, (long)ns } };

	if (l->paused)
		return;
	if (timerfd_settime(l->tfd, 0, &ts, NULL) < 0) {
		/* timerfd_settime(2) fails only on a bad fd or time, which
		 * it is not given; should it fail anyway, nothing would put
		 * the socket back once out of the set, and left in it, it
		 * is readable at once: the caller would come straight back,
		 * a busy loop.  So it stays, and the caller's thread rests
		 * here instead: the clients wait as long as they would
		 * have, and the listener neither spins nor stops. */
		nanosleep(&ts.it_value, NULL);
		return;
	}
	epoll_ctl(l->efd, EPOLL_CTL_DEL, l->lfd, NULL);
	l->paused = true;
}

static void accept_pause(struct tcp_listener *l, int e)
{
	/* one line when it starts, not one per pause */
	if (!l->fds_short)
		xlog_ratelimited(XLOG_WARN, "tcp listener on port %u: accepting a connection: %s; "
				 "new connections wait, tried again every %llu ms",
				 l->port, strerror(e), ACCEPT_PAUSE_NS / 1000000ull);
	l->fds_short = true;
	accept_rest(l, ACCEPT_PAUSE_NS);
}

/* The listening socket back in the set: true, or false (errno set). */
static bool rewatch(struct tcp_listener *l)
{
	struct epoll_event ev = { .events = EPOLLIN };

	if (epoll_ctl(l->efd, EPOLL_CTL_ADD, l->lfd, &ev) < 0 && errno != EEXIST)
		return false;
	l->paused = l->rewatch = false;
	return true;
}

/* The pause is over: the listening socket back in the set. */
static void accept_resume(struct tcp_listener *l)
{
	uint64_t ticks;

	if (read(l->tfd, &ticks, sizeof(ticks)) < 0 && errno == EAGAIN)
		return;
	if (!l->paused)
		return;
	/* no room for it yet (ENOMEM, or ENOSPC: max_user_watches): another
	 * pause on the timer.  Should the timer fail too, nothing would put
	 * the socket back: the thread rests here between tries, as
	 * accept_rest does, for a second at most (it serves others too);
	 * then every look at the listener tries again, and it says so */
	for (int i = 0; !rewatch(l); i++) {
		int e = errno;

		if (timerfd_settime(l->tfd, 0,
				    &(struct itimerspec){ .it_value = { 0, (long)ACCEPT_PAUSE_NS } },
				    NULL) == 0)
			return;
		if (i == 100) {
			xlog(XLOG_ERROR, "tcp listener on port %u: the listening socket cannot be "
			     "watched (%s) nor its pause timed: new connections wait until it can",
			     l->port, strerror(e));
			l->rewatch = true;
			return;
		}
		nanosleep(&(struct timespec){ 0, (long)ACCEPT_HOLD_NS }, NULL);
	}
}

static void accept_all(struct tcp_listener *l, uint64_t now)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		struct pending *p = NULL, *oldest = NULL;
		struct epoll_event ev = { .events = EPOLLIN };
		int fd;

		for (int i = 0; i < XTCP_PENDING_MAX && !p; i++) {
			struct pending *q = &l->pend[i];
			if (q->fd < 0)
				p = q;
			else if (!oldest || q->deadline < oldest->deadline)
				oldest = q;
		}
		/* Full: a request that should long have come in gives way (a
		 * client that connects and sends nothing cannot shut others
		 * out); one still coming in (many clients at once: a
		 * reconnect storm) is not dropped, the newcomers wait. */
		if (!p && now - (oldest->deadline - l->timeout_ns) < XTCP_PENDING_GRACE_NS) {
			accept_rest(l, ACCEPT_HOLD_NS);
			return;
		}
		fd = accept4(l->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				accept_pause(l, errno);
			return;	/* EAGAIN */
		}
		l->fds_short = false;
		if (!p) {
			pend_drop(l, oldest, "no complete CONN_REQ within a second, others waiting");
			p = oldest;
		}
		*p = (struct pending){ .fd = fd, .deadline = now + l->timeout_ns };
		fmt_sa((struct sockaddr *)&ss, sl, p->peer, sizeof(p->peer));
		ev.data.u32 = (uint32_t)(p - l->pend) + 1;
		if (epoll_ctl(l->efd, EPOLL_CTL_ADD, fd, &ev) < 0)
			pend_drop(l, p, NULL);
	}
}

/* Reads what is there of a CONN_REQ, never more than the request itself. */
static struct xrc_req *pend_read(struct tcp_listener *l, struct pending *p)
{
	struct xtcp_frame f;
	struct tcp_req *r;
	uint32_t need = XTCP_HDR_MAX;
	ssize_t n;
	int rc;

	rc = xtcp_decode(p->buf, p->got, 0, &f);
	if (rc > 0)
		need = XTCP_HDR_MAX + f.len;
	n = recv(p->fd, p->buf + p->got, need - p->got, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return NULL;
	if (n <= 0) {
		pend_drop(l, p, NULL);
		return NULL;
	}
	p->got += (uint32_t)n;
	rc = xtcp_decode(p->buf, p->got, 0, &f);
	if (rc < 0 || (p->got >= XTCP_PREFIX_LEN && f.type != XTCP_CONN_REQ)) {
		char why[96];

		snprintf(why, sizeof(why), "its first bytes are not a CONN_REQ (%s)",
			 rc < 0 ? xtcp_strerror(rc) : "another frame type");
		pend_drop(l, p, why);
		return NULL;
	}
	if (rc == XTCP_EMORE || p->got < XTCP_HDR_MAX + f.len)
		return NULL;
	if (!(r = calloc(1, sizeof(*r)))) {
		pend_drop(l, p, NULL);
		return NULL;
	}
	r->base.ops = &tcp_listener_ops;
	memcpy(r->base.priv, p->buf + XTCP_HDR_MAX, f.len);
	r->base.privlen = f.len;
	memcpy(r->base.peer, p->peer, sizeof(r->base.peer));
	{
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);

		if (getsockname(p->fd, (struct sockaddr *)&ss, &sl) == 0)
			fmt_sa((struct sockaddr *)&ss, sl, r->base.local, sizeof(r->base.local));
	}
	r->fd = p->fd;
	r->max_send = f.max_send;
	r->sq_depth = f.sq_depth;
	epoll_ctl(l->efd, EPOLL_CTL_DEL, p->fd, NULL);
	p->fd = -1;
	return &r->base;
}

static struct xrc_req *tcp_get_request(struct xrc_listener *xl, char *err, size_t errlen)
{
	struct tcp_listener *l = (struct tcp_listener *)xl;
	struct epoll_event ev[16];
	uint64_t now = xtime_ns();
	int n;

	for (int i = 0; i < XTCP_PENDING_MAX; i++)
		if (l->pend[i].fd >= 0 && l->pend[i].deadline <= now) {
			char why[96];

			snprintf(why, sizeof(why), "no complete CONN_REQ within %llu ms (%u bytes came)",
				 (unsigned long long)(l->timeout_ns / 1000000), l->pend[i].got);
			pend_drop(l, &l->pend[i], why);
		}
	if (l->rewatch)
		rewatch(l);
	n = epoll_wait(l->efd, ev, 16, 0);
	if (n < 0 && errno != EINTR) {
		xerr(err, errlen, "listener: epoll_wait: %s", strerror(errno));
		return NULL;
	}
	for (int i = 0; i < n; i++) {
		struct xrc_req *r;

		if (!ev[i].data.u32) {
			accept_all(l, now);
		} else if (ev[i].data.u32 == TIMER_TAG) {
			accept_resume(l);
		} else if (l->pend[ev[i].data.u32 - 1].fd >= 0 &&
			   (r = pend_read(l, &l->pend[ev[i].data.u32 - 1]))) {
			return r;	/* the others stay ready: level-triggered */
		}
	}
	errno = EAGAIN;
	return NULL;
}

static struct xrc *tcp_accept(struct xrc_req *xr, const void *priv, size_t privlen,
			      const struct xrc_opts *o, char *err, size_t errlen)
{
	struct tcp_req *r = (struct tcp_req *)xr;
	uint8_t buf[XTCP_HDR_MAX + XRC_PRIV_MAX];
	struct xrc *c = NULL;
	int rc = check_opts(o, r->base.peer, err, errlen);

	if (!rc)
		rc = io_exact(r->fd, buf, cm_encode(buf, XTCP_CONN_ACC, o, priv, privlen), true,
			      xtime_ns() + o->timeout_ns, o->cancel_fd);
	if (rc) {
		if (rc != -EINVAL)
			xerr(err, errlen, "accept %s: %s", r->base.peer, conn_errstr(-rc));
		close(r->fd);
		errno = -rc;
	} else {
		sock_setup(r->fd, AF_UNSPEC, o->tos);
		c = xtcp_conn_new(r->fd, o, r->max_send, r->sq_depth, r->base.peer, err, errlen);
	}
	free(r);
	return c;
}

static void tcp_reject(struct xrc_req *xr, const void *priv, size_t privlen)
{
	struct tcp_req *r = (struct tcp_req *)xr;
	uint8_t buf[XTCP_HDR_MAX + XRC_PRIV_MAX];

	/* Best effort into an empty socket buffer; a client that is gone
	 * needs no answer. */
	if (send(r->fd, buf, cm_encode(buf, XTCP_CONN_REJ, NULL, priv, privlen),
		 MSG_NOSIGNAL | MSG_DONTWAIT) > 0)
		shutdown(r->fd, SHUT_WR);
	close(r->fd);
	free(r);
}

static int tcp_listener_fd(const struct xrc_listener *xl)
{
	return ((const struct tcp_listener *)xl)->efd;
}

static uint16_t tcp_listener_port(const struct xrc_listener *xl)
{
	return ((const struct tcp_listener *)xl)->port;
}

static uint64_t tcp_listener_dropped(const struct xrc_listener *xl)
{
	return ((const struct tcp_listener *)xl)->dropped;
}

static void tcp_listener_close(struct xrc_listener *xl)
{
	struct tcp_listener *l = (struct tcp_listener *)xl;

	for (int i = 0; i < XTCP_PENDING_MAX; i++)
		if (l->pend[i].fd >= 0)
			close(l->pend[i].fd);
	close(l->lfd);
	close(l->efd);
	close(l->tfd);
	free(l);
}

static int tcp_req_windows(const struct xrc_req *r, unsigned flags, char *err, size_t errlen)
{
	(void)r;
	if (!xtcp_test_no_windows)
		return 0;
	xerr(err, errlen, "tcp has no %s memory windows", flags & XRC_WIN_TYPE2 ? "type-2" : "type-1");
	return -EOPNOTSUPP;
}

/* Out of its set with no timer to put it back (rewatch): only a caller
 * that looks again soon takes it back. */
static bool tcp_listener_waiting(const struct xrc_listener *xl)
{
	return ((const struct tcp_listener *)xl)->rewatch;
}

static const struct xrc_listener_ops tcp_listener_ops = {
	tcp_listener_close, tcp_listener_fd, tcp_listener_port, tcp_get_request,
	tcp_accept, tcp_reject, tcp_req_windows, tcp_listener_waiting, tcp_listener_dropped,
};

static struct xrc_listener *tcp_listen(const struct xuri *u, const struct xrc_opts *o,
				       char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai;
	struct epoll_event ev = { .events = EPOLLIN };
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct tcp_listener *l;
	char name[300], port[8];
	int one = 1, rc;

	xuri_format(u, name, sizeof(name));
	snprintf(port, sizeof(port), "%u", u->port);
	rc = getaddrinfo(u->host, port, &hints, &ai);
	if (rc) {
		xerr(err, errlen, "%s: cannot resolve '%s': %s", name, u->host,
		     rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		errno = rc == EAI_SYSTEM ? errno : EADDRNOTAVAIL;
		return NULL;
	}
	if (!(l = calloc(1, sizeof(*l)))) {
		xerr(err, errlen, "%s: out of memory", name);
		errno = ENOMEM;
		goto out_free_ai;
	}
	l->base = (struct xrc_listener){ &tcp_listener_ops, XURI_TCP };
	l->timeout_ns = o->timeout_ns;
	l->efd = -1;
	l->tfd = -1;
	for (int i = 0; i < XTCP_PENDING_MAX; i++)
		l->pend[i].fd = -1;
	l->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->lfd < 0) {
		xerr(err, errlen, "%s: socket: %s", name, strerror(errno));
		goto out_free_listener;
	}
	setsockopt(l->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6) {
		/* [::] takes IPv4 clients too, whatever net.ipv6.bindv6only
		 * says (as the kernel's rtrs-server listens) */
		int off = 0;

		setsockopt(l->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
	}
	/* the kernel's bound on the backlog (net.core.somaxconn): clients
	 * of a reconnect storm wait there while the first ones are read */
	if (bind(l->lfd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(l->lfd, SOMAXCONN) < 0 ||
	    getsockname(l->lfd, (struct sockaddr *)&ss, &sl) < 0) {
		xerr(err, errlen, "%s: %s", name, strerror(errno));
		goto out_close_socket;
	}
	l->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						 : ((struct sockaddr_in *)&ss)->sin_port);
	l->efd = epoll_create1(EPOLL_CLOEXEC);
	l->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (l->efd < 0 || l->tfd < 0 || epoll_ctl(l->efd, EPOLL_CTL_ADD, l->lfd, &ev) < 0 ||
	    epoll_ctl(l->efd, EPOLL_CTL_ADD, l->tfd,
		      &(struct epoll_event){ .events = EPOLLIN, .data.u32 = TIMER_TAG }) < 0) {
		xerr(err, errlen, "%s: epoll: %s", name, strerror(errno));
		goto out_close_socket;
	}
	freeaddrinfo(ai);
	return &l->base;

out_close_socket:
	rc = errno;
	close(l->lfd);
	if (l->efd >= 0)
		close(l->efd);
	if (l->tfd >= 0)
		close(l->tfd);
	errno = rc;
out_free_listener:
	free(l);
out_free_ai:
	freeaddrinfo(ai);
	return NULL;
}

const struct xrc_ops xrc_tcp_ops = { "tcp", tcp_listen, tcp_connect };
