/* Big- and little-endian loads and stores of 16, 32 and 64-bit fields at
 * any byte address: what every wire codec uses to read and write its
 * explicit-order fields (STYLE.md 2).  Network-order formats (SHMCM, ports,
 * probes) use the _be helpers; the Linux kernel's RTRS and RNBD messages are
 * little-endian (__le16/__le32/__le64) and use the _le ones.  memcpy keeps
 * unaligned access legal; compilers turn each into one load or store plus,
 * where the host order differs, a byte swap. */
#ifndef XPRT_CORE_BYTES_H
#define XPRT_CORE_BYTES_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t get_be16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return be16toh(v);
}

static inline uint32_t get_be32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return be32toh(v);
}

static inline uint64_t get_be64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return be64toh(v);
}

static inline void put_be16(uint8_t *p, uint16_t v)
{
	v = htobe16(v);
	memcpy(p, &v, sizeof(v));
}

static inline void put_be32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, sizeof(v));
}

static inline void put_be64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, sizeof(v));
}

static inline uint16_t get_le16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return le16toh(v);
}

static inline uint32_t get_le32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

static inline uint64_t get_le64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}

static inline void put_le16(uint8_t *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, sizeof(v));
}

static inline void put_le32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, sizeof(v));
}

static inline void put_le64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, sizeof(v));
}

/* memcpy for a per-message copy that is mostly a few bytes (a ping's
 * payload): 8-byte words inline, the library call only for long ones (a
 * call costs more than the copy under binary translation, core/cc.h). */
static inline __attribute__((always_inline)) void copy_short(void *dst, const void *src, size_t n)
{
	uint8_t *d = dst;
	const uint8_t *s = src;

	if (n > 64) {
		memcpy(d, s, n);
		return;
	}
	/* (the empty asm keeps the compiler from making the loop a memcpy
	 * call again) */
	for (; n >= 8; n -= 8, d += 8, s += 8) {
		memcpy(d, s, 8);
		__asm__("" : "+r"(d));
	}
	if (n & 4) {
		memcpy(d, s, 4);
		d += 4, s += 4;
	}
	if (n & 2) {
		memcpy(d, s, 2);
		d += 2, s += 2;
	}
	if (n & 1)
		*d = *s;
}

/* memcmp() == 0 likewise. */
static inline __attribute__((always_inline)) int equal_short(const void *a, const void *b, size_t n)
{
	const uint8_t *x = a, *y = b;
	uint64_t u, v;

	if (n > 64)
		return !memcmp(x, y, n);
	for (; n >= 8; n -= 8, x += 8, y += 8) {
		memcpy(&u, x, 8);
		memcpy(&v, y, 8);
		if (u != v)
			return 0;
	}
	for (; n; n--, x++, y++)
		if (*x != *y)
			return 0;
	return 1;
}

#endif
