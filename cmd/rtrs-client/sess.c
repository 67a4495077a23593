/* What read, write and bench share: the session options and config file,
 * opening the session and the device, the control socket, the loop. */
#include "cmd.h"
#include "core/conf.h"
#include "core/log.h"
#include "core/parse.h"
#include "core/xtime.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

void sess_opts_init(struct sess_opts *o)
{
	memset(o, 0, sizeof(*o));
	rtrs_clt_opts_default(&o->ro);
	/* a command that a script runs must end when the server is gone;
	 * a server that is back within this is reconnected to */
	o->ro.down_timeout_ns = SESS_DOWN_TIMEOUT_NS;
	o->access = RNBD_ACCESS_RW;
}

static int parse_access(const char *s, enum rnbd_access_mode *m)
{
	if (!strcmp(s, "ro"))
		*m = RNBD_ACCESS_RO;
	else if (!strcmp(s, "rw"))
		*m = RNBD_ACCESS_RW;
	else if (!strcmp(s, "migration"))
		*m = RNBD_ACCESS_MIGRATION;
	else
		return -1;
	return 0;
}

static int add_path(const char *cmd, const char *arg, struct sess_opts *o)
{
	char err[256];
	struct xuri u;

	if (xuri_parse(arg, RTRS_DEFAULT_PORT, &u, err, sizeof(err)) < 0)
		return usage_error(cmd, "-p: %s", err);
	if (u.scheme != XURI_RDMA && u.scheme != XURI_TCP)
		return usage_error(cmd, "-p: '%s': an RTRS path is rdma://HOST[:PORT] or "
				   "tcp://HOST[:PORT]", arg);
	if (o->npaths >= MAX_PATHS)
		return usage_error(cmd, "-p: at most %d paths", MAX_PATHS);
	o->paths[o->npaths++] = u;
	return EXIT_OK;
}

/* Numbers of the session options, from the command line or the config. */
static const char *num_opt(int c, const char *arg, struct sess_opts *o)
{
	const char *e = NULL;
	uint64_t v, ns;
	int64_t i;

	switch (c) {
	case OPT_RECONNECT_DELAY:
		if (xparse_duration(arg, 1000000ull, 0, 3600 * 1000000000ull, &ns, &e) == 0) {
			o->ro.reconnect_delay_ms = (uint32_t)(ns / 1000000ull);
			o->delay_set = true;
		}
		break;
	case OPT_MAX_RECONNECT:
		if (xparse_i64(arg, -1, 9999, &i, &e) == 0) {
			o->ro.max_reconnect_attempts = (int32_t)i;
			o->attempts_set = true;
		}
		break;
	case OPT_CONNECTIONS:
		if (xparse_u64(arg, 1, RTRS_CLT_MAX_CONNECTIONS, &v, &e) == 0) {
			o->ro.connections = (uint32_t)v;
			o->conns_set = true;
		}
		break;
	case OPT_HB_INTERVAL:
		if (xparse_duration(arg, 1000000ull, 1000000ull, 3600 * 1000000000ull, &ns, &e) == 0) {
			o->ro.hb_interval_ms = (uint32_t)(ns / 1000000ull);
			o->hbi_set = true;
		}
		break;
	case OPT_HB_MISSED:
		if (xparse_u64(arg, 1, 1000, &v, &e) == 0) {
			o->ro.hb_missed_max = (uint32_t)v;
			o->hbm_set = true;
		}
		break;
	case OPT_TIMEOUT:
		if (xparse_duration(arg, 1000000000ull, 1000000ull, 3600 * 1000000000ull, &ns, &e) == 0) {
			o->ro.timeout_ns = ns;
			o->timeout_set = true;
		}
		break;
	case OPT_DOWN_TIMEOUT:
		if (!strcmp(arg, "-1") || !strcmp(arg, "forever")) {
			o->ro.down_timeout_ns = RTRS_CLT_FOREVER;
			o->down_set = true;
		} else if (xparse_duration(arg, 1000000000ull, 0, 365ull * 86400 * 1000000000ull,
					   &ns, &e) == 0) {
			o->ro.down_timeout_ns = ns;
			o->down_set = true;
		}
		break;
	}
	return e;
}

static const char *opt_name(int c)
{
	switch (c) {
	case OPT_RECONNECT_DELAY: return "--reconnect-delay";
	case OPT_MAX_RECONNECT: return "--max-reconnect-attempts";
	case OPT_CONNECTIONS: return "--connections";
	case OPT_HB_INTERVAL: return "--hb-interval";
	case OPT_HB_MISSED: return "--hb-missed";
	case OPT_TIMEOUT: return "--timeout";
	case OPT_DOWN_TIMEOUT: return "--down-timeout";
	}
	return "?";
}

