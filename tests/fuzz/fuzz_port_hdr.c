/* libFuzzer: the port frame header decoder, the walk through a pack of
 * frames (what it gives lies inside the input and packs back to the same
 * bytes), and the engine's frame input
 * (a hostile peer's frames never crash the engine or write outside the
 * provided buffers), whole (pe_input), as a header whose payload the
 * transport places itself (pe_input_hdr, pe_input_placed: shm by
 * reference), or as a pack of frames (pe_input_pack, which must end as
 * pe_input() frame by frame does: same result, reason and events). */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "port/port_eng.h"
#include "port/port_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t bufs[4][1 << 10], bufs2[4][1 << 10];

static unsigned cls(unsigned i) { return 4 + i * 2; }

/* A place the engine gave must lie inside one provided buffer. */
static void check_place(const uint8_t *d, size_t len)
{
	for (unsigned i = 0; i < 4; i++)
		if (d >= bufs[i] && d + len <= bufs[i] + xp_max_length_for_size(cls(i)))
			return;
	__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pw_hdr h;
	uint8_t re[PW_HDR_LEN];
	struct pe_opts o = { .send_tokens = 4, .recv_tokens = 8 };
	struct pe_eng *e;
	char why[200], why2[200];

	/* decode, then re-encode: the same bytes */
	if (pw_decode(data, size, &h) == 0) {
		pw_encode(re, &h);
		if (memcmp(re, data, PW_HDR_LEN))
			__builtin_trap();
	}
	/* a pack: every frame inside the input, packed again byte for byte */
	static uint8_t again[1 << 16];
	const uint8_t *fr;
	size_t poff = 0, alen = 0, flen;
	bool fits = true;
	int rc;

	while ((rc = pw_pack_next(data, size, &poff, &fr, &flen)) == 1) {
		if (fr < data || fr + flen > data + size || flen < PW_HDR_LEN)
			__builtin_trap();
		if (alen + PW_PACK_LEN + flen > sizeof(again))
			fits = false;	/* a longer input than -max_len's default */
		if (fits)
			alen += pw_pack_put(again + alen, fr, fr + PW_HDR_LEN, flen - PW_HDR_LEN);
	}
	if ((fits && (alen != poff || memcmp(again, data, alen))) || (rc == 0 && poff != size))
		__builtin_trap();
	/* the engine: the input is a sequence of frames, each prefixed by
	 * one length byte */
	if (!(e = pe_new(&o)))
		return 0;
	pe_node_add(e, 1, 64);
	pe_port_open(e, 0);
	pe_port_open(e, 1);
	for (unsigned i = 0; i < 4; i++)
		pe_provide(e, i & 1, bufs[i], cls(i), i >> 1);
	/* frames: a length byte (its top bit: placed by the transport), then
	 * the frame */
	for (size_t off = 0; off < size;) {
		size_t n = data[off] & 0x7f;
		bool placed = data[off++] & 0x80;
		struct xp_event ev;

		if (n > size - off)
			n = size - off;
		if (placed && n >= PW_HDR_LEN) {
			void *d;
			uint32_t plen = (uint32_t)(n - PW_HDR_LEN);

			if (pe_input_hdr(e, 1, data + off, plen, off, &d, why, sizeof(why)) < 0)
				break;
			if (d) {
				check_place(d, plen);
				memcpy(d, data + off + PW_HDR_LEN, plen);
				pe_input_placed(e, 1, data + off, plen);
			}
		} else if (pe_input(e, 1, data + off, n, off, why, sizeof(why)) < 0) {
			break;
		}
		off += n;
		pe_timers(e, off);
		struct pe_frame f;
		while (pe_pull(e, 1, 0, &f))
			pe_frame_done(e, f.ref);
		while (pe_next_event(e, 0, &ev) || pe_next_event(e, 1, &ev))
			if (ev.length > xp_max_length_for_size(ev.size))
				__builtin_trap();
	}
	pe_free(e);
	/* the same bytes as one pack into a fresh engine (shm's packs), and
	 * frame by frame into another: the same result, reason and events */
	struct pe_eng *e2 = pe_new(&o);

	if (!(e = pe_new(&o)) || !e2) {
		pe_free(e);
		pe_free(e2);
		return 0;
	}
	pe_node_add(e, 1, 64);
	pe_node_add(e2, 1, 64);
	pe_port_open(e, 0);
	pe_port_open(e2, 0);
	for (unsigned i = 0; i < 4; i += 2) {
		pe_provide(e, 0, bufs[i], cls(i), 0);
		pe_provide(e2, 0, bufs2[i], cls(i), 0);
	}
	why[0] = why2[0] = 0;
	int rc1 = pe_input_pack(e, 1, data, size, 0, why, sizeof(why)), rc2;

	if (rc1 < 0 && !why[0])
		__builtin_trap();	/* a failure always says why */
	poff = 0;
	while ((rc2 = pw_pack_next(data, size, &poff, &fr, &flen)) == 1)
		if ((rc2 = pe_input(e2, 1, fr, flen, 0, why2, sizeof(why2))) < 0)
			break;
	if (rc2 == PW_E_SHORT) {
		rc2 = -EPROTO;
		snprintf(why2, sizeof(why2), "a cut pack of frames");
	}
	if (rc1 != rc2 || (rc1 < 0 && strcmp(why, why2)))
		__builtin_trap();
	for (struct xp_event ev, ev2; pe_next_event(e, 0, &ev);) {
		if (ev.length > xp_max_length_for_size(ev.size) || !pe_next_event(e2, 0, &ev2) ||
		    ev.length != ev2.length || ev.size != ev2.size ||
		    memcmp(ev.buffer, ev2.buffer, ev.length))
			__builtin_trap();
	}
	struct xp_event ev2;

	if (pe_next_event(e2, 0, &ev2))
		__builtin_trap();
	pe_free(e);
	pe_free(e2);
	return 0;
}
