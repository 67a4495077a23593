/* An RNBD device as a ublk device (the kernel's ublk_drv; the commands
 * are ioctl-encoded, Linux 6.4+;
 * include/uapi/linux/ublk_cmd.h): the device parameters the driver is
 * given (UBLK_CMD_SET_PARAMS) from the RNBD geometry, each IO descriptor
 * the driver fills in (struct ublksrv_io_desc) as one RNBD request, and
 * the result committed back (UBLK_IO_COMMIT_AND_FETCH_REQ).  No I/O:
 * the serving loop is cmd/rtrs-client/ublk.c. */
#ifndef XPRT_RNBD_UBLK_H
#define XPRT_RNBD_UBLK_H

#include <linux/ublk_cmd.h>
#include <stdbool.h>
#include <stdint.h>

#include "rnbd/rnbd_clt.h"

/* One ublk request as RNBD sees it. */
struct rnbd_ublk_req {
	unsigned op;		/* RNBD_OP_READ, WRITE, FLUSH, DISCARD, WRITE_ZEROES */
	uint32_t flags;		/* RNBD_F_FUA */
	uint64_t off, len;	/* bytes; FLUSH: 0, 0 */
	bool data;		/* READ or WRITE: the tag's buffer carries len bytes */
};

/* The parameters of a device of geometry g (read-only when ro) whose
 * requests carry at most max_io bytes (a multiple of 4096): basic
 * (size, block sizes, request size, the write cache and FUA as the
 * server's cache policy says, read-only) and, when the device discards
 * or writes zeroes, discard.  0, or -EINVAL for a geometry the driver
 * would refuse (no sectors or more than 2^55, a logical block not a
 * power of two in 512 to 4096, a physical one not in 512 to 32768).
 * Read-only: no write cache, no FUA. */
int rnbd_ublk_params(const struct rnbd_clt_geom *g, bool ro, uint32_t max_io,
		     struct ublk_params *p);

/* The request the descriptor iod asks for on a device of dev_sectors
 * sectors whose tag buffers hold max_io bytes.  0, -EOPNOTSUPP (an op
 * RNBD has no equivalent for, e.g. WRITE_SAME), -EINVAL (empty, past
 * the end, larger than a buffer). */
int rnbd_ublk_req(const struct ublksrv_io_desc *iod, uint64_t dev_sectors, uint32_t max_io,
		  struct rnbd_ublk_req *r);

/* What COMMIT_AND_FETCH_REQ reports for r finished with err (0 or
 * -errno): READ and WRITE the bytes done, other ops 0, a failure the
 * negative errno (the block layer turns it into the request's status). */
int32_t rnbd_ublk_result(const struct rnbd_ublk_req *r, int err);

#endif
