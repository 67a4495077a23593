/* rtrs-server -- export files and block devices over RTRS/RNBD, the Linux
 * kernel's rnbd-server protocol, over rdma:// and tcp://. */
#include "cmd.h"
#include "core/log.h"

#include <stdarg.h>
#include <getopt.h>
#include <string.h>

static const struct cmd cmds[] = {
	{ "serve",  cmd_serve,
	  "[-l URI]... [-e NAME=PATH[:ro]]... [-c CONFIG.yaml] [--queue-depth N]\n"
	  "                     [--chunk-size SIZE] [--always-invalidate on|off] [--allow ADDR|SESSION]...\n"
	  "                     [--hb-interval MS] [--hb-missed N] [--io-threads N]\n"
	  "                     [--dev-search-path DIR] [--ctl PATH] [-v]",
	  "export files and block devices until SIGINT/SIGTERM/SIGHUP (the default command)" },
	{ "status", cmd_status, "[--ctl PATH] [-o text|yaml|json]",
	  "sessions, paths, counters and exports of a running server" },
	{ "disconnect", cmd_disconnect, "SESSION [PATH] [--ctl PATH]",
	  "close a session's paths, or one (its number or ADDR:PORT); the client reconnects" },
	{ "force-close", cmd_force_close, "SESSION DEVICE [--ctl PATH]",
	  "close a device (export name or id) a session has open" },
};

static const struct cli_tool tool = {
	PROG, cmds, sizeof(cmds) / sizeof(cmds[0]), 6, 18,
	"\nWithout a command, the options are serve's: rtrs-server -e disk=/dev/ram0.\n"
	"URI: rdma://HOST[:PORT] tcp://HOST[:PORT] or HOST[:PORT] (auto); port 1234.\n"
	"See rtrs-server(8).\n",
	"RTRS 2.0, RNBD 2",
};

void cmd_usage(FILE *f, const char *name)
{
	cli_usage(&tool, f, name);
}

int bad_option(const char *cmd, const char *optstring, char **argv)
{
	const char *arg = argv[optind - 1];

	if (optopt && !strncmp(arg, "--", 2))
		return usage_error(cmd, strchr(arg, '=') ? "option '%s' takes no value" :
				   "option '%s' needs a value", arg);
	return cli_bad_option(PROG, cmd, optstring, argv);
}

int main(int argc, char **argv)
{
	xlog_init(PROG);
	cli_raise_nofile();
	if (argc == 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")))
		return cli_version(PROG, tool.protocols);
	/* serve is the default: options straight after the program name */
	if (argc >= 2 && argv[1][0] == '-' && strcmp(argv[1], "-h") && strcmp(argv[1], "--help"))
		return cmd_serve(argc, argv);
	return cli_main(&tool, argc, argv);
}
