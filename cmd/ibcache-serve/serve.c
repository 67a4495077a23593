/* ibcache-serve: the responder (seed 004 3.3.3, 3.3.5).  One public
 * endpoint per -l URI, each with its own gfcc engine (lib/ibcache/
 * ibc_srv.h) over the shared export.  One thread: it busy-polls for --spin
 * after the last work (default 50 us where more than one CPU is online, as
 * the kernel's busy_poll advice; none on one CPU, where the spinner would
 * hold the CPU its client needs), then sleeps in epoll; a request that misbehaves
 * costs a counter and at most a rate-limited log line, never the service. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "cmd.h"
#include "core/ctl.h"
#include "core/log.h"
#include "core/spin.h"
#include "core/node.h"
#include "core/parse.h"
#include "core/stats.h"
#include "core/xtime.h"
#include "ibcache/ibc_map.h"
#include "ibcache/ibc_peers.h"
#include "ibcache/ibc_srv.h"
#include "xprt/xdev.h"
#include "xprt/xdg.h"

#define MAX_LISTEN	16
#define BATCH		64
#define TIMER_NS	(10 * XTIME_NS_PER_MS)
#define CTL_EVERY_NS	(50 * XTIME_NS_PER_MS)
#define DEFAULT_SPIN_NS	(50 * XTIME_NS_PER_US)

struct lsn {
	struct xdg *d;
	struct ibc_srv *srv;
	char uri[300];
	uint64_t send_errors;	/* datagrams the kernel would not send */
	bool drained;		/* the last poll emptied its queue */
};

struct server {
	struct ibc_export *x;
	struct lsn l[MAX_LISTEN];
	int nl;
	uint64_t started_ns;
	bool watched;			/* listeners in the epoll set */
	uint64_t spin_ns;		/* --spin: busy-poll after the last work */
	struct ibc_srv_cfg cfg;
	uint32_t recv_depth, send_depth;
	uint64_t collisions_said;	/* the export's collisions last logged */
};

static int read_pages(void *ctx, const struct gfcc_req *q, uint8_t *buf, uint64_t now,
		      uint64_t *size)
{
	return ibc_export_read(ctx, q, buf, now, size);
}

/* Files the export does not serve because their paths share an inode
 * number (ibc_map.h): said when the export finds them, once for as long
 * as their number stays the same, since a rescan finds them again. */
static void say_collisions(struct server *s)
{
	struct ibc_export_stats xs;
	const char *a, *b;

	ibc_export_get_stats(s->x, &xs);
	if (xs.collisions == s->collisions_said)
		return;
	s->collisions_said = xs.collisions;
	if (ibc_export_collision(s->x, &a, &b))
		xlog_warn("%s: %" PRIu64 " files are not served: another path has the same "
			  "inode number (FNV-1a 64 of the path), as %s and %s do; rename one of each",
			  ibc_export_root(s->x), xs.collisions, a, b);
}

/* The engine shares out what it holds per requesting host: the sender's
 * IP address (udp) or GID/LID (ud), whatever its port or QP. */
_Static_assert(XDG_HOST_MAX <= IBC_SRV_HOST_MAX, "a host key fits the engine's");
static size_t peer_host(const void *peer, uint8_t key[IBC_SRV_HOST_MAX])
{
	return xdg_addr_host(peer, key);
}

