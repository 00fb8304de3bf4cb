/* rdma.c - the RDMA transport of a link: stride rings over a verbs device.
 *
 * Per direction a ring of nbuf registered strides. A stride starts with the
 * frame header (framing.h); send() coalesces bytes into the current stride
 * and posts it when full, flush() posts a partly filled one at a message
 * boundary. In fixed framing every SEND carries the whole stride (TN3205: a
 * SEND and its RECV must cover the same number of 4 KiB frames); in variable
 * framing only the filled bytes. recv() hands out bytes of completed
 * strides in order, partial reads included, and reposts a stride once it is
 * drained. Send strides are freed by their completions, in order.
 *
 * Receives are posted at INIT on Linux (so nothing meets an empty queue) and
 * after RTS on Apple (its provider refuses them earlier). */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>

#include "engine/framing.h"
#include "engine/link.h"
#include "util/util.h"

#define RECV_TAG (1ull << 20)   /* wr_id bit of receive completions */
#define WC_BATCH 32

static const char *wc_status_text(int st) { return dev_wc_status_name(st); }

/* ---- setup ------------------------------------------------------------------ */

static void *ring_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

int link_rdma_setup(tbrt_link *l, char *err, size_t errlen)
{
    tbrt_dev *dev = l->dev;
    struct ibv_port_attr pa;
    tbrt_port_query(dev, l->port, &pa);
    l->nbuf = l->opts.nbuf;
    l->stride = l->opts.stride;
    l->payload = l->stride - TBRT_STRIDE_HDR;
    l->framing = l->opts.framing ? l->opts.framing
                                 : (l->flavor == TBRT_FLAVOR_APPLE ? TBRT_FRAMING_FIXED
                                                                   : TBRT_FRAMING_VARIABLE);
    l->qp_type = l->opts.qp_type ? l->opts.qp_type
                                 : (l->flavor == TBRT_FLAVOR_APPLE ? IBV_QPT_UC : IBV_QPT_RC);
    if (pa.max_msg_sz && l->stride > pa.max_msg_sz)
        return err_set(err, errlen, EINVAL, "link %d: probe: stride %u exceeds %s's max "
                       "message size %u", l->id, l->stride, tbrt_dev_name(dev), pa.max_msg_sz);
    /* queue depth: work requests, or 4 KiB frames on Apple (TN3205) */
    uint64_t depth = l->nbuf;
    if (l->flavor == TBRT_FLAVOR_APPLE) {
        depth = (uint64_t)l->nbuf * (l->stride / 4096);
        struct ibv_device_attr da;
        tbrt_dev_query(dev, &da);
        if (depth > (uint64_t)da.max_qp_wr)
            return err_set(err, errlen, EINVAL, "link %d: probe: a ring of %u x %u bytes is %llu "
                           "frames per queue; %s allows %d (TN3205 counts depth in 4 KiB frames)",
                           l->id, l->nbuf, l->stride, (unsigned long long)depth,
                           tbrt_dev_name(dev), da.max_qp_wr);
    }
    int rc;
#define STEP(call, what)                                                                 \
    do {                                                                                 \
        if ((rc = (call)) != 0)                                                          \
            return err_set(err, errlen, -rc, "link %d: probe: %s: %s", l->id, what,       \
                           tbrt_dev_why(dev));                                          \
    } while (0)
    STEP(tbrt_pd_alloc(dev, &l->pd), "alloc_pd");
    STEP(tbrt_cq_create(dev, (int)(2 * l->nbuf + 8), &l->cq), "create_cq");
    tbrt_qp_init qi = {.send_cq = l->cq, .recv_cq = l->cq, .qp_type = l->qp_type,
                       .cap = {.max_send_wr = (uint32_t)depth, .max_recv_wr = (uint32_t)depth,
                               .max_send_sge = 1, .max_recv_sge = 1}};
    STEP(tbrt_qp_create(l->pd, &qi, &l->qp), "create_qp");
    l->ring_bytes = (size_t)l->nbuf * l->stride;
    l->send_mem = ring_alloc(l->ring_bytes);
    l->recv_mem = ring_alloc(l->ring_bytes);
    if (!l->send_mem || !l->recv_mem)
        return err_set(err, errlen, ENOMEM, "link %d: probe: cannot map 2 x %zu bytes of rings",
                       l->id, l->ring_bytes);
    /* Apple rejects LOCAL_WRITE-only regions, even for SEND/RECV */
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    STEP(tbrt_mr_reg(l->pd, l->send_mem, l->ring_bytes, access, &l->send_mr), "reg_mr send ring");
    STEP(tbrt_mr_reg(l->pd, l->recv_mem, l->ring_bytes, access, &l->recv_mr), "reg_mr recv ring");
#undef STEP
    l->inq = calloc(l->nbuf, sizeof *l->inq);
    if (!l->inq)
        return err_set(err, errlen, ENOMEM, "link %d: probe: out of memory", l->id);
    l->pend_buf = -1;
    l->send_seq = l->recv_seq = 1;
    if (l->flavor == TBRT_FLAVOR_LINUX) {
        uint32_t r = 0;
        if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
            r = (uint32_t)now_ns();
        l->psn = r & 0xffffff;
    }
    l->t = &link_rdma;
    return 0;
}

