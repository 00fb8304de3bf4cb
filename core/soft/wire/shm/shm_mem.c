/* shm_mem.c - registered memory of the shared-memory wire.
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
 * An owner may unmap registered memory and map something else there. A NIC
 * would go on writing the pages it pinned, never the new ones: so here a
 * region's backing is held by pointer, not found by address; a backing no
 * longer mapped where it was leaves the list when a registration meets it,
 * and going back to private pages touches only what is still the memfd's
 * (putting the old contents over a heap that took the address corrupted
 * it).
 *
 * An MR's addresses for SGEs and peers are its iova (the address itself
 * unless registered with another): the table entry says where the iova
 * range starts, and both our own lookups (shm_local_mem) and peers'
 * (shm_peer_mem) translate from it.
 *
 * The memfds are sealed against shrinking, so a peer that mapped one can
 * trust the size it saw (shm_peer.c). Our own keys are checked against
 * w->mrs (process memory), never against the shared table: that is for
 * peers to read, and anyone could have written it. Keys are
 * index << 8 | generation (the mlx5 model relies on it: its mkey is the
 * key). The personality's rules on registration are the objects'
 * (core/soft/soft_mr.c). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "soft/wire/shm/shm.h"
#include "util/debug.h"
#include "util/util.h"

struct shm_backing {
    uintptr_t start, end;       /* page aligned */
    int memfd;
    int refs;
};

/* One of our registrations: what our own keys are checked against. */
struct shm_mr {
    uint32_t key;
    uint32_t access;
    uint64_t addr, len;
    uint64_t iova;              /* what SGEs and remote addresses call addr */
    struct shm_backing *backing; /* a reference on its pages' backing; NULL: local only */
};

/* The process's backings and its open shm wires (whose MR entries move
 * when backings merge), under mem_lock. */
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_backing **backings; /* by address (they never overlap) */
static size_t nbackings, backings_cap;
static struct soft_wire *wires;

static uintptr_t page_size(void)
{
    static uintptr_t ps;
    if (!ps)
        ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    return ps;
}

static struct shm_backing *backing_of(uintptr_t s, uintptr_t e);

/* Is [s, e) inside one of the process's backings? */
static bool in_backing(uintptr_t s, uintptr_t e) { return backing_of(s, e) != NULL; }

int shm_memfd_seal(int fd)
{
    return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
}

/* Give [s, e) a new memfd backing with its current contents (only the
 * pages that hold any: shm_pages.c). */
