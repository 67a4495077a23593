/* RDMA device discovery and transport auto-selection; see xdev.h.
 *
 * "No RDMA" (which sends an address without a scheme to tcp) comes in
 * several shapes: ibv_get_device_list() returning NULL with errno ENOSYS (no
 * /sys/class/infiniband_verbs at all), zero devices, or devices whose ports
 * are all down.  Each becomes one plain line; nothing here ever mentions a
 * resolver error. */
#include <errno.h>
#include <inttypes.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>

#include <infiniband/verbs.h>

#include "xprt/xdev.h"
#include "xprt/rdma_util.h"

/* First active (device, port), or why there is none. */
static bool find_active(char *dev, size_t devlen, unsigned *port, char *why, size_t whylen)
{
	struct ibv_device **list;
	char first[IBV_SYSFS_NAME_MAX] = "";
	int n = 0;
	bool found = false;

	errno = 0;
	list = ibv_get_device_list(&n);
	if (!list) {
		if (why)
			snprintf(why, whylen, "no RDMA device found (libibverbs: %s)",
				 strerror(errno ? errno : ENODEV));
		return false;
	}
	for (int i = 0; i < n && !found; i++) {
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_device_attr da;

		if (!first[0])
			snprintf(first, sizeof(first), "%s", ibv_get_device_name(list[i]));
		if (!ctx)
			continue;
		if (!ibv_query_device(ctx, &da)) {
			for (unsigned p = 1; p <= da.phys_port_cnt; p++) {
				struct ibv_port_attr pa;

				if (!ibv_query_port(ctx, (uint8_t)p, &pa) && pa.state == IBV_PORT_ACTIVE) {
					if (dev)
						snprintf(dev, devlen, "%s", ibv_get_device_name(list[i]));
					if (port)
						*port = p;
					found = true;
					break;
				}
			}
		}
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	if (!found && why) {
		if (!n)
			snprintf(why, whylen, "no RDMA device found");
		else if (n == 1)
			snprintf(why, whylen, "RDMA device %s has no active port", first);
		else
			snprintf(why, whylen, "no RDMA device has an active port (%d devices)", n);
	}
	return found;
}

bool xdev_rdma_available(char *why, size_t whylen)
{
	return find_active(NULL, 0, NULL, why, whylen);
}

static const char *port_state(enum ibv_port_state s)
{
	switch (s) {
	case IBV_PORT_DOWN:		return "down";
	case IBV_PORT_INIT:		return "init";
	case IBV_PORT_ARMED:		return "armed";
	case IBV_PORT_ACTIVE:		return "active";
	case IBV_PORT_ACTIVE_DEFER:	return "active_defer";
	default:			return "nop";
	}
}

static const char *gid_type(unsigned t)
{
	switch (t) {
	case IBV_GID_TYPE_IB:		return "IB";
	case IBV_GID_TYPE_ROCE_V1:	return "RoCE v1";
	case IBV_GID_TYPE_ROCE_V2:	return "RoCE v2";
	default:			return "?";
	}
}

static int add_gids(struct xnode *m, struct ibv_context *ctx, unsigned port, int tbl_len)
{
	struct xnode *gl = xnode_set_list(m, "gids");

	if (!gl)
		return -ENOMEM;
	for (int i = 0; i < tbl_len; i++) {
		struct ibv_gid_entry e;
		char g[INET6_ADDRSTRLEN], nd[IF_NAMESIZE] = "";
		struct xnode *gm;

		/* ENODATA: an empty slot of the table */
		if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0))
			continue;
		inet_ntop(AF_INET6, e.gid.raw, g, sizeof(g));
		if (e.ndev_ifindex)
			if_indextoname(e.ndev_ifindex, nd);
		gm = xnode_push_map(gl);
		if (!gm || !xnode_set_u64(gm, "index", e.gid_index) || !xnode_set_str(gm, "gid", g) ||
		    !xnode_set_str(gm, "type", gid_type(e.gid_type)) ||
		    !xnode_set_str(gm, "netdev", nd[0] ? nd : NULL))
			return -ENOMEM;
	}
	return 0;
}

