/* Every RTRS decoder on arbitrary bytes.  The first byte picks the decoder
 * (and, where a decoder needs the session's geometry, the next bytes give
 * it); the rest is the message.  Whatever decodes must encode and decode
 * back to the same thing, and the request parse must only ever point inside
 * the bytes it was given. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "rtrs/rtrs_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static void conn_req(const uint8_t *d, size_t n)
{
	struct rtrs_conn_req a, b;
	uint8_t out[RTRS_CONN_REQ_LEN];

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	if (rtrs_conn_req_decode(d, n, &a))
		return;
	rtrs_conn_req_encode(&a, out);
	if (rtrs_conn_req_decode(out, sizeof(out), &b))
		abort();
	a.version = RTRS_PROTO_VER;	/* the encoder speaks 2.0 */
	/* magic, cid .. paths_uuid and the first_conn bit are kept exactly */
	if (memcmp(&a, &b, sizeof(a)) || memcmp(out + 2, d + 2, 2) ||
	    memcmp(out + 6, d + 6, 38) || out[44] != (d[44] & 1))
		abort();
}

static void conn_rsp(const uint8_t *d, size_t n)
{
	struct rtrs_conn_rsp a, b;
	uint8_t out[RTRS_CONN_RSP_LEN];

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	if (rtrs_conn_rsp_decode(d, n, &a))
		return;
	rtrs_conn_rsp_encode(&a, out);
	if (rtrs_conn_rsp_decode(out, sizeof(out), &b))
		abort();
	a.version = RTRS_PROTO_VER;
	/* no slack before the reserved tail except the minor version */
	if (memcmp(&a, &b, sizeof(a)) || memcmp(out + 4, d + 4, 16))
		abort();
}

static void info_req(const uint8_t *d, size_t n)
{
	struct rtrs_info_req a, b;
	uint8_t out[RTRS_INFO_REQ_LEN];

	if (rtrs_info_req_decode(d, n, &a))
		return;
	if (rtrs_info_req_encode(&a, out) || rtrs_info_req_decode(out, sizeof(out), &b))
		abort();
	if (strcmp(a.pathname, b.pathname) || memcmp(out, d, 2 + strlen(a.pathname) + 1))
		abort();
}

static void info_rsp(const uint8_t *d, size_t n)
{
	uint32_t qd, chunk;
	uint16_t cnt, cnt2;
	struct rtrs_rbuf *rb;
	struct rtrs_sg_desc *desc;
	uint8_t *out;
	size_t len;

	if (n < 6)
		return;
	qd = get_le16(d);
	chunk = get_le32(d + 2);
	d += 6;
	n -= 6;
	if (rtrs_info_rsp_decode(d, n, qd, chunk, &cnt, NULL))
		return;
	/* accepted: cnt descriptors of whole chunks, qd chunks in all */
	rb = malloc(qd * sizeof(*rb));
	desc = malloc(cnt * sizeof(*desc));
	len = RTRS_INFO_RSP_HDR_LEN + (size_t)cnt * RTRS_SG_DESC_LEN;
	out = malloc(len);
	if (!rb || !desc || !out)
		abort();
	if (rtrs_info_rsp_decode(d, n, qd, chunk, &cnt2, rb) || cnt2 != cnt)
		abort();
	for (unsigned i = 0, b = 0; i < cnt; i++) {
		desc[i] = rtrs_info_rsp_desc(d, i);
		for (uint32_t k = 0; k < desc[i].len / chunk; k++, b++)
			if (b >= qd || rb[b].rkey != desc[i].key ||
			    rb[b].addr != desc[i].addr + (uint64_t)k * chunk)
				abort();
	}
	if (rtrs_info_rsp_encode(out, len, desc, cnt) != (int)len ||
	    memcmp(out, d, 4) || memcmp(out + 8, d + 8, len - 8))
		abort();
	free(rb);
	free(desc);
	free(out);
}

static void rkey_rsp(const uint8_t *d, size_t n)
{
	struct rtrs_rkey_rsp a, b;
	uint8_t out[RTRS_RKEY_RSP_LEN];

	if (n < 2 || rtrs_rkey_rsp_decode(d + 2, n - 2, get_le16(d), &a))
		return;
	rtrs_rkey_rsp_encode(&a, out);
	if (rtrs_rkey_rsp_decode(out, sizeof(out), get_le16(d), &b) ||
	    memcmp(out, d + 2, sizeof(out)))
		abort();
}

static void rdma_read(const uint8_t *d, size_t n)
{
	struct rtrs_rdma_read a;
	uint8_t out[RTRS_RDMA_READ_HDR_LEN + RTRS_SG_DESC_LEN];
	int len;

	if (rtrs_rdma_read_decode(d, n, &a))
		return;
	len = rtrs_rdma_read_encode(&a, out, sizeof(out));
	if (len < 0 || memcmp(out, d, (size_t)len))
		abort();
}

static void rdma_write(const uint8_t *d, size_t n)
{
	struct rtrs_rdma_write a;
	uint8_t out[RTRS_RDMA_WRITE_LEN];

	if (rtrs_rdma_write_decode(d, n, &a))
		return;
	rtrs_rdma_write_encode(&a, out);
	if (memcmp(out, d, sizeof(out)))
		abort();
}

