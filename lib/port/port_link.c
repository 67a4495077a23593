/* Links between hosts (port_pri.h): moving frames between the port engine
 * and the transports.
 *
 *   tcp://, rdma://  two xrc connections ("lanes"), lane = priority, so a
 *                    high-priority frame never queues behind low-priority
 *                    bytes in the kernel or the NIC (seed 001: priorities
 *                    never block each other).  The client connects lane 0
 *                    and then lane 1 with {magic, version, lane, nonce} as
 *                    private data; the server pairs them by the nonce.
 *   shm://NAME       one shmcm connection (poll mode: no rx thread) carrying
 *                    both priorities; the engine hands out high frames first.
 *                    Each side sends a HELLO frame first.
 */
#include "port/port_pri.h"
#include "core/ring.h"
#include "shmcm/shmcm.h"
#include "shmcm/shmcm_wire.h"
#include "xprt/mbox.h"
#include "core/log.h"
#include "core/bytes.h"
#include "core/cc.h"
#include "core/xtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/epoll.h>

/* ------------------------------------------------------------ common */

/* A lane's fd into the host's epoll or out of it: whether it is where it
 * was to go.  A tcp lane's socket is in it only while the host may sleep:
 * a socket in an epoll set wakes the set (its lock, its ready list) with
 * every packet that comes in -- on loopback inside the sender's system
 * call -- which a busy poller that reads every lane each round does not
 * need.  An rdma lane's fd signals only once armed (xrc_arm): it stays. */
static bool lane_ep(struct xp_link *k, struct xp_lane *ln, bool in)
{
	struct epoll_event ev = { .events = EPOLLIN | (ln->want_out ? EPOLLOUT : 0) };

	if (!ln->c || ln->in_ep == in)
		return true;
	if (epoll_ctl(k->h->epfd, in ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, xrc_fd(ln->c), &ev) == 0)
		ln->in_ep = in;
	else if (in)
		xlog_warn("%s: epoll: %m", k->name);
	return ln->in_ep == in;
}

int xpl_add(struct xp_host *h, struct xp_link *k, unsigned nlanes, uint32_t frag)
{
	int id;

	if (h->nlinks == h->cap) {
		uint32_t cap = h->cap ? 2 * h->cap : 8;
		struct xp_link **nl = realloc(h->links, cap * sizeof(*nl));

		if (!nl)
			return -ENOMEM;
		h->links = nl;
		h->cap = cap;
	}
	if ((id = pe_node_add(h->e, nlanes, frag)) < 0)
		return id;
	/* node ids and link slots advance together: id n is links[n - 1] */
	h->links[h->nlinks++] = k;
	k->h = h;
	k->node = (uint32_t)id;
	k->nlanes = nlanes;
	k->frag = frag;
	/* rdma lanes always, tcp ones while the others are in (xpl_ep) */
	for (unsigned i = 0; i < nlanes && !k->shm; i++) {
		bool tcp = xrc_scheme(k->lane[i].c) == XURI_TCP;

		if ((h->ep_links || !tcp) && !lane_ep(k, &k->lane[i], true) && tcp)
			h->ep_links = false;	/* tried again before the next sleep */
	}
	return id;
}

/* The tcp lanes of every link into the epoll (before a sleep; it is
 * level-triggered, so what came in before is reported at once) or out of
 * it (a host that busy-polls).  h->ep_links says they all went in; a lane
 * that did not is tried again before the next sleep. */
void xpl_ep(struct xp_host *h, bool in)
{
	bool ok = true;

	for (uint32_t i = 0; i < h->nlinks; i++) {
		struct xp_link *k = h->links[i];

		if (!k || k->dead || k->shm)
			continue;
		for (unsigned j = 0; j < k->nlanes; j++)
			if (k->lane[j].c && xrc_scheme(k->lane[j].c) == XURI_TCP)
				ok &= lane_ep(k, &k->lane[j], in);
	}
	h->ep_links = in && ok;
}

static void hello_encode(uint8_t *b, uint32_t max_msg, unsigned lane)
{
	struct pw_hdr h = { .type = PW_HELLO, .seq = PW_VERSION, .len = max_msg, .off = lane,
			    .aux = PW_MAGIC };

	pw_encode(b, &h);
}

static int hello_check(const void *f, size_t len, char *why, size_t whylen)
{
	struct pw_hdr h;
	int rc = pw_decode(f, len, &h);

	if (rc < 0 || h.type != PW_HELLO) {
		snprintf(why, whylen, "peer is not an xprt port host (%s)",
			 rc < 0 ? pw_strerror(rc) : "no HELLO");
		return -EPROTO;
	}
	if (h.seq != PW_VERSION) {
		snprintf(why, whylen, "peer speaks port protocol version %u, we speak %u",
			 h.seq, PW_VERSION);
		return -EPROTONOSUPPORT;
	}
	return 0;
}

static void lane_free(struct xp_lane *ln)
{
	xrc_close(ln->c);	/* flushes: the transport lets go of every frame */
	ln->c = NULL;
	xrc_dereg(ln->rxmr);
	xrc_dereg(ln->txmr);
	free(ln->rxpool);
	free(ln->txpool);
	free(ln->ring);
	memset(ln, 0, sizeof(*ln));
}

static bool refs_busy(const struct xp_link *k)
{
	for (unsigned i = 0; i < SHMCM_REF_WINDOW; i++)
		if (k->refs[i].busy)
			return true;
	return false;
}

/* A payload sent by reference is the peer's to read until it has pulled
 * it or let it go.  With our end going down (disconnected: the peer pulls
 * nothing after that), wait -- a second at most -- for every one to be
 * reaped, before the engine hands the buffers back to their owners. */
static void refs_settle(struct xp_link *k, struct shmcm_conn *sc)
{
	uint64_t end = xtime_ns() + XTIME_NS_PER_S;

	while (refs_busy(k) && xtime_ns() < end) {
		struct timespec ts = { 0, 20000 };

		if (shmcm_reap(sc) == 0)
			nanosleep(&ts, NULL);
	}
}

XCOLD void xpl_fail(struct xp_link *k, const char *why)
{
	struct xp_listener *l = k->srv;

	if (k->dead)
		return;
	k->dead = true;
	snprintf(k->why, sizeof(k->why), "%s", why);
	xlog_info("%s: link to node %u down: %s", k->name, k->node, why);
	for (unsigned i = 0; i < 2; i++) {
		(void)lane_ep(k, &k->lane[i], false);
		lane_free(&k->lane[i]);
	}
	if (k->sc && !l) {
		shmcm_disconnect(k->sc);
		refs_settle(k, k->sc);
		shmcm_close(k->sc);
		k->sc = NULL;
	} else if (l) {
		/* seed 000: the served mailbox goes back to waiting for the
		 * next peer host; this node id stays dead. */
		shmcm_disconnect(l->sc);
		refs_settle(k, l->sc);
		shmcm_connect(l->sc);
		l->cur = NULL;
		k->sc = NULL;
		k->srv = NULL;
	}
	pe_node_down(k->h->e, k->node);
}

void xpl_free(struct xp_link *k)
{
	if (!k)
		return;
	if (k->srv) {
		/* a served mailbox's link: the connection is the listener's,
		 * which closes it itself */
		k->srv->cur = NULL;
		k->srv = NULL;
		k->sc = NULL;
		k->dead = true;
	} else if (!k->dead) {
		if (!k->sc) {
			xpl_fail(k, "host closed");
		} else {
			k->dead = true;
			shmcm_disconnect(k->sc);
			refs_settle(k, k->sc);
			shmcm_close(k->sc);
			k->sc = NULL;
		}
	}
	for (unsigned i = 0; i < 2; i++)
		lane_free(&k->lane[i]);
	free(k->stage);
	free(k);
}

/* ------------------------------------------------------------ xrc lanes */

static void priv_encode(uint8_t *b, unsigned lane, uint64_t nonce, unsigned status,
			uint32_t frag)
{
	uint32_t magic = PW_MAGIC;

	memset(b, 0, XP_PRIV_LEN);
	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(magic >> (24 - 8 * i));
	b[4] = 0;
	b[5] = PW_VERSION;
	b[6] = (uint8_t)lane;
	b[7] = (uint8_t)status;
	for (int i = 0; i < 8; i++)
		b[8 + i] = (uint8_t)(nonce >> (56 - 8 * i));
	put_be32(b + 16, frag);
}

