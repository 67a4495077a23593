#ifndef MKSHMCON_CMD_H
#define MKSHMCON_CMD_H

#include <stdio.h>

/* Exit status of every xprt tool. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

struct cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *args;
	const char *help;
};

int cmd_create(int argc, char **argv);
int cmd_connect(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_rm(int argc, char **argv);

/* Prints "mkshmcon CMD: msg" to stderr and returns EXIT_USAGE. */
int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cmd_usage(FILE *f, const char *name);
/* "shmcm/NAME" (LINX's DB key form) is accepted wherever NAME is. */
const char *strip_db_prefix(const char *name);
/* getopt's '?': one line naming the option, EXIT_USAGE. */
int bad_option(const char *cmd, const char *optstring, char **argv);
/* An invalid connection name is a usage error. */
int check_name(const char *name);

#endif
