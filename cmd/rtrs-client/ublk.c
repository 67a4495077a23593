/* rtrs-client map --ublk: the RNBD device as /dev/ublkbN, served through
 * the kernel's ublk driver (ublk_drv, include/uapi/linux/ublk_cmd.h)
 * instead of an NBD socket.
 *
 * Two io_uring rings with 128-byte entries carry the driver's commands
 * (IORING_OP_URING_CMD): one on /dev/ublk-control for the device's life
 * (ADD_DEV, SET_PARAMS, START_DEV, STOP_DEV, DEL_DEV), one on the
 * device's /dev/ublkcN for its one queue.  Each of the queue's tags owns
 * a buffer in memory registered with the session; a FETCH_REQ per tag
 * tells the driver we are ready, the driver completes it when a block
 * request arrives (its descriptor in the mmap'ed array: op, sectors, and
 * a write's data already copied into the tag's buffer), we hand it to
 * RNBD, and COMMIT_AND_FETCH_REQ returns the result (a read's data from
 * the buffer) and waits for the tag's next request.
 *
 * START_DEV and STOP_DEV block in the driver until the queue has
 * fetched (start) or the disk's outstanding IO is done (stop, through
 * del_gendisk); the driver refuses to run control commands in the
 * submitting task (-EAGAIN for a non-blocking issue), so io_uring runs
 * them in a worker while this one thread goes on serving the IO they
 * wait for -- the partition scan's reads on START_DEV.  Both rings'
 * fds are in the session's epoll set. */
#include "cmd.h"
#include "core/xtime.h"
#include "rnbd/rnbd_ublk.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define CONTROL_DEV	"/dev/ublk-control"
#define DEPTH		128u		/* requests in flight, one buffer each */
#define MAX_IO		(512u << 10)	/* bytes of one request */
#define TAG_QUEUE	2		/* epoll data of the queue's ring */
#define TAG_CONTROL	3		/* and of the control ring */
#define CTRL_ID		(1ull << 32)	/* user_data of the async control commands */

/* The ioctl-encoded commands (the legacy numbers are a kernel option) */
#ifndef UBLK_F_CMD_IOCTL_ENCODE
#define UBLK_F_CMD_IOCTL_ENCODE	(1ULL << 6)
#endif
#define U_CMD(nr)	((nr) == UBLK_CMD_GET_DEV_INFO ? _IOR('u', (nr), struct ublksrv_ctrl_cmd) \
					       : _IOWR('u', (nr), struct ublksrv_ctrl_cmd))
#define U_IO(nr)	_IOWR('u', (nr), struct ublksrv_io_cmd)

enum tag_state {
	T_KERNEL,	/* a FETCH or COMMIT_AND_FETCH is with the driver */
	T_RNBD,		/* the request is at the server */
	T_IDLE,		/* the driver aborted the queue: nothing outstanding */
};

struct utag {
	struct ublkx *x;
	uint16_t tag;
	uint8_t state;
	struct rnbd_ublk_req r;
};

struct ublkx {
	struct sess *ss;
	int ctl_fd, cdev_fd;
	struct io_uring cring, qring;
	bool cring_ok, qring_ok, added;
	unsigned dev_id;
	uint64_t dev_sectors;
	const struct ublksrv_io_desc *descs;
	size_t descs_len;
	uint8_t *bufs;
	bool bufs_registered;
	unsigned unsubmitted;		/* queue entries prepared, not yet submitted */
	unsigned with_kernel, at_rnbd;
	int start_rc, stop_rc;		/* 1 pending, 0 done, -errno */
	bool stop_asked;
	uint64_t requests, errors;
	struct ublkx *kept_next;	/* see ublk_free() */
	struct utag tags[DEPTH];
};

/* --- the control ring ------------------------------------------------------ */

static struct io_uring_sqe *ctrl_prep(struct ublkx *x, unsigned nr, uint64_t addr, uint16_t len,
				      uint64_t data0)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&x->cring);
	struct ublksrv_ctrl_cmd *c;

	if (!sqe)
		return NULL;
	memset(sqe, 0, 2 * sizeof(*sqe));
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = x->ctl_fd;
	sqe->cmd_op = U_CMD(nr);
	sqe->user_data = nr;
	c = (struct ublksrv_ctrl_cmd *)sqe->cmd;
	c->dev_id = x->dev_id;
	c->queue_id = (uint16_t)-1;
	c->addr = addr;
	c->len = len;
	c->data[0] = data0;
	return sqe;
}

