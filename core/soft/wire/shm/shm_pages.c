/* shm_pages.c - what the process's memory is, for registration (shm_mem.c):
 * whether a range can be given a memfd backing, and moving its contents
 * into a backing and back out without touching pages that hold nothing.
 *
 * A range can be swapped when each of its pages is private, writable,
 * anonymous memory (heap, mmap, stack); one with a page nobody may write
 * (read-only, or not mapped) cannot be registered for writing at all, as
 * on a NIC, whose driver pins its pages for writing (EFAULT). Asked of the kernel one mapping at
 * a time (the PROCMAP_QUERY ioctl on /proc/self/maps, Linux 6.11), so the
 * cost does not grow with the number of mappings, which grows with every
 * link (rings, backings, peers' contexts): reading all of /proc/self/maps
 * took 500k instructions a registration with one link and 1.23M with 64.
 * Older kernels have only the text: it is read then, as before.
 *
 * A page that was never touched reads as zeros, as a new memfd's pages do,
 * so only pages that hold something are copied (/proc/self/pagemap says
 * which: present or swapped out), and a ring registered before use stays
 * unallocated; going back, only the backing's data extents are read
 * (SEEK_DATA), into fresh private pages moved in place with mremap. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "soft/wire/shm/shm.h"
#include "util/util.h"

/* The kernel's PROCMAP_QUERY interface (include/uapi/linux/fs.h, 6.11),
 * named here: Debian 12's headers predate it. */
struct shm_procmap_query {
    uint64_t size;
    uint64_t query_flags;
    uint64_t query_addr;
    uint64_t vma_start;
    uint64_t vma_end;
    uint64_t vma_flags;
    uint64_t vma_page_size;
    uint64_t vma_offset;
    uint64_t inode;
    uint32_t dev_major;
    uint32_t dev_minor;
    uint32_t vma_name_size;
    uint32_t build_id_size;
    uint64_t vma_name_addr;
    uint64_t build_id_addr;
};
#define SHM_PROCMAP_QUERY _IOWR('f', 17, struct shm_procmap_query)
#define SHM_PROCMAP_READABLE 0x01
#define SHM_PROCMAP_WRITABLE 0x02
#define SHM_PROCMAP_SHARED 0x08
#define SHM_PROCMAP_COVERING_OR_NEXT 0x10

/* pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst) */
#define SHM_PM_PRESENT (1ull << 63)
#define SHM_PM_SWAPPED (1ull << 62)

static uintptr_t page_size(void)
{
    static uintptr_t ps;
    if (!ps)
        ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    return ps;
}

/* One mapping: where it is, whether it is private writable anonymous,
 * whether it is writable at all, and whether it is shared, of which file
 * (inode) from which offset. */
struct vma {
    uintptr_t start, end;
    bool anon_rw, writable, shared;
    uint64_t inode, offset;
};

/* The mapping holding addr (next: or else the next one above it), asked of
 * the kernel: 1, 0 when there is none, -1 when the kernel has no
 * PROCMAP_QUERY. */
static int vma_query(int fd, uintptr_t addr, bool next, struct vma *v)
{
    struct shm_procmap_query q = {.size = sizeof q, .query_addr = addr,
                                  .query_flags = next ? SHM_PROCMAP_COVERING_OR_NEXT : 0};
    if (ioctl(fd, SHM_PROCMAP_QUERY, &q) != 0)
        return errno == ENOENT ? 0 : -1;
    *v = (struct vma){.start = (uintptr_t)q.vma_start, .end = (uintptr_t)q.vma_end,
                      .anon_rw = q.inode == 0 && q.dev_major == 0 && q.dev_minor == 0 &&
                                 (q.vma_flags & (SHM_PROCMAP_READABLE | SHM_PROCMAP_WRITABLE |
                                                 SHM_PROCMAP_SHARED)) ==
                                     (SHM_PROCMAP_READABLE | SHM_PROCMAP_WRITABLE),
                      .writable = (q.vma_flags & (SHM_PROCMAP_READABLE | SHM_PROCMAP_WRITABLE)) ==
                                  (SHM_PROCMAP_READABLE | SHM_PROCMAP_WRITABLE),
                      .shared = (q.vma_flags & SHM_PROCMAP_SHARED) != 0,
                      .inode = q.inode, .offset = q.vma_offset};
    return 1;
}

