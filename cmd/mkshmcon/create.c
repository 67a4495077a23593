#include "cmd.h"
#include "core/parse.h"
#include "xprt/mbox.h"

#include <getopt.h>
#include <inttypes.h>
#include <string.h>

/* Defaults sized for throughput (LINX used 16 slots of 120 bytes for
 * RLNH signals): 128 slots of 16 KiB, 2 MiB each way. */
#define DEF_SLOTS	128u
#define DEF_MTU		16384u
#define DEF_CON_TMO	1000u

int cmd_create(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "slots",    required_argument, NULL, 'n' },
		{ "mtu",      required_argument, NULL, 'm' },
		{ "con_tmo",  required_argument, NULL, 't' },
		{ "con-tmo",  required_argument, NULL, 't' },
		{ "defq-max", required_argument, NULL, 'd' },
		{ "quiet",    no_argument,       NULL, 'q' },
		{ "silent",   no_argument,       NULL, 's' },
		{ "help",     no_argument,       NULL, 'h' },
		{ 0 }
	};
	struct mbox_cfg cfg = { DEF_SLOTS, DEF_MTU, DEF_CON_TMO, 0 };
	const char *errstr;
	uint64_t v;
	bool quiet = false, replaced;
	char err[256];
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "n:m:t:d:qsh", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (xparse_size(optarg, MBOX_SLOTS_MIN, MBOX_SLOTS_MAX, &v, &errstr) < 0)
				return usage_error("create", "slot count '%s' %s (%u to %u)",
						   optarg, errstr, MBOX_SLOTS_MIN, MBOX_SLOTS_MAX);
			cfg.nslots = (uint32_t)v;
			break;
		case 'm':
			if (xparse_size(optarg, 36, 16u << 20, &v, &errstr) < 0)
				return usage_error("create", "MTU '%s' %s (36 to 16M bytes)", optarg, errstr);
			cfg.mtu = (uint32_t)v;
			break;
		case 't':
			if (xparse_duration(optarg, 1000000, 100000000ull, 3600000000000ull, &v, &errstr) < 0)
				return usage_error("create", "connection timeout '%s' %s (100ms to 1h)",
						   optarg, errstr);
			cfg.con_tmo_ms = (uint32_t)(v / 1000000);
			break;
		case 'd':
			if (xparse_u64(optarg, 0, 1000000, &v, &errstr) < 0)
				return usage_error("create", "deferred queue limit '%s' %s (0 to 1000000)",
						   optarg, errstr);
			cfg.defq_max = (uint32_t)v;
			break;
		case 'q':
		case 's':
			quiet = true;
			break;
		case 'h':
			cmd_usage(stdout, "create");
			return EXIT_OK;
		default:
			return bad_option("create", "n:m:t:d:qsh", argv);
		}
	}
	if (optind >= argc)
		return usage_error("create", "connection name missing");
	if (optind + 1 < argc)
		return usage_error("create", "unexpected argument '%s'", argv[optind + 1]);

	const char *name = strip_db_prefix(argv[optind]);
	if (check_name(name))
		return EXIT_USAGE;
	if (mbox_check_cfg(&cfg, err, sizeof(err)) < 0)
		return usage_error("create", "%s", err);	/* -n 3: not a power of two */
	if (mbox_create(name, &cfg, &replaced, err, sizeof(err)) < 0) {
		fprintf(stderr, "mkshmcon: %s\n", err);
		return EXIT_FAIL;
	}
	if (!quiet)
		printf("mkshmcon: %s connection '%s': %" PRIu32 " slots of %" PRIu32
		       " bytes each way, con_tmo %" PRIu32 " ms, defq_max %" PRIu32 "\n",
		       replaced ? "re-created stale" : "created", name, cfg.nslots, cfg.mtu,
		       cfg.con_tmo_ms, cfg.defq_max);
	return EXIT_OK;
}
