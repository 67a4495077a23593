/* One entry point for every structured output: aligned text for humans,
 * YAML (libyaml's emitter) and JSON for programs. */
#ifndef XPRT_CORE_EMIT_H
#define XPRT_CORE_EMIT_H

#include <stdio.h>

#include "core/node.h"

enum xfmt { XFMT_TEXT, XFMT_YAML, XFMT_JSON };

/* "text" | "yaml" | "json": 0, or -1 for anything else. */
int xfmt_parse(const char *s, enum xfmt *out);

/* Writes root to f and flushes it.  0, or -errno (-EIO when the stream
 * reports an error, -EINVAL for a NULL root, -EILSEQ for a string that is
 * not UTF-8 in YAML).
 *
 * TEXT: a map of scalars is "key  value" lines, keys padded to the longest
 * key + 2; a nested map or list is "key:" then its content indented by 2; a
 * list of maps is a table (header = the first element's keys upper-cased,
 * missing cells "-"); a list of scalars is one per line.  Booleans print
 * yes/no, null and empty containers "-", control characters '?'. */
int xemit(FILE *f, const struct xnode *root, enum xfmt fmt);
/* The errno of the last xemit() whose output could not be written (0:
 * none): a caller that looks later, when errno is another call's. */
extern int xemit_errno;

#endif
