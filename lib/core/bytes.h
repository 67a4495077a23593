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

#endif
