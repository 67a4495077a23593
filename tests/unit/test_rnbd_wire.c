/* RNBD 2.0 codec: the exact bytes of real kernel traffic (rnbd-client <->
 * rnbd-server, linux 6.1 over Soft-RoCE, mapping /dev/loop0; copied from
 * packet captures), every decoder rule, and the server's
 * access-mode and device-path rules. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rnbd/rnbd_wire.h"
#include "unhex.h"

static void test_sess_info(void **s)
{
	/* "rnbd SESS_INFO ver=2" and "rnbd SESS_INFO_RSP ver=2": 36 bytes */
	uint8_t want[RNBD_SESS_INFO_LEN] = { 0, 0, 0, 0, 2 }, out[RNBD_SESS_INFO_LEN];
	struct rnbd_sess_info m = { RNBD_PROTO_VER_MAJOR }, d;

	rnbd_sess_info_encode(&m, out);
	assert_memory_equal(out, want, sizeof(want));
	assert_int_equal(rnbd_sess_info_decode(want, sizeof(want), &d), 0);
	assert_int_equal(d.ver, 2);
	assert_int_equal(rnbd_msg_type(want, sizeof(want)), RNBD_MSG_SESS_INFO);
	assert_int_equal(rnbd_sess_info_rsp_decode(want, sizeof(want), &d), -EPROTO);
	assert_int_equal(rnbd_sess_info_decode(want, sizeof(want) - 1, &d), -EMSGSIZE);

	want[0] = RNBD_MSG_SESS_INFO_RSP;
	rnbd_sess_info_rsp_encode(&m, out);
	assert_memory_equal(out, want, sizeof(want));
	assert_int_equal(rnbd_sess_info_rsp_decode(want, sizeof(want), &d), 0);
	assert_int_equal(rnbd_sess_info_decode(want, sizeof(want), &d), -EPROTO);

	/* process_msg_sess_info: min(client, server) */
	assert_int_equal(rnbd_negotiate_ver(1), 1);
	assert_int_equal(rnbd_negotiate_ver(2), 2);
	assert_int_equal(rnbd_negotiate_ver(9), 2);
}

static void test_open(void **s)
{
	/* "rnbd OPEN access_mode=1 dev_name='/dev/loop0'": 264 bytes */
	uint8_t want[RNBD_OPEN_LEN] = { 0 }, out[RNBD_OPEN_LEN];
	struct rnbd_open m = { .access_mode = RNBD_ACCESS_RW, .dev_name = "/dev/loop0" }, d;

	unhex("0200 0000 01 00 2f6465762f6c6f6f7030", want);
	assert_int_equal(rnbd_open_encode(&m, out), 0);
	assert_memory_equal(out, want, sizeof(want));
	assert_int_equal(rnbd_open_decode(want, sizeof(want), &d), 0);
	assert_int_equal(d.access_mode, RNBD_ACCESS_RW);
	assert_string_equal(d.dev_name, "/dev/loop0");

	/* rejects */
	assert_int_equal(rnbd_open_decode(want, sizeof(want) - 1, &d), -EMSGSIZE);
	memcpy(out, want, sizeof(out));
	out[4] = 3;	/* unknown access mode */
	assert_int_equal(rnbd_open_decode(out, sizeof(out), &d), -EINVAL);
	out[4] = RNBD_ACCESS_MIGRATION;
	assert_int_equal(rnbd_open_decode(out, sizeof(out), &d), 0);
	out[6] = 0;	/* empty name */
	assert_int_equal(rnbd_open_decode(out, sizeof(out), &d), -EINVAL);
	memset(out + 6, 'x', RNBD_NAME_MAX);	/* unterminated */
	assert_int_equal(rnbd_open_decode(out, sizeof(out), &d), -EINVAL);
	out[6 + 254] = 0;
	assert_int_equal(rnbd_open_decode(out, sizeof(out), &d), 0);
	out[0] = RNBD_MSG_CLOSE;
	assert_int_equal(rnbd_open_decode(out, sizeof(out), &d), -EPROTO);
	m.access_mode = 7;
	assert_int_equal(rnbd_open_encode(&m, out), -EINVAL);
	m.access_mode = RNBD_ACCESS_RO;
	m.dev_name[0] = 0;
	assert_int_equal(rnbd_open_encode(&m, out), -EINVAL);
}

