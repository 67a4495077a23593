/* The host behind port.h: its links (one per peer host) and listeners.
 * port.c holds the API and the progress loop, port_link.c the transports
 * (xrc lanes for tcp:// and rdma://, a shmcm connection for shm://). */
#ifndef XPRT_PORT_PRI_H
#define XPRT_PORT_PRI_H

#include <stdatomic.h>

#include "port/port.h"
#include "port/port_eng.h"
#include "shmcm/shmcm.h"
#include "xprt/xrc.h"

#define XP_LISTEN_MAX	8
#define XP_HALF_MAX	16	/* lane-0/1 pairs being put together */
#define XP_RQ_DEPTH	64
#define XP_SQ_DEPTH	128
#define XP_LOW_INFLIGHT	4	/* frames posted on the low lane at once */
#define XP_RDMA_FRAG	(64u * 1024)	/* default fragment on rdma lanes */
#define XP_SIG_EVERY	16		/* inline sends: one completion per this many */
#define XP_REPOST_BATCH	8		/* receive buffers posted again at once */
#define XP_SHM_MARGIN	4	/* slots left for the CM thread's CON packets */
#define XP_SHM_ENOUGH	16	/* free slots that spare a look at the peer's tail */
#define XP_SHM_LOW_SLOTS 1	/* mailbox slots low priority may hold... */
#define XP_HIGH_RECENT_NS 10000000ull	/* ...within 10 ms of a high one, */
#define XP_SHM_LOW_FRAG	4096		/* ...in fragments this big */
#define XP_SHM_REF_FRAG	(256u * 1024)	/* low fragments pulled by the peer */
#define XP_ACK_EARLY	8	/* messages taken that send their ACKs at once */
#define XP_SHM_PACK_FRAME 256		/* frames this small (header included)... */
#define XP_SHM_PACK_BYTES 4096		/* ...queued together share a packet this big */

/* shmcm message addresses (src) on a shm link: a whole frame, or a DATA
 * header whose payload (dst bytes) follows as the next message, sent by
 * reference (the peer pulls it from the sender's memory into the receive
 * buffer: one copy), the probe that finds out whether it can, and a pack
 * of small frames (port_wire.h: the mailbox's cost per packet is paid
 * once for all of them). */
enum { XP_SHM_FRAME = 0, XP_SHM_REF_HDR = 1, XP_SHM_REF_DATA = 2, XP_SHM_REF_PROBE = 3,
       XP_SHM_FRAMES = 4 };

struct xp_link;
struct xp_shm_ref {			/* a payload the peer has yet to pull */
	struct xp_link *k;
	struct pe_send *ref;		/* NULL: the probe */
	bool busy;
};

/* CM private data of a lane's connect request and of its accept (network
 * order), so a peer of another protocol or version fails with a clear
 * message instead of garbage frames. */
#define XP_PRIV_LEN	20
enum { XP_PRIV_OK = 0, XP_PRIV_BAD_VERSION = 1, XP_PRIV_BAD_LANE = 2, XP_PRIV_BAD_FRAG = 3 };

struct xp_lane {
	struct xrc *c;
	uint32_t sq;			/* send queue depth: a power of two */
	uint32_t lim;			/* sends in flight at most (lane_limit) */
	uint32_t posted;		/* sends in flight */
	uint32_t head, tail;		/* ring of in-flight sends, [tail, head) */
	struct xp_tx {
		uint8_t hdr[PW_HDR_LEN];
		struct pe_send *ref;
	} *ring;
	uint8_t *txpool;		/* rdma: registered copies of the frames */
	struct xrc_mr *txmr;
	uint8_t *rxpool;		/* XP_RQ_DEPTH receive buffers */
	struct xrc_mr *rxmr;
	uint32_t bufsz;			/* bytes per receive/copy buffer */
	bool held;			/* the transport holds posts back until a flush (tcp) */
	bool want_out;			/* bytes wait for room: EPOLLOUT in the host's epoll */
	bool in_ep;			/* its fd is in the host's epoll (xpl_ep) */
	bool flush_more;		/* the last xrc_flush() left bytes for later */
	uint32_t nrepost;		/* receive buffers consumed, not posted again */
	uint16_t repost[XP_RQ_DEPTH];
};

