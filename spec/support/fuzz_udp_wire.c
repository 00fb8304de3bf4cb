/* fuzz_udp_wire.c - libFuzzer target: a hostile host on the network against
 * the soft device's UDP wire (RoCEv2). Queue pairs of one soft device talk
 * over the wire on loopback (RC a and b, UC c and d, UD u, and RC e, whose
 * receives come from a shared receive queue, with f), with receives
 * posted and (as the input asks) a SEND, WRITE, READ or atomic of their own
 * in flight; the input is a run of datagrams sent from another socket to the
 * wire's port, most of them aimed at one of a, b, c, u, e and given a correct
 * ICRC (a wrong one is
 * dropped before anything reads the packet, so a fuzzer left to find CRCs
 * would never get past it). Whatever comes, the device must not crash, read
 * or write outside what it may (ASan), or touch a byte of the memory around
 * its registered regions (guards checked after every input), and every
 * completion must carry a status the verbs API has.
 *
 *   make fuzz                       build-fuzz/fuzz-udp-wire (clang, libFuzzer,
 *                                   ASan + UBSan, every core file instrumented)
 *   build-fuzz/fuzz-udp-wire -runs=N -seed=S [CORPUS_DIR]
 *
 * Input: records of [flags:1][len:2, little-endian][bytes:len] (len at most
 * PKT_MAX). flags bits 0-2: the QP aimed at (a, b, c, u, e, then a, b, c
 * again), bit 3: keep the input's QPN, bit 4: keep the input's ICRC, bit 5:
 * let the device take a turn before the next record, bit 6: a RETH's or
 * atomic ETH's rkey made
 * the target's and its address a place in or near its region (the input's
 * low address bits, from 2 KiB before it), a DETH's Q_Key u's, bit 7: the
 * PSN made the next of a run to that QP (so messages of several packets
 * can be put together). The first byte of the input says what the queue
 * pairs have in flight (bits 0..2: b sends a SEND, WRITE, READ to a; bit 3:
 * an atomic; bit 4: a sends to b; bits 5, 6: d sends a SEND, a WRITE to c;
 * bit 7: f sends a SEND to e).
 * The queue pairs are reset to PSN 0 for every input, so one input replays
 * the same way. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "tbrt.h"
#include "fuzz_common.h"
#include "soft/wire/udp/udp.h"

#define REGION 65536            /* each QP's registered buffer */
#define GUARD 4096              /* untouchable bytes either side of it */
#define DEPTH 16
#define QKEY 0x11111111u
#define PKT_MAX 1600            /* a datagram's bytes from the input (MTU 1024 + headers) */

struct end {
    int type;                   /* IBV_QPT_RC, _UC, _UD */
    tbrt_cq *cq;
    tbrt_qp *qp;
    tbrt_mr *mr;
    uint8_t *mem;               /* GUARD + REGION + GUARD */
};

static tbrt_dev *dev;
static tbrt_pd *pd;
/* a, b (RC, each other's peers), c, d (UC, the same), u (UD), e, f (RC, the
 * same; e's receives from the SRQ) */
enum { A, B, C, D, U, E, F, NENDS };
static struct end ends[NENDS];
static tbrt_srq *srq;           /* e's */
/* the QP a record's flags aim at */
static const int target_of[8] = {A, B, C, U, E, A, B, C};
static const int peer_of[NENDS] = {B, A, D, C, -1, F, E};
static int gid_index = -1;
static int sock = -1;
static struct sockaddr_in wire_addr;
static struct udp_path path;    /* what the wire sees of our datagrams */

static uint8_t *region(struct end *e) { return e->mem + GUARD; }

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

/* flags bits 6 and 7 (see the top): keys and PSNs a blind fuzzer would
 * not guess, so it gets past the checks into what lies behind them */
