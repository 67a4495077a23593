/* xdg.h front: argument checks common to every backend, then dispatch. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "xprt/xdg_pri.h"

void xdg_opts_fill(struct xdg_opts *dst, const struct xdg_opts *src)
{
	static const struct xdg_opts zero;

	*dst = src ? *src : zero;
	if (!dst->rx_depth)
		dst->rx_depth = 512;
	if (!dst->tx_depth)
		dst->tx_depth = 256;
	if (!dst->timeout_ns)
		dst->timeout_ns = 5000000000ull;
}

struct xdg *xdg_open(const struct xuri *u, const struct xdg_opts *o, char *err, size_t errlen)
{
	struct xdg_opts opts;

	xdg_opts_fill(&opts, o);
	switch (u->scheme) {
	case XURI_UDP:
		return xdg_udp_ops.open(u, &opts, err, errlen);
	case XURI_UD:
		return xdg_ud_ops.open(u, &opts, err, errlen);
	default:
		snprintf(err, errlen, "%s://: not a datagram transport (use udp:// or ud://)",
			 xuri_scheme_name(u->scheme));
		errno = EPROTONOSUPPORT;
		return NULL;
	}
}

void xdg_close(struct xdg *d)
{
	if (d)
		d->ops->close(d);
}

uint32_t xdg_mtu(const struct xdg *d) { return d->mtu; }
uint16_t xdg_port(const struct xdg *d) { return d->port; }
enum xuri_scheme xdg_scheme(const struct xdg *d) { return d->scheme; }

struct xdg_addr *xdg_resolve(struct xdg *d, const struct xuri *peer, char *err, size_t errlen)
{
	if (peer->scheme != d->scheme) {
		snprintf(err, errlen, "%s://%s:%u: endpoint is %s://", xuri_scheme_name(peer->scheme),
			 peer->host, peer->port, xuri_scheme_name(d->scheme));
		errno = EINVAL;
		return NULL;
	}
	return d->ops->resolve(d, peer, err, errlen);
}

const char *xdg_addr_str(const struct xdg_addr *a) { return a->str; }

int xdg_send(struct xdg *d, const struct xdg_addr *to, const void *buf, size_t len,
	     uint64_t wr_id, unsigned flags)
{
	struct xdg_msg m = { to, buf, (uint32_t)len, wr_id };

	if (len > d->mtu)
		return -EMSGSIZE;
	int rc = xdg_send_batch(d, &m, 1, flags);
	return rc == 1 ? 0 : rc;
}

int xdg_send_batch(struct xdg *d, const struct xdg_msg *m, int n, unsigned flags)
{
	if (n < 0 || (n && !m))
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		if (!m[i].to || (m[i].len && !m[i].buf))
			return -EINVAL;
		if (m[i].len > d->mtu)
			return -EMSGSIZE;
	}
	if (!n)
		return 0;
	return d->ops->send_batch(d, m, n, flags);
}

int xdg_poll(struct xdg *d, struct xdg_wc *wc, int n)
{
	if (n < 0 || (n && !wc))
		return -EINVAL;
	return d->ops->poll(d, wc, n);
}

int xdg_fd(const struct xdg *d) { return d->ops->fd(d); }
int xdg_wait(struct xdg *d, uint64_t timeout_ns) { return d->ops->wait(d, timeout_ns); }
void xdg_get_stats(const struct xdg *d, struct xdg_stats *s) { *s = d->stats; }
