/* SHMCM receive path (LINX shmcm_rx.c): drain the mailbox, CON packets to the
 * job queue, user data reassembled and delivered. */
#include "shmcm/shmcm_pri.h"
#include "core/log.h"
#include "core/xtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* One more packet of the peer's generation is in the user's hands --
 * unless the user asked to disconnect while taking it. */
static void delivered(struct shmcm_conn *c)
{
	if (atomic_load_explicit(&c->rx_hold, memory_order_relaxed))
		return;
	atomic_store_explicit(&c->me->deliv_pkts, ++c->rx_deliv, memory_order_release);
}

/* User data of the peer dropped (malformed, after its CON_FIN, no memory to
 * reassemble it): what follows would reach the user as if nothing were
 * missing, so nothing more of this generation is delivered or counted
 * (the peer's count stays short) and the connection is reset, once. */
static void rx_lost(struct shmcm_conn *c)
{
	c->recv_bad++;
	if (atomic_exchange(&c->rx_hold, true) || atomic_exchange(&c->rx_lost_queued, true))
		return;
	c->rx_lost_job = (struct job){ .op = JOB_RX_LOST, .owned = true };
	shmcm_job_push(c, &c->rx_lost_job);
}

void shmcm_publish_rx_stats(struct shmcm_conn *c)
{
	atomic_store_explicit(&c->me->rndv_msgs, c->rndv_msgs, memory_order_relaxed);
	atomic_store_explicit(&c->me->rndv_bytes, c->rndv_bytes, memory_order_relaxed);
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
	shmcm_job_push(c, &j);
	shmcm_unlock(&c->con_pkt_lock);
	pthread_mutex_lock(&c->jq_lock);
	while (!j.done)
		pthread_cond_wait(&c->jq_cond, &c->jq_lock);
	pthread_mutex_unlock(&c->jq_lock);
}

/* A message sent by reference: pull it from the sender's memory in one
 * copy, tell the sender (its buffer is free again), then deliver.  A copy
 * that fails (no ptrace permission, a bad address) is reported back, and
 * the sender resends inline; nothing is delivered from it. */
static void rx_ref(struct shmcm_conn *c, const struct shmcm_pkt *p)
{
	uint32_t len = p->u.size;
	uint8_t *dst = NULL;
	bool ok = false;

	if (c->uc.rx_buffer)
		dst = c->uc.rx_buffer(c->uc.arg, p->u.src, p->u.dst, len);
	if (!dst && len <= c->reasm.max_msg) {
		if (len > c->rndv_cap) {
			uint8_t *nb = realloc(c->rndv_buf, len);
			if (nb) {
				c->rndv_buf = nb;
				c->rndv_cap = len;
			}
		}
		if (len <= c->rndv_cap)
			dst = c->rndv_buf;
	}
	/* Pull only from the process we watch as our peer: the owner word in
	 * shared memory could name any process we may read. */
	uint64_t owner = atomic_load_explicit(&c->peer->owner, memory_order_acquire);
	if (owner == 0 || owner != atomic_load_explicit(&c->watched_owner, memory_order_acquire))
		dst = NULL;
	if (dst) {
		pid_t pid = (pid_t)(owner >> 32);
		struct iovec local = { dst, len };
		struct iovec remote = { (void *)(uintptr_t)p->u.addr, len };
		ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
		int err = n < 0 ? errno : 0;

		ok = n == (ssize_t)len;
		/* a peer that died meanwhile (ESRCH) is the connection's news,
		 * told once by whoever notices the death */
		if (!ok && err != ESRCH)
			xlog_ratelimited(XLOG_WARN, "%s: pulling a %u-byte message from pid %d: %s",
					 c->mb->name, len, (int)pid,
					 n < 0 ? strerror(err) : "short copy");
	}
	/* The outcome first, then the count that publishes it. */
	uint32_t n = atomic_load_explicit(&c->me->rndv_done, memory_order_relaxed);

	atomic_store_explicit(&c->me->rndv_status[n % MBOX_RNDV_RING], ok ? 0 : 1,
			      memory_order_relaxed);
	if (!ok) {
		c->recv_bad++;
		atomic_fetch_add_explicit(&c->me->rndv_failed, 1, memory_order_relaxed);
	}
	atomic_store_explicit(&c->me->rndv_done, n + 1, memory_order_release);
	mbox_wake_word(&c->me->rndv_done, &c->peer->rndv_sleep);
	if (!ok) {
		delivered(c);	/* accounted for: the sender learns it failed */
		return;
	}
	c->rndv_msgs++;
	c->rndv_bytes += len;
	shmcm_in_upcall = c;
	c->uc.deliver(c->uc.arg, p->u.src, p->u.dst, dst, len);
	shmcm_in_upcall = NULL;
	delivered(c);
}

static void rx_udata(struct shmcm_conn *c, const struct shmcm_pkt *p)
{
	struct shmcm_msg m;
	int rc;

	if (p->u.cno != c->rx_peer_cno) {
		c->recv_stale++;
		return;
	}
	if (atomic_load_explicit(&c->rx_fin, memory_order_relaxed)) {
		/* the peer said it had ended its data: a broken peer */
		rx_lost(c);
		xlog_ratelimited(XLOG_WARN, "%s: dropped user data sent after CON_FIN",
				 c->mb->name);
		return;
	}
	if (atomic_load_explicit(&c->rx_hold, memory_order_relaxed))
		return;		/* a disconnect is on its way */
	if (shmcm_pkt_is_ref(p) && atomic_load_explicit(&c->me->cma, memory_order_relaxed)) {
		rx_ref(c, p);
		return;
	}
	rc = shmcm_reasm_input(&c->reasm, p, &m);
	if (rc == 1) {
		shmcm_in_upcall = c;
		c->uc.deliver(c->uc.arg, m.src, m.dst, m.data, m.len);
		shmcm_in_upcall = NULL;
		delivered(c);
	} else if (rc == 0) {
		delivered(c);	/* a fragment, kept until its message ends */
	} else {
		rx_lost(c);
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
				rx_lost(c);
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
				/* Everything up to this packet is handled (and
				 * the packet itself decoded): hand the slots
				 * back before the job runs, so a peer that
				 * learns of it -- a CON_FIN answered by our
				 * close -- finds its ring read. */
				mbox_rx_release(c->mb, n);
				done += n;
				limit -= n;
				n = 0;
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
			break;	/* (a CON packet ends a batch early; the caller calls again) */
		if (!atomic_load_explicit(&c->rx_activity, memory_order_relaxed))
			atomic_store_explicit(&c->rx_activity, 1, memory_order_relaxed);
		mbox_rx_release(c->mb, n);
		done += n;
	}
	if (done)
		shmcm_publish_rx_stats(c);
	return done;
}

int shmcm_poll(struct shmcm_conn *c, unsigned max)
{
	int n = (int)rx_run(c, max);

	shmcm_reap(c);
	return n;
}

void *shmcm_rx_thread(void *arg)
{
	struct shmcm_conn *c = arg;

	while (!atomic_load_explicit(&c->rx_stop, memory_order_acquire)) {
		if (rx_run(c, RX_BATCH * 4))
			continue;
		/* Dead peer: once the ring is drained, tell the job queue. */
		if (atomic_load(&c->peer_dead) && !atomic_exchange(&c->peer_check_queued, true))
			shmcm_job_async(c, JOB_PEER_CHECK);
		mbox_rx_wait(c->mb, c->spin_ns, 100 * 1000000ull);
	}
	return NULL;
}