/* One control command, waited for: its result (>= 0) or -errno. */
static int ctrl_sync(struct ublkx *x, unsigned nr, void *buf, uint16_t len, uint64_t data0)
{
	struct io_uring_cqe *cqe;
	int rc;

	if (!ctrl_prep(x, nr, (uint64_t)(uintptr_t)buf, len, data0))
		return -EBUSY;
	rc = io_uring_submit(&x->cring);
	if (rc < 0)
		return rc;
	for (;;) {
		/* the commands waited for are short (ADD_DEV, SET_PARAMS,
		 * GET_DEV_INFO, DEL_DEV): a signal does not cut them off,
		 * which would leave a device added or deleted unbeknownst */
		rc = io_uring_wait_cqe(&x->cring, &cqe);
		if (rc == -EINTR)
			continue;
		if (rc < 0)
			return rc;
		if (cqe->user_data != nr) {	/* an async one's late answer */
			io_uring_cqe_seen(&x->cring, cqe);
			continue;
		}
		rc = cqe->res;
		io_uring_cqe_seen(&x->cring, cqe);
		return rc;
	}
}

/* Submits START_DEV or STOP_DEV without waiting; the answer comes to
 * ctrl_reap(). */
static int ctrl_async(struct ublkx *x, unsigned nr, uint64_t data0)
{
	struct io_uring_sqe *sqe = ctrl_prep(x, nr, 0, 0, data0);
	int rc;

	if (!sqe)
		return -EBUSY;
	sqe->user_data = CTRL_ID | nr;
	rc = io_uring_submit(&x->cring);
	return rc < 0 ? rc : 0;
}

static void ctrl_reap(struct ublkx *x)
{
	struct io_uring_cqe *cqe;

	while (x->cring_ok && io_uring_peek_cqe(&x->cring, &cqe) == 0) {
		if (cqe->user_data == (CTRL_ID | UBLK_CMD_START_DEV))
			x->start_rc = cqe->res < 0 ? cqe->res : 0;
		else if (cqe->user_data == (CTRL_ID | UBLK_CMD_STOP_DEV))
			x->stop_rc = cqe->res < 0 ? cqe->res : 0;
		io_uring_cqe_seen(&x->cring, cqe);
	}
}

/* --- the queue ---------------------------------------------------------- */

static uint8_t *tag_buf(const struct ublkx *x, unsigned tag)
{
	return x->bufs + (size_t)tag * MAX_IO;
}

/* FETCH_REQ (result unused) or COMMIT_AND_FETCH_REQ for tag. */
static void queue_cmd(struct ublkx *x, unsigned tag, unsigned nr, int32_t result)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&x->qring);
	struct ublksrv_io_cmd *c;

	/* never NULL: the ring has DEPTH entries, a tag uses at most one,
	 * and what is prepared is submitted before the next round */
	if (!sqe) {
		io_uring_submit(&x->qring);
		x->unsubmitted = 0;
		sqe = io_uring_get_sqe(&x->qring);
		if (!sqe)
			abort();
	}
	memset(sqe, 0, 2 * sizeof(*sqe));
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = x->cdev_fd;
	sqe->cmd_op = U_IO(nr);
	sqe->user_data = tag;
	c = (struct ublksrv_io_cmd *)sqe->cmd;
	c->q_id = 0;
	c->tag = (uint16_t)tag;
	c->result = result;
	c->addr = (uint64_t)(uintptr_t)tag_buf(x, tag);
	x->tags[tag].state = T_KERNEL;
	x->with_kernel++;
	x->unsubmitted++;
}

static void queue_submit(struct ublkx *x)
{
	int rc;

	if (!x->unsubmitted)
		return;
	rc = io_uring_submit(&x->qring);
	if (rc >= 0)
		x->unsubmitted = 0;
	/* -EAGAIN/-EBUSY: the next round tries again */
}

