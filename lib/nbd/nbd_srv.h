/* NBD server protocol core, sans I/O: the fixed newstyle handshake and the
 * transmission phase's request headers and simple replies, as the NBD
 * protocol document (nbd's doc/proto.md) defines them and as nbd-server,
 * nbdkit, qemu, libnbd and the kernel's nbd client speak them.
 *
 * The caller owns the socket.  It pushes the bytes it read into
 * nbd_srv_input(), which consumes what it can and says what happened; the
 * handshake's replies collect in the codec's output buffer (nbd_srv_out()),
 * which the caller sends and then releases with nbd_srv_sent().  In the
 * transmission phase each request header comes back as a struct nbd_req,
 * checked against the export (range, alignment, flags, read-only); the
 * caller does the IO and sends nbd_reply_hdr() (plus the data of a READ).
 *
 * What we negotiate: fixed newstyle with NO_ZEROES; options EXPORT_NAME,
 * ABORT, LIST, INFO, GO; everything else (STARTTLS, STRUCTURED_REPLY, meta
 * contexts, extended headers) is answered NBD_REP_ERR_UNSUP, so replies are
 * always simple ones.  Byte order: network (big-endian) throughout. */
#ifndef XPRT_NBD_SRV_H
#define XPRT_NBD_SRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NBD_DEFAULT_PORT	10809
#define NBD_NAME_MAX		4096u	/* export names and descriptions (proto.md) */
#define NBD_REQ_LEN		28u	/* request header */
#define NBD_REPLY_LEN		16u	/* simple reply header */

#define NBD_MAGIC		0x4e42444d41474943ull	/* "NBDMAGIC" */
#define NBD_IHAVEOPT		0x49484156454f5054ull	/* "IHAVEOPT" */
#define NBD_REP_MAGIC		0x0003e889045565a9ull
#define NBD_REQUEST_MAGIC	0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC	0x67446698u

/* handshake flags (server) and client flags */
#define NBD_FLAG_FIXED_NEWSTYLE	(1u << 0)
#define NBD_FLAG_NO_ZEROES	(1u << 1)
#define NBD_FLAG_C_FIXED_NEWSTYLE NBD_FLAG_FIXED_NEWSTYLE
#define NBD_FLAG_C_NO_ZEROES	NBD_FLAG_NO_ZEROES

/* transmission flags */
#define NBD_FLAG_HAS_FLAGS	(1u << 0)
#define NBD_FLAG_READ_ONLY	(1u << 1)
#define NBD_FLAG_SEND_FLUSH	(1u << 2)
#define NBD_FLAG_SEND_FUA	(1u << 3)
#define NBD_FLAG_ROTATIONAL	(1u << 4)
#define NBD_FLAG_SEND_TRIM	(1u << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES (1u << 6)
#define NBD_FLAG_SEND_DF	(1u << 7)
#define NBD_FLAG_CAN_MULTI_CONN	(1u << 8)
#define NBD_FLAG_SEND_CACHE	(1u << 10)

enum nbd_opt {
	NBD_OPT_EXPORT_NAME = 1,
	NBD_OPT_ABORT = 2,
	NBD_OPT_LIST = 3,
	NBD_OPT_STARTTLS = 5,
	NBD_OPT_INFO = 6,
	NBD_OPT_GO = 7,
	NBD_OPT_STRUCTURED_REPLY = 8,
};

#define NBD_REP_ACK		1u
#define NBD_REP_SERVER		2u
#define NBD_REP_INFO		3u
#define NBD_REP_ERR(n)		((1u << 31) | (n))
#define NBD_REP_ERR_UNSUP	NBD_REP_ERR(1)
#define NBD_REP_ERR_POLICY	NBD_REP_ERR(2)
#define NBD_REP_ERR_INVALID	NBD_REP_ERR(3)
#define NBD_REP_ERR_UNKNOWN	NBD_REP_ERR(6)
#define NBD_REP_ERR_TOO_BIG	NBD_REP_ERR(9)

#define NBD_INFO_EXPORT		0u
#define NBD_INFO_NAME		1u
#define NBD_INFO_DESCRIPTION	2u
#define NBD_INFO_BLOCK_SIZE	3u

enum nbd_cmd {
	NBD_CMD_READ = 0,
	NBD_CMD_WRITE = 1,
	NBD_CMD_DISC = 2,
	NBD_CMD_FLUSH = 3,
	NBD_CMD_TRIM = 4,
	NBD_CMD_CACHE = 5,
	NBD_CMD_WRITE_ZEROES = 6,
	NBD_CMD_BLOCK_STATUS = 7,
};

#define NBD_CMD_FLAG_FUA	(1u << 0)
#define NBD_CMD_FLAG_NO_HOLE	(1u << 1)
#define NBD_CMD_FLAG_DF		(1u << 2)
#define NBD_CMD_FLAG_REQ_ONE	(1u << 3)
#define NBD_CMD_FLAG_FAST_ZERO	(1u << 4)

/* NBD error values (fixed by the protocol, not the host's errno) */
#define NBD_EPERM	1u
#define NBD_EIO		5u
#define NBD_ENOMEM	12u
#define NBD_EINVAL	22u
#define NBD_ENOSPC	28u
#define NBD_EOVERFLOW	75u
#define NBD_ENOTSUP	95u
#define NBD_ESHUTDOWN	108u

