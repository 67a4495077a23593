/* RNBD 2.0 client over an RTRS client session (doc/rtrs-design.md "RNBD
 * layers"; the kernel's rnbd-clt.c):
 *   - SESS_INFO and OPEN are RTRS READs on the service connection whose
 *     answers (SESS_INFO_RSP, OPEN_RSP) the server writes into our
 *     buffer; CLOSE is an RTRS WRITE without data -- byte for byte what
 *     the kernel sends (test_rnbd_wire.c holds captured bytes);
 *   - IO: READ as an RTRS READ, WRITE / FLUSH / DISCARD / WRITE_ZEROES as
 *     RTRS WRITEs; a request longer than the device takes in one go is
 *     split at min(the session's max_io, max_hw_sectors), discards at
 *     max_discard_sectors, write-zeroes at max_write_zeroes_sectors.
 * Like rtrs_clt, nothing here prints; IO completions run from
 * rtrs_clt_poll().  Opening and closing are blocking: they drive the
 * session's loop themselves until the answer comes or the timeout. */
#ifndef XPRT_RNBD_CLT_H
#define XPRT_RNBD_CLT_H

#include <stddef.h>
#include <stdint.h>

#include "rnbd/rnbd_wire.h"
#include "rtrs/rtrs_clt.h"

struct rnbd_clt_dev;

struct rnbd_clt_geom {
	uint8_t proto_ver;		/* negotiated in SESS_INFO */
	uint32_t device_id;
	uint64_t size;			/* bytes: nsectors * 512 */
	uint64_t nsectors;
	uint32_t max_hw_sectors;
	uint32_t max_write_zeroes_sectors;
	uint32_t max_discard_sectors;
	uint32_t discard_granularity, discard_alignment;
	uint16_t physical_block_size, logical_block_size;
	uint16_t max_segments, secure_discard;
	uint8_t cache_policy;		/* RNBD_FUA | RNBD_WRITEBACK */
};

/* Opens dev_name (as the server's export list or search path names it)
 * with access mode RO, RW or MIGRATION.  NULL + err, errno: ENOENT (no
 * such export), EACCES (refused: already open for writing, or read-only),
 * ETIMEDOUT, ENOTCONN (session down), EPROTO, EINVAL, ENOMEM. */
struct rnbd_clt_dev *rnbd_clt_open(struct rtrs_clt *s, const char *dev_name,
				   enum rnbd_access_mode mode, uint64_t timeout_ns,
				   char *err, size_t errlen);
const struct rnbd_clt_geom *rnbd_clt_geom(const struct rnbd_clt_dev *d);
/* Largest READ/WRITE one RTRS request carries, bytes. */
uint32_t rnbd_clt_max_io(const struct rnbd_clt_dev *d);

/* One IO: op RNBD_OP_READ / WRITE / FLUSH / DISCARD / WRITE_ZEROES (the
 * value of WRITE_SAME), flags RNBD_F_SYNC, RNBD_F_FUA on a WRITE only (the
 * kernel's block layer fails any other op that carries REQ_FUA, and
 * rnbd-server passes the flag on as it is), RNBD_F_NOUNMAP
 * on WRITE_ZEROES: the range stays allocated, linux 6.8's REQ_NOUNMAP; a
 * device takes WRITE_ZEROES only from a server of that generation or
 * ours, max_write_zeroes_sectors being 0 from older ones); off and len bytes,
 * multiples of 512 within the device (FLUSH: 0, 0); buf (READ, WRITE) in
 * memory given to rtrs_clt_add_mem().  done(priv, err) runs from
 * rtrs_clt_poll() when every part is answered, or from the next
 * rnbd_clt_kick() (or rnbd_clt_close()) for IO that failed inside the
 * submit -- never inside rnbd_clt_submit() itself: 0 or the first part's
 * -errno.  Parts that find no free permit wait in the device's queue
 * (rnbd_clt_kick()).  Returns 0 or at once -EINVAL (alignment, range, op),
 * -EROFS (a write on a read-only mapping), -EOPNOTSUPP (discard or
 * write-zeroes the device does not take), -ENOMEM, or the error the
 * server refused the device's re-open with (rnbd_clt_reopen()). */
int rnbd_clt_submit(struct rnbd_clt_dev *d, unsigned op, uint32_t flags, uint64_t off,
		    void *buf, uint64_t len, void (*done)(void *priv, int err), void *priv);
/* Sends queued parts now that permits may be free (call after
 * rtrs_clt_poll()), and runs the done of IO that failed inside
 * rnbd_clt_submit() (done never runs inside it: a caller that submits
 * from done would recurse); how many went out or ended. */
unsigned rnbd_clt_kick(struct rnbd_clt_dev *d);
/* IOs submitted and not yet done. */
uint32_t rnbd_clt_busy(const struct rnbd_clt_dev *d);

/* The session's link events must reach every device on it: after
 * RECONNECTED (every path was down, one is back) each device is opened
 * again -- SESS_INFO and OPEN, as the kernel's rnbd-client does -- since
 * the server may have dropped the session meanwhile.  The session holds
 * the IO that waited until every device has re-opened (each one counts in
 * rtrs_clt_hold_on_reconnect()).  Held IO never reaches another device:
 * a device the server numbers differently now has its held requests
 * readdressed; one whose re-open failed has them failed with that error,
 * and its later IO too (rnbd_clt_reopens() says why). */
void rnbd_clt_link_ev(struct rnbd_clt_dev *d, enum rtrs_clt_link_ev ev);
/* Once a re-open after a reconnect has failed (the server refused it: the
 * device taken for writing by another session meanwhile, or gone), the
 * device's IO fails with that error until this opens it again: 0 when
 * the device is open, else -EINPROGRESS (a re-open is out: its result
 * comes from rtrs_clt_poll(), into rnbd_clt_reopens()) or -ENOTCONN (no
 * path connected to send one on).  Held IO of the session is not waited
 * for: the device's IO goes on failing until it is done. */
int rnbd_clt_reopen(struct rnbd_clt_dev *d);
/* How many re-opens succeeded; *last_err: the last one's result. */
uint64_t rnbd_clt_reopens(const struct rnbd_clt_dev *d, int *last_err);

/* Sends CLOSE (waits for its answer up to timeout_ns; IO still running is
 * waited for first, within the same time) and frees d.  0 or -errno;
 * -ETIMEDOUT with IO or a re-open still out: d is kept, unreachable for
 * the caller, until the process ends (that IO completes into it when the
 * session closes).  NULL ok. */
int rnbd_clt_close(struct rnbd_clt_dev *d, uint64_t timeout_ns);

/* Runs the session's loop for at most timeout_ns or until *flag is set
 * (flag may be NULL): polls, sleeps on rtrs_clt_fd().  0, -ETIMEDOUT, or
 * -EINTR once the session's stop flag (rtrs_clt_opts) is set. */
int rnbd_clt_wait(struct rtrs_clt *s, const volatile int *flag, uint64_t timeout_ns);

#endif
