/* cmdq.c - the mlx5 command queue, driver side: set up from the init
 * segment, entries with mailbox chains (512-byte blocks, 1 KiB aligned, next
 * pointers, block numbers, tokens), signatures, ownership, doorbell, a
 * bounded wait, delivery and command status turned into readable errors, and
 * the trace in Linux mlx5_core's dump format (cmd-layout.md, section 8). */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mlx5/cmdif.h"
#include "mlx5/hca.h"
#include "util/util.h"

enum {
    SPIN_NS = 20000,             /* busy-poll this long before sleeping */
    SLEEP_NS = 20000,
    INIT_WAIT_MS = 5000,         /* bound for "initializing" to clear */
    MAX_CMDQ_ENTRIES = 32,       /* MLX5_MAX_COMMANDS */
};

int hca_fail(struct mlx5_hca *h, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->why, sizeof h->why, fmt, ap);
    va_end(ap);
    return -err;
}

const char *cmd_name(uint32_t opcode)
{
    const char *n = ifc_opcode_name(opcode);
    return n ? n : "unknown command opcode";
}

/* ---- trace ------------------------------------------------------------------ */
static void dump_lines(FILE *f, const uint8_t *p, uint32_t len, uint32_t base)
{
    for (uint32_t off = 0; off < len; off += 16) {
        fprintf(f, "%03x:", base + off);
        for (int w = 0; w < 4; w++)
            fprintf(f, " %08x", ld_be32(p + off + 4 * w));
        fputc('\n', f);
    }
}

static void dump(struct mlx5_hca *h, const uint8_t *entry, uint8_t **blocks, uint32_t nblocks,
                 uint32_t opcode, const char *dir)
{
    FILE *f = h->trace;
    fprintf(f, "mlx5_core %s: dump command %s(0x%x) %s\n", h->pci->addr, cmd_name(opcode), opcode, dir);
    dump_lines(f, entry, CMD_ENTRY_SIZE, 0);
    fputc('\n', f);
    for (uint32_t k = 0; k < nblocks; k++) {
        fprintf(f, "mlx5_core %s: command block:\n", h->pci->addr);
        dump_lines(f, blocks[k], MBOX_SIZE, CMD_ENTRY_SIZE + k * MBOX_SIZE);
        fputc('\n', f);
    }
    fflush(f);
}

