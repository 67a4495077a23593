/* mkshmcon connect: one end of a connection as a pipe.  stdin is sent to
 * the peer, what the peer sends is written to stdout -- both at once, like
 * the two directions of a socket.  End of input is a half-close (CON_FIN,
 * as shutdown(SHUT_WR)): the peer writes out everything before it and
 * sees end of data, while its own data keeps coming to us until it ends
 * its input too; then the connection closes.  The exit status is 0 only
 * when every byte of our input reached the peer's process and every byte
 * the peer sent was written to our stdout. */
#include "cmd.h"
#include "core/log.h"
#include "core/parse.h"
#include "core/xtime.h"
#include "shmcm/shmcm.h"
#include "shmcm/shmcm_wire.h"
#include "xprt/mbox.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define IN_CHUNK	(256u << 10)
#define MAX_MSG		(64u << 20)
/* Stream mode reads stdin straight into this many mailbox slots at most
 * per readv(2) (256 KiB with the default 16 KiB slots). */
#define CLAIM_SLOTS	16u

enum direction {
	DIR_BOTH,
	DIR_SEND_ONLY,		/* do not wait for the peer's end of data */
	DIR_RECV_ONLY,		/* send nothing: end of data at once */
};

/* How our direction ended. */
enum fin_state {
	FIN_NONE,		/* input still open (or not connected yet) */
	FIN_SENT,		/* CON_FIN sent after all our data */
	FIN_LEGACY,		/* the peer predates CON_FIN: drain, then close */
};

struct pipe_end {
	struct shmcm_conn *c;
	const char *name;
	bool message, verbose;
	int wake_efd;		/* up-calls and the signal thread -> main */
	int out_fd;		/* stdout, or a non-blocking reopening of it */
	bool out_sock;		/* stdout is a socket: sent to with MSG_DONTWAIT
				 * (its flags are shared with whoever passed it) */
	int abort_efd;		/* a signal: stop waiting on stdout */
	int sfd, quit_efd;	/* the signal thread's signalfd; main -> it */
	_Atomic int sig;
	_Atomic bool up, down, peer_eof;
	_Atomic int reason;
	_Atomic int out_err;
	_Atomic uint64_t out_bytes;	/* of the peer's data, on our stdout */
	/* main thread only */
	uint64_t in_bytes;		/* of our input, sent */
	bool legacy_peer;
};

static void wake(struct pipe_end *pe)
{
	uint64_t one = 1;

	if (write(pe->wake_efd, &one, sizeof(one)) < 0)
		xlog_ratelimited(XLOG_WARN, "eventfd: %m");
}

/* Writes everything, or fails.  On a non-blocking stdout (a pipe we
 * reopened, a socket written with MSG_DONTWAIT) it waits in poll() so that
 * a signal (abort_efd) can cut a stalled write short without the deliver
 * up-call holding the connection hostage. */
