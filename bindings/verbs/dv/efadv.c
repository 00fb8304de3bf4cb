/* efadv.c - libefa.so.1 for tbrt exec: Amazon EFA direct verbs that say
 * "not an EFA device" (see dv.h); all six of rdma-core 44's functions. */
#include <infiniband/efadv.h>

#include "dv.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

#define L "efa"

DV_NULL(L, struct ibv_qp *, efadv_create_driver_qp, struct ibv_pd *pd,
        struct ibv_qp_init_attr *attr, uint32_t driver_qp_type)
DV_NULL(L, struct ibv_qp *, efadv_create_qp_ex, struct ibv_context *ctx,
        struct ibv_qp_init_attr_ex *attr_ex, struct efadv_qp_init_attr *efa_attr, uint32_t inlen)
DV_INT(L, efadv_query_device, struct ibv_context *ctx, struct efadv_device_attr *attr,
       uint32_t inlen)
DV_INT(L, efadv_query_ah, struct ibv_ah *ah, struct efadv_ah_attr *attr, uint32_t inlen)
DV_NULL(L, struct ibv_cq_ex *, efadv_create_cq, struct ibv_context *ctx,
        struct ibv_cq_init_attr_ex *attr_ex, struct efadv_cq_init_attr *efa_attr, uint32_t inlen)

struct efadv_cq *efadv_cq_from_ibv_cq_ex(struct ibv_cq_ex *cq)
{
    dv_say(L, "efadv_cq_from_ibv_cq_ex");
    return NULL;                /* not an EFA CQ */
}
