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
	{ "connect", cmd_connect, "NAME -x a|b [-M] [-d|--send-only] [-l LINGER] [--flow wait|defer] [--no-cma] [-w TIMEOUT] [-v]",
	  "connect one side: stdin goes to the peer, the peer's data to stdout, both at once" },
	{ "status",  cmd_status,  "[NAME] [-o text|yaml|json]",
	  "show connection state and counters" },
	{ "list",    cmd_list,    "[-o text|yaml|json]",
	  "list connections" },
	{ "rm",      cmd_rm,      "NAME... [-f]",
	  "remove connections (also installed as rmshmcon)" },
};

static const struct cli_tool tool = {
	"mkshmcon", cmds, sizeof(cmds) / sizeof(cmds[0]), 8, 10, "\nSee mkshmcon(8).\n",
	"SHMCM over mailbox version 1, with CON_FIN",
};

void cmd_usage(FILE *f, const char *name)
{
	cli_usage(&tool, f, name);
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
		if (argc == 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")))
			return cli_version("rmshmcon", tool.protocols);
		opterr = 0;
		return cmd_rm(argc, argv);
	}
	xlog_init("mkshmcon");
	return cli_main(&tool, argc, argv);
}