int sess_opt(const char *cmd, int c, const char *arg, struct sess_opts *o)
{
	const char *e;

	switch (c) {
	case 's':
		if (rtrs_check_pathname(arg))
			return usage_error(cmd, "-s: '%s': a session name is 1 to 254 characters "
					   "without '/' or '.'", arg);
		o->session = arg;
		return 1;
	case 'p':
		return add_path(cmd, arg, o) == EXIT_OK ? 1 : EXIT_USAGE;
	case 'd':
		o->device = arg;
		return 1;
	case 'c':
		o->config = arg;
		return 1;
	case 'q':
		o->quiet = true;
		return 1;
	case 'v':
		o->verbose = true;
		return 1;
	case OPT_PROGRESS:
		o->progress = o->progress_set = true;
		return 1;
	case OPT_CTL:
		o->ctl = arg;
		return 1;
	case OPT_POLICY:
		if (rtrs_mp_policy_parse(arg, &o->ro.policy))
			return usage_error(cmd, "--policy: '%s' is not rr, min-inflight or min-latency",
					   arg);
		o->policy_set = true;
		return 1;
	case OPT_ACCESS:
		if (parse_access(arg, &o->access))
			return usage_error(cmd, "--access: '%s' is not ro, rw or migration", arg);
		o->access_set = true;
		return 1;
	case OPT_RECONNECT_DELAY:
	case OPT_MAX_RECONNECT:
	case OPT_CONNECTIONS:
	case OPT_HB_INTERVAL:
	case OPT_HB_MISSED:
	case OPT_TIMEOUT:
	case OPT_DOWN_TIMEOUT:
		if ((e = num_opt(c, arg, o)))
			return usage_error(cmd, "%s: '%s' is %s", opt_name(c), arg, e);
		return 1;
	}
	return 0;
}

/* --- config file ------------------------------------------------------------ */

/* One scalar of a session's map, as if given on the command line (which
 * wins: only options not set there are taken). */
static int conf_opt(const char *cmd, const char *file, const struct xnode *n, const char *key,
		    struct sess_opts *o)
{
	static const struct { const char *key; int c; } keys[] = {
		{ "policy", OPT_POLICY }, { "reconnect_delay", OPT_RECONNECT_DELAY },
		{ "max_reconnect_attempts", OPT_MAX_RECONNECT },
		{ "connections", OPT_CONNECTIONS }, { "hb_interval", OPT_HB_INTERVAL },
		{ "hb_missed", OPT_HB_MISSED }, { "access", OPT_ACCESS },
		{ "timeout", OPT_TIMEOUT }, { "down_timeout", OPT_DOWN_TIMEOUT },
		{ "device", 'd' },
	};
	const char *v = xnode_str(n);
	bool set;

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		if (strcmp(key, keys[i].key))
			continue;
		if (!v)
			return usage_error(cmd, "%s: line %d: %s: a scalar value is needed", file,
					   xnode_line(n), key);
		switch (keys[i].c) {
		case OPT_POLICY: set = o->policy_set; break;
		case OPT_RECONNECT_DELAY: set = o->delay_set; break;
		case OPT_MAX_RECONNECT: set = o->attempts_set; break;
		case OPT_CONNECTIONS: set = o->conns_set; break;
		case OPT_HB_INTERVAL: set = o->hbi_set; break;
		case OPT_HB_MISSED: set = o->hbm_set; break;
		case OPT_ACCESS: set = o->access_set; break;
		case OPT_TIMEOUT: set = o->timeout_set; break;
		case OPT_DOWN_TIMEOUT: set = o->down_set; break;
		default: set = o->device != NULL; break;
		}
		if (set)
			return EXIT_OK;
		if (keys[i].c == 'd') {
			if (!*v || strlen(v) >= sizeof(o->device_buf))
				return usage_error(cmd, "%s: line %d: device: 1 to %u characters", file,
						   xnode_line(n), RNBD_NAME_MAX - 1);
			snprintf(o->device_buf, sizeof(o->device_buf), "%s", v);
			o->device = o->device_buf;
			return EXIT_OK;
		}
		if (keys[i].c == OPT_POLICY && rtrs_mp_policy_parse(v, &o->ro.policy))
			return usage_error(cmd, "%s: line %d: policy: '%s' is not rr, min-inflight "
					   "or min-latency", file, xnode_line(n), v);
		if (keys[i].c == OPT_ACCESS && parse_access(v, &o->access))
			return usage_error(cmd, "%s: line %d: access: '%s' is not ro, rw or "
					   "migration", file, xnode_line(n), v);
		if (keys[i].c != OPT_POLICY && keys[i].c != OPT_ACCESS) {
			const char *e = num_opt(keys[i].c, v, o);

			if (e)
				return usage_error(cmd, "%s: line %d: %s: '%s' is %s", file,
						   xnode_line(n), key, v, e);
		}
		return EXIT_OK;
	}
	return usage_error(cmd, "%s: line %d: unknown session key '%s'", file, xnode_line(n), key);
}