static void tag_commit(struct utag *t, int32_t result)
{
	struct ublkx *x = t->x;

	if (result < 0)
		x->errors++;
	queue_cmd(x, t->tag, UBLK_IO_COMMIT_AND_FETCH_REQ, result);
}

static void tag_done(void *priv, int err)
{
	struct utag *t = priv;

	t->x->at_rnbd--;
	/* after the ring is gone (the process is ending and closes the
	 * session, which completes or aborts what was at the server) there
	 * is nobody to tell */
	if (t->x->qring_ok)
		tag_commit(t, rnbd_ublk_result(&t->r, err));
	else
		t->state = T_IDLE;
}

static void tag_request(struct ublkx *x, struct utag *t)
{
	int rc;

	x->requests++;
	t->state = T_RNBD;
	x->at_rnbd++;
	rc = rnbd_ublk_req(&x->descs[t->tag], x->dev_sectors, MAX_IO, &t->r);
	if (!rc)
		rc = rnbd_clt_submit(x->ss->dev, t->r.op, t->r.flags, t->r.off,
				     t->r.data ? tag_buf(x, t->tag) : NULL, t->r.len, tag_done, t);
	if (rc)
		tag_done(t, rc);
}

static void queue_reap(struct ublkx *x)
{
	struct io_uring_cqe *cqe;

	while (x->qring_ok && io_uring_peek_cqe(&x->qring, &cqe) == 0) {
		uint64_t tag = cqe->user_data;
		int res = cqe->res;

		io_uring_cqe_seen(&x->qring, cqe);
		if (tag >= DEPTH || x->tags[tag].state != T_KERNEL)
			continue;
		x->with_kernel--;
		if (res == UBLK_IO_RES_OK) {
			tag_request(x, &x->tags[tag]);
			continue;
		}
		/* UBLK_IO_RES_ABORT: the device stops; anything else is
		 * the driver refusing the command (counted, not retried) */
		x->tags[tag].state = T_IDLE;
		if (res != UBLK_IO_RES_ABORT)
			x->errors++;
	}
	queue_submit(x);
}

static void on_fd(void *ctx, uint64_t tag, uint32_t events)
{
	struct ublkx *x = ctx;

	(void)events;
	if (tag == TAG_QUEUE)
		queue_reap(x);
	else if (tag == TAG_CONTROL)
		ctrl_reap(x);
}

static void ublk_status(void *ctx, struct xnode *m)
{
	struct ublkx *x = ctx;
	struct xnode *u = xnode_set_map(m, "ublk");

	xnode_set_strf(u, "device", "/dev/ublkb%u", x->dev_id);
	xnode_set_u64(u, "queue_depth", DEPTH);
	xnode_set_u64(u, "in_flight", x->at_rnbd);
	xnode_set_u64(u, "requests", x->requests);
	xnode_set_u64(u, "errors", x->errors);
}

/* --- the device's life ----------------------------------------------------- */

static int open_cdev(unsigned id, char *err, size_t errlen)
{
	char path[64];
	uint64_t t0 = xtime_ns();
	int fd;

	snprintf(path, sizeof(path), "/dev/ublkc%u", id);
	/* devtmpfs has it at once; a udev-only /dev after a moment */
	while ((fd = open(path, O_RDWR | O_CLOEXEC)) < 0 && errno == ENOENT &&
	       xtime_ns() - t0 < 3000000000ull)
		usleep(10000);
	if (fd < 0)
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
	return fd;
}

/* Unmaps, closes, deletes the device: 0 or DEL_DEV's -errno. */
static int teardown(struct ublkx *x)
{
	int rc = 0;

	if (x->descs)
		munmap((void *)x->descs, x->descs_len);
	x->descs = NULL;
	if (x->qring_ok)
		io_uring_queue_exit(&x->qring);
	x->qring_ok = false;
	if (x->cdev_fd >= 0)
		close(x->cdev_fd);
	x->cdev_fd = -1;
	/* DEL_DEV waits until the char device is released: after the close */
	if (x->added) {
		rc = ctrl_sync(x, UBLK_CMD_DEL_DEV, NULL, 0, 0);
		x->added = false;
	}
	if (x->cring_ok)
		io_uring_queue_exit(&x->cring);
	x->cring_ok = false;
	if (x->ctl_fd >= 0)
		close(x->ctl_fd);
	x->ctl_fd = -1;
	return rc < 0 ? rc : 0;
}

