/* GM-style ports (port.h) over host-pair links: the API and the progress
 * loop.  The protocol is port_eng.c; the transports are port_link.c. */
#include "port/port_pri.h"
#include "core/cc.h"
#include "core/log.h"
#include "core/xtime.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

int xpl_shm_listeners(struct xp_host *h);
int xpl_shm_wait(struct xp_host *h, struct shmcm_conn *c, uint64_t timeout_ns);

const char *xp_strstatus(enum xp_status s)
{
	switch (s) {
	case XP_SUCCESS: return "success";
	case XP_SEND_TIMED_OUT: return "send timed out (receiver provided no buffer)";
	case XP_SEND_REJECTED: return "send rejected (size not acceptable at the receiver)";
	case XP_SEND_TARGET_PORT_CLOSED: return "target port closed";
	case XP_SEND_TARGET_NODE_UNREACHABLE: return "target node unreachable";
	case XP_SEND_DROPPED: return "send dropped";
	}
	return "unknown status";
}

static void mem_forget(struct xp_host *h, unsigned i);
static void alarms_cancel_port(struct xp_host *h, const struct xp_port *p);

static uint64_t random_nonce(void)
{
	uint64_t n = 0;
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (read(fd, &n, sizeof(n)) != sizeof(n))
			n = 0;
		close(fd);
	}
	/* without urandom: still distinct per process and moment */
	return n ? n : xtime_real_ns() ^ ((uint64_t)getpid() << 40);
}

struct xp_host *xp_host_new(const struct xp_host_opts *o, char *err, size_t errlen)
{
	struct xp_host *h = calloc(1, sizeof(*h));
	struct pe_opts po = { 0 };

