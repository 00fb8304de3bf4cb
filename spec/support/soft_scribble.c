/* soft_scribble.c - a test tool that plays a hostile (or broken) peer of the
 * soft device: it finds a queue pair in the fabric registry, maps the owning
 * process's context segment through /proc/<pid>/fd as a real peer does, and
 * writes one value into one field of the shared memory:
 *
 *   soft-scribble [--personality P] QPN FIELD VALUE
 *
 * FIELD names the place, in the layouts of the shared-memory wire (built from
 * the same header, core/soft/wire/shm/shm.h, so the two cannot drift):
 *   slot.<f>        the QPN's registry slot: qp_off ctx_fd pid qp_type
 *   ctx.<f>         the context header: magic version ctx_id
 *   qp.<f>          the QP's shared block: see qp_fields[]
 *   copy.<f>        its shared copy's job: claim done src_key dst_key src_addr dst_addr len
 *                   read
 *   rqe.<i>.<f>     receive slot i: seq num_sge total sge0.addr sge0.length sge0.lkey;
 *                   rqe.<i>.res.<f> its result line: seq byte_len status data_len
 *   swr.<i>.<f>     send slot i: num_sge total opcode send_flags sge0.length ...
 *   mr.<key>.<f>    the owner's MR table entry of key: addr length fd_off memfd access
 *   take-piece      not a field: wait up to VALUE ms for a shared copy's job in the
 *                   QP's block (shm_copy.c), take one piece of it and never finish it
 *   rewind-pieces   not a field: for VALUE ms, or until it did so REWINDS_ENOUGH times,
 *                   wind every shared copy's claim word in the QP's block back to its
 *                   first piece
 * VALUE is a number (C syntax, may be negative). Built into build/test/ by
 * core/soft/part.mk; used by spec/soft_hostile_spec.lua through soft_ends.lua. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "soft/wire/shm/shm.h"
#include "util/private_dir.h"

struct field {
    const char *name;
    size_t off, size;
};
#define F(type, member) {#member, offsetof(type, member), sizeof(((type *)0)->member)}
#define FN(name, type, member) {name, offsetof(type, member), sizeof(((type *)0)->member)}

static const struct field slot_fields[] = {
    F(struct shm_slot, qp_off), F(struct shm_slot, ctx_fd), F(struct shm_slot, pid),
    F(struct shm_slot, qp_type), {0}};
static const struct field ctx_fields[] = {
    F(struct shm_ctx_hdr, magic), F(struct shm_ctx_hdr, version),
    F(struct shm_ctx_hdr, ctx_id), {0}};
static const struct field qp_fields[] = {
    F(struct shm_qp_block, state), F(struct shm_qp_block, qpn),
    F(struct shm_qp_block, qp_type), F(struct shm_qp_block, rq_cap),
    F(struct shm_qp_block, sq_cap), F(struct shm_qp_block, recv_db),
    F(struct shm_qp_block, send_db), F(struct shm_qp_block, dest_qpn),
    F(struct shm_qp_block, min_rnr_timer), F(struct shm_qp_block, timeout),
    F(struct shm_qp_block, rnr_retry), F(struct shm_qp_block, mtu),
    F(struct shm_qp_block, port), F(struct shm_qp_block, rq_cons),
    F(struct shm_qp_block, sq_tail), F(struct shm_qp_block, sq_lock),
    F(struct shm_qp_block, sq_head), F(struct shm_qp_block, help_wanted), {0}};
static const struct field copy_fields[] = {
    F(struct shm_copy_job, claim), F(struct shm_copy_job, done),
    F(struct shm_copy_job, src_key), F(struct shm_copy_job, dst_key),
    F(struct shm_copy_job, src_addr), F(struct shm_copy_job, dst_addr),
    F(struct shm_copy_job, len), F(struct shm_copy_job, read), {0}};
static const struct field rqe_fields[] = {
    F(struct shm_rqe, seq), F(struct shm_rqe, num_sge), F(struct shm_rqe, total),
    FN("sge0.addr", struct shm_rqe, sge[0].addr),
    FN("sge0.length", struct shm_rqe, sge[0].length),
    FN("sge0.lkey", struct shm_rqe, sge[0].lkey), {0}};
/* rqe.<i>.res.<f>: receive slot i's result line */
static const struct field rres_fields[] = {
    F(struct shm_rres, seq), FN("byte_len", struct shm_rres, res.byte_len),
    FN("status", struct shm_rres, res.status), FN("data_len", struct shm_rres, res.data_len),
    {0}};
