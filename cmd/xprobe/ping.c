/* xprobe ping: round trips to an xprobe server, like ping(8).
 *
 * Over ports (shm, tcp, rdma) a message of SIZE bytes goes to the server's
 * echo port at the chosen priority and comes back on the same stream; the
 * transport is reliable, so a reply that does not come within -W is an
 * error, not a loss.  With --load, a low-priority bulk flow to the sink
 * port runs on the same connection meanwhile: the high-priority round trip
 * then shows what the priority scheduler is worth.  Over datagrams (udp,
 * ud) a PING datagram is answered by a PONG; a missing one counts as lost. */
#include "client.h"
#include "vt.h"
#include "core/cc.h"
#include "core/log.h"
#include "core/node.h"
#include "core/parse.h"
#include "core/stats.h"
#include "core/xtime.h"
#include "xprt/xdev.h"
#include "xprt/xdg.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct ping_opts {
	uint64_t count;		/* 0 = until interrupted */
	uint64_t interval_ns;
	uint64_t size;
	uint64_t timeout_ns;
	uint64_t load_size;	/* 0 = no background flow */
	uint64_t warmup;	/* round trips not counted (ports) */
	unsigned port;		/* --port: the server's port pinged (PROBE_PORT_ECHO) */
	bool size_set, timeout_set;
	struct common_opts co;
	struct vt_opts vt;	/* --op: a verbs test */
};

struct ping_result {
	const char *target;
	const char *transport;
	uint64_t sent, received, start_ns, end_ns;
	struct xhist rtt;
	/* --port: sends the receiving port refused, and the first status */
	uint64_t failed;
	enum xp_status first_failure;
	uint32_t inl;		/* verbs test: inline up to this */
	bool datagram;		/* udp, ud: no priorities */
};

static void print_reply(const struct ping_opts *o, const char *target, uint64_t seq,
				 uint64_t ns)
{
	printf("%llu bytes from %s: seq=%llu time=%.2f us\n", (unsigned long long)o->size,
	       target, (unsigned long long)seq, ns / 1000.0);
	cli_out();	/* a reader that went ends the run (exit 141) */
}

/* A line per reply, as ping(8) prints, when pings are -i apart. */
XINLINE void print_line(const struct ping_opts *o, const char *target, uint64_t seq, uint64_t ns)
{
	if (o->co.quiet || o->co.fmt != XFMT_TEXT || o->interval_ns == 0)
		return;
	print_reply(o, target, seq, ns);
}

static int report(const struct ping_opts *o, struct ping_result *r)
{
	uint64_t lost = r->sent - r->received;
	double loss = r->sent ? 100.0 * lost / r->sent : 0;
	double secs = (r->end_ns - r->start_ns) / 1e9;

	if (o->co.fmt == XFMT_TEXT) {
		printf("--- %s ping statistics ---\n", r->target);
		printf("%llu sent, %llu received, %.1f%% loss, time %.2f s\n",
		       (unsigned long long)r->sent, (unsigned long long)r->received, loss, secs);
		if (r->rtt.count)
			printf("rtt min/avg/p50/p99/max = %.2f/%.2f/%.2f/%.2f/%.2f us\n",
			       r->rtt.min / 1000.0, xhist_mean(&r->rtt) / 1000.0,
			       xhist_pct(&r->rtt, 50) / 1000.0, xhist_pct(&r->rtt, 99) / 1000.0,
			       r->rtt.max / 1000.0);
	} else {
		struct xnode *m = xnode_map();

		xnode_set_str(m, "target", r->target);
		xnode_set_str(m, "transport", r->transport);
		xnode_set_u64(m, "size", o->size);
		if (o->vt.op) {
			xnode_set_str(m, "op", vt_op_name(o->vt.op));
			xnode_set_u64(m, "imm", o->vt.imm);
			xnode_set_u64(m, "inline", r->inl);
		} else if (!r->datagram) {
			xnode_set_str(m, "prio", o->co.prio == XP_HIGH ? "high" : "low");
		}
		if (o->load_size)
			xnode_set_u64(m, "load_size", o->load_size);
		xnode_set_u64(m, "sent", r->sent);
		xnode_set_u64(m, "received", r->received);
		xnode_set_f64(m, "loss_pct", loss, 1);
		if (o->port != PROBE_PORT_ECHO) {
			xnode_set_u64(m, "port", o->port);
			xnode_set_u64(m, "failed", r->failed);
			if (r->failed)
				xnode_set_str(m, "first_failure", xp_strstatus(r->first_failure));
		}
		xnode_set_f64(m, "time_s", secs, 3);
		xhist_to_node(&r->rtt, xnode_set_map(m, "rtt_ns"));
		xemit(stdout, m, o->co.fmt);
		xnode_free(m);
	}
	return EXIT_OK;
}