/* ---- activation ------------------------------------------------------------- */

static int post_recv(tbrt_link *l, uint32_t i)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(l->recv_mem + (size_t)i * l->stride),
                          .length = l->stride, .lkey = l->recv_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = RECV_TAG | i, .sg_list = &sge, .num_sge = 1};
    int rc = tbrt_post_recv(l->qp, &wr, NULL);
    if (rc)
        return link_fail(l, -rc, "post_recv stride %u: %s", i, tbrt_dev_why(l->dev));
    return 0;
}

static int post_all_recvs(tbrt_link *l)
{
    for (uint32_t i = 0; i < l->nbuf; i++) {
        int rc = post_recv(l, i);
        if (rc)
            return rc;
    }
    l->recv_posted = l->nbuf;
    return 0;
}

static int modify(tbrt_link *l, struct ibv_qp_attr *a, int mask, const char *what)
{
    int rc = tbrt_qp_modify(l->qp, a, mask);
    if (rc)
        return link_fail(l, -rc, "activate: %s: %s", what, tbrt_dev_why(l->dev));
    return 0;
}

static int rdma_activate(tbrt_link *l, const tbrt_caps *peer)
{
    bool rc_qp = l->qp_type == IBV_QPT_RC;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = l->port,
                            .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                               IBV_ACCESS_REMOTE_WRITE};
    int rc = modify(l, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                    "RESET->INIT");
    if (rc)
        return rc;
    if (l->flavor != TBRT_FLAVOR_APPLE && (rc = post_all_recvs(l)) != 0)
        return rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = l->mtu;
    a.dest_qp_num = peer->qpn;
    a.rq_psn = peer->psn;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = l->port;
    a.ah_attr.dlid = peer->lid;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.sgid_index = (uint8_t)l->gid_index;
    memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (rc_qp) {
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 1;    /* 0.01 ms: the receiver reposts as it reads */
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    if ((rc = modify(l, &a, mask, "INIT->RTR")) != 0)
        return rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = l->psn;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (rc_qp) {
        a.timeout = 14;         /* 4.096 us x 2^14 = 67 ms per try */
        a.retry_cnt = 7;
        a.rnr_retry = 7;        /* forever: the receiver reposts when it reads */
        a.max_rd_atomic = 1;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    if ((rc = modify(l, &a, mask, "RTR->RTS")) != 0)
        return rc;
    if (l->flavor == TBRT_FLAVOR_APPLE && (rc = post_all_recvs(l)) != 0)
        return rc;
    l->peer = *peer;
    l->info.peer_qpn = peer->qpn;
    return 0;
}

/* ---- completions -------------------------------------------------------------- */

static int frame_arrived(tbrt_link *l, const struct ibv_wc *wc)
{
    uint32_t buf = (uint32_t)(wc->wr_id & 0xffff);
    if (buf >= l->nbuf)
        return link_fail(l, EPROTO, "recv completion for stride %u of %u", buf, l->nbuf);
    const uint8_t *at = l->recv_mem + (size_t)buf * l->stride;
    uint32_t magic, len, seq, check;
    frame_hdr_read(at, &magic, &len, &seq, &check);
    if (magic != TBRT_SEG_MAGIC)
        return link_fail(l, EPROTO, "recv: frame magic 0x%x != RSEG (stream desynced)", magic);
    if (check != (uint32_t) ~(magic ^ len ^ seq))
        return link_fail(l, EPROTO, "recv: frame header check 0x%x != 0x%x (corrupted header)",
                         check, (uint32_t) ~(magic ^ len ^ seq));
    if (len > l->payload)
        return link_fail(l, EPROTO, "recv: frame length %u exceeds the stride payload %u",
                         len, l->payload);
    if (l->framing == TBRT_FRAMING_FIXED ? wc->byte_len != l->stride
                                         : wc->byte_len != TBRT_STRIDE_HDR + len)
        return link_fail(l, EPROTO, "recv: frame length %u but the SEND carried %u bytes "
                         "(%s framing expects %u; do both sides use the same framing?)",
                         len, wc->byte_len, l->framing == TBRT_FRAMING_FIXED ? "fixed" : "variable",
                         l->framing == TBRT_FRAMING_FIXED ? l->stride : TBRT_STRIDE_HDR + len);
    if (seq != l->recv_seq)
        return link_fail(l, EPROTO, "recv: frame seq %u != expected %u (a frame was %s on the "
                         "wire)", seq, l->recv_seq, seq > l->recv_seq ? "dropped" : "repeated");
    l->recv_seq++;
    l->recv_posted--;
    l->stats.frames_recv++;
    if (len == 0) {             /* nothing to read: straight back to the device */
        if (post_recv(l, buf))
            return -l->err;
        l->recv_posted++;
        return 0;
    }
    struct link_inq *q = &l->inq[(l->inq_head + l->inq_count) % l->nbuf];
    q->buf = buf;
    q->off = 0;
    q->len = len;
    l->inq_count++;
    l->inq_bytes += len;
    return 0;
}

static int rdma_progress(tbrt_link *l)
{
    struct ibv_wc wc[WC_BATCH];
    int n = tbrt_cq_poll(l->cq, WC_BATCH, wc);
    if (n < 0)
        return link_fail(l, -n, "poll_cq: %s", tbrt_dev_why(l->dev));
    for (int i = 0; i < n; i++) {
        bool is_recv = wc[i].wr_id & RECV_TAG;
        if (wc[i].status != IBV_WC_SUCCESS) {
            const char *v = tbrt_dev_vendor_err(l->dev, wc[i].vendor_err);
            return link_fail(l, wc[i].status == IBV_WC_RETRY_EXC_ERR ? ECONNRESET : EIO,
                             "%s completion: %s%s%s", is_recv ? "recv" : "send",
                             wc_status_text(wc[i].status), v[0] ? ": " : "", v);
        }
        if (is_recv) {
            int rc = frame_arrived(l, &wc[i]);
            if (rc)
                return rc;
        } else {
            uint32_t buf = (uint32_t)(wc[i].wr_id & 0xffff);
            if (!l->send_count || buf != l->send_head)
                return link_fail(l, EPROTO, "send completion for stride %u, expected %u", buf,
                                 l->send_head);
            l->send_head = (l->send_head + 1) % l->nbuf;
            l->send_count--;
        }
    }
    l->stats.completions += (uint64_t)n;
    if (n == 0)
        l->stats.spins++;
    /* busy or idle, the socket is looked at every millisecond or so (a UC
     * send to a dead peer completes like any other); the clock is read every
     * 64th call only */
    if ((++l->live_tick & 63) == 0) {
        int rc = link_check_liveness(l, false);
        if (rc)
            return rc;
    }
    return n;
}

/* ---- sending -------------------------------------------------------------------- */

static int post_pending(tbrt_link *l)
{
    if (l->pend_buf < 0)
        return 0;
    uint32_t i = (uint32_t)l->pend_buf;
    uint8_t *at = l->send_mem + (size_t)i * l->stride;
    uint32_t magic = TBRT_SEG_MAGIC, len = l->pend_len, seq = l->send_seq++;
    switch (l->inject) {        /* test hook: break the next frame on purpose */
    case 1: magic = 0x0badf00d; break;
    case 2: len = l->payload + 1; break;
    case 3: seq++; l->send_seq++; break;
    case 4: seq = seq - 1; l->send_seq--; break;
    }
    l->inject = 0;
    frame_hdr_write(at, magic, len, seq);
    uint32_t bytes = l->framing == TBRT_FRAMING_FIXED ? l->stride : TBRT_STRIDE_HDR + l->pend_len;
    struct ibv_sge sge = {.addr = (uintptr_t)at, .length = bytes, .lkey = l->send_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED};
    int rc = tbrt_post_send(l->qp, &wr, NULL);
    if (rc)
        return link_fail(l, -rc, "post_send stride %u (%u bytes): %s", i, bytes,
                         tbrt_dev_why(l->dev));
    l->send_count++;
    l->stats.frames_sent++;
    l->pend_buf = -1;
    l->pend_len = 0;
    return 0;
}

static bool acquire(tbrt_link *l)
{
    if (l->pend_buf >= 0)
        return true;
    if (l->send_count == l->nbuf) {
        if (rdma_progress(l) < 0 || l->send_count == l->nbuf)
            return false;
    }
    l->pend_buf = (int)((l->send_head + l->send_count) % l->nbuf);
    l->pend_len = 0;
    return true;
}

static intptr_t rdma_send(tbrt_link *l, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    size_t done = 0;
    while (done < len) {
        if (!acquire(l))
            break;
        uint8_t *at = l->send_mem + (size_t)l->pend_buf * l->stride + TBRT_STRIDE_HDR + l->pend_len;
        size_t n = TBRT_MIN(len - done, (size_t)(l->payload - l->pend_len));
        memcpy(at, p + done, n);
        l->pend_len += (uint32_t)n;
        done += n;
        if (l->pend_len == l->payload && post_pending(l))
            return -l->err;
    }
    if (l->state == TBRT_LINK_BROKEN)
        return -l->err;
    l->stats.bytes_sent += done;
    return done ? (intptr_t)done : -EAGAIN;
}

static int rdma_flush(tbrt_link *l)
{
    if (l->pend_buf >= 0 && l->pend_len == 0) {
        l->pend_buf = -1;       /* nothing written: give the stride back */
        return 0;
    }
    return post_pending(l);
}

/* ---- receiving ------------------------------------------------------------------ */

static intptr_t rdma_recv(tbrt_link *l, void *buf, size_t len)
{
    uint8_t *p = buf;
    size_t done = 0;
    while (done < len && l->inq_count) {
        struct link_inq *q = &l->inq[l->inq_head];
        size_t n = TBRT_MIN(len - done, (size_t)(q->len - q->off));
        memcpy(p + done, l->recv_mem + (size_t)q->buf * l->stride + TBRT_STRIDE_HDR + q->off, n);
        q->off += (uint32_t)n;
        done += n;
        l->inq_bytes -= n;
        if (q->off == q->len) {
            l->inq_head = (l->inq_head + 1) % l->nbuf;
            l->inq_count--;
            if (post_recv(l, q->buf))
                return -l->err;
            l->recv_posted++;
        }
    }
    l->stats.bytes_recv += done;
    return (intptr_t)done;
}

/* ---- waiting -------------------------------------------------------------------- */

static int rdma_arm(tbrt_link *l)
{
    tbrt_cq_ack(l->cq);         /* drain the events that woke us */
    int rc = tbrt_cq_arm(l->cq);
    if (rc)
        return link_fail(l, -rc, "req_notify_cq: %s", tbrt_dev_why(l->dev));
    /* a completion that arrived before arming raises no event: look again */
    rc = rdma_progress(l);
    return rc < 0 ? rc : rc > 0 ? 1 : 0;
}

static int rdma_fds(tbrt_link *l, int *fds, int max)
{
    int n = 0;
    if (max > n)
        fds[n++] = l->cq->fd;
    if (max > n)
        fds[n++] = l->fd;
    return n;
}

static bool rdma_writable(tbrt_link *l)
{
    return l->pend_buf >= 0 || l->send_count < l->nbuf;
}

static size_t rdma_readable(tbrt_link *l) { return l->inq_bytes; }

static bool rdma_idle(tbrt_link *l) { return l->send_count == 0; }

/* Destroy in the order hardware needs: the QP first (it can write into the
 * rings until it is gone), then the regions, the rings, the CQ, the PD, the
 * device. Never move the QP to ERR first: Apple's provider then fails every
 * region unmap. */
static void rdma_teardown(tbrt_link *l)
{
    if (l->qp) {
        tbrt_qp_destroy(l->qp);
        link_log_teardown(l, "qp");
        l->qp = NULL;
    }
    tbrt_mr *mrs[2] = {l->send_mr, l->recv_mr};
    for (int i = 0; i < 2; i++)
        if (mrs[i]) {
            int rc = tbrt_mr_dereg(mrs[i]);
            if (rc && !l->close_err) {
                l->close_err = -rc;
                snprintf(l->close_why, sizeof l->close_why, "dereg_mr: %s", tbrt_dev_why(l->dev));
            }
            link_log_teardown(l, "mr");
        }
    l->send_mr = l->recv_mr = NULL;
    uint8_t *mems[2] = {l->send_mem, l->recv_mem};
    for (int i = 0; i < 2; i++)
        if (mems[i]) {
            munmap(mems[i], l->ring_bytes);
            link_log_teardown(l, "buf");
        }
    l->send_mem = l->recv_mem = NULL;
    if (l->cq) {
        tbrt_cq_destroy(l->cq);
        link_log_teardown(l, "cq");
        l->cq = NULL;
    }
    if (l->pd) {
        tbrt_pd_free(l->pd);
        link_log_teardown(l, "pd");
        l->pd = NULL;
    }
    if (l->dev) {
        tbrt_dev_close(l->dev);
        link_log_teardown(l, "dev");
        l->dev = NULL;
    }
    free(l->inq);
    l->inq = NULL;
}

const struct link_transport link_rdma = {
    .name = "rdma",
    .send = rdma_send,
    .recv = rdma_recv,
    .flush = rdma_flush,
    .progress = rdma_progress,
    .activate = rdma_activate,
    .arm = rdma_arm,
    .fds = rdma_fds,
    .writable = rdma_writable,
    .readable = rdma_readable,
    .idle = rdma_idle,
    .teardown = rdma_teardown,
};