struct xp_listener;

struct xp_link {
	struct xp_host *h;
	uint32_t node;
	bool shm, dead, hello;		/* hello: the peer's HELLO was seen (shm) */
	char name[160];			/* "tcp://127.0.0.1:5000" */
	char why[200];			/* why it died */
	unsigned nlanes;
	struct xp_lane lane[2];
	/* shm */
	struct shmcm_conn *sc;
	struct xp_listener *srv;	/* the mailbox we serve, or NULL (client) */
	uint8_t *stage;			/* header + fragment, for shmcm_transmit */
	uint64_t high_ns;		/* last high-priority frame seen (shm) */
	uint32_t shm_cap;		/* mailbox slots ours to fill (shm_room) */
	_Atomic int lost;		/* shm client: the connection went down
					 * (shmcm's CM thread says so) */
	/* shm by reference: sending */
	bool ref_ok;			/* the probe came through: the peer pulls */
	struct xp_shm_ref refs[SHMCM_REF_WINDOW];	/* in flight (completions
					 * come while the link's memory lives:
					 * a client's shmcm end closes first,
					 * a served link lives with the host) */
	/* ...receiving: the header of a payload on its way */
	bool rx_ref;			/* a header waits for its payload */
	bool rx_begun;			/* the engine took it (pe_input_hdr) */
	uint8_t rx_hdr[PW_HDR_LEN];
	uint32_t rx_plen;
	void *rx_dest;			/* where the payload goes, or NULL */
	uint32_t frag;
};

struct xp_half {
	uint64_t nonce;
	struct xrc *c[2];
	uint64_t t0;
	char peer[64];
};

struct xp_listener {
	struct xp_host *h;
	enum xuri_scheme scheme;
	struct xrc_listener *xl;
	struct xp_half half[XP_HALF_MAX];
	/* shm */
	char mbox[sizeof(((struct xuri *)0)->name)];
	bool created;
	struct shmcm_conn *sc;
	_Atomic int connected, disconnected;	/* from shmcm's CM thread */
	struct xp_link *cur;
	uint32_t mtu;
};

struct xp_port {
	struct xp_host *h;
	unsigned id;
	bool open;
	void *user;
};

/* A registered range (xp_register_memory, xp_dma_malloc) and its memory
 * regions on the RDMA domains that sent from it so far. */
#define XP_MEM_DOMS	4
#define XP_HUGE_PAGE	(2u << 20)
#define XP_DMA_HUGE	(1u << 20)	/* xp_dma_malloc: 2 MiB pages from here on */

struct xp_mem {
	uint8_t *addr;
	size_t len;
	unsigned port;
	bool dma;			/* from xp_dma_malloc: unmapped at the end */
	size_t maplen;			/* dma: the mapping's length (>= len) */
	unsigned ndom;
	struct {
		struct xrc_dom *d;
		struct xrc_mr *mr;	/* NULL: registration failed there */
	} dom[XP_MEM_DOMS];
};

#define XP_ACCEPT_EVERY_NS 1000000ull	/* listeners are looked at every 1 ms */
#define XP_CLOCK_IDLE_ROUNDS 16		/* idle progresses on one clock reading */
#define XP_EP_AWAKE_ROUNDS 256		/* progresses without a sleep: links leave the epoll */

