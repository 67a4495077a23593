/* Compiler helpers shared by the hot paths. */
#ifndef XPRT_CORE_CC_H
#define XPRT_CORE_CC_H

/* For a small helper of a per-message path: inlined even where the
 * compiler's size heuristics would keep a call.  A call and its return
 * are cheap on hardware, but each is a jump through a target look-up
 * under binary translation (the Soft-RoCE VM), where a few dozen of them
 * per message are measurable in a round trip (bench/README.md). */
#define XINLINE static inline __attribute__((always_inline))

#endif
