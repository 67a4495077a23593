/* SHMCM packet formats (seed 000, "The SHMCM protocol, in detail"; LINX
 * shmcm_proto.h).  Every header is in network byte order.  A packet is
 *
 *   mhdr | chdr                     connection management (CON_PKT)
 *   mhdr | uhdr | user data         user data (UDATA_1_PKT)
 *
 * mhdr.size is the size of the whole packet, headers included; a packet
 * never exceeds the sender's MTU, which equals the receiver's MRU.
 */
#ifndef XPRT_SHMCM_WIRE_H
#define XPRT_SHMCM_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum shmcm_main_type {
	SHMCM_CON_PKT     = 1,
	SHMCM_UDATA_1_PKT = 2,
	SHMCM_UDATA_2_PKT = 3,	/* defined by LINX, never sent; rejected */
};

enum shmcm_con_type {
	SHMCM_CON_REQ = 1,
	SHMCM_CON_ACK = 2,
	SHMCM_CON_RST = 3,
	SHMCM_CON_ALV = 4,
	/* xprt's half-close, not in LINX: "no more user data from me in this
	 * generation" (a socket's shutdown(SHUT_WR)).  It follows every user
	 * packet of the generation in the ring, so the peer has handled them
	 * all when it sees it.  Sent only to a peer that advertises it
	 * (MBOX_CAP_FIN); one that does not gets the old close: drain, then
	 * CON_RST. */
	SHMCM_CON_FIN = 5,
};

struct shmcm_mhdr {
	uint32_t type;
	uint32_t size;
};

struct shmcm_chdr {
	uint32_t type;
	uint16_t cno;
	uint16_t spare;
};

struct shmcm_uhdr {
	uint16_t cno;
	uint16_t msgid;
	uint32_t src;
	uint32_t dst;
	uint32_t size;		/* size of the whole message, not of this fragment */
	uint64_t addr;		/* unused in protocol version 1: always zero */
};

_Static_assert(sizeof(struct shmcm_mhdr) == 8, "mhdr is 8 bytes on the wire");
_Static_assert(sizeof(struct shmcm_chdr) == 8, "chdr is 8 bytes on the wire");
_Static_assert(sizeof(struct shmcm_uhdr) == 24, "uhdr is 24 bytes on the wire");

#define SHMCM_MHDR_LEN   8u
#define SHMCM_CON_LEN    (SHMCM_MHDR_LEN + 8u)
#define SHMCM_UDATA_HLEN (SHMCM_MHDR_LEN + 24u)
/* LINX check_args(): an MTU must hold the headers plus a signal number. */
#define SHMCM_MTU_MIN    (SHMCM_UDATA_HLEN + 4u)
#define SHMCM_MTU_MAX    (16u << 20)

/* A decoded packet.  For UDATA, `data` points into the caller's buffer. */
struct shmcm_pkt {
	uint32_t type;			/* enum shmcm_main_type */
	uint32_t size;			/* whole packet */
	union {
		struct shmcm_chdr con;
		struct shmcm_uhdr u;
	};
	const uint8_t *data;		/* UDATA payload of this fragment */
	uint32_t data_len;
};

enum shmcm_decode_err {
	SHMCM_OK = 0,
	SHMCM_ETRUNC = -1,	/* buffer shorter than a header or than mhdr.size */
	SHMCM_EMRU = -2,	/* mhdr.size beyond the MRU */
	SHMCM_ETYPE = -3,	/* unknown main or connection packet type */
	SHMCM_ESIZE = -4,	/* mhdr.size inconsistent with the packet type */
	SHMCM_EFRAG = -5,	/* fragment larger than the message it claims to belong to */
};

/* Decode a packet from `buf` (`len` readable bytes, e.g. a slot).  Never
 * trusts a length field: mhdr.size is checked against `len` and `mru`, and
 * a UDATA fragment against uhdr.size. */
int shmcm_decode(const void *buf, size_t len, uint32_t mru, struct shmcm_pkt *p);
const char *shmcm_decode_strerror(int err);

/* Encoders write into `buf`, which must hold SHMCM_CON_LEN resp.
 * SHMCM_UDATA_HLEN bytes; they return the number of header bytes written. */
size_t shmcm_encode_con(void *buf, uint32_t con_type, uint16_t cno);
size_t shmcm_encode_udata_hdr(void *buf, uint32_t pkt_size, uint16_t cno,
			      uint16_t msgid, uint32_t src, uint32_t dst,
			      uint32_t msg_size);

/* A message sent by reference (xprt's use of uhdr.addr, which LINX v1
 * leaves zero): a header-only UDATA packet whose addr is the sender's
 * virtual address of the `msg_size` bytes, for the peer to pull with
 * process_vm_readv(2).  Only sent to a peer that advertises it. */
size_t shmcm_encode_udata_ref(void *buf, uint16_t cno, uint16_t msgid, uint32_t src,
			      uint32_t dst, uint32_t msg_size, uint64_t addr);
static inline int shmcm_pkt_is_ref(const struct shmcm_pkt *p)
{
	return p->type == SHMCM_UDATA_1_PKT && p->u.addr != 0 && p->data_len == 0 && p->u.size != 0;
}

const char *shmcm_con_type_name(uint32_t con_type);

#endif
