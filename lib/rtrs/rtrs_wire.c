/* RTRS 2.0 wire codec; the layout and rules are in rtrs_wire.h. */
#include <errno.h>
#include <string.h>

#include "core/bytes.h"
#include "rtrs/rtrs_wire.h"

/* ilog2(n - 1) + 1 for n >= 2, 0 for n <= 1: the kernel's bit count for n
 * buffers (its ilog2(0) is -1, so a depth of 1 needs no bits). */
static unsigned bits_for(uint32_t n)
{
	return n <= 1 ? 0 : 32u - (unsigned)__builtin_clz(n - 1);
}

static int check_version(const uint8_t *p)
{
	if (get_le16(p) != RTRS_MAGIC)
		return -EPROTO;
	/* rtrs_rdma_connect / rtrs_rdma_conn_established: only the major
	 * number has to match */
	if (get_le16(p + 2) >> 8 != RTRS_PROTO_VER_MAJOR)
		return -EPROTONOSUPPORT;
	return 0;
}

int rtrs_check_pathname(const char *name)
{
	size_t n = strnlen(name, RTRS_NAME_MAX);

	/* NAME_MAX bytes on the wire including the NUL (alloc_clt refuses
	 * strlen >= sizeof(sessname)); the name is a sysfs directory */
	if (n == 0 || n >= RTRS_NAME_MAX)
		return -EINVAL;
	if (memchr(name, '/', n) || memchr(name, '.', n))
		return -EINVAL;
	return 0;
}

/* --- conn_req: 0 cma_version 1 ip_version 2 magic 4 version 6 cid 8 cid_num
 * 10 recon_cnt 12 sess_uuid 28 paths_uuid 44 first_conn:1 45 reserved[11] */
void rtrs_conn_req_encode(const struct rtrs_conn_req *m, uint8_t out[RTRS_CONN_REQ_LEN])
{
	memset(out, 0, RTRS_CONN_REQ_LEN);
	put_le16(out + 2, RTRS_MAGIC);
	put_le16(out + 4, RTRS_PROTO_VER);
	put_le16(out + 6, m->cid);
	put_le16(out + 8, m->cid_num);
	put_le16(out + 10, m->recon_cnt);
	memcpy(out + 12, m->sess_uuid, 16);
	memcpy(out + 28, m->paths_uuid, 16);
	/* u8 first_conn:1 -- bit 0 on the little-endian hosts RTRS runs on */
	out[44] = m->first_conn ? 1 : 0;
}

int rtrs_conn_req_decode(const void *buf, size_t len, struct rtrs_conn_req *m)
{
	const uint8_t *p = buf;
	int err;

	if (!p || len < RTRS_CONN_REQ_LEN)
		return -EMSGSIZE;
	err = check_version(p + 2);
	if (err)
		return err;
	memset(m, 0, sizeof(*m));
	m->version = get_le16(p + 4);
	m->cid = get_le16(p + 6);
	m->cid_num = get_le16(p + 8);
	m->recon_cnt = get_le16(p + 10);
	memcpy(m->sess_uuid, p + 12, 16);
	memcpy(m->paths_uuid, p + 28, 16);
	m->first_conn = p[44] & 1;
	/* rtrs_rdma_connect's sanity checks, in its order */
	if (m->cid_num > RTRS_MAX_CID_NUM || m->cid >= m->cid_num)
		return -EINVAL;
	return 0;
}

/* --- conn_rsp: 0 magic 2 version 4 errno 6 queue_depth 8 max_io_size
 * 12 max_hdr_size 16 flags 20 reserved[36] */
void rtrs_conn_rsp_encode(const struct rtrs_conn_rsp *m, uint8_t out[RTRS_CONN_RSP_LEN])
{
	memset(out, 0, RTRS_CONN_RSP_LEN);
	put_le16(out, RTRS_MAGIC);
	put_le16(out + 2, RTRS_PROTO_VER);
	put_le16(out + 4, (uint16_t)m->err);
	put_le16(out + 6, m->queue_depth);
	put_le32(out + 8, m->max_io_size);
	put_le32(out + 12, m->max_hdr_size);
	put_le32(out + 16, m->flags);
}

