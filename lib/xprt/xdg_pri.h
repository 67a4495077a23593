/* Backend side of xdg.h: backends embed struct xdg / struct xdg_addr first
 * in their own objects; xdg.c dispatches and validates. */
#ifndef XPRT_XDG_PRI_H
#define XPRT_XDG_PRI_H

#include <stddef.h>

#include "xprt/xdg.h"

struct xdg_ops {
	struct xdg *(*open)(const struct xuri *u, const struct xdg_opts *o, char *err,
			    size_t errlen);
	void (*close)(struct xdg *d);
	struct xdg_addr *(*resolve)(struct xdg *d, const struct xuri *peer, char *err,
				    size_t errlen);
	int (*send_batch)(struct xdg *d, const struct xdg_dgram *m, int n, unsigned flags);
	int (*poll)(struct xdg *d, struct xdg_wc *wc, int n);
	int (*fd)(const struct xdg *d);
	int (*wait)(struct xdg *d, uint64_t timeout_ns);
	/* per-request endpoints (xdg.h); NULL: not supported */
	uint32_t (*path_mtu)(struct xdg *d, const struct xdg_addr *to);
	int (*connect)(struct xdg *d, const struct xdg_addr *peer);
	int (*set_qkey)(struct xdg *d, uint32_t qkey);
	int (*reset)(struct xdg *d, uint32_t qkey);
	int (*set_gro)(struct xdg *d, bool on);
	struct xdg_addr *(*import)(struct xdg *d, const struct xdg_addr *a, char *err,
				   size_t errlen);
	struct xdg_mem *(*mem_reg)(struct xdg *d, void *buf, size_t len, char *err,
				   size_t errlen);
	void (*mem_dereg)(struct xdg_mem *m);
	int (*post_recv)(struct xdg *d, const struct xdg_rwr *w, int n);
	int (*recv_sg)(struct xdg *d, const struct xdg_rwr *w, int n, struct xdg_wc *wc);
};

struct xdg {
	const struct xdg_ops *ops;
	enum xuri_scheme scheme;
	uint32_t mtu;
	uint16_t port;
	bool gro;			/* udp: coalesced receives are on */
	struct xdg_stats stats;
};

struct xdg_addr {
	char str[80];
	const struct xdg_ops *ops;	/* the backend it belongs to (xdg_addr_import) */
	uint8_t host[XDG_HOST_MAX];	/* xdg_addr_host(), set by the backend */
	uint8_t hostlen;
};

/* What xdg_mem_reg() returns; the backend's own object embeds it first. */
struct xdg_mem {
	const struct xdg_ops *ops;
};

/* The LRU list of both backends' sender caches (xdg.h, lifetime of
 * wc.src): intrusive, most recently seen first; an entry embeds a node and
 * is found from it with XDG_LRU_ENTRY. */
struct xdg_lru_node {
	struct xdg_lru_node *prev, *next;
};
struct xdg_lru {
	struct xdg_lru_node *head, *tail;
};
#define XDG_LRU_ENTRY(node, type, member) \
	((type *)(void *)((char *)(node) - offsetof(type, member)))

static inline void xdg_lru_unlink(struct xdg_lru *l, struct xdg_lru_node *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = NULL;
}

static inline void xdg_lru_front(struct xdg_lru *l, struct xdg_lru_node *n)
{
	n->prev = NULL;
	n->next = l->head;
	if (l->head)
		l->head->prev = n;
	l->head = n;
	if (!l->tail)
		l->tail = n;
}

/* n was just seen: to the front. */
static inline void xdg_lru_touch(struct xdg_lru *l, struct xdg_lru_node *n)
{
	if (l->head != n) {
		xdg_lru_unlink(l, n);
		xdg_lru_front(l, n);
	}
}

/* Defaults for zero fields of xdg_opts (xdg.c). */
void xdg_opts_fill(struct xdg_opts *dst, const struct xdg_opts *src);

extern const struct xdg_ops xdg_udp_ops;
extern const struct xdg_ops xdg_ud_ops;

#endif
