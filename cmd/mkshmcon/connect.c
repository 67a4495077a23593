/* mkshmcon connect: one end of a connection as a pipe.  stdin is sent to
 * the peer, what the peer sends is written to stdout.  End of input drains
 * (waits until the peer has read everything) and then closes the
 * connection with CON_RST; the peer writes out what it got and exits 0. */
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
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define IN_CHUNK	(256u << 10)
#define MAX_MSG		(64u << 20)

struct pipe_end {
	struct shmcm_conn *c;
	const char *name;
	bool message, verbose;
	int wake_efd;		/* up-calls and the signal thread -> main */
	int out_fd;		/* stdout, or a non-blocking reopening of it */
	int abort_efd;		/* a signal: stop waiting on stdout */
	int sfd, quit_efd;	/* the signal thread's signalfd; main -> it */
	_Atomic int sig;
	_Atomic bool up, down;
	_Atomic int reason;
	_Atomic int out_err;
};

static void wake(struct pipe_end *pe)
{
	uint64_t one = 1;

	if (write(pe->wake_efd, &one, sizeof(one)) < 0)
		xlog_ratelimited(XLOG_WARN, "eventfd: %m");
}

/* Writes everything, or fails.  On a non-blocking stdout it waits in
 * poll() so that a signal (abort_efd) can cut a stalled write short
 * without the deliver up-call holding the connection hostage. */
static int write_all(struct pipe_end *pe, struct iovec *iov, int cnt)
{
	while (cnt > 0) {
		ssize_t n = writev(pe->out_fd, iov, cnt);

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
		atomic_store(&pe->out_err, -rc);
		shmcm_disconnect(pe->c);
		wake(pe);
	}
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
			fprintf(stderr, "mkshmcon: input record of %u bytes exceeds the %u byte message limit\n",
				len, MAX_MSG);
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

static bool stdin_is_devnull(void)
{
	struct stat a, b;

	return fstat(STDIN_FILENO, &a) == 0 && stat("/dev/null", &b) == 0 &&
	       S_ISCHR(a.st_mode) && a.st_rdev == b.st_rdev;
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

/* SIGINT, SIGTERM and SIGHUP: whatever main is waiting on (stdin, room in
 * the mailbox, a stalled stdout in the deliver up-call), stop it and close
 * the connection. */
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
	default: return shmcm_reason_str(r);
	}
}

static int exit_status(struct pipe_end *pe, int sig)
{
	enum shmcm_reason r = (enum shmcm_reason)atomic_load(&pe->reason);
	int oe = atomic_load(&pe->out_err);

	if (sig)
		return 128 + sig;
	if (oe == EPIPE)
		return 128 + SIGPIPE;
	if (oe) {
		fprintf(stderr, "mkshmcon: writing to stdout: %s\n", strerror(oe));
		return EXIT_FAIL;
	}
	if (r == SHMCM_R_PEER_RST) {
		/* The peer says why it reset: its own end of input (or
		 * a signal) is a normal close, anything else is not. */
		enum shmcm_reason pr = shmcm_get_peer_reason(pe->c);

		if (pr == SHMCM_R_NONE || pr == SHMCM_R_LOCAL || pr == SHMCM_R_PEER_RST)
			return EXIT_OK;
		fprintf(stderr, "mkshmcon: connection '%s' reset by the peer: %s\n",
			pe->name, peer_view(pr));
		return EXIT_FAIL;
	}
	if (!atomic_load(&pe->down) || r == SHMCM_R_LOCAL)
		return EXIT_OK;
	fprintf(stderr, "mkshmcon: connection '%s' lost: %s\n", pe->name, shmcm_reason_str(r));
	return EXIT_FAIL;
}

