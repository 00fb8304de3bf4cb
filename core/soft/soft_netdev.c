/* soft_netdev.c - soft devices bound to network interfaces, as rxe devices
 * and Apple's rdma_enN are: TBRT_SOFT_NETDEVS=veth0,veth1 makes soft<i> the
 * device of the i-th interface. Its GIDs are only that interface's
 * addresses (soft_gid.c asks soft_netdev_has), its UDP wire sends and
 * receives through that interface alone (SO_BINDTODEVICE), and its ports'
 * state follows the interface's link state (up and carrier: ACTIVE, else
 * DOWN), so the engine's "the device holding the GID of the bootstrap
 * address" really picks the device facing the peer: a host with two
 * cables to two peers uses the right one for each. */
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "soft/soft.h"
#include "util/util.h"

/* How often the link state is looked at again (an ioctl). */
#define LINK_CHECK_NS 50000000ull

/* The i-th name of TBRT_SOFT_NETDEVS into out; false when there is none. */
bool soft_netdev_name(int index, char *out, size_t len)
{
    const char *env = getenv("TBRT_SOFT_NETDEVS");
    if (!env || !*env)
        return false;
    const char *p = env;
    for (int i = 0; *p; i++) {
        size_t n = strcspn(p, ",");
        if (i == index) {
            snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), p);
            return n > 0;
        }
        p += n;
        if (*p == ',')
            p++;
    }
    return false;
}

int soft_netdev_count(void)
{
    const char *env = getenv("TBRT_SOFT_NETDEVS");
    if (!env || !*env)
        return 0;
    int n = 1;
    for (const char *p = env; *p; p++)
        n += *p == ',';
    return n > 16 ? 16 : n;
}

/* Why interface `name` cannot back a device, or NULL. */
const char *soft_netdev_why(const char *name, char *buf, size_t len)
{
    if (!name[0] || strlen(name) >= IF_NAMESIZE) {
        snprintf(buf, len, "TBRT_SOFT_NETDEVS: \"%s\" is not an interface name", name);
        return buf;
    }
    if (if_nametoindex(name) == 0) {
        snprintf(buf, len, "TBRT_SOFT_NETDEVS: no interface %s in this namespace (ip link)", name);
        return buf;
    }
    return NULL;
}

static int link_state(const char *name)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return IBV_PORT_DOWN;
    struct ifreq r;
    memset(&r, 0, sizeof r);
    str_copy(r.ifr_name, sizeof r.ifr_name, name);
    int rc = ioctl(fd, SIOCGIFFLAGS, &r);
    close(fd);
    if (rc != 0)
        return IBV_PORT_DOWN;
    return (r.ifr_flags & IFF_UP) && (r.ifr_flags & IFF_RUNNING) ? IBV_PORT_ACTIVE
                                                                  : IBV_PORT_DOWN;
}

/* The state of a port of a device bound to an interface: a run-time
 * setting first (faults), then the link. */
int soft_netdev_port_state(struct soft_dev *sd, int port)
{
    int st = soft_faults_port_state(&sd->faults, sd->index, port);
    if (!sd->netdev[0] || st != IBV_PORT_ACTIVE)
        return st;
    uint64_t now = now_ns();
    if (!sd->link_checked || now - sd->link_checked > LINK_CHECK_NS) {
        sd->link_state = (uint8_t)link_state(sd->netdev);
        sd->link_checked = now;
    }
    return sd->link_state;
}
