/* The shared-memory mailbox under SHMCM: one POSIX shared-memory object per
 * connection (mode 0600), a header validated on attach, and two
 * single-producer/single-consumer slot rings, ring 0 carrying side a -> b and
 * ring 1 b -> a.  A side is owned by one process at a time; ownership is a
 * single 64-bit word (pid, process start time) so a dead owner -- even one
 * killed with SIGKILL -- is recognised and never blocks a new one, and a
 * recycled pid is not mistaken for the old owner.
 *
 * Wake-ups: a consumer that runs dry arms `cons_sleep` and sleeps on the
 * ring's `head` futex; a producer touches the futex only when it sees the
 * flag armed, so there is no system call per message while both ends are
 * busy.  A producer waiting for free slots does the same on `tail`.
 * Every index is monotonic (u32, wrapping); the slot count is a power of two.
 */
#ifndef XPRT_MBOX_H
#define XPRT_MBOX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MBOX_MAGIC	0x58534d42u	/* "XSMB" */
#define MBOX_VERSION	1u
#define MBOX_PREFIX	"xprt-shmcm-"
#define MBOX_NAME_MAX	100
#define MBOX_SLOTS_MIN	2u
#define MBOX_SLOTS_MAX	65536u
#define MBOX_SEG_MAX	(1ull << 32)	/* 4 GiB per connection at most */
#define MBOX_CL		64

enum { MBOX_SIDE_A = 0, MBOX_SIDE_B = 1 };

#define MBOX_RNDV_RING	64	/* pull outcomes kept; bounds sends in flight */

#define MBOX_CAP_FIN	1u	/* half-close: SHMCM's CON_FIN, and deliv_* kept */

struct mbox_ring_ctl {
	_Alignas(MBOX_CL) _Atomic uint32_t head;	/* written by the producer */
	_Alignas(MBOX_CL) _Atomic uint32_t tail;	/* written by the consumer */
	_Alignas(MBOX_CL) _Atomic uint32_t cons_sleep;	/* consumer asleep on head */
	_Alignas(MBOX_CL) _Atomic uint32_t prod_sleep;	/* producer asleep on tail */
};

/* Per-side status, written only by the side's owner, read by anyone
 * (mkshmcon status).  Grouped by the thread that writes it. */
struct mbox_side {
	_Alignas(MBOX_CL) _Atomic uint64_t owner;	/* pid << 32 | start time; 0 = free */
	_Atomic uint32_t cno;		/* last connection generation used */
	_Atomic uint32_t state;		/* enum shmcm_state, 0 = never attached */
	_Atomic uint32_t peer_cno;
	_Atomic uint32_t alive_count;
	_Atomic uint32_t con_reqs;
	_Atomic uint32_t flow;		/* 0 wait, 1 deferred queue */
	_Atomic uint32_t last_reason;	/* enum shmcm_reason */
	_Atomic uint32_t attaches;
	/* What this side's owner understands (MBOX_CAP_*), valid only while
	 * caps_owner equals owner: a later owner that does not know the
	 * field leaves it as it was.  Fits the line's padding, so the layout
	 * of version 1 is unchanged. */
	_Atomic uint64_t caps_owner;
	_Atomic uint32_t caps;
	_Alignas(MBOX_CL) _Atomic uint64_t sent_bytes;
	_Atomic uint64_t sent_pkts;
	_Atomic uint64_t defq_size;
	_Atomic uint64_t defq_peak;
	_Alignas(MBOX_CL) _Atomic uint64_t recv_bytes;
	_Atomic uint64_t recv_pkts;
	_Atomic uint64_t recv_bad;	/* malformed packets dropped */
	_Atomic uint64_t recv_stale;	/* packets of an old generation dropped */
	/* What this side handed to its user of the peer's generation
	 * deliv_cno: user-data packets consumed and delivered, a failed
	 * delivery and everything after it not counted.  The sender knows
	 * its data arrived when the count equals what it put in the ring;
	 * published by owners with MBOX_CAP_FIN (the line's padding). */
	_Atomic uint32_t deliv_cno;
	_Atomic uint64_t deliv_pkts;
	/* Rendezvous (single copy) -- this side as receiver: it pulls
	 * messages sent by reference with process_vm_readv(2) */
	_Alignas(MBOX_CL) _Atomic uint32_t cma;	/* 1: accepts messages by reference */
	_Atomic uint32_t rndv_done;	/* referenced messages handled (futex word) */
	_Atomic uint32_t rndv_failed;	/* ... of which the copy failed */
	_Atomic uint64_t rndv_msgs;
	_Atomic uint64_t rndv_bytes;
	/* outcome of pull number n (counting rndv_done) at [n % 64]: 0 ok */
	_Atomic uint8_t rndv_status[MBOX_RNDV_RING];
	/* ... and as sender: asleep on the peer's rndv_done */
	_Alignas(MBOX_CL) _Atomic uint32_t rndv_sleep;
};

