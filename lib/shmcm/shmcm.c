#include "shmcm/shmcm.h"
#include "shmcm/shmcm_lock.h"
#include "shmcm/shmcm_reasm.h"
#include "shmcm/shmcm_wire.h"
#include "xprt/mbox.h"
#include "core/evloop.h"
#include "core/log.h"
#include "core/xtime.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define RX_BATCH	64u
#define DEF_MAX_MSG	(64u << 20)
#define DEF_SPIN_NS	20000u

enum job_op {
	JOB_CONNECT,
	JOB_DISCONNECT,
	JOB_CON_PKT,
	JOB_INTERNAL,
	JOB_PEER_CHECK,
	JOB_DESTROY,
};

struct job {
	struct job *next;
	enum job_op op;
	uint32_t con_type;
	uint16_t cno;
	bool async;		/* freed by the job queue */
	bool done;
};

/* A packet waiting for room in the mailbox: CON packets that did not fit,
 * and, in SHMCM_FLOW_DEFER mode, user data (LINX's deferred queue). */
struct pend {
	struct pend *next;
	bool udata;
	uint32_t len;
	uint8_t pkt[];
};

struct shmcm_conn {
	struct mbox *mb;
	struct shmcm_upcalls uc;
	enum shmcm_flow flow;
	bool poll_mode;
	uint64_t spin_ns;
	uint32_t mtu, mru, defq_max;
	struct mbox_side *me, *peer;

	/* connection management: only the job-queue thread touches these */
	pthread_t cm_thread;
	struct xloop *loop;
	struct xtimer *tick;
	int job_efd;
	int peer_pidfd;
	uint64_t peer_owner;
	struct shmcm_cm cm;

	/* the job queue */
	pthread_mutex_t jq_lock;
	pthread_cond_t jq_cond;
	struct job *jq_head, *jq_tail;
	bool jq_closed;

	/* state seen by other threads */
	pthread_mutex_t st_lock;
	pthread_cond_t st_cond;
	enum shmcm_state state;
	enum shmcm_reason reason;
	bool was_connected;

	struct shmcm_lock deliver_lock, tx_lock, con_pkt_lock;

	/* tx */
	/* One producer at a time on our ring: the user's sender and the job
	 * queue's CON packets.  A spinlock: sections are a copy into a slot,
	 * and its release is a plain store, which the data path feels. */
	pthread_spinlock_t tx_mutex;
	_Atomic uint16_t tx_cno;
	uint16_t msgid;			/* under tx_mutex */
	_Atomic bool tx_abort;
	struct pend *pq_head, *pq_tail;	/* under tx_mutex */
	uint64_t pq_udata;		/* user-data packets queued */
	uint64_t sent_bytes, sent_pkts;	/* under tx_mutex */

	/* rx */
	pthread_t rx_thread;
	bool rx_started;
	_Atomic bool rx_stop;
	_Atomic bool peer_dead;
	_Atomic bool peer_check_queued;
	_Atomic uint32_t rx_activity;
	uint16_t rx_peer_cno;		/* set before deliver is opened */
	struct shmcm_reasm reasm;	/* under deliver_lock */
	uint64_t recv_bytes, recv_pkts, recv_bad, recv_stale;
};

static _Thread_local struct shmcm_conn *in_upcall;

/* ------------------------------------------------------------------ jobs */

static void job_push(struct shmcm_conn *c, struct job *j)
{
	uint64_t one = 1;

	pthread_mutex_lock(&c->jq_lock);
	if (c->jq_closed) {
		j->done = true;
		pthread_mutex_unlock(&c->jq_lock);
		if (j->async)
			free(j);
		return;
	}
	j->next = NULL;
	if (c->jq_tail)
		c->jq_tail->next = j;
	else
		c->jq_head = j;
	c->jq_tail = j;
	pthread_mutex_unlock(&c->jq_lock);
	if (write(c->job_efd, &one, sizeof(one)) < 0)
		xlog_ratelimited(XLOG_WARN, "%s: job queue eventfd: %m", c->mb->name);
}

/* Queues a job and waits until the job queue has carried it out (seed:
 * "create/destroy wait until their job is done"). */
