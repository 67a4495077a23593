/* rtrs-client map / unmap / list-mapped: the RNBD device as a kernel block
 * device /dev/nbdN, as Ceph's rbd-nbd maps an RBD image.
 *
 * map starts a process that opens the session and the device, makes one
 * socketpair per NBD connection, serves our ends with the NBD core
 * (nbd.c) in the transmission phase, and hands the other ends to the
 * kernel's nbd driver over generic netlink (NBD_CMD_CONNECT, as
 * nbd-client -L does; the handshake's results -- size, flags, block size
 * -- go as attributes instead).  The kernel then sends its block requests
 * down those sockets.  The mapping names itself in the device's
 * backend identifier ("rtrs-client:SESSION/DEVICE", in
 * /sys/block/nbdN/backend), which is how unmap and list-mapped find it;
 * /sys/block/nbdN/pid is the process that serves it.
 *
 * unmap asks the kernel to disconnect (NBD_CMD_DISCONNECT): it sends
 * NBD_CMD_DISC down each socket once its queue is flushed, our process
 * sees every connection end, closes the device and the session and
 * exits.  A mounted device (or one held by device-mapper, md ...) is
 * refused unless --force.
 *
 * map --ublk serves the device through the kernel's ublk driver instead
 * (ublk.c) as /dev/ublkbN.  The driver keeps no name for the server
 * behind a device, so the serving process leaves a record,
 * /run/xprt/ublk/ublkbN ("PID SESSION DEVICE"), for unmap and
 * list-mapped; a record whose process is gone, or whose device is, is
 * not a mapping.  unmap sends that process SIGTERM: it stops the device
 * (the driver removes the disk once its IO is served), deletes it and
 * exits. */
#include "cmd.h"
#include "core/conf.h"
#include "core/parse.h"
#include "core/xtime.h"
#include "nbd/nbd_srv.h"
#include "rtrs/rtrs_hb.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/nbd-netlink.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/netlink.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <stddef.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>

#define BACKEND_PREFIX	"rtrs-client:"
#define UBLK_RECORDS	"/run/xprt/ublk"
#define MAX_NBD_CONNS	16

/* --- the kernel's nbd driver over generic netlink ------------------------- */

struct knbd {
	struct nl_sock *sk;
	int family;
};

/* 0, or -1 with the reason in err. */
static int knbd_open(struct knbd *n, char *err, size_t errlen)
{
	int rc;

	n->sk = nl_socket_alloc();
	if (!n->sk) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if ((rc = genl_connect(n->sk)) < 0) {
		snprintf(err, errlen, "generic netlink: %s", nl_geterror(rc));
		goto fail;
	}
	n->family = genl_ctrl_resolve(n->sk, "nbd");
	if (n->family < 0) {
		/* as rbd-nbd does: the driver is a module, load it once */
		if (system("/sbin/modprobe nbd >/dev/null 2>&1") == 0)
			n->family = genl_ctrl_resolve(n->sk, "nbd");
		if (n->family < 0) {
			snprintf(err, errlen, "the kernel's nbd driver is not there "
				 "(modprobe nbd: no such module or not allowed)");
			goto fail;
		}
	}
	return 0;
fail:
	nl_socket_free(n->sk);
	n->sk = NULL;
	return -1;
}

static void knbd_close(struct knbd *n)
{
	nl_socket_free(n->sk);
	n->sk = NULL;
}

static int on_connect_reply(struct nl_msg *msg, void *arg)
{
	struct nlattr *a[NBD_ATTR_MAX + 1];
	int *index = arg;

	if (genlmsg_parse(nlmsg_hdr(msg), 0, a, NBD_ATTR_MAX, NULL) == 0 && a[NBD_ATTR_INDEX])
		*index = (int)nla_get_u32(a[NBD_ATTR_INDEX]);
	return NL_OK;
}

struct nbd_connect {
	int index;			/* -1: any free device */
	const struct nbd_export *exp;
	uint64_t timeout_s;		/* the kernel's request timeout; 0 none */
	const char *backend;
	const int *fds;
	unsigned nfds;
};

/* The device index, or -1 with the reason in err. */
static int knbd_connect(struct knbd *n, const struct nbd_connect *c, char *err, size_t errlen)
{
	struct nl_msg *msg = nlmsg_alloc();
	struct nlattr *socks, *item;
	int index = -1, rc;

	if (!msg) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (!genlmsg_put(msg, NL_AUTO_PORT, NL_AUTO_SEQ, n->family, 0, 0, NBD_CMD_CONNECT, 0))
		goto too_big;
	if (c->index >= 0 && nla_put_u32(msg, NBD_ATTR_INDEX, (uint32_t)c->index))
		goto too_big;
	if (nla_put_u64(msg, NBD_ATTR_SIZE_BYTES, c->exp->size) ||
	    nla_put_u64(msg, NBD_ATTR_BLOCK_SIZE_BYTES, c->exp->min_block) ||
	    nla_put_u64(msg, NBD_ATTR_SERVER_FLAGS, c->exp->tflags | NBD_FLAG_HAS_FLAGS) ||
	    (c->timeout_s && nla_put_u64(msg, NBD_ATTR_TIMEOUT, c->timeout_s)) ||
	    nla_put_string(msg, NBD_ATTR_BACKEND_IDENTIFIER, c->backend))
		goto too_big;
	if (!(socks = nla_nest_start(msg, NBD_ATTR_SOCKETS)))
		goto too_big;
	for (unsigned i = 0; i < c->nfds; i++) {
		if (!(item = nla_nest_start(msg, NBD_SOCK_ITEM)) ||
		    nla_put_u32(msg, NBD_SOCK_FD, (uint32_t)c->fds[i]))
			goto too_big;
		nla_nest_end(msg, item);
	}
	nla_nest_end(msg, socks);
	nl_socket_modify_cb(n->sk, NL_CB_VALID, NL_CB_CUSTOM, on_connect_reply, &index);
	rc = nl_send_sync(n->sk, msg);	/* frees msg */
	nl_socket_modify_cb(n->sk, NL_CB_VALID, NL_CB_DEFAULT, NULL, NULL);
	if (rc < 0) {
		snprintf(err, errlen, "the kernel refused the device%s: %s",
			 c->index >= 0 ? " asked for" : "", nl_geterror(rc));
		return -1;
	}
	if (index < 0)
		snprintf(err, errlen, "the kernel's answer carries no device index");
	return index;
too_big:
	nlmsg_free(msg);
	snprintf(err, errlen, "netlink message too long");
	return -1;
}

