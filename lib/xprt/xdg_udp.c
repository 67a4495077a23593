/* udp:// backend of xdg.h: one kernel UDP socket, recvmmsg/sendmmsg batches.
 *
 * Receive: the endpoint owns rx_depth buffers of mtu bytes.  Each
 * xdg_poll() hands the whole ring back to the kernel in one recvmmsg, so a
 * completion's data stays valid exactly until the next xdg_poll(), as
 * xdg.h promises.  A datagram bigger than the mtu arrives with MSG_TRUNC and
 * is dropped and counted, never delivered cut short.
 *
 * Send: sendmmsg copies every payload into the kernel before it returns, so
 * XDG_ZCOPY costs nothing extra and a signaled send is complete at once; its
 * completion is queued for the next xdg_poll() (never returned by a post).
 * A run of datagrams of one size to one peer goes as one message with
 * UDP_SEGMENT (generic segmentation offload, Linux 4.18+): the stack is
 * walked once for up to GSO_SEGS datagrams, and the device or the last
 * moment before it cuts them apart; on the wire they are the same
 * datagrams.  Where the kernel or the route refuses it the datagrams go
 * one by one.
 *
 * Senders: wc.src comes from a cache of peer addresses, a hash table with an
 * LRU list bounded at SRC_MAX entries.  Entries are recycled, never freed
 * before xdg_close(), so a stale pointer is still memory we own; see xdg.h
 * for how long one names the same sender.  xdg_resolve() results are pinned
 * and never recycled. */
#include "xprt/xdg_pri.h"
#include "core/log.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define UDP_MTU_DEFAULT	4096u
#define UDP_MTU_MAX	65507u		/* 65535 - 8 (UDP) - 20 (IPv4) */
#define SRC_MAX		4096u		/* unpinned sender entries kept */
#define HASH_SIZE	8192u		/* buckets, a power of two */
#define BUF_DEFAULT	(4 << 20)
#define GSO_SEGS	64u		/* datagrams per UDP_SEGMENT message (UDP_MAX_SEGMENTS) */
#define GSO_BYTES	65000u		/* their payload: one IP packet's worth */

#define GRO_RXSZ	65535u		/* a coalesced receive: at most one IP packet */

#ifndef UDP_SEGMENT
#define UDP_SEGMENT	103		/* linux/udp.h, 4.18 */
#endif
#ifndef UDP_GRO
#define UDP_GRO		104		/* linux/udp.h, 5.0 */
#endif

/* A sender, normalised so equal peers compare equal byte for byte. */
struct akey {
	uint16_t family, port;
	uint32_t scope;
	uint8_t addr[16];
};

struct udp_addr {
	struct xdg_addr base;		/* first: what callers hold */
	struct akey key;
	struct sockaddr_storage sa;
	socklen_t sl;
	bool pinned;			/* from xdg_resolve(): never recycled */
	bool nogso;			/* its route refused UDP_SEGMENT (EINVAL) */
	struct udp_addr *hnext;
	struct xdg_lru_node lru;	/* on the endpoint's list while unpinned */
};

struct udp_ep {
	struct xdg base;
	int fd, family;
	bool connected;			/* xdg_connect(): ICMP errors come back */
	uint32_t rx_depth, tx_depth;
	uint32_t rxsz;			/* bytes per receive buffer */
	/* Slots [pend_slot, pend_end) of the last receive hold datagrams
	 * not yet handed out (a run bigger than the poll's room), from
	 * pend_off in pend_slot on; slot i's datagrams are rseg[i] bytes
	 * each (0: nothing to hand out) from rsrc[i]. */
	uint32_t pend_slot, pend_end, pend_off;
	bool gro_bufs;			/* opened with gro: buffers for runs */
	bool gro_none;			/* the kernel has no UDP_GRO */
	uint32_t *rseg;
	struct udp_addr **rsrc;
	uint8_t *ring;			/* rx_depth * rxsz */
	struct mmsghdr *rmsg;
	struct iovec *riov;
	struct sockaddr_storage *rsa;
	uint8_t *rctl;			/* rx_depth control buffers */
	struct mmsghdr *smsg;
	struct iovec *siov;
	uint8_t *sctl;			/* tx_depth UDP_SEGMENT control buffers */
	uint32_t *sgrp;			/* datagrams in each message of a send */
	bool gso_off;			/* the kernel has no UDP_SEGMENT */
	uint64_t *txc;			/* signaled sends waiting for xdg_poll() */
	uint32_t txc_head, txc_tail;
	struct udp_addr *hash[HASH_SIZE];
	struct xdg_lru lru;		/* unpinned senders, most recent first */
	uint32_t nsrc;
};

