/* The port engine driven directly: two engines wired back to back by a
 * test pump, scripted times, every GM rule checked as the user sees it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "port/port_eng.h"
#include "port/port_wire.h"

#define US 1000ull
#define MS 1000000ull

struct done { void *ctx; enum xp_status st; };
static struct done dn[1024];
static unsigned ndone;

static void cb(struct xp_port *p, void *ctx, enum xp_status st)
{
	dn[ndone].ctx = ctx;
	dn[ndone].st = st;
	ndone++;
}

/* Runs the due callbacks of `port` as the host's xp_unknown() would. */
static unsigned reap(struct pe_eng *e, unsigned port)
{
	struct pe_done d;
	unsigned n = 0;

	while (pe_next_completion(e, port, &d)) {
		d.cb(NULL, d.ctx, d.status);
		n++;
	}
	return n;
}

struct pair {
	struct pe_eng *a, *b;
	unsigned lanes;
};

static struct pair mk(unsigned lanes, uint32_t frag, const struct pe_opts *o)
{
	struct pair p = { pe_new(o), pe_new(o), lanes };

	assert_non_null(p.a);
	assert_non_null(p.b);
	assert_int_equal(pe_node_add(p.a, lanes, frag), 1);
	assert_int_equal(pe_node_add(p.b, lanes, frag), 1);
	ndone = 0;
	return p;
}

static void rm(struct pair *p)
{
	pe_free(p->a);
	pe_free(p->b);
}

/* Moves every frame one way; frames are "transmitted" at once. */
static int move(struct pe_eng *from, struct pe_eng *to, unsigned lanes, uint64_t now)
{
	struct pe_frame f;
	uint8_t buf[PW_HDR_LEN + 4096];
	char why[200];
	int n = 0;

	for (unsigned l = 0; l < lanes; l++)
		while (pe_pull(from, 1, l, &f)) {
			memcpy(buf, f.hdr, PW_HDR_LEN);
			if (f.dlen)
				memcpy(buf + PW_HDR_LEN, f.data, f.dlen);
			pe_frame_done(from, f.ref);
			assert_int_equal(pe_input(to, 1, buf, PW_HDR_LEN + f.dlen, now, why,
						  sizeof(why)), 0);
			n++;
		}
	return n;
}

/* One frame from `from` into `to` (at time 0), given back to `from`. */
static void deliver(struct pe_eng *from, struct pe_eng *to, struct pe_frame *f)
{
	uint8_t buf[PW_HDR_LEN + 4096];
	char why[200];

	memcpy(buf, f->hdr, PW_HDR_LEN);
	if (f->dlen)
		memcpy(buf + PW_HDR_LEN, f->data, f->dlen);
	pe_frame_done(from, f->ref);
	assert_int_equal(pe_input(to, 1, buf, PW_HDR_LEN + f->dlen, 0, why, sizeof(why)), 0);
}

static void pump(struct pair *p, uint64_t now)
{
	pe_timers(p->a, now);
	pe_timers(p->b, now);
	while (move(p->a, p->b, p->lanes, now) + move(p->b, p->a, p->lanes, now))
		;
}

static void test_basic_tokens_order(void **s)
{
	struct pe_opts o = { .send_tokens = 4, .recv_tokens = 4 };
	struct pair p = mk(2, 16, &o);
	char m1[] = "hello", m2[100], m3[40];
	char b[3][128];
	struct xp_event ev;

	memset(m2, 'x', sizeof(m2));
	memset(m3, 'y', sizeof(m3));
	assert_int_equal(pe_port_open(p.a, 2), 0);
	assert_int_equal(pe_port_open(p.b, 7), 0);
	assert_int_equal(pe_send_tokens(p.a, 2), 4);
	assert_int_equal(pe_provide(p.b, 7, b[0], 4, XP_LOW), 0);	/* 5 bytes: class 4 */
	assert_int_equal(pe_provide(p.b, 7, b[1], 7, XP_LOW), 0);	/* 100: class 7 */
	assert_int_equal(pe_provide(p.b, 7, b[2], 6, XP_LOW), 0);	/* 40: class 6 */
	assert_int_equal(pe_recv_tokens(p.b, 7), 1);
	assert_int_equal(pe_send(p.a, 2, 1, 7, XP_LOW, m1, 5, cb, (void *)1), 0);
	assert_int_equal(pe_send(p.a, 2, 1, 7, XP_LOW, m2, 100, cb, (void *)2), 0);
	assert_int_equal(pe_send(p.a, 2, 1, 7, XP_LOW, m3, 40, cb, (void *)3), 0);
	assert_int_equal(pe_send_tokens(p.a, 2), 1);
	pump(&p, 0);
	/* tokens come back only with the callbacks */
	assert_int_equal(pe_send_tokens(p.a, 2), 1);
	assert_int_equal(reap(p.a, 2), 3);
	assert_int_equal(pe_send_tokens(p.a, 2), 4);
	for (unsigned i = 0; i < 3; i++) {
		assert_ptr_equal(dn[i].ctx, (void *)(uintptr_t)(i + 1));
		assert_int_equal(dn[i].st, XP_SUCCESS);
	}
	/* events in stream order, into the buffer of the right class */
	assert_int_equal(pe_next_event(p.b, 7, &ev), 1);
	assert_int_equal(ev.type, XP_RECV_EVENT);
	assert_ptr_equal(ev.buffer, b[0]);
	assert_int_equal(ev.length, 5);
	assert_int_equal(ev.size, 4);
	assert_int_equal(ev.sender_node, 1);
	assert_int_equal(ev.sender_port, 2);
	assert_memory_equal(b[0], "hello", 5);
	assert_int_equal(pe_recv_tokens(p.b, 7), 2);
	assert_int_equal(pe_next_event(p.b, 7, &ev), 1);
	assert_ptr_equal(ev.buffer, b[1]);
	assert_int_equal(ev.length, 100);
	assert_memory_equal(b[1], m2, 100);
	assert_int_equal(pe_next_event(p.b, 7, &ev), 1);
	assert_ptr_equal(ev.buffer, b[2]);
	assert_memory_equal(b[2], m3, 40);
	assert_int_equal(pe_next_event(p.b, 7, &ev), 0);
	assert_int_equal(ev.type, XP_NO_EVENT);
	assert_int_equal(pe_recv_tokens(p.b, 7), 4);

	struct xp_port_stats st;
	pe_port_stats(p.a, 2, &st);
	assert_int_equal(st.sent_msgs, 3);
	assert_int_equal(st.sent_bytes, 145);
	pe_port_stats(p.b, 7, &st);
	assert_int_equal(st.recv_msgs, 3);
	rm(&p);
}

/* A receive-token count that is not a power of two (the event ring is
 * then larger than the count): events keep their order and contents as
 * the ring wraps many times. */
static void test_odd_token_ring(void **s)
{
	struct pe_opts o = { .send_tokens = 3, .recv_tokens = 3 };
	struct pair p = mk(2, 16, &o);
	char b[3][32], m[3][8];
	struct xp_event ev;

	assert_int_equal(pe_port_open(p.a, 2), 0);
	assert_int_equal(pe_port_open(p.b, 7), 0);
	for (unsigned round = 0; round < 10; round++) {
		for (unsigned i = 0; i < 3; i++) {
			assert_int_equal(pe_provide(p.b, 7, b[i], 4, XP_LOW), 0);
			memset(m[i], 'a' + (int)((round * 3 + i) % 26), sizeof(m[i]));
			assert_int_equal(pe_send(p.a, 2, 1, 7, XP_LOW, m[i], 1 + i, cb, NULL), 0);
		}
		pump(&p, 0);
		assert_int_equal(reap(p.a, 2), 3);
		for (unsigned i = 0; i < 3; i++) {
			assert_int_equal(pe_next_event(p.b, 7, &ev), 1);
			/* the buffer provided last is filled first */
			assert_ptr_equal(ev.buffer, b[2 - i]);
			assert_int_equal(ev.length, 1 + i);
			assert_memory_equal(ev.buffer, m[i], 1 + i);
		}
		assert_int_equal(pe_next_event(p.b, 7, &ev), 0);
	}
	rm(&p);
}

