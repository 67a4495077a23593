/* rtrs-server status: asks a running server over its control socket; the
 * server builds the answer (status_node) in the format asked for.
 *
 * Four flat tables besides the server's settings, so the text form is
 * readable and the YAML/JSON forms are easy to query: exports, sessions,
 * paths (with the per-path counters) and devices (who has what open). */
#include "cmd.h"
#include "core/ctl.h"
#include "core/node.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void uuid_str(const uint8_t u[16], char buf[37])
{
	static const char hex[] = "0123456789abcdef";
	char *p = buf;

	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*p++ = '-';
		*p++ = hex[u[i] >> 4];
		*p++ = hex[u[i] & 15];
	}
	*p = '\0';
}

static void server_node(struct xnode *m, struct rtrs_srv *srv, const struct srv_conf *c)
{
	struct rtrs_srv_info in;
	struct xnode *l;
	char u[300];

	rtrs_srv_get_info(srv, &in);
	xnode_set_u64(m, "pid", (uint64_t)getpid());
	l = xnode_set_list(m, "listen");
	for (unsigned i = 0; i < rtrs_srv_listeners(srv); i++) {
		xuri_format(rtrs_srv_listener_uri(srv, i), u, sizeof(u));
		xnode_push_str(l, u);
	}
	xnode_set_u64(m, "queue_depth", in.queue_depth);
	xnode_set_u64(m, "chunk_size", in.chunk_size);
	xnode_set_u64(m, "max_io_size", in.max_io_size);
	xnode_set_bool(m, "always_invalidate", in.always_invalidate);
	xnode_set_u64(m, "hb_interval_ms", c->hb_interval_ms ? c->hb_interval_ms : 5000);
	xnode_set_u64(m, "hb_missed", c->hb_missed ? c->hb_missed : 5);
	xnode_set_u64(m, "io_threads", (uint64_t)(c->io_threads > 0 ? c->io_threads : 0));
	l = xnode_set_list(m, "allow");
	for (unsigned i = 0; i < c->nallow; i++) {
		const struct allow_ent *a = &c->allow[i];

		if (a->addr) {
			char h[64];

			inet_ntop(a->af, a->a, h, sizeof(h));
			snprintf(u, sizeof(u), "%s/%u", h, a->prefix);
			xnode_push_str(l, u);
		} else {
			xnode_push_str(l, a->name);
		}
	}
	xnode_set_u64(m, "sessions", in.sessions);
	xnode_set_u64(m, "paths", in.paths);
	xnode_set_u64(m, "rejected", in.rejected);
	xnode_set_u64(m, "dropped", in.dropped);
	xnode_set_u64(m, "paths_closed", in.closed);
	xnode_set_str(m, "control", c->ctl);
}

static void exports_node(struct xnode *l, const struct rnbd_srv *r)
{
	for (unsigned i = 0; i < rnbd_srv_exports(r); i++) {
		struct rnbd_export_info e;
		struct xnode *m;

		if (rnbd_srv_export_get(r, i, &e) < 0)
			continue;
		m = xnode_push_map(l);
		xnode_set_str(m, "name", e.name);
		xnode_set_str(m, "path", e.path);
		xnode_set_str(m, "type", e.blockdev ? "blockdev" : "file");
		xnode_set_u64(m, "size", e.size);
		xnode_set_bool(m, "ro", e.ro);
		xnode_set_bool(m, "deleted", e.deleted);
		xnode_set_u64(m, "opens", e.opens);
		xnode_set_u64(m, "writers", e.writers);
		xnode_set_u64(m, "reads", e.reads);
		xnode_set_u64(m, "read_bytes", e.read_bytes);
		xnode_set_u64(m, "writes", e.writes);
		xnode_set_u64(m, "write_bytes", e.write_bytes);
		xnode_set_u64(m, "flushes", e.flushes);
		xnode_set_u64(m, "discards", e.discards);
		xnode_set_u64(m, "errors", e.errors);
		xnode_set_u64(m, "queued", e.queued);
	}
}

