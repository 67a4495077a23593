/* xprobe bw: bandwidth and message rate to an xprobe server.
 *
 * Over ports, --window messages are kept in flight to the server's sink
 * port; each send callback (the receiver's acknowledgement: the message is
 * in its buffer) returns a token and sends the next, so what is counted
 * was delivered.  The sink's own count is fetched at the end and checked.
 * Over datagrams, DATA datagrams go out as fast as the socket or queue
 * takes them and the server reports what arrived: rate and loss. */
#include "client.h"
#include "vt.h"
#include "core/node.h"
#include "core/parse.h"
#include "core/xtime.h"
#include "xprt/xdev.h"
#include "xprt/xdg.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct bw_opts {
	uint64_t size;
	uint64_t secs_ns;
	uint64_t window;
	bool progress, window_set, size_set;
	struct common_opts co;
	struct vt_opts vt;	/* --op: a verbs test */
};

struct bw_result {
	char target[300];
	const char *transport;
	uint64_t msgs, bytes, ns;
	uint64_t srv_msgs, srv_bytes, srv_ns;
	bool datagram;
	uint32_t inl;		/* verbs test: inline up to this */
};

static void progress(const struct bw_opts *o, uint64_t start, uint64_t *last, uint64_t bytes)
{
	uint64_t now;
	char rate[32];

	/* called per event: no clock read unless a line may be due */
	if (!o->progress || (now = xtime_ns()) - *last < 1000000000ull)
		return;
	*last = now;
	xfmt_rate(bytes / ((now - start) / 1e9), rate, sizeof(rate));
	fprintf(stderr, "\r%6.1f s  %s   ", (now - start) / 1e9, rate);
}

static void progress_end(const struct bw_opts *o)
{
	if (o->progress)
		fprintf(stderr, "\r%40s\r", "");
}

static void report(const struct bw_opts *o, const struct bw_result *r)
{
	double secs = r->ns / 1e9, bps = secs > 0 ? r->bytes / secs : 0;
	double rate = secs > 0 ? r->msgs / secs : 0;
	char b1[32], b2[32];

	if (o->co.fmt == XFMT_TEXT && o->vt.op) {
		printf("BW %s (%s): %llu-byte %s%s, %llu in flight, inline up to %u bytes\n",
		       r->target, r->transport, (unsigned long long)o->size, vt_op_title(o->vt.op),
		       o->vt.imm ? " with immediate" : "", (unsigned long long)o->window, r->inl);
		printf("%llu operations, %s in %.2f s: %s, %.3f M op/s\n",
		       (unsigned long long)r->msgs, xfmt_size(r->bytes, b1, sizeof(b1)), secs,
		       xfmt_rate(bps, b2, sizeof(b2)), rate / 1e6);
		return;
	}
	if (o->co.fmt == XFMT_TEXT) {
		printf("BW %s (%s): %llu-byte messages, %s\n", r->target, r->transport,
		       (unsigned long long)o->size, r->datagram ? "datagrams" :
		       o->co.prio == XP_HIGH ? "high priority" : "low priority");
		printf("%llu messages, %s in %.2f s: %s, %.3f M msg/s\n",
		       (unsigned long long)r->msgs, xfmt_size(r->bytes, b1, sizeof(b1)), secs,
		       xfmt_rate(bps, b2, sizeof(b2)), rate / 1e6);
		if (r->datagram) {
			double loss = r->msgs ? 100.0 * (r->msgs - (r->srv_msgs < r->msgs ?
					r->srv_msgs : r->msgs)) / r->msgs : 0;
			printf("server received %llu datagrams (%.2f%% loss): %s\n",
			       (unsigned long long)r->srv_msgs, loss,
			       xfmt_rate(r->srv_ns ? r->srv_bytes / (r->srv_ns / 1e9) :
					 r->srv_bytes / (secs > 0 ? secs : 1), b1, sizeof(b1)));
		} else {
			printf("server received %llu messages, %s\n", (unsigned long long)r->srv_msgs,
			       xfmt_size(r->srv_bytes, b1, sizeof(b1)));
		}
		return;
	}
	struct xnode *m = xnode_map();

	xnode_set_str(m, "target", r->target);
	xnode_set_str(m, "transport", r->transport);
	xnode_set_u64(m, "size", o->size);
	if (o->vt.op) {
		xnode_set_str(m, "op", vt_op_name(o->vt.op));
		xnode_set_u64(m, "imm", o->vt.imm);
		xnode_set_u64(m, "inline", r->inl);
		xnode_set_u64(m, "window", o->window);
	} else if (!r->datagram) {
		xnode_set_str(m, "prio", o->co.prio == XP_HIGH ? "high" : "low");
		xnode_set_u64(m, "window", o->window);
	}
	xnode_set_f64(m, "time_s", secs, 3);
	xnode_set_u64(m, "messages", r->msgs);
	xnode_set_u64(m, "bytes", r->bytes);
	xnode_set_f64(m, "bandwidth_Bps", bps, 0);
	xnode_set_f64(m, "msg_rate", rate, 0);
	if (!o->vt.op) {
		xnode_set_u64(m, "server_messages", r->srv_msgs);
		xnode_set_u64(m, "server_bytes", r->srv_bytes);
	}
	if (r->datagram) {
		xnode_set_f64(m, "loss_pct", r->msgs ? 100.0 * (r->msgs - (r->srv_msgs < r->msgs ?
				r->srv_msgs : r->msgs)) / r->msgs : 0, 2);
		xnode_set_f64(m, "server_bandwidth_Bps", r->srv_ns ?
			      r->srv_bytes / (r->srv_ns / 1e9) : 0, 0);
	}
	xemit(stdout, m, o->co.fmt);
	xnode_free(m);
}

