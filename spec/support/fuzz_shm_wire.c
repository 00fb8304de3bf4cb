/* fuzz_shm_wire.c - libFuzzer target: a hostile peer process against the
 * soft device's shared-memory wire. Two device contexts of this process
 * (each its own shared segment, as two processes have) hold RC queue pairs
 * a and b, connected; the input interleaves work (sends, WRITEs, READs both
 * ways, turns of both devices) with writes of its bytes into what a peer can
 * write: either QP's shared block (posted receives, results, indices,
 * locks, send slots, the shared copy's job), b's MR table (which a reads to
 * resolve b's keys) and b's context header. Whatever is written, neither
 * device may crash, read or write outside what it may (ASan), touch a byte
 * around the registered regions (guards, checked after every input), hang
 * (every wait is bounded: libFuzzer's -timeout), or make a completion with a
 * status the verbs API has not. Everything is set up afresh for each input
 * (both devices opened and closed), so an input replays alone.
 *
 *   make fuzz                       build-fuzz/fuzz-shm-wire
 *   build-fuzz/fuzz-shm-wire -runs=N -seed=S [CORPUS_DIR]
 *
 * Input: records, each [op:1] and what that op takes:
 *   op % 8 == 0  write [where:1][off:2, little-endian][len:1][bytes:len] into
 *                where % 4: a's block, b's block, b's MR table, b's header
 *                (off taken modulo the place's size)
 *   1            a posts a SEND of op's high bits x 64 bytes to b
 *   2            b posts a SEND to a
 *   3            a posts a WRITE into b's region (inline when it fits: the
 *                one that runs at post, shm_direct.c)
 *   4            a posts a READ of b's region
 *   5, 6, 7      a turn of a's device, of b's, of both
 * FUZZ_VERBOSE=1 prints each step. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "tbrt.h"
#include "fuzz_common.h"
#include "soft/wire/shm/shm.h"
#include "util/private_dir.h"

#define REGION 65536            /* each QP's registered buffer */
#define GUARD 4096              /* untouchable bytes either side of it */
#define DEPTH 16
#define INLINE 64               /* max_inline_data: WRITEs of 8 bytes go inline */
#define MR_ENTRIES 8            /* of b's MR table, from its start */

struct end {
    tbrt_dev *dev;
    tbrt_pd *pd;
    tbrt_cq *cq;
    tbrt_qp *qp;
    tbrt_mr *mr;
    uint8_t *mem;               /* GUARD + REGION + GUARD, for the whole run */
    char *ctx;                  /* its context segment, mapped as a peer maps it */
    struct shm_qp_block *blk;   /* its QP's shared block in there */
    size_t blk_bytes;
    uint32_t posted;            /* receives outstanding */
};

static struct end ends[2];
static int gid_index = -1;
static bool verbose;

static uint8_t *region(struct end *e) { return e->mem + GUARD; }

static void fail(const char *what, tbrt_dev *dev)
{
    fprintf(stderr, "fuzz-shm-wire: %s: %s\n", what, dev ? tbrt_dev_why(dev) : strerror(errno));
    abort();
}

static void guards_check(void)
{
    for (int i = 0; i < 2; i++) {
        const uint8_t *m = ends[i].mem;
        for (size_t k = 0; k < GUARD; k++)
            if (m[k] != 0xa5 || m[GUARD + REGION + k] != 0xa5) {
                fprintf(stderr, "fuzz-shm-wire: a byte around QP %c's region was written "
                        "(offset %zd from it)\n", 'a' + i,
                        m[k] != 0xa5 ? (ssize_t)k - GUARD : (ssize_t)(REGION + k));
                abort();
            }
    }
}

/* The QP's context segment and block, found as a peer finds them: its slot
 * in the fabric's registry, the owner's fd through /proc. */
