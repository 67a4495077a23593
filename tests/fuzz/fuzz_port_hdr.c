/* libFuzzer: the port frame header decoder, and the engine's frame input
 * (a hostile peer's frames never crash the engine or write outside the
 * provided buffers). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "port/port_eng.h"
#include "port/port_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pw_hdr h;
	uint8_t re[PW_HDR_LEN];
	static uint8_t bufs[4][1 << 10];
	struct pe_opts o = { .send_tokens = 4, .recv_tokens = 8 };
	struct pe_eng *e;
	char why[200];

	/* decode, then re-encode: the same bytes */
	if (pw_decode(data, size, &h) == 0) {
		pw_encode(re, &h);
		if (memcmp(re, data, PW_HDR_LEN))
			__builtin_trap();
	}
	/* the engine: the input is a sequence of frames, each prefixed by
	 * one length byte */
	if (!(e = pe_new(&o)))
		return 0;
	pe_node_add(e, 1, 64);
	pe_port_open(e, 0);
	pe_port_open(e, 1);
	for (unsigned i = 0; i < 4; i++)
		pe_provide(e, i & 1, bufs[i], 4 + i * 2, i >> 1);
	for (size_t off = 0; off < size;) {
		size_t n = data[off++];
		struct xp_event ev;

		if (n > size - off)
			n = size - off;
		if (pe_input(e, 1, data + off, n, off, why, sizeof(why)) < 0)
			break;
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
	return 0;
}
