/* model.h - the ConnectX device model: a firmware emulator behind the PCI
 * interface (pci_model.c: BAR0 and "DMA" memory; model_fw.c: the command
 * queue and HCA-level commands; model_objects.c: UAR/PD/MKEY/RoCE/EQ/CQ/QP
 * objects and the QP state machine; model_data.c: the data path on top of
 * the software RDMA device).
 *
 * Threads: the driver touches the model only through MMIO and DMA memory.
 * An MMIO doorbell records the work and wakes the model thread (the
 * "hardware"), which executes commands and WQEs and writes results back into
 * DMA memory, like a real NIC. All soft-device calls happen on that thread. */
#ifndef MLX5_MODEL_H
#define MLX5_MODEL_H

#include <pthread.h>
#include <stdint.h>
#include "mlx5/pci.h"
#include "tbrt.h"

/* What a model looks like; 0 fields take the defaults below. */
struct model_opts {
    int boot_pages;          /* QUERY_PAGES boot (the CX-4 trace asks 6) */
    int init_pages;          /* QUERY_PAGES init (the CX-4 asks 12868; default less) */
    int regular_pages;       /* QUERY_PAGES regular, after INIT_HCA */
    int checksums;           /* verify entry and block signatures */
    int init_reads;          /* reads of "initializing" before it clears */
};

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

struct model;

/* ---- pci_model.c: DMA space (bus -> virt) ---------------------------------- */
/* The virtual address of [bus, bus+len) when it lies in one DMA region. */
void *model_dma(struct model *m, uint64_t bus, size_t len);
/* The region holding bus: its virtual base and bus base; NULL when none. */
void *model_dma_region(struct model *m, uint64_t bus, uint64_t *bus_base, size_t *size);
/* Wake the model thread (doorbell). */
void model_wake(struct model *m);
/* Signal the driver's interrupt vector. */
void model_irq(struct model *m, int vector);

/* ---- model_fw.c ------------------------------------------------------------ */
struct model *model_create(const struct model_opts *opts, char *err, size_t errlen);
void model_destroy(struct model *m);
/* BAR0 accesses from the driver (any thread). */
uint32_t model_read32(struct model *m, uint32_t off);
void model_write32(struct model *m, uint32_t off, uint32_t val);
void model_write64(struct model *m, uint32_t off, const void *bytes8);
int model_irq_fd(struct model *m, int vector);
void model_rq_posted(struct model *m, uint32_t qpn);
struct mlx5_pci *model_pci(struct model *m);

/* What the firmware holds now, for specs (any thread; a snapshot). */
struct model_state {
    int enabled, initialized, issi;
    int pages_given, pages_owed;
    int uars, pds, mkeys, eqs, cqs, qps, roce_entries;
    uint64_t commands, bad_commands, wqes, cqes, eqes;
};
void model_state_get(struct model *m, struct model_state *st);

#endif
