/* shm_fabric.c - the shared-memory wire's fabric registry (queue pair
 * number -> owning process and context), this process's context segment and
 * its allocator. Reaching other contexts through it is shm_peer.c.
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
 * shm_wake_addr), so only processes of this user can reach them; those a
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

#include "soft/wire/shm/shm.h"
#include "util/private_dir.h"
#include "util/util.h"

/* Free context memory: a first-fit list kept in process memory (a list in
 * the segment itself could be rewritten by any peer). */
struct shm_ctx_free {
    struct shm_ctx_free *next;
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

/* Completion wake-up sockets of processes that died without closing their
 * devices: their names start with wake-<pid>-. Once per process: the
 * directory holds a socket per completion queue of every live process, so
 * a sweep at every device open would make each link's setup cost grow with
 * the links already open; a leftover's name is taken over anyway
 * (bind_wake), and the next process to start sweeps what this one leaves
 * (a process that exits removes its own: shm_event.c; this is for crashes). */
static void wake_sweep(int dfd)
{
    static atomic_bool swept;
    if (atomic_exchange(&swept, true))
        return;
    int d2 = dup(dfd);
    DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
    if (!d) {
        if (d2 >= 0)
            close(d2);
        return;
    }
    struct dirent *de;
    int last = 0;
    bool last_dead = false;
    while ((de = readdir(d)) != NULL) {
        int pid;
        if (sscanf(de->d_name, "wake-%d-", &pid) != 1)
            continue;
        if (pid != last)        /* a process has a socket per CQ: ask once */
            last = pid, last_dead = pid_dead(pid);
        if (last_dead)
            unlinkat(dfd, de->d_name, 0);
    }
    closedir(d);
}

static int fabric_map(struct soft_wire *w, char *why, size_t len)
{
    char *dir = w->shm_dir, path[384], err[TBRT_WHY_MAX];
    int dfd = private_dir_open(dir, sizeof w->shm_dir, err, sizeof err);
    if (dfd < 0)
        return err_set(why, len, -dfd, "fabric registry: %s", err);
    snprintf(path, sizeof path, "%s/%s", dir, w->fabric);
    bool created;
    int fd = private_file_open(dfd, dir, w->fabric, &created, err, sizeof err);
    wake_sweep(dfd);
    close(dfd);
    if (fd < 0)
        return err_set(why, len, -fd, "fabric registry: %s", err);
    int lrc = private_file_lock(fd, LOCK_EX, path, err, sizeof err);
    if (lrc) {
        close(fd);
        return err_set(why, len, -lrc, "fabric registry: %s", err);
    }
    int rc = 0;
    struct stat st;
    size_t size = sizeof(struct shm_registry);
    if (fstat(fd, &st) != 0) {
        rc = err_set(why, len, errno, "stat fabric %s: %s", path, strerror(errno));
        goto out;
    }
    if ((size_t)st.st_size != size && ftruncate(fd, (off_t)size) != 0) {
        rc = err_set(why, len, errno, "size fabric %s: %s", path, strerror(errno));
        goto out;
    }
    struct shm_registry *h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        rc = err_set(why, len, errno, "map fabric %s: %s", path, strerror(errno));
        goto out;
    }
    if (h->magic != SHM_REGISTRY_MAGIC || h->version != SHM_REGISTRY_VERSION ||
        h->nslots != SHM_SLOTS) {
        /* new, or left by another layout version: start it over */
        memset(h, 0, size);
        h->magic = SHM_REGISTRY_MAGIC;
        h->version = SHM_REGISTRY_VERSION;
        h->nslots = SHM_SLOTS;
        h->next_gen = (uint32_t)(random_id() & 0x3fff);
    }
    w->fabric_map = h;
    w->fabric_fd = fd;
out:
    flock(fd, LOCK_UN);
    if (rc) {
        close(fd);
        w->fabric_fd = -1;
    }
    return rc;
}

