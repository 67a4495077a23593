/* RNBD client: see rnbd_clt.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "core/log.h"
#include "core/xtime.h"
#include "rnbd/rnbd_clt.h"

#define SECTOR 512u
#define RSP_BUF 4096u	/* SESS_INFO_RSP and OPEN_RSP land here */

struct io;

struct part {
	struct io *io;
	struct rnbd_clt_dev *d;
	struct part *next;	/* free list */
};

struct io {
	struct rnbd_clt_dev *d;
	unsigned op;
	uint32_t flags;
	uint64_t off, len;	/* what is left to send */
	bool flush;		/* FLUSH: its one empty part still to send */
	uint8_t *buf;
	uint32_t inflight;
	int err;
	void (*done)(void *priv, int err);
	void *priv;
	struct io *next;	/* the device's queue of IOs with parts to send */
};

struct rnbd_clt_dev {
	struct rtrs_clt *s;
	struct rnbd_clt_geom g;
	uint8_t mode;
	char name[RNBD_NAME_MAX + 1];
	uint8_t *rsp;		/* registered, RSP_BUF bytes */
	struct part *parts, *free_parts;
	struct io *qhead, *qtail;
	uint32_t busy;
	enum { RO_IDLE, RO_SEND_INFO, RO_INFO, RO_SEND_OPEN, RO_OPEN } reopen;
	uint64_t reopens;
	int reopen_err;
	int lost;		/* the last re-open failed: IO fails with it */
	bool retrying;		/* a re-open of rnbd_clt_reopen(): outside the
				 * session's gate, which it does not resume */
	/* IO that ended inside rnbd_clt_submit() (failed at once): its done
	 * runs from the next rnbd_clt_kick(), never inside the submit, where
	 * a caller that submits again from done would recurse without end */
	unsigned in_submit;
	struct io *fin_head, *fin_tail;
	struct rnbd_clt_dev *kept_next;	/* on `kept` */
};

/* Devices rnbd_clt_close() could not free, their IO or re-open still
 * out: kept (reachable, not leaked) until the process ends, which is
 * what follows a close that gave up. */
static struct rnbd_clt_dev *kept;

/* rnbd_clt_wait(), which gives up on the stop flag only when stoppable:
 * closing goes on after ^C, bounded by its time. */
static int wait_loop(struct rtrs_clt *s, const volatile int *flag, uint64_t timeout_ns,
		     bool stoppable)
{
	uint64_t deadline = xtime_ns() + timeout_ns;

	for (;;) {
		uint64_t now = xtime_ns(), t;
		struct epoll_event ev;
		int ms;

		/* a stop is looked at first: once set, nothing more waits */
		if (stoppable && rtrs_clt_stopping(s))
			return -EINTR;
		rtrs_clt_poll(s, now);
		if (flag && *flag)
			return 0;
		now = xtime_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		if (rtrs_clt_arm(s))
			continue;
		t = rtrs_clt_next_timer(s);
		t = t < deadline ? t : deadline;
		ms = t <= now ? 0 : (int)((t - now + 999999) / 1000000);
		/* EINTR: the stop flag, looked at next */
		epoll_wait(rtrs_clt_fd(s), &ev, 1, ms);
	}
}

int rnbd_clt_wait(struct rtrs_clt *s, const volatile int *flag, uint64_t timeout_ns)
{
	return wait_loop(s, flag, timeout_ns, true);
}

/* --- session messages --------------------------------------------------- */

struct sync_req {
	volatile int done;
	int err;
	bool abandoned;		/* the caller gave up: conf frees it */
};

static void sync_conf(void *priv, int err)
{
	struct sync_req *r = priv;

	if (r->abandoned) {
		free(r);
		return;
	}
	r->err = err;
	r->done = 1;
}

/* One request and its answer, blocking.  0 or -errno; *left (may be NULL)
 * says whether a request given up is still out, to be answered into data
 * later. */