static void test_token_limits(void **s)
{
	struct pe_opts o = { .send_tokens = 2, .recv_tokens = 2, .max_msg = 1000 };
	struct pair p = mk(2, 64, &o);
	char b[64];

	assert_int_equal(pe_port_open(p.a, 0), 0);
	assert_int_equal(pe_port_open(p.a, 0), -EBUSY);
	assert_int_equal(pe_port_open(p.a, 64), -EINVAL);
	assert_int_equal(pe_send(p.a, 0, 1, 0, XP_LOW, b, 1001, cb, NULL), -EMSGSIZE);
	assert_int_equal(pe_send(p.a, 0, 2, 0, XP_LOW, b, 1, cb, NULL), -ENOENT);
	assert_int_equal(pe_send(p.a, 0, 1, 64, XP_LOW, b, 1, cb, NULL), -EINVAL);
	assert_int_equal(pe_send(p.a, 0, 1, 0, 2, b, 1, cb, NULL), -EINVAL);
	assert_int_equal(pe_send(p.a, 1, 1, 0, XP_LOW, b, 1, cb, NULL), -EINVAL);	/* not open */
	assert_int_equal(pe_send(p.a, 0, 1, 0, XP_LOW, b, 1, cb, NULL), 0);
	assert_int_equal(pe_send(p.a, 0, 1, 0, XP_LOW, b, 1, cb, NULL), 0);
	assert_int_equal(pe_send(p.a, 0, 1, 0, XP_LOW, b, 1, cb, NULL), -EAGAIN);
	assert_int_equal(pe_provide(p.a, 0, b, 3, XP_LOW), -EINVAL);
	assert_int_equal(pe_provide(p.a, 0, b, 32, XP_LOW), -EINVAL);
	assert_int_equal(pe_provide(p.a, 0, b, 5, XP_LOW), 0);
	assert_int_equal(pe_provide(p.a, 0, b, 5, XP_HIGH), 0);
	assert_int_equal(pe_provide(p.a, 0, b, 5, XP_LOW), -EAGAIN);
	rm(&p);
}

/* A buffer of another class is not used: NOBUF, retried after the backoff,
 * delivered once the right buffer is there. */
static void test_nobuf_retry(void **s)
{
	struct pe_opts o = { .send_timeout_ns = 100 * MS };
	struct pair p = mk(1, 8, &o);
	char msg[20] = "0123456789abcdefghi", wrong[64], right[64];
	struct xp_event ev;
	struct xp_port_stats st;

	pe_port_open(p.a, 1);
	pe_port_open(p.b, 2);
	assert_int_equal(pe_provide(p.b, 2, wrong, 6, XP_LOW), 0);
	assert_int_equal(pe_provide(p.b, 2, right, 5, XP_HIGH), 0);	/* other prio */
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, msg, 20, cb, NULL), 0);
	pump(&p, 1000);
	assert_int_equal(pe_next_event(p.b, 2, &ev), 0);
	assert_int_equal(reap(p.a, 1), 0);
	pe_port_stats(p.a, 1, &st);
	assert_int_equal(st.nacks_nobuf, 1);
	/* backoff: nothing goes before 100 us */
	assert_int_equal(pe_next_timer(p.a), 1000 + 100 * US);
	assert_false(pe_has_tx(p.a, 1, 0));
	pump(&p, 1000 + 99 * US);
	pe_port_stats(p.a, 1, &st);
	assert_int_equal(st.nacks_nobuf, 1);
	pump(&p, 1000 + 100 * US);	/* retry, refused again, backoff doubles */
	pe_port_stats(p.a, 1, &st);
	assert_int_equal(st.nacks_nobuf, 2);
	assert_int_equal(pe_next_timer(p.a), 1000 + 300 * US);
	assert_int_equal(pe_provide(p.b, 2, right, 5, XP_LOW), 0);
	pump(&p, 1000 + 300 * US);
	assert_int_equal(pe_next_event(p.b, 2, &ev), 1);
	assert_ptr_equal(ev.buffer, right);
	assert_memory_equal(right, msg, 20);
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[0].st, XP_SUCCESS);
	assert_int_equal(pe_next_timer(p.a), UINT64_MAX);
	rm(&p);
}

/* A send timeout of "never" (UINT64_MAX) never passes: no deadline
 * wrapped round to one passed already.  The sender retries with its
 * backoff and the message goes once a buffer is there. */
static void test_timeout_never(void **s)
{
	struct pe_opts o = { .send_timeout_ns = UINT64_MAX };
	struct pair p = mk(1, 8, &o);
	char msg[16] = "patient", right[64];
	struct xp_event ev;
	uint64_t t = 1000;

	pe_port_open(p.a, 1);
	pe_port_open(p.b, 2);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, msg, 8, cb, NULL), 0);
	for (int i = 0; i < 40; i++) {
		pump(&p, t);
		assert_int_equal(reap(p.a, 1), 0);
		assert_true(pe_next_timer(p.a) > t);
		t = pe_next_timer(p.a);
	}
	assert_int_equal(pe_provide(p.b, 2, right, 4, XP_LOW), 0);
	pump(&p, t);
	assert_int_equal(pe_next_event(p.b, 2, &ev), 1);
	assert_string_equal(right, "patient");
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[0].st, XP_SUCCESS);
	rm(&p);
}

/* No buffer for send_timeout: TIMED_OUT, the stream stops (a later send
 * waits, its token stays out) until resume; drop gives DROPPED. */
static void test_timeout_resume_drop(void **s)
{
	struct pe_opts o = { .send_timeout_ns = 10 * MS, .send_tokens = 8 };
	struct pair p = mk(2, 8, &o);
	char m[3][16] = { "first", "second", "third" }, b[2][64];
	struct xp_event ev;
	uint64_t t = 0;

	pe_port_open(p.a, 1);
	pe_port_open(p.b, 2);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, m[0], 6, cb, (void *)0), 0);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, m[1], 7, cb, (void *)1), 0);
	while (ndone == 0 && t < 50 * MS) {
		pump(&p, t);
		reap(p.a, 1);
		t += 500 * US;
	}
	assert_int_equal(ndone, 1);
	assert_ptr_equal(dn[0].ctx, (void *)0);
	assert_int_equal(dn[0].st, XP_SEND_TIMED_OUT);
	if (!(t >= 10 * MS && t <= 11 * MS)) fail_msg("t=%llu", (unsigned long long)t);
	assert_int_equal(pe_send_tokens(p.a, 1), 7);	/* "second" still out */
	/* stopped: even with a buffer now, "second" waits */
	pe_provide(p.b, 2, b[0], 4, XP_LOW);
	pump(&p, t += 100 * MS);
	assert_int_equal(pe_next_event(p.b, 2, &ev), 0);
	assert_int_equal(reap(p.a, 1), 0);
	pe_resume(p.a, 1, XP_LOW, 1, 2);
	pump(&p, t);
	assert_int_equal(pe_next_event(p.b, 2, &ev), 1);
	assert_string_equal(ev.buffer, "second");
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[1].st, XP_SUCCESS);

	/* the same again, then drop */
	ndone = 0;
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, m[0], 6, cb, (void *)0), 0);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, m[2], 6, cb, (void *)2), 0);
	for (uint64_t end = t + 20 * MS; t < end; t += 500 * US) {
		pump(&p, t);
		reap(p.a, 1);
	}
	assert_int_equal(ndone, 1);
	assert_int_equal(dn[0].st, XP_SEND_TIMED_OUT);
	pe_drop(p.a, 1, XP_LOW, 1, 2);
	assert_int_equal(reap(p.a, 1), 1);
	assert_ptr_equal(dn[1].ctx, (void *)2);
	assert_int_equal(dn[1].st, XP_SEND_DROPPED);
	assert_int_equal(pe_send_tokens(p.a, 1), 8);
	/* after a drop the stream runs again (its next message is SYNCed) */
	pe_provide(p.b, 2, b[0], 4, XP_LOW);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, m[2], 6, cb, (void *)3), 0);
	pump(&p, t);
	assert_int_equal(pe_next_event(p.b, 2, &ev), 1);
	assert_string_equal(ev.buffer, "third");
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[2].st, XP_SUCCESS);
	rm(&p);
}