/* Unhooks x from the loop and tears down: DEL_DEV's result. */
static int ublk_release(struct ublkx *x)
{
	x->ss->on_fd = NULL;
	x->ss->status_extra = NULL;
	return teardown(x);
}

/* Frees x unless requests are still at the server: they may still write
 * into the buffers and complete into x, which then stay (the process is
 * ending).  registered: the session is still open and has the buffers. */
static void ublk_free(struct ublkx *x, bool registered)
{
	static struct ublkx *kept;	/* reachable, not leaked */

	if (x->at_rnbd) {
		x->kept_next = kept;
		kept = x;
		return;
	}
	if (registered && x->bufs_registered)
		rtrs_clt_del_mem(x->ss->clt, x->bufs);
	free(x->bufs);
	free(x);
}

void ublkx_free(struct ublkx *x)
{
	ublk_free(x, false);
}

int ublkx_probe(char *err, size_t errlen)
{
	int fd = open(CONTROL_DEV, O_RDWR | O_CLOEXEC), e = errno;

	if (fd < 0) {
		snprintf(err, errlen, CONTROL_DEV ": %s%s", strerror(e),
			 e == ENOENT ? " (modprobe ublk_drv; Linux 6.4 or later)" : "");
		errno = e;
	}
	return fd;
}

/* /dev/ublk-control and its ring in x: 0, or -errno with the reason in
 * err (nothing left open). */
static int ctrl_open(struct ublkx *x, char *err, size_t errlen)
{
	int rc;

	if ((x->ctl_fd = ublkx_probe(err, errlen)) < 0)
		return -errno;
	if ((rc = io_uring_queue_init(8, &x->cring, IORING_SETUP_SQE128))) {
		snprintf(err, errlen, "io_uring: %s", strerror(-rc));
		close(x->ctl_fd);
		x->ctl_fd = -1;
		return rc;
	}
	x->cring_ok = true;
	return 0;
}

struct ublkx *ublkx_open(struct sess *ss, int want_id, char *err, size_t errlen)
{
	struct ublkx *x = calloc(1, sizeof(*x));
	struct ublksrv_ctrl_dev_info info = { 0 };
	struct ublk_params p;
	struct epoll_event ev = { .events = EPOLLIN };
	const struct rnbd_clt_geom *g = rnbd_clt_geom(ss->dev);
	size_t pg;
	int rc;

