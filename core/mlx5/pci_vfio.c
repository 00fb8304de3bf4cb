/* pci_vfio.c - real hardware through VFIO: a container with the type-1
 * IOMMU, the device's group, BAR0 mmap'd from the device region, config
 * space through its region, DMA with bus address = virtual address (IOVA
 * mapped with VFIO_IOMMU_MAP_DMA, which also pins caller memory), and MSI-X
 * vectors as eventfds. Fails with the reason where there is no device or no
 * vfio-pci binding. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/vfio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mlx5/ifc.h"
#include "mlx5/pci.h"
#include "util/util.h"

enum { VFIO_PAGE = 4096, MAX_VECTORS = 64 };

struct vfio_pci {
    struct mlx5_pci pci;
    int container, group, device;
    volatile uint8_t *bar;
    size_t bar_size;
    uint64_t cfg_off;
    int irq[MAX_VECTORS];
    int nirq;
};

static struct vfio_pci *V(struct mlx5_pci *p) { return (struct vfio_pci *)p; }

static uint32_t vf_read32(struct mlx5_pci *p, uint32_t off)
{
    return be32toh(*(volatile uint32_t *)(V(p)->bar + off));
}

static void vf_write32(struct mlx5_pci *p, uint32_t off, uint32_t v)
{
    *(volatile uint32_t *)(V(p)->bar + off) = htobe32(v);
}

static void vf_write64(struct mlx5_pci *p, uint32_t off, const void *b)
{
    uint64_t v;
    memcpy(&v, b, 8);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    *(volatile uint64_t *)(V(p)->bar + off) = v;
}

static int map_dma(struct vfio_pci *v, void *addr, size_t len)
{
    struct vfio_iommu_type1_dma_map m = {.argsz = sizeof m,
                                         .flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
                                         .vaddr = (uintptr_t)addr, .iova = (uintptr_t)addr, .size = len};
    return ioctl(v->container, VFIO_IOMMU_MAP_DMA, &m) < 0 ? -errno : 0;
}

static void unmap_dma(struct vfio_pci *v, uint64_t iova, size_t len)
{
    struct vfio_iommu_type1_dma_unmap u = {.argsz = sizeof u, .iova = iova, .size = len};
    ioctl(v->container, VFIO_IOMMU_UNMAP_DMA, &u);
}

static int vf_dma_alloc(struct mlx5_pci *p, size_t size, size_t align, struct mlx5_dma *out)
{
    size_t len = (size + VFIO_PAGE - 1) & ~(size_t)(VFIO_PAGE - 1);
    (void)align; /* mmap is page aligned; larger alignment comes from over-allocation */
    size_t total = align > VFIO_PAGE ? len + align : len;
    uint8_t *raw = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return -errno;
    uint8_t *v = align > VFIO_PAGE ? (uint8_t *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1)) : raw;
    int rc = map_dma(V(p), v, len);
    if (rc < 0) {
        munmap(raw, total);
        return rc;
    }
    *out = (struct mlx5_dma){.virt = v, .bus = (uintptr_t)v, .size = len, .priv = raw};
    return 0;
}

static void vf_dma_free(struct mlx5_pci *p, struct mlx5_dma *d)
{
    if (!d->virt)
        return;
    unmap_dma(V(p), d->bus, d->size);
    munmap(d->priv, d->size + ((uint8_t *)d->virt - (uint8_t *)d->priv));
    memset(d, 0, sizeof *d);
}

static int vf_dma_map(struct mlx5_pci *p, void *addr, size_t len, struct mlx5_dma *out)
{
    uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(VFIO_PAGE - 1);
    uintptr_t end = ((uintptr_t)addr + len + VFIO_PAGE - 1) & ~(uintptr_t)(VFIO_PAGE - 1);
    int rc = map_dma(V(p), (void *)start, end - start);
    if (rc < 0)
        return rc;
    *out = (struct mlx5_dma){.virt = (void *)start, .bus = start, .size = end - start};
    return 0;
}

static void vf_dma_unmap(struct mlx5_pci *p, struct mlx5_dma *d)
{
    if (d->virt)
        unmap_dma(V(p), d->bus, d->size);
    memset(d, 0, sizeof *d);
}

static int vf_cfg_read(struct mlx5_pci *p, uint32_t off, void *buf, size_t len)
{
    return pread(V(p)->device, buf, len, (off_t)(V(p)->cfg_off + off)) == (ssize_t)len ? 0 : -EIO;
}

static int vf_cfg_write(struct mlx5_pci *p, uint32_t off, const void *buf, size_t len)
{
    return pwrite(V(p)->device, buf, len, (off_t)(V(p)->cfg_off + off)) == (ssize_t)len ? 0 : -EIO;
}

