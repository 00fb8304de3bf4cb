/* abi_check.c - a verbs program of our own, built against Debian's
 * rdma-core headers and libibverbs.so like any user's, and run on tbrt's
 * libibverbs through `tbrt exec` by spec/verbs_abi_spec.lua. It drives what
 * Debian's tools do not: the extended CQ and QP APIs on every operation the
 * device has, ibv_query_qp, address handles from a completion, P_Keys,
 * calls from several threads on one context, every unsupported entry, the
 * IBVERBS_1.0 ABI, and shared receive queues with their async events.
 *
 *   abi_check ex | query | threads | unsupported | compat | srq
 *
 * Each check prints "ok NAME" or "FAIL NAME: why" (so a run shows all of
 * them); the exit status is 0 when none failed. */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi_check.h"

static int failures;

void check(int ok, const char *name, const char *fmt, ...)
{
    if (ok) {
        printf("ok %s\n", name);
    } else {
        va_list ap;
        va_start(ap, fmt);
        printf("FAIL %s: ", name);
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
        failures++;
    }
    fflush(stdout);
}

int die(const char *what)
{
    printf("FAIL setup: %s: %s\n", what, strerror(errno));
    exit(2);
}

struct ibv_context *open_first(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n < 1)
        die("ibv_get_device_list");
    struct ibv_context *ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    if (!ctx)
        die("ibv_open_device");
    return ctx;
}

int loopback_gid(struct ibv_context *ctx)
{
    static const uint8_t lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
    struct ibv_port_attr pa;
    if (ibv_query_port(ctx, 1, &pa))
        return -1;
    int any = -1;
    for (int i = 0; i < pa.gid_tbl_len; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(ctx, 1, (uint32_t)i, &e, 0) || memcmp(e.gid.raw, lo, 16))
            continue;
        if (e.gid_type == IBV_GID_TYPE_ROCE_V2)
            return i;
        if (any < 0)
            any = i;
    }
    return any;
}

int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n == 1)
            return 1;
        if (n < 0)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec >= 2)
            return 0;
    }
}

static struct ibv_cq *make_cq(struct ibv_context *ctx, uint64_t ex_flags)
{
    if (!ex_flags)
        return ibv_create_cq(ctx, 256, NULL, NULL, 0);
    struct ibv_cq_init_attr_ex a = {.cqe = 256, .wc_flags = ex_flags};
    struct ibv_cq_ex *x = ibv_create_cq_ex(ctx, &a);
    return x ? ibv_cq_ex_to_cq(x) : NULL;
}

int qp_to_rts(struct ibv_context *ctx, struct ibv_qp *qp, enum ibv_qp_type type, uint32_t dest_qpn,
              int gid_index, uint32_t rq_psn, uint32_t sq_psn)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1};
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (type == IBV_QPT_UD) {
        a.qkey = 0x11111111;
        mask |= IBV_QP_QKEY;
    } else {
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        mask |= IBV_QP_ACCESS_FLAGS;
    }
    if (ibv_modify_qp(qp, &a, mask))
        die("INIT");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    mask = IBV_QP_STATE;
    if (type != IBV_QPT_UD) {
        struct ibv_gid_entry e;
        ibv_query_gid_ex(ctx, 1, (uint32_t)gid_index, &e, 0);
        a.path_mtu = IBV_MTU_4096;
        a.dest_qp_num = dest_qpn;
        a.rq_psn = rq_psn;
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = e.gid;
        a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.port_num = 1;
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        if (type == IBV_QPT_RC) {
            a.max_dest_rd_atomic = 4;
            a.min_rnr_timer = 1;
            mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
    }
    if (ibv_modify_qp(qp, &a, mask))
        die("RTR");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = sq_psn;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (type == IBV_QPT_RC) {
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 4;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    if (ibv_modify_qp(qp, &a, mask))
        die("RTS");
    return 0;
}

int pair_open(struct pair *p, enum ibv_qp_type type, uint64_t send_ops, uint64_t cq_ex_flags)
{
    memset(p, 0, sizeof *p);
    p->ctx = open_first();
    p->pd = ibv_alloc_pd(p->ctx);
    if (!p->pd)
        die("ibv_alloc_pd");
    p->gid_index = loopback_gid(p->ctx);
    if (p->gid_index < 0)
        die("no ::ffff:127.0.0.1 GID");
    for (int i = 0; i < 2; i++) {
        p->cq[i] = make_cq(p->ctx, cq_ex_flags);
        if (!p->cq[i])
            die("create cq");
        struct ibv_qp_init_attr_ex a = {
            .send_cq = p->cq[i], .recv_cq = p->cq[i], .qp_type = type,
            .cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 2, .max_recv_sge = 2,
                    .max_inline_data = 64},
            .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = p->pd};
        if (send_ops) {
            a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
            a.send_ops_flags = send_ops;
        }
        p->qp[i] = ibv_create_qp_ex(p->ctx, &a);
        if (!p->qp[i])
            die("create qp");
        p->buf[i] = aligned_alloc(4096, PAIR_BUF);
        memset(p->buf[i], 0, PAIR_BUF);
        p->mr[i] = ibv_reg_mr(p->pd, p->buf[i], PAIR_BUF,
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                  IBV_ACCESS_REMOTE_READ);
        if (!p->mr[i])
            die("ibv_reg_mr");
    }
    for (int i = 0; i < 2; i++)
        qp_to_rts(p->ctx, p->qp[i], type, p->qp[1 - i]->qp_num, p->gid_index,
                  100 + (uint32_t)(1 - i), 100 + (uint32_t)i);
    return 0;
}

void pair_close(struct pair *p)
{
    for (int i = 0; i < 2; i++) {
        ibv_destroy_qp(p->qp[i]);
        ibv_dereg_mr(p->mr[i]);
        ibv_destroy_cq(p->cq[i]);
        free(p->buf[i]);
    }
    ibv_dealloc_pd(p->pd);
    ibv_close_device(p->ctx);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: abi_check ex|query|threads|unsupported|compat|srq\n");
        return 2;
    }
    const char *m = argv[1];
    if (!strcmp(m, "ex"))
        case_ex();
    else if (!strcmp(m, "query"))
        case_query();
    else if (!strcmp(m, "threads"))
        case_threads();
    else if (!strcmp(m, "unsupported"))
        case_unsupported();
    else if (!strcmp(m, "compat"))
        case_compat();
    else if (!strcmp(m, "srq"))
        case_srq();
    else {
        fprintf(stderr, "abi_check: unknown case %s\n", m);
        return 2;
    }
    return failures ? 1 : 0;
}