int shm_fabric_open(struct soft_wire *w, char *why, size_t len)
{
    w->fabric_fd = w->ctx_fd = w->wake_fd = -1;
    w->pid = (int32_t)getpid();
    int rc = fabric_map(w, why, len);
    if (rc)
        return rc;
    w->ctx_fd = memfd_create("tbrt-soft-ctx", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (w->ctx_fd < 0)
        return err_set(why, len, errno, "memfd_create: %s", strerror(errno));
    if (ftruncate(w->ctx_fd, (off_t)SHM_CTX_SIZE) != 0 || shm_memfd_seal(w->ctx_fd) != 0)
        return err_set(why, len, errno, "size and seal context: %s", strerror(errno));
    void *p = mmap(NULL, SHM_CTX_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, w->ctx_fd, 0);
    if (p == MAP_FAILED)
        return err_set(why, len, errno, "map context: %s", strerror(errno));
    w->ctx = p;
    w->ctx_id = random_id();
    w->ctx->magic = SHM_CTX_MAGIC;
    w->ctx->version = SHM_CTX_VERSION;
    w->ctx->pid = w->pid;
    w->ctx->ctx_id = w->ctx_id;
    w->ctx_used = SHM_CTX_DATA_OFF;
    w->wake_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (w->wake_fd < 0)
        return err_set(why, len, errno, "wake socket: %s", strerror(errno));
    /* this context seen as a peer, to run our own queues with the same code */
    rc = shm_peer_self(w);
    if (rc)
        return err_set(why, len, -rc, "context: %s", strerror(-rc));
    return 0;
}

void shm_fabric_close(struct soft_wire *w)
{
    shm_peers_close(w);
    while (w->ctx_free) {
        struct shm_ctx_free *f = w->ctx_free;
        w->ctx_free = f->next;
        free(f);
    }
    char err[TBRT_WHY_MAX];
    if (w->fabric_map && w->fabric_fd >= 0 && shm_fabric_lock(w, LOCK_EX, err, sizeof err) == 0) {
        /* release every slot this context still holds (if the registry
         * stays locked, they go back once this process is gone) */
        for (int i = 0; i < SHM_SLOTS; i++) {
            struct shm_slot *s = &w->fabric_map->slots[i];
            if (s->qpn && s->ctx_id == w->ctx_id)
                memset(s, 0, sizeof *s);
        }
        flock(w->fabric_fd, LOCK_UN);
    }
    if (w->fabric_map)
        munmap(w->fabric_map, sizeof *w->fabric_map);
    if (w->fabric_fd >= 0)
        close(w->fabric_fd);
    if (w->ctx)
        munmap(w->ctx, SHM_CTX_SIZE);
    if (w->ctx_fd >= 0)
        close(w->ctx_fd);
    if (w->wake_fd >= 0)
        close(w->wake_fd);
    w->fabric_map = NULL;
    w->ctx = NULL;
}

/* Context memory: a bump allocator with a first-fit free list (no merging:
 * queue pairs come and go in few sizes). */
void *shm_ctx_alloc(struct soft_wire *w, size_t size, uint64_t *off)
{
    size = (size + SHM_PAGE - 1) & ~(size_t)(SHM_PAGE - 1);
    for (struct shm_ctx_free **pp = &w->ctx_free; *pp; pp = &(*pp)->next) {
        struct shm_ctx_free *f = *pp;
        if (f->size < size)
            continue;
        *off = f->off;
        f->off += size;
        f->size -= size;
        if (f->size == 0) {
            *pp = f->next;
            free(f);
        }
        void *p = (char *)w->ctx + *off;
        memset(p, 0, size);
        return p;
    }
    if (w->ctx_used + size > SHM_CTX_SIZE)
        return NULL;
    *off = w->ctx_used;
    w->ctx_used += size;
    return (char *)w->ctx + *off;
}

void shm_ctx_release(struct soft_wire *w, uint64_t off, size_t size)
{
    size = (size + SHM_PAGE - 1) & ~(size_t)(SHM_PAGE - 1);
    struct shm_ctx_free *f = malloc(sizeof *f);
    if (!f)
        return;                 /* the memory is lost to this context, nothing worse */
    *f = (struct shm_ctx_free){.next = w->ctx_free, .off = off, .size = size};
    w->ctx_free = f;
    /* give the pages back; they read as zeros if touched again */
    fallocate(w->ctx_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)size);
}

int shm_fabric_lock(struct soft_wire *w, int op, char *why, size_t len)
{
    if (flock(w->fabric_fd, op | LOCK_NB) == 0)
        return 0;               /* free: no name to make (UD looks it up at every send) */
    char path[sizeof w->shm_dir + sizeof w->fabric + 2], err[TBRT_WHY_MAX];
    snprintf(path, sizeof path, "%s/%s", w->shm_dir, w->fabric);
    int rc = private_file_lock(w->fabric_fd, op, path, err, sizeof err);
    return rc ? err_set(why, len, -rc, "fabric registry: %s", err) : 0;
}

int shm_slot_alloc(struct soft_wire *w, uint64_t qp_off, uint32_t qp_type, uint32_t *qpn,
                   char *why, size_t len)
{
    struct shm_registry *h = w->fabric_map;
    int lrc = shm_fabric_lock(w, LOCK_EX, why, len);
    if (lrc)
        return lrc;
    int found = -1;
    uint32_t start = h->next_gen % SHM_SLOTS;
    for (uint32_t k = 0; k < SHM_SLOTS; k++) {
        uint32_t i = (start + k) % SHM_SLOTS;
        if (i < 2)
            continue;           /* QP0 and QP1 are the special QPs */
        struct shm_slot *s = &h->slots[i];
        if (s->qpn == 0 || pid_dead(s->pid)) {
            found = (int)i;
            break;
        }
    }
    if (found < 0) {
        flock(w->fabric_fd, LOCK_UN);
        return err_set(why, len, ENOSPC, "the fabric has no free QP numbers (%d in use)",
                       SHM_SLOTS - 2);
    }
    uint32_t gen = (++h->next_gen) & ((1u << (24 - SHM_SLOT_BITS)) - 1);
    if (gen == 0)
        gen = ++h->next_gen & ((1u << (24 - SHM_SLOT_BITS)) - 1);
    if (gen == 0)
        gen = 1;
    struct shm_slot *s = &h->slots[found];
    s->qpn = (gen << SHM_SLOT_BITS) | (uint32_t)found;
    s->pid = getpid();
    s->ctx_fd = w->ctx_fd;
    s->ctx_id = w->ctx_id;
    s->qp_off = qp_off;
    s->qp_type = qp_type;
    s->gen = gen;
    *qpn = s->qpn;
    flock(w->fabric_fd, LOCK_UN);
    return 0;
}

void shm_slot_free(struct soft_wire *w, uint32_t qpn)
{
    struct shm_slot *s = &w->fabric_map->slots[qpn & (SHM_SLOTS - 1)];
    char err[TBRT_WHY_MAX];
    /* a registry locked for good keeps the slot until this process is gone */
    if (shm_fabric_lock(w, LOCK_EX, err, sizeof err))
        return;
    if (s->qpn == qpn && s->ctx_id == w->ctx_id)
        memset(s, 0, sizeof *s);
    flock(w->fabric_fd, LOCK_UN);
}
