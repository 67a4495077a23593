/* Backend side of xrc.h: each backend embeds these base structs first in
 * its own objects and fills an ops table; xrc.c dispatches the public calls
 * and does the checks common to every backend (argument validation, state). */
#ifndef XPRT_XRC_PRI_H
#define XPRT_XRC_PRI_H

#include "xprt/xrc.h"

struct xrc_conn_ops {
	void (*close)(struct xrc *c);
	void (*abort)(struct xrc *c);	/* NULL: close */
	/* kind: SEND_PLAIN, SEND_IMM (arg = imm) or SEND_INV (arg = inv_rkey) */
	int (*post_send)(struct xrc *c, const struct xrc_sge *sg, int nsg, int kind,
			 uint32_t arg, uint64_t wr_id, unsigned flags);
	/* NULL: xrc_send_inline() goes through post_send (xrc.c checked
	 * state and sizes) */
	int (*send_inline)(struct xrc *c, const void *hdr, uint32_t hlen, const void *data,
			   uint32_t dlen, uint64_t wr_id, unsigned flags);
	int (*post_write)(struct xrc *c, const struct xrc_sge *sg, int nsg, uint64_t raddr,
			  uint32_t rkey, bool with_imm, uint32_t imm, uint64_t wr_id,
			  unsigned flags);
	int (*post_read)(struct xrc *c, const struct xrc_sge *sg, int nsg, uint64_t raddr,
			 uint32_t rkey, uint64_t wr_id, unsigned flags);
	int (*post_recv)(struct xrc *c, const struct xrc_sge *sg, uint64_t wr_id);
	/* NULL: xrc_post_recvs() posts one at a time (xrc.c checked the sges) */
	int (*post_recvs)(struct xrc *c, const struct xrc_sge *sg, const uint64_t *wr_id, int n);
	int (*poll)(struct xrc *c, struct xrc_wc *wc, int n);
	int (*fd)(const struct xrc *c);
	int (*wait)(struct xrc *c, uint64_t timeout_ns);
	struct xrc_dom *(*domain)(struct xrc *c);
	int (*flush)(struct xrc *c);	/* NULL: posts are never held back */
	bool (*tx_pending)(const struct xrc *c);	/* NULL: never */
	bool (*peer_gone)(const struct xrc *c);	/* NULL: when DOWN */
	uint64_t (*next_timer)(const struct xrc *c);	/* NULL: none (UP only) */
	int (*arm)(struct xrc *c);	/* NULL: the fd needs no arming */
	/* NULL: polling costs no system call, hints change nothing */
	void (*ready)(struct xrc *c, int how);	/* XRC_HINTS_ON/_OFF, XRC_READY */
	/* mr NULL: invalidate (xrc.c checked domain, bounds, access, state) */
	int (*win_bind)(struct xrc *c, struct xrc_win *w, struct xrc_mr *mr, void *addr,
			size_t len, unsigned access, uint64_t wr_id, unsigned flags);
};

enum { SEND_PLAIN, SEND_IMM, SEND_INV };
enum { XRC_HINTS_OFF, XRC_HINTS_ON, XRC_READY };

struct xrc_listener_ops {
	void (*close)(struct xrc_listener *l);
	int (*fd)(const struct xrc_listener *l);
	uint16_t (*port)(const struct xrc_listener *l);
	struct xrc_req *(*get_request)(struct xrc_listener *l, char *err, size_t errlen);
	struct xrc *(*accept)(struct xrc_req *r, const void *priv, size_t privlen,
			      const struct xrc_opts *o, char *err, size_t errlen);
	void (*reject)(struct xrc_req *r, const void *priv, size_t privlen);
	/* NULL: windows of both kinds */
	int (*windows)(const struct xrc_req *r, unsigned flags, char *err, size_t errlen);
	bool (*waiting)(const struct xrc_listener *l);	/* NULL: never */
	uint64_t (*dropped)(const struct xrc_listener *l);	/* NULL: none */
};

struct xrc_dom_ops {
	struct xrc_mr *(*reg)(struct xrc_dom *d, void *addr, size_t len, unsigned access,
			      char *err, size_t errlen);
	void (*dereg)(struct xrc_mr *mr);
	struct xrc_win *(*win_new)(struct xrc_dom *d, unsigned flags, char *err, size_t errlen);
	void (*win_free)(struct xrc_win *w);
};

struct xrc {
	const struct xrc_conn_ops *ops;
	enum xuri_scheme scheme;
	enum xrc_state state;
	char peer[64];
	uint32_t max_send;
	uint32_t sq_depth;
	uint32_t rq_depth;
	uint32_t max_inline;
	uint32_t max_sge;	/* gather entries per send (0: XRC_MAX_SGE) */
	struct xrc_stats stats;
};

struct xrc_listener {
	const struct xrc_listener_ops *ops;
	enum xuri_scheme scheme;
};

struct xrc_req {
	const struct xrc_listener_ops *ops;	/* the listener's */
	uint8_t priv[XRC_PRIV_MAX];
	size_t privlen;
	char peer[64];
	char local[64];		/* our address it came to, "ADDR:PORT" */
};

struct xrc_dom {
	const struct xrc_dom_ops *ops;
};

/* Backends sit behind struct xrc_mr too: `dom` says who frees it. */
struct xrc_mr_base {
	struct xrc_mr mr;	/* first: what callers see */
	struct xrc_dom *dom;
};

/* Backends embed this first in their window objects. */
struct xrc_win {
	struct xrc_dom *dom;
	unsigned flags;		/* XRC_WIN_TYPE2 */
	uint32_t rkey;		/* the last bind's key (xrc_win_rkey) */
	bool valid;		/* bound, and not invalidated as far as we know */
	struct xrc *conn;	/* type 2, valid: the connection it is bound on */
};

/* Defaults for zero fields of xrc_opts (xrc.c). */
void xrc_opts_fill(struct xrc_opts *dst, const struct xrc_opts *src);

/* Backends. */
extern const struct xrc_ops xrc_tcp_ops;
extern const struct xrc_ops xrc_rdma_ops;

#endif
