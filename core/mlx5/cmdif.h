/* cmdif.h - byte layout of the command interface shared by the driver
 * (cmdq.c) and the model (model_fw.c): queue entry (struct mlx5_cmd_layout),
 * mailbox block (struct mlx5_cmd_prot_block) and init segment registers.
 * Source: shared/mlx5/cmd-layout.md and init-seg.tsv (Linux device.h). */
#ifndef MLX5_CMDIF_H
#define MLX5_CMDIF_H

enum {
    /* queue entry, 64 bytes */
    CMDE_TYPE = 0x00,             /* MLX5_PCI_CMD_XPORT */
    CMDE_INLEN = 0x04,
    CMDE_IN_PTR = 0x08,
    CMDE_IN = 0x10,               /* 16 inline input bytes */
    CMDE_OUT = 0x20,              /* 16 inline output bytes */
    CMDE_OUT_PTR = 0x30,
    CMDE_OUTLEN = 0x38,
    CMDE_TOKEN = 0x3c,
    CMDE_SIG = 0x3d,
    CMDE_STATUS_OWN = 0x3f,       /* bit 0 ownership, bits 7:1 delivery status */
    CMD_ENTRY_SIZE = 64,
    CMD_INLINE = 16,
    CMD_XPORT_PCI = 0x7,
    CMD_OWNER_HW = 0x1,
    CMD_PTR_ALIGN_MASK = 0x1ff,  /* entry holds pointer bits 63:9 */

    /* mailbox block, 576 bytes, 1 KiB aligned (next holds bits 63:10) */
    MBOX_DATA = 0x000,
    MBOX_DATA_SIZE = 512,        /* MLX5_CMD_DATA_BLOCK_SIZE */
    MBOX_CTRL = 0x200,           /* start of the control part (ctrl_sig range) */
    MBOX_NEXT = 0x230,
    MBOX_BLOCK_NUM = 0x238,
    MBOX_TOKEN = 0x23d,
    MBOX_CTRL_SIG = 0x23e,
    MBOX_SIG = 0x23f,
    MBOX_SIZE = 0x240,
    MBOX_ALIGN = 1024,
    MBOX_NEXT_ALIGN_MASK = 0x3ff,

    /* init segment (BAR0) */
    INIT_FW_REV = 0x000,
    INIT_CMDIF_REV_FW_SUB = 0x004,
    INIT_CMDQ_ADDR_H = 0x010,
    INIT_CMDQ_ADDR_L_SZ = 0x014,
    INIT_CMD_DBELL = 0x018,
    INIT_INITIALIZING = 0x1fc,
    INIT_INITIALIZING_BIT = 31,
    INIT_HEALTH_SYND = 0x23c,    /* dword holding health.synd (byte 0x23d) */
    INIT_HEALTH_COUNTER = 0x1010,
    INIT_NIC_IFC_SHIFT = 8,      /* cmdq_addr_l_sz bits 10:8 */

    /* UAR page offsets (uar.tsv) */
    UAR_PAGE = 4096,
    UAR_CQ_DOORBELL = 0x20,      /* MLX5_CQ_DOORBELL */
    UAR_EQ_ARM = 0x40,           /* MLX5_EQ_DOORBEL_OFFSET */
    UAR_EQ_NOARM = 0x48,
    UAR_BF0 = 0x800,             /* MLX5_BF_OFFSET */
    UAR_BF1 = 0x900,             /* second BlueFlame buffer (bf_buf_size 256 on CX-4) */
};

#endif