static void job_run(struct shmcm_conn *c, enum job_op op, uint32_t con_type, uint16_t cno)
{
	struct job j = { .op = op, .con_type = con_type, .cno = cno };

	job_push(c, &j);
	pthread_mutex_lock(&c->jq_lock);
	while (!j.done)
		pthread_cond_wait(&c->jq_cond, &c->jq_lock);
	pthread_mutex_unlock(&c->jq_lock);
}

static void job_async(struct shmcm_conn *c, enum job_op op)
{
	struct job *j = calloc(1, sizeof(*j));

	if (!j) {
		xlog_ratelimited(XLOG_ERROR, "%s: out of memory queueing a job", c->mb->name);
		return;
	}
	j->op = op;
	j->async = true;
	job_push(c, j);
}

static void job_finish(struct shmcm_conn *c, struct job *j)
{
	if (j->async) {
		free(j);
		return;
	}
	pthread_mutex_lock(&c->jq_lock);
	j->done = true;
	pthread_cond_broadcast(&c->jq_cond);
	pthread_mutex_unlock(&c->jq_lock);
}

/* -------------------------------------------------------------------- tx */

/* Copies a pending packet into the ring; false when the ring is full. */
static bool put_pkt(struct shmcm_conn *c, const void *pkt, uint32_t len)
{
	void *slot = mbox_tx_reserve(c->mb);

	if (!slot)
		return false;
	memcpy(slot, pkt, len);
	mbox_tx_publish(c->mb);
	c->sent_pkts++;
	c->sent_bytes += len;
	return true;
}

static void publish_tx_stats(struct shmcm_conn *c)
{
	atomic_store_explicit(&c->me->sent_pkts, c->sent_pkts, memory_order_relaxed);
	atomic_store_explicit(&c->me->sent_bytes, c->sent_bytes, memory_order_relaxed);
	atomic_store_explicit(&c->me->defq_size, c->pq_udata, memory_order_relaxed);
}

/* Under tx_mutex.  Sends what waits in the pending queue, in order. */
static void pend_flush(struct shmcm_conn *c)
{
	struct pend *p;

	while ((p = c->pq_head)) {
		if (!put_pkt(c, p->pkt, p->len))
			break;
		c->pq_head = p->next;
		if (!c->pq_head)
			c->pq_tail = NULL;
		if (p->udata)
			c->pq_udata--;
		free(p);
	}
}

static int pend_add(struct shmcm_conn *c, const void *hdr, uint32_t hlen,
		    const void *data, uint32_t dlen, bool udata)
{
	struct pend *p = malloc(sizeof(*p) + hlen + dlen);

	if (!p)
		return -ENOMEM;
	p->next = NULL;
	p->udata = udata;
	p->len = hlen + dlen;
	memcpy(p->pkt, hdr, hlen);
	if (dlen)
		memcpy(p->pkt + hlen, data, dlen);
	if (c->pq_tail)
		c->pq_tail->next = p;
	else
		c->pq_head = p;
	c->pq_tail = p;
	if (udata) {
		c->pq_udata++;
		uint64_t peak = atomic_load_explicit(&c->me->defq_peak, memory_order_relaxed);
		if (c->pq_udata > peak)
			atomic_store_explicit(&c->me->defq_peak, c->pq_udata, memory_order_relaxed);
	}
	return 0;
}

static void pend_clear(struct shmcm_conn *c)
{
	struct pend *p;

	while ((p = c->pq_head)) {
		c->pq_head = p->next;
		free(p);
	}
	c->pq_tail = NULL;
	c->pq_udata = 0;
}

/* From the job queue only. */
static void send_con(struct shmcm_conn *c, uint32_t type, uint16_t cno)
{
	uint8_t pkt[SHMCM_CON_LEN];

	shmcm_encode_con(pkt, type, cno);
	pthread_spin_lock(&c->tx_mutex);
	pend_flush(c);
	if (c->pq_head || !put_pkt(c, pkt, SHMCM_CON_LEN)) {
		/* A full mailbox holds plenty to prove we are alive; other
		 * CON packets are reliable and wait their turn. */
		if (type != SHMCM_CON_ALV && pend_add(c, pkt, sizeof(pkt), NULL, 0, false) < 0)
			xlog_ratelimited(XLOG_ERROR, "%s: out of memory queueing %s",
					 c->mb->name, shmcm_con_type_name(type));
	}
	publish_tx_stats(c);
	pthread_spin_unlock(&c->tx_mutex);
}

