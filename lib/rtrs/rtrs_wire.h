/* RTRS protocol 2.0 wire codec: byte-exact with the Linux kernel's
 * rtrs-client / rtrs-server (drivers/infiniband/ulp/rtrs/rtrs-pri.h), sans
 * I/O.  Seed 002 (the kernel's RTRS README); captured kernel traffic in
 * tests/unit/test_rtrs_wire.c.
 *
 * Byte order.  Every multi-byte message field is little-endian (the
 * kernel's __le16/__le32/__le64); uuids are 16 raw bytes as printed.  The
 * one exception is the 32-bit immediate of RDMA-write-with-immediate and
 * send-with-immediate: the kernel converts it with cpu_to_be32 and
 * be32_to_cpu (ibv_send_wr.imm_data and ibv_wc.imm_data are already
 * big-endian).  Every rtrs_imm_* and rtrs_io_* function here takes and
 * returns the HOST-ORDER value (e.g. 0x00081020 for buffer 1, offset
 * 0x1020); convert at the verbs boundary with rtrs_imm_to_wire() /
 * rtrs_imm_from_wire() (htobe32/be32toh), or put_be32() in a byte stream.
 *
 * Messages and where they travel:
 *   conn_req   client -> server, rdma_connect private data (56 bytes; the
 *              two leading bytes stay 0: they sit behind rdma_cm's own
 *              36-byte header, which rdma_cm adds itself)
 *   conn_rsp   server -> client, rdma_accept / rdma_reject private data
 *   info_req   client SEND on connection 0 once all connections are up
 *   info_rsp   server SEND: one rtrs_sg_desc per memory region over the
 *              session's queue_depth chunks
 *   rdma_write / rdma_read   client RDMA-WRITE-with-IMM into a server
 *              chunk (layouts below); rkey_rsp: server SEND-with-IMM with a
 *              chunk's new rkey when always_invalidate is on
 *
 * Decoders never trust a length or count field and return 0 or a negative
 * errno:
 *   -EMSGSIZE         fewer bytes than the message (or its descriptors) need
 *   -EPROTO           wrong magic, or not the message type asked for
 *   -EPROTONOSUPPORT  major version other than 2 (minor versions are
 *                     accepted, as the kernel does)
 *   -EINVAL           a field out of range (each decoder says which)
 * The kernel answers every conn_req failure with a reject carrying
 * -ECONNRESET and closes the path on every other one; mapping to that is
 * the caller's job.
 */
#ifndef XPRT_RTRS_WIRE_H
#define XPRT_RTRS_WIRE_H

#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --- constants (rtrs-pri.h, rtrs-srv.c, rtrs-clt.c, rnbd-proto.h) -------- */
#define RTRS_MAGIC			0x1BBDu
#define RTRS_PROTO_VER_MAJOR		2u
#define RTRS_PROTO_VER_MINOR		0u
#define RTRS_PROTO_VER			((RTRS_PROTO_VER_MAJOR << 8) | RTRS_PROTO_VER_MINOR)

#define RTRS_DEFAULT_QUEUE_DEPTH	512u		/* rtrs-server sess_queue_depth */
#define RTRS_DEFAULT_CHUNK_SIZE		(128u << 10)	/* rtrs-server max_chunk_size */
#define RTRS_MAX_HDR_SIZE		4096u		/* PAGE_SIZE: conn_rsp.max_hdr_size */
#define RTRS_DEFAULT_MAX_IO_SIZE	(RTRS_DEFAULT_CHUNK_SIZE - RTRS_MAX_HDR_SIZE)
#define RTRS_MIN_CHUNK_SIZE		8192u
#define RTRS_MAX_SESS_QUEUE_DEPTH	65535u
#define RTRS_MAX_PATHS_NUM		128u
#define RTRS_MAX_CID_NUM		4096u		/* rtrs_rdma_connect sanity check */
#define RTRS_SERVICE_CON_QUEUE_DEPTH	512u
#define RTRS_HB_INTERVAL_MS		5000u
#define RTRS_HB_MISSED_MAX		5u
#define RTRS_DEFAULT_PORT		1234u		/* rnbd-proto.h RTRS_PORT */
#define RTRS_NAME_MAX			255u		/* NAME_MAX: info_req.pathname */

enum rtrs_msg_type {
	RTRS_MSG_INFO_REQ = 0,
	RTRS_MSG_INFO_RSP = 1,
	RTRS_MSG_WRITE = 2,
	RTRS_MSG_READ = 3,
	RTRS_MSG_RKEY_RSP = 4,
};