static int sync_call(struct rtrs_clt *s, int dir, const void *usr, uint32_t usrlen, void *data,
		     uint32_t datalen, uint64_t timeout_ns, bool stoppable, bool *left)
{
	struct sync_req *r;
	uint64_t deadline = xtime_ns() + timeout_ns;
	int rc;

	if (stoppable && rtrs_clt_stopping(s))
		return -EINTR;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	while ((rc = rtrs_clt_request(s, dir | RTRS_CLT_ADMIN, usr, usrlen, data, datalen,
				      sync_conf, r)) == -EAGAIN) {
		uint64_t now = xtime_ns();

		if (now >= deadline) {
			rc = -ETIMEDOUT;
			break;
		}
		rc = wait_loop(s, NULL, deadline - now < 10000000 ? deadline - now : 10000000,
			       stoppable);
		if (rc == -EINTR)
			break;
	}
	if (rc) {
		free(r);
		return rc;
	}
	rc = wait_loop(s, &r->done, timeout_ns, stoppable);
	if (rc) {
		/* still queued or in flight: its confirmation comes later */
		r->abandoned = true;
		if (left)
			*left = true;
		return rc;
	}
	rc = r->err;
	free(r);
	return rc;
}

static const char *open_err(int rc)
{
	switch (rc) {
	case -ENOENT:
	case -ENODEV:
	case -ENXIO:
		return "no such export";
	case -EPERM:
	case -EACCES:
	case -EBUSY:
		return "access refused (open for writing elsewhere, or read-only)";
	case -EROFS:
		return "read-only export";
	case -ETIMEDOUT:
		return "no answer from the server";
	case -ENOTCONN:
		return "all paths are down";
	default:
		return strerror(-rc);
	}
}

struct rnbd_clt_dev *rnbd_clt_open(struct rtrs_clt *s, const char *dev_name,
				   enum rnbd_access_mode mode, uint64_t timeout_ns,
				   char *err, size_t errlen)
{
	uint8_t si[RNBD_SESS_INFO_LEN], op[RNBD_OPEN_LEN];
	struct rnbd_sess_info info;
	struct rnbd_open_rsp or;
	struct rnbd_open o;
	struct rnbd_clt_dev *d;
	uint32_t qd = rtrs_clt_queue_depth(s);
	bool left = false;
	int rc;

	memset(&o, 0, sizeof(o));
	o.access_mode = (uint8_t)mode;
	if (!dev_name || strlen(dev_name) >= sizeof(o.dev_name)) {
		xerr(err, errlen, "device name of 1 to %u characters", RNBD_NAME_MAX - 1);
		errno = EINVAL;
		return NULL;
	}
	snprintf(o.dev_name, sizeof(o.dev_name), "%s", dev_name);
	if (rnbd_open_encode(&o, op)) {
		xerr(err, errlen, "device %s: bad name or access mode", dev_name);
		errno = EINVAL;
		return NULL;
	}
	d = calloc(1, sizeof(*d));
	if (!d || !(d->rsp = aligned_alloc(4096, RSP_BUF)) ||
	    !(d->parts = calloc(qd ? qd : 1, sizeof(*d->parts)))) {
		rc = -ENOMEM;
		xerr(err, errlen, "out of memory");
		goto fail;
	}
	d->s = s;
	d->mode = (uint8_t)mode;
	snprintf(d->name, sizeof(d->name), "%s", dev_name);
	for (uint32_t i = 0; i < qd; i++) {
		d->parts[i].d = d;
		d->parts[i].next = d->free_parts;
		d->free_parts = &d->parts[i];
	}
	memset(d->rsp, 0, RSP_BUF);
	rc = rtrs_clt_add_mem(s, d->rsp, RSP_BUF, err, errlen);
	if (rc)
		goto fail;
	/* SESS_INFO: our protocol version; the server answers with the one
	 * the session runs (min of both) */
	rnbd_sess_info_encode(&(struct rnbd_sess_info){ RNBD_PROTO_VER_MAJOR }, si);
	rc = sync_call(s, RTRS_READ, si, sizeof(si), d->rsp, RNBD_SESS_INFO_LEN, timeout_ns, true,
		       &left);
	if (rc == 0 && rnbd_sess_info_rsp_decode(d->rsp, RNBD_SESS_INFO_LEN, &info))
		rc = -EPROTO;
	if (rc) {
		xerr(err, errlen, "session info: %s", rc == -EPROTO ?
			"malformed answer from the server" : open_err(rc));
		goto fail;
	}
	d->g.proto_ver = info.ver;
	memset(d->rsp, 0, RNBD_OPEN_RSP_LEN);
	rc = sync_call(s, RTRS_READ, op, sizeof(op), d->rsp, RNBD_OPEN_RSP_LEN, timeout_ns, true,
		       &left);
	if (rc == 0 && rnbd_open_rsp_decode(d->rsp, RNBD_OPEN_RSP_LEN, &or))
		rc = -EPROTO;
	if (rc) {
		xerr(err, errlen, "device %s: %s", dev_name, rc == -EPROTO ?
			"malformed open response from the server" : open_err(rc));
		goto fail;
	}
	d->g.device_id = or.device_id;
	d->g.nsectors = or.nsectors;
	d->g.size = or.nsectors * SECTOR;
	d->g.max_hw_sectors = or.max_hw_sectors;
	d->g.max_write_zeroes_sectors = or.max_write_zeroes_sectors;
	d->g.max_discard_sectors = or.max_discard_sectors;
	d->g.discard_granularity = or.discard_granularity;
	d->g.discard_alignment = or.discard_alignment;
	d->g.physical_block_size = or.physical_block_size;
	d->g.logical_block_size = or.logical_block_size;
	d->g.max_segments = or.max_segments;
	d->g.secure_discard = or.secure_discard;
	d->g.cache_policy = or.cache_policy;
	/* requests that wait through an outage go out after the re-open */
	rtrs_clt_hold_on_reconnect(s, true);
	return d;
fail:
	if (d) {
		free(d->parts);
		/* a request given up (timed out, or the stop flag) may still
		 * be answered into the buffer: then it stays (registered)
		 * with the session */
		if (d->rsp && !left && rtrs_clt_del_mem(s, d->rsp) == 0)
			free(d->rsp);
		free(d);
	}
	errno = -rc;
	return NULL;
}