int shmcm_transmit(struct shmcm_conn *c, uint32_t src, uint32_t dst,
		   const void *buf, size_t len)
{
	const uint8_t *data = buf;
	uint32_t fsz = c->mtu - SHMCM_UDATA_HLEN, off = 0;
	uint16_t cno, msgid;
	int rc = 0;

	if (len > UINT32_MAX)
		return -EMSGSIZE;
	if (!shmcm_trylock(&c->tx_lock))
		return -ENOTCONN;
	cno = atomic_load_explicit(&c->tx_cno, memory_order_relaxed);

	pthread_spin_lock(&c->tx_mutex);
	msgid = c->msgid++;
	if (c->pq_head)
		pend_flush(c);
	for (;;) {
		uint32_t n = (uint32_t)len - off < fsz ? (uint32_t)len - off : fsz;
		uint32_t psize = SHMCM_UDATA_HLEN + n;
		uint8_t *slot = c->pq_head ? NULL : mbox_tx_reserve(c->mb);

		if (!slot && c->flow == SHMCM_FLOW_WAIT) {
			/* Let the job queue send its CON packets while we wait. */
			uint32_t seen = mbox_tx_seen_tail(c->mb);

			publish_tx_stats(c);
			pthread_spin_unlock(&c->tx_mutex);
			for (;;) {
				if (atomic_load(&c->tx_abort)) {
					rc = -ENOTCONN;
					goto out_unlock;
				}
				if (mbox_tx_wait(c->mb->tx, seen, 50 * 1000000ull) == 0)
					break;
			}
			pthread_spin_lock(&c->tx_mutex);
			pend_flush(c);
			continue;
		}
		if (!slot) {
			/* LINX: the deferred queue, and a disconnect once it is
			 * full (with the default limit 0: at once). */
			uint8_t hdr[SHMCM_UDATA_HLEN];

			if (c->pq_udata >= c->defq_max) {
				publish_tx_stats(c);
				pthread_spin_unlock(&c->tx_mutex);
				job_async(c, JOB_INTERNAL);
				rc = -ENOBUFS;
				goto out_unlock;
			}
			shmcm_encode_udata_hdr(hdr, psize, cno, msgid, src, dst, (uint32_t)len);
			if (pend_add(c, hdr, sizeof(hdr), data + off, n, true) < 0) {
				publish_tx_stats(c);
				pthread_spin_unlock(&c->tx_mutex);
				job_async(c, JOB_INTERNAL);
				rc = -ENOBUFS;
				goto out_unlock;
			}
		} else {
			shmcm_encode_udata_hdr(slot, psize, cno, msgid, src, dst, (uint32_t)len);
			memcpy(slot + SHMCM_UDATA_HLEN, data + off, n);
			mbox_tx_publish(c->mb);
			c->sent_pkts++;
			c->sent_bytes += psize;
		}
		off += n;
		if (off >= len)
			break;	/* an empty message is one packet too */
	}
	publish_tx_stats(c);
	pthread_spin_unlock(&c->tx_mutex);
out_unlock:
	shmcm_unlock(&c->tx_lock);
	return rc;
}

/* -------------------------------------------------------------------- rx */

static void publish_rx_stats(struct shmcm_conn *c)
{
	atomic_store_explicit(&c->me->recv_pkts, c->recv_pkts, memory_order_relaxed);
	atomic_store_explicit(&c->me->recv_bytes, c->recv_bytes, memory_order_relaxed);
	atomic_store_explicit(&c->me->recv_bad, c->recv_bad, memory_order_relaxed);
	atomic_store_explicit(&c->me->recv_stale, c->recv_stale, memory_order_relaxed);
}

/* A CON packet goes to the job queue, and we wait for it to be handled, so
 * user data behind a CON_ACK is looked at only once the connection is open
 * (LINX parks such data on an unbounded pending queue instead). */
