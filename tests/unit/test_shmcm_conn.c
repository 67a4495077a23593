/* The SHMCM runtime over a real mailbox: two ends, in threads of this
 * process or in a forked child. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/xtime.h"
#include "shmcm/shmcm.h"
#include "shmcm/shmcm_wire.h"
#include "xprt/mbox.h"

struct end {
	struct shmcm_conn *c;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	_Atomic int ups, downs, eofs;
	_Atomic int reason;
	size_t got_at_eof;	/* bytes delivered when eof came */
	/* delivered messages, concatenated, with their sizes */
	uint8_t *got;
	size_t got_len, nmsg;
	uint32_t sizes[256];
	/* stress checking */
	uint64_t next_seq, errors;
	/* refuse_deliver: the message number (counting from 1) refused, and
	 * how many were */
	size_t refuse_at, refused;
};

static char conn_name[64];

/* A forked child never outlives this test program, whatever happens to it. */
static void child_setup(int pipe_write_end_to_close)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	alarm(30);
	if (pipe_write_end_to_close >= 0)
		close(pipe_write_end_to_close);
}

static void mkname(const char *what)
{
	char err[256];
	bool replaced;

	snprintf(conn_name, sizeof(conn_name), "unit-%s-%d", what, (int)getpid());
	struct mbox_cfg cfg = { 64, 256, 300, 0 };
	assert_int_equal(mbox_create(conn_name, &cfg, &replaced, err, sizeof(err)), 0);
}

static void cfgname(const char *what, struct mbox_cfg cfg)
{
	char err[256];
	bool replaced;

	snprintf(conn_name, sizeof(conn_name), "unit-%s-%d", what, (int)getpid());
	assert_int_equal(mbox_create(conn_name, &cfg, &replaced, err, sizeof(err)), 0);
}

static void rmname(void)
{
	char err[256];

	mbox_unlink(conn_name, true, err, sizeof(err));
}

static void up(void *arg)
{
	struct end *e = arg;

	pthread_mutex_lock(&e->mu);
	e->ups++;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

static void down(void *arg, enum shmcm_reason why)
{
	struct end *e = arg;

	pthread_mutex_lock(&e->mu);
	e->reason = why;
	e->downs++;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

static void on_eof(void *arg)
{
	struct end *e = arg;

	pthread_mutex_lock(&e->mu);
	e->got_at_eof = e->got_len;
	e->eofs++;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

static void collect(void *arg, uint32_t src, uint32_t dst, const void *d, size_t n)
{
	struct end *e = arg;

	pthread_mutex_lock(&e->mu);
	e->got = realloc(e->got, e->got_len + n + 1);
	memcpy(e->got + e->got_len, d, n);
	e->got_len += n;
	if (e->nmsg < 256)
		e->sizes[e->nmsg] = (uint32_t)n;
	e->nmsg++;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

/* Any parameters and up-calls (their arg is e). */
static struct shmcm_conn *open_end_with(struct end *e, struct shmcm_params p,
					struct shmcm_upcalls uc)
{
	char err[256];

	p.name = conn_name;
	uc.arg = e;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	e->c = shmcm_open(&p, &uc, err, sizeof(err));
	if (!e->c)
		fail_msg("shmcm_open: %s", err);
	return e->c;
}

static struct shmcm_conn *open_end(struct end *e, int side, enum shmcm_flow flow, bool poll,
				   void (*deliver)(void *, uint32_t, uint32_t, const void *, size_t))
{
	struct shmcm_params p = { .name = conn_name, .side = side, .flow = flow, .poll = poll };
	struct shmcm_upcalls uc = { up, down, deliver ? deliver : collect, e, NULL, NULL };
	char err[256];

	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	e->c = shmcm_open(&p, &uc, err, sizeof(err));
	if (!e->c)
		fail_msg("shmcm_open: %s", err);
	return e->c;
}

static void close_end(struct end *e)
{
	shmcm_close(e->c);
	free(e->got);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
}

/* Waits (bounded) until cond(e) holds. */
static bool wait_for(struct end *e, bool (*cond)(struct end *), uint64_t ms)
{
	uint64_t end = xtime_ns() + ms * 1000000ull;
	bool ok;

	for (;;) {
		pthread_mutex_lock(&e->mu);
		ok = cond(e);
		pthread_mutex_unlock(&e->mu);
		if (ok || xtime_ns() > end)
			return ok;
		usleep(1000);
	}
}

static bool is_down(struct end *e) { return e->downs > 0; }

static void connect_pair(struct end *a, struct end *b)
{
	shmcm_connect(a->c);
	shmcm_connect(b->c);
	assert_int_equal(shmcm_wait_connected(a->c, 5000000000ull), 0);
	assert_int_equal(shmcm_wait_connected(b->c, 5000000000ull), 0);
}

/* connect_pair() for a b in poll mode: b is polled until connected (and
 * read no more here) */
static void connect_polled(struct end *a, struct end *b)
{
	shmcm_connect(a->c);
	shmcm_connect(b->c);
	for (int i = 0; i < 5000 && shmcm_get_state(b->c) != SHMCM_CONNECTED; i++) {
		shmcm_poll(b->c, 16);
		usleep(1000);
	}
	assert_int_equal(shmcm_wait_connected(a->c, 3000000000ull), 0);
}

static size_t want_len;
static bool got_all(struct end *e) { return e->got_len >= want_len; }

/* Messages of every size around the fragment boundary arrive whole, in
 * order; then a graceful disconnect reaches the peer as CON_RST. */
static void test_messages_and_close(void **s)
{
	struct end a = { 0 }, b = { 0 };
	uint8_t *msg = malloc(4096), *want = malloc(1 << 20);
	size_t off = 0;
	uint32_t sizes[] = { 0, 1, 223, 224, 225, 447, 448, 449, 1000, 4096 };

	mkname("msg");
	open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_WAIT, false, NULL);
	open_end(&b, MBOX_SIDE_B, SHMCM_FLOW_WAIT, false, NULL);
	connect_pair(&a, &b);
	assert_int_equal(shmcm_get_mtu(a.c), 256);

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (uint32_t j = 0; j < sizes[i]; j++)
			msg[j] = (uint8_t)(i * 31 + j);
		assert_int_equal(shmcm_transmit(a.c, 1, 2, msg, sizes[i]), 0);
		memcpy(want + off, msg, sizes[i]);
		off += sizes[i];
	}
	want_len = off;
	assert_true(wait_for(&b, got_all, 5000));
	assert_int_equal(b.got_len, off);
	assert_memory_equal(b.got, want, off);
	assert_int_equal(b.nmsg, sizeof(sizes) / sizeof(sizes[0]));
	for (size_t i = 0; i < b.nmsg; i++)
		assert_int_equal(b.sizes[i], sizes[i]);

	/* too big for one message: 4 GiB */
	assert_int_equal(shmcm_transmit(a.c, 0, 0, msg, (size_t)UINT32_MAX + 1), -EMSGSIZE);

	assert_int_equal(shmcm_wait_drained(a.c, 2000000000ull), 0);
	shmcm_disconnect(a.c);
	assert_int_equal(shmcm_get_state(a.c), SHMCM_DISCONNECTED);
	assert_int_equal(shmcm_get_reason(a.c), SHMCM_R_LOCAL);
	assert_true(wait_for(&b, is_down, 3000));
	assert_int_equal(b.reason, SHMCM_R_PEER_RST);
	assert_int_equal(shmcm_transmit(a.c, 0, 0, msg, 1), -ENOTCONN);
	assert_int_equal(shmcm_transmit(b.c, 0, 0, msg, 1), -ENOTCONN);

	/* and the two reconnect with new generations */
	a.downs = b.downs = 0;
	connect_pair(&a, &b);
	assert_int_equal(shmcm_transmit(b.c, 0, 0, "again", 5), 0);
	want_len = 5;
	assert_true(wait_for(&a, got_all, 3000));
	assert_memory_equal(a.got, "again", 5);

	close_end(&a);
	close_end(&b);
	rmname();
	free(msg);
	free(want);
}

/* A second process cannot claim an occupied side. */
static void test_side_busy(void **s)
{
	struct end a = { 0 };
	pid_t pid;
	int st;

	mkname("busy");
	open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_WAIT, false, NULL);
	pid = fork();
	if (pid == 0) {
		child_setup(-1);
		struct mbox *m;
		char err[256];
		if (mbox_open(conn_name, &m, err, sizeof(err)) < 0)
			_exit(3);
		int rc = mbox_claim(m, MBOX_SIDE_A, err, sizeof(err));
		_exit(rc == -EBUSY && strstr(err, "in use by pid") ? 0 : 4);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(WEXITSTATUS(st), 0);
	close_end(&a);
	rmname();
}

/* LINX's deferred queue with its default limit of 0: the first full
 * mailbox disconnects (here the peer is in poll mode and never polls). */
static void test_defq_overflow(void **s)
{
	struct end a = { 0 }, b = { 0 };
	uint8_t msg[200] = { 0 };
	int rc = 0, i;

	cfgname("defq", (struct mbox_cfg){ 8, 256, 300, 4 });
	open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_DEFER, false, NULL);
	open_end(&b, MBOX_SIDE_B, SHMCM_FLOW_WAIT, true, NULL);
	connect_polled(&a, &b);	/* then b stops reading */
	for (i = 0; i < 100 && (rc = shmcm_transmit(a.c, 0, 0, msg, sizeof(msg))) == 0; i++)
		;
	assert_int_equal(rc, -ENOBUFS);
	/* 8 slots minus the CON packets in them, plus 4 deferred */
	assert_in_range(i, 4, 12);
	assert_true(wait_for(&a, is_down, 3000));
	assert_int_equal(a.reason, SHMCM_R_INTERNAL);
	close_end(&a);
	close_end(&b);
	rmname();
}

/* A peer process that dies is noticed at once, not after the timeout; the
 * data it sent before dying is still delivered first. */
static void test_peer_death(void **s)
{
	struct end a = { 0 };
	int pfd[2];
	pid_t pid;
	char c;

	cfgname("death", (struct mbox_cfg){ 64, 256, 60000, 0 });	/* 60 s timeout */
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	if (pid == 0) {
		child_setup(-1);
		struct end b = { 0 };
		open_end(&b, MBOX_SIDE_B, SHMCM_FLOW_WAIT, false, NULL);
		shmcm_connect(b.c);
		if (shmcm_wait_connected(b.c, 5000000000ull) < 0)
			_exit(3);
		shmcm_transmit(b.c, 0, 0, "last words", 10);
		if (write(pfd[1], "x", 1) != 1)
			_exit(4);
		pause();
		_exit(0);
	}
	open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_WAIT, false, NULL);
	shmcm_connect(a.c);
	assert_int_equal(shmcm_wait_connected(a.c, 5000000000ull), 0);
	assert_int_equal(read(pfd[0], &c, 1), 1);
	uint64_t t0 = xtime_ns();
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	assert_true(wait_for(&a, is_down, 2000));
	assert_true(xtime_ns() - t0 < 1000000000ull);
	assert_int_equal(a.reason, SHMCM_R_PEER_GONE);
	assert_int_equal(a.got_len, 10);
	assert_memory_equal(a.got, "last words", 10);
	close_end(&a);
	close(pfd[0]);
	close(pfd[1]);
	rmname();
}


