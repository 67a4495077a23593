/* The client side shared by ping and bw: one host, one connection to the
 * server's host, one port, and the control exchange of probe_wire.h. */
#ifndef XPROBE_CLIENT_H
#define XPROBE_CLIENT_H

#include "cmd.h"
#include "probe/probe_wire.h"

struct pclient {
	const char *cmd;
	struct xp_host *h;
	struct xp_port *p;
	uint32_t node;
	char target[300];
	uint64_t spin_ns;
	uint32_t server_max;	/* from the last SETUP reply */
	bool lost;		/* the connection failed */
	enum xp_status ctl_failed;	/* how a control send failed */
	enum xp_status failed;	/* first failed data send, XP_SUCCESS if none */
	_Alignas(64) uint8_t ctl_rx[2][64];
	uint8_t ctl_tx[PROBE_CTL_LEN];
};

/* What ping and bw share on the command line. */
struct common_opts {
	uint64_t spin_ns;	/* --spin */
	enum xp_prio prio;	/* --prio */
	bool prio_set;
	bool quiet, verbose;	/* -q, -v */
	enum xfmt fmt;		/* -o */
};
#define COMMON_OPTS_DEFAULT { .spin_ns = 50000, .prio = XP_LOW, .fmt = XFMT_TEXT }
/* getopt_long codes of the shared long options */
enum { OPT_SPIN = 'S', OPT_PRIO = 'P' };

/* One getopt result: 1 handled, 0 not a shared option, or EXIT_USAGE. */
int common_opt(const char *cmd, int c, const char *arg, struct common_opts *co);
/* EXIT_USAGE after one line: option opt does not apply to u's datagrams. */
int needs_ports(const char *cmd, const char *opt, const struct xuri *u);
/* The one URI operand after the options (AUTO resolved, -v says so). */
int one_target(const char *cmd, int argc, char **argv, bool verbose, struct xuri *u);
/* The local end for talking to a datagram peer: any address of its family. */
void dg_local(const struct xuri *peer, struct xuri *local);

/* Connects and opens the client port.  EXIT_OK or EXIT_FAIL (printed).
 * `window`: data messages the caller will keep in flight;
 * `send_timeout_ns`: how long a send waits for a buffer at the receiver
 * before it fails with XP_SEND_TIMED_OUT (0: the library's 10 s). */
int pclient_open(struct pclient *c, const char *cmd, const struct xuri *u, uint64_t spin_ns,
		 uint32_t window, uint64_t send_timeout_ns);
/* SETUP service (ECHO or SINK) for `window` messages of `size` bytes at
 * prio.  EXIT_OK, or EXIT_FAIL with the server's reason printed. */
int pclient_setup(struct pclient *c, unsigned service, uint32_t size, enum xp_prio prio,
		  uint32_t window);
/* STATS of the sink for our port.  EXIT_OK or EXIT_FAIL. */
int pclient_stats(struct pclient *c, uint64_t *msgs, uint64_t *bytes);
/* Waits for the next message that is not a control reply: 1 with *ev, or
 * 2 when the port's send callbacks or alarms ran instead (xp_unknown), 0
 * timeout, -EINTR, -ENOTCONN (connection lost). */
int pclient_wait(struct pclient *c, struct xp_event *ev, uint64_t timeout_ns);
/* The same until `until` (xtime_ns() clock), spinning until spin_until:
 * for a caller that has just read the clock. */
int pclient_wait_until(struct pclient *c, struct xp_event *ev, uint64_t until,
		       uint64_t spin_until);
void pclient_close(struct pclient *c);

/* Send callback for data messages whose completion only matters when it
 * fails: records the failure (ctx = the pclient). */
void pclient_sent(struct xp_port *p, void *ctx, enum xp_status st);

#endif
