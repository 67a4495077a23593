/* xprobe serve: answer pings and bandwidth tests.
 *
 * Port URIs (shm, tcp, rdma) share one host with three service ports:
 * echo (0), sink (1) and control (2) -- see lib/probe/probe_wire.h.
 * Datagram URIs (udp, ud) each get an endpoint answering PING and counting
 * DATA per session.  One thread serves everything: it busy-polls for
 * --spin after the last work, then sleeps in epoll.  A client that
 * misbehaves costs a rate-limited log line, never the service. */
#include "cmd.h"
#include "vt.h"
#include "core/cc.h"
#include "core/log.h"
#include "core/spin.h"
#include "core/parse.h"
#include "core/xtime.h"
#include "probe/probe_srv.h"
#include "xprt/xdev.h"
#include "xprt/xdg.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define MAX_URIS	16
#define SBUF_ALIGN	64

/* A server-owned receive buffer; the header sits just before the memory
 * given to the port, so an event's buffer pointer leads back to it. */
struct sbuf {
	struct sbuf *next;	/* echo backlog */
	struct sbuf *all;	/* every buffer, to free them at the end */
	unsigned port;
	unsigned size;
	enum xp_prio prio;
	uint32_t node;		/* echo: where it goes back to */
	unsigned dst_port;
	uint32_t len;
	_Alignas(SBUF_ALIGN) unsigned char mem[];
};

struct dgsrv {
	struct xdg *d;
	uint8_t *tx;		/* one MTU for replies */
	struct probe_dgsrv core;
};

struct server {
	struct xp_host *h;
	struct xp_port *port[3];
	/* buffers owned per (service port, prio, size class) */
	unsigned owned[3][2][XP_MAX_SIZE + 1];
	uint64_t mem_used, mem_max;
	struct sbuf *all;
	bool closing;		/* ports closing: callbacks must not re-provide */
	uint32_t max_size;
	struct sbuf *backlog, **backlog_tail;
	struct probe_srv core;		/* sink counts, control replies waiting */
	struct dgsrv dg[MAX_URIS];
	int ndg;
	bool verbose;
	struct vt_server *vt;		/* verbs tests on the tcp and rdma listeners */
};

static struct sbuf *sbuf_new(struct server *s, unsigned port, unsigned size, enum xp_prio prio)
{
	size_t len = xp_max_length_for_size(size);
	struct sbuf *b;

	if (s->mem_used + len > s->mem_max)
		return NULL;
	if (posix_memalign((void **)&b, SBUF_ALIGN, sizeof(*b) + (len ? len : 1)))
		return NULL;
	memset(b, 0, sizeof(*b));
	b->port = port;
	b->size = size;
	b->prio = prio;
	b->all = s->all;
	s->all = b;
	s->mem_used += len;
	return b;
}

static struct sbuf *sbuf_of(void *mem)
{
	return (struct sbuf *)((unsigned char *)mem - offsetof(struct sbuf, mem));
}

XINLINE void provide(struct server *s, struct sbuf *b)
{
	if (s->closing)
		return;
	int rc = xp_provide_receive_buffer(s->port[b->port], b->mem, b->size, b->prio);

	/* Tokens come back with every event, so this only fails if our own
	 * accounting is wrong; losing one buffer is better than a crash. */
	if (rc < 0)
		xlog_ratelimited(XLOG_ERROR, "port %u: providing a buffer: %s", b->port,
				 strerror(-rc));
}

/* Makes sure `want` buffers of (port, prio, size) exist.  0, or ENOMEM
 * (nothing allocated) when they would not fit in --max-mem.  Buffers given
 * to a port stay there (GM has no call to take one back), so the budget
 * only grows to the largest window asked for per size class. */
static int ensure_buffers(struct server *s, unsigned port, enum xp_prio prio, unsigned size,
			  unsigned want)
{
	unsigned *have = &s->owned[port][prio][size];

	if (*have < want &&
	    s->mem_used + (uint64_t)(want - *have) * xp_max_length_for_size(size) > s->mem_max)
		return ENOMEM;
	while (*have < want) {
		struct sbuf *b = sbuf_new(s, port, size, prio);

		if (!b)
			return ENOMEM;
		(*have)++;
		provide(s, b);
	}
	return 0;
}