/* Sleeps until `when`, or returns early on a signal. */
static void sleep_until(uint64_t when)
{
	uint64_t now = xtime_ns();

	if (when > now) {
		struct timespec ts = { (time_t)((when - now) / 1000000000ull),
				       (long)((when - now) % 1000000000ull) };
		nanosleep(&ts, NULL);
	}
}

/* --- over ports ------------------------------------------------------------ */

struct load {
	struct pclient *c;
	void *buf;
	uint64_t size;
	unsigned inflight;
	bool stop;
};

static void load_sent(struct xp_port *p, void *ctx, enum xp_status st);

#define LOAD_WINDOW 16

/* Keeps LOAD_WINDOW messages in flight, leaving the other send tokens to
 * the probe. */
static void load_push(struct load *l)
{
	while (!l->stop && l->inflight < LOAD_WINDOW &&
	       xp_send(l->c->p, l->c->node, PROBE_PORT_SINK, XP_LOW, l->buf, l->size, load_sent,
		       l) == 0)
		l->inflight++;
}

static void load_sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	struct load *l = ctx;

	l->inflight--;
	if (st != XP_SUCCESS) {
		l->stop = true;
		return;
	}
	load_push(l);
}

/* A reply taken but not yet looked at (ev.buffer NULL: none). */
struct reply {
	struct xp_event ev;
	uint64_t seq;
	uint64_t t0;		/* its ping's send time */
	uint64_t rtt;		/* 0: the next ping's send time ends it */
	bool counted;		/* not a warm-up round trip */
};

static XCOLD int reply_differs(const struct pclient *c, const struct reply *y)
{
	fail("ping", "%s: reply %llu differs from what was sent", c->target,
	     (unsigned long long)y->seq);
	return -1;
}

/* Checks a reply, gives its buffer back and counts it: done while the next
 * ping is on its way, off the round trip being timed (two buffers are
 * provided, so the next reply has one meanwhile).  -1 when it differs. */
static int reply_done(const struct ping_opts *o, struct pclient *c,
				     struct ping_result *r, struct reply *y, const void *tx)
{
	int bad = y->ev.length != o->size || memcmp(y->ev.buffer, tx, o->size) != 0;

	xp_provide_receive_buffer(c->p, y->ev.buffer, y->ev.size, y->ev.prio);
	y->ev.buffer = NULL;
	if (bad)
		return reply_differs(c, y);
	if (y->counted) {
		r->received++;
		xhist_add(&r->rtt, y->rtt);
		print_line(o, c->target, y->seq, y->rtt);
	}
	return 0;
}

/* Between pings -i apart: the reply is booked, and the connection (and
 * any load) kept moving until `next`.  -1 after saying why it failed. */
static int ping_pause(const struct ping_opts *o, struct pclient *c,
			       struct ping_result *r, struct reply *last, const void *tx,
			       uint64_t next)
{
	struct xp_event ev;

	if (reply_done(o, c, r, last, tx) < 0)
		return -1;
	while (!cli_stop_requested && xtime_ns() < next) {
		int rc = pclient_wait(c, &ev, next - xtime_ns());

		if (rc == -ENOTCONN) {
			fail("ping", "%s: connection lost", c->target);
			return -1;
		}
		if (rc == 1)
			xp_provide_receive_buffer(c->p, ev.buffer, ev.size, ev.prio);
	}
	return 0;
}

/* The pings, back to back or -i apart.  EXIT_OK, or EXIT_FAIL after saying
 * why. */
static int ping_loop(const struct ping_opts *o, struct pclient *c,
				   struct ping_result *r, const void *tx)
{
	struct reply last = { 0 };
	int rc;

