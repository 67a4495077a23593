/* The control socket of a running session (`status`, `path ...`): the
 * server side runs inside read/write/bench (sess_ctl_handler), the client
 * side is `rtrs-client status` and `rtrs-client path`. */
#include "cmd.h"
#include "core/node.h"
#include "core/parse.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

void sess_paths_node(const struct sess *ss, struct xnode *paths)
{
	struct rtrs_clt *c = ss->clt;

	for (unsigned i = 0; i < rtrs_clt_npaths(c); i++) {
		struct rtrs_clt_path_stats st;
		struct xnode *p;

		if (rtrs_clt_path_stats(c, i, &st))
			continue;
		p = xnode_push_map(paths);
		xnode_set_u64(p, "n", i);
		xnode_set_str(p, "uri", st.uri);
		xnode_set_str(p, "state", rtrs_clt_state_str(st.state));
		if (st.cur_latency_ns >= 0)
			xnode_set_i64(p, "cur_latency_ns", st.cur_latency_ns);
		else
			xnode_set_null(p, "cur_latency_ns");
		xnode_set_u64(p, "reads", st.reads);
		xnode_set_u64(p, "read_bytes", st.read_bytes);
		xnode_set_u64(p, "writes", st.writes);
		xnode_set_u64(p, "write_bytes", st.write_bytes);
		xnode_set_u64(p, "inflight", st.inflight);
		xnode_set_u64(p, "failovers", st.failovers);
		xnode_set_u64(p, "reconnects_ok", st.reconnects_ok);
		xnode_set_u64(p, "reconnects_failed", st.reconnects_failed);
		xnode_set_u64(p, "stray_responses", st.stray_responses);
		xnode_set_str(p, "last_error", st.last_error[0] ? st.last_error : NULL);
	}
}

struct xnode *sess_status_node(const struct sess *ss)
{
	struct xnode *m = xnode_map();
	struct rtrs_clt *c = ss->clt;

	xnode_set_str(m, "session", rtrs_clt_sessname(c));
	xnode_set_str(m, "command", ss->cmd);
	if (ss->o->device) {
		xnode_set_str(m, "device", ss->o->device);
		if (ss->dev) {
			const struct rnbd_clt_geom *g = rnbd_clt_geom(ss->dev);

			xnode_set_u64(m, "device_size", g->size);
			xnode_set_str(m, "access", rnbd_access_mode_str((uint8_t)ss->o->access));
		}
	}
	xnode_set_str(m, "policy", rtrs_mp_policy_str(rtrs_clt_policy(c)));
	xnode_set_i64(m, "max_reconnect_attempts", rtrs_clt_max_reconnect_attempts(c));
	if (rtrs_clt_down_timeout(c) == RTRS_CLT_FOREVER)
		xnode_set_null(m, "down_timeout_ns");
	else
		xnode_set_u64(m, "down_timeout_ns", rtrs_clt_down_timeout(c));
	xnode_set_u64(m, "queue_depth", rtrs_clt_queue_depth(c));
	xnode_set_u64(m, "max_io", rtrs_clt_max_io(c));
	xnode_set_u64(m, "inflight", rtrs_clt_inflight(c));
	if (ss->activity) {
		xnode_set_str(m, "activity", ss->activity);
		xnode_set_u64(m, "done_bytes", ss->done_bytes);
		if (ss->total_bytes)
			xnode_set_u64(m, "total_bytes", ss->total_bytes);
	}
	if (ss->status_extra)
		ss->status_extra(ss->on_fd_ctx, m);
	sess_paths_node(ss, xnode_set_list(m, "paths"));
	return m;
}