/* 0, or -errno with a message: not ours, other version. */
static int priv_decode(const uint8_t *b, size_t len, unsigned *lane, uint64_t *nonce,
		       unsigned *status, uint32_t *frag, char *why, size_t whylen)
{
	uint32_t magic = 0;

	if (len < XP_PRIV_LEN) {
		snprintf(why, whylen, "peer is not an xprt port host (no private data)");
		return -EPROTO;
	}
	for (int i = 0; i < 4; i++)
		magic = magic << 8 | b[i];
	if (magic != PW_MAGIC) {
		snprintf(why, whylen, "peer is not an xprt port host (bad magic)");
		return -EPROTO;
	}
	if ((b[4] << 8 | b[5]) != PW_VERSION) {
		snprintf(why, whylen, "peer speaks port protocol version %u, we speak %u",
			 b[4] << 8 | b[5], PW_VERSION);
		return -EPROTONOSUPPORT;
	}
	*lane = b[6];
	*status = b[7];
	*nonce = 0;
	for (int i = 0; i < 8; i++)
		*nonce = *nonce << 8 | b[8 + i];
	*frag = get_be32(b + 16);
	return 0;
}

/* Fragment size of a lane.  rdma: bigger by default -- the adapter moves
 * the bytes, and per-message work is what costs; both ends must agree
 * (rdma does not negotiate). */
static uint32_t lane_frag(const struct xp_host *h, enum xuri_scheme s)
{
	if (s == XURI_RDMA && h->frag_default)
		return XP_RDMA_FRAG;
	return h->o.frag;
}

static void lane_opts(const struct xp_host *h, enum xuri_scheme s, struct xrc_opts *o)
{
	uint32_t frag = lane_frag(h, s);

	memset(o, 0, sizeof(*o));
	o->sq_depth = XP_SQ_DEPTH;
	o->rq_depth = XP_RQ_DEPTH;
	o->max_send = frag + PW_HDR_LEN;
	o->timeout_ns = h->o.connect_timeout_ns;
	/* A poll moves at most two fragments each way per lane, so a lane
	 * full of low-priority bytes never holds the host away from the
	 * other lane for long (the receiving half of the priority rule). */
	o->burst = 2 * (frag + PW_HDR_LEN);
}

/* Frames a lane may have in flight: memory stays bounded and the engine
 * keeps choosing what goes next.  The low lane gets only a few, so one
 * round of progress never writes much low-priority data (the high lane
 * waits for it). */
static uint32_t lane_limit(const struct xp_link *k, const struct xp_lane *ln, unsigned i)
{
	return i == 0 && k->nlanes == 2 && ln->sq > XP_LOW_INFLIGHT ? XP_LOW_INFLIGHT : ln->sq;
}

static int lane_init(struct xp_lane *ln, struct xrc *c, char *err, size_t errlen)
{
	bool rdma = xrc_scheme(c) == XURI_RDMA;
	struct xrc_dom *d = xrc_domain(c);

	ln->c = c;
	ln->held = !rdma;
	/* a power of two: the ring and the copy pool are indexed by mask */
	ln->sq = xring_floor(xrc_sq_depth(c) < XP_SQ_DEPTH ? xrc_sq_depth(c) : XP_SQ_DEPTH);
	ln->bufsz = xrc_max_send(c);
	if (!ln->sq || ln->bufsz <= PW_HDR_LEN) {
		snprintf(err, errlen, "connection limits too small (sq %u, max send %u)",
			 ln->sq, ln->bufsz);
		return -EINVAL;
	}
	ln->ring = calloc(ln->sq, sizeof(*ln->ring));
	ln->rxpool = aligned_alloc(64, ((size_t)XP_RQ_DEPTH * ln->bufsz + 63) & ~(size_t)63);
	if (!ln->ring || !ln->rxpool) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (!(ln->rxmr = xrc_reg(d, ln->rxpool, (size_t)XP_RQ_DEPTH * ln->bufsz,
				 XRC_ACCESS_LOCAL_WRITE, err, errlen)))
		return -errno ? -errno : -ENOMEM;
	/* rdma sends only from registered memory: headers, and payloads not
	 * in memory the user registered, go through a registered pool there;
	 * tcp sends straight from the user's buffer. */
	if (rdma) {
		ln->txpool = aligned_alloc(64, ((size_t)ln->sq * ln->bufsz + 63) & ~(size_t)63);
		if (!ln->txpool) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		if (!(ln->txmr = xrc_reg(d, ln->txpool, (size_t)ln->sq * ln->bufsz, 0, err, errlen)))
			return -errno ? -errno : -ENOMEM;
	}
	for (uint32_t i = 0; i < XP_RQ_DEPTH; i++) {
		struct xrc_sge sg = { ln->rxpool + (size_t)i * ln->bufsz, ln->bufsz, ln->rxmr };
		int rc = xrc_post_recv(c, &sg, i);

		if (rc < 0) {
			snprintf(err, errlen, "posting receives: %s", strerror(-rc));
			return rc;
		}
	}
	return 0;
}

