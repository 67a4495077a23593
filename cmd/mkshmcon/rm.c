#include "cmd.h"
#include "xprt/mbox.h"

#include <getopt.h>
#include <string.h>

int cmd_rm(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "force", no_argument, NULL, 'f' },
		{ "help",  no_argument, NULL, 'h' },
		{ 0 }
	};
	bool force = false;
	char err[256];
	int c, rc = EXIT_OK;

	optind = 1;
	while ((c = getopt_long(argc, argv, "fh", opts, NULL)) != -1) {
		switch (c) {
		case 'f':
			force = true;
			break;
		case 'h':
			cmd_usage(stdout, "rm");
			return EXIT_OK;
		default:
			return bad_option("rm", "fh", argv);
		}
	}
	if (optind >= argc)
		return usage_error("rm", "connection name missing");
	for (int i = optind; i < argc; i++)
		if (check_name(strip_db_prefix(argv[i])))
			return EXIT_USAGE;
	for (int i = optind; i < argc; i++) {
		if (mbox_unlink(strip_db_prefix(argv[i]), force, err, sizeof(err)) < 0) {
			fprintf(stderr, "mkshmcon: couldn't remove connection: %s\n", err);
			rc = EXIT_FAIL;
		}
	}
	return rc;
}
