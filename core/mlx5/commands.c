/* commands.c - one function per firmware command, named after it. Each
 * encodes its input with the generated field constants, runs it through the
 * command queue and decodes what the caller needs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#include "mlx5/hca.h"
#include "util/util.h"

/* Input and output buffers of a command with a fixed layout; both at least
 * the 16 inline bytes, as Linux sends them (ENABLE_HCA out: 0x10, not 12). */
#define LEN16(n) ((n) < 16 ? 16 : (n))
#define CMD(s)                                                                 \
    uint8_t in[LEN16(MLX5S_##s##_in)] = {0}, out[LEN16(MLX5S_##s##_out)] = {0}; \
    ISET(in, s##_in, opcode, MLX5OP_CMD_##s)
#define RUN() cmd_exec(h, in, sizeof in, out, sizeof out)

/* Opcode names matching the layout names. */
enum {
    MLX5OP_CMD_enable_hca = MLX5OP_ENABLE_HCA,
    MLX5OP_CMD_disable_hca = MLX5OP_DISABLE_HCA,
    MLX5OP_CMD_query_issi = MLX5OP_QUERY_ISSI,
    MLX5OP_CMD_set_issi = MLX5OP_SET_ISSI,
    MLX5OP_CMD_query_pages = MLX5OP_QUERY_PAGES,
    MLX5OP_CMD_init_hca = MLX5OP_INIT_HCA,
    MLX5OP_CMD_teardown_hca = MLX5OP_TEARDOWN_HCA,
    MLX5OP_CMD_alloc_uar = MLX5OP_ALLOC_UAR,
    MLX5OP_CMD_dealloc_uar = MLX5OP_DEALLOC_UAR,
    MLX5OP_CMD_query_nic_vport_context = MLX5OP_QUERY_NIC_VPORT_CONTEXT,
    MLX5OP_CMD_modify_nic_vport_context = MLX5OP_MODIFY_NIC_VPORT_CONTEXT,
    MLX5OP_CMD_query_vport_state = MLX5OP_QUERY_VPORT_STATE,
    MLX5OP_CMD_alloc_pd = MLX5OP_ALLOC_PD,
    MLX5OP_CMD_dealloc_pd = MLX5OP_DEALLOC_PD,
    MLX5OP_CMD_create_mkey = MLX5OP_CREATE_MKEY,
    MLX5OP_CMD_query_mkey = MLX5OP_QUERY_MKEY,
    MLX5OP_CMD_destroy_mkey = MLX5OP_DESTROY_MKEY,
    MLX5OP_CMD_set_roce_address = MLX5OP_SET_ROCE_ADDRESS,
};

int mlx5_enable_hca(struct mlx5_hca *h) { CMD(enable_hca); return RUN(); }
int mlx5_disable_hca(struct mlx5_hca *h) { CMD(disable_hca); return RUN(); }

int mlx5_query_issi(struct mlx5_hca *h, uint32_t *current, uint32_t *supported_dw0)
{
    CMD(query_issi);
    int rc = RUN();
    *current = IGET(out, query_issi_out, current_issi);
    *supported_dw0 = IGET(out, query_issi_out, supported_issi_dw0);
    return rc;
}

int mlx5_set_issi(struct mlx5_hca *h, uint32_t issi)
{
    CMD(set_issi);
    ISET(in, set_issi_in, current_issi, issi);
    return RUN();
}

int mlx5_query_pages(struct mlx5_hca *h, int op_mod, int32_t *npages)
{
    CMD(query_pages);
    ISET(in, query_pages_in, op_mod, (uint32_t)op_mod);
    int rc = RUN();
    *npages = (int32_t)IGET(out, query_pages_out, num_pages);
    return rc;
}

int mlx5_manage_pages_give(struct mlx5_hca *h, const uint64_t *pas, uint32_t n)
{
    uint32_t inlen = MLX5S_manage_pages_in + 8 * n;
    uint8_t *in = calloc(1, inlen), out[MLX5S_manage_pages_out] = {0};
    if (!in)
        return hca_fail(h, ENOMEM, "mlx5 MANAGE_PAGES: out of memory");
    ISET(in, manage_pages_in, opcode, MLX5OP_MANAGE_PAGES);
    ISET(in, manage_pages_in, op_mod, MLX5C_PAGES_GIVE);
    ISET(in, manage_pages_in, input_num_entries, n);
    for (uint32_t i = 0; i < n; i++)
        st_be64(in + MLX5S_manage_pages_in + 8 * i, pas[i]);
    int rc = cmd_exec(h, in, inlen, out, sizeof out);
    free(in);
    return rc;
}

int mlx5_manage_pages_take(struct mlx5_hca *h, uint32_t want, uint64_t *pas, uint32_t *got)
{
    uint32_t outlen = MLX5S_manage_pages_out + 8 * want;
    uint8_t in[MLX5S_manage_pages_in] = {0}, *out = calloc(1, outlen);
    if (!out)
        return hca_fail(h, ENOMEM, "mlx5 MANAGE_PAGES: out of memory");
    ISET(in, manage_pages_in, opcode, MLX5OP_MANAGE_PAGES);
    ISET(in, manage_pages_in, op_mod, MLX5C_PAGES_TAKE);
    ISET(in, manage_pages_in, input_num_entries, want);
    int rc = cmd_exec(h, in, sizeof in, out, outlen);
    *got = 0;
    if (rc == 0) {
        uint32_t n = IGET(out, manage_pages_out, output_num_entries);
        if (n > want) {
            rc = hca_fail(h, EPROTO, "mlx5 MANAGE_PAGES: firmware returned %u pages, asked %u", n, want);
            n = 0;
        }
        for (uint32_t i = 0; i < n; i++)
            pas[i] = ld_be64(out + MLX5S_manage_pages_out + 8 * i);
        *got = n;
    }
    free(out);
    return rc;
}

int mlx5_access_reg_host_endianness(struct mlx5_hca *h)
{
    enum { REG = 16 };
    uint8_t in[MLX5S_access_register_in + REG] = {0}, out[MLX5S_access_register_out + REG] = {0};
    ISET(in, access_register_in, opcode, MLX5OP_ACCESS_REG);
    ISET(in, access_register_in, op_mod, MLX5C_ACCESS_REGISTER_IN_OP_MOD_WRITE);
    ISET(in, access_register_in, register_id, MLX5C_REG_HOST_ENDIANNESS);
    /* register data byte 0: 0x00 on a little-endian host, 0x80 on big-endian */
    in[MLX5S_access_register_in] = __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? 0x80 : 0x00;
    return RUN();
}

int mlx5_query_hca_cap(struct mlx5_hca *h, int op_mod, uint8_t *cap)
{
    uint8_t in[MLX5S_query_hca_cap_in] = {0}, *out = calloc(1, MLX5S_query_hca_cap_out);
    if (!out)
        return hca_fail(h, ENOMEM, "mlx5 QUERY_HCA_CAP: out of memory");
    ISET(in, query_hca_cap_in, opcode, MLX5OP_QUERY_HCA_CAP);
    ISET(in, query_hca_cap_in, op_mod, (uint32_t)op_mod);
    int rc = cmd_exec(h, in, sizeof in, out, MLX5S_query_hca_cap_out);
    if (rc == 0)
        memcpy(cap, out + IBYTE(query_hca_cap_out, capability), HCA_CAP_BYTES);
    free(out);
    return rc;
}

int mlx5_set_hca_cap(struct mlx5_hca *h, int type, const uint8_t *cap)
{
    uint8_t *in = calloc(1, MLX5S_set_hca_cap_in), out[MLX5S_set_hca_cap_out] = {0};
    if (!in)
        return hca_fail(h, ENOMEM, "mlx5 SET_HCA_CAP: out of memory");
    ISET(in, set_hca_cap_in, opcode, MLX5OP_SET_HCA_CAP);
    ISET(in, set_hca_cap_in, op_mod, (uint32_t)type << 1);
    memcpy(in + IBYTE(set_hca_cap_in, capability), cap, HCA_CAP_BYTES);
    int rc = cmd_exec(h, in, MLX5S_set_hca_cap_in, out, sizeof out);
    free(in);
    return rc;
}

int mlx5_init_hca(struct mlx5_hca *h)
{
    /* 16 bytes, as the CX-4 trace's kernel sent (sw_owner_id unused). */
    uint8_t in[16] = {0}, out[MLX5S_init_hca_out] = {0};
    ISET(in, init_hca_in, opcode, MLX5OP_INIT_HCA);
    return RUN();
}

int mlx5_teardown_hca(struct mlx5_hca *h) { CMD(teardown_hca); return RUN(); }

int mlx5_alloc_uar(struct mlx5_hca *h, uint32_t *uar)
{
    CMD(alloc_uar);
    int rc = RUN();
    *uar = IGET(out, alloc_uar_out, uar);
    return rc;
}

int mlx5_dealloc_uar(struct mlx5_hca *h, uint32_t uar)
{
    CMD(dealloc_uar);
    ISET(in, dealloc_uar_in, uar, uar);
    return RUN();
}

int mlx5_query_nic_vport_context(struct mlx5_hca *h, uint8_t mac[6], int *roce_en)
{
    CMD(query_nic_vport_context);
    int rc = RUN();
    uint32_t hi = IGET(out, query_nic_vport_context_out, nic_vport_context_permanent_address_mac_addr_47_32);
    mac[0] = (uint8_t)(hi >> 8);
    mac[1] = (uint8_t)hi;
    st_be32(mac + 2, IGET(out, query_nic_vport_context_out, nic_vport_context_permanent_address_mac_addr_31_0));
    *roce_en = (int)IGET(out, query_nic_vport_context_out, nic_vport_context_roce_en);
    return rc;
}

int mlx5_modify_nic_vport_context_roce_en(struct mlx5_hca *h, int enable)
{
    CMD(modify_nic_vport_context);
    ISET(in, modify_nic_vport_context_in, field_select_roce_en, 1);
    ISET(in, modify_nic_vport_context_in, nic_vport_context_roce_en, enable ? 1 : 0);
    return RUN();
}

int mlx5_query_vport_state(struct mlx5_hca *h, uint32_t *state)
{
    CMD(query_vport_state);
    int rc = RUN();
    *state = IGET(out, query_vport_state_out, state);
    return rc;
}

int mlx5_alloc_pd(struct mlx5_hca *h, uint32_t *pd)
{
    CMD(alloc_pd);
    int rc = RUN();
    *pd = IGET(out, alloc_pd_out, pd);
    return rc;
}

int mlx5_dealloc_pd(struct mlx5_hca *h, uint32_t pd)
{
    CMD(dealloc_pd);
    ISET(in, dealloc_pd_in, pd, pd);
    return RUN();
}

/* The mkey variant (mkey_7_0) this driver asks for. */
enum { MKEY_VARIANT = 0x42 };

int mlx5_create_mkey_pa(struct mlx5_hca *h, uint32_t pd, uint32_t *mkey)
{
    CMD(create_mkey);
    uint8_t *mkc = in + IBYTE(create_mkey_in, memory_key_mkey_entry);
    ISET(mkc, mkc, access_mode_1_0, MLX5C_MKC_ACCESS_MODE_PA);
    ISET(mkc, mkc, lr, 1);
    ISET(mkc, mkc, lw, 1);
    ISET(mkc, mkc, length64, 1);   /* the whole bus address space */
    ISET(mkc, mkc, qpn, 0xffffff);
    ISET(mkc, mkc, mkey_7_0, MKEY_VARIANT);
    ISET(mkc, mkc, pd, pd);
    int rc = RUN();
    *mkey = IGET(out, create_mkey_out, mkey_index) << 8 | MKEY_VARIANT;
    return rc;
}

int mlx5_create_mkey_mtt(struct mlx5_hca *h, uint32_t pd, uint64_t iova, uint64_t len, int access,
                         const uint64_t *mtt, uint32_t npages, uint32_t *mkey)
{
    /* MTT entries are 8 bytes; the table is counted in 16-byte octwords. */
    uint32_t octwords = (npages + 1) / 2;
    uint32_t inlen = MLX5S_create_mkey_in + 16 * octwords;
    uint8_t *in = calloc(1, inlen), out[MLX5S_create_mkey_out] = {0};
    if (!in)
        return hca_fail(h, ENOMEM, "mlx5 CREATE_MKEY: out of memory");
    ISET(in, create_mkey_in, opcode, MLX5OP_CREATE_MKEY);
    uint8_t *mkc = in + IBYTE(create_mkey_in, memory_key_mkey_entry);
    ISET(mkc, mkc, access_mode_1_0, MLX5C_MKC_ACCESS_MODE_MTT);
    ISET(mkc, mkc, lr, 1);
    ISET(mkc, mkc, lw, (access & IBV_ACCESS_LOCAL_WRITE) ? 1 : 0);
    ISET(mkc, mkc, rr, (access & IBV_ACCESS_REMOTE_READ) ? 1 : 0);
    ISET(mkc, mkc, rw, (access & IBV_ACCESS_REMOTE_WRITE) ? 1 : 0);
    ISET(mkc, mkc, qpn, 0xffffff);
    ISET(mkc, mkc, mkey_7_0, MKEY_VARIANT);
    ISET(mkc, mkc, pd, pd);
    ISET64(mkc, mkc, start_addr, iova);
    ISET64(mkc, mkc, len, len);
    ISET(mkc, mkc, log_page_size, 12);
    ISET(mkc, mkc, translations_octword_size, octwords);
    ISET(in, create_mkey_in, translations_octword_actual_size, octwords);
    for (uint32_t i = 0; i < npages; i++)
        st_be64(in + MLX5S_create_mkey_in + 8 * i, mtt[i] | 0x3); /* rd_en, wr_en */
    int rc = cmd_exec(h, in, inlen, out, sizeof out);
    free(in);
    if (rc < 0)
        return rc;
    return mlx5_query_mkey(h, IGET(out, create_mkey_out, mkey_index), mkey);
}

int mlx5_query_mkey(struct mlx5_hca *h, uint32_t mkey_index, uint32_t *mkey)
{
    CMD(query_mkey);
    ISET(in, query_mkey_in, mkey_index, mkey_index);
    int rc = RUN();
    *mkey = mkey_index << 8 | IGET(out, query_mkey_out, memory_key_mkey_entry_mkey_7_0);
    return rc;
}

int mlx5_destroy_mkey(struct mlx5_hca *h, uint32_t mkey)
{
    CMD(destroy_mkey);
    ISET(in, destroy_mkey_in, mkey_index, mkey >> 8);
    return RUN();
}

int mlx5_set_roce_address(struct mlx5_hca *h, uint32_t index, const uint8_t gid[16], const uint8_t mac[6])
{
    CMD(set_roce_address);
    ISET(in, set_roce_address_in, roce_address_index, index);
    ISET(in, set_roce_address_in, vhca_port_num, 1);
    uint8_t *a = in + IBYTE(set_roce_address_in, roce_address);
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    ifc_set_bytes(a, MLX5F_roce_addr_layout__source_l3_address, gid);
    ISET(a, roce_addr_layout, source_mac_47_32, (uint32_t)mac[0] << 8 | mac[1]);
    ISET(a, roce_addr_layout, source_mac_31_0, ld_be32(mac + 2));
    ISET(a, roce_addr_layout, roce_version, MLX5C_ROCE_VERSION_2);
    ISET(a, roce_addr_layout, roce_l3_type,
         memcmp(gid, v4mapped, sizeof v4mapped) == 0 ? MLX5C_ROCE_L3_TYPE_IPV4 : MLX5C_ROCE_L3_TYPE_IPV6);
    return RUN();
}
