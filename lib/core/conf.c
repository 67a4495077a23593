#include "core/conf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

struct frame {
	struct xnode *n;
	char *key; /* pending map key, waiting for its value */
	int key_line;
};

struct cparse {
	yaml_parser_t p;
	struct xnode *root;
	struct frame stack[XCONF_MAX_DEPTH];
	int depth;
	size_t nodes;
	int docs;
	const char *buf;
	size_t len;
	char *err;
	size_t errlen;
};

static int cerr(struct cparse *c, const yaml_mark_t *m, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int cerr(struct cparse *c, const yaml_mark_t *m, const char *fmt, ...)
{
	va_list ap;
	int off;

	if (!c->err || !c->errlen)
		return -1;
	off = snprintf(c->err, c->errlen, "line %zu column %zu: ", m->line + 1, m->column + 1);
	if (off < 0 || (size_t)off >= c->errlen)
		return -1;
	va_start(ap, fmt);
	vsnprintf(c->err + off, c->errlen - (size_t)off, fmt, ap);
	va_end(ap);
	return -1;
}

static int parser_err(struct cparse *c)
{
	yaml_parser_t *p = &c->p;

	if (p->error == YAML_MEMORY_ERROR || !p->problem)
		return cerr(c, &p->problem_mark, "out of memory");
	if (p->context)
		return cerr(c, &p->problem_mark, "%s (%s at line %zu)", p->problem, p->context,
			    p->context_mark.line + 1);
	/* Reader errors (bad UTF-8, control characters) carry only a byte
	 * offset; derive the line and column from the text. */
	if (p->error == YAML_READER_ERROR) {
		yaml_mark_t m = { 0 };

		for (size_t i = 0; i < p->problem_offset && i < c->len; i++) {
			if (c->buf[i] == '\n') {
				m.line++;
				m.column = 0;
			} else if (((unsigned char)c->buf[i] & 0xc0) != 0x80) {
				m.column++;
			}
		}
		return cerr(c, &m, "%s", p->problem);
	}
	return cerr(c, &p->problem_mark, "%s", p->problem);
}

/* Attaches a new node under the top frame: as the value of the pending key of
 * a map, or appended to a list. */
static struct xnode *attach(struct cparse *c, const yaml_event_t *ev, enum xnode_type t,
			    const char *val)
{
	struct frame *top = &c->stack[c->depth - 1];
	struct xnode *n;
	int line;

	if (++c->nodes > XCONF_MAX_NODES) {
		cerr(c, &ev->start_mark, "too many nodes (max %d)", XCONF_MAX_NODES);
		return NULL;
	}
	if (xnode_type(top->n) == XN_MAP) {
		line = top->key_line;
		if (t == XN_MAP)
			n = xnode_set_map(top->n, top->key);
		else if (t == XN_LIST)
			n = xnode_set_list(top->n, top->key);
		else
			n = xnode_set_str(top->n, top->key, val);
		free(top->key);
		top->key = NULL;
	} else {
		line = (int)ev->start_mark.line + 1;
		if (t == XN_MAP)
			n = xnode_push_map(top->n);
		else if (t == XN_LIST)
			n = xnode_push_list(top->n);
		else
			n = xnode_push_str(top->n, val);
	}
	if (!n) {
		cerr(c, &ev->start_mark, "out of memory");
		return NULL;
	}
	xnode_set_line(n, line);
	return n;
}

static int on_scalar(struct cparse *c, const yaml_event_t *ev)
{
	const char *val = (const char *)ev->data.scalar.value;
	size_t len = ev->data.scalar.length;
	struct frame *top;

	if (memchr(val, '\0', len))
		return cerr(c, &ev->start_mark, "NUL character in a value");
	if (c->depth == 0) {
		/* A document holding nothing ("---" alone) is an empty config. */
		if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
		    (len == 0 || strcmp(val, "~") == 0 || strcmp(val, "null") == 0)) {
			c->root = xnode_map();
			return c->root ? 0 : cerr(c, &ev->start_mark, "out of memory");
		}
		return cerr(c, &ev->start_mark, "the top level must be a mapping");
	}
	top = &c->stack[c->depth - 1];
	if (xnode_type(top->n) == XN_MAP && !top->key) {
		const struct xnode *prev = xnode_get(top->n, val);

		if (prev)
			return cerr(c, &ev->start_mark, "duplicate key '%s' (first at line %d)", val,
				    xnode_line(prev));
		top->key = strdup(val);
		if (!top->key)
			return cerr(c, &ev->start_mark, "out of memory");
		top->key_line = (int)ev->start_mark.line + 1;
		return 0;
	}
	return attach(c, ev, XN_STR, val) ? 0 : -1;
}