enum rtrs_msg_flags {
	RTRS_MSG_NEED_INVAL_F = 1u << 0,	/* rdma_read.flags: answer with SEND_WITH_INV */
	RTRS_MSG_NEW_RKEY_F = 1u << 1,		/* conn_rsp.flags: server has always_invalidate */
};

/* --- wire sizes ------------------------------------------------------------ */
#define RTRS_SG_DESC_LEN	16u
#define RTRS_CONN_REQ_LEN	56u
#define RTRS_CONN_RSP_LEN	56u
#define RTRS_INFO_REQ_LEN	272u
#define RTRS_INFO_RSP_HDR_LEN	8u	/* then sg_cnt descriptors */
#define RTRS_RKEY_RSP_LEN	8u
#define RTRS_RDMA_READ_HDR_LEN	8u	/* then sg_cnt descriptors */
#define RTRS_RDMA_WRITE_LEN	4u

/* The encoded layouts, only for the size checks: the codec never casts wire
 * bytes to a struct (rtrs-pri.h, BUILD_BUG_ON in the kernel). */
struct rtrs_sg_desc_wire { uint8_t addr[8], key[4], len[4]; };
struct rtrs_conn_req_wire {
	uint8_t cma_version, ip_version, magic[2], version[2], cid[2], cid_num[2];
	uint8_t recon_cnt[2], sess_uuid[16], paths_uuid[16], first_conn, reserved[11];
};
struct rtrs_conn_rsp_wire {
	uint8_t magic[2], version[2], errno_[2], queue_depth[2];
	uint8_t max_io_size[4], max_hdr_size[4], flags[4], reserved[36];
};
struct rtrs_info_req_wire { uint8_t type[2], pathname[RTRS_NAME_MAX], reserved[15]; };
struct rtrs_info_rsp_wire { uint8_t type[2], sg_cnt[2], reserved[4]; };
struct rtrs_rkey_rsp_wire { uint8_t type[2], buf_id[2], rkey[4]; };
struct rtrs_rdma_read_wire { uint8_t type[2], usr_len[2], flags[2], sg_cnt[2]; };
struct rtrs_rdma_write_wire { uint8_t type[2], usr_len[2]; };
_Static_assert(sizeof(struct rtrs_sg_desc_wire) == RTRS_SG_DESC_LEN, "rtrs_sg_desc is 16 bytes");
_Static_assert(sizeof(struct rtrs_conn_req_wire) == RTRS_CONN_REQ_LEN, "rtrs_msg_conn_req is 56 bytes");
_Static_assert(sizeof(struct rtrs_conn_rsp_wire) == RTRS_CONN_RSP_LEN, "rtrs_msg_conn_rsp is 56 bytes");
_Static_assert(sizeof(struct rtrs_info_req_wire) == RTRS_INFO_REQ_LEN, "rtrs_msg_info_req is 272 bytes");
_Static_assert(sizeof(struct rtrs_info_rsp_wire) == RTRS_INFO_RSP_HDR_LEN, "rtrs_msg_info_rsp is 8 + 16n");
_Static_assert(sizeof(struct rtrs_rkey_rsp_wire) == RTRS_RKEY_RSP_LEN, "rtrs_msg_rkey_rsp is 8 bytes");
_Static_assert(sizeof(struct rtrs_rdma_read_wire) == RTRS_RDMA_READ_HDR_LEN, "rtrs_msg_rdma_read is 8 + 16n");
_Static_assert(sizeof(struct rtrs_rdma_write_wire) == RTRS_RDMA_WRITE_LEN, "rtrs_msg_rdma_write is 4 bytes");

/* --- messages ------------------------------------------------------------- */
struct rtrs_sg_desc {
	uint64_t addr;
	uint32_t key;
	uint32_t len;
};

struct rtrs_conn_req {
	uint16_t version;	/* decode: as received; encode always writes RTRS_PROTO_VER */
	uint16_t cid;		/* connection id within the path, 0 = service connection */
	uint16_t cid_num;	/* connections in the path */
	uint16_t recon_cnt;	/* bumped on every (re)connect of the path */
	uint8_t sess_uuid[16];	/* the path */
	uint8_t paths_uuid[16];	/* the session (all paths) */
	bool first_conn;	/* may create the server session (else -ENXIO there) */
};