static int link_new_xrc(struct xp_host *h, struct xrc *c[2], const char *name,
			char *err, size_t errlen)
{
	struct xp_link *k = calloc(1, sizeof(*k));
	uint32_t frag = lane_frag(h, xrc_scheme(c[0]));
	int rc;

	if (!k) {
		xrc_close(c[0]);
		xrc_close(c[1]);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	snprintf(k->name, sizeof(k->name), "%s", name);
	for (unsigned i = 0; i < 2; i++)
		k->lane[i].c = c[i];
	for (unsigned i = 0; i < 2; i++) {
		if ((rc = lane_init(&k->lane[i], c[i], err, errlen)) < 0)
			goto out_free_link;
		if (k->lane[i].bufsz - PW_HDR_LEN < frag)
			frag = k->lane[i].bufsz - PW_HDR_LEN;
	}
	if ((rc = xpl_add(h, k, 2, frag)) < 0) {
		snprintf(err, errlen, "%s: %s", name, strerror(-rc));
		goto out_free_link;
	}
	for (unsigned i = 0; i < 2; i++)
		k->lane[i].lim = lane_limit(k, &k->lane[i], i);
	return rc;

out_free_link:
	for (unsigned i = 0; i < 2; i++)
		lane_free(&k->lane[i]);
	free(k);
	return rc;
}

int xpl_listen_xrc(struct xp_host *h, const struct xuri *u, char *err, size_t errlen)
{
	struct xp_listener *l = calloc(1, sizeof(*l));
	struct xrc_opts o;
	struct epoll_event ev = { .events = EPOLLIN };

	if (!l) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	lane_opts(h, u->scheme, &o);
	l->h = h;
	l->scheme = u->scheme;
	if (!(l->xl = xrc_listen(u, &o, err, errlen))) {
		int rc = errno ? -errno : -EIO;
		free(l);
		return rc;
	}
	if (epoll_ctl(h->epfd, EPOLL_CTL_ADD, xrc_listener_fd(l->xl), &ev) < 0)
		xlog_warn("listener: epoll: %m");
	h->ls[h->nls++] = l;
	return 0;
}

static void half_clear(struct xp_half *hf)
{
	xrc_close(hf->c[0]);
	xrc_close(hf->c[1]);
	memset(hf, 0, sizeof(*hf));
}

/* One lane of a client arrived: pair it with its sibling by nonce. */
static int half_add(struct xp_listener *l, struct xrc *c, unsigned lane, uint64_t nonce,
		    const char *peer, uint64_t now)
{
	struct xp_half *hf = NULL, *freeslot = NULL, *oldest = NULL;
	char err[256], name[160];
	int rc;

	for (unsigned i = 0; i < XP_HALF_MAX; i++) {
		struct xp_half *x = &l->half[i];

		if (!x->c[0] && !x->c[1]) {
			if (!freeslot)
				freeslot = x;
			continue;
		}
		if (x->nonce == nonce)
			hf = x;
		if (!oldest || x->t0 < oldest->t0)
			oldest = x;
	}
	if (!hf) {
		if (!freeslot) {
			/* a flood of half-open clients costs the oldest one */
			half_clear(oldest);
			freeslot = oldest;
		}
		hf = freeslot;
		hf->nonce = nonce;
		hf->t0 = now;
		snprintf(hf->peer, sizeof(hf->peer), "%s", peer);
	}
	if (hf->c[lane])
		xrc_close(hf->c[lane]);	/* the same lane twice: keep the new one */
	hf->c[lane] = c;
	if (!hf->c[0] || !hf->c[1])
		return 0;
	snprintf(name, sizeof(name), "%s://%s", xuri_scheme_name(l->scheme), hf->peer);
	struct xrc *pair[2] = { hf->c[0], hf->c[1] };
	memset(hf, 0, sizeof(*hf));
	if ((rc = link_new_xrc(l->h, pair, name, err, sizeof(err))) < 0)
		xlog_warn("%s: %s", name, err);
	else
		xlog_info("%s: node %d up", name, rc);
	return 1;
}

int xpl_accept(struct xp_host *h, struct xp_listener *l, uint64_t now)
{
	int done = 0;

	if (!l->xl)
		return 0;
	for (unsigned i = 0; i < XP_HALF_MAX; i++)
		if ((l->half[i].c[0] || l->half[i].c[1]) &&
		    now - l->half[i].t0 > h->o.connect_timeout_ns) {
			xlog_info("%s: only one lane arrived; dropped", l->half[i].peer);
			half_clear(&l->half[i]);
		}
	for (;;) {
		char err[256], why[160];
		uint8_t rep[XP_PRIV_LEN];
		struct xrc_req *r = xrc_get_request(l->xl, err, sizeof(err));
		struct xrc_opts o;
		const void *pd;
		size_t pdl;
		unsigned lane, st;
		uint64_t nonce;
		uint32_t pfrag;
		struct xrc *c;
		int rc;

		if (!r) {
			if (errno != EAGAIN)
				xlog_ratelimited(XLOG_WARN, "listener: %s", err);
			break;
		}
		done++;
		pd = xrc_req_data(r, &pdl);
		/* not a port host's (no magic of ours): the program's, if it
		 * wants it */
		if (h->foreign && (pdl < 4 || get_be32(pd) != PW_MAGIC) &&
		    h->foreign(h->foreign_arg, r))
			continue;
		rc = priv_decode(pd, pdl, &lane, &nonce, &st, &pfrag, why, sizeof(why));
		if (rc == 0 && lane > 1) {
			rc = -EINVAL;
			snprintf(why, sizeof(why), "lane %u out of range", lane);
		}
		/* rdma does not negotiate sizes: receive buffers on each side
		 * are sized by its own fragment, so both must be the same */
		if (rc == 0 && l->scheme == XURI_RDMA && pfrag != lane_frag(h, l->scheme)) {
			rc = -EMSGSIZE;
			snprintf(why, sizeof(why), "peer sends %u-byte fragments, we take %u",
				 pfrag, lane_frag(h, l->scheme));
		}
		if (rc < 0) {
			xlog_info("%s: refused: %s", xrc_req_peer(r), why);
			priv_encode(rep, 0, 0, rc == -EPROTONOSUPPORT ? XP_PRIV_BAD_VERSION :
					       rc == -EMSGSIZE ? XP_PRIV_BAD_FRAG : XP_PRIV_BAD_LANE,
				    lane_frag(h, l->scheme));
			xrc_reject(r, rep, sizeof(rep));
			continue;
		}
		char peer[64];
		snprintf(peer, sizeof(peer), "%s", xrc_req_peer(r));
		priv_encode(rep, lane, nonce, XP_PRIV_OK, lane_frag(h, l->scheme));
		lane_opts(h, l->scheme, &o);
		if (!(c = xrc_accept(r, rep, sizeof(rep), &o, err, sizeof(err)))) {
			xlog_warn("%s: accept: %s", peer, err);
			continue;
		}
		half_add(l, c, lane, nonce, peer, now);
	}
	return done;
}

int xpl_connect_xrc(struct xp_host *h, const struct xuri *u, const char *name,
		    char *err, size_t errlen)
{
	struct xrc *c[2] = { NULL, NULL };
	struct xrc_opts o;
	int rc;

	lane_opts(h, u->scheme, &o);
	for (unsigned lane = 0; lane < 2; lane++) {
		uint8_t priv[XP_PRIV_LEN], rep[XRC_PRIV_MAX];
		size_t replen = sizeof(rep);
		unsigned rl, st;
		uint64_t rn;
		uint32_t rf;
		char why[160];

		priv_encode(priv, lane, h->nonce, XP_PRIV_OK, lane_frag(h, u->scheme));
		c[lane] = xrc_connect(u, &o, priv, sizeof(priv), rep, &replen, err, errlen);
		if (!c[lane]) {
			rc = errno ? -errno : -EIO;
			/* a reject of ours says why in its private data */
			if (rc == -ECONNREFUSED && replen >= XP_PRIV_LEN &&
			    priv_decode(rep, replen, &rl, &rn, &st, &rf, why, sizeof(why)) == 0 && st) {
				if (st == XP_PRIV_BAD_FRAG)
					snprintf(err, errlen, "%s: refused by peer: it takes %u-byte "
						 "fragments, we send %u", name, rf,
						 lane_frag(h, u->scheme));
				else
					snprintf(err, errlen, "%s: refused by peer: %s", name,
						 st == XP_PRIV_BAD_VERSION ? "protocol version mismatch"
									   : "bad lane");
			}
			goto out_close;
		}
		if ((rc = priv_decode(rep, replen, &rl, &rn, &st, &rf, why, sizeof(why))) < 0) {
			snprintf(err, errlen, "%s: %s", name, why);
			goto out_close;
		}
	}
	return link_new_xrc(h, c, name, err, errlen);

out_close:
	xrc_close(c[0]);
	xrc_close(c[1]);
	return rc;
}

/* Receive buffers go back to the transport in batches, off the path of the
 * message that freed them: XP_REPOST_BATCH at a time (the queue keeps
 * XP_RQ_DEPTH - XP_REPOST_BATCH + 1 or more posted meanwhile; a ping-pong
 * pays one post per XP_REPOST_BATCH round trips, not one per trip).  0, or
 * -1 when the link failed. */
static int lane_repost(struct xp_link *k, struct xp_lane *ln)
{
	while (ln->nrepost) {
		struct xrc_sge sg[XRC_RECV_BATCH];
		uint64_t id[XRC_RECV_BATCH];
		int n = 0, rc;

		while (n < XRC_RECV_BATCH && n < (int)ln->nrepost) {
			id[n] = ln->repost[ln->nrepost - 1 - n];
			sg[n] = (struct xrc_sge){ ln->rxpool + (size_t)id[n] * ln->bufsz, ln->bufsz,
						  ln->rxmr };
			n++;
		}
		if ((rc = xrc_post_recvs(ln->c, sg, id, n)) <= 0) {
			xpl_fail(k, "cannot repost a receive");
			return -1;
		}
		ln->nrepost -= (uint32_t)rc;
	}
	return 0;
}

static XCOLD void lane_wc_failed(struct xp_link *k, unsigned i, int status)
{
	char why[80];

	snprintf(why, sizeof(why), "lane %u: %s", i, strerror(-status));
	xpl_fail(k, why);
}

/* One poll of lane i's completions: the count handled.  A failed one, or
 * the lane found down, is noted in *down / *down_status (the first only)
 * for rx_xrc to act on; other failures fail the link here. */
XINLINE int lane_rx(struct xp_link *k, unsigned i, uint64_t now, int *down, int *down_status)
{
	struct xp_lane *ln = &k->lane[i];
	struct xrc_wc wc[32];
	int n = xrc_poll(ln->c, wc, 32), done = 0;
	char why[200];

	for (int j = 0; j < n && !k->dead; j++) {
		if (wc[j].status) {
			if (*down < 0) {
				*down = (int)i;
				*down_status = wc[j].status;
			}
			break;
		}
		done++;
		if (wc[j].op == XRC_OP_SEND) {
			/* sends complete in order: this one and every
			 * unsignaled one before it are done */
			uint32_t upto = (uint32_t)wc[j].wr_id;

			if ((int32_t)(upto - ln->tail) < 0 || upto - ln->tail >= ln->posted) {
				xpl_fail(k, "bad send completion");
				break;
			}
			while ((int32_t)(upto - ln->tail) >= 0) {
				struct xp_tx *t = &ln->ring[ln->tail++ & (ln->sq - 1)];

				ln->posted--;
				if (t->ref)
					pe_frame_done(k->h->e, t->ref);
				t->ref = NULL;
			}
		} else if (wc[j].op == XRC_OP_RECV) {
			uint8_t *b = ln->rxpool + wc[j].wr_id * ln->bufsz;

			if (wc[j].wr_id >= XP_RQ_DEPTH || wc[j].len > ln->bufsz) {
				xpl_fail(k, "bad receive completion");
				break;
			}
			if (pe_input(k->h->e, k->node, b, wc[j].len, now, why, sizeof(why)) < 0) {
				xpl_fail(k, why);
				break;
			}
			ln->repost[ln->nrepost++] = (uint16_t)wc[j].wr_id;
			if (ln->nrepost >= XP_REPOST_BATCH && lane_repost(k, ln) < 0)
				break;
		}
	}
	/* failed in the loop (a bad frame, a receive that could not be
	 * posted again -- a killed peer's queue pair): the lanes are freed */
	if (k->dead)
		return done;
	if (*down < 0 && (n < 0 || xrc_state(ln->c) == XRC_DOWN))
		*down = (int)i;
	return done;
}

/* The high-priority lane first.  A lane that goes down fails the link only
 * after every other lane is read to its end: a peer that closes writes its
 * last frames (the ACK of what it took) on one lane and may be seen closing
 * another first, in either order. */
XINLINE int rx_xrc(struct xp_link *k, uint64_t now)
{
	int done = 0, down = -1, down_status = 0;

	for (unsigned i = k->nlanes; i-- > 0 && !k->dead;)
		done += lane_rx(k, i, now, &down, &down_status);
	if (down < 0 || k->dead)
		return done;
	for (int pass = 0; pass < 64 && !k->dead; pass++) {
		int got = 0;

		for (unsigned i = k->nlanes; i-- > 0 && !k->dead;)
			if ((int)i != down)
				got += lane_rx(k, i, now, &down, &down_status);
		if (!got)
			break;
		done += got;
	}
	if (!k->dead) {
		if (down_status)
			lane_wc_failed(k, (unsigned)down, down_status);
		else
			xpl_fail(k, "connection lost");
	}
	return done;
}

static XCOLD void lane_failed(struct xp_link *k, unsigned i, int rc)
{
	char why[80];

	snprintf(why, sizeof(why), "lane %u: send: %s", i, strerror(-rc));
	xpl_fail(k, why);
}

/* A frame small enough to go inline (an ACK, a ping) onto lane i: copied
 * into the work request itself, no registered copy needed, and no
 * completion wanted but every XP_SIG_EVERY-th (which then stands for the
 * ones before it).  0, or -1 when the link failed. */
XINLINE int lane_post_small(struct xp_link *k, struct xp_lane *ln, unsigned i,
			    const struct pe_frame *f, uint32_t lim)
{
	unsigned fl = ln->held ? XRC_MORE : 0;
	int rc;

	ln->posted++;
	if (ln->head % XP_SIG_EVERY == XP_SIG_EVERY - 1 ||
	    ln->posted >= lim)	/* the lane is full after it */
		fl |= XRC_SIGNALED;
	ln->ring[ln->head & (ln->sq - 1)].ref = NULL;	/* copied at the post */
	/* wr_id: the ring counter, so one completion can stand for every
	 * unsignaled send before it */
	rc = xrc_send_inline(ln->c, f->hdr, PW_HDR_LEN, f->data, f->dlen, ln->head++, fl);
	if (rc == 0) {
		pe_frame_done(k->h->e, f->ref);
		return 0;
	}
	lane_failed(k, i, rc);
	return -1;
}

/* One frame onto lane i (tcp: XRC_MORE, out at lane_flush; rdma: out at
 * once).  0, or -1 when the link failed. */
XINLINE int lane_post(struct xp_link *k, struct xp_lane *ln, unsigned i, const struct pe_frame *f,
		      uint32_t lim)
{
	uint32_t slot = ln->head & (ln->sq - 1);
	struct xp_tx *t = &ln->ring[slot];
	struct xrc_sge sg[2];
	int nsg = 1, rc;

	if (PW_HDR_LEN + f->dlen <= xrc_max_inline(ln->c))
		return lane_post_small(k, ln, i, f, lim);
	ln->posted++;
	t->ref = f->ref;
	if (ln->txpool) {
		uint8_t *b = ln->txpool + (size_t)slot * ln->bufsz;
		unsigned src = (unsigned)f->hdr[4] << 8 | f->hdr[5];	/* port_wire.h */
		struct xrc_mr *mr = f->dlen && src < XP_MAX_PORTS ?
			xp_mem_mr(k->h, src, xrc_domain(ln->c), f->data, f->dlen) : NULL;

		/* rdma sends only from registered memory: the header from the
		 * lane's own, the payload straight from the user's when the
		 * sending port registered it (xp_register_memory), else
		 * copied after it */
		memcpy(b, f->hdr, PW_HDR_LEN);
		if (mr) {
			k->h->direct_bytes[src] += f->dlen;
			sg[0] = (struct xrc_sge){ b, PW_HDR_LEN, ln->txmr };
			sg[nsg++] = (struct xrc_sge){ (void *)f->data, f->dlen, mr };
		} else {
			if (f->dlen)
				memcpy(b + PW_HDR_LEN, f->data, f->dlen);
			sg[0] = (struct xrc_sge){ b, PW_HDR_LEN + f->dlen, ln->txmr };
		}
	} else {
		memcpy(t->hdr, f->hdr, PW_HDR_LEN);
		sg[0] = (struct xrc_sge){ t->hdr, PW_HDR_LEN, NULL };
		if (f->dlen)
			sg[nsg++] = (struct xrc_sge){ (void *)f->data, f->dlen, NULL };
	}
	rc = xrc_post_send(ln->c, sg, nsg, ln->head++, XRC_SIGNALED | (ln->held ? XRC_MORE : 0));
	if (rc == 0)
		return 0;
	lane_failed(k, i, rc);
	return -1;
}

/* One sendmsg (tcp) or doorbell (rdma) for everything this round put on the
 * lane; returns 1 when the burst limit left bytes for the next round. */
XINLINE int lane_flush(struct xp_link *k, struct xp_lane *ln)
{
	if (!ln->held)	/* rdma: out at the post, and never waits for room */
		return 0;
	ln->flush_more = ln->c && !k->dead && xrc_flush(ln->c) > 0;
	/* A full socket: only its becoming writable can wake a host that
	 * sleeps meanwhile (the peer acknowledges whole messages, so it may
	 * well have nothing to say until we send more). */
	if (ln->c && !k->dead) {
		bool out = xrc_tx_pending(ln->c);

		if (out != ln->want_out) {
			struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0) };

			if (!ln->in_ep || epoll_ctl(k->h->epfd, EPOLL_CTL_MOD, xrc_fd(ln->c), &ev) == 0)
				ln->want_out = out;
		}
	}
	return ln->flush_more;
}