static void test_open_rsp(void **s)
{
	/* "rnbd OPEN_RSP device_id=0 nsectors=16384 max_hw_sectors=2560
	 * max_write_same=0 max_discard=8388607 discard_gran=4096
	 * discard_align=0 pbs=512 lbs=512 max_segments=128 secure_discard=0
	 * cache_policy=0x2" */
	static const char hex[] = "03000000 00000000 0040000000000000 000a0000 00000000"
				  "ffff7f00 00100000 00000000 0002 0002 8000 0000 00 02"
				  "00000000000000000000";
	uint8_t want[RNBD_OPEN_RSP_LEN], out[RNBD_OPEN_RSP_LEN];
	struct rnbd_open_rsp m = {
		.device_id = 0, .nsectors = 16384, .max_hw_sectors = 2560,
		.max_write_zeroes_sectors = 0, .max_discard_sectors = 8388607,
		.discard_granularity = 4096, .discard_alignment = 0,
		.physical_block_size = 512, .logical_block_size = 512, .max_segments = 128,
		.secure_discard = 0, .obsolete_rotational = 0, .cache_policy = RNBD_WRITEBACK,
	}, d;

	assert_int_equal(unhex(hex, want), RNBD_OPEN_RSP_LEN);
	rnbd_open_rsp_encode(&m, out);
	assert_memory_equal(out, want, sizeof(want));
	assert_int_equal(rnbd_open_rsp_decode(want, sizeof(want), &d), 0);
	assert_int_equal(d.device_id, 0);
	assert_true(d.nsectors == 16384);
	assert_int_equal(d.max_hw_sectors, 2560);
	assert_int_equal(d.max_discard_sectors, 8388607);
	assert_int_equal(d.discard_granularity, 4096);
	assert_int_equal(d.physical_block_size, 512);
	assert_int_equal(d.logical_block_size, 512);
	assert_int_equal(d.max_segments, 128);
	assert_int_equal(d.cache_policy, RNBD_WRITEBACK);

	/* every field lands where the kernel puts it */
	struct rnbd_open_rsp all = { 0x01020304, 0x05060708090a0b0cull, 0x11, 0x12, 0x13, 0x14,
				     0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b };

	rnbd_open_rsp_encode(&all, out);
	assert_int_equal(out[4], 0x04);
	assert_int_equal(out[8], 0x0c);
	assert_int_equal(out[15], 0x05);
	assert_int_equal(out[16], 0x11);
	assert_int_equal(out[20], 0x12);
	assert_int_equal(out[24], 0x13);
	assert_int_equal(out[28], 0x14);
	assert_int_equal(out[32], 0x15);
	assert_int_equal(out[36], 0x16);
	assert_int_equal(out[38], 0x17);
	assert_int_equal(out[40], 0x18);
	assert_int_equal(out[42], 0x19);
	assert_int_equal(out[44], 0x1a);
	assert_int_equal(out[45], 0x1b);
	assert_int_equal(rnbd_open_rsp_decode(out, sizeof(out), &d), 0);
	assert_true(d.nsectors == all.nsectors);
	assert_int_equal(d.cache_policy, 0x1b);

	assert_int_equal(rnbd_open_rsp_decode(want, sizeof(want) - 1, &d), -EMSGSIZE);
	want[38] = want[39] = 0;	/* logical_block_size 0 */
	assert_int_equal(rnbd_open_rsp_decode(want, sizeof(want), &d), -EINVAL);
	want[0] = RNBD_MSG_OPEN;
	assert_int_equal(rnbd_open_rsp_decode(want, sizeof(want), &d), -EPROTO);
}

