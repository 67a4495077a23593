/* rtrs-client -- read, write and benchmark a device exported over RTRS/RNBD
 * (by the kernel's rnbd-server or our rtrs-server), with multipath,
 * failover and reconnect; inspect and change a running session through
 * its control socket. */
#include "cmd.h"
#include "core/log.h"

#include <getopt.h>
#include <stdarg.h>
#include <string.h>

#define COMMON "-s SESSION -p URI [-p URI]... -d DEVICE"

static const struct cmd cmds[] = {
	{ "read",   cmd_read,   COMMON " [--offset OFF] [--length LEN] > DATA",
	  "read a device range to stdout" },
	{ "write",  cmd_write,  COMMON " [--offset OFF] < DATA",
	  "write stdin to a device" },
	{ "bench",  cmd_bench,  COMMON " [--rw read|write|randread|randwrite|randrw]\n"
	  "                     [--bs SIZE] [--iodepth N] [--time SEC] [--size SIZE]"
	  " [--rwmixread PCT]\n"
	  "                     [--verify] [-o text|yaml|json]",
	  "measure IOPS, bandwidth and latency; --verify checks every read" },
	{ "nbd",    cmd_nbd,    COMMON " [-l tcp://HOST[:PORT]]... [--socket PATH]...\n"
	  "                     [--unread-timeout DURATION]",
	  "serve the device as an NBD export (nbdinfo, nbdcopy, qemu, nbd-client)" },
	{ "map",    cmd_map,    COMMON " [--nbd-device /dev/nbdN]\n"
	  "                     [--nbd-connections N] [--ublk[=ID]] [--foreground]",
	  "map the device as a kernel block device /dev/nbdN (--ublk: /dev/ublkbN);\n"
	  "                     prints its name" },
	{ "unmap",  cmd_unmap,  "/dev/nbdN|/dev/ublkbN|SESSION [--force]",
	  "unmap it (a mounted device only with --force)" },
	{ "list-mapped", cmd_list_mapped, "[-o text|yaml|json]",
	  "the devices mapped: device, session, export, size, pid, paths" },
	{ "status", cmd_status, "-s SESSION [--ctl PATH] [-o text|yaml|json]",
	  "show a running session: paths, states, counters" },
	{ "path",   cmd_path,   "add|remove|disconnect|reconnect -s SESSION URI|N [--ctl PATH]",
	  "change the paths of a running session" },
	{ "set",    cmd_set,    "-s SESSION [--policy P] [--max-reconnect-attempts N]\n"
	  "                     [--down-timeout DURATION] [--ctl PATH]",
	  "change a running session's settings" },
	{ "reset-stats", cmd_reset_stats, "-s SESSION [--ctl PATH]",
	  "zero a running session's path counters" },
};

static const struct cli_tool tool = {
	PROG, cmds, sizeof(cmds) / sizeof(cmds[0]), 6, 9,
	"\nSession options of read, write, bench, nbd and map:\n"
	"  --policy rr|min-inflight|min-latency   --reconnect-delay MS\n"
	"  --max-reconnect-attempts N (-1: forever)   --connections N\n"
	"  --hb-interval MS   --hb-missed N   --access ro|rw|migration\n"
	"  --timeout DURATION   --down-timeout DURATION (-1: forever)\n"
	"  -c CONFIG.yaml   --ctl PATH   --progress   -q   -v\n"
	"URI: rdma://HOST[:PORT] or tcp://HOST[:PORT], default port 1234.\n"
	"See rtrs-client(8).\n",
	"RTRS 2.0, RNBD 2",
};

void cmd_usage(FILE *f, const char *name)
{
	cli_usage(&tool, f, name);
}

int bad_option(const char *cmd, const char *optstring, char **argv)
{
	/* cli_bad_option names long options missing their value itself */
	return cli_bad_option(PROG, cmd, optstring, argv);
}

int main(int argc, char **argv)
{
	xlog_init(PROG);
	cli_raise_nofile();
	return cli_main(&tool, argc, argv);
}