static void map_block(struct end *e)
{
    char dir[256], path[512];
    if (private_dir_path(dir, sizeof dir))
        fail("private directory", NULL);
    const char *fab = getenv("TBRT_SOFT_FABRIC");
    snprintf(path, sizeof path, "%s/%s-linux-rc", dir, fab);
    int rfd = open(path, O_RDONLY | O_CLOEXEC);
    if (rfd < 0)
        fail(path, NULL);
    struct shm_registry *reg = mmap(NULL, sizeof *reg, PROT_READ, MAP_SHARED, rfd, 0);
    close(rfd);
    if (reg == MAP_FAILED)
        fail("map the registry", NULL);
    uint32_t qpn = e->qp->qp_num;
    struct shm_slot slot = reg->slots[qpn & (SHM_SLOTS - 1)];
    munmap(reg, sizeof *reg);
    if (slot.qpn != qpn || slot.pid != getpid())
        fail("QP not in the registry", NULL);
    char ctxp[64];
    snprintf(ctxp, sizeof ctxp, "/proc/self/fd/%d", slot.ctx_fd);
    int cfd = open(ctxp, O_RDWR | O_CLOEXEC);
    if (cfd < 0)
        fail(ctxp, NULL);
    e->ctx = mmap(NULL, SHM_CTX_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
    close(cfd);
    if (e->ctx == MAP_FAILED)
        fail("map the context", NULL);
    e->blk = (struct shm_qp_block *)(e->ctx + slot.qp_off);
    e->blk_bytes = shm_qp_bytes(e->blk->rq_cap, e->blk->sq_cap);
}

static void post_recvs(struct end *e)
{
    while (e->posted < DEPTH / 2) {
        uint32_t i = e->posted;
        struct ibv_sge sge = {.addr = (uintptr_t)region(e) + i * (REGION / DEPTH),
                              .length = REGION / DEPTH, .lkey = e->mr->lkey};
        struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1};
        if (tbrt_post_recv(e->qp, &wr, NULL))
            return;             /* in ERR, say: a refusal is an answer */
        e->posted++;
    }
}

static bool connect_pair(void)
{
    const char *at;
    for (int i = 0; i < 2; i++)
        if (fuzz_qp_connect(ends[i].qp, ends[1 - i].qp->qp_num, gid_index, 1, &at))
            return false;
    return true;
}

static void setup(void)
{
    for (int i = 0; i < 2; i++) {
        struct end *e = &ends[i];
        tbrt_dev_opts o = {.personality = "linux-rc", .wire = "shm"};
        char err[256];
        if (tbrt_dev_open("soft0", &o, &e->dev, err, sizeof err)) {
            fprintf(stderr, "fuzz-shm-wire: open soft0: %s\n", err);
            abort();
        }
        if (gid_index < 0 && (gid_index = fuzz_loopback_gid(e->dev)) < 0)
            fail("no GID ::ffff:127.0.0.1 on port 1", e->dev);
        if (tbrt_pd_alloc(e->dev, &e->pd) || tbrt_cq_create(e->dev, 256, &e->cq))
            fail("pd, cq", e->dev);
        tbrt_qp_init qi = {.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
                           .cap = {.max_send_wr = DEPTH, .max_recv_wr = DEPTH,
                                   .max_send_sge = 1, .max_recv_sge = 1,
                                   .max_inline_data = INLINE}};
        if (tbrt_qp_create(e->pd, &qi, &e->qp))
            fail("qp", e->dev);
        if (tbrt_mr_reg(e->pd, region(e), REGION, IBV_ACCESS_LOCAL_WRITE |
                        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &e->mr))
            fail("mr", e->dev);
        map_block(e);
        e->posted = 0;
    }
    if (!connect_pair())
        fail("connect", ends[0].dev);
    post_recvs(&ends[0]);
    post_recvs(&ends[1]);
}

/* Everything goes, whatever state the input left it in: a failure to
 * destroy is an answer too (the device says why), not a crash. */
static void teardown(void)
{
    for (int i = 0; i < 2; i++) {
        struct end *e = &ends[i];
        munmap(e->ctx, SHM_CTX_SIZE);
        tbrt_qp_destroy(e->qp);
        tbrt_mr_dereg(e->mr);
        tbrt_cq_destroy(e->cq);
        tbrt_pd_free(e->pd);
        tbrt_dev_close(e->dev);
    }
}