	if (!h) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (o)
		h->o = *o;
	h->now = xtime_ns();
	if (!h->o.frag) {
		h->o.frag = 32 * 1024;
		h->frag_default = true;
	}
	if (!h->o.connect_timeout_ns)
		h->o.connect_timeout_ns = 5 * XTIME_NS_PER_S;
	if (!h->o.max_msg)
		h->o.max_msg = 64u << 20;
	if (h->o.max_msg > (1u << 31) - 9) {
		snprintf(err, errlen, "largest message %u over 2^31 - 9 bytes", h->o.max_msg);
		goto out_free;
	}
	if (h->o.send_tokens > XP_MAX_TOKENS || h->o.recv_tokens > XP_MAX_TOKENS) {
		snprintf(err, errlen, "%s tokens %u over %u per port",
			 h->o.send_tokens > XP_MAX_TOKENS ? "send" : "receive",
			 h->o.send_tokens > XP_MAX_TOKENS ? h->o.send_tokens : h->o.recv_tokens,
			 XP_MAX_TOKENS);
		goto out_free;
	}
	po.send_tokens = h->o.send_tokens;
	po.recv_tokens = h->o.recv_tokens;
	po.send_timeout_ns = h->o.send_timeout_ns;
	po.max_msg = h->o.max_msg;
	if (!(h->e = pe_new(&po))) {
		snprintf(err, errlen, "out of memory");
		goto out_free;
	}
	if ((h->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		snprintf(err, errlen, "epoll: %s", strerror(errno));
		goto out_free_eng;
	}
	h->nonce = random_nonce();
	for (unsigned i = 0; i < XP_MAX_PORTS; i++) {
		h->ports[i].h = h;
		h->ports[i].id = i;
	}
	return h;

out_free_eng:
	pe_free(h->e);
out_free:
	free(h);
	return NULL;
}

void xp_host_free(struct xp_host *h)
{
	if (!h)
		return;
	/* A last round out: the acknowledgements of what came in go to the
	 * peers, whose sends then complete as delivered, not unreachable. */
	xp_host_progress(h);
	for (unsigned i = 0; i < XP_MAX_PORTS; i++)
		alarms_cancel_port(h, &h->ports[i]);
	for (unsigned i = 0; i < XP_MAX_PORTS; i++)
		if (h->ports[i].open)
			pe_port_close(h->e, i);
	for (uint32_t i = 0; i < h->nlinks; i++)
		xpl_free(h->links[i]);
	for (unsigned i = 0; i < h->nls; i++)
		xpl_listener_free(h->ls[i]);
	while (h->nmem)
		mem_forget(h, h->nmem - 1);
	free(h->mem);
	free(h->links);
	pe_free(h->e);
	close(h->epfd);
	free(h);
}

int xp_host_listen(struct xp_host *h, const struct xuri *u, char *err, size_t errlen)
{
	if (h->nls >= XP_LISTEN_MAX) {
		snprintf(err, errlen, "too many listeners (%d)", XP_LISTEN_MAX);
		return -ENOSPC;
	}
	switch (u->scheme) {
	case XURI_TCP:
	case XURI_RDMA:
		return xpl_listen_xrc(h, u, err, errlen);
	case XURI_SHM:
		return xpl_listen_shm(h, u, err, errlen);
	default:
		snprintf(err, errlen, "%s://: ports run over shm://, tcp:// or rdma://",
			 xuri_scheme_name(u->scheme));
		return -EPROTONOSUPPORT;
	}
}

uint16_t xp_host_listen_port(const struct xp_host *h, unsigned i)
{
	if (i >= h->nls || !h->ls[i]->xl)
		return 0;
	return xrc_listener_port(h->ls[i]->xl);
}

void xp_host_set_foreign(struct xp_host *h, xp_foreign_fn fn, void *arg)
{
	h->foreign = fn;
	h->foreign_arg = arg;
}

int xp_host_connect(struct xp_host *h, const struct xuri *u, char *err, size_t errlen)
{
	char name[160];

	if (xuri_format(u, name, sizeof(name)) < 0)
		snprintf(name, sizeof(name), "%s://?", xuri_scheme_name(u->scheme));
	if (u->scheme == XURI_SHM)
		snprintf(name, sizeof(name), "shm://%s", u->name);
	/* one link per peer host: connecting again names the same node */
	for (uint32_t i = 0; i < h->nlinks; i++)
		if (h->links[i] && !h->links[i]->dead && !h->links[i]->srv &&
		    !strcmp(h->links[i]->name, name))
			return (int)h->links[i]->node;
	switch (u->scheme) {
	case XURI_TCP:
	case XURI_RDMA:
		return xpl_connect_xrc(h, u, name, err, errlen);
	case XURI_SHM:
		return xpl_connect_shm(h, u, name, err, errlen);
	default:
		snprintf(err, errlen, "%s: ports run over shm://, tcp:// or rdma://", name);
		return -EPROTONOSUPPORT;
	}
}

static struct xp_link *link_get(const struct xp_host *h, uint32_t node)
{
	return node >= 1 && node <= h->nlinks ? h->links[node - 1] : NULL;
}

XHOT_INLINE bool xp_node_up(const struct xp_host *h, uint32_t node)
{
	const struct xp_link *k = link_get(h, node);

	return k && !k->dead;
}

const char *xp_node_name(const struct xp_host *h, uint32_t node)
{
	const struct xp_link *k = link_get(h, node);

	return k ? k->name : "?";
}

int xp_host_fd(struct xp_host *h)
{
	/* a program that sleeps on it itself: every lane stays in it */
	if (!h->ep_always) {
		h->ep_always = true;
		xpl_ep(h, true);
	}
	return h->epfd;
}
/* New hosts: the listeners are looked at every XP_ACCEPT_EVERY_NS. */
static int host_accept(struct xp_host *h, uint64_t now)
{
	int done = 0;

	h->accept_ns = now;
	for (unsigned i = 0; i < h->nls; i++)
		done += xpl_accept(h, h->ls[i], now);
	return done + xpl_shm_listeners(h);
}

int xp_host_progress(struct xp_host *h)
{
	uint64_t now;
	int done = 0;

	/* The clock (the vDSO: tens of ns) was a third of an idle busy-poll
	 * round.  Inside xp_blocking_receive_until()'s spin, where rounds
	 * follow each other with nothing between them, idle rounds share one
	 * reading -- 16 rounds are about a microsecond over shm and tens over
	 * tcp (a readv each), and what reads h->now keeps time in
	 * milliseconds -- so a message that arrives is seen
	 * sooner; a round that moved something reads it next time.  Any other
	 * caller may come back after any pause: a fresh reading. */
	if (!h->share_clock || h->idle_rounds++ % XP_CLOCK_IDLE_ROUNDS == 0)
		h->now = xtime_ns();
	now = h->now;

	/* New hosts can wait a millisecond; a busy data path should not pay
	 * a system call per round for them. */
	if (now - h->accept_ns >= XP_ACCEPT_EVERY_NS)
		done += host_accept(h, now);
	/* Out first, then in: the ACKs for what comes in now go out with the
	 * next call's frames -- typically together with the reply the
	 * application sends in between -- in one sendmsg per lane. */
	for (uint32_t i = 0; i < h->nlinks; i++)
		if (h->links[i])
			done += xpl_tx(h->links[i]);
	for (uint32_t i = 0; i < h->nlinks; i++)
		if (h->links[i])
			done += xpl_rx(h->links[i], now);
	/* ...unless many messages came in: then their ACKs go at once, so a
	 * sender with a window of them in flight refills it while we work
	 * through them (one reply would not carry them sooner). */
	if (pe_unacked(h->e) >= XP_ACK_EARLY)
		for (uint32_t i = 0; i < h->nlinks; i++)
			if (h->links[i])
				xpl_tx(h->links[i]);
	done += pe_timers(h->e, now);
	/* a host that has not slept for a while busy-polls: its links need
	 * not be in the epoll (xpl_ep) until it sleeps again */
	if (++h->awake_rounds == XP_EP_AWAKE_ROUNDS && h->ep_links && !h->ep_always)
		xpl_ep(h, false);
	if (done > 0) {
		h->work_ns = now;
		h->idle_rounds = 0;
	}
	return done;
}

/* ------------------------------------------------------------- ports */

/* Waits up to a second for the transports to give back every frame of
 * port `id`'s sends (pe_frame_done), then cuts the links that still hold
 * some: afterwards nothing reads the port's send buffers. */
static void port_drain(struct xp_host *h, unsigned id, const char *why)
{
	uint64_t deadline = xtime_ns() + XTIME_NS_PER_S;

	while (pe_port_refs(h->e, id) && xtime_ns() < deadline)
		xp_host_progress(h);
	for (uint32_t i = 0; pe_port_refs(h->e, id) && i < h->nlinks; i++)
		if (h->links[i] && pe_node_port_refs(h->e, h->links[i]->node, id))
			xpl_fail(h->links[i], why);
}

/* The callback of xp_send_no_callback()'s sends: never called, it marks
 * completions that xp_receive() turns into events. */
static void sent_event(struct xp_port *p, void *ctx, enum xp_status st)
{
	(void)p;
	(void)ctx;
	(void)st;
}

struct xp_port *xp_open(struct xp_host *h, unsigned port_id, char *err, size_t errlen)
{
	int rc;