static int load_config(const char *cmd, struct sess_opts *o)
{
	char err[512];
	struct xnode *root = xconf_load(o->config, err, sizeof(err));
	const struct xnode *sessions, *sn = NULL, *paths;
	const char *name = NULL;
	int rc = EXIT_USAGE;

	if (!root)
		return usage_error(cmd, "%s", err);
	sessions = xnode_get(root, "sessions");
	for (size_t i = 0; i < xnode_len(root); i++) {
		const char *k;

		xnode_at(root, i, &k);
		if (strcmp(k, "sessions")) {
			usage_error(cmd, "%s: unknown key '%s' (expected 'sessions')", o->config, k);
			goto out;
		}
	}
	if (xnode_type(sessions) != XN_MAP || !xnode_len(sessions)) {
		usage_error(cmd, "%s: no 'sessions' map", o->config);
		goto out;
	}
	if (o->session) {
		sn = xnode_get(sessions, o->session);
		if (!sn) {
			usage_error(cmd, "%s: no session '%s'", o->config, o->session);
			goto out;
		}
	} else if (xnode_len(sessions) == 1) {
		sn = xnode_at(sessions, 0, &name);
		if (rtrs_check_pathname(name)) {
			usage_error(cmd, "%s: session name '%s': 1 to 254 characters without '/' or '.'",
				    o->config, name);
			goto out;
		}
		snprintf(o->session_buf, sizeof(o->session_buf), "%s", name);
		o->session = o->session_buf;
	} else {
		usage_error(cmd, "%s: several sessions: say which with -s", o->config);
		goto out;
	}
	if (xnode_type(sn) != XN_MAP) {
		usage_error(cmd, "%s: line %d: session '%s' is not a map", o->config, xnode_line(sn),
			    o->session);
		goto out;
	}
	for (size_t i = 0; i < xnode_len(sn); i++) {
		const char *k;
		const struct xnode *v = xnode_at(sn, i, &k);

		if (!strcmp(k, "paths"))
			continue;
		if (conf_opt(cmd, o->config, v, k, o) != EXIT_OK)
			goto out;
	}
	paths = xnode_get(sn, "paths");
	if (paths && !o->npaths) {	/* -p on the command line wins */
		if (xnode_type(paths) == XN_STR) {
			if (add_path(cmd, xnode_str(paths), o) != EXIT_OK)
				goto out;
		} else if (xnode_type(paths) == XN_LIST) {
			for (size_t i = 0; i < xnode_len(paths); i++) {
				const char *u = xnode_str(xnode_at(paths, i, NULL));

				if (!u) {
					usage_error(cmd, "%s: line %d: a path is a URI string", o->config,
						    xnode_line(xnode_at(paths, i, NULL)));
					goto out;
				}
				if (add_path(cmd, u, o) != EXIT_OK)
					goto out;
			}
		} else {
			usage_error(cmd, "%s: line %d: paths: a list of URIs", o->config,
				    xnode_line(paths));
			goto out;
		}
	}
	rc = EXIT_OK;
out:
	xnode_free(root);
	return rc;
}

int sess_opts_finish(const char *cmd, struct sess_opts *o, bool need_device)
{
	if (o->config && load_config(cmd, o) != EXIT_OK)
		return EXIT_USAGE;
	if (!o->session)
		return usage_error(cmd, "a session name is needed (-s SESSION)");
	if (!o->npaths)
		return usage_error(cmd, "at least one path is needed (-p URI)");
	if (need_device && !o->device)
		return usage_error(cmd, "a device is needed (-d DEVICE)");
	if (o->device && (!*o->device || strlen(o->device) >= RNBD_NAME_MAX))
		return usage_error(cmd, "-d: a device name is 1 to %u characters", RNBD_NAME_MAX - 1);
	o->ro.sessname = o->session;
	o->ro.stop = &cli_stop_requested;
	return EXIT_OK;
}

