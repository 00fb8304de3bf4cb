/* model.h - the face of the ConnectX device model: emulated hardware below
 * the driver's PCI interface (pci.h). The driver opens it as a PCI function
 * (pci_model_open) and, beside that, sees only what is declared here: the
 * options and a snapshot of the firmware's state for specs. The model's
 * files and their layers are in model_int.h.
 *
 * Threads: the driver touches the model only through MMIO and DMA memory.
 * An MMIO doorbell records the work and wakes the model thread (the
 * "hardware"), which executes commands and WQEs and writes results back into
 * DMA memory, like a real NIC. All soft-device calls happen on that thread. */
#ifndef MLX5_MODEL_H
#define MLX5_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include "mlx5/pci.h"
#include "tbrt.h"

/* What a model looks like; 0 fields take the defaults (model_int.h). */
struct model_opts {
    int boot_pages;          /* QUERY_PAGES boot (the CX-4 trace asks 6) */
    int init_pages;          /* QUERY_PAGES init (the CX-4 asks 12868; default less) */
    int regular_pages;       /* QUERY_PAGES regular, after INIT_HCA */
    int checksums;           /* verify entry and block signatures */
    int init_reads;          /* reads of "initializing" before it clears */
};

struct model;

/* The model behind a PCI function opened by pci_model_open (pci.h); NULL
 * when the function is not a model. */
struct model *model_of_pci(struct mlx5_pci *p);

/* What the firmware holds now, for specs (any thread; a snapshot). */
struct model_state {
    int enabled, initialized, issi;
    int pages_given, pages_owed;
    int uars, pds, mkeys, eqs, cqs, qps, roce_entries;
    uint64_t commands, bad_commands, wqes, cqes, eqes;
};
void model_state_get(struct model *m, struct model_state *st);

/* Fault injection into what the device writes, for specs of the driver's
 * checks of hostile device output: the next CQE of the kind named is
 * corrupted (any thread; one fault at a time). */
enum model_fault {
    MODEL_FAULT_NONE = 0,
    MODEL_FAULT_CQE_WQE_COUNTER,    /* a send CQE names a WQE never posted */
    MODEL_FAULT_CQE_BYTE_COUNT,     /* a receive CQE: more bytes than its buffer holds */
    MODEL_FAULT_CQE_OPCODE,         /* a CQE with an opcode no CQE has */
};
void model_fault(struct model *m, int fault);

/* For fuzzing the driver (spec/support/fuzz_mlx5_device.c): CQE number n
 * this model writes (counted from 0, all its CQs) goes out with its byte
 * off (0..63; 63 is op_own: opcode and owner bit, so a lie may also hide
 * the CQE) XORed with bits. At most MODEL_CQE_LIES, set before the first
 * CQE is written; false when there is no room. */
enum { MODEL_CQE_LIES = 16 };
bool model_cqe_lie(struct model *m, uint32_t n, uint8_t off, uint8_t bits);

#endif