/* One line of /proc/self/maps as a mapping; false for a line it is not. */
static bool maps_line(const char *line, struct vma *v)
{
    uintptr_t a, b;
    char perms[8] = "";
    unsigned long long off;
    unsigned dmaj, dmin;
    unsigned long ino;
    int name_at = 0;
    if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %llx %x:%x %lu %n", &a, &b, perms, &off,
               &dmaj, &dmin, &ino, &name_at) < 7)
        return false;
    const char *name = name_at ? line + name_at : "";
    bool anon = ino == 0 && (name[0] == '\n' || name[0] == 0 || name[0] == '[');
    *v = (struct vma){.start = a, .end = b, .anon_rw = anon && strncmp(perms, "rw-p", 4) == 0,
                      .writable = strncmp(perms, "rw", 2) == 0, .shared = perms[3] == 's',
                      .inode = ino, .offset = off};
    return true;
}

/* The same from the text of /proc/self/maps (kernels before 6.11): every
 * mapping of [s, e) in order, through fn; false as soon as fn says so or a
 * hole is met. */
static bool vma_scan(FILE *f, uintptr_t s, uintptr_t e, bool (*fn)(const struct vma *, void *),
                     void *arg)
{
    char line[512];
    uintptr_t covered = s;
    while (covered < e && fgets(line, sizeof line, f)) {
        struct vma v;
        if (!maps_line(line, &v) || v.end <= covered || v.start >= e)
            continue;
        if (v.start > covered)
            return false;       /* a hole */
        if (!fn(&v, arg))
            return false;
        covered = v.end;
    }
    return covered >= e;
}

struct swap_check {
    uintptr_t s, e;
    bool (*ours)(uintptr_t, uintptr_t);
    int kind;                   /* SHM_PAGES_* so far */
};

static bool vma_ok(const struct vma *v, void *arg)
{
    struct swap_check *c = arg;
    if (!v->writable) {
        c->kind = SHM_PAGES_READONLY;
        return false;
    }
    if (!v->anon_rw && !c->ours(TBRT_MAX(v->start, c->s), TBRT_MIN(v->end, c->e)))
        c->kind = SHM_PAGES_LOCAL;
    return true;
}

int shm_pages_kind(uintptr_t s, uintptr_t e, bool (*ours)(uintptr_t, uintptr_t))
{
    struct swap_check c = {.s = s, .e = e, .ours = ours, .kind = SHM_PAGES_SWAPPABLE};
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return SHM_PAGES_LOCAL;     /* no way to know: share nothing */
    bool ok = true;
    int rc = 1;
    for (uintptr_t p = s; ok && p < e;) {
        struct vma v;
        if ((rc = vma_query(fd, p, false, &v)) <= 0)
            break;
        ok = vma_ok(&v, &c);
        p = v.end;
    }
    if (rc < 0) {
        FILE *f = fdopen(fd, "r");
        if (!f) {
            close(fd);
            return SHM_PAGES_LOCAL;
        }
        ok = vma_scan(f, s, e, vma_ok, &c);
        fclose(f);
    } else {
        close(fd);
    }
    /* a hole, or a mapping nobody may write */
    return ok && rc != 0 ? c.kind : SHM_PAGES_READONLY;
}

/* pwrite all of [p, p + n) to fd at off. Whole pages, so they take in the
 * neighbours of a buffer that shares its first or last page (a heap's): by
 * the raw system call, which a sanitizer does not take for the buffer's
 * own overflow. */