/* 0, or -1 with the reason in err. */
static int knbd_disconnect(struct knbd *n, int index, char *err, size_t errlen)
{
	struct nl_msg *msg = nlmsg_alloc();
	int rc;

	if (!msg || !genlmsg_put(msg, NL_AUTO_PORT, NL_AUTO_SEQ, n->family, 0, 0,
				 NBD_CMD_DISCONNECT, 0) ||
	    nla_put_u32(msg, NBD_ATTR_INDEX, (uint32_t)index)) {
		nlmsg_free(msg);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	rc = nl_send_sync(n->sk, msg);
	if (rc < 0) {
		snprintf(err, errlen, "disconnect /dev/nbd%d: %s", index, nl_geterror(rc));
		return -1;
	}
	return 0;
}

/* A new request timeout for a connected device (0: none).  0, or -1
 * with the reason in err.  Not from the serving loop (knbd_thread). */
static int knbd_set_timeout(struct knbd *n, int index, const char *backend, uint64_t timeout_s,
			    char *err, size_t errlen)
{
	struct nl_msg *msg = nlmsg_alloc();
	int rc;

	if (!msg || !genlmsg_put(msg, NL_AUTO_PORT, NL_AUTO_SEQ, n->family, 0, 0,
				 NBD_CMD_RECONFIGURE, 0) ||
	    nla_put_u32(msg, NBD_ATTR_INDEX, (uint32_t)index) ||
	    /* the kernel wants the one it was connected with */
	    nla_put_string(msg, NBD_ATTR_BACKEND_IDENTIFIER, backend) ||
	    nla_put_u64(msg, NBD_ATTR_TIMEOUT, timeout_s)) {
		nlmsg_free(msg);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	rc = nl_send_sync(n->sk, msg);
	if (rc < 0) {
		snprintf(err, errlen, "/dev/nbd%d: a new request timeout: %s", index,
			 nl_geterror(rc));
		return -1;
	}
	return 0;
}

/* The serving process's own nbd commands run on threads of their own:
 * NBD_CMD_DISCONNECT (our unmap) sends NBD_CMD_DISC down each socket with
 * a blocking send before the kernel answers, and a new request timeout
 * (NBD_CMD_RECONFIGURE) waits for locks (generic netlink's, the device's
 * config_lock) that a disconnect from another process (rtrs-client unmap,
 * nbd-client -d) holds while it sends on them -- and the only reader of
 * those sockets is our loop, which must go on meanwhile. */
struct knbd_job {
	int index;
	bool set_timeout;		/* else disconnect */
	char ident[RTRS_NAME_MAX + RNBD_NAME_MAX + 32];	/* the backend identifier */
	uint64_t timeout_s;
	atomic_int state;		/* 0 running, 1 done, -1 failed */
	char err[512];
};

static void *knbd_thread(void *arg)
{
	struct knbd_job *j = arg;
	struct knbd n = { 0 };
	int rc;

	rc = knbd_open(&n, j->err, sizeof(j->err));
	if (!rc)
		rc = j->set_timeout ? knbd_set_timeout(&n, j->index, j->ident, j->timeout_s,
						       j->err, sizeof(j->err))
				    : knbd_disconnect(&n, j->index, j->err, sizeof(j->err));
	if (n.sk)
		knbd_close(&n);
	atomic_store(&j->state, rc ? -1 : 1);
	return NULL;
}

/* --- what sysfs says of /dev/nbdN ------------------------------------------ */

static int read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return -errno;
	if (!fgets(buf, (int)len, f)) {
		fclose(f);
		return -ENODATA;
	}
	fclose(f);
	n = strlen(buf);
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = 0;
	return 0;
}

/* Whether process pid is there and has not ended: a zombie (a --foreground
 * map its parent has not reaped yet) has. */
static bool running(pid_t pid)
{
	char path[64], buf[128];
	const char *st;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	/* PID (COMM) STATE ...: the name may hold ") " */
	if (read_line(path, buf, sizeof(buf)) < 0 || !(st = strrchr(buf, ')')))
		return true;
	return !(st[1] == ' ' && (st[2] == 'Z' || st[2] == 'X'));
}

struct mapping {
	int index;
	bool ublk;			/* /dev/ublkbN, else /dev/nbdN */
	char name[24];			/* nbd3, ublkb0 */
	pid_t pid;
	char session[RTRS_NAME_MAX + 1];
	char device[RNBD_NAME_MAX + 1];
	uint64_t size;
};

/* /dev/nbdN mapped by us: 1 (m filled), 0 (not connected, or someone
 * else's), -errno. */
static int mapping_of(int index, struct mapping *m)
{
	char path[96], buf[600], *slash;
	uint64_t sectors;
	const char *e;

	snprintf(path, sizeof(path), "/sys/block/nbd%d/pid", index);
	if (read_line(path, buf, sizeof(buf)) < 0)
		return 0;	/* not connected */
	memset(m, 0, sizeof(*m));
	m->index = index;
	snprintf(m->name, sizeof(m->name), "nbd%d", index);
	m->pid = (pid_t)atoi(buf);
	snprintf(path, sizeof(path), "/sys/block/nbd%d/backend", index);
	if (read_line(path, buf, sizeof(buf)) < 0 || strncmp(buf, BACKEND_PREFIX,
							       strlen(BACKEND_PREFIX)))
		return 0;
	slash = strchr(buf + strlen(BACKEND_PREFIX), '/');
	if (!slash)
		return 0;
	*slash = 0;
	snprintf(m->session, sizeof(m->session), "%s", buf + strlen(BACKEND_PREFIX));
	snprintf(m->device, sizeof(m->device), "%s", slash + 1);
	snprintf(path, sizeof(path), "/sys/block/nbd%d/size", index);
	if (read_line(path, buf, sizeof(buf)) == 0 && !xparse_u64(buf, 0, UINT64_MAX >> 9, &sectors, &e))
		m->size = sectors << 9;
	return 1;
}

/* /dev/ublkbN mapped by us: its record names a live process that the
 * driver says serves it (where we may ask it: root), and the disk is
 * there.  1 (m filled), 0. */
static int ublk_mapping_of(int index, struct mapping *m)
{
	char path[96], buf[600], sess[RTRS_NAME_MAX + 1], dev[RNBD_NAME_MAX + 1];
	uint64_t sectors;
	const char *e;
	int pid, srv;

	snprintf(path, sizeof(path), UBLK_RECORDS "/ublkb%d", index);
	if (read_line(path, buf, sizeof(buf)) < 0 ||
	    sscanf(buf, "%d %255s %255s", &pid, sess, dev) != 3 || pid <= 0 || !running(pid))
		return 0;
	/* a pid reused since, or a device id another server took after ours
	 * was killed: the driver knows who serves it */
	srv = ublkx_server_pid((unsigned)index);
	if (srv >= 0 && srv != pid)
		return 0;
	snprintf(path, sizeof(path), "/sys/block/ublkb%d/size", index);
	if (read_line(path, buf, sizeof(buf)) < 0)
		return 0;
	memset(m, 0, sizeof(*m));
	m->index = index;
	m->ublk = true;
	snprintf(m->name, sizeof(m->name), "ublkb%d", index);
	m->pid = pid;
	snprintf(m->session, sizeof(m->session), "%s", sess);
	snprintf(m->device, sizeof(m->device), "%s", dev);
	if (!xparse_u64(buf, 0, UINT64_MAX >> 9, &sectors, &e))
		m->size = sectors << 9;
	return 1;
}

static void ublk_record(unsigned id, const char *session, const char *device)
{
	char path[96], tmp[112];
	FILE *f;

	if ((mkdir("/run/xprt", 0755) < 0 && errno != EEXIST) ||
	    (mkdir(UBLK_RECORDS, 0755) < 0 && errno != EEXIST))
		goto fail;
	snprintf(path, sizeof(path), UBLK_RECORDS "/ublkb%u", id);
	snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
	if (!(f = fopen(tmp, "we")))
		goto fail;
	fprintf(f, "%d %s %s\n", (int)getpid(), session, device);
	if (fclose(f) || rename(tmp, path)) {
		unlink(tmp);
		goto fail;
	}
	return;
fail:
	/* the device works without it; unmap and list-mapped do not see it */
	fprintf(stderr, PROG " map: " UBLK_RECORDS ": %s (list-mapped and unmap will not see "
		"/dev/ublkb%u)\n", strerror(errno), id);
}

static void ublk_unrecord(unsigned id)
{
	char path[96];

	snprintf(path, sizeof(path), UBLK_RECORDS "/ublkb%u", id);
	unlink(path);
}

/* Every mapping of ours, nbd then ublk, each in index order; the count
 * or -errno. */
static int mappings(struct mapping **out)
{
	DIR *d = opendir("/sys/block");
	struct dirent *de;
	struct mapping *v = NULL, m;
	int n = 0, cap = 0;

	*out = NULL;
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		int idx;
		char tail;

		if (!(sscanf(de->d_name, "nbd%d%c", &idx, &tail) == 1 && mapping_of(idx, &m) == 1) &&
		    !(sscanf(de->d_name, "ublkb%d%c", &idx, &tail) == 1 &&
		      ublk_mapping_of(idx, &m) == 1))
			continue;
		if (n == cap) {
			struct mapping *nv = realloc(v, sizeof(*v) * (size_t)(cap = cap ? 2 * cap : 8));

			if (!nv) {
				free(v);
				closedir(d);
				return -ENOMEM;
			}
			v = nv;
		}
		v[n++] = m;
	}
	closedir(d);
	for (int i = 1; i < n; i++)	/* insertion sort: nbd first, then by index */
		for (int j = i; j > 0 && (v[j].ublk < v[j - 1].ublk ||
					  (v[j].ublk == v[j - 1].ublk && v[j].index < v[j - 1].index)); j--) {
			m = v[j];
			v[j] = v[j - 1];
			v[j - 1] = m;
		}
	*out = v;
	return n;
}

