/* xprobe — discover transports and devices; ping and measure any endpoint
 * over GM-style ports (shm, tcp, rdma), datagrams (udp, ud), or perftest's
 * operations on a bare reliable connection (tcp, rdma: --op). */
#include "cmd.h"
#include "core/log.h"
#include "xprt/xdev.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <string.h>

static const struct cmd cmds[] = {
	{ "devices", cmd_devices, "[-o text|yaml|json]",
	  "list RDMA devices, ports, GIDs, MTUs and the usable transports" },
	{ "serve",   cmd_serve,   "URI... [-v] [--spin DURATION] [--max-mem SIZE] [--max-size SIZE]",
	  "answer pings and bandwidth tests on every URI" },
	{ "ping",    cmd_ping,    "URI [-c COUNT] [-i INTERVAL] [-s SIZE] [-W TIMEOUT] [--prio low|high]\n"
	  "                    [--load SIZE] [--warmup N] [--port N] [--spin DURATION] [-q] [-v]\n"
	  "                    [--op write|read|send [--imm] [--inline SIZE]] [-o text|yaml|json]",
	  "measure round trips" },
	{ "bw",      cmd_bw,      "URI [-s SIZE] [-T SECONDS] [--window TOKENS] [--prio low|high]\n"
	  "                    [--progress] [--spin DURATION] [-q] [-v]\n"
	  "                    [--op write|read|send [--imm] [--inline SIZE]] [-o text|yaml|json]",
	  "measure bandwidth and message rate" },
};

static const struct cli_tool tool = {
	"xprobe", cmds, sizeof(cmds) / sizeof(cmds[0]), 7, 9,
	"\nURI: shm://NAME tcp://HOST:PORT udp://HOST:PORT rdma://HOST:PORT "
	"ud://HOST:PORT or HOST:PORT (auto)\nSee xprobe(1).\n",
	"GM-style ports version 2, xprobe messages version 1",
};

void cmd_usage(FILE *f, const char *name)
{
	cli_usage(&tool, f, name);
}

int parse_target(const char *cmd, const char *arg, bool verbose, struct xuri *u)
{
	char err[256], why[256];

	if (xuri_parse(arg, XPROBE_DEFAULT_PORT, u, err, sizeof(err)) < 0)
		return usage_error(cmd, "%s", err);
	if (u->scheme == XURI_AUTO) {
		xaddr_resolve_auto(u, false, why, sizeof(why));
		if (verbose)
			fprintf(stderr, "xprobe %s: %s: %s\n", cmd, arg, why);
	}
	return EXIT_OK;
}

int parse_prio(const char *cmd, const char *arg, enum xp_prio *p)
{
	if (!strcmp(arg, "low"))
		*p = XP_LOW;
	else if (!strcmp(arg, "high"))
		*p = XP_HIGH;
	else
		return usage_error(cmd, "--prio: '%s' is not low or high", arg);
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	xlog_init("xprobe");
	return cli_main(&tool, argc, argv);
}
