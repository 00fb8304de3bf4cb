/* case_ex.c - the extended verbs: ibv_create_cq_ex with the start_poll /
 * next_poll API and timestamps, ibv_create_qp_ex with the ibv_wr_* API for
 * every operation the device has (SEND, SEND_WITH_IMM with inline data, an
 * RDMA WRITE from two SGEs, RDMA READ, WRITE_WITH_IMM, atomics, UD sends),
 * completion timestamps of when the work finished, an MR at an iova,
 * aborting a batch, misuse, and the operations refused at creation. */
#include <arpa/inet.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "abi_check.h"

#define SEND_OPS                                                                                   \
    (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |              \
     IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ)
#define WC_FLAGS                                                                                   \
    (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |                        \
     IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)

struct got {
    uint64_t wr_id;
    int status, opcode;
    uint32_t byte_len, qp_num, src_qp, flags;
    __be32 imm;
    uint64_t ts;
};

/* Up to max completions through the extended poll API, within 2 s. */
static int poll_ex(struct ibv_cq *cq, struct got *g, int max)
{
    struct ibv_cq_ex *x = (struct ibv_cq_ex *)cq;
    struct ibv_poll_cq_attr attr = {0};
    int n = 0;
    time_t until = time(NULL) + 2;
    while (n < max && time(NULL) <= until) {
        if (ibv_start_poll(x, &attr) != 0)
            continue;           /* ENOENT: nothing yet */
        do {
            g[n] = (struct got){.wr_id = x->wr_id, .status = x->status,
                                .opcode = ibv_wc_read_opcode(x),
                                .byte_len = ibv_wc_read_byte_len(x),
                                .qp_num = ibv_wc_read_qp_num(x), .src_qp = ibv_wc_read_src_qp(x),
                                .flags = ibv_wc_read_wc_flags(x),
                                .imm = ibv_wc_read_imm_data(x),
                                .ts = ibv_wc_read_completion_ts(x)};
            n++;
        } while (n < max && ibv_next_poll(x) == 0);
        ibv_end_poll(x);
    }
    return n;
}

static void post_recv(struct pair *p, int i, uint64_t id, uint32_t off, uint32_t len)
{
    struct ibv_sge s = {.addr = (uintptr_t)p->buf[i] + off, .length = len, .lkey = p->mr[i]->lkey};
    struct ibv_recv_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
    if (ibv_post_recv(p->qp[i], &w, &bad))
        die("ibv_post_recv");
}