/* "/dev/nbd3", "nbd3" -> 3 (prefix "nbd"; "ublkb" for /dev/ublkbN); -1
 * if neither. */
static int dev_index(const char *s, const char *prefix)
{
	uint64_t v;
	const char *e;
	size_t n = strlen(prefix);

	if (!strncmp(s, "/dev/", 5))
		s += 5;
	if (strncmp(s, prefix, n) || xparse_u64(s + n, 0, 1u << 20, &v, &e))
		return -1;
	return (int)v;
}

static int nbd_index(const char *s)
{
	return dev_index(s, "nbd");
}

/* Who holds /dev/NAME (nbd3, ublkb0): a mount point (from mountinfo, the
 * device or one of its partitions), a holder (device-mapper, md), swap,
 * or anyone else who opened it exclusively (a mount in another mount
 * namespace, a ZFS pool, a program's O_EXCL): the open that the kernel
 * refuses with EBUSY then.  1 (mounted) or 2 (the rest) with what in buf,
 * 0 when nobody. */
static int in_use(const char *name, char *buf, size_t len)
{
	char path[128], dev[32], line[4096], devs[64][32];
	unsigned ndev = 0;
	DIR *d;
	struct dirent *de;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/block/%s/dev", name);
	if (read_line(path, devs[ndev], sizeof(devs[0])) == 0)
		ndev++;
	snprintf(path, sizeof(path), "/sys/block/%s", name);
	if ((d = opendir(path))) {
		while ((de = readdir(d)) && ndev < 64) {
			char p2[400];

			if (strncmp(de->d_name, name, strlen(name)))
				continue;
			snprintf(p2, sizeof(p2), "/sys/block/%s/%s/dev", name, de->d_name);
			if (read_line(p2, devs[ndev], sizeof(devs[0])) == 0)
				ndev++;
		}
		closedir(d);
	}
	if ((f = fopen("/proc/self/mountinfo", "re"))) {
		while (fgets(line, sizeof(line), f)) {
			char mnt[2048];

			/* ID PARENT MAJ:MIN ROOT MOUNTPOINT ... */
			if (sscanf(line, "%*s %*s %31s %*s %2047s", dev, mnt) != 2)
				continue;
			for (unsigned i = 0; i < ndev; i++)
				if (!strcmp(dev, devs[i])) {
					snprintf(buf, len, "mounted on %s", mnt);
					fclose(f);
					return 1;
				}
		}
		fclose(f);
	}
	snprintf(path, sizeof(path), "/sys/block/%s/holders", name);
	if ((d = opendir(path))) {
		while ((de = readdir(d)))
			if (de->d_name[0] != '.') {
				snprintf(buf, len, "held by %s", de->d_name);
				closedir(d);
				return 2;
			}
		closedir(d);
	}
	snprintf(path, sizeof(path), "/dev/%s", name);
	if ((f = fopen("/proc/swaps", "re"))) {
		while (fgets(line, sizeof(line), f)) {
			size_t n = strlen(path);

			if (!strncmp(line, path, n) && (line[n] == ' ' || line[n] == '\t')) {
				snprintf(buf, len, "used as swap");
				fclose(f);
				return 2;
			}
		}
		fclose(f);
	}
	int fd = open(path, O_RDONLY | O_EXCL | O_NONBLOCK | O_CLOEXEC);

	if (fd >= 0)
		close(fd);
	else if (errno == EBUSY) {
		snprintf(buf, len, "open exclusively elsewhere (a mount in another namespace, a pool, "
			 "a program)");
		return 2;
	}
	return 0;
}

