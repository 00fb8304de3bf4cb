/* select.c - choose the device, port and GID that face the peer.
 *
 * RDMA is point to point, so the right device is the one holding a GID equal
 * to the bootstrap socket's local address (IPv4-mapped ::ffff:a.b.c.d, or
 * the IPv6 address): the interface the peer was reached through. The port is
 * the first ACTIVE one (never assume port 1: on Thunderbolt it often is not;
 * only llama-linux framing does, whatever port 1's state, as llama.cpp's
 * Linux transport does);
 * the whole GID table is scanned and RoCE v2 preferred where the provider
 * reports types. Every rejected device and port is remembered with its
 * reason, so a failed probe says exactly why. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "engine/link.h"
#include "util/util.h"

static int target_gid(tbrt_link *l, uint8_t gid[16], char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(l->x.fd, (struct sockaddr *)&ss, &len) != 0)
        return err_set(err, errlen, errno, "link %d: probe: getsockname on the bootstrap socket: %s",
                       l->id, strerror(errno));
    memset(gid, 0, 16);
    if (ss.ss_family == AF_INET) {
        gid[10] = gid[11] = 0xff;
        memcpy(gid + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        memcpy(gid, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
    } else {
        return err_set(err, errlen, EAFNOSUPPORT,
                       "link %d: probe: the bootstrap socket is not IPv4/IPv6", l->id);
    }
    return 0;
}

/* Pick port and GID on an open device; 0, or -errno with the reason. */
static int pick_port_gid(tbrt_link *l, tbrt_dev *dev, const uint8_t target[16], char *why,
                         size_t whylen)
{
    struct ibv_device_attr da;
    int rc = tbrt_dev_query(dev, &da);
    if (rc)
        return err_set(why, whylen, -rc, "query_device: %s", tbrt_dev_why(dev));
    char tgt[64];
    dev_gid_str(target, tgt, sizeof tgt);
    char skipped[256] = "";
    bool port1 = l->opts.framing == TBRT_FRAMING_LLAMA_LINUX;   /* opts.port is 1 */
    for (int port = 1; port <= da.phys_port_cnt; port++) {
        if (l->opts.port && port != l->opts.port)
            continue;
        struct ibv_port_attr pa;
        if ((rc = tbrt_port_query(dev, (uint8_t)port, &pa)) != 0)
            return err_set(why, whylen, -rc, "query_port %d: %s", port, tbrt_dev_why(dev));
        if (port1 && pa.state != IBV_PORT_ACTIVE)
            str_append(skipped, sizeof skipped, "port 1 is %s, but llama-linux framing uses it "
                       "anyway, as llama.cpp's Linux transport hard-codes port 1",
                       dev_port_state_name(pa.state));
        else if (pa.state != IBV_PORT_ACTIVE) {
            str_append(skipped, sizeof skipped, "%sport %d %s", skipped[0] ? ", " : "", port,
                       dev_port_state_name(pa.state));
            continue;
        }
        int found = -1, found_type = -1;
        bool typed = true;
        struct ibv_gid_entry e;
        if (l->opts.gid_index >= 0) {
            rc = tbrt_gid_query(dev, (uint8_t)port, l->opts.gid_index, &e);
            if (rc < 0)
                return err_set(why, whylen, rc == -ENODATA ? ENODATA : -rc,
                               "port %d GID[%d] (TBRT_GID_INDEX/gid_index) is %s", port,
                               l->opts.gid_index, rc == -ENODATA ? "empty" : tbrt_dev_why(dev));
            found = l->opts.gid_index;
            found_type = rc == 1 ? -1 : (int)e.gid_type;
        } else {
            for (int i = 0; i < pa.gid_tbl_len; i++) {
                rc = tbrt_gid_query(dev, (uint8_t)port, i, &e);
                if (rc < 0 || memcmp(e.gid.raw, target, 16) != 0)
                    continue;
                if (rc == 1)
                    typed = false;
                if (found < 0 || (typed && e.gid_type == IBV_GID_TYPE_ROCE_V2 &&
                                  found_type != IBV_GID_TYPE_ROCE_V2)) {
                    found = i;
                    found_type = rc == 1 ? -1 : (int)e.gid_type;
                }
            }
            if (found < 0)
                return err_set(why, whylen, EADDRNOTAVAIL,
                               "%s%sport %d: no GID equals %s (the bootstrap socket's local "
                               "address) in its %d-entry table",
                               skipped, skipped[0] ? "; " : "", port, tgt, pa.gid_tbl_len);
            tbrt_gid_query(dev, (uint8_t)port, found, &e);
        }
        l->x.port = (uint8_t)port;
        l->x.gid_index = found;
        memcpy(l->x.gid, e.gid.raw, 16);
        l->x.lid = pa.lid;
        l->x.mtu = pa.active_mtu;
        char g[64];
        dev_gid_str(e.gid.raw, g, sizeof g);
        snprintf(why, whylen, "%s%s%s port %d%s%s%s, GID[%d] %s%s%s", tbrt_dev_name(dev),
                 tbrt_dev_personality(dev)[0] ? " " : "", tbrt_dev_personality(dev), port,
                 skipped[0] ? " (" : "", skipped, skipped[0] ? ")" : "", found, g,
                 found_type >= 0 ? " " : "", found_type >= 0 ? dev_gid_type_name(found_type) : "");
        if (l->opts.gid_index < 0)
            str_append(why, whylen, " matches the bootstrap address");
        else
            str_append(why, whylen, " (given gid_index)");
        return 0;
    }
    if (l->opts.port && l->opts.port > da.phys_port_cnt)
        return err_set(why, whylen, ENODEV, "port %d requested, the device has %d", l->opts.port,
                       da.phys_port_cnt);
    return err_set(why, whylen, ENETDOWN, "no ACTIVE port (%s)", skipped[0] ? skipped : "none");
}

