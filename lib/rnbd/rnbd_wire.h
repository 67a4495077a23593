/* RNBD protocol 2.0 wire codec: byte-exact with the Linux kernel's
 * rnbd-client / rnbd-server (drivers/block/rnbd/rnbd-proto.h as of linux
 * 6.1), sans I/O; checked against captured kernel traffic, whose bytes
 * tests/unit/test_rnbd_wire.c carries.
 *
 * RNBD rides on RTRS as the "user header" of an RTRS request (see
 * rtrs_wire.h): every message starts with {le16 type, le16 pad}.
 *   SESS_INFO, OPEN      client -> server in an RTRS READ; the server's
 *                        SESS_INFO_RSP / OPEN_RSP is the read data
 *   IO                   RTRS READ (op READ) or WRITE (other ops), the data
 *                        is the RTRS data
 *   CLOSE                RTRS WRITE without data
 * All multi-byte fields are little-endian.  Decoders return 0 or a negative
 * errno: -EMSGSIZE (too short), -EPROTO (not the message type asked for),
 * -EINVAL (a field out of range; each decoder says which).  The 6.1 server
 * trusts the lengths it is given; ours never do.
 */
#ifndef XPRT_RNBD_WIRE_H
#define XPRT_RNBD_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define RNBD_PROTO_VER_MAJOR	2u
#define RNBD_PROTO_VER_MINOR	0u
#define RNBD_NAME_MAX		255u	/* NAME_MAX: open.dev_name */
#define RNBD_PATH_MAX		4096u	/* PATH_MAX: the server's full device path */

enum rnbd_msg_type {
	RNBD_MSG_SESS_INFO = 0,
	RNBD_MSG_SESS_INFO_RSP = 1,
	RNBD_MSG_OPEN = 2,
	RNBD_MSG_OPEN_RSP = 3,
	RNBD_MSG_IO = 4,
	RNBD_MSG_CLOSE = 5,
};

/* RO may be mapped any number of times, RW once, and MIGRATION allows a
 * second writer (e.g. a VM moving between hosts). */
enum rnbd_access_mode {
	RNBD_ACCESS_RO = 0,
	RNBD_ACCESS_RW = 1,
	RNBD_ACCESS_MIGRATION = 2,
};

enum rnbd_cache_policy {
	RNBD_FUA = 1u << 0,
	RNBD_WRITEBACK = 1u << 1,
};

/* io.rw: the operation in the low 8 bits, flags above.  Linux 6.1 defines
 * ops 0..5, with 5 = WRITE_SAME (which its block layer no longer issues);
 * linux 6.8 renamed 5 to WRITE_ZEROES and added the PREFLUSH and NOUNMAP
 * flags.  Our decoder takes both generations' values. */
#define RNBD_OP_BITS	8u
#define RNBD_OP_MASK	((1u << RNBD_OP_BITS) - 1)
enum rnbd_op {
	RNBD_OP_READ = 0,
	RNBD_OP_WRITE = 1,
	RNBD_OP_FLUSH = 2,
	RNBD_OP_DISCARD = 3,
	RNBD_OP_SECURE_ERASE = 4,
	RNBD_OP_WRITE_SAME = 5,		/* <= 6.7 */
	RNBD_OP_WRITE_ZEROES = 5,	/* >= 6.8, same value */
	RNBD_OP_LAST = 6,
};
#define RNBD_F_SYNC	(1u << (RNBD_OP_BITS + 0))
#define RNBD_F_FUA	(1u << (RNBD_OP_BITS + 1))
#define RNBD_F_PREFLUSH	(1u << (RNBD_OP_BITS + 2))	/* >= 6.8 */
#define RNBD_F_NOUNMAP	(1u << (RNBD_OP_BITS + 3))	/* >= 6.8 */
#define RNBD_F_ALL	(RNBD_F_SYNC | RNBD_F_FUA | RNBD_F_PREFLUSH | RNBD_F_NOUNMAP)

static inline uint32_t rnbd_op(uint32_t rw) { return rw & RNBD_OP_MASK; }
static inline uint32_t rnbd_flags(uint32_t rw) { return rw & ~RNBD_OP_MASK; }

