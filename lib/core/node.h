/* One small ordered value tree, used both for config input (xconf_parse) and
 * for structured output (xemit): maps keep insertion order, lists, scalars.
 *
 * Setters and appenders return the new child, or NULL with errno set
 * (ENOMEM, or EINVAL when the parent is NULL or of the wrong type).  A node
 * belongs to exactly one parent; freeing the root frees everything. */
#ifndef XPRT_CORE_NODE_H
#define XPRT_CORE_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum xnode_type { XN_NULL, XN_STR, XN_U64, XN_I64, XN_F64, XN_BOOL, XN_MAP, XN_LIST };

struct xnode;

struct xnode *xnode_map(void);
struct xnode *xnode_list(void);
void xnode_free(struct xnode *n);

/* Map setters: the key is copied; setting an existing key replaces its value
 * in place (the key keeps its position).  A NULL val makes an XN_NULL. */
struct xnode *xnode_set_str(struct xnode *map, const char *key, const char *val);
struct xnode *xnode_set_strf(struct xnode *map, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
struct xnode *xnode_set_u64(struct xnode *map, const char *key, uint64_t v);
struct xnode *xnode_set_i64(struct xnode *map, const char *key, int64_t v);
/* prec: digits after the decimal point in every output format (0..17). */
struct xnode *xnode_set_f64(struct xnode *map, const char *key, double v, int prec);
struct xnode *xnode_set_bool(struct xnode *map, const char *key, bool v);
struct xnode *xnode_set_null(struct xnode *map, const char *key);
struct xnode *xnode_set_map(struct xnode *map, const char *key);
struct xnode *xnode_set_list(struct xnode *map, const char *key);

/* Adopt a root node built elsewhere as a member: the parent owns it from
 * then on (on failure it is freed).  NULL + EINVAL if child already has a
 * parent's key. */
struct xnode *xnode_set_node(struct xnode *map, const char *key, struct xnode *child);
struct xnode *xnode_push_node(struct xnode *list, struct xnode *child);

/* List appenders. */
struct xnode *xnode_push_map(struct xnode *list);
struct xnode *xnode_push_list(struct xnode *list);
struct xnode *xnode_push_str(struct xnode *list, const char *val);
struct xnode *xnode_push_u64(struct xnode *list, uint64_t v);
struct xnode *xnode_push_i64(struct xnode *list, int64_t v);
struct xnode *xnode_push_f64(struct xnode *list, double v, int prec);
struct xnode *xnode_push_bool(struct xnode *list, bool v);

/* Reading.  All accept NULL. */
enum xnode_type xnode_type(const struct xnode *n);                         /* XN_NULL for NULL */
const struct xnode *xnode_get(const struct xnode *map, const char *key);   /* NULL if absent or not a map */
size_t xnode_len(const struct xnode *n);                                   /* list/map element count, else 0 */
const struct xnode *xnode_at(const struct xnode *n, size_t i, const char **key); /* key NULL for lists */
const char *xnode_str(const struct xnode *n); /* string value, or NULL */
const char *xnode_key(const struct xnode *n); /* own key when a map member, else NULL */
uint64_t xnode_u64(const struct xnode *n);    /* raw value of that type, 0/false otherwise */
int64_t xnode_i64(const struct xnode *n);
double xnode_f64(const struct xnode *n, int *prec); /* prec may be NULL */
bool xnode_bool(const struct xnode *n);

/* Conversions of scalar nodes (config values arrive as XN_STR, but typed
 * nodes are accepted too).  0, or -1 with "key: reason" in err, e.g.
 * "port: '99999' is too large (max 65535)".  A NULL node is "missing". */
int xnode_to_u64(const struct xnode *n, uint64_t min, uint64_t max, uint64_t *out, char *err, size_t errlen);
int xnode_to_size(const struct xnode *n, uint64_t min, uint64_t max, uint64_t *out, char *err, size_t errlen);
int xnode_to_bool(const struct xnode *n, bool *out, char *err, size_t errlen);

int xnode_line(const struct xnode *n); /* source line (1-based), 0 if unknown */
void xnode_set_line(struct xnode *n, int line);

#endif
