/* Backend side of xdg.h: backends embed struct xdg / struct xdg_addr first
 * in their own objects; xdg.c dispatches and validates. */
#ifndef XPRT_XDG_PRI_H
#define XPRT_XDG_PRI_H

#include "xprt/xdg.h"

struct xdg_ops {
	struct xdg *(*open)(const struct xuri *u, const struct xdg_opts *o, char *err,
			    size_t errlen);
	void (*close)(struct xdg *d);
	struct xdg_addr *(*resolve)(struct xdg *d, const struct xuri *peer, char *err,
				    size_t errlen);
	int (*send_batch)(struct xdg *d, const struct xdg_msg *m, int n, unsigned flags);
	int (*poll)(struct xdg *d, struct xdg_wc *wc, int n);
	int (*fd)(const struct xdg *d);
	int (*wait)(struct xdg *d, uint64_t timeout_ns);
};

struct xdg {
	const struct xdg_ops *ops;
	enum xuri_scheme scheme;
	uint32_t mtu;
	uint16_t port;
	struct xdg_stats stats;
};

struct xdg_addr {
	char str[80];
};

/* Defaults for zero fields of xdg_opts (xdg.c). */
void xdg_opts_fill(struct xdg_opts *dst, const struct xdg_opts *src);

extern const struct xdg_ops xdg_udp_ops;
extern const struct xdg_ops xdg_ud_ops;

#endif
