/* RDMA device discovery and transport auto-selection (a bare HOST:PORT
 * means RDMA when an active RDMA device exists, sockets otherwise). */
#ifndef XPRT_XDEV_H
#define XPRT_XDEV_H

#include <stdbool.h>
#include <stddef.h>

#include "core/node.h"
#include "core/uri.h"

/* Whether any RDMA device has a port in state ACTIVE.  When none, `why`
 * (may be NULL) gets one plain line: "no RDMA device found (libibverbs:
 * Function not implemented)", "no RDMA device found", "RDMA device rxe0
 * has no active port". */
bool xdev_rdma_available(char *why, size_t whylen);

/* The devices as a list node, one map per (device, port): device, port,
 * state, link_layer, active_mtu, lid, node_guid, and gids: a list of maps
 * {index, gid, type ("IB", "RoCE v1", "RoCE v2"), netdev}.  An empty list
 * when there are none (why is then filled as above).  0 or -errno. */
int xdev_list(struct xnode **out, char *why, size_t whylen);

/* Resolves scheme XURI_AUTO in place: rdma (datagram: ud) when
 * xdev_rdma_available(), tcp (datagram: udp) otherwise.  Other schemes are
 * left alone.  `why` gets a line for -v ("auto: rdma (device rxe0 port 1
 * active)" / "auto: tcp (no RDMA device found)").  Returns 0. */
int xaddr_resolve_auto(struct xuri *u, bool datagram, char *why, size_t whylen);

/* The one-line error for rdma://, ud:// when there is no RDMA device:
 * fills err with "URI: no RDMA device found (...); use tcp://... instead"
 * and returns -ENODEV, or returns 0 when a device is there. */
int xdev_require(const struct xuri *u, char *err, size_t errlen);

#endif