#define CTL_LEN (CMSG_SPACE(sizeof(uint32_t)) + CMSG_SPACE(sizeof(int)))
#define SCTL_LEN CMSG_SPACE(sizeof(uint16_t))

static struct udp_ep *UE(struct xdg *d) { return (struct udp_ep *)d; }

static void sa_key(const struct sockaddr *sa, struct akey *k)
{
	memset(k, 0, sizeof(*k));
	k->family = sa->sa_family;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		k->port = s4->sin_port;
		memcpy(k->addr, &s4->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		k->port = s6->sin6_port;
		k->scope = s6->sin6_scope_id;
		memcpy(k->addr, &s6->sin6_addr, 16);
	}
}

static uint32_t key_hash(const struct akey *k)
{
	const uint8_t *p = (const uint8_t *)k;
	uint32_t h = 2166136261u;	/* FNV-1a */

	for (size_t i = 0; i < sizeof(*k); i++)
		h = (h ^ p[i]) * 16777619u;
	return h & (HASH_SIZE - 1);
}

/* The sender's host (xdg_addr_host): a tag for the family, then the
 * address; a v4-mapped one as v4, so that a dual-stack socket sees a v4
 * host as one host whichever way it came, and IPv6 with its scope id,
 * since fe80::1 on two links is two hosts. */
static void host_key(const struct akey *k, struct xdg_addr *b)
{
	const struct in6_addr *a6 = (const struct in6_addr *)(const void *)k->addr;

	if (k->family == AF_INET || (k->family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(a6))) {
		b->host[0] = 4;
		memcpy(b->host + 1, k->family == AF_INET ? k->addr : k->addr + 12, 4);
		b->hostlen = 5;
	} else {
		b->host[0] = 6;
		memcpy(b->host + 1, &k->scope, 4);
		memcpy(b->host + 5, k->addr, 16);
		b->hostlen = 21;
	}
}

static void addr_fmt(struct udp_addr *a)
{
	char h[64], p[8];	/* fits str[80] with brackets and port */
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&a->sa;

	if (getnameinfo((struct sockaddr *)&a->sa, a->sl, h, sizeof(h), p, sizeof(p),
			NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(a->base.str, sizeof(a->base.str), "?");
		return;
	}
	/* a v4 peer on a dual-stack socket reads best as plain v4 */
	if (a->sa.ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) &&
	    strncmp(h, "::ffff:", 7) == 0)
		snprintf(a->base.str, sizeof(a->base.str), "%s:%s", h + 7, p);
	else
		snprintf(a->base.str, sizeof(a->base.str), strchr(h, ':') ? "[%s]:%s" : "%s:%s",
			 h, p);
}

static void hash_unlink(struct udp_ep *e, struct udp_addr *a)
{
	struct udp_addr **pp = &e->hash[key_hash(&a->key)];

	while (*pp && *pp != a)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = a->hnext;
}

/* The cached entry for a sender, created (or recycled from the least
 * recently seen one) when new; NULL only when out of memory. */
static struct udp_addr *addr_get(struct udp_ep *e, const struct sockaddr *sa, socklen_t sl)
{
	struct akey k;
	uint32_t h;
	struct udp_addr *a;