bool want_progress(const struct sess_opts *o)
{
	if (o->quiet)
		return false;
	return o->progress_set ? o->progress : isatty(STDERR_FILENO);
}

/* --- the running session ------------------------------------------------------- */

static void on_link_ev(void *ctx, enum rtrs_clt_link_ev ev)
{
	struct sess *ss = ctx;

	rnbd_clt_link_ev(ss->dev, ev);
	if (ss->o->quiet)
		return;
	if (ev == RTRS_CLT_LINK_EV_DISCONNECTED) {
		char d[32], why[80] = "";
		if (rtrs_clt_all_closed(ss->clt)) {	/* none reconnects: nothing to wait for */
			if (rtrs_clt_alive(ss->clt))
				fprintf(stderr, PROG " %s: every path to %s is closed: IO fails until "
					"'path reconnect' or 'path add'\n", ss->cmd, ss->o->session);
			return;
		}

		if (ss->o->ro.down_timeout_ns != RTRS_CLT_FOREVER)
			snprintf(why, sizeof(why), " (IO fails if none is back within %s: --down-timeout)",
				 xfmt_duration(ss->o->ro.down_timeout_ns, d, sizeof(d)));
		fprintf(stderr, PROG " %s: all paths to %s are down, waiting for a reconnect%s\n",
			ss->cmd, ss->o->session, why);
	} else
		fprintf(stderr, PROG " %s: session %s is connected again\n", ss->cmd, ss->o->session);
}

/* In a session of several paths, a path that fails (its reason), one
 * given up, and one that comes back, each said once (not with -q); a
 * session of one has the session's own notices.  A path added or removed
 * (which zeroes npaths_said: a remove and an add leave the count as it
 * was, the indexes not) resyncs without a word. */
static void path_notices(struct sess *ss, bool say)
{
	unsigned n = rtrs_clt_npaths(ss->clt);

	if (n > SESS_PATHS_SAID)
		n = SESS_PATHS_SAID;
	if (n != ss->npaths_said || n < 2)
		say = false;
	ss->npaths_said = n;
	for (unsigned i = 0; i < n; i++) {
		/* 1 connected, 2 on its way back, 3 closed */
		enum rtrs_clt_state s = rtrs_clt_path_state(ss->clt, i);
		uint8_t k = s == RTRS_CLT_CONNECTED ? 1 : s == RTRS_CLT_CLOSED ? 3 : 2, was;
		struct rtrs_clt_path_stats st;

		if (k == (was = ss->path_st[i]))
			continue;
		ss->path_st[i] = k;
		if (!say || !was || ss->o->quiet || rtrs_clt_path_stats(ss->clt, i, &st))
			continue;
		if (k == 1)
			fprintf(stderr, PROG " %s: path %u %s: connected again\n", ss->cmd, i, st.uri);
		else if (was == 1)
			fprintf(stderr, PROG " %s: path %u %s down: %s; %s\n", ss->cmd, i, st.uri,
				st.last_error[0] ? st.last_error : "closed",
				k == 3 ? "closed" : "reconnecting in the background");
		else if (k == 3)
			fprintf(stderr, PROG " %s: path %u %s given up: %s\n", ss->cmd, i, st.uri,
				st.last_error[0] ? st.last_error : "closed");
	}
}

int ctl_path_for(const char *session, const char *ctl, char *buf, size_t len)
{
	char name[300];

	if (ctl) {
		if (strlen(ctl) >= len)
			return -ENAMETOOLONG;
		snprintf(buf, len, "%s", ctl);
		return 0;
	}
	snprintf(name, sizeof(name), PROG "-%s", session);
	return xctl_default_path(name, buf, len);
}

