/* rtrs-server serve: options and config, the exports, the listeners, the
 * control socket, and the loop -- one thread, busy-polling for a moment
 * after the last work, then sleeping in epoll until the engine's next timer. */
#include "cmd.h"
#include "core/ctl.h"
#include "core/log.h"
#include "core/spin.h"
#include "core/node.h"
#include "core/parse.h"
#include "core/xtime.h"
#include "xprt/xdev.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#define SPIN_NS		50000ull	/* busy-poll this long after the last work */
#define CTL_CHECK_NS	(50 * XTIME_NS_PER_MS)	/* control socket, while busy */

struct serve_state {
	struct rtrs_srv *srv;
	struct rnbd_srv *rnbd;
	struct srv_conf *c;
};

static struct rtrs_srv_sess *find_sess(struct rtrs_srv *srv, const char *name, FILE *out)
{
	for (struct rtrs_srv_sess *s = rtrs_srv_sess_next(srv, NULL); s;
	     s = rtrs_srv_sess_next(srv, s))
		if (!strcmp(rtrs_srv_sess_name(s), name))
			return s;
	fprintf(out, "no session '%s'\n", name);
	return NULL;
}

/* "disconnect SESSION [PATH]": one path (its number in status, or its
 * peer ADDR:PORT), or all of them -- the kernel's sysfs disconnect. */