int rtrs_conn_rsp_decode(const void *buf, size_t len, struct rtrs_conn_rsp *m)
{
	const uint8_t *p = buf;
	int err;

	if (!p || len < RTRS_CONN_RSP_LEN)
		return -EMSGSIZE;
	err = check_version(p);
	if (err)
		return err;
	memset(m, 0, sizeof(*m));
	m->version = get_le16(p + 2);
	m->err = (int16_t)get_le16(p + 4);	/* rtrs_rdma_conn_rejected: (int16_t) */
	m->queue_depth = get_le16(p + 6);
	m->max_io_size = get_le32(p + 8);
	m->max_hdr_size = get_le32(p + 12);
	m->flags = get_le32(p + 16);
	return 0;
}

/* --- info_req: 0 type 2 pathname[255] 257 reserved[15] */
int rtrs_info_req_encode(const struct rtrs_info_req *m, uint8_t out[RTRS_INFO_REQ_LEN])
{
	if (rtrs_check_pathname(m->pathname))
		return -EINVAL;
	memset(out, 0, RTRS_INFO_REQ_LEN);
	put_le16(out, RTRS_MSG_INFO_REQ);
	memcpy(out + 2, m->pathname, strlen(m->pathname));
	return 0;
}

int rtrs_info_req_decode(const void *buf, size_t len, struct rtrs_info_req *m)
{
	const uint8_t *p = buf;

	if (!p || len < RTRS_INFO_REQ_LEN)
		return -EMSGSIZE;
	if (get_le16(p) != RTRS_MSG_INFO_REQ)
		return -EPROTO;
	/* the kernel strchr()s the field as a string; we first make sure it
	 * is one, within its own bytes */
	if (!memchr(p + 2, 0, RTRS_NAME_MAX))
		return -EINVAL;
	memset(m, 0, sizeof(*m));
	memcpy(m->pathname, p + 2, RTRS_NAME_MAX);
	return rtrs_check_pathname(m->pathname);
}

/* --- info_rsp: 0 type 2 sg_cnt 4 reserved[4] 8 desc[] (addr le64, key
 * le32, len le32) */
static void desc_put(uint8_t *p, const struct rtrs_sg_desc *d)
{
	put_le64(p, d->addr);
	put_le32(p + 8, d->key);
	put_le32(p + 12, d->len);
}

static struct rtrs_sg_desc desc_get(const uint8_t *p)
{
	struct rtrs_sg_desc d = {
		.addr = get_le64(p),
		.key = get_le32(p + 8),
		.len = get_le32(p + 12),
	};

	return d;
}

int rtrs_info_rsp_encode(uint8_t *out, size_t cap, const struct rtrs_sg_desc *desc, uint16_t n)
{
	size_t len = RTRS_INFO_RSP_HDR_LEN + (size_t)n * RTRS_SG_DESC_LEN;

	if (cap < len)
		return -EMSGSIZE;
	memset(out, 0, RTRS_INFO_RSP_HDR_LEN);
	put_le16(out, RTRS_MSG_INFO_RSP);
	put_le16(out + 2, n);
	for (unsigned i = 0; i < n; i++)
		desc_put(out + RTRS_INFO_RSP_HDR_LEN + i * RTRS_SG_DESC_LEN, &desc[i]);
	return (int)len;
}

struct rtrs_sg_desc rtrs_info_rsp_desc(const void *buf, unsigned i)
{
	return desc_get((const uint8_t *)buf + RTRS_INFO_RSP_HDR_LEN + (size_t)i * RTRS_SG_DESC_LEN);
}

