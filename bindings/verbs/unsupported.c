/* the stubs take the verbs.h signatures, whose arguments they do not need */
#pragma GCC diagnostic ignored "-Wunused-parameter"
/* unsupported.c - the context's entries for what the soft device does not
 * have, each failing as an rdma-core provider without the feature does
 * (NULL with errno EOPNOTSUPP, or EOPNOTSUPP returned) and saying why under
 * TBRT_DEBUG. verbs.h reaches them through the ops and verbs_context tables
 * (ibv_alloc_mw, ibv_bind_mw, ibv_post_srq_ops, ibv_alloc_td,
 * ibv_create_flow, ibv_alloc_dm, ibv_create_wq, ibv_open_xrcd...), which is
 * why they are set rather than left NULL (verbs.h would fail them too, but
 * silently). */
#include "verbs_lib.h"

#define NULL_OP(type, name, why, ...)                                          \
    static type *name(__VA_ARGS__)                                             \
    {                                                                          \
        vb_unsupported("ibv_" #name, "%s", why);                               \
        return NULL;                                                           \
    }
#define INT_OP(name, why, ...)                                                 \
    static int name(__VA_ARGS__)                                               \
    {                                                                          \
        return vb_unsupported("ibv_" #name, "%s", why);                        \
    }

static const char MW[] = "memory windows need device support (binding keys at run time)";
static const char SRQ_OPS[] = "tag-matching SRQ operations need device support";
static const char TD[] = "thread and parent domains: the binding locks each context itself";
static const char FLOW[] = "steering flows and flow actions belong to raw Ethernet devices";
static const char DM[] = "the device has no on-device memory";
static const char CNT[] = "the device has no hardware counters";
static const char WQ[] = "work queues and RSS indirection tables need device support";
static const char XRC[] = "XRC domains need device support";

NULL_OP(struct ibv_mw, alloc_mw, MW, struct ibv_pd *pd, enum ibv_mw_type type)
INT_OP(bind_mw, MW, struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
INT_OP(dealloc_mw, MW, struct ibv_mw *mw)
INT_OP(post_srq_ops, SRQ_OPS, struct ibv_srq *srq, struct ibv_ops_wr *op, struct ibv_ops_wr **bad)
NULL_OP(struct ibv_td, alloc_td, TD, struct ibv_context *c, struct ibv_td_init_attr *a)
INT_OP(dealloc_td, TD, struct ibv_td *td)
NULL_OP(struct ibv_pd, alloc_parent_domain, TD, struct ibv_context *c, struct ibv_parent_domain_init_attr *a)
NULL_OP(struct ibv_flow, create_flow, FLOW, struct ibv_qp *qp, struct ibv_flow_attr *a)
INT_OP(destroy_flow, FLOW, struct ibv_flow *f)
NULL_OP(struct ibv_flow_action, create_flow_action_esp, FLOW, struct ibv_context *c, struct ibv_flow_action_esp_attr *a)
INT_OP(modify_flow_action_esp, FLOW, struct ibv_flow_action *f, struct ibv_flow_action_esp_attr *a)
INT_OP(destroy_flow_action, FLOW, struct ibv_flow_action *f)
NULL_OP(struct ibv_dm, alloc_dm, DM, struct ibv_context *c, struct ibv_alloc_dm_attr *a)
INT_OP(free_dm, DM, struct ibv_dm *dm)
NULL_OP(struct ibv_mr, reg_dm_mr, DM, struct ibv_pd *pd, struct ibv_dm *dm, uint64_t off, size_t len,
        unsigned int access)
NULL_OP(struct ibv_mr, alloc_null_mr, "a null MR (writes discarded) needs device support", struct ibv_pd *pd)
INT_OP(advise_mr, "prefetch advice is for on-demand paging, which the device does not have",
       struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
       struct ibv_sge *sg, uint32_t n)
NULL_OP(struct ibv_counters, create_counters, CNT, struct ibv_context *c, struct ibv_counters_init_attr *a)
INT_OP(destroy_counters, CNT, struct ibv_counters *cn)
INT_OP(read_counters, CNT, struct ibv_counters *cn, uint64_t *v, uint32_t n, uint32_t flags)
INT_OP(attach_counters_point_flow, CNT, struct ibv_counters *cn,
       struct ibv_counter_attach_attr *a, struct ibv_flow *f)
NULL_OP(struct ibv_wq, create_wq, WQ, struct ibv_context *c, struct ibv_wq_init_attr *a)
INT_OP(modify_wq, WQ, struct ibv_wq *wq, struct ibv_wq_attr *a)
INT_OP(destroy_wq, WQ, struct ibv_wq *wq)
NULL_OP(struct ibv_rwq_ind_table, create_rwq_ind_table, WQ, struct ibv_context *c, struct ibv_rwq_ind_table_init_attr *a)
INT_OP(destroy_rwq_ind_table, WQ, struct ibv_rwq_ind_table *t)
NULL_OP(struct ibv_xrcd, open_xrcd, XRC, struct ibv_context *c, struct ibv_xrcd_init_attr *a)
INT_OP(close_xrcd, XRC, struct ibv_xrcd *x)
NULL_OP(struct ibv_qp, open_qp, "opening a shared (XRC) QP needs XRC domains", struct ibv_context *c,
        struct ibv_qp_open_attr *a)
INT_OP(modify_cq, "CQ moderation needs device support (every completion is an event here)",
       struct ibv_cq *cq, struct ibv_modify_cq_attr *a)
INT_OP(modify_qp_rate_limit, "rate limiting needs device support", struct ibv_qp *qp,
       struct ibv_qp_rate_limit_attr *a)

void vb_set_unsupported_ops(struct vb_ctx *c)
{
    struct ibv_context_ops *o = &c->v.context.ops;
    o->alloc_mw = alloc_mw;
    o->bind_mw = bind_mw;
    o->dealloc_mw = dealloc_mw;

    struct verbs_context *v = &c->v;
    v->post_srq_ops = post_srq_ops;
    v->alloc_td = alloc_td;
    v->dealloc_td = dealloc_td;
    v->alloc_parent_domain = alloc_parent_domain;
    v->ibv_create_flow = create_flow;
    v->ibv_destroy_flow = destroy_flow;
    v->create_flow_action_esp = create_flow_action_esp;
    v->modify_flow_action_esp = modify_flow_action_esp;
    v->destroy_flow_action = destroy_flow_action;
    v->alloc_dm = alloc_dm;
    v->free_dm = free_dm;
    v->reg_dm_mr = reg_dm_mr;
    v->alloc_null_mr = alloc_null_mr;
    v->advise_mr = advise_mr;
    v->create_counters = create_counters;
    v->destroy_counters = destroy_counters;
    v->read_counters = read_counters;
    v->attach_counters_point_flow = attach_counters_point_flow;
    v->create_wq = create_wq;
    v->modify_wq = modify_wq;
    v->destroy_wq = destroy_wq;
    v->create_rwq_ind_table = create_rwq_ind_table;
    v->destroy_rwq_ind_table = destroy_rwq_ind_table;
    v->open_xrcd = open_xrcd;
    v->close_xrcd = close_xrcd;
    v->open_qp = open_qp;
    v->modify_cq = modify_cq;
    v->modify_qp_rate_limit = modify_qp_rate_limit;
}