/* "URI" or "N": the path's index, or -1 with the message in out. */
static int find_path(struct rtrs_clt *c, const char *arg, FILE *out)
{
	const char *e;
	uint64_t n;
	struct xuri u;
	char err[256];
	int i;

	if (xparse_u64(arg, 0, 1000000, &n, &e) == 0) {
		if (n >= rtrs_clt_npaths(c)) {
			fprintf(out, "no path %llu (the session has %u)\n", (unsigned long long)n,
				rtrs_clt_npaths(c));
			return -1;
		}
		return (int)n;
	}
	if (xuri_parse(arg, RTRS_DEFAULT_PORT, &u, err, sizeof(err)) < 0) {
		fprintf(out, "%s\n", err);
		return -1;
	}
	i = rtrs_clt_path_find(c, &u);
	if (i < 0)
		fprintf(out, "%s: not a path of session %s\n", arg, rtrs_clt_sessname(c));
	return i;
}

/* "set KEY VALUE": a running session's settings, as the kernel's sysfs
 * (mpath_policy, max_reconnect_attempts). */
static int ctl_set(struct sess *ss, const char *key, const char *val, FILE *out)
{
	struct rtrs_clt *c = ss->clt;
	enum rtrs_mp_policy pol;
	const char *e = NULL;
	int64_t i;
	uint64_t ns;

	if (!strcmp(key, "policy")) {
		if (rtrs_mp_policy_parse(val, &pol)) {
			fprintf(out, "policy: '%s' is not rr, min-inflight or min-latency\n", val);
			return EXIT_USAGE;
		}
		rtrs_clt_set_policy(c, pol);
	} else if (!strcmp(key, "max-reconnect-attempts")) {
		if (xparse_i64(val, -1, 9999, &i, &e)) {
			fprintf(out, "max-reconnect-attempts: '%s' is %s\n", val, e);
			return EXIT_USAGE;
		}
		rtrs_clt_set_max_reconnect_attempts(c, (int32_t)i);
		ss->o->ro.max_reconnect_attempts = (int32_t)i;
	} else if (!strcmp(key, "down-timeout")) {
		if (!strcmp(val, "-1") || !strcmp(val, "forever")) {
			ns = RTRS_CLT_FOREVER;
		} else if (xparse_duration(val, 1000000000ull, 0, 365ull * 86400 * 1000000000ull,
					   &ns, &e)) {
			fprintf(out, "down-timeout: '%s' is %s\n", val, e);
			return EXIT_USAGE;
		}
		rtrs_clt_set_down_timeout(c, ns);
		ss->o->ro.down_timeout_ns = ns;	/* what the messages name */
	} else {
		fprintf(out, "set: '%s' is not policy, max-reconnect-attempts or down-timeout\n",
			key);
		return EXIT_USAGE;
	}
	fprintf(out, "%s: %s\n", key, val);
	return EXIT_OK;
}

