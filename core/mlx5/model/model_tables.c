/* model_tables.c - lookups in the model's object tables (mkeys, QPs, CQs,
 * EQs by number) and the status word of a command's output: what the
 * object commands (model_objects.c), the data path (model_data.c) and the
 * firmware (model_fw.c) share, below all three. */
#include <stdint.h>

#include "mlx5/model/model_int.h"
#include "util/util.h"

int model_status(struct model_cmd *c, uint32_t status, uint32_t syndrome)
{
    if (c->outlen >= 8) {
        c->out[0] = (uint8_t)status;
        st_be32(c->out + 4, syndrome);
    }
    return 0;
}

int model_objects_count(struct model *m, struct model_state *st)
{
    for (int i = 0; i < MODEL_MAX_UARS; i++) st->uars += m->uar_used[i];
    for (int i = 0; i < MODEL_MAX_PDS; i++) st->pds += m->pd_used[i];
    for (int i = 0; i < MODEL_MAX_MKEYS; i++) st->mkeys += m->mkeys[i].used;
    for (int i = 0; i < MODEL_MAX_EQS; i++) st->eqs += m->eqs[i].used;
    for (int i = 0; i < MODEL_MAX_CQS; i++) st->cqs += m->cqs[i].used;
    for (int i = 0; i < MODEL_MAX_QPS; i++) st->qps += m->qps[i].used;
    for (int i = 0; i < MODEL_ROCE_ENTRIES; i++) st->roce_entries += m->roce[i].valid;
    return st->uars + st->pds + st->mkeys + st->eqs + st->cqs + st->qps;
}

struct model_mkey *model_mkey_find(struct model *m, uint32_t key)
{
    for (int i = 0; i < MODEL_MAX_MKEYS; i++)
        if (m->mkeys[i].used && m->mkeys[i].key == key)
            return &m->mkeys[i];
    return NULL;
}

struct model_qp *model_qp_find(struct model *m, uint32_t qpn)
{
    for (int i = 0; i < MODEL_MAX_QPS; i++)
        if (m->qps[i].used && m->qps[i].qpn == qpn)
            return &m->qps[i];
    return NULL;
}

struct model_cq *model_cq_find(struct model *m, uint32_t cqn)
{
    uint32_t i = cqn - MODEL_CQN_BASE;
    return i < MODEL_MAX_CQS && m->cqs[i].used ? &m->cqs[i] : NULL;
}

struct model_eq *model_eq_find(struct model *m, uint32_t eqn)
{
    uint32_t i = eqn - MODEL_EQN_BASE;
    return i < MODEL_MAX_EQS && m->eqs[i].used ? &m->eqs[i] : NULL;
}
