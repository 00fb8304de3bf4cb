/* soft_cq.c - completion queues of the soft device.
 *
 * The ring lives in the context segment because peers write into it: the
 * receive completions of a queue pair are produced by the process that sent
 * the message. Producers claim a ticket with a CAS on `prod` (refusing when
 * the ring is full: a CQ overrun, as on hardware), write the entry, then
 * publish it by storing ticket+1 in its `seq`; the owner consumes in ticket
 * order. The completion fd is a datagram socket in the abstract namespace;
 * a producer that finds the CQ armed disarms it and sends it one byte. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "soft/soft.h"
#include "util/util.h"

#define SOFT_MAX_CQE 65536

static size_t cq_bytes(uint32_t cap)
{
    return sizeof(struct soft_cq_shared) + (size_t)cap * sizeof(struct soft_cqe);
}

int soft_create_cq(tbrt_dev *dev, int cqe, tbrt_cq **out)
{
    struct soft_dev *sd = soft_of(dev);
    if (cqe > SOFT_MAX_CQE)
        return dev_fail(dev, EINVAL, "create_cq: %d entries exceeds max_cqe %d", cqe, SOFT_MAX_CQE);
    uint32_t cap = 1;
    while (cap < (uint32_t)cqe)
        cap <<= 1;
    struct soft_cq *c = calloc(1, sizeof *c);
    if (!c)
        return dev_fail(dev, ENOMEM, "create_cq: out of memory");
    c->sh = soft_ctx_alloc(sd, cq_bytes(cap), &c->sh_off);
    if (!c->sh) {
        free(c);
        return dev_fail(dev, ENOMEM, "create_cq: device context full");
    }
    c->sh->cap = cap;
    snprintf(c->sh->sock, sizeof c->sh->sock, "tbrt-soft/%016llx/cq%u",
             (unsigned long long)sd->ctx->ctx_id, ++sd->next_handle);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(c->sh->sock);
    memcpy(a.sun_path + 1, c->sh->sock, n);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        soft_ctx_release(sd, c->sh_off, cq_bytes(cap));
        free(c);
        return dev_fail(dev, e, "create_cq: completion socket: %s", strerror(e));
    }
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
    soft_ctx_release(sd, c->sh_off, cq_bytes(c->sh->cap));
    free(c);
    return 0;
}

int soft_cq_push(struct soft_dev *sd, struct soft_cq_shared *cq, const struct ibv_wc *wc)
{
    uint64_t p;
    for (;;) {
        /* cons before prod: then prod >= cons always holds for what we read
         * (the other order could see a cons that already passed a stale prod
         * and call a wrapped-around difference an overrun) */
        uint64_t c = atomic_load_explicit(&cq->cons, memory_order_acquire);
        p = atomic_load_explicit(&cq->prod, memory_order_acquire);
        if (p - c >= cq->cap) {
            atomic_store(&cq->overrun, 1);
            return -EOVERFLOW;
        }
        if (atomic_compare_exchange_weak_explicit(&cq->prod, &p, p + 1, memory_order_acq_rel,
                                                  memory_order_relaxed))
            break;
    }
    struct soft_cqe *e = &cq->ring[p & (cq->cap - 1)];
    e->wc = *wc;
    atomic_store_explicit(&e->seq, p + 1, memory_order_release);
    /* pairs with the fence in req_notify: either the owner sees this entry
     * when it polls after arming, or we see it armed */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&cq->armed, memory_order_relaxed) &&
        atomic_exchange(&cq->armed, 0))
        soft_wake(sd, cq->sock);
    return 0;
}

int soft_poll_cq(tbrt_cq *cq, int n, struct ibv_wc *wc)
{
    struct soft_cq *c = (struct soft_cq *)cq;
    struct soft_dev *sd = soft_of(cq->dev);
    soft_check_attention(sd);
    soft_progress(sd);
    struct soft_cq_shared *s = c->sh;
    if (TBRT_UNLIKELY(atomic_load_explicit(&s->overrun, memory_order_relaxed)))
        return dev_fail(cq->dev, EOVERFLOW,
                        "poll_cq: completion queue overrun (more than %u completions outstanding)",
                        s->cap);
    uint64_t cons = atomic_load_explicit(&s->cons, memory_order_relaxed);
    int i = 0;
    for (; i < n; i++) {
        struct soft_cqe *e = &s->ring[cons & (s->cap - 1)];
        if (atomic_load_explicit(&e->seq, memory_order_acquire) != cons + 1)
            break;
        wc[i] = e->wc;
        cons++;
    }
    if (i)
        atomic_store_explicit(&s->cons, cons, memory_order_release);
    return i;
}

int soft_req_notify_cq(tbrt_cq *cq)
{
    struct soft_cq *c = (struct soft_cq *)cq;
    atomic_store(&c->sh->armed, 1);
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