static void test_io(void **s)
{
	/* "rnbd IO device_id=0 sector=0 rw=0x100[READ flags=0x1] bi_size=4096
	 * prio=16388" and the write of sector 8: 32 bytes each */
	uint8_t rd[RNBD_IO_LEN], wr[RNBD_IO_LEN], out[RNBD_IO_LEN];
	struct rnbd_io r = { 0, 0, RNBD_OP_READ | RNBD_F_SYNC, 4096, 16388 };
	struct rnbd_io w = { 0, 8, RNBD_OP_WRITE | RNBD_F_SYNC, 4096, 16388 };
	struct rnbd_io d;

	unhex("04000000 00000000 0000000000000000 00010000 00100000 0440 000000000000", rd);
	unhex("04000000 00000000 0800000000000000 01010000 00100000 0440 000000000000", wr);
	rnbd_io_encode(&r, out);
	assert_memory_equal(out, rd, RNBD_IO_LEN);
	rnbd_io_encode(&w, out);
	assert_memory_equal(out, wr, RNBD_IO_LEN);
	assert_int_equal(rnbd_io_decode(wr, sizeof(wr), &d), 0);
	assert_true(d.sector == 8);
	assert_int_equal(rnbd_op(d.rw), RNBD_OP_WRITE);
	assert_int_equal(rnbd_flags(d.rw), RNBD_F_SYNC);
	assert_int_equal(d.bi_size, 4096);
	assert_int_equal(d.prio, 16388);
	assert_int_equal(rnbd_msg_type(wr, sizeof(wr)), RNBD_MSG_IO);

	/* a protocol-1 message (no prio): prio 0 */
	assert_int_equal(rnbd_io_decode(wr, RNBD_IO_LEN_V1, &d), 0);
	assert_int_equal(d.prio, 0);
	assert_int_equal(rnbd_io_decode(wr, RNBD_IO_LEN_V1 - 1, &d), -EMSGSIZE);
	/* ops and flags */
	for (uint32_t op = RNBD_OP_READ; op < RNBD_OP_LAST; op++) {
		struct rnbd_io x = { .rw = op | RNBD_F_FUA };

		rnbd_io_encode(&x, out);
		assert_int_equal(rnbd_io_decode(out, sizeof(out), &d), 0);
	}
	struct rnbd_io bad = { .rw = RNBD_OP_LAST };

	rnbd_io_encode(&bad, out);
	assert_int_equal(rnbd_io_decode(out, sizeof(out), &d), -EINVAL);
	/* a flag we do not know: kept, for the server to ignore (the kernel
	 * server since 6.5) */
	bad.rw = RNBD_OP_WRITE | (1u << 12) | RNBD_F_FUA;
	rnbd_io_encode(&bad, out);
	assert_int_equal(rnbd_io_decode(out, sizeof(out), &d), 0);
	assert_int_equal(d.rw, RNBD_OP_WRITE | (1u << 12) | RNBD_F_FUA);
	bad.rw = RNBD_OP_WRITE | RNBD_F_PREFLUSH | RNBD_F_FUA;	/* a 6.8+ client */
	rnbd_io_encode(&bad, out);
	assert_int_equal(rnbd_io_decode(out, sizeof(out), &d), 0);
	out[0] = RNBD_MSG_OPEN;
	assert_int_equal(rnbd_io_decode(out, sizeof(out), &d), -EPROTO);
}

static void test_close(void **s)
{
	/* "rnbd CLOSE device_id=0": 8 bytes */
	uint8_t want[RNBD_CLOSE_LEN] = { 5, 0, 0, 0, 0, 0, 0, 0 }, out[RNBD_CLOSE_LEN];
	struct rnbd_close m = { 0 }, d = { 9 };

	rnbd_close_encode(&m, out);
	assert_memory_equal(out, want, sizeof(want));
	assert_int_equal(rnbd_close_decode(want, sizeof(want), &d), 0);
	assert_int_equal(d.device_id, 0);
	assert_int_equal(rnbd_close_decode(want, 7, &d), -EMSGSIZE);
	want[0] = RNBD_MSG_IO;
	assert_int_equal(rnbd_close_decode(want, 8, &d), -EPROTO);
	m.device_id = 0x01020304;
	rnbd_close_encode(&m, out);
	assert_int_equal(out[4], 4);
	assert_int_equal(out[7], 1);
}

static void test_msg_type(void **s)
{
	uint8_t b[4] = { 5, 0, 0, 0 };

	assert_int_equal(rnbd_msg_type(b, 4), RNBD_MSG_CLOSE);
	assert_int_equal(rnbd_msg_type(b, 3), -EMSGSIZE);
	assert_int_equal(rnbd_msg_type(NULL, 4), -EMSGSIZE);
	b[0] = 6;
	assert_int_equal(rnbd_msg_type(b, 4), -EPROTO);
	b[0] = 0;
	b[1] = 1;	/* 0x100 */
	assert_int_equal(rnbd_msg_type(b, 4), -EPROTO);
}

