/* What rtrs-server serve runs with: listeners, exports and the allow list
 * from the command line and from a YAML config file, and the allow hook.
 *
 * Config file (every key optional; lists may be given as one string):
 *   listen: [rdma://0.0.0.0:1234, tcp://0.0.0.0:1234]
 *   exports:
 *     - disk0=/dev/ram0            # NAME=PATH[:ro], or:
 *     - { name: img, path: /srv/img, readonly: true }
 *   queue_depth: 512
 *   chunk_size: 128k
 *   always_invalidate: on
 *   allow: [10.0.0.0/8, backup]    # addresses (prefixes) and session names
 *   hb_interval: 5s
 *   hb_missed: 5
 *   io_threads: 4
 *   dev_search_path: /dev/rnbd/%SESSNAME%   # OPEN of a name that is no export
 *   ctl: /run/rtrs-server.sock */
#include "cmd.h"
#include "core/conf.h"
#include "core/parse.h"
#include "core/xtime.h"
#include "rnbd/rnbd_wire.h"
#include "rtrs/rtrs_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int conf_add_listen(struct srv_conf *c, const char *cmd, const char *what, const char *arg)
{
	char err[256];

	if (c->nlisten >= MAX_LISTEN)
		return usage_error(cmd, "%s: at most %d listeners", what, MAX_LISTEN);
	if (xuri_parse(arg, RTRS_DEFAULT_PORT, &c->listen[c->nlisten], err, sizeof(err)) < 0)
		return usage_error(cmd, "%s: %s", what, err);
	if (c->listen[c->nlisten].scheme != XURI_TCP && c->listen[c->nlisten].scheme != XURI_RDMA &&
	    c->listen[c->nlisten].scheme != XURI_AUTO)
		return usage_error(cmd, "%s: '%s': RTRS listens on rdma:// or tcp://", what, arg);
	c->nlisten++;
	return EXIT_OK;
}

static int add_export(struct srv_conf *c, const char *cmd, const char *what, const char *name,
		      const char *path, bool ro)
{
	struct export_spec *e;

	for (unsigned i = 0; i < c->nexports; i++)
		if (!strcmp(c->exports[i].name, name))
			return usage_error(cmd, "%s: export name '%s' given twice", what, name);
	if (!name[0] || strlen(name) >= RNBD_NAME_MAX || strchr(name, '='))
		return usage_error(cmd, "%s: export name '%s': 1 to 254 bytes, no '='", what, name);
	if (!path[0] || strlen(path) >= sizeof(e->path))
		return usage_error(cmd, "%s: export '%s': %s", what, name,
				   path[0] ? "path too long" : "no path");
	e = realloc(c->exports, (c->nexports + 1) * sizeof(*e));
	if (!e)
		return fail("out of memory");
	c->exports = e;
	e = &c->exports[c->nexports++];
	snprintf(e->name, sizeof(e->name), "%s", name);
	snprintf(e->path, sizeof(e->path), "%s", path);
	e->ro = ro;
	return EXIT_OK;
}

int conf_add_export(struct srv_conf *c, const char *cmd, const char *what, const char *spec)
{
	char name[256], path[4096], err[512];
	bool ro;

	if (rnbd_export_parse(spec, name, sizeof(name), path, sizeof(path), &ro, err,
			      sizeof(err)) < 0)
		return usage_error(cmd, "%s: %s", what, err);
	return add_export(c, cmd, what, name, path, ro);
}

int conf_add_allow(struct srv_conf *c, const char *cmd, const char *what, const char *arg)
{
	struct allow_ent *a;
	char host[256];
	const char *slash = strchr(arg, '/');
	size_t n = slash ? (size_t)(slash - arg) : strlen(arg);

	if (c->nallow >= MAX_ALLOW)
		return usage_error(cmd, "%s: at most %d entries", what, MAX_ALLOW);
	a = &c->allow[c->nallow];
	memset(a, 0, sizeof(*a));
	if (n < sizeof(host)) {
		memcpy(host, arg, n);
		host[n] = '\0';
		if (inet_pton(AF_INET, host, a->a) == 1)
			a->af = AF_INET;
		else if (inet_pton(AF_INET6, host, a->a) == 1)
			a->af = AF_INET6;
	}
	if (a->af) {
		unsigned max = a->af == AF_INET ? 32 : 128;
		uint64_t p = max;
		const char *es;

		if (slash && xparse_u64(slash + 1, 0, max, &p, &es) < 0)
			return usage_error(cmd, "%s: '%s': prefix length %s (0..%u)", what, arg, es, max);
		a->addr = true;
		a->prefix = (unsigned)p;
	} else {
		/* a session name: what rtrs_clt_open and process_info_req accept */
		if (rtrs_check_pathname(arg) < 0)
			return usage_error(cmd, "%s: '%s' is neither an IP address (with an optional "
					   "/prefix) nor a session name (1-254 bytes, no '/' or '.')",
					   what, arg);
		snprintf(a->name, sizeof(a->name), "%s", arg);
	}
	c->nallow++;
	return EXIT_OK;
}