const struct rnbd_clt_geom *rnbd_clt_geom(const struct rnbd_clt_dev *d) { return &d->g; }
uint32_t rnbd_clt_busy(const struct rnbd_clt_dev *d) { return d->busy; }

uint32_t rnbd_clt_max_io(const struct rnbd_clt_dev *d)
{
	uint64_t m = rtrs_clt_max_io(d->s), lbs = d->g.logical_block_size ? d->g.logical_block_size
								    : SECTOR;

	if (d->g.max_hw_sectors && (uint64_t)d->g.max_hw_sectors * SECTOR < m)
		m = (uint64_t)d->g.max_hw_sectors * SECTOR;
	m -= m % lbs;
	return (uint32_t)m;
}

/* --- re-opening after every path was down --------------------------------------
 * The server may have dropped the session meanwhile (restarted, or timed
 * its paths out), and with it our open device: the kernel's rnbd-client
 * sends SESS_INFO and OPEN again on RTRS_CLT_LINK_EV_RECONNECTED
 * (remap_devs).  The session holds the requests that waited until we
 * resume it, so they reach a server that knows the device again. */

static void part_conf(void *priv, int err);

/* What a re-open found for one device: its held requests (parts of its IO
 * that waited in the session, their headers encoded with the old id) go
 * to its new id, or fail. */
struct held_fix {
	struct rnbd_clt_dev *d;
	uint32_t new_id;
	int err;
};

static int fix_held(void *ctx, void (*conf)(void *priv, int err), void *priv, void *usr,
		    uint32_t usrlen)
{
	struct held_fix *h = ctx;
	struct rnbd_io m;

	if (conf != part_conf || ((struct part *)priv)->d != h->d)
		return 0;	/* another device's, or not IO */
	if (h->err)
		return h->err;
	if (rnbd_io_decode(usr, usrlen, &m))
		return -EPROTO;
	m.device_id = h->new_id;
	rnbd_io_encode(&m, usr);
	return 0;
}

