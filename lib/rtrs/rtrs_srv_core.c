/* RTRS server engine, the rules without I/O: sessions and paths, the
 * admission of a connection request (the kernel's rtrs_rdma_connect and
 * get_or_create_srv), the checks of INFO_REQ (process_info_req) and a
 * path's life from connecting to closed.  Everything here reads and
 * changes the tables in rtrs_srv_pri.h and nothing else: connections,
 * memory registration and the loop are rtrs_srv.c's, requests
 * rtrs_srv_io.c's.  fuzz_rtrs_srv_core drives it on its own. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/log.h"
#include "rtrs/rtrs_srv_pri.h"

static const char hex[] = "0123456789abcdef";

/* "xxxxxxxx-xxxx-..." for the log: uuids are raw bytes on the wire. */
const char *srv_uuid_str(const uint8_t u[16], char buf[37])
{
	char *p = buf;

	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*p++ = '-';
		*p++ = hex[u[i] >> 4];
		*p++ = hex[u[i] & 15];
	}
	*p = '\0';
	return buf;
}

/* --- sessions and paths -------------------------------------------------- */

bool srv_sess_live(const struct rtrs_srv_sess *s)
{
	for (const struct srv_path *p = s->paths; p; p = p->next)
		if (p->state != RTRS_SRV_CLOSING)
			return true;
	return false;
}

/* get_or_create_srv: a session whose paths are all closing is not joined
 * (the kernel's refcount_inc_not_zero); a new one takes its uuid. */
static struct rtrs_srv_sess *sess_find(struct rtrs_srv *srv, const uint8_t uuid[16])
{
	for (struct rtrs_srv_sess *s = srv->sessions; s; s = s->next)
		if (!memcmp(s->paths_uuid, uuid, 16) && !s->dying && (s->npaths == 0 || srv_sess_live(s)))
			return s;
	return NULL;
}

