/* tcp:// framing of the reliable-connection service (xrc.h): the verbs
 * operations carried over one TCP byte stream.  The full description with
 * wire tables is doc/xrc-tcp-framing.md; this header is its source of truth.
 *
 * Every frame is a fixed-size header chosen by its type, then `len` payload
 * bytes.  All integers are big-endian; reserved bytes are sent as zero and a
 * version-1 receiver rejects a frame where they are not (so a later version
 * can give them a meaning once both ends have agreed on it in CONN_REQ/ACC).
 *
 *   client                              server
 *   CONN_REQ (magic, version, limits, private data) ->
 *                      <- CONN_ACC (limits, private data) | CONN_REJ (private data)
 *   SEND [imm | inv_rkey] + payload     ->  next posted receive (RECV); with
 *                                           inv_rkey the target first invalidates
 *                                           that window if it is one of its own
 *   WRITE seq,rkey,raddr [imm] + payload ->  key/access/bounds checked, applied;
 *                                           with imm it consumes a receive
 *                      <- ACK seq (cumulative)    | NAK seq,status
 *   READ_REQ seq,rkey,raddr,rlen        ->
 *                      <- READ_RSP seq + rlen bytes | NAK seq,status
 *
 * seq numbers WRITE and READ_REQ frames of one direction: 1, 2, 3, ...
 * The target handles frames in stream order, so an ACK or NAK for seq N
 * also says every earlier WRITE was applied. */
#ifndef XPRT_XRC_TCP_WIRE_H
#define XPRT_XRC_TCP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "xprt/xrc.h"

#define XTCP_MAGIC	0x58524354u	/* "XRCT" */
#define XTCP_VERSION	1u

enum xtcp_type {
	XTCP_CONN_REQ	= 1,
	XTCP_CONN_ACC	= 2,
	XTCP_CONN_REJ	= 3,
	XTCP_SEND	= 4,
	XTCP_WRITE	= 5,
	XTCP_READ_REQ	= 6,
	XTCP_READ_RSP	= 7,
	XTCP_ACK	= 8,
	XTCP_NAK	= 9,
};

enum {
	XTCP_F_IMM = 1,		/* SEND, WRITE: the imm field is meaningful */
	XTCP_F_INV = 2,		/* SEND only, never with IMM: send-with-invalidate,
				 * the inv_rkey field is meaningful (added within
				 * version 1: a receiver built before it fails the
				 * connection on it, so both ends need it first) */
};

/* Why a target refused a WRITE or READ_REQ (NAK, READ_RSP status). */
enum xtcp_status {
	XTCP_ST_OK	= 0,
	XTCP_ST_BAD_KEY	= 1,	/* no region registered under rkey */
	XTCP_ST_BOUNDS	= 2,	/* [raddr, raddr+len) not inside the region */
	XTCP_ST_ACCESS	= 3,	/* region lacks REMOTE_WRITE / REMOTE_READ */
};

/* Wire layouts, for documentation and size checks; the codec reads and
 * writes bytes at these offsets, never the structs themselves. */
struct xtcp_prefix {		/* first 8 bytes of every frame */
	uint8_t type;
	uint8_t flags;
	uint16_t rsvd;
	uint32_t len;		/* payload bytes after the header */
};

struct xtcp_cm_hdr {		/* CONN_REQ, CONN_ACC, CONN_REJ; payload: private data */
	struct xtcp_prefix p;
	uint32_t magic;
	uint16_t version;
	uint16_t rsvd;
	uint32_t max_send;	/* largest SEND this end accepts */
	uint32_t rq_depth;
	uint32_t sq_depth;	/* most WRITE/READ_REQ this end keeps unanswered */
	uint32_t rsvd2;
};

struct xtcp_send_hdr {		/* payload: the message */
	struct xtcp_prefix p;
	uint32_t imm;		/* IMM: the immediate, else 0 */
	uint32_t inv_rkey;	/* INV: the key the target should invalidate, else 0 */
};

struct xtcp_write_hdr {		/* payload: the bytes to write at raddr */
	struct xtcp_prefix p;
	uint32_t seq;
	uint32_t rkey;
	uint64_t raddr;
	uint32_t imm;
	uint32_t rsvd;
};

