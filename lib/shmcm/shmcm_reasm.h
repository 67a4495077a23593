/* Reassembly of fragmented user data (seed 000, "Rx Data Path").  LINX keeps
 * fragments in a 32-entry hash on msgid and trusts every size from shared
 * memory; here every size is checked and memory is bounded: a message may
 * be at most `max_msg` bytes, at most SHMCM_REASM_SLOTS messages are in
 * progress at once, and their buffers together stay under `max_bytes`. */
#ifndef XPRT_SHMCM_REASM_H
#define XPRT_SHMCM_REASM_H

#include <stddef.h>
#include <stdint.h>

#include "shmcm/shmcm_wire.h"

#define SHMCM_REASM_SLOTS 32

struct shmcm_msg {
	uint32_t src, dst;
	const uint8_t *data;
	uint32_t len;
	uint16_t msgid;
};

struct shmcm_reasm_entry {
	uint8_t *buf;		/* NULL: entry free */
	uint32_t size, got;
	uint32_t src, dst;
	uint16_t msgid;
};

struct shmcm_reasm {
	uint32_t max_msg;
	size_t max_bytes, used;
	uint8_t *done;		/* buffer handed out by the last complete message */
	unsigned active;
	uint64_t dropped;	/* fragments dropped (errors below) */
	struct shmcm_reasm_entry e[SHMCM_REASM_SLOTS];
};

void shmcm_reasm_init(struct shmcm_reasm *r, uint32_t max_msg, size_t max_bytes);
/* Frees every partial message (disconnect, new generation). */
void shmcm_reasm_reset(struct shmcm_reasm *r);

/* Feed one decoded UDATA packet.  Returns 1 with *m filled when a message is
 * complete (m->data valid until the next call), 0 when the fragment was
 * stored, or a negative errno when it was dropped:
 *   -EMSGSIZE message larger than max_msg
 *   -ENOBUFS  too many messages in progress, or memory budget exhausted
 *   -EPROTO   fragment inconsistent with the message it continues
 *             (the partial message is dropped too) */
int shmcm_reasm_input(struct shmcm_reasm *r, const struct shmcm_pkt *p,
		      struct shmcm_msg *m);

#endif
