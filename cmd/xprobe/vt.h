/* Verbs tests: perftest's operations (RDMA write, RDMA read, send; with or
 * without an immediate; inline or not) on a bare reliable connection --
 * tcp:// or rdma://, xrc.h -- to an xprobe server, for ping (latency, one
 * at a time) and bw (bandwidth, `depth` in flight).  The setup messages are
 * probe_wire.h's struct probe_vt and probe_vt_mem. */
#ifndef XPROBE_VT_H
#define XPROBE_VT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/uri.h"
#include "probe/probe_wire.h"
#include "xprt/xrc.h"

struct vt_opts {
	enum probe_vt_op op;	/* 0: no verbs test */
	bool imm;		/* --imm */
	bool lat;		/* ping (one at a time) rather than bw */
	uint32_t inline_max;	/* --inline: bytes (0: never inline) */
	bool inline_set;
	uint32_t size, depth;
};

/* getopt_long codes of --op, --imm, --inline (ping and bw). */
enum { OPT_VT_OP = 0x200, OPT_VT_IMM, OPT_VT_INLINE };
#define VT_LONG_OPTS \
	{ "op", required_argument, NULL, OPT_VT_OP }, \
	{ "imm", no_argument, NULL, OPT_VT_IMM }, \
	{ "inline", required_argument, NULL, OPT_VT_INLINE }
/* One getopt result: 1 handled, 0 not ours, or EXIT_USAGE. */
int vt_opt(const char *cmd, int c, const char *arg, struct vt_opts *o);
/* The checks that need the target: EXIT_OK or EXIT_USAGE. */
int vt_check(const char *cmd, const struct vt_opts *o, const struct xuri *u);

/* "write", "read", "send" -> op, or 0. */
enum probe_vt_op vt_op_parse(const char *s);
const char *vt_op_name(enum probe_vt_op op);
const char *vt_op_title(enum probe_vt_op op);	/* "RDMA write", ..., "send" */

/* --- client ----------------------------------------------------------------- */
struct vt_client;

/* Connects, exchanges buffers.  EXIT_OK, or EXIT_FAIL after saying why. */
int vt_open(struct vt_client **out, const char *cmd, const struct xuri *u,
	    const struct vt_opts *o);
/* One measured operation (ping): the round trip (write, send: the peer's
 * answer; read: the read's completion) in *ns.  0, -ETIMEDOUT (nothing
 * within timeout_ns), -EIO after saying why. */
int vt_once(struct vt_client *c, uint64_t timeout_ns, uint64_t *ns);
/* Operations in flight for secs_ns (bw): what completed, and when the
 * last did.  0, -EINTR (stopped: the counts so far), -EIO after saying
 * why. */
int vt_stream(struct vt_client *c, uint64_t secs_ns, uint64_t *msgs, uint64_t *bytes,
	      uint64_t *last_ns);
/* Reads the server's buffer back -- answered after everything sent before
 * it, so it also says all of that arrived -- and compares it with what our
 * writes left there, or with what a read test must find: 0, or -EIO after
 * saying why. */
int vt_verify(struct vt_client *c);
const char *vt_target(const struct vt_client *c);
uint32_t vt_inline(const struct vt_client *c);	/* bytes posted inline at most */
void vt_close(struct vt_client *c);		/* NULL ok */

/* --- server ------------------------------------------------------------------ */
struct vt_server;

struct vt_server *vt_server_new(uint64_t *mem_used, uint64_t mem_max, uint32_t max_size,
				bool verbose);
/* The port host's foreign-request hook (xp_host_set_foreign): takes verbs
 * test requests, leaves anything else. */
bool vt_server_take(void *arg, struct xrc_req *r);
/* Runs every session once: >0 when something was done, or when a session
 * needs the caller to keep polling (a write latency test watches memory,
 * which nothing signals). */
int vt_server_poll(struct vt_server *s);
/* Before sleeping: arms every session's fd; true when one has work now. */
bool vt_server_arm(struct vt_server *s);
/* The fds of new sessions to add to the caller's wait set, once each:
 * returns one, or -1. */
int vt_server_new_fd(struct vt_server *s);
void vt_server_free(struct vt_server *s);

#endif
