/* model_fw.c - the device model's firmware: the HCA-level commands
 * (ENABLE/DISABLE_HCA, ISSI, pages, ACCESS_REG, HCA caps, INIT/TEARDOWN_HCA,
 * NIC vport) and the dispatch of the rest to model_objects.c. The command
 * queue, BAR0 and the model thread are in model_hw.c.
 *
 * HCA life cycle, as the firmware enforces it (other orders get
 * BAD_SYS_STATE, syndrome SYND_NOT_ENABLED / SYND_NOT_INIT / SYND_ALREADY):
 *
 *   disabled --ENABLE_HCA--> enabled (owes boot pages, ISSI 0)
 *   enabled: QUERY/SET_ISSI, QUERY_PAGES, MANAGE_PAGES, ACCESS_REG,
 *            QUERY/SET_HCA_CAP
 *   enabled --INIT_HCA--> initialized   only when boot and init pages are
 *            given (else BAD_SYS_STATE, SYND_PAGES_OWED)
 *   initialized: object commands; SET_HCA_CAP is refused
 *   initialized --TEARDOWN_HCA--> enabled (torn down; QUERY_PAGES regular
 *            reports the held pages as negative: take them back)
 *            refused (RES_BUSY) while objects exist
 *   enabled --DISABLE_HCA--> disabled   refused (RES_BUSY) while pages are
 *            held or the HCA is initialized */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlx5/cmdif.h"
#include "mlx5/model/model_int.h"
#include "util/util.h"

enum {
    SUPPORTED_ISSI = 0x2,        /* supported_issi_dw0: ISSI 1 only (CX-4 trace) */
    HOST_ENDIANNESS_REG = 0x7004,/* MLX5_REG_HOST_ENDIANNESS */
    REG_SIZE = 16,
    VPORT_STATE_UP = 1,
    MODEL_MTU = 1500,
};

static uint8_t *cap_cur(struct model *m, int type) { return m->caps[type << 1 | 1]; }

int model_fw_checksums(struct model *m)
{
    return m->opts.checksums || IGET(cap_cur(m, 0), cmd_hca_cap, cmdif_checksum) != 0;
}

/* ---- HCA-level commands ----------------------------------------------------- */

static int need(struct model_cmd *c, int in_struct, int out_struct)
{
    if (c->inlen < (uint32_t)in_struct)
        return model_status(c, MLX5C_CMD_STAT_BAD_INP_LEN_ERR, SYND_INLEN), 0;
    if (c->outlen < (uint32_t)out_struct)
        return model_status(c, MLX5C_CMD_STAT_BAD_OUTP_LEN_ERR, SYND_OUTLEN), 0;
    return 1;
}
#define NEED(c, s) need((c), MLX5S_##s##_in, MLX5S_##s##_out)

static void give_pages(struct model *m, struct model_cmd *c)
{
    uint32_t n = IGET(c->in, manage_pages_in, input_num_entries);
    if ((uint64_t)c->inlen < MLX5S_manage_pages_in + 8ull * n) {
        model_status(c, MLX5C_CMD_STAT_BAD_INP_LEN_ERR, SYND_INLEN);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t pa = ld_be64(c->in + MLX5S_manage_pages_in + 8 * i);
        if ((pa & 0xfff) || !model_dma(m, pa, 4096)) {
            model_status(c, MLX5C_CMD_STAT_BAD_PARAM_ERR, SYND_BAD_ADDRESS);
            return;
        }
    }
    if (m->npages + (int)n > m->cap_pages) {
        int cap = m->npages + (int)n + 64;
        uint64_t *p = realloc(m->pages, (size_t)cap * sizeof *p);
        if (!p) {
            model_status(c, MLX5C_CMD_STAT_NO_RES_ERR, SYND_NO_RESOURCE);
            return;
        }
        m->pages = p;
        m->cap_pages = cap;
    }
    for (uint32_t i = 0; i < n; i++)
        m->pages[m->npages++] = ld_be64(c->in + MLX5S_manage_pages_in + 8 * i);
    /* Pages pay the debts in the order they were asked for. */
    int left = (int)n;
    int *debts[] = {&m->boot_owed, &m->init_owed, &m->regular_owed};
    for (size_t i = 0; i < TBRT_ARRAY_LEN(debts) && left; i++) {
        int take = TBRT_MIN(left, *debts[i]);
        *debts[i] -= take;
        left -= take;
    }
}

static void take_pages(struct model *m, struct model_cmd *c)
{
    uint32_t want = IGET(c->in, manage_pages_in, input_num_entries);
    uint32_t room = (c->outlen - MLX5S_manage_pages_out) / 8;
    /* An initialized HCA needs every page it was given. */
    uint32_t n = m->initialized ? 0 : TBRT_MIN(TBRT_MIN(want, room), (uint32_t)m->npages);
    for (uint32_t i = 0; i < n; i++)
        st_be64(c->out + MLX5S_manage_pages_out + 8 * i, m->pages[--m->npages]);
    ISET(c->out, manage_pages_out, output_num_entries, n);
}

