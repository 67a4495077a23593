/* Helpers shared by the verbs backends (xrc_rdma.c, xdg_ud.c): address
 * lookup, bounded waits for librdmacm events, the per-device protection
 * domain, fd plumbing and work-completion status mapping. */
#ifndef XPRT_RDMA_UTIL_H
#define XPRT_RDMA_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/ib.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "core/uri.h"
#include "xprt/xrc_pri.h"

/* One protection domain per device context, shared by every connection and
 * endpoint of the process (xrc.h: "connections on the same RDMA device share
 * one domain").  Reference-counted; the last put deallocates. */
struct xrdma_pd {
	struct xrc_dom dom;	/* first: what xrc_domain() hands out (xrc_rdma.c) */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	bool mw1, mw2;		/* the device has type-1 / type-2 memory windows */
	/* rxe (up to at least Linux 6.1) writes the kernel's
	 * IB_WC_WITH_INVALIDATE (1 << 2) into user completions, where
	 * libibverbs says IBV_WC_WITH_INV is 1 << 3 and 1 << 2 is
	 * IBV_WC_IP_CSUM_OK (meaningless on RC): on such a device either bit
	 * on a receive means "with invalidate". */
	bool inv_bit2;
	struct ibv_mr *zmr;	/* a tiny region for zero-length binds (xrdma_pd_zmr) */
	unsigned refs;
	struct xrdma_pd *next;
};
struct xrdma_pd *xrdma_pd_get(struct ibv_context *ctx, char *err, size_t errlen);
void xrdma_pd_put(struct xrdma_pd *p);			/* NULL ok */
void xrdma_pd_ref(struct xrdma_pd *p);
/* A region of the PD to name in a zero-length bind (rxe's provider reads
 * the region of a bind even when the length is 0), registered on first
 * use, kept until the PD goes.  NULL with errno on failure. */
struct ibv_mr *xrdma_pd_zmr(struct xrdma_pd *p);

/* Fails with the one-line "URI: no RDMA device found (...); use tcp://...
 * instead" (xdev_require) when there is no usable device. */
int xrdma_check(const struct xuri *u, char *err, size_t errlen);
/* After a registration failed with e: " (RLIMIT_MEMLOCK is N KiB: raise
 * ulimit -l, or LimitMEMLOCK=)" in buf where the limit may be why (ENOMEM
 * or EPERM under a finite RLIMIT_MEMLOCK), else "". */
void xrdma_memlock_hint(int e, char *buf, size_t len);

/* The errno of a failed ibv_post_send/ibv_post_recv: verbs returns it
 * (errno need not be set), and some providers return it negated. */
static inline int xrdma_post_err(int r)
{
	return r < 0 ? -r : r;
}

/* "scheme://host:port" for messages. */
void xrdma_uri_str(const struct xuri *u, char *buf, size_t len);

/* The AF_IB address of an InfiniBand GID (its IPv6 form) and port, as the
 * kernel's rtrs makes of a "gid:" path: service id RDMA_IB_PS_IB | port
 * (every bit of it compared), the default P_Key.  0 or -EINVAL. */
int xrdma_gid_sockaddr(const char *gid, uint16_t port, struct sockaddr_storage *ss);
/* getaddrinfo() of u->host:u->port (passive: wildcard allowed), or for a
 * "gid:GID" host xrdma_gid_sockaddr().  0 or -errno with "URI: reason" in
 * err. */
int xrdma_sockaddr(const struct xuri *u, bool passive, struct sockaddr_storage *ss,
		   char *err, size_t errlen);
/* "ADDR:PORT" of a sockaddr. */
void xrdma_addr_str(const struct sockaddr *sa, char *buf, size_t len);

/* Monotonic deadline helpers (ns). */
uint64_t xrdma_now_ns(void);
/* CLOCK_MONOTONIC_COARSE: the last tick (a few ms old at most), read from
 * the vDSO without the TSC -- enough for throttling checks in a busy poll. */
uint64_t xrdma_coarse_ns(void);
int xrdma_ms_left(uint64_t deadline_ns);	/* >= 0 */

int xrdma_set_nonblock(int fd);

/* xrdma_check(), then "scheme://host:port" of u into us (for messages) and
 * its address into ss.  0, or -errno with errno set and err filled. */
int xrdma_prepare(const struct xuri *u, bool passive, struct sockaddr_storage *ss,
		  char *us, size_t uslen, char *err, size_t errlen);

/* A CM event channel, non-blocking: NULL with errno set on failure. */
struct rdma_event_channel *xrdma_channel_create(void);
/* A non-blocking CM event channel and an id on it.  0, or -errno with
 * *failed naming what failed ("rdma_create_event_channel", or
 * "rdma_create_id" for the rest), nothing left behind and both NULL. */
int xrdma_cm_create(struct rdma_event_channel **ech, struct rdma_cm_id **id, void *context,
		    enum rdma_port_space ps, const char **failed);
/* Destroys the id, then its channel; NULLs ok.  Every event read must have
 * been acknowledged, or this blocks. */
void xrdma_cm_destroy(struct rdma_cm_id *id, struct rdma_event_channel *ech);

/* A non-blocking completion channel and one CQ of cqe entries on it, armed.
 * 0, or -errno with *failed naming what failed ("ibv_create_comp_channel",
 * or "ibv_create_cq" for the CQ and its arming), nothing left behind and
 * both NULL. */
int xrdma_cq_create(struct ibv_context *ctx, int cqe, void *cq_context,
		    struct ibv_comp_channel **cch, struct ibv_cq **cq, const char **failed);
/* Acknowledges pending events, destroys the CQ, then the channel; NULLs ok. */
void xrdma_cq_destroy(struct ibv_cq *cq, struct ibv_comp_channel *cch);

/* Waits for the next event on a non-blocking channel until the deadline,
 * or until cancel (> 0, xrc_opts.cancel_fd) is readable.  0 and *ev, or
 * -ETIMEDOUT / -ECANCELED / -errno. */
int xrdma_next_event(struct rdma_event_channel *ch, uint64_t deadline_ns, int cancel,
		     struct rdma_cm_event **ev);
/* rdma_resolve_addr + rdma_resolve_route, bounded: 0 or -errno + err. */
int xrdma_resolve(struct rdma_cm_id *id, const struct sockaddr *src, const struct sockaddr *dst,
		  uint64_t deadline_ns, int cancel, const char *what, char *err, size_t errlen);

/* An epoll set readable while any of its fds is: what xrc_fd()/xdg_fd()
 * return, so that both the completion channel and the CM channel wake the
 * caller.  The eventfd "more" is raised when a poll stopped with
 * completions possibly left in the CQ (its array was full). */
struct xrdma_waker {
	int ep;
	int more;
};
int xrdma_waker_init(struct xrdma_waker *w, int fd1, int fd2);
void xrdma_waker_fini(struct xrdma_waker *w);
void xrdma_waker_more(struct xrdma_waker *w, bool more);
/* 1 ready, 0 timeout, -errno. */
int xrdma_waker_wait(const struct xrdma_waker *w, uint64_t timeout_ns);

/* Drains and acknowledges queued completion events, then re-arms. */
void xrdma_cq_drain_events(struct ibv_comp_channel *ch);

/* Work-completion status -> -errno (xrc.h: -ECONNRESET flushed, -EREMOTEIO
 * peer refused, -EMSGSIZE receive buffer too small). */
int xrdma_wc_errno(enum ibv_wc_status s);

/* Bytes of an ibv_mtu value (IBV_MTU_1024 -> 1024). */
uint32_t xrdma_mtu_bytes(enum ibv_mtu m);

#endif