static void rx_con(struct shmcm_conn *c, const struct shmcm_pkt *p)
{
	/* Packets of a generation the peer no longer uses were written by an
	 * earlier owner of the peer side (which may have been killed). */
	if (p->con.cno != (uint16_t)atomic_load_explicit(&c->peer->cno, memory_order_acquire)) {
		c->recv_stale++;
		return;
	}
	if (!shmcm_trylock(&c->con_pkt_lock))
		return;
	struct job j = { .op = JOB_CON_PKT, .con_type = p->con.type, .cno = p->con.cno };
	job_push(c, &j);
	shmcm_unlock(&c->con_pkt_lock);
	pthread_mutex_lock(&c->jq_lock);
	while (!j.done)
		pthread_cond_wait(&c->jq_cond, &c->jq_lock);
	pthread_mutex_unlock(&c->jq_lock);
}

static void rx_udata(struct shmcm_conn *c, const struct shmcm_pkt *p)
{
	struct shmcm_msg m;
	int rc;

	if (p->u.cno != c->rx_peer_cno) {
		c->recv_stale++;
		return;
	}
	rc = shmcm_reasm_input(&c->reasm, p, &m);
	if (rc == 1) {
		in_upcall = c;
		c->uc.deliver(c->uc.arg, m.src, m.dst, m.data, m.len);
		in_upcall = NULL;
	} else if (rc < 0) {
		c->recv_bad++;
		xlog_ratelimited(XLOG_WARN, "%s: dropped fragment of message %u: %s",
				 c->mb->name, p->u.msgid, strerror(-rc));
	}
}

/* Handles up to `max` packets from the mailbox; LINX's rx(). */
static unsigned rx_run(struct shmcm_conn *c, unsigned max)
{
	const uint32_t pkt_max = mbox_pkt_max(c->mb);
	unsigned done = 0;

	while (done < max) {
		uint32_t n = 0, limit = max - done < RX_BATCH ? max - done : RX_BATCH;
		bool delivering = false;
		const uint8_t *slot;

		while (n < limit && (slot = mbox_rx_peek(c->mb, n))) {
			struct shmcm_pkt p;
			int rc = shmcm_decode(slot, pkt_max, c->mru, &p);

			n++;
			c->recv_pkts++;
			if (rc < 0) {
				c->recv_bad++;
				xlog_ratelimited(XLOG_WARN, "%s: dropped packet: %s",
						 c->mb->name, shmcm_decode_strerror(rc));
				continue;
			}
			c->recv_bytes += p.size;
			if (p.type == SHMCM_CON_PKT) {
				/* The job queue may need to synchronize the
				 * deliver lock: never wait on it holding it. */
				if (delivering) {
					shmcm_unlock(&c->deliver_lock);
					delivering = false;
				}
				rx_con(c, &p);
				continue;
			}
			/* One trip through the deliver lock per batch. */
			if (!delivering && !(delivering = shmcm_trylock(&c->deliver_lock))) {
				c->recv_stale++;	/* not connected: not ours */
				continue;
			}
			rx_udata(c, &p);
		}
		if (delivering)
			shmcm_unlock(&c->deliver_lock);
		if (n == 0)
			break;
		if (!atomic_load_explicit(&c->rx_activity, memory_order_relaxed))
			atomic_store_explicit(&c->rx_activity, 1, memory_order_relaxed);
		mbox_rx_release(c->mb, n);
		done += n;
	}
	if (done)
		publish_rx_stats(c);
	return done;
}

int shmcm_poll(struct shmcm_conn *c, unsigned max)
{
	return (int)rx_run(c, max);
}

static void *rx_thread(void *arg)
{
	struct shmcm_conn *c = arg;

	while (!atomic_load_explicit(&c->rx_stop, memory_order_acquire)) {
		if (rx_run(c, RX_BATCH * 4))
			continue;
		/* Dead peer: once the ring is drained, tell the job queue. */
		if (atomic_load(&c->peer_dead) && !atomic_exchange(&c->peer_check_queued, true))
			job_async(c, JOB_PEER_CHECK);
		mbox_rx_wait(c->mb, c->spin_ns, 100 * 1000000ull);
	}
	return NULL;
}

/* ------------------------------------------------ connection management */

