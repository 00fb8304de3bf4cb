/* ifc.h - mlx5 layout access: fields by PRM bit offset and width (bit 0 is
 * the most significant bit of byte 0, big-endian), by generated constant
 * (the driver's fast path, MLX5F_<struct>__<field> from gen_tables.lua) or
 * by name (ifc.c, for the Lua command builder and the trace). */
#ifndef MLX5_IFC_H
#define MLX5_IFC_H

#include <stddef.h>
#include <stdint.h>
#include "mlx5_ifc_gen.h"

/* A field of at most 32 bits at any bit offset (it may straddle bytes). */
static inline uint32_t ifc_get(const void *buf, uint32_t off, uint32_t width)
{
    const uint8_t *p = (const uint8_t *)buf + off / 8;
    uint32_t first = off % 8, nbytes = (first + width + 7) / 8;
    uint64_t acc = 0;
    for (uint32_t i = 0; i < nbytes; i++)
        acc = acc << 8 | p[i];
    acc >>= nbytes * 8 - first - width;
    return (uint32_t)(acc & (width >= 32 ? 0xffffffffull : ((1ull << width) - 1)));
}

static inline void ifc_set(void *buf, uint32_t off, uint32_t width, uint32_t v)
{
    uint8_t *p = (uint8_t *)buf + off / 8;
    uint32_t first = off % 8, nbytes = (first + width + 7) / 8;
    uint32_t shift = nbytes * 8 - first - width;
    uint64_t mask = (width >= 32 ? 0xffffffffull : ((1ull << width) - 1)) << shift;
    uint64_t acc = 0;
    for (uint32_t i = 0; i < nbytes; i++)
        acc = acc << 8 | p[i];
    acc = (acc & ~mask) | (((uint64_t)v << shift) & mask);
    for (uint32_t i = nbytes; i-- > 0; acc >>= 8)
        p[i] = (uint8_t)acc;
}

/* Fields up to 64 bits as a number (dbr_addr, start_addr, len, pas[]). */
static inline uint64_t ifc_get64(const void *buf, uint32_t off, uint32_t width)
{
    if (width <= 32)
        return ifc_get(buf, off, width);
    return (uint64_t)ifc_get(buf, off, width - 32) << 32 | ifc_get(buf, off + width - 32, 32);
}

static inline void ifc_set64(void *buf, uint32_t off, uint32_t width, uint64_t v)
{
    if (width <= 32) {
        ifc_set(buf, off, width, (uint32_t)v);
        return;
    }
    ifc_set(buf, off, width - 32, (uint32_t)(v >> 32));
    ifc_set(buf, off + width - 32, 32, (uint32_t)v);
}

/* Plain big-endian loads and stores at byte pointers. */
static inline uint32_t ld_be32(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}
static inline uint64_t ld_be64(const void *p)
{
    return (uint64_t)ld_be32(p) << 32 | ld_be32((const uint8_t *)p + 4);
}
static inline void st_be32(void *p, uint32_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)(v >> 24); b[1] = (uint8_t)(v >> 16); b[2] = (uint8_t)(v >> 8); b[3] = (uint8_t)v;
}
static inline void st_be64(void *p, uint64_t v)
{
    st_be32(p, (uint32_t)(v >> 32));
    st_be32((uint8_t *)p + 4, (uint32_t)v);
}
/* XOR of a byte range (command signatures, cmd-layout.md section 4). */
static inline uint8_t xor8(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint8_t x = 0;
    while (n--)
        x ^= *b++;
    return x;
}

/* Wide fields as big-endian byte strings of ceil(width/8) bytes, the value
 * right-aligned (so a 12-bit field at an odd offset is 2 bytes). */
void ifc_get_bytes(const void *buf, uint32_t off, uint32_t width, void *out);
void ifc_set_bytes(void *buf, uint32_t off, uint32_t width, const void *in);

#define IGET(buf, s, f) ifc_get((buf), MLX5F_##s##__##f)
#define ISET(buf, s, f, v) ifc_set((buf), MLX5F_##s##__##f, (v))
#define IGET64(buf, s, f) ifc_get64((buf), MLX5F_##s##__##f)
#define ISET64(buf, s, f, v) ifc_set64((buf), MLX5F_##s##__##f, (v))
#define IOFF(s, f) ifc_off_(MLX5F_##s##__##f)
#define IBYTE(s, f) (ifc_off_(MLX5F_##s##__##f) / 8)
static inline uint32_t ifc_off_(uint32_t off, uint32_t width) { (void)width; return off; }

/* ---- lookups by name (ifc.c) ------------------------------------------- */
struct ifc_field {
    const char *name;
    uint32_t off, width;
    int kind;                   /* enum ifc_kind */
};

/* Byte size of a layout ("create_qp_in"), or -1. */
int ifc_struct_size(const char *strct);
/* A field by path. Paths may cross a container into a context layout:
 * "capability.cmd_hca_cap.log_max_qp" (query_hca_cap_out), 
 * "event_data.comp_event.cq_number" (eqe). 0, or -1 when unknown. */
int ifc_field(const char *strct, const char *path, struct ifc_field *f);
/* The i-th field of a layout in name order; 0, or -1 past the end. */
int ifc_field_at(const char *strct, int i, struct ifc_field *f);
/* Opcode by command name ("QUERY_HCA_CAP" or "MLX5_CMD_OP_QUERY_HCA_CAP"). */
int ifc_opcode(const char *name);
const char *ifc_opcode_name(uint32_t opcode);
/* Name and meaning of a constant of a group ("status", "delivery", "cq"...). */
const char *ifc_const_name(const char *group, uint32_t value);
const char *ifc_const_meaning(const char *group, uint32_t value);
/* The same, among the names starting with prefix ("MLX5_CQE_SYNDROME_"). */
const char *ifc_const_name_prefixed(const char *group, const char *prefix, uint32_t value);
int ifc_const(const char *name, uint32_t *value);
/* The layout name of a command's input/output ("QUERY_HCA_CAP" ->
 * "query_hca_cap_in"); NULL when the tables do not cover the command. */
const char *ifc_cmd_struct(uint32_t opcode, int output);

#endif