/* Sends what the engine has ready, as far as the queue takes it. */
static int send_ready(struct lsn *l, uint64_t now)
{
	struct ibc_out out[BATCH];
	struct xdg_dgram dg[BATCH];
	int work = 0;

	for (;;) {
		int k = ibc_srv_pump(l->srv, out, BATCH, now), i = 0;

		if (!k)
			break;
		for (int j = 0; j < k; j++)
			dg[j] = (struct xdg_dgram){ .to = out[j].peer, .hdr = out[j].hdr,
						    .hlen = out[j].hlen, .buf = out[j].buf,
						    .len = out[j].len, .qkey = out[j].qkey };
		while (i < k) {
			int r = xdg_send_dgrams(l->d, dg + i, k - i, 0);

			if (r > 0) {
				i += r;
				continue;
			}
			if (r == 0 || r == -EAGAIN || r == -ENOBUFS)
				break;	/* the queue is full: the rest after the next poll */
			/* this one cannot go (a firewall, no route to a requester
			 * gone): it is lost like any datagram -- its requester asks
			 * again or gives up -- and must not hold up the others */
			xlog_ratelimited(XLOG_INFO, "%s: to %s: %s", l->uri,
					 xdg_addr_str(dg[i].to), strerror(-r));
			l->send_errors++;
			i++;
		}
		work += i;
		if (i < k) {
			ibc_srv_unsent(l->srv, out + i, k - i);
			break;
		}
	}
	return work;
}

/* Receives; each request's first window goes out before the next request
 * is read, so that one requester's reply does not wait for a batch of
 * others' page reads.  Returns the work done. */
static int serve_one(struct lsn *l, uint64_t now)
{
	struct xdg_wc wc[BATCH];
	int n = xdg_poll(l->d, wc, BATCH), work = 0, rc;

	/* fewer than asked for: nothing more was waiting (epoll says when
	 * there is), so no second look before sleeping */
	l->drained = n < BATCH;
	for (int i = 0; i < n; i++) {
		if (wc[i].op != XDG_OP_RECV || wc[i].status)
			continue;
		work++;
		rc = ibc_srv_input(l->srv, wc[i].src, wc[i].data, wc[i].len, now);
		if (rc < 0 && rc != -EALREADY && rc != -ENOENT && rc != -ESTALE)
			xlog_ratelimited(XLOG_INFO, "%s: %s: %u-byte datagram dropped or refused: %s",
					 l->uri, xdg_addr_str(wc[i].src), wc[i].len, strerror(-rc));
		/* a new request's first window now; otherwise CREDITs and
		 * RESENDs are taken in and the pump waits for the end of the
		 * batch (or the next request): a RESEND written before what
		 * an earlier pump of the batch sent would name it again */
		if (rc == 0 && gfcc_kind(wc[i].data, wc[i].len) == GFCC_KIND_REQ &&
		    ibc_srv_busy(l->srv))
			work += send_ready(l, now);
	}
	return work + send_ready(l, now);
}

/* The listeners in the epoll set only while the loop sleeps: a socket
 * nobody waits on takes a datagram without the wake-up path (its lock and
 * the epoll callback), which is a tenth of a one-page round trip. */
static void watch(struct server *s, int epfd, bool on)
{
	if (s->watched == on)
		return;
	for (int i = 0; i < s->nl; i++) {
		struct epoll_event e = { .events = EPOLLIN, .data.u32 = (uint32_t)i };

		epoll_ctl(epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, xdg_fd(s->l[i].d), &e);
	}
	s->watched = on;
}

/* --- status ------------------------------------------------------------------ */

static const struct xstat_desc srv_stats[] = {
	XSTAT(struct ibc_srv_stats, requests), XSTAT(struct ibc_srv_stats, replies),
	XSTAT(struct ibc_srv_stats, short_replies), XSTAT(struct ibc_srv_stats, pages_sent),
	XSTAT(struct ibc_srv_stats, segments_sent), XSTAT(struct ibc_srv_stats, resent),
	XSTAT(struct ibc_srv_stats, bytes_sent), XSTAT(struct ibc_srv_stats, stale),
	XSTAT(struct ibc_srv_stats, not_found), XSTAT(struct ibc_srv_stats, errors),
	XSTAT(struct ibc_srv_stats, refused), XSTAT(struct ibc_srv_stats, bad_requests),
	XSTAT(struct ibc_srv_stats, dup_requests), XSTAT(struct ibc_srv_stats, credits),
	XSTAT(struct ibc_srv_stats, resend_msgs), XSTAT(struct ibc_srv_stats, fins),
	XSTAT(struct ibc_srv_stats, unknown_ctl), XSTAT(struct ibc_srv_stats, foreign),
	XSTAT(struct ibc_srv_stats, bad_ctl), XSTAT(struct ibc_srv_stats, expired),
	XSTAT(struct ibc_srv_stats, evicted), XSTAT(struct ibc_srv_stats, states),
	XSTAT(struct ibc_srv_stats, state_mem),
};
#define NSTATS (sizeof(srv_stats) / sizeof(srv_stats[0]))

