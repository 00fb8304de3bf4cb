/* case_srq.c - shared receive queues through libibverbs' API and its
 * async events: ibv_create_srq / ibv_create_srq_ex, ibv_post_srq_recv (the
 * inline of verbs.h, through the context's ops), two RC QPs made with one
 * SRQ receiving from two senders (each completion naming its QP),
 * ibv_modify_srq arming the limit and IBV_EVENT_SRQ_LIMIT_REACHED read with
 * ibv_get_async_event after poll() on async_fd, ibv_query_srq showing it
 * disarmed, IBV_EVENT_QP_LAST_WQE_REACHED for a QP moved to ERR, and the
 * destroy order (the SRQ is busy while a QP uses it). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>

#include "abi_check.h"

/* The next async event within 2 s, the fd polled first as a program would. */
static int next_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
    struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
    if (poll(&p, 1, 2000) != 1)
        return -1;
    int fl = fcntl(ctx->async_fd, F_GETFL);
    fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
    int rc = ibv_get_async_event(ctx, ev);
    fcntl(ctx->async_fd, F_SETFL, fl);
    return rc;
}

int case_srq(void)
{
    struct ibv_context *ctx = open_first();
    struct ibv_device_attr da;
    CHECK(ibv_query_device(ctx, &da) == 0 && da.max_srq > 0 && da.max_srq_sge >= 1,
          "srq.device_has_them", "max_srq %d", da.max_srq);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    int gid = loopback_gid(ctx);
    struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}, .srq_context = &sa};
    struct ibv_srq *srq = ibv_create_srq(pd, &sa);
    CHECK(srq && srq->srq_context == &sa && sa.attr.max_wr >= 16, "srq.create", "%s",
          strerror(errno));
    struct ibv_srq_init_attr_ex sx = {.attr = {.max_wr = 4, .max_sge = 1},
                                      .comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE,
                                      .srq_type = IBV_SRQT_BASIC, .pd = pd};
    struct ibv_srq *srq2 = ibv_create_srq_ex(ctx, &sx);
    CHECK(srq2 != NULL, "srq.create_ex", "%s", strerror(errno));
    if (srq2)
        ibv_destroy_srq(srq2);
    if (!srq)
        return 0;

    struct ibv_cq *cq_a = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_cq *cq_b = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_qp *a[2], *b[2];
    for (int i = 0; i < 2; i++) {
        struct ibv_qp_init_attr qa = {.send_cq = cq_a, .recv_cq = cq_a, .qp_type = IBV_QPT_RC,
                                      .cap = {.max_send_wr = 16, .max_recv_wr = 1,
                                              .max_send_sge = 1, .max_recv_sge = 1}};
        a[i] = ibv_create_qp(pd, &qa);
        qa.send_cq = qa.recv_cq = cq_b;
        qa.srq = srq;
        b[i] = ibv_create_qp(pd, &qa);
        if (!a[i] || !b[i])
            die("ibv_create_qp");
        CHECK(b[i]->srq == srq, "srq.qp_has_it", "qp->srq %p", (void *)b[i]->srq);
    }
    for (int i = 0; i < 2; i++) {
        qp_to_rts(ctx, a[i], IBV_QPT_RC, b[i]->qp_num, gid, 0, 0);
        qp_to_rts(ctx, b[i], IBV_QPT_RC, a[i]->qp_num, gid, 0, 0);
    }
    static char buf[8192] __attribute__((aligned(4096)));
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    for (int k = 0; k < 4; k++) {
        struct ibv_sge s = {.addr = (uintptr_t)buf + 4096 + 256 * k, .length = 256,
                            .lkey = mr->lkey};
        struct ibv_recv_wr w = {.wr_id = 100 + k, .sg_list = &s, .num_sge = 1}, *bad;
        if (ibv_post_srq_recv(srq, &w, &bad))
            die("ibv_post_srq_recv");
    }
    struct ibv_recv_wr rw = {0}, *bad;
    errno = 0;
    CHECK(ibv_post_recv(b[0], &rw, &bad) == EINVAL, "srq.qp_post_recv_refused", "no EINVAL");

    struct ibv_srq_attr lim = {.srq_limit = 3};
    CHECK(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == 0, "srq.arm_limit", "%s", strerror(errno));
    /* b1 then b0 then b1 receive: SRQ order, each completion naming its QP */
    uint32_t qpn[3];
    int from[3] = {1, 0, 1};
    for (int k = 0; k < 3; k++) {
        memcpy(buf + 64 * k, "srq-msg", 8);
        struct ibv_sge s = {.addr = (uintptr_t)buf + 64 * k, .length = 8, .lkey = mr->lkey};
        struct ibv_send_wr w = {.wr_id = k, .sg_list = &s, .num_sge = 1,
                                .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *sbad;
        if (ibv_post_send(a[from[k]], &w, &sbad))
            die("ibv_post_send");
        struct ibv_wc wc;
        if (!poll_one(cq_b, &wc))
            die("no receive completion");
        qpn[k] = wc.qp_num;
        CHECK(wc.wr_id == (uint64_t)(100 + k) && wc.status == IBV_WC_SUCCESS &&
                  wc.byte_len == 8 && wc.qp_num == b[from[k]]->qp_num,
              k == 0 ? "srq.recv_0" : k == 1 ? "srq.recv_1" : "srq.recv_2",
              "wr_id %llu status %d qp 0x%x (want 0x%x)", (unsigned long long)wc.wr_id,
              wc.status, wc.qp_num, b[from[k]]->qp_num);
        poll_one(cq_a, &wc);
    }
    (void)qpn;
    /* one receive left, limit 3: the event came when the second was taken */
    struct ibv_async_event ev;
    int rc = next_event(ctx, &ev);
    CHECK(rc == 0 && ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
          "srq.limit_event", "rc %d type %d", rc, rc == 0 ? (int)ev.event_type : -1);
    if (rc == 0)
        ibv_ack_async_event(&ev);
    struct ibv_srq_attr q;
    CHECK(ibv_query_srq(srq, &q) == 0 && q.srq_limit == 0 && q.max_wr >= 16, "srq.query_disarmed",
          "limit %u max_wr %u", q.srq_limit, q.max_wr);

    struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
    ibv_modify_qp(b[0], &err, IBV_QP_STATE);
    rc = next_event(ctx, &ev);
    CHECK(rc == 0 && ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == b[0],
          "srq.last_wqe_event", "rc %d type %d", rc, rc == 0 ? (int)ev.event_type : -1);
    if (rc == 0)
        ibv_ack_async_event(&ev);
    int fl = fcntl(ctx->async_fd, F_GETFL);
    fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
    errno = 0;
    CHECK(ibv_get_async_event(ctx, &ev) == -1 && errno == EAGAIN, "srq.no_more_events",
          "errno %d", errno);
    fcntl(ctx->async_fd, F_SETFL, fl);

    CHECK(ibv_destroy_srq(srq) == EBUSY, "srq.destroy_busy", "not EBUSY while QPs use it");
    for (int i = 0; i < 2; i++) {
        ibv_destroy_qp(a[i]);
        ibv_destroy_qp(b[i]);
    }
    CHECK(ibv_destroy_srq(srq) == 0, "srq.destroy", "%s", strerror(errno));
    ibv_dereg_mr(mr);
    ibv_destroy_cq(cq_a);
    ibv_destroy_cq(cq_b);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    return 0;
}
