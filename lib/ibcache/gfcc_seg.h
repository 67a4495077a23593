/* Segmentation of a gfcc reply to the path MTU, the receive-buffer layout
 * a requester posts, and the requester's reassembler (seed 004 sections
 * 3.2.2 and 3.3.4).  Pure functions and caller-owned state: no I/O, no
 * allocation.
 *
 * The reply is one byte stream -- the 32-byte rpc2 response, then the
 * reply's pages in request order -- cut into segments of `seglen` bytes;
 * only the last may be shorter.  So packet 0 carries the response then
 * page bytes, and page fragments are packed across packet boundaries:
 * every packet but the last carries a whole MTU.  That is the fix the
 * seed asks for in 3.2.2 ("1ページ毎にWRを作っているので、mtuを使い切って
 * いない") and the count gfarm already announces in r2_nseg:
 * ceil((32 + npage * psize) / seglen).  A short reply (npage' < npage
 * requested: the responder stops at the first page it lacks) is a prefix
 * of the full reply's stream, so its segments are the full layout's first
 * ones with the last cut short: nothing posted moves.
 *
 * Segment payload per flavour (gfcc_seglen):
 *   GFCC_UD        the whole MTU: a UD message may be as long as the path
 *                  MTU; the 40-byte GRH lands in front of it in the receive
 *                  buffer and is not part of it (perftest: recv size + 40)
 *   GFCC_UD_GFARM  MTU - 40, gfarm's iosize, for a gfarm peer
 *   GFCC_UDP       MTU - 16: every datagram starts with the data-segment
 *                  header (gfcc_wire.h)
 * The requester tells the responder the seglen it posted for in the
 * request's xprt extension; without it the responder assumes gfarm's.
 *
 * Receive buffers (seed 3.2.2 figure): each UD receive WR scatters the GRH
 * into one shared 40-byte buffer, then -- WR 0 only -- the response, then
 * page pieces up to the segment's length; the send side mirrors it without
 * the GRH.  gfcc_seg_pieces() lists exactly those scatter/gather entries.
 */
#ifndef XPRT_IBCACHE_GFCC_SEG_H
#define XPRT_IBCACHE_GFCC_SEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ibcache/gfcc_wire.h"

enum gfcc_flavour { GFCC_UD = 0, GFCC_UD_GFARM = 1, GFCC_UDP = 2 };

/* Segment payload bytes for a path MTU (GFCC_MTU_MIN..GFCC_MTU_MAX; UD
 * also at most 4096); 0 when out of range. */
uint32_t gfcc_seglen(uint32_t mtu, enum gfcc_flavour f);

struct gfcc_layout {
	uint32_t psize;		/* page size */
	uint32_t npage;		/* pages in the reply (0: the response alone) */
	uint32_t seglen;	/* payload bytes of every segment but the last */
	uint32_t nseg;		/* = r2_nseg */
	uint32_t total;		/* GFCC_RES_LEN + npage * psize */
};

/* 0, -EINVAL (page size not allowed, seglen out of range) or -E2BIG
 * (npage beyond gfcc_max_pages(psize)). */
int gfcc_layout_init(struct gfcc_layout *l, uint32_t psize, uint32_t npage, uint32_t seglen);
/* Payload bytes of segment `seg`, 0 past the end. */
uint32_t gfcc_seg_len(const struct gfcc_layout *l, uint32_t seg);
/* The segments holding the first and last byte of reply page `page`. */
void gfcc_page_segs(const struct gfcc_layout *l, uint32_t page, uint32_t *first, uint32_t *last);

/* One scatter/gather entry of a segment. */
enum gfcc_piece_kind {
	GFCC_PC_GRH = 1,	/* 40 bytes of GRH room (UD receive) */
	GFCC_PC_DSEG = 2,	/* the 16-byte data-segment header (UDP) */
	GFCC_PC_RES = 3,	/* the 32-byte response (segment 0) */
	GFCC_PC_PAGE = 4,	/* len bytes at off of reply page `page` */
};
struct gfcc_piece {
	uint8_t kind;
	uint32_t page, off, len;
};
/* What goes in front of a segment's payload. */
enum gfcc_prefix {
	GFCC_PFX_NONE = 0,	/* UD send */
	GFCC_PFX_GRH = 1,	/* UD receive WR */
	GFCC_PFX_DSEG = 2,	/* UDP datagram, either end */
};
/* Enough entries for any segment of this seglen and page size. */
#define GFCC_PIECES_MAX(seglen, psize)	((seglen) / (psize) + 4)

/* Lists segment `seg`'s entries: the prefix, the response (segment 0),
 * then page pieces in stream order.  Returns the count, -ERANGE (seg >=
 * nseg) or -ENOSPC (more than max). */
int gfcc_seg_pieces(const struct gfcc_layout *l, uint32_t seg, enum gfcc_prefix pfx,
		    struct gfcc_piece *out, unsigned max);

/* --- the requester's reassembler ---------------------------------------
 *
 * Set up for one request before it is sent (pool entries reuse it: init
 * resets everything).  Three ways in:
 *   GFCC_RA_UDP    datagrams in any order, each with its data-segment
 *                  header; page pieces are copied into place -- or are
 *                  there already, when the caller had the kernel scatter
 *                  the datagram where its segment goes
 *                  (gfcc_reasm_input_hdr)
 *   GFCC_RA_UD     UD payloads (GRH already stripped) copied out of a
 *                  receive ring; the segment index is the arrival order
 *   GFCC_RA_PLACED UD with receive WRs posted per gfcc_seg_pieces(
 *                  GFCC_PFX_GRH): the HCA has put the bytes in place, the
 *                  reassembler checks lengths and counts (gfcc_reasm_placed)
 * Over UD a lost segment shifts every later one into the wrong buffer
 * (the scatter is positional), so a UD reply counts only once all its
 * segments arrived -- gfarm's done == nwr rule -- and then no page of an
 * incomplete UD reply is ever reported good.  Over UDP each segment says
 * where it goes: pages are good as soon as their segments are in, and the
 * missing segments can be asked for again (gfcc_reasm_resend).
 */
