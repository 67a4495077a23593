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
bool xdg_gro(const struct xdg *d) { return d->gro; }
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

size_t xdg_addr_host(const struct xdg_addr *a, uint8_t key[XDG_HOST_MAX])
{
	memcpy(key, a->host, a->hostlen);
	return a->hostlen;
}

int xdg_send(struct xdg *d, const struct xdg_addr *to, const void *buf, size_t len,
	     uint64_t wr_id, unsigned flags)
{
	struct xdg_dgram m = { .to = to, .buf = buf, .len = (uint32_t)len, .wr_id = wr_id };

	if (len > d->mtu)
		return -EMSGSIZE;
	int rc = xdg_send_dgrams(d, &m, 1, flags);
	return rc == 1 ? 0 : rc;
}

int xdg_send_batch(struct xdg *d, const struct xdg_msg *m, int n, unsigned flags)
{
	struct xdg_dgram g[64];
	int done = 0;

	if (n < 0 || (n && !m))
		return -EINVAL;
	while (done < n) {
		int k = n - done < 64 ? n - done : 64, rc;

		for (int i = 0; i < k; i++)
			g[i] = (struct xdg_dgram){ .to = m[done + i].to, .buf = m[done + i].buf,
						   .len = m[done + i].len,
						   .wr_id = m[done + i].wr_id };
		rc = xdg_send_dgrams(d, g, k, flags);
		if (rc < 0)
			return done ? done : rc;
		done += rc;
		if (rc < k)
			break;
	}
	return done;
}

int xdg_send_dgrams(struct xdg *d, const struct xdg_dgram *m, int n, unsigned flags)
{
	if (n < 0 || (n && !m))
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		if (!m[i].to || (m[i].len && !m[i].buf) || (m[i].hlen && !m[i].hdr) ||
		    (m[i].qkey & 0x80000000u))
			return -EINVAL;
		if ((uint64_t)m[i].len + m[i].hlen > d->mtu)
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

uint32_t xdg_path_mtu(struct xdg *d, const struct xdg_addr *to)
{
	return d->ops->path_mtu && to ? d->ops->path_mtu(d, to) : d->mtu;
}

int xdg_set_gro(struct xdg *d, bool on)
{
	if (on == d->gro)
		return 0;
	return d->ops->set_gro ? d->ops->set_gro(d, on) : -EOPNOTSUPP;
}

int xdg_connect(struct xdg *d, const struct xdg_addr *peer)
{
	if (!d->ops->connect)
		return -EOPNOTSUPP;
	if (peer && peer->ops != d->ops)
		return -EINVAL;
	return d->ops->connect(d, peer);
}

int xdg_set_qkey(struct xdg *d, uint32_t qkey)
{
	if (!qkey || (qkey & 0x80000000u))
		return -EINVAL;
	return d->ops->set_qkey ? d->ops->set_qkey(d, qkey) : 0;
}

int xdg_reset(struct xdg *d, uint32_t qkey)
{
	if (qkey & 0x80000000u)
		return -EINVAL;
	return d->ops->reset ? d->ops->reset(d, qkey) : 0;
}

struct xdg_addr *xdg_addr_import(struct xdg *d, const struct xdg_addr *a, char *err,
				 size_t errlen)
{
	if (!a || a->ops != d->ops || !d->ops->import) {
		snprintf(err, errlen, "%s: not an address of a %s:// endpoint",
			 a ? a->str : "(null)", xuri_scheme_name(d->scheme));
		errno = EINVAL;
		return NULL;
	}
	return d->ops->import(d, a, err, errlen);
}

struct xdg_mem *xdg_mem_reg(struct xdg *d, void *buf, size_t len, char *err, size_t errlen)
{
	if (!d->ops->mem_reg) {
		snprintf(err, errlen, "%s:// endpoints have no registered memory",
			 xuri_scheme_name(d->scheme));
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!buf || !len) {
		snprintf(err, errlen, "nothing to register");
		errno = EINVAL;
		return NULL;
	}
	return d->ops->mem_reg(d, buf, len, err, errlen);
}

void xdg_mem_dereg(struct xdg_mem *m)
{
	if (m)
		m->ops->mem_dereg(m);
}

int xdg_post_recv(struct xdg *d, const struct xdg_rwr *w, int n)
{
	if (!d->ops->post_recv)
		return -EOPNOTSUPP;
	if (n < 0 || (n && !w))
		return -EINVAL;
	return n ? d->ops->post_recv(d, w, n) : 0;
}

int xdg_recv_sg(struct xdg *d, const struct xdg_rwr *w, int n, struct xdg_wc *wc)
{
	if (!d->ops->recv_sg || d->gro)
		return -EOPNOTSUPP;
	if (n < 0 || (n && (!w || !wc)))
		return -EINVAL;
	for (int i = 0; i < n; i++)
		if (!w[i].nsge || w[i].nsge > 64 || !w[i].sg)
			return -EINVAL;
	return n ? d->ops->recv_sg(d, w, n, wc) : 0;
}