/* --- wire sizes (rnbd_srv_init_module's BUILD_BUG_ONs) ------------------- */
#define RNBD_HDR_LEN		4u
#define RNBD_SESS_INFO_LEN	36u
#define RNBD_OPEN_LEN		264u
#define RNBD_OPEN_RSP_LEN	56u
#define RNBD_CLOSE_LEN		8u
#define RNBD_IO_LEN		32u	/* 26 bytes of fields, padded to 8 as the C struct */
#define RNBD_IO_LEN_V1		24u	/* before prio (protocol 1): prio reads as 0 */

struct rnbd_hdr_wire { uint8_t type[2], pad[2]; };
struct rnbd_sess_info_wire { struct rnbd_hdr_wire hdr; uint8_t ver, reserved[31]; };
struct rnbd_open_wire {
	struct rnbd_hdr_wire hdr;
	uint8_t access_mode, resv1, dev_name[RNBD_NAME_MAX], reserved[3];
};
struct rnbd_open_rsp_wire {
	struct rnbd_hdr_wire hdr;
	uint8_t device_id[4], nsectors[8], max_hw_sectors[4], max_write_zeroes_sectors[4];
	uint8_t max_discard_sectors[4], discard_granularity[4], discard_alignment[4];
	uint8_t physical_block_size[2], logical_block_size[2], max_segments[2];
	uint8_t secure_discard[2], obsolete_rotational, cache_policy, reserved[10];
};
struct rnbd_close_wire { struct rnbd_hdr_wire hdr; uint8_t device_id[4]; };
struct rnbd_io_wire {
	struct rnbd_hdr_wire hdr;
	uint8_t device_id[4], sector[8], rw[4], bi_size[4], prio[2], tail_pad[6];
};
_Static_assert(sizeof(struct rnbd_hdr_wire) == RNBD_HDR_LEN, "rnbd_msg_hdr is 4 bytes");
_Static_assert(sizeof(struct rnbd_sess_info_wire) == RNBD_SESS_INFO_LEN, "rnbd_msg_sess_info is 36 bytes");
_Static_assert(sizeof(struct rnbd_open_wire) == RNBD_OPEN_LEN, "rnbd_msg_open is 264 bytes");
_Static_assert(sizeof(struct rnbd_open_rsp_wire) == RNBD_OPEN_RSP_LEN, "rnbd_msg_open_rsp is 56 bytes");
_Static_assert(sizeof(struct rnbd_close_wire) == RNBD_CLOSE_LEN, "rnbd_msg_close is 8 bytes");
_Static_assert(sizeof(struct rnbd_io_wire) == RNBD_IO_LEN, "rnbd_msg_io is 32 bytes");

/* --- messages -------------------------------------------------------------- */
struct rnbd_sess_info {		/* SESS_INFO and SESS_INFO_RSP */
	uint8_t ver;
};

struct rnbd_open {
	uint8_t access_mode;			/* enum rnbd_access_mode */
	char dev_name[RNBD_NAME_MAX + 1];	/* NUL-terminated, 1..254 chars */
};

struct rnbd_open_rsp {
	uint32_t device_id;
	uint64_t nsectors;		/* 512-byte sectors */
	uint32_t max_hw_sectors;
	uint32_t max_write_zeroes_sectors;	/* 6.1: max_write_same_sectors, unread */
	uint32_t max_discard_sectors;
	uint32_t discard_granularity;	/* bytes */
	uint32_t discard_alignment;	/* bytes */
	uint16_t physical_block_size;
	uint16_t logical_block_size;
	uint16_t max_segments;
	uint16_t secure_discard;
	uint8_t obsolete_rotational;
	uint8_t cache_policy;		/* RNBD_FUA | RNBD_WRITEBACK */
};

struct rnbd_close {
	uint32_t device_id;
};

struct rnbd_io {
	uint32_t device_id;
	uint64_t sector;
	uint32_t rw;		/* rnbd_op() | RNBD_F_* */
	uint32_t bi_size;	/* bytes */
	uint16_t prio;		/* ioprio */
};

