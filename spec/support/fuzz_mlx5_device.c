/* fuzz_mlx5_device.c - libFuzzer target: a hostile device under the mlx5
 * driver. Two verbs devices "mlx5:model0" (each its own device model) are
 * opened, given a PD, a CQ, an RC QP and a registered buffer, connected to
 * each other, made to move a SEND and a WRITE, and closed; the input says
 * which of the device's answers to falsify on the way: the output of any
 * firmware command (its 16 inline bytes, its delivery status, the data of
 * its output mailboxes), any read of a BAR0 register (the init segment:
 * revisions, "initializing", health) and any CQE. The model answers every
 * command truthfully; the falsification is applied after it completed and
 * before the driver looks (the doorbell's write returns only then), so the
 * driver sees one consistent, lying device. CQEs are falsified by the model
 * itself as it writes them (model_cqe_lie), before their ownership passes.
 *
 * Whatever the device says, the driver may not crash, read or write outside
 * what it owns (ASan), hang (every wait is bounded: libFuzzer's -timeout),
 * leak (LeakSanitizer), fail a call without saying why (an empty
 * tbrt_dev_why or error text), or report a completion with a status the
 * verbs API has not. Everything is made afresh for each input, so an input
 * replays alone.
 *
 * The driver is not changed for this: the program is linked with
 * -Wl,--wrap=pci_model_open, so the driver's own call to open its model
 * gets the model wrapped in the hostile PCI function below, and with
 * -Wl,--wrap=cmdq_init, to cut the driver's wait for a command from 10 s to
 * 0.5 s (the model answers in microseconds): a lie that leaves the driver
 * waiting (a command queue stride that is not the device's) costs an input
 * half a second, not ten.
 *
 *   make fuzz                       build-fuzz/fuzz-mlx5-device
 *   build-fuzz/fuzz-mlx5-device -runs=N -seed=S [CORPUS_DIR]
 *
 * Input: records, each [kind:1] and what that kind takes:
 *   kind % 4 == 0  a command's answer: [seq:1][where:1][off:1][len:1][bytes:len]
 *                  XORed into command number seq (counted from 0 over both
 *                  devices, in the order the driver rings them) where % 3 says:
 *                  0 its inline output (off % 16), 1 its delivery status
 *                  (bytes[0] & 0xfe: the ownership bit is the device's
 *                  handover, not an answer), 2 the data of output mailbox
 *                  (where / 3) % 8 (off * 2 % 512)
 *   kind % 4 == 1  a register read: [index:2, little-endian][xor:4]: the
 *                  driver's read number index (counted from 0) of BAR0 is
 *                  XORed
 *   kind % 4 == 2  a CQE: [device:1][n:1][off:1][xor:1]: CQE number n that
 *                  device device % 2 (a, b) writes has byte off % 64 XORed
 *                  (63: op_own, the opcode and the owner bit)
 *   otherwise      skipped (room for more kinds)
 * FUZZ_VERBOSE=1 prints every command (seq, opcode, what was falsified),
 * each step's outcome and each completion. */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "tbrt.h"
#include "fuzz_common.h"
#include "mlx5/cmdif.h"
#include "mlx5/hca.h"
#include "mlx5/model/model.h"
#include "mlx5/pci.h"

#define MAX_PATCHES 64
#define MAX_DMA 256             /* DMA regions a device's wrapper keeps track of */
#define BUF 16384               /* each side's registered buffer */
#define SEND_LEN 1000
#define WRITE_OFF 8192
#define WRITE_LEN 3000
#define POLLS 20000             /* a bound on looking for completions */

struct patch {
    uint8_t kind;               /* 0: command answer, 1: register read */
    uint8_t seq, where, off, len;
    uint16_t index;
    uint8_t bytes[255];
};

static struct patch patches[MAX_PATCHES];
static int npatches;
static uint32_t cmd_seq, reg_reads;    /* over both devices, this input */
static int models_opened;              /* this input: 0 a, 1 b */
static bool verbose;

/* ---- the hostile PCI function ----------------------------------------------------- */

struct hostile {
    struct mlx5_pci pci;        /* first: the driver holds this */
    struct mlx5_pci *inner;     /* the model */
    struct mlx5_dma dma[MAX_DMA];
    int ndma;
    uint32_t cmdq_h, cmdq_l;
};

