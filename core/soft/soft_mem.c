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
 * backing (merged when they overlap partly). A forked child would share the
 * swapped pages with its parent; exec is fine. */
#include <errno.h>
#include <inttypes.h>
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

/* Give [s, e) a new memfd backing with its current contents. */
static int swap_in(uintptr_t s, uintptr_t e, int *memfd_out)
{
    size_t len = e - s;
    int fd = memfd_create("tbrt-mr", MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)len) != 0)
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
    return (struct soft_mr_entry *)((char *)sd->ctx + sd->ctx->mr_off);
}

int soft_backing_get(struct soft_dev *sd, void *addr, size_t len, bool want_shared,
                     struct soft_backing **out, int *memfd, uint64_t *fd_off, uint64_t *fd_len)
{
    uintptr_t ps = page_size();
    uintptr_t s = (uintptr_t)addr & ~(ps - 1);
    uintptr_t e = ((uintptr_t)addr + len + ps - 1) & ~(ps - 1);
    *out = NULL;
    *memfd = -1;
    *fd_off = *fd_len = 0;
    /* already inside one backing */
    for (struct soft_backing *b = sd->backings; b; b = b->next)
        if (b->start <= s && e <= b->end) {
            b->refs++;
            *out = b;
            *memfd = b->memfd;
            *fd_off = (uintptr_t)addr - b->start;
            *fd_len = b->end - b->start;
            return 0;
        }
    if (!want_shared)
        return 0;
    /* grow the range over the backings it overlaps, then swap the union */
    uintptr_t us = s, ue = e;
    int refs = 1;
    for (struct soft_backing *b = sd->backings; b; b = b->next)
        if (b->start < ue && us < b->end) {
            us = TBRT_MIN(us, b->start);
            ue = TBRT_MAX(ue, b->end);
        }
    if (!swappable(us, ue)) {
        /* also fine when the non-swappable part is an existing backing */
        bool ok = true;
        for (uintptr_t p = us; p < ue && ok; p += ps) {
            bool in_backing = false;
            for (struct soft_backing *b = sd->backings; b; b = b->next)
                if (b->start <= p && p < b->end)
                    in_backing = true;
            if (!in_backing && !swappable(p, p + ps))
                ok = false;
        }
        if (!ok)
            return 0;           /* local only */
    }
    int fd = -1;
    int rc = swap_in(us, ue, &fd);
    if (rc)
        return rc;
    /* retire the merged backings, moving their MRs to the new memfd */
    struct soft_backing **pp = &sd->backings;
    while (*pp) {
        struct soft_backing *b = *pp;
        if (b->start < ue && us < b->end) {
            refs += b->refs;
            struct soft_mr_entry *t = mr_table(sd);
            for (int i = 1; i < SOFT_MR_MAX; i++)
                if (atomic_load(&t[i].key) && t[i].memfd == b->memfd) {
                    t[i].memfd = fd;
                    t[i].fd_off = t[i].addr - us;
                    t[i].fd_len = ue - us;
                    /* a new epoch makes peers map the new memfd */
                    atomic_fetch_add(&t[i].epoch, 1);
                }
            close(b->memfd);
            *pp = b->next;
            free(b);
        } else {
            pp = &b->next;
        }
    }
    struct soft_backing *nb = calloc(1, sizeof *nb);
    if (!nb) {
        swap_out(us, ue);
        close(fd);
        return -ENOMEM;
    }
    nb->start = us;
    nb->end = ue;
    nb->memfd = fd;
    nb->refs = refs;
    nb->next = sd->backings;
    sd->backings = nb;
    *out = nb;
    *memfd = fd;
    *fd_off = (uintptr_t)addr - us;
    *fd_len = ue - us;
    return 0;
}

int soft_backing_put(struct soft_dev *sd, struct soft_backing *b)
{
    if (!b || --b->refs > 0)
        return 0;
    for (struct soft_backing **pp = &sd->backings; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    swap_out(b->start, b->end);
    close(b->memfd);
    free(b);
    return 0;
}

/* The backing that now holds [addr, addr+len) (merges may have replaced the
 * one an MR was registered with). */
static struct soft_backing *backing_of(struct soft_dev *sd, void *addr, size_t len)
{
    uintptr_t s = (uintptr_t)addr, e = s + len;
    for (struct soft_backing *b = sd->backings; b; b = b->next)
        if (b->start <= s && e <= b->end)
            return b;
    return NULL;
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
    struct soft_mr_entry *t = mr_table(sd);
    int idx = -1;
    for (int i = 1; i < SOFT_MR_MAX; i++)
        if (atomic_load(&t[i].key) == 0) {
            idx = i;
            break;
        }
    if (idx < 0)
        return dev_fail(&sd->dev, ENOMEM, "reg_mr: all %d memory regions in use", SOFT_MR_MAX - 1);
    struct soft_mr *m = calloc(1, sizeof *m);
    if (!m)
        return dev_fail(&sd->dev, ENOMEM, "reg_mr: out of memory");
    bool shared = access & (IBV_ACCESS_LOCAL_WRITE | remote);
    struct soft_backing *b;
    int memfd;
    uint64_t fd_off, fd_len;
    int rc = soft_backing_get(sd, addr, len, shared, &b, &memfd, &fd_off, &fd_len);
    if (rc) {
        free(m);
        return dev_fail(&sd->dev, -rc, "reg_mr: cannot share %zu bytes at %p: %s", len, addr,
                        strerror(-rc));
    }
    /* key = index << 8 | generation, never 0, so a stale key misses */
    sd->mr_gen = (sd->mr_gen + 1) & 0xff;
    if (sd->mr_gen == 0)
        sd->mr_gen = 1;
    uint32_t key = ((uint32_t)idx << 8) | sd->mr_gen;
    struct soft_mr_entry *e = &t[idx];
    e->memfd = memfd;
    e->access = (uint32_t)access;
    atomic_fetch_add(&e->epoch, 1);
    e->addr = (uintptr_t)addr;
    e->length = len;
    e->fd_off = fd_off;
    e->fd_len = fd_len;
    atomic_store_explicit(&e->key, key, memory_order_release);
    m->index = idx;
    m->backing = b;
    m->mr = (tbrt_mr){.dev = pd->dev, .pd = pd, .addr = addr, .length = len,
                      .lkey = key, .rkey = key, .access = access};
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
    struct soft_mr_entry *e = &mr_table(sd)[m->index];
    atomic_store_explicit(&e->key, 0, memory_order_release);
    if (m->backing)
        soft_backing_put(sd, backing_of(sd, mr->addr, mr->length));
    free(m);
    return 0;
}

int soft_local_mem(struct soft_dev *sd, uint32_t lkey, uint64_t addr, uint64_t len,
                   uint32_t need_access, void **out)
{
    uint32_t idx = lkey >> 8;
    if (idx == 0 || idx >= SOFT_MR_MAX)
        return -EINVAL;
    struct soft_mr_entry *e = &mr_table(sd)[idx];
    if (atomic_load_explicit(&e->key, memory_order_relaxed) != lkey)
        return -ENOENT;
    if (addr < e->addr || len > e->length || addr - e->addr > e->length - len)
        return -ERANGE;
    if ((e->access & need_access) != need_access)
        return -EACCES;
    *out = (void *)(uintptr_t)addr;
    return 0;
}