static void test_open_perm(void **s)
{
	unsigned writers = 0;

	/* RO: always, counted nowhere */
	assert_int_equal(rnbd_check_open_perm(RNBD_ACCESS_RO, &writers), 0);
	assert_int_equal(writers, 0);
	/* RW: only with no writer */
	assert_int_equal(rnbd_check_open_perm(RNBD_ACCESS_RW, &writers), 0);
	assert_int_equal(writers, 1);
	assert_int_equal(rnbd_check_open_perm(RNBD_ACCESS_RW, &writers), -EPERM);
	assert_int_equal(writers, 1);
	assert_int_equal(rnbd_check_open_perm(RNBD_ACCESS_RO, &writers), 0);
	/* MIGRATION: a second writer, not a third */
	assert_int_equal(rnbd_check_open_perm(RNBD_ACCESS_MIGRATION, &writers), 0);
	assert_int_equal(writers, 2);
	assert_int_equal(rnbd_check_open_perm(RNBD_ACCESS_MIGRATION, &writers), -EPERM);
	assert_int_equal(rnbd_check_open_perm(RNBD_ACCESS_RW, &writers), -EPERM);
	assert_int_equal(rnbd_check_open_perm(3, &writers), -EINVAL);
	/* the RW side closes: migration target may now take over */
	rnbd_put_open_perm(RNBD_ACCESS_RW, &writers);
	assert_int_equal(writers, 1);
	rnbd_put_open_perm(RNBD_ACCESS_RO, &writers);
	assert_int_equal(writers, 1);
	assert_int_equal(rnbd_check_open_perm(RNBD_ACCESS_RW, &writers), -EPERM);
	rnbd_put_open_perm(RNBD_ACCESS_MIGRATION, &writers);
	assert_int_equal(rnbd_check_open_perm(RNBD_ACCESS_RW, &writers), 0);
	/* a writer that never counted cannot underflow */
	writers = 0;
	rnbd_put_open_perm(RNBD_ACCESS_RW, &writers);
	assert_int_equal(writers, 0);
	assert_string_equal(rnbd_access_mode_str(RNBD_ACCESS_MIGRATION), "migration");
	assert_string_equal(rnbd_access_mode_str(RNBD_ACCESS_RO), "ro");
	assert_string_equal(rnbd_access_mode_str(9), "unknown");
}

static void test_full_path(void **s)
{
	char out[RNBD_PATH_MAX];
	char *longname = malloc(RNBD_PATH_MAX + 1);

	/* the default dev_search_path "/" and the traffic's device */
	assert_int_equal(rnbd_srv_full_path("/", "w1", "/dev/loop0", out, sizeof(out)), 0);
	assert_string_equal(out, "/dev/loop0");
	assert_int_equal(rnbd_srv_full_path("/srv/exports/", "w1", "disk//a", out, sizeof(out)), 0);
	assert_string_equal(out, "/srv/exports/disk/a");
	assert_int_equal(rnbd_srv_full_path("/srv", "w1", "disk", out, sizeof(out)), 0);
	assert_string_equal(out, "/srv/disk");
	/* %SESSNAME%: a per-client namespace; the rest of the search path is
	 * dropped, as the kernel does */
	assert_int_equal(rnbd_srv_full_path("/exports/%SESSNAME%", "w1", "loop0", out,
					    sizeof(out)), 0);
	assert_string_equal(out, "/exports/w1/loop0");
	assert_int_equal(rnbd_srv_full_path("/exports/%SESSNAME%/ignored", "w1", "/d", out,
					    sizeof(out)), 0);
	assert_string_equal(out, "/exports/w1/d");
	/* no ".." anywhere (the kernel's strstr), no empty name */
	assert_int_equal(rnbd_srv_full_path("/srv", "w1", "../etc/shadow", out, sizeof(out)),
			 -EINVAL);
	assert_int_equal(rnbd_srv_full_path("/srv", "w1", "a/../../b", out, sizeof(out)), -EINVAL);
	assert_int_equal(rnbd_srv_full_path("/srv", "w1", "disk..1", out, sizeof(out)), -EINVAL);
	assert_int_equal(rnbd_srv_full_path("/srv", "w1", "", out, sizeof(out)), -EINVAL);
	assert_int_equal(rnbd_srv_full_path("/srv", "w1", "./disk", out, sizeof(out)), 0);
	/* PATH_MAX */
	memset(longname, 'a', RNBD_PATH_MAX - 5);
	longname[RNBD_PATH_MAX - 5] = 0;
	assert_int_equal(rnbd_srv_full_path("/srv", "w1", longname, out, sizeof(out)), -EINVAL);
	longname[RNBD_PATH_MAX - 7] = 0;	/* "/srv" + "/" + 4089 = 4094 chars */
	assert_int_equal(rnbd_srv_full_path("/srv", "w1", longname, out, sizeof(out)), 0);
	assert_int_equal(strlen(out), RNBD_PATH_MAX - 2);
	/* the caller's buffer */
	assert_int_equal(rnbd_srv_full_path("/", "w1", "/dev/loop0", out, 10), -ENAMETOOLONG);
	assert_int_equal(rnbd_srv_full_path("/", "w1", "/dev/loop0", out, 11), 0);
	free(longname);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sess_info),
		cmocka_unit_test(test_open),
		cmocka_unit_test(test_open_rsp),
		cmocka_unit_test(test_io),
		cmocka_unit_test(test_close),
		cmocka_unit_test(test_msg_type),
		cmocka_unit_test(test_open_perm),
		cmocka_unit_test(test_full_path),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
