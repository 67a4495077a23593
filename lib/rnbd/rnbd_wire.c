/* RNBD 2.0 wire codec; the layout and rules are in rnbd_wire.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/bytes.h"
#include "rnbd/rnbd_wire.h"

static void hdr_put(uint8_t *out, uint16_t type)
{
	put_le16(out, type);
	put_le16(out + 2, 0);
}

/* The common checks: long enough, and the type asked for. */
static int hdr_check(const void *buf, size_t len, size_t need, uint16_t type)
{
	if (!buf || len < need)
		return -EMSGSIZE;
	if (get_le16(buf) != type)
		return -EPROTO;
	return 0;
}

int rnbd_msg_type(const void *buf, size_t len)
{
	uint16_t t;

	if (!buf || len < RNBD_HDR_LEN)
		return -EMSGSIZE;
	t = get_le16(buf);
	if (t > RNBD_MSG_CLOSE)
		return -EPROTO;
	return t;
}

/* --- sess_info / sess_info_rsp: 0 hdr 4 ver 5 reserved[31] */
static void sess_info_put(const struct rnbd_sess_info *m, uint8_t *out, uint16_t type)
{
	memset(out, 0, RNBD_SESS_INFO_LEN);
	hdr_put(out, type);
	out[4] = m->ver;
}

void rnbd_sess_info_encode(const struct rnbd_sess_info *m, uint8_t out[RNBD_SESS_INFO_LEN])
{
	sess_info_put(m, out, RNBD_MSG_SESS_INFO);
}

void rnbd_sess_info_rsp_encode(const struct rnbd_sess_info *m, uint8_t out[RNBD_SESS_INFO_LEN])
{
	sess_info_put(m, out, RNBD_MSG_SESS_INFO_RSP);
}

static int sess_info_get(const void *buf, size_t len, struct rnbd_sess_info *m, uint16_t type)
{
	int err = hdr_check(buf, len, RNBD_SESS_INFO_LEN, type);

	if (err)
		return err;
	m->ver = ((const uint8_t *)buf)[4];
	return 0;
}

int rnbd_sess_info_decode(const void *buf, size_t len, struct rnbd_sess_info *m)
{
	return sess_info_get(buf, len, m, RNBD_MSG_SESS_INFO);
}

int rnbd_sess_info_rsp_decode(const void *buf, size_t len, struct rnbd_sess_info *m)
{
	return sess_info_get(buf, len, m, RNBD_MSG_SESS_INFO_RSP);
}

/* --- open: 0 hdr 4 access_mode 5 resv1 6 dev_name[255] 261 reserved[3] */
static int check_dev_name(const char *name)
{
	size_t n = strnlen(name, RNBD_NAME_MAX);

	/* terminated within the field, and naming something: an empty name
	 * would open the search path itself */
	return n == 0 || n >= RNBD_NAME_MAX ? -EINVAL : 0;
}

int rnbd_open_encode(const struct rnbd_open *m, uint8_t out[RNBD_OPEN_LEN])
{
	if (m->access_mode > RNBD_ACCESS_MIGRATION || check_dev_name(m->dev_name))
		return -EINVAL;
	memset(out, 0, RNBD_OPEN_LEN);
	hdr_put(out, RNBD_MSG_OPEN);
	out[4] = m->access_mode;
	memcpy(out + 6, m->dev_name, strlen(m->dev_name));
	return 0;
}

int rnbd_open_decode(const void *buf, size_t len, struct rnbd_open *m)
{
	const uint8_t *p = buf;
	int err = hdr_check(buf, len, RNBD_OPEN_LEN, RNBD_MSG_OPEN);

	if (err)
		return err;
	/* rnbd_srv_check_update_open_perm: an unknown mode is -EINVAL */
	if (p[4] > RNBD_ACCESS_MIGRATION)
		return -EINVAL;
	if (!memchr(p + 6, 0, RNBD_NAME_MAX))
		return -EINVAL;
	memset(m, 0, sizeof(*m));
	m->access_mode = p[4];
	memcpy(m->dev_name, p + 6, RNBD_NAME_MAX);
	return check_dev_name(m->dev_name);
}

/* --- open_rsp: 0 hdr 4 device_id 8 nsectors 16 max_hw_sectors
 * 20 max_write_zeroes_sectors 24 max_discard_sectors 28 discard_granularity
 * 32 discard_alignment 36 physical_block_size 38 logical_block_size
 * 40 max_segments 42 secure_discard 44 obsolete_rotational 45 cache_policy
 * 46 reserved[10] */
void rnbd_open_rsp_encode(const struct rnbd_open_rsp *m, uint8_t out[RNBD_OPEN_RSP_LEN])
{
	memset(out, 0, RNBD_OPEN_RSP_LEN);
	hdr_put(out, RNBD_MSG_OPEN_RSP);
	put_le32(out + 4, m->device_id);
	put_le64(out + 8, m->nsectors);
	put_le32(out + 16, m->max_hw_sectors);
	put_le32(out + 20, m->max_write_zeroes_sectors);
	put_le32(out + 24, m->max_discard_sectors);
	put_le32(out + 28, m->discard_granularity);
	put_le32(out + 32, m->discard_alignment);
	put_le16(out + 36, m->physical_block_size);
	put_le16(out + 38, m->logical_block_size);
	put_le16(out + 40, m->max_segments);
	put_le16(out + 42, m->secure_discard);
	out[44] = m->obsolete_rotational;
	out[45] = m->cache_policy;
}

