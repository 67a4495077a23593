/* ibcache-fetch -- the bytes of a file range on stdout, from a local copy,
 * the peers' caches (gfcc rpc2 over UD or UDP) and the origin, in that
 * order (seed 004 2.3; lib/ibcache/ibc_fetch.h). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/emit.h"
#include "core/log.h"
#include "core/node.h"
#include "core/parse.h"
#include "core/stats.h"
#include "core/xtime.h"
#include "ibcache/ibc_fetch.h"

#define PROG "ibcache-fetch"
#define usage_error(...) cli_usage_error(PROG, NULL, __VA_ARGS__)

static void usage(FILE *f)
{
	fputs("usage: " PROG " [-p PEER_URI]... [--peers FILE.yaml] [--origin PATH] [--local PATH]\n"
	      "                     [--cache DIR] [--gen N] [--size BYTES] FILE [--offset OFF]\n"
	      "                     [--length LEN | --pages LIST]\n"
	      "                     [--timeout MS] [--stats] [-o text|yaml|json] [-q] > data\n"
	      "\n"
	      "  -p, --peer URI    a peer's ibcache-serve: udp://HOST[:PORT] or ud://HOST[:PORT]\n"
	      "                    (repeatable; default port 7480)\n"
	      "  --peers FILE      a YAML directory of exports, their peers and origins\n"
	      "  --origin PATH     the origin's copy of FILE: its generation, its size, and\n"
	      "                    the pages no one else has\n"
	      "  --local PATH      a local copy, read first (holes are pages it lacks)\n"
	      "  --cache DIR       keep what is fetched in DIR/FILE (an export root of this host's\n"
	      "                    ibcache-serve), so that this host serves it to the others\n"
	      "  --gen N           the generation to ask for (default: the origin's)\n"
	      "  --size BYTES      the file's size, where no --origin or --local says\n"
	      "  --offset OFF      first byte (default 0)     --length LEN  bytes (default: to the end)\n"
	      "  --pages LIST      whole pages instead, e.g. 0-3,7 (ascending)\n"
	      "  --timeout MS      a request unanswered this long is reaped (default 500)\n"
	      "  --window SIZE     udp: bytes in flight per request (default 256k)\n"
	      "  --depth N         requests in flight (default 8)\n"
	      "  --mtu N           cap on the datagram payload (default: the path MTU)\n"
	      "  --block SIZE      rendezvous block (default 64k, or the directory's)\n"
	      "  --page-size SIZE  gfcc page size (default 4096; both ends must agree)\n"
	      "  --spin DURATION   busy-poll before sleeping (default 50us)\n"
	      "  --repeat N        fetch N times (for measurements; output each time)\n"
	      "  --stats           counters on stderr at the end (-o for the format)\n"
	      "  -q                no notes about peers on stderr (those about --local\n"
	      "                    and --cache remain)\n"
	      "FILE is a path relative to the export.  See ibcache-fetch(1).\n", f);
}

#define fail(...) cli_fail(PROG, NULL, __VA_ARGS__)

struct ctx {
	bool quiet;
	const char *file;
};

static void on_note(void *p, enum ibc_note n, const char *peer, const char *detail)
{
	const struct ctx *c = p;

	/* -q is for peers, which come and go in a cluster; a --local or
	 * --cache the user named that is not used is said all the same */
	if (c->quiet && n != IBC_NOTE_LOCAL_STALE && n != IBC_NOTE_LOCAL_SIZE &&
	    n != IBC_NOTE_CACHE && n != IBC_NOTE_CACHE_ORIGIN)
		return;
	switch (n) {
	case IBC_NOTE_UNRESOLVED:
		fprintf(stderr, PROG ": %s; going on without that peer\n", detail);
		break;
	case IBC_NOTE_SILENT:
		fprintf(stderr, PROG ": %s: no answer within %s; its pages come from the next source\n",
			peer, detail);
		break;
	case IBC_NOTE_REFUSED:
		fprintf(stderr, PROG ": %s: nothing listens there; its pages come from the next "
			"source\n", peer);
		break;
	case IBC_NOTE_STALE:
		fprintf(stderr, PROG ": %s: its copy of %s is another generation (stale); its "
			"pages come from the next source\n", peer, c->file);
		break;
	case IBC_NOTE_ERROR:
		fprintf(stderr, PROG ": %s: %s; its pages come from the next source\n", peer, detail);
		break;
	case IBC_NOTE_MTU:
		fprintf(stderr, PROG ": %s: refuses datagrams of our size (its --mtu is smaller); "
			"asking again with %s-byte ones\n", peer, detail);
		break;
	case IBC_NOTE_BUSY:
		fprintf(stderr, PROG ": %s: out of room for requests (busy, ENOMEM); its pages are "
			"asked again, then from the next source\n", peer);
		break;
	case IBC_NOTE_SIZE:
		fprintf(stderr, PROG ": %s: its copy of %s has another size (%s); its pages come "
			"from the next source\n", peer, c->file, detail);
		break;
	case IBC_NOTE_NOSIZE:
		fprintf(stderr, PROG ": %s: does not tell the size of %s (an older ibcache-serve); "
			"its pages are used only with --size, --origin or --local\n", peer, c->file);
		break;
	case IBC_NOTE_LOCAL_STALE:
		fprintf(stderr, PROG ": --local %s: another generation than the origin's; not used\n",
			detail);
		break;
	case IBC_NOTE_LOCAL_SIZE:
		fprintf(stderr, PROG ": --local %s; not used\n", detail);
		break;
	case IBC_NOTE_CACHE:
		/* the output is whole all the same; only the cache stops */
		fprintf(stderr, PROG ": --cache %s; the rest is not cached\n", detail);
		break;
	case IBC_NOTE_CACHE_ORIGIN:
		/* replacing it would destroy the origin; it is whole anyway */
		fprintf(stderr, PROG ": --cache %s is the origin itself: read from, not cached into\n",
			detail);
		break;
	}
}

