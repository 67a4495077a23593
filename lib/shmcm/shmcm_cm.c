#include "shmcm/shmcm_cm.h"
#include "shmcm/shmcm_wire.h"

#include <string.h>

void shmcm_cm_init(struct shmcm_cm *cm, uint16_t cno)
{
	memset(cm, 0, sizeof(*cm));
	cm->state = SHMCM_DISCONNECTED;
	cm->cno = cno;
}

static void send_pkt(struct shmcm_cm_out *out, uint32_t type, uint16_t cno)
{
	out->send[out->nsend].con_type = type;
	out->send[out->nsend].cno = cno;
	out->nsend++;
}

/* CONNECTING -> CONNECTED on a CON_REQ (answer with CON_ACK) or CON_ACK. */
static void become_connected(struct shmcm_cm *cm, struct shmcm_cm_out *out,
			     uint16_t peer_cno, bool ack)
{
	cm->alive_count = SHMCM_ALIVE_RESET;
	out->enable_tx = true;
	if (ack)
		send_pkt(out, SHMCM_CON_ACK, cm->cno);
	out->connected = true;
	cm->state = SHMCM_CONNECTED;
	cm->peer_cno = peer_cno;	/* before deliver is enabled */
	cm->resend_req = false;
	cm->fin_sent = cm->fin_rcvd = false;
	out->enable_deliver = true;
}

/* Any state but DISCONNECTED -> DISCONNECTED; CON_RST unless the peer is
 * gone (nobody would read it, and it would sit in the mailbox). */
static void become_disconnected(struct shmcm_cm *cm, struct shmcm_cm_out *out,
				enum shmcm_reason why, bool rst)
{
	out->disable_deliver = true;
	out->disable_tx = true;
	if (rst)
		send_pkt(out, SHMCM_CON_RST, cm->cno);
	out->disconnected = true;
	out->reason = why;
	cm->last_reason = why;
	cm->state = SHMCM_DISCONNECTED;
	cm->resend_req = false;
}

/* Both directions ended: a reset now is the connection's clean end. */
static bool both_done(const struct shmcm_cm *cm)
{
	return cm->fin_sent && cm->fin_rcvd;
}

static void send_con_req(struct shmcm_cm *cm, struct shmcm_cm_out *out)
{
	cm->con_reqs++;
	send_pkt(out, SHMCM_CON_REQ, cm->cno);
}

static void handle_con_pkt(struct shmcm_cm *cm, const struct shmcm_cm_ev *ev,
			   struct shmcm_cm_out *out)
{
	switch (cm->state) {
	case SHMCM_DISCONNECTED:
		/* Nothing is accepted before our own connect down-call. */
		return;
	case SHMCM_CONNECTING:
		if (ev->con_type == SHMCM_CON_REQ)
			become_connected(cm, out, ev->cno, true);
		else if (ev->con_type == SHMCM_CON_ACK)
			become_connected(cm, out, ev->cno, false);
		/* CON_RST, CON_ALV and CON_FIN are ignored while
		 * connecting: they belong to a generation we do not have. */
		return;
	case SHMCM_CONNECTED:
		break;
	}

	/* CONNECTED: packets of another generation are old ones (seed: "cno
	 * ... is used to discard old packets, e.g. after a re-connect"),
	 * except a CON_REQ, which announces a new generation. */
	switch (ev->con_type) {
	case SHMCM_CON_REQ:
		if (ev->cno == cm->peer_cno)
			return;		/* a re-sent request we already answered */
		become_disconnected(cm, out, SHMCM_R_PEER_REQ, true);
		return;
	case SHMCM_CON_ACK:
		return;
	case SHMCM_CON_RST:
		/* clean only when both directions ended at both ends: ours
		 * may have ended on our side without the peer having our
		 * CON_FIN (it reset first: a signal, a failed output) */
		if (ev->cno == cm->peer_cno)
			become_disconnected(cm, out, both_done(cm) && ev->peer_closed ?
					    SHMCM_R_CLOSED : SHMCM_R_PEER_RST, false);
		return;
	case SHMCM_CON_FIN:
		if (ev->cno != cm->peer_cno)
			return;
		cm->alive_count = SHMCM_ALIVE_RESET;
		if (!cm->fin_rcvd) {	/* a second one says nothing new */
			cm->fin_rcvd = true;
			out->peer_fin = true;
		}
		return;
	case SHMCM_CON_ALV:
		if (ev->cno == cm->peer_cno)
			cm->alive_count = SHMCM_ALIVE_RESET;
		return;
	}
}

