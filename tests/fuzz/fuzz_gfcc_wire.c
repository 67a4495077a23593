/* libFuzzer: the gfcc rpc2 request/response decoders and xprt's UDP
 * data-segment and control-message decoders on arbitrary bytes.  Whatever
 * decodes must pass its own check, encode, and give back the same bytes --
 * except those the format says are ignored (the request's ver[5..7] and
 * psn, the response's ver[5..7] and tail padding, which gfarm leaves
 * unset, unless byte 5 says they hold the size: then those bytes too). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ibcache/gfcc_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static void same(const uint8_t *a, const uint8_t *b, size_t from, size_t to)
{
	if (memcmp(a + from, b + from, to - from))
		__builtin_trap();
}

static bool req(const uint8_t *d, size_t n)
{
	static struct gfcc_req q;
	static uint8_t back[GFCC_REQ_MAX];
	uint64_t idx, prev = 0;
	int len;

	if (gfcc_req_decode(d, n, &q) != 0)
		return false;
	if (gfcc_req_check(&q) != 0 || q.npage > GFCC_PAGES_MAX || q.npblk > GFCC_PBLK_MAX)
		__builtin_trap();
	len = gfcc_req_encode(&q, back, sizeof(back));
	if (len < 0 || (size_t)len != n || n != gfcc_req_len(q.npblk, q.has_ext))
		__builtin_trap();
	same(back, d, 0, 5);
	same(back, d, 8, 52);
	same(back, d, 56, n);
	/* the reply's pages, in request order, strictly ascending */
	for (uint32_t i = 0; i < q.npage; i++) {
		if (gfcc_req_page(&q, i, &idx) != 0 || (i && idx <= prev))
			__builtin_trap();
		if (idx > (uint64_t)INT64_MAX / q.psize)
			__builtin_trap();
		prev = idx;
	}
	if (gfcc_req_page(&q, q.npage, &idx) != -ERANGE)
		__builtin_trap();
	return true;
}

static void res(const uint8_t *d, size_t n)
{
	struct gfcc_res r;
	uint8_t back[GFCC_RES_LEN];

	if (gfcc_res_decode(d, n, &r) != 0)
		return;
	if (gfcc_res_encode(&r, back) != GFCC_RES_LEN)
		__builtin_trap();
	same(back, d, 0, 5);
	same(back, d, 8, 28);
	if ((r.err || !r.npage) && r.nseg != 1)
		__builtin_trap();
	/* a size told is the bytes that tell it, within the field's reach,
	 * and only in an answer that is not an error */
	if (r.has_size != (d[5] == GFCC_RES_F_SIZE) ||
	    (r.has_size && (r.err || r.size > GFCC_RES_SIZE_MAX)))
		__builtin_trap();
	if (r.has_size) {
		same(back, d, 5, 8);
		same(back, d, 28, 32);
	}
}

static void dseg(const uint8_t *d, size_t n)
{
	struct gfcc_dseg g;
	uint8_t back[GFCC_DSEG_LEN];

	if (gfcc_dseg_decode(d, n, &g) != 0)
		return;
	if (gfcc_dseg_encode(&g, back) != GFCC_DSEG_LEN)
		__builtin_trap();
	same(back, d, 0, GFCC_DSEG_LEN);
}

static bool xmsg(const uint8_t *d, size_t n)
{
	static struct gfcc_xmsg m;
	static uint8_t back[GFCC_X_MAX];
	int len;

	if (gfcc_xmsg_decode(d, n, &m) != 0)
		return false;
	len = gfcc_xmsg_encode(&m, back, sizeof(back));
	if (len < 0 || (size_t)len != n)
		__builtin_trap();
	same(back, d, 0, n);
	if (m.type == GFCC_X_RESEND && (uint32_t)m.base + m.nbits > GFCC_SEG_MAX)
		__builtin_trap();
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	/* the responder's public port sorts by magic first: whatever decodes
	 * as a request or a control message must have been sorted so */
	enum gfcc_kind k = gfcc_kind(d, n);

	if (req(d, n) && k != GFCC_KIND_REQ)
		__builtin_trap();
	if (xmsg(d, n) && k != GFCC_KIND_X)
		__builtin_trap();
	res(d, n);
	dseg(d, n);
	return 0;
}
