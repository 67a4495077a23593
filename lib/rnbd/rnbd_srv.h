/* RNBD server: block devices and files exported by name over an RTRS
 * server (the Linux kernel's rnbd-server, protocol 2; doc/rtrs-design.md
 * "RNBD layers").
 *
 * An export is NAME=PATH[:ro]: a client's OPEN names the export (dev_name
 * must equal NAME -- there is no search path, so nothing outside the
 * exports can be reached).  A regular file's size is its length at
 * startup, a block device's its BLKGETSIZE64; IO is checked against it and
 * never goes past it.  Access modes as the kernel: ro any number of times,
 * rw once, migration a second writer; a read-only export refuses rw and
 * migration opens with -EROFS, and every write with -EROFS.
 *
 * IO: without IO threads, synchronous (pread/pwrite on the loop's
 * thread).  With them (rnbd_srv_set_io_threads), the loop's thread does
 * only what cannot block -- reads of pages in the page cache and writes
 * the file system takes at once (preadv2/pwritev2 RWF_NOWAIT) -- and
 * hands the rest to the workers: cache misses, writes that would wait,
 * FLUSH, FUA, DISCARD, WRITE_ZEROES; so a slow disk or an fdatasync never
 * stops other requests, sessions or heartbeats (where the file system has
 * no RWF_NOWAIT buffered writes, writes stay on the loop's thread while
 * they are quick, and go to the workers for a second after one took over
 * a millisecond).  The loop answers what the
 * workers finished in rnbd_srv_poll().  FLUSH, FUA and PREFLUSH become
 * fdatasync(); DISCARD punches a hole, WRITE_ZEROES zeroes a range
 * (fallocate, or written zeros where that is not supported).
 *
 * Plug into the RTRS server with rnbd_srv_rtrs_ops() and the rnbd_srv as
 * its ctx.  Nothing prints: errors go to the caller's buffer. */
#ifndef XPRT_RNBD_SRV_H
#define XPRT_RNBD_SRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rtrs/rtrs_srv.h"

struct rnbd_srv;

/* max_io_size: what the RTRS server announces (chunk size - 4096); it
 * bounds max_hw_sectors in OPEN_RSP.  NULL + err on failure. */
struct rnbd_srv *rnbd_srv_new(uint32_t max_io_size, char *err, size_t errlen);
/* Frees the exports; every session must be down (NULL ok). */
void rnbd_srv_free(struct rnbd_srv *r);

/* Splits "NAME=PATH[:ro]".  NAME: 1..254 bytes, no '=' (it is matched
 * byte for byte against OPEN's dev_name, so '/' is fine).  A trailing
 * ":ro" marks the export read-only (":rw" is accepted too).  0, or
 * -EINVAL with err naming what is wrong. */
int rnbd_export_parse(const char *spec, char *name, size_t namelen, char *path, size_t pathlen,
		      bool *ro, char *err, size_t errlen);
/* Opens PATH (a regular file or a block device) and adds it as NAME.
 * 0, -EINVAL (bad name, not a file or block device, empty), -EEXIST (name
 * taken), or the open's -errno; err says which, naming the path. */
int rnbd_srv_export(struct rnbd_srv *r, const char *name, const char *path, bool ro,
		    char *err, size_t errlen);

/* The callbacks for rtrs_srv_new(), with the rnbd_srv as ctx. */
void rnbd_srv_rtrs_ops(struct rtrs_srv_ops *ops);

/* Starts n IO threads (0: none, IO stays synchronous).  Once, before any
 * session.  0, or -errno with err saying why. */
int rnbd_srv_set_io_threads(struct rnbd_srv *r, unsigned n, char *err, size_t errlen);
/* The kernel's dev_search_path: an OPEN of a name that is no export opens
 * DIR/name (DIR's %SESSNAME% replaced by the session's name), which must
 * lie inside DIR, and exports it under that name.  NULL: exports only
 * (the default).  0 or -ENOMEM. */
int rnbd_srv_set_search_path(struct rnbd_srv *r, const char *dir);
unsigned rnbd_srv_io_threads(const struct rnbd_srv *r);
/* Readable when workers finished IO (-1 without IO threads): wait on it
 * next to the RTRS server's fd. */
int rnbd_srv_fd(const struct rnbd_srv *r);
/* Whether workers finished IO that rnbd_srv_poll() would answer (a load,
 * no lock, no syscall): the loop brackets the poll with rtrs_srv_batch()
 * only then. */
bool rnbd_srv_pending(const struct rnbd_srv *r);
/* Answers the IO the workers finished (rtrs_srv_resp); how many. */
int rnbd_srv_poll(struct rnbd_srv *r);
/* Waits for every queued IO and answers it: before rtrs_srv_free(), which
 * frees the buffers workers write into. */
void rnbd_srv_drain(struct rnbd_srv *r);

/* --- introspection (status) ------------------------------------------------ */

struct rnbd_export_info {
	const char *name, *path;
	bool ro, blockdev;
	uint64_t size;			/* bytes */
	uint32_t lbs, pbs;		/* logical / physical block size */
	bool discard, write_zeroes;	/* what OPEN_RSP announces */
	unsigned opens, writers;	/* sessions that have it open; of them rw/migration */
	uint64_t reads, read_bytes, writes, write_bytes, flushes, discards, errors;
	uint64_t queued;		/* of them, run by an IO thread */
	bool deleted;			/* a file that has no name any more (removed,
					 * or renamed over): what is written to it is
					 * lost when the server lets go of it */
};
unsigned rnbd_srv_exports(const struct rnbd_srv *r);
int rnbd_srv_export_get(const struct rnbd_srv *r, unsigned idx, struct rnbd_export_info *ei);

struct rnbd_dev_info {
	uint32_t device_id;
	const char *export;
	uint8_t access_mode;		/* enum rnbd_access_mode */
};
/* The devices session s has open (0 when it has none or is not RNBD's). */
unsigned rnbd_srv_sess_devs(const struct rtrs_srv_sess *s);
int rnbd_srv_sess_dev_get(const struct rtrs_srv_sess *s, unsigned idx, struct rnbd_dev_info *di);
/* Closes device_id of session s as if the client had (the kernel's
 * force_close): later IO for it fails on that session.  0, -ENOENT. */
int rnbd_srv_sess_dev_close(struct rtrs_srv_sess *s, uint32_t device_id);
/* The protocol version the session negotiated (0 before SESS_INFO). */
uint8_t rnbd_srv_sess_ver(const struct rtrs_srv_sess *s);

#endif
