/* SHMCM runtime internals shared by shmcm.c (connection management, the
 * job queue, lifecycle), shmcm_tx.c and shmcm_rx.c -- the split of LINX's
 * own shmcm.c / shmcm_tx.c / shmcm_rx.c (seed 000, Fig. 1). */
#ifndef XPRT_SHMCM_PRI_H
#define XPRT_SHMCM_PRI_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "shmcm/shmcm.h"
#include "shmcm/shmcm_lock.h"
#include "shmcm/shmcm_reasm.h"
#include "shmcm/shmcm_wire.h"
#include "xprt/mbox.h"

#define RX_BATCH	64u
#define DEF_MAX_MSG	(64u << 20)
#define DEF_SPIN_NS	20000u
#define DEF_CMA_MIN	(64u << 10)

enum job_op {
	JOB_CONNECT,
	JOB_DISCONNECT,
	JOB_CON_PKT,
	JOB_INTERNAL,
	JOB_PEER_CHECK,
	JOB_DESTROY,
	JOB_SHUTDOWN,
	JOB_RX_LOST,
};

struct job {
	struct job *next;
	enum job_op op;
	uint32_t con_type;
	uint16_t cno;
	bool async;		/* freed by the job queue */
	bool owned;		/* the connection's own (rx_lost_job): neither
				 * freed nor waited for; done clears rx_lost_queued */
	bool done;
	int rc;			/* JOB_SHUTDOWN: what shmcm_shutdown() returns */
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
	bool cm_stop;
	uint64_t tick_ns, next_tick;
	int job_efd;
	int peer_pidfd;
	uint64_t peer_owner;
	_Atomic uint64_t watched_owner;	/* owner word of the process behind peer_pidfd */
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
	/* The peer understands CON_FIN and keeps deliv_*: read when the
	 * connection came up, from the process that brought it up. */
	_Atomic bool peer_fin;

	struct shmcm_lock deliver_lock, tx_lock, con_pkt_lock;

	/* tx */
	/* One producer at a time on our ring: the user's sender and the job
	 * queue's CON packets.  A spinlock: sections are a copy into a slot,
	 * and its release is a plain store, which the data path feels. */
	pthread_spinlock_t tx_mutex;
	_Atomic uint16_t tx_cno;
	uint16_t msgid;			/* under tx_mutex */
	_Atomic bool tx_abort;
	_Atomic bool tx_shut;		/* shmcm_shutdown(): sends fail -EPIPE */
	/* LINX's transmit guard: a full mailbox with the deferred queue at
	 * its limit queued a disconnect job; until that job has run, no user
	 * data may enter the mailbox (under tx_mutex; cleared by enable_tx) */
	bool tx_reset_queued;
	uint32_t tx_claimed;		/* slots handed out by shmcm_tx_claim() */
	struct pend *pq_head, *pq_tail;	/* under tx_mutex */
	uint64_t pq_udata;		/* user-data packets queued */
	uint64_t sent_bytes, sent_pkts;	/* under tx_mutex */
	/* User-data packets of this generation put in the ring, and whether
	 * any were dropped from the deferred queue when it went down (under
	 * tx_mutex; reset by enable_tx): the peer has all of it when its
	 * deliv_pkts for our generation reaches tx_udata. */
	uint64_t tx_udata;
	bool tx_lost;
	uint32_t cma_min;		/* 0: never send by reference */
	bool rndv_off;			/* the peer could not pull one */
	/* messages by reference in flight, under ref_lock (any thread may
	 * send, a deliver up-call included): entry i is done when the peer's
	 * rndv_done reaches its expect */
	pthread_mutex_t ref_lock;
	struct shmcm_ref {
		shmcm_sent_fn fn;
		void *ctx;
		uint32_t expect;
	} refq[SHMCM_REF_WINDOW];
	_Atomic uint32_t ref_head, ref_tail;	/* written under ref_lock */
	uint32_t ref_expect;

	/* rx */
	pthread_t rx_thread;
	bool rx_started;
	_Atomic bool rx_stop;
	_Atomic bool peer_dead;
	_Atomic bool peer_check_queued;
	_Atomic bool rx_fin;		/* the peer's CON_FIN: its data ended */
	/* A deliver up-call asked for a disconnect (the user could not take
	 * the data): until the next generation nothing more is delivered or
	 * counted as delivered, that message included. */
	_Atomic bool rx_hold;
	/* the reset for dropped data: queued without an allocation, which
	 * could fail just when memory is what ran out */
	struct job rx_lost_job;
	_Atomic bool rx_lost_queued;
	uint64_t rx_deliv;		/* published as deliv_pkts */
	_Atomic uint32_t rx_activity;
	uint16_t rx_peer_cno;		/* set before deliver is opened */
	struct shmcm_reasm reasm;	/* under deliver_lock */
	uint8_t *rndv_buf;		/* pulled referenced messages land here */
	size_t rndv_cap;
	uint64_t rndv_msgs, rndv_bytes;
	uint64_t recv_bytes, recv_pkts, recv_bad, recv_stale;
};

/* The connection whose up-call this thread is running, if any. */
extern _Thread_local struct shmcm_conn *shmcm_in_upcall;

/* shmcm.c: the job queue */
void shmcm_job_push(struct shmcm_conn *c, struct job *j);
void shmcm_job_async(struct shmcm_conn *c, enum job_op op);

/* shmcm_tx.c */
void shmcm_publish_tx_stats(struct shmcm_conn *c);
void shmcm_pend_flush(struct shmcm_conn *c);	/* under tx_mutex */
void shmcm_pend_clear(struct shmcm_conn *c);
void shmcm_send_con(struct shmcm_conn *c, uint32_t type, uint16_t cno);

/* shmcm_rx.c */
void shmcm_publish_rx_stats(struct shmcm_conn *c);
void *shmcm_rx_thread(void *arg);

#endif
