#ifndef IBCACHE_SERVE_CMD_H
#define IBCACHE_SERVE_CMD_H

#include <signal.h>
#include <stdio.h>

#include "core/cli.h"
#include "core/emit.h"

#define PROG "ibcache-serve"

int cmd_serve(int argc, char **argv);
int cmd_status(int argc, char **argv);
void usage(FILE *f);

#define usage_error(...) cli_usage_error(PROG, NULL, __VA_ARGS__)
/* "ibcache-serve: msg" on stderr; EXIT_FAIL. */
#define fail(...) cli_fail(PROG, NULL, __VA_ARGS__)

/* The control socket of a server: --ctl PATH, else the default path of
 * "ibcache-serve" or "ibcache-serve-NAME".  0 or -errno. */
int ctl_path(const char *name, const char *ctl, char *buf, size_t len);

#endif
