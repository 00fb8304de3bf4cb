/* framing.h - the headers at the start of a stride, and how to tell whose
 * header a frame carries.
 *
 * tbrt's own header, 16 bytes:
 *   0  magic  "TBRT" (0x54524254), a mismatch means the stream desynced
 *   4  len    payload bytes in this stride; the rest is padding
 *   8  seq    per-direction sequence number, from 1: a UC wire can drop or
 *             repeat a frame, and the receiver must notice
 *   12 check  ~(magic ^ len ^ seq): a corrupted header is caught before its
 *             length is trusted
 * llama.cpp's Apple transport, 8 bytes: 0 magic "RSEG" (0x52534547), 4 len.
 * llama.cpp's Linux transport: no header at all.
 * All little endian. The magics differ on purpose: tbrt's used to be RSEG at
 * the same offsets, and llama.cpp took tbrt's sequence number and check for
 * payload. A receiver that meets the other kind of header names the peer's
 * framing (framing.c) instead of handing over garbage. */
#ifndef TBRT_FRAMING_H
#define TBRT_FRAMING_H

#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tbrt.h"

/* Direct transfers (direct.c) in tbrt's variable framing: an offer
 * {addr u64, rkey u32, len u32} of the sender's registered memory, and the
 * reader's done {len u32} once it has read all of it; when both ends lend
 * at once, the one with the lower QPN asks for its offer back {len u32}
 * and the reader, if it has not begun reading it, gives it back {len u32}.
 * They take sequence numbers as any frame does; the progress of each end,
 * not its reader, takes all but the offer. */
#define FRAME_OFFER_MAGIC 0x4f524254u /* "TBRO" */
#define FRAME_DONE_MAGIC 0x44524254u  /* "TBRD" */
#define FRAME_ASK_BACK_MAGIC 0x41524254u /* "TBRA" */
#define FRAME_BACK_MAGIC 0x42524254u  /* "TBRB" */
#define FRAME_OFFER_LEN 16u
#define FRAME_DONE_LEN 4u           /* also ask-back's and back's */

static inline bool frame_is_direct(uint32_t magic)
{
    return magic == FRAME_OFFER_MAGIC || magic == FRAME_DONE_MAGIC ||
           magic == FRAME_ASK_BACK_MAGIC || magic == FRAME_BACK_MAGIC;
}

/* A region of the sender's memory, the payload of a direct offer {addr,
 * rkey, len} and of an eager offer {addr, rkey, slots}: 16 bytes. */
static inline void frame_region_write(void *at, uint64_t addr, uint32_t key, uint32_t n)
{
    uint64_t a = htole64(addr);
    uint32_t k = htole32(key), v = htole32(n);
    memcpy(at, &a, 8);
    memcpy((uint8_t *)at + 8, &k, 4);
    memcpy((uint8_t *)at + 12, &v, 4);
}

static inline void frame_region_read(const void *at, uint64_t *addr, uint32_t *key, uint32_t *n)
{
    memcpy(addr, at, 8);
    memcpy(key, (const uint8_t *)at + 8, 4);
    memcpy(n, (const uint8_t *)at + 12, 4);
    *addr = le64toh(*addr);
    *key = le32toh(*key);
    *n = le32toh(*n);
}

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

/* llama.cpp's Apple header: {magic, len}. */
static inline void rseg_hdr_write(void *at, uint32_t magic, uint32_t len)
{
    uint32_t h[2] = {htole32(magic), htole32(len)};
    memcpy(at, h, sizeof h);
}

static inline void rseg_hdr_read(const void *at, uint32_t *magic, uint32_t *len)
{
    uint32_t h[2];
    memcpy(h, at, sizeof h);
    *magic = le32toh(h[0]);
    *len = le32toh(h[1]);
}

/* Does a received message of byte_len bytes start with a whole, consistent
 * tbrt header (magic and check agree: 64 bits that payload hardly ever
 * matches by chance)? For framings without a header of their own. */
static inline bool frame_is_tbrt(const void *at, uint32_t byte_len)
{
    if (byte_len < TBRT_STRIDE_HDR)
        return false;
    uint32_t magic, len, seq, check;
    frame_hdr_read(at, &magic, &len, &seq, &check);
    return magic == TBRT_SEG_MAGIC && check == (uint32_t) ~(magic ^ len ^ seq);
}

/* The three kinds of wire a link can speak; tbrt's auto/fixed/variable
 * framings are one kind (they share the header and the socket bytes). */
enum wire_kind {
    WIRE_NONE = 0,
    WIRE_TBRT,
    WIRE_LLAMA_APPLE,
    WIRE_LLAMA_LINUX,
};

/* framing.c */
int wire_of_framing(int framing);
/* "fixed", "variable", "llama-apple", "llama-linux"; "auto" for 0 */
const char *framing_name(int framing);
/* "... peer speaks llama-apple framing (8-byte RSEG header); open the link
 * with framing = 'llama-apple' (this link speaks tbrt framing)" after what. */
void wire_mismatch(char *buf, size_t len, const char *what, int mine, int peer);
/* The byte a tbrt link sends on the bootstrap socket when it finds its peer
 * speaking another kind of wire, naming its own kind, so that a tbrt peer
 * fails with the same message: 'T' tbrt, 'A' llama-apple, 'L' llama-linux.
 * llama.cpp never sends one (it sends nothing once a link is up). */
uint8_t wire_notice_byte(int kind);
/* The kind a notice byte names, or WIRE_NONE. */
int wire_of_notice(uint8_t b);

#endif