static int write_out(void *p, const void *buf, size_t len)
{
	const char *b = buf;

	(void)p;
	while (len) {
		ssize_t n = write(STDOUT_FILENO, b, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		b += n;
		len -= (size_t)n;
	}
	return 0;
}

static const struct xstat_desc req_stats[] = {
	XSTAT(struct ibc_req_stats, requests), XSTAT(struct ibc_req_stats, pages_requested),
	XSTAT(struct ibc_req_stats, pages_sent), XSTAT(struct ibc_req_stats, pages_received),
	XSTAT(struct ibc_req_stats, short_replies), XSTAT(struct ibc_req_stats, errors),
	XSTAT(struct ibc_req_stats, reaped), XSTAT(struct ibc_req_stats, refused),
	XSTAT(struct ibc_req_stats, retries), XSTAT(struct ibc_req_stats, fast_resends),
	XSTAT(struct ibc_req_stats, segments_asked), XSTAT(struct ibc_req_stats, credits),
	XSTAT(struct ibc_req_stats, send_errors),
	XSTAT(struct ibc_req_stats, rejected), XSTAT(struct ibc_req_stats, resets),
	XSTAT(struct ibc_req_stats, endpoints),
};

static int print_stats(const struct ibc_fetch *f, const char *file, enum xfmt fmt)
{
	struct ibc_fetch_stats s;
	struct xnode *n = xnode_map();
	int rc;

	if (!n)
		return -ENOMEM;
	ibc_fetch_get_stats(f, &s);
	xnode_set_str(n, "file", file);
	xnode_set_strf(n, "ino", "0x%016llx", (unsigned long long)ibc_fetch_ino(f));
	xnode_set_u64(n, "gen", ibc_fetch_gen(f));
	if (ibc_fetch_size(f) >= 0)
		xnode_set_u64(n, "size", (uint64_t)ibc_fetch_size(f));
	xnode_set_u64(n, "bytes", s.bytes_out);
	xnode_set_u64(n, "local_pages", s.local_pages);
	xnode_set_u64(n, "peer_pages", s.peer_pages);
	xnode_set_u64(n, "origin_pages", s.origin_pages);
	xnode_set_u64(n, "cached_pages", s.cached_pages);
	xnode_set_u64(n, "home_pages", s.home_pages);
	xstats_to_node(&s.req, req_stats, sizeof(req_stats) / sizeof(req_stats[0]), n);
	if (s.req.rtt.count)
		xhist_to_node(&s.req.rtt, xnode_set_map(n, "rtt_ns"));
	if (s.fetches > 1)
		xhist_to_node(&s.fetch_ns, xnode_set_map(n, "fetch_ns"));
	fflush(stdout);
	rc = xemit(stderr, n, fmt);
	xnode_free(n);
	return rc;
}

enum { OPT_PEERS = 256, OPT_ORIGIN, OPT_LOCAL, OPT_GEN, OPT_OFFSET, OPT_LENGTH, OPT_PAGES,
       OPT_TIMEOUT, OPT_WINDOW, OPT_DEPTH, OPT_MTU, OPT_BLOCK, OPT_PSIZE, OPT_SPIN, OPT_REPEAT,
       OPT_STATS, OPT_CACHE, OPT_SIZE };

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "peer", required_argument, NULL, 'p' },
		{ "peers", required_argument, NULL, OPT_PEERS },
		{ "origin", required_argument, NULL, OPT_ORIGIN },
		{ "local", required_argument, NULL, OPT_LOCAL },
		{ "cache", required_argument, NULL, OPT_CACHE },
		{ "size", required_argument, NULL, OPT_SIZE },
		{ "gen", required_argument, NULL, OPT_GEN },
		{ "offset", required_argument, NULL, OPT_OFFSET },
		{ "length", required_argument, NULL, OPT_LENGTH },
		{ "pages", required_argument, NULL, OPT_PAGES },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "window", required_argument, NULL, OPT_WINDOW },
		{ "depth", required_argument, NULL, OPT_DEPTH },
		{ "mtu", required_argument, NULL, OPT_MTU },
		{ "block", required_argument, NULL, OPT_BLOCK },
		{ "page-size", required_argument, NULL, OPT_PSIZE },
		{ "spin", required_argument, NULL, OPT_SPIN },
		{ "repeat", required_argument, NULL, OPT_REPEAT },
		{ "stats", no_argument, NULL, OPT_STATS },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const char *const os = "p:o:qh";
	struct ibc_fetch_opts o = { 0 };
	struct ibc_dir dir;
	struct ctx cx = { 0 };
	const char *peers = NULL, *pages = NULL, *es;
	enum xfmt fmt = XFMT_TEXT;
	uint64_t v, repeat = 1, *plist = NULL;
	bool stats = false, offset_set = false, usage_bad;
	struct ibc_fetch *f = NULL;
	char err[1024];
	int c, rc = EXIT_FAIL;

	cli_std_fds();
	xlog_init(PROG);
	if (argc == 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")))
		return cli_version(PROG, "gfcc rpc2 over UD and UDP, extensions version 1");
	opterr = 0;
	ibc_dir_init(&dir);
	while ((c = getopt_long(argc, argv, os, lo, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (ibc_dir_add_peer(&dir, optarg, err, sizeof(err))) {
				rc = usage_error("-p: %s", err);
				goto out;
			}
			break;
		case OPT_PEERS:
			peers = optarg;
			break;
		case OPT_ORIGIN:
			o.origin = optarg;
			break;
		case OPT_LOCAL:
			o.local = optarg;
			break;
		case OPT_CACHE:
			o.cache = optarg;
			break;
		case OPT_SIZE:
			if (xparse_size(optarg, 0, INT64_MAX, &o.size, &es) < 0) {
				rc = usage_error("--size: '%s' %s", optarg, es);
				goto out;
			}
			o.size_set = true;
			break;
		case OPT_GEN:
			if (ibc_gen_parse(optarg, strlen(optarg), &o.gen)) {
				rc = usage_error("--gen: '%s' is not a decimal generation number", optarg);
				goto out;
			}
			o.gen_set = true;
			break;
		case OPT_OFFSET:
		case OPT_LENGTH:
			if (xparse_size(optarg, 0, INT64_MAX, &v, &es) < 0) {
				rc = usage_error("--%s: '%s' %s", c == OPT_OFFSET ? "offset" : "length",
						 optarg, es);
				goto out;
			}
			if (c == OPT_OFFSET) {
				o.offset = v;
				offset_set = true;
			} else {
				o.length = v;
				o.length_set = true;
			}
			break;
		case OPT_PAGES:
			pages = optarg;
			break;
		case OPT_TIMEOUT:
			if (xparse_duration(optarg, XTIME_NS_PER_MS, XTIME_NS_PER_MS, 3600 * XTIME_NS_PER_S,
					    &o.ro.timeout_ns, &es) < 0) {
				rc = usage_error("--timeout: '%s' %s (1ms..1h; a bare number is ms)",
						 optarg, es);
				goto out;
			}
			break;
		case OPT_WINDOW:
			if (xparse_size(optarg, 4096, 64u << 20, &v, &es) < 0) {
				rc = usage_error("--window: '%s' %s (4k..64M)", optarg, es);
				goto out;
			}
			o.ro.window_bytes = (uint32_t)v;
			break;
		case OPT_DEPTH:
			if (xparse_u64(optarg, 1, IBC_DEPTH_MAX, &v, &es) < 0) {
				rc = usage_error("--depth: '%s' %s (1..%d)", optarg, es, IBC_DEPTH_MAX);
				goto out;
			}
			o.ro.depth = (uint32_t)v;
			break;
		case OPT_MTU:
			if (xparse_size(optarg, GFCC_MTU_MIN, GFCC_MTU_MAX, &v, &es) < 0) {
				rc = usage_error("--mtu: '%s' %s (%u..%u)", optarg, es, GFCC_MTU_MIN,
						 GFCC_MTU_MAX);
				goto out;
			}
			o.ro.mtu = (uint32_t)v;
			break;
		case OPT_BLOCK:
			if (xparse_size(optarg, 4096, 1ull << 30, &o.block, &es) < 0) {
				rc = usage_error("--block: '%s' %s (4k..1G)", optarg, es);
				goto out;
			}
			break;
		case OPT_PSIZE:
			if (xparse_size(optarg, GFCC_PSIZE_MIN, GFCC_PSIZE_MAX, &v, &es) < 0 ||
			    !gfcc_psize_ok((uint32_t)v)) {
				rc = usage_error("--page-size: '%s' is not a power of two in %u..%u",
						 optarg, GFCC_PSIZE_MIN, GFCC_PSIZE_MAX);
				goto out;
			}
			o.ro.psize = (uint32_t)v;
			break;
		case OPT_SPIN:
			if (xparse_duration(optarg, XTIME_NS_PER_US, 1, XTIME_NS_PER_S, &o.ro.spin_ns,
					    &es) < 0) {
				rc = usage_error("--spin: '%s' %s (1ns..1s; a bare number is us)", optarg, es);
				goto out;
			}
			break;
		case OPT_REPEAT:
			if (xparse_u64(optarg, 1, 100000000, &repeat, &es) < 0) {
				rc = usage_error("--repeat: '%s' %s", optarg, es);
				goto out;
			}
			break;
		case OPT_STATS:
			stats = true;
			break;
		case 'o':
			if (xfmt_parse(optarg, &fmt) < 0) {
				rc = usage_error("-o: '%s' is not text, yaml or json", optarg);
				goto out;
			}
			break;
		case 'q':
			cx.quiet = true;
			break;
		case 'h':
			usage(stdout);
			rc = EXIT_OK;
			goto out;
		default:
			rc = cli_bad_option(PROG, NULL, os, argv);
			goto out;
		}
	}
	if (optind >= argc) {
		rc = usage_error("no FILE given");
		goto out;
	}
	if (optind + 1 < argc) {
		rc = usage_error("one FILE at a time ('%s' is extra)", argv[optind + 1]);
		goto out;
	}
	if (pages && (o.length_set || offset_set)) {
		rc = usage_error("--pages names whole pages: not with --offset or --length");
		goto out;
	}
	if (peers && (c = ibc_dir_load(&dir, peers, err, sizeof(err)))) {
		/* a file we cannot read is a runtime failure, one we can but
		 * that says nonsense is the command line's */
		rc = c == -EINVAL ? usage_error("--peers %s", err) : fail("--peers %s", err);
		goto out;
	}
	if (pages) {
		if (ibc_pages_parse(pages, &plist, &o.npages, 1u << 24, err, sizeof(err))) {
			rc = usage_error("--pages: %s", err);
			goto out;
		}
		o.pages = plist;
	}
	if (isatty(STDOUT_FILENO)) {
		/* pages of a file are not for a terminal (curl and gzip agree) */
		rc = usage_error("standard output is a terminal: redirect it (> FILE)");
		goto out;
	}
	o.file = cx.file = argv[optind];
	signal(SIGPIPE, SIG_IGN);
	f = ibc_fetch_new(&o, &dir, on_note, &cx, err, sizeof(err), &usage_bad);
	if (!f) {
		rc = usage_bad ? usage_error("%s", err) : fail("%s", err);
		goto out;
	}
	for (uint64_t i = 0; i < repeat; i++)
		if (ibc_fetch_run(f, write_out, NULL, err, sizeof(err))) {
			rc = fail("%s", err);
			goto out_stats;
		}
	rc = EXIT_OK;
out_stats:
	if (stats && print_stats(f, cx.file, fmt) < 0)
		rc = EXIT_FAIL;
out:
	ibc_fetch_free(f);
	ibc_dir_free(&dir);
	free(plist);
	return rc;
}
