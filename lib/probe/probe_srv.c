/* The xprobe server's rules without I/O.  See probe_srv.h. */
#include <errno.h>
#include <string.h>

#include "probe/probe_srv.h"

void probe_srv_init(struct probe_srv *ps, uint32_t max_size)
{
	memset(ps, 0, sizeof(*ps));
	ps->max_size = max_size;
}

static struct probe_sink *sink_find(struct probe_srv *ps, uint32_t node, unsigned port, bool add)
{
	unsigned i = (node * 64 + port) % PROBE_SINKS;

	for (unsigned n = 0; n < PROBE_SINKS; n++, i = (i + 1) % PROBE_SINKS) {
		struct probe_sink *e = &ps->sink[i];

		if (e->used && e->node == node && e->port == port)
			return e;
		if (!e->used) {
			if (!add)
				return NULL;
			*e = (struct probe_sink){ node, port, true, 0, 0 };
			return e;
		}
	}
	if (!add)
		return NULL;
	/* Full: forget everybody (counts are per test run, and a client
	 * resets its entry with SETUP anyway). */
	memset(ps->sink, 0, sizeof(ps->sink));
	return sink_find(ps, node, port, true);
}

void probe_srv_sink(struct probe_srv *ps, uint32_t node, unsigned port, uint32_t len)
{
	struct probe_sink *e = ps->last;

	if (!e || !e->used || e->node != node || e->port != port)
		e = ps->last = sink_find(ps, node, port, true);

	e->msgs++;
	e->bytes += len;
}

int probe_srv_ctl(struct probe_srv *ps, const void *buf, size_t len, uint32_t node, unsigned port,
		  struct probe_ctl_act *act)
{
	const struct probe_ctl *c = &act->req;
	struct probe_ctl *rep = &act->rep;
	int rc;

	memset(act, 0, sizeof(*act));
	rc = probe_ctl_decode(buf, len, &act->req);
	if (rc < 0)
		return rc;
	rep->service = c->service;
	rep->prio = c->prio;
	rep->size = c->size;
	rep->window = c->window;
	rep->max_size = ps->max_size;
	switch (c->type) {
	case PROBE_SETUP_REQ:
		rep->type = PROBE_SETUP_REP;
		if (c->size > ps->max_size)
			rep->status = EMSGSIZE;
		else if (c->window == 0 || c->window > PROBE_WINDOW_MAX)
			rep->status = EINVAL;
		else
			act->buffers = probe_srv_buffers(c->window);
		if (c->service == PROBE_PORT_SINK) {
			struct probe_sink *e = sink_find(ps, node, port, true);

			e->msgs = e->bytes = 0;
		}
		return 0;
	case PROBE_STATS_REQ: {
		struct probe_sink *e = sink_find(ps, node, port, false);

		rep->type = PROBE_STATS_REP;
		if (e) {
			rep->msgs = e->msgs;
			rep->bytes = e->bytes;
		}
		return 0;
	}
	default:
		return -EBADMSG;
	}
}

static unsigned *ctl_pending(struct probe_srv *ps, uint32_t node)
{
	struct probe_ctl_node *c = &ps->ctl[node % PROBE_CTL_NODES];

	if (c->node != node) {
		c->node = node;
		c->n = 0;
	}
	return &c->n;
}

bool probe_srv_reply_begin(struct probe_srv *ps, uint32_t node)
{
	unsigned *n = ctl_pending(ps, node);

	if (*n >= PROBE_CTL_PER_NODE)
		return false;
	(*n)++;
	return true;
}

void probe_srv_reply_end(struct probe_srv *ps, uint32_t node)
{
	unsigned *n = ctl_pending(ps, node);

	if (*n)
		(*n)--;
}

static struct probe_dg_sess *dg_sess(struct probe_dgsrv *g, const void *from, uint32_t session,
				     uint64_t now)
{
	struct probe_dg_sess *old = &g->sess[0];

	for (int i = 0; i < PROBE_DG_SESS; i++) {
		struct probe_dg_sess *e = &g->sess[i];

		if (e->from == from && e->session == session && e->from)
			return e;
		if (e->last_ns < old->last_ns)
			old = e;
	}
	*old = (struct probe_dg_sess){ from, session, 0, 0, now, now };
	return old;
}

int probe_dg_input(struct probe_dgsrv *g, const void *from, const void *buf, uint32_t len,
		   uint64_t now, uint8_t *out)
{
	struct probe_dg pd;
	struct probe_dg_sess *e;
	int rc = probe_dg_decode(buf, len, &pd);

	if (rc < 0)
		return rc;
	switch (pd.type) {
	case PROBE_DG_PING:
		memcpy(out, buf, len);
		pd.type = PROBE_DG_PONG;
		probe_dg_encode(&pd, out);
		return (int)len;
	case PROBE_DG_DATA:
		e = dg_sess(g, from, pd.session, now);
		e->pkts++;
		e->bytes += len;
		e->last_ns = now;
		return 0;
	case PROBE_DG_STATS_REQ:
		e = dg_sess(g, from, pd.session, now);
		pd.type = PROBE_DG_STATS_REP;
		pd.pkts = e->pkts;
		pd.bytes = e->bytes;
		pd.span_ns = e->last_ns - e->first_ns;
		probe_dg_encode(&pd, out);
		return PROBE_DG_STATS_LEN;
	default:
		return 0;	/* PONG / STATS_REP are not for a server */
	}
}
