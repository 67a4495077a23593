/* Port frame header codec: exact bytes, and every rule the decoder checks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "port/port.h"
#include "port/port_wire.h"

static void test_bytes(void **s)
{
	uint8_t b[PW_HDR_LEN + 8];
	static const uint8_t want[PW_HDR_LEN] = {
		PW_DATA, PW_FIRST, 1, 5,	/* type, flags, prio, size 5 (len 20) */
		0, 3, 0, 63,			/* src 3, dst 63 */
		0x01, 0x02, 0x03, 0x04,		/* seq */
		0, 0, 0, 20,			/* len */
		0, 0, 0, 0,			/* off */
		0, 0, 0, 0,			/* aux */
	};
	struct pw_hdr h = { .type = PW_DATA, .flags = PW_FIRST, .prio = 1, .arg = 5,
			    .src_port = 3, .dst_port = 63, .seq = 0x01020304, .len = 20 }, d;

	pw_encode(b, &h);
	assert_memory_equal(b, want, PW_HDR_LEN);
	assert_int_equal(pw_decode(b, PW_HDR_LEN + 8, &d), 0);
	assert_memory_equal(&d, &h, sizeof(h));
}

static void test_size_class(void **s)
{
	/* GM: ceil(log2(len + 8)), floor 4 */
	assert_int_equal(pw_size_for_len(0), 4);
	assert_int_equal(pw_size_for_len(8), 4);
	assert_int_equal(pw_size_for_len(9), 5);
	assert_int_equal(pw_size_for_len(24), 5);
	assert_int_equal(pw_size_for_len(25), 6);
	assert_int_equal(pw_size_for_len(65536), 17);
	assert_int_equal(pw_size_for_len((1ull << 31) - 8), 31);
	for (uint64_t l = 1; l < 100000; l += 37)
		assert_int_equal(pw_size_for_len(l), xp_min_size_for_length(l));
	assert_true(xp_max_length_for_size(5) >= 24 && xp_max_length_for_size(5) < 25);
}

static int dec(const struct pw_hdr *h, size_t plen)
{
	uint8_t b[PW_HDR_LEN + 64] = { 0 };
	struct pw_hdr d;

	pw_encode(b, h);
	return pw_decode(b, PW_HDR_LEN + plen, &d);
}

static void test_rejects(void **s)
{
	struct pw_hdr ok = { .type = PW_DATA, .flags = PW_FIRST | PW_LAST, .arg = 5, .len = 10 }, h;
	uint8_t b[PW_HDR_LEN] = { 0 };
	struct pw_hdr d;

	assert_int_equal(dec(&ok, 10), 0);
	assert_int_equal(pw_decode(b, PW_HDR_LEN - 1, &d), PW_E_SHORT);
	assert_int_equal(pw_decode(NULL, 100, &d), PW_E_SHORT);
	h = ok; h.type = 9;		assert_int_equal(dec(&h, 10), PW_E_TYPE);
	h = ok; h.type = 0;		assert_int_equal(dec(&h, 10), PW_E_TYPE);
	h = ok; h.flags |= 0x80;	assert_int_equal(dec(&h, 10), PW_E_FLAGS);
	h = ok; h.prio = 2;		assert_int_equal(dec(&h, 10), PW_E_PRIO);
	h = ok; h.src_port = 64;	assert_int_equal(dec(&h, 10), PW_E_PORT);
	h = ok; h.dst_port = 0xffff;	assert_int_equal(dec(&h, 10), PW_E_PORT);
	h = ok; h.arg = 6;		assert_int_equal(dec(&h, 10), PW_E_SIZE);	/* not len's class */
	h = ok; h.arg = 3;		assert_int_equal(dec(&h, 10), PW_E_SIZE);
	h = ok;				assert_int_equal(dec(&h, 11), PW_E_BOUNDS);	/* payload > len */
	h = ok;				assert_int_equal(dec(&h, 9), PW_E_BOUNDS);	/* LAST short */
	h = ok; h.flags = PW_FIRST; h.off = 1; assert_int_equal(dec(&h, 2), PW_E_BOUNDS);
	h = ok; h.flags = 0; h.off = 0xfffffff0u; assert_int_equal(dec(&h, 32), PW_E_BOUNDS); /* no wrap */
	h = ok; h.flags = PW_LAST | PW_SYNC; h.off = 5; assert_int_equal(dec(&h, 5), PW_E_FLAGS);
	h = ok; h.flags = 0; h.off = 2;	assert_int_equal(dec(&h, 0), PW_E_BOUNDS);	/* empty middle */
	h = ok; h.aux = 1;		assert_int_equal(dec(&h, 10), PW_E_RSVD);
	h.flags |= PW_ACKS;		assert_int_equal(dec(&h, 10), 0);	/* a ride-along ACK */
	h = ok; h.len = 0; h.arg = 4;	assert_int_equal(dec(&h, 0), 0);		/* empty message */
	h = ok; h.len = 0xffffffffu; h.arg = 31; assert_int_equal(dec(&h, 10), PW_E_SIZE);

	struct pw_hdr a = { .type = PW_ACK, .seq = 7 };
	assert_int_equal(dec(&a, 0), 0);
	assert_int_equal(dec(&a, 1), PW_E_BOUNDS);
	a.flags = PW_FIRST;		assert_int_equal(dec(&a, 0), PW_E_FLAGS);
	a.flags = 0; a.len = 1;		assert_int_equal(dec(&a, 0), PW_E_RSVD);
	struct pw_hdr ab = { .type = PW_ABORT, .seq = 3 };
	assert_int_equal(dec(&ab, 0), 0);
	assert_int_equal(dec(&ab, 1), PW_E_BOUNDS);
	ab.len = 1;			assert_int_equal(dec(&ab, 0), PW_E_RSVD);
	struct pw_hdr n = { .type = PW_NACK, .arg = PW_NACK_NOBUF };
	assert_int_equal(dec(&n, 0), 0);
	n.arg = 0;			assert_int_equal(dec(&n, 0), PW_E_REASON);
	n.arg = 4;			assert_int_equal(dec(&n, 0), PW_E_REASON);
	struct pw_hdr hl = { .type = PW_HELLO, .seq = PW_VERSION, .aux = PW_MAGIC };
	assert_int_equal(dec(&hl, 0), 0);
	hl.aux = 1;			assert_int_equal(dec(&hl, 0), PW_E_MAGIC);
	assert_string_equal(pw_strerror(PW_E_MAGIC), "not an xprt port peer (bad magic)");
}