	sa_key(sa, &k);
	h = key_hash(&k);
	for (a = e->hash[h]; a; a = a->hnext)
		if (!memcmp(&a->key, &k, sizeof(k))) {
			if (!a->pinned)
				xdg_lru_touch(&e->lru, &a->lru);
			return a;
		}
	if (e->nsrc >= SRC_MAX && e->lru.tail) {
		a = XDG_LRU_ENTRY(e->lru.tail, struct udp_addr, lru);
		xdg_lru_unlink(&e->lru, &a->lru);
		hash_unlink(e, a);
	} else {
		if (!(a = calloc(1, sizeof(*a))))
			return NULL;
		e->nsrc++;
	}
	a->key = k;
	a->base.ops = &xdg_udp_ops;
	host_key(&k, &a->base);
	memcpy(&a->sa, sa, sl);
	a->sl = sl;
	a->pinned = false;
	a->nogso = false;
	addr_fmt(a);
	a->hnext = e->hash[h];
	e->hash[h] = a;
	xdg_lru_front(&e->lru, &a->lru);
	return a;
}

static void addr_pin(struct udp_ep *e, struct udp_addr *a)
{
	if (!a->pinned) {
		xdg_lru_unlink(&e->lru, &a->lru);
		e->nsrc--;
		a->pinned = true;
	}
}

