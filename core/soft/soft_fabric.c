/* soft_fabric.c - the soft device's shared-memory wire: the fabric registry
 * (queue pair number -> owning process and context), this process's context
 * segment, and the peer contexts it maps to reach other queue pairs.
 *
 * The registry is a small file in this user's private directory
 * (/dev/shm/tbrt-<uid>/, util/private_dir.c: 0700, files 0600, no links
 * followed, owner checked), one per fabric name and personality, so apple-uc
 * and linux-rc queue pairs never meet (different fabrics, as on real hosts).
 * Allocation takes flock(), which the kernel drops when a process dies, so a
 * killed process can never wedge the fabric; its slots are reclaimed when the
 * owner pid is found dead. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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

#include "soft/soft.h"
#include "util/private_dir.h"
#include "util/util.h"

struct soft_map {
    uint32_t key;
    uint32_t epoch;
    void *base;
    size_t len;
};

struct soft_peer {
    struct soft_peer *next;
    pid_t pid;
    uint64_t ctx_id;
    bool same_process;
    bool self;
    void *base;                 /* the peer's context segment */
    int pidfd;
    struct soft_map *maps;      /* by MR index */
    uint32_t nmaps;
};

static int peer_map(struct soft_dev *sd, const struct soft_slot *s, struct soft_peer **out);

static uint64_t random_id(void)
{
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &v, sizeof v) != (ssize_t)sizeof v)
            v = 0;
        close(fd);
    }
    return v ^ now_ns() ^ ((uint64_t)getpid() << 32);
}

static bool pid_dead(pid_t pid)
{
    return kill(pid, 0) != 0 && errno == ESRCH;
}

/* The fabric's name: soft devices meet only on the same fabric (default
 * "default"; TBRT_SOFT_FABRIC gives a separate one, e.g. per test run). */
static int fabric_name(struct soft_dev *sd, char *out, size_t len)
{
    const char *n = env_str("TBRT_SOFT_FABRIC", "default");
    size_t k = strlen(n);
    if (k == 0 || k > 32 || strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789._-") != k || n[0] == '.')
        return dev_fail(&sd->dev, EINVAL, "TBRT_SOFT_FABRIC \"%s\": a fabric name is 1..32 of "
                        "A-Z a-z 0-9 . _ - (not starting with .)", n);
    snprintf(out, len, "%s-%s", n, sd->p->name);
    return 0;
}

static int fabric_map(struct soft_dev *sd)
{
    char dir[256], name[96], path[384], why[TBRT_WHY_MAX];
    int rc = fabric_name(sd, name, sizeof name);
    if (rc)
        return rc;
    int dfd = private_dir_open(dir, sizeof dir, why, sizeof why);
    if (dfd < 0)
        return dev_fail(&sd->dev, -dfd, "fabric registry: %s", why);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    bool created;
    int fd = private_file_open(dfd, dir, name, &created, why, sizeof why);
    close(dfd);
    if (fd < 0)
        return dev_fail(&sd->dev, -fd, "fabric registry: %s", why);
    if (flock(fd, LOCK_EX) != 0) {
        int e = errno;
        close(fd);
        return dev_fail(&sd->dev, e, "lock fabric %s: %s", path, strerror(e));
    }
    struct stat st;
    size_t size = sizeof(struct soft_fabric_hdr);
    if (fstat(fd, &st) != 0) {
        rc = dev_fail(&sd->dev, errno, "stat fabric %s: %s", path, strerror(errno));
        goto out;
    }
    if ((size_t)st.st_size != size && ftruncate(fd, (off_t)size) != 0) {
        rc = dev_fail(&sd->dev, errno, "size fabric %s: %s", path, strerror(errno));
        goto out;
    }
    struct soft_fabric_hdr *h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        rc = dev_fail(&sd->dev, errno, "map fabric %s: %s", path, strerror(errno));
        goto out;
    }
    if (h->magic != SOFT_FABRIC_MAGIC || h->version != SOFT_FABRIC_VERSION ||
        h->nslots != SOFT_SLOTS) {
        /* new, or left by another layout version: start it over */
        memset(h, 0, size);
        h->magic = SOFT_FABRIC_MAGIC;
        h->version = SOFT_FABRIC_VERSION;
        h->nslots = SOFT_SLOTS;
        h->next_gen = (uint32_t)(random_id() & 0x3fff);
    }
    sd->fabric = h;
    sd->fabric_fd = fd;
out:
    flock(fd, LOCK_UN);
    if (rc) {
        close(fd);
        sd->fabric_fd = -1;
    }
    return rc;
}

