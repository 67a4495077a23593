#include "shmcm/shmcm_pri.h"
#include "core/log.h"
#include "core/xthread.h"
#include "core/xtime.h"
#include "xprt/futex.h"

#include <limits.h>
#include <poll.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

_Thread_local struct shmcm_conn *shmcm_in_upcall;

/* ------------------------------------------------------------------ jobs */

void shmcm_job_push(struct shmcm_conn *c, struct job *j)
{
	uint64_t one = 1;

	pthread_mutex_lock(&c->jq_lock);
	if (c->jq_closed) {
		j->done = true;
		pthread_mutex_unlock(&c->jq_lock);
		if (j->async)
			free(j);
		else if (j->owned)
			atomic_store(&c->rx_lost_queued, false);
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
static int shmcm_job_run(struct shmcm_conn *c, enum job_op op, uint32_t con_type, uint16_t cno)
{
	struct job j = { .op = op, .con_type = con_type, .cno = cno, .rc = -ENOTCONN };

	shmcm_job_push(c, &j);
	pthread_mutex_lock(&c->jq_lock);
	while (!j.done)
		pthread_cond_wait(&c->jq_cond, &c->jq_lock);
	pthread_mutex_unlock(&c->jq_lock);
	return j.rc;
}

void shmcm_job_async(struct shmcm_conn *c, enum job_op op)
{
	struct job *j = calloc(1, sizeof(*j));

	if (!j) {
		xlog_ratelimited(XLOG_ERROR, "%s: out of memory queueing a job", c->mb->name);
		return;
	}
	j->op = op;
	j->async = true;
	shmcm_job_push(c, j);
}

static void shmcm_job_finish(struct shmcm_conn *c, struct job *j)
{
	if (j->async) {
		free(j);
		return;
	}
	if (j->owned) {
		atomic_store(&c->rx_lost_queued, false);
		return;
	}
	pthread_mutex_lock(&c->jq_lock);
	j->done = true;
	pthread_cond_broadcast(&c->jq_cond);
	pthread_mutex_unlock(&c->jq_lock);
}

/* ------------------------------------------------ connection management */

/* What the peer (and mkshmcon status) sees of us, in the mailbox. */
static void publish_state(struct shmcm_conn *c)
{
	atomic_store(&c->me->peer_cno, c->cm.peer_cno);
	atomic_store(&c->me->alive_count, c->cm.alive_count);
	atomic_store(&c->me->con_reqs, c->cm.con_reqs);
	atomic_store(&c->me->last_reason, c->cm.last_reason);
	atomic_store_explicit(&c->me->state, c->cm.state, memory_order_release);
}

/* What our own threads see: shmcm_get_state(), shmcm_wait_connected(). */
static void set_state(struct shmcm_conn *c)
{
	pthread_mutex_lock(&c->st_lock);
	c->state = c->cm.state;
	if (c->state == SHMCM_CONNECTED)
		c->was_connected = true;
	c->reason = c->cm.last_reason;
	pthread_cond_broadcast(&c->st_cond);
	pthread_mutex_unlock(&c->st_lock);
}

/* Whether the process that brought the connection up understands CON_FIN
 * (and keeps deliv_*).  One that has already detached leaves no owner
 * word to check the capability against: the words of the last owner that
 * wrote any are taken, which errs towards the strict reading (a pipe end
 * then waits for a CON_FIN or a delivery count, not just a close). */
static bool peer_caps_fin(struct shmcm_conn *c)
{
	uint64_t owner = atomic_load_explicit(&c->peer->owner, memory_order_acquire);
	uint64_t cap_owner = atomic_load_explicit(&c->peer->caps_owner, memory_order_acquire);

	if (!(atomic_load_explicit(&c->peer->caps, memory_order_relaxed) & MBOX_CAP_FIN))
		return false;
	return owner ? cap_owner == owner : cap_owner != 0;
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

	/* Senders waiting for room or for a pull give up first: a deliver
	 * up-call may be one of them, and it holds the deliver lock. */
	if (out.disable_deliver || out.disable_tx) {
		atomic_store(&c->tx_abort, true);
		mbox_tx_kick(c->mb);
		xfutex_wake(&c->peer->rndv_done, INT_MAX, true);
	}
	if (out.disable_deliver)
		synchronize_shmcm_lock(&c->deliver_lock);
	if (out.disable_tx) {
		synchronize_shmcm_lock(&c->tx_lock);
		pthread_spin_lock(&c->tx_mutex);
		shmcm_pend_clear(c);		/* user data of a dead connection */
		pthread_spin_unlock(&c->tx_mutex);
	}
	/* The mailbox shows our new state before the peer can see the packet
	 * that brings it about: a peer that reads our CON_ACK finds us
	 * CONNECTED, and once we are DISCONNECTED (our deliver lock closed)
	 * it knows we will pull nothing more of what it sent by reference. */
	publish_state(c);
	if (out.enable_tx) {
		atomic_store(&c->tx_cno, c->cm.cno);
		atomic_store(&c->tx_abort, false);
		atomic_store(&c->tx_shut, false);
		pthread_spin_lock(&c->tx_mutex);
		c->tx_reset_queued = false;	/* the reset it waited for is done */
		c->tx_udata = 0;
		c->tx_lost = false;
		pthread_spin_unlock(&c->tx_mutex);
	}
	/* No user data after our CON_FIN: senders fail from now on (the
	 * caller of shmcm_shutdown() already waited out those under way). */
	if (out.shut_tx)
		atomic_store(&c->tx_shut, true);
	/* Nothing the peer sends after its CON_FIN is delivered (the rx
	 * thread is waiting for this job, so no packet after it is seen
	 * before the flag is). */
	if (out.peer_fin)
		atomic_store(&c->rx_fin, true);
	for (unsigned i = 0; i < out.nsend; i++)
		shmcm_send_con(c, out.send[i].con_type, out.send[i].cno);
	/* Only now may user data follow: after the CON_ACK in the ring
	 * (LINX's RLNH transmits only after the connected up-call). */
	if (out.enable_tx)
		shmcm_lock_open(&c->tx_lock);
	if (out.disconnected)
		shmcm_reasm_reset(&c->reasm);	/* nobody holds the deliver lock */
	if (out.connected)
		atomic_store(&c->peer_fin, peer_caps_fin(c));
	set_state(c);
	shmcm_in_upcall = c;
	if (out.connected && c->uc.connected)
		c->uc.connected(c->uc.arg);
	if (out.peer_fin && c->uc.eof)
		c->uc.eof(c->uc.arg);
	if (out.disconnected && c->uc.disconnected)
		c->uc.disconnected(c->uc.arg, out.reason);
	shmcm_in_upcall = NULL;
	if (out.enable_deliver) {
		c->rx_peer_cno = c->cm.peer_cno;
		atomic_store(&c->rx_fin, false);
		atomic_store(&c->rx_hold, false);
		/* the count of a new generation: zero before its number */
		c->rx_deliv = 0;
		atomic_store_explicit(&c->me->deliv_pkts, 0, memory_order_relaxed);
		atomic_store_explicit(&c->me->deliv_cno, c->rx_peer_cno, memory_order_release);
		shmcm_reasm_reset(&c->reasm);
		shmcm_lock_open(&c->deliver_lock);
	}
}

static void peer_unwatch(struct shmcm_conn *c)
{
	if (c->peer_pidfd >= 0) {
		close(c->peer_pidfd);
		c->peer_pidfd = -1;
	}
	atomic_store(&c->watched_owner, 0);
}

/* The peer is dead: act once every packet it sent has been handled. */
static void peer_check(struct shmcm_conn *c)
{
	struct shmcm_cm_ev ev = { .type = SHMCM_EV_PEER_GONE };

	if (!atomic_load(&c->peer_dead) || mbox_rx_pending(c->mb))
		return;
	cm_event(c, &ev);
}

static void on_peer_exit(struct shmcm_conn *c)
{
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
	/* A death not acted on yet (our ring not drained) comes first. */
	if (atomic_load(&c->peer_dead) && c->cm.state == SHMCM_CONNECTED)
		return;
	if (c->peer_pidfd >= 0) {
		/* The process we watched no longer owns the peer side: it
		 * exited (and released it) before we saw its pidfd fire.
		 * Gone either way; the new owner is watched on the next
		 * tick, once this one is dealt with. */
		on_peer_exit(c);
		return;
	}
	c->peer_owner = owner;
	fd = mbox_side_pidfd(c->mb->h, mbox_peer(c->mb->side), &pid);
	if (fd < 0)
		return;
	c->peer_pidfd = fd;
	atomic_store(&c->watched_owner, owner);
	atomic_store(&c->peer_dead, false);
	xlog(XLOG_DEBUG, "%s: watching peer pid %d", c->mb->name, (int)pid);
}

static void on_tick(struct shmcm_conn *c)
{
	struct shmcm_cm_ev ev = { .type = SHMCM_EV_TICK };

	peer_watch(c);
	pthread_spin_lock(&c->tx_mutex);
	if (c->pq_head) {
		shmcm_pend_flush(c);
		shmcm_publish_tx_stats(c);
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
		/* published before the packet that it explains */
		ev.peer_closed = atomic_load_explicit(&c->peer->last_reason, memory_order_acquire) ==
				 SHMCM_R_CLOSED;
		cm_event(c, &ev);
		break;
	case JOB_RX_LOST:
		ev.type = SHMCM_EV_RX_LOST;
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
	case JOB_SHUTDOWN:
		ev.type = SHMCM_EV_SHUTDOWN;
		cm_event(c, &ev);
		j->rc = c->cm.state == SHMCM_CONNECTED && c->cm.fin_sent ? 0 : -ENOTCONN;
		break;
	case JOB_DESTROY:
		ev.type = SHMCM_EV_DISCONNECT;
		cm_event(c, &ev);
		synchronize_shmcm_lock(&c->con_pkt_lock);
		c->cm_stop = true;
		break;
	}
}

static void on_jobs(struct shmcm_conn *c)
{
	uint64_t n;
	struct job *j;

	if (read(c->job_efd, &n, sizeof(n)) < 0 && errno != EAGAIN)
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
		shmcm_job_finish(c, j);
		if (c->cm_stop)
			break;
	}
}

/* The manager's loop: jobs, the watched peer's exit, and the tick (every
 * tick_ns from the last deadline; ticks missed while busy are skipped,
 * not replayed) until JOB_DESTROY. */
static void *cm_thread(void *arg)
{
	struct shmcm_conn *c = arg;
	struct job *j;

	c->next_tick = xtime_ns() + c->tick_ns;
	while (!c->cm_stop) {
		struct pollfd p[2] = { { c->job_efd, POLLIN, 0 }, { c->peer_pidfd, POLLIN, 0 } };
		uint64_t now = xtime_ns();
		int ms = now >= c->next_tick ? 0 :
			 (int)((c->next_tick - now + XTIME_NS_PER_MS - 1) / XTIME_NS_PER_MS);

		/* a negative fd (no peer watched) is skipped by poll() */
		if (poll(p, 2, ms) < 0 && errno != EINTR) {
			xlog(XLOG_ERROR, "%s: connection manager: poll: %m", c->mb->name);
			break;	/* jobs are answered below, from now on too */
		}
		/* The exit first: a job may close this pidfd and open the next
		 * peer's, which can get the same number. */
		if (p[1].revents)
			on_peer_exit(c);
		if (p[0].revents)
			on_jobs(c);
		now = xtime_ns();
		if (!c->cm_stop && now >= c->next_tick) {
			c->next_tick += c->tick_ns;
			if (c->next_tick <= now)
				c->next_tick = now + c->tick_ns;
			on_tick(c);
		}
	}

	/* Whatever was queued after destroy (or a failed poll) is answered,
	 * never left hanging. */
	pthread_mutex_lock(&c->jq_lock);
	c->jq_closed = true;
	j = c->jq_head;
	c->jq_head = c->jq_tail = NULL;
	pthread_mutex_unlock(&c->jq_lock);
	while (j) {
		struct job *next = j->next;
		shmcm_job_finish(c, j);
		j = next;
	}
	return NULL;
}

/* ------------------------------------------------------------ lifecycle */

static void conn_free(struct shmcm_conn *c)
{
	if (c->job_efd >= 0)
		close(c->job_efd);
	if (c->peer_pidfd >= 0)
		close(c->peer_pidfd);
	shmcm_reasm_reset(&c->reasm);
	free(c->rndv_buf);
	shmcm_pend_clear(c);
	if (c->me)		/* only once the side was claimed */
		atomic_store(&c->me->state, SHMCM_DISCONNECTED);
	mbox_close(c->mb);
	pthread_mutex_destroy(&c->jq_lock);
	pthread_cond_destroy(&c->jq_cond);
	pthread_mutex_destroy(&c->st_lock);
	pthread_cond_destroy(&c->st_cond);
	pthread_spin_destroy(&c->tx_mutex);
	pthread_mutex_destroy(&c->ref_lock);
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
	pthread_mutex_init(&c->ref_lock, NULL);
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
	c->mtu = c->mru = c->mb->cfg.mtu;
	c->defq_max = c->mb->cfg.defq_max;
	shmcm_reasm_init(&c->reasm, p->max_msg ? p->max_msg : DEF_MAX_MSG,
			 4 * (size_t)(p->max_msg ? p->max_msg : DEF_MAX_MSG));
	shmcm_cm_init(&c->cm, (uint16_t)atomic_load(&c->me->cno));
	c->state = SHMCM_DISCONNECTED;
	publish_state(c);
	atomic_store(&c->me->flow, p->flow);
	/* Single copy by reference: advertised before we ever connect, and
	 * never while deferring (LINX's transmit never blocks there). */
	c->cma_min = p->no_cma || p->flow != SHMCM_FLOW_WAIT ? 0 : p->cma_min ? p->cma_min : DEF_CMA_MIN;
	/* A message that fits in a slot is faster inline: the two copies
	 * through the ring run in parallel on both CPUs, while a pull pays
	 * page pinning and runs alone.  By reference is for what would be
	 * fragmented and reassembled (three copies). */
	if (c->cma_min && c->cma_min <= c->mtu - SHMCM_UDATA_HLEN)
		c->cma_min = c->mtu - SHMCM_UDATA_HLEN + 1;
	atomic_store(&c->me->cma, p->no_cma ? 0 : 1);
	atomic_store(&c->me->defq_size, 0);
	/* caps first, then the owner word that makes them ours */
	atomic_store(&c->me->caps, p->no_fin ? 0 : MBOX_CAP_FIN);
	atomic_store_explicit(&c->me->caps_owner, c->mb->owner, memory_order_release);
	set_state(c);

	c->job_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->job_efd < 0) {
		snprintf(err, errlen, "connection '%s': eventfd: %s", p->name, strerror(errno));
		goto out_free;
	}
	tick_ns = (uint64_t)c->mb->cfg.con_tmo_ms / SHMCM_ALIVES_PER_TMO;
	if (tick_ns < SHMCM_TICK_MIN_MS)
		tick_ns = SHMCM_TICK_MIN_MS;
	c->tick_ns = tick_ns * XTIME_NS_PER_MS;
	if ((rc = xthread_create(&c->cm_thread, cm_thread, c)) != 0) {
		snprintf(err, errlen, "connection '%s': cannot start thread: %s", p->name, strerror(rc));
		goto out_free;
	}
	if (!c->poll_mode) {
		if ((rc = xthread_create(&c->rx_thread, shmcm_rx_thread, c)) != 0) {
			snprintf(err, errlen, "connection '%s': cannot start rx thread: %s",
				 p->name, strerror(rc));
			shmcm_job_run(c, JOB_DESTROY, 0, 0);
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
	shmcm_job_async(c, JOB_CONNECT);
	return 0;
}

int shmcm_disconnect(struct shmcm_conn *c)
{
	/* From an up-call we are the job queue or hold the deliver lock:
	 * waiting would deadlock, so only queue it. */
	if (shmcm_in_upcall == c) {
		/* a deliver up-call that cannot take the data: it is not
		 * delivered, nor anything after it */
		atomic_store(&c->rx_hold, true);
		shmcm_job_async(c, JOB_DISCONNECT);
	} else
		shmcm_job_run(c, JOB_DISCONNECT, 0, 0);
	return 0;
}

bool shmcm_peer_has_fin(struct shmcm_conn *c)
{
	return atomic_load(&c->peer_fin);
}

int shmcm_shutdown(struct shmcm_conn *c)
{
	if (shmcm_get_state(c) != SHMCM_CONNECTED)
		return -ENOTCONN;
	if (!shmcm_peer_has_fin(c))
		return -EOPNOTSUPP;
	/* New sends fail from here on; one already under way (in another
	 * thread, perhaps waiting for room) goes first, whole, so CON_FIN
	 * never lands between the fragments of a message. */
	atomic_store(&c->tx_shut, true);
	if (shmcm_in_upcall == c) {
		/* the deliver up-call of a sender's peer could be the one
		 * that would free its room: do not wait here */
		shmcm_job_async(c, JOB_SHUTDOWN);
		return 0;
	}
	for (uint64_t nap = 1000; atomic_load(&c->tx_lock.count) > 1;) {
		struct timespec ts = { 0, (long)nap };
		nanosleep(&ts, NULL);
		if (nap < 1000000)
			nap *= 2;
	}
	return shmcm_job_run(c, JOB_SHUTDOWN, 0, 0);
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

bool shmcm_drained(struct shmcm_conn *c)
{
	bool done;

	pthread_spin_lock(&c->tx_mutex);
	if (c->pq_head) {
		shmcm_pend_flush(c);
		shmcm_publish_tx_stats(c);
	}
	if (c->pq_head || c->tx_lost) {
		/* waiting packets, a CON_FIN among them perhaps, would be
		 * dropped by a disconnect now */
		done = false;
	} else if (!atomic_load(&c->peer_fin)) {
		/* an older peer keeps no count: that it read our ring is
		 * all we can know */
		done = mbox_tx_idle(c->mb);
	} else {
		/* the generation around the count, as a seqlock's readers */
		uint32_t g1 = atomic_load_explicit(&c->peer->deliv_cno, memory_order_acquire);
		uint64_t n = atomic_load_explicit(&c->peer->deliv_pkts, memory_order_acquire);
		uint32_t g2 = atomic_load_explicit(&c->peer->deliv_cno, memory_order_acquire);

		done = g1 == g2 && (uint16_t)g1 == atomic_load(&c->tx_cno) && n == c->tx_udata;
	}
	pthread_spin_unlock(&c->tx_mutex);
	return done;
}

int shmcm_wait_drained(struct shmcm_conn *c, uint64_t timeout_ns)
{
	uint64_t deadline = timeout_ns ? xtime_ns() + timeout_ns : 0;
	uint64_t nap = 20000;

	for (;;) {
		if (shmcm_drained(c))
			return 0;
		/* the count outlives the connection: a peer that took the
		 * last packet and closed at once did get it all */
		if (shmcm_get_state(c) != SHMCM_CONNECTED)
			return shmcm_drained(c) ? 0 : -ENOTCONN;
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

int shmcm_rx_wait(struct shmcm_conn *c, uint64_t timeout_ns)
{
	return mbox_rx_wait(c->mb, 0, timeout_ns);
}

uint32_t shmcm_tx_taken(struct shmcm_conn *c)
{
	return atomic_load_explicit(&c->mb->tx->tail, memory_order_acquire);
}

int shmcm_tx_wait(struct shmcm_conn *c, uint32_t seen, uint64_t timeout_ns)
{
	return mbox_tx_wait(c->mb->tx, seen, timeout_ns);
}

uint32_t shmcm_tx_room(struct shmcm_conn *c, uint32_t reserve, uint32_t enough, uint32_t *cap)
{
	struct mbox *m = c->mb;
	uint32_t used, size = m->mask + 1, room;

	*cap = size > reserve ? size - reserve : 0;
	pthread_spin_lock(&c->tx_mutex);
	if (c->pq_head) {
		room = 0;
	} else {
		used = m->tx_head - m->tx_tail_cache;
		if (used + reserve + enough > size) {
			m->tx_tail_cache = atomic_load_explicit(&m->tx->tail, memory_order_acquire);
			used = m->tx_head - m->tx_tail_cache;
		}
		room = used + reserve >= size ? 0 : size - used - reserve;
	}
	pthread_spin_unlock(&c->tx_mutex);
	return room;
}

void shmcm_close(struct shmcm_conn *c)
{
	if (!c)
		return;
	shmcm_job_run(c, JOB_DESTROY, 0, 0);
	pthread_join(c->cm_thread, NULL);
	if (c->rx_started) {
		atomic_store(&c->rx_stop, true);
		mbox_rx_kick(c->mb);
		pthread_join(c->rx_thread, NULL);
	}
	shmcm_publish_rx_stats(c);
	conn_free(c);
}
