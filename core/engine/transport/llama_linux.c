/* llama_linux.c - llama.cpp's Linux RDMA transport, byte for byte
 * (transport.h; framing "llama-linux").
 *
 * llama.cpp's ggml-rpc over RC has no frame header: every send call is cut
 * into SENDs of at most 256 KiB, posted one at a time (the next only after
 * the previous completed: stop-and-wait), inline when the QP grants inline
 * data of that size (llama.cpp asks for 256 bytes). The receiver pre-posts
 * 24 receives of 256 KiB at INIT, before RTR, and its reader takes one
 * completion per SEND. So on this wire the message boundaries are the send
 * calls: a peer that reads 1 byte takes one whole SEND for it, and the
 * caller must send each field the way llama.cpp reads it (tbrt.ggml_rpc
 * does). flush() has nothing to do.
 *
 * Receiving, tbrt is a byte stream as in rdma.c (partial reads, a receive
 * reposted once drained), so it takes any chunking. A SEND that starts with
 * a whole tbrt header is a tbrt peer in its own framing: the link says so
 * instead of handing the header over as data. QP numbers in the caps: psn =
 * qpn & 0xffffff, as llama.cpp does; a peer whose psn is not is no
 * llama.cpp peer (tbrt's own framing draws it at random).
 *
 * One completion queue serves both directions (llama.cpp has two; the
 * engine sleeps on one fd): nothing of that shows on the wire. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/transport/framing.h"
#include "engine/transport/transport.h"
#include "util/util.h"
#include "util/copy.h"

#define LLAMA_RX_DEPTH 24       /* receives pre-posted, of TBRT_LLAMA_LINUX_CHUNK each */
#define LLAMA_SEND_WR 4
#define LLAMA_RECV_WR (LLAMA_RX_DEPTH + 4)
#define LLAMA_INLINE 256        /* inline bytes llama.cpp asks the QP for */
#define LLAMA_HOP_LIMIT 1
#define WC_BATCH 32

/* ---- setup ------------------------------------------------------------------ */

int link_llama_linux_setup(struct xport *x, char *err, size_t errlen)
{
    tbrt_dev *dev = x->dev;
    struct ibv_port_attr pa;
    tbrt_port_query(dev, x->port, &pa);
    x->nbuf = LLAMA_RX_DEPTH;
    x->stride = TBRT_LLAMA_LINUX_CHUNK;
    x->hdr = 0;
    x->payload = x->stride;
    x->framing = TBRT_FRAMING_LLAMA_LINUX;
    x->qp_type = IBV_QPT_RC;
    if (pa.max_msg_sz && x->stride > pa.max_msg_sz)
        return err_set(err, errlen, EINVAL, "link %d: probe: llama-linux SENDs of %u bytes exceed "
                       "%s's max message size %u", x->link_id, x->stride, tbrt_dev_name(dev),
                       pa.max_msg_sz);
    int rc;
#define STEP(call, what)                                                                 \
    do {                                                                                 \
        if ((rc = (call)) != 0)                                                          \
            return err_set(err, errlen, -rc, "link %d: probe: %s: %s", x->link_id, what, \
                           tbrt_dev_why(dev));                                          \
    } while (0)
    STEP(tbrt_pd_alloc(dev, &x->pd), "alloc_pd");
    STEP(tbrt_cq_create(dev, LLAMA_SEND_WR + LLAMA_RECV_WR + 8, &x->cq), "create_cq");
    tbrt_qp_init qi = {.send_cq = x->cq, .recv_cq = x->cq, .qp_type = IBV_QPT_RC,
                       .cap = {.max_send_wr = LLAMA_SEND_WR, .max_recv_wr = LLAMA_RECV_WR,
                               .max_send_sge = 1, .max_recv_sge = 1,
                               .max_inline_data = LLAMA_INLINE}};
    rc = tbrt_qp_create(x->pd, &qi, &x->qp);
    if (rc == -EINVAL) {
        /* a provider that refuses inline data outright: go without it */
        qi.cap.max_inline_data = 0;
        rc = tbrt_qp_create(x->pd, &qi, &x->qp);
    }
    if (rc)
        return err_set(err, errlen, -rc, "link %d: probe: create_qp: %s", x->link_id,
                       tbrt_dev_why(dev));
    /* what the provider granted, which may be less (mlx5 here: none) */
    x->max_inline = TBRT_MIN(qi.cap.max_inline_data, (uint32_t)LLAMA_INLINE);
    x->send_ring_bytes = x->stride;
    x->ring_bytes = (size_t)x->nbuf * x->stride;
    x->send_mem = rdma_ring_alloc(x->send_ring_bytes);
    x->recv_mem = rdma_ring_alloc(x->ring_bytes);
    if (!x->send_mem || !x->recv_mem)
        return err_set(err, errlen, ENOMEM, "link %d: probe: cannot map %zu + %zu bytes of "
                       "buffers", x->link_id, x->send_ring_bytes, x->ring_bytes);
    /* llama.cpp's access flags: the send buffer is only read by the device */
    STEP(tbrt_mr_reg(x->pd, x->send_mem, x->send_ring_bytes, IBV_ACCESS_LOCAL_WRITE,
                     &x->send_mr), "reg_mr send buffer");
    STEP(tbrt_mr_reg(x->pd, x->recv_mem, x->ring_bytes,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &x->recv_mr),
         "reg_mr receive ring");
#undef STEP
    x->inq_cap = x->nbuf;
    x->inq = calloc(x->inq_cap, sizeof *x->inq);
    x->repost = calloc(x->nbuf, sizeof *x->repost);
    if (!x->inq || !x->repost)
        return err_set(err, errlen, ENOMEM, "link %d: probe: out of memory", x->link_id);
    x->pend_buf = -1;
    x->psn = x->qp->qp_num & 0xffffff;
    return 0;
}

