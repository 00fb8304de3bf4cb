/* tbrt_mlx5.h - the public API of tbrt's user-space ConnectX (mlx5) driver
 * and its device model, for prototyping firmware commands from Lua:
 * open a model or a PCI device (brought up to INIT_HCA, UAR, PD, MKEY and the
 * RoCE addresses, or only to a working command queue), send raw commands
 * through the real command queue, look layouts up by name (the tables
 * generated from shared/mlx5), trace every command in Linux mlx5_core's dump
 * format, inspect the model's firmware state.
 *
 * The verbs device "mlx5:model0" / "mlx5:<PCI address>" (tbrt.h) runs on the
 * same driver; tbrt_mlx5_of_dev reaches the driver under it. */
#ifndef TBRT_MLX5_H
#define TBRT_MLX5_H

#include <stddef.h>
#include <stdint.h>
#include "tbrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* tbrt:cdef begin */

typedef struct tbrt_mlx5 tbrt_mlx5;

typedef struct tbrt_mlx5_opts {
    const char *pci;          /* PCI address ("0000:02:00.0"); NULL or "": the model */
    int trace;                /* print every command (mlx5_core dump format) */
    const char *trace_path;   /* append the trace here; NULL: stderr */
    int raw;                  /* 1: set up the command queue only (no ENABLE_HCA) */
    int checksums;            /* sign every block (cmdif_checksum 3) */
    int model_boot_pages;     /* model: pages QUERY_PAGES asks for; 0: defaults */
    int model_init_pages;
    int model_regular_pages;
} tbrt_mlx5_opts;

/* Fault injection for the next command (tests of the device's checks). */
enum tbrt_mlx5_inject {
    TBRT_MLX5_INJECT_TOKEN = 1,        /* wrong token in the first input block */
    TBRT_MLX5_INJECT_BLOCK_NUM = 2,    /* wrong block number */
    TBRT_MLX5_INJECT_SIGNATURE = 3,    /* bad entry signature */
    TBRT_MLX5_INJECT_TYPE = 4,         /* bad entry type */
    TBRT_MLX5_INJECT_IN_PTR_ALIGN = 5, /* misaligned input mailbox pointer */
    TBRT_MLX5_INJECT_NO_DOORBELL = 6,  /* never ring: the bounded wait expires */
    /* the model only: the next CQE the device writes is hostile */
    TBRT_MLX5_INJECT_CQE_WQE_COUNTER = 7, /* a send CQE names a WQE never posted */
    TBRT_MLX5_INJECT_CQE_BYTE_COUNT = 8,  /* a receive CQE: more bytes than posted */
    TBRT_MLX5_INJECT_CQE_OPCODE = 9,      /* a CQE opcode no CQE has */
};

/* Field kinds of the layout tables. */
enum tbrt_mlx5_kind {
    TBRT_MLX5_SCALAR = 0,
    TBRT_MLX5_CONTAINER = 1,  /* a nested layout (its fields follow with dotted names) */
    TBRT_MLX5_ARRAY = 2,
    TBRT_MLX5_FLEX = 3,       /* flexible array: width is one element */
};

typedef struct tbrt_mlx5_field {
    const char *name;
    uint32_t off;             /* bit offset, PRM numbering (bit 0 = MSB of byte 0) */
    uint32_t width;           /* bits */
    int kind;                 /* enum tbrt_mlx5_kind */
} tbrt_mlx5_field;

/* The model's firmware state (zero for real hardware). */
typedef struct tbrt_mlx5_model_state {
    int enabled, initialized, issi;
    int pages_given, pages_owed;
    int uars, pds, mkeys, eqs, cqs, qps, roce_entries;
    uint64_t commands, bad_commands, wqes, cqes, eqes;
} tbrt_mlx5_model_state;

int tbrt_mlx5_open(const tbrt_mlx5_opts *opts, tbrt_mlx5 **out, char *err, size_t errlen);
/* Tear the HCA down (reverse order, pages reclaimed), keeping the handle so
 * the model's state can still be read; 0 or the first failure. */
