/* SHMCM transmit path (LINX shmcm_tx.c): fragmentation, the deferred queue,
 * CON packets from the job queue. */
#include "shmcm/shmcm_pri.h"
#include "core/log.h"
#include "core/xtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* Copies a pending packet into the ring; false when the ring is full. */
static bool put_pkt(struct shmcm_conn *c, const void *pkt, uint32_t len, bool udata)
{
	void *slot = mbox_tx_reserve(c->mb);

	if (!slot)
		return false;
	memcpy(slot, pkt, len);
	mbox_tx_publish(c->mb);
	c->sent_pkts++;
	c->sent_bytes += len;
	c->tx_udata += udata;
	return true;
}

void shmcm_publish_tx_stats(struct shmcm_conn *c)
{
	atomic_store_explicit(&c->me->sent_pkts, c->sent_pkts, memory_order_relaxed);
	atomic_store_explicit(&c->me->sent_bytes, c->sent_bytes, memory_order_relaxed);
	atomic_store_explicit(&c->me->defq_size, c->pq_udata, memory_order_relaxed);
}

/* Under tx_mutex.  Sends what waits in the pending queue, in order. */
void shmcm_pend_flush(struct shmcm_conn *c)
{
	struct pend *p;

	if (c->tx_claimed)
		return;		/* the next slots are the claimer's */
	while ((p = c->pq_head)) {
		if (!put_pkt(c, p->pkt, p->len, p->udata))
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

void shmcm_pend_clear(struct shmcm_conn *c)
{
	struct pend *p;

	while ((p = c->pq_head)) {
		c->pq_head = p->next;
		free(p);
	}
	c->pq_tail = NULL;
	if (c->pq_udata)
		c->tx_lost = true;	/* the peer will never have it */
	c->pq_udata = 0;
}

/* From the job queue only. */
void shmcm_send_con(struct shmcm_conn *c, uint32_t type, uint16_t cno)
{
	uint8_t pkt[SHMCM_CON_LEN];

	shmcm_encode_con(pkt, type, cno);
	pthread_spin_lock(&c->tx_mutex);
	shmcm_pend_flush(c);
	if (c->pq_head || c->tx_claimed || !put_pkt(c, pkt, SHMCM_CON_LEN, false)) {
		/* A full mailbox holds plenty to prove we are alive; other
		 * CON packets are reliable and wait their turn. */
		if ((type != SHMCM_CON_ALV || c->tx_claimed) &&
		    pend_add(c, pkt, sizeof(pkt), NULL, 0, false) < 0)
			xlog_ratelimited(XLOG_ERROR, "%s: out of memory queueing %s",
					 c->mb->name, shmcm_con_type_name(type));
	}
	shmcm_publish_tx_stats(c);
	pthread_spin_unlock(&c->tx_mutex);
}

/* Under tx_mutex: whether user data may enter the mailbox now. */
static int tx_gate(struct shmcm_conn *c)
{
	if (c->tx_reset_queued)
		return -ENOBUFS;
	if (atomic_load_explicit(&c->tx_shut, memory_order_relaxed))
		return -EPIPE;
	if (c->tx_claimed)
		return -EBUSY;
	return 0;
}

/* Deferred queue overflow: LINX disconnects, and until the disconnect job
 * has run nothing more of ours may enter the mailbox.  Under tx_mutex,
 * which it releases. */
static int tx_overflow(struct shmcm_conn *c)
{
	c->tx_reset_queued = true;
	shmcm_publish_tx_stats(c);
	pthread_spin_unlock(&c->tx_mutex);
	shmcm_job_async(c, JOB_INTERNAL);
	return -ENOBUFS;
}

/* SHMCM_FLOW_WAIT: a free slot, waiting for one if need be.  Called and
 * returns with tx_mutex held; NULL, with it released, when the connection
 * goes down meanwhile.  The job queue sends its CON packets while we wait. */
static uint8_t *slot_wait(struct shmcm_conn *c)
{
	for (;;) {
		uint8_t *slot = c->pq_head ? NULL : mbox_tx_reserve(c->mb);
		uint32_t seen = mbox_tx_seen_tail(c->mb);

		if (slot)
			return slot;
		shmcm_publish_tx_stats(c);
		pthread_spin_unlock(&c->tx_mutex);
		for (;;) {
			if (atomic_load(&c->tx_abort))
				return NULL;
			if (mbox_tx_wait(c->mb->tx, seen, 50 * 1000000ull) == 0)
				break;
		}
		pthread_spin_lock(&c->tx_mutex);
		shmcm_pend_flush(c);
	}
}

/* ---- messages by reference ------------------------------------------
 *
 * The peer counts the references it has handled in its rndv_done and
 * leaves each outcome in rndv_status; references are handled in order, so
 * the n-th one we have in flight is done when that count reaches its
 * `expect`.  A count is sampled only when nothing is in flight. */

/* The peer will never pull what we have in flight: it is dead, or it has
 * left the generation those references belong to (our CON_RST, handled
 * after every packet before it, or its own reset, which synchronizes its
 * deliver lock -- so no pull is half done either). */
static bool refs_orphaned(struct shmcm_conn *c)
{
	uint32_t st = atomic_load_explicit(&c->peer->state, memory_order_acquire);

	/* While we are connected the peer is CONNECTING (it has not read our
	 * CON_REQ/CON_ACK yet, and will, then our references), CONNECTED to
	 * this generation, or gone from it. */
	if (st == SHMCM_DISCONNECTED || st == 0)
		return true;
	if (st == SHMCM_CONNECTED &&
	    (uint16_t)atomic_load_explicit(&c->peer->peer_cno, memory_order_acquire) !=
		    atomic_load_explicit(&c->tx_cno, memory_order_relaxed))
		return true;
	return atomic_load(&c->tx_abort) && mbox_side_pid(c->mb->h, mbox_peer(c->mb->side)) == 0;
}

int shmcm_reap(struct shmcm_conn *c)
{
	struct { shmcm_sent_fn fn; void *ctx; int status; } due[SHMCM_REF_WINDOW];
	int n = 0;

	if (atomic_load_explicit(&c->ref_head, memory_order_relaxed) ==
	    atomic_load_explicit(&c->ref_tail, memory_order_relaxed))
		return 0;	/* nothing in flight: the poll loop's usual case */
	/* Decide under the lock, call back outside it (a callback may send). */
	pthread_mutex_lock(&c->ref_lock);
	while (c->ref_tail != c->ref_head) {
		struct shmcm_ref *e = &c->refq[c->ref_tail % SHMCM_REF_WINDOW];
		uint32_t done = atomic_load_explicit(&c->peer->rndv_done, memory_order_acquire);
		int status;

		if ((int32_t)(done - e->expect) >= 0) {
			status = atomic_load_explicit(&c->peer->rndv_status[(e->expect - 1) % MBOX_RNDV_RING],
						      memory_order_relaxed) ? -EREMOTEIO : 0;
		} else if (refs_orphaned(c)) {
			status = -ENOTCONN;
		} else {
			break;
		}
		if (status == -EREMOTEIO && !c->rndv_off) {
			c->rndv_off = true;
			xlog(XLOG_INFO, "%s: the peer cannot pull messages by reference; sending inline",
			     c->mb->name);
		}
		due[n].fn = e->fn;
		due[n].ctx = e->ctx;
		due[n].status = status;
		c->ref_tail++;
		n++;
	}
	pthread_mutex_unlock(&c->ref_lock);
	for (int k = 0; k < n; k++)
		due[k].fn(due[k].ctx, due[k].status);
	return n;
}

unsigned shmcm_refs_in_flight(const struct shmcm_conn *c)
{
	return atomic_load(&((struct shmcm_conn *)c)->ref_head) -
	       atomic_load(&((struct shmcm_conn *)c)->ref_tail);
}

/* Waits until the peer's count moves or the connection goes down; then
 * the caller reaps.  0, or -ENOTCONN once nothing can be waited for. */
static int ref_wait(struct shmcm_conn *c, uint64_t abort_deadline)
{
	uint32_t seen = atomic_load_explicit(&c->peer->rndv_done, memory_order_acquire);

	/* Spin through a typical pull (1 MiB at ~20 GB/s is 50 us)
	 * rather than pay a futex round trip per message. */
	if (mbox_wait_word(&c->peer->rndv_done, seen, &c->me->rndv_sleep, 200000,
			   20 * 1000000ull) == 0)
		return 0;
	if (atomic_load(&c->tx_abort) && xtime_ns() > abort_deadline)
		return -ENOTCONN;
	return 0;
}

/* Puts one reference in the ring.  Under tx_lock (held by the caller). */
static int ref_issue(struct shmcm_conn *c, uint32_t src, uint32_t dst, const void *buf,
		     uint32_t len, uint16_t cno, shmcm_sent_fn fn, void *ctx)
{
	struct shmcm_ref *e;
	uint8_t *slot;

	pthread_mutex_lock(&c->ref_lock);
	while (c->ref_head - c->ref_tail >= SHMCM_REF_WINDOW) {
		pthread_mutex_unlock(&c->ref_lock);
		if (!shmcm_reap(c)) {
			if (atomic_load(&c->tx_abort))
				return -ENOTCONN;
			ref_wait(c, 0);
		}
		pthread_mutex_lock(&c->ref_lock);
	}
	pthread_spin_lock(&c->tx_mutex);
	int rc = tx_gate(c);
	if (rc < 0) {
		pthread_spin_unlock(&c->tx_mutex);
		pthread_mutex_unlock(&c->ref_lock);
		return rc;
	}
	if (c->pq_head)
		shmcm_pend_flush(c);
	if (!(slot = slot_wait(c))) {
		pthread_mutex_unlock(&c->ref_lock);
		return -ENOTCONN;
	}
	if (c->ref_head == c->ref_tail)
		c->ref_expect = atomic_load_explicit(&c->peer->rndv_done, memory_order_acquire);
	e = &c->refq[c->ref_head % SHMCM_REF_WINDOW];
	e->fn = fn;
	e->ctx = ctx;
	e->expect = ++c->ref_expect;
	c->ref_head++;
	shmcm_encode_udata_ref(slot, cno, c->msgid++, src, dst, len, (uint64_t)(uintptr_t)buf);
	mbox_tx_publish(c->mb);
	c->sent_pkts++;
	c->sent_bytes += SHMCM_UDATA_HLEN;
	c->tx_udata++;
	shmcm_publish_tx_stats(c);
	pthread_spin_unlock(&c->tx_mutex);
	pthread_mutex_unlock(&c->ref_lock);
	return 0;
}

static bool can_ref(struct shmcm_conn *c)
{
	return c->cma_min && !c->rndv_off &&
	       atomic_load_explicit(&c->peer->cma, memory_order_relaxed);
}

int shmcm_send_ref(struct shmcm_conn *c, uint32_t src, uint32_t dst,
		   const void *buf, size_t len, shmcm_sent_fn sent, void *ctx)
{
	int rc;

	if (len == 0 || len > UINT32_MAX)
		return -EMSGSIZE;
	if (!shmcm_trylock(&c->tx_lock))
		return -ENOTCONN;
	if (!can_ref(c))
		rc = -EOPNOTSUPP;
	else
		rc = ref_issue(c, src, dst, buf, (uint32_t)len,
			       atomic_load_explicit(&c->tx_cno, memory_order_relaxed), sent, ctx);
	shmcm_unlock(&c->tx_lock);
	shmcm_reap(c);
	return rc;
}

static void sync_sent(void *ctx, int status)
{
	*(int *)ctx = status;
}

/* shmcm_transmit() of a big message: by reference, and back once the peer
 * has pulled it.  -EAGAIN: it could not, send it inline. */
static int tx_ref(struct shmcm_conn *c, uint32_t src, uint32_t dst,
		  const void *buf, uint32_t len, uint16_t cno)
{
	int status = 1, rc;
	uint64_t abort_deadline = 0;

	rc = ref_issue(c, src, dst, buf, len, cno, sync_sent, &status);
	if (rc < 0)
		return rc;
	while (shmcm_reap(c), status == 1) {
		/* Going down: the peer may still be reading our buffer;
		 * wait for it to finish or leave, but not for ever. */
		if (atomic_load(&c->tx_abort) && !abort_deadline)
			abort_deadline = xtime_ns() + 1000000000ull;
		if (ref_wait(c, abort_deadline) < 0)
			return -ENOTCONN;
	}
	if (status == -EREMOTEIO)
		return -EAGAIN;
	return status;
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
	if (len >= c->cma_min && can_ref(c)) {
		rc = tx_ref(c, src, dst, buf, (uint32_t)len, cno);
		if (rc != -EAGAIN)
			goto out_unlock;
		rc = 0;
	}

	pthread_spin_lock(&c->tx_mutex);
	if ((rc = tx_gate(c)) < 0) {
		pthread_spin_unlock(&c->tx_mutex);
		goto out_unlock;
	}
	msgid = c->msgid++;
	if (c->pq_head)
		shmcm_pend_flush(c);
	for (;;) {
		uint32_t n = (uint32_t)len - off < fsz ? (uint32_t)len - off : fsz;
		uint32_t psize = SHMCM_UDATA_HLEN + n;
		uint8_t *slot;

		if (c->flow == SHMCM_FLOW_WAIT) {
			if (!(slot = slot_wait(c))) {
				rc = -ENOTCONN;
				goto out_unlock;
			}
		} else {
			slot = c->pq_head ? NULL : mbox_tx_reserve(c->mb);
		}
		if (!slot) {
			/* LINX: the deferred queue, and a disconnect once it is
			 * full (with the default limit 0: at once). */
			uint8_t hdr[SHMCM_UDATA_HLEN];

			shmcm_encode_udata_hdr(hdr, psize, cno, msgid, src, dst, (uint32_t)len);
			if (c->pq_udata >= c->defq_max ||
			    pend_add(c, hdr, sizeof(hdr), data + off, n, true) < 0) {
				rc = tx_overflow(c);
				goto out_unlock;
			}
		} else {
			shmcm_encode_udata_hdr(slot, psize, cno, msgid, src, dst, (uint32_t)len);
			memcpy(slot + SHMCM_UDATA_HLEN, data + off, n);
			mbox_tx_publish(c->mb);
			c->sent_pkts++;
			c->sent_bytes += psize;
			c->tx_udata++;
		}
		off += n;
		if (off >= len)
			break;	/* an empty message is one packet too */
	}
	shmcm_publish_tx_stats(c);
	pthread_spin_unlock(&c->tx_mutex);
out_unlock:
	shmcm_unlock(&c->tx_lock);
	return rc;
}

int shmcm_transmit2(struct shmcm_conn *c, uint32_t src, uint32_t dst, const void *a,
		    size_t alen, const void *b, size_t blen)
{
	uint32_t fsz = c->mtu - SHMCM_UDATA_HLEN, psize;
	uint16_t cno, msgid;
	uint8_t *slot;
	int rc = 0;

	if (alen + blen > fsz)
		return -EMSGSIZE;
	if (!shmcm_trylock(&c->tx_lock))
		return -ENOTCONN;
	cno = atomic_load_explicit(&c->tx_cno, memory_order_relaxed);
	pthread_spin_lock(&c->tx_mutex);
	if ((rc = tx_gate(c)) < 0)
		goto out_unlock_mutex;
	/* Only straight into a free slot: anything queued goes first, and a
	 * full ring is the caller's to wait for (it sends whole packets). */
	slot = c->pq_head ? NULL : mbox_tx_reserve(c->mb);
	if (!slot) {
		rc = -EAGAIN;
		goto out_unlock_mutex;
	}
	msgid = c->msgid++;
	psize = SHMCM_UDATA_HLEN + (uint32_t)(alen + blen);
	shmcm_encode_udata_hdr(slot, psize, cno, msgid, src, dst, (uint32_t)(alen + blen));
	memcpy(slot + SHMCM_UDATA_HLEN, a, alen);
	if (blen)
		memcpy(slot + SHMCM_UDATA_HLEN + alen, b, blen);
	mbox_tx_publish(c->mb);
	c->sent_pkts++;
	c->sent_bytes += psize;
	c->tx_udata++;
	shmcm_publish_tx_stats(c);
out_unlock_mutex:
	pthread_spin_unlock(&c->tx_mutex);
	shmcm_unlock(&c->tx_lock);
	return rc;
}

int shmcm_tx_claim(struct shmcm_conn *c, struct iovec *iov, unsigned max)
{
	uint32_t fsz = c->mtu - SHMCM_UDATA_HLEN, room;
	int rc;

	if (max == 0)
		return -EINVAL;
	/* Held until the commit: the generation cannot change under a claim
	 * (a disconnect waits for it, and the caller commits soon). */
	if (!shmcm_trylock(&c->tx_lock))
		return -ENOTCONN;
	pthread_spin_lock(&c->tx_mutex);
	if ((rc = tx_gate(c)) < 0)
		goto out_unlock_mutex;
	if (c->pq_head)
		shmcm_pend_flush(c);
	if (c->flow == SHMCM_FLOW_WAIT) {
		if (!slot_wait(c)) {
			shmcm_unlock(&c->tx_lock);
			return -ENOTCONN;
		}
	} else if (c->pq_head || !mbox_tx_reserve(c->mb)) {
		rc = -EAGAIN;	/* the deferred queue is transmit()'s */
		goto out_unlock_mutex;
	}
	room = mbox_tx_room(c->mb);
	if (room > max)
		room = max;
	for (uint32_t i = 0; i < room; i++) {
		iov[i].iov_base = (uint8_t *)mbox_tx_slot_ahead(c->mb, i) + SHMCM_UDATA_HLEN;
		iov[i].iov_len = fsz;
	}
	c->tx_claimed = room;
	pthread_spin_unlock(&c->tx_mutex);
	return (int)room;	/* tx_lock stays held */

out_unlock_mutex:
	pthread_spin_unlock(&c->tx_mutex);
	shmcm_unlock(&c->tx_lock);
	return rc;
}

int shmcm_tx_commit(struct shmcm_conn *c, uint32_t src, uint32_t dst, size_t len)
{
	uint32_t fsz = c->mtu - SHMCM_UDATA_HLEN;
	uint16_t cno = atomic_load_explicit(&c->tx_cno, memory_order_relaxed);
	int rc = 0;

	pthread_spin_lock(&c->tx_mutex);
	if (!c->tx_claimed) {
		pthread_spin_unlock(&c->tx_mutex);
		return -EINVAL;		/* no claim: tx_lock is not ours */
	}
	if (len > (size_t)c->tx_claimed * fsz) {
		rc = -EMSGSIZE;
		len = 0;
	}
	for (size_t off = 0; off < len; off += fsz) {
		uint32_t n = len - off < fsz ? (uint32_t)(len - off) : fsz;
		uint8_t *slot = mbox_tx_slot_ahead(c->mb, 0);

		shmcm_encode_udata_hdr(slot, SHMCM_UDATA_HLEN + n, cno, c->msgid++, src, dst, n);
		mbox_tx_publish(c->mb);
		c->sent_pkts++;
		c->sent_bytes += SHMCM_UDATA_HLEN + n;
		c->tx_udata++;
	}
	c->tx_claimed = 0;
	if (c->pq_head)
		shmcm_pend_flush(c);	/* CON packets that came meanwhile */
	shmcm_publish_tx_stats(c);
	pthread_spin_unlock(&c->tx_mutex);
	shmcm_unlock(&c->tx_lock);
	return rc;
}