static const struct field swr_fields[] = {
    F(struct shm_swr, opcode), F(struct shm_swr, send_flags), F(struct shm_swr, num_sge),
    F(struct shm_swr, total), F(struct shm_swr, rkey), F(struct shm_swr, next_try_ns),
    F(struct shm_swr, first_try_ns), FN("sge0.addr", struct shm_swr, sge[0].addr),
    FN("sge0.length", struct shm_swr, sge[0].length),
    FN("sge0.lkey", struct shm_swr, sge[0].lkey),
    FN("res.status", struct shm_swr, res.status), {0}};
static const struct field mr_fields[] = {
    F(struct shm_mr_entry, key), F(struct shm_mr_entry, memfd),
    F(struct shm_mr_entry, access), F(struct shm_mr_entry, addr),
    F(struct shm_mr_entry, length), F(struct shm_mr_entry, fd_off), {0}};

static const struct field *find(const struct field *t, const char *name)
{
    for (; t->name; t++)
        if (strcmp(t->name, name) == 0)
            return t;
    fprintf(stderr, "soft-scribble: no field \"%s\"\n", name);
    exit(2);
}

static void put(void *base, const struct field *f, long long v)
{
    char *p = (char *)base + f->off;
    switch (f->size) {
    case 1: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    case 2: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); break; }
    case 4: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    default: { uint64_t x = (uint64_t)v; memcpy(p, &x, 8); break; }
    }
    __sync_synchronize();
}

