/* model_int.h - the device model's internals, shared by its files only
 * (the driver includes model.h, never this). Its files are layers, each
 * calling only those below it:
 *
 *   pci_model.c      the PCI function the driver holds: BAR0 -> model_hw,
 *                    DMA memory -> model_bus, config space
 *   model_hw.c       registers, doorbells, the model thread ("hardware")
 *   model_fw.c       the command queue and HCA-level commands (firmware)
 *   model_objects.c  UAR/PD/MKEY/RoCE/EQ/CQ/QP commands, QP state machine
 *   model_data.c     the data path on the software RDMA device (the wire)
 *   model_tables.c   object lookups, command status   }  the bottom:
 *   model_bus.c      DMA regions, wake-up, interrupts  }  calls nothing above
 *
 * In struct model, everything below "model thread only" is touched by the
 * model thread alone; the rest is guarded by m->lock. */
#ifndef MLX5_MODEL_INT_H
#define MLX5_MODEL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include "mlx5/model/model.h"
#include "mlx5/ifc.h"

enum {
    MODEL_BOOT_PAGES = 6,         /* CX-4 trace, QUERY_PAGES op_mod 1 */
    MODEL_INIT_PAGES = 64,        /* the CX-4 wants 12868 (50 MiB); a model needs less */
    MODEL_REGULAR_PAGES = 8,
    MODEL_INIT_READS = 3,
    MODEL_LOG_CMDQ_SIZE = 5,      /* 32 entries: the trace's page queue is slot 31 */
    MODEL_LOG_CMDQ_STRIDE = 6,    /* 64-byte entries */
    MODEL_FW_MAJOR = 14, MODEL_FW_MINOR = 12, MODEL_FW_SUB = 1220, /* CX-4 trace */
    MODEL_CMDIF_REV = 5,
    MODEL_UAR_BASE = 0x10,        /* first UAR index (trace: ALLOC_UAR -> 0x10) */
    MODEL_MAX_UARS = 64,
    MODEL_EQN_BASE = 0x10,        /* trace: CREATE_EQ -> 0x10, 0x11, ... */
    MODEL_MAX_EQS = 64,
    MODEL_CQN_BASE = 0x80,
    MODEL_MAX_CQS = 256,
    MODEL_MAX_QPS = 256,
    MODEL_MAX_PDS = 256,
    MODEL_MAX_MKEYS = 1024,
    MODEL_ROCE_ENTRIES = 16,
    MODEL_IRQ_VECTORS = 64,
    MODEL_BAR0_SIZE = (MODEL_UAR_BASE + MODEL_MAX_UARS) * 4096,
};

enum {
    CAP_PAGE = 4096,             /* hca_cap_union */
    CAP_OPMODS = 16,             /* QUERY_HCA_CAP op_mod = type << 1 | cur, types 0..7 */
    DOORBELL_RING = 4096,        /* queued UAR writes between two model-thread passes */
    MODEL_MAX_WR = 1024,         /* soft WRs in flight per queue */
};

struct model_region {
    uint64_t bus;
    uint8_t *virt;
    size_t size;
    int mapped;                  /* caller memory (dma_map) rather than model-allocated */
};

struct model_doorbell {
    uint32_t off;                /* BAR0 offset */
    uint8_t bytes[8];
    int len;                     /* 4 or 8; 0: receive WQEs posted (rq_posted) */
};

struct model_mkey {
    int used;
    uint32_t index;              /* mkey >> 8 */
    uint32_t key;                /* index << 8 | mkey_7_0 */
    uint32_t pd;
    int access_mode, lr, lw, rr, rw, length64;
    uint64_t start, len;
    uint8_t *virt;               /* start's virtual address (MTT: contiguous) */
    uint64_t mapped;             /* bytes from virt the MTT's pages really back
                                    (>= len; every use is checked against it) */
    tbrt_mr *soft;
};

struct model_eq {
    int used;
    uint32_t eqn, log_size, uar, intr;
    uint8_t *buf;
    uint32_t pi, ci;
    int armed;
};

