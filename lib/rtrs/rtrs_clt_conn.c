/* The RTRS client's connector: a path's cid_num connections, each with a
 * conn_req in its CM private data, then INFO_REQ/INFO_RSP on connection 0
 * (seed 002 "Connection establishment" steps 1-4; the kernel's init_conns
 * and rtrs_send_path_info).  Blocking, so it runs inline when the caller
 * waits anyway (open, path add) and on a thread of its own for reconnects,
 * which must not stall the other paths' IO. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/xthread.h"
#include "core/xtime.h"
#include "rtrs/rtrs_clt_pri.h"

void rtrs_clt_xrc_opts(uint32_t cid, uint32_t qd, uint64_t timeout_ns, struct xrc_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->timeout_ns = timeout_ns;
	if (cid == 0) {
		/* SERVICE_CON_QUEUE_DEPTH * 2 receives, as the kernel's
		 * post_recv_path; INFO_RSP is the largest SEND we take: one
		 * descriptor per chunk of the largest possible session */
		o->sq_depth = RTRS_SERVICE_CON_QUEUE_DEPTH * 2;
		o->rq_depth = RTRS_CLT_SVC_RQ;
		o->max_send = RTRS_INFO_RSP_HDR_LEN + RTRS_SG_DESC_LEN * RTRS_MAX_SESS_QUEUE_DEPTH;
	} else {
		/* one RDMA write per request; queue_depth * 2 receives (the
		 * kernel's x2, for rkey_rsp plus invalidations) */
		o->sq_depth = qd + 16;
		o->rq_depth = qd * 2 > 16 ? qd * 2 : 16;
		o->max_send = 4096;
		/* tcp: the ACK for the server's answers rides with our next
		 * requests when they come soon, instead of a segment of its
		 * own per batch (rtrs_clt_next_timer says when it is due) */
		o->ack_delay_ns = RTRS_CLT_ACK_DELAY_NS;
	}
}

static int fail(struct rtrs_conn_job *j, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct rtrs_conn_job *j, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(j->err, sizeof(j->err), fmt, ap);
	va_end(ap);
	j->rc = rc;
	return rc;
}

/* The words for a conn_rsp errno the kernel server sends. */
static const char *rej_reason(int e)
{
	switch (e) {
	case -EBUSY:
		return "the previous session still exists on the server, reconnect later";
	case -EAGAIN:
		return "the server is busy with other clients connecting, try again later";
	case -ENXIO:
		return "no such session on the server (not the first connection)";
	case -EEXIST:
		return "a path between these addresses already exists";
	case -ECONNRESET:
		return "refused by the server";
	case -EPERM:
		return "session name used by another client";
	case -EOPNOTSUPP:
		return "the server's RDMA device has no memory windows for always_invalidate";
	default:
		return strerror(e < 0 ? -e : e);
	}
}