/* A hand-driven peer on side a writes raw packets into the mailbox: data
 * and CON packets of a stale generation are dropped, a malformed packet is
 * dropped and counted, and the connection stays up throughout. */
static void raw_send(struct mbox *m, const void *pkt, uint32_t len)
{
	void *slot = mbox_tx_reserve(m);

	assert_non_null(slot);
	memcpy(slot, pkt, len);
	mbox_tx_publish(m);
}

static void raw_udata(struct mbox *m, uint16_t cno, const char *text, uint32_t claim)
{
	uint8_t pkt[128];
	uint32_t n = (uint32_t)strlen(text);

	shmcm_encode_udata_hdr(pkt, SHMCM_UDATA_HLEN + n, cno, 1, 0, 0, n);
	memcpy(pkt + SHMCM_UDATA_HLEN, text, n);
	if (claim) {	/* lie about the packet size */
		uint32_t be = htobe32(claim);
		memcpy(pkt + 4, &be, 4);
	}
	raw_send(m, pkt, SHMCM_UDATA_HLEN + n);
}

/* A hand-driven peer: claims side a of the mailbox raw, announces
 * generation `cno` and sends CON_REQ; returns once `b` is connected to it. */
static struct mbox *raw_attach(struct end *b, uint16_t cno)
{
	struct mbox *m;
	uint8_t pkt[SHMCM_CON_LEN];
	char err[256];

	assert_int_equal(mbox_open(conn_name, &m, err, sizeof(err)), 0);
	assert_int_equal(mbox_claim(m, MBOX_SIDE_A, err, sizeof(err)), 0);
	/* the generation is published before the packet that carries it */
	atomic_store(&m->h->side[MBOX_SIDE_A].cno, cno);
	shmcm_encode_con(pkt, SHMCM_CON_REQ, cno);
	raw_send(m, pkt, sizeof(pkt));
	assert_int_equal(shmcm_wait_connected(b->c, 3000000000ull), 0);
	return m;
}

/* The rx thread publishes its counters after each batch, so just after the
 * last delivery they may still lag: wait (bounded) for them to settle. */
static void wait_published(struct mbox *m, int side, uint64_t recv_pkts)
{
	for (int i = 0; i < 5000; i++) {
		if (atomic_load(&m->h->side[side].recv_pkts) >= recv_pkts)
			return;
		usleep(1000);
	}
}

static void test_raw_peer(void **s)
{
	struct end b = { 0 };
	struct mbox *m;
	uint8_t pkt[SHMCM_CON_LEN];

	mkname("raw");
	open_end(&b, MBOX_SIDE_B, SHMCM_FLOW_WAIT, false, NULL);
	shmcm_connect(b.c);
	m = raw_attach(&b, 5);
	shmcm_encode_con(pkt, SHMCM_CON_REQ, 4);	/* not our generation: stale */
	raw_send(m, pkt, sizeof(pkt));

	raw_udata(m, 4, "old", 0);		/* stale generation */
	raw_udata(m, 5, "new", 0);
	shmcm_encode_con(pkt, SHMCM_CON_RST, 4);	/* stale reset: ignored */
	raw_send(m, pkt, sizeof(pkt));
	raw_udata(m, 5, "tail", 0);
	want_len = 7;
	assert_true(wait_for(&b, got_all, 3000));
	assert_int_equal(b.got_len, 7);
	assert_memory_equal(b.got, "newtail", 7);
	assert_int_equal(shmcm_get_state(b.c), SHMCM_CONNECTED);
	assert_true(atomic_load(&m->h->side[MBOX_SIDE_B].recv_stale) >= 3);
	assert_int_equal(atomic_load(&m->h->side[MBOX_SIDE_B].recv_bad), 0);

	/* a malformed packet is a gap in the stream: nothing after it is
	 * delivered, and the connection is reset */
	raw_udata(m, 5, "bad", 100000);		/* size beyond the MRU */
	raw_udata(m, 5, "after", 0);
	assert_true(wait_for(&b, is_down, 3000));
	assert_int_equal(b.reason, SHMCM_R_RX_LOST);
	assert_int_equal(shmcm_get_reason(b.c), SHMCM_R_RX_LOST);
	/* every packet taken from the ring ("after" the 8th), none more
	 * delivered */
	wait_published(m, MBOX_SIDE_B, 8);
	assert_int_equal(atomic_load(&m->h->side[MBOX_SIDE_B].recv_pkts), 8);
	assert_int_equal(b.got_len, 7);
	assert_int_equal(atomic_load(&m->h->side[MBOX_SIDE_B].recv_bad), 1);
	/* the peer hears of it: a CON_RST of its generation in its ring, and
	 * the count of what was delivered covers "new" and "tail" only */
	assert_int_equal(atomic_load(&m->h->side[MBOX_SIDE_B].deliv_pkts), 2);
	assert_int_equal(atomic_load(&m->h->side[MBOX_SIDE_B].last_reason), SHMCM_R_RX_LOST);
	mbox_close(m);
	close_end(&b);
	rmname();
}


