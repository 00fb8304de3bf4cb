/* cm_wire.c - the CM messages on the TCP connection (see cm.h): encoding,
 * framing and decoding. What comes from the peer is checked before use:
 * the magic, the version, the type, and every length against its limit;
 * a message is decoded from the bytes already copied into the receiver's
 * buffer, once. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "cm.h"

static void put32(uint8_t *p, uint32_t v)
{
    v = htonl(v);
    memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return ntohl(v);
}

static void header(uint8_t *out, enum cm_type type, size_t payload)
{
    put32(out, CM_MAGIC);
    out[4] = CM_VERSION;
    out[5] = (uint8_t)type;
    out[6] = (uint8_t)(payload >> 8);
    out[7] = (uint8_t)payload;
}

size_t cm_encode_info(uint8_t *out, enum cm_type type, const struct cm_conn_info *c)
{
    uint8_t *p = out + CM_HDR;
    put32(p, c->qpn);
    put32(p + 4, c->psn);
    put32(p + 8, c->qkey);
    p[12] = c->qp_type;
    p[13] = c->responder_resources;
    p[14] = c->initiator_depth;
    p[15] = c->retry_count;
    p[16] = c->rnr_retry_count;
    p[17] = c->srq;
    p[18] = c->pdata_len;
    p[19] = 0;
    memcpy(p + 20, c->gid, 16);
    size_t n = c->pdata_len > CM_PDATA_MAX ? CM_PDATA_MAX : c->pdata_len;
    memcpy(p + CM_INFO_FIXED, c->pdata, n);
    header(out, type, CM_INFO_FIXED + n);
    return CM_HDR + CM_INFO_FIXED + n;
}

size_t cm_encode_empty(uint8_t *out, enum cm_type type)
{
    header(out, type, 0);
    return CM_HDR;
}

size_t cm_encode_rej(uint8_t *out, uint8_t reason, const void *pdata, uint8_t len)
{
    size_t n = len > CM_REJ_PDATA ? CM_REJ_PDATA : len;
    out[CM_HDR] = reason;
    out[CM_HDR + 1] = (uint8_t)n;
    if (n)
        memcpy(out + CM_HDR + 2, pdata, n);
    header(out, CM_REJ, 2 + n);
    return CM_HDR + 2 + n;
}

long cm_complete(const struct cm_rx *rx, char *why, size_t whylen)
{
    if (rx->have < CM_HDR)
        return 0;
    uint32_t magic = get32(rx->buf);
    if (magic != CM_MAGIC) {
        snprintf(why, whylen, "message magic 0x%08x != TBCM (not tbrt's CM on that port?)", magic);
        return -1;
    }
    if (rx->buf[4] != CM_VERSION) {
        snprintf(why, whylen, "CM protocol version %u, this library speaks %u", rx->buf[4],
                 CM_VERSION);
        return -1;
    }
    size_t payload = (size_t)rx->buf[6] << 8 | rx->buf[7];
    if (payload > CM_MSG_MAX - CM_HDR) {
        snprintf(why, whylen, "message of %zu bytes > %d", payload, CM_MSG_MAX - CM_HDR);
        return -1;
    }
    return rx->have >= CM_HDR + payload ? (long)(CM_HDR + payload) : 0;
}

int cm_decode(const uint8_t *msg, size_t len, enum cm_type *type, struct cm_conn_info *info,
              uint8_t *rej_reason, char *why, size_t whylen)
{
    const uint8_t *p = msg + CM_HDR;
    size_t payload = len - CM_HDR;
    *type = (enum cm_type)msg[5];
    memset(info, 0, sizeof *info);
    *rej_reason = 0;
    switch (*type) {
    case CM_REQ:
    case CM_REP:
        if (payload < CM_INFO_FIXED) {
            snprintf(why, whylen, "%s of %zu bytes < %d", *type == CM_REQ ? "REQ" : "REP", payload,
                     CM_INFO_FIXED);
            return -1;
        }
        info->qpn = get32(p) & 0xffffff;
        info->psn = get32(p + 4) & 0xffffff;
        info->qkey = get32(p + 8);
        info->qp_type = p[12];
        info->responder_resources = p[13];
        info->initiator_depth = p[14];
        info->retry_count = p[15] & 7;
        info->rnr_retry_count = p[16] & 7;
        info->srq = p[17];
        info->pdata_len = p[18];
        memcpy(info->gid, p + 20, 16);
        if (info->pdata_len != payload - CM_INFO_FIXED) {
            snprintf(why, whylen, "private data length %u, but %zu bytes follow", info->pdata_len,
                     payload - CM_INFO_FIXED);
            return -1;
        }
        memcpy(info->pdata, p + CM_INFO_FIXED, info->pdata_len);
        return 0;
    case CM_REJ:
        if (payload < 2 || p[1] != payload - 2 || p[1] > CM_REJ_PDATA) {
            snprintf(why, whylen, "malformed REJ (%zu bytes)", payload);
            return -1;
        }
        *rej_reason = p[0];
        info->pdata_len = p[1];
        memcpy(info->pdata, p + 2, info->pdata_len);
        return 0;
    case CM_RTU:
    case CM_DREQ:
    case CM_DREP:
        if (payload) {
            snprintf(why, whylen, "message type %d with %zu bytes of payload", *type, payload);
            return -1;
        }
        return 0;
    default:
        snprintf(why, whylen, "unknown message type %d", msg[5]);
        return -1;
    }
}

/* Messages are a few hundred bytes: the socket's buffer takes them at once,
 * unless the peer stopped reading, which the bound turns into an error. */
#define CM_SEND_WAIT_MS 2000

int cm_send(int sock, const uint8_t *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(sock, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        struct pollfd p = {.fd = sock, .events = POLLOUT};
        int r = poll(&p, 1, CM_SEND_WAIT_MS);
        if (r == 0)
            return -ETIMEDOUT;
        if (r < 0 && errno != EINTR)
            return -errno;
    }
    return 0;
}