static void add_stats(struct ibc_srv_stats *sum, const struct ibc_srv_stats *s)
{
	for (size_t i = 0; i < NSTATS; i++)
		*(uint64_t *)((char *)sum + srv_stats[i].off) +=
			*(const uint64_t *)((const char *)s + srv_stats[i].off);
}

static struct xnode *status_node(const struct server *s)
{
	struct xnode *root = xnode_map(), *ls, *m;
	struct ibc_srv_stats sum, one;
	struct ibc_export_stats xs;
	struct xdg_stats ds;

	if (!root)
		return NULL;
	memset(&sum, 0, sizeof(sum));
	ibc_export_get_stats(s->x, &xs);
	xnode_set_str(root, "export", ibc_export_root(s->x));
	xnode_set_u64(root, "files", xs.files);
	xnode_set_u64(root, "uptime_s", (xtime_ns() - s->started_ns) / XTIME_NS_PER_S);
	xnode_set_u64(root, "spin_us", s->spin_ns / XTIME_NS_PER_US);
	ls = xnode_set_list(root, "listeners");
	for (int i = 0; i < s->nl; i++) {
		ibc_srv_get_stats(s->l[i].srv, &one);
		add_stats(&sum, &one);
		xdg_get_stats(s->l[i].d, &ds);
		m = xnode_push_map(ls);
		xnode_set_str(m, "uri", s->l[i].uri);
		xnode_set_u64(m, "mtu", xdg_mtu(s->l[i].d));
		xnode_set_u64(m, "recv_depth", s->recv_depth);
		xnode_set_u64(m, "requests", one.requests);
		xnode_set_u64(m, "pages_sent", one.pages_sent);
		xnode_set_u64(m, "rx_dropped", ds.rx_dropped);
		xnode_set_u64(m, "send_errors", s->l[i].send_errors);
	}
	xstats_to_node(&sum, srv_stats, NSTATS, root);
	xnode_set_u64(root, "scans", xs.scans);
	xnode_set_bool(root, "rescanning", xs.rescanning);
	xnode_set_u64(root, "collisions", xs.collisions);
	xnode_set_u64(root, "skipped", xs.skipped);
	xnode_set_u64(root, "root_changes", xs.root_changes);
	return root;
}

static int ctl_handler(void *ctx, int argc, char **argv, FILE *out)
{
	const struct server *s = ctx;
	enum xfmt fmt = XFMT_TEXT;
	struct xnode *n;
	int rc;

	if (argc < 1 || strcmp(argv[0], "status")) {
		fprintf(out, "unknown command '%s' (status)\n", argc ? argv[0] : "");
		return EXIT_USAGE;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-o") && i + 1 < argc && !xfmt_parse(argv[i + 1], &fmt)) {
			i++;
			continue;
		}
		fprintf(out, "status: unexpected argument '%s'\n", argv[i]);
		return EXIT_USAGE;
	}
	if (!(n = status_node(s))) {
		fprintf(out, "out of memory\n");
		return EXIT_FAIL;
	}
	rc = xemit(out, n, fmt);
	xnode_free(n);
	return rc ? EXIT_FAIL : EXIT_OK;
}

/* --- setup -------------------------------------------------------------------- */