int cmd_connect(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "side",    required_argument, NULL, 'x' },
		{ "message", no_argument,       NULL, 'M' },
		{ "flow",    required_argument, NULL, 'F' },
		{ "wait",    required_argument, NULL, 'w' },
		{ "verbose", no_argument,       NULL, 'v' },
		{ "no-input", no_argument,      NULL, 'd' },
		{ "no-cma",  no_argument,       NULL, 'C' },
		{ "help",    no_argument,       NULL, 'h' },
		{ 0 }
	};
	struct pipe_end pe = { .wake_efd = -1, .out_fd = STDOUT_FILENO, .abort_efd = -1,
			       .sfd = -1, .quit_efd = -1 };
	pthread_t sig_tid;
	bool sig_started = false;
	struct shmcm_params p = { .side = -1, .flow = SHMCM_FLOW_WAIT, .max_msg = MAX_MSG };
	struct shmcm_upcalls uc = { on_connected, on_disconnected, on_deliver, &pe, NULL };
	uint64_t wait_ns = 0;
	bool no_input = false;
	const char *errstr;
	char err[256];
	uint8_t *buf = NULL;
	size_t have = 0;
	int c, rc = EXIT_FAIL;
	sigset_t mask;

	optind = 1;
	while ((c = getopt_long(argc, argv, "x:MF:w:vdh", opts, NULL)) != -1) {
		switch (c) {
		case 'x':
			if (!strcmp(optarg, "a") || !strcmp(optarg, "A"))
				p.side = MBOX_SIDE_A;
			else if (!strcmp(optarg, "b") || !strcmp(optarg, "B"))
				p.side = MBOX_SIDE_B;
			else
				return usage_error("connect", "side '%s' must be a or b", optarg);
			break;
		case 'M':
			pe.message = true;
			break;
		case 'F':
			if (!strcmp(optarg, "wait"))
				p.flow = SHMCM_FLOW_WAIT;
			else if (!strcmp(optarg, "defer"))
				p.flow = SHMCM_FLOW_DEFER;
			else
				return usage_error("connect", "flow '%s' must be wait or defer", optarg);
			break;
		case 'w':
			if (xparse_duration(optarg, 1000000000ull, 1, 365ull * 86400 * 1000000000ull,
					    &wait_ns, &errstr) < 0)
				return usage_error("connect", "wait timeout '%s' %s", optarg, errstr);
			break;
		case 'd':
			no_input = true;
			break;
		case 'C':
			p.no_cma = true;
			break;
		case 'v':
			pe.verbose = true;
			if (xlog_level() < XLOG_INFO)
				xlog_set_level(XLOG_INFO);
			break;
		case 'h':
			cmd_usage(stdout, "connect");
			return EXIT_OK;
		default:
			return bad_option("connect", "x:MF:w:vdh", argv);
		}
	}
	if (optind >= argc)
		return usage_error("connect", "connection name missing");
	if (optind + 1 < argc)
		return usage_error("connect", "unexpected argument '%s'", argv[optind + 1]);
	if (p.side < 0)
		return usage_error("connect", "which side? -x a or -x b");
	pe.name = p.name = strip_db_prefix(argv[optind]);
	if (check_name(p.name))
		return EXIT_USAGE;

	/* Signals arrive through a signalfd, read by a thread of their own
	 * (every thread, the library's too, has them blocked). */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	pe.sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	pe.wake_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pe.abort_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pe.quit_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	buf = malloc(IN_CHUNK + MAX_MSG + 4);
	if (pe.sfd < 0 || pe.wake_efd < 0 || pe.abort_efd < 0 || pe.quit_efd < 0 || !buf) {
		fprintf(stderr, "mkshmcon: setup: %s\n", strerror(errno));
		goto out;
	}

	grow_pipe(STDIN_FILENO);
	grow_pipe(STDOUT_FILENO);
	pe.out_fd = open_out();
	pe.c = shmcm_open(&p, &uc, err, sizeof(err));
	if (!pe.c) {
		fprintf(stderr, "mkshmcon: %s\n", err);
		goto out;
	}
	if ((errno = pthread_create(&sig_tid, NULL, signal_thread, &pe)) != 0) {
		fprintf(stderr, "mkshmcon: cannot start the signal thread: %s\n", strerror(errno));
		goto out_close;
	}
	sig_started = true;
	xlog(XLOG_INFO, "side %s of '%s' attached, connecting", p.side ? "b" : "a", pe.name);
	shmcm_connect(pe.c);

	struct pollfd pfd[2] = {
		{ .fd = pe.wake_efd, .events = POLLIN },
		{ .fd = STDIN_FILENO, .events = POLLIN },
	};
	/* A receive-only end: -d, or stdin redirected from /dev/null, which
	 * means "nothing to send", not "close at once". */
	bool input_open = !no_input && !stdin_is_devnull();
	uint64_t deadline = wait_ns ? xtime_ns() + wait_ns : 0;

	for (;;) {
		bool up = atomic_load(&pe.up);
		int timeout = -1;

		if (atomic_load(&pe.down) || atomic_load(&pe.out_err) || atomic_load(&pe.sig))
			break;
		if (!up && deadline) {
			uint64_t now = xtime_ns();
			if (now >= deadline) {
				fprintf(stderr, "mkshmcon: connection '%s': no peer on side %s within the wait timeout\n",
					pe.name, p.side ? "a" : "b");
				goto out_close;
			}
			timeout = (int)((deadline - now) / 1000000 + 1);
		}
		int nfd = up && input_open ? 2 : 1;
		if (poll(pfd, (nfds_t)nfd, timeout) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "mkshmcon: poll: %s\n", strerror(errno));
			goto out_close;
		}
		if (pfd[0].revents) {
			uint64_t v;
			if (read(pe.wake_efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				xlog_warn("eventfd: %m");
			if (atomic_load(&pe.up) && !up)
				xlog(XLOG_INFO, "connected");
		}
		if (nfd == 2 && pfd[1].revents) {
			ssize_t n = read(STDIN_FILENO, buf + have, IN_CHUNK);
			int trc = 0;

			if (n < 0) {
				if (errno == EINTR || errno == EAGAIN)
					continue;
				fprintf(stderr, "mkshmcon: reading stdin: %s\n", strerror(errno));
				goto out_close;
			}
			if (n == 0) {
				input_open = false;
				if (have) {
					fprintf(stderr, "mkshmcon: input ends inside a record (%zu bytes left over)\n", have);
					goto out_close;
				}
				break;
			}
			if (!pe.message) {
				trc = send_stream(&pe, buf, (size_t)n);
			} else {
				ssize_t used;
				have += (size_t)n;
				used = send_records(&pe, buf, have);
				if (used < 0) {
					trc = (int)used;
				} else {
					memmove(buf, buf + used, have - (size_t)used);
					have -= (size_t)used;
				}
			}
			if (trc == -EMSGSIZE)
				goto out_close;
			if (trc == -ENOBUFS) {
				fprintf(stderr, "mkshmcon: connection '%s' reset: deferred queue overflow"
					" (the peer did not keep up; see create -d)\n", pe.name);
				goto out_close;
			}
			if (trc < 0 && trc != -ENOTCONN) {
				fprintf(stderr, "mkshmcon: sending: %s\n", strerror(-trc));
				goto out_close;
			}
		}
	}

	if (!input_open && !atomic_load(&pe.sig)) {
		/* End of input: wait until the peer has read it all (a signal
		 * disconnects, which ends the wait). */
		while (shmcm_wait_drained(pe.c, 100 * 1000000ull) == -ETIMEDOUT &&
		       !atomic_load(&pe.sig))
			;
	}
	rc = exit_status(&pe, atomic_load(&pe.sig));
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
	free(buf);
	if (pe.out_fd > STDOUT_FILENO)
		close(pe.out_fd);
	int fds[] = { pe.sfd, pe.wake_efd, pe.abort_efd, pe.quit_efd };
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return rc;
}
