/* The RTRS server's session and path rules (rtrs_srv_core.c) driven by a
 * program of events read from the input: connection requests (built from a
 * few bytes, so most are well formed, or raw bytes), INFO_REQs, closes and
 * reaps, from four hosts to two local addresses, over four sessions of
 * eight paths.  After every step the tables hold the kernel's rules: one
 * live path per session and path uuid and per pair of addresses, at most
 * RTRS_MAX_PATHS_NUM paths, connections within cid_num, a connected path
 * has all of them, a session name belongs to one session, and the counts
 * match the lists. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rtrs/rtrs_srv_pri.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static struct srv_con dummy;

/* host 10.0.0.3 is not allowed, nor the session name "c" */
static int allow(void *ctx, const char *host, const char *name)
{
	(void)ctx;
	return !strcmp(host, "10.0.0.3") || (name && !strcmp(name, "c")) ? -1 : 0;
}

static void check(struct rtrs_srv *srv)
{
	for (struct rtrs_srv_sess *s = srv->sessions; s; s = s->next) {
		unsigned np = 0, up = 0;

		for (struct srv_path *p = s->paths; p; p = p->next) {
			unsigned cons = 0;

			np++;
			up += p->established;
			for (unsigned i = 0; i < p->cid_num; i++)
				cons += p->con[i] != NULL;
			if (p->cid_up > p->cid_num || (p->state != RTRS_SRV_CLOSING && cons != p->cid_up))
				abort();
			if (p->state == RTRS_SRV_CONNECTED &&
			    (p->cid_up != p->cid_num || !p->sessname[0]))
				abort();
			if (p->state == RTRS_SRV_CLOSING)
				continue;
			for (struct srv_path *q = p->next; q; q = q->next) {
				if (q->state == RTRS_SRV_CLOSING)
					continue;
				if (!memcmp(p->sess_uuid, q->sess_uuid, 16))
					abort();
				if (p->local_host[0] && !strcmp(p->peer_host, q->peer_host) &&
				    !strcmp(p->local_host, q->local_host))
					abort();
			}
			/* a name is one session's (another paths_uuid) */
			if (p->state == RTRS_SRV_CONNECTED)
				for (struct rtrs_srv_sess *t = srv->sessions; t; t = t->next) {
					if (t == s || !memcmp(t->paths_uuid, s->paths_uuid, 16))
						continue;
					for (struct srv_path *q = t->paths; q; q = q->next)
						if (q->state == RTRS_SRV_CONNECTED &&
						    !strcmp(q->sessname, p->sessname))
							abort();
				}
		}
		if (np != s->npaths || up != s->paths_up || np > RTRS_MAX_PATHS_NUM)
			abort();
		/* one joinable session per uuid */
		for (struct rtrs_srv_sess *t = s->next; t; t = t->next)
			if (!s->dying && !t->dying && s->npaths && t->npaths &&
			    !memcmp(s->paths_uuid, t->paths_uuid, 16) && srv_sess_live(s) &&
			    srv_sess_live(t))
				abort();
	}
}

static struct srv_path *nth_path(struct rtrs_srv *srv, unsigned k)
{
	unsigned all = 0;

	for (struct rtrs_srv_sess *s = srv->sessions; s; s = s->next)
		all += s->npaths;
	if (!all)
		return NULL;
	k %= all;
	for (struct rtrs_srv_sess *s = srv->sessions; s; s = s->next)
		for (struct srv_path *p = s->paths; p; p = p->next)
			if (!k--)
				return p;
	return NULL;
}