static void echo_sent(struct xp_port *p, void *ctx, enum xp_status st);

static int echo_send(struct server *s, struct sbuf *b)
{
	return xp_send(s->port[PROBE_PORT_ECHO], b->node, b->dst_port, b->prio, b->mem, b->len,
		       echo_sent, b);
}

static void echo_sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	struct sbuf *b = ctx;
	struct server *s = xp_port_user(p);

	if (st != XP_SUCCESS) {
		xlog_ratelimited(XLOG_INFO, "echo to node %u port %u: %s", b->node, b->dst_port,
				 xp_strstatus(st));
		/* The client stopped taking replies: let its stream go, so the
		 * next client on that node/port is not stuck behind it. */
		if (st != XP_SEND_DROPPED)
			xp_drop_sends(p, b->prio, b->node, b->dst_port);
	}
	provide(s, b);
}

static void echo_backlog(struct server *s)
{
	while (s->backlog) {
		struct sbuf *b = s->backlog;

		if (echo_send(s, b) == -EAGAIN)
			return;
		s->backlog = b->next;
		if (!s->backlog)
			s->backlog_tail = &s->backlog;
	}
}

static void on_echo(struct server *s, const struct xp_event *ev)
{
	struct sbuf *b = sbuf_of(ev->buffer);
	int rc;

	b->node = ev->sender_node;
	b->dst_port = ev->sender_port;
	b->len = ev->length;
	b->next = NULL;
	if (s->backlog || (rc = echo_send(s, b)) == -EAGAIN) {
		*s->backlog_tail = b;
		s->backlog_tail = &b->next;
	} else if (rc < 0) {
		xlog_ratelimited(XLOG_INFO, "echo to node %u: %s", b->node, strerror(-rc));
		provide(s, b);
	}
}

/* --- control ------------------------------------------------------------- */

struct reply {
	uint8_t msg[PROBE_CTL_LEN];
	struct server *s;
	uint32_t node;
	unsigned port;
};

static void reply_sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	struct reply *r = ctx;

	probe_srv_reply_end(&r->s->core, r->node);
	/* A client that takes no replies stops its stream: let the rest of
	 * what waits for it go, so the port's tokens come back. */
	if (st != XP_SUCCESS && st != XP_SEND_DROPPED)
		xp_drop_sends(p, XP_HIGH, r->node, r->port);
	free(r);
}

static void ctl_reply(struct server *s, const struct xp_event *ev, const struct probe_ctl *c)
{
	struct reply *r;
	int rc;

	if (!probe_srv_reply_begin(&s->core, ev->sender_node)) {
		xlog_ratelimited(XLOG_INFO, "node %u: %u control replies waiting; request ignored",
				 ev->sender_node, PROBE_CTL_PER_NODE);
		return;
	}
	r = malloc(sizeof(*r));
	if (!r) {
		probe_srv_reply_end(&s->core, ev->sender_node);
		return;
	}
	r->s = s;
	r->node = ev->sender_node;
	r->port = ev->sender_port;
	probe_ctl_encode(c, r->msg);
	rc = xp_send(s->port[PROBE_PORT_CTL], ev->sender_node, ev->sender_port, XP_HIGH, r->msg,
		     sizeof(r->msg), reply_sent, r);
	if (rc < 0) {
		xlog_ratelimited(XLOG_INFO, "control reply to node %u: %s", ev->sender_node,
				 strerror(-rc));
		probe_srv_reply_end(&s->core, ev->sender_node);
		free(r);
	}
}

/* The sink's messages already taken (their senders may have their ACKs):
 * counted before a control request is answered, so the counts a client
 * asks for after its last acknowledgement hold every message it saw
 * acknowledged. */
static void sink_drain(struct server *s)
{
	struct xp_port *p = s->port[PROBE_PORT_SINK];
	struct xp_event ev;

	while (xp_port_pending(p) && xp_receive(p, &ev) == 1) {
		if (ev.type != XP_RECV_EVENT && ev.type != XP_HIGH_RECV_EVENT) {
			xp_unknown(p, &ev);
			continue;
		}
		probe_srv_sink(&s->core, ev.sender_node, ev.sender_port, ev.length);
		provide(s, sbuf_of(ev.buffer));
	}
}

