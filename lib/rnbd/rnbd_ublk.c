/* ublk <-> RNBD translation: see rnbd_ublk.h. */
#include <errno.h>
#include <string.h>

#include "rnbd/rnbd_ublk.h"

#define SECTOR_SHIFT 9

/* log2 of a power of two in [512, 2^max], else -1 */
static int bs_shift(uint32_t bs, int max)
{
	for (int s = 9; s <= max; s++)
		if (bs == 1u << s)
			return s;
	return -1;
}

int rnbd_ublk_params(const struct rnbd_clt_geom *g, bool ro, uint32_t max_io,
		     struct ublk_params *p)
{
	/* the driver takes a logical block up to a page; the physical one
	 * is a hint (RNBD carries it in 16 bits) */
	int lbs = bs_shift(g->logical_block_size ? g->logical_block_size : 512, 12);
	int pbs = bs_shift(g->physical_block_size ? g->physical_block_size : 512, 15);
	struct ublk_param_basic *b = &p->basic;

	memset(p, 0, sizeof(*p));
	if (lbs < 0 || pbs < 0 || !g->nsectors || g->nsectors > UINT64_MAX >> SECTOR_SHIFT ||
	    max_io < 4096 || max_io % 4096)
		return -EINVAL;
	if (pbs < lbs)
		pbs = lbs;
	p->len = sizeof(*p);
	p->types = UBLK_PARAM_TYPE_BASIC;
	/* what the kernel's rnbd-client tells its block layer
	 * (blk_queue_write_cache from cache_policy); read-only, nothing to
	 * flush (a FLUSH would be a write the server refuses) */
	if ((g->cache_policy & RNBD_WRITEBACK) && !ro)
		b->attrs |= UBLK_ATTR_VOLATILE_CACHE;
	if ((g->cache_policy & RNBD_FUA) && !ro)
		b->attrs |= UBLK_ATTR_FUA;
	if (ro)
		b->attrs |= UBLK_ATTR_READ_ONLY;
	b->logical_bs_shift = (uint8_t)lbs;
	b->physical_bs_shift = (uint8_t)pbs;
	b->io_min_shift = (uint8_t)pbs;
	b->io_opt_shift = (uint8_t)pbs;
	b->max_sectors = max_io >> SECTOR_SHIFT;
	b->dev_sectors = g->nsectors;
	if (g->max_discard_sectors || g->max_write_zeroes_sectors) {
		struct ublk_param_discard *d = &p->discard;

		p->types |= UBLK_PARAM_TYPE_DISCARD;
		d->discard_granularity = g->discard_granularity ? g->discard_granularity
								: 1u << lbs;
		d->discard_alignment = g->discard_alignment;
		d->max_discard_sectors = g->max_discard_sectors;
		d->max_write_zeroes_sectors = g->max_write_zeroes_sectors;
		d->max_discard_segments = 1;
	}
	return 0;
}

int rnbd_ublk_req(const struct ublksrv_io_desc *iod, uint64_t dev_sectors, uint32_t max_io,
		  struct rnbd_ublk_req *r)
{
	uint32_t op = iod->op_flags & 0xff, fl = iod->op_flags >> 8;
	uint64_t start = iod->start_sector, n = iod->nr_sectors;

	memset(r, 0, sizeof(*r));
	switch (op) {
	case UBLK_IO_OP_READ:
		r->op = RNBD_OP_READ;
		r->data = true;
		break;
	case UBLK_IO_OP_WRITE:
		r->op = RNBD_OP_WRITE;
		r->data = true;
		break;
	case UBLK_IO_OP_FLUSH:
		r->op = RNBD_OP_FLUSH;
		return 0;
	case UBLK_IO_OP_DISCARD:
		r->op = RNBD_OP_DISCARD;
		break;
	case UBLK_IO_OP_WRITE_ZEROES:
		r->op = RNBD_OP_WRITE_ZEROES;
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (!n || start > dev_sectors || n > dev_sectors - start ||
	    start + n > UINT64_MAX >> SECTOR_SHIFT)
		return -EINVAL;
	if (r->data && n > max_io >> SECTOR_SHIFT)
		return -EINVAL;
	/* (REQ_FUA goes with a write only: rnbd_clt_submit() refuses it
	 * elsewhere, where the server's block layer would fail the IO) */
	if (r->op == RNBD_OP_WRITE && (fl & (UBLK_IO_F_FUA >> 8)))
		r->flags |= RNBD_F_FUA;
	if (r->op == RNBD_OP_WRITE_ZEROES && (fl & (UBLK_IO_F_NOUNMAP >> 8)))
		r->flags |= RNBD_F_NOUNMAP;
	r->off = start << SECTOR_SHIFT;
	r->len = n << SECTOR_SHIFT;
	return 0;
}

int32_t rnbd_ublk_result(const struct rnbd_ublk_req *r, int err)
{
	if (err)
		return err < 0 ? err : -err;
	return r->data ? (int32_t)r->len : 0;
}