/* The type of an RNBD message: 0..5, -EMSGSIZE (< 4 bytes), -EPROTO
 * (unknown type: rnbd_srv_rdma_ev answers -EINVAL). */
int rnbd_msg_type(const void *buf, size_t len);

void rnbd_sess_info_encode(const struct rnbd_sess_info *m, uint8_t out[RNBD_SESS_INFO_LEN]);
void rnbd_sess_info_rsp_encode(const struct rnbd_sess_info *m, uint8_t out[RNBD_SESS_INFO_LEN]);
int rnbd_sess_info_decode(const void *buf, size_t len, struct rnbd_sess_info *m);
int rnbd_sess_info_rsp_decode(const void *buf, size_t len, struct rnbd_sess_info *m);
/* process_msg_sess_info: the session runs min(client's ver, ours). */
static inline uint8_t rnbd_negotiate_ver(uint8_t client_ver)
{
	return client_ver < RNBD_PROTO_VER_MAJOR ? client_ver : (uint8_t)RNBD_PROTO_VER_MAJOR;
}

/* -EINVAL for an access mode or dev_name the decoder would refuse. */
int rnbd_open_encode(const struct rnbd_open *m, uint8_t out[RNBD_OPEN_LEN]);
/* -EMSGSIZE, -EPROTO, -EINVAL: access mode not RO/RW/MIGRATION (the
 * kernel's rnbd_srv_check_update_open_perm says -EINVAL too); dev_name not
 * terminated within its 255 bytes, or empty (the kernel strlen()s past it
 * into the next bytes and opens the search path itself). */
int rnbd_open_decode(const void *buf, size_t len, struct rnbd_open *m);

void rnbd_open_rsp_encode(const struct rnbd_open_rsp *m, uint8_t out[RNBD_OPEN_RSP_LEN]);
/* -EMSGSIZE, -EPROTO, -EINVAL: logical_block_size 0 (process_msg_open_rsp
 * refuses it). */
int rnbd_open_rsp_decode(const void *buf, size_t len, struct rnbd_open_rsp *m);

void rnbd_close_encode(const struct rnbd_close *m, uint8_t out[RNBD_CLOSE_LEN]);
int rnbd_close_decode(const void *buf, size_t len, struct rnbd_close *m);

void rnbd_io_encode(const struct rnbd_io *m, uint8_t out[RNBD_IO_LEN]);
/* -EMSGSIZE (< 24 bytes; 24..31 is a protocol-1 message, prio 0 as
 * process_rdma reads it), -EPROTO, -EINVAL: op >= RNBD_OP_LAST.  Flags
 * outside RNBD_F_ALL are kept, for the server to ignore. */
int rnbd_io_decode(const void *buf, size_t len, struct rnbd_io *m);

/* rnbd_srv_check_update_open_perm as a pure function over the device's
 * count of writers: RO always succeeds; RW only with no writer; MIGRATION
 * while fewer than two.  Success counts the new writer (RW, MIGRATION).
 * 0, -EPERM (refused), -EINVAL (unknown mode). */
int rnbd_check_open_perm(uint8_t access_mode, unsigned *open_write_cnt);
/* rnbd_destroy_sess_dev: closing a writable mapping drops its count. */
void rnbd_put_open_perm(uint8_t access_mode, unsigned *open_write_cnt);

/* process_msg_open + rnbd_srv_get_full_path: the path the server opens for
 * dev_name.  The kernel refuses a dev_name containing ".." anywhere and a
 * search path + name of PATH_MAX or more; "%SESSNAME%" in the search path
 * becomes "/<sessname>/" -- and, as in the kernel, anything after it in the
 * search path is dropped; runs of '/' collapse to one.
 * 0, -EINVAL (those rules, or an empty dev_name), -ENAMETOOLONG (out too
 * small for the result). */
int rnbd_srv_full_path(const char *search_path, const char *sessname, const char *dev_name,
		       char *out, size_t outlen);

/* "ro", "rw", "migration", "unknown" (rnbd-common.c). */
const char *rnbd_access_mode_str(uint8_t access_mode);

#endif