/* A control request: the rules answer it (probe_srv_ctl), the buffers a
 * SETUP needs come from here. */
static void on_ctl(struct server *s, const struct xp_event *ev)
{
	struct probe_ctl_act act;
	const struct probe_ctl *c = &act.req;
	int rc;

	sink_drain(s);
	rc = probe_srv_ctl(&s->core, ev->buffer, ev->length, ev->sender_node, ev->sender_port,
			   &act);

	if (rc == -EBADMSG) {
		xlog_ratelimited(XLOG_WARN, "node %u: unexpected control message type %u",
				 ev->sender_node, c->type);
		return;
	}
	if (rc < 0) {
		xlog_ratelimited(XLOG_WARN, "node %u port %u: bad control message (%s)",
				 ev->sender_node, ev->sender_port, strerror(-rc));
		return;
	}
	if (act.buffers)
		act.rep.status = ensure_buffers(s, c->service, c->prio, xp_min_size_for_length(c->size),
						act.buffers);
	if (c->type == PROBE_SETUP_REQ && s->verbose)
		xlog((XLOG_ERROR), "node %u (%s) port %u: %s %u x %u B, %s priority: %s",
		     ev->sender_node, xp_node_name(s->h, ev->sender_node), ev->sender_port,
		     c->service == PROBE_PORT_ECHO ? "ping" : "bw", c->window, c->size,
		     c->prio ? "high" : "low", act.rep.status ? strerror((int)act.rep.status) : "ok");
	ctl_reply(s, ev, &act.rep);
}

/* Takes what the round's progress queued on every service port, up to
 * PORT_BURST events each, without pulling in more traffic: a round is one
 * progress, so a stream of bulk data on the sink cannot hold the echo and
 * control ports up for longer than that.  Returns events handled. */
#define PORT_BURST 16

static int serve_ports(struct server *s)
{
	struct xp_event ev;
	int n = 0;

	for (unsigned i = 0; i < 3; i++) {
		for (int k = 0; k < PORT_BURST && xp_port_pending(s->port[i]); k++) {
			if (xp_receive(s->port[i], &ev) != 1)
				continue;
			n++;
			if (ev.type != XP_RECV_EVENT && ev.type != XP_HIGH_RECV_EVENT) {
				xp_unknown(s->port[i], &ev);	/* send callbacks */
				continue;
			}
			if (i == PROBE_PORT_ECHO) {
				on_echo(s, &ev);
				continue;
			}
			if (i == PROBE_PORT_SINK)
				probe_srv_sink(&s->core, ev.sender_node, ev.sender_port, ev.length);
			else
				on_ctl(s, &ev);
			provide(s, sbuf_of(ev.buffer));
		}
	}
	echo_backlog(s);
	return n;
}

/* --- datagrams ------------------------------------------------------------ */

static int serve_dg(struct dgsrv *g)
{
	struct xdg_wc wc[32];
	int n = xdg_poll(g->d, wc, 32), done = 0;
	uint64_t now = xtime_ns();

	for (int i = 0; i < n; i++) {
		int r;

		if (wc[i].op != XDG_OP_RECV || wc[i].status)
			continue;
		done++;
		r = probe_dg_input(&g->core, wc[i].src, wc[i].data, wc[i].len, now, g->tx);
		if (r < 0)
			xlog_ratelimited(XLOG_INFO, "%s: not an xprobe datagram (%u bytes)",
					 xdg_addr_str(wc[i].src), wc[i].len);
		else if (r > 0)
			xdg_send(g->d, wc[i].src, g->tx, (size_t)r, 0, 0);
	}
	return done;
}

/* --- setup ------------------------------------------------------------------ */

static int open_ports(struct server *s, char *err, size_t errlen)
{
	for (unsigned i = 0; i < 3; i++) {
		s->port[i] = xp_open(s->h, i, err, errlen);
		if (!s->port[i])
			return -1;
		xp_port_set_user(s->port[i], s);
	}
	/* Control messages are tiny and come at either priority; a message
	 * of another size class is refused at its sender (GM's "send
	 * rejected", what `xprobe ping --port 2 -s SIZE` shows). */
	for (int prio = 0; prio < 2; prio++) {
		unsigned size = xp_min_size_for_length(PROBE_CTL_LEN);

		if (ensure_buffers(s, PROBE_PORT_CTL, prio, size, 32)) {
			snprintf(err, errlen, "out of memory for control buffers");
			return -1;
		}
		xp_set_acceptable_sizes(s->port[PROBE_PORT_CTL], (enum xp_prio)prio, 1ull << size);
	}
	return 0;
}