static int add_listener(struct server *s, const char *arg, uint32_t mtu)
{
	struct xdg_opts o = { .mtu = mtu, .rx_depth = s->recv_depth, .tx_depth = s->send_depth };
	struct lsn *l = &s->l[s->nl];
	struct ibc_srv_cfg c = s->cfg;
	char err[512];
	struct xuri u;

	if (xuri_parse(arg, IBC_DEFAULT_PORT, &u, err, sizeof(err)) < 0)
		return usage_error("-l: %s", err);
	if (u.scheme != XURI_UDP && u.scheme != XURI_UD)
		return usage_error("-l %s: listen on udp://HOST:PORT or ud://HOST:PORT", arg);
	if (u.scheme == XURI_UDP) {
		if (!o.mtu)
			o.mtu = GFCC_MTU_MAX;
		/* requests and control messages are small; replies are not */
		o.rx_size = 4096;
	}
	if (xdev_require(&u, err, sizeof(err)) < 0)
		return fail("%s", err);
	l->d = xdg_open(&u, &o, err, sizeof(err));
	if (!l->d)
		return fail("%s", err);
	if (xdg_mtu(l->d) < GFCC_MTU_MIN)
		return fail("%s: MTU %u is below gfcc's %u", arg, xdg_mtu(l->d), GFCC_MTU_MIN);
	c.flavour = u.scheme == XURI_UD ? GFCC_UD : GFCC_UDP;
	c.mtu = xdg_mtu(l->d);
	c.host = peer_host;
	l->srv = ibc_srv_new(&c, read_pages, s->x);
	if (!l->srv)
		return fail("%s: out of memory", arg);
	u.port = xdg_port(l->d);
	xuri_format(&u, l->uri, sizeof(l->uri));
	s->nl++;
	printf("listening %s\n", l->uri);
	return EXIT_OK;
}

static void server_free(struct server *s)
{
	for (int i = 0; i < s->nl; i++) {
		ibc_srv_free(s->l[i].srv);
		xdg_close(s->l[i].d);
	}
	ibc_export_close(s->x);
}

enum { OPT_MTU = 256, OPT_RECV, OPT_SEND, OPT_STATES, OPT_MEM, OPT_TTL, OPT_RESIDENT, OPT_SPIN,
       OPT_NAME, OPT_CTL };

/* What serve's command line asks for (the engine's limits go straight into
 * the server). */
struct serve_opts {
	const char *listen[MAX_LISTEN], *root, *name, *ctlp;
	int nlisten;
	uint32_t mtu;
	uint64_t spin_ns;		/* UINT64_MAX: the default for this machine */
	bool verbose;
	struct ibc_export_opts xo;
};

/* The command line into so and s's limits.  -1 to go on, or the exit
 * status (a usage error, --help). */