	if (!x) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	x->ss = ss;
	x->ctl_fd = x->cdev_fd = -1;
	x->start_rc = x->stop_rc = 1;
	x->dev_sectors = g->nsectors;
	if (rnbd_ublk_params(g, ss->o->access == RNBD_ACCESS_RO, MAX_IO, &p)) {
		snprintf(err, errlen, "device %s: a geometry ublk cannot take (%llu sectors, "
			 "logical block %u, physical block %u)", ss->o->device,
			 (unsigned long long)g->nsectors, g->logical_block_size,
			 g->physical_block_size);
		goto fail;
	}
	if (ctrl_open(x, err, errlen) < 0)
		goto fail;
	x->dev_id = want_id < 0 ? (unsigned)-1 : (unsigned)want_id;
	info.nr_hw_queues = 1;
	info.queue_depth = DEPTH;
	info.max_io_buf_bytes = MAX_IO;
	info.dev_id = x->dev_id;
	info.flags = UBLK_F_CMD_IOCTL_ENCODE;
	rc = ctrl_sync(x, UBLK_CMD_ADD_DEV, &info, sizeof(info), 0);
	if (rc < 0) {
		snprintf(err, errlen, "ublk ADD_DEV: %s%s", strerror(-rc),
			 rc == -EPERM ? " (it needs CAP_SYS_ADMIN)" :
			 rc == -EOPNOTSUPP || rc == -524 ? " (a kernel before 6.4: no ioctl-encoded "
			 "commands)" :
			 rc == -EEXIST && want_id >= 0 ? " (that id is taken; one left by a killed "
			 "map goes with unmap)" : "");
		goto fail;
	}
	x->added = true;
	x->dev_id = info.dev_id;
	if ((rc = ctrl_sync(x, UBLK_CMD_SET_PARAMS, &p, sizeof(p), 0)) < 0) {
		snprintf(err, errlen, "/dev/ublkb%u: SET_PARAMS: %s", x->dev_id, strerror(-rc));
		goto fail;
	}
	if ((x->cdev_fd = open_cdev(x->dev_id, err, errlen)) < 0)
		goto fail;
	pg = (size_t)sysconf(_SC_PAGESIZE);	/* the driver maps exactly this */
	x->descs_len = (DEPTH * sizeof(struct ublksrv_io_desc) + pg - 1) / pg * pg;
	x->descs = mmap(NULL, x->descs_len, PROT_READ, MAP_SHARED | MAP_POPULATE, x->cdev_fd,
			UBLKSRV_CMD_BUF_OFFSET);
	if (x->descs == MAP_FAILED) {
		x->descs = NULL;
		snprintf(err, errlen, "/dev/ublkc%u: mmap: %s", x->dev_id, strerror(errno));
		goto fail;
	}
	if ((rc = io_uring_queue_init(DEPTH, &x->qring, IORING_SETUP_SQE128))) {
		snprintf(err, errlen, "io_uring: %s", strerror(-rc));
		goto fail;
	}
	x->qring_ok = true;
	if (!(x->bufs = aligned_alloc(4096, (size_t)DEPTH * MAX_IO))) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (rtrs_clt_add_mem(ss->clt, x->bufs, (size_t)DEPTH * MAX_IO, err, errlen))
		goto fail;
	x->bufs_registered = true;
	for (unsigned t = 0; t < DEPTH; t++) {
		x->tags[t].x = x;
		x->tags[t].tag = (uint16_t)t;
		queue_cmd(x, t, UBLK_IO_FETCH_REQ, 0);
	}
	if ((rc = io_uring_submit(&x->qring)) < 0) {
		snprintf(err, errlen, "/dev/ublkc%u: FETCH_REQ: %s", x->dev_id, strerror(-rc));
		goto fail;
	}
	x->unsubmitted = 0;
	ev.data.u64 = TAG_QUEUE;
	if (epoll_ctl(ss->epfd, EPOLL_CTL_ADD, x->qring.ring_fd, &ev) < 0) {
		snprintf(err, errlen, "epoll: %s", strerror(errno));
		goto fail;
	}
	ev.data.u64 = TAG_CONTROL;
	if (epoll_ctl(ss->epfd, EPOLL_CTL_ADD, x->cring.ring_fd, &ev) < 0) {
		snprintf(err, errlen, "epoll: %s", strerror(errno));
		goto fail;
	}
	ss->on_fd = on_fd;
	ss->on_fd_ctx = x;
	ss->status_extra = ublk_status;
	/* the driver adds the disk once every tag has fetched: the
	 * partition scan's reads are served while START_DEV waits */
	if ((rc = ctrl_async(x, UBLK_CMD_START_DEV, (uint64_t)getpid())) < 0) {
		snprintf(err, errlen, "/dev/ublkb%u: START_DEV: %s", x->dev_id, strerror(-rc));
		goto fail;
	}
	while (x->start_rc == 1) {
		if (sess_run(ss, 100000000ull) == -EINTR) {
			snprintf(err, errlen, "/dev/ublkb%u: interrupted while starting", x->dev_id);
			goto fail;
		}
		ublkx_after_round(x);
		if (x->with_kernel + x->at_rnbd == 0) {
			snprintf(err, errlen, "/dev/ublkb%u: the driver aborted the queue", x->dev_id);
			goto fail;
		}
	}
	if (x->start_rc < 0) {
		snprintf(err, errlen, "/dev/ublkb%u: START_DEV: %s", x->dev_id, strerror(-x->start_rc));
		goto fail;
	}
	return x;
fail:
	ublk_release(x);
	ublk_free(x, true);
	return NULL;
}