struct model_cq {
    int used;
    uint32_t cqn, log_size, uar, eqn;
    uint8_t *buf, *dbr;
    uint32_t pi;
    int armed;                   /* 1: next CQE raises an EQE */
    uint32_t arm_sn;
    int refs;                    /* QPs using it */
};

struct model_qp {
    int used;
    uint32_t qpn, pd, st, uar;
    int state;                   /* MLX5_QP_STATE_* */
    uint32_t cqn_snd, cqn_rcv;
    uint32_t log_rq_size, log_rq_stride, log_sq_size;
    uint8_t *rq, *sq, *dbr;
    tbrt_qp *soft;
    uint32_t remote_qpn;
    uint32_t sq_head;            /* WQEBB counter consumed */
    uint32_t rq_head;            /* RQ WQEs posted to soft */
    uint32_t sq_inflight, rq_inflight;
    int sq_error;                /* a local error is pending or the SQ is in error */
    uint32_t err_wqe, err_synd;  /* the failing WQE waiting for the SQ to drain */
    int err_pending;
    uint8_t err_opcode;
};

struct model_roce {
    int valid;
    uint8_t gid[16];
    uint8_t mac[6];
    int version, l3_type;
};

struct model {
    struct mlx5_pci pci;         /* first: what the driver holds */
    struct model_opts opts;
    pthread_mutex_t lock;
    pthread_t thread;
    int thread_started;
    atomic_int stop;
    atomic_int fault;            /* enum model_fault, for the next CQE it fits */
    /* lies about CQEs (model_cqe_lie): set before the first CQE, then read
     * by the model thread only */
    struct { uint32_t n; uint8_t off, bits; } lies[MODEL_CQE_LIES];
    atomic_int nlies;
    uint32_t cqes_written;       /* CQEs this model wrote, the lies' count */
    int wake_fd;
    int irq_fd[MODEL_IRQ_VECTORS];
    uint8_t cfg[256];            /* PCI config space */

    /* BAR0 registers (lock) */
    uint32_t cmdq_h, cmdq_l;
    int init_reads_left;
    uint32_t health;
    uint32_t dbell_pending;
    struct model_doorbell ring[DOORBELL_RING];
    uint32_t ring_head, ring_tail;
    uint64_t ring_dropped;
    uint64_t rq_ticket, rq_done; /* rq_posted requests and how many are handled */
    pthread_cond_t rq_cond;

    /* DMA space (lock) */
    struct model_region *regions;
    int nregions, cap_regions;
    int last_region;             /* where model_dma_region found the last one */
    uint64_t next_bus;

    /* snapshot for model_state_get (lock) */
    struct model_state snap;

    /* ---- model thread only ---- */
    int enabled, initialized, issi, torn_down;
    int boot_owed, init_owed, regular_owed;
    uint64_t *pages;             /* bus addresses of the pages given to us */
    int npages, cap_pages;
    uint8_t caps[CAP_OPMODS][CAP_PAGE];
    int caps_valid[CAP_OPMODS];
    uint8_t host_endianness[16];
    uint8_t mac[6];
    int roce_en;
    int uar_used[MODEL_MAX_UARS];
    int pd_used[MODEL_MAX_PDS];
    struct model_mkey mkeys[MODEL_MAX_MKEYS];
    uint32_t mkey_seq;
    struct model_eq eqs[MODEL_MAX_EQS];
    struct model_cq cqs[MODEL_MAX_CQS];
    struct model_qp qps[MODEL_MAX_QPS];
    struct model_roce roce[MODEL_ROCE_ENTRIES];
    uint64_t commands, bad_commands, wqes, cqes, eqes;

    /* the wire: the software RDMA device */
    tbrt_dev *soft;
    tbrt_pd *soft_pd;
    tbrt_cq *soft_cq;
    char soft_why[256];
};

/* ---- model_bus.c ------------------------------------------------------------ */
void model_bus_init(struct model *m);
/* Enter [virt, virt+size) into the bus space; its bus address in *bus. */
int model_region_add(struct model *m, uint8_t *virt, size_t size, size_t align, int mapped,
                     uint64_t *bus);