/* Single copy by reference: messages too big for a packet are pulled by
 * the receiver from the sender's memory; transmit returns only after that,
 * so the sender may reuse its buffer at once. */
static void test_cma(void **s)
{
	struct end a = { 0 }, b = { 0 };
	uint32_t sizes[] = { 65536, 300000, 1 << 20 };
	size_t total = 0;
	uint8_t *buf = malloc(1 << 20), *want = malloc(3 << 20);
	struct mbox *m;
	char err[256];

	mkname("cma");
	open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_WAIT, false, NULL);
	open_end(&b, MBOX_SIDE_B, SHMCM_FLOW_WAIT, false, NULL);
	connect_pair(&a, &b);
	for (int i = 0; i < 3; i++) {
		for (uint32_t j = 0; j < sizes[i]; j++)
			buf[j] = (uint8_t)(j * 7 + i);
		memcpy(want + total, buf, sizes[i]);
		total += sizes[i];
		assert_int_equal(shmcm_transmit(a.c, 0, 0, buf, sizes[i]), 0);
		memset(buf, 0xee, sizes[i]);	/* ours again */
	}
	assert_int_equal(shmcm_transmit(a.c, 0, 0, "end", 3), 0);
	memcpy(want + total, "end", 3);
	want_len = total + 3;
	assert_true(wait_for(&b, got_all, 5000));
	assert_int_equal(b.got_len, total + 3);
	assert_memory_equal(b.got, want, total + 3);
	assert_int_equal(b.nmsg, 4);
	assert_int_equal(mbox_open(conn_name, &m, err, sizeof(err)), 0);
	wait_published(m, MBOX_SIDE_B, atomic_load(&m->h->side[MBOX_SIDE_A].sent_pkts));
	assert_int_equal(atomic_load(&m->h->side[MBOX_SIDE_B].rndv_msgs), 3);
	assert_int_equal(atomic_load(&m->h->side[MBOX_SIDE_B].rndv_bytes), total);
	assert_int_equal(atomic_load(&m->h->side[MBOX_SIDE_B].rndv_failed), 0);
	/* 4 data packets, not hundreds of fragments */
	assert_int_equal(atomic_load(&m->h->side[MBOX_SIDE_B].recv_pkts),
			 atomic_load(&m->h->side[MBOX_SIDE_A].sent_pkts));
	assert_true(atomic_load(&m->h->side[MBOX_SIDE_A].sent_pkts) < 10);
	mbox_close(m);
	close_end(&a);
	close_end(&b);
	rmname();
	free(buf);
	free(want);
}

/* GM-style receive buffers: a message sent by reference is pulled straight
 * into the buffer the receiver names, and delivered from there. */
static uint8_t user_rx[200000];
static _Atomic int into_user;

static void *give_user_rx(void *arg, uint32_t src, uint32_t dst, size_t len)
{
	return len <= sizeof(user_rx) ? user_rx : NULL;
}

static void collect_check(void *arg, uint32_t src, uint32_t dst, const void *d, size_t n)
{
	if (d == user_rx)
		atomic_fetch_add(&into_user, 1);
	collect(arg, src, dst, d, n);
}

static void test_cma_rx_buffer(void **s)
{
	struct end a = { 0 }, b = { 0 };
	struct shmcm_params p = { .side = MBOX_SIDE_B, .flow = SHMCM_FLOW_WAIT };
	struct shmcm_upcalls uc = { up, down, collect_check, &b, give_user_rx, NULL };
	uint8_t *buf = malloc(150000);

	mkname("rxbuf");
	open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_WAIT, false, NULL);
	open_end_with(&b, p, uc);
	connect_pair(&a, &b);
	for (int i = 0; i < 150000; i++)
		buf[i] = (uint8_t)(i * 13);
	assert_int_equal(shmcm_transmit(a.c, 0, 0, buf, 150000), 0);
	want_len = 150000;
	assert_true(wait_for(&b, got_all, 3000));
	assert_memory_equal(b.got, buf, 150000);
	assert_memory_equal(user_rx, buf, 150000);
	assert_int_equal(atomic_load(&into_user), 1);
	close_end(&a);
	close_end(&b);
	rmname();
	free(buf);
}

/* Asynchronous sends by reference: up to SHMCM_REF_WINDOW pulls overlap;
 * completions come in order, each after its own pull. */
struct sent_log { int n; int status[64]; int order[64]; };

static struct sent_log slog;

static void record_sent(void *ctx, int status)
{
	int i = (int)(intptr_t)ctx;

	slog.order[slog.n] = i;
	slog.status[slog.n] = status;
	slog.n++;
}

static void test_send_ref_window(void **s)
{
	enum { N = 40, SZ = 100000 };
	struct end a = { 0 }, b = { 0 };
	uint8_t *bufs = malloc((size_t)N * SZ);
	int rc;

	memset(&slog, 0, sizeof(slog));
	mkname("win");
	open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_WAIT, false, NULL);
	open_end(&b, MBOX_SIDE_B, SHMCM_FLOW_WAIT, false, NULL);
	connect_pair(&a, &b);
	for (int i = 0; i < N; i++) {
		for (int j = 0; j < SZ; j++)
			bufs[(size_t)i * SZ + j] = (uint8_t)(i + j * 3);
		rc = shmcm_send_ref(a.c, 0, 0, bufs + (size_t)i * SZ, SZ, record_sent,
				    (void *)(intptr_t)i);
		assert_int_equal(rc, 0);
		assert_true(shmcm_refs_in_flight(a.c) <= SHMCM_REF_WINDOW);
	}
	uint64_t end = xtime_ns() + 5000000000ull;
	while (shmcm_refs_in_flight(a.c) && xtime_ns() < end)
		shmcm_reap(a.c);
	assert_int_equal(slog.n, N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(slog.order[i], i);
		assert_int_equal(slog.status[i], 0);
	}
	want_len = (size_t)N * SZ;
	assert_true(wait_for(&b, got_all, 5000));
	assert_memory_equal(b.got, bufs, (size_t)N * SZ);
	assert_int_equal(shmcm_send_ref(a.c, 0, 0, bufs, 0, record_sent, NULL), -EMSGSIZE);
	close_end(&a);
	close_end(&b);
	rmname();

	/* a peer that does not accept references */
	struct shmcm_params p = { .side = MBOX_SIDE_B, .flow = SHMCM_FLOW_WAIT, .no_cma = true };
	struct shmcm_upcalls uc = { up, down, collect, &b, NULL, NULL };
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	mkname("win2");
	open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_WAIT, false, NULL);
	open_end_with(&b, p, uc);
	connect_pair(&a, &b);
	assert_int_equal(shmcm_send_ref(a.c, 0, 0, bufs, SZ, record_sent, NULL), -EOPNOTSUPP);
	/* shmcm_transmit still gets it there, inline */
	assert_int_equal(shmcm_transmit(a.c, 0, 0, bufs, SZ), 0);
	want_len = SZ;
	assert_true(wait_for(&b, got_all, 5000));
	assert_memory_equal(b.got, bufs, SZ);
	close_end(&a);
	close_end(&b);
	rmname();
	free(bufs);
}