/* Held requests never reach a device other than their own: they are
 * readdressed or failed before the session lets them go, and the session
 * lets them go only once every device on it has re-opened. */
static void reopen_done(struct rnbd_clt_dev *d, int err, uint32_t new_id)
{
	struct held_fix h = { d, new_id, err };
	bool retry = d->retrying;

	if (!retry && (err || new_id != d->g.device_id))
		rtrs_clt_held_foreach(d->s, fix_held, &h);
	if (!err)
		d->g.device_id = new_id;
	d->reopen = RO_IDLE;
	d->retrying = false;
	d->reopen_err = err;
	d->lost = err;
	if (!retry)
		rtrs_clt_resume(d->s);
}

static void reopen_open_conf(void *priv, int err)
{
	struct rnbd_clt_dev *d = priv;
	struct rnbd_open_rsp or;

	if (!err && rnbd_open_rsp_decode(d->rsp, RNBD_OPEN_RSP_LEN, &or))
		err = -EPROTO;
	/* A server that numbers the device differently now (ours and the
	 * kernel's number a session's devices in the order they are
	 * opened): what waited is readdressed (process_msg_open_rsp takes
	 * the new id the same way). */
	if (!err)
		d->reopens++;
	reopen_done(d, err, err ? d->g.device_id : or.device_id);
}

static void reopen_info_conf(void *priv, int err)
{
	struct rnbd_clt_dev *d = priv;
	struct rnbd_sess_info info;

	if (!err && rnbd_sess_info_rsp_decode(d->rsp, RNBD_SESS_INFO_LEN, &info))
		err = -EPROTO;
	if (err) {
		reopen_done(d, err, d->g.device_id);
		return;
	}
	d->reopen = RO_SEND_OPEN;
	rnbd_clt_kick(d);
}

/* Sends the next re-open message when it is due; false when it must wait
 * for a permit. */
static bool reopen_step(struct rnbd_clt_dev *d)
{
	uint8_t msg[RNBD_OPEN_LEN];
	struct rnbd_open o;
	int rc;

	if (d->reopen == RO_SEND_INFO) {
		rnbd_sess_info_encode(&(struct rnbd_sess_info){ RNBD_PROTO_VER_MAJOR }, msg);
		rc = rtrs_clt_request(d->s, RTRS_READ | RTRS_CLT_ADMIN, msg, RNBD_SESS_INFO_LEN,
				      d->rsp, RNBD_SESS_INFO_LEN, reopen_info_conf, d);
		if (rc == 0)
			d->reopen = RO_INFO;
	} else if (d->reopen == RO_SEND_OPEN) {
		memset(&o, 0, sizeof(o));
		o.access_mode = d->mode;
		snprintf(o.dev_name, sizeof(o.dev_name), "%s", d->name);
		rnbd_open_encode(&o, msg);
		rc = rtrs_clt_request(d->s, RTRS_READ | RTRS_CLT_ADMIN, msg, RNBD_OPEN_LEN, d->rsp,
				      RNBD_OPEN_RSP_LEN, reopen_open_conf, d);
		if (rc == 0)
			d->reopen = RO_OPEN;
	} else {
		return true;
	}
	if (rc == -EAGAIN)
		return false;
	if (rc)
		reopen_done(d, rc, d->g.device_id);
	return true;
}

void rnbd_clt_link_ev(struct rnbd_clt_dev *d, enum rtrs_clt_link_ev ev)
{
	if (!d || ev != RTRS_CLT_LINK_EV_RECONNECTED)
		return;
	if (d->reopen != RO_IDLE) {
		/* a retry under way is this reconnect's re-open now: it
		 * resumes the session when it ends */
		d->retrying = false;
		return;
	}
	d->reopen = RO_SEND_INFO;
	reopen_step(d);
}

int rnbd_clt_reopen(struct rnbd_clt_dev *d)
{
	if (!d->lost)
		return 0;
	if (d->reopen != RO_IDLE)
		return -EINPROGRESS;
	if (!rtrs_clt_connected(d->s))
		return -ENOTCONN;
	d->retrying = true;
	d->reopen = RO_SEND_INFO;
	reopen_step(d);
	return -EINPROGRESS;
}