_Static_assert(offsetof(struct mbox_side, sent_bytes) == MBOX_CL,
	       "the capability words live in the first line's padding");
_Static_assert(offsetof(struct mbox_side, cma) == 3 * MBOX_CL,
	       "the delivery count lives in the receive line's padding");

struct mbox_hdr {
	uint32_t magic;		/* written last: a reader sees a complete header */
	uint16_t version;
	uint16_t hdr_size;
	uint32_t nslots;
	uint32_t slot_size;
	uint32_t mtu;		/* largest packet; also the MRU of the other side */
	uint32_t con_tmo_ms;
	uint32_t defq_max;	/* packets; 0 = a full mailbox disconnects */
	uint32_t creator_pid;
	uint64_t seg_size;
	uint64_t created_ns;	/* CLOCK_REALTIME */
	uint64_t ring_off[2];
	struct mbox_side side[2];
	struct mbox_ring_ctl ring[2];
};

struct mbox_cfg {
	uint32_t nslots;
	uint32_t mtu;
	uint32_t con_tmo_ms;
	uint32_t defq_max;
};

struct mbox {
	struct mbox_hdr *h;
	size_t size;
	/* The geometry, from a private copy of the header validated once:
	 * whatever a process later writes into the shared header, we index
	 * the rings only with these. */
	struct mbox_cfg cfg;
	uint64_t ring_off[2];
	int fd;
	int side;			/* claimed side, or -1 */
	uint64_t owner;			/* our owner word while claimed */
	char name[MBOX_NAME_MAX + 1];
	uint32_t mask, slot_size;
	/* producer view of our tx ring */
	struct mbox_ring_ctl *tx;
	uint8_t *tx_slots;
	uint32_t tx_head, tx_tail_cache;
	/* consumer view of our rx ring */
	struct mbox_ring_ctl *rx;
	uint8_t *rx_slots;
	uint32_t rx_tail;
};

/* All functions returning int give 0 or a negative errno and, on error, one
 * line in `err` naming what was wrong. */

int mbox_check_name(const char *name, char *err, size_t errlen);
int mbox_check_cfg(const struct mbox_cfg *cfg, char *err, size_t errlen);
/* Creates (or re-creates, when no live process owns either side) the
 * mailbox; *replaced tells whether an old one was re-initialised. */
int mbox_create(const char *name, const struct mbox_cfg *cfg, bool *replaced,
		char *err, size_t errlen);
int mbox_open(const char *name, struct mbox **out, char *err, size_t errlen);
/* Claims `side` for this process, flushes what was left in its rx ring. */
int mbox_claim(struct mbox *m, int side, char *err, size_t errlen);
void mbox_close(struct mbox *m);	/* releases the side; NULL ok */
/* Removes the mailbox; refuses while a live process owns a side unless
 * `force`. */
int mbox_unlink(const char *name, bool force, char *err, size_t errlen);
/* Names of every mailbox in /dev/shm, sorted; free with mbox_names_free. */
int mbox_list(char ***names, size_t *n);
void mbox_names_free(char **names, size_t n);

