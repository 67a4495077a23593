/* xprobe devices: what this machine can talk over. */
#include "cmd.h"
#include "core/node.h"
#include "xprt/xdev.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <sys/stat.h>

static void transport(struct xnode *list, const char *name, bool ok, const char *kind,
		      const char *note)
{
	struct xnode *m = xnode_push_map(list);

	xnode_set_str(m, "transport", name);
	xnode_set_bool(m, "usable", ok);
	xnode_set_str(m, "class", kind);
	xnode_set_str(m, "note", note);
}

int cmd_devices(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const char *const os = "o:h";
	enum xfmt fmt = XFMT_TEXT;
	struct xnode *root, *devs = NULL, *tr;
	char why[256] = "";
	struct stat st;
	bool rdma, shm;
	int c, rc;

	while ((c = getopt_long(argc, argv, os, lo, NULL)) != -1) {
		switch (c) {
		case 'o':
			if ((rc = cli_parse_fmt("xprobe", "devices", optarg, &fmt)))
				return rc;
			break;
		case 'h':
			cmd_usage(stdout, "devices");
			return EXIT_OK;
		default:
			return bad_option("devices", os, argv);
		}
	}
	if (optind < argc)
		return usage_error("devices", "unexpected argument '%s'", argv[optind]);

	if ((rc = xdev_list(&devs, why, sizeof(why))) < 0)
		return fail("devices", "listing RDMA devices: %s", strerror(-rc));
	rdma = xdev_rdma_available(why, sizeof(why));
	shm = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode);

	tr = xnode_list();
	transport(tr, "shm", shm, "ports", shm ? "shared-memory mailbox in /dev/shm" :
		  "/dev/shm is missing");
	transport(tr, "tcp", true, "ports", "kernel TCP, two sockets per host pair");
	transport(tr, "udp", true, "datagram", "kernel UDP");
	transport(tr, "rdma", rdma, "ports", rdma ? "RC queue pairs through librdmacm" : why);
	transport(tr, "ud", rdma, "datagram", rdma ? "UD queue pairs through librdmacm" : why);

	if (fmt == XFMT_TEXT) {
		if (xnode_len(devs)) {
			xemit(stdout, devs, XFMT_TEXT);
		} else {
			/* why is a lower-case clause: say it as a sentence. */
			if (!why[0])
				snprintf(why, sizeof(why), "no RDMA device found");
			printf("%c%s.\n", why[0] >= 'a' && why[0] <= 'z' ? why[0] - 32 : why[0],
			       why + 1);
			printf("Usable instead: %s%s\n", shm ? "shm:// " : "", "tcp:// udp://");
		}
		putchar('\n');
		xemit(stdout, tr, XFMT_TEXT);
		xnode_free(tr);
		xnode_free(devs);
		return EXIT_OK;
	}
	root = xnode_map();
	xnode_set_node(root, "rdma_devices", devs);
	if (!rdma)
		xnode_set_str(root, "rdma", why);
	xnode_set_node(root, "transports", tr);
	rc = xemit(stdout, root, fmt);
	xnode_free(root);
	return rc < 0 ? fail("devices", "writing output: %s", strerror(-rc)) : EXIT_OK;
}
