/* case_query.c - what the binding answers itself: ibv_query_qp (every
 * attribute modify_qp set), P_Keys, memory registration rules, address
 * handles from a received completion (and a reply through one), the
 * extended device query and the clock, the GID table, the async fd, and
 * libibverbs's strings and rate tables. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <string.h>

#include "abi_check.h"

static void qp_attributes(void)
{
    struct pair p;
    pair_open(&p, IBV_QPT_RC, 0, 0);
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr init;
    memset(&a, 0xa5, sizeof a);
    int rc = ibv_query_qp(p.qp[0], &a, IBV_QP_STATE, &init);
    CHECK(rc == 0, "query.qp", "ibv_query_qp: %d", rc);
    CHECK(a.qp_state == IBV_QPS_RTS && a.cur_qp_state == IBV_QPS_RTS, "query.state", "%d",
          a.qp_state);
    CHECK(a.dest_qp_num == p.qp[1]->qp_num && a.rq_psn == 101 && a.sq_psn == 100,
          "query.numbers", "dest %u rq_psn %u sq_psn %u", a.dest_qp_num, a.rq_psn, a.sq_psn);
    CHECK(a.path_mtu == IBV_MTU_4096 && a.timeout == 14 && a.retry_cnt == 7 && a.rnr_retry == 7 &&
              a.min_rnr_timer == 1 && a.max_rd_atomic == 4 && a.max_dest_rd_atomic == 4,
          "query.rc_attrs", "mtu %d timeout %u retry %u rnr %u min_rnr %u rd %u/%u", a.path_mtu,
          a.timeout, a.retry_cnt, a.rnr_retry, a.min_rnr_timer, a.max_rd_atomic,
          a.max_dest_rd_atomic);
    CHECK(a.port_num == 1 && a.pkey_index == 0 &&
              a.qp_access_flags == (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ) &&
              a.ah_attr.is_global && a.ah_attr.grh.sgid_index == p.gid_index,
          "query.path", "port %u pkey %u access 0x%x global %u sgid %u", a.port_num, a.pkey_index,
          a.qp_access_flags, a.ah_attr.is_global, a.ah_attr.grh.sgid_index);
    CHECK(a.cap.max_send_wr >= 64 && a.cap.max_recv_wr >= 64 && a.cap.max_inline_data >= 64,
          "query.cap", "send %u recv %u inline %u", a.cap.max_send_wr, a.cap.max_recv_wr,
          a.cap.max_inline_data);
    CHECK(init.send_cq == p.cq[0] && init.recv_cq == p.cq[0] && init.qp_type == IBV_QPT_RC,
          "query.init_attr", "cqs or type differ");
    /* the device moves a QP to ERR: the query says so */
    struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
    ibv_modify_qp(p.qp[0], &err, IBV_QP_STATE);
    ibv_query_qp(p.qp[0], &a, IBV_QP_STATE, &init);
    CHECK(a.qp_state == IBV_QPS_ERR && p.qp[0]->state == IBV_QPS_ERR, "query.state_err", "%d",
          a.qp_state);
    pair_close(&p);
}

static void keys_and_memory(void)
{
    struct ibv_context *ctx = open_first();
    __be16 pkey = 0;
    CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == htons(0xffff), "query.pkey",
          "0x%x", ntohs(pkey));
    errno = 0;
    CHECK(ibv_query_pkey(ctx, 1, 1, &pkey) == -1 && errno == EINVAL, "query.pkey_out_of_table",
          "errno %d", errno);
    CHECK(ibv_get_pkey_index(ctx, 1, htons(0xffff)) == 0, "query.pkey_index", "not 0");
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    static char buf[8192] __attribute__((aligned(4096)));
    errno = 0;
    struct ibv_mr *mr = ibv_reg_mr_iova2(pd, buf, sizeof buf, 0x1000, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr && mr->addr == buf, "query.iova_other", "mr %p errno %d", (void *)mr, errno);
    if (mr)
        ibv_dereg_mr(mr);
    mr = ibv_reg_mr_iova2(pd, buf, sizeof buf, (uintptr_t)buf,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
    CHECK(mr && mr->addr == buf && mr->length == sizeof buf && mr->lkey, "query.iova_is_addr",
          "%s", strerror(errno));
    if (mr)
        ibv_dereg_mr(mr);
    struct ibv_device_attr_ex dx;
    CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0 && dx.completion_timestamp_mask &&
              dx.hca_core_clock == 1000000 && dx.phys_port_cnt_ex == dx.orig_attr.phys_port_cnt &&
              dx.orig_attr.vendor_id == 0,
          "query.device_ex", "mask %llx clock %llu", (unsigned long long)dx.completion_timestamp_mask,
          (unsigned long long)dx.hca_core_clock);
    struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
    CHECK(ibv_query_rt_values_ex(ctx, &v) == 0 && (v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK) &&
              (v.raw_clock.tv_sec || v.raw_clock.tv_nsec),
          "query.rt_values", "no raw clock");
    struct ibv_gid_entry table[64];
    ssize_t n = ibv_query_gid_table(ctx, table, 64, 0);
    int lo = 0;
    for (ssize_t i = 0; i < n; i++)
        lo |= table[i].gid.raw[10] == 0xff && table[i].gid.raw[12] == 127;
    CHECK(n > 2 && lo, "query.gid_table", "%zd entries, loopback %d", n, lo);
    /* nothing happens on a soft device: a non-blocking async fd says so */
    fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
    struct ibv_async_event ev;
    errno = 0;
    CHECK(ibv_get_async_event(ctx, &ev) == -1 && errno == EAGAIN, "query.async_nonblocking",
          "errno %d", errno);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
}