int sess_ctl_handler(void *ctx, int argc, char **argv, FILE *out)
{
	struct sess *ss = ctx;
	struct rtrs_clt *c = ss->clt;
	char err[512], uri[320];
	int i, rc;

	if (argc >= 1 && !strcmp(argv[0], "status")) {
		enum xfmt fmt = XFMT_TEXT;
		struct xnode *m;

		if (argc == 3 && !strcmp(argv[1], "-o") && xfmt_parse(argv[2], &fmt) == 0) {
			/* ok */
		} else if (argc != 1) {
			fprintf(out, "usage: status [-o text|yaml|json]\n");
			return EXIT_USAGE;
		}
		m = sess_status_node(ss);
		rc = xemit(out, m, fmt);
		xnode_free(m);
		return rc ? EXIT_FAIL : EXIT_OK;
	}
	if (argc == 1 && !strcmp(argv[0], "reset-stats")) {
		rtrs_clt_reset_stats(c);
		fprintf(out, "statistics of session %s reset\n", rtrs_clt_sessname(c));
		return EXIT_OK;
	}
	if (argc == 3 && !strcmp(argv[0], "set"))
		return ctl_set(ss, argv[1], argv[2], out);
	if (argc != 3 || strcmp(argv[0], "path")) {
		fprintf(out, "unknown command (status, set, reset-stats, "
			"path add|remove|disconnect|reconnect|state)\n");
		return EXIT_USAGE;
	}
	if (!strcmp(argv[1], "add")) {
		struct xuri u;

		if (xuri_parse(argv[2], RTRS_DEFAULT_PORT, &u, err, sizeof(err)) < 0) {
			fprintf(out, "%s\n", err);
			return EXIT_USAGE;
		}
		if (u.scheme != XURI_RDMA && u.scheme != XURI_TCP) {
			fprintf(out, "'%s': an RTRS path is rdma://HOST[:PORT] or tcp://HOST[:PORT]\n",
				argv[2]);
			return EXIT_USAGE;
		}
		rc = rtrs_clt_path_add(c, &u, err, sizeof(err));
		if (rc) {
			fprintf(out, "%s: %s\n", argv[2], err);
			return EXIT_FAIL;
		}
		ss->npaths_said = 0;	/* the notices resync: the paths moved */
		/* it connects in the background; `path state` tells */
		fprintf(out, "path %u %s: connecting\n", rtrs_clt_npaths(c) - 1, argv[2]);
		return EXIT_OK;
	}
	i = find_path(c, argv[2], out);
	if (i < 0)
		return EXIT_FAIL;
	if (!strcmp(argv[1], "state")) {
		struct rtrs_clt_path_stats st;

		if (rtrs_clt_path_stats(c, (unsigned)i, &st))
			return EXIT_FAIL;
		fprintf(out, "path %d %s: %s%s%s\n", i, st.uri, rtrs_clt_state_str(st.state),
			st.state != RTRS_CLT_CONNECTED && st.last_error[0] ? ": " : "",
			st.state != RTRS_CLT_CONNECTED ? st.last_error : "");
		return EXIT_OK;
	}
	/* named by its index: the line says its URI (taken before a
	 * remove, which moves the others down) */
	{
		struct rtrs_clt_path_stats st;

		if (rtrs_clt_path_stats(c, (unsigned)i, &st) == 0)
			snprintf(uri, sizeof(uri), "%s", st.uri);
		else
			snprintf(uri, sizeof(uri), "%s", argv[2]);
	}
	if (!strcmp(argv[1], "remove")) {
		rc = rtrs_clt_path_remove(c, (unsigned)i);
		ss->npaths_said = 0;	/* those after it moved down */
	}
	else if (!strcmp(argv[1], "disconnect"))
		rc = rtrs_clt_path_disconnect(c, (unsigned)i);
	else if (!strcmp(argv[1], "reconnect"))
		rc = rtrs_clt_path_reconnect(c, (unsigned)i);
	else {
		fprintf(out, "path: '%s' is not add, remove, disconnect, reconnect or state\n",
			argv[1]);
		return EXIT_USAGE;
	}
	if (rc) {
		fprintf(out, "path %d: %s\n", i, rc == -EBUSY ? "a connection attempt is under way"
			: strerror(-rc));
		return EXIT_FAIL;
	}
	fprintf(out, "path %d %s: %s\n", i, uri, !strcmp(argv[1], "remove") ? "removed" :
		!strcmp(argv[1], "disconnect") ? "disconnected" : "reconnecting");
	return EXIT_OK;
}

/* --- the client side ------------------------------------------------------------ */

/* Runs argv on the session's socket.  The session's answer and its status
 * (>= 0) come back in *ans, *len bytes (the caller frees it); a failure
 * to reach the session is said in one line (-1). */
static int call_raw(const char *cmd, const char *session, const char *ctl, int argc,
		    char **argv, char **ans, size_t *len)
{
	char path[256], err[512];
	FILE *mem;
	int rc;

	*ans = NULL;
	rc = ctl_path_for(session, ctl, path, sizeof(path));
	if (rc) {
		fail(cmd, "control socket of %s: %s", session, strerror(-rc));
		return -1;
	}
	mem = open_memstream(ans, len);
	if (!mem) {
		fail(cmd, "out of memory");
		return -1;
	}
	rc = xctl_call(path, argc, argv, mem, err, sizeof(err));
	fclose(mem);
	if (rc < 0) {
		free(*ans);
		*ans = NULL;
		if (rc == -ENOENT || rc == -ECONNREFUSED)
			fail(cmd, "no running session %s (%s)", session, path);
		else
			fail(cmd, "%s", err);
		return -1;
	}
	/* a session of ours knows every command and word we send: another
	 * daemon's socket (--ctl naming rtrs-server's) does not */
	if (rc > 0 && *ans && (!strncmp(*ans, "unknown command", 15) ||
			       !strncmp(*ans, "unknown output format", 21))) {
		size_t n = strcspn(*ans, "\n");

		fail(cmd, "%s is not an rtrs-client session's control socket (it answered: %.*s)",
		     path, (int)n, *ans);
		free(*ans);
		*ans = NULL;
		return -1;
	}
	return rc;
}