int soft_fabric_open(struct soft_dev *sd)
{
    sd->fabric_fd = sd->ctx_fd = sd->wake_fd = -1;
    sd->pid = (int32_t)getpid();
    int rc = fabric_map(sd);
    if (rc)
        return rc;
    sd->ctx_fd = memfd_create("tbrt-soft-ctx", MFD_CLOEXEC);
    if (sd->ctx_fd < 0)
        return dev_fail(&sd->dev, errno, "memfd_create: %s", strerror(errno));
    if (ftruncate(sd->ctx_fd, (off_t)SOFT_CTX_SIZE) != 0)
        return dev_fail(&sd->dev, errno, "size context: %s", strerror(errno));
    void *p = mmap(NULL, SOFT_CTX_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, sd->ctx_fd, 0);
    if (p == MAP_FAILED)
        return dev_fail(&sd->dev, errno, "map context: %s", strerror(errno));
    sd->ctx = p;
    sd->ctx->magic = SOFT_CTX_MAGIC;
    sd->ctx->version = SOFT_CTX_VERSION;
    sd->ctx->pid = getpid();
    sd->ctx->ctx_id = random_id();
    sd->ctx->mr_off = 4096;
    sd->ctx->used = sd->ctx->mr_off + SOFT_MR_MAX * sizeof(struct soft_mr_entry);
    sd->wake_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (sd->wake_fd < 0)
        return dev_fail(&sd->dev, errno, "wake socket: %s", strerror(errno));
    /* this context seen as a peer, to run our own queues with the same code */
    struct soft_slot me = {.pid = getpid(), .ctx_fd = sd->ctx_fd, .ctx_id = sd->ctx->ctx_id};
    int rc2 = peer_map(sd, &me, &sd->self);
    if (rc2)
        return dev_fail(&sd->dev, -rc2, "context: %s", strerror(-rc2));
    return 0;
}

static void peer_free(struct soft_peer *p)
{
    for (uint32_t i = 0; i < p->nmaps; i++)
        if (p->maps[i].base)
            munmap(p->maps[i].base, p->maps[i].len);
    free(p->maps);
    if (!p->self && p->base)
        munmap(p->base, SOFT_CTX_SIZE);
    if (p->pidfd >= 0)
        close(p->pidfd);
    free(p);
}

void soft_fabric_close(struct soft_dev *sd)
{
    while (sd->peers) {
        struct soft_peer *p = sd->peers;
        sd->peers = p->next;
        peer_free(p);
    }
    if (sd->fabric && sd->fabric_fd >= 0) {
        /* release every slot this context still holds */
        flock(sd->fabric_fd, LOCK_EX);
        for (int i = 0; i < SOFT_SLOTS; i++) {
            struct soft_slot *s = &sd->fabric->slots[i];
            if (s->qpn && s->ctx_id == sd->ctx->ctx_id)
                memset(s, 0, sizeof *s);
        }
        flock(sd->fabric_fd, LOCK_UN);
    }
    if (sd->fabric)
        munmap(sd->fabric, sizeof *sd->fabric);
    if (sd->fabric_fd >= 0)
        close(sd->fabric_fd);
    if (sd->ctx)
        munmap(sd->ctx, SOFT_CTX_SIZE);
    if (sd->ctx_fd >= 0)
        close(sd->ctx_fd);
    if (sd->wake_fd >= 0)
        close(sd->wake_fd);
    sd->fabric = NULL;
    sd->ctx = NULL;
}