/* A raw receiver on side b that cannot pull: it reports the failure, and
 * the sender resends the message inline. */
struct raw_rx {
	struct mbox *m;
	uint8_t got[80000];
	size_t got_len, want;
	int refs, inline_pkts;
};

static void *raw_receiver(void *arg)
{
	struct raw_rx *r = arg;
	struct mbox_side *me = &r->m->h->side[MBOX_SIDE_B];
	uint64_t end = xtime_ns() + 5000000000ull;

	while (xtime_ns() < end && r->got_len < r->want) {
		const uint8_t *slot = mbox_rx_peek(r->m, 0);
		struct shmcm_pkt p;

		if (!slot)
			continue;
		if (shmcm_decode(slot, mbox_pkt_max(r->m), 1 << 20, &p) == 0 &&
		    p.type == SHMCM_UDATA_1_PKT) {
			if (shmcm_pkt_is_ref(&p)) {
				/* the receiver's side of the protocol: outcome
				 * 1 (failed) at [done % ring], then done + 1 */
				uint32_t d = atomic_load(&me->rndv_done);
				r->refs++;
				atomic_store(&me->rndv_status[d % MBOX_RNDV_RING], 1);
				atomic_fetch_add(&me->rndv_failed, 1);
				atomic_store(&me->rndv_done, d + 1);
				mbox_wake_word(&me->rndv_done, &r->m->h->side[MBOX_SIDE_A].rndv_sleep);
			} else {
				r->inline_pkts++;
				memcpy(r->got + r->got_len, p.data, p.data_len);
				r->got_len += p.data_len;
			}
		}
		mbox_rx_release(r->m, 1);
	}
	return NULL;
}

static void test_cma_fallback(void **s)
{
	struct end a = { 0 };
	struct raw_rx r = { 0 };
	uint8_t pkt[SHMCM_CON_LEN], *buf = malloc(70000);
	pthread_t t;
	char err[256];

	cfgname("cmafb", (struct mbox_cfg){ 64, 1024, 1000, 0 });
	assert_int_equal(mbox_open(conn_name, &r.m, err, sizeof(err)), 0);
	assert_int_equal(mbox_claim(r.m, MBOX_SIDE_B, err, sizeof(err)), 0);
	atomic_store(&r.m->h->side[MBOX_SIDE_B].cma, 1);	/* claims it can pull */
	atomic_store(&r.m->h->side[MBOX_SIDE_B].cno, 1);
	open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_WAIT, false, NULL);
	shmcm_connect(a.c);
	shmcm_encode_con(pkt, SHMCM_CON_REQ, 1);
	memcpy(mbox_tx_reserve(r.m), pkt, sizeof(pkt));
	mbox_tx_publish(r.m);
	int wc = shmcm_wait_connected(a.c, 3000000000ull);
	if (wc)
		fail_msg("not connected: %s, state %s", strerror(-wc),
			 shmcm_reason_str(shmcm_get_reason(a.c)));
	/* what a real end publishes once connected */
	atomic_store(&r.m->h->side[MBOX_SIDE_B].peer_cno, atomic_load(&r.m->h->side[MBOX_SIDE_A].cno));
	atomic_store(&r.m->h->side[MBOX_SIDE_B].state, SHMCM_CONNECTED);

	for (int i = 0; i < 70000; i++)
		buf[i] = (uint8_t)(i % 251);
	r.want = 5000;
	assert_int_equal(pthread_create(&t, NULL, raw_receiver, &r), 0);
	assert_int_equal(shmcm_transmit(a.c, 0, 0, buf, 5000), 0);	/* < 64 KiB: inline */
	pthread_join(t, NULL);
	assert_int_equal(r.refs, 0);
	/* 70000 > one packet and >= 64 KiB: by reference, refused, inline */
	r.got_len = 0;
	r.want = 70000;
	assert_int_equal(pthread_create(&t, NULL, raw_receiver, &r), 0);
	int rc = shmcm_transmit(a.c, 0, 0, buf, 70000);
	pthread_join(t, NULL);
	assert_int_equal(rc, 0);
	assert_int_equal(r.refs, 1);
	assert_int_equal(r.got_len, 70000);
	assert_memory_equal(r.got, buf, 70000);	/* the inline resend, whole */
	/* and the sender does not try by reference again */
	r.got_len = 0;
	r.refs = 0;
	assert_int_equal(pthread_create(&t, NULL, raw_receiver, &r), 0);
	assert_int_equal(shmcm_transmit(a.c, 0, 0, buf, 70000), 0);
	pthread_join(t, NULL);
	assert_int_equal(r.refs, 0);
	assert_int_equal(r.got_len, 70000);
	close_end(&a);
	mbox_close(r.m);
	rmname();
	free(buf);
}

/* A reference to memory the sender does not have: counted as failed,
 * nothing delivered, the connection stays up. */
static void test_cma_bad_ref(void **s)
{
	struct end b = { 0 };
	struct mbox *m;
	uint8_t pkt[SHMCM_UDATA_HLEN];

	mkname("badref");
	open_end(&b, MBOX_SIDE_B, SHMCM_FLOW_WAIT, false, NULL);
	shmcm_connect(b.c);
	m = raw_attach(&b, 1);
	shmcm_encode_udata_ref(pkt, 1, 9, 0, 0, 100000, 16);	/* address 16 */
	raw_send(m, pkt, SHMCM_UDATA_HLEN);
	raw_udata(m, 1, "after", 0);
	want_len = 5;
	assert_true(wait_for(&b, got_all, 3000));
	assert_int_equal(b.got_len, 5);
	assert_memory_equal(b.got, "after", 5);
	assert_int_equal(atomic_load(&m->h->side[MBOX_SIDE_B].rndv_failed), 1);
	assert_int_equal(atomic_load(&m->h->side[MBOX_SIDE_B].rndv_done), 1);
	assert_int_equal(shmcm_get_state(b.c), SHMCM_CONNECTED);
	mbox_close(m);
	close_end(&b);
	rmname();
}

/* Review F1: a deliver up-call that transmits (an echo) and blocks on a
 * full ring must not keep a disconnect from completing. */
static struct shmcm_conn *echo_conn;

static void echo_back(void *arg, uint32_t src, uint32_t dst, const void *d, size_t n)
{
	shmcm_transmit(echo_conn, src, dst, d, n);	/* may block: ring full */
}

static void test_disconnect_while_deliver_blocks(void **s)
{
	struct end a = { 0 }, b = { 0 };
	uint8_t msg[200] = { 0 };

	cfgname("echo", (struct mbox_cfg){ 8, 256, 60000, 0 });
	echo_conn = open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_WAIT, false, echo_back);
	open_end(&b, MBOX_SIDE_B, SHMCM_FLOW_WAIT, true, NULL);	/* never polled below */
	connect_polled(&a, &b);
	/* a echoes each into its ring to b, which nobody reads: it fills */
	for (int i = 0; i < 8; i++)
		assert_int_equal(shmcm_transmit(b.c, 0, 0, msg, sizeof(msg)), 0);
	usleep(200000);
	uint64_t t0 = xtime_ns();
	shmcm_disconnect(a.c);
	assert_true(xtime_ns() - t0 < 2000000000ull);
	assert_int_equal(shmcm_get_state(a.c), SHMCM_DISCONNECTED);
	close_end(&a);
	close_end(&b);
	rmname();
}

