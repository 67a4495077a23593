/* The NBD server core driven as a connection drives it: the input's first
 * byte picks the export (read-only or not, which commands it offers) and
 * whether the handshake is skipped; the rest is the client's byte stream,
 * fed in pieces whose sizes come from the stream itself, with the output
 * drained only sometimes.  Invariants: nothing consumed beyond what was
 * given, the output within its buffer, a request passed as good really is
 * in range, aligned and allowed, and a WRITE's payload is its length. */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nbd/nbd_srv.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static void check_req(const struct nbd_export *e, const struct nbd_req *r)
{
	bool writes = r->type == NBD_CMD_WRITE || r->type == NBD_CMD_TRIM ||
		      r->type == NBD_CMD_WRITE_ZEROES;

	assert(r->payload == (r->type == NBD_CMD_WRITE ? r->len : 0));
	if (r->err)
		return;
	assert(r->type == NBD_CMD_READ || r->type == NBD_CMD_WRITE || r->type == NBD_CMD_FLUSH ||
	       r->type == NBD_CMD_TRIM || r->type == NBD_CMD_WRITE_ZEROES);
	assert(!(writes && (e->tflags & NBD_FLAG_READ_ONLY)));
	assert(!(r->flags & ~(NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE)));
	if (r->type == NBD_CMD_FLUSH)
		return;
	assert(r->len && r->off <= e->size && r->len <= e->size - r->off);
	assert(r->off % e->min_block == 0 && r->len % e->min_block == 0);
	if (r->type == NBD_CMD_READ || r->type == NBD_CMD_WRITE)
		assert(r->len <= e->max_block);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	static struct nbd_srv s;
	struct nbd_export e = { "disk", "fuzz", 1u << 20, 0, 512, 4096, 1u << 17 };
	struct nbd_req r;
	enum nbd_ev ev;
	size_t at = 1, have = 1, out;
	uint32_t skip = 0;
	unsigned steps = 0;

	if (!n)
		return 0;
	if (d[0] & 1)
		e.tflags |= NBD_FLAG_READ_ONLY;
	if (d[0] & 2)
		e.tflags |= NBD_FLAG_SEND_TRIM;
	if (d[0] & 4)
		e.tflags |= NBD_FLAG_SEND_WRITE_ZEROES;
	if (d[0] & 8)
		e.name = "";
	nbd_srv_init(&s, &e, d[0] & 16);
	while (at < n && steps++ < 100000) {
		size_t k;

		/* the next piece: as long as the byte at the front says */
		if (have <= at)
			have = at + 1 + d[at] % 64;
		if (have > n)
			have = n;
		if (skip) {	/* a WRITE's payload, or one to drop */
			k = have - at < skip ? have - at : skip;
			at += k;
			skip -= (uint32_t)k;
			continue;
		}
		k = nbd_srv_input(&s, d + at, have - at, &ev, &r);
		assert(k <= have - at);
		at += k;
		assert(s.outlen <= NBD_SRV_OUTBUF);
		nbd_srv_out(&s, &out);
		if (ev == NBD_EV_BLOCKED || (d[at - (k ? 1 : 0)] & 0x80))
			nbd_srv_sent(&s, out);
		switch (ev) {
		case NBD_EV_REQ:
			check_req(&e, &r);
			skip = r.payload;
			break;
		case NBD_EV_MORE:
			if (!k && have < n)
				have++;
			else if (!k)
				return 0;
			break;
		case NBD_EV_ERROR:
		case NBD_EV_CLOSE:
		case NBD_EV_DISC:
			assert(nbd_srv_input(&s, d + at, n - at, &ev, &r) == 0 && ev == NBD_EV_ERROR);
			return 0;
		default:
			break;
		}
	}
	return 0;
}