static int swap_in(uintptr_t s, uintptr_t e, int *memfd_out)
{
    size_t len = e - s;
    int fd = memfd_create("tbrt-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    int rc = ftruncate(fd, (off_t)len) != 0 || shm_memfd_seal(fd) != 0 ? -errno : 0;
    if (!rc)
        rc = shm_pages_copy_in(fd, s, s, e, in_backing);
    if (!rc && mmap((void *)s, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
                   MAP_FAILED)
        rc = -errno;
    if (rc) {
        close(fd);
        return rc;
    }
    *memfd_out = fd;
    return 0;
}

static struct shm_mr_entry *mr_table(struct soft_wire *w)
{
    return (struct shm_mr_entry *)((char *)w->ctx + SHM_CTX_MR_OFF);
}

/* Publish MR entry idx for peers (key 0 when withdrawn), under the entry's
 * sequence lock: epoch odd while it changes. */
static void mr_publish(struct soft_wire *w, int idx, uint32_t key, int memfd, uint32_t access,
                       uint64_t addr, uint64_t length, uint64_t fd_off, uint64_t iova)
{
    struct shm_mr_entry *e = &mr_table(w)[idx];
    uint32_t ep = atomic_load_explicit(&e->epoch, memory_order_relaxed);
    atomic_store_explicit(&e->epoch, ep + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    e->key = key;
    e->memfd = memfd;
    e->access = access;
    e->addr = addr;
    e->length = length;
    e->fd_off = fd_off;
    e->iova = iova;
    atomic_store_explicit(&e->epoch, ep + 2, memory_order_release);
}

/* The first backing that ends after s (an index into backings): found by
 * halving, so a registration costs the same with 2 links or 64. */
static size_t backing_after(uintptr_t s)
{
    size_t lo = 0, hi = nbackings;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (backings[mid]->end <= s)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The backing that holds [s, e), or NULL. */
static struct shm_backing *backing_of(uintptr_t s, uintptr_t e)
{
    size_t i = backing_after(s);
    if (i < nbackings && backings[i]->start <= s && e <= backings[i]->end)
        return backings[i];
    return NULL;
}

static void backing_put(struct shm_backing *b)
{
    if (!b || --b->refs > 0)
        return;
    size_t i = backing_after(b->start);
    if (i < nbackings && backings[i] == b) {
        memmove(&backings[i], &backings[i + 1], (nbackings - i - 1) * sizeof backings[0]);
        nbackings--;
    }
    /* only the pages still mapped from the memfd: the owner may have
     * unmapped registered memory, and what lives there now is not ours */
    size_t gone = shm_pages_copy_out(b->memfd, b->start, b->end);
    if (gone && DBG_ON(DBG_EVENT))
        dbg_line(0, "soft: %zu bytes of registered memory at %p..%p were unmapped while "
                 "registered: left as they are now", gone, (void *)b->start, (void *)b->end);
    close(b->memfd);
    free(b);
}

/* Backings over [s, e) whose pages are no longer all mapped from their
 * memfd (the owner unmapped registered memory and something else was
 * mapped there) leave the list: the address range is free for a backing of
 * what lives there now, and the old one lasts, off the list, until its
 * last region goes (backing_put then leaves the foreign pages alone).
 * Peers' writes to the old regions land in the old pages, as a NIC's DMA
 * lands in the pages it pinned. */
static void retire_stale(uintptr_t s, uintptr_t e)
{
    for (size_t i = backing_after(s); i < nbackings && backings[i]->start < e;) {
        struct shm_backing *b = backings[i];
        if (!shm_pages_foreign(b->memfd, b->start, b->end)) {
            i++;
            continue;
        }
        memmove(&backings[i], &backings[i + 1], (nbackings - i - 1) * sizeof backings[0]);
        nbackings--;
    }
}

/* A backing for [addr, addr+len) (a reference taken), or none when the
 * memory cannot be shared (local only): 0 either way, or -errno. */
static int backing_get(void *addr, size_t len, struct shm_backing **out)
{
    uintptr_t ps = page_size();
    uintptr_t s = (uintptr_t)addr & ~(ps - 1);
    uintptr_t e = ((uintptr_t)addr + len + ps - 1) & ~(ps - 1);
    retire_stale(s, e);
    *out = backing_of(s, e);
    if (*out) {
        (*out)->refs++;
        return 0;
    }
    /* grow the range over the backings it overlaps (backings[i0, i1)), then
     * swap the union */
    uintptr_t us = s, ue = e;
    int refs = 1;
    size_t i0 = backing_after(s), i1 = i0;
    for (; i1 < nbackings && backings[i1]->start < ue; i1++) {
        us = TBRT_MIN(us, backings[i1]->start);
        ue = TBRT_MAX(ue, backings[i1]->end);
    }
    /* parts that are existing backings are fine: they merge */
    int kind = shm_pages_kind(us, ue, in_backing);
    if (kind == SHM_PAGES_READONLY)
        return -EFAULT;
    if (kind == SHM_PAGES_LOCAL)
        return 0;               /* local only */
    if (nbackings == backings_cap) {
        size_t cap = backings_cap ? 2 * backings_cap : 16;
        struct shm_backing **nbk = realloc(backings, cap * sizeof *nbk);
        if (!nbk)
            return -ENOMEM;
        backings = nbk;
        backings_cap = cap;
    }
    struct shm_backing *nb = calloc(1, sizeof *nb);
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
    for (size_t i = i0; i < i1; i++) {
        struct shm_backing *b = backings[i];
        refs += b->refs;
        for (struct soft_wire *d = wires; d; d = d->next_wire)
            for (int i = 1; i < SHM_MR_MAX; i++) {
                struct shm_mr *m = d->mrs[i];
                if (m && m->backing == b) {
                    m->backing = nb;
                    mr_publish(d, i, m->key, fd, m->access, m->addr, m->len, m->addr - us,
                               m->iova);
                }
            }
        close(b->memfd);
        free(b);
    }
    /* the new one takes the place of those it merged (or its own) */
    memmove(&backings[i0 + 1], &backings[i1], (nbackings - i1) * sizeof backings[0]);
    nbackings = nbackings - (i1 - i0) + 1;
    *nb = (struct shm_backing){.start = us, .end = ue, .memfd = fd, .refs = refs};
    backings[i0] = nb;
    *out = nb;
    return 0;
}

void shm_mem_attach(struct soft_wire *w)
{
    pthread_mutex_lock(&mem_lock);
    w->next_wire = wires;
    wires = w;
    w->mem_attached = true;
    pthread_mutex_unlock(&mem_lock);
}

/* The regions a closing wire still holds give their pages back. */
void shm_mem_detach(struct soft_wire *w)
{
    if (!w->mem_attached)
        return;
    pthread_mutex_lock(&mem_lock);
    for (struct soft_wire **pp = &wires; *pp; pp = &(*pp)->next_wire)
        if (*pp == w) {
            *pp = w->next_wire;
            break;
        }
    for (int i = 1; i < SHM_MR_MAX; i++) {
        struct shm_mr *m = w->mrs[i];
        if (!m)
            continue;
        backing_put(m->backing);
        w->mrs[i] = NULL;
        free(m);
    }
    w->mem_attached = false;
    pthread_mutex_unlock(&mem_lock);
}

int shm_mr_reg(struct soft_wire *w, void *addr, size_t len, uint64_t iova, uint32_t access,
               uint32_t *key,
               char *why, size_t whylen)
{
    struct shm_mr *m = calloc(1, sizeof *m);
    if (!m)
        return err_set(why, whylen, ENOMEM, "out of memory");
    pthread_mutex_lock(&mem_lock);
    int idx = -1;
    for (int i = 1; i < SHM_MR_MAX && idx < 0; i++)
        if (!w->mrs[i])
            idx = i;
    const uint32_t writable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_WRITE;
    struct shm_backing *b = NULL;
    int rc = idx < 0 ? -ENOSPC : (access & writable) ? backing_get(addr, len, &b) : 0;
    if (rc) {
        pthread_mutex_unlock(&mem_lock);
        free(m);
        if (rc == -ENOSPC)
            return err_set(why, whylen, ENOMEM, "all %d memory regions in use", SHM_MR_MAX - 1);
        if (rc == -EFAULT)
            return err_set(why, whylen, EFAULT, "%zu bytes at %p are not all mapped writable, "
                           "and access 0x%x asks to write them", len, addr, access);
        return err_set(why, whylen, -rc, "cannot share %zu bytes at %p: %s", len, addr,
                       strerror(-rc));
    }
    /* key = index << 8 | generation, never 0, so a stale key misses */
    w->mr_gen = (w->mr_gen + 1) & 0xff;
    if (w->mr_gen == 0)
        w->mr_gen = 1;
    *m = (struct shm_mr){.key = ((uint32_t)idx << 8) | w->mr_gen, .access = access,
                         .addr = (uintptr_t)addr, .len = len, .iova = iova,
                         .backing = b};
    w->mrs[idx] = m;
    mr_publish(w, idx, m->key, b ? b->memfd : -1, access, m->addr, len,
               b ? m->addr - b->start : 0, iova);
    pthread_mutex_unlock(&mem_lock);
    *key = m->key;
    return 0;
}

void shm_mr_dereg(struct soft_wire *w, uint32_t key)
{
    uint32_t idx = key >> 8;
    if (idx == 0 || idx >= SHM_MR_MAX || !w->mrs[idx] || w->mrs[idx]->key != key)
        return;
    pthread_mutex_lock(&mem_lock);
    struct shm_mr *m = w->mrs[idx];
    mr_publish(w, (int)idx, 0, -1, 0, 0, 0, 0, 0);
    w->mrs[idx] = NULL;
    backing_put(m->backing);
    pthread_mutex_unlock(&mem_lock);
    free(m);
}

int shm_local_mem(struct soft_wire *w, uint32_t lkey, uint64_t addr, uint64_t len,
                  uint32_t need_access, void **out)
{
    uint32_t idx = lkey >> 8;
    if (idx == 0 || idx >= SHM_MR_MAX)
        return -EINVAL;
    const struct shm_mr *m = w->mrs[idx];
    if (!m || m->key != lkey)
        return -ENOENT;
    if (addr < m->iova || len > m->len || addr - m->iova > m->len - len)
        return -ERANGE;
    if ((m->access & need_access) != need_access)
        return -EACCES;
    *out = (void *)(uintptr_t)(m->addr + (addr - m->iova));
    return 0;
}

int shm_mr_local(struct soft_wire *w, uint32_t lkey, uint64_t addr, uint64_t len,
                 uint32_t need_access, void **out)
{
    int rc = shm_local_mem(w, lkey, addr, len, need_access, out);
    /* a receive into memory a peer could not reach fails the same whoever
     * places the message (SOFT_VERR_NOT_SHARED) */
    if (rc == 0 && (need_access & IBV_ACCESS_LOCAL_WRITE) && !w->mrs[lkey >> 8]->backing)
        return -EPERM;
    return rc;
}