/* Lanes [lo, hi] of k, the high-priority lane first: as many frames as each
 * lane's in-flight limit takes, then one flush per lane. */
XINLINE int tx_xrc(struct xp_link *k, unsigned lo, unsigned hi)
{
	bool all = lo == 0 && hi + 1 == k->nlanes;
	bool left = false;
	int done = 0;

	/* the common idle case: one flag, not a look at every lane */
	if (all && !pe_node_tx_maybe(k->h->e, k->node) && !k->lane[0].flush_more &&
	    !k->lane[0].want_out && !k->lane[1].flush_more && !k->lane[1].want_out)
		return 0;
	for (unsigned i = hi + 1; i-- > lo && !k->dead;) {
		struct xp_lane *ln = &k->lane[i];
		struct pe_frame f;
		bool more = true;
		uint32_t lim;

		if (!ln->flush_more && !ln->want_out && !pe_has_tx(k->h->e, k->node, i))
			continue;
		if (xrc_state(ln->c) != XRC_UP) {	/* an accepted rdma lane finishing */
			left = true;
			continue;
		}
		lim = ln->lim;
		while (ln->posted < lim && (more = pe_pull(k->h->e, k->node, i, &f))) {
			if (lane_post(k, ln, i, &f, lim) < 0)
				break;
			done++;
		}
		done += lane_flush(k, ln);
		left |= more || ln->flush_more || ln->want_out;
	}
	if (all && !left && !k->dead)
		pe_node_tx_idle(k->h->e, k->node);
	return done;
}

