/* udp_pkt.c - RoCEv2 packets of the UDP wire: the opcodes and what each
 * carries (IBA 9.2-9.5), building and parsing BTH and its extension
 * headers, the ICRC (RoCEv2 annex A17.3.3), the modelled IP/UDP headers
 * the ICRC and the capture use, and the UDP source port of a flow.
 *
 * BTH (12 bytes): opcode, SE|M|pad(2)|TVer(4), P_Key, resv8a (FECN/BECN in
 * RoCEv2), dest QP (24), A|resv7, PSN (24). RETH: VA(64) R_Key DMA length.
 * AETH: syndrome, MSN (24). DETH: Q_Key, resv8, source QP (24). ImmDt: 4
 * bytes as posted. AtomicETH: VA, R_Key, swap/add, compare. AtomicAckETH:
 * the original value.
 *
 * The ICRC is CRC-32 (IEEE 802.3's, as Ethernet's FCS) over 8 bytes of
 * ones standing for the LRH that RoCEv2 lacks, then the IP header, the UDP
 * header and BTH with the fields a router may change set to ones (IPv4:
 * ToS, TTL, header checksum; IPv6: traffic class, flow label, hop limit;
 * UDP checksum; BTH resv8a), then the rest of the packet up to the ICRC,
 * and it goes on the wire least significant byte first. The IP header is
 * the one this wire models (IPv4: identification 0, DF set), which the
 * capture writes too, so both ends and Wireshark compute the same. The
 * CRC itself is udp_crc.c's. */
#include <arpa/inet.h>
#include <string.h>

#include "soft/wire/udp/udp.h"

static const uint16_t op_flags[32] = {
    [UDP_OP_SEND_FIRST] = UDP_F_REQ | UDP_F_SEND | UDP_F_PAYLOAD | UDP_F_FIRST,
    [UDP_OP_SEND_MIDDLE] = UDP_F_REQ | UDP_F_SEND | UDP_F_PAYLOAD,
    [UDP_OP_SEND_LAST] = UDP_F_REQ | UDP_F_SEND | UDP_F_PAYLOAD | UDP_F_LAST,
    [UDP_OP_SEND_LAST_IMM] = UDP_F_REQ | UDP_F_SEND | UDP_F_PAYLOAD | UDP_F_LAST | UDP_F_IMM,
    [UDP_OP_SEND_ONLY] = UDP_F_REQ | UDP_F_SEND | UDP_F_PAYLOAD | UDP_F_FIRST | UDP_F_LAST,
    [UDP_OP_SEND_ONLY_IMM] = UDP_F_REQ | UDP_F_SEND | UDP_F_PAYLOAD | UDP_F_FIRST | UDP_F_LAST |
                             UDP_F_IMM,
    [UDP_OP_WRITE_FIRST] = UDP_F_REQ | UDP_F_WRITE | UDP_F_PAYLOAD | UDP_F_FIRST | UDP_F_RETH,
    [UDP_OP_WRITE_MIDDLE] = UDP_F_REQ | UDP_F_WRITE | UDP_F_PAYLOAD,
    [UDP_OP_WRITE_LAST] = UDP_F_REQ | UDP_F_WRITE | UDP_F_PAYLOAD | UDP_F_LAST,
    [UDP_OP_WRITE_LAST_IMM] = UDP_F_REQ | UDP_F_WRITE | UDP_F_PAYLOAD | UDP_F_LAST | UDP_F_IMM,
    [UDP_OP_WRITE_ONLY] = UDP_F_REQ | UDP_F_WRITE | UDP_F_PAYLOAD | UDP_F_FIRST | UDP_F_LAST |
                          UDP_F_RETH,
    [UDP_OP_WRITE_ONLY_IMM] = UDP_F_REQ | UDP_F_WRITE | UDP_F_PAYLOAD | UDP_F_FIRST |
                              UDP_F_LAST | UDP_F_RETH | UDP_F_IMM,
    [UDP_OP_READ_REQ] = UDP_F_REQ | UDP_F_RETH,
    [UDP_OP_READ_RESP_FIRST] = UDP_F_RESP | UDP_F_PAYLOAD | UDP_F_FIRST | UDP_F_AETH,
    [UDP_OP_READ_RESP_MIDDLE] = UDP_F_RESP | UDP_F_PAYLOAD,
    [UDP_OP_READ_RESP_LAST] = UDP_F_RESP | UDP_F_PAYLOAD | UDP_F_LAST | UDP_F_AETH,
    [UDP_OP_READ_RESP_ONLY] = UDP_F_RESP | UDP_F_PAYLOAD | UDP_F_FIRST | UDP_F_LAST | UDP_F_AETH,
    [UDP_OP_ACK] = UDP_F_RESP | UDP_F_AETH,
    [UDP_OP_ATOMIC_ACK] = UDP_F_RESP | UDP_F_AETH | UDP_F_ATOMIC_ACK,
    [UDP_OP_CMP_SWAP] = UDP_F_REQ | UDP_F_ATOMIC,
    [UDP_OP_FETCH_ADD] = UDP_F_REQ | UDP_F_ATOMIC,
};