static void test_closed_rejected(void **s)
{
	struct pair p = mk(2, 32, NULL);
	char m[8] = "abc", b[64];
	struct xp_event ev;

	pe_port_open(p.a, 1);
	pe_port_open(p.b, 3);
	/* port 2 is not open there */
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, m, 4, cb, (void *)1), 0);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, m, 4, cb, (void *)2), 0);
	pump(&p, 0);
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[0].st, XP_SEND_TARGET_PORT_CLOSED);
	/* the second waits on the stopped stream until it is opened + resumed */
	pe_port_open(p.b, 2);
	pe_provide(p.b, 2, b, 4, XP_LOW);
	pump(&p, 0);
	assert_int_equal(reap(p.a, 1), 0);
	pe_resume(p.a, 1, XP_LOW, 1, 2);
	pump(&p, 0);
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[1].st, XP_SUCCESS);
	assert_int_equal(pe_next_event(p.b, 2, &ev), 1);

	/* size class 4 not acceptable at high priority on port 3 */
	pe_set_acceptable(p.b, 3, XP_HIGH, ~(1ull << 4));
	pe_provide(p.b, 3, b, 4, XP_HIGH);
	assert_int_equal(pe_send(p.a, 1, 1, 3, XP_HIGH, m, 4, cb, (void *)3), 0);
	pump(&p, 0);
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[2].st, XP_SEND_REJECTED);
	assert_int_equal(pe_next_event(p.b, 3, &ev), 0);
	struct xp_port_stats st;
	pe_port_stats(p.a, 1, &st);
	assert_int_equal(st.send_failures, 2);
	rm(&p);
}

/* seed 001: priorities never block each other. */
static void test_priorities(void **s)
{
	struct pair p = mk(1, 16, NULL);	/* one shared lane, like shm */
	static char big[16 * 10], hi[4] = "hi!";
	char b[256], hb[64];
	struct pe_frame f;
	struct pw_hdr h;
	struct xp_event ev;

	pe_port_open(p.a, 1);
	pe_port_open(p.b, 2);
	pe_provide(p.b, 2, b, 8, XP_LOW);
	pe_provide(p.b, 2, hb, 4, XP_HIGH);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, big, sizeof(big), cb, NULL), 0);
	assert_int_equal(pe_pull(p.a, 1, 0, &f), 1);	/* first low fragment out */
	pe_frame_done(p.a, f.ref);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_HIGH, hi, 4, cb, NULL), 0);
	assert_int_equal(pe_pull(p.a, 1, 0, &f), 1);
	pe_frame_done(p.a, f.ref);
	assert_int_equal(pw_decode(f.hdr, PW_HDR_LEN + f.dlen, &h), 0);
	assert_int_equal(h.prio, 1);	/* the high message jumps the low fragments */
	assert_true(h.flags & PW_FIRST && h.flags & PW_LAST);
	assert_int_equal(pe_pull(p.a, 1, 0, &f), 1);
	pe_frame_done(p.a, f.ref);
	assert_int_equal(pw_decode(f.hdr, PW_HDR_LEN + f.dlen, &h), 0);
	assert_int_equal(h.prio, 0);
	assert_int_equal(h.off, 16);
	rm(&p);

	/* a stopped low stream does not stop the high one to the same port */
	p = mk(2, 16, NULL);
	pe_port_open(p.a, 1);
	pe_port_open(p.b, 2);
	pe_set_acceptable(p.b, 2, XP_LOW, 0);
	pe_provide(p.b, 2, hb, 4, XP_HIGH);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, hi, 4, cb, (void *)1), 0);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, hi, 4, cb, (void *)2), 0);
	pump(&p, 0);
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[0].st, XP_SEND_REJECTED);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_HIGH, hi, 4, cb, (void *)3), 0);
	pump(&p, 0);
	assert_int_equal(reap(p.a, 1), 1);
	assert_ptr_equal(dn[1].ctx, (void *)3);
	assert_int_equal(dn[1].st, XP_SUCCESS);
	assert_int_equal(pe_next_event(p.b, 2, &ev), 1);
	assert_int_equal(ev.type, XP_HIGH_RECV_EVENT);
	assert_int_equal(ev.prio, XP_HIGH);
	rm(&p);
}

/* Streams of one priority share a lane fragment by fragment. */
static void test_round_robin(void **s)
{
	struct pair p = mk(2, 8, NULL);
	static char x[32], y[32];
	struct pe_frame f;
	struct pw_hdr h;
	unsigned order[4];

	pe_port_open(p.a, 1);
	pe_send(p.a, 1, 1, 5, XP_LOW, x, 32, cb, NULL);
	pe_send(p.a, 1, 1, 6, XP_LOW, y, 32, cb, NULL);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pe_pull(p.a, 1, 0, &f), 1);
		pe_frame_done(p.a, f.ref);
		pw_decode(f.hdr, PW_HDR_LEN + f.dlen, &h);
		order[i] = h.dst_port;
	}
	assert_int_equal(order[0], 5);
	assert_int_equal(order[1], 6);
	assert_int_equal(order[2], 5);
	assert_int_equal(order[3], 6);
	assert_int_equal(pe_pull(p.a, 1, 1, &f), 0);	/* nothing on the high lane */
	rm(&p);
}

/* Completion waits until the transport let go of every frame. */
static void test_refs_hold_completion(void **s)
{
	struct pair p = mk(2, 8, NULL);
	char m[16] = "0123456789abcde", b[64], why[100];
	struct pe_frame f[2];
	uint8_t w[2][PW_HDR_LEN + 8];

	pe_port_open(p.a, 1);
	pe_port_open(p.b, 2);
	pe_provide(p.b, 2, b, 5, XP_LOW);
	pe_send(p.a, 1, 1, 2, XP_LOW, m, 16, cb, NULL);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pe_pull(p.a, 1, 0, &f[i]), 1);
		memcpy(w[i], f[i].hdr, PW_HDR_LEN);
		memcpy(w[i] + PW_HDR_LEN, f[i].data, f[i].dlen);
		assert_int_equal(pe_input(p.b, 1, w[i], PW_HDR_LEN + 8, 0, why, sizeof(why)), 0);
	}
	assert_int_equal(pe_port_refs(p.a, 1), 2);
	pump(&p, 0);			/* the ACK comes back */
	assert_int_equal(reap(p.a, 1), 0);
	pe_frame_done(p.a, f[0].ref);
	assert_int_equal(reap(p.a, 1), 0);
	pe_frame_done(p.a, f[1].ref);
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[0].st, XP_SUCCESS);
	/* completions keep their order: a message the transport is done
	 * with waits behind an earlier one it still holds */
	ndone = 0;
	assert_int_equal(pe_provide(p.b, 2, b, 4, XP_LOW), 0);
	assert_int_equal(pe_provide(p.b, 2, b + 32, 4, XP_LOW), 0);
	pe_send(p.a, 1, 1, 2, XP_LOW, m, 8, cb, (void *)1);
	pe_send(p.a, 1, 1, 2, XP_LOW, m, 3, cb, (void *)2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pe_pull(p.a, 1, 0, &f[i]), 1);
		memcpy(w[i], f[i].hdr, PW_HDR_LEN);
		memcpy(w[i] + PW_HDR_LEN, f[i].data, f[i].dlen);
		assert_int_equal(pe_input(p.b, 1, w[i], PW_HDR_LEN + f[i].dlen, 0, why,
					  sizeof(why)), 0);
	}
	pe_frame_done(p.a, f[1].ref);	/* the second first */
	pump(&p, 0);			/* one ACK for both */
	assert_int_equal(reap(p.a, 1), 0);
	pe_frame_done(p.a, f[0].ref);
	assert_int_equal(reap(p.a, 1), 2);
	assert_ptr_equal(dn[0].ctx, (void *)1);
	assert_ptr_equal(dn[1].ctx, (void *)2);
	rm(&p);
}

static void test_node_down(void **s)
{
	struct pair p = mk(2, 8, NULL);
	char m[32] = { 0 }, b[64];
	struct pe_frame f;

	pe_port_open(p.a, 1);
	pe_port_open(p.b, 2);
	pe_provide(p.b, 2, b, 6, XP_LOW);
	pe_send(p.a, 1, 1, 2, XP_LOW, m, 32, cb, (void *)1);
	assert_int_equal(pe_pull(p.a, 1, 0, &f), 1);	/* a frame in flight */
	pe_node_down(p.a, 1);
	assert_false(pe_node_up(p.a, 1));
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[0].st, XP_SEND_TARGET_NODE_UNREACHABLE);
	assert_int_equal(pe_port_refs(p.a, 1), 0);
	/* later sends complete the same way; it is not an error at the call */
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, m, 3, cb, (void *)2), 0);
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[1].st, XP_SEND_TARGET_NODE_UNREACHABLE);
	assert_int_equal(pe_pull(p.a, 1, 0, &f), 0);
	/* a new link gets a new id */
	assert_int_equal(pe_node_add(p.a, 2, 8), 2);
	rm(&p);
}