static bool shm_can_send_now(struct xp_link *k, unsigned prio, size_t len);
static void shm_send_now(struct xp_link *k, unsigned prio, const struct pe_frame *f);

XHOT_INLINE bool xpl_can_send_now(struct xp_link *k, unsigned prio, size_t len)
{
	const struct xp_lane *ln;

	if (k->dead)
		return false;
	if (k->shm)
		return shm_can_send_now(k, prio, len);
	if (k->nlanes != 2)
		return false;
	ln = &k->lane[prio];
	return !ln->flush_more && !ln->want_out && ln->posted < ln->lim &&
	       PW_HDR_LEN + len <= xrc_max_inline(ln->c) && xrc_state(ln->c) == XRC_UP;
}

XHOT_INLINE void xpl_send_now(struct xp_link *k, unsigned prio, const struct pe_frame *f)
{
	struct xp_lane *ln = &k->lane[prio];

	if (k->shm) {
		shm_send_now(k, prio, f);
		return;
	}
	/* xpl_can_send_now() said the frame goes inline */
	if (lane_post_small(k, ln, prio, f, ln->lim) == 0)
		lane_flush(k, ln);
}

/* ------------------------------------------------------------ shm */

/* Free slots in our tx ring, less a margin for the CM thread's CON
 * packets, so shmcm_transmit() never waits for the peer: two hosts that
 * both send a lot keep draining their rx ring instead of blocking in
 * transmit (no deadlock). */
static uint32_t shm_room(struct xp_link *k, bool high)
{
	/* While high priority is in use, low priority needs to know the
	 * ring is empty: the peer's tail is read unless we know it is. */
	return shmcm_tx_room(k->sc, XP_SHM_MARGIN, high ? k->shm_cap : XP_SHM_ENOUGH, &k->shm_cap);
}

/* A payload sent by reference is the peer's to pull until this runs
 * (inside shmcm's poll, reap or send_ref, on our thread). */
static void ref_sent(void *ctx, int status)
{
	struct xp_shm_ref *r = ctx;
	struct xp_link *k = r->k;

	r->busy = false;
	if (k->dead)
		return;		/* the engine forgot the frame with the node */
	if (!r->ref) {
		/* the probe: whether the peer may read our memory (ptrace
		 * rules, process_vm_readv(2)); if not, payloads go through
		 * the mailbox */
		k->ref_ok = status == 0;
		if (status == -EREMOTEIO)
			xlog_info("%s: the peer cannot pull from our memory: payloads go "
				  "through the mailbox", k->name);
		return;
	}
	pe_frame_done(k->h->e, r->ref);
	/* after a probe that came through: failing closes the connection,
	 * not from inside shmcm */
	if (status < 0 && !k->why[0])
		snprintf(k->why, sizeof(k->why), "%s", status == -EREMOTEIO ?
			 "the peer could not pull a payload from our memory" : "connection lost");
}

static struct xp_shm_ref *ref_slot(struct xp_link *k)
{
	for (unsigned i = 0; i < SHMCM_REF_WINDOW; i++)
		if (!k->refs[i].busy)
			return &k->refs[i];
	return NULL;
}

static int shm_send_hello(struct xp_link *k)
{
	static const uint8_t probe = 1;
	uint8_t b[PW_HDR_LEN];
	struct xp_shm_ref *r = ref_slot(k);
	int rc;

	hello_encode(b, k->h->o.max_msg, 0);
	if ((rc = shmcm_transmit(k->sc, XP_SHM_FRAME, 0, b, sizeof(b))) < 0)
		return rc;
	/* then a byte by reference: if the peer can pull it, it can pull
	 * payloads (-EOPNOTSUPP: it does not take references at all) */
	*r = (struct xp_shm_ref){ .k = k, .busy = true };
	if (shmcm_send_ref(k->sc, XP_SHM_REF_PROBE, 0, &probe, 1, ref_sent, r) < 0)
		r->busy = false;
	return 0;
}

/* A DATA frame whose payload is too big for a mailbox packet: its header
 * in one, then the payload by reference.  0, or what shmcm said. */
static int shm_send_ref(struct xp_link *k, const struct pe_frame *f)
{
	struct xp_shm_ref *r = ref_slot(k);
	unsigned src;
	int rc;

	rc = shmcm_transmit2(k->sc, XP_SHM_REF_HDR, f->dlen, f->hdr, PW_HDR_LEN, NULL, 0);
	if (rc == -EAGAIN)
		rc = shmcm_transmit(k->sc, XP_SHM_REF_HDR, f->dlen, f->hdr, PW_HDR_LEN);
	if (rc < 0)
		return rc;
	*r = (struct xp_shm_ref){ .k = k, .ref = f->ref, .busy = true };
	if ((rc = shmcm_send_ref(k->sc, XP_SHM_REF_DATA, 0, f->data, f->dlen, ref_sent, r)) < 0) {
		r->busy = false;
		return rc;
	}
	src = (unsigned)f->hdr[4] << 8 | f->hdr[5];	/* port_wire.h */
	if (src < XP_MAX_PORTS)
		k->h->direct_bytes[src] += f->dlen;
	return 0;
}

static void shm_input(struct xp_link *k, const void *data, size_t len)
{
	char why[200];
	int rc;

	if (k->dead || k->why[0])
		return;
	if (!k->hello) {
		rc = hello_check(data, len, why, sizeof(why));
		k->hello = true;
	} else if (!k->h) {
		rc = -EPROTO;
		snprintf(why, sizeof(why), "frame before the link was set up");
	} else {
		rc = pe_input(k->h->e, k->node, data, len, k->h->now, why, sizeof(why));
	}
	/* failing closes the connection: not from inside its deliver */
	if (rc < 0)
		snprintf(k->why, sizeof(k->why), "%s", why);
}

/* The payload sent by reference after the header in k->rx_hdr: the
 * engine says where it goes (or that it is dropped).  From shmcm's
 * rx_buffer up-call, before the pull, or from the deliver when the bytes
 * came another way. */
static void shm_ref_begin(struct xp_link *k)
{
	char why[200];

	k->rx_begun = true;
	if (pe_input_hdr(k->h->e, k->node, k->rx_hdr, k->rx_plen, k->h->now, &k->rx_dest, why,
			 sizeof(why)) < 0 && !k->why[0])
		snprintf(k->why, sizeof(k->why), "%s", why);
}

static void *shm_rx_buffer(struct xp_link *k, uint32_t src, size_t len)
{
	if (!k || k->dead || k->why[0] || src != XP_SHM_REF_DATA || !k->rx_ref ||
	    len != k->rx_plen || k->rx_begun)
		return NULL;	/* shmcm's own buffer; the deliver sorts it out */
	shm_ref_begin(k);
	return k->rx_dest;
}

/* A message of the link: a whole frame, or a header and then its payload
 * (by reference; see XP_SHM_REF_HDR). */