uint64_t rnbd_clt_reopens(const struct rnbd_clt_dev *d, int *last_err)
{
	if (last_err)
		*last_err = d->reopen_err;
	return d->reopens;
}

/* --- IO ----------------------------------------------------------------------- */

static uint64_t part_max(const struct rnbd_clt_dev *d, unsigned op)
{
	switch (op) {
	case RNBD_OP_DISCARD:
		return (uint64_t)d->g.max_discard_sectors * SECTOR;
	case RNBD_OP_WRITE_ZEROES:
		return (uint64_t)d->g.max_write_zeroes_sectors * SECTOR;
	case RNBD_OP_FLUSH:
		return UINT32_MAX;	/* one part, of length 0 */
	default:
		return rnbd_clt_max_io(d);
	}
}

static void io_finish(struct io *io)
{
	struct rnbd_clt_dev *d = io->d;

	if (d->in_submit) {
		io->next = NULL;
		if (d->fin_tail)
			d->fin_tail->next = io;
		else
			d->fin_head = io;
		d->fin_tail = io;
		return;
	}
	d->busy--;
	if (io->done)
		io->done(io->priv, io->err);
	free(io);
}

static void part_conf(void *priv, int err)
{
	struct part *pt = priv;
	struct io *io = pt->io;
	struct rnbd_clt_dev *d = pt->d;

	pt->io = NULL;
	pt->next = d->free_parts;
	d->free_parts = pt;
	if (err && !io->err)
		io->err = err;
	io->inflight--;
	/* still queued: rnbd_clt_kick() finishes it when it leaves the queue */
	if (!io->inflight && (!(io->len || io->flush) || io->err) && io != d->qhead)
		io_finish(io);
	rnbd_clt_kick(d);
}

unsigned rnbd_clt_kick(struct rnbd_clt_dev *d)
{
	unsigned sent = 0;
	struct io *io;

	/* those that ended inside a submit, as they were now: what their
	 * done callbacks submit and fails at once waits for the next call */
	if (!d->in_submit && d->fin_head) {
		struct io *fin = d->fin_head;

		d->fin_head = d->fin_tail = NULL;
		while ((io = fin)) {
			fin = io->next;
			io_finish(io);
			sent++;
		}
	}
	if (d->reopen != RO_IDLE && !reopen_step(d))
		return sent;
	while ((io = d->qhead)) {
		if (d->lost && !io->err)
			io->err = d->lost;	/* the device is gone from the server */
		if (!io->err && (io->len || io->flush) && d->free_parts) {
			struct part *pt = d->free_parts;
			uint64_t n = io->len < part_max(d, io->op) ? io->len : part_max(d, io->op);
			bool data = io->op == RNBD_OP_READ || io->op == RNBD_OP_WRITE;
			uint8_t msg[RNBD_IO_LEN];
			int rc;

			rnbd_io_encode(&(struct rnbd_io){ d->g.device_id, io->off / SECTOR,
							  io->op | io->flags, (uint32_t)n, 0 }, msg);
			pt->io = io;
			rc = rtrs_clt_request(d->s, io->op == RNBD_OP_READ ? RTRS_READ : RTRS_WRITE,
					      msg, sizeof(msg), data ? io->buf : NULL,
					      data ? (uint32_t)n : 0, part_conf, pt);
			if (rc == -EAGAIN) {
				pt->io = NULL;
				break;
			}
			if (rc) {
				pt->io = NULL;
				io->err = rc;
			} else {
				d->free_parts = pt->next;
				io->inflight++;
				io->flush = false;
				io->off += n;
				io->len -= n;
				if (data)
					io->buf += n;
				sent++;
				continue;
			}
		}
		if ((io->len || io->flush) && !io->err)
			break;	/* waits for a permit */
		/* everything of it is out (or it failed): off the queue */
		d->qhead = io->next;
		if (!d->qhead)
			d->qtail = NULL;
		if (!io->inflight)
			io_finish(io);
	}
	return sent;
}

