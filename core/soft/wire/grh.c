/* grh.c - what a UD receive finds in front of the message (wire.h): the
 * GRH, written the same by every wire. RoCE v2 carries IPv6 or IPv4; a NIC
 * puts the IPv6 header in the 40 bytes, or, between IPv4-mapped GIDs, the
 * 20-byte IPv4 header in the last 20 of them (rdma-core's ibv_ud_pingpong
 * and ibv_create_ah_from_wc look there for it). */
#include <string.h>

#include "soft/wire/wire.h"

static bool ipv4_mapped(const uint8_t g[16])
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(g, prefix, sizeof prefix) == 0;
}

/* RFC 1071 over an IPv4 header of 20 bytes. */
static uint16_t ip_checksum(const uint8_t *h)
{
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2)
        sum += (uint32_t)(h[i] << 8 | h[i + 1]);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

void soft_grh_build(uint8_t grh[SOFT_GRH_BYTES], const uint8_t sgid[16], const uint8_t dgid[16],
                    uint32_t payload_len)
{
    /* what follows the IP header of a UD packet: UDP, BTH, DETH, the ICRC */
    enum { UDP = 17, HOP_LIMIT = 64, UDP_BTH_ICRC = 8 + 12 + 8 + 4 };
    memset(grh, 0, SOFT_GRH_BYTES);
    if (ipv4_mapped(sgid) && ipv4_mapped(dgid)) {
        uint8_t *ip = grh + 20;
        uint32_t total = 20 + UDP_BTH_ICRC + payload_len;  /* as on the wire */
        ip[0] = 0x45;                   /* version 4, 5 words */
        ip[2] = (uint8_t)(total >> 8);
        ip[3] = (uint8_t)total;
        ip[6] = 0x40;                   /* don't fragment */
        ip[8] = HOP_LIMIT;
        ip[9] = UDP;
        memcpy(ip + 12, sgid + 12, 4);
        memcpy(ip + 16, dgid + 12, 4);
        uint16_t c = ip_checksum(ip);
        ip[10] = (uint8_t)(c >> 8);
        ip[11] = (uint8_t)c;
        return;
    }
    uint32_t plen = UDP_BTH_ICRC + payload_len;
    grh[0] = 0x60;                      /* version 6 */
    grh[4] = (uint8_t)(plen >> 8);
    grh[5] = (uint8_t)plen;
    grh[6] = UDP;                       /* next header */
    grh[7] = HOP_LIMIT;
    memcpy(grh + 8, sgid, 16);
    memcpy(grh + 24, dgid, 16);
}
