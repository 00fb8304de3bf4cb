/* shm_peer.c - reaching other contexts of the fabric: mapping a peer's
 * context segment, views of its queue pairs, its registered memory, and
 * waking its completion queues.
 *
 * A peer's memory is input: another process may have written anything into
 * it. So a context is mapped only when the descriptor behind it is a sealed
 * memfd of the context size (it cannot shrink under us: no SIGBUS), its
 * header is checked once, a queue pair's block once per lookup (its fixed
 * fields copied into a view, the whole block inside the segment), and an MR
 * entry is copied under its sequence lock, checked, and bounded by the size
 * of the memfd we mapped ourselves. What fails a check is -EBADMSG with a
 * sentence naming the field; what merely is not there (a process gone, a
 * queue pair destroyed) stays -ESRCH / -ENOENT. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "soft/wire/shm/shm.h"
#include "util/util.h"

static int bad(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (why)
        vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return -EBADMSG;
}

static bool pid_dead(pid_t pid)
{
    return pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH);
}

static int pidfd_for(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    return -1;
#endif
}

/* Open /proc/<pid>/fd/<fd> and accept it only as a sealed memfd (so its
 * size holds while we map it). Returns the fd, -errno when it is not there,
 * -EBADMSG (why filled) when it is something else. */
static int open_memfd(pid_t pid, int32_t fd, const char *what, struct stat *st, char *why,
                      size_t whylen)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)fd);
    /* O_NONBLOCK: a FIFO or a device behind the number must not hang us */
    int f = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f < 0 && (errno == ENOENT || errno == ESRCH))
        return -ESRCH;          /* the process or the descriptor is gone */
    if (f < 0 && (errno == EACCES || errno == EPERM))
        return -errno;          /* not ours to open (a real error, not a bad value) */
    int seals = f < 0 ? -1 : fcntl(f, F_GET_SEALS);
    if (f < 0 || fstat(f, st) != 0 || !S_ISREG(st->st_mode) || seals < 0 ||
        !(seals & F_SEAL_SHRINK)) {
        if (f >= 0)
            close(f);
        return bad(why, whylen, "%s fd %d of pid %d is not a sealed memfd (corrupt)", what,
                   (int)fd, (int)pid);
    }
    return f;
}

static void peer_free(struct shm_peer *p)
{
    for (uint32_t i = 0; i < p->nmaps; i++)
        if (p->maps[i].base)
            munmap(p->maps[i].base, p->maps[i].len);
    free(p->maps);
    if (!p->self && p->base)
        munmap(p->base, SHM_CTX_SIZE);
    if (p->pidfd >= 0)
        close(p->pidfd);
    free(p);
}

void shm_peers_close(struct soft_wire *w)
{
    while (w->peers) {
        struct shm_peer *p = w->peers;
        w->peers = p->next;
        peer_free(p);
    }
    w->self = NULL;
}

int shm_peer_self(struct soft_wire *w)
{
    struct shm_peer *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    *p = (struct shm_peer){.pid = w->pid, .ctx_id = w->ctx_id, .same_process = true,
                            .self = true, .base = w->ctx, .pidfd = -1};
    p->next = w->peers;
    w->peers = p;
    w->self = p;
    return 0;
}

