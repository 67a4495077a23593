/* What the two halves of the tcp:// backend share: xrc_tcp.c (the domain,
 * the data path, connection objects) and xrc_tcp_cm.c (connection setup:
 * connect, the listener, accept and reject). */
#ifndef XPRT_XRC_TCP_PRI_H
#define XPRT_XRC_TCP_PRI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "xprt/xrc_pri.h"
#include "core/log.h"

/* Fills the caller's error buffer (every function here has err, errlen). */

/* A connection, XRC_UP, over a socket whose setup frames are exchanged:
 * the socket is made non-blocking and owned from here on (closed on
 * failure).  peer_* come from the peer's CONN_REQ or CONN_ACC; peer is the
 * name for messages.  NULL with errno and err set on failure. */
struct xrc *xtcp_conn_new(int fd, const struct xrc_opts *o, uint32_t peer_max_send,
			  uint32_t peer_sq_depth, const char *peer, char *err, size_t errlen);

/* The listener keeps this many half-read connect requests; when all are
 * taken, the oldest gives way to a newcomer once it is this old. */
#define XTCP_PENDING_MAX	64
#define XTCP_PENDING_GRACE_NS	1000000000ull

/* Tests only: the tcp domain acts as a device without memory windows
 * (xrc_win_new and xrc_req_windows fail with EOPNOTSUPP). */
extern _Atomic bool xtcp_test_no_windows;

#endif
