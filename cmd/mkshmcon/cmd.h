#ifndef MKSHMCON_CMD_H
#define MKSHMCON_CMD_H

#include <stdio.h>

#include "core/cli.h"	/* EXIT_OK, EXIT_FAIL, EXIT_USAGE */


int cmd_create(int argc, char **argv);
int cmd_connect(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_rm(int argc, char **argv);

/* Prints "mkshmcon CMD: msg" to stderr and returns EXIT_USAGE. */
#define usage_error(cmd, ...) cli_usage_error("mkshmcon", (cmd), __VA_ARGS__)
void cmd_usage(FILE *f, const char *name);
/* "shmcm/NAME" (LINX's DB key form) is accepted wherever NAME is. */
const char *strip_db_prefix(const char *name);
/* getopt's '?': one line naming the option, EXIT_USAGE. */
#define bad_option(cmd, optstring, argv) cli_bad_option("mkshmcon", (cmd), (optstring), (argv))
/* An invalid connection name is a usage error. */
int check_name(const char *name);

#endif