/* --- map ------------------------------------------------------------------ */

enum { OPT_NBD_DEVICE = 0x300, OPT_NBD_CONNS, OPT_FOREGROUND, OPT_UBLK };

struct map_opts {
	struct sess_opts so;
	int index;		/* --nbd-device, or --ublk=N; -1 any */
	unsigned nconns;
	bool foreground, ublk, nbd_opts;
};

static int map_opts(int argc, char **argv, struct map_opts *o)
{
	static const struct option lo[] = {
		SESS_LONGOPTS,
		{ "nbd-device", required_argument, NULL, OPT_NBD_DEVICE },
		{ "nbd-connections", required_argument, NULL, OPT_NBD_CONNS },
		{ "foreground", no_argument, NULL, OPT_FOREGROUND },
		{ "ublk", optional_argument, NULL, OPT_UBLK },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	const char *e;
	int c, rc;

	o->index = -1;
	o->nconns = 1;
	while ((c = getopt_long(argc, argv, SESS_SHORTOPTS "h", lo, NULL)) != -1) {
		rc = sess_opt("map", c, optarg, &o->so);
		if (rc == 1)
			continue;
		if (rc)
			return rc;
		switch (c) {
		case OPT_NBD_DEVICE:
			if ((o->index = nbd_index(optarg)) < 0)
				return usage_error("map", "--nbd-device: '%s' is not /dev/nbdN", optarg);
			o->nbd_opts = true;
			break;
		case OPT_NBD_CONNS:
			if (xparse_u64(optarg, 1, MAX_NBD_CONNS, &v, &e))
				return usage_error("map", "--nbd-connections: '%s' is %s (1 to %d)",
						   optarg, e, MAX_NBD_CONNS);
			o->nconns = (unsigned)v;
			o->nbd_opts = true;
			break;
		case OPT_UBLK:
			o->ublk = true;
			if (optarg && (((o->index = dev_index(optarg, "ublkb")) < 0 &&
			     (xparse_u64(optarg, 0, (1u << 20) - 1, &v, &e) ||
			      (o->index = (int)v) < 0)) || o->index >= 1 << 20))
				return usage_error("map", "--ublk: '%s' is not a device id or /dev/ublkbN",
						   optarg);
			break;
		case OPT_FOREGROUND:
			o->foreground = true;
			break;
		case 'h':
			cmd_usage(stdout, "map");
			return -1;
		default:
			return bad_option("map", SESS_SHORTOPTS "h", argv);
		}
	}
	if (optind < argc)
		return usage_error("map", "unexpected argument '%s'", argv[optind]);
	if (o->ublk && o->nbd_opts)
		return usage_error("map", "--ublk serves no NBD device: no --nbd-device or "
				   "--nbd-connections with it");
	return sess_opts_finish("map", &o->so, true);
}

/* The kernel times a request out after this (NBD_ATTR_TIMEOUT; 0: never):
 * later than our own bound with every path down, so that the failure it
 * sees is ours (EIO), not a dead connection. */
static uint64_t kernel_timeout_s(const struct sess_opts *o, uint64_t down_ns)
{
	/* A path that goes silent is given up rtrs_hb_detect_ns() after the
	 * last word from the server at most, and a request waits for a path
	 * the down-timeout from then; 30 s more cover the request's own
	 * transfer, a loaded machine, and a path heard from a little after
	 * the request started (a second path given up in turn can still take
	 * longer). */
	uint64_t hb = rtrs_hb_detect_ns(o->ro.hb_interval_ms, o->ro.hb_missed_max);
	uint64_t t;

	if (down_ns == RTRS_CLT_FOREVER)
		return 0;
	t = (down_ns + hb + 999999999ull) / 1000000000ull + 30;
	/* the kernel keeps it in jiffies in 32 bits: past ~49 days (HZ 1000)
	 * it would wrap to a short one */
	return t > UINT32_MAX / 1000 ? 0 : t;
}

/* systemd's Type=notify: READY=1 on $NOTIFY_SOCKET once the device is
 * there, so that units ordered after ours (mounts) find it.  The
 * protocol is one datagram (sd_notify(3)); an abstract socket's name
 * starts with '@'. */
static void notify_ready(const char *dev)
{
	const char *p = getenv("NOTIFY_SOCKET");
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char msg[96];
	socklen_t len;
	int fd, n;

	if (!p || !*p || strlen(p) >= sizeof(a.sun_path) || (p[0] != '/' && p[0] != '@'))
		return;
	memcpy(a.sun_path, p, strlen(p));
	if (p[0] == '@')
		a.sun_path[0] = 0;
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(p));
	n = snprintf(msg, sizeof(msg), "READY=1\nSTATUS=mapped as %s", dev);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (sendto(fd, msg, (size_t)n, MSG_NOSIGNAL, (struct sockaddr *)&a, len) < 0)
		fprintf(stderr, PROG " map: NOTIFY_SOCKET %s: %s\n", p, strerror(errno));
	close(fd);
}

