/* objects.c - protection domains, memory regions, address handles (also
 * from a received completion), multicast, and the fork helpers.
 *
 * Memory: the soft device registers a range by giving its pages a memfd
 * behind the same address, so peers can map it; SGEs and remote addresses
 * name the region by its iova (the address, for ibv_reg_mr; any other with
 * ibv_reg_mr_iova2; 0 with IBV_ACCESS_ZERO_BASED), which the device
 * translates. */
#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "verbs_lib.h"

/* ---- protection domains ------------------------------------------------------ */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    VB_INJECT_NULL("ibv_alloc_pd");
    struct vb_ctx *c = vb_ctx_of(context);
    struct vb_pd *p = calloc(1, sizeof *p);
    if (!p) {
        errno = ENOMEM;
        return NULL;
    }
    vb_lock(c);
    int rc = tbrt_pd_alloc(c->dev, &p->t);
    int err = rc ? vb_failed("ibv_alloc_pd", rc, c->dev) : 0;
    vb_unlock(c);
    if (err) {
        free(p);
        errno = err;
        return NULL;
    }
    p->ibv.context = context;
    p->ibv.handle = p->t->handle;
    vb_trace("ibv_alloc_pd");
    return &p->ibv;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
    VB_INJECT_INT("ibv_dealloc_pd");
    struct vb_ctx *c = vb_ctx_of(pd->context);
    struct vb_pd *p = (struct vb_pd *)pd;
    vb_lock(c);
    int rc = tbrt_pd_free(p->t);
    int err = rc ? vb_failed("ibv_dealloc_pd", rc, c->dev) : 0;
    vb_unlock(c);
    if (err)
        return err;
    vb_trace("ibv_dealloc_pd");
    free(p);
    return 0;
}

struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
    (void)context;
    (void)pd_handle;
    vb_unsupported("ibv_import_pd", "objects live in one process's device context; there is no "
                   "kernel handle to import them by");
    return NULL;
}

void ibv_unimport_pd(struct ibv_pd *pd) { (void)pd; }

/* ---- fork ---------------------------------------------------------------------- */

/* ibv_fork_init: registered ranges are kept out of forked children
 * (MADV_DONTFORK), as libibverbs does, so a child cannot write into memory
 * a peer may be copying into. */
static _Atomic int fork_protect;

int ibv_fork_init(void)
{
    atomic_store(&fork_protect, 1);
    return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
    return atomic_load(&fork_protect) ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

static int range_advise(void *base, size_t size, int advice)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)base & ~(uintptr_t)(page - 1);
    uintptr_t end = ((uintptr_t)base + size + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    if (madvise((void *)start, end - start, advice) != 0)
        return errno;
    return 0;
}

int ibv_dontfork_range(void *base, size_t size)
{
    return atomic_load(&fork_protect) ? range_advise(base, size, MADV_DONTFORK) : 0;
}

int ibv_dofork_range(void *base, size_t size)
{
    return atomic_load(&fork_protect) ? range_advise(base, size, MADV_DOFORK) : 0;
}

