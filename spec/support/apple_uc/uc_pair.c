/* uc_pair.c - transport code written for Apple's librdma (TN3205), as its
 * users write it: UC queue pairs, the first ACTIVE port (on a Mac not
 * always port 1), the GID found by address (Apple's GIDs have no types),
 * memory registered for LOCAL_WRITE|REMOTE_READ|REMOTE_WRITE, receives
 * posted after RTS, messages of whole 4 KiB frames, each SEND matching its
 * RECV. spec/apple_flavor_spec.lua builds it on Linux with
 * `pkg-config --cflags --libs librdma` and runs two of it with
 * `tbrt exec --apple`; the QP numbers and GIDs go over a TCP socket.
 *
 *   uc_pair server PORT | uc_pair client PORT
 *
 * The server receives MESSAGES messages and checks every byte; the client
 * sends them once the server says its receives are posted. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define FRAME 4096              /* TN3205 */
#define MSG (4 * FRAME)
#define MESSAGES 16

static void fail(const char *what)
{
    fprintf(stderr, "uc_pair: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int tcp(int server, int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (server) {
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 1))
            fail("listen");
        int c = accept(s, NULL, NULL);
        close(s);
        return c;
    }
    for (int tries = 0; tries < 100; tries++) {
        if (connect(s, (struct sockaddr *)&a, sizeof a) == 0)
            return s;
        close(s);
        s = socket(AF_INET, SOCK_STREAM, 0);
        struct timespec t = {0, 50000000};
        nanosleep(&t, NULL);
    }
    fail("connect");
    return -1;
}

struct hello {
    uint32_t qpn;
    uint8_t gid[16];
};

int main(int argc, char **argv)
{
    if (argc != 3)
        return fprintf(stderr, "usage: uc_pair server|client PORT\n"), 2;
    int server = !strcmp(argv[1], "server");
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n < 1)
        fail("no RDMA device (is RDMA over Thunderbolt enabled?)");
    struct ibv_context *ctx = ibv_open_device(list[0]);
    if (!ctx)
        fail("ibv_open_device");
    struct ibv_device_attr da;
    ibv_query_device(ctx, &da);
    uint8_t port = 0;
    for (uint8_t p = 1; p <= da.phys_port_cnt && !port; p++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(ctx, p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
            port = p;
    }
    if (!port)
        fail("no ACTIVE port");
    static const uint8_t lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
    int gi = -1;
    union ibv_gid gid;
    for (int i = 0; i < 16 && gi < 0; i++)
        if (ibv_query_gid(ctx, port, i, &gid) == 0 && !memcmp(gid.raw, lo, 16))
            gi = i;
    if (gi < 0)
        fail("no GID for 127.0.0.1");
    printf("device %s port %u gid index %d\n", ibv_get_device_name(list[0]), port, gi);

    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    uint8_t *buf = aligned_alloc(FRAME, (size_t)MESSAGES * MSG);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, (size_t)MESSAGES * MSG,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                       IBV_ACCESS_REMOTE_WRITE);
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, ch, 0);
    /* TN3205: queue depth counts 4 KiB frames */
    struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UC,
                                  .cap = {.max_send_wr = MESSAGES * MSG / FRAME,
                                          .max_recv_wr = MESSAGES * MSG / FRAME,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
    struct ibv_qp *qp = ibv_create_qp(pd, &qa);
    if (!pd || !mr || !cq || !qp)
        fail("verbs objects");

    int s = tcp(server, atoi(argv[2]));
    struct hello mine = {.qpn = htonl(qp->qp_num)}, peer;
    memcpy(mine.gid, gid.raw, 16);
    if (write(s, &mine, sizeof mine) != sizeof mine || read(s, &peer, sizeof peer) != sizeof peer)
        fail("exchange");
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = port,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        fail("INIT");
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096,
                             .dest_qp_num = ntohl(peer.qpn),
                             .ah_attr = {.is_global = 1, .port_num = port,
                                         .grh = {.sgid_index = (uint8_t)gi, .hop_limit = 1}}};
    memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN))
        fail("RTR");
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
        fail("RTS");

    char go = 0;
    int done = 0;
    if (server) {
        /* receives only after RTS, on Apple's provider */
        for (int i = 0; i < MESSAGES; i++) {
            struct ibv_sge sg = {(uintptr_t)buf + (size_t)i * MSG, MSG, mr->lkey};
            struct ibv_recv_wr w = {.wr_id = (uint64_t)i, .sg_list = &sg, .num_sge = 1}, *bad;
            if (ibv_post_recv(qp, &w, &bad))
                fail("ibv_post_recv");
        }
        if (write(s, "g", 1) != 1)
            fail("go");
    } else {
        for (int i = 0; i < MESSAGES * MSG; i++)
            buf[i] = (uint8_t)(i * 7 + i / MSG);
        if (read(s, &go, 1) != 1)
            fail("go");
        for (int i = 0; i < MESSAGES; i++) {
            struct ibv_sge sg = {(uintptr_t)buf + (size_t)i * MSG, MSG, mr->lkey};
            struct ibv_send_wr w = {.wr_id = (uint64_t)i, .sg_list = &sg, .num_sge = 1,
                                    .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
            if (ibv_post_send(qp, &w, &bad))
                fail("ibv_post_send");
        }
    }
    /* completions through the channel, as an event-driven transport
     * waits: poll, arm, poll again, then sleep on the channel's fd */
    time_t until = time(NULL) + 20;
    int bad_bytes = 0;
    while (done < MESSAGES && time(NULL) < until) {
        struct ibv_wc wc[8];
        int got = ibv_poll_cq(cq, 8, wc);
        if (got == 0) {
            ibv_req_notify_cq(cq, 0);
            got = ibv_poll_cq(cq, 8, wc);
        }
        if (got == 0) {
            struct pollfd pf = {.fd = ch->fd, .events = POLLIN};
            struct ibv_cq *ev;
            void *evctx;
            if (poll(&pf, 1, 1000) == 1 && ibv_get_cq_event(ch, &ev, &evctx) == 0)
                ibv_ack_cq_events(ev, 1);
            continue;
        }
        for (int k = 0; k < got; k++) {
            if (wc[k].status != IBV_WC_SUCCESS) {
                fprintf(stderr, "uc_pair: completion %s\n", ibv_wc_status_str(wc[k].status));
                return 1;
            }
            if (server) {
                const uint8_t *m = buf + wc[k].wr_id * MSG;
                for (int j = 0; j < MSG; j++) {
                    int at = (int)wc[k].wr_id * MSG + j;
                    bad_bytes += m[j] != (uint8_t)(at * 7 + at / MSG);
                }
            }
            done++;
        }
    }
    if (write(s, &go, 1) != 1 || read(s, &go, 1) != 1)
        fail("bye");
    printf("%s: %d messages of %d bytes, %d bytes wrong\n", server ? "received" : "sent", done,
           MSG, bad_bytes);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
    ibv_destroy_comp_channel(ch);
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return done == MESSAGES && bad_bytes == 0 ? 0 : 1;
}