static bool is_real(const tbrt_devinfo *d)
{
    return strcmp(d->kind, "soft") != 0 && !strstr(d->name, ":model");
}

int link_select_device(tbrt_link *l, char *err, size_t errlen)
{
    uint8_t target[16];
    int rc = target_gid(l, target, err, errlen);
    if (rc)
        return rc;
    const char *want = l->opts.device;
    bool autosel = strcmp(want, "auto") == 0;
    const struct tbrt_dev_ops *kind = autosel ? NULL : dev_kind(want);
    tbrt_devinfo list[64];
    int n = tbrt_devices(list, (int)TBRT_ARRAY_LEN(list));
    if (n > (int)TBRT_ARRAY_LEN(list))
        n = (int)TBRT_ARRAY_LEN(list);
    char reasons[TBRT_WHY_MAX] = "";
    tbrt_dev_opts dopts = {.personality = l->opts.personality, .ports = l->opts.ports,
                           .pci = l->opts.pci, .trace = l->opts.trace, .wire = l->opts.wire,
                           .faults = l->opts.faults, .pcap = l->opts.pcap};
    /* "auto": real hardware first, the software device only when none works */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) {
            tbrt_devinfo *d = &list[i];
            if (autosel) {
                if (is_real(d) != (pass == 0))
                    continue;
                if (pass == 1 && strcmp(d->kind, "soft") != 0)
                    continue;
            } else if (pass == 1) {
                break;
            } else if (kind ? strcmp(d->kind, want) != 0 : strcmp(d->name, want) != 0) {
                continue;
            }
            if (!d->usable) {
                str_append(reasons, sizeof reasons, "%s%s: %s", reasons[0] ? "; " : "", d->name,
                           d->why);
                continue;
            }
            tbrt_dev *dev;
            char why[TBRT_WHY_MAX];
            rc = tbrt_dev_open(d->name, &dopts, &dev, why, sizeof why);
            if (rc == 0) {
                rc = pick_port_gid(l, dev, target, why, sizeof why);
                if (rc == 0) {
                    l->x.dev = dev;
                    l->x.flavor = tbrt_dev_flavor(dev);
                    if (autosel)
                        snprintf(l->info.why_device, sizeof l->info.why_device,
                                 "auto: %s%s%s", why,
                                 pass == 1 ? "; no real RDMA device has an ACTIVE port" : "",
                                 pass == 1 && reasons[0] ? " (" : "");
                    else
                        snprintf(l->info.why_device, sizeof l->info.why_device, "%s", why);
                    if (autosel && pass == 1 && reasons[0]) {
                        str_append(l->info.why_device, sizeof l->info.why_device, "%s)", reasons);
                    }
                    return 0;
                }
                tbrt_dev_close(dev);
            }
            /* a device's own message already starts with its name */
            size_t nl = strlen(d->name);
            bool named = strncmp(why, d->name, nl) == 0 && why[nl] == ':';
            str_append(reasons, sizeof reasons, "%s%s%s%s", reasons[0] ? "; " : "",
                       named ? "" : d->name, named ? "" : ": ", why);
        }
    }
    if (!reasons[0]) {
        if (autosel || kind)
            return err_set(err, errlen, ENODEV, "link %d: probe: no %s device found", l->id, want);
        return err_set(err, errlen, ENODEV,
                       "link %d: probe: no device named \"%s\" (see `tbrt devices`)", l->id, want);
    }
    return err_set(err, errlen, ENODEV, "link %d: probe: no usable RDMA device: %s", l->id, reasons);
}