static struct rtrs_srv_sess *sess_new(struct rtrs_srv *srv, const uint8_t uuid[16])
{
	struct rtrs_srv_sess *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->srv = srv;
	memcpy(s->paths_uuid, uuid, 16);
	/* The chunk pool: queue_depth buffers of chunk_size, allocated once
	 * per session as the kernel does (seed 002: "memory allocated once on
	 * server at session establishment"), shared by all its paths. */
	s->chunks_len = (size_t)srv->o.queue_depth * srv->o.chunk_size;
	s->chunks = mmap(NULL, s->chunks_len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	s->holder = calloc(srv->o.queue_depth, sizeof(*s->holder));
	if (s->chunks == MAP_FAILED || !s->holder) {
		if (s->chunks != MAP_FAILED)
			munmap(s->chunks, s->chunks_len);
		free(s->holder);
		free(s);
		return NULL;
	}
	s->next = srv->sessions;
	srv->sessions = s;
	return s;
}

void srv_sess_free(struct rtrs_srv_sess *s)
{
	struct rtrs_srv_sess **pp = &s->srv->sessions;

	while (*pp && *pp != s)
		pp = &(*pp)->next;
	if (*pp)
		*pp = s->next;
	munmap(s->chunks, s->chunks_len);
	free(s->holder);
	free(s);
}

static struct srv_path *path_find(struct rtrs_srv_sess *s, const uint8_t uuid[16])
{
	for (struct srv_path *p = s->paths; p; p = p->next)
		if (!memcmp(p->sess_uuid, uuid, 16) && p->state != RTRS_SRV_CLOSING)
			return p;
	return NULL;
}

/* The host part of "ADDR:PORT" / "[ADDR]:PORT". */
void srv_host_of(const char *peer, char *out, size_t len)
{
	const char *c = strrchr(peer, ':');
	size_t n = c ? (size_t)(c - peer) : strlen(peer);

	if (n >= 2 && peer[0] == '[' && peer[n - 1] == ']') {
		peer++;
		n -= 2;
	}
	snprintf(out, len, "%.*s", (int)n, peer);
}

bool srv_wildcard(const char *host)
{
	return !strcmp(host, "0.0.0.0") || !strcmp(host, "::") || !host[0];
}

/* __is_path_w_addr_exists: another live path of the session between the
 * same two addresses (ours: the one the client connected to, also behind
 * a wildcard listener; "" when the transport could not say). */
static bool path_addr_exists(const struct rtrs_srv_sess *s, const char *peer_host,
			     const char *local_host)
{
	if (!local_host[0])
		return false;
	for (const struct srv_path *p = s->paths; p; p = p->next)
		if (p->state != RTRS_SRV_CLOSING && !strcmp(p->peer_host, peer_host) &&
		    !strcmp(p->local_host, local_host))
			return true;
	return false;
}

static struct srv_path *path_new(struct rtrs_srv_sess *s, const struct rtrs_conn_req *cr,
				 const char *peer, const char *local_host, unsigned li)
{
	struct rtrs_srv *srv = s->srv;
	struct srv_path *p = calloc(1, sizeof(*p)), **pp;

	if (!p)
		return NULL;
	p->con = calloc(cr->cid_num, sizeof(*p->con));
	p->ops = calloc(srv->o.queue_depth, sizeof(*p->ops));
	if (!p->con || !p->ops) {
		free(p->con);
		free(p->ops);
		free(p);
		return NULL;
	}
	p->sess = s;
	p->state = RTRS_SRV_CONNECTING;
	srv->connecting++;
	memcpy(p->sess_uuid, cr->sess_uuid, 16);
	snprintf(p->peer, sizeof(p->peer), "%s", peer);
	srv_host_of(peer, p->peer_host, sizeof(p->peer_host));
	snprintf(p->local_host, sizeof(p->local_host), "%s", local_host);
	p->listener = li;
	p->scheme = srv->lsn[li].uri.scheme;
	p->cid_num = cr->cid_num;
	p->recon_cnt = cr->recon_cnt;
	p->created_ns = srv->now;
	p->hb.latency_ns = -1;
	p->bindq_tail = &p->bindq;
	p->bound_tail = &p->bound;
	for (uint32_t i = 0; i < srv->o.queue_depth; i++) {
		p->ops[i].path = p;
		p->ops[i].buf_id = i;
	}
	/* arrival order, for status */
	for (pp = &s->paths; *pp; pp = &(*pp)->next)
		;
	*pp = p;
	s->npaths++;
	return p;
}

void srv_path_close(struct srv_path *p, const char *why)
{
	char u[37];

	if (p->state == RTRS_SRV_CLOSING)
		return;
	if (p->state == RTRS_SRV_CONNECTING)
		p->sess->srv->connecting--;
	p->state = RTRS_SRV_CLOSING;
	p->why = why;
	p->info_pending = false;
	p->sess->srv->reap = true;
	if (why) {
		p->sess->srv->closed++;
		xlog_info("path %s of session '%s' (%s) closed: %s", p->peer,
			  p->sess->sessname[0] ? p->sess->sessname : "?",
			  srv_uuid_str(p->sess_uuid, u), why);
	}
}

/* Another session's path already uses the name (the kernel's
 * exist_pathname: -EPERM). */
static bool name_taken(const struct rtrs_srv *srv, const struct rtrs_srv_sess *self,
		       const char *name)
{
	for (const struct rtrs_srv_sess *s = srv->sessions; s; s = s->next) {
		if (s == self || !memcmp(s->paths_uuid, self->paths_uuid, 16))
			continue;
		for (const struct srv_path *p = s->paths; p; p = p->next)
			if (p->state != RTRS_SRV_CLOSING && !strcmp(p->sessname, name))
				return true;
	}
	return false;
}

/* SRV_CONNECTING_MAX paths connecting and another one coming: the oldest,
 * when it has been connecting for longer than the grace, gives way, as the
 * tcp listener's oldest half-read request does, so that a client that
 * opens paths and never finishes them cannot shut others out for the 30 s
 * a path may take; a younger one may be a client of a reconnect storm
 * about to finish, and the newcomer is refused instead.  0, or -EAGAIN. */
static int connecting_make_room(struct rtrs_srv *srv, const char *peer)
{
	struct srv_path *old = NULL;

	for (struct rtrs_srv_sess *s = srv->sessions; s; s = s->next)
		for (struct srv_path *p = s->paths; p; p = p->next)
			if (p->state == RTRS_SRV_CONNECTING &&
			    (!old || p->created_ns < old->created_ns))
				old = p;
	if (!old)
		return 0;
	if (srv->now - old->created_ns < SRV_CONNECTING_GRACE_NS) {
		xlog_ratelimited(XLOG_WARN, "%u paths connecting, none for %u s: the new one from "
				 "%s is refused (busy: it may try again)", srv->connecting,
				 (unsigned)(SRV_CONNECTING_GRACE_NS / XTIME_NS_PER_S), peer);
		return -EAGAIN;
	}
	xlog_ratelimited(XLOG_WARN, "%u paths connecting (none has sent INFO_REQ): the oldest, "
			 "from %s, is closed for the new one from %s", srv->connecting, old->peer,
			 peer);
	srv_path_close(old, "too many paths connecting: the oldest gives way");
	return 0;
}

int srv_admit(struct rtrs_srv *srv, unsigned li, const void *pd, size_t len, const char *peer,
	      const char *local, struct rtrs_conn_req *cr, struct srv_path **pp, const char **why)
{
	struct rtrs_srv_sess *s;
	struct srv_path *p;
	char host[64];
	int rc = rtrs_conn_req_decode(pd, len, cr);

	*pp = NULL;
	srv_host_of(peer, host, sizeof(host));
	/* rtrs_rdma_connect: a malformed request is refused with -ECONNRESET */
	if (rc < 0) {
		*why = rc == -EPROTO ? "bad magic" :
		       rc == -EPROTONOSUPPORT ? "unsupported major version" :
		       rc == -EMSGSIZE ? "short conn_req" : "cid or cid_num out of range";
		return -ECONNRESET;
	}
	if (srv->o.allow && srv->o.allow(srv->o.allow_ctx ? srv->o.allow_ctx : srv->ctx, host, NULL) < 0) {
		*why = "not in the allow list";
		return -EACCES;
	}
	s = sess_find(srv, cr->paths_uuid);
	/* a new path at the bound: room is made only for one that the checks
	 * below will not refuse anyway */
	if (srv->connecting >= SRV_CONNECTING_MAX &&
	    (s ? !path_find(s, cr->sess_uuid) && s->npaths < RTRS_MAX_PATHS_NUM &&
		 !path_addr_exists(s, host, local) : cr->first_conn)) {
		if (connecting_make_room(srv, peer) < 0) {
			*why = "too many paths connecting";
			return -EAGAIN;
		}
		s = sess_find(srv, cr->paths_uuid);	/* it may have been s's last path */
	}
	if (!s) {
		if (!cr->first_conn) {
			*why = "not the first connection of an unknown session";
			return -ENXIO;
		}
		s = sess_new(srv, cr->paths_uuid);
		if (!s) {
			*why = "no memory for the session's chunks";
			return -ENOMEM;
		}
	}
	p = path_find(s, cr->sess_uuid);
	if (p) {
		*why = p->state != RTRS_SRV_CONNECTING ? "path already established" :
		       cr->cid_num != p->cid_num ? "cid_num differs from the path's" :
		       p->con[cr->cid] ? "connection already exists" : NULL;
		if (*why)
			return -ECONNRESET;
	} else {
		if (s->npaths >= RTRS_MAX_PATHS_NUM) {
			*why = "too many paths";
			return -ECONNRESET;
		}
		if (path_addr_exists(s, host, local)) {
			*why = "a path between these addresses exists";
			return -EEXIST;
		}
		p = path_new(s, cr, peer, local, li);
		if (!p) {
			*why = "out of memory";
			return -ENOMEM;
		}
	}
	*pp = p;
	return 0;
}

void srv_con_attached(struct srv_path *p, uint16_t cid, struct srv_con *c)
{
	p->con[cid] = c;
	p->cid_up++;
}

int srv_info_admit(struct srv_path *p, uint16_t cid, const void *buf, uint32_t len,
		   struct rtrs_info_req *m, const char **why)
{
	struct rtrs_srv_sess *s = p->sess;
	struct rtrs_srv *srv = s->srv;
	int rc;