/* The receiver closes its port in the middle of a message: the sender
 * learns CLOSED, nothing lands in the buffer afterwards. */
static void test_close_mid_message(void **s)
{
	struct pair p = mk(2, 8, NULL);
	char m[32], b[64];
	struct pe_frame f;
	uint8_t w[PW_HDR_LEN + 8];
	char why[100];

	memset(m, 'q', sizeof(m));
	memset(b, 0, sizeof(b));
	pe_port_open(p.a, 1);
	pe_port_open(p.b, 2);
	pe_provide(p.b, 2, b, 6, XP_LOW);
	pe_send(p.a, 1, 1, 2, XP_LOW, m, 32, cb, NULL);
	assert_int_equal(pe_pull(p.a, 1, 0, &f), 1);
	memcpy(w, f.hdr, PW_HDR_LEN);
	memcpy(w + PW_HDR_LEN, f.data, 8);
	pe_frame_done(p.a, f.ref);
	assert_int_equal(pe_input(p.b, 1, w, sizeof(w), 0, why, sizeof(why)), 0);
	pe_port_close(p.b, 2);
	pump(&p, 0);
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[0].st, XP_SEND_TARGET_PORT_CLOSED);
	assert_int_equal(b[8], 0);
	rm(&p);
}

/* The sender drops a message after its first fragment went out: a
 * PW_ABORT gives the receiver's buffer back to its port (it used to stay
 * held until the stream's next message), and the stream goes on. */
static void test_drop_mid_message_frees_buffer(void **s)
{
	struct pair p = mk(2, 8, NULL);
	char m[32], b[64];
	struct pe_frame f;
	struct pw_hdr h;
	struct xp_event ev;
	uint8_t w[PW_HDR_LEN + 8];
	char why[100];

	memset(m, 'q', sizeof(m));
	pe_port_open(p.a, 1);
	pe_port_open(p.b, 2);
	assert_int_equal(pe_provide(p.b, 2, b, 6, XP_LOW), 0);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, m, 32, cb, NULL), 0);
	assert_int_equal(pe_pull(p.a, 1, 0, &f), 1);	/* 8 of 32 bytes */
	memcpy(w, f.hdr, PW_HDR_LEN);
	memcpy(w + PW_HDR_LEN, f.data, 8);
	pe_frame_done(p.a, f.ref);
	assert_int_equal(pe_input(p.b, 1, w, sizeof(w), 0, why, sizeof(why)), 0);
	pe_drop(p.a, 1, XP_LOW, 1, 2);
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[0].st, XP_SEND_DROPPED);
	/* what goes next is the abort of that message */
	assert_int_equal(pe_pull(p.a, 1, 0, &f), 1);
	assert_int_equal(pw_decode(f.hdr, PW_HDR_LEN, &h), 0);
	assert_int_equal(h.type, PW_ABORT);
	assert_int_equal(h.seq, 0);
	assert_int_equal(pe_input(p.b, 1, f.hdr, PW_HDR_LEN, 0, why, sizeof(why)), 0);
	/* b's one buffer takes the next message (it would have been refused
	 * for want of a buffer while held) */
	memcpy(m, "next", 4);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, m, 32, cb, NULL), 0);
	pump(&p, 0);
	assert_int_equal(pe_next_event(p.b, 2, &ev), 1);
	assert_ptr_equal(ev.buffer, b);
	assert_int_equal(ev.length, 32);
	assert_memory_equal(b, m, 32);
	assert_int_equal(reap(p.a, 1), 1);
	assert_int_equal(dn[1].st, XP_SUCCESS);
	rm(&p);
}

static char last_why[200];

static int input_hdr(struct pe_eng *e, const struct pw_hdr *h, const void *pl, uint32_t plen)
{
	uint8_t w[PW_HDR_LEN + 64];

	pw_encode(w, h);
	if (plen)
		memcpy(w + PW_HDR_LEN, pl, plen);
	last_why[0] = 0;
	return pe_input(e, 1, w, PW_HDR_LEN + plen, 0, last_why, sizeof(last_why));
}

/* A peer that breaks the protocol is cut off; memory is never touched
 * outside the buffer. */
static void test_protocol_errors(void **s)
{
	struct pair p = mk(2, 8, NULL);
	uint8_t junk[40], b[64 + 16];
	char why[200];
	struct pw_hdr h = { .type = PW_DATA, .flags = PW_FIRST | PW_SYNC, .arg = 5, .len = 24,
			    .src_port = 1, .dst_port = 2 };

	memset(junk, 0xee, sizeof(junk));
	memset(b, 0xaa, sizeof(b));
	pe_port_open(p.b, 2);
	pe_provide(p.b, 2, b + 8, 5, XP_LOW);	/* holds 24 bytes */
	assert_int_equal(pe_input(p.b, 1, junk, sizeof(junk), 0, why, sizeof(why)), -EPROTO);
	assert_non_null(strstr(why, "bad frame"));
	/* a stream that starts without SYNC */
	h.flags = PW_FIRST;
	assert_int_equal(input_hdr(p.b, &h, junk, 8), -EPROTO);
	h.flags = PW_FIRST | PW_SYNC;
	if (input_hdr(p.b, &h, junk, 8))
		fail_msg("%s", last_why);
	/* a gap */
	h.flags = 0;
	h.off = 16;
	assert_int_equal(input_hdr(p.b, &h, junk, 8), -EPROTO);
	h.off = 8;
	h.len = 20;	/* length changed mid-message */
	h.arg = 5;
	assert_int_equal(input_hdr(p.b, &h, junk, 8), -EPROTO);
	h.len = 24;
	assert_int_equal(input_hdr(p.b, &h, junk, 8), 0);
	/* a new message inside one, without SYNC */
	h.flags = PW_FIRST;
	h.off = 0;
	h.seq = 1;
	assert_int_equal(input_hdr(p.b, &h, junk, 8), -EPROTO);
	/* an ACK for something never sent */
	struct pw_hdr a = { .type = PW_ACK, .src_port = 2, .dst_port = 1, .seq = 5 };
	pe_port_open(p.b, 1);
	assert_int_equal(input_hdr(p.a, &a, NULL, 0), 0);	/* unknown stream: ignored */
	for (int i = 0; i < 8; i++)
		assert_int_equal(b[i], 0xaa);
	for (int i = 8 + 24; i < (int)sizeof(b); i++)
		assert_int_equal(b[i], 0xaa);
	rm(&p);
}

static void test_empty_message(void **s)
{
	struct pair p = mk(2, 8, NULL);
	char b[16];
	struct xp_event ev;

	pe_port_open(p.a, 1);
	pe_port_open(p.b, 2);
	pe_provide(p.b, 2, b, 4, XP_LOW);
	assert_int_equal(pe_send(p.a, 1, 1, 2, XP_LOW, NULL, 0, cb, NULL), 0);
	pump(&p, 0);
	assert_int_equal(pe_next_event(p.b, 2, &ev), 1);
	assert_int_equal(ev.length, 0);
	assert_int_equal(ev.size, 4);
	assert_int_equal(reap(p.a, 1), 1);
	rm(&p);
}

/* Many messages, several streams, random buffer shortage: everything
 * arrives once, in order per stream. */
