/* ibcache wire formats: Gfarm's gfcc rpc2 request/response (seed 004
 * section 3.2.1; gfarm's gfsk_ccib.c) and xprt's
 * extensions for the UDP flavour.
 *
 * Byte order.  Gfarm sends its structs as they lie in kernel memory: host
 * order, natural alignment.  We define that layout explicitly as
 * LITTLE-ENDIAN with the x86-64 offsets, so a little-endian gfarm host and
 * xprt agree byte for byte and nothing here depends on the host:
 *
 * rpc2 request, to the responder's public QP/socket (GFCC_REQ_HDR + 16 *
 * npblk bytes, optionally followed by the 16-byte xprt extension):
 *
 *   0  ver[8]   "gfcc1" then 3 NULs.  Decoders compare the first 5 bytes
 *               only, as gfarm does (it memcpy()s strlen("gfcc1") bytes
 *               into a reused buffer, so bytes 5..7 are garbage from it)
 *   8  id       u64   request id, echoed in the response (gfarm: the
 *                     address of its rpc struct)
 *  16  ino      u64   \
 *  24  gen      u64    | struct gfcc_obj: the file and its generation --
 *  32  off      i64    | a stale generation is an error, never stale data;
 *  40  len      i64   /  off/len the extent being read (>= 0, no overflow)
 *  48  qkey     u32   the key the reply must carry: random per request,
 *                     1..0x7fffffff (IB: a WR qkey with the high bit set
 *                     means "use the QP's own", so it is refused)
 *  52  psn      u32   gfarm: RC packet serial number, never set for UD:
 *                     encoder writes 0, decoder ignores it
 *  56  cmd      u32   2 = GFCC_CMD_READ_REQ (gfarm's GFCC_RPC_READ_REQ)
 *  60  psize    u32   page size in BYTES (gfarm's comment says "KB / page",
 *                     its code sends and checks PAGE_SIZE in bytes)
 *  64  npage    i32   pages requested = sum of the block counts
 *  68  npblk    i32   page blocks that follow
 *  72  pblk[npblk]    { u64 index (file page number), u64 count }, strictly
 *                     ascending and non-overlapping (gfarm merges runs of
 *                     consecutive pages the same way)
 *  72+16*npblk  optional xprt extension, 16 bytes:
 *       0 "gfcx"  1 xver = 1   5 flags = 0   6 seglen u16   8 window u32
 *      12 reserved u32 = 0
 *    seglen: reply segment payload the requester's buffers expect (gfarm
 *            has no field for it and assumes both ends share the MTU; a
 *            gfarm responder ignores trailing bytes).  Absent: the
 *            responder uses gfarm's rule, MTU - 40.
 *    window: UDP only: initial credit, datagrams the responder may send
 *            before it hears a GFCC_X_CREDIT/RESEND; 0 = no flow control
 *            (send the whole reply, as gfarm does over UD).
 *
 * rpc2 response, the first GFCC_RES_LEN bytes of reply segment 0:
 *
 *   0  ver[8]   "gfcc1" then 3 bytes (first 5 checked; gfarm's responder
 *               never fills this field).  xprt's size: byte 5 is
 *               GFCC_RES_F_SIZE, bytes 6..7 the size's bits 32..47 (u16)
 *               and the pad (28) its bits 0..31 -- see below
 *   8  id       u64   the request's id
 *  16  err      i32   0 or a positive errno: ESTALE (generation differs:
 *                     go to the origin), ENOENT (not cached / outside the
 *                     export), ENXIO (page size not served, gfarm's code),
 *                     EINVAL/E2BIG (request beyond limits), ENOMEM
 *  20  npage    i32   pages sent: a PREFIX of the requested pages (the
 *                     responder stops at the first page it lacks)
 *  24  nseg     i32   segments in the reply (1 when npage is 0)
 *  28  pad      4     x86-64 tail padding (gfarm's sizeof is 32, not the
 *                     28 its fields add up to): written 0, ignored --
 *                     unless byte 5 says it holds the size's low half
 *
 * The file's size (xprt): an xprt responder answering a request that
 * carried the xprt extension, with err 0, tells the size of its copy in
 * bytes: byte 5 = GFCC_RES_F_SIZE (1), bytes 6..7 and 28..31 the size
 * (at most GFCC_RES_SIZE_MAX, 256 TiB; a bigger copy's size is not told).
 * The requester cuts the output at the end of the file with it, and a
 * copy of another size than the file's is not used (its last page would
 * pass for whole).  Where byte 5 is anything else -- 0 from a responder
 * that predates it, gfarm's unfilled bytes -- nothing is told and bytes
 * 6..7 and the pad are ignored as before, so the response stays 32 bytes
 * and the reply's layout is the same for everyone.  Requests never ask
 * for it: a gfarm requester sends no extension and gets the pad 0.
 *
 * UDP data-segment header (xprt, UDP flavour only): every reply datagram
 * is this header, then the segment's payload.  Over UD the segment index
 * is the receive order on the per-request QP and the qkey is checked by
 * the HCA; over UDP both travel in the datagram:
 *
 *   0  id       u64
 *   8  qkey     u32   the request's qkey: a datagram from an old request
 *                     or a stranger is dropped (software qkey check)
 *  12  seg      u16   segment index, < nseg
 *  14  npage    u16   the reply's page count (= the response's npage), so
 *                     a segment arriving before segment 0 can be checked
 *                     against the reply's layout and placed at once
 *
 * UDP control message (xprt), requester -> responder's public socket:
 *
 *   0  ver[8]   "gfcx1" then 3 NULs (all 8 checked; "gfcx" with another
 *               digit is a version we do not speak: -EPROTONOSUPPORT)
 *   8  id       u64   the request
 *  16  qkey     u32   the request's qkey: only its requester knows it
 *  20  allow    u32   cumulative credit: the responder may have sent at
 *                     most `allow` datagrams (first sends and resends) for
 *                     this request.  Monotonic, so a lost or reordered
 *                     control message costs nothing: the larger one wins.
 *  24  type     u8    GFCC_X_CREDIT (credit only), GFCC_X_RESEND (credit
 *                     plus a bitmap of segments to send again),
 *                     GFCC_X_FIN (requester done or giving up: free it)
 *  25  flags    u8    0
 *  26  base     u16   RESEND: the first segment the bitmap covers, else 0
 *  28  nbits    u16   RESEND: 1..GFCC_X_BITS_MAX bits, else 0
 *  30  rsvd     u16   0
 *  32  bitmap[ceil(nbits/8)]  bit i (byte i/8, bit i%8, LSB first) set:
 *               resend segment base + i.  At least one bit set; bits past
 *               nbits in the last byte are 0.  A message fits the smallest
 *               MTU (256); a larger hole takes several messages.
 *
 * Decoders never trust a length or a count: they return 0 or
 *   -EMSGSIZE        length not the one the fields call for (short,
 *                    long, truncated block list or bitmap)
 *   -EPROTO          not this protocol: magic, cmd, type, reserved bytes
 *   -EPROTONOSUPPORT the xprt extension in a version we do not speak
 *   -EINVAL          a field out of range: page size not allowed, zero
 *                    counts, blocks unsorted/overlapping/overflowing or
 *                    not adding up to npage, bad qkey, err/npage/nseg
 *                    inconsistent, bitmap empty or with stray bits
 *   -E2BIG           a count beyond the limits below
 *   -ERANGE          a segment index beyond GFCC_SEG_MAX
 * Encoders apply the same checks (-EINVAL etc.) and return the length.
 */