/* Vector n gets an eventfd; all vectors up to n are (re)programmed at once. */
static int vf_irq_fd(struct mlx5_pci *p, int vector)
{
    struct vfio_pci *v = V(p);
    if (vector < 0 || vector >= MAX_VECTORS)
        return -EINVAL;
    if (vector < v->nirq)
        return v->irq[vector];
    for (int i = v->nirq; i <= vector; i++)
        if ((v->irq[i] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
            return -errno;
    v->nirq = vector + 1;
    size_t sz = sizeof(struct vfio_irq_set) + sizeof(int) * (size_t)v->nirq;
    struct vfio_irq_set *s = calloc(1, sz);
    if (!s)
        return -ENOMEM;
    s->argsz = (uint32_t)sz;
    s->flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    s->index = VFIO_PCI_MSIX_IRQ_INDEX;
    s->count = (uint32_t)v->nirq;
    memcpy(s->data, v->irq, sizeof(int) * (size_t)v->nirq);
    int rc = ioctl(v->device, VFIO_DEVICE_SET_IRQS, s) < 0 ? -errno : 0;
    free(s);
    return rc < 0 ? rc : v->irq[vector];
}

static void vf_close(struct mlx5_pci *p)
{
    struct vfio_pci *v = V(p);
    for (int i = 0; i < v->nirq; i++)
        close(v->irq[i]);
    if (v->bar)
        munmap((void *)v->bar, v->bar_size);
    if (v->device >= 0)
        close(v->device);
    if (v->group >= 0)
        close(v->group);
    if (v->container >= 0)
        close(v->container);
    free(v);
}

static const struct mlx5_pci_ops vfio_ops = {
    .kind = "vfio", .read32 = vf_read32, .write32 = vf_write32, .write64 = vf_write64,
    .dma_alloc = vf_dma_alloc, .dma_free = vf_dma_free, .dma_map = vf_dma_map,
    .dma_unmap = vf_dma_unmap, .cfg_read = vf_cfg_read, .cfg_write = vf_cfg_write,
    .irq_fd = vf_irq_fd, .close = vf_close,
};

int pci_vfio_open(const char *addr, struct mlx5_pci **out, char *err, size_t errlen)
{
    *out = NULL;
    char path[PATH_MAX], link[PATH_MAX];
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/iommu_group", addr);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n < 0)
        return err_set(err, errlen, errno == ENOENT ? ENODEV : errno,
                       "vfio: %s: no IOMMU group (%s)", addr, strerror(errno));
    link[n] = 0;
    const char *grp = strrchr(link, '/');
    grp = grp ? grp + 1 : link;
    struct vfio_pci *v = calloc(1, sizeof *v);
    if (!v)
        return err_set(err, errlen, ENOMEM, "vfio: out of memory");
    v->pci.ops = &vfio_ops;
    str_copy(v->pci.addr, sizeof v->pci.addr, addr);
    v->group = v->device = -1;
    const char *step = "open /dev/vfio/vfio";
    v->container = open("/dev/vfio/vfio", O_RDWR | O_CLOEXEC);
    int ok = v->container >= 0;
    if (ok) {
        step = "open the group (is the device bound to vfio-pci?)";
        snprintf(path, sizeof path, "/dev/vfio/%s", grp);
        ok = (v->group = open(path, O_RDWR | O_CLOEXEC)) >= 0;
    }
    if (ok) {
        step = "set container / type-1 IOMMU";
        ok = ioctl(v->group, VFIO_GROUP_SET_CONTAINER, &v->container) == 0 &&
             ioctl(v->container, VFIO_SET_IOMMU, VFIO_TYPE1_IOMMU) == 0;
    }
    if (ok) {
        step = "get the device fd";
        ok = (v->device = ioctl(v->group, VFIO_GROUP_GET_DEVICE_FD, addr)) >= 0;
    }
    struct vfio_region_info bar = {.argsz = sizeof bar, .index = VFIO_PCI_BAR0_REGION_INDEX};
    struct vfio_region_info cfg = {.argsz = sizeof cfg, .index = VFIO_PCI_CONFIG_REGION_INDEX};
    if (ok) {
        step = "region info";
        ok = ioctl(v->device, VFIO_DEVICE_GET_REGION_INFO, &bar) == 0 &&
             ioctl(v->device, VFIO_DEVICE_GET_REGION_INFO, &cfg) == 0;
    }
    if (ok) {
        step = "mmap BAR0";
        void *b = mmap(NULL, bar.size, PROT_READ | PROT_WRITE, MAP_SHARED, v->device, (off_t)bar.offset);
        ok = b != MAP_FAILED;
        if (ok) {
            v->bar = b;
            v->bar_size = bar.size;
            v->cfg_off = cfg.offset;
        }
    }
    if (!ok) {
        int e = errno ? errno : ENODEV;
        vf_close(&v->pci);
        return err_set(err, errlen, e, "vfio: %s: %s: %s", addr, step, strerror(e));
    }
    *out = &v->pci;
    return 0;
}
