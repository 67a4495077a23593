/* NBD server core: the handshake's exact bytes (greeting, EXPORT_NAME with
 * and without zeroes, LIST, INFO/GO replies), every refusal (unknown
 * export, malformed and oversized options, unknown client flags, options
 * from an old-newstyle client), the request checks, output backpressure,
 * and that feeding the same bytes in any split gives the same answers. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "nbd/nbd_srv.h"

static const struct nbd_export exp_rw = {
	"d1", "a test disk", 1u << 20,
	NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES,
	512, 4096, 1u << 16,
};

static size_t opt(uint8_t *p, uint32_t o, const void *data, uint32_t len)
{
	put_be64(p, NBD_IHAVEOPT);
	put_be32(p + 8, o);
	put_be32(p + 12, len);
	if (len)
		memcpy(p + 16, data, len);
	return 16 + len;
}

/* GO/INFO data: name and info requests */
static uint32_t go_data(uint8_t *p, const char *name, const uint16_t *req, uint16_t n)
{
	uint32_t l = (uint32_t)strlen(name);

	put_be32(p, l);
	memcpy(p + 4, name, l);
	put_be16(p + 4 + l, n);
	for (uint16_t i = 0; i < n; i++)
		put_be16(p + 6 + l + 2 * i, req[i]);
	return 6 + l + 2u * n;
}

/* feeds all of p; returns the last event (READY/REQ/... stop it) */
static enum nbd_ev feed(struct nbd_srv *s, const uint8_t *p, size_t n, size_t *used,
			struct nbd_req *r)
{
	enum nbd_ev ev = NBD_EV_MORE;
	size_t k;

	*used = 0;
	do {
		k = nbd_srv_input(s, p + *used, n - *used, &ev, r);
		*used += k;
	} while ((k || ev == NBD_EV_OPT) && ev != NBD_EV_READY && ev != NBD_EV_REQ &&
		 ev != NBD_EV_ERROR && ev != NBD_EV_CLOSE && ev != NBD_EV_DISC);
	return ev;
}

/* the reply at *p: checks its header, returns its data, advances *p */
static const uint8_t *rep(const uint8_t **p, uint32_t o, uint32_t type, uint32_t *len)
{
	const uint8_t *q = *p;

	assert_true(get_be64(q) == NBD_REP_MAGIC);
	assert_int_equal(get_be32(q + 8), o);
	assert_int_equal(get_be32(q + 12), type);
	*len = get_be32(q + 16);
	*p = q + 20 + *len;
	return q + 20;
}

static void start(struct nbd_srv *s, const struct nbd_export *e, uint32_t cflags)
{
	uint8_t b[4];
	size_t used;
	struct nbd_req r;

	nbd_srv_init(s, e, false);
	nbd_srv_sent(s, s->outlen);
	put_be32(b, cflags);
	assert_int_equal(feed(s, b, 4, &used, &r), NBD_EV_MORE);
	assert_int_equal(used, 4);
}

static void test_greeting(void **st)
{
	static const uint8_t want[18] = { 'N', 'B', 'D', 'M', 'A', 'G', 'I', 'C', 'I', 'H', 'A',
					  'V', 'E', 'O', 'P', 'T', 0, 3 };
	struct nbd_srv *s = malloc(sizeof(*s));
	const uint8_t *o;
	size_t n;

	nbd_srv_init(s, &exp_rw, false);
	o = nbd_srv_out(s, &n);
	assert_int_equal(n, 18);
	assert_memory_equal(o, want, 18);
	nbd_srv_sent(s, 5);
	o = nbd_srv_out(s, &n);
	assert_int_equal(n, 13);
	assert_memory_equal(o, want + 5, 13);
	/* transmission from the first byte: nothing to say */
	nbd_srv_init(s, &exp_rw, true);
	nbd_srv_out(s, &n);
	assert_int_equal(n, 0);
	assert_int_equal(s->phase, NBD_PH_TRANSMISSION);
	free(s);
}