/* Tells the parent how it went: "/dev/nbdN" or "!message". */
static void report(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(int fd, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n;

	if (fd < 0)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > 0 && write(fd, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1) < 0)
		return;
}

/* Standard error of a detached serving process, line by line to syslog
 * (daemon facility): what it says later -- every path down, connected
 * again -- is not lost with the terminal.  The pipe's writing end does
 * not block: a syslog that stops reading (its disk on this very device,
 * say) costs lines, never the loop that serves the kernel. */
static pthread_t log_tid;
static bool log_running;

static void *log_thread(void *arg)
{
	int fd = (int)(intptr_t)arg;
	FILE *f = fdopen(fd, "r");
	char line[1024];

	if (!f) {
		close(fd);
		return NULL;
	}
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (line[0])
			syslog(LOG_NOTICE, "%s", line);
	}
	fclose(f);
	return NULL;
}

static void stderr_to_syslog(void)
{
	sigset_t all, old;
	int p[2], fd = -1;

	openlog(PROG, LOG_PID, LOG_DAEMON);
	if (pipe2(p, O_CLOEXEC) == 0) {
		/* signals are the serving loop's: none interrupts the reader */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		log_running = fcntl(p[1], F_SETFL, O_NONBLOCK) == 0 &&
			      pthread_create(&log_tid, NULL, log_thread,
					     (void *)(intptr_t)p[0]) == 0;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (log_running) {
			fd = p[1];
		} else {
			close(p[0]);
			close(p[1]);
		}
	}
	if (fd < 0)
		fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		dup2(fd, STDERR_FILENO);
		close(fd);
	}
}

/* Before the detached process ends: the last lines reach syslog (a
 * second at most, should syslog itself be stuck). */
