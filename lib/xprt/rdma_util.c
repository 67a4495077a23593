/* Helpers shared by the verbs backends; see rdma_util.h. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <endian.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>

#include "xprt/rdma_util.h"
#include "xprt/xdev.h"

static pthread_mutex_t pd_lock = PTHREAD_MUTEX_INITIALIZER;
static struct xrdma_pd *pd_list;

struct xrdma_pd *xrdma_pd_get(struct ibv_context *ctx, char *err, size_t errlen)
{
	struct xrdma_pd *p;

	pthread_mutex_lock(&pd_lock);
	for (p = pd_list; p; p = p->next)
		if (p->ctx == ctx)
			break;
	if (p) {
		p->refs++;
		pthread_mutex_unlock(&pd_lock);
		return p;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		pthread_mutex_unlock(&pd_lock);
		snprintf(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	p->ctx = ctx;
	p->pd = ibv_alloc_pd(ctx);
	if (!p->pd) {
		int e = errno ? errno : ENOMEM;

		pthread_mutex_unlock(&pd_lock);
		snprintf(err, errlen, "%s: ibv_alloc_pd: %s", ibv_get_device_name(ctx->device),
			 strerror(e));
		free(p);
		errno = e;
		return NULL;
	}
	struct ibv_device_attr da;

	if (!ibv_query_device(ctx, &da)) {
		p->mw1 = da.device_cap_flags & IBV_DEVICE_MEM_WINDOW;
		p->mw2 = da.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A |
						IBV_DEVICE_MEM_WINDOW_TYPE_2B);
		p->inv_bit2 = da.vendor_id == 0xffffff;	/* rxe's RXE_VENDOR_ID */
	}
	p->refs = 1;
	p->next = pd_list;
	pd_list = p;
	pthread_mutex_unlock(&pd_lock);
	return p;
}

void xrdma_pd_ref(struct xrdma_pd *p)
{
	pthread_mutex_lock(&pd_lock);
	p->refs++;
	pthread_mutex_unlock(&pd_lock);
}

void xrdma_pd_put(struct xrdma_pd *p)
{
	struct xrdma_pd **pp;

	if (!p)
		return;
	pthread_mutex_lock(&pd_lock);
	if (--p->refs) {
		pthread_mutex_unlock(&pd_lock);
		return;
	}
	for (pp = &pd_list; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	pthread_mutex_unlock(&pd_lock);
	if (p->zmr)
		ibv_dereg_mr(p->zmr);
	ibv_dealloc_pd(p->pd);
	free(p);
}

struct ibv_mr *xrdma_pd_zmr(struct xrdma_pd *p)
{
	static uint64_t zbuf[8];	/* never accessed: binds over it are empty */

	pthread_mutex_lock(&pd_lock);
	if (!p->zmr)
		p->zmr = ibv_reg_mr(p->pd, zbuf, sizeof(zbuf),
				    IBV_ACCESS_LOCAL_WRITE | (p->mw1 || p->mw2 ? IBV_ACCESS_MW_BIND : 0));
	pthread_mutex_unlock(&pd_lock);
	return p->zmr;
}

void xrdma_memlock_hint(int e, char *buf, size_t len)
{
	struct rlimit rl;

	buf[0] = 0;
	if ((e != ENOMEM && e != EPERM) || getrlimit(RLIMIT_MEMLOCK, &rl) ||
	    rl.rlim_cur == RLIM_INFINITY)
		return;
	snprintf(buf, len, " (RLIMIT_MEMLOCK is %llu KiB: raise ulimit -l, or LimitMEMLOCK=)",
		 (unsigned long long)rl.rlim_cur >> 10);
}

int xrdma_check(const struct xuri *u, char *err, size_t errlen)
{
	int rc = xdev_require(u, err, errlen);

	if (rc)
		errno = -rc;
	return rc;
}

void xrdma_uri_str(const struct xuri *u, char *buf, size_t len)
{
	if (xuri_format(u, buf, len) == -EINVAL)
		snprintf(buf, len, "%s:%u", u->host, u->port);
}

int xrdma_gid_sockaddr(const char *gid, uint16_t port, struct sockaddr_storage *ss)
{
	struct sockaddr_ib *sib = (struct sockaddr_ib *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET6, gid, &sib->sib_addr) != 1)
		return -EINVAL;
	sib->sib_family = AF_IB;
	sib->sib_pkey = htons(0xffff);
	sib->sib_sid = htobe64(RDMA_IB_PS_IB | port);
	sib->sib_sid_mask = htobe64(~0ull);
	return 0;
}