void model_region_del(struct model *m, uint64_t bus);
/* The virtual address of [bus, bus+len) when it lies in one DMA region. */
void *model_dma(struct model *m, uint64_t bus, size_t len);
/* The region holding bus: its virtual base and bus base; NULL when none. */
void *model_dma_region(struct model *m, uint64_t bus, uint64_t *bus_base, size_t *size);
/* Wake the model thread (doorbell). */
void model_wake(struct model *m);
/* Signal the driver's interrupt vector. */
void model_irq(struct model *m, int vector);

/* ---- model_hw.c ------------------------------------------------------------- */
struct model *model_create(const struct model_opts *opts, char *err, size_t errlen);
void model_destroy(struct model *m);
/* BAR0 accesses from the driver (any thread). */
uint32_t model_read32(struct model *m, uint32_t off);
void model_write32(struct model *m, uint32_t off, uint32_t val);
void model_write64(struct model *m, uint32_t off, const void *bytes8);
int model_irq_fd(struct model *m, int vector);
void model_rq_posted(struct model *m, uint32_t qpn);


/* ---- pci_model.c --------------------------------------------------------------- */
struct mlx5_pci *model_pci(struct model *m);

/* A command's input and output streams and result. */
struct model_cmd {
    const uint8_t *in;
    uint32_t inlen;
    uint8_t *out;
    uint32_t outlen;
    uint16_t opcode, op_mod;
};

/* model_fw.c: run one command (status in c->out); 1 when the firmware
 * verifies command signatures (cmdif_checksum, or the model's option). */
void model_fw_execute(struct model *m, struct model_cmd *c);
int model_fw_checksums(struct model *m);


/* model_objects.c: object commands; 1 when handled (status set), 0 when the
 * opcode is not an object command. */
int model_objects_cmd(struct model *m, struct model_cmd *c);
void model_objects_reset(struct model *m);

/* model_data.c: the data path (model thread). */
int model_soft_open(struct model *m);
void model_soft_close(struct model *m);
int model_data_qp_create(struct model *m, struct model_qp *q);
int model_data_qp_modify(struct model *m, struct model_qp *q, int to_state, const uint8_t *qpc,
                         uint32_t *syndrome);
void model_data_qp_destroy(struct model *m, struct model_qp *q);
int model_data_mkey_create(struct model *m, struct model_mkey *k);
void model_data_mkey_destroy(struct model *m, struct model_mkey *k);
void model_data_sq_doorbell(struct model *m, uint32_t qpn);
void model_data_rq_posted(struct model *m, uint32_t qpn);
void model_data_poll(struct model *m);
void model_data_cq_arm(struct model *m, uint32_t cqn, uint32_t sn, uint32_t ci);
void model_data_eq_doorbell(struct model *m, uint32_t eqn, uint32_t ci, int arm);
int model_data_busy(struct model *m);
int model_data_fd(struct model *m);

/* model_tables.c */
/* Set the command status and syndrome in out; returns 0 for chaining. */
int model_status(struct model_cmd *c, uint32_t status, uint32_t syndrome);
int model_objects_count(struct model *m, struct model_state *st);
struct model_mkey *model_mkey_find(struct model *m, uint32_t key);
struct model_qp *model_qp_find(struct model *m, uint32_t qpn);
struct model_cq *model_cq_find(struct model *m, uint32_t cqn);
struct model_eq *model_eq_find(struct model *m, uint32_t eqn);

/* Model syndromes: the firmware's are not public (cmd-layout.md 5.6); these
 * name the failing check of this model, "MD" + a number. */
enum {
    SYND_BASE = 0x4d440000,
    SYND_NOT_ENABLED = SYND_BASE + 1,
    SYND_BAD_OPMOD,
    SYND_BAD_ISSI,
    SYND_PAGES_OWED,
    SYND_NOT_INIT,
    SYND_ALREADY,
    SYND_INLEN,
    SYND_OUTLEN,
    SYND_NO_RESOURCE,
    SYND_BAD_RESOURCE,
    SYND_BAD_STATE,
    SYND_BAD_PARAM,
    SYND_BAD_ADDRESS,
    SYND_IN_USE,
    SYND_SOFT,
    SYND_UNSUPPORTED,
};

#endif