static void stderr_done(void)
{
	struct timespec ts;
	int null;

	if (!log_running)
		return;
	if ((null = open("/dev/null", O_WRONLY | O_CLOEXEC)) >= 0) {
		dup2(null, STDERR_FILENO);	/* the reader sees the end */
		close(null);
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 1;
	pthread_timedjoin_np(log_tid, NULL, &ts);
	log_running = false;
}

/* Detached (status_fd >= 0): the parent is told the device, standard
 * error goes to syslog (--foreground keeps it). */
static void mapped(const char *dev, int status_fd)
{
	report(status_fd, "%s", dev);
	if (status_fd >= 0) {
		stderr_to_syslog();
		close(status_fd);
	} else
		printf("%s\n", dev);	/* --foreground */
	fflush(stdout);
	notify_ready(dev);
}

/* The serving process of --ublk: up to the device, then until it stops. */
static int map_serve_ublk(struct map_opts *o, int status_fd)
{
	struct sess ss;
	struct ublkx *x;
	char err[512], dev[32];
	unsigned id;
	int rc, fd;

	/* no driver, no permission: said before the server is bothered */
	if ((fd = ublkx_probe(err, sizeof(err))) < 0) {
		report(status_fd, "!");
		return fail("map", "%s", err);
	}
	close(fd);
	cli_stop_handlers();
	o->so.ro_fallback = true;
	if ((rc = sess_open(&ss, "map", &o->so))) {
		report(status_fd, "!");	/* printed already */
		return rc;
	}
	if (!(x = ublkx_open(&ss, o->index, err, sizeof(err)))) {
		rc = fail("map", "%s", err);
		report(status_fd, "!");
		sess_close(&ss);
		return rc;
	}
	ss.activity = "map";
	id = ublkx_id(x);
	snprintf(dev, sizeof(dev), "/dev/ublkb%u", id);
	ublk_record(id, o->so.session, o->so.device);
	if (o->so.verbose)
		fprintf(stderr, PROG " map: %s serves %s of session %s\n", dev, o->so.device,
			o->so.session);
	mapped(dev, status_fd);
	/* until SIGTERM/SIGINT/SIGHUP (unmap sends SIGTERM) or someone else
	 * stops it */
	while (ublkx_running(x)) {
		if (sess_run(&ss, 1000000000ull) == -EINTR)
			break;
		ublkx_after_round(x);
	}
	rc = EXIT_OK;
	if (ublkx_close(x, err, sizeof(err)))
		rc = fail("map", "%s", err);
	else if (o->so.verbose)
		fprintf(stderr, PROG " map: %s unmapped\n", dev);
	ublk_unrecord(id);
	sess_close(&ss);
	ublkx_free(x);
	return rc;
}

/* The serving process: up to the mapping, then until the kernel lets go. */
static int map_serve(struct map_opts *o, int status_fd)
{
	struct sess ss;
	struct nbdx *x;
	struct knbd nl = { 0 };
	int pair[MAX_NBD_CONNS][2], kfds[MAX_NBD_CONNS], index, rc = EXIT_FAIL;
	char err[512], backend[RTRS_NAME_MAX + RNBD_NAME_MAX + 32], peer[32];
	char ident[RTRS_NAME_MAX + RNBD_NAME_MAX + 32];	/* the kernel's backend identifier */
	bool asked = false;
	unsigned lost;
	uint64_t asked_ns = 0, down_ns = o->so.ro.down_timeout_ns;
	/* static: a thread the kernel never answers outlives this frame */
	static struct knbd_job job = { .index = -1 }, tjob = { .set_timeout = true };
	bool tjob_running = false;
	pthread_t tid, ttid;

	if (knbd_open(&nl, err, sizeof(err))) {
		report(status_fd, "!%s", err);
		return fail("map", "%s", err);
	}
	cli_stop_handlers();
	o->so.ro_fallback = true;
	if ((rc = sess_open(&ss, "map", &o->so))) {
		report(status_fd, "!");	/* printed already */
		goto out_nl;
	}
	if (!(x = nbdx_open(&ss))) {
		report(status_fd, "!");
		rc = EXIT_FAIL;
		goto out_sess;
	}
	for (unsigned i = 0; i < o->nconns; i++) {
		const char *why = NULL;

		pair[i][0] = pair[i][1] = -1;
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair[i]) < 0 ||
		    fcntl(pair[i][0], F_SETFL, O_NONBLOCK) < 0)
			why = strerror(errno);
		snprintf(peer, sizeof(peer), "kernel nbd socket %u", i);
		if (!why && nbdx_adopt(x, pair[i][0], peer))
			why = "out of memory";
		if (why) {
			/* ours are the kernel's ends so far, and this pair */
			for (unsigned j = 0; j < i; j++)
				close(kfds[j]);
			if (pair[i][0] >= 0)
				close(pair[i][0]);
			if (pair[i][1] >= 0)
				close(pair[i][1]);
			rc = fail("map", "socketpair: %s", why);
			report(status_fd, "!");
			goto out_nbdx;
		}
		kfds[i] = pair[i][1];
	}
	snprintf(ident, sizeof(ident), BACKEND_PREFIX "%s/%s", o->so.session, o->so.device);
	index = knbd_connect(&nl, &(struct nbd_connect){ o->index, nbdx_export(x),
						       kernel_timeout_s(&o->so, down_ns), ident,
						       kfds, o->nconns }, err, sizeof(err));
	for (unsigned i = 0; i < o->nconns; i++)
		close(kfds[i]);	/* the kernel holds its own references */
	if (index < 0) {
		rc = fail("map", "%s", err);
		report(status_fd, "!");
		goto out_nbdx;
	}
	ss.activity = "map";
	if (o->so.verbose)
		fprintf(stderr, PROG " map: /dev/nbd%d serves %s of session %s\n", index,
			o->so.device, o->so.session);
	snprintf(backend, sizeof(backend), "/dev/nbd%d", index);
	mapped(backend, status_fd);
	rc = EXIT_OK;
	knbd_close(&nl);	/* unmap and new timeouts open their own */
	/* until the kernel closes every socket: unmap, or our own stop */
	while (nbdx_nconns(x) > 0) {
		if (sess_run(&ss, 1000000000ull) == -EINTR) {
			/* a stop signal: unmap ourselves, then serve what the
			 * kernel still flushes until it lets go (the loop must
			 * go on looking at the sockets); a second one: now */
			cli_stop_requested = 0;
			if (asked)
				break;
			job.index = index;
			if ((errno = pthread_create(&tid, NULL, knbd_thread, &job))) {
				fprintf(stderr, PROG " map: unmap: %s\n", strerror(errno));
				break;
			}
			asked = true;
			asked_ns = xtime_ns();
		}
		nbdx_after_round(x);
		/* `rtrs-client set --down-timeout`: the kernel waits as long
		 * as our EIO now may take (once per new value) */
		if (tjob_running && atomic_load(&tjob.state) != 0) {
			pthread_join(ttid, NULL);
			tjob_running = false;
			if (atomic_load(&tjob.state) < 0)
				fprintf(stderr, PROG " map: %s\n", tjob.err);
		}
		if (!tjob_running && !asked && rtrs_clt_down_timeout(ss.clt) != down_ns) {
			uint64_t d = rtrs_clt_down_timeout(ss.clt);

			tjob.index = index;
			snprintf(tjob.ident, sizeof(tjob.ident), "%s", ident);
			tjob.timeout_s = kernel_timeout_s(&o->so, d);
			atomic_store(&tjob.state, 0);
			/* no thread now: the next round tries again */
			if (pthread_create(&ttid, NULL, knbd_thread, &tjob) == 0) {
				tjob_running = true;
				down_ns = d;
			}
		}
		if (asked && atomic_load(&job.state) < 0) {
			fprintf(stderr, PROG " map: %s\n", job.err);
			asked = false;	/* a second signal tries again */
			pthread_join(tid, NULL);
			atomic_store(&job.state, 0);
		}
		if (asked && xtime_ns() - asked_ns > 30000000000ull) {
			rc = fail("map", "/dev/nbd%d: the kernel did not let go within 30 s", index);
			break;
		}
	}
	if (asked) {
		/* the thread ends with the kernel's answer; not later than
		 * this process if the kernel never gives one */
		if (atomic_load(&job.state) != 0)
			pthread_join(tid, NULL);
		else
			pthread_detach(tid);
	}
	if (tjob_running) {
		if (atomic_load(&tjob.state) != 0)
			pthread_join(ttid, NULL);
		else
			pthread_detach(ttid);
	}
	if (o->so.verbose)
		fprintf(stderr, PROG " map: /dev/nbd%d unmapped\n", index);
out_nbdx:
	if ((lost = nbdx_close(x)) && rc == EXIT_OK)
		rc = fail("map", "%u request(s) of the kernel got no answer before the end", lost);
out_sess:
	sess_close(&ss);
out_nl:
	knbd_close(&nl);
	return rc;
}