/* The general-cap fields SET_HCA_CAP may change (Linux handle_hca_cap sets
 * these); each must stay within the maximum caps. */
static const struct {
    uint32_t off, width;
    const char *name;
} settable_caps[] = {
    {MLX5F_cmd_hca_cap__log_max_qp, "log_max_qp"},
    {MLX5F_cmd_hca_cap__cmdif_checksum, "cmdif_checksum"},
    {MLX5F_cmd_hca_cap__log_uar_page_sz, "log_uar_page_sz"},
    {MLX5F_cmd_hca_cap__pkey_table_size, "pkey_table_size"},
};

static void set_hca_cap(struct model *m, struct model_cmd *c)
{
    int type = c->op_mod >> 1;
    if ((c->op_mod & 1) || type >= CAP_OPMODS / 2 || !m->caps_valid[c->op_mod | 1]) {
        model_status(c, MLX5C_CMD_STAT_BAD_PARAM_ERR, SYND_BAD_OPMOD);
        return;
    }
    if (m->initialized) {
        model_status(c, MLX5C_CMD_STAT_BAD_SYS_STATE_ERR, SYND_ALREADY);
        return;
    }
    const uint8_t *want = c->in + IBYTE(set_hca_cap_in, capability);
    if (type != 0)
        return; /* nothing settable in the other cap types of this model */
    const uint8_t *max = m->caps[0];
    for (size_t i = 0; i < TBRT_ARRAY_LEN(settable_caps); i++)
        if (ifc_get(want, settable_caps[i].off, settable_caps[i].width) >
            ifc_get(max, settable_caps[i].off, settable_caps[i].width)) {
            model_status(c, MLX5C_CMD_STAT_BAD_PARAM_ERR, SYND_BAD_PARAM + (uint32_t)(i << 8));
            return;
        }
    for (size_t i = 0; i < TBRT_ARRAY_LEN(settable_caps); i++)
        ifc_set(cap_cur(m, 0), settable_caps[i].off, settable_caps[i].width,
                ifc_get(want, settable_caps[i].off, settable_caps[i].width));
}

static int count_objects(struct model *m)
{
    struct model_state st = {0};
    return model_objects_count(m, &st);
}