/* Map the context a registry slot names (once per context). */
static int peer_map(struct soft_wire *w, const struct shm_slot *s, struct shm_peer **out,
                    char *why, size_t whylen)
{
    for (struct shm_peer *p = w->peers; p; p = p->next)
        if (p->ctx_id == s->ctx_id && p->pid == s->pid) {
            *out = p;
            return 0;
        }
    struct stat st;
    int fd = open_memfd(s->pid, s->ctx_fd, "context", &st, why, whylen);
    if (fd < 0)
        return fd;
    if ((uint64_t)st.st_size != SHM_CTX_SIZE) {
        close(fd);
        return bad(why, whylen, "context fd %d of pid %d has %lld bytes, not %llu: not a soft "
                   "context (corrupt)", (int)s->ctx_fd, (int)s->pid, (long long)st.st_size,
                   (unsigned long long)SHM_CTX_SIZE);
    }
    void *base = mmap(NULL, SHM_CTX_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (base == MAP_FAILED)
        return -e;
    struct shm_ctx_hdr h;
    memcpy(&h, base, offsetof(struct shm_ctx_hdr, attention));
    int rc = 0;
    if (h.magic != SHM_CTX_MAGIC)
        rc = bad(why, whylen, "context of pid %d: magic 0x%llx is not a soft context (corrupt)",
                 (int)s->pid, (unsigned long long)h.magic);
    else if (h.version != SHM_CTX_VERSION)
        rc = bad(why, whylen, "context of pid %d: version %u, we speak %u (corrupt, or another "
                 "build of tbrt)", (int)s->pid, h.version, SHM_CTX_VERSION);
    else if (h.ctx_id != s->ctx_id)
        rc = -ESRCH;            /* the fd number now names another context */
    if (rc) {
        munmap(base, SHM_CTX_SIZE);
        return rc;
    }
    struct shm_peer *p = calloc(1, sizeof *p);
    if (!p) {
        munmap(base, SHM_CTX_SIZE);
        return -ENOMEM;
    }
    *p = (struct shm_peer){.pid = s->pid, .ctx_id = s->ctx_id, .base = base, .pidfd = -1,
                            .same_process = s->pid == w->pid};
    if (!p->same_process)
        p->pidfd = pidfd_for(s->pid);
    p->next = w->peers;
    w->peers = p;
    *out = p;
    return 0;
}

/* The checks of a registry slot, before anything of it is used. */
static int slot_check(uint32_t qpn, const struct shm_slot *s, char *why, size_t whylen)
{
    if (s->pid <= 0 || s->ctx_fd < 0)
        return bad(why, whylen, "registry slot of QP 0x%x: pid %d / ctx_fd %d (corrupt)", qpn,
                   (int)s->pid, (int)s->ctx_fd);
    if (s->qp_off % SHM_PAGE || s->qp_off < SHM_CTX_DATA_OFF || s->qp_off >= SHM_CTX_SIZE)
        return bad(why, whylen, "registry slot of QP 0x%x: qp_off 0x%llx is not a block of its "
                   "context (corrupt)", qpn, (unsigned long long)s->qp_off);
    if (s->qp_type != IBV_QPT_RC && s->qp_type != IBV_QPT_UC && s->qp_type != IBV_QPT_UD)
        return bad(why, whylen, "registry slot of QP 0x%x: qp_type %u (corrupt)", qpn, s->qp_type);
    return 0;
}

/* A ring length a block may say: a power of two (slots are index &
 * (cap - 1), soft_ring_size), 1..SOFT_MAX_QP_WR. */
static bool ring_size_ok(uint32_t cap)
{
    return cap >= 1 && cap <= SOFT_MAX_QP_WR && (cap & (cap - 1)) == 0;
}

int shm_view_lookup(struct soft_wire *w, uint32_t qpn, struct shm_view *v, char *why,
                     size_t whylen)
{
    if (qpn < 2 || qpn > 0xffffff)
        return -EINVAL;
    struct shm_slot s;
    int lrc = shm_fabric_lock(w, LOCK_SH, why, whylen);
    if (lrc)
        return lrc;             /* callers take it as a peer not there yet */
    s = w->fabric_map->slots[qpn & (SHM_SLOTS - 1)];
    flock(w->fabric_fd, LOCK_UN);
    if (s.qpn != qpn)
        return -ENOENT;         /* no such QP on this fabric */
    int rc = slot_check(qpn, &s, why, whylen);
    if (rc)
        return rc;
    if (s.pid != w->pid && pid_dead(s.pid))
        return -ESRCH;          /* its process is gone */
    struct shm_peer *peer = NULL;
    if ((rc = peer_map(w, &s, &peer, why, whylen)) != 0)
        return rc;
    struct shm_qp_block *q = shm_peer_at(peer, s.qp_off);
    struct shm_qp_block h;    /* the fixed fields, once */
    memcpy(&h, q, offsetof(struct shm_qp_block, rq_cons));
    if (h.qpn != qpn)
        return -ENOENT;         /* destroyed meanwhile */
    if (h.qp_type != s.qp_type)
        return bad(why, whylen, "peer QP 0x%x (pid %d): qp_type %u in its block, %u in the "
                   "registry (its shared memory is corrupt)", qpn, (int)s.pid, h.qp_type,
                   s.qp_type);
    const char *field = NULL;
    uint64_t val = 0;
    if (!ring_size_ok(h.rq_cap))
        field = "rq_cap", val = h.rq_cap;
    else if (!ring_size_ok(h.sq_cap))
        field = "sq_cap", val = h.sq_cap;
    else if (h.recv_db >= SHM_MAX_CQ)
        field = "recv_db", val = h.recv_db;
    else if (h.send_db >= SHM_MAX_CQ)
        field = "send_db", val = h.send_db;
    if (field && field[1] == 'q')   /* a ring: slots are index & (cap - 1) */
        return bad(why, whylen, "peer QP 0x%x (pid %d): %s %llu is not a ring size (a power of "
                   "two, 1..%d; its shared memory is corrupt)", qpn, (int)s.pid, field,
                   (unsigned long long)val, SOFT_MAX_QP_WR);
    if (field)
        return bad(why, whylen, "peer QP 0x%x (pid %d): %s %llu is out of range (its shared "
                   "memory is corrupt)", qpn, (int)s.pid, field, (unsigned long long)val);
    if (shm_qp_bytes(h.rq_cap, h.sq_cap) > SHM_CTX_SIZE - s.qp_off)
        return bad(why, whylen, "peer QP 0x%x (pid %d): rq_cap %u and sq_cap %u do not fit in "
                   "its context (its shared memory is corrupt)", qpn, (int)s.pid, h.rq_cap,
                   h.sq_cap);
    struct shm_doorbell *db = shm_peer_at(peer, SHM_CTX_DB_OFF);
    *v = (struct shm_view){
        .peer = peer, .sh = q, .rq = q->rq, .rres = shm_rres_of(q->rq, h.rq_cap),
        .rq_cons = &q->rq_cons,
        .sq = (struct shm_swr *)((char *)q + shm_sq_offset(h.rq_cap)),
        .copy = (struct shm_copy_job *)((char *)q + shm_copy_offset(h.rq_cap, h.sq_cap)),
        .recv_db = &db[h.recv_db], .send_db = &db[h.send_db], .event_db = &db[SHM_EVENT_DB],
        .qpn = qpn, .qp_type = h.qp_type, .rq_cap = h.rq_cap, .sq_cap = h.sq_cap,
        .recv_dbi = h.recv_db, .send_dbi = h.send_db, .pid = s.pid,
    };
    if (h.srq_off) {
        /* its receives are its SRQ's: the block checked as the QP's was */
        if (h.srq_off % SHM_PAGE || h.srq_off < SHM_CTX_DATA_OFF ||
            h.srq_off > SHM_CTX_SIZE - sizeof(struct shm_srq_block))
            return bad(why, whylen, "peer QP 0x%x (pid %d): srq_off 0x%llx is not a block of its "
                       "context (its shared memory is corrupt)", qpn, (int)s.pid,
                       (unsigned long long)h.srq_off);
        struct shm_srq_block *b = shm_peer_at(peer, h.srq_off);
        uint32_t magic = b->magic, cap = b->cap;    /* once */
        if (magic != SHM_SRQ_MAGIC)
            return -ENOENT;     /* destroyed meanwhile (or never was: the same to us) */
        if (!ring_size_ok(cap) || shm_srq_bytes(cap) > SHM_CTX_SIZE - h.srq_off)
            return bad(why, whylen, "peer QP 0x%x (pid %d): its SRQ's cap %u is not a ring size "
                       "(a power of two, 1..%d; its shared memory is corrupt)", qpn, (int)s.pid,
                       cap, SOFT_MAX_QP_WR);
        v->srq = b;
        v->rq = b->rq;
        v->rres = shm_rres_of(b->rq, cap);
        v->rq_cons = &b->rq_cons;
        v->rq_cap = cap;
    }
    return 0;
}

bool shm_peer_alive(struct shm_peer *peer)
{
    if (peer->same_process)
        return true;
    if (peer->pidfd >= 0) {
        struct pollfd pfd = {.fd = peer->pidfd, .events = POLLIN};
        return poll(&pfd, 1, 0) == 0;
    }
    return !pid_dead(peer->pid);
}

bool shm_peer_stopped(struct shm_peer *peer)
{
    if (peer->same_process)
        return false;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)peer->pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    /* "pid (comm) S ...": the state follows the last ')' (comm may hold any) */
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

bool shm_peer_is_self(struct shm_peer *peer) { return peer->self; }

void *shm_peer_at(struct shm_peer *peer, uint64_t off)
{
    return (char *)peer->base + off;
}

/* Copy MR entry idx of the peer under its sequence lock; false when it kept
 * changing (the owner is re-registering it right now). */
static bool mr_entry_copy(struct shm_peer *peer, uint32_t idx, struct shm_mr_entry *out)
{
    struct shm_mr_entry *e = (struct shm_mr_entry *)shm_peer_at(peer, SHM_CTX_MR_OFF) + idx;
    for (int tries = 0; tries < 4; tries++) {
        uint32_t e1 = atomic_load_explicit(&e->epoch, memory_order_acquire);
        out->key = e->key;
        out->memfd = e->memfd;
        out->access = e->access;
        out->addr = e->addr;
        out->length = e->length;
        out->fd_off = e->fd_off;
        out->iova = e->iova;
        atomic_thread_fence(memory_order_acquire);
        if (!(e1 & 1) && atomic_load_explicit(&e->epoch, memory_order_relaxed) == e1) {
            atomic_store_explicit(&out->epoch, e1, memory_order_relaxed);
            return true;
        }
    }
    return false;
}

/* The largest region anyone registers (soft personalities allow 2^46). */
#define SHM_MR_LIMIT (1ull << 47)

/* shm_peer_mem's miss (shm.h has the hit): the entry copied under its
 * sequence lock and checked, its memfd mapped again when it changed, and
 * what was checked kept for the hits that follow. */
int shm_peer_mem_slow(struct soft_wire *w, struct shm_peer *peer, uint32_t key, uint64_t addr,
                      uint64_t len, uint32_t need_access, void **out, char *why, size_t whylen)
{
    if (peer->self)
        return shm_local_mem(w, key, addr, len, need_access, out);
    uint32_t idx = key >> 8;
    if (idx == 0 || idx >= SHM_MR_MAX)
        return -EINVAL;
    struct shm_mr_entry e;
    if (!mr_entry_copy(peer, idx, &e) || e.key != key || key == 0)
        return -ENOENT;
    if (e.length > SHM_MR_LIMIT || e.iova > UINT64_MAX - e.length || e.fd_off > SHM_MR_LIMIT)
        return bad(why, whylen, "MR 0x%x of pid %d: iova 0x%llx length %llu fd_off %llu are "
                   "impossible (its shared memory is corrupt)", key, (int)peer->pid,
                   (unsigned long long)e.iova, (unsigned long long)e.length,
                   (unsigned long long)e.fd_off);
    /* addr is in the MR's iova space */
    if (addr < e.iova || len > e.length || addr - e.iova > e.length - len)
        return -ERANGE;
    if ((e.access & need_access) != need_access)
        return -EACCES;
    if (e.memfd < 0)
        return -EPERM;
    if (idx >= peer->nmaps) {
        uint32_t n = peer->nmaps ? peer->nmaps : 16;
        while (n <= idx)
            n *= 2;             /* at most SHM_MR_MAX entries: idx is bounded */
        struct shm_map *m = realloc(peer->maps, n * sizeof *m);
        if (!m)
            return -ENOMEM;
        memset(m + peer->nmaps, 0, (n - peer->nmaps) * sizeof *m);
        peer->maps = m;
        peer->nmaps = n;
    }
    struct shm_map *m = &peer->maps[idx];
    uint32_t epoch = atomic_load_explicit(&e.epoch, memory_order_relaxed);
    if (m->key != key || m->epoch != epoch || !m->base) {
        if (m->base)
            munmap(m->base, m->len);
        m->base = NULL;
        m->checked = false;
        struct stat st;
        int fd = open_memfd(peer->pid, e.memfd, "MR memory", &st, why, whylen);
        if (fd < 0)
            return fd;
        void *b = st.st_size > 0 ? mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
                                        MAP_SHARED, fd, 0)
                                 : MAP_FAILED;
        int err = st.st_size > 0 ? errno : EBADMSG;
        close(fd);
        if (b == MAP_FAILED)
            return -err;
        m->base = b;
        m->len = (size_t)st.st_size;
        m->key = key;
        m->epoch = epoch;
    }
    uint64_t at = e.fd_off + (addr - e.iova);
    if (at > m->len || len > m->len - at)
        return bad(why, whylen, "MR 0x%x of pid %d: [%llu, +%llu) reaches beyond the end of its "
                   "memory (%zu bytes; fd_off %llu, length %llu: its shared memory is corrupt)",
                   key, (int)peer->pid, (unsigned long long)at, (unsigned long long)len, m->len,
                   (unsigned long long)e.fd_off, (unsigned long long)e.length);
    *out = (char *)m->base + at;
    /* the whole region lies inside the mapping: later lookups may trust it */
    m->checked = e.fd_off <= m->len && e.length <= m->len - e.fd_off;
    m->access = e.access;
    m->iova = e.iova;
    m->length = e.length;
    m->fd_off = e.fd_off;
    return 0;
}