/* Context memory: a bump allocator with a first-fit free list kept in the
 * free blocks themselves (owner only, not shared with peers). */
struct ctx_free {
    uint64_t size;
    uint64_t next;              /* offset of the next free block, 0 = none */
};

static uint64_t ctx_free_head(struct soft_dev *sd)
{
    /* the head lives in the header page, right after the header */
    return *(uint64_t *)((char *)sd->ctx + sizeof(struct soft_ctx_hdr));
}

static void ctx_free_set_head(struct soft_dev *sd, uint64_t off)
{
    *(uint64_t *)((char *)sd->ctx + sizeof(struct soft_ctx_hdr)) = off;
}

void *soft_ctx_alloc(struct soft_dev *sd, size_t size, uint64_t *off)
{
    size = (size + 4095) & ~(size_t)4095;
    uint64_t prev = 0, cur = ctx_free_head(sd);
    while (cur) {
        struct ctx_free *f = (struct ctx_free *)((char *)sd->ctx + cur);
        if (f->size >= size) {
            uint64_t next = f->next;
            if (f->size > size) {
                struct ctx_free *rest = (struct ctx_free *)((char *)f + size);
                rest->size = f->size - size;
                rest->next = next;
                next = cur + size;
            }
            if (prev)
                ((struct ctx_free *)((char *)sd->ctx + prev))->next = next;
            else
                ctx_free_set_head(sd, next);
            memset(f, 0, size);
            *off = cur;
            return f;
        }
        prev = cur;
        cur = f->next;
    }
    if (sd->ctx->used + size > SOFT_CTX_SIZE)
        return NULL;
    *off = sd->ctx->used;
    sd->ctx->used += size;
    return (char *)sd->ctx + *off;
}

void soft_ctx_release(struct soft_dev *sd, uint64_t off, size_t size)
{
    size = (size + 4095) & ~(size_t)4095;
    struct ctx_free *f = (struct ctx_free *)((char *)sd->ctx + off);
    memset(f, 0, sizeof *f);
    f->size = size;
    f->next = ctx_free_head(sd);
    ctx_free_set_head(sd, off);
    /* give the pages back; they read as zeros if touched again */
    if (size > 4096)
        fallocate(sd->ctx_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off + 4096,
                  (off_t)size - 4096);
}

int soft_slot_alloc(struct soft_dev *sd, uint64_t qp_off, uint32_t qp_type, uint32_t *qpn)
{
    struct soft_fabric_hdr *h = sd->fabric;
    flock(sd->fabric_fd, LOCK_EX);
    int found = -1;
    uint32_t start = h->next_gen % SOFT_SLOTS;
    for (uint32_t k = 0; k < SOFT_SLOTS; k++) {
        uint32_t i = (start + k) % SOFT_SLOTS;
        if (i < 2)
            continue;           /* QP0 and QP1 are the special QPs */
        struct soft_slot *s = &h->slots[i];
        if (s->qpn == 0 || pid_dead(s->pid)) {
            found = (int)i;
            break;
        }
    }
    if (found < 0) {
        flock(sd->fabric_fd, LOCK_UN);
        return dev_fail(&sd->dev, ENOSPC, "create_qp: the fabric has no free QP numbers (%d in use)",
                        SOFT_SLOTS - 2);
    }
    uint32_t gen = (++h->next_gen) & ((1u << (24 - SOFT_SLOT_BITS)) - 1);
    if (gen == 0)
        gen = ++h->next_gen & ((1u << (24 - SOFT_SLOT_BITS)) - 1);
    if (gen == 0)
        gen = 1;
    struct soft_slot *s = &h->slots[found];
    s->qpn = (gen << SOFT_SLOT_BITS) | (uint32_t)found;
    s->pid = getpid();
    s->ctx_fd = sd->ctx_fd;
    s->ctx_id = sd->ctx->ctx_id;
    s->qp_off = qp_off;
    s->qp_type = qp_type;
    s->gen = gen;
    *qpn = s->qpn;
    flock(sd->fabric_fd, LOCK_UN);
    return 0;
}