static struct xdg_addr *udp_resolve(struct xdg *d, const struct xuri *peer, char *err,
				    size_t errlen)
{
	struct udp_ep *e = UE(d);
	struct addrinfo hints = { .ai_socktype = SOCK_DGRAM, .ai_family = e->family,
				  .ai_flags = e->family == AF_INET6 ? AI_V4MAPPED : 0 }, *ai;
	struct udp_addr *a;
	char port[8];
	int rc;

	snprintf(port, sizeof(port), "%u", peer->port);
	rc = getaddrinfo(peer->host, port, &hints, &ai);
	if (rc) {
		xerr(err, errlen, "udp://%s:%u: cannot resolve: %s", peer->host, peer->port,
		     rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		errno = rc == EAI_SYSTEM ? errno : EHOSTUNREACH;
		return NULL;
	}
	a = addr_get(e, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (!a) {
		xerr(err, errlen, "udp://%s:%u: out of memory", peer->host, peer->port);
		errno = ENOMEM;
		return NULL;
	}
	addr_pin(e, a);
	return &a->base;
}

static struct xdg_addr *udp_import(struct xdg *d, const struct xdg_addr *from, char *err,
				   size_t errlen)
{
	struct udp_ep *e = UE(d);
	const struct udp_addr *f = (const struct udp_addr *)from;
	struct udp_addr *a;

	if (f->sa.ss_family != e->family) {
		xerr(err, errlen, "%s: another address family than this endpoint's", f->base.str);
		errno = EAFNOSUPPORT;
		return NULL;
	}
	a = addr_get(e, (const struct sockaddr *)&f->sa, f->sl);
	if (!a) {
		xerr(err, errlen, "%s: out of memory", f->base.str);
		errno = ENOMEM;
		return NULL;
	}
	addr_pin(e, a);
	return &a->base;
}

/* Messages for datagrams m[0..cnt): runs of one size to one peer (the last
 * of a run may be shorter, not empty: an empty segment would vanish) become
 * one UDP_SEGMENT message each, unless gso is false.  Returns the number of messages; e->sgrp[k] says how many
 * datagrams message k carries. */
static int build_msgs(struct udp_ep *e, const struct xdg_dgram *m, int cnt, bool gso)
{
	struct iovec *v = e->siov;
	int k = 0;

	for (int i = 0; i < cnt; k++) {
		const struct udp_addr *a = (const struct udp_addr *)m[i].to;
		struct msghdr *h = &e->smsg[k].msg_hdr;
		uint32_t seg = m[i].hlen + m[i].len, bytes = 0, nd = 0;
		struct iovec *first = v;

		do {
			/* a header in front of the payload: one datagram, no copy */
			if (m[i].hlen)
				*v++ = (struct iovec){ (void *)m[i].hdr, m[i].hlen };
			*v++ = (struct iovec){ (void *)m[i].buf, m[i].len };
			bytes += m[i].hlen + m[i].len;
			nd++;
			i++;
		} while (gso && !a->nogso && i < cnt && m[i].to == &a->base && nd < GSO_SEGS &&
			 m[i - 1].hlen + m[i - 1].len == seg && m[i].hlen + m[i].len <= seg &&
			 m[i].hlen + m[i].len > 0 &&
			 bytes + m[i].hlen + m[i].len <= GSO_BYTES);
		*h = (struct msghdr){ .msg_name = (void *)&a->sa, .msg_namelen = a->sl,
				      .msg_iov = first, .msg_iovlen = (size_t)(v - first) };
		if (nd > 1) {
			struct cmsghdr *c;
			uint16_t gs = (uint16_t)seg;

			h->msg_control = e->sctl + (size_t)k * SCTL_LEN;
			h->msg_controllen = SCTL_LEN;
			c = CMSG_FIRSTHDR(h);
			c->cmsg_level = SOL_UDP;
			c->cmsg_type = UDP_SEGMENT;
			c->cmsg_len = CMSG_LEN(sizeof(gs));
			memcpy(CMSG_DATA(c), &gs, sizeof(gs));
		}
		e->sgrp[k] = nd;
	}
	return k;
}

static int udp_send_batch(struct xdg *d, const struct xdg_dgram *m, int n, unsigned flags)
{
	struct udp_ep *e = UE(d);
	uint32_t room = e->tx_depth - (e->txc_tail - e->txc_head);
	int cnt = n < (int)e->tx_depth ? n : (int)e->tx_depth, msgs, sent, done = 0;
	bool gso = !e->gso_off;

	if ((flags & XDG_SIGNALED) && (uint32_t)cnt > room)
		cnt = (int)room;
	if (!cnt)
		return -ENOBUFS;
	for (;;) {
		msgs = build_msgs(e, m, cnt, gso);
		do
			sent = sendmmsg(e->fd, e->smsg, (unsigned)msgs, MSG_DONTWAIT);
		while (sent < 0 && errno == EINTR);
		/* The first message was refused for its segmentation: no
		 * UDP_SEGMENT in this kernel (EIO: the device cannot checksum
		 * it either) -- none for this endpoint from now on -- or not
		 * for this route (EINVAL, EMSGSIZE: a segment longer than the
		 * route's MTU, which the kernel would fragment one datagram at
		 * a time but cannot cut out of a run) -- none to that peer. */
		if (sent < 0 && gso && e->sgrp[0] > 1 &&
		    (errno == EINVAL || errno == EMSGSIZE || errno == EIO || errno == ENOPROTOOPT ||
		     errno == EOPNOTSUPP)) {
			if (errno == EINVAL || errno == EMSGSIZE)
				((struct udp_addr *)m[0].to)->nogso = true;
			else
				gso = !(e->gso_off = true);
			continue;
		}
		break;
	}
	if (sent < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	for (int k = 0; k < sent; k++)
		done += (int)e->sgrp[k];
	for (int i = 0; i < done; i++) {
		d->stats.tx_pkts++;
		d->stats.tx_bytes += m[i].len + m[i].hlen;
		if (flags & XDG_SIGNALED)
			e->txc[e->txc_tail++ % e->tx_depth] = m[i].wr_id;
	}
	return done;
}

/* Receive slot i: its ring buffer, address and control space.  Set once;
 * recvmmsg writes back only the lengths and flags, which rx_rearm resets
 * for the slots a call used, so a poll that finds nothing (the spinning
 * case) costs the system call alone. */
static void rx_init(struct udp_ep *e, uint32_t i)
{
	e->riov[i] = (struct iovec){ e->ring + (size_t)i * e->rxsz, e->rxsz };
	e->rmsg[i].msg_hdr = (struct msghdr){ .msg_name = &e->rsa[i],
		.msg_namelen = sizeof(e->rsa[i]), .msg_iov = &e->riov[i], .msg_iovlen = 1,
		.msg_control = e->rctl + (size_t)i * CTL_LEN, .msg_controllen = CTL_LEN };
}

static void rx_rearm(struct udp_ep *e, uint32_t first, uint32_t count)
{
	for (uint32_t i = first; i < first + count; i++) {
		struct msghdr *h = &e->rmsg[i].msg_hdr;

		h->msg_namelen = sizeof(e->rsa[i]);
		h->msg_controllen = CTL_LEN;
		h->msg_flags = 0;
	}
}

/* One recvmmsg into ring slots [first, first+vlen): what each slot holds
 * goes to rseg/rsrc and the slots to the pending range.  Returns 1 with
 * wc[0] set for a refused port (connected), else 0; *more when every slot
 * was filled. */
static int rx_batch(struct udp_ep *e, uint32_t first, uint32_t vlen, struct xdg_wc *wc,
		    bool *more)
{
	struct xdg *d = &e->base;
	int n;

	do
		n = recvmmsg(e->fd, e->rmsg + first, vlen, MSG_DONTWAIT, NULL);
	while (n < 0 && errno == EINTR);
	*more = n == (int)vlen;
	e->pend_slot = e->pend_end = first;
	e->pend_off = 0;
	if (n < 0 && errno == ECONNREFUSED && e->connected) {
		/* the ICMP port unreachable a connected socket reports */
		wc[0] = (struct xdg_wc){ .op = XDG_OP_RECV, .status = -ECONNREFUSED };
		return 1;
	}
	for (int i = 0; i < n; i++) {
		uint32_t s = first + (uint32_t)i, len = e->rmsg[s].msg_len;
		struct msghdr *h = &e->rmsg[s].msg_hdr;

		e->rseg[s] = len ? len : 1;	/* one datagram, unless coalesced */
		for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
				uint32_t drops;

				memcpy(&drops, CMSG_DATA(c), sizeof(drops));
				/* a running total of the socket's drops */
				if (drops > d->stats.rx_dropped)
					d->stats.rx_dropped = drops;
			} else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
				int g;

				memcpy(&g, CMSG_DATA(c), sizeof(g));
				if (g > 0 && (uint32_t)g < len) {
					e->rseg[s] = (uint32_t)g;
					d->stats.rx_runs++;
				}
			}
		}
		/* a datagram over the MTU is truncated, also where the
		 * buffers are big for runs and the kernel coalesced one while
		 * gro was on (it is off now: no UDP_GRO to cut it by) */
		if ((h->msg_flags & MSG_TRUNC) || (e->rseg[s] == len && len > d->mtu)) {
			d->stats.rx_truncated++;
			e->rseg[s] = 0;
		} else if (!(e->rsrc[s] = addr_get(e, (struct sockaddr *)&e->rsa[s],
						   h->msg_namelen))) {
			d->stats.rx_dropped++;	/* out of memory: a sender we cannot name */
			e->rseg[s] = 0;
		}
	}
	if (n > 0)
		e->pend_end = first + (uint32_t)n;
	/* the ones filled, and the one that found the queue empty */
	rx_rearm(e, first, n < 0 ? 1 : (uint32_t)n < vlen ? (uint32_t)n + 1 : vlen);
	return 0;
}