int xrdma_sockaddr(const struct xuri *u, bool passive, struct sockaddr_storage *ss,
		   char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res;
	char port[8], us[300];
	int rc;

	if (xuri_is_gid(u->host)) {
		if (xrdma_gid_sockaddr(u->host + 4, u->port, ss) == 0)
			return 0;
		xrdma_uri_str(u, us, sizeof(us));
		snprintf(err, errlen, "%s: invalid GID", us);
		return -EINVAL;
	}
	if (passive)
		hints.ai_flags |= AI_PASSIVE;
	snprintf(port, sizeof(port), "%u", u->port);
	rc = getaddrinfo(u->host, port, &hints, &res);
	if (rc) {
		xrdma_uri_str(u, us, sizeof(us));
		snprintf(err, errlen, "%s: %s", us,
			 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

void xrdma_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &s->sin_addr, a, sizeof(a));
		snprintf(buf, len, "%s:%u", a, ntohs(s->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;

		/* an IPv4 peer of a dual-stack listener is an IPv4 address */
		if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr)) {
			inet_ntop(AF_INET, &s->sin6_addr.s6_addr[12], a, sizeof(a));
			snprintf(buf, len, "%s:%u", a, ntohs(s->sin6_port));
			return;
		}
		inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof(a));
		snprintf(buf, len, "[%s]:%u", a, ntohs(s->sin6_port));
	} else if (sa->sa_family == AF_IB) {
		const struct sockaddr_ib *s = (const struct sockaddr_ib *)sa;

		inet_ntop(AF_INET6, &s->sib_addr, a, sizeof(a));
		snprintf(buf, len, "[gid:%s]:%u", a, (unsigned)(be64toh(s->sib_sid) & 0xffff));
	} else {
		snprintf(buf, len, "?");
	}
}

uint64_t xrdma_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t xrdma_coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int xrdma_ms_left(uint64_t deadline_ns)
{
	uint64_t now = xrdma_now_ns();

	if (now >= deadline_ns)
		return 0;
	/* round up: a 0.5 ms remainder must still wait, not spin */
	uint64_t ms = (deadline_ns - now + 999999) / 1000000;
	return ms > 1000000000 ? 1000000000 : (int)ms;
}

int xrdma_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

int xrdma_prepare(const struct xuri *u, bool passive, struct sockaddr_storage *ss,
		  char *us, size_t uslen, char *err, size_t errlen)
{
	int rc = xrdma_check(u, err, errlen);

	if (rc)
		return rc;
	xrdma_uri_str(u, us, uslen);
	rc = xrdma_sockaddr(u, passive, ss, err, errlen);
	if (rc)
		errno = -rc;
	return rc;
}

struct rdma_event_channel *xrdma_channel_create(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	int rc;

	if (!ch)
		return NULL;
	rc = xrdma_set_nonblock(ch->fd);
	if (rc) {
		rdma_destroy_event_channel(ch);
		errno = -rc;
		return NULL;
	}
	return ch;
}

int xrdma_cm_create(struct rdma_event_channel **ech, struct rdma_cm_id **id, void *context,
		    enum rdma_port_space ps, const char **failed)
{
	int rc;

	*id = NULL;
	*ech = rdma_create_event_channel();
	if (!*ech) {
		*failed = "rdma_create_event_channel";
		return -(errno ? errno : ENOMEM);
	}
	*failed = "rdma_create_id";
	rc = xrdma_set_nonblock((*ech)->fd);
	if (!rc && rdma_create_id(*ech, id, context, ps))
		rc = -(errno ? errno : ENOMEM);
	if (rc) {
		rdma_destroy_event_channel(*ech);
		*ech = NULL;
		*id = NULL;
	}
	return rc;
}

void xrdma_cm_destroy(struct rdma_cm_id *id, struct rdma_event_channel *ech)
{
	if (id)
		rdma_destroy_id(id);
	if (ech)
		rdma_destroy_event_channel(ech);
}

int xrdma_cq_create(struct ibv_context *ctx, int cqe, void *cq_context,
		    struct ibv_comp_channel **cch, struct ibv_cq **cq, const char **failed)
{
	int rc;

	*cq = NULL;
	*failed = "ibv_create_comp_channel";
	*cch = ibv_create_comp_channel(ctx);
	if (!*cch)
		return -(errno ? errno : ENOMEM);
	rc = xrdma_set_nonblock((*cch)->fd);
	if (rc)
		goto destroy_channel;
	*failed = "ibv_create_cq";
	*cq = ibv_create_cq(ctx, cqe, cq_context, *cch, 0);
	if (!*cq) {
		rc = -(errno ? errno : ENOMEM);
		goto destroy_channel;
	}
	if (ibv_req_notify_cq(*cq, 0)) {
		rc = -(errno ? errno : EIO);
		goto destroy_cq;
	}
	return 0;

destroy_cq:
	ibv_destroy_cq(*cq);
	*cq = NULL;
destroy_channel:
	ibv_destroy_comp_channel(*cch);
	*cch = NULL;
	return rc;
}

void xrdma_cq_destroy(struct ibv_cq *cq, struct ibv_comp_channel *cch)
{
	if (cq) {
		xrdma_cq_drain_events(cch);
		ibv_destroy_cq(cq);
	}
	if (cch)
		ibv_destroy_comp_channel(cch);
}