/* --- over ports ------------------------------------------------------------ */

struct flow {
	struct pclient *c;
	const struct bw_opts *o;
	void *buf;
	uint64_t end_ns, last_ns;
	uint64_t now;		/* the clock after the last wait: no read per message */
	uint64_t done_msgs;
	unsigned inflight;
	enum xp_status failed;
};

static void flow_sent(struct xp_port *p, void *ctx, enum xp_status st);

static int flow_push(struct flow *f)
{
	while (f->inflight < f->o->window && f->failed == XP_SUCCESS && f->now < f->end_ns) {
		int rc = xp_send(f->c->p, f->c->node, PROBE_PORT_SINK, f->o->co.prio, f->buf,
				 f->o->size, flow_sent, f);

		if (rc == -EAGAIN)
			break;
		if (rc < 0)
			return rc;
		f->inflight++;
	}
	return 0;
}

static void flow_sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	struct flow *f = ctx;

	f->inflight--;
	if (st != XP_SUCCESS) {
		if (f->failed == XP_SUCCESS)
			f->failed = st;
		return;
	}
	f->done_msgs++;
	flow_push(f);
}

/* A window that gets no acknowledgement for this long is stuck (a server
 * stopped, or a path that drops everything): the run fails, as a --op
 * run does after as long with no completion.  Plus the time one message
 * takes at 100 Mbit/s: a 1 GiB one may take seconds on a slow link. */
#define BW_STALL_NS (5 * XTIME_NS_PER_S)
#define BW_STALL_FLOOR_BPS 12500000ull

static uint64_t bw_stall_ns(uint64_t size)
{
	return BW_STALL_NS + size * XTIME_NS_PER_S / BW_STALL_FLOOR_BPS;
}