/* Up to room datagrams of the pending slots, a coalesced run split at its
 * segment size; what does not fit stays pending. */
static int rx_deliver(struct udp_ep *e, struct xdg_wc *wc, int room)
{
	struct xdg *d = &e->base;
	int k = 0;

	while (k < room && e->pend_slot < e->pend_end) {
		uint32_t s = e->pend_slot, len = e->rmsg[s].msg_len, seg = e->rseg[s];

		/* seg 0: dropped; an empty datagram is one wc of length 0 */
		if (seg) {
			uint32_t l = len - e->pend_off < seg ? len - e->pend_off : seg;

			wc[k++] = (struct xdg_wc){ .op = XDG_OP_RECV,
				.data = (uint8_t *)e->riov[s].iov_base + e->pend_off, .len = l,
				.src = &e->rsrc[s]->base };
			d->stats.rx_pkts++;
			d->stats.rx_bytes += l;
			e->pend_off += l;
			if (e->pend_off < len)
				continue;
		}
		e->pend_slot++;
		e->pend_off = 0;
	}
	return k;
}

static int udp_poll(struct xdg *d, struct xdg_wc *wc, int n)
{
	struct udp_ep *e = UE(d);
	uint32_t used = 0;
	int k = 0;
	bool more = true;

	while (k < n && e->txc_head != e->txc_tail)
		wc[k++] = (struct xdg_wc){ .op = XDG_OP_SEND,
					   .wr_id = e->txc[e->txc_head++ % e->tx_depth] };
	/* the rest of a coalesced run the last poll had no room for: its
	 * slots are still ours, the next receive waits */
	if (e->pend_slot < e->pend_end) {
		k += rx_deliver(e, wc + k, n - k);
		return k;
	}
	/* The previous poll's data is now the kernel's again: refill from
	 * slot 0.  A second batch only when truncated datagrams ate the first. */
	while (k < n && more && used < e->rx_depth) {
		uint32_t vlen = (uint32_t)(n - k);

		if (vlen > e->rx_depth - used)
			vlen = e->rx_depth - used;
		k += rx_batch(e, used, vlen, wc + k, &more);
		k += rx_deliver(e, wc + k, n - k);
		used += vlen;
		if (e->pend_slot < e->pend_end)
			break;
	}
	return k;
}