static int ctl_disconnect(struct serve_state *st, int argc, char **argv, FILE *out)
{
	struct rtrs_srv_sess *s = find_sess(st->srv, argv[1], out);
	struct rtrs_srv_path_info pi;
	unsigned n, done = 0;
	const char *e;
	uint64_t idx;

	if (!s)
		return EXIT_FAIL;
	n = rtrs_srv_sess_paths(s);
	for (unsigned i = 0; i < n; i++) {
		if (rtrs_srv_path_get(s, i, &pi))
			continue;
		if (argc == 3 && strcmp(pi.peer, argv[2]) &&
		    (xparse_u64(argv[2], 0, 1000000, &idx, &e) || idx != i))
			continue;
		if (rtrs_srv_path_disconnect(s, i) == 0) {
			fprintf(out, "path %u of session %s (%s): disconnected\n", i, argv[1], pi.peer);
			done++;
		}
	}
	if (!done) {
		fprintf(out, argc == 3 ? "session %s has no path %s to disconnect\n" :
			"session %s has no path to disconnect\n", argv[1], argc == 3 ? argv[2] : "");
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

/* "force-close SESSION DEVICE": a device (export name or id) closed for
 * that session, as the kernel's rnbd-server force_close. */
static int ctl_force_close(struct serve_state *st, char **argv, FILE *out)
{
	struct rtrs_srv_sess *s = find_sess(st->srv, argv[1], out);
	struct rnbd_dev_info di;
	const char *e;
	uint64_t id;
	bool by_id;

	if (!s)
		return EXIT_FAIL;
	by_id = !xparse_u64(argv[2], 0, UINT32_MAX, &id, &e);
	for (unsigned i = 0; rnbd_srv_sess_dev_get(s, i, &di) == 0; i++) {
		if (by_id ? di.device_id != id : strcmp(di.export, argv[2]))
			continue;
		fprintf(out, "device %u (%s) of session %s: closed\n", di.device_id, di.export,
			argv[1]);
		rnbd_srv_sess_dev_close(s, di.device_id);
		return EXIT_OK;
	}
	fprintf(out, "session %s has no device %s open\n", argv[1], argv[2]);
	return EXIT_FAIL;
}

/* The control socket: "status [text|yaml|json]", "disconnect SESSION
 * [PATH]", "force-close SESSION DEVICE". */
static int ctl_handler(void *ctx, int argc, char **argv, FILE *out)
{
	struct serve_state *st = ctx;
	enum xfmt fmt = XFMT_TEXT;
	struct xnode *root;
	int rc;

	if (!strcmp(argv[0], "disconnect") && (argc == 2 || argc == 3))
		return ctl_disconnect(st, argc, argv, out);
	if (!strcmp(argv[0], "force-close") && argc == 3)
		return ctl_force_close(st, argv, out);
	if (strcmp(argv[0], "status")) {
		fprintf(out, "unknown command '%s' (status, disconnect, force-close)\n", argv[0]);
		return EXIT_USAGE;
	}
	if (argc > 1 && xfmt_parse(argv[1], &fmt) < 0) {
		fprintf(out, "unknown output format '%s' (text, yaml or json)\n", argv[1]);
		return EXIT_USAGE;
	}
	root = status_node(st->srv, st->rnbd, st->c);
	if (!root) {
		fprintf(out, "out of memory\n");
		return EXIT_FAIL;
	}
	rc = xemit(out, root, fmt);
	xnode_free(root);
	return rc < 0 ? EXIT_FAIL : EXIT_OK;
}

/* The command line into cl, the config file's name into *config.  EXIT_OK,
 * -1 after --help, or a usage error. */
static int parse_cmdline(int argc, char **argv, const char *cmd, struct srv_conf *cl,
			 const char **config)
{
	enum { O_QD = 256, O_CHUNK, O_INV, O_ALLOW, O_HBI, O_HBM, O_CTL, O_IOT, O_SEARCH };
	static const struct option lo[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "export", required_argument, NULL, 'e' },
		{ "config", required_argument, NULL, 'c' },
		{ "queue-depth", required_argument, NULL, O_QD },
		{ "chunk-size", required_argument, NULL, O_CHUNK },
		{ "always-invalidate", required_argument, NULL, O_INV },
		{ "allow", required_argument, NULL, O_ALLOW },
		{ "hb-interval", required_argument, NULL, O_HBI },
		{ "hb-missed", required_argument, NULL, O_HBM },
		{ "ctl", required_argument, NULL, O_CTL },
		{ "io-threads", required_argument, NULL, O_IOT },
		{ "dev-search-path", required_argument, NULL, O_SEARCH },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const char *const os = "l:e:c:vh";
	const char *es;
	uint64_t v;
	bool b;
	int o, rc;

	opterr = 0;
	optind = 1;
	while ((o = getopt_long(argc, argv, os, lo, NULL)) != -1) {
		rc = EXIT_OK;
		switch (o) {
		case 'l':
			rc = conf_add_listen(cl, cmd, "-l", optarg);
			break;
		case 'e':
			rc = conf_add_export(cl, cmd, "-e", optarg);
			break;
		case 'c':
			if (*config)
				return usage_error(cmd, "-c given twice");
			*config = optarg;
			break;
		case O_QD:
			if (xparse_u64(optarg, 1, RTRS_MAX_SESS_QUEUE_DEPTH, &v, &es) < 0)
				return usage_error(cmd, "--queue-depth: '%s' %s (1..65535)", optarg, es);
			cl->queue_depth = (uint32_t)v;
			break;
		case O_CHUNK:
			if (xparse_size(optarg, RTRS_MIN_CHUNK_SIZE, 1u << 28, &v, &es) < 0)
				return usage_error(cmd, "--chunk-size: '%s' %s (8k..256M)", optarg, es);
			cl->chunk_size = (uint32_t)v;
			break;
		case O_INV:
			if (xparse_bool(optarg, &b, &es) < 0)
				return usage_error(cmd, "--always-invalidate: '%s' is not on or off",
						   optarg);
			cl->always_invalidate = b;
			break;
		case O_ALLOW:
			rc = conf_add_allow(cl, cmd, "--allow", optarg);
			break;
		case O_HBI:
			if (xparse_duration(optarg, XTIME_NS_PER_MS, 10 * XTIME_NS_PER_MS,
					    3600000 * XTIME_NS_PER_MS, &v, &es) < 0)
				return usage_error(cmd, "--hb-interval: '%s' %s (10ms..1h; a bare "
						   "number is ms)", optarg, es);
			cl->hb_interval_ms = (uint32_t)(v / XTIME_NS_PER_MS);
			break;
		case O_HBM:
			if (xparse_u64(optarg, 1, 1000, &v, &es) < 0)
				return usage_error(cmd, "--hb-missed: '%s' %s (1..1000)", optarg, es);
			cl->hb_missed = (uint32_t)v;
			break;
		case O_IOT:
			if (xparse_u64(optarg, 0, MAX_IO_THREADS, &v, &es) < 0)
				return usage_error(cmd, "--io-threads: '%s' %s (0..%d)", optarg, es,
						   MAX_IO_THREADS);
			cl->io_threads = (int)v;
			break;
		case O_SEARCH:
			if (strlen(optarg) >= sizeof(cl->search) || !optarg[0])
				return usage_error(cmd, "--dev-search-path: a directory of 1 to %zu bytes",
						   sizeof(cl->search) - 1);
			snprintf(cl->search, sizeof(cl->search), "%s", optarg);
			break;
		case O_CTL:
			if (strlen(optarg) >= sizeof(cl->ctl) || !optarg[0])
				return usage_error(cmd, "--ctl: a socket path of 1 to %zu bytes",
						   sizeof(cl->ctl) - 1);
			snprintf(cl->ctl, sizeof(cl->ctl), "%s", optarg);
			break;
		case 'v':
			cl->verbose = true;
			break;
		case 'h':
			cmd_usage(stdout, "serve");
			return -1;
		default:
			return bad_option(cmd, os, argv);
		}
		if (rc)
			return rc;
	}
	if (optind < argc)
		return usage_error(cmd, "unexpected argument '%s' (listeners go with -l, exports "
				   "with -e)", argv[optind]);
	return EXIT_OK;
}

/* The config (already in c) and then the command line cl: lists add up,
 * and what the command line sets wins. */
static int merge_cmdline(struct srv_conf *c, const struct srv_conf *cl, const char *cmd)
{
	int rc;

	for (unsigned i = 0; i < cl->nlisten; i++) {
		if (c->nlisten >= MAX_LISTEN)
			return usage_error(cmd, "at most %d listeners", MAX_LISTEN);
		c->listen[c->nlisten++] = cl->listen[i];
	}
	for (unsigned i = 0; i < cl->nexports; i++) {
		char spec[4500];

		snprintf(spec, sizeof(spec), "%s=%s%s", cl->exports[i].name, cl->exports[i].path,
			 cl->exports[i].ro ? ":ro" : "");
		if ((rc = conf_add_export(c, cmd, "-e", spec)))
			return rc;
	}
	for (unsigned i = 0; i < cl->nallow; i++) {
		if (c->nallow >= MAX_ALLOW)
			return usage_error(cmd, "--allow: at most %d entries", MAX_ALLOW);
		c->allow[c->nallow++] = cl->allow[i];
	}
	if (cl->queue_depth)
		c->queue_depth = cl->queue_depth;
	if (cl->chunk_size)
		c->chunk_size = cl->chunk_size;
	if (cl->always_invalidate >= 0)
		c->always_invalidate = cl->always_invalidate;
	if (cl->io_threads >= 0)
		c->io_threads = cl->io_threads;
	if (cl->hb_interval_ms)
		c->hb_interval_ms = cl->hb_interval_ms;
	if (cl->hb_missed)
		c->hb_missed = cl->hb_missed;
	if (cl->ctl[0])
		snprintf(c->ctl, sizeof(c->ctl), "%s", cl->ctl);
	if (cl->search[0])
		snprintf(c->search, sizeof(c->search), "%s", cl->search);
	c->verbose = cl->verbose;
	return EXIT_OK;
}

/* Defaults, and the checks that need everything. */
static int finish_conf(struct srv_conf *c, const char *cmd)
{
	if (!c->nexports && !c->search[0])
		return usage_error(cmd, "nothing to export: give -e NAME=PATH[:ro] or "
				   "--dev-search-path DIR (or exports: in the config)");
	if (!c->queue_depth)
		c->queue_depth = RTRS_DEFAULT_QUEUE_DEPTH;
	if (!c->chunk_size)
		c->chunk_size = RTRS_DEFAULT_CHUNK_SIZE;
	if (c->always_invalidate < 0)
		c->always_invalidate = 1;	/* the kernel's default */
	if (c->io_threads < 0)
		c->io_threads = DEFAULT_IO_THREADS;
	if (rtrs_check_geometry(c->queue_depth, c->chunk_size) < 0)
		return usage_error(cmd, "--queue-depth %u with --chunk-size %u: the chunk size must "
				   "be a power of two of at least 8k, and queue depth x chunk size "
				   "at most 256M (the 28-bit immediate)", c->queue_depth, c->chunk_size);
	if (!c->nlisten) {
		/* rdma when a device is active, else tcp, on the kernel's
		 * port, on the IPv6 wildcard, which takes IPv4 clients too
		 * (the kernel's rtrs-server listens the same way) */
		c->listen[0] = (struct xuri){ .scheme = XURI_AUTO, .host = "::",
					      .port = RTRS_DEFAULT_PORT };
		c->nlisten = 1;
		c->listen_default = true;
	}
	return EXIT_OK;
}

/* The command line (cl) and config (c) merged into c; c->exports is the
 * caller's to free whatever happens. */
static int parse(int argc, char **argv, const char *cmd, struct srv_conf *c)
{
	struct srv_conf cl = { .always_invalidate = -1, .io_threads = -1 };
	const char *config = NULL;
	int rc;

	*c = (struct srv_conf){ .always_invalidate = -1, .io_threads = -1 };
	if ((rc = parse_cmdline(argc, argv, cmd, &cl, &config)) == EXIT_OK &&
	    (!config || (rc = conf_load(c, cmd, config)) == EXIT_OK) &&
	    (rc = merge_cmdline(c, &cl, cmd)) == EXIT_OK)
		rc = finish_conf(c, cmd);
	free(cl.exports);
	return rc;
}

static int start(struct serve_state *st, struct srv_conf *c, struct xctl **ctl)
{
	struct rtrs_srv_opts o;
	struct rtrs_srv_ops ops = { 0 };
	char err[512], why[256], name[300];
	int rc;

	st->rnbd = rnbd_srv_new(c->chunk_size - RTRS_MAX_HDR_SIZE, err, sizeof(err));
	if (!st->rnbd)
		return fail("%s", err);
	for (unsigned i = 0; i < c->nexports; i++) {
		const struct export_spec *e = &c->exports[i];

		rc = rnbd_srv_export(st->rnbd, e->name, e->path, e->ro, err, sizeof(err));
		if (rc < 0)
			return fail("export %s: %s", e->name, err);
	}
	if (c->search[0]) {
		struct stat sb;

		if (!strstr(c->search, "%SESSNAME%") &&
		    (stat(c->search, &sb) < 0 || !S_ISDIR(sb.st_mode)))
			return fail("--dev-search-path %s: not a directory", c->search);
		if (rnbd_srv_set_search_path(st->rnbd, c->search) < 0)
			return fail("out of memory");
	}
	if (rnbd_srv_set_io_threads(st->rnbd, (unsigned)c->io_threads, err, sizeof(err)) < 0)
		return fail("%s", err);
	rtrs_srv_opts_default(&o);
	o.queue_depth = c->queue_depth;
	o.chunk_size = c->chunk_size;
	o.always_invalidate = c->always_invalidate;
	if (c->hb_interval_ms)
		o.hb_interval_ms = c->hb_interval_ms;
	if (c->hb_missed)
		o.hb_missed_max = c->hb_missed;
	o.allow = conf_allow;
	o.allow_ctx = c;
	rnbd_srv_rtrs_ops(&ops);
	st->srv = rtrs_srv_new(&o, &ops, st->rnbd, err, sizeof(err));
	if (!st->srv)
		return fail("%s", err);
	for (unsigned i = 0; i < c->nlisten; i++) {
		struct xuri u = c->listen[i];

		if (u.scheme == XURI_AUTO) {
			xaddr_resolve_auto(&u, false, why, sizeof(why));
			if (c->verbose)
				fprintf(stderr, PROG ": %s\n", why);
		}
		if (xdev_require(&u, err, sizeof(err)) < 0)
			return fail("%s", err);
		rc = rtrs_srv_listen(st->srv, &u, err, sizeof(err));
		if ((rc == -EAFNOSUPPORT || rc == -EADDRNOTAVAIL) && c->listen_default) {
			/* a host without IPv6: the IPv4 wildcard */
			snprintf(u.host, sizeof(u.host), "0.0.0.0");
			rc = rtrs_srv_listen(st->srv, &u, err, sizeof(err));
		}
		if (rc < 0)
			return fail("%s", err);
		xuri_format(rtrs_srv_listener_uri(st->srv, (unsigned)rc), name, sizeof(name));
		printf("listening %s\n", name);
	}
	if (!c->ctl[0] && (rc = xctl_default_path(CTL_NAME, c->ctl, sizeof(c->ctl))) < 0)
		return fail("control socket: %s", strerror(-rc));
	*ctl = xctl_listen(c->ctl, err, sizeof(err));
	if (!*ctl) {
		/* a server that did not start says nothing of listening */
		__fpurge(stdout);
		return fail(errno == EADDRINUSE ? "%s (another rtrs-server? give this one --ctl PATH)"
			    : "%s", err);
	}
	/* whoever read the "listening" lines may ask for status at once;
	 * lines nobody can read are a server nobody finds: it does not start */
	int e = cli_stdout_error();

	if (e)
		return fail("standard output: %s: the 'listening' lines are lost", strerror(e));
	return EXIT_OK;
}

static int loop(struct serve_state *st, struct xctl *ctl)
{
	struct epoll_event ev = { .events = EPOLLIN }, evs[4];
	uint64_t last_ctl = 0;
	int ep = epoll_create1(EPOLL_CLOEXEC), ret = EXIT_OK;
	struct xspin sp;

	if (ep < 0)
		return fail("epoll: %s", strerror(errno));
	ev.data.u32 = 0;
	epoll_ctl(ep, EPOLL_CTL_ADD, rtrs_srv_fd(st->srv), &ev);
	ev.data.u32 = 1;
	epoll_ctl(ep, EPOLL_CTL_ADD, xctl_fd(ctl), &ev);
	if (rnbd_srv_fd(st->rnbd) >= 0) {
		ev.data.u32 = 2;
		epoll_ctl(ep, EPOLL_CTL_ADD, rnbd_srv_fd(st->rnbd), &ev);
	}
	xspin_init(&sp, SPIN_NS, xtime_ns());
	while (!cli_stop_requested) {
		uint64_t now = xtime_ns(), next;
		int rc = rtrs_srv_poll(st->srv, now), n, tmo;

		if (rc < 0) {
			ret = fail("%s", strerror(-rc));
			break;
		}
		/* what the IO threads finished, answered in one batch */
		if (rnbd_srv_pending(st->rnbd)) {
			rtrs_srv_batch(st->srv, true);
			rc += rnbd_srv_poll(st->rnbd);
			rtrs_srv_batch(st->srv, false);
		}
		/* status questions are answered even under load */
		if (now - last_ctl >= CTL_CHECK_NS) {
			struct pollfd p = { xctl_fd(ctl), POLLIN, 0 };

			last_ctl = now;
			if (poll(&p, 1, 0) > 0)
				xctl_poll(ctl, ctl_handler, st);
		}
		if (xspin_again(&sp, now, rc > 0) || rtrs_srv_arm(st->srv))
			continue;
		next = rtrs_srv_next_timer(st->srv);
		tmo = next <= now ? 0 : next - now >= 1000 * XTIME_NS_PER_MS ? 1000 :
			(int)((next - now + XTIME_NS_PER_MS - 1) / XTIME_NS_PER_MS);
		n = epoll_wait(ep, evs, 4, tmo);
		for (int i = 0; i < n; i++)
			if (evs[i].data.u32 == 1)
				xctl_poll(ctl, ctl_handler, st);
		xspin_woke(&sp, xtime_ns(), true);
	}
	close(ep);
	return ret;
}

int cmd_serve(int argc, char **argv)
{
	const char *cmd = strcmp(argv[0], "serve") ? NULL : "serve";
	struct srv_conf c;
	struct serve_state st = { .c = &c };
	struct xctl *ctl = NULL;
	int rc = parse(argc, argv, cmd, &c);

	if (rc) {
		free(c.exports);
		return rc < 0 ? EXIT_OK : rc;
	}
	if (c.verbose && xlog_level() < XLOG_INFO)
		xlog_set_level(XLOG_INFO);
	cli_stop_handlers();
	rc = start(&st, &c, &ctl);
	if (rc == EXIT_OK)
		rc = loop(&st, ctl);
	xctl_close(ctl);
	if (st.rnbd)
		rnbd_srv_drain(st.rnbd);	/* workers write into the server's chunks */
	rtrs_srv_free(st.srv);
	rnbd_srv_free(st.rnbd);
	free(c.exports);
	return rc;
}
