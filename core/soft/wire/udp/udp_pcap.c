/* udp_pcap.c - captures of the UDP wire (TBRT_PCAP=file, the `pcap` device
 * option): every packet sent and received, framed as it would lie on an
 * Ethernet link (Ethernet, IPv4 or IPv6, UDP), so `tshark -r file` decodes
 * RoCE (UDP port 4791) and checks each ICRC.
 *
 * The file is pcapng (tshark and Wireshark read it under any name): one
 * section whose comment says what tbrt's own control packets are, one
 * Ethernet interface with nanosecond stamps, one enhanced packet block per
 * packet with its direction (epb_flags: inbound / outbound) and, for tbrt's
 * credit packets, a comment saying so. The IP header is the one the ICRC
 * was computed over (udp_pkt.c: identification 0, DF, TTL 64); the UDP
 * checksum is the real one. A "%p" in the path becomes the process id, so
 * each process of a run writes its own file. The first device of a process
 * that captures into a file starts it over; the next ones (a link opens a
 * device of its own) append sections to it. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "soft/wire/udp/udp.h"

struct udp_pcap {
    FILE *f;
};

static const char SECTION_COMMENT[] =
    "tbrt soft device, UDP wire: RoCEv2 packets (UDP port 4791 unless TBRT_SOFT_UDP_PORT "
    "says otherwise). tbrt's own control packet: BTH opcode 0xC0 (manufacturer specific) "
    "'TBRT_CREDIT' with an 8-byte payload: the magic 'TBCR' and, big endian, the number of "
    "receives the sending QP has posted since it was reset: apple-uc's credit flow control "
    "(TN3205: a SEND waits until the peer has a receive posted) carried across UDP.";

static void put_block(FILE *f, uint32_t type, const void *body, uint32_t len)
{
    uint32_t total = 12 + ((len + 3) & ~3u);
    static const uint8_t zero[4];
    fwrite(&type, 4, 1, f);
    fwrite(&total, 4, 1, f);
    fwrite(body, 1, len, f);
    fwrite(zero, 1, ((len + 3) & ~3u) - len, f);
    fwrite(&total, 4, 1, f);
}

/* An option: code, length, value padded to 4. Returns the bytes written. */
static uint32_t opt(uint8_t *out, uint16_t code, const void *v, uint16_t len)
{
    memcpy(out, &code, 2);
    memcpy(out + 2, &len, 2);
    if (len)
        memcpy(out + 4, v, len);     /* (v may be NULL for an empty option) */
    uint32_t n = 4 + ((len + 3u) & ~3u);
    memset(out + 4 + len, 0, n - 4 - len);
    return n;
}

struct udp_pcap *udp_pcap_open(const char *path, char *why, size_t len)
{
    char name[512];
    const char *p = strstr(path, "%p");
    if (p)
        snprintf(name, sizeof name, "%.*s%d%s", (int)(p - path), path, (int)getpid(), p + 2);
    else
        str_copy(name, sizeof name, path);
    /* the first device of this process to capture into a file starts it
     * over; later ones (a device per link) append a section of their own */
    static char started[8][512];
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    bool again = false;
    int slot = -1;
    for (int i = 0; i < 8; i++) {
        if (strcmp(started[i], name) == 0)
            again = true;
        if (slot < 0 && !started[i][0])
            slot = i;
    }
    if (!again && slot >= 0)
        str_copy(started[slot], sizeof started[slot], name);
    pthread_mutex_unlock(&lock);
    int fd = open(name, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (again ? O_APPEND : O_TRUNC),
                  0600);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        err_set(why, len, errno, "capture %s: %s", name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    struct udp_pcap *pc = calloc(1, sizeof *pc);
    if (!pc) {
        fclose(f);
        err_set(why, len, ENOMEM, "out of memory");
        return NULL;
    }
    pc->f = f;
    uint8_t b[1024];
    uint32_t magic = 0x1a2b3c4d, n = 0;
    uint16_t major = 1, minor = 0;
    uint64_t section = UINT64_MAX;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &major, 2);
    memcpy(b + 6, &minor, 2);
    memcpy(b + 8, &section, 8);
    n = 16;
    n += opt(b + n, 1, SECTION_COMMENT, (uint16_t)strlen(SECTION_COMMENT));
    static const char app[] = "tbrt";
    n += opt(b + n, 4, app, sizeof app - 1); /* shb_userappl */
    n += opt(b + n, 0, NULL, 0);
    put_block(f, 0x0a0d0d0a, b, n);
    uint16_t linktype = 1, reserved = 0;   /* LINKTYPE_ETHERNET */
    uint32_t snaplen = 0;
    memcpy(b, &linktype, 2);
    memcpy(b + 2, &reserved, 2);
    memcpy(b + 4, &snaplen, 4);
    n = 8;
    uint8_t tsresol = 9;                   /* nanoseconds */
    n += opt(b + n, 9, &tsresol, 1);
    n += opt(b + n, 0, NULL, 0);
    put_block(f, 1, b, n);
    fflush(f);
    return pc;
}