static void imm(const uint8_t *d, size_t n)
{
	uint32_t v, qd, chunk, buf, off, id;
	int err;

	if (n < 10)
		return;
	v = get_be32(d);	/* as on the wire */
	qd = get_le16(d + 4);
	chunk = get_le32(d + 6);
	if (rtrs_imm_make(rtrs_imm_type(v), rtrs_imm_payload(v)) != v)
		abort();
	switch (rtrs_imm_type(v)) {
	case RTRS_IO_REQ_IMM:
		if (rtrs_io_req_payload_decode(rtrs_imm_payload(v), qd, chunk, &buf, &off))
			break;
		if (buf >= qd || off >= chunk || rtrs_io_req_payload(qd, buf, off) != rtrs_imm_payload(v))
			abort();
		break;
	case RTRS_IO_RSP_IMM:
	case RTRS_IO_RSP_W_INV_IMM:
		rtrs_io_rsp_payload_decode(rtrs_imm_payload(v), &id, &err);
		if (err > 0 || rtrs_imm_io_rsp(id, err, rtrs_imm_type(v) == RTRS_IO_RSP_W_INV_IMM) != v)
			abort();
		break;
	}
	(void)rtrs_check_geometry(qd, chunk);
}

/* The server's parse on an arbitrary chunk: d[0..3] the message offset,
 * the rest the chunk's received bytes. */
static void srv_parse(const uint8_t *d, size_t n)
{
	struct rtrs_srv_req r;
	uint32_t off;

	if (n < 4)
		return;
	off = get_le32(d) % (uint32_t)(n - 4 + 1);
	d += 4;
	n -= 4;
	if (rtrs_srv_parse_req(d, n, off, &r))
		return;
	if (r.data != d || r.usr != d + r.data_len || r.data_len + r.usr_len != off)
		abort();
	if (r.type == RTRS_MSG_WRITE && off + RTRS_RDMA_WRITE_LEN > n)
		abort();
	if (r.type == RTRS_MSG_READ &&
	    (r.rd.sg_cnt > 1 || off + RTRS_RDMA_READ_HDR_LEN + r.rd.sg_cnt * RTRS_SG_DESC_LEN > n ||
	     (r.rd.sg_cnt && (r.rd.desc.len == 0 || r.rd.desc.len > r.data_len))))
		abort();
}

/* Client layout -> server parse: what one side lays out the other finds. */
static void layout(const uint8_t *d, size_t n)
{
	struct rtrs_geom g;
	struct rtrs_req_layout l;
	struct rtrs_srv_req r;
	uint32_t buf_id, data_len, usr_len, buf, off;
	bool rd;
	uint8_t *chunk;
	int err;

	if (n < 12)
		return;
	g.queue_depth = get_le16(d);
	g.chunk_size = 1u << (12 + d[2] % 9);		/* 4 KiB .. 1 MiB */
	g.max_hdr_size = d[3] & 1 ? 0 : RTRS_MAX_HDR_SIZE;
	buf_id = get_le16(d + 4);
	data_len = get_le32(d + 6) % (g.chunk_size + 1);
	usr_len = get_le16(d + 10);
	rd = d[3] & 2;
	if (rd)
		err = rtrs_read_layout(&g, buf_id, data_len, usr_len, data_len ? 1 : 0, &l);
	else
		err = rtrs_write_layout(&g, buf_id, data_len, usr_len, &l);
	if (err)
		return;
	if (l.msg_off != data_len + usr_len || (uint64_t)l.wr_off + l.wr_len > g.chunk_size ||
	    rtrs_imm_type(l.imm) != RTRS_IO_REQ_IMM)
		abort();
	if (rtrs_io_req_payload_decode(rtrs_imm_payload(l.imm), g.queue_depth, g.chunk_size,
				       &buf, &off) || buf != buf_id || off != l.msg_off)
		abort();
	chunk = calloc(1, g.chunk_size);
	if (!chunk)
		abort();
	if (rd) {
		struct rtrs_rdma_read m = { .usr_len = (uint16_t)usr_len, .sg_cnt = data_len ? 1 : 0,
					    .flags = RTRS_MSG_NEED_INVAL_F,
					    .desc = { 0x1000, 1, data_len } };

		if (rtrs_rdma_read_encode(&m, chunk + l.msg_off, g.chunk_size - l.msg_off) < 0)
			abort();
	} else {
		struct rtrs_rdma_write m = { (uint16_t)usr_len };

		rtrs_rdma_write_encode(&m, chunk + l.msg_off);
	}
	if (rtrs_srv_parse_req(chunk, l.wr_off + l.wr_len, off, &r) ||
	    r.data_len != data_len || r.usr_len != usr_len)
		abort();
	free(chunk);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	if (n < 1)
		return 0;
	switch (d[0] % 10) {
	case 0: conn_req(d + 1, n - 1); break;
	case 1: conn_rsp(d + 1, n - 1); break;
	case 2: info_req(d + 1, n - 1); break;
	case 3: info_rsp(d + 1, n - 1); break;
	case 4: rkey_rsp(d + 1, n - 1); break;
	case 5: rdma_read(d + 1, n - 1); break;
	case 6: rdma_write(d + 1, n - 1); break;
	case 7: imm(d + 1, n - 1); break;
	case 8: srv_parse(d + 1, n - 1); break;
	case 9: layout(d + 1, n - 1); break;
	}
	return 0;
}