static int write_all(struct pipe_end *pe, struct iovec *iov, int cnt)
{
	while (cnt > 0) {
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)cnt };
		ssize_t n = pe->out_sock ? sendmsg(pe->out_fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL)
					 : writev(pe->out_fd, iov, cnt);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				struct pollfd p[2] = {
					{ .fd = pe->out_fd, .events = POLLOUT },
					{ .fd = pe->abort_efd, .events = POLLIN },
				};
				if (poll(p, 2, -1) < 0 && errno != EINTR)
					return -errno;
				if (p[1].revents)
					return -ECANCELED;
				continue;
			}
			return -errno;
		}
		while (cnt > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

static void on_deliver(void *arg, uint32_t src, uint32_t dst, const void *data, size_t len)
{
	struct pipe_end *pe = arg;
	uint32_t be = htobe32((uint32_t)len);
	struct iovec iov[2] = {
		{ &be, sizeof(be) },
		{ (void *)data, len },
	};
	int rc;

	if (atomic_load_explicit(&pe->out_err, memory_order_relaxed))
		return;
	rc = pe->message ? write_all(pe, iov, 2) : write_all(pe, iov + 1, 1);
	if (rc < 0) {
		/* The peer's data can no longer reach our reader: reset, so
		 * the peer learns that it was not all delivered. */
		atomic_store(&pe->out_err, -rc);
		shmcm_disconnect(pe->c);
		wake(pe);
		return;
	}
	atomic_fetch_add_explicit(&pe->out_bytes, len, memory_order_relaxed);
}

static void on_connected(void *arg)
{
	struct pipe_end *pe = arg;

	atomic_store(&pe->up, true);
	wake(pe);
}

static void on_disconnected(void *arg, enum shmcm_reason why)
{
	struct pipe_end *pe = arg;

	atomic_store(&pe->reason, why);
	atomic_store(&pe->down, true);
	wake(pe);
}

/* The peer's CON_FIN: all it sent is on our stdout. */
static void on_eof(void *arg)
{
	struct pipe_end *pe = arg;

	atomic_store(&pe->peer_eof, true);
	wake(pe);
}

/* Stream mode: pieces of one fragment each, so the peer delivers every
 * one straight from the mailbox slot without reassembly. */
static int send_stream(struct pipe_end *pe, const uint8_t *buf, size_t n)
{
	size_t piece = shmcm_get_mtu(pe->c) - SHMCM_UDATA_HLEN;

	for (size_t off = 0; off < n; off += piece) {
		int rc = shmcm_transmit(pe->c, 0, 0, buf + off, n - off < piece ? n - off : piece);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Message mode: stdin carries records, a 4-byte big-endian length and the
 * bytes; each record is one message.  Returns bytes consumed or -errno. */
static ssize_t send_records(struct pipe_end *pe, const uint8_t *buf, size_t n)
{
	size_t off = 0;

	while (n - off >= 4) {
		uint32_t len;

		memcpy(&len, buf + off, 4);
		len = be32toh(len);
		if (len > MAX_MSG) {
			fprintf(stderr, "mkshmcon: connection '%s': input record of %u bytes exceeds "
				"the %u byte message limit (after %" PRIu64 " bytes of whole records)\n",
				pe->name, len, MAX_MSG, pe->in_bytes + off);
			return -EMSGSIZE;
		}
		if (n - off - 4 < len)
			break;
		int rc = shmcm_transmit(pe->c, 0, 0, buf + off + 4, len);
		if (rc < 0)
			return rc;
		off += 4 + len;
	}
	return (ssize_t)off;
}

/* Bigger kernel pipe buffers on our ends: fewer wake-ups and context
 * switches per byte on a machine with few CPUs.  Best effort. */
static void grow_pipe(int fd)
{
	struct stat st;

	if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode))
		(void)fcntl(fd, F_SETPIPE_SZ, 1 << 20);
}

/* A pipe on stdout is reopened as a separate open file description, so it
 * can be non-blocking without changing the flags of whoever shares it. */
static int open_out(void)
{
	struct stat st;
	int fd;

	if (fstat(STDOUT_FILENO, &st) < 0 || !S_ISFIFO(st.st_mode))
		return STDOUT_FILENO;
	fd = open("/proc/self/fd/1", O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	return fd >= 0 ? fd : STDOUT_FILENO;
}

/* SIGINT, SIGTERM and SIGHUP (unless ignored at start, as under nohup(1):
 * cli_stop_signals()): whatever main is waiting on (stdin, room in the
 * mailbox, a stalled stdout in the deliver up-call), stop it and close the
 * connection. */
static void *signal_thread(void *arg)
{
	struct pipe_end *pe = arg;
	struct pollfd p[2] = {
		{ .fd = pe->sfd, .events = POLLIN },
		{ .fd = pe->quit_efd, .events = POLLIN },
	};
	struct signalfd_siginfo si;
	uint64_t one = 1;

	for (;;) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (p[1].revents)
			return NULL;
		if (read(pe->sfd, &si, sizeof(si)) == sizeof(si))
			break;
	}
	atomic_store(&pe->sig, (int)si.ssi_signo);
	if (write(pe->abort_efd, &one, sizeof(one)) < 0)
		xlog_warn("eventfd: %m");
	shmcm_disconnect(pe->c);
	wake(pe);
	return NULL;
}

/* The peer's reason, told from our side. */
static const char *peer_view(enum shmcm_reason r)
{
	switch (r) {
	case SHMCM_R_TIMEOUT: return "it heard nothing from us within the connection timeout";
	case SHMCM_R_INTERNAL: return "its deferred queue overflowed";
	case SHMCM_R_PEER_REQ: return "it saw a new connection request from our side";
	case SHMCM_R_RX_LOST: return "it dropped some of our data";
	default: return shmcm_reason_str(r);
	}
}

/* Why the connection went down, from our side. */
static const char *down_view(struct pipe_end *pe, enum shmcm_reason r)
{
	static char buf[128];

	if (r == SHMCM_R_PEER_RST) {
		enum shmcm_reason pr = shmcm_get_peer_reason(pe->c);

		if (pr == SHMCM_R_NONE || pr == SHMCM_R_LOCAL)
			return "reset by the peer (its process was stopped, its input or output failed, or it did not wait for our data)";
		snprintf(buf, sizeof(buf), "reset by the peer (%s)", peer_view(pr));
		return buf;
	}
	if (r == SHMCM_R_PEER_GONE) {
		/* a peer that reset the connection and exited before its
		 * CON_RST could go (its ring full) left its reason behind */
		enum shmcm_reason pr = shmcm_get_peer_reason(pe->c);

		if (pr == SHMCM_R_INTERNAL || pr == SHMCM_R_TIMEOUT || pr == SHMCM_R_RX_LOST ||
		    pr == SHMCM_R_PEER_REQ) {
			snprintf(buf, sizeof(buf), "reset by the peer (%s)", peer_view(pr));
			return buf;
		}
	}
	if (r == SHMCM_R_INTERNAL)
		return "reset: our deferred queue overflowed (the peer did not keep up; see create -d)";
	if (r == SHMCM_R_RX_LOST)
		return "reset: we dropped part of the peer's data (said above; our output ends before it)";
	return shmcm_reason_str(r);
}

struct outcome {
	bool was_up;		/* a peer connected */
	bool input_open;	/* our stdin had not ended */
	bool tx_done;		/* ... it ended and the peer read all of it */
	bool rx_done;		/* the peer's data ended and all of it is on stdout */
	bool linger_out;	/* --linger ran out first */
	bool failed;		/* a failure already reported in one line */
};

/* 0 only when nothing was lost; otherwise one line saying what happened
 * and what was left undone. */
static int exit_status(struct pipe_end *pe, const struct outcome *o, enum direction dir)
{
	enum shmcm_reason r = (enum shmcm_reason)atomic_load(&pe->reason);
	int sig = atomic_load(&pe->sig), oe = atomic_load(&pe->out_err);
	bool rx_ok = o->rx_done || dir == DIR_SEND_ONLY;
	/* an end that sends nothing has nothing to lose that way */
	bool tx_ok = o->tx_done || dir == DIR_RECV_ONLY;
	const char *what, *cause;
	char detail[160];

	if (o->failed)
		return EXIT_FAIL;
	if (!sig && !oe && tx_ok && rx_ok)
		return EXIT_OK;
	if (!o->was_up)
		what = "before a peer connected";
	else if (!tx_ok && !rx_ok)
		what = o->input_open ? "before our input ended and before the peer's data ended"
				     : "before the peer had all our input and before its data ended";
	else if (!tx_ok)
		what = o->input_open ? "before our input ended" : "before the peer had all our input";
	else if (!rx_ok)
		what = "before the peer's data ended";
	else
		what = "after the transfer was complete";	/* a late signal */
	snprintf(detail, sizeof(detail), "%" PRIu64 " bytes sent, %" PRIu64 " received",
		 pe->in_bytes, atomic_load(&pe->out_bytes));
	if (sig) {
		fprintf(stderr, "mkshmcon: connection '%s' stopped by SIG%s %s (%s)\n", pe->name,
			sigabbrev_np(sig) ? sigabbrev_np(sig) : "?", what, detail);
		return 128 + sig;
	}
	if (oe) {
		fprintf(stderr, "mkshmcon: connection '%s': writing to stdout: %s; reset %s (%s)\n",
			pe->name, strerror(oe), what, detail);
		return oe == EPIPE ? 128 + SIGPIPE : EXIT_FAIL;
	}
	if (o->linger_out)
		cause = "closed: the linger time ran out";
	else if (atomic_load(&pe->down))
		cause = down_view(pe, r);
	else
		cause = "closed";
	fprintf(stderr, "mkshmcon: connection '%s' %s %s (%s)\n", pe->name, cause, what, detail);
	return EXIT_FAIL;
}

/* Stream mode, wait flow: stdin is read straight into mailbox slots, the
 * only copy on our side.  Bytes read (0 at end of input), -1 when reading
 * failed (said in one line), -2 with *lib_err from the library, or -3 when
 * there was nothing to read after all. */
static ssize_t send_stream_direct(struct pipe_end *pe, int *lib_err)
{
	struct iovec iov[CLAIM_SLOTS];
	int n = shmcm_tx_claim(pe->c, iov, CLAIM_SLOTS);
	ssize_t got;

	if (n < 0) {
		*lib_err = n;
		return -2;
	}
	do
		got = readv(STDIN_FILENO, iov, n);
	while (got < 0 && errno == EINTR);
	if (got < 0 && errno == EAGAIN)
		got = -3;	/* nothing after all: commit nothing */
	else if (got < 0)
		fprintf(stderr, "mkshmcon: reading stdin: %s\n", strerror(errno));
	shmcm_tx_commit(pe->c, 0, 0, got > 0 ? (size_t)got : 0);
	if (got > 0)
		pe->in_bytes += (uint64_t)got;
	return got;
}

static void ns_to_timeout(uint64_t ns, struct timespec *ts)
{
	ts->tv_sec = (time_t)(ns / 1000000000u);
	ts->tv_nsec = (long)(ns % 1000000000u);
}

/* What connect's command line asks for. */
struct connect_opts {
	struct shmcm_params p;
	uint64_t wait_ns, linger_ns;
	bool linger;
	enum direction dir;
};

/* The command line into co and pe's flags.  -1 to go on, or the exit
 * status (a usage error, --help). */
static int connect_args(int argc, char **argv, struct connect_opts *co, struct pipe_end *pe)
{
	enum { OPT_SEND_ONLY = 256 };
	static const struct option opts[] = {
		{ "side",      required_argument, NULL, 'x' },
		{ "message",   no_argument,       NULL, 'M' },
		{ "flow",      required_argument, NULL, 'F' },
		{ "wait",      required_argument, NULL, 'w' },
		{ "linger",    required_argument, NULL, 'l' },
		{ "verbose",   no_argument,       NULL, 'v' },
		{ "no-input",  no_argument,       NULL, 'd' },
		{ "recv-only", no_argument,       NULL, 'd' },
		{ "send-only", no_argument,       NULL, OPT_SEND_ONLY },
		{ "no-cma",    no_argument,       NULL, 'C' },
		{ "help",      no_argument,       NULL, 'h' },
		{ 0 }
	};
	const char *errstr;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "x:MF:w:l:vdh", opts, NULL)) != -1) {
		switch (c) {
		case 'x':
			if (!strcmp(optarg, "a") || !strcmp(optarg, "A"))
				co->p.side = MBOX_SIDE_A;
			else if (!strcmp(optarg, "b") || !strcmp(optarg, "B"))
				co->p.side = MBOX_SIDE_B;
			else
				return usage_error("connect", "side '%s' must be a or b", optarg);
			break;
		case 'M':
			pe->message = true;
			break;
		case 'F':
			if (!strcmp(optarg, "wait"))
				co->p.flow = SHMCM_FLOW_WAIT;
			else if (!strcmp(optarg, "defer"))
				co->p.flow = SHMCM_FLOW_DEFER;
			else
				return usage_error("connect", "flow '%s' must be wait or defer", optarg);
			break;
		case 'w':
			if (xparse_duration(optarg, 1000000000ull, 1, 365ull * 86400 * 1000000000ull,
					    &co->wait_ns, &errstr) < 0)
				return usage_error("connect", "wait timeout '%s' %s", optarg, errstr);
			break;
		case 'l':
			if (xparse_duration(optarg, 1000000000ull, 0, 365ull * 86400 * 1000000000ull,
					    &co->linger_ns, &errstr) < 0)
				return usage_error("connect", "linger time '%s' %s", optarg, errstr);
			co->linger = true;
			break;
		case 'd':
			if (co->dir == DIR_SEND_ONLY)
				return usage_error("connect", "-d (--recv-only) and --send-only exclude each other");
			co->dir = DIR_RECV_ONLY;
			break;
		case OPT_SEND_ONLY:
			if (co->dir == DIR_RECV_ONLY)
				return usage_error("connect", "-d (--recv-only) and --send-only exclude each other");
			co->dir = DIR_SEND_ONLY;
			break;
		case 'C':
			co->p.no_cma = true;
			break;
		case 'v':
			pe->verbose = true;
			if (xlog_level() < XLOG_INFO)
				xlog_set_level(XLOG_INFO);
			break;
		case 'h':
			cmd_usage(stdout, "connect");
			return EXIT_OK;
		default:
			return bad_option("connect", "x:MF:w:l:vdh", argv);
		}
	}
	if (optind >= argc)
		return usage_error("connect", "connection name missing");
	if (optind + 1 < argc)
		return usage_error("connect", "unexpected argument '%s'", argv[optind + 1]);
	if (co->p.side < 0)
		return usage_error("connect", "which side? -x a or -x b");
	if (co->linger && co->dir == DIR_SEND_ONLY)
		return usage_error("connect", "--linger has no use with --send-only");
	pe->name = co->p.name = strip_db_prefix(argv[optind]);
	if (check_name(co->p.name))
		return EXIT_USAGE;
	return -1;
}

