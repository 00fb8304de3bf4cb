/* soft_mem.c - memory registration for the soft device.
 *
 * A peer process must be able to copy into registered memory (a posted
 * receive, an RDMA WRITE target) without the owner's help, as a NIC's DMA
 * would. So registering memory that may be written remotely swaps its pages
 * for a memfd mapping with the same contents at the same address ("a
 * backing"); the MR table entry names the memfd, and peers map it through
 * /proc/<pid>/fd. Deregistering the last MR on a backing swaps private
 * anonymous pages back in, contents kept.
 *
 * Only private, writable, anonymous memory (heap, mmap, stack) can be swapped.
 * Anything else (a file mapping, read-only data) is registered local-only:
 * it can be the source of a send, but a peer writing into it gets an error
 * completion that says why. Two registrations that share pages share one
 * backing (merged when they overlap partly), whichever soft devices of the
 * process made them: pages belong to the process, so backings do too (one
 * list, under one lock). A forked child would share the swapped pages with
 * its parent; exec is fine.
 *
 * The memfds are sealed against shrinking, so a peer that mapped one can
 * trust the size it saw (soft_peer.c). Our own keys are checked against
 * sd->mrs (process memory), never against the shared table: that is for
 * peers to read, and anyone could have written it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "soft/soft.h"
#include "util/util.h"

struct soft_backing {
    struct soft_backing *next;
    uintptr_t start, end;       /* page aligned */
    int memfd;
    int refs;
};

/* The process's backings and its open soft devices (whose MR entries move
 * when backings merge), under mem_lock. */
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct soft_backing *backings;
static struct soft_dev *devices;

static uintptr_t page_size(void)
{
    static uintptr_t ps;
    if (!ps)
        ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    return ps;
}

/* Is [s, e) all private, writable, anonymous memory? */
static bool swappable(uintptr_t s, uintptr_t e)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return false;
    char line[512];
    uintptr_t covered = s;
    bool ok = true;
    while (ok && covered < e && fgets(line, sizeof line, f)) {
        uintptr_t a, b;
        char perms[8] = "";
        unsigned long long off;
        unsigned dmaj, dmin;
        unsigned long ino;
        int name_at = 0;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %llx %x:%x %lu %n", &a, &b, perms, &off,
                   &dmaj, &dmin, &ino, &name_at) < 7)
            continue;
        if (b <= covered || a >= e)
            continue;
        if (a > covered) {
            ok = false;         /* a hole */
            break;
        }
        const char *name = name_at ? line + name_at : "";
        bool anon = ino == 0 && (name[0] == '\n' || name[0] == 0 || name[0] == '[');
        if (strncmp(perms, "rw-p", 4) != 0 || !anon)
            ok = false;
        covered = b;
    }
    fclose(f);
    return ok && covered >= e;
}

int soft_memfd_seal(int fd)
{
    return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
}