static void test_stress_order(void **s)
{
	struct pe_opts o = { .send_tokens = 32, .recv_tokens = 16, .send_timeout_ns = 1000 * MS };
	struct pair p = mk(2, 8, &o);
	static uint32_t msg[4][200];
	static uint32_t bufs[16][8];
	uint32_t next[4] = { 0 }, sent[4] = { 0 }, got[4] = { 0 };
	unsigned nfree = 16, freeidx[16];
	uint64_t t = 0;
	unsigned seed = 1;

	pe_port_open(p.a, 1);
	pe_port_open(p.a, 2);
	pe_port_open(p.b, 9);
	for (unsigned i = 0; i < 16; i++)
		freeidx[i] = i;
	for (unsigned i = 0; i < 4; i++)
		for (unsigned j = 0; j < 200; j++)
			msg[i][j] = i << 16 | j;
	while (got[0] + got[1] + got[2] + got[3] < 800 && t < 5000 * MS) {
		for (unsigned k = 0; k < 4; k++)
			while (sent[k] < 200 && pe_send(p.a, 1 + k / 2, 1, 9, k % 2, &msg[k][sent[k]],
							4, cb, NULL) == 0)
				sent[k]++;
		seed = seed * 1103515245 + 12345;
		while (nfree && (seed >> 16) % 4) {
			unsigned bi = freeidx[--nfree];
			/* each buffer keeps its priority: neither starves */
			assert_int_equal(pe_provide(p.b, 9, bufs[bi], 4, bi & 1), 0);
			seed = seed * 1103515245 + 12345;
		}
		pump(&p, t);
		reap(p.a, 1);
		reap(p.a, 2);
		struct xp_event ev;
		while (pe_next_event(p.b, 9, &ev)) {
			uint32_t v;
			memcpy(&v, ev.buffer, 4);
			unsigned k = v >> 16;
			assert_true(k < 4);
			assert_int_equal(k % 2, ev.prio);
			assert_int_equal(ev.sender_port, 1 + k / 2);
			assert_int_equal(v & 0xffff, next[k]);
			next[k]++;
			got[k]++;
			freeidx[nfree++] = (unsigned)(((uint32_t(*)[8])ev.buffer) - bufs);
		}
		t += 200 * US;
	}
	for (unsigned k = 0; k < 4; k++)
		assert_int_equal(got[k], 200);
	struct xp_port_stats st1, st2;
	pe_port_stats(p.a, 1, &st1);
	pe_port_stats(p.a, 2, &st2);
	assert_true(st1.nacks_nobuf + st2.nacks_nobuf > 0);	/* shortage happened */
	assert_int_equal(pe_send_tokens(p.a, 1), 32);
	assert_int_equal(pe_send_tokens(p.a, 2), 32);
	for (unsigned i = 0; i < ndone; i++)
		assert_int_equal(dn[i].st, XP_SUCCESS);
	rm(&p);
}

/* Request/reply: the ACK of the request rides on the reply (PW_ACKS), no
 * bare ACK frame goes; a one-way stream still gets bare ACKs. */
static void test_ack_rides_on_reply(void **s)
{
	struct pe_opts o = { .send_tokens = 4, .recv_tokens = 4 };
	struct pair p = mk(2, 64, &o);
	char req[] = "ping", rep[] = "pong", ba[2][64], bb[2][64];
	struct pe_frame f;
	struct pw_hdr h;
	struct xp_event ev;
	uint8_t buf[PW_HDR_LEN + 64];
	char why[200];

	assert_int_equal(pe_port_open(p.a, 8), 0);
	assert_int_equal(pe_port_open(p.b, 0), 0);
	assert_int_equal(pe_provide(p.b, 0, bb[0], 4, XP_HIGH), 0);
	assert_int_equal(pe_provide(p.b, 0, bb[1], 4, XP_HIGH), 0);
	assert_int_equal(pe_provide(p.a, 8, ba[0], 4, XP_HIGH), 0);
	assert_int_equal(pe_send(p.a, 8, 1, 0, XP_HIGH, req, 4, cb, (void *)1), 0);
	assert_int_equal(move(p.a, p.b, 2, 0), 1);
	assert_int_equal(pe_next_event(p.b, 0, &ev), 1);
	/* b replies before anything is pulled: one DATA frame carries it all */
	assert_int_equal(pe_send(p.b, 0, 1, 8, XP_HIGH, rep, 4, cb, (void *)2), 0);
	assert_int_equal(pe_pull(p.b, 1, 1, &f), 1);
	assert_int_equal(pw_decode(f.hdr, PW_HDR_LEN + f.dlen, &h), 0);
	assert_int_equal(h.type, PW_DATA);
	assert_true(h.flags & PW_ACKS);
	assert_int_equal(h.aux, 0);	/* the request's seq */
	memcpy(buf, f.hdr, PW_HDR_LEN);
	memcpy(buf + PW_HDR_LEN, f.data, f.dlen);
	pe_frame_done(p.b, f.ref);
	assert_int_equal(pe_pull(p.b, 1, 1, &f), 0);	/* no bare ACK after it */
	assert_int_equal(pe_input(p.a, 1, buf, PW_HDR_LEN + 4, 0, why, sizeof(why)), 0);
	/* the request completed from the ride-along ACK, the reply arrived */
	assert_int_equal(reap(p.a, 8), 1);
	assert_ptr_equal(dn[0].ctx, (void *)1);
	assert_int_equal(dn[0].st, XP_SUCCESS);
	assert_int_equal(pe_next_event(p.a, 8, &ev), 1);
	assert_memory_equal(ev.buffer, "pong", 4);
	/* nothing goes back to b: a has nothing to say, so a bare ACK */
	assert_int_equal(pe_pull(p.a, 1, 1, &f), 1);
	assert_int_equal(pw_decode(f.hdr, PW_HDR_LEN, &h), 0);
	assert_int_equal(h.type, PW_ACK);
	rm(&p);
}

/* pe_send_now: the frame at once when it is what pe_pull would give next
 * (SYNC on a new stream, the reverse stream's ACK riding along); queued
 * the ordinary way when something else comes first on the lane. */
static void test_send_now(void **s)
{
	struct pe_opts o = { .send_tokens = 8, .recv_tokens = 8 };
	struct pair p = mk(2, 64, &o);
	char big[100] = "x", bb[4][128], ba[4][64];
	struct pe_frame f;
	struct pw_hdr h;
	struct xp_event ev;

	assert_int_equal(pe_port_open(p.a, 3), 0);
	assert_int_equal(pe_port_open(p.b, 5), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pe_provide(p.b, 5, bb[i], 4, XP_LOW), 0);
		assert_int_equal(pe_provide(p.a, 3, ba[i], 4, XP_LOW), 0);
	}
	assert_int_equal(pe_provide(p.b, 5, bb[3], 7, XP_LOW), 0);
	/* a new stream, idle lane: the frame now, FIRST|LAST|SYNC, seq 0 */
	assert_int_equal(pe_send_now(p.a, 3, 1, 5, XP_LOW, "ping", 4, cb, (void *)1, &f), 1);
	assert_int_equal(pw_decode(f.hdr, PW_HDR_LEN + f.dlen, &h), 0);
	assert_int_equal(h.type, PW_DATA);
	assert_int_equal(h.flags, PW_FIRST | PW_LAST | PW_SYNC);
	assert_int_equal(h.seq, 0);
	assert_int_equal(f.dlen, 4);
	deliver(p.a, p.b, &f);
	assert_int_equal(pe_pull(p.a, 1, 0, &f), 0);	/* nothing left behind */
	assert_int_equal(pe_next_event(p.b, 5, &ev), 1);
	assert_memory_equal(ev.buffer, "ping", 4);
	/* the reply carries the ACK; no bare ACK stays queued */
	assert_int_equal(pe_send_now(p.b, 5, 1, 3, XP_LOW, "pong", 4, cb, (void *)2, &f), 1);
	assert_int_equal(pw_decode(f.hdr, PW_HDR_LEN + f.dlen, &h), 0);
	assert_int_equal(h.flags, PW_FIRST | PW_LAST | PW_SYNC | PW_ACKS);
	assert_int_equal(h.aux, 0);
	deliver(p.b, p.a, &f);
	assert_int_equal(pe_pull(p.b, 1, 0, &f), 0);
	assert_int_equal(reap(p.a, 3), 1);
	assert_int_equal(dn[0].st, XP_SUCCESS);
	assert_int_equal(pe_next_event(p.a, 3, &ev), 1);
	/* more than a fragment: queued, and pe_pull gives its first part */
	assert_int_equal(pe_send_now(p.a, 3, 1, 5, XP_LOW, big, 100, cb, (void *)3, &f), 0);
	/* ... and a small one behind it waits its turn on the stream */
	assert_int_equal(pe_send_now(p.a, 3, 1, 5, XP_LOW, "late", 4, cb, (void *)4, &f), 0);
	assert_int_equal(pe_pull(p.a, 1, 0, &f), 1);
	assert_int_equal(pw_decode(f.hdr, PW_HDR_LEN + f.dlen, &h), 0);
	assert_int_equal(h.seq, 1);
	assert_int_equal(h.flags & (PW_FIRST | PW_LAST | PW_ACKS), PW_FIRST | PW_ACKS);
	pe_frame_done(p.a, f.ref);
	/* bad arguments fail as pe_send's do */
	assert_int_equal(pe_send_now(p.a, 3, 1, 64, XP_LOW, "x", 1, cb, NULL, &f), -EINVAL);
	assert_int_equal(pe_send_now(p.a, 3, 9, 5, XP_LOW, "x", 1, cb, NULL, &f), -ENOENT);
	rm(&p);
}