static void rc_ops(void)
{
    struct pair p;
    pair_open(&p, IBV_QPT_RC, SEND_OPS, WC_FLAGS);
    struct ibv_qp_ex *x = ibv_qp_to_qp_ex(p.qp[0]);
    CHECK(x != NULL, "ex.qp_to_qp_ex", "NULL for a QP made with send_ops_flags");
    post_recv(&p, 1, 11, 0, 256);
    post_recv(&p, 1, 12, 256, 256);
    memcpy(p.buf[0], "hello", 5);
    memcpy(p.buf[0] + 1000, "ab", 2);
    memcpy(p.buf[0] + 2000, "cd", 2);
    memcpy(p.buf[1] + 8192, "remote", 6);
    char inl[8] = "inline!";
    uint64_t raddr = (uintptr_t)p.buf[1];
    uint32_t rkey = p.mr[1]->rkey, lkey = p.mr[0]->lkey;

    ibv_wr_start(x);
    x->wr_id = 1;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, lkey, (uintptr_t)p.buf[0], 5);
    x->wr_id = 2;
    ibv_wr_send_imm(x, htonl(0x1234));
    ibv_wr_set_inline_data(x, inl, 7);
    memset(inl, 'X', sizeof inl);   /* copied when set: the post must not see this */
    x->wr_id = 3;
    ibv_wr_rdma_write(x, rkey, raddr + 4096);
    struct ibv_sge two[2] = {{(uintptr_t)p.buf[0] + 1000, 2, lkey},
                             {(uintptr_t)p.buf[0] + 2000, 2, lkey}};
    ibv_wr_set_sge_list(x, 2, two);
    x->wr_id = 4;
    ibv_wr_rdma_read(x, rkey, raddr + 8192);
    ibv_wr_set_sge(x, lkey, (uintptr_t)p.buf[0] + 8192, 6);
    int rc = ibv_wr_complete(x);
    CHECK(rc == 0, "ex.wr_complete", "%d (%s)", rc, strerror(rc));

    struct got s[4], r[2];
    int ns = poll_ex(p.cq[0], s, 4), nr = poll_ex(p.cq[1], r, 2);
    CHECK(ns == 4, "ex.send_completions", "%d of 4", ns);
    static const int ops[4] = {IBV_WC_SEND, IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ};
    int in_order = ns == 4;
    for (int i = 0; i < ns; i++)
        in_order &= s[i].wr_id == (uint64_t)i + 1 && s[i].status == IBV_WC_SUCCESS &&
                    s[i].opcode == ops[i];
    CHECK(in_order, "ex.send_wr_ids_opcodes", "wr_id/status/opcode not 1..4 SUCCESS "
          "SEND,SEND,RDMA_WRITE,RDMA_READ");
    int ts_ok = ns == 4 && s[0].ts > 0;
    for (int i = 1; i < ns; i++)
        ts_ok &= s[i].ts >= s[i - 1].ts;
    CHECK(ts_ok, "ex.timestamps", "completion timestamps zero or going back");
    CHECK(nr == 2, "ex.recv_completions", "%d of 2", nr);
    if (nr == 2) {
        CHECK(r[0].wr_id == 11 && r[0].byte_len == 5 && !memcmp(p.buf[1], "hello", 5) &&
                  r[0].qp_num == p.qp[1]->qp_num && r[0].src_qp == p.qp[0]->qp_num,
              "ex.recv_send", "wr_id %llu len %u qp %u src %u", (unsigned long long)r[0].wr_id,
              r[0].byte_len, r[0].qp_num, r[0].src_qp);
        CHECK(r[1].wr_id == 12 && r[1].byte_len == 7 && (r[1].flags & IBV_WC_WITH_IMM) &&
                  ntohl(r[1].imm) == 0x1234 && !memcmp(p.buf[1] + 256, "inline!", 7),
              "ex.recv_send_imm_inline", "len %u flags 0x%x imm 0x%x data %.7s", r[1].byte_len,
              r[1].flags, ntohl(r[1].imm), (char *)p.buf[1] + 256);
    }
    CHECK(!memcmp(p.buf[1] + 4096, "abcd", 4), "ex.rdma_write_two_sges", "remote has %.4s",
          (char *)p.buf[1] + 4096);
    CHECK(!memcmp(p.buf[0] + 8192, "remote", 6), "ex.rdma_read", "local has %.6s",
          (char *)p.buf[0] + 8192);

    /* WRITE_WITH_IMM: the data lands, and the receiver's completion says so */
    post_recv(&p, 1, 13, 512, 64);
    memcpy(p.buf[0] + 3000, "imm-write", 9);
    ibv_wr_start(x);
    x->wr_id = 5;
    ibv_wr_rdma_write_imm(x, rkey, raddr + 12000, htonl(77));
    ibv_wr_set_sge(x, lkey, (uintptr_t)p.buf[0] + 3000, 9);
    rc = ibv_wr_complete(x);
    nr = poll_ex(p.cq[1], r, 1);
    ns = poll_ex(p.cq[0], s, 1);
    CHECK(rc == 0 && nr == 1 && r[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
              ntohl(r[0].imm) == 77 && !memcmp(p.buf[1] + 12000, "imm-write", 9) && ns == 1,
          "ex.rdma_write_imm", "rc %d, %d recv (opcode %d, imm %u), %d send", rc, nr,
          nr ? r[0].opcode : -1, nr ? ntohl(r[0].imm) : 0, ns);

    /* an aborted batch posts nothing */
    ibv_wr_start(x);
    x->wr_id = 6;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, lkey, (uintptr_t)p.buf[0], 5);
    ibv_wr_abort(x);
    struct ibv_wc wc;
    CHECK(ibv_poll_cq(p.cq[0], 1, &wc) == 0, "ex.wr_abort", "a completion after abort");
    CHECK(ibv_qp_to_qp_ex(p.qp[1]) != NULL && ibv_qp_to_qp_ex(p.qp[0]) == x, "ex.qp_ex_same",
          "ibv_qp_to_qp_ex not stable");
    pair_close(&p);
}

