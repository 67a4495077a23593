/* rnbd_ublk_req on arbitrary descriptors and device sizes: a request it
 * accepts lies inside the device, carries data only for a read or write,
 * and then fits a tag's buffer; the result it commits is the bytes of a
 * read or write and 0 otherwise. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rnbd/rnbd_ublk.h"

#define MAX_IO (512u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct ublksrv_io_desc iod;
	struct rnbd_ublk_req r;
	uint64_t dev;
	int rc;

	if (n < sizeof(iod) + sizeof(dev))
		return 0;
	memcpy(&iod, d, sizeof(iod));
	memcpy(&dev, d + sizeof(iod), sizeof(dev));
	rc = rnbd_ublk_req(&iod, dev, MAX_IO, &r);
	if (rc == -EOPNOTSUPP || rc == -EINVAL)
		return 0;
	if (rc)
		abort();
	if (r.op == RNBD_OP_FLUSH) {
		if (r.len || r.off || r.data || rnbd_ublk_result(&r, 0))
			abort();
		return 0;
	}
	/* exactly the descriptor's sectors, inside the device */
	if (r.off != iod.start_sector << 9 || r.len != (uint64_t)iod.nr_sectors << 9 ||
	    iod.start_sector > UINT64_MAX >> 9 || !r.len || iod.start_sector > dev ||
	    iod.nr_sectors > dev - iod.start_sector)
		abort();
	if (r.data != (r.op == RNBD_OP_READ || r.op == RNBD_OP_WRITE))
		abort();
	if (r.data && (r.len > MAX_IO || rnbd_ublk_result(&r, 0) != (int32_t)r.len))
		abort();
	if (!r.data && rnbd_ublk_result(&r, 0) != 0)
		abort();
	if (rnbd_ublk_result(&r, -5) != -5)
		abort();
	return 0;
}