static void set_state(struct shmcm_conn *c)
{
	pthread_mutex_lock(&c->st_lock);
	c->state = c->cm.state;
	if (c->state == SHMCM_CONNECTED)
		c->was_connected = true;
	c->reason = c->cm.last_reason;
	pthread_cond_broadcast(&c->st_cond);
	pthread_mutex_unlock(&c->st_lock);

	atomic_store(&c->me->state, c->cm.state);
	atomic_store(&c->me->peer_cno, c->cm.peer_cno);
	atomic_store(&c->me->alive_count, c->cm.alive_count);
	atomic_store(&c->me->con_reqs, c->cm.con_reqs);
	atomic_store(&c->me->last_reason, c->cm.last_reason);
}

static void cm_event(struct shmcm_conn *c, const struct shmcm_cm_ev *ev)
{
	struct shmcm_cm_out out;

	shmcm_cm_handle(&c->cm, ev, &out);
	/* Our generation is published before any packet that carries it, and
	 * the reason for a reset before the CON_RST, so the peer can tell a
	 * close from a failure. */
	atomic_store_explicit(&c->me->cno, c->cm.cno, memory_order_release);
	if (out.disconnected)
		atomic_store_explicit(&c->me->last_reason, out.reason, memory_order_release);

	if (out.disable_deliver)
		synchronize_shmcm_lock(&c->deliver_lock);
	if (out.disable_tx) {
		atomic_store(&c->tx_abort, true);
		mbox_tx_kick(c->mb);
		synchronize_shmcm_lock(&c->tx_lock);
		pthread_spin_lock(&c->tx_mutex);
		pend_clear(c);		/* user data of a dead connection */
		pthread_spin_unlock(&c->tx_mutex);
	}
	if (out.enable_tx) {
		atomic_store(&c->tx_cno, c->cm.cno);
		atomic_store(&c->tx_abort, false);
		shmcm_lock_open(&c->tx_lock);
	}
	for (unsigned i = 0; i < out.nsend; i++)
		send_con(c, out.send[i].con_type, out.send[i].cno);
	if (out.disconnected)
		shmcm_reasm_reset(&c->reasm);	/* nobody holds the deliver lock */
	set_state(c);
	in_upcall = c;
	if (out.connected && c->uc.connected)
		c->uc.connected(c->uc.arg);
	if (out.disconnected && c->uc.disconnected)
		c->uc.disconnected(c->uc.arg, out.reason);
	in_upcall = NULL;
	if (out.enable_deliver) {
		c->rx_peer_cno = c->cm.peer_cno;
		shmcm_reasm_reset(&c->reasm);
		shmcm_lock_open(&c->deliver_lock);
	}
}

static void peer_unwatch(struct shmcm_conn *c)
{
	if (c->peer_pidfd >= 0) {
		xloop_del_fd(c->loop, c->peer_pidfd);
		close(c->peer_pidfd);
		c->peer_pidfd = -1;
	}
}

/* The peer is dead: act once every packet it sent has been handled. */
static void peer_check(struct shmcm_conn *c)
{
	struct shmcm_cm_ev ev = { .type = SHMCM_EV_PEER_GONE };

	if (!atomic_load(&c->peer_dead) || mbox_rx_pending(c->mb))
		return;
	cm_event(c, &ev);
}

static void on_peer_exit(struct xloop *l, int fd, uint32_t revents, void *arg)
{
	struct shmcm_conn *c = arg;

	peer_unwatch(c);
	c->peer_owner = 0;	/* whoever owns the side next is someone new */
	atomic_store(&c->peer_dead, true);
	atomic_store(&c->peer_check_queued, false);
	if (c->poll_mode)
		peer_check(c);
	else
		mbox_rx_kick(c->mb);	/* drain, then JOB_PEER_CHECK */
}

/* Watches whichever process owns the peer side now. */
static void peer_watch(struct shmcm_conn *c)
{
	uint64_t owner = atomic_load(&c->peer->owner);
	pid_t pid;
	int fd;

	if (owner == c->peer_owner)
		return;
	if (c->peer_pidfd >= 0) {
		/* The process we watched no longer owns the peer side: it
		 * exited (and released it) before we saw its pidfd fire.
		 * Gone either way; the new owner is watched on the next
		 * tick, once this one is dealt with. */
		on_peer_exit(c->loop, c->peer_pidfd, 0, c);
		return;
	}
	c->peer_owner = owner;
	fd = mbox_side_pidfd(c->mb->h, mbox_peer(c->mb->side), &pid);
	if (fd < 0)
		return;
	if (xloop_add_fd(c->loop, fd, EPOLLIN, on_peer_exit, c) < 0) {
		close(fd);
		return;
	}
	c->peer_pidfd = fd;
	atomic_store(&c->peer_dead, false);
	xlog(XLOG_DEBUG, "%s: watching peer pid %d", c->mb->name, (int)pid);
}