struct rtrs_conn_rsp {
	uint16_t version;	/* decode: as received; encode always writes RTRS_PROTO_VER */
	int16_t err;		/* 0 on accept; a negative errno on reject */
	uint16_t queue_depth;
	uint32_t max_io_size;	/* chunk size - max_hdr_size */
	uint32_t max_hdr_size;
	uint32_t flags;		/* RTRS_MSG_NEW_RKEY_F */
};

struct rtrs_info_req {
	char pathname[RTRS_NAME_MAX + 1];	/* NUL-terminated, 1..254 chars */
};

struct rtrs_rkey_rsp {
	uint16_t buf_id;
	uint32_t rkey;
};

/* The kernel server serves a read into at most one descriptor (sg_cnt 0 or
 * 1), so the decoded form holds at most one. */
struct rtrs_rdma_read {
	uint16_t usr_len;
	uint16_t flags;		/* RTRS_MSG_NEED_INVAL_F */
	uint16_t sg_cnt;	/* 0 or 1 */
	struct rtrs_sg_desc desc;	/* valid when sg_cnt == 1 */
};

struct rtrs_rdma_write {
	uint16_t usr_len;
};

/* Where a client writes into one server chunk: rtrs_clt.c rbufs[]. */
struct rtrs_rbuf {
	uint64_t addr;
	uint32_t rkey;
};

/* 0 or -EINVAL: empty, 255 or more bytes, or containing '/' or '.' -- the
 * name becomes a sysfs directory on both sides (rtrs_clt_open and
 * process_info_req refuse '/' and '.'). */
int rtrs_check_pathname(const char *name);

void rtrs_conn_req_encode(const struct rtrs_conn_req *m, uint8_t out[RTRS_CONN_REQ_LEN]);
/* rtrs_rdma_connect: -EMSGSIZE (len < 56), -EPROTO (magic),
 * -EPROTONOSUPPORT (major), -EINVAL (cid_num > 4096 or cid >= cid_num). */
int rtrs_conn_req_decode(const void *buf, size_t len, struct rtrs_conn_req *m);

void rtrs_conn_rsp_encode(const struct rtrs_conn_rsp *m, uint8_t out[RTRS_CONN_RSP_LEN]);
/* rtrs_rdma_conn_established: -EMSGSIZE, -EPROTO (magic), -EPROTONOSUPPORT.
 * A nonzero err is returned in m, not as a failure: a reject carries it. */
int rtrs_conn_rsp_decode(const void *buf, size_t len, struct rtrs_conn_rsp *m);

/* -EINVAL if the pathname fails rtrs_check_pathname. */
int rtrs_info_req_encode(const struct rtrs_info_req *m, uint8_t out[RTRS_INFO_REQ_LEN]);
/* rtrs_srv_info_req_done + process_info_req: -EMSGSIZE (len < 272), -EPROTO
 * (type), -EINVAL (pathname unterminated within its 255 bytes, empty, or
 * with '/' or '.'; the kernel checks only the last). */
int rtrs_info_req_decode(const void *buf, size_t len, struct rtrs_info_req *m);

/* Returns the length written (8 + 16 * n) or -EMSGSIZE if cap is too small. */
int rtrs_info_rsp_encode(uint8_t *out, size_t cap, const struct rtrs_sg_desc *desc, uint16_t n);
/* rtrs_clt_info_rsp_done + process_info_rsp, given the queue depth and
 * chunk size (max_io_size + max_hdr_size) from conn_rsp:
 *   -EMSGSIZE  len < 8 or < 8 + 16 * sg_cnt
 *   -EPROTO    type
 *   -EINVAL    queue_depth or chunk_size 0; sg_cnt 0 or not dividing
 *              queue_depth; (ilog2(sg_cnt-1)+1) + (ilog2(chunk-1)+1) > 28;
 *              a descriptor len 0 or not a multiple of chunk_size; the
 *              lengths not adding up to exactly queue_depth chunks.
 * On success *sg_cnt is set and, when rbufs is not NULL, its queue_depth
 * entries get each chunk's address and rkey: descriptor i covers
 * len / chunk_size consecutive chunks (the kernel's rbufs[] split). */
int rtrs_info_rsp_decode(const void *buf, size_t len, uint32_t queue_depth, uint32_t chunk_size,
			 uint16_t *sg_cnt, struct rtrs_rbuf *rbufs);
/* Descriptor i of an info_rsp that rtrs_info_rsp_decode accepted. */
struct rtrs_sg_desc rtrs_info_rsp_desc(const void *buf, unsigned i);