static void aim(uint8_t *pkt, uint32_t plen, uint8_t flags, struct end *t, uint32_t *psn)
{
    unsigned f = udp_op_flags(pkt[0]);
    if (flags & 0x80) {
        pkt[9] = (uint8_t)(*psn >> 16);
        pkt[10] = (uint8_t)(*psn >> 8);
        pkt[11] = (uint8_t)*psn;
        *psn = (*psn + 1) & 0xffffff;
    }
    if (!(flags & 0x40))
        return;
    uint32_t off = UDP_BTH + (f & UDP_F_DETH ? UDP_DETH : 0);
    if ((f & UDP_F_DETH) && plen >= UDP_BTH + UDP_DETH)
        put32(pkt + UDP_BTH, QKEY);
    if (!(f & (UDP_F_RETH | UDP_F_ATOMIC)))
        return;
    if (plen < off + 12)
        return;
    uint32_t low = (uint32_t)pkt[off + 5] << 16 | (uint32_t)pkt[off + 6] << 8 | pkt[off + 7];
    uint64_t va = (uintptr_t)region(t) - 2048 + (low % (REGION + 4096));
    put32(pkt + off, (uint32_t)(va >> 32));
    put32(pkt + off + 4, (uint32_t)va);
    put32(pkt + off + 8, t->mr->rkey);
}

static void die(const char *what)
{
    fprintf(stderr, "fuzz-udp-wire: %s: %s\n", what, dev ? tbrt_dev_why(dev) : strerror(errno));
    abort();
}

static void guards_check(void)
{
    for (int i = 0; i < NENDS; i++) {
        const uint8_t *m = ends[i].mem;
        for (size_t k = 0; k < GUARD; k++)
            if (m[k] != 0xa5 || m[GUARD + REGION + k] != 0xa5) {
                fprintf(stderr, "fuzz-udp-wire: a byte around QP %c's region was written "
                        "(offset %zd from it)\n", "abcduef"[i],
                        m[k] != 0xa5 ? (ssize_t)k - GUARD : (ssize_t)(REGION + k));
                abort();
            }
    }
}

static void modify(tbrt_qp *qp, struct ibv_qp_attr *a, int mask, const char *what)
{
    if (tbrt_qp_modify(qp, a, mask))
        die(what);
}

static void reset_qp(struct end *e)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RESET};
    modify(e->qp, &a, IBV_QP_STATE, "to RESET");
}

/* INIT -> RTR -> RTS against the other QP (UD: none), PSNs from 0. */
static void connect_qp(struct end *e, uint32_t peer_qpn)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY,
                             .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                                IBV_ACCESS_REMOTE_ATOMIC};
    if (e->type == IBV_QPT_UC)
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    modify(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                          (e->type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS), "to INIT");
    if (e->type == IBV_QPT_UD) {
        a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
        modify(e->qp, &a, IBV_QP_STATE, "to RTR");
        a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 0};
        modify(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN, "to RTS");
        return;
    }
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
                             .dest_qp_num = peer_qpn, .rq_psn = 0, .max_dest_rd_atomic = 4,
                             .min_rnr_timer = 1};
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
    memcpy(a.ah_attr.grh.dgid.raw, path.dgid, 16);
    int rc_only = e->type == IBV_QPT_RC;
    modify(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                          IBV_QP_RQ_PSN |
                          (rc_only ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0),
           "to RTR");
    /* short timers, few retries: an input's traffic ends within it */
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 0, .timeout = 1, .retry_cnt = 1,
                             .rnr_retry = 1, .max_rd_atomic = 4};
    modify(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
                          (rc_only ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                         IBV_QP_MAX_QP_RD_ATOMIC : 0), "to RTS");
}

/* Receives for a QP (e's into the SRQ, which keeps what it has: an
 * input tops it up to DEPTH / 2 at most, counting what came back) */
static uint32_t srq_posted;

static void post_recvs(struct end *e)
{
    bool shared = e == &ends[E];
    for (uint32_t i = 0; i < DEPTH / 2; i++) {
        if (shared && srq_posted >= DEPTH / 2)
            break;
        struct ibv_sge sge = {.addr = (uintptr_t)region(e) + i * (REGION / DEPTH),
                              .length = REGION / DEPTH, .lkey = e->mr->lkey};
        struct ibv_recv_wr wr = {.wr_id = shared ? 1000 + i : i, .sg_list = &sge, .num_sge = 1};
        if (shared) {
            /* full: our count of what came back is behind (a reset QP's
             * completions do not come), and full is what we wanted */
            if (tbrt_post_srq_recv(srq, &wr, NULL))
                break;
            srq_posted++;
        } else if (tbrt_post_recv(e->qp, &wr, NULL)) {
            die("post_recv");
        }
    }
}

