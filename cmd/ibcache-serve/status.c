/* ibcache-serve status: a running server's counters, through its control
 * socket (lib/core/ctl.h). */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "core/ctl.h"

enum { OPT_NAME = 256, OPT_CTL };

int cmd_status(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "name", required_argument, NULL, OPT_NAME },
		{ "ctl", required_argument, NULL, OPT_CTL },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const char *const os = "o:h";
	const char *name = NULL, *ctlp = NULL, *fmt = "text";
	char path[256], err[512], *buf = NULL;
	char a0[] = "status", a1[] = "-o", a2[8];
	char *args[3] = { a0, a1, a2 };
	size_t len = 0;
	enum xfmt f;
	FILE *mem;
	int c, rc;

	opterr = 0;
	while ((c = getopt_long(argc, argv, os, lo, NULL)) != -1) {
		switch (c) {
		case 'o':
			if (xfmt_parse(optarg, &f) < 0)
				return cli_usage_error(PROG, NULL, "status: -o: '%s' is not text, yaml or json",
						       optarg);
			fmt = optarg;
			break;
		case OPT_NAME:
			name = optarg;
			break;
		case OPT_CTL:
			ctlp = optarg;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			return cli_bad_option(PROG, NULL, os, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error(PROG, NULL, "status: unexpected argument '%s'",
				       argv[optind]);
	if (name && ctlp)
		return cli_usage_error(PROG, NULL, "status: --name and --ctl: give one");
	if ((rc = ctl_path(name, ctlp, path, sizeof(path))))
		return fail("status: control socket: %s", strerror(-rc));
	snprintf(a2, sizeof(a2), "%s", fmt);
	if (!(mem = open_memstream(&buf, &len)))
		return fail("status: out of memory");
	rc = xctl_call(path, 3, args, mem, err, sizeof(err));
	fclose(mem);
	if (rc < 0) {
		free(buf);
		if (rc == -ENOENT || rc == -ECONNREFUSED)
			return fail("status: no running server%s%s (%s)", name ? " " : "",
				    name ? name : "", path);
		return fail("status: %s", err);
	}
	if (rc == 0) {
		/* exit 0 says the counters were written: a full disk or a
		 * closed pipe is a failure like any other */
		if (fwrite(buf, 1, len, stdout) != len || fflush(stdout) == EOF) {
			rc = errno;
			free(buf);
			return fail("status: writing output: %s", strerror(rc));
		}
	} else {
		while (len && buf[len - 1] == '\n')
			buf[--len] = 0;
		fprintf(stderr, PROG " status: %s\n", buf);
	}
	free(buf);
	return rc == 0 ? EXIT_OK : rc == EXIT_USAGE ? EXIT_USAGE : EXIT_FAIL;
}
