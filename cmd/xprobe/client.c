#include "client.h"
#include "core/cc.h"
#include "core/parse.h"
#include "core/xtime.h"
#include "probe/probe_srv.h"

#include <errno.h>
#include <string.h>

#define CTL_TIMEOUT_NS 5000000000ull

int needs_ports(const char *cmd, const char *opt, const struct xuri *u)
{
	return usage_error(cmd, "%s needs a port transport (shm, tcp, rdma), not %s://", opt,
			   xuri_scheme_name(u->scheme));
}

int common_opt(const char *cmd, int c, const char *arg, struct common_opts *co)
{
	const char *es;

	switch (c) {
	case OPT_SPIN:
		if (xparse_duration(arg, 1000, 0, 1000000000ull, &co->spin_ns, &es) < 0)
			return usage_error(cmd, "--spin: '%s' %s", arg, es);
		return 1;
	case OPT_PRIO:
		co->prio_set = true;
		return parse_prio(cmd, arg, &co->prio) ? EXIT_USAGE : 1;
	case 'q':
		co->quiet = true;
		return 1;
	case 'v':
		co->verbose = true;
		return 1;
	case 'o':
		return cli_parse_fmt("xprobe", cmd, arg, &co->fmt) ? EXIT_USAGE : 1;
	default:
		return 0;
	}
}

int one_target(const char *cmd, int argc, char **argv, bool verbose, struct xuri *u)
{
	if (optind >= argc)
		return usage_error(cmd, "no URI given");
	if (optind + 1 < argc)
		return usage_error(cmd, "unexpected argument '%s'", argv[optind + 1]);
	return parse_target(cmd, argv[optind], verbose, u);
}

void dg_local(const struct xuri *peer, struct xuri *local)
{
	*local = *peer;
	snprintf(local->host, sizeof(local->host), "%s", strchr(peer->host, ':') ? "::" : "0.0.0.0");
	local->port = 0;
}

int pclient_open(struct pclient *c, const char *cmd, const struct xuri *u, uint64_t spin_ns,
		 uint32_t window, uint64_t send_timeout_ns)
{
	/* tokens for the window and the control messages */
	struct xp_host_opts ho = { .send_tokens = window + 8, .send_timeout_ns = send_timeout_ns };
	char err[512];
	int rc;

	memset(c, 0, sizeof(*c));
	c->cmd = cmd;
	c->spin_ns = spin_ns;
	if (u->scheme == XURI_SHM)
		snprintf(c->target, sizeof(c->target), "shm://%s", u->name);
	else
		xuri_format(u, c->target, sizeof(c->target));
	c->h = xp_host_new(&ho, err, sizeof(err));
	if (!c->h)
		return fail(cmd, "%s", err);
	rc = xp_host_connect(c->h, u, err, sizeof(err));
	if (rc < 0) {
		fail(cmd, "%s", err);
		goto out_free_host;
	}
	c->node = (uint32_t)rc;
	c->p = xp_open(c->h, PROBE_PORT_CLIENT, err, sizeof(err));
	if (!c->p) {
		fail(cmd, "%s", err);
		goto out_free_host;
	}
	for (int i = 0; i < 2; i++)
		xp_provide_receive_buffer(c->p, c->ctl_rx[i], xp_min_size_for_length(PROBE_CTL_LEN),
					  XP_HIGH);
	return EXIT_OK;

out_free_host:
	xp_host_free(c->h);
	c->h = NULL;
	return EXIT_FAIL;
}

void pclient_close(struct pclient *c)
{
	xp_close(c->p);
	xp_host_free(c->h);
	c->p = NULL;
	c->h = NULL;
}

static void ctl_sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	struct pclient *c = ctx;

	/* Said by ctl() while it waits for the answer, else by whoever finds
	 * the connection lost: a command fails with one line. */
	if (st != XP_SUCCESS && st != XP_SEND_DROPPED && !c->lost) {
		c->lost = true;
		c->ctl_failed = st;
	}
}

void pclient_sent(struct xp_port *p, void *ctx, enum xp_status st)
{
	struct pclient *c = ctx;

	if (st != XP_SUCCESS && c->failed == XP_SUCCESS)
		c->failed = st;
}

static bool is_ctl_reply(const struct pclient *c, const struct xp_event *ev)
{
	return ev->sender_port == PROBE_PORT_CTL &&
	       (ev->buffer == c->ctl_rx[0] || ev->buffer == c->ctl_rx[1]);
}

