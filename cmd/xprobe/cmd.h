#ifndef XPROBE_CMD_H
#define XPROBE_CMD_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/emit.h"
#include "core/uri.h"
#include "port/port.h"

#include "core/cli.h"	/* EXIT_OK, EXIT_FAIL, EXIT_USAGE */

/* The default port of xprobe serve when a URI names none. */
#define XPROBE_DEFAULT_PORT 7471


int cmd_devices(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_ping(int argc, char **argv);
int cmd_bw(int argc, char **argv);

/* Prints "xprobe CMD: msg" to stderr and returns EXIT_USAGE. */
#define usage_error(cmd, ...) cli_usage_error("xprobe", (cmd), __VA_ARGS__)
void cmd_usage(FILE *f, const char *name);
/* getopt's '?': one line naming the option, EXIT_USAGE. */
#define bad_option(cmd, optstring, argv) cli_bad_option("xprobe", (cmd), (optstring), (argv))
/* Prints "xprobe CMD: msg" to stderr; returns EXIT_FAIL. */
#define fail(cmd, ...) cli_fail("xprobe", (cmd), __VA_ARGS__)

/* Parses a URI argument; AUTO is resolved (datagram: ud/udp), and with
 * verbose the choice is printed on stderr.  EXIT_OK or EXIT_USAGE. */
int parse_target(const char *cmd, const char *arg, bool verbose, struct xuri *u);
int parse_prio(const char *cmd, const char *arg, enum xp_prio *p);


static inline bool is_datagram(const struct xuri *u)
{
	return u->scheme == XURI_UDP || u->scheme == XURI_UD;
}

#endif