void udp_pcap_close(struct udp_pcap *pc)
{
    if (!pc)
        return;
    fclose(pc->f);
    free(pc);
}

static uint32_t sum16(const uint8_t *p, uint32_t n, uint32_t s)
{
    for (uint32_t i = 0; i + 1 < n; i += 2)
        s += (uint32_t)p[i] << 8 | p[i + 1];
    if (n & 1)
        s += (uint32_t)p[n - 1] << 8;
    return s;
}

void udp_pcap_packet(struct udp_pcap *pc, const struct udp_path *path, const uint8_t *pkt,
                     uint32_t len, bool tx)
{
    uint8_t frame[14 + 48 + UDP_PKT_MAX + 64];
    if (len > UDP_PKT_MAX + 64)
        return;
    bool v4 = udp_gid_v4(path->sgid);
    /* Ethernet: locally administered MACs made of the addresses' last bytes */
    uint8_t *e = frame;
    uint8_t dmac[6] = {0x02, 0x54, 0x42, path->dgid[13], path->dgid[14], path->dgid[15]};
    uint8_t smac[6] = {0x02, 0x54, 0x42, path->sgid[13], path->sgid[14], path->sgid[15]};
    memcpy(e, dmac, 6);
    memcpy(e + 6, smac, 6);
    e[12] = v4 ? 0x08 : 0x86;
    e[13] = v4 ? 0x00 : 0xdd;
    uint32_t ih = udp_ip_headers(path, len, false, frame + 14);
    uint8_t *udp = frame + 14 + ih - 8;
    memcpy(frame + 14 + ih, pkt, len);
    /* the UDP checksum over the pseudo header */
    uint32_t ulen = 8 + len, s = 0;
    if (v4) {
        s = sum16(path->sgid + 12, 4, s);
        s = sum16(path->dgid + 12, 4, s);
    } else {
        s = sum16(path->sgid, 16, s);
        s = sum16(path->dgid, 16, s);
    }
    s += IPPROTO_UDP + ulen;
    s = sum16(udp, ulen, s);
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    uint16_t ck = (uint16_t)~s;
    if (ck == 0)
        ck = 0xffff;
    udp[6] = (uint8_t)(ck >> 8);
    udp[7] = (uint8_t)ck;
    uint32_t flen = 14 + ih + len;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t ns = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
    uint8_t hdr[20];
    uint32_t ifid = 0, hi = (uint32_t)(ns >> 32), lo = (uint32_t)ns;
    memcpy(hdr, &ifid, 4);
    memcpy(hdr + 4, &hi, 4);
    memcpy(hdr + 8, &lo, 4);
    memcpy(hdr + 12, &flen, 4);
    memcpy(hdr + 16, &flen, 4);
    uint8_t opts[128];
    uint32_t on = 0;
    uint32_t flags = tx ? 2 : 1;          /* outbound / inbound */
    on += opt(opts + on, 2, &flags, 4);
    if (len >= 1 && pkt[0] == UDP_OP_TBRT_CREDIT) {
        static const char c[] = "tbrt control packet: apple-uc receive credits (TBRT_CREDIT, "
                                "payload 'TBCR' + receives posted)";
        on += opt(opts + on, 1, c, sizeof c - 1);
    }
    on += opt(opts + on, 0, NULL, 0);
    uint32_t body = 20 + ((flen + 3) & ~3u) + on;
    uint32_t type = 6, total = 12 + body;
    static const uint8_t zero[4];
    FILE *f = pc->f;
    fwrite(&type, 4, 1, f);
    fwrite(&total, 4, 1, f);
    fwrite(hdr, 1, 20, f);
    fwrite(frame, 1, flen, f);
    fwrite(zero, 1, ((flen + 3) & ~3u) - flen, f);
    fwrite(opts, 1, on, f);
    fwrite(&total, 4, 1, f);
    fflush(f);
}