static int bw_ports(const struct bw_opts *o, const struct xuri *u, struct bw_result *r)
{
	struct pclient c;
	struct flow f = { 0 };
	uint64_t start, last_progress;
	bool stopping = false;
	int rc, ret = EXIT_FAIL;

	if ((rc = pclient_open(&c, "bw", u, o->co.spin_ns, (uint32_t)o->window, 0)))
		return rc;
	snprintf(r->target, sizeof(r->target), "%s", c.target);
	r->transport = xuri_scheme_name(u->scheme);
	if ((rc = pclient_setup(&c, PROBE_PORT_SINK, (uint32_t)o->size, o->co.prio,
				(uint32_t)o->window)))
		goto out_close;
	/* DMA memory: over rdma the messages go from it with no copy */
	f.buf = xp_dma_malloc(c.p, o->size ? o->size : 1);
	if (!f.buf) {
		fail("bw", "out of memory for %llu-byte messages", (unsigned long long)o->size);
		goto out_close;
	}
	memset(f.buf, 0x5a, o->size);
	f.c = &c;
	f.o = o;
	start = last_progress = f.now = xtime_ns();
	f.end_ns = start + o->secs_ns;
	if ((rc = flow_push(&f)) < 0) {
		fail("bw", "%s: send: %s", c.target, strerror(-rc));
		goto out_free;
	}
	while (f.inflight) {
		struct xp_event ev;
		uint64_t done = f.done_msgs;

		rc = pclient_wait(&c, &ev, 100000000ull);
		f.now = xtime_ns();
		if (f.done_msgs != done)
			f.last_ns = f.now;	/* the last acknowledgement, give or take a wait */
		if (cli_first_stop(&stopping))
			f.end_ns = 0;	/* no new sends; the window drains */
		else if (cli_stop_requested)
			break;
		if (rc == -ENOTCONN) {
			fail("bw", "%s: connection lost", c.target);
			goto out_free;
		}
		if (rc < 0 && rc != -EINTR) {
			fail("bw", "%s: %s", c.target, strerror(-rc));
			goto out_free;
		}
		if (f.failed != XP_SUCCESS) {
			fail("bw", "%s: %s", c.target, xp_strstatus(f.failed));
			goto out_free;
		}
		progress(o, start, &last_progress, f.done_msgs * o->size);
		if (f.now - (f.last_ns ? f.last_ns : start) > bw_stall_ns(o->size)) {
			progress_end(o);
			fail("bw", "%s: no acknowledgement within %llu s (%u messages in flight)",
			     c.target, (unsigned long long)(bw_stall_ns(o->size) / XTIME_NS_PER_S),
			     f.inflight);
			goto out_free;
		}
	}
	progress_end(o);
	if (cli_stop_requested && f.inflight) {
		fail("bw", "interrupted");
		goto out_free;
	}
	r->msgs = f.done_msgs;
	r->bytes = f.done_msgs * o->size;
	r->ns = (f.last_ns > start ? f.last_ns : xtime_ns()) - start;
	if ((rc = pclient_stats(&c, &r->srv_msgs, &r->srv_bytes)))
		goto out_free;
	if (r->srv_msgs < r->msgs) {
		fail("bw", "%s: the server counted %llu messages, %llu were acknowledged", c.target,
		     (unsigned long long)r->srv_msgs, (unsigned long long)r->msgs);
		goto out_free;
	}
	ret = EXIT_OK;
out_free:
	/* closing the port waits for the transport to be done with the
	 * buffer, and frees it */
	pclient_close(&c);
	return ret;
out_close:
	pclient_close(&c);
	return ret;
}

/* --op: perftest's bandwidth tests (ib_write_bw, ib_read_bw, ib_send_bw) on
 * a bare connection, --window operations in flight; the server's buffer
 * is checked at the end.  EXIT_OK, or EXIT_FAIL after saying why. */
static int bw_vt(const struct bw_opts *o, const struct xuri *u, struct bw_result *r)
{
	struct vt_opts vo = o->vt;
	struct vt_client *c;
	uint64_t start, last;
	int rc = EXIT_FAIL, sr;

	vo.depth = (uint32_t)o->window;
	vo.size = (uint32_t)o->size;
	if (vt_open(&c, "bw", u, &vo) != EXIT_OK)
		goto out;
	snprintf(r->target, sizeof(r->target), "%s", vt_target(c));
	r->transport = xuri_scheme_name(u->scheme);
	r->inl = vt_inline(c);
	start = xtime_ns();
	sr = vt_stream(c, o->secs_ns, &r->msgs, &r->bytes, &last);
	r->ns = (last > start ? last : xtime_ns()) - start;
	/* -EINTR: a stop signal ended the stream, and what was in flight
	 * has landed (vt_stream drains): it counts, as over ports */
	if ((sr == 0 || sr == -EINTR) && vt_verify(c) == 0)
		rc = EXIT_OK;
out:
	vt_close(c);
	return rc;
}