/* ---- memory regions ------------------------------------------------------------- */

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                unsigned int access)
{
    VB_INJECT_NULL("ibv_reg_mr");
    struct vb_ctx *c = vb_ctx_of(pd->context);
    if (access & IBV_ACCESS_ON_DEMAND) {
        vb_unsupported("ibv_reg_mr", "IBV_ACCESS_ON_DEMAND (the device has no on-demand paging)");
        return NULL;
    }
    if (access & IBV_ACCESS_ZERO_BASED) {
        iova = 0;               /* the region's addresses start at 0 */
        access &= ~(unsigned)IBV_ACCESS_ZERO_BASED;
    }
    /* the optional range (relaxed ordering...) is a hint a device may drop */
    access &= ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE;
    struct vb_mr *m = calloc(1, sizeof *m);
    if (!m) {
        errno = ENOMEM;
        return NULL;
    }
    int err = ibv_dontfork_range(addr, length);
    if (err) {
        free(m);
        errno = err;
        return NULL;
    }
    m->dontfork = atomic_load(&fork_protect);
    vb_lock(c);
    int rc = tbrt_mr_reg_iova(((struct vb_pd *)pd)->t, addr, length, iova, (int)access, &m->t);
    err = rc ? vb_failed("ibv_reg_mr", rc, c->dev) : 0;
    vb_unlock(c);
    if (err) {
        if (m->dontfork)
            ibv_dofork_range(addr, length);
        free(m);
        errno = err;
        return NULL;
    }
    m->ibv = (struct ibv_mr){.context = pd->context, .pd = pd, .addr = addr, .length = length,
                             .handle = m->t->lkey, .lkey = m->t->lkey, .rkey = m->t->rkey};
    vb_trace("ibv_reg_mr");
    return &m->ibv;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                               int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
                                 int fd, int access)
{
    (void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
    vb_unsupported("ibv_reg_dmabuf_mr", "dma-buf memory (device memory of another driver) cannot "
                   "be mapped by a software device's peers");
    return NULL;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
    VB_INJECT_INT("ibv_dereg_mr");
    struct vb_ctx *c = vb_ctx_of(mr->context);
    struct vb_mr *m = (struct vb_mr *)mr;
    vb_lock(c);
    int rc = tbrt_mr_dereg(m->t);
    int err = rc ? vb_failed("ibv_dereg_mr", rc, c->dev) : 0;
    vb_unlock(c);
    if (err)
        return err;
    if (m->dontfork)
        ibv_dofork_range(mr->addr, mr->length);
    vb_trace("ibv_dereg_mr");
    free(m);
    return 0;
}

/* A new registration replaces the old one (keys may change, as the verbs
 * allow); on failure the old one stays valid (IBV_REREG_MR_ERR_INPUT). */
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length,
                 int access)
{
    if (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED || !flags)
        return IBV_REREG_MR_ERR_INPUT;
    struct vb_mr *m = (struct vb_mr *)mr;
    struct ibv_pd *npd = flags & IBV_REREG_MR_CHANGE_PD ? pd : mr->pd;
    void *naddr = flags & IBV_REREG_MR_CHANGE_TRANSLATION ? addr : mr->addr;
    size_t nlen = flags & IBV_REREG_MR_CHANGE_TRANSLATION ? length : mr->length;
    int nacc = flags & IBV_REREG_MR_CHANGE_ACCESS ? access : m->t->access;
    if (!npd || !naddr || !nlen)
        return IBV_REREG_MR_ERR_INPUT;
    /* a new translation is addressed by itself; otherwise the iova stays */
    uint64_t niova = flags & IBV_REREG_MR_CHANGE_TRANSLATION ? (uintptr_t)naddr : m->t->iova;
    struct ibv_mr *fresh = ibv_reg_mr_iova2(npd, naddr, nlen, niova, (unsigned)nacc);
    if (!fresh)
        return IBV_REREG_MR_ERR_INPUT;
    struct vb_mr *f = (struct vb_mr *)fresh;
    struct vb_ctx *c = vb_ctx_of(mr->context);
    vb_lock(c);
    int rc = tbrt_mr_dereg(m->t);
    if (rc)
        vb_failed("ibv_rereg_mr", rc, c->dev);
    vb_unlock(c);
    if (rc) {
        ibv_dereg_mr(fresh);
        return IBV_REREG_MR_ERR_CMD;
    }
    if (m->dontfork)
        ibv_dofork_range(mr->addr, mr->length);
    m->t = f->t;
    m->dontfork = f->dontfork;
    mr->pd = npd;
    mr->addr = naddr;
    mr->length = nlen;
    mr->handle = f->ibv.handle;
    mr->lkey = f->ibv.lkey;
    mr->rkey = f->ibv.rkey;
    free(f);
    return 0;
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
    (void)pd, (void)mr_handle;
    vb_unsupported("ibv_import_mr", "no kernel handle to import a memory region by");
    return NULL;
}

void ibv_unimport_mr(struct ibv_mr *mr) { (void)mr; }

struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
    (void)context, (void)dm_handle;
    vb_unsupported("ibv_import_dm", "the device has no device memory");
    return NULL;
}

void ibv_unimport_dm(struct ibv_dm *dm) { (void)dm; }

/* ---- address handles -------------------------------------------------------------- */

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    VB_INJECT_NULL("ibv_create_ah");
    struct vb_ctx *c = vb_ctx_of(pd->context);
    struct vb_ah *a = calloc(1, sizeof *a);
    if (!a) {
        errno = ENOMEM;
        return NULL;
    }
    vb_lock(c);
    int rc = tbrt_ah_create(((struct vb_pd *)pd)->t, attr, &a->t);
    int err = rc ? vb_failed("ibv_create_ah", rc, c->dev) : 0;
    vb_unlock(c);
    if (err) {
        free(a);
        errno = err;
        return NULL;
    }
    a->ibv = (struct ibv_ah){.context = pd->context, .pd = pd, .handle = 0};
    vb_trace("ibv_create_ah");
    return &a->ibv;
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
    VB_INJECT_INT("ibv_destroy_ah");
    struct vb_ctx *c = vb_ctx_of(ah->context);
    struct vb_ah *a = (struct vb_ah *)ah;
    vb_lock(c);
    int rc = tbrt_ah_destroy(a->t);
    int err = rc ? vb_failed("ibv_destroy_ah", rc, c->dev) : 0;
    vb_unlock(c);
    if (err)
        return err;
    vb_trace("ibv_destroy_ah");
    free(a);
    return 0;
}

