/* pci.h - what the mlx5 driver needs from a PCI function, behind one small
 * interface: 32-bit MMIO of BAR0 (big-endian device registers), 64-bit
 * doorbell stores, DMA-able memory with bus addresses, mapping caller memory
 * for DMA, and config space. Backends: the device model (pci_model.c),
 * VFIO (pci_vfio.c) and sysfs resource0 + hugepages + pagemap (pci_sysfs.c). */
#ifndef MLX5_PCI_H
#define MLX5_PCI_H

#include <stddef.h>
#include <stdint.h>

/* Memory the device can reach: virt for the CPU, bus for the device. */
struct mlx5_dma {
    void *virt;
    uint64_t bus;
    size_t size;
    void *priv;              /* backend's bookkeeping */
};

struct mlx5_pci;

struct mlx5_pci_ops {
    const char *kind;        /* "model", "vfio", "sysfs" */
    /* BAR0 registers: values in host order; the backend does the byte swap
     * of the big-endian device register. */
    uint32_t (*read32)(struct mlx5_pci *p, uint32_t off);
    void (*write32)(struct mlx5_pci *p, uint32_t off, uint32_t val);
    /* One 64-bit store of 8 bytes in memory order (UAR doorbells, BlueFlame). */
    void (*write64)(struct mlx5_pci *p, uint32_t off, const void *bytes8);
    /* Zeroed DMA memory, at least align-aligned (a power of two <= 2 MiB). */
    int (*dma_alloc)(struct mlx5_pci *p, size_t size, size_t align, struct mlx5_dma *out);
    void (*dma_free)(struct mlx5_pci *p, struct mlx5_dma *d);
    /* Make caller memory reachable (memory regions). bus is the bus address
     * of addr's 4 KiB page; pages are contiguous on the bus. */
    int (*dma_map)(struct mlx5_pci *p, void *addr, size_t len, struct mlx5_dma *out);
    void (*dma_unmap)(struct mlx5_pci *p, struct mlx5_dma *d);
    int (*cfg_read)(struct mlx5_pci *p, uint32_t off, void *buf, size_t len);
    int (*cfg_write)(struct mlx5_pci *p, uint32_t off, const void *buf, size_t len);
    /* Optional (NULL on hardware): receive WQEs were posted to qpn. A real
     * NIC reads the receive queue when a message arrives; the model hands
     * them to its wire at once, so it needs telling, and returns when done. */
    void (*rq_posted)(struct mlx5_pci *p, uint32_t qpn);
    /* An eventfd that becomes readable when the device raises the
     * interrupt vector (MSI-X); -errno when the backend has none. */
    int (*irq_fd)(struct mlx5_pci *p, int vector);
    void (*close)(struct mlx5_pci *p);
};

struct mlx5_pci {
    const struct mlx5_pci_ops *ops;
    char addr[32];           /* "0000:02:00.0" or "model0" */
};

/* PCI config space: command register and its bus master bit (PCI spec). */
enum {
    PCI_CFG_VENDOR = 0x00,
    PCI_CFG_COMMAND = 0x04,
    PCI_CMD_MEMORY = 0x2,
    PCI_CMD_BUS_MASTER = 0x4,
    PCI_VENDOR_MELLANOX = 0x15b3,
};

/* Open a backend; 0 or -errno with the reason in err. */
int pci_model_open(const void *model_opts, struct mlx5_pci **out, char *err, size_t errlen);
int pci_vfio_open(const char *addr, struct mlx5_pci **out, char *err, size_t errlen);
int pci_sysfs_open(const char *addr, struct mlx5_pci **out, char *err, size_t errlen);
/* Real hardware: VFIO first, then sysfs; both reasons when neither works. */
int pci_open_hw(const char *addr, struct mlx5_pci **out, char *err, size_t errlen);

/* Helpers over the ops. */
int pci_set_bus_master(struct mlx5_pci *p);

#endif