static void shm_deliver(struct xp_link *k, uint32_t src, uint32_t dst, const void *data,
			size_t len)
{
	const char *bad = NULL;
	char why[200];

	if (k->dead || k->why[0])
		return;
	switch (src) {
	case XP_SHM_FRAME:
		if (k->rx_ref) {
			bad = "a frame between a header and its payload";
			break;
		}
		shm_input(k, data, len);
		break;
	case XP_SHM_REF_HDR:
		if (k->rx_ref || len != PW_HDR_LEN || !dst || !k->hello) {
			bad = "a bad header of a payload by reference";
			break;
		}
		memcpy(k->rx_hdr, data, PW_HDR_LEN);
		k->rx_plen = dst;
		k->rx_ref = true;
		k->rx_begun = false;
		k->rx_dest = NULL;
		break;
	case XP_SHM_REF_DATA:
		if (!k->rx_ref || len != k->rx_plen) {
			bad = "a payload by reference without its header";
			break;
		}
		if (!k->rx_begun)
			shm_ref_begin(k);
		if (k->rx_dest && !k->why[0]) {
			if (data != k->rx_dest)	/* came inline, or into shmcm's buffer */
				memcpy(k->rx_dest, data, len);
			pe_input_placed(k->h->e, k->node, k->rx_hdr, k->rx_plen);
		}
		k->rx_ref = false;
		break;
	case XP_SHM_REF_PROBE:
		break;
	case XP_SHM_FRAMES:
		if (k->rx_ref || !k->hello) {
			bad = "a pack of frames out of place";
			break;
		}
		if (!k->h) {
			bad = "frame before the link was set up";
			break;
		}
		if (pe_input_pack(k->h->e, k->node, data, len, k->h->now, why, sizeof(why)) < 0)
			bad = why;
		break;
	default:
		bad = "a message of an unknown kind";
	}
	/* failing closes the connection: not from inside its deliver */
	if (bad && !k->why[0])
		snprintf(k->why, sizeof(k->why), "%s", bad);
}

static void cli_deliver(void *arg, uint32_t src, uint32_t dst, const void *data, size_t len)
{
	shm_deliver(arg, src, dst, data, len);
}

static void *cli_rx_buffer(void *arg, uint32_t src, uint32_t dst, size_t len)
{
	return shm_rx_buffer(arg, src, len);
}

static void cli_disconnected(void *arg, enum shmcm_reason why)
{
	struct xp_link *k = arg;

	atomic_store(&k->lost, 1);
}

static void srv_deliver(void *arg, uint32_t src, uint32_t dst, const void *data, size_t len);

static void srv_connected(void *arg)
{
	struct xp_listener *l = arg;

	atomic_fetch_add(&l->connected, 1);
}

static void srv_disconnected(void *arg, enum shmcm_reason why)
{
	struct xp_listener *l = arg;

	atomic_fetch_add(&l->disconnected, 1);
}

static int link_new_shm(struct xp_host *h, struct shmcm_conn *sc, struct xp_listener *srv,
			const char *name, struct xp_link **out)
{
	/* a link the caller made is the caller's to free on failure: it may
	 * be its shmcm end's up-call argument until that end is closed */
	bool own = !*out;
	struct xp_link *k = own ? calloc(1, sizeof(*k)) : *out;
	uint32_t mtu = shmcm_get_mtu(sc), frag;
	int rc;

	if (!k)
		return -ENOMEM;
	*out = NULL;
	/* one frame per mailbox packet: shmcm never fragments for us, so the
	 * engine's priority choice holds packet by packet */
	frag = mtu - SHMCM_UDATA_HLEN - PW_HDR_LEN;
	if (h->o.frag < frag)
		frag = h->o.frag;
	k->shm = true;
	k->sc = sc;
	k->srv = srv;
	snprintf(k->name, sizeof(k->name), "%s", name);
	if (!(k->stage = malloc(PW_HDR_LEN + frag))) {
		rc = -ENOMEM;
		goto out_free_link;
	}
	if ((rc = xpl_add(h, k, 1, frag)) < 0)
		goto out_free_stage;
	*out = k;
	return rc;

out_free_stage:
	free(k->stage);
	k->stage = NULL;
out_free_link:
	if (own)
		free(k);
	return rc;
}

/* The served mailbox got a peer: a new node. */
static void srv_link(struct xp_listener *l)
{
	char name[160];
	int rc;

	if (l->cur || atomic_load(&l->connected) == 0)
		return;
	atomic_store(&l->connected, 0);
	snprintf(name, sizeof(name), "shm://%s", l->mbox);
	l->cur = NULL;
	if ((rc = link_new_shm(l->h, l->sc, l, name, &l->cur)) < 0) {
		xlog_warn("%s: %s", name, strerror(-rc));
		shmcm_disconnect(l->sc);
		shmcm_connect(l->sc);
		return;
	}
	if (shm_send_hello(l->cur) < 0)
		xpl_fail(l->cur, "cannot send HELLO");
}

static void srv_deliver(void *arg, uint32_t src, uint32_t dst, const void *data, size_t len)
{
	struct xp_listener *l = arg;

	/* the peer's first frame can come in the same poll as its CON_ACK */
	if (!l->cur)
		srv_link(l);
	if (l->cur)
		shm_deliver(l->cur, src, dst, data, len);
}

static void *srv_rx_buffer(void *arg, uint32_t src, uint32_t dst, size_t len)
{
	return shm_rx_buffer(((struct xp_listener *)arg)->cur, src, len);
}

int xpl_listen_shm(struct xp_host *h, const struct xuri *u, char *err, size_t errlen)
{
	struct xp_listener *l = calloc(1, sizeof(*l));
	struct mbox_cfg cfg = { 128, 16384 + SHMCM_UDATA_HLEN + PW_HDR_LEN, 1000, 0 };
	struct shmcm_params p = { .side = MBOX_SIDE_A, .flow = SHMCM_FLOW_WAIT, .poll = true,
				  .max_msg = 1u << 20 };
	struct shmcm_upcalls uc = { .connected = srv_connected, .disconnected = srv_disconnected,
				    .deliver = srv_deliver, .rx_buffer = srv_rx_buffer };
	struct mbox *m = NULL;
	bool replaced;
	int rc;

	if (!l) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	l->h = h;
	l->scheme = XURI_SHM;
	snprintf(l->mbox, sizeof(l->mbox), "%s", u->name);
	/* An existing mailbox (mkshmcon create) is used as it is. */
	if ((rc = mbox_open(l->mbox, &m, err, errlen)) == 0) {
		mbox_close(m);
	} else if (rc == -ENOENT) {
		if ((rc = mbox_create(l->mbox, &cfg, &replaced, err, errlen)) < 0)
			goto out_free;
		l->created = true;
	} else {
		goto out_free;
	}
	p.name = l->mbox;
	uc.arg = l;
	if (!(l->sc = shmcm_open(&p, &uc, err, errlen))) {
		rc = -EIO;
		goto out_unlink;
	}
	l->mtu = shmcm_get_mtu(l->sc);
	if (l->mtu <= SHMCM_UDATA_HLEN + PW_HDR_LEN) {
		snprintf(err, errlen, "shm://%s: mailbox packets of %u bytes are too small",
			 l->mbox, l->mtu);
		rc = -EINVAL;
		goto out_close;
	}
	shmcm_connect(l->sc);
	h->ls[h->nls++] = l;
	return 0;

out_close:
	shmcm_close(l->sc);
out_unlink:
	if (l->created)
		mbox_unlink(l->mbox, false, NULL, 0);
out_free:
	free(l);
	return rc;
}

void xpl_listener_free(struct xp_listener *l)
{
	if (!l)
		return;
	if (l->cur) {
		l->cur->srv = NULL;
		l->cur->sc = NULL;
		l->cur->dead = true;
		pe_node_down(l->h->e, l->cur->node);
		l->cur = NULL;
	}
	for (unsigned i = 0; i < XP_HALF_MAX; i++)
		half_clear(&l->half[i]);
	xrc_listener_close(l->xl);
	shmcm_close(l->sc);
	if (l->created) {
		char err[200];

		if (mbox_unlink(l->mbox, true, err, sizeof(err)) < 0)
			xlog_info("%s", err);
	}
	free(l);
}