int xrdma_next_event(struct rdma_event_channel *ch, uint64_t deadline_ns, int cancel,
		     struct rdma_cm_event **ev)
{
	for (;;) {
		if (!rdma_get_cm_event(ch, ev))
			return 0;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		int ms = xrdma_ms_left(deadline_ns);
		if (!ms)
			return -ETIMEDOUT;
		struct pollfd p[2] = { { .fd = ch->fd, .events = POLLIN },
				       { .fd = cancel, .events = POLLIN } };
		int n = poll(p, cancel > 0 ? 2 : 1, ms);

		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0 && cancel > 0 && p[1].revents)
			return -ECANCELED;
	}
}

int xrdma_resolve(struct rdma_cm_id *id, const struct sockaddr *src, const struct sockaddr *dst,
		  uint64_t deadline_ns, int cancel, const char *what, char *err, size_t errlen)
{
	static const enum rdma_cm_event_type want[2] = {
		RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ROUTE_RESOLVED
	};
	struct rdma_cm_event *ev;
	int rc;

	for (int step = 0; step < 2; step++) {
		int ms = xrdma_ms_left(deadline_ns);

		if (ms < 1)
			ms = 1;
		if (step == 0)
			rc = rdma_resolve_addr(id, (struct sockaddr *)src, (struct sockaddr *)dst, ms);
		else
			rc = rdma_resolve_route(id, ms);
		if (rc) {
			rc = -errno;
			snprintf(err, errlen, "%s: %s: %s", what,
				 step ? "route resolution" : "address resolution", strerror(-rc));
			return rc;
		}
		rc = xrdma_next_event(id->channel, deadline_ns, cancel, &ev);
		if (rc) {
			snprintf(err, errlen, "%s: %s", what,
				 rc == -ETIMEDOUT ? "timed out" : strerror(-rc));
			return rc;
		}
		if (ev->event != want[step]) {
			/* rdma_cm reports "no route/ no device for that address"
			 * as ADDR_ERROR/ROUTE_ERROR with a negative status. */
			int st = ev->status < 0 ? -ev->status : EHOSTUNREACH;

			snprintf(err, errlen, "%s: %s (%s)", what, rdma_event_str(ev->event),
				 strerror(st));
			rdma_ack_cm_event(ev);
			return -st;
		}
		rdma_ack_cm_event(ev);
	}
	return 0;
}

int xrdma_waker_init(struct xrdma_waker *w, int fd1, int fd2)
{
	struct epoll_event e = { .events = EPOLLIN };
	int fds[2] = { fd1, fd2 };

	w->more = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->more < 0)
		return -errno;
	w->ep = epoll_create1(EPOLL_CLOEXEC);
	if (w->ep < 0)
		goto close_more;
	e.data.fd = w->more;
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, w->more, &e))
		goto close_ep;
	for (int i = 0; i < 2; i++) {
		if (fds[i] < 0)
			continue;
		e.data.fd = fds[i];
		if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fds[i], &e))
			goto close_ep;
	}
	return 0;

close_ep:
	close(w->ep);
close_more:
	{
		int e2 = errno;

		close(w->more);
		w->ep = w->more = -1;
		return -e2;
	}
}

void xrdma_waker_fini(struct xrdma_waker *w)
{
	if (w->ep >= 0)
		close(w->ep);
	if (w->more >= 0)
		close(w->more);
	w->ep = w->more = -1;
}

void xrdma_waker_more(struct xrdma_waker *w, bool more)
{
	uint64_t v = 1;

	if (more) {
		if (write(w->more, &v, sizeof(v)) < 0) {
			/* only EAGAIN at counter overflow: it is raised anyway */
		}
	} else if (read(w->more, &v, sizeof(v)) < 0) {
		/* EAGAIN: was not raised */
	}
}

int xrdma_waker_wait(const struct xrdma_waker *w, uint64_t timeout_ns)
{
	uint64_t deadline = xrdma_now_ns() + timeout_ns;
	struct pollfd p = { .fd = w->ep, .events = POLLIN };

	for (;;) {
		int ms = timeout_ns ? xrdma_ms_left(deadline) : 0;
		int rc = poll(&p, 1, ms);

		if (rc > 0)
			return 1;
		if (rc == 0 && (!timeout_ns || !xrdma_ms_left(deadline)))
			return 0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

void xrdma_cq_drain_events(struct ibv_comp_channel *ch)
{
	struct ibv_cq *cq;
	void *ctx;

	/* Every event read must be acknowledged or ibv_destroy_cq() hangs. */
	while (!ibv_get_cq_event(ch, &cq, &ctx))
		ibv_ack_cq_events(cq, 1);
}

int xrdma_wc_errno(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS:
		return 0;
	case IBV_WC_WR_FLUSH_ERR:
	case IBV_WC_RETRY_EXC_ERR:	/* the peer stopped answering */
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return -ECONNRESET;
	case IBV_WC_REM_ACCESS_ERR:
	case IBV_WC_REM_INV_REQ_ERR:
	case IBV_WC_REM_OP_ERR:
	case IBV_WC_REM_INV_RD_REQ_ERR:
		return -EREMOTEIO;
	case IBV_WC_LOC_LEN_ERR:
		return -EMSGSIZE;
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_MW_BIND_ERR:
		return -EFAULT;
	default:
		return -EIO;
	}
}

uint32_t xrdma_mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0;
}