/* ---- activation ------------------------------------------------------------- */

static int llama_activate(struct xport *x, const tbrt_caps *peer)
{
    if (peer->psn != (peer->qpn & 0xffffff)) {
        char m[TBRT_WHY_MAX];
        wire_mismatch(m, sizeof m, "activate: the peer's caps carry a psn that is not "
                      "qpn & 0xffffff, which llama.cpp's Linux transport always sends",
                      WIRE_LLAMA_LINUX, WIRE_TBRT);
        x->peer_wire = WIRE_TBRT;
        return xport_fail(x, EPROTO, "%s", m);
    }
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = x->port,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                               IBV_ACCESS_LOCAL_WRITE};
    int rc = rdma_modify(x, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                         IBV_QP_ACCESS_FLAGS, "RESET->INIT");
    if (rc)
        return rc;
    /* all 24 receives before RTR, as llama.cpp posts them */
    for (uint32_t i = 0; i < x->nbuf; i++)
        if ((rc = rdma_post_recv(x, i)) != 0)
            return rc;
    x->recv_posted = x->nbuf;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = x->mtu;
    a.dest_qp_num = peer->qpn;
    a.rq_psn = peer->psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
    a.ah_attr.grh.hop_limit = LLAMA_HOP_LIMIT;
    a.ah_attr.grh.sgid_index = (uint8_t)x->gid_index;
    a.ah_attr.dlid = 0;
    a.ah_attr.port_num = x->port;
    rc = rdma_modify(x, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                     "INIT->RTR");
    if (rc)
        return rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = x->psn;
    a.max_rd_atomic = 1;
    rc = rdma_modify(x, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC, "RTR->RTS");
    if (rc)
        return rc;
    x->peer = *peer;
    return 0;
}

/* ---- completions -------------------------------------------------------------- */

static int chunk_arrived(struct xport *x, const struct ibv_wc *wc)
{
    uint32_t buf = (uint32_t)(wc->wr_id & 0xffff);
    if (buf >= x->nbuf)
        return xport_fail(x, EPROTO, "recv completion for receive %u of %u", buf, x->nbuf);
    uint32_t len = wc->byte_len;
    if (len > x->stride)
        return xport_fail(x, EPROTO, "recv: a SEND of %u bytes into a %u-byte receive", len,
                         x->stride);
    const uint8_t *at = x->recv_mem + (size_t)buf * x->stride;
    if (frame_is_tbrt(at, len)) {
        char m[TBRT_WHY_MAX];
        wire_mismatch(m, sizeof m, "recv: a SEND that starts with tbrt's TBRT header",
                      WIRE_LLAMA_LINUX, WIRE_TBRT);
        x->peer_wire = WIRE_TBRT;
        return xport_fail(x, EPROTO, "%s", m);
    }
    x->recv_posted--;
    x->stats.frames_recv++;
    if (len == 0)
        return rdma_give_back(x, buf) ? -x->err : 0;
    struct link_inq *q = &x->inq[ring_at(x->inq_head, x->inq_count, x->inq_cap)];
    q->buf = buf;
    q->off = 0;
    q->len = len;
    x->inq_count++;
    x->inq_bytes += len;
    return 0;
}

