/* YAML config files (libyaml's parser) into an xnode tree.
 *
 * The core is sans-I/O: xconf_parse takes the text, so the fuzzer drives it
 * directly (in tests too); xconf_load is the thin file-reading wrapper.
 *
 * The top level must be a mapping (an empty document is an empty map).
 * Scalars become XN_STR whatever they look like; callers convert with
 * xnode_to_u64() and friends, so "0x10" or "4k" mean what the option says.
 * Map members carry the line of their key, list items their own line. */
#ifndef XPRT_CORE_CONF_H
#define XPRT_CORE_CONF_H

#include <stddef.h>

#include "core/node.h"

#define XCONF_MAX_DEPTH 32
#define XCONF_MAX_NODES 100000
#define XCONF_MAX_FILE  (4u << 20)

/* NULL on error with "line L column C: problem" in err.  Anchors, aliases,
 * multiple documents, non-scalar keys, NUL characters in scalars, nesting
 * deeper than 32 and more than 100000 nodes are rejected, and so are
 * duplicate keys (naming the key and both lines). */
struct xnode *xconf_parse(const char *buf, size_t len, char *err, size_t errlen);

/* Reads path (at most 4 MiB) and parses it; err is prefixed with "path: ".
 * errno is set on I/O errors (EFBIG when too large, EINVAL for bad YAML). */
struct xnode *xconf_load(const char *path, char *err, size_t errlen);

#endif