int rtrs_info_rsp_decode(const void *buf, size_t len, uint32_t queue_depth, uint32_t chunk_size,
			 uint16_t *sg_cnt, struct rtrs_rbuf *rbufs)
{
	const uint8_t *p = buf;
	uint64_t total = 0;
	unsigned n;

	if (!p || len < RTRS_INFO_RSP_HDR_LEN)
		return -EMSGSIZE;
	if (get_le16(p) != RTRS_MSG_INFO_RSP)
		return -EPROTO;
	n = get_le16(p + 2);
	if (len < RTRS_INFO_RSP_HDR_LEN + (size_t)n * RTRS_SG_DESC_LEN)
		return -EMSGSIZE;
	if (queue_depth == 0 || chunk_size == 0)
		return -EINVAL;
	/* process_info_rsp: the server maps the queue_depth chunks into
	 * sg_cnt equal memory regions */
	if (n == 0 || queue_depth % n)
		return -EINVAL;
	/* ... and checks the immediate's bits with sg_cnt (not queue_depth,
	 * a kernel quirk kept here as the kernel's exact rule) */
	if (bits_for(n) + bits_for(chunk_size) > RTRS_IMM_PAYL_BITS)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		struct rtrs_sg_desc d = rtrs_info_rsp_desc(p, i);

		if (d.len == 0 || d.len % chunk_size)
			return -EINVAL;
		total += d.len;
	}
	/* the kernel's "not fully mapped" and total_len checks together:
	 * whole chunks, exactly queue_depth of them */
	if (total != (uint64_t)chunk_size * queue_depth)
		return -EINVAL;
	if (rbufs) {
		uint32_t b = 0;

		for (unsigned i = 0; i < n; i++) {
			struct rtrs_sg_desc d = rtrs_info_rsp_desc(p, i);

			for (uint32_t k = 0; k < d.len / chunk_size; k++, b++) {
				rbufs[b].addr = d.addr + (uint64_t)k * chunk_size;
				rbufs[b].rkey = d.key;
			}
		}
	}
	*sg_cnt = (uint16_t)n;
	return 0;
}

/* --- rkey_rsp: 0 type 2 buf_id 4 rkey */
void rtrs_rkey_rsp_encode(const struct rtrs_rkey_rsp *m, uint8_t out[RTRS_RKEY_RSP_LEN])
{
	put_le16(out, RTRS_MSG_RKEY_RSP);
	put_le16(out + 2, m->buf_id);
	put_le32(out + 4, m->rkey);
}

int rtrs_rkey_rsp_decode(const void *buf, size_t len, uint32_t queue_depth, struct rtrs_rkey_rsp *m)
{
	const uint8_t *p = buf;

	if (!p || len < RTRS_RKEY_RSP_LEN)
		return -EMSGSIZE;
	if (get_le16(p) != RTRS_MSG_RKEY_RSP)
		return -EPROTO;
	m->buf_id = get_le16(p + 2);
	m->rkey = get_le32(p + 4);
	/* rtrs_clt_rkey_rsp_done: WARN_ON(buf_id >= queue_depth), recovery */
	if (m->buf_id >= queue_depth)
		return -EINVAL;
	return 0;
}

/* --- rdma_read: 0 type 2 usr_len 4 flags 6 sg_cnt 8 desc[] */
int rtrs_rdma_read_encode(const struct rtrs_rdma_read *m, uint8_t *out, size_t cap)
{
	size_t len = RTRS_RDMA_READ_HDR_LEN + (size_t)m->sg_cnt * RTRS_SG_DESC_LEN;

	if (m->sg_cnt > 1)
		return -EINVAL;
	if (cap < len)
		return -EMSGSIZE;
	put_le16(out, RTRS_MSG_READ);
	put_le16(out + 2, m->usr_len);
	put_le16(out + 4, m->flags);
	put_le16(out + 6, m->sg_cnt);
	if (m->sg_cnt)
		desc_put(out + RTRS_RDMA_READ_HDR_LEN, &m->desc);
	return (int)len;
}

int rtrs_rdma_read_decode(const void *buf, size_t len, struct rtrs_rdma_read *m)
{
	const uint8_t *p = buf;

	if (!p || len < RTRS_RDMA_READ_HDR_LEN)
		return -EMSGSIZE;
	if (get_le16(p) != RTRS_MSG_READ)
		return -EPROTO;
	memset(m, 0, sizeof(*m));
	m->usr_len = get_le16(p + 2);
	m->flags = get_le16(p + 4);
	m->sg_cnt = get_le16(p + 6);
	/* process_read: "sg_cnt != 1 && sg_cnt != 0" is an invalid message */
	if (m->sg_cnt > 1)
		return -EINVAL;
	if (len < RTRS_RDMA_READ_HDR_LEN + (size_t)m->sg_cnt * RTRS_SG_DESC_LEN)
		return -EMSGSIZE;
	if (m->sg_cnt) {
		m->desc = desc_get(p + RTRS_RDMA_READ_HDR_LEN);
		/* rdma_write_sg: "Invalid RDMA-Write sg list length 0" */
		if (m->desc.len == 0)
			return -EINVAL;
	}
	return 0;
}

