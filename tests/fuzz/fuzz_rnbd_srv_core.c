/* The RNBD server's rules (rnbd_srv_core) driven by arbitrary bytes: three
 * sessions over three exports (read-write with discard, read-write without,
 * read-only), a program of SESS_INFO, OPEN, CLOSE, forced closes, session
 * ends and IO messages whose bytes come from the input.  After every step
 * the export counts match the sessions' tables, and an IO that passes the
 * checks stays inside its export, writes only where writing is allowed and
 * fits the buffer it names. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rnbd/rnbd_srv_core.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

#define NSESS 3
#define NEX 3

static struct rnbd_core_export ex[NEX];
static struct rnbd_core_sess ss[NSESS];

static void check_counts(void)
{
	for (unsigned x = 0; x < NEX; x++) {
		unsigned opens = 0, writers = 0;

		for (unsigned i = 0; i < NSESS; i++)
			for (unsigned k = 0; k < ss[i].ndevs; k++) {
				const struct rnbd_core_dev *v = &ss[i].devs[k];

				if (!v->used || v->ex != &ex[x])
					continue;
				opens++;
				writers += v->mode != RNBD_ACCESS_RO;
				if (v->mode > RNBD_ACCESS_MIGRATION || (ex[x].ro && v->mode != RNBD_ACCESS_RO))
					abort();
			}
		if (ex[x].opens != opens || ex[x].writers != writers || writers > 2)
			abort();
		/* one device per export and session */
		for (unsigned i = 0; i < NSESS; i++) {
			unsigned per = 0;

			for (unsigned k = 0; k < ss[i].ndevs; k++)
				per += ss[i].devs[k].used && ss[i].devs[k].ex == &ex[x];
			if (per > 1)
				abort();
		}
	}
}

static void check_io(const struct rnbd_core_sess *s, int dir, uint32_t datalen,
		     const struct rnbd_core_io *io)
{
	const struct rnbd_core_export *e = io->dev->ex;
	bool write = io->op == RNBD_OP_WRITE || io->op == RNBD_OP_DISCARD ||
		     io->op == RNBD_OP_WRITE_ZEROES;

	if (io->dev < s->devs || io->dev >= s->devs + s->ndevs || !io->dev->used)
		abort();
	if (io->op != RNBD_OP_FLUSH && (io->off > e->size || io->len > e->size - io->off))
		abort();
	if (write && (e->ro || io->dev->mode == RNBD_ACCESS_RO))
		abort();
	if (io->op == RNBD_OP_READ && (dir != RTRS_READ || io->len > datalen || io->arg != datalen))
		abort();
	if (io->op == RNBD_OP_WRITE && (dir != RTRS_WRITE || io->len > datalen))
		abort();
	if (io->op == RNBD_OP_DISCARD && (!e->discard || (io->off | io->len) & 511))
		abort();
	if (io->op == RNBD_OP_WRITE_ZEROES && ((io->off | io->len) & 511 || (io->arg && io->len % io->arg)))
		abort();
	if (io->op == RNBD_OP_SECURE_ERASE || io->op >= RNBD_OP_LAST)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	uint8_t out[RNBD_OPEN_LEN];

	memset(ss, 0, sizeof(ss));
	for (unsigned x = 0; x < NEX; x++)
		ex[x] = (struct rnbd_core_export){ .size = (uint64_t)(x + 1) << 16, .lbs = 512,
						   .pbs = 4096, .discard_gran = 4096,
						   .discard = x == 0, .ro = x == 2 };
	while (n >= 2) {
		struct rnbd_core_sess *s = &ss[d[0] % NSESS];
		uint8_t op = d[1];
		struct rnbd_core_io io;
		size_t take = 2;

		d += 2;
		n -= 2;
		switch (op % 7) {
		case 0: {	/* SESS_INFO from the next bytes */
			size_t l = n < RNBD_SESS_INFO_LEN ? n : RNBD_SESS_INFO_LEN;

			if (rnbd_core_sess_info(s, op & 8 ? RTRS_WRITE : RTRS_READ, out, sizeof(out), d,
						l) == 0 && s->ver > RNBD_PROTO_VER_MAJOR)
				abort();
			take = l;
			break;
		}
		case 1:		/* OPEN of an export in a mode */
			if (n < 2)
				goto out;
			rnbd_core_open(s, &ex[d[0] % NEX], d[1] % 4, 1u << 17, out);
			break;
		case 2: {	/* an OPEN message's checks */
			struct rnbd_open m;
			size_t l = n < RNBD_OPEN_LEN ? n : RNBD_OPEN_LEN;

			if (rnbd_core_open_msg(RTRS_READ, RNBD_OPEN_RSP_LEN, d, l, &m) == 0 &&
			    (m.access_mode > RNBD_ACCESS_MIGRATION || !m.dev_name[0]))
				abort();
			take = l;
			break;
		}
		case 3: {	/* a CLOSE message */
			size_t l = n < RNBD_CLOSE_LEN ? n : RNBD_CLOSE_LEN;

			rnbd_core_close(s, d, l);
			take = l;
			break;
		}
		case 4:		/* a forced close of a small id */
			if (n < 1)
				goto out;
			rnbd_core_dev_close(s, d[0] % 8);
			take = 1;
			break;
		case 5:		/* the session ends */
			rnbd_core_sess_free(s);
			take = 0;
			break;
		default: {	/* an IO: direction, buffer length, then the message */
			size_t l;
			uint32_t datalen;
			int dir;

			if (n < 3)
				goto out;
			dir = d[0] & 1 ? RTRS_WRITE : RTRS_READ;
			datalen = (uint32_t)d[1] << 9 | d[2];
			d += 3;
			n -= 3;
			l = n < RNBD_IO_LEN ? n : RNBD_IO_LEN;
			if (rnbd_core_io(s, dir, datalen, d, l, &io) == 0)
				check_io(s, dir, datalen, &io);
			take = l;
			break;
		}
		}
		check_counts();
		if (take > n)
			take = n;
		d += take;
		n -= take;
	}
out:
	for (unsigned i = 0; i < NSESS; i++)
		rnbd_core_sess_free(&ss[i]);
	for (unsigned x = 0; x < NEX; x++)
		if (ex[x].opens || ex[x].writers)
			abort();
	return 0;
}