struct xp_host {
	struct xp_host_opts o;
	uint64_t accept_ns;		/* last look at the listeners */
	uint64_t now;			/* the clock at the last progress */
	unsigned idle_rounds;		/* progresses since the clock was read */
	bool share_clock;		/* in a blocking receive's spin (port.c) */
	unsigned nextra;		/* fds added with xp_host_add_fd() */
	unsigned awake_rounds;		/* progresses since the last sleep */
	bool ep_links;			/* every tcp lane went into the epoll (xpl_ep) */
	bool ep_always;			/* xp_host_fd() was asked for: they stay in it */
	bool frag_default;		/* o.frag was left 0: per-transport sizes */
	struct pe_eng *e;
	int epfd;
	uint64_t nonce;
	struct xp_listener *ls[XP_LISTEN_MAX];
	unsigned nls;
	struct xp_link **links;		/* [node - 1]; NULL once freed */
	uint32_t nlinks, cap;
	struct xp_port ports[XP_MAX_PORTS];
	struct xp_alarm *alarms;	/* set alarms of every port, by due time */
	xp_foreign_fn foreign;		/* requests that are not a port host's */
	void *foreign_arg;
	struct xp_mem *mem;		/* registered ranges */
	unsigned nmem, memcap;
	uint64_t direct_bytes[XP_MAX_PORTS];	/* per port: xp_port_stats direct_bytes */
	uint64_t work_ns;		/* the last progress that moved something */
	bool defer_tx;			/* inside xp_unknown's send callbacks: */
	bool deferred;			/* ...sends queued, out when it returns */
};

/* The memory region of a range that `port` registered holding
 * [addr, addr + len), on domain d (registered there now if need be);
 * NULL: copy instead. */
struct xrc_mr *xp_mem_mr(struct xp_host *h, unsigned port, struct xrc_dom *d, const void *addr,
			 size_t len);

/* port_link.c */
int xpl_listen_xrc(struct xp_host *h, const struct xuri *u, char *err, size_t errlen);
int xpl_listen_shm(struct xp_host *h, const struct xuri *u, char *err, size_t errlen);
void xpl_listener_free(struct xp_listener *l);
int xpl_connect_xrc(struct xp_host *h, const struct xuri *u, const char *name,
		    char *err, size_t errlen);
int xpl_connect_shm(struct xp_host *h, const struct xuri *u, const char *name,
		    char *err, size_t errlen);
int xpl_accept(struct xp_host *h, struct xp_listener *l, uint64_t now);
/* Receive side of a link: frames in.  Returns work done. */
int xpl_rx(struct xp_link *k, uint64_t now);
/* Send side: frames out while the transport has room. */
int xpl_tx(struct xp_link *k);
/* Only the lane that carries `prio` (xp_send: the frame just queued). */
int xpl_tx_prio(struct xp_link *k, unsigned prio);
/* xp_send's fast path (pe_send_now): whether a message of len bytes and
 * priority prio can go out at once -- an rdma/tcp link whose lane has room,
 * nothing held back, and inline space for it; an shm link with a free
 * slot for a small frame, within low priority's share while high is in
 * use -- and the sending of the frame the engine then gives (xpl_send_now
 * posts it inline, or copies it into the slot: only for a frame
 * xpl_can_send_now allowed). */
bool xpl_can_send_now(struct xp_link *k, unsigned prio, size_t len);
void xpl_send_now(struct xp_link *k, unsigned prio, const struct pe_frame *f);
/* Closes the transport and tells the engine (NODE_UNREACHABLE). */
void xpl_fail(struct xp_link *k, const char *why);
void xpl_free(struct xp_link *k);
/* Registers a new link under its node id. */
int xpl_add(struct xp_host *h, struct xp_link *k, unsigned nlanes, uint32_t frag);
/* The shm connection the host could sleep on, if it is the only one. */
struct shmcm_conn *xpl_shm_only(struct xp_host *h, int *nshm);
/* Live links over shm (with a peer), and over fds (tcp, rdma). */
unsigned xpl_shm_links(const struct xp_host *h);
unsigned xpl_fd_links(const struct xp_host *h);
/* Arms every lane's fd before the host sleeps; true when one already has
 * completions waiting (then do not sleep). */
bool xpl_arm(struct xp_host *h);
/* The tcp lanes' fds into the host's epoll (before a sleep) or out of it. */
void xpl_ep(struct xp_host *h, bool in);

#endif
