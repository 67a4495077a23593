/* SHMCM packet decoder: any bytes, any MRU; a packet that decodes must
 * re-encode to the same header bytes and stay inside the buffer. */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shmcm/shmcm_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct shmcm_pkt p;
	uint8_t hdr[SHMCM_UDATA_HLEN];
	uint32_t mru;

	if (n < 2)
		return 0;
	mru = 36u + ((uint32_t)d[0] << 4 | d[1]);
	d += 2;
	n -= 2;
	/* a private copy, so ASan sees reads past the end */
	uint8_t *buf = malloc(n ? n : 1);
	memcpy(buf, d, n);
	if (shmcm_decode(buf, n, mru, &p) == SHMCM_OK) {
		assert(p.size <= n && p.size <= mru);
		if (p.type == SHMCM_CON_PKT) {
			shmcm_encode_con(hdr, p.con.type, p.con.cno);
			assert(memcmp(hdr, buf, 14) == 0);	/* spare may be non-zero */
		} else {
			assert(p.data + p.data_len == buf + p.size);
			assert(p.data_len <= p.u.size);
			shmcm_encode_udata_hdr(hdr, p.size, p.u.cno, p.u.msgid, p.u.src,
					       p.u.dst, p.u.size);
			assert(memcmp(hdr, buf, 24) == 0);	/* addr may be non-zero */
		}
	}
	free(buf);
	return 0;
}