/* The index of our GID equal to gid, of the wanted type if the table is
 * typed (any type otherwise); -1 with errno when there is none. */
static int find_gid_index(struct ibv_context *context, uint8_t port, const union ibv_gid *gid,
                          int want_type)
{
    struct vb_ctx *c = vb_ctx_of(context);
    struct ibv_port_attr pa;
    int found = -1, other_type = -1;
    vb_lock(c);
    int rc = tbrt_port_query(c->dev, port, &pa);
    for (int i = 0; rc == 0 && found < 0 && i < pa.gid_tbl_len; i++) {
        struct ibv_gid_entry e;
        int r = tbrt_gid_query(c->dev, port, i, &e);
        if (r < 0 || memcmp(e.gid.raw, gid->raw, 16) != 0)
            continue;
        if (r == 1 || (int)e.gid_type == want_type)
            found = i;
        else if (other_type < 0)
            other_type = i;
    }
    if (rc)
        vb_failed("ibv_init_ah_from_wc", rc, c->dev);
    vb_unlock(c);
    if (rc) {
        errno = -rc;
        return -1;
    }
    if (found < 0)
        found = other_type;
    if (found < 0) {
        vb_say("ibv_init_ah_from_wc", ENOENT, "the GRH's destination GID is not one of port "
               "%u's", port);
        errno = ENOENT;
    }
    return found;
}


/* What a reply to the sender of wc needs, from the GRH the receive got
 * (IPv6 form, as the soft device writes it, or RoCE v2's IPv4 form). */
int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
                        struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
    memset(ah_attr, 0, sizeof *ah_attr);
    ah_attr->dlid = wc->slid;
    ah_attr->sl = wc->sl;
    ah_attr->src_path_bits = wc->dlid_path_bits;
    ah_attr->port_num = port_num;
    if (!(wc->wc_flags & IBV_WC_GRH))
        return 0;
    ah_attr->is_global = 1;
    uint32_t vtf = be32toh(grh->version_tclass_flow);
    ah_attr->grh.flow_label = vtf & 0xfffff;
    const struct iphdr *ip4 = (const struct iphdr *)((const char *)grh + 20);
    union ibv_gid ours;
    int idx;
    if ((vtf >> 28) == 6) {
        if (grh->dgid.raw[0] == 0xff) {
            errno = EINVAL;     /* multicast: not one of our GIDs */
            return -1;
        }
        ah_attr->grh.dgid = grh->sgid;
        ah_attr->grh.hop_limit = grh->hop_limit;
        ah_attr->grh.traffic_class = (uint8_t)(vtf >> 20);
        idx = find_gid_index(context, port_num, &grh->dgid,
                             grh->next_hdr == IPPROTO_UDP ? IBV_GID_TYPE_ROCE_V2
                                                          : IBV_GID_TYPE_ROCE_V1);
    } else if (ip4->version == 4) {
        memset(&ours, 0, sizeof ours);
        ours.raw[10] = ours.raw[11] = 0xff;
        memcpy(ours.raw + 12, &ip4->daddr, 4);
        memset(&ah_attr->grh.dgid, 0, sizeof ah_attr->grh.dgid);
        ah_attr->grh.dgid.raw[10] = ah_attr->grh.dgid.raw[11] = 0xff;
        memcpy(ah_attr->grh.dgid.raw + 12, &ip4->saddr, 4);
        ah_attr->grh.hop_limit = ip4->ttl;
        ah_attr->grh.traffic_class = ip4->tos;
        idx = find_gid_index(context, port_num, &ours, IBV_GID_TYPE_ROCE_V2);
    } else {
        errno = EPROTONOSUPPORT;
        return -1;
    }
    if (idx < 0)
        return -1;
    ah_attr->grh.sgid_index = (uint8_t)idx;
    return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
                                     uint8_t port_num)
{
    struct ibv_ah_attr a;
    if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &a))
        return NULL;
    return ibv_create_ah(pd, &a);
}

/* ---- multicast ---------------------------------------------------------------------- */

int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    (void)qp, (void)gid, (void)lid;
    return vb_unsupported("ibv_attach_mcast", "the soft device has no multicast groups (UD "
                          "sends reach one QP)");
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    (void)qp, (void)gid, (void)lid;
    return vb_unsupported("ibv_detach_mcast", "the soft device has no multicast groups");
}
