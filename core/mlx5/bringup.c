/* bringup.c - bring a ConnectX up from user space and tear it down again, in
 * the order Linux mlx5_core and the seed use:
 *
 *   wait for "initializing" to clear; bus master; command queue;
 *   ENABLE_HCA; QUERY_ISSI; SET_ISSI 1; QUERY_PAGES boot + MANAGE_PAGES;
 *   ACCESS_REG host endianness; QUERY_HCA_CAP general max/cur; SET_HCA_CAP
 *   general (log_max_qp as Linux's profile, no command checksums unless
 *   asked); QUERY_HCA_CAP RoCE cur + SET_HCA_CAP RoCE; QUERY_PAGES init +
 *   MANAGE_PAGES; INIT_HCA; QUERY_HCA_CAP general cur; QUERY_PAGES regular +
 *   MANAGE_PAGES; ALLOC_UAR; QUERY_NIC_VPORT_CONTEXT (MAC);
 *   MODIFY_NIC_VPORT_CONTEXT roce_en; ALLOC_PD; CREATE_MKEY (PA);
 *   SET_ROCE_ADDRESS for each GID (link-local, then the IPv4-mapped GIDs of
 *   this host's addresses, RoCE v2).
 *
 * Teardown is the reverse: RoCE addresses cleared, DESTROY_MKEY, DEALLOC_PD,
 * roce_en off, DEALLOC_UAR, TEARDOWN_HCA, pages reclaimed (MANAGE_PAGES
 * TAKE until the firmware holds none), DISABLE_HCA. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mlx5/cmdif.h"
#include "mlx5/hca.h"
#include "util/util.h"

enum {
    CAP_GENERAL = 0, CAP_ROCE = 4,           /* MLX5_CAP_GENERAL, MLX5_CAP_ROCE */
    /* The most firmware pages one HCA is given in all: 4 GiB, 80 times what
     * the ConnectX-4 of the Linux trace asks for (12868 init pages, 50 MiB).
     * QUERY_PAGES is device output: an answer beyond this (or beyond half
     * of this host's memory) is a corrupted one, not a debt to pay. */
    FW_PAGES_MAX = 1 << 20,
    RECLAIM_BATCH = 512,
    /* enough rounds of RECLAIM_BATCH to take back all it may hold, and some:
     * a firmware that gives back a few at a time is slow, not stuck */
    RECLAIM_ROUNDS = FW_PAGES_MAX / RECLAIM_BATCH + 64,
};

static const char *pages_kind(int op_mod)
{
    return op_mod == MLX5C_BOOT_PAGES ? "boot" : op_mod == MLX5C_INIT_PAGES ? "init" : "regular";
}

/* What the firmware can be owed now: FW_PAGES_MAX, and half the host's
 * memory, less what it already holds. */
static int64_t pages_owable(const struct mlx5_hca *h)
{
    int64_t max = FW_PAGES_MAX;
    long phys = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (phys > 0 && psz > 0) {
        int64_t half = (int64_t)phys / 2 * (psz / HCA_PAGE);
        if (half < max)
            max = half;
    }
    return max - h->pages_given;
}

/* Give what QUERY_PAGES asks for in one MANAGE_PAGES, as Linux does (the
 * CX-4 trace gives 12868 pages in a 202-block chain); the memory comes in
 * chunks of HCA_PAGE_CHUNK pages. */