static void test_client_flags(void **st)
{
	struct nbd_srv *s = malloc(sizeof(*s));
	uint8_t b[4];
	size_t used;
	struct nbd_req r;

	nbd_srv_init(s, &exp_rw, false);
	put_be32(b, 4);	/* unknown */
	assert_int_equal(feed(s, b, 4, &used, &r), NBD_EV_ERROR);
	assert_non_null(strstr(nbd_srv_why(s), "client flags"));
	/* three bytes are not enough */
	nbd_srv_init(s, &exp_rw, false);
	put_be32(b, 3);
	assert_int_equal(nbd_srv_input(s, b, 3, &(enum nbd_ev){ 0 }, &r), 0);
	assert_int_equal(feed(s, b, 4, &used, &r), NBD_EV_MORE);
	assert_true(s->fixed && s->no_zeroes);
	free(s);
}

static void test_export_name(void **st)
{
	struct nbd_srv *s = malloc(sizeof(*s));
	uint8_t b[64];
	const uint8_t *o;
	size_t used, n, l;
	struct nbd_req r;

	/* zeroes wanted: size, flags, 124 zero bytes */
	start(s, &exp_rw, NBD_FLAG_C_FIXED_NEWSTYLE);
	l = opt(b, NBD_OPT_EXPORT_NAME, "d1", 2);
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_READY);
	assert_int_equal(used, l);
	o = nbd_srv_out(s, &n);
	assert_int_equal(n, 134);
	assert_true(get_be64(o) == exp_rw.size);
	assert_int_equal(get_be16(o + 8), exp_rw.tflags | NBD_FLAG_HAS_FLAGS);
	for (size_t i = 10; i < 134; i++)
		assert_int_equal(o[i], 0);
	/* NO_ZEROES; the empty name is the default export */
	start(s, &exp_rw, NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);
	l = opt(b, NBD_OPT_EXPORT_NAME, NULL, 0);
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_READY);
	nbd_srv_out(s, &n);
	assert_int_equal(n, 10);
	/* an unknown name can only be refused by hanging up */
	start(s, &exp_rw, NBD_FLAG_C_FIXED_NEWSTYLE);
	l = opt(b, NBD_OPT_EXPORT_NAME, "d2", 2);
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_ERROR);
	/* an old newstyle client (no FIXED) may still use EXPORT_NAME ... */
	start(s, &exp_rw, 0);
	l = opt(b, NBD_OPT_EXPORT_NAME, "d1", 2);
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_READY);
	/* ... but any other option ends it */
	start(s, &exp_rw, 0);
	l = opt(b, NBD_OPT_LIST, NULL, 0);
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_ERROR);
	free(s);
}