static bool prefix_match(const uint8_t *a, const uint8_t *b, unsigned bits)
{
	unsigned bytes = bits / 8, rest = bits % 8;

	if (memcmp(a, b, bytes))
		return false;
	return !rest || ((a[bytes] ^ b[bytes]) & (0xff00u >> rest) & 0xff) == 0;
}

int conf_allow(void *ctx, const char *peer, const char *sessname)
{
	const struct srv_conf *c = ctx;
	uint8_t a[16];
	int af = 0;
	bool names = false;

	if (!c->nallow)
		return 0;
	if (inet_pton(AF_INET, peer, a) == 1) {
		af = AF_INET;
	} else if (inet_pton(AF_INET6, peer, a) == 1) {
		static const uint8_t v4map[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

		af = AF_INET6;
		if (!memcmp(a, v4map, 12)) {	/* ::ffff:a.b.c.d is a.b.c.d */
			memmove(a, a + 12, 4);
			af = AF_INET;
		}
	}
	for (unsigned i = 0; i < c->nallow; i++) {
		const struct allow_ent *e = &c->allow[i];

		if (!e->addr) {
			names = true;
			if (sessname && !strcmp(sessname, e->name))
				return 0;
		} else if (e->af == af && prefix_match(e->a, a, e->prefix)) {
			return 0;
		}
	}
	/* before INFO_REQ the name is not known yet: a list with names lets
	 * the connection in and decides at INFO_REQ */
	return !sessname && names ? 0 : -EACCES;
}

/* --- the config file --------------------------------------------------- */

struct cctx {
	const char *cmd, *path;
};

static int bad(const struct cctx *x, const struct xnode *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int bad(const struct cctx *x, const struct xnode *n, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return usage_error(x->cmd, "%s: line %d: %s", x->path, xnode_line(n), msg);
}

/* A string or a list of strings: fn on each. */
static int each_str(const struct cctx *x, const struct xnode *n, const char *key,
		    struct srv_conf *c,
		    int (*fn)(struct srv_conf *, const char *, const char *, const char *))
{
	char what[300];

	snprintf(what, sizeof(what), "%s: line %d: %s", x->path, xnode_line(n), key);
	if (xnode_type(n) == XN_STR)
		return fn(c, x->cmd, what, xnode_str(n));
	if (xnode_type(n) != XN_LIST)
		return bad(x, n, "%s: a string or a list of strings", key);
	for (size_t i = 0; i < xnode_len(n); i++) {
		const struct xnode *e = xnode_at(n, i, NULL);
		int rc;

		if (xnode_type(e) != XN_STR)
			return bad(x, e, "%s: a list of strings", key);
		snprintf(what, sizeof(what), "%s: line %d: %s", x->path, xnode_line(e), key);
		rc = fn(c, x->cmd, what, xnode_str(e));
		if (rc)
			return rc;
	}
	return EXIT_OK;
}

/* One entry of exports: NAME=PATH[:ro] or {name, path, readonly}. */
static int export_entry(const struct cctx *x, const struct xnode *e, struct srv_conf *c)
{
	const struct xnode *name, *path, *ro;
	char what[300], err[256];
	bool r = false;

	snprintf(what, sizeof(what), "%s: line %d: exports", x->path, xnode_line(e));
	if (xnode_type(e) == XN_STR)
		return conf_add_export(c, x->cmd, what, xnode_str(e));
	if (xnode_type(e) != XN_MAP)
		return bad(x, e, "exports: NAME=PATH[:ro] or {name, path, readonly}");
	for (size_t k = 0; k < xnode_len(e); k++) {
		const char *key;

		xnode_at(e, k, &key);
		if (strcmp(key, "name") && strcmp(key, "path") && strcmp(key, "readonly"))
			return bad(x, xnode_get(e, key), "exports: unknown key '%s'", key);
	}
	name = xnode_get(e, "name");
	path = xnode_get(e, "path");
	ro = xnode_get(e, "readonly");
	if (!xnode_str(name) || !xnode_str(path))
		return bad(x, e, "exports: an entry needs a name and a path");
	if (ro && xnode_to_bool(ro, &r, err, sizeof(err)) < 0)
		return bad(x, ro, "exports: %s", err);
	return add_export(c, x->cmd, what, xnode_str(name), xnode_str(path), r);
}

/* A list of entries, or one entry standing for a list of one. */
static int exports(const struct cctx *x, const struct xnode *n, struct srv_conf *c)
{
	if (xnode_type(n) != XN_LIST)
		return export_entry(x, n, c);
	for (size_t i = 0; i < xnode_len(n); i++) {
		int rc = export_entry(x, xnode_at(n, i, NULL), c);

		if (rc)
			return rc;
	}
	return EXIT_OK;
}

static int u32_key(const struct cctx *x, const struct xnode *n, uint64_t min, uint64_t max,
		   bool size, uint32_t *out)
{
	char err[256];
	uint64_t v;

	if ((size ? xnode_to_size(n, min, max, &v, err, sizeof(err)) :
	     xnode_to_u64(n, min, max, &v, err, sizeof(err))) < 0)
		return bad(x, n, "%s", err);
	*out = (uint32_t)v;
	return EXIT_OK;
}

int conf_load(struct srv_conf *c, const char *cmd, const char *path)
{
	struct cctx x = { cmd, path };
	char err[512];
	struct xnode *root = xconf_load(path, err, sizeof(err));
	int rc = EXIT_OK;

	if (!root) {
		if (errno == EINVAL)
			return usage_error(cmd, "%s", err);
		return fail("%s", err);
	}
	for (size_t i = 0; i < xnode_len(root) && rc == EXIT_OK; i++) {
		const char *key;
		const struct xnode *n = xnode_at(root, i, &key);

		if (!strcmp(key, "listen")) {
			rc = each_str(&x, n, key, c, conf_add_listen);
		} else if (!strcmp(key, "exports")) {
			rc = exports(&x, n, c);
		} else if (!strcmp(key, "allow")) {
			rc = each_str(&x, n, key, c, conf_add_allow);
		} else if (!strcmp(key, "queue_depth")) {
			rc = u32_key(&x, n, 1, RTRS_MAX_SESS_QUEUE_DEPTH, false, &c->queue_depth);
		} else if (!strcmp(key, "chunk_size")) {
			rc = u32_key(&x, n, RTRS_MIN_CHUNK_SIZE, 1u << 28, true, &c->chunk_size);
		} else if (!strcmp(key, "hb_missed")) {
			rc = u32_key(&x, n, 1, 1000, false, &c->hb_missed);
		} else if (!strcmp(key, "io_threads")) {
			uint32_t v;

			rc = u32_key(&x, n, 0, MAX_IO_THREADS, false, &v);
			if (rc == EXIT_OK)
				c->io_threads = (int)v;
		} else if (!strcmp(key, "hb_interval")) {
			uint64_t ns;
			const char *es;

			if (!xnode_str(n) || xparse_duration(xnode_str(n), XTIME_NS_PER_MS, 10 * XTIME_NS_PER_MS,
							     3600000 * XTIME_NS_PER_MS, &ns, &es) < 0)
				rc = bad(&x, n, "hb_interval: '%s' %s (10ms..1h; a bare number is ms)",
					 xnode_str(n) ? xnode_str(n) : "", xnode_str(n) ? es : "missing");
			else
				c->hb_interval_ms = (uint32_t)(ns / XTIME_NS_PER_MS);
		} else if (!strcmp(key, "always_invalidate")) {
			bool b;

			if (xnode_to_bool(n, &b, err, sizeof(err)) < 0)
				rc = bad(&x, n, "%s", err);
			else
				c->always_invalidate = b;
		} else if (!strcmp(key, "dev_search_path")) {
			if (!xnode_str(n) || !xnode_str(n)[0] ||
			    strlen(xnode_str(n)) >= sizeof(c->search))
				rc = bad(&x, n, "dev_search_path: a directory of 1 to %zu bytes",
					 sizeof(c->search) - 1);
			else
				snprintf(c->search, sizeof(c->search), "%s", xnode_str(n));
		} else if (!strcmp(key, "ctl")) {
			if (!xnode_str(n) || strlen(xnode_str(n)) >= sizeof(c->ctl))
				rc = bad(&x, n, "ctl: a socket path of at most %zu bytes",
					 sizeof(c->ctl) - 1);
			else
				snprintf(c->ctl, sizeof(c->ctl), "%s", xnode_str(n));
		} else {
			rc = bad(&x, n, "unknown key '%s' (listen, exports, queue_depth, chunk_size, "
				 "always_invalidate, allow, hb_interval, hb_missed, io_threads, "
				 "dev_search_path, ctl)",
				 key);
		}
	}
	xnode_free(root);
	return rc;
}