/* The frames of a drain as bytes, each a 2-byte length, header, payload. */
struct tape {
	uint8_t b[64 * 1024];
	size_t n;
	unsigned frames, packed;
};

static void tape_frame(struct tape *t, const uint8_t *hdr, const void *data, size_t dlen)
{
	assert_true(t->n + PW_PACK_LEN + PW_HDR_LEN + dlen <= sizeof(t->b));
	t->n += pw_pack_put(t->b + t->n, hdr, data, dlen);
	t->frames++;
}

/* Drains (node 1, lane) with pe_pull_prio(): its first frame of priority
 * first_min or more, the rest of min_prio or more (tx_shm's limit can rise
 * once a pack takes a slot).  Frame by frame, or, after each DATA frame,
 * also with pe_pull_pack into a pack of `room` bytes. */
static void drain(struct pe_eng *e, unsigned lane, unsigned first_min, unsigned min_prio,
		  bool pack, uint32_t max_frame, size_t room, struct tape *t)
{
	static uint8_t pk[4096];
	struct pe_frame f;

	for (unsigned m = first_min; pe_pull_prio(e, 1, lane, m, &f); m = min_prio) {
		unsigned nf;
		size_t used;

		tape_frame(t, f.hdr, f.data, f.dlen);
		pe_frame_done(e, f.ref);
		if (!pack || !f.ref)
			continue;
		used = pe_pull_pack(e, 1, lane, f.hdr[2], min_prio, max_frame, pk, room, &nf);
		assert_true(used <= room);
		for (size_t off = 0;;) {
			const uint8_t *fr;
			size_t flen;
			int rc = pw_pack_next(pk, used, &off, &fr, &flen);

			assert_true(rc >= 0);
			if (!rc)
				break;
			assert_true(flen <= max_frame);
			tape_frame(t, fr, fr + PW_HDR_LEN, flen - PW_HDR_LEN);
			t->packed++;
			nf--;
		}
		assert_int_equal(nf, 0);
	}
}

/* pe_pull_pack: the frames a drain gives are the same, byte for byte, with
 * and without it -- several streams (round robin), both priorities, on one
 * lane and two, low priority held back after a first frame, messages
 * of several fragments, messages too big for a pack, NACKs and ACKs owed
 * -- nothing stays held, and every message completes once acknowledged.
 * Random trials from a fixed seed (XPRT_SEED sets another; a failure
 * prints its trial's). */
static void test_pull_pack_same_frames(void **s)
{
	unsigned seed = (unsigned)(getenv("XPRT_SEED") ? strtoul(getenv("XPRT_SEED"), NULL, 0)
						      : 12345u);
	static uint8_t msg[256][600];
	static uint8_t rbuf[2][8][1024];
	unsigned packed = 0;

	print_message("pull-pack trials: seed %u (XPRT_SEED)\n", seed);
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i / 600][i % 600] = (uint8_t)(i * 2654435761u >> 13);
	for (int trial = 0; trial < 300; trial++) {
		struct pe_opts o = { .send_tokens = 256, .recv_tokens = 16 };
		unsigned tseed = seed;
		unsigned lanes = 1 + (seed >> 3) % 2, min_prio = (seed >> 4) % 2, nmsg, nback, nbuf;
		uint32_t frag = 32u << (seed >> 5) % 5;
		uint32_t max_frame = PW_HDR_LEN + (seed >> 9) % 300;
		size_t room = 16 + (seed >> 13) % 2048;
		uint32_t count[2][2] = { { 0 } };	/* messages per [dst port - 5][prio] */
		static struct tape ta, tb;
		struct pair pr[2];

		seed = seed * 1103515245 + 12345;
		nmsg = 1 + (seed >> 8) % 200;
		nback = (seed >> 20) % 4;
		nbuf = (seed >> 23) % 8;	/* buffers per priority vary: some NACKs */
		for (int v = 0; v < 2; v++) {
			unsigned r = seed;
			struct pair *p = &pr[v];
			char why[200];

			*p = mk(lanes, frag, &o);
			assert_int_equal(pe_port_open(p->a, 3), 0);
			assert_int_equal(pe_port_open(p->b, 5), 0);
			assert_int_equal(pe_port_open(p->b, 6), 0);
			/* b sends to a first: a owes ACKs, some to ride on its DATA */
			for (unsigned i = 0; i < nbuf; i++)
				assert_int_equal(pe_provide(p->a, 3, rbuf[v][i], 4, i & 1), 0);
			for (unsigned i = 0; i < nback; i++)
				assert_int_equal(pe_send(p->b, 5, 1, 3, i & 1, "back", 4, cb, NULL), 0);
			for (unsigned l = 0; l < lanes; l++) {
				struct pe_frame f;
				uint8_t fb[PW_HDR_LEN + 64];

				while (pe_pull(p->b, 1, l, &f)) {
					memcpy(fb, f.hdr, PW_HDR_LEN);
					memcpy(fb + PW_HDR_LEN, f.data, f.dlen);
					pe_frame_done(p->b, f.ref);
					assert_int_equal(pe_input(p->a, 1, fb, PW_HDR_LEN + f.dlen, 0, why,
								  sizeof(why)), 0);
				}
			}
			for (unsigned i = 0; i < nmsg; i++) {
				r = r * 1103515245 + 12345;
				unsigned len = (r >> 8) % 8 ? (r >> 12) % 40 : (r >> 12) % 600;
				unsigned dst = (r >> 4) % 2, prio = (r >> 6) % 3 == 0;

				assert_int_equal(pe_send(p->a, 3, 1, 5 + dst, prio, msg[i], len, cb,
							 (void *)(uintptr_t)(v + 1)), 0);
				if (v == 0)
					count[dst][prio]++;
			}
		}
		memset(&ta, 0, sizeof(ta));
		memset(&tb, 0, sizeof(tb));
		/* low priority held back after the first frame (as tx_shm
		 * does while high priority is in use), then everything */
		for (unsigned l = 0; l < lanes; l++) {
			drain(pr[0].a, l, 0, min_prio, false, max_frame, room, &ta);
			drain(pr[1].a, l, 0, min_prio, true, max_frame, room, &tb);
		}
		for (unsigned l = 0; l < lanes; l++) {
			drain(pr[0].a, l, 0, 0, false, max_frame, room, &ta);
			drain(pr[1].a, l, 0, 0, true, max_frame, room, &tb);
		}
		if (ta.n != tb.n || memcmp(ta.b, tb.b, ta.n))
			fail_msg("XPRT_SEED=%u trial %d: %u frames one by one, %u with packs "
				 "(%u packed)", tseed, trial, ta.frames, tb.frames, tb.packed);
		assert_int_equal(pe_node_refs(pr[1].a, 1), 0);
		assert_int_equal(pe_port_refs(pr[1].a, 3), 0);
		/* b acknowledges everything: each message completes, once */
		ndone = 0;
		for (int v = 0; v < 2; v++) {
			for (unsigned dst = 0; dst < 2; dst++)
				for (unsigned prio = 0; prio < 2; prio++) {
					struct pw_hdr h = { .type = PW_ACK, .prio = (uint8_t)prio,
							    .src_port = (uint16_t)(5 + dst),
							    .dst_port = 3,
							    .seq = count[dst][prio] - 1 };
					uint8_t fb[PW_HDR_LEN];
					char why[200];

					if (!count[dst][prio])
						continue;
					pw_encode(fb, &h);
					assert_int_equal(pe_input(pr[v].a, 1, fb, PW_HDR_LEN, 0, why,
								  sizeof(why)), 0);
				}
			assert_int_equal(reap(pr[v].a, 3), nmsg);
		}
		for (unsigned i = 0; i < ndone; i++)
			assert_int_equal(dn[i].st, XP_SUCCESS);
		packed += tb.packed;
		rm(&pr[0]);
		rm(&pr[1]);
	}
	assert_true(packed > 1000);	/* the trials did pack */
}

