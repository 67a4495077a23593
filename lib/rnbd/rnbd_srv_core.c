/* The RNBD server's rules without I/O.  See rnbd_srv_core.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rnbd/rnbd_srv_core.h"

int rnbd_core_sess_info(struct rnbd_core_sess *s, int dir, void *data, uint32_t datalen,
			const void *usr, uint32_t usrlen)
{
	struct rnbd_sess_info m;

	if (dir != RTRS_READ || datalen < RNBD_SESS_INFO_LEN ||
	    rnbd_sess_info_decode(usr, usrlen, &m) < 0)
		return -EINVAL;
	s->ver = rnbd_negotiate_ver(m.ver);
	m.ver = s->ver;
	rnbd_sess_info_rsp_encode(&m, data);
	return 0;
}

int rnbd_core_open_msg(int dir, uint32_t datalen, const void *usr, uint32_t usrlen,
		       struct rnbd_open *m)
{
	if (dir != RTRS_READ || datalen < RNBD_OPEN_RSP_LEN)
		return -EINVAL;
	return rnbd_open_decode(usr, usrlen, m) < 0 ? -EINVAL : 0;
}

static struct rnbd_core_dev *dev_get(struct rnbd_core_sess *s, uint32_t id)
{
	return id < s->ndevs && s->devs[id].used ? &s->devs[id] : NULL;
}

/* The smallest free device id (xa_alloc in rnbd_srv_create_set_sess_dev). */
static int dev_alloc(struct rnbd_core_sess *s, uint32_t *id)
{
	struct rnbd_core_dev *nd;
	unsigned nn;

	for (uint32_t i = 0; i < s->ndevs; i++)
		if (!s->devs[i].used) {
			*id = i;
			return 0;
		}
	nn = s->ndevs ? s->ndevs * 2 : 4;
	nd = realloc(s->devs, nn * sizeof(*nd));
	if (!nd)
		return -ENOMEM;
	memset(nd + s->ndevs, 0, (nn - s->ndevs) * sizeof(*nd));
	*id = s->ndevs;
	s->devs = nd;
	s->ndevs = nn;
	return 0;
}

/* rnbd_srv_fill_msg_open_rsp */
static void fill_open_rsp(const struct rnbd_core_export *e, uint32_t id, uint32_t max_io,
			  uint8_t *out)
{
	struct rnbd_open_rsp m = {
		.device_id = id,
		.nsectors = e->size >> 9,
		.max_hw_sectors = max_io >> 9,
		/* WRITE_ZEROES works on every writable export (the driver
		 * punches, zeroes or writes zeros); 6.8+ clients read the
		 * field (blk_queue_max_write_zeroes_sectors), 6.1 clients
		 * ignore it (their WRITE_SAME went in 5.18) */
		.max_write_zeroes_sectors = e->ro ? 0 : RNBD_SRV_MAX_DISCARD,
		.max_discard_sectors = e->discard ? RNBD_SRV_MAX_DISCARD : 0,
		.discard_granularity = e->discard ? e->discard_gran : 0,
		.discard_alignment = 0,
		.physical_block_size = (uint16_t)e->pbs,
		.logical_block_size = (uint16_t)e->lbs,
		.max_segments = RNBD_SRV_MAX_SEGMENTS,
		.secure_discard = 0,
		.obsolete_rotational = 0,
		/* a volatile cache that FLUSH and FUA make durable */
		.cache_policy = RNBD_WRITEBACK | RNBD_FUA,
	};

	rnbd_open_rsp_encode(&m, out);
}

int rnbd_core_open(struct rnbd_core_sess *s, struct rnbd_core_export *e, uint8_t access_mode,
		   uint32_t max_io, void *data)
{
	uint32_t id;
	int rc;

	/* find_srv_sess_dev: opening a device twice gives the same id */
	for (uint32_t i = 0; i < s->ndevs; i++)
		if (s->devs[i].used && s->devs[i].ex == e) {
			fill_open_rsp(e, i, max_io, data);
			return 0;
		}
	if (e->ro && access_mode != RNBD_ACCESS_RO)
		return -EROFS;
	rc = rnbd_check_open_perm(access_mode, &e->writers);
	if (rc < 0)
		return rc;
	if (dev_alloc(s, &id) < 0) {
		rnbd_put_open_perm(access_mode, &e->writers);
		return -ENOMEM;
	}
	s->devs[id] = (struct rnbd_core_dev){ true, access_mode, e };
	e->opens++;
	fill_open_rsp(e, id, max_io, data);
	return 0;
}