int sess_open(struct sess *ss, const char *cmd, struct sess_opts *o)
{
	char err[2048], path[256];
	struct epoll_event ev = { .events = EPOLLIN };
	int rc;

	memset(ss, 0, sizeof(*ss));
	ss->cmd = cmd;
	ss->o = o;
	ss->epfd = -1;
	ss->clt = rtrs_clt_open(&o->ro, o->paths, o->npaths, on_link_ev, ss, err, sizeof(err));
	if (!ss->clt) {
		if (errno == ENOTCONN)
			return fail(cmd, "all paths to %s are down: %s", o->session, err);
		return fail(cmd, "session %s: %s", o->session, err);
	}
	if (o->verbose)
		fprintf(stderr, PROG " %s: session %s: queue depth %u, max io %u, %u path(s)\n", cmd,
			o->session, rtrs_clt_queue_depth(ss->clt), rtrs_clt_max_io(ss->clt),
			rtrs_clt_npaths(ss->clt));
	/* the paths that did not connect keep trying: say why they failed */
	for (unsigned i = 0; i < rtrs_clt_npaths(ss->clt) && !o->quiet; i++) {
		struct rtrs_clt_path_stats st;

		if (rtrs_clt_path_stats(ss->clt, i, &st) == 0 && st.state != RTRS_CLT_CONNECTED)
			fprintf(stderr, PROG " %s: path %u down: %s; reconnecting in the background\n",
				cmd, i, st.last_error[0] ? st.last_error : st.uri);
	}
	path_notices(ss, false);
	if (o->device) {
		ss->dev = rnbd_clt_open(ss->clt, o->device, o->access, o->ro.timeout_ns, err,
					sizeof(err));
		if (!ss->dev && errno == EROFS && o->ro_fallback && !o->access_set &&
		    o->access == RNBD_ACCESS_RW) {
			o->access = RNBD_ACCESS_RO;
			if (!o->quiet)
				fprintf(stderr, PROG " %s: device %s is a read-only export: "
					"serving it read-only\n", cmd, o->device);
			ss->dev = rnbd_clt_open(ss->clt, o->device, o->access, o->ro.timeout_ns,
						err, sizeof(err));
		}
		if (!ss->dev) {
			rc = errno;
			if (rc == ENOTCONN)
				fail(cmd, "all paths to %s are down", o->session);
			else
				fail(cmd, "%s", err);
			sess_close(ss);
			return EXIT_FAIL;
		}
	}
	ss->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (ss->epfd < 0 || epoll_ctl(ss->epfd, EPOLL_CTL_ADD, rtrs_clt_fd(ss->clt), &ev) < 0) {
		fail(cmd, "epoll: %s", strerror(errno));
		sess_close(ss);
		return EXIT_FAIL;
	}
	rc = ctl_path_for(o->session, o->ctl, path, sizeof(path));
	if (rc == 0)
		ss->ctl = xctl_listen(path, err, sizeof(err));
	if (!ss->ctl) {
		/* the IO does not depend on it: say so and go on */
		if (!o->quiet)
			fprintf(stderr, PROG " %s: no control socket: %s\n", cmd,
				rc ? strerror(-rc) : err);
	} else {
		ev.data.u64 = SESS_TAG_CTL;
		epoll_ctl(ss->epfd, EPOLL_CTL_ADD, xctl_fd(ss->ctl), &ev);
	}
	return EXIT_OK;
}

void sess_close(struct sess *ss)
{
	if (ss->dev) {
		uint64_t now = xtime_ns();

		rnbd_clt_close(ss->dev, !ss->close_by ? 5000000000ull
					: ss->close_by > now ? ss->close_by - now : 1);
		ss->dev = NULL;
	}
	rtrs_clt_close(ss->clt);
	ss->clt = NULL;
	xctl_close(ss->ctl);
	ss->ctl = NULL;
	if (ss->epfd >= 0)
		close(ss->epfd);
	ss->epfd = -1;
}

/* A device the server would not open again after a reconnect (taken for
 * writing by another session meanwhile, or gone) fails its IO with that
 * error: said once, tried again every second while a path is connected,
 * and said when it is open again (IO works from then on). */
#define REOPEN_RETRY_NS 1000000000ull

static void dev_notices(struct sess *ss, uint64_t now)
{
	int err;

	if (!ss->dev)
		return;
	rnbd_clt_reopens(ss->dev, &err);
	if (!err) {
		if (ss->reopen_said && !ss->o->quiet)
			fprintf(stderr, PROG " %s: device %s is open again\n", ss->cmd, ss->o->device);
		ss->reopen_said = 0;
		return;
	}
	if (err != ss->reopen_said) {
		if (!ss->o->quiet)
			fprintf(stderr, PROG " %s: device %s could not be opened again after the "
				"reconnect: %s; IO fails with it, trying again every second\n", ss->cmd,
				ss->o->device, strerror(-err));
		ss->reopen_said = err;
		ss->reopen_ns = now;
	}
	if (now - ss->reopen_ns >= REOPEN_RETRY_NS) {
		ss->reopen_ns = now;
		rnbd_clt_reopen(ss->dev);
	}
}

