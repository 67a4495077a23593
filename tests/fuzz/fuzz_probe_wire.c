/* xprobe's control, datagram and verbs-test decoders on arbitrary bytes: whatever
 * decodes must encode back to the same bytes (the formats have no slack
 * other than the datagram padding after the header). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "probe/probe_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct probe_ctl c;
	struct probe_dg g;
	uint8_t out[PROBE_DG_STATS_LEN];

	if (probe_ctl_decode(d, n, &c) == 0) {
		uint8_t back[PROBE_CTL_LEN];

		probe_ctl_encode(&c, back);
		if (memcmp(back, d, PROBE_CTL_LEN) != 0)
			abort();
	}
	struct probe_vt v;
	struct probe_vt_mem m;

	if (probe_vt_decode(d, n, &v) == 0) {
		uint8_t back[PROBE_VT_LEN];

		probe_vt_encode(&v, back);
		if (memcmp(back, d, PROBE_VT_LEN) != 0 || !probe_vt_is(d, n))
			abort();
	}
	if (probe_vt_mem_decode(d, n, &m) == 0) {
		uint8_t back[PROBE_VT_MEM_LEN];

		probe_vt_mem_encode(&m, back);
		if (memcmp(back, d, PROBE_VT_MEM_LEN) != 0)
			abort();
	}
	if (probe_dg_decode(d, n, &g) == 0) {
		size_t len = g.type == PROBE_DG_STATS_REP ? PROBE_DG_STATS_LEN : PROBE_DG_HDR;

		probe_dg_encode(&g, out);
		/* bytes 6..7 are reserved: the encoder writes zeros */
		if (memcmp(out, d, 6) != 0 || memcmp(out + 8, d + 8, len - 8) != 0)
			abort();
	}
	return 0;
}
