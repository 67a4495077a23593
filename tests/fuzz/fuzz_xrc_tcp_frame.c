/* tcp:// framing: arbitrary bytes through the header decoder, then as the
 * byte stream a connection reads from its peer (over a socketpair), so the
 * target's key, access and bounds checks, the ACK/NAK/READ_RSP matching and
 * the receive-queue rules all see hostile input.
 *
 * rkey and raddr are unguessable from outside, so WRITE and READ_REQ headers
 * that decode get them rewritten (by the low bits of the fuzzed rkey) to one
 * of our regions or memory windows and to an address near it, in bounds or
 * just out; the key of a send-with-invalidate is rewritten the same way.
 * Two windows (type 1 and type 2) are bound over parts of the region that
 * has no remote access of its own, freshly for every input.
 * Invariant: nothing outside a REMOTE_WRITE region or a window ever
 * changes. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "xprt/xrc.h"
#include "xprt/xrc_tcp_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

#define RSZ	4096
#define GUARD	1024

/* region 0: remote write+read, 1: read only, 2: write only, 3: no remote
 * access; each inside guard bytes that must never change.  Windows over
 * region 3: [WOFF, WOFF+WLEN) and [WOFF2, WOFF2+WLEN). */
#define WOFF	512
#define WOFF2	2048
#define WLEN	1024
#define NKEYS	6	/* 4 regions, 2 windows */
static uint8_t mem[4][GUARD + RSZ + GUARD];
static struct xrc_mr *mr[4];
static struct xrc_win *win[2];

static uint32_t key_of(unsigned i)
{
	return i < 4 ? mr[i]->rkey : xrc_win_rkey(win[i - 4]);
}

static uintptr_t addr_of(unsigned i)
{
	return i < 4 ? (uintptr_t)mr[i]->addr
		     : (uintptr_t)mr[3]->addr + (i == 4 ? WOFF : WOFF2);
}

static void setup(void)
{
	static const unsigned acc[4] = {
		XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ, XRC_ACCESS_REMOTE_READ,
		XRC_ACCESS_REMOTE_WRITE, XRC_ACCESS_LOCAL_WRITE,
	};
	char err[128];

	if (mr[0])
		return;
	for (int i = 0; i < 4; i++) {
		memset(mem[i], 0xa5, sizeof(mem[i]));
		mr[i] = xrc_reg(xrc_tcp_domain(), mem[i] + GUARD, RSZ, acc[i], err, sizeof(err));
		assert(mr[i]);
	}
}

static void check_memory(void)
{
	for (int i = 0; i < 4; i++)
		for (size_t k = 0; k < sizeof(mem[i]); k++) {
			bool writable = k >= GUARD && k < GUARD + RSZ &&
					(mr[i]->access & XRC_ACCESS_REMOTE_WRITE);

			if (i == 3 && ((k >= GUARD + WOFF && k < GUARD + WOFF + WLEN) ||
				       (k >= GUARD + WOFF2 && k < GUARD + WOFF2 + WLEN)))
				writable = true;
			if (!writable && mem[i][k] != 0xa5)
				abort();
		}
}

/* Points decodable WRITE/READ_REQ headers at our regions and windows, and
 * the key of a send-with-invalidate at one of our keys. */
static void rewrite(uint8_t *b, size_t n)
{
	size_t off = 0;

	while (off < n) {
		struct xtcp_frame f;
		uint8_t hdr[XTCP_HDR_MAX];
		int hl = xtcp_decode(b + off, n - off, 4096, &f);

		if (hl <= 0)
			return;
		if ((f.type == XTCP_WRITE || f.type == XTCP_READ_REQ) && (f.rkey & 7) < NKEYS) {
			unsigned i = f.rkey & 7;

			f.rkey = key_of(i);
			f.raddr = addr_of(i) + f.raddr % (2 * RSZ) - RSZ / 2;
			xtcp_encode(hdr, &f);
			memcpy(b + off, hdr, (size_t)hl);
		} else if (f.type == XTCP_SEND && (f.flags & XTCP_F_INV) &&
			   (f.inv_rkey & 7) < NKEYS) {
			f.inv_rkey = key_of(f.inv_rkey & 7);
			xtcp_encode(hdr, &f);
			memcpy(b + off, hdr, (size_t)hl);
		}
		off += (size_t)hl + f.len;
	}
}