static int add_uri(struct server *s, const struct xuri *u, const char *arg,
		   const struct xp_host_opts *ho, char *err, size_t errlen)
{
	char name[300];

	if (is_datagram(u)) {
		struct dgsrv *g = &s->dg[s->ndg];

		g->d = xdg_open(u, NULL, err, errlen);
		if (!g->d)
			return -1;
		g->tx = malloc(xdg_mtu(g->d) > PROBE_DG_STATS_LEN ? xdg_mtu(g->d) :
			       PROBE_DG_STATS_LEN);
		if (!g->tx) {
			snprintf(err, errlen, "%s: out of memory", arg);
			return -1;
		}
		s->ndg++;
		printf("listening %s://%s:%u\n", xuri_scheme_name(u->scheme), u->host,
		       xdg_port(g->d));
		return 0;
	}
	if (!s->h) {
		s->h = xp_host_new(ho, err, errlen);
		if (!s->h || open_ports(s, err, errlen) < 0)
			return -1;
		if (!(s->vt = vt_server_new(&s->mem_used, s->mem_max, s->max_size, s->verbose))) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		xp_host_set_foreign(s->h, vt_server_take, s->vt);
	}
	if (xp_host_listen(s->h, u, err, errlen) < 0)
		return -1;
	if (u->scheme == XURI_SHM) {
		printf("listening shm://%s\n", u->name);
	} else {
		struct xuri b = *u;

		b.port = xp_host_listen_port(s->h, xp_host_listeners(s->h) - 1);
		xuri_format(&b, name, sizeof(name));
		printf("listening %s\n", name);
	}
	return 0;
}

static void server_free(struct server *s)
{
	for (int i = 0; i < s->ndg; i++) {
		xdg_close(s->dg[i].d);
		free(s->dg[i].tx);
	}
	s->closing = true;
	for (unsigned i = 0; i < 3; i++)
		xp_close(s->port[i]);
	if (s->h)
		xp_host_set_foreign(s->h, NULL, NULL);	/* its last round comes */
	vt_server_free(s->vt);
	xp_host_free(s->h);
	/* the ports are gone: their buffers are ours again */
	while (s->all) {
		struct sbuf *b = s->all;

		s->all = b->all;
		free(b);
	}
}

/* The serving loop: until a signal asks it to stop.  EXIT_OK, or
 * EXIT_FAIL after saying why. */
static int serve_loop(struct server *s, int epfd, uint64_t spin_ns)
{
	struct xspin sp;
	int rc;

	/* whether the progress before a sleep brought something: its events
	 * are served before the next progress, whose transmit would send
	 * their ACKs alone, ahead of the replies that would carry them */
	bool fresh = false;

	xspin_init(&sp, spin_ns, xtime_ns());
	while (!cli_stop_requested) {
		int work = 0;

		if (s->h) {
			rc = fresh ? 0 : xp_host_progress(s->h);
			if (rc < 0) {
				fail("serve", "%s", strerror(-rc));
				return EXIT_FAIL;
			}
			fresh = false;
			work += rc + serve_ports(s) + vt_server_poll(s->vt);
			for (int fd; (fd = vt_server_new_fd(s->vt)) >= 0;)
				xp_host_add_fd(s->h, fd);
		}
		for (int i = 0; i < s->ndg; i++)
			work += serve_dg(&s->dg[i]);
		if (xspin_again(&sp, xtime_ns(), work))
			continue;
		/* Progress inside one port's xp_receive() may have queued
		 * events for a port drained before it, or frames to send. */
		if (s->h && xp_host_progress(s->h) > 0) {
			fresh = true;
			continue;
		}
		if (s->h && (xp_port_pending(s->port[0]) || xp_port_pending(s->port[1]) ||
			     xp_port_pending(s->port[2]) || vt_server_arm(s->vt)))
			continue;
		if (s->h) {
			xp_host_wait(s->h, 1000000000ull);
		} else {
			struct epoll_event e[8];

			if (epoll_wait(epfd, e, 8, 1000) < 0 && errno != EINTR) {
				fail("serve", "epoll: %s", strerror(errno));
				return EXIT_FAIL;
			}
		}
	}
	return EXIT_OK;
}