static int on_start(struct cparse *c, const yaml_event_t *ev, enum xnode_type t)
{
	struct xnode *n;

	if (c->depth == 0) {
		if (t != XN_MAP)
			return cerr(c, &ev->start_mark, "the top level must be a mapping");
		n = c->root = xnode_map();
		if (!n)
			return cerr(c, &ev->start_mark, "out of memory");
		xnode_set_line(n, (int)ev->start_mark.line + 1);
		c->nodes++;
	} else {
		struct frame *top = &c->stack[c->depth - 1];

		if (xnode_type(top->n) == XN_MAP && !top->key)
			return cerr(c, &ev->start_mark, "a key must be a scalar, not a %s",
				    t == XN_MAP ? "mapping" : "list");
		if (c->depth == XCONF_MAX_DEPTH)
			return cerr(c, &ev->start_mark, "nesting deeper than %d levels",
				    XCONF_MAX_DEPTH);
		n = attach(c, ev, t, NULL);
		if (!n)
			return -1;
	}
	c->stack[c->depth].n = n;
	c->stack[c->depth].key = NULL;
	c->depth++;
	return 0;
}

static int on_event(struct cparse *c, const yaml_event_t *ev)
{
	const yaml_char_t *anchor = NULL;

	switch (ev->type) {
	case YAML_DOCUMENT_START_EVENT:
		if (c->docs++)
			return cerr(c, &ev->start_mark, "multiple documents are not supported");
		return 0;
	case YAML_ALIAS_EVENT:
		return cerr(c, &ev->start_mark, "aliases (*%s) are not supported",
			    (const char *)ev->data.alias.anchor);
	case YAML_SCALAR_EVENT:
		anchor = ev->data.scalar.anchor;
		break;
	case YAML_SEQUENCE_START_EVENT:
		anchor = ev->data.sequence_start.anchor;
		break;
	case YAML_MAPPING_START_EVENT:
		anchor = ev->data.mapping_start.anchor;
		break;
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
		c->depth--;
		return 0;
	default:
		return 0;
	}
	/* Anchors are only useful with aliases, and aliases make "which line
	 * set this value" ambiguous; configs are short enough without them. */
	if (anchor)
		return cerr(c, &ev->start_mark, "anchors (&%s) are not supported",
			    (const char *)anchor);
	if (ev->type == YAML_SCALAR_EVENT)
		return on_scalar(c, ev);
	return on_start(c, ev, ev->type == YAML_MAPPING_START_EVENT ? XN_MAP : XN_LIST);
}

struct xnode *xconf_parse(const char *buf, size_t len, char *err, size_t errlen)
{
	struct cparse c = { .buf = buf, .len = len, .err = err, .errlen = errlen };
	struct xnode *root = NULL;
	bool done = false;
	yaml_event_t ev;

	if (err && errlen)
		err[0] = '\0';
	if (!yaml_parser_initialize(&c.p)) {
		if (err && errlen)
			snprintf(err, errlen, "out of memory");
		return NULL;
	}
	yaml_parser_set_input_string(&c.p, (const unsigned char *)buf, len);
	while (!done) {
		int r;

		if (!yaml_parser_parse(&c.p, &ev)) {
			parser_err(&c);
			goto out_free_tree;
		}
		done = ev.type == YAML_STREAM_END_EVENT;
		r = on_event(&c, &ev);
		yaml_event_delete(&ev);
		if (r < 0)
			goto out_free_tree;
	}
	root = c.root ? c.root : xnode_map();
	if (!root && err && errlen)
		snprintf(err, errlen, "out of memory");
	yaml_parser_delete(&c.p);
	return root;

out_free_tree:
	for (int i = 0; i < c.depth; i++)
		free(c.stack[i].key);
	xnode_free(c.root);
	yaml_parser_delete(&c.p);
	return NULL;
}

static int read_file(int fd, char **out, size_t *outlen)
{
	size_t cap = 64 * 1024, len = 0;
	char *buf = malloc(cap);

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *nb;

			if (cap > XCONF_MAX_FILE) {
				free(buf);
				return -EFBIG;
			}
			nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;

			free(buf);
			return -e;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > XCONF_MAX_FILE) {
		free(buf);
		return -EFBIG;
	}
	*out = buf;
	*outlen = len;
	return 0;
}

struct xnode *xconf_load(const char *path, char *err, size_t errlen)
{
	char msg[512];
	struct xnode *root;
	size_t len = 0;
	char *buf = NULL;
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		goto out_err;
	}
	r = read_file(fd, &buf, &len);
	close(fd);
	if (r < 0)
		goto out_err;
	root = xconf_parse(buf, len, msg, sizeof(msg));
	free(buf);
	if (!root) {
		if (err && errlen)
			snprintf(err, errlen, "%s: %s", path, msg);
		errno = EINVAL;
	}
	return root;

out_err:
	if (err && errlen) {
		if (r == -EFBIG)
			snprintf(err, errlen, "%s: file too large (max %u MiB)", path,
				 XCONF_MAX_FILE >> 20);
		else
			snprintf(err, errlen, "%s: %s", path, strerror(-r));
	}
	errno = -r;
	return NULL;
}