/* A request of ours in flight: the peer's answers to it are what the
 * input may imitate. */
static void post_one(struct end *from, struct end *to, enum ibv_wr_opcode op)
{
    uint32_t len = op == IBV_WR_ATOMIC_FETCH_AND_ADD ? 8 : 3000;
    struct ibv_sge sge = {.addr = (uintptr_t)region(from) + REGION / 2, .length = len,
                          .lkey = from->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 100 + op, .sg_list = &sge, .num_sge = 1, .opcode = op,
                             .send_flags = IBV_SEND_SIGNALED};
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        wr.wr.atomic.remote_addr = (uintptr_t)region(to) + 8 * 64;
        wr.wr.atomic.rkey = to->mr->rkey;
        wr.wr.atomic.compare_add = 1;
    } else {
        wr.wr.rdma.remote_addr = (uintptr_t)region(to) + REGION / 4;
        wr.wr.rdma.rkey = to->mr->rkey;
    }
    if (tbrt_post_send(from->qp, &wr, NULL))
        die("post_send");
}

/* A turn of the device (the UDP wire reads its socket in it), and every
 * completion checked for a status the API has. */
static void turn(void)
{
    for (int i = 0; i < NENDS; i++) {
        struct ibv_wc wc[16];
        int n = tbrt_cq_poll(ends[i].cq, 16, wc);
        if (n < 0)
            return;             /* an overrun is reported; not a crash */
        for (int k = 0; k < n; k++) {
            if (wc[k].wr_id >= 1000 && wc[k].wr_id < 1000 + DEPTH && srq_posted)
                srq_posted--;   /* an SRQ receive back, finished or flushed */
            if (wc[k].status > IBV_WC_TM_RNDV_INCOMPLETE) {
                fprintf(stderr, "fuzz-udp-wire: completion status %d\n", wc[k].status);
                abort();
            }
        }
    }
}

/* FUZZ_VERBOSE=1: what each QP's counters say after an input (replaying
 * one by hand). */
