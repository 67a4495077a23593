/* The SHMCM connection state machine (seed 000, "The connection state
 * machine"), with no I/O: the caller feeds events with the current state of
 * the world and carries out the returned actions in this order:
 *
 *   disable_deliver, disable_tx   (synchronize the rx/tx shmcm locks)
 *   enable_tx
 *   send[0..nsend)                CON packets, in order
 *   connected / disconnected      up-calls
 *   enable_deliver
 *
 * which is the order LINX's handle_* functions use, so no user data can be
 * sent before the CON_ACK that opens the connection, and none delivered
 * after the disconnected up-call.
 *
 * Two deliberate departures from LINX 2.6.9, both from the seed's FIXMEs:
 * - While CONNECTING, CON_REQ is re-sent on a tick once the peer has taken
 *   every packet we sent without answering (it was not listening yet, or it
 *   dropped our request as stale).  Re-sending only when our ring is drained
 *   keeps an absent peer's mailbox from filling with requests.
 * - Because a request may now arrive twice, a CON_REQ in CONNECTED that
 *   carries the generation we are already connected to is a duplicate and is
 *   ignored; one with another generation still resets the connection.
 *
 * One addition, the half-close (CON_FIN, shmcm_wire.h): a shutdown down-call
 * while CONNECTED sends CON_FIN once and closes our direction; a CON_FIN of
 * the peer's generation closes its direction (peer_fin: every user packet
 * it sent before is delivered by then, since the rx path hands CON packets
 * over in ring order).  The connection stays CONNECTED -- the other
 * direction goes on -- until a disconnect down-call or the peer's CON_RST;
 * once both directions were closed, that disconnect is SHMCM_R_CLOSED, a
 * clean end, instead of SHMCM_R_LOCAL / SHMCM_R_PEER_RST.
 *
 * As in LINX's handle_dc_disconnect(), a disconnect down-call while already
 * DISCONNECTED does nothing (the seed's "always call disconnected" assumes
 * RLNH never disconnects twice without a connect in between; the
 * disconnected up-call was made when the state was left).
 */
#ifndef XPRT_SHMCM_CM_H
#define XPRT_SHMCM_CM_H

#include <stdbool.h>
#include <stdint.h>

enum shmcm_state {
	SHMCM_DISCONNECTED = 1,
	SHMCM_CONNECTING = 2,
	SHMCM_CONNECTED = 3,
};

/* LINX: the connection timer ticks ALIVES_PER_TMO times per con_tmo, and a
 * peer is declared dead when ALIVE_RESET_VALUE ticks pass without a packet
 * from it (4/3 of con_tmo). */
#define SHMCM_ALIVES_PER_TMO   3u
#define SHMCM_ALIVE_RESET      4u
#define SHMCM_TICK_MIN_MS      (100u / SHMCM_ALIVES_PER_TMO)

enum shmcm_cm_event {
	SHMCM_EV_CONNECT,	/* connect down-call */
	SHMCM_EV_DISCONNECT,	/* disconnect down-call */
	SHMCM_EV_CON_PKT,	/* a CON packet from the peer (con_type, cno) */
	SHMCM_EV_TICK,		/* the connection timer */
	SHMCM_EV_INTERNAL,	/* internal error (e.g. deferred queue full) */
	SHMCM_EV_RX_LOST,	/* we dropped user data of the peer (malformed, no memory) */
	SHMCM_EV_PEER_GONE,	/* the peer process is known to be dead */
	SHMCM_EV_SHUTDOWN,	/* shutdown down-call: no more user data from us */
};

enum shmcm_reason {
	SHMCM_R_NONE = 0,
	SHMCM_R_LOCAL,		/* our disconnect down-call */
	SHMCM_R_PEER_RST,	/* peer sent CON_RST */
	SHMCM_R_PEER_REQ,	/* peer re-connected (CON_REQ of a new generation) */
	SHMCM_R_TIMEOUT,	/* nothing from the peer for the connection timeout */
	SHMCM_R_PEER_GONE,	/* peer process died */
	SHMCM_R_INTERNAL,	/* internal error, e.g. deferred queue overflow */
	SHMCM_R_CLOSED,		/* closed after both directions ended (CON_FIN both ways) */
	SHMCM_R_RX_LOST,	/* we dropped user data of the peer: the stream has a gap */
};

struct shmcm_cm_ev {
	enum shmcm_cm_event type;
	uint32_t con_type;	/* SHMCM_EV_CON_PKT */
	uint16_t cno;		/* SHMCM_EV_CON_PKT */
	bool peer_activity;	/* SHMCM_EV_TICK: peer sent something since last tick */
	bool tx_idle;		/* SHMCM_EV_TICK: peer has consumed all we sent */
	/* SHMCM_EV_CON_PKT CON_RST: the peer recorded its reset as a clean
	 * close (it had our CON_FIN too), in the mailbox before sending it */
	bool peer_closed;
};

struct shmcm_cm_out {
	bool disable_deliver, disable_tx, enable_tx, enable_deliver;
	bool connected, disconnected;
	bool shut_tx;			/* our CON_FIN is in send[]: no user data after it */
	bool peer_fin;			/* the peer's CON_FIN: up-call eof */
	enum shmcm_reason reason;	/* with disconnected */
	unsigned nsend;
	struct { uint32_t con_type; uint16_t cno; } send[2];
};

struct shmcm_cm {
	enum shmcm_state state;
	uint16_t cno;		/* our generation, incremented on connect */
	uint16_t peer_cno;	/* saved from the CON_REQ/CON_ACK that connected */
	uint32_t alive_count;
	uint32_t con_reqs;	/* CON_REQs sent, re-sends included */
	bool resend_req;	/* internal error while CONNECTING */
	bool fin_sent;		/* this generation: our CON_FIN sent */
	bool fin_rcvd;		/* ... the peer's CON_FIN received */
	enum shmcm_reason last_reason;
};

/* `cno` is the last generation used on this side (kept in the mailbox so a
 * restarted process does not reuse one). */
void shmcm_cm_init(struct shmcm_cm *cm, uint16_t cno);
void shmcm_cm_handle(struct shmcm_cm *cm, const struct shmcm_cm_ev *ev,
		     struct shmcm_cm_out *out);

const char *shmcm_state_name(enum shmcm_state s);
const char *shmcm_reason_str(enum shmcm_reason r);

#endif