static struct hostile *HP(struct mlx5_pci *p) { return (struct hostile *)p; }

/* The CPU's view of n bytes at bus address bus, or NULL when no region
 * of this device's holds them all. */
static uint8_t *virt_of(struct hostile *h, uint64_t bus, size_t n)
{
    for (int i = 0; i < h->ndma; i++) {
        struct mlx5_dma *d = &h->dma[i];
        if (d->virt && bus >= d->bus && bus - d->bus <= d->size && n <= d->size - (bus - d->bus))
            return (uint8_t *)d->virt + (bus - d->bus);
    }
    return NULL;
}

static void remember(struct hostile *h, const struct mlx5_dma *d)
{
    for (int i = 0; i < h->ndma; i++)
        if (!h->dma[i].virt) {
            h->dma[i] = *d;
            return;
        }
    if (h->ndma < MAX_DMA)
        h->dma[h->ndma++] = *d;
}

static void forget(struct hostile *h, const struct mlx5_dma *d)
{
    for (int i = 0; i < h->ndma; i++)
        if (h->dma[i].virt == d->virt && h->dma[i].bus == d->bus)
            memset(&h->dma[i], 0, sizeof h->dma[i]);
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

static uint32_t h_read32(struct mlx5_pci *p, uint32_t off)
{
    uint32_t v = HP(p)->inner->ops->read32(HP(p)->inner, off), n = reg_reads++;
    for (int i = 0; i < npatches; i++)
        if (patches[i].kind == 1 && patches[i].index == n) {
            uint32_t x;
            memcpy(&x, patches[i].bytes, 4);
            if (verbose)
                fprintf(stderr, "  read %u of BAR0 0x%x: 0x%08x ^ 0x%08x\n", n, off, v, x);
            v ^= x;
        }
    return v;
}

/* Command seq's answer, as the model left it in the entry e (and the
 * output mailboxes it points to), falsified as the input says. */
static void falsify(struct hostile *h, uint8_t *e, uint32_t seq)
{
    for (int i = 0; i < npatches; i++) {
        struct patch *pt = &patches[i];
        if (pt->kind != 0 || pt->seq != seq)
            continue;
        int where = pt->where % 3;
        if (where == 0) {
            for (int k = 0; k < pt->len; k++)
                e[CMDE_OUT + (pt->off + k) % CMD_INLINE] ^= pt->bytes[k];
        } else if (where == 1) {
            e[CMDE_STATUS_OWN] ^= pt->len ? pt->bytes[0] & 0xfe : 0;
        } else {
            /* the chain the driver made: its next pointers are its own */
            int block = (pt->where / 3) % 8;
            uint8_t *b = virt_of(h, be64(e + CMDE_OUT_PTR), MBOX_SIZE);
            for (int k = 0; k < block && b; k++)
                b = virt_of(h, be64(b + MBOX_NEXT), MBOX_SIZE);
            if (!b)
                continue;       /* the answer has no such block */
            for (int k = 0; k < pt->len; k++)
                b[(pt->off * 2 + k) % MBOX_DATA_SIZE] ^= pt->bytes[k];
        }
        if (verbose)
            fprintf(stderr, "  command %u: answer falsified (where %d, %u bytes)\n", seq,
                    pt->where, pt->len);
    }
}

static void h_write32(struct mlx5_pci *p, uint32_t off, uint32_t v)
{
    struct hostile *h = HP(p);
    if (off == INIT_CMDQ_ADDR_H)
        h->cmdq_h = v;
    if (off == INIT_CMDQ_ADDR_L_SZ)
        h->cmdq_l = v;
    h->inner->ops->write32(h->inner, off, v);
    if (off != INIT_CMD_DBELL)
        return;
    /* the entries rung: wait for the model's answers (bounded), then lie */
    uint32_t lsz = h->inner->ops->read32(h->inner, INIT_CMDQ_ADDR_L_SZ);
    uint64_t base = (uint64_t)h->cmdq_h << 32 | (h->cmdq_l & ~0xfffu);
    for (int slot = 0; slot < 32; slot++) {
        if (!(v & (1u << slot)))
            continue;
        uint8_t *e = virt_of(h, base + ((uint64_t)slot << (lsz & 0xf)), CMD_ENTRY_SIZE);
        uint32_t seq = cmd_seq++;
        if (!e)
            continue;
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (__atomic_load_n(&e[CMDE_STATUS_OWN], __ATOMIC_ACQUIRE) & CMD_OWNER_HW) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (t.tv_sec - t0.tv_sec > 2)
                break;          /* the driver's own wait says so */
            sched_yield();
        }
        if (verbose)
            fprintf(stderr, "  command %u: %s\n", seq, cmd_name(be32(e + CMDE_IN) >> 16));
        falsify(h, e, seq);
    }
}