static void turn(struct end *e)
{
    struct ibv_wc wc[16];
    int n = tbrt_cq_poll(e->cq, 16, wc);
    for (int k = 0; k < n; k++) {
        if (wc[k].status > IBV_WC_TM_RNDV_INCOMPLETE) {
            fprintf(stderr, "fuzz-shm-wire: completion status %d\n", wc[k].status);
            abort();
        }
        if (wc[k].opcode & IBV_WC_RECV && e->posted)
            e->posted--;
        if (verbose)
            fprintf(stderr, "  QP %c: wc wr_id %llu status %d vendor_err 0x%x opcode %d len %u\n",
                    'a' + (int)(e - ends), (unsigned long long)wc[k].wr_id, wc[k].status,
                    wc[k].vendor_err, wc[k].opcode, wc[k].byte_len);
    }
    if (n < 0 && verbose)
        fprintf(stderr, "  QP %c: poll: %s\n", 'a' + (int)(e - ends), tbrt_dev_why(e->dev));
    post_recvs(e);
}

static void post(struct end *from, struct end *to, enum ibv_wr_opcode op, uint32_t len)
{
    struct ibv_sge sge = {.addr = (uintptr_t)region(from) + REGION / 2, .length = len,
                          .lkey = from->mr->lkey};
    bool inl = op == IBV_WR_RDMA_WRITE && len <= INLINE;
    struct ibv_send_wr wr = {.wr_id = 100 + op, .sg_list = &sge, .num_sge = 1, .opcode = op,
                             .send_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0)};
    wr.wr.rdma.remote_addr = (uintptr_t)region(to) + REGION / 4;
    wr.wr.rdma.rkey = to->mr->rkey;
    int rc = tbrt_post_send(from->qp, &wr, NULL);
    if (verbose)
        fprintf(stderr, "  QP %c: post op %d len %u: %s\n", 'a' + (int)(from - ends), op, len,
                rc ? tbrt_dev_why(from->dev) : "ok");
}

/* Where a write lands: the start and size of the place it names. */
static uint8_t *place(uint8_t where, size_t *size)
{
    struct end *b = &ends[1];
    switch (where % 4) {
    case 0: *size = ends[0].blk_bytes; return (uint8_t *)ends[0].blk;
    case 1: *size = b->blk_bytes; return (uint8_t *)b->blk;
    case 2: *size = MR_ENTRIES * sizeof(struct shm_mr_entry);
            return (uint8_t *)b->ctx + SHM_CTX_MR_OFF;
    default: *size = sizeof(struct shm_ctx_hdr); return (uint8_t *)b->ctx;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    verbose = getenv("FUZZ_VERBOSE") != NULL;
    setenv("TBRT_SOFT_FABRIC", "fuzz-shm", 0);
    for (int i = 0; i < 2; i++) {
        ends[i].mem = malloc(GUARD + REGION + GUARD);
        if (!ends[i].mem)
            fail("malloc", NULL);
        memset(ends[i].mem, 0xa5, GUARD + REGION + GUARD);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    struct end *a = &ends[0], *b = &ends[1];
    for (size_t off = 0; off < size;) {
        uint8_t op = data[off++];
        switch (op % 8) {
        case 0: {
            if (off + 4 > size)
                break;
            uint8_t where = data[off];
            size_t at = (size_t)data[off + 1] | (size_t)data[off + 2] << 8, len = data[off + 3];
            off += 4;
            if (len > size - off)
                len = size - off;
            size_t room;
            uint8_t *p = place(where, &room);
            at %= room;
            if (len > room - at)
                len = room - at;
            memcpy(p + at, data + off, len);
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            if (verbose)
                fprintf(stderr, "write %zu bytes at %zu of place %u\n", len, at, where % 4);
            off += len;
            break;
        }
        case 1: post(a, b, IBV_WR_SEND, 64u * (op >> 3)); break;
        case 2: post(b, a, IBV_WR_SEND, 64u * (op >> 3)); break;
        case 3: post(a, b, IBV_WR_RDMA_WRITE, 64u * (op >> 3) + 8); break;
        case 4: post(a, b, IBV_WR_RDMA_READ, 64u * (op >> 3) + 8); break;
        case 5: turn(a); break;
        case 6: turn(b); break;
        default: turn(a); turn(b); break;
        }
    }
    for (int i = 0; i < 4; i++) {
        turn(a);
        turn(b);
    }
    guards_check();
    teardown();
    return 0;
}
