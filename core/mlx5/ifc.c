/* ifc.c - lookups in the generated mlx5 layout tables by name: structs,
 * field paths, opcodes and constants; and wide-field byte access. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MLX5_IFC_TABLES
#include "mlx5/ifc.h"
#include "util/util.h"

static const struct ifc_struct_row *find_struct(const char *name)
{
    size_t lo = 0, hi = TBRT_ARRAY_LEN(ifc_struct_rows);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(name, ifc_struct_rows[mid].name);
        if (c == 0)
            return &ifc_struct_rows[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

static const struct ifc_field_row *find_field(const struct ifc_struct_row *s, const char *name,
                                              size_t namelen)
{
    size_t lo = 0, hi = s->count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const struct ifc_field_row *r = &ifc_field_rows[s->first + mid];
        int c = strncmp(name, r->name, namelen);
        if (c == 0 && r->name[namelen])
            c = -1;
        if (c == 0)
            return r;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

int ifc_struct_size(const char *strct)
{
    const struct ifc_struct_row *s = strct ? find_struct(strct) : NULL;
    return s ? (int)s->bytes : -1;
}

static void fill(struct ifc_field *f, const struct ifc_field_row *r, uint32_t base)
{
    f->name = r->name;
    f->off = base + r->off;
    f->width = r->width;
    f->kind = r->kind;
}

int ifc_field(const char *strct, const char *path, struct ifc_field *f)
{
    const struct ifc_struct_row *s = strct ? find_struct(strct) : NULL;
    if (!s || !path)
        return -1;
    const struct ifc_field_row *r = find_field(s, path, strlen(path));
    if (r) {
        fill(f, r, 0);
        return 0;
    }
    /* "container.layout.rest": a container (the 4 KiB capability union,
     * eqe.event_data) whose alternatives are layouts of their own. Try each
     * dot as the end of the container's name. */
    for (const char *dot = strchr(path, '.'); dot; dot = strchr(dot + 1, '.')) {
        const struct ifc_field_row *c = find_field(s, path, (size_t)(dot - path));
        if (!c || c->kind != IFC_CONTAINER)
            continue;
        const char *inner = dot + 1, *dot2 = strchr(inner, '.');
        if (!dot2)
            continue;
        char layout[64];
        size_t n = (size_t)(dot2 - inner);
        if (n >= sizeof layout)
            continue;
        memcpy(layout, inner, n);
        layout[n] = 0;
        struct ifc_field sub;
        if (ifc_field(layout, dot2 + 1, &sub) == 0 && sub.off + sub.width <= c->width) {
            *f = sub;
            f->off += c->off;
            return 0;
        }
    }
    return -1;
}

int ifc_field_at(const char *strct, int i, struct ifc_field *f)
{
    const struct ifc_struct_row *s = strct ? find_struct(strct) : NULL;
    if (!s || i < 0 || (uint32_t)i >= s->count)
        return -1;
    fill(f, &ifc_field_rows[s->first + (uint32_t)i], 0);
    return 0;
}

int ifc_opcode(const char *name)
{
    if (!name)
        return -1;
    if (strncmp(name, "MLX5_CMD_OP_", 12) == 0)
        name += 12;
    for (size_t i = 0; i < TBRT_ARRAY_LEN(ifc_opcode_rows); i++)
        if (strcmp(ifc_opcode_rows[i].name, name) == 0)
            return (int)ifc_opcode_rows[i].value;
    return -1;
}

const char *ifc_opcode_name(uint32_t opcode)
{
    for (size_t i = 0; i < TBRT_ARRAY_LEN(ifc_opcode_rows); i++)
        if (ifc_opcode_rows[i].value == opcode)
            return ifc_opcode_rows[i].name;
    return NULL;
}

static const struct ifc_const_row *find_const(const char *group, uint32_t value)
{
    for (size_t i = 0; i < TBRT_ARRAY_LEN(ifc_const_rows); i++)
        if (ifc_const_rows[i].value == value && strcmp(ifc_const_rows[i].group, group) == 0)
            return &ifc_const_rows[i];
    return NULL;
}

const char *ifc_const_name(const char *group, uint32_t value)
{
    const struct ifc_const_row *c = group ? find_const(group, value) : NULL;
    return c ? c->name : NULL;
}

const char *ifc_const_name_prefixed(const char *group, const char *prefix, uint32_t value)
{
    size_t n = strlen(prefix);
    for (size_t i = 0; group && i < TBRT_ARRAY_LEN(ifc_const_rows); i++)
        if (ifc_const_rows[i].value == value && strcmp(ifc_const_rows[i].group, group) == 0 &&
            strncmp(ifc_const_rows[i].name, prefix, n) == 0)
            return ifc_const_rows[i].name;
    return NULL;
}

const char *ifc_const_meaning(const char *group, uint32_t value)
{
    const struct ifc_const_row *c = group ? find_const(group, value) : NULL;
    return c ? c->meaning : NULL;
}

int ifc_const(const char *name, uint32_t *value)
{
    for (size_t i = 0; name && i < TBRT_ARRAY_LEN(ifc_const_rows); i++)
        if (strcmp(ifc_const_rows[i].name, name) == 0) {
            *value = ifc_const_rows[i].value;
            return 0;
        }
    return -1;
}

/* Commands whose layouts are not named after the command (mlx5_ifc.h). */
static const struct {
    const char *cmd, *layout;
} layout_aliases[] = {
    {"ACCESS_REG", "access_register"},
    {"2RST_QP", "qp_2rst"},
    {"2ERR_QP", "qp_2err"},
};

const char *ifc_cmd_struct(uint32_t opcode, int output)
{
    static __thread char buf[80];
    const char *name = ifc_opcode_name(opcode);
    if (!name)
        return NULL;
    const char *base = NULL;
    for (size_t i = 0; i < TBRT_ARRAY_LEN(layout_aliases); i++)
        if (strcmp(layout_aliases[i].cmd, name) == 0)
            base = layout_aliases[i].layout;
    char lower[64];
    if (!base) {
        size_t n = strlen(name);
        if (n >= sizeof lower)
            return NULL;
        for (size_t i = 0; i <= n; i++)
            lower[i] = (char)tolower((unsigned char)name[i]);
        base = lower;
    }
    snprintf(buf, sizeof buf, "%s_%s", base, output ? "out" : "in");
    return find_struct(buf) ? buf : NULL;
}

/* Wide fields: bit by bit when unaligned (rare), bytes when aligned. */
void ifc_get_bytes(const void *buf, uint32_t off, uint32_t width, void *out)
{
    uint32_t nbytes = (width + 7) / 8, pad = nbytes * 8 - width;
    uint8_t *o = out;
    if (off % 8 == 0 && pad == 0) {
        memcpy(o, (const uint8_t *)buf + off / 8, nbytes);
        return;
    }
    memset(o, 0, nbytes);
    for (uint32_t i = 0; i < width; i++) {
        uint32_t dst = pad + i;
        if (ifc_get(buf, off + i, 1))
            o[dst / 8] |= (uint8_t)(0x80 >> (dst % 8));
    }
}

void ifc_set_bytes(void *buf, uint32_t off, uint32_t width, const void *in)
{
    uint32_t nbytes = (width + 7) / 8, pad = nbytes * 8 - width;
    const uint8_t *s = in;
    if (off % 8 == 0 && pad == 0) {
        memcpy((uint8_t *)buf + off / 8, s, nbytes);
        return;
    }
    for (uint32_t i = 0; i < width; i++) {
        uint32_t src = pad + i;
        ifc_set(buf, off + i, 1, (s[src / 8] >> (7 - src % 8)) & 1);
    }
}