/* Owner of `side`: its pid when a live process owns it, else 0. */
pid_t mbox_side_pid(const struct mbox_hdr *h, int side);
/* A pollable fd that becomes readable when the owner of `side` exits, or
 * -errno (-ESRCH: no live owner). */
int mbox_side_pidfd(const struct mbox_hdr *h, int side, pid_t *pid);
static inline int mbox_peer(int side) { return side ^ 1; }

/* ---- the rings ----
 *
 * Every slot starts with an 8-byte header whose `seq` word says which lap
 * the slot holds: the producer fills slot i (monotonic index) and then
 * stores seq = i + 1.  The consumer polls the seq of its next slot -- the
 * line it has to fetch anyway -- and never reads `head` on the hot path, so
 * the only cache line that moves per message is the message's own.  `head`
 * and `tail` are still published (plain release stores on lines their
 * writer owns) for free-space checks, drain detection and status.
 *
 * No fence per message: the producer publishes with release stores and
 * then reads the sleep flag with a plain load.  A consumer about to sleep
 * arms the flag with a full barrier and then keeps re-checking for
 * MBOX_ARM_WINDOW_NS; a publish whose flag load missed the arming was
 * already in the producer's store buffer and becomes visible well inside
 * that window (TSO; a context switch or VM exit drains the buffer too).
 * The futex sleep has a backstop timeout all the same.
 */
#define MBOX_SLOT_HDR		8u
#define MBOX_ARM_WINDOW_NS	10000u
#define MBOX_BACKSTOP_NS	20000000u

struct mbox_slot_hdr {
	_Atomic uint32_t seq;
	uint32_t pad;
};

static inline struct mbox_slot_hdr *mbox_slot(uint8_t *slots, uint32_t slot_size,
					      uint32_t mask, uint32_t idx)
{
	return (struct mbox_slot_hdr *)(slots + (size_t)(idx & mask) * slot_size);
}

/* ---- producer side (our tx ring); only the claiming process calls ---- */

/* Room for a packet of up to `mtu` bytes, or NULL when the ring is full. */
static inline void *mbox_tx_reserve(struct mbox *m)
{
	if (m->tx_head - m->tx_tail_cache > m->mask) {
		m->tx_tail_cache = atomic_load_explicit(&m->tx->tail, memory_order_acquire);
		if (m->tx_head - m->tx_tail_cache > m->mask)
			return NULL;
	}
	return (uint8_t *)mbox_slot(m->tx_slots, m->slot_size, m->mask, m->tx_head) + MBOX_SLOT_HDR;
}

/* Free slots in our tx ring now (0 when full). */
static inline uint32_t mbox_tx_room(struct mbox *m)
{
	uint32_t used = m->tx_head - m->tx_tail_cache;

	if (used > m->mask) {
		m->tx_tail_cache = atomic_load_explicit(&m->tx->tail, memory_order_acquire);
		used = m->tx_head - m->tx_tail_cache;
	}
	return m->mask + 1 - used;
}

/* The packet area of the i-th slot after the next one to publish (i = 0
 * is mbox_tx_reserve's); the caller checked mbox_tx_room() > i.  Filled
 * slots are published in order, one mbox_tx_publish() each. */
static inline void *mbox_tx_slot_ahead(struct mbox *m, uint32_t i)
{
	return (uint8_t *)mbox_slot(m->tx_slots, m->slot_size, m->mask, m->tx_head + i) +
	       MBOX_SLOT_HDR;
}

void mbox_wake_consumer(struct mbox_ring_ctl *r);

/* Publishes the slot last reserved and filled. */
static inline void mbox_tx_publish(struct mbox *m)
{
	struct mbox_slot_hdr *h = mbox_slot(m->tx_slots, m->slot_size, m->mask, m->tx_head);

	m->tx_head++;
	atomic_store_explicit(&h->seq, m->tx_head, memory_order_release);
	atomic_store_explicit(&m->tx->head, m->tx_head, memory_order_release);
	if (atomic_load_explicit(&m->tx->cons_sleep, memory_order_relaxed))
		mbox_wake_consumer(m->tx);
}