static int connect_one(struct rtrs_conn_job *j, uint32_t cid)
{
	uint8_t req[RTRS_CONN_REQ_LEN], rep[XRC_PRIV_MAX];
	size_t replen = 0;
	struct rtrs_conn_rsp rsp;
	struct xrc_opts xo;
	char xerr[256];
	int rc;

	j->req.cid = (uint16_t)cid;
	j->req.cid_num = (uint16_t)j->cid_num;
	rtrs_conn_req_encode(&j->req, req);
	rtrs_clt_xrc_opts(cid, j->rsp.queue_depth, j->timeout_ns, &xo);
	xo.cancel_fd = j->cancel_fd;
	j->cons[cid] = xrc_connect(&j->uri, &xo, req, sizeof(req), rep, &replen, xerr,
				   sizeof(xerr));
	if (!j->cons[cid]) {
		rc = errno ? -errno : -ECONNREFUSED;
		/* rtrs_rdma_conn_rejected: the reject's private data says why */
		if (rc == -ECONNREFUSED && replen &&
		    rtrs_conn_rsp_decode(rep, replen, &rsp) == 0 && rsp.err)
			return fail(j, rc, "%s: connection %u rejected: %s", j->uristr, cid,
				    rej_reason(rsp.err));
		if (rc == -EMFILE) {	/* name the limit that ran out */
			struct rlimit rl;

			if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
				snprintf(xerr + strlen(xerr), sizeof(xerr) - strlen(xerr),
					 " (the limit on open files is %llu: ulimit -n)",
					 (unsigned long long)rl.rlim_cur);
		}
		if (cid)	/* the first ones went through: say which failed */
			return fail(j, rc, "connection %u of %u: %s", cid, j->cid_num, xerr);
		return fail(j, rc, "%s", xerr);
	}
	/* rtrs_rdma_conn_established */
	rc = rtrs_conn_rsp_decode(rep, replen, &rsp);
	if (rc)
		return fail(j, -ECONNRESET, "%s: not an RTRS server (%s conn_rsp)", j->uristr,
			    rc == -EMSGSIZE ? "no" : rc == -EPROTONOSUPPORT ?
			    "unsupported major version in its" : "bad magic in its");
	if (rsp.err)
		return fail(j, -ECONNRESET, "%s: connection %u: server error: %s", j->uristr, cid,
			    rej_reason(rsp.err));
	if (cid == 0) {
		struct rtrs_geom g;

		if (j->expect_qd && rsp.queue_depth != j->expect_qd) {
			j->close_it = true;
			return fail(j, -ECONNRESET, "%s: queue depth changed (%u, the session's is %u)",
				    j->uristr, rsp.queue_depth, j->expect_qd);
		}
		rtrs_geom_from_conn_rsp(&rsp, &g);
		if (!rsp.queue_depth || rsp.max_hdr_size < 64 || rsp.max_io_size == 0 ||
		    rtrs_chunk_bits(rsp.queue_depth) + rtrs_chunk_bits(g.chunk_size) > 28 ||
		    (uint64_t)rsp.max_io_size + rsp.max_hdr_size > UINT32_MAX)
			return fail(j, -ECONNRESET, "%s: unusable geometry (queue depth %u, "
				    "max io %u, max header %u)", j->uristr, rsp.queue_depth,
				    rsp.max_io_size, rsp.max_hdr_size);
		j->rsp = rsp;
	}
	return 0;
}

/* INFO_REQ with the session name, INFO_RSP into the rbufs: before any other
 * receive is posted on connection 0, so the response cannot land in a small
 * buffer (the kernel posts its receives only after INFO_RSP too). */
static int info_exchange(struct rtrs_conn_job *j)
{
	struct xrc *c = j->cons[0];
	uint32_t qd = j->rsp.queue_depth;
	size_t rxlen = RTRS_INFO_RSP_HDR_LEN + (size_t)RTRS_SG_DESC_LEN * qd;
	uint8_t *rx = calloc(1, rxlen), tx[RTRS_INFO_REQ_LEN];
	struct xrc_mr *rxmr = NULL, *txmr = NULL;
	struct rtrs_info_req ir;
	uint64_t deadline = xtime_ns() + j->timeout_ns;
	bool sent = false, got = false;
	char xerr[256];
	uint16_t sg_cnt;
	int rc;

	j->rbufs = calloc(qd, sizeof(*j->rbufs));
	if (!rx || !j->rbufs) {
		rc = fail(j, -ENOMEM, "%s: out of memory", j->uristr);
		goto out;
	}
	memset(&ir, 0, sizeof(ir));
	snprintf(ir.pathname, sizeof(ir.pathname), "%s", j->sessname);
	rtrs_info_req_encode(&ir, tx);
	rxmr = xrc_reg(xrc_domain(c), rx, rxlen, XRC_ACCESS_LOCAL_WRITE, xerr, sizeof(xerr));
	txmr = rxmr ? xrc_reg(xrc_domain(c), tx, sizeof(tx), XRC_ACCESS_LOCAL_WRITE, xerr,
			      sizeof(xerr)) : NULL;
	if (!txmr) {
		rc = fail(j, -ENOMEM, "%s: %s", j->uristr, xerr);
		goto out;
	}
	rc = xrc_post_recv(c, &(struct xrc_sge){ rx, (uint32_t)rxlen, rxmr }, 1);
	if (!rc)
		rc = xrc_post_send(c, &(struct xrc_sge){ tx, sizeof(tx), txmr }, 1, 2, XRC_SIGNALED);
	if (rc) {
		fail(j, rc, "%s: INFO_REQ: %s", j->uristr, strerror(-rc));
		goto out;
	}
	while (!(sent && got)) {
		struct xrc_wc wc[4];
		uint64_t now = xtime_ns();
		int n;

		if (now >= deadline) {
			rc = fail(j, -ETIMEDOUT, "%s: no INFO_RSP from the server", j->uristr);
			goto out;
		}
		if (atomic_load(&j->cancelled)) {
			rc = fail(j, -ECANCELED, "%s: given up", j->uristr);
			goto out;
		}
		n = xrc_poll(c, wc, 4);
		if (n < 0) {
			rc = fail(j, n, "%s: %s", j->uristr, strerror(-n));
			goto out;
		}
		for (int i = 0; i < n; i++) {
			if (wc[i].status) {
				/* the server knows the session's name only now,
				 * and has no way but closing to refuse it */
				rc = fail(j, -ECONNRESET, "%s: INFO exchange: %s (the server "
					  "refused the session: its log says why; a name "
					  "another client's session holds is one reason)",
					  j->uristr, strerror(-wc[i].status));
				goto out;
			}
			if (wc[i].op == XRC_OP_SEND) {
				sent = true;
			} else if (wc[i].op == XRC_OP_RECV) {
				rc = rtrs_info_rsp_decode(rx, wc[i].len, qd, j->rsp.max_io_size +
							  j->rsp.max_hdr_size, &sg_cnt, j->rbufs);
				if (rc) {
					rc = fail(j, -ECONNRESET, "%s: malformed INFO_RSP (%s)",
						  j->uristr, strerror(-rc));
					goto out;
				}
				got = true;
			}
		}
		if (!n && xrc_state(c) == XRC_DOWN) {
			rc = fail(j, -ECONNRESET, "%s: connection lost during the INFO exchange",
				  j->uristr);
			goto out;
		}
		if (!n)
			xrc_wait(c, deadline - now < 100000000ull ? deadline - now : 100000000ull);
	}
	rc = 0;
out:
	/* an error completion flushed everything; on success both are done */
	if (rc && j->cons[0]) {
		xrc_close(j->cons[0]);
		j->cons[0] = NULL;
	}
	xrc_dereg(txmr);
	xrc_dereg(rxmr);
	free(rx);
	return rc;
}