/* rnbd_destroy_sess_dev */
static void dev_close(struct rnbd_core_dev *d)
{
	rnbd_put_open_perm(d->mode, &d->ex->writers);
	d->ex->opens--;
	d->used = false;
}

int rnbd_core_close(struct rnbd_core_sess *s, const void *usr, uint32_t usrlen)
{
	struct rnbd_close m;
	struct rnbd_core_dev *d;

	if (rnbd_close_decode(usr, usrlen, &m) < 0)
		return -EINVAL;
	d = dev_get(s, m.device_id);
	if (d)		/* process_msg_close: an unknown id is no error */
		dev_close(d);
	return 0;
}

int rnbd_core_dev_close(struct rnbd_core_sess *s, uint32_t id)
{
	struct rnbd_core_dev *d = dev_get(s, id);

	if (!d)
		return -ENOENT;
	dev_close(d);
	return 0;
}

void rnbd_core_sess_free(struct rnbd_core_sess *s)
{
	for (unsigned i = 0; i < s->ndevs; i++)
		if (s->devs[i].used)
			dev_close(&s->devs[i]);
	free(s->devs);
	s->devs = NULL;
	s->ndevs = 0;
}

int rnbd_core_io(struct rnbd_core_sess *s, int dir, uint32_t datalen, const void *usr,
		 uint32_t usrlen, struct rnbd_core_io *io)
{
	const struct rnbd_core_export *e;
	struct rnbd_io m;
	uint64_t off, len;
	uint32_t op;
	bool write, past;

	if (rnbd_io_decode(usr, usrlen, &m) < 0)
		return -EINVAL;
	*io = (struct rnbd_core_io){ .dev = dev_get(s, m.device_id) };
	if (!io->dev)
		return -ENOTCONN;	/* "I/O request on session ... for unknown device id" */
	e = io->dev->ex;
	op = io->op = rnbd_op(m.rw);
	io->fl = rnbd_flags(m.rw);
	len = io->len = m.bi_size;
	off = io->off = m.sector << 9;
	past = m.sector > (UINT64_MAX >> 9) || off > e->size || len > e->size - off;
	write = op == RNBD_OP_WRITE || op == RNBD_OP_DISCARD || op == RNBD_OP_SECURE_ERASE ||
		op == RNBD_OP_WRITE_ZEROES;
	if (write && (e->ro || io->dev->mode == RNBD_ACCESS_RO))
		return -EROFS;
	if (op != RNBD_OP_FLUSH && past)
		return -EIO;
	/* a device of 4 KiB logical blocks takes no smaller piece: the
	 * kernel's block layer fails such a bio with EIO (bio_unaligned() in
	 * blk_mq_submit_bio) */
	if ((op == RNBD_OP_READ || op == RNBD_OP_WRITE) && e->lbs > 512 &&
	    ((off | len) & (e->lbs - 1)))
		return -EIO;
	switch (op) {
	case RNBD_OP_READ:
		if (dir != RTRS_READ || len > datalen)
			return -EINVAL;
		io->arg = datalen;
		return 0;
	case RNBD_OP_WRITE:
		if (dir != RTRS_WRITE || len > datalen)
			return -EINVAL;
		return 0;
	case RNBD_OP_FLUSH:
		return 0;
	case RNBD_OP_DISCARD:
		if ((off | len) & 511)
			return -EINVAL;
		return e->discard ? 0 : -EOPNOTSUPP;
	case RNBD_OP_WRITE_ZEROES:
		if ((off | len) & 511 || (dir == RTRS_WRITE && datalen && (datalen & 511)))
			return -EINVAL;
		io->arg = dir == RTRS_WRITE ? datalen : 0;
		if (io->arg && len % io->arg)
			return -EINVAL;
		return 0;
	default:		/* SECURE_ERASE: secure_discard is 0 */
		return -EOPNOTSUPP;
	}
}