/* The same, the answer's trailing newlines gone. */
static int call_quiet(const char *cmd, const char *session, const char *ctl, int argc,
		      char **argv, char **ans)
{
	size_t len = 0;
	int rc = call_raw(cmd, session, ctl, argc, argv, ans, &len);

	while (rc >= 0 && len && (*ans)[len - 1] == '\n')
		(*ans)[--len] = 0;
	return rc;
}

/* Runs argv on the session's socket; the answer goes to stdout (status 0)
 * or stderr. */
static int call(const char *cmd, const char *session, const char *ctl, int argc, char **argv)
{
	char *buf;
	size_t len = 0;
	int rc = call_raw(cmd, session, ctl, argc, argv, &buf, &len);

	if (rc < 0)
		return EXIT_FAIL;
	if (rc == 0) {
		fwrite(buf, 1, len, stdout);
	} else {
		/* the session's one line, named after us */
		while (len && buf[len - 1] == '\n')
			buf[--len] = 0;
		fprintf(stderr, PROG " %s: %s\n", cmd, buf);
	}
	free(buf);
	return rc == EXIT_USAGE ? EXIT_USAGE : rc ? EXIT_FAIL : EXIT_OK;
}

/* path add: the session starts connecting the path and answers at once;
 * we wait for the outcome (bounded by the session's connection timeout),
 * and take a path whose connection failed out again. */
static int path_add(const char *cmd, const char *session, const char *ctl, char *uri)
{
	char a0[] = "path", add[] = "add", state[] = "state", rm[] = "remove";
	char *ans, *p;
	int rc;

	rc = call_quiet(cmd, session, ctl, 3, (char *[]){ a0, add, uri, NULL }, &ans);
	if (rc < 0)
		return EXIT_FAIL;
	if (rc) {
		fprintf(stderr, PROG " %s: %s\n", cmd, ans);
		free(ans);
		return rc == EXIT_USAGE ? EXIT_USAGE : EXIT_FAIL;
	}
	for (;;) {
		free(ans);
		if (cli_stop_requested)
			return fail(cmd, "interrupted: %s is still connecting (see status)", uri);
		rc = call_quiet(cmd, session, ctl, 3, (char *[]){ a0, state, uri, NULL }, &ans);
		if (rc < 0)
			return EXIT_FAIL;
		if (rc) {	/* gone meanwhile: removed by someone else */
			fprintf(stderr, PROG " %s: %s\n", cmd, ans);
			free(ans);
			return EXIT_FAIL;
		}
		/* "path N URI: STATE[: why]" */
		p = strstr(ans, ": ");
		if (p && !strncmp(p + 2, "connected", 9) && !p[11]) {
			printf("%s\n", ans);
			free(ans);
			return EXIT_OK;
		}
		if (p && strncmp(p + 2, "connecting", 10)) {
			const char *why = strstr(p + 2, ": ");

			why = why ? why + 2 : p + 2;
			/* a connection's failure names its URI already */
			if (!strncmp(why, "tcp://", 6) || !strncmp(why, "rdma://", 7))
				fprintf(stderr, PROG " %s: %s\n", cmd, why);
			else
				fprintf(stderr, PROG " %s: %s: %s\n", cmd, uri, why);
			free(ans);
			rc = call_quiet(cmd, session, ctl, 3, (char *[]){ a0, rm, uri, NULL }, &ans);
			free(ans);
			return EXIT_FAIL;
		}
		usleep(20000);
	}
}

