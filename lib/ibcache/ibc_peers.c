/* Peer directory and rendezvous hashing (ibc_peers.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conf.h"
#include "core/node.h"
#include "ibcache/ibc_peers.h"

void ibc_dir_init(struct ibc_dir *d)
{
	memset(d, 0, sizeof(*d));
}

void ibc_dir_free(struct ibc_dir *d)
{
	for (uint32_t i = 0; i < d->nexports; i++)
		free(d->exports[i].origin);
	free(d->exports);
	ibc_dir_init(d);
}

static uint64_t fnv64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

int ibc_peer_parse(const char *s, struct ibc_peer *p, char *err, size_t errlen)
{
	memset(p, 0, sizeof(*p));
	if (xuri_parse(s, IBC_DEFAULT_PORT, &p->u, err, errlen) < 0)
		return -EINVAL;
	if (p->u.scheme != XURI_UDP && p->u.scheme != XURI_UD) {
		snprintf(err, errlen, "%s: a peer is udp://HOST[:PORT] or ud://HOST[:PORT]", s);
		return -EINVAL;
	}
	if (!p->u.port) {
		snprintf(err, errlen, "%s: port 0 names no peer", s);
		return -EINVAL;
	}
	xuri_format(&p->u, p->name, sizeof(p->name));
	p->key = fnv64(p->name);
	return 0;
}

/* The index of the peer named s, added when new. */
static int peer_index(struct ibc_dir *d, const char *s, char *err, size_t errlen)
{
	struct ibc_peer p;

	if (ibc_peer_parse(s, &p, err, errlen))
		return -EINVAL;
	for (uint32_t i = 0; i < d->npeers; i++)
		if (!strcmp(d->peers[i].name, p.name))
			return (int)i;
	if (d->npeers == IBC_PEERS_MAX) {
		snprintf(err, errlen, "%s: more than %u peers", s, IBC_PEERS_MAX);
		return -E2BIG;
	}
	d->peers[d->npeers] = p;
	return (int)d->npeers++;
}

int ibc_dir_add_peer(struct ibc_dir *d, const char *uri, char *err, size_t errlen)
{
	int i = peer_index(d, uri, err, errlen);

	if (i < 0)
		return i;
	for (uint32_t k = 0; k < d->ncli; k++)
		if (d->cli[k] == i)
			return 0;
	d->cli[d->ncli++] = (uint16_t)i;
	return 0;
}