	if (port_id >= XP_MAX_PORTS) {
		snprintf(err, errlen, "port %u out of range 0..%d", port_id, XP_MAX_PORTS - 1);
		return NULL;
	}
	if ((rc = pe_port_open(h->e, port_id)) < 0) {
		snprintf(err, errlen, "port %u: %s", port_id,
			 rc == -EBUSY ? "already open" : strerror(-rc));
		return NULL;
	}
	h->ports[port_id].open = true;
	h->direct_bytes[port_id] = 0;
	return &h->ports[port_id];
}

void xp_close(struct xp_port *p)
{
	struct xp_host *h;
	struct pe_done d;

	if (!p || !p->open)
		return;
	h = p->h;
	/* the acknowledgements of what the port took go out first: their
	 * senders learn it was delivered, not lost with the port */
	xp_host_progress(h);
	pe_port_close(h->e, p->id);
	p->open = false;
	alarms_cancel_port(h, p);
	/* The transport may still read frames of our sends (tcp sends from
	 * the user's buffer): let it finish before the callbacks hand the
	 * buffers back and the port's registrations go. */
	port_drain(h, p->id, "closing a port whose frames it would not release");
	/* port.h: pending sends complete DROPPED -- the callbacks now, as
	 * the port has no event loop any more */
	while (pe_next_completion(h->e, p->id, &d))
		if (d.cb && d.cb != sent_event)
			d.cb(p, d.ctx, d.status);
	for (unsigned i = h->nmem; i-- > 0;)
		if (h->mem[i].port == p->id)
			mem_forget(h, i);
}

unsigned xp_port_id(const struct xp_port *p) { return p->id; }
void xp_port_set_user(struct xp_port *p, void *user) { p->user = user; }
void *xp_port_user(const struct xp_port *p) { return p->user; }
unsigned xp_host_listeners(const struct xp_host *h) { return h->nls; }

/* The host's next timer after now: the engine's retries and timeouts, and
 * alarms not yet due (a due one waits for its own port's xp_receive(): it
 * must not keep a sleeper on another port awake). */
static uint64_t next_timer(const struct xp_host *h, uint64_t now)
{
	uint64_t t = pe_next_timer(h->e);
	const struct xp_alarm *a = h->alarms;

	while (a && a->due <= now)
		a = a->next;
	if (a && a->due < t)
		t = a->due;
	/* a listener waiting to listen again tries when it is looked at */
	for (unsigned i = 0; i < h->nls; i++)
		if (h->ls[i]->xl && xrc_listener_waiting(h->ls[i]->xl) && now + XTIME_NS_PER_S < t)
			t = now + XTIME_NS_PER_S;
	return t;
}

int xp_host_timeout_ms(const struct xp_host *h, int max_ms)
{
	/* alarms left out are those the last progress's clock found due
	 * (the caller's receives saw them); one due since counts */
	uint64_t now = xtime_ns(), t = next_timer(h, h->now < now ? h->now : now), ms;
	int nshm;

	if (t <= now)
		return 0;
	ms = (t - now + XTIME_NS_PER_MS - 1) / XTIME_NS_PER_MS;
	/* shmcm in poll mode has no fd to wake an epoll sleeper: look again
	 * every millisecond while a mailbox is in use. */
	xpl_shm_only((struct xp_host *)h, &nshm);
	for (unsigned i = 0; i < h->nls; i++)
		if (h->ls[i]->scheme == XURI_SHM)
			nshm++;
	if (nshm && ms > 1)
		ms = 1;
	return ms < (uint64_t)max_ms ? (int)ms : max_ms;
}
unsigned xp_num_send_tokens(const struct xp_port *p) { return pe_send_tokens(p->h->e, p->id); }
unsigned xp_num_receive_tokens(const struct xp_port *p) { return pe_recv_tokens(p->h->e, p->id); }

XHOT_INLINE int xp_send(struct xp_port *p, uint32_t node, unsigned dst_port, enum xp_prio prio,
			const void *buf, size_t len, xp_send_cb cb, void *ctx)
{
	struct xp_link *k;
	int rc;

	if (!p->open)
		return -EINVAL;
	k = link_get(p->h, node);
	/* Out at once when there is room: a ping does not wait for the next
	 * progress call.  Only frames move here, never a callback.  A message
	 * that is the lane's only business goes straight to the transport. */
	if (k && prio <= XP_HIGH && !p->h->defer_tx && xpl_can_send_now(k, (unsigned)prio, len)) {
		struct pe_frame f;

		rc = pe_send_now(p->h->e, p->id, node, dst_port, (unsigned)prio, buf, len, cb, ctx,
				 &f);
		if (rc == 1) {
			xpl_send_now(k, (unsigned)prio, &f);
			return 0;
		}
		if (rc == 0)
			xpl_tx_prio(k, (unsigned)prio);
		return rc;
	}
	/* Through the lane's queue (a frame too big to go at once, frames
	 * before it, no room, a send from a callback), then out as far as
	 * the lane takes. */
	rc = pe_send(p->h->e, p->id, node, dst_port, (unsigned)prio, buf, len, cb, ctx);
	if (rc == 0 && k) {
		if (p->h->defer_tx)
			p->h->deferred = true;	/* out when xp_unknown() returns */
		else
			xpl_tx_prio(k, (unsigned)prio);
	}
	return rc;
}

int xp_send_no_callback(struct xp_port *p, uint32_t node, unsigned dst_port, enum xp_prio prio,
			const void *buf, size_t len)
{
	return xp_send(p, node, dst_port, prio, buf, len, sent_event, NULL);
}

XHOT_INLINE int xp_provide_receive_buffer(struct xp_port *p, void *buf, unsigned size,
					   enum xp_prio prio)
{
	if (!p->open)
		return -EINVAL;
	return pe_provide(p->h->e, p->id, buf, size, (unsigned)prio);
}

void xp_set_acceptable_sizes(struct xp_port *p, enum xp_prio prio, uint64_t mask)
{
	pe_set_acceptable(p->h->e, p->id, (unsigned)prio, mask);
}

/* ------------------------------------------------------ the event loop */

/* When port p's first alarm falls due, UINT64_MAX if it has none (the
 * list goes by due time). */
static uint64_t port_alarm(const struct xp_host *h, const struct xp_port *p)
{
	for (const struct xp_alarm *a = h->alarms; a; a = a->next)
		if (a->port == p)
			return a->due;
	return UINT64_MAX;
}

static bool alarm_due(const struct xp_host *h, const struct xp_port *p)
{
	for (const struct xp_alarm *a = h->alarms; a && a->due <= h->now; a = a->next)
		if (a->port == p)
			return true;
	return false;
}

XHOT_INLINE bool xp_port_pending(const struct xp_port *p)
{
	return p->open && (pe_port_pending(p->h->e, p->id) || (p->h->alarms && alarm_due(p->h, p)));
}

XHOT_INLINE int xp_receive(struct xp_port *p, struct xp_event *ev)
{
	struct xp_host *h = p->h;
	xp_send_cb cb;

	if (!p->open) {
		*ev = (struct xp_event){ .type = XP_NO_EVENT };
		return 0;
	}
	/* What is already queued comes first: a caller draining a busy port
	 * must not pull more traffic in with every event it takes. */
	if (!pe_port_pending(h->e, p->id))
		xp_host_progress(h);
	/* Messages first: a reply is what a caller waits for, and the
	 * callback of the request it answers (acknowledged by the same
	 * frame) can run while it waits for the next one.  The queue of
	 * messages drains (no progress while it holds any), so completions
	 * never starve. */
	if (pe_next_event(h->e, p->id, ev))
		return 1;
	/* seed 001 section 2: send callbacks wait for xp_unknown() */
	if (pe_peek_completion(h->e, p->id, &cb)) {
		struct pe_done d;

		if (cb != sent_event) {
			*ev = (struct xp_event){ .type = XP_SENT_TOKENS_EVENT };
			return 1;
		}
		pe_next_completion(h->e, p->id, &d);
		*ev = (struct xp_event){
			.type = d.status == XP_SUCCESS ? XP_SENT_EVENT : XP_FAILED_SEND_EVENT,
			.buffer = (void *)d.buf, .length = d.len, .prio = (enum xp_prio)d.prio,
			.target_node = d.node, .target_port = d.dst_port, .status = d.status,
		};
		return 1;
	}
	if (h->alarms && alarm_due(h, p)) {
		*ev = (struct xp_event){ .type = XP_ALARM_EVENT };
		return 1;
	}
	return 0;
}

void xp_unknown(struct xp_port *p, const struct xp_event *ev)
{
	struct xp_host *h = p->h;
	struct pe_done d;
	xp_send_cb cb;
	bool nested;

	if (!p->open)
		return;
	switch (ev->type) {
	case XP_SENT_TOKENS_EVENT:
		/* every due callback up to the next completion that is an
		 * event of its own; each one hands its send token back.  What
		 * they send goes out together afterwards: over shm in shared
		 * mailbox packets, over a socket in one write. */
		nested = h->defer_tx;
		h->defer_tx = true;
		while (p->open && pe_peek_completion(h->e, p->id, &cb) && cb != sent_event) {
			pe_next_completion(h->e, p->id, &d);
			if (d.cb)
				d.cb(p, d.ctx, d.status);
		}
		if (!nested) {
			h->defer_tx = false;
			if (h->deferred) {
				h->deferred = false;
				for (uint32_t i = 0; i < h->nlinks; i++)
					if (h->links[i])
						xpl_tx(h->links[i]);
			}
		}
		break;
	case XP_ALARM_EVENT:
		for (;;) {
			struct xp_alarm *a = h->alarms;

			while (a && a->due <= h->now && a->port != p)
				a = a->next;
			if (!a || a->due > h->now || !p->open)
				break;
			xp_cancel_alarm(a);
			a->cb(a->ctx);
		}
		break;
	case XP_RECV_EVENT:
	case XP_HIGH_RECV_EVENT:
		/* the receive token goes back to the port, with its buffer */
		pe_provide(h->e, p->id, ev->buffer, ev->size, (unsigned)ev->prio);
		break;
	default:
		break;
	}
}

/* ----------------------------------------------------------- alarms */

void xp_initialize_alarm(struct xp_alarm *a)
{
	*a = (struct xp_alarm){ 0 };
}

void xp_cancel_alarm(struct xp_alarm *a)
{
	struct xp_alarm **pp;

	if (!a->set)
		return;
	for (pp = &a->port->h->alarms; *pp; pp = &(*pp)->next)
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	a->set = false;
	a->next = NULL;
}

void xp_set_alarm(struct xp_port *p, struct xp_alarm *a, uint64_t usecs, void (*cb)(void *ctx),
		  void *ctx)
{
	struct xp_alarm **pp;

	xp_cancel_alarm(a);
	if (!p->open)
		return;
	a->port = p;
	a->due = xtime_after(xtime_ns(), usecs > UINT64_MAX / XTIME_NS_PER_US ? UINT64_MAX
									     : usecs * XTIME_NS_PER_US);
	a->cb = cb;
	a->ctx = ctx;
	a->set = true;
	/* by due time; equal times in the order they were set */
	for (pp = &p->h->alarms; *pp && (*pp)->due <= a->due; pp = &(*pp)->next)
		;
	a->next = *pp;
	*pp = a;
}

static void alarms_cancel_port(struct xp_host *h, const struct xp_port *p)
{
	struct xp_alarm **pp = &h->alarms;

	while (*pp)
		if ((*pp)->port == p) {
			struct xp_alarm *a = *pp;

			*pp = a->next;
			a->set = false;
			a->next = NULL;
		} else {
			pp = &(*pp)->next;
		}
}

/* ------------------------------------------------------- DMA memory */

static int mem_find(const struct xp_host *h, unsigned port, const void *addr, size_t len)
{
	const uint8_t *a = addr;

	for (unsigned i = 0; i < h->nmem; i++)
		if (h->mem[i].port == port && a < h->mem[i].addr + h->mem[i].len &&
		    h->mem[i].addr < a + len)
			return (int)i;
	return -1;
}

static void mem_forget(struct xp_host *h, unsigned i)
{
	struct xp_mem *m = &h->mem[i];

	for (unsigned j = 0; j < m->ndom; j++)
		xrc_dereg(m->dom[j].mr);
	if (m->dma)
		munmap(m->addr, m->maplen);
	h->mem[i] = h->mem[--h->nmem];
}

static int mem_add(struct xp_host *h, unsigned port, void *addr, size_t len, bool dma)
{
	/* (a range past the top of the address space would wrap, and the
	 * overlap test with it) */
	if (!len || len > UINTPTR_MAX - (uintptr_t)addr)
		return -EINVAL;
	if (mem_find(h, port, addr, len) >= 0)
		return -EEXIST;
	if (h->nmem == h->memcap) {
		unsigned cap = h->memcap ? h->memcap * 2 : 8;
		struct xp_mem *m = realloc(h->mem, cap * sizeof(*m));

		if (!m)
			return -ENOMEM;
		h->mem = m;
		h->memcap = cap;
	}
	h->mem[h->nmem++] = (struct xp_mem){ .addr = addr, .len = len, .port = port, .dma = dma };
	return 0;
}

struct xrc_mr *xp_mem_mr(struct xp_host *h, unsigned port, struct xrc_dom *d, const void *addr,
			 size_t len)
{
	const uint8_t *a = addr;
	char err[160];

	for (unsigned i = 0; i < h->nmem; i++) {
		struct xp_mem *m = &h->mem[i];

		if (m->port != port || a < m->addr || a + len > m->addr + m->len)
			continue;
		for (unsigned j = 0; j < m->ndom; j++)
			if (m->dom[j].d == d)
				return m->dom[j].mr;
		if (m->ndom == XP_MEM_DOMS)
			return NULL;
		/* first use on this device: pin it now (a failure -- the
		 * locked-memory limit, say -- means copies from then on) */
		m->dom[m->ndom].d = d;
		m->dom[m->ndom].mr = xrc_reg(d, m->addr, m->len, 0, err, sizeof(err));
		return m->dom[m->ndom++].mr;
	}
	return NULL;
}

int xp_register_memory(struct xp_port *p, void *ptr, size_t len)
{
	if (!p->open)
		return -EINVAL;
	return mem_add(p->h, p->id, ptr, len, false);
}

int xp_deregister_memory(struct xp_port *p, void *ptr, size_t len)
{
	struct xp_host *h = p->h;
	int i;

	if (!p->open || !len)
		return -EINVAL;
	i = mem_find(h, p->id, ptr, len);
	if (i < 0 || h->mem[i].addr != ptr || h->mem[i].len != len || h->mem[i].dma)
		return -EINVAL;
	mem_forget(h, (unsigned)i);
	return 0;
}

/* A mapping of len bytes; from XP_DMA_HUGE bytes on, whole 2 MiB pages,
 * aligned, that the kernel may back with transparent huge pages: what
 * pins it (ibv_reg_mr, or the peer's process_vm_readv over shm) then
 * takes one page table entry per 2 MiB, not per 4 KiB.  *maplen: what
 * to unmap. */
static void *dma_map(size_t len, size_t *maplen)
{
	uint8_t *raw, *m;
	size_t n;

	if (len < XP_DMA_HUGE) {
		*maplen = len;
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		return m == MAP_FAILED ? NULL : m;
	}
	if (len > SIZE_MAX - 2 * (size_t)XP_HUGE_PAGE) {
		errno = ENOMEM;
		return NULL;
	}
	n = (len + XP_HUGE_PAGE - 1) & ~(size_t)(XP_HUGE_PAGE - 1);
	raw = mmap(NULL, n + XP_HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	m = (uint8_t *)(((uintptr_t)raw + XP_HUGE_PAGE - 1) & ~(uintptr_t)(XP_HUGE_PAGE - 1));
	if (m > raw)
		munmap(raw, (size_t)(m - raw));
	if (m + n < raw + n + XP_HUGE_PAGE)
		munmap(m + n, (size_t)(raw + n + XP_HUGE_PAGE - (m + n)));
	madvise(m, n, MADV_HUGEPAGE);	/* a hint: without THP, small pages */
	*maplen = n;
	return m;
}

void *xp_dma_malloc(struct xp_port *p, size_t len)
{
	size_t maplen;
	void *m;
	int rc;

	if (!p->open || !len) {
		errno = EINVAL;
		return NULL;
	}
	if (!(m = dma_map(len, &maplen)))
		return NULL;
	if ((rc = mem_add(p->h, p->id, m, len, true)) < 0) {
		munmap(m, maplen);
		errno = -rc;
		return NULL;
	}
	p->h->mem[p->h->nmem - 1].maplen = maplen;
	return m;
}

void xp_dma_free(struct xp_port *p, void *ptr)
{
	struct xp_host *h = p->h;

	if (!ptr)
		return;
	for (unsigned i = 0; i < h->nmem; i++)
		if (h->mem[i].dma && h->mem[i].addr == ptr && h->mem[i].port == p->id) {
			mem_forget(h, i);
			return;
		}
}

/* Sleeps until something may have come in, a timer is due, or `until`. */
static int host_wait(struct xp_host *h, uint64_t until)
{
	uint64_t now = xtime_ns(), t = next_timer(h, now);
	struct epoll_event evs[8];
	struct shmcm_conn *one;
	int nshm, rc;

	h->idle_rounds = 0;	/* the progress after a sleep reads the clock */

	if (t > until)
		t = until;
	if (t <= now)
		return 0;
	t -= now;
	if (xpl_arm(h))
		return 0;	/* completions came in meanwhile */
	one = xpl_shm_only(h, &nshm);
	if (nshm && !xpl_shm_links(h)) {
		/* Only served mailboxes waiting for a peer: a new peer host
		 * can wait a millisecond for us to notice it. */
		if (t > XTIME_NS_PER_MS)
			t = XTIME_NS_PER_MS;
	} else if (nshm) {
		/* shmcm in poll mode has no fd: with one mailbox and nothing
		 * else to watch, sleep on its futex (woken by the first
		 * packet), looking at the fds every millisecond; otherwise
		 * nap 50 us at a time. */
		if (one && !xpl_fd_links(h) && !h->nextra) {
			uint64_t slice = t < XTIME_NS_PER_MS ? t : XTIME_NS_PER_MS;

			h->awake_rounds = 0;
			rc = xpl_shm_wait(h, one, slice);
			if (rc == -EINTR)
				return -EINTR;
			t = 0;
		} else if (t > 50 * XTIME_NS_PER_US) {
			t = 50 * XTIME_NS_PER_US;
		}
	}
	struct timespec ts = { (time_t)(t / XTIME_NS_PER_S), (long)(t % XTIME_NS_PER_S) };

	if (!h->ep_links && xpl_fd_links(h))
		xpl_ep(h, true);
	h->awake_rounds = 0;
	rc = epoll_pwait2(h->epfd, evs, 8, &ts, NULL);
	if (rc < 0 && errno == EINTR)
		return -EINTR;
	return 0;
}

int xp_host_add_fd(struct xp_host *h, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN };

	if (epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -errno;
	h->nextra++;
	return 0;
}

int xp_host_wait(struct xp_host *h, uint64_t timeout_ns)
{
	return host_wait(h, xtime_after(xtime_ns(), timeout_ns));
}

static int blocking_receive(struct xp_port *p, struct xp_event *ev, uint64_t until,
			    uint64_t spin_until)
{
	uint64_t spin = UINT64_MAX;
	int rc;

	for (;;) {
		if (!p->open) {		/* no progress would run: no clock */
			*ev = (struct xp_event){ .type = XP_NO_EVENT };
			return 0;
		}
		if ((rc = xp_receive(p, ev)) != 0)
			return rc;
		/* the receive just ran a progress: its clock, at most 15 idle
		 * rounds old */
		uint64_t now = p->h->now;

		if (spin == UINT64_MAX)
			spin = spin_until > now ? spin_until - now : 0;
		if (now >= until)
			return 0;
		/* Busy-poll (no sched_yield: yielding spinners let the
		 * scheduler keep both ends on one CPU, bench/README.md), then
		 * sleep: after the spin, and after as long again without
		 * traffic (a bulk flow whose messages take longer than the
		 * spin does not sleep between them). */
		if (now < spin_until || now - p->h->work_ns < spin)
			continue;
		/* Progress may have queued completions of other ports, or
		 * frames still to go: sleep only when idle. */
		if (xp_host_progress(p->h) > 0 || xp_port_pending(p))
			continue;
		/* no sleep past the port's own alarm: the host's timers leave
		 * out those due by a fresh clock, and the look above used a
		 * shared one that may be older */
		uint64_t a = port_alarm(p->h, p);

		if ((rc = host_wait(p->h, a < until ? a : until)) < 0)
			return rc;
	}
}

int xp_blocking_receive_until(struct xp_port *p, struct xp_event *ev, uint64_t until,
			       uint64_t spin_until)
{
	struct xp_host *h = p->h;
	int rc;

	/* its rounds share clock readings (xp_host_progress); the first one
	 * reads it */
	h->share_clock = true;
	h->idle_rounds = 0;
	rc = blocking_receive(p, ev, until, spin_until);
	h->share_clock = false;
	return rc;
}

int xp_blocking_receive(struct xp_port *p, struct xp_event *ev, uint64_t timeout_ns,
			uint64_t spin_ns)
{
	uint64_t start = xtime_ns();

	return xp_blocking_receive_until(p, ev, timeout_ns ? xtime_after(start, timeout_ns) : UINT64_MAX,
					 xtime_after(start, spin_ns));
}

void xp_resume_sending(struct xp_port *p, enum xp_prio prio, uint32_t node, unsigned dst_port)
{
	struct xp_link *k;

	pe_resume(p->h->e, p->id, (unsigned)prio, node, dst_port);
	if ((k = link_get(p->h, node)))
		xpl_tx(k);
}

void xp_drop_sends(struct xp_port *p, enum xp_prio prio, uint32_t node, unsigned dst_port)
{
	pe_drop(p->h->e, p->id, (unsigned)prio, node, dst_port);
}

void xp_port_stats(const struct xp_port *p, struct xp_port_stats *s)
{
	pe_port_stats(p->h->e, p->id, s);
	s->direct_bytes = p->h->direct_bytes[p->id];
}
