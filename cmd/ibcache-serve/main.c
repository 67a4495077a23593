/* ibcache-serve -- serve cached file pages to peers over UD or UDP (gfcc
 * rpc2, seeds 003/004).  `ibcache-serve [options]` serves; `ibcache-serve
 * status` asks a running one for its counters. */
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "cmd.h"
#include "core/ctl.h"
#include "core/log.h"

void usage(FILE *f)
{
	fputs("usage: " PROG " [-l URI]... -e ROOT [--mtu N] [--recv-depth N] [--send-depth N]\n"
	      "                     [--max-states N] [--max-mem SIZE] [--ttl DURATION]\n"
	      "                     [--resident-only] [--spin DURATION] [--name NAME | --ctl PATH] [-v]\n"
	      "       " PROG " status [--name NAME | --ctl PATH] [-o text|yaml|json]\n"
	      "\n"
	      "  -l URI            listen on udp://HOST:PORT or ud://HOST:PORT (repeatable;\n"
	      "                    default udp://0.0.0.0:7480; port 0 picks one)\n"
	      "  -e ROOT           the export: files under ROOT are served by the ino of\n"
	      "                    their path relative to ROOT\n"
	      "  --mtu N           datagram payload limit (udp default 65507; ud: the port's)\n"
	      "  --recv-depth N    receives posted on each public QP/socket (default 512)\n"
	      "  --send-depth N    sends in flight on each (default 1024)\n"
	      "  --max-states N    requests held at once (default 1024)\n"
	      "  --max-mem SIZE    bytes of replies held at once (default 256M; at least\n"
	      "                    1048608, one full reply)\n"
	      "  --ttl DURATION    an idle request is forgotten after it (default 2s)\n"
	      "  --resident-only   serve only pages in the page cache (mincore)\n"
	      "  --spin DURATION   busy-poll this long after the last work (default 50us;\n"
	      "                    0 on one CPU)\n"
	      "  --name NAME       control socket ibcache-serve-NAME (for status)\n"
	      "  --ctl PATH        control socket at PATH\n"
	      "See ibcache-serve(8).\n", f);
}

int ctl_path(const char *name, const char *ctl, char *buf, size_t len)
{
	char n[300];

	if (ctl) {
		if (strlen(ctl) >= len)
			return -ENAMETOOLONG;
		snprintf(buf, len, "%s", ctl);
		return 0;
	}
	snprintf(n, sizeof(n), name ? PROG "-%s" : PROG, name);
	return xctl_default_path(n, buf, len);
}

int main(int argc, char **argv)
{
	cli_std_fds();
	xlog_init(PROG);
	if (argc == 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")))
		return cli_version(PROG, "gfcc rpc2 over UD and UDP, extensions version 1");
	if (argc > 1 && !strcmp(argv[1], "status"))
		return cmd_status(argc - 1, argv + 1);
	if (argc > 1 && (!strcmp(argv[1], "help") || !strcmp(argv[1], "-h") ||
			 !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return EXIT_OK;
	}
	if (argc > 1 && argv[1][0] != '-')
		return cli_usage_error(PROG, NULL, "'%s' is not a command (status) or an option; "
				       "try '" PROG " --help'", argv[1]);
	return cmd_serve(argc, argv);
}
