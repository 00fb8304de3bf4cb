/* pci_model.c - the PCI interface of the device model: BAR0 accesses go to
 * the model's registers (model_fw.c), "DMA" memory is anonymous mmap'd
 * memory that the model reaches through a table of regions, each with a
 * made-up bus address (never the virtual one, so a driver that hands the
 * device a virtual address is caught), and config space is a small array. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mlx5/model_int.h"
#include "util/util.h"

enum {
    PAGE = 4096,
    /* Bus addresses start where the CX-4 trace's did (0x7ab0e8000...), so
     * traces look alike; they only grow and are never reused. */
    MODEL_BUS_BASE_PAGE = 0x7a0000,  /* bus page number: bus 0x7a0000000 */
    PCI_DEVICE_CONNECTX4 = 0x1013,   /* PCI id of ConnectX-4 */
};

static struct model *M(struct mlx5_pci *p) { return (struct model *)p; }

static uint32_t pm_read32(struct mlx5_pci *p, uint32_t off) { return model_read32(M(p), off); }
static void pm_write32(struct mlx5_pci *p, uint32_t off, uint32_t v) { model_write32(M(p), off, v); }
static void pm_write64(struct mlx5_pci *p, uint32_t off, const void *b) { model_write64(M(p), off, b); }

static int region_add(struct model *m, uint8_t *virt, size_t size, size_t align, int mapped,
                      uint64_t *bus)
{
    if (align < PAGE)
        align = PAGE;
    pthread_mutex_lock(&m->lock);
    if (m->nregions == m->cap_regions) {
        int cap = m->cap_regions ? m->cap_regions * 2 : 64;
        struct model_region *r = realloc(m->regions, (size_t)cap * sizeof *r);
        if (!r) {
            pthread_mutex_unlock(&m->lock);
            return -ENOMEM;
        }
        m->regions = r;
        m->cap_regions = cap;
    }
    uint64_t b = (m->next_bus + align - 1) & ~(uint64_t)(align - 1);
    m->next_bus = b + ((size + PAGE - 1) & ~(size_t)(PAGE - 1)) + PAGE; /* a guard page */
    m->regions[m->nregions++] = (struct model_region){b, virt, size, mapped};
    pthread_mutex_unlock(&m->lock);
    *bus = b;
    return 0;
}

static void region_del(struct model *m, uint64_t bus)
{
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < m->nregions; i++)
        if (m->regions[i].bus == bus) {
            m->regions[i] = m->regions[--m->nregions];
            break;
        }
    pthread_mutex_unlock(&m->lock);
}

