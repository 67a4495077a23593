#include "cmd.h"
#include "core/emit.h"
#include "core/node.h"
#include "shmcm/shmcm_cm.h"
#include "xprt/mbox.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <time.h>

static const char *side_state(const struct mbox_hdr *h, int s)
{
	uint32_t st = atomic_load(&((struct mbox_hdr *)h)->side[s].state);

	if (!mbox_side_pid(h, s))
		return st ? "detached" : "free";
	return shmcm_state_name((enum shmcm_state)st);
}

/* Packets waiting in the ring that `side` reads. */
static uint32_t rx_backlog(const struct mbox_hdr *h, int side)
{
	struct mbox_ring_ctl *r = &((struct mbox_hdr *)h)->ring[mbox_peer(side)];
	uint32_t n = atomic_load(&r->head) - atomic_load(&r->tail);

	return n > h->nslots ? h->nslots : n;
}

static void side_node(const struct mbox_hdr *h, int s, struct xnode *m)
{
	struct mbox_side *sd = &((struct mbox_hdr *)h)->side[s];
	pid_t pid = mbox_side_pid(h, s);
	uint32_t reason = atomic_load(&sd->last_reason);

	xnode_set_str(m, "state", side_state(h, s));
	if (pid)
		xnode_set_u64(m, "pid", (uint64_t)pid);
	else
		xnode_set_null(m, "pid");
	xnode_set_str(m, "flow", atomic_load(&sd->flow) ? "defer" : "wait");
	xnode_set_u64(m, "cno", atomic_load(&sd->cno));
	xnode_set_u64(m, "peer_cno", atomic_load(&sd->peer_cno));
	xnode_set_u64(m, "alive_count", atomic_load(&sd->alive_count));
	xnode_set_u64(m, "con_reqs", atomic_load(&sd->con_reqs));
	xnode_set_u64(m, "sent_bytes", atomic_load(&sd->sent_bytes));
	xnode_set_u64(m, "sent_pkts", atomic_load(&sd->sent_pkts));
	xnode_set_u64(m, "recv_bytes", atomic_load(&sd->recv_bytes));
	xnode_set_u64(m, "recv_pkts", atomic_load(&sd->recv_pkts));
	xnode_set_u64(m, "recv_bad", atomic_load(&sd->recv_bad));
	xnode_set_u64(m, "recv_stale", atomic_load(&sd->recv_stale));
	xnode_set_u64(m, "defq_size", atomic_load(&sd->defq_size));
	xnode_set_u64(m, "defq_peak", atomic_load(&sd->defq_peak));
	xnode_set_u64(m, "rx_backlog", rx_backlog(h, s));
	xnode_set_bool(m, "cma", atomic_load(&sd->cma) != 0);
	xnode_set_u64(m, "cma_msgs", atomic_load(&sd->rndv_msgs));
	xnode_set_u64(m, "cma_bytes", atomic_load(&sd->rndv_bytes));
	xnode_set_u64(m, "cma_failed", atomic_load(&sd->rndv_failed));
	xnode_set_u64(m, "attaches", atomic_load(&sd->attaches));
	xnode_set_str(m, "last_disconnect",
		      reason ? shmcm_reason_str((enum shmcm_reason)reason) : "-");
}

static void conn_node(const char *name, const struct mbox_hdr *h, struct xnode *m)
{
	char when[64];
	time_t t = (time_t)(h->created_ns / 1000000000u);
	struct tm tm;

	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S%z", localtime_r(&t, &tm));
	xnode_set_str(m, "name", name);
	xnode_set_u64(m, "slots", h->nslots);
	xnode_set_u64(m, "mtu", h->mtu);
	xnode_set_u64(m, "mru", h->mtu);
	xnode_set_u64(m, "slot_size", h->slot_size);
	xnode_set_u64(m, "con_tmo_ms", h->con_tmo_ms);
	xnode_set_u64(m, "defq_max", h->defq_max);
	xnode_set_u64(m, "size", h->seg_size);
	xnode_set_str(m, "created", when);
	side_node(h, MBOX_SIDE_A, xnode_set_map(m, "a"));
	side_node(h, MBOX_SIDE_B, xnode_set_map(m, "b"));
}