static void h_write64(struct mlx5_pci *p, uint32_t off, const void *b)
{
    HP(p)->inner->ops->write64(HP(p)->inner, off, b);
}

static int h_dma_alloc(struct mlx5_pci *p, size_t size, size_t align, struct mlx5_dma *out)
{
    int rc = HP(p)->inner->ops->dma_alloc(HP(p)->inner, size, align, out);
    if (rc == 0)
        remember(HP(p), out);
    return rc;
}

static void h_dma_free(struct mlx5_pci *p, struct mlx5_dma *d)
{
    forget(HP(p), d);
    HP(p)->inner->ops->dma_free(HP(p)->inner, d);
}

static int h_dma_map(struct mlx5_pci *p, void *addr, size_t len, struct mlx5_dma *out)
{
    int rc = HP(p)->inner->ops->dma_map(HP(p)->inner, addr, len, out);
    if (rc == 0)
        remember(HP(p), out);
    return rc;
}

static void h_dma_unmap(struct mlx5_pci *p, struct mlx5_dma *d)
{
    forget(HP(p), d);
    HP(p)->inner->ops->dma_unmap(HP(p)->inner, d);
}

static int h_cfg_read(struct mlx5_pci *p, uint32_t off, void *buf, size_t len)
{
    return HP(p)->inner->ops->cfg_read(HP(p)->inner, off, buf, len);
}

static int h_cfg_write(struct mlx5_pci *p, uint32_t off, const void *buf, size_t len)
{
    return HP(p)->inner->ops->cfg_write(HP(p)->inner, off, buf, len);
}

static void h_rq_posted(struct mlx5_pci *p, uint32_t qpn)
{
    if (HP(p)->inner->ops->rq_posted)
        HP(p)->inner->ops->rq_posted(HP(p)->inner, qpn);
}

static int h_irq_fd(struct mlx5_pci *p, int vector)
{
    return HP(p)->inner->ops->irq_fd ? HP(p)->inner->ops->irq_fd(HP(p)->inner, vector) : -ENOSYS;
}

static void h_close(struct mlx5_pci *p)
{
    HP(p)->inner->ops->close(HP(p)->inner);
    free(p);
}

static const struct mlx5_pci_ops hostile_ops = {
    .kind = "hostile model",
    .read32 = h_read32,
    .write32 = h_write32,
    .write64 = h_write64,
    .dma_alloc = h_dma_alloc,
    .dma_free = h_dma_free,
    .dma_map = h_dma_map,
    .dma_unmap = h_dma_unmap,
    .cfg_read = h_cfg_read,
    .cfg_write = h_cfg_write,
    .rq_posted = h_rq_posted,
    .irq_fd = h_irq_fd,
    .close = h_close,
};

int __real_pci_model_open(const void *model_opts, struct mlx5_pci **out, char *err, size_t errlen);
int __wrap_pci_model_open(const void *model_opts, struct mlx5_pci **out, char *err, size_t errlen);

int __wrap_pci_model_open(const void *model_opts, struct mlx5_pci **out, char *err, size_t errlen)
{
    struct mlx5_pci *inner;
    int rc = __real_pci_model_open(model_opts, &inner, err, errlen);
    if (rc)
        return rc;
    struct hostile *h = calloc(1, sizeof *h);
    if (!h) {
        inner->ops->close(inner);
        snprintf(err, errlen, "fuzz: out of memory");
        return -ENOMEM;
    }
    h->pci.ops = &hostile_ops;
    memcpy(h->pci.addr, inner->addr, sizeof h->pci.addr);
    h->inner = inner;
    /* this device's lies about CQEs, told to its model before it writes any */
    int dev = models_opened++;
    for (int i = 0; i < npatches; i++)
        if (patches[i].kind == 2 && patches[i].where % 2 == dev) {
            bool set = model_cqe_lie(model_of_pci(inner), patches[i].seq, patches[i].off % 64,
                                     patches[i].bytes[0]);
            if (verbose && set)
                fprintf(stderr, "  %c: CQE %u will lie: byte %u ^ 0x%02x\n", 'a' + dev,
                        patches[i].seq, patches[i].off % 64, patches[i].bytes[0]);
        }
    *out = &h->pci;
    return 0;
}