static void on_tick(struct xloop *l, struct xtimer *t, void *arg)
{
	struct shmcm_conn *c = arg;
	struct shmcm_cm_ev ev = { .type = SHMCM_EV_TICK };

	peer_watch(c);
	pthread_spin_lock(&c->tx_mutex);
	if (c->pq_head) {
		pend_flush(c);
		publish_tx_stats(c);
	}
	ev.tx_idle = !c->pq_head && mbox_tx_idle(c->mb);
	pthread_spin_unlock(&c->tx_mutex);
	/* Packets waiting in our ring mean the peer is alive and we are the
	 * slow one (a stdout that blocks, say): not a reason to give up. */
	ev.peer_activity = atomic_exchange(&c->rx_activity, 0) || mbox_rx_pending(c->mb);
	cm_event(c, &ev);
	if (atomic_load(&c->peer_dead))
		peer_check(c);
}

static void handle_job(struct shmcm_conn *c, struct job *j)
{
	struct shmcm_cm_ev ev = { 0 };

	switch (j->op) {
	case JOB_CONNECT:
		ev.type = SHMCM_EV_CONNECT;
		peer_watch(c);
		cm_event(c, &ev);
		break;
	case JOB_DISCONNECT:
		ev.type = SHMCM_EV_DISCONNECT;
		cm_event(c, &ev);
		break;
	case JOB_CON_PKT:
		/* the peer is attached now, if it was not at connect time */
		peer_watch(c);
		ev.type = SHMCM_EV_CON_PKT;
		ev.con_type = j->con_type;
		ev.cno = j->cno;
		cm_event(c, &ev);
		break;
	case JOB_INTERNAL:
		ev.type = SHMCM_EV_INTERNAL;
		cm_event(c, &ev);
		break;
	case JOB_PEER_CHECK:
		atomic_store(&c->peer_check_queued, false);
		peer_check(c);
		break;
	case JOB_DESTROY:
		ev.type = SHMCM_EV_DISCONNECT;
		cm_event(c, &ev);
		synchronize_shmcm_lock(&c->con_pkt_lock);
		xloop_timer_cancel(c->loop, c->tick);
		c->tick = NULL;
		xloop_stop(c->loop);
		break;
	}
}

static void on_jobs(struct xloop *l, int fd, uint32_t revents, void *arg)
{
	struct shmcm_conn *c = arg;
	uint64_t n;
	struct job *j;

	if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		xlog_ratelimited(XLOG_WARN, "%s: job queue eventfd: %m", c->mb->name);
	for (;;) {
		pthread_mutex_lock(&c->jq_lock);
		j = c->jq_head;
		if (j) {
			c->jq_head = j->next;
			if (!c->jq_head)
				c->jq_tail = NULL;
		}
		pthread_mutex_unlock(&c->jq_lock);
		if (!j)
			break;
		handle_job(c, j);
		job_finish(c, j);
	}
}

static void *cm_thread(void *arg)
{
	struct shmcm_conn *c = arg;
	struct job *j;

	xloop_run(c->loop);

	/* Whatever was queued after destroy is answered, never left hanging. */
	pthread_mutex_lock(&c->jq_lock);
	c->jq_closed = true;
	j = c->jq_head;
	c->jq_head = c->jq_tail = NULL;
	pthread_mutex_unlock(&c->jq_lock);
	while (j) {
		struct job *next = j->next;
		job_finish(c, j);
		j = next;
	}
	return NULL;
}

/* ------------------------------------------------------------ lifecycle */