static int add_device(struct xnode *list, struct ibv_device *dev)
{
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_device_attr da;
	int rc = 0;

	if (!ctx)
		return 0;	/* gone or no permission: not listable */
	if (ibv_query_device(ctx, &da))
		goto close_ctx;
	for (unsigned p = 1; p <= da.phys_port_cnt; p++) {
		struct ibv_port_attr pa;
		uint64_t guid = be64toh(da.node_guid);
		struct xnode *m;

		if (ibv_query_port(ctx, (uint8_t)p, &pa))
			continue;
		m = xnode_push_map(list);
		if (!m || !xnode_set_str(m, "device", ibv_get_device_name(dev)) ||
		    !xnode_set_u64(m, "port", p) || !xnode_set_str(m, "state", port_state(pa.state)) ||
		    !xnode_set_str(m, "link_layer",
				   pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand") ||
		    !xnode_set_u64(m, "active_mtu", xrdma_mtu_bytes(pa.active_mtu)) ||
		    !xnode_set_u64(m, "lid", pa.lid) ||
		    !xnode_set_strf(m, "node_guid", "%04x:%04x:%04x:%04x",
				    (unsigned)(guid >> 48), (unsigned)(guid >> 32) & 0xffff,
				    (unsigned)(guid >> 16) & 0xffff, (unsigned)guid & 0xffff)) {
			rc = -ENOMEM;
			break;
		}
		rc = add_gids(m, ctx, p, pa.gid_tbl_len);
		if (rc)
			break;
	}
close_ctx:
	ibv_close_device(ctx);
	return rc;
}

int xdev_list(struct xnode **out, char *why, size_t whylen)
{
	struct xnode *list = xnode_list();
	struct ibv_device **devs;
	int n = 0, rc = 0;

	*out = NULL;
	if (!list)
		return -ENOMEM;
	errno = 0;
	devs = ibv_get_device_list(&n);
	if (!devs) {
		if (why)
			snprintf(why, whylen, "no RDMA device found (libibverbs: %s)",
				 strerror(errno ? errno : ENODEV));
		*out = list;
		return 0;
	}
	for (int i = 0; i < n && !rc; i++)
		rc = add_device(list, devs[i]);
	ibv_free_device_list(devs);
	if (rc) {
		xnode_free(list);
		return rc;
	}
	if (!n && why)
		snprintf(why, whylen, "no RDMA device found");
	else if (why && !xdev_rdma_available(why, whylen))
		; /* why says which device lacks an active port */
	else if (why && whylen)
		why[0] = '\0';
	*out = list;
	return 0;
}

int xaddr_resolve_auto(struct xuri *u, bool datagram, char *why, size_t whylen)
{
	char dev[IBV_SYSFS_NAME_MAX], reason[200];
	unsigned port = 0;

	if (u->scheme != XURI_AUTO)
		return 0;
	if (find_active(dev, sizeof(dev), &port, reason, sizeof(reason))) {
		u->scheme = datagram ? XURI_UD : XURI_RDMA;
		if (why)
			snprintf(why, whylen, "auto: %s (device %s port %u active)",
				 datagram ? "ud" : "rdma", dev, port);
	} else {
		u->scheme = datagram ? XURI_UDP : XURI_TCP;
		if (why)
			snprintf(why, whylen, "auto: %s (%s)", datagram ? "udp" : "tcp", reason);
	}
	return 0;
}

int xdev_require(const struct xuri *u, char *err, size_t errlen)
{
	char reason[200], us[300], alt[300];
	struct xuri a = *u;

	if (u->scheme != XURI_RDMA && u->scheme != XURI_UD)
		return 0;
	if (find_active(NULL, 0, NULL, reason, sizeof(reason)))
		return 0;
	a.scheme = u->scheme == XURI_UD ? XURI_UDP : XURI_TCP;
	xrdma_uri_str(u, us, sizeof(us));
	xrdma_uri_str(&a, alt, sizeof(alt));
	if (xuri_is_gid(u->host))	/* no IP address to offer */
		snprintf(err, errlen, "%s: %s", us, reason);
	else
		snprintf(err, errlen, "%s: %s; use %s instead", us, reason, alt);
	return -ENODEV;
}