unsigned udp_op_flags(uint8_t opcode)
{
    uint8_t tr = opcode & 0xe0, op = opcode & 0x1f;
    if (opcode == UDP_OP_TBRT_CREDIT)
        return UDP_F_VALID | UDP_F_PAYLOAD;
    unsigned f = op_flags[op];
    if (!f)
        return 0;
    if (tr == UDP_TR_RC)
        return f | UDP_F_VALID;
    if (tr == UDP_TR_UC)        /* sends and writes, no READ/ACK/atomics */
        return (f & (UDP_F_SEND | UDP_F_WRITE)) ? f | UDP_F_VALID : 0;
    if (tr == UDP_TR_UD)        /* SEND ONLY (with immediate) */
        return (op == UDP_OP_SEND_ONLY || op == UDP_OP_SEND_ONLY_IMM)
                   ? f | UDP_F_DETH | UDP_F_VALID : 0;
    return 0;
}

const char *udp_op_name(uint8_t opcode)
{
    static const char *names[32] = {
        "SEND_FIRST", "SEND_MIDDLE", "SEND_LAST", "SEND_LAST_IMM", "SEND_ONLY", "SEND_ONLY_IMM",
        "WRITE_FIRST", "WRITE_MIDDLE", "WRITE_LAST", "WRITE_LAST_IMM", "WRITE_ONLY",
        "WRITE_ONLY_IMM", "READ_REQUEST", "READ_RESPONSE_FIRST", "READ_RESPONSE_MIDDLE",
        "READ_RESPONSE_LAST", "READ_RESPONSE_ONLY", "ACK", "ATOMIC_ACK", "CMP_SWAP", "FETCH_ADD",
    };
    if (opcode == UDP_OP_TBRT_CREDIT)
        return "TBRT_CREDIT";
    const char *n = names[opcode & 0x1f];
    return n ? n : "?";
}

uint16_t udp_flow_sport(uint32_t lqpn, uint32_t rqpn)
{
    uint64_t v = (uint64_t)lqpn * rqpn;
    v ^= v >> 20;
    v ^= v >> 40;
    uint32_t fl = (uint32_t)(v & 0xfffff);
    uint32_t lo = fl & 0x3fff, hi = fl & 0xfc000;
    lo ^= hi >> 14;
    return (uint16_t)(lo | 0xc000);
}

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put24(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 16);
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)v;
}
static void put32(uint8_t *p, uint32_t v) { put16(p, v >> 16); put16(p + 2, v); }
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }
static uint32_t get16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t get24(const uint8_t *p) { return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]; }
static uint32_t get32(const uint8_t *p) { return get16(p) << 16 | get16(p + 2); }
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }

uint32_t udp_pkt_headers(const struct udp_pkt *p, uint8_t pad, uint8_t *out)
{
    unsigned f = udp_op_flags(p->opcode);
    uint8_t *b = out;
    b[0] = p->opcode;
    b[1] = (uint8_t)((p->se ? 0x80 : 0) | ((pad & 3) << 4)); /* M 0, TVer 0 */
    put16(b + 2, UDP_PKEY);
    b[4] = 0;
    put24(b + 5, p->dqpn & UDP_PSN_MASK);
    b[8] = p->ackreq ? 0x80 : 0;
    put24(b + 9, p->psn & UDP_PSN_MASK);
    b += UDP_BTH;
    if (f & UDP_F_DETH) {
        put32(b, p->qkey);
        b[4] = 0;
        put24(b + 5, p->sqpn);
        b += UDP_DETH;
    }
    if (f & UDP_F_RETH) {
        put64(b, p->va);
        put32(b + 8, p->rkey);
        put32(b + 12, p->dmalen);
        b += UDP_RETH;
    }
    if (f & UDP_F_ATOMIC) {
        put64(b, p->va);
        put32(b + 8, p->rkey);
        put64(b + 12, p->swap_add);
        put64(b + 20, p->compare);
        b += UDP_ATOMIC_ETH;
    }
    if (f & UDP_F_AETH) {
        b[0] = p->syndrome;
        put24(b + 1, p->msn);
        b += UDP_AETH;
    }
    if (f & UDP_F_ATOMIC_ACK) {
        put64(b, p->orig);
        b += UDP_ATOMIC_ACK;
    }
    if (f & UDP_F_IMM) {
        memcpy(b, &p->imm, 4);  /* as posted: already network order */
        b += UDP_IMM;
    }
    return (uint32_t)(b - out);
}

int udp_pkt_parse(const uint8_t *buf, uint32_t len, struct udp_pkt *p, const char **why)
{
    memset(p, 0, sizeof *p);
    if (len < UDP_BTH + UDP_ICRC) {
        *why = "shorter than BTH + ICRC";
        return -1;
    }
    p->opcode = buf[0];
    unsigned f = udp_op_flags(p->opcode);
    if (!f) {
        *why = "opcode this wire does not take";
        return -1;
    }
    if ((buf[1] & 0x0f) != 0) {
        *why = "BTH transport header version is not 0";
        return -1;
    }
    uint8_t pad = (buf[1] >> 4) & 3;
    p->se = buf[1] & 0x80;
    p->dqpn = get24(buf + 5);
    p->ackreq = buf[8] & 0x80;
    p->psn = get24(buf + 9);
    uint32_t off = UDP_BTH, end = len - UDP_ICRC;
    uint32_t need = (f & UDP_F_DETH ? UDP_DETH : 0) + (f & UDP_F_RETH ? UDP_RETH : 0) +
                    (f & UDP_F_ATOMIC ? UDP_ATOMIC_ETH : 0) + (f & UDP_F_AETH ? UDP_AETH : 0) +
                    (f & UDP_F_ATOMIC_ACK ? UDP_ATOMIC_ACK : 0) + (f & UDP_F_IMM ? UDP_IMM : 0);
    if (end - off < need) {
        *why = "shorter than its opcode's headers";
        return -1;
    }
    if (f & UDP_F_DETH) {
        p->qkey = get32(buf + off);
        p->sqpn = get24(buf + off + 5);
        off += UDP_DETH;
    }
    if (f & UDP_F_RETH) {
        p->va = get64(buf + off);
        p->rkey = get32(buf + off + 8);
        p->dmalen = get32(buf + off + 12);
        off += UDP_RETH;
    }
    if (f & UDP_F_ATOMIC) {
        p->va = get64(buf + off);
        p->rkey = get32(buf + off + 8);
        p->swap_add = get64(buf + off + 12);
        p->compare = get64(buf + off + 20);
        off += UDP_ATOMIC_ETH;
    }
    if (f & UDP_F_AETH) {
        p->syndrome = buf[off];
        p->msn = get24(buf + off + 1);
        off += UDP_AETH;
    }
    if (f & UDP_F_ATOMIC_ACK) {
        p->orig = get64(buf + off);
        off += UDP_ATOMIC_ACK;
    }
    if (f & UDP_F_IMM) {
        memcpy(&p->imm, buf + off, 4);
        off += UDP_IMM;
    }
    uint32_t rest = end - off;
    if (!(f & UDP_F_PAYLOAD)) {
        if (rest != 0) {
            *why = "payload on an opcode that carries none";
            return -1;
        }
        return 0;
    }
    if (pad > rest || ((rest & 3) != 0)) {
        *why = "payload not padded to 4 bytes as its pad count says";
        return -1;
    }
    p->payload = buf + off;
    p->paylen = rest - pad;
    return 0;
}

