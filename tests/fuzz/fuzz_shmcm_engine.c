/* The engine's packet input, as the runtime drives it: a stream of slots
 * (2-byte length each) is decoded; CON packets and timer ticks go to the
 * state machine, user data of the current generation to reassembly.
 * Invariants: the state machine stays in a valid state and its output is
 * consistent; reassembly never exceeds its memory budget. */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shmcm/shmcm_cm.h"
#include "shmcm/shmcm_reasm.h"
#include "shmcm/shmcm_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

#define MRU 512

static void check_out(const struct shmcm_cm *cm, const struct shmcm_cm_out *o)
{
	assert(cm->state >= SHMCM_DISCONNECTED && cm->state <= SHMCM_CONNECTED);
	assert(o->nsend <= 2);
	assert(!(o->connected && o->disconnected));
	if (o->connected)
		assert(cm->state == SHMCM_CONNECTED && o->enable_tx && o->enable_deliver);
	if (o->disconnected)
		assert(cm->state == SHMCM_DISCONNECTED && o->disable_tx && o->disable_deliver);
	for (unsigned i = 0; i < o->nsend; i++)
		assert(o->send[i].con_type >= SHMCM_CON_REQ && o->send[i].con_type <= SHMCM_CON_FIN);
	/* half-close: CON_FIN only from a connected end, once a generation;
	 * the peer's only in CONNECTED; a clean end only after both */
	if (o->shut_tx)
		assert(cm->state == SHMCM_CONNECTED && cm->fin_sent && o->nsend == 1 &&
		       o->send[0].con_type == SHMCM_CON_FIN && !o->disconnected);
	for (unsigned i = 0; i < o->nsend; i++)
		if (o->send[i].con_type == SHMCM_CON_FIN)
			assert(o->shut_tx);
	if (o->peer_fin)
		assert(cm->state == SHMCM_CONNECTED && cm->fin_rcvd && !o->disconnected);
	if (o->disconnected && o->reason == SHMCM_R_CLOSED)
		assert(cm->fin_sent && cm->fin_rcvd);
	/* a lost packet resets: the peer must hear of it */
	if (o->disconnected && o->reason == SHMCM_R_RX_LOST)
		assert(o->nsend == 1 && o->send[0].con_type == SHMCM_CON_RST);
}

/* One event into the state machine; the deliver gate follows its output
 * as the runtime's deliver lock does, and closes after the peer's CON_FIN
 * as the runtime's rx_fin does. */
static void feed(struct shmcm_cm *cm, const struct shmcm_cm_ev *ev,
		 struct shmcm_reasm *r, bool *deliver)
{
	struct shmcm_cm_out o;
	bool was_sent = cm->fin_sent;

	shmcm_cm_handle(cm, ev, &o);
	check_out(cm, &o);
	if (ev->type == SHMCM_EV_SHUTDOWN)
		assert(o.shut_tx == (!was_sent && cm->state == SHMCM_CONNECTED));
	if (o.peer_fin)
		*deliver = false;
	if (o.disable_deliver)
		*deliver = false;
	if (o.enable_deliver) {
		shmcm_reasm_reset(r);
		*deliver = true;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct shmcm_cm cm;
	struct shmcm_reasm r;
	struct shmcm_cm_ev ev;
	bool deliver = false;

	shmcm_cm_init(&cm, 0);
	shmcm_reasm_init(&r, 4096, 3 * 4096);
	ev = (struct shmcm_cm_ev){ .type = SHMCM_EV_CONNECT };
	feed(&cm, &ev, &r, &deliver);

	while (n >= 2) {
		size_t len = (size_t)(d[0] & 0x3f) << 8 | d[1];
		uint8_t ctl = d[0] >> 6;
		d += 2;
		n -= 2;
		if (ctl) {
			/* 1: tick, 2: down-call (connect, disconnect,
			 * shutdown), 3: internal/peer gone/data lost */
			ev = (struct shmcm_cm_ev){ .type = SHMCM_EV_TICK,
						   .peer_activity = len & 1, .tx_idle = len & 2 };
			if (ctl == 2)
				ev.type = len & 8 ? SHMCM_EV_SHUTDOWN :
					  len & 4 ? SHMCM_EV_DISCONNECT : SHMCM_EV_CONNECT;
			else if (ctl == 3)
				ev.type = len & 8 ? SHMCM_EV_RX_LOST :
					  len & 4 ? SHMCM_EV_INTERNAL : SHMCM_EV_PEER_GONE;
			feed(&cm, &ev, &r, &deliver);
			continue;
		}
		if (len > n)
			len = n;
		uint8_t *slot = malloc(len ? len : 1);
		memcpy(slot, d, len);
		struct shmcm_pkt p;
		if (shmcm_decode(slot, len, MRU, &p) == SHMCM_OK) {
			if (p.type == SHMCM_CON_PKT) {
				ev = (struct shmcm_cm_ev){ .type = SHMCM_EV_CON_PKT,
							   .con_type = p.con.type, .cno = p.con.cno,
							   .peer_closed = p.con.cno & 1 };
				feed(&cm, &ev, &r, &deliver);
			} else if (deliver && p.u.cno == cm.peer_cno) {
				struct shmcm_msg m;
				int rc = shmcm_reasm_input(&r, &p, &m);
				if (rc == 1) {
					volatile uint8_t sink = 0;
					for (uint32_t i = 0; i < m.len; i++)
						sink ^= m.data[i];
					(void)sink;
				}
				assert(r.used <= r.max_bytes);
				assert(r.active <= SHMCM_REASM_SLOTS);
			}
		}
		free(slot);
		d += len;
		n -= len;
	}
	shmcm_reasm_reset(&r);
	return 0;
}
