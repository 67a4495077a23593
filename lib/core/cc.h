/* Compiler helpers shared by the hot paths. */
#ifndef XPRT_CORE_CC_H
#define XPRT_CORE_CC_H

/* Why calls are counted on the per-message paths: a call and its return
 * are cheap on hardware, but under binary translation (the Soft-RoCE VM,
 * qemu TCG) each is a jump through a target look-up, and the look-up
 * cache does not survive the kernel's work of sending a message -- every
 * distinct function a round trip calls costs ~70 ns there, while the same
 * code inlined costs nothing measurable (bench/README.md, "xprobe"). */

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