/* A UD datagram in, an address handle from its completion, a reply out. */
static void ah_from_wc(void)
{
    struct pair p;
    pair_open(&p, IBV_QPT_UD, 0, 0);
    struct ibv_gid_entry e;
    ibv_query_gid_ex(p.ctx, 1, (uint32_t)p.gid_index, &e, 0);
    struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1,
                             .grh = {.dgid = e.gid, .sgid_index = (uint8_t)p.gid_index,
                                     .hop_limit = 64}};
    struct ibv_ah *ah = ibv_create_ah(p.pd, &aa);
    struct ibv_sge rs = {(uintptr_t)p.buf[1], 1024, p.mr[1]->lkey};
    struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rbad;
    ibv_post_recv(p.qp[1], &rw, &rbad);
    struct ibv_sge ss = {(uintptr_t)p.buf[0] + 2048, 5, p.mr[0]->lkey};
    memcpy(p.buf[0] + 2048, "ping!", 5);
    struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED,
                             .wr.ud = {.ah = ah, .remote_qpn = p.qp[1]->qp_num,
                                       .remote_qkey = 0x11111111}}, *sbad;
    ibv_post_send(p.qp[0], &sw, &sbad);
    struct ibv_wc wc, junk;
    int got = poll_one(p.cq[1], &wc);
    poll_one(p.cq[0], &junk);
    CHECK(got && (wc.wc_flags & IBV_WC_GRH) && wc.src_qp == p.qp[0]->qp_num, "query.ud_grh",
          "got %d flags 0x%x", got, got ? wc.wc_flags : 0);
    struct ibv_ah_attr back;
    int rc = ibv_init_ah_from_wc(p.ctx, 1, &wc, (struct ibv_grh *)p.buf[1], &back);
    CHECK(rc == 0 && back.is_global && !memcmp(back.grh.dgid.raw, e.gid.raw, 16),
          "query.init_ah_from_wc", "rc %d", rc);
    struct ibv_ah *reply = ibv_create_ah_from_wc(p.pd, &wc, (struct ibv_grh *)p.buf[1], 1);
    CHECK(reply != NULL, "query.create_ah_from_wc", "%s", strerror(errno));
    rs.addr = (uintptr_t)p.buf[0];
    rs.lkey = p.mr[0]->lkey;
    ibv_post_recv(p.qp[0], &rw, &rbad);
    ss.addr = (uintptr_t)p.buf[1] + 4096;
    memcpy(p.buf[1] + 4096, "pong!", 5);
    ss.lkey = p.mr[1]->lkey;
    sw.wr.ud.ah = reply;
    sw.wr.ud.remote_qpn = wc.src_qp;
    ibv_post_send(p.qp[1], &sw, &sbad);
    got = poll_one(p.cq[0], &wc);
    if (got && wc.opcode != IBV_WC_RECV)
        got = poll_one(p.cq[0], &wc);
    CHECK(got && wc.opcode == IBV_WC_RECV && !memcmp(p.buf[0] + 40, "pong!", 5),
          "query.reply_through_ah", "got %d", got);
    if (reply)
        ibv_destroy_ah(reply);
    if (ah)
        ibv_destroy_ah(ah);
    pair_close(&p);
}

static void strings(void)
{
    CHECK(!strcmp(ibv_wc_status_str(IBV_WC_LOC_LEN_ERR), "local length error") &&
              !strcmp(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR), "Work Request Flushed Error") &&
              !strcmp(ibv_wc_status_str((enum ibv_wc_status)999), "unknown"),
          "strings.wc_status", "%s", ibv_wc_status_str(IBV_WC_LOC_LEN_ERR));
    CHECK(!strcmp(ibv_event_type_str(IBV_EVENT_PORT_ACTIVE), "port active") &&
              !strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "active") &&
              !strcmp(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter"),
          "strings.enums", "%s", ibv_event_type_str(IBV_EVENT_PORT_ACTIVE));
    CHECK(ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125 && ibv_rate_to_mult(IBV_RATE_40_GBPS) == 16 &&
              mult_to_ibv_rate(4) == IBV_RATE_10_GBPS && mbps_to_ibv_rate(25781) == IBV_RATE_25_GBPS &&
              ibv_rate_to_mult(IBV_RATE_14_GBPS) == -1,
          "strings.rates", "rate tables differ");
}

int case_query(void)
{
    qp_attributes();
    keys_and_memory();
    ah_from_wc();
    strings();
    return 0;
}