/* ---- setup ------------------------------------------------------------------ */
static int wait_initializing(struct mlx5_hca *h)
{
    double end = now_s() + INIT_WAIT_MS / 1000.0;
    while (h->pci->ops->read32(h->pci, INIT_INITIALIZING) >> INIT_INITIALIZING_BIT & 1) {
        if (now_s() > end)
            return hca_fail(h, ETIMEDOUT, "mlx5 %s: firmware still initializing after %d ms",
                            h->pci->addr, INIT_WAIT_MS);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static int mbox_reserve(struct mlx5_hca *h, uint32_t blocks)
{
    if (blocks <= h->mbox_blocks)
        return 0;
    struct mlx5_dma d;
    int rc = h->pci->ops->dma_alloc(h->pci, (size_t)blocks * MBOX_ALIGN, MBOX_ALIGN, &d);
    if (rc < 0)
        return hca_fail(h, -rc, "mlx5 %s: cannot allocate %u mailbox blocks", h->pci->addr, blocks);
    if (h->mbox.virt)
        h->pci->ops->dma_free(h->pci, &h->mbox);
    h->mbox = d;
    h->mbox_blocks = blocks;
    return 0;
}

int cmdq_init(struct mlx5_hca *h)
{
    struct mlx5_pci *p = h->pci;
    uint32_t rev = p->ops->read32(p, INIT_CMDIF_REV_FW_SUB) >> 16;
    if (rev != 5)
        return hca_fail(h, EPROTO, "mlx5 %s: command interface revision %u, need 5 (CMD_IF_REV)",
                        p->addr, rev);
    int rc = wait_initializing(h);
    if (rc < 0)
        return rc;
    uint32_t lsz = p->ops->read32(p, INIT_CMDQ_ADDR_L_SZ);
    h->log_stride = (int)(lsz & 0xf);
    h->log_size = (int)(lsz >> 4 & 0xf);
    if ((1 << h->log_size) > MAX_CMDQ_ENTRIES || h->log_size + h->log_stride > 12 ||
        (1 << h->log_stride) < CMD_ENTRY_SIZE)
        return hca_fail(h, EPROTO, "mlx5 %s: command queue of %d entries of %d bytes is not usable",
                        p->addr, 1 << h->log_size, 1 << h->log_stride);
    h->max_reg = (1 << h->log_size) - 1;
    rc = p->ops->dma_alloc(p, HCA_PAGE, HCA_PAGE, &h->cmdq);
    if (rc < 0)
        return hca_fail(h, -rc, "mlx5 %s: cannot allocate the command queue page", p->addr);
    if ((rc = mbox_reserve(h, 16)) < 0)
        return rc;
    p->ops->write32(p, INIT_CMDQ_ADDR_H, (uint32_t)(h->cmdq.bus >> 32));
    p->ops->write32(p, INIT_CMDQ_ADDR_L_SZ, (uint32_t)h->cmdq.bus & ~0xfffu);
    return wait_initializing(h);
}

void cmdq_fini(struct mlx5_hca *h)
{
    if (h->cmdq_hung) {
        /* the device may still answer into them: they stay mapped, as
         * firmware pages it never gave back do (bringup.c) */
        memset(&h->mbox, 0, sizeof h->mbox);
        memset(&h->cmdq, 0, sizeof h->cmdq);
        h->mbox_blocks = 0;
        return;
    }
    if (h->mbox.virt)
        h->pci->ops->dma_free(h->pci, &h->mbox);
    if (h->cmdq.virt)
        h->pci->ops->dma_free(h->pci, &h->cmdq);
    h->mbox_blocks = 0;
}

/* ---- one command ------------------------------------------------------------ */
static uint32_t nblocks(uint32_t len)
{
    return len > CMD_INLINE ? (len - CMD_INLINE + MBOX_DATA_SIZE - 1) / MBOX_DATA_SIZE : 0;
}

static void chain(struct mlx5_hca *h, uint8_t **blk, uint64_t *bus, uint32_t first, uint32_t n,
                  const uint8_t *data, uint32_t len)
{
    for (uint32_t k = 0; k < n; k++) {
        uint8_t *b = (uint8_t *)h->mbox.virt + (size_t)(first + k) * MBOX_ALIGN;
        memset(b, 0, MBOX_SIZE);
        if (data) {
            uint32_t off = CMD_INLINE + k * MBOX_DATA_SIZE;
            memcpy(b, data + off, TBRT_MIN((uint32_t)MBOX_DATA_SIZE, len - off));
        }
        uint64_t next = k + 1 < n ? h->mbox.bus + (uint64_t)(first + k + 1) * MBOX_ALIGN : 0;
        st_be64(b + MBOX_NEXT, next);
        st_be32(b + MBOX_BLOCK_NUM, k);
        b[MBOX_TOKEN] = h->token;
        if (h->checksums) {
            b[MBOX_CTRL_SIG] = (uint8_t)~xor8(b + MBOX_CTRL, MBOX_CTRL_SIG - MBOX_CTRL);
            b[MBOX_SIG] = (uint8_t)~xor8(b, MBOX_SIG);
        }
        blk[k] = b;
    }
    *bus = n ? h->mbox.bus + (uint64_t)first * MBOX_ALIGN : 0;
}

static const char *delivery_text(uint32_t ds)
{
    const char *m = ifc_const_meaning("delivery", ds);
    return m ? m : "unknown delivery status";
}

static int wait_owner(struct mlx5_hca *h, volatile uint8_t *status_own)
{
    double t0 = now_s(), end = t0 + h->timeout_ms / 1000.0;
    while (__atomic_load_n(status_own, __ATOMIC_ACQUIRE) & CMD_OWNER_HW) {
        double t = now_s();
        if (t > end)
            return -ETIMEDOUT;
        if (t - t0 < SPIN_NS / 1e9) {
            sched_yield();
        } else {
            struct timespec ts = {0, SLEEP_NS};
            nanosleep(&ts, NULL);
        }
    }
    return 0;
}

static int exec_locked(struct mlx5_hca *h, const uint8_t *in, uint32_t inlen, uint8_t *out,
                       uint32_t outlen)
{
    uint32_t opcode = ld_be32(in) >> 16;
    const char *name = cmd_name(opcode);
    if (h->cmdq_hung)
        return hca_fail(h, EIO, "mlx5 %s: not sent: a command got no completion before, and "
                        "the device may still answer into the queue (it is out of use)", name);
    uint32_t nin = nblocks(inlen), nout = nblocks(outlen);
    int rc = mbox_reserve(h, nin + nout);
    if (rc < 0)
        return rc;
    uint8_t **blk = calloc(nin + nout + 1, sizeof *blk);
    if (!blk)
        return hca_fail(h, ENOMEM, "mlx5 %s: out of memory", name);
    if (++h->token == 0) /* tokens are never 0 */
        h->token = 1;
    uint64_t in_ptr, out_ptr;
    chain(h, blk, &in_ptr, 0, nin, in, inlen);
    chain(h, blk + nin, &out_ptr, nin, nout, NULL, 0);

    /* MANAGE_PAGES owns the last slot (the page queue), as in Linux. */
    int slot = opcode == MLX5OP_MANAGE_PAGES ? h->max_reg : 0;
    uint8_t *e = (uint8_t *)h->cmdq.virt + ((size_t)slot << h->log_stride);
    memset(e, 0, CMD_ENTRY_SIZE);
    e[CMDE_TYPE] = CMD_XPORT_PCI;
    st_be32(e + CMDE_INLEN, inlen);
    st_be64(e + CMDE_IN_PTR, in_ptr);
    memcpy(e + CMDE_IN, in, TBRT_MIN(inlen, (uint32_t)CMD_INLINE));
    st_be64(e + CMDE_OUT_PTR, out_ptr);
    st_be32(e + CMDE_OUTLEN, outlen);
    e[CMDE_TOKEN] = h->token;
    e[CMDE_STATUS_OWN] = CMD_OWNER_HW;

    int inject = h->inject;
    h->inject = INJECT_NONE;
    if (inject == INJECT_TOKEN && nin)
        blk[0][MBOX_TOKEN] ^= 0xff;
    if (inject == INJECT_BLOCK_NUM && nin)
        st_be32(blk[0] + MBOX_BLOCK_NUM, 7);
    if (inject == INJECT_TYPE)
        e[CMDE_TYPE] = 0;
    if (inject == INJECT_IN_PTR_ALIGN && nin)
        st_be64(e + CMDE_IN_PTR, in_ptr + 0x40);
    e[CMDE_SIG] = (uint8_t)~xor8(e, CMD_ENTRY_SIZE);
    if (inject == INJECT_SIGNATURE)
        e[CMDE_SIG] ^= 0x5a;

    if (h->trace) {
        dump(h, e, blk, nin, opcode, "INPUT");
        fprintf(h->trace, "mlx5_core %s: writing 0x%x to command doorbell\n", h->pci->addr, 1u << slot);
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (inject != INJECT_NO_DOORBELL)
        h->pci->ops->write32(h->pci, INIT_CMD_DBELL, 1u << slot);
    rc = wait_owner(h, &e[CMDE_STATUS_OWN]);
    if (rc < 0) {
        free(blk);
        if (inject == INJECT_NO_DOORBELL) {
            e[CMDE_STATUS_OWN] = 0; /* never rung: the slot is ours again */
            return hca_fail(h, ETIMEDOUT, "mlx5 %s: no completion within %d ms", name,
                            h->timeout_ms);
        }
        /* rung and silent: the device has the entry and may still answer
         * (Linux waits 60 s, then resets the function) */
        h->cmdq_hung = 1;
        return hca_fail(h, ETIMEDOUT, "mlx5 %s: no completion within %d ms; the command "
                        "queue takes no more commands", name, h->timeout_ms);
    }
    if (h->trace)
        dump(h, e, blk + nin, nout, opcode, "OUTPUT");
    /* the entry is device memory: read each byte that decides once */
    uint32_t ds = (uint32_t)(__atomic_load_n(&e[CMDE_STATUS_OWN], __ATOMIC_ACQUIRE) >> 1);
    h->last_delivery = ds;
    h->last_status = h->last_syndrome = 0;
    if (ds) {
        free(blk);
        return hca_fail(h, EIO, "mlx5 %s: delivery status %s (0x%x)", name, delivery_text(ds), ds);
    }
    memset(out, 0, outlen);
    memcpy(out, e + CMDE_OUT, TBRT_MIN(outlen, (uint32_t)CMD_INLINE));
    for (uint32_t k = 0; k < nout; k++) {
        uint32_t off = CMD_INLINE + k * MBOX_DATA_SIZE;
        memcpy(out + off, blk[nin + k], TBRT_MIN((uint32_t)MBOX_DATA_SIZE, outlen - off));
    }
    free(blk);
    h->last_status = out[0];
    h->last_syndrome = outlen >= 8 ? ld_be32(out + 4) : 0;
    if (h->last_status) {
        const char *sname = ifc_const_name("status", h->last_status);
        const char *mean = ifc_const_meaning("status", h->last_status);
        return hca_fail(h, EPROTO, "mlx5 %s: %s (%s 0x%x), syndrome 0x%x", name,
                        mean ? mean : "unknown status", sname ? sname : "?", h->last_status,
                        h->last_syndrome);
    }
    return 0;
}

int cmd_exec(struct mlx5_hca *h, const void *in, uint32_t inlen, void *out, uint32_t outlen)
{
    if (inlen < 8 || outlen < 8 || !in || !out)
        return hca_fail(h, EINVAL, "mlx5 command: input and output need at least 8 bytes");
    if (!h->cmdq.virt)
        return hca_fail(h, ENODEV, "mlx5 command: the command queue is not set up");
    pthread_mutex_lock(&h->cmd_lock);
    int rc = exec_locked(h, in, inlen, out, outlen);
    pthread_mutex_unlock(&h->cmd_lock);
    return rc;
}