int rnbd_open_rsp_decode(const void *buf, size_t len, struct rnbd_open_rsp *m)
{
	const uint8_t *p = buf;
	int err = hdr_check(buf, len, RNBD_OPEN_RSP_LEN, RNBD_MSG_OPEN_RSP);

	if (err)
		return err;
	memset(m, 0, sizeof(*m));
	m->device_id = get_le32(p + 4);
	m->nsectors = get_le64(p + 8);
	m->max_hw_sectors = get_le32(p + 16);
	m->max_write_zeroes_sectors = get_le32(p + 20);
	m->max_discard_sectors = get_le32(p + 24);
	m->discard_granularity = get_le32(p + 28);
	m->discard_alignment = get_le32(p + 32);
	m->physical_block_size = get_le16(p + 36);
	m->logical_block_size = get_le16(p + 38);
	m->max_segments = get_le16(p + 40);
	m->secure_discard = get_le16(p + 42);
	m->obsolete_rotational = p[44];
	m->cache_policy = p[45];
	/* the client's process_msg_open_rsp: no device without a block size */
	if (m->logical_block_size == 0)
		return -EINVAL;
	return 0;
}

/* --- close: 0 hdr 4 device_id */
void rnbd_close_encode(const struct rnbd_close *m, uint8_t out[RNBD_CLOSE_LEN])
{
	hdr_put(out, RNBD_MSG_CLOSE);
	put_le32(out + 4, m->device_id);
}

int rnbd_close_decode(const void *buf, size_t len, struct rnbd_close *m)
{
	int err = hdr_check(buf, len, RNBD_CLOSE_LEN, RNBD_MSG_CLOSE);

	if (err)
		return err;
	m->device_id = get_le32((const uint8_t *)buf + 4);
	return 0;
}

/* --- io: 0 hdr 4 device_id 8 sector 16 rw 20 bi_size 24 prio 26 pad[6] */
void rnbd_io_encode(const struct rnbd_io *m, uint8_t out[RNBD_IO_LEN])
{
	memset(out, 0, RNBD_IO_LEN);
	hdr_put(out, RNBD_MSG_IO);
	put_le32(out + 4, m->device_id);
	put_le64(out + 8, m->sector);
	put_le32(out + 16, m->rw);
	put_le32(out + 20, m->bi_size);
	put_le16(out + 24, m->prio);
}

int rnbd_io_decode(const void *buf, size_t len, struct rnbd_io *m)
{
	const uint8_t *p = buf;
	int err = hdr_check(buf, len, RNBD_IO_LEN_V1, RNBD_MSG_IO);

	if (err)
		return err;
	memset(m, 0, sizeof(*m));
	m->device_id = get_le32(p + 4);
	m->sector = get_le64(p + 8);
	m->rw = get_le32(p + 16);
	m->bi_size = get_le32(p + 20);
	/* process_rdma: "usrlen < sizeof(*msg) ? 0 : prio" */
	if (len >= RNBD_IO_LEN)
		m->prio = get_le16(p + 24);
	/* An unknown op is refused (the 6.1 server would submit it as a bio
	 * with op 0, a READ).  Unknown flags are not: the kernel's server
	 * stopped checking them in 6.5 (rnbd_flags_supported removed) and
	 * translates only those it knows, so a newer client's hints still
	 * work; the server acts on RNBD_F_ALL and ignores the rest. */
	if (rnbd_op(m->rw) >= RNBD_OP_LAST)
		return -EINVAL;
	return 0;
}

/* --- server rules --------------------------------------------------------- */
int rnbd_check_open_perm(uint8_t access_mode, unsigned *open_write_cnt)
{
	switch (access_mode) {
	case RNBD_ACCESS_RO:
		return 0;
	case RNBD_ACCESS_RW:
		if (*open_write_cnt != 0)
			return -EPERM;
		break;
	case RNBD_ACCESS_MIGRATION:
		if (*open_write_cnt >= 2)
			return -EPERM;
		break;
	default:
		return -EINVAL;
	}
	(*open_write_cnt)++;
	return 0;
}

void rnbd_put_open_perm(uint8_t access_mode, unsigned *open_write_cnt)
{
	/* open_flags has FMODE_WRITE for every mode but RO */
	if (access_mode != RNBD_ACCESS_RO && *open_write_cnt > 0)
		(*open_write_cnt)--;
}

int rnbd_srv_full_path(const char *search_path, const char *sessname, const char *dev_name,
		       char *out, size_t outlen)
{
	char full[RNBD_PATH_MAX];
	const char *s = strstr(search_path, "%SESSNAME%");
	size_t n, o;
	int len;

	if (dev_name[0] == '\0')
		return -EINVAL;
	/* process_msg_open's two checks, in its order */
	if (strlen(search_path) + strlen(dev_name) >= RNBD_PATH_MAX)
		return -EINVAL;
	if (strstr(dev_name, ".."))
		return -EINVAL;
	if (s)
		len = snprintf(full, sizeof(full), "%.*s/%s/%s", (int)(s - search_path),
			       search_path, sessname, dev_name);
	else
		len = snprintf(full, sizeof(full), "%s/%s", search_path, dev_name);
	if (len < 0 || (size_t)len >= sizeof(full))
		return -EINVAL;
	/* "eliminate duplicated slashes" */
	for (n = 0, o = 0; full[n]; n++) {
		if (full[n] == '/' && n > 0 && full[n - 1] == '/')
			continue;
		if (o + 1 >= outlen)
			return -ENAMETOOLONG;
		out[o++] = full[n];
	}
	if (o >= outlen)
		return -ENAMETOOLONG;
	out[o] = '\0';
	return 0;
}

const char *rnbd_access_mode_str(uint8_t access_mode)
{
	switch (access_mode) {
	case RNBD_ACCESS_RO:
		return "ro";
	case RNBD_ACCESS_RW:
		return "rw";
	case RNBD_ACCESS_MIGRATION:
		return "migration";
	default:
		return "unknown";
	}
}