static int bad(char *err, size_t errlen, const struct xnode *n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int bad(char *err, size_t errlen, const struct xnode *n, const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(err, errlen, "line %d: %s", xnode_line(n), msg);
	return -EINVAL;
}

static int parse_export(struct ibc_dir *d, const struct xnode *e, char *err, size_t errlen)
{
	struct ibc_dir_export *x;
	const struct xnode *pfx, *org, *peers;
	char perr[300];

	if (xnode_type(e) != XN_MAP)
		return bad(err, errlen, e, "exports: each entry is a map {prefix, origin, peers}");
	for (size_t k = 0; k < xnode_len(e); k++) {
		const char *key;
		const struct xnode *v = xnode_at(e, k, &key);

		if (strcmp(key, "prefix") && strcmp(key, "origin") && strcmp(key, "peers"))
			return bad(err, errlen, v, "exports: unknown key '%s' (prefix, origin, peers)",
				   key);
	}
	if (d->nexports == IBC_EXPORTS_MAX)
		return bad(err, errlen, e, "more than %u exports", IBC_EXPORTS_MAX);
	x = &d->exports[d->nexports];
	memset(x, 0, sizeof(*x));
	x->line = xnode_line(e);
	pfx = xnode_get(e, "prefix");
	org = xnode_get(e, "origin");
	peers = xnode_get(e, "peers");
	if (pfx) {
		const char *s = xnode_str(pfx);

		if (!s)
			return bad(err, errlen, pfx, "prefix: a path");
		while (*s == '/')
			s++;	/* "/" and "" both mean the whole namespace */
		if (*s && ibc_path_norm(s, x->prefix, sizeof(x->prefix), perr, sizeof(perr)))
			return bad(err, errlen, pfx, "prefix: %s", perr);
	}
	if (org) {
		if (!xnode_str(org) || !*xnode_str(org))
			return bad(err, errlen, org, "origin: a directory path");
		if (!(x->origin = strdup(xnode_str(org))))
			return bad(err, errlen, org, "out of memory");
	}
	d->nexports++;	/* from here on ibc_dir_free frees origin */
	if (!peers)
		return 0;
	if (xnode_type(peers) == XN_STR)
		return bad(err, errlen, peers, "peers: a list of URIs ([udp://HOST:PORT, ...])");
	if (xnode_type(peers) != XN_LIST)
		return bad(err, errlen, peers, "peers: a list of URIs");
	for (size_t i = 0; i < xnode_len(peers); i++) {
		const struct xnode *p = xnode_at(peers, i, NULL);
		int idx;
		bool dup = false;

		if (!xnode_str(p))
			return bad(err, errlen, p, "peers: a list of URIs");
		idx = peer_index(d, xnode_str(p), perr, sizeof(perr));
		if (idx < 0)
			return bad(err, errlen, p, "%s", perr);
		for (uint32_t k = 0; k < x->npeers; k++)
			dup |= x->peer[k] == idx;
		if (!dup)
			x->peer[x->npeers++] = (uint16_t)idx;
	}
	return 0;
}

int ibc_dir_parse(struct ibc_dir *d, const char *buf, size_t len, char *err, size_t errlen)
{
	struct xnode *root = xconf_parse(buf, len, err, errlen);
	int rc = 0;

	if (!root)
		return -EINVAL;
	for (size_t i = 0; i < xnode_len(root) && !rc; i++) {
		const char *key;
		const struct xnode *n = xnode_at(root, i, &key);
		char e2[256];

		if (!strcmp(key, "block")) {
			if (xnode_to_size(n, 4096, 1ull << 30, &d->block, e2, sizeof(e2)) < 0)
				rc = bad(err, errlen, n, "%s", e2);
		} else if (!strcmp(key, "exports")) {
			if (xnode_type(n) != XN_LIST) {
				rc = bad(err, errlen, n, "exports: a list of {prefix, origin, peers}");
				break;
			}
			if (!d->exports &&
			    !(d->exports = calloc(IBC_EXPORTS_MAX, sizeof(*d->exports)))) {
				rc = bad(err, errlen, n, "out of memory");
				break;
			}
			for (size_t k = 0; k < xnode_len(n) && !rc; k++)
				rc = parse_export(d, xnode_at(n, k, NULL), err, errlen);
		} else {
			rc = bad(err, errlen, n, "unknown key '%s' (block, exports)", key);
		}
	}
	xnode_free(root);
	return rc;
}

int ibc_dir_load(struct ibc_dir *d, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL, e2[400];
	size_t len;
	int rc;

	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	buf = malloc(XCONF_MAX_FILE + 1);
	if (!buf) {
		fclose(f);
		snprintf(err, errlen, "%s: out of memory", path);
		return -ENOMEM;
	}
	len = fread(buf, 1, XCONF_MAX_FILE + 1, f);
	rc = ferror(f) ? -EIO : len > XCONF_MAX_FILE ? -EFBIG : 0;
	fclose(f);
	if (rc) {
		snprintf(err, errlen, "%s: %s", path, rc == -EFBIG ? "larger than 4 MiB" :
			 "read error");
		free(buf);
		return rc;
	}
	rc = ibc_dir_parse(d, buf, len, e2, sizeof(e2));
	if (rc)
		snprintf(err, errlen, "%s: %s", path, e2);
	free(buf);
	return rc;
}

/* Whole components: "data" matches "data" and "data/x", not "database". */
static bool prefix_matches(const char *pfx, const char *path)
{
	size_t n = strlen(pfx);

	if (!n)
		return true;
	return !strncmp(pfx, path, n) && (path[n] == 0 || path[n] == '/');
}

uint32_t ibc_dir_find(const struct ibc_dir *d, const char *normpath, uint16_t *out,
		      char **origin)
{
	const struct ibc_dir_export *best = NULL;
	uint32_t n = 0;

	*origin = NULL;
	for (uint32_t i = 0; i < d->nexports; i++) {
		const struct ibc_dir_export *x = &d->exports[i];

		if (prefix_matches(x->prefix, normpath) &&
		    (!best || strlen(x->prefix) > strlen(best->prefix)))
			best = x;
	}
	if (best) {
		for (uint32_t i = 0; i < best->npeers; i++)
			out[n++] = best->peer[i];
		if (best->origin) {
			const char *rest = normpath + strlen(best->prefix);
			size_t l;

			while (*rest == '/')
				rest++;
			l = strlen(best->origin) + strlen(rest) + 2;
			if ((*origin = malloc(l)))
				snprintf(*origin, l, "%s%s%s", best->origin,
					 *rest && best->origin[strlen(best->origin) - 1] != '/' ? "/" : "",
					 rest);
		}
	}
	for (uint32_t i = 0; i < d->ncli; i++) {
		bool dup = false;

		for (uint32_t k = 0; k < n; k++)
			dup |= out[k] == d->cli[i];
		if (!dup && n < IBC_PEERS_MAX)
			out[n++] = d->cli[i];
	}
	return n;
}

/* splitmix64's finalizer: every input bit moves every output bit */
static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

uint64_t ibc_rdv_score(uint64_t peer_key, uint64_t ino, uint64_t block)
{
	return mix(peer_key ^ mix(ino ^ mix(block + 0x9e3779b97f4a7c15ull)));
}

void ibc_rdv_rank(const uint64_t *keys, uint16_t *idx, uint32_t n, uint64_t ino, uint64_t block)
{
	uint64_t sc[IBC_PEERS_MAX];

	if (n > IBC_PEERS_MAX)
		n = IBC_PEERS_MAX;
	for (uint32_t i = 0; i < n; i++)
		sc[i] = ibc_rdv_score(keys[idx[i]], ino, block);
	/* insertion sort: a handful of peers */
	for (uint32_t i = 1; i < n; i++) {
		uint64_t s = sc[i];
		uint16_t v = idx[i];
		uint32_t j = i;

		while (j && (sc[j - 1] < s || (sc[j - 1] == s && idx[j - 1] > v))) {
			sc[j] = sc[j - 1];
			idx[j] = idx[j - 1];
			j--;
		}
		sc[j] = s;
		idx[j] = v;
	}
}