void soft_slot_free(struct soft_dev *sd, uint32_t qpn)
{
    struct soft_slot *s = &sd->fabric->slots[qpn & (SOFT_SLOTS - 1)];
    flock(sd->fabric_fd, LOCK_EX);
    if (s->qpn == qpn && s->ctx_id == sd->ctx->ctx_id)
        memset(s, 0, sizeof *s);
    flock(sd->fabric_fd, LOCK_UN);
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

static int peer_map(struct soft_dev *sd, const struct soft_slot *s, struct soft_peer **out)
{
    for (struct soft_peer *p = sd->peers; p; p = p->next)
        if (p->ctx_id == s->ctx_id && p->pid == s->pid) {
            *out = p;
            return 0;
        }
    struct soft_peer *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->pid = s->pid;
    p->ctx_id = s->ctx_id;
    p->pidfd = -1;
    p->same_process = s->pid == getpid();
    if (s->ctx_id == sd->ctx->ctx_id) {
        p->self = true;
        p->base = sd->ctx;
    } else {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)s->pid, s->ctx_fd);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            free(p);
            return -(e == ENOENT ? ESRCH : e);   /* its process is gone */
        }
        p->base = mmap(NULL, SOFT_CTX_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p->base == MAP_FAILED) {
            int e = errno;
            free(p);
            return -e;
        }
        const struct soft_ctx_hdr *h = p->base;
        if (h->magic != SOFT_CTX_MAGIC || h->ctx_id != s->ctx_id) {
            munmap(p->base, SOFT_CTX_SIZE);
            free(p);
            return -ESRCH;      /* the fd number now names something else */
        }
        if (!p->same_process)
            p->pidfd = pidfd_for(s->pid);
    }
    p->next = sd->peers;
    sd->peers = p;
    *out = p;
    return 0;
}

int soft_peer_lookup(struct soft_dev *sd, uint32_t qpn, struct soft_peer **peer,
                     struct soft_qp_shared **qp)
{
    if (qpn < 2 || qpn > 0xffffff)
        return -EINVAL;
    struct soft_slot s;
    flock(sd->fabric_fd, LOCK_SH);
    s = sd->fabric->slots[qpn & (SOFT_SLOTS - 1)];
    flock(sd->fabric_fd, LOCK_UN);
    if (s.qpn != qpn)
        return -ENOENT;         /* no such QP on this fabric */
    if (pid_dead(s.pid))
        return -ESRCH;          /* its process is gone */
    int rc = peer_map(sd, &s, peer);
    if (rc)
        return rc;
    struct soft_qp_shared *q = soft_peer_at(*peer, s.qp_off);
    if (q->qpn != qpn)
        return -ENOENT;         /* destroyed meanwhile */
    *qp = q;
    return 0;
}

bool soft_peer_alive(struct soft_peer *peer)
{
    if (peer->same_process)
        return true;
    if (peer->pidfd >= 0) {
        struct pollfd pfd = {.fd = peer->pidfd, .events = POLLIN};
        return poll(&pfd, 1, 0) == 0;
    }
    return !pid_dead(peer->pid);
}

bool soft_peer_is_self(struct soft_peer *peer) { return peer->self; }

void *soft_peer_at(struct soft_peer *peer, uint64_t off)
{
    return (char *)peer->base + off;
}

struct soft_mr_entry *soft_peer_mr_table(struct soft_peer *peer)
{
    const struct soft_ctx_hdr *h = peer->base;
    return (struct soft_mr_entry *)((char *)peer->base + h->mr_off);
}