/* Packs: frames back to back behind 2-byte lengths; the walk gives them
 * back exactly and stops at a cut one without reading past the end. */
static void test_pack(void **s)
{
	uint8_t b[256], hdr[PW_HDR_LEN];
	static const char pay[] = "abcdefgh";
	struct pw_hdr h = { .type = PW_DATA, .flags = PW_FIRST | PW_LAST, .arg = 4, .len = 8 };
	const uint8_t *fr;
	size_t len = 0, off = 0, flen;

	pw_encode(hdr, &h);
	len += pw_pack_put(b + len, hdr, pay, 8);
	len += pw_pack_put(b + len, hdr, NULL, 0);
	assert_int_equal(len, 2 * PW_PACK_LEN + 2 * PW_HDR_LEN + 8);
	assert_int_equal(b[0], 0);
	assert_int_equal(b[1], PW_HDR_LEN + 8);

	assert_int_equal(pw_pack_next(b, len, &off, &fr, &flen), 1);
	assert_ptr_equal(fr, b + PW_PACK_LEN);
	assert_int_equal(flen, PW_HDR_LEN + 8);
	assert_memory_equal(fr + PW_HDR_LEN, pay, 8);
	assert_int_equal(pw_pack_next(b, len, &off, &fr, &flen), 1);
	assert_int_equal(flen, PW_HDR_LEN);
	assert_int_equal(pw_pack_next(b, len, &off, &fr, &flen), 0);
	assert_int_equal(off, len);

	/* every cut of the pack: whole frames, then an error (never a
	 * frame that reaches past the cut) */
	for (size_t cut = 1; cut < len; cut++) {
		int rc, n = 0;

		off = 0;
		while ((rc = pw_pack_next(b, cut, &off, &fr, &flen)) == 1) {
			assert_true(fr + flen <= b + cut);
			n++;
		}
		assert_int_equal(rc, cut == PW_PACK_LEN + PW_HDR_LEN + 8 ? 0 : PW_E_SHORT);
		assert_int_equal(n, cut >= PW_PACK_LEN + PW_HDR_LEN + 8);
	}
	/* a length shorter than a header */
	b[0] = 0;
	b[1] = PW_HDR_LEN - 1;
	off = 0;
	assert_int_equal(pw_pack_next(b, len, &off, &fr, &flen), PW_E_SHORT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bytes),
		cmocka_unit_test(test_size_class),
		cmocka_unit_test(test_rejects),
		cmocka_unit_test(test_pack),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
