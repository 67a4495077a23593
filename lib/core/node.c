#include "core/node.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parse.h"

struct xnode {
	enum xnode_type type;
	int line;
	int prec;
	char *key; /* set when this node is a map member */
	union {
		char *s;
		uint64_t u;
		int64_t i;
		double d;
		bool b;
		struct {
			struct xnode **v;
			size_t n, cap;
			/* Maps past MAP_INDEX_MIN entries get an open-addressing
			 * index of (position + 1), so building a 100000-key
			 * config map is not quadratic. */
			uint32_t *idx;
			size_t idxcap;
		} c;
	};
};

#define MAP_INDEX_MIN 16

static struct xnode *node_new(enum xnode_type t)
{
	struct xnode *n = calloc(1, sizeof(*n));

	if (n)
		n->type = t;
	return n;
}

struct xnode *xnode_map(void)
{
	return node_new(XN_MAP);
}

struct xnode *xnode_list(void)
{
	return node_new(XN_LIST);
}

void xnode_free(struct xnode *n)
{
	if (!n)
		return;
	if (n->type == XN_STR) {
		free(n->s);
	} else if (n->type == XN_MAP || n->type == XN_LIST) {
		for (size_t i = 0; i < n->c.n; i++)
			xnode_free(n->c.v[i]);
		free(n->c.v);
		free(n->c.idx);
	}
	free(n->key);
	free(n);
}