static void handle_tick(struct shmcm_cm *cm, const struct shmcm_cm_ev *ev,
			struct shmcm_cm_out *out)
{
	switch (cm->state) {
	case SHMCM_DISCONNECTED:
		return;
	case SHMCM_CONNECTING:
		if (cm->resend_req || ev->tx_idle) {
			cm->resend_req = false;
			send_con_req(cm, out);
		}
		return;
	case SHMCM_CONNECTED:
		if (ev->peer_activity)
			cm->alive_count = SHMCM_ALIVE_RESET;
		if (cm->alive_count > 0)
			cm->alive_count--;
		if (cm->alive_count == 0)
			become_disconnected(cm, out, SHMCM_R_TIMEOUT, true);
		else
			send_pkt(out, SHMCM_CON_ALV, cm->cno);
		return;
	}
}

void shmcm_cm_handle(struct shmcm_cm *cm, const struct shmcm_cm_ev *ev,
		     struct shmcm_cm_out *out)
{
	memset(out, 0, sizeof(*out));

	switch (ev->type) {
	case SHMCM_EV_CONNECT:
		/* LINX BUG()s on a connect in any other state; we make it a
		 * no-op so a misbehaving caller cannot crash the process. */
		if (cm->state != SHMCM_DISCONNECTED)
			return;
		cm->cno++;
		cm->state = SHMCM_CONNECTING;
		cm->last_reason = SHMCM_R_NONE;
		cm->fin_sent = cm->fin_rcvd = false;
		send_con_req(cm, out);
		return;
	case SHMCM_EV_DISCONNECT:
		/* Seed: "If the CM isn't in DISCONNECTED state, it should send a
		 * CON_RST before calling disconnected" -- also while
		 * CONNECTING, since our CON_REQ may already have connected the
		 * peer. */
		if (cm->state != SHMCM_DISCONNECTED)
			become_disconnected(cm, out, both_done(cm) ? SHMCM_R_CLOSED : SHMCM_R_LOCAL,
					    true);
		return;
	case SHMCM_EV_SHUTDOWN:
		/* Only a connected end has a direction to close; once. */
		if (cm->state != SHMCM_CONNECTED || cm->fin_sent)
			return;
		cm->fin_sent = true;
		out->shut_tx = true;
		send_pkt(out, SHMCM_CON_FIN, cm->cno);
		return;
	case SHMCM_EV_CON_PKT:
		handle_con_pkt(cm, ev, out);
		return;
	case SHMCM_EV_TICK:
		handle_tick(cm, ev, out);
		return;
	case SHMCM_EV_INTERNAL:
		if (cm->state == SHMCM_CONNECTED)
			become_disconnected(cm, out, SHMCM_R_INTERNAL, true);
		else if (cm->state == SHMCM_CONNECTING)
			cm->resend_req = true;	/* seed's FIXME: start over */
		return;
	case SHMCM_EV_RX_LOST:
		/* Nothing after the gap may reach the user as if it
		 * followed what came before: the connection ends, and the
		 * peer learns it from the reset. */
		if (cm->state == SHMCM_CONNECTED)
			become_disconnected(cm, out, SHMCM_R_RX_LOST, true);
		return;
	case SHMCM_EV_PEER_GONE:
		if (cm->state == SHMCM_CONNECTED)
			become_disconnected(cm, out, SHMCM_R_PEER_GONE, false);
		/* While CONNECTING we keep waiting for a new peer. */
		return;
	}
}

const char *shmcm_state_name(enum shmcm_state s)
{
	switch (s) {
	case SHMCM_DISCONNECTED: return "disconnected";
	case SHMCM_CONNECTING: return "connecting";
	case SHMCM_CONNECTED: return "connected";
	}
	return "unknown";
}

const char *shmcm_reason_str(enum shmcm_reason r)
{
	switch (r) {
	case SHMCM_R_NONE: return "none";
	case SHMCM_R_LOCAL: return "closed locally";
	case SHMCM_R_PEER_RST: return "peer closed the connection";
	case SHMCM_R_PEER_REQ: return "peer re-connected";
	case SHMCM_R_TIMEOUT: return "peer timed out";
	case SHMCM_R_PEER_GONE: return "peer process died";
	case SHMCM_R_INTERNAL: return "deferred queue overflow";
	case SHMCM_R_CLOSED: return "closed after both ends finished";
	case SHMCM_R_RX_LOST: return "dropped data of the peer";
	}
	return "unknown";
}