static void refusals(void)
{
    /* the ibv_wr API on a QP made for writes only: a send is misuse */
    struct pair p;
    pair_open(&p, IBV_QPT_RC, IBV_QP_EX_WITH_RDMA_WRITE, 0);
    struct ibv_qp_ex *x = ibv_qp_to_qp_ex(p.qp[0]);
    ibv_wr_start(x);
    ibv_wr_send(x);
    ibv_wr_set_sge(x, p.mr[0]->lkey, (uintptr_t)p.buf[0], 4);
    int rc = ibv_wr_complete(x);
    CHECK(rc == EINVAL, "ex.wr_op_not_created_for", "wr_complete gave %d", rc);
    /* a QP from ibv_create_qp has no ibv_qp_ex */
    struct ibv_qp_init_attr a = {.send_cq = p.cq[0], .recv_cq = p.cq[0], .qp_type = IBV_QPT_RC,
                                 .cap = {.max_send_wr = 4, .max_recv_wr = 4}};
    struct ibv_qp *plain = ibv_create_qp(p.pd, &a);
    CHECK(plain && ibv_qp_to_qp_ex(plain) == NULL, "ex.plain_qp_no_qp_ex", "qp_ex for a plain QP");
    if (plain)
        ibv_destroy_qp(plain);
    /* memory windows are refused when the QP is made, atomics on UC too */
    struct ibv_qp_init_attr_ex ax = {.send_cq = p.cq[0], .recv_cq = p.cq[0],
                                     .qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 4,
                                                                    .max_recv_wr = 4},
                                     .comp_mask = IBV_QP_INIT_ATTR_PD |
                                                  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                                     .pd = p.pd,
                                     .send_ops_flags = IBV_QP_EX_WITH_BIND_MW};
    errno = 0;
    struct ibv_qp *q = ibv_create_qp_ex(p.ctx, &ax);
    CHECK(!q && errno == EOPNOTSUPP, "ex.bind_mw_refused", "qp %p errno %d", (void *)q, errno);
    ax.qp_type = IBV_QPT_UC;
    ax.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
    errno = 0;
    q = ibv_create_qp_ex(p.ctx, &ax);
    CHECK(!q && errno == EOPNOTSUPP, "ex.atomics_on_uc_refused", "qp %p errno %d", (void *)q,
          errno);
    ax.send_ops_flags = IBV_QP_EX_WITH_RDMA_READ;
    errno = 0;
    q = ibv_create_qp_ex(p.ctx, &ax);
    CHECK(!q && errno == EOPNOTSUPP, "ex.read_on_uc_refused", "qp %p errno %d", (void *)q, errno);
    struct ibv_cq_init_attr_ex cx = {.cqe = 4, .wc_flags = IBV_WC_EX_WITH_FLOW_TAG};
    errno = 0;
    struct ibv_cq_ex *c = ibv_create_cq_ex(p.ctx, &cx);
    CHECK(!c && errno == EOPNOTSUPP, "ex.cq_flow_tag_refused", "cq %p errno %d", (void *)c, errno);
    pair_close(&p);
}

static void ud_ops(void)
{
    struct pair p;
    pair_open(&p, IBV_QPT_UD, IBV_QP_EX_WITH_SEND, IBV_WC_EX_WITH_BYTE_LEN);
    struct ibv_gid_entry e;
    ibv_query_gid_ex(p.ctx, 1, (uint32_t)p.gid_index, &e, 0);
    struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1,
                             .grh = {.dgid = e.gid, .sgid_index = (uint8_t)p.gid_index,
                                     .hop_limit = 64}};
    struct ibv_ah *ah = ibv_create_ah(p.pd, &aa);
    CHECK(ah != NULL, "ex.ud_ah", "ibv_create_ah: %s", strerror(errno));
    post_recv(&p, 1, 21, 0, 1024);
    memcpy(p.buf[0], "datagram", 8);
    struct ibv_qp_ex *x = ibv_qp_to_qp_ex(p.qp[0]);
    ibv_wr_start(x);
    x->wr_id = 20;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(x);
    ibv_wr_set_ud_addr(x, ah, p.qp[1]->qp_num, 0x11111111);
    ibv_wr_set_sge(x, p.mr[0]->lkey, (uintptr_t)p.buf[0], 8);
    int rc = ibv_wr_complete(x);
    struct got r[1];
    int nr = poll_ex(p.cq[1], r, 1);
    CHECK(rc == 0 && nr == 1 && r[0].byte_len == 40 + 8 && !memcmp(p.buf[1] + 40, "datagram", 8),
          "ex.ud_send", "rc %d, %d recv, len %u", rc, nr, nr ? r[0].byte_len : 0);
    if (ah)
        ibv_destroy_ah(ah);
    pair_close(&p);
}

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* ibv_wr_atomic_fetch_add / cmp_swp into a region with REMOTE_ATOMIC at an
 * iova other than its address; the timestamps say when they finished,
 * not when they were polled (50 ms later). */