static void sess_nodes(struct rtrs_srv *srv, struct xnode *sl, struct xnode *pl, struct xnode *dl)
{
	for (struct rtrs_srv_sess *s = rtrs_srv_sess_next(srv, NULL); s;
	     s = rtrs_srv_sess_next(srv, s)) {
		const char *name = rtrs_srv_sess_name(s)[0] ? rtrs_srv_sess_name(s) : "-";
		struct xnode *m = xnode_push_map(sl);
		unsigned connected = 0;

		for (unsigned i = 0; i < rtrs_srv_sess_paths(s); i++) {
			struct rtrs_srv_path_info pi;
			struct xnode *p;
			char u[37];

			if (rtrs_srv_path_get(s, i, &pi) < 0)
				continue;
			connected += pi.state == RTRS_SRV_CONNECTED;
			p = xnode_push_map(pl);
			xnode_set_str(p, "session", name);
			xnode_set_str(p, "peer", pi.peer);
			xnode_set_str(p, "transport", pi.transport);
			xnode_set_str(p, "state", rtrs_srv_path_state_str(pi.state));
			xnode_set_strf(p, "connections", "%u/%u", pi.cid_up, pi.cid_num);
			if (pi.hb_latency_ns >= 0)
				xnode_set_f64(p, "latency_us", (double)pi.hb_latency_ns / 1e3, 1);
			else
				xnode_set_null(p, "latency_us");
			xnode_set_u64(p, "reads", pi.stats.reads);
			xnode_set_u64(p, "read_bytes", pi.stats.read_bytes);
			xnode_set_u64(p, "writes", pi.stats.writes);
			xnode_set_u64(p, "write_bytes", pi.stats.write_bytes);
			xnode_set_u64(p, "inflight", pi.stats.inflight);
			xnode_set_u64(p, "chunk_waits", pi.stats.chunk_waits);
			xnode_set_u64(p, "recon_cnt", pi.recon_cnt);
			uuid_str(pi.sess_uuid, u);
			xnode_set_str(p, "path_uuid", u);
		}
		xnode_set_str(m, "name", name);
		xnode_set_u64(m, "paths", rtrs_srv_sess_paths(s));
		xnode_set_u64(m, "connected", connected);
		xnode_set_u64(m, "devices", rnbd_srv_sess_devs(s));
		xnode_set_u64(m, "rnbd_version", rnbd_srv_sess_ver(s));
		for (unsigned i = 0; i < rnbd_srv_sess_devs(s); i++) {
			struct rnbd_dev_info di;
			struct xnode *d;

			if (rnbd_srv_sess_dev_get(s, i, &di) < 0)
				continue;
			d = xnode_push_map(dl);
			xnode_set_str(d, "session", name);
			xnode_set_u64(d, "device_id", di.device_id);
			xnode_set_str(d, "export", di.export);
			xnode_set_str(d, "access", rnbd_access_mode_str(di.access_mode));
		}
	}
}

struct xnode *status_node(struct rtrs_srv *srv, struct rnbd_srv *r, const struct srv_conf *c)
{
	struct xnode *root = xnode_map(), *sl, *pl, *dl;

	if (!root)
		return NULL;
	server_node(xnode_set_map(root, "server"), srv, c);
	exports_node(xnode_set_list(root, "exports"), r);
	sl = xnode_set_list(root, "sessions");
	pl = xnode_set_list(root, "paths");
	dl = xnode_set_list(root, "devices");
	sess_nodes(srv, sl, pl, dl);
	return root;
}