static int serve_args(int argc, char **argv, struct serve_opts *so, struct server *s)
{
	static const struct option lo[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "export", required_argument, NULL, 'e' },
		{ "mtu", required_argument, NULL, OPT_MTU },
		{ "recv-depth", required_argument, NULL, OPT_RECV },
		{ "send-depth", required_argument, NULL, OPT_SEND },
		{ "max-states", required_argument, NULL, OPT_STATES },
		{ "max-mem", required_argument, NULL, OPT_MEM },
		{ "ttl", required_argument, NULL, OPT_TTL },
		{ "resident-only", no_argument, NULL, OPT_RESIDENT },
		{ "spin", required_argument, NULL, OPT_SPIN },
		{ "name", required_argument, NULL, OPT_NAME },
		{ "ctl", required_argument, NULL, OPT_CTL },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const char *const os = "l:e:vh";
	const char *es;
	uint64_t v;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, os, lo, NULL)) != -1) {
		switch (c) {
		case 'l':
			if (so->nlisten == MAX_LISTEN)
				return usage_error("at most %d -l", MAX_LISTEN);
			so->listen[so->nlisten++] = optarg;
			break;
		case 'e':
			so->root = optarg;
			break;
		case OPT_MTU:
			if (xparse_size(optarg, GFCC_MTU_MIN, GFCC_MTU_MAX, &v, &es) < 0)
				return usage_error("--mtu: '%s' %s (%u..%u)", optarg, es, GFCC_MTU_MIN,
						   GFCC_MTU_MAX);
			so->mtu = (uint32_t)v;
			break;
		case OPT_RECV:
		case OPT_SEND:
			if (xparse_u64(optarg, 16, 65536, &v, &es) < 0)
				return usage_error("--%s: '%s' %s (16..65536)",
						   c == OPT_RECV ? "recv-depth" : "send-depth", optarg, es);
			*(c == OPT_RECV ? &s->recv_depth : &s->send_depth) = (uint32_t)v;
			break;
		case OPT_STATES:
			if (xparse_u64(optarg, 1, 1u << 20, &v, &es) < 0)
				return usage_error("--max-states: '%s' %s (1..1048576)", optarg, es);
			s->cfg.max_states = (uint32_t)v;
			break;
		case OPT_MEM:
			/* a full request's reply must fit, or every one is refused */
			if (xparse_size(optarg, IBC_SRV_MEM_MIN, 1ull << 40, &s->cfg.max_mem, &es) < 0)
				return usage_error("--max-mem: '%s' %s (%u..1T: at least one full reply, "
						   "1 MiB of pages and its %u-byte header)", optarg, es,
						   IBC_SRV_MEM_MIN, GFCC_RES_LEN);
			break;
		case OPT_TTL:
			if (xparse_duration(optarg, XTIME_NS_PER_MS, XTIME_NS_PER_MS, 3600 * XTIME_NS_PER_S,
					    &s->cfg.ttl_ns, &es) < 0)
				return usage_error("--ttl: '%s' %s (1ms..1h; a bare number is ms)",
						   optarg, es);
			break;
		case OPT_RESIDENT:
			so->xo.resident_only = true;
			break;
		case OPT_SPIN:
			if (xparse_duration(optarg, XTIME_NS_PER_US, 0, XTIME_NS_PER_S, &so->spin_ns,
					    &es) < 0)
				return usage_error("--spin: '%s' %s (0..1s; a bare number is us)", optarg, es);
			break;
		case OPT_NAME:
			so->name = optarg;
			break;
		case OPT_CTL:
			so->ctlp = optarg;
			break;
		case 'v':
			so->verbose = true;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			return cli_bad_option(PROG, NULL, os, argv);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!so->root)
		return usage_error("no export given (-e ROOT)");
	if (so->name && so->ctlp)
		return usage_error("--name and --ctl both name the control socket: give one");
	if (so->name && (!*so->name || strchr(so->name, '/')))
		return usage_error("--name: '%s' is not a plain name", so->name);
	if (!so->nlisten)
		so->listen[so->nlisten++] = "udp://0.0.0.0:7480";
	return -1;
}

/* Requests answered until SIGINT/SIGTERM/SIGHUP: each listener in turn,
 * the engines' timers every TIMER_NS, the control socket every
 * CTL_EVERY_NS; after --spin without work, asleep in epoll until a
 * datagram, a status request or the next timer. */