static void tell(void)
{
    for (int i = 0; i < NENDS; i++) {
        const char *names[64];
        uint64_t v[64];
        int n = tbrt_dev_counters(dev, ends[i].qp->qp_num, names, v, 64);
        fprintf(stderr, "QP %c:", "abcduef"[i]);
        for (int k = 0; k < n; k++)
            if (v[k])
                fprintf(stderr, " %s=%llu", names[k], (unsigned long long)v[k]);
        fprintf(stderr, "\n");
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* a port of our own for the wire (one the kernel just found free): a
     * fuzzer beside a running fabric must not talk to it; and a fabric of
     * its own */
    char port[16];
    const char *p = getenv("TBRT_SOFT_UDP_PORT");
    if (!p) {
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET};
        socklen_t al = sizeof a;
        if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) ||
            getsockname(s, (struct sockaddr *)&a, &al))
            die("a free UDP port");
        close(s);
        snprintf(port, sizeof port, "%u", ntohs(a.sin_port));
        setenv("TBRT_SOFT_UDP_PORT", port, 1);
        p = port;
    }
    setenv("TBRT_SOFT_FABRIC", "fuzz-udp", 0);
    tbrt_dev_opts o = {.personality = "linux-rc", .wire = "udp"};
    char err[256];
    if (tbrt_dev_open("soft0", &o, &dev, err, sizeof err)) {
        fprintf(stderr, "fuzz-udp-wire: open soft0: %s\n", err);
        exit(1);
    }
    if (tbrt_pd_alloc(dev, &pd))
        die("pd");
    gid_index = fuzz_loopback_gid(dev);
    if (gid_index < 0)
        die("no GID ::ffff:127.0.0.1 on port 1");
    for (int i = 0; i < NENDS; i++) {
        struct end *e = &ends[i];
        e->type = i == C || i == D ? IBV_QPT_UC : i == U ? IBV_QPT_UD : IBV_QPT_RC;
        e->mem = malloc(GUARD + REGION + GUARD);
        if (!e->mem)
            die("malloc");
        memset(e->mem, 0xa5, GUARD + REGION + GUARD);
        if (tbrt_cq_create(dev, 256, &e->cq))
            die("cq");
        if (i == E) {
            struct ibv_srq_attr sa = {.max_wr = DEPTH, .max_sge = 1};
            if (tbrt_srq_create(pd, &sa, &srq))
                die("srq");
        }
        tbrt_qp_init qi = {.send_cq = e->cq, .recv_cq = e->cq, .qp_type = e->type,
                           .srq = i == E ? srq : NULL,
                           .cap = {.max_send_wr = DEPTH, .max_recv_wr = DEPTH,
                                   .max_send_sge = 1, .max_recv_sge = 1}};
        if (tbrt_qp_create(pd, &qi, &e->qp))
            die("qp");
        if (tbrt_mr_reg(pd, region(e), REGION, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                                   IBV_ACCESS_REMOTE_READ |
                                                   IBV_ACCESS_REMOTE_ATOMIC, &e->mr))
            die("mr");
    }
    sock = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t ml = sizeof me;
    if (sock < 0 || bind(sock, (struct sockaddr *)&me, sizeof me) ||
        getsockname(sock, (struct sockaddr *)&me, &ml))
        die("our socket");
    wire_addr = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(p)),
                                     .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    memcpy(path.sgid, fuzz_loopback, 16);
    memcpy(path.dgid, fuzz_loopback, 16);
    path.sport = ntohs(me.sin_port);
    path.dport = (uint16_t)atoi(p);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* what the last input left on the way (retransmits, late answers)
     * arrives now, at queue pairs in RESET, which drop it: each input
     * starts from the same state */
    for (int i = 0; i < NENDS; i++)
        reset_qp(&ends[i]);
    for (int i = 0; i < 4; i++)
        turn();
    for (int i = 0; i < NENDS; i++) {
        connect_qp(&ends[i], peer_of[i] < 0 ? 0 : ends[peer_of[i]].qp->qp_num);
        post_recvs(&ends[i]);
    }
    uint8_t what = data[0];
    static const enum ibv_wr_opcode ops[3] = {IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ};
    for (int k = 0; k < 3; k++)
        if (what & (1u << k))
            post_one(&ends[B], &ends[A], ops[k]);
    if (what & 8)
        post_one(&ends[B], &ends[A], IBV_WR_ATOMIC_FETCH_AND_ADD);
    if (what & 16)
        post_one(&ends[A], &ends[B], IBV_WR_SEND);
    if (what & 32)
        post_one(&ends[D], &ends[C], IBV_WR_SEND);
    if (what & 64)
        post_one(&ends[D], &ends[C], IBV_WR_RDMA_WRITE);
    if (what & 128)
        post_one(&ends[F], &ends[E], IBV_WR_SEND);
    size_t off = 1;
    uint8_t pkt[PKT_MAX + UDP_ICRC];
    uint32_t psn[8] = {0};
    while (off + 3 <= size) {
        uint8_t flags = data[off];
        size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
        off += 3;
        size_t n = len < size - off ? len : size - off;
        if (n > PKT_MAX)
            n = PKT_MAX;
        memcpy(pkt, data + off, n);
        off += n;
        uint32_t plen = (uint32_t)n;
        if (!(flags & 0x10)) {
            if (plen < UDP_BTH)
                continue;       /* the wire drops it before its CRC */
            struct end *t = &ends[target_of[flags & 7]];
            if (!(flags & 8)) {
                uint32_t qpn = t->qp->qp_num;
                pkt[5] = (uint8_t)(qpn >> 16);
                pkt[6] = (uint8_t)(qpn >> 8);
                pkt[7] = (uint8_t)qpn;
            }
            aim(pkt, plen, flags, t, &psn[flags & 7]);
            struct udp_piece body = {pkt + UDP_BTH, plen - UDP_BTH};
            uint32_t c = udp_icrc(&path, pkt, UDP_BTH, &body, 1, 0);
            for (int b = 0; b < 4; b++)
                pkt[plen + b] = (uint8_t)(c >> (8 * b));
            plen += UDP_ICRC;
        }
        if (sendto(sock, pkt, plen, 0, (struct sockaddr *)&wire_addr, sizeof wire_addr) < 0)
            die("sendto");
        if (flags & 0x20)
            turn();
    }
    for (int i = 0; i < 4; i++)
        turn();
    guards_check();
    if (getenv("FUZZ_VERBOSE"))
        tell();
    return 0;
}