#ifndef XPRT_IBCACHE_GFCC_WIRE_H
#define XPRT_IBCACHE_GFCC_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GFCC_RPC2_VER		"gfcc1"	/* gfsk_ccib.c GFCC_RPC2_VER */
#define GFCC_X_MAGIC		"gfcx"
#define GFCC_X_VERSION		1u
#define GFCC_CMD_READ_REQ	2u	/* gfarm: LISTEN 1, READ_REQ 2, READ_RES 3 */

#define GFCC_RES_F_SIZE		1u	/* response byte 5: the size is told */
#define GFCC_RES_SIZE_MAX	((1ull << 48) - 1)

/* Sizes on the wire. */
#define GFCC_REQ_HDR		72u
#define GFCC_PBLK_LEN		16u
#define GFCC_REQ_EXT_LEN	16u
#define GFCC_RES_LEN		32u
#define GFCC_DSEG_LEN		16u
#define GFCC_X_HDR		32u
#define GFCC_GRH_LEN		40u	/* in front of every UD receive buffer */

/* Limits, enforced by the decoders. */
#define GFCC_PSIZE_MIN		512u	/* page sizes: powers of two in here */
#define GFCC_PSIZE_MAX		65536u
#define GFCC_MAX_BYTES		(1u << 20)	/* gfarm: GFCC_PAGES_MAX 256 x 4 KiB */
#define GFCC_PAGES_MAX		256u	/* and never more pages than this */
/* gfarm's GFCC_PBLK_MAX: (2048 - 40 - sizeof(req) 88) / 16 + 1, so a full
 * request fits one 2048-byte UD receive after the GRH. */