void rtrs_rkey_rsp_encode(const struct rtrs_rkey_rsp *m, uint8_t out[RTRS_RKEY_RSP_LEN]);
/* rtrs_clt_rkey_rsp_done: -EMSGSIZE, -EPROTO (type), -EINVAL (buf_id >=
 * queue_depth). */
int rtrs_rkey_rsp_decode(const void *buf, size_t len, uint32_t queue_depth, struct rtrs_rkey_rsp *m);

/* Returns 8 + 16 * sg_cnt, -EINVAL if sg_cnt > 1, -EMSGSIZE if cap is short. */
int rtrs_rdma_read_encode(const struct rtrs_rdma_read *m, uint8_t *out, size_t cap);
/* process_read + rdma_write_sg: -EMSGSIZE, -EPROTO (type), -EINVAL (sg_cnt
 * other than 0 or 1; with one descriptor, its len 0). */
int rtrs_rdma_read_decode(const void *buf, size_t len, struct rtrs_rdma_read *m);

void rtrs_rdma_write_encode(const struct rtrs_rdma_write *m, uint8_t out[RTRS_RDMA_WRITE_LEN]);
int rtrs_rdma_write_decode(const void *buf, size_t len, struct rtrs_rdma_write *m);

/* --- the immediate: 4-bit type, 28-bit payload (host order) -------------- */
enum rtrs_imm_type {
	RTRS_IO_REQ_IMM = 0,		/* client -> server: buffer id + offset */
	RTRS_IO_RSP_IMM = 1,		/* server -> client: msg id + errno */
	RTRS_IO_RSP_W_INV_IMM = 2,	/* the same, after a SEND_WITH_INV */
	RTRS_HB_MSG_IMM = 8,
	RTRS_HB_ACK_IMM = 9,
};
#define RTRS_IMM_TYPE_BITS	4u
#define RTRS_IMM_PAYL_BITS	28u
#define RTRS_IMM_PAYL_MASK	((1u << RTRS_IMM_PAYL_BITS) - 1)
#define RTRS_IMM_HB_MSG		0x80000000u	/* zero-length write, heartbeat */
#define RTRS_IMM_HB_ACK		0x90000000u
#define RTRS_IO_RSP_MSG_ID_MASK	0x7ffffu	/* 19 bits */
#define RTRS_IO_RSP_ERRNO_MASK	0x1ffu		/* 9 bits, at bit 19 */

static inline uint32_t rtrs_imm_make(unsigned type, uint32_t payload)
{
	return ((uint32_t)(type & 0xf) << RTRS_IMM_PAYL_BITS) | (payload & RTRS_IMM_PAYL_MASK);
}
static inline unsigned rtrs_imm_type(uint32_t imm) { return imm >> RTRS_IMM_PAYL_BITS; }
static inline uint32_t rtrs_imm_payload(uint32_t imm) { return imm & RTRS_IMM_PAYL_MASK; }
/* host order <-> the big-endian value of ibv_send_wr/ibv_wc imm_data */
static inline uint32_t rtrs_imm_to_wire(uint32_t imm) { return htobe32(imm); }
static inline uint32_t rtrs_imm_from_wire(uint32_t wire) { return be32toh(wire); }

/* chunk_bits = ilog2(queue_depth - 1) + 1 (0 for a depth of 1): the high
 * bits of an IO_REQ payload that name the buffer; the low
 * mem_bits = 28 - chunk_bits bits are the offset of the rtrs message in it. */
unsigned rtrs_chunk_bits(uint32_t queue_depth);
unsigned rtrs_mem_bits(uint32_t queue_depth);
/* IO_REQ payload for buffer buf_id, message at byte off (the caller keeps
 * buf_id < queue_depth and off < 1 << mem_bits; rtrs_*_layout check it). */
uint32_t rtrs_io_req_payload(uint32_t queue_depth, uint32_t buf_id, uint32_t off);
/* rtrs_srv_rdma_done: -EINVAL when buf_id >= queue_depth or off >=
 * chunk_size (the kernel closes the path). */
int rtrs_io_req_payload_decode(uint32_t payload, uint32_t queue_depth, uint32_t chunk_size,
			       uint32_t *buf_id, uint32_t *off);
/* IO_RSP payload: |err| & 0x1ff at bits 19..27, msg_id & 0x7ffff below.
 * err is 0 or a negative errno; like the kernel, an errno above 511 is
 * truncated to its low 9 bits. */
