/* mkshmcon — create, connect, inspect and remove SHMCM connections. */
#include "cmd.h"
#include "core/log.h"
#include "xprt/mbox.h"

#include <getopt.h>

#include <libgen.h>
#include <string.h>

static const struct cmd cmds[] = {
	{ "create",  cmd_create,  "NAME [-n SLOTS] [-m MTU] [-t CON_TMO] [-d DEFQ_MAX] [-q]",
	  "create a connection (a shared-memory mailbox)" },
	{ "connect", cmd_connect, "NAME -x a|b [-M] [-d] [--flow wait|defer] [--no-cma] [-w TIMEOUT] [-v]",
	  "connect one side: stdin goes to the peer, the peer's data to stdout" },
	{ "status",  cmd_status,  "[NAME] [-o text|yaml|json]",
	  "show connection state and counters" },
	{ "list",    cmd_list,    "[-o text|yaml|json]",
	  "list connections" },
	{ "rm",      cmd_rm,      "NAME... [-f]",
	  "remove connections (also installed as rmshmcon)" },
};

void cmd_usage(FILE *f, const char *name)
{
	fprintf(f, "usage: mkshmcon COMMAND [ARGS]\n\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (name && strcmp(name, cmds[i].name) != 0)
			continue;
		fprintf(f, "  mkshmcon %-8s %s\n  %10s %s\n", cmds[i].name, cmds[i].args, "",
			cmds[i].help);
	}
	if (!name)
		fprintf(f, "\nSee mkshmcon(8).\n");
}

int check_name(const char *name)
{
	char err[256];

	if (mbox_check_name(name, err, sizeof(err)) == 0)
		return 0;
	fprintf(stderr, "mkshmcon: %s\n", err);
	return EXIT_USAGE;
}

const char *strip_db_prefix(const char *name)
{
	return strncmp(name, "shmcm/", 6) == 0 ? name + 6 : name;
}

int main(int argc, char **argv)
{
	const char *prog = basename(argv[0]);

	if (strcmp(prog, "rmshmcon") == 0) {
		xlog_init("rmshmcon");
		opterr = 0;
		return cmd_rm(argc, argv);
	}
	xlog_init("mkshmcon");
	opterr = 0;	/* one line of our own instead of getopt's */
	if (argc < 2) {
		cmd_usage(stderr, NULL);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		cmd_usage(stdout, NULL);
		return EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (strcmp(argv[1], cmds[i].name) == 0)
			return cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "mkshmcon: unknown command '%s'\n", argv[1]);
	cmd_usage(stderr, NULL);
	return EXIT_USAGE;
}