#define GFCC_PBLK_MAX		121u
#define GFCC_REQ_MAX		(GFCC_REQ_HDR + GFCC_PBLK_MAX * GFCC_PBLK_LEN + GFCC_REQ_EXT_LEN)
#define GFCC_ERR_MAX		4095
#define GFCC_MTU_MIN		256u	/* IB's smallest MTU */
#define GFCC_MTU_MAX		65507u	/* the largest IPv4 UDP payload */
#define GFCC_SEGLEN_MIN		(GFCC_MTU_MIN - GFCC_GRH_LEN)	/* gfarm's iosize at MTU 256 */
#define GFCC_SEGLEN_MAX		GFCC_MTU_MAX
/* The most segments a reply can have: the largest reply in the smallest
 * segments. */
#define GFCC_SEG_MAX \
	((GFCC_MAX_BYTES + GFCC_RES_LEN + GFCC_SEGLEN_MIN - 1) / GFCC_SEGLEN_MIN)
#define GFCC_X_BITMAP_MAX	(GFCC_MTU_MIN - GFCC_X_HDR)	/* 224 bytes */
#define GFCC_X_BITS_MAX		(GFCC_X_BITMAP_MAX * 8u)
#define GFCC_X_MAX		(GFCC_X_HDR + GFCC_X_BITMAP_MAX)

/* The encoded layouts, only for the size checks: the codec never casts
 * wire bytes to a struct. */
struct gfcc_req_wire {
	uint8_t ver[8], id[8], ino[8], gen[8], off[8], len[8];
	uint8_t qkey[4], psn[4], cmd[4], psize[4], npage[4], npblk[4];
};
struct gfcc_res_wire {
	uint8_t ver[8], id[8], err[4], npage[4], nseg[4], pad[4];
};
struct gfcc_dseg_wire { uint8_t id[8], qkey[4], seg[2], npage[2]; };
struct gfcc_x_wire {
	uint8_t ver[8], id[8], qkey[4], allow[4], type, flags, base[2], nbits[2], rsvd[2];
};
_Static_assert(sizeof(struct gfcc_req_wire) == GFCC_REQ_HDR, "rpc2 request header is 72 bytes");
_Static_assert(sizeof(struct gfcc_res_wire) == GFCC_RES_LEN, "rpc2 response is 32 bytes");
_Static_assert(sizeof(struct gfcc_dseg_wire) == GFCC_DSEG_LEN, "data segment header is 16 bytes");
_Static_assert(sizeof(struct gfcc_x_wire) == GFCC_X_HDR, "control header is 32 bytes");
_Static_assert(GFCC_REQ_MAX <= 2048, "a full request fits a 2048 MTU");
_Static_assert(GFCC_SEG_MAX <= 65535, "segment numbers fit u16");
_Static_assert(GFCC_X_MAX == GFCC_MTU_MIN, "a control message fits the smallest MTU");

struct gfcc_obj {
	uint64_t ino, gen;
	int64_t off, len;
};

struct gfcc_pblk {
	uint64_t index;		/* file page number (byte offset / psize) */
	uint64_t count;
};

struct gfcc_req_ext {
	uint8_t xver;		/* GFCC_X_VERSION */
	uint16_t seglen;	/* GFCC_SEGLEN_MIN..GFCC_SEGLEN_MAX */
	uint32_t window;	/* 0: no flow control */
};

struct gfcc_req {
	uint64_t id;
	struct gfcc_obj obj;
	uint32_t qkey;
	uint32_t cmd;
	uint32_t psize;
	uint32_t npage;
	uint32_t npblk;
	bool has_ext;
	struct gfcc_req_ext ext;
	struct gfcc_pblk pblk[GFCC_PBLK_MAX];
};