int __real_cmdq_init(struct mlx5_hca *h);
int __wrap_cmdq_init(struct mlx5_hca *h);

int __wrap_cmdq_init(struct mlx5_hca *h)
{
    h->timeout_ms = 500;
    return __real_cmdq_init(h);
}

/* ---- the driver's work --------------------------------------------------------------- */

struct side {
    tbrt_dev *dev;
    tbrt_pd *pd;
    tbrt_cq *cq;
    tbrt_qp *qp;
    tbrt_mr *mr;
    int gid;
    uint8_t buf[BUF];
};

static struct side sides[2];

/* A call that failed must say why. */
static bool step(int rc, struct side *s, const char *what)
{
    if (verbose)
        fprintf(stderr, "  %c: %s: %s\n", 'a' + (int)(s - sides), what,
                rc ? tbrt_dev_why(s->dev) : "ok");
    if (rc && !tbrt_dev_why(s->dev)[0]) {
        fprintf(stderr, "fuzz-mlx5-device: %s failed (%d) and the device says nothing\n", what,
                rc);
        abort();
    }
    return rc == 0;
}

static bool make_side(struct side *s)
{
    char err[512] = "";
    int rc = tbrt_dev_open("mlx5:model0", NULL, &s->dev, err, sizeof err);
    if (verbose)
        fprintf(stderr, "  %c: open: %s\n", 'a' + (int)(s - sides), rc ? err : "ok");
    if (rc) {
        if (!err[0]) {
            fprintf(stderr, "fuzz-mlx5-device: open failed (%d) without a reason\n", rc);
            abort();
        }
        s->dev = NULL;
        return false;
    }
    s->gid = fuzz_loopback_gid(s->dev);
    if (!step(tbrt_pd_alloc(s->dev, &s->pd), s, "pd") ||
        !step(tbrt_cq_create(s->dev, 64, &s->cq), s, "cq"))
        return false;
    tbrt_qp_init qi = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
                       .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
                               .max_recv_sge = 1}};
    return step(tbrt_qp_create(s->pd, &qi, &s->qp), s, "qp") &&
           step(tbrt_mr_reg(s->pd, s->buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                            IBV_ACCESS_REMOTE_READ, &s->mr), s, "mr");
}

static bool connect_side(struct side *s, struct side *p)
{
    if (s->gid < 0)
        return false;           /* no loopback GID: the device lied about its table */
    const char *at;
    int rc = fuzz_qp_connect(s->qp, p->qp->qp_num, s->gid, 10, &at);
    step(rc, s, at);
    return rc == 0;
}

/* Completions until both sides have `want` (or the bound): how many came. */
static int reap(int want)
{
    int got = 0;
    for (int i = 0; i < POLLS && got < want; i++) {
        for (int k = 0; k < 2; k++) {
            struct ibv_wc wc[8];
            int n = tbrt_cq_poll(sides[k].cq, 8, wc);
            if (n < 0) {
                step(n, &sides[k], "poll");
                return got;
            }
            for (int j = 0; j < n; j++) {
                if (wc[j].status > IBV_WC_TM_RNDV_INCOMPLETE) {
                    fprintf(stderr, "fuzz-mlx5-device: completion status %d\n", wc[j].status);
                    abort();
                }
                if (verbose)
                    fprintf(stderr, "  %c: wc wr_id %llu status %d opcode %d len %u\n", 'a' + k,
                            (unsigned long long)wc[j].wr_id, wc[j].status, wc[j].opcode,
                            wc[j].byte_len);
            }
            got += n;
        }
        if (got < want)
            sched_yield();
    }
    return got;
}