/* pe_pull_pack gives nothing where pe_pull_prio would give something
 * else next, or nothing: a priority below min_prio, another lane's
 * priority, a high-priority stream waiting on a shared lane, a second
 * stream of the priority (round robin), an ABORT owed. */
static void test_pull_pack_refuses(void **s)
{
	struct pe_opts o = { .send_tokens = 16, .recv_tokens = 4 };
	struct pair p = mk(1, 32, &o);
	static uint8_t big[100], pk[1024];
	struct pe_frame f;
	struct pw_hdr h;
	unsigned nf;

	assert_int_equal(pe_port_open(p.a, 3), 0);
	assert_int_equal(pe_port_open(p.a, 4), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pe_send(p.a, 3, 1, 5, XP_LOW, "low", 3, cb, NULL), 0);
	/* low priority held back (tx_shm's high-priority window) */
	assert_int_equal(pe_pull_prio(p.a, 1, 0, 0, &f), 1);
	pe_frame_done(p.a, f.ref);
	assert_int_equal(pe_pull_pack(p.a, 1, 0, XP_LOW, 1, 256, pk, sizeof(pk), &nf), 0);
	assert_int_equal(nf, 0);
	assert_int_equal(pe_pull_pack(p.a, 1, 1, XP_LOW, 0, 256, pk, sizeof(pk), &nf), 0);
	/* a high-priority stream goes first on the shared lane */
	assert_int_equal(pe_send(p.a, 3, 1, 5, XP_HIGH, "high", 4, cb, NULL), 0);
	assert_int_equal(pe_pull_pack(p.a, 1, 0, XP_LOW, 0, 256, pk, sizeof(pk), &nf), 0);
	assert_int_equal(pe_pull_prio(p.a, 1, 0, 0, &f), 1);
	assert_int_equal(pw_decode(f.hdr, PW_HDR_LEN + f.dlen, &h), 0);
	assert_int_equal(h.prio, XP_HIGH);
	pe_frame_done(p.a, f.ref);
	/* a second low stream: the two take turns */
	assert_int_equal(pe_send(p.a, 3, 1, 6, XP_LOW, "other", 5, cb, NULL), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pe_pull_pack(p.a, 1, 0, XP_LOW, 0, 256, pk, sizeof(pk), &nf), 0);
		assert_int_equal(pe_pull_prio(p.a, 1, 0, 0, &f), 1);
		assert_int_equal(pw_decode(f.hdr, PW_HDR_LEN + f.dlen, &h), 0);
		assert_int_equal(h.dst_port, 5 + i);
		pe_frame_done(p.a, f.ref);
	}
	/* alone again: the rest of the first stream, two messages */
	assert_true(pe_pull_pack(p.a, 1, 0, XP_LOW, 0, 256, pk, sizeof(pk), &nf) > 0);
	assert_int_equal(nf, 2);
	/* a message cut off after its first fragment owes an ABORT */
	assert_int_equal(pe_send(p.a, 4, 1, 5, XP_LOW, big, sizeof(big), cb, NULL), 0);
	assert_int_equal(pe_send(p.a, 3, 1, 5, XP_LOW, "low", 3, cb, NULL), 0);
	assert_int_equal(pe_pull_prio(p.a, 1, 0, 0, &f), 1);
	assert_int_equal(pw_decode(f.hdr, PW_HDR_LEN + f.dlen, &h), 0);
	assert_int_equal(h.src_port, 4);
	pe_frame_done(p.a, f.ref);
	pe_port_close(p.a, 4);
	assert_int_equal(pe_pull_pack(p.a, 1, 0, XP_LOW, 0, 256, pk, sizeof(pk), &nf), 0);
	assert_int_equal(pe_pull_prio(p.a, 1, 0, 0, &f), 1);
	assert_int_equal(pw_decode(f.hdr, PW_HDR_LEN + f.dlen, &h), 0);
	assert_int_equal(h.type, PW_ABORT);
	rm(&p);
}

/* A new pair in *p whose b has port 5 open with four buffers of 16 bytes. */
static void fresh_receiver(struct pair *p, const struct pe_opts *o, char bb[4][16])
{
	rm(p);
	*p = mk(1, 64, o);
	assert_int_equal(pe_port_open(p->b, 5), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pe_provide(p->b, 5, bb[i], 4, XP_LOW), 0);
}

/* pe_input_pack: a pack's frames go in in order; a pack cut inside a
 * frame fails after the whole frames before the cut went in. */
static void test_input_pack(void **s)
{
	struct pe_opts o = { .send_tokens = 8, .recv_tokens = 8 };
	struct pair p = mk(1, 64, &o);
	char bb[4][16], why[200];
	uint8_t pk[512];
	size_t n = 0, cut;
	struct pe_frame f;
	struct xp_event ev;

	assert_int_equal(pe_port_open(p.a, 3), 0);
	assert_int_equal(pe_port_open(p.b, 5), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pe_provide(p.b, 5, bb[i], 4, XP_LOW), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pe_send(p.a, 3, 1, 5, XP_LOW, i == 0 ? "one" : i == 1 ? "two" : "six",
					 3, cb, NULL), 0);
	while (pe_pull(p.a, 1, 0, &f)) {
		n += pw_pack_put(pk + n, f.hdr, f.data, f.dlen);
		pe_frame_done(p.a, f.ref);
	}
	cut = n - 5;		/* inside the third frame */
	assert_int_equal(pe_input_pack(p.b, 1, pk, n, 0, why, sizeof(why)), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(pe_next_event(p.b, 5, &ev), 1);
		assert_memory_equal(ev.buffer, i == 0 ? "one" : i == 1 ? "two" : "six", 3);
	}
	assert_int_equal(pe_next_event(p.b, 5, &ev), 0);
	/* the same pack again, cut: into a fresh receiver */
	fresh_receiver(&p, &o, bb);
	assert_int_equal(pe_input_pack(p.b, 1, pk, cut, 0, why, sizeof(why)), -EPROTO);
	assert_string_equal(why, "a cut pack of frames");
	assert_int_equal(pe_next_event(p.b, 5, &ev), 1);
	assert_memory_equal(ev.buffer, "one", 3);
	assert_int_equal(pe_next_event(p.b, 5, &ev), 1);
	assert_memory_equal(ev.buffer, "two", 3);
	assert_int_equal(pe_next_event(p.b, 5, &ev), 0);
	/* a bad frame in the middle: the one before it in, none after */
	fresh_receiver(&p, &o, bb);
	pk[2 * PW_PACK_LEN + PW_HDR_LEN + 3] = 0x7f;	/* the second frame's type */
	assert_int_equal(pe_input_pack(p.b, 1, pk, n, 0, why, sizeof(why)), -EPROTO);
	assert_non_null(strstr(why, "bad frame"));
	assert_int_equal(pe_next_event(p.b, 5, &ev), 1);
	assert_memory_equal(ev.buffer, "one", 3);
	assert_int_equal(pe_next_event(p.b, 5, &ev), 0);
	rm(&p);
}

/* Everything a receiver shows after input: its events (in order, with
 * their bytes), the completions of its own sends, and the frames it owes
 * (ACKs, NACKs), written to a tape. */
static unsigned observe(struct pe_eng *e, struct tape *t)
{
	struct xp_event ev;
	struct pe_done d;
	struct pe_frame f;
	unsigned n = 0;

	for (unsigned port = 5; port <= 6; port++) {
		while (pe_next_event(e, port, &ev)) {
			uint8_t rec[PW_HDR_LEN] = { (uint8_t)ev.type, (uint8_t)ev.prio, (uint8_t)ev.size,
					    (uint8_t)port, (uint8_t)ev.sender_port };

			memcpy(rec + 8, &ev.length, 4);
			tape_frame(t, rec, ev.buffer, ev.length);
			n++;
		}
		while (pe_next_completion(e, port, &d)) {
			uint8_t rec[PW_HDR_LEN] = { 0xcc, (uint8_t)d.status, (uint8_t)port };

			tape_frame(t, rec, NULL, 0);
		}
	}
	for (unsigned l = 0; l < 2; l++)
		while (pe_pull(e, 1, l, &f)) {
			tape_frame(t, f.hdr, f.data, f.dlen);
			pe_frame_done(e, f.ref);
		}
	return n;
}