static void reap(struct rtrs_srv *srv)
{
	for (struct rtrs_srv_sess *s = srv->sessions; s; s = s->next)
		for (struct srv_path *p = s->paths, *pn; p; p = pn) {
			pn = p->next;
			if (p->state == RTRS_SRV_CLOSING)
				srv_path_unlink(p);
		}
	srv_tidy(srv);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	static const char *names[] = { "a", "b", "c", "a" };
	struct rtrs_srv *srv = calloc(1, sizeof(*srv));
	const char *why;

	if (!srv)
		return 0;
	srv->o.queue_depth = 2;
	srv->o.chunk_size = 8192;
	srv->o.hb_interval_ms = 1000;
	srv->o.hb_missed_max = 3;
	srv->o.allow = allow;
	srv->nlsn = 2;
	srv->lsn[0].uri.scheme = XURI_TCP;
	srv->lsn[1].uri.scheme = XURI_RDMA;
	while (n >= 2) {
		uint8_t op = d[0] % 5, a = d[1];
		size_t take = 2;

		switch (op) {
		case 0:	/* a connection request from a few bytes */
		case 1: {	/* or from raw ones */
			uint8_t buf[RTRS_CONN_REQ_LEN];
			struct rtrs_conn_req cr, got;
			struct srv_path *p;
			char peer[32];
			size_t len = RTRS_CONN_REQ_LEN;
			int rc;

			if (n < 6)
				goto out;
			snprintf(peer, sizeof(peer), "10.0.0.%u:%u", a % 4, 1000 + d[2]);
			if (op == 0) {
				cr = (struct rtrs_conn_req){ .cid_num = (uint16_t)(1 + d[3] % 4),
							     .recon_cnt = d[4],
							     .first_conn = d[5] & 1 };
				cr.cid = (uint16_t)((d[5] >> 1) % (cr.cid_num + 1));
				cr.paths_uuid[0] = (uint8_t)(d[2] % 4);
				cr.sess_uuid[0] = (uint8_t)(d[4] % 8);
				rtrs_conn_req_encode(&cr, buf);
				take = 6;
			} else {
				len = n - 6 < RTRS_CONN_REQ_LEN ? n - 6 : RTRS_CONN_REQ_LEN;
				memcpy(buf, d + 6, len);
				take = 6 + len;
			}
			rc = srv_admit(srv, d[3] & 1, buf, len, peer, d[5] & 0x80 ? "" : "10.0.1.1",
				       &got, &p, &why);
			if (rc == 0) {
				if (!p || p->state != RTRS_SRV_CONNECTING || got.cid >= p->cid_num ||
				    p->con[got.cid])
					abort();
				srv_con_attached(p, got.cid, &dummy);
			} else if (!why || p) {
				abort();
			}
			break;
		}
		case 2: {	/* INFO_REQ on a path */
			struct srv_path *p = nth_path(srv, a);
			struct rtrs_info_req m = { { 0 } };
			uint8_t buf[RTRS_INFO_REQ_LEN];
			struct rtrs_info_req got;

			if (n < 3)
				goto out;
			take = 3;
			if (!p)
				break;
			snprintf(m.pathname, sizeof(m.pathname), "%s", names[d[2] % 4]);
			if (rtrs_info_req_encode(&m, buf))
				abort();
			if (srv_info_admit(p, (uint16_t)(d[2] >> 6), buf,
					   d[2] & 0x20 ? 5 : RTRS_INFO_REQ_LEN, &got, &why) == 0) {
				srv_path_up(p, got.pathname, 0);
				/* the driver's rtrs_srv_sess_up */
				p->established = true;
				p->sess->paths_up++;
			}
			break;
		}
		case 3: {	/* a close */
			struct srv_path *p = nth_path(srv, a);

			if (p)
				srv_path_close(p, NULL);
			break;
		}
		default:
			reap(srv);
			break;
		}
		check(srv);
		if (take > n)
			take = n;
		d += take;
		n -= take;
	}
out:
	while (srv->sessions) {
		for (struct rtrs_srv_sess *s = srv->sessions; s; s = s->next)
			for (struct srv_path *p = s->paths; p; p = p->next)
				srv_path_close(p, NULL);
		reap(srv);
	}
	free(srv);
	return 0;
}
