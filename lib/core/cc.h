/* Compiler helpers shared by the per-message paths: helpers inlined where
 * a message must not pay a call for them, and failure branches kept out of
 * the code a message runs through. */
#ifndef XPRT_CORE_CC_H
#define XPRT_CORE_CC_H

/* A small static helper of a per-message path: inlined even where the
 * compiler's size heuristics would keep a call. */
#define XINLINE static inline __attribute__((always_inline))

/* An external function of a per-message path that link-time optimization
 * inlines into its callers in other files as well.  On the definition
 * only: the header's plain declaration keeps it an external definition,
 * so builds without LTO, and other callers, still have the function. */
#define XHOT_INLINE inline __attribute__((always_inline))

/* The rare or failing branch of a hot function, kept out of its code. */
#define XCOLD __attribute__((cold, noinline))

#endif
