/* case_threads.c - one context, five threads at once, as libibverbs allows
 * (perftest, UCX and MPI share contexts between threads): two senders
 * posting on the same QP and reaping the same send CQ, two receivers
 * polling the same receive CQ and re-posting receives on the same QP, and
 * a fifth thread querying the port and a QP all the while. Every message
 * must arrive exactly once with its bytes intact. The soft device serves
 * one thread at a time; without the library's context lock two posts on
 * one QP take the same slot and two polls the same completion. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "abi_check.h"

#define SENDERS 2
#define PER_SENDER 10000
#define MSG 64
#define SLOTS 60                /* receives kept posted; also receive buffers */
#define SEND_DEPTH 24           /* per sender */

static struct pair P;
static atomic_int done, received, bad_status, corrupt, queries;
static atomic_uchar seen[SENDERS][PER_SENDER];

struct msg {
    int sender, seq;
    uint8_t fill[MSG - 2 * sizeof(int)];
};

static void *sender(void *arg)
{
    int id = (int)(intptr_t)arg;
    static atomic_int inflight[SENDERS];
    uint8_t *ring = P.buf[0] + (size_t)id * SEND_DEPTH * MSG;
    for (int i = 0; i < PER_SENDER && !done;) {
        struct ibv_wc wc[8];
        int n = ibv_poll_cq(P.cq[0], 8, wc);   /* also the other sender's */
        for (int k = 0; k < n; k++) {
            atomic_fetch_add(&bad_status, wc[k].status != IBV_WC_SUCCESS);
            atomic_fetch_sub(&inflight[wc[k].wr_id >> 32], 1);
        }
        if (atomic_load(&inflight[id]) >= SEND_DEPTH)
            continue;
        struct msg *m = (struct msg *)(ring + (size_t)(i % SEND_DEPTH) * MSG);
        m->sender = id;
        m->seq = i;
        memset(m->fill, (uint8_t)i, sizeof m->fill);
        struct ibv_sge s = {(uintptr_t)m, MSG, P.mr[0]->lkey};
        struct ibv_send_wr w = {.wr_id = (uint64_t)id << 32 | (uint32_t)i, .sg_list = &s,
                                .num_sge = 1, .opcode = IBV_WR_SEND,
                                .send_flags = IBV_SEND_SIGNALED}, *bad;
        atomic_fetch_add(&inflight[id], 1);
        if (ibv_post_send(P.qp[0], &w, &bad) == 0)
            i++;
        else
            atomic_fetch_sub(&inflight[id], 1);
    }
    return NULL;
}

static void post_slot(int slot)
{
    struct ibv_sge s = {(uintptr_t)P.buf[1] + (size_t)slot * MSG, MSG, P.mr[1]->lkey};
    struct ibv_recv_wr w = {.wr_id = (uint64_t)slot, .sg_list = &s, .num_sge = 1}, *bad;
    int rc = ibv_post_recv(P.qp[1], &w, &bad);
    if (rc) {
        errno = rc;
        die("post_recv");
    }
}

static void *receiver(void *arg)
{
    (void)arg;
    time_t until = time(NULL) + 30;
    while (atomic_load(&received) < SENDERS * PER_SENDER && time(NULL) < until) {
        struct ibv_wc wc[4];
        int n = ibv_poll_cq(P.cq[1], 4, wc);
        for (int k = 0; k < n; k++) {
            int slot = (int)wc[k].wr_id;
            struct msg m;
            memcpy(&m, P.buf[1] + (size_t)slot * MSG, sizeof m);
            atomic_fetch_add(&bad_status, wc[k].status != IBV_WC_SUCCESS);
            if (m.sender < 0 || m.sender >= SENDERS || m.seq < 0 || m.seq >= PER_SENDER ||
                m.fill[0] != (uint8_t)m.seq || m.fill[sizeof m.fill - 1] != (uint8_t)m.seq)
                atomic_fetch_add(&corrupt, 1);
            else
                atomic_fetch_add(&seen[m.sender][m.seq], 1);
            atomic_fetch_add(&received, 1);
            post_slot(slot);    /* its bytes are read: the slot may be reused */
        }
    }
    atomic_store(&done, 1);
    return NULL;
}

static void *querier(void *arg)
{
    (void)arg;
    while (!atomic_load(&done)) {
        struct ibv_port_attr pa;
        struct ibv_qp_attr a;
        struct ibv_qp_init_attr ia;
        if (ibv_query_port(P.ctx, 1, &pa) == 0 && ibv_query_qp(P.qp[0], &a, IBV_QP_STATE, &ia) == 0)
            atomic_fetch_add(&queries, 1);
    }
    return NULL;
}

int case_threads(void)
{
    pair_open(&P, IBV_QPT_RC, 0, 0);
    for (int s = 0; s < SLOTS; s++)
        post_slot(s);
    pthread_t t[5];
    pthread_create(&t[0], NULL, receiver, NULL);
    pthread_create(&t[1], NULL, receiver, NULL);
    pthread_create(&t[2], NULL, querier, NULL);
    pthread_create(&t[3], NULL, sender, (void *)0);
    pthread_create(&t[4], NULL, sender, (void *)1);
    for (int i = 0; i < 5; i++)
        pthread_join(t[i], NULL);
    int once = 0, dup = 0, lost = 0;
    for (int s = 0; s < SENDERS; s++)
        for (int i = 0; i < PER_SENDER; i++) {
            int c = atomic_load(&seen[s][i]);
            once += c == 1;
            dup += c > 1;
            lost += c == 0;
        }
    CHECK(once == SENDERS * PER_SENDER, "threads.each_message_once",
          "%d of %d once, %d twice or more, %d lost (%d received)", once, SENDERS * PER_SENDER,
          dup, lost, atomic_load(&received));
    CHECK(atomic_load(&corrupt) == 0, "threads.bytes_intact", "%d corrupt messages",
          atomic_load(&corrupt));
    CHECK(atomic_load(&bad_status) == 0, "threads.no_errors", "%d error completions",
          atomic_load(&bad_status));
    CHECK(atomic_load(&queries) > 0, "threads.queries_ran", "the querying thread never got in");
    pair_close(&P);
    return 0;
}