static int put(int fd, uintptr_t p, size_t n, off_t off)
{
    while (n) {
        ssize_t w = syscall(SYS_pwrite64, fd, (const void *)p, n, off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        p += (size_t)w;
        off += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Whether page p must be copied: it holds something in our page tables
 * (present or swapped out), or it lies in a backing already, whose pages may
 * hold what a peer wrote through its own mapping while ours never faulted
 * them in (pagemap says "not present" for those: asked page by page, as a
 * chunk can straddle a backing's edge). */
static bool page_needed(uint64_t ent, uintptr_t p, uintptr_t ps,
                        bool (*ours)(uintptr_t, uintptr_t))
{
    return (ent & (SHM_PM_PRESENT | SHM_PM_SWAPPED)) || (ours && ours(p, p + ps));
}

int shm_pages_copy_in(int fd, uintptr_t base, uintptr_t s, uintptr_t e,
                      bool (*ours)(uintptr_t, uintptr_t))
{
    uintptr_t ps = page_size();
    int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    enum { CHUNK = 512 };
    uint64_t ent[CHUNK];
    int rc = 0;
    for (uintptr_t p = s; p < e && !rc;) {
        size_t n = TBRT_MIN((size_t)((e - p) / ps), (size_t)CHUNK);
        /* all of the chunk in a backing already: every page goes */
        bool all = pm < 0 || (ours && ours(p, p + n * ps));
        if (!all && pread(pm, ent, n * sizeof ent[0], (off_t)(p / ps * sizeof ent[0])) !=
                        (ssize_t)(n * sizeof ent[0]))
            all = true;
        for (size_t i = 0; i < n && !rc;) {
            if (!all && !page_needed(ent[i], p + i * ps, ps, ours)) {
                i++;
                continue;
            }
            size_t j = i + 1;
            while (j < n && (all || page_needed(ent[j], p + j * ps, ps, ours)))
                j++;
            rc = put(fd, p + i * ps, (j - i) * ps, (off_t)(p + i * ps - base));
            i = j;
        }
        p += n * ps;
    }
    if (pm >= 0)
        close(pm);
    return rc;
}

/* Put private pages under [a, b) holding fd's data from offset a - s
 * (failing, the shared pages stay: still correct). */
static void copy_out_part(int fd, uintptr_t s, uintptr_t a, uintptr_t b)
{
    size_t len = b - a;
    off_t base = (off_t)(a - s), end = (off_t)(b - s);
    char *tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (tmp == MAP_FAILED)
        return;
    off_t at = base;
    bool ok = true;
    while (ok && at < end) {
        off_t d = lseek(fd, at, SEEK_DATA), h = end;
        if (d < 0 && errno == ENXIO)
            break;              /* no data past at */
        if (d < 0)
            d = at;             /* no SEEK_DATA here: all of it */
        else if (d >= end)
            break;
        else if ((h = lseek(fd, d, SEEK_HOLE)) < 0 || h > end)
            h = end;
        for (off_t o = d; ok && o < h;) {
            ssize_t r = pread(fd, tmp + (o - base), (size_t)(h - o), o);
            if (r < 0 && errno == EINTR)
                continue;
            ok = r > 0;
            o += r > 0 ? r : 0;
        }
        at = h;
    }
    /* the private pages take the place of the shared ones in one step */
    if (!ok || mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)a) == MAP_FAILED)
        munmap(tmp, len);
}

/* The part of mapping v over [s, e): ours (fd's inode, at the offset it was
 * mapped at) gets its private pages back when move is set; anything else
 * was put there after the owner unmapped the registered memory, is left
 * exactly as it is, and counted. */
static size_t copy_out_vma(const struct vma *v, int fd, uint64_t ino, uintptr_t s, uintptr_t e,
                           bool move)
{
    uintptr_t a = TBRT_MAX(v->start, s), b = TBRT_MIN(v->end, e);
    if (!v->shared || v->inode != ino || v->offset + (a - v->start) != a - s)
        return b - a;
    if (move)
        copy_out_part(fd, s, a, b);
    return 0;
}

/* Each mapping over [s, e) through copy_out_vma; the bytes not mapped from
 * fd at their offset (holes included). */
static size_t over_mappings(int fd, uintptr_t s, uintptr_t e, bool move)
{
    struct stat st;
    int mfd = fstat(fd, &st) == 0 ? open("/proc/self/maps", O_RDONLY | O_CLOEXEC) : -1;
    if (mfd < 0)
        return 0;               /* no way to know: keep the shared pages, still correct */
    uint64_t ino = (uint64_t)st.st_ino;
    size_t gone = 0;
    uintptr_t p = s;
    int rc = 1;
    while (p < e) {
        struct vma v;
        if ((rc = vma_query(mfd, p, true, &v)) <= 0 || v.start >= e)
            break;
        gone += v.start > p ? v.start - p : 0;
        gone += copy_out_vma(&v, fd, ino, s, e, move);
        p = v.end;
    }
    if (rc < 0) {               /* no PROCMAP_QUERY: the text, all of it */
        FILE *f = fdopen(mfd, "r");
        if (!f) {
            close(mfd);
            return 0;
        }
        char line[512];
        struct vma v;
        gone = 0;
        p = s;
        while (fgets(line, sizeof line, f))
            if (maps_line(line, &v) && v.end > p && v.start < e) {
                gone += v.start > p ? v.start - p : 0;
                gone += copy_out_vma(&v, fd, ino, s, e, move);
                p = v.end;
            }
        fclose(f);
    } else {
        close(mfd);
    }
    return gone + (p < e ? e - p : 0);
}

size_t shm_pages_copy_out(int fd, uintptr_t s, uintptr_t e)
{
    return over_mappings(fd, s, e, true);
}

size_t shm_pages_foreign(int fd, uintptr_t s, uintptr_t e)
{
    return over_mappings(fd, s, e, false);
}