/* True when the peer has consumed every packet we published. */
static inline bool mbox_tx_idle(struct mbox *m)
{
	return atomic_load_explicit(&m->tx->tail, memory_order_acquire) ==
	       atomic_load_explicit(&m->tx->head, memory_order_relaxed);
}

/* The tail seen by the last failed mbox_tx_reserve(): what mbox_tx_wait()
 * waits to see move. */
static inline uint32_t mbox_tx_seen_tail(const struct mbox *m)
{
	return m->tx_tail_cache;
}

/* Waits until the consumer moves the ring's tail past `seen` (a slot came
 * free), at most timeout_ns; 0 (moved, or a wake-up: look again),
 * -ETIMEDOUT or -EINTR (a signal).  Touches only the
 * shared ring, never the producer's private view, so it may be called
 * without the lock that serialises producers. */
int mbox_tx_wait(struct mbox_ring_ctl *r, uint32_t seen, uint64_t timeout_ns);
/* The general form: waits until *word != seen, spinning spin_ns, then
 * arming *sleep_flag and sleeping on the futex.  The writer of *word calls
 * mbox_wake_word() after changing it. */
int mbox_wait_word(_Atomic uint32_t *word, uint32_t seen, _Atomic uint32_t *sleep_flag,
		   uint64_t spin_ns, uint64_t timeout_ns);
void mbox_wake_word(_Atomic uint32_t *word, _Atomic uint32_t *sleep_flag);
/* Wakes a producer of this ring sleeping in mbox_tx_wait (our own tx thread). */
void mbox_tx_kick(struct mbox *m);

/* ---- consumer side (our rx ring) ---- */

/* The i-th unread packet if it has arrived, else NULL. */
static inline const uint8_t *mbox_rx_peek(struct mbox *m, uint32_t i)
{
	struct mbox_slot_hdr *h = mbox_slot(m->rx_slots, m->slot_size, m->mask, m->rx_tail + i);

	if (atomic_load_explicit(&h->seq, memory_order_acquire) != m->rx_tail + i + 1)
		return NULL;
	return (const uint8_t *)h + MBOX_SLOT_HDR;
}

/* Bytes a packet in a slot may use. */
static inline uint32_t mbox_pkt_max(const struct mbox *m)
{
	return m->slot_size - MBOX_SLOT_HDR;
}

void mbox_wake_producer(struct mbox_ring_ctl *r);

/* Returns n slots to the producer. */
static inline void mbox_rx_release(struct mbox *m, uint32_t n)
{
	m->rx_tail += n;
	atomic_store_explicit(&m->rx->tail, m->rx_tail, memory_order_release);
	if (atomic_load_explicit(&m->rx->prod_sleep, memory_order_relaxed))
		mbox_wake_producer(m->rx);
}

/* True when a packet sits unread in our rx ring (any thread may ask).
 * Judged by the slot's own sequence word at the published tail, never by
 * the peer's head, which a broken or hostile peer could set to anything. */
static inline bool mbox_rx_pending(struct mbox *m)
{
	uint32_t t = atomic_load_explicit(&m->rx->tail, memory_order_acquire);
	struct mbox_slot_hdr *h = mbox_slot(m->rx_slots, m->slot_size, m->mask, t);

	return atomic_load_explicit(&h->seq, memory_order_acquire) == t + 1;
}

/* Spins `spin_ns`, then sleeps until a packet arrives or timeout_ns passes.
 * Returns 0 when a packet is there or a wake-up came (look again),
 * -ETIMEDOUT, or -EINTR (a signal). */
int mbox_rx_wait(struct mbox *m, uint64_t spin_ns, uint64_t timeout_ns);
/* Wakes our own consumer sleeping in mbox_rx_wait (e.g. to stop it). */
void mbox_rx_kick(struct mbox *m);

#endif