	r->start_ns = xtime_ns();
	for (uint64_t seq = 1 - o->warmup; !o->count || (int64_t)seq <= (int64_t)o->count; seq++) {
		bool counted = (int64_t)seq > 0;
		struct xp_event ev;
		uint64_t t0, t1;
		bool back_to_back;

		if (cli_stop_requested)
			break;
		t0 = xtime_ns();
		rc = xp_send(c->p, c->node, PROBE_PORT_ECHO, o->co.prio, tx, o->size, pclient_sent,
			     c);
		/* Back to back (-i 0), a round trip ends where the next ping
		 * starts, as perftest times it: one clock read per ping. */
		if (last.ev.buffer && !last.rtt)
			last.rtt = t0 - last.t0;
		if (rc < 0) {
			fail("ping", "%s: send: %s", c->target, strerror(-rc));
			return EXIT_FAIL;
		}
		r->sent += counted;
		/* the previous reply's checks and books while this one flies */
		if (last.ev.buffer && reply_done(o, c, r, &last, tx) < 0)
			return EXIT_FAIL;
		/* the reply, or a failure of the ping's send (EINTR without a
		 * stop request is ^Z and fg, or a debugger: it waits on) */
		do
			rc = pclient_wait_until(c, &ev, t0 + o->timeout_ns, t0 + o->co.spin_ns);
		while ((rc == 2 && c->failed == XP_SUCCESS) || (rc == -EINTR && !cli_stop_requested));
		back_to_back = !o->interval_ns && (!o->count || seq < o->count) && seq != 0;
		t1 = back_to_back ? 0 : xtime_ns();
		if (cli_stop_requested)
			break;
		if (rc == -ENOTCONN) {
			fail("ping", "%s: connection lost", c->target);
			return EXIT_FAIL;
		}
		if ((rc == 0 || rc == 2) && c->failed != XP_SUCCESS) {
			fail("ping", "%s: %s", c->target, xp_strstatus(c->failed));
			return EXIT_FAIL;
		}
		if (rc == 0) {
			fail("ping", "%s: no reply to seq %llu within %.1f s", c->target,
			     (unsigned long long)seq, o->timeout_ns / 1e9);
			return EXIT_FAIL;
		}
		if (rc < 0) {
			fail("ping", "%s: %s", c->target, strerror(-rc));
			return EXIT_FAIL;
		}
		last = (struct reply){ .ev = ev, .seq = seq, .t0 = t0, .rtt = t1 ? t1 - t0 : 0,
				       .counted = counted };
		if (seq == 0)
			r->start_ns = t1;
		if (!counted || !o->interval_ns || (o->count && seq >= o->count))
			continue;
		if (ping_pause(o, c, r, &last, tx, t0 + o->interval_ns) < 0)
			return EXIT_FAIL;
	}
	if (last.ev.buffer && !last.rtt)	/* stopped before the next ping */
		last.rtt = xtime_ns() - last.t0;
	if (last.ev.buffer && reply_done(o, c, r, &last, tx) < 0)
		return EXIT_FAIL;
	r->end_ns = xtime_ns();
	return EXIT_OK;
}

struct port_send {
	bool done;
	enum xp_status st;
};

static void port_sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	struct port_send *ps = ctx;

	(void)p;
	ps->done = true;
	ps->st = st;
}

/* --port P, another port than the echo: a message of -s bytes to port P of
 * the server's host, -c times; each answer is its send's completion --
 * taken into a buffer there, or the GM status that says why not (the port
 * is closed, no buffer of that size and priority was provided there
 * within -W, the size is not accepted there).  EXIT_OK or EXIT_FAIL after
 * saying why. */
