/* case_unsupported.c - every entry for what the soft device does not have
 * fails as libibverbs does for a provider without the feature: NULL with
 * errno EOPNOTSUPP, or EOPNOTSUPP returned. Run with TBRT_DEBUG, each also
 * says why on stderr (the spec checks that). And the vendor stand-ins say
 * "not mine" the way libmlx5 and libefa do for a foreign device. */
#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>

#include "abi_check.h"

#define NULL_EOPNOTSUPP(name, expr)                                            \
    do {                                                                       \
        errno = 0;                                                             \
        void *r_ = (void *)(expr);                                             \
        CHECK(!r_ && errno == EOPNOTSUPP, "unsupported." name, "got %p, errno %d", r_, errno); \
    } while (0)
#define RETURNS_EOPNOTSUPP(name, expr)                                         \
    do {                                                                       \
        int r_ = (expr);                                                       \
        CHECK(r_ == EOPNOTSUPP, "unsupported." name, "returned %d", r_);       \
    } while (0)

int case_unsupported(void)
{
    struct pair p;
    pair_open(&p, IBV_QPT_RC, 0, 0);
    struct ibv_srq_init_attr_ex sx = {.attr = {.max_wr = 8, .max_sge = 1},
                                      .comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE,
                                      .srq_type = IBV_SRQT_XRC, .pd = p.pd};
    NULL_EOPNOTSUPP("ibv_create_srq_ex(XRC)", ibv_create_srq_ex(p.ctx, &sx));
    NULL_EOPNOTSUPP("ibv_alloc_mw", ibv_alloc_mw(p.pd, IBV_MW_TYPE_1));
    struct ibv_td_init_attr ta = {0};
    NULL_EOPNOTSUPP("ibv_alloc_td", ibv_alloc_td(p.ctx, &ta));
    struct ibv_parent_domain_init_attr pa = {.pd = p.pd};
    NULL_EOPNOTSUPP("ibv_alloc_parent_domain", ibv_alloc_parent_domain(p.ctx, &pa));
    struct ibv_alloc_dm_attr da = {.length = 4096};
    NULL_EOPNOTSUPP("ibv_alloc_dm", ibv_alloc_dm(p.ctx, &da));
    NULL_EOPNOTSUPP("ibv_alloc_null_mr", ibv_alloc_null_mr(p.pd));
    struct ibv_flow_attr fa = {.size = sizeof fa, .port = 1};
    NULL_EOPNOTSUPP("ibv_create_flow", ibv_create_flow(p.qp[0], &fa));
    struct ibv_wq_init_attr wa = {.wq_type = IBV_WQT_RQ, .max_wr = 4, .max_sge = 1, .pd = p.pd,
                                  .cq = p.cq[0]};
    NULL_EOPNOTSUPP("ibv_create_wq", ibv_create_wq(p.ctx, &wa));
    struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD |
                                                 IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1};
    NULL_EOPNOTSUPP("ibv_open_xrcd", ibv_open_xrcd(p.ctx, &xa));
    struct ibv_counters_init_attr ca = {0};
    NULL_EOPNOTSUPP("ibv_create_counters", ibv_create_counters(p.ctx, &ca));
    struct ibv_qp_open_attr oa = {.comp_mask = IBV_QP_OPEN_ATTR_NUM, .qp_num = 1};
    NULL_EOPNOTSUPP("ibv_open_qp", ibv_open_qp(p.ctx, &oa));
    NULL_EOPNOTSUPP("ibv_reg_dmabuf_mr", ibv_reg_dmabuf_mr(p.pd, 0, 4096, 0, -1, 0));
    NULL_EOPNOTSUPP("ibv_import_device", ibv_import_device(-1));
    NULL_EOPNOTSUPP("ibv_reg_mr(ON_DEMAND)",
                    ibv_reg_mr(p.pd, p.buf[0], 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND));
    RETURNS_EOPNOTSUPP("ibv_resize_cq", ibv_resize_cq(p.cq[0], 512));
    struct ibv_modify_cq_attr ma = {.attr_mask = IBV_CQ_ATTR_MODERATE};
    RETURNS_EOPNOTSUPP("ibv_modify_cq", ibv_modify_cq(p.cq[0], &ma));
    union ibv_gid g = {.raw = {0xff, 0x0e}};
    RETURNS_EOPNOTSUPP("ibv_attach_mcast", ibv_attach_mcast(p.qp[0], &g, 0));
    struct ibv_sge sg = {(uintptr_t)p.buf[0], 64, p.mr[0]->lkey};
    RETURNS_EOPNOTSUPP("ibv_advise_mr",
                       ibv_advise_mr(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sg, 1));
    struct ibv_ece ece = {.vendor_id = 0x15b3};
    RETURNS_EOPNOTSUPP("ibv_set_ece", ibv_set_ece(p.qp[0], &ece));
    pair_close(&p);

    /* the vendor stand-ins (tbrt exec puts them beside libibverbs) */
    void *mlx5 = dlopen("libmlx5.so.1", RTLD_NOW);
    CHECK(mlx5 != NULL, "unsupported.libmlx5_loads", "%s", dlerror());
    if (mlx5) {
        bool (*is_supported)(struct ibv_device *) = (bool (*)(struct ibv_device *))dlsym(
            mlx5, "mlx5dv_is_supported");
        void *(*open_dev)(struct ibv_device *, void *) =
            (void *(*)(struct ibv_device *, void *))dlsym(mlx5, "mlx5dv_open_device");
        int n;
        struct ibv_device **list = ibv_get_device_list(&n);
        CHECK(is_supported && !is_supported(list[0]), "unsupported.mlx5dv_is_supported",
              "says the soft device is an mlx5 device");
        errno = 0;
        void *c = open_dev ? open_dev(list[0], NULL) : (void *)1;
        CHECK(!c && errno == EOPNOTSUPP, "unsupported.mlx5dv_open_device", "errno %d", errno);
        ibv_free_device_list(list);
    }
    void *efa = dlopen("libefa.so.1", RTLD_NOW);
    CHECK(efa && dlsym(efa, "efadv_query_device"), "unsupported.libefa_loads", "%s", dlerror());
    return 0;
}