int cmd_status(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "ctl", required_argument, NULL, 'C' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const char *const os = "o:h";
	char path[108] = "", err[512];
	const char *fmt = "text";
	char *args[2];
	enum xfmt f;
	int o, rc;

	optind = 1;
	while ((o = getopt_long(argc, argv, os, lo, NULL)) != -1) {
		switch (o) {
		case 'C':
			if (!optarg[0] || strlen(optarg) >= sizeof(path))
				return usage_error("status", "--ctl: a socket path of 1 to %zu bytes",
						   sizeof(path) - 1);
			snprintf(path, sizeof(path), "%s", optarg);
			break;
		case 'o':
			if (xfmt_parse(optarg, &f) < 0)
				return usage_error("status", "-o: '%s' is not text, yaml or json", optarg);
			fmt = optarg;
			break;
		case 'h':
			cmd_usage(stdout, "status");
			return EXIT_OK;
		default:
			return bad_option("status", os, argv);
		}
	}
	if (optind < argc)
		return usage_error("status", "unexpected argument '%s'", argv[optind]);
	if (!path[0] && (rc = xctl_default_path(CTL_NAME, path, sizeof(path))) < 0)
		return fail("status: control socket: %s", strerror(-rc));
	args[0] = (char *)"status";
	args[1] = (char *)fmt;
	fflush(stdout);
	rc = xctl_call(path, 2, args, stdout, err, sizeof(err));
	if (rc == -ENOENT || rc == -ECONNREFUSED)
		return fail("status: no rtrs-server answers at %s (not running? --ctl PATH)", path);
	if (rc < 0)
		return fail("status: %s", err);
	return rc;
}

/* disconnect and force-close: positional arguments (min..max of them) and
 * --ctl, sent to the running server; its one-line answer goes to stdout,
 * or to stderr named after us when it refused. */
static int ctl_command(int argc, char **argv, const char *cmd, int min, int max)
{
	static const struct option lo[] = {
		{ "ctl", required_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	char path[108] = "", err[512], *args[4], *ans = NULL;
	size_t len = 0;
	FILE *mem;
	int o, rc, n;

	optind = 1;
	while ((o = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (o) {
		case 'C':
			if (!optarg[0] || strlen(optarg) >= sizeof(path))
				return usage_error(cmd, "--ctl: a socket path of 1 to %zu bytes",
						   sizeof(path) - 1);
			snprintf(path, sizeof(path), "%s", optarg);
			break;
		case 'h':
			cmd_usage(stdout, cmd);
			return EXIT_OK;
		default:
			return bad_option(cmd, "h", argv);
		}
	}
	n = argc - optind;
	if (n < min)
		return usage_error(cmd, min == 2 && n == 1 ? "a device is needed (export name or id)" :
				   "a session name is needed");
	if (n > max)
		return usage_error(cmd, "unexpected argument '%s'", argv[optind + max]);
	for (int i = 0; i < n; i++)
		if (!argv[optind + i][0])
			return usage_error(cmd, "an empty %s",
					   !i ? "session name" : min == 2 ? "device" : "path");
	if (!path[0] && (rc = xctl_default_path(CTL_NAME, path, sizeof(path))) < 0)
		return fail("%s: control socket: %s", cmd, strerror(-rc));
	args[0] = (char *)cmd;
	for (int i = 0; i < n; i++)
		args[1 + i] = argv[optind + i];
	mem = open_memstream(&ans, &len);
	if (!mem)
		return fail("%s: out of memory", cmd);
	rc = xctl_call(path, 1 + n, args, mem, err, sizeof(err));
	fclose(mem);
	if (rc == -ENOENT || rc == -ECONNREFUSED)
		rc = fail("%s: no rtrs-server answers at %s (not running? --ctl PATH)", cmd, path);
	else if (rc < 0)
		rc = fail("%s: %s", cmd, err);
	else if (rc == 0)
		fwrite(ans, 1, len, stdout);
	else
		fprintf(stderr, PROG " %s: %s", cmd, ans ? ans : "\n");
	free(ans);
	return rc;
}

int cmd_disconnect(int argc, char **argv)
{
	return ctl_command(argc, argv, "disconnect", 1, 2);
}

int cmd_force_close(int argc, char **argv)
{
	return ctl_command(argc, argv, "force-close", 2, 2);
}