static void conn_free(struct shmcm_conn *c)
{
	if (c->loop)
		xloop_free(c->loop);
	if (c->job_efd >= 0)
		close(c->job_efd);
	if (c->peer_pidfd >= 0)
		close(c->peer_pidfd);
	shmcm_reasm_reset(&c->reasm);
	pend_clear(c);
	if (c->me)		/* only once the side was claimed */
		atomic_store(&c->me->state, SHMCM_DISCONNECTED);
	mbox_close(c->mb);
	pthread_mutex_destroy(&c->jq_lock);
	pthread_cond_destroy(&c->jq_cond);
	pthread_mutex_destroy(&c->st_lock);
	pthread_cond_destroy(&c->st_cond);
	pthread_spin_destroy(&c->tx_mutex);
	free(c);
}

struct shmcm_conn *shmcm_open(const struct shmcm_params *p,
			      const struct shmcm_upcalls *uc,
			      char *err, size_t errlen)
{
	struct shmcm_conn *c = calloc(1, sizeof(*c));
	uint64_t tick_ns;
	int rc;

	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->job_efd = c->peer_pidfd = -1;
	pthread_mutex_init(&c->jq_lock, NULL);
	pthread_cond_init(&c->jq_cond, NULL);
	pthread_mutex_init(&c->st_lock, NULL);
	pthread_cond_init(&c->st_cond, NULL);
	pthread_spin_init(&c->tx_mutex, PTHREAD_PROCESS_PRIVATE);
	c->uc = *uc;
	c->flow = p->flow;
	c->poll_mode = p->poll;
	c->spin_ns = p->spin_ns ? p->spin_ns : DEF_SPIN_NS;
	shmcm_lock_init(&c->deliver_lock, false);
	shmcm_lock_init(&c->tx_lock, false);
	shmcm_lock_init(&c->con_pkt_lock, true);

	if (mbox_open(p->name, &c->mb, err, errlen) < 0)
		goto out_free;
	if (mbox_claim(c->mb, p->side, err, errlen) < 0)
		goto out_free;
	c->me = &c->mb->h->side[p->side];
	c->peer = &c->mb->h->side[mbox_peer(p->side)];
	/* Both directions are made alike: our MTU is the peer's MRU. */
	c->mtu = c->mru = c->mb->h->mtu;
	c->defq_max = c->mb->h->defq_max;
	shmcm_reasm_init(&c->reasm, p->max_msg ? p->max_msg : DEF_MAX_MSG,
			 4 * (size_t)(p->max_msg ? p->max_msg : DEF_MAX_MSG));
	shmcm_cm_init(&c->cm, (uint16_t)atomic_load(&c->me->cno));
	c->state = SHMCM_DISCONNECTED;
	atomic_store(&c->me->flow, p->flow);
	atomic_store(&c->me->defq_size, 0);
	set_state(c);

	c->job_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->loop = xloop_new();
	if (c->job_efd < 0 || !c->loop) {
		snprintf(err, errlen, "connection '%s': event loop: %s", p->name, strerror(errno));
		goto out_free;
	}
	tick_ns = (uint64_t)c->mb->h->con_tmo_ms / SHMCM_ALIVES_PER_TMO;
	if (tick_ns < SHMCM_TICK_MIN_MS)
		tick_ns = SHMCM_TICK_MIN_MS;
	tick_ns *= 1000000ull;
	if ((rc = xloop_add_fd(c->loop, c->job_efd, EPOLLIN, on_jobs, c)) < 0 ||
	    !(c->tick = xloop_timer_add(c->loop, tick_ns, tick_ns, on_tick, c))) {
		snprintf(err, errlen, "connection '%s': event loop setup failed", p->name);
		goto out_free;
	}
	if ((rc = pthread_create(&c->cm_thread, NULL, cm_thread, c)) != 0) {
		snprintf(err, errlen, "connection '%s': cannot start thread: %s", p->name, strerror(rc));
		goto out_free;
	}
	if (!c->poll_mode) {
		if ((rc = pthread_create(&c->rx_thread, NULL, rx_thread, c)) != 0) {
			snprintf(err, errlen, "connection '%s': cannot start rx thread: %s",
				 p->name, strerror(rc));
			job_run(c, JOB_DESTROY, 0, 0);
			pthread_join(c->cm_thread, NULL);
			goto out_free;
		}
		c->rx_started = true;
	}
	return c;

out_free:
	conn_free(c);
	return NULL;
}

