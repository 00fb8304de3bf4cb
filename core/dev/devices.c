/* devices.c - the device kinds tbrt knows, listing and opening by name, and
 * the helpers every device uses for its error messages. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dev/dev.h"
#include "util/util.h"

/* Selection order: a real RDMA device before the software one for "auto". */
static const struct tbrt_dev_ops *const kinds[] = {
    &tbrt_ibverbs_ops,
    &tbrt_mlx5_ops,
    &tbrt_soft_ops,
};

const struct tbrt_dev_ops *dev_kind(const char *kind)
{
    for (size_t i = 0; i < TBRT_ARRAY_LEN(kinds); i++)
        if (strcmp(kinds[i]->kind, kind) == 0)
            return kinds[i];
    return NULL;
}

const struct tbrt_dev_ops *dev_kind_of(const char *name)
{
    /* soft<N> only: libibverbs names are free ("softroce0", an rxe device) */
    if (strncmp(name, "soft", 4) == 0 && name[4] &&
        strspn(name + 4, "0123456789") == strlen(name + 4))
        return &tbrt_soft_ops;
    if (strncmp(name, "mlx5:", 5) == 0)
        return &tbrt_mlx5_ops;
    return &tbrt_ibverbs_ops;
}

int tbrt_devices(tbrt_devinfo *out, int max)
{
    int total = 0;
    for (size_t i = 0; i < TBRT_ARRAY_LEN(kinds); i++) {
        int room = max - total;
        if (room < 0)
            room = 0;
        int n = kinds[i]->list(room ? out + total : NULL, room);
        if (n > 0)
            total += n;
    }
    return total;
}

void dev_init(tbrt_dev *dev, const struct tbrt_dev_ops *ops, const char *name,
              const char *personality, int flavor)
{
    dev->ops = ops;
    str_copy(dev->name, sizeof dev->name, name);
    str_copy(dev->kind, sizeof dev->kind, ops->kind);
    str_copy(dev->personality, sizeof dev->personality, personality);
    dev->flavor = flavor;
    dev->why[0] = 0;
}

int dev_fail(tbrt_dev *dev, int err, const char *fmt, ...)
{
    char msg[TBRT_WHY_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (dev->personality[0])
        snprintf(dev->why, sizeof dev->why, "%s (%s): %s", dev->name, dev->personality, msg);
    else
        snprintf(dev->why, sizeof dev->why, "%s: %s", dev->name, msg);
    return -err;
}

const char *dev_qp_state_name(int state)
{
    switch (state) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    default: return "?";
    }
}

const char *dev_qp_type_name(int type)
{
    switch (type) {
    case IBV_QPT_RC: return "RC";
    case IBV_QPT_UC: return "UC";
    case IBV_QPT_UD: return "UD";
    case IBV_QPT_RAW_PACKET: return "RAW_PACKET";
    case IBV_QPT_XRC_SEND: return "XRC_SEND";
    case IBV_QPT_XRC_RECV: return "XRC_RECV";
    default: return "?";
    }
}

const char *dev_port_state_name(int state)
{
    switch (state) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "?";
    }
}

const char *dev_gid_type_name(int type)
{
    switch (type) {
    case IBV_GID_TYPE_IB: return "IB";
    case IBV_GID_TYPE_ROCE_V1: return "RoCEv1";
    case IBV_GID_TYPE_ROCE_V2: return "RoCEv2";
    default: return "?";
    }
}

const char *dev_wc_status_name(int status)
{
    static const char *const names[] = {
        [IBV_WC_SUCCESS] = "IBV_WC_SUCCESS (success)",
        [IBV_WC_LOC_LEN_ERR] = "IBV_WC_LOC_LEN_ERR (local length error)",
        [IBV_WC_LOC_QP_OP_ERR] = "IBV_WC_LOC_QP_OP_ERR (local QP operation error)",
        [IBV_WC_LOC_EEC_OP_ERR] = "IBV_WC_LOC_EEC_OP_ERR (local EE context operation error)",
        [IBV_WC_LOC_PROT_ERR] = "IBV_WC_LOC_PROT_ERR (local protection error)",
        [IBV_WC_WR_FLUSH_ERR] = "IBV_WC_WR_FLUSH_ERR (work request flushed)",
        [IBV_WC_MW_BIND_ERR] = "IBV_WC_MW_BIND_ERR (memory window bind error)",
        [IBV_WC_BAD_RESP_ERR] = "IBV_WC_BAD_RESP_ERR (bad response error)",
        [IBV_WC_LOC_ACCESS_ERR] = "IBV_WC_LOC_ACCESS_ERR (local access error)",
        [IBV_WC_REM_INV_REQ_ERR] = "IBV_WC_REM_INV_REQ_ERR (remote invalid request error)",
        [IBV_WC_REM_ACCESS_ERR] = "IBV_WC_REM_ACCESS_ERR (remote access error)",
        [IBV_WC_REM_OP_ERR] = "IBV_WC_REM_OP_ERR (remote operation error)",
        [IBV_WC_RETRY_EXC_ERR] = "IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded)",
        [IBV_WC_RNR_RETRY_EXC_ERR] = "IBV_WC_RNR_RETRY_EXC_ERR (RNR retry counter exceeded)",
        [IBV_WC_LOC_RDD_VIOL_ERR] = "IBV_WC_LOC_RDD_VIOL_ERR (local RDD violation error)",
        [IBV_WC_REM_INV_RD_REQ_ERR] = "IBV_WC_REM_INV_RD_REQ_ERR (remote invalid RD request)",
        [IBV_WC_REM_ABORT_ERR] = "IBV_WC_REM_ABORT_ERR (aborted error)",
        [IBV_WC_INV_EECN_ERR] = "IBV_WC_INV_EECN_ERR (invalid EE context number)",
        [IBV_WC_INV_EEC_STATE_ERR] = "IBV_WC_INV_EEC_STATE_ERR (invalid EE context state)",
        [IBV_WC_FATAL_ERR] = "IBV_WC_FATAL_ERR (fatal error)",
        [IBV_WC_RESP_TIMEOUT_ERR] = "IBV_WC_RESP_TIMEOUT_ERR (response timeout error)",
        [IBV_WC_GENERAL_ERR] = "IBV_WC_GENERAL_ERR (general error)",
        [IBV_WC_TM_ERR] = "IBV_WC_TM_ERR (tag matching error)",
        [IBV_WC_TM_RNDV_INCOMPLETE] = "IBV_WC_TM_RNDV_INCOMPLETE (rendezvous incomplete)",
    };
    if (status < 0 || (size_t)status >= TBRT_ARRAY_LEN(names) || !names[status])
        return "unknown completion status";
    return names[status];
}

void dev_gid_str(const uint8_t gid[16], char *out, size_t outlen)
{
    char buf[INET6_ADDRSTRLEN];
    if (!inet_ntop(AF_INET6, gid, buf, sizeof buf))
        snprintf(buf, sizeof buf, "?");
    str_copy(out, outlen, buf);
}