static void run_stream(uint8_t *b, size_t n)
{
	struct xrc_opts o = { .sq_depth = 8, .rq_depth = 8, .max_send = 4096 };
	static uint8_t rbuf[3][4096], local[64], sink[65536];
	uint32_t rlen[3] = { 16, 4096, 100 };
	struct xrc_wc wc[16];
	char err[128];
	int sv[2], idle = 0;
	size_t off = 0;
	struct xrc *c;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return;
	c = xrc_tcp_wrap_fd(sv[0], &o, 4096, 8, err, sizeof(err));
	if (!c) {
		close(sv[1]);
		return;
	}
	fcntl(sv[1], F_SETFL, O_NONBLOCK);
	/* fresh windows, bound through this connection (the type-2 one
	 * serves only it), then the stream's keys pointed at them */
	for (int i = 0; i < 2; i++) {
		win[i] = xrc_win_new(xrc_tcp_domain(), i ? XRC_WIN_TYPE2 : 0, err, sizeof(err));
		assert(win[i]);
		assert(xrc_win_bind(c, win[i], mr[3], (uint8_t *)addr_of(4 + (unsigned)i), WLEN,
				    XRC_ACCESS_REMOTE_WRITE | XRC_ACCESS_REMOTE_READ, 20, 0) == 0);
	}
	rewrite(b, n);
	for (int i = 0; i < 3; i++) {
		struct xrc_sge s = { rbuf[i], rlen[i], NULL };
		xrc_post_recv(c, &s, (uint64_t)i);
	}
	/* our own outstanding requests (seq 1, 2), for the peer's ACK, NAK
	 * and READ_RSP frames to match or not */
	struct xrc_sge ls = { local, sizeof(local), NULL };
	xrc_post_write(c, &ls, 1, 0x1000, 7, true, 1, 10, XRC_SIGNALED);
	xrc_post_read(c, &ls, 1, 0x2000, 7, 11, XRC_SIGNALED);

	while (xrc_state(c) == XRC_UP && idle < 16) {
		ssize_t w = off < n ? write(sv[1], b + off, n - off) : 0;
		int got = xrc_poll(c, wc, 16);

		if (w > 0)
			off += (size_t)w;
		while (read(sv[1], sink, sizeof(sink)) > 0)	/* what c answers */
			;
		idle = (w > 0 || got > 0) ? 0 : idle + 1;
	}
	xrc_close(c);
	close(sv[1]);
	for (int i = 0; i < 2; i++)
		xrc_win_free(win[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct xtcp_frame f;
	uint8_t hdr[XTCP_HDR_MAX];
	uint8_t *b;

	setup();
	/* the decoder alone: whatever decodes re-encodes to a header that
	 * decodes the same */
	int hl = xtcp_decode(d, n, (uint32_t)n, &f);
	if (hl > 0) {
		struct xtcp_frame g;
		assert((size_t)hl == xtcp_hdr_len(f.type) && (size_t)hl <= n);
		assert(xtcp_encode(hdr, &f) == (size_t)hl);
		assert(xtcp_decode(hdr, (size_t)hl, (uint32_t)n, &g) == hl);
		assert(memcmp(&f, &g, sizeof(f)) == 0);
	}
	if (n > 1 << 20 || !(b = malloc(n ? n : 1)))
		return 0;
	memcpy(b, d, n);
	run_stream(b, n);
	free(b);
	check_memory();
	return 0;
}