/* Review F4: a peer that forges its ring head (no packet behind it) and
 * dies: we neither spin on it nor miss the death. */
static void test_forged_head(void **s)
{
	struct end a = { 0 };
	int pfd[2];
	pid_t pid;
	char c;

	cfgname("forge", (struct mbox_cfg){ 64, 256, 60000, 0 });
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	if (pid == 0) {
		child_setup(pfd[1]);	/* reads: EOF if the parent gives up */
		struct mbox *m;
		uint8_t pkt[SHMCM_CON_LEN];
		char err[256];
		if (mbox_open(conn_name, &m, err, sizeof(err)) < 0 ||
		    mbox_claim(m, MBOX_SIDE_B, err, sizeof(err)) < 0)
			_exit(3);
		if (read(pfd[0], &c, 1) != 1)	/* a has attached */
			_exit(4);
		atomic_store(&m->h->side[MBOX_SIDE_B].cno, 1);
		shmcm_encode_con(pkt, SHMCM_CON_REQ, 1);
		memcpy(mbox_tx_reserve(m), pkt, sizeof(pkt));
		mbox_tx_publish(m);
		if (read(pfd[0], &c, 1) != 1)	/* a is connected */
			_exit(4);
		/* head ahead of any packet */
		atomic_fetch_add(&m->h->ring[MBOX_SIDE_B].head, 5);
		usleep(300000);
		_exit(0);	/* dies without a word */
	}
	open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_WAIT, false, NULL);
	shmcm_connect(a.c);
	assert_int_equal(write(pfd[1], "x", 1), 1);
	assert_int_equal(shmcm_wait_connected(a.c, 3000000000ull), 0);
	assert_int_equal(write(pfd[1], "x", 1), 1);
	struct timespec c0, c1;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
	usleep(250000);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
	double cpu = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9;
	assert_true(cpu < 0.1);		/* not spinning on the forged head */
	waitpid(pid, NULL, 0);
	assert_true(wait_for(&a, is_down, 2000));
	assert_int_equal(a.reason, SHMCM_R_PEER_GONE);
	close_end(&a);
	close(pfd[0]);
	close(pfd[1]);
	rmname();
}

/* ---------------------------------------------------------------- stress */

static inline uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* Message `seq`: a size and content both derived from seq, so the receiver
 * checks every byte, the order and that nothing is missing. Mostly small,
 * some fragmented. */
static uint32_t stress_size(uint64_t seq)
{
	uint64_t r = mix(seq);
	unsigned k = (unsigned)(r % 100);

	if (k < 90)
		return (uint32_t)(r >> 8) % 65;
	if (k < 99)
		return 65 + (uint32_t)(r >> 8) % 448;
	return 513 + (uint32_t)(r >> 8) % 3000;
}

static void stress_fill(uint64_t seq, uint8_t *buf, uint32_t n)
{
	uint64_t x = mix(seq ^ 0x9e3779b97f4a7c15ull);

	for (uint32_t i = 0; i < n; i += 8) {
		uint32_t k = n - i < 8 ? n - i : 8;
		x = mix(x + i);
		memcpy(buf + i, &x, k);
	}
}

static _Atomic uint64_t stress_done;

static void stress_check(void *arg, uint32_t src, uint32_t dst, const void *d, size_t n)
{
	struct end *e = arg;
	uint8_t want[4096];
	uint64_t seq = e->next_seq++;
	uint32_t sz = stress_size(seq);

	if (n != sz || src != (uint32_t)seq) {
		e->errors++;
	} else {
		stress_fill(seq, want, sz);
		if (memcmp(want, d, n) != 0)
			e->errors++;
	}
	atomic_store_explicit(&stress_done, e->next_seq, memory_order_release);
}

static void test_stress(void **s)
{
	const char *env = getenv("XPRT_STRESS_MSGS");
	uint64_t total = env ? strtoull(env, NULL, 10) : 10000000ull;
	uint8_t buf[4096];
	pid_t pid;
	int st;

	cfgname("stress", (struct mbox_cfg){ 256, 512, 1000, 0 });
	pid = fork();
	if (pid == 0) {
		child_setup(-1);
		struct end b = { 0 };
		open_end(&b, MBOX_SIDE_B, SHMCM_FLOW_WAIT, true, stress_check);
		shmcm_connect(b.c);
		uint64_t deadline = xtime_ns() + 600 * 1000000000ull;
		while (atomic_load(&stress_done) < total && xtime_ns() < deadline)
			if (shmcm_poll(b.c, 256) == 0 && shmcm_get_state(b.c) == SHMCM_DISCONNECTED &&
			    atomic_load(&stress_done) > 0)
				break;
		uint64_t got = atomic_load(&stress_done), errs = b.errors;
		fprintf(stderr, "stress: received %llu of %llu messages, %llu bad\n",
			(unsigned long long)got, (unsigned long long)total, (unsigned long long)errs);
		close_end(&b);
		_exit(got == total && errs == 0 ? 0 : 1);
	}
	struct end a = { 0 };
	open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_WAIT, false, NULL);
	shmcm_connect(a.c);
	assert_int_equal(shmcm_wait_connected(a.c, 5000000000ull), 0);
	uint64_t t0 = xtime_ns();
	for (uint64_t seq = 0; seq < total; seq++) {
		uint32_t n = stress_size(seq);
		stress_fill(seq, buf, n);
		int rc = shmcm_transmit(a.c, (uint32_t)seq, 0, buf, n);
		if (rc < 0)
			fail_msg("transmit of message %llu: %s", (unsigned long long)seq, strerror(-rc));
	}
	assert_int_equal(shmcm_wait_drained(a.c, 60000000000ull), 0);
	double secs = (double)(xtime_ns() - t0) / 1e9;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	fprintf(stderr, "stress: %llu messages in %.2f s (%.2f M msg/s)\n",
		(unsigned long long)total, secs, (double)total / secs / 1e6);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	close_end(&a);
	rmname();
}

static bool has_eof(struct end *e) { return e->eofs > 0; }

/* Half-close: after a shutdown the peer gets everything sent before, then
 * eof; its own direction still works; a second shutdown closes the other
 * way; the disconnect after both is a clean end on both sides. */
