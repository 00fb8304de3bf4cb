/* soft_gid.c - GID tables of the soft device's ports.
 *
 * As on Thunderbolt and RoCE, GIDs come from the host's addresses, so the
 * engine can find "the GID equal to the bootstrap socket's local address":
 * index 0 is the link-local GID (fe80:: + the port's EUI-64), then the
 * IPv4-mapped GIDs (::ffff:a.b.c.d) of this host's IPv4 addresses, then its
 * IPv6 addresses; in each family the loopback interface's (127.0.0.1, ::1)
 * come last, so a program that takes the first IPv4 RoCE v2 GID (perftest
 * without -x) gets one a peer elsewhere can reach. A RoCE personality (linux-rc) lists
 * every address twice, RoCE v1 then v2, like mlx5; the Apple personality
 * has no GID types at all (its provider does not report them). A port that
 * is not ACTIVE (now: its state can change at run time) shows only its
 * link-local GIDs: without a link there is no address. A device bound to
 * an interface (TBRT_SOFT_NETDEVS) has that interface's addresses only. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>

#include "soft/soft.h"
#include "util/util.h"

static void add(struct soft_dev *sd, int port, const uint8_t raw[16], int type)
{
    int n = sd->ngids[port];
    for (int i = 0; i < n; i++)
        if (memcmp(sd->gids[port][i].raw, raw, 16) == 0 && sd->gids[port][i].type == type)
            return;
    if (n >= SOFT_GIDS)
        return;
    memcpy(sd->gids[port][n].raw, raw, 16);
    sd->gids[port][n].type = type;
    sd->ngids[port] = n + 1;
}

static void add_both(struct soft_dev *sd, int port, const uint8_t raw[16])
{
    if (sd->p->gid_types) {
        add(sd, port, raw, IBV_GID_TYPE_ROCE_V1);
        add(sd, port, raw, IBV_GID_TYPE_ROCE_V2);
    } else {
        add(sd, port, raw, IBV_GID_TYPE_IB);
    }
}

void soft_gid_build(struct soft_dev *sd)
{
    struct ifaddrs *ifa = NULL;
    getifaddrs(&ifa);
    for (int port = 0; port < sd->p->nports; port++) {
        sd->ngids[port] = 0;
        /* link-local from a locally administered MAC 02:54:42:<dev>:<port>:01 */
        uint8_t ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0,
                          0x02 ^ 0x02, 0x54, 0x42, 0xff, 0xfe, (uint8_t)sd->index,
                          (uint8_t)(port + 1), 0x01};
        add_both(sd, port, ll);
        /* IPv4 then IPv6, each family's loopback addresses after the others */
        for (int pass = 0; pass < 4; pass++)
            for (struct ifaddrs *a = ifa; a; a = a->ifa_next) {
                int fam = pass / 2;
                bool loopback_pass = pass % 2, loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
                if (!a->ifa_addr || !(a->ifa_flags & IFF_UP) || loopback != loopback_pass)
                    continue;
                /* a device bound to an interface has its addresses only */
                if (sd->netdev[0] && (!a->ifa_name || strcmp(a->ifa_name, sd->netdev) != 0))
                    continue;
                uint8_t g[16] = {0};
                if (fam == 0 && a->ifa_addr->sa_family == AF_INET) {
                    g[10] = g[11] = 0xff;
                    memcpy(g + 12, &((struct sockaddr_in *)a->ifa_addr)->sin_addr, 4);
                } else if (fam == 1 && a->ifa_addr->sa_family == AF_INET6) {
                    const struct in6_addr *v6 = &((struct sockaddr_in6 *)a->ifa_addr)->sin6_addr;
                    if (IN6_IS_ADDR_LINKLOCAL(v6))
                        continue;
                    memcpy(g, v6, 16);
                } else {
                    continue;
                }
                add_both(sd, port, g);
            }
    }
    if (ifa)
        freeifaddrs(ifa);
}

int soft_query_gid(tbrt_dev *dev, uint8_t port, int index, struct ibv_gid_entry *e)
{
    struct soft_dev *sd = soft_of(dev);
    if (port < 1 || port > sd->p->nports)
        return dev_fail(dev, EINVAL, "query_gid: port %u does not exist (1..%d)", port,
                        sd->p->nports);
    if (index < 0 || index >= sd->p->gid_tbl_len)
        return dev_fail(dev, EINVAL, "query_gid: index %d outside the table (0..%d)", index,
                        sd->p->gid_tbl_len - 1);
    memset(e, 0, sizeof *e);
    e->gid_index = (uint32_t)index;
    e->port_num = port;
    int n = sd->ngids[port - 1];
    if (soft_port_state(sd, port) != IBV_PORT_ACTIVE)
        n = sd->p->gid_types ? 2 : 1;   /* link-local only */
    if (index >= n)
        return -ENODATA;        /* an empty entry */
    memcpy(e->gid.raw, sd->gids[port - 1][index].raw, 16);
    e->gid_type = (uint32_t)sd->gids[port - 1][index].type;
    return sd->p->gid_types ? 0 : 1;
}

bool soft_gid_is_local(struct soft_dev *sd, const uint8_t gid[16])
{
    for (int p = 0; p < sd->p->nports; p++)
        for (int i = 0; i < sd->ngids[p] && soft_port_state(sd, p + 1) == IBV_PORT_ACTIVE; i++)
            if (memcmp(sd->gids[p][i].raw, gid, 16) == 0)
                return true;
    /* another soft device of this host (its link-local GID) */
    return gid[0] == 0xfe && gid[1] == 0x80 && gid[9] == 0x54 && gid[10] == 0x42;
}
