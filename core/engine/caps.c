/* caps.c - the 24-byte caps blob exchanged before activation, in the two
 * layouts llama.cpp's RPC uses (little endian):
 *
 *   Apple: qpn u32 | lid u16 | reserved u16 | gid[16]
 *   Linux: qpn u32 | psn u32 | gid[16]
 *
 * All zero means "no RDMA here, stay on TCP". Decoding checks what a real
 * peer could never send, so garbage is an error with a reason, not a QP
 * pointed at nowhere. */
#include <endian.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "dev/dev.h"
#include "util/util.h"

int tbrt_caps_encode(const tbrt_caps *c, uint8_t *out, size_t outlen)
{
    if (!c || !out || outlen < TBRT_CAPS_SIZE)
        return -EINVAL;
    memset(out, 0, TBRT_CAPS_SIZE);
    if (c->flavor == 0)
        return 0;
    uint32_t qpn = htole32(c->qpn);
    memcpy(out, &qpn, 4);
    if (c->flavor == TBRT_FLAVOR_APPLE) {
        uint16_t lid = htole16(c->lid);
        memcpy(out + 4, &lid, 2);
    } else if (c->flavor == TBRT_FLAVOR_LINUX) {
        uint32_t psn = htole32(c->psn);
        memcpy(out + 4, &psn, 4);
    } else {
        return -EINVAL;
    }
    memcpy(out + 8, c->gid, 16);
    return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

int tbrt_caps_decode(const uint8_t *blob, size_t len, int flavor, tbrt_caps *c, char *err,
                     size_t errlen)
{
    if (!c)
        return err_set(err, errlen, EINVAL, "caps: no output");
    memset(c, 0, sizeof *c);
    if (!blob)
        return err_set(err, errlen, EINVAL, "caps: no blob");
    if (len != TBRT_CAPS_SIZE)
        return err_set(err, errlen, EINVAL, "caps: %zu bytes, expected %d", len, TBRT_CAPS_SIZE);
    if (all_zero(blob, len))
        return 1;
    if (flavor != TBRT_FLAVOR_APPLE && flavor != TBRT_FLAVOR_LINUX)
        return err_set(err, errlen, EINVAL, "caps: unknown flavor %d", flavor);
    uint32_t qpn;
    memcpy(&qpn, blob, 4);
    qpn = le32toh(qpn);
    const uint8_t *gid = blob + 8;
    if (qpn > 0xffffff)
        return err_set(err, errlen, EINVAL, "caps: qpn 0x%x exceeds 24 bits (garbage caps?)", qpn);
    if (qpn < 2)
        return err_set(err, errlen, EINVAL,
                       "caps: qpn %u is a special QP, not a connectable one (garbage caps?)", qpn);
    if (all_zero(gid, 16))
        return err_set(err, errlen, EINVAL, "caps: qpn %u with an all-zero GID (garbage caps?)",
                       qpn);
    if (gid[0] == 0xff)
        return err_set(err, errlen, EINVAL, "caps: GID %02x%02x:... is multicast, not a port GID",
                       gid[0], gid[1]);
    c->flavor = flavor;
    c->qpn = qpn;
    memcpy(c->gid, gid, 16);
    if (flavor == TBRT_FLAVOR_APPLE) {
        uint16_t lid, reserved;
        memcpy(&lid, blob + 4, 2);
        memcpy(&reserved, blob + 6, 2);
        if (reserved)
            return err_set(err, errlen, EINVAL,
                           "caps: reserved field 0x%04x is not zero (Linux-layout caps from a "
                           "peer in the other mode? psn would sit there)", le16toh(reserved));
        c->lid = le16toh(lid);
    } else {
        uint32_t psn;
        memcpy(&psn, blob + 4, 4);
        psn = le32toh(psn);
        if (psn > 0xffffff)
            return err_set(err, errlen, EINVAL, "caps: psn 0x%x exceeds 24 bits (garbage caps?)",
                           psn);
        c->psn = psn;
    }
    return 0;
}