/* Standard input on its way into the connection: records (-M) that
 * straddle reads wait in buf. */
struct input {
	uint8_t *buf;
	size_t have;
	bool direct;		/* stream mode, wait flow: read into the slots */
	bool tx_gone;		/* a send found the connection going down:
				 * nothing more is read (the record that failed
				 * stays in buf) until the loop sees it down */
};

/* Readable standard input into the connection.  0 to go on (end of input
 * clears o->input_open); -1 when the loop must stop, o->failed set and
 * the reason said. */
static int pump_input(struct pipe_end *pe, struct input *in, struct outcome *o)
{
	int trc = 0;
	bool eof = false;
	ssize_t n;

	if (in->direct) {
		n = send_stream_direct(pe, &trc);
		if (n == -1)
			goto failed;
		if (n == -3)
			return 0;
		eof = n == 0;
	} else {
		n = read(STDIN_FILENO, in->buf + in->have, IN_CHUNK);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				return 0;
			fprintf(stderr, "mkshmcon: reading stdin: %s\n", strerror(errno));
			goto failed;
		} else if (n == 0) {
			eof = true;
		} else if (!pe->message) {
			trc = send_stream(pe, in->buf, (size_t)n);
			if (trc == 0)
				pe->in_bytes += (uint64_t)n;
		} else {
			ssize_t used;

			in->have += (size_t)n;
			used = send_records(pe, in->buf, in->have);
			if (used < 0) {
				trc = (int)used;
			} else {
				memmove(in->buf, in->buf + used, in->have - (size_t)used);
				in->have -= (size_t)used;
				pe->in_bytes += (uint64_t)used;
			}
		}
	}
	if (eof) {
		if (in->have) {
			fprintf(stderr, "mkshmcon: connection '%s': input ends inside a record (%zu "
				"bytes left over after %" PRIu64 " bytes of whole records)\n", pe->name,
				in->have, pe->in_bytes);
			goto failed;
		}
		o->input_open = false;
		return 0;
	}
	if (trc == -EMSGSIZE)
		goto failed;	/* send_records said why */
	if (trc == -ENOBUFS) {
		fprintf(stderr, "mkshmcon: connection '%s' reset: deferred queue overflow"
			" (the peer did not keep up; see create -d) (%" PRIu64 " bytes sent, %"
			PRIu64 " received)\n", pe->name, pe->in_bytes, atomic_load(&pe->out_bytes));
		goto failed;
	}
	if (trc < 0 && trc != -ENOTCONN) {
		fprintf(stderr, "mkshmcon: sending: %s\n", strerror(-trc));
		goto failed;
	}
	if (trc == -ENOTCONN)
		in->tx_gone = true;
	return 0;