/* --- over datagrams --------------------------------------------------------- */

static int bw_dgram(const struct bw_opts *o, const struct xuri *u, struct bw_result *r)
{
	enum { BATCH = 32 };
	struct xdg_msg m[BATCH];
	struct xuri local;
	struct xdg *d;
	struct xdg_addr *to;
	uint8_t *tx = NULL, req[PROBE_DG_HDR];
	uint32_t session = (uint32_t)(xtime_real_ns() ^ (uint64_t)getpid() << 16), seq = 0;
	uint64_t start, end, last_progress;
	char err[512];
	bool got = false, stopping = false;
	int ret = EXIT_FAIL;

	xuri_format(u, r->target, sizeof(r->target));
	r->transport = xuri_scheme_name(u->scheme);
	r->datagram = true;
	dg_local(u, &local);
	d = xdg_open(&local, NULL, err, sizeof(err));
	if (!d)
		return fail("bw", "%s", err);
	if (!o->size_set) {
		/* default: a full datagram */
	} else if (o->size > xdg_mtu(d)) {
		fail("bw", "-s %llu: beyond the %s MTU of %u bytes", (unsigned long long)o->size,
		     r->transport, xdg_mtu(d));
		goto out_close;
	}
	uint32_t size = o->size_set ? (uint32_t)o->size : xdg_mtu(d);

	to = xdg_resolve(d, u, err, sizeof(err));
	if (!to) {
		fail("bw", "%s", err);
		goto out_close;
	}
	tx = calloc(BATCH, size);
	if (!tx) {
		fail("bw", "out of memory");
		goto out_close;
	}
	for (int i = 0; i < BATCH; i++)
		m[i] = (struct xdg_msg){ to, tx + (size_t)i * size, size, 0 };
	start = last_progress = xtime_ns();
	end = start + o->secs_ns;
	while (!cli_stop_requested && xtime_ns() < end) {
		struct xdg_wc wc[64];
		int n;

		for (int i = 0; i < BATCH; i++) {
			struct probe_dg pd = { .type = PROBE_DG_DATA, .session = session,
					       .seq = seq + (uint32_t)i };
			probe_dg_encode(&pd, tx + (size_t)i * size);
		}
		n = xdg_send_batch(d, m, BATCH, 0);
		if (n > 0) {
			seq += (uint32_t)n;
			r->msgs += (uint64_t)n;
		} else if (n != -EAGAIN && n != -ENOBUFS) {
			fail("bw", "%s: send: %s", r->target, strerror(-n));
			goto out_close;
		}
		xdg_poll(d, wc, 64);
		if (n <= 0)
			xdg_wait(d, 100000);
		progress(o, start, &last_progress, r->msgs * size);
	}
	r->ns = xtime_ns() - start;
	r->bytes = r->msgs * size;
	progress_end(o);
	cli_first_stop(&stopping);	/* a stop ends the sending, not the count */
	/* Let the tail arrive, then ask (datagrams: retry the question). */
	for (int tries = 0; tries < 10 && !got && !cli_stop_requested; tries++) {
		struct probe_dg pd = { .type = PROBE_DG_STATS_REQ, .session = session };
		uint64_t deadline = xtime_ns() + 300000000ull;

		probe_dg_encode(&pd, req);
		xdg_send(d, to, req, sizeof(req), 0, 0);
		while (!got && xtime_ns() < deadline && !cli_stop_requested) {
			struct xdg_wc wc[16];
			int n = xdg_poll(d, wc, 16);

			for (int i = 0; i < n; i++) {
				struct probe_dg in;

				if (wc[i].op == XDG_OP_RECV && !wc[i].status &&
				    probe_dg_decode(wc[i].data, wc[i].len, &in) == 0 &&
				    in.type == PROBE_DG_STATS_REP && in.session == session) {
					r->srv_msgs = in.pkts;
					r->srv_bytes = in.bytes;
					r->srv_ns = in.span_ns;
					got = true;
				}
			}
			if (!n)
				xdg_wait(d, 10000000ull);
		}
	}
	if (!got) {
		if (cli_stop_requested)
			fail("bw", "interrupted");
		else
			fail("bw", "%s: no statistics from the server (is it an xprobe server?)",
			     r->target);
		goto out_close;
	}
	/* a count no xprobe server makes (more than was sent, bytes that
	 * are not whole datagrams) is not reported as a measurement */
	if (r->srv_msgs > r->msgs || r->srv_bytes != r->srv_msgs * size) {
		fail("bw", "%s: the server counted %llu datagrams, %llu bytes, of %llu of %u bytes sent: "
		     "not an xprobe server's count", r->target, (unsigned long long)r->srv_msgs,
		     (unsigned long long)r->srv_bytes, (unsigned long long)r->msgs, size);
		goto out_close;
	}
	ret = EXIT_OK;
out_close:
	free(tx);
	xdg_close(d);
	return ret;
}