static int ctl(struct pclient *c, const struct probe_ctl *req, struct probe_ctl *rep)
{
	uint64_t deadline = xtime_ns() + CTL_TIMEOUT_NS;
	struct xp_event ev;
	int rc;

	probe_ctl_encode(req, c->ctl_tx);
	rc = xp_send(c->p, c->node, PROBE_PORT_CTL, XP_HIGH, c->ctl_tx, sizeof(c->ctl_tx),
		     ctl_sent, c);
	if (rc < 0)
		return fail(c->cmd, "%s: control message: %s", c->target, strerror(-rc));
	for (;;) {
		uint64_t now = xtime_ns();

		if (now >= deadline)
			return fail(c->cmd, "%s: no answer from the server within %llu s "
				    "(is it an xprobe server?)", c->target,
				    (unsigned long long)(CTL_TIMEOUT_NS / 1000000000ull));
		rc = xp_blocking_receive(c->p, &ev, deadline - now, c->spin_ns);
		if (c->lost)
			return fail(c->cmd, "%s: control message: %s", c->target,
				    xp_strstatus(c->ctl_failed));
		if (rc == -EINTR && cli_stop_requested)
			return fail(c->cmd, "interrupted");
		if (rc == -EINTR) {
			/* ^Z and fg, or a debugger: the time stopped is not the
			 * server's, and its answer may be waiting */
			uint64_t t = xtime_ns() + XTIME_NS_PER_S;

			if (deadline < t)
				deadline = t;
			continue;
		}
		if (rc < 0)
			return fail(c->cmd, "%s: %s", c->target, strerror(-rc));
		if (!xp_node_up(c->h, c->node)) {
			c->lost = true;	/* the send's callback says no more */
			return fail(c->cmd, "%s: connection lost", c->target);
		}
		if (rc == 0)
			continue;
		if (ev.type != XP_RECV_EVENT && ev.type != XP_HIGH_RECV_EVENT) {
			xp_unknown(c->p, &ev);	/* our control send's callback */
			continue;
		}
		if (!is_ctl_reply(c, &ev)) {
			/* Nothing else is in flight while we talk to the server. */
			continue;
		}
		rc = probe_ctl_decode(ev.buffer, ev.length, rep);
		xp_provide_receive_buffer(c->p, ev.buffer, ev.size, XP_HIGH);
		if (rc < 0)
			return fail(c->cmd, "%s: bad control reply (%s)", c->target, strerror(-rc));
		return EXIT_OK;
	}
}

int pclient_setup(struct pclient *c, unsigned service, uint32_t size, enum xp_prio prio,
		  uint32_t window)
{
	struct probe_ctl req = { .type = PROBE_SETUP_REQ, .service = (uint8_t)service,
				 .prio = (uint8_t)prio, .size = size, .window = window };
	struct probe_ctl rep;
	int rc = ctl(c, &req, &rep);

	if (rc)
		return rc;
	c->server_max = rep.max_size;
	if (rep.type != PROBE_SETUP_REP)
		return fail(c->cmd, "%s: unexpected control reply", c->target);
	if (rep.status == EMSGSIZE)
		return fail(c->cmd, "%s: size %u is beyond the server's limit of %u bytes",
			    c->target, size, rep.max_size);
	if (rep.status == ENOMEM) {
		/* what it asked for: a window's buffers of the size class */
		unsigned n = probe_srv_buffers(window);
		uint64_t each = xp_max_length_for_size(xp_min_size_for_length(size));
		char b[32], t[32];

		xfmt_size(each, b, sizeof(b));
		xfmt_size(each * n, t, sizeof(t));
		return fail(c->cmd, "%s: the server cannot take %u buffers of %s (%s) for %u-byte "
			    "messages: more than its --max-mem has free (256M unless set)", c->target,
			    n, b, t, size);
	}
	if (rep.status)
		return fail(c->cmd, "%s: the server refused: %s", c->target,
			    strerror((int)rep.status));
	return EXIT_OK;
}

int pclient_stats(struct pclient *c, uint64_t *msgs, uint64_t *bytes)
{
	struct probe_ctl req = { .type = PROBE_STATS_REQ, .service = PROBE_PORT_SINK };
	struct probe_ctl rep;
	int rc = ctl(c, &req, &rep);

	if (rc)
		return rc;
	*msgs = rep.msgs;
	*bytes = rep.bytes;
	return EXIT_OK;
}

XHOT_INLINE int pclient_wait_until(struct pclient *c, struct xp_event *ev, uint64_t until,
				   uint64_t spin_until)
{
	for (;;) {
		int rc;

		if (c->lost || !xp_node_up(c->h, c->node))
			return -ENOTCONN;
		rc = xp_blocking_receive_until(c->p, ev, until, spin_until);
		if (rc <= 0)
			return rc;
		if (c->lost || !xp_node_up(c->h, c->node))
			return -ENOTCONN;
		if (ev->type != XP_RECV_EVENT && ev->type != XP_HIGH_RECV_EVENT) {
			xp_unknown(c->p, ev);
			return 2;
		}
		if (!is_ctl_reply(c, ev))
			return 1;
		xp_provide_receive_buffer(c->p, ev->buffer, ev->size, XP_HIGH);
	}
}

int pclient_wait(struct pclient *c, struct xp_event *ev, uint64_t timeout_ns)
{
	uint64_t now = xtime_ns();

	return pclient_wait_until(c, ev, now + timeout_ns, now + c->spin_ns);
}