static void test_go_info(void **st)
{
	struct nbd_srv *s = malloc(sizeof(*s));
	uint8_t b[256], d[128];
	const uint16_t want[] = { NBD_INFO_NAME, NBD_INFO_DESCRIPTION, NBD_INFO_BLOCK_SIZE };
	const uint8_t *o, *p;
	uint32_t len;
	size_t used, n, l;
	struct nbd_req r;

	start(s, &exp_rw, NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);
	/* INFO: the answers, and no transmission yet */
	l = opt(b, NBD_OPT_INFO, d, go_data(d, "d1", want, 3));
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_MORE);
	o = nbd_srv_out(s, &n);
	p = rep(&o, NBD_OPT_INFO, NBD_REP_INFO, &len);
	assert_int_equal(len, 12);
	assert_int_equal(get_be16(p), NBD_INFO_EXPORT);
	assert_true(get_be64(p + 2) == exp_rw.size);
	assert_int_equal(get_be16(p + 10), exp_rw.tflags | NBD_FLAG_HAS_FLAGS);
	p = rep(&o, NBD_OPT_INFO, NBD_REP_INFO, &len);
	assert_int_equal(len, 4);
	assert_int_equal(get_be16(p), NBD_INFO_NAME);
	assert_memory_equal(p + 2, "d1", 2);
	p = rep(&o, NBD_OPT_INFO, NBD_REP_INFO, &len);
	assert_int_equal(get_be16(p), NBD_INFO_DESCRIPTION);
	assert_int_equal(len, 2 + strlen(exp_rw.description));
	p = rep(&o, NBD_OPT_INFO, NBD_REP_INFO, &len);
	assert_int_equal(len, 14);
	assert_int_equal(get_be16(p), NBD_INFO_BLOCK_SIZE);
	assert_int_equal(get_be32(p + 2), 512);
	assert_int_equal(get_be32(p + 6), 4096);
	assert_int_equal(get_be32(p + 10), 1u << 16);
	rep(&o, NBD_OPT_INFO, NBD_REP_ACK, &len);
	assert_int_equal(len, 0);
	assert_true(o == s->out + n);
	assert_int_equal(s->phase, NBD_PH_OPTIONS);
	nbd_srv_sent(s, n);

	/* an unknown export, then a malformed request: refusals, not the end */
	l = opt(b, NBD_OPT_GO, d, go_data(d, "nope", NULL, 0));
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_MORE);
	o = nbd_srv_out(s, &n);
	rep(&o, NBD_OPT_GO, NBD_REP_ERR_UNKNOWN, &len);
	nbd_srv_sent(s, n);
	l = go_data(d, "d1", want, 2);
	put_be16(d + 6, 9);	/* says 9 requests, carries 2 */
	l = opt(b, NBD_OPT_GO, d, (uint32_t)l);
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_MORE);
	o = nbd_srv_out(s, &n);
	rep(&o, NBD_OPT_GO, NBD_REP_ERR_INVALID, &len);
	nbd_srv_sent(s, n);
	put_be32(d, 1000);	/* name longer than the option */
	l = opt(b, NBD_OPT_GO, d, 10);
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_MORE);
	o = nbd_srv_out(s, &n);
	rep(&o, NBD_OPT_GO, NBD_REP_ERR_INVALID, &len);
	nbd_srv_sent(s, n);

	/* what we do not do: refused, the conversation goes on */
	l = opt(b, NBD_OPT_STRUCTURED_REPLY, NULL, 0);
	l += opt(b + l, NBD_OPT_STARTTLS, NULL, 0);
	l += opt(b + l, 77, "xyz", 3);
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_MORE);
	assert_int_equal(used, l);
	o = nbd_srv_out(s, &n);
	rep(&o, NBD_OPT_STRUCTURED_REPLY, NBD_REP_ERR_UNSUP, &len);
	rep(&o, NBD_OPT_STARTTLS, NBD_REP_ERR_UNSUP, &len);
	rep(&o, 77, NBD_REP_ERR_UNSUP, &len);
	nbd_srv_sent(s, n);

	/* LIST: our one export */
	l = opt(b, NBD_OPT_LIST, NULL, 0);
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_MORE);
	o = nbd_srv_out(s, &n);
	p = rep(&o, NBD_OPT_LIST, NBD_REP_SERVER, &len);
	assert_int_equal(len, 6);
	assert_int_equal(get_be32(p), 2);
	assert_memory_equal(p + 4, "d1", 2);
	rep(&o, NBD_OPT_LIST, NBD_REP_ACK, &len);
	nbd_srv_sent(s, n);
	l = opt(b, NBD_OPT_LIST, "x", 1);
	feed(s, b, l, &used, &r);
	o = nbd_srv_out(s, &n);
	rep(&o, NBD_OPT_LIST, NBD_REP_ERR_INVALID, &len);
	nbd_srv_sent(s, n);

	/* GO with the default export: transmission */
	l = opt(b, NBD_OPT_GO, d, go_data(d, "", NULL, 0));
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_READY);
	o = nbd_srv_out(s, &n);
	rep(&o, NBD_OPT_GO, NBD_REP_INFO, &len);
	rep(&o, NBD_OPT_GO, NBD_REP_INFO, &len);	/* BLOCK_SIZE, unasked */
	rep(&o, NBD_OPT_GO, NBD_REP_ACK, &len);
	assert_int_equal(s->phase, NBD_PH_TRANSMISSION);

	/* ABORT: ACK, then the end */
	start(s, &exp_rw, NBD_FLAG_C_FIXED_NEWSTYLE);
	l = opt(b, NBD_OPT_ABORT, NULL, 0);
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_CLOSE);
	o = nbd_srv_out(s, &n);
	rep(&o, NBD_OPT_ABORT, NBD_REP_ACK, &len);
	assert_int_equal(nbd_srv_input(s, b, 1, &(enum nbd_ev){ 0 }, &r), 0);

	/* a wrong magic ends it */
	start(s, &exp_rw, NBD_FLAG_C_FIXED_NEWSTYLE);
	l = opt(b, NBD_OPT_LIST, NULL, 0);
	b[0] ^= 1;
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_ERROR);
	assert_non_null(strstr(nbd_srv_why(s), "magic"));
	free(s);
}