int sess_run(struct sess *ss, uint64_t max_wait_ns)
{
	struct epoll_event evs[32];
	uint64_t now = xtime_ns(), t;
	bool busy;
	int n, ms;

	/* what the caller waits for may have happened in this poll: then it
	 * looks before anything sleeps */
	n = rtrs_clt_poll(ss->clt, now);
	if (ss->dev)
		n += (int)rnbd_clt_kick(ss->dev);
	path_notices(ss, true);
	dev_notices(ss, now);
	if (cli_stop_requested)
		return -EINTR;
	/* a loop that never sleeps still answers its control socket */
	if (ss->ctl && now - ss->ctl_ns >= 50000000ull) {
		ss->ctl_ns = now;
		xctl_poll(ss->ctl, sess_ctl_handler, ss);
	}
	busy = n > 0 || rtrs_clt_arm(ss->clt);
	/* the caller's own fds are looked at in a busy round too */
	if (busy && !ss->on_fd)
		return 0;
	t = rtrs_clt_next_timer(ss->clt);
	now = xtime_ns();
	if (busy || (t != UINT64_MAX && t <= now))
		max_wait_ns = 0;
	else if (t != UINT64_MAX && t - now < max_wait_ns)
		max_wait_ns = t - now;
	ms = (int)((max_wait_ns + 999999) / 1000000);
	n = epoll_wait(ss->epfd, evs, 32, ms);
	/* EINTR without a stop request is a stop signal and SIGCONT (^Z,
	 * fg) or a debugger: epoll_wait is never restarted after those */
	if (n < 0)
		return cli_stop_requested ? -EINTR : 0;
	/* every ready fd was told, and the session's was not among them:
	 * its next poll need not ask its connections again */
	if (n < 32) {
		int i = 0;

		while (i < n && evs[i].data.u64 != SESS_TAG_CLT)
			i++;
		if (i == n)
			rtrs_clt_quiet(ss->clt);
	}
	for (int i = 0; i < n; i++) {
		if (evs[i].data.u64 == SESS_TAG_CTL) {
			if (ss->ctl)
				xctl_poll(ss->ctl, sess_ctl_handler, ss);
		} else if (evs[i].data.u64 != SESS_TAG_CLT && ss->on_fd) {
			ss->on_fd(ss->on_fd_ctx, evs[i].data.u64, evs[i].events);
		}
	}
	return 0;
}

int sess_add_mem(struct sess *ss, void *buf, size_t len)
{
	char err[256];

	if (rtrs_clt_add_mem(ss->clt, buf, len, err, sizeof(err)))
		return fail(ss->cmd, "%s", err);
	return EXIT_OK;
}

const char *sess_strerror(const struct sess *ss, int err, char *buf, size_t len)
{
	int rerr = 0;

	/* the session's own -ENOTCONN; a server's says the device is not
	 * open there (it lost the session and the re-open failed) */
	char d[32];

	if ((err == -ENOTCONN || err == -ECONNABORTED) && !rtrs_clt_alive(ss->clt))
		snprintf(buf, len, "all paths to %s are down", ss->o->session);
	else if (err == -ENOTCONN && !rtrs_clt_connected(ss->clt))
		snprintf(buf, len, "every path to %s is closed (disconnected: 'path reconnect' "
			 "brings one back)", ss->o->session);
	else if (err == -ECONNABORTED && !rtrs_clt_connected(ss->clt) && !ss->o->ro.down_timeout_ns)
		snprintf(buf, len, "all paths to %s are down (--down-timeout 0)", ss->o->session);
	else if (err == -ECONNABORTED && !rtrs_clt_connected(ss->clt))
		snprintf(buf, len, "all paths to %s have been down for %s (--down-timeout)",
			 ss->o->session, xfmt_duration(ss->o->ro.down_timeout_ns, d, sizeof(d)));
	else if (err == -ENOTCONN && ss->dev && (rnbd_clt_reopens(ss->dev, &rerr), !rerr))
		/* process_rdma: an IO for a device id the server has no more */
		snprintf(buf, len, "the server has device %s closed (rtrs-server force-close, "
			 "or it lost the session)", ss->o->device);
	else if (ss->dev && (rnbd_clt_reopens(ss->dev, &rerr), rerr))
		snprintf(buf, len, "%s (re-opening device %s after a reconnect failed: %s)",
			 strerror(err < 0 ? -err : err), ss->o->device, strerror(-rerr));
	else
		snprintf(buf, len, "%s", strerror(err < 0 ? -err : err));
	return buf;
}
