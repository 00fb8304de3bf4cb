/* case_threads.c - one context, several threads at once, as libibverbs
 * allows (perftest, UCX and MPI do it): a sender posting and reaping its
 * completions, a receiver keeping receives posted and checking every
 * message in order, and a third thread querying the port and the QPs all
 * the while. The soft device serves one thread at a time; the library's
 * context lock is what makes this work. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "abi_check.h"

#define MESSAGES 20000
#define MSG 64
#define DEPTH 32

static struct pair P;
static volatile int done;
static int received, out_of_order, bad_status, queries;

static void *sender(void *arg)
{
    (void)arg;
    int inflight = 0;
    for (int i = 0; i < MESSAGES;) {
        struct ibv_wc wc[8];
        int n = ibv_poll_cq(P.cq[0], 8, wc);
        for (int k = 0; k < n; k++)
            bad_status += wc[k].status != IBV_WC_SUCCESS;
        inflight -= n > 0 ? n : 0;
        if (inflight >= DEPTH)
            continue;
        uint8_t *slot = P.buf[0] + (size_t)(i % DEPTH) * MSG;
        memcpy(slot, &i, sizeof i);
        memset(slot + sizeof i, (uint8_t)i, MSG - sizeof i);
        struct ibv_sge s = {(uintptr_t)slot, MSG, P.mr[0]->lkey};
        struct ibv_send_wr w = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1,
                                .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
        if (ibv_post_send(P.qp[0], &w, &bad) == 0) {
            inflight++;
            i++;
        }
    }
    while (inflight > 0 && !done) {
        struct ibv_wc wc[8];
        int n = ibv_poll_cq(P.cq[0], 8, wc);
        inflight -= n > 0 ? n : 0;
    }
    return NULL;
}

static void post_recvs(int from, int count)
{
    for (int i = from; i < from + count; i++) {
        struct ibv_sge s = {(uintptr_t)P.buf[1] + (size_t)(i % 64) * MSG, MSG, P.mr[1]->lkey};
        struct ibv_recv_wr w = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1}, *bad;
        if (ibv_post_recv(P.qp[1], &w, &bad))
            die("post_recv");
    }
}

static void *receiver(void *arg)
{
    (void)arg;
    post_recvs(0, 60);
    int posted = 60;
    time_t until = time(NULL) + 20;
    while (received < MESSAGES && time(NULL) < until) {
        struct ibv_wc wc[8];
        int n = ibv_poll_cq(P.cq[1], 8, wc);
        for (int k = 0; k < n; k++) {
            int seq;
            const uint8_t *m = P.buf[1] + (wc[k].wr_id % 64) * MSG;
            memcpy(&seq, m, sizeof seq);
            bad_status += wc[k].status != IBV_WC_SUCCESS;
            out_of_order += seq != received || m[MSG - 1] != (uint8_t)seq;
            received++;
        }
        if (n > 0 && posted < MESSAGES) {
            int more = posted + n > MESSAGES ? MESSAGES - posted : n;
            post_recvs(posted, more);
            posted += more;
        }
    }
    done = 1;
    return NULL;
}

static void *querier(void *arg)
{
    (void)arg;
    while (!done) {
        struct ibv_port_attr pa;
        struct ibv_qp_attr a;
        struct ibv_qp_init_attr ia;
        if (ibv_query_port(P.ctx, 1, &pa) == 0 && ibv_query_qp(P.qp[1], &a, IBV_QP_STATE, &ia) == 0)
            queries++;
    }
    return NULL;
}

int case_threads(void)
{
    pair_open(&P, IBV_QPT_RC, 0, 0);
    pthread_t t[3];
    pthread_create(&t[0], NULL, receiver, NULL);
    pthread_create(&t[1], NULL, sender, NULL);
    pthread_create(&t[2], NULL, querier, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    CHECK(received == MESSAGES, "threads.all_received", "%d of %d", received, MESSAGES);
    CHECK(out_of_order == 0, "threads.in_order", "%d messages out of order or corrupt",
          out_of_order);
    CHECK(bad_status == 0, "threads.no_errors", "%d error completions", bad_status);
    CHECK(queries > 0, "threads.queries_ran", "the querying thread never got in");
    pair_close(&P);
    return 0;
}
