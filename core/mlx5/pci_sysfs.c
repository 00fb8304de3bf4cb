/* pci_sysfs.c - real hardware without VFIO: BAR0 through
 * /sys/bus/pci/devices/<addr>/resource0 (mmap), config space through
 * .../config, DMA memory from 2 MiB hugepages whose physical addresses come
 * from /proc/self/pagemap (root only; the IOMMU must be off or passthrough).
 * Caller memory cannot be mapped this way (no pinning): memory regions need
 * VFIO. Fails with the reason when there is no such device. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mlx5/ifc.h"
#include "mlx5/pci.h"
#include "util/util.h"

enum {
    HUGE_2M = 2 << 20,
    PAGEMAP_PFN_MASK_BITS = 55,      /* pagemap entry bits 0-54: page frame number */
    PAGEMAP_PRESENT_BIT = 63,
};

struct sysfs_pci {
    struct mlx5_pci pci;
    volatile uint8_t *bar;
    size_t bar_size;
    int cfg_fd;
};

static struct sysfs_pci *S(struct mlx5_pci *p) { return (struct sysfs_pci *)p; }

static uint32_t sy_read32(struct mlx5_pci *p, uint32_t off)
{
    return be32toh(*(volatile uint32_t *)(S(p)->bar + off));
}

static void sy_write32(struct mlx5_pci *p, uint32_t off, uint32_t v)
{
    *(volatile uint32_t *)(S(p)->bar + off) = htobe32(v);
}

static void sy_write64(struct mlx5_pci *p, uint32_t off, const void *b)
{
    uint64_t v;
    memcpy(&v, b, 8);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    *(volatile uint64_t *)(S(p)->bar + off) = v;
}

static int phys_of(void *virt, uint64_t *phys)
{
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    uint64_t ent = 0, page = (uint64_t)sysconf(_SC_PAGESIZE);
    ssize_t n = pread(fd, &ent, sizeof ent, (off_t)((uintptr_t)virt / page * sizeof ent));
    close(fd);
    if (n != sizeof ent || !(ent >> PAGEMAP_PRESENT_BIT & 1))
        return -EFAULT;
    uint64_t pfn = ent & ((1ull << PAGEMAP_PFN_MASK_BITS) - 1);
    if (!pfn)
        return -EPERM; /* pagemap hides frame numbers from non-root */
    *phys = pfn * page + ((uintptr_t)virt % page);
    return 0;
}

static int sy_dma_alloc(struct mlx5_pci *p, size_t size, size_t align, struct mlx5_dma *out)
{
    (void)p;
    if (size > HUGE_2M || align > HUGE_2M)
        return -EINVAL; /* one hugepage is physically contiguous; more is not */
    void *v = mmap(NULL, HUGE_2M, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_LOCKED, -1, 0);
    if (v == MAP_FAILED)
        return -errno;
    memset(v, 0, HUGE_2M);
    uint64_t phys = 0;
    int rc = phys_of(v, &phys);
    if (rc < 0) {
        munmap(v, HUGE_2M);
        return rc;
    }
    *out = (struct mlx5_dma){.virt = v, .bus = phys, .size = HUGE_2M};
    return 0;
}

static void sy_dma_free(struct mlx5_pci *p, struct mlx5_dma *d)
{
    (void)p;
    if (d->virt)
        munmap(d->virt, d->size);
    memset(d, 0, sizeof *d);
}

static int sy_dma_map(struct mlx5_pci *p, void *addr, size_t len, struct mlx5_dma *out)
{
    (void)p; (void)addr; (void)len; (void)out;
    return -EOPNOTSUPP;
}

static void sy_dma_unmap(struct mlx5_pci *p, struct mlx5_dma *d) { (void)p; (void)d; }

static int sy_cfg_read(struct mlx5_pci *p, uint32_t off, void *buf, size_t len)
{
    return pread(S(p)->cfg_fd, buf, len, off) == (ssize_t)len ? 0 : -EIO;
}

static int sy_cfg_write(struct mlx5_pci *p, uint32_t off, const void *buf, size_t len)
{
    return pwrite(S(p)->cfg_fd, buf, len, off) == (ssize_t)len ? 0 : -EIO;
}

static int sy_irq_fd(struct mlx5_pci *p, int vector)
{
    (void)p; (void)vector;
    return -EOPNOTSUPP; /* interrupts need VFIO */
}

static void sy_close(struct mlx5_pci *p)
{
    struct sysfs_pci *s = S(p);
    if (s->bar)
        munmap((void *)s->bar, s->bar_size);
    if (s->cfg_fd >= 0)
        close(s->cfg_fd);
    free(s);
}

static const struct mlx5_pci_ops sysfs_ops = {
    .kind = "sysfs", .read32 = sy_read32, .write32 = sy_write32, .write64 = sy_write64,
    .dma_alloc = sy_dma_alloc, .dma_free = sy_dma_free, .dma_map = sy_dma_map,
    .dma_unmap = sy_dma_unmap, .cfg_read = sy_cfg_read, .cfg_write = sy_cfg_write,
    .irq_fd = sy_irq_fd, .close = sy_close,
};

int pci_sysfs_open(const char *addr, struct mlx5_pci **out, char *err, size_t errlen)
{
    *out = NULL;
    char path[256];
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/resource0", addr);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, errlen, errno, "sysfs: %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size <= 0) {
        close(fd);
        return err_set(err, errlen, ENODEV, "sysfs: %s: no BAR0 size", path);
    }
    struct sysfs_pci *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return err_set(err, errlen, ENOMEM, "sysfs: out of memory");
    }
    s->pci.ops = &sysfs_ops;
    str_copy(s->pci.addr, sizeof s->pci.addr, addr);
    s->bar_size = (size_t)st.st_size;
    void *bar = mmap(NULL, s->bar_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/config", addr);
    s->cfg_fd = open(path, O_RDWR | O_CLOEXEC);
    if (bar == MAP_FAILED || s->cfg_fd < 0) {
        int e = errno;
        s->bar = bar == MAP_FAILED ? NULL : bar;
        sy_close(&s->pci);
        return err_set(err, errlen, e, "sysfs: %s: cannot map BAR0 / open config: %s", addr, strerror(e));
    }
    s->bar = bar;
    *out = &s->pci;
    return 0;
}

int pci_open_hw(const char *addr, struct mlx5_pci **out, char *err, size_t errlen)
{
    char why_vfio[256], why_sysfs[256];
    int rc = pci_vfio_open(addr, out, why_vfio, sizeof why_vfio);
    if (rc == 0)
        return 0;
    rc = pci_sysfs_open(addr, out, why_sysfs, sizeof why_sysfs);
    if (rc == 0)
        return 0;
    /* a missing sysfs entry means there is no such device */
    return err_set(err, errlen, rc == -ENOENT ? ENODEV : -rc, "mlx5 %s: no way to the device: %s; %s", addr,
                   why_vfio, why_sysfs);
}