int shmcm_connect(struct shmcm_conn *c)
{
	/* a new attempt: shmcm_wait_connected() waits for this one */
	pthread_mutex_lock(&c->st_lock);
	c->was_connected = false;
	pthread_mutex_unlock(&c->st_lock);
	job_async(c, JOB_CONNECT);
	return 0;
}

int shmcm_disconnect(struct shmcm_conn *c)
{
	/* From an up-call we are the job queue or hold the deliver lock:
	 * waiting would deadlock, so only queue it. */
	if (in_upcall == c)
		job_async(c, JOB_DISCONNECT);
	else
		job_run(c, JOB_DISCONNECT, 0, 0);
	return 0;
}

static int deadline_wait(struct shmcm_conn *c, uint64_t deadline)
{
	struct timespec ts;

	if (!deadline)
		return pthread_cond_wait(&c->st_cond, &c->st_lock);
	/* st_cond uses CLOCK_REALTIME; convert the monotonic deadline */
	uint64_t now = xtime_ns();
	if (now >= deadline)
		return ETIMEDOUT;
	uint64_t abs = xtime_real_ns() + (deadline - now);
	ts.tv_sec = (time_t)(abs / 1000000000u);
	ts.tv_nsec = (long)(abs % 1000000000u);
	return pthread_cond_timedwait(&c->st_cond, &c->st_lock, &ts);
}

int shmcm_wait_connected(struct shmcm_conn *c, uint64_t timeout_ns)
{
	uint64_t deadline = timeout_ns ? xtime_ns() + timeout_ns : 0;
	int rc = 0;

	pthread_mutex_lock(&c->st_lock);
	while (c->state != SHMCM_CONNECTED) {
		if (c->was_connected) {
			rc = -ENOTCONN;
			break;
		}
		if (deadline_wait(c, deadline) == ETIMEDOUT) {
			rc = -ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&c->st_lock);
	return rc;
}

int shmcm_wait_drained(struct shmcm_conn *c, uint64_t timeout_ns)
{
	uint64_t deadline = timeout_ns ? xtime_ns() + timeout_ns : 0;
	uint64_t nap = 20000;

	for (;;) {
		pthread_spin_lock(&c->tx_mutex);
		bool idle = !c->pq_head && mbox_tx_idle(c->mb);
		pthread_spin_unlock(&c->tx_mutex);
		if (idle)
			return 0;
		if (shmcm_get_state(c) != SHMCM_CONNECTED)
			return -ENOTCONN;
		if (deadline && xtime_ns() >= deadline)
			return -ETIMEDOUT;
		struct timespec ts = { 0, (long)nap };
		nanosleep(&ts, NULL);
		if (nap < 2000000)
			nap *= 2;
	}
}

enum shmcm_state shmcm_get_state(const struct shmcm_conn *c)
{
	struct shmcm_conn *m = (struct shmcm_conn *)c;
	enum shmcm_state s;

	pthread_mutex_lock(&m->st_lock);
	s = m->state;
	pthread_mutex_unlock(&m->st_lock);
	return s;
}

enum shmcm_reason shmcm_get_reason(const struct shmcm_conn *c)
{
	struct shmcm_conn *m = (struct shmcm_conn *)c;
	enum shmcm_reason r;

	pthread_mutex_lock(&m->st_lock);
	r = m->reason;
	pthread_mutex_unlock(&m->st_lock);
	return r;
}

enum shmcm_reason shmcm_get_peer_reason(const struct shmcm_conn *c)
{
	return (enum shmcm_reason)atomic_load_explicit(&c->peer->last_reason, memory_order_acquire);
}

uint32_t shmcm_get_mtu(const struct shmcm_conn *c)
{
	return c->mtu;
}

void shmcm_close(struct shmcm_conn *c)
{
	if (!c)
		return;
	job_run(c, JOB_DESTROY, 0, 0);
	pthread_join(c->cm_thread, NULL);
	if (c->rx_started) {
		atomic_store(&c->rx_stop, true);
		mbox_rx_kick(c->mb);
		pthread_join(c->rx_thread, NULL);
	}
	publish_rx_stats(c);
	conn_free(c);
}
