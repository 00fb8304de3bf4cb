/* mlx5dv.c - libmlx5.so.1 for tbrt exec: Mellanox direct verbs that say
 * "not an mlx5 device" (see dv.h). Every function Debian 12's binaries
 * import from libmlx5 is here (perftest's ib_*: devx_general_cmd, open_device,
 * create_qp, mkey and crypto calls; UCX's libuct_ib: is_supported,
 * init_obj, create_cq/qp, the devx object, UAR, umem and event calls),
 * plus query_device, create_wq and get_clock_info; libmlx5.map defines
 * every version node MLX5_1.0 .. MLX5_1.24, so a program that needs any
 * of them loads. */
#include <infiniband/mlx5dv.h>

#include "dv.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

#define L "mlx5"

bool mlx5dv_is_supported(struct ibv_device *device)
{
    return false;               /* no soft device is an mlx5 device */
}

DV_NULL(L, struct ibv_context *, mlx5dv_open_device, struct ibv_device *device,
        struct mlx5dv_context_attr *attr)
DV_INT(L, mlx5dv_query_device, struct ibv_context *ctx, struct mlx5dv_context *attrs)
DV_INT(L, mlx5dv_init_obj, struct mlx5dv_obj *obj, uint64_t obj_type)
/* MLX5_1.0's init_obj had the same arguments */
int mlx5dv_init_obj_1_0(struct mlx5dv_obj *obj, uint64_t obj_type);
__asm__(".symver mlx5dv_init_obj_1_0, mlx5dv_init_obj@MLX5_1.0");
int mlx5dv_init_obj_1_0(struct mlx5dv_obj *obj, uint64_t obj_type)
{
    return mlx5dv_init_obj(obj, obj_type);
}
DV_INT(L, mlx5dv_set_context_attr, struct ibv_context *context,
       enum mlx5dv_set_ctx_attr_type type, void *attr)
DV_INT(L, mlx5dv_get_clock_info, struct ibv_context *context, struct mlx5dv_clock_info *info)
DV_NULL(L, struct ibv_cq_ex *, mlx5dv_create_cq, struct ibv_context *context,
        struct ibv_cq_init_attr_ex *cq_attr, struct mlx5dv_cq_init_attr *mlx5_cq_attr)
DV_NULL(L, struct ibv_qp *, mlx5dv_create_qp, struct ibv_context *context,
        struct ibv_qp_init_attr_ex *qp_attr, struct mlx5dv_qp_init_attr *mlx5_qp_attr)
DV_NULL(L, struct ibv_wq *, mlx5dv_create_wq, struct ibv_context *context,
        struct ibv_wq_init_attr *attr, struct mlx5dv_wq_init_attr *mlx5_attr)

struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *qp)
{
    dv_say(L, "mlx5dv_qp_ex_from_ibv_qp_ex");
    return NULL;                /* not an mlx5 QP */
}

DV_NULL(L, struct mlx5dv_mkey *, mlx5dv_create_mkey, struct mlx5dv_mkey_init_attr *attr)
DV_INT(L, mlx5dv_destroy_mkey, struct mlx5dv_mkey *mkey)
DV_INT(L, mlx5dv_crypto_login, struct ibv_context *context, struct mlx5dv_crypto_login_attr *a)
DV_NULL(L, struct mlx5dv_dek *, mlx5dv_dek_create, struct ibv_context *context,
        struct mlx5dv_dek_init_attr *init_attr)
DV_INT(L, mlx5dv_dek_destroy, struct mlx5dv_dek *dek)

/* DevX: firmware objects by PRM command */
DV_INT(L, mlx5dv_devx_general_cmd, struct ibv_context *context, const void *in, size_t inlen,
       void *out, size_t outlen)
DV_NULL(L, struct mlx5dv_devx_obj *, mlx5dv_devx_obj_create, struct ibv_context *context,
        const void *in, size_t inlen, void *out, size_t outlen)
DV_INT(L, mlx5dv_devx_obj_query, struct mlx5dv_devx_obj *obj, const void *in, size_t inlen,
       void *out, size_t outlen)
DV_INT(L, mlx5dv_devx_obj_modify, struct mlx5dv_devx_obj *obj, const void *in, size_t inlen,
       void *out, size_t outlen)
DV_INT(L, mlx5dv_devx_obj_destroy, struct mlx5dv_devx_obj *obj)
DV_INT(L, mlx5dv_devx_qp_query, struct ibv_qp *qp, const void *in, size_t inlen, void *out,
       size_t outlen)
DV_INT(L, mlx5dv_devx_qp_modify, struct ibv_qp *qp, const void *in, size_t inlen, void *out,
       size_t outlen)
DV_INT(L, mlx5dv_devx_query_eqn, struct ibv_context *context, uint32_t vector, uint32_t *eqn)
DV_NULL(L, struct mlx5dv_devx_umem *, mlx5dv_devx_umem_reg, struct ibv_context *ctx, void *addr,
        size_t size, uint32_t access)
DV_INT(L, mlx5dv_devx_umem_dereg, struct mlx5dv_devx_umem *umem)
DV_NULL(L, struct mlx5dv_devx_uar *, mlx5dv_devx_alloc_uar, struct ibv_context *context,
        uint32_t flags)
DV_VOID(L, mlx5dv_devx_free_uar, struct mlx5dv_devx_uar *uar)
DV_NULL(L, struct mlx5dv_devx_event_channel *, mlx5dv_devx_create_event_channel,
        struct ibv_context *context, enum mlx5dv_devx_create_event_channel_flags flags)
DV_VOID(L, mlx5dv_devx_destroy_event_channel, struct mlx5dv_devx_event_channel *channel)
DV_INT(L, mlx5dv_devx_subscribe_devx_event, struct mlx5dv_devx_event_channel *channel,
       struct mlx5dv_devx_obj *obj, uint16_t events_sz, uint16_t events_num[], uint64_t cookie)

ssize_t mlx5dv_devx_get_event(struct mlx5dv_devx_event_channel *channel,
                              struct mlx5dv_devx_async_event_hdr *data, size_t len)
{
    dv_say(L, "mlx5dv_devx_get_event");
    errno = EOPNOTSUPP;
    return -1;
}