static void test_too_big(void **st)
{
	struct nbd_srv *s = malloc(sizeof(*s));
	uint32_t big = NBD_OPT_DATA_MAX + 1000, len;
	uint8_t *b = calloc(1, 16 + big + 64);
	const uint8_t *o;
	size_t used, n, l, at = 0;
	struct nbd_req r;
	enum nbd_ev ev = NBD_EV_MORE;

	start(s, &exp_rw, NBD_FLAG_C_FIXED_NEWSTYLE);
	l = opt(b, NBD_OPT_INFO, b + 16, big);
	l += opt(b + l, NBD_OPT_LIST, NULL, 0);
	/* in pieces of 1000 bytes: the big one is dropped as it comes */
	while (at < l) {
		size_t piece = l - at < 1000 ? l - at : 1000;

		ev = feed(s, b + at, piece, &used, &r);
		at += used;
		if (used < piece) {	/* the LIST straddles: give it whole */
			ev = feed(s, b + at, l - at, &used, &r);
			at += used;
		}
	}
	assert_int_equal(ev, NBD_EV_MORE);
	o = nbd_srv_out(s, &n);
	rep(&o, NBD_OPT_INFO, NBD_REP_ERR_TOO_BIG, &len);
	rep(&o, NBD_OPT_LIST, NBD_REP_SERVER, &len);
	rep(&o, NBD_OPT_LIST, NBD_REP_ACK, &len);
	/* a too long EXPORT_NAME cannot be refused: the end */
	start(s, &exp_rw, NBD_FLAG_C_FIXED_NEWSTYLE);
	l = opt(b, NBD_OPT_EXPORT_NAME, b + 16, big);
	assert_int_equal(feed(s, b, l, &used, &r), NBD_EV_ERROR);
	free(b);
	free(s);
}

static void test_backpressure(void **st)
{
	struct nbd_srv *s = malloc(sizeof(*s));
	uint8_t b[16 * 400];
	size_t used, l = 0, at = 0, n;
	struct nbd_req r;
	enum nbd_ev ev;
	int blocked = 0;

	start(s, &exp_rw, NBD_FLAG_C_FIXED_NEWSTYLE);
	for (int i = 0; i < 400; i++)
		l += opt(b + l, NBD_OPT_LIST, NULL, 0);
	/* a client that never reads: the output stops growing */
	while (at < l) {
		size_t k = nbd_srv_input(s, b + at, l - at, &ev, &r);

		at += k;
		assert_true(s->outlen <= NBD_SRV_OUTBUF);
		if (ev == NBD_EV_BLOCKED) {
			assert_int_equal(k, 0);
			blocked++;
			nbd_srv_out(s, &n);
			nbd_srv_sent(s, n);
		}
	}
	assert_true(blocked > 0);
	(void)used;
	free(s);
}

static void go(struct nbd_srv *s, const struct nbd_export *e)
{
	nbd_srv_init(s, e, true);
}

static uint32_t req_err(struct nbd_srv *s, uint16_t flags, uint16_t type, uint64_t off,
			uint32_t len, struct nbd_req *r)
{
	uint8_t b[NBD_REQ_LEN];
	size_t used;

	nbd_req_encode(b, flags, type, 0x1122334455667788ull, off, len);
	assert_int_equal(feed(s, b, sizeof(b), &used, r), NBD_EV_REQ);
	assert_int_equal(used, NBD_REQ_LEN);
	assert_true(r->cookie == 0x1122334455667788ull);
	return r->err;
}

