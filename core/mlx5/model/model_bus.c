/* model_bus.c - the model's bus: the table of DMA regions (driver memory
 * the device may reach, each under a made-up bus address that is never the
 * virtual one, so a driver that hands the device a virtual address is
 * caught), and the two signals the device raises: the doorbell wake-up of
 * the model thread and the interrupt vectors (eventfds). The bottom layer of
 * the model: it calls nothing else of it. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "mlx5/model/model_int.h"
#include "util/util.h"

enum {
    PAGE = 4096,
    /* Bus addresses start where the CX-4 trace's did (0x7ab0e8000...), so
     * traces look alike; they only grow and are never reused. */
    MODEL_BUS_BASE_PAGE = 0x7a0000,  /* bus page number: bus 0x7a0000000 */
};

void model_bus_init(struct model *m) { m->next_bus = (uint64_t)MODEL_BUS_BASE_PAGE << 12; }

int model_region_add(struct model *m, uint8_t *virt, size_t size, size_t align, int mapped,
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

void model_region_del(struct model *m, uint64_t bus)
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
    /* the region found last first: a page list walks a region's pages in
     * turn (MANAGE_PAGES of 2^19 pages in chunks of 256: a scan each was
     * 2^19 x 2^11 looks, seconds, past the driver's command timeout) */
    int at = m->last_region < m->nregions ? m->last_region : 0;
    for (int k = 0; k < m->nregions; k++) {
        int i = scan_from_hint(k, at);
        struct model_region *r = &m->regions[i];
        if (bus >= r->bus && bus - r->bus < r->size) {
            v = r->virt;
            if (bus_base)
                *bus_base = r->bus;
            if (size)
                *size = r->size;
            m->last_region = i;
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
