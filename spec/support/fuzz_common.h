/* fuzz_common.h - what the libFuzzer targets (spec/support/fuzz_*.c) share:
 * the loopback GID their queue pairs use, and how they connect an RC pair. */
#ifndef TBRT_FUZZ_COMMON_H
#define TBRT_FUZZ_COMMON_H

#include <string.h>

#include <infiniband/verbs.h>

#include "tbrt.h"

/* ::ffff:127.0.0.1 */
static const uint8_t fuzz_loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};

/* The index of ::ffff:127.0.0.1 on port 1 (RoCE v2 where typed), or -1. */
static inline int fuzz_loopback_gid(tbrt_dev *dev)
{
    int best = -1;
    for (int i = 0; i < 64; i++) {
        struct ibv_gid_entry g;
        if (tbrt_gid_query(dev, 1, i, &g))
            break;
        if (memcmp(g.gid.raw, fuzz_loopback, 16) == 0 &&
            (best < 0 || g.gid_type == IBV_GID_TYPE_ROCE_V2))
            best = i;
    }
    return best;
}

/* An RC QP through INIT, RTR (to dest_qpn at ::ffff:127.0.0.1 through GID
 * gid_index of port 1) and RTS, as the fuzz targets connect theirs: 0, or
 * the failing modify's result with *at naming the state it was to reach. */
static inline int fuzz_qp_connect(tbrt_qp *qp, uint32_t dest_qpn, int gid_index,
                                  uint8_t ack_timeout, const char **at)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
    *at = "INIT";
    int rc = tbrt_qp_modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                        IBV_QP_ACCESS_FLAGS);
    if (rc)
        return rc;
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
                             .dest_qp_num = dest_qpn, .max_dest_rd_atomic = 4,
                             .min_rnr_timer = 1};
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
    memcpy(a.ah_attr.grh.dgid.raw, fuzz_loopback, 16);
    *at = "RTR";
    rc = tbrt_qp_modify(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                    IBV_QP_MIN_RNR_TIMER);
    if (rc)
        return rc;
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = ack_timeout, .retry_cnt = 1,
                             .rnr_retry = 1, .max_rd_atomic = 4};
    *at = "RTS";
    return tbrt_qp_modify(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                                      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                      IBV_QP_MAX_QP_RD_ATOMIC);
}

#endif