/* pe_input_pack takes the frames of a run without decoding each: whatever
 * a pack holds -- runs of one stream, frames of other streams and
 * priorities between them, fragments, ACKs riding on DATA, control
 * frames, corrupted headers, sequence gaps, too few buffers -- it ends the
 * way frame-by-frame pe_input() does: the same result and reason, the
 * same events with the same bytes, the same completions and frames owed.
 * Random trials from a fixed seed (XPRT_SEED sets another; a failure
 * prints its trial's). */
static void test_input_pack_runs(void **s)
{
	unsigned seed = (unsigned)(getenv("XPRT_SEED") ? strtoul(getenv("XPRT_SEED"), NULL, 0)
						      : 777u);
	static struct tape pk, ta, tb;
	static uint8_t rbuf[2][64][64];
	unsigned runs = 0;

	print_message("input-pack trials: seed %u (XPRT_SEED)\n", seed);
	for (int trial = 0; trial < 400; trial++) {
		struct pe_opts o = { .send_tokens = 8, .recv_tokens = 64 };
		unsigned tseed = seed, nfr, nbuf;
		struct pe_eng *e[2];
		uint8_t hdr[PW_HDR_LEN];
		struct pw_hdr h = { 0 };
		unsigned plen = 0, next[2][2] = { { 0 } };	/* seqs per [dst - 5][prio] */
		char why[2][200] = { "", "" };
		int rc[2] = { 0, 0 };
		size_t off = 0, flen;
		const uint8_t *fr;

#define RND() (seed = seed * 1103515245 + 12345, seed >> 8)
		nfr = 1 + RND() % 40;
		nbuf = RND() % 64;
		for (int v = 0; v < 2; v++) {
			unsigned r = seed;

			e[v] = pe_new(&o);
			assert_non_null(e[v]);
			assert_int_equal(pe_node_add(e[v], 2, 64), 1);
			assert_int_equal(pe_port_open(e[v], 5), 0);
			assert_int_equal(pe_port_open(e[v], 6), 0);
			for (unsigned i = 0; i < nbuf; i++) {
				r = r * 1103515245 + 12345;
				assert_int_equal(pe_provide(e[v], 5 + (r >> 9) % 2, rbuf[v][i],
							    4 + (r >> 11) % 2, (r >> 13) % 2), 0);
			}
			/* sends of its own, out on the wire: ACKs on DATA complete them */
			for (unsigned i = 0; i < 4; i++)
				assert_int_equal(pe_send(e[v], 5, 1, 3, i & 1, "back", 4, cb, NULL), 0);
			observe(e[v], &ta);
		}
		(void)RND();
		/* a pack: mostly the previous frame again with the next seq */
		pk.n = 0;
		for (unsigned i = 0; i < nfr; i++) {
			uint8_t pl[40];
			unsigned k = RND() % 16;

			bool mid = (h.flags & PW_FIRST) && !(h.flags & PW_LAST);

			if (i == 0 || h.off || (k >= 10 && !mid)) {
				/* a new message: another stream sometimes, a fragment sometimes */
				unsigned prio = RND() % 2, dst = RND() % 2;

				h = (struct pw_hdr){ .type = PW_DATA, .flags = PW_FIRST | PW_LAST,
						     .prio = (uint8_t)prio, .src_port = 3,
						     .dst_port = (uint16_t)(5 + dst),
						     .seq = next[dst][prio] };
				if (!next[dst][prio] || RND() % 16 == 0)
					h.flags |= PW_SYNC;
				h.len = RND() % 8 ? RND() % 25 : RND() % 40;
				plen = h.len;
				if (h.len > 8 && RND() % 4 == 0) {
					plen = h.len / 2;	/* a first fragment; the rest follows */
					h.flags = (uint8_t)(h.flags & ~PW_LAST);
				}
				h.arg = (uint8_t)pw_size_for_len(h.len);
			} else if (mid && k) {
				h.off = plen;	/* the last fragment */
				plen = h.len - plen;
				h.flags = (uint8_t)(PW_LAST | (h.flags & PW_ACKS));
			} else {
				h.seq++;	/* the run goes on */
			}
			if (RND() % 8 == 0) {	/* an ACK rides along */
				h.flags |= PW_ACKS;
				h.aux = RND() % 3;
			} else if (RND() % 4 == 0) {
				h.flags = (uint8_t)(h.flags & ~PW_ACKS);
				h.aux = 0;
			}
			if (RND() % 64 == 0)
				h.seq += RND() % 3;	/* a gap, or the same again */
			if (h.type == PW_DATA && (h.flags & PW_LAST))
				next[h.dst_port - 5][h.prio] = h.seq + 1;
			pw_encode(hdr, &h);
			if (RND() % 24 == 0) {	/* a control frame between */
				struct pw_hdr c = { .type = PW_NACK, .prio = h.prio, .src_port = 3,
						    .dst_port = 5, .arg = PW_NACK_NOBUF };

				c.seq = RND() % 4;
				if (RND() % 2) {
					c.type = PW_ACK;
					c.arg = 0;
				}
				pw_encode(hdr, &c);
				tape_frame(&pk, hdr, NULL, 0);
				continue;
			}
			if (RND() % 128 == 0) {	/* a corrupted byte */
				unsigned at = RND() % PW_HDR_LEN;

				hdr[at] ^= (uint8_t)(1u << RND() % 8);
			}
			if (RND() % 16 == 0) {	/* a payload of another length */
				unsigned other = RND() % (plen + 2);

				for (unsigned j = 0; j < other; j++)
					pl[j] = (uint8_t)RND();
				tape_frame(&pk, hdr, pl, other);
				continue;
			}
			for (unsigned j = 0; j < plen; j++)
				pl[j] = (uint8_t)RND();
			tape_frame(&pk, hdr, pl, plen);
		}
		if (RND() % 8 == 0)
			pk.n -= 1 + RND() % 8;	/* cut inside its last frame */
		ta.n = tb.n = 0;
		rc[0] = pe_input_pack(e[0], 1, pk.b, pk.n, 0, why[0], sizeof(why[0]));
		while ((rc[1] = pw_pack_next(pk.b, pk.n, &off, &fr, &flen)) > 0)
			if ((rc[1] = pe_input(e[1], 1, fr, flen, 0, why[1], sizeof(why[1]))) < 0)
				break;
		if (rc[1] == PW_E_SHORT) {
			rc[1] = -EPROTO;
			snprintf(why[1], sizeof(why[1]), "a cut pack of frames");
		}
		runs += observe(e[0], &ta);
		observe(e[1], &tb);
		if (rc[0] != rc[1] || strcmp(why[0], why[1]) || ta.n != tb.n ||
		    memcmp(ta.b, tb.b, ta.n))
			fail_msg("XPRT_SEED=%u trial %d: pack %d '%s', frame by frame %d '%s'; "
				 "%zu/%zu bytes seen", tseed, trial, rc[0], why[0], rc[1], why[1], ta.n,
				 tb.n);
		pe_free(e[0]);
		pe_free(e[1]);
#undef RND
	}
	print_message("input-pack trials: %u messages delivered\n", runs);
	assert_true(runs > 1000);	/* the trials did deliver */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_basic_tokens_order),
		cmocka_unit_test(test_odd_token_ring),
		cmocka_unit_test(test_token_limits),
		cmocka_unit_test(test_nobuf_retry),
		cmocka_unit_test(test_timeout_never),
		cmocka_unit_test(test_timeout_resume_drop),
		cmocka_unit_test(test_closed_rejected),
		cmocka_unit_test(test_priorities),
		cmocka_unit_test(test_round_robin),
		cmocka_unit_test(test_refs_hold_completion),
		cmocka_unit_test(test_node_down),
		cmocka_unit_test(test_close_mid_message),
		cmocka_unit_test(test_protocol_errors),
		cmocka_unit_test(test_empty_message),
		cmocka_unit_test(test_stress_order),
		cmocka_unit_test(test_ack_rides_on_reply),
		cmocka_unit_test(test_send_now),
		cmocka_unit_test(test_pull_pack_same_frames),
		cmocka_unit_test(test_pull_pack_refuses),
		cmocka_unit_test(test_input_pack),
		cmocka_unit_test(test_input_pack_runs),
		cmocka_unit_test(test_drop_mid_message_frees_buffer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
