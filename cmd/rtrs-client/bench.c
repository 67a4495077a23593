/* rtrs-client bench: --iodepth requests of --bs bytes kept in flight for
 * --time seconds, sequential or random, reads, writes or both; IOPS,
 * bandwidth and latency percentiles per direction, and the per-path
 * counters.  --verify fills the region with a pattern keyed by block and
 * byte offset first, writes that pattern, and checks every block read
 * (mismatches and IO errors are counted; either fails the run). */
#include "cmd.h"
#include "core/node.h"
#include "core/parse.h"
#include "core/stats.h"
#include "core/xtime.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#define SECTOR 512u
#define MAX_DEPTH 4096u
#define STUCK_NS (10 * 1000000000ull)	/* how long IO may wait after --time */

enum rw { RW_READ, RW_WRITE, RW_RANDREAD, RW_RANDWRITE, RW_RANDRW };
static const char *const rw_names[] = { "read", "write", "randread", "randwrite", "randrw" };

struct bopts {
	enum rw rw;
	uint64_t bs, size, secs_ns;
	uint32_t iodepth, rwmixread;
	bool verify;
	enum xfmt fmt;
};

struct bslot {
	struct bench *b;
	uint8_t *buf;
	uint64_t off, t0;
	unsigned op;
	bool busy;
};

struct dir_stats {
	uint64_t ios, bytes;
	struct xhist lat;
};

struct bench {
	struct sess *ss;
	const struct bopts *o;
	struct bslot *slots;
	uint8_t *mem;
	uint64_t blocks, seq, rng, end_ns;
	uint32_t inflight;
	bool stop, prefill, stuck;
	struct dir_stats rd, wr;
	uint64_t errors, mismatches;
	int first_err;
	uint64_t first_err_off;
};

/* The pattern: each 8 bytes are a hash of their absolute device offset, so
 * a block read back from anywhere but where it was written shows. */
static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void pattern_fill(uint8_t *buf, uint64_t off, uint64_t len)
{
	for (uint64_t i = 0; i + 8 <= len; i += 8) {
		uint64_t v = mix(off + i);

		memcpy(buf + i, &v, 8);
	}
}

static bool pattern_ok(const uint8_t *buf, uint64_t off, uint64_t len)
{
	for (uint64_t i = 0; i + 8 <= len; i += 8) {
		uint64_t v;

		memcpy(&v, buf + i, 8);
		if (v != mix(off + i))
			return false;
	}
	return true;
}

static uint64_t rnd(struct bench *b)
{
	b->rng ^= b->rng << 13;
	b->rng ^= b->rng >> 7;
	b->rng ^= b->rng << 17;
	return b->rng;
}

static void slot_done(void *priv, int err);

/* Picks the next IO for sl and submits it.  0 or -errno. */
static int issue(struct bench *b, struct bslot *sl)
{
	const struct bopts *o = b->o;
	uint64_t blk;
	int rc;

	if (b->prefill) {
		if (b->seq >= b->blocks)
			return 0;
		blk = b->seq++;
		sl->op = RNBD_OP_WRITE;
	} else {
		switch (o->rw) {
		case RW_READ:
		case RW_WRITE:
			blk = b->seq++ % b->blocks;
			break;
		default:
			blk = rnd(b) % b->blocks;
			break;
		}
		if (o->rw == RW_READ || o->rw == RW_RANDREAD)
			sl->op = RNBD_OP_READ;
		else if (o->rw == RW_WRITE || o->rw == RW_RANDWRITE)
			sl->op = RNBD_OP_WRITE;
		else
			sl->op = rnd(b) % 100 < o->rwmixread ? RNBD_OP_READ : RNBD_OP_WRITE;
	}
	sl->off = blk * o->bs;
	if (sl->op == RNBD_OP_WRITE && o->verify)
		pattern_fill(sl->buf, sl->off, o->bs);
	sl->t0 = xtime_ns();
	rc = rnbd_clt_submit(b->ss->dev, sl->op, 0, sl->off, sl->buf, o->bs, slot_done, sl);
	if (rc)
		return rc;
	sl->busy = true;
	b->inflight++;
	return 0;
}