static void hca_cmd(struct model *m, struct model_cmd *c)
{
    switch (c->opcode) {
    case MLX5OP_ENABLE_HCA:
        if (!NEED(c, enable_hca))
            return;
        if (m->enabled) {
            model_status(c, MLX5C_CMD_STAT_BAD_SYS_STATE_ERR, SYND_ALREADY);
            return;
        }
        m->enabled = 1;
        m->torn_down = 0;
        m->issi = 0;
        m->boot_owed = m->opts.boot_pages;
        m->init_owed = m->opts.init_pages;
        m->regular_owed = 0;
        return;
    case MLX5OP_DISABLE_HCA:
        if (!NEED(c, disable_hca))
            return;
        if (m->initialized || m->npages) {
            model_status(c, MLX5C_CMD_STAT_RES_BUSY, SYND_IN_USE);
            return;
        }
        m->enabled = 0;
        return;
    case MLX5OP_QUERY_ISSI:
        if (!NEED(c, query_issi))
            return;
        ISET(c->out, query_issi_out, current_issi, (uint32_t)m->issi);
        ISET(c->out, query_issi_out, supported_issi_dw0, SUPPORTED_ISSI);
        return;
    case MLX5OP_SET_ISSI: {
        if (!NEED(c, set_issi))
            return;
        uint32_t issi = IGET(c->in, set_issi_in, current_issi);
        if (issi >= 32 || !(SUPPORTED_ISSI & (1u << issi))) {
            model_status(c, MLX5C_CMD_STAT_BAD_PARAM_ERR, SYND_BAD_ISSI);
            return;
        }
        m->issi = (int)issi;
        return;
    }
    case MLX5OP_QUERY_PAGES: {
        if (!NEED(c, query_pages))
            return;
        int n;
        switch (c->op_mod) {
        case MLX5C_BOOT_PAGES: n = m->boot_owed; break;
        case MLX5C_INIT_PAGES: n = m->init_owed; break;
        case MLX5C_POST_INIT_PAGES: n = m->torn_down ? -m->npages : m->regular_owed; break;
        default: model_status(c, MLX5C_CMD_STAT_BAD_PARAM_ERR, SYND_BAD_OPMOD); return;
        }
        ISET(c->out, query_pages_out, num_pages, (uint32_t)n);
        return;
    }
    case MLX5OP_MANAGE_PAGES:
        if (!NEED(c, manage_pages))
            return;
        if (c->op_mod == MLX5C_PAGES_GIVE)
            give_pages(m, c);
        else if (c->op_mod == MLX5C_PAGES_TAKE)
            take_pages(m, c);
        else if (c->op_mod != MLX5C_PAGES_CANT_GIVE)
            model_status(c, MLX5C_CMD_STAT_BAD_PARAM_ERR, SYND_BAD_OPMOD);
        return;
    case MLX5OP_ACCESS_REG:
        if (!need(c, MLX5S_access_register_in + REG_SIZE, MLX5S_access_register_out + REG_SIZE))
            return;
        if (IGET(c->in, access_register_in, register_id) != HOST_ENDIANNESS_REG) {
            model_status(c, MLX5C_CMD_STAT_BAD_PARAM_ERR, SYND_UNSUPPORTED);
            return;
        }
        if (c->op_mod == MLX5C_ACCESS_REGISTER_IN_OP_MOD_WRITE)
            memcpy(m->host_endianness, c->in + MLX5S_access_register_in, REG_SIZE);
        else if (c->op_mod != MLX5C_ACCESS_REGISTER_IN_OP_MOD_READ) {
            model_status(c, MLX5C_CMD_STAT_BAD_PARAM_ERR, SYND_BAD_OPMOD);
            return;
        }
        memcpy(c->out + MLX5S_access_register_out, m->host_endianness, REG_SIZE);
        return;
    case MLX5OP_QUERY_HCA_CAP:
        if (!NEED(c, query_hca_cap))
            return;
        if (c->op_mod >= CAP_OPMODS || !m->caps_valid[c->op_mod]) {
            model_status(c, MLX5C_CMD_STAT_BAD_PARAM_ERR, SYND_BAD_OPMOD);
            return;
        }
        memcpy(c->out + IBYTE(query_hca_cap_out, capability), m->caps[c->op_mod], CAP_PAGE);
        return;
    case MLX5OP_SET_HCA_CAP:
        if (NEED(c, set_hca_cap))
            set_hca_cap(m, c);
        return;
    case MLX5OP_INIT_HCA:
        /* Linux before 6.x sends 16 bytes, newer kernels 32 (cmd-layout.md 7). */
        if (!need(c, CMD_INLINE, MLX5S_init_hca_out))
            return;
        if (m->initialized)
            model_status(c, MLX5C_CMD_STAT_BAD_SYS_STATE_ERR, SYND_ALREADY);
        else if (m->issi == 0 || m->boot_owed || m->init_owed)
            model_status(c, MLX5C_CMD_STAT_BAD_SYS_STATE_ERR,
                         m->issi == 0 ? SYND_BAD_ISSI : SYND_PAGES_OWED);
        else {
            m->initialized = 1;
            m->torn_down = 0;
            m->regular_owed = m->opts.regular_pages;
        }
        return;
    case MLX5OP_TEARDOWN_HCA:
        if (!NEED(c, teardown_hca))
            return;
        if (!m->initialized)
            model_status(c, MLX5C_CMD_STAT_BAD_SYS_STATE_ERR, SYND_NOT_INIT);
        else if (count_objects(m))
            model_status(c, MLX5C_CMD_STAT_RES_BUSY, SYND_IN_USE);
        else {
            m->initialized = 0;
            m->torn_down = 1;
            m->roce_en = 0;
        }
        return;
    case MLX5OP_QUERY_NIC_VPORT_CONTEXT:
        if (!NEED(c, query_nic_vport_context))
            return;
        ISET(c->out, query_nic_vport_context_out, nic_vport_context_roce_en, (uint32_t)m->roce_en);
        ISET(c->out, query_nic_vport_context_out, nic_vport_context_mtu, MODEL_MTU);
        ISET(c->out, query_nic_vport_context_out, nic_vport_context_permanent_address_mac_addr_47_32,
             (uint32_t)m->mac[0] << 8 | m->mac[1]);
        ISET(c->out, query_nic_vport_context_out, nic_vport_context_permanent_address_mac_addr_31_0,
             ld_be32(m->mac + 2));
        return;
    case MLX5OP_MODIFY_NIC_VPORT_CONTEXT:
        if (!NEED(c, modify_nic_vport_context))
            return;
        if (IGET(c->in, modify_nic_vport_context_in, field_select_roce_en))
            m->roce_en = (int)IGET(c->in, modify_nic_vport_context_in, nic_vport_context_roce_en);
        return;
    case MLX5OP_QUERY_VPORT_STATE:
        if (!NEED(c, query_vport_state))
            return;
        ISET(c->out, query_vport_state_out, state, VPORT_STATE_UP);
        ISET(c->out, query_vport_state_out, admin_state, VPORT_STATE_UP);
        return;
    case MLX5OP_NOP:
        return;
    default:
        if (!model_objects_cmd(m, c))
            model_status(c, MLX5C_CMD_STAT_BAD_OP_ERR, SYND_UNSUPPORTED);
    }
}

void model_fw_execute(struct model *m, struct model_cmd *c)
{
    m->commands++;
    if (!m->enabled && c->opcode != MLX5OP_ENABLE_HCA && c->opcode != MLX5OP_NOP &&
        c->opcode != MLX5OP_QUERY_ISSI) {
        model_status(c, ifc_opcode_name(c->opcode) ? MLX5C_CMD_STAT_BAD_SYS_STATE_ERR
                                                  : MLX5C_CMD_STAT_BAD_OP_ERR,
                     SYND_NOT_ENABLED);
    } else {
        hca_cmd(m, c);
    }
    if (c->out[0])
        m->bad_commands++;
}