int rnbd_clt_submit(struct rnbd_clt_dev *d, unsigned op, uint32_t flags, uint64_t off,
		    void *buf, uint64_t len, void (*done)(void *priv, int err), void *priv)
{
	uint32_t known = RNBD_F_SYNC | (op == RNBD_OP_WRITE ? RNBD_F_FUA : 0) |
			 (op == RNBD_OP_WRITE_ZEROES ? RNBD_F_NOUNMAP : 0);
	struct io *io;

	if (op != RNBD_OP_READ && op != RNBD_OP_WRITE && op != RNBD_OP_FLUSH &&
	    op != RNBD_OP_DISCARD && op != RNBD_OP_WRITE_ZEROES)
		return -EINVAL;
	if ((flags & ~known) || off % SECTOR || len % SECTOR || off > d->g.size ||
	    len > d->g.size - off)
		return -EINVAL;
	if (op == RNBD_OP_FLUSH ? len != 0 : len == 0)
		return -EINVAL;
	if ((op == RNBD_OP_READ || op == RNBD_OP_WRITE) && !buf)
		return -EINVAL;
	if (op != RNBD_OP_READ && d->mode == RNBD_ACCESS_RO)
		return -EROFS;
	if (d->lost)
		return d->lost;
	if (!part_max(d, op))
		return -EOPNOTSUPP;
	io = calloc(1, sizeof(*io));
	if (!io)
		return -ENOMEM;
	*io = (struct io){ d, op, flags, off, len, op == RNBD_OP_FLUSH, buf, 0, 0, done, priv,
			   NULL };
	d->busy++;
	if (d->qtail)
		d->qtail->next = io;
	else
		d->qhead = io;
	d->qtail = io;
	d->in_submit++;
	rnbd_clt_kick(d);
	d->in_submit--;
	return 0;
}

int rnbd_clt_close(struct rnbd_clt_dev *d, uint64_t timeout_ns)
{
	uint8_t msg[RNBD_CLOSE_LEN];
	uint64_t deadline;
	int rc;

	if (!d)
		return 0;
	deadline = xtime_ns() + timeout_ns;
	rnbd_clt_kick(d);	/* IO that failed inside a submit ends first */
	/* a re-open under way answers into d (and counts in the session's
	 * gate): it ends first */
	while (d->busy || d->reopen != RO_IDLE) {
		uint64_t now = xtime_ns();

		if (now >= deadline || !rtrs_clt_alive(d->s))
			break;
		wait_loop(d->s, NULL, deadline - now < 10000000 ? deadline - now : 10000000, false);
		rnbd_clt_kick(d);
	}
	if (d->busy || (d->reopen != RO_IDLE && d->reopen != RO_SEND_INFO &&
			d->reopen != RO_SEND_OPEN)) {
		rc = -ETIMEDOUT;
		/* its IO or re-open still references it (sessions may close
		 * on several threads) */
		d->kept_next = __atomic_load_n(&kept, __ATOMIC_RELAXED);
		while (!__atomic_compare_exchange_n(&kept, &d->kept_next, d, false,
						    __ATOMIC_RELEASE, __ATOMIC_RELAXED))
			;
		goto out;
	}
	if (d->reopen != RO_IDLE) {
		/* nothing of the re-open is out: count it done in the gate
		 * (a retry never counted there) */
		d->reopen = RO_IDLE;
		if (!d->retrying)
			rtrs_clt_resume(d->s);
		d->retrying = false;
	}
	rtrs_clt_hold_on_reconnect(d->s, false);
	rnbd_close_encode(&(struct rnbd_close){ d->g.device_id }, msg);
	rc = sync_call(d->s, RTRS_WRITE, msg, sizeof(msg), NULL, 0,
		       xtime_ns() < deadline ? deadline - xtime_ns() : 1, false, NULL);
	free(d->parts);
	if (rtrs_clt_del_mem(d->s, d->rsp) == 0)
		free(d->rsp);
	free(d);
	return rc;
out:
	return rc;
}