static int llama_progress(struct xport *x)
{
    struct ibv_wc wc[WC_BATCH];
    int n = tbrt_cq_poll(x->cq, WC_BATCH, wc);
    if (n < 0)
        return xport_fail(x, -n, "poll_cq: %s", tbrt_dev_why(x->dev));
    for (int i = 0; i < n; i++) {
        bool is_recv = wc[i].wr_id & RDMA_RECV_TAG;
        if (wc[i].status != IBV_WC_SUCCESS) {
            const char *v = tbrt_dev_vendor_err(x->dev, wc[i].vendor_err);
            return xport_fail(x, wc[i].status == IBV_WC_RETRY_EXC_ERR ? ECONNRESET : EIO,
                             "%s completion: %s%s%s", is_recv ? "recv" : "send",
                             dev_wc_status_name(wc[i].status), v[0] ? ": " : "", v);
        }
        if (is_recv) {
            int rc = chunk_arrived(x, &wc[i]);
            if (rc)
                return rc;
        } else {
            if (!x->send_count)
                return xport_fail(x, EPROTO, "a send completion with no SEND in flight");
            x->send_count = 0;
        }
    }
    x->stats.completions += (uint64_t)n;
    if (n == 0) {
        x->stats.spins++;
        /* drained receives go back when nothing came (rdma_repost) */
        if (x->repost_n && rdma_repost(x))
            return -x->err;
    }
    return n;
}

/* ---- sending -------------------------------------------------------------------- */

static int post_chunk(struct xport *x, const uint8_t *p, uint32_t n)
{
    struct ibv_sge sge = {.length = n};
    struct ibv_send_wr wr = {.wr_id = 0, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED};
    bool inl = n <= x->max_inline;
    if (inl) {
        /* the device copies inline data at post: the caller's bytes go as they are */
        sge.addr = (uintptr_t)p;
        wr.send_flags |= IBV_SEND_INLINE;
    } else {
        if (p != x->send_mem)   /* a committed view is there already */
            bulk_copy(x->send_mem, p, n);
        sge.addr = (uintptr_t)x->send_mem;
        sge.lkey = x->send_mr->lkey;
    }
    int rc = tbrt_post_send(x->qp, &wr, NULL);
    if (rc)
        return xport_fail(x, -rc, "post_send (%u bytes%s): %s", n, inl ? ", inline" : "",
                         tbrt_dev_why(x->dev));
    x->send_count = 1;
    x->stats.frames_sent++;
    if (inl)
        x->stats.inline_sends++;
    return 0;
}

/* One SEND per TBRT_LLAMA_LINUX_CHUNK of this call, the next only once the
 * previous completed. Returns the bytes posted, or -EAGAIN while one is
 * still in flight; a caller that sends the rest next keeps llama.cpp's
 * chunk boundaries (every 256 KiB from the start of its call). */
static intptr_t llama_send(struct xport *x, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    size_t done = 0;
    while (done < len) {
        if (x->send_count) {
            if (llama_progress(x) < 0)
                return -x->err;
            if (x->send_count)
                break;
        }
        uint32_t n = (uint32_t)TBRT_MIN(len - done, (size_t)TBRT_LLAMA_LINUX_CHUNK);
        if (post_chunk(x, p + done, n))
            return -x->err;
        done += n;
    }
    x->stats.bytes_sent += done;
    return done ? (intptr_t)done : -EAGAIN;
}

/* A view is the one SEND buffer, free only while no SEND is in flight;
 * each commit is one SEND, as one send call of that size would be. */
static intptr_t llama_send_view(struct xport *x, size_t want, uint8_t **out)
{
    if (x->send_count) {
        if (llama_progress(x) < 0)
            return -x->err;
        if (x->send_count)
            return -EAGAIN;
    }
    *out = x->send_mem;
    return (intptr_t)(want && want < x->stride ? want : x->stride);
}

static int llama_commit(struct xport *x, size_t n)
{
    if (post_chunk(x, x->send_mem, (uint32_t)n))
        return -x->err;
    x->stats.bytes_sent += n;
    return 0;
}

static int llama_flush(struct xport *x)
{
    (void)x;                    /* every SEND went out in send() */
    return 0;
}

/* ---- waiting -------------------------------------------------------------------- */

static int llama_arm(struct xport *x)
{
    tbrt_cq_ack(x->cq);
    int rc = tbrt_cq_arm(x->cq);
    if (rc)
        return xport_fail(x, -rc, "req_notify_cq: %s", tbrt_dev_why(x->dev));
    rc = llama_progress(x);     /* what came before arming raised no event */
    return rc < 0 ? rc : rc > 0 ? 1 : 0;
}

static bool llama_writable(struct xport *x) { return x->send_count == 0; }

static bool llama_idle(struct xport *x) { return x->send_count == 0; }

static int llama_inflight(struct xport *x) { return (int)x->send_count; }

const struct link_transport link_llama_linux = {
    .name = "llama-linux",
    .send = llama_send,
    .recv = rdma_recv,
    .flush = llama_flush,
    .progress = llama_progress,
    .activate = llama_activate,
    .arm = llama_arm,
    .fds = rdma_fds,
    .writable = llama_writable,
    .readable = rdma_readable,
    .idle = llama_idle,
    .inflight = llama_inflight,
    .teardown = rdma_teardown,
    .send_view = llama_send_view,
    .commit = llama_commit,
    .recv_view = rdma_recv_view,
    .release = rdma_release,
};