static void atomics_iova(void)
{
    struct pair p;
    pair_open(&p, IBV_QPT_RC, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
              IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_RDMA_WRITE, WC_FLAGS);
    struct ibv_qp_ex *x = ibv_qp_to_qp_ex(p.qp[0]);
    const uint64_t IOVA = 0x5000000000ull;
    struct ibv_mr *amr = ibv_reg_mr_iova2(p.pd, p.buf[1] + 32768, 4096, IOVA,
                                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
                                              IBV_ACCESS_REMOTE_WRITE);
    CHECK(amr && amr->addr == p.buf[1] + 32768, "ex.mr_at_iova", "%s", strerror(errno));
    if (!amr) {
        pair_close(&p);
        return;
    }
    uint64_t *counter = (uint64_t *)(p.buf[1] + 32768 + 64);
    *counter = 40;
    uint64_t *orig = (uint64_t *)(p.buf[0] + 100 * 8);
    uint32_t lkey = p.mr[0]->lkey;
    uint64_t before = mono_ns();
    ibv_wr_start(x);
    x->wr_id = 21;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_fetch_add(x, amr->rkey, IOVA + 64, 5);
    ibv_wr_set_sge(x, lkey, (uintptr_t)&orig[0], 8);
    x->wr_id = 22;
    ibv_wr_atomic_cmp_swp(x, amr->rkey, IOVA + 64, 45, 7);
    ibv_wr_set_sge(x, lkey, (uintptr_t)&orig[1], 8);
    x->wr_id = 23;
    memcpy(p.buf[0] + 5000, "at iova", 7);
    ibv_wr_rdma_write(x, amr->rkey, IOVA + 1024);
    ibv_wr_set_sge(x, lkey, (uintptr_t)p.buf[0] + 5000, 7);
    int rc = ibv_wr_complete(x);
    uint64_t after = mono_ns();
    usleep(50000);
    struct got s[3];
    int ns = poll_ex(p.cq[0], s, 3);
    CHECK(rc == 0 && ns == 3 && s[0].opcode == IBV_WC_FETCH_ADD && s[0].byte_len == 8 &&
              s[1].opcode == IBV_WC_COMP_SWAP && s[0].status == IBV_WC_SUCCESS &&
              s[1].status == IBV_WC_SUCCESS && s[2].status == IBV_WC_SUCCESS,
          "ex.atomic_completions", "rc %d, %d completions, opcodes %d %d", rc, ns,
          ns > 0 ? s[0].opcode : -1, ns > 1 ? s[1].opcode : -1);
    CHECK(orig[0] == 40 && orig[1] == 45 && *counter == 7, "ex.atomic_values",
          "fetch_add saw %llu, cmp_swp saw %llu, counter %llu", (unsigned long long)orig[0],
          (unsigned long long)orig[1], (unsigned long long)*counter);
    CHECK(!memcmp(p.buf[1] + 32768 + 1024, "at iova", 7), "ex.rdma_write_iova", "%.7s",
          (char *)p.buf[1] + 32768 + 1024);
    /* within half the sleep of the work: a loaded machine may let the
     * device's own thread finish it a little after the post returned, but
     * a stamp of the poll is 50 ms late */
    CHECK(ns == 3 && s[0].ts + 1000000 >= before && s[2].ts <= after + 25000000,
          "ex.timestamps_of_the_work", "stamps %llu..%llu, work %llu..%llu (polled 50 ms later)",
          ns ? (unsigned long long)s[0].ts : 0ull, ns == 3 ? (unsigned long long)s[2].ts : 0ull,
          (unsigned long long)before, (unsigned long long)after);
    ibv_dereg_mr(amr);
    pair_close(&p);
}

int case_ex(void)
{
    rc_ops();
    refusals();
    atomics_iova();
    ud_ops();
    return 0;
}