unsigned ublkx_id(const struct ublkx *x)
{
	return x->dev_id;
}

void ublkx_after_round(struct ublkx *x)
{
	queue_reap(x);
	ctrl_reap(x);
}

int ublkx_stop(struct ublkx *x)
{
	int rc;

	if (x->stop_asked)
		return 0;
	rc = ctrl_async(x, UBLK_CMD_STOP_DEV, 0);
	if (!rc)
		x->stop_asked = true;
	return rc;
}

bool ublkx_running(const struct ublkx *x)
{
	/* stopped by us or by anyone else: the driver aborts every fetch */
	return x->with_kernel + x->at_rnbd > 0;
}

int ublkx_delete_dead(unsigned id, char *err, size_t errlen)
{
	struct ublkx x = { .cdev_fd = -1, .dev_id = id };
	struct ublksrv_ctrl_dev_info info = { 0 };
	int rc;

	if (ctrl_open(&x, err, errlen) < 0)
		return -1;
	rc = ctrl_sync(&x, UBLK_CMD_GET_DEV_INFO, &info, sizeof(info), 0);
	if (rc < 0) {
		snprintf(err, errlen, "/dev/ublkc%u: GET_DEV_INFO: %s", id, strerror(-rc));
		teardown(&x);
		return -1;
	}
	/* stopped after it ran (the driver's stop sets the pid to -1); one
	 * added and not yet started is dead too, but is someone's */
	if (info.state != UBLK_S_DEV_DEAD || info.ublksrv_pid != -1) {
		snprintf(err, errlen, "/dev/ublkc%u is another server's now (%s, process %d)", id,
			 info.state == UBLK_S_DEV_DEAD ? "not started" : "live",
			 (int)info.ublksrv_pid);
		teardown(&x);
		return -1;
	}
	x.added = true;	/* teardown() deletes it */
	if ((rc = teardown(&x)) < 0) {
		snprintf(err, errlen, "/dev/ublkc%u: DEL_DEV: %s", id, strerror(-rc));
		return -1;
	}
	return 0;
}

int ublkx_server_pid(unsigned id)
{
	struct ublkx x = { .cdev_fd = -1, .dev_id = id };
	struct ublksrv_ctrl_dev_info info = { 0 };
	char err[300];
	int rc;

	if ((rc = ctrl_open(&x, err, sizeof(err))) < 0)
		return rc;
	rc = ctrl_sync(&x, UBLK_CMD_GET_DEV_INFO, &info, sizeof(info), 0);
	teardown(&x);
	if (rc < 0)
		return rc;
	return info.state == UBLK_S_DEV_LIVE ? info.ublksrv_pid : 0;
}

int ublkx_close(struct ublkx *x, char *err, size_t errlen)
{
	uint64_t t0 = xtime_ns();
	unsigned id = x->dev_id;
	int rc = ublkx_stop(x), drc;

	*err = 0;
	if (rc < 0)
		snprintf(err, errlen, "/dev/ublkb%u: STOP_DEV: %s", id, strerror(-rc));
	cli_stop_requested = 0;
	/* what the disk still flushes is served (30 s at most; a second
	 * signal ends it at once) */
	while (!rc && (ublkx_running(x) || x->stop_rc == 1) && !cli_stop_requested &&
	       xtime_ns() - t0 < 30000000000ull) {
		sess_run(x->ss, 100000000ull);
		ublkx_after_round(x);
	}
	if (!*err && x->stop_rc < 0)
		snprintf(err, errlen, "/dev/ublkb%u: STOP_DEV: %s", id, strerror(-x->stop_rc));
	else if (!*err && (ublkx_running(x) || x->stop_rc == 1))
		snprintf(err, errlen, "/dev/ublkb%u: stopped with %u requests at the server: %s", id,
			 x->at_rnbd, cli_stop_requested ? "interrupted"
			 : "the kernel did not let go within 30 s");
	drc = ublk_release(x);
	if (!*err && drc < 0)
		snprintf(err, errlen, "/dev/ublkb%u: DEL_DEV: %s", id, strerror(-drc));
	return *err ? -1 : 0;
}
