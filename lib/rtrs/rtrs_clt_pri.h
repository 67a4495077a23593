/* Inside the RTRS client: the session and path objects shared by
 * rtrs_clt.c (session, requests, the loop) and rtrs_clt_conn.c (the
 * connector: a path's connections and its INFO exchange). */
#ifndef XPRT_RTRS_CLT_PRI_H
#define XPRT_RTRS_CLT_PRI_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/log.h"
#include "rtrs/rtrs_clt.h"
#include "rtrs/rtrs_clt_core.h"
#include "rtrs/rtrs_hb.h"
#include "rtrs/rtrs_wire.h"
#include "xprt/xrc.h"

/* A path's connection handshake, run inline (open, path add) or on the
 * connector thread (reconnects at run time).  The thread owns everything
 * in it until `finished`; then the loop's thread takes the connections. */
struct rtrs_conn_job {
	/* in */
	struct xuri uri;
	char uristr[300];
	char sessname[RTRS_NAME_MAX + 1];
	struct rtrs_conn_req req;	/* cid/cid_num filled per connection */
	uint32_t cid_num;
	uint32_t expect_qd;		/* the session's queue depth, 0 = not known yet */
	uint64_t timeout_ns;
	/* out */
	int rc;				/* 0 or -errno */
	bool close_it;			/* do not retry (queue depth changed) */
	char err[256];
	struct xrc **cons;		/* cid_num, all XRC_UP on success */
	struct rtrs_conn_rsp rsp;	/* from connection 0 */
	struct rtrs_rbuf *rbufs;	/* rsp.queue_depth server chunks */
	/* the thread */
	bool threaded;
	pthread_t th;
	int efd;			/* eventfd: written once when finished */
	atomic_bool finished;
	int cancel_fd;			/* eventfd: rtrs_conn_cancel() (0: none) */
	atomic_bool cancelled;
};

/* Fills the job's outputs; blocking.  Returns job->rc. */
int rtrs_conn_run(struct rtrs_conn_job *j);
/* Runs it on a thread; 0 or -errno (then nothing runs). */
int rtrs_conn_start(struct rtrs_conn_job *j);
/* Waits for a threaded job (a started one always ends, bounded by its
 * timeout per connection). */
void rtrs_conn_join(struct rtrs_conn_job *j);
/* Asks a started job to give up now (its connect and INFO exchange end
 * with -ECANCELED): a join after it is quick. */
void rtrs_conn_cancel(struct rtrs_conn_job *j);
/* Closes what the job still owns and frees it.  NULL ok. */
void rtrs_conn_free(struct rtrs_conn_job *j);

/* xrc queue sizes of connection cid for a session of queue depth qd (0 for
 * connection 0, before conn_rsp told it). */
void rtrs_clt_xrc_opts(uint32_t cid, uint32_t qd, uint64_t timeout_ns, struct xrc_opts *o);

/* How long the ACK for the server's answers on an IO connection may wait
 * for our next requests (tcp, xrc_opts.ack_delay_ns). */
#define RTRS_CLT_ACK_DELAY_NS	(200 * XTIME_NS_PER_US)
#define RTRS_CLT_RX_LEN		RTRS_RKEY_RSP_LEN	/* every receive buffer */
#define RTRS_CLT_SVC_RQ		(RTRS_SERVICE_CON_QUEUE_DEPTH * 2)

struct clt_con {
	struct xrc *c;
	uint8_t *rx;			/* nrx receive buffers of RTRS_CLT_RX_LEN */
	struct xrc_mr *rxmr;
	uint32_t nrx;
	bool dirty;			/* posted with XRC_MORE: flush */
	bool want_out;			/* EPOLLOUT registered */
	bool in_epoll;
	bool hinted;			/* in epoll and reads only when told */
};

struct clt_path {
	struct rtrs_cpath core;		/* first: the core's view */
	struct rtrs_clt *s;
	struct xuri uri;
	char name[300];			/* canonical URI */
	uint8_t uuid[16];		/* sess_uuid: this path */
	uint16_t recon_cnt;
	bool for_new_clt;		/* first_conn in conn_req */
	bool adding;			/* added at run time, not yet up: a failed
					 * first connect closes it (no retry) */
	uint32_t ncon;
	struct clt_con *cons;		/* NULL while not connected */
	struct rtrs_geom geom;
	uint32_t max_io;
	uint32_t flags;			/* conn_rsp flags: RTRS_MSG_NEW_RKEY_F */
	struct rtrs_rbuf *rbufs;
	struct xrc_dom *dom;
	struct xrc_mr *iu_mr;
	struct xrc_mr **umr;		/* one per s->mem[] */
	unsigned numr;
	struct rtrs_hb hb;
	struct rtrs_conn_job *job;	/* a connect under way on its thread */
	char last_error[256];
	uint64_t stray_rsps;		/* responses for no request in flight here */
};

struct clt_mem {
	void *addr;
	size_t len;
};

struct rtrs_clt {
	struct rtrs_core core;
	struct rtrs_clt_opts o;
	char sessname[RTRS_NAME_MAX + 1];
	uint8_t paths_uuid[16];
	int epfd;
	bool quiet;			/* rtrs_clt_quiet(): skip the next clt_ready() */
	int nhinted;			/* connections with readiness hints on */
	uint8_t *iu;			/* depth * iu_size: user header + rtrs msg per permit */
	uint32_t iu_size;
	uint32_t max_io;
	uint32_t max_hdr;
	struct clt_mem *mem;
	unsigned nmem;
	void (*link_ev)(void *ctx, enum rtrs_clt_link_ev ev);
	void *ctx;
	uint64_t now;			/* of the current poll */
};

static inline struct clt_path *P(struct rtrs_cpath *cp) { return (struct clt_path *)cp; }
static inline struct clt_path *path_at(const struct rtrs_clt *s, unsigned i)
{
	return P(s->core.paths[i]);
}

/* rtrs_clt.c */
void clt_uuid_v4(uint8_t u[16]);

/* rtrs_clt_path.c: a path's life */
struct clt_path *clt_path_new(struct rtrs_clt *s, const struct xuri *u);
void clt_path_free(struct clt_path *p);	/* NULL ok */
/* Connects p now, blocking: 0 (connected, not yet up in the core) or
 * -errno with p->last_error; close_it: do not retry. */
int clt_path_connect_inline(struct clt_path *p, uint64_t now, bool *close_it);
/* core_ops.connect: starts the connector thread. */
void clt_op_connect(void *ctx, struct rtrs_cpath *cp, uint64_t now);
/* The connector thread finished: take its connections over. */
void clt_path_job_done(struct clt_path *p, uint64_t now);
void clt_path_cancel_job(struct clt_path *p);	/* joins it */
/* Closes the connections and what was registered for them. */
void clt_path_detach(struct clt_path *p);
/* A CONNECTED path failed: detach, then fail over and reconnect. */
void clt_path_fail(struct clt_path *p, uint64_t now, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int clt_post_rx(struct clt_con *k, uint32_t slot);
/* Registers s->mem[i] in p's domain into p->umr[i]. */
int clt_reg_mem(struct clt_path *p, unsigned i, char *err, size_t errlen);

#endif