static int ping_port(const struct ping_opts *o, struct pclient *c, struct ping_result *r)
{
	void *tx = calloc(1, o->size ? o->size : 1);

	if (!tx)
		return fail("ping", "out of memory");
	if (o->co.fmt == XFMT_TEXT && !o->co.quiet)
		printf("PING %s port %u (%s): %llu bytes, %s priority; the answer is the send's "
		       "completion\n", c->target, o->port, r->transport, (unsigned long long)o->size,
		       o->co.prio == XP_HIGH ? "high" : "low");
	r->start_ns = xtime_ns();
	for (uint64_t seq = 1; !o->count || seq <= o->count; seq++) {
		struct port_send ps = { false, XP_SUCCESS };
		uint64_t t0 = xtime_ns(), deadline = t0 + o->timeout_ns + XTIME_NS_PER_S;
		int rc;

		if (cli_stop_requested)
			break;
		rc = xp_send(c->p, c->node, o->port, o->co.prio, tx, o->size, port_sent, &ps);
		if (rc < 0) {
			free(tx);
			return fail("ping", "%s: send to port %u: %s", c->target, o->port,
				    strerror(-rc));
		}
		r->sent++;
		/* the completion runs inside xp_unknown(): look, spin, then
		 * sleep a millisecond at a time; the deadline is looked at
		 * after a look found nothing (a ^Z past it, then fg, finds
		 * the answer waiting) */
		while (!ps.done && !cli_stop_requested) {
			struct xp_event ev;
			uint64_t now;

			rc = xp_receive(c->p, &ev);
			if (rc == 1 && (ev.type == XP_RECV_EVENT || ev.type == XP_HIGH_RECV_EVENT))
				xp_provide_receive_buffer(c->p, ev.buffer, ev.size, ev.prio);
			else if (rc == 1)
				xp_unknown(c->p, &ev);
			if (rc == 1 || ps.done)
				continue;
			now = xtime_ns();
			if (now >= deadline || !xp_node_up(c->h, c->node))
				break;
			if (now - t0 >= o->co.spin_ns)
				xp_host_wait(c->h, deadline - now < XTIME_NS_PER_MS ? deadline - now
										: XTIME_NS_PER_MS);
		}
		if (!ps.done) {
			free(tx);
			if (cli_stop_requested)
				break;
			return fail("ping", "%s: %s", c->target, xp_node_up(c->h, c->node) ?
				    "no completion of the send" : "connection lost");
		}
		if (ps.st != XP_SUCCESS) {
			/* GM's answer for this one; the stream stopped with it,
			 * and gm_resume_sending lets the next one go */
			if (!r->failed++)
				r->first_failure = ps.st;
			if (o->co.fmt == XFMT_TEXT && !o->co.quiet)
				printf("%llu bytes to %s port %u: seq=%llu %s\n",
				       (unsigned long long)o->size, c->target, o->port,
				       (unsigned long long)seq, xp_strstatus(ps.st));
			xp_resume_sending(c->p, o->co.prio, c->node, o->port);
		} else {
			r->received++;
			xhist_add(&r->rtt, xtime_ns() - t0);
			if (o->co.fmt == XFMT_TEXT && !o->co.quiet)
				printf("%llu bytes to %s port %u: seq=%llu delivered in %.2f us\n",
				       (unsigned long long)o->size, c->target, o->port,
				       (unsigned long long)seq, (xtime_ns() - t0) / 1000.0);
		}
		cli_out();
		if (o->count && seq >= o->count)
			break;
		if (o->interval_ns) {
			struct timespec ts = { (time_t)(o->interval_ns / XTIME_NS_PER_S),
					       (long)(o->interval_ns % XTIME_NS_PER_S) };

			nanosleep(&ts, NULL);
		}
	}
	r->end_ns = xtime_ns();
	free(tx);
	return EXIT_OK;
}

/* --op: perftest's latency tests (ib_write_lat, ib_read_lat, ib_send_lat)
 * on a bare connection.  EXIT_OK, or EXIT_FAIL after saying why. */
static int ping_vt(const struct ping_opts *o, const struct xuri *u, struct ping_result *r)
{
	static char target[300];
	struct vt_opts vo = o->vt;
	struct vt_client *c;
	int rc = EXIT_FAIL;

	vo.lat = true;
	vo.depth = 1;
	vo.size = (uint32_t)o->size;
	if (vt_open(&c, "ping", u, &vo) != EXIT_OK)
		goto out;
	snprintf(target, sizeof(target), "%s", vt_target(c));
	r->target = target;
	r->transport = xuri_scheme_name(u->scheme);
	r->inl = vt_inline(c);
	if (o->co.fmt == XFMT_TEXT && !o->co.quiet)
		printf("PING %s (%s): %llu bytes, %s%s, inline up to %u bytes\n", target,
		       r->transport, (unsigned long long)o->size, vt_op_title(o->vt.op),
		       o->vt.imm ? " with immediate" : "", r->inl);
	r->start_ns = xtime_ns();
	for (uint64_t seq = 1 - o->warmup; !o->count || (int64_t)seq <= (int64_t)o->count; seq++) {
		bool counted = (int64_t)seq > 0;
		uint64_t ns;
		int vr;

		if (cli_stop_requested)
			break;
		vr = vt_once(c, o->timeout_ns, &ns);
		if (vr == -ETIMEDOUT && cli_stop_requested)
			break;
		if (vr == -ETIMEDOUT) {
			fail("ping", "%s: no answer to seq %llu within %.1f s", target,
			     (unsigned long long)seq, o->timeout_ns / 1e9);
			goto out;
		}
		if (vr < 0)
			goto out;
		if (seq == 0)
			r->start_ns = xtime_ns();
		if (!counted)
			continue;
		r->sent++;
		r->received++;
		xhist_add(&r->rtt, ns);
		print_line(o, target, seq, ns);
		if (o->interval_ns && (!o->count || seq < o->count))
			sleep_until(xtime_ns() + o->interval_ns);
	}
	r->end_ns = xtime_ns();
	if (vt_verify(c) == 0)
		rc = EXIT_OK;
out:
	vt_close(c);
	return rc;
}