int cmd_map(int argc, char **argv)
{
	struct map_opts o = { 0 };
	char buf[1100];
	int p[2], rc, st;
	ssize_t n, got = 0;
	pid_t pid;

	sess_opts_init(&o.so);
	rc = map_opts(argc, argv, &o);
	if (rc)
		return rc < 0 ? EXIT_OK : rc;
	if (o.foreground)
		return o.ublk ? map_serve_ublk(&o, -1) : map_serve(&o, -1);
	/* The serving process is a child that leaves the session of the
	 * caller; we print its device once it is mapped (or its one error
	 * line, which it prints itself) and leave it running.  It forks
	 * before any RDMA resource exists. */
	if (pipe2(p, O_CLOEXEC) < 0)
		return fail("map", "pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return fail("map", "fork: %s", strerror(errno));
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);

		close(p[0]);
		setsid();
		/* nothing of the caller's kept busy: its directory (a mount
		 * point), its terminal or the pipe it reads our output from */
		if (chdir("/") < 0)
			_exit(EXIT_FAIL);
		if (null >= 0) {
			dup2(null, STDIN_FILENO);
			dup2(null, STDOUT_FILENO);
		}
		rc = o.ublk ? map_serve_ublk(&o, p[1]) : map_serve(&o, p[1]);
		stderr_done();
		_exit(rc);
	}
	close(p[1]);
	while ((n = read(p[0], buf + got, sizeof(buf) - 1 - (size_t)got)) > 0 ||
	       (n < 0 && errno == EINTR))
		if (n > 0)
			got += n;
	close(p[0]);
	buf[got] = 0;
	if (got > 0 && buf[0] == '/') {
		printf("%s\n", buf);
		int e = cli_stdout_error();

		if (!e)
			return EXIT_OK;
		/* mapped all the same: say which, where it can be read */
		return fail("map", "%s is mapped, but standard output did not take its name: %s "
			    "(rtrs-client unmap %s)", buf, strerror(e), buf);
	}
	/* it failed: its message is out; its status is ours */
	if (waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st))
		return WEXITSTATUS(st);
	if (got > 1)
		return fail("map", "%s", buf + 1);
	return fail("map", "the serving process ended before the device was mapped");
}

/* --- unmap ---------------------------------------------------------------- */

/* unmap /dev/ublkbN that is not a mapping: a record whose process was
 * killed leaves the device's id and /dev/ublkcN behind (the driver
 * removed the disk); deleting them is the cleanup.  Else not ours. */
static int ublk_dead(int idx)
{
	char path[96], buf[600], err[300];
	int pid;

	snprintf(path, sizeof(path), UBLK_RECORDS "/ublkb%d", idx);
	if (read_line(path, buf, sizeof(buf)) < 0 || sscanf(buf, "%d", &pid) != 1 || pid <= 0 ||
	    running(pid))
		return fail("unmap", "/dev/ublkb%d is not mapped by " PROG, idx);
	if (ublkx_delete_dead((unsigned)idx, err, sizeof(err)))
		return fail("unmap", "%s", err);
	unlink(path);
	fprintf(stderr, PROG " unmap: /dev/ublkb%d: its serving process %d had ended; its device "
		"is deleted\n", idx, pid);
	return EXIT_OK;
}

int cmd_unmap(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "force", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct mapping m, *all = NULL;
	struct knbd nl;
	bool force = false;
	char err[512], why[2200];
	const char *arg;
	uint64_t t0;
	int c, idx, n;

	while ((c = getopt_long(argc, argv, "fh", lo, NULL)) != -1) {
		switch (c) {
		case 'f':
			force = true;
			break;
		case 'h':
			cmd_usage(stdout, "unmap");
			return EXIT_OK;
		default:
			return bad_option("unmap", "fh", argv);
		}
	}
	if (optind != argc - 1)
		return usage_error("unmap", "one /dev/nbdN, /dev/ublkbN or session name is needed");
	arg = argv[optind];
	idx = nbd_index(arg);
	if (idx >= 0) {
		if (mapping_of(idx, &m) != 1)
			return fail("unmap", "/dev/nbd%d is not mapped by " PROG, idx);
	} else if ((idx = dev_index(arg, "ublkb")) >= 0) {
		if (ublk_mapping_of(idx, &m) != 1)
			return ublk_dead(idx);
	} else {
		n = mappings(&all);
		if (n < 0)
			return fail("unmap", "/sys/block: %s", strerror(-n));
		for (c = 0; c < n && strcmp(all[c].session, arg); c++)
			;
		if (c == n) {
			free(all);
			return fail("unmap", "no device is mapped by session %s", arg);
		}
		m = all[c];
		free(all);
	}
	int used = in_use(m.name, why, sizeof(why));

	if (used && !force)
		return fail("unmap", "/dev/%s is %s (%s first, or --force)", m.name, why,
			    used == 1 ? "unmount it" : "let it go");
	if (m.ublk) {
		/* the serving process stops the device and deletes it */
		if (kill(m.pid, SIGTERM) < 0)
			return fail("unmap", "/dev/%s: its process %d: %s", m.name, (int)m.pid,
				    strerror(errno));
	} else if (knbd_open(&nl, err, sizeof(err)))
		return fail("unmap", "%s", err);
	else if (knbd_disconnect(&nl, m.index, err, sizeof(err))) {
		knbd_close(&nl);
		return fail("unmap", "%s", err);
	} else
		knbd_close(&nl);
	/* the serving process ends once the kernel has let go */
	t0 = xtime_ns();
	/* a ublk device's process serves the flush (30 s at most), closes
	 * the session (5 s) and deletes the device */
	while (m.pid > 0 && running(m.pid)) {
		if (xtime_ns() - t0 > (m.ublk ? 60000000000ull : 30000000000ull))
			return fail("unmap", "/dev/%s: its process %d did not end within %d s",
				    m.name, (int)m.pid, m.ublk ? 60 : 30);
		usleep(20000);
	}
	return EXIT_OK;
}

/* --- list-mapped ---------------------------------------------------------- */