int soft_peer_mem(struct soft_peer *peer, uint32_t key, uint64_t addr, uint64_t len,
                  uint32_t need_access, void **out)
{
    uint32_t idx = key >> 8;
    if (idx >= SOFT_MR_MAX)
        return -EINVAL;
    struct soft_mr_entry *e = &soft_peer_mr_table(peer)[idx];
    if (atomic_load_explicit(&e->key, memory_order_acquire) != key || key == 0)
        return -ENOENT;
    if (addr < e->addr || len > e->length || addr - e->addr > e->length - len)
        return -ERANGE;
    if ((e->access & need_access) != need_access)
        return -EACCES;
    if (peer->same_process) {
        *out = (void *)(uintptr_t)addr;
        return 0;
    }
    if (e->memfd < 0)
        return -EPERM;
    if (idx >= peer->nmaps) {
        uint32_t n = peer->nmaps ? peer->nmaps : 16;
        while (n <= idx)
            n *= 2;
        struct soft_map *m = realloc(peer->maps, n * sizeof *m);
        if (!m)
            return -ENOMEM;
        memset(m + peer->nmaps, 0, (n - peer->nmaps) * sizeof *m);
        peer->maps = m;
        peer->nmaps = n;
    }
    struct soft_map *m = &peer->maps[idx];
    uint32_t epoch = atomic_load_explicit(&e->epoch, memory_order_acquire);
    if (m->key != key || m->epoch != epoch || !m->base) {
        if (m->base)
            munmap(m->base, m->len);
        m->base = NULL;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)peer->pid, e->memfd);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            return -errno;
        void *b = mmap(NULL, e->fd_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (b == MAP_FAILED)
            return -errno;
        m->base = b;
        m->len = e->fd_len;
        m->key = key;
        m->epoch = epoch;
    }
    *out = (char *)m->base + e->fd_off + (addr - e->addr);
    return 0;
}

int soft_port_state_of(struct soft_dev *sd, int dev, int port)
{
    if (dev >= 0 && dev < SOFT_MAX_DEVS && port >= 1 && port <= SOFT_MAX_PORTS) {
        struct soft_port_override *o = &sd->fabric->ports[dev][port - 1];
        uint32_t st = atomic_load_explicit(&o->state, memory_order_acquire);
        if (st && (o->pid == sd->pid || !pid_dead(o->pid)))
            return (int)st;
    }
    if (dev == sd->index && port >= 1 && port <= sd->p->nports)
        return sd->port_state[port - 1];
    return IBV_PORT_ACTIVE;     /* another device's configuration: assume up */
}

int soft_port_state(struct soft_dev *sd, int port)
{
    return soft_port_state_of(sd, sd->index, port);
}

int soft_set_port_state(tbrt_dev *dev, uint8_t port, int state)
{
    struct soft_dev *sd = soft_of(dev);
    if (port < 1 || port > sd->p->nports)
        return dev_fail(dev, EINVAL, "set_port_state: port %u does not exist (1..%d)", port,
                        sd->p->nports);
    if (state != 0 && state != IBV_PORT_DOWN && state != IBV_PORT_ACTIVE &&
        state != IBV_PORT_INIT && state != IBV_PORT_ARMED)
        return dev_fail(dev, EINVAL, "set_port_state: %d is not a port state", state);
    if (sd->index >= SOFT_MAX_DEVS)
        return dev_fail(dev, EINVAL, "set_port_state: only soft0..soft%d", SOFT_MAX_DEVS - 1);
    struct soft_port_override *o = &sd->fabric->ports[sd->index][port - 1];
    o->pid = sd->pid;
    atomic_store_explicit(&o->state, (uint32_t)state, memory_order_release);
    return 0;
}

void soft_wake(struct soft_dev *sd, const char *sock)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strnlen(sock, SOFT_SOCK_NAME);
    if (n == 0)
        return;
    memcpy(a.sun_path + 1, sock, n); /* abstract namespace */
    char b = 1;
    sendto(sd->wake_fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a,
           (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n));
}