struct gfcc_res {
	uint64_t id;
	uint32_t err;		/* positive errno or 0 */
	uint32_t npage;
	uint32_t nseg;
	bool has_size;		/* xprt: the responder's copy's size follows */
	uint64_t size;		/* bytes, <= GFCC_RES_SIZE_MAX */
};

struct gfcc_dseg {
	uint64_t id;
	uint32_t qkey;
	uint16_t seg;
	uint16_t npage;
};

enum gfcc_x_type { GFCC_X_CREDIT = 1, GFCC_X_RESEND = 2, GFCC_X_FIN = 3 };

struct gfcc_xmsg {
	uint64_t id;
	uint32_t qkey;
	uint32_t allow;
	uint8_t type;
	uint16_t base, nbits;
	uint8_t bitmap[GFCC_X_BITMAP_MAX];
};

/* What a datagram on the responder's public port claims to be, from its
 * magic alone (the decoder still checks everything). */
enum gfcc_kind { GFCC_KIND_NONE = 0, GFCC_KIND_REQ = 1, GFCC_KIND_X = 2 };
enum gfcc_kind gfcc_kind(const void *buf, size_t len);

/* --- limits ---------------------------------------------------------- */
bool gfcc_psize_ok(uint32_t psize);
/* The most pages one request may ask for at this page size (0 if the page
 * size is not allowed): 256, fewer once pages are over 4 KiB. */
uint32_t gfcc_max_pages(uint32_t psize);
bool gfcc_qkey_ok(uint32_t qkey);
/* Encoded request length. */
size_t gfcc_req_len(uint32_t npblk, bool ext);
/* The most page blocks a request may carry to fit `mtu` payload bytes. */
uint32_t gfcc_req_max_pblk(uint32_t mtu, bool ext);

/* --- rpc2 request ---------------------------------------------------- */
/* Fills q->pblk/npblk/npage from `n` strictly ascending page numbers,
 * merging runs, and stops before a block beyond max_pblk (or the page
 * limit) -- gfarm's gfcc_map_recv_pages "too many pblk".  Returns how many
 * pages it took (>= 1), or -EINVAL (n 0, not ascending, page size not set
 * or not allowed). */
int gfcc_req_set_pages(struct gfcc_req *q, const uint64_t *pages, uint32_t n, uint32_t max_pblk);
/* The file page number of the reply's i-th page (reply pages come in
 * request order: block 0's pages, then block 1's...).  0 or -ERANGE. */
int gfcc_req_page(const struct gfcc_req *q, uint32_t i, uint64_t *index);
/* Checks q as the decoder would; 0 or a negative errno. */
int gfcc_req_check(const struct gfcc_req *q);
/* Encoded length, -ENOSPC (cap too small) or the gfcc_req_check error. */
int gfcc_req_encode(const struct gfcc_req *q, uint8_t *out, size_t cap);
int gfcc_req_decode(const void *buf, size_t len, struct gfcc_req *q);

/* --- rpc2 response --------------------------------------------------- */
int gfcc_res_check(const struct gfcc_res *r);
int gfcc_res_encode(const struct gfcc_res *r, uint8_t out[GFCC_RES_LEN]);
/* buf is segment 0's payload: len >= GFCC_RES_LEN (page bytes follow). */
int gfcc_res_decode(const void *buf, size_t len, struct gfcc_res *r);

/* --- UDP data-segment header ----------------------------------------- */
int gfcc_dseg_encode(const struct gfcc_dseg *d, uint8_t out[GFCC_DSEG_LEN]);
/* len is the whole datagram's: >= GFCC_DSEG_LEN. */
int gfcc_dseg_decode(const void *buf, size_t len, struct gfcc_dseg *d);

/* --- UDP control message --------------------------------------------- */
size_t gfcc_xmsg_len(uint16_t nbits);
static inline bool gfcc_xmsg_bit(const struct gfcc_xmsg *m, uint32_t i)
{
	return m->bitmap[i / 8] >> (i % 8) & 1;
}
int gfcc_xmsg_check(const struct gfcc_xmsg *m);
int gfcc_xmsg_encode(const struct gfcc_xmsg *m, uint8_t *out, size_t cap);
int gfcc_xmsg_decode(const void *buf, size_t len, struct gfcc_xmsg *m);

#endif