static int ping_ports(const struct ping_opts *o, const struct xuri *u, struct ping_result *r)
{
	struct pclient c;
	struct load load = { 0 };
	unsigned size_class = xp_min_size_for_length(o->size);
	void *tx = NULL, *rx[2] = { NULL, NULL };
	int rc, ret = EXIT_FAIL;

	/* another port than the echo: a GM status within -W says what
	 * became of each message */
	if ((rc = pclient_open(&c, "ping", u, o->co.spin_ns, 1 + LOAD_WINDOW,
			       o->port != PROBE_PORT_ECHO ? o->timeout_ns : 0)))
		return rc;
	r->target = c.target;
	r->transport = xuri_scheme_name(u->scheme);
	if (o->port != PROBE_PORT_ECHO) {
		ret = ping_port(o, &c, r);
		goto out_close;
	}
	r->target = c.target;
	r->transport = xuri_scheme_name(u->scheme);
	if ((rc = pclient_setup(&c, PROBE_PORT_ECHO, (uint32_t)o->size, o->co.prio, 1)))
		goto out_close;
	if (o->load_size && (rc = pclient_setup(&c, PROBE_PORT_SINK, (uint32_t)o->load_size,
						XP_LOW, LOAD_WINDOW)))
		goto out_close;
	/* DMA memory: over rdma the pings go from it with no copy */
	tx = xp_dma_malloc(c.p, o->size ? o->size : 1);
	for (int i = 0; i < 2; i++)
		rx[i] = aligned_alloc(64, (xp_max_length_for_size(size_class) + 127) / 64 * 64);
	if (!tx || !rx[0] || !rx[1]) {
		fail("ping", "out of memory for %llu-byte messages", (unsigned long long)o->size);
		goto out_free;
	}
	for (uint64_t i = 0; i < o->size; i++)
		((uint8_t *)tx)[i] = (uint8_t)(i * 7 + 1);
	for (int i = 0; i < 2; i++)
		xp_provide_receive_buffer(c.p, rx[i], size_class, o->co.prio);
	if (o->load_size) {
		load.c = &c;
		load.size = o->load_size;
		load.buf = calloc(1, o->load_size ? o->load_size : 1);
		if (!load.buf) {
			fail("ping", "out of memory for the load flow");
			goto out_free;
		}
		load_push(&load);
	}
	if (o->co.fmt == XFMT_TEXT && !o->co.quiet)
		printf("PING %s (%s): %llu bytes, %s priority%s\n", c.target, r->transport,
		       (unsigned long long)o->size, o->co.prio == XP_HIGH ? "high" : "low",
		       o->load_size ? ", with a low-priority load" : "");

	if (ping_loop(o, &c, r, tx) != EXIT_OK)
		goto out_free;
	ret = EXIT_OK;
out_free:
	load.stop = true;
out_close:
	/* The results are printed after the connection is gone, so pointers
	 * into the client must not outlive it: copy the target. */
	if (ret == EXIT_OK) {
		static char target[300];

		snprintf(target, sizeof(target), "%s", c.target);
		r->target = target;
	}
	/* the transport may still be sending from (or writing into) the
	 * buffers until the port is closed; closing it frees tx */
	pclient_close(&c);
	free(load.buf);
	free(rx[0]);
	free(rx[1]);
	return ret == EXIT_OK ? EXIT_OK : (rc == EXIT_USAGE ? rc : EXIT_FAIL);
}

/* --- over datagrams ----------------------------------------------------------- */