/* An option's data the codec takes whole (the longest valid one: INFO or
 * GO with a 4096-byte name and some info requests); longer ones are
 * skipped and refused with NBD_REP_ERR_TOO_BIG.  The caller's input
 * buffer holds at least NBD_SRV_INBUF bytes so that a whole option fits. */
#define NBD_OPT_DATA_MAX	(NBD_NAME_MAX + 1024u)
#define NBD_SRV_INBUF		(16u + NBD_OPT_DATA_MAX)
/* The handshake's output buffer; an option is taken only when its longest
 * reply fits in what is left, so a client that never reads cannot make us
 * buffer without bound. */
#define NBD_SRV_OUTBUF		(4u * NBD_NAME_MAX)

struct nbd_export {
	/* at most NBD_NAME_MAX bytes each */
	const char *name;		/* its name; "" (the default export) is served too */
	const char *description;	/* NULL: none */
	uint64_t size;			/* bytes */
	uint16_t tflags;		/* NBD_FLAG_*; HAS_FLAGS is added */
	uint32_t min_block, pref_block, max_block;	/* powers of two; min <= pref <= max */
};

/* One request header, checked. */
struct nbd_req {
	uint16_t flags, type;
	uint64_t cookie, off;
	uint32_t len;
	/* bytes of data that follow the header on the wire (those of a
	 * WRITE): the caller takes them from the input before it calls
	 * nbd_srv_input() again -- into its buffer, or dropped when err */
	uint32_t payload;
	/* 0: do it; else the NBD error to reply at once (EINVAL for a bad
	 * range, alignment, length or flag, ENOSPC for a write past the end,
	 * EPERM for a write on a read-only export, EINVAL for a command we
	 * do not offer) */
	uint32_t err;
};

enum nbd_ev {
	NBD_EV_MORE,	/* consumed what it could; read more */
	NBD_EV_BLOCKED,	/* send nbd_srv_out() first: no room for the next reply */
	NBD_EV_OPT,	/* an option was handled; its reply is in the output */
	NBD_EV_READY,	/* the handshake ended: transmission from the next byte */
	NBD_EV_REQ,	/* *req holds a request */
	NBD_EV_DISC,	/* NBD_CMD_DISC: finish what is in flight, then close */
	NBD_EV_CLOSE,	/* the client ended the handshake (ABORT): send the output, close */
	NBD_EV_ERROR,	/* a protocol violation: close at once; nbd_srv_why() says which */
};

enum nbd_phase { NBD_PH_CLIENT_FLAGS, NBD_PH_OPTIONS, NBD_PH_TRANSMISSION, NBD_PH_DONE };

struct nbd_srv {
	const struct nbd_export *exp;
	enum nbd_phase phase;
	bool fixed, no_zeroes;
	uint32_t skip;			/* option data still to drop */
	uint32_t skip_opt;		/* ... of this option */
	bool too_big;			/* then it is refused with ERR_TOO_BIG */
	size_t outlen;
	char why[160];
	uint8_t out[NBD_SRV_OUTBUF];
};

/* Starts a connection: the greeting (NBDMAGIC, IHAVEOPT, handshake flags)
 * is in the output.  transmission: start in the transmission phase with
 * nothing sent (the kernel's nbd client, handed a socket whose handshake
 * was done by whoever configured it). */
void nbd_srv_init(struct nbd_srv *s, const struct nbd_export *exp, bool transmission);
/* Consumes bytes of p[0..n): returns how many and sets *ev (and *req for
 * NBD_EV_REQ).  Call again with the rest while it consumes or reports
 * anything but MORE and BLOCKED.  After READY, REQ, DISC, CLOSE or ERROR
 * it returns at once (having consumed the bytes of that event only). */
size_t nbd_srv_input(struct nbd_srv *s, const uint8_t *p, size_t n, enum nbd_ev *ev,
		     struct nbd_req *req);
static inline const uint8_t *nbd_srv_out(const struct nbd_srv *s, size_t *len)
{
	*len = s->outlen;
	return s->out;
}
/* n bytes of the output went out. */
void nbd_srv_sent(struct nbd_srv *s, size_t n);
static inline const char *nbd_srv_why(const struct nbd_srv *s)
{
	return s->why;
}

/* A simple reply's header. */
void nbd_reply_hdr(uint8_t out[NBD_REPLY_LEN], uint32_t err, uint64_t cookie);
/* A request header (the client's side: tests, the fuzz target). */
void nbd_req_encode(uint8_t out[NBD_REQ_LEN], uint16_t flags, uint16_t type, uint64_t cookie,
		    uint64_t off, uint32_t len);
/* -errno (or errno) -> the NBD error the client sees: EPERM, EIO, ENOMEM,
 * EINVAL, ENOSPC, EOVERFLOW, ENOTSUP, ESHUTDOWN as themselves (EROFS and
 * EACCES as EPERM, EFBIG as ENOSPC, EOPNOTSUPP as ENOTSUP), the rest EIO. */
uint32_t nbd_errno(int err);
const char *nbd_cmd_name(unsigned type);

#endif