static int give_pages(struct mlx5_hca *h, int op_mod)
{
    int32_t n;
    int rc = mlx5_query_pages(h, op_mod, &n);
    if (rc < 0 || n <= 0)
        return rc;
    int64_t owable = pages_owable(h);
    if (n > owable)
        return hca_fail(h, EPROTO, "mlx5 %s: QUERY_PAGES (%s): the firmware asks for %d pages "
                        "(%.1f GiB), more than it can be owed now (%lld: at most %d pages in "
                        "all, and half this host's memory; it holds %d): a corrupted answer? "
                        "(status 0x%x, syndrome 0x%x)", h->pci->addr, pages_kind(op_mod), n,
                        (double)n * HCA_PAGE / (1 << 30), (long long)TBRT_MAX(owable, 0),
                        FW_PAGES_MAX, h->pages_given, h->last_status, h->last_syndrome);
    uint64_t *pas = malloc(sizeof *pas * (size_t)n);
    if (!pas)
        return hca_fail(h, ENOMEM, "mlx5 pages: out of memory");
    int first = h->nchunks, have = 0;
    while (have < n) {
        int take = TBRT_MIN(n - have, HCA_PAGE_CHUNK);
        if (h->nchunks == h->cap_chunks) {
            int cap = h->cap_chunks ? h->cap_chunks * 2 : 16;
            struct hca_chunk *c = realloc(h->chunks, (size_t)cap * sizeof *c);
            if (!c) {
                free(pas);
                return hca_fail(h, ENOMEM, "mlx5 pages: out of memory");
            }
            h->chunks = c;
            h->cap_chunks = cap;
        }
        struct hca_chunk *c = &h->chunks[h->nchunks];
        memset(c, 0, sizeof *c);
        rc = h->pci->ops->dma_alloc(h->pci, (size_t)take * HCA_PAGE, HCA_PAGE, &c->dma);
        if (rc < 0) {
            free(pas);
            return hca_fail(h, -rc, "mlx5 pages: cannot allocate %d firmware pages", take);
        }
        h->nchunks++;
        for (int i = 0; i < take; i++)
            pas[have + i] = c->dma.bus + (uint64_t)i * HCA_PAGE;
        have += take;
    }
    rc = mlx5_manage_pages_give(h, pas, (uint32_t)n);
    free(pas);
    if (rc < 0)
        return rc;
    for (int i = first; i < h->nchunks; i++) {
        h->chunks[i].given = (int)(h->chunks[i].dma.size / HCA_PAGE);
        h->pages_given += h->chunks[i].given;
    }
    return 0;
}

static int return_page(struct mlx5_hca *h, uint64_t pa)
{
    /* the chunk of the page returned last first: firmware gives pages back
     * a chunk's worth at a time (a scan each, for 2^19 pages in 2^11
     * chunks, was 2^30 looks: seconds) */
    int at = h->chunk_hint < h->nchunks ? h->chunk_hint : 0;
    for (int k = 0; k < h->nchunks; k++) {
        int i = scan_from_hint(k, at);
        struct hca_chunk *c = &h->chunks[i];
        if (pa >= c->dma.bus && pa < c->dma.bus + c->dma.size && c->given > 0) {
            c->given--;
            h->pages_given--;
            h->chunk_hint = i;
            return 0;
        }
    }
    return hca_fail(h, EPROTO, "mlx5 MANAGE_PAGES: firmware returned page 0x%llx it was never given",
                    (unsigned long long)pa);
}

static int reclaim_pages(struct mlx5_hca *h)
{
    uint64_t pas[RECLAIM_BATCH];
    for (int round = 0; h->pages_given > 0 && round < RECLAIM_ROUNDS; round++) {
        uint32_t got;
        int rc = mlx5_manage_pages_take(h, (uint32_t)TBRT_MIN(h->pages_given, RECLAIM_BATCH), pas, &got);
        if (rc < 0)
            return rc;
        if (got == 0)
            return hca_fail(h, EBUSY, "mlx5 pages: firmware keeps %d pages", h->pages_given);
        for (uint32_t i = 0; i < got; i++)
            if ((rc = return_page(h, pas[i])) < 0)
                return rc;
    }
    for (int i = 0; i < h->nchunks; i++)
        h->pci->ops->dma_free(h->pci, &h->chunks[i].dma);
    h->nchunks = 0;
    return 0;
}