static void test_half_close(void **s)
{
	struct end a = { 0 }, b = { 0 };
	struct shmcm_upcalls uc = { up, down, collect, NULL, NULL, on_eof };
	uint8_t msg[3000];

	mkname("fin");
	open_end_with(&a, (struct shmcm_params){ .side = MBOX_SIDE_A }, uc);
	open_end_with(&b, (struct shmcm_params){ .side = MBOX_SIDE_B }, uc);
	assert_int_equal(shmcm_shutdown(a.c), -ENOTCONN);	/* not connected yet */
	connect_pair(&a, &b);
	assert_true(shmcm_peer_has_fin(a.c));
	assert_true(shmcm_peer_has_fin(b.c));
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 7);
	/* fragmented messages right before the FIN */
	for (int i = 0; i < 20; i++)
		assert_int_equal(shmcm_transmit(a.c, 0, 0, msg, sizeof(msg)), 0);
	assert_int_equal(shmcm_shutdown(a.c), 0);
	assert_int_equal(shmcm_transmit(a.c, 0, 0, msg, 1), -EPIPE);
	assert_int_equal(shmcm_transmit2(a.c, 0, 0, msg, 1, NULL, 0), -EPIPE);
	assert_int_equal(shmcm_shutdown(a.c), 0);	/* again: no second CON_FIN */
	assert_true(wait_for(&b, has_eof, 3000));
	assert_int_equal(b.got_at_eof, 20 * sizeof(msg));
	assert_int_equal(b.eofs, 1);
	assert_int_equal(a.eofs, 0);
	assert_int_equal(shmcm_get_state(b.c), SHMCM_CONNECTED);
	/* the other direction is open */
	assert_int_equal(shmcm_transmit(b.c, 0, 0, "reply", 5), 0);
	want_len = 5;
	assert_true(wait_for(&a, got_all, 3000));
	assert_memory_equal(a.got, "reply", 5);
	assert_int_equal(shmcm_shutdown(b.c), 0);
	assert_true(wait_for(&a, has_eof, 3000));
	assert_int_equal(a.got_at_eof, 5);
	assert_int_equal(shmcm_wait_drained(a.c, 2000000000ull), 0);
	assert_true(shmcm_drained(a.c));
	shmcm_disconnect(a.c);
	assert_int_equal(shmcm_get_reason(a.c), SHMCM_R_CLOSED);
	assert_true(wait_for(&b, is_down, 3000));
	assert_int_equal(b.reason, SHMCM_R_CLOSED);
	assert_int_equal(shmcm_get_peer_reason(b.c), SHMCM_R_CLOSED);

	/* a new generation has both directions open again */
	a.downs = b.downs = 0;
	connect_pair(&a, &b);
	assert_int_equal(shmcm_transmit(a.c, 0, 0, "x", 1), 0);
	shmcm_disconnect(b.c);		/* one direction only: not clean */
	assert_int_equal(shmcm_get_reason(b.c), SHMCM_R_LOCAL);
	assert_true(wait_for(&a, is_down, 3000));
	assert_int_equal(a.reason, SHMCM_R_PEER_RST);
	close_end(&a);
	close_end(&b);
	rmname();
}

/* A peer that does not advertise CON_FIN is never sent one: shutdown says
 * so and sends nothing; the old close (drain, disconnect) still works. */
static void test_half_close_legacy_peer(void **s)
{
	struct end a = { 0 }, b = { 0 };
	struct shmcm_upcalls uc = { up, down, collect, NULL, NULL, on_eof };

	mkname("finold");
	open_end_with(&a, (struct shmcm_params){ .side = MBOX_SIDE_A }, uc);
	open_end_with(&b, (struct shmcm_params){ .side = MBOX_SIDE_B, .no_fin = true }, uc);
	connect_pair(&a, &b);
	assert_false(shmcm_peer_has_fin(a.c));
	assert_true(shmcm_peer_has_fin(b.c));
	assert_int_equal(shmcm_transmit(a.c, 0, 0, "data", 4), 0);
	assert_int_equal(shmcm_shutdown(a.c), -EOPNOTSUPP);
	assert_int_equal(shmcm_transmit(a.c, 0, 0, "more", 4), 0);	/* still open */
	want_len = 8;
	assert_true(wait_for(&b, got_all, 3000));
	assert_int_equal(shmcm_wait_drained(a.c, 2000000000ull), 0);
	shmcm_disconnect(a.c);
	assert_true(wait_for(&b, is_down, 3000));
	assert_int_equal(b.reason, SHMCM_R_PEER_RST);
	assert_int_equal(b.eofs, 0);
	close_end(&a);
	close_end(&b);
	rmname();
}

/* Data a broken peer sends after its own CON_FIN is not delivered. */
static void test_data_after_fin_dropped(void **s)
{
	struct end b = { 0 };
	struct shmcm_upcalls uc = { up, down, collect, NULL, NULL, on_eof };
	struct mbox *m;
	uint8_t pkt[SHMCM_CON_LEN];

	mkname("finraw");
	open_end_with(&b, (struct shmcm_params){ .side = MBOX_SIDE_B }, uc);
	shmcm_connect(b.c);
	m = raw_attach(&b, 5);
	raw_udata(m, 5, "before", 0);
	shmcm_encode_con(pkt, SHMCM_CON_FIN, 5);
	raw_send(m, pkt, sizeof(pkt));
	raw_udata(m, 5, "after", 0);
	shmcm_encode_con(pkt, SHMCM_CON_FIN, 5);	/* and a second FIN */
	raw_send(m, pkt, sizeof(pkt));
	assert_true(wait_for(&b, has_eof, 3000));
	/* data after the peer's end of data: a broken peer, reset */
	assert_true(wait_for(&b, is_down, 3000));
	assert_int_equal(b.reason, SHMCM_R_RX_LOST);
	assert_int_equal(atomic_load(&m->h->side[MBOX_SIDE_B].recv_bad), 1);
	assert_int_equal(b.got_len, 6);
	assert_memory_equal(b.got, "before", 6);
	assert_int_equal(b.eofs, 1);
	mbox_close(m);
	close_end(&b);
	rmname();
}

/* LINX's transmit guard (seed 000, "Tx Data Path"): once a full mailbox
 * with the deferred queue at its limit has queued the disconnect job, no
 * user data enters the mailbox while the job waits, even when room comes
 * free.  a's job queue is held inside its connected up-call to keep the
 * job waiting; b polls. */
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static bool hold_entered, hold_released;

static void up_and_hold(void *arg)
{
	up(arg);
	pthread_mutex_lock(&hold_mu);
	hold_entered = true;
	pthread_cond_broadcast(&hold_cv);
	while (!hold_released)
		pthread_cond_wait(&hold_cv, &hold_mu);
	pthread_mutex_unlock(&hold_mu);
}

static void test_transmit_guard(void **s)
{
	struct end a = { 0 }, b = { 0 };
	struct shmcm_upcalls uca = { up_and_hold, down, collect, NULL, NULL, NULL };
	uint8_t msg[200] = { 1 };
	int rc = 0, i;

	hold_entered = hold_released = false;
	cfgname("guard", (struct mbox_cfg){ 8, 256, 1000, 2 });
	open_end_with(&a, (struct shmcm_params){ .side = MBOX_SIDE_A, .flow = SHMCM_FLOW_DEFER }, uca);
	open_end(&b, MBOX_SIDE_B, SHMCM_FLOW_WAIT, true, NULL);
	shmcm_connect(a.c);
	shmcm_connect(b.c);
	for (i = 0; i < 5000; i++) {
		shmcm_poll(b.c, 16);
		pthread_mutex_lock(&hold_mu);
		bool in = hold_entered;
		pthread_mutex_unlock(&hold_mu);
		if (in && shmcm_get_state(b.c) == SHMCM_CONNECTED)
			break;
		usleep(1000);
	}
	assert_int_equal(shmcm_get_state(b.c), SHMCM_CONNECTED);
	/* a's job queue is held: fill the mailbox and the deferred queue */
	for (i = 0; i < 100 && (rc = shmcm_transmit(a.c, 0, 0, msg, sizeof(msg))) == 0; i++)
		;
	assert_int_equal(rc, -ENOBUFS);
	size_t sent = (size_t)i * sizeof(msg);
	/* b reads everything: the mailbox has room again, the job still waits */
	want_len = sent - 2 * sizeof(msg);	/* what entered the mailbox */
	for (int k = 0; k < 100; k++)
		shmcm_poll(b.c, 64);
	assert_true(b.got_len >= want_len);
	size_t before = b.got_len;
	/* ... but no user data may enter it */
	assert_int_equal(shmcm_transmit(a.c, 0, 0, msg, sizeof(msg)), -ENOBUFS);
	assert_int_equal(shmcm_transmit2(a.c, 0, 0, msg, 10, NULL, 0), -ENOBUFS);
	struct iovec iov[2];
	assert_int_equal(shmcm_tx_claim(a.c, iov, 2), -ENOBUFS);
	for (int k = 0; k < 20; k++)
		shmcm_poll(b.c, 64);
	assert_int_equal(b.got_len, before);
	assert_int_equal(shmcm_get_state(a.c), SHMCM_CONNECTED);	/* job not run yet */
	/* let the job queue go: the reset happens */
	pthread_mutex_lock(&hold_mu);
	hold_released = true;
	pthread_cond_broadcast(&hold_cv);
	pthread_mutex_unlock(&hold_mu);
	assert_true(wait_for(&a, is_down, 3000));
	assert_int_equal(a.reason, SHMCM_R_INTERNAL);
	close_end(&a);
	close_end(&b);
	rmname();
}

