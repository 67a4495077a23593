#ifndef RTRS_SERVER_CMD_H
#define RTRS_SERVER_CMD_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/cli.h"	/* EXIT_OK, EXIT_FAIL, EXIT_USAGE */
#include "core/emit.h"
#include "core/uri.h"
#include "rnbd/rnbd_srv.h"
#include "rnbd/rnbd_wire.h"
#include "rtrs/rtrs_srv.h"
#include "rtrs/rtrs_wire.h"

#define PROG "rtrs-server"
#define MAX_LISTEN	16
#define MAX_IO_THREADS	256
#define DEFAULT_IO_THREADS	4	/* requests that would block run here; see rnbd_srv.h */
#define MAX_ALLOW	64
#define CTL_NAME	"rtrs-server"

int cmd_serve(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_disconnect(int argc, char **argv);
int cmd_force_close(int argc, char **argv);

/* "rtrs-server [CMD]: msg" to stderr (the usage hint with a command);
 * EXIT_USAGE.  cmd NULL for the implicit serve. */
#define usage_error(cmd, ...) cli_usage_error(PROG, (cmd), __VA_ARGS__)
/* getopt_long's '?' as one line.  cli_bad_option() names a long option
 * that lacks its value by its val, which for long-only options (val >=
 * 256) is no character: those are named here by what the user typed. */
int bad_option(const char *cmd, const char *optstring, char **argv);
void cmd_usage(FILE *f, const char *name);
/* "rtrs-server: msg" to stderr; EXIT_FAIL. */
#define fail(...) cli_fail(PROG, NULL, __VA_ARGS__)

/* --- what serve runs with: command line and config file together ------ */

struct allow_ent {
	bool addr;			/* an address (prefix), else a session name */
	int af;
	uint8_t a[16];
	unsigned prefix;
	char name[256];
};

struct export_spec {
	char name[256];
	char path[4096];
	bool ro;
};

struct srv_conf {
	struct xuri listen[MAX_LISTEN];
	unsigned nlisten;
	bool listen_default;		/* none given: [::], or 0.0.0.0 without IPv6 */
	struct export_spec *exports;
	unsigned nexports;
	struct allow_ent allow[MAX_ALLOW];
	unsigned nallow;
	uint32_t queue_depth, chunk_size, hb_interval_ms, hb_missed;
	int always_invalidate;		/* -1 unset */
	int io_threads;			/* -1 unset */
	char ctl[108];
	char search[4096];		/* --dev-search-path, "" none */
	bool verbose;
};

/* Each returns EXIT_OK or prints one line and returns EXIT_USAGE
 * (`what` names the option or the config key). */
int conf_add_listen(struct srv_conf *c, const char *cmd, const char *what, const char *arg);
int conf_add_export(struct srv_conf *c, const char *cmd, const char *what, const char *spec);
int conf_add_allow(struct srv_conf *c, const char *cmd, const char *what, const char *arg);
/* Reads a YAML config into c (lists are appended to, scalars set).
 * EXIT_OK, EXIT_USAGE (bad content, one line naming file, line, key) or
 * EXIT_FAIL (unreadable). */
int conf_load(struct srv_conf *c, const char *cmd, const char *path);
/* The allow hook of rtrs_srv_opts, ctx = the srv_conf. */
int conf_allow(void *ctx, const char *peer, const char *sessname);

/* The status answer of a running server (the control socket's "status"). */
struct xnode *status_node(struct rtrs_srv *srv, struct rnbd_srv *r, const struct srv_conf *c);

#endif