static int udp_recv_sg(struct xdg *d, const struct xdg_rwr *w, int n, struct xdg_wc *wc)
{
	struct udp_ep *e = UE(d);
	struct iovec iov[64 * 8];
	struct mmsghdr mm[8];
	int got = 0;

	/* eight at a time: what one call's stack holds */
	while (got < n) {
		int k = n - got < 8 ? n - got : 8, r;
		struct iovec *v = iov;

		for (int i = 0; i < k; i++) {
			const struct xdg_rwr *x = &w[got + i];

			for (uint32_t j = 0; j < x->nsge; j++)
				v[j] = (struct iovec){ x->sg[j].addr, x->sg[j].len };
			mm[i].msg_hdr = (struct msghdr){ .msg_iov = v, .msg_iovlen = x->nsge };
			v += x->nsge;
		}
		do
			r = recvmmsg(e->fd, mm, (unsigned)k, MSG_DONTWAIT, NULL);
		while (r < 0 && errno == EINTR);
		if (r < 0) {
			if (errno == ECONNREFUSED && e->connected) {
				wc[got] = (struct xdg_wc){ .op = XDG_OP_RECV, .status = -ECONNREFUSED,
							   .wr_id = w[got].wr_id };
				return got + 1;
			}
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return got ? got : -errno;
		}
		for (int i = 0; i < r; i++) {
			bool cut = mm[i].msg_hdr.msg_flags & MSG_TRUNC;

			wc[got + i] = (struct xdg_wc){ .op = XDG_OP_RECV, .wr_id = w[got + i].wr_id,
						       .len = mm[i].msg_len,
						       .status = cut ? -EMSGSIZE : 0 };
			if (cut)
				d->stats.rx_truncated++;
			d->stats.rx_pkts++;
			d->stats.rx_bytes += mm[i].msg_len;
		}
		got += r;
		if (r < k)
			break;
	}
	return got;
}

static int udp_fd(const struct xdg *d) { return ((const struct udp_ep *)d)->fd; }

static uint32_t udp_path_mtu(struct xdg *d, const struct xdg_addr *to)
{
	const struct udp_addr *a = (const struct udp_addr *)to;
	bool v6 = a->sa.ss_family == AF_INET6;
	int fd = socket(a->sa.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0), mtu = 0;
	socklen_t l = sizeof(mtu);
	uint32_t hdr = v6 ? 48 : 28, pm;

	/* the route's MTU, which is what a connected socket reports */
	if (fd < 0 || connect(fd, (const struct sockaddr *)&a->sa, a->sl) < 0 ||
	    getsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_MTU : IP_MTU, &mtu, &l) < 0 ||
	    mtu <= (int)hdr) {
		if (fd >= 0)
			close(fd);
		return d->mtu;
	}
	close(fd);
	pm = (uint32_t)mtu - hdr;
	return pm < d->mtu ? pm : d->mtu;
}

