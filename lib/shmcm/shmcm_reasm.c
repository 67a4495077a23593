#include "shmcm/shmcm_reasm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void shmcm_reasm_init(struct shmcm_reasm *r, uint32_t max_msg, size_t max_bytes)
{
	memset(r, 0, sizeof(*r));
	r->max_msg = max_msg;
	r->max_bytes = max_bytes;
}

static void entry_free(struct shmcm_reasm *r, struct shmcm_reasm_entry *e)
{
	free(e->buf);
	r->used -= e->size;
	r->active--;
	memset(e, 0, sizeof(*e));
}

static void release_done(struct shmcm_reasm *r)
{
	free(r->done);
	r->done = NULL;
}

void shmcm_reasm_reset(struct shmcm_reasm *r)
{
	release_done(r);
	for (unsigned i = 0; i < SHMCM_REASM_SLOTS; i++)
		if (r->e[i].buf)
			entry_free(r, &r->e[i]);
}

static struct shmcm_reasm_entry *lookup(struct shmcm_reasm *r, uint16_t msgid)
{
	if (r->active == 0)
		return NULL;
	for (unsigned i = 0; i < SHMCM_REASM_SLOTS; i++)
		if (r->e[i].buf && r->e[i].msgid == msgid)
			return &r->e[i];
	return NULL;
}

static int drop(struct shmcm_reasm *r, int err)
{
	r->dropped++;
	return err;
}

int shmcm_reasm_input(struct shmcm_reasm *r, const struct shmcm_pkt *p,
		      struct shmcm_msg *m)
{
	struct shmcm_reasm_entry *e;

	release_done(r);
	e = lookup(r, p->u.msgid);

	if (e) {
		/* Every fragment repeats the whole uhdr; a continuation must
		 * agree with the first fragment and must fit. */
		if (p->u.size != e->size || p->u.src != e->src ||
		    p->u.dst != e->dst || p->data_len > e->size - e->got ||
		    p->data_len == 0) {
			entry_free(r, e);
			return drop(r, -EPROTO);
		}
		memcpy(e->buf + e->got, p->data, p->data_len);
		e->got += p->data_len;
		if (e->got < e->size)
			return 0;
		m->src = e->src;
		m->dst = e->dst;
		m->msgid = e->msgid;
		m->len = e->size;
		m->data = r->done = e->buf;
		/* ownership of the buffer moves to r->done */
		r->used -= e->size;
		r->active--;
		memset(e, 0, sizeof(*e));
		return 1;
	}

	if (p->data_len == p->u.size) {
		/* Not fragmented: deliver straight from the packet. */
		m->src = p->u.src;
		m->dst = p->u.dst;
		m->msgid = p->u.msgid;
		m->len = p->data_len;
		m->data = p->data;
		return 1;
	}

	/* First fragment of a new message. */
	if (p->u.size > r->max_msg)
		return drop(r, -EMSGSIZE);
	if (p->data_len == 0)
		return drop(r, -EPROTO);
	if (r->active == SHMCM_REASM_SLOTS || p->u.size > r->max_bytes - r->used)
		return drop(r, -ENOBUFS);
	for (unsigned i = 0; i < SHMCM_REASM_SLOTS; i++) {
		if (r->e[i].buf)
			continue;
		e = &r->e[i];
		e->buf = malloc(p->u.size);
		if (!e->buf)
			return drop(r, -ENOBUFS);
		e->size = p->u.size;
		e->src = p->u.src;
		e->dst = p->u.dst;
		e->msgid = p->u.msgid;
		memcpy(e->buf, p->data, p->data_len);
		e->got = p->data_len;
		r->used += e->size;
		r->active++;
		return 0;
	}
	return drop(r, -ENOBUFS);	/* not reached: active < SLOTS */
}