/* GID table: link-local from the MAC (EUI-64), then ::ffff:a.b.c.d for each
 * IPv4 address of this host, 127.0.0.1 included. */
static void build_gids(struct mlx5_hca *h)
{
    uint8_t *g = h->gids[0];
    memset(g, 0, 16);
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8] = h->mac[0] ^ 0x02;
    g[9] = h->mac[1];
    g[10] = h->mac[2];
    g[11] = 0xff;
    g[12] = 0xfe;
    g[13] = h->mac[3];
    g[14] = h->mac[4];
    g[15] = h->mac[5];
    h->ngids = 1;
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0)
        return;
    for (struct ifaddrs *i = ifa; i && h->ngids < HCA_MAX_GIDS; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
            continue;
        uint8_t *m = h->gids[h->ngids];
        memset(m, 0, 16);
        m[10] = m[11] = 0xff;
        memcpy(m + 12, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
        int dup = 0;
        for (int k = 1; k < h->ngids; k++)
            dup |= memcmp(h->gids[k], m, 16) == 0;
        if (!dup)
            h->ngids++;
    }
    freeifaddrs(ifa);
}

static int set_caps(struct mlx5_hca *h)
{
    int rc;
    if ((rc = mlx5_query_hca_cap(h, CAP_GENERAL << 1 | 0, h->cap_gen_max)) < 0 ||
        (rc = mlx5_query_hca_cap(h, CAP_GENERAL << 1 | 1, h->cap_gen)) < 0)
        return rc;
    uint8_t *c = h->cap_gen;
    uint32_t maxqp = IGET(h->cap_gen_max, cmd_hca_cap, log_max_qp);
    ISET(c, cmd_hca_cap, log_max_qp, TBRT_MIN(maxqp, (uint32_t)LINUX_PROF_LOG_MAX_QP));
    ISET(c, cmd_hca_cap, cmdif_checksum, h->checksums ? 3 : 0);
    if ((rc = mlx5_set_hca_cap(h, CAP_GENERAL, c)) < 0)
        return rc;
    if (!IGET(h->cap_gen, cmd_hca_cap, roce))
        return 0;
    if ((rc = mlx5_query_hca_cap(h, CAP_ROCE << 1 | 1, h->cap_roce)) < 0)
        return rc;
    return mlx5_set_hca_cap(h, CAP_ROCE, h->cap_roce);
}

static int bring_up(struct mlx5_hca *h, const struct hca_opts *o)
{
    int rc;
    uint32_t cur, supported;
    if ((rc = pci_set_bus_master(h->pci)) < 0)
        return hca_fail(h, -rc, "mlx5 %s: cannot enable bus mastering", h->pci->addr);
    if ((rc = cmdq_init(h)) < 0)
        return rc;
    if (o->raw)
        return 0;
    if ((rc = mlx5_enable_hca(h)) < 0)
        return rc;
    h->enabled = 1;
    if ((rc = mlx5_query_issi(h, &cur, &supported)) < 0)
        return rc;
    if (!(supported & (1u << HCA_ISSI)))
        return hca_fail(h, EPROTO, "mlx5 %s: firmware does not support ISSI %d (supported 0x%x)",
                        h->pci->addr, HCA_ISSI, supported);
    if ((rc = mlx5_set_issi(h, HCA_ISSI)) < 0 || (rc = give_pages(h, MLX5C_BOOT_PAGES)) < 0 ||
        (rc = mlx5_access_reg_host_endianness(h)) < 0)
        return rc;
    h->checksums = o->checksums;  /* from now on every block is signed */
    if ((rc = set_caps(h)) < 0 || (rc = give_pages(h, MLX5C_INIT_PAGES)) < 0 ||
        (rc = mlx5_init_hca(h)) < 0)
        return rc;
    h->initialized = 1;
    if ((rc = mlx5_query_hca_cap(h, CAP_GENERAL << 1 | 1, h->cap_gen)) < 0 ||
        (rc = give_pages(h, MLX5C_POST_INIT_PAGES)) < 0)
        return rc;
    if ((rc = mlx5_alloc_uar(h, &h->uar)) < 0)
        return rc;
    h->have_uar = 1;
    if ((rc = mlx5_query_nic_vport_context(h, h->mac, &h->roce_en)) < 0 ||
        (rc = mlx5_modify_nic_vport_context_roce_en(h, 1)) < 0)
        return rc;
    h->roce_en = 1;
    if ((rc = mlx5_alloc_pd(h, &h->pd)) < 0)
        return rc;
    h->have_pd = 1;
    if ((rc = mlx5_create_mkey_pa(h, h->pd, &h->pa_mkey)) < 0)
        return rc;
    h->have_pa_mkey = 1;
    build_gids(h);
    for (int i = 0; i < h->ngids; i++)
        if ((rc = mlx5_set_roce_address(h, (uint32_t)i, h->gids[i], h->mac)) < 0)
            return rc;
    return 0;
}

