/* case_compat.c - a program of 2006: the IBVERBS_1.0 versions of the verbs
 * (looked up with dlvsym, as the dynamic linker binds them for a binary
 * linked then), with 1.0 objects and the 1.0 data path through the 1.0
 * context's table. Two RC QPs move a message and an RDMA WRITE; the
 * completion channel gives the 1.0 CQ back; everything is torn down
 * through the 1.0 calls. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "../../../bindings/verbs/compat_1_0.h"
#include "abi_check.h"

static void *lib;

static void *v10(const char *name)
{
    void *f = dlvsym(lib, name, "IBVERBS_1.0");
    if (!f) {
        printf("FAIL compat.symbol: %s@IBVERBS_1.0 not found\n", name);
        exit(1);
    }
    return f;
}

#define F(ret, name, ...) ret (*name)(__VA_ARGS__) = (ret(*)(__VA_ARGS__))v10(#name)

int case_compat(void)
{
    lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
        die("libibverbs.so.1 not loaded");
    F(struct ibv_device_1_0 **, ibv_get_device_list, int *);
    F(void, ibv_free_device_list, struct ibv_device_1_0 **);
    F(const char *, ibv_get_device_name, struct ibv_device_1_0 *);
    F(__be64, ibv_get_device_guid, struct ibv_device_1_0 *);
    F(struct ibv_context_1_0 *, ibv_open_device, struct ibv_device_1_0 *);
    F(int, ibv_close_device, struct ibv_context_1_0 *);
    F(int, ibv_query_device, struct ibv_context_1_0 *, struct ibv_device_attr *);
    F(int, ibv_query_gid, struct ibv_context_1_0 *, uint8_t, int, union ibv_gid *);
    F(struct ibv_pd_1_0 *, ibv_alloc_pd, struct ibv_context_1_0 *);
    F(int, ibv_dealloc_pd, struct ibv_pd_1_0 *);
    /* verbs.h makes ibv_reg_mr a macro: another name for the 1.0 one */
    struct ibv_mr_1_0 *(*reg_mr_1_0)(struct ibv_pd_1_0 *, void *, size_t, int) =
        (struct ibv_mr_1_0 * (*)(struct ibv_pd_1_0 *, void *, size_t, int)) v10("ibv_reg_mr");
    F(int, ibv_dereg_mr, struct ibv_mr_1_0 *);
    F(struct ibv_cq_1_0 *, ibv_create_cq, struct ibv_context_1_0 *, int, void *,
      struct ibv_comp_channel *, int);
    F(int, ibv_destroy_cq, struct ibv_cq_1_0 *);
    F(int, ibv_get_cq_event, struct ibv_comp_channel *, struct ibv_cq_1_0 **, void **);
    F(void, ibv_ack_cq_events, struct ibv_cq_1_0 *, unsigned int);
    F(struct ibv_qp_1_0 *, ibv_create_qp, struct ibv_pd_1_0 *, struct ibv_qp_init_attr_1_0 *);
    F(int, ibv_modify_qp, struct ibv_qp_1_0 *, struct ibv_qp_attr *, int);
    F(int, ibv_query_qp, struct ibv_qp_1_0 *, struct ibv_qp_attr *, int,
      struct ibv_qp_init_attr_1_0 *);
    F(int, ibv_destroy_qp, struct ibv_qp_1_0 *);
    F(struct ibv_srq_1_0 *, ibv_create_srq, struct ibv_pd_1_0 *, struct ibv_srq_init_attr *);

    int n = 0;
    struct ibv_device_1_0 **list = ibv_get_device_list(&n);
    CHECK(list && n >= 1 && list[n] == NULL && !strcmp(ibv_get_device_name(list[0]), "softib0") &&
              ibv_get_device_guid(list[0]) != 0,
          "compat.device_list", "%d devices", n);
    struct ibv_context_1_0 *ctx = ibv_open_device(list[0]);
    CHECK(ctx && ctx->device == list[0] && ctx->real_context && ctx->ops.post_send &&
              ctx->ops.poll_cq,
          "compat.open_device", "context %p", (void *)ctx);
    if (!ctx)
        return 1;
    struct ibv_device_attr da;
    CHECK(ibv_query_device(ctx, &da) == 0 && da.phys_port_cnt >= 1, "compat.query_device", "no ports");
    int gi = loopback_gid(ctx->real_context);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, gi, &gid);
    struct ibv_pd_1_0 *pd = ibv_alloc_pd(ctx);
    static uint8_t buf[2][8192] __attribute__((aligned(4096)));
    struct ibv_mr_1_0 *mr[2];
    struct ibv_cq_1_0 *cq[2];
    struct ibv_qp_1_0 *qp[2];
    struct ibv_comp_channel *ch = ibv_create_comp_channel((struct ibv_context *)ctx);
    for (int i = 0; i < 2; i++) {
        mr[i] = reg_mr_1_0(pd, buf[i], sizeof buf[i],
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        cq[i] = ibv_create_cq(ctx, 16, &buf[i], i ? ch : NULL, 0);
        struct ibv_qp_init_attr_1_0 a = {.send_cq = cq[i], .recv_cq = cq[i],
                                         .cap = {.max_send_wr = 8, .max_recv_wr = 8,
                                                 .max_send_sge = 1, .max_recv_sge = 1},
                                         .qp_type = IBV_QPT_RC};
        qp[i] = ibv_create_qp(pd, &a);
    }
    CHECK(pd && mr[0] && mr[1] && cq[0] && cq[1] && qp[0] && qp[1] && mr[0]->lkey &&
              qp[1]->qp_num && qp[0]->send_cq == cq[0],
          "compat.objects", "pd %p qp %p", (void *)pd, (void *)qp[0]);
    for (int i = 0; i < 2; i++) {
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                                .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
        ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                     IBV_QP_ACCESS_FLAGS);
        a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
                                 .dest_qp_num = qp[1 - i]->qp_num, .max_dest_rd_atomic = 1,
                                 .min_rnr_timer = 1,
                                 .ah_attr = {.is_global = 1, .port_num = 1,
                                             .grh = {.dgid = gid, .sgid_index = (uint8_t)gi,
                                                     .hop_limit = 64}}};
        ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                     IBV_QP_MIN_RNR_TIMER);
        a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
                                 .rnr_retry = 7, .max_rd_atomic = 1};
        ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                                     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                     IBV_QP_MAX_QP_RD_ATOMIC);
    }
    CHECK(qp[0]->state == IBV_QPS_RTS && qp[1]->state == IBV_QPS_RTS, "compat.modify_qp",
          "states %d %d", qp[0]->state, qp[1]->state);
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr_1_0 qi;
    CHECK(ibv_query_qp(qp[0], &qa, IBV_QP_STATE, &qi) == 0 && qa.dest_qp_num == qp[1]->qp_num &&
              qi.send_cq == cq[0],
          "compat.query_qp", "dest %u", qa.dest_qp_num);

    /* the 1.0 data path: next-first work requests through ctx->ops */
    ctx->ops.req_notify_cq(cq[1], 0);
    struct ibv_sge rs = {(uintptr_t)buf[1], 64, mr[1]->lkey};
    struct ibv_recv_wr_1_0 rw = {.wr_id = 7, .sg_list = &rs, .num_sge = 1}, *rbad;
    int rc = ctx->ops.post_recv(qp[1], &rw, &rbad);
    memcpy(buf[0], "from 2006", 9);
    memcpy(buf[0] + 100, "written", 7);
    struct ibv_sge s1 = {(uintptr_t)buf[0], 9, mr[0]->lkey};
    struct ibv_sge s2 = {(uintptr_t)buf[0] + 100, 7, mr[0]->lkey};
    struct ibv_send_wr_1_0 w2 = {.wr_id = 2, .sg_list = &s2, .num_sge = 1,
                                 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                                 .wr.rdma = {(uintptr_t)buf[1] + 4096, mr[1]->rkey}};
    struct ibv_send_wr_1_0 w1 = {.next = &w2, .wr_id = 1, .sg_list = &s1, .num_sge = 1,
                                 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *sbad;
    rc |= ctx->ops.post_send(qp[0], &w1, &sbad);
    CHECK(rc == 0, "compat.post", "%d", rc);
    struct ibv_cq_1_0 *evcq = NULL;
    void *evctx = NULL;
    int ev = ibv_get_cq_event(ch, &evcq, &evctx);
    CHECK(ev == 0 && evcq == cq[1] && evctx == &buf[1], "compat.cq_event", "cq %p ctx %p",
          (void *)evcq, evctx);
    if (ev == 0)
        ibv_ack_cq_events(evcq, 1);
    struct ibv_wc wc;
    int got = 0;
    for (int tries = 0; tries < 1000000 && !got; tries++)
        got = ctx->ops.poll_cq(cq[1], 1, &wc);
    CHECK(got == 1 && wc.wr_id == 7 && wc.byte_len == 9 && !memcmp(buf[1], "from 2006", 9),
          "compat.recv", "got %d wr_id %llu", got, got ? (unsigned long long)wc.wr_id : 0);
    int sends = 0;
    for (int tries = 0; tries < 1000000 && sends < 2; tries++) {
        got = ctx->ops.poll_cq(cq[0], 1, &wc);
        sends += got == 1 && wc.status == IBV_WC_SUCCESS;
    }
    CHECK(sends == 2 && !memcmp(buf[1] + 4096, "written", 7), "compat.send_and_write",
          "%d send completions", sends);
    errno = 0;
    struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
    CHECK(!ibv_create_srq(pd, &sa) && errno == EOPNOTSUPP, "compat.srq_refused", "errno %d", errno);

    int down = 0;
    for (int i = 0; i < 2; i++) {
        down |= ibv_destroy_qp(qp[i]);
        down |= ibv_dereg_mr(mr[i]);
        down |= ibv_destroy_cq(cq[i]);
    }
    down |= ibv_destroy_comp_channel(ch);
    down |= ibv_dealloc_pd(pd);
    down |= ibv_close_device(ctx);
    ibv_free_device_list(list);
    CHECK(down == 0, "compat.teardown", "a 1.0 destroy failed");
    return 0;
}