static int parse_fmt_opts(const char *cmd, int argc, char **argv, enum xfmt *fmt)
{
	static const struct option opts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "help",   no_argument,       NULL, 'h' },
		{ 0 }
	};
	int c;

	*fmt = XFMT_TEXT;
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			if (xfmt_parse(optarg, fmt) < 0)
				return usage_error(cmd, "unknown output format '%s' (text, yaml or json)", optarg);
			break;
		case 'h':
			cmd_usage(stdout, cmd);
			return -1;
		default:
			return bad_option(cmd, "o:h", argv);
		}
	}
	return 0;
}

static int emit(struct xnode *root, enum xfmt fmt)
{
	int rc = xemit(stdout, root, fmt);

	xnode_free(root);
	if (rc < 0 || fflush(stdout) == EOF) {
		fprintf(stderr, "mkshmcon: writing output: %s\n", strerror(rc < 0 ? -rc : errno));
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

int cmd_status(int argc, char **argv)
{
	enum xfmt fmt;
	int rc = parse_fmt_opts("status", argc, argv, &fmt);
	struct xnode *root;
	char err[256];
	char **names = NULL;
	size_t n = 0;
	int status = EXIT_OK;

	if (rc)
		return rc < 0 ? EXIT_OK : rc;
	if (optind + 1 < argc)
		return usage_error("status", "unexpected argument '%s'", argv[optind + 1]);
	if (optind < argc) {
		struct mbox *m;
		const char *name = strip_db_prefix(argv[optind]);

		if (check_name(name))
			return EXIT_USAGE;
		if (mbox_open(name, &m, err, sizeof(err)) < 0) {
			fprintf(stderr, "mkshmcon: %s\n", err);
			return EXIT_FAIL;
		}
		root = xnode_map();
		conn_node(name, m->h, root);
		mbox_close(m);
		return emit(root, fmt);
	}

	if (mbox_list(&names, &n) < 0) {
		fprintf(stderr, "mkshmcon: cannot read /dev/shm: %s\n", strerror(errno));
		return EXIT_FAIL;
	}
	root = xnode_list();
	for (size_t i = 0; i < n; i++) {
		struct mbox *m;

		if (mbox_open(names[i], &m, err, sizeof(err)) < 0) {
			fprintf(stderr, "mkshmcon: %s\n", err);
			status = EXIT_FAIL;
			continue;
		}
		conn_node(names[i], m->h, xnode_push_map(root));
		mbox_close(m);
	}
	mbox_names_free(names, n);
	rc = emit(root, fmt);
	return rc ? rc : status;
}

int cmd_list(int argc, char **argv)
{
	enum xfmt fmt;
	int rc = parse_fmt_opts("list", argc, argv, &fmt);
	struct xnode *root;
	char err[256];
	char **names = NULL;
	size_t n = 0;

	if (rc)
		return rc < 0 ? EXIT_OK : rc;
	if (optind < argc)
		return usage_error("list", "unexpected argument '%s'", argv[optind]);
	if (mbox_list(&names, &n) < 0) {
		fprintf(stderr, "mkshmcon: cannot read /dev/shm: %s\n", strerror(errno));
		return EXIT_FAIL;
	}
	root = xnode_list();
	for (size_t i = 0; i < n; i++) {
		struct xnode *e = xnode_push_map(root);
		struct mbox *m;

		xnode_set_str(e, "name", names[i]);
		if (mbox_open(names[i], &m, err, sizeof(err)) < 0) {
			/* still listed, with the same columns, so the user can
			 * see it and remove it */
			xnode_set_null(e, "slots");
			xnode_set_null(e, "mtu");
			xnode_set_str(e, "a", "invalid");
			xnode_set_str(e, "b", "invalid");
			xnode_set_null(e, "pid_a");
			xnode_set_null(e, "pid_b");
			continue;
		}
		xnode_set_u64(e, "slots", m->h->nslots);
		xnode_set_u64(e, "mtu", m->h->mtu);
		xnode_set_str(e, "a", side_state(m->h, MBOX_SIDE_A));
		xnode_set_str(e, "b", side_state(m->h, MBOX_SIDE_B));
		pid_t pa = mbox_side_pid(m->h, MBOX_SIDE_A), pb = mbox_side_pid(m->h, MBOX_SIDE_B);
		if (pa)
			xnode_set_u64(e, "pid_a", (uint64_t)pa);
		else
			xnode_set_null(e, "pid_a");
		if (pb)
			xnode_set_u64(e, "pid_b", (uint64_t)pb);
		else
			xnode_set_null(e, "pid_b");
		mbox_close(m);
	}
	mbox_names_free(names, n);
	return emit(root, fmt);
}