enum gfcc_ra_mode { GFCC_RA_UDP = 0, GFCC_RA_UD = 1, GFCC_RA_PLACED = 2 };

struct gfcc_reasm_cfg {
	uint64_t id;
	uint32_t qkey;
	uint32_t psize, npage, seglen;	/* as requested */
	enum gfcc_ra_mode mode;
	uint8_t *const *pages;		/* npage buffers of psize bytes (not PLACED) */
};

#define GFCC_SEG_WORDS	((GFCC_SEG_MAX + 63) / 64)

struct gfcc_reasm {
	uint64_t id;
	uint32_t qkey;
	enum gfcc_ra_mode mode;
	uint32_t npage_req;
	uint8_t *const *pages;
	struct gfcc_layout lay;		/* the reply's, once `known` */
	bool known;			/* reply page count learned */
	bool done;
	struct gfcc_res res;		/* valid once segment 0 is in */
	uint32_t got;			/* distinct segments in */
	uint32_t next;			/* UD: index of the next arrival */
	uint32_t pages_ok;		/* pages whose every segment is in */
	/* counters for stats and credit: allow = window + arrived + asked */
	uint64_t arrived;		/* datagrams accepted, duplicates included */
	uint64_t dups;
	uint64_t rejected;
	uint64_t segmap[GFCC_SEG_WORDS];	/* bit set: segment in */
	uint16_t page_left[GFCC_PAGES_MAX];	/* segments still due per page */
};

/* 0, or -EINVAL/-E2BIG (bad layout, qkey or mode, pages NULL). */
int gfcc_reasm_init(struct gfcc_reasm *r, const struct gfcc_reasm_cfg *c);

/* Results of the inputs below. */
enum { GFCC_RA_NEW = 0, GFCC_RA_DUP = 1, GFCC_RA_DONE = 2 };

/* One datagram: UDP the whole datagram, UD the payload.  GFCC_RA_NEW,
 * GFCC_RA_DUP (already had it: ignored), GFCC_RA_DONE (this one completed
 * the reply; see gfcc_reasm_error), or a negative errno, the datagram
 * dropped and nothing changed:
 *   -EPROTO    not ours: another request's id or qkey, or not a segment
 *   -EMSGSIZE  truncated, or length not the layout's for that segment
 *   -ERANGE    segment index past the reply's count; UD: after the end
 *   -EBADMSG   the reply contradicts the request or itself: more pages
 *              than asked, a page count other than earlier segments',
 *              a response whose id/npage/nseg disagree
 *   -EINVAL    a header field out of range (gfcc_dseg/res_decode), or
 *              the wrong call for the mode
 *   -EALREADY  UD: the reply is already complete (over UDP a late copy
 *              of a segment is just a duplicate) */
int gfcc_reasm_input(struct gfcc_reasm *r, const void *buf, size_t len);
/* GFCC_RA_UDP, a datagram the caller had the kernel scatter into place
 * (its payload already where gfcc_seg_pieces() puts segment hdr.seg):
 * hdr is its 16-byte segment header, len the whole datagram's length,
 * res (read for segment 0 only) the 32 bytes of the response.  Same
 * results as gfcc_reasm_input(), nothing copied. */
int gfcc_reasm_input_hdr(struct gfcc_reasm *r, const void *hdr, size_t len, const void *res);
/* GFCC_RA_PLACED: the next receive completed with `len` payload bytes
 * (byte_len less the GRH); `res` is the response buffer, read for the
 * first only.  Same results. */
int gfcc_reasm_placed(struct gfcc_reasm *r, size_t len, const void *res);

/* The responder's error (positive errno) once done, else 0. */
static inline uint32_t gfcc_reasm_error(const struct gfcc_reasm *r)
{
	return r->done ? r->res.err : 0;
}
/* Reply page count once known, else the requested count. */
static inline uint32_t gfcc_reasm_npage(const struct gfcc_reasm *r)
{
	return r->known ? r->lay.npage : r->npage_req;
}
/* Page i (reply order) is complete and may be used. */
bool gfcc_reasm_page_ok(const struct gfcc_reasm *r, uint32_t i);
/* Segments of the reply (or of the full request, while nothing is in)
 * not yet in; the first one at or after `from`, UINT32_MAX if none. */
uint32_t gfcc_reasm_nmissing(const struct gfcc_reasm *r);
uint32_t gfcc_reasm_next_missing(const struct gfcc_reasm *r, uint32_t from);
/* Fills a GFCC_X_RESEND for the missing segments from `from` on, at most
 * maxbits of them (GFCC_X_BITS_MAX at most; fewer to fit a small MTU):
 * id, qkey, type, base, nbits, bitmap -- the caller sets allow.  Returns
 * how many segments it names, 0 when none is missing. */
uint32_t gfcc_reasm_resend(const struct gfcc_reasm *r, uint32_t from, uint32_t maxbits,
			   struct gfcc_xmsg *m);

#endif