static void test_requests(void **st)
{
	struct nbd_srv *s = malloc(sizeof(*s));
	struct nbd_export ro = exp_rw, plain = exp_rw;
	struct nbd_req r;
	uint8_t b[NBD_REQ_LEN];
	size_t used;

	go(s, &exp_rw);
	assert_int_equal(req_err(s, 0, NBD_CMD_READ, 4096, 4096, &r), 0);
	assert_int_equal(r.payload, 0);
	assert_int_equal(req_err(s, NBD_CMD_FLAG_FUA, NBD_CMD_WRITE, 0, 512, &r), 0);
	assert_int_equal(r.payload, 512);
	/* the last sector, and one past it */
	assert_int_equal(req_err(s, 0, NBD_CMD_READ, (1u << 20) - 512, 512, &r), 0);
	assert_int_equal(req_err(s, 0, NBD_CMD_READ, 1u << 20, 512, &r), NBD_EINVAL);
	assert_int_equal(req_err(s, 0, NBD_CMD_WRITE, (1u << 20) - 512, 1024, &r), NBD_ENOSPC);
	assert_int_equal(r.payload, 1024);	/* still on the wire: the caller drops it */
	assert_int_equal(req_err(s, 0, NBD_CMD_WRITE_ZEROES, UINT64_MAX - 511, 1024, &r), NBD_ENOSPC);
	assert_int_equal(req_err(s, 0, NBD_CMD_TRIM, UINT64_MAX - 511, 1024, &r), NBD_EINVAL);
	/* alignment, length */
	assert_int_equal(req_err(s, 0, NBD_CMD_READ, 100, 512, &r), NBD_EINVAL);
	assert_int_equal(req_err(s, 0, NBD_CMD_READ, 0, 500, &r), NBD_EINVAL);
	assert_int_equal(req_err(s, 0, NBD_CMD_READ, 0, 0, &r), NBD_EINVAL);
	assert_int_equal(req_err(s, 0, NBD_CMD_READ, 0, (1u << 16) + 512, &r), NBD_EINVAL);
	/* trim and zeroes may go past the largest block */
	assert_int_equal(req_err(s, 0, NBD_CMD_TRIM, 0, 1u << 20, &r), 0);
	assert_int_equal(req_err(s, NBD_CMD_FLAG_NO_HOLE, NBD_CMD_WRITE_ZEROES, 0, 1u << 20, &r), 0);
	/* flags: FUA everywhere, NO_HOLE on zeroes only, nothing else */
	assert_int_equal(req_err(s, NBD_CMD_FLAG_NO_HOLE, NBD_CMD_WRITE, 0, 512, &r), NBD_EINVAL);
	assert_int_equal(req_err(s, NBD_CMD_FLAG_DF, NBD_CMD_READ, 0, 512, &r), NBD_EINVAL);
	assert_int_equal(req_err(s, 1u << 9, NBD_CMD_READ, 0, 512, &r), NBD_EINVAL);
	/* flush: offset and length are reserved */
	assert_int_equal(req_err(s, 0, NBD_CMD_FLUSH, 12345, 7, &r), 0);
	/* commands we do not offer */
	assert_int_equal(req_err(s, 0, NBD_CMD_CACHE, 0, 512, &r), NBD_EINVAL);
	assert_int_equal(req_err(s, 0, NBD_CMD_BLOCK_STATUS, 0, 512, &r), NBD_EINVAL);
	assert_int_equal(req_err(s, 0, 99, 0, 512, &r), NBD_EINVAL);
	plain.tflags = 0;
	go(s, &plain);
	assert_int_equal(req_err(s, 0, NBD_CMD_TRIM, 0, 512, &r), NBD_EINVAL);
	assert_int_equal(req_err(s, 0, NBD_CMD_WRITE_ZEROES, 0, 512, &r), NBD_EINVAL);
	/* read-only: every write refused, reads fine */
	ro.tflags |= NBD_FLAG_READ_ONLY;
	go(s, &ro);
	assert_int_equal(req_err(s, 0, NBD_CMD_WRITE, 0, 512, &r), NBD_EPERM);
	assert_int_equal(r.payload, 512);
	assert_int_equal(req_err(s, 0, NBD_CMD_TRIM, 0, 512, &r), NBD_EPERM);
	assert_int_equal(req_err(s, 0, NBD_CMD_WRITE_ZEROES, 0, 512, &r), NBD_EPERM);
	assert_int_equal(req_err(s, 0, NBD_CMD_READ, 0, 512, &r), 0);
	/* DISC ends it; so does a bad magic */
	nbd_req_encode(b, 0, NBD_CMD_DISC, 1, 0, 0);
	assert_int_equal(feed(s, b, sizeof(b), &used, &r), NBD_EV_DISC);
	assert_int_equal(nbd_srv_input(s, b, sizeof(b), &(enum nbd_ev){ 0 }, &r), 0);
	go(s, &exp_rw);
	nbd_req_encode(b, 0, NBD_CMD_READ, 1, 0, 512);
	b[3] ^= 0x40;
	assert_int_equal(feed(s, b, sizeof(b), &used, &r), NBD_EV_ERROR);
	/* 27 bytes: not yet */
	go(s, &exp_rw);
	nbd_req_encode(b, 0, NBD_CMD_READ, 1, 0, 512);
	assert_int_equal(feed(s, b, sizeof(b) - 1, &used, &r), NBD_EV_MORE);
	assert_int_equal(used, 0);
	free(s);
}