static int ping_dgram(const struct ping_opts *o, const struct xuri *u, struct ping_result *r)
{
	static char target[300];
	struct xuri local;
	struct xdg *d;
	struct xdg_addr *to;
	uint8_t *tx = NULL;
	uint32_t session = (uint32_t)(xtime_real_ns() ^ (uint64_t)getpid() << 16);
	char err[512];
	int ret = EXIT_FAIL;

	xuri_format(u, target, sizeof(target));
	r->target = target;
	r->transport = xuri_scheme_name(u->scheme);
	r->datagram = true;
	dg_local(u, &local);
	d = xdg_open(&local, NULL, err, sizeof(err));
	if (!d)
		return fail("ping", "%s", err);
	if (o->size > xdg_mtu(d)) {
		fail("ping", "-s %llu: beyond the %s MTU of %u bytes", (unsigned long long)o->size,
		     r->transport, xdg_mtu(d));
		goto out_close;
	}
	to = xdg_resolve(d, u, err, sizeof(err));
	if (!to) {
		fail("ping", "%s", err);
		goto out_close;
	}
	tx = calloc(1, o->size);
	if (!tx) {
		fail("ping", "out of memory");
		goto out_close;
	}
	if (o->co.fmt == XFMT_TEXT && !o->co.quiet)
		printf("PING %s (%s): %llu bytes\n", target, r->transport,
		       (unsigned long long)o->size);
	r->start_ns = xtime_ns();
	for (uint32_t seq = 1; !o->count || seq <= o->count; seq++) {
		struct probe_dg pd = { .type = PROBE_DG_PING, .session = session, .seq = seq };
		uint64_t t0 = xtime_ns(), deadline = t0 + o->timeout_ns;
		bool got = false;
		int rc;

		if (cli_stop_requested)
			break;
		probe_dg_encode(&pd, tx);
		rc = xdg_send(d, to, tx, o->size, 0, 0);
		if (rc < 0 && rc != -EAGAIN) {
			fail("ping", "%s: send: %s", target, strerror(-rc));
			goto out_close;
		}
		r->sent++;
		while (!got && !cli_stop_requested) {
			struct xdg_wc wc[16];
			uint64_t now = xtime_ns();
			int n;

			if (now >= deadline)
				break;
			n = xdg_poll(d, wc, 16);
			for (int i = 0; i < n; i++) {
				struct probe_dg in;

				if (wc[i].op != XDG_OP_RECV || wc[i].status ||
				    probe_dg_decode(wc[i].data, wc[i].len, &in) < 0)
					continue;
				if (in.type == PROBE_DG_PONG && in.session == session && in.seq == seq &&
				    wc[i].len == o->size)
					got = true;
			}
			if (!got && !n && now - t0 > o->co.spin_ns)
				xdg_wait(d, deadline - now);
		}
		if (cli_stop_requested)
			break;
		if (got) {
			uint64_t ns = xtime_ns() - t0;

			r->received++;
			xhist_add(&r->rtt, ns);
			print_line(o, target, seq, ns);
		} else if (o->co.fmt == XFMT_TEXT && !o->co.quiet && o->interval_ns) {
			printf("no reply to seq=%u within %.1f s\n", seq, o->timeout_ns / 1e9);
		}
		if (o->interval_ns && (!o->count || seq < o->count))
			sleep_until(t0 + o->interval_ns);
	}
	r->end_ns = xtime_ns();
	ret = EXIT_OK;
out_close:
	free(tx);
	xdg_close(d);
	return ret;
}