int hca_open(struct mlx5_pci *pci, FILE *trace, const struct hca_opts *o, struct mlx5_hca **out,
             char *err, size_t errlen)
{
    *out = NULL;
    struct hca_opts none = {0};
    struct mlx5_hca *h = calloc(1, sizeof *h);
    if (!h)
        return err_set(err, errlen, ENOMEM, "mlx5 %s: out of memory", pci->addr);
    h->pci = pci;
    h->trace = trace;
    h->timeout_ms = HCA_CMD_TIMEOUT_MS;
    pthread_mutex_init(&h->cmd_lock, NULL);
    int rc = bring_up(h, o ? o : &none);
    if (rc < 0) {
        err_set(err, errlen, -rc, "%s", h->why);
        hca_teardown(h);
        hca_free(h);
        return rc;
    }
    *out = h;
    return 0;
}

int hca_teardown(struct mlx5_hca *h)
{
    int first = 0;
#define STEP(call)                                                             \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ < 0 && !first)                                                 \
            first = rc_;                                                       \
    } while (0)
    static const uint8_t zero[16];
    if (h->initialized)
        for (int i = h->ngids - 1; i >= 0; i--)
            STEP(mlx5_set_roce_address(h, (uint32_t)i, zero, zero));
    h->ngids = 0;
    if (h->have_pa_mkey)
        STEP(mlx5_destroy_mkey(h, h->pa_mkey));
    if (h->have_pd)
        STEP(mlx5_dealloc_pd(h, h->pd));
    if (h->roce_en)
        STEP(mlx5_modify_nic_vport_context_roce_en(h, 0));
    if (h->have_uar)
        STEP(mlx5_dealloc_uar(h, h->uar));
    h->have_pa_mkey = h->have_pd = h->roce_en = h->have_uar = 0;
    if (h->initialized)
        STEP(mlx5_teardown_hca(h));
    h->initialized = 0;
    if (h->pages_given)
        STEP(reclaim_pages(h));
    if (h->enabled && !h->pages_given)
        STEP(mlx5_disable_hca(h));
    h->enabled = 0;
#undef STEP
    return first;
}

void hca_free(struct mlx5_hca *h)
{
    if (!h)
        return;
    cmdq_fini(h);
    /* Pages the firmware never gave back stay mapped: it may still write them. */
    free(h->chunks);
    pthread_mutex_destroy(&h->cmd_lock);
    free(h);
}

int pci_set_bus_master(struct mlx5_pci *p)
{
    uint16_t cmd;
    int rc = p->ops->cfg_read(p, PCI_CFG_COMMAND, &cmd, sizeof cmd);
    if (rc < 0)
        return rc;
    cmd |= PCI_CMD_MEMORY | PCI_CMD_BUS_MASTER;
    return p->ops->cfg_write(p, PCI_CFG_COMMAND, &cmd, sizeof cmd);
}
