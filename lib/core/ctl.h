/* Control sockets: a running tool (rtrs-server, an rtrs-client session)
 * answers one-line commands on a unix stream socket, so `TOOL status` or
 * `rtrs-client path add ...` from another shell reach it.
 *
 * Protocol (one exchange per connection): the client writes the arguments,
 * each terminated by '\0', then an empty argument ('\0' alone); at most
 * XCTL_MAX_ARGS arguments, XCTL_MAX_REQ bytes.  The server answers one
 * line "STATUS\n" (the decimal exit status the command would have) and then
 * the command's output, and closes.  The socket file is mode 0600 in a
 * directory only the user can enter: the caller's permissions are the
 * only access check.
 *
 * Default place: $XDG_RUNTIME_DIR/xprt/NAME.sock, else /tmp/xprt-UID/NAME.sock.
 */
#ifndef XPRT_CORE_CTL_H
#define XPRT_CORE_CTL_H

#include <stddef.h>
#include <stdio.h>

#define XCTL_MAX_ARGS 32
#define XCTL_MAX_REQ 4096

struct xctl;

/* Fills buf with the default socket path for `name` (e.g.
 * "rtrs-client-SESSION"), creating its directory (0700) if needed: DIR/
 * NAME.sock, or where that is too long for a socket, DIR/START~HASH.sock
 * (the name's start and a 64-bit hash of all of it).  0, or -errno
 * (-ENAMETOOLONG, or the mkdir's). */
int xctl_default_path(const char *name, char *buf, size_t len);

/* Listens on `path` (a stale socket left by a dead process is replaced;
 * one a live process answers on is not: -EADDRINUSE).  NULL + err. */
struct xctl *xctl_listen(const char *path, char *err, size_t errlen);
/* Readable (poll or epoll, level-triggered) when xctl_poll() has work: a
 * new client, a request or room for an answer, or a client's deadline. */
int xctl_fd(const struct xctl *c);
const char *xctl_path(const struct xctl *c);

/* What a command does: writes its output to out, returns the exit status. */
typedef int (*xctl_handler)(void *ctx, int argc, char **argv, FILE *out);

/* Takes every exchange as far as it goes without waiting, and never
 * blocks: accepts new clients, runs the commands whose request is whole,
 * sends what the sockets take of the answers.  At most 16 exchanges at
 * once: a new client pushes out the oldest one still sending its request
 * once that one is 250 ms old, and waits in the listen backlog until then
 * (or, out of fds, until an exchange ends).  A client that does not send
 * its request within 1 s, or stops reading its answer for 10 s, is
 * dropped.  Returns the number of commands run, or -errno for a listener
 * failure. */
int xctl_poll(struct xctl *c, xctl_handler fn, void *ctx);

/* Closes and unlinks the socket; answers still being sent get up to a
 * second to go.  NULL ok. */
void xctl_close(struct xctl *c);

/* Client side: runs argv on the server at path, copies its output to out.
 * Returns the command's exit status (>= 0), or -errno with a message in err
 * ("no such session: PATH" for a missing socket, -ECONNREFUSED when nobody
 * answers, -ETIMEDOUT when a process is there and says nothing for
 * XCTL_CALL_TIMEOUT_S: stopped, or wedged). */
#define XCTL_CALL_TIMEOUT_S 5
int xctl_call(const char *path, int argc, char *const *argv, FILE *out, char *err,
	      size_t errlen);

#endif