struct xtcp_read_req_hdr {	/* no payload */
	struct xtcp_prefix p;
	uint32_t seq;
	uint32_t rkey;
	uint64_t raddr;
	uint32_t rlen;
	uint32_t rsvd;
};

struct xtcp_status_hdr {	/* READ_RSP (payload: the data), ACK, NAK */
	struct xtcp_prefix p;
	uint32_t seq;
	uint32_t status;	/* enum xtcp_status; ACK: 0 */
};

_Static_assert(sizeof(struct xtcp_prefix) == 8, "prefix is 8 bytes on the wire");
_Static_assert(sizeof(struct xtcp_cm_hdr) == 32, "CM header is 32 bytes on the wire");
_Static_assert(sizeof(struct xtcp_send_hdr) == 16, "SEND header is 16 bytes");
_Static_assert(sizeof(struct xtcp_write_hdr) == 32, "WRITE header is 32 bytes");
_Static_assert(sizeof(struct xtcp_read_req_hdr) == 32, "READ_REQ header is 32 bytes");
_Static_assert(sizeof(struct xtcp_status_hdr) == 16, "READ_RSP/ACK/NAK header is 16 bytes");

#define XTCP_PREFIX_LEN	8u
#define XTCP_HDR_MAX	32u
/* Largest WRITE/READ a frame may carry; verbs cap a message at 2 GiB. */
#define XTCP_MAX_RDMA	(1u << 31)
/* Sanity bounds on the limits an end announces in CONN_REQ/CONN_ACC. */
#define XTCP_MAX_SEND	(1u << 30)
#define XTCP_MAX_DEPTH	65536u

/* A decoded header: only the fields of its type are set. */
struct xtcp_frame {
	uint8_t type;
	uint8_t flags;
	uint32_t len;
	uint32_t seq;
	uint32_t rkey;
	uint64_t raddr;
	uint32_t imm;
	uint32_t inv_rkey;
	uint32_t rlen;
	uint32_t status;
	uint16_t version;
	uint32_t max_send, rq_depth, sq_depth;
};

enum xtcp_err {
	XTCP_EMORE	= 0,	/* not an error: the header is not complete yet */
	XTCP_ETYPE	= -1,	/* unknown frame type */
	XTCP_EFLAGS	= -2,	/* flag not defined for this type */
	XTCP_ERSVD	= -3,	/* reserved bytes not zero */
	XTCP_ELEN	= -4,	/* payload length over the limit for this type */
	XTCP_EMAGIC	= -5,
	XTCP_EVERSION	= -6,
	XTCP_ESTATUS	= -7,	/* status out of range, or data with a failure */
	XTCP_ELIMIT	= -8,	/* announced limits out of range */
};

/* The header length of a frame type, 0 if the type is unknown. */
size_t xtcp_hdr_len(uint8_t type);

/* Decodes the header at the start of p[0..n), checking every field against
 * its type and the SEND payload against max_send (what this end agreed to
 * receive).  Returns the header length when a whole, valid header is there,
 * XTCP_EMORE when more bytes are needed, or a negative enum xtcp_err.
 * Payload bytes are not looked at. */
int xtcp_decode(const uint8_t *p, size_t n, uint32_t max_send, struct xtcp_frame *f);

/* Writes f's header (f->type picks the layout) into p[0..XTCP_HDR_MAX);
 * CM frames get magic and version.  Returns the header length. */
size_t xtcp_encode(uint8_t *p, const struct xtcp_frame *f);

const char *xtcp_strerror(int e);
/* The xrc_wc status a NAK/READ_RSP status maps to (-EREMOTEIO for any
 * refusal), 0 for XTCP_ST_OK. */
int xtcp_status_errno(uint32_t st);

/* --- testing hooks (unit tests and the fuzzer; not for applications) --- */

/* Wraps a connected stream socket (a socketpair works: TCP_NODELAY is best
 * effort) as an XRC_UP tcp connection, as if the handshake had announced
 * `peer_max_send` and `peer_sq_depth`.  Takes ownership of fd, also on
 * failure. */
struct xrc *xrc_tcp_wrap_fd(int fd, const struct xrc_opts *o, uint32_t peer_max_send,
			    uint32_t peer_sq_depth, char *err, size_t errlen);
/* The process-wide tcp domain (what xrc_domain() returns for tcp). */
struct xrc_dom *xrc_tcp_domain(void);

#endif
