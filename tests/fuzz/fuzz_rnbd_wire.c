/* Every RNBD decoder on arbitrary bytes (each checks its own type, so all
 * run on every input): whatever decodes must encode back to the same
 * fields.  The same bytes also drive the server's device-path rule (split
 * at NULs into search path, session name and device name) and its
 * access-mode rule (one mode per byte). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rnbd/rnbd_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static void messages(const uint8_t *d, size_t n)
{
	uint8_t out[RNBD_OPEN_LEN];
	struct rnbd_sess_info si, si2;
	struct rnbd_open op, op2;
	struct rnbd_open_rsp ors, ors2;
	struct rnbd_close cl, cl2;
	struct rnbd_io io, io2;
	int t = rnbd_msg_type(d, n);

	if (rnbd_sess_info_decode(d, n, &si) == 0) {
		rnbd_sess_info_encode(&si, out);
		if (t != RNBD_MSG_SESS_INFO || rnbd_sess_info_decode(out, RNBD_SESS_INFO_LEN, &si2) ||
		    si2.ver != si.ver || memcmp(out, d, 2) || out[4] != d[4])
			abort();
	}
	if (rnbd_sess_info_rsp_decode(d, n, &si) == 0) {
		rnbd_sess_info_rsp_encode(&si, out);
		if (t != RNBD_MSG_SESS_INFO_RSP || memcmp(out, d, 2) || out[4] != d[4])
			abort();
	}
	if (rnbd_open_decode(d, n, &op) == 0) {
		size_t l = strlen(op.dev_name);

		if (t != RNBD_MSG_OPEN || l == 0 || l >= RNBD_NAME_MAX || op.access_mode > 2)
			abort();
		if (rnbd_open_encode(&op, out) || rnbd_open_decode(out, RNBD_OPEN_LEN, &op2) ||
		    op2.access_mode != op.access_mode || strcmp(op2.dev_name, op.dev_name) ||
		    memcmp(out, d, 2) || memcmp(out + 4, d + 4, 1) || memcmp(out + 6, d + 6, l + 1))
			abort();
	}
	if (rnbd_open_rsp_decode(d, n, &ors) == 0) {
		memset(&ors2, 0, sizeof(ors2));
		rnbd_open_rsp_encode(&ors, out);
		if (t != RNBD_MSG_OPEN_RSP || rnbd_open_rsp_decode(out, RNBD_OPEN_RSP_LEN, &ors2) ||
		    memcmp(&ors, &ors2, sizeof(ors)) || memcmp(out, d, 2) || memcmp(out + 4, d + 4, 42))
			abort();
	}
	if (rnbd_close_decode(d, n, &cl) == 0) {
		rnbd_close_encode(&cl, out);
		if (t != RNBD_MSG_CLOSE || rnbd_close_decode(out, RNBD_CLOSE_LEN, &cl2) ||
		    cl2.device_id != cl.device_id || memcmp(out + 4, d + 4, 4))
			abort();
	}
	if (rnbd_io_decode(d, n, &io) == 0) {
		memset(&io2, 0, sizeof(io2));
		rnbd_io_encode(&io, out);
		if (t != RNBD_MSG_IO || rnbd_io_decode(out, RNBD_IO_LEN, &io2) ||
		    memcmp(&io, &io2, sizeof(io)) || memcmp(out + 4, d + 4, 20) ||
		    rnbd_op(io.rw) >= RNBD_OP_LAST)
			abort();
	}
}

/* Copies the next NUL-terminated piece of d (at most cap - 1 bytes). */
static size_t piece(const uint8_t *d, size_t n, char *out, size_t cap)
{
	size_t i = 0;

	while (i < n && d[i] && i + 1 < cap) {
		out[i] = (char)d[i];
		i++;
	}
	out[i] = '\0';
	return i < n ? i + 1 : i;
}

static void full_path(const uint8_t *d, size_t n)
{
	static char search[RNBD_PATH_MAX + 16], sess[RNBD_NAME_MAX + 1];
	static char name[RNBD_PATH_MAX + 16], out[RNBD_PATH_MAX];
	size_t k;

	k = piece(d, n, search, sizeof(search));
	k += piece(d + k, n - k, sess, sizeof(sess));
	piece(d + k, n - k, name, sizeof(name));
	if (rnbd_srv_full_path(search, sess, name, out, sizeof(out)))
		return;
	/* the kernel's rules hold for every path it opens */
	if (strstr(name, "..") || !name[0] || strstr(out, "//") || strlen(out) >= RNBD_PATH_MAX)
		abort();
	/* and the path ends with the device name, slashes collapsed */
	if (!strchr(name, '/') && (strlen(out) < strlen(name) ||
				   strcmp(out + strlen(out) - strlen(name), name)))
		abort();
}

static void open_perm(const uint8_t *d, size_t n)
{
	unsigned writers = 0;

	for (size_t i = 0; i < n; i++) {
		uint8_t mode = d[i] & 3;
		unsigned before = writers;
		int err;

		if (d[i] & 0x80) {
			rnbd_put_open_perm(mode, &writers);
			if (writers > before)
				abort();
			continue;
		}
		err = rnbd_check_open_perm(mode, &writers);
		if (writers > 2 || (err && writers != before) ||
		    (mode == RNBD_ACCESS_RO && (err || writers != before)) ||
		    (mode == RNBD_ACCESS_RW && !err && before != 0) || (mode == 3 && !err))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	messages(d, n);
	full_path(d, n);
	open_perm(d, n);
	return 0;
}