failed:
	o->failed = true;
	return -1;
}

/* The connection's life, until it goes down, both directions are done,
 * the linger time runs out, a signal or a failure: our end of data (CON_FIN)
 * once connected and the input ended, the peer's reading of it, and input
 * pumped in as the mailbox takes it. */
static void run_connection(struct pipe_end *pe, const struct connect_opts *co,
			   struct input *in, struct outcome *o, enum fin_state *fin)
{
	struct pollfd pfd[2] = {
		{ .fd = pe->wake_efd, .events = POLLIN },
		{ .fd = STDIN_FILENO, .events = POLLIN },
	};
	bool was_up = false;
	uint64_t deadline = co->wait_ns ? xtime_ns() + co->wait_ns : 0;
	uint64_t tx_done_at = 0, nap = 0;

	for (;;) {
		bool up = atomic_load(&pe->up);
		struct timespec ts, *tsp = NULL;
		uint64_t now;
		int nfd;

		if (atomic_load(&pe->down) || atomic_load(&pe->out_err) || atomic_load(&pe->sig))
			return;
		if (up && !was_up) {
			was_up = true;
			pe->legacy_peer = !shmcm_peer_has_fin(pe->c);
			xlog(XLOG_INFO, "connected%s", pe->legacy_peer ?
			     " (the peer predates half-close: our end of input will close the connection)" : "");
		}
		/* End of our data: CON_FIN once connected, after all of it. */
		if (up && !o->input_open && *fin == FIN_NONE) {
			int src = shmcm_shutdown(pe->c);

			if (src == 0)
				*fin = FIN_SENT;
			else if (src == -EOPNOTSUPP)
				*fin = FIN_LEGACY;
			else
				continue;	/* going down: the next round sees it */
			nap = 20000;
		}
		now = xtime_ns();
		if (*fin != FIN_NONE && !o->tx_done && shmcm_drained(pe->c)) {
			o->tx_done = true;
			tx_done_at = now;
			xlog(XLOG_INFO, "the peer has all our data (%" PRIu64 " bytes)", pe->in_bytes);
		}
		if (atomic_load(&pe->peer_eof))
			o->rx_done = true;
		/* The peer that predates CON_FIN learns of our end of data
		 * the old way, by our close. */
		if (o->tx_done && (o->rx_done || co->dir == DIR_SEND_ONLY || *fin == FIN_LEGACY)) {
			if (*fin == FIN_LEGACY)
				o->rx_done = true;
			return;
		}
		if (o->tx_done && co->linger && now - tx_done_at >= co->linger_ns) {
			o->linger_out = true;
			return;
		}
		if (!up && deadline) {
			if (now >= deadline) {
				fprintf(stderr, "mkshmcon: connection '%s': no peer on side %s within the wait timeout\n",
					pe->name, co->p.side ? "a" : "b");
				o->failed = true;
				return;
			}
			tsp = &ts;
			ns_to_timeout(deadline - now, tsp);
		} else if (*fin != FIN_NONE && !o->tx_done) {
			/* the peer reading our last packets is not signalled:
			 * look again soon, then less often */
			tsp = &ts;
			ns_to_timeout(nap, tsp);
			if (nap < 2000000)
				nap *= 2;
		} else if (o->tx_done && co->linger) {
			tsp = &ts;
			ns_to_timeout(tx_done_at + co->linger_ns - now, tsp);
		}
		nfd = up && o->input_open && !in->tx_gone ? 2 : 1;
		if (ppoll(pfd, (nfds_t)nfd, tsp, NULL) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "mkshmcon: poll: %s\n", strerror(errno));
			o->failed = true;
			return;
		}
		if (pfd[0].revents) {
			uint64_t v;

			if (read(pe->wake_efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				xlog_warn("eventfd: %m");
		}
		if (nfd == 2 && pfd[1].revents && pump_input(pe, in, o) < 0)
			return;
	}
}

/* After the loop: what a reset found done -- everything before the peer's
 * CON_RST was handled, and the peer read our packets before it reset. */
static void settle(struct pipe_end *pe, struct outcome *o, enum fin_state fin)
{
	o->was_up = atomic_load(&pe->up);
	if (atomic_load(&pe->peer_eof))
		o->rx_done = true;
	if (fin != FIN_NONE && !o->tx_done &&
	    (shmcm_drained(pe->c) ||
	     /* a peer that closed cleanly had our CON_FIN, hence all before it */
	     (fin == FIN_SENT && atomic_load(&pe->down) &&
	      shmcm_get_peer_reason(pe->c) == SHMCM_R_CLOSED))) {
		o->tx_done = true;
		xlog(XLOG_INFO, "the peer has all our data (%" PRIu64 " bytes)", pe->in_bytes);
	}
	/* A peer that predates CON_FIN closes after its end of input, the
	 * only end of data it can say. */
	if (pe->legacy_peer && atomic_load(&pe->reason) == SHMCM_R_PEER_RST &&
	    shmcm_get_peer_reason(pe->c) == SHMCM_R_LOCAL)
		o->rx_done = true;
}

int cmd_connect(int argc, char **argv)
{
	struct pipe_end pe = { .wake_efd = -1, .out_fd = STDOUT_FILENO, .abort_efd = -1,
			       .sfd = -1, .quit_efd = -1 };
	struct connect_opts co = {
		.p = { .side = -1, .flow = SHMCM_FLOW_WAIT, .max_msg = MAX_MSG },
		.dir = DIR_BOTH,
	};
	struct shmcm_upcalls uc = { on_connected, on_disconnected, on_deliver, &pe, NULL, on_eof };
	enum fin_state fin = FIN_NONE;
	struct outcome o = { .input_open = true };
	struct input in = { 0 };
	pthread_t sig_tid;
	bool sig_started = false;
	char err[256];
	int rc = connect_args(argc, argv, &co, &pe);
	sigset_t mask;

	if (rc >= 0)
		return rc;
	rc = EXIT_FAIL;
	/* Signals arrive through a signalfd, read by a thread of their own
	 * (every thread, the library's too, has them blocked). */
	signal(SIGPIPE, SIG_IGN);
	/* a blocked signal is queued even while ignored (the kernel's
	 * sig_ignored()), so an ignored SIGHUP must stay out of the mask,
	 * or nohup would not keep us connected */
	cli_stop_signals(&mask);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	pe.sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	pe.wake_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pe.abort_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pe.quit_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	/* a record (-M) may straddle reads; an end that sends nothing reads
	 * no input */
	if (co.dir != DIR_RECV_ONLY)
		in.buf = malloc(pe.message ? IN_CHUNK + MAX_MSG + 4 : IN_CHUNK);
	if (pe.sfd < 0 || pe.wake_efd < 0 || pe.abort_efd < 0 || pe.quit_efd < 0 ||
	    (co.dir != DIR_RECV_ONLY && !in.buf)) {
		fprintf(stderr, "mkshmcon: setup: %s\n", strerror(errno));
		goto out;
	}

	grow_pipe(STDIN_FILENO);
	grow_pipe(STDOUT_FILENO);
	pe.out_fd = open_out();
	{
		struct stat st;

		pe.out_sock = fstat(pe.out_fd, &st) == 0 && S_ISSOCK(st.st_mode);
	}
	pe.c = shmcm_open(&co.p, &uc, err, sizeof(err));
	if (!pe.c) {
		fprintf(stderr, "mkshmcon: %s\n", err);
		goto out;
	}
	if ((errno = pthread_create(&sig_tid, NULL, signal_thread, &pe)) != 0) {
		fprintf(stderr, "mkshmcon: cannot start the signal thread: %s\n", strerror(errno));
		goto out_close;
	}
	sig_started = true;
	xlog(XLOG_INFO, "side %s of '%s' attached, connecting", co.p.side ? "b" : "a", pe.name);
	shmcm_connect(pe.c);

	in.direct = !pe.message && co.p.flow == SHMCM_FLOW_WAIT;
	if (co.dir == DIR_RECV_ONLY)
		o.input_open = false;
	run_connection(&pe, &co, &in, &o, &fin);
	settle(&pe, &o, fin);
	rc = exit_status(&pe, &o, co.dir);
out_close:
	if (sig_started) {
		uint64_t one = 1;

		if (write(pe.quit_efd, &one, sizeof(one)) < 0)
			xlog_warn("eventfd: %m");
		pthread_join(sig_tid, NULL);
	}
	/* close sends CON_RST when still connected */
	shmcm_close(pe.c);
out:
	free(in.buf);
	if (pe.out_fd > STDOUT_FILENO)
		close(pe.out_fd);
	int fds[] = { pe.sfd, pe.wake_efd, pe.abort_efd, pe.quit_efd };
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return rc;
}
