/* The xprobe server's rules (probe_srv) on arbitrary bytes: a program of
 * control messages, sink messages, replies begun and ended, and datagrams
 * from a few senders.  Every answer is well formed; a SETUP asks for
 * buffers only within the limits; STATS answers exactly what the sink
 * counted for that client since its last SETUP (kept alongside); a node
 * never has more than PROBE_CTL_PER_NODE replies waiting; a PING's answer
 * is the PING with the type changed. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "probe/probe_srv.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static struct probe_srv ps;
static struct probe_dgsrv dg;
static uint64_t want_msgs[4][4], want_bytes[4][4];
static unsigned waiting[4];

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	static const int senders[3];
	uint8_t out[PROBE_DG_STATS_LEN + 256];

	probe_srv_init(&ps, 4096);
	memset(&dg, 0, sizeof(dg));
	memset(want_msgs, 0, sizeof(want_msgs));
	memset(want_bytes, 0, sizeof(want_bytes));
	memset(waiting, 0, sizeof(waiting));
	while (n >= 2) {
		uint8_t op = d[0], a = d[1];
		uint32_t node = a & 3;
		unsigned port = (a >> 2) & 3;
		size_t take = 2;

		switch (op % 5) {
		case 0: {	/* a control message: structured, or raw bytes */
			struct probe_ctl_act act;
			struct probe_ctl c = { .type = (uint8_t)(1 + (a >> 4) % 4),
					       .service = (uint8_t)((a >> 6) & 1) };
			uint8_t b[PROBE_CTL_LEN];
			size_t len = PROBE_CTL_LEN;
			int rc;

			if (n < 6)
				goto out;
			c.size = (uint32_t)d[2] << 8 | d[3];
			c.window = (uint32_t)d[4] << 8 | d[5];
			probe_ctl_encode(&c, b);
			take = 6;
			if (op & 0x80) {
				len = n - 6 < PROBE_CTL_LEN ? n - 6 : PROBE_CTL_LEN;
				memcpy(b, d + 6, len);
				take += len;
			}
			rc = probe_srv_ctl(&ps, b, len, node, port, &act);
			if (rc == 0) {
				const struct probe_ctl *q = &act.req, *r = &act.rep;

				if (q->type == PROBE_SETUP_REQ) {
					if (r->type != PROBE_SETUP_REP ||
					    (act.buffers && (q->size > ps.max_size || !q->window ||
							     q->window > PROBE_WINDOW_MAX || r->status)) ||
					    (!act.buffers && !r->status) ||
					    act.buffers > 2 * PROBE_WINDOW_MAX + 2 + PROBE_SHARE_SLACK)
						abort();
					if (q->service == PROBE_PORT_SINK)
						want_msgs[node][port] = want_bytes[node][port] = 0;
				} else if (q->type == PROBE_STATS_REQ) {
					if (r->type != PROBE_STATS_REP || r->msgs != want_msgs[node][port] ||
					    r->bytes != want_bytes[node][port])
						abort();
				} else {
					abort();	/* only requests are answered */
				}
			} else if (rc == -EBADMSG &&
				   (act.req.type == PROBE_SETUP_REQ || act.req.type == PROBE_STATS_REQ)) {
				abort();
			}
			break;
		}
		case 1:		/* a message on the sink */
			probe_srv_sink(&ps, node, port, (uint32_t)a * 3);
			want_msgs[node][port]++;
			want_bytes[node][port] += (uint32_t)a * 3;
			break;
		case 2:		/* a reply about to go */
			if (probe_srv_reply_begin(&ps, node)) {
				if (++waiting[node] > PROBE_CTL_PER_NODE)
					abort();
			} else if (waiting[node] < PROBE_CTL_PER_NODE) {
				abort();
			}
			break;
		case 3:		/* a reply gone */
			probe_srv_reply_end(&ps, node);
			if (waiting[node])
				waiting[node]--;
			break;
		default: {	/* a datagram from one of three senders */
			size_t len = n - 2 < 256 ? n - 2 : 256;
			int r = probe_dg_input(&dg, &senders[a % 3], d + 2, (uint32_t)len, a, out);
			struct probe_dg in, rep;

			take += len;
			if (r < 0)
				break;
			if (probe_dg_decode(d + 2, len, &in) < 0)
				abort();
			if (r > 0 && in.type == PROBE_DG_PING &&
			    ((size_t)r != len || probe_dg_decode(out, len, &rep) ||
			     rep.type != PROBE_DG_PONG || rep.seq != in.seq ||
			     memcmp(out + PROBE_DG_HDR, d + 2 + PROBE_DG_HDR, len - PROBE_DG_HDR)))
				abort();
			if (r > 0 && in.type == PROBE_DG_STATS_REQ &&
			    (r != PROBE_DG_STATS_LEN || probe_dg_decode(out, PROBE_DG_STATS_LEN, &rep) ||
			     rep.type != PROBE_DG_STATS_REP || rep.session != in.session))
				abort();
			break;
		}
		}
		if (take > n)
			take = n;
		d += take;
		n -= take;
	}
out:
	return 0;
}