int tbrt_mlx5_teardown(tbrt_mlx5 *dev);
/* Teardown if needed, then free. */
int tbrt_mlx5_close(tbrt_mlx5 *dev);
const char *tbrt_mlx5_why(tbrt_mlx5 *dev);
/* "model0" or the PCI address. */
const char *tbrt_mlx5_addr(tbrt_mlx5 *dev);

/* A raw command through the command queue: in/out are the whole streams
 * (opcode at byte 0). 0; -EIO delivery error; -EPROTO command status (text
 * in tbrt_mlx5_why, status and syndrome below); -ETIMEDOUT. */
int tbrt_mlx5_cmd(tbrt_mlx5 *dev, const void *in, size_t inlen, void *out, size_t outlen);
uint32_t tbrt_mlx5_last_status(tbrt_mlx5 *dev);
uint32_t tbrt_mlx5_last_syndrome(tbrt_mlx5 *dev);
uint32_t tbrt_mlx5_last_delivery(tbrt_mlx5 *dev);
int tbrt_mlx5_inject(tbrt_mlx5 *dev, int what);
/* Bound of the wait for a command (milliseconds). */
void tbrt_mlx5_set_timeout(tbrt_mlx5 *dev, int ms);
/* Trace to a file from now on (NULL or "": stop). */
int tbrt_mlx5_trace_to(tbrt_mlx5 *dev, const char *path);

/* DMA memory for prototyping commands that carry addresses (PAS lists):
 * size bytes, zeroed, page aligned; freed by tbrt_mlx5_dma_free or close. */
int tbrt_mlx5_dma_alloc(tbrt_mlx5 *dev, size_t size, void **virt, uint64_t *bus);
int tbrt_mlx5_dma_free(tbrt_mlx5 *dev, uint64_t bus);

int tbrt_mlx5_model_state_get(tbrt_mlx5 *dev, tbrt_mlx5_model_state *st);
/* The driver under an mlx5 verbs device; NULL for other kinds. */
tbrt_mlx5 *tbrt_mlx5_of_dev(tbrt_dev *dev);

/* ---- layout tables --------------------------------------------------------- */
/* Byte size of a layout ("create_qp_in"), or -1. */
int tbrt_mlx5_struct_size(const char *layout);
/* A field by path, e.g. ("query_hca_cap_out", "capability.cmd_hca_cap.log_max_qp"). */
int tbrt_mlx5_field_find(const char *layout, const char *path, tbrt_mlx5_field *f);
/* The i-th field of a layout (name order); -1 past the end. */
int tbrt_mlx5_field_at(const char *layout, int i, tbrt_mlx5_field *f);
int tbrt_mlx5_opcode(const char *name);
const char *tbrt_mlx5_opcode_name(uint32_t opcode);
/* "query_hca_cap_in" for an opcode (output: "_out"); NULL when not covered. */
const char *tbrt_mlx5_cmd_layout(uint32_t opcode, int output);
/* Constants of constants.tsv: by name, and name/meaning by group and value. */
int tbrt_mlx5_const(const char *name, uint32_t *value);
const char *tbrt_mlx5_const_name(const char *group, uint32_t value);
const char *tbrt_mlx5_const_meaning(const char *group, uint32_t value);

/* Field access in a buffer (PRM bit numbering, big-endian). Up to 32 bits: */
uint32_t tbrt_mlx5_get(const void *buf, uint32_t off, uint32_t width);
void tbrt_mlx5_set(void *buf, uint32_t off, uint32_t width, uint32_t value);
/* Any width, as ceil(width/8) big-endian bytes, right-aligned: */
void tbrt_mlx5_get_bytes(const void *buf, uint32_t off, uint32_t width, void *out);
void tbrt_mlx5_set_bytes(void *buf, uint32_t off, uint32_t width, const void *in);

/* tbrt:cdef end */

#ifdef __cplusplus
}
#endif
#endif /* TBRT_MLX5_H */