int shm_wake_addr(struct soft_wire *w, int32_t pid, uint64_t ctx_id, uint32_t dbi,
                   struct sockaddr_un *a, socklen_t *len)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path, sizeof a->sun_path, "%s/wake-%d-%016llx-%u", w->shm_dir,
                     (int)pid, (unsigned long long)ctx_id, dbi);
    if (n < 0 || (size_t)n >= sizeof a->sun_path)
        return -ENAMETOOLONG;
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
    return 0;
}

void shm_ring(struct soft_wire *w, struct shm_peer *peer, struct shm_doorbell *db,
               uint32_t dbi)
{
    /* pairs with the fence in req_notify: either the owner sees our result
     * when it polls after arming, or we see the doorbell armed */
    atomic_thread_fence(memory_order_seq_cst);
    if (!atomic_load_explicit(&db->armed, memory_order_relaxed) ||
        !atomic_exchange(&db->armed, 0))
        return;
    /* the address comes from what we checked (the process and context we
     * mapped, a doorbell index below SHM_MAX_CQ) and our own directory,
     * never from the peer's memory */
    struct sockaddr_un a;
    socklen_t len;
    if (shm_wake_addr(w, peer->pid, peer->ctx_id, dbi, &a, &len) == 0) {
        char b = 1;
        sendto(w->wake_fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a, len);
    }
}
