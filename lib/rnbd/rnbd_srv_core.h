/* The RNBD server's rules, without I/O: a session's table of open devices,
 * the admission of OPEN (the same export twice, read-only exports, the
 * writers an access mode allows), CLOSE, the version SESS_INFO settles,
 * and every check an IO message passes before the file is touched.  The
 * driver (rnbd_srv.c) finds exports, opens files, reads and writes, and
 * keeps one rnbd_core_sess per RTRS session; these calls only change the
 * tables they are given.  The kernel's counterparts are named at each
 * call (drivers/block/rnbd/rnbd-srv.c). */
#ifndef XPRT_RNBD_SRV_CORE_H
#define XPRT_RNBD_SRV_CORE_H

#include <stdbool.h>
#include <stdint.h>

#include "rnbd/rnbd_wire.h"
#include "rtrs/rtrs_srv.h"	/* RTRS_READ (answered with data), RTRS_WRITE (brings it) */

/* What OPEN_RSP announces beyond the device's own geometry. */
#define RNBD_SRV_MAX_SEGMENTS	128u	/* rtrs-clt.c RTRS_MAX_SEGMENTS, as the kernel server sends */
#define RNBD_SRV_MAX_DISCARD	(UINT32_MAX >> 9)	/* bi_size is 32 bits of bytes */

/* What the rules need of an export; the driver's export embeds it. */
struct rnbd_core_export {
	uint64_t size;			/* bytes, >= 512 */
	uint32_t lbs, pbs, discard_gran;
	bool ro, discard;
	unsigned opens;			/* open devices of every session */
	unsigned writers;		/* open_write_cnt */
};

struct rnbd_core_dev {
	bool used;
	uint8_t mode;			/* RNBD_ACCESS_* */
	struct rnbd_core_export *ex;
};

/* One RTRS session's devices, indexed by device_id.  Zeroed is empty. */
struct rnbd_core_sess {
	uint8_t ver;			/* negotiated in SESS_INFO, 0 before */
	struct rnbd_core_dev *devs;
	unsigned ndevs;
};

/* An IO message, checked: what the driver is to do. */
struct rnbd_core_io {
	struct rnbd_core_dev *dev;
	uint32_t op, fl;		/* rnbd_op(), rnbd_flags() */
	uint64_t off, len;		/* bytes; within the export (but FLUSH) */
	uint32_t arg;			/* READ: the client's buffer length;
					 * WRITE_ZEROES: the pattern's length, 0: none */
};

/* process_msg_sess_info: the version both speak, and the answer in data.
 * 0, or -EINVAL (not a READ, a short buffer, not a SESS_INFO). */
int rnbd_core_sess_info(struct rnbd_core_sess *s, int dir, void *data, uint32_t datalen,
			const void *usr, uint32_t usrlen);

/* The checks of process_msg_open before the export is looked up: a READ
 * with room for the answer and a valid OPEN.  0 with *m, or -EINVAL. */
int rnbd_core_open_msg(int dir, uint32_t datalen, const void *usr, uint32_t usrlen,
		       struct rnbd_open *m);

/* process_msg_open once the driver found the export e: the device's id
 * (the same one again for an export this session has open), OPEN_RSP in
 * data (RNBD_OPEN_RSP_LEN bytes).  0, -EROFS (a writable open of a
 * read-only export), -EPERM (the access mode's writers are taken),
 * -EINVAL (an unknown mode), -ENOMEM. */
int rnbd_core_open(struct rnbd_core_sess *s, struct rnbd_core_export *e, uint8_t access_mode,
		   uint32_t max_io, void *data);

/* process_msg_close: 0 (an unknown id too, as the kernel), -EINVAL. */
int rnbd_core_close(struct rnbd_core_sess *s, const void *usr, uint32_t usrlen);

/* Closes device id (a forced close from the server's side): 0, -ENOENT. */
int rnbd_core_dev_close(struct rnbd_core_sess *s, uint32_t id);

/* The session is gone (destroy_sess): every device closed, the table freed. */
void rnbd_core_sess_free(struct rnbd_core_sess *s);

/* process_rdma's checks: the device open, the range inside the export, a
 * write allowed, the direction and the buffer right for the op.  0 with
 * *io, or -EINVAL, -ENOTCONN (no such device), -EROFS, -EIO (past the
 * end), -EOPNOTSUPP (discard where the export has none, secure erase). */
int rnbd_core_io(struct rnbd_core_sess *s, int dir, uint32_t datalen, const void *usr,
		 uint32_t usrlen, struct rnbd_core_io *io);

#endif