void *model_dma_region(struct model *m, uint64_t bus, uint64_t *bus_base, size_t *size)
{
    void *v = NULL;
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < m->nregions; i++) {
        struct model_region *r = &m->regions[i];
        if (bus >= r->bus && bus - r->bus < r->size) {
            v = r->virt;
            if (bus_base)
                *bus_base = r->bus;
            if (size)
                *size = r->size;
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return v;
}

void *model_dma(struct model *m, uint64_t bus, size_t len)
{
    uint64_t base;
    size_t size;
    uint8_t *v = model_dma_region(m, bus, &base, &size);
    if (!v || len > size - (bus - base))
        return NULL;
    return v + (bus - base);
}

static int pm_dma_alloc(struct mlx5_pci *p, size_t size, size_t align, struct mlx5_dma *out)
{
    size_t len = (size + PAGE - 1) & ~(size_t)(PAGE - 1);
    void *v = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (v == MAP_FAILED)
        return -errno;
    uint64_t bus;
    int rc = region_add(M(p), v, len, align, 0, &bus);
    if (rc < 0) {
        munmap(v, len);
        return rc;
    }
    *out = (struct mlx5_dma){.virt = v, .bus = bus, .size = len};
    return 0;
}

static void pm_dma_free(struct mlx5_pci *p, struct mlx5_dma *d)
{
    if (!d->virt)
        return;
    region_del(M(p), d->bus);
    munmap(d->virt, d->size);
    memset(d, 0, sizeof *d);
}

static int pm_dma_map(struct mlx5_pci *p, void *addr, size_t len, struct mlx5_dma *out)
{
    uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(PAGE - 1);
    uintptr_t end = ((uintptr_t)addr + len + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
    uint64_t bus;
    int rc = region_add(M(p), (uint8_t *)start, end - start, PAGE, 1, &bus);
    if (rc < 0)
        return rc;
    *out = (struct mlx5_dma){.virt = (void *)start, .bus = bus, .size = end - start};
    return 0;
}

static void pm_dma_unmap(struct mlx5_pci *p, struct mlx5_dma *d)
{
    if (d->virt)
        region_del(M(p), d->bus);
    memset(d, 0, sizeof *d);
}

/* Config space: vendor/device and the command register; the rest reads 0. */
static uint8_t *cfg_of(struct model *m) { return m->cfg; }
static int pm_cfg_read(struct mlx5_pci *p, uint32_t off, void *buf, size_t len)
{
    if (off + len > 256)
        return -EINVAL;
    memcpy(buf, cfg_of(M(p)) + off, len);
    return 0;
}

static int pm_cfg_write(struct mlx5_pci *p, uint32_t off, const void *buf, size_t len)
{
    if (off + len > 256)
        return -EINVAL;
    if (off >= PCI_CFG_COMMAND && off + len <= PCI_CFG_COMMAND + 2) /* only the command register is writable */
        memcpy(cfg_of(M(p)) + off, buf, len);
    return 0;
}

static void pm_close(struct mlx5_pci *p) { model_destroy(M(p)); }
static void pm_rq_posted(struct mlx5_pci *p, uint32_t qpn) { model_rq_posted(M(p), qpn); }
static int pm_irq_fd(struct mlx5_pci *p, int vector) { return model_irq_fd(M(p), vector); }

static const struct mlx5_pci_ops model_pci_ops = {
    .kind = "model",
    .read32 = pm_read32,
    .write32 = pm_write32,
    .write64 = pm_write64,
    .dma_alloc = pm_dma_alloc,
    .dma_free = pm_dma_free,
    .dma_map = pm_dma_map,
    .dma_unmap = pm_dma_unmap,
    .cfg_read = pm_cfg_read,
    .cfg_write = pm_cfg_write,
    .rq_posted = pm_rq_posted,
    .irq_fd = pm_irq_fd,
    .close = pm_close,
};

void pci_model_init(struct model *m)
{
    m->pci.ops = &model_pci_ops;
    m->next_bus = (uint64_t)MODEL_BUS_BASE_PAGE << 12;
    uint8_t *cfg = cfg_of(m);
    cfg[0] = PCI_VENDOR_MELLANOX & 0xff;
    cfg[1] = PCI_VENDOR_MELLANOX >> 8;
    cfg[2] = PCI_DEVICE_CONNECTX4 & 0xff;
    cfg[3] = PCI_DEVICE_CONNECTX4 >> 8;
    cfg[PCI_CFG_COMMAND] = PCI_CMD_MEMORY;
}

int pci_model_open(const void *opts, struct mlx5_pci **out, char *err, size_t errlen)
{
    *out = NULL;
    struct model *m = model_create(opts, err, errlen);
    if (!m)
        return -ENOMEM;
    *out = &m->pci;
    return 0;
}

struct mlx5_pci *model_pci(struct model *m) { return &m->pci; }

void model_wake(struct model *m)
{
    uint64_t one = 1;
    if (write(m->wake_fd, &one, sizeof one) < 0) {
        /* the counter is saturated: the thread is awake anyway */
    }
}

void model_irq(struct model *m, int vector)
{
    uint64_t one = 1;
    if (vector >= 0 && vector < MODEL_IRQ_VECTORS && m->irq_fd[vector] >= 0)
        if (write(m->irq_fd[vector], &one, sizeof one) < 0) {
            /* saturated: still readable */
        }
}

int model_irq_fd(struct model *m, int vector)
{
    if (vector < 0 || vector >= MODEL_IRQ_VECTORS)
        return -EINVAL;
    return m->irq_fd[vector];
}