static void test_reply(void **st)
{
	uint8_t b[NBD_REPLY_LEN];
	static const uint8_t want[NBD_REPLY_LEN] = { 0x67, 0x44, 0x66, 0x98, 0, 0, 0, 5,
						     1, 2, 3, 4, 5, 6, 7, 8 };

	nbd_reply_hdr(b, NBD_EIO, 0x0102030405060708ull);
	assert_memory_equal(b, want, sizeof(want));
	assert_int_equal(nbd_errno(0), 0);
	assert_int_equal(nbd_errno(-EROFS), NBD_EPERM);
	assert_int_equal(nbd_errno(-EACCES), NBD_EPERM);
	assert_int_equal(nbd_errno(EINVAL), NBD_EINVAL);
	assert_int_equal(nbd_errno(-ENOSPC), NBD_ENOSPC);
	assert_int_equal(nbd_errno(-EOPNOTSUPP), NBD_ENOTSUP);
	assert_int_equal(nbd_errno(-ENOTCONN), NBD_EIO);
	assert_int_equal(nbd_errno(-ECONNABORTED), NBD_EIO);
	assert_string_equal(nbd_cmd_name(NBD_CMD_WRITE_ZEROES), "write-zeroes");
	assert_string_equal(nbd_cmd_name(1000), "unknown");
}

/* The same conversation in random pieces answers byte for byte the same. */
static void test_splits(void **st)
{
	struct nbd_srv *a = malloc(sizeof(*a)), *s = malloc(sizeof(*s));
	const uint16_t want[] = { NBD_INFO_NAME, NBD_INFO_BLOCK_SIZE };
	uint8_t b[1024], d[64], ref[4096], got[4096];
	const uint8_t *o;
	size_t l = 0, used, rl = 0, gl, n;
	unsigned seed = 12345;
	struct nbd_req r;

	put_be32(b, NBD_FLAG_C_FIXED_NEWSTYLE);
	l = 4;
	l += opt(b + l, NBD_OPT_LIST, NULL, 0);
	l += opt(b + l, NBD_OPT_INFO, d, go_data(d, "d1", want, 2));
	l += opt(b + l, 42, "junk", 4);
	l += opt(b + l, NBD_OPT_GO, d, go_data(d, "d1", want, 1));
	nbd_srv_init(a, &exp_rw, false);
	assert_int_equal(feed(a, b, l, &used, &r), NBD_EV_READY);
	assert_int_equal(used, l);
	o = nbd_srv_out(a, &rl);
	memcpy(ref, o, rl);
	for (int trial = 0; trial < 200; trial++) {
		size_t at = 0, have = 0;
		enum nbd_ev ev = NBD_EV_MORE;

		nbd_srv_init(s, &exp_rw, false);
		gl = 0;
		while (ev != NBD_EV_READY) {
			size_t k;

			/* the client's bytes arrive a few at a time */
			if (have < l && (ev == NBD_EV_MORE)) {
				seed = seed * 1103515245 + 12345;
				have += 1 + (seed >> 16) % 37;
				if (have > l)
					have = l;
			}
			k = nbd_srv_input(s, b + at, have - at, &ev, &r);
			at += k;
			assert_true(ev != NBD_EV_ERROR);
			o = nbd_srv_out(s, &n);
			memcpy(got + gl, o, n);
			gl += n;
			nbd_srv_sent(s, n);
		}
		assert_int_equal(at, l);
		assert_int_equal(gl, rl);
		assert_memory_equal(got, ref, rl);
	}
	free(a);
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_greeting),
		cmocka_unit_test(test_client_flags),
		cmocka_unit_test(test_export_name),
		cmocka_unit_test(test_go_info),
		cmocka_unit_test(test_too_big),
		cmocka_unit_test(test_backpressure),
		cmocka_unit_test(test_requests),
		cmocka_unit_test(test_reply),
		cmocka_unit_test(test_splits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