int cmd_serve(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "verbose", no_argument, NULL, 'v' },
		{ "spin", required_argument, NULL, 'S' },
		{ "max-mem", required_argument, NULL, 'M' },
		{ "max-size", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const char *const os = "vh";
	static struct server srv;	/* big: sink and session tables */
	struct server *s = &srv;
	/* A reply that finds no buffer at its client fails after a second
	 * (not GM's default 10 s): the echo buffer it holds is shared. */
	struct xp_host_opts ho = { .recv_tokens = 16384, .send_tokens = 4096,
				   .send_timeout_ns = 1000000000ull };
	uint64_t spin_ns = 50000, v;
	char err[512];
	const char *es;
	struct xuri uris[MAX_URIS];
	int c, rc, nuri, epfd = -1, ret = EXIT_FAIL;

	s->mem_max = 256ull << 20;
	s->max_size = 64u << 20;
	while ((c = getopt_long(argc, argv, os, lo, NULL)) != -1) {
		switch (c) {
		case 'v':
			s->verbose = true;
			break;
		case 'S':
			if (xparse_duration(optarg, 1000, 0, 1000000000ull, &spin_ns, &es) < 0)
				return usage_error("serve", "--spin: '%s' %s", optarg, es);
			break;
		case 'M':
			if (xparse_size(optarg, 1 << 20, 1ull << 40, &s->mem_max, &es) < 0)
				return usage_error("serve", "--max-mem: '%s' %s", optarg, es);
			break;
		case 'm':
			if (xparse_size(optarg, 1, 1u << 30, &v, &es) < 0)
				return usage_error("serve", "--max-size: '%s' %s", optarg, es);
			s->max_size = (uint32_t)v;
			break;
		case 'h':
			cmd_usage(stdout, "serve");
			return EXIT_OK;
		default:
			return bad_option("serve", os, argv);
		}
	}
	nuri = argc - optind;
	if (nuri < 1)
		return usage_error("serve", "no URI given");
	if (nuri > MAX_URIS)
		return usage_error("serve", "at most %d URIs", MAX_URIS);
	for (int i = 0; i < nuri; i++)
		if ((rc = parse_target("serve", argv[optind + i], s->verbose, &uris[i])))
			return rc;
	ho.max_msg = s->max_size;
	probe_srv_init(&s->core, s->max_size);

	cli_stop_handlers();
	s->backlog_tail = &s->backlog;
	for (int i = 0; i < nuri; i++) {
		if (xdev_require(&uris[i], err, sizeof(err)) < 0 ||
		    add_uri(s, &uris[i], argv[optind + i], &ho, err, sizeof(err)) < 0) {
			fail("serve", "%s", err);
			goto out_free;
		}
	}
	/* scripts wait for the lines: unwritten, the server stops (exit 1) */
	cli_out();

	/* One place to sleep: the host's wait (it knows how to wait for shm
	 * links, which have no fd) with the datagram fds added, or plain
	 * epoll when there are only datagrams. */
	if (s->h) {
		for (int i = 0; i < s->ndg; i++)
			if ((rc = xp_host_add_fd(s->h, xdg_fd(s->dg[i].d))) < 0) {
				fail("serve", "epoll: %s", strerror(-rc));
				goto out_free;
			}
	} else {
		epfd = epoll_create1(EPOLL_CLOEXEC);
		if (epfd < 0) {
			fail("serve", "epoll: %s", strerror(errno));
			goto out_free;
		}
		for (int i = 0; i < s->ndg; i++) {
			struct epoll_event e = { .events = EPOLLIN };

			epoll_ctl(epfd, EPOLL_CTL_ADD, xdg_fd(s->dg[i].d), &e);
		}
	}

	ret = serve_loop(s, epfd, spin_ns);
out_free:
	if (epfd >= 0)
		close(epfd);
	server_free(s);
	return ret;
}
