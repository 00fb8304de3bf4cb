/* soft_fabric.c - the soft device's shared-memory wire: the fabric registry
 * (queue pair number -> owning process and context), this process's context
 * segment and its allocator, and run-time port states. Reaching other
 * contexts through it is soft_peer.c.
 *
 * The registry is a small file in this user's private directory
 * (/dev/shm/tbrt-<uid>/, util/private_dir.c: 0700, files 0600, no links
 * followed, owner checked), one per fabric name and personality, so apple-uc
 * and linux-rc queue pairs never meet (different fabrics, as on real hosts).
 * Allocation takes flock(), which the kernel drops when a process dies, so a
 * killed process can never wedge the fabric; its slots are reclaimed when the
 * owner pid is found dead.
 *
 * Completion queues' wake-up sockets live in the same directory (named by
 * soft_wake_path), so only processes of this user can reach them; those a
 * killed process left behind are removed when a device opens. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "soft/soft.h"
#include "util/private_dir.h"
#include "util/util.h"

/* Free context memory: a first-fit list kept in process memory (a list in
 * the segment itself could be rewritten by any peer). */
struct soft_ctx_free {
    struct soft_ctx_free *next;
    uint64_t off, size;
};

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

/* Completion wake-up sockets of processes that died without closing their
 * devices: their names start with wake-<pid>-. */
static void wake_sweep(int dfd)
{
    int d2 = dup(dfd);
    DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
    if (!d) {
        if (d2 >= 0)
            close(d2);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int pid;
        if (sscanf(de->d_name, "wake-%d-", &pid) == 1 && pid_dead(pid))
            unlinkat(dfd, de->d_name, 0);
    }
    closedir(d);
}

static int fabric_map(struct soft_dev *sd)
{
    char *dir = sd->shm_dir, name[96], path[384], why[TBRT_WHY_MAX];
    int rc = fabric_name(sd, name, sizeof name);
    if (rc)
        return rc;
    int dfd = private_dir_open(dir, sizeof sd->shm_dir, why, sizeof why);
    if (dfd < 0)
        return dev_fail(&sd->dev, -dfd, "fabric registry: %s", why);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    bool created;
    int fd = private_file_open(dfd, dir, name, &created, why, sizeof why);
    wake_sweep(dfd);
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
    sd->ctx_fd = memfd_create("tbrt-soft-ctx", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (sd->ctx_fd < 0)
        return dev_fail(&sd->dev, errno, "memfd_create: %s", strerror(errno));
    if (ftruncate(sd->ctx_fd, (off_t)SOFT_CTX_SIZE) != 0 || soft_memfd_seal(sd->ctx_fd) != 0)
        return dev_fail(&sd->dev, errno, "size and seal context: %s", strerror(errno));
    void *p = mmap(NULL, SOFT_CTX_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, sd->ctx_fd, 0);
    if (p == MAP_FAILED)
        return dev_fail(&sd->dev, errno, "map context: %s", strerror(errno));
    sd->ctx = p;
    sd->ctx_id = random_id();
    sd->ctx->magic = SOFT_CTX_MAGIC;
    sd->ctx->version = SOFT_CTX_VERSION;
    sd->ctx->pid = sd->pid;
    sd->ctx->ctx_id = sd->ctx_id;
    sd->ctx_used = SOFT_CTX_DATA_OFF;
    sd->wake_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (sd->wake_fd < 0)
        return dev_fail(&sd->dev, errno, "wake socket: %s", strerror(errno));
    /* this context seen as a peer, to run our own queues with the same code */
    rc = soft_peer_self(sd);
    if (rc)
        return dev_fail(&sd->dev, -rc, "context: %s", strerror(-rc));
    return 0;
}

void soft_fabric_close(struct soft_dev *sd)
{
    soft_peers_close(sd);
    while (sd->ctx_free) {
        struct soft_ctx_free *f = sd->ctx_free;
        sd->ctx_free = f->next;
        free(f);
    }
    if (sd->fabric && sd->fabric_fd >= 0) {
        /* release every slot this context still holds */
        flock(sd->fabric_fd, LOCK_EX);
        for (int i = 0; i < SOFT_SLOTS; i++) {
            struct soft_slot *s = &sd->fabric->slots[i];
            if (s->qpn && s->ctx_id == sd->ctx_id)
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

/* Context memory: a bump allocator with a first-fit free list (no merging:
 * queue pairs come and go in few sizes). */
void *soft_ctx_alloc(struct soft_dev *sd, size_t size, uint64_t *off)
{
    size = (size + SOFT_PAGE - 1) & ~(size_t)(SOFT_PAGE - 1);
    for (struct soft_ctx_free **pp = &sd->ctx_free; *pp; pp = &(*pp)->next) {
        struct soft_ctx_free *f = *pp;
        if (f->size < size)
            continue;
        *off = f->off;
        f->off += size;
        f->size -= size;
        if (f->size == 0) {
            *pp = f->next;
            free(f);
        }
        void *p = (char *)sd->ctx + *off;
        memset(p, 0, size);
        return p;
    }
    if (sd->ctx_used + size > SOFT_CTX_SIZE)
        return NULL;
    *off = sd->ctx_used;
    sd->ctx_used += size;
    return (char *)sd->ctx + *off;
}

void soft_ctx_release(struct soft_dev *sd, uint64_t off, size_t size)
{
    size = (size + SOFT_PAGE - 1) & ~(size_t)(SOFT_PAGE - 1);
    struct soft_ctx_free *f = malloc(sizeof *f);
    if (!f)
        return;                 /* the memory is lost to this context, nothing worse */
    *f = (struct soft_ctx_free){.next = sd->ctx_free, .off = off, .size = size};
    sd->ctx_free = f;
    /* give the pages back; they read as zeros if touched again */
    fallocate(sd->ctx_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)size);
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
    s->ctx_id = sd->ctx_id;
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
    if (s->qpn == qpn && s->ctx_id == sd->ctx_id)
        memset(s, 0, sizeof *s);
    flock(sd->fabric_fd, LOCK_UN);
}

int soft_port_state_of(struct soft_dev *sd, int dev, int port)
{
    if (dev >= 0 && dev < SOFT_MAX_DEVS && port >= 1 && port <= SOFT_MAX_PORTS) {
        struct soft_port_override *o = &sd->fabric->ports[dev][port - 1];
        uint32_t st = atomic_load_explicit(&o->state, memory_order_acquire);
        int32_t pid = o->pid;
        /* any process may write here: only a real state of a live setter */
        if ((st == IBV_PORT_DOWN || st == IBV_PORT_INIT || st == IBV_PORT_ARMED ||
             st == IBV_PORT_ACTIVE) && pid > 0 && (pid == sd->pid || !pid_dead(pid)))
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
