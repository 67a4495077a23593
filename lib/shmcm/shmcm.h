/* A SHMCM connection end: LINX's connection manager run in one process over
 * the shared-memory mailbox.  Three parts, as in the seed (Fig. 1):
 *
 *  - connection management: a single thread running a job queue (the seed's
 *    workqueue) that feeds the sans-I/O engine (shmcm_cm.h) with down-calls,
 *    CON packets, timer ticks and peer-death notices, and carries out what it
 *    returns;
 *  - rx: a thread (or the caller, in poll mode) that drains the mailbox,
 *    hands CON packets to the job queue and delivers user data, reassembled;
 *  - tx: shmcm_transmit(), called from the user's thread, which fragments a
 *    message to the MTU.
 *
 * The three stay in step through the seed's shmcm locks: deliver (no
 * delivery after the disconnected up-call), transmit (no user data after a
 * CON_RST) and con-pkt (no CON packet queued after destroy).
 */
#ifndef XPRT_SHMCM_H
#define XPRT_SHMCM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shmcm/shmcm_cm.h"

struct shmcm_conn;

struct shmcm_upcalls {
	/* On the connection-management thread. */
	void (*connected)(void *arg);
	void (*disconnected)(void *arg, enum shmcm_reason why);
	/* On the rx thread (or inside shmcm_poll); `data` is valid only for
	 * the call.  May call shmcm_transmit(); must not block for long. */
	void (*deliver)(void *arg, uint32_t src, uint32_t dst,
			const void *data, size_t len);
	void *arg;
	/* Optional, GM-style receive buffers: where a message sent by
	 * reference (see cma_min) of `len` bytes should land.  Return a buffer
	 * of at least len bytes, or NULL for an internal one; deliver is then
	 * called with that buffer, and the bytes were copied exactly once. */
	void *(*rx_buffer)(void *arg, uint32_t src, uint32_t dst, size_t len);
	/* Optional: the peer ended its data (CON_FIN, see shmcm_shutdown());
	 * every message it sent before has been delivered.  On the
	 * connection-management thread. */
	void (*eof)(void *arg);
};

enum shmcm_flow {
	SHMCM_FLOW_WAIT,	/* a full mailbox makes the sender wait */
	SHMCM_FLOW_DEFER,	/* LINX: queue up to defq_max packets, then disconnect */
};

struct shmcm_params {
	const char *name;
	int side;		/* MBOX_SIDE_A or MBOX_SIDE_B */
	enum shmcm_flow flow;
	uint32_t max_msg;	/* largest message reassembled; 0 = 64 MiB */
	bool poll;		/* no rx thread: the caller runs shmcm_poll() */
	uint64_t spin_ns;	/* rx thread busy-polls this long before it sleeps */
	/* Single copy for big messages: a message of at least cma_min bytes
	 * (0: 64 KiB) that is also too big for one packet (it would be
	 * fragmented and reassembled) goes by reference and the peer pulls it
	 * straight from
	 * our memory with process_vm_readv(2) (needs ptrace permission over
	 * us, as for any CMA); shmcm_transmit() returns once it has.  Only in
	 * SHMCM_FLOW_WAIT mode, only to a peer that accepts it; if the
	 * peer's copy fails, that message and later ones go inline. */
	uint32_t cma_min;
	bool no_cma;		/* neither send nor accept by reference */
	/* Do not advertise the half-close (CON_FIN): a peer then treats us
	 * as an end that predates it.  For tests of that fallback. */
	bool no_fin;
};

struct shmcm_conn *shmcm_open(const struct shmcm_params *p,
			      const struct shmcm_upcalls *uc,
			      char *err, size_t errlen);
/* Down-calls.  connect returns at once; disconnect returns once done
 * (when called from an up-call, it only queues the job; from a deliver
 * up-call it also refuses that message and every later one: the peer's
 * shmcm_drained() never counts them delivered). */
int shmcm_connect(struct shmcm_conn *c);
int shmcm_disconnect(struct shmcm_conn *c);
/* Half-close, as shutdown(SHUT_WR) on a socket: no more user data from us
 * in this generation.  The peer gets CON_FIN after every message sent
 * before this call (a send running in another thread meanwhile ends first)
 * and its eof up-call follows their delivery; its data keeps flowing to us
 * until it shuts down too.  Later sends fail with -EPIPE.  0, -ENOTCONN,
 * or -EOPNOTSUPP when the peer does not understand CON_FIN (nothing sent:
 * the old way to end is shmcm_wait_drained() and shmcm_disconnect()).
 * From an up-call it only queues the job and returns 0. */
int shmcm_shutdown(struct shmcm_conn *c);
/* Whether the peer that brought this connection up said it understands
 * CON_FIN (and counts what it delivered); fixed when it came up. */
bool shmcm_peer_has_fin(struct shmcm_conn *c);
/* Sends one message.  0, -ENOTCONN (not connected, or disconnected while
 * waiting for room), -EMSGSIZE, -EPIPE (after shmcm_shutdown()), or
 * -ENOBUFS (deferred queue overflow: the connection is being reset, and
 * every send fails so until it is -- LINX's transmit guard, seed 000 "Tx
 * Data Path"). */
int shmcm_transmit(struct shmcm_conn *c, uint32_t src, uint32_t dst,
		   const void *buf, size_t len);
/* One message of two pieces, a then b, that fits one packet (else
 * -EMSGSIZE), written straight into a free mailbox slot: no staging copy.
 * -EAGAIN when no slot is free right now (nothing sent), -ENOTCONN. */
int shmcm_transmit2(struct shmcm_conn *c, uint32_t src, uint32_t dst, const void *a,
		    size_t alen, const void *b, size_t blen);