int rtrs_conn_run(struct rtrs_conn_job *j)
{
	j->rc = 0;
	j->err[0] = 0;
	j->close_it = false;
	memset(&j->rsp, 0, sizeof(j->rsp));
	j->cons = calloc(j->cid_num, sizeof(*j->cons));
	if (!j->cons)
		return fail(j, -ENOMEM, "%s: out of memory", j->uristr);
	/* one after the other, connection 0 first: its conn_rsp gives the
	 * queue depth the IO connections are sized for */
	for (uint32_t cid = 0; cid < j->cid_num; cid++)
		if (connect_one(j, cid))
			return j->rc;
	return info_exchange(j);
}

static void *job_main(void *arg)
{
	struct rtrs_conn_job *j = arg;
	uint64_t one = 1;

	rtrs_conn_run(j);
	atomic_store(&j->finished, true);
	if (write(j->efd, &one, sizeof(one)) < 0) {
		/* the loop also looks at `finished` when it wakes */
	}
	return NULL;
}

int rtrs_conn_start(struct rtrs_conn_job *j)
{
	int rc;

	j->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (j->efd < 0)
		return -errno;
	j->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (j->cancel_fd < 0) {
		rc = errno;
		close(j->efd);
		j->efd = -1;
		j->cancel_fd = 0;
		return -rc;
	}
	atomic_store(&j->finished, false);
	atomic_store(&j->cancelled, false);
	rc = xthread_create(&j->th, job_main, j);
	if (rc) {
		close(j->efd);
		close(j->cancel_fd);
		j->efd = -1;
		j->cancel_fd = 0;
		return -rc;
	}
	j->threaded = true;
	return 0;
}

void rtrs_conn_join(struct rtrs_conn_job *j)
{
	if (j && j->threaded) {
		pthread_join(j->th, NULL);
		j->threaded = false;
	}
}

void rtrs_conn_cancel(struct rtrs_conn_job *j)
{
	uint64_t one = 1;

	if (!j || j->cancel_fd <= 0)
		return;
	atomic_store(&j->cancelled, true);
	if (write(j->cancel_fd, &one, sizeof(one)) < 0) {
		/* the INFO exchange also looks at `cancelled` */
	}
}

void rtrs_conn_free(struct rtrs_conn_job *j)
{
	if (!j)
		return;
	rtrs_conn_join(j);
	if (j->cancel_fd > 0)
		close(j->cancel_fd);
	if (j->cons)
		for (uint32_t i = 0; i < j->cid_num; i++)
			xrc_close(j->cons[i]);
	free(j->cons);
	free(j->rbufs);
	if (j->efd >= 0)
		close(j->efd);
	free(j);
}
