/* pci_model.c - the model seen as a PCI function (struct mlx5_pci), the one
 * face the driver holds: BAR0 accesses go to the model's registers
 * (model_hw.c), "DMA" memory is anonymous mmap'd memory entered in the bus
 * space (model_bus.c), and config space is a small array. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mlx5/model/model_int.h"
#include "util/util.h"

enum {
    PAGE = 4096,
    PCI_DEVICE_CONNECTX4 = 0x1013,   /* PCI id of ConnectX-4 */
};

static struct model *M(struct mlx5_pci *p) { return (struct model *)p; }

static uint32_t pm_read32(struct mlx5_pci *p, uint32_t off) { return model_read32(M(p), off); }
static void pm_write32(struct mlx5_pci *p, uint32_t off, uint32_t v) { model_write32(M(p), off, v); }
static void pm_write64(struct mlx5_pci *p, uint32_t off, const void *b) { model_write64(M(p), off, b); }


static int pm_dma_alloc(struct mlx5_pci *p, size_t size, size_t align, struct mlx5_dma *out)
{
    size_t len = (size + PAGE - 1) & ~(size_t)(PAGE - 1);
    void *v = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (v == MAP_FAILED)
        return -errno;
    uint64_t bus;
    int rc = model_region_add(M(p), v, len, align, 0, &bus);
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
    model_region_del(M(p), d->bus);
    munmap(d->virt, d->size);
    memset(d, 0, sizeof *d);
}

static int pm_dma_map(struct mlx5_pci *p, void *addr, size_t len, struct mlx5_dma *out)
{
    uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(PAGE - 1);
    uintptr_t end = ((uintptr_t)addr + len + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
    uint64_t bus;
    int rc = model_region_add(M(p), (uint8_t *)start, end - start, PAGE, 1, &bus);
    if (rc < 0)
        return rc;
    *out = (struct mlx5_dma){.virt = (void *)start, .bus = bus, .size = end - start};
    return 0;
}

static void pm_dma_unmap(struct mlx5_pci *p, struct mlx5_dma *d)
{
    if (d->virt)
        model_region_del(M(p), d->bus);
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

static void pci_model_init(struct model *m)
{
    m->pci.ops = &model_pci_ops;
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
    pci_model_init(m);
    *out = &m->pci;
    return 0;
}

struct mlx5_pci *model_pci(struct model *m) { return &m->pci; }

void model_fault(struct model *m, int fault) { atomic_store(&m->fault, fault); }

bool model_cqe_lie(struct model *m, uint32_t n, uint8_t off, uint8_t bits)
{
    int k = atomic_load(&m->nlies);
    if (k >= MODEL_CQE_LIES || off > 63)
        return false;
    m->lies[k].n = n;
    m->lies[k].off = off;
    m->lies[k].bits = bits;
    atomic_store_explicit(&m->nlies, k + 1, memory_order_release);
    return true;
}

struct model *model_of_pci(struct mlx5_pci *p)
{
    return p && p->ops == &model_pci_ops ? (struct model *)p : NULL;
}


int model_irq_fd(struct model *m, int vector)
{
    if (vector < 0 || vector >= MODEL_IRQ_VECTORS)
        return -EINVAL;
    return m->irq_fd[vector];
}
