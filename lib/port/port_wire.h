/* Frame header of GM-style ports over a host-pair connection (seed 001
 * section 1: "GM maintaining reliable connections between each pair of
 * hosts ... and multiplexing the traffic between ports over these").
 *
 * Every frame on a link -- one xrc SEND on tcp/rdma, one shmcm message on
 * shm -- is a 24-byte header in network byte order, then the payload:
 *
 *   0  type      PW_DATA, PW_ACK, PW_NACK, PW_HELLO, PW_ABORT
 *   1  flags     DATA: PW_FIRST, PW_LAST, PW_SYNC, PW_ACKS
 *   2  prio      0 low, 1 high
 *   3  arg       DATA: size class (4..31); NACK: reason; else 0
 *   4  src_port  u16, < XP_MAX_PORTS: the port the frame is from
 *   6  dst_port  u16, < XP_MAX_PORTS: the port it is for
 *   8  seq       u32  DATA: message number in its stream (src_port,
 *                     dst_port, prio); ACK: last message received whole
 *                     (cumulative); NACK: the refused message;
 *                     HELLO: protocol version
 *  12  len       u32  DATA: message length; HELLO: largest message taken
 *  16  off       u32  DATA: offset of this fragment; HELLO: lane
 *  20  aux       u32  HELLO: PW_MAGIC; DATA with PW_ACKS: an ACK (its
 *                     seq) for the reverse stream (dst_port, src_port,
 *                     prio), riding along; else 0
 *
 * ACK/NACK travel from the receiving port back to the sender, so their
 * src_port is the receiver's port and dst_port the sender's.  PW_SYNC on a
 * FIRST fragment tells the receiver to take this seq as the stream's next
 * one whatever it expected: the sender sets it on the first message of a
 * stream and on the first one after it gave messages up (a failure, a drop),
 * so the two ends never disagree on where the stream stands.
 *
 * PW_ABORT (sender -> receiver, seq = the message) says a message whose
 * first fragments went out will not be finished (its sender dropped it or
 * closed the port): the receiver gives the buffer it was filling back to
 * its port instead of holding it until the stream's next message.
 *
 * PW_ACKS saves a frame per request/reply exchange: the acknowledgement of
 * a request rides on the reply's DATA (the reverse stream), as TCP
 * piggybacks its ACKs; a bare ACK goes only when no DATA is going back.
 */
#ifndef XPRT_PORT_WIRE_H
#define XPRT_PORT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define PW_MAGIC	0x58504f52u	/* "XPOR" */
#define PW_VERSION	3u	/* 2: PW_ACKS; fragment size in the lane handshake;
				 * 3: packs of frames on shm */
#define PW_HDR_LEN	24u
#define PW_MAX_PORTS	64u
#define PW_MIN_SIZE	4u
#define PW_MAX_SIZE	31u

enum pw_type { PW_DATA = 1, PW_ACK = 2, PW_NACK = 3, PW_HELLO = 4, PW_ABORT = 5 };

enum pw_flag { PW_FIRST = 1, PW_LAST = 2, PW_SYNC = 4, PW_ACKS = 8 };
#define PW_FLAGS_ALL	(PW_FIRST | PW_LAST | PW_SYNC | PW_ACKS)

enum pw_nack { PW_NACK_NOBUF = 1, PW_NACK_CLOSED = 2, PW_NACK_REJECTED = 3 };

struct pw_hdr {
	uint8_t type, flags, prio, arg;
	uint16_t src_port, dst_port;
	uint32_t seq, len, off, aux;
};

/* The encoded layout, only for the size check: the codec never casts wire
 * bytes to a struct. */
struct pw_wire {
	uint8_t type, flags, prio, arg;
	uint8_t src_port[2], dst_port[2];
	uint8_t seq[4], len[4], off[4], aux[4];
};
_Static_assert(sizeof(struct pw_wire) == PW_HDR_LEN, "port frame header is 24 bytes");

/* Decoder errors (negative). */
enum {
	PW_E_SHORT = -1,	/* fewer than PW_HDR_LEN bytes */
	PW_E_TYPE = -2,		/* unknown type */
	PW_E_FLAGS = -3,	/* unknown flag, or flags on a non-DATA frame */
	PW_E_PRIO = -4,
	PW_E_PORT = -5,		/* port id out of range */
	PW_E_SIZE = -6,		/* size class out of range or not the length's */
	PW_E_BOUNDS = -7,	/* fragment outside the message, FIRST not at 0,
				 * LAST not at the end, or payload on a control frame */
	PW_E_REASON = -8,	/* unknown NACK reason */
	PW_E_MAGIC = -9,	/* HELLO without our magic */
	PW_E_RSVD = -10,	/* a field that must be 0 is not */
};

void pw_encode(uint8_t *b, const struct pw_hdr *h);
/* Checks the header of a `flen`-byte frame (header + payload) against every
 * rule that needs no state; the payload length is flen - PW_HDR_LEN.
 * 0 or a PW_E_* code.  Never reads beyond flen bytes. */
int pw_decode(const uint8_t *b, size_t flen, struct pw_hdr *h);
const char *pw_strerror(int e);
/* The size class of a len-byte message: GM's ceil(log2(len + 8)), never
 * below PW_MIN_SIZE (an empty message has class 4, like 1..8 bytes). */
unsigned pw_size_for_len(uint64_t len);

/* A pack: several whole frames in one transport message (a shm mailbox
 * packet), each a 2-byte big-endian length, then that many bytes of frame.
 * The transport's packet boundary ends the pack; a length of fewer than
 * PW_HDR_LEN bytes or beyond the end is an error. */
#define PW_PACK_LEN	2u

/* Appends one frame (the header hdr, then dlen bytes of payload) at b:
 * returns the bytes written, PW_PACK_LEN + PW_HDR_LEN + dlen (< 64 KiB). */
size_t pw_pack_put(uint8_t *b, const uint8_t *hdr, const void *data, size_t dlen);
/* The frame of a `len`-byte pack at *off: 1 and the frame in *frame and *flen
 * (*off moves past it), 0 at the end, PW_E_SHORT for a cut or short one.
 * Never reads beyond len bytes. */
int pw_pack_next(const uint8_t *b, size_t len, size_t *off, const uint8_t **frame,
		 size_t *flen);

#endif