/* Give [s, e) a new memfd backing with its current contents. */
static int swap_in(uintptr_t s, uintptr_t e, int *memfd_out)
{
    size_t len = e - s;
    int fd = memfd_create("tbrt-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)len) != 0 || soft_memfd_seal(fd) != 0)
        goto fail;
    void *tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (tmp == MAP_FAILED)
        goto fail;
    memcpy(tmp, (void *)s, len);
    void *p = mmap((void *)s, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    int e2 = errno;
    munmap(tmp, len);
    if (p == MAP_FAILED) {
        errno = e2;
        goto fail;
    }
    *memfd_out = fd;
    return 0;
fail:;
    int err = errno;
    close(fd);
    return -err;
}

/* Put private anonymous pages back under [s, e), contents kept. */
static void swap_out(uintptr_t s, uintptr_t e)
{
    size_t len = e - s;
    void *tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (tmp == MAP_FAILED)
        return;                 /* keep the shared pages: still correct */
    memcpy(tmp, (void *)s, len);
    if (mmap((void *)s, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0) != MAP_FAILED)
        memcpy((void *)s, tmp, len);
    munmap(tmp, len);
}

static struct soft_mr_entry *mr_table(struct soft_dev *sd)
{
    return (struct soft_mr_entry *)((char *)sd->ctx + SOFT_CTX_MR_OFF);
}

/* Publish MR entry idx for peers (key 0 when withdrawn), under the entry's
 * sequence lock: epoch odd while it changes. */
static void mr_publish(struct soft_dev *sd, int idx, uint32_t key, int memfd, uint32_t access,
                       uint64_t addr, uint64_t length, uint64_t fd_off)
{
    struct soft_mr_entry *e = &mr_table(sd)[idx];
    uint32_t ep = atomic_load_explicit(&e->epoch, memory_order_relaxed);
    atomic_store_explicit(&e->epoch, ep + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    e->key = key;
    e->memfd = memfd;
    e->access = access;
    e->addr = addr;
    e->length = length;
    e->fd_off = fd_off;
    atomic_store_explicit(&e->epoch, ep + 2, memory_order_release);
}

/* The backing that holds [addr, addr+len), or NULL. */
static struct soft_backing *backing_of(uintptr_t s, uintptr_t e)
{
    for (struct soft_backing *b = backings; b; b = b->next)
        if (b->start <= s && e <= b->end)
            return b;
    return NULL;
}

static void backing_put(struct soft_backing *b)
{
    if (!b || --b->refs > 0)
        return;
    for (struct soft_backing **pp = &backings; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    swap_out(b->start, b->end);
    close(b->memfd);
    free(b);
}

/* A backing for [addr, addr+len) (a reference taken), or none when the
 * memory cannot be shared (local only): 0 either way, or -errno. */
static int backing_get(void *addr, size_t len, struct soft_backing **out)
{
    uintptr_t ps = page_size();
    uintptr_t s = (uintptr_t)addr & ~(ps - 1);
    uintptr_t e = ((uintptr_t)addr + len + ps - 1) & ~(ps - 1);
    *out = backing_of(s, e);
    if (*out) {
        (*out)->refs++;
        return 0;
    }
    /* grow the range over the backings it overlaps, then swap the union */
    uintptr_t us = s, ue = e;
    int refs = 1;
    for (struct soft_backing *b = backings; b; b = b->next)
        if (b->start < ue && us < b->end) {
            us = TBRT_MIN(us, b->start);
            ue = TBRT_MAX(ue, b->end);
        }
    if (!swappable(us, ue)) {
        /* also fine when the non-swappable part is an existing backing */
        for (uintptr_t p = us; p < ue; p += ps)
            if (!backing_of(p, p + ps) && !swappable(p, p + ps))
                return 0;       /* local only */
    }
    struct soft_backing *nb = calloc(1, sizeof *nb);
    if (!nb)
        return -ENOMEM;
    int fd = -1;
    int rc = swap_in(us, ue, &fd);
    if (rc) {
        free(nb);
        return rc;
    }
    /* retire the merged backings; their regions (of any device) now live in
     * the new memfd, and the new epoch makes peers map that */
    struct soft_backing **pp = &backings;
    while (*pp) {
        struct soft_backing *b = *pp;
        if (!(b->start < ue && us < b->end)) {
            pp = &b->next;
            continue;
        }
        refs += b->refs;
        for (struct soft_dev *d = devices; d; d = d->next_dev)
            for (int i = 1; i < SOFT_MR_MAX; i++) {
                struct soft_mr *m = d->mrs[i];
                uintptr_t a = m ? (uintptr_t)m->mr.addr : 0;
                if (m && m->shared && b->start <= a && a + m->mr.length <= b->end)
                    mr_publish(d, i, m->mr.lkey, fd, (uint32_t)m->mr.access, a, m->mr.length,
                               a - us);
            }
        close(b->memfd);
        *pp = b->next;
        free(b);
    }
    *nb = (struct soft_backing){.next = backings, .start = us, .end = ue, .memfd = fd,
                                .refs = refs};
    backings = nb;
    *out = nb;
    return 0;
}

void soft_mem_attach(struct soft_dev *sd)
{
    pthread_mutex_lock(&mem_lock);
    sd->next_dev = devices;
    devices = sd;
    pthread_mutex_unlock(&mem_lock);
}

/* The regions a closing device still holds give their pages back. */
void soft_mem_detach(struct soft_dev *sd)
{
    pthread_mutex_lock(&mem_lock);
    for (struct soft_dev **pp = &devices; *pp; pp = &(*pp)->next_dev)
        if (*pp == sd) {
            *pp = sd->next_dev;
            break;
        }
    for (int i = 1; i < SOFT_MR_MAX; i++) {
        struct soft_mr *m = sd->mrs[i];
        if (!m)
            continue;
        if (m->shared)
            backing_put(backing_of((uintptr_t)m->mr.addr, (uintptr_t)m->mr.addr + m->mr.length));
        sd->mrs[i] = NULL;
        free(m);
    }
    pthread_mutex_unlock(&mem_lock);
}

int soft_reg_mr(tbrt_pd *pd, void *addr, size_t len, int access, tbrt_mr **out)
{
    struct soft_dev *sd = soft_of(pd->dev);
    const struct soft_personality *p = sd->p;
    const int remote = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    if (p->mr_needs_remote_access &&
        (access & (IBV_ACCESS_LOCAL_WRITE | remote)) != (IBV_ACCESS_LOCAL_WRITE | remote))
        return dev_fail(&sd->dev, EINVAL,
                        "reg_mr: access 0x%x lacks LOCAL_WRITE|REMOTE_READ|REMOTE_WRITE; "
                        "Apple's provider rejects narrower access, even for SEND/RECV only",
                        access);
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE))
        return dev_fail(&sd->dev, EINVAL,
                        "reg_mr: REMOTE_WRITE/REMOTE_ATOMIC need LOCAL_WRITE (access 0x%x)", access);
    if (len > p->max_mr)
        return dev_fail(&sd->dev, EINVAL, "reg_mr: %zu bytes exceeds the %" PRIu64
                        "-byte limit of one memory region", len, p->max_mr);
    struct soft_mr *m = calloc(1, sizeof *m);
    if (!m)
        return dev_fail(&sd->dev, ENOMEM, "reg_mr: out of memory");
    pthread_mutex_lock(&mem_lock);
    int idx = -1;
    for (int i = 1; i < SOFT_MR_MAX && idx < 0; i++)
        if (!sd->mrs[i])
            idx = i;
    struct soft_backing *b = NULL;
    int rc = idx < 0 ? -ENOSPC
             : access & (IBV_ACCESS_LOCAL_WRITE | remote) ? backing_get(addr, len, &b)
                                                          : 0;
    if (rc) {
        pthread_mutex_unlock(&mem_lock);
        free(m);
        if (rc == -ENOSPC)
            return dev_fail(&sd->dev, ENOMEM, "reg_mr: all %d memory regions in use",
                            SOFT_MR_MAX - 1);
        return dev_fail(&sd->dev, -rc, "reg_mr: cannot share %zu bytes at %p: %s", len, addr,
                        strerror(-rc));
    }
    /* key = index << 8 | generation, never 0, so a stale key misses */
    sd->mr_gen = (sd->mr_gen + 1) & 0xff;
    if (sd->mr_gen == 0)
        sd->mr_gen = 1;
    uint32_t key = ((uint32_t)idx << 8) | sd->mr_gen;
    m->index = idx;
    m->shared = b != NULL;
    m->mr = (tbrt_mr){.dev = pd->dev, .pd = pd, .addr = addr, .length = len,
                      .lkey = key, .rkey = key, .access = access};
    sd->mrs[idx] = m;
    mr_publish(sd, idx, key, b ? b->memfd : -1, (uint32_t)access, (uintptr_t)addr, len,
               b ? (uintptr_t)addr - b->start : 0);
    pthread_mutex_unlock(&mem_lock);
    *out = &m->mr;
    return 0;
}

int soft_dereg_mr(tbrt_mr *mr)
{
    struct soft_mr *m = (struct soft_mr *)mr;
    struct soft_dev *sd = soft_of(mr->dev);
    if (sd->p->err_breaks_dereg && sd->qp_erred)
        return dev_fail(&sd->dev, EBUSY,
                        "dereg_mr: a queue pair of this device was moved to ERR; Apple's "
                        "provider then fails every region unmap (destroy QPs without ERR first)");
    pthread_mutex_lock(&mem_lock);
    mr_publish(sd, m->index, 0, -1, 0, 0, 0, 0);
    sd->mrs[m->index] = NULL;
    if (m->shared)
        backing_put(backing_of((uintptr_t)mr->addr, (uintptr_t)mr->addr + mr->length));
    pthread_mutex_unlock(&mem_lock);
    free(m);
    return 0;
}

int soft_local_mem(struct soft_dev *sd, uint32_t lkey, uint64_t addr, uint64_t len,
                   uint32_t need_access, void **out)
{
    uint32_t idx = lkey >> 8;
    if (idx == 0 || idx >= SOFT_MR_MAX)
        return -EINVAL;
    const struct soft_mr *m = sd->mrs[idx];
    if (!m || m->mr.lkey != lkey)
        return -ENOENT;
    uint64_t base = (uintptr_t)m->mr.addr, mlen = m->mr.length;
    if (addr < base || len > mlen || addr - base > mlen - len)
        return -ERANGE;
    if (((uint32_t)m->mr.access & need_access) != need_access)
        return -EACCES;
    *out = (void *)(uintptr_t)addr;
    return 0;
}