uint32_t udp_ip_headers(const struct udp_path *path, uint32_t len, bool masked, uint8_t *out)
{
    uint32_t ulen = 8 + len;
    uint8_t *u;
    if (udp_gid_v4(path->sgid)) {
        uint8_t *ip = out;
        memset(ip, 0, 20);
        ip[0] = 0x45;
        ip[1] = masked ? 0xff : 0;
        put16(ip + 2, 20 + ulen);
        put16(ip + 6, 0x4000);  /* DF, identification 0 */
        ip[8] = masked ? 0xff : 64;
        ip[9] = IPPROTO_UDP;
        memcpy(ip + 12, path->sgid + 12, 4);
        memcpy(ip + 16, path->dgid + 12, 4);
        if (masked) {
            ip[10] = ip[11] = 0xff;
        } else {
            uint32_t s = 0;
            for (int i = 0; i < 20; i += 2)
                s += get16(ip + i);
            while (s >> 16)
                s = (s & 0xffff) + (s >> 16);
            put16(ip + 10, ~s & 0xffff);
        }
        u = ip + 20;
    } else {
        uint8_t *ip = out;
        memset(ip, 0, 40);
        ip[0] = 0x60;
        if (masked) {
            ip[0] = 0x6f;       /* traffic class and flow label: ones */
            ip[1] = ip[2] = ip[3] = 0xff;
        }
        put16(ip + 4, ulen);
        ip[6] = IPPROTO_UDP;
        ip[7] = masked ? 0xff : 64;
        memcpy(ip + 8, path->sgid, 16);
        memcpy(ip + 24, path->dgid, 16);
        u = ip + 40;
    }
    put16(u, path->sport);
    put16(u + 2, path->dport);
    put16(u + 4, ulen);
    put16(u + 6, masked ? 0xffff : 0);  /* the capture fills the real one in */
    return (uint32_t)(u + 8 - out);
}

uint32_t udp_icrc(const struct udp_path *path, const uint8_t *hdr, uint32_t hlen,
                  const struct udp_piece *pieces, int npieces, uint8_t pad)
{
    static const uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    static const uint8_t zeros[4];
    uint32_t total = hlen + pad + UDP_ICRC;
    for (int i = 0; i < npieces; i++)
        total += pieces[i].len;
    uint8_t ph[48 + UDP_BTH];
    uint32_t n = udp_ip_headers(path, total, true, ph);
    memcpy(ph + n, hdr, UDP_BTH);
    ph[n + 4] = 0xff;           /* BTH resv8a (FECN, BECN) */
    uint32_t c = udp_crc32(0xffffffffu, ones, 8);
    c = udp_crc32(c, ph, n + UDP_BTH);
    c = udp_crc32(c, hdr + UDP_BTH, hlen - UDP_BTH);
    for (int i = 0; i < npieces; i++)
        if (pieces[i].len)
            c = udp_crc32(c, pieces[i].p, pieces[i].len);
    if (pad)
        c = udp_crc32(c, zeros, pad);
    return ~c;
}

/* IBA table 43: the credit counts a 5-bit code stands for (31: invalid). */
static const uint16_t credit_counts[31] = {
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768,
    1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
};

uint8_t udp_credit_code(uint64_t n)
{
    uint8_t c = 0;
    while (c < 30 && credit_counts[c + 1] <= n)
        c++;
    return c;
}

uint32_t udp_credit_count(uint8_t code) { return code < 31 ? credit_counts[code] : 0; }