int cmd_status(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "session", required_argument, NULL, 's' },
		{ "ctl", required_argument, NULL, OPT_CTL },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *session = NULL, *ctl = NULL, *fmt = "text";
	enum xfmt f;
	int c;

	while ((c = getopt_long(argc, argv, "s:o:h", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			session = optarg;
			break;
		case 'o':
			if (cli_parse_fmt(PROG, "status", optarg, &f))
				return EXIT_USAGE;
			fmt = optarg;
			break;
		case OPT_CTL:
			ctl = optarg;
			break;
		case 'h':
			cmd_usage(stdout, "status");
			return EXIT_OK;
		default:
			return bad_option("status", "s:o:h", argv);
		}
	}
	if (optind < argc)
		return usage_error("status", "unexpected argument '%s'", argv[optind]);
	if (!session)
		return usage_error("status", "a session name is needed (-s SESSION)");
	if (rtrs_check_pathname(session))
		return usage_error("status", "-s: '%s': a session name is 1 to 254 characters "
				   "without '/' or '.'", session);
	char a0[] = "status", a1[] = "-o";

	return call("status", session, ctl, 3, (char *[]){ a0, a1, (char *)fmt, NULL });
}

int cmd_path(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "session", required_argument, NULL, 's' },
		{ "ctl", required_argument, NULL, OPT_CTL },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *session = NULL, *ctl = NULL, *verb, *what;
	char cmd[32];
	int c;

	/* options anywhere, before the verb too (path -s S remove 0): with a
	 * leading '-' GNU getopt hands each operand over in order (as option
	 * 1), POSIXLY_CORRECT or not; optind 0 starts it afresh */
	const char *ops[3] = { NULL, NULL, NULL };
	int nops = 0;

	optind = 0;
	while ((c = getopt_long(argc, argv, "-s:h", lo, NULL)) != -1) {
		switch (c) {
		case 1:
			if (nops < 3)
				ops[nops] = optarg;
			nops++;
			break;
		case 's':
			session = optarg;
			break;
		case OPT_CTL:
			ctl = optarg;
			break;
		case 'h':
			cmd_usage(stdout, "path");
			return EXIT_OK;
		default:
			return bad_option("path", "s:h", argv);
		}
	}
	if (!nops)
		return usage_error("path", "add, remove, disconnect or reconnect is needed");
	verb = ops[0];
	if (strcmp(verb, "add") && strcmp(verb, "remove") && strcmp(verb, "disconnect") &&
	    strcmp(verb, "reconnect"))
		return usage_error("path", "'%s' is not add, remove, disconnect or reconnect", verb);
	snprintf(cmd, sizeof(cmd), "path %s", verb);
	if (nops < 2)
		return usage_error(cmd, "a path is needed (URI%s)", strcmp(verb, "add") ? " or N" : "");
	what = ops[1];
	if (nops > 2)
		return usage_error(cmd, "unexpected argument '%s'", ops[2]);
	if (!session)
		return usage_error(cmd, "a session name is needed (-s SESSION)");
	if (rtrs_check_pathname(session))
		return usage_error(cmd, "-s: '%s': a session name is 1 to 254 characters "
				   "without '/' or '.'", session);
	if (!strcmp(verb, "add")) {
		struct xuri u;
		char err[256];

		if (xuri_parse(what, RTRS_DEFAULT_PORT, &u, err, sizeof(err)) < 0)
			return usage_error(cmd, "%s", err);
		if (u.scheme != XURI_RDMA && u.scheme != XURI_TCP)
			return usage_error(cmd, "'%s': an RTRS path is rdma://HOST[:PORT] or "
					   "tcp://HOST[:PORT]", what);
	}
	if (!strcmp(verb, "add")) {
		cli_stop_handlers();
		return path_add(cmd, session, ctl, (char *)what);
	}
	char a0[] = "path";

	return call(cmd, session, ctl, 3, (char *[]){ a0, (char *)verb, (char *)what, NULL });
}

/* -s and --ctl, which every command on a running session takes. */
static bool sess_ctl_opt(int c, const char **session, const char **ctl)
{
	if (c == 's')
		*session = optarg;
	else if (c == OPT_CTL)
		*ctl = optarg;
	else
		return false;
	return true;
}