int xpl_connect_shm(struct xp_host *h, const struct xuri *u, const char *name,
		    char *err, size_t errlen)
{
	struct shmcm_params p = { .name = u->name, .side = MBOX_SIDE_B, .flow = SHMCM_FLOW_WAIT,
				  .poll = true, .max_msg = 1u << 20 };
	struct shmcm_upcalls uc = { .deliver = cli_deliver, .disconnected = cli_disconnected,
				    .rx_buffer = cli_rx_buffer };
	uint64_t deadline = xtime_after(xtime_ns(), h->o.connect_timeout_ns);
	struct shmcm_conn *sc;
	/* the link exists before the connection: it is the deliver argument */
	struct xp_link *k = calloc(1, sizeof(*k)), *kk;
	int rc;

	if (!k) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	k->shm = true;
	uc.arg = k;
	if (!(sc = shmcm_open(&p, &uc, err, errlen))) {
		free(k);
		return -EIO;
	}
	shmcm_connect(sc);
	for (;;) {
		shmcm_poll(sc, 64);
		rc = shmcm_wait_connected(sc, 200000);
		if (rc == 0)
			break;
		if (rc != -ETIMEDOUT || xtime_ns() > deadline) {
			snprintf(err, errlen, "%s: %s", name,
				 rc == -ETIMEDOUT ? "timed out (is a host listening there?)"
						  : "connection refused");
			shmcm_close(sc);
			free(k);
			return rc == -ETIMEDOUT ? -ETIMEDOUT : -ECONNREFUSED;
		}
	}
	if (shmcm_get_mtu(sc) <= SHMCM_UDATA_HLEN + PW_HDR_LEN) {
		snprintf(err, errlen, "%s: mailbox packets too small", name);
		shmcm_close(sc);
		free(k);
		return -EINVAL;
	}
	/* what went down before is not this connection's; what goes down
	 * from here on is (and the state says if it went already) */
	atomic_store(&k->lost, 0);
	if (shmcm_get_state(sc) != SHMCM_CONNECTED)
		atomic_store(&k->lost, 1);
	kk = k;
	if ((rc = link_new_shm(h, sc, NULL, name, &kk)) < 0) {
		snprintf(err, errlen, "%s: %s", name, strerror(-rc));
		shmcm_close(sc);	/* its up-calls may still name k */
		free(k);
		return rc;
	}
	if (shm_send_hello(k) < 0) {
		snprintf(err, errlen, "%s: connection lost", name);
		xpl_fail(k, "cannot send HELLO");
		return -ECONNRESET;
	}
	/* Wait for the server's HELLO, so a wrong peer fails here, clearly. */
	while (!k->hello && !k->why[0] && !k->dead) {
		if (xtime_ns() > deadline) {
			xpl_fail(k, "no HELLO");
			snprintf(err, errlen, "%s: timed out waiting for the peer host", name);
			return -ETIMEDOUT;
		}
		if (shmcm_poll(sc, 64) == 0 && shmcm_get_state(sc) != SHMCM_CONNECTED)
			break;
	}
	if (k->why[0] || !k->hello || k->dead) {
		snprintf(err, errlen, "%s: %s", name, k->why[0] ? k->why : "connection lost");
		xpl_fail(k, k->why[0] ? k->why : "connection lost");
		return -ECONNRESET;
	}
	return (int)k->node;
}

static int rx_shm(struct xp_link *k)
{
	struct xp_listener *l = k->srv;
	int n;

	n = shmcm_poll(k->sc, 256);
	if (k->why[0]) {
		char why[sizeof(k->why)];

		snprintf(why, sizeof(why), "%s", k->why);
		xpl_fail(k, why);
		return n;
	}
	/* an atomic flag the CM thread sets: no lock in the poll loop */
	if (l ? atomic_load(&l->disconnected) != 0 : atomic_load(&k->lost) != 0) {
		if (l)
			atomic_store(&l->disconnected, 0);
		xpl_fail(k, "connection lost");
	}
	return n;
}

/* Sends the pack of `n` frames in k->stage (its slot was counted when it
 * was opened); a lone frame goes as itself.  0, or what shmcm said. */
static int pack_send(struct xp_link *k, size_t len, unsigned n)
{
	uint32_t kind = n > 1 ? XP_SHM_FRAMES : XP_SHM_FRAME;
	const uint8_t *b = n > 1 ? k->stage : k->stage + PW_PACK_LEN;
	size_t blen = n > 1 ? len : len - PW_PACK_LEN;
	int rc = shmcm_transmit2(k->sc, kind, 0, b, blen, NULL, 0);

	if (rc == -EAGAIN)
		rc = shmcm_transmit(k->sc, kind, 0, b, blen);
	return rc < 0 ? rc : 0;
}

/* The lowest priority tx_shm may take a frame of with `room` slots left
 * (besides an open pack's): low priority gets XP_SHM_LOW_SLOTS of the ring
 * while high priority is in use, and a bulk flow's low frames, which may
 * be big, wait for a free reference (never for the peer: it may be
 * waiting for us). */
static unsigned shm_min_prio(struct xp_link *k, bool high, uint32_t room, uint32_t cap)
{
	bool bulk = k->ref_ok && !high;
	bool slot = bulk && room >= 2 && ref_slot(k) &&
		    shmcm_refs_in_flight(k->sc) < SHMCM_REF_WINDOW;

	return (high && cap - room >= XP_SHM_LOW_SLOTS) || (bulk && !slot);
}

/* Whether high priority is in use on the link: sent within the last
 * XP_HIGH_RECENT_NS (the last progress's clock says when that is long
 * past; near it, the clock decides). */
XINLINE bool shm_high_recent(const struct xp_link *k)
{
	return (int64_t)(k->h->now - k->high_ns) < (int64_t)XP_HIGH_RECENT_NS &&
	       xtime_ns() - k->high_ns < XP_HIGH_RECENT_NS;
}

/* A small frame that xp_send() may put into the mailbox itself: tx_shm()
 * would send it at once too -- it fits the link's fragment, a slot is
 * free, and while high priority is in use low priority is within its
 * share (pe_send_now() checks that nothing is queued before it). */
static bool shm_can_send_now(struct xp_link *k, unsigned prio, size_t len)
{
	bool high;
	uint32_t room;

	/* a link that failed is closed by the next progress; a payload
	 * beyond the link's fragment goes by reference */
	if (k->why[0] || len > k->frag || PW_HDR_LEN + len > XP_SHM_PACK_FRAME)
		return false;
	high = prio == XP_HIGH || shm_high_recent(k);
	room = shm_room(k, high);
	return room && prio >= shm_min_prio(k, high, room, k->shm_cap);
}

/* One frame, header and payload straight into a slot the caller counted
 * free (-EAGAIN only if the CM thread took it meanwhile: then through the
 * staging copy), given back to the engine: copied, the user's buffer is
 * free of it.  0, or what shmcm said. */
static int shm_send_frame(struct xp_link *k, const struct pe_frame *f)
{
	int rc = shmcm_transmit2(k->sc, XP_SHM_FRAME, 0, f->hdr, PW_HDR_LEN, f->data, f->dlen);

	if (rc == -EAGAIN) {
		memcpy(k->stage, f->hdr, PW_HDR_LEN);
		if (f->dlen)
			memcpy(k->stage + PW_HDR_LEN, f->data, f->dlen);
		rc = shmcm_transmit(k->sc, XP_SHM_FRAME, 0, k->stage, PW_HDR_LEN + f->dlen);
	}
	pe_frame_done(k->h->e, f->ref);
	return rc < 0 ? rc : 0;
}

/* The frame pe_send_now() made (shm_can_send_now() counted its slot). */
static void shm_send_now(struct xp_link *k, unsigned prio, const struct pe_frame *f)
{
	int rc = shm_send_frame(k, f);

	if (prio == XP_HIGH)
		k->high_ns = xtime_ns();
	if (rc < 0)
		xpl_fail(k, "connection lost");
}