static void die(const char *what)
{
    fprintf(stderr, "soft-scribble: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* The hostile targets of a shared copy (shm_copy.c), on its claim word:
 *   take   wait up to ms for a job, take one piece of it, never finish it;
 *   !take  for ms, wind every job's word back to its first piece; enough
 *          times, and it ends sooner (its spec sends until it ends: on a
 *          loaded machine a short window could pass with no send in it). */
#define REWINDS_ENOUGH 32
static int play_target(_Atomic uint64_t *claim, uint32_t qpn, bool take, long long ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long rewinds = 0;
    for (unsigned long spins = 0;; spins++) {
        if ((spins & 1023) == 1023) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
                break;
        }
        uint64_t w = atomic_load(claim);
        uint32_t gen = (uint32_t)(w >> 32), n = (uint32_t)(w >> 16) & 0xffff;
        uint32_t next = (uint32_t)(w & 0xffff);
        if (!gen || (take ? next >= n : next == 0))
            continue;
        if (!atomic_compare_exchange_strong(claim, &w, take ? w + 1 : w & ~0xffffull))
            continue;
        if (take) {
            printf("QP 0x%x: took piece %u of %u of job %u\n", qpn, next, n, gen);
            return 0;
        }
        if (++rewinds == REWINDS_ENOUGH)
            break;
    }
    if (take) {
        fprintf(stderr, "soft-scribble: no shared copy in QP 0x%x in %lld ms\n", qpn, ms);
        return 1;
    }
    printf("QP 0x%x: wound a shared copy back %lu times\n", qpn, rewinds);
    return 0;
}

int main(int argc, char **argv)
{
    const char *pers = "linux-rc";
    if (argc > 2 && strcmp(argv[1], "--personality") == 0) {
        pers = argv[2];
        argv += 2;
        argc -= 2;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: soft-scribble [--personality P] QPN FIELD VALUE\n");
        return 2;
    }
    uint32_t qpn = (uint32_t)strtoul(argv[1], NULL, 0);
    const char *field = argv[2];
    long long value = strtoll(argv[3], NULL, 0);

    char dir[256], path[512];
    if (private_dir_path(dir, sizeof dir))
        return 1;
    const char *fab = getenv("TBRT_SOFT_FABRIC");
    snprintf(path, sizeof path, "%s/%s-%s", dir, fab && *fab ? fab : "default", pers);
    int rfd = open(path, O_RDWR | O_CLOEXEC);
    if (rfd < 0)
        die(path);
    struct shm_registry *fh = mmap(NULL, sizeof *fh, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
    if (fh == MAP_FAILED)
        die("map registry");
    struct shm_slot *slot = &fh->slots[qpn & (SHM_SLOTS - 1)];
    if (slot->qpn != qpn) {
        fprintf(stderr, "soft-scribble: QPN 0x%x is not in %s\n", qpn, path);
        return 1;
    }
    if (strncmp(field, "slot.", 5) == 0) {
        put(slot, find(slot_fields, field + 5), value);
        printf("slot 0x%x %s = %lld\n", qpn, field + 5, value);
        return 0;
    }
    char ctxp[64];
    snprintf(ctxp, sizeof ctxp, "/proc/%d/fd/%d", (int)slot->pid, slot->ctx_fd);
    int cfd = open(ctxp, O_RDWR | O_CLOEXEC);
    if (cfd < 0)
        die(ctxp);
    char *ctx = mmap(NULL, SHM_CTX_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
    if (ctx == MAP_FAILED)
        die("map context");
    struct shm_qp_block *q = (struct shm_qp_block *)(ctx + slot->qp_off);
    char name[64];
    unsigned long idx = 0;
    struct shm_copy_job *copy =
        (struct shm_copy_job *)((char *)q + shm_copy_offset(q->rq_cap, q->sq_cap));
    if (strcmp(field, "take-piece") == 0 || strcmp(field, "rewind-pieces") == 0)
        return play_target(&copy->claim, qpn, field[0] == 't', value);
    if (strncmp(field, "ctx.", 4) == 0) {
        put(ctx, find(ctx_fields, field + 4), value);
    } else if (strncmp(field, "qp.", 3) == 0) {
        put(q, find(qp_fields, field + 3), value);
    } else if (strncmp(field, "copy.", 5) == 0) {
        put(copy, find(copy_fields, field + 5), value);
    } else if (sscanf(field, "rqe.%lu.%63s", &idx, name) == 2) {
        if (strncmp(name, "res.", 4) == 0)
            put(&shm_rres_of(q->rq, q->rq_cap)[idx % q->rq_cap], find(rres_fields, name + 4),
                value);
        else
            put(&q->rq[idx % q->rq_cap], find(rqe_fields, name), value);
    } else if (sscanf(field, "swr.%lu.%63s", &idx, name) == 2) {
        struct shm_swr *sq = (struct shm_swr *)((char *)q + shm_sq_offset(q->rq_cap));
        put(&sq[idx % q->sq_cap], find(swr_fields, name), value);
    } else if (sscanf(field, "mr.%li.%63s", (long *)&idx, name) == 2) {
        struct shm_mr_entry *t = (struct shm_mr_entry *)(ctx + SHM_CTX_MR_OFF);
        put(&t[(idx >> 8) % SHM_MR_MAX], find(mr_fields, name), value);
    } else {
        fprintf(stderr, "soft-scribble: field \"%s\" is not slot./ctx./qp./copy./rqe.I./swr.I./"
                "mr.K.\n", field);
        return 2;
    }
    printf("QP 0x%x (pid %d) %s = %lld\n", qpn, (int)slot->pid, field, value);
    return 0;
}