/* --- rdma_write: 0 type 2 usr_len */
void rtrs_rdma_write_encode(const struct rtrs_rdma_write *m, uint8_t out[RTRS_RDMA_WRITE_LEN])
{
	put_le16(out, RTRS_MSG_WRITE);
	put_le16(out + 2, m->usr_len);
}

int rtrs_rdma_write_decode(const void *buf, size_t len, struct rtrs_rdma_write *m)
{
	const uint8_t *p = buf;

	if (!p || len < RTRS_RDMA_WRITE_LEN)
		return -EMSGSIZE;
	if (get_le16(p) != RTRS_MSG_WRITE)
		return -EPROTO;
	m->usr_len = get_le16(p + 2);
	return 0;
}

/* --- immediates ---------------------------------------------------------- */
unsigned rtrs_chunk_bits(uint32_t queue_depth)
{
	return bits_for(queue_depth);
}

unsigned rtrs_mem_bits(uint32_t queue_depth)
{
	unsigned cb = bits_for(queue_depth);

	return cb > RTRS_IMM_PAYL_BITS ? 0 : RTRS_IMM_PAYL_BITS - cb;
}

uint32_t rtrs_io_req_payload(uint32_t queue_depth, uint32_t buf_id, uint32_t off)
{
	/* alloc_permits: mem_off = mem_id << (28 - chunk_bits) */
	unsigned mb = rtrs_mem_bits(queue_depth);

	return (((uint64_t)buf_id << mb) + off) & RTRS_IMM_PAYL_MASK;
}

int rtrs_io_req_payload_decode(uint32_t payload, uint32_t queue_depth, uint32_t chunk_size,
			       uint32_t *buf_id, uint32_t *off)
{
	unsigned mb = rtrs_mem_bits(queue_depth);

	payload &= RTRS_IMM_PAYL_MASK;
	*buf_id = payload >> mb;
	*off = payload & (uint32_t)((1ull << mb) - 1);
	/* rtrs_srv_rdma_done: "Wrong msg_id %u, off %u" closes the path */
	if (*buf_id >= queue_depth || *off >= chunk_size)
		return -EINVAL;
	return 0;
}

uint32_t rtrs_io_rsp_payload(uint32_t msg_id, int err)
{
	uint32_t e = err < 0 ? (uint32_t)-(int64_t)err : (uint32_t)err;

	return (e & RTRS_IO_RSP_ERRNO_MASK) << 19 | (msg_id & RTRS_IO_RSP_MSG_ID_MASK);
}

void rtrs_io_rsp_payload_decode(uint32_t payload, uint32_t *msg_id, int *err)
{
	*msg_id = payload & RTRS_IO_RSP_MSG_ID_MASK;
	*err = -(int)((payload >> 19) & RTRS_IO_RSP_ERRNO_MASK);
}

int rtrs_check_geometry(uint32_t queue_depth, uint32_t chunk_size)
{
	if (queue_depth < 1 || queue_depth > RTRS_MAX_SESS_QUEUE_DEPTH)
		return -EINVAL;
	/* a power of two: ib_map_mr_sg maps chunks with it as page size */
	if (chunk_size < RTRS_MIN_CHUNK_SIZE || (chunk_size & (chunk_size - 1)))
		return -EINVAL;
	if (bits_for(queue_depth) + bits_for(chunk_size) > RTRS_IMM_PAYL_BITS)
		return -EINVAL;
	return 0;
}

/* --- layout -------------------------------------------------------------- */
void rtrs_geom_from_conn_rsp(const struct rtrs_conn_rsp *r, struct rtrs_geom *g)
{
	/* rtrs_rdma_conn_established: chunk_size = max_io_size + max_hdr_size */
	g->queue_depth = r->queue_depth;
	g->chunk_size = r->max_io_size + r->max_hdr_size;
	g->max_hdr_size = r->max_hdr_size;
}

