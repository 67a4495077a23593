/* Big- and little-endian loads and stores of 16, 32 and 64-bit fields at
 * any byte address: what every wire codec uses to read and write its
 * explicit-order fields, never a struct cast over a buffer.  Network-order formats (SHMCM, ports,
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
 * call costs more than the copy under binary translation, core/cc.h).
 * The last word (or half word, or byte) is copied overlapping the one
 * before it, so that a short copy takes two or three branches, not one
 * per piece: each distinct branch on a message's path costs too. */
static inline __attribute__((always_inline)) void copy_short(void *dst, const void *src, size_t n)
{
	uint8_t *d = dst;
	const uint8_t *s = src;

	if (n >= 8) {
		if (n > 64) {
			memcpy(d, s, n);
			return;
		}
		/* (the empty asm keeps the compiler from making the loop a
		 * memcpy call again) */
		for (size_t i = 0; i + 8 < n; i += 8) {
			memcpy(d + i, s + i, 8);
			__asm__("" : "+r"(d));
		}
		memcpy(d + n - 8, s + n - 8, 8);
	} else if (n >= 4) {
		uint32_t a, b;

		memcpy(&a, s, 4);
		memcpy(&b, s + n - 4, 4);
		memcpy(d, &a, 4);
		memcpy(d + n - 4, &b, 4);
	} else if (n) {
		uint8_t a = s[0], b = s[n / 2], c = s[n - 1];

		d[0] = a;
		d[n / 2] = b;
		d[n - 1] = c;
	}
}

/* memcmp() == 0 likewise: the differences of every word or-ed together,
 * one test at the end. */
static inline __attribute__((always_inline)) int equal_short(const void *a, const void *b, size_t n)
{
	const uint8_t *x = a, *y = b;

	if (n >= 8) {
		uint64_t u, v, diff = 0;

		if (n > 64)
			return !memcmp(x, y, n);
		for (size_t i = 0; i + 8 < n; i += 8) {
			memcpy(&u, x + i, 8);
			memcpy(&v, y + i, 8);
			diff |= u ^ v;
		}
		memcpy(&u, x + n - 8, 8);
		memcpy(&v, y + n - 8, 8);
		return (diff | (u ^ v)) == 0;
	}
	if (n >= 4) {
		uint32_t u0, v0, u1, v1;

		memcpy(&u0, x, 4);
		memcpy(&v0, y, 4);
		memcpy(&u1, x + n - 4, 4);
		memcpy(&v1, y + n - 4, 4);
		return ((u0 ^ v0) | (u1 ^ v1)) == 0;
	}
	if (!n)
		return 1;
	return ((x[0] ^ y[0]) | (x[n / 2] ^ y[n / 2]) | (x[n - 1] ^ y[n - 1])) == 0;
}

#endif
