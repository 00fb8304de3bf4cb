/* soft_cq.c - completion queues of the soft device.
 *
 * A CQ is a ring in process memory that only its owner writes: finished
 * work is reported by whoever did it as a result in the queue pair's slot
 * (soft_exec.c), and the owner turns results into completions when it
 * polls (soft_reap_*, soft_post.c), from its own records of what was
 * posted. A ring that fills up before the user polls overruns, as on
 * hardware. The completion fd is a datagram socket in this user's private
 * directory (0700: no other user can send to it, or fill its queue so
 * that real wake-ups are lost), named from the process, the context and
 * the CQ's doorbell: a peer that leaves a result while the doorbell is armed
 * disarms it and sends one byte (soft_ring). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "soft/soft.h"
#include "util/util.h"

static int bind_wake(struct soft_dev *sd, uint32_t db)
{
    struct sockaddr_un a;
    socklen_t len;
    int rc = soft_wake_addr(sd, sd->pid, sd->ctx_id, db, &a, &len);
    if (rc)
        return rc;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    unlink(a.sun_path);         /* ours by name (pid and context): a leftover */
    if (bind(fd, (struct sockaddr *)&a, len)) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

static void unbind_wake(struct soft_dev *sd, uint32_t db)
{
    struct sockaddr_un a;
    socklen_t len;
    if (soft_wake_addr(sd, sd->pid, sd->ctx_id, db, &a, &len) == 0)
        unlink(a.sun_path);
}

int soft_create_cq(tbrt_dev *dev, int cqe, tbrt_cq **out)
{
    struct soft_dev *sd = soft_of(dev);
    if (cqe > SOFT_MAX_CQE)
        return dev_fail(dev, EINVAL, "create_cq: %d entries exceeds max_cqe %d", cqe, SOFT_MAX_CQE);
    uint32_t cap = 1;
    while (cap < (uint32_t)cqe)
        cap <<= 1;
    uint32_t db = 0;
    while (db < SOFT_MAX_CQ && sd->db_used[db])
        db++;
    if (db == SOFT_MAX_CQ)
        return dev_fail(dev, ENOMEM, "create_cq: at most %d completion queues per device",
                        SOFT_MAX_CQ);
    struct soft_cq *c = calloc(1, sizeof *c);
    struct ibv_wc *ring = calloc(cap, sizeof *ring);
    if (!c || !ring) {
        free(c);
        free(ring);
        return dev_fail(dev, ENOMEM, "create_cq: out of memory");
    }
    int fd = bind_wake(sd, db);
    if (fd < 0) {
        free(c);
        free(ring);
        return dev_fail(dev, -fd, "create_cq: completion socket in %s: %s", sd->shm_dir,
                        fd == -ENAMETOOLONG ? "the directory's path is too long for a socket "
                                              "(a shorter TBRT_SHM_DIR)" : strerror(-fd));
    }
    sd->db_used[db] = 1;
    c->cap = cap;
    c->ring = ring;
    c->db = db;
    c->dbp = (struct soft_doorbell *)((char *)sd->ctx + SOFT_CTX_DB_OFF) + db;
    atomic_store(&c->dbp->armed, 0);
    c->cq = (tbrt_cq){.dev = dev, .cqe = (int)cap, .fd = fd};
    c->next = sd->cqs;
    sd->cqs = c;
    *out = &c->cq;
    return 0;
}

int soft_destroy_cq(tbrt_cq *cq)
{
    struct soft_cq *c = (struct soft_cq *)cq;
    struct soft_dev *sd = soft_of(cq->dev);
    for (struct soft_qp *q = sd->qps; q; q = q->next)
        if (q->qp.send_cq == cq || q->qp.recv_cq == cq)
            return dev_fail(cq->dev, EBUSY, "destroy_cq: QP 0x%x still uses it", q->qp.qp_num);
    for (struct soft_cq **pp = &sd->cqs; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    close(cq->fd);
    unbind_wake(sd, c->db);
    sd->db_used[c->db] = 0;
    free(c->ring);
    free(c);
    return 0;
}

bool soft_cq_add(struct soft_cq *c, const struct ibv_wc *wc)
{
    if (c->tail - c->head >= c->cap) {
        c->overrun = true;
        return false;
    }
    c->ring[c->tail++ & (c->cap - 1)] = *wc;
    return true;
}

/* Finished work of the queues that feed this CQ, oldest first (by the
 * executors' stamps; what needs handling now goes first). */
static void reap(struct soft_dev *sd, tbrt_cq *cq)
{
    for (;;) {
        struct soft_qp *best = NULL;
        bool best_recv = false;
        uint64_t best_stamp = UINT64_MAX, stamp;
        for (struct soft_qp *q = sd->qps; q; q = q->next) {
            int r;
            if (q->qp.recv_cq == cq && (r = soft_recv_ready(q, &stamp)) != 0 &&
                (r < 0 || !best || stamp < best_stamp)) {
                best = q, best_recv = true, best_stamp = r < 0 ? 0 : stamp;
            }
            if (q->qp.send_cq == cq && (r = soft_send_ready(q, &stamp)) != 0 &&
                (r < 0 || !best || stamp < best_stamp)) {
                best = q, best_recv = false, best_stamp = r < 0 ? 0 : stamp;
            }
        }
        if (!best || !(best_recv ? soft_recv_take(best) : soft_send_take(best)))
            return;
    }
}

int soft_poll_cq(tbrt_cq *cq, int n, struct ibv_wc *wc)
{
    struct soft_cq *c = (struct soft_cq *)cq;
    struct soft_dev *sd = soft_of(cq->dev);
    soft_check_attention(sd);
    soft_progress(sd);
    /* a peer's run of our queue may have failed just now: ERR comes with
     * the completion that says so, as on hardware */
    soft_check_attention(sd);
    reap(sd, cq);
    if (TBRT_UNLIKELY(c->overrun))
        return dev_fail(cq->dev, EOVERFLOW,
                        "poll_cq: completion queue overrun (more than %u completions outstanding)",
                        c->cap);
    int i = 0;
    for (; i < n && c->head != c->tail; i++)
        wc[i] = c->ring[c->head++ & (c->cap - 1)];
    return i;
}

int soft_req_notify_cq(tbrt_cq *cq)
{
    struct soft_cq *c = (struct soft_cq *)cq;
    atomic_store(&c->dbp->armed, 1);
    atomic_thread_fence(memory_order_seq_cst);
    return 0;
}

int soft_ack_cq_events(tbrt_cq *cq)
{
    char buf[64];
    int n = 0;
    while (recv(cq->fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
        n++;
    return n;
}