int cmd_bw(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "size", required_argument, NULL, 's' },
		{ "time", required_argument, NULL, 'T' },
		{ "window", required_argument, NULL, 'w' },
		{ "prio", required_argument, NULL, OPT_PRIO },
		{ "spin", required_argument, NULL, OPT_SPIN },
		{ "progress", no_argument, NULL, 'p' },
		VT_LONG_OPTS,
		{ "quiet", no_argument, NULL, 'q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const char *const os = "s:T:w:qvo:h";
	struct bw_opts o = { .size = 65536, .secs_ns = 3000000000ull, .window = 16,
			     .co = COMMON_OPTS_DEFAULT };
	struct bw_result r = { 0 };
	struct xuri u;
	const char *es;
	char err[512];
	bool force_progress = false;
	int c, rc;

	while ((c = getopt_long(argc, argv, os, lo, NULL)) != -1) {
		switch (c) {
		case 's':
			if (xparse_size(optarg, 1, 1u << 30, &o.size, &es) < 0)
				return usage_error("bw", "-s: '%s' %s", optarg, es);
			o.size_set = true;
			break;
		case 'T':
			if (xparse_duration(optarg, 1000000000ull, 1000000ull, 86400000000000ull,
					    &o.secs_ns, &es) < 0)
				return usage_error("bw", "-T: '%s' %s", optarg, es);
			break;
		case 'w':
			if (xparse_u64(optarg, 1, 4096, &o.window, &es) < 0)
				return usage_error("bw", "--window: '%s' %s", optarg, es);
			o.window_set = true;
			break;
		case 'p':
			force_progress = true;
			break;
		case 'h':
			cmd_usage(stdout, "bw");
			return EXIT_OK;
		default:
			if ((rc = common_opt("bw", c, optarg, &o.co)) == 1 ||
			    (!rc && (rc = vt_opt("bw", c, optarg, &o.vt)) == 1))
				break;
			return rc ? rc : bad_option("bw", os, argv);
		}
	}
	if ((rc = one_target("bw", argc, argv, o.co.verbose, &u)) ||
	    (rc = vt_check("bw", &o.vt, &u)))
		return rc;
	if (o.vt.op && o.window > PROBE_VT_MAX_DEPTH)
		return usage_error("bw", "--window: at most %d with --op", PROBE_VT_MAX_DEPTH);
	if (is_datagram(&u)) {
		if (o.window_set)
			return needs_ports("bw", "--window", &u);
		if (o.co.prio_set)
			return needs_ports("bw", "--prio", &u);
		if (o.size_set && o.size < PROBE_DG_HDR)
			return usage_error("bw", "-s: %llu is too small for %s:// (min %d)",
					   (unsigned long long)o.size, xuri_scheme_name(u.scheme),
					   PROBE_DG_HDR);
	}
	o.progress = force_progress || (!o.co.quiet && isatty(STDERR_FILENO));
	if (xdev_require(&u, err, sizeof(err)) < 0)
		return fail("bw", "%s", err);

	cli_stop_handlers();
	rc = is_datagram(&u) ? bw_dgram(&o, &u, &r) : o.vt.op ? bw_vt(&o, &u, &r) :
	     bw_ports(&o, &u, &r);
	if (rc == EXIT_OK) {
		if (is_datagram(&u) && !o.size_set)
			o.size = r.msgs ? r.bytes / r.msgs : 0;
		report(&o, &r);
	}
	return rc;
}