uint32_t rtrs_io_rsp_payload(uint32_t msg_id, int err);
void rtrs_io_rsp_payload_decode(uint32_t payload, uint32_t *msg_id, int *err);
/* The whole immediate: IO_RSP_W_INV when the server sent SEND_WITH_INV. */
static inline uint32_t rtrs_imm_io_rsp(uint32_t msg_id, int err, bool w_inval)
{
	return rtrs_imm_make(w_inval ? RTRS_IO_RSP_W_INV_IMM : RTRS_IO_RSP_IMM,
			     rtrs_io_rsp_payload(msg_id, err));
}

/* Server configuration, as rtrs-server's check_module_params: 0, or -EINVAL
 * unless 1 <= queue_depth <= 65535, chunk_size is a power of two >= 8192,
 * and chunk_bits + ilog2(chunk_size) <= 28 (the immediate must name every
 * buffer and every offset in it). */
int rtrs_check_geometry(uint32_t queue_depth, uint32_t chunk_size);

/* --- request layout in a server chunk ---------------------------------- */
/* What both ends agree on after conn_rsp (cid 0). */
struct rtrs_geom {
	uint32_t queue_depth;
	uint32_t chunk_size;	/* max_io_size + max_hdr_size */
	uint32_t max_hdr_size;	/* limit on usr_len + rtrs header; 0 = none */
};
void rtrs_geom_from_conn_rsp(const struct rtrs_conn_rsp *r, struct rtrs_geom *g);

/* One request's RDMA-WRITE-with-IMM into chunk buf_id (rtrs_clt_write_req,
 * rtrs_clt_read_req):
 *
 *   WRITE:  offset 0          data_len   data_len+usr_len
 *           [ data          ][ usr hdr ][ rtrs_msg_rdma_write ]
 *           written in one go from offset 0
 *   READ:   offset 0          data_len   data_len+usr_len
 *           [ reserved for  ][ usr hdr ][ rtrs_msg_rdma_read + desc ]
 *           the read data    written from offset data_len
 *
 * In both the immediate is IO_REQ(mem_off + data_len + usr_len), mem_off =
 * buf_id << mem_bits: it points at the rtrs message, and the server finds
 * data_len as offset - usr_len. */
struct rtrs_req_layout {
	uint32_t wr_off;	/* chunk offset where the RDMA write lands */
	uint32_t wr_len;	/* bytes it writes */
	uint32_t msg_off;	/* chunk offset of the rtrs message */
	uint32_t imm;		/* host-order immediate */
};
/* -EINVAL (buf_id >= queue_depth, read sg_cnt > 1), -EMSGSIZE (usr_len >
 * 65535; usr_len + rtrs header > max_hdr_size, as rtrs_clt_request; the
 * whole write beyond the chunk, as rtrs_clt_*_req -- for a read we count
 * its descriptor too, which the kernel forgets; an offset the immediate
 * cannot carry). */
int rtrs_write_layout(const struct rtrs_geom *g, uint32_t buf_id, uint32_t data_len,
		      uint32_t usr_len, struct rtrs_req_layout *l);
int rtrs_read_layout(const struct rtrs_geom *g, uint32_t buf_id, uint32_t data_len,
		     uint32_t usr_len, unsigned sg_cnt, struct rtrs_req_layout *l);

/* The server's view of a request (process_io_req, process_write,
 * process_read).  data, usr point into the chunk. */
struct rtrs_srv_req {
	uint16_t type;		/* RTRS_MSG_WRITE or RTRS_MSG_READ */
	const uint8_t *data;	/* chunk start: WRITE data, or where READ data goes */
	uint32_t data_len;	/* off - usr_len */
	const uint8_t *usr;	/* data + data_len */
	uint16_t usr_len;
	struct rtrs_rdma_read rd;	/* READ: flags, sg_cnt and the client's buffer */
};
/* Parses the request whose rtrs message sits at chunk offset off (from
 * rtrs_io_req_payload_decode).  len is how many bytes of the chunk may be
 * read: the chunk size over RDMA, where the peer can have written anywhere
 * in it; a transport that knows the end of what was written passes that.
 *   -EMSGSIZE  the message (and its descriptor) does not end within len
 *   -EPROTO    type neither WRITE nor READ
 *   -EINVAL    usr_len > off (the kernel would compute a negative data_len);
 *              READ: sg_cnt > 1, a descriptor len 0, or longer than
 *              data_len (the kernel would send bytes beyond the data area)
 * Never reads outside chunk[0, len). */
int rtrs_srv_parse_req(const uint8_t *chunk, size_t len, uint32_t off, struct rtrs_srv_req *r);

#endif