int cmd_ping(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "count", required_argument, NULL, 'c' },
		{ "interval", required_argument, NULL, 'i' },
		{ "size", required_argument, NULL, 's' },
		{ "prio", required_argument, NULL, OPT_PRIO },
		{ "timeout", required_argument, NULL, 'W' },
		{ "load", required_argument, NULL, 'L' },
		{ "spin", required_argument, NULL, OPT_SPIN },
		{ "warmup", required_argument, NULL, 'U' },
		{ "port", required_argument, NULL, 'T' },
		VT_LONG_OPTS,
		{ "quiet", no_argument, NULL, 'q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const char *const os = "c:i:s:W:qvo:h";
	struct ping_opts o = { .interval_ns = 1000000000ull, .size = 8,
			       .co = COMMON_OPTS_DEFAULT };
	struct ping_result *r;
	struct xuri u;
	const char *es;
	char err[512];
	int c, rc;

	while ((c = getopt_long(argc, argv, os, lo, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (xparse_u64(optarg, 1, UINT32_MAX, &o.count, &es) < 0)
				return usage_error("ping", "-c: '%s' %s", optarg, es);
			break;
		case 'i':
			if (xparse_duration(optarg, 1000000000ull, 0, 3600000000000ull,
					    &o.interval_ns, &es) < 0)
				return usage_error("ping", "-i: '%s' %s", optarg, es);
			break;
		case 's':
			if (xparse_size(optarg, 0, 1u << 30, &o.size, &es) < 0)
				return usage_error("ping", "-s: '%s' %s", optarg, es);
			o.size_set = true;
			break;
		case 'W':
			if (xparse_duration(optarg, 1000000000ull, 1000000ull, 3600000000000ull,
					    &o.timeout_ns, &es) < 0)
				return usage_error("ping", "-W: '%s' %s", optarg, es);
			o.timeout_set = true;
			break;
		case 'L':
			if (xparse_size(optarg, 1, 1u << 30, &o.load_size, &es) < 0)
				return usage_error("ping", "--load: '%s' %s", optarg, es);
			break;
		case 'U':
			if (xparse_u64(optarg, 0, 1000000, &o.warmup, &es) < 0)
				return usage_error("ping", "--warmup: '%s' %s", optarg, es);
			break;
		case 'T': {
			uint64_t v;

			if (xparse_u64(optarg, 0, XP_MAX_PORTS - 1, &v, &es) < 0)
				return usage_error("ping", "--port: '%s' %s (0..%d)", optarg, es,
						   XP_MAX_PORTS - 1);
			o.port = (unsigned)v;
			break;
		}
		case 'h':
			cmd_usage(stdout, "ping");
			return EXIT_OK;
		default:
			if ((rc = common_opt("ping", c, optarg, &o.co)) == 1 ||
			    (!rc && (rc = vt_opt("ping", c, optarg, &o.vt)) == 1))
				break;
			return rc ? rc : bad_option("ping", os, argv);
		}
	}
	if ((rc = one_target("ping", argc, argv, o.co.verbose, &u)))
		return rc;
	if ((rc = vt_check("ping", &o.vt, &u)))
		return rc;
	if (o.vt.op && (o.load_size || o.port != PROBE_PORT_ECHO))
		return usage_error("ping", "--op: not with --load or --port");
	if (o.vt.op && (!o.size || o.size > (1u << 30)))
		return usage_error("ping", "-s: 1 to 1G bytes with --op");
	if (o.port != PROBE_PORT_ECHO && (is_datagram(&u) || o.load_size || o.warmup))
		return usage_error("ping", "--port: a port of shm://, tcp:// or rdma://, without "
				   "--load or --warmup");
	if (is_datagram(&u)) {
		if (o.load_size)
			return needs_ports("ping", "--load", &u);
		if (o.co.prio_set)
			return needs_ports("ping", "--prio", &u);
		if (!o.size_set)
			o.size = PROBE_DG_HDR;
		if (o.size < PROBE_DG_HDR)
			return usage_error("ping", "-s: %llu is too small for %s:// (min %d)",
					   (unsigned long long)o.size, xuri_scheme_name(u.scheme),
					   PROBE_DG_HDR);
		if (!o.timeout_set)
			o.timeout_ns = 1000000000ull;
		if (o.warmup)
			return needs_ports("ping", "--warmup", &u);
	} else if (!o.timeout_set) {
		o.timeout_ns = 5000000000ull;
	}
	if (xdev_require(&u, err, sizeof(err)) < 0)
		return fail("ping", "%s", err);

	cli_stop_handlers();
	r = calloc(1, sizeof(*r));
	if (!r)
		return fail("ping", "out of memory");
	xhist_reset(&r->rtt);
	rc = is_datagram(&u) ? ping_dgram(&o, &u, r) : o.vt.op ? ping_vt(&o, &u, r) :
	     ping_ports(&o, &u, r);
	if (rc == EXIT_OK) {
		report(&o, r);
		if (r->failed && r->failed < r->sent)	/* exit 0: every message taken */
			rc = fail("ping", "%s: port %u: %s (%llu of %llu sends failed)", r->target,
				  o.port, xp_strstatus(r->first_failure),
				  (unsigned long long)r->failed, (unsigned long long)r->sent);
		else if (r->failed)
			rc = fail("ping", "%s: port %u: %s", r->target, o.port,
				  xp_strstatus(r->first_failure));
		else if (r->sent && !r->received)
			rc = EXIT_FAIL;	/* like ping(8): nothing came back */
	}
	free(r);
	return rc;
}