static void slot_done(void *priv, int err)
{
	struct bslot *sl = priv;
	struct bench *b = sl->b;
	uint64_t now = xtime_ns();
	struct dir_stats *d = sl->op == RNBD_OP_READ ? &b->rd : &b->wr;

	sl->busy = false;
	b->inflight--;
	if (err) {
		if (!b->errors++) {
			b->first_err = err;
			b->first_err_off = sl->off;
		}
		/* every path closed, or down past --down-timeout: nothing
		 * more can succeed (IO fails at once until one is back) */
		if (err == -ENOTCONN || err == -ECONNABORTED)
			b->stop = true;
	} else if (!b->prefill) {
		d->ios++;
		d->bytes += b->o->bs;
		xhist_add(&d->lat, now - sl->t0);
		if (sl->op == RNBD_OP_READ && b->o->verify &&
		    !pattern_ok(sl->buf, sl->off, b->o->bs))
			b->mismatches++;
	}
	if (b->stop || (!b->prefill && now >= b->end_ns))
		return;
	if (issue(b, sl) && !b->errors++)
		b->first_err = -EIO;
}

static int bopts_parse(int argc, char **argv, struct sess_opts *so, struct bopts *o)
{
	static const struct option lo[] = {
		SESS_LONGOPTS,
		{ "rw", required_argument, NULL, OPT_RW },
		{ "bs", required_argument, NULL, OPT_BS },
		{ "iodepth", required_argument, NULL, OPT_IODEPTH },
		{ "time", required_argument, NULL, OPT_TIME },
		{ "size", required_argument, NULL, OPT_SIZE },
		{ "rwmixread", required_argument, NULL, OPT_RWMIX },
		{ "verify", no_argument, NULL, OPT_VERIFY },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *e;
	uint64_t v;
	int c, rc;
	bool found;

	while ((c = getopt_long(argc, argv, SESS_SHORTOPTS "o:h", lo, NULL)) != -1) {
		rc = sess_opt("bench", c, optarg, so);
		if (rc == 1)
			continue;
		if (rc)
			return rc;
		switch (c) {
		case OPT_RW:
			found = false;
			for (unsigned i = 0; i < sizeof(rw_names) / sizeof(rw_names[0]); i++)
				if (!strcmp(optarg, rw_names[i])) {
					o->rw = (enum rw)i;
					found = true;
				}
			if (!found)
				return usage_error("bench", "--rw: '%s' is not read, write, randread, "
						   "randwrite or randrw", optarg);
			break;
		case OPT_BS:
			if (xparse_size(optarg, SECTOR, 64u << 20, &o->bs, &e))
				return usage_error("bench", "--bs: '%s' is %s", optarg, e);
			if (o->bs % SECTOR)
				return usage_error("bench", "--bs: %llu is not a multiple of %u",
						   (unsigned long long)o->bs, SECTOR);
			break;
		case OPT_IODEPTH:
			if (xparse_u64(optarg, 1, MAX_DEPTH, &v, &e))
				return usage_error("bench", "--iodepth: '%s' is %s", optarg, e);
			o->iodepth = (uint32_t)v;
			break;
		case OPT_TIME:
			if (xparse_duration(optarg, 1000000000ull, 1000000ull, 86400 * 1000000000ull,
					    &o->secs_ns, &e))
				return usage_error("bench", "--time: '%s' is %s", optarg, e);
			break;
		case OPT_SIZE:
			if (xparse_size(optarg, SECTOR, UINT64_MAX / 2, &o->size, &e))
				return usage_error("bench", "--size: '%s' is %s", optarg, e);
			break;
		case OPT_RWMIX:
			if (xparse_u64(optarg, 0, 100, &v, &e))
				return usage_error("bench", "--rwmixread: '%s' is %s", optarg, e);
			o->rwmixread = (uint32_t)v;
			break;
		case OPT_VERIFY:
			o->verify = true;
			break;
		case 'o':
			if (cli_parse_fmt(PROG, "bench", optarg, &o->fmt))
				return EXIT_USAGE;
			break;
		case 'h':
			cmd_usage(stdout, "bench");
			return -1;
		default:
			return bad_option("bench", SESS_SHORTOPTS "o:h", argv);
		}
	}
	if (optind < argc)
		return usage_error("bench", "unexpected argument '%s'", argv[optind]);
	return sess_opts_finish("bench", so, true);
}

static void dir_node(struct xnode *m, const char *key, const struct dir_stats *d, double secs)
{
	struct xnode *n = xnode_set_map(m, key);

	xnode_set_u64(n, "ios", d->ios);
	xnode_set_u64(n, "bytes", d->bytes);
	xnode_set_f64(n, "iops", secs > 0 ? d->ios / secs : 0, 0);
	xnode_set_f64(n, "bandwidth_Bps", secs > 0 ? d->bytes / secs : 0, 0);
	xhist_to_node(&d->lat, xnode_set_map(n, "lat_ns"));
}

static void report(struct bench *b, double secs)
{
	const struct bopts *o = b->o;
	struct xnode *m = xnode_map();
	struct dir_stats all = b->rd;

	xhist_merge(&all.lat, &b->wr.lat);
	all.ios += b->wr.ios;
	all.bytes += b->wr.bytes;
	xnode_set_str(m, "session", b->ss->o->session);
	xnode_set_str(m, "device", b->ss->o->device);
	xnode_set_str(m, "rw", rw_names[o->rw]);
	xnode_set_u64(m, "bs", o->bs);
	xnode_set_u64(m, "iodepth", o->iodepth);
	xnode_set_str(m, "policy", rtrs_mp_policy_str(rtrs_clt_policy(b->ss->clt)));
	xnode_set_f64(m, "time_s", secs, 3);
	xnode_set_bool(m, "verify", o->verify);
	xnode_set_u64(m, "ios", all.ios);
	xnode_set_u64(m, "bytes", all.bytes);
	xnode_set_f64(m, "iops", secs > 0 ? all.ios / secs : 0, 0);
	xnode_set_f64(m, "bandwidth_Bps", secs > 0 ? all.bytes / secs : 0, 0);
	xhist_to_node(&all.lat, xnode_set_map(m, "lat_ns"));
	if (b->rd.ios)
		dir_node(m, "read", &b->rd, secs);
	if (b->wr.ios)
		dir_node(m, "write", &b->wr, secs);
	xnode_set_u64(m, "errors", b->errors);
	xnode_set_u64(m, "mismatches", b->mismatches);
	sess_paths_node(b->ss, xnode_set_list(m, "paths"));
	xemit(stdout, m, o->fmt);
	xnode_free(m);
}

int cmd_bench(int argc, char **argv)
{
	struct bopts o = { RW_RANDREAD, 4096, 0, 10 * 1000000000ull, 32, 50, false, XFMT_TEXT };
	struct sess_opts so;
	struct sess ss;
	struct bench b;
	uint64_t size, start, last = 0, last_ios = 0;
	uint32_t lbs;
	bool progress;
	char e1[128];
	int rc;

	sess_opts_init(&so);
	rc = bopts_parse(argc, argv, &so, &o);
	if (rc)
		return rc < 0 ? EXIT_OK : rc;
	/* a workload that only reads opens the device read-only, as read */
	if (!so.access_set && (o.rw == RW_READ || o.rw == RW_RANDREAD) && !o.verify)
		so.access = RNBD_ACCESS_RO;
	if (so.access == RNBD_ACCESS_RO && (o.rw != RW_READ && o.rw != RW_RANDREAD))
		return usage_error("bench", "--access ro: --rw %s writes", rw_names[o.rw]);
	if (so.access == RNBD_ACCESS_RO && o.verify)
		return usage_error("bench", "--verify writes its pattern: not with --access ro");
	cli_stop_handlers();
	if ((rc = sess_open(&ss, "bench", &so)))
		return rc;
	memset(&b, 0, sizeof(b));
	xhist_reset(&b.rd.lat);
	xhist_reset(&b.wr.lat);
	b.ss = &ss;
	b.o = &o;
	b.rng = mix(xtime_ns()) | 1;
	size = rnbd_clt_geom(ss.dev)->size;
	lbs = rnbd_clt_geom(ss.dev)->logical_block_size;
	if (lbs > SECTOR && o.bs % lbs) {
		rc = fail("bench", "--bs: %llu is not a multiple of device %s's logical block "
			  "size (%u bytes)", (unsigned long long)o.bs, so.device, lbs);
		goto out;
	}
	if (o.size && o.size < size)
		size = o.size;
	b.blocks = size / o.bs;
	if (!b.blocks) {
		rc = fail("bench", "device %s (%llu bytes) is smaller than --bs %llu", so.device,
			  (unsigned long long)size, (unsigned long long)o.bs);
		goto out;
	}
	b.slots = calloc(o.iodepth, sizeof(*b.slots));
	b.mem = aligned_alloc(4096, (size_t)o.iodepth * ((o.bs + 4095) & ~4095ull));
	if (!b.slots || !b.mem) {
		rc = fail("bench", "out of memory for %u buffers of %llu bytes", o.iodepth,
			  (unsigned long long)o.bs);
		goto out;
	}
	memset(b.mem, 0x5a, (size_t)o.iodepth * ((o.bs + 4095) & ~4095ull));
	if ((rc = sess_add_mem(&ss, b.mem, (size_t)o.iodepth * ((o.bs + 4095) & ~4095ull))))
		goto out;
	for (uint32_t i = 0; i < o.iodepth; i++) {
		b.slots[i].b = &b;
		b.slots[i].buf = b.mem + (size_t)i * ((o.bs + 4095) & ~4095ull);
	}
	progress = want_progress(&so);
	/* --verify: the whole region gets the pattern first */
	b.prefill = o.verify;
	ss.activity = o.verify ? "bench: prefill" : "bench";
	for (int phase = o.verify ? 0 : 1; phase < 2 && !b.stop; phase++) {
		b.prefill = phase == 0;
		b.seq = 0;
		start = xtime_ns();
		b.end_ns = start + o.secs_ns;
		ss.activity = b.prefill ? "bench: prefill" : "bench";
		for (uint32_t i = 0; i < o.iodepth; i++) {
			if ((rc = issue(&b, &b.slots[i]))) {
				rc = fail("bench", "submit: %s", sess_strerror(&ss, rc, e1, sizeof(e1)));
				goto drain;
			}
		}
		while (b.inflight) {
			uint64_t now;

			if (sess_run(&ss, 100000000ull) == -EINTR)
				b.stop = true;
			now = xtime_ns();
			if (b.stop && b.end_ns > now)
				b.end_ns = now;	/* the end, for the wait below */
			ss.done_bytes = b.rd.bytes + b.wr.bytes;
			if (progress && !b.prefill && now - last >= 1000000000ull) {
				if (last)
					fprintf(stderr, "\r%6.1f s  %8.0f IOPS   ", (now - start) / 1e9,
						(b.rd.ios + b.wr.ios - last_ios) / ((now - last) / 1e9));
				last = now;
				last_ios = b.rd.ios + b.wr.ios;
			}
			if (!rtrs_clt_alive(ss.clt))
				b.stop = true;
			if (b.stop && !rtrs_clt_alive(ss.clt))
				break;
			/* past the end (or a stop), IO that waits for a path
			 * that does not come back, or for an answer that does
			 * not come, is not waited for forever */
			if ((!b.prefill || b.stop) && now > b.end_ns + STUCK_NS) {
				b.stop = b.stuck = true;
				break;
			}
		}
		if (progress && !b.prefill)
			fprintf(stderr, "\r%40s\r", "");
		if (!b.prefill)
			report(&b, (xtime_ns() - start) / 1e9);
	}
	rc = EXIT_OK;
	if (b.errors)
		rc = fail("bench", "%llu IO errors, the first at offset %llu: %s",
			  (unsigned long long)b.errors, (unsigned long long)b.first_err_off,
			  sess_strerror(&ss, b.first_err, e1, sizeof(e1)));
	else if (b.mismatches)
		rc = fail("bench", "%llu blocks read back differ from what was written",
			  (unsigned long long)b.mismatches);
	else if (b.stuck && !rtrs_clt_connected(ss.clt))
		rc = fail("bench", "%u IOs still waiting %llu s after the end: all paths to %s are down",
			  b.inflight, (unsigned long long)(STUCK_NS / 1000000000ull), so.session);
	else if (b.stuck)
		rc = fail("bench", "%u IOs unanswered %llu s after the end (session %s is connected)",
			  b.inflight, (unsigned long long)(STUCK_NS / 1000000000ull), so.session);
	else if (cli_stop_requested && b.prefill)
		rc = fail("bench", "interrupted");
drain:
	b.stop = true;
	while (b.inflight && !b.stuck && rtrs_clt_connected(ss.clt) && !cli_stop_requested)
		sess_run(&ss, 100000000ull);
out:
	/* buffers a request may still write into stay until the end */
	if (!b.inflight) {
		if (b.mem)
			rtrs_clt_del_mem(ss.clt, b.mem);
		free(b.mem);
		free(b.slots);
	}
	sess_close(&ss);
	return rc;
}
