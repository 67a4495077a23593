/* Compiler helpers shared by the hot paths. */
#ifndef XPRT_CORE_CC_H
#define XPRT_CORE_CC_H

/* Why the per-message paths count calls and branches: on hardware both
 * are cheap, but under binary translation (the Soft-RoCE VM, qemu TCG) a
 * round trip pays ~70 ns for every distinct function it calls and ~21 ns
 * for every distinct branch it takes, while the same work as straight
 * code costs nothing measurable (bench/README.md, "xprobe"). */

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

/* A function of a per-message path: gcc puts it with the others in
 * .text.hot, so a message runs through a few pages of code, not a dozen
 * (under binary translation a jump to another page, like a return, cannot
 * be chained: bench/README.md, "xprobe", ninth session). */
#define XHOT __attribute__((hot))

/* A hot function of a few KiB that a message spends most of its time in,
 * aligned to a page: its code then sits on as few pages as its size allows,
 * wherever the linker places it. */
#define XPAGE __attribute__((hot, aligned(4096)))

/* Kept out of a hot function's code although it is not rare (a batch, a
 * back-pressure reply, another transport's path). */
#define XOUTLINE __attribute__((noinline))

#endif