/* A user that cannot take message number refuse_at: it disconnects from
 * inside the deliver up-call, as mkshmcon does when its stdout fails. */
static void refuse_deliver(void *arg, uint32_t src, uint32_t dst, const void *d, size_t n)
{
	struct end *e = arg;

	pthread_mutex_lock(&e->mu);
	bool refuse = e->refuse_at && e->nmsg + 1 == e->refuse_at;
	if (refuse)
		e->refused++;
	pthread_mutex_unlock(&e->mu);
	if (refuse)
		shmcm_disconnect(e->c);
	else
		collect(arg, src, dst, d, n);
}

static bool ring_read(struct mbox *m, int side)
{
	return atomic_load(&m->h->ring[side].head) == atomic_load(&m->h->ring[side].tail);
}

/* shmcm_drained() counts what the peer handed to its user, not what it
 * took from the ring: true after a peer that took everything closed at
 * once (the old test of an empty ring raced with that close), false after
 * a peer that refused a message, although it went on to empty the ring
 * (after its reset, packets of the dead generation are read and
 * dropped). */
static void test_delivery_count(void **s)
{
	struct end a = { 0 }, b = { 0 };
	struct shmcm_upcalls uca = { up, down, collect, NULL, NULL, on_eof };
	struct shmcm_upcalls ucb = { up, down, refuse_deliver, NULL, NULL, on_eof };
	uint8_t msg[1000];
	struct mbox *m;
	char err[256];

	memset(msg, 0x5a, sizeof(msg));
	mkname("count");
	assert_int_equal(mbox_open(conn_name, &m, err, sizeof(err)), 0);
	open_end_with(&a, (struct shmcm_params){ .side = MBOX_SIDE_A }, uca);
	open_end_with(&b, (struct shmcm_params){ .side = MBOX_SIDE_B }, ucb);
	connect_pair(&a, &b);
	for (int i = 0; i < 5; i++)
		assert_int_equal(shmcm_transmit(a.c, 0, 0, msg, sizeof(msg)), 0);
	want_len = 5 * sizeof(msg);
	assert_true(wait_for(&b, got_all, 3000));
	assert_int_equal(shmcm_wait_drained(a.c, 2000000000ull), 0);
	shmcm_disconnect(b.c);
	assert_true(wait_for(&a, is_down, 3000));
	assert_true(shmcm_drained(a.c));
	assert_int_equal(shmcm_wait_drained(a.c, 1000000000ull), 0);

	/* the third message of the next generation is refused */
	a.downs = b.downs = 0;
	pthread_mutex_lock(&b.mu);
	b.refuse_at = b.nmsg + 3;
	pthread_mutex_unlock(&b.mu);
	connect_pair(&a, &b);
	for (int i = 0; i < 10; i++)
		(void)shmcm_transmit(a.c, 0, 0, msg, sizeof(msg));	/* -ENOTCONN late */
	assert_true(wait_for(&a, is_down, 3000));
	assert_true(wait_for(&b, is_down, 3000));
	assert_int_equal(b.reason, SHMCM_R_LOCAL);
	for (int i = 0; i < 3000 && !ring_read(m, MBOX_SIDE_A); i++)
		usleep(1000);
	assert_true(ring_read(m, MBOX_SIDE_A));
	pthread_mutex_lock(&b.mu);
	assert_int_equal(b.refused, 1);
	assert_int_equal(b.nmsg, 5 + 2);	/* nothing after the refused one */
	pthread_mutex_unlock(&b.mu);
	assert_false(shmcm_drained(a.c));
	assert_int_equal(shmcm_wait_drained(a.c, 1000000000ull), -ENOTCONN);
	mbox_close(m);
	close_end(&a);
	close_end(&b);
	rmname();
}

/* Whether the peer understands CON_FIN is read when the connection comes
 * up, from the words of the process that brought it up even when it has
 * detached by then (an end whose input failed at once). */
static void test_peer_caps_latched(void **s)
{
	struct end b = { 0 };
	struct mbox *m;
	uint8_t pkt[SHMCM_CON_LEN];
	char err[256];

	mkname("caps");
	open_end(&b, MBOX_SIDE_B, SHMCM_FLOW_WAIT, true, NULL);
	assert_int_equal(mbox_open(conn_name, &m, err, sizeof(err)), 0);
	assert_int_equal(mbox_claim(m, MBOX_SIDE_A, err, sizeof(err)), 0);
	atomic_store(&m->h->side[MBOX_SIDE_A].caps, MBOX_CAP_FIN);
	atomic_store(&m->h->side[MBOX_SIDE_A].caps_owner, m->owner);
	atomic_store(&m->h->side[MBOX_SIDE_A].cno, 7);
	shmcm_encode_con(pkt, SHMCM_CON_REQ, 7);
	raw_send(m, pkt, sizeof(pkt));
	mbox_close(m);		/* gone before b has read a thing */
	shmcm_connect(b.c);
	for (int i = 0; i < 3000 && !atomic_load(&b.ups); i++) {
		shmcm_poll(b.c, 16);
		usleep(1000);
	}
	assert_int_equal(b.ups, 1);
	assert_true(shmcm_peer_has_fin(b.c));
	close_end(&b);
	rmname();
}

static void *disconnect_thread(void *c)
{
	shmcm_disconnect(c);
	return NULL;
}

/* Zero-copy stream sends: claimed slots are filled in place and sent as
 * one message each; a claim blocks other sends and queues CON packets;
 * committing nothing sends nothing. */
/* shmcm_tx_room() reads the ring's tail (a line the peer writes) only when
 * its last view of it leaves fewer than `enough` slots: until then the room
 * is understated, never overstated. */
static void test_tx_room(void **s)
{
	struct end a = { 0 }, b = { 0 };
	uint32_t cap = 0;
	int i;

	/* a long timeout: no keep-alive packet from a's CM during the test */
	cfgname("room", (struct mbox_cfg){ 16, 256, 60000, 0 });
	open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_WAIT, false, NULL);
	open_end(&b, MBOX_SIDE_B, SHMCM_FLOW_WAIT, true, NULL);
	connect_polled(&a, &b);
	/* b has taken the CON packets: the whole ring is ours (enough =
	 * everything: read unless known empty) */
	for (i = 0; i < 3000 && shmcm_tx_room(a.c, 2, 14, &cap) != 14; i++) {
		shmcm_poll(b.c, 16);
		usleep(1000);
	}
	assert_int_equal(cap, 14);
	assert_int_equal(shmcm_tx_room(a.c, 2, 14, &cap), 14);
	for (i = 0; i < 4; i++)
		assert_int_equal(shmcm_transmit(a.c, 0, 0, "x", 1), 0);
	assert_int_equal(shmcm_tx_room(a.c, 2, 0, &cap), 10);
	want_len = 4;
	for (i = 0; i < 3000 && !got_all(&b); i++)
		shmcm_poll(b.c, 16);
	assert_int_equal(b.got_len, 4);
	/* taken, but our view still has 10 >= enough: not looked at */
	assert_int_equal(shmcm_tx_room(a.c, 2, 10, &cap), 10);
	/* wanting more than the view has: the tail is read, and kept */
	assert_int_equal(shmcm_tx_room(a.c, 2, 11, &cap), 14);
	assert_int_equal(shmcm_tx_room(a.c, 2, 0, &cap), 14);
	close_end(&a);
	close_end(&b);
	rmname();
}