	if (cid != 0 || p->state != RTRS_SRV_CONNECTING) {
		*why = "unexpected SEND";
		return -EPROTO;
	}
	/* the client sends INFO_REQ once all its connections are up */
	if (p->cid_up != p->cid_num) {
		*why = "INFO_REQ before all connections";
		return -EPROTO;
	}
	rc = rtrs_info_req_decode(buf, len, m);
	if (rc < 0) {
		*why = rc == -EINVAL ? "INFO_REQ pathname empty or with '/' or '.'"
				     : "malformed INFO_REQ";
		return -EPROTO;
	}
	if (name_taken(srv, s, m->pathname)) {
		snprintf(p->why_buf, sizeof(p->why_buf),
			 "session name '%s' used by another client's session (-EPERM)", m->pathname);
		*why = p->why_buf;
		return -EPERM;
	}
	if (srv->o.allow && srv->o.allow(srv->o.allow_ctx ? srv->o.allow_ctx : srv->ctx, p->peer_host,
					 m->pathname) < 0) {
		*why = "not in the allow list";
		return -EACCES;
	}
	return 0;
}

void srv_path_up(struct srv_path *p, const char *name, uint64_t now)
{
	struct rtrs_srv_sess *s = p->sess;
	struct rtrs_srv *srv = s->srv;

	snprintf(p->sessname, sizeof(p->sessname), "%s", name);
	if (!s->sessname[0])
		snprintf(s->sessname, sizeof(s->sessname), "%s", name);
	if (p->state == RTRS_SRV_CONNECTING)
		srv->connecting--;
	p->state = RTRS_SRV_CONNECTED;
	p->up_ns = now;
	rtrs_hb_init(&p->hb, srv->o.hb_interval_ms, srv->o.hb_missed_max, now);
}

bool srv_path_unlink(struct srv_path *p)
{
	struct rtrs_srv_sess *s = p->sess;
	struct srv_path **pp;
	bool last;

	for (pp = &s->paths; *pp && *pp != p; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = p->next;
	s->npaths--;
	last = p->established && --s->paths_up == 0;
	srv_io_forget(p);
	free(p->con);
	free(p->ops);
	free(p);
	return last;
}

void srv_tidy(struct rtrs_srv *srv)
{
	struct rtrs_srv_sess *s, *sn;

	for (s = srv->sessions; s; s = sn) {
		sn = s->next;
		if (!s->paths)
			srv_sess_free(s);
		else if (!srv_sess_live(s))
			s->dying = true;
	}
}