/* Zero-copy sending of a byte stream: shmcm_tx_claim() hands out the
 * packet areas of up to `max` free mailbox slots in ring order (waiting
 * for one in SHMCM_FLOW_WAIT mode, as shmcm_transmit(); -EAGAIN when none
 * is free in SHMCM_FLOW_DEFER mode), each for at most
 * shmcm_get_mtu() - SHMCM_UDATA_HLEN bytes; the caller fills a prefix of
 * them in order (readv(2) from a pipe, say) and shmcm_tx_commit() sends the
 * first `len` bytes as one message per slot and ends the claim (len 0:
 * nothing sent).  The bytes are written once, by the caller, into shared
 * memory.  Returns the number of areas, or what shmcm_transmit() returns.
 * One claim at a time, and no other send on the connection until it is
 * committed (-EBUSY); CON packets queue behind a claim, so commit soon. */
struct iovec;
int shmcm_tx_claim(struct shmcm_conn *c, struct iovec *iov, unsigned max);
int shmcm_tx_commit(struct shmcm_conn *c, uint32_t src, uint32_t dst, size_t len);
/* Completion of a message sent with shmcm_send_ref(): 0 when the peer has
 * pulled it, -EREMOTEIO when its pull failed (send it inline; later
 * messages go inline by themselves), -ENOTCONN when the connection went
 * down before.  From then on the buffer is the caller's again. */
typedef void (*shmcm_sent_fn)(void *ctx, int status);
/* Two in flight: the receiver pulls one message at a time, so one more
 * waiting hides the hand-over between pulls; more only adds traffic on the
 * completion line (bench/README.md has the figures). */
#define SHMCM_REF_WINDOW 2

/* Sends a message by reference without waiting for the peer to pull it,
 * so pulls overlap; `buf` must stay unchanged until `sent` runs.  With
 * SHMCM_REF_WINDOW messages in flight it first waits for the oldest.
 * Completions run inside shmcm_send_ref(), shmcm_reap() and shmcm_poll(),
 * in order, on whichever thread reaps.  -EOPNOTSUPP when the peer does not
 * accept references (or failed one before): use shmcm_transmit(). */
int shmcm_send_ref(struct shmcm_conn *c, uint32_t src, uint32_t dst,
		   const void *buf, size_t len, shmcm_sent_fn sent, void *ctx);
/* Runs the completions that are due; returns how many. */
int shmcm_reap(struct shmcm_conn *c);
/* Messages sent by reference and not completed yet. */
unsigned shmcm_refs_in_flight(const struct shmcm_conn *c);

/* Poll mode: handle up to `max` packets; returns how many.  CON packets
 * arrive this way too, so a poll-mode end must keep polling while it waits
 * in shmcm_wait_connected() (with a short timeout, in a loop). */
int shmcm_poll(struct shmcm_conn *c, unsigned max);
/* Waits until connected (0), or disconnected after having been connected
 * (-ENOTCONN), or the timeout (ns, 0 = none) passes (-ETIMEDOUT). */
int shmcm_wait_connected(struct shmcm_conn *c, uint64_t timeout_ns);
/* Waits until the peer has delivered everything we sent in this
 * generation to its user (0), the connection is gone without that
 * (-ENOTCONN), or the timeout passes (-ETIMEDOUT).  A peer whose deliver
 * up-call asked for a disconnect did not take that message.  Still true
 * after the connection went down, until the next one comes up.  Against a
 * peer without CON_FIN (which keeps no count): the peer has read our ring. */
int shmcm_wait_drained(struct shmcm_conn *c, uint64_t timeout_ns);
/* The same, without waiting. */
bool shmcm_drained(struct shmcm_conn *c);
enum shmcm_state shmcm_get_state(const struct shmcm_conn *c);
enum shmcm_reason shmcm_get_reason(const struct shmcm_conn *c);
/* Why the peer last disconnected, as it recorded in the mailbox before
 * sending its CON_RST. */
enum shmcm_reason shmcm_get_peer_reason(const struct shmcm_conn *c);
uint32_t shmcm_get_mtu(const struct shmcm_conn *c);
/* Free slots of the tx ring less `reserve` (0 while CON packets wait in
 * the CM's queue), so that a caller sending only that much never waits in
 * shmcm_transmit() for the peer; *cap: the ring's slots less `reserve`.
 * The ring's tail is a cache line the peer writes with every packet it
 * takes: it is read again only when the last reading leaves fewer than
 * `enough` slots free.  The room may be understated, never overstated. */
uint32_t shmcm_tx_room(struct shmcm_conn *c, uint32_t reserve, uint32_t enough, uint32_t *cap);
/* For a caller that polls (params.poll): sleeps until a packet is in the
 * rx ring or timeout_ns pass (a futex wait on the mailbox).  As
 * mbox_rx_wait(): 0, -ETIMEDOUT, -EINTR. */
int shmcm_rx_wait(struct shmcm_conn *c, uint64_t timeout_ns);
/* For a poll-mode sender whose packets wait for room: the count of our
 * packets the peer has taken so far, and a wait (spin, then futex) until
 * it takes another after `seen`, at most timeout_ns.  0, -ETIMEDOUT,
 * -EINTR. */
uint32_t shmcm_tx_taken(struct shmcm_conn *c);
int shmcm_tx_wait(struct shmcm_conn *c, uint32_t seen, uint64_t timeout_ns);
/* Destroys the end: disconnects if needed, waits for the job queue, stops
 * the threads and releases the side.  NULL ok. */
void shmcm_close(struct shmcm_conn *c);

#endif