static int tx_shm(struct xp_link *k)
{
	/* the pack being filled: frames of XP_SHM_PACK_FRAME bytes or less
	 * that are queued together, copied into k->stage */
	size_t plen = 0, pmax = PW_HDR_LEN + k->frag;
	unsigned pn = 0;
	uint32_t cap, room;
	struct pe_frame f;
	bool high;
	int done = 0;

	/* the idle case of a poll loop: one flag, no lock */
	if (!pe_node_tx_maybe(k->h->e, k->node))
		return 0;
	if (pmax > XP_SHM_PACK_BYTES)
		pmax = XP_SHM_PACK_BYTES;
	/* The mailbox is one FIFO for both priorities: while high priority is
	 * in use, low-priority frames may fill only XP_SHM_LOW_SLOTS of it,
	 * so a high-priority frame never queues behind more than that (seed
	 * 001: priorities never block each other).  A bulk flow alone gets
	 * the whole ring.  The last progress's clock says when the window
	 * is long past; near it (or from xp_send(), later) the clock decides. */
	high = shm_high_recent(k);
	room = shm_room(k, high);
	cap = k->shm_cap;

	/* payloads the peer has pulled since: their frames are done */
	if (!ref_slot(k))
		shmcm_reap(k->sc);
	/* room counts the slots left besides the open pack's */
	while (room && !k->dead) {
		/* ...and in small pieces, so the one ahead is quick to copy.
		 * A bulk flow alone goes in big pieces that the peer pulls
		 * from our memory (one copy). */
		bool bulk = k->ref_ok && !high;
		unsigned min_prio = shm_min_prio(k, high, room, cap);
		size_t flen;
		bool small;
		int rc;

		/* (never above what a packet holds: only a bulk flow's
		 * pieces go by reference, and only where the peer may pull) */
		pe_node_set_low_frag(k->h->e, k->node,
				     bulk ? XP_SHM_REF_FRAG
				     : high && XP_SHM_LOW_FRAG < k->frag ? XP_SHM_LOW_FRAG : 0);
		if (!pe_pull_prio(k->h->e, k->node, 0, min_prio, &f))
			break;
		if (f.hdr[2] == XP_HIGH) {	/* pw_hdr: prio is byte 2 */
			high = true;
			k->high_ns = xtime_ns();
		}
		flen = PW_HDR_LEN + f.dlen;
		small = flen <= XP_SHM_PACK_FRAME && PW_PACK_LEN + flen <= pmax;
		/* the pack goes before a frame that does not join it */
		if (pn && (!small || plen + PW_PACK_LEN + flen > pmax)) {
			rc = pack_send(k, plen, pn);
			plen = 0;
			pn = 0;
			if (rc < 0) {
				pe_frame_done(k->h->e, f.ref);
				xpl_fail(k, "connection lost");
				break;
			}
		}
		/* A small frame with more behind it opens a pack (copied; the
		 * user's buffer is free of it); a lone one goes straight. */
		if (small && (pn || (room >= 2 && pe_has_tx(k->h->e, k->node, 0)))) {
			if (!pn)
				room--;		/* the pack's slot */
			plen += pw_pack_put(k->stage + plen, f.hdr, f.data, f.dlen);
			pn++;
			done++;
			if (f.ref) {	/* what the next rounds would add, in one call */
				unsigned more;

				pe_frame_done(k->h->e, f.ref);
				plen += pe_pull_pack(k->h->e, k->node, 0, f.hdr[2],
						     shm_min_prio(k, high, room, cap),
						     XP_SHM_PACK_FRAME, k->stage + plen, pmax - plen,
						     &more);
				pn += more;
				done += more;
			}
			continue;
		}
		if (f.dlen > k->frag) {		/* more than a packet holds */
			if ((rc = shm_send_ref(k, &f)) < 0) {
				pe_frame_done(k->h->e, f.ref);
				xpl_fail(k, "connection lost");
				break;
			}
			room -= 2;
			done++;
			continue;
		}
		if (shm_send_frame(k, &f) < 0) {	/* room was counted */
			xpl_fail(k, "connection lost");
			break;
		}
		room--;
		done++;
	}
	if (pn && !k->dead && pack_send(k, plen, pn) < 0)
		xpl_fail(k, "connection lost");
	if (!k->dead && !pe_has_tx(k->h->e, k->node, 0))
		pe_node_tx_idle(k->h->e, k->node);
	return done;
}

/* A served mailbox with no peer: watch for one; a lost one is replaced. */
static int srv_poll(struct xp_listener *l)
{
	int n;

	if (l->cur)
		return 0;
	if (atomic_load(&l->disconnected)) {
		atomic_store(&l->disconnected, 0);
		shmcm_connect(l->sc);
	}
	n = shmcm_poll(l->sc, 64);
	srv_link(l);
	return n;
}

XHOT_INLINE int xpl_rx(struct xp_link *k, uint64_t now)
{
	if (k->dead)
		return 0;
	return k->shm ? rx_shm(k) : rx_xrc(k, now);
}

XHOT_INLINE int xpl_tx(struct xp_link *k)
{
	if (k->dead)
		return 0;
	return k->shm ? tx_shm(k) : tx_xrc(k, 0, k->nlanes - 1);
}

int xpl_tx_prio(struct xp_link *k, unsigned prio)
{
	unsigned lane = k->nlanes == 2 ? prio : 0;

	if (k->dead)
		return 0;
	return k->shm ? tx_shm(k) : tx_xrc(k, lane, lane);
}

int xpl_shm_listeners(struct xp_host *h);
int xpl_shm_listeners(struct xp_host *h)
{
	int n = 0;

	for (unsigned i = 0; i < h->nls; i++)
		if (h->ls[i]->sc)
			n += srv_poll(h->ls[i]);
	return n;
}

struct shmcm_conn *xpl_shm_only(struct xp_host *h, int *nshm)
{
	struct shmcm_conn *one = NULL;

	*nshm = 0;
	for (unsigned i = 0; i < h->nls; i++)
		if (h->ls[i]->sc && !h->ls[i]->cur) {
			one = h->ls[i]->sc;
			(*nshm)++;
		}
	for (uint32_t i = 0; i < h->nlinks; i++) {
		struct xp_link *k = h->links[i];

		if (k && k->shm && !k->dead && k->sc) {
			one = k->sc;
			(*nshm)++;
		}
	}
	return *nshm == 1 ? one : NULL;
}

unsigned xpl_shm_links(const struct xp_host *h)
{
	unsigned n = 0;

	for (uint32_t i = 0; i < h->nlinks; i++)
		if (h->links[i] && !h->links[i]->dead && h->links[i]->shm)
			n++;
	return n;
}

bool xpl_arm(struct xp_host *h)
{
	for (uint32_t i = 0; i < h->nlinks; i++) {
		struct xp_link *k = h->links[i];

		if (!k || k->dead || k->shm)
			continue;
		for (unsigned j = 0; j < k->nlanes; j++)
			if (k->lane[j].c && xrc_arm(k->lane[j].c) != 0) {
				/* > 0: completions are there; < 0: the CQ cannot
				 * signal -- either way sleeping would not end */
				return true;
			}
	}
	return false;
}

unsigned xpl_fd_links(const struct xp_host *h)
{
	unsigned n = 0;

	for (uint32_t i = 0; i < h->nlinks; i++)
		if (h->links[i] && !h->links[i]->dead && !h->links[i]->shm)
			n++;
	return n;
}

/* Sleeps on the mailbox's rx ring (futex) until a packet comes or timeout. */
int xpl_shm_wait(struct xp_host *h, struct shmcm_conn *c, uint64_t timeout_ns);
int xpl_shm_wait(struct xp_host *h, struct shmcm_conn *c, uint64_t timeout_ns)
{
	for (uint32_t i = 0; i < h->nlinks; i++) {
		struct xp_link *k = h->links[i];
		uint32_t seen;

		if (!k || k->dead || k->sc != c || !pe_has_tx(h->e, k->node, 0))
			continue;
		/* Frames wait for room in the mailbox, for the peer to take
		 * the low-priority frame ahead of them or to pull a payload
		 * (tx_shm): sleep until it takes a packet, after one more look,
		 * as it may have taken one since the last.  A peer that sends
		 * us something polls its mailbox, and so takes ours, in the
		 * same round; the slice bounds the rest. */
		seen = shmcm_tx_taken(c);
		if (tx_shm(k) > 0 || k->dead || k->sc != c)
			return 0;	/* sent, or failed (and c may be gone) */
		return shmcm_tx_wait(c, seen, timeout_ns);
	}
	return shmcm_rx_wait(c, timeout_ns);
}