/* A consumer asleep in mbox_rx_wait() and woken with nothing there -- a
 * kick, or a producer's wake-up that comes late, for a packet taken
 * during the arm window -- looks again (0); only a signal is -EINTR. */
static struct mbox *wake_m;
static pthread_t wake_target;
static _Atomic bool wake_done;

/* wakes the waiter every 5 ms (a wake that finds nobody asleep is lost)
 * until it has returned */
static void *late_wake(void *arg)
{
	while (!atomic_load(&wake_done)) {
		usleep(5000);
		if (arg)
			pthread_kill(wake_target, SIGUSR1);
		else
			mbox_rx_kick(wake_m);
	}
	return NULL;
}

static void on_usr1(int sig) { (void)sig; }

static void test_rx_wait_wakeups(void **s)
{
	struct sigaction sa = { .sa_handler = on_usr1 }, old;	/* no SA_RESTART */
	char err[256];
	pthread_t t;

	cfgname("wake", (struct mbox_cfg){ 16, 256, 60000, 0 });
	assert_int_equal(mbox_open(conn_name, &wake_m, err, sizeof(err)), 0);
	assert_int_equal(mbox_claim(wake_m, MBOX_SIDE_B, err, sizeof(err)), 0);
	assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
	wake_target = pthread_self();
	for (int sig = 0; sig < 2; sig++) {
		int rc = -ETIMEDOUT;

		atomic_store(&wake_done, false);
		assert_int_equal(pthread_create(&t, NULL, late_wake, sig ? &t : NULL), 0);
		/* each wait sleeps up to the 20 ms backstop */
		for (int i = 0; i < 500 && rc == -ETIMEDOUT; i++)
			rc = mbox_rx_wait(wake_m, 0, 5000000000ull);
		atomic_store(&wake_done, true);
		pthread_join(t, NULL);
		assert_int_equal(rc, sig ? -EINTR : 0);
	}
	assert_int_equal(mbox_rx_wait(wake_m, 0, 20000000ull), -ETIMEDOUT);
	sigaction(SIGUSR1, &old, NULL);
	mbox_close(wake_m);
	rmname();
}

static void test_tx_claim(void **s)
{
	struct end a = { 0 }, b = { 0 };
	struct iovec iov[8];
	uint8_t want[2000];
	int n;

	cfgname("claim", (struct mbox_cfg){ 16, 256, 1000, 0 });
	open_end(&a, MBOX_SIDE_A, SHMCM_FLOW_WAIT, false, NULL);
	open_end(&b, MBOX_SIDE_B, SHMCM_FLOW_WAIT, false, NULL);
	connect_pair(&a, &b);
	n = shmcm_tx_claim(a.c, iov, 8);
	assert_in_range(n, 1, 8);
	for (int i = 0; i < n; i++)
		assert_int_equal(iov[i].iov_len, 256 - SHMCM_UDATA_HLEN);
	assert_int_equal(shmcm_transmit(a.c, 0, 0, "x", 1), -EBUSY);
	assert_int_equal(shmcm_tx_claim(a.c, iov, 8), -EBUSY);
	size_t len = 0, fill = (size_t)n * iov[0].iov_len - 7;	/* last one partly */
	for (int i = 0; i < n && len < fill; i++) {
		size_t k = fill - len < iov[i].iov_len ? fill - len : iov[i].iov_len;
		for (size_t j = 0; j < k; j++)
			((uint8_t *)iov[i].iov_base)[j] = want[len + j] = (uint8_t)(len + j + 3);
		len += k;
	}
	assert_int_equal(shmcm_tx_commit(a.c, 1, 2, len), 0);
	want_len = len;
	assert_true(wait_for(&b, got_all, 3000));
	/* (under the lock: the receive thread may take what comes next) */
	pthread_mutex_lock(&b.mu);
	assert_int_equal(b.got_len, len);
	assert_memory_equal(b.got, want, len);
	assert_int_equal(b.nmsg, (size_t)n);
	pthread_mutex_unlock(&b.mu);
	/* nothing committed: nothing sent, and sends work again */
	n = shmcm_tx_claim(a.c, iov, 8);
	assert_true(n >= 1);
	memset(iov[0].iov_base, 0xee, iov[0].iov_len);
	assert_int_equal(shmcm_tx_commit(a.c, 0, 0, 0), 0);
	assert_int_equal(shmcm_tx_commit(a.c, 0, 0, 0), -EINVAL);	/* no claim */
	assert_int_equal(shmcm_transmit(a.c, 0, 0, "end", 3), 0);
	want_len = len + 3;
	assert_true(wait_for(&b, got_all, 3000));
	pthread_mutex_lock(&b.mu);	/* the rx thread delivers on below */
	assert_memory_equal(b.got + len, "end", 3);
	pthread_mutex_unlock(&b.mu);
	/* a disconnect while a claim is held waits for the commit, whose
	 * bytes then still go out before the CON_RST */
	n = shmcm_tx_claim(a.c, iov, 1);
	assert_int_equal(n, 1);
	memcpy(iov[0].iov_base, "last", 4);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, disconnect_thread, a.c), 0);
	usleep(50000);
	assert_int_equal(shmcm_get_state(a.c), SHMCM_CONNECTED);
	assert_int_equal(shmcm_tx_commit(a.c, 0, 0, 4), 0);
	pthread_join(t, NULL);
	assert_true(wait_for(&b, is_down, 3000));
	pthread_mutex_lock(&b.mu);
	assert_memory_equal(b.got + len + 3, "last", 4);
	pthread_mutex_unlock(&b.mu);
	close_end(&a);
	close_end(&b);
	rmname();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_messages_and_close),
		cmocka_unit_test(test_side_busy),
		cmocka_unit_test(test_defq_overflow),
		cmocka_unit_test(test_peer_death),
		cmocka_unit_test(test_raw_peer),
		cmocka_unit_test(test_cma),
		cmocka_unit_test(test_cma_rx_buffer),
		cmocka_unit_test(test_send_ref_window),
		cmocka_unit_test(test_cma_fallback),
		cmocka_unit_test(test_disconnect_while_deliver_blocks),
		cmocka_unit_test(test_forged_head),
		cmocka_unit_test(test_cma_bad_ref),
		cmocka_unit_test(test_half_close),
		cmocka_unit_test(test_half_close_legacy_peer),
		cmocka_unit_test(test_data_after_fin_dropped),
		cmocka_unit_test(test_transmit_guard),
		cmocka_unit_test(test_tx_claim),
		cmocka_unit_test(test_tx_room),
		cmocka_unit_test(test_rx_wait_wakeups),
		cmocka_unit_test(test_delivery_count),
		cmocka_unit_test(test_peer_caps_latched),
		cmocka_unit_test(test_stress),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	char suffix[32], err[256], **names;
	size_t n;

	/* A test that failed half-way left its mailbox: remove ours. */
	snprintf(suffix, sizeof(suffix), "-%d", (int)getpid());
	if (mbox_list(&names, &n) == 0) {
		for (size_t i = 0; i < n; i++) {
			size_t l = strlen(names[i]), k = strlen(suffix);
			if (strncmp(names[i], "unit-", 5) == 0 && l > k &&
			    strcmp(names[i] + l - k, suffix) == 0)
				mbox_unlink(names[i], true, err, sizeof(err));
		}
		mbox_names_free(names, n);
	}
	return failed;
}