static int layout(const struct rtrs_geom *g, uint32_t buf_id, uint32_t data_len, uint32_t usr_len,
		  uint32_t hdr_len, struct rtrs_req_layout *l)
{
	uint64_t msg_off = (uint64_t)data_len + usr_len;

	if (buf_id >= g->queue_depth)
		return -EINVAL;
	if (usr_len > UINT16_MAX)
		return -EMSGSIZE;
	/* rtrs_clt_request: usr_len + hdr_len > max_hdr_size is -EMSGSIZE */
	if (g->max_hdr_size && (uint64_t)usr_len + hdr_len > g->max_hdr_size)
		return -EMSGSIZE;
	/* rtrs_clt_{write,read}_req: the request must fit its chunk */
	if (msg_off + hdr_len > g->chunk_size)
		return -EMSGSIZE;
	/* and the immediate must be able to point at the message */
	if (msg_off >> rtrs_mem_bits(g->queue_depth))
		return -EMSGSIZE;
	l->msg_off = (uint32_t)msg_off;
	l->imm = rtrs_imm_make(RTRS_IO_REQ_IMM,
			       rtrs_io_req_payload(g->queue_depth, buf_id, l->msg_off));
	return 0;
}

int rtrs_write_layout(const struct rtrs_geom *g, uint32_t buf_id, uint32_t data_len,
		      uint32_t usr_len, struct rtrs_req_layout *l)
{
	int err = layout(g, buf_id, data_len, usr_len, RTRS_RDMA_WRITE_LEN, l);

	if (err)
		return err;
	/* data, user header and message go out in one write from offset 0 */
	l->wr_off = 0;
	l->wr_len = l->msg_off + RTRS_RDMA_WRITE_LEN;
	return 0;
}

int rtrs_read_layout(const struct rtrs_geom *g, uint32_t buf_id, uint32_t data_len,
		     uint32_t usr_len, unsigned sg_cnt, struct rtrs_req_layout *l)
{
	uint32_t hdr = RTRS_RDMA_READ_HDR_LEN + (sg_cnt ? RTRS_SG_DESC_LEN : 0);
	int err;

	if (sg_cnt > 1)
		return -EINVAL;
	err = layout(g, buf_id, data_len, usr_len, hdr, l);
	if (err)
		return err;
	/* rtrs_post_send_rdma(.., off = data_len, ..): the first data_len
	 * bytes stay free for the data the server will read */
	l->wr_off = data_len;
	l->wr_len = usr_len + hdr;
	return 0;
}

int rtrs_srv_parse_req(const uint8_t *chunk, size_t len, uint32_t off, struct rtrs_srv_req *r)
{
	const uint8_t *m;
	int err;

	memset(r, 0, sizeof(*r));
	if (!chunk || off >= len || len - off < 2)
		return -EMSGSIZE;
	m = chunk + off;
	r->type = get_le16(m);
	switch (r->type) {
	case RTRS_MSG_WRITE: {
		struct rtrs_rdma_write w;

		err = rtrs_rdma_write_decode(m, len - off, &w);
		if (err)
			return err;
		r->usr_len = w.usr_len;
		break;
	}
	case RTRS_MSG_READ:
		err = rtrs_rdma_read_decode(m, len - off, &r->rd);
		if (err)
			return err;
		r->usr_len = r->rd.usr_len;
		break;
	default:
		/* process_io_req: unknown type closes the path */
		return -EPROTO;
	}
	/* process_write/process_read: data_len = off - usr_len, the user
	 * header right before the message */
	if (r->usr_len > off)
		return -EINVAL;
	r->data = chunk;
	r->data_len = off - r->usr_len;
	r->usr = chunk + r->data_len;
	/* rdma_write_sg sends desc.len bytes from the chunk start: no more
	 * than the data area the client reserved */
	if (r->type == RTRS_MSG_READ && r->rd.sg_cnt && r->rd.desc.len > r->data_len)
		return -EINVAL;
	return 0;
}