static void traffic(void)
{
    struct side *a = &sides[0], *b = &sides[1];
    struct ibv_sge rs = {.addr = (uintptr_t)b->buf, .length = SEND_LEN, .lkey = b->mr->lkey};
    struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1};
    if (!step(tbrt_post_recv(b->qp, &rw, NULL), b, "post recv"))
        return;
    for (int i = 0; i < SEND_LEN; i++)
        a->buf[i] = (uint8_t)(i * 7 + 3);
    struct ibv_sge ss = {.addr = (uintptr_t)a->buf, .length = SEND_LEN, .lkey = a->mr->lkey};
    struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED};
    if (!step(tbrt_post_send(a->qp, &sw, NULL), a, "post send"))
        return;
    struct ibv_sge ws = {.addr = (uintptr_t)a->buf, .length = WRITE_LEN, .lkey = a->mr->lkey};
    struct ibv_send_wr ww = {.wr_id = 3, .sg_list = &ws, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
    ww.wr.rdma.remote_addr = (uintptr_t)b->buf + WRITE_OFF;
    ww.wr.rdma.rkey = b->mr->rkey;
    if (!step(tbrt_post_send(a->qp, &ww, NULL), a, "post write"))
        return;
    /* and back: b's SEND into a receive of a's */
    struct ibv_sge ra = {.addr = (uintptr_t)a->buf + WRITE_OFF, .length = SEND_LEN,
                         .lkey = a->mr->lkey};
    struct ibv_recv_wr rwa = {.wr_id = 4, .sg_list = &ra, .num_sge = 1};
    struct ibv_sge sb = {.addr = (uintptr_t)b->buf, .length = SEND_LEN, .lkey = b->mr->lkey};
    struct ibv_send_wr swb = {.wr_id = 5, .sg_list = &sb, .num_sge = 1, .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_SIGNALED};
    int want = 3;
    if (step(tbrt_post_recv(a->qp, &rwa, NULL), a, "post recv") &&
        step(tbrt_post_send(b->qp, &swb, NULL), b, "post send"))
        want = 5;
    int got = reap(want);
    if (verbose)
        fprintf(stderr, "  %d of %d completions\n", got, want);
}

/* Everything goes, whatever state the device left it in: a destroy that
 * fails is an answer too (the device says why), not a crash. */
static void teardown(void)
{
    for (int i = 0; i < 2; i++) {
        struct side *s = &sides[i];
        if (!s->dev)
            continue;
        if (s->qp)
            step(tbrt_qp_destroy(s->qp), s, "destroy qp");
        if (s->mr)
            step(tbrt_mr_dereg(s->mr), s, "dereg mr");
        if (s->cq)
            step(tbrt_cq_destroy(s->cq), s, "destroy cq");
        if (s->pd)
            step(tbrt_pd_free(s->pd), s, "free pd");
        tbrt_dev_close(s->dev);
    }
    memset(sides, 0, sizeof sides);
}

static void parse(const uint8_t *d, size_t n)
{
    npatches = 0;
    size_t i = 0;
    while (i < n && npatches < MAX_PATCHES) {
        uint8_t kind = d[i++] % 4;
        struct patch *pt = &patches[npatches];
        memset(pt, 0, sizeof *pt);
        if (kind == 0) {
            if (n - i < 4)
                break;
            pt->seq = d[i];
            pt->where = d[i + 1];
            pt->off = d[i + 2];
            pt->len = d[i + 3];
            i += 4;
            if (pt->len > n - i)
                pt->len = (uint8_t)(n - i);
            memcpy(pt->bytes, d + i, pt->len);
            i += pt->len;
        } else if (kind == 1) {
            if (n - i < 6)
                break;
            pt->index = (uint16_t)(d[i] | d[i + 1] << 8);
            memcpy(pt->bytes, d + i + 2, 4);
            i += 6;
        } else if (kind == 2) {
            if (n - i < 4)
                break;
            pt->where = d[i];           /* the device */
            pt->seq = d[i + 1];         /* the CQE's number */
            pt->off = d[i + 2];
            pt->bytes[0] = d[i + 3];
            i += 4;
        } else {
            continue;
        }
        pt->kind = kind;
        npatches++;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    verbose = getenv("FUZZ_VERBOSE") != NULL;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    parse(data, size);
    cmd_seq = reg_reads = 0;
    models_opened = 0;
    if (verbose)
        fprintf(stderr, "input: %zu bytes, %d falsifications\n", size, npatches);
    if (make_side(&sides[0]) && make_side(&sides[1]) && connect_side(&sides[0], &sides[1]) &&
        connect_side(&sides[1], &sides[0]))
        traffic();
    teardown();
    return 0;
}
