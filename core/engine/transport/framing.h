/* framing.h - the header at the start of every stride.
 *
 *   0  magic  "RSEG" (0x52534547), a mismatch means the stream desynced
 *   4  len    payload bytes in this stride; the rest is padding
 *   8  seq    per-direction sequence number, from 1: a UC wire can drop or
 *             repeat a frame, and the receiver must notice
 *   12 check  ~(magic ^ len ^ seq): a corrupted header is caught before its
 *             length is trusted
 *
 * All little endian, as llama.cpp's transports write them. */
#ifndef TBRT_FRAMING_H
#define TBRT_FRAMING_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#include "tbrt.h"

struct frame_hdr {
    uint32_t magic;
    uint32_t len;
    uint32_t seq;
    uint32_t check;
};

_Static_assert(sizeof(struct frame_hdr) == TBRT_STRIDE_HDR, "stride header size");

static inline void frame_hdr_write(void *at, uint32_t magic, uint32_t len, uint32_t seq)
{
    struct frame_hdr h = {
        .magic = htole32(magic),
        .len = htole32(len),
        .seq = htole32(seq),
        .check = htole32(~(magic ^ len ^ seq)),
    };
    memcpy(at, &h, sizeof h);
}

static inline void frame_hdr_read(const void *at, uint32_t *magic, uint32_t *len, uint32_t *seq,
                                  uint32_t *check)
{
    struct frame_hdr h;
    memcpy(&h, at, sizeof h);
    *magic = le32toh(h.magic);
    *len = le32toh(h.len);
    *seq = le32toh(h.seq);
    *check = le32toh(h.check);
}

#endif