static int udp_connect(struct xdg *d, const struct xdg_addr *peer)
{
	struct udp_ep *e = UE(d);
	const struct udp_addr *a = (const struct udp_addr *)peer;
	struct sockaddr un = { .sa_family = AF_UNSPEC };
	int rc;

	rc = a ? connect(e->fd, (const struct sockaddr *)&a->sa, a->sl)
	       : connect(e->fd, &un, sizeof(un));
	if (rc < 0)
		return -errno;
	e->connected = a != NULL;
	return 0;
}

static int udp_set_gro(struct xdg *d, bool on)
{
	struct udp_ep *e = UE(d);
	int v = on;

	if (!e->gro_bufs)
		return -EINVAL;
	if (e->gro_none)
		return -EOPNOTSUPP;
	if (setsockopt(e->fd, SOL_UDP, UDP_GRO, &v, sizeof(v)) < 0) {
		e->gro_none = errno == ENOPROTOOPT;
		return e->gro_none ? -EOPNOTSUPP : -errno;
	}
	d->gro = on;
	return 0;
}

/* Reads and drops what waits on the socket, and a pending socket error. */
static int udp_reset(struct xdg *d, uint32_t qkey)
{
	struct udp_ep *e = UE(d);
	int n, soerr;
	socklen_t l = sizeof(soerr);

	(void)qkey;
	e->pend_slot = e->pend_end = e->pend_off = 0;	/* nothing of before */
	do {
		rx_rearm(e, 0, e->rx_depth);
		n = recvmmsg(e->fd, e->rmsg, e->rx_depth, MSG_DONTWAIT, NULL);
	} while (n > 0 || (n < 0 && (errno == EINTR || errno == ECONNREFUSED)));
	rx_rearm(e, 0, e->rx_depth);
	getsockopt(e->fd, SOL_SOCKET, SO_ERROR, &soerr, &l);
	return 0;
}

static int udp_wait(struct xdg *d, uint64_t timeout_ns)
{
	struct udp_ep *e = UE(d);
	struct pollfd p = { e->fd, POLLIN, 0 };
	struct timespec ts = { (time_t)(timeout_ns / 1000000000ull),
			       (long)(timeout_ns % 1000000000ull) };
	int rc;

	if (e->txc_head != e->txc_tail || e->pend_slot < e->pend_end)
		return 1;
	rc = ppoll(&p, 1, &ts, NULL);
	if (rc < 0)
		return errno == EINTR ? 0 : -errno;
	return rc > 0;
}

static void udp_close(struct xdg *d)
{
	struct udp_ep *e = UE(d);

	for (uint32_t i = 0; i < HASH_SIZE; i++)
		for (struct udp_addr *a = e->hash[i], *nx; a; a = nx) {
			nx = a->hnext;
			free(a);
		}
	if (e->fd >= 0)
		close(e->fd);
	free(e->ring);
	free(e->rmsg);
	free(e->riov);
	free(e->rsa);
	free(e->rctl);
	free(e->rseg);
	free(e->rsrc);
	free(e->smsg);
	free(e->siov);
	free(e->sctl);
	free(e->sgrp);
	free(e->txc);
	free(e);
}

/* Root (CAP_NET_ADMIN) may go past net.core.[rw]mem_max with *BUFFORCE. */
static void set_buf(int fd, int force, int opt, int bytes)
{
	if (setsockopt(fd, SOL_SOCKET, force, &bytes, sizeof(bytes)) < 0)
		setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes));
}