static uint64_t hash_str(const char *s)
{
	uint64_t h = 14695981039346656037ull; /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static void index_insert(uint32_t *idx, size_t cap, const char *key, size_t pos)
{
	size_t i = (size_t)hash_str(key) & (cap - 1);

	while (idx[i])
		i = (i + 1) & (cap - 1);
	idx[i] = (uint32_t)(pos + 1);
}

static int index_rebuild(struct xnode *m, size_t cap)
{
	uint32_t *idx = calloc(cap, sizeof(*idx));

	if (!idx)
		return -1;
	for (size_t i = 0; i < m->c.n; i++)
		index_insert(idx, cap, m->c.v[i]->key, i);
	free(m->c.idx);
	m->c.idx = idx;
	m->c.idxcap = cap;
	return 0;
}

static struct xnode **map_find(const struct xnode *m, const char *key)
{
	if (m->c.idx) {
		size_t mask = m->c.idxcap - 1;

		for (size_t i = (size_t)hash_str(key) & mask; m->c.idx[i]; i = (i + 1) & mask) {
			struct xnode **slot = &m->c.v[m->c.idx[i] - 1];

			if (strcmp((*slot)->key, key) == 0)
				return slot;
		}
		return NULL;
	}
	for (size_t i = 0; i < m->c.n; i++)
		if (strcmp(m->c.v[i]->key, key) == 0)
			return &m->c.v[i];
	return NULL;
}

static int cont_append(struct xnode *c, struct xnode *child)
{
	if (c->c.n == c->c.cap) {
		size_t cap = c->c.cap ? c->c.cap * 2 : 4;
		struct xnode **v;

		if (cap > UINT32_MAX - 1)
			return -1;
		v = realloc(c->c.v, cap * sizeof(*v));
		if (!v)
			return -1;
		c->c.v = v;
		c->c.cap = cap;
	}
	c->c.v[c->c.n++] = child;
	return 0;
}

/* Takes ownership of child in every case. */
static struct xnode *map_put(struct xnode *map, const char *key, struct xnode *child)
{
	struct xnode **slot;

	if (!child)
		return NULL;
	if (!map || map->type != XN_MAP || !key) {
		xnode_free(child);
		errno = EINVAL;
		return NULL;
	}
	slot = map_find(map, key);
	if (slot) {
		child->key = (*slot)->key;
		(*slot)->key = NULL;
		xnode_free(*slot);
		*slot = child;
		return child;
	}
	child->key = strdup(key);
	if (!child->key || cont_append(map, child) < 0)
		goto out_free_child;
	if (map->c.idx && map->c.n * 2 > map->c.idxcap) {
		if (index_rebuild(map, map->c.idxcap * 2) < 0)
			goto out_pop;
	} else if (map->c.idx) {
		index_insert(map->c.idx, map->c.idxcap, child->key, map->c.n - 1);
	} else if (map->c.n >= MAP_INDEX_MIN) {
		if (index_rebuild(map, MAP_INDEX_MIN * 4) < 0)
			goto out_pop;
	}
	return child;

out_pop:
	map->c.n--;
out_free_child:
	xnode_free(child);
	errno = ENOMEM;
	return NULL;
}

static struct xnode *list_put(struct xnode *list, struct xnode *child)
{
	if (!child)
		return NULL;
	if (!list || list->type != XN_LIST) {
		xnode_free(child);
		errno = EINVAL;
		return NULL;
	}
	if (cont_append(list, child) < 0) {
		xnode_free(child);
		errno = ENOMEM;
		return NULL;
	}
	return child;
}

static struct xnode *new_str(const char *val)
{
	struct xnode *n;

	if (!val)
		return node_new(XN_NULL);
	n = node_new(XN_STR);
	if (n && !(n->s = strdup(val))) {
		free(n);
		return NULL;
	}
	return n;
}

static struct xnode *new_u64(uint64_t v)
{
	struct xnode *n = node_new(XN_U64);

	if (n)
		n->u = v;
	return n;
}

static struct xnode *new_i64(int64_t v)
{
	struct xnode *n = node_new(XN_I64);

	if (n)
		n->i = v;
	return n;
}

static struct xnode *new_f64(double v, int prec)
{
	struct xnode *n = node_new(XN_F64);

	if (n) {
		n->d = v;
		n->prec = prec < 0 ? 0 : prec > 17 ? 17 : prec;
	}
	return n;
}

static struct xnode *new_bool(bool v)
{
	struct xnode *n = node_new(XN_BOOL);

	if (n)
		n->b = v;
	return n;
}

struct xnode *xnode_set_str(struct xnode *map, const char *key, const char *val)
{
	return map_put(map, key, new_str(val));
}

struct xnode *xnode_set_strf(struct xnode *map, const char *key, const char *fmt, ...)
{
	struct xnode *n = node_new(XN_STR);
	va_list ap;
	int r;

	if (!n)
		return NULL;
	va_start(ap, fmt);
	r = vasprintf(&n->s, fmt, ap);
	va_end(ap);
	if (r < 0) {
		free(n);
		errno = ENOMEM;
		return NULL;
	}
	return map_put(map, key, n);
}

struct xnode *xnode_set_u64(struct xnode *map, const char *key, uint64_t v)
{
	return map_put(map, key, new_u64(v));
}

struct xnode *xnode_set_i64(struct xnode *map, const char *key, int64_t v)
{
	return map_put(map, key, new_i64(v));
}

struct xnode *xnode_set_f64(struct xnode *map, const char *key, double v, int prec)
{
	return map_put(map, key, new_f64(v, prec));
}

struct xnode *xnode_set_bool(struct xnode *map, const char *key, bool v)
{
	return map_put(map, key, new_bool(v));
}

struct xnode *xnode_set_null(struct xnode *map, const char *key)
{
	return map_put(map, key, node_new(XN_NULL));
}

struct xnode *xnode_set_node(struct xnode *map, const char *key, struct xnode *child)
{
	if (child && child->key) {	/* already someone's member */
		errno = EINVAL;
		return NULL;
	}
	return map_put(map, key, child);
}

struct xnode *xnode_push_node(struct xnode *list, struct xnode *child)
{
	if (child && child->key) {
		errno = EINVAL;
		return NULL;
	}
	return list_put(list, child);
}

struct xnode *xnode_set_map(struct xnode *map, const char *key)
{
	return map_put(map, key, node_new(XN_MAP));
}

struct xnode *xnode_set_list(struct xnode *map, const char *key)
{
	return map_put(map, key, node_new(XN_LIST));
}

struct xnode *xnode_push_map(struct xnode *list)
{
	return list_put(list, node_new(XN_MAP));
}

struct xnode *xnode_push_list(struct xnode *list)
{
	return list_put(list, node_new(XN_LIST));
}

struct xnode *xnode_push_str(struct xnode *list, const char *val)
{
	return list_put(list, new_str(val));
}

struct xnode *xnode_push_u64(struct xnode *list, uint64_t v)
{
	return list_put(list, new_u64(v));
}

struct xnode *xnode_push_i64(struct xnode *list, int64_t v)
{
	return list_put(list, new_i64(v));
}

struct xnode *xnode_push_f64(struct xnode *list, double v, int prec)
{
	return list_put(list, new_f64(v, prec));
}

struct xnode *xnode_push_bool(struct xnode *list, bool v)
{
	return list_put(list, new_bool(v));
}

enum xnode_type xnode_type(const struct xnode *n)
{
	return n ? n->type : XN_NULL;
}

const struct xnode *xnode_get(const struct xnode *map, const char *key)
{
	struct xnode **slot;

	if (!map || map->type != XN_MAP || !key)
		return NULL;
	slot = map_find(map, key);
	return slot ? *slot : NULL;
}

size_t xnode_len(const struct xnode *n)
{
	return n && (n->type == XN_MAP || n->type == XN_LIST) ? n->c.n : 0;
}

const struct xnode *xnode_at(const struct xnode *n, size_t i, const char **key)
{
	const struct xnode *c;

	if (key)
		*key = NULL;
	if (i >= xnode_len(n))
		return NULL;
	c = n->c.v[i];
	if (key)
		*key = c->key;
	return c;
}

const char *xnode_str(const struct xnode *n)
{
	return n && n->type == XN_STR ? n->s : NULL;
}

const char *xnode_key(const struct xnode *n)
{
	return n ? n->key : NULL;
}

uint64_t xnode_u64(const struct xnode *n)
{
	return n && n->type == XN_U64 ? n->u : 0;
}

int64_t xnode_i64(const struct xnode *n)
{
	return n && n->type == XN_I64 ? n->i : 0;
}

double xnode_f64(const struct xnode *n, int *prec)
{
	if (prec)
		*prec = n && n->type == XN_F64 ? n->prec : 0;
	return n && n->type == XN_F64 ? n->d : 0.0;
}

bool xnode_bool(const struct xnode *n)
{
	return n && n->type == XN_BOOL && n->b;
}

int xnode_line(const struct xnode *n)
{
	return n ? n->line : 0;
}

void xnode_set_line(struct xnode *n, int line)
{
	if (n)
		n->line = line;
}

static const char *type_name(enum xnode_type t)
{
	static const char *const names[] = {
		[XN_NULL] = "null",	[XN_STR] = "a string", [XN_U64] = "a number",
		[XN_I64] = "a number",	[XN_F64] = "a number", [XN_BOOL] = "a boolean",
		[XN_MAP] = "a map",	[XN_LIST] = "a list",
	};
	return names[t];
}

static int conv_err(const struct xnode *n, char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int conv_err(const struct xnode *n, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	int off;

	if (!err || !errlen)
		return -1;
	off = snprintf(err, errlen, "%s: ", n && n->key ? n->key : "value");
	if (off < 0 || (size_t)off >= errlen)
		return -1;
	va_start(ap, fmt);
	vsnprintf(err + off, errlen - (size_t)off, fmt, ap);
	va_end(ap);
	return -1;
}

typedef int (*u64_parser)(const char *s, uint64_t min, uint64_t max, uint64_t *out,
			  const char **errstr);

static int to_u64(const struct xnode *n, u64_parser parse, const char *what, uint64_t min,
		  uint64_t max, uint64_t *out, char *err, size_t errlen)
{
	const char *why;
	char num[24];
	const char *text;
	uint64_t v;

	if (!n)
		return conv_err(n, err, errlen, "missing");
	switch (n->type) {
	case XN_STR:
		text = n->s;
		if (parse(n->s, min, max, &v, &why) == 0) {
			*out = v;
			return 0;
		}
		break;
	case XN_U64:
	case XN_I64:
		if (n->type == XN_U64)
			snprintf(num, sizeof(num), "%" PRIu64, n->u);
		else
			snprintf(num, sizeof(num), "%" PRId64, n->i);
		text = num;
		v = n->u;
		if (n->type == XN_I64 && n->i < 0)
			why = "too small";
		else if (v < min)
			why = "too small";
		else if (v > max)
			why = "too large";
		else {
			*out = v;
			return 0;
		}
		break;
	default:
		return conv_err(n, err, errlen, "expected %s, got %s", what, type_name(n->type));
	}
	if (strcmp(why, "too small") == 0)
		return conv_err(n, err, errlen, "'%s' is too small (min %" PRIu64 ")", text, min);
	if (strcmp(why, "too large") == 0)
		return conv_err(n, err, errlen, "'%s' is too large (max %" PRIu64 ")", text, max);
	return conv_err(n, err, errlen, "invalid %s '%s'", what, text);
}

int xnode_to_u64(const struct xnode *n, uint64_t min, uint64_t max, uint64_t *out, char *err,
		 size_t errlen)
{
	return to_u64(n, xparse_u64, "number", min, max, out, err, errlen);
}

int xnode_to_size(const struct xnode *n, uint64_t min, uint64_t max, uint64_t *out, char *err,
		  size_t errlen)
{
	return to_u64(n, xparse_size, "size", min, max, out, err, errlen);
}

int xnode_to_bool(const struct xnode *n, bool *out, char *err, size_t errlen)
{
	const char *why;

	if (!n)
		return conv_err(n, err, errlen, "missing");
	if (n->type == XN_BOOL) {
		*out = n->b;
		return 0;
	}
	if (n->type != XN_STR)
		return conv_err(n, err, errlen, "expected a boolean, got %s", type_name(n->type));
	if (xparse_bool(n->s, out, &why) < 0)
		return conv_err(n, err, errlen, "invalid boolean '%s' (use yes or no)", n->s);
	return 0;
}
