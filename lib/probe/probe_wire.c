#include <errno.h>
#include <string.h>

#include "core/bytes.h"
#include "probe/probe_wire.h"

/* magic(4) version(1) type(1) service(1) prio(1) size(4) window(4) status(4)
 * max_size(4) msgs(8) bytes(8) = 40 */
void probe_ctl_encode(const struct probe_ctl *c, uint8_t out[PROBE_CTL_LEN])
{
	put_be32(out, PROBE_CTL_MAGIC);
	out[4] = PROBE_VERSION;
	out[5] = c->type;
	out[6] = c->service;
	out[7] = c->prio;
	put_be32(out + 8, c->size);
	put_be32(out + 12, c->window);
	put_be32(out + 16, c->status);
	put_be32(out + 20, c->max_size);
	put_be64(out + 24, c->msgs);
	put_be64(out + 32, c->bytes);
}

int probe_ctl_decode(const void *buf, size_t len, struct probe_ctl *c)
{
	const uint8_t *p = buf;

	if (len != PROBE_CTL_LEN)
		return -EMSGSIZE;
	if (get_be32(p) != PROBE_CTL_MAGIC || p[4] != PROBE_VERSION)
		return -EPROTO;
	if (p[5] < PROBE_SETUP_REQ || p[5] > PROBE_STATS_REP)
		return -EPROTO;
	if (p[6] != PROBE_PORT_ECHO && p[6] != PROBE_PORT_SINK)
		return -EPROTO;
	if (p[7] > 1)
		return -EPROTO;
	c->type = p[5];
	c->service = p[6];
	c->prio = p[7];
	c->size = get_be32(p + 8);
	c->window = get_be32(p + 12);
	c->status = get_be32(p + 16);
	c->max_size = get_be32(p + 20);
	c->msgs = get_be64(p + 24);
	c->bytes = get_be64(p + 32);
	return 0;
}

/* magic(4) version(1) type(1) reserved(2) session(4) seq(4)
 * [STATS_REP: pkts(8) bytes(8) span_ns(8)] */
void probe_dg_encode(const struct probe_dg *d, uint8_t *out)
{
	put_be32(out, PROBE_DG_MAGIC);
	out[4] = PROBE_VERSION;
	out[5] = d->type;
	out[6] = out[7] = 0;
	put_be32(out + 8, d->session);
	put_be32(out + 12, d->seq);
	if (d->type == PROBE_DG_STATS_REP) {
		put_be64(out + 16, d->pkts);
		put_be64(out + 24, d->bytes);
		put_be64(out + 32, d->span_ns);
	}
}

int probe_dg_decode(const void *buf, size_t len, struct probe_dg *d)
{
	const uint8_t *p = buf;

	if (len < PROBE_DG_HDR)
		return -EMSGSIZE;
	if (get_be32(p) != PROBE_DG_MAGIC || p[4] != PROBE_VERSION)
		return -EPROTO;
	if (p[5] < PROBE_DG_PING || p[5] > PROBE_DG_STATS_REP)
		return -EPROTO;
	memset(d, 0, sizeof(*d));
	d->type = p[5];
	d->session = get_be32(p + 8);
	d->seq = get_be32(p + 12);
	if (d->type == PROBE_DG_STATS_REP) {
		if (len < PROBE_DG_STATS_LEN)
			return -EMSGSIZE;
		d->pkts = get_be64(p + 16);
		d->bytes = get_be64(p + 24);
		d->span_ns = get_be64(p + 32);
	}
	return 0;
}

void probe_vt_encode(const struct probe_vt *v, uint8_t out[PROBE_VT_LEN])
{
	memset(out, 0, PROBE_VT_LEN);
	put_be32(out, PROBE_VT_MAGIC);
	out[4] = PROBE_VERSION;
	out[5] = v->op;
	out[6] = v->flags;
	out[7] = v->status;
	put_be32(out + 8, v->size);
	put_be32(out + 12, v->depth);
}

int probe_vt_is(const void *buf, size_t len)
{
	return len >= 4 && get_be32(buf) == PROBE_VT_MAGIC;
}

int probe_vt_decode(const void *buf, size_t len, struct probe_vt *v)
{
	const uint8_t *p = buf;

	if (len < PROBE_VT_LEN)
		return -EMSGSIZE;
	if (get_be32(p) != PROBE_VT_MAGIC || p[4] != PROBE_VERSION)
		return -EPROTO;
	if (p[5] < PROBE_VT_WRITE || p[5] > PROBE_VT_SEND || p[6] & ~(PROBE_VT_IMM | PROBE_VT_LAT))
		return -EPROTO;
	/* a read carries no immediate */
	if (p[5] == PROBE_VT_READ && p[6] & PROBE_VT_IMM)
		return -EPROTO;
	if (get_be32(p + 16) || get_be32(p + 20))
		return -EPROTO;
	v->op = p[5];
	v->flags = p[6];
	v->status = p[7];
	v->size = get_be32(p + 8);
	v->depth = get_be32(p + 12);
	if (!v->depth || v->depth > PROBE_VT_MAX_DEPTH)
		return -EPROTO;
	return 0;
}

void probe_vt_mem_encode(const struct probe_vt_mem *m, uint8_t out[PROBE_VT_MEM_LEN])
{
	put_be64(out, m->addr);
	put_be32(out + 8, m->rkey);
	put_be32(out + 12, m->len);
}

int probe_vt_mem_decode(const void *buf, size_t len, struct probe_vt_mem *m)
{
	const uint8_t *p = buf;

	if (len != PROBE_VT_MEM_LEN)
		return -EMSGSIZE;
	m->addr = get_be64(p);
	m->rkey = get_be32(p + 8);
	m->len = get_be32(p + 12);
	return 0;
}