static struct xdg *udp_open(const struct xuri *u, const struct xdg_opts *o, char *err,
			    size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_DGRAM, .ai_flags = AI_PASSIVE }, *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct udp_ep *e;
	char port[8];
	int one = 1, rc;
	uint32_t mtu = o->mtu ? o->mtu : UDP_MTU_DEFAULT, rd = o->rx_depth, td = o->tx_depth;

	if (o->user_rx) {
		xerr(err, errlen,
		     "udp://%s:%u: caller-posted receive buffers are a ud:// feature", u->host,
		     u->port);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (mtu > UDP_MTU_MAX || rd > 65536 || td > 65536) {
		xerr(err, errlen,
		     "udp://%s:%u: mtu over %u or rx/tx depth over 65536", u->host, u->port,
		     UDP_MTU_MAX);
		errno = EINVAL;
		return NULL;
	}
	snprintf(port, sizeof(port), "%u", u->port);
	rc = getaddrinfo(u->host, port, &hints, &ai);
	if (rc) {
		xerr(err, errlen, "udp://%s:%u: cannot resolve: %s", u->host, u->port,
		     rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		errno = rc == EAI_SYSTEM ? errno : EADDRNOTAVAIL;
		return NULL;
	}
	if (!(e = calloc(1, sizeof(*e))))
		goto out_nomem;
	e->base = (struct xdg){ .ops = &xdg_udp_ops, .scheme = XURI_UDP, .mtu = mtu };
	e->rx_depth = rd;
	e->tx_depth = td;
	e->rxsz = o->rx_size && o->rx_size < mtu ? o->rx_size : mtu;
	if (o->gro)
		e->rxsz = GRO_RXSZ;
	e->family = ai->ai_family;
	e->fd = -1;
	e->ring = malloc((size_t)rd * e->rxsz);
	e->rmsg = calloc(rd, sizeof(*e->rmsg));
	e->riov = calloc(rd, sizeof(*e->riov));
	e->rsa = calloc(rd, sizeof(*e->rsa));
	e->rctl = calloc(rd, CTL_LEN);
	e->rseg = calloc(rd, sizeof(*e->rseg));
	e->rsrc = calloc(rd, sizeof(*e->rsrc));
	e->smsg = calloc(td, sizeof(*e->smsg));
	e->siov = calloc(2 * (size_t)td, sizeof(*e->siov));
	e->sctl = calloc(td, SCTL_LEN);
	e->sgrp = calloc(td, sizeof(*e->sgrp));
	e->txc = calloc(td, sizeof(*e->txc));
	if (!e->ring || !e->rmsg || !e->riov || !e->rsa || !e->rctl || !e->smsg || !e->siov ||
	    !e->sctl || !e->sgrp || !e->txc || !e->rseg || !e->rsrc)
		goto out_nomem;
	for (uint32_t i = 0; i < rd; i++)
		rx_init(e, i);
	e->fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (e->fd < 0 || bind(e->fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
	    getsockname(e->fd, (struct sockaddr *)&ss, &sl) < 0) {
		xerr(err, errlen, "udp://%s:%u: %s", u->host, u->port, strerror(errno));
		goto out_close;
	}
	setsockopt(e->fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
	/* coalesced receives where the kernel has them (5.0+); the buffers
	 * are big enough either way */
	e->gro_bufs = o->gro;
	e->base.gro = o->gro && setsockopt(e->fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) == 0;
	e->gro_none = o->gro && !e->base.gro && errno == ENOPROTOOPT;
	set_buf(e->fd, SO_SNDBUFFORCE, SO_SNDBUF, o->sndbuf ? o->sndbuf : BUF_DEFAULT);
	set_buf(e->fd, SO_RCVBUFFORCE, SO_RCVBUF, o->rcvbuf ? o->rcvbuf : BUF_DEFAULT);
	e->base.port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						      : ((struct sockaddr_in *)&ss)->sin_port);
	freeaddrinfo(ai);
	return &e->base;

out_nomem:
	xerr(err, errlen, "udp://%s:%u: out of memory", u->host, u->port);
	errno = ENOMEM;
out_close:
	rc = errno;
	if (e)
		udp_close(&e->base);
	freeaddrinfo(ai);
	errno = rc;
	return NULL;
}

const struct xdg_ops xdg_udp_ops = {
	.open = udp_open,
	.close = udp_close,
	.resolve = udp_resolve,
	.send_batch = udp_send_batch,
	.poll = udp_poll,
	.fd = udp_fd,
	.wait = udp_wait,
	.path_mtu = udp_path_mtu,
	.connect = udp_connect,
	.reset = udp_reset,
	.import = udp_import,
	.recv_sg = udp_recv_sg,
	.set_gro = udp_set_gro,
};
