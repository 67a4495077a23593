#ifndef RTRS_CLIENT_CMD_H
#define RTRS_CLIENT_CMD_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/cli.h"	/* EXIT_OK, EXIT_FAIL, EXIT_USAGE */
#include "core/ctl.h"
#include "core/emit.h"
#include "core/uri.h"
#include "rnbd/rnbd_clt.h"
#include "rtrs/rtrs_clt.h"
#include "rtrs/rtrs_wire.h"

#define PROG "rtrs-client"
#define MAX_PATHS 128
/* --down-timeout by default: IO gives up after a minute with every path down */
#define SESS_DOWN_TIMEOUT_NS (60ull * 1000000000ull)

int cmd_read(int argc, char **argv);
int cmd_write(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_path(int argc, char **argv);
int cmd_set(int argc, char **argv);
int cmd_reset_stats(int argc, char **argv);
int cmd_nbd(int argc, char **argv);
int cmd_map(int argc, char **argv);
int cmd_unmap(int argc, char **argv);
int cmd_list_mapped(int argc, char **argv);

#define usage_error(cmd, ...) cli_usage_error(PROG, (cmd), __VA_ARGS__)
/* getopt's '?': one line naming the unknown option or the one missing its
 * value (long options included); EXIT_USAGE. */
int bad_option(const char *cmd, const char *optstring, char **argv);
void cmd_usage(FILE *f, const char *name);
/* "rtrs-client CMD: msg" on stderr; EXIT_FAIL. */
#define fail(cmd, ...) cli_fail(PROG, (cmd), __VA_ARGS__)

/* --- what every session command shares (sess.c) ---------------------- */

struct sess_opts {
	const char *session;		/* -s */
	struct xuri paths[MAX_PATHS];	/* -p, repeatable */
	unsigned npaths;
	const char *device;		/* -d */
	const char *config;		/* -c */
	const char *ctl;		/* --ctl */
	struct rtrs_clt_opts ro;
	enum rnbd_access_mode access;	/* --access */
	bool access_set, policy_set, delay_set, attempts_set, conns_set, hbi_set, hbm_set;
	bool timeout_set, down_set;
	char session_buf[RTRS_NAME_MAX + 1];	/* names taken from the config */
	char device_buf[RNBD_NAME_MAX + 1];
	bool quiet, progress, progress_set, verbose;
	/* a read-only export is opened read-only when --access was not
	 * given (nbd and map serve it read-only, as rbd-nbd a snapshot) */
	bool ro_fallback;
};

/* getopt_long codes of the shared long options (above the ASCII range) */
enum {
	OPT_POLICY = 0x100, OPT_RECONNECT_DELAY, OPT_MAX_RECONNECT, OPT_CONNECTIONS,
	OPT_HB_INTERVAL, OPT_HB_MISSED, OPT_ACCESS, OPT_CTL, OPT_TIMEOUT, OPT_PROGRESS,
	OPT_OFFSET, OPT_LENGTH, OPT_RW, OPT_BS, OPT_IODEPTH, OPT_TIME, OPT_VERIFY, OPT_SIZE,
	OPT_RWMIX, OPT_DOWN_TIMEOUT,
};
/* The shared short options and long options, to splice into each command's. */
#define SESS_SHORTOPTS "s:p:d:c:qv"
#define SESS_LONGOPTS \
	{ "session", required_argument, NULL, 's' }, \
	{ "path", required_argument, NULL, 'p' }, \
	{ "device", required_argument, NULL, 'd' }, \
	{ "config", required_argument, NULL, 'c' }, \
	{ "quiet", no_argument, NULL, 'q' }, \
	{ "verbose", no_argument, NULL, 'v' }, \
	{ "policy", required_argument, NULL, OPT_POLICY }, \
	{ "reconnect-delay", required_argument, NULL, OPT_RECONNECT_DELAY }, \
	{ "max-reconnect-attempts", required_argument, NULL, OPT_MAX_RECONNECT }, \
	{ "connections", required_argument, NULL, OPT_CONNECTIONS }, \
	{ "hb-interval", required_argument, NULL, OPT_HB_INTERVAL }, \
	{ "hb-missed", required_argument, NULL, OPT_HB_MISSED }, \
	{ "access", required_argument, NULL, OPT_ACCESS }, \
	{ "ctl", required_argument, NULL, OPT_CTL }, \
	{ "timeout", required_argument, NULL, OPT_TIMEOUT }, \
	{ "down-timeout", required_argument, NULL, OPT_DOWN_TIMEOUT }, \
	{ "progress", no_argument, NULL, OPT_PROGRESS }

void sess_opts_init(struct sess_opts *o);
/* One getopt result: 1 handled, 0 not a shared option, or EXIT_USAGE. */
int sess_opt(const char *cmd, int c, const char *arg, struct sess_opts *o);
/* After getopt: the config file, then the checks (-s, -p, -d present).
 * need_device: -d is required.  EXIT_OK or EXIT_USAGE. */
int sess_opts_finish(const char *cmd, struct sess_opts *o, bool need_device);

/* A running session: the RTRS session, the device, the control socket,
 * and the loop that drives them. */
#define SESS_PATHS_SAID 64	/* paths whose failures are said one by one */

struct sess {
	const char *cmd;
	struct sess_opts *o;
	struct rtrs_clt *clt;
	struct rnbd_clt_dev *dev;
	struct xctl *ctl;
	int epfd;
	uint64_t ctl_ns;		/* when the control socket was looked at */
	/* sess_close() waits for the device's IO and CLOSE until then (0:
	 * 5 s from its call) */
	uint64_t close_by;
	/* what `status` shows of the command's own progress */
	const char *activity;
	uint64_t done_bytes, total_bytes;
	/* the command's own fds in the loop (registered on epfd with any
	 * data.u64 but the SESS_TAG_ values): sess_run() hands their events
	 * to on_fd, in busy rounds too */
	void (*on_fd)(void *ctx, uint64_t tag, uint32_t events);
	void *on_fd_ctx;
	void (*status_extra)(void *ctx, struct xnode *m);	/* more for `status` */
	/* a device the server refused to open again after a reconnect:
	 * the error said (0 none), when it was last tried (dev_notices) */
	int reopen_said;
	uint64_t reopen_ns;
	/* each path's state when last looked at (path_notices) */
	uint8_t path_st[SESS_PATHS_SAID];
	unsigned npaths_said;
};
#define SESS_TAG_CLT 0		/* the session's fd */
#define SESS_TAG_CTL 1		/* the control socket */
#define SESS_TAG_STDIO 2	/* read/write: stdin or stdout waited on */

/* Opens the session, the device and the control socket.  EXIT_OK, or
 * EXIT_FAIL (printed: "all paths to SESSION are down: ...", "device NAME:
 * no such export", ...). */
int sess_open(struct sess *ss, const char *cmd, struct sess_opts *o);
/* Closes the device (CLOSE), the session and the control socket. */
void sess_close(struct sess *ss);
/* One round of the loop: progress; when there was none, a sleep of at
 * most max_wait_ns (or until the session or the control socket wakes it).
 * Returns -EINTR when a signal came. */
int sess_run(struct sess *ss, uint64_t max_wait_ns);
/* Registers a buffer for IO.  EXIT_OK or EXIT_FAIL (printed). */
int sess_add_mem(struct sess *ss, void *buf, size_t len);
/* The one line for an IO error: "all paths to S are down" for -ENOTCONN. */
const char *sess_strerror(const struct sess *ss, int err, char *buf, size_t len);

/* Progress on stderr: a terminal (or --progress), unless -q. */
bool want_progress(const struct sess_opts *o);

/* --- the NBD serving core (nbd.c): nbd's listeners, map's sockets ------- */

struct nbdx;
struct nbd_export;
/* Serves ss's device: the export (size, flags, block sizes from the
 * device), a data arena registered with the session, the hooks into
 * sess_run().  NULL (printed). */
struct nbdx *nbdx_open(struct sess *ss);
/* A client's replies unread this long, while others wait for buffers,
 * close its connection (0: never); NBDX_UNREAD_NS by default. */
#define NBDX_UNREAD_NS (30 * 1000000000ull)
void nbdx_set_unread_timeout(struct nbdx *x, uint64_t ns);
const struct nbd_export *nbdx_export(const struct nbdx *x);
/* Listens on tcp (a tcp:// URI) or else the unix socket path.  EXIT_OK
 * or EXIT_FAIL (printed). */
int nbdx_listen(struct nbdx *x, const struct xuri *tcp, const char *path);
/* The i-th listener's NBD URI; NULL past the last. */
const char *nbdx_uri(const struct nbdx *x, unsigned i);
/* Serves a connected socket in the transmission phase (no handshake: the
 * kernel's nbd driver, handed the other end).  0 or -errno. */
int nbdx_adopt(struct nbdx *x, int fd, const char *peer);
unsigned nbdx_nconns(const struct nbdx *x);
/* After each sess_run(): replies out, waiting connections on. */
void nbdx_after_round(struct nbdx *x);
/* Closes listeners and connections (what was asked answered, what comes
 * meanwhile answered ESHUTDOWN), lets what is at the server come back
 * (5 s at most), frees x.  Before sess_close().  Returns how many
 * requests got no answer (each connection's said on stderr). */
unsigned nbdx_close(struct nbdx *x);

/* --- the ublk serving core (ublk.c): map --ublk -------------------------- */

struct ublkx;
/* Adds a ublk device for ss's device (want_id, or the first free id when
 * negative), serves its queue from ss's loop and starts it: once this
 * returns, /dev/ublkbN exists.  NULL with the reason in err. */
struct ublkx *ublkx_open(struct sess *ss, int want_id, char *err, size_t errlen);
unsigned ublkx_id(const struct ublkx *x);
/* After each sess_run(): completions in, commits out. */
void ublkx_after_round(struct ublkx *x);
/* Asks the driver to stop the device (it removes the disk once its IO is
 * done, which we go on serving).  0 or -errno. */
int ublkx_stop(struct ublkx *x);
/* Until the device stops (ours or anyone's STOP_DEV, or the driver's
 * abort): the queue still has requests to take. */
bool ublkx_running(const struct ublkx *x);
/* Stops the device if not yet, serves until it has (30 s at most; a
 * stop signal cuts it short) and deletes it.  Before sess_close(), which
 * completes what is still at the server; ublkx_free() after it.  0, or
 * -1 with what went wrong in err (requests abandoned, a command the
 * driver failed). */
int ublkx_close(struct ublkx *x, char *err, size_t errlen);
/* Frees x after sess_close() (left alone if requests are somehow still
 * at the server: the process is ending). */
void ublkx_free(struct ublkx *x);
/* /dev/ublk-control opened (an fd), or -1 with the reason in err. */
int ublkx_probe(char *err, size_t errlen);
/* The process serving ublk device id (GET_DEV_INFO): its pid, 0 when the
 * device is not live, or -errno (no driver, no permission, no device). */
int ublkx_server_pid(unsigned id);
/* Deletes ublk device id if nobody serves it (its server was killed: the
 * driver removed the disk, the char device and the id stay until then).
 * 0, or -1 with the reason in err. */
int ublkx_delete_dead(unsigned id, char *err, size_t errlen);

/* Status of a running session as a tree (ctl.c). */
struct xnode *sess_status_node(const struct sess *ss);
/* One map per path of the session, appended to the list `paths`. */
void sess_paths_node(const struct sess *ss, struct xnode *paths);
/* The control socket's commands (ctl.c). */
int sess_ctl_handler(void *ctx, int argc, char **argv, FILE *out);
int ctl_path_for(const char *session, const char *ctl, char *buf, size_t len);


#endif