/* The control socket of process pid, whatever --ctl it was given: the
 * listening unix socket with a path among its fds (/proc/net/unix, then
 * the fds by inode; a session has a socket per connection besides).  0,
 * or -1 (none, or /proc/PID/fd not ours to read). */
static int ctl_path_of(pid_t pid, char *path, size_t len)
{
	struct lsock { unsigned long ino; char path[108]; } *l = NULL, *m;
	char name[64], link[64], line[600];
	unsigned n = 0, cap = 0;
	struct dirent *d;
	DIR *dir = NULL;
	FILE *f;
	int rc = -1;

	if (pid <= 0 || !(f = fopen("/proc/net/unix", "re")))
		return -1;
	/* Num RefCount Protocol Flags Type St Inode Path; __SO_ACCEPTCON
	 * (0x10000) in Flags: listening */
	while (fgets(line, sizeof(line), f)) {
		unsigned long flags, inode;
		char sock[512];

		if (sscanf(line, "%*s %*s %*s %lx %*s %*s %lu %511s", &flags, &inode, sock) != 3 ||
		    !(flags & 0x10000) || sock[0] != '/' || strlen(sock) >= sizeof(l->path))
			continue;
		if (n == cap) {
			if (!(m = realloc(l, (cap = cap ? 2 * cap : 32) * sizeof(*l))))
				break;
			l = m;
		}
		l[n].ino = inode;
		memcpy(l[n].path, sock, strlen(sock) + 1);
		n++;
	}
	fclose(f);
	snprintf(name, sizeof(name), "/proc/%d/fd", (int)pid);
	if (!n || !(dir = opendir(name))) {
		free(l);
		return -1;
	}
	while (rc && (d = readdir(dir))) {
		char fd[80];
		unsigned long ino;
		ssize_t k;

		snprintf(fd, sizeof(fd), "%s/%s", name, d->d_name);
		k = readlink(fd, link, sizeof(link) - 1);
		if (k <= 0 || (link[k] = 0, sscanf(link, "socket:[%lu]", &ino) != 1))
			continue;
		for (unsigned i = 0; i < n; i++)
			if (l[i].ino == ino && strlen(l[i].path) < len) {
				memcpy(path, l[i].path, strlen(l[i].path) + 1);
				rc = 0;
				break;
			}
	}
	closedir(dir);
	free(l);
	return rc;
}

/* The paths' state of a running session: "2/2 connected", or why not. */
static void session_state(const char *session, pid_t pid, struct xnode *e)
{
	char path[256], err[300], *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	char *av[] = { (char *)"status", (char *)"-o", (char *)"yaml", NULL };
	struct xnode *root, *uris;
	const struct xnode *paths;
	unsigned up = 0, all = 0;
	int rc;

	/* where its process listens (whatever --ctl said); else, where
	 * /proc/PID/fd is not ours to read, the caller's own runtime
	 * directory, then where the systemd unit (rtrs-client-map@.service)
	 * puts it */
	rc = -1;
	if (out && ctl_path_of(pid, path, sizeof(path)) == 0)
		rc = xctl_call(path, 3, av, out, err, sizeof(err));
	if (out && rc != 0 && ctl_path_for(session, NULL, path, sizeof(path)) == 0) {
		rewind(out);
		rc = xctl_call(path, 3, av, out, err, sizeof(err));
	}
	if (out && rc != 0) {
		snprintf(path, sizeof(path), "/run/xprt/" PROG "-%s.sock", session);
		rewind(out);
		rc = xctl_call(path, 3, av, out, err, sizeof(err));
	}
	if (!out || rc != 0) {
		if (out)
			fclose(out);
		free(text);
		xnode_set_str(e, "state", "unknown (no control socket)");
		return;
	}
	fclose(out);
	root = xconf_parse(text, len, err, sizeof(err));
	free(text);
	paths = root ? xnode_get(root, "paths") : NULL;
	uris = xnode_set_list(e, "paths");
	for (size_t i = 0; paths && i < xnode_len(paths); i++) {
		const struct xnode *p = xnode_at(paths, i, NULL);
		const char *st = xnode_str(xnode_get(p, "state")), *u = xnode_str(xnode_get(p, "uri"));

		all++;
		up += st && !strcmp(st, "connected");
		if (u) {
			char b[512];

			snprintf(b, sizeof(b), "%s (%s)", u, st ? st : "?");
			xnode_push_str(uris, b);
		}
	}
	xnode_set_strf(e, "state", "%u/%u paths connected", up, all);
	xnode_free(root);
}

int cmd_list_mapped(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	enum xfmt f = XFMT_TEXT;
	struct mapping *all;
	struct xnode *root, *list;
	int c, n;

	while ((c = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
		switch (c) {
		case 'o':
			if (cli_parse_fmt(PROG, "list-mapped", optarg, &f))
				return EXIT_USAGE;
			break;
		case 'h':
			cmd_usage(stdout, "list-mapped");
			return EXIT_OK;
		default:
			return bad_option("list-mapped", "o:h", argv);
		}
	}
	if (optind < argc)
		return usage_error("list-mapped", "unexpected argument '%s'", argv[optind]);
	n = mappings(&all);
	if (n < 0 && n != -ENOENT)
		return fail("list-mapped", "/sys/block: %s", strerror(-n));
	root = xnode_map();
	list = xnode_set_list(root, "mapped");
	for (int i = 0; i < n; i++) {
		struct xnode *e = xnode_push_map(list);

		xnode_set_strf(e, "device", "/dev/%s", all[i].name);
		xnode_set_str(e, "kind", all[i].ublk ? "ublk" : "nbd");
		xnode_set_str(e, "session", all[i].session);
		xnode_set_str(e, "export", all[i].device);
		xnode_set_u64(e, "size", all[i].size);
		xnode_set_i64(e, "pid", all[i].pid);
		session_state(all[i].session, all[i].pid, e);
	}
	free(all);
	xemit(stdout, root, f);
	xnode_free(root);
	return EXIT_OK;
}
