/* Transport addresses, as URIs:
 *   shm://NAME  tcp://HOST:PORT  udp://HOST:PORT  rdma://HOST:PORT
 *   ud://HOST:PORT  and bare HOST:PORT (scheme AUTO: RDMA when present).
 * IPv6 literals go in brackets: tcp://[::1]:7000, [fe80::1%eth0]:7000.
 * A connection may name the local address it leaves from, as the kernel's
 * RTRS path=[src@]dst: tcp://SRC@HOST:PORT, rdma://[fe80::1%eth1]@[...]:P
 * (SRC an IP literal; tcp, rdma and bare addresses only).  rdma:// also
 * takes InfiniBand addresses, as the kernel's "gid:" paths: a GID in
 * brackets after "gid:", rdma://[gid:fe80::2:c903:a:1]:1234, and as SRC,
 * and [gid:::] to listen on any. */
#ifndef XPRT_CORE_URI_H
#define XPRT_CORE_URI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum xuri_scheme { XURI_AUTO, XURI_SHM, XURI_TCP, XURI_UDP, XURI_RDMA, XURI_UD };

#define XURI_SHM_NAME_MAX 100

struct xuri {
	enum xuri_scheme scheme;
	char host[256]; /* hostname or IP literal, without [] for IPv6; "gid:GID" */
	uint16_t port;
	char name[128]; /* shm:// only */
	char src[64];	/* local IP literal (or "gid:GID") to connect from ("" none), no [] */
};

/* Schemes are matched case-insensitively.  Hosts are 1..255 characters of
 * [A-Za-z0-9._-] (an empty host is rejected: say 0.0.0.0 or [::] for "any").
 * shm names are 1..100 characters of [A-Za-z0-9._-], not starting with '.'
 * or '-'.  The port may be omitted when default_port != 0; port 0 means
 * "any free port" to a listener.
 * Returns 0, or -EINVAL with a message naming the problem in err (which may
 * be NULL).  *u is zeroed first. */
int xuri_parse(const char *s, uint16_t default_port, struct xuri *u, char *err, size_t errlen);
/* Whether host (or src) of an xuri is an InfiniBand address, "gid:GID". */
bool xuri_is_gid(const char *host);
/* "shm", "tcp", "udp", "rdma", "ud", "auto"; "?" for values out of range. */
const char *xuri_scheme_name(enum xuri_scheme s);
/* Canonical form: lower-case scheme (none for AUTO), brackets around hosts
 * containing ':', always a port.  Returns 0, -ENOSPC when buf is too small
 * (buf then holds a truncated string), -EINVAL for a bad scheme. */
int xuri_format(const struct xuri *u, char *buf, size_t len);

#endif
