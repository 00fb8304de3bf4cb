/* hca.h - the mlx5 driver's state: one HCA behind a PCI function, its
 * command queue (cmdq.c), one function per firmware command (commands.c),
 * bring-up and teardown (bringup.c) and the queues of the data path
 * (datapath.c). Errors: -errno with the text in h->why. */
#ifndef MLX5_HCA_H
#define MLX5_HCA_H

#include <pthread.h>
#include <stdio.h>
#include "mlx5/ifc.h"
#include "mlx5/pci.h"

enum {
    HCA_CAP_BYTES = 4096,
    HCA_MAX_GIDS = 16,
    HCA_PAGE = 4096,                  /* MLX5_ADAPTER_PAGE_SHIFT 12 */
    HCA_PAGE_CHUNK = 256,             /* firmware pages per DMA allocation */
    LINUX_PROF_LOG_MAX_QP = 17,       /* Linux default profile (trace SET_HCA_CAP: 14 -> 17) */
    HCA_ISSI = 1,
    HCA_CMD_TIMEOUT_MS = 10000,       /* Linux waits 60 s; a model answers in microseconds */
};

/* Fault injection for the next command (specs of the model's checks). */
enum hca_inject {
    INJECT_NONE = 0,
    INJECT_TOKEN = 1,                 /* a wrong token in the first input block */
    INJECT_BLOCK_NUM = 2,             /* a wrong block number */
    INJECT_SIGNATURE = 3,             /* a bad entry signature (checked when checksums are on) */
    INJECT_TYPE = 4,                  /* a bad entry type */
    INJECT_IN_PTR_ALIGN = 5,          /* input mailbox pointer not 512-byte aligned */
    INJECT_NO_DOORBELL = 6,           /* hand over but never ring: the wait must time out */
};

struct hca_chunk {
    struct mlx5_dma dma;
    int given;                        /* pages of it the firmware holds */
};

struct mlx5_hca {
    struct mlx5_pci *pci;
    char why[512];
    FILE *trace;                      /* NULL: no trace */
    int trace_close;
    pthread_mutex_t cmd_lock;

    /* command queue */
    struct mlx5_dma cmdq, mbox;
    uint32_t mbox_blocks;
    int log_size, log_stride, max_reg;
    uint8_t token;
    int checksums;
    int inject;
    int timeout_ms;
    /* a command the device took got no completion: it may still write that
     * entry and its mailboxes, so the queue takes no more commands and its
     * memory stays with the device (cmdq_fini) */
    int cmdq_hung;
    uint32_t last_status, last_syndrome, last_delivery;

    /* firmware pages */
    struct hca_chunk *chunks;
    int nchunks, cap_chunks;
    int chunk_hint;                   /* where the last page returned was */
    int pages_given;

    /* bring-up results */
    int enabled, initialized;
    uint8_t cap_gen[HCA_CAP_BYTES], cap_gen_max[HCA_CAP_BYTES], cap_roce[HCA_CAP_BYTES];
    uint32_t uar;
    int have_uar;
    uint32_t pd;
    int have_pd;
    uint32_t pa_mkey;
    int have_pa_mkey;
    uint8_t mac[6];
    int roce_en;
    int ngids;
    uint8_t gids[HCA_MAX_GIDS][16];
    int bf_toggle;                    /* BlueFlame buffer 0x800 / 0x900 */
    uint32_t next_vector;
};

/* cmdq.c */
int cmdq_init(struct mlx5_hca *h);
void cmdq_fini(struct mlx5_hca *h);
/* Execute a command: in/out are the whole streams (opcode first). 0, or
 * -EIO (delivery), -EPROTO (command status), -ETIMEDOUT. */
int cmd_exec(struct mlx5_hca *h, const void *in, uint32_t inlen, void *out, uint32_t outlen);
int hca_fail(struct mlx5_hca *h, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const char *cmd_name(uint32_t opcode);

/* commands.c: one function per firmware command */
int mlx5_enable_hca(struct mlx5_hca *h);
int mlx5_disable_hca(struct mlx5_hca *h);
int mlx5_query_issi(struct mlx5_hca *h, uint32_t *current, uint32_t *supported_dw0);
int mlx5_set_issi(struct mlx5_hca *h, uint32_t issi);
int mlx5_query_pages(struct mlx5_hca *h, int op_mod, int32_t *npages);
int mlx5_manage_pages_give(struct mlx5_hca *h, const uint64_t *pas, uint32_t n);
int mlx5_manage_pages_take(struct mlx5_hca *h, uint32_t want, uint64_t *pas, uint32_t *got);
int mlx5_access_reg_host_endianness(struct mlx5_hca *h);
int mlx5_query_hca_cap(struct mlx5_hca *h, int op_mod, uint8_t *cap);
int mlx5_set_hca_cap(struct mlx5_hca *h, int type, const uint8_t *cap);
int mlx5_init_hca(struct mlx5_hca *h);
int mlx5_teardown_hca(struct mlx5_hca *h);
int mlx5_alloc_uar(struct mlx5_hca *h, uint32_t *uar);
int mlx5_dealloc_uar(struct mlx5_hca *h, uint32_t uar);
int mlx5_query_nic_vport_context(struct mlx5_hca *h, uint8_t mac[6], int *roce_en);
int mlx5_modify_nic_vport_context_roce_en(struct mlx5_hca *h, int enable);
int mlx5_query_vport_state(struct mlx5_hca *h, uint32_t *state);
int mlx5_alloc_pd(struct mlx5_hca *h, uint32_t *pd);
int mlx5_dealloc_pd(struct mlx5_hca *h, uint32_t pd);
int mlx5_create_mkey_pa(struct mlx5_hca *h, uint32_t pd, uint32_t *mkey);
/* access: IBV_ACCESS_* bits. mtt: bus addresses of the 4 KiB pages. */
int mlx5_create_mkey_mtt(struct mlx5_hca *h, uint32_t pd, uint64_t iova, uint64_t len, int access,
                         const uint64_t *mtt, uint32_t npages, uint32_t *mkey);
int mlx5_query_mkey(struct mlx5_hca *h, uint32_t mkey_index, uint32_t *mkey);
int mlx5_destroy_mkey(struct mlx5_hca *h, uint32_t mkey);
int mlx5_set_roce_address(struct mlx5_hca *h, uint32_t index, const uint8_t gid[16], const uint8_t mac[6]);

/* bringup.c */
struct hca_opts {
    int checksums;                    /* cmdif_checksum: sign every block */
    int raw;                          /* stop after ENABLE_HCA's prerequisites: cmdq only */
};
int hca_open(struct mlx5_pci *pci, FILE *trace, const struct hca_opts *o, struct mlx5_hca **out,
             char *err, size_t errlen);
/* Tear down (reverse order, pages reclaimed) and free; safe on partial bring-up. */
int hca_teardown(struct mlx5_hca *h);
void hca_free(struct mlx5_hca *h);

#endif