/* The session name of set and reset-stats; 0, or EXIT_USAGE said. */
static int check_session(const char *cmd, const char *session)
{
	if (!session)
		return usage_error(cmd, "a session name is needed (-s SESSION)");
	if (rtrs_check_pathname(session))
		return usage_error(cmd, "-s: '%s': a session name is 1 to 254 characters "
				   "without '/' or '.'", session);
	return 0;
}

int cmd_set(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "session", required_argument, NULL, 's' },
		{ "ctl", required_argument, NULL, OPT_CTL },
		{ "policy", required_argument, NULL, OPT_POLICY },
		{ "max-reconnect-attempts", required_argument, NULL, OPT_MAX_RECONNECT },
		{ "down-timeout", required_argument, NULL, OPT_DOWN_TIMEOUT },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *session = NULL, *ctl = NULL, *e;
	/* one slot per setting: the last one given wins, as for options */
	struct { const char *key; char *val; } set[3] = {
		{ "policy", NULL }, { "max-reconnect-attempts", NULL }, { "down-timeout", NULL },
	};
	bool any = false;
	enum rtrs_mp_policy pol;
	int64_t i;
	uint64_t ns;
	int c, rc;

	while ((c = getopt_long(argc, argv, "s:h", lo, NULL)) != -1) {
		if (sess_ctl_opt(c, &session, &ctl))
			continue;
		switch (c) {
		case OPT_POLICY:
			if (rtrs_mp_policy_parse(optarg, &pol))
				return usage_error("set", "--policy: '%s' is not rr, min-inflight or "
						   "min-latency", optarg);
			set[0].val = optarg;
			break;
		case OPT_MAX_RECONNECT:
			if (xparse_i64(optarg, -1, 9999, &i, &e))
				return usage_error("set", "--max-reconnect-attempts: '%s' is %s",
						   optarg, e);
			set[1].val = optarg;
			break;
		case OPT_DOWN_TIMEOUT:
			if (strcmp(optarg, "-1") && strcmp(optarg, "forever") &&
			    xparse_duration(optarg, 1000000000ull, 0, 365ull * 86400 * 1000000000ull,
					    &ns, &e))
				return usage_error("set", "--down-timeout: '%s' is %s", optarg, e);
			set[2].val = optarg;
			break;
		case 'h':
			cmd_usage(stdout, "set");
			return EXIT_OK;
		default:
			return bad_option("set", "s:h", argv);
		}
		any |= c == OPT_POLICY || c == OPT_MAX_RECONNECT || c == OPT_DOWN_TIMEOUT;
	}
	if (optind < argc)
		return usage_error("set", "unexpected argument '%s'", argv[optind]);
	if ((rc = check_session("set", session)))
		return rc;
	if (!any)
		return usage_error("set", "nothing to set (--policy, --max-reconnect-attempts, "
				   "--down-timeout)");
	for (unsigned k = 0; k < 3; k++) {
		char a0[] = "set";

		if (!set[k].val)
			continue;
		rc = call("set", session, ctl, 3,
			  (char *[]){ a0, (char *)set[k].key, set[k].val, NULL });
		if (rc)
			return rc;
	}
	return EXIT_OK;
}

int cmd_reset_stats(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "session", required_argument, NULL, 's' },
		{ "ctl", required_argument, NULL, OPT_CTL },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *session = NULL, *ctl = NULL;
	char a0[] = "reset-stats";
	int c, rc;

	while ((c = getopt_long(argc, argv, "s:h", lo, NULL)) != -1) {
		if (sess_ctl_opt(c, &session, &ctl))
			continue;
		switch (c) {
		case 'h':
			cmd_usage(stdout, "reset-stats");
			return EXIT_OK;
		default:
			return bad_option("reset-stats", "s:h", argv);
		}
	}
	if (optind < argc)
		return usage_error("reset-stats", "unexpected argument '%s'", argv[optind]);
	if ((rc = check_session("reset-stats", session)))
		return rc;
	return call("reset-stats", session, ctl, 1, (char *[]){ a0, NULL });
}