static void serve_loop(struct server *s, struct xctl *ctl, int epfd)
{
	uint64_t next_timer = 0, next_ctl = 0;
	struct xspin sp;

	xspin_init(&sp, s->spin_ns, xtime_ns());

	while (!cli_stop_requested) {
		uint64_t now = xtime_ns(), wake = UINT64_MAX;
		struct epoll_event ev[MAX_LISTEN + 1];
		int work = 0, ms, n;
		bool busy = false;

		for (int i = 0; i < s->nl; i++) {
			work += serve_one(&s->l[i], now);
			busy |= ibc_srv_busy(s->l[i].srv);
		}
		if (now >= next_timer) {
			for (int i = 0; i < s->nl; i++)
				ibc_srv_timer(s->l[i].srv, now);
			say_collisions(s);
			next_timer = now + TIMER_NS;
		}
		if (ctl && now >= next_ctl) {
			xctl_poll(ctl, ctl_handler, s);
			next_ctl = now + CTL_EVERY_NS;
		}
		if (xspin_again(&sp, now, work || busy)) {
			/* without --spin, a round that emptied every socket
			 * may sleep at once */
			bool drained = (work || busy) && !busy && !s->spin_ns;

			for (int i = 0; drained && i < s->nl; i++)
				drained &= s->l[i].drained;
			if (!drained)
				continue;
		}
		/* asleep until a datagram, a status request or the timer */
		for (int i = 0; i < s->nl; i++) {
			uint64_t t = ibc_srv_timer(s->l[i].srv, now);

			if (t < wake)
				wake = t;
		}
		ms = wake == UINT64_MAX ? 1000 : wake <= now ? 0 :
			(int)((wake - now + XTIME_NS_PER_MS - 1) / XTIME_NS_PER_MS);
		if (ms > 1000)
			ms = 1000;
		watch(s, epfd, true);
		n = epoll_wait(epfd, ev, MAX_LISTEN + 1, ms);
		for (int i = 0; i < n; i++)
			if (ev[i].data.u32 == UINT32_MAX && ctl) {
				xctl_poll(ctl, ctl_handler, s);
				next_ctl = xtime_ns() + CTL_EVERY_NS;
			}
		/* the first poll after a sleep is work, but not spin-worthy
		 * unless something came */
		xspin_woke(&sp, xtime_ns(), n > 0);
		if (n > 0 && s->spin_ns)
			watch(s, epfd, false);	/* spinning again */
	}
}

int cmd_serve(int argc, char **argv)
{
	static struct server srv;
	struct server *s = &srv;
	struct serve_opts so = { .spin_ns = UINT64_MAX };
	int c, epfd = -1, ret = EXIT_FAIL;
	struct xctl *ctl = NULL;
	char err[512], path[256];

	s->recv_depth = 512;
	s->send_depth = 1024;
	if ((c = serve_args(argc, argv, &so, s)) >= 0)
		return c;
	s->x = ibc_export_open(so.root, &so.xo, err, sizeof(err));
	if (!s->x)
		return fail("-e %s", err);
	say_collisions(s);
	/* a supervisor (or a test) that has read the "listening" lines may
	 * stop us or ask for status at once: the handlers and the control
	 * socket come first, the lines go out after them */
	cli_stop_handlers();
	for (int i = 0; i < so.nlisten; i++)
		if ((c = add_listener(s, so.listen[i], so.mtu)) != EXIT_OK) {
			server_free(s);
			return c;
		}
	s->started_ns = xtime_ns();

	c = ctl_path(so.name, so.ctlp, path, sizeof(path));
	if (c == 0)
		ctl = xctl_listen(path, err, sizeof(err));
	if (!ctl && (so.name || so.ctlp)) {
		/* asked for by name: another server there is a mistake (and
		 * the listening lines, not out yet, never go: nothing listens) */
		__fpurge(stdout);
		fail("%s", c ? strerror(-c) : err);
		goto out;
	} else if (!ctl) {
		/* the default one: serving does not depend on it; say so */
		fprintf(stderr, PROG ": no control socket (status will not reach this server): %s%s\n",
			c ? strerror(-c) : err, c ? "" : "; give --name");
	} else if (so.verbose)
		fprintf(stderr, PROG ": control socket %s\n", path);
	fflush(stdout);

	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0) {
		fail("epoll: %s", strerror(errno));
		goto out;
	}
	if (ctl) {
		struct epoll_event e = { .events = EPOLLIN, .data.u32 = UINT32_MAX };

		epoll_ctl(epfd, EPOLL_CTL_ADD, xctl_fd(ctl), &e);
	}
	s->spin_ns = so.spin_ns != UINT64_MAX ? so.spin_ns :
		     sysconf(_SC_NPROCESSORS_ONLN) > 1 ? DEFAULT_SPIN_NS : 0;
	serve_loop(s, ctl, epfd);
	ret = EXIT_OK;
out:
	if (epfd >= 0)
		close(epfd);
	xctl_close(ctl);
	server_free(s);
	return ret;
}
